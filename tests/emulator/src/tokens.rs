//! Service account tokens: `serviceaccounts/token` (TokenRequest) issues them, TokenReview
//! checks them, SelfSubjectReview tells callers who they are.
//!
//! Tokens are JWT-shaped (header, claims, signature, base64url) but the emulator recognises
//! them by looking them up: a token is valid while it has not expired, its service account
//! still exists with the same uid, and the object it is bound to (if any) still exists. The
//! API server's audience is [`API_AUDIENCE`]; TokenRequest defaults `spec.audiences` to it and
//! TokenReview checks the token against `spec.audiences` (or it) as the API server does.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::identity::UserInfo;
use crate::meta::meta_str;
use crate::registry::ResourceInfo;
use crate::request::Target;
use crate::request::json_response;
use crate::state::App;
use crate::status::ApiError;

/// The API server's own audience (its service account issuer), as kubeadm and kind set it.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

fn token_request_info() -> ResourceInfo {
    ResourceInfo {
        group: "authentication.k8s.io".into(),
        version: "v1".into(),
        plural: "tokenrequests".into(),
        singular: "tokenrequest".into(),
        kind: "TokenRequest".into(),
        namespaced: true,
        short_names: Vec::new(),
        categories: Vec::new(),
        status_subresource: false,
        tracks_generation: false,
        name_rule: crate::registry::NameRule::Subdomain,
        custom: None,
    }
}

fn b64(v: &Value) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

/// `POST .../serviceaccounts/NAME/token`.
pub fn token_request(
    app: &Arc<App>,
    t: &Target,
    name: &str,
    mut req: Value,
) -> Result<Response, ApiError> {
    let info = token_request_info();
    crate::ops::check_type(&info, &mut req)?;
    let sa = app
        .store
        .lock()
        .get(&t.r, &t.namespace, name)
        .ok_or_else(|| ApiError::not_found(&t.r, name))?;
    let spec = req["spec"].clone();
    let seconds = match &spec["expirationSeconds"] {
        Value::Null => 3600,
        Value::Number(n) if n.as_i64().is_some() => n.as_i64().unwrap_or(3600),
        other => {
            return Err(ApiError::bad_request(format!(
                "spec.expirationSeconds: Invalid value: {other}: must be an integer"
            )));
        }
    };
    let mut causes = Vec::new();
    if seconds < 600 {
        causes.push((
            "spec.expirationSeconds".to_string(),
            "FieldValueInvalid",
            format!("Invalid value: {seconds}: may not specify a duration less than 10 minutes"),
        ));
    } else if seconds > 1 << 32 {
        causes.push((
            "spec.expirationSeconds".to_string(),
            "FieldValueInvalid",
            format!(
                "Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds"
            ),
        ));
    }
    let audiences: Vec<String> = match &spec["audiences"] {
        Value::Null => vec![API_AUDIENCE.to_string()],
        Value::Array(a) if a.is_empty() => vec![API_AUDIENCE.to_string()],
        Value::Array(a) => a
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect(),
        _ => {
            causes.push((
                "spec.audiences".to_string(),
                "FieldValueInvalid",
                "Invalid value: must be a list of strings".into(),
            ));
            Vec::new()
        }
    };
    let bound_ref = &spec["boundObjectRef"];
    let mut bound = None;
    if bound_ref.is_object() {
        let kind = bound_ref["kind"].as_str().unwrap_or_default();
        let plural = match kind {
            "Pod" => "pods",
            "Secret" => "secrets",
            "Node" => "nodes",
            other => {
                causes.push((
                    "spec.boundObjectRef.kind".to_string(),
                    "FieldValueNotSupported",
                    format!("Unsupported value: {other:?}: supported values: \"Node\", \"Pod\", \"Secret\""),
                ));
                ""
            }
        };
        if !plural.is_empty() {
            let bname = bound_ref["name"].as_str().unwrap_or_default().to_string();
            let ns = if kind == "Node" {
                ""
            } else {
                t.namespace.as_str()
            };
            let r = app.store.lock().registry.get("", "v1", plural);
            let obj = r.as_ref().and_then(|r| app.store.lock().get(r, ns, &bname));
            let Some(obj) = obj else {
                return match r {
                    Some(r) => Err(ApiError::not_found(&r, &bname)),
                    None => Err(ApiError::no_route()),
                };
            };
            let uid = meta_str(&obj, "uid").unwrap_or_default().to_string();
            if let Some(want) = bound_ref["uid"].as_str().filter(|u| !u.is_empty())
                && want != uid
            {
                return Err(ApiError::conflict(
                    &t.r,
                    name,
                    &format!(
                        "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                    ),
                ));
            }
            bound = Some((plural.to_string(), bname, uid));
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(&info, name, &causes));
    }
    let now = jiff::Timestamp::now();
    let expires = now + jiff::SignedDuration::from_secs(seconds);
    let sa_uid = meta_str(&sa, "uid").unwrap_or_default().to_string();
    let jti = uuid::Uuid::new_v4().to_string();
    let mut claims = json!({
        "aud": audiences, "exp": expires.as_second(), "iat": now.as_second(), "nbf": now.as_second(),
        "iss": API_AUDIENCE, "jti": jti, "sub": format!("system:serviceaccount:{}:{name}", t.namespace),
        "kubernetes.io": {"namespace": t.namespace, "serviceaccount": {"name": name, "uid": sa_uid}},
    });
    if let Some((plural, bname, buid)) = &bound {
        let key = &plural[..plural.len() - 1];
        claims["kubernetes.io"][key] = json!({"name": bname, "uid": buid});
    }
    let token = format!(
        "{}.{}.{}",
        b64(&json!({"alg": "RS256", "kid": "sites-emulator"})),
        b64(&claims),
        uuid::Uuid::new_v4().simple()
    );
    app.cluster
        .tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            token.clone(),
            crate::state::Issued {
                namespace: t.namespace.clone(),
                name: name.to_string(),
                uid: sa_uid,
                audiences: audiences.clone(),
                expires,
                jti,
                bound,
            },
        );
    let mut out_spec =
        json!({"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": null});
    if bound_ref.is_object() {
        out_spec["boundObjectRef"] = bound_ref.clone();
    }
    let out = json!({
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": t.namespace, "creationTimestamp": null},
        "spec": out_spec,
        "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
    });
    Ok(json_response(StatusCode::CREATED, &out))
}

