//! The one record of the operator's own writes: for each owned object ([`Objects`]) and each
//! Site's status ([`Statuses`]), what the operator last wrote and whether the watch has shown
//! it yet. It tells another writer's edit (drift of an object, a status someone else wrote:
//! repaired) from the operator's own write arriving late (nothing to do), and a cache that is
//! merely older than the operator's last write from one that shows the cluster.
//!
//! One vocabulary for both:
//! - **sending** (statuses): the write is about to be sent; its watch event may come before
//!   its answer;
//! - **answered**: the API server answered the write (an object: with what it stored);
//! - **observe**: a watch event, called once the cache holds it;
//! - **awaited**: answered and not shown by the watch yet: the cached copy is older than the
//!   write and says nothing about it, for at most [`PENDING`] (one expiry for both, counted in
//!   [`tick`]s), after which the cache is believed again;
//! - **drifted** (objects) / **is_ours** (statuses): whether what the watch shows is the
//!   operator's write;
//! - **forget**: the object or the Site is gone.
//!
//! The watches ([`crate::controller::watches`]) call `observe`; the reconcile's writes
//! ([`crate::controller::apply`], `reconcile::write_status`) call `sending` and `answered`.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use kube::{Resource, ResourceExt};

use crate::controller::cache::kept::{self, Keep, Kept, Managed};
use crate::crd::SiteStatus;

/// The record of the operator's own writes, objects and statuses ([the module](self)).
#[derive(Default)]
pub struct OwnWrites {
    pub objects: Objects,
    pub statuses: Statuses,
}

/// The fingerprints ([`kept::fingerprint`]) of the managed content of the owned objects as the
/// API server returned them after the operator's last write (or, after a restart, as first seen;
/// an edit made while no operator ran is told at first sight by the fields other writers hold,
/// [`crate::controller::cache::held`]): a watch event showing another fingerprint is drift,
/// repaired by the next apply. One short record per object (keyed by its kind and name,
/// hashed), not the objects. The records are spread over [`SHARDS`] tables by key: a table that
/// outgrows its room is copied into one twice its size, old and new held at once, and with
/// 800,000 records (100,000 Sites) one table's copy would be a 25 MiB peak; a shard's is a
/// sixteenth of it (and the workers rarely wait on the same lock).
#[derive(Default)]
pub struct Objects([Mutex<HashMap<u64, ObjectRecord>>; SHARDS]);

/// How many tables the records are spread over.
const SHARDS: usize = 16;

/// What the operator last wrote of one object, and which version the watch showed last (40
/// bytes: one is kept for every owned object).
struct ObjectRecord {
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

impl ObjectRecord {
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

/// A [`version`] as a [`ObjectRecord`] keeps it: 32 bits of its hash. Two versions taken for one by
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
    crate::digest::hashed(&meta.resource_version)
}

/// The desired hash an object carries (0: none).
fn desired_of<K: Resource>(obj: &K) -> u64 {
    kept::desired_of(obj.meta()).unwrap_or_default()
}

impl Objects {
    fn key<K: Resource>(name: &str) -> u64
    where
        K::DynamicType: Default,
    {
        crate::digest::hashed(&(K::kind(&K::DynamicType::default()), name))
    }

    /// The table holding the record of `key`. Keys are hashes: their low bits pick the shard.
    fn lock(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, ObjectRecord>> {
        self.0[key as usize % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the observed content of the cached copy `stored` differs from what the operator
    /// wrote (asked once the cache has caught up with that write: [`Objects::pending`]).
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
                    ObjectRecord {
                        fingerprint: obj.facts.fingerprint,
                        wrote: obj.facts.desired().unwrap_or_default(),
                        seen: std::array::from_fn(|i| if i == 0 { seen } else { 0 }),
                        pending: None,
                    },
                );
            }
        }
    }

