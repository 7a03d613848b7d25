use serde_json::{Value, json};

use super::*;
use crate::config::{Context, RoutingMode};

const CONFIG: &str = include_str!("../../manifests/config.yaml");

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
            "spec.configuration.applications[0].env.A B:",
        ),
        (
            "annotation key",
            |s| {
                s["spec"]["configuration"]["applications"] =
                    json!([{"name": "static", "annotations": {"-bad": "1"}}])
            },
            "spec.configuration.applications[0].annotations.-bad:",
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
            "spec.configuration.headers.X-A:",
        ),
        (
            "header name",
            |s| s["spec"]["configuration"]["headers"] = json!({"X{A}": "a"}),
            "spec.configuration.headers.X{A}:",
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
