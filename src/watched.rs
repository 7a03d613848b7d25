//! Pods and PersistentVolumes as the operator's watches decode them: the API's JSON decoded
//! straight into the few fields the operator reads (metadata, the pod status, the volume's claim
//! reference and status), not into the full Kubernetes types.
//!
//! The operator only reads these kinds. Decoded whole, a pod spec or a volume spec is most of
//! the work of every watch event and, even when emptied afterwards, the largest part of each
//! cached object: `Option<PodSpec>` and `Option<PersistentVolumeSpec>` keep their full size
//! inline (1.4 KB and 3 KB) when `None`. Fields not declared here are skipped by the decoder.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeStatus, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ClusterResourceScope, NamespaceResourceScope};
use serde::{Deserialize, Serialize};

/// A pod: metadata and status.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Pod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// A PersistentVolume: metadata, the claim reference and status.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Volume {
    #[serde(default)]
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
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.conditions.as_ref().unwrap()[0].type_, "Ready");
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
