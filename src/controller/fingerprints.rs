//! What the operator last wrote of each owned object, as short fingerprints, and what the
//! watches showed since: the record that tells drift (another writer's edit, repaired by the
//! next apply) from the operator's own writes arriving late.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use kube::{Resource, ResourceExt};

use crate::controller::cache::kept::{self, Keep, Kept, Managed};

/// The fingerprints ([`kept::fingerprint`]) of the managed content of the owned objects as the
/// API server returned them after the operator's last write (or, after a restart, as first seen;
/// an edit made while no operator ran is told at first sight by the fields other writers hold,
/// [`crate::controller::cache::held`]): a watch event showing another fingerprint is drift,
/// repaired by the next apply. One short
/// record per object (keyed by its kind and name, hashed), not the objects. The records are
/// spread over [`SHARDS`] tables by key: a table that outgrows its room is copied into one twice
/// its size, old and new held at once, and with 800,000 records (100,000 Sites) one table's copy
/// would be a 25 MiB peak; a shard's is a sixteenth of it (and the workers rarely wait on the
/// same lock).
#[derive(Default)]
pub struct Fingerprints([Mutex<HashMap<u64, Print>>; SHARDS]);

/// How many tables the records are spread over.
const SHARDS: usize = 16;

/// What the operator last wrote of one object, and which version the watch showed last (40
/// bytes: one is kept for every owned object).
struct Print {
    fingerprint: u64,
    /// The desired hash (hashed) of the operator's last write.
    wrote: u64,
    /// The versions ([`short`]) of the last [`SEEN`] watch events, newest first: the event of
    /// the operator's own write may come before the write's response, and other writers' events
    /// (the StatefulSet controller's status) may follow it before that response is read.
    seen: [u32; SEEN],
    /// The version the operator's last write returned, and when ([`tick`]), until the watch
    /// shows it: before that the cache may still hold an older version (events of other writers
    /// queued in between), which is not drift: it was repaired by that write.
    pending: Option<(u32, NonZeroU32)>,
}

impl Print {
    /// Whether the operator's last write is pending: returned but not shown by the watch yet,
    /// for at most [`PENDING`] (then forgotten).
    fn awaited(&mut self) -> bool {
        let Some((_, at)) = self.pending else {
            return false;
        };
        if expired(at) {
            self.pending = None;
            return false;
        }
        true
    }
}

/// How many of an object's latest watch events are remembered.
const SEEN: usize = 4;

/// How long the cache may take to show the operator's own write before older versions count
/// as drift again (a watch that lost the event relists within this time).
pub const PENDING: Duration = Duration::from_secs(10);

/// A [`version`] as a [`Print`] keeps it: 32 bits of its hash. Two versions taken for one by
/// chance (one in four billion) cost at most a write.
fn short(version: u64) -> u32 {
    (version ^ (version >> 32)) as u32
}

/// Tenths of a second since the first call (monotonic; never 0, so that `Option` costs nothing).
pub(crate) fn tick() -> NonZeroU32 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let tenths = EPOCH.get_or_init(Instant::now).elapsed().as_millis() / 100;
    u32::try_from(tenths + 1)
        .ok()
        .and_then(NonZeroU32::new)
        .unwrap_or(NonZeroU32::MAX)
}

/// [`PENDING`] in [`tick`]s.
const PENDING_TICKS: u32 = (PENDING.as_millis() / 100) as u32;

/// Whether [`PENDING`] has passed since the [`tick`] `since`.
pub(crate) fn expired(since: NonZeroU32) -> bool {
    tick().get().saturating_sub(since.get()) >= PENDING_TICKS
}

/// A resourceVersion, compared for equality only (it is opaque), as a number.
pub(crate) fn version(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    crate::labels::hashed(&meta.resource_version)
}

/// The desired hash an object carries (0: none).
fn desired_of<K: Resource>(obj: &K) -> u64 {
    kept::desired_of(obj.meta()).unwrap_or_default()
}

impl Fingerprints {
    fn key<K: Resource>(name: &str) -> u64
    where
        K::DynamicType: Default,
    {
        crate::labels::hashed(&(K::kind(&K::DynamicType::default()), name))
    }

