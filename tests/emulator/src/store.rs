//! Object storage: one map per resource, a global resourceVersion counter, a bounded event
//! history for watches, and the commit operations every write ends in.
//!
//! Objects are kept as their compact JSON ([`Stored`]: the text [`crate::wire`] writes for an
//! object), not as parsed trees: a parsed `serde_json` object is a B-tree whose every map
//! (however small) takes a node of room for eleven members, and managed fields are deep nests
//! of small maps, so a tree costs several times its text. GET, list and watch write the text
//! out as it is; readers that need the tree parse it ([`Stored::value`]). Beside the text,
//! each [`Stored`] keeps what the indexes and the selectors read without parsing: uid,
//! resourceVersion, labels, owner uids, deletion state. The garbage collector's questions
//! (dependents of an owner, objects in foreground deletion) are answered from indexes kept at
//! each commit, not by scanning the store.
//!
//! All state sits behind one mutex with short critical sections: a write computes its new
//! object outside the lock (admission webhooks may run meanwhile) and commits it with the
//! resourceVersion it started from; a stale commit is retried by the caller, as the API server's
//! GuaranteedUpdate loop does.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

use crate::meta::{self, meta_str, rv_of};
use crate::registry::{Registry, ResourceInfo};
use crate::status::ApiError;

/// Watch event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// A stored object: its compact JSON as the API server writes it (kind, apiVersion and
/// metadata first, the other members in sorted order: [`crate::wire::object_to_string`]), and
/// the facts the store's indexes and the selectors read without parsing it.
#[derive(Debug)]
pub struct Stored {
    json: Box<str>,
    /// Length of the `"kind":..,"apiVersion":..,` members right after the opening brace, when
    /// dropping them gives the object's list-item form (built-in list items carry no type);
    /// 0 when that form has to be written from the parsed object.
    type_meta: u32,
    rv: u64,
    /// Whether `metadata.deletionTimestamp` is set.
    deleting: bool,
    /// Deleting, with the `foregroundDeletion` finalizer.
    foreground: bool,
    uid: Option<Box<str>>,
    /// `metadata.labels` as JSON, when it is a non-empty object.
    labels: Option<Box<str>>,
    /// The uids of `metadata.ownerReferences`.
    owners: Box<[Box<str>]>,
}

impl Stored {
    /// Keeps `obj` (a complete object).
    pub fn new(obj: &Value) -> Stored {
        let json = crate::wire::object_to_string(obj);
        let meta = &obj["metadata"];
        let rv = rv_of(obj);
        let deleting = meta["deletionTimestamp"].is_string();
        let foreground = deleting
            && meta["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == "foregroundDeletion"));
        let labels = meta["labels"]
            .as_object()
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::to_string(l)
                    .unwrap_or_default()
                    .into_boxed_str()
            });
        let owners = meta["ownerReferences"]
            .as_array()
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| r["uid"].as_str().map(Box::from))
                    .collect()
            })
            .unwrap_or_default();
        Stored {
            type_meta: type_meta_len(obj, &json),
            json: json.into_boxed_str(),
            rv,
            deleting,
            foreground,
            uid: meta_str(obj, "uid").map(Box::from),
            labels,
            owners,
        }
    }

    /// The object, parsed.
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }

    /// The object as the API server writes it (no trailing newline).
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The object without `kind` and `apiVersion`, as a built-in list writes its items.
    pub fn item_json(&self) -> Cow<'_, str> {
        if self.type_meta > 0 {
            let rest = &self.json[1 + self.type_meta as usize..];
            return Cow::Owned(format!("{{{rest}"));
        }
        let mut v = self.value();
        if let Some(m) = v.as_object_mut() {
            m.remove("apiVersion");
            m.remove("kind");
        }
        Cow::Owned(crate::wire::object_to_string(&v))
    }

    /// The resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// Whether a deletionTimestamp is set.
    pub fn deleting(&self) -> bool {
        self.deleting
    }

    /// The uids its ownerReferences name.
    pub fn owners(&self) -> &[Box<str>] {
        &self.owners
    }

    /// The string-valued labels (as [`crate::selector::LabelSelector::matches_object`] reads
    /// them).
    pub fn labels(&self) -> BTreeMap<String, String> {
        let Some(text) = &self.labels else {
            return BTreeMap::new();
        };
        serde_json::from_str::<BTreeMap<String, Value>>(text)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k, s)),
                _ => None,
            })
            .collect()
    }
}

