//! The emulator's API semantics through `kube::Client`: checklist A of docs/emulator.md.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

use crate::support::{Cluster, Phase, Site, SiteStatus, api_error, eventually, site, site_crd};

#[tokio::test]
async fn already_exists_and_not_found_statuses() {
    let c = Cluster::start(false).await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    sites
        .create(&PostParams::default(), &site("a"))
        .await
        .unwrap();
    let e = api_error(
        sites
            .create(&PostParams::default(), &site("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(e.message, "sites.sites.ecmwf.int \"a\" already exists");
    let e = api_error(sites.get("missing").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    assert_eq!(e.message, "sites.sites.ecmwf.int \"missing\" not found");

    // details name the plural resource; group is absent for core resources.
    let raw: serde_json::Value = raw_get(&c, "/api/v1/namespaces/default/configmaps/nope").await;
    assert_eq!(raw["code"], 404);
    assert_eq!(
        raw["details"],
        json!({"name": "nope", "kind": "configmaps"})
    );
    let raw: serde_json::Value = raw_get(
        &c,
        "/apis/sites.ecmwf.int/v1/namespaces/default/sites/missing",
    )
    .await;
    assert_eq!(
        raw["details"],
        json!({"name": "missing", "group": "sites.ecmwf.int", "kind": "sites"})
    );
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "nowhere");
    let e = api_error(
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.message, "namespaces \"nowhere\" not found");
}

/// GETs a path with a plain HTTP client and returns the JSON body whatever the status.
async fn raw_get(c: &Cluster, path: &str) -> serde_json::Value {
    let url = format!("{}{path}", c.emulator().url());
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("curl")
            .args(["-s", &url])
            .output()
            .expect("curl runs");
        serde_json::from_slice(&out.stdout).expect("JSON body")
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn stale_update_conflicts() {
    let c = Cluster::start(false).await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let created = sites
        .create(&PostParams::default(), &site("a"))
        .await
        .unwrap();
    let mut first = created.clone();
    first.spec.owner = "alice".into();
    sites
        .replace("a", &PostParams::default(), &first)
        .await
        .unwrap();
    let mut second = created.clone();
    second.spec.owner = "bob".into();
    let e = api_error(
        sites
            .replace("a", &PostParams::default(), &second)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("the object has been modified"),
        "{}",
        e.message
    );
    assert_eq!(sites.get("a").await.unwrap().spec.owner, "alice");
}

#[tokio::test]
async fn server_side_apply_noop_keeps_the_resource_version_and_omitted_fields_are_removed() {
    let c = Cluster::start(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let pp = PatchParams::apply("test-manager").force();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"one": "1", "two": "2"}});
    let first = cms.patch("a", &pp, &Patch::Apply(&cm)).await.unwrap();
    let again = cms.patch("a", &pp, &Patch::Apply(&cm)).await.unwrap();
    assert_eq!(
        first.metadata.resource_version, again.metadata.resource_version,
        "no-op apply must not write"
    );
    let events_before = c.emulator().app.store.lock().resource_version();
    let cm2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"one": "1"}});
    let pruned = cms.patch("a", &pp, &Patch::Apply(&cm2)).await.unwrap();
    let data = pruned.data.unwrap();
    assert_eq!(data.get("one").map(String::as_str), Some("1"));
    assert!(
        !data.contains_key("two"),
        "field omitted from the applied configuration is removed"
    );
    assert!(c.emulator().app.store.lock().resource_version() > events_before);
    // Another manager's field: conflict unless forced.
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"one": "changed"}});
    let e = api_error(
        cms.patch("a", &PatchParams::apply("other"), &Patch::Apply(&other))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    assert!(
        e.message.contains("conflict with \"test-manager\""),
        "{}",
        e.message
    );
    let forced = cms
        .patch(
            "a",
            &PatchParams::apply("other").force(),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["one"], "changed");
}

