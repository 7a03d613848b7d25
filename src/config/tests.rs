//! Table tests of the platform configuration validator: one case per rule, each asserting the
//! exact set of reported keys and a fragment of each message.

use super::*;

use crate::fixtures::CONFIG_YAML as EXAMPLE;

/// The committed example with `patch` merged in (RFC 7386: null removes a key).
fn example_with(patch: &str) -> Value {
    let mut doc = parse_yaml(EXAMPLE, "example").expect("example parses");
    let patch = parse_yaml(patch, "patch").expect("patch parses");
    json_patch::merge(&mut doc, &patch);
    doc
}

fn problems_of(doc: &Value, ctx: &Installation<'_>) -> Vec<FieldError> {
    match PlatformConfig::from_value(doc, ctx) {
        Ok(_) => Vec::new(),
        Err(ConfigError::Invalid(p)) => p,
        Err(other) => panic!("unexpected error {other}"),
    }
}

/// Asserts that exactly the `expected` keys are reported, each message containing its fragment.
fn assert_problems(case: &str, got: &[FieldError], expected: &[(&str, &str)]) {
    let got_keys: Vec<&str> = got.iter().map(|p| p.field.as_str()).collect();
    let want_keys: Vec<&str> = expected.iter().map(|(k, _)| *k).collect();
    let mut g = got_keys.clone();
    let mut w = want_keys.clone();
    g.sort();
    w.sort();
    assert_eq!(g, w, "{case}: reported keys differ; problems: {got:#?}");
    for (key, fragment) in expected {
        let p = got.iter().find(|p| p.field == *key).unwrap();
        assert!(
            p.message.contains(fragment),
            "{case}: message for {key} is {:?}, expected it to contain {fragment:?}",
            p.message
        );
        assert!(
            p.to_string().starts_with(&format!("{key}: ")),
            "{case}: {p}"
        );
    }
}

#[test]
fn the_committed_example_is_valid_and_complete() {
    let config = PlatformConfig::from_yaml(
        EXAMPLE,
        "manifests/base/config.yaml",
        &Installation::default(),
    )
    .unwrap_or_else(|e| panic!("manifests/base/config.yaml: {e}"));
    assert_eq!(config.routing.mode, RoutingMode::Ingress);
    assert_eq!(config.routing.host.as_deref(), Some("sites.example.org"));
    assert_eq!(config.sites.version, "2.4.0");
    assert_eq!(config.sites.applications.len(), 3);
    assert_eq!(config.sites.operator.worker_limit, 5);
    // Complete: every key the reader knows appears in the example. Removing any one key of the
    // example must leave a document the reader still accepts or reports, never silently.
    let doc = parse_yaml(EXAMPLE, "example").unwrap();
    let mut leaves = Vec::new();
    collect_paths(&doc, String::new(), &mut leaves);
    for needle in [
        "routing.mode",
        "routing.host",
        "routing.hubHost",
        "routing.scheme",
        "routing.hsts",
        "routing.tls.enabled",
        "routing.tls.secretName",
        "routing.tls.hubSecretName",
        "routing.ingress.className",
        "routing.ingress.hubAnnotations",
        "routing.ingress.routeAnnotations",
        "routing.gateway.name",
        "routing.gateway.namespace",
        "routing.gateway.listenerName",
        "routing.gateway.hubListenerName",
        "routing.gateway.create",
        "routing.gateway.className",
        "routing.gateway.annotations",
        "routing.gateway.listeners",
        "routing.gateway.httpRedirect",
        "routing.gateway.routeAnnotations",
        "routing.gateway.policyProvider",
        "routing.gateway.policies",
        "routing.gateway.policyRbacRules",
        "sitesConfig.version",
        "sitesConfig.applications",
        "sitesConfig.kubernetes.storage_class",
        "sitesConfig.kubernetes.storage_expansion_supported",
        "sitesConfig.kubernetes.default_quota",
        "sitesConfig.kubernetes.priority_classes.default",
        "sitesConfig.kubernetes.priority_classes.monitored",
        "sitesConfig.kubernetes.resources.requests.cpu",
        "sitesConfig.kubernetes.resources.limits.memory",
        "sitesConfig.operator.worker_limit",
        "sitesConfig.operator.dependency_log_level",
        "sitesConfig.migration.enabled",
        "sitesConfig.migration.image",
        "sitesConfig.session.secret_key.secret_name",
        "sitesConfig.session.secret_key.key",
        "sitesConfig.retention.archive_after_days",
        "sitesConfig.retention.delete_after_days",
        "sitesConfig.rollout.max_rolling",
        "sitesConfig.rollout.progress_deadline_seconds",
    ] {
        assert!(leaves.iter().any(|l| l == needle), "example lacks {needle}");
    }
}

fn collect_paths(v: &Value, path: String, out: &mut Vec<String>) {
    out.push(path.clone());
    if let Value::Object(map) = v {
        for (k, v) in map {
            collect_paths(v, reader::child_path(&path, k), out);
        }
    }
}

