//! Secondary indexes over the caches, so that "the pods of this site" or "the volumes claimed
//! for this site" cost the matches, not a scan of every cached object (a scan per reconcile is
//! quadratic in the number of Sites).
//!
//! An index is fed the same watch events as its cache, after the cache applied them, so every
//! entry names an object the cache held when the entry was made. A relist is collected and
//! replaces the index when it is done (the cache swaps in the relisted objects at the same
//! point). An index may still hold stale entries (an object relabelled): every lookup re-checks
//! the entries against the cache and drops those that no longer match, so a lookup returns
//! exactly what a filter over the cache would.
//!
//! A key is held as its 64-bit hash (keyed at random per index), not as text: four keys per
//! Site over the three indexes, the text of each was a heap string of 30-50 bytes. Two keys of
//! one hash share an entry; a lookup tells them apart by the objects' keys, which it checks
//! anyway.
//!
//! The key functions of the Site and pod indexes are here; those of the volume index are volume
//! retention's (`volumes.rs`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

use kube::runtime::watcher;

use crate::controller::cache::table::Cache;
use crate::controller::status::SitePod;
use crate::crd::Site;
use crate::render::apps::site_path;

/// Index key of a Site: its public path `/<space>/<name>/` within its namespace (one path, one
/// Site: admission and the route backstop look up who else uses it).
pub fn path_key(site: &Site) -> String {
    path_key_of(
        site.metadata.namespace.as_deref().unwrap_or_default(),
        &site_path(site),
    )
}

/// [`path_key`] of the site path `site_path` (`/<space>/<name>`) in `namespace`.
pub fn path_key_of(namespace: &str, site_path: &str) -> String {
    [namespace, ":", site_path, "/"].concat()
}

/// [`path_key`] as the index key function.
pub fn site_path_keys(site: &Site) -> Vec<String> {
    vec![path_key(site)]
}

/// Index key of a cached site pod: its site id, which the cache keeps only for pods the
/// operator created (operator_bound annotation, [`crate::controller::cache::kept::pod`]); other pods
/// are not indexed.
pub fn pod_keys(p: &SitePod) -> Vec<String> {
    p.site.iter().map(|id| id.to_string()).collect()
}

/// Index keys → identities ([`Cache::Id`]) of the objects of cache `C` that have them; `S`
/// hashes the keys.
pub struct Index<K, C: Cache<K>, S = RandomState> {
    keys: fn(&K) -> Vec<String>,
    hasher: S,
    entries: Arc<Mutex<Entries<K, C>>>,
    /// Entries of a relist in progress (Init .. InitDone).
    relist: Arc<Mutex<Entries<K, C>>>,
}

/// Index key hash → identities. A key names one object or a few (a site's pods, a volume's
/// site).
type Entries<K, C> = HashMap<u64, Ids<<C as Cache<K>>::Id>>;

/// The identities of one key: most keys name one object, held in the entry itself; a list
/// (with room for what it holds only) when there are more.
enum Ids<I> {
    One(I),
    Many(Vec<I>),
}

impl<I: PartialEq> Ids<I> {
    fn contains(&self, id: &I) -> bool {
        match self {
            Ids::One(one) => one == id,
            Ids::Many(many) => many.contains(id),
        }
    }

    fn push(&mut self, id: I) {
        let many = match std::mem::replace(self, Ids::Many(Vec::new())) {
            Ids::One(one) => vec![one, id],
            Ids::Many(mut many) => {
                // Room for this one only: a push would make room for twice as many.
                many.reserve_exact(1);
                many.push(id);
                many
            }
        };
        *self = Ids::Many(many);
    }

    fn len(&self) -> usize {
        match self {
            Ids::One(_) => 1,
            Ids::Many(many) => many.len(),
        }
    }

    /// Keeps the identities `keep` says to keep; false when none is left.
    fn retain(&mut self, mut keep: impl FnMut(&I) -> bool) -> bool {
        match self {
            Ids::One(one) => keep(one),
            Ids::Many(many) => {
                many.retain(|id| keep(id));
                !many.is_empty()
            }
        }
    }
}

