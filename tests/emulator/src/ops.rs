//! What a write does to an object before it is stored: server-stamped metadata, status
//! subresource rules, generation, custom-resource pruning/defaulting/validation, and the
//! defaults the API server fills into built-in kinds. Pure functions of (old, request).

use serde_json::{Map, Value, json};

use crate::apply;
use crate::meta::{self, meta_str};
use crate::registry::ResourceInfo;
use crate::schema;
use crate::status::ApiError;

/// `fieldValidation` modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    /// Drop unknown fields with a warning (the default).
    #[default]
    Warn,
    /// Reject unknown fields.
    Strict,
}

impl FieldValidation {
    pub fn parse(s: Option<&str>) -> Result<FieldValidation, ApiError> {
        match s {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}; supported values: Ignore, Warn, Strict"
            ))),
        }
    }
}

/// Options common to writes.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    /// The `fieldManager` parameter.
    pub field_manager: Option<String>,
    pub field_validation: FieldValidation,
    /// The request's `User-Agent` (empty when it sent none); None for the emulator's own writes,
    /// which record no field ownership.
    pub user_agent: Option<String>,
}

impl WriteOptions {
    /// The options of a write request: `dryRun`, `fieldManager`, `fieldValidation`, the
    /// User-Agent.
    pub fn of(
        query: &crate::request::Query,
        headers: &axum::http::HeaderMap,
    ) -> Result<WriteOptions, ApiError> {
        let dry_run = match query.get("dryRun").map(String::as_str) {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
                )));
            }
        };
        Ok(WriteOptions {
            dry_run,
            field_manager: query.get("fieldManager").cloned().filter(|m| !m.is_empty()),
            field_validation: FieldValidation::parse(
                query.get("fieldValidation").map(String::as_str),
            )?,
            user_agent: Some(crate::request::user_agent(headers)),
        })
    }

    /// The field manager a write other than an apply is recorded under, as the API server
    /// names it: `fieldManager`, else the User-Agent up to its first `/`
    /// (`kubectl-client-side-apply/v1.32.0 (linux/amd64) kubernetes/...` is
    /// `kubectl-client-side-apply`) without unprintable characters, cut to 128 bytes; `unknown`
    /// when that leaves nothing.
    pub fn manager(&self) -> Option<String> {
        if let Some(m) = &self.field_manager {
            return Some(m.clone());
        }
        let ua = self.user_agent.as_deref()?;
        let mut name = String::new();
        for c in ua.split('/').next().unwrap_or_default().chars() {
            if c.is_control() {
                continue;
            }
            if name.len() + c.len_utf8() > 128 {
                break;
            }
            name.push(c);
        }
        Some(if name.is_empty() {
            "unknown".into()
        } else {
            name
        })
    }

    /// These options for the create or update that stores an apply's result: the apply has
    /// recorded its ownership already.
    pub fn recording_nothing(&self) -> WriteOptions {
        WriteOptions {
            field_manager: None,
            user_agent: None,
            ..self.clone()
        }
    }
}

/// A prepared object plus the warnings for the response.
pub struct Prepared {
    pub object: Value,
    pub warnings: Vec<String>,
}

/// Checks `apiVersion`/`kind` of a request body against the endpoint, filling them in.
pub fn check_type(r: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    let want_av = r.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => obj["apiVersion"] = json!(want_av),
        Some(av) if av == want_av => {}
        Some(av) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => obj["kind"] = json!(r.kind),
        Some(k) if k == r.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                r.kind
            )));
        }
    }
    Ok(())
}

/// Prepares an object for creation in `ns` ("" for cluster-scoped resources).
pub fn prepare_create(
    r: &ResourceInfo,
    ns: &str,
    mut obj: Value,
    opts: &WriteOptions,
) -> Result<Prepared, ApiError> {
    check_type(r, &mut obj)?;
    let mut warnings = Vec::new();
    {
        let m = meta::meta_mut(&mut obj);
        if r.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(body_ns) if !body_ns.is_empty() && body_ns != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    m.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            m.remove("namespace");
        }
        if m.get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            match m
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
            {
                Some(prefix) => {
                    let name = format!("{prefix}{}", meta::random_suffix());
                    m.insert("name".into(), json!(name));
                }
                None => {
                    return Err(ApiError::invalid(
                        r,
                        "",
                        &[(
                            "metadata.name".into(),
                            "FieldValueRequired",
                            "Required value: name or generateName is required".into(),
                        )],
                    ));
                }
            }
        }
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(meta::now()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if r.tracks_generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        start_entries(m, None);
    }
    if r.status_subresource
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    if r.is_builtin() {
        crate::builtin::defaults(r, &mut obj, None);
    }
    normalize(r, &mut obj, opts, &mut warnings)?;
    if let Some(manager) = opts.manager() {
        apply::record_update(r, None, &mut obj, &manager, false);
    }
    Ok(Prepared {
        object: obj,
        warnings,
    })
}

