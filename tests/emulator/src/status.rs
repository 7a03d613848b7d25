//! `metav1.Status` error responses, shaped and worded as the API server sends them.

use serde_json::{Value, json};

use crate::registry::ResourceInfo;

/// An API error: HTTP code plus the Status body.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// The Status object.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn not_implemented(message: impl Into<String>) -> ApiError {
        ApiError::new(501, "NotImplemented", message)
    }

    /// 404 for a URL that names no resource.
    pub fn no_route() -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn method_not_allowed(method: &str) -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
        .with_details(json!({}))
    }

    pub fn not_found(r: &ResourceInfo, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", r.qualified()),
        )
        .with_details(details(r, name))
    }

    pub fn namespace_not_found(ns: &str) -> ApiError {
        ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    pub fn already_exists(r: &ResourceInfo, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", r.qualified()),
        )
        .with_details(details(r, name))
    }

    pub fn conflict(r: &ResourceInfo, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                r.qualified()
            ),
        )
        .with_details(details(r, name))
    }

    pub fn modified(r: &ResourceInfo, name: &str) -> ApiError {
        ApiError::conflict(
            r,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with causes (`field`, `reason`, `message`), worded like
    /// `Site.sites.ecmwf.int "a" is invalid: spec.x: Required value`.
    pub fn invalid(r: &ResourceInfo, name: &str, causes: &[(String, &str, String)]) -> ApiError {
        let group_kind = if r.group.is_empty() {
            r.kind.clone()
        } else {
            format!("{}.{}", r.kind, r.group)
        };
        let listed: Vec<String> = causes
            .iter()
            .map(|(field, _, msg)| {
                if field.is_empty() {
                    msg.clone()
                } else {
                    format!("{field}: {msg}")
                }
            })
            .collect();
        let joined = if listed.len() == 1 {
            listed[0].clone()
        } else {
            format!("[{}]", listed.join(", "))
        };
        let mut d = details(r, name);
        d["kind"] = json!(r.kind);
        d["causes"] = Value::Array(
            causes
                .iter()
                .map(|(field, reason, msg)| json!({"reason": reason, "message": msg, "field": field}))
                .collect(),
        );
        ApiError::new(
            422,
            "Invalid",
            format!("{group_kind} \"{name}\" is invalid: {joined}"),
        )
        .with_details(d)
    }

    pub fn forbidden(r: &ResourceInfo, name: &str, why: &str) -> ApiError {
        ApiError::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", r.qualified()),
        )
        .with_details(details(r, name))
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> ApiError {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    pub fn too_large() -> ApiError {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
    }

    pub fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }
}

fn details(r: &ResourceInfo, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": r.plural});
    if !r.group.is_empty() {
        d["group"] = json!(r.group);
    }
    d
}

/// The Status a successful immediate delete returns.
pub fn delete_success(r: &ResourceInfo, name: &str, uid: &str) -> Value {
    let mut d = details(r, name);
    d["uid"] = json!(uid);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": d,
    })
}
