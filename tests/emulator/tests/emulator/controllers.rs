//! Simulated controllers and built-in validation: checklist B of docs/emulator.md (StatefulSet,
//! kubelet, volumes, immutable fields).

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sites_emulator::controllers::Behaviour;

use crate::support::{Cluster, api_error, eventually};

const WAIT: Duration = Duration::from_secs(15);

fn statefulset(name: &str, replicas: i32, image: &str) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": image}]}
            }
        }
    }))
    .unwrap()
}

fn status_code(e: kube::Error) -> (u16, String) {
    let s = api_error(e);
    (s.code, s.message)
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn pods_of(api: &Api<Pod>, app: &str) -> Vec<Pod> {
    let mut pods = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items;
    pods.sort_by_key(|p| p.metadata.name.clone());
    pods
}

#[tokio::test]
async fn statefulset_creates_ordered_ready_pods_and_reports_status() {
    let c = Cluster::start(false).await;
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    sts.create(&PostParams::default(), &statefulset("web", 3, "nginx:1.27"))
        .await
        .unwrap();
    let all = eventually("3 ready pods", WAIT, || async {
        let p = pods_of(&pods, "web").await;
        (p.len() == 3 && p.iter().all(ready)).then_some(p)
    })
    .await;
    let names: Vec<_> = all
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    let p0 = &all[0];
    let labels = p0.metadata.labels.clone().unwrap();
    assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "web-0");
    assert_eq!(labels["apps.kubernetes.io/pod-index"], "0");
    assert!(labels["controller-revision-hash"].starts_with("web-"));
    let owner = &p0.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("StatefulSet", Some(true), Some(true))
    );
    assert_eq!(p0.spec.as_ref().unwrap().hostname.as_deref(), Some("web-0"));
    // Ordered creation: each pod was created after its predecessor became ready.
    let created = |p: &Pod| p.metadata.resource_version.clone();
    assert!(all.iter().all(|p| created(p).is_some()));
    let status = eventually("status", WAIT, || async {
        let s = sts.get("web").await.unwrap().status.unwrap();
        (s.ready_replicas == Some(3)).then_some(s)
    })
    .await;
    assert_eq!(status.replicas, 3);
    assert_eq!(status.current_revision, status.update_revision);
    assert_eq!(status.observed_generation, Some(1));

    // Scale down removes the highest ordinal.
    let patch = json!({"spec": {"replicas": 1}});
    sts.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("scaled to 1", WAIT, || async {
        let p = pods_of(&pods, "web").await;
        (p.len() == 1 && p[0].metadata.name.as_deref() == Some("web-0")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn restarted_at_rolls_pods_and_a_never_ready_update_stalls_until_the_pod_is_deleted() {
    let c = Cluster::start(false).await;
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    sts.create(&PostParams::default(), &statefulset("site", 2, "good:1"))
        .await
        .unwrap();
    eventually("2 ready", WAIT, || async {
        let p = pods_of(&pods, "site").await;
        (p.len() == 2 && p.iter().all(ready)).then_some(())
    })
    .await;
    let rev_before = sts
        .get("site")
        .await
        .unwrap()
        .status
        .unwrap()
        .update_revision
        .unwrap();

    // kubectl.kubernetes.io/restartedAt on the template: a new revision, pods replaced.
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}}}}});
    sts.patch("site", &PatchParams::default(), &Patch::Merge(&restart))
        .await
        .unwrap();
    let rev_after = eventually("rolled", WAIT, || async {
        let rev_before = rev_before.clone();
        let s = sts.get("site").await.unwrap().status.unwrap();
        let p = pods_of(&pods, "site").await;
        let rev = s.update_revision.clone().unwrap();
        (p.len() == 2
            && rev != rev_before
            && p.iter().all(ready)
            && p.iter()
                .all(|p| p.metadata.labels.as_ref().unwrap()["controller-revision-hash"] == rev)
            && s.current_revision == s.update_revision)
            .then_some(rev)
    })
    .await;
    assert_ne!(rev_before, rev_after);

    // An update to an image that never becomes ready: the highest ordinal is replaced and stalls.
    c.emulator()
        .kubelet()
        .set_image("bad:1", Behaviour::NeverReady);
    let bad = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "bad:1"}]}}}});
    sts.patch("site", &PatchParams::default(), &Patch::Strategic(&bad))
        .await
        .unwrap();
    eventually("site-1 on the bad revision, not ready", WAIT, || async {
        let p = pods.get("site-1").await.ok()?;
        let image = p.spec.as_ref()?.containers[0].image.clone()?;
        (image == "bad:1" && p.status.as_ref()?.phase.as_deref() == Some("Running") && !ready(&p))
            .then_some(())
    })
    .await;
    // Reverting the template does not help: the controller waits for the unready pod. The
    // stall is checked once the controller has handled the reverted template: it writes the
    // status (observedGeneration, updateRevision) at the end of the pass that decides whether
    // to replace a pod, so a replacement would have happened by then.
    let stuck_uid = pods.get("site-1").await.unwrap().metadata.uid;
    let good = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "good:1"}]}}}});
    let reverted = sts
        .patch("site", &PatchParams::default(), &Patch::Strategic(&good))
        .await
        .unwrap();
    let generation = reverted.metadata.generation;
    let status = eventually("the reverted template observed", WAIT, || async {
        let s = sts.get("site").await.ok()?.status?;
        (s.observed_generation == generation).then_some(s)
    })
    .await;
    assert_eq!(
        status.update_revision.as_deref(),
        Some(rev_after.as_str()),
        "the reverted template is the restart's revision again"
    );
    let stuck = pods
        .get_opt("site-1")
        .await
        .unwrap()
        .expect("rollout stalls: site-1 not removed");
    assert_eq!(
        stuck.metadata.uid, stuck_uid,
        "rollout stalls: site-1 not replaced"
    );
    assert!(
        stuck.metadata.deletion_timestamp.is_none(),
        "rollout stalls: site-1 not deleted"
    );
    assert_eq!(
        stuck.spec.unwrap().containers[0].image.as_deref(),
        Some("bad:1"),
        "rollout stalls"
    );
    assert_eq!(status.ready_replicas, Some(1), "site-1 is still not ready");
    assert_eq!(
        pods.get("site-0").await.unwrap().spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("good:1")
    );
    // Deleting the stuck pod lets the controller recreate it from the current revision.
    pods.delete("site-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("recovered", WAIT, || async {
        let p = pods.get("site-1").await.ok()?;
        (p.spec.as_ref()?.containers[0].image.as_deref() == Some("good:1") && ready(&p))
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn kubelet_behaviours_show_in_pod_status() {
    let c = Cluster::start(false).await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    c.emulator()
        .kubelet()
        .set_image("crash:1", Behaviour::CrashLoop);
    c.emulator()
        .kubelet()
        .set_image("missing:1", Behaviour::ImagePullFailure);
    for (name, image) in [
        ("crasher", "crash:1"),
        ("puller", "missing:1"),
        ("fine", "ok:1"),
    ] {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": image}]}})).unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    eventually("crash loop", WAIT, || async {
        let s = pods.get("crasher").await.ok()?.status?;
        let cs = &s.container_statuses?[0];
        let waiting = cs.state.as_ref()?.waiting.as_ref()?.reason.clone()?;
        let last = cs.last_state.as_ref()?.terminated.as_ref()?;
        (waiting == "CrashLoopBackOff"
            && last.exit_code == 1
            && cs.restart_count >= 1
            && s.phase.as_deref() == Some("Running"))
        .then_some(())
    })
    .await;
    eventually("image pull back-off", WAIT, || async {
        let s = pods.get("puller").await.ok()?.status?;
        let reason = s.container_statuses?[0]
            .state
            .as_ref()?
            .waiting
            .as_ref()?
            .reason
            .clone()?;
        (reason == "ImagePullBackOff" && s.phase.as_deref() == Some("Pending")).then_some(())
    })
    .await;
    let fine = eventually("ready", WAIT, || async {
        pods.get("fine").await.ok().filter(ready)
    })
    .await;
    let ready_cond = fine
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    // A test flips readiness; the condition flips with a new transition time.
    c.emulator()
        .kubelet()
        .set_pod("default", "fine", Behaviour::NeverReady);
    let flipped = eventually("not ready", WAIT, || async {
        pods.get("fine").await.ok().filter(|p| !ready(p))
    })
    .await;
    let status = flipped.status.unwrap();
    let cond = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(cond.reason.as_deref(), Some("ContainersNotReady"));
    assert!(cond.last_transition_time.is_some());
    let _ = ready_cond;
    let cs = &status.container_statuses.unwrap()[0];
    assert!(cs.state.as_ref().unwrap().running.is_some());
    assert!(!cs.ready);
    // Graceful deletion: a terminating pod keeps its deletionTimestamp until the kubelet removes it.
    let deleted = pods.delete("fine", &DeleteParams::default()).await.unwrap();
    let terminating = deleted.left().expect("pods terminate gracefully");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    eventually("pod removed", WAIT, || async {
        pods.get_opt("fine").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn statefulset_spec_fields_other_than_the_template_are_immutable() {
    let c = Cluster::start(false).await;
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "default");
    sts.create(&PostParams::default(), &statefulset("web", 0, "nginx:1"))
        .await
        .unwrap();
    let patch = json!({"spec": {"serviceName": "other"}});
    let (code, msg) = status_code(
        sts.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(msg.contains("spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template'"), "{msg}");
    let vct = json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}});
    assert_eq!(
        status_code(
            sts.patch("web", &PatchParams::default(), &Patch::Merge(&vct))
                .await
                .unwrap_err()
        )
        .0,
        422
    );
    let ok =
        json!({"spec": {"replicas": 0, "template": {"metadata": {"annotations": {"a": "b"}}}}});
    sts.patch("web", &PatchParams::default(), &Patch::Merge(&ok))
        .await
        .unwrap();
}

