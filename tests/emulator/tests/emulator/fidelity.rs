//! Wire fidelity: content negotiation (metadata-only answers, 406), Events as one store behind
//! two APIs, CRD status conditions, aggregated discovery, member order and protobuf bodies —
//! through `kube::Client`, curl and the real kubectl.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::support::{Cluster, Site, eventually, on_both, site};

/// A raw request with curl: (HTTP status, Content-Type, body).
pub(crate) async fn curl(
    c: &Cluster,
    method: &str,
    path: &str,
    headers: &[&str],
    body: Option<&str>,
) -> (u16, String, String) {
    let url = format!("{}{path}", c.url());
    let mut args: Vec<String> = c.curl_auth();
    // The API server indents its JSON for clients whose User-Agent starts with curl, Wget or
    // Mozilla/5.0 (apiserver endpoints/handlers/negotiation `isPrettyPrint`); the emulator
    // never does. Another agent gets the compact JSON every other client sees.
    args.extend::<[String; 9]>([
        "-A".into(),
        "sites-emulator-tests".into(),
        "-s".into(),
        "-X".into(),
        method.into(),
        "-o".into(),
        "-".into(),
        "-w".into(),
        "\n%{http_code} %{content_type}".into(),
    ]);
    for h in headers {
        args.push("-H".into());
        args.push((*h).into());
    }
    if let Some(b) = body {
        args.push("--data-binary".into());
        args.push(b.into());
    }
    args.push(url);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(&args)
            .output()
            .expect("curl runs")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, tail) = text.rsplit_once('\n').unwrap();
    let (code, ct) = tail.split_once(' ').unwrap_or((tail, ""));
    (code.parse().unwrap(), ct.to_string(), body.to_string())
}

const META: &str = "Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const META_LIST: &str = "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

on_both! {
async fn metadata_only_get_list_patch_and_watch(c: Cluster) {
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    sites
        .create(&PostParams::default(), &site("a"))
        .await
        .unwrap();

    // get_metadata / list_metadata / patch_metadata: only the metadata comes back.
    let m: PartialObjectMeta<Site> = sites.get_metadata("a").await.unwrap();
    assert_eq!(m.name_any(), "a");
    assert!(m.metadata.uid.is_some());
    let list = sites.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());
    let patched = sites
        .patch_metadata(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.labels().get("tier").map(String::as_str),
        Some("gold")
    );
    let stored = sites.get("a").await.unwrap();
    assert_eq!(
        stored.labels().get("tier").map(String::as_str),
        Some("gold")
    );

    // The wire forms.
    let (code, ct, body) = curl(
        &c,
        "GET",
        "/apis/sites.ecmwf.int/v1/namespaces/default/sites/a",
        &[META],
        None,
    )
    .await;
    assert_eq!((code, ct.as_str()), (200, "application/json"));
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadata");
    assert_eq!(v["apiVersion"], "meta.k8s.io/v1");
    assert!(v.get("spec").is_none(), "{v}");
    assert!(body.starts_with(
        r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#
    ));
    let (_, _, body) = curl(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[META_LIST],
        None,
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadataList");
    assert!(v["metadata"]["resourceVersion"].is_string());
    // A list asked for as a single PartialObjectMetadata, or a transformation not served: 406.
    let (code, _, body) = curl(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[META],
        None,
    )
    .await;
    assert_eq!(code, 406, "{body}");
    let (code, _, body) = curl(
        &c,
        "GET",
        "/api/v1/namespaces",
        &["Accept: application/json;as=Unknown;g=meta.k8s.io;v=v1"],
        None,
    )
    .await;
    assert_eq!(code, 406);
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "NotAcceptable");
    // The API server also lists protobuf, which it writes for built-in kinds; the emulator
    // writes no protobuf (docs/emulator.md, known differences).
    let accepted = if c.is_real() {
        "application/json, application/yaml, application/vnd.kubernetes.protobuf"
    } else {
        "application/json, application/yaml"
    };
    assert_eq!(
        status["message"],
        format!("only the following media types are accepted: {accepted}")
    );
    // First acceptable clause wins; */* is plain JSON.
    let (code, _, body) = curl(
        &c,
        "GET",
        "/api/v1/namespaces/default",
        &["Accept: application/json;as=Unknown;g=meta.k8s.io;v=v1, */*;q=0.8"],
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        body.starts_with(r#"{"kind":"Namespace","apiVersion":"v1","metadata""#),
        "{body}"
    );

    // metadata_watcher (kube 4.2 deprecates it for a watcher over Api<PartialObjectMeta<K>>,
    // which sends the same requests): the operator's watch of metadata only.
    #[allow(deprecated)]
    let stream = kube::runtime::metadata_watcher(sites.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let sites2 = sites.clone();
    let creator = tokio::spawn(async move {
        sites2
            .create(&PostParams::default(), &site("b"))
            .await
            .unwrap();
    });
    let metas: Api<PartialObjectMeta<Site>> = Api::namespaced(c.client.clone(), "default");
    let via_api = watcher(metas, watcher::Config::default())
        .applied_objects()
        .boxed();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        let mut stream = stream;
        let mut names = Vec::new();
        while let Some(m) = stream.try_next().await.unwrap() {
            names.push(m.name_any());
            if names.iter().any(|n| n == "b") {
                break;
            }
        }
        names
    })
    .await
    .expect("the metadata watch sees the new Site");
    creator.await.unwrap();
    assert!(
        seen.contains(&"a".to_string()) && seen.contains(&"b".to_string()),
        "{seen:?}"
    );
    let names: Vec<String> = tokio::time::timeout(
        Duration::from_secs(10),
        via_api.take(2).map_ok(|m| m.name_any()).try_collect(),
    )
    .await
    .expect("the metadata watch lists")
    .unwrap();
    assert_eq!(names.len(), 2, "{names:?}");
}
}

