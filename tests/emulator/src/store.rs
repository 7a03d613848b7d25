//! Object storage: one map per resource, a global resourceVersion counter, a bounded event
//! history for watches, and the commit operations every write ends in.
//!
//! All state sits behind one mutex with short critical sections: a write computes its new
//! object outside the lock (admission webhooks may run meanwhile) and commits it with the
//! resourceVersion it started from; a stale commit is retried by the caller, as the API server's
//! GuaranteedUpdate loop does.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
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

/// One change, as watchers see it.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub rv: u64,
    /// Storage key of the resource.
    pub resource: String,
    pub namespace: String,
    pub kind: EventType,
    pub object: Arc<Value>,
    /// The state before the change, for selector transitions.
    pub old: Option<Arc<Value>>,
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
    objects: HashMap<String, BTreeMap<ObjKey, Arc<Value>>>,
    rv: u64,
    history: VecDeque<Arc<WatchEvent>>,
    history_cap: usize,
    /// Events at or below this resourceVersion are no longer in the history.
    compacted_rv: u64,
    /// uid -> (resource key, object key) of every stored object.
    uids: HashMap<String, (String, ObjKey)>,
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
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        st.rv += 1;
        let rv = st.rv;
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let obj = Arc::new(obj);
        if let Some(uid) = meta_str(&obj, "uid") {
            st.uids.insert(uid.to_string(), (r.key(), key.clone()));
        }
        let namespace = key.0.clone();
        st.objects
            .entry(r.key())
            .or_default()
            .insert(key, obj.clone());
        st.note_missing_owners(&obj);
        let ev = WatchEvent {
            rv,
            resource: r.key(),
            namespace,
            kind: if old.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            },
            object: obj.clone(),
            old,
        };
        self.publish(st, ev);
        obj
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
        if rv_of(&current) != expected_rv {
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
        if expected_rv.is_some_and(|rv| rv != rv_of(&current)) {
            return Err(ApiError::modified(r, name));
        }
        st.rv += 1;
        let rv = st.rv;
        let mut last = last.unwrap_or_else(|| (*current).clone());
        meta::meta_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
        let last = Arc::new(last);
        if let Some(m) = st.objects.get_mut(&r.key()) {
            m.remove(&key);
        }
        if let Some(uid) = meta_str(&current, "uid") {
            st.uids.remove(uid);
            st.gc_pending.insert(uid.to_string());
        }
        let ev = WatchEvent {
            rv,
            resource: r.key(),
            namespace: ns.to_string(),
            kind: EventType::Deleted,
            object: last.clone(),
            old: Some(current),
        };
        self.publish(&mut st, ev);
        drop(st);
        self.gc_wakeup.notify_one();
        Ok(last)
    }
}

/// One page of a list.
pub struct ListPage {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
}

impl State {
    /// Queues owner references to absent owners for the garbage collector.
    fn note_missing_owners(&mut self, obj: &Value) {
        let Some(refs) = obj["metadata"]["ownerReferences"].as_array() else {
            return;
        };
        for uid in refs.iter().filter_map(|r| r["uid"].as_str()) {
            if !self.uids.contains_key(uid) {
                self.gc_pending.insert(uid.to_string());
            }
        }
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

    pub fn get(&self, r: &ResourceInfo, ns: &str, name: &str) -> Option<Arc<Value>> {
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
            .is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string())
    }

    /// All objects of a resource (optionally in one namespace), in key order.
    pub fn objects_of(&self, key: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
        let Some(map) = self.objects.get(key) else {
            return Vec::new();
        };
        match ns {
            Some(ns) => map
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => map.values().cloned().collect(),
        }
    }

    /// Objects of a resource in one namespace whose names start with `prefix`, in key order
    /// (a range of the ordered map: cost grows with the matches, not the store).
    pub fn objects_with_prefix(&self, key: &str, ns: &str, prefix: &str) -> Vec<Arc<Value>> {
        let Some(map) = self.objects.get(key) else {
            return Vec::new();
        };
        map.range((ns.to_string(), prefix.to_string())..)
            .take_while(|((n, name), _)| n == ns && name.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every stored object with its resource key.
    pub fn all_objects(&self) -> impl Iterator<Item = (&String, &Arc<Value>)> {
        self.objects
            .iter()
            .flat_map(|(k, m)| m.values().map(move |v| (k, v)))
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
        keep: &dyn Fn(&Value) -> bool,
    ) -> (Vec<Arc<Value>>, Option<ObjKey>) {
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
