//! The operator's caches. Sites, owned objects as [`Kept`] records, site pods as [`SitePod`]s
//! and volumes are kept by name in a [`Table`] filled from a watch as kube's reflector store is (a
//! re-list is collected and replaces the table when it is complete), without what a reflector
//! store keeps besides each object (its `ObjectMeta` and an object reference with four strings
//! as the key). Sites and volumes are held [`Packed`]: as their JSON text, decoded on each read.
//! The operator watches these kinds in its own namespace only (volumes are cluster-scoped), so
//! the name is the key. [`Cache`] is what the watches and the indexes need of either kind of
//! cache.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::controller::cache::kept::{Keep, Kept};
use crate::controller::status::{FailedCreate, SitePod};
use crate::crd::Site;

/// Where a watch keeps its objects: a [`Table`], or kube's reflector store (in tests, to show
/// that a table answers as the store does).
pub trait Cache<K>: Clone + Send + Sync + 'static {
    /// What identifies an object in the cache (and across a re-list).
    type Id: Eq + Hash + Clone + Send + Sync + 'static;
    fn id(obj: &K) -> Self::Id;
    /// The object's name (lookups return objects sorted by it).
    fn name(obj: &K) -> &str;
    /// The cached object `id`.
    fn get_id(&self, id: &Self::Id) -> Option<Arc<K>>;
    /// Every cached object.
    fn all(&self) -> Vec<Arc<K>>;
    /// The id of every cached object.
    fn ids(&self) -> Vec<Self::Id> {
        self.all().iter().map(|o| Self::id(o)).collect()
    }
    /// The cached copy of the object an event is about.
    fn cached(&self, obj: &K) -> Option<Arc<K>> {
        self.get_id(&Self::id(obj))
    }
    /// The watch feeding the cache failed: it may miss objects until its next event.
    fn watch_failed(&self) {}
}

impl<K> Cache<K> for Store<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    type Id = ObjectRef<K>;

    /// The reference without its extra information (uid and version, which comparisons
    /// ignore), so that an index keeps no copy of them.
    fn id(obj: &K) -> ObjectRef<K> {
        let mut id = ObjectRef::from(obj);
        id.extra = Default::default();
        id
    }

    fn name(obj: &K) -> &str {
        obj.meta().name.as_deref().unwrap_or_default()
    }

    fn get_id(&self, id: &ObjectRef<K>) -> Option<Arc<K>> {
        self.get(id)
    }

    fn all(&self) -> Vec<Arc<K>> {
        self.state()
    }
}

/// What a [`Table`] keeps: values with a name.
pub trait Named: Clone {
    fn name(&self) -> &str;
}

impl<K: Keep> Named for Kept<K> {
    fn name(&self) -> &str {
        Kept::name(self)
    }
}

/// Sites: the operator watches one namespace.
impl Named for Site {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

/// Volumes: cluster-scoped, so their name is unique.
impl Named for crate::watched::Volume {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

impl Named for FailedCreate {
    fn name(&self) -> &str {
        &self.event
    }
}

impl Named for SitePod {
    fn name(&self) -> &str {
        &self.name
    }
}

impl<V, H> Cache<V> for Table<V, H>
where
    V: Named + Send + Sync + 'static,
    H: Hold<V>,
{
    type Id = Box<str>;

    fn id(obj: &V) -> Box<str> {
        obj.name().into()
    }

    fn name(obj: &V) -> &str {
        obj.name()
    }

    fn get_id(&self, id: &Box<str>) -> Option<Arc<V>> {
        self.get(id)
    }

    fn all(&self) -> Vec<Arc<V>> {
        self.state()
    }

    fn ids(&self) -> Vec<Box<str>> {
        self.read().iter().map(|e| e.0.name().into()).collect()
    }

    fn cached(&self, obj: &V) -> Option<Arc<V>> {
        self.get(obj.name())
    }

    fn watch_failed(&self) {
        self.inner.live.store(false, Ordering::Relaxed);
    }
}

/// How a [`Table`] holds a value: shared as it came (`Arc<V>`), or [`Packed`].
pub trait Hold<V>: Held {
    /// What a read takes of the held value under the table's lock: cheap to take, opened into
    /// the value (decoded, for a packed one) once the lock is released.
    type Handle;
    fn hold(value: &V) -> Self;
    fn handle(&self) -> Self::Handle;
    fn open(handle: Self::Handle) -> Arc<V>;
}

/// A held value's name (what the table's entries are hashed and compared by).
pub trait Held: Send + Sync + 'static {
    fn name(&self) -> &str;
}

impl<V: Named + Send + Sync + 'static> Held for Arc<V> {
    fn name(&self) -> &str {
        self.as_ref().name()
    }
}

