//! The resource types the emulator serves: a table of built-in Kubernetes resources, plus custom
//! resources registered by creating (and removed by deleting) CustomResourceDefinition objects.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

/// How object names of a resource are validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain (most resources).
    Subdomain,
    /// DNS-1123 label (namespaces).
    Label,
    /// DNS-1035 label (services).
    Dns1035,
    /// Any name usable as a URL path segment (core v1 Events, whose strategy adds no name
    /// rule: `path.IsValidPathSegmentName` only).
    PathSegment,
}

/// Schema and table data of a custom resource, from its CRD.
#[derive(Clone, Debug)]
pub struct CustomInfo {
    /// `openAPIV3Schema` of the served version.
    pub schema: Value,
    /// `additionalPrinterColumns` of the served version.
    pub printer_columns: Vec<Value>,
    /// Name of the CRD object that registered the resource.
    pub crd_name: String,
    /// `subresources.scale` of the served version (the replica and selector paths).
    pub scale: Option<Value>,
}

/// One served resource type.
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Whether `/status` is a subresource (the main path then ignores status changes).
    pub status_subresource: bool,
    /// Whether `metadata.generation` counts spec changes.
    pub tracks_generation: bool,
    pub name_rule: NameRule,
    /// Set for custom resources.
    pub custom: Option<CustomInfo>,
}

impl ResourceInfo {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Storage key: `plural` for core, `plural.group` otherwise (version-independent).
    pub fn key(&self) -> String {
        resource_key(&self.group, &self.plural)
    }

    /// How error messages name the resource: `pods`, `sites.sites.ecmwf.int`.
    pub fn qualified(&self) -> String {
        self.key()
    }

    /// Whether this is a built-in (not CRD-defined) resource.
    pub fn is_builtin(&self) -> bool {
        self.custom.is_none()
    }
}

/// Storage key of a resource: `plural` for core, `plural.group` otherwise.
pub fn resource_key(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// All served resources.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    by_gvr: HashMap<(String, String, String), Arc<ResourceInfo>>,
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    generation: bool,
    name_rule: NameRule,
}

#[allow(clippy::too_many_arguments)] // a table row constructor
const fn b(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    generation: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        plural,
        kind,
        namespaced,
        short,
        status,
        generation,
        name_rule: NameRule::Subdomain,
    }
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        name_rule: NameRule::Label,
        ..b(
            "",
            "v1",
            "namespaces",
            "Namespace",
            false,
            &["ns"],
            true,
            false,
        )
    },
    b(
        "",
        "v1",
        "configmaps",
        "ConfigMap",
        true,
        &["cm"],
        false,
        false,
    ),
    b("", "v1", "secrets", "Secret", true, &[], false, false),
    b("", "v1", "pods", "Pod", true, &["po"], true, false),
    Builtin {
        name_rule: NameRule::Dns1035,
        ..b("", "v1", "services", "Service", true, &["svc"], true, false)
    },
    b(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
        true,
        false,
    ),
    b(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        false,
        &["pv"],
        true,
        false,
    ),
    Builtin {
        name_rule: NameRule::PathSegment,
        ..b("", "v1", "events", "Event", true, &["ev"], false, false)
    },
    b(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["sa"],
        false,
        false,
    ),
    b(
        "",
        "v1",
        "endpoints",
        "Endpoints",
        true,
        &["ep"],
        false,
        false,
    ),
    b(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        true,
        &["sts"],
        true,
        true,
    ),
    b(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        true,
        true,
    ),
    b(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        true,
        &["rs"],
        true,
        true,
    ),
    b(
        "apps",
        "v1",
        "controllerrevisions",
        "ControllerRevision",
        true,
        &[],
        false,
        false,
    ),
    b(
        "networking.k8s.io",
        "v1",
        "ingresses",
        "Ingress",
        true,
        &["ing"],
        true,
        true,
    ),
    b(
        "networking.k8s.io",
        "v1",
        "ingressclasses",
        "IngressClass",
        false,
        &[],
        false,
        false,
    ),
    b(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        &[],
        false,
        false,
    ),
    b(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        false,
        false,
    ),
    b(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
        true,
    ),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        false,
        &[],
        false,
        true,
    ),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        false,
        &[],
        false,
        true,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
        false,
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
        false,
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
        false,
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
        false,
        false,
    ),
    b(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "PriorityClass",
        false,
        &["pc"],
        false,
        false,
    ),
    b(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "StorageClass",
        false,
        &["sc"],
        false,
        false,
    ),
];

