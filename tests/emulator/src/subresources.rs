//! Subresources other than `status`, and the create-only review kinds:
//!
//! - `scale` (autoscaling/v1 Scale) of StatefulSets, Deployments, ReplicaSets and of custom
//!   resources whose CRD declares `subresources.scale`: GET, PUT, PATCH (merge, JSON, strategic,
//!   apply). The Scale's metadata is the parent's; a write sets the parent's replicas (bumping
//!   its resourceVersion and generation, one MODIFIED event of the parent); a stale
//!   resourceVersion in the Scale is a 409 Conflict on the parent.
//! - `approval` of CertificateSigningRequests: GET, PUT, PATCH; only `status.conditions` is taken.
//! - `pods/eviction` ([`crate::disruption`]), `serviceaccounts/token` ([`crate::tokens`]).
//! - TokenReview, SelfSubjectReview ([`crate::tokens`]) and the access reviews ([`crate::authz`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::meta::{self, meta_str, rv_of};
use crate::negotiate;
use crate::ops::{self, WriteOptions};
use crate::registry::ResourceInfo;
use crate::request::Target;
use crate::request::json_response;
use crate::state::App;
use crate::status::ApiError;
use crate::store::CommitError;

/// Whether [`dispatch`] answers the request.
fn handles(t: &Target) -> bool {
    crate::kinds::is_review(&t.r)
        || (t.name.is_some()
            && matches!(
                t.sub.as_deref(),
                Some("scale" | "approval" | "eviction" | "token")
            ))
}

/// Handles the request when it is for a subresource or kind this module serves. The answer
/// goes through the one content negotiation (JSON or YAML; 406 otherwise), decided before
/// anything is done, as the API server's handlers do.
pub async fn dispatch(
    app: &Arc<App>,
    method: &Method,
    t: &Target,
    query: &std::collections::HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<Result<Response, ApiError>> {
    if !handles(t) {
        return None;
    }
    let accept = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok());
    let output = match negotiate::negotiate(accept, negotiate::Endpoint::Plain) {
        Ok(o) => o,
        Err(e) => return Some(Err(e)),
    };
    let resp = answer(app, method, t, query, headers, body).await?;
    let presentation = negotiate::Presentation {
        output,
        stored: t.r.clone(),
        view: None,
        include_object: String::new(),
    };
    Some(match resp {
        Ok(r) => Ok(negotiate::render(r, &presentation).await),
        Err(e) => Err(e),
    })
}

async fn answer(
    app: &Arc<App>,
    method: &Method,
    t: &Target,
    query: &std::collections::HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<Result<Response, ApiError>> {
    if crate::kinds::is_review(&t.r) {
        if *method != Method::POST || t.name.is_some() {
            return Some(Err(ApiError::method_not_allowed(method.as_str())));
        }
        let obj = match decode(headers, body) {
            Ok(o) => o,
            Err(e) => return Some(Err(e)),
        };
        return Some(match t.r.group.as_str() {
            "authentication.k8s.io" => crate::authz::token_review(app, t, headers, obj),
            _ => crate::authz::review(app, t, headers, obj),
        });
    }
    let sub = t.sub.as_deref()?;
    let name = t.name.as_deref()?;
    let opts = match WriteOptions::of(query, headers) {
        Ok(o) => o,
        Err(e) => return Some(Err(e)),
    };
    let r = &t.r;
    Some(match (sub, method.as_str()) {
        ("scale", m) => {
            let Some(paths) = scale_paths(r) else {
                return Some(Err(ApiError::no_route()));
            };
            match m {
                "GET" => get_parent(app, t, name)
                    .map(|o| json_response(StatusCode::OK, &to_scale(&o, &paths))),
                "PUT" => match decode(headers, body) {
                    Ok(scale) => {
                        write_scale(app, t, name, &paths, &opts, |_| Ok(scale.clone())).await
                    }
                    Err(e) => Err(e),
                },
                "PATCH" => {
                    let ct = crate::request::content_type(headers);
                    write_scale(app, t, name, &paths, &opts, |current| {
                        patch_value(current, &ct, body)
                    })
                    .await
                }
                m => Err(ApiError::method_not_allowed(m)),
            }
        }
        ("approval", m) if is_csr(r) => match m {
            "GET" => get_parent(app, t, name).map(|o| json_response(StatusCode::OK, &o)),
            "PUT" => match decode(headers, body) {
                Ok(csr) => approve(app, t, name, &opts, |_| Ok(csr.clone())).await,
                Err(e) => Err(e),
            },
            "PATCH" => {
                let ct = crate::request::content_type(headers);
                approve(app, t, name, &opts, |current| {
                    patch_value(current, &ct, body)
                })
                .await
            }
            m => Err(ApiError::method_not_allowed(m)),
        },
        ("eviction", "POST") if is_core(r, "Pod") => match decode(headers, body) {
            Ok(ev) => crate::disruption::evict(app, t, name, ev).await,
            Err(e) => Err(e),
        },
        ("token", "POST") if is_core(r, "ServiceAccount") => match decode(headers, body) {
            Ok(req) => crate::tokens::token_request(app, t, name, req),
            Err(e) => Err(e),
        },
        ("eviction", m) if is_core(r, "Pod") => Err(ApiError::method_not_allowed(m)),
        ("token", m) if is_core(r, "ServiceAccount") => Err(ApiError::method_not_allowed(m)),
        ("approval" | "eviction" | "token", _) => Err(ApiError::no_route()),
        _ => return None,
    })
}

fn is_core(r: &ResourceInfo, kind: &str) -> bool {
    r.is_builtin() && r.group.is_empty() && r.kind == kind
}

fn is_csr(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group == "certificates.k8s.io" && r.kind == "CertificateSigningRequest"
}

/// Decodes a JSON, YAML or protobuf request body into an object.
pub fn decode(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let v = crate::request::decode_body(headers, body)?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    Ok(v)
}

/// Applies a patch document of content type `ct` to `current`.
fn patch_value(current: &Value, ct: &str, body: &Bytes) -> Result<Value, ApiError> {
    let mut target = current.clone();
    match ct {
        // Scale and the approval conditions have no patch strategy beyond replacing: a
        // strategic merge patch merges like a merge patch here.
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            let doc: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if !doc.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            json_patch::merge(&mut target, &doc);
        }
        "application/json-patch+json" => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding JSON patch: {e}")))?;
            json_patch::patch(&mut target, &p).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?;
        }
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            let doc: Value = crate::request::from_yaml(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            if !doc.is_object() {
                return Err(ApiError::bad_request("apply patch must be an object"));
            }
            json_patch::merge(&mut target, &doc);
        }
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"
            )));
        }
    }
    Ok(target)
}

