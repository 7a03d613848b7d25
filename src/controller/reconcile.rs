//! Reconcile of one Site (SPEC 4.1-4.4): render, ensure the owned objects in order writing only
//! what differs, keep routes of other sites and modes apart, unblock stalled rollouts, and store
//! the status when it changed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::config::{PlatformConfig, RoutingMode};
use crate::controller::ensure::{self, Written};
use crate::controller::index::Index;
use crate::controller::status::{self, Outcome};
use crate::crd::{ID_LABEL, OPERATOR_BOUND_ANNOTATION, Site};
use crate::render::{self, Inputs, PodTemplateInputs, Route, SiteTokens, volume};
use crate::{Error, diff};

/// How long a route conflict waits before the next attempt (LIFE-07, RTG-03).
pub const ROUTE_CONFLICT_RETRY: Duration = Duration::from_secs(60);
/// How long a failed other-mode route deletion waits (LIFE-13).
pub const OTHER_MODE_RETRY: Duration = Duration::from_secs(30);
/// Name of the master Ingress whose host serves sites when `routing.host` is not set.
pub const MASTER_INGRESS: &str = "sites-ingress-master";
/// How long the session key and the master Ingress host are cached.
const LOOKUP_TTL: Duration = Duration::from_secs(60);

/// The cluster state the reconciler reads (reflector stores, kept warm by watches).
#[derive(Clone)]
pub struct Caches {
    pub sites: Store<Site>,
    pub secrets: Store<Secret>,
    pub configmaps: Store<ConfigMap>,
    pub pvcs: Store<PersistentVolumeClaim>,
    pub statefulsets: Store<StatefulSet>,
    pub services: Store<Service>,
    pub ingresses: Store<Ingress>,
    /// None when the cluster does not serve the Gateway API.
    pub httproutes: Option<Store<HttpRoute>>,
    pub pods: Store<Pod>,
    /// PersistentVolumes (cluster-scoped): retained-volume lookup and the label check.
    pub volumes: Store<PersistentVolume>,
    /// Site pods by site id ([`pod_index_keys`]).
    pub pods_by_site: Index<Pod>,
    /// Volumes by site label and claim reference ([`volume_index_keys`]).
    pub volumes_by_site: Index<PersistentVolume>,
}

/// Index key of a site pod: its site id, for pods the operator created (id label and
/// operator_bound annotation); other pods are not indexed.
pub fn pod_index_keys(p: &Pod) -> Vec<String> {
    if !p.annotations().contains_key(OPERATOR_BOUND_ANNOTATION) {
        return Vec::new();
    }
    p.labels().get(ID_LABEL).cloned().into_iter().collect()
}

/// Index keys of a volume: `id:<site id>` for its site label and `claim:<namespace>/<name>` for
/// its claim reference.
pub fn volume_index_keys(pv: &PersistentVolume) -> Vec<String> {
    let mut keys = Vec::new();
    if let Some(id) = pv.labels().get(ID_LABEL) {
        keys.push(site_key(id));
    }
    if let Some(c) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
        keys.push(claim_key(
            c.namespace.as_deref().unwrap_or_default(),
            c.name.as_deref().unwrap_or_default(),
        ));
    }
    keys
}

fn site_key(id: &str) -> String {
    format!("id:{id}")
}

fn claim_key(namespace: &str, name: &str) -> String {
    format!("claim:{namespace}/{name}")
}

/// What one reconcile asks of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Done until something changes.
    Done,
    /// Retry with the key's exponential backoff (transient error).
    Backoff,
    /// Retry after a fixed delay.
    After(Duration),
}

/// Tunables (tests shorten the delays).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Jitter range of the delayed PV label patch.
    pub pv_label_delay: (Duration, Duration),
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            pv_label_delay: (Duration::from_secs(20), Duration::from_secs(40)),
        }
    }
}

type Cached<T> = Mutex<Option<(Instant, T)>>;

/// Everything a reconcile needs.
pub struct Context {
    pub client: kube::Client,
    pub config: Arc<PlatformConfig>,
    pub namespace: String,
    pub caches: Caches,
    pub recorder: Option<Recorder>,
    pub settings: Settings,
    session_key: Cached<Vec<u8>>,
    master_host: Cached<Option<String>>,
    labelled_volumes: Mutex<HashSet<String>>,
    /// Volume label patches waiting for their time (one background task serves every site).
    labeller: Mutex<Option<mpsc::UnboundedSender<Labelling>>>,
    /// Where the clock comes from (tests may pin it).
    pub now: fn() -> Time,
}

