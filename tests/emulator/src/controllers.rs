//! Simulated controllers, event-driven from the store's watch stream plus a short tick:
//!
//! - **StatefulSet** (concepts/workloads/controllers/statefulset.md): pods `<sts>-<n>` with the
//!   template labels plus `controller-revision-hash`, `statefulset.kubernetes.io/pod-name` and
//!   `apps.kubernetes.io/pod-index`; a ControllerRevision per template revision; OrderedReady
//!   creation and highest-first scale-down; RollingUpdate from the highest ordinal, each updated
//!   pod Running and Ready before the next; the stall when an updated pod never becomes Ready
//!   (reverting the template does not help, deleting the pod does: kubernetes/kubernetes#67250);
//!   status with observedGeneration, replicas, readyReplicas, availableReplicas,
//!   currentReplicas, updatedReplicas and revisions. Its pods pass the built-in admission
//!   plugins ([`crate::priority`]); a pod that cannot be created leaves the status as it was,
//!   is reported by a Warning Event `FailedCreate` on the StatefulSet (repeats counted on one
//!   Event) and retried with a back-off, at once when a PriorityClass is written.
//! - **Kubelet**: moves pods through Pending (ContainerCreating) to Running; per container, a
//!   test-controlled [`Behaviour`] decides ready, never ready, crash-looping or image-pull
//!   failure; conditions change lastTransitionTime only when they flip; pods being deleted are
//!   removed after their containers "stop".
//! - **Volumes**: claims are provisioned (PV `pvc-<claim uid>`) or bound to a pre-bound or
//!   retained volume named in `spec.volumeName`; deleting a claim deletes its volume (reclaim
//!   policy Delete) or leaves it Released with the old claimRef (Retain).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::meta::{self, meta_str, rv_of};
use crate::registry::ResourceInfo;
use crate::state::App;
pub use crate::state::{Behaviour, Kubelet};
use crate::store::EventType;

#[derive(Default)]
struct Dirty {
    statefulsets: HashSet<(String, String)>,
    pods: HashSet<(String, String)>,
    claims: HashSet<(String, String)>,
    released_claims: Vec<Arc<Value>>,
    /// Namespaces whose ResourceQuotas may need a new status.
    quotas: HashSet<String>,
}

/// The first and the longest wait before a StatefulSet whose pod could not be created is
/// synced again (the controller's rate-limited requeue, shortened).
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// A StatefulSet waiting to be retried: when, and the wait after the next failure.
struct Retry {
    at: Instant,
    next: Duration,
}

/// What a StatefulSet sync asks for next.
#[derive(Debug, PartialEq)]
enum Next {
    /// Nothing until something changes.
    Idle,
    /// Another pass soon: it created or deleted pods.
    Soon,
    /// Creating a pod failed: retry after a back-off.
    Retry,
}

/// Runs the controllers until the process ends.
pub async fn run(app: Arc<App>) {
    let mut rx = app.store.subscribe();
    let mut dirty = Dirty::default();
    // Claims not Bound yet: a volume or storage class event may let them bind (bound claims
    // do not care, and looking at every claim on every volume event is quadratic at scale).
    let mut unbound = HashSet::new();
    // Pods without a node, for a node event (kept from the pod events: looking at every pod
    // on each node status report is quadratic at scale).
    let mut unscheduled = HashSet::new();
    mark_all(&app, &mut dirty, &mut unbound, &mut unscheduled);
    let mut retries: HashMap<(String, String), Retry> = HashMap::new();
    // Under a kubelet pace ([`Kubelet::set_pace`]): when each pod may take its next step.
    let mut paced: HashMap<(String, String), Instant> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(25));
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => {
                    let key = (ev.namespace.clone(), ev.name.clone());
                    if !ev.namespace.is_empty() && !matches!(ev.resource.as_str(), "events" | "leases.coordination.k8s.io") {
                        dirty.quotas.insert(ev.namespace.clone());
                    }
                    match ev.resource.as_str() {
                        "statefulsets.apps" => { dirty.statefulsets.insert(key); }
                        "pods" => {
                            let pod = ev.object.value();
                            if let Some(owner) = sts_owner(&pod) {
                                dirty.statefulsets.insert((ev.namespace.clone(), owner));
                            }
                            if ev.kind != EventType::Deleted {
                                dirty.pods.insert(key.clone());
                            } else {
                                paced.remove(&key);
                            }
                            if ev.kind != EventType::Deleted && pod["spec"]["nodeName"].is_null() {
                                unscheduled.insert(key.clone());
                            } else {
                                unscheduled.remove(&key);
                            }
                            for claim in pod_claims(&pod) {
                                dirty.claims.insert((ev.namespace.clone(), claim));
                            }
                        }
                        "persistentvolumeclaims" => {
                            if ev.kind == EventType::Deleted {
                                unbound.remove(&key);
                                dirty.released_claims.push(Arc::new(ev.object.value()));
                            } else {
                                if ev.object.value()["status"]["phase"] == "Bound" {
                                    unbound.remove(&key);
                                } else {
                                    unbound.insert(key.clone());
                                }
                                dirty.claims.insert(key);
                            }
                        }
                        "nodes" => dirty.pods.extend(unscheduled.iter().cloned()),
                        "persistentvolumes" | "storageclasses.storage.k8s.io" => {
                            dirty.claims.extend(unbound.iter().cloned());
                        }
                        "priorityclasses.scheduling.k8s.io" => {
                            dirty.statefulsets.extend(retries.keys().cloned());
                        }
                        _ => {}
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => mark_all(&app, &mut dirty, &mut unbound, &mut unscheduled),
                Err(_) => return,
            },
            _ = tick.tick() => {
                let touched: Vec<_> = app.kubelet.touched.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
                if touched.iter().any(|(n, _)| n == "*") {
                    mark_all(&app, &mut dirty, &mut unbound, &mut unscheduled);
                } else {
                    dirty.pods.extend(touched);
                }
                let now = Instant::now();
                dirty.statefulsets.extend(
                    retries.iter().filter(|(_, r)| r.at <= now).map(|(k, _)| k.clone()),
                );
                let d = std::mem::take(&mut dirty);
                for claim in d.released_claims {
                    release_volume(&app, &claim);
                }
                for ns in d.quotas {
                    sync_quotas(&app, &ns);
                }
                for (ns, name) in d.claims {
                    bind_claim(&app, &ns, &name);
                }
                for key in d.statefulsets {
                    match sync_statefulset(&app, &key.0, &key.1) {
                        Next::Retry => {
                            let wait = retries.get(&key).map_or(RETRY_FIRST, |r| r.next);
                            let next = (wait * 2).min(RETRY_MAX);
                            retries.insert(key, Retry { at: Instant::now() + wait, next });
                        }
                        Next::Soon => {
                            retries.remove(&key);
                            dirty.statefulsets.insert(key);
                        }
                        Next::Idle => {
                            retries.remove(&key);
                        }
                    }
                }
                let pace = app.kubelet.pace();
                for key in d.pods {
                    if paced.get(&key).is_some_and(|at| *at > now) {
                        dirty.pods.insert(key);
                        continue;
                    }
                    let step = kubelet_step(&app, &key.0, &key.1);
                    if step.changed && !pace.is_zero() {
                        paced.insert(key.clone(), now + pace);
                    }
                    if step.again {
                        dirty.pods.insert(key);
                    }
                }
            }
        }
    }
}

