//! SPEC 4.6, live configuration and no silent rollouts, against the emulator: the operator
//! follows the `sites-config` ConfigMap through the API. A valid change is in force without a
//! restart and writes only what it changes; an invalid one is refused (last valid configuration
//! stays, `sites_config_valid` 0, a Warning Event on the ConfigMap); a new platform version
//! rolls no Site; a routing-mode change moves every route (LIFE-13).

use std::collections::BTreeMap;

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sites_operator::config::RoutingMode;
use sites_operator::crd::Site;
use sites_operator::upgrade::{self, Action, Target};

use crate::support::operator::{
    NS, Operator, WAIT, api, config, container_image, counted_client, example_named, prepare,
    sites, start_following, wait_available,
};
use crate::support::{Cluster, eventually, repo_file};

pub(crate) const SITES: [&str; 2] = ["docs-handbook", "docs-other"];

pub(crate) fn example_config() -> String {
    std::fs::read_to_string(repo_file("manifests/base/config.yaml")).unwrap()
}

/// The configuration `manifests/overlays/kind-e2e` (and `local-1.20`) deploys.
pub(crate) fn deployed_config() -> String {
    std::fs::read_to_string(repo_file("manifests/overlays/kind-e2e/config.yaml")).unwrap()
}

/// Replaces `from` by `to` in `text`, which must contain it.
pub(crate) fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} in the configuration");
    text.replace(from, to)
}

/// Creates `sites-config` holding `text`.
pub(crate) async fn create_config(c: &Cluster, text: &str) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "sites-config", "namespace": NS},
        "data": {"config.yaml": text}
    }))
    .unwrap();
    api::<ConfigMap>(c)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

