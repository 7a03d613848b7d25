//! Rendering of whole object sets: snapshots of representative Sites (ingress and gateway mode ×
//! enabled and disabled × 1 and 3 replicas × with and without a custom application, plus
//! monitored, migration and no public path), table tests of the object rules, and a property
//! test (deterministic, never panics).

use serde_json::{Value, json};

use super::*;
use crate::config::{PlatformConfig, RoutingMode};
use crate::crd::Site;
use crate::fixtures::{SiteBuilder, config, config_for, config_gateway, handbook};
use crate::rules::validate;
use crate::{Error, restart};

const NAMESPACE: &str = "sites";

const UID: &str = "0b4d6f2e-1c1a-4f55-9a52-7d4c2a8e9f10";

/// The representative Site: a static site, optionally with a custom application.
fn base(enabled: bool, replicas: i32, custom: bool) -> SiteBuilder {
    let site = handbook()
        .uid(UID)
        .enabled(enabled)
        .header("X-Frame-Options", "SAMEORIGIN")
        .share(json!({"administrator_users": ["jdoe"], "groups": ["docs-team"]}))
        .replicas(replicas)
        .limits("500m", "256Mi");
    if !custom {
        return site;
    }
    site.app_json(json!({
        "name": "dashboard",
        "image": "ghcr.io/example/dashboard:1.4.2",
        "port": 8050,
        "env": {"DASH_DEBUG": "false"},
        "annotations": {"nginx.org/proxy-read-timeout": "120s"},
        "paths": [{"path": "/docs/handbook/api/", "path_type": "Prefix"}]
    }))
}

fn tokens() -> SiteTokens {
    SiteTokens {
        api_token: "test-api-token".into(),
        secret_key: "test-secret-key".into(),
    }
}

/// Validates and renders, as the reconciler does.
fn render_with(site: &Site, cfg: &PlatformConfig) -> Result<Rendered, Error> {
    let valid = validate(site, cfg).map_err(Error::InvalidSite)?;
    let state = restart::decide(None, site, cfg).state;
    let tokens = tokens();
    let host = cfg.routing.host.as_deref();
    let inputs = Inputs::new(NAMESPACE, host, b"test-session-key", &tokens, &state);
    render(valid, cfg, &inputs)
}

fn objects(site: &Site, cfg: &PlatformConfig) -> Vec<Value> {
    render_with(site, cfg).expect("renders").to_values()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn snapshots_of_the_representative_matrix() {
    for mode in [RoutingMode::Ingress, RoutingMode::Gateway] {
        for enabled in [true, false] {
            for replicas in [1, 3] {
                for custom in [false, true] {
                    let name = format!(
                        "{}-{}-r{replicas}-{}",
                        mode.as_str(),
                        if enabled { "enabled" } else { "disabled" },
                        if custom { "custom" } else { "static" },
                    );
                    let s = base(enabled, replicas, custom).build();
                    insta::assert_yaml_snapshot!(name, objects(&s, &config_for(mode)));
                }
            }
        }
    }
}

#[test]
fn snapshots_of_monitored_migration_and_no_public_path() {
    let monitored = base(true, 1, false)
        .setting("monitored", json!(true))
        .build();
    insta::assert_yaml_snapshot!("ingress-monitored", objects(&monitored, &config()));

    let mut cfg = config_gateway();
    cfg.sites.migration.enabled = true;
    insta::assert_yaml_snapshot!(
        "gateway-migration",
        objects(&base(true, 1, true).build(), &cfg)
    );

    // Only a custom worker without paths: nothing serves a public path, so no route.
    let worker = base(true, 1, false)
        .configuration(
            "applications",
            json!([{"name": "worker", "image": "ghcr.io/example/worker:2"}]),
        )
        .build();
    let objs = objects(&worker, &config());
    assert!(
        objs.iter()
            .all(|o| o["kind"] != "Ingress" && o["kind"] != "HTTPRoute")
    );
    insta::assert_yaml_snapshot!("ingress-no-public-path", objs);
}

#[test]
fn objects_come_in_creation_order_with_the_site_as_controller_owner() {
    for mode in [RoutingMode::Ingress, RoutingMode::Gateway] {
        let objs = objects(&base(true, 1, true).build(), &config_for(mode));
        let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        let route = if mode == RoutingMode::Ingress {
            "Ingress"
        } else {
            "HTTPRoute"
        };
        assert_eq!(
            kinds,
            [
                "Secret",
                "Secret",
                "ConfigMap",
                "ConfigMap",
                "PersistentVolumeClaim",
                "StatefulSet",
                "Service",
                route
            ]
        );
        for o in &objs {
            let owners = o["metadata"]["ownerReferences"].as_array().unwrap();
            assert_eq!(owners.len(), 1, "{}", o["kind"]);
            assert_eq!(owners[0]["kind"], "Site");
            assert_eq!(owners[0]["controller"], true);
            assert_eq!(
                o["metadata"]["labels"]["sites.ecmwf.int/id"],
                "docs-handbook"
            );
            assert_eq!(o["metadata"]["namespace"], NAMESPACE);
        }
        let names: Vec<&str> = objs
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "docs-handbook",
                "docs-handbook-oauth2",
                "docs-handbook",
                "docs-handbook-files",
                "docs-handbook",
                "docs-handbook",
                "docs-handbook",
                "docs-handbook"
            ]
        );
    }
}