/// The length of the leading `"kind":K,"apiVersion":A,` members of `json` (the object form of
/// `obj`) when writing the rest after `{` is exactly how [`crate::wire`] writes `obj` without
/// them; 0 otherwise (no such members, nothing after them, or a member set the writer orders
/// differently without a kind: an event's `type` and `object`, a Table's or Status's members).
fn type_meta_len(obj: &Value, json: &str) -> u32 {
    let Some(m) = obj.as_object() else {
        return 0;
    };
    let (Some(kind), Some(av)) = (m.get("kind"), m.get("apiVersion")) else {
        return 0;
    };
    if m.len() < 3
        || matches!(kind.as_str(), Some("Table" | "Status"))
        || (m.contains_key("type") && m.contains_key("object"))
    {
        return 0;
    }
    let prefix = format!("\"kind\":{kind},\"apiVersion\":{av},");
    if json[1..].starts_with(&prefix) {
        prefix.len() as u32
    } else {
        0
    }
}

/// One change, as watchers see it.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub rv: u64,
    /// Storage key of the resource.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub kind: EventType,
    pub object: Arc<Stored>,
    /// The state before the change, for selector transitions.
    pub old: Option<Arc<Stored>>,
}

/// Key of an object within its resource: (namespace, name); cluster-scoped objects use "".
pub type ObjKey = (String, String);

/// Why a commit failed.
#[derive(Debug)]
pub enum CommitError {
    /// The object changed since the caller read it: recompute and retry.
    Stale,
    Api(ApiError),
}

impl From<ApiError> for CommitError {
    fn from(e: ApiError) -> Self {
        CommitError::Api(e)
    }
}

/// The mutable state.
pub struct State {
    pub registry: Registry,
    objects: HashMap<String, BTreeMap<ObjKey, Arc<Stored>>>,
    rv: u64,
    history: VecDeque<Arc<WatchEvent>>,
    history_cap: usize,
    /// Events at or below this resourceVersion are no longer in the history.
    compacted_rv: u64,
    /// uid -> (resource key, object key) of every stored object.
    uids: HashMap<String, (String, ObjKey)>,
    /// Owner uid -> its dependents (resource key, object key), from their ownerReferences.
    dependents: HashMap<Box<str>, BTreeSet<(String, ObjKey)>>,
    /// Owner uids some dependent may not see alive (absent, or in another namespace): the
    /// collector looks at their dependents on each pass until none is left.
    suspects: HashSet<Box<str>>,
    /// Objects in foreground deletion (resource key, object key).
    foreground: BTreeSet<(String, ObjKey)>,
    /// Owner uids whose dependents the garbage collector should look at.
    pub gc_pending: HashSet<String>,
    /// Set while an owner waits in foreground deletion: the collector then keeps looking.
    pub foreground_active: bool,
}

/// Shared store handle.
pub struct Store {
    state: Mutex<State>,
    events: broadcast::Sender<Arc<WatchEvent>>,
    /// Woken after deletions, for the garbage collector.
    pub gc_wakeup: Notify,
}

impl Store {
    pub fn new(registry: Registry, history_cap: usize) -> Store {
        let (events, _) = broadcast::channel(65_536);
        Store {
            state: Mutex::new(State {
                registry,
                objects: HashMap::new(),
                rv: 1,
                history: VecDeque::new(),
                history_cap,
                compacted_rv: 1,
                uids: HashMap::new(),
                dependents: HashMap::new(),
                suspects: HashSet::new(),
                foreground: BTreeSet::new(),
                gc_pending: HashSet::new(),
                foreground_active: false,
            }),
            events,
            gc_wakeup: Notify::new(),
        }
    }