/// Prepares a replacement of `old`. `status_path` is true for writes to `/status`.
pub fn prepare_update(
    r: &ResourceInfo,
    old: &Value,
    mut obj: Value,
    status_path: bool,
    opts: &WriteOptions,
) -> Result<Prepared, ApiError> {
    check_type(r, &mut obj)?;
    let mut warnings = Vec::new();
    let name = meta_str(old, "name").unwrap_or_default().to_string();
    match meta_str(&obj, "name") {
        Some(n) if !n.is_empty() && n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        _ => {}
    }
    if let Some(body_rv) = meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty())
        && body_rv != meta_str(old, "resourceVersion").unwrap_or_default()
    {
        return Err(ApiError::modified(r, &name));
    }
    if status_path {
        // Only .status is taken from the request.
        let status = obj.get("status").cloned();
        obj = old.clone();
        match status {
            Some(s) => obj["status"] = s,
            None => {
                if let Some(o) = obj.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    } else if r.status_subresource {
        match old.get("status") {
            Some(s) => obj["status"] = s.clone(),
            None => {
                if let Some(o) = obj.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    }
    {
        let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
        let m = meta::meta_mut(&mut obj);
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_meta.get(field) {
                Some(v) => {
                    m.insert(field.into(), v.clone());
                }
                None => {
                    m.remove(field);
                }
            }
        }
        m.remove("selfLink");
        if old_meta.contains_key("deletionTimestamp") {
            let old_f: Vec<Value> = old_meta
                .get("finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let new_f: Vec<Value> = m
                .get("finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if new_f.iter().any(|f| !old_f.contains(f)) {
                return Err(ApiError::invalid(
                    r,
                    &name,
                    &[(
                        "metadata.finalizers".into(),
                        "FieldValueForbidden",
                        "Forbidden: no new finalizers can be added if the object is being deleted"
                            .into(),
                    )],
                ));
            }
        }
        start_entries(m, old_meta.get("managedFields"));
    }
    if r.is_builtin() {
        crate::builtin::defaults(r, &mut obj, Some(old));
    }
    normalize(r, &mut obj, opts, &mut warnings)?;
    if let Some(manager) = opts.manager() {
        apply::record_update(r, Some(old), &mut obj, &manager, status_path);
    }
    update_generation(r, old, &mut obj);
    Ok(Prepared {
        object: obj,
        warnings,
    })
}

/// Whether an update changes nothing (resourceVersion and managedFields timestamps aside).
pub fn is_noop(old: &Value, new: &Value) -> bool {
    strip_volatile(old) == strip_volatile(new)
}

fn strip_volatile(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        if let Some(Value::Array(mf)) = m.get_mut("managedFields") {
            for e in mf.iter_mut() {
                if let Some(e) = e.as_object_mut() {
                    e.remove("time");
                }
            }
            // Entries are ordered by time: a newer time alone may move one.
            mf.sort_by_cached_key(|e| e.to_string());
        }
    }
    v
}

/// Everything but metadata and status: what `generation` counts.
fn spec_of(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
        o.remove("apiVersion");
        o.remove("kind");
    }
    v
}

/// Decoding-time work shared by create and update: unknown-field pruning (rejected under
/// Strict) and custom-resource defaulting. Validation runs later, after mutating admission.
fn normalize(
    r: &ResourceInfo,
    obj: &mut Value,
    opts: &WriteOptions,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let unknown = prune(r, obj);
    if !unknown.is_empty() {
        match opts.field_validation {
            FieldValidation::Strict => {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|f| format!("unknown field \"{f}\""))
                    .collect();
                return Err(ApiError::bad_request(format!(
                    "strict decoding error: {}",
                    list.join(", ")
                )));
            }
            FieldValidation::Warn => {
                warnings.extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
            }
            FieldValidation::Ignore => {}
        }
    }
    if let Some(custom) = &r.custom {
        schema::apply_defaults(obj, &custom.schema);
    }
    Ok(())
}

fn prune(r: &ResourceInfo, obj: &mut Value) -> Vec<String> {
    let mut unknown = meta::prune_meta(obj);
    if let Some(custom) = &r.custom {
        unknown.extend(schema::prune(obj, &custom.schema));
    } else {
        unknown.extend(crate::builtin::prune_unknown(r, obj));
    }
    unknown
}

/// Re-runs pruning and defaulting after a mutating webhook changed the object.
pub fn renormalize(r: &ResourceInfo, old: Option<&Value>, obj: &mut Value) {
    prune(r, obj);
    if let Some(custom) = &r.custom {
        schema::apply_defaults(obj, &custom.schema);
    } else {
        crate::builtin::defaults(r, obj, old);
    }
}

/// Validation after mutating admission: metadata, the CRD schema or built-in rules.
pub fn validate(r: &ResourceInfo, old: Option<&Value>, obj: &Value) -> Result<(), ApiError> {
    let name = meta_str(obj, "name").unwrap_or_default().to_string();
    let mut causes = meta::validate_meta(r, obj);
    if let Some(custom) = &r.custom {
        for c in schema::validate(obj, &custom.schema) {
            causes.push((c.field, c.reason, c.message));
        }
    } else {
        causes.extend(crate::builtin::validate(r, old, obj));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(r, &name, &causes))
    }
}

/// Sets `metadata.generation`: the old value, plus one when anything outside metadata and
/// status changed.
pub fn update_generation(r: &ResourceInfo, old: &Value, obj: &mut Value) {
    if !r.tracks_generation {
        return;
    }
    let mut g = old["metadata"]["generation"].as_i64().unwrap_or(0);
    if spec_of(obj) != spec_of(old) {
        g += 1;
    }
    meta::meta_mut(obj).insert("generation".into(), json!(g));
}

/// The managedFields a write starts from, as the API server decides: the request's own when it
/// sends some (a client may rewrite them), `[{}]` clears them, and without any (or an empty
/// list) the stored ones stay.
fn start_entries(m: &mut Map<String, Value>, stored: Option<&Value>) {
    match m.get("managedFields").and_then(Value::as_array) {
        Some(entries) if entries.len() == 1 && entries[0] == json!({}) => {
            m.remove("managedFields");
        }
        Some(entries) if !entries.is_empty() => {}
        _ => match stored {
            Some(e) => {
                m.insert("managedFields".into(), e.clone());
            }
            None => {
                m.remove("managedFields");
            }
        },
    }
}
