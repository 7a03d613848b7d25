//! Built-in kinds served in addition to the core table of `registry.rs`: nodes, resource
//! quotas, Jobs and CronJobs, DaemonSets and ReplicationControllers (stored, their status left as
//! a cluster without their controllers leaves it), NetworkPolicies (stored, enforced by no
//! network plugin), APIServices, endpoint slices, PodDisruptionBudgets, CertificateSigningRequests, and the create-only review kinds
//! (TokenReview, SubjectAccessReview and friends, SelfSubjectReview) that are answered and never
//! stored. Also the subresources discovery lists for them (`scale`, `eviction`, `token`,
//! `approval`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::registry::ResourceInfo;

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
        crate::registry::VERBS
    }
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
            causes.extend(validate_csr(old, obj));
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
                    let who = crate::identity::UserInfo::default_caller();
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

/// Validation of a CertificateSigningRequest (`pkg/apis/certificates/validation`).
pub fn validate_csr(old: Option<&Value>, obj: &Value) -> Vec<(String, &'static str, String)> {
    use base64::Engine;
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    let request = spec["request"]
        .as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .map(|b| String::from_utf8_lossy(&b).to_string())
        .unwrap_or_default();
    if !request.contains("-----BEGIN CERTIFICATE REQUEST-----") {
        causes.push((
            "spec.request".into(),
            "FieldValueInvalid",
            "Invalid value: []byte{...}: PEM block type must be CERTIFICATE REQUEST".into(),
        ));
    }
    if spec["signerName"].as_str().is_none_or(str::is_empty) {
        causes.push((
            "spec.signerName".into(),
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    if spec["usages"].as_array().is_none_or(Vec::is_empty) {
        causes.push((
            "spec.usages".into(),
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    let conds = obj["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut seen: Vec<String> = Vec::new();
    for (i, c) in conds.iter().enumerate() {
        let ty = c["type"].as_str().unwrap_or_default().to_string();
        if ty.is_empty() {
            causes.push((
                format!("status.conditions[{i}].type"),
                "FieldValueRequired",
                "Required value".into(),
            ));
            continue;
        }
        if matches!(ty.as_str(), "Approved" | "Denied" | "Failed") {
            let st = c["status"].as_str().unwrap_or_default();
            if st != "True" {
                causes.push((
                    format!("status.conditions[{i}].status"),
                    "FieldValueNotSupported",
                    format!("Unsupported value: {st:?}: supported values: \"True\""),
                ));
            }
            if seen.contains(&ty) {
                causes.push((
                    format!("status.conditions[{i}].type"),
                    "FieldValueDuplicate",
                    format!("Duplicate value: {ty:?}"),
                ));
            }
            let other = match ty.as_str() {
                "Approved" => "Denied",
                "Denied" => "Approved",
                _ => "",
            };
            if !other.is_empty() && seen.iter().any(|s| s == other) {
                causes.push((
                    format!("status.conditions[{i}].type"),
                    "FieldValueInvalid",
                    format!("Invalid value: {ty:?}: Approved and Denied conditions are mutually exclusive"),
                ));
            }
        }
        seen.push(ty);
    }
    if let Some(old) = old {
        for c in old["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let ty = c["type"].as_str().unwrap_or_default();
            if matches!(ty, "Approved" | "Denied") && !seen.iter().any(|s| s == ty) {
                causes.push((
                    "status.conditions".into(),
                    "FieldValueForbidden",
                    format!("Forbidden: updates may not remove a condition of type {ty:?}"),
                ));
            }
        }
    }
    causes
}