    /// Locks the state. Never held across an await.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Subscribes to live events; call with the state locked to avoid gaps.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.events.subscribe()
    }

    fn publish(&self, state: &mut State, ev: WatchEvent) {
        let ev = Arc::new(ev);
        state.history.push_back(ev.clone());
        while state.history.len() > state.history_cap {
            if let Some(old) = state.history.pop_front() {
                state.compacted_rv = old.rv;
            }
        }
        let _ = self.events.send(ev);
    }

    /// Stores a new object. `obj` is complete except resourceVersion.
    pub fn commit_create(&self, r: &ResourceInfo, obj: Value) -> Result<Arc<Value>, ApiError> {
        let mut st = self.lock();
        let ns = meta_str(&obj, "namespace").unwrap_or_default().to_string();
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        if r.namespaced && !st.namespace_exists(&ns) {
            return Err(ApiError::namespace_not_found(&ns));
        }
        if r.namespaced && st.namespace_terminating(&ns) {
            return Err(ApiError::forbidden(
                r,
                &name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            ));
        }
        let key = (ns.clone(), name.clone());
        if st
            .objects
            .get(&r.key())
            .is_some_and(|m| m.contains_key(&key))
        {
            return Err(ApiError::already_exists(r, &name));
        }
        Ok(self.store_and_publish(&mut st, r, key, obj, None))
    }

    /// Stamps the next resourceVersion, stores the object and tells the watchers (ADDED when
    /// there was no `old` state, MODIFIED otherwise).
    fn store_and_publish(
        &self,
        st: &mut State,
        r: &ResourceInfo,
        key: ObjKey,
        mut obj: Value,
        old: Option<Arc<Stored>>,
    ) -> Arc<Value> {
        st.rv += 1;
        let rv = st.rv;
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let stored = Arc::new(Stored::new(&obj));
        if let Some(uid) = meta_str(&obj, "uid") {
            st.uids.insert(uid.to_string(), (r.key(), key.clone()));
        }
        let (namespace, name) = key.clone();
        st.reindex(&r.key(), &key, old.as_deref(), Some(stored.as_ref()));
        st.objects
            .entry(r.key())
            .or_default()
            .insert(key, stored.clone());
        st.note_missing_owners(&obj);
        let ev = WatchEvent {
            rv,
            resource: r.key(),
            namespace,
            name,
            kind: if old.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            },
            object: stored,
            old,
        };
        self.publish(st, ev);
        Arc::new(obj)
    }

    /// Replaces a stored object read at `expected_rv`. An object with a deletionTimestamp and
    /// no finalizers left is removed instead.
    pub fn commit_update(
        &self,
        r: &ResourceInfo,
        expected_rv: u64,
        obj: Value,
    ) -> Result<Arc<Value>, CommitError> {
        let mut st = self.lock();
        let ns = meta_str(&obj, "namespace").unwrap_or_default().to_string();
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let key = (ns.clone(), name.clone());
        let current = st
            .objects
            .get(&r.key())
            .and_then(|m| m.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(r, &name))?;
        if current.rv() != expected_rv {
            return Err(CommitError::Stale);
        }
        let finalizers_left = obj["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if obj["metadata"]["deletionTimestamp"].is_string() && !finalizers_left {
            drop(st);
            return self
                .commit_remove(r, &ns, &name, Some(expected_rv), Some(obj))
                .map_err(CommitError::Api);
        }
        Ok(self.store_and_publish(&mut st, r, key, obj, Some(current)))
    }

    /// Removes an object (optionally checking the resourceVersion read). `last` replaces the
    /// stored state in the DELETED event (e.g. with its finalizers removed).
    pub fn commit_remove(
        &self,
        r: &ResourceInfo,
        ns: &str,
        name: &str,
        expected_rv: Option<u64>,
        last: Option<Value>,
    ) -> Result<Arc<Value>, ApiError> {
        let mut st = self.lock();
        let key = (ns.to_string(), name.to_string());
        let current = st
            .objects
            .get(&r.key())
            .and_then(|m| m.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(r, name))?;
        if expected_rv.is_some_and(|rv| rv != current.rv()) {
            return Err(ApiError::modified(r, name));
        }
        st.rv += 1;
        let rv = st.rv;
        let mut last = last.unwrap_or_else(|| current.value());
        meta::meta_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
        let stored = Arc::new(Stored::new(&last));
        let last = Arc::new(last);
        if let Some(m) = st.objects.get_mut(&r.key()) {
            m.remove(&key);
        }
        st.reindex(&r.key(), &key, Some(&current), None);
        if let Some(uid) = current.uid() {
            st.uids.remove(uid);
            st.gc_pending.insert(uid.to_string());
            if st.dependents.contains_key(uid) {
                st.suspects.insert(uid.into());
            }
        }
        let ev = WatchEvent {
            rv,
            resource: r.key(),
            namespace: ns.to_string(),
            name: name.to_string(),
            kind: EventType::Deleted,
            object: stored,
            old: Some(current),
        };
        self.publish(&mut st, ev);
        drop(st);
        self.gc_wakeup.notify_one();
        Ok(last)
    }
}