fn system_now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl Context {
    pub fn new(
        client: kube::Client,
        config: Arc<PlatformConfig>,
        namespace: String,
        caches: Caches,
        recorder: Option<Recorder>,
        settings: Settings,
    ) -> Context {
        Context {
            client,
            config,
            namespace,
            caches,
            recorder,
            settings,
            session_key: Mutex::new(None),
            master_host: Mutex::new(None),
            labelled_volumes: Mutex::new(HashSet::new()),
            labeller: Mutex::new(None),
            now: system_now,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn cached<K>(&self, store: &Store<K>, name: &str) -> Option<Arc<K>>
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        store.get(&ObjectRef::new(name).within(&self.namespace))
    }

    /// The platform session key (Secret reference in the configuration), cached for a minute.
    async fn session_key(&self) -> Result<Vec<u8>, Failure> {
        if let Some((at, key)) = self
            .session_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            && at.elapsed() < LOOKUP_TTL
        {
            return Ok(key.clone());
        }
        let reference = &self.config.sites.session.secret_key;
        let secret = self
            .api::<Secret>()
            .get_opt(&reference.secret_name)
            .await
            .map_err(Failure::api)?;
        let key = secret
            .and_then(|s| s.data)
            .and_then(|d| d.get(&reference.key).cloned())
            .map(|b| b.0)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                Failure::Transient(format!(
                    "the session key Secret {}/{} (key {:?}) is missing or empty",
                    self.namespace, reference.secret_name, reference.key
                ))
            })?;
        *self.session_key.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), key.clone()));
        Ok(key)
    }

    /// `routing.host`, or in ingress mode the first rule host of the master Ingress.
    async fn public_host(&self) -> Result<Option<String>, Failure> {
        if let Some(host) = self.config.routing.host.clone() {
            return Ok(Some(host));
        }
        if self.config.routing.mode != RoutingMode::Ingress {
            return Ok(None);
        }
        if let Some((at, host)) = self
            .master_host
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            && at.elapsed() < LOOKUP_TTL
        {
            return Ok(host.clone());
        }
        let master = self
            .api::<Ingress>()
            .get_opt(MASTER_INGRESS)
            .await
            .map_err(Failure::api)?;
        let host = master
            .and_then(|i| i.spec)
            .and_then(|s| s.rules)
            .and_then(|r| r.into_iter().next())
            .and_then(|r| r.host);
        *self.master_host.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), host.clone()));
        Ok(host)
    }

    async fn event(&self, site: &Site, type_: EventType, reason: &str, note: String) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &site.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "cannot record an event");
        }
    }
}

/// Why a reconcile stopped.
#[derive(Debug)]
enum Failure {
    Transient(String),
    Terminal(String),
}

impl Failure {
    fn api(e: kube::Error) -> Failure {
        Failure::Transient(match &e {
            kube::Error::Api(s) => format!("API error {}: {}", s.code, s.message),
            other => other.to_string(),
        })
    }

    fn render(e: Error) -> Failure {
        if e.is_transient() {
            Failure::Transient(e.to_string())
        } else {
            Failure::Terminal(e.to_string())
        }
    }
}