#[test]
fn replicas_follow_enabled_and_priority_follows_monitored() {
    // (enabled, replicas, monitored, expected replicas, expected priority class) — LIFE-04
    let cases = [
        (true, 1, false, 1, "low-priority"),
        (true, 3, false, 3, "low-priority"),
        (false, 3, false, 0, "low-priority"),
        (false, 1, true, 0, "medium-priority"),
        (true, 2, true, 2, "medium-priority"),
        (true, 0, false, 0, "low-priority"),
    ];
    for (enabled, replicas, monitored, want, priority) in cases {
        let site = base(enabled, replicas, false)
            .setting("monitored", json!(monitored))
            .build();
        let objs = objects(&site, &config());
        let sts = find(&objs, "StatefulSet");
        assert_eq!(sts["spec"]["replicas"], want, "{enabled} {replicas}");
        assert_eq!(
            sts["spec"]["template"]["spec"]["priorityClassName"],
            priority
        );
        let template = &sts["spec"]["template"]["metadata"];
        assert_eq!(template["labels"]["sites.ecmwf.int/id"], "docs-handbook");
        assert_eq!(
            template["annotations"]["sites.ecmwf.int/operator_bound"],
            "true"
        );
    }
}

#[test]
fn disabled_sites_redirect_to_the_410_page_in_both_modes() {
    // RTG-06 / LIFE-04 on the full route objects.
    let s = base(false, 1, true).build();
    let ingress = objects(&s, &config());
    let snippets = find(&ingress, "Ingress")["metadata"]["annotations"][route::LOCATION_SNIPPETS]
        .as_str()
        .unwrap()
        .to_string();
    assert!(snippets.ends_with(route::DISABLED_SNIPPET), "{snippets}");
    let gateway = objects(&s, &config_gateway());
    let rules = find(&gateway, "HTTPRoute")["spec"]["rules"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!rules.is_empty());
    for rule in rules {
        assert!(rule.get("backendRefs").is_none(), "{rule}");
        assert_eq!(
            rule["filters"][0]["requestRedirect"]["path"]["replaceFullPath"],
            route::DISABLED_REDIRECT
        );
        assert_eq!(rule["filters"][0]["requestRedirect"]["statusCode"], 302);
    }
}

#[test]
fn service_keeps_not_ready_pods_and_client_affinity() {
    // RTG-13
    let objs = objects(&base(true, 3, true).build(), &config_gateway());
    let svc = &find(&objs, "Service")["spec"];
    assert_eq!(svc["publishNotReadyAddresses"], true);
    assert_eq!(svc["sessionAffinity"], "ClientIP");
    assert_eq!(svc["type"], "ClusterIP");
    assert_eq!(
        svc["selector"],
        json!({"sites.ecmwf.int/id": "docs-handbook"})
    );
    assert_eq!(
        svc["ports"],
        json!([
            {"name": "http-8050", "port": 8050, "protocol": "TCP", "targetPort": 8050},
            {"name": "http-8080", "port": 8080, "protocol": "TCP", "targetPort": 8080}
        ])
    );
}

#[test]
fn reordering_applications_renders_the_same_objects() {
    let site = base(true, 2, true);
    let reordered = site
        .clone()
        .edit(|s| {
            s["spec"]["configuration"]["applications"]
                .as_array_mut()
                .unwrap()
                .reverse()
        })
        .build();
    let site = site.build();
    for mode in [RoutingMode::Ingress, RoutingMode::Gateway] {
        assert_eq!(
            objects(&site, &config_for(mode)),
            objects(&reordered, &config_for(mode))
        );
    }
}