on_both! {
async fn events_are_one_store_behind_two_apis(c: Cluster) {
    c.kubectl_ok(&["create", "namespace", "ev"]);
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "ev");
    let s = sites
        .create(&PostParams::default(), &site("handbook"))
        .await
        .unwrap();
    let recorder = Recorder::new(
        c.client.clone(),
        Reporter {
            controller: "sites-operator".into(),
            instance: Some("sites-operator-0".into()),
        },
    );
    let reference = s.object_ref(&());
    let event = Event {
        type_: EventType::Normal,
        reason: "Provisioned".into(),
        note: Some("site handbook is ready".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    // A second identical event becomes a series (a merge patch through events.k8s.io).
    recorder.publish(&event, &reference).await.unwrap();

    // The core v1 view of what the Recorder wrote through events.k8s.io/v1.
    let core: Api<CoreEvent> = Api::namespaced(c.client.clone(), "ev");
    let list = core.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1, "{list:?}");
    let e = &list.items[0];
    assert_eq!(e.message.as_deref(), Some("site handbook is ready"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("Site"));
    assert_eq!(e.involved_object.name.as_deref(), Some("handbook"));
    assert_eq!(e.involved_object.uid, s.metadata.uid);
    assert_eq!(e.reporting_component.as_deref(), Some("sites-operator"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
    // Field selectors on involvedObject, as kubectl describe sends them.
    let selected = core
        .list(&ListParams::default().fields(&format!(
            "involvedObject.name=handbook,involvedObject.namespace=ev,involvedObject.kind=Site,involvedObject.uid={}",
            s.uid().unwrap()
        )))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);

    // Created through core v1 with a count, read through events.k8s.io/v1.
    let legacy: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "legacy"},
        "involvedObject": {"kind": "Site", "name": "handbook", "namespace": "ev", "apiVersion": "sites.ecmwf.int/v1", "uid": s.uid()},
        "reason": "Scaled", "message": "scaled to 2", "count": 3, "type": "Normal",
        "source": {"component": "old-controller"},
        "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:05:00Z",
    }))
    .unwrap();
    core.create(&PostParams::default(), &legacy).await.unwrap();
    let v1: Api<EventsV1Event> = Api::namespaced(c.client.clone(), "ev");
    let read = v1.get("legacy").await.unwrap();
    assert_eq!(read.note.as_deref(), Some("scaled to 2"));
    assert_eq!(read.deprecated_count, Some(3));
    assert_eq!(
        read.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("handbook")
    );
    assert_eq!(
        read.deprecated_source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("old-controller")
    );
    // Watched through events.k8s.io: the objects are in its form.
    let mut w = v1
        .watch(&kube::api::WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    let mut notes = Vec::new();
    while notes.len() < 2 {
        match w.try_next().await.unwrap() {
            Some(kube::api::WatchEvent::Added(e)) => notes.push(e.note.unwrap_or_default()),
            Some(_) => {}
            None => break,
        }
    }
    notes.sort();
    assert_eq!(notes, ["scaled to 2", "site handbook is ready"]);
    // events.k8s.io/v1 creation is validated strictly (eventTime is required).
    let bad: EventsV1Event = serde_json::from_value(json!({
        "metadata": {"name": "bad"}, "reason": "X", "action": "Y", "type": "Normal",
        "reportingController": "c", "reportingInstance": "i",
        "regarding": {"kind": "Site", "name": "handbook", "namespace": "ev"},
    }))
    .unwrap();
    let err = v1.create(&PostParams::default(), &bad).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected a Status")
    };
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("eventTime: Required value"),
        "{}",
        status.message
    );

    // kubectl: describe lists the Events of the Site; get events shows them.
    let described = c.kubectl_ok(&["-n", "ev", "describe", "site", "handbook"]);
    let events = described
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section:\n{described}"));
    assert!(events.contains("Provisioned"), "{described}");
    assert!(events.contains("site handbook is ready"), "{described}");
    assert!(events.contains("sites-operator"), "{described}");
    assert!(events.contains("Scaled"), "{described}");
    let got = c.kubectl_ok(&["-n", "ev", "get", "events"]);
    let header = got.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("LAST SEEN") && header.contains("REASON") && header.contains("MESSAGE"),
        "{got}"
    );
    assert!(got.contains("site/handbook"), "{got}");
    assert!(got.contains("site handbook is ready"), "{got}");

    // A cluster-scoped object's events go to `default`.
    let ns_ref = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Namespace".into()),
        name: Some("ev".into()),
        ..Default::default()
    };
    if c.is_real() {
        // Kubernetes 1.20 keeps an Event with an eventTime about a cluster-scoped object in
        // kube-system only (pkg/apis/core/validation/events.go:143 of 1.20.2); later versions
        // accept `default` too, where kube's Recorder writes it.
        let status = recorder
            .publish(&event, &ns_ref)
            .await
            .map_err(crate::support::api_error)
            .unwrap_err();
        assert_eq!(status.code, 422, "{status:?}");
        assert!(
            status
                .message
                .ends_with("involvedObject.namespace: Invalid value: \"\": does not match event.namespace"),
            "{status:?}"
        );
        return;
    }
    recorder.publish(&event, &ns_ref).await.unwrap();
    let in_default: Api<CoreEvent> = Api::namespaced(c.client.clone(), "default");
    eventually(
        "the namespace event in default",
        Duration::from_secs(5),
        || {
            let in_default = in_default.clone();
            async move {
                let l = in_default.list(&ListParams::default()).await.ok()?;
                l.items
                    .iter()
                    .any(|e| e.involved_object.kind.as_deref() == Some("Namespace"))
                    .then_some(())
            }
        },
    )
    .await;
}
}

