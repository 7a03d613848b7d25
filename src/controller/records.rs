//! The caches of the owned kinds: [`Kept`] records by name, filled from a watch as kube's
//! reflector store is (a re-list is collected and replaces the records when it is complete),
//! without what a reflector store keeps besides each object (its `ObjectMeta` and an object
//! reference with four strings as the key). Every owned object lives in the operator's
//! namespace, so the name is the key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use kube::runtime::watcher;

use crate::controller::slim::{Keep, Kept};

/// The records of one owned kind.
pub struct Records<K: Keep> {
    inner: Arc<Inner<K>>,
}

type Map<K> = HashMap<Box<str>, Arc<Kept<K>>>;

struct Inner<K: Keep> {
    records: RwLock<Map<K>>,
    /// The records of a re-list in progress.
    relist: Mutex<Option<Map<K>>>,
    /// True once the first list is complete.
    ready: tokio::sync::watch::Sender<bool>,
}

impl<K: Keep> Clone for Records<K> {
    fn clone(&self) -> Self {
        Records {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Keep> Default for Records<K> {
    fn default() -> Self {
        Records {
            inner: Arc::new(Inner {
                records: RwLock::default(),
                relist: Mutex::default(),
                ready: tokio::sync::watch::channel(false).0,
            }),
        }
    }
}

impl<K: Keep> Records<K> {
    /// The record of the object `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Kept<K>>> {
        self.read().get(name).cloned()
    }

    /// Every record.
    pub fn state(&self) -> Vec<Arc<Kept<K>>> {
        self.read().values().cloned().collect()
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
    pub fn apply(&self, event: &watcher::Event<Kept<K>>) {
        let relist = || self.inner.relist.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(obj) => {
                self.write()
                    .insert(obj.name().into(), Arc::new(obj.clone()));
            }
            watcher::Event::Delete(obj) => {
                self.write().remove(obj.name());
            }
            watcher::Event::Init => *relist() = Some(Map::default()),
            watcher::Event::InitApply(obj) => {
                if let Some(map) = relist().as_mut() {
                    map.insert(obj.name().into(), Arc::new(obj.clone()));
                }
            }
            watcher::Event::InitDone => {
                let listed = relist().take().unwrap_or_default();
                *self.write() = listed;
                self.inner.ready.send_replace(true);
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Map<K>> {
        self.inner.records.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map<K>> {
        self.inner
            .records
            .write()
            .unwrap_or_else(|e| e.into_inner())
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