#[test]
fn image_and_port_rules() {
    // LIFE-06: built-in images from the catalogue at the platform version unless the Site
    // records one; custom images kept; custom port 8000 unless set, with a TCP probe.
    let cases = [
        (
            json!({"name": "static"}),
            "registry.example.org/sites/static:2.4.0",
            8080,
            json!({"httpGet": {"path": "/healthz", "port": 8080}}),
        ),
        (
            json!({"name": "static", "image": "registry.example.org/sites/static:2.3.0"}),
            "registry.example.org/sites/static:2.3.0",
            8080,
            json!({"httpGet": {"path": "/healthz", "port": 8080}}),
        ),
        (
            json!({"name": "oauth2-proxy"}),
            "registry.example.org/sites/oauth2-proxy:2.4.0",
            4180,
            json!({"tcpSocket": {"port": 4180}}),
        ),
        (
            json!({"name": "app", "image": "ghcr.io/x/app:1"}),
            "ghcr.io/x/app:1",
            8000,
            json!({"tcpSocket": {"port": 8000}}),
        ),
        (
            json!({"name": "app", "image": "ghcr.io/x/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "port": 9000}),
            "ghcr.io/x/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            9000,
            json!({"tcpSocket": {"port": 9000}}),
        ),
    ];
    for (app, image, port, probe) in cases {
        let site = base(true, 1, false)
            .configuration("applications", json!([app]))
            .build();
        let objs = objects(&site, &config());
        let c = &find(&objs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], image, "{app}");
        assert_eq!(c["ports"][0]["containerPort"], port, "{app}");
        assert_eq!(c["readinessProbe"], probe, "{app}");
    }
}

#[test]
fn upgrade_rewrites_builtin_images_and_keeps_custom_ones() {
    // LIFE-06
    let s = base(true, 1, true)
        .edit(|s| {
            s["spec"]["configuration"]["applications"][0]["image"] =
                json!("registry.example.org/sites/static:1.0.0")
        })
        .build();
    let upgraded = apps::upgraded_applications(&s, &config());
    assert_eq!(
        upgraded[0].image.as_deref(),
        Some("registry.example.org/sites/static:2.4.0")
    );
    assert_eq!(
        upgraded[1].image.as_deref(),
        Some("ghcr.io/example/dashboard:1.4.2")
    );
    assert_eq!(upgraded[1], s.spec.configuration.applications[1]);
}

#[test]
fn migration_adds_site_mirror_once() {
    let mut cfg = config();
    cfg.sites.migration.enabled = true;
    let names = |site: SiteBuilder, cfg: &PlatformConfig| -> Vec<String> {
        let objs = objects(&site.build(), cfg);
        find(&objs, "StatefulSet")["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(base(true, 1, false), &cfg), ["static", "site-mirror"]);
    let listed = base(true, 1, false).app_json(
        json!({"name": "site-mirror", "image": "registry.example.org/sites/site-mirror:2.3.0"}),
    );
    assert_eq!(
        names(listed, &cfg),
        ["site-mirror", "static"],
        "a listed site-mirror is kept (in name order with the others), not doubled"
    );
    cfg.sites.migration.enabled = false;
    assert_eq!(names(base(true, 1, false), &cfg), ["static"]);
}

#[test]
fn storage_request_grows_only_with_expansion_and_never_shrinks() {
    // (quota, stored request, expansion supported, expected)
    let cases = [
        (Some("2Gi"), None, false, "2Gi"),
        (None, None, false, "1Gi"),
        (Some("5Gi"), Some("2Gi"), false, "2Gi"),
        (Some("5Gi"), Some("2Gi"), true, "5Gi"),
        (Some("1Gi"), Some("2Gi"), true, "2Gi"),
        (Some("2048Mi"), Some("2Gi"), true, "2Gi"),
    ];
    for (quota, stored, expansion, want) in cases {
        let site = base(true, 1, false)
            .configuration("quota", json!(quota))
            .build();
        let mut cfg = config();
        cfg.sites.kubernetes.storage_expansion_supported = expansion;
        let got = workload::storage_request(&site, &cfg, stored);
        assert_eq!(got, want, "{quota:?} {stored:?} {expansion}");
    }
}

#[test]
fn pvc_pins_a_retained_volume_and_keeps_stored_immutable_fields() {
    let s = base(true, 1, false).build();
    let cfg = config();
    let fresh = workload::pvc(&s, &cfg, Some("pv-old"), None).unwrap();
    let spec = fresh.spec.as_ref().unwrap();
    assert_eq!(spec.volume_name.as_deref(), Some("pv-old"));
    assert_eq!(spec.storage_class_name.as_deref(), Some("sites-retain"));
    // Stored as pinned: the pin stays in every later rendering.
    let again = workload::pvc(&s, &cfg, None, Some(&fresh)).unwrap();
    assert_eq!(again, fresh);
    // Bound by the binder (not pinned), in a class the configuration no longer names: the
    // rendering leaves the volume to the binder and keeps the class (it cannot change).
    let mut bound = workload::pvc(&s, &cfg, None, None).unwrap();
    let bound_spec = bound.spec.as_mut().unwrap();
    bound_spec.volume_name = Some("pvc-1234".into());
    bound_spec.storage_class_name = Some("standard".into());
    let desired = workload::pvc(&s, &cfg, None, Some(&bound)).unwrap();
    let spec = desired.spec.unwrap();
    assert_eq!(spec.volume_name, None);
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
    // The binder filling in the volume does not change the rendering.
    let unbound = workload::pvc(&s, &cfg, None, None).unwrap();
    let mut filled = unbound.clone();
    filled.spec.as_mut().unwrap().volume_name = Some("pvc-1".into());
    assert_eq!(
        workload::pvc(&s, &cfg, None, Some(&filled)).unwrap(),
        unbound
    );
}

#[test]
fn resources_take_site_limits_and_keep_requests_below_them() {
    let site = base(true, 1, false).limits("5m", "1Gi").build();
    let r = workload::resources(&site, &config());
    let v = serde_json::to_value(r).unwrap();
    assert_eq!(
        v,
        json!({"limits": {"cpu": "5m", "memory": "1Gi"}, "requests": {"cpu": "5m", "memory": "32Mi"}})
    );
    let defaults = workload::resources(&base(true, 1, false).build(), &config());
    assert_eq!(
        serde_json::to_value(defaults).unwrap(),
        json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "10m", "memory": "32Mi"}})
    );
}