on_both! {
async fn crds_report_names_accepted_and_established(c: Cluster) {
    let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
    let crd = crds.get("sites.sites.ecmwf.int").await.unwrap();
    let status = crd.status.unwrap();
    let conditions = status.conditions.unwrap();
    let by_type = |t: &str| conditions.iter().find(|c| c.type_ == t).unwrap().clone();
    let names = by_type("NamesAccepted");
    assert_eq!(
        (names.status.as_str(), names.reason.as_deref()),
        ("True", Some("NoConflicts"))
    );
    assert_eq!(names.message.as_deref(), Some("no conflicts found"));
    let est = by_type("Established");
    assert_eq!(
        (
            est.status.as_str(),
            est.reason.as_deref(),
            est.message.as_deref()
        ),
        (
            "True",
            Some("InitialNamesAccepted"),
            Some("the initial names have been accepted")
        )
    );
    let accepted = status.accepted_names.unwrap();
    assert_eq!(accepted.plural, "sites");
    assert_eq!(accepted.singular.as_deref(), Some("site"));
    assert_eq!(accepted.list_kind.as_deref(), Some("SiteList"));
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));

    await_condition(
        crds.clone(),
        "sites.sites.ecmwf.int",
        conditions::is_crd_established(),
    )
    .await
    .unwrap();
    let out = c.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=10s",
        "crd/sites.sites.ecmwf.int",
    ]);
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/sites.sites.ecmwf.int condition met"
    );

    // A second CRD whose kind (and so listKind) is taken in the group: NamesAccepted False
    // naming the last conflict the naming controller found, and not served.
    let mut other = crate::support::site_crd();
    other.metadata.name = Some("othersites.sites.ecmwf.int".into());
    other.spec.names.plural = "othersites".into();
    other.spec.names.singular = Some("othersite".into());
    other.spec.names.short_names = None;
    let created = crds.create(&PostParams::default(), &other).await.unwrap();
    let conditions = if c.is_real() {
        // The API server's naming and establishing controllers set the conditions after the
        // create has answered (its answer has none); the emulator's answer carries them.
        eventually("the conditions of the second CRD", Duration::from_secs(10), || {
            let crds = crds.clone();
            async move {
                let crd = crds.get("othersites.sites.ecmwf.int").await.ok()?;
                let conditions = crd.status?.conditions?;
                let est = conditions.iter().find(|c| c.type_ == "Established")?;
                (est.reason.as_deref() == Some("NotAccepted")).then_some(conditions)
            }
        })
        .await
    } else {
        created.status.unwrap().conditions.unwrap()
    };
    let names = conditions
        .iter()
        .find(|c| c.type_ == "NamesAccepted")
        .unwrap();
    assert_eq!(
        (
            names.status.as_str(),
            names.reason.as_deref(),
            names.message.as_deref()
        ),
        (
            "False",
            Some("ListKindConflict"),
            Some("\"SiteList\" is already in use")
        )
    );
    let est = conditions
        .iter()
        .find(|c| c.type_ == "Established")
        .unwrap();
    assert_eq!(
        (est.status.as_str(), est.reason.as_deref()),
        ("False", Some("NotAccepted"))
    );
    let (code, _, _) = curl(&c, "GET", "/apis/sites.ecmwf.int/v1/othersites", &[], None).await;
    assert_eq!(code, 404);
}
}

const AGGREGATED: &str = "Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

on_both! {
async fn aggregated_discovery_and_legacy_discovery(c: Cluster) {
    if c.is_real() {
        // Aggregated discovery is Kubernetes 1.26+ (v2 1.30): 1.20 answers the legacy form
        // whatever is asked for (1.20.2's staging/src/k8s.io/apiserver/pkg/endpoints/discovery/
        // has no aggregated handler), and kubectl falls back to it.
        let (code, ct, body) = curl(&c, "GET", "/apis", &[AGGREGATED], None).await;
        assert_eq!((code, ct.as_str()), (200, "application/json"));
        let legacy: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(legacy["kind"], "APIGroupList");
        c.kubectl_ok(&["get", "deploy", "-A"]);
        assert!(c.kubectl_ok(&["api-resources"]).contains("sites"));
        return;
    }
    let (code, ct, body) = curl(&c, "GET", "/apis", &[AGGREGATED], None).await;
    assert_eq!(code, 200);
    assert_eq!(
        ct,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
    let group = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "sites.ecmwf.int")
        .expect("the Site group");
    let v1 = &group["versions"][0];
    assert_eq!(v1["version"], "v1");
    assert_eq!(v1["freshness"], "Current");
    let res = &v1["resources"][0];
    assert_eq!(res["resource"], "sites");
    assert_eq!(
        res["responseKind"],
        json!({"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"})
    );
    assert_eq!(res["scope"], "Namespaced");
    assert_eq!(res["singularResource"], "site");
    assert_eq!(res["subresources"][0]["subresource"], "status");
    assert!(res["verbs"].as_array().unwrap().contains(&json!("watch")));
    // The v2beta1 form when only that is asked for; the core group on /api.
    let (_, ct, body) = curl(
        &c,
        "GET",
        "/api",
        &["Accept: application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"],
        None,
    )
    .await;
    assert!(ct.contains("v=v2beta1"), "{ct}");
    let core: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    let pods = core["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "pods")
        .unwrap()
        .clone();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["categories"], json!(["all"]));
    // Legacy answers for clients that ask for plain JSON; 406 for an unserved transformation.
    let (_, _, body) = curl(&c, "GET", "/apis", &["Accept: application/json"], None).await;
    let legacy: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(legacy["kind"], "APIGroupList");
    let (code, _, body) = curl(
        &c,
        "GET",
        "/apis",
        &["Accept: application/json;as=Table;g=meta.k8s.io;v=v1"],
        None,
    )
    .await;
    assert_eq!(code, 406, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["reason"],
        "NotAcceptable"
    );
    // kubectl (which asks for the aggregated form first) resolves resources and short names.
    c.kubectl_ok(&["get", "deploy", "-A"]);
    assert!(c.kubectl_ok(&["api-resources"]).contains("sites"));
}
}