#[test]
fn defaults_apply_to_a_minimal_configuration() {
    let c = PlatformConfig::from_yaml(
        "sitesConfig:\n  version: \"1.0\"\n",
        "min",
        &Installation::default(),
    )
    .expect("minimal config is valid");
    assert_eq!(c.routing, Routing::default());
    assert_eq!(c.routing.mode, RoutingMode::Ingress);
    assert_eq!(c.routing.scheme, Scheme::Https);
    assert!(c.routing.hsts);
    assert_eq!(c.routing.gateway.name.as_deref(), Some("sites-gateway"));
    assert_eq!(c.routing.gateway.policy_provider, "none");
    assert_eq!(c.sites.operator.worker_limit, 5);
    assert_eq!(c.sites.operator.dependency_log_level, LogLevel::Info);
    assert!(!c.sites.migration.enabled);
    assert!(!c.sites.kubernetes.storage_expansion_supported);
    assert_eq!(c.sites.kubernetes.priority_classes.default, "low-priority");
    assert_eq!(
        c.sites.kubernetes.priority_classes.monitored,
        "medium-priority"
    );
}

#[test]
fn every_rejection_rule() {
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    // (case, patch merged into the valid example, expected (key, message fragment) pairs)
    let cases: &[Case] = &[
        // RTG-01: one routing mode, routing values only at the top level, moved keys named.
        (
            "unknown routing mode",
            "routing: {mode: mesh}",
            &[(
                "routing.mode",
                "unknown routing mode \"mesh\"; use ingress or gateway",
            )],
        ),
        (
            "sitesConfig.routing",
            "sitesConfig: {routing: {mode: gateway}}",
            &[("sitesConfig.routing", "use the top-level routing values")],
        ),
        (
            "top-level ingress block",
            "ingress: {className: nginx, annotations: {a: b}, foo: 1}",
            &[
                ("ingress.className", "moved; use routing.ingress.className"),
                (
                    "ingress.annotations",
                    "moved; use routing.ingress.hubAnnotations",
                ),
                ("ingress.foo", "moved; use routing.ingress"),
            ],
        ),
        (
            "top-level ingress scalar",
            "ingress: true",
            &[("ingress", "moved; use routing.ingress")],
        ),
        (
            "routing.hstsEnabled",
            "routing: {hstsEnabled: true}",
            &[("routing.hstsEnabled", "moved; use routing.hsts")],
        ),
        (
            "ingress_class_name",
            "sitesConfig: {kubernetes: {ingress_class_name: nginx}}",
            &[(
                "sitesConfig.kubernetes.ingress_class_name",
                "moved; use routing.ingress.className",
            )],
        ),
        (
            "ingress_extra_annotations",
            "sitesConfig: {kubernetes: {ingress_extra_annotations: {a: b}}}",
            &[(
                "sitesConfig.kubernetes.ingress_extra_annotations",
                "moved; use routing.ingress.routeAnnotations",
            )],
        ),
        // RTG-07: gateway mode needs a host and a Gateway.
        (
            "gateway without host",
            "routing: {mode: gateway, host: null}",
            &[("routing.host", "required in gateway mode")],
        ),
        (
            "gateway with empty host",
            "routing: {mode: gateway, host: \"\"}",
            &[("routing.host", "required in gateway mode")],
        ),
        (
            "gateway without gateway name",
            "routing: {mode: gateway, gateway: {name: \"\"}}",
            &[("routing.gateway.name", "required in gateway mode")],
        ),
        (
            "gateway without both",
            "routing: {mode: gateway, host: null, gateway: {name: \"\"}}",
            &[
                ("routing.host", "required in gateway mode"),
                ("routing.gateway.name", "required in gateway mode"),
            ],
        ),
        (
            "hubHost equals host",
            "routing: {hubHost: sites.example.org}",
            &[("routing.hubHost", "must differ from routing.host")],
        ),
        (
            "scheme",
            "routing: {scheme: ftp}",
            &[("routing.scheme", "must be http or https, found \"ftp\"")],
        ),
        // RTG-04: policy providers.
        (
            "unknown policy provider",
            "routing: {gateway: {policyProvider: envoy}}",
            &[(
                "routing.gateway.policyProvider",
                "unknown policy provider \"envoy\"; known providers: none",
            )],
        ),
        (
            "feature not supplied",
            "routing: {gateway: {policies: [session_affinity]}}",
            &[(
                "routing.gateway.policies",
                "policy provider \"none\" does not supply session_affinity",
            )],
        ),
        (
            "unknown feature",
            "routing: {gateway: {policies: [teleport]}}",
            &[(
                "routing.gateway.policies[0]",
                "unknown policy feature \"teleport\"",
            )],
        ),
        (
            "duplicate feature is reported, not double counted",
            "routing: {gateway: {policies: [session_affinity, session_affinity]}}",
            &[
                ("routing.gateway.policies[1]", "duplicate policy feature"),
                (
                    "routing.gateway.policies",
                    "does not supply session_affinity",
                ),
            ],
        ),
        // Unknown keys and wrong types: never silently ignored.
        (
            "unknown key with suggestion",
            "routing: {hots: x.org}",
            &[("routing.hots", "unknown key (did you mean routing.host?)")],
        ),
        (
            "unknown top-level key",
            "hub: {replicas: 2}",
            &[("hub", "unknown key")],
        ),
        (
            "unknown nested key",
            "sitesConfig: {kubernetes: {storage_clas: x}}",
            &[(
                "sitesConfig.kubernetes.storage_clas",
                "did you mean sitesConfig.kubernetes.storage_class?",
            )],
        ),
        (
            "number where a string belongs",
            "sitesConfig: {version: 2.4}",
            &[(
                "sitesConfig.version",
                "must be a string; quote the value (\"2.4\")",
            )],
        ),
        (
            "string where a boolean belongs",
            "routing: {hsts: \"yes\"}",
            &[(
                "routing.hsts",
                "must be true or false, found string \"yes\"",
            )],
        ),
        (
            "scalar where a mapping belongs",
            "routing: {tls: on}",
            &[("routing.tls", "must be a mapping")],
        ),
        (
            "mapping where a list belongs",
            "sitesConfig: {applications: {static: {}}}",
            &[("sitesConfig.applications", "must be a list")],
        ),
        (
            "routing is not a mapping",
            "routing: ingress",
            &[("routing", "must be a mapping, found string \"ingress\"")],
        ),
        // Formats of routing values.
        (
            "host with scheme",
            "routing: {host: \"https://sites.example.org\"}",
            &[("routing.host", "without scheme, port or path")],
        ),
        (
            "host with uppercase",
            "routing: {host: Sites.example.org}",
            &[("routing.host", "must be lowercase")],
        ),
        (
            "bad hubHost",
            "routing: {hubHost: \"hub.example.org:8443\"}",
            &[("routing.hubHost", "without scheme, port or path")],
        ),
        (
            "bad tls secret name",
            "routing: {tls: {secretName: Sites_TLS}}",
            &[("routing.tls.secretName", "DNS-1123 subdomain")],
        ),
        (
            "empty ingress class in ingress mode",
            "routing: {ingress: {className: \"\"}}",
            &[("routing.ingress.className", "required in ingress mode")],
        ),
        (
            "bad annotation key",
            "routing: {ingress: {routeAnnotations: {\"bad key\": x}}}",
            &[(
                "routing.ingress.routeAnnotations[\"bad key\"]",
                "invalid annotation key",
            )],
        ),
        (
            "annotation value not a string",
            "routing: {gateway: {routeAnnotations: {example.org/x: 5}}}",
            &[(
                "routing.gateway.routeAnnotations[\"example.org/x\"]",
                "must be a string, found number 5",
            )],
        ),
        (
            "gateway create without class",
            "routing: {gateway: {create: true}}",
            &[(
                "routing.gateway.className",
                "required when routing.gateway.create is true",
            )],
        ),
        (
            "bad gateway namespace",
            "routing: {gateway: {namespace: Other_NS}}",
            &[("routing.gateway.namespace", "DNS-1123 label")],
        ),
        (
            "bad listener name",
            "routing: {gateway: {listenerName: \"-x\"}}",
            &[("routing.gateway.listenerName", "DNS-1123 subdomain")],
        ),
        (
            "listener not a mapping",
            "routing: {gateway: {listeners: [https]}}",
            &[(
                "routing.gateway.listeners[0]",
                "must be a mapping (a Gateway listener)",
            )],
        ),
        // sitesConfig rules.
        (
            "missing version",
            "sitesConfig: {version: null}",
            &[("sitesConfig.version", "required: the platform version")],
        ),
        (
            "bad version",
            "sitesConfig: {version: \"-1.0\"}",
            &[("sitesConfig.version", "not a valid image tag")],
        ),
        (
            "catalogue entry without name and image",
            "sitesConfig: {applications: [{port: 80}]}",
            &[
                ("sitesConfig.applications[0].name", "required"),
                (
                    "sitesConfig.applications[0].image",
                    "required: the image repository",
                ),
            ],
        ),
        (
            "catalogue duplicate",
            "sitesConfig: {applications: [{name: a, image: r/a}, {name: b, image: r/b}, {name: a, image: r/c}]}",
            &[(
                "sitesConfig.applications[2].name",
                "duplicate application \"a\" (also at sitesConfig.applications[0])",
            )],
        ),
        (
            "catalogue image with tag",
            "sitesConfig: {applications: [{name: a, image: \"r/a:1.0\"}]}",
            &[("sitesConfig.applications[0].image", "without tag or digest")],
        ),
        (
            "catalogue bad image",
            "sitesConfig: {applications: [{name: a, image: \"R/A\"}]}",
            &[(
                "sitesConfig.applications[0].image",
                "not a valid image reference",
            )],
        ),
        (
            "catalogue bad name",
            "sitesConfig: {applications: [{name: My_App, image: r/a}]}",
            &[("sitesConfig.applications[0].name", "DNS-1123 label")],
        ),
        (
            "catalogue port zero",
            "sitesConfig: {applications: [{name: a, image: r/a, port: 0}]}",
            &[("sitesConfig.applications[0].port", "between 1 and 65535")],
        ),
        (
            "catalogue port too large",
            "sitesConfig: {applications: [{name: a, image: r/a, port: 70000}]}",
            &[("sitesConfig.applications[0].port", "must be at most 65535")],
        ),
        (
            "catalogue readiness path",
            "sitesConfig: {applications: [{name: a, image: r/a, readiness_path: healthz}]}",
            &[(
                "sitesConfig.applications[0].readiness_path",
                "must start with '/'",
            )],
        ),
        (
            "catalogue unknown key",
            "sitesConfig: {applications: [{name: a, image: r/a, tag: x}]}",
            &[("sitesConfig.applications[0].tag", "unknown key")],
        ),
        (
            "bad storage class",
            "sitesConfig: {kubernetes: {storage_class: \"Fast SSD\"}}",
            &[("sitesConfig.kubernetes.storage_class", "DNS-1123 subdomain")],
        ),
        (
            "bad default quota",
            "sitesConfig: {kubernetes: {default_quota: 10GB}}",
            &[("sitesConfig.kubernetes.default_quota", "is not a quantity")],
        ),
        (
            "zero default quota",
            "sitesConfig: {kubernetes: {default_quota: \"0\"}}",
            &[("sitesConfig.kubernetes.default_quota", "greater than zero")],
        ),
        (
            "bad priority class",
            "sitesConfig: {kubernetes: {priority_classes: {monitored: Medium_Priority}}}",
            &[(
                "sitesConfig.kubernetes.priority_classes.monitored",
                "DNS-1123 subdomain",
            )],
        ),
        (
            "bad resource quantity",
            "sitesConfig: {kubernetes: {resources: {limits: {cpu: lots}}}}",
            &[(
                "sitesConfig.kubernetes.resources.limits.cpu",
                "is not a quantity",
            )],
        ),
        (
            "requests above limits",
            "sitesConfig: {kubernetes: {resources: {requests: {memory: 1Gi}, limits: {memory: 512Mi}}}}",
            &[(
                "sitesConfig.kubernetes.resources.requests.memory",
                "must not exceed sitesConfig.kubernetes.resources.limits.memory",
            )],
        ),
        (
            "worker limit zero",
            "sitesConfig: {operator: {worker_limit: 0}}",
            &[("sitesConfig.operator.worker_limit", "must be at least 1")],
        ),
        (
            "worker limit negative",
            "sitesConfig: {operator: {worker_limit: -3}}",
            &[("sitesConfig.operator.worker_limit", "whole number")],
        ),
        (
            "worker limit fractional",
            "sitesConfig: {operator: {worker_limit: 2.5}}",
            &[("sitesConfig.operator.worker_limit", "whole number")],
        ),
        (
            "unknown log level",
            "sitesConfig: {operator: {dependency_log_level: LOUD}}",
            &[(
                "sitesConfig.operator.dependency_log_level",
                "unknown log level \"LOUD\"",
            )],
        ),
        (
            "migration without image",
            "sitesConfig: {migration: {enabled: true, image: null}}",
            &[(
                "sitesConfig.migration.image",
                "required when sitesConfig.migration.enabled is true",
            )],
        ),
        (
            "migration bad image",
            "sitesConfig: {migration: {enabled: true, image: \"mirror image\"}}",
            &[("sitesConfig.migration.image", "not a valid image reference")],
        ),
        (
            "bad session secret",
            "sitesConfig: {session: {secret_key: {secret_name: \"no/slash\", key: \"a b\"}}}",
            &[
                (
                    "sitesConfig.session.secret_key.secret_name",
                    "DNS-1123 subdomain",
                ),
                ("sitesConfig.session.secret_key.key", "must be a Secret key"),
            ],
        ),
        (
            "retention negative",
            "sitesConfig: {retention: {delete_after_days: -1}}",
            &[("sitesConfig.retention.delete_after_days", "whole number")],
        ),
        (
            "rollout of no Site at a time",
            "sitesConfig: {rollout: {max_rolling: 0}}",
            &[("sitesConfig.rollout.max_rolling", "must be at least 1")],
        ),
        (
            "rollout of 0%",
            "sitesConfig: {rollout: {max_rolling: \"0%\"}}",
            &[("sitesConfig.rollout.max_rolling", "must be at least 1")],
        ),
        (
            "rollout over 100%",
            "sitesConfig: {rollout: {max_rolling: \"150%\"}}",
            &[(
                "sitesConfig.rollout.max_rolling",
                "at most 100%, found 150%",
            )],
        ),
        (
            "rollout budget in words",
            "sitesConfig: {rollout: {max_rolling: \"ten\"}}",
            &[(
                "sitesConfig.rollout.max_rolling",
                "must be a number of Sites (5) or a percentage of them (\"10%\"), found string",
            )],
        ),
        (
            "rollout budget as a fraction",
            "sitesConfig: {rollout: {max_rolling: 0.5}}",
            &[("sitesConfig.rollout.max_rolling", "found number 0.5")],
        ),
        (
            "rollout deadline too short",
            "sitesConfig: {rollout: {progress_deadline_seconds: 3}}",
            &[(
                "sitesConfig.rollout.progress_deadline_seconds",
                "must be at least 10",
            )],
        ),
        (
            "rollout unknown key",
            "sitesConfig: {rollout: {paused: true}}",
            &[("sitesConfig.rollout.paused", "unknown key")],
        ),
    ];
    for (case, patch, expected) in cases {
        let doc = example_with(patch);
        assert_problems(case, &problems_of(&doc, &Installation::default()), expected);
    }
}

