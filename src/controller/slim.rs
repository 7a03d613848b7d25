//! What the caches keep of each kind: only the fields the reconciler reads. Whether an owned
//! object is up to date is decided from its metadata (the desired-hash annotation, labels and
//! owner references, see [`super::ensure`]), so specs the operator only writes are dropped; at
//! 10,000 Sites the StatefulSet pod templates alone would hold most of the operator's memory.

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, Pod, PodTemplateSpec,
    Secret, Service,
};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Resource;

use crate::crd::Site;

/// The annotation `kubectl apply` keeps a copy of the whole object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn metadata<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Sites: everything but managed fields and the `kubectl apply` copy of the object.
pub fn site(s: &mut Site) {
    metadata(s);
    if let Some(a) = s.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// Secrets keep their data: the site tokens are read back from the site Secret.
pub fn secret(s: &mut Secret) {
    metadata(s);
}

pub fn configmap(c: &mut ConfigMap) {
    metadata(c);
    c.data = None;
    c.binary_data = None;
}

/// Claims keep their spec (class, size and bound volume are read back) and status.
pub fn claim(c: &mut PersistentVolumeClaim) {
    metadata(c);
}

/// StatefulSets keep the pod-template metadata: the qualifying-change state and `restartedAt`
/// are read back from its annotations.
pub fn statefulset(s: &mut StatefulSet) {
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
    metadata(s);
    s.spec = None;
    s.status = None;
}

pub fn ingress(i: &mut Ingress) {
    metadata(i);
    i.spec = None;
    i.status = None;
}

pub fn httproute(r: &mut HttpRoute) {
    metadata(r);
    r.spec = Default::default();
    r.status = None;
}

/// Pods keep their status (mapped into the Site status), not their spec.
pub fn pod(p: &mut Pod) {
    metadata(p);
    p.spec = None;
}

/// Volumes keep their claim reference (retained-volume lookup) and status.
pub fn volume(v: &mut PersistentVolume) {
    metadata(v);
    v.spec = v.spec.take().map(|spec| PersistentVolumeSpec {
        claim_ref: spec.claim_ref,
        ..PersistentVolumeSpec::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Context, PlatformConfig};
    use crate::controller::ensure;
    use crate::render::{self, Inputs, SiteTokens};
    use serde_json::json;

    fn rendered() -> (Site, render::Rendered) {
        let cfg = PlatformConfig::from_yaml(
            include_str!("../../manifests/base/config.yaml"),
            "config.yaml",
            &Context::default(),
        )
        .unwrap();
        let site: Site =
            serde_yaml_ng::from_str(include_str!("../../manifests/examples/site.yaml")).unwrap();
        let mut site = site;
        site.metadata.namespace = Some("sites".into());
        site.metadata.uid = Some("uid-1".into());
        let state = crate::diff::decide(None, &site).state;
        let tokens = SiteTokens {
            api_token: "a".into(),
            secret_key: "b".into(),
        };
        let inputs = Inputs::new("sites", Some("example.org"), b"key", &tokens, &state);
        let rendered = render::render(&site, &cfg, &inputs).unwrap();
        (site, rendered)
    }

    /// Stamps `desired`, adds what the API server adds, slims a copy and checks that the
    /// reconciler's decision from the slim copy is the decision from the full one.
    fn same_decision<K>(desired: K, slim: fn(&mut K)) -> (usize, usize)
    where
        K: Resource + serde::Serialize + Clone,
    {
        let mut desired = desired;
        ensure::stamp(&mut desired);
        let mut stored = desired.clone();
        stored.meta_mut().managed_fields = Some(vec![Default::default()]);
        let full = serde_json::to_vec(&stored).unwrap().len();
        let mut slimmed = stored.clone();
        slim(&mut slimmed);
        assert!(ensure::up_to_date(&stored, &desired));
        assert!(ensure::up_to_date(&slimmed, &desired));
        // A different rendering is still seen as different.
        let mut other = desired.clone();
        other
            .meta_mut()
            .annotations
            .get_or_insert_default()
            .insert(ensure::DESIRED_HASH_ANNOTATION.into(), "other".into());
        assert!(!ensure::up_to_date(&slimmed, &other));
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
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "s-0", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let status = p.status.clone();
        pod(&mut p);
        assert_eq!(p.status, status);
        assert!(p.spec.is_none());

        let mut v: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv", "labels": {"a": "b"}},
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
        assert!(v.spec.as_ref().unwrap().capacity.is_none());
    }
}