on_both! {
/// Error `Status` bodies come with their members in the API server's order (Go's field order of
/// `metav1.Status`, `StatusDetails`, `StatusCause`), byte for byte for a 404.
async fn status_bodies_keep_the_api_servers_member_order(c: Cluster) {
    let (code, _, body) = curl(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps/nope",
        &[],
        None,
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        body,
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"nope\" not found","reason":"NotFound","details":{"name":"nope","kind":"configmaps"},"code":404}"#,
            "\n"
        )
    );
    let (code, _, body) = curl(
        &c,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &["Content-Type: application/json"],
        Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}"#),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let at = |member: &str| {
        body.find(member)
            .unwrap_or_else(|| panic!("{member} in {body}"))
    };
    let order = [
        r#""kind":"Status""#,
        r#""status":"Failure""#,
        r#""message":"ConfigMap"#,
        r#""reason":"Invalid""#,
        r#""details":{"name":"Bad_Name","kind":"ConfigMap","causes":[{"reason":"FieldValueInvalid","message":"#,
        r#""field":"metadata.name"}]},"code":422}"#,
    ];
    let positions: Vec<usize> = order.iter().map(|m| at(m)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{body}");
}
}

on_both! {
async fn responses_put_type_meta_first(c: Cluster) {
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {"a": "b"}})).unwrap(),
    )
    .await
    .unwrap();
    let (_, _, body) = curl(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps/x",
        &[],
        None,
    )
    .await;
    assert!(
        body.starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#),
        "{body}"
    );
    let (_, _, body) = curl(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[],
        None,
    )
    .await;
    assert!(
        body.starts_with(r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"#),
        "{body}"
    );
    let (_, _, body) = curl(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1",
        &[],
        None,
    )
    .await;
    assert!(
        body.starts_with(
            r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":"#
        ),
        "{body}"
    );
}
}

