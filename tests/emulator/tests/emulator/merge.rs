//! Merge semantics from Kubernetes' own schemas (EMULATOR.md C1), through the real kubectl:
//! atomic maps and structs replaced whole by server-side apply, lists merged by their
//! `x-kubernetes-list-map-keys`, strategic merge by the patch merge keys, a CRD schema's own
//! `x-kubernetes-map-type`.

use serde_json::{Value, json};

use crate::support::{Cluster, on_both};

fn apply(c: &Cluster, manager: &str, manifest: &str) {
    let out = c.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            &format!("--field-manager={manager}"),
            "-f",
            "-",
        ],
        Some(manifest),
    );
    assert!(out.status.success(), "{manager} apply: {out:?}");
}

fn get(c: &Cluster, what: &str) -> Value {
    serde_json::from_str(&c.kubectl_ok(&["get", what, "-o", "json", "--show-managed-fields"]))
        .unwrap()
}

/// The fieldsV1 of `manager`'s Apply entry.
fn owned(obj: &Value, manager: &str) -> Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == "Apply")
        .unwrap_or_else(|| panic!("no Apply entry of {manager}: {obj}"))["fieldsV1"]
        .clone()
}

const SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
    tier: front
  ports:
    - port: 53
      protocol: TCP
      name: dns-tcp
    - port: 53
      protocol: UDP
      name: dns-udp
"#;

on_both! {
/// The issue's case: a merge patch adds a key to a Service's selector (a JSON merge patch merges
/// maps whatever the schema); the owner's next apply replaces the atomic selector whole.
async fn an_atomic_selector_is_replaced_whole_by_its_appliers_next_apply(c: Cluster) {
    apply(&c, "operator", SERVICE);
    let svc = get(&c, "service/web");
    // Owned as one field: no entries below f:selector.
    let fields = owned(&svc, "operator");
    // ServiceSpec.selector is `+mapType=atomic` since Kubernetes 1.27; in 1.20 it is a
    // granular map (staging/src/k8s.io/api/core/v1/types.go:4050 of 1.20.2 has no map type),
    // owned key by key, and keys other managers added stay through the owner's next apply.
    let atomic = !c.is_real();
    if atomic {
        assert_eq!(fields["f:spec"]["f:selector"], json!({}), "{fields}");
    } else {
        assert_eq!(
            fields["f:spec"]["f:selector"],
            json!({"f:app": {}, "f:tier": {}}),
            "{fields}"
        );
    }
    // Ports keyed by port and protocol: 53/TCP and 53/UDP are two items.
    let ports = fields["f:spec"]["f:ports"].as_object().unwrap();
    assert!(
        ports.contains_key(r#"k:{"port":53,"protocol":"TCP"}"#)
            && ports.contains_key(r#"k:{"port":53,"protocol":"UDP"}"#),
        "{fields}"
    );
    assert_eq!(svc["spec"]["ports"].as_array().unwrap().len(), 2);

    c.kubectl_ok(&[
        "patch",
        "service/web",
        "--type=merge",
        "-p",
        r#"{"spec":{"selector":{"app":"hijacked"}}}"#,
    ]);
    c.kubectl_ok(&[
        "patch",
        "service/web",
        "--type=merge",
        "-p",
        r#"{"spec":{"selector":{"extra":"x"}}}"#,
    ]);
    assert_eq!(
        get(&c, "service/web")["spec"]["selector"],
        json!({"app": "hijacked", "tier": "front", "extra": "x"})
    );
    apply(&c, "operator", SERVICE);
    let reapplied = if atomic {
        json!({"app": "web", "tier": "front"})
    } else {
        json!({"app": "web", "tier": "front", "extra": "x"})
    };
    assert_eq!(get(&c, "service/web")["spec"]["selector"], reapplied);

    // Strategic merge reads the struct tags only, as the API server: a selector merges there.
    c.kubectl_ok(&[
        "patch",
        "service/web",
        "--type=strategic",
        "-p",
        r#"{"spec":{"selector":{"extra":"x"}}}"#,
    ]);
    assert_eq!(
        get(&c, "service/web")["spec"]["selector"],
        json!({"app": "web", "tier": "front", "extra": "x"})
    );
}
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: app
          image: nginx
          env:
            - name: MODE
              value: web
          ports:
            - containerPort: 53
              protocol: TCP
            - containerPort: 53
              protocol: UDP
"#;

on_both! {
/// A LabelSelector is atomic as a type; template labels merge key by key; container env merges
/// by name and ports by containerPort and protocol, each item owned by whoever applied it.
async fn deployments_merge_selectors_env_and_ports_as_the_schemas_say(c: Cluster) {
    apply(&c, "owner", DEPLOYMENT);
    let fields = owned(&get(&c, "deployment/web"), "owner");
    assert_eq!(fields["f:spec"]["f:selector"], json!({}), "{fields}");
    let container =
        &fields["f:spec"]["f:template"]["f:spec"]["f:containers"][r#"k:{"name":"app"}"#];
    assert!(
        container["f:env"][r#"k:{"name":"MODE"}"#].is_object(),
        "{fields}"
    );
    for protocol in ["TCP", "UDP"] {
        let key = format!(r#"k:{{"containerPort":53,"protocol":"{protocol}"}}"#);
        assert!(container["f:ports"][&key].is_object(), "{key}: {fields}");
    }

    // Someone widens the selector and the labels by hand. An apps/v1 Deployment's selector is
    // immutable (pkg/registry/apps/deployment/strategy.go ValidateUpdate, 1.20.2 as 1.32): the
    // API server refuses the selector and takes the labels alone. The emulator lets the
    // selector change (open).
    let widened = r#"{"spec":{"selector":{"matchLabels":{"tier":"x"}},"template":{"metadata":{"labels":{"tier":"x"}}}}}"#;
    if c.is_real() {
        let out = c.kubectl(&["patch", "deployment/web", "--type=merge", "-p", widened]);
        assert!(!out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("spec.selector: Invalid value: ")
                && String::from_utf8_lossy(&out.stderr).contains("field is immutable"),
            "{out:?}"
        );
        c.kubectl_ok(&[
            "patch",
            "deployment/web",
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"metadata":{"labels":{"tier":"x"}}}}}"#,
        ]);
    } else {
        c.kubectl_ok(&["patch", "deployment/web", "--type=merge", "-p", widened]);
    }
    // A second manager adds an env var and a port of its own. (Against 1.20 kubectl validates
    // with OpenAPI v2, which requires a Deployment's selector even in an apply configuration:
    // the sidecar applies the same selector, shared with its owner.)
    let sidecar = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      containers:
        - name: app
          env:
            - name: TRACE
              value: "1"
          ports:
            - containerPort: 9090
              protocol: TCP
"#;
    let sidecar = if c.is_real() {
        sidecar.replace(
            "spec:\n  template:",
            "spec:\n  selector:\n    matchLabels:\n      app: web\n  template:",
        )
    } else {
        sidecar.to_string()
    };
    apply(&c, "sidecar-injector", &sidecar);
    let d = get(&c, "deployment/web");
    let names = |d: &Value, list: &str, key: &str| -> Vec<String> {
        d["spec"]["template"]["spec"]["containers"][0][list]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| match &i[key] {
                Value::String(s) => s.clone(),
                other => format!("{other}/{}", i["protocol"].as_str().unwrap_or("")),
            })
            .collect()
    };
    assert_eq!(names(&d, "env", "name"), ["MODE", "TRACE"]);
    assert_eq!(
        names(&d, "ports", "containerPort"),
        ["53/TCP", "53/UDP", "9090/TCP"]
    );

    // The owner re-applies without its env var: the selector is exactly its own again, the
    // template labels keep the hand-added key (a granular map), MODE goes, TRACE stays.
    apply(
        &c,
        "owner",
        &DEPLOYMENT.replace(
            "          env:\n            - name: MODE\n              value: web\n",
            "",
        ),
    );
    let d = get(&c, "deployment/web");
    assert_eq!(
        d["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"],
        json!({"app": "web", "tier": "x"})
    );
    assert_eq!(names(&d, "env", "name"), ["TRACE"]);
    assert_eq!(
        names(&d, "ports", "containerPort"),
        ["53/TCP", "53/UDP", "9090/TCP"]
    );

    // Strategic merge: env by name, ports by containerPort (the struct tags' merge keys).
    c.kubectl_ok(&[
        "patch",
        "deployment/web",
        "--type=strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","env":[{"name":"TRACE","value":"2"}]}]}}}}"#,
    ]);
    let d = get(&c, "deployment/web");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "TRACE", "value": "2"}])
    );
}
}