#[test]
fn gateway_namespace_must_be_the_platform_namespace_when_the_chart_creates_the_gateway() {
    let doc = example_with("routing: {gateway: {create: true, className: eg, namespace: infra}}");
    let ctx = Installation {
        namespace: Some("sites"),
    };
    assert_problems(
        "gateway namespace",
        &problems_of(&doc, &ctx),
        &[(
            "routing.gateway.namespace",
            "must be empty or the platform namespace \"sites\"",
        )],
    );
    // Unknown namespace (check-config without --namespace): nothing to compare with.
    assert!(problems_of(&doc, &Installation::default()).is_empty());
    // An existing Gateway may live anywhere.
    let doc = example_with("routing: {gateway: {create: false, namespace: infra}}");
    assert!(problems_of(&doc, &ctx).is_empty());
}

#[test]
fn valid_gateway_configuration() {
    let doc = example_with(
        "routing: {mode: gateway, host: sites.example.org, hubHost: hub.example.org, gateway: {name: gw, namespace: infra, listenerName: https}}",
    );
    let c = PlatformConfig::from_value(&doc, &Installation::default()).expect("valid");
    assert_eq!(c.routing.mode, RoutingMode::Gateway);
    assert_eq!(c.routing.gateway.namespace.as_deref(), Some("infra"));
}