impl State {
    /// Queues owner references to absent owners for the garbage collector; owners absent or
    /// in another namespace stay suspects until their dependents are gone.
    fn note_missing_owners(&mut self, obj: &Value) {
        let Some(refs) = obj["metadata"]["ownerReferences"].as_array() else {
            return;
        };
        let namespace = meta_str(obj, "namespace").unwrap_or_default();
        for uid in refs.iter().filter_map(|r| r["uid"].as_str()) {
            match self.uids.get(uid) {
                None => {
                    self.gc_pending.insert(uid.to_string());
                    self.suspects.insert(uid.into());
                }
                Some((_, (owner_ns, _))) if !owner_ns.is_empty() && owner_ns != namespace => {
                    self.suspects.insert(uid.into());
                }
                Some(_) => {}
            }
        }
    }

    /// Keeps the dependents and foreground indexes up to date as the object at `key` of
    /// resource `resource` goes from `old` to `new` (None: absent).
    fn reindex(
        &mut self,
        resource: &str,
        key: &ObjKey,
        old: Option<&Stored>,
        new: Option<&Stored>,
    ) {
        let entry = || (resource.to_string(), key.clone());
        let owners = |o: Option<&Stored>| o.map(Stored::owners).unwrap_or_default().to_vec();
        let (before, after) = (owners(old), owners(new));
        if before != after {
            for uid in &before {
                if let Some(set) = self.dependents.get_mut(uid) {
                    set.remove(&entry());
                    if set.is_empty() {
                        self.dependents.remove(uid);
                        self.suspects.remove(uid);
                    }
                }
            }
            for uid in after {
                self.dependents.entry(uid).or_default().insert(entry());
            }
        }
        match (
            old.is_some_and(|o| o.foreground),
            new.is_some_and(|o| o.foreground),
        ) {
            (false, true) => {
                self.foreground.insert(entry());
            }
            (true, false) => {
                self.foreground.remove(&entry());
            }
            _ => {}
        }
    }

    /// The objects the garbage collector looks at on a pass: the dependents of the owners in
    /// `pending` and of the suspect owners, with their resource keys, in key order.
    pub fn gc_candidates(&self, pending: &HashSet<String>) -> Vec<(String, Arc<Stored>)> {
        let mut keys: BTreeSet<&(String, ObjKey)> = BTreeSet::new();
        for uid in pending
            .iter()
            .map(String::as_str)
            .chain(self.suspects.iter().map(|u| &**u))
        {
            if let Some(set) = self.dependents.get(uid) {
                keys.extend(set);
            }
        }
        keys.into_iter()
            .filter_map(|(r, k)| Some((r.clone(), self.objects.get(r)?.get(k)?.clone())))
            .collect()
    }

    /// The objects in foreground deletion, with their resource keys.
    pub fn in_foreground_deletion(&self) -> Vec<(String, Arc<Value>)> {
        self.foreground
            .iter()
            .filter_map(|(r, k)| Some((r.clone(), Arc::new(self.objects.get(r)?.get(k)?.value()))))
            .collect()
    }

    /// The dependents of the owner `uid` (the objects whose ownerReferences name it), with
    /// their resource keys.
    pub fn dependents_of(&self, uid: &str) -> Vec<(String, Arc<Value>)> {
        let Some(set) = self.dependents.get(uid) else {
            return Vec::new();
        };
        set.iter()
            .filter_map(|(r, k)| Some((r.clone(), Arc::new(self.objects.get(r)?.get(k)?.value()))))
            .collect()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion a watch can start from.
    pub fn compacted_rv(&self) -> u64 {
        self.compacted_rv
    }

    /// Drops the whole event history (test hook): older watch positions become 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted_rv = self.rv;
    }

    /// An object, parsed.
    pub fn get(&self, r: &ResourceInfo, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.get_stored(r, ns, name).map(|o| Arc::new(o.value()))
    }