#[tokio::test]
async fn main_path_ignores_status_and_status_writes_keep_generation() {
    let c = Cluster::start(false).await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let mut s = site("a");
    s.status = Some(SiteStatus {
        observed_generation: Some(42),
        ..Default::default()
    });
    let created = sites.create(&PostParams::default(), &s).await.unwrap();
    assert!(created.status.is_none(), "create drops status");
    assert_eq!(created.metadata.generation, Some(1));

    let mut edited = created.clone();
    edited.status = Some(SiteStatus {
        observed_generation: Some(7),
        ..Default::default()
    });
    let replaced = sites
        .replace("a", &PostParams::default(), &edited)
        .await
        .unwrap();
    assert!(
        replaced.status.is_none(),
        "PUT on the main path keeps the stored status"
    );
    assert_eq!(
        replaced.metadata.generation,
        Some(1),
        "no spec change, no generation bump"
    );

    let status = json!({"status": {"observedGeneration": 1, "phase": "Pending"}});
    let with_status = sites
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(with_status.status.unwrap().observed_generation, Some(1));
    assert_eq!(
        with_status.metadata.generation,
        Some(1),
        "status writes keep the generation"
    );

    let spec = json!({"spec": {"owner": "alice"}});
    let bumped = sites
        .patch("a", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap();
    assert_eq!(
        bumped.metadata.generation,
        Some(2),
        "spec change bumps the generation"
    );
    assert_eq!(bumped.status.unwrap().observed_generation, Some(1));
}

#[tokio::test]
async fn crd_defaults_and_pruning_apply() {
    let c = Cluster::start(false).await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let raw = json!({
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "metadata": {"name": "a"},
        "spec": {"name": "n", "owner": "o", "type": "static", "unknown": 1, "configuration": {"space": "s"}}
    });
    let created: Site = sites
        .create(
            &PostParams::default(),
            &serde_json::from_value(raw.clone()).unwrap(),
        )
        .await
        .unwrap();
    assert!(created.spec.configuration.enabled);
    assert_eq!(created.spec.configuration.settings.replicas, 1);
    // Stored defaults are visible to a plain GET too.
    let stored = c
        .client
        .request::<serde_json::Value>(
            http::Request::get("/apis/sites.ecmwf.int/v1/namespaces/default/sites/a")
                .body(vec![])
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        stored["spec"]["configuration"]["settings"],
        json!({"replicas": 1})
    );
    assert_eq!(stored["spec"]["configuration"]["enabled"], json!(true));
    // Strict field validation names unknown fields.
    let mut strict = raw.clone();
    strict["metadata"]["name"] = json!("b");
    let e = api_error(
        c.client
            .request::<serde_json::Value>(
                http::Request::post(
                    "/apis/sites.ecmwf.int/v1/namespaces/default/sites?fieldValidation=Strict",
                )
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&strict).unwrap())
                .unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert!(
        e.message.contains("unknown field \"spec.unknown\""),
        "{}",
        e.message
    );
    // Schema validation: the API server's 422 Invalid.
    let mut invalid = raw.clone();
    invalid["metadata"]["name"] = json!("c");
    invalid["spec"]["configuration"]["settings"] = json!({"replicas": -1});
    let e = api_error(
        sites
            .create(
                &PostParams::default(),
                &serde_json::from_value(invalid).unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.starts_with(
            "Site.sites.ecmwf.int \"c\" is invalid: spec.configuration.settings.replicas"
        ),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn finalizers_block_deletion_and_background_gc_removes_children() {
    let c = Cluster::start(false).await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let mut s = site("owner");
    s.metadata.finalizers = Some(vec!["example.org/hold".into()]);
    let owner = sites.create(&PostParams::default(), &s).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let child: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "child", "ownerReferences": [{
            "apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "name": "owner",
            "uid": owner.metadata.uid.clone().unwrap(), "controller": true
        }]}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &child).await.unwrap();

    let deleted = sites
        .delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    let still = deleted
        .left()
        .expect("an object with finalizers is returned, not removed");
    assert!(still.metadata.deletion_timestamp.is_some());
    assert!(
        sites.get("owner").await.is_ok(),
        "finalizer keeps the object"
    );
    assert!(
        cms.get("child").await.is_ok(),
        "children stay while the owner exists"
    );

    // Removing the finalizer removes the owner; the collector then removes the child.
    let patch = json!({"metadata": {"finalizers": null}});
    sites
        .patch("owner", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert!(sites.get("owner").await.is_err());
    eventually("child collected", Duration::from_secs(10), || async {
        cms.get_opt("child").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn dry_run_persists_nothing() {
    let c = Cluster::start(false).await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let rv_before = c.emulator().app.store.lock().resource_version();
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let would_be = sites.create(&pp, &site("a")).await.unwrap();
    assert_eq!(would_be.metadata.name.as_deref(), Some("a"));
    assert!(sites.get_opt("a").await.unwrap().is_none());
    assert_eq!(c.emulator().app.store.lock().resource_version(), rv_before);
    let e = api_error(
        c.client
            .request::<serde_json::Value>(
                http::Request::post(
                    "/apis/sites.ecmwf.int/v1/namespaces/default/sites?dryRun=Sometimes",
                )
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&site("b")).unwrap())
                .unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
}

#[tokio::test]
async fn list_pagination_and_selectors() {
    let c = Cluster::start(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    for i in 0..7 {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("cm-{i}"), "labels": {"parity": if i % 2 == 0 { "even" } else { "odd" }}}
        }))
        .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let page = cms.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(page.items.len(), 3);
    let token = page.metadata.continue_.clone().expect("more pages");
    let rest = cms
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    // The seven plus the namespace's kube-root-ca.crt.
    assert_eq!(rest.items.len(), 5);
    assert!(rest.metadata.continue_.as_deref().unwrap_or("").is_empty());
    let even = cms
        .list(&ListParams::default().labels("parity=even"))
        .await
        .unwrap();
    assert_eq!(even.items.len(), 4);
    let not_odd = cms
        .list(&ListParams::default().labels("parity notin (odd)"))
        .await
        .unwrap();
    // notin also selects objects without the label: the namespace's kube-root-ca.crt.
    assert_eq!(not_odd.items.len(), 5);
    let one = cms
        .list(&ListParams::default().fields("metadata.name=cm-3"))
        .await
        .unwrap();
    assert_eq!(one.items.len(), 1);
    let e = api_error(
        cms.list(&ListParams::default().fields("data.x=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    // Cluster-wide list of a namespaced resource.
    let all: Api<ConfigMap> = Api::all(c.client.clone());
    // The seven plus the kube-root-ca.crt of each of the four namespaces.
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        11
    );
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    let names: Vec<_> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"default".to_string()) && names.contains(&"kube-system".to_string()));
}

#[tokio::test]
async fn watch_resumes_and_expired_versions_get_410() {
    let c = Cluster::start(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let a: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    let created = cms.create(&PostParams::default(), &a).await.unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    let patch = json!({"data": {"k": "v"}});
    cms.patch("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    let mut stream = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Modified(cm)) => assert_eq!(cm.data.unwrap()["k"], "v"),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    drop(stream);

    c.emulator().compact();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410 ERROR, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_runtime_watcher_relists_after_410() {
    use kube::runtime::watcher::{self, Event};
    let c = Cluster::start(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let mk =
        |n: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": n}})).unwrap();
    cms.create(&PostParams::default(), &mk("one"))
        .await
        .unwrap();
    // Short watches (no bookmark moves the watcher's position) that it keeps resuming.
    c.emulator()
        .faults()
        .drop_watches_every(Some(Duration::from_millis(50)));
    // Drive the watcher in the background; it reports the names it sees.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stream = watcher::watcher(cms.clone(), watcher::Config::default().timeout(1));
    tokio::spawn(async move {
        let mut stream = stream.boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(Event::Apply(cm) | Event::InitApply(cm)) = ev {
                let name = cm.metadata.name.unwrap_or_default();
                // Every namespace has the root CA ConfigMap; the test follows its own.
                if name != "kube-root-ca.crt" {
                    let _ = tx.send(name);
                }
            }
        }
    });
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, "one");
    let lists_before = c.emulator().stats().count("list", "configmaps");
    // Move the cluster past the watcher's position, then expire the history: resuming from its
    // resourceVersion gets 410 Gone and the watcher lists again.
    let other: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(c.client.clone(), "default");
    let secret = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    other.create(&PostParams::default(), &secret).await.unwrap();
    c.emulator().compact();
    eventually("re-list after 410", Duration::from_secs(15), || async {
        (c.emulator().stats().count("list", "configmaps") > lists_before).then_some(())
    })
    .await;
    cms.create(&PostParams::default(), &mk("two"))
        .await
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            if rx.recv().await.as_deref() == Some("two") {
                return;
            }
        }
    })
    .await;
    assert!(
        seen.is_ok(),
        "watcher saw the object created after the re-list"
    );
}

#[tokio::test]
async fn injected_faults_fail_requests_and_are_counted() {
    use sites_emulator::faults::FaultRule;
    let c = Cluster::start(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let mk =
        |n: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": n}})).unwrap();
    c.emulator().stats().reset();
    c.emulator().faults().add(FaultRule {
        verb: Some("create".into()),
        resource: Some("configmaps".into()),
        rate: 1.0,
        codes: vec![503],
        ..Default::default()
    });
    let e = api_error(
        cms.create(&PostParams::default(), &mk("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (503, "ServiceUnavailable"));
    assert!(
        cms.get_opt("a").await.unwrap().is_none(),
        "a failed create stores nothing"
    );
    // Reads are unaffected by a create rule.
    cms.list(&ListParams::default()).await.unwrap();
    c.emulator().faults().clear();
    cms.create(&PostParams::default(), &mk("a")).await.unwrap();

    // Forbidden for one verb, with the API server's wording.
    c.emulator().faults().add(FaultRule {
        verb: Some("delete".into()),
        rate: 1.0,
        codes: vec![403],
        ..Default::default()
    });
    let e = api_error(cms.delete("a", &DeleteParams::default()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(
        e.message.contains("cannot delete resource \"configmaps\""),
        "{}",
        e.message
    );
    c.emulator().faults().clear();

    // A partial rate fails some requests, deterministically for a seed.
    c.emulator().faults().seed(7);
    c.emulator().faults().add(FaultRule {
        verb: Some("get".into()),
        rate: 0.5,
        codes: vec![500, 429],
        ..Default::default()
    });
    let mut failures = 0;
    for _ in 0..200 {
        if cms.get("a").await.is_err() {
            failures += 1;
        }
    }
    assert!(
        (40..=160).contains(&failures),
        "{failures} of 200 failed at rate 0.5"
    );
    c.emulator().faults().clear();

    // The request counters saw every outcome, by verb, resource and code.
    let stats = c.emulator().stats().to_json();
    let count = |verb: &str, code: u64| -> u64 {
        stats
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["verb"] == verb && e["resource"] == "configmaps" && e["code"] == code)
            .map(|e| e["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(count("create", 503), 1);
    assert_eq!(count("create", 201), 1);
    assert_eq!(count("delete", 403), 1);
    assert_eq!(count("get", 500) + count("get", 429), failures);
    assert_eq!(c.emulator().stats().count("get", "configmaps"), 201);
    assert!(c.emulator().stats().writes() >= 3);
}

#[tokio::test]
async fn latency_and_dropped_watches() {
    use kube::runtime::watcher::{self, Event};
    use sites_emulator::faults::FaultRule;
    let c = Cluster::start(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    c.emulator().faults().add(FaultRule {
        verb: Some("list".into()),
        latency_ms: 200,
        ..Default::default()
    });
    let started = std::time::Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "latency is added"
    );
    c.emulator().faults().clear();

    // Watches end early; kube's watcher reconnects and still sees every object.
    c.emulator()
        .faults()
        .drop_watches_every(Some(Duration::from_millis(300)));
    let mut w = watcher::watcher(cms.clone(), watcher::Config::default()).boxed();
    let mk =
        |n: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": n}})).unwrap();
    let creator = {
        let cms = cms.clone();
        tokio::spawn(async move {
            for i in 0..5 {
                cms.create(&PostParams::default(), &mk(&format!("cm-{i}")))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        })
    };
    let mut seen = std::collections::BTreeSet::new();
    let result = tokio::time::timeout(Duration::from_secs(20), async {
        while seen.len() < 5 {
            if let Ok(Some(Event::Apply(cm) | Event::InitApply(cm))) = w.try_next().await {
                seen.insert(cm.metadata.name.unwrap());
            }
        }
    })
    .await;
    creator.await.unwrap();
    assert!(result.is_ok(), "saw {seen:?}");
    assert!(
        c.emulator().stats().count("watch", "configmaps") >= 2,
        "the watch was re-established"
    );
}

#[tokio::test]
async fn foreground_and_orphan_propagation() {
    let c = Cluster::start(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let owner_with_child = |owner: &str| {
        let cms = cms.clone();
        let owner = owner.to_string();
        async move {
            let o = cms
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": owner}})).unwrap(),
                )
                .await
                .unwrap();
            let child: ConfigMap = serde_json::from_value(json!({"metadata": {
                "name": format!("{owner}-child"),
                "finalizers": ["example.org/hold"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": o.metadata.uid.unwrap(), "blockOwnerDeletion": true}]
            }}))
            .unwrap();
            cms.create(&PostParams::default(), &child).await.unwrap();
        }
    };
    // Foreground: the owner waits, with the foregroundDeletion finalizer, until its blocking
    // dependent is gone.
    owner_with_child("fg").await;
    let deleted = cms
        .delete("fg", &DeleteParams::foreground())
        .await
        .unwrap()
        .left()
        .expect("owner stays");
    assert!(
        deleted
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    eventually(
        "child marked for deletion",
        Duration::from_secs(10),
        || async {
            cms.get("fg-child")
                .await
                .ok()?
                .metadata
                .deletion_timestamp
                .map(|_| ())
        },
    )
    .await;
    assert!(
        cms.get_opt("fg").await.unwrap().is_some(),
        "owner blocked by its dependent"
    );
    let release = json!({"metadata": {"finalizers": null}});
    cms.patch("fg-child", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    eventually("owner gone", Duration::from_secs(10), || async {
        cms.get_opt("fg").await.unwrap().is_none().then_some(())
    })
    .await;

    // Orphan: the dependent stays, without the reference.
    owner_with_child("or").await;
    cms.delete("or", &DeleteParams::orphan()).await.unwrap();
    assert!(cms.get_opt("or").await.unwrap().is_none());
    let orphan = cms.get("or-child").await.unwrap();
    assert!(
        orphan
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    assert!(orphan.metadata.deletion_timestamp.is_none());
}

#[tokio::test]
async fn namespace_and_crd_deletion_remove_their_contents() {
    let c = Cluster::start(false).await;
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "team");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap(),
    )
    .await
    .unwrap();
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "team");
    sites
        .create(&PostParams::default(), &site("s"))
        .await
        .unwrap();
    let ns = namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("terminating namespace");
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    eventually("namespace gone", Duration::from_secs(10), || async {
        namespaces
            .get_opt("team")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let all_cms: Api<ConfigMap> = Api::all(c.client.clone());
    assert!(
        all_cms
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|cm| cm.metadata.namespace.as_deref() != Some("team"))
    );

    // Deleting the CRD removes its custom resources and the resource itself.
    let default_sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    default_sites
        .create(&PostParams::default(), &site("x"))
        .await
        .unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(c.client.clone());
    crds.delete("sites.sites.ecmwf.int", &DeleteParams::default())
        .await
        .unwrap();
    let e = api_error(
        default_sites
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 404);
    crds.create(&PostParams::default(), &site_crd())
        .await
        .unwrap();
    assert!(
        default_sites
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "old Sites do not come back"
    );
}

#[tokio::test]
async fn label_selector_watches_see_objects_enter_and_leave() {
    let c = Cluster::start(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let created = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap(),
        )
        .await
        .unwrap();
    let rv = created.metadata.resource_version.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().labels("tier=web").timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let label = |v: Option<&str>| json!({"metadata": {"labels": {"tier": v}}});
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&label(Some("web"))),
    )
    .await
    .unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&label(Some("db"))),
    )
    .await
    .unwrap();
    let kinds: Vec<&str> = vec![
        match stream.try_next().await.unwrap() {
            Some(WatchEvent::Added(_)) => "ADDED",
            other => panic!("{other:?}"),
        },
        match stream.try_next().await.unwrap() {
            Some(WatchEvent::Deleted(_)) => "DELETED",
            other => panic!("{other:?}"),
        },
    ];
    assert_eq!(kinds, ["ADDED", "DELETED"]);
}

#[tokio::test]
async fn size_limits() {
    let c = Cluster::start(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    // Over etcd's limit but under the request limit: refused by storage.
    let big: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "big"}, "data": {"x": "a".repeat(2 * 1024 * 1024)}}),
    )
    .unwrap();
    let e = api_error(cms.create(&PostParams::default(), &big).await.unwrap_err());
    assert_eq!(e.code, 413);
    assert_eq!(e.message, "etcdserver: request is too large");
    // Over the request limit.
    let huge: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "huge"}, "data": {"x": "a".repeat(4 * 1024 * 1024)}}),
    )
    .unwrap();
    let e = api_error(cms.create(&PostParams::default(), &huge).await.unwrap_err());
    assert_eq!(e.code, 413);
    assert_eq!(e.message, "Request entity too large: limit is 3145728");
    // Annotations over 256 KiB in total.
    let annotated: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "ann", "annotations": {"a": "b".repeat(300 * 1024)}}}),
    )
    .unwrap();
    let e = api_error(
        cms.create(&PostParams::default(), &annotated)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.contains("metadata.annotations: Too long"),
        "{}",
        e.message
    );
    // Names and labels.
    let bad_name: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "Bad_Name"}})).unwrap();
    let e = api_error(
        cms.create(&PostParams::default(), &bad_name)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains("metadata.name: Invalid value: \"Bad_Name\""),
        "{}",
        e.message
    );
    let bad_label: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "ok", "labels": {"a": "-bad-"}}}))
            .unwrap();
    assert_eq!(
        api_error(
            cms.create(&PostParams::default(), &bad_label)
                .await
                .unwrap_err()
        )
        .code,
        422
    );
}

