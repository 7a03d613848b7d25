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
use crate::controller::labeller::Labeller;
use crate::controller::own_writes::OwnWrites;
use crate::controller::status::{FailedCreate, SitePod};
use crate::crd::Site;
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
    /// The record of the operator's own writes: what it last wrote of each owned object (drift
    /// detection) and to each Site's status (a status edited by someone else is repaired).
    pub(crate) own: Arc<OwnWrites>,
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
            own: Default::default(),
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