fn get_parent(app: &App, t: &Target, name: &str) -> Result<Arc<Value>, ApiError> {
    app.store
        .lock()
        .get(&t.r, &t.namespace, name)
        .ok_or_else(|| ApiError::not_found(&t.r, name))
}

// ---------------------------------------------------------------- scale

/// Where a resource keeps its replicas and selector.
pub struct ScalePaths {
    spec: String,
    status: String,
    /// For custom resources: a path to a selector string; built-ins use `spec.selector`.
    selector: Option<String>,
    builtin: bool,
}

/// The scale paths of a resource, if it has the subresource.
pub fn scale_paths(r: &ResourceInfo) -> Option<ScalePaths> {
    if crate::kinds::builtin_scale(r) {
        return Some(ScalePaths {
            spec: ".spec.replicas".into(),
            status: ".status.replicas".into(),
            selector: None,
            builtin: true,
        });
    }
    let s = r.custom.as_ref()?.scale.as_ref()?;
    Some(ScalePaths {
        spec: s["specReplicasPath"].as_str()?.to_string(),
        status: s["statusReplicasPath"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        selector: s["labelSelectorPath"].as_str().map(str::to_string),
        builtin: false,
    })
}

fn pointer(path: &str) -> String {
    path.trim_start_matches('.').replace('.', "/")
}

fn at<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return None;
    }
    obj.pointer(&format!("/{}", pointer(path)))
}

fn set_at(obj: &mut Value, path: &str, v: Value) {
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = obj;
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i == parts.len() - 1 {
            cur[*p] = v;
            return;
        }
        cur = &mut cur[*p];
    }
}

/// The Scale of an object.
pub fn to_scale(obj: &Value, paths: &ScalePaths) -> Value {
    let mut metadata = json!({});
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = obj["metadata"].get(f) {
            metadata[f] = v.clone();
        }
    }
    let replicas = at(obj, &paths.spec).and_then(Value::as_i64).unwrap_or(0);
    let mut status = json!({
        "replicas": at(obj, &paths.status).and_then(Value::as_i64).unwrap_or(0),
    });
    let selector = if paths.builtin {
        Some(crate::selector::selector_string(&obj["spec"]["selector"]))
    } else {
        paths
            .selector
            .as_deref()
            .and_then(|p| at(obj, p))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if let Some(s) = selector.filter(|s| !s.is_empty()) {
        status["selector"] = json!(s);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas},
        "status": status,
    })
}

fn scale_info() -> ResourceInfo {
    ResourceInfo {
        group: "autoscaling".into(),
        version: "v1".into(),
        plural: "scale".into(),
        singular: "scale".into(),
        kind: "Scale".into(),
        namespaced: true,
        short_names: Vec::new(),
        categories: Vec::new(),
        status_subresource: false,
        tracks_generation: false,
        name_rule: crate::registry::NameRule::Subdomain,
        custom: None,
    }
}

