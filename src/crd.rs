//! The `Site` custom resource (`sites.ecmwf.int/v1`): its Rust types.
//!
//! Field names are snake_case, as in the Site documents the Hub writes. Every field carries a doc
//! comment because the comments become the schema descriptions `kubectl explain` shows.
//!
//! One set of types serves both decoders of a Site: the spec's text type `S` is `String` in a
//! stored [`Site`] and [`Text`] (borrowed from the request body) in a Site under admission
//! review, `SiteSpec<Text>`, which then keeps only what the rules read ([`Str::REVIEW`]: the
//! functions of `crd/decode.rs`). A new field is read by both. The CRD generated from these
//! types is [`crate::definitions`]'s.

mod decode;
pub(crate) mod maps;
mod names;
mod text;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

pub use names::{NameList, Names, UNKEPT_STRINGS, UnkeptNames};
pub use text::{Str, Text};

/// API group of the Site resource.
pub const GROUP: &str = "sites.ecmwf.int";
/// Label carrying the site id, on every owned object and on the pod template.
pub const ID_LABEL: &str = "sites.ecmwf.int/id";
/// Annotation whose new UUID value requests a forced upgrade (re-render and restart).
pub const UPGRADE_REQUEST_ANNOTATION: &str = "sites.ecmwf.int/upgrade-request";
/// Annotation that pauses a Site (ROL-03): while it is `"true"`, the operator writes nothing for
/// the Site but one status condition saying so (no reconcile, no drift repair, no retention);
/// the webhooks still validate it. `"false"` or no annotation: not paused.
pub const PAUSED_ANNOTATION: &str = "sites.ecmwf.int/paused";
/// Annotation on the pod template marking pods the operator created and watches.
pub const OPERATOR_BOUND_ANNOTATION: &str = "sites.ecmwf.int/operator_bound";
/// Longest allowed site id: room for `-oauth2`, `-files`, the pod ordinal and the StatefulSet
/// revision label within the 63-character limits of names and label values.
pub const MAX_SITE_ID_LEN: usize = 52;

/// Desired state of a site. The operator turns it into Secrets, ConfigMaps, a
/// PersistentVolumeClaim, a StatefulSet, a Service and a route (Ingress or HTTPRoute), and reports
/// the state of the site pods in the status.
// (Not in the doc comment, which is the schema's description.) `S` is the type of its text:
// `String` in a [`Site`], [`Text`] in a Site under admission review (see the module doc).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "sites.ecmwf.int",
    version = "v1",
    kind = "Site",
    plural = "sites",
    singular = "site",
    shortname = "site",
    category = "ecmwf",
    namespaced,
    status = "SiteStatus",
    derive = "PartialEq",
    doc = "A hosted web site served at /<space>/<name>/ on the platform host. The object name is the site id (a DNS-1035 label of at most 52 characters); it names every object the operator creates for the site.",
    printcolumn = r#"{"name": "Path", "type": "string", "description": "URL path of the site, /<space>/<name>/ (written by the operator)", "jsonPath": ".status.path"}"#,
    printcolumn = r#"{"name": "Space", "type": "string", "description": "First URL segment of the site", "jsonPath": ".spec.configuration.space"}"#,
    printcolumn = r#"{"name": "Phase", "type": "string", "description": "Pod phase of the site", "jsonPath": ".status.phase"}"#,
    printcolumn = r#"{"name": "Available", "type": "string", "description": "All objects exist and the site pods are running and ready", "jsonPath": ".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name": "Progressing", "type": "string", "description": "Another reconcile is expected before the status reflects the spec", "jsonPath": ".status.conditions[?(@.type==\"Progressing\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Owner", "type": "string", "priority": 1, "description": "User name of the site owner", "jsonPath": ".spec.owner"}"#,
    printcolumn = r#"{"name": "Replicas", "type": "integer", "priority": 1, "description": "Pod replicas the site asks for", "jsonPath": ".spec.configuration.settings.replicas"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "priority": 1, "description": "Available and up to date at the current generation, or archived (kstatus)", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Reason", "type": "string", "priority": 1, "description": "Why the Site is progressing or not: RolloutPending while a platform rollout holds its pods back, RolloutHalted when that rollout halted, UpToDate when nothing is left to do", "jsonPath": ".status.conditions[?(@.type==\"Progressing\")].reason"}"#
)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Str + From<&'static str>"))]
#[schemars(bound = "S: JsonSchema + Serialize + From<&'static str>")]
pub struct SiteSpec<S = String> {
    /// Site name: the second URL segment. The site is served at /<space>/<name>/.
    pub name: S,
    /// User name of the site owner.
    pub owner: S,
    /// Site type label, for example `static` or `dynamic`.
    #[serde(rename = "type")]
    pub site_type: S,
    /// Free-text description. Audit field: changing it causes no work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<S>,
    /// User who created the site. Audit field: changing it causes no work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<S>,
    /// User who last updated the site. Audit field: changing it causes no work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<S>,
    /// Creation time as recorded by the Hub. Audit field: changing it causes no work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<S>,
    /// Last update time as recorded by the Hub. Audit field: changing it causes no work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<S>,
    /// What the site serves and how: URL space, applications, headers, storage, sharing, settings.
    pub configuration: SiteConfiguration<S>,
}

