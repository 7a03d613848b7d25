use serde_json::{Value, json};

use super::review;
use super::*;
use crate::config::{Installation, RoutingMode};
use crate::fixtures::{CONFIG_YAML as CONFIG, config, config_for, config_gateway, handbook};

/// An AdmissionReview of a Site, as the API server sends it.
fn review(operation: &str, object: Option<Value>, old: Option<Value>) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "kind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "resource": {"group": "sites.ecmwf.int", "version": "v1", "resource": "sites"},
            "name": "docs-handbook", "namespace": "sites", "operation": operation,
            "userInfo": {"username": "jdoe"},
            "object": object, "oldObject": old, "dryRun": false
        }
    })
}

/// [`review`] as a request body (compact JSON, as the API server writes it).
fn review_body(operation: &str, object: Option<Value>, old: Option<Value>) -> Vec<u8> {
    serde_json::to_vec(&review(operation, object, old)).unwrap()
}

fn request(
    operation: &str,
    object: Option<Value>,
    old: Option<Value>,
) -> AdmissionRequest<DynamicObject> {
    let review: kube::core::admission::AdmissionReview<DynamicObject> =
        serde_json::from_value(review(operation, object, old)).unwrap();
    review.try_into().unwrap()
}

/// Every Site validation of these tables runs both ways: generic (`DynamicObject`) and typed
/// (`SiteObject`, the server's path whenever the object decodes as a Site); the answers must be
/// the same.
fn validate_site(req: &AdmissionRequest<DynamicObject>, cfg: &PlatformConfig) -> AdmissionResponse {
    let generic = super::validate_site(req, cfg, &Platform::default());
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req
    }))
    .unwrap();
    let typed_body = review::SiteBody::new(&body).unwrap();
    same_read_as_serde_json(&typed_body);
    if let Ok(typed_req) = typed_body.decode() {
        let typed = super::validate_site(&typed_req, cfg, &Platform::default());
        assert_eq!(
            serde_json::to_value(typed.into_review()).unwrap(),
            serde_json::to_value(generic.clone().into_review()).unwrap(),
            "typed and generic validation differ for {}",
            String::from_utf8_lossy(&body)
        );
    }
    generic
}

/// When the review reader reads `body`, it gives what serde_json's decoding gives; whether it
/// read it.
fn same_read_as_serde_json(body: &review::SiteBody<'_>) -> bool {
    let Some(read) = body.read() else {
        return false;
    };
    assert_eq!(
        format!("{read:?}"),
        format!("{:?}", body.decode_with_serde_json()),
        "the reader and serde_json differ"
    );
    true
}

fn messages(r: &AdmissionResponse) -> Vec<String> {
    r.result
        .details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect()
        })
        .unwrap_or_default()
}

const UUID_A: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
const UUID_B: &str = "16fd2706-8baf-433b-82eb-8c7fada847da";
const FRESH: &str = "5f0b3a52-9d57-4c3c-8f8e-1a2b3c4d5e6f";

#[test]
fn upgrade_annotation_stamping() {
    // Images recorded: this table is about the annotation only.
    let with = |v: Option<&str>| {
        handbook()
            .configuration(
                "applications",
                json!([{"name": "static", "image": "registry.example.org/sites/static:2.4.0"}]),
            )
            .edit(|s| {
                if let Some(v) = v {
                    s["metadata"]["annotations"] = json!({UPGRADE_REQUEST_ANNOTATION: v});
                }
            })
            .json()
    };
    // (case, operation, new value, old value, expected stamped value or None for no patch)
    let cases = [
        (
            "force on create",
            "CREATE",
            Some("force"),
            None,
            Some(FRESH),
        ),
        (
            "true on update",
            "UPDATE",
            Some("true"),
            Some(UUID_A),
            Some(FRESH),
        ),
        (
            "now, same non-UUID as stored",
            "UPDATE",
            Some("now"),
            Some("now"),
            Some(FRESH),
        ),
        ("empty value", "UPDATE", Some(""), None, Some(FRESH)),
        (
            "new client UUID kept",
            "UPDATE",
            Some(UUID_B),
            Some(UUID_A),
            None,
        ),
        (
            "client UUID on create kept",
            "CREATE",
            Some(UUID_A),
            None,
            None,
        ),
        (
            "unchanged UUID carried by an unrelated update",
            "UPDATE",
            Some(UUID_A),
            Some(UUID_A),
            None,
        ),
        (
            "nil UUID is not a request id",
            "UPDATE",
            Some("00000000-0000-0000-0000-000000000000"),
            None,
            Some(FRESH),
        ),
        (
            "simple-form UUID is not canonical",
            "UPDATE",
            Some("7c9e6679742540de944be07fc1f90ae7"),
            None,
            Some(FRESH),
        ),
        ("removal stamps nothing", "UPDATE", None, Some(UUID_A), None),
        ("absent stamps nothing", "CREATE", None, None, None),
    ];
    for (case, op, new, old, want) in cases {
        let old_obj = (op == "UPDATE").then(|| with(old));
        let r = mutate_site(&request(op, Some(with(new)), old_obj), &config(), || {
            uuid::Uuid::parse_str(FRESH).unwrap()
        });
        assert!(r.allowed, "{case}");
        assert_eq!(r.uid, "req-1");
        match want {
            None => assert!(r.patch.is_none(), "{case}: unexpected patch"),
            Some(v) => {
                let patch: Value = serde_json::from_slice(r.patch.as_ref().expect(case)).unwrap();
                assert_eq!(
                    patch,
                    json!([{"op": "replace", "path": "/metadata/annotations/sites.ecmwf.int~1upgrade-request", "value": v}]),
                    "{case}"
                );
            }
        }
    }
}

#[test]
fn a_valid_site_is_allowed() {
    for mode in [RoutingMode::Ingress, RoutingMode::Gateway] {
        let r = validate_site(
            &request("CREATE", Some(handbook().json()), None),
            &config_for(mode),
        );
        assert!(r.allowed, "{:?}", r.result);
        assert_eq!(r.uid, "req-1");
        assert!(r.warnings.is_none());
    }
    for example in ["site.yaml", "site-custom-app.yaml", "site-archived.yaml"] {
        let path = format!(
            "{}/manifests/examples/{example}",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut obj: Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        obj["metadata"]["namespace"] = json!("sites");
        let r = validate_site(&request("CREATE", Some(obj), None), &config());
        assert!(r.allowed, "{example}: {:?}", r.result.message);
    }
}

#[test]
fn every_rule_names_its_field() {
    type Edit = fn(&mut Value);
    // (case, edit, expected "field: message" prefix)
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "id too long",
            |s| s["metadata"]["name"] = json!("a".repeat(53)),
            "metadata.name:",
        ),
        (
            "id not DNS-1035",
            |s| s["metadata"]["name"] = json!("1site"),
            "metadata.name:",
        ),
        (
            "name not a DNS label",
            |s| s["spec"]["name"] = json!("Hand Book"),
            "spec.name:",
        ),
        (
            "space not a DNS label",
            |s| s["spec"]["configuration"]["space"] = json!("docs_"),
            "spec.configuration.space:",
        ),
        (
            "empty owner",
            |s| s["spec"]["owner"] = json!(" "),
            "spec.owner: must not be empty",
        ),
        (
            "routing",
            |s| s["spec"]["configuration"]["routing"] = json!({"host": "x"}),
            "spec.configuration.routing: routing is platform-wide; use the top-level routing values",
        ),
        (
            "settings.routing",
            |s| s["spec"]["configuration"]["settings"]["routing"] = json!({}),
            "spec.configuration.settings.routing: routing is platform-wide",
        ),
        (
            "no applications",
            |s| s["spec"]["configuration"]["applications"] = json!([]),
            "spec.configuration.applications: a site needs at least one application",
        ),
        (
            "duplicate app",
            |s| {
                s["spec"]["configuration"]["applications"] =
                    json!([{"name": "static"}, {"name": "static"}])
            },
            "spec.configuration.applications[1].name: \"static\" is already used by applications[0]",
        ),
        (
            "custom without image",
            |s| {
                s["spec"]["configuration"]["applications"] =
                    json!([{"name": "static"}, {"name": "app"}])
            },
            "spec.configuration.applications[1].image: required for a custom application",
        ),
        (
            "bad image",
            |s| {
                s["spec"]["configuration"]["applications"] =
                    json!([{"name": "app", "image": "UPPER/case"}])
            },
            "spec.configuration.applications[0].image:",
        ),
        (
            "port too large",
            |s| s["spec"]["configuration"]["applications"] = json!([{"name": "static"}, {"name": "a", "image": "x:1"}, {"name": "b", "image": "x:1", "port": 70000}]),
            "spec.configuration.applications[2].port: must be between 1 and 65535",
        ),
        (
            "port zero",
            |s| {
                s["spec"]["configuration"]["applications"] =
                    json!([{"name": "a", "image": "x:1", "port": 0}])
            },
            "spec.configuration.applications[0].port: must be between 1 and 65535",
        ),
        (
            "shared port",
            |s| {
                s["spec"]["configuration"]["applications"] =
                    json!([{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:1"}])
            },
            "spec.configuration.applications[1].port: port 8000 is already used by applications[0]",
        ),
        (
            "env name",
            |s| {
                s["spec"]["configuration"]["applications"] =
                    json!([{"name": "static", "env": {"A B": "1"}}])
            },
            "spec.configuration.applications[0].env[\"A B\"]:",
        ),
        (
            "annotation key",
            |s| {
                s["spec"]["configuration"]["applications"] =
                    json!([{"name": "static", "annotations": {"-bad": "1"}}])
            },
            "spec.configuration.applications[0].annotations[\"-bad\"]:",
        ),
        (
            "path injection",
            |s| s["spec"]["configuration"]["applications"] = json!([{"name": "static", "paths": [{"path": "/a;deny all", "path_type": "Prefix"}]}]),
            "spec.configuration.applications[0].paths[0].path:",
        ),
        (
            "path type",
            |s| {
                s["spec"]["configuration"]["applications"] =
                    json!([{"name": "static", "paths": [{"path": "/a", "path_type": "Regex"}]}])
            },
            "spec.configuration.applications[0].paths[0].path_type: \"Regex\" is not supported in ingress mode",
        ),
        (
            "header value",
            |s| s["spec"]["configuration"]["headers"] = json!({"X-A": "a\nb"}),
            "spec.configuration.headers[\"X-A\"]:",
        ),
        (
            "header name",
            |s| s["spec"]["configuration"]["headers"] = json!({"X{A}": "a"}),
            "spec.configuration.headers[\"X{A}\"]:",
        ),
        (
            "quota syntax",
            |s| s["spec"]["configuration"]["quota"] = json!("2 GB"),
            "spec.configuration.quota:",
        ),
        (
            "quota zero",
            |s| s["spec"]["configuration"]["quota"] = json!("0Gi"),
            "spec.configuration.quota:",
        ),
        (
            "retention date",
            |s| s["spec"]["configuration"]["retention_date"] = json!("2027-02-30"),
            "spec.configuration.retention_date:",
        ),
        (
            "retention format",
            |s| s["spec"]["configuration"]["retention_date"] = json!("31/12/2027"),
            "spec.configuration.retention_date:",
        ),
        (
            "error handling",
            |s| s["spec"]["configuration"]["settings"]["error_handling"] = json!("custom"),
            "spec.configuration.settings.error_handling:",
        ),
        (
            "cpu limit syntax",
            |s| s["spec"]["configuration"]["settings"]["resource_limits"] = json!({"cpu": "fast"}),
            "spec.configuration.settings.resource_limits.cpu:",
        ),
        (
            "memory below request",
            |s| {
                s["spec"]["configuration"]["settings"]["resource_limits"] =
                    json!({"memory": "16Mi"})
            },
            "spec.configuration.settings.resource_limits.memory: 16Mi is below the platform's request of 32Mi",
        ),
    ];
    for (case, edit, want) in cases {
        let r = validate_site(
            &request("CREATE", Some(handbook().edit(edit).json()), None),
            &config(),
        );
        assert!(!r.allowed, "{case}: allowed");
        assert_eq!(
            (r.result.code, r.result.reason.as_str()),
            (403, "Forbidden"),
            "{case}"
        );
        let msgs = messages(&r);
        assert!(msgs.iter().any(|m| m.starts_with(want)), "{case}: {msgs:?}");
        assert!(
            r.result.message.contains(want),
            "{case}: {}",
            r.result.message
        );
    }
}

#[test]
fn several_violations_are_reported_together() {
    let obj = handbook()
        .edit(|s| {
            s["spec"]["name"] = json!("Bad Name");
            s["spec"]["configuration"]["routing"] = json!({"mode": "gateway"});
            s["spec"]["configuration"]["applications"] =
                json!([{"name": "x"}, {"name": "y", "image": "y:1", "port": 99999}]);
        })
        .json();
    let r = validate_site(&request("CREATE", Some(obj), None), &config());
    let fields: Vec<String> = r
        .result
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert_eq!(
        fields,
        [
            "spec.name",
            "spec.configuration.routing",
            "spec.configuration.applications[0].image",
            "spec.configuration.applications[1].port"
        ]
    );
    for field in [
        "spec.name:",
        "spec.configuration.routing:",
        "applications[0].image:",
        "applications[1].port:",
    ] {
        assert!(r.result.message.contains(field), "{}", r.result.message);
    }
}

#[test]
fn gateway_mode_restricts_path_types_and_warns_about_replicas() {
    let obj = handbook().edit(
        |s| s["spec"]["configuration"]["applications"] = json!([{"name": "static", "paths": [{"path": "/a", "path_type": "ImplementationSpecific"}]}]),
    ).json();
    assert!(validate_site(&request("CREATE", Some(obj.clone()), None), &config()).allowed);
    let r = validate_site(&request("CREATE", Some(obj), None), &config_gateway());
    assert!(
        messages(&r)[0].contains("is not supported in gateway mode (use Prefix or Exact)"),
        "{:?}",
        messages(&r)
    );

    let three = handbook()
        .edit(|s| s["spec"]["configuration"]["settings"]["replicas"] = json!(3))
        .json();
    let r = validate_site(
        &request("CREATE", Some(three.clone()), None),
        &config_gateway(),
    );
    assert!(r.allowed);
    assert!(r.warnings.unwrap()[0].contains("without session affinity"));
    assert!(
        validate_site(&request("CREATE", Some(three), None), &config())
            .warnings
            .is_none()
    );
}

#[test]
fn quota_never_decreases_on_update() {
    let q = |v: Option<&str>| {
        handbook()
            .edit(|s| s["spec"]["configuration"]["quota"] = json!(v))
            .json()
    };
    // (new, old, allowed)
    let cases = [
        (Some("2Gi"), Some("2Gi"), true),
        (Some("3Gi"), Some("2Gi"), true),
        (Some("2048Mi"), Some("2Gi"), true),
        (Some("1Gi"), Some("2Gi"), false),
        (None, Some("2Gi"), false),
        (Some("1Gi"), None, true),
    ];
    for (new, old, allowed) in cases {
        let r = validate_site(&request("UPDATE", Some(q(new)), Some(q(old))), &config());
        assert_eq!(
            r.allowed, allowed,
            "{new:?} <- {old:?}: {}",
            r.result.message
        );
        if !allowed {
            assert!(
                r.result
                    .message
                    .starts_with("spec.configuration.quota: must not"),
                "{}",
                r.result.message
            );
        }
    }
    // On CREATE there is nothing to compare with.
    assert!(validate_site(&request("CREATE", Some(q(Some("1Gi"))), None), &config()).allowed);
}

#[test]
fn objects_that_are_not_sites_are_denied_not_crashed() {
    let r = validate_site(
        &request(
            "CREATE",
            Some(
                json!({"apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "metadata": {"name": "x"}, "spec": {"name": 5}}),
            ),
            None,
        ),
        &config(),
    );
    assert!(!r.allowed);
    assert!(
        r.result.message.starts_with("object: not a valid Site"),
        "{}",
        r.result.message
    );
    let r = validate_site(&request("CREATE", None, None), &config());
    assert!(!r.allowed);
    // DELETE is never blocked.
    assert!(validate_site(&request("DELETE", None, Some(handbook().json())), &config()).allowed);
}

fn configmap_request(name: &str, data: Value) -> AdmissionRequest<DynamicObject> {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "cm-1",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": name, "namespace": "sites", "operation": "UPDATE",
            "userInfo": {"username": "admin"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "sites"}, "data": data},
            "oldObject": null
        }
    });
    let review: kube::core::admission::AdmissionReview<DynamicObject> =
        serde_json::from_value(review).unwrap();
    review.try_into().unwrap()
}

