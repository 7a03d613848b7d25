//! What the caches keep of each kind: only the fields the reconciler reads. Whether an owned
//! object is up to date is decided from its metadata (the desired-hash annotation, labels and
//! owner references, see [`super::apply`]) and from a fingerprint of the content the operator
//! manages ([`Managed`]), taken here before that content is dropped, so specs the operator only
//! writes are not kept; at 10,000 Sites the StatefulSet pod templates alone would hold most of
//! the operator's memory.

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerStatus, PersistentVolumeClaim, PodCondition, PodStatus, PodTemplateSpec,
    Secret, Service,
};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Resource;

use crate::crd::{ID_LABEL, Site};
use crate::watched::{Pod, Volume};

/// The annotation `kubectl apply` keeps a copy of the whole object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Prefix of the annotations the operator reads back from objects it owns.
const OWN_ANNOTATIONS: &str = "sites.ecmwf.int/";

/// Annotation that cached objects (never the cluster's) carry: the [`fingerprint`] of the
/// content the operator manages, as this watch event showed it (drift detection, SPEC 4.6).
pub const OBSERVED_FINGERPRINT: &str = "sites.ecmwf.int/observed-fingerprint";

/// The content of an owned kind that the operator manages and an edit by anyone else would
/// change: data, or the spec (status is never part of it; neither are fields other controllers
/// own, such as a claim's bound volume).
pub trait Managed {
    fn managed_content(&self) -> serde_json::Value;
}

impl Managed for Secret {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::json!({"type": self.type_, "data": self.data})
    }
}

impl Managed for ConfigMap {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::json!({"data": self.data, "binaryData": self.binary_data})
    }
}

impl Managed for PersistentVolumeClaim {
    fn managed_content(&self) -> serde_json::Value {
        let spec = self.spec.as_ref();
        serde_json::json!({
            "accessModes": spec.and_then(|s| s.access_modes.as_ref()),
            "requests": spec.and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref()),
            "storageClassName": spec.and_then(|s| s.storage_class_name.as_ref()),
        })
    }
}

impl Managed for StatefulSet {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
}

impl Managed for Service {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
}

impl Managed for Ingress {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
}

impl Managed for HttpRoute {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
}

/// A short hash of the managed content (16 hex digits).
pub fn fingerprint<K: Managed>(obj: &K) -> String {
    short_hash(&obj.managed_content())
}

/// Annotation on cached StatefulSets: [`template_fingerprint`] of the pod template the cache
/// no longer keeps.
pub const OBSERVED_TEMPLATE: &str = "sites.ecmwf.int/observed-template";

/// A short hash of a StatefulSet's pod template: whether a write changed the pods' template
/// (and rolls them), not only the replicas.
pub fn template_fingerprint(sts: &StatefulSet) -> String {
    short_hash(&serde_json::to_value(sts.spec.as_ref().map(|s| &s.template)).unwrap_or_default())
}

fn short_hash(content: &serde_json::Value) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, content.to_string().as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Records the fingerprint of the managed content on the cached copy, before it is slimmed.
fn observe<K: Managed + Resource>(obj: &mut K) {
    let fp = fingerprint(obj);
    obj.meta_mut()
        .annotations
        .get_or_insert_default()
        .insert(OBSERVED_FINGERPRINT.into(), fp);
}

/// Metadata of objects the operator owns or watches for a site: name, namespace, labels, owner
/// references, deletion timestamp and this operator's annotations. Identity and bookkeeping
/// fields (uid, resourceVersion, timestamps, finalizers, managed fields) and other components'
/// annotations are never read.
fn metadata<K: Resource>(obj: &mut K) {
    let m = obj.meta_mut();
    m.managed_fields = None;
    m.uid = None;
    m.resource_version = None;
    m.creation_timestamp = None;
    m.generation = None;
    m.generate_name = None;
    m.finalizers = None;
    if let Some(a) = m.annotations.as_mut() {
        a.retain(|k, _| k.starts_with(OWN_ANNOTATIONS));
        if a.is_empty() {
            m.annotations = None;
        }
    }
}

