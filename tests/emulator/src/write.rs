//! The write verbs: create (POST), update (PUT), patch (JSON, merge, strategic merge and
//! server-side apply), delete and deletecollection; the admission every write passes and the
//! read-compute-commit loop of the update-like ones (`write_loop`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::admission::{self, Attempt, Operation};
use crate::deletion::{delete_one, delete_options};
use crate::meta::{self, meta_str, rv_of};
use crate::ops::{self, WriteOptions};
use crate::registry::ResourceInfo;
use crate::request::{Query, Target, from_yaml, json_response};
use crate::selectable::Selection;
use crate::state::App;
use crate::status::ApiError;
use crate::store::CommitError;
use crate::{apply, smp};

/// Largest object etcd stores (its default request limit).
pub const ETCD_LIMIT: usize = 1_572_864;

/// `resp` with the `Warning` headers of `warnings`.
fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append("Warning", v);
        }
    }
    resp
}

/// A request body addressed to a view (events.k8s.io Events) in the stored form.
pub fn as_stored(t: &Target, obj: Value) -> Result<Value, ApiError> {
    match &t.view {
        Some(view) => crate::events::to_core(view, obj),
        None => Ok(obj),
    }
}

/// Creates an object.
pub async fn create(
    app: &Arc<App>,
    t: &Target,
    obj: Value,
    opts: &WriteOptions,
) -> Result<Response, ApiError> {
    let ns = if t.r.namespaced {
        t.namespace.as_str()
    } else {
        ""
    };
    // Admission errors name the object as posted: its generateName when it has no name yet.
    let posted_name = meta_str(&obj, "name")
        .filter(|n| !n.is_empty())
        .or_else(|| meta_str(&obj, "generateName"))
        .unwrap_or_default()
        .to_string();
    let prepared = ops::prepare_create(&t.r, ns, obj, opts)?;
    let mut object = prepared.object;
    let name = meta_str(&object, "name").unwrap_or_default().to_string();
    created_as_posted(app, t, &name, &mut object)?;
    crate::priority::admit(app, &t.r, None, &posted_name, &mut object, None)?;
    let (object, admission_warnings) = admit(
        app,
        &t.r,
        ns,
        &name,
        Operation::Create,
        object,
        None,
        None,
        opts,
    )
    .await?;
    let mut warnings = prepared.warnings;
    warnings.extend(admission_warnings);
    if opts.dry_run {
        let st = app.store.lock();
        if st.get(&t.r, ns, &name).is_some() {
            return Err(ApiError::already_exists(&t.r, &name));
        }
        if t.r.namespaced && !st.namespace_exists(ns) {
            return Err(ApiError::namespace_not_found(ns));
        }
        return Ok(with_warnings(
            json_response(StatusCode::CREATED, &object),
            &warnings,
        ));
    }
    let stored = app.store.commit_create(&t.r, object)?;
    crate::crds::after_write(app, &t.r, Some(&stored));
    crate::apiservices::after_write(app, &t.r, Some(&stored));
    crate::cluster::after_create(app, &t.r, &stored);
    Ok(with_warnings(
        json_response(StatusCode::CREATED, &stored),
        &warnings,
    ))
}

/// Replaces an object (PUT).
pub async fn update(
    app: &Arc<App>,
    t: &Target,
    name: &str,
    obj: Value,
    status_path: bool,
    opts: &WriteOptions,
) -> Result<Response, ApiError> {
    let conditional = meta_str(&obj, "resourceVersion").is_some_and(|s| !s.is_empty());
    write_loop(
        app,
        t,
        name,
        opts,
        |old| {
            let old = old.ok_or_else(|| ApiError::not_found(&t.r, name))?;
            // The uid of the body is the update's precondition (rest.DefaultUpdatedObjectInfo,
            // storage.Preconditions.Check).
            if let Some(uid) = meta_str(&obj, "uid").filter(|u| !u.is_empty()) {
                let stored = meta_str(old, "uid").unwrap_or_default();
                if uid != stored {
                    return Err(ApiError::conflict(
                        &t.r,
                        name,
                        &format!(
                            "Precondition failed: UID in precondition: {uid}, UID in object meta: {stored}"
                        ),
                    ));
                }
            }
            ops::prepare_update(&t.r, old, obj.clone(), status_path, opts)
        },
        conditional,
    )
    .await
}

