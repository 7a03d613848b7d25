//! SPEC 4.6 and 4.4 against the emulator, with the reconciler in process (no webhook: a Site is
//! stored as it is, as when the webhook was down): the operator writes only what its Site
//! controls, one public path serves one Site, and the status describes what is deployed.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use sites_operator::config::RoutingMode;
use sites_operator::crd::Phase;

use crate::support::operator::{
    NS, api, condition, config, edit_and_settle, example, example_named, merge, operator, prepare,
    sites, wait_available, wait_condition,
};
use crate::support::{Cluster, eventually};

const WAIT: Duration = Duration::from_secs(30);

/// The Warning Events recorded about `site` with `reason`: their notes.
async fn warnings(c: &Cluster, site: &str, reason: &str) -> Vec<String> {
    let events: kube::Api<Event> = api(c);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(site))
        .filter(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.note)
        .collect()
}

/// An object as stored, for a byte-for-byte comparison.
async fn stored<K>(c: &Cluster, name: &str) -> Option<Value>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    api::<K>(c)
        .get_opt(name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

async fn create<K>(c: &Cluster, object: Value) -> Value
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let object: K = serde_json::from_value(object).unwrap();
    serde_json::to_value(
        api::<K>(c)
            .create(&PostParams::default(), &object)
            .await
            .unwrap(),
    )
    .unwrap()
}

/// Deletes the Site and waits until it is gone and garbage collection removed its OAuth2
/// Secret (an object it created).
async fn deleted(c: &Cluster, site: &str) {
    sites(c)
        .delete(site, &DeleteParams::default())
        .await
        .unwrap();
    let owned = format!("{site}-oauth2");
    eventually("the Site and its objects deleted", WAIT, || async {
        let gone = sites(c).get_opt(site).await.unwrap().is_none()
            && api::<Secret>(c).get_opt(&owned).await.unwrap().is_none();
        gone.then_some(())
    })
    .await;
}

/// Every watch and list of `resource` fails with 503 from now on.
fn blind(faults: &sites_emulator::faults::Faults, resource: &str) {
    for verb in ["watch", "list"] {
        faults.add(sites_emulator::faults::FaultRule {
            verb: Some(verb.into()),
            resource: Some(resource.into()),
            rate: 1.0,
            codes: vec![503],
            latency_ms: 0,
        });
    }
}

