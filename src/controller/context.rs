//! What every reconcile shares: the client, the platform configuration, the caches the watches
//! keep warm, the Event recorder, and the few values read from the cluster that are not Site
//! objects (the session key, the master Ingress's host), cached for a minute.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::api::Api;

use crate::config::live::Live;
use crate::config::{Routing, RoutingMode, SecretKeyRef};
use crate::controller::cache::index::Index;
use crate::controller::cache::kept::{Kept, Owned};
use crate::controller::cache::table::{Records, Sites, Table, Volumes};
use crate::controller::events::Recorder;
use crate::controller::fingerprints;
use crate::controller::labeller::Labeller;
use crate::controller::status::{FailedCreate, SitePod};
use crate::crd::{Site, SiteStatus};
use crate::watched::Volume;
use crate::{Error, Result, Target};

/// How long the session key and the master Ingress host are cached.
const LOOKUP_TTL: Duration = Duration::from_secs(60);

/// The cluster state the reconciler reads (tables of records, kept warm by watches).
/// Objects of the owned kinds are kept as [`Kept`] records.
#[derive(Clone)]
pub struct Caches {
    pub sites: Sites,
    pub secrets: Records<Secret>,
    pub configmaps: Records<ConfigMap>,
    pub pvcs: Records<PersistentVolumeClaim>,
    pub statefulsets: Records<StatefulSet>,
    pub services: Records<Service>,
    pub ingresses: Records<Ingress>,
    /// Watched once the cluster serves the Gateway API ([`HttpRoutes`]).
    pub httproutes: HttpRoutes,
    /// Site pods, as [`SitePod`]s.
    pub pods: Table<SitePod>,
    /// The StatefulSets' `FailedCreate` Events, by Event name: why a site's pods do not exist.
    pub failed_creates: Table<FailedCreate>,
    /// PersistentVolumes (cluster-scoped): retained-volume lookup and the label check.
    pub volumes: Volumes,
    /// Site pods by site id ([`crate::controller::cache::index::pod_keys`]).
    pub pods_by_site: Index<SitePod, Table<SitePod>>,
    /// Volumes by site label and claim reference ([`crate::controller::volumes::volume_keys`]).
    pub volumes_by_site: Index<Volume, Volumes>,
    /// Sites by public path ([`crate::controller::cache::index::path_key`]).
    pub sites_by_path: Index<Site, Sites>,
}

impl Caches {
    /// The other Sites (not being deleted) whose public path is `site`'s.
    pub fn sharing_path(&self, site: &Site) -> Vec<Arc<Site>> {
        let meta = &site.metadata;
        self.sharing(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
            &crate::render::apps::site_path(site),
        )
    }

    /// The Sites (not being deleted, not the Site `name`) whose public path in `namespace` is
    /// `site_path`.
    pub fn sharing(&self, namespace: &str, name: &str, site_path: &str) -> Vec<Arc<Site>> {
        let this: Box<str> = name.into();
        self.sites_by_path
            .get_except(
                &self.sites,
                &crate::controller::cache::index::path_key_of(namespace, site_path),
                Some(&this),
            )
            .into_iter()
            .filter(|other| other.metadata.deletion_timestamp.is_none())
            .collect()
    }
}

/// Whether the cluster serves the Gateway API's HTTPRoute.
pub async fn serves_http_routes(client: &kube::Client, namespace: &str) -> bool {
    let api: kube::Api<HttpRoute> = kube::Api::namespaced(client.clone(), namespace);
    api.list(&kube::api::ListParams::default().limit(1))
        .await
        .is_ok()
}

/// The HTTPRoute records: watched from the start when the cluster serves the Gateway API's
/// HTTPRoute, else from the first reconcile that needs them once it does (the Gateway API CRDs
/// installed after the operator started, then gateway mode configured: no restart needed).
#[derive(Clone)]
pub struct HttpRoutes {
    records: Arc<std::sync::OnceLock<Records<HttpRoute>>>,
    /// Starts the watch (records not yet synced).
    start: Arc<dyn Fn() -> Records<HttpRoute> + Send + Sync>,
    probe: Arc<tokio::sync::Mutex<Probe>>,
}