on_both! {
async fn kubectl_typed_generators_send_protobuf_bodies(c: Cluster) {
    let ok = |args: &[&str]| c.kubectl_ok(args).trim().to_string();
    assert_eq!(
        ok(&["create", "service", "clusterip", "web", "--tcp=80:8080"]),
        "service/web created"
    );
    assert_eq!(
        ok(&[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.spec.type} {.spec.ports[0].port} {.spec.ports[0].targetPort} {.spec.ports[0].name} {.spec.selector.app}"
        ]),
        "ClusterIP 80 8080 80-8080 web"
    );
    assert_eq!(
        ok(&["create", "service", "nodeport", "np", "--tcp=5678:8080"]),
        "service/np created"
    );
    assert_eq!(
        ok(&[
            "create",
            "service",
            "externalname",
            "ext",
            "--external-name=example.org"
        ]),
        "service/ext created"
    );
    assert_eq!(
        ok(&[
            "create",
            "deployment",
            "app",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=80"
        ]),
        "deployment.apps/app created"
    );
    assert_eq!(
        ok(&[
            "get",
            "deployment",
            "app",
            "-o",
            "jsonpath={.spec.replicas} {.spec.selector.matchLabels.app} {.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].ports[0].containerPort}"
        ]),
        "2 app nginx:1.27 80"
    );
    assert_eq!(
        ok(&[
            "create",
            "deployment",
            "none",
            "--image=nginx",
            "--replicas=0"
        ]),
        "deployment.apps/none created"
    );
    assert_eq!(
        ok(&[
            "get",
            "deployment",
            "none",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "0",
        "a sent zero replicas is kept"
    );
    assert_eq!(
        ok(&[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods"
        ]),
        "role.rbac.authorization.k8s.io/reader created"
    );
    assert_eq!(
        ok(&["get", "role", "reader", "-o", "jsonpath={.rules[0].verbs}"]),
        r#"["get","list"]"#
    );
    assert_eq!(
        ok(&[
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--user=jdoe"
        ]),
        "rolebinding.rbac.authorization.k8s.io/reader created"
    );
    assert_eq!(
        ok(&[
            "create",
            "clusterrole",
            "watcher",
            "--verb=watch",
            "--resource=sites"
        ]),
        "clusterrole.rbac.authorization.k8s.io/watcher created"
    );
    assert_eq!(
        ok(&[
            "create",
            "clusterrolebinding",
            "watcher",
            "--clusterrole=watcher",
            "--group=ops"
        ]),
        "clusterrolebinding.rbac.authorization.k8s.io/watcher created"
    );
    assert_eq!(
        ok(&[
            "create",
            "priorityclass",
            "high",
            "--value=1000",
            "--description=important"
        ]),
        "priorityclass.scheduling.k8s.io/high created"
    );
    assert_eq!(
        ok(&[
            "get",
            "priorityclass",
            "high",
            "-o",
            "jsonpath={.value} {.description}"
        ]),
        "1000 important"
    );
    assert_eq!(
        ok(&[
            "create",
            "ingress",
            "site",
            "--rule=docs.example.org/*=web:80"
        ]),
        "ingress.networking.k8s.io/site created"
    );
    assert_eq!(
        ok(&[
            "get",
            "ingress",
            "site",
            "-o",
            "jsonpath={.spec.rules[0].host} {.spec.rules[0].http.paths[0].backend.service.port.number}"
        ]),
        "docs.example.org 80"
    );
}
}

on_both! {
/// Field selectors per kind, as the API server registers them: nodes by `spec.unschedulable`,
/// jobs by `status.successful`, replica sets by `status.replicas`, namespaces by `status.phase`,
/// pods by `status.nominatedNodeName`; an unset field selects as Go's zero value. A field a kind
/// does not register is a 400.
async fn field_selectors_are_those_each_kind_registers(c: Cluster) {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
    async fn select<K>(api: &Api<K>, selector: &str) -> Vec<String>
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let mut names: Vec<String> = api
            .list(&ListParams::default().fields(selector))
            .await
            .unwrap_or_else(|e| panic!("{selector}: {e}"))
            .items
            .iter()
            .map(|o| o.name_any())
            .collect();
        names.sort();
        names
    }
    let nodes: Api<Node> = Api::all(c.client.clone());
    for (name, spec) in [
        ("cordoned", json!({"unschedulable": true})),
        ("open", json!({})),
    ] {
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap(),
            )
            .await
            .unwrap();
    }
    assert_eq!(
        select(&nodes, "spec.unschedulable=true").await,
        ["cordoned"]
    );
    let schedulable = select(&nodes, "spec.unschedulable=false").await;
    assert!(schedulable.contains(&"open".to_string()), "{schedulable:?}");
    assert!(
        !schedulable.contains(&"cordoned".to_string()),
        "{schedulable:?}"
    );

    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    let job = json!({"metadata": {"name": "once"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}});
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(job).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(select(&jobs, "status.successful=0").await, ["once"]);
    jobs.patch_status(
        "once",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"succeeded": 1}})),
    )
    .await
    .unwrap();
    assert_eq!(select(&jobs, "status.successful=1").await, ["once"]);
    assert!(select(&jobs, "status.successful=0").await.is_empty());

    let sets: Api<ReplicaSet> = Api::namespaced(c.client.clone(), "default");
    let set = json!({"metadata": {"name": "web"}, "spec": {"replicas": 0,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    sets.create(
        &PostParams::default(),
        &serde_json::from_value(set).unwrap(),
    )
    .await
    .unwrap();
    if c.is_real() {
        // Kubernetes 1.20 registers no field selector for apps/v1 ReplicaSets
        // (pkg/apis/apps/v1/conversion.go of 1.20.2 adds none; extensions/v1beta1, which had
        // `status.replicas`, is no longer served).
        let status = sets
            .list(&ListParams::default().fields("status.replicas=0"))
            .await
            .map_err(crate::support::api_error)
            .unwrap_err();
        assert_eq!(status.code, 400, "{status:?}");
    } else {
        assert_eq!(select(&sets, "status.replicas=0").await, ["web"]);
        assert!(select(&sets, "status.replicas=1").await.is_empty());
    }

    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    assert!(
        select(&namespaces, "status.phase=Active")
            .await
            .contains(&"default".to_string())
    );

    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap();
    // On a real control plane the Job controller has made a pod for the Job `once`.
    let mut selected = select(&pods, "status.nominatedNodeName=").await;
    if c.is_real() {
        selected.retain(|name| !name.starts_with("once-"));
    }
    assert_eq!(selected, ["p"]);

    for (what, result) in [
        (
            "nodes",
            nodes
                .list(&ListParams::default().fields("spec.podCIDR=x"))
                .await
                .map(|_| ()),
        ),
        (
            "jobs",
            jobs.list(&ListParams::default().fields("status.active=1"))
                .await
                .map(|_| ()),
        ),
    ] {
        match result {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 400, "{what}: {e:?}");
                // A kind with a field label conversion function answers that function's error
                // (pkg/apis/core/v1/conversion.go:53, pkg/apis/batch/v1/conversion.go:37 of
                // 1.20.2, unchanged in 1.32); the emulator answers the generic message of the
                // kinds without one (open).
                let message = match (c.is_real(), what) {
                    (false, _) => "is not a known field selector".to_string(),
                    (true, "nodes") => "field label not supported: spec.podCIDR".to_string(),
                    (true, _) => {
                        r#"field label "status.active" not supported for batchv1.Job"#.to_string()
                    }
                };
                assert!(e.message.contains(&message), "{what}: {e:?}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
}
}

on_both! {
/// An Event about a cluster-scoped object (kube's `Recorder` for a Namespace, its reference
/// without a namespace) is created in `default`, as the API server keeps it, and listed there
/// through core v1. (kube's Recorder names an Event `<object name>.<hex>`: for an object named
/// like `system:basic-user` that is no DNS subdomain, and events.k8s.io/v1's strict validation
/// refuses it with 422, here as in the API server.)
async fn events_about_cluster_scoped_objects_live_in_default(c: Cluster) {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    let namespace = namespaces.get("default").await.unwrap();
    let reference = namespace.object_ref(&());
    assert_eq!(reference.namespace, None);
    let recorder = Recorder::new(
        c.client.clone(),
        Reporter {
            controller: "kube".into(),
            instance: None,
        },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "NoNamespace".into(),
        note: Some("about a cluster-scoped object".into()),
        action: "Test".into(),
        secondary: None,
    };
    if c.is_real() {
        // Kubernetes 1.20 keeps an Event with an eventTime about a cluster-scoped object in
        // kube-system only (pkg/apis/core/validation/events.go:143 of 1.20.2).
        let status = recorder
            .publish(&event, &reference)
            .await
            .map_err(crate::support::api_error)
            .unwrap_err();
        assert_eq!(status.code, 422, "{status:?}");
        return;
    }
    recorder.publish(&event, &reference).await.unwrap();
    let events: Api<CoreEvent> = Api::namespaced(c.client.clone(), "default");
    let found = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("NoNamespace"))
        .expect("the Event in default");
    assert_eq!(found.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(
        found.message.as_deref(),
        Some("about a cluster-scoped object")
    );
    assert_eq!(found.involved_object.kind.as_deref(), Some("Namespace"));
    assert_eq!(found.involved_object.namespace, None);
}
}

on_both! {
/// apps/v1 DaemonSets and v1 ReplicationControllers are served as the API server serves them
/// (their short names, the `all` category, generation, the status subresource), their status
/// left as a cluster without their controllers leaves it (the emulator's); kubectl reaches them
/// by short name.
async fn daemonsets_and_replication_controllers_are_served(c: Cluster) {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::ReplicationController;
    let template = json!({"metadata": {"labels": {"app": "agent"}},
        "spec": {"containers": [{"name": "c", "image": "agent:1"}]}});
    let sets: Api<DaemonSet> = Api::namespaced(c.client.clone(), "default");
    let set = sets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "agent"},
                "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template}}))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(set.metadata.generation, Some(1));
    let controllers: Api<ReplicationController> = Api::namespaced(c.client.clone(), "default");
    controllers
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "legacy"},
                "spec": {"replicas": 2, "selector": {"app": "agent"}, "template": template}}))
            .unwrap(),
        )
        .await
        .unwrap();
    // A spec change moves the generation; a status write does not.
    let changed = controllers
        .patch(
            "legacy",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(changed.metadata.generation, Some(2));
    let status = controllers
        .patch_status(
            "legacy",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(status.metadata.generation, Some(2));
    assert_eq!(status.status.map(|s| s.replicas), Some(3));
    // The emulator has no controller for them: no pods are made. The real control plane's
    // controller manager runs its replication controller, whose pods may appear at any moment
    // (its client's pace decides when).
    if !c.is_real() {
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(c.client.clone(), "default");
        assert!(
            pods.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );
    }
    let names = c.kubectl_ok(&["get", "ds,rc", "-n", "default", "-o", "name"]);
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        ["daemonset.apps/agent", "replicationcontroller/legacy"]
    );
    let all = c.kubectl_ok(&["get", "all", "-n", "default", "-o", "name"]);
    assert!(all.contains("daemonset.apps/agent"), "{all}");
    assert!(all.contains("replicationcontroller/legacy"), "{all}");
}
}