/// Waits until `site` reports an ObjectConflict; its message, which must begin with `prefix`.
async fn conflict(c: &Cluster, site: &str, prefix: &str) -> String {
    let found = wait_condition(c, site, "Progressing", "True", "ObjectConflict").await;
    let message = condition(&found, "Progressing").unwrap().2;
    assert!(message.starts_with(prefix), "{message}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_the_site_does_not_control_are_left_untouched() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    // A platform Secret that happens to have a Site's name, and a ConfigMap of the same name.
    let secret = create::<Secret>(
        &c,
        json!({"metadata": {"name": "docs-handbook", "namespace": NS}, "stringData": {"platform": "keep me"}}),
    )
    .await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let site = wait_condition(&c, "docs-handbook", "Progressing", "True", "ObjectConflict").await;
    let message = condition(&site, "Progressing").unwrap().2;
    assert_eq!(
        message,
        "Secret docs-handbook exists and is not controlled by any Site; it is left alone and retried in 60s"
    );
    assert_eq!(condition(&site, "Available").unwrap().0, "False");
    // Untouched, byte for byte; nothing after it in the LIFE-01 order was written.
    assert_eq!(stored::<Secret>(&c, "docs-handbook").await, Some(secret));
    assert_eq!(stored::<Secret>(&c, "docs-handbook-oauth2").await, None);
    assert_eq!(stored::<StatefulSet>(&c, "docs-handbook").await, None);
    // One Warning Event, not one per reconcile.
    let notes = eventually("a conflict Event", WAIT, || async {
        let notes = warnings(&c, "docs-handbook", "ObjectConflict").await;
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    edit_and_settle(
        &c,
        &op,
        "docs-handbook",
        json!({"metadata": {"labels": {"touch": "1"}}}),
    )
    .await;
    assert_eq!(warnings(&c, "docs-handbook", "ObjectConflict").await, notes);
    assert_eq!(notes, [message]);

    // The Secret removed by its owner: the Site converges, and a retry is already scheduled.
    api::<Secret>(&c)
        .delete("docs-handbook", &DeleteParams::default())
        .await
        .unwrap();
    edit_and_settle(
        &c,
        &op,
        "docs-handbook",
        json!({"metadata": {"labels": {"touch": "2"}}}),
    )
    .await;
    let site = wait_available(&c, "docs-handbook").await;

    // Its own object, the owner reference removed by hand (it keeps the operator's labels): the
    // Site's, so it is restored.
    api::<ConfigMap>(&c)
        .patch(
            "docs-handbook-files",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
        )
        .await
        .unwrap();
    let uid = site.metadata.uid.clone().unwrap();
    eventually("the owner reference restored", WAIT, || async {
        let cm = api::<ConfigMap>(&c).get("docs-handbook-files").await.ok()?;
        let refs = cm.metadata.owner_references.unwrap_or_default();
        (refs.len() == 1 && refs[0].uid == uid && refs[0].controller == Some(true)).then_some(())
    })
    .await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_site_never_deletes_what_it_did_not_create() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let configmap = create::<ConfigMap>(
        &c,
        json!({"metadata": {"name": "docs-handbook", "namespace": NS, "labels": {"team": "platform"}}, "data": {"a": "1"}}),
    )
    .await;
    let service = create::<Service>(
        &c,
        json!({"metadata": {"name": "other-site", "namespace": NS}, "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}}),
    )
    .await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let site = wait_condition(&c, "docs-handbook", "Progressing", "True", "ObjectConflict").await;
    assert!(
        condition(&site, "Progressing")
            .unwrap()
            .2
            .starts_with("ConfigMap docs-handbook exists and is not controlled by any Site"),
        "{site:?}"
    );
    // The Secrets before it were written; the ConfigMap was not.
    assert!(stored::<Secret>(&c, "docs-handbook-oauth2").await.is_some());
    assert_eq!(
        stored::<ConfigMap>(&c, "docs-handbook").await,
        Some(configmap.clone())
    );

    // A second Site whose Service would take a Service it does not control: the objects before
    // it are written, the Service and the route are not.
    let other = example_named("other-site", "other");
    sites(&c)
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    let other = wait_condition(&c, "other-site", "Progressing", "True", "ObjectConflict").await;
    assert!(
        condition(&other, "Progressing")
            .unwrap()
            .2
            .starts_with("Service other-site exists and is not controlled by any Site"),
        "{other:?}"
    );
    assert!(stored::<StatefulSet>(&c, "other-site").await.is_some());
    assert_eq!(stored::<Ingress>(&c, "other-site").await, None);
    assert_eq!(
        stored::<Service>(&c, "other-site").await,
        Some(service.clone())
    );

    // Deleting the Sites: garbage collection removes what they created, and only that.
    deleted(&c, "docs-handbook").await;
    deleted(&c, "other-site").await;
    assert_eq!(
        stored::<ConfigMap>(&c, "docs-handbook").await,
        Some(configmap)
    );
    assert_eq!(stored::<Service>(&c, "other-site").await, Some(service));
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_never_takes_another_sites_objects() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    // Site `a` owns the ConfigMap `a-files`; Site `a-files` would name its own ConfigMap so.
    let a = example_named("a", "a");
    sites(&c).create(&PostParams::default(), &a).await.unwrap();
    wait_available(&c, "a").await;
    let files = stored::<ConfigMap>(&c, "a-files").await.unwrap();
    let b = example_named("a-files", "b");
    sites(&c).create(&PostParams::default(), &b).await.unwrap();
    let b = wait_condition(&c, "a-files", "Progressing", "True", "ObjectConflict").await;
    assert!(
        condition(&b, "Progressing")
            .unwrap()
            .2
            .starts_with("ConfigMap a-files exists and is controlled by Site a;"),
        "{b:?}"
    );
    // No fight: Site a's ConfigMap stays as a wrote it, and a stays Available.
    edit_and_settle(
        &c,
        &op,
        "a",
        json!({"metadata": {"labels": {"touch": "1"}}}),
    )
    .await;
    assert_eq!(stored::<ConfigMap>(&c, "a-files").await, Some(files));
    wait_available(&c, "a").await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_site_keeps_a_shared_path() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    // A twin with the same /docs/handbook/, stored while the webhook was down.
    let mut twin = example("site.yaml");
    twin.metadata.name = Some("handbook-copy".into());
    sites(&c)
        .create(&PostParams::default(), &twin)
        .await
        .unwrap();
    let twin = wait_condition(&c, "handbook-copy", "Progressing", "True", "PathConflict").await;
    assert_eq!(
        condition(&twin, "Progressing").unwrap().2,
        "the path /docs/handbook/ is already used by Site docs-handbook; this Site gets no route (retried in 60s)"
    );
    assert!(stored::<Ingress>(&c, "handbook-copy").await.is_none());
    assert!(stored::<Ingress>(&c, "docs-handbook").await.is_some());
    assert!(stored::<StatefulSet>(&c, "handbook-copy").await.is_some());
    eventually("a PathConflict Event", WAIT, || async {
        (!warnings(&c, "handbook-copy", "PathConflict")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    // The older Site deleted: the twin gets the route without waiting for its retry.
    sites(&c)
        .delete("docs-handbook", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the twin's route", WAIT, || async {
        stored::<Ingress>(&c, "handbook-copy").await
    })
    .await;
    let twin = wait_condition(&c, "handbook-copy", "Progressing", "False", "UpToDate").await;
    assert_eq!(condition(&twin, "Available").unwrap().0, "True");
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_phase_does_not_run_ahead_of_the_objects() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    // Archiving while the StatefulSet cannot be written: the pods still run.
    c.emulator()
        .faults()
        .add(sites_emulator::faults::FaultRule {
            verb: Some("patch".into()),
            resource: Some("statefulsets.apps".into()),
            rate: 1.0,
            codes: vec![503],
            latency_ms: 0,
        });
    merge(
        &c,
        "docs-handbook",
        json!({"spec": {"configuration": {"enabled": false}}}),
    )
    .await;
    let site = wait_condition(&c, "docs-handbook", "Progressing", "True", "TransientError").await;
    let status = site.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Running), "{status:?}");
    assert_eq!(status.observed_generation, site.metadata.generation);
    assert!(
        condition(&site, "Progressing")
            .unwrap()
            .2
            .starts_with("cannot apply StatefulSet docs-handbook: API error 503"),
        "{site:?}"
    );
    // Once it can be written: Disabled.
    c.emulator().faults().clear();
    let site = wait_condition(&c, "docs-handbook", "Available", "False", "Disabled").await;
    assert_eq!(site.status.unwrap().phase, Some(Phase::Disabled));
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_a_conflict_and_the_platform_secret_survives() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let ns = ["-n", NS];
    c.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "docs-handbook",
        "--from-literal=platform=keep",
        ns[0],
        ns[1],
    ]);
    let before = c.kubectl_ok(&["get", "secret", "docs-handbook", "-o", "json", ns[0], ns[1]]);
    c.kubectl_ok(&[
        "apply",
        "-f",
        crate::support::repo_file("manifests/examples/site.yaml")
            .to_str()
            .unwrap(),
        ns[0],
        ns[1],
    ]);
    c.kubectl_ok(&[
        "wait",
        "--for=jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}=ObjectConflict",
        "--timeout=30s",
        "site/docs-handbook",
        ns[0],
        ns[1],
    ]);
    let message = c.kubectl_ok(&[
        "get",
        "site",
        "docs-handbook",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Progressing\")].message}",
        ns[0],
        ns[1],
    ]);
    assert!(
        message.starts_with("Secret docs-handbook exists and is not controlled by any Site"),
        "{message}"
    );
    c.kubectl_ok(&[
        "delete",
        "site",
        "docs-handbook",
        "--wait=true",
        ns[0],
        ns[1],
    ]);
    let after = c.kubectl_ok(&["get", "secret", "docs-handbook", "-o", "json", ns[0], ns[1]]);
    assert_eq!(
        before, after,
        "the Secret is untouched and survives the Site's deletion"
    );
    let owners = c.kubectl_ok(&[
        "get",
        "secret",
        "docs-handbook",
        "-o",
        "jsonpath={.metadata.ownerReferences}",
        ns[0],
        ns[1],
    ]);
    assert_eq!(owners, "");
    op.stop().await;
}

/// Routes are judged by their controller, as every owned kind is, never by the id label alone
/// (SPEC 4.6, RTG-03): a route of the site's name carrying the site's id label but controlled
/// by another object is neither taken in the active mode nor deleted as the other mode's route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_with_the_sites_label_but_another_controller_is_never_taken() {
    use crate::support::operator::install_http_routes;
    use gateway_api::apis::standard::httproutes::HttpRoute;

    let c = Cluster::start(false).await;
    prepare(&c).await;
    install_http_routes(&c).await;
    // The controller exists: an object whose owners are all gone is garbage-collected.
    let edge = create::<k8s_openapi::api::apps::v1::Deployment>(
        &c,
        json!({"metadata": {"name": "edge", "namespace": NS},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "edge"}},
                        "template": {"metadata": {"labels": {"app": "edge"}},
                                     "spec": {"containers": [{"name": "edge", "image": "edge:1"}]}}}}),
    )
    .await;
    let controller = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "edge",
                             "uid": edge["metadata"]["uid"], "controller": true}]);
    let labels = json!({"sites.ecmwf.int/id": "docs-handbook",
                        "app.kubernetes.io/managed-by": "sites-operator"});
    let ingress = create::<Ingress>(
        &c,
        json!({"metadata": {"name": "docs-handbook", "namespace": NS, "labels": labels,
                            "ownerReferences": controller},
               "spec": {"ingressClassName": "edge", "rules": [{"host": "edge.example.org"}]}}),
    )
    .await;
    let route = create::<HttpRoute>(
        &c,
        json!({"metadata": {"name": "docs-handbook", "namespace": NS, "labels": labels,
                            "ownerReferences": controller},
               "spec": {"hostnames": ["edge.example.org"]}}),
    )
    .await;

    // Ingress mode: the Ingress is the active route (a conflict naming its controller), the
    // HTTPRoute the other mode's (left alone).
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let site = wait_condition(&c, "docs-handbook", "Progressing", "True", "RouteConflict").await;
    let message = condition(&site, "Progressing").unwrap().2;
    assert!(
        message.contains("controlled by Deployment edge"),
        "{message}"
    );
    op.settled().await;
    assert_eq!(stored::<Ingress>(&c, "docs-handbook").await, Some(ingress));
    assert_eq!(
        stored::<HttpRoute>(&c, "docs-handbook").await,
        Some(route.clone())
    );
    op.stop().await;

    // Gateway mode: the Ingress is now the other mode's route: still not deleted.
    let op = operator(&c, config(RoutingMode::Gateway)).await;
    let message = eventually("a conflict on the HTTPRoute", WAIT, || async {
        let site = sites(&c).get("docs-handbook").await.ok()?;
        let (status, reason, message) = condition(&site, "Progressing")?;
        (status == "True" && reason == "RouteConflict" && message.contains("HTTPRoute"))
            .then_some(message)
    })
    .await;
    assert!(
        message.contains("controlled by Deployment edge"),
        "{message}"
    );
    op.settled().await;
    assert!(stored::<Ingress>(&c, "docs-handbook").await.is_some());
    assert_eq!(stored::<HttpRoute>(&c, "docs-handbook").await, Some(route));
    op.stop().await;
}