/// When the cluster was last asked whether it serves HTTPRoutes, and the records of a watch
/// started but not synced yet.
type Probe = (Option<Instant>, Option<Records<HttpRoute>>);

impl HttpRoutes {
    /// How long a started watch may take to list the routes before the reconcile gives up (and
    /// is retried).
    const SYNC: Duration = Duration::from_secs(10);

    pub fn new(start: Arc<dyn Fn() -> Records<HttpRoute> + Send + Sync>) -> HttpRoutes {
        HttpRoutes {
            records: Default::default(),
            start,
            probe: Default::default(),
        }
    }

    /// Starts the watch now (the cluster serves HTTPRoutes); [`Self::synced`] waits for it.
    pub fn start(&self) {
        let _ = self.records.set((self.start)());
    }

    /// The records; None while the cluster is not known to serve HTTPRoutes.
    pub fn get(&self) -> Option<&Records<HttpRoute>> {
        self.records.get()
    }

    /// Waits until a started watch has listed the routes.
    pub async fn synced(&self) {
        if let Some(records) = self.get() {
            records.wait_until_ready().await;
        }
    }

    /// The records, for a reconcile that needs them: when the watch has not started, asks the
    /// cluster (at most once per `every`) whether it serves HTTPRoutes now, and if so starts the
    /// watch and waits for its first list. Records are handed out only once synced, so a route
    /// of another owner is never mistaken for a missing one.
    pub async fn serve(
        &self,
        client: &kube::Client,
        namespace: &str,
        every: Duration,
    ) -> Option<&Records<HttpRoute>> {
        if let Some(records) = self.get() {
            return Some(records);
        }
        let mut probe = self.probe.lock().await;
        if self.get().is_none() && probe.1.is_none() {
            if probe.0.is_some_and(|at| at.elapsed() < every) {
                return None;
            }
            probe.0 = Some(Instant::now());
            if !serves_http_routes(client, namespace).await {
                return None;
            }
            tracing::info!("the cluster serves HTTPRoutes now: watching them");
            probe.1 = Some((self.start)());
        }
        if let Some(started) = probe.1.clone() {
            if tokio::time::timeout(Self::SYNC, started.wait_until_ready())
                .await
                .is_err()
            {
                return None;
            }
            let _ = self.records.set(started);
            probe.1 = None;
        }
        self.get()
    }
}

/// Tunables of the reconciler (tests shorten the delays).
#[derive(Clone, Debug)]
pub struct Tunables {
    /// Jitter range of the delayed PV label patch.
    pub pv_label_delay: (Duration, Duration),
    /// How often a reconcile in gateway mode may ask a cluster that did not serve HTTPRoutes
    /// whether it does now.
    pub gateway_probe: Duration,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            pv_label_delay: (Duration::from_secs(20), Duration::from_secs(40)),
            gateway_probe: Duration::from_secs(10),
        }
    }
}

/// A value read from the cluster, when, and for which reference.
type Cached<R, T> = Mutex<Option<(Instant, R, T)>>;

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
pub struct WrittenStatuses(Mutex<std::collections::HashMap<u64, Written>>);

/// The statuses written to one Site: the last two digests, newest first, and where the last
/// write stands.
#[derive(Clone, Copy)]
struct Written {
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
    /// Stored (answered) at this [`tick`](crate::controller::fingerprints::tick) and not shown
    /// yet: the cached Site is older than the write, for at most
    /// [`PENDING`](crate::controller::fingerprints::PENDING).
    Awaited(std::num::NonZeroU32),
    /// Shown, failed, or re-listed: the cache is to be believed.
    Settled,
}

