//! The operator's caches. Sites, owned objects as [`Kept`] records, site pods as [`SitePod`]s
//! and volumes are kept by name in a [`Table`] filled from a watch as kube's reflector store is (a
//! re-list is collected and replaces the table when it is complete), without what a reflector
//! store keeps besides each object (its `ObjectMeta` and an object reference with four strings
//! as the key). The operator watches these kinds in its own namespace only (volumes are
//! cluster-scoped), so the name is the key. [`Cache`] is what the watches and the indexes need of either kind of cache.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, Mutex, RwLock};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::controller::slim::{Keep, Kept};
use crate::controller::status::SitePod;
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
    /// The cached copy of the object an event is about.
    fn cached(&self, obj: &K) -> Option<Arc<K>> {
        self.get_id(&Self::id(obj))
    }
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

impl Named for SitePod {
    fn name(&self) -> &str {
        &self.name
    }
}

impl<V: Named + Send + Sync + 'static> Cache<V> for Table<V> {
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

    fn cached(&self, obj: &V) -> Option<Arc<V>> {
        self.get(obj.name())
    }
}

/// Values of one kind by name.
pub struct Table<V> {
    inner: Arc<Inner<V>>,
}

/// The records of one owned kind.
pub type Records<K> = Table<Kept<K>>;

/// The values by name: a set of entries hashed and compared by the value's name, so that the
/// name is not kept a second time as a key.
type Map<V> = HashSet<Entry<V>>;

struct Entry<V>(Arc<V>);

impl<V: Named> Hash for Entry<V> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes: lookups by `&str` go through `Borrow<str>`.
        self.0.name().hash(state)
    }
}

impl<V: Named> PartialEq for Entry<V> {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl<V: Named> Eq for Entry<V> {}

impl<V: Named> std::borrow::Borrow<str> for Entry<V> {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

struct Inner<V> {
    values: RwLock<Map<V>>,
    /// The values of a re-list in progress.
    relist: Mutex<Option<Map<V>>>,
    /// True once the first list is complete.
    ready: tokio::sync::watch::Sender<bool>,
}

impl<V> Clone for Table<V> {
    fn clone(&self) -> Self {
        Table {
            inner: self.inner.clone(),
        }
    }
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table {
            inner: Arc::new(Inner {
                values: RwLock::default(),
                relist: Mutex::default(),
                ready: tokio::sync::watch::channel(false).0,
            }),
        }
    }
}

impl<V: Named> Table<V> {
    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<V>> {
        self.read().get(name).map(|e| e.0.clone())
    }

    /// Every value.
    pub fn state(&self) -> Vec<Arc<V>> {
        self.read().iter().map(|e| e.0.clone()).collect()
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

    /// Applies a watch event, as kube's reflector store does.
    pub fn apply(&self, event: &watcher::Event<V>) {
        let relist = || self.inner.relist.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(obj) => {
                self.write().replace(Entry(Arc::new(obj.clone())));
            }
            watcher::Event::Delete(obj) => {
                self.write().remove(obj.name());
            }
            watcher::Event::Init => *relist() = Some(Map::default()),
            watcher::Event::InitApply(obj) => {
                if let Some(map) = relist().as_mut() {
                    map.replace(Entry(Arc::new(obj.clone())));
                }
            }
            watcher::Event::InitDone => {
                let listed = relist().take().unwrap_or_default();
                *self.write() = listed;
                self.inner.ready.send_replace(true);
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Map<V>> {
        self.inner.values.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map<V>> {
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
}