/// Never by the labels alone (SPEC 4.6): objects planted under a new Site's names with the
/// operator's labels and no controller, by someone else (who therefore manages their fields),
/// are conflicts, left as they are: the planted Secret's tokens are never the Site's, the
/// planted ConfigMap `<id>` (which the site containers read with `envFrom`) never gains an
/// owner reference nor reaches a pod. Once the planted objects are gone the Site converges with
/// tokens of its own, and keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_objects_with_the_sites_labels_are_never_adopted() {
    use base64::Engine as _;
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let labels = json!({"sites.ecmwf.int/id": "docs-handbook",
                        "app.kubernetes.io/managed-by": "sites-operator"});
    let chosen = base64::engine::general_purpose::STANDARD.encode("chosen-by-the-attacker");
    let secret = create::<Secret>(
        &c,
        json!({"metadata": {"name": "docs-handbook", "namespace": NS, "labels": labels},
               "data": {"api_token": chosen, "secret_key": chosen}}),
    )
    .await;
    let planted = create::<ConfigMap>(
        &c,
        json!({"metadata": {"name": "docs-handbook", "namespace": NS, "labels": labels},
               "data": {"LD_PRELOAD": "/tmp/evil.so"}}),
    )
    .await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let created = sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let message = conflict(
        &c,
        "docs-handbook",
        "Secret docs-handbook exists and is not controlled by any Site, and ",
    )
    .await;
    assert!(
        message.contains(" manages fields of it; it is left alone"),
        "{message}"
    );
    assert_eq!(stored::<Secret>(&c, "docs-handbook").await, Some(secret));
    assert_eq!(stored::<StatefulSet>(&c, "docs-handbook").await, None);

    // The Secret removed: the Site's own, with new tokens; the planted ConfigMap is next.
    api::<Secret>(&c)
        .delete("docs-handbook", &DeleteParams::default())
        .await
        .unwrap();
    // The Secret's conflict gone, the ConfigMap's reported.
    let message = eventually("the ConfigMap's conflict", WAIT, || async {
        let site = sites(&c).get("docs-handbook").await.ok()?;
        let (status, reason, message) = condition(&site, "Progressing")?;
        (status == "True" && reason == "ObjectConflict" && message.starts_with("ConfigMap "))
            .then_some(message)
    })
    .await;
    assert!(
        message
            .starts_with("ConfigMap docs-handbook exists and is not controlled by any Site, and "),
        "{message}"
    );
    let secret = api::<Secret>(&c).get("docs-handbook").await.unwrap();
    let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(Some(&owner.uid), created.metadata.uid.as_ref());
    let tokens = secret.data.unwrap();
    for key in ["api_token", "secret_key"] {
        assert_ne!(tokens[key].0, b"chosen-by-the-attacker", "{key}");
        assert!(!tokens[key].0.is_empty(), "{key}");
    }
    // Left as it was, and nothing after it in the LIFE-01 order (no pod reads it).
    assert_eq!(
        stored::<ConfigMap>(&c, "docs-handbook").await,
        Some(planted)
    );
    assert_eq!(stored::<StatefulSet>(&c, "docs-handbook").await, None);

    // The ConfigMap removed: the Site converges, keeping its tokens.
    api::<ConfigMap>(&c)
        .delete("docs-handbook", &DeleteParams::default())
        .await
        .unwrap();
    edit_and_settle(
        &c,
        &op,
        "docs-handbook",
        json!({"spec": {"description": "again"}}),
    )
    .await;
    wait_available(&c, "docs-handbook").await;
    let cm = api::<ConfigMap>(&c).get("docs-handbook").await.unwrap();
    assert!(!cm.data.unwrap_or_default().contains_key("LD_PRELOAD"));
    let again = api::<Secret>(&c).get("docs-handbook").await.unwrap();
    assert_eq!(again.data.unwrap(), tokens);
    op.stop().await;
}

