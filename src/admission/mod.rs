//! Admission: pure handlers from an AdmissionRequest to an AdmissionResponse (the HTTP layer in
//! [`server`] only decodes, calls and encodes).
//!
//! - [`mutate_site`]: upgrade-request stamping (SPEC section 5, LIFE-09).
//! - [`validate_site`]: the Site rules of [`rules`], every violation with its field path.
//! - [`validate_config`]: the platform configuration validator on the `sites-config` ConfigMap.

pub mod rules;
pub mod selfsigned;
pub mod server;

use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use crate::config::{self, PlatformConfig};
use crate::crd::{Site, UPGRADE_REQUEST_ANNOTATION};

pub use rules::Violation;

/// Denies with code 403, reason Forbidden, one message naming every violation, and the
/// violations as status causes.
pub fn deny(req: &AdmissionRequest<DynamicObject>, violations: &[Violation]) -> AdmissionResponse {
    let message = violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let mut response = AdmissionResponse::from(req);
    response.allowed = false;
    response.result = Status::failure(&message, "Forbidden")
        .with_code(403)
        .with_details(StatusDetails {
            causes: violations
                .iter()
                .map(|v| StatusCause {
                    reason: "FieldValueInvalid".into(),
                    message: v.message.clone(),
                    field: v.field.clone(),
                })
                .collect(),
            name: req.name.clone(),
            group: req.kind.group.clone(),
            kind: req.kind.kind.clone(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
    response
}

/// The object of the request as a Site, or the violation explaining why it is not one.
fn typed_site(object: Option<&DynamicObject>, field: &str) -> Result<Option<Site>, Violation> {
    let Some(object) = object else {
        return Ok(None);
    };
    let value = serde_json::to_value(object).map_err(|e| Violation {
        field: field.into(),
        message: e.to_string(),
    })?;
    serde_json::from_value::<Site>(value)
        .map(Some)
        .map_err(|e| Violation {
            field: field.into(),
            message: format!("not a valid Site: {e}"),
        })
}

fn upgrade_request(object: Option<&DynamicObject>) -> Option<&str> {
    object?
        .metadata
        .annotations
        .as_ref()?
        .get(UPGRADE_REQUEST_ANNOTATION)
        .map(String::as_str)
}

/// Upgrade-request stamping: a value that is not a UUID (`force`, `true`, `now`, ...) becomes a
/// fresh UUIDv4 from `fresh`, so `kubectl annotate site X sites.ecmwf.int/upgrade-request=force
/// --overwrite` always forces exactly one upgrade. A UUID is kept (a new one is the Hub's forced
/// upgrade; an unchanged one is what every unrelated update carries). Removing the annotation
/// stamps nothing. The response is a JSONPatch, absent when nothing changes.
pub fn mutate_site(
    req: &AdmissionRequest<DynamicObject>,
    fresh: impl FnOnce() -> uuid::Uuid,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let Some(value) = upgrade_request(req.object.as_ref()) else {
        return response;
    };
    let is_uuid = value.len() == 36
        && uuid::Uuid::try_parse(value).is_ok_and(|u| !u.is_nil() && u.get_version_num() > 0);
    if is_uuid {
        return response;
    }
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([{
        "op": "replace",
        "path": format!("/metadata/annotations/{}", UPGRADE_REQUEST_ANNOTATION.replace('~', "~0").replace('/', "~1")),
        "value": fresh().to_string(),
    }]))
    .expect("a literal JSON patch");
    match response.with_patch(patch) {
        Ok(r) => r,
        Err(e) => AdmissionResponse::from(req).deny(e.to_string()),
    }
}

/// Site validation: every rule of [`rules::site_violations`]; on UPDATE the rules comparing
/// with the stored object. Warnings for legal but suspicious input.
pub fn validate_site(
    req: &AdmissionRequest<DynamicObject>,
    cfg: &PlatformConfig,
) -> AdmissionResponse {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return AdmissionResponse::from(req);
    }
    let site = match typed_site(req.object.as_ref(), "object") {
        Ok(Some(site)) => site,
        Ok(None) => {
            return deny(
                req,
                &[Violation {
                    field: "object".into(),
                    message: "required".into(),
                }],
            );
        }
        Err(v) => return deny(req, &[v]),
    };
    // A stored object that no longer decodes (e.g. written before a schema change) only loses
    // the comparisons with it.
    let old = typed_site(req.old_object.as_ref(), "oldObject")
        .ok()
        .flatten();
    let violations = rules::site_violations(&site, old.as_ref(), cfg);
    if !violations.is_empty() {
        return deny(req, &violations);
    }
    let mut response = AdmissionResponse::from(req);
    let warnings = crate::render::warnings(&site, cfg);
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// Platform configuration validation, for the `sites-config` ConfigMap (other ConfigMaps pass:
/// the webhook configuration's matchConditions should not send them).
pub fn validate_config(req: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    if !matches!(req.operation, Operation::Create | Operation::Update)
        || req.name != config::CONFIGMAP_NAME
            && req.object.as_ref().and_then(|o| o.metadata.name.as_deref())
                != Some(config::CONFIGMAP_NAME)
    {
        return AdmissionResponse::from(req);
    }
    let data = req
        .object
        .as_ref()
        .and_then(|o| o.data.get("data"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        });
    let ctx = config::Context {
        namespace: req.namespace.as_deref(),
    };
    match config::validate_configmap_data(data.as_ref(), &ctx) {
        Ok(_) => AdmissionResponse::from(req),
        Err(config::ConfigError::Invalid(problems)) => {
            let violations: Vec<Violation> = problems
                .into_iter()
                .map(|p| Violation {
                    field: p.key,
                    message: p.message,
                })
                .collect();
            deny(req, &violations)
        }
        Err(other) => deny(
            req,
            &[Violation {
                field: format!("data[\"{}\"]", config::CONFIGMAP_KEY),
                message: other.to_string(),
            }],
        ),
    }
}

#[cfg(test)]
mod tests;