fn random_token() -> String {
    let mut bytes = [0u8; 24];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_err() {
        // The system random source failing is not recoverable by waiting; fall back to UUIDs,
        // which come from the same source through another path.
        return uuid::Uuid::new_v4().simple().to_string();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Pods of the site the operator created (id label and operator_bound annotation).
fn site_pods(ctx: &Context, id: &str) -> Vec<Arc<Pod>> {
    ctx.caches.pods_by_site.get(&ctx.caches.pods, id)
}

fn owned_by(obj: &impl Resource, id: &str) -> bool {
    obj.labels().get(ID_LABEL).map(String::as_str) == Some(id)
}

/// What a reconcile wrote: the objects it created (for the Event) and whether it updated any.
#[derive(Default)]
struct Writes {
    created: Vec<String>,
    updated: bool,
}

/// The result of ensuring the objects.
struct Ensured {
    outcome: Outcome,
    next: Next,
}

/// Reconciles the Site `name`; returns what the queue should do next.
pub async fn reconcile(ctx: &Context, name: &str) -> Next {
    let Some(site) = ctx.cached(&ctx.caches.sites, name) else {
        // Deleted: garbage collection removes the owned objects.
        return Next::Done;
    };
    if site.metadata.deletion_timestamp.is_some() {
        return Next::Done;
    }
    let mut created = Writes::default();
    let result = ensure_objects(ctx, &site, &mut created).await;
    if !created.created.is_empty() {
        // One Event per reconcile, listing what it created.
        let note = format!("created {}", created.created.join(", "));
        ctx.event(&site, EventType::Normal, "Created", note).await;
    }
    let ensured = match result {
        Ok(e) => e,
        Err(Failure::Transient(m)) => Ensured {
            outcome: Outcome::Transient(m),
            next: Next::Backoff,
        },
        Err(Failure::Terminal(m)) => Ensured {
            outcome: Outcome::Terminal(m),
            next: Next::Done,
        },
    };
    // Warnings are recorded once per distinct problem, not on every reconcile (pod events keep
    // reconciling a site whose spec is invalid or whose route is taken).
    let warning = match &ensured.outcome {
        Outcome::Terminal(m) => Some(("InvalidConfiguration", m)),
        Outcome::RouteConflict(m) => Some(("RouteConflict", m)),
        _ => None,
    };
    if let Some((reason, message)) = warning {
        let known = site
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == status::PROGRESSING))
            .is_some_and(|c| c.reason == reason && &c.message == message);
        if !known {
            ctx.event(&site, EventType::Warning, reason, message.clone())
                .await;
        }
    }
    if let Outcome::Transient(m) | Outcome::Terminal(m) | Outcome::RouteConflict(m) =
        &ensured.outcome
    {
        tracing::warn!(site = name, error = %m, "reconcile incomplete");
    }
    // Objects written: the spec change mattered, so the status records the new generation even
    // when nothing else in it changes. Without writes (an audit-only edit) nothing is written.
    let objects_written = !created.created.is_empty() || created.updated;
    match write_status(ctx, &site, &ensured.outcome, objects_written).await {
        Ok(()) => ensured.next,
        Err(e) => {
            tracing::warn!(site = name, error = %e, "cannot write the status");
            Next::Backoff
        }
    }
}

async fn write_status(
    ctx: &Context,
    site: &Site,
    outcome: &Outcome,
    objects_written: bool,
) -> Result<(), kube::Error> {
    let id = site.name_any();
    let pods = site_pods(ctx, &id);
    let pods: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
    let previous = site.status.as_ref();
    let new = status::site_status(site, &pods, outcome, previous, &(ctx.now)());
    if previous == Some(&new)
        || (!objects_written && previous.is_some_and(|p| status::same_state(p, &new)))
    {
        // Only observedGeneration would change (an audit or other non-qualifying edit): no
        // write (SPEC 4.2: such edits cause no writes at all).
        return Ok(());
    }
    let mut body = serde_json::to_value(&new).unwrap_or_default();
    if let Some(obj) = body.as_object_mut() {
        // A merge patch leaves absent fields alone: clear what the new status does not have.
        for key in [
            "phase",
            "problems",
            "all_steps_started",
            "observedGeneration",
            "conditions",
        ] {
            obj.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    let api: Api<Site> = ctx.api();
    api.patch_status(
        &id,
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"status": body})),
    )
    .await?;
    let old_phase = previous.and_then(|s| s.phase);
    if old_phase != new.phase {
        tracing::info!(site = %id, phase = ?new.phase, problems = new.problems.len(), "status changed");
    }
    Ok(())
}

async fn ensure_one<K>(
    ctx: &Context,
    site: &Site,
    created: &mut Writes,
    store: &Store<K>,
    mut desired: K,
) -> Result<(Written, Option<K>), Failure>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    ensure::stamp(&mut desired);
    let name = desired.name_any();
    let stored = ctx.cached(store, &name);
    let (written, obj) = ensure::ensure(&ctx.api::<K>(), stored.as_deref(), &desired)
        .await
        .map_err(Failure::api)?;
    if written != Written::Unchanged {
        let kind = K::kind(&K::DynamicType::default()).to_string();
        tracing::info!(site = %site.name_any(), kind = %kind, object = %name, ?written, "wrote object");
        match written {
            Written::Created => created.created.push(format!("{kind} {name}")),
            _ => created.updated = true,
        }
    }
    Ok((written, obj))
}

