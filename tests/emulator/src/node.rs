//! The simulated kubelet against any API server (`sites-emulator kubelet`): for a control plane
//! without scheduler and kubelet (kube-apiserver and kube-controller-manager), one process that
//!
//! - registers its Node (the emulator's labels, capacity and allocatable; InternalIP
//!   127.0.0.1) and reports it Ready through `nodes/{name}/status`, again every 10 s;
//! - schedules: binds every pod without `spec.nodeName` (scheduler `default-scheduler`) to its
//!   node through `pods/{name}/binding`, unless the node is cordoned and the pod does not
//!   tolerate it (then PodScheduled False, Unschedulable, as the emulator's scheduler);
//! - runs the pods bound to its node with the emulator's own kubelet step
//!   ([`crate::controllers::pod_step`]), each container as its [`Behaviour`]: the pod
//!   annotation [`BEHAVIOUR_ANNOTATION`], else the behaviour given for its image, else Ready;
//!   a pod whose claims are not all Bound stays ContainerCreating (its volumes cannot be
//!   mounted yet); status writes are PUTs of `pods/{name}/status` at the resourceVersion read
//!   (a conflict waits for the next round);
//! - deletes pods being deleted whose finalizers are gone (grace period 0, as a kubelet does
//!   once their containers stopped);
//! - provisions, for Pending claims of the storage classes it serves, a hostPath volume
//!   `pvc-<claim uid>` pre-bound to the claim (reclaim policy Retain), which the controller
//!   manager's PersistentVolume controller then binds.
//!
//! It polls every 200 ms. Pods that finished (Succeeded, Failed) are left alone.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::Client;
use crate::cluster::{NODE_NAME, fits, node_object, unschedulable_status};
use crate::controllers::{finalizers_left, pod_claims, pod_step};
use crate::meta::meta_str;
use crate::state::Behaviour;

/// Pod annotation naming how every container of the pod behaves: `Ready`, `NeverReady`,
/// `CrashLoop` or `ImagePullFailure`.
pub const BEHAVIOUR_ANNOTATION: &str = "sites-emulator.test/behaviour";
/// Annotation of the volumes it provisions.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The node's InternalIP and the pods' hostIP.
pub const NODE_IP: &str = "127.0.0.1";
/// How often it looks at the cluster.
const POLL: Duration = Duration::from_millis(200);
/// How often it reports the node's status when nothing changed.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// kubeletVersion when the server's /version does not say.
const DEFAULT_VERSION: &str = "v1.32.0";

/// What the remote kubelet serves.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Node's name.
    pub node: String,
    /// Storage classes whose claims it provisions volumes for.
    pub storage_classes: Vec<String>,
    /// Written once the node is registered and Ready.
    pub ready_file: Option<PathBuf>,
    /// How containers of an image behave (exact image reference), unless their pod's
    /// annotation says otherwise.
    pub image_behaviours: HashMap<String, Behaviour>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node: NODE_NAME.to_string(),
            storage_classes: Vec::new(),
            ready_file: None,
            image_behaviours: HashMap::new(),
        }
    }
}

/// Runs the kubelet until `stop` completes. Errors of one round are reported on stderr and the
/// next round tries again.
pub async fn run(client: Client, config: Config, stop: impl Future<Output = ()>) {
    let mut kubelet = Kubelet {
        client,
        config,
        version: None,
        registered: false,
        reported: None,
        ready_written: false,
        provisioned: HashSet::new(),
    };
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_error = String::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        let result = tokio::select! {
            _ = &mut stop => return,
            r = kubelet.round() => r,
        };
        match result {
            Ok(()) => last_error.clear(),
            // The same error every 200 ms is said once.
            Err(e) if e != last_error => {
                eprintln!("kubelet: {e}");
                last_error = e;
            }
            Err(_) => {}
        }
    }
}

struct Kubelet {
    client: Client,
    config: Config,
    /// The server's gitVersion, reported as kubeletVersion.
    version: Option<String>,
    /// The Node exists (created by this process or found).
    registered: bool,
    /// When the node's status was last written.
    reported: Option<Instant>,
    ready_written: bool,
    /// Claims (uid) whose volume exists.
    provisioned: HashSet<String>,
}

