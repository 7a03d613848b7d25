//! The CustomResourceDefinitions the product prints (`sites-operator crd`): the Site's, generated
//! from the types of [`crate::crd`] (their doc comments become the descriptions `kubectl explain`
//! shows), and copies of the Gateway API's for development clusters without it.
//! `manifests/base/crd.yaml` is the output of [`crd_yaml`]; a test fails when the two drift.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

use crate::crd::Site;

/// The Site CustomResourceDefinition.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = <Site as kube::CustomResourceExt>::crd();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            reflow_descriptions(schema);
        }
    }
    crd
}

/// Joins the hard-wrapped lines of doc comments into one line per paragraph, so that
/// `kubectl explain` wraps descriptions to the terminal instead of at the source's width.
fn reflow_descriptions(schema: &mut JSONSchemaProps) {
    if let Some(d) = schema.description.as_mut() {
        *d = d
            .split("\n\n")
            .map(|para| para.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n\n");
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        reflow_descriptions(child);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = schema.items.as_mut() {
        reflow_descriptions(items);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(extra)) = schema.additional_properties.as_mut() {
        reflow_descriptions(extra);
    }
}

/// The Gateway API HTTPRoute and Gateway CRDs (standard channel) as this release's gateway-api
/// types define them, with the printer columns of the upstream CRDs (HTTPRoute: HOSTNAMES, AGE;
/// Gateway: CLASS, ADDRESS, PROGRAMMED, AGE), for development clusters without the Gateway API
/// (`sites-operator crd --with-gateway-api`).
pub fn gateway_api_crds() -> [CustomResourceDefinition; 2] {
    use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition;
    let column = |name: &str, type_: &str, path: &str| CustomResourceColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        json_path: path.into(),
        ..Default::default()
    };
    let with_columns = |crd: CustomResourceDefinition,
                        columns: Vec<CustomResourceColumnDefinition>| {
        let mut crd = as_upstream_publishes(crd);
        for version in &mut crd.spec.versions {
            version.additional_printer_columns = Some(columns.clone());
        }
        crd
    };
    [
        with_columns(
            <HttpRoute as kube::CustomResourceExt>::crd(),
            vec![
                column("Hostnames", "string", ".spec.hostnames"),
                column("Age", "date", ".metadata.creationTimestamp"),
            ],
        ),
        with_columns(
            <Gateway as kube::CustomResourceExt>::crd(),
            vec![
                column("Class", "string", ".spec.gatewayClassName"),
                column("Address", "string", ".status.addresses[*].value"),
                column(
                    "Programmed",
                    "string",
                    ".status.conditions[?(@.type==\"Programmed\")].status",
                ),
                column("Age", "date", ".metadata.creationTimestamp"),
            ],
        ),
    ]
}

/// The Gateway API release whose standard-channel types the gateway-api crate generates.
const GATEWAY_API_BUNDLE_VERSION: &str = "v1.5.1";

/// A Gateway API CRD as an API server accepts it, as upstream publishes it:
/// - `api-approved.kubernetes.io`: `gateway.networking.k8s.io` is a protected group (`*.k8s.io`);
///   without the annotation every API server refuses the CRD (`protected groups must have
///   approval annotation`). Upstream's CRDs carry the URL of their API review.
/// - no `null` in an `enum`: the generated schemas list `null` beside `nullable: true`, which
///   Kubernetes 1.20 refuses (`Unsupported value: null`); `nullable` alone admits it on every
///   version.
fn as_upstream_publishes(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn drop_null_enums(node: &mut serde_json::Value) {
        match node {
            serde_json::Value::Object(o) => {
                if let Some(serde_json::Value::Array(values)) = o.get_mut("enum") {
                    values.retain(|v| !v.is_null());
                }
                o.values_mut().for_each(drop_null_enums);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(drop_null_enums),
            _ => {}
        }
    }
    let mut value =
        serde_json::to_value(&crd).expect("a CustomResourceDefinition always serialises");
    drop_null_enums(&mut value);
    let mut crd: CustomResourceDefinition = serde_json::from_value(value)
        .expect("removing enum values keeps a CustomResourceDefinition");
    let annotations = crd.metadata.annotations.get_or_insert_default();
    annotations.insert(
        "api-approved.kubernetes.io".into(),
        "https://github.com/kubernetes-sigs/gateway-api/pull/2466".into(),
    );
    annotations.insert(
        "gateway.networking.k8s.io/bundle-version".into(),
        GATEWAY_API_BUNDLE_VERSION.into(),
    );
    annotations.insert(
        "gateway.networking.k8s.io/channel".into(),
        "standard".into(),
    );
    crd
}

/// The Site CustomResourceDefinition as YAML, exactly as committed in `manifests/base/crd.yaml`.
pub fn crd_yaml() -> String {
    serde_yaml_ng::to_string(&crd()).expect("a CustomResourceDefinition always serialises to YAML")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::GROUP;
    use serde_json::{Value, json};

    const COMMITTED: &str = include_str!("../manifests/base/crd.yaml");

    fn schema() -> Value {
        let crd = serde_json::to_value(crd()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn committed_crd_matches_the_generated_one() {
        assert!(
            crd_yaml() == COMMITTED,
            "manifests/base/crd.yaml is out of date: run `make crd` (sites-operator crd > manifests/base/crd.yaml) and commit it"
        );
    }

    #[test]
    fn names_scope_and_subresources() {
        let crd = serde_json::to_value(crd()).unwrap();
        assert_eq!(crd["metadata"]["name"], "sites.sites.ecmwf.int");
        let spec = &crd["spec"];
        assert_eq!(spec["group"], GROUP);
        assert_eq!(spec["scope"], "Namespaced");
        assert_eq!(spec["names"]["kind"], "Site");
        assert_eq!(spec["names"]["plural"], "sites");
        assert_eq!(spec["names"]["shortNames"], json!(["site"]));
        assert_eq!(spec["names"]["categories"], json!(["ecmwf"]));
        let v = &spec["versions"][0];
        assert_eq!(v["name"], "v1");
        assert_eq!(v["served"], true);
        assert_eq!(v["storage"], true);
        assert_eq!(v["subresources"], json!({"status": {}}));
        let columns: Vec<_> = v["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["jsonPath"].as_str().unwrap()))
            .collect();
        assert_eq!(
            columns,
            [
                ("Path", ".status.path"),
                ("Space", ".spec.configuration.space"),
                ("Phase", ".status.phase"),
                (
                    "Available",
                    ".status.conditions[?(@.type==\"Available\")].status"
                ),
                (
                    "Progressing",
                    ".status.conditions[?(@.type==\"Progressing\")].status"
                ),
                ("Age", ".metadata.creationTimestamp"),
                ("Owner", ".spec.owner"),
                ("Replicas", ".spec.configuration.settings.replicas"),
                ("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
                (
                    "Reason",
                    ".status.conditions[?(@.type==\"Progressing\")].reason"
                ),
            ]
        );
    }

    #[test]
    fn defaults_and_required_fields() {
        let s = schema();
        let spec = &s["properties"]["spec"];
        assert_eq!(
            spec["required"],
            json!(["configuration", "name", "owner", "type"])
        );
        let conf = &spec["properties"]["configuration"];
        assert_eq!(conf["required"], json!(["space"]));
        assert_eq!(conf["properties"]["enabled"]["default"], json!(true));
        // settings defaults to {replicas: 1}, so the API server fills replicas in even when the
        // whole settings block is absent.
        assert_eq!(
            conf["properties"]["settings"]["default"],
            json!({"replicas": 1})
        );
        assert_eq!(
            conf["properties"]["settings"]["properties"]["replicas"]["default"],
            json!(1)
        );
        // No other defaults: the API server must not add empty lists or maps to stored Sites.
        let mut defaults = Vec::new();
        walk(&s, "", &mut |path, node| {
            if node.get("default").is_some() {
                defaults.push(path.to_string());
            }
        });
        assert_eq!(
            defaults,
            [
                ".spec.configuration.applications[].paths[].path_type",
                ".spec.configuration.enabled",
                ".spec.configuration.settings",
                ".spec.configuration.settings.replicas",
            ]
        );
    }

    #[test]
    fn per_site_routing_is_kept_for_the_webhook_to_reject() {
        let s = schema();
        let conf = &s["properties"]["spec"]["properties"]["configuration"]["properties"];
        for routing in [&conf["routing"], &conf["settings"]["properties"]["routing"]] {
            assert_eq!(routing["type"], "object");
            assert_eq!(routing["x-kubernetes-preserve-unknown-fields"], true);
        }
    }

    #[test]
    fn schema_is_structural_and_every_field_is_described() {
        walk(&schema(), "", &mut |path, node| {
            let typed = node.get("type").is_some()
                || node.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
            assert!(typed, "{path}: no type (the schema must be structural)");
            // Kubernetes 1.20 builds no server-side apply model for a CRD with one (see
            // `quantity_schema`): every list would become atomic.
            assert!(
                node.get("x-kubernetes-int-or-string").is_none(),
                "{path}: x-kubernetes-int-or-string breaks the 1.20 apply models"
            );
            for forbidden in ["anyOf", "oneOf", "allOf", "$ref", "not"] {
                assert!(
                    node.get(forbidden).is_none(),
                    "{path}: {forbidden} is not structural"
                );
            }
            let is_item = path.ends_with("[]") || path.ends_with("{}");
            if !is_item && !path.is_empty() {
                let described = node["description"].as_str().is_some_and(|d| !d.is_empty());
                assert!(
                    described,
                    "{path}: no description (kubectl explain shows it)"
                );
                assert!(
                    !node["description"].as_str().unwrap().contains('\n'),
                    "{path}: hard-wrapped description"
                );
            }
        });
    }

    #[test]
    fn applications_are_a_map_keyed_by_name() {
        // Whoever applies the Site owns each application by name, not the whole list: the
        // image the mutating webhook records stays the webhook's, and `kubectl diff
        // --server-side` of the manifest the Site came from has no conflict.
        let s = schema();
        let apps =
            &s["properties"]["spec"]["properties"]["configuration"]["properties"]["applications"];
        assert_eq!(apps["x-kubernetes-list-type"], "map");
        assert_eq!(apps["x-kubernetes-list-map-keys"], json!(["name"]));
        assert_eq!(apps["items"]["required"], json!(["name"]));
    }

    #[test]
    fn status_conditions_are_a_map_keyed_by_type() {
        let s = schema();
        let conditions = &s["properties"]["status"]["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map");
        assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
        let phase = &s["properties"]["status"]["properties"]["phase"];
        assert_eq!(
            phase["enum"],
            json!(["Pending", "Running", "Disabled", "Failed"])
        );
    }

    /// Visits every schema node with its path (`.a.b`, `[]` for items, `{}` for map values).
    fn walk(node: &Value, path: &str, f: &mut dyn FnMut(&str, &Value)) {
        f(path, node);
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                walk(v, &format!("{path}.{k}"), f);
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{path}[]"), f);
        }
        if let Some(extra) = node.get("additionalProperties").filter(|v| v.is_object()) {
            walk(extra, &format!("{path}{{}}"), f);
        }
    }
}