impl WrittenStatuses {
    fn digest(status: &SiteStatus) -> u64 {
        crate::labels::hashed(&serde_json::to_vec(status).unwrap_or_default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Written>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn key(site: &str) -> u64 {
        crate::labels::hashed(site)
    }

    /// Records `status` as written to `site` (before the write is sent: its watch event may come
    /// before the write's response). [`WrittenStatuses::sent`] says how the write went.
    pub fn record(&self, site: &str, status: &SiteStatus) {
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
                    Written {
                        digests: [digest, digest],
                        shown: Shown::Sending,
                    },
                );
            }
        }
    }

    /// The answer to the last recorded write to `site`: stored (`ok`) or not.
    pub fn sent(&self, site: &str, ok: bool) {
        if let Some(last) = self.lock().get_mut(&Self::key(site)) {
            last.shown = match last.shown {
                Shown::Sending if ok => Shown::Awaited(fingerprints::tick()),
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
        if fingerprints::expired(at) {
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

/// Everything a reconcile needs.
pub struct Context {
    pub client: kube::Client,
    /// The configuration in force; a reconcile takes it once ([`Live::get`]).
    pub config: Live,
    pub namespace: String,
    pub caches: Caches,
    pub recorder: Option<Recorder>,
    pub tunables: Tunables,
    session_key: Cached<SecretKeyRef, Vec<u8>>,
    master_host: Cached<(), Option<String>>,
    /// The schedule of the delayed volume labels.
    pub(crate) labeller: Labeller,
    /// What the operator last wrote of each owned object (drift detection).
    pub(crate) fingerprints: Arc<crate::controller::fingerprints::Fingerprints>,
    /// The statuses the operator last wrote (a status edited by someone else is repaired).
    pub(crate) statuses: Arc<WrittenStatuses>,
    /// Where the clock comes from (tests may pin it).
    pub now: fn() -> Time,
}

fn system_now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl Context {
    pub fn new(
        client: kube::Client,
        config: Live,
        namespace: String,
        caches: Caches,
        recorder: Option<Recorder>,
        tunables: Tunables,
    ) -> Context {
        Context {
            client,
            config,
            namespace,
            caches,
            recorder,
            tunables,
            session_key: Mutex::new(None),
            master_host: Mutex::new(None),
            labeller: Labeller::default(),
            fingerprints: Default::default(),
            statuses: Default::default(),
            now: system_now,
        }
    }

    /// The API of a namespaced kind in the operator's namespace.
    pub(crate) fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The object `name` from the API server itself (the cache may lag behind a write made a
    /// moment ago).
    pub(crate) async fn read<K>(&self, name: &str) -> Result<Option<Arc<K>>>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        self.api::<K>()
            .get_opt(name)
            .await
            .map(|o| o.map(Arc::new))
            .map_err(|source| Error::Read {
                target: Target::of::<K>(name),
                source: Box::new(source),
            })
    }

    /// [`Context::read`], kept as the caches keep it.
    pub(crate) async fn read_kept<K>(&self, name: &str) -> Result<Option<Arc<Kept<K>>>>
    where
        K: Owned,
    {
        Ok(self
            .read::<K>(name)
            .await?
            .map(|obj| Arc::new(Kept::new(Arc::unwrap_or_clone(obj)))))
    }

    /// The platform session key that `reference` (the configuration's) names, cached for a
    /// minute.
    pub(crate) async fn session_key(&self, reference: &SecretKeyRef) -> Result<Vec<u8>> {
        if let Some(key) = fresh(&self.session_key, reference) {
            return Ok(key);
        }
        let secret = self.read::<Secret>(&reference.secret_name).await?;
        let key = secret
            .and_then(|s| s.data.as_ref()?.get(&reference.key).cloned())
            .map(|b| b.0)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| Error::SessionKeyMissing {
                namespace: self.namespace.clone(),
                name: reference.secret_name.clone(),
                key: reference.key.clone(),
            })?;
        remember(&self.session_key, reference.clone(), key.clone());
        Ok(key)
    }

    /// `routing.host`, or in ingress mode the first rule host of the master Ingress.
    pub(crate) async fn public_host(&self, routing: &Routing) -> Result<Option<String>> {
        if let Some(host) = routing.host.clone() {
            return Ok(Some(host));
        }
        if routing.mode != RoutingMode::Ingress {
            return Ok(None);
        }
        if let Some(host) = fresh(&self.master_host, &()) {
            return Ok(host);
        }
        let master = self.read::<Ingress>(crate::labels::MASTER_INGRESS).await?;
        let host = master.and_then(|i| i.spec.as_ref()?.rules.as_ref()?.first()?.host.clone());
        remember(&self.master_host, (), host.clone());
        Ok(host)
    }
}

/// The cached value, if it was read for `reference` less than [`LOOKUP_TTL`] ago.
fn fresh<R: PartialEq, T: Clone>(cell: &Cached<R, T>, reference: &R) -> Option<T> {
    cell.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .filter(|(at, r, _)| at.elapsed() < LOOKUP_TTL && r == reference)
        .map(|(_, _, v)| v.clone())
}

fn remember<R, T>(cell: &Cached<R, T>, reference: R, value: T) {
    *cell.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), reference, value));
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let written = WrittenStatuses::default();
        assert_eq!(written.last_is("a", &running), None);
        written.record("a", &pending);
        written.record("a", &running);
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
        let written = WrittenStatuses::default();
        assert!(!written.awaited("a", &pending), "nothing written");
        // Sent, answered, then shown.
        written.record("a", &pending);
        assert!(!written.awaited("a", &pending), "no answer yet");
        written.sent("a", true);
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
        written.record("a", &running);
        written.sent("a", true);
        written.observe("a", Some(&pending), false);
        assert!(written.awaited("a", &running), "the one before");
        written.observe("a", Some(&running), false);
        assert!(!written.awaited("a", &running));
        // Shown before the answer: not awaited once answered.
        written.record("a", &failed);
        written.observe("a", Some(&failed), false);
        written.sent("a", true);
        assert!(!written.awaited("a", &failed));
        // A failed write is not awaited.
        written.record("a", &pending);
        written.sent("a", false);
        assert!(!written.awaited("a", &pending));
        // A re-list shows the Site as it is now: at least as new as every answered write.
        written.record("a", &running);
        written.sent("a", true);
        written.observe("a", Some(&failed), true);
        assert!(!written.awaited("a", &running));
        // A re-list while the write is under way: not awaited once answered.
        written.record("a", &pending);
        written.observe("a", Some(&failed), true);
        written.sent("a", true);
        assert!(!written.awaited("a", &pending));
        written.forget("a");
        assert!(!written.awaited("a", &pending));
    }

    #[test]
    fn a_status_is_ours_when_it_is_one_of_the_last_two_written() {
        let [pending, running, failed] = statuses();
        let written = WrittenStatuses::default();
        // Nothing written yet (a new process): every status is someone else's.
        assert!(!written.is_ours("a", Some(&pending)));
        written.record("a", &pending);
        assert!(written.is_ours("a", Some(&pending)));
        assert!(!written.is_ours("b", Some(&pending)), "per Site");
        assert!(!written.is_ours("a", None), "a removed status");
        assert!(!written.is_ours("a", Some(&failed)), "an edit");
        // The event of the first write may come after the second was sent.
        written.record("a", &running);
        assert!(written.is_ours("a", Some(&pending)));
        assert!(written.is_ours("a", Some(&running)));
        written.record("a", &failed);
        assert!(!written.is_ours("a", Some(&pending)), "only the last two");
        written.forget("a");
        assert!(!written.is_ours("a", Some(&failed)));
    }
}