on_both! {
/// networking.k8s.io/v1 NetworkPolicies are stored and applied with kubectl (its validation
/// reads their OpenAPI), with the short name `netpol`; no network plugin enforces them.
async fn network_policies_are_served(c: Cluster) {
    let policy = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: webhook-ingress
spec:
  podSelector:
    matchLabels:
      app: web
  policyTypes: [Ingress]
  ingress:
    - ports:
        - port: 9443
          protocol: TCP
"#;
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(policy));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "networkpolicy.networking.k8s.io/webhook-ingress created"
    );
    let port = c.kubectl_ok(&[
        "get",
        "netpol",
        "webhook-ingress",
        "-o",
        "jsonpath={.spec.ingress[0].ports[0].port} {.metadata.generation}",
    ]);
    assert_eq!(port, "9443 1");
    // Its schema is known: an unknown field is refused under kubectl's strict validation.
    let out = c.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&policy.replace("policyTypes:", "policyTypez:")),
    );
    assert!(!out.status.success(), "{out:?}");
    let unknown = if c.is_real() {
        // Kubernetes 1.20 serves no OpenAPI v3 (1.27) and has no server-side field validation
        // (1.25): kubectl validates against OpenAPI v2 itself.
        r#"unknown field "policyTypez" in io.k8s.api.networking.v1.NetworkPolicySpec"#
    } else {
        r#"unknown field "spec.policyTypez""#
    };
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(unknown),
        "{out:?}"
    );
}
}

on_both! {
/// A DELETE answers the deleted object for the kinds whose registry returns it (pods,
/// services, service accounts, volumes and claims, namespaces, storage classes…), as typed
/// clients decode it, and a `Status` naming it for the others; a CRD's answer is the CRD
/// marked terminating; dry runs answer the same.
async fn deletes_answer_the_object_where_the_api_server_does(c: Cluster) {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service, ServiceAccount};
    use kube::api::DeleteParams;
    let create = |manifest: &str| {
        let out = c.kubectl_stdin(&["create", "-f", "-"], Some(manifest));
        assert!(out.status.success(), "{out:?}");
    };
    create("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}");
    create("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: robot}");
    create(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}",
    );
    create("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}");

    let dry = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    let services: Api<Service> = Api::default_namespaced(c.client.clone());
    if c.is_real() {
        // Kubernetes 1.20's Service storage answers a Status for every DELETE
        // (pkg/registry/core/service/storage/rest.go:305 of 1.20.2); it answers the object
        // since the Service storage moved onto the generic store (1.23).
        for params in [&dry, &Default::default()] {
            let status = services.delete("web", params).await.unwrap().right();
            let details = status.expect("a Status for a Service").details.unwrap();
            assert_eq!((details.name.as_str(), details.kind.as_str()), ("web", "services"));
        }
    } else {
        let svc = services.delete("web", &dry).await.unwrap().left();
        assert_eq!(svc.expect("the Service, dry run").name_any(), "web");
        let svc = services
            .delete("web", &Default::default())
            .await
            .unwrap()
            .left();
        let svc = svc.expect("the deleted Service");
        assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 80);
    }
    let accounts: Api<ServiceAccount> = Api::default_namespaced(c.client.clone());
    assert!(
        accounts
            .delete("robot", &Default::default())
            .await
            .unwrap()
            .is_left()
    );
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(c.client.clone());
    assert!(
        claims
            .delete("data", &Default::default())
            .await
            .unwrap()
            .is_left()
    );

    let maps: Api<ConfigMap> = Api::default_namespaced(c.client.clone());
    assert!(maps.delete("settings", &dry).await.unwrap().is_right());
    let uid = maps.get("settings").await.unwrap().metadata.uid.unwrap();
    let status = maps
        .delete("settings", &Default::default())
        .await
        .unwrap()
        .right();
    let details = status.expect("a Status for a ConfigMap").details.unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.kind.as_str(),
            details.uid.as_str()
        ),
        ("settings", "configmaps", uid.as_str())
    );
    // Custom resources answer a Status; their CRD answers itself, terminating.
    let sites: Api<Site> = Api::default_namespaced(c.client.clone());
    sites
        .create(&PostParams::default(), &site("a"))
        .await
        .unwrap();
    assert!(
        sites
            .delete("a", &Default::default())
            .await
            .unwrap()
            .is_right()
    );
    let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
    let crd = crds
        .delete("sites.sites.ecmwf.int", &Default::default())
        .await
        .unwrap()
        .left()
        .expect("the CRD");
    assert!(crd.metadata.deletion_timestamp.is_some(), "{crd:?}");
}
}