fn status_sub(t: &Target) -> Option<&'static str> {
    (t.sub.as_deref() == Some("status")).then_some("status")
}

/// Admission for a normalized object: mutating webhooks (then pruning and defaulting again),
/// validation, the built-in validating plugins, validating webhooks. The built-in mutating
/// plugins ([`crate::priority::admit`]) run before, on the prepared object. Returns the object
/// to store and the warnings.
#[allow(clippy::too_many_arguments)]
async fn admit(
    app: &Arc<App>,
    r: &ResourceInfo,
    ns: &str,
    name: &str,
    op: Operation,
    object: Value,
    old: Option<&Value>,
    sub: Option<&str>,
    opts: &WriteOptions,
) -> Result<(Value, Vec<String>), ApiError> {
    let attempt = Attempt {
        r,
        op,
        namespace: ns,
        name,
        subresource: sub,
        object: None,
        old,
        dry_run: opts.dry_run,
        field_manager: opts.field_manager.as_deref(),
    };
    let (mutated, changed, mut warnings) = admission::mutate(app, &attempt, Some(object)).await?;
    let mut object = mutated.unwrap_or(Value::Null);
    if changed {
        ops::renormalize(r, old, &mut object);
        if let Some(old) = old {
            ops::update_generation(r, old, &mut object);
        }
    }
    crate::controllers::check_claim_resize(app, r, old, &object)?;
    ops::validate(r, old, &object)?;
    // etcd refuses values over its request limit (1.5 MiB).
    if encoded_len(&object) > ETCD_LIMIT {
        return Err(ApiError::new(
            413,
            "RequestEntityTooLarge",
            "etcdserver: request is too large",
        ));
    }
    crate::priority::validate(app, r, sub, &object, old)?;
    let attempt = Attempt {
        object: Some(&object),
        ..attempt
    };
    warnings.extend(admission::validate(app, &attempt).await?);
    Ok((object, warnings))
}

/// The length of `value` encoded as JSON, counted without building the text.
fn encoded_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// What the create strategy of a kind does to a new object, whether it came by POST or by a
/// server-side apply that creates it: a CRD's names accepted and established, an Event's
/// create validation.
fn created_as_posted(
    app: &App,
    t: &Target,
    name: &str,
    object: &mut Value,
) -> Result<(), ApiError> {
    if crate::crds::is_crd(&t.r) {
        let others = app.store.lock().objects_of(&t.r.key(), None);
        crate::crds::establish(object, &others);
    }
    if crate::events::is_core(&t.r) {
        let addressed = t.view.as_deref().unwrap_or(&t.r);
        crate::events::validate_create(addressed, name, object, t.view.is_some())?;
    }
    Ok(())
}

