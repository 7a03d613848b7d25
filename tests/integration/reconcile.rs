//! The reconciler against the emulator (SPEC 4, the LIFE and RTG rows): the controller runs in
//! this process with a kube client; the emulator's StatefulSet controller, kubelet, volume binder
//! and garbage collector play the cluster. The harness is `support::operator`; this file holds
//! the tests.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sites_emulator::controllers::Behaviour;
use sites_operator::config::RoutingMode;
use sites_operator::crd::{Phase, UPGRADE_REQUEST_ANNOTATION};
use sites_operator::metrics;

use crate::support::operator::{
    HANG_GUARD, NS, SeenErrors, WAIT, api, condition, config, count_panics, edit_and_settle,
    elected_operator, example, example_named, install_http_routes, merge, operator, prepare,
    prepare_platform, reset_stats, restarted_at, sites, wait_available, wait_condition,
    writes_after,
};
use crate::support::{Cluster, eventually, eventually_every, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_converges_and_an_unchanged_site_costs_no_writes() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let site = wait_available(&c, "docs-handbook").await;
    let status = site.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Running));
    assert_eq!(status.all_steps_started, Some(true));
    assert_eq!(status.observed_generation, site.metadata.generation);
    assert_eq!(condition(&site, "Progressing").unwrap().1, "UpToDate");

    // Every object exists, labelled and owned by the Site (LIFE-01, LIFE-05's owner refs).
    let uid = site.metadata.uid.clone().unwrap();
    let owned =
        |refs: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
            let refs = refs.unwrap_or_default();
            refs.len() == 1 && refs[0].uid == uid && refs[0].controller == Some(true)
        };
    for name in ["docs-handbook", "docs-handbook-oauth2"] {
        assert!(
            owned(
                api::<Secret>(&c)
                    .get(name)
                    .await
                    .unwrap()
                    .metadata
                    .owner_references
            ),
            "{name}"
        );
    }
    for name in ["docs-handbook", "docs-handbook-files"] {
        assert!(
            owned(
                api::<ConfigMap>(&c)
                    .get(name)
                    .await
                    .unwrap()
                    .metadata
                    .owner_references
            ),
            "{name}"
        );
    }
    assert!(owned(
        api::<PersistentVolumeClaim>(&c)
            .get("docs-handbook")
            .await
            .unwrap()
            .metadata
            .owner_references
    ));
    assert!(owned(
        api::<StatefulSet>(&c)
            .get("docs-handbook")
            .await
            .unwrap()
            .metadata
            .owner_references
    ));
    assert!(owned(
        api::<Service>(&c)
            .get("docs-handbook")
            .await
            .unwrap()
            .metadata
            .owner_references
    ));
    let ingress = api::<Ingress>(&c).get("docs-handbook").await.unwrap();
    assert!(owned(ingress.metadata.owner_references.clone()));
    assert_eq!(
        ingress.spec.unwrap().rules.unwrap()[0].host.as_deref(),
        Some("sites.example.org")
    );

    // Events on the Site say what was created.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.client.clone(), NS);
    let note = eventually("a Created event", WAIT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("docs-handbook")
            })
            .filter(|e| e.reason.as_deref() == Some("Created"))
            .find_map(|e| e.note)
    })
    .await;
    for object in [
        "Secret docs-handbook",
        "Secret docs-handbook-oauth2",
        "ConfigMap docs-handbook-files",
        "PersistentVolumeClaim docs-handbook",
        "StatefulSet docs-handbook",
        "Service docs-handbook",
        "Ingress docs-handbook",
    ] {
        assert!(note.contains(object), "{object} in {note}");
    }

    // Nothing changed: another pass writes nothing (SPEC 4.4 "zero API writes").
    assert_eq!(
        writes_after(
            &c,
            &op,
            "docs-handbook",
            json!({"metadata": {"labels": {"team": "docs"}}})
        )
        .await,
        0,
        "{}",
        c.emulator().stats().to_json()
    );

    // LIFE-02: an audit field causes no object writes; the status records the new generation
    // (one status write, SPEC 4.4), so kubectl wait and kstatus see the Site settle.
    let audit = json!({"spec": {"description": "new words", "updated_by": "asmith"}});
    assert_eq!(
        writes_after(&c, &op, "docs-handbook", audit).await,
        1,
        "audit change: {}",
        c.emulator().stats().to_json()
    );
    let site = sites(&c).get("docs-handbook").await.unwrap();
    assert_eq!(
        site.status.as_ref().unwrap().observed_generation,
        site.metadata.generation,
        "observedGeneration after an audit edit"
    );
    assert_eq!(condition(&site, "Progressing").unwrap().1, "UpToDate");
    // The same pass again: nothing more.
    assert_eq!(
        writes_after(
            &c,
            &op,
            "docs-handbook",
            json!({"metadata": {"labels": {"team": "docs-2"}}})
        )
        .await,
        0,
        "{}",
        c.emulator().stats().to_json()
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_created_in_order_and_a_failure_stops_the_sequence() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    // StatefulSet creation fails: the objects before it exist, the ones after it do not (LIFE-01).
    c.emulator()
        .faults()
        .add(sites_emulator::faults::FaultRule {
            verb: Some("patch".into()),
            resource: Some("statefulsets.apps".into()),
            rate: 1.0,
            codes: vec![500],
            latency_ms: 0,
        });
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let site = wait_condition(&c, "docs-handbook", "Progressing", "True", "TransientError").await;
    assert!(
        condition(&site, "Progressing").unwrap().2.contains("500"),
        "{site:?}"
    );
    assert!(
        api::<Secret>(&c)
            .get_opt("docs-handbook")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        api::<Secret>(&c)
            .get_opt("docs-handbook-oauth2")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        api::<ConfigMap>(&c)
            .get_opt("docs-handbook-files")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        api::<PersistentVolumeClaim>(&c)
            .get_opt("docs-handbook")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        api::<StatefulSet>(&c)
            .get_opt("docs-handbook")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        api::<Service>(&c)
            .get_opt("docs-handbook")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        api::<Ingress>(&c)
            .get_opt("docs-handbook")
            .await
            .unwrap()
            .is_none()
    );
    // The condition is written during the reconcile; its retry is counted when it returns.
    eventually("the failed reconcile retried", WAIT, || async {
        (op.metric("workqueue_retries_total") >= 1.0).then_some(())
    })
    .await;
    // The fault clears: the retry with backoff completes the sequence.
    c.emulator().faults().clear();
    wait_available(&c, "docs-handbook").await;
    let results = |result: &str| {
        op.metric(&format!(
            "controller_runtime_reconcile_total{{controller=\"site\",result=\"{result}\"}}"
        ))
    };
    eventually("an error and a success counted", WAIT, || async {
        (results("error") >= 1.0 && results("success") >= 1.0).then_some(())
    })
    .await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qualifying_changes_restart_once_and_upgrade_requests_restart() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    let sts = api::<StatefulSet>(&c);
    assert_eq!(
        restarted_at(&sts.get("docs-handbook").await.unwrap()),
        None,
        "new pods need no restart"
    );
    let token = || async {
        let secret = api::<Secret>(&c).get("docs-handbook").await.unwrap();
        secret.data.unwrap()["api_token"].clone()
    };
    let original_token = token().await;

    // LIFE-03: a qualifying change sets restartedAt once.
    merge(
        &c,
        "docs-handbook",
        json!({"spec": {"configuration": {"headers": {"X-Frame-Options": "DENY"}}}}),
    )
    .await;
    let first = eventually("restartedAt set", WAIT, || async {
        restarted_at(&sts.get("docs-handbook").await.ok()?)
    })
    .await;
    let files = api::<ConfigMap>(&c)
        .get("docs-handbook-files")
        .await
        .unwrap();
    assert!(
        files.data.unwrap()["nginx.conf"].contains("add_header X-Frame-Options \"DENY\" always;")
    );
    wait_available(&c, "docs-handbook").await;
    // A qualifying change is recorded as observed (observedGeneration follows the generation).
    eventually("observedGeneration current", WAIT, || async {
        let s = sites(&c).get("docs-handbook").await.ok()?;
        (s.status?.observed_generation == s.metadata.generation).then_some(())
    })
    .await;
    // Another reconcile of the same spec: no second restart.
    edit_and_settle(
        &c,
        &op,
        "docs-handbook",
        json!({"metadata": {"labels": {"touch": "1"}}}),
    )
    .await;
    assert_eq!(
        restarted_at(&sts.get("docs-handbook").await.unwrap()),
        Some(first.clone())
    );

    // LIFE-09: an annotation-only upgrade request re-renders and restarts.
    let uuid = "3f1c2a9e-7b7d-4c2b-9d55-2b6c9a0e4f11";
    merge(
        &c,
        "docs-handbook",
        json!({"metadata": {"annotations": {UPGRADE_REQUEST_ANNOTATION: uuid}}}),
    )
    .await;
    let second = eventually("a second restartedAt", WAIT, || async {
        restarted_at(&sts.get("docs-handbook").await.ok()?).filter(|v| *v != first)
    })
    .await;
    assert_eq!(token().await, original_token, "generated tokens are kept");
    // The site Secret's managed-by label removed by hand: the label is restored, the tokens
    // are kept (the cache keeps no data of Secrets without the label; they are read).
    api::<Secret>(&c)
        .patch(
            "docs-handbook",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null}}})),
        )
        .await
        .unwrap();
    eventually("managed-by label restored", WAIT, || async {
        let s = api::<Secret>(&c).get("docs-handbook").await.ok()?;
        let label = s
            .metadata
            .labels?
            .get("app.kubernetes.io/managed-by")
            .cloned();
        (label.as_deref() == Some("sites-operator")).then_some(())
    })
    .await;
    assert_eq!(
        token().await,
        original_token,
        "the tokens survive a removed label"
    );
    // Removing the request restarts nothing.
    edit_and_settle(
        &c,
        &op,
        "docs-handbook",
        json!({"metadata": {"annotations": {UPGRADE_REQUEST_ANNOTATION: null}}}),
    )
    .await;
    assert_eq!(
        restarted_at(&sts.get("docs-handbook").await.unwrap()),
        Some(second)
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_scales_to_zero_redirects_and_keeps_the_data() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    merge(
        &c,
        "docs-handbook",
        json!({"spec": {"configuration": {"enabled": false}}}),
    )
    .await;
    let site = wait_condition(&c, "docs-handbook", "Available", "False", "Disabled").await;
    assert_eq!(site.status.unwrap().phase, Some(Phase::Disabled));
    let sts = api::<StatefulSet>(&c).get("docs-handbook").await.unwrap();
    assert_eq!(sts.spec.unwrap().replicas, Some(0));
    let ingress = api::<Ingress>(&c).get("docs-handbook").await.unwrap();
    let snippets = ingress.metadata.annotations.unwrap()["nginx.org/location-snippets"].clone();
    assert!(
        snippets.ends_with("return 302 /hub/error/page/410/;"),
        "{snippets}"
    );
    eventually("pods gone", WAIT, || async {
        let pods = api::<Pod>(&c)
            .list(&ListParams::default().labels("sites.ecmwf.int/id=docs-handbook"))
            .await
            .ok()?;
        pods.items.is_empty().then_some(())
    })
    .await;
    assert!(
        api::<PersistentVolumeClaim>(&c)
            .get_opt("docs-handbook")
            .await
            .unwrap()
            .is_some()
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_site_cascades_and_recreating_it_rebinds_its_volume() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    let claim = api::<PersistentVolumeClaim>(&c)
        .get("docs-handbook")
        .await
        .unwrap();
    let volume = claim.spec.unwrap().volume_name.expect("bound");
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    // The background task labels the bound volume with the site id.
    eventually("volume labelled", WAIT, || async {
        let pv = pvs.get(&volume).await.ok()?;
        (pv.metadata.labels?.get("sites.ecmwf.int/id")? == "docs-handbook").then_some(())
    })
    .await;

    // Its own label write queues nothing: the Site's reconcile only scheduled it. Removing the
    // label is a change (one trigger); putting the site labels back, as the operator's patch
    // does, is not. A volume created afterwards, once cached, shows both events were handled.
    op.settled_after(0.0).await;
    let pv_triggers = || op.metric("sites_reconcile_triggers_total{kind=\"PersistentVolume\"}");
    let before = pv_triggers();
    let site_labels = sites_operator::labels::labels("docs-handbook");
    let unlabel: serde_json::Map<String, Value> = site_labels
        .keys()
        .map(|k| (k.clone(), Value::Null))
        .collect();
    for labels in [json!(unlabel), json!(site_labels)] {
        pvs.patch(
            &volume,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap();
    }
    pvs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "marker"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "hostPath": {"path": "/tmp/marker"}},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    eventually("the marker volume cached", WAIT, || async {
        op.caches().volumes.get("marker").map(|_| ())
    })
    .await;
    assert_eq!(
        pv_triggers() - before,
        1.0,
        "only the label removal queued the Site"
    );
    pvs.delete("marker", &DeleteParams::default())
        .await
        .unwrap();
    // Removed by hand and left so, the site labels come back: the reconcile the removal queues
    // schedules the patch again, although this process labelled the volume before.
    pvs.patch(
        &volume,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": unlabel}})),
    )
    .await
    .unwrap();
    eventually("volume labelled again", WAIT, || async {
        let pv = pvs.get(&volume).await.ok()?;
        (pv.metadata.labels?.get("sites.ecmwf.int/id")? == "docs-handbook").then_some(())
    })
    .await;

    sites(&c)
        .delete("docs-handbook", &DeleteParams::default())
        .await
        .unwrap();
    eventually("objects collected", WAIT, || async {
        let lp = ListParams::default().labels("sites.ecmwf.int/id=docs-handbook");
        let n = api::<Secret>(&c).list(&lp).await.ok()?.items.len()
            + api::<ConfigMap>(&c).list(&lp).await.ok()?.items.len()
            + api::<PersistentVolumeClaim>(&c)
                .list(&lp)
                .await
                .ok()?
                .items
                .len()
            + api::<StatefulSet>(&c).list(&lp).await.ok()?.items.len()
            + api::<Service>(&c).list(&lp).await.ok()?.items.len()
            + api::<Ingress>(&c).list(&lp).await.ok()?.items.len()
            + api::<Pod>(&c).list(&lp).await.ok()?.items.len();
        (n == 0).then_some(())
    })
    .await;
    let released = eventually("volume released", WAIT, || async {
        let pv = pvs.get(&volume).await.ok()?;
        (pv.status.as_ref()?.phase.as_deref() == Some("Released")).then_some(pv)
    })
    .await;
    assert_eq!(
        released.metadata.labels.unwrap()["sites.ecmwf.int/id"],
        "docs-handbook"
    );

    // Recreated with the same identity: the claim is pinned to the retained volume.
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    let claim = api::<PersistentVolumeClaim>(&c)
        .get("docs-handbook")
        .await
        .unwrap();
    assert_eq!(
        claim.spec.unwrap().volume_name.as_deref(),
        Some(volume.as_str())
    );
    // The volume binder finishes on its own schedule: Available does not wait for it.
    let pv = eventually("the retained volume bound again", WAIT, || async {
        let pv = pvs.get(&volume).await.ok()?;
        (pv.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(pv)
    })
    .await;
    // Bound to that claim by its uid: no other claim of the name could have taken it.
    let claim_ref = pv.spec.unwrap().claim_ref.unwrap();
    assert_eq!(claim_ref.name.as_deref(), Some("docs-handbook"));
    assert_eq!(claim_ref.uid, claim.metadata.uid);
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_route_is_never_taken() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let foreign: Ingress = serde_json::from_value(json!({
        "metadata": {"name": "docs-handbook", "namespace": NS, "labels": {"sites.ecmwf.int/id": "other-site"}},
        "spec": {"ingressClassName": "nginx", "rules": [{"host": "other.example.org"}]}
    }))
    .unwrap();
    api::<Ingress>(&c)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let site = wait_condition(&c, "docs-handbook", "Progressing", "True", "RouteConflict").await;
    assert!(
        condition(&site, "Progressing")
            .unwrap()
            .2
            .contains("belongs to another site")
    );
    let stored = api::<Ingress>(&c).get("docs-handbook").await.unwrap();
    assert_eq!(
        stored.metadata.labels.unwrap()["sites.ecmwf.int/id"],
        "other-site"
    );
    assert_eq!(
        stored.spec.unwrap().rules.unwrap()[0].host.as_deref(),
        Some("other.example.org")
    );
    // The status is written before the reconcile's result is counted.
    eventually("requeued with the 60 s delay", WAIT, || async {
        (op.metric(
            "controller_runtime_reconcile_total{controller=\"site\",result=\"requeue_after\"}",
        ) >= 1.0)
            .then_some(())
    })
    .await;
    // The other objects were still made.
    assert!(
        api::<Service>(&c)
            .get_opt("docs-handbook")
            .await
            .unwrap()
            .is_some()
    );

    // A site stuck on a conflict costs no writes when reconciled again (no repeated Event or
    // status write). First let what legitimately still changes settle: the pods becoming ready
    // (status) and the background labelling of the bound volume.
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    eventually("pods running and the volume labelled", WAIT, || async {
        let s = sites(&c).get("docs-handbook").await.ok()?;
        let running = s.status?.phase == Some(Phase::Running);
        let claim = api::<PersistentVolumeClaim>(&c)
            .get("docs-handbook")
            .await
            .ok()?;
        let pv = pvs.get(claim.spec?.volume_name.as_deref()?).await.ok()?;
        let labelled = pv.metadata.labels?.contains_key("sites.ecmwf.int/id");
        (running && labelled).then_some(())
    })
    .await;
    op.settled_after(op.reconciles() - 1.0).await;
    assert_eq!(
        writes_after(
            &c,
            &op,
            "docs-handbook",
            json!({"metadata": {"labels": {"touch": "1"}}})
        )
        .await,
        0,
        "{}",
        c.emulator().stats().to_json()
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_problems_reach_the_status() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    c.emulator()
        .kubelet()
        .set_image("ghcr.io/example/dashboard:1.4.2", Behaviour::NeverReady);
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let mut site = example("site-custom-app.yaml");
    site.spec.configuration.settings.replicas = 1;
    sites(&c)
        .create(&PostParams::default(), &site)
        .await
        .unwrap();
    // LIFE-10: a container that starts and never becomes ready.
    let stuck = eventually("a NotReady problem", WAIT, || async {
        let s = sites(&c).get("research-dashboard").await.ok()?;
        let st = s.status.clone()?;
        st.problems
            .iter()
            .any(|p| {
                p.name == "dashboard"
                    && p.kind == "running"
                    && p.reason.as_deref() == Some("NotReady")
            })
            .then_some(st)
    })
    .await;
    assert_eq!(stuck.phase, Some(Phase::Pending));
    assert_eq!(stuck.all_steps_started, Some(false));

    // A pod someone else made with the site's label and the operator's annotation, but not
    // controlled by the site's StatefulSet: it counts in no status, and the rollout below does
    // not delete it although it is never ready.
    let impostor: Pod = serde_json::from_value(json!({
        "metadata": {"name": "research-dashboard-impostor", "namespace": NS,
                     "labels": {"sites.ecmwf.int/id": "research-dashboard"},
                     "annotations": {"sites.ecmwf.int/operator_bound": "true"}},
        "spec": {"containers": [{"name": "dashboard", "image": "ghcr.io/example/dashboard:1.4.2"}]}
    }))
    .unwrap();
    api::<Pod>(&c)
        .create(&PostParams::default(), &impostor)
        .await
        .unwrap();

    // LIFE-15: a fixed image rolls out even though the old pod never became ready.
    c.emulator()
        .kubelet()
        .set_image("ghcr.io/example/dashboard:1.4.3", Behaviour::Ready);
    let patch = json!({"spec": {"configuration": {"applications": [
        {"name": "static"},
        {"name": "dashboard", "image": "ghcr.io/example/dashboard:1.4.3", "port": 8050,
         "paths": [{"path": "/research/dashboard/api", "path_type": "Prefix"}]}
    ]}}});
    merge(&c, "research-dashboard", patch).await;
    let site = wait_available(&c, "research-dashboard").await;
    assert!(site.status.unwrap().problems.is_empty());
    let impostor = api::<Pod>(&c)
        .get("research-dashboard-impostor")
        .await
        .unwrap();
    assert!(
        impostor.metadata.deletion_timestamp.is_none(),
        "a pod the site does not control is left alone"
    );

    // A crash loop is reported as a waiting container.
    c.emulator()
        .kubelet()
        .set_image("ghcr.io/example/dashboard:1.4.4", Behaviour::CrashLoop);
    let patch = json!({"spec": {"configuration": {"applications": [
        {"name": "static"},
        {"name": "dashboard", "image": "ghcr.io/example/dashboard:1.4.4", "port": 8050}
    ]}}});
    merge(&c, "research-dashboard", patch).await;
    eventually("a CrashLoopBackOff problem", WAIT, || async {
        let s = sites(&c).get("research-dashboard").await.ok()?;
        s.status?
            .problems
            .iter()
            .any(|p| p.kind == "waiting" && p.reason.as_deref() == Some("CrashLoopBackOff"))
            .then_some(())
    })
    .await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_edits_are_repaired() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let site = sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    // LIFE-11: a deleted object comes back.
    api::<ConfigMap>(&c)
        .delete("docs-handbook-files", &DeleteParams::default())
        .await
        .unwrap();
    eventually("files ConfigMap recreated", WAIT, || async {
        api::<ConfigMap>(&c)
            .get_opt("docs-handbook-files")
            .await
            .ok()?
    })
    .await;
    // LIFE-12: a second owner is removed; the Site is the only owner again.
    let patch = json!({"metadata": {"ownerReferences": [
        {"apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "name": "docs-handbook", "uid": site.metadata.uid, "controller": true, "blockOwnerDeletion": true},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "stranger", "uid": "0000-stranger"}
    ]}});
    api::<Service>(&c)
        .patch(
            "docs-handbook",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    eventually("owner references reset", WAIT, || async {
        let svc = api::<Service>(&c).get("docs-handbook").await.ok()?;
        let refs = svc.metadata.owner_references?;
        (refs.len() == 1 && refs[0].uid == site.metadata.uid.clone()?).then_some(())
    })
    .await;

    // SPEC 4.6, drift: content edited by anyone else is restored from the watch event.
    let conf = |cm: ConfigMap| cm.data.and_then(|d| d.get("nginx.conf").cloned());
    let rendered_conf = conf(
        api::<ConfigMap>(&c)
            .get("docs-handbook-files")
            .await
            .unwrap(),
    );
    let edits: [(&str, Value); 4] = [
        ("StatefulSet", json!({"spec": {"replicas": 4}})),
        (
            "ConfigMap",
            json!({"data": {"nginx.conf": "# edited by hand"}}),
        ),
        // A key added to the selector (a merge patch merges maps): the Service would select no
        // pod. Its selector is atomic (`x-kubernetes-map-type`), so the repair's apply replaces
        // it whole.
        (
            "Service",
            json!({"spec": {"selector": {"app": "hijacked"}}}),
        ),
        (
            "Secret",
            json!({"metadata": {"labels": {"sites.ecmwf.int/id": null}}}),
        ),
    ];
    op.settled().await;
    let before = op.writes_by_resource();
    let triggers = |kind: &str| {
        op.metric(&format!(
            "sites_reconcile_triggers_total{{kind=\"{kind}\"}}"
        ))
    };
    let kinds = ["StatefulSet", "ConfigMap", "Service", "Secret"];
    let triggers_before = kinds.map(triggers);
    for (kind, edit) in edits {
        let patch = Patch::Merge(&edit);
        let params = PatchParams::default();
        match kind {
            "StatefulSet" => drop(
                api::<StatefulSet>(&c)
                    .patch("docs-handbook", &params, &patch)
                    .await
                    .unwrap(),
            ),
            "ConfigMap" => drop(
                api::<ConfigMap>(&c)
                    .patch("docs-handbook-files", &params, &patch)
                    .await
                    .unwrap(),
            ),
            "Service" => drop(
                api::<Service>(&c)
                    .patch("docs-handbook", &params, &patch)
                    .await
                    .unwrap(),
            ),
            _ => drop(
                api::<Secret>(&c)
                    .patch("docs-handbook", &params, &patch)
                    .await
                    .unwrap(),
            ),
        }
    }
    // Repaired from the watch events (SPEC 4.6). How soon is not checked: the deadline only
    // guards against a hang; what is checked is that every edit was repaired, each queued by the
    // watch of its own kind, with one write each.
    eventually("every hand edit repaired", HANG_GUARD, || async {
        let sts = api::<StatefulSet>(&c).get("docs-handbook").await.ok()?;
        let cm = api::<ConfigMap>(&c).get("docs-handbook-files").await.ok()?;
        let svc = api::<Service>(&c).get("docs-handbook").await.ok()?;
        let secret = api::<Secret>(&c).get("docs-handbook").await.ok()?;
        let selector = svc.spec?.selector?;
        (sts.spec?.replicas == Some(1)
            && conf(cm) == rendered_conf
            && selector.get("sites.ecmwf.int/id").map(String::as_str) == Some("docs-handbook")
            && selector.len() == 1
            && secret
                .metadata
                .labels?
                .get("sites.ecmwf.int/id")
                .map(String::as_str)
                == Some("docs-handbook"))
        .then_some(())
    })
    .await;
    for (kind, before) in kinds.iter().zip(triggers_before) {
        assert!(triggers(kind) > before, "the {kind} edit queued the Site");
    }
    // No write loop: status-only changes and the repairs' own watch events cost nothing more.
    // Settled counts the reconciles the repairs delayed too (a repair not yet in the cache is
    // looked at again later), so a write they would make is counted below.
    wait_available(&c, "docs-handbook").await;
    op.settled().await;
    let repairs: std::collections::BTreeMap<String, u64> = op
        .writes_since(&before)
        .into_iter()
        // The Site status may report the extra pods of the scaled StatefulSet meanwhile: a
        // report of what happened, not a repair.
        .filter(|(r, _)| !r.ends_with("/status"))
        .collect();
    // One write per repair.
    assert_eq!(
        repairs,
        std::collections::BTreeMap::from([
            ("configmaps".to_string(), 1),
            ("secrets".to_string(), 1),
            ("services".to_string(), 1),
            ("statefulsets.apps".to_string(), 1),
        ])
    );
    assert_eq!(
        writes_after(
            &c,
            &op,
            "docs-handbook",
            json!({"metadata": {"labels": {"touch": "1"}}})
        )
        .await,
        0,
        "{}",
        c.emulator().stats().to_json()
    );

    // `kubectl scale` (the scale subresource) is drift too.
    let before = op.writes_by_resource();
    c.kubectl_ok(&[
        "scale",
        "statefulset",
        "docs-handbook",
        "-n",
        NS,
        "--replicas=3",
    ]);
    eventually("kubectl scale repaired", HANG_GUARD, || async {
        let sts = api::<StatefulSet>(&c).get("docs-handbook").await.ok()?;
        (sts.spec?.replicas == Some(1)).then_some(())
    })
    .await;
    wait_available(&c, "docs-handbook").await;
    op.settled().await;
    assert_eq!(
        op.writes_since(&before).get("statefulsets.apps").copied(),
        Some(1),
        "one write for the repair"
    );

    // The status is the operator's too: a status edited by hand (`kubectl patch
    // --subresource=status`) is written back, in one write.
    op.settled().await;
    let wanted = sites(&c)
        .get("docs-handbook")
        .await
        .unwrap()
        .status
        .unwrap();
    let summary = |s: &sites_operator::crd::SiteStatus| {
        let conditions: Vec<_> = s
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect();
        (s.phase, conditions)
    };
    let before = op.writes_by_resource();
    let edited = c.kubectl_ok(&[
        "patch",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status": {"phase": "Failed", "conditions": []}}"#,
        "-o",
        "json",
    ]);
    let edited: sites_operator::crd::Site = serde_json::from_str(&edited).unwrap();
    assert_ne!(
        summary(&edited.status.unwrap()),
        summary(&wanted),
        "the edit took"
    );
    eventually("the status written back", HANG_GUARD, || async {
        let status = sites(&c).get("docs-handbook").await.ok()?.status?;
        (summary(&status) == summary(&wanted)).then_some(())
    })
    .await;
    op.settled().await;
    let writes = op.writes_since(&before);
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(
        writes
            .iter()
            .all(|(r, n)| r.ends_with("/status") && *n == 1),
        "{writes:?}"
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_installed_after_the_start_is_used_without_a_restart() {
    let c = Cluster::start(false).await;
    prepare_platform(&c).await;
    let op = operator(&c, config(RoutingMode::Gateway)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let site = wait_condition(&c, "docs-handbook", "Progressing", "True", "TransientError").await;
    let message = condition(&site, "Progressing").unwrap().2;
    assert!(message.contains("does not serve HTTPRoutes"), "{message}");
    // The platform installs the Gateway API: the same process watches and writes HTTPRoutes.
    install_http_routes(&c).await;
    eventually("the HTTPRoute created", WAIT, || async {
        api::<HttpRoute>(&c).get_opt("docs-handbook").await.ok()?
    })
    .await;
    wait_available(&c, "docs-handbook").await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_the_routing_mode_moves_the_route() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let other = example_named("docs-other", "other");
    sites(&c)
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    wait_available(&c, "docs-other").await;
    op.stop().await;
    // A foreign HTTPRoute named like docs-other stays (LIFE-13 skips foreign routes).
    let foreign: HttpRoute = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "docs-other", "namespace": NS, "labels": {"sites.ecmwf.int/id": "someone-else"}},
        "spec": {}
    }))
    .unwrap();
    api::<HttpRoute>(&c)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    let op = operator(&c, config(RoutingMode::Gateway)).await;
    eventually("HTTPRoute created and Ingress removed", WAIT, || async {
        let route = api::<HttpRoute>(&c).get_opt("docs-handbook").await.ok()??;
        let gone = api::<Ingress>(&c)
            .get_opt("docs-handbook")
            .await
            .ok()?
            .is_none();
        gone.then_some(route)
    })
    .await;
    // docs-other: its HTTPRoute name is taken by another site, so its Ingress stays too until the
    // conflict is resolved... no: the Ingress is this site's own route of the other mode.
    let site = wait_condition(&c, "docs-other", "Progressing", "True", "RouteConflict").await;
    assert!(
        condition(&site, "Progressing")
            .unwrap()
            .2
            .contains("HTTPRoute")
    );
    let kept = api::<HttpRoute>(&c).get("docs-other").await.unwrap();
    assert_eq!(
        kept.metadata.labels.unwrap()["sites.ecmwf.int/id"],
        "someone-else"
    );
    eventually("docs-other's own Ingress removed", WAIT, || async {
        api::<Ingress>(&c)
            .get_opt("docs-other")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_route_is_terminal_until_the_spec_changes() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Gateway)).await;
    let mut site = example("site-custom-app.yaml");
    site.spec.configuration.applications[1].paths[0].path_type = "ImplementationSpecific".into();
    // Stored without the webhook: the reconciler runs the same rules and reports every violation.
    site.spec
        .configuration
        .headers
        .insert("X-Bad Name".into(), "v".into());
    sites(&c)
        .create(&PostParams::default(), &site)
        .await
        .unwrap();
    let s = wait_condition(
        &c,
        "research-dashboard",
        "Progressing",
        "False",
        "InvalidConfiguration",
    )
    .await;
    let message = condition(&s, "Progressing").unwrap().2;
    assert!(message.starts_with("invalid Site: "), "{message}");
    assert!(
        message.contains("spec.configuration.applications[1].paths[0].path_type: \"ImplementationSpecific\" is not supported in gateway mode"),
        "{message}"
    );
    assert!(
        message
            .contains("spec.configuration.headers[\"X-Bad Name\"]: the header name contains ' '"),
        "{message}"
    );
    // Nothing is written for an invalid Site.
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), NS);
    assert!(
        secrets
            .get_opt("research-dashboard")
            .await
            .unwrap()
            .is_none()
    );
    let terminal = || op.metric("controller_runtime_terminal_reconcile_errors_total");
    let errors = || op.metric("controller_runtime_reconcile_errors_total");
    // The condition is written during the reconcile, the error counted when it returns.
    eventually(
        "the terminal error counted in both totals",
        WAIT,
        || async { (terminal() >= 1.0 && errors() >= terminal()).then_some(()) },
    )
    .await;
    let (terminal_before, errors_before) = (terminal(), errors());
    let retries = op.metric("workqueue_retries_total");
    // Unrelated events reconcile again but do not retry with backoff. Each of those reconciles
    // is a terminal error, counted in both error totals (as controller-runtime counts them).
    edit_and_settle(
        &c,
        &op,
        "research-dashboard",
        json!({"metadata": {"labels": {"touch": "1"}}}),
    )
    .await;
    assert!(terminal() > terminal_before);
    assert_eq!(errors() - errors_before, terminal() - terminal_before);
    assert_eq!(op.metric("workqueue_retries_total"), retries);
    // Fixing the spec recovers.
    let patch = json!({"spec": {"configuration": {"headers": null, "applications": [
        {"name": "static"},
        {"name": "dashboard", "image": "ghcr.io/example/dashboard:1.4.2", "port": 8050,
         "paths": [{"path": "/research/dashboard/api", "path_type": "Prefix"}]}
    ]}}});
    merge(&c, "research-dashboard", patch).await;
    wait_available(&c, "research-dashboard").await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_writes_nothing_for_converged_sites() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let n = 1000;
    for i in 0..n {
        let s = example_named(&format!("site-{i}"), &format!("site-{i}"));
        sites(&c).create(&PostParams::default(), &s).await.unwrap();
    }
    eventually_every(
        "every site available",
        Duration::from_secs(240),
        Duration::from_millis(250),
        || async {
            let all = sites(&c).list(&ListParams::default()).await.ok()?;
            all.items
                .iter()
                .all(|s| condition(s, "Available").is_some_and(|(st, _, _)| st == "True"))
                .then_some(())
        },
    )
    .await;
    // Let the background volume labelling finish.
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    eventually_every(
        "volumes labelled",
        WAIT,
        Duration::from_millis(250),
        || async {
            let all = pvs.list(&ListParams::default()).await.ok()?;
            (all.items
                .iter()
                .filter(|pv| {
                    pv.metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key("sites.ecmwf.int/id"))
                })
                .count()
                == n)
                .then_some(())
        },
    )
    .await;
    // Every reconcile the first operator still had queued (a late pod event) has finished.
    eventually("the first operator is idle", WAIT, || async {
        op.idle().then_some(())
    })
    .await;
    op.stop().await;

    reset_stats(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    eventually_every(
        "every site reconciled",
        Duration::from_secs(240),
        Duration::from_millis(250),
        || async {
            (op.metric("controller_runtime_reconcile_total") >= n as f64 && op.idle()).then_some(())
        },
    )
    .await;
    assert_eq!(
        c.emulator().stats().writes(),
        0,
        "{}",
        c.emulator().stats().to_json()
    );
    // The operator's own accounting agrees: reads only.
    let exposition = metrics::encode(&op.registry);
    assert!(exposition.contains("sites_api_requests_total{code=\"200\",resource=\"sites.sites.ecmwf.int\",verb=\"list\"}"), "{exposition}");
    for verb in ["create", "update", "patch", "delete"] {
        assert!(
            !exposition.contains(&format!("verb=\"{verb}\"")),
            "{verb} in {exposition}"
        );
    }
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_a_follower_takes_over() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let cfg = config(RoutingMode::Ingress);
    let a = elected_operator(&c, cfg.clone(), "replica-a").await;
    let b = elected_operator(&c, cfg.clone(), "replica-b").await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(c.client.clone(), NS);
    let holder = leases
        .get("sites-operator")
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity
        .unwrap();
    let (leader, follower) = if holder == "replica-a" {
        (a, b)
    } else {
        (b, a)
    };
    assert!(leader.writes() > 0.0);
    assert_eq!(follower.writes(), 0.0, "the follower wrote");

    // The leader dies without releasing the Lease: the follower takes it over once the Lease
    // has expired, not before, and counts the transition. How long the handover takes is not
    // checked (the deadline only guards against a hang); that it waited for the expiry is.
    leader.stop().await;
    let last = leases.get("sites-operator").await.unwrap().spec.unwrap();
    let other = example_named("docs-other", "other");
    sites(&c)
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    let taken = eventually("the follower holding the Lease", HANG_GUARD, || async {
        let spec = leases.get("sites-operator").await.ok()?.spec?;
        (spec.holder_identity.as_deref() != Some(holder.as_str())).then_some(spec)
    })
    .await;
    let follower_identity = if holder == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    assert_eq!(taken.holder_identity.as_deref(), Some(follower_identity));
    assert_eq!(
        taken.lease_transitions,
        Some(last.lease_transitions.unwrap_or(0) + 1),
        "one transition"
    );
    // Taken at a second after the last renewal plus the Lease duration (expiry is judged in whole
    // seconds, as client-go does): a renewal of the dead leader still in flight when it stopped
    // only moves the expiry later.
    let renewed = last.renew_time.expect("the leader renewed").0;
    let acquired = taken.acquire_time.expect("the follower acquired").0;
    let duration = i64::from(last.lease_duration_seconds.expect("a duration"));
    assert!(
        acquired.as_second() > renewed.as_second() + duration,
        "taken over at {acquired}, before the Lease renewed at {renewed} expired ({duration} s)"
    );
    // The follower, now leading, does the work.
    wait_available(&c, "docs-other").await;
    assert!(follower.writes() > 0.0);
    follower.stop().await;
}

/// The fault soak (issue 9): `SOAK_SITES` Sites (default 1,000) are created and edited while 20%
/// of API requests fail (500, 503, 409, 429), latency spikes come and go and every watch is
/// dropped every 3 s. Afterwards every Site is Available at its latest generation with the latest
/// edit rendered, there is exactly one of each object per Site and no orphan, foreign objects are
/// untouched, nothing panicked, and every injected 500/503/429 is accounted for by the operator's
/// `sites_api_requests_total` (or by the test, whose own requests met them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sites_converge_through_api_errors_latency_spikes_dropped_watches_and_edits() {
    let panics = count_panics();
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let n: usize = std::env::var("SOAK_SITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // Objects of someone else in the same namespace.
    let foreign_cm = api::<ConfigMap>(&c)
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "foreign-settings"}, "data": {"k": "v"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let foreign_secret = api::<Secret>(&c)
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "foreign-credentials"}, "stringData": {"k": "v"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();

    let faults = c.emulator().faults();
    faults.seed(7);
    faults.add(sites_emulator::faults::FaultRule {
        verb: None,
        resource: None,
        rate: 0.2,
        codes: vec![500, 503, 409, 429],
        latency_ms: 0,
    });
    faults.drop_watches_every(Some(Duration::from_secs(3)));
    let spikes = {
        let app = c.emulator().app.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                app.faults.spike(Duration::from_millis(300));
                tokio::time::sleep(Duration::from_millis(500)).await;
                app.faults.spike(Duration::ZERO);
            }
        })
    };
    let seen = Arc::new(SeenErrors::default());
    let op = operator(&c, config(RoutingMode::Ingress)).await;

    // Creations (16 at a time), and edits arriving meanwhile: every 5th Site gets a header, every
    // 50th a second value on top (the latest must win). An edit waits for its Site to exist.
    let latest = |i: usize| -> Option<String> {
        match (i % 50, i % 5) {
            (0, _) => Some(format!("edit-{i}-2")),
            (_, 0) => Some(format!("edit-{i}")),
            _ => None,
        }
    };
    let write = |what: &'static str, i: usize, patch: Option<Value>| {
        let (api, seen) = (sites(&c), seen.clone());
        async move {
            eventually(what, Duration::from_secs(120), || {
                let (api, seen, patch) = (api.clone(), seen.clone(), patch.clone());
                async move {
                    let name = format!("site-{i}");
                    match patch {
                        None => {
                            let s = example_named(&name.clone(), &name);
                            match api.create(&PostParams::default(), &s).await {
                                Err(kube::Error::Api(e))
                                    if e.code == 409 && e.reason == "AlreadyExists" =>
                                {
                                    Some(())
                                }
                                r => seen.note(r).map(|_| ()),
                            }
                        }
                        Some(p) => seen
                            .note(
                                api.patch(&name, &PatchParams::default(), &Patch::Merge(&p))
                                    .await,
                            )
                            .map(|_| ()),
                    }
                }
            })
            .await
        }
    };
    let header = |v: String| Some(json!({"spec": {"configuration": {"headers": {"X-Soak": v}}}}));
    let creations = futures::stream::iter((0..n).map(|i| write("Site created", i, None)))
        .buffer_unordered(16)
        .collect::<Vec<()>>();
    let edits = futures::stream::iter((0..n).filter(|i| i % 5 == 0).map(|i| {
        let write = &write;
        async move {
            write("Site edited", i, header(format!("edit-{i}"))).await;
            if i % 50 == 0 {
                write("Site edited again", i, header(format!("edit-{i}-2"))).await;
            }
        }
    }))
    .buffer_unordered(4)
    .collect::<Vec<()>>();
    tokio::join!(creations, edits);

    let all_converged = || {
        let (api, seen) = (sites(&c), seen.clone());
        async move {
            let all = seen.note(api.list(&ListParams::default()).await)?;
            (all.items.len() == n
                && all.items.iter().all(|s| {
                    condition(s, "Available").is_some_and(|(st, _, _)| st == "True")
                        && s.status.as_ref().and_then(|st| st.observed_generation)
                            == s.metadata.generation
                }))
            .then_some(all.items)
        }
    };
    eventually_every(
        "every site available at its latest generation despite faults",
        Duration::from_secs(600),
        Duration::from_millis(500),
        all_converged,
    )
    .await;
    spikes.abort();
    faults.clear();
    let items = eventually_every(
        "every site still available",
        WAIT,
        Duration::from_millis(250),
        all_converged,
    )
    .await;
    let uids: std::collections::HashSet<String> = items
        .iter()
        .filter_map(|s| s.metadata.uid.clone())
        .collect();

    // The latest edit of every Site is rendered.
    let files = api::<ConfigMap>(&c)
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=sites-operator"))
        .await
        .unwrap()
        .items;
    for i in 0..n {
        let name = format!("site-{i}-files");
        let conf = files
            .iter()
            .find(|cm| cm.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|cm| cm.data.as_ref()?.get("nginx.conf").cloned())
            .unwrap_or_else(|| panic!("{name} has an nginx.conf"));
        match latest(i) {
            Some(v) => assert!(
                conf.contains(&format!("add_header X-Soak \"{v}\" always;")),
                "{name} renders the latest edit {v}"
            ),
            None => assert!(!conf.contains("X-Soak"), "{name} was never edited"),
        }
    }
    // Foreign objects are untouched.
    assert_eq!(
        api::<ConfigMap>(&c)
            .get("foreign-settings")
            .await
            .unwrap()
            .metadata
            .resource_version,
        foreign_cm.metadata.resource_version
    );
    assert_eq!(
        api::<Secret>(&c)
            .get("foreign-credentials")
            .await
            .unwrap()
            .metadata
            .resource_version,
        foreign_secret.metadata.resource_version
    );
    // Every injected 500, 503 and 429 reached a client that counted it (409s can also be real
    // conflicts, so they are only required to have been injected).
    let counted = |code: u16| {
        metrics::encode(&op.registry)
            .lines()
            .filter(|l| {
                l.starts_with("sites_api_requests_total{")
                    && l.contains(&format!("code=\"{code}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    // A fault is counted as injected when the emulator decides it, before the answer's delay (a
    // spike): the answers decided before `clear` may still be on their way.
    let accounted = |code: u16| faults.injected(code) == counted(code) + seen.get(code);
    poll_until(WAIT, Duration::from_millis(20), || async {
        [500, 503, 429].into_iter().all(accounted).then_some(())
    })
    .await;
    for code in [500, 503, 429] {
        let injected = faults.injected(code);
        assert!(injected > 0, "{code} injected");
        assert_eq!(
            injected,
            counted(code) + seen.get(code),
            "every injected {code} is counted by the operator ({}) or seen by the test ({})",
            counted(code),
            seen.get(code)
        );
    }
    assert!(faults.injected(409) > 0);
    // Failed reconciles were retried.
    let errors =
        op.metric("controller_runtime_reconcile_total{controller=\"site\",result=\"error\"}");
    let retries = op.metric("workqueue_retries_total");
    assert!(errors > 0.0, "some reconciles failed");
    assert!(
        retries >= errors,
        "{retries} retries for {errors} failed reconciles"
    );
    assert_eq!(
        panics.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing panicked"
    );

    // Exactly one of each object per site, each owned by its (existing) Site: no duplicates, no orphans.
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=sites-operator");
    let owned_by_a_site =
        |refs: &Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
            refs.as_ref()
                .is_some_and(|r| r.len() == 1 && uids.contains(&r[0].uid))
        };
    let secrets = api::<Secret>(&c).list(&lp).await.unwrap().items;
    assert_eq!(secrets.len(), 2 * n);
    assert!(
        secrets
            .iter()
            .all(|o| owned_by_a_site(&o.metadata.owner_references))
    );
    let cms = api::<ConfigMap>(&c).list(&lp).await.unwrap().items;
    assert_eq!(cms.len(), 2 * n);
    assert!(
        cms.iter()
            .all(|o| owned_by_a_site(&o.metadata.owner_references))
    );
    for (kind, count) in [
        (
            "pvc",
            api::<PersistentVolumeClaim>(&c)
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .filter(|o| owned_by_a_site(&o.metadata.owner_references))
                .count(),
        ),
        (
            "sts",
            api::<StatefulSet>(&c)
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .filter(|o| owned_by_a_site(&o.metadata.owner_references))
                .count(),
        ),
        (
            "svc",
            api::<Service>(&c)
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .filter(|o| owned_by_a_site(&o.metadata.owner_references))
                .count(),
        ),
        (
            "ingress",
            api::<Ingress>(&c)
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .filter(|o| owned_by_a_site(&o.metadata.owner_references))
                .count(),
        ),
    ] {
        assert_eq!(count, n, "{kind}");
    }
    // Tokens were generated once: every site Secret still has the tokens its pods reference.
    assert!(secrets.iter().all(|s| {
        s.data
            .as_ref()
            .is_some_and(|d| d.contains_key("api_token") || d.contains_key("cookie_secret"))
    }));
    // The queue drains.
    eventually("queue empty", WAIT, || async {
        (op.metric("workqueue_depth") == 0.0).then_some(())
    })
    .await;
    op.stop().await;
}

/// After a watch gap the API server makes the operator list again (410 Expired). The Sites and
/// their volumes come back unchanged and are not queued again; a Site changed in the gap is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_after_410_queues_only_what_changed_in_the_gap() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    // Every watch ends after a second, so the next one starts soon after the fault is set.
    c.emulator()
        .faults()
        .drop_watches_every(Some(Duration::from_secs(1)));
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    for name in ["relist-a", "relist-b"] {
        let s = example_named(name, name);
        sites(&c).create(&PostParams::default(), &s).await.unwrap();
        wait_available(&c, name).await;
    }
    op.settled_after(0.0).await;
    let site_triggers = || op.metric("sites_reconcile_triggers_total{kind=\"Site\"}");
    let before = site_triggers();
    let faults = c.emulator().faults();
    faults.expire_next_watch("sites.sites.ecmwf.int");
    eventually("the Site watch expired", WAIT, || async {
        (faults.injected(410) == 1).then_some(())
    })
    .await;
    // A Site created after the expiry: listed or watched, it is queued once.
    let s = example_named("relist-c", "relist-c");
    sites(&c).create(&PostParams::default(), &s).await.unwrap();
    eventually("relist-c cached", WAIT, || async {
        op.caches().sites.get("relist-c").map(|_| ())
    })
    .await;
    // The watch counts a key just after the cache took its object, so the count is read once a
    // later event of the same watch is known to be through: a marker Site created now comes
    // after the re-list (which ended before relist-c was cached, if it delivered it) and after
    // relist-c. Its key is queued after its own count, and it is reconciled (its Secret made)
    // only once queued: by then every key the re-list queued has been counted.
    let marker = example_named("relist-marker", "relist-marker");
    sites(&c)
        .create(&PostParams::default(), &marker)
        .await
        .unwrap();
    eventually("the marker Site reconciled", WAIT, || async {
        api::<Secret>(&c)
            .get_opt("relist-marker")
            .await
            .ok()?
            .map(|_| ())
    })
    .await;
    assert_eq!(
        site_triggers() - before,
        2.0,
        "only the new Site (and the marker after it) was queued: the re-listed relist-a and \
         relist-b were not"
    );
    wait_available(&c, "relist-c").await;
    faults.drop_watches_every(None);
}

/// An owned object deleted while its watch was down leaves no Delete event: the re-list after
/// 410 Expired just leaves it out. The operator judges it deleted once the re-list is done and
/// recreates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_deleted_while_its_watch_was_down_is_recreated_after_the_relist() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let faults = c.emulator().faults();
    // Watches end every second, so the Service watch reconnects soon after each fault below.
    faults.drop_watches_every(Some(Duration::from_secs(1)));
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let s = example_named("gap", "gap");
    sites(&c).create(&PostParams::default(), &s).await.unwrap();
    wait_available(&c, "gap").await;
    op.settled_after(0.0).await;
    let services = api::<Service>(&c);
    let name = services
        .list(&ListParams::default().labels("sites.ecmwf.int/id=gap"))
        .await
        .unwrap()
        .items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    // The Service watch goes down: every new watch of Services fails.
    let failed = faults.injected(500);
    faults.add(sites_emulator::faults::FaultRule {
        verb: Some("watch".into()),
        resource: Some("services".into()),
        rate: 1.0,
        codes: vec![500],
        latency_ms: 0,
    });
    eventually("the Service watch down", WAIT, || async {
        (faults.injected(500) > failed).then_some(())
    })
    .await;
    services
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    // It comes back after a compaction: the next watch gets 410 and the operator lists again.
    faults.expire_next_watch("services");
    faults.clear();
    eventually("the Service recreated", WAIT, || async {
        services.get_opt(&name).await.ok()?.map(|_| ())
    })
    .await;
    assert_eq!(
        faults.injected(410),
        1,
        "the watch resumed through a re-list"
    );
}

/// Events as `kubectl describe` shows them: a repeat within six minutes counts up the series of
/// the first Event (no second Event), another reason is an Event of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_counted_in_the_series_of_the_first() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use sites_operator::controller::apply::record_event;
    use sites_operator::controller::events::{Event, EventType, Recorder, Reporter};

    let c = Cluster::start(false).await;
    prepare(&c).await;
    let recorder = Recorder::new(Reporter {
        controller: "sites-operator".into(),
        instance: None,
    });
    let regarding = ObjectReference {
        api_version: Some("sites.ecmwf.int/v1".into()),
        kind: Some("Site".into()),
        name: Some("docs-handbook".into()),
        namespace: Some(NS.into()),
        uid: Some("uid-1".into()),
        ..Default::default()
    };
    let event = |reason: &str, note: &str| Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note.into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    for note in ["first", "second", "third"] {
        record_event(&c.client, &recorder, &event("Failed", note), &regarding)
            .await
            .unwrap();
    }
    record_event(
        &c.client,
        &recorder,
        &event("Recovered", "fine"),
        &regarding,
    )
    .await
    .unwrap();

    let mut events = api::<K8sEvent>(&c)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    events.sort_by_key(|e| e.reason.clone());
    assert_eq!(events.len(), 2, "{events:?}");
    let (failed, recovered) = (&events[0], &events[1]);
    assert_eq!(failed.reason.as_deref(), Some("Failed"));
    assert_eq!(
        failed.note.as_deref(),
        Some("first"),
        "the first Event is kept"
    );
    let series = failed.series.as_ref().expect("repeats counted");
    assert_eq!(series.count, 3);
    assert!(series.last_observed_time.0 >= failed.event_time.as_ref().unwrap().0);
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(
        failed.reporting_controller.as_deref(),
        Some("sites-operator")
    );
    assert_eq!(failed.regarding.as_ref(), Some(&regarding));
    assert_eq!(recovered.reason.as_deref(), Some("Recovered"));
    assert!(recovered.series.is_none(), "{recovered:?}");

    // The first Event deleted (`kubectl delete events`): the next repeat is a new Event.
    let first = failed.metadata.name.clone().unwrap();
    api::<K8sEvent>(&c)
        .delete(&first, &DeleteParams::default())
        .await
        .unwrap();
    record_event(&c.client, &recorder, &event("Failed", "fourth"), &regarding)
        .await
        .expect("a repeat of a deleted Event is recorded anew");
    let failed: Vec<K8sEvent> = api::<K8sEvent>(&c)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Failed"))
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].note.as_deref(), Some("fourth"));
    assert!(failed[0].series.is_none(), "{failed:?}");
    assert_ne!(failed[0].metadata.name.as_deref(), Some(first.as_str()));
}

