//! Built-in kinds served in addition to the core table of `registry.rs`: nodes, resource
//! quotas, Jobs and CronJobs, DaemonSets and ReplicationControllers (stored, their status left as
//! a cluster without their controllers leaves it), NetworkPolicies (stored, enforced by no
//! network plugin), APIServices, endpoint slices, PodDisruptionBudgets, CertificateSigningRequests, and the create-only review kinds
//! (TokenReview, SubjectAccessReview and friends, SelfSubjectReview) that are answered and never
//! stored. Also the subresources discovery lists for them (`scale`, `eviction`, `token`,
//! `approval`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::builtin::{KindSchema, generate};
use crate::registry::{NameRule, ResourceInfo};

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

/// The additional built-in resources.
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
                crate::apiservices::GROUP,
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

/// Whether a resource is a create-only review: answered from the request, never stored.
pub fn is_review(r: &ResourceInfo) -> bool {
    r.is_builtin()
        && matches!(
            r.group.as_str(),
            "authentication.k8s.io" | "authorization.k8s.io"
        )
}

/// Whether a resource is the (deprecated, read-only) ComponentStatus list of the control
/// plane's components.
pub fn is_component_status(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group.is_empty() && r.plural == "componentstatuses"
}

/// The verbs discovery lists for a resource.
pub fn verbs(r: &ResourceInfo) -> &'static [&'static str] {
    if is_component_status(r) {
        return &["get", "list"];
    }
    if is_review(r) {
        &["create"]
    } else {
        crate::discovery::VERBS
    }
}

/// Schemas of the additional kinds (pruning, OpenAPI, `kubectl explain`).
pub fn schema(group: &str, kind: &str) -> Option<KindSchema> {
    use k8s_openapi::api;
    Some(match (group, kind) {
        ("", "Node") => generate::<api::core::v1::Node>(),
        ("", "ResourceQuota") => generate::<api::core::v1::ResourceQuota>(),
        ("batch", "Job") => generate::<api::batch::v1::Job>(),
        ("batch", "CronJob") => generate::<api::batch::v1::CronJob>(),
        ("apps", "DaemonSet") => generate::<api::apps::v1::DaemonSet>(),
        ("", "ComponentStatus") => generate::<api::core::v1::ComponentStatus>(),
        ("networking.k8s.io", "NetworkPolicy") => generate::<api::networking::v1::NetworkPolicy>(),
        ("", "ReplicationController") => generate::<api::core::v1::ReplicationController>(),
        ("apiregistration.k8s.io", "APIService") => {
            generate::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>()
        }
        ("discovery.k8s.io", "EndpointSlice") => generate::<api::discovery::v1::EndpointSlice>(),
        ("policy", "PodDisruptionBudget") => generate::<api::policy::v1::PodDisruptionBudget>(),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            generate::<api::certificates::v1::CertificateSigningRequest>()
        }
        ("authentication.k8s.io", "TokenReview") => {
            generate::<api::authentication::v1::TokenReview>()
        }
        ("authentication.k8s.io", "SelfSubjectReview") => {
            generate::<api::authentication::v1::SelfSubjectReview>()
        }
        ("authorization.k8s.io", "SubjectAccessReview") => {
            generate::<api::authorization::v1::SubjectAccessReview>()
        }
        ("authorization.k8s.io", "SelfSubjectAccessReview") => {
            generate::<api::authorization::v1::SelfSubjectAccessReview>()
        }
        ("authorization.k8s.io", "LocalSubjectAccessReview") => {
            generate::<api::authorization::v1::LocalSubjectAccessReview>()
        }
        ("authorization.k8s.io", "SelfSubjectRulesReview") => {
            generate::<api::authorization::v1::SelfSubjectRulesReview>()
        }
        _ => return None,
    })
}

/// Whether a resource has the `scale` subresource (built-in workloads, or a CRD declaring it).
pub fn has_scale(r: &ResourceInfo) -> bool {
    builtin_scale(r) || r.custom.as_ref().is_some_and(|c| c.scale.is_some())
}