async fn ensure_objects(
    ctx: &Context,
    site: &Site,
    created: &mut Writes,
) -> Result<Ensured, Failure> {
    let id = site.name_any();
    let cfg = &ctx.config;
    let c = &ctx.caches;

    // Inputs read from the cluster (the rest of rendering is pure).
    // Tokens are generated only when the API server confirms there are none: the cache may not
    // have seen a Secret written a moment ago.
    let stored_secret = match ctx.cached(&c.secrets, &id) {
        Some(s) => Some(s),
        None => ctx
            .api::<Secret>()
            .get_opt(&id)
            .await
            .map_err(Failure::api)?
            .map(Arc::new),
    };
    let tokens = SiteTokens::keep_or_generate(stored_secret.as_deref(), random_token);
    let session_key = ctx.session_key().await?;
    let host = ctx.public_host().await?;
    let stored_claim = ctx.cached(&c.pvcs, &id);
    if let Some(claim) = stored_claim
        .as_deref()
        .filter(|claim| previous_incarnation(claim, site))
    {
        // The claim of a deleted Site of the same name (owned by the old uid): garbage
        // collection removes it. Writing now would create a new claim and
        // provision a new volume before the old one can be found and re-bound.
        return Ok(Ensured {
            outcome: Outcome::Transient(format!(
                "waiting for the previous claim {} to be deleted",
                claim.name_any()
            )),
            next: Next::After(Duration::from_secs(1)),
        });
    }
    let retained = match stored_claim {
        Some(_) => None,
        None => retained_volume(ctx, site).await?,
    };
    let mut stored_sts = ctx.cached(&c.statefulsets, &id);
    let mut decision = diff::decide(render::recorded_state(stored_sts.as_deref()).as_ref(), site);
    if decision.restart {
        // Confirm with the API server: a StatefulSet written a moment ago may already record this
        // change, and one qualifying change must roll the pods only once (LIFE-03).
        stored_sts = ctx
            .api::<StatefulSet>()
            .get_opt(&id)
            .await
            .map_err(Failure::api)?
            .map(Arc::new);
        decision = diff::decide(render::recorded_state(stored_sts.as_deref()).as_ref(), site);
    }
    let now = (ctx.now)();
    let restarted_at = if decision.restart {
        Some(now.0.to_string())
    } else {
        stored_sts
            .as_ref()
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(render::workload::RESTARTED_AT_ANNOTATION).cloned())
    };
    let inputs = Inputs {
        platform_namespace: &ctx.namespace,
        public_host: host.as_deref(),
        session_key: &session_key,
        tokens: &tokens,
        existing_claim: stored_claim.as_deref(),
        retained_volume: retained.as_ref().and_then(|pv| pv.metadata.name.as_deref()),
        pod: PodTemplateInputs {
            state: &decision.state,
            restarted_at: restarted_at.as_deref(),
        },
    };
    let rendered = render::render(site, cfg, &inputs).map_err(Failure::render)?;

    // LIFE-01 order.
    ensure_one(ctx, site, created, &c.secrets, rendered.secret).await?;
    ensure_one(ctx, site, created, &c.secrets, rendered.oauth2_secret).await?;
    ensure_one(ctx, site, created, &c.configmaps, rendered.env_configmap).await?;
    ensure_one(ctx, site, created, &c.configmaps, rendered.files_configmap).await?;
    if let Some(pv) = &retained {
        rebind(ctx, site, pv).await?;
    } else if stored_claim.is_none()
        && let Some(pv) = volume::still_bound_to(
            c.volumes_by_site
                .get(&c.volumes, &claim_key(&ctx.namespace, &id))
                .iter()
                .map(AsRef::as_ref),
            &ctx.namespace,
            &id,
        )
        .map(|pv| pv.name_any())
    {
        // The site's previous claim is gone but its volume is not Released yet (or the claim
        // cache lags): wait instead of provisioning a new volume and losing the retained data.
        return Ok(Ensured {
            outcome: Outcome::Transient(format!(
                "waiting for volume {pv} to be released by the previous claim"
            )),
            next: Next::After(Duration::from_secs(1)),
        });
    }
    let (_, claim) = ensure_one(ctx, site, created, &c.pvcs, rendered.pvc).await?;
    let (sts_written, _) =
        ensure_one(ctx, site, created, &c.statefulsets, rendered.statefulset).await?;
    if decision.restart {
        ctx.event(
            site,
            EventType::Normal,
            "Restarted",
            "a qualifying change or upgrade request rolls the site pods".into(),
        )
        .await;
    }
    if sts_written == Written::Updated && site.spec.configuration.enabled {
        replace_not_ready_pods(ctx, &id).await;
    }
    ensure_one(ctx, site, created, &c.services, rendered.service).await?;
    let mut ensured = routes(ctx, site, created, rendered.route).await?;
    label_volume_later(
        ctx,
        &id,
        claim.as_ref().or(ctx.cached(&c.pvcs, &id).as_deref()),
    );
    if ensured.next == Next::Done && !matches!(ensured.outcome, Outcome::Ensured) {
        ensured.next = Next::Backoff;
    }
    Ok(ensured)
}