#[test]
fn every_problem_is_reported_at_once() {
    let doc = example_with(
        r#"
ingress: {className: nginx}
routing:
  mode: gateway
  host: null
  hubHost: hub.example.org
  scheme: gopher
  hstsEnabled: true
  gateway: {name: "", policyProvider: istio}
sitesConfig:
  routing: {mode: ingress}
  version: 3
  kubernetes: {ingress_class_name: nginx, ingress_extra_annotations: {}}
  operator: {worker_limit: 0}
"#,
    );
    let problems = problems_of(&doc, &Installation::default());
    assert_problems(
        "several problems",
        &problems,
        &[
            ("ingress.className", "moved; use routing.ingress.className"),
            ("routing.scheme", "must be http or https"),
            ("routing.hstsEnabled", "moved; use routing.hsts"),
            ("routing.host", "required in gateway mode"),
            ("routing.gateway.name", "required in gateway mode"),
            (
                "routing.gateway.policyProvider",
                "unknown policy provider \"istio\"",
            ),
            ("sitesConfig.routing", "use the top-level routing values"),
            ("sitesConfig.version", "must be a string"),
            (
                "sitesConfig.kubernetes.ingress_class_name",
                "routing.ingress.className",
            ),
            (
                "sitesConfig.kubernetes.ingress_extra_annotations",
                "routing.ingress.routeAnnotations",
            ),
            ("sitesConfig.operator.worker_limit", "must be at least 1"),
        ],
    );
}