impl<V: Named + Send + Sync + 'static> Hold<V> for Arc<V> {
    type Handle = Arc<V>;

    fn hold(value: &V) -> Self {
        Arc::new(value.clone())
    }

    fn handle(&self) -> Arc<V> {
        self.clone()
    }

    fn open(handle: Arc<V>) -> Arc<V> {
        handle
    }
}

/// What a [`Packed`] table keeps of each value besides its text: a summary that can be counted
/// without decoding the values.
pub trait Pack:
    Named + serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static
{
    type Summary: Copy + Send + Sync + 'static;
    fn summary(&self) -> Self::Summary;
}

/// What the gauges count of a Site, kept beside its packed text: its phase (`sites_by_phase`)
/// and whether it is paused (`sites_paused`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteSummary {
    pub phase: Option<crate::crd::Phase>,
    pub paused: bool,
    /// Its Available condition is True.
    pub available: bool,
}

impl Pack for Site {
    type Summary = SiteSummary;
    fn summary(&self) -> Self::Summary {
        SiteSummary {
            phase: self.status.as_ref().and_then(|s| s.phase),
            paused: self.paused(),
            available: crate::controller::status::available(self.status.as_ref()),
        }
    }
}

/// Volumes are only read.
impl Pack for crate::watched::Volume {
    type Summary = ();
    fn summary(&self) {}
}

/// A value held as its JSON text, compressed, and decoded again on every read: under half the
/// memory of a Site kept as the struct (a struct with a dozen optional fields in its metadata,
/// a string and a map node for each of its few values), for a kind the operator reads a few
/// times per reconcile but keeps for every object of the namespace. The text is compressed
/// (LZ4) against [`DICTIONARY`], a typical Site and volume: what every Site's text repeats
/// (field names, the conditions' reasons and messages, the operator's labels) costs a few
/// bytes each (a 1.7 KB Site text keeps 0.4 KB).
pub struct Packed<V: Pack> {
    name: Box<str>,
    text: Arc<[u8]>,
    summary: V::Summary,
}

/// What [`Packed`] texts are compressed against: the JSON text of a typical volume and Site,
/// as the caches keep them. Any text works (it is only where repeated bytes are looked up);
/// one close to the values makes them smaller.
static DICTIONARY: &[u8] = include_bytes!("packed.dict");

impl<V: Pack> Held for Packed<V> {
    fn name(&self) -> &str {
        &self.name
    }
}

impl<V: Pack> Hold<V> for Packed<V> {
    type Handle = Arc<[u8]>;

    fn hold(value: &V) -> Self {
        // Serialising a value of a derived `Serialize` into memory cannot fail (no maps with
        // other keys than strings).
        let json = serde_json::to_vec(value).unwrap_or_default();
        Packed {
            name: value.name().into(),
            text: lz4_flex::block::compress_prepend_size_with_dict(&json, DICTIONARY).into(),
            summary: value.summary(),
        }
    }

    fn handle(&self) -> Arc<[u8]> {
        self.text.clone()
    }

    fn open(text: Arc<[u8]>) -> Arc<V> {
        // The text is the table's own encoding of a value of this type (tested).
        let json = lz4_flex::block::decompress_size_prepended_with_dict(&text, DICTIONARY)
            .expect("a packed value decompresses");
        Arc::new(serde_json::from_slice(&json).expect("a packed value decodes"))
    }
}

impl<V: Pack> Table<V, Packed<V>> {
    /// The summary of every value.
    pub fn summaries(&self) -> Vec<V::Summary> {
        self.read().iter().map(|e| e.0.summary).collect()
    }
}

