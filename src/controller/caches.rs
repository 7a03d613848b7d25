//! The caches a reconcile reads, as one set ([`Caches`]), filled by the watches
//! (`controller/watches.rs`), and the HTTPRoute records, watched once the cluster serves the
//! Gateway API ([`HttpRoutes`]: the probe that asks). What each cache keeps, and the words for
//! it, are `controller/cache/`'s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;

use crate::controller::cache::index::Index;
use crate::controller::cache::table::{Records, Sites, Table, Volumes};
use crate::controller::status::{FailedCreate, SitePod};
use crate::crd::Site;
use crate::watched::Volume;

/// The cluster state the reconciler reads (tables of records, kept warm by watches).
/// Objects of the owned kinds are kept as [`Kept`](crate::controller::cache::kept::Kept) records.
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