on_both! {
/// A CRD created by a server-side apply is accepted and established as one created by POST
/// (the create strategy and the establishing controller run either way): kube-rs's
/// `derived_resource_queryable_and_has_subresources` waits for it.
async fn a_crd_created_by_server_side_apply_is_established(c: Cluster) {
    let crd = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: foos.clux.dev
spec:
  group: clux.dev
  scope: Namespaced
  names: {plural: foos, kind: Foo}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;
    let out = c.kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(crd));
    assert!(out.status.success(), "{out:?}");
    let status = c.kubectl_ok(&[
        "get",
        "crd",
        "foos.clux.dev",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Established\")].status} {.status.acceptedNames.listKind} {.status.storedVersions}",
    ]);
    assert_eq!(status, r#"True FooList ["v1"]"#);
    let out = c.kubectl_stdin(
        &["apply", "--server-side", "-f", "-"],
        Some("apiVersion: clux.dev/v1\nkind: Foo\nmetadata: {name: a, namespace: default}\n"),
    );
    assert!(out.status.success(), "{out:?}");
}
}

on_both! {
/// `componentstatuses` (deprecated, still served by 1.32): the scheduler, the controller
/// manager and etcd, healthy, with the API server's columns; get and list only.
async fn component_statuses_are_listed_and_read_only(c: Cluster) {
    let table = c.kubectl_ok(&["get", "componentstatuses"]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAME", "STATUS", "MESSAGE", "ERROR"], "{table}");
    if c.is_real() {
        // The test control plane runs no scheduler and its controller manager serves no
        // insecure port: both are listed, Unhealthy (their probes are refused).
        for component in ["scheduler", "controller-manager"] {
            assert!(
                rows.iter().any(|r| r[..2] == [component, "Unhealthy"]),
                "{table}"
            );
        }
    } else {
        assert!(
            rows.iter()
                .any(|r| r[..3] == ["scheduler", "Healthy", "ok"]),
            "{table}"
        );
    }
    assert!(
        rows.iter().any(|r| r[..2] == ["etcd-0", "Healthy"]),
        "{table}"
    );
    let healthy = c.kubectl_ok(&[
        "get",
        "cs",
        "controller-manager",
        "-o",
        "jsonpath={.conditions[0].type}={.conditions[0].status}",
    ]);
    assert_eq!(healthy, if c.is_real() { "Healthy=False" } else { "Healthy=True" });
    let out = c.kubectl(&["delete", "componentstatus", "scheduler"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MethodNotAllowed")
            || String::from_utf8_lossy(&out.stderr).contains("does not allow this method"),
        "{out:?}"
    );
}
}

on_both! {
/// Core v1 Events take any name usable in a URL (their strategy adds no name rule); through
/// events.k8s.io/v1 a name must be a DNS subdomain (kube's Recorder names an Event
/// `<object>.<hex>`, which for `system:basic-user` is not one).
async fn event_names_follow_the_api_group_they_are_created_through(c: Cluster) {
    let core = r#"
apiVersion: v1
kind: Event
metadata: {name: "system:basic-user.17a2b3c4", namespace: default}
involvedObject: {kind: ClusterRole, name: "system:basic-user", apiVersion: rbac.authorization.k8s.io/v1}
reason: Tested
message: a core Event
type: Normal
"#;
    let out = c.kubectl_stdin(&["create", "-f", "-"], Some(core));
    assert!(out.status.success(), "{out:?}");
    let events_v1 = r#"
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: "system:basic-user.27a2b3c4", namespace: default}
eventTime: "2026-12-04T18:00:00.000000Z"
reportingController: tests
reportingInstance: tests-1
action: Testing
reason: Tested
regarding: {kind: ClusterRole, name: "system:basic-user", apiVersion: rbac.authorization.k8s.io/v1}
type: Normal
"#;
    let out = c.kubectl_stdin(&["create", "-f", "-"], Some(events_v1));
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            r#"metadata.name: Invalid value: "system:basic-user.27a2b3c4": a lowercase RFC 1123 subdomain"#
        ),
        "{out:?}"
    );
    let out = c.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&core.replace("system:basic-user.17a2b3c4", "a/b")),
    );
    assert!(!out.status.success(), "a name with a slash: {out:?}");
}
}