impl Kubelet {
    async fn round(&mut self) -> Result<(), String> {
        let node = self.sync_node().await?;
        let claims = self.list("/api/v1/persistentvolumeclaims").await?;
        let mut errors = Vec::new();
        if let Err(e) = self.provision(&claims).await {
            errors.push(e);
        }
        let bound: HashSet<(String, String)> = claims
            .iter()
            .filter(|c| c["status"]["phase"] == "Bound")
            .map(|c| {
                (
                    meta_str(c, "namespace").unwrap_or_default().to_string(),
                    meta_str(c, "name").unwrap_or_default().to_string(),
                )
            })
            .collect();
        if let Err(e) = self.sync_pods(&node, &bound).await {
            errors.push(e);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// Registers the node, reports its status when due; returns the node as stored.
    async fn sync_node(&mut self) -> Result<Value, String> {
        let name = self.config.node.clone();
        if self.version.is_none() {
            let r = self.client.get("/version").await?;
            self.version = Some(
                r.body["gitVersion"]
                    .as_str()
                    .filter(|_| r.ok())
                    .unwrap_or(DEFAULT_VERSION)
                    .to_string(),
            );
        }
        let desired = node_object(
            &name,
            NODE_IP,
            self.version.as_deref().unwrap_or(DEFAULT_VERSION),
            &crate::meta::now(),
        );
        if !self.registered {
            let mut create = desired.clone();
            if let Some(o) = create.as_object_mut() {
                o.remove("status");
            }
            let r = self.client.post("/api/v1/nodes", &create).await?;
            if !(r.ok() || r.status == 409) {
                return Err(r.error("registering the node"));
            }
            self.registered = true;
            self.reported = None;
        }
        let path = format!("/api/v1/nodes/{name}");
        let r = self.client.get(&path).await?;
        if r.status == 404 {
            // Deleted: registered again next round.
            self.registered = false;
            return Err(format!("node {name} is gone; registering it again"));
        }
        if !r.ok() {
            return Err(r.error("reading the node"));
        }
        let mut node = r.body;
        let due = self.reported.is_none_or(|t| t.elapsed() >= HEARTBEAT);
        if due || !node_ready(&node) {
            let mut new = node.clone();
            new["status"] = node_status(&node["status"], &desired["status"]);
            let r = self.client.put(&format!("{path}/status"), &new).await?;
            if r.status == 409 {
                return Ok(node);
            }
            if !r.ok() {
                return Err(r.error("reporting the node's status"));
            }
            node = r.body;
            self.reported = Some(Instant::now());
        }
        if node_ready(&node) && !self.ready_written {
            if let Some(file) = &self.config.ready_file {
                // Whole or not at all: written beside it, then renamed.
                let tmp = file.with_extension("partial");
                std::fs::write(&tmp, format!("{name}\n"))
                    .and_then(|()| std::fs::rename(&tmp, file))
                    .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            }
            self.ready_written = true;
        }
        Ok(node)
    }

    /// The items of a list.
    async fn list(&self, path: &str) -> Result<Vec<Value>, String> {
        let r = self.client.get(path).await?;
        if !r.ok() {
            return Err(r.error(&format!("listing {path}")));
        }
        Ok(r.body["items"].as_array().cloned().unwrap_or_default())
    }

    /// Binds unscheduled pods, runs the node's pods, deletes those whose deletion is due.
    /// `bound`: the claims (namespace, name) that are Bound.
    async fn sync_pods(
        &self,
        node: &Value,
        bound: &HashSet<(String, String)>,
    ) -> Result<(), String> {
        let mut errors = Vec::new();
        for pod in &self.list("/api/v1/pods").await? {
            if let Err(e) = self.sync_pod(node, pod, bound).await {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    async fn sync_pod(
        &self,
        node: &Value,
        pod: &Value,
        bound: &HashSet<(String, String)>,
    ) -> Result<(), String> {
        let ns = meta_str(pod, "namespace").unwrap_or_default();
        let name = meta_str(pod, "name").unwrap_or_default();
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        let deleting = pod["metadata"]["deletionTimestamp"].is_string();
        let node_name = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        if node_name.is_empty() {
            if deleting || !schedules(pod) {
                return Ok(());
            }
            return match fits(Some(node), pod) {
                Ok(()) => {
                    let r = self
                        .client
                        .post(&format!("{path}/binding"), &binding(pod, &self.config.node))
                        .await?;
                    // 409: bound meanwhile (or replaced); the next list tells.
                    if r.ok() || r.status == 409 {
                        Ok(())
                    } else {
                        Err(r.error(&format!("binding pod {ns}/{name}")))
                    }
                }
                Err(why) => {
                    let status = unschedulable_status(pod, &why);
                    self.write_status(pod, &path, status).await
                }
            };
        }
        if node_name != self.config.node {
            return Ok(());
        }
        if deleting {
            if finalizers_left(pod) {
                return Ok(());
            }
            let r = self.client.delete(&path, &final_delete(pod)).await?;
            // 404: gone already; 409: a pod of the same name replaced it.
            return if r.ok() || r.status == 404 || r.status == 409 {
                Ok(())
            } else {
                Err(r.error(&format!("deleting pod {ns}/{name}")))
            };
        }
        if matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        ) {
            return Ok(());
        }
        let created = pod["status"]["containerStatuses"].is_array();
        if created && !volumes_ready(pod, bound) {
            return Ok(());
        }
        let step = pod_step(
            pod,
            behaviour_of(pod, &self.config.image_behaviours),
            NODE_IP,
            &crate::meta::now(),
        );
        self.write_status(pod, &path, step.status).await
    }

    /// PUTs `status` unless the pod has it already; a conflict waits for the next round.
    async fn write_status(&self, pod: &Value, path: &str, status: Value) -> Result<(), String> {
        if contains(&pod["status"], &status) {
            return Ok(());
        }
        let mut new = pod.clone();
        // List items carry no kind.
        new["apiVersion"] = json!("v1");
        new["kind"] = json!("Pod");
        new["status"] = status;
        let r = self.client.put(&format!("{path}/status"), &new).await?;
        if r.ok() || r.status == 409 || r.status == 404 {
            Ok(())
        } else {
            Err(r.error(&format!("writing the status of {path}")))
        }
    }

    /// Creates the volumes of the claims it serves.
    async fn provision(&mut self, claims: &[Value]) -> Result<(), String> {
        let mut errors = Vec::new();
        for claim in claims {
            let uid = meta_str(claim, "uid").unwrap_or_default().to_string();
            if self.provisioned.contains(&uid) || !wants_volume(claim, &self.config.storage_classes)
            {
                continue;
            }
            let Some(pv) = volume_for(claim) else {
                continue;
            };
            let r = self.client.post("/api/v1/persistentvolumes", &pv).await?;
            if r.ok() || r.status == 409 {
                self.provisioned.insert(uid);
            } else {
                errors.push(r.error(&format!(
                    "provisioning {}",
                    meta_str(&pv, "name").unwrap_or_default()
                )));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// The node's condition Ready is True.
fn node_ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The status to report: `desired`, with each condition's lastTransitionTime kept from `old`
/// when its status did not change, and what others wrote beside it (images, volumes) kept.
pub fn node_status(old: &Value, desired: &Value) -> Value {
    let mut status = match old {
        Value::Object(_) => old.clone(),
        _ => json!({}),
    };
    for (k, v) in desired.as_object().into_iter().flatten() {
        status[k] = v.clone();
    }
    if let Some(conds) = status["conditions"].as_array_mut() {
        for c in conds {
            let before = old["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|o| o["type"] == c["type"]));
            if let Some(b) = before.filter(|b| b["status"] == c["status"]) {
                c["lastTransitionTime"] = b["lastTransitionTime"].clone();
            }
        }
    }
    status
}

/// Every claim the pod mounts is Bound (in `bound`: namespace, name): its volumes can be
/// mounted.
pub fn volumes_ready(pod: &Value, bound: &HashSet<(String, String)>) -> bool {
    let ns = meta_str(pod, "namespace").unwrap_or_default();
    pod_claims(pod)
        .into_iter()
        .all(|c| bound.contains(&(ns.to_string(), c)))
}

/// The pod is for the default scheduler, the one this kubelet stands in for.
fn schedules(pod: &Value) -> bool {
    pod["spec"]["schedulerName"]
        .as_str()
        .is_none_or(|s| s.is_empty() || s == "default-scheduler")
}

/// The v1 Binding that puts `pod` on `node`.
pub fn binding(pod: &Value, node: &str) -> Value {
    let mut metadata = json!({
        "name": pod["metadata"]["name"],
        "namespace": pod["metadata"]["namespace"],
    });
    if let Some(uid) = meta_str(pod, "uid") {
        metadata["uid"] = json!(uid);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    })
}

/// The DeleteOptions of the kubelet's last delete: grace period 0, for this pod only (uid).
pub fn final_delete(pod: &Value) -> Value {
    let mut body = json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0});
    if let Some(uid) = meta_str(pod, "uid") {
        body["preconditions"] = json!({"uid": uid});
    }
    body
}

/// How the pod's containers behave, by image: the pod's annotation (an unknown value counts as
/// Ready), else `images`, else Ready.
pub fn behaviour_of<'a>(
    pod: &Value,
    images: &'a HashMap<String, Behaviour>,
) -> impl Fn(&str) -> Behaviour + 'a {
    let annotated = pod["metadata"]["annotations"][BEHAVIOUR_ANNOTATION]
        .as_str()
        .map(|b| b.parse().unwrap_or_default());
    move |image: &str| {
        annotated
            .or_else(|| images.get(image).copied())
            .unwrap_or_default()
    }
}

/// A claim waiting for a volume of one of `classes`: Pending, not pinned to a volume, not being
/// deleted.
pub fn wants_volume(claim: &Value, classes: &[String]) -> bool {
    let pending = claim["status"]["phase"]
        .as_str()
        .is_none_or(|p| p == "Pending");
    let pinned = claim["spec"]["volumeName"]
        .as_str()
        .is_some_and(|v| !v.is_empty());
    let served = claim["spec"]["storageClassName"]
        .as_str()
        .is_some_and(|c| classes.iter().any(|s| s == c));
    pending && !pinned && served && !claim["metadata"]["deletionTimestamp"].is_string()
}

/// The volume provisioned for `claim`: `pvc-<uid>`, the claim's size, access modes, volume
/// mode and class, reclaim policy Retain, a hostPath, pre-bound to the claim. None when the
/// claim has no uid or no storage request.
pub fn volume_for(claim: &Value) -> Option<Value> {
    let uid = meta_str(claim, "uid").filter(|u| !u.is_empty())?;
    let storage = &claim["spec"]["resources"]["requests"]["storage"];
    if storage.is_null() {
        return None;
    }
    let name = format!("pvc-{uid}");
    let mut pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: "sites-emulator"}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": claim["spec"]["accessModes"],
            "storageClassName": claim["spec"]["storageClassName"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": format!("/tmp/sites-emulator-volumes/{name}"), "type": "DirectoryOrCreate"},
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": claim["metadata"]["namespace"],
                "name": claim["metadata"]["name"],
                "uid": uid,
            },
        },
    });
    if let Some(mode) = claim["spec"]["volumeMode"].as_str() {
        pv["spec"]["volumeMode"] = json!(mode);
    }
    Some(pv)
}

