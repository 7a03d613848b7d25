//! Pods and PersistentVolumes as the operator's watches decode them: the API's JSON decoded
//! straight into the few fields the operator reads (metadata; of a pod's status its phase, its
//! conditions' type, status and time, and each container's name, readiness and state; the
//! volume's claim reference and status), not into the full Kubernetes types.
//!
//! The operator only reads these kinds. Decoded whole, a pod spec or a volume spec is most of
//! the work of every watch event and, even when emptied afterwards, the largest part of each
//! cached object: `Option<PodSpec>` and `Option<PersistentVolumeSpec>` keep their full size
//! inline (1.4 KB and 3 KB) when `None`. Fields not declared here are skipped by the decoder,
//! and so are the metadata's `managedFields` ([`metadata`]): on a real API server they are the
//! largest part of a pod's metadata (every status write of the kubelet, the scheduler's binding,
//! each with a tree of field names), which the operator never reads of these kinds.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::core::{ClusterResourceScope, NamespaceResourceScope};
use serde::{Deserialize, Serialize};

/// A pod: metadata and status.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Pod {
    #[serde(default, deserialize_with = "metadata")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// What the status mapping reads of a pod's status ([`crate::controller::status`]).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
}

/// A pod condition: type, status and when it last changed.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// A container's name, readiness and state.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
}

/// Which state a container is in, with the reason and message of a waiting or terminated one.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ContainerState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<StateReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<Running>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<StateReason>,
}

/// The reason and message of a waiting or terminated container.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct StateReason {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A running container (its start time is not read).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Running {}

/// A PersistentVolume: metadata, the claim reference and status.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Volume {
    #[serde(default, deserialize_with = "metadata")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<VolumeSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PersistentVolumeStatus>,
}

/// What the operator reads of a volume's spec.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_ref: Option<ObjectReference>,
}

/// Object metadata as [`ObjectMeta`] decodes it, but for `managedFields`, which the decoder
/// skips without building them (each entry's `fieldsV1` is a JSON tree).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    self_link: Option<String>,
    #[serde(default)]
    uid: Option<String>,
}

fn metadata<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Metadata::deserialize(d)?;
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

/// `kube::Resource` for a core/v1 kind decoded into one of the types above.
macro_rules! core_v1 {
    ($ty:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }

            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("")
            }

            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("v1")
            }

            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("v1")
            }

            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

core_v1!(Pod, "Pod", "pods", NamespaceResourceScope);
core_v1!(
    Volume,
    "PersistentVolume",
    "persistentvolumes",
    ClusterResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    /// Every field of the metadata but `managedFields`, as the full type decodes it.
    #[test]
    fn metadata_is_decoded_whole_but_for_the_managed_fields() {
        let meta = json!({
            "name": "docs-0", "generateName": "docs-", "namespace": "sites",
            "uid": "5a1b", "resourceVersion": "42", "generation": 3, "selfLink": "/x",
            "creationTimestamp": "2026-12-07T10:00:00Z",
            "deletionTimestamp": "2026-12-07T11:00:00Z", "deletionGracePeriodSeconds": 30,
            "labels": {"sites.ecmwf.int/id": "docs"}, "annotations": {"a": "b"},
            "finalizers": ["f"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "docs",
                                 "uid": "9c", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-12-07T10:00:01Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:status": {"f:phase": {}}}, "subresource": "status"}]
        });
        let mut full: ObjectMeta = serde_json::from_value(meta.clone()).unwrap();
        assert!(full.managed_fields.take().is_some());
        let object = json!({"metadata": meta});
        let pod: Pod = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(pod.metadata, full);
        let volume: Volume = serde_json::from_value(object).unwrap();
        assert_eq!(volume.metadata, full);
        let bare: Pod = serde_json::from_value(json!({})).unwrap();
        assert_eq!(bare.metadata, ObjectMeta::default());
    }

    #[test]
    fn decoding_keeps_what_the_operator_reads_and_skips_the_specs() {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "docs-0", "namespace": "sites", "labels": {"sites.ecmwf.int/id": "docs"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}], "nodeName": "n1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("docs-0"));
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()["sites.ecmwf.int/id"],
            "docs"
        );
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.conditions.as_ref().unwrap()[0].type_, "Ready");

        // Container states as the kubelet reports them (fields not read are skipped).
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "docs-0"},
            "status": {"phase": "Pending", "hostIP": "10.0.0.1", "qosClass": "Burstable",
                "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                                "lastProbeTime": null, "lastTransitionTime": "2026-11-29T10:00:00Z"}],
                "containerStatuses": [
                    {"name": "web", "ready": true, "restartCount": 0, "image": "nginx", "imageID": "x",
                     "state": {"running": {"startedAt": "2026-11-29T10:00:00Z"}},
                     "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}},
                    {"name": "app", "ready": false, "restartCount": 3, "image": "app", "imageID": "y",
                     "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m"}}},
                    {"name": "init", "ready": false, "restartCount": 0, "image": "i", "imageID": "z",
                     "state": {"terminated": {"exitCode": 2, "reason": "Error", "message": "boom",
                                              "startedAt": null, "finishedAt": null}}}]}
        }))
        .unwrap();
        let status = pod.status.unwrap();
        let condition = &status.conditions.unwrap()[0];
        assert_eq!(
            (condition.type_.as_str(), condition.status.as_str()),
            ("Ready", "False")
        );
        assert!(condition.last_transition_time.is_some());
        let containers = status.container_statuses.unwrap();
        let state = |i: usize| containers[i].state.clone().unwrap();
        assert!(containers[0].ready && state(0).running.is_some());
        assert_eq!(
            state(1).waiting.unwrap().reason.as_deref(),
            Some("CrashLoopBackOff")
        );
        let terminated = state(2).terminated.unwrap();
        assert_eq!(terminated.message.as_deref(), Some("boom"));
        assert!(!containers[2].ready);
        assert_eq!(
            Pod::url_path(&(), Some("sites")),
            "/api/v1/namespaces/sites/pods"
        );

        let pv: Volume = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv-1"},
            "spec": {"capacity": {"storage": "1Gi"}, "hostPath": {"path": "/x"},
                     "claimRef": {"namespace": "sites", "name": "docs"}},
            "status": {"phase": "Bound"}
        }))
        .unwrap();
        let claim = pv.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
        assert_eq!(claim.name.as_deref(), Some("docs"));
        assert_eq!(pv.status.unwrap().phase.as_deref(), Some("Bound"));
        assert_eq!(Volume::url_path(&(), None), "/api/v1/persistentvolumes");
        // The smaller footprint is the point.
        assert!(
            std::mem::size_of::<Pod>() < std::mem::size_of::<k8s_openapi::api::core::v1::Pod>() / 2
        );
        assert!(
            std::mem::size_of::<Volume>()
                < std::mem::size_of::<k8s_openapi::api::core::v1::PersistentVolume>() / 4
        );
    }
}