on_both! {
/// A CRD of a protected group (`*.k8s.io`, `*.kubernetes.io`) needs the annotation
/// `api-approved.kubernetes.io`, a URL or a reason starting with `unapproved`; the API approval
/// controller reports it in the condition `KubernetesAPIApprovalPolicyConformant`.
async fn crds_of_protected_groups_need_api_approval(c: Cluster) {
    let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
    let crd = |annotation: Option<&str>| -> CustomResourceDefinition {
        let mut v = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "foos.example.k8s.io"},
            "spec": {"group": "example.k8s.io", "scope": "Namespaced",
                "names": {"plural": "foos", "kind": "Foo"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]},
        });
        if let Some(a) = annotation {
            v["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": a});
        }
        serde_json::from_value(v).unwrap()
    };
    let see = "see https://github.com/kubernetes/enhancements/pull/1111";
    let status = crds
        .create(&PostParams::default(), &crd(None))
        .await
        .map_err(crate::support::api_error)
        .unwrap_err();
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"foos.example.k8s.io\" is invalid: \
             metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups \
             must have approval annotation \"api-approved.kubernetes.io\", {see}"
        )
    );
    let cause = &status.details.unwrap().causes[0];
    assert_eq!(
        cause.field,
        "metadata.annotations[api-approved.kubernetes.io]"
    );
    let status = crds
        .create(&PostParams::default(), &crd(Some("nope")))
        .await
        .map_err(crate::support::api_error)
        .unwrap_err();
    assert_eq!(
        status.message,
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"foos.example.k8s.io\" is invalid: \
             metadata.annotations[api-approved.kubernetes.io]: Invalid value: \"nope\": protected \
             groups must have approval annotation \"api-approved.kubernetes.io\" with either a URL \
             or a reason starting with \"unapproved\", {see}"
        )
    );
    // Bypassed: created, but not conformant.
    crds.create(&PostParams::default(), &crd(Some("unapproved, testing")))
        .await
        .unwrap();
    let condition = |crd: CustomResourceDefinition| {
        let c = crd
            .status
            .unwrap()
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "KubernetesAPIApprovalPolicyConformant")
            .expect("the approval condition");
        (c.status, c.reason.unwrap_or_default(), c.message.unwrap_or_default())
    };
    let found = eventually("the approval condition", Duration::from_secs(10), || {
        let crds = crds.clone();
        async move {
            let crd = crds.get("foos.example.k8s.io").await.ok()?;
            crd.status.as_ref()?.conditions.as_ref()?.iter()
                .any(|c| c.type_ == "KubernetesAPIApprovalPolicyConformant")
                .then_some(crd)
        }
    })
    .await;
    assert_eq!(
        condition(found),
        (
            "False".to_string(),
            "UnapprovedAnnotation".to_string(),
            "not approved: \"unapproved, testing\"".to_string()
        )
    );
    // An update that keeps the approval state passes; one that loses it does not.
    let changed = crds
        .patch(
            "foos.example.k8s.io",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(changed.labels()["x"], "y");
    let status = crds
        .patch(
            "foos.example.k8s.io",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"api-approved.kubernetes.io": null}}})),
        )
        .await
        .map_err(crate::support::api_error)
        .unwrap_err();
    assert_eq!(status.code, 422, "{status:?}");
    // Approved by a URL; groups outside k8s.io and kubernetes.io get no condition.
    let mut approved = crd(Some("https://github.com/kubernetes/enhancements/pull/1111"));
    approved.metadata.name = Some("bars.example.k8s.io".into());
    approved.spec.names.plural = "bars".into();
    approved.spec.names.kind = "Bar".into();
    crds.create(&PostParams::default(), &approved).await.unwrap();
    let found = eventually("the approval condition", Duration::from_secs(10), || {
        let crds = crds.clone();
        async move {
            let crd = crds.get("bars.example.k8s.io").await.ok()?;
            crd.status.as_ref()?.conditions.as_ref()?.iter()
                .any(|c| c.type_ == "KubernetesAPIApprovalPolicyConformant")
                .then_some(crd)
        }
    })
    .await;
    assert_eq!(
        condition(found),
        (
            "True".to_string(),
            "ApprovedAnnotation".to_string(),
            "approved in https://github.com/kubernetes/enhancements/pull/1111".to_string()
        )
    );
    let site = crds.get("sites.sites.ecmwf.int").await.unwrap();
    assert!(
        !site.status.unwrap().conditions.unwrap().iter()
            .any(|c| c.type_ == "KubernetesAPIApprovalPolicyConformant")
    );
}
}

on_both! {
/// A CRD's schema must name OpenAPI v3 types and be structural (a type at the root and for
/// every property); a 422 names the field as the API server's internal version has it
/// (`spec.validation` for a schema shared by every version).
async fn crd_schemas_are_validated(c: Cluster) {
    let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
    let crd = |schema: Value| -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "bads.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "bads", "kind": "Bad"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema}}]},
        }))
        .unwrap()
    };
    let refused = |schema: Value| {
        let crds = crds.clone();
        let crd = crd(schema);
        async move {
            crds.create(&PostParams::default(), &crd)
                .await
                .map_err(crate::support::api_error)
                .unwrap_err()
        }
    };
    let prefix = "CustomResourceDefinition.apiextensions.k8s.io \"bads.example.com\" is invalid: ";
    let status = refused(json!({"type": "object", "properties": {"spec": {"type": "strin"}}})).await;
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        format!(
            "{prefix}spec.validation.openAPIV3Schema.properties[spec].type: Unsupported value: \
             \"strin\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \
             \"object\", \"string\""
        )
    );
    let cause = &status.details.as_ref().unwrap().causes[0];
    assert_eq!(cause.field, "spec.validation.openAPIV3Schema.properties[spec].type");
    assert_eq!(cause.reason, "FieldValueNotSupported");
    let status = refused(json!({"properties": {"spec": {"type": "object"}}})).await;
    assert_eq!(
        status.message,
        format!("{prefix}spec.validation.openAPIV3Schema.type: Required value: must not be empty at the root")
    );
    let status = refused(json!({"type": "object", "properties": {"spec": {"description": "untyped"}}})).await;
    assert_eq!(
        status.message,
        format!(
            "{prefix}spec.validation.openAPIV3Schema.properties[spec].type: Required value: must \
             not be empty for specified object fields"
        )
    );
    let status = refused(json!({"type": "array", "items": {"type": "string"}})).await;
    assert_eq!(
        status.message,
        format!("{prefix}spec.validation.openAPIV3Schema.type: Invalid value: \"array\": must be object at the root")
    );
    // Untyped but int-or-string, or preserving unknown fields: structural.
    crds.create(
        &PostParams::default(),
        &crd(json!({"type": "object", "properties": {
            "port": {"x-kubernetes-int-or-string": true},
            "extra": {"x-kubernetes-preserve-unknown-fields": true}}})),
    )
    .await
    .unwrap();
}
}