/// Whether a cached claim belongs to a previous Site of the same name: its owner references
/// name a Site with another uid (garbage collection deletes it). A claim without owner
/// references is adopted as before; this Site's own claim being deleted (by hand) does not
/// hold the other objects back.
fn previous_incarnation(claim: &PersistentVolumeClaim, site: &Site) -> bool {
    let site_uid = site.metadata.uid.as_deref().unwrap_or_default();
    claim
        .owner_references()
        .iter()
        .any(|o| o.kind == "Site" && o.uid != site_uid)
}

/// The retained volume a new claim re-binds to (LIFE-01 step 4), from the volume cache.
async fn retained_volume(ctx: &Context, site: &Site) -> Result<Option<PersistentVolume>, Failure> {
    let id = site.name_any();
    let old_names = [id.as_str(), site.spec.owner.as_str()];
    // Candidates: the volumes labelled for the site or claimed under one of its old names.
    let (index, store) = (&ctx.caches.volumes_by_site, &ctx.caches.volumes);
    let mut candidates = index.get(store, &site_key(&id));
    for name in old_names {
        candidates.extend(index.get(store, &claim_key(&ctx.namespace, name)));
    }
    candidates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    candidates.dedup_by(|a, b| a.metadata.name == b.metadata.name);
    Ok(volume::find_retained_volume(
        candidates.iter().map(AsRef::as_ref),
        &id,
        &ctx.namespace,
        &old_names,
    )
    .cloned())
}

async fn rebind(ctx: &Context, site: &Site, pv: &PersistentVolume) -> Result<(), Failure> {
    let id = site.name_any();
    let name = pv.name_any();
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let patch = volume::rebind_patch(&id, &ctx.namespace, &id);
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Failure::api)?;
    tracing::info!(site = %id, volume = %name, "re-binding a retained volume");
    ctx.event(
        site,
        EventType::Normal,
        "VolumeReattached",
        format!("re-binding retained volume {name}"),
    )
    .await;
    Ok(())
}

/// Labels the claim's bound volume with the site labels, after a jittered delay, once per volume
/// per process (the patch is skipped when the labels are already there).
fn label_volume_later(ctx: &Context, id: &str, claim: Option<&PersistentVolumeClaim>) {
    let Some(volume) = claim
        .and_then(|c| c.spec.as_ref())
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty())
    else {
        return;
    };
    {
        let mut done = ctx
            .labelled_volumes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !done.insert(volume.clone()) {
            return;
        }
    }
    // Already labelled (the usual case after a restart): nothing to do, no API call.
    let cached = ctx.caches.volumes.get(&ObjectRef::new(&volume));
    if cached.as_deref().is_some_and(|pv| owned_by(pv, id)) {
        return;
    }
    let (low, high) = ctx.settings.pv_label_delay;
    let spread = high.saturating_sub(low).as_millis() as u64;
    let jitter = if spread == 0 {
        0
    } else {
        let mut b = [0u8; 8];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
        u64::from_le_bytes(b) % spread
    };
    let due = tokio::time::Instant::now() + low + Duration::from_millis(jitter);
    let mut labeller = ctx.labeller.lock().unwrap_or_else(|e| e.into_inner());
    let tx = labeller.get_or_insert_with(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(label_volumes(ctx.client.clone(), rx));
        tx
    });
    let _ = tx.send(Labelling {
        due,
        volume,
        id: id.to_string(),
    });
}

