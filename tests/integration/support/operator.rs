//! The operator's controller run in the test process against the emulator (whose StatefulSet
//! controller, kubelet, volume binder and garbage collector play the cluster), and the helpers
//! the reconcile tests share: the platform objects a Site needs, Site accessors and condition
//! waits, write counts, and the fault soak's accounting.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus::Registry;
use serde_json::{Value, json};
use sites_operator::config::live::Live;
use sites_operator::config::{Installation, PlatformConfig, RoutingMode};
use sites_operator::controller::accounting;
use sites_operator::controller::context::Tunables;
use sites_operator::controller::leader::{Elector, Timing};
use sites_operator::controller::{Controller, Options};
use sites_operator::crd::Site;
use sites_operator::metrics;
use tokio::sync::watch;

use super::{Cluster, client_config, eventually, poll_until, repo_file};

/// The platform namespace of these tests.
pub const NS: &str = "sites";
/// How long a wait for the controller's work may take.
pub const WAIT: Duration = Duration::from_secs(30);
/// A deadline that only guards against a hang, for waits whose duration the test does not
/// check: the assertions are about what happened, never how fast.
pub const HANG_GUARD: Duration = Duration::from_secs(120);
/// Delayed keys due within this much are work still to come for [`Operator::idle`]: the
/// recheck of a write the cache has not shown yet (`apply::PENDING`), the retries of transient
/// errors (backoff from 5 ms, 1 s waits). Longer delays are the slow retries of states only the
/// Site or the cluster can end (a route conflict, 60 s; a forbidden request, 5 min): they count
/// only once they are that close.
pub const DELAYED_WORK: Duration = sites_operator::controller::own_writes::PENDING;

/// The controller running in this process, with its own metrics registry (its
/// `sites_api_requests_total` counts this operator's requests only).
pub struct Operator {
    controller: Option<Controller>,
    /// The configuration in force (tests may replace it, as a new `sites-config` would).
    pub live: Live,
    _leading: Option<watch::Sender<bool>>,
    elector: Option<tokio::task::JoinHandle<()>>,
    pub registry: Registry,
}