/// Authenticates a token against `audiences` (the API server's when None): the user and the
/// audiences it is valid for, or the error TokenReview reports.
pub fn authenticate(
    app: &App,
    token: &str,
    audiences: Option<&[String]>,
) -> Result<(UserInfo, Vec<String>), String> {
    let issued = app
        .cluster
        .tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(token)
        .cloned()
        .ok_or_else(|| "invalid bearer token".to_string())?;
    let api = [API_AUDIENCE.to_string()];
    let wanted = audiences.unwrap_or(&api);
    let matched: Vec<String> = wanted
        .iter()
        .filter(|a| issued.audiences.contains(a))
        .cloned()
        .collect();
    if matched.is_empty() {
        return Err(format!(
            "token audiences {:?} is invalid for the target audiences {:?}",
            issued.audiences, wanted
        ));
    }
    if jiff::Timestamp::now() >= issued.expires {
        return Err("service account token has expired".into());
    }
    let st = app.store.lock();
    let sa_r = st.registry.get("", "v1", "serviceaccounts");
    let sa = sa_r
        .as_ref()
        .and_then(|r| st.get(r, &issued.namespace, &issued.name));
    let Some(sa) = sa else {
        return Err(format!("serviceaccount \"{}\" not found", issued.name));
    };
    if sa["metadata"]["deletionTimestamp"].is_string() {
        return Err(format!(
            "service account {}/{} has been deleted",
            issued.namespace, issued.name
        ));
    }
    let uid = meta_str(&sa, "uid").unwrap_or_default();
    if uid != issued.uid {
        return Err(format!(
            "service account UID ({uid}) does not match claim ({})",
            issued.uid
        ));
    }
    let mut user = UserInfo::service_account(&issued.namespace, &issued.name, &issued.uid);
    if let Some((plural, bname, buid)) = &issued.bound {
        let ns = if plural == "nodes" {
            ""
        } else {
            issued.namespace.as_str()
        };
        let obj = st
            .registry
            .get("", "v1", plural)
            .and_then(|r| st.get(&r, ns, bname));
        let kind = &plural[..plural.len() - 1];
        match obj {
            Some(o) if meta_str(&o, "uid") == Some(buid.as_str()) => {
                user.extra.insert(
                    format!("authentication.kubernetes.io/{kind}-name"),
                    vec![bname.clone()],
                );
                user.extra.insert(
                    format!("authentication.kubernetes.io/{kind}-uid"),
                    vec![buid.clone()],
                );
            }
            _ => return Err(format!("{plural} \"{bname}\" not found")),
        }
    }
    user.extra.insert(
        "authentication.kubernetes.io/credential-id".into(),
        vec![format!("JTI={}", issued.jti)],
    );
    Ok((user, matched))
}