    /// The table holding the record of `key`. Keys are hashes: their low bits pick the shard.
    fn lock(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Print>> {
        self.0[key as usize % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the observed content of the cached copy `stored` differs from what the operator
    /// wrote (asked once the cache has caught up with that write: [`Fingerprints::pending`]).
    pub(crate) fn drifted<K: Keep>(&self, stored: &Kept<K>) -> bool {
        let key = Self::key::<K>(stored.name());
        self.lock(key)
            .get(&key)
            .is_some_and(|print| print.fingerprint != stored.facts.fingerprint)
    }

    /// Whether the operator wrote or saw the object `name` of kind `K` (it has a record).
    pub(crate) fn known<K: Resource>(&self, name: &str) -> bool
    where
        K::DynamicType: Default,
    {
        let key = Self::key::<K>(name);
        self.lock(key).contains_key(&key)
    }

    /// Whether the cache has yet to show the operator's last write of the object `name` of kind
    /// `K` (for at most [`PENDING`]): until it does, a missing or older cached copy says
    /// nothing about the object.
    pub(crate) fn awaited<K: Resource>(&self, name: &str) -> bool
    where
        K::DynamicType: Default,
    {
        let key = Self::key::<K>(name);
        let mut known = self.lock(key);
        known.get_mut(&key).is_some_and(|print| print.awaited())
    }

    /// While the cache has not shown the operator's last write of `desired`'s object (at most
    /// [`PENDING`]), the cached copy is older than that write and says nothing: Some(true) when
    /// that write was `desired` itself (nothing to write), Some(false) when the rendering has
    /// changed since (write). None: the cache has caught up; compare with it.
    pub(crate) fn pending<K: Resource>(&self, desired: &K) -> Option<bool>
    where
        K::DynamicType: Default,
    {
        let key = Self::key::<K>(&desired.name_any());
        let mut known = self.lock(key);
        let print = known.get_mut(&key)?;
        print.awaited().then(|| print.wrote == desired_of(desired))
    }

    /// A watch event: `obj` as the cache keeps it (with its observed fingerprint) and the
    /// [`version`] it had. An object first seen (after a restart, or made by someone else) is
    /// taken as written; once the event shows the operator's last write, the cache has caught up
    /// with it.
    pub fn observe<K: Keep>(&self, obj: &Kept<K>, seen: u64) {
        let seen = short(seen);
        // Only the operator's own objects can drift; others get no record.
        if !obj.facts.managed() {
            return;
        }
        let key = Self::key::<K>(obj.name());
        let mut known = self.lock(key);
        match known.get_mut(&key) {
            Some(print) => {
                // Another rendering, carried by its desired hash, from another replica of the
                // operator (a follower watches the leader's writes; a new leader takes over
                // with the records it kept): taken as written, or every object the previous
                // leader changed would be "restored" by a write. Not while the operator's own
                // write is pending (older versions may still arrive). An edit by someone else
                // keeps the hash (drift), and a changed hash that is not the rendering is
                // written anyway (`Facts::up_to_date`).
                let desired = obj.facts.desired().unwrap_or_default();
                if desired != 0 && desired != print.wrote && print.pending.is_none() {
                    print.fingerprint = obj.facts.fingerprint;
                    print.wrote = desired;
                }
                print.seen.copy_within(..SEEN - 1, 1);
                print.seen[0] = seen;
                if print.pending.is_some_and(|(v, _)| v == seen) {
                    print.pending = None;
                }
            }
            None => {
                known.insert(
                    key,
                    Print {
                        fingerprint: obj.facts.fingerprint,
                        wrote: obj.facts.desired().unwrap_or_default(),
                        seen: std::array::from_fn(|i| if i == 0 { seen } else { 0 }),
                        pending: None,
                    },
                );
            }
        }
    }

    pub(crate) fn written<K: Resource + Managed>(&self, obj: &K)
    where
        K::DynamicType: Default,
    {
        let key = Self::key::<K>(&obj.name_any());
        let returned = short(version(obj.meta()));
        let mut known = self.lock(key);
        let seen = known.get(&key).map(|p| p.seen).unwrap_or_default();
        // The watch may deliver the write (and events after it) before its response is read.
        let pending = (!seen.contains(&returned)).then(|| (returned, tick()));
        known.insert(
            key,
            Print {
                fingerprint: kept::fingerprint(obj),
                wrote: desired_of(obj),
                seen,
                pending,
            },
        );
    }

    /// Forgets a deleted object.
    pub fn forget<K: Resource>(&self, name: &str)
    where
        K::DynamicType: Default,
    {
        let key = Self::key::<K>(name);
        self.lock(key).remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::apply::stamp;
    use crate::controller::apply::tests::cm;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn a_print_stays_small() {
        // One for every owned object: 80,000 at 10,000 Sites.
        assert_eq!(std::mem::size_of::<Print>(), 40);
        assert!(tick() <= tick(), "monotonic");
    }

    /// A replica that watched the leader write a new rendering takes it as written when it
    /// leads: no write; an edit that keeps the hash annotation is still drift.
    #[test]
    fn another_replicas_rendering_is_taken_as_written() {
        let prints = Fingerprints::default();
        let event = |data: &str, rv: &str, edited: bool| {
            let mut c = cm(data, "u");
            stamp(&mut c);
            if edited {
                c.data.as_mut().unwrap().insert("k".into(), "edited".into());
            }
            c.metadata.resource_version = Some(rv.into());
            let v = version(&c.metadata);
            let kept = Kept::new(c);
            prints.observe(&kept, v);
            kept
        };
        assert!(!prints.drifted(&event("1", "1", false)), "first seen");
        assert!(
            !prints.drifted(&event("2", "2", false)),
            "the leader's new rendering"
        );
        assert!(
            prints.drifted(&event("2", "3", true)),
            "an edit keeping the hash"
        );
        assert!(
            !prints.drifted(&event("3", "4", false)),
            "the leader's repair and rendering"
        );
    }

    #[test]
    fn drift_is_a_fingerprint_other_than_the_written_one() {
        let prints = Fingerprints::default();
        // A watch event: the object as cached (slimmed, with its fingerprint) and its version.
        let event = |data: &str, rv: &str| {
            let mut c = cm(data, "u");
            c.metadata.resource_version = Some(rv.into());
            let v = version(&c.metadata);
            let kept = Kept::new(c);
            prints.observe(&kept, v);
            kept
        };
        // What the operator renders (and writes, with the version the API server returns).
        let rendered = |data: &str| {
            let mut c = cm(data, "u");
            stamp(&mut c);
            c
        };
        let write = |data: &str, rv: &str| {
            let mut c = rendered(data);
            c.metadata.resource_version = Some(rv.into());
            prints.written(&c);
        };
        // First seen (a restart): taken as written.
        let first = event("1", "1");
        assert_eq!(prints.pending(&rendered("1")), None);
        assert!(!prints.drifted(&first));
        assert!(prints.drifted(&event("edited", "2")), "an edit after that");
        // The operator's write repairs it; until the watch shows the write, the cache may still
        // hold versions in between (another writer's status update): they say nothing, and the
        // same rendering is not written again; another rendering is.
        write("1", "4");
        event("edited", "3");
        assert_eq!(
            prints.pending(&rendered("1")),
            Some(true),
            "older than the write"
        );
        assert_eq!(
            prints.pending(&rendered("9")),
            Some(false),
            "a new rendering"
        );
        let mine = event("1", "4");
        assert_eq!(prints.pending(&rendered("1")), None, "the write itself");
        assert!(!prints.drifted(&mine));
        assert!(
            prints.drifted(&event("edited again", "5")),
            "after the write"
        );
        // The watch may show the write before its response is read.
        let shown = event("2", "6");
        write("2", "6");
        assert_eq!(prints.pending(&rendered("2")), None);
        assert!(!prints.drifted(&shown));
        // Status and metadata other than the managed content are not drift.
        let mut relabelled = cm("2", "u");
        relabelled.labels_mut().insert("extra".into(), "x".into());
        relabelled.metadata.resource_version = Some("8".into());
        let v = version(&relabelled.metadata);
        let relabelled = Kept::new(relabelled);
        prints.observe(&relabelled, v);
        assert!(!prints.drifted(&relabelled));
        // A deleted object is forgotten: its successor is taken as written on first sight.
        prints.forget::<ConfigMap>("a");
        assert!(!prints.drifted(&event("3", "9")));
        // An object of another manager gets no record, so it never drifts.
        let mut foreign = cm("4", "u");
        foreign.labels_mut().clear();
        foreign.metadata.name = Some("foreign".into());
        let foreign = Kept::new(foreign);
        prints.observe(&foreign, 1);
        let foreign = Fingerprints::key::<ConfigMap>("foreign");
        assert!(prints.lock(foreign).get(&foreign).is_none());
        // The watch may show the write and other writers' events after it (the StatefulSet
        // controller's status) before the write's response is read.
        event("5", "61");
        event("5", "62");
        let shown = event("5", "63");
        write("5", "61");
        assert_eq!(
            prints.pending(&rendered("5")),
            None,
            "shown before the response"
        );
        assert!(!prints.drifted(&shown));
        write("5", "65");
        assert_eq!(prints.pending(&rendered("5")), Some(true), "not shown yet");
        assert!(prints.awaited::<ConfigMap>("a"), "not shown yet");
        assert!(!prints.awaited::<ConfigMap>("b"), "never written");
        event("5", "65");
        assert_eq!(prints.pending(&rendered("5")), None, "shown");
        assert!(!prints.awaited::<ConfigMap>("a"), "shown");
    }
}