impl Operator {
    /// Sum of a metric's samples whose line starts with `prefix` (name and labels).
    pub fn metric(&self, prefix: &str) -> f64 {
        metrics::encode(&self.registry)
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The controller's caches (what its watches delivered so far).
    pub fn caches(&self) -> &sites_operator::controller::caches::Caches {
        &self.controller.as_ref().expect("running").context.caches
    }

    pub fn reconciles(&self) -> f64 {
        self.metric("controller_runtime_reconcile_total")
    }

    /// Whether no more work is on its way: no key queued or being reconciled, and no key delayed
    /// to come due within [`DELAYED_WORK`]. A reconcile that finds one of its writes not yet in
    /// the cache looks again after `apply::PENDING` (10 s) and may write then; a transient error
    /// retries after its backoff. Those later reconciles are part of the work a test measures,
    /// so they keep the operator busy here. (The queue's own bookkeeping is read, not the
    /// workers gauge: a worker leaves that gauge before it hands its key back delayed.)
    pub fn idle(&self) -> bool {
        self.controller
            .as_ref()
            .is_some_and(|c| c.queue.is_idle_within(DELAYED_WORK))
    }

    /// Waits until at least one reconcile finished after `before` and the operator is
    /// [`Operator::idle`].
    pub async fn settled_after(&self, before: f64) {
        eventually("reconciles to settle", WAIT, || async {
            (self.reconciles() > before && self.idle()).then_some(())
        })
        .await;
    }

    /// Waits until the operator is [`Operator::idle`], so the requests of the reconciles so far,
    /// and of those they delayed, are counted (a test may see a write in the cluster before the
    /// operator has read its response).
    pub async fn settled(&self) {
        eventually("the operator to be idle", WAIT, || async {
            self.idle().then_some(())
        })
        .await;
    }

    pub async fn stop(mut self) {
        if let Some(e) = self.elector.take() {
            e.abort();
        }
        if let Some(c) = self.controller.take() {
            c.shutdown().await;
        }
    }

    /// Writes this operator made (anything but get/list/watch), Leases excluded, by resource
    /// (`configmaps`, `ingresses.networking.k8s.io`, ...).
    pub fn writes_by_resource(&self) -> std::collections::BTreeMap<String, u64> {
        let mut by = std::collections::BTreeMap::new();
        for line in metrics::encode(&self.registry).lines() {
            let Some(labels) = line.strip_prefix("sites_api_requests_total{") else {
                continue;
            };
            let label = |name: &str| {
                let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
                let end = labels[start..].find('"')?;
                Some(labels[start..start + end].to_string())
            };
            let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else {
                continue;
            };
            if ["get", "list", "watch"].contains(&verb.as_str()) || resource.starts_with("leases.")
            {
                continue;
            }
            let n: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            *by.entry(resource).or_default() += n as u64;
        }
        by
    }

    /// The writes this operator made since `before` (a [`Operator::writes_by_resource`]), by
    /// resource, only those with writes.
    pub fn writes_since(
        &self,
        before: &std::collections::BTreeMap<String, u64>,
    ) -> std::collections::BTreeMap<String, u64> {
        self.writes_by_resource()
            .into_iter()
            .map(|(r, n)| (r.clone(), n - before.get(&r).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Writes (anything but get/list/watch) this operator made, Leases excluded.
    pub fn writes(&self) -> f64 {
        metrics::encode(&self.registry)
            .lines()
            .filter(|l| l.starts_with("sites_api_requests_total"))
            .filter(|l| !l.contains("leases.coordination.k8s.io"))
            .filter(|l| {
                !["verb=\"get\"", "verb=\"list\"", "verb=\"watch\""]
                    .iter()
                    .any(|v| l.contains(v))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

/// Namespace, Retain storage class, session key Secret and the HTTPRoute CRD.
pub async fn prepare(c: &Cluster) {
    prepare_platform(c).await;
    install_http_routes(c).await;
}

/// The Gateway API's HTTPRoute CRD.
pub async fn install_http_routes(c: &Cluster) {
    let _ = Api::<CustomResourceDefinition>::all(c.client.clone())
        .create(
            &PostParams::default(),
            &sites_operator::definitions::gateway_api_crds()[0],
        )
        .await;
}

/// What [`prepare`] makes but the HTTPRoute CRD: the namespace, the storage class, the session
/// key.
pub async fn prepare_platform(c: &Cluster) {
    let client = c.client.clone();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "sites-retain"}, "provisioner": "emulator.local/disk",
        "reclaimPolicy": "Retain", "allowVolumeExpansion": true
    }))
    .unwrap();
    let _ = Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "sites-session", "namespace": NS},
        "stringData": {"secret_key": "integration-session-key"}
    }))
    .unwrap();
    let _ = Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await;
}

pub fn config(mode: RoutingMode) -> Arc<PlatformConfig> {
    let ctx = Installation {
        namespace: Some(NS),
    };
    let mut cfg = PlatformConfig::load(&repo_file("manifests/base/config.yaml"), &ctx).unwrap();
    cfg.routing.mode = mode;
    Arc::new(cfg)
}

pub async fn operator(c: &Cluster, cfg: Arc<PlatformConfig>) -> Operator {
    operator_with(c, cfg, true).await
}

/// An operator with its own counted client (`sites_api_requests_total`), leading or not.
pub async fn operator_with(c: &Cluster, cfg: Arc<PlatformConfig>, leading: bool) -> Operator {
    let (leading, rx) = watch::channel(leading);
    let (client, registry) = counted_client(c).await;
    start_controller(client, registry, cfg, Some(leading), rx).await
}

/// An operator that elects its leader through the Lease `sites-operator`.
pub async fn elected_operator(c: &Cluster, cfg: Arc<PlatformConfig>, identity: &str) -> Operator {
    let (client, registry) = counted_client(c).await;
    let (tx, rx) = watch::channel(false);
    let timing = Timing {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
    };
    let elector = Elector::new(
        client.clone(),
        NS,
        "sites-operator",
        identity.into(),
        timing,
    );
    let handle = tokio::spawn(elector.run(tx, std::future::pending()));
    let mut op = start_controller(client, registry, cfg, None, rx).await;
    op.elector = Some(handle);
    op
}