/// The resource quota controller: `status.hard` and `status.used` of the namespace's quotas.
fn sync_quotas(app: &App, ns: &str) {
    let Some(r) = resource(app, "", "resourcequotas") else {
        return;
    };
    let quotas = app.store.lock().objects_of(&r.key(), Some(ns));
    if quotas.is_empty() {
        return;
    }
    let count = |key: &str| -> i64 {
        let st = app.store.lock();
        let (stored, service_type) = match key {
            "services.loadbalancers" => ("services", Some("LoadBalancer")),
            "services.nodeports" => ("services", Some("NodePort")),
            k => (k, None),
        };
        st.objects_of(stored, Some(ns))
            .iter()
            .filter(|o| match (stored, service_type) {
                ("pods", _) => {
                    !matches!(o["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
                }
                (_, Some(t)) => o["spec"]["type"] == t,
                _ => true,
            })
            .count() as i64
    };
    for q in quotas {
        let status = crate::batch::quota_status(&q, &count);
        if q["status"] != status {
            let mut new = (*q).clone();
            new["status"] = status;
            write(app, &r, &q, new);
        }
    }
}

fn resource(app: &App, group: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
    app.store.lock().registry.get(group, "v1", plural)
}

fn mark_all(
    app: &App,
    dirty: &mut Dirty,
    unbound: &mut HashSet<(String, String)>,
    unscheduled: &mut HashSet<(String, String)>,
) {
    let st = app.store.lock();
    for (key, _) in st.stored_of("statefulsets.apps", None) {
        dirty.statefulsets.insert(key);
    }
    *unscheduled = crate::cluster::unscheduled_pods(&st);
    for (key, _) in st.stored_of("pods", None) {
        dirty.pods.insert(key);
    }
    unbound.clear();
    for o in st.objects_of("persistentvolumeclaims", None) {
        if o["status"]["phase"] != "Bound" {
            unbound.insert(key_of(&o));
        }
        dirty.claims.insert(key_of(&o));
    }
}

fn key_of(o: &Value) -> (String, String) {
    (
        meta_str(o, "namespace").unwrap_or_default().to_string(),
        meta_str(o, "name").unwrap_or_default().to_string(),
    )
}

fn sts_owner(pod: &Value) -> Option<String> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find_map(|r| {
            (r["kind"] == "StatefulSet" && r["controller"] == json!(true))
                .then(|| r["name"].as_str().map(str::to_string))
                .flatten()
        })
}

/// The claims a pod mounts (`persistentVolumeClaim.claimName` of its volumes).
pub fn pod_claims(pod: &Value) -> Vec<String> {
    pod["spec"]["volumes"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter_map(|v| {
                    v["persistentVolumeClaim"]["claimName"]
                        .as_str()
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a pod of namespace `ns` mounts the claim `name`. Only the pods whose text names
/// it as a `claimName` are parsed.
fn claim_in_use(app: &App, ns: &str, name: &str) -> bool {
    let needle = format!(
        "\"claimName\":{}",
        serde_json::to_string(name).unwrap_or_default()
    );
    app.store
        .lock()
        .stored_of("pods", Some(ns))
        .iter()
        .filter(|(_, p)| p.json().contains(&needle))
        .any(|(_, p)| pod_claims(&p.value()).iter().any(|c| c == name))
}

/// Writes `new` over `old` unless they are equal; whether it was written (a conflict is not:
/// the next event retries).
fn write(app: &App, r: &ResourceInfo, old: &Value, new: Value) -> bool {
    *old != new && app.store.commit_update(r, rv_of(old), new).is_ok()
}

fn create(app: &App, r: &ResourceInfo, ns: &str, obj: Value) -> Option<Arc<Value>> {
    admitted_create(app, r, ns, obj).ok()
}

/// Creates an object as a controller's client does: through the built-in admission plugins.
fn admitted_create(
    app: &App,
    r: &ResourceInfo,
    ns: &str,
    obj: Value,
) -> Result<Arc<Value>, crate::status::ApiError> {
    let name = meta_str(&obj, "name").unwrap_or_default().to_string();
    let mut object =
        crate::ops::prepare_create(r, ns, obj, &crate::ops::WriteOptions::default())?.object;
    crate::priority::admit(app, r, None, &name, &mut object, None)?;
    app.store.commit_create(r, object)
}

fn now() -> String {
    meta::now()
}

// ---------------------------------------------------------------- StatefulSet

fn revision_hash(template: &Value) -> String {
    // FNV-1a over the canonical JSON (hashed as it is written, not built as a string), rendered
    // in the alphabet Kubernetes uses for hashes.
    struct Fnv(u32);
    impl std::io::Write for Fnv {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            for b in buf {
                self.0 ^= *b as u32;
                self.0 = self.0.wrapping_mul(0x01000193);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut fnv = Fnv(0x811c9dc5);
    let _ = serde_json::to_writer(&mut fnv, template);
    let h = fnv.0;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut s = String::new();
    let mut n = h as u64;
    for _ in 0..10 {
        s.push(ALPHABET[(n % ALPHABET.len() as u64) as usize] as char);
        n /= ALPHABET.len() as u64;
    }
    s
}

fn pod_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// One pass over a StatefulSet.
fn sync_statefulset(app: &App, ns: &str, name: &str) -> Next {
    let (Some(sts_r), Some(pod_r), Some(rev_r)) = (
        resource(app, "apps", "statefulsets"),
        resource(app, "", "pods"),
        resource(app, "apps", "controllerrevisions"),
    ) else {
        return Next::Idle;
    };
    let Some(sts) = app.store.lock().get(&sts_r, ns, name) else {
        return Next::Idle;
    };
    if sts["metadata"]["deletionTimestamp"].is_string() {
        return Next::Idle;
    }
    let template = &sts["spec"]["template"];
    let hash = revision_hash(template);
    let update_revision = format!("{name}-{hash}");
    let uid = meta_str(&sts, "uid").unwrap_or_default().to_string();
    let owner = json!([{
        "apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true
    }]);
    if app.store.lock().get(&rev_r, ns, &update_revision).is_none() {
        let revision = app
            .store
            .lock()
            .objects_with_prefix(&rev_r.key(), ns, &format!("{name}-"))
            .iter()
            .filter(|r| r["metadata"]["ownerReferences"][0]["uid"] == json!(uid))
            .count()
            + 1;
        create(
            app,
            &rev_r,
            ns,
            json!({
                "apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": update_revision, "labels": sts["spec"]["selector"]["matchLabels"], "ownerReferences": owner},
                "data": {"spec": {"template": template}},
                "revision": revision,
            }),
        );
    }
    let replicas = sts["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
    let parallel = sts["spec"]["podManagementPolicy"] == "Parallel";
    let on_delete = sts["spec"]["updateStrategy"]["type"] == "OnDelete";
    let partition = sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
        .as_i64()
        .unwrap_or(0)
        .max(0) as usize;

    let pods: Vec<Arc<Value>> = app
        .store
        .lock()
        .objects_with_prefix("pods", ns, &format!("{name}-"))
        .into_iter()
        .filter(|p| sts_owner(p).as_deref() == Some(name))
        .collect();
    let by_ordinal = |i: usize| {
        pods.iter()
            .find(|p| meta_str(p, "name") == Some(&format!("{name}-{i}")))
    };
    let mut changed = false;
    let mut waiting = false;

    // Create missing pods; OrderedReady waits for each predecessor to be Running and Ready.
    for i in 0..replicas {
        match by_ordinal(i) {
            Some(p) => {
                if !parallel && (!pod_ready(p) || p["metadata"]["deletionTimestamp"].is_string()) {
                    waiting = true;
                    break;
                }
            }
            None => {
                let pod = pod_of(app, &sts, ns, name, i, &update_revision, &owner);
                if let Err(e) = admitted_create(app, &pod_r, ns, pod) {
                    // As the controller: a Warning Event (none for a pod that exists but is
                    // not this set's), no status update, a retry later.
                    if e.reason == "AlreadyExists" {
                        return Next::Retry;
                    }
                    crate::events::record(
                        app,
                        &sts_r,
                        &sts,
                        "Warning",
                        "FailedCreate",
                        &format!(
                            "create Pod {name}-{i} in StatefulSet {name} failed error: {}",
                            e.message
                        ),
                        "statefulset-controller",
                    );
                    return Next::Retry;
                }
                changed = true;
                if !parallel {
                    break;
                }
            }
        }
    }

    // Scale down: highest ordinal first; OrderedReady proceeds only when the condemned pod is
    // the first unhealthy one or every pod is healthy.
    let ordinal = |p: &Value| {
        meta_str(p, "name")
            .and_then(|n| n.rsplit('-').next())
            .and_then(|i| i.parse::<usize>().ok())
    };
    let mut condemned: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| ordinal(p).is_some_and(|i| i >= replicas))
        .collect();
    condemned.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));
    if !changed && !condemned.is_empty() {
        let mut unhealthy: Vec<&Arc<Value>> = pods.iter().filter(|p| !pod_ready(p)).collect();
        unhealthy.sort_by_key(|p| ordinal(p));
        let targets: Vec<&Arc<Value>> = if parallel {
            condemned.clone()
        } else {
            vec![condemned[0]]
        };
        for p in targets {
            let first_unhealthy = unhealthy
                .first()
                .is_none_or(|u| meta_str(u, "name") == meta_str(p, "name"));
            if parallel || first_unhealthy || unhealthy.is_empty() {
                let pn = meta_str(p, "name").unwrap_or_default().to_string();
                if p["metadata"]["deletionTimestamp"].is_null() {
                    let _ = app.store.commit_remove(&pod_r, ns, &pn, None, None);
                    changed = true;
                }
            }
        }
    }

    // Rolling update: from the highest ordinal down, only when every pod is Running and Ready.
    if !changed
        && !waiting
        && !on_delete
        && pods.len() >= replicas
        && pods.iter().all(|p| pod_ready(p))
    {
        for i in (partition..replicas).rev() {
            if let Some(p) = by_ordinal(i)
                && p["metadata"]["labels"]["controller-revision-hash"] != json!(update_revision)
            {
                let _ = app
                    .store
                    .commit_remove(&pod_r, ns, &format!("{name}-{i}"), None, None);
                changed = true;
                break;
            }
        }
    }

    // Status.
    let pods: Vec<Arc<Value>> = app
        .store
        .lock()
        .objects_with_prefix("pods", ns, &format!("{name}-"))
        .into_iter()
        .filter(|p| sts_owner(p).as_deref() == Some(name))
        .collect();
    let ready = pods.iter().filter(|p| pod_ready(p)).count();
    let updated = pods
        .iter()
        .filter(|p| p["metadata"]["labels"]["controller-revision-hash"] == json!(update_revision))
        .count();
    let current_revision = if updated == pods.len() && pods.len() == replicas {
        update_revision.clone()
    } else {
        sts["status"]["currentRevision"]
            .as_str()
            .unwrap_or(&update_revision)
            .to_string()
    };
    let current_replicas = pods
        .iter()
        .filter(|p| p["metadata"]["labels"]["controller-revision-hash"] == json!(current_revision))
        .count();
    let status = json!({
        "observedGeneration": sts["metadata"]["generation"],
        "replicas": pods.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": current_replicas,
        "updatedReplicas": updated,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
        "collisionCount": 0,
    });
    if sts["status"] != status {
        let mut new = (*sts).clone();
        new["status"] = status;
        write(app, &sts_r, &sts, new);
    }
    if changed { Next::Soon } else { Next::Idle }
}

/// Pod `i` of a StatefulSet, its claims created first (as the controller creates them).
fn pod_of(
    app: &App,
    sts: &Value,
    ns: &str,
    name: &str,
    i: usize,
    update_revision: &str,
    owner: &Value,
) -> Value {
    let template = &sts["spec"]["template"];
    let mut pod_meta = template["metadata"].clone();
    if !pod_meta.is_object() {
        pod_meta = json!({});
    }
    let pod_name = format!("{name}-{i}");
    pod_meta["name"] = json!(pod_name);
    pod_meta["namespace"] = json!(ns);
    if !pod_meta["labels"].is_object() {
        pod_meta["labels"] = json!({});
    }
    pod_meta["labels"]["controller-revision-hash"] = json!(update_revision);
    pod_meta["labels"]["statefulset.kubernetes.io/pod-name"] = json!(pod_name);
    pod_meta["labels"]["apps.kubernetes.io/pod-index"] = json!(i.to_string());
    pod_meta["ownerReferences"] = owner.clone();
    let mut spec = template["spec"].clone();
    spec["hostname"] = json!(pod_name);
    if let Some(svc) = sts["spec"]["serviceName"].as_str() {
        spec["subdomain"] = json!(svc);
    }
    for claim in sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let claim_name = format!(
            "{}-{pod_name}",
            meta_str(&claim, "name").unwrap_or_default()
        );
        let pvc_r = resource(app, "", "persistentvolumeclaims");
        let missing = pvc_r
            .as_ref()
            .is_some_and(|r| app.store.lock().get(r, ns, &claim_name).is_none());
        if let (true, Some(pvc_r)) = (missing, pvc_r) {
            let mut c = claim.clone();
            c["metadata"]["name"] = json!(claim_name);
            create(app, &pvc_r, ns, c);
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec})
}

// ---------------------------------------------------------------- Kubelet

/// The pods' InternalIP of the in-process node ([`crate::cluster::NODE_NAME`]).
const HOST_IP: &str = "10.0.0.1";

fn condition(existing: &Value, kind: &str, status: bool, reason: Option<&str>, now: &str) -> Value {
    let status_s = if status { "True" } else { "False" };
    let old = existing
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind));
    let ltt = match old {
        Some(c) if c["status"] == status_s => c["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    let mut c =
        json!({"type": kind, "status": status_s, "lastProbeTime": null, "lastTransitionTime": ltt});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    c
}

/// Advances one pod by one step: whether it wrote the pod, and whether it wants another step.
fn kubelet_step(app: &App, ns: &str, name: &str) -> Stepped {
    let Some(pod_r) = resource(app, "", "pods") else {
        return Stepped::default();
    };
    let Some(pod) = app.store.lock().get(&pod_r, ns, name) else {
        return Stepped::default();
    };
    if pod["metadata"]["deletionTimestamp"].is_string() {
        if !finalizers_left(&pod) {
            let _ = app.store.commit_remove(&pod_r, ns, name, None, None);
        }
        return Stepped::default();
    }
    let mut new = (*pod).clone();
    if pod["spec"]["nodeName"].is_null() {
        match crate::cluster::schedule(app, &pod) {
            Ok(node) => {
                new["spec"]["nodeName"] = json!(node);
                // Just scheduled: its containers are created from scratch.
                if let Some(s) = new["status"].as_object_mut() {
                    s.remove("containerStatuses");
                }
            }
            Err(why) => {
                // Stays Pending until a node event makes it schedulable again.
                new["status"] = crate::cluster::unschedulable_status(&pod, &why);
                write(app, &pod_r, &pod, new);
                return Stepped::default();
            }
        }
    }
    let step = pod_step(
        &new,
        |image| app.kubelet.behaviour(ns, name, image),
        HOST_IP,
        &now(),
    );
    new["status"] = step.status;
    Stepped {
        changed: write(app, &pod_r, &pod, new),
        again: step.again,
    }
}

/// What one kubelet step did: whether it wrote the pod, and whether it wants another step.
#[derive(Default)]
struct Stepped {
    changed: bool,
    again: bool,
}

/// A pod being deleted still has finalizers: the kubelet leaves it for their controllers.
pub fn finalizers_left(pod: &Value) -> bool {
    pod["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

/// What the kubelet does next with a pod bound to its node.
#[derive(Clone, Debug, PartialEq)]
pub struct PodStep {
    /// The pod's next `status` (equal to the current one when nothing changes).
    pub status: Value,
    /// It wants another step soon: containers being created, ErrImagePull turning into
    /// ImagePullBackOff.
    pub again: bool,
}

/// The simulated kubelet's step for a pod bound to its node and not being deleted: the next
/// status, given how each container behaves (`behaviour` of the container's image), the node's
/// IP and the current time. Pods without container statuses get their containers created
/// (Pending, ContainerCreating); then each container runs as its [`Behaviour`] says. Conditions
/// keep their lastTransitionTime unless they flip; a second step without a change in behaviour
/// returns the same status.
pub fn pod_step(
    pod: &Value,
    behaviour: impl Fn(&str) -> Behaviour,
    host_ip: &str,
    now: &str,
) -> PodStep {
    let name = meta_str(pod, "name").unwrap_or_default();
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let old_status = &pod["status"];
    let conds = &old_status["conditions"];
    if old_status["containerStatuses"].is_null() {
        // Scheduled; containers being created.
        let statuses: Vec<Value> = containers
            .iter()
            .map(|c| {
                json!({
                    "name": c["name"], "image": c["image"], "imageID": "", "ready": false, "started": false,
                    "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}
                })
            })
            .collect();
        let status = json!({
            "phase": "Pending",
            "hostIP": host_ip,
            "startTime": now,
            "qosClass": old_status["qosClass"].as_str().unwrap_or("BestEffort"),
            "conditions": [
                condition(conds, "PodScheduled", true, None, now),
                condition(conds, "PodReadyToStartContainers", false, None, now),
                condition(conds, "Initialized", true, None, now),
                condition(conds, "ContainersReady", false, Some("ContainersNotReady"), now),
                condition(conds, "Ready", false, Some("ContainersNotReady"), now),
            ],
            "containerStatuses": statuses,
        });
        return PodStep {
            status,
            again: true,
        };
    }
    let old_statuses = old_status["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut statuses = Vec::new();
    let mut all_ready = true;
    let mut any_running = false;
    let mut pull_failure = false;
    for c in &containers {
        let cname = c["name"].as_str().unwrap_or_default();
        let image = c["image"].as_str().unwrap_or_default();
        let prev = old_statuses
            .iter()
            .find(|s| s["name"] == c["name"])
            .cloned()
            .unwrap_or(json!({}));
        let restarts = prev["restartCount"].as_i64().unwrap_or(0);
        let started_at = prev["state"]["running"]["startedAt"]
            .as_str()
            .unwrap_or(now)
            .to_string();
        let b = behaviour(image);
        let s = match b {
            Behaviour::Ready | Behaviour::NeverReady => {
                any_running = true;
                let ready = b == Behaviour::Ready;
                all_ready &= ready;
                json!({"name": cname, "image": image, "imageID": format!("{image}@sha256:emulated"), "ready": ready, "started": true,
                       "restartCount": restarts, "state": {"running": {"startedAt": started_at}}, "lastState": prev.get("lastState").cloned().unwrap_or(json!({}))})
            }
            Behaviour::CrashLoop => {
                any_running = true;
                all_ready = false;
                let backing_off = prev["state"]["waiting"]["reason"] == "CrashLoopBackOff";
                // The container exits once per entry into the back-off; while it backs off, its
                // last termination stays as it was.
                let (restarts, last_state) = if backing_off
                    && prev["lastState"]["terminated"].is_object()
                {
                    (restarts, prev["lastState"].clone())
                } else {
                    (
                        if backing_off { restarts } else { restarts + 1 },
                        json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": started_at, "finishedAt": now}}),
                    )
                };
                json!({"name": cname, "image": image, "imageID": format!("{image}@sha256:emulated"), "ready": false, "started": false,
                       "restartCount": restarts,
                       "state": {"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off 10s restarting failed container={cname}")}},
                       "lastState": last_state})
            }
            Behaviour::ImagePullFailure => {
                all_ready = false;
                pull_failure = true;
                let reason = if prev["state"]["waiting"]["reason"] == "ErrImagePull"
                    || prev["state"]["waiting"]["reason"] == "ImagePullBackOff"
                {
                    "ImagePullBackOff"
                } else {
                    "ErrImagePull"
                };
                json!({"name": cname, "image": image, "imageID": "", "ready": false, "started": false, "restartCount": 0,
                       "state": {"waiting": {"reason": reason, "message": format!("Back-off pulling image \"{image}\"")}}, "lastState": {}})
            }
        };
        statuses.push(s);
    }
    // Running needs every container created; an image that cannot be pulled keeps it Pending.
    let phase = if any_running && !pull_failure {
        "Running"
    } else {
        "Pending"
    };
    let not_ready = (!all_ready).then_some("ContainersNotReady");
    let mut status = json!({
        "phase": phase,
        "hostIP": host_ip,
        "startTime": old_status["startTime"],
        "qosClass": old_status["qosClass"],
        "conditions": [
            condition(conds, "PodScheduled", true, None, now),
            condition(conds, "PodReadyToStartContainers", true, None, now),
            condition(conds, "Initialized", true, None, now),
            condition(conds, "ContainersReady", all_ready, not_ready, now),
            condition(conds, "Ready", all_ready, not_ready, now),
        ],
        "containerStatuses": statuses,
    });
    if any_running {
        status["podIP"] = json!(pod_ip(name));
    }
    let again = statuses_want_step(&status);
    PodStep { status, again }
}

/// ErrImagePull moves to ImagePullBackOff on the next step.
fn statuses_want_step(status: &Value) -> bool {
    status["containerStatuses"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["state"]["waiting"]["reason"] == "ErrImagePull")
    })
}

/// A pod's IP, derived from its name (stable across steps and restarts).
pub fn pod_ip(name: &str) -> String {
    let mut h: u32 = 7;
    for b in name.bytes() {
        h = h.wrapping_mul(31).wrapping_add(b as u32);
    }
    format!("10.244.{}.{}", (h >> 8) % 250 + 1, h % 250 + 1)
}

// ---------------------------------------------------------------- Volumes

fn bind_claim(app: &App, ns: &str, name: &str) {
    let (Some(pvc_r), Some(pv_r)) = (
        resource(app, "", "persistentvolumeclaims"),
        resource(app, "", "persistentvolumes"),
    ) else {
        return;
    };
    let Some(claim) = app.store.lock().get(&pvc_r, ns, name) else {
        return;
    };
    if claim["metadata"]["deletionTimestamp"].is_string() {
        // pvc-protection: the finalizer goes once no pod uses the claim.
        let in_use = claim_in_use(app, ns, name);
        if !in_use {
            let mut new = (*claim).clone();
            if let Some(f) = new["metadata"]["finalizers"].as_array_mut() {
                f.retain(|f| f != "kubernetes.io/pvc-protection");
            }
            write(app, &pvc_r, &claim, new);
        }
        return;
    }
    let claim_uid = meta_str(&claim, "uid").unwrap_or_default().to_string();
    let storage = claim["spec"]["resources"]["requests"]["storage"].clone();
    let class_name = claim["spec"]["storageClassName"]
        .as_str()
        .map(str::to_string);
    let class = class_name.as_deref().and_then(|c| {
        let sc_r = app
            .store
            .lock()
            .registry
            .get("storage.k8s.io", "v1", "storageclasses")?;
        app.store.lock().get(&sc_r, "", c)
    });
    let claim_ref = json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": name, "uid": claim_uid});

    if claim["status"]["phase"] == "Bound" {
        // Resize: a bound claim whose request grew gets the new capacity.
        if claim["status"]["capacity"]["storage"] != storage && !storage.is_null() {
            let mut new = (*claim).clone();
            new["status"]["capacity"]["storage"] = storage.clone();
            write(app, &pvc_r, &claim, new);
            let pv = claim["spec"]["volumeName"]
                .as_str()
                .and_then(|vn| app.store.lock().get(&pv_r, "", vn));
            if let Some(pv) = pv {
                let mut newpv = (*pv).clone();
                newpv["spec"]["capacity"]["storage"] = storage;
                write(app, &pv_r, &pv, newpv);
            }
        }
        return;
    }

    let volume = match claim["spec"]["volumeName"]
        .as_str()
        .filter(|v| !v.is_empty())
    {
        // Pinned: bind to that volume when it is available for this claim.
        Some(vn) => {
            let Some(pv) = app.store.lock().get(&pv_r, "", vn) else {
                return;
            };
            let cr = &pv["spec"]["claimRef"];
            let free = cr.is_null()
                || (cr["name"] == json!(name)
                    && cr["namespace"] == json!(ns)
                    && (cr["uid"].is_null() || cr["uid"] == json!(claim_uid)));
            if !free {
                return;
            }
            let mut newpv = (*pv).clone();
            newpv["spec"]["claimRef"] = claim_ref;
            newpv["status"] = json!({"phase": "Bound"});
            write(app, &pv_r, &pv, newpv.clone());
            newpv
        }
        None => {
            if class
                .as_ref()
                .is_some_and(|c| c["volumeBindingMode"] == "WaitForFirstConsumer")
            {
                let used = claim_in_use(app, ns, name);
                if !used {
                    return;
                }
            }
            let reclaim = class
                .as_ref()
                .and_then(|c| c["reclaimPolicy"].as_str().map(str::to_string))
                .unwrap_or_else(|| "Delete".into());
            let pv_name = format!("pvc-{claim_uid}");
            let mut pv = json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": pv_name, "finalizers": ["kubernetes.io/pv-protection"]},
                "spec": {
                    "capacity": {"storage": storage},
                    "accessModes": claim["spec"]["accessModes"],
                    "persistentVolumeReclaimPolicy": reclaim,
                    "claimRef": claim_ref,
                    "hostPath": {"path": format!("/var/lib/emulator/{pv_name}")},
                },
            });
            if let Some(c) = &class_name {
                pv["spec"]["storageClassName"] = json!(c);
            }
            let Some(created) = create(app, &pv_r, "", pv) else {
                return;
            };
            let mut bound = (*created).clone();
            bound["status"] = json!({"phase": "Bound"});
            write(app, &pv_r, &created, bound.clone());
            bound
        }
    };
    let mut new = (*claim).clone();
    new["spec"]["volumeName"] = volume["metadata"]["name"].clone();
    new["status"] = json!({
        "phase": "Bound",
        "accessModes": claim["spec"]["accessModes"],
        "capacity": {"storage": if volume["spec"]["capacity"]["storage"].is_null() { storage } else { volume["spec"]["capacity"]["storage"].clone() }},
    });
    let finalizers = new["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !finalizers.contains(&json!("kubernetes.io/pvc-protection")) {
        let mut f = finalizers;
        f.push(json!("kubernetes.io/pvc-protection"));
        new["metadata"]["finalizers"] = json!(f);
    }
    write(app, &pvc_r, &claim, new);
}