#[test]
fn restart_inputs_land_on_the_pod_template() {
    let s = base(true, 1, false).build();
    let cfg = config();
    let apps = apps::resolve(&s, &cfg);
    let state = restart::decide(None, &s, &cfg).state;
    let sts = workload::statefulset(
        &s,
        &cfg,
        &apps,
        &PodTemplateInputs {
            state: &state,
            restarted_at: Some("2026-11-29T10:00:00Z"),
        },
    )
    .unwrap();
    let ann = sts
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap();
    assert_eq!(
        ann[workload::RESTARTED_AT_ANNOTATION],
        "2026-11-29T10:00:00Z"
    );
    assert_eq!(
        ann[restart::SPEC_HASH_ANNOTATION],
        restart::spec_hash(&s, &cfg)
    );
    assert_eq!(recorded_state(None), None);
}

#[test]
fn bad_sites_are_errors_naming_the_field() {
    // (case, change to the spec, error field or message fragment)
    type Edit = fn(&mut Value);
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "no applications",
            |s| s["configuration"]["applications"] = json!([]),
            "spec.configuration.applications",
        ),
        (
            "custom without image",
            |s| s["configuration"]["applications"] = json!([{"name": "app"}]),
            "spec.configuration.applications[0].image",
        ),
        (
            "bad image",
            |s| s["configuration"]["applications"] = json!([{"name": "app", "image": "Bad Image"}]),
            "spec.configuration.applications[0].image",
        ),
        (
            "duplicate names",
            |s| {
                s["configuration"]["applications"] = json!([{"name": "static"}, {"name": "static"}])
            },
            "spec.configuration.applications[1].name",
        ),
        (
            "invalid name",
            |s| {
                s["configuration"]["applications"] = json!([{"name": "Static_App", "image": "x:1"}])
            },
            "spec.configuration.applications[0].name",
        ),
        (
            "port out of range",
            |s| {
                s["configuration"]["applications"] =
                    json!([{"name": "app", "image": "x:1", "port": 70000}])
            },
            "spec.configuration.applications[0].port",
        ),
        (
            "shared port",
            |s| {
                s["configuration"]["applications"] =
                    json!([{"name": "static"}, {"name": "app", "image": "x:1", "port": 8080}])
            },
            "spec.configuration.applications[1].port",
        ),
        (
            "env name",
            |s| {
                s["configuration"]["applications"] =
                    json!([{"name": "app", "image": "x:1", "env": {"A=B": "x"}}])
            },
            "spec.configuration.applications[0].env[\"A=B\"]",
        ),
        (
            "annotation key",
            |s| {
                s["configuration"]["applications"] =
                    json!([{"name": "static", "annotations": {"bad key": "x"}}])
            },
            "spec.configuration.applications[0].annotations[\"bad key\"]",
        ),
        (
            "path injection",
            |s| {
                s["configuration"]["applications"] =
                    json!([{"name": "app", "image": "x:1", "paths": [{"path": "/x;return 200"}]}])
            },
            "spec.configuration.applications[0].paths[0].path",
        ),
        (
            "header injection",
            |s| s["configuration"]["headers"] = json!({"X-A": "v\"; return 200; \""}),
            "spec.configuration.headers[\"X-A\"]",
        ),
        (
            "header name",
            |s| s["configuration"]["headers"] = json!({"X A": "v"}),
            "spec.configuration.headers[\"X A\"]",
        ),
        (
            "error handling",
            |s| s["configuration"]["settings"]["error_handling"] = json!("none"),
            "spec.configuration.settings.error_handling",
        ),
        (
            "quota",
            |s| s["configuration"]["quota"] = json!("lots"),
            "spec.configuration.quota",
        ),
        (
            "zero quota",
            |s| s["configuration"]["quota"] = json!("0"),
            "spec.configuration.quota",
        ),
        (
            "cpu limit",
            |s| s["configuration"]["settings"]["resource_limits"]["cpu"] = json!("-1"),
            "spec.configuration.settings.resource_limits.cpu",
        ),
        (
            "space",
            |s| s["configuration"]["space"] = json!("Docs Space"),
            "spec.configuration.space",
        ),
        ("name", |s| s["name"] = json!("hand{book}"), "spec.name"),
    ];
    for (case, edit, field) in cases {
        let site = base(true, 1, false).edit(|s| edit(&mut s["spec"])).build();
        let err = render_with(&site, &config_gateway()).expect_err(case);
        assert!(!err.is_transient(), "{case}: {err}");
        assert!(
            err.to_string()
                .starts_with(&format!("invalid Site: {field}:")),
            "{case}: {err}"
        );
    }
}