impl Registry {
    /// The built-in resources.
    pub fn builtin() -> Registry {
        let mut r = Registry::default();
        for b in BUILTINS {
            r.insert(ResourceInfo {
                group: b.group.into(),
                version: b.version.into(),
                plural: b.plural.into(),
                singular: b.kind.to_ascii_lowercase(),
                kind: b.kind.into(),
                namespaced: b.namespaced,
                short_names: b.short.iter().map(|s| s.to_string()).collect(),
                categories: Vec::new(),
                status_subresource: b.status,
                tracks_generation: b.generation,
                name_rule: b.name_rule,
                custom: None,
            });
        }
        for info in extra() {
            r.insert(info);
        }
        r
    }

    fn insert(&mut self, info: ResourceInfo) {
        self.by_gvr.insert(
            (
                info.group.clone(),
                info.version.clone(),
                info.plural.clone(),
            ),
            Arc::new(info),
        );
    }

    /// Looks a resource up by group, version and plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvr
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Looks a resource up by group and kind (any served version).
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvr
            .values()
            .find(|r| r.group == group && r.kind == kind)
            .cloned()
    }

    /// Looks a resource up by its storage key.
    pub fn by_key(&self, key: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvr.values().find(|r| r.key() == key).cloned()
    }

    /// Every served resource.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceInfo>> {
        self.by_gvr.values()
    }

    /// Served groups with their versions, core first, then groups by name.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in self.by_gvr.values() {
            let versions = out.entry(r.group.clone()).or_default();
            if !versions.contains(&r.version) {
                versions.push(r.version.clone());
            }
        }
        out
    }

    /// Resources of one group version, sorted by plural.
    pub fn group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        let mut v: Vec<_> = self
            .by_gvr
            .values()
            .filter(|r| r.group == group && r.version == version)
            .cloned()
            .collect();
        v.sort_by(|a, b| a.plural.cmp(&b.plural));
        v
    }

    /// Registers (or re-registers) the served versions of a CRD object. Returns an error message
    /// when the CRD is unusable; the caller validates before storing.
    pub fn register_crd(&mut self, crd: &Value) -> Result<(), String> {
        let infos = crd_resources(crd)?;
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.unregister_crd(&name);
        for info in infos {
            self.insert(info);
        }
        Ok(())
    }

    /// Removes the resources a CRD registered.
    pub fn unregister_crd(&mut self, crd_name: &str) {
        self.by_gvr
            .retain(|_, r| r.custom.as_ref().is_none_or(|c| c.crd_name != crd_name));
    }
}