#[test]
fn platform_configuration_is_validated_on_the_sites_config_configmap() {
    assert!(
        validate_config(&configmap_request(
            "sites-config",
            json!({"config.yaml": CONFIG})
        ))
        .allowed
    );
    let r = validate_config(&configmap_request(
        "sites-config",
        json!({"config.yaml": "routing:\n  mode: mesh\nsitesConfig:\n  routing: {}\n"}),
    ));
    assert!(!r.allowed);
    assert_eq!(r.result.code, 403);
    let msgs = messages(&r);
    assert!(
        msgs.iter().any(|m| m.starts_with("routing.mode:")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.starts_with("sitesConfig.routing:")
            && m.contains("use the top-level routing values")),
        "{msgs:?}"
    );
    let r = validate_config(&configmap_request("sites-config", json!({})));
    assert!(
        r.result
            .message
            .starts_with("data[\"config.yaml\"]: required"),
        "{}",
        r.result.message
    );
    let r = validate_config(&configmap_request(
        "sites-config",
        json!({"config.yaml": "a: [b"}),
    ));
    assert!(
        !r.allowed && r.result.message.contains("not valid YAML"),
        "{}",
        r.result.message
    );
    assert!(
        validate_config(&configmap_request(
            "other",
            json!({"config.yaml": "routing: {mode: mesh}"})
        ))
        .allowed
    );
}

#[test]
fn invalid_examples_are_denied_with_the_message_their_first_line_names() {
    let dir = format!("{}/manifests/examples/invalid", env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    let mut mismatches = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let expected = text
            .lines()
            .next()
            .unwrap()
            .trim_start_matches("# ")
            .to_string();
        let mut obj: Value = serde_yaml_ng::from_str(&text).unwrap();
        obj["metadata"]["namespace"] = json!("sites");
        let r = validate_site(&request("CREATE", Some(obj), None), &config());
        if r.allowed || !r.result.message.contains(&expected) {
            mismatches.push(format!(
                "{}:\n  expected: {expected}\n  got:      {}",
                path.display(),
                r.result.message
            ));
        }
        seen += 1;
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert!(seen >= 9, "{seen} examples");
}

/// Sets the value at a JSON pointer, creating missing objects on the way; `null` removes it.
fn set(doc: &mut Value, pointer: &str, value: Value) {
    let mut cur = doc;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i == parts.len() - 1;
        if let Ok(index) = part.parse::<usize>()
            && cur.is_array()
        {
            cur = &mut cur[index];
            continue;
        }
        if last {
            if value.is_null() {
                cur.as_object_mut().unwrap().remove(*part);
            } else {
                cur[*part] = value;
            }
            return;
        }
        if cur.get(*part).is_none() {
            cur[*part] = json!({});
        }
        cur = &mut cur[*part];
    }
}

fn with(edits: &[(&str, Value)]) -> Value {
    let mut site = handbook().json();
    for (pointer, value) in edits {
        set(&mut site, pointer, value.clone());
    }
    site
}

const APPS: &str = "/spec/configuration/applications";