on_both! {
/// A custom resource's schema says the same with its own extensions.
async fn a_crd_schemas_own_map_type_is_followed(c: Cluster) {
    let out = c.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: routes.example.org
spec:
  group: example.org
  scope: Namespaced
  names: {plural: routes, singular: route, kind: Route}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                selector:
                  type: object
                  additionalProperties: {type: string}
                  x-kubernetes-map-type: atomic
                labels:
                  type: object
                  additionalProperties: {type: string}
                target:
                  type: object
                  x-kubernetes-map-type: atomic
                  properties:
                    name: {type: string}
                    port: {type: integer}
"#,
        ),
    );
    assert!(out.status.success(), "{out:?}");
    let route = r#"
apiVersion: example.org/v1
kind: Route
metadata:
  name: r
spec:
  selector: {app: web}
  labels: {app: web}
  target: {name: web}
"#;
    // The CRD is served once established; apply until it is.
    crate::support::eventually(
        "the Route CRD served",
        std::time::Duration::from_secs(10),
        || async {
            c.kubectl_stdin(
                &["apply", "--server-side", "--field-manager=owner", "-f", "-"],
                Some(route),
            )
            .status
            .success()
            .then_some(())
        },
    )
    .await;
    let fields = owned(&get(&c, "route/r"), "owner");
    assert_eq!(fields["f:spec"]["f:selector"], json!({}), "{fields}");
    assert_eq!(fields["f:spec"]["f:target"], json!({}), "{fields}");
    assert!(
        fields["f:spec"]["f:labels"]["f:app"].is_object(),
        "{fields}"
    );
    c.kubectl_ok(&[
        "patch",
        "route/r",
        "--type=merge",
        "-p",
        r#"{"spec":{"selector":{"x":"1"},"labels":{"x":"1"},"target":{"port":80}}}"#,
    ]);
    apply(&c, "owner", route);
    let spec = &get(&c, "route/r")["spec"];
    assert_eq!(spec["selector"], json!({"app": "web"}));
    assert_eq!(spec["target"], json!({"name": "web"}));
    assert_eq!(spec["labels"], json!({"app": "web", "x": "1"}));
}
}