/// An object the operator's cache has not seen (the watches of ConfigMaps and Services are
/// down: the watch and the relist fail) is read from the API server and judged before anything
/// is applied: a Service created by someone else under a new Site's name is reported as a
/// conflict and left as it is, never force-applied and taken over; the Site's ConfigMaps, read
/// and found absent, are created. With the watches back, no such read is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_the_cache_has_not_seen_is_judged_before_it_is_written() {
    const BLIND: [&str; 2] = ["configmaps", "services"];
    let c = Cluster::start(false).await;
    prepare(&c).await;
    // Watches end every 200 ms and are made again (the emulator sets a watch's end when it
    // starts); then the watches of three kinds, and their relists, fail.
    let faults = c.emulator().faults();
    faults.drop_watches_every(Some(Duration::from_millis(200)));
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    for resource in BLIND {
        blind(faults, resource);
    }
    eventually("the two watches to fail", WAIT, || async {
        (faults.injected(503) >= 2).then_some(())
    })
    .await;
    let planted = create::<Service>(
        &c,
        json!({"metadata": {"name": "docs-handbook", "namespace": NS},
               "spec": {"selector": {"app": "mine"}, "ports": [{"port": 80}]}}),
    )
    .await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let site = wait_condition(&c, "docs-handbook", "Progressing", "True", "ObjectConflict").await;
    assert_eq!(
        condition(&site, "Progressing").unwrap().2,
        "Service docs-handbook exists and is not controlled by any Site; it is left alone and retried in 60s"
    );
    assert_eq!(stored::<Service>(&c, "docs-handbook").await, Some(planted));
    assert!(
        stored::<ConfigMap>(&c, "docs-handbook-files")
            .await
            .is_some()
    );
    // GETs of a kind, whatever their answer (404: absent).
    let reads = |resource: &str| -> f64 {
        let labels = format!("resource=\"{resource}\",verb=\"get\"}}");
        sites_operator::metrics::encode(&op.registry)
            .lines()
            .filter(|l| l.starts_with("sites_api_requests_total{") && l.contains(&labels))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    for resource in BLIND {
        assert!(reads(resource) >= 1.0, "no read of {resource}");
    }
    faults.clear();
    faults.drop_watches_every(None);
    // The watches back and delivering again (an event of each kind came): a new Site's
    // objects are not read first.
    create::<ConfigMap>(&c, json!({"metadata": {"name": "marker", "namespace": NS}})).await;
    create::<Service>(
        &c,
        json!({"metadata": {"name": "marker", "namespace": NS}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    let caches = op.caches();
    eventually("the caches to follow their watches again", WAIT, || async {
        (caches.configmaps.live() && caches.services.live()).then_some(())
    })
    .await;
    let before: Vec<f64> = BLIND.iter().map(|r| reads(r)).collect();
    let other = example_named("other", "other");
    sites(&c)
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    wait_available(&c, "other").await;
    let after: Vec<f64> = BLIND.iter().map(|r| reads(r)).collect();
    assert_eq!(before, after, "reads of {BLIND:?} with live caches");
    op.stop().await;
}

/// A retained volume is bound to the Site's new claim only: with the claims' watch down, a
/// claim `<id>` someone else made is read and judged before any volume is re-bound (a
/// conflict, and the Released volume keeps its claim reference: no claim of that name can
/// take the deleted Site's data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_the_cache_has_not_seen_is_judged_before_a_volume_is_rebound() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let c = Cluster::start(false).await;
    prepare(&c).await;
    // Watches end every 200 ms and are made again (the emulator sets a watch's end when it
    // starts), so that the fault below reaches the claims' watch.
    let faults = c.emulator().faults();
    faults.drop_watches_every(Some(Duration::from_millis(200)));
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    let pvs: kube::Api<PersistentVolume> = kube::Api::all(c.client.clone());
    let volume = eventually("the volume labelled for the site", WAIT, || async {
        let claim = api::<PersistentVolumeClaim>(&c)
            .get("docs-handbook")
            .await
            .ok()?;
        let name = claim.spec?.volume_name?;
        let pv = pvs.get(&name).await.ok()?;
        (pv.metadata.labels?.get("sites.ecmwf.int/id")? == "docs-handbook").then_some(name)
    })
    .await;
    sites(&c)
        .delete("docs-handbook", &DeleteParams::default())
        .await
        .unwrap();
    let released = eventually("the volume released", WAIT, || async {
        let pv = pvs.get(&volume).await.ok()?;
        (pv.status.as_ref()?.phase.as_deref() == Some("Released")).then_some(pv)
    })
    .await;

    // The claims' watch and list fail from now on; someone else makes a claim `<id>`.
    blind(faults, "persistentvolumeclaims");
    let caches = op.caches();
    eventually("the claims' cache no longer live", WAIT, || async {
        (!caches.pvcs.live()).then_some(())
    })
    .await;
    create::<PersistentVolumeClaim>(
        &c,
        json!({"metadata": {"name": "docs-handbook", "namespace": NS},
               "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "none",
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    conflict(
        &c,
        "docs-handbook",
        "PersistentVolumeClaim docs-handbook exists and is not controlled",
    )
    .await;
    let pv = pvs.get(&volume).await.unwrap();
    assert_eq!(
        pv.spec.unwrap().claim_ref,
        released.spec.unwrap().claim_ref,
        "the volume's claim reference untouched"
    );
    faults.clear();
    faults.drop_watches_every(None);
    op.stop().await;
}

/// Server-side apply keeps keys other managers own: a key someone else adds to the Site's
/// ConfigMap `<id>` (which the site containers read whole with `envFrom`), such as
/// `HTTPS_PROXY`, is removed by the drift repair, and the Site's own keys stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_someone_else_adds_to_the_sites_configmap_is_removed() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    let own = api::<ConfigMap>(&c)
        .get("docs-handbook")
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    api::<ConfigMap>(&c)
        .patch(
            "docs-handbook",
            &kube::api::PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(json!({"data": {"HTTPS_PROXY": "http://proxy.evil:3128"}})),
        )
        .await
        .unwrap();
    let repaired = eventually("the foreign key removed", WAIT, || async {
        let data = api::<ConfigMap>(&c)
            .get("docs-handbook")
            .await
            .ok()?
            .data
            .unwrap_or_default();
        (!data.contains_key("HTTPS_PROXY")).then_some(data)
    })
    .await;
    assert_eq!(repaired, own);
    op.stop().await;
}

/// The Site's labels and a field manager named after the operator are anyone's to choose: a
/// ConfigMap `<id>` created before the Site with `--field-manager=sites-operator` (recorded as
/// an update) is a conflict, left as it is, and never reaches a pod. One applied under that
/// name (recorded as an apply, as the operator's own are) is adopted only as the rendering:
/// what it planted goes with the operator's first apply, a `binaryData` file too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_objects_are_not_adopted_whatever_their_writer_calls_itself() {
    use kube::api::{Patch, PatchParams};
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let labels = json!({"sites.ecmwf.int/id": "docs-handbook",
                        "app.kubernetes.io/managed-by": "sites-operator"});
    let planted: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "docs-handbook", "namespace": NS, "labels": labels},
        "data": {"LD_PRELOAD": "/tmp/evil.so"}}))
    .unwrap();
    let named = PostParams {
        field_manager: Some("sites-operator".into()),
        ..PostParams::default()
    };
    let planted =
        serde_json::to_value(api::<ConfigMap>(&c).create(&named, &planted).await.unwrap()).unwrap();
    api::<ConfigMap>(&c)
        .patch(
            "docs-handbook-files",
            &PatchParams::apply("sites-operator").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "docs-handbook-files", "namespace": NS, "labels": labels},
                "data": {"evil.conf": "location / { proxy_pass http://evil; }"},
                "binaryData": {"evil.so": "ZXZpbA=="}})),
        )
        .await
        .unwrap();
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    let message = conflict(
        &c,
        "docs-handbook",
        "ConfigMap docs-handbook exists and is not controlled by any Site, and sites-operator (Update) manages fields of it",
    )
    .await;
    assert!(message.contains("left alone"), "{message}");
    assert_eq!(
        stored::<ConfigMap>(&c, "docs-handbook").await,
        Some(planted)
    );
    assert_eq!(stored::<StatefulSet>(&c, "docs-handbook").await, None);

    // The update-planted ConfigMap removed: the apply-planted one is the Site's, as rendered.
    api::<ConfigMap>(&c)
        .delete("docs-handbook", &DeleteParams::default())
        .await
        .unwrap();
    edit_and_settle(
        &c,
        &op,
        "docs-handbook",
        json!({"spec": {"description": "again"}}),
    )
    .await;
    wait_available(&c, "docs-handbook").await;
    let files = api::<ConfigMap>(&c)
        .get("docs-handbook-files")
        .await
        .unwrap();
    assert!(
        !files.data.unwrap_or_default().contains_key("evil.conf"),
        "the planted key stayed"
    );
    assert!(
        files.binary_data.unwrap_or_default().is_empty(),
        "the planted file stayed"
    );
    op.stop().await;
}