impl<K, C: Cache<K>, S: Clone> Clone for Index<K, C, S> {
    fn clone(&self) -> Self {
        Index {
            keys: self.keys,
            hasher: self.hasher.clone(),
            entries: self.entries.clone(),
            relist: self.relist.clone(),
        }
    }
}

impl<K, C: Cache<K>> Index<K, C> {
    /// An empty index; `keys` names the index keys of an object (none: not indexed).
    pub fn new(keys: fn(&K) -> Vec<String>) -> Self {
        Index::with_hasher(keys, RandomState::new())
    }
}

impl<K, C: Cache<K>, S: BuildHasher> Index<K, C, S> {
    /// [`Index::new`] with the keys hashed by `hasher`.
    pub fn with_hasher(keys: fn(&K) -> Vec<String>, hasher: S) -> Self {
        Index {
            keys,
            hasher,
            entries: Arc::default(),
            relist: Arc::default(),
        }
    }

    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn insert(&self, entries: &mut Entries<K, C>, obj: &K) {
        let keys = (self.keys)(obj);
        if keys.is_empty() {
            return;
        }
        let id = C::id(obj);
        for key in keys {
            match entries.entry(self.hash(&key)) {
                Entry::Occupied(ids) if ids.get().contains(&id) => {}
                Entry::Occupied(mut ids) => ids.get_mut().push(id.clone()),
                Entry::Vacant(entry) => {
                    entry.insert(Ids::One(id.clone()));
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries<K, C>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_relist(&self) -> std::sync::MutexGuard<'_, Entries<K, C>> {
        self.relist.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what a watch event tells. Call it after the cache applied the event (a
    /// reflector stream passes events on after applying them).
    pub fn observe(&self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(obj) => self.insert(&mut self.lock(), obj),
            watcher::Event::Init => self.lock_relist().clear(),
            // The cache keeps the relisted objects aside until the relist is done.
            watcher::Event::InitApply(obj) => self.insert(&mut self.lock_relist(), obj),
            watcher::Event::InitDone => {
                let relisted = std::mem::take(&mut *self.lock_relist());
                *self.lock() = relisted;
            }
            watcher::Event::Delete(obj) => {
                let id = C::id(obj);
                let mut entries = self.lock();
                for key in (self.keys)(obj) {
                    let hash = self.hash(&key);
                    if let Some(ids) = entries.get_mut(&hash)
                        && !ids.retain(|i| *i != id)
                    {
                        entries.remove(&hash);
                    }
                }
            }
        }
    }

    /// The objects of `cache` that have `key`, sorted by name.
    pub fn get(&self, cache: &C, key: &str) -> Vec<Arc<K>> {
        self.get_except(cache, key, None)
    }

    /// [`Index::get`] without the object `except` (not even read from the cache, which may
    /// decode what it returns).
    pub fn get_except(&self, cache: &C, key: &str, except: Option<&C::Id>) -> Vec<Arc<K>> {
        let hash = self.hash(key);
        let mut entries = self.lock();
        let Some(ids) = entries.get_mut(&hash) else {
            return Vec::new();
        };
        let mut found = Vec::with_capacity(ids.len());
        let left = ids.retain(|id| {
            if except == Some(id) {
                return true;
            }
            let Some(obj) = cache.get_id(id) else {
                return false;
            };
            let keys = (self.keys)(&obj);
            if keys.iter().any(|k| k == key) {
                found.push(obj);
                true
            } else {
                // Kept when it has another key of the same hash.
                keys.iter().any(|k| self.hash(k) == hash)
            }
        });
        if !left {
            entries.remove(&hash);
        }
        found.sort_by(|a, b| C::name(a).cmp(C::name(b)));
        found
    }

    /// Number of index keys held (tests: stale keys are dropped).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the index holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watched::Pod;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn pod(name: &str, site: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        if let Some(site) = site {
            p.metadata.labels = Some([("site".to_string(), site.to_string())].into());
        }
        p
    }

    fn site_of(p: &Pod) -> Vec<String> {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("site").cloned())
            .into_iter()
            .collect()
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or_default())
            .collect()
    }