/// What the site serves and how. `S` is the type of its text, as for [`SiteSpec`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Str + From<&'static str>"))]
#[schemars(bound = "S: JsonSchema + Serialize + From<&'static str>")]
pub struct SiteConfiguration<S = String> {
    /// Space: the first URL segment. The site is served at /<space>/<name>/.
    pub space: S,
    /// Whether the site runs. false archives it: the pods scale to zero, requests are redirected
    /// to the Hub's "410 Gone" page, and the data volume is kept.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Applications that make up the site, one container each. Names must be unique. Built-in
    /// applications (names from the platform catalogue) get their image from the catalogue at the
    /// platform version; any other application is custom and needs its own image.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "decode::capped::<_, _, S, MAX_APPLICATIONS>"
    )]
    #[schemars(
        length(max = 64),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub applications: Vec<Application<S>>,
    /// Extra HTTP response headers served by the site's nginx, name to value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<S, S>,
    /// Storage request of the site's data volume (a Kubernetes quantity such as `10Gi`). It may
    /// grow, never shrink. Absent: the platform default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub quota: Option<Quantity>,
    /// Date (ISO 8601, YYYY-MM-DD) after which the retention policy archives the site.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_date: Option<S>,
    /// Who may administer and use the site.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "decode::not_kept::<_, S, Share<UnkeptNames>, _>"
    )]
    pub share: Option<Share>,
    /// Runtime settings: replicas, resource limits, error handling, monitoring.
    #[serde(default)]
    pub settings: Settings<S>,
    /// Not supported: routing is platform-wide. Present in the schema only so that the admission
    /// webhook can reject it with a clear message instead of the API server dropping it silently.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "decode::presence::<_, S>"
    )]
    #[schemars(schema_with = "free_form_object")]
    pub routing: Option<serde_json::Map<String, serde_json::Value>>,
}

/// One application of the site, run as one container of the site pod.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Ord + From<&'static str>"))]
#[schemars(bound = "S: JsonSchema + Serialize + From<&'static str>")]
pub struct Application<S = String> {
    /// Application name, unique within the site. A name from the platform catalogue selects a
    /// built-in application.
    pub name: S,
    /// Container image reference. Required for custom applications; for built-in applications the
    /// platform catalogue decides the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<S>,
    /// TCP port the application listens on (1-65535). Custom applications default to 8000;
    /// built-in applications use the catalogue port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Environment variables of the application container, name to value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<S, S>,
    /// Annotations merged into the site's route (Ingress annotations in ingress mode).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<S, S>,
    /// Extra route paths served by this application.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<ApplicationPath<S>>,
}

/// An extra route path of an application.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Ord + From<&'static str>"))]
#[schemars(bound = "S: JsonSchema + Serialize + From<&'static str>")]
pub struct ApplicationPath<S = String> {
    /// URL path, starting with `/`.
    pub path: S,
    /// How the path matches: `Prefix` or `Exact`. Other types are rejected where the active
    /// routing mode cannot express them.
    #[serde(default = "default_path_type::<S>")]
    pub path_type: S,
}

/// Who may administer and use the site. `N` is the type of its lists: [`Names`], or
/// [`UnkeptNames`] while a Site under review is decoded.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(bound(
    serialize = "N: Serialize + NameList",
    deserialize = "N: Deserialize<'de> + NameList"
))]
#[schemars(rename = "Share", bound = "N: Serialize + NameList")]
pub struct Share<N = Names> {
    /// User names with administrator rights on the site.
    #[serde(default, skip_serializing_if = "NameList::is_empty")]
    #[schemars(with = "Vec<String>")]
    pub administrator_users: N,
    /// User names allowed to use the site.
    #[serde(default, skip_serializing_if = "NameList::is_empty")]
    #[schemars(with = "Vec<String>")]
    pub users: N,
    /// Group names allowed to use the site.
    #[serde(default, skip_serializing_if = "NameList::is_empty")]
    #[schemars(with = "Vec<String>")]
    pub groups: N,
}