/// Sites: everything but managed fields and the `kubectl apply` copy of the object (the uid
/// goes into owner references, the generation into the status).
pub fn site(s: &mut Site) {
    s.metadata.managed_fields = None;
    if let Some(a) = s.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// Secrets the operator manages keep their data (the site tokens are read back from the site
/// Secret); any other Secret of the namespace keeps only what the ownership check reads.
pub fn secret(s: &mut Secret) {
    observe(s);
    metadata(s);
    if !managed(s) {
        s.data = None;
        s.string_data = None;
    }
}

/// Whether the object carries the operator's `app.kubernetes.io/managed-by` label.
pub fn managed<K: Resource>(obj: &K) -> bool {
    obj.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|v| v == crate::labels::MANAGED_BY)
}

pub fn configmap(c: &mut ConfigMap) {
    observe(c);
    metadata(c);
    c.data = None;
    c.binary_data = None;
}

/// Claims keep their spec (class, size and bound volume are read back) and status.
pub fn claim(c: &mut PersistentVolumeClaim) {
    observe(c);
    metadata(c);
}

/// StatefulSets keep the pod-template metadata: the qualifying-change state and `restartedAt`
/// are read back from its annotations.
pub fn statefulset(s: &mut StatefulSet) {
    observe(s);
    let template = template_fingerprint(s);
    s.metadata
        .annotations
        .get_or_insert_default()
        .insert(OBSERVED_TEMPLATE.into(), template);
    metadata(s);
    s.status = None;
    s.spec = s.spec.take().map(|spec| StatefulSetSpec {
        template: PodTemplateSpec {
            metadata: spec.template.metadata,
            spec: None,
        },
        ..StatefulSetSpec::default()
    });
}

pub fn service(s: &mut Service) {
    observe(s);
    metadata(s);
    s.spec = None;
    s.status = None;
}

pub fn ingress(i: &mut Ingress) {
    observe(i);
    metadata(i);
    i.spec = None;
    i.status = None;
}

pub fn httproute(r: &mut HttpRoute) {
    observe(r);
    metadata(r);
    r.spec = Default::default();
    r.status = None;
}

/// Pods (decoded without their spec, [`crate::watched`]) keep the site id label and what the
/// status mapping reads: phase, conditions, and each container's name, readiness and state.
pub fn pod(p: &mut Pod) {
    metadata(p);
    if let Some(labels) = p.metadata.labels.as_mut() {
        labels.retain(|k, _| k == ID_LABEL);
    }
    p.status = p.status.take().map(|s| PodStatus {
        phase: s.phase,
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .map(|c| PodCondition {
                    type_: c.type_,
                    status: c.status,
                    last_transition_time: c.last_transition_time,
                    ..PodCondition::default()
                })
                .collect()
        }),
        container_statuses: s.container_statuses.map(|cs| {
            cs.into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    ready: c.ready,
                    state: c.state,
                    ..ContainerStatus::default()
                })
                .collect()
        }),
        ..PodStatus::default()
    });
}