/// A claim is gone: its volume is deleted (Delete) or released (Retain).
fn release_volume(app: &App, claim: &Value) {
    let Some(pv_r) = resource(app, "", "persistentvolumes") else {
        return;
    };
    let Some(vn) = claim["spec"]["volumeName"].as_str() else {
        return;
    };
    let Some(pv) = app.store.lock().get(&pv_r, "", vn) else {
        return;
    };
    if pv["spec"]["claimRef"]["uid"] != claim["metadata"]["uid"] {
        return;
    }
    if pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete" {
        let _ = app.store.commit_remove(&pv_r, "", vn, None, None);
    } else {
        let mut new = (*pv).clone();
        new["status"] = json!({"phase": "Released"});
        write(app, &pv_r, &pv, new);
    }
}

/// Rejects a storage increase the storage class cannot serve, as the API server does (403).
pub fn check_claim_resize(
    app: &App,
    r: &ResourceInfo,
    old: Option<&Value>,
    new: &Value,
) -> Result<(), crate::status::ApiError> {
    let Some(old) = old else { return Ok(()) };
    if !(r.is_builtin() && r.kind == "PersistentVolumeClaim") {
        return Ok(());
    }
    let parse = |v: &Value| match v {
        Value::String(s) => sites_quantity::parse(s).ok().map(|q| q.nanos()),
        Value::Number(n) => sites_quantity::parse(&n.to_string())
            .ok()
            .map(|q| q.nanos()),
        _ => None,
    };
    let (Some(o), Some(n)) = (
        parse(&old["spec"]["resources"]["requests"]["storage"]),
        parse(&new["spec"]["resources"]["requests"]["storage"]),
    ) else {
        return Ok(());
    };
    if n <= o {
        return Ok(());
    }
    let class = old["spec"]["storageClassName"].as_str().and_then(|c| {
        let sc_r = app
            .store
            .lock()
            .registry
            .get("storage.k8s.io", "v1", "storageclasses")?;
        app.store.lock().get(&sc_r, "", c)
    });
    let bound = old["status"]["phase"] == "Bound";
    let expandable = class.is_some_and(|c| c["allowVolumeExpansion"] == json!(true));
    if bound && expandable {
        return Ok(());
    }
    let name = meta_str(new, "name").unwrap_or_default();
    Err(crate::status::ApiError::forbidden(
        r,
        name,
        "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_hash_is_fnv_of_the_compact_json() {
        let template = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}});
        let mut h: u32 = 0x811c9dc5;
        for b in template.to_string().bytes() {
            h ^= b as u32;
            h = h.wrapping_mul(0x01000193);
        }
        let (alphabet, mut n, mut want) = (b"bcdfghjklmnpqrstvwxz2456789", h as u64, String::new());
        for _ in 0..10 {
            want.push(alphabet[(n % 27) as usize] as char);
            n /= 27;
        }
        assert_eq!(revision_hash(&template), want);
        let other = json!({"spec": {"containers": [{"name": "c", "image": "nginx:1.28"}]}});
        assert_ne!(revision_hash(&other), want);
    }

    /// One container's state after a step: (phase, Ready, container state, restarts, wants
    /// another step, has a pod IP).
    type Seen = (&'static str, bool, &'static str, i64, bool, bool);

    /// Whether `step` gives what `want` says.
    fn gives(step: &PodStep, want: &Seen) -> bool {
        let s = &step.status;
        let ready = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let c = &s["containerStatuses"][0];
        let state = match c["state"]["waiting"]["reason"].as_str() {
            Some(r) => r,
            None if c["state"]["running"].is_object() => "running",
            None => "?",
        };
        let (phase, want_ready, want_state, restarts, again, ip) = *want;
        s["phase"] == phase
            && ready == want_ready
            && state == want_state
            && c["restartCount"] == restarts
            && step.again == again
            && s["podIP"].is_string() == ip
    }

    #[test]
    fn the_kubelet_step_runs_each_behaviour_to_a_fixed_point() {
        use Behaviour::*;
        let creating: Seen = ("Pending", false, "ContainerCreating", 0, true, false);
        // Behaviour, then what each step gives; one more step changes nothing.
        let cases: Vec<(Behaviour, Vec<Seen>)> = vec![
            (
                Ready,
                vec![creating, ("Running", true, "running", 0, false, true)],
            ),
            (
                NeverReady,
                vec![creating, ("Running", false, "running", 0, false, true)],
            ),
            (
                CrashLoop,
                vec![
                    creating,
                    ("Running", false, "CrashLoopBackOff", 1, false, true),
                ],
            ),
            (
                ImagePullFailure,
                vec![
                    creating,
                    ("Pending", false, "ErrImagePull", 0, true, false),
                    ("Pending", false, "ImagePullBackOff", 0, false, false),
                ],
            ),
        ];
        let times = [
            "2026-01-01T00:00:01Z",
            "2026-01-01T00:00:02Z",
            "2026-01-01T00:00:03Z",
            "2026-01-01T00:00:04Z",
        ];
        for (b, want) in cases {
            let mut pod = json!({
                "metadata": {"name": "web-0", "namespace": "sites"},
                "spec": {"nodeName": "n", "containers": [{"name": "web", "image": "nginx:1.27"}]},
                "status": {"phase": "Pending", "qosClass": "Burstable"},
            });
            for (i, w) in want.iter().enumerate() {
                let step = pod_step(&pod, |_| b, "127.0.0.1", times[i]);
                assert!(gives(&step, w), "{b:?}, step {}: {}", i + 1, step.status);
                assert_eq!(step.status["hostIP"], "127.0.0.1");
                assert_eq!(step.status["qosClass"], "Burstable");
                assert_eq!(step.status["startTime"], times[0]);
                pod["status"] = step.status;
            }
            let last = pod_step(&pod, |_| b, "127.0.0.1", times[want.len()]);
            assert_eq!(last.status, pod["status"], "{b:?}: a fixed point");
            assert!(!last.again, "{b:?}");
            // PodScheduled never flipped: it keeps the time of the first step.
            let scheduled = last.status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "PodScheduled")
                .unwrap()
                .clone();
            assert_eq!(scheduled["lastTransitionTime"], times[0], "{b:?}");
        }
    }

    #[test]
    fn a_pod_is_ready_when_every_container_is() {
        let pod = json!({
            "metadata": {"name": "web-0"},
            "spec": {"nodeName": "n", "containers": [
                {"name": "a", "image": "ready"}, {"name": "b", "image": "slow"}]},
            "status": {"containerStatuses": []},
        });
        let by_image = |image: &str| match image {
            "ready" => Behaviour::Ready,
            _ => Behaviour::NeverReady,
        };
        let step = pod_step(&pod, by_image, HOST_IP, "2026-01-01T00:00:00Z");
        assert_eq!(step.status["phase"], "Running");
        assert_eq!(step.status["containerStatuses"][0]["ready"], true);
        assert_eq!(step.status["containerStatuses"][1]["ready"], false);
        let ready = step.status["conditions"][4].clone();
        assert_eq!(
            (&ready["type"], &ready["status"], &ready["reason"]),
            (
                &json!("Ready"),
                &json!("False"),
                &json!("ContainersNotReady")
            )
        );
        assert_eq!(step.status["podIP"], json!(pod_ip("web-0")));
    }
}