#[test]
fn unsupported_path_types_fail_in_both_modes() {
    let site = base(true, 1, false)
        .configuration("applications", json!([{"name": "app", "image": "x:1", "paths": [{"path": "/docs/handbook", "path_type": "Regex"}]}]))
        .build();
    for mode in [RoutingMode::Ingress, RoutingMode::Gateway] {
        let err = render_with(&site, &config_for(mode)).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidSite(v) if v[0].field.ends_with(".paths[0].path_type")),
            "{err}"
        );
    }
}

#[test]
fn too_many_paths_for_one_http_route_is_an_error() {
    let paths: Vec<Value> = (0..9)
        .map(|i| json!({"path": format!("/docs/handbook/p{i}/"), "path_type": "Prefix"}))
        .collect();
    let site = base(true, 1, false)
        .configuration(
            "applications",
            json!([{"name": "app", "image": "x:1", "paths": paths}]),
        )
        .build();
    let err = render_with(&site, &config_gateway()).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "invalid Site: spec.configuration.applications: the site's paths need 18 HTTPRoute rules"
        ),
        "{err}"
    );
    // Ingress has no such limit.
    assert!(render_with(&site, &config()).is_ok());
}

#[test]
fn missing_host_is_the_transient_public_host_error() {
    let mut cfg = config();
    cfg.routing.host = None;
    let err = render_with(&base(true, 1, false).build(), &cfg).unwrap_err();
    assert!(
        err.to_string().starts_with("Public host name required"),
        "{err}"
    );
    assert!(err.is_transient());
}

#[test]
fn site_path_goes_to_the_first_catalogue_application() {
    // Reordering the Site's list does not move the site path.
    for order in [
        json!([{"name": "site-api"}, {"name": "static"}]),
        json!([{"name": "static"}, {"name": "site-api"}]),
    ] {
        let site = base(true, 1, false)
            .configuration("applications", order)
            .build();
        let objs = objects(&site, &config());
        let paths = &find(&objs, "Ingress")["spec"]["rules"][0]["http"]["paths"];
        assert_eq!(
            paths,
            &json!([{"path": "/docs/handbook", "pathType": "Prefix", "backend": {"service": {"name": "docs-handbook", "port": {"number": 8080}}}}])
        );
    }
}