#[test]
fn documents_that_are_not_a_configuration() {
    // Not YAML at all: a syntax error naming the source, on one line.
    let err = PlatformConfig::from_yaml("routing: [unclosed", "bad.yaml", &Installation::default())
        .unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with("bad.yaml is not valid YAML: "), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    // A scalar or a list document.
    for text in ["just a string", "- a\n- b"] {
        let problems = match PlatformConfig::from_yaml(text, "x", &Installation::default()) {
            Err(ConfigError::Invalid(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(problems[0].field, "(document)");
        assert!(problems[0].message.contains("must be a mapping"));
    }
    // Non-string mapping keys.
    let err =
        PlatformConfig::from_yaml("? [a, b]\n: c\n", "x", &Installation::default()).unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err:?}");
    // An empty file is read as an empty mapping: only the required version is missing.
    let problems = match PlatformConfig::from_yaml("", "x", &Installation::default()) {
        Err(ConfigError::Invalid(p)) => p,
        other => panic!("{other:?}"),
    };
    assert_problems("empty", &problems, &[("sitesConfig.version", "required")]);
}

#[test]
fn configmap_data_is_validated_like_a_file() {
    let mut data = BTreeMap::new();
    assert!(matches!(
        validate_configmap_data(Some(&data), &Installation::default()),
        Err(ConfigError::Invalid(p)) if p[0].field == "data[\"config.yaml\"]"
    ));
    assert!(validate_configmap_data(None, &Installation::default()).is_err());
    data.insert(CONFIGMAP_KEY.to_string(), EXAMPLE.to_string());
    assert!(validate_configmap_data(Some(&data), &Installation::default()).is_ok());
    data.insert(
        CONFIGMAP_KEY.to_string(),
        "routing: {mode: mesh}\nsitesConfig: {version: \"1\"}".into(),
    );
    match validate_configmap_data(Some(&data), &Installation::default()) {
        Err(ConfigError::Invalid(p)) => assert_eq!(p[0].field, "routing.mode"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn log_levels_accept_python_and_tracing_spellings() {
    for (s, l) in [
        ("DEBUG", LogLevel::Debug),
        ("info", LogLevel::Info),
        ("WARNING", LogLevel::Warn),
        ("warn", LogLevel::Warn),
        ("CRITICAL", LogLevel::Error),
        ("trace", LogLevel::Trace),
    ] {
        assert_eq!(LogLevel::parse(s), Some(l), "{s}");
    }
    assert_eq!(LogLevel::parse("verbose"), None);
}

/// One document breaking every rule it can at once (`testdata/every-rejection.yaml`): every
/// problem is reported together, each naming its key; the rules that are alternatives for a key
/// already broken there are broken together in `testdata/every-rejection-alternatives.yaml`.
#[test]
fn every_rule_broken_at_once_is_reported_at_once() {
    let ctx = Installation {
        namespace: Some("sites"),
    };
    let text = include_str!("testdata/every-rejection.yaml");
    let problems = match PlatformConfig::from_yaml(text, "every-rejection.yaml", &ctx) {
        Err(ConfigError::Invalid(p)) => p,
        other => panic!("{other:?}"),
    };
    let apps = "sitesConfig.applications";
    let k = "sitesConfig.kubernetes";
    let expected: Vec<(String, &str)> = [
        ("ingress.className", "moved; use routing.ingress.className"),
        (
            "ingress.annotations",
            "moved; use routing.ingress.hubAnnotations",
        ),
        ("ingress.foo", "moved; use routing.ingress"),
        ("hub", "unknown key"),
        ("routing.host", "required in gateway mode"),
        ("routing.hubHost", "\"Hub.example.org\" must be lowercase"),
        ("routing.scheme", "must be http or https, found \"ftp\""),
        (
            "routing.hsts",
            "must be true or false, found string \"yes\"",
        ),
        ("routing.hstsEnabled", "moved; use routing.hsts"),
        ("routing.tls.secretName", "must be a DNS-1123 subdomain"),
        ("routing.tls.hubSecretName", "must be a DNS-1123 subdomain"),
        ("routing.tls.cert", "unknown key"),
        ("routing.ingress.className", "must be a DNS-1123 subdomain"),
        (
            "routing.ingress.hubAnnotations[\"bad key\"]",
            "invalid annotation key",
        ),
        (
            "routing.ingress.routeAnnotations[\"example.org/x\"]",
            "must be a string, found number 5",
        ),
        ("routing.ingress.extra", "unknown key"),
        ("routing.gateway.name", "required in gateway mode"),
        (
            "routing.gateway.namespace",
            "must be empty or the platform namespace \"sites\"",
        ),
        (
            "routing.gateway.listenerName",
            "must be a DNS-1123 subdomain",
        ),
        (
            "routing.gateway.hubListenerName",
            "must be a DNS-1123 subdomain",
        ),
        (
            "routing.gateway.className",
            "required when routing.gateway.create is true",
        ),
        (
            "routing.gateway.annotations[\"-bad\"]",
            "invalid annotation key",
        ),
        (
            "routing.gateway.listeners[0]",
            "must be a mapping (a Gateway listener)",
        ),
        (
            "routing.gateway.httpRedirect",
            "must be true or false, found number 1",
        ),
        (
            "routing.gateway.routeAnnotations[\"a b\"]",
            "invalid annotation key",
        ),
        (
            "routing.gateway.policies[0]",
            "unknown policy feature \"teleport\"",
        ),
        (
            "routing.gateway.policies[2]",
            "duplicate policy feature \"session_affinity\"",
        ),
        (
            "routing.gateway.policies",
            "policy provider \"none\" does not supply session_affinity",
        ),
        (
            "routing.gateway.policyRbacRules[0]",
            "must be a mapping (an RBAC policy rule)",
        ),
        ("routing.gateway.hosts", "unknown key"),
        (
            "sitesConfig.routing",
            "not allowed: routing is platform-wide",
        ),
        ("sitesConfig.version", "\"-1.0\" is not a valid image tag"),
        (
            &format!("{apps}[0]"),
            "must be a mapping, found string \"static\"",
        ),
        (&format!("{apps}[0].name"), "required"),
        (
            &format!("{apps}[0].image"),
            "required: the image repository",
        ),
        (&format!("{apps}[1].name"), "required"),
        (
            &format!("{apps}[1].image"),
            "required: the image repository",
        ),
        (&format!("{apps}[1].port"), "must be between 1 and 65535"),
        (&format!("{apps}[2].name"), "must be a DNS-1123 label"),
        (&format!("{apps}[2].image"), "without tag or digest"),
        (&format!("{apps}[2].readiness_path"), "must start with '/'"),
        (&format!("{apps}[2].tag"), "unknown key"),
        (
            &format!("{apps}[3].image"),
            "\"R/A\" is not a valid image reference",
        ),
        (
            &format!("{apps}[3].port"),
            "must be at most 65535, found 70000",
        ),
        (
            &format!("{apps}[4].name"),
            "duplicate application \"a\" (also at sitesConfig.applications[3])",
        ),
        (
            &format!("{apps}[4].port"),
            "must be a whole number from 0 to 65535, found string \"80\"",
        ),
        (
            &format!("{k}.storage_class"),
            "must be a DNS-1123 subdomain",
        ),
        (
            &format!("{k}.storage_expansion_supported"),
            "must be true or false",
        ),
        (&format!("{k}.default_quota"), "\"10GB\" is not a quantity"),
        (
            &format!("{k}.priority_classes.default"),
            "must be a DNS-1123 subdomain",
        ),
        (
            &format!("{k}.priority_classes.monitored"),
            "must be a DNS-1123 subdomain",
        ),
        (&format!("{k}.priority_classes.extra"), "unknown key"),
        (
            &format!("{k}.resources.requests.cpu"),
            "must not be negative",
        ),
        (
            &format!("{k}.resources.limits.cpu"),
            "\"lots\" is not a quantity",
        ),
        (
            &format!("{k}.resources.requests.memory"),
            "must not exceed sitesConfig.kubernetes.resources.limits.memory",
        ),
        (&format!("{k}.resources.claims"), "unknown key"),
        (
            &format!("{k}.ingress_class_name"),
            "moved; use routing.ingress.className",
        ),
        (
            &format!("{k}.ingress_extra_annotations"),
            "moved; use routing.ingress.routeAnnotations",
        ),
        ("sitesConfig.operator.worker_limit", "must be at least 1"),
        (
            "sitesConfig.operator.dependency_log_level",
            "unknown log level \"LOUD\"",
        ),
        ("sitesConfig.operator.threads", "unknown key"),
        (
            "sitesConfig.migration.image",
            "required when sitesConfig.migration.enabled is true",
        ),
        (
            "sitesConfig.session.secret_key.secret_name",
            "must be a DNS-1123 subdomain",
        ),
        ("sitesConfig.session.secret_key.key", "must be a Secret key"),
        ("sitesConfig.session.secret_key.namespace", "unknown key"),
        ("sitesConfig.session.ttl", "unknown key"),
        (
            "sitesConfig.retention.archive_after_days",
            "must be a whole number from 0 to 36500, found number -1",
        ),
        (
            "sitesConfig.retention.delete_after_days",
            "must be at most 36500, found 36501",
        ),
        ("sitesConfig.retention.keep", "unknown key"),
    ]
    .into_iter()
    .map(|(key, fragment)| (key.to_string(), fragment))
    .collect();
    let expected: Vec<(&str, &str)> = expected.iter().map(|(k, f)| (k.as_str(), *f)).collect();
    assert_problems("every rule at once", &problems, &expected);
    // One line per problem in the error check-config and the start-up print.
    let message = ConfigError::Invalid(problems.clone()).to_string();
    for p in &problems {
        assert!(
            message.contains(&p.to_string()),
            "{p} missing from {message}"
        );
    }

    let text = include_str!("testdata/every-rejection-alternatives.yaml");
    let problems = match PlatformConfig::from_yaml(text, "alternatives.yaml", &ctx) {
        Err(ConfigError::Invalid(p)) => p,
        other => panic!("{other:?}"),
    };
    assert_problems(
        "the alternatives at once",
        &problems,
        &[
            ("ingress", "moved; use routing.ingress"),
            (
                "routing.mode",
                "unknown routing mode \"mesh\"; use ingress or gateway",
            ),
            ("routing.hubHost", "must differ from routing.host"),
            ("routing.tls", "must be a mapping, found string \"on\""),
            ("routing.ingress.className", "required in ingress mode"),
            ("routing.gateway.namespace", "must be a DNS-1123 label"),
            ("routing.gateway.className", "must be a DNS-1123 subdomain"),
            (
                "routing.gateway.policyProvider",
                "unknown policy provider \"envoy\"",
            ),
            (
                "routing.gateway.listeners",
                "must be a list, found string \"https\"",
            ),
            (
                "sitesConfig.version",
                "must be a string; quote the value (\"2.4\")",
            ),
            (
                "sitesConfig.applications",
                "must be a list, found a mapping",
            ),
            (
                "sitesConfig.kubernetes.default_quota",
                "must be greater than zero",
            ),
            (
                "sitesConfig.kubernetes.resources.requests.memory",
                "must not be negative",
            ),
            (
                "sitesConfig.kubernetes.resources.limits",
                "must be a mapping, found number 5",
            ),
            (
                "sitesConfig.operator.worker_limit",
                "must be at most 1024, found 2000",
            ),
            (
                "sitesConfig.migration.image",
                "\"mirror image\" is not a valid image reference",
            ),
            ("sitesConfig.session", "must be a mapping, found number 5"),
            (
                "sitesConfig.retention.delete_after_days",
                "must be a whole number from 0 to 36500, found number 1.5",
            ),
        ],
    );
}

/// Documents that try to smuggle something past the reader: YAML tags, several documents,
/// duplicate keys, anchors expanding exponentially, deep nesting. Each is an error naming the
/// source or the key; none runs anything or exhausts the process.
#[test]
fn hostile_yaml_is_rejected_not_obeyed() {
    let ctx = Installation::default();
    let syntax = |text: &str| match PlatformConfig::from_yaml(text, "x.yaml", &ctx) {
        Err(ConfigError::Syntax { reason, .. }) => reason,
        other => panic!("{text:?}: {other:?}"),
    };
    let invalid = |text: &str| match PlatformConfig::from_yaml(text, "x.yaml", &ctx) {
        Err(ConfigError::Invalid(p)) => p,
        other => panic!("{text:?}: {other:?}"),
    };
    let version = "sitesConfig: {version: \"1\"}\n";
    assert!(
        syntax(&format!("{version}---\nrouting: {{mode: gateway}}\n"))
            .contains("more than one document")
    );
    assert!(
        syntax("sitesConfig:\n  version: \"1\"\n  version: \"2\"\n")
            .contains("duplicate entry with key \"version\"")
    );
    assert!(
        syntax(&format!("a: {}{}", "[".repeat(10_000), "]".repeat(10_000)))
            .contains("recursion limit exceeded")
    );
    let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        let refs = vec![format!("*{prev}"); 9].join(",");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    assert!(syntax(&bomb).contains("more than 20000 values"));
    // Already seven levels (4.8 million values, a 1,000-byte document) are refused before they
    // are built; so is text longer than a configuration has.
    let seven = bomb.lines().take(7).collect::<Vec<_>>().join("\n");
    assert!(syntax(&seven).contains("more than 20000 values"), "{seven}");
    let long = format!("{version}# {}\n", "x".repeat(MAX_TEXT_BYTES));
    assert!(syntax(&long).contains("a configuration has at most 65536 bytes"));
    // Tags: a local tag makes a mapping where a string belongs; a tagged document or section is
    // not the mapping it must be. Nothing is constructed from a tag.
    let p = invalid(&format!(
        "{version}routing: {{host: !python/object:os.system ls}}\n"
    ));
    assert_eq!(
        p[0].to_string(),
        "routing.host: must be a string, found a mapping"
    );
    let p = invalid("!!python/object/apply:os.system [ls]\n");
    assert_eq!(p[0].field, "(document)");
    let p = invalid(&format!(
        "{version}routing: !!python/object/apply:os.system [ls]\n"
    ));
    assert_eq!(p[0].to_string(), "routing: must be a mapping, found a list");
    // A multi-line value stays one value, checked like any other.
    let p = invalid(&format!(
        "{version}routing:\n  host: \"a\n    include: /etc/passwd\"\n"
    ));
    assert!(
        p[0].to_string()
            .starts_with("routing.host: \"a include: /etc/passwd\" "),
        "{p:?}"
    );
    // Non-UTF-8 files are refused with the offset of the first bad byte.
    let dir = std::env::temp_dir().join(format!("config-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(&file, b"sitesConfig:\n  version: \"1\xff\"\n").unwrap();
    let err = PlatformConfig::load(&file, &ctx).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        err.to_string()
            .contains("not UTF-8 text (invalid byte at offset 26)"),
        "{err}"
    );
}

/// ROL-01: the change budget, as a number of Sites or a percentage of them (rounded down, at
/// least one Site).
#[test]
fn the_change_budget_is_a_number_or_a_percentage_of_the_sites() {
    use serde_json::json;
    let cases = [
        (json!(5), Some(MaxRolling::Sites(5)), 1000, 5),
        (json!("10%"), Some(MaxRolling::Percent(10)), 1000, 100),
        (json!("10%"), Some(MaxRolling::Percent(10)), 15, 1),
        (json!("10%"), Some(MaxRolling::Percent(10)), 5, 1),
        (json!(" 25% "), Some(MaxRolling::Percent(25)), 2, 1),
        (json!("100%"), Some(MaxRolling::Percent(100)), 7, 7),
        (json!("%"), None, 0, 0),
        (json!("1.5%"), None, 0, 0),
        (json!("-5%"), None, 0, 0),
        (json!(-1), None, 0, 0),
        (json!(true), None, 0, 0),
    ];
    for (value, parsed, sites, slots) in cases {
        assert_eq!(MaxRolling::parse(&value), parsed, "{value}");
        if let Some(max) = parsed {
            assert_eq!(max.of(sites), slots, "{value} of {sites}");
            assert_eq!(
                MaxRolling::parse(&json!(max.to_string())).or(Some(max)),
                Some(max)
            );
        }
    }
    let example =
        PlatformConfig::from_yaml(EXAMPLE, "config.yaml", &Installation::default()).unwrap();
    assert_eq!(example.sites.rollout, Rollout::default());
}
