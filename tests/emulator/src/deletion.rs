//! DELETE of one object: preconditions, admission, finalizers and graceful deletion, the
//! propagation policy, and the API server's answer (the object or a Status). The HTTP layer's
//! DELETE and deletecollection and the eviction subresource all delete through here.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::admission::{self, Attempt, Operation};
use crate::meta::{self, meta_str, rv_of};
use crate::registry::ResourceInfo;
use crate::request::json_response;
use crate::state::App;
use crate::status::{self, ApiError};
use crate::store::CommitError;

type Query = HashMap<String, String>;

/// Deletion options from the query and the DeleteOptions body.
pub struct DeleteOpts {
    pub policy: String,
    pub grace: Option<i64>,
    pub dry_run: bool,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

pub fn delete_options(query: &Query, body: &Bytes) -> Result<DeleteOpts, ApiError> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
    };
    let policy = query
        .get("propagationPolicy")
        .cloned()
        .or_else(|| b["propagationPolicy"].as_str().map(str::to_string))
        .or_else(|| match b["orphanDependents"].as_bool() {
            Some(true) => Some("Orphan".into()),
            _ => None,
        })
        .unwrap_or_else(|| "Background".into());
    if !matches!(policy.as_str(), "Background" | "Foreground" | "Orphan") {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
        )));
    }
    let dry_run = query.get("dryRun").is_some_and(|d| d == "All")
        || b["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|d| d == "All"));
    let grace = query
        .get("gracePeriodSeconds")
        .and_then(|g| g.parse::<i64>().ok())
        .or_else(|| b["gracePeriodSeconds"].as_i64());
    Ok(DeleteOpts {
        policy,
        grace,
        dry_run,
        precondition_uid: b["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_rv: b["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
    })
}

#[allow(clippy::too_many_arguments)]
pub async fn delete_one(
    app: &Arc<App>,
    r: &Arc<ResourceInfo>,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
    pre_uid: Option<&str>,
    pre_rv: Option<&str>,
) -> Result<Response, ApiError> {
    let policy = opts.policy.as_str();
    let dry_run = opts.dry_run;
    for _ in 0..16 {
        let current = app
            .store
            .lock()
            .get(r, ns, name)
            .ok_or_else(|| ApiError::not_found(r, name))?;
        let uid = meta_str(&current, "uid").unwrap_or_default().to_string();
        if let Some(p) = pre_uid
            && p != uid
        {
            return Err(ApiError::conflict(
                r,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {p}, UID in object meta: {uid}"
                ),
            ));
        }
        if let Some(p) = pre_rv
            && p != meta_str(&current, "resourceVersion").unwrap_or_default()
        {
            return Err(ApiError::conflict(
                r,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {p}, ResourceVersion in object meta: {}",
                    meta_str(&current, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        let attempt = Attempt {
            r,
            op: Operation::Delete,
            namespace: ns,
            name,
            subresource: None,
            object: None,
            old: Some(&current),
            dry_run,
            field_manager: None,
        };
        admission::mutate(app, &attempt, None).await?;
        admission::validate(app, &attempt).await?;
        if dry_run {
            let held = current["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
                || matches!(policy, "Foreground" | "Orphan");
            return Ok(if held {
                json_response(StatusCode::OK, &current)
            } else {
                deleted_answer(r, &current)
            });
        }
        if current["metadata"]["deletionTimestamp"].is_string() {
            return Ok(json_response(StatusCode::OK, &current));
        }
        if policy == "Orphan" {
            crate::gc::orphan_dependents(app, &uid);
        }
        let mut finalizers: Vec<Value> = current["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if policy == "Foreground" && !finalizers.contains(&json!("foregroundDeletion")) {
            finalizers.push(json!("foregroundDeletion"));
            app.store.lock().foreground_active = true;
        }
        let namespace_delete = r.is_builtin() && r.kind == "Namespace";
        // Pods terminate gracefully: the kubelet removes them once their containers stopped.
        let pod_grace = (r.is_builtin() && r.kind == "Pod")
            .then(|| {
                opts.grace.unwrap_or_else(|| {
                    current["spec"]["terminationGracePeriodSeconds"]
                        .as_i64()
                        .unwrap_or(30)
                })
            })
            .filter(|g| *g > 0);
        if let Some(grace) = pod_grace {
            let mut marked = (*current).clone();
            let m = meta::meta_mut(&mut marked);
            m.insert("deletionTimestamp".into(), json!(meta::now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            match app.store.commit_update(r, rv_of(&current), marked) {
                Ok(stored) => return Ok(json_response(StatusCode::OK, &stored)),
                Err(CommitError::Stale) => continue,
                Err(CommitError::Api(e)) => return Err(e),
            }
        }
        if !finalizers.is_empty() || namespace_delete {
            let mut marked = (*current).clone();
            let m = meta::meta_mut(&mut marked);
            m.insert("deletionTimestamp".into(), json!(meta::now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if !finalizers.is_empty() {
                m.insert("finalizers".into(), Value::Array(finalizers));
            }
            if namespace_delete {
                marked["status"] = json!({"phase": "Terminating"});
            }
            match app.store.commit_update(r, rv_of(&current), marked) {
                Ok(stored) => {
                    if namespace_delete {
                        crate::gc::purge_namespace(app, name);
                    }
                    app.store.gc_wakeup.notify_one();
                    return Ok(json_response(StatusCode::OK, &stored));
                }
                Err(CommitError::Stale) => continue,
                Err(CommitError::Api(e)) => return Err(e),
            }
        }
        match app
            .store
            .commit_remove(r, ns, name, Some(rv_of(&current)), None)
        {
            Ok(_) => {
                crate::crds::after_write(app, r, None);
                crate::apiservices::after_write(app, r, None);
                if r.kind == "CustomResourceDefinition" {
                    crate::crds::removed(app, name);
                }
                return Ok(deleted_answer(r, &current));
            }
            Err(e) if e.reason == "Conflict" => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::modified(r, name))
}

/// The answer to an immediate delete: the deleted object for the kinds whose registry sets
/// `ReturnDeletedObject` (and a CustomResourceDefinition, whose first delete answers it as
/// terminating), a `Status` naming it for the others (`finalizeDelete` of the generic store).
fn deleted_answer(r: &ResourceInfo, deleted: &Value) -> Response {
    let returns_object = r.is_builtin()
        && match r.group.as_str() {
            "" => matches!(
                r.plural.as_str(),
                "pods"
                    | "services"
                    | "serviceaccounts"
                    | "persistentvolumes"
                    | "persistentvolumeclaims"
                    | "namespaces"
                    | "resourcequotas"
                    | "podtemplates"
            ),
            "storage.k8s.io" => matches!(
                r.plural.as_str(),
                "storageclasses"
                    | "csidrivers"
                    | "csinodes"
                    | "volumeattachments"
                    | "volumeattributesclasses"
            ),
            "resource.k8s.io" => true,
            _ => false,
        };
    if returns_object {
        return json_response(StatusCode::OK, deleted);
    }
    if crate::crds::is_crd(r) {
        // The API server marks it terminating and cleans up its resources first; the emulator
        // removes it at once, and answers as the API server's first delete does.
        let mut terminating = deleted.clone();
        let m = meta::meta_mut(&mut terminating);
        m.insert("deletionTimestamp".into(), json!(meta::now()));
        m.insert(
            "finalizers".into(),
            json!(["customresourcecleanup.apiextensions.k8s.io"]),
        );
        return json_response(StatusCode::OK, &terminating);
    }
    let name = meta_str(deleted, "name").unwrap_or_default();
    let uid = meta_str(deleted, "uid").unwrap_or_default();
    json_response(StatusCode::OK, &status::delete_success(r, name, uid))
}