/// Everything `want` says, `have` says too: objects key by key (`have` may hold more, as the
/// fields a server derives; a null in `want` matches a missing key, as servers omit empty
/// fields), anything else equal.
pub fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w.iter().all(|(k, v)| match h.get(k) {
            Some(hv) => contains(hv, v),
            None => v.is_null(),
        }),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(a, b)| contains(a, b))
        }
        _ => have == want,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: Value, uid: Option<&str>) -> Value {
        let mut p = json!({
            "metadata": {"name": "web-0", "namespace": "sites", "annotations": annotations},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        });
        if let Some(u) = uid {
            p["metadata"]["uid"] = json!(u);
        }
        p
    }

    #[test]
    fn bindings_target_the_node() {
        let cases = [
            (
                pod(json!({}), Some("u1")),
                "n1",
                json!({"apiVersion": "v1", "kind": "Binding",
                       "metadata": {"name": "web-0", "namespace": "sites", "uid": "u1"},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}),
            ),
            (
                pod(json!({}), None),
                "emulator-node",
                json!({"apiVersion": "v1", "kind": "Binding",
                       "metadata": {"name": "web-0", "namespace": "sites"},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": "emulator-node"}}),
            ),
        ];
        for (pod, node, want) in cases {
            assert_eq!(binding(&pod, node), want);
        }
        assert_eq!(
            final_delete(&pod(json!({}), Some("u1"))),
            json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": "u1"}})
        );
    }

    #[test]
    fn behaviour_comes_from_the_annotation_then_the_image() {
        let images: HashMap<String, Behaviour> = [
            ("nginx:1.27".to_string(), Behaviour::CrashLoop),
            ("busybox".to_string(), Behaviour::NeverReady),
        ]
        .into();
        // (annotations, image, expected)
        let cases = [
            (json!({}), "nginx:1.27", Behaviour::CrashLoop),
            (json!({}), "busybox", Behaviour::NeverReady),
            (json!({}), "other", Behaviour::Ready),
            (json!(null), "other", Behaviour::Ready),
            (
                json!({BEHAVIOUR_ANNOTATION: "NeverReady"}),
                "nginx:1.27",
                Behaviour::NeverReady,
            ),
            (
                json!({BEHAVIOUR_ANNOTATION: "ImagePullFailure"}),
                "other",
                Behaviour::ImagePullFailure,
            ),
            (
                json!({BEHAVIOUR_ANNOTATION: "CrashLoop"}),
                "other",
                Behaviour::CrashLoop,
            ),
            (
                json!({BEHAVIOUR_ANNOTATION: "Ready"}),
                "busybox",
                Behaviour::Ready,
            ),
            (
                json!({BEHAVIOUR_ANNOTATION: "bogus"}),
                "busybox",
                Behaviour::Ready,
            ),
        ];
        for (annotations, image, want) in cases {
            let p = pod(annotations.clone(), None);
            assert_eq!(
                behaviour_of(&p, &images)(image),
                want,
                "{annotations} {image}"
            );
        }
    }

    fn claim(phase: Option<&str>, class: Option<&str>, volume: Option<&str>) -> Value {
        let mut c = json!({
            "metadata": {"name": "data-web-0", "namespace": "sites", "uid": "1234"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        });
        if let Some(p) = phase {
            c["status"] = json!({"phase": p});
        }
        if let Some(sc) = class {
            c["spec"]["storageClassName"] = json!(sc);
        }
        if let Some(v) = volume {
            c["spec"]["volumeName"] = json!(v);
        }
        c
    }

    #[test]
    fn claims_of_served_classes_want_a_volume() {
        let classes = vec!["local".to_string(), "fast".to_string()];
        let deleting = {
            let mut c = claim(Some("Pending"), Some("local"), None);
            c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            c
        };
        let cases = [
            (claim(Some("Pending"), Some("local"), None), true),
            (claim(Some("Pending"), Some("fast"), None), true),
            (claim(None, Some("local"), None), true),
            (claim(Some("Pending"), Some("local"), Some("")), true),
            (claim(Some("Pending"), Some("other"), None), false),
            (claim(Some("Pending"), None, None), false),
            (claim(Some("Bound"), Some("local"), None), false),
            (claim(Some("Lost"), Some("local"), None), false),
            (claim(Some("Pending"), Some("local"), Some("pv-1")), false),
            (deleting, false),
        ];
        for (c, want) in cases {
            assert_eq!(wants_volume(&c, &classes), want, "{c}");
        }
    }

    #[test]
    fn volumes_are_pre_bound_to_their_claim() {
        let block = {
            let mut c = claim(Some("Pending"), Some("local"), None);
            c["spec"]["volumeMode"] = json!("Block");
            c["spec"]["accessModes"] = json!(["ReadWriteOnce", "ReadOnlyMany"]);
            c["spec"]["resources"]["requests"]["storage"] = json!("10Gi");
            c
        };
        let no_size = {
            let mut c = claim(Some("Pending"), Some("local"), None);
            c["spec"]["resources"] = json!({});
            c
        };
        let no_uid = {
            let mut c = claim(Some("Pending"), Some("local"), None);
            c["metadata"]["uid"] = json!(null);
            c
        };
        let want = |modes: Value, size: &str, extra: Value| {
            let mut pv = json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": "pvc-1234",
                             "annotations": {"pv.kubernetes.io/provisioned-by": "sites-emulator"}},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": modes,
                    "storageClassName": "local",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": "/tmp/sites-emulator-volumes/pvc-1234", "type": "DirectoryOrCreate"},
                    "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                 "namespace": "sites", "name": "data-web-0", "uid": "1234"},
                },
            });
            for (k, v) in extra.as_object().into_iter().flatten() {
                pv["spec"][k] = v.clone();
            }
            pv
        };
        let cases = [
            (
                claim(Some("Pending"), Some("local"), None),
                Some(want(json!(["ReadWriteOnce"]), "1Gi", json!({}))),
            ),
            (
                block,
                Some(want(
                    json!(["ReadWriteOnce", "ReadOnlyMany"]),
                    "10Gi",
                    json!({"volumeMode": "Block"}),
                )),
            ),
            (no_size, None),
            (no_uid, None),
        ];
        for (c, want) in cases {
            assert_eq!(volume_for(&c), want, "{c}");
        }
    }

    #[test]
    fn node_status_keeps_transition_times_of_unchanged_conditions() {
        let desired =
            node_object("n", NODE_IP, "v1.20.2", "2026-01-02T00:00:00Z")["status"].clone();
        // Nothing reported yet: everything from `desired`.
        assert_eq!(node_status(&json!(null), &desired), desired);
        let old = json!({
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "DiskPressure", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
            "images": [{"names": ["nginx"]}],
        });
        let got = node_status(&old, &desired);
        let ltt = |ty: &str| {
            got["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == ty)
                .unwrap()["lastTransitionTime"]
                .clone()
        };
        assert_eq!(ltt("Ready"), "2026-01-01T00:00:00Z");
        assert_eq!(ltt("DiskPressure"), "2026-01-02T00:00:00Z");
        assert_eq!(ltt("MemoryPressure"), "2026-01-02T00:00:00Z");
        assert_eq!(got["images"], old["images"]);
        assert_eq!(got["nodeInfo"]["kubeletVersion"], "v1.20.2");
        assert_eq!(
            got["addresses"][0],
            json!({"type": "InternalIP", "address": "127.0.0.1"})
        );
        assert!(node_ready(&json!({"status": got})));
    }

    #[test]
    fn a_status_the_server_extended_counts_as_written() {
        let cases = [
            (
                json!({"a": 1, "b": [{"x": 1, "y": 2}]}),
                json!({"a": 1, "b": [{"x": 1}]}),
                true,
            ),
            (json!({"a": 1}), json!({"a": 1, "c": null}), true),
            (json!({"a": 1, "c": 2}), json!({"a": 1, "c": null}), false),
            (json!({"a": 1}), json!({"a": 1, "c": {}}), false),
            (json!({"a": 1, "b": [1, 2]}), json!({"b": [1]}), false),
            (json!({"a": 2}), json!({"a": 1}), false),
            (json!(null), json!({}), false),
            (json!("x"), json!("x"), true),
        ];
        for (have, want, expected) in cases {
            assert_eq!(contains(&have, &want), expected, "{have} ⊇ {want}");
        }
    }

    #[test]
    fn pods_wait_for_their_claims() {
        let bound: HashSet<(String, String)> = [("sites".to_string(), "data".to_string())].into();
        let with = |claims: &[&str], ns: &str| {
            let volumes: Vec<Value> = claims
                .iter()
                .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
                .collect();
            json!({"metadata": {"namespace": ns},
                   "spec": {"volumes": volumes.into_iter().chain([json!({"name": "tmp", "emptyDir": {}})]).collect::<Vec<_>>()}})
        };
        let cases = [
            (with(&[], "sites"), true),
            (with(&["data"], "sites"), true),
            (with(&["data"], "other"), false),
            (with(&["data", "logs"], "sites"), false),
        ];
        for (pod, want) in cases {
            assert_eq!(volumes_ready(&pod, &bound), want, "{pod}");
        }
    }

    #[test]
    fn only_default_scheduler_pods_are_scheduled() {
        let cases = [
            (json!({}), true),
            (json!({"schedulerName": "default-scheduler"}), true),
            (json!({"schedulerName": ""}), true),
            (json!({"schedulerName": "volcano"}), false),
        ];
        for (spec, want) in cases {
            assert_eq!(schedules(&json!({"spec": spec})), want, "{spec}");
        }
    }
}