pub async fn counted_client(c: &Cluster) -> (kube::Client, Registry) {
    let registry = Registry::new();
    let counter = sites_operator::metrics::register_api_requests(&registry).unwrap();
    let client = kube::client::ClientBuilder::try_from(client_config(c.emulator()).await)
        .unwrap()
        .with_layer(&accounting::CountLayer::new(counter))
        .build();
    (client, registry)
}

pub async fn start_controller(
    client: kube::Client,
    registry: Registry,
    cfg: Arc<PlatformConfig>,
    leading: Option<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
) -> Operator {
    // `SITES_TEST_LOG=sites_operator=debug` shows the controller's log beside a failing test.
    if let Ok(directives) = std::env::var("SITES_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(directives))
            .with_test_writer()
            .try_init();
    }
    start_following(client, registry, cfg, None, leading, rx).await
}

/// [`start_controller`], following the ConfigMap `config_map` when given (the configuration
/// then comes into force from it; `cfg` is the one in force until the watch delivers it).
pub async fn start_following(
    client: kube::Client,
    registry: Registry,
    cfg: Arc<PlatformConfig>,
    config_map: Option<&str>,
    leading: Option<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
) -> Operator {
    let live = Live::from(cfg);
    let options = Options {
        namespace: NS.into(),
        workers: Some(4),
        config_map: config_map.map(String::from),
        tunables: Tunables {
            pv_label_delay: (Duration::from_millis(10), Duration::from_millis(50)),
            gateway_probe: Duration::from_millis(100),
        },
        instance: Some("test".into()),
        drain: Duration::from_secs(10),
        retention_interval: None,
    };
    let controller = Controller::start(client, live.clone(), &registry, options, rx)
        .await
        .expect("controller starts");
    Operator {
        controller: Some(controller),
        live,
        _leading: leading,
        elector: None,
        registry,
    }
}

pub fn example(file: &str) -> Site {
    let text = std::fs::read_to_string(repo_file(&format!("manifests/examples/{file}"))).unwrap();
    let mut site: Site = serde_yaml_ng::from_str(&text).unwrap();
    site.metadata.namespace = Some(NS.into());
    site
}

/// The example `site.yaml` as the Site `id` with the spec name `name`.
pub fn example_named(id: &str, name: &str) -> Site {
    let mut site = example("site.yaml");
    site.metadata.name = Some(id.into());
    site.spec.name = name.into();
    site
}

pub fn sites(c: &Cluster) -> Api<Site> {
    Api::namespaced(c.client.clone(), NS)
}

pub fn api<K>(c: &Cluster) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    Api::namespaced(c.client.clone(), NS)
}