#[test]
fn gateway_warning_for_replicas_without_session_affinity() {
    let s3 = base(true, 3, false).build();
    let s1 = base(true, 1, false).build();
    assert_eq!(
        warnings(&s3.spec.configuration.settings, &config()),
        Vec::<String>::new()
    );
    assert_eq!(
        warnings(&s1.spec.configuration.settings, &config_gateway()),
        Vec::<String>::new()
    );
    let w = warnings(&s3.spec.configuration.settings, &config_gateway());
    assert_eq!(w.len(), 1);
    assert!(
        w[0].starts_with("spec.configuration.settings.replicas: 3 replicas"),
        "{}",
        w[0]
    );
}

#[test]
fn http_route_annotations_layer_provider_then_route_annotations() {
    let mut cfg = config_gateway();
    cfg.routing.gateway.route_annotations =
        [("example.org/team".to_string(), "web".to_string())].into();
    let objs = objects(&base(true, 1, false).build(), &cfg);
    let route = find(&objs, "HTTPRoute");
    assert_eq!(
        route["metadata"]["annotations"],
        json!({"example.org/team": "web"})
    );
    assert_eq!(
        route["spec"]["parentRefs"],
        json!([{"name": "sites-gateway"}])
    );
    assert_eq!(route["spec"]["hostnames"], json!(["sites.example.org"]));
}

#[test]
fn secrets_never_appear_in_debug_output_of_inputs() {
    let t = tokens();
    let inputs = Inputs {
        platform_namespace: NAMESPACE,
        public_host: None,
        session_key: b"test-session-key",
        tokens: &t,
        existing_claim: None,
        retained_volume: None,
        pod: PodTemplateInputs {
            state: &restart::decide(None, &base(true, 1, false).build(), &config()).state,
            restarted_at: None,
        },
    };
    let shown = format!("{inputs:?}");
    for secret in [
        "test-api-token",
        "test-secret-key",
        "test-session-key",
        "116, 101, 115, 116",
    ] {
        assert!(!shown.contains(secret), "{shown}");
    }
    assert!(shown.contains("<16 bytes>"), "{shown}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z][a-z0-9-]{0,12}",
            ".{0,16}",
            Just(String::new()),
            Just("static".to_string()),
            Just("/x;\n{}$\"".to_string()),
        ]
    }

    fn app() -> impl Strategy<Value = Value> {
        (
            prop_oneof![Just("static".to_string()), Just("site-api".to_string()), text()],
            proptest::option::of(prop_oneof![text(), Just("ghcr.io/x/y:1".to_string())]),
            proptest::option::of(prop_oneof![any::<i32>(), 1..70000i32]),
            proptest::collection::btree_map(text(), text(), 0..2),
            proptest::collection::vec((text(), prop_oneof![Just("Prefix".to_string()), Just("Exact".to_string()), text()]), 0..2),
        )
            .prop_map(|(name, image, port, env, paths)| {
                json!({
                    "name": name, "image": image, "port": port, "env": env.clone(), "annotations": env,
                    "paths": paths.into_iter().map(|(p, t)| json!({"path": format!("/{p}"), "path_type": t})).collect::<Vec<_>>()
                })
            })
    }

    fn any_site() -> impl Strategy<Value = Value> {
        (
            (text(), text(), proptest::collection::vec(app(), 0..4)),
            proptest::collection::btree_map(text(), text(), 0..3),
            (any::<bool>(), any::<i32>(), any::<bool>()),
            proptest::option::of(prop_oneof![text(), Just("3Gi".to_string())]),
            proptest::option::of(prop_oneof![text(), Just("platform".to_string())]),
            proptest::option::of(prop_oneof![text(), Just("250m".to_string())]),
        )
            .prop_map(|((space, name, apps), headers, (enabled, replicas, monitored), quota, handling, cpu)| {
                json!({
                    "name": name, "owner": "o", "type": "t",
                    "configuration": {
                        "space": space, "enabled": enabled, "applications": apps, "headers": headers,
                        "quota": quota,
                        "settings": {"replicas": replicas, "monitored": monitored, "error_handling": handling,
                                     "resource_limits": {"cpu": cpu}}
                    }
                })
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn rendering_is_deterministic_and_never_panics(spec in any_site(), gateway in any::<bool>(), migration in any::<bool>()) {
            let mut cfg = config_for(if gateway { RoutingMode::Gateway } else { RoutingMode::Ingress });
            cfg.sites.migration.enabled = migration;
            let s = handbook().uid(UID).spec(spec).build();
            let first = render_with(&s, &cfg).map(|r| serde_json::to_vec(&r.to_values()).unwrap());
            let second = render_with(&s, &cfg).map(|r| serde_json::to_vec(&r.to_values()).unwrap());
            match (first, second) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => prop_assert!(false, "differs: {:?} / {:?}", a.is_ok(), b.is_ok()),
            }
        }
    }
}