/// The read-compute-commit loop every update-like write runs (GuaranteedUpdate).
async fn write_loop<F>(
    app: &Arc<App>,
    t: &Target,
    name: &str,
    opts: &WriteOptions,
    compute: F,
    conditional: bool,
) -> Result<Response, ApiError>
where
    F: Fn(Option<&Value>) -> Result<ops::Prepared, ApiError>,
{
    let sub = status_sub(t);
    for _ in 0..16 {
        let current = app.store.lock().get(&t.r, &t.namespace, name);
        let mut prepared = compute(current.as_deref())?;
        let op = if current.is_some() {
            Operation::Update
        } else {
            // A server-side apply that creates: the create strategy runs as for a POST
            // (`forceAllowCreate` makes the store call `BeforeCreate`).
            created_as_posted(app, t, name, &mut prepared.object)?;
            Operation::Create
        };
        crate::priority::admit(
            app,
            &t.r,
            sub,
            name,
            &mut prepared.object,
            current.as_deref(),
        )?;
        let (object, admission_warnings) = admit(
            app,
            &t.r,
            &t.namespace,
            name,
            op,
            prepared.object,
            current.as_deref(),
            sub,
            opts,
        )
        .await?;
        let mut warnings = prepared.warnings;
        warnings.extend(admission_warnings);
        let prepared = ops::Prepared { object, warnings };
        let Some(current) = current else {
            // Only server-side apply creates through PATCH.
            let mut object = prepared.object;
            if opts.dry_run {
                return Ok(with_warnings(
                    json_response(StatusCode::CREATED, &object),
                    &prepared.warnings,
                ));
            }
            meta::meta_mut(&mut object).remove("resourceVersion");
            let stored = match app.store.commit_create(&t.r, object) {
                Ok(s) => s,
                Err(e) if e.reason == "AlreadyExists" => continue,
                Err(e) => return Err(e),
            };
            crate::crds::after_write(app, &t.r, Some(&stored));
            crate::apiservices::after_write(app, &t.r, Some(&stored));
            crate::cluster::after_create(app, &t.r, &stored);
            return Ok(with_warnings(
                json_response(StatusCode::CREATED, &stored),
                &prepared.warnings,
            ));
        };
        if ops::is_noop(&current, &prepared.object) || opts.dry_run {
            let shown = if opts.dry_run {
                prepared.object
            } else {
                (*current).clone()
            };
            return Ok(with_warnings(
                json_response(StatusCode::OK, &shown),
                &prepared.warnings,
            ));
        }
        match app
            .store
            .commit_update(&t.r, rv_of(&current), prepared.object)
        {
            Ok(stored) => {
                crate::crds::after_write(app, &t.r, Some(&stored));
                crate::apiservices::after_write(app, &t.r, Some(&stored));
                return Ok(with_warnings(
                    json_response(StatusCode::OK, &stored),
                    &prepared.warnings,
                ));
            }
            Err(CommitError::Stale) if conditional => return Err(ApiError::modified(&t.r, name)),
            Err(CommitError::Stale) => continue,
            Err(CommitError::Api(e)) => return Err(e),
        }
    }
    Err(ApiError::modified(&t.r, name))
}

/// The uid a patch gives the object (`uid`, if any) against the stored object (`old`): a patch
/// that sets another uid than the stored one is invalid, `metadata.uid` is immutable
/// (`rest.BeforeUpdate`, ValidateObjectMetaUpdate; kubernetes/kubernetes#127625); an apply
/// naming a uid when nothing is stored is a conflict, not a creation (patch.go's applyPatch).
fn apply_uid(
    r: &ResourceInfo,
    name: &str,
    old: Option<&Value>,
    uid: Option<&str>,
) -> Result<(), ApiError> {
    let Some(uid) = uid.filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    match old {
        None => Err(ApiError::conflict(
            r,
            name,
            &format!(
                "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
            ),
        )),
        Some(old) if meta_str(old, "uid").unwrap_or_default() != uid => Err(ApiError::invalid(
            r,
            name,
            &[(
                "metadata.uid".into(),
                "FieldValueInvalid",
                format!("Invalid value: \"{uid}\": field is immutable"),
            )],
        )),
        Some(_) => Ok(()),
    }
}