#[tokio::test]
async fn server_side_apply_of_status_is_separate_from_the_main_resource() {
    let c = Cluster::start(false).await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let pp = PatchParams::apply("sites-operator").force();
    let spec = json!({
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "metadata": {"name": "a", "labels": {"team": "docs"}},
        "spec": {"name": "handbook", "owner": "jdoe", "type": "static", "configuration": {"space": "docs"}}
    });
    sites.patch("a", &pp, &Patch::Apply(&spec)).await.unwrap();
    let status = json!({"apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "status": {"phase": "Running", "observedGeneration": 1}});
    let after = sites
        .patch_status("a", &pp, &Patch::Apply(&status))
        .await
        .unwrap();
    assert_eq!(after.status.as_ref().unwrap().phase, Some(Phase::Running));
    // The status apply removed nothing the same manager applied on the main resource.
    assert_eq!(after.metadata.labels.unwrap()["team"], "docs");
    assert_eq!(after.spec.owner, "jdoe");
    // A main-path apply does not touch the status.
    let spec2 = json!({
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "metadata": {"name": "a", "labels": {"team": "docs"}},
        "spec": {"name": "handbook", "owner": "alice", "type": "static", "configuration": {"space": "docs"}},
        "status": {"phase": "Failed"}
    });
    let main = sites.patch("a", &pp, &Patch::Apply(&spec2)).await.unwrap();
    assert_eq!(main.spec.owner, "alice");
    assert_eq!(main.status.unwrap().phase, Some(Phase::Running));
    // Re-applying the same status is a no-op.
    let rv = sites.get("a").await.unwrap().metadata.resource_version;
    let again = sites
        .patch_status("a", &pp, &Patch::Apply(&status))
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, rv);
}