/// A volume label patch due at `due`.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Labelling {
    due: tokio::time::Instant,
    volume: String,
    id: String,
}

/// Applies volume label patches when they are due, one at a time, until the context is gone.
/// One task and a heap of small entries, not a sleeping task per site: at 10,000 new Sites the
/// tasks alone took tens of MiB.
async fn label_volumes(client: kube::Client, mut rx: mpsc::UnboundedReceiver<Labelling>) {
    let mut waiting: BinaryHeap<Reverse<Labelling>> = BinaryHeap::new();
    loop {
        let next = waiting.peek().map(|Reverse(l)| l.due);
        tokio::select! {
            item = rx.recv() => match item {
                Some(l) => waiting.push(Reverse(l)),
                None => return,
            },
            _ = tokio::time::sleep_until(next.unwrap_or_else(tokio::time::Instant::now)), if next.is_some() => {
                if let Some(Reverse(l)) = waiting.pop() {
                    label_volume(&client, &l.volume, &l.id).await;
                }
            }
        }
    }
}

/// Labels `volume` with the site labels of `id` unless it already has them.
async fn label_volume(client: &kube::Client, volume: &str, id: &str) {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    match api.get_opt(volume).await {
        Ok(Some(pv)) if owned_by(&pv, id) => {}
        Ok(Some(_)) => {
            if let Err(e) = api
                .patch(
                    volume,
                    &PatchParams::default(),
                    &Patch::Merge(&volume::label_patch(id)),
                )
                .await
            {
                tracing::warn!(site = %id, volume = %volume, error = %e, "cannot label the site volume");
            }
        }
        Ok(None) => {
            tracing::info!(site = %id, volume = %volume, "volume not found; not labelled")
        }
        Err(e) => {
            tracing::warn!(site = %id, volume = %volume, error = %e, "cannot read the site volume")
        }
    }
}

/// LIFE-15: after a StatefulSet update, pods that are not Running and Ready and not terminating
/// are deleted so the controller recreates them from the new template. Errors are logged only.
async fn replace_not_ready_pods(ctx: &Context, id: &str) {
    let api: Api<Pod> = ctx.api();
    for pod in site_pods(ctx, id) {
        if status::pod_ready(&pod) || status::terminating(&pod) {
            continue;
        }
        let name = pod.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(site = id, pod = %name, "deleted a not-ready pod so the rollout can go on")
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(kube::Error::Api(s)) if s.code == 403 => {
                tracing::error!(site = id, pod = %name, "not allowed to delete pods (403): the Role must grant pods/delete")
            }
            Err(e) => {
                tracing::warn!(site = id, pod = %name, error = %e, "cannot delete a not-ready pod")
            }
        }
    }
}

