use serde_json::{Value, json};

use super::*;
use crate::config::{Context, RoutingMode};

const CONFIG: &str = include_str!("../../manifests/base/config.yaml");

fn config(mode: RoutingMode) -> PlatformConfig {
    let mut cfg = PlatformConfig::from_yaml(CONFIG, "config.yaml", &Context::default()).unwrap();
    cfg.routing.mode = mode;
    cfg
}

fn site_json(spec_edit: impl FnOnce(&mut Value)) -> Value {
    let mut site = json!({
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
        "metadata": {"name": "docs-handbook", "namespace": "sites"},
        "spec": {"name": "handbook", "owner": "jdoe", "type": "static", "configuration": {
            "space": "docs", "enabled": true, "applications": [{"name": "static"}], "quota": "2Gi",
            "settings": {"replicas": 1}
        }}
    });
    spec_edit(&mut site);
    site
}

fn request(
    operation: &str,
    object: Option<Value>,
    old: Option<Value>,
) -> AdmissionRequest<DynamicObject> {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "kind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "resource": {"group": "sites.ecmwf.int", "version": "v1", "resource": "sites"},
            "name": "docs-handbook", "namespace": "sites", "operation": operation,
            "userInfo": {"username": "jdoe"},
            "object": object, "oldObject": old, "dryRun": false
        }
    });
    let review: kube::core::admission::AdmissionReview<DynamicObject> =
        serde_json::from_value(review).unwrap();
    review.try_into().unwrap()
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
    let with = |v: Option<&str>| {
        site_json(|s| {
            if let Some(v) = v {
                s["metadata"]["annotations"] = json!({UPGRADE_REQUEST_ANNOTATION: v});
            }
        })
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
        let r = mutate_site(&request(op, Some(with(new)), old_obj), || {
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
            &request("CREATE", Some(site_json(|_| {})), None),
            &config(mode),
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
        let r = validate_site(
            &request("CREATE", Some(obj), None),
            &config(RoutingMode::Ingress),
        );
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
            &request("CREATE", Some(site_json(edit)), None),
            &config(RoutingMode::Ingress),
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
    let obj = site_json(|s| {
        s["spec"]["name"] = json!("Bad Name");
        s["spec"]["configuration"]["routing"] = json!({"mode": "gateway"});
        s["spec"]["configuration"]["applications"] =
            json!([{"name": "x"}, {"name": "y", "image": "y:1", "port": 99999}]);
    });
    let r = validate_site(
        &request("CREATE", Some(obj), None),
        &config(RoutingMode::Ingress),
    );
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
    let obj = site_json(
        |s| s["spec"]["configuration"]["applications"] = json!([{"name": "static", "paths": [{"path": "/a", "path_type": "ImplementationSpecific"}]}]),
    );
    assert!(
        validate_site(
            &request("CREATE", Some(obj.clone()), None),
            &config(RoutingMode::Ingress)
        )
        .allowed
    );
    let r = validate_site(
        &request("CREATE", Some(obj), None),
        &config(RoutingMode::Gateway),
    );
    assert!(
        messages(&r)[0].contains("is not supported in gateway mode (use Prefix or Exact)"),
        "{:?}",
        messages(&r)
    );

    let three = site_json(|s| s["spec"]["configuration"]["settings"]["replicas"] = json!(3));
    let r = validate_site(
        &request("CREATE", Some(three.clone()), None),
        &config(RoutingMode::Gateway),
    );
    assert!(r.allowed);
    assert!(r.warnings.unwrap()[0].contains("without session affinity"));
    assert!(
        validate_site(
            &request("CREATE", Some(three), None),
            &config(RoutingMode::Ingress)
        )
        .warnings
        .is_none()
    );
}

#[test]
fn quota_never_decreases_on_update() {
    let q = |v: Option<&str>| site_json(|s| s["spec"]["configuration"]["quota"] = json!(v));
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
        let r = validate_site(
            &request("UPDATE", Some(q(new)), Some(q(old))),
            &config(RoutingMode::Ingress),
        );
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
    assert!(
        validate_site(
            &request("CREATE", Some(q(Some("1Gi"))), None),
            &config(RoutingMode::Ingress)
        )
        .allowed
    );
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
        &config(RoutingMode::Ingress),
    );
    assert!(!r.allowed);
    assert!(
        r.result.message.starts_with("object: not a valid Site"),
        "{}",
        r.result.message
    );
    let r = validate_site(
        &request("CREATE", None, None),
        &config(RoutingMode::Ingress),
    );
    assert!(!r.allowed);
    // DELETE is never blocked.
    assert!(
        validate_site(
            &request("DELETE", None, Some(site_json(|_| {}))),
            &config(RoutingMode::Ingress)
        )
        .allowed
    );
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
        let r = validate_site(
            &request("CREATE", Some(obj), None),
            &config(RoutingMode::Ingress),
        );
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
    assert!(seen >= 10, "{seen} examples");
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
    let mut site = site_json(|_| {});
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
        let r = validate_site(&request(op, Some(object), old), &config(mode));
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
        let r = validate_site(&request(op, Some(with(&edits)), old), &config(mode));
        assert!(r.allowed, "{case}: {}", r.result.message);
    }
}