/// The resources a CRD object defines (one per served version).
pub fn crd_resources(crd: &Value) -> Result<Vec<ResourceInfo>, String> {
    let spec = &crd["spec"];
    let str_at = |v: &Value, what: &str| -> Result<String, String> {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| format!("spec.{what}: Required value"))
    };
    let group = str_at(&spec["group"], "group")?;
    let names = &spec["names"];
    let plural = str_at(&names["plural"], "names.plural")?;
    let kind = str_at(&names["kind"], "names.kind")?;
    let singular = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => {
            return Err(
                "spec.scope: Unsupported value: supported values: \"Cluster\", \"Namespaced\""
                    .into(),
            );
        }
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let crd_name = crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let expected = format!("{plural}.{group}");
    if crd_name != expected {
        return Err(format!(
            "metadata.name: Invalid value: {crd_name:?}: must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let versions = spec["versions"]
        .as_array()
        .filter(|v| !v.is_empty())
        .ok_or(
            "spec.versions: Invalid value: must have exactly one version marked as storage version",
        )?;
    let mut out = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let version = str_at(&v["name"], &format!("versions[{i}].name"))?;
        if v["served"] == Value::Bool(false) {
            continue;
        }
        let schema = v["schema"]["openAPIV3Schema"].clone();
        if !schema.is_object() {
            return Err(format!(
                "spec.versions[{i}].schema.openAPIV3Schema: Required value: schemas are required"
            ));
        }
        out.push(ResourceInfo {
            group: group.clone(),
            version,
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced,
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            status_subresource: v["subresources"]["status"].is_object(),
            tracks_generation: true,
            name_rule: NameRule::Subdomain,
            custom: Some(CustomInfo {
                schema,
                printer_columns: v["additionalPrinterColumns"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                crd_name: crd_name.clone(),
                scale: Some(v["subresources"]["scale"].clone()).filter(Value::is_object),
            }),
        });
    }
    Ok(out)
}

/// Every verb of a resource served in full: what discovery lists for it, and what the
/// bootstrap roles grant on such resources.
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The API group of APIServices (the kube-aggregator's).
pub const APIREGISTRATION_GROUP: &str = "apiregistration.k8s.io";

/// A row of the additional built-in resources ([`extra`]): version v1, DNS-subdomain names.
fn info(
    group: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        version: "v1".into(),
        plural: plural.into(),
        singular: kind.to_ascii_lowercase(),
        kind: kind.into(),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        status_subresource: status,
        tracks_generation: matches!(
            kind,
            "PodDisruptionBudget"
                | "Job"
                | "CronJob"
                | "DaemonSet"
                | "ReplicationController"
                | "NetworkPolicy"
        ),
        name_rule: NameRule::Subdomain,
        custom: None,
    }
}

/// The built-in resources served in addition to the core table: nodes, resource quotas, Jobs and
/// CronJobs, DaemonSets and ReplicationControllers, ComponentStatuses, NetworkPolicies,
/// APIServices, endpoint slices, PodDisruptionBudgets, CertificateSigningRequests, and the
/// create-only review kinds.
pub fn extra() -> Vec<ResourceInfo> {
    vec![
        info("", "nodes", "Node", false, &["no"], true),
        info(
            "",
            "resourcequotas",
            "ResourceQuota",
            true,
            &["quota"],
            true,
        ),
        info("batch", "jobs", "Job", true, &[], true),
        info("batch", "cronjobs", "CronJob", true, &["cj"], true),
        info("apps", "daemonsets", "DaemonSet", true, &["ds"], true),
        info(
            "",
            "componentstatuses",
            "ComponentStatus",
            false,
            &["cs"],
            false,
        ),
        info(
            "networking.k8s.io",
            "networkpolicies",
            "NetworkPolicy",
            true,
            &["netpol"],
            false,
        ),
        info(
            "",
            "replicationcontrollers",
            "ReplicationController",
            true,
            &["rc"],
            true,
        ),
        ResourceInfo {
            categories: vec!["api-extensions".into()],
            ..info(
                APIREGISTRATION_GROUP,
                "apiservices",
                "APIService",
                false,
                &[],
                true,
            )
        },
        info(
            "discovery.k8s.io",
            "endpointslices",
            "EndpointSlice",
            true,
            &[],
            false,
        ),
        info(
            "policy",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["pdb"],
            true,
        ),
        info(
            "certificates.k8s.io",
            "certificatesigningrequests",
            "CertificateSigningRequest",
            false,
            &["csr"],
            true,
        ),
        info(
            "authentication.k8s.io",
            "tokenreviews",
            "TokenReview",
            false,
            &[],
            false,
        ),
        info(
            "authentication.k8s.io",
            "selfsubjectreviews",
            "SelfSubjectReview",
            false,
            &[],
            false,
        ),
        info(
            "authorization.k8s.io",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
            &[],
            false,
        ),
        info(
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
            &[],
            false,
        ),
        info(
            "authorization.k8s.io",
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            true,
            &[],
            false,
        ),
        info(
            "authorization.k8s.io",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            false,
            &[],
            false,
        ),
    ]
}