/// Runtime settings of the site.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Str + From<&'static str>"))]
pub struct Settings<S = String> {
    /// Number of site pods while the site is enabled.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// CPU and memory limits of the site containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<ResourceLimits>,
    /// How HTTP errors are answered: `platform` serves the platform's error pages, `site` passes
    /// the site's own error responses through. Absent: `platform`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_handling: Option<S>,
    /// Monitored sites (set by platform administrators) run with a higher priority class and are
    /// included in the Hub health report.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub monitored: bool,
    /// Not supported: routing is platform-wide. Present in the schema only so that the admission
    /// webhook can reject it with a clear message instead of the API server dropping it silently.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "decode::presence::<_, S>"
    )]
    #[schemars(schema_with = "free_form_object")]
    pub routing: Option<serde_json::Map<String, serde_json::Value>>,
}

impl<S> Default for Settings<S> {
    fn default() -> Self {
        Settings {
            replicas: default_replicas(),
            resource_limits: None,
            error_handling: None,
            monitored: false,
            routing: None,
        }
    }
}

/// CPU and memory limits of the site containers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResourceLimits {
    /// CPU limit (a Kubernetes quantity such as `500m` or `2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub cpu: Option<Quantity>,
    /// Memory limit (a Kubernetes quantity such as `512Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub memory: Option<Quantity>,
}

/// Observed state of the site, written by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SiteStatus {
    /// Phase of the site pods: Pending, Running, Disabled (archived) or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The site's URL path, `/<space>/<name>/` (the `PATH` column of `kubectl get sites`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Per-container problems of the site pods (waiting, terminated or unready containers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// True when the pods are Running and their deciding condition is successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_steps_started: Option<bool>,
    /// The metadata.generation this status was computed for.
    #[serde(
        default,
        rename = "observedGeneration",
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
    /// The image each built-in application is pinned to, by application name: what the operator
    /// rendered. A built-in application whose spec records no image keeps running this one, so
    /// a new platform version moves it only through `sites-operator upgrade`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, String>,
    /// `Ready`: the site is available and up to date at its generation (an archived site is Ready
    /// with reason Disabled). `Reconciling`: work is under way and another reconcile is expected.
    /// `Stalled`: a terminal error stops the reconciles until the Site or the cluster changes.
    /// `Available`: all objects exist and the site pods are running and ready. `Progressing`: the
    /// status does not reflect the spec yet and another reconcile is expected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Phase of the site pods.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Objects are being created or pods are starting; see `problems`.
    Pending,
    /// The site pods run.
    Running,
    /// The site is archived (`enabled: false`) and scaled to zero.
    Disabled,
    /// The site pods failed.
    Failed,
}

/// A problem of one container of a site pod.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct Problem {
    /// Container name.
    pub name: String,
    /// Container state: `waiting`, `terminated` or `running` (running but not ready).
    pub kind: String,
    /// Machine-readable reason, for example `CrashLoopBackOff` or `NotReady`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn default_true() -> bool {
    true
}

fn default_replicas() -> i32 {
    1
}

fn default_path_type<S: From<&'static str>>() -> S {
    S::from("Prefix")
}

/// A Kubernetes quantity: a string such as `10Gi` or `500m`, or a plain number. Declared as a
/// value the API server keeps as written (the admission webhook checks it, naming the field),
/// not as `x-kubernetes-int-or-string`: Kubernetes 1.20 unfolds that into an `anyOf` its
/// server-side apply models cannot hold, and then treats every list of the Site as atomic
/// (`apiextensions-apiserver` `buildOpenAPIModelsForApply`, fixed in 1.21).
fn quantity_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// An object the API server keeps as written, so that the admission webhook sees and rejects it.
fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// Most applications a Site has (the schema's `maxItems`): one container each in one pod.
pub const MAX_APPLICATIONS: usize = 64;

impl Site {
    /// The site id: the object name.
    pub fn id(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }

    /// Whether the Site is paused ([`PAUSED_ANNOTATION`] is `"true"`).
    pub fn paused(&self) -> bool {
        paused(&self.metadata)
    }
}