impl Table<Site, Packed<Site>> {
    /// The name of every Site, those that are not Available first, each part by name: the order
    /// in which a rollout takes them (ROL-01).
    pub fn names_by_availability(&self) -> Vec<String> {
        let mut names: Vec<(bool, String)> = self
            .read()
            .iter()
            .map(|e| (e.0.summary.available, e.0.name().to_string()))
            .collect();
        names.sort();
        names.into_iter().map(|(_, name)| name).collect()
    }
}

/// Values of one kind by name, held as `H` holds them.
pub struct Table<V, H = Arc<V>> {
    inner: Arc<Inner<H>>,
    kind: std::marker::PhantomData<fn() -> V>,
}

/// The records of one owned kind.
pub type Records<K> = Table<Kept<K>>;

/// The Sites, packed.
pub type Sites = Table<Site, Packed<Site>>;

/// The volumes, packed.
pub type Volumes = Table<crate::watched::Volume, Packed<crate::watched::Volume>>;

/// The values by name: a set of entries hashed and compared by the value's name, so that the
/// name is not kept a second time as a key.
type Map<H> = HashSet<Entry<H>>;

struct Entry<H>(H);

impl<H: Held> Hash for Entry<H> {
    fn hash<S: std::hash::Hasher>(&self, state: &mut S) {
        // As `str` hashes: lookups by `&str` go through `Borrow<str>`.
        self.0.name().hash(state)
    }
}

impl<H: Held> PartialEq for Entry<H> {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl<H: Held> Eq for Entry<H> {}

impl<H: Held> std::borrow::Borrow<str> for Entry<H> {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

struct Inner<H> {
    values: RwLock<Map<H>>,
    /// The values of a re-list in progress.
    relist: Mutex<Option<Map<H>>>,
    /// True once the first list is complete.
    ready: tokio::sync::watch::Sender<bool>,
    /// Whether the watch is known to deliver: a list is complete and no watch error came since
    /// the last event ([`Table::live`]).
    live: AtomicBool,
}

impl<V, H> Clone for Table<V, H> {
    fn clone(&self) -> Self {
        Table {
            inner: self.inner.clone(),
            kind: std::marker::PhantomData,
        }
    }
}

impl<V, H> Default for Table<V, H> {
    fn default() -> Self {
        Table {
            inner: Arc::new(Inner {
                values: RwLock::default(),
                relist: Mutex::default(),
                ready: tokio::sync::watch::channel(false).0,
                live: AtomicBool::new(false),
            }),
            kind: std::marker::PhantomData,
        }
    }
}

impl<V: Named, H: Hold<V>> Table<V, H> {
    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<V>> {
        let handle = self.read().get(name).map(|e| e.0.handle())?;
        Some(H::open(handle))
    }

    /// Every value.
    pub fn state(&self) -> Vec<Arc<V>> {
        let handles: Vec<H::Handle> = self.read().iter().map(|e| e.0.handle()).collect();
        handles.into_iter().map(H::open).collect()
    }

    /// The name of every value.
    pub fn names(&self) -> Vec<String> {
        self.read().iter().map(|e| e.0.name().to_string()).collect()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until the first list is complete.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.inner.ready.subscribe();
        let _ = ready.wait_for(|r| *r).await;
    }

    /// Whether the cache follows the cluster as closely as a watch can: its list is complete,
    /// and no watch error came since its last event. When not, an object missing from it may
    /// exist (created while the watch was down): the reconciler reads it before writing.
    pub fn live(&self) -> bool {
        self.inner.live.load(Ordering::Relaxed)
    }