/// No rendering has `binaryData`: a file someone adds to the Site's ConfigMap `<id>-files`
/// (mounted whole in the site pod) is removed by the drift repair, and stays removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_file_someone_else_adds_to_the_sites_files_is_removed() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    let own = api::<ConfigMap>(&c)
        .get("docs-handbook-files")
        .await
        .unwrap()
        .data;
    api::<ConfigMap>(&c)
        .patch(
            "docs-handbook-files",
            &kube::api::PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(json!({"binaryData": {"evil.so": "ZXZpbA=="}})),
        )
        .await
        .unwrap();
    eventually("the planted file removed", WAIT, || async {
        let cm = api::<ConfigMap>(&c).get("docs-handbook-files").await.ok()?;
        cm.binary_data.unwrap_or_default().is_empty().then_some(())
    })
    .await;
    op.settled().await;
    let cm = api::<ConfigMap>(&c)
        .get("docs-handbook-files")
        .await
        .unwrap();
    assert!(cm.binary_data.unwrap_or_default().is_empty());
    assert_eq!(cm.data, own);
    op.stop().await;
}

/// An edit made while no operator runs, keeping the hash annotation (a key added to the
/// ConfigMap `<id>` the site containers read whole, a value changed), is repaired when an
/// operator starts; the restart of converged Sites writes nothing
/// (`a_restarted_operator_writes_nothing_for_converged_sites`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_made_while_no_operator_runs_is_repaired_at_start() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    handbook_settled(&c, &op).await;
    let own = api::<ConfigMap>(&c).get("docs-handbook").await.unwrap();
    op.stop().await;
    let key = own.data.as_ref().unwrap().keys().next().unwrap().clone();
    api::<ConfigMap>(&c)
        .patch(
            "docs-handbook",
            &kube::api::PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(
                json!({"data": {"HTTPS_PROXY": "http://proxy.evil:3128", key.clone(): "edited"}}),
            ),
        )
        .await
        .unwrap();
    let edited = api::<ConfigMap>(&c).get("docs-handbook").await.unwrap();
    assert_eq!(
        edited.metadata.annotations, own.metadata.annotations,
        "hash kept"
    );
    // Fields outside the maps rendered whole: the replicas and the site container's image.
    let sts = api::<StatefulSet>(&c).get("docs-handbook").await.unwrap();
    let spec = |s: &StatefulSet| {
        let spec = s.spec.clone().unwrap();
        let image = spec.template.spec.unwrap().containers[0].image.clone();
        (spec.replicas, image)
    };
    let rendered = spec(&sts);
    api::<StatefulSet>(&c)
        .patch(
            "docs-handbook",
            &kube::api::PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &kube::api::Patch::<()>::Json(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/replicas", "value": 3},
                    {"op": "replace", "path": "/spec/template/spec/containers/0/image",
                     "value": "registry.evil/site:planted"},
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let edited = api::<StatefulSet>(&c).get("docs-handbook").await.unwrap();
    assert_eq!(
        edited.metadata.annotations, sts.metadata.annotations,
        "hash kept"
    );
    assert_ne!(spec(&edited), rendered);

    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let repaired = eventually("the offline edit repaired", WAIT, || async {
        let data = api::<ConfigMap>(&c).get("docs-handbook").await.ok()?.data?;
        (data == *own.data.as_ref()?).then_some(data)
    })
    .await;
    assert!(!repaired.contains_key("HTTPS_PROXY"));
    eventually("the offline StatefulSet edit repaired", WAIT, || async {
        let sts = api::<StatefulSet>(&c).get("docs-handbook").await.ok()?;
        (spec(&sts) == rendered).then_some(())
    })
    .await;
    // The pods the edit and its repair rolled are back and ready, and the operator has written
    // the status they map to.
    eventually("the site's pods rolled back and ready", WAIT, || async {
        let sts = api::<StatefulSet>(&c).get("docs-handbook").await.ok()?;
        let (spec, status) = (sts.spec?, sts.status?);
        (status.observed_generation == sts.metadata.generation
            && status.current_revision.is_some()
            && status.current_revision == status.update_revision
            && status.ready_replicas == spec.replicas)
            .then_some(())
    })
    .await;
    op.settled().await;
    op.stop().await;
    // Repaired for good: the repair took the fields back from the editor, so the next start
    // judges every object up to date and writes nothing.
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    op.settled_after(0.0).await;
    assert_eq!(op.writes(), 0.0, "{:?}", op.writes_by_resource());
    op.stop().await;
}

/// The apply holds to the object judged: with the ConfigMaps' watch down (the cache still
/// shows the Site's ConfigMap `<id>`), someone deletes it and creates their own of that name;
/// the Site's next write of it is refused by the API server (its uid is not the object's), the
/// object is judged again (a conflict) and left as it is: its owners and keys stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_replaced_while_the_cache_lags_is_not_taken_over() {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let faults = c.emulator().faults();
    faults.drop_watches_every(Some(Duration::from_millis(200)));
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    handbook_settled(&c, &op).await;
    blind(faults, "configmaps");
    let caches = op.caches();
    eventually("the ConfigMaps' cache no longer live", WAIT, || async {
        (!caches.configmaps.live()).then_some(())
    })
    .await;
    api::<ConfigMap>(&c)
        .delete("docs-handbook", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the ConfigMap gone", WAIT, || async {
        api::<ConfigMap>(&c)
            .get_opt("docs-handbook")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let theirs = create::<ConfigMap>(
        &c,
        json!({"metadata": {"name": "docs-handbook", "namespace": NS},
               "data": {"theirs": "1"}}),
    )
    .await;
    assert!(
        caches.configmaps.get("docs-handbook").is_some(),
        "the cache still shows the Site's"
    );
    // A change of the Site that its ConfigMap `<id>` renders (SITE_OWNER).
    merge(
        &c,
        "docs-handbook",
        json!({"spec": {"owner": "someone-else"}}),
    )
    .await;
    conflict(
        &c,
        "docs-handbook",
        "ConfigMap docs-handbook exists and is not controlled by any Site",
    )
    .await;
    assert_eq!(stored::<ConfigMap>(&c, "docs-handbook").await, Some(theirs));
    faults.clear();
    faults.drop_watches_every(None);
    op.stop().await;
}

/// `kubectl delete site --cascade=orphan` while the Sites' watch is behind the owned kinds'
/// (the API server's watch caches are per resource): the removal of the owner references reaches
/// the operator before the Site's deletion does, and its cache still shows the Site. The
/// orphans are not taken over for that Site (an owner reference written back names a Site on its
/// way out, and the garbage collector then deletes what the user meant to keep): the operator
/// reads the Site before a takeover, finds it gone, and writes nothing, not even a status or
/// an Event. Every orphan stays, without an owner, once the Sites' watch catches up too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_seen_before_their_sites_deletion_are_not_taken_over() {
    const SITES: &str = "sites.sites.ecmwf.int";
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    handbook_settled(&c, &op).await;
    let orphans = || async {
        let mut kept = Vec::new();
        for (kind, owners) in [
            ("ConfigMap", owners::<ConfigMap>(&c, "docs-handbook").await),
            ("Secret", owners::<Secret>(&c, "docs-handbook").await),
            ("Service", owners::<Service>(&c, "docs-handbook").await),
            ("Ingress", owners::<Ingress>(&c, "docs-handbook").await),
            (
                "StatefulSet",
                owners::<StatefulSet>(&c, "docs-handbook").await,
            ),
        ] {
            kept.push(format!("{kind}: {owners:?}"));
        }
        kept
    };
    let faults = c.emulator().faults();
    faults.hold_watches(SITES);
    let (reconciles, writes) = (op.reconciles(), op.writes_by_resource());
    sites(&c)
        .delete("docs-handbook", &DeleteParams::orphan())
        .await
        .unwrap();
    let site_gone = || async { sites(&c).get_opt("docs-handbook").await.unwrap().is_none() };
    assert!(site_gone().await, "no finalizer holds the Site");
    let unowned = [
        "ConfigMap: Some(0)",
        "Secret: Some(0)",
        "Service: Some(0)",
        "Ingress: Some(0)",
        "StatefulSet: Some(0)",
    ];
    // The orphaning queued the Site, which the operator's cache still shows.
    op.settled_after(reconciles).await;
    assert!(op.caches().sites.get("docs-handbook").is_some());
    assert_eq!(orphans().await, unowned);
    assert_eq!(op.writes_by_resource(), writes, "nothing written");

    faults.release_watches(SITES);
    let caches = op.caches();
    eventually("the Site gone from the cache", WAIT, || async {
        caches.sites.get("docs-handbook").is_none().then_some(())
    })
    .await;
    op.settled().await;
    assert_eq!(orphans().await, unowned);
    assert_eq!(op.writes_by_resource(), writes, "nothing written");
    op.stop().await;
}