/// The directives of an nginx configuration as nginx's parser reads them: words split on
/// whitespace, `"`/`'` strings with `\` escapes, `#` comments, `;` ending a directive, `{`/`}`
/// opening and closing blocks (recorded as the words `{` and `}`).
fn nginx_directives(conf: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut chars = conf.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_ascii_whitespace() => {}
            '#' => while chars.next_if(|c| *c != '\n').is_some() {},
            ';' => out.push(std::mem::take(&mut words)),
            '{' | '}' => {
                words.push(c.to_string());
                out.push(std::mem::take(&mut words));
            }
            '"' | '\'' => {
                let mut word = String::new();
                loop {
                    match chars.next() {
                        Some('\\') => word.extend(chars.next()),
                        Some(q) if q == c => break,
                        Some(other) => word.push(other),
                        None => panic!("unterminated string in\n{conf}"),
                    }
                }
                words.push(word);
            }
            _ => {
                let mut word = c.to_string();
                while let Some(next) = chars.next_if(|n| {
                    !n.is_ascii_whitespace() && !matches!(n, ';' | '{' | '}' | '"' | '\'')
                }) {
                    word.push(next);
                }
                words.push(word);
            }
        }
    }
    assert!(
        words.is_empty(),
        "unterminated directive {words:?} in\n{conf}"
    );
    out
}

/// Header values legal by design (inside double quotes `;`, `{`, `}`, `#`, `'` and YAML are
/// text) render as exactly one `add_header` directive each, with the value intact, and the rest
/// of the configuration is unchanged. Environment values, the owner and annotation values reach
/// the objects verbatim, as single values.
#[test]
fn values_that_look_like_injections_stay_inside_their_directive() {
    let nasty = [
        "default-src 'self'; script-src 'none'",
        "} include /etc/passwd; server { listen 80; } #",
        "a; add_header X-Injected yes always",
        "# not a comment",
        "--- !!python/object:os.system key: value",
        "'single' ; quoted'",
        "ünïcödé \u{2028} {}",
        "",
    ];
    let files = |headers: Value| {
        let site = base(true, 1, false)
            .configuration("headers", headers)
            .build();
        let objects = objects(&site, &config());
        let cm = objects
            .iter()
            .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "docs-handbook-files")
            .expect("the -files ConfigMap")
            .clone();
        cm["data"]["nginx.conf"].as_str().unwrap().to_string()
    };
    // The baseline: one benign header per nasty value.
    let names: Vec<String> = (0..nasty.len()).map(|i| format!("X-H{i}")).collect();
    let benign: serde_json::Map<String, Value> =
        names.iter().map(|n| (n.clone(), json!("v"))).collect();
    let baseline = nginx_directives(&files(Value::Object(benign)));
    let headers: serde_json::Map<String, Value> = names
        .iter()
        .zip(nasty)
        .map(|(n, v)| (n.clone(), json!(v)))
        .collect();
    let conf = files(Value::Object(headers));
    let got = nginx_directives(&conf);
    assert_eq!(got.len(), baseline.len(), "{conf}");
    let mut add_headers = 0;
    for (g, b) in got.iter().zip(&baseline) {
        if b.first().map(String::as_str) == Some("add_header") {
            add_headers += 1;
            let i = names.iter().position(|n| *n == b[1]).unwrap();
            assert_eq!(
                g,
                &vec![
                    "add_header".to_string(),
                    names[i].clone(),
                    nasty[i].to_string(),
                    "always".into()
                ],
                "{conf}"
            );
        } else {
            assert_eq!(g, b, "{conf}");
        }
    }
    assert_eq!(add_headers, nasty.len());

    // Values that never reach nginx or a YAML text: carried verbatim as one value each.
    let value =
        "x\"; } include /etc/passwd; $host \\\n  key: value\n---\n!!python/object:os.system";
    let site = base(true, 1, true)
        .owner(value)
        .edit(|s| {
            let app = &mut s["spec"]["configuration"]["applications"][1];
            app["env"] = json!({ "NASTY": value });
            app["annotations"] = json!({ "example.org/nasty": value });
        })
        .build();
    let objects = objects(&site, &config());
    let env = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "docs-handbook")
        .unwrap();
    assert_eq!(env["data"]["SITE_OWNER"], value);
    assert_eq!(env["data"]["SITE_ID"], "docs-handbook");
    let sts = find(&objects, "StatefulSet");
    let container = sts["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "dashboard")
        .unwrap();
    let nasty_env: Vec<&Value> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["value"] == value)
        .collect();
    assert_eq!(nasty_env.len(), 1, "{container}");
    assert_eq!(nasty_env[0]["name"], "NASTY");
    let ingress = find(&objects, "Ingress");
    assert_eq!(
        ingress["metadata"]["annotations"]["example.org/nasty"],
        value
    );
}