pub fn condition(site: &Site, type_: &str) -> Option<(String, String, String)> {
    site.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until the Site's condition has `status` and `reason`.
pub async fn wait_condition(
    c: &Cluster,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> Site {
    let check = || async {
        let s = sites(c).get(name).await.ok()?;
        let (st, r, _) = condition(&s, type_)?;
        (st == status && r == reason).then_some(s)
    };
    match poll_until(WAIT, Duration::from_millis(20), check).await {
        Some(site) => site,
        None => panic!(
            "timed out waiting for {name}: {type_}={status} ({reason}); {}",
            cluster_state(c, name).await
        ),
    }
}

/// The Site's status and its pods, for the message of a failed wait.
async fn cluster_state(c: &Cluster, name: &str) -> String {
    let status = sites(c)
        .get(name)
        .await
        .map(|s| serde_json::to_string(&s.status).unwrap_or_default())
        .unwrap_or_else(|e| e.to_string());
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(c.client.clone(), NS);
    let pods = match pods.list(&Default::default()).await {
        Ok(list) => list
            .items
            .iter()
            .map(|p| {
                let s = p.status.as_ref();
                format!(
                    "{} phase={:?} conditions={:?} deleting={}",
                    p.metadata.name.as_deref().unwrap_or_default(),
                    s.and_then(|s| s.phase.as_deref()),
                    s.and_then(|s| s.conditions.as_ref()).map(|cs| cs
                        .iter()
                        .map(|c| format!("{}={}", c.type_, c.status))
                        .collect::<Vec<_>>()),
                    p.metadata.deletion_timestamp.is_some(),
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => e.to_string(),
    };
    let sts = Api::<StatefulSet>::namespaced(c.client.clone(), NS)
        .get(name)
        .await
        .map(|s| {
            format!(
                "replicas={:?} status={}",
                s.spec.and_then(|s| s.replicas),
                serde_json::to_string(&s.status).unwrap_or_default()
            )
        })
        .unwrap_or_else(|e| e.to_string());
    format!("status: {status}; statefulset: {sts}; pods: {pods}")
}

pub async fn wait_available(c: &Cluster, name: &str) -> Site {
    wait_condition(c, name, "Available", "True", "Available").await
}

/// The image of the container `name` of a StatefulSet's pod template.
pub fn container_image(sts: &StatefulSet, name: &str) -> String {
    let template = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let container = template.containers.iter().find(|c| c.name == name);
    container.and_then(|c| c.image.clone()).unwrap()
}

pub fn restarted_at(sts: &StatefulSet) -> Option<String> {
    sites_operator::render::template_annotations(sts)?
        .get("kubectl.kubernetes.io/restartedAt")
        .cloned()
}

pub async fn merge(c: &Cluster, name: &str, patch: Value) {
    sites(c)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("Site patched");
}

/// Writes the operator made since the last reset: everything but the test's own Site writes.
pub fn operator_writes(c: &Cluster, own_site_writes: u64) -> u64 {
    c.emulator().stats().writes() - own_site_writes
}

/// Patches the Site `name` with `patch` and waits until the operator reconciled and settled.
pub async fn edit_and_settle(c: &Cluster, op: &Operator, name: &str, patch: Value) {
    let before = op.reconciles();
    merge(c, name, patch).await;
    op.settled_after(before).await;
}

/// [`edit_and_settle`] (one write of the test's); returns the writes the operator made meanwhile.
pub async fn writes_after(c: &Cluster, op: &Operator, name: &str, patch: Value) -> u64 {
    volume_labelled(c, name).await;
    reset_stats(c).await;
    edit_and_settle(c, op, name, patch).await;
    operator_writes(c, 1)
}

/// Resets the emulator's request counts once no request is being handled: a write the test
/// has seen (the volume label, say) may not be counted yet, and would be counted after the reset.
pub async fn reset_stats(c: &Cluster) {
    eventually("the emulator's requests answered", WAIT, || async {
        (c.emulator().stats().in_flight() == 0).then_some(())
    })
    .await;
    c.emulator().stats().reset();
}

/// Waits until the volume bound to the Site's claim carries the site label: the operator labels
/// it once, in the background, shortly after it first sees the claim bound (the test tunables:
/// 10-50 ms), which is not part of any edit a test measures. A Site without a claim: no wait.
pub async fn volume_labelled(c: &Cluster, name: &str) {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), NS);
    let volumes: Api<PersistentVolume> = Api::all(c.client.clone());
    eventually("the site volume labelled", WAIT, || async {
        let Some(claim) = claims.get_opt(name).await.ok()? else {
            return Some(());
        };
        let volume = claim.spec?.volume_name?;
        let labels = volumes.get(&volume).await.ok()?.metadata.labels?;
        (labels
            .get(sites_operator::crd::ID_LABEL)
            .map(String::as_str)
            == Some(name))
        .then_some(())
    })
    .await
}

/// Error responses the test's own requests met, by HTTP code (the injected faults hit them too).
#[derive(Default)]
pub struct SeenErrors(std::sync::Mutex<std::collections::BTreeMap<u16, u64>>);

impl SeenErrors {
    pub fn note<T>(&self, r: Result<T, kube::Error>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                if let kube::Error::Api(s) = &e {
                    *self.0.lock().unwrap().entry(s.code).or_default() += 1;
                }
                None
            }
        }
    }

    pub fn get(&self, code: u16) -> u64 {
        self.0.lock().unwrap().get(&code).copied().unwrap_or(0)
    }
}

/// Panics anywhere in this process (the test and the in-process operator), counted by a hook.
pub fn count_panics() -> Arc<std::sync::atomic::AtomicUsize> {
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        previous(info);
    }));
    count
}