/// Patches an object (PATCH), by the body's content type.
#[allow(clippy::too_many_arguments)]
pub async fn patch(
    app: &Arc<App>,
    t: &Target,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
    query: &Query,
    status_path: bool,
    opts: &WriteOptions,
) -> Result<Response, ApiError> {
    let ct = crate::request::content_type(headers);
    let custom = !t.r.is_builtin();
    match ct.as_str() {
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            let applied: Value = from_yaml(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            let manager = opts
                .field_manager
                .clone()
                .ok_or_else(|| ApiError::bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"))?;
            let force = query.get("force").is_some_and(|f| f == "true");
            let conditional = meta_str(&applied, "resourceVersion").is_some_and(|s| !s.is_empty());
            write_loop(
                app,
                t,
                name,
                opts,
                |old| {
                    apply_uid(&t.r, name, old, meta_str(&applied, "uid"))?;
                    let merged = match &t.view {
                        Some(view) => {
                            let shown = old.map(crate::events::from_core);
                            as_stored(
                                t,
                                apply::apply(
                                    view,
                                    shown.as_ref(),
                                    &applied,
                                    &manager,
                                    force,
                                    status_path,
                                )?,
                            )?
                        }
                        None => apply::apply(&t.r, old, &applied, &manager, force, status_path)?,
                    };
                    match old {
                        Some(old) => ops::prepare_update(
                            &t.r,
                            old,
                            merged,
                            status_path,
                            &opts.recording_nothing(),
                        ),
                        None => {
                            let mut merged = merged;
                            meta::meta_mut(&mut merged).insert("name".into(), json!(name));
                            ops::prepare_create(
                                &t.r,
                                &t.namespace,
                                merged,
                                &opts.recording_nothing(),
                            )
                        }
                    }
                },
                conditional,
            )
            .await
        }
        "application/merge-patch+json"
        | "application/json-patch+json"
        | "application/strategic-merge-patch+json" => {
            if ct == "application/strategic-merge-patch+json" && custom {
                return Err(ApiError::unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            }
            let patch_doc: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let conditional = patch_doc
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            write_loop(app, t, name, opts, |old| {
                let old = old.ok_or_else(|| ApiError::not_found(&t.r, name))?;
                // A view's patch applies to the object as that view shows it.
                let shown = match &t.view {
                    Some(_) => std::borrow::Cow::Owned(crate::events::from_core(old)),
                    None => std::borrow::Cow::Borrowed(old),
                };
                let mut target = Value::clone(&shown);
                match ct.as_str() {
                    "application/merge-patch+json" => {
                        if !patch_doc.is_object() {
                            return Err(ApiError::bad_request("merge patch must be a JSON object"));
                        }
                        json_patch::merge(&mut target, &patch_doc);
                    }
                    "application/json-patch+json" => {
                        let p: json_patch::Patch = serde_json::from_value(patch_doc.clone())
                            .map_err(|e| ApiError::bad_request(format!("error decoding JSON patch: {e}")))?;
                        json_patch::patch(&mut target, &p).map_err(|e| {
                            ApiError::invalid(&t.r, name, &[(String::new(), "FieldValueInvalid", format!("the server rejected our request due to an error in our request: {e}"))])
                        })?;
                    }
                    _ => {
                        let addressed = t.view.as_ref().unwrap_or(&t.r);
                        let root = crate::merge::Node::root(&addressed.group, &addressed.version, &addressed.kind);
                        target = smp::apply(&shown, &patch_doc, root).map_err(ApiError::bad_request)?;
                    }
                }
                let target = as_stored(t, target)?;
                apply_uid(&t.r, name, Some(old), meta_str(&target, "uid"))?;
                ops::prepare_update(&t.r, old, target, status_path, opts)
            }, conditional)
            .await
        }
        other => Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{} (got {other:?})",
            if custom {
                ""
            } else {
                ", application/strategic-merge-patch+json"
            }
        ))),
    }
}

/// Deletes an object.
pub async fn delete(
    app: &Arc<App>,
    t: &Target,
    name: &str,
    query: &Query,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let opts = delete_options(query, body)?;
    delete_one(
        app,
        &t.r,
        &t.namespace,
        name,
        &opts,
        opts.precondition_uid.as_deref(),
        opts.precondition_rv.as_deref(),
    )
    .await
}

/// Deletes every selected object of a collection.
pub async fn delete_collection(
    app: &Arc<App>,
    t: &Target,
    query: &Query,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let opts = delete_options(query, body)?;
    let selection = Selection::of(t, query)?;
    let ns = (t.namespaced_url && t.r.namespaced).then_some(t.namespace.as_str());
    let items = {
        let st = app.store.lock();
        let keep = |o: &crate::store::Stored| selection.matches_stored(o);
        st.list_page(&t.r, ns, None, None, &keep).0
    };
    let mut deleted = Vec::new();
    for item in items {
        let item = item.value();
        let name = meta_str(&item, "name").unwrap_or_default().to_string();
        let item_ns = meta_str(&item, "namespace").unwrap_or_default().to_string();
        if delete_one(app, &t.r, &item_ns, &name, &opts, None, None)
            .await
            .is_ok()
        {
            deleted.push(item);
        }
    }
    let rv = app.store.lock().resource_version();
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": format!("{}List", t.r.kind), "apiVersion": t.r.api_version(), "metadata": {"resourceVersion": rv.to_string()}, "items": deleted}),
    ))
}