/// SPEC 4.6: a built-in application without an image in the spec runs its pin: the status's
/// record, else what its container runs, else (a new Site) the catalogue's at the platform
/// version. The spec's image always wins; custom applications are left as written; a record
/// that is no image reference is ignored.
#[test]
fn built_in_images_without_a_spec_image_run_their_pin() {
    let cfg = config();
    let catalogue = apps::catalogue_image(&cfg.sites.applications[0], &cfg.sites.version);
    let builtin = cfg.sites.applications[0].name.clone();
    let site = |spec_image: Option<&str>, status_image: Option<&str>| {
        let mut doc = SiteBuilder::new("docs-handbook")
            .namespace("sites")
            .app_json(json!({"name": builtin, "image": spec_image}))
            .app_json(json!({"name": "mine", "image": "ghcr.io/x/mine:1"}))
            .json();
        if let Some(image) = status_image {
            doc["status"] = json!({"images": {(builtin.as_str()): image}});
        }
        serde_json::from_value::<Site>(doc).unwrap()
    };
    // (case, spec image, status image, running image, rendered image or None: used as it is)
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    );
    let cases: [Case; 7] = [
        (
            "the spec's image wins",
            Some("reg/static:9"),
            Some("reg/static:1"),
            Some("reg/static:2"),
            None,
        ),
        (
            "the status's pin",
            None,
            Some("reg/static:1"),
            Some("reg/static:2"),
            Some("reg/static:1"),
        ),
        (
            "what runs, with no pin recorded",
            None,
            None,
            Some("reg/static:2"),
            Some("reg/static:2"),
        ),
        (
            "a new Site: the platform version",
            None,
            None,
            None,
            Some(&catalogue),
        ),
        (
            "a pin that is no image is ignored",
            None,
            Some("not an image!"),
            Some("reg/static:2"),
            Some("reg/static:2"),
        ),
        (
            "nothing valid at all",
            None,
            Some("UPPER:case"),
            Some("bad image"),
            Some(&catalogue),
        ),
        (
            "a custom image is never pinned",
            Some("reg/static:9"),
            None,
            None,
            None,
        ),
    ];
    for (case, spec, status, running, want) in cases {
        let s = site(spec, status);
        let pinned = apps::pinned(&s, &cfg, |name| {
            (name == builtin).then_some(running).flatten()
        });
        match want {
            None => assert!(pinned.is_none(), "{case}"),
            Some(want) => {
                let pinned = pinned.expect(case);
                let images: Vec<_> = pinned.iter().map(|a| a.image.as_deref()).collect();
                assert_eq!(images, [Some(want), Some("ghcr.io/x/mine:1")], "{case}");
                // The status records what is rendered.
                let mut rendered = s.clone();
                rendered.spec.configuration.applications = pinned;
                let recorded = apps::builtin_images(&rendered, &cfg);
                assert_eq!(
                    recorded.into_iter().collect::<Vec<_>>(),
                    [(builtin.clone(), want.to_string())],
                    "{case}"
                );
            }
        }
    }
}

/// The StatefulSet carries the hash of its pod template as rendered (ROL-01: whether a new
/// rendering rolls the pods is read from it): it moves with the template, not with the replicas.
#[test]
fn the_template_hash_follows_the_pod_template_only() {
    let hash = |site: &Site, cfg: &PlatformConfig| {
        let sts = render_with(site, cfg).unwrap().statefulset;
        let annotation = sts.metadata.annotations.as_ref().unwrap()
            [crate::labels::TEMPLATE_HASH_ANNOTATION]
            .clone();
        assert_eq!(
            annotation,
            crate::render::workload::template_hash(&sts.spec.unwrap().template)
        );
        annotation
    };
    let cfg = config_for(RoutingMode::Ingress);
    let site = base(true, 1, false).build();
    let mut other_class = cfg.clone();
    other_class.sites.kubernetes.priority_classes.default = "other-priority".into();
    assert_ne!(hash(&site, &cfg), hash(&site, &other_class));
    assert_eq!(hash(&site, &cfg), hash(&base(true, 3, false).build(), &cfg));
}