    /// Feeds one event to the store and then the index, as the watch stream does.
    fn feed<S: BuildHasher>(
        index: &Index<Pod, reflector::Store<Pod>, S>,
        writer: &mut reflector::store::Writer<Pod>,
        event: Event<Pod>,
    ) {
        writer.apply_watcher_event(&event);
        index.observe(&event);
    }

    /// Hashes every key to 0: all keys share one entry.
    #[derive(Default)]
    struct Collide;

    impl std::hash::Hasher for Collide {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, _: &[u8]) {}
    }

    #[test]
    fn lookups_match_a_filter_over_the_store_through_every_kind_of_event() {
        lookups_match_a_filter_over_the_store(Index::new(site_of));
    }

    #[test]
    fn keys_of_one_hash_are_told_apart() {
        let index = Index::with_hasher(site_of, std::hash::BuildHasherDefault::<Collide>::new());
        lookups_match_a_filter_over_the_store(index);
    }

    fn lookups_match_a_filter_over_the_store<S: BuildHasher>(
        index: Index<Pod, reflector::Store<Pod>, S>,
    ) {
        let (store, mut writer) = reflector::store::<Pod>();
        feed(&index, &mut writer, Event::Init);
        feed(&index, &mut writer, Event::InitApply(pod("a-0", Some("a"))));
        feed(&index, &mut writer, Event::InitApply(pod("b-0", Some("b"))));
        feed(&index, &mut writer, Event::InitApply(pod("x", None)));
        feed(&index, &mut writer, Event::InitDone);
        feed(&index, &mut writer, Event::Apply(pod("a-1", Some("a"))));
        assert_eq!(names(&index.get(&store, "a")), ["a-0", "a-1"]);
        assert_eq!(names(&index.get(&store, "b")), ["b-0"]);
        assert!(index.get(&store, "none").is_empty());

        // Relabelled: the pod moves from one key to the other.
        feed(&index, &mut writer, Event::Apply(pod("a-1", Some("b"))));
        assert_eq!(names(&index.get(&store, "a")), ["a-0"]);
        assert_eq!(names(&index.get(&store, "b")), ["a-1", "b-0"]);
        // Without one of them (which stays indexed).
        let b0 = <reflector::Store<Pod> as Cache<Pod>>::id(&pod("b-0", Some("b")));
        assert_eq!(names(&index.get_except(&store, "b", Some(&b0))), ["a-1"]);
        assert_eq!(names(&index.get(&store, "b")), ["a-1", "b-0"]);

        // Deleted with an event.
        feed(&index, &mut writer, Event::Delete(pod("a-0", Some("a"))));
        assert!(index.get(&store, "a").is_empty());

        // A relist that no longer holds b-0 (deleted while the watch was down: no event) and
        // holds a pod created meanwhile. Until the relist is done the store and the index
        // answer from the previous list; a lookup then must not lose the new pod.
        feed(&index, &mut writer, Event::Init);
        feed(&index, &mut writer, Event::InitApply(pod("a-1", Some("b"))));
        feed(&index, &mut writer, Event::InitApply(pod("c-0", Some("c"))));
        assert_eq!(names(&index.get(&store, "b")), ["a-1", "b-0"]);
        assert!(index.get(&store, "c").is_empty());
        feed(&index, &mut writer, Event::InitDone);
        assert_eq!(names(&index.get(&store, "b")), ["a-1"]);
        assert_eq!(names(&index.get(&store, "c")), ["c-0"]);
        // The relist replaced the index: no key without objects is left (with one hash for
        // all keys, one entry holds both objects).
        assert!(index.get(&store, "a").is_empty());
        let collide = index.hash("b") == index.hash("c");
        assert_eq!(index.len(), if collide { 1 } else { 2 });
        // Looking up one key of a shared entry keeps the objects of the other.
        assert_eq!(names(&index.get(&store, "b")), ["a-1"]);
        assert_eq!(names(&index.get(&store, "c")), ["c-0"]);
    }
}