/// A watch that stays behind longer than the operator waits for its own writes
/// (`own_writes::PENDING`, 10 s: the API server or etcd just restarted, its watch cache being
/// rebuilt): the ConfigMaps' watch delivers nothing while a new Site is created, and the Site is
/// reconciled again after the wait. The cache still has no ConfigMap the operator created; it
/// reads them from the API server instead of believing the cache and creating them again (a
/// second write of each and a second `Created` Event, which the chaos test on the real control
/// plane once counted). The watch released, nothing more is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_behind_for_longer_than_the_own_write_wait_causes_no_second_write() {
    const CONFIGMAPS: &str = "configmaps";
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let faults = c.emulator().faults();
    faults.hold_watches(CONFIGMAPS);
    handbook_settled(&c, &op).await;
    let configmap_writes = |op: &crate::support::operator::Operator| {
        op.writes_by_resource()
            .get("configmaps")
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(configmap_writes(&op), 2);
    assert!(op.caches().configmaps.get("docs-handbook").is_none());
    // The wait for the operator's own writes runs out: the passage of time is the scenario.
    tokio::time::sleep(sites_operator::controller::own_writes::PENDING + Duration::from_secs(1))
        .await;
    let reconciles = op.reconciles();
    merge(
        &c,
        "docs-handbook",
        json!({"metadata": {"labels": {"touch": "1"}}}),
    )
    .await;
    op.settled_after(reconciles).await;
    assert_eq!(configmap_writes(&op), 2, "{:?}", op.writes_by_resource());
    faults.release_watches(CONFIGMAPS);
    let caches = op.caches();
    eventually("the ConfigMaps' watch caught up", WAIT, || async {
        caches
            .configmaps
            .get("docs-handbook")
            .is_some()
            .then_some(())
    })
    .await;
    op.settled().await;
    assert_eq!(configmap_writes(&op), 2, "{:?}", op.writes_by_resource());
    // One `Created` Event, published once (a repeat would be counted in its series).
    let created: Vec<(Option<String>, i32)> = api::<Event>(&c)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Created"))
        .map(|e| (e.note, e.series.map_or(1, |s| s.count)))
        .collect();
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0].1, 1, "{created:?}");
    op.stop().await;
}