    pub(crate) fn answered<K: Resource + Managed>(&self, obj: &K)
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
            ObjectRecord {
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

/// The last two statuses the operator wrote to each Site, hashed. A Site update that changes only
/// the status is the operator's own write (nothing to do) when the new status is one of them, and
/// someone else's edit otherwise: the Site is queued, and its reconcile writes back what the status
/// mapping says. Two, because the event of one write may arrive after the next write was sent.
///
/// Each also knows whether the Site watch has shown the last write yet ([`Shown`]): until it
/// has, the cached Site is older than that write, and a reconcile that maps the status to that
/// same write has nothing to write.
///
/// Sites are keyed by their name's 64-bit hash: two names taken for one (one chance in 2^64)
/// would cost a status write or leave an edited status until the next change.
#[derive(Default)]
pub struct Statuses(Mutex<HashMap<u64, StatusRecord>>);

/// The statuses written to one Site: the last two digests, newest first, and where the last
/// write stands.
#[derive(Clone, Copy)]
struct StatusRecord {
    digests: [u64; 2],
    shown: Shown,
}

/// Where the operator's last status write to a Site stands, as the Site watch sees it. The watch
/// delivers a Site's versions in order: until it shows the write, what it shows is older.
#[derive(Clone, Copy, Debug)]
enum Shown {
    /// Sent, no answer yet, not shown.
    Sending,
    /// Sent, and shown (or re-listed) before its answer came.
    Early,
    /// Stored (answered) at this [`tick`] and not shown yet: the cached Site is older than the
    /// write, for at most [`PENDING`].
    Awaited(NonZeroU32),
    /// Shown, failed, or re-listed: the cache is to be believed.
    Settled,
}

impl Statuses {
    fn digest(status: &SiteStatus) -> u64 {
        crate::digest::hashed(&serde_json::to_vec(status).unwrap_or_default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, StatusRecord>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn key(site: &str) -> u64 {
        crate::digest::hashed(site)
    }

    /// Records `status` as written to `site` (before the write is sent: its watch event may come
    /// before the write's response). [`Statuses::answered`] says how the write went.
    pub fn sending(&self, site: &str, status: &SiteStatus) {
        let digest = Self::digest(status);
        let mut written = self.lock();
        match written.get_mut(&Self::key(site)) {
            Some(last) => {
                last.digests = [digest, last.digests[0]];
                last.shown = Shown::Sending;
            }
            None => {
                written.insert(
                    Self::key(site),
                    StatusRecord {
                        digests: [digest, digest],
                        shown: Shown::Sending,
                    },
                );
            }
        }
    }

    /// The answer to the last recorded write to `site`: stored (`ok`) or not.
    pub fn answered(&self, site: &str, ok: bool) {
        if let Some(last) = self.lock().get_mut(&Self::key(site)) {
            last.shown = match last.shown {
                Shown::Sending if ok => Shown::Awaited(tick()),
                _ => Shown::Settled,
            };
        }
    }

    /// The Site watch shows `site` with `status` (once the cache holds it); `relisted`: as one
    /// of a re-list's objects, which are at least as new as every answered write.
    pub fn observe(&self, site: &str, status: Option<&SiteStatus>, relisted: bool) {
        let ours = status.map(Self::digest);
        if let Some(last) = self.lock().get_mut(&Self::key(site)) {
            let shown = relisted || ours == Some(last.digests[0]);
            last.shown = match last.shown {
                Shown::Sending if shown => Shown::Early,
                Shown::Awaited(_) if shown => Shown::Settled,
                other => other,
            };
        }
    }

    /// Whether `status` is the last one the operator wrote to `site` (None: it wrote none since
    /// it started or since the Site was forgotten).
    pub fn last_is(&self, site: &str, status: &SiteStatus) -> Option<bool> {
        let last = self
            .lock()
            .get(&Self::key(site))
            .map(|last| last.digests[0])?;
        Some(last == Self::digest(status))
    }

    /// Whether `status` is the last one the operator wrote to `site`, stored and not yet shown by
    /// the Site watch: the cached Site is older than that write, and there is nothing to write.
    pub fn awaited(&self, site: &str, status: &SiteStatus) -> bool {
        let digest = Self::digest(status);
        let mut written = self.lock();
        let Some(last) = written.get_mut(&Self::key(site)) else {
            return false;
        };
        let Shown::Awaited(at) = last.shown else {
            return false;
        };
        if expired(at) {
            last.shown = Shown::Settled;
            return false;
        }
        last.digests[0] == digest
    }

    /// Whether `status` is one the operator wrote to `site` (the last or the one before it).
    pub fn is_ours(&self, site: &str, status: Option<&SiteStatus>) -> bool {
        let Some(status) = status else {
            return false;
        };
        let digest = Self::digest(status);
        self.lock()
            .get(&Self::key(site))
            .is_some_and(|last| last.digests.contains(&digest))
    }

    /// Forgets a deleted Site.
    pub fn forget(&self, site: &str) {
        self.lock().remove(&Self::key(site));
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
        assert_eq!(std::mem::size_of::<ObjectRecord>(), 40);
        assert!(tick() <= tick(), "monotonic");
    }

    /// A replica that watched the leader write a new rendering takes it as written when it
    /// leads: no write; an edit that keeps the hash annotation is still drift.
    #[test]
    fn another_replicas_rendering_is_taken_as_written() {
        let prints = Objects::default();
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
        let prints = Objects::default();
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
            prints.answered(&c);
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
        let foreign = Objects::key::<ConfigMap>("foreign");
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

    /// Three distinct statuses: Pending, Running, Failed.
    fn statuses() -> [SiteStatus; 3] {
        use crate::crd::Phase;
        [Phase::Pending, Phase::Running, Phase::Failed].map(|phase| SiteStatus {
            phase: Some(phase),
            ..Default::default()
        })
    }

    #[test]
    fn the_last_written_status_is_known_per_site() {
        let [pending, running, _] = statuses();
        let written = Statuses::default();
        assert_eq!(written.last_is("a", &running), None);
        written.sending("a", &pending);
        written.sending("a", &running);
        assert_eq!(written.last_is("a", &running), Some(true));
        assert_eq!(written.last_is("a", &pending), Some(false));
        assert_eq!(written.last_is("b", &running), None);
        written.forget("a");
        assert_eq!(written.last_is("a", &running), None);
    }

    /// A stored status write is awaited until the Site watch shows it (or a re-list shows the
    /// Site); what the watch shows before it is older. A write that failed, or was shown before
    /// its answer, is not awaited.
    #[test]
    fn a_stored_status_is_awaited_until_the_watch_shows_it() {
        let [pending, running, failed] = statuses();
        let written = Statuses::default();
        assert!(!written.awaited("a", &pending), "nothing written");
        // Sent, answered, then shown.
        written.sending("a", &pending);
        assert!(!written.awaited("a", &pending), "no answer yet");
        written.answered("a", true);
        assert!(written.awaited("a", &pending));
        assert!(!written.awaited("a", &running), "only the status written");
        assert!(!written.awaited("b", &pending), "per Site");
        written.observe("a", None, false);
        assert!(
            written.awaited("a", &pending),
            "an older version of the Site"
        );
        written.observe("a", Some(&pending), false);
        assert!(!written.awaited("a", &pending), "shown");
        // The status before the last write is older; the last write shown settles it.
        written.sending("a", &running);
        written.answered("a", true);
        written.observe("a", Some(&pending), false);
        assert!(written.awaited("a", &running), "the one before");
        written.observe("a", Some(&running), false);
        assert!(!written.awaited("a", &running));
        // Shown before the answer: not awaited once answered.
        written.sending("a", &failed);
        written.observe("a", Some(&failed), false);
        written.answered("a", true);
        assert!(!written.awaited("a", &failed));
        // A failed write is not awaited.
        written.sending("a", &pending);
        written.answered("a", false);
        assert!(!written.awaited("a", &pending));
        // A re-list shows the Site as it is now: at least as new as every answered write.
        written.sending("a", &running);
        written.answered("a", true);
        written.observe("a", Some(&failed), true);
        assert!(!written.awaited("a", &running));
        // A re-list while the write is under way: not awaited once answered.
        written.sending("a", &pending);
        written.observe("a", Some(&failed), true);
        written.answered("a", true);
        assert!(!written.awaited("a", &pending));
        written.forget("a");
        assert!(!written.awaited("a", &pending));
    }

    #[test]
    fn a_status_is_ours_when_it_is_one_of_the_last_two_written() {
        let [pending, running, failed] = statuses();
        let written = Statuses::default();
        // Nothing written yet (a new process): every status is someone else's.
        assert!(!written.is_ours("a", Some(&pending)));
        written.sending("a", &pending);
        assert!(written.is_ours("a", Some(&pending)));
        assert!(!written.is_ours("b", Some(&pending)), "per Site");
        assert!(!written.is_ours("a", None), "a removed status");
        assert!(!written.is_ours("a", Some(&failed)), "an edit");
        // The event of the first write may come after the second was sent.
        written.sending("a", &running);
        assert!(written.is_ours("a", Some(&pending)));
        assert!(written.is_ours("a", Some(&running)));
        written.sending("a", &failed);
        assert!(!written.is_ours("a", Some(&pending)), "only the last two");
        written.forget("a");
        assert!(!written.is_ours("a", Some(&failed)));
    }
}