/// The read-compute-commit loop of a scale write; `compute` turns the current Scale into the
/// requested one.
async fn write_scale<F>(
    app: &Arc<App>,
    t: &Target,
    name: &str,
    paths: &ScalePaths,
    opts: &WriteOptions,
    compute: F,
) -> Result<Response, ApiError>
where
    F: Fn(&Value) -> Result<Value, ApiError>,
{
    let r = &t.r;
    for _ in 0..16 {
        let current = get_parent(app, t, name)?;
        let wanted = compute(&to_scale(&current, paths))?;
        if let Some(kind) = wanted["kind"]
            .as_str()
            .filter(|k| !k.is_empty() && *k != "Scale")
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind (Scale)"
            )));
        }
        match meta_str(&wanted, "name") {
            Some(n) if !n.is_empty() && n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        let replicas = match &wanted["spec"]["replicas"] {
            Value::Null => 0,
            Value::Number(n)
                if n.as_i64()
                    .is_some_and(|v| (0..=i32::MAX as i64).contains(&v)) =>
            {
                n.as_i64().unwrap_or(0)
            }
            Value::Number(n) if n.as_i64().is_some_and(|v| v < 0) => {
                return Err(ApiError::invalid(
                    &scale_info(),
                    name,
                    &[(
                        "spec.replicas".into(),
                        "FieldValueInvalid",
                        format!("Invalid value: {n}: must be greater than or equal to 0"),
                    )],
                ));
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "spec.replicas: Invalid value: {other}: must be a 32-bit integer"
                )));
            }
        };
        let conditional = meta_str(&wanted, "resourceVersion").filter(|s| !s.is_empty());
        if let Some(rv) = conditional
            && rv != meta_str(&current, "resourceVersion").unwrap_or_default()
        {
            return Err(ApiError::modified(r, name));
        }
        if at(&current, &paths.spec).and_then(Value::as_i64) == Some(replicas) {
            return Ok(json_response(StatusCode::OK, &to_scale(&current, paths)));
        }
        let mut new = (*current).clone();
        set_at(&mut new, &paths.spec, json!(replicas));
        let prepared = ops::prepare_update(r, &current, new, false, opts)?;
        ops::validate(r, Some(&current), &prepared.object)?;
        if opts.dry_run {
            return Ok(json_response(
                StatusCode::OK,
                &to_scale(&prepared.object, paths),
            ));
        }
        match app.store.commit_update(r, rv_of(&current), prepared.object) {
            Ok(stored) => return Ok(json_response(StatusCode::OK, &to_scale(&stored, paths))),
            Err(CommitError::Stale) if conditional.is_some() => {
                return Err(ApiError::modified(r, name));
            }
            Err(CommitError::Stale) => continue,
            Err(CommitError::Api(e)) => return Err(e),
        }
    }
    Err(ApiError::modified(r, name))
}

// ---------------------------------------------------------------- CSR approval

async fn approve<F>(
    app: &Arc<App>,
    t: &Target,
    name: &str,
    opts: &WriteOptions,
    compute: F,
) -> Result<Response, ApiError>
where
    F: Fn(&Value) -> Result<Value, ApiError>,
{
    let r = &t.r;
    for _ in 0..16 {
        let current = get_parent(app, t, name)?;
        let wanted = compute(&current)?;
        let conditional = meta_str(&wanted, "resourceVersion").filter(|s| !s.is_empty());
        let mut new = (*current).clone();
        new["status"]["conditions"] = wanted["status"]["conditions"].clone();
        if new["status"]["conditions"].is_null()
            && let Some(s) = new["status"].as_object_mut()
        {
            s.remove("conditions");
        }
        if let Some(cs) = new["status"]["conditions"].as_array_mut() {
            let now = meta::now();
            for c in cs {
                if c.is_object() {
                    for f in ["lastUpdateTime", "lastTransitionTime"] {
                        if c[f].as_str().is_none_or(str::is_empty) {
                            c[f] = json!(now);
                        }
                    }
                }
            }
        }
        if let Some(rv) = conditional {
            meta::meta_mut(&mut new).insert("resourceVersion".into(), json!(rv));
        }
        let prepared = ops::prepare_update(r, &current, new, true, opts)?;
        ops::validate(r, Some(&current), &prepared.object)?;
        if opts.dry_run || ops::is_noop(&current, &prepared.object) {
            let shown = if opts.dry_run {
                prepared.object
            } else {
                (*current).clone()
            };
            return Ok(json_response(StatusCode::OK, &shown));
        }
        match app.store.commit_update(r, rv_of(&current), prepared.object) {
            Ok(stored) => return Ok(json_response(StatusCode::OK, &stored)),
            Err(CommitError::Stale) if conditional.is_some() => {
                return Err(ApiError::modified(r, name));
            }
            Err(CommitError::Stale) => continue,
            Err(CommitError::Api(e)) => return Err(e),
        }
    }
    Err(ApiError::modified(r, name))
}