/// Volumes (decoded with only their claim reference and status, [`crate::watched`]) keep the
/// metadata the retained-volume lookup reads.
pub fn volume(v: &mut Volume) {
    metadata(v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::apply;
    use crate::fixtures;
    use crate::render::{self, Inputs, SiteTokens};
    use kube::ResourceExt;
    use serde_json::json;

    fn rendered() -> (Site, render::Rendered) {
        let cfg = fixtures::config();
        let site: Site =
            serde_yaml_ng::from_str(include_str!("../../manifests/examples/site.yaml")).unwrap();
        let mut site = site;
        site.metadata.namespace = Some("sites".into());
        site.metadata.uid = Some("uid-1".into());
        let state = crate::restart::decide(None, &site, &crate::fixtures::config()).state;
        let tokens = SiteTokens {
            api_token: "a".into(),
            secret_key: "b".into(),
        };
        let inputs = Inputs::new("sites", Some("example.org"), b"key", &tokens, &state);
        let valid = crate::validation::site::validate(&site, &cfg).unwrap();
        let rendered = render::render(valid, &cfg, &inputs).unwrap();
        (site, rendered)
    }

    /// Stamps `desired`, adds what the API server adds, slims a copy and checks that the
    /// reconciler's decision from the slim copy is the decision from the full one.
    fn same_decision<K>(desired: K, slim: fn(&mut K)) -> (usize, usize)
    where
        K: Resource + serde::Serialize + Clone,
    {
        let mut desired = desired;
        apply::stamp(&mut desired);
        let mut stored = desired.clone();
        let m = stored.meta_mut();
        m.managed_fields = Some(vec![Default::default()]);
        m.uid = Some("0b4d6f2e-1c1a-4f55-9a52-7d4c2a8e9f10".into());
        m.resource_version = Some("12345".into());
        m.annotations
            .get_or_insert_default()
            .insert("pv.kubernetes.io/bind-completed".into(), "yes".into());
        let full = serde_json::to_vec(&stored).unwrap().len();
        let mut slimmed = stored.clone();
        slim(&mut slimmed);
        assert!(apply::up_to_date(&stored, &desired));
        assert!(apply::up_to_date(&slimmed, &desired));
        let m = slimmed.meta();
        assert!(m.uid.is_none() && m.resource_version.is_none() && m.managed_fields.is_none());
        assert!(
            m.annotations
                .as_ref()
                .is_some_and(|a| a.keys().all(|k| k.starts_with(OWN_ANNOTATIONS)))
        );
        // A different rendering is still seen as different.
        let mut other = desired.clone();
        other
            .meta_mut()
            .annotations
            .get_or_insert_default()
            .insert(apply::DESIRED_HASH_ANNOTATION.into(), "other".into());
        assert!(!apply::up_to_date(&slimmed, &other));
        (full, serde_json::to_vec(&slimmed).unwrap().len())
    }

    #[test]
    fn slim_objects_give_the_reconciler_the_same_answers() {
        let (_, r) = rendered();
        let (full, slim) = same_decision(r.statefulset.clone(), statefulset);
        assert!(slim * 2 < full, "statefulset {full} -> {slim} bytes");
        let mut stored = r.statefulset.clone();
        statefulset(&mut stored);
        assert_eq!(
            render::recorded_state(Some(&stored)),
            render::recorded_state(Some(&r.statefulset))
        );
        assert!(render::recorded_state(Some(&stored)).is_some());

        same_decision(r.secret.clone(), secret);
        let mut s = r.secret.clone();
        secret(&mut s);
        assert_eq!(
            s.data, r.secret.data,
            "tokens are read back from the Secret"
        );
        same_decision(r.env_configmap.clone(), configmap);
        same_decision(r.pvc.clone(), claim);
        same_decision(r.service.clone(), service);
        match r.route.clone() {
            Some(render::Route::Ingress(i)) => {
                same_decision(i, ingress);
            }
            Some(render::Route::HttpRoute(h)) => {
                same_decision(h, httproute);
            }
            None => panic!("the example site has a route"),
        }
    }

    #[test]
    fn sites_drop_only_managed_fields_and_the_kubectl_copy() {
        let (site, _) = rendered();
        let mut full = site.clone();
        full.metadata.annotations.get_or_insert_default().extend([
            (LAST_APPLIED.to_string(), "{\"big\": true}".to_string()),
            (
                "sites.ecmwf.int/upgrade-request".to_string(),
                "x".to_string(),
            ),
        ]);
        let mut slimmed = full.clone();
        super::site(&mut slimmed);
        let mut expected = full.clone();
        expected
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(LAST_APPLIED);
        assert_eq!(slimmed, expected);
    }

    #[test]
    fn pods_and_volumes_keep_what_status_and_volume_lookups_read() {
        // Every pod state the status mapping tells apart resolves the same from the slim pod.
        let container = |state: serde_json::Value, ready: bool| {
            json!({"name": "nginx", "ready": ready, "state": state, "image": "nginx:1",
                   "imageID": "sha256:x", "containerID": "containerd://y", "restartCount": 3,
                   "volumeMounts": [{"name": "data", "mountPath": "/data"}]})
        };
        let statuses = [
            json!({"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T10:00:00Z", "lastProbeTime": null},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T09:00:00Z"}],
                "containerStatuses": [container(json!({"running": {"startedAt": "2026-11-29T10:00:00Z"}}), true)]}),
            json!({"phase": "Running", "conditions": [
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "not ready"}],
                "containerStatuses": [container(json!({"running": {}}), false)]}),
            json!({"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [container(json!({"waiting": {"reason": "ImagePullBackOff", "message": "pull failed"}}), false)]}),
            json!({"phase": "Running", "conditions": [{"type": "ContainersReady", "status": "False"}],
                "containerStatuses": [container(json!({"terminated": {"reason": "Error", "exitCode": 1, "message": "boom"}}), false)]}),
            json!({"phase": "Failed"}),
        ];
        for status in statuses {
            let mut p: Pod = serde_json::from_value(json!({
                "metadata": {"name": "s-0", "namespace": "sites", "uid": "u",
                             "labels": {ID_LABEL: "s", "controller-revision-hash": "s-1"},
                             "annotations": {"sites.ecmwf.int/operator_bound": "true", "other": "x"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]},
                "status": status,
            }))
            .unwrap();
            let full = p.clone();
            pod(&mut p);
            assert_eq!(
                crate::controller::status::resolve_pod(&p),
                crate::controller::status::resolve_pod(&full)
            );
            assert_eq!(
                crate::controller::status::pod_ready(&p),
                crate::controller::status::pod_ready(&full)
            );
            assert_eq!(crate::controller::index::pod_keys(&p), ["s"]);
            let (slim, full) = (
                serde_json::to_vec(&p).unwrap(),
                serde_json::to_vec(&full).unwrap(),
            );
            assert!(slim.len() < full.len(), "{} -> {}", full.len(), slim.len());
        }

        let mut v: Volume = serde_json::from_value(json!({
            "metadata": {"name": "pv", "labels": {"a": "b"}, "uid": "u",
                         "annotations": {"pv.kubernetes.io/provisioned-by": "x"}},
            "spec": {"capacity": {"storage": "1Gi"}, "hostPath": {"path": "/x"},
                     "claimRef": {"namespace": "sites", "name": "s"}},
            "status": {"phase": "Released"}
        }))
        .unwrap();
        let before = v.clone();
        volume(&mut v);
        assert_eq!(v.metadata.labels, before.metadata.labels);
        assert_eq!(v.status, before.status);
        assert_eq!(
            v.spec.as_ref().unwrap().claim_ref,
            before.spec.as_ref().unwrap().claim_ref
        );
        assert_eq!(v.metadata.uid, None);
        assert_eq!(v.metadata.annotations, None);
    }

    #[test]
    fn fingerprints_cover_the_managed_content_only() {
        let (_, r) = rendered();
        let print = |s: &StatefulSet| {
            let mut s = s.clone();
            statefulset(&mut s);
            s.annotations()[OBSERVED_FINGERPRINT].clone()
        };
        let base = print(&r.statefulset);
        assert_eq!(base, fingerprint(&r.statefulset));
        // Status, resourceVersion and other components' annotations: the same fingerprint.
        let mut status_only = r.statefulset.clone();
        status_only.status = Some(Default::default());
        status_only.metadata.resource_version = Some("99".into());
        status_only
            .annotations_mut()
            .insert("example.org/x".into(), "y".into());
        assert_eq!(print(&status_only), base);
        // Replicas scaled by hand: another one.
        let mut scaled = r.statefulset.clone();
        scaled.spec.as_mut().unwrap().replicas = Some(4);
        assert_ne!(print(&scaled), base);
        // A claim's bound volume (the binder's) is not the operator's content; its size is.
        let mut bound = r.pvc.clone();
        bound.spec.as_mut().unwrap().volume_name = Some("pv-1".into());
        assert_eq!(fingerprint(&bound), fingerprint(&r.pvc));
        let mut resized = r.pvc.clone();
        resized
            .spec
            .as_mut()
            .unwrap()
            .resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()
            .insert(
                "storage".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("9Gi".into()),
            );
        assert_ne!(fingerprint(&resized), fingerprint(&r.pvc));
        // Data of another component's Secret is dropped from the cache, its fingerprint kept.
        let mut foreign = r.secret.clone();
        foreign.labels_mut().clear();
        secret(&mut foreign);
        assert!(foreign.data.is_none());
        assert_eq!(
            foreign.annotations()[OBSERVED_FINGERPRINT],
            fingerprint(&r.secret)
        );
    }
}