/// The emulator's kubelet at a real node's pace ([`sites_emulator::controllers::Kubelet::set_pace`]):
/// a new Site's status goes through the states the real control plane shows (BENCHMARKS.md, the
/// real table): no pod yet, its pod Pending with the containers `ContainerCreating`, then
/// Available; at the default pace the middle state passes within one tick and the operator
/// mostly sees the last. Each status write is a status a watcher sees change (a pod seen
/// before its node took it is one more Pending status, as on real).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_real_nodes_pace_a_new_site_shows_its_pods_states() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    c.emulator().kubelet().set_pace(Duration::from_millis(1500));
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let before = op.writes_by_resource();
    let seen = tokio::spawn({
        let sites = sites(&c);
        async move {
            let (mut states, mut statuses) = (Vec::new(), Vec::new());
            let mut stream = std::pin::pin!(kube::runtime::watcher(
                sites,
                kube::runtime::watcher::Config::default().fields("metadata.name=docs-handbook"),
            ));
            while let Some(Ok(event)) = stream.next().await {
                let kube::runtime::watcher::Event::Apply(site) = event else {
                    continue;
                };
                let Some(status) = site.status.clone() else {
                    continue;
                };
                let creating = status
                    .problems
                    .iter()
                    .any(|p| p.reason.as_deref() == Some("ContainerCreating"));
                let available = condition(&site, "Available").is_some_and(|(s, _, _)| s == "True");
                let state = match (status.phase, creating, available) {
                    (_, _, true) => "Available",
                    (Some(Phase::Pending), true, _) => "ContainerCreating",
                    (Some(Phase::Pending), false, _) => "Pending",
                    _ => "other",
                };
                if states.last() != Some(&state) {
                    states.push(state);
                }
                if statuses.last() != Some(&status) {
                    statuses.push(status);
                }
                if available {
                    break;
                }
            }
            (states, statuses.len() as u64)
        }
    });
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    let (states, statuses) = tokio::time::timeout(WAIT, seen).await.unwrap().unwrap();
    assert_eq!(states, ["Pending", "ContainerCreating", "Available"]);
    op.settled().await;
    let status_writes = |w: &std::collections::BTreeMap<String, u64>| {
        w.get("sites.sites.ecmwf.int/status").copied().unwrap_or(0)
    };
    let after = op.writes_by_resource();
    // Each status write is a status a watcher sees change.
    assert_eq!(
        status_writes(&after) - status_writes(&before),
        statuses,
        "status writes for the statuses seen"
    );
    op.stop().await;
}