/// JSON-pointer edits of the base Site.
type Edits = Vec<(&'static str, Value)>;

fn custom(extra: Value) -> Value {
    let mut app = json!({"name": "app", "image": "ghcr.io/example/app:1.0"});
    for (k, v) in extra.as_object().unwrap() {
        app[k] = v.clone();
    }
    json!([{"name": "static"}, app])
}

#[test]
fn invalid_sites_table() {
    let long = |n: usize| "a".repeat(n);
    // (edits, routing mode, old object edits for UPDATE, expected "field: message" prefix)
    let gw = RoutingMode::Gateway;
    let ing = RoutingMode::Ingress;
    let cases: Vec<(Edits, RoutingMode, Option<Edits>, String)> = vec![
        (vec![("/metadata/name", json!("1abc"))], ing, None, "metadata.name: must be a DNS-1035 label".into()),
        (vec![("/metadata/name", json!("Docs"))], ing, None, "metadata.name: must be a DNS-1035 label".into()),
        (vec![("/metadata/name", json!("docs_handbook"))], ing, None, "metadata.name: must be a DNS-1035 label".into()),
        (vec![("/metadata/name", json!("docs-"))], ing, None, "metadata.name: must be a DNS-1035 label".into()),
        (vec![("/metadata/name", json!(long(53)))], ing, None, "metadata.name: must be at most 52 characters (is 53)".into()),
        (vec![("/metadata/name", Value::Null), ("/metadata/generateName", json!("9docs-"))], ing, None, "metadata.generateName: must be a DNS-1035 label".into()),
        (vec![("/metadata/name", Value::Null), ("/metadata/generateName", json!(format!("{}-", long(49))))], ing, None, "metadata.generateName: must be at most 52 characters (is 55)".into()),
        (vec![("/metadata/annotations", json!({"sites.ecmwf.int/paused": "yes"}))], ing, None, "metadata.annotations[sites.ecmwf.int/paused]: must be \"true\" or \"false\"".into()),
        // ROL-03: a paused Site is validated like any other.
        (vec![("/metadata/annotations", json!({"sites.ecmwf.int/paused": "true"})), ("/spec/name", json!(""))], ing, None, "spec.name: must not be empty".into()),
        (vec![("/spec/name", json!(""))], ing, None, "spec.name: must not be empty".into()),
        (vec![("/spec/name", json!("Hand"))], ing, None, "spec.name: must be a DNS-1123 label".into()),
        (vec![("/spec/name", json!(long(64)))], ing, None, "spec.name: must be at most 63 characters (is 64)".into()),
        (vec![("/spec/name", json!("hand.book"))], ing, None, "spec.name: must be a DNS-1123 label".into()),
        (vec![("/spec/configuration/space", json!(""))], ing, None, "spec.configuration.space: must not be empty".into()),
        (vec![("/spec/configuration/space", json!("-docs"))], ing, None, "spec.configuration.space: must be a DNS-1123 label".into()),
        (vec![("/spec/configuration/space", json!("docs/x"))], ing, None, "spec.configuration.space: must be a DNS-1123 label".into()),
        (vec![("/spec/owner", json!(""))], ing, None, "spec.owner: must not be empty".into()),
        (vec![("/spec/type", json!("  "))], ing, None, "spec.type: must not be empty".into()),
        (vec![("/spec/configuration/routing", json!({}))], ing, None, "spec.configuration.routing: routing is platform-wide; use the top-level routing values".into()),
        (vec![("/spec/configuration/settings/routing", json!({"mode": "gateway"}))], ing, None, "spec.configuration.settings.routing: routing is platform-wide; use the top-level routing values".into()),
        (vec![(APPS, json!([]))], ing, None, "spec.configuration.applications: a site needs at least one application".into()),
        (vec![(APPS, json!([{"name": "", "image": "x:1"}]))], ing, None, "spec.configuration.applications[0].name: must not be empty".into()),
        (vec![(APPS, json!([{"name": "My-App", "image": "x:1"}]))], ing, None, "spec.configuration.applications[0].name: must be a DNS-1123 label".into()),
        (vec![(APPS, json!([{"name": long(64), "image": "x:1"}]))], ing, None, "spec.configuration.applications[0].name: must be at most 63 characters (is 64)".into()),
        (vec![(APPS, json!([{"name": "static"}, {"name": "static"}]))], ing, None, "spec.configuration.applications[1].name: \"static\" is already used by applications[0]".into()),
        (vec![(APPS, json!([{"name": "static"}, {"name": "app"}]))], ing, None, "spec.configuration.applications[1].image: required for a custom application (one not in the platform catalogue)".into()),
        (vec![(APPS, custom(json!({"image": ""})))], ing, None, "spec.configuration.applications[1].image: must not be empty".into()),
        (vec![(APPS, custom(json!({"image": "ghcr.io/x/a pp:1"})))], ing, None, "spec.configuration.applications[1].image:".into()),
        (vec![(APPS, custom(json!({"image": "ghcr.io/x/app:"})))], ing, None, "spec.configuration.applications[1].image:".into()),
        (vec![(APPS, custom(json!({"image": "UPPER/case:1"})))], ing, None, "spec.configuration.applications[1].image:".into()),
        (vec![(APPS, custom(json!({"port": 0})))], ing, None, "spec.configuration.applications[1].port: must be between 1 and 65535".into()),
        (vec![(APPS, custom(json!({"port": -1})))], ing, None, "spec.configuration.applications[1].port: must be between 1 and 65535".into()),
        (vec![(APPS, custom(json!({"port": 65536})))], ing, None, "spec.configuration.applications[1].port: must be between 1 and 65535".into()),
        (vec![(APPS, json!([{"name": "static", "port": 70000}]))], ing, None, "spec.configuration.applications[0].port: must be between 1 and 65535".into()),
        (vec![(APPS, json!([{"name": "a", "image": "x:1"}, {"name": "b", "image": "x:2"}]))], ing, None, "spec.configuration.applications[1].port: port 8000 is already used by applications[0]".into()),
        (vec![(APPS, custom(json!({"port": 8080})))], ing, None, "spec.configuration.applications[1].port: port 8080 is already used by applications[0]".into()),
        (vec![(APPS, custom(json!({"env": {"": "x"}})))], ing, None, "spec.configuration.applications[1].env[\"\"]: environment variable names must not be empty".into()),
        (vec![(APPS, custom(json!({"env": {"A=B": "x"}})))], ing, None, "spec.configuration.applications[1].env[\"A=B\"]: \"A=B\" contains '='".into()),
        (vec![(APPS, custom(json!({"env": {"A B": "x"}})))], ing, None, "spec.configuration.applications[1].env[\"A B\"]: \"A B\" contains ' '".into()),
        (vec![(APPS, custom(json!({"env": {"CAFÉ": "x"}})))], ing, None, "spec.configuration.applications[1].env[\"CAFÉ\"]: \"CAFÉ\" contains 'É'".into()),
        (vec![(APPS, custom(json!({"annotations": {"bad key": "x"}})))], ing, None, "spec.configuration.applications[1].annotations[\"bad key\"]: must be a qualified name".into()),
        (vec![(APPS, custom(json!({"annotations": {"-x": "x"}})))], ing, None, "spec.configuration.applications[1].annotations[\"-x\"]: must be a qualified name".into()),
        (vec![(APPS, custom(json!({"annotations": {"a_b/c": "x"}})))], ing, None, "spec.configuration.applications[1].annotations[\"a_b/c\"]: prefix must be a DNS-1123 subdomain".into()),
        (vec![(APPS, custom(json!({"annotations": {long(64): "x"}})))], ing, None, format!("spec.configuration.applications[1].annotations[\"{}\"]: must be a qualified name", long(64))),
        (vec![(APPS, custom(json!({"paths": [{"path": "relative"}]})))], ing, None, "spec.configuration.applications[1].paths[0].path: \"relative\" must start with '/'".into()),
        (vec![(APPS, custom(json!({"paths": [{"path": "/a;b"}]})))], ing, None, "spec.configuration.applications[1].paths[0].path: \"/a;b\" contains ';'".into()),
        (vec![(APPS, custom(json!({"paths": [{"path": "/a{b}"}]})))], ing, None, "spec.configuration.applications[1].paths[0].path: \"/a{b}\" contains '{'".into()),
        (vec![(APPS, custom(json!({"paths": [{"path": "/a b"}]})))], ing, None, "spec.configuration.applications[1].paths[0].path: \"/a b\" contains ' '".into()),
        (vec![(APPS, custom(json!({"paths": [{"path": "/$uri"}]})))], ing, None, "spec.configuration.applications[1].paths[0].path: \"/$uri\" contains '$'".into()),
        (vec![(APPS, custom(json!({"paths": [{"path": "/a#b"}]})))], ing, None, "spec.configuration.applications[1].paths[0].path: \"/a#b\" contains '#'".into()),
        (vec![(APPS, custom(json!({"paths": [{"path": "/x", "path_type": "Regex"}]})))], ing, None, "spec.configuration.applications[1].paths[0].path_type: \"Regex\" is not supported in ingress mode (use Prefix or Exact or ImplementationSpecific)".into()),
        (vec![(APPS, custom(json!({"paths": [{"path": "/x", "path_type": "ImplementationSpecific"}]})))], gw, None, "spec.configuration.applications[1].paths[0].path_type: \"ImplementationSpecific\" is not supported in gateway mode (use Prefix or Exact)".into()),
        (vec![(APPS, custom(json!({"paths": [{"path": "/x", "path_type": ""}]})))], ing, None, "spec.configuration.applications[1].paths[0].path_type: \"\" is not supported in ingress mode".into()),
        (vec![("/spec/configuration/headers", json!({"X A": "v"}))], ing, None, "spec.configuration.headers[\"X A\"]: the header name contains ' '".into()),
        (vec![("/spec/configuration/headers", json!({"X:A": "v"}))], ing, None, "spec.configuration.headers[\"X:A\"]: the header name contains ':'".into()),
        (vec![("/spec/configuration/headers", json!({"": "v"}))], ing, None, "spec.configuration.headers[\"\"]: header names are 1 to 256 characters".into()),
        (vec![("/spec/configuration/headers", json!({"X-A": "a\r\nSet-Cookie: x"}))], ing, None, "spec.configuration.headers[\"X-A\"]: the value contains '\\r'".into()),
        (vec![("/spec/configuration/headers", json!({"X-A": "a\" always; return 200 \""}))], ing, None, "spec.configuration.headers[\"X-A\"]: the value contains '\"'".into()),
        (vec![("/spec/configuration/headers", json!({"X-A": "$host"}))], ing, None, "spec.configuration.headers[\"X-A\"]: the value contains '$'".into()),
        (vec![("/spec/configuration/headers", json!({"X-A": "a\\"}))], ing, None, "spec.configuration.headers[\"X-A\"]: the value contains '\\\\'".into()),
        (vec![("/spec/configuration/quota", json!("lots"))], ing, None, "spec.configuration.quota: \"lots\" is not a quantity".into()),
        (vec![("/spec/configuration/quota", json!("0"))], ing, None, "spec.configuration.quota: \"0\" must be greater than zero".into()),
        (vec![("/spec/configuration/quota", json!("-1Gi"))], ing, None, "spec.configuration.quota: \"-1Gi\" must be greater than zero".into()),
        (vec![("/spec/configuration/quota", json!("1Gi"))], ing, Some(vec![]), "spec.configuration.quota: must not decrease (was 2Gi, now 1Gi): volumes cannot shrink".into()),
        (vec![("/spec/configuration/quota", Value::Null)], ing, Some(vec![]), "spec.configuration.quota: must not be removed once set: volumes cannot shrink".into()),
        (vec![("/spec/configuration/retention_date", json!("2027-13-01"))], ing, None, "spec.configuration.retention_date: \"2027-13-01\" has no month 13".into()),
        (vec![("/spec/configuration/retention_date", json!("2027-02-29"))], ing, None, "spec.configuration.retention_date: \"2027-02-29\" is not a day of that month".into()),
        (vec![("/spec/configuration/retention_date", json!("2027-1-01"))], ing, None, "spec.configuration.retention_date: \"2027-1-01\" is not an ISO 8601 date (YYYY-MM-DD)".into()),
        (vec![("/spec/configuration/retention_date", json!("2027-12-31T00:00:00Z"))], ing, None, "spec.configuration.retention_date: \"2027-12-31T00:00:00Z\" is not an ISO 8601 date (YYYY-MM-DD)".into()),
        (vec![("/spec/configuration/settings/error_handling", json!("custom"))], ing, None, "spec.configuration.settings.error_handling: \"custom\" is not one of \"platform\", \"site\"".into()),
        (vec![("/spec/configuration/settings/resource_limits", json!({"cpu": "0"}))], ing, None, "spec.configuration.settings.resource_limits.cpu: \"0\" must be greater than zero".into()),
        (vec![("/spec/configuration/settings/resource_limits", json!({"cpu": "fast"}))], ing, None, "spec.configuration.settings.resource_limits.cpu: \"fast\" is not a quantity".into()),
        (vec![("/spec/configuration/settings/resource_limits", json!({"memory": "1Mi"}))], ing, None, "spec.configuration.settings.resource_limits.memory: 1Mi is below the platform's request of 32Mi".into()),
        (vec![("/spec/configuration/settings/resource_limits", json!({"cpu": "5m"}))], ing, None, "spec.configuration.settings.resource_limits.cpu: 5m is below the platform's request of 10m".into()),
    ];
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let mut failures = Vec::new();
    for (edits, mode, old, want) in cases {
        let object = with(&edits);
        let (op, old) = match old {
            Some(old_edits) => ("UPDATE", Some(with(&old_edits))),
            None => ("CREATE", None),
        };
        let r = validate_site(&request(op, Some(object), old), &config_for(mode));
        let msgs = messages(&r);
        if r.allowed || !msgs.iter().any(|m| m.starts_with(&want)) || r.result.code != 403 {
            failures.push(format!("{edits:?}\n  want: {want}\n  got:  {msgs:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn valid_edge_cases_table() {
    let long = |n: usize| "a".repeat(n);
    let gw = RoutingMode::Gateway;
    let ing = RoutingMode::Ingress;
    let cases: Vec<(&str, Edits, RoutingMode, Option<Edits>)> = vec![
        (
            "id of 52 characters",
            vec![("/metadata/name", json!(long(52)))],
            ing,
            None,
        ),
        (
            "one-letter id",
            vec![("/metadata/name", json!("a"))],
            ing,
            None,
        ),
        (
            "generateName only",
            vec![
                ("/metadata/name", Value::Null),
                ("/metadata/generateName", json!("docs-")),
            ],
            ing,
            None,
        ),
        (
            "name of 63 characters",
            vec![("/spec/name", json!(long(63)))],
            ing,
            None,
        ),
        (
            "one-character space",
            vec![("/spec/configuration/space", json!("x"))],
            ing,
            None,
        ),
        (
            "digit-leading name",
            vec![("/spec/name", json!("2024-report"))],
            ing,
            None,
        ),
        (
            "port 1",
            vec![(APPS, custom(json!({"port": 1})))],
            ing,
            None,
        ),
        (
            "port 65535",
            vec![(APPS, custom(json!({"port": 65535})))],
            ing,
            None,
        ),
        (
            "app name of 63 characters",
            vec![(APPS, json!([{"name": long(63), "image": "x:1"}]))],
            ing,
            None,
        ),
        (
            "image by digest",
            vec![(
                APPS,
                custom(
                    json!({"image": "ghcr.io/x/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}),
                ),
            )],
            ing,
            None,
        ),
        (
            "registry with port",
            vec![(
                APPS,
                custom(json!({"image": "registry.example.org:5000/team/app:1.0"})),
            )],
            ing,
            None,
        ),
        (
            "built-in with a recorded image",
            vec![(
                APPS,
                json!([{"name": "static", "image": "registry.example.org/sites/static:2.3.0"}]),
            )],
            ing,
            None,
        ),
        (
            "CSP header with ; and quotes",
            vec![(
                "/spec/configuration/headers",
                json!({"Content-Security-Policy": "default-src 'self'; img-src * data:"}),
            )],
            ing,
            None,
        ),
        (
            "empty header value",
            vec![("/spec/configuration/headers", json!({"X-Empty": ""}))],
            ing,
            None,
        ),
        (
            "leap day",
            vec![("/spec/configuration/retention_date", json!("2028-02-29"))],
            ing,
            None,
        ),
        (
            "same quota respelled",
            vec![("/spec/configuration/quota", json!("2048Mi"))],
            ing,
            Some(vec![]),
        ),
        (
            "quota grows",
            vec![("/spec/configuration/quota", json!("5Gi"))],
            ing,
            Some(vec![]),
        ),
        (
            "quota set for the first time",
            vec![],
            ing,
            Some(vec![("/spec/configuration/quota", Value::Null)]),
        ),
        (
            "limits equal to the requests",
            vec![(
                "/spec/configuration/settings/resource_limits",
                json!({"cpu": "10m", "memory": "32Mi"}),
            )],
            ing,
            None,
        ),
        (
            "site error handling",
            vec![("/spec/configuration/settings/error_handling", json!("site"))],
            ing,
            None,
        ),
        (
            "Exact path in gateway mode",
            vec![(
                APPS,
                custom(json!({"paths": [{"path": "/docs/handbook/api", "path_type": "Exact"}]})),
            )],
            gw,
            None,
        ),
        (
            "ImplementationSpecific in ingress mode",
            vec![(
                APPS,
                custom(
                    json!({"paths": [{"path": "/docs/handbook/x", "path_type": "ImplementationSpecific"}]}),
                ),
            )],
            ing,
            None,
        ),
        (
            "dotted lowercase env name",
            vec![(APPS, custom(json!({"env": {"my.var_1": "x"}})))],
            ing,
            None,
        ),
        (
            "prefixed annotation",
            vec![(
                APPS,
                custom(json!({"annotations": {"nginx.org/proxy-read-timeout": "120s"}})),
            )],
            ing,
            None,
        ),
        (
            "zero replicas",
            vec![("/spec/configuration/settings/replicas", json!(0))],
            ing,
            None,
        ),
        (
            "disabled with replicas",
            vec![
                ("/spec/configuration/enabled", json!(false)),
                ("/spec/configuration/settings/replicas", json!(3)),
            ],
            ing,
            None,
        ),
    ];
    assert!(cases.len() >= 20);
    for (case, edits, mode, old) in cases {
        let (op, old) = match old {
            Some(old_edits) => ("UPDATE", Some(with(&old_edits))),
            None => ("CREATE", None),
        };
        let r = validate_site(&request(op, Some(with(&edits)), old), &config_for(mode));
        assert!(r.allowed, "{case}: {}", r.result.message);
    }
}

/// Every limit a Site field has, exactly at the limit (allowed) and one past it (denied naming
/// the exact field path). Limits whose two sides are already in `valid_edge_cases_table` and
/// `invalid_sites_table` (id 52/53, name 63/64, application name 63/64, ports 1/65535 and
/// 0/65536) are not repeated.
#[test]
fn limits_at_and_past_table() {
    let long = |n: usize| "a".repeat(n);
    let ing = RoutingMode::Ingress;
    let gw = RoutingMode::Gateway;
    // A DNS-1123 subdomain of `n` characters (labels of 63, joined by dots).
    let subdomain = |n: usize| {
        let mut out = String::new();
        while out.len() < n {
            if !out.is_empty() {
                out.push('.');
            }
            let take = (n - out.len()).min(63);
            out.push_str(&"a".repeat(take));
        }
        out
    };
    // Paths for the custom application: `plain` of one HTTPRoute rule each, `slashed` of two.
    let paths = |plain: usize, slashed: usize| {
        let paths: Vec<Value> = (0..plain + slashed)
            .map(|i| {
                let slash = if i < slashed { "/" } else { "" };
                json!({"path": format!("/docs/handbook/p{i}{slash}"), "path_type": "Prefix"})
            })
            .collect();
        custom(json!({ "paths": paths }))
    };
    let image = |s: String| custom(json!({ "image": s }));
    let ann = |key: String| custom(json!({"annotations": {key: "x"}}));
    let path = |p: String| custom(json!({"paths": [{"path": "/docs/handbook/api"}, {"path": p}]}));
    let header = |name: String, value: String| json!({ name: value });
    // (case, edits at the limit, edits one past it, mode, expected "field: message" prefix)
    let cases: Vec<(&str, Edits, Edits, RoutingMode, String)> = vec![
        (
            "generateName: 47 + 5 random characters",
            vec![("/metadata/name", Value::Null), ("/metadata/generateName", json!(format!("{}-", long(46))))],
            vec![("/metadata/name", Value::Null), ("/metadata/generateName", json!(format!("{}-", long(47))))],
            ing,
            "metadata.generateName: must be at most 52 characters (is 53)".into(),
        ),
        (
            "space of 63 characters",
            vec![("/spec/configuration/space", json!(long(63)))],
            vec![("/spec/configuration/space", json!(long(64)))],
            ing,
            "spec.configuration.space: must be at most 63 characters (is 64)".into(),
        ),
        (
            "image tag of 128 characters",
            vec![(APPS, image(format!("ghcr.io/x/app:{}", long(128))))],
            vec![(APPS, image(format!("ghcr.io/x/app:{}", long(129))))],
            ing,
            format!("spec.configuration.applications[1].image: \"ghcr.io/x/app:{}\" is not a valid image reference: bad tag", long(129)),
        ),
        (
            "image repository of 255 characters",
            vec![(APPS, image(format!("{}:1", long(255))))],
            vec![(APPS, image(format!("{}:1", long(256))))],
            ing,
            format!("spec.configuration.applications[1].image: \"{}:1\" is not a valid image reference: repository is longer than 255 characters", long(256)),
        ),
        (
            "image reference of 463 characters",
            vec![(APPS, image(format!("a@sha256:{}", "0".repeat(454))))],
            vec![(APPS, image(format!("a@sha256:{}", "0".repeat(455))))],
            ing,
            "spec.configuration.applications[1].image: ".to_string(),
        ),
        (
            "env name: printable ASCII up to '~', not DEL",
            vec![(APPS, custom(json!({"env": {"!~": "x"}})))],
            vec![(APPS, custom(json!({"env": {"!~\u{7f}": "x"}})))],
            ing,
            "spec.configuration.applications[1].env[\"!~\\u{7f}\"]: \"!~\\u{7f}\" contains '\\u{7f}'".into(),
        ),
        (
            "annotation name of 63 characters after the prefix",
            vec![(APPS, ann(format!("example.org/{}", long(63))))],
            vec![(APPS, ann(format!("example.org/{}", long(64))))],
            ing,
            format!("spec.configuration.applications[1].annotations[\"example.org/{}\"]: must be a qualified name", long(64)),
        ),
        (
            "annotation prefix of 253 characters",
            vec![(APPS, ann(format!("{}/x", subdomain(253))))],
            vec![(APPS, ann(format!("{}/x", subdomain(254))))],
            ing,
            format!("spec.configuration.applications[1].annotations[\"{}/x\"]: prefix must be at most 253 characters (is 254)", subdomain(254)),
        ),
        (
            "annotation prefix label of 63 characters",
            vec![(APPS, ann(format!("{}.org/x", long(63))))],
            vec![(APPS, ann(format!("{}.org/x", long(64))))],
            ing,
            format!("spec.configuration.applications[1].annotations[\"{}.org/x\"]: prefix must be a DNS-1123 subdomain", long(64)),
        ),
        (
            "path of 1024 characters",
            vec![(APPS, path(format!("/{}", long(1023))))],
            vec![(APPS, path(format!("/{}", long(1024))))],
            ing,
            "spec.configuration.applications[1].paths[1].path: must be at most 1024 characters (is 1025)".into(),
        ),
        (
            "path of 1024 characters in gateway mode",
            vec![(APPS, path(format!("/{}", long(1023))))],
            vec![(APPS, path(format!("/{}", long(1024))))],
            gw,
            "spec.configuration.applications[1].paths[1].path: must be at most 1024 characters (is 1025)".into(),
        ),
        (
            "16 HTTPRoute rules: the site path and 15 paths",
            vec![(APPS, paths(15, 0))],
            vec![(APPS, paths(16, 0))],
            gw,
            "spec.configuration.applications: the site's paths need 17 HTTPRoute rules; the Gateway API allows at most 16".into(),
        ),
        (
            "16 HTTPRoute rules: slashed Prefix paths need two",
            vec![(APPS, paths(1, 7))],
            vec![(APPS, paths(0, 8))],
            gw,
            "spec.configuration.applications: the site's paths need 17 HTTPRoute rules".into(),
        ),
        (
            "16 HTTPRoute rules of a disabled site",
            vec![("/spec/configuration/enabled", json!(false)), (APPS, paths(15, 0))],
            vec![("/spec/configuration/enabled", json!(false)), (APPS, paths(16, 0))],
            gw,
            "spec.configuration.applications: the site's paths need 17 HTTPRoute rules".into(),
        ),
        (
            "header name of 256 characters",
            vec![("/spec/configuration/headers", header(long(256), "v".into()))],
            vec![("/spec/configuration/headers", header(long(257), "v".into()))],
            ing,
            format!("spec.configuration.headers[\"{}\"]: header names are 1 to 256 characters", long(257)),
        ),
        (
            "header value of 4000 bytes",
            vec![("/spec/configuration/headers", header("X-A".into(), long(4000)))],
            vec![("/spec/configuration/headers", header("X-A".into(), long(4001)))],
            ing,
            "spec.configuration.headers[\"X-A\"]: the value must be at most 4000 bytes (is 4001)".into(),
        ),
        (
            "header value of 4000 bytes, counted in bytes not characters",
            vec![("/spec/configuration/headers", header("X-A".into(), "é".repeat(2000)))],
            vec![("/spec/configuration/headers", header("X-A".into(), format!("{}a", "é".repeat(2000))))],
            ing,
            "spec.configuration.headers[\"X-A\"]: the value must be at most 4000 bytes (is 4001)".into(),
        ),
        (
            "quota of 2^63-1",
            vec![("/spec/configuration/quota", json!("9223372036854775807"))],
            vec![("/spec/configuration/quota", json!("9223372036854775808"))],
            ing,
            "spec.configuration.quota: \"9223372036854775808\" is too large (the limit is 2^63-1)".into(),
        ),
        (
            "quota of 7Ei (8Ei is 2^63)",
            vec![("/spec/configuration/quota", json!("7Ei"))],
            vec![("/spec/configuration/quota", json!("8Ei"))],
            ing,
            "spec.configuration.quota: \"8Ei\" is too large".into(),
        ),
        (
            "smallest quota: 1n",
            vec![("/spec/configuration/quota", json!("1n"))],
            vec![("/spec/configuration/quota", json!("0n"))],
            ing,
            "spec.configuration.quota: \"0n\" must be greater than zero".into(),
        ),
        (
            "memory limit 1Ei",
            vec![("/spec/configuration/settings/resource_limits", json!({"memory": "7Ei"}))],
            vec![("/spec/configuration/settings/resource_limits", json!({"memory": "8Ei"}))],
            ing,
            "spec.configuration.settings.resource_limits.memory: \"8Ei\" is too large".into(),
        ),
        (
            "replicas from 0, not -1",
            vec![("/spec/configuration/settings/replicas", json!(0))],
            vec![("/spec/configuration/settings/replicas", json!(-1))],
            ing,
            "spec.configuration.settings.replicas: must not be negative".into(),
        ),
        (
            "replicas up to i32::MAX",
            vec![("/spec/configuration/settings/replicas", json!(i32::MAX))],
            vec![("/spec/configuration/settings/replicas", json!(i64::from(i32::MAX) + 1))],
            ing,
            "object: not a valid Site: invalid value: integer `2147483648`, expected i32".into(),
        ),
        (
            "retention date up to 9999-12-31",
            vec![("/spec/configuration/retention_date", json!("9999-12-31"))],
            vec![("/spec/configuration/retention_date", json!("10000-01-01"))],
            ing,
            "spec.configuration.retention_date: \"10000-01-01\" is not an ISO 8601 date (YYYY-MM-DD)".into(),
        ),
    ];
    let mut failures = Vec::new();
    for (case, at, past, mode, want) in cases {
        let r = validate_site(&request("CREATE", Some(with(&at)), None), &config_for(mode));
        if !r.allowed {
            failures.push(format!("{case}: at the limit denied: {}", r.result.message));
        }
        let r = validate_site(
            &request("CREATE", Some(with(&past)), None),
            &config_for(mode),
        );
        let msgs = messages(&r);
        if r.allowed || r.result.code != 403 || !msgs.iter().any(|m| m.starts_with(&want)) {
            failures.push(format!(
                "{case}: past the limit\n  want: {want}\n  got:  {msgs:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Ingress mode has no rule limit: the paths that are one too many for an HTTPRoute pass.
    let r = validate_site(
        &request("CREATE", Some(with(&[(APPS, paths(0, 16))])), None),
        &config_for(ing),
    );
    assert!(r.allowed, "{}", r.result.message);
}

/// Injection attempts: values trying to leave their nginx directive, to add YAML, or carrying
/// control characters, are denied naming the field. Values legal by design are in
/// `legal_values_that_look_like_injections_are_allowed` (and the render test proving they stay
/// inside their directive).
#[test]
fn injection_attempts_are_denied_naming_the_field() {
    let ing = RoutingMode::Ingress;
    let gw = RoutingMode::Gateway;
    let headers = |name: &str, value: &str| ("/spec/configuration/headers", json!({ name: value }));
    let path = |p: &str| (APPS, custom(json!({"paths": [{"path": p}]})));
    let header_field = |name: &str| format!("spec.configuration.headers[{name:?}]: ");
    let path_field = "spec.configuration.applications[1].paths[0].path: ";
    // (edits, mode, expected "field: message" prefix)
    let mut cases: Vec<(Edits, RoutingMode, String)> = Vec::new();
    // Header names: only letters, digits, '-' and '_'.
    for name in [
        "X-A;",
        "X-A}",
        "X-A{",
        "X-A\n",
        "X-A$x",
        "X\"A",
        "X\\A",
        "X'A",
        "X#A",
        "include /etc/passwd;",
        "X: A",
        "X-A\r\nX-B",
        "X-A\u{0}",
        "X\u{202e}A",
        "X-Ä",
        "\n  key: value",
        "!!python/object",
    ] {
        cases.push((
            vec![headers(name, "v")],
            ing,
            format!("{}the header name contains", header_field(name)),
        ));
    }
    // Header values: no control characters, no '"', '\' or '$'.
    for value in [
        "a\" always; include /etc/passwd; add_header X \"b",
        "a\nadd_header X-Injected b;",
        "a\r\nSet-Cookie: session=x",
        "$request_uri",
        "${host}",
        "a\\\" always; return 200 \\\"",
        "a\\",
        "\n  key: value",
        "a\n---\n!!python/object:os.system ls",
        "\u{0}",
        "\u{1b}[31mred",
        "a\u{7f}",
        "a\u{85}b",
        "a\tb",
    ] {
        cases.push((
            vec![headers("X-A", value)],
            ing,
            format!("{}the value contains", header_field("X-A")),
        ));
    }
    // Paths: absolute, no whitespace, control characters or nginx syntax, nothing the API
    // server refuses in a route.
    for (p, reason) in [
        ("/a;include /etc/passwd;", "contains ';'"),
        ("/a}", "contains '}'"),
        ("/a{", "contains '{'"),
        ("/a\n", "contains '\\n'"),
        ("/a\r\n  key: value", "contains '\\r'"),
        ("/a\"", "contains '\"'"),
        ("/a'", "contains '\\''"),
        ("/a\\", "contains '\\\\'"),
        ("/a$uri", "contains '$'"),
        ("/a#frag", "contains '#'"),
        ("/a\u{0}", "contains '\\0'"),
        ("/a\u{1b}", "contains '\\u{1b}'"),
        ("/a\u{a0}b", "contains '\\u{a0}'"),
        ("a/b", "must start with '/'"),
        ("", "must start with '/'"),
        ("---", "must start with '/'"),
        ("!!python/object", "must start with '/'"),
        ("/a//b", "contains \"//\""),
        ("/a/./b", "contains \"/./\""),
        ("/a/../etc/passwd", "contains \"/../\""),
        ("/a%2fb", "contains \"%2f\""),
        ("/a%2Fb", "contains \"%2F\""),
        ("/a/..", "ends with \"/..\""),
        ("/a/.", "ends with \"/.\""),
    ] {
        cases.push((vec![path(p)], ing, format!("{path_field}{p:?} {reason}")));
    }
    // Gateway mode: only what an HTTPRoute path match can hold.
    for (p, c) in [
        ("/café", "'é'"),
        ("/a<b>", "'<'"),
        ("/a|b", "'|'"),
        ("/a^b", "'^'"),
        ("/a`b", "'`'"),
        ("/a[0]", "'['"),
        ("/a?x=1", "'?'"),
        ("/a%zz", "'%'"),
        ("/a%2", "'%'"),
        ("/a\u{202e}", "'\\u{202e}'"),
    ] {
        cases.push((
            vec![path(p)],
            gw,
            format!("{path_field}{p:?} contains {c}, which an HTTPRoute path cannot hold"),
        ));
    }
    // Names.
    for (pointer, value, field) in [
        (
            "/metadata/name",
            "a;b",
            "metadata.name: must be a DNS-1035 label",
        ),
        (
            "/metadata/name",
            "a\n  key: value",
            "metadata.name: must be a DNS-1035 label",
        ),
        (
            "/spec/name",
            "handbook;include",
            "spec.name: must be a DNS-1123 label",
        ),
        (
            "/spec/name",
            "x\n  key: value",
            "spec.name: must be a DNS-1123 label",
        ),
        ("/spec/name", "---", "spec.name: must be a DNS-1123 label"),
        (
            "/spec/configuration/space",
            "docs}",
            "spec.configuration.space: must be a DNS-1123 label",
        ),
        (
            "/spec/configuration/space",
            "docs/../x",
            "spec.configuration.space: must be a DNS-1123 label",
        ),
        (
            "/spec/configuration/space",
            "\u{0}",
            "spec.configuration.space: must be a DNS-1123 label",
        ),
        (
            "/spec/configuration/space",
            "!!python/object",
            "spec.configuration.space: must be a DNS-1123 label",
        ),
        ("/spec/owner", "\n\t ", "spec.owner: must not be empty"),
    ] {
        cases.push((vec![(pointer, json!(value))], ing, field.to_string()));
    }
    cases.push((
        vec![(APPS, json!([{"name": "static;include", "image": "x:1"}]))],
        ing,
        "spec.configuration.applications[0].name: must be a DNS-1123 label".into(),
    ));
    // Environment names, annotation keys, images.
    for (key, c) in [
        ("A\nB", "'\\n'"),
        ("A=B;", "'='"),
        ("A B", "' '"),
        ("\u{0}", "'\\0'"),
        ("Ä", "'Ä'"),
    ] {
        cases.push((
            vec![(APPS, custom(json!({"env": {key: "x"}})))],
            ing,
            format!("spec.configuration.applications[1].env[{key:?}]: {key:?} contains {c}"),
        ));
    }
    for key in [
        "nginx.org/location-snippets\n",
        "a;b",
        "example.org/x\n  key: value",
        "---",
    ] {
        cases.push((
            vec![(APPS, custom(json!({"annotations": {key: "x"}})))],
            ing,
            format!("spec.configuration.applications[1].annotations[{key:?}]: "),
        ));
    }
    for image in [
        "ghcr.io/x/app:1\n  key: value",
        "ghcr.io/x/app:1;rm -rf /",
        "ghcr.io/x/app:$TAG",
        "ghcr.io/x/app:1\u{0}",
    ] {
        cases.push((
            vec![(APPS, custom(json!({ "image": image })))],
            ing,
            format!(
                "spec.configuration.applications[1].image: {image:?} is not a valid image reference"
            ),
        ));
    }
    // Error handling (which error pages nginx serves), quantities, dates.
    for value in [
        "site; include /etc/passwd;",
        "platform\n",
        "platform }",
        "site\n---\nkey: value",
        "$site",
    ] {
        cases.push((
            vec![("/spec/configuration/settings/error_handling", json!(value))],
            ing,
            format!("spec.configuration.settings.error_handling: {value:?} is not one of \"platform\", \"site\""),
        ));
    }
    for (pointer, value, field) in [
        (
            "/spec/configuration/quota",
            "1Gi;",
            "spec.configuration.quota: \"1Gi;\" is not a quantity",
        ),
        (
            "/spec/configuration/quota",
            "1Gi\n---",
            "spec.configuration.quota: \"1Gi\\n---\" is not a quantity",
        ),
        (
            "/spec/configuration/settings/resource_limits/cpu",
            "1; include",
            "spec.configuration.settings.resource_limits.cpu: \"1; include\" is not a quantity",
        ),
        (
            "/spec/configuration/retention_date",
            "2027-01-01\n",
            "spec.configuration.retention_date: \"2027-01-01\\n\" is not an ISO 8601 date",
        ),
        (
            "/spec/configuration/retention_date",
            "2027-01-01; drop",
            "spec.configuration.retention_date: \"2027-01-01; drop\" is not an ISO 8601 date",
        ),
    ] {
        cases.push((vec![(pointer, json!(value))], ing, field.to_string()));
    }
    assert!(cases.len() >= 90, "{} cases", cases.len());
    let mut failures = Vec::new();
    for (edits, mode, want) in cases {
        let r = validate_site(
            &request("CREATE", Some(with(&edits)), None),
            &config_for(mode),
        );
        let msgs = messages(&r);
        if r.allowed || r.result.code != 403 || !msgs.iter().any(|m| m.starts_with(&want)) {
            failures.push(format!("{edits:?}\n  want: {want}\n  got:  {msgs:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Values that look like injections but are legal by design: a header value is written inside
/// double quotes, so ';', '{', '}', '#' and quotes of the other kind stay part of the string
/// (CSP needs ';' and '\''); environment values, owners and descriptions never reach nginx or a
/// YAML text. The render tests show what they become.
#[test]
fn legal_values_that_look_like_injections_are_allowed() {
    let ing = RoutingMode::Ingress;
    let cases: Vec<(&str, Edits)> = vec![
        (
            "CSP header",
            vec![(
                "/spec/configuration/headers",
                json!({"Content-Security-Policy": "default-src 'self'; script-src 'none'"}),
            )],
        ),
        (
            "braces and a hash in a header",
            vec![(
                "/spec/configuration/headers",
                json!({"X-A": "} include /etc/passwd; { # x"}),
            )],
        ),
        (
            "YAML-looking header value",
            vec![(
                "/spec/configuration/headers",
                json!({"X-A": "--- !!python/object:os.system key: value"}),
            )],
        ),
        (
            "non-ASCII header value",
            vec![(
                "/spec/configuration/headers",
                json!({"X-A": "ünïcödé \u{2028}"}),
            )],
        ),
        (
            "env value with nginx and YAML syntax",
            vec![(
                APPS,
                custom(
                    json!({"env": {"A": "x\"; } include /etc/passwd; $host \\\n  key: value\n---\n!!python/object:os.system"}}),
                ),
            )],
        ),
        (
            "owner with YAML",
            vec![("/spec/owner", json!("jdoe\nSITE_ID: other\n---"))],
        ),
        (
            "description with control characters",
            vec![("/spec/description", json!("a\u{0}b\u{1b}[31m"))],
        ),
        (
            "annotation value with a snippet",
            vec![(
                APPS,
                custom(json!({"annotations": {"example.org/x": "a; }\n---"}})),
            )],
        ),
        (
            "ingress path with non-ASCII",
            vec![(APPS, custom(json!({"paths": [{"path": "/docs/café"}]})))],
        ),
        (
            "percent escapes",
            vec![(APPS, custom(json!({"paths": [{"path": "/docs/a%20b"}]})))],
        ),
    ];
    for (case, edits) in cases {
        let r = validate_site(
            &request("CREATE", Some(with(&edits)), None),
            &config_for(ing),
        );
        assert!(r.allowed, "{case}: {}", r.result.message);
    }
    // The percent escape is legal in gateway mode too.
    let edits = vec![(APPS, custom(json!({"paths": [{"path": "/docs/a%20b"}]})))];
    let r = validate_site(
        &request("CREATE", Some(with(&edits)), None),
        &config_gateway(),
    );
    assert!(r.allowed, "{}", r.result.message);
}

/// A header name holding ": " keeps its whole quoted key as the field path.
#[test]
fn field_paths_of_keys_holding_a_colon_stay_whole() {
    let edits = vec![(
        "/spec/configuration/headers",
        json!({"X-Frame-Options: DENY": "v"}),
    )];
    let r = validate_site(&request("CREATE", Some(with(&edits)), None), &config());
    let causes = r.result.details.unwrap().causes;
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(
        causes[0].field,
        "spec.configuration.headers[\"X-Frame-Options: DENY\"]"
    );
    assert!(
        causes[0]
            .message
            .starts_with("the header name contains ':'"),
        "{}",
        causes[0].message
    );
}

/// The configuration that breaks every rule it can at once, through the webhook: denied with
/// one cause per problem, each naming its key, for the first [`crate::validation::MAX_LISTED`]
/// problems, those in the message too, and the count of the rest.
#[test]
fn a_configuration_breaking_every_rule_is_denied_listing_every_key() {
    let text = include_str!("../config/testdata/every-rejection.yaml");
    let r = validate_config(&configmap_request(
        "sites-config",
        json!({ "config.yaml": text }),
    ));
    assert!(!r.allowed);
    assert_eq!(
        (r.result.code, r.result.reason.as_str()),
        (403, "Forbidden")
    );
    let causes = r.result.details.clone().unwrap().causes;
    let direct = match config::validate_configmap_data(
        Some(&[("config.yaml".to_string(), text.to_string())].into()),
        &Installation {
            namespace: Some("sites"),
        },
    ) {
        Err(config::ConfigError::Invalid(problems)) => problems,
        other => panic!("{other:?}"),
    };
    let listed = crate::validation::MAX_LISTED;
    assert!(direct.len() >= 60, "{} problems", direct.len());
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    let keys: Vec<&str> = direct.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, keys[..listed]);
    for problem in &direct[..listed] {
        assert!(
            r.result.message.contains(&problem.to_string()),
            "{problem} missing from {}",
            r.result.message
        );
    }
    assert!(
        r.result
            .message
            .ends_with(&format!("; and {} more", direct.len() - listed)),
        "{}",
        r.result.message
    );
    assert!(!r.result.message.contains(&direct[listed].to_string()));
}

/// An object whose apiVersion or kind says it is not a Site is denied as such, even when its
/// shape would decode as a Site.
#[test]
fn objects_of_another_kind_are_denied_naming_the_object() {
    for (api_version, kind) in [
        ("v1", "ConfigMap"),
        ("sites.ecmwf.int/v2", "Site"),
        ("sites.ecmwf.int/v1", "Sites"),
    ] {
        let object = handbook()
            .edit(|s| {
                s["apiVersion"] = json!(api_version);
                s["kind"] = json!(kind);
            })
            .json();
        let r = validate_site(&request("CREATE", Some(object), None), &config());
        assert!(!r.allowed, "{api_version} {kind}");
        assert_eq!(
            messages(&r),
            [format!(
                "object: kind {kind:?} of apiVersion {api_version:?} is not a Site (sites.ecmwf.int/v1)"
            )]
        );
    }
}

#[test]
fn the_typed_path_checks_share_lists_without_keeping_them() {
    let cfg = config();
    let mut shared = handbook().json();
    shared["spec"]["configuration"]["share"] =
        json!({"administrator_users": ["jdoe"], "users": ["a", "b"], "groups": ["g"]});
    let body = review_body("CREATE", Some(shared.clone()), None);
    let typed_body = review::SiteBody::new(&body).unwrap();
    let typed = typed_body.decode().expect("a Site decodes typed");
    let share = typed
        .object
        .as_ref()
        .unwrap()
        .spec
        .configuration
        .share
        .clone();
    assert_eq!(share, Some(Default::default()), "checked, not kept");
    assert!(super::validate_site(&typed, &cfg, &Platform::default()).allowed);
    // The generic path keeps them; the answers agree (`validate_site` compares both paths).
    let req = request("CREATE", Some(shared.clone()), None);
    assert!(validate_site(&req, &cfg).allowed);
    // A list that is not of strings fails the typed decode; the generic path names it.
    shared["spec"]["configuration"]["share"]["users"] = json!(["a", 1]);
    let denied = generic_denial(&review_body("CREATE", Some(shared), None), &cfg);
    assert!(
        denied[0].contains("invalid type: integer `1`, expected a string"),
        "{denied:?}"
    );
}

/// The messages of the denial of a body that does not decode typed (the generic path answers).
fn generic_denial(body: &[u8], cfg: &PlatformConfig) -> Vec<String> {
    assert!(
        review::SiteBody::new(body)
            .and_then(|b| b.decode().map(|_| ()))
            .is_err()
    );
    let r = super::validate_site(&review::decode(body).unwrap(), cfg, &Platform::default());
    assert!(!r.allowed);
    messages(&r)
}

#[test]
fn a_body_that_is_not_utf8_is_refused_with_where_it_goes_wrong() {
    let mut body = review_body("CREATE", Some(handbook().json()), None);
    // One byte that cannot start a UTF-8 character, near the end of the body (past the blocks
    // a SIMD check takes at a time).
    let at = body.len() - 10;
    body[at] = 0xff;
    for decoded in [
        review::SiteBody::new(&body).map(|_| ()),
        review::decode(&body).map(|_| ()),
    ] {
        let err = decoded.expect_err("not UTF-8");
        assert_eq!(
            err,
            format!(
                "the body is not an AdmissionReview: not UTF-8 text: invalid utf-8 sequence of 1 bytes from index {at}"
            )
        );
    }
    // Multi-byte characters are text.
    let text = review_body("CREATE", Some(handbook().json()), None);
    let accented = String::from_utf8(text)
        .unwrap()
        .replace("handbook", "hàndbøøk");
    assert!(review::decode(accented.as_bytes()).is_ok());
}

#[test]
fn sites_take_the_typed_path_and_other_objects_the_generic_one() {
    let body = |object: Value| review_body("CREATE", Some(object), None);
    let cfg = config();
    let handbook_body = body(handbook().json());
    let typed_body = review::SiteBody::new(&handbook_body).unwrap();
    let typed = typed_body.decode().expect("a Site decodes typed");
    assert_eq!(typed.types.kind, "AdmissionReview");
    assert!(super::validate_site(&typed, &cfg, &Platform::default()).allowed);
    // A ConfigMap does not decode as a Site; the generic path names the problem.
    let cm = body(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}),
    );
    let denied = generic_denial(&cm, &cfg);
    assert!(denied[0].starts_with("object: "), "{denied:?}");
    // A Site-shaped object of another kind decodes typed and is still refused.
    let mut other = handbook().json();
    other["kind"] = json!("Pod");
    let other_body = body(other);
    let typed_body = review::SiteBody::new(&other_body).unwrap();
    let typed = typed_body.decode().unwrap();
    let r = super::validate_site(&typed, &cfg, &Platform::default());
    assert_eq!(
        messages(&r),
        vec![
            "object: kind \"Pod\" of apiVersion \"sites.ecmwf.int/v1\" is not a Site (sites.ecmwf.int/v1)"
        ]
    );
}

/// The typed path's metadata decoding (`admission_meta`, `own_annotations`, `SkippedString`):
/// this operator's annotations are kept, others are skipped but must still be strings that the
/// generic path accepts; each case decodes (or fails) exactly as a generic JSON tree does.
#[test]
fn typed_metadata_keeps_own_annotations_and_checks_skipped_ones() {
    /// Case name, the object's metadata, the annotations kept (None: not checked).
    type Case<'a> = (&'a str, &'a str, Option<&'a [(&'a str, &'a str)]>);
    let cases: &[Case] = &[
        ("no annotations", r#"{"name": "s"}"#, None),
        ("null annotations", r#"{"annotations": null}"#, None),
        (
            "own kept, foreign skipped",
            r#"{"annotations": {"sites.ecmwf.int/upgrade-request": "force", "a": "b"}}"#,
            Some(&[("sites.ecmwf.int/upgrade-request", "force")]),
        ),
        (
            "escaped JSON document skipped",
            r#"{"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"a\":\"\\\"q\\\"\",\"b\":[1,2]}\n"}}"#,
            Some(&[]),
        ),
        (
            "valid unicode escapes skipped",
            r#"{"annotations": {"a": "\u003c\u00e9\ud83d\ude00"}}"#,
            Some(&[]),
        ),
        ("number", r#"{"annotations": {"a": 1}}"#, None),
        ("object", r#"{"annotations": {"a": {"b": "c"}}}"#, None),
        ("null value", r#"{"annotations": {"a": null}}"#, None),
        (
            "lone surrogate",
            r#"{"annotations": {"a": "\ud800"}}"#,
            None,
        ),
        ("bad escape", r#"{"annotations": {"a": "\q"}}"#, None),
        (
            "own annotation not a string",
            r#"{"annotations": {"sites.ecmwf.int/x": 1}}"#,
            None,
        ),
    ];
    for (case, metadata, kept) in cases {
        let object = format!(
            r#"{{"apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "metadata": {metadata}, "spec": {}}}"#,
            serde_json::to_string(&handbook().json()["spec"]).unwrap()
        );
        let generic_ok = serde_json::from_str::<Value>(&object).is_ok_and(|v| {
            v["metadata"]["annotations"]
                .as_object()
                .is_none_or(|a| a.values().all(Value::is_string))
        });
        let typed = serde_json::from_str::<SiteObject>(&object);
        assert_eq!(typed.is_ok(), generic_ok, "{case}: {:?}", typed.err());
        if let (Ok(typed), Some(kept)) = (typed, kept) {
            let got: Vec<(&str, &str)> = typed
                .metadata
                .annotations
                .iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(&got, kept, "{case}");
        }
    }
}

/// A Site directory answering from a fixed list: (name, path) of the stored Sites.
struct Directory(Vec<(&'static str, &'static str)>);

impl SiteDirectory for Directory {
    fn path_users(&self, _namespace: &str, site: &str, site_path: &str) -> Vec<String> {
        let path = format!("{site_path}/");
        self.0
            .iter()
            .filter(|(name, p)| *p == path && *name != site)
            .map(|(name, _)| name.to_string())
            .collect()
    }
}

fn platform(stored: Vec<(&'static str, &'static str)>) -> Platform {
    let platform = Platform {
        reserved: vec![
            "sites-operator-webhook".into(),
            "sites-operator-webhook-tls".into(),
            "sites-operator".into(),
        ],
        ..Default::default()
    };
    let _ = platform.sites.set(Arc::new(Directory(stored)));
    platform
}

/// Validates both ways (generic and typed) with `platform`; the answers must be the same.
fn validate_in(req: &AdmissionRequest<DynamicObject>, platform: &Platform) -> AdmissionResponse {
    let generic = super::validate_site(req, &config(), platform);
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req
    }))
    .unwrap();
    let typed_body = review::SiteBody::new(&body).unwrap();
    let typed = super::validate_site(&typed_body.decode().unwrap(), &config(), platform);
    assert_eq!(
        serde_json::to_value(typed.into_review()).unwrap(),
        serde_json::to_value(generic.clone().into_review()).unwrap(),
    );
    generic
}

#[test]
fn one_path_one_site() {
    let platform = platform(vec![
        ("docs-handbook", "/docs/handbook/"),
        ("other", "/docs/other/"),
    ]);
    let twin = handbook().edit(|s| s["metadata"]["name"] = json!("handbook-copy"));
    let r = validate_in(
        &request("CREATE", Some(twin.clone().json()), None),
        &platform,
    );
    assert!(!r.allowed);
    assert_eq!(
        messages(&r),
        [
            "spec.configuration.space: the path /docs/handbook/ is already used by Site docs-handbook"
        ]
    );
    // The Site itself, another path, and a cache not synced yet: allowed.
    let itself = handbook().json();
    assert!(
        validate_in(
            &request("UPDATE", Some(itself.clone()), Some(itself)),
            &platform
        )
        .allowed
    );
    let elsewhere = twin
        .clone()
        .edit(|s| s["spec"]["name"] = json!("guide"))
        .json();
    assert!(validate_in(&request("CREATE", Some(elsewhere), None), &platform).allowed);
    let unsynced = Platform::default();
    assert!(validate_in(&request("CREATE", Some(twin.json()), None), &unsynced).allowed);
}

#[test]
fn platform_object_names_are_reserved() {
    let platform = platform(vec![]);
    for (id, denied) in [
        ("sites-session", true),
        ("sites-config", true),
        ("sites-operator-webhook", true),
        ("sites-operator-metrics", true),
        ("sites-operator", true),
        ("sites-ingress-master", true),
        ("sites", false),
        ("sites-operator-docs", false),
    ] {
        let site = handbook()
            .edit(|s| s["metadata"]["name"] = json!(id))
            .json();
        let r = validate_in(&request("CREATE", Some(site), None), &platform);
        assert_eq!(!r.allowed, denied, "{id}: {:?}", messages(&r));
        if denied {
            let m = messages(&r);
            assert_eq!(m.len(), 1, "{m:?}");
            assert!(
                m[0].starts_with(&format!("metadata.name: {id:?} is reserved")),
                "{m:?}"
            );
        }
    }
}

#[test]
fn updates_ratchet_rules_on_fields_they_leave_unchanged() {
    // Stored before the header rule tightened: a value with '$', and a valid header.
    let stored = handbook()
        .header("X-Var", "$host")
        .header("X-Ok", "1")
        .json();
    let ok = |r: &AdmissionResponse| (r.allowed, messages(r));
    // Archiving, annotating or upgrading leave the header alone: allowed.
    for edit in [
        json!({"spec": {"configuration": {"enabled": false}}}),
        json!({"metadata": {"annotations": {UPGRADE_REQUEST_ANNOTATION: UUID_A}}}),
        json!({"spec": {"configuration": {"applications": [{"name": "static", "image": "registry.example.org/sites/static:2.5.0"}]}}}),
    ] {
        let mut new = stored.clone();
        json_patch::merge(&mut new, &edit);
        let r = validate_site(
            &request("UPDATE", Some(new), Some(stored.clone())),
            &config(),
        );
        assert_eq!(ok(&r), (true, vec![]), "{edit}");
    }
    // Changing the header to another bad value, or breaking another field: denied, naming only
    // what the update touched.
    let mut changed = stored.clone();
    json_patch::merge(
        &mut changed,
        &json!({"spec": {"configuration": {"headers": {"X-Var": "$uri"}}}}),
    );
    let r = validate_site(
        &request("UPDATE", Some(changed), Some(stored.clone())),
        &config(),
    );
    assert_eq!(
        messages(&r),
        [
            r#"spec.configuration.headers["X-Var"]: the value contains '$', which could inject nginx directives (control characters, '"', '\' and '$' are not allowed)"#
        ]
    );
    let mut other = stored.clone();
    json_patch::merge(
        &mut other,
        &json!({"spec": {"configuration": {"headers": {"X-Ok": "a\"b"}}}}),
    );
    let r = validate_site(
        &request("UPDATE", Some(other), Some(stored.clone())),
        &config(),
    );
    assert_eq!(messages(&r).len(), 1, "{:?}", messages(&r));
    assert!(messages(&r)[0].starts_with(r#"spec.configuration.headers["X-Ok"]"#));
    // A CREATE of the same stored object gets every rule.
    assert!(!validate_site(&request("CREATE", Some(stored), None), &config()).allowed);
    // A violation new to the update is denied even on a field it did not change: two
    // applications whose ports collide because the other one changed.
    let two = handbook()
        .configuration(
            "applications",
            json!([{"name": "a", "image": "x:1", "port": 8000}, {"name": "b", "image": "x:1", "port": 9000}]),
        )
        .json();
    let mut collide = two.clone();
    collide["spec"]["configuration"]["applications"][1]["port"] = json!(8000);
    let r = validate_site(&request("UPDATE", Some(collide), Some(two)), &config());
    assert!(!r.allowed);
}

#[test]
fn built_in_images_are_recorded_on_create() {
    let site = handbook()
        .configuration(
            "applications",
            json!([
                {"name": "static"},
                {"name": "app", "image": "ghcr.io/x/app:1"},
                {"name": "site-api", "image": "registry.example.org/sites/site-api:2.3.0"},
                {"name": "oauth2-proxy"}
            ]),
        )
        .json();
    let r = mutate_site(
        &request("CREATE", Some(site.clone()), None),
        &config(),
        || uuid::Uuid::parse_str(FRESH).unwrap(),
    );
    let patch: Value = serde_json::from_slice(r.patch.as_ref().expect("a patch")).unwrap();
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/spec/configuration/applications/0/image", "value": "registry.example.org/sites/static:2.4.0"},
            {"op": "add", "path": "/spec/configuration/applications/3/image", "value": "registry.example.org/sites/oauth2-proxy:2.4.0"}
        ])
    );
    // The typed decoding answers the same.
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": request("CREATE", Some(site.clone()), None)
    }))
    .unwrap();
    let typed_body = review::SiteBody::new(&body).unwrap();
    let typed = mutate_site(&typed_body.decode().unwrap(), &config(), || {
        uuid::Uuid::parse_str(FRESH).unwrap()
    });
    assert_eq!(typed.patch, r.patch);
    // An object of another version or kind is no Site: nothing recorded, on either decoding.
    let mut other = site.clone();
    other["apiVersion"] = json!("sites.ecmwf.int/v2");
    let r = mutate_site(
        &request("CREATE", Some(other.clone()), None),
        &config(),
        || uuid::Uuid::parse_str(FRESH).unwrap(),
    );
    assert!(r.patch.is_none());
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": request("CREATE", Some(other), None)
    }))
    .unwrap();
    let typed_body = review::SiteBody::new(&body).unwrap();
    let typed = mutate_site(&typed_body.decode().unwrap(), &config(), || {
        uuid::Uuid::parse_str(FRESH).unwrap()
    });
    assert!(typed.patch.is_none());
    // An update of a Site that records its images changes none of them.
    let r = mutate_site(
        &request("UPDATE", Some(site.clone()), Some(site)),
        &config(),
        || uuid::Uuid::parse_str(FRESH).unwrap(),
    );
    assert!(r.patch.is_none());
}

/// SPEC 5 and 4.7: on UPDATE, a built-in application the request names without an image keeps
/// the stored Site's; an image in the request wins; an application new to the Site starts at the
/// catalogue image; what the stored Site does not record is not recorded now (the reconciler's
/// pin keeps it). Both decodings answer the same, for real and dry-run requests.
#[test]
fn an_update_without_images_keeps_the_stored_ones() {
    let apps = |v: Value| handbook().configuration("applications", v).json();
    let stored = apps(json!([
        {"name": "static", "image": "registry.example.org/sites/static:2.3.0"},
        {"name": "app", "image": "ghcr.io/x/app:1"},
        {"name": "oauth2-proxy"}
    ]));
    let add = |i: usize, image: &str| json!({"op": "add", "path": format!("/spec/configuration/applications/{i}/image"), "value": image});
    let cases = [
        (
            "a re-applied manifest without images keeps the stored image",
            apps(
                json!([{"name": "app", "image": "ghcr.io/x/app:1"}, {"name": "static"}, {"name": "oauth2-proxy"}]),
            ),
            Some(stored.clone()),
            vec![add(1, "registry.example.org/sites/static:2.3.0")],
        ),
        (
            "an image written in the manifest wins",
            apps(json!([{"name": "static", "image": "registry.example.org/sites/static:2.5.0"}])),
            Some(stored.clone()),
            vec![],
        ),
        (
            "a built-in application new to the Site starts at the platform version",
            apps(json!([{"name": "static"}, {"name": "site-api"}])),
            Some(stored.clone()),
            vec![
                add(0, "registry.example.org/sites/static:2.3.0"),
                add(1, "registry.example.org/sites/site-api:2.4.0"),
            ],
        ),
        (
            "what the stored Site does not record is not recorded now",
            apps(json!([{"name": "oauth2-proxy"}])),
            Some(stored.clone()),
            vec![],
        ),
        (
            "a custom application without an image gets none",
            apps(json!([{"name": "mine"}])),
            Some(stored.clone()),
            vec![],
        ),
        (
            "a stored object that is no Site: nothing to keep",
            apps(json!([{"name": "static"}])),
            Some(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "docs-handbook"}}),
            ),
            vec![],
        ),
    ];
    for (case, object, old, want) in cases {
        for dry_run in [false, true] {
            let mut review = review("UPDATE", Some(object.clone()), old.clone());
            review["request"]["dryRun"] = json!(dry_run);
            let req: AdmissionRequest<DynamicObject> = serde_json::from_value::<
                kube::core::admission::AdmissionReview<DynamicObject>,
            >(review.clone())
            .unwrap()
            .try_into()
            .unwrap();
            let fresh = || uuid::Uuid::parse_str(FRESH).unwrap();
            let r = mutate_site(&req, &config(), fresh);
            let patch: Value = r
                .patch
                .as_ref()
                .map_or(json!([]), |p| serde_json::from_slice(p).unwrap());
            assert_eq!(patch, Value::Array(want.clone()), "{case}");
            let body = serde_json::to_vec(&review).unwrap();
            let typed_body = review::SiteBody::new(&body).unwrap();
            if let Ok(typed_req) = typed_body.decode() {
                let typed = mutate_site(&typed_req, &config(), fresh);
                assert_eq!(typed.patch, r.patch, "{case}: typed decoding");
            }
        }
    }
}

/// The Site handlers' lean decoding accepts and refuses the same reviews as the full one, and
/// reads the same values for what the handlers use.
#[test]
fn lean_site_decoding_agrees_with_the_full_decoding() {
    let full = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "resource": {"group": "sites.ecmwf.int", "version": "v1", "resource": "sites"},
            "requestKind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "subResource": "", "name": "docs-handbook", "namespace": "sites",
            "operation": "UPDATE",
            "userInfo": {"username": "jdoe", "groups": ["a"], "extra": {"k": ["v"]}},
            "object": handbook().json(), "oldObject": handbook().json(),
            "dryRun": true,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}
        }
    });
    let without = |field: &str| {
        let mut v = full.clone();
        v["request"].as_object_mut().unwrap().remove(field);
        v
    };
    let with = |field: &str, value: serde_json::Value| {
        let mut v = full.clone();
        v["request"][field] = value;
        v
    };
    let cases = [
        full.clone(),
        without("resource"),
        without("userInfo"),
        without("uid"),
        without("operation"),
        without("object"),
        without("options"),
        with("operation", json!("MOVE")),
        with("dryRun", json!("yes")),
        with("kind", json!("Site")),
        json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": full["request"]}),
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
    ];
    for (i, case) in cases.iter().enumerate() {
        let body = serde_json::to_vec(case).unwrap();
        let typed_body = review::SiteBody::new(&body).unwrap();
        let lean = typed_body.decode();
        let whole = review::decode_site_text(std::str::from_utf8(&body).unwrap());
        assert_eq!(
            lean.is_ok(),
            whole.is_ok(),
            "case {i}: {lean:?} / {whole:?}"
        );
        if let (Ok(l), Ok(w)) = (lean, whole) {
            assert_eq!(
                (&l.types, &l.uid, &l.kind, &l.name, &l.namespace, l.dry_run),
                (&w.types, &w.uid, &w.kind, &w.name, &w.namespace, w.dry_run),
                "case {i}"
            );
            assert_eq!(format!("{:?}", l.operation), format!("{:?}", w.operation));
            assert_eq!(format!("{:?}", l.object), format!("{:?}", w.object));
            assert_eq!(format!("{:?}", l.old_object), format!("{:?}", w.old_object));
        }
    }
}

/// The `kubectl apply` annotation is cut out before decoding where the API server writes it
/// (`applied`), and the request is the one the whole body gives. The same key in a user's map
/// (route annotations, headers) is not the annotation: such a body is decoded whole, the user's
/// value kept.
#[test]
fn the_apply_annotation_is_cut_from_the_metadata_only() {
    /// Whether the cut body of `site`'s UPDATE review is taken, and the object `decode_site`
    /// gives, checked against the whole body's decoding.
    fn decode(site: &Value) -> (bool, Value) {
        let body = review_body("UPDATE", Some(site.clone()), Some(site.clone()));
        let text = std::str::from_utf8(&body).unwrap();
        let cut = review::applied::Cut::of(text).expect("a cut");
        let taken = cut.decode(review::decode_site_text).is_some();
        let typed_body = review::SiteBody::new(&body).unwrap();
        let lean = typed_body.decode().unwrap();
        let whole = review::decode_site_text(text).unwrap();
        assert_eq!(format!("{:?}", lean.object), format!("{:?}", whole.object));
        assert_eq!(
            format!("{:?}", lean.old_object),
            format!("{:?}", whole.old_object)
        );
        (taken, serde_json::to_value(lean.object.unwrap()).unwrap())
    }

    let mut site = handbook().json();
    site["metadata"]["annotations"] = json!({
        review::applied::ANNOTATION: serde_json::to_string(&site).unwrap(),
        "sites.ecmwf.int/upgrade-request": "force",
    });
    let (taken, object) = decode(&site);
    assert!(taken, "the cut body is taken");
    assert_eq!(
        object["metadata"]["annotations"],
        json!({"sites.ecmwf.int/upgrade-request": "force"})
    );

    for place in ["headers", "applications"] {
        let mut users = site.clone();
        let map = json!({review::applied::ANNOTATION: "the user's value"});
        users["spec"]["configuration"][place] = if place == "headers" {
            map
        } else {
            json!([{"name": "static", "annotations": map}])
        };
        let (taken, object) = decode(&users);
        assert!(!taken, "{place}: a cut outside the metadata is refused");
        assert!(object.to_string().contains("the user's value"), "{place}");
    }
}

/// The review reader reads what the API server sends (compact JSON with the apply annotation,
/// managed fields and a status; `&`, `<` and `>` escaped as `\u0026`, `\u003c`, `\u003e`, as
/// Go's encoder writes them), to the request serde_json decodes. Beyond its subset (a fraction,
/// `-0`), serde_json decodes the body and decides.
#[test]
fn the_review_reader_reads_api_server_bodies_as_serde_json_does() {
    let mut site = handbook().json();
    site["spec"]["configuration"]["headers"] = json!({"X-Note": "a & b <c> \u{e9}\u{1f600}"});
    site["metadata"]["annotations"] = json!({
        review::applied::ANNOTATION: serde_json::to_string(&site).unwrap(),
        "sites.ecmwf.int/upgrade-request": "force",
    });
    site["metadata"]["managedFields"] = json!([{
        "manager": "kubectl-client-side-apply", "operation": "Update",
        "apiVersion": "sites.ecmwf.int/v1", "time": "2026-11-02T16:45:10Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}, "f:spec": {".": {}}}
    }]);
    site["status"] = json!({
        "phase": "Running", "path": "/docs/handbook/", "observedGeneration": 3,
        "conditions": [{"type": "Available", "status": "True", "reason": "Ready",
            "message": "ready", "lastTransitionTime": "2026-11-02T16:45:10Z",
            "observedGeneration": 3}]
    });
    let go_escaped = |text: &str| {
        text.replace('&', "\\u0026")
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
    };
    for (operation, object, old) in [
        ("CREATE", Some(site.clone()), None),
        ("UPDATE", Some(site.clone()), Some(site.clone())),
        ("DELETE", None, Some(site.clone())),
    ] {
        let body = String::from_utf8(review_body(operation, object, old)).unwrap();
        for text in [body.clone(), go_escaped(&body)] {
            let typed_body = review::SiteBody::new(text.as_bytes()).unwrap();
            assert!(same_read_as_serde_json(&typed_body), "{operation}: {text}");
            let req = typed_body.read().unwrap().expect("a request");
            let headers = &req
                .object
                .as_ref()
                .or(req.old_object.as_ref())
                .unwrap()
                .spec;
            assert_eq!(
                headers.configuration.headers.values().next().map(|v| &**v),
                Some("a & b <c> \u{e9}\u{1f600}")
            );
        }
    }

    let body = String::from_utf8(review_body("CREATE", Some(site.clone()), None)).unwrap();
    for (beyond, replaced) in [
        (
            "a fraction",
            body.replace(
                "\"observedGeneration\":3,\"path",
                "\"observedGeneration\":3.0,\"path",
            ),
        ),
        (
            "-0",
            body.replace("\"dryRun\":false", "\"dryRun\":false,\"x\":-0"),
        ),
    ] {
        assert_ne!(replaced, body, "{beyond}");
        let typed_body = review::SiteBody::new(replaced.as_bytes()).unwrap();
        assert!(typed_body.read().is_none(), "{beyond}");
        assert_eq!(
            format!("{:?}", typed_body.decode()),
            format!("{:?}", typed_body.decode_with_serde_json()),
            "{beyond}"
        );
    }
}

/// What a review takes to decode and judge stays within [`server::decode_cost`], the budget a
/// request holds for it, on the shapes that expand most; the generic decoding, which the server
/// no longer uses, takes many times more on the same bodies.
mod memory {
    use serde_json::{Value, json};

    use super::server::{self, MUTATE_SITES, VALIDATE_CONFIG, VALIDATE_SITES, decode_cost};
    use crate::testing::measure;

    const N: usize = 1 << 20;

    fn review(object: Value, kind: &str, operation: &str, old: Option<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "kind": {"group": "sites.ecmwf.int", "version": "v1", "kind": kind},
                "resource": {"group": "", "version": "v1", "resource": "x"},
                "name": "sites-config", "namespace": "sites", "operation": operation,
                "userInfo": {"username": "a"}, "object": object, "oldObject": old
            }
        }))
        .unwrap()
    }

    fn site(configuration: Value) -> Value {
        let mut spec = json!({"name": "h", "owner": "jdoe", "type": "static",
            "configuration": {"space": "docs", "applications": [{"name": "static"}]}});
        for (k, v) in configuration.as_object().unwrap() {
            spec["configuration"][k] = v.clone();
        }
        json!({"apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
               "metadata": {"name": "h", "namespace": "sites"}, "spec": spec})
    }

    /// `count` entries `"k<i>": value` (short keys, the most overhead per byte).
    fn map(count: usize, value: Value) -> Value {
        Value::Object(
            (0..count)
                .map(|i| (format!("k{i}"), value.clone()))
                .collect(),
        )
    }

    fn site_bodies() -> Vec<(&'static str, Vec<u8>)> {
        let zeros = Value::Array(vec![json!(0); N / 2]);
        let strings = map(N / 12, json!("v"));
        let mut not_a_site = site(json!({"x": zeros.clone()}));
        not_a_site["spec"]["name"] = json!(5);
        not_a_site["metadata"]["labels"] = strings.clone();
        let mut own_annotations = site(json!({}));
        own_annotations["metadata"]["annotations"] = Value::Object(
            (0..N / 24)
                .map(|i| (format!("sites.ecmwf.int/{i}"), json!("")))
                .collect(),
        );
        let many = |entry: Value| Value::Array(vec![entry; N / 12]);
        let mut bodies = vec![
            (
                "an unknown array",
                review(site(json!({"x": zeros})), "Site", "CREATE", None),
            ),
            (
                "headers",
                review(site(json!({"headers": strings})), "Site", "CREATE", None),
            ),
            (
                "environment",
                review(
                    site(json!({"applications": [{"name": "static", "env": strings}]})),
                    "Site",
                    "CREATE",
                    None,
                ),
            ),
            (
                "paths",
                review(
                    site(
                        json!({"applications": [{"name": "static", "paths": many(json!({"path": "/a"}))}]}),
                    ),
                    "Site",
                    "CREATE",
                    None,
                ),
            ),
            (
                "applications",
                review(
                    site(json!({"applications": many(json!({"name": "a"}))})),
                    "Site",
                    "CREATE",
                    None,
                ),
            ),
            (
                "routing",
                review(
                    site(json!({"routing": map(N / 12, json!([0]))})),
                    "Site",
                    "CREATE",
                    None,
                ),
            ),
            (
                "share lists",
                review(
                    site(json!({"share": {"users": Value::Array(vec![json!("ab"); N / 5])}})),
                    "Site",
                    "CREATE",
                    None,
                ),
            ),
            (
                "an object that is no Site",
                review(not_a_site.clone(), "Site", "CREATE", None),
            ),
            (
                "own annotations",
                review(own_annotations, "Site", "CREATE", None),
            ),
            (
                "a stored object that is no Site",
                review(site(json!({})), "Site", "UPDATE", Some(not_a_site)),
            ),
        ];
        // Every key invalid: each a violation, of which the answer lists a few.
        bodies.push((
            "invalid environment keys",
            review(
                site(
                    json!({"applications": [{"name": "static", "env": Value::Object(
                        (0..N / 24).map(|i| (format!("9 bad=key/{i:07}"), json!(""))).collect()
                    )}]}),
                ),
                "Site",
                "CREATE",
                None,
            ),
        ));
        // The same on UPDATE, the stored object as invalid (ratcheting compares the two), with
        // the shortest invalid keys.
        let short_invalid = site(
            json!({"applications": [{"name": "static", "env": Value::Object(
                (0..N / 20).map(|i| (format!("={i}"), json!(""))).collect()
            )}]}),
        );
        bodies.push((
            "invalid environment keys, stored so",
            review(short_invalid.clone(), "Site", "UPDATE", Some(short_invalid)),
        ));
        // The `kubectl apply` annotation: cut out of a copy of the body before decoding.
        let mut applied = site(json!({"headers": map(N / 24, json!("v"))}));
        applied["metadata"]["annotations"] = json!({
            "kubectl.kubernetes.io/last-applied-configuration": applied.to_string()
        });
        bodies.push((
            "the apply annotation",
            review(applied, "Site", "CREATE", None),
        ));
        bodies
    }

    fn config_bodies() -> Vec<(&'static str, Vec<u8>)> {
        let configmap = |data: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "sites-config", "namespace": "sites"}, "data": data})
        };
        let text = |yaml: String| {
            review(
                configmap(json!({"config.yaml": yaml})),
                "ConfigMap",
                "UPDATE",
                None,
            )
        };
        let longest = crate::config::MAX_TEXT_BYTES;
        let mut laughs = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
        for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            laughs.push_str(&format!(
                "{name}: &{name} [{}]\n",
                vec![format!("*{prev}"); 9].join(",")
            ));
        }
        // An alias of a long scalar, used ten thousand times: counted in bytes, refused before
        // it is built.
        let mut long_scalar = format!("bomb: &a \"{}\"\n", "x".repeat(30_000));
        for (prev, name) in [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")] {
            long_scalar.push_str(&format!(
                "{name}: &{name} [{}]\n",
                vec![format!("*{prev}"); 10].join(",")
            ));
        }
        vec![
            ("an alias of a long scalar", text(long_scalar)),
            (
                "a flow list",
                text(format!("x: [{}]\n", vec!["0"; longest / 2 - 4].join(","))),
            ),
            (
                "a block list",
                text("x:\n".to_string() + &"- 0\n".repeat(longest / 4 - 1)),
            ),
            (
                "a mapping",
                text(
                    (0..)
                        .map(|i| format!("k{i}: 0\n"))
                        .take_while({
                            let mut len = 0;
                            move |l: &String| {
                                len += l.len();
                                len < longest
                            }
                        })
                        .collect(),
                ),
            ),
            ("aliases", text(laughs)),
            (
                "escapes",
                text(format!("x: \"{}\"\n", "\\u00e9".repeat(longest / 7))),
            ),
            (
                "many entries",
                review(
                    configmap(map(N / 12, json!(""))),
                    "ConfigMap",
                    "UPDATE",
                    None,
                ),
            ),
            (
                "an array in data",
                review(
                    configmap(json!({"x": vec![0; N / 2]})),
                    "ConfigMap",
                    "UPDATE",
                    None,
                ),
            ),
        ]
    }

    fn answer_bytes(response: axum::response::Response) -> bytes::Bytes {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
            .unwrap()
    }

    /// The answers to hostile shapes: a denial listing a few of 40,000 violations, a refusal of
    /// a document that would build 300 MB through aliases.
    #[test]
    fn hostile_shapes_get_short_denials() {
        let cfg = crate::fixtures::config();
        let platform = super::Platform::default();
        let sites = site_bodies();
        let (_, invalid) = sites
            .iter()
            .find(|(name, _)| *name == "invalid environment keys")
            .unwrap();
        let configs = config_bodies();
        let (_, aliases) = configs
            .iter()
            .find(|(name, _)| *name == "an alias of a long scalar")
            .unwrap();
        for (path, answer) in [
            (
                VALIDATE_SITES,
                answer_bytes(server::review_validation(invalid, &cfg, &platform)),
            ),
            (
                VALIDATE_CONFIG,
                answer_bytes(server::review_config(aliases)),
            ),
        ] {
            let review: Value = serde_json::from_slice(&answer).unwrap();
            let response = &review["response"];
            assert_eq!(response["allowed"], json!(false), "{path}: {review}");
            let message = response["status"]["message"].as_str().unwrap();
            let causes = response["status"]["details"]["causes"].as_array().unwrap();
            assert!(causes.len() <= crate::validation::MAX_LISTED, "{path}");
            if path == VALIDATE_SITES {
                assert_eq!(causes.len(), crate::validation::MAX_LISTED);
                let more = N / 24 - crate::validation::MAX_LISTED;
                assert!(
                    message.ends_with(&format!("; and {more} more")),
                    "{path}: {message}"
                );
                assert!(
                    causes[0]["field"]
                        .as_str()
                        .unwrap()
                        .contains("9 bad=key/0000000"),
                    "{causes:?}"
                );
            } else {
                assert!(message.contains("bytes of text"), "{path}: {message}");
            }
        }
    }

    /// Measured in a process of its own: every thread's allocations count.
    #[test]
    fn a_review_takes_at_most_its_decode_cost() {
        if !crate::testing::alone(module_path!(), "a_review_takes_at_most_its_decode_cost") {
            return;
        }
        let cfg = crate::fixtures::config();
        let platform = super::Platform::default();
        let mut generic_most = 0.0f64;
        let mut check =
            |path: &str,
             name: &str,
             body: &[u8],
             answer: &dyn Fn(&[u8]) -> axum::response::Response| {
                let (response, peak) = measure(|| answer(body));
                let allowed = decode_cost(path, body.len());
                assert!(
                    peak <= allowed,
                    "{path}, {name}: {peak} bytes for a body of {} ({:.1} per byte), over the {allowed} it holds",
                    body.len(),
                    peak as f64 / body.len() as f64
                );
                assert!(
                    response.status().is_success(),
                    "{path}, {name}: answered {}",
                    response.status()
                );
                let answer = answer_bytes(response);
                assert!(
                    answer.len() < 64 * 1024,
                    "{path}, {name}: an answer of {} bytes",
                    answer.len()
                );
                let (_, generic) =
                    measure(|| crate::admission::review::decode(body).map(|r| r.object.is_some()));
                generic_most = generic_most.max(generic as f64 / body.len() as f64);
            };
        for (name, body) in site_bodies() {
            assert!(body.len() >= N / 2, "{name}: {} bytes", body.len());
            check(VALIDATE_SITES, name, &body, &|b| {
                server::review_validation(b, &cfg, &platform)
            });
            check(MUTATE_SITES, name, &body, &|b| {
                server::review_mutation(b, &cfg)
            });
        }
        for (name, body) in config_bodies() {
            check(VALIDATE_CONFIG, name, &body, &|b| server::review_config(b));
        }
        // The shapes are hostile: decoded generically, the worst takes dozens of times its size.
        assert!(generic_most > 40.0, "{generic_most}");
    }

    #[test]
    fn the_smallest_budget_holds_the_largest_request() {
        // `--webhook-memory-budget-mib`'s least value; a large request may not take the reserve.
        let smallest = 64 * 1024 * 1024;
        let general =
            crate::admission::budget::Budget::new(smallest, std::time::Duration::ZERO).general();
        for path in server::WEBHOOKS {
            let largest = server::BODY_LIMIT + decode_cost(path, server::BODY_LIMIT);
            assert!(largest <= general, "{path}: {largest} > {general}");
        }
        assert!(server::DEFAULT_MEMORY_BUDGET >= smallest);
    }
}