pub(crate) async fn write_config(c: &Cluster, text: &str) {
    let patch = json!({"data": {"config.yaml": text}});
    api::<ConfigMap>(c)
        .patch(
            "sites-config",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("sites-config patched");
}

/// Raises the platform version of the example configuration to 2.5.0 and waits until the
/// operator has it in force and has reconciled after it.
async fn new_version_in_force(c: &Cluster, op: &Operator) {
    let reconciles = op.reconciles();
    write_config(
        c,
        &edit(
            &example_config(),
            "version: \"2.4.0\"",
            "version: \"2.5.0\"",
        ),
    )
    .await;
    eventually("the new version in force", WAIT, || async {
        (op.live.get().sites.version == "2.5.0").then_some(())
    })
    .await;
    op.settled_after(reconciles + 1.0).await;
}

/// The Events recorded about the ConfigMap with `reason`.
async fn config_events(c: &Cluster, reason: &str) -> Vec<Event> {
    api::<Event>(c)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("sites-config"))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// Waits until the Event the follower records about a change is counted. The follower
/// publishes the configuration before it records the Event, so the reconciles the change
/// starts may settle before the Event's response is read.
async fn config_event_counted(op: &Operator, before: &BTreeMap<String, u64>) {
    eventually("the Event on the ConfigMap counted", WAIT, || async {
        op.writes_since(before)
            .contains_key("events.events.k8s.io")
            .then_some(())
    })
    .await;
}

/// The generation: it moves with every change of the spec (a pod template change rolls the pods),
/// not with the status the StatefulSet controller writes.
fn generation<K: kube::Resource>(obj: &K) -> i64 {
    obj.meta().generation.unwrap_or_default()
}

/// Two Sites that record their images (as the mutating webhook records them on CREATE), served
/// by an operator that follows `sites-config`; returns when both are Available.
pub(crate) async fn two_sites_following_the_configmap() -> (Cluster, Operator) {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    create_config(&c, &example_config()).await;
    let (client, registry) = counted_client(&c).await;
    let (tx, rx) = tokio::sync::watch::channel(true);
    let cfg = config(RoutingMode::Ingress);
    let op = start_following(
        client,
        registry,
        cfg.clone(),
        Some("sites-config"),
        Some(tx),
        rx,
    )
    .await;
    for name in SITES {
        let mut site = example_named(name, name.trim_start_matches("docs-"));
        site.spec.configuration.applications = upgrade::recorded_applications(&site, &cfg, None);
        sites(&c)
            .create(&PostParams::default(), &site)
            .await
            .unwrap();
    }
    for name in SITES {
        wait_available(&c, name).await;
    }
    // The delayed volume labels are written too: from here on, every write is the test's doing.
    let volumes: Api<PersistentVolume> = Api::all(c.client.clone());
    eventually("volumes labelled", WAIT, || async {
        let labelled = volumes
            .list(&Default::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|pv| {
                pv.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("sites.ecmwf.int/id"))
            })
            .count();
        (labelled == SITES.len()).then_some(())
    })
    .await;
    // ... and counted: the test may see a write before the operator has read its response.
    eventually("the volume labels counted", WAIT, || async {
        let writes = op.writes_by_resource();
        (writes.get("persistentvolumes").copied() >= Some(SITES.len() as u64)).then_some(())
    })
    .await;
    op.settled().await;
    (c, op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_change_is_in_force_without_a_restart_and_writes_only_what_it_changes() {
    let (c, op) = two_sites_following_the_configmap().await;
    assert_eq!(op.metric("sites_config_valid"), 1.0);
    let statefulsets: Vec<i64> = {
        let mut v = Vec::new();
        for name in SITES {
            v.push(generation(&api::<StatefulSet>(&c).get(name).await.unwrap()));
        }
        v
    };

    // Route annotations: one Ingress write per Site, nothing else (the Event on the ConfigMap).
    let before = op.writes_by_resource();
    let reconciles = op.reconciles();
    let text = edit(
        &example_config(),
        "nginx.org/client-max-body-size: \"0\"",
        "nginx.org/client-max-body-size: \"10m\"",
    );
    write_config(&c, &text).await;
    eventually("every Ingress annotated", WAIT, || async {
        for name in SITES {
            let ingress = api::<Ingress>(&c).get(name).await.ok()?;
            let annotations = ingress.metadata.annotations?;
            (annotations.get("nginx.org/client-max-body-size")? == "10m").then_some(())?;
        }
        Some(())
    })
    .await;
    op.settled_after(reconciles + 1.0).await;
    config_event_counted(&op, &before).await;
    assert_eq!(
        op.writes_since(&before),
        BTreeMap::from([
            ("events.events.k8s.io".to_string(), 1),
            ("ingresses.networking.k8s.io".to_string(), 2),
        ])
    );
    assert_eq!(config_events(&c, "ConfigurationApplied").await.len(), 1);

    // A new platform version: every Site records its images, so no pod template changes and no
    // pod rolls; the environment ConfigMap (PLATFORM_VERSION) is the one object that changes.
    let before = op.writes_by_resource();
    let reconciles = op.reconciles();
    write_config(&c, &edit(&text, "version: \"2.4.0\"", "version: \"2.5.0\"")).await;
    eventually("the new version in force", WAIT, || async {
        (op.live.get().sites.version == "2.5.0").then_some(())
    })
    .await;
    op.settled_after(reconciles + 1.0).await;
    config_event_counted(&op, &before).await;
    assert_eq!(
        op.writes_since(&before),
        BTreeMap::from([
            ("configmaps".to_string(), 2),
            ("events.events.k8s.io".to_string(), 1),
        ])
    );
    for (name, rv) in SITES.iter().zip(&statefulsets) {
        let sts = api::<StatefulSet>(&c).get(name).await.unwrap();
        assert_eq!(
            &generation(&sts),
            rv,
            "{name}: the StatefulSet is untouched"
        );
    }
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_change_is_refused_and_the_last_valid_configuration_stays() {
    let (c, op) = two_sites_following_the_configmap().await;
    let valid = example_config();

    // The webhook is not there to stop it (bypassed or down).
    write_config(&c, &edit(&valid, "  mode: ingress ", "  mode: mesh ")).await;
    eventually("the change refused", WAIT, || async {
        (op.metric("sites_config_valid") == 0.0).then_some(())
    })
    .await;
    let refused = eventually("a Warning Event on the ConfigMap", WAIT, || async {
        config_events(&c, "InvalidConfiguration").await.pop()
    })
    .await;
    assert_eq!(refused.type_.as_deref(), Some("Warning"));
    let note = refused.note.unwrap_or_default();
    assert!(note.contains("routing.mode"), "{note}");
    assert_eq!(op.live.get().routing.mode, RoutingMode::Ingress);
    // An edit of a Site flushes the queue: the refused configuration changed nothing.
    let reconciles = op.reconciles();
    let patch = json!({"metadata": {"labels": {"touched": "yes"}}});
    sites(&c)
        .patch(
            "docs-handbook",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    op.settled_after(reconciles).await;
    assert_eq!(op.live.get().routing.mode, RoutingMode::Ingress);
    for name in SITES {
        assert!(api::<Ingress>(&c).get_opt(name).await.unwrap().is_some());
    }
    // The same invalid text again (a resync, an unrelated edit) is not reported again; checked
    // below, once a later version was seen (the watch delivers versions in order).
    let patch = json!({"metadata": {"labels": {"touched": "yes"}}});
    api::<ConfigMap>(&c)
        .patch(
            "sites-config",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();

    // Valid again, in gateway mode: every Site's route moves to an HTTPRoute (LIFE-13).
    write_config(&c, &edit(&valid, "  mode: ingress ", "  mode: gateway ")).await;
    eventually("every route moved to the Gateway API", WAIT, || async {
        for name in SITES {
            api::<HttpRoute>(&c).get_opt(name).await.ok()??;
            api::<Ingress>(&c)
                .get_opt(name)
                .await
                .ok()?
                .is_none()
                .then_some(())?;
        }
        Some(())
    })
    .await;
    assert_eq!(op.metric("sites_config_valid"), 1.0);
    let refusals = config_events(&c, "InvalidConfiguration").await;
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(refusals[0].series.is_none(), "reported once: {refusals:?}");

    // Deleted: refused too (the configuration in force stays); created again: in force.
    api::<ConfigMap>(&c)
        .delete("sites-config", &DeleteParams::default())
        .await
        .unwrap();
    eventually("a deleted ConfigMap refused", WAIT, || async {
        (op.metric("sites_config_valid") == 0.0).then_some(())
    })
    .await;
    assert_eq!(op.live.get().routing.mode, RoutingMode::Gateway);
    create_config(&c, &valid).await;
    eventually("the ConfigMap in force again", WAIT, || async {
        (op.metric("sites_config_valid") == 1.0
            && op.live.get().routing.mode == RoutingMode::Ingress)
            .then_some(())
    })
    .await;
    for name in SITES {
        wait_available(&c, name).await;
    }
    op.stop().await;
}

/// A Site whose spec records no image (created while the mutating webhook did not run: this
/// harness has none) keeps running its pin through a new platform version (SPEC 4.6): the image
/// its status records, and with the StatefulSet deleted or the status's record removed, the one
/// the other still holds. `upgrade` then moves it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_without_recorded_images_keeps_its_pin_through_a_new_version() {
    let (c, op) = two_sites_following_the_configmap().await;
    let unrecorded = example_named("docs-unrecorded", "unrecorded");
    assert!(
        unrecorded.spec.configuration.applications[0]
            .image
            .is_none()
    );
    sites(&c)
        .create(&PostParams::default(), &unrecorded)
        .await
        .unwrap();
    wait_available(&c, "docs-unrecorded").await;
    let old = "registry.example.org/sites/static:2.4.0";
    let pin = |site: &Site| site.status.as_ref()?.images.get("static").cloned();
    let stored = sites(&c).get("docs-unrecorded").await.unwrap();
    assert_eq!(
        pin(&stored).as_deref(),
        Some(old),
        "the status records the pin"
    );
    assert!(stored.spec.configuration.applications[0].image.is_none());
    let image = |sts: &StatefulSet| container_image(sts, "static");
    let running = api::<StatefulSet>(&c).get("docs-unrecorded").await.unwrap();
    assert_eq!(image(&running), old);

    new_version_in_force(&c, &op).await;
    let after = api::<StatefulSet>(&c).get("docs-unrecorded").await.unwrap();
    assert_eq!(generation(&after), generation(&running), "no roll");
    assert_eq!(image(&after), old);

    // The StatefulSet deleted by hand: recreated with the status's pin, not the new version.
    let uid = after.metadata.uid.clone();
    api::<StatefulSet>(&c)
        .delete("docs-unrecorded", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = eventually("the StatefulSet recreated", WAIT, || async {
        let sts = api::<StatefulSet>(&c).get("docs-unrecorded").await.ok()?;
        (sts.metadata.uid != uid).then_some(sts)
    })
    .await;
    assert_eq!(image(&recreated), old, "recreated with the pin");

    // The status's record removed: the pin is what the StatefulSet runs, and it is recorded again.
    let reconciles = op.reconciles();
    sites(&c)
        .patch_status(
            "docs-unrecorded",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"images": null}})),
        )
        .await
        .unwrap();
    let restored = eventually("the pin recorded again", WAIT, || async {
        let site = sites(&c).get("docs-unrecorded").await.ok()?;
        pin(&site).map(|_| site)
    })
    .await;
    assert_eq!(pin(&restored).as_deref(), Some(old));
    op.settled_after(reconciles + 1.0).await;
    let still = api::<StatefulSet>(&c).get("docs-unrecorded").await.unwrap();
    assert_eq!(generation(&still), generation(&recreated), "no roll");

    // `upgrade` moves it, once.
    let outcomes = upgrade::upgrade(
        &c.client,
        NS,
        &op.live.get(),
        &Target::One("docs-unrecorded".into()),
        Action::Upgrade { force: false },
        false,
    )
    .await
    .unwrap();
    assert!(outcomes[0].written, "{outcomes:?}");
    let new = "registry.example.org/sites/static:2.5.0";
    let upgraded = eventually("the upgrade rolled out", WAIT, || async {
        let sts = api::<StatefulSet>(&c).get("docs-unrecorded").await.ok()?;
        (image(&sts) == new).then_some(sts)
    })
    .await;
    assert_eq!(generation(&upgraded), generation(&still) + 1, "one roll");
    let site = eventually("the new pin recorded", WAIT, || async {
        let site = sites(&c).get("docs-unrecorded").await.ok()?;
        (pin(&site).as_deref() == Some(new)).then_some(site)
    })
    .await;
    assert_eq!(
        site.spec.configuration.applications[0].image.as_deref(),
        Some(new)
    );
    op.stop().await;
}

/// Sites created before images were recorded get them written into their spec by
/// `upgrade --record-images` (what they run); no pod rolls, and a new version rolls none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_images_keep_a_new_version_from_rolling_older_sites() {
    let (c, op) = two_sites_following_the_configmap().await;
    // A Site of before: no image recorded.
    let legacy = example_named("docs-legacy", "legacy");
    assert!(legacy.spec.configuration.applications[0].image.is_none());
    sites(&c)
        .create(&PostParams::default(), &legacy)
        .await
        .unwrap();
    wait_available(&c, "docs-legacy").await;
    let running = api::<StatefulSet>(&c).get("docs-legacy").await.unwrap();
    let image = |sts: &StatefulSet| container_image(sts, "static");

    let outcomes = upgrade::upgrade(
        &c.client,
        NS,
        &op.live.get(),
        &Target::All,
        Action::RecordImages,
        false,
    )
    .await
    .unwrap();
    let written: Vec<_> = outcomes
        .iter()
        .filter(|o| o.written)
        .map(|o| o.site.as_str())
        .collect();
    assert_eq!(written, ["docs-legacy"], "{outcomes:?}");
    let stored: Site = sites(&c).get("docs-legacy").await.unwrap();
    assert_eq!(
        stored.spec.configuration.applications[0].image.as_deref(),
        Some(image(&running).as_str())
    );

    new_version_in_force(&c, &op).await;
    let after = api::<StatefulSet>(&c).get("docs-legacy").await.unwrap();
    assert_eq!(generation(&after), generation(&running), "no roll");
    op.stop().await;
}