/// Route of the active mode (create, update, or delete when the site has no public path), never
/// touching a route another site owns; then removal of this site's route of the other mode.
async fn routes(
    ctx: &Context,
    site: &Site,
    created: &mut Writes,
    desired: Option<Route>,
) -> Result<Ensured, Failure> {
    let id = site.name_any();
    let c = &ctx.caches;
    let mode = ctx.config.routing.mode;
    let mut outcome = Outcome::Ensured;
    let mut next = Next::Done;

    // Active mode.
    let foreign = match mode {
        RoutingMode::Ingress => ctx
            .cached(&c.ingresses, &id)
            .filter(|r| !owned_by(r.as_ref(), &id))
            .is_some(),
        RoutingMode::Gateway => c
            .httproutes
            .as_ref()
            .and_then(|s| ctx.cached(s, &id))
            .filter(|r| !owned_by(r.as_ref(), &id))
            .is_some(),
    };
    if foreign {
        let message = format!(
            "a {} named {id} belongs to another site; it is left alone and retried in {}s",
            if mode == RoutingMode::Ingress {
                "Ingress"
            } else {
                "HTTPRoute"
            },
            ROUTE_CONFLICT_RETRY.as_secs()
        );
        outcome = Outcome::RouteConflict(message);
        next = Next::After(ROUTE_CONFLICT_RETRY);
    } else {
        match (desired, mode) {
            (Some(Route::Ingress(i)), _) => {
                ensure_one(ctx, site, created, &c.ingresses, i).await?;
            }
            (Some(Route::HttpRoute(r)), _) => {
                let store = c.httproutes.as_ref().ok_or_else(|| {
                    Failure::Transient("gateway mode, but the cluster does not serve HTTPRoutes (gateway.networking.k8s.io/v1)".into())
                })?;
                ensure_one(ctx, site, created, store, r).await?;
            }
            (None, RoutingMode::Ingress) => {
                if ctx.cached(&c.ingresses, &id).is_some() {
                    delete::<Ingress>(ctx, &id).await.map_err(Failure::api)?;
                }
            }
            (None, RoutingMode::Gateway) => {
                if c.httproutes
                    .as_ref()
                    .and_then(|s| ctx.cached(s, &id))
                    .is_some()
                {
                    delete::<HttpRoute>(ctx, &id).await.map_err(Failure::api)?;
                }
            }
        }
    }

    // Other mode (LIFE-13): only this site's own route; a foreign one stays.
    let other = match mode {
        RoutingMode::Ingress => c
            .httproutes
            .as_ref()
            .and_then(|s| ctx.cached(s, &id))
            .map(|r| owned_by(r.as_ref(), &id)),
        RoutingMode::Gateway => ctx
            .cached(&c.ingresses, &id)
            .map(|r| owned_by(r.as_ref(), &id)),
    };
    match other {
        Some(true) => {
            let result = match mode {
                RoutingMode::Ingress => delete::<HttpRoute>(ctx, &id).await,
                RoutingMode::Gateway => delete::<Ingress>(ctx, &id).await,
            };
            if let Err(e) = result {
                let message = format!(
                    "cannot delete the route of the other routing mode: {}",
                    Failure::api(e).message()
                );
                if outcome == Outcome::Ensured {
                    outcome = Outcome::Transient(message);
                }
                if next == Next::Done {
                    next = Next::After(OTHER_MODE_RETRY);
                }
            }
        }
        Some(false) => {
            tracing::warn!(site = %id, "a route of the other routing mode with this name belongs to another site; left alone")
        }
        None => {}
    }
    Ok(Ensured { outcome, next })
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Failure::Transient(m) | Failure::Terminal(m) => m,
        }
    }
}

async fn delete<K>(ctx: &Context, name: &str) -> Result<(), kube::Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match ctx.api::<K>().delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(kind = %K::kind(&K::DynamicType::default()), object = name, "deleted route");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the session key Secret when missing (local runs and tests; a real installation
/// provides it).
pub async fn ensure_session_secret(
    client: &kube::Client,
    namespace: &str,
    cfg: &PlatformConfig,
) -> Result<(), kube::Error> {
    let reference = &cfg.sites.session.secret_key;
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    if api.get_opt(&reference.secret_name).await?.is_some() {
        return Ok(());
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(reference.secret_name.clone()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        data: Some(std::collections::BTreeMap::from([(
            reference.key.clone(),
            k8s_openapi::ByteString(random_token().into_bytes()),
        )])),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        // 409: created meanwhile by another replica.
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::SiteBuilder;
    use serde_json::json;

    #[test]
    fn claims_of_a_previous_site_of_the_same_name_are_recognised() {
        let site = SiteBuilder::new("s").uid("new").build();
        let claim = |meta: serde_json::Value| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": meta})).unwrap()
        };
        let owner = |uid: &str| json!([{"apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "name": "s", "uid": uid}]);
        for (case, meta, previous) in [
            (
                "owned by this Site",
                json!({"name": "s", "ownerReferences": owner("new")}),
                false,
            ),
            (
                "owned by a deleted Site",
                json!({"name": "s", "ownerReferences": owner("old")}),
                true,
            ),
            (
                "this Site's claim deleted by hand",
                json!({"name": "s", "ownerReferences": owner("new"), "deletionTimestamp": "2026-11-29T10:00:00Z"}),
                false,
            ),
            (
                "a deleted Site's claim being collected",
                json!({"name": "s", "ownerReferences": owner("old"), "deletionTimestamp": "2026-11-29T10:00:00Z"}),
                true,
            ),
            ("no owner: adopted", json!({"name": "s"}), false),
            (
                "owned by something else",
                json!({"name": "s", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "x"}]}),
                false,
            ),
        ] {
            assert_eq!(
                previous_incarnation(&claim(meta), &site),
                previous,
                "{case}"
            );
        }
    }
}