fn is_core(r: &ResourceInfo, kind: &str) -> bool {
    r.is_builtin() && r.group.is_empty() && r.kind == kind
}

/// `pods/eviction`.
pub fn has_eviction(r: &ResourceInfo) -> bool {
    is_core(r, "Pod")
}

/// `serviceaccounts/token`.
pub fn has_token(r: &ResourceInfo) -> bool {
    is_core(r, "ServiceAccount")
}

/// `certificatesigningrequests/approval`.
pub fn has_approval(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group == "certificates.k8s.io" && r.kind == "CertificateSigningRequest"
}

/// Whether a built-in resource has the `scale` subresource.
pub fn builtin_scale(r: &ResourceInfo) -> bool {
    r.is_builtin()
        && r.group == "apps"
        && matches!(r.kind.as_str(), "StatefulSet" | "Deployment" | "ReplicaSet")
}

/// Built-in validation of the additional kinds (the API server's messages).
pub fn validate(
    r: &ResourceInfo,
    old: Option<&Value>,
    obj: &Value,
) -> Vec<(String, &'static str, String)> {
    let mut causes = Vec::new();
    match (r.group.as_str(), r.kind.as_str()) {
        ("policy", "PodDisruptionBudget") => {
            let spec = &obj["spec"];
            if !spec["minAvailable"].is_null() && !spec["maxUnavailable"].is_null() {
                causes.push((
                    "spec".into(),
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: minAvailable and maxUnavailable cannot be both set",
                        compact(spec)
                    ),
                ));
            }
            for field in ["minAvailable", "maxUnavailable"] {
                let v = &spec[field];
                if let Err(e) = crate::disruption::int_or_percent(v, 100) {
                    causes.push((format!("spec.{field}"), "FieldValueInvalid", e));
                }
            }
            if let Err(e) = crate::selector::LabelSelector::from_api(&spec["selector"]) {
                causes.push(("spec.selector".into(), "FieldValueInvalid", e));
            }
        }
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            causes.extend(crate::subresources::validate_csr(old, obj));
        }
        (crate::apiservices::GROUP, "APIService") => {
            causes.extend(crate::apiservices::validate(obj));
        }
        _ => {}
    }
    causes
}

/// Defaults of the additional kinds, filled in on every write.
pub fn defaults(r: &ResourceInfo, obj: &mut Value, old: Option<&Value>) {
    // An aggregated API's Service port (`SetDefaults_ServiceReference`).
    if crate::apiservices::is_apiservice(r)
        && let Some(service) = obj["spec"]["service"].as_object_mut()
    {
        service.entry("port").or_insert(json!(443));
    }
    if r.group == "certificates.k8s.io" && r.kind == "CertificateSigningRequest" {
        match old {
            // The requester's identity is the API server's to set, and stays.
            Some(old) => {
                for f in ["username", "uid", "groups", "extra"] {
                    match old["spec"].get(f) {
                        Some(v) => obj["spec"][f] = v.clone(),
                        None => {
                            if let Some(s) = obj["spec"].as_object_mut() {
                                s.remove(f);
                            }
                        }
                    }
                }
            }
            None => {
                if obj["spec"].is_object() {
                    let who = crate::authz::UserInfo::default_caller();
                    obj["spec"]["username"] = json!(who.username);
                    obj["spec"]["groups"] = json!(who.groups);
                }
                if obj["status"].is_null() {
                    obj["status"] = json!({});
                }
            }
        }
    }
}

/// JSON rendered as the API server's validation messages render values.
pub fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => {
            // Go prints structs; a sorted JSON rendering is close enough to name the value.
            let sorted: BTreeMap<String, Value> = other
                .as_object()
                .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default();
            if other.is_object() {
                serde_json::to_string(&sorted).unwrap_or_default()
            } else {
                other.to_string()
            }
        }
    }
}