/// Whether the object's [`PAUSED_ANNOTATION`] is `"true"`.
pub fn paused(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(PAUSED_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// What the Site rules read, borrowed: from a stored [`Site`] ([`Site::parts`]) or from the
/// object of an admission review decoded without copying its text.
#[derive(Debug)]
pub struct SiteRef<'s, S = String> {
    pub metadata: &'s k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    /// `spec.name`.
    pub name: &'s str,
    /// `spec.owner`.
    pub owner: &'s str,
    /// `spec.type`.
    pub site_type: &'s str,
    /// `spec.configuration`.
    pub configuration: &'s SiteConfiguration<S>,
}

impl<S> Clone for SiteRef<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for SiteRef<'_, S> {}

impl<S: Str> SiteRef<'_, S> {
    /// The site path: `/<space>/<name>`.
    pub fn path(&self) -> String {
        ["/", &*self.configuration.space, "/", self.name].concat()
    }

    /// The path users open, with its trailing slash: `/<space>/<name>/` (the status, the site
    /// pod's `SITE_PATH`, conflict messages).
    pub fn public_path(&self) -> String {
        ["/", &*self.configuration.space, "/", self.name, "/"].concat()
    }
}

impl Site {
    /// The parts of the Site the rules read.
    pub fn parts(&self) -> SiteRef<'_> {
        SiteRef {
            metadata: &self.metadata,
            name: &self.spec.name,
            owner: &self.spec.owner,
            site_type: &self.spec.site_type,
            configuration: &self.spec.configuration,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::SiteBuilder;
    use serde_json::Value;

    fn example(name: &str) -> Value {
        let path = format!("{}/manifests/examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// Asserts every leaf of `original` is in `decoded` with the same value: a field the types
    /// do not know would be dropped on decoding, and is caught here.
    fn assert_kept(original: &Value, decoded: &Value, path: &str) {
        match original {
            Value::Object(map) => {
                for (k, v) in map {
                    let child = decoded
                        .get(k)
                        .unwrap_or_else(|| panic!("{path}.{k} dropped on decoding"));
                    assert_kept(v, child, &format!("{path}.{k}"));
                }
            }
            Value::Array(items) => {
                let decoded = decoded
                    .as_array()
                    .unwrap_or_else(|| panic!("{path} not a list"));
                assert_eq!(items.len(), decoded.len(), "{path}");
                for (i, (a, b)) in items.iter().zip(decoded).enumerate() {
                    assert_kept(a, b, &format!("{path}[{i}]"));
                }
            }
            leaf => assert_eq!(leaf, decoded, "{path}"),
        }
    }

    #[test]
    fn valid_examples_decode_without_losing_fields_and_get_defaults() {
        for name in ["site.yaml", "site-custom-app.yaml", "site-archived.yaml"] {
            let original = example(name);
            let site: Site =
                serde_json::from_value(original.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_kept(&original, &serde_json::to_value(&site).unwrap(), name);
            let id = site.id().unwrap();
            assert!(
                crate::validation::dns1035_label(id, MAX_SITE_ID_LEN).is_ok(),
                "{name}"
            );
        }
        let archived: Site = serde_json::from_value(example("site-archived.yaml")).unwrap();
        assert!(!archived.spec.configuration.enabled);
        assert_eq!(archived.spec.configuration.settings.replicas, 1);
        let custom: Site = serde_json::from_value(example("site-custom-app.yaml")).unwrap();
        assert_eq!(
            custom.spec.configuration.applications[1].paths[0].path_type,
            "Prefix"
        );
        assert!(custom.spec.configuration.settings.monitored);
    }

    #[test]
    fn invalid_examples_fit_the_schema_so_they_reach_the_webhook() {
        let dir = format!("{}/manifests/examples/invalid", env!("CARGO_MANIFEST_DIR"));
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.starts_with("# spec.") || text.starts_with("# metadata."),
                "{path:?}: first line names the field"
            );
            let original: Value = serde_yaml_ng::from_str(&text).unwrap();
            let site: Site = serde_json::from_value(original.clone())
                .unwrap_or_else(|e| panic!("{path:?}: {e}"));
            assert_kept(
                &original,
                &serde_json::to_value(&site).unwrap(),
                &path.display().to_string(),
            );
            count += 1;
        }
        assert!(count >= 8, "only {count} invalid examples");
    }

    #[test]
    fn minimal_site_decodes_with_defaults_and_serialises_without_nulls() {
        let site = SiteBuilder::new("a").build();
        assert!(site.spec.configuration.enabled);
        assert_eq!(site.spec.configuration.settings.replicas, 1);
        assert!(site.status.is_none());
        let out = serde_json::to_string(&site).unwrap();
        assert!(!out.contains("null"), "{out}");
    }
}