    /// Applies a watch event, as kube's reflector store does.
    pub fn apply(&self, event: &watcher::Event<V>) {
        let relist = || self.inner.relist.lock().unwrap_or_else(|e| e.into_inner());
        let live = |on: bool| self.inner.live.store(on, Ordering::Relaxed);
        match event {
            watcher::Event::Apply(obj) => {
                self.write().replace(Entry(H::hold(obj)));
                live(true);
            }
            watcher::Event::Delete(obj) => {
                self.write().remove(obj.name());
                live(true);
            }
            watcher::Event::Init => {
                *relist() = Some(Map::default());
                live(false);
            }
            watcher::Event::InitApply(obj) => {
                if let Some(map) = relist().as_mut() {
                    map.replace(Entry(H::hold(obj)));
                }
            }
            watcher::Event::InitDone => {
                let listed = relist().take().unwrap_or_default();
                *self.write() = listed;
                live(true);
                self.inner.ready.send_replace(true);
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Map<H>> {
        self.inner.values.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map<H>> {
        self.inner.values.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use watcher::Event;

    fn cm(name: &str, data: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "sites"},
            "data": {"k": data}
        }))
        .unwrap()
    }

    /// A table is live from its first complete list until its watch fails, and again from the
    /// next event; not during a re-list.
    #[test]
    fn live_from_a_complete_list_until_a_watch_error_and_again_from_the_next_event() {
        let records = Records::<ConfigMap>::default();
        let kept = |name: &str| Kept::new(cm(name, "1"));
        assert!(!records.live(), "before the first list");
        records.apply(&Event::Init);
        records.apply(&Event::InitApply(kept("a")));
        assert!(!records.live(), "during the list");
        records.apply(&Event::InitDone);
        assert!(records.live());
        Cache::watch_failed(&records);
        assert!(!records.live(), "after a watch error");
        records.apply(&Event::Apply(kept("b")));
        assert!(records.live(), "an event came");
        Cache::watch_failed(&records);
        records.apply(&Event::Delete(kept("b")));
        assert!(records.live(), "a deletion came");
        records.apply(&Event::Init);
        assert!(!records.live(), "a re-list");
        records.apply(&Event::InitDone);
        assert!(records.live());
    }

    /// The records hold after every event what kube's reflector store holds.
    #[tokio::test]
    async fn records_follow_watch_events_as_a_reflector_store() {
        let records = Records::<ConfigMap>::default();
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let events = vec![
            Event::Init,
            Event::InitApply(cm("a", "1")),
            Event::InitApply(cm("b", "1")),
            Event::InitDone,
            Event::Apply(cm("a", "2")),
            Event::Apply(cm("c", "1")),
            Event::Delete(cm("b", "1")),
            // A re-list after a watch gap: c was deleted meanwhile, d created.
            Event::Init,
            Event::InitApply(cm("a", "3")),
            Event::InitApply(cm("d", "1")),
            Event::InitDone,
            Event::Delete(cm("zz", "1")),
        ];
        let ready = {
            let records = records.clone();
            tokio::spawn(async move { records.wait_until_ready().await })
        };
        for (i, event) in events.into_iter().enumerate() {
            writer.apply_watcher_event(&event);
            let kept = match event {
                Event::Apply(o) => Event::Apply(Kept::new(o)),
                Event::Delete(o) => Event::Delete(Kept::new(o)),
                Event::InitApply(o) => Event::InitApply(Kept::new(o)),
                Event::Init => Event::Init,
                Event::InitDone => Event::InitDone,
            };
            records.apply(&kept);
            let mut expected: Vec<(String, u64)> = store
                .state()
                .iter()
                .map(|o| {
                    let k = Kept::new(o.as_ref().clone());
                    (k.name().to_string(), k.facts.fingerprint)
                })
                .collect();
            let mut got: Vec<(String, u64)> = records
                .state()
                .iter()
                .map(|k| (k.name().to_string(), k.facts.fingerprint))
                .collect();
            expected.sort();
            got.sort();
            assert_eq!(got, expected, "after event {i}");
            assert_eq!(records.len(), expected.len());
            for (name, print) in &expected {
                assert_eq!(records.get(name).map(|k| k.facts.fingerprint), Some(*print));
            }
        }
        tokio::time::timeout(std::time::Duration::from_secs(5), ready)
            .await
            .expect("ready after the first list")
            .unwrap();
        assert!(records.get("b").is_none() && records.get("c").is_none());
    }

    /// A packed table answers the Sites it was given, field for field (what the reconciler and
    /// the watch's change tests compare).
    #[test]
    fn packed_sites_read_back_as_they_were_kept() {
        let rich: Site = serde_json::from_value(serde_json::json!({
            "apiVersion": "sites.ecmwf.int/v1",
            "kind": "Site",
            "metadata": {
                "name": "docs-handbook", "namespace": "sites", "uid": "u-1",
                "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2026-12-01T10:00:00Z",
                "deletionTimestamp": "2026-12-02T10:00:00Z",
                "deletionGracePeriodSeconds": 0,
                "finalizers": ["sites.ecmwf.int/cleanup"],
                "labels": {"team": "docs", "empty": ""},
                "annotations": {"sites.ecmwf.int/upgrade-request": "u-2", "note": "a \"quoted\" é"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u-3"}]
            },
            "spec": {
                "name": "handbook", "owner": "jdoe", "type": "static",
                "description": "Team handbook", "created_by": "jdoe", "updated_by": "jroe",
                "created_at": "2026-01-01", "updated_at": "2026-02-01",
                "configuration": {
                    "space": "docs", "enabled": false,
                    "applications": [
                        {"name": "static"},
                        {"name": "app", "image": "r/app:1", "port": 8080,
                         "env": {"A": "1"}, "annotations": {"x": "y"},
                         "paths": [{"path": "/api", "pathType": "Prefix"}]}
                    ],
                    "headers": {"X-Frame-Options": "SAMEORIGIN"},
                    "quota": "2Gi", "retention_date": "2027-12-31",
                    "share": {"administrator_users": ["jdoe"], "users": ["u"], "groups": ["g"]},
                    "settings": {"replicas": 2, "monitored": true, "error_handling": "strict",
                                 "resource_limits": {"cpu": "500m", "memory": "256Mi"},
                                 "routing": {"weight": 1}},
                    "routing": {"host": "h", "tls": {"on": true}}
                }
            },
            "status": {
                "phase": "Running", "path": "/docs/handbook/", "all_steps_started": true,
                "observedGeneration": 3,
                "problems": [{"name": "web", "kind": "Pod", "reason": "r", "message": "m"}],
                "conditions": [{"type": "Available", "status": "True", "reason": "Ready",
                                "message": "ok", "lastTransitionTime": "2026-12-01T10:01:00Z",
                                "observedGeneration": 3}]
            }
        }))
        .expect("a Site");
        let status = rich.status.as_ref().expect("status");
        assert!(status.problems.len() == 1 && status.conditions.len() == 1);
        assert!(status.all_steps_started.is_some() && rich.spec.configuration.routing.is_some());
        assert!(rich.spec.configuration.settings.resource_limits.is_some());
        let bare: Site = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bare"},
            "spec": {"name": "bare", "owner": "o", "type": "static", "configuration": {"space": "s"}}
        }))
        .expect("a Site");
        let sites = Sites::default();
        for site in [&rich, &bare] {
            // Compressed, also a Site unlike the dictionary's.
            let json = serde_json::to_vec(site).unwrap();
            let packed = Packed::<Site>::hold(site);
            assert!(
                packed.text.len() < json.len() / 2,
                "{} of {} bytes",
                packed.text.len(),
                json.len()
            );
            sites.apply(&Event::Apply(site.clone()));
            let read = sites.get(Named::name(site)).expect("held");
            assert_eq!(&*read, site);
            assert_eq!(
                serde_json::to_value(&*read).unwrap(),
                serde_json::to_value(site).unwrap()
            );
        }
        assert_eq!(sites.len(), 2);
        assert_eq!(sites.names().len(), 2);
        assert_eq!(
            sites
                .summaries()
                .iter()
                .filter(|s| s.phase.is_some())
                .count(),
            1,
            "one Site has a phase"
        );
        sites.apply(&Event::Delete(bare.clone()));
        assert!(sites.get("bare").is_none());
        assert_eq!(sites.state().len(), 1);
    }

    /// Volumes too.
    #[test]
    fn packed_volumes_read_back_as_they_were_kept() {
        let volume: crate::watched::Volume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv-1", "labels": {"sites.ecmwf.int/id": "docs-handbook"},
                         "annotations": {"sites.ecmwf.int/x": "y"}},
            "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "namespace": "sites",
                                  "name": "data-docs-handbook-0", "uid": "u-9"}},
            "status": {"phase": "Released"}
        }))
        .expect("a volume");
        assert!(
            volume
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_some()
        );
        let volumes = Volumes::default();
        volumes.apply(&Event::Apply(volume.clone()));
        assert_eq!(volumes.get("pv-1").as_deref(), Some(&volume));
    }
}