#[tokio::test]
async fn service_cluster_ip_and_immutable_config_maps() {
    let c = Cluster::start(false).await;
    let svcs: Api<Service> = Api::namespaced(c.client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})).unwrap();
    let created = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let spec = created.spec.clone().unwrap();
    let ip = spec.cluster_ip.clone().unwrap();
    assert!(!ip.is_empty());
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.session_affinity.as_deref(), Some("None"));
    // A PUT that omits clusterIP keeps it; changing it is invalid.
    let mut again = svc.clone();
    again.metadata.resource_version = created.metadata.resource_version.clone();
    let replaced = svcs
        .replace("web", &PostParams::default(), &again)
        .await
        .unwrap();
    assert_eq!(
        replaced.spec.unwrap().cluster_ip.as_deref(),
        Some(ip.as_str())
    );
    let patch = json!({"spec": {"clusterIP": "10.0.0.99", "clusterIPs": ["10.0.0.99"]}});
    let (code, msg) = status_code(
        svcs.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(
        msg.contains("spec.clusterIPs[0]: Invalid value: \"10.0.0.99\": may not change once set"),
        "{msg}"
    );

    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "frozen"}, "immutable": true, "data": {"a": "1"}}),
    )
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let patch = json!({"data": {"a": "2"}});
    let (code, msg) = status_code(
        cms.patch("frozen", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(
        msg.contains("data: Forbidden: field is immutable when `immutable` is set"),
        "{msg}"
    );
}

#[tokio::test]
async fn claims_grow_only_where_the_class_allows_and_retained_volumes_rebind() {
    let c = Cluster::start(false).await;
    let classes: Api<StorageClass> = Api::all(c.client.clone());
    for (name, policy, expand) in [("retain", "Retain", true), ("fixed", "Delete", false)] {
        let sc: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": name}, "provisioner": "emulator", "reclaimPolicy": policy, "allowVolumeExpansion": expand
        }))
        .unwrap();
        classes.create(&PostParams::default(), &sc).await.unwrap();
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    let claim = |name: &str, class: &str, size: &str| -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"sites.ecmwf.int/id": name}},
            "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
        }))
        .unwrap()
    };
    claims
        .create(&PostParams::default(), &claim("data", "retain", "1Gi"))
        .await
        .unwrap();
    claims
        .create(&PostParams::default(), &claim("fixed", "fixed", "1Gi"))
        .await
        .unwrap();
    let bound = eventually("bound", WAIT, || async {
        let c = claims.get("data").await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await;
    let volume = bound.spec.unwrap().volume_name.unwrap();
    assert_eq!(volume, format!("pvc-{}", bound.metadata.uid.unwrap()));
    eventually("fixed bound", WAIT, || async {
        (claims.get("fixed").await.ok()?.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await;

    // Shrink: 422. Growth with an expandable class: allowed; without: 403.
    let shrink = json!({"spec": {"resources": {"requests": {"storage": "512Mi"}}}});
    let (code, msg) = status_code(
        claims
            .patch("data", &PatchParams::default(), &Patch::Merge(&shrink))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(
        msg.contains("field can not be less than previous value"),
        "{msg}"
    );
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    claims
        .patch("data", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .unwrap();
    let (code, msg) = status_code(
        claims
            .patch("fixed", &PatchParams::default(), &Patch::Merge(&grow))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 403);
    assert!(
        msg.contains("only dynamically provisioned pvc can be resized"),
        "{msg}"
    );
    let other_spec = json!({"spec": {"accessModes": ["ReadWriteMany"]}});
    assert_eq!(
        status_code(
            claims
                .patch("data", &PatchParams::default(), &Patch::Merge(&other_spec))
                .await
                .unwrap_err()
        )
        .0,
        422
    );

    // Deleting the claim leaves a Retain volume Released with its old claimRef.
    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    let released = eventually("released", WAIT, || async {
        let pv = pvs.get(&volume).await.ok()?;
        (pv.status.as_ref()?.phase.as_deref() == Some("Released")).then_some(pv)
    })
    .await;
    assert_eq!(
        released.spec.unwrap().claim_ref.unwrap().name.as_deref(),
        Some("data")
    );
    // Rebind: point the claimRef at the new claim's name (no uid) and pin volumeName.
    let rebind = json!({"spec": {"claimRef": {"namespace": "default", "name": "data", "uid": null, "resourceVersion": null}}});
    pvs.patch(&volume, &PatchParams::default(), &Patch::Merge(&rebind))
        .await
        .unwrap();
    let mut again = claim("data", "retain", "2Gi");
    again.spec.as_mut().unwrap().volume_name = Some(volume.clone());
    let recreated = claims.create(&PostParams::default(), &again).await.unwrap();
    eventually("rebound", WAIT, || async {
        let pv = pvs.get(&volume).await.ok()?;
        let c = claims.get("data").await.ok()?;
        (pv.status.as_ref()?.phase.as_deref() == Some("Bound")
            && pv.spec.as_ref()?.claim_ref.as_ref()?.uid == recreated.metadata.uid
            && c.status.as_ref()?.phase.as_deref() == Some("Bound"))
        .then_some(())
    })
    .await;
    // A Delete-policy volume goes with its claim.
    let fixed_volume = claims
        .get("fixed")
        .await
        .unwrap()
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    claims
        .delete("fixed", &DeleteParams::default())
        .await
        .unwrap();
    eventually("deleted volume", WAIT, || async {
        pvs.get_opt(&fixed_volume)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}