    /// An object as stored.
    pub fn get_stored(&self, r: &ResourceInfo, ns: &str, name: &str) -> Option<Arc<Stored>> {
        self.objects
            .get(&r.key())?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Whether an object with this uid exists, and where.
    pub fn by_uid(&self, uid: &str) -> Option<&(String, ObjKey)> {
        self.uids.get(uid)
    }

    pub fn namespace_exists(&self, ns: &str) -> bool {
        self.objects
            .get("namespaces")
            .is_some_and(|m| m.contains_key(&(String::new(), ns.to_string())))
    }

    fn namespace_terminating(&self, ns: &str) -> bool {
        self.objects
            .get("namespaces")
            .and_then(|m| m.get(&(String::new(), ns.to_string())))
            .is_some_and(|o| o.deleting())
    }

    /// All objects of a resource (optionally in one namespace), in key order, as stored.
    pub fn stored_of(&self, key: &str, ns: Option<&str>) -> Vec<(ObjKey, Arc<Stored>)> {
        let Some(map) = self.objects.get(key) else {
            return Vec::new();
        };
        match ns {
            Some(ns) => map
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }

    /// All objects of a resource (optionally in one namespace), in key order, parsed.
    pub fn objects_of(&self, key: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
        self.stored_of(key, ns)
            .into_iter()
            .map(|(_, o)| Arc::new(o.value()))
            .collect()
    }

    /// Objects of a resource in one namespace whose names start with `prefix`, in key order
    /// (a range of the ordered map: cost grows with the matches, not the store).
    pub fn objects_with_prefix(&self, key: &str, ns: &str, prefix: &str) -> Vec<Arc<Value>> {
        let Some(map) = self.objects.get(key) else {
            return Vec::new();
        };
        map.range((ns.to_string(), prefix.to_string())..)
            .take_while(|((n, name), _)| n == ns && name.starts_with(prefix))
            .map(|(_, v)| Arc::new(v.value()))
            .collect()
    }

    /// Number of stored objects.
    pub fn object_count(&self) -> usize {
        self.objects.values().map(BTreeMap::len).sum()
    }

    /// A page of objects after `start` (exclusive), filtered by `keep`.
    pub fn list_page(
        &self,
        r: &ResourceInfo,
        ns: Option<&str>,
        after: Option<&ObjKey>,
        limit: Option<usize>,
        keep: &dyn Fn(&Stored) -> bool,
    ) -> (Vec<Arc<Stored>>, Option<ObjKey>) {
        let Some(map) = self.objects.get(&r.key()) else {
            return (Vec::new(), None);
        };
        let lower = match (after, ns) {
            (Some(k), _) => std::ops::Bound::Excluded(k.clone()),
            (None, Some(ns)) => std::ops::Bound::Included((ns.to_string(), String::new())),
            (None, None) => std::ops::Bound::Unbounded,
        };
        let mut items = Vec::new();
        let mut last = None;
        for (k, v) in map.range((lower, std::ops::Bound::Unbounded)) {
            if let Some(ns) = ns
                && k.0 != ns
            {
                break;
            }
            if !keep(v) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                return (items, last);
            }
            items.push(v.clone());
            last = Some(k.clone());
        }
        (items, None)
    }

    /// Events after `rv` for a resource, or Err when `rv` is older than the kept history.
    pub fn events_since(&self, key: &str, rv: u64) -> Result<Vec<Arc<WatchEvent>>, u64> {
        if rv < self.compacted_rv {
            return Err(self.compacted_rv);
        }
        Ok(self
            .history
            .iter()
            .filter(|e| e.rv > rv && e.resource == key)
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored text, the list-item form and the parsed object are what the wire writer and
    /// the parser give for the object itself, whatever the members.
    #[test]
    fn stored_text_is_the_wire_form() {
        for v in [
            json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a", "labels": {"x": "1"}},
                   "spec": {"z": 1.5, "a": [{"b": {}, "a": null}]}, "status": {}}),
            json!({"kind": "Thing", "apiVersion": "g/v1", "metadata": {"name": "e"},
                   "type": "t", "object": {"kind": "K", "apiVersion": "v1", "a": 1}}),
            json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {},
                   "rows": [{"object": {"metadata": {}, "kind": "K"}}]}),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "code": 404,
                   "status": "Failure"}),
            json!({"kind": "Only", "apiVersion": "v1"}),
            json!({"apiVersion": "v1", "metadata": {"name": "n\"q"}, "items": [{"b": 1, "kind": "K"}]}),
        ] {
            let s = Stored::new(&v);
            assert_eq!(s.json(), crate::wire::object_to_string(&v));
            assert_eq!(s.value(), v);
            let mut item = v.clone();
            if let Some(m) = item.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
            assert_eq!(s.item_json(), crate::wire::object_to_string(&item), "{v}");
        }
    }

    #[test]
    fn the_head_is_read_from_the_object() {
        let v = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {
            "name": "a", "uid": "u", "resourceVersion": "42", "labels": {"a": "b", "n": 1},
            "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["foregroundDeletion"],
            "ownerReferences": [{"uid": "o1"}, {"uid": "o2"}, {"name": "no uid"}]}});
        let s = Stored::new(&v);
        assert_eq!(s.rv(), 42);
        assert_eq!(s.uid(), Some("u"));
        assert!(s.deleting() && s.foreground);
        assert_eq!(s.owners(), [Box::from("o1"), Box::from("o2")]);
        assert_eq!(
            s.labels(),
            BTreeMap::from([("a".to_string(), "b".to_string())])
        );
    }
}