/// The example Site `docs-handbook` created, Available, and the operator idle.
async fn handbook_settled(c: &Cluster, op: &crate::support::operator::Operator) {
    sites(c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(c, "docs-handbook").await;
    op.settled().await;
}

/// How many owner references the object `name` has; None when it does not exist.
async fn owners<K>(c: &Cluster, name: &str) -> Option<usize>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let obj = api::<K>(c).get_opt(name).await.unwrap()?;
    Some(obj.meta().owner_references.as_ref().map_or(0, Vec::len))
}

/// A volume labelled for a site whose claim reference names no claim of the operator's
/// namespace (none at all: which namespace's Site it served is unknown) is never reused: a
/// new Site of that name gets a volume of its own, and the labelled one is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_of_unknown_namespace_is_never_reused() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let c = Cluster::start(false).await;
    prepare(&c).await;
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let pvs: kube::Api<PersistentVolume> = kube::Api::all(c.client.clone());
    let other: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "other-tenant", "labels": {"sites.ecmwf.int/id": "docs-handbook"}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/data/other"}}}))
    .unwrap();
    pvs.create(&PostParams::default(), &other).await.unwrap();
    // The phase the PersistentVolume controller gives an unbound volume (the emulator's
    // volume controller binds and releases, and leaves an unbound volume's phase alone).
    pvs.patch_status(
        "other-tenant",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"status": {"phase": "Available"}})),
    )
    .await
    .unwrap();
    let caches = op.caches();
    eventually("the volume Available and cached", WAIT, || async {
        let pv = pvs.get("other-tenant").await.ok()?;
        (pv.status?.phase.as_deref() == Some("Available")
            && caches.volumes.get("other-tenant").is_some())
        .then_some(())
    })
    .await;
    sites(&c)
        .create(&PostParams::default(), &example("site.yaml"))
        .await
        .unwrap();
    wait_available(&c, "docs-handbook").await;
    let claim = api::<PersistentVolumeClaim>(&c)
        .get("docs-handbook")
        .await
        .unwrap();
    assert_ne!(
        claim.spec.unwrap().volume_name.as_deref(),
        Some("other-tenant")
    );
    assert!(
        pvs.get("other-tenant")
            .await
            .unwrap()
            .spec
            .unwrap()
            .claim_ref
            .is_none()
    );
    op.stop().await;
}