/// A `SiteSpec` with every field set, nested ones too (`a_full_spec_decodes_alike_stored_and_reviewed`
/// checks that none is left out against the CRD's schema).
fn full_spec() -> crate::crd::SiteSpec {
    use crate::crd::{
        Application, ApplicationPath, Names, ResourceLimits, Settings, Share, SiteConfiguration,
        SiteSpec,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;
    let object = |key: &str| serde_json::Map::from_iter([(key.to_string(), json!({"n": [1]}))]);
    SiteSpec {
        name: "handbook".into(),
        owner: "jdoe".into(),
        site_type: "static".into(),
        description: Some("The \"handbook\": é".into()),
        created_by: Some("creator".into()),
        updated_by: Some("updater".into()),
        created_at: Some("2025-01-02T03:04:05Z".into()),
        updated_at: Some("2025-06-07T08:09:10Z".into()),
        configuration: SiteConfiguration {
            space: "docs".into(),
            enabled: false,
            applications: vec![
                Application {
                    name: "web".into(),
                    image: Some("registry.example/web:1".into()),
                    port: Some(8080),
                    env: BTreeMap::from([("MODE".into(), "prod".into())]),
                    annotations: BTreeMap::from([("a.example/b".into(), "c".into())]),
                    paths: vec![ApplicationPath {
                        path: "/api".into(),
                        path_type: "Exact".into(),
                    }],
                },
                Application {
                    name: "jupyter".into(),
                    image: None,
                    port: None,
                    env: BTreeMap::new(),
                    annotations: BTreeMap::new(),
                    paths: Vec::new(),
                },
            ],
            headers: BTreeMap::from([("X-Frame-Options".into(), "DENY".into())]),
            quota: Some(Quantity("2Gi".into())),
            retention_date: Some("2030-01-01".into()),
            share: Some(Share {
                administrator_users: Names::from(vec!["adm".to_string()]),
                users: Names::from(vec!["u1".to_string(), "u\"2".to_string()]),
                groups: Names::from(vec!["g".to_string()]),
            }),
            settings: Settings {
                replicas: 3,
                resource_limits: Some(ResourceLimits {
                    cpu: Some(Quantity("500m".into())),
                    memory: Some(Quantity("512Mi".into())),
                }),
                error_handling: Some("site".into()),
                monitored: true,
                routing: Some(object("settings")),
            },
            routing: Some(object("configuration")),
        },
    }
}

/// A reviewed spec with its text copied, field by field: every field is named, so a field added
/// to the spec fails to compile here until it is compared.
fn owned(spec: &crate::crd::SiteSpec<crate::crd::Text<'_>>) -> crate::crd::SiteSpec {
    use crate::crd::{
        Application, ApplicationPath, Settings, SiteConfiguration, SiteSpec, Str, Text,
    };
    fn s<T: Str>(t: &T) -> String {
        t.to_string()
    }
    fn map(
        m: &std::collections::BTreeMap<Text<'_>, Text<'_>>,
    ) -> std::collections::BTreeMap<String, String> {
        m.iter().map(|(k, v)| (s(k), s(v))).collect()
    }
    let SiteSpec {
        name,
        owner,
        site_type,
        description,
        created_by,
        updated_by,
        created_at,
        updated_at,
        configuration,
    } = spec;
    let SiteConfiguration {
        space,
        enabled,
        applications,
        headers,
        quota,
        retention_date,
        share,
        settings,
        routing,
    } = configuration;
    let Settings {
        replicas,
        resource_limits,
        error_handling,
        monitored,
        routing: settings_routing,
    } = settings;
    SiteSpec {
        name: s(name),
        owner: s(owner),
        site_type: s(site_type),
        description: description.as_ref().map(s),
        created_by: created_by.as_ref().map(s),
        updated_by: updated_by.as_ref().map(s),
        created_at: created_at.as_ref().map(s),
        updated_at: updated_at.as_ref().map(s),
        configuration: SiteConfiguration {
            space: s(space),
            enabled: *enabled,
            applications: applications
                .iter()
                .map(|app| {
                    let Application {
                        name,
                        image,
                        port,
                        env,
                        annotations,
                        paths,
                    } = app;
                    Application {
                        name: s(name),
                        image: image.as_ref().map(s),
                        port: *port,
                        env: map(env),
                        annotations: map(annotations),
                        paths: paths
                            .iter()
                            .map(|p| {
                                let ApplicationPath { path, path_type } = p;
                                ApplicationPath {
                                    path: s(path),
                                    path_type: s(path_type),
                                }
                            })
                            .collect(),
                    }
                })
                .collect(),
            headers: map(headers),
            quota: quota.clone(),
            retention_date: retention_date.as_ref().map(s),
            share: share.clone(),
            settings: Settings {
                replicas: *replicas,
                resource_limits: resource_limits.clone(),
                error_handling: error_handling.as_ref().map(s),
                monitored: *monitored,
                routing: settings_routing.clone(),
            },
            routing: routing.clone(),
        },
    }
}

#[test]
fn a_full_spec_decodes_alike_stored_and_reviewed() {
    let spec = full_spec();
    let object = json!({
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
        "metadata": {"name": "docs-handbook", "namespace": "sites"},
        "spec": spec,
    });
    // Every property the CRD's schema gives the spec is set.
    let crd = serde_json::to_value(crate::definitions::crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    fn each_property(schema: &Value, value: &Value, path: &str) {
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            let path = format!("{path}.{name}");
            let set = &value[name];
            assert!(!set.is_null(), "{path} is not set in full_spec()");
            match set {
                Value::Array(items) => {
                    for item in items.iter().take(1) {
                        each_property(&property["items"], item, &format!("{path}[]"));
                    }
                }
                _ => each_property(property, set, &path),
            }
        }
    }
    each_property(schema, &object["spec"], "spec");

    // The stored decoding keeps every field.
    let stored: Site = serde_json::from_value(object.clone()).unwrap();
    assert_eq!(stored.spec, spec);

    // The review decodings keep every field but what no rule reads: the share lists (checked,
    // not kept) and what per-site routing holds (only that it is there).
    let mut expected = spec.clone();
    expected.configuration.share = Some(Default::default());
    expected.configuration.routing = Some(Default::default());
    expected.configuration.settings.routing = Some(Default::default());
    let body = review_body("CREATE", Some(object), None);
    let body = review::SiteBody::new(&body).unwrap();
    let read = body.read().expect("the review reader reads it").unwrap();
    let decoded = body.decode_with_serde_json().unwrap();
    for (how, req) in [("reader", read), ("serde_json", decoded)] {
        let reviewed = &req.object.as_ref().unwrap().spec;
        assert_eq!(owned(reviewed), expected, "{how}");
    }
}
