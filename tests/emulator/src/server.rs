//! The HTTP layer: URL routing, verbs, content negotiation (JSON, YAML, Tables), watches.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::admission::{self, Attempt, Operation};
use crate::meta::{self, meta_str, rv_of};
use crate::ops::{self, FieldValidation, WriteOptions};
use crate::registry::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{CommitError, EventType, ObjKey, WatchEvent};
use crate::{apply, discovery, negotiate, smp};

/// Request body limit, as the API server's.
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Largest object etcd stores (its default request limit).
pub const ETCD_LIMIT: usize = 1_572_864;

use crate::deletion::{delete_one, delete_options};
use crate::request::{Event, Target, decode_body, from_yaml, json_response};
use crate::state::App;

type Query = HashMap<String, String>;

/// Entry point for every request.
pub async fn handle(app: Arc<App>, req: Request<Body>) -> Response {
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_string();
    let query: Query = parts
        .uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let body = match axum::body::to_bytes(body, MAX_BODY + 1).await {
        Ok(b) if b.len() > MAX_BODY => return error_response(&ApiError::too_large()),
        Ok(b) => b,
        Err(_) => return error_response(&ApiError::too_large()),
    };
    let (resp, resource, verb) = route(&app, &method, &path, &query, &parts.headers, body).await;
    app.stats.record(&verb, &resource, resp.status().as_u16());
    resp
}

fn error_response(e: &ApiError) -> Response {
    json_response(
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.to_status(),
    )
}

fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append("Warning", v);
        }
    }
    resp
}

/// Routes a request; returns the response plus (resource, verb) for accounting.
async fn route(
    app: &Arc<App>,
    method: &Method,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> (Response, String, String) {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let plain = |r: Result<Value, ApiError>| match r {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => error_response(&e),
    };
    let other = |r: Response| (r, String::new(), method.as_str().to_lowercase());
    match segs.as_slice() {
        ["version"] => return other(plain(Ok(discovery::version()))),
        ["healthz"] | ["readyz"] | ["livez"] => {
            return other((StatusCode::OK, "ok").into_response());
        }
        ["openapi", "v2"] => {
            return other(error_response(&ApiError::no_route()));
        }
        ["openapi", "v3"] => {
            let st = app.store.lock();
            return other(plain(Ok(discovery::openapi_index(&st.registry))));
        }
        ["openapi", "v3", rest @ ..] => {
            let st = app.store.lock();
            return other(plain(discovery::openapi_doc(&st.registry, &rest.join("/"))));
        }
        _ => {}
    }
    if segs.first() == Some(&"__emulator") {
        return other(crate::admin::handle(app, method, &segs[1..], query, &body));
    }
    if let Err(e) = crate::authz::admit(app, method.as_str(), path, query, headers) {
        return other(error_response(&e));
    }
    // Discovery.
    let accept = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok());
    let discovery_output = match segs.as_slice() {
        ["api"] | ["apis"] => Some(negotiate::negotiate(accept, negotiate::Endpoint::Discovery)),
        ["api", _] | ["apis", _] | ["apis", _, _] => {
            Some(negotiate::negotiate(accept, negotiate::Endpoint::Plain))
        }
        _ => None,
    };
    let discovery_output = match discovery_output.transpose() {
        Ok(o) => o,
        Err(e) => return other(error_response(&e)),
    };
    if let Some(out) = discovery_output
        && let Some(resp) = crate::aggregated::serve(app, &segs, &out)
    {
        return other(resp);
    }
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api"] => return other(plain(Ok(discovery::api_versions()))),
        ["apis"] => {
            let st = app.store.lock();
            return other(plain(Ok(discovery::api_group_list(&st.registry))));
        }
        ["api", v] => {
            let st = app.store.lock();
            return other(plain(discovery::resource_list(&st.registry, "", v)));
        }
        ["apis", g] => {
            let st = app.store.lock();
            return other(plain(discovery::api_group(&st.registry, g)));
        }
        ["apis", g, v] => {
            let st = app.store.lock();
            return other(plain(discovery::resource_list(&st.registry, g, v)));
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return other(error_response(&ApiError::no_route())),
    };
    let target = {
        let st = app.store.lock();
        parse_target(&st.registry, group, version, rest)
    };
    let target = match target {
        Ok(t) => t,
        Err(e) => return other(error_response(&e)),
    };
    let addressed = target.view.clone().unwrap_or_else(|| target.r.clone());
    let resource_label = addressed.key();
    let verb = verb_of(method, &target, query);
    let (delay, fault) = app
        .faults
        .decide(verb, &addressed, target.name.as_deref().unwrap_or(""));
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(e) = fault {
        let mut resp = error_response(&e);
        if e.code == 429 {
            resp.headers_mut()
                .insert("Retry-After", HeaderValue::from_static("1"));
        }
        return (resp, resource_label, verb.to_string());
    }
    let resp = match dispatch(app, method, &target, query, headers, body).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    (resp, resource_label, verb.to_string())
}

fn parse_target(
    reg: &crate::registry::Registry,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Target, ApiError> {
    let lookup = |plural: &str| reg.get(group, version, plural);
    let target = parse_resource(reg, group, version, rest, &lookup)?;
    if crate::events::is_view(&target.r)
        && let Some(core) = reg.get("", "v1", "events")
    {
        return Ok(Target {
            view: Some(target.r.clone()),
            r: core,
            ..target
        });
    }
    Ok(target)
}

fn parse_resource(
    _reg: &crate::registry::Registry,
    _group: &str,
    _version: &str,
    rest: &[&str],
    lookup: &dyn Fn(&str) -> Option<Arc<ResourceInfo>>,
) -> Result<Target, ApiError> {
    // /namespaces/{ns}/{resource}/... when {resource} is a namespaced resource of this group.
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && let Some(r) = lookup(rest[2]).filter(|r| r.namespaced)
    {
        return Ok(Target {
            r,
            view: None,
            namespace: rest[1].to_string(),
            namespaced_url: true,
            name: rest.get(3).map(|s| s.to_string()),
            sub: rest.get(4).map(|s| s.to_string()),
        })
        .and_then(check_depth(rest.len(), 5));
    }
    let r = lookup(rest[0]).ok_or_else(ApiError::no_route)?;
    Ok(Target {
        r,
        view: None,
        namespace: String::new(),
        namespaced_url: false,
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
    })
    .and_then(check_depth(rest.len(), 3))
}

fn check_depth(len: usize, max: usize) -> impl Fn(Target) -> Result<Target, ApiError> {
    move |t| {
        if len > max {
            Err(ApiError::no_route())
        } else {
            Ok(t)
        }
    }
}

fn verb_of(method: &Method, t: &Target, query: &Query) -> &'static str {
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    match (method.as_str(), t.name.is_some()) {
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", false) => "deletecollection",
        ("DELETE", true) => "delete",
        _ => "unknown",
    }
}

fn write_options(query: &Query, headers: &HeaderMap) -> Result<WriteOptions, ApiError> {
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
        field_validation: FieldValidation::parse(query.get("fieldValidation").map(String::as_str))?,
        user_agent: Some(crate::request::user_agent(headers)),
    })
}

async fn dispatch(
    app: &Arc<App>,
    method: &Method,
    t: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    if t.r.namespaced && !t.namespaced_url && (t.name.is_some() || *method != Method::GET) {
        // Cluster-wide URLs of namespaced resources only list and watch.
        return Err(ApiError::no_route());
    }
    if !t.r.namespaced && t.namespaced_url {
        return Err(ApiError::no_route());
    }
    // ComponentStatuses: get and list only (`componentstatus.REST` implements nothing else).
    if crate::kinds::is_component_status(&t.r)
        && (*method != Method::GET || query.get("watch").is_some_and(|w| w == "true" || w == "1"))
    {
        return Err(ApiError::method_not_allowed(method.as_str()));
    }
    if let Some(r) = crate::subresources::dispatch(app, method, t, query, headers, &body).await {
        return r;
    }
    let status_path = match t.sub.as_deref() {
        None => false,
        Some("status") if t.r.status_subresource => true,
        Some(
            s @ ("scale"
            | "log"
            | "exec"
            | "attach"
            | "portforward"
            | "proxy"
            | "eviction"
            | "binding"
            | "ephemeralcontainers"
            | "resize"
            | "finalize"
            | "approval"
            | "token"),
        ) => {
            return Err(ApiError::not_implemented(format!(
                "the emulator does not emulate the {}/{s} subresource",
                t.r.plural
            )));
        }
        Some(_) => return Err(ApiError::no_route()),
    };
    let watching = *method == Method::GET
        && t.name.is_none()
        && query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let endpoint = if watching {
        negotiate::Endpoint::Watch
    } else {
        negotiate::Endpoint::Resource
    };
    let output = negotiate::negotiate(
        headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()),
        endpoint,
    )?;
    let presentation = negotiate::Presentation {
        output,
        stored: t.r.clone(),
        view: t.view.clone(),
        include_object: query
            .get("includeObject")
            .map(String::as_str)
            .unwrap_or("Metadata")
            .to_string(),
    };
    if watching {
        return watch(app, t, query, presentation);
    }
    let resp = respond(app, method, t, query, headers, body, status_path).await?;
    Ok(negotiate::render(resp, &presentation).await)
}

/// The plain (stored-form JSON) answer to a non-watch resource request.
async fn respond(
    app: &Arc<App>,
    method: &Method,
    t: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: Bytes,
    status_path: bool,
) -> Result<Response, ApiError> {
    match (method.as_str(), &t.name) {
        ("GET", None) => list(app, t, query),
        ("GET", Some(_)) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            Err(ApiError::not_implemented(
                "the emulator does not emulate watching a single object by URL; watch the collection with fieldSelector=metadata.name=<name>",
            ))
        }
        ("GET", Some(name)) => {
            let obj = app
                .store
                .lock()
                .get(&t.r, &t.namespace, name)
                .ok_or_else(|| ApiError::not_found(&t.r, name))?;
            Ok(json_response(StatusCode::OK, &obj))
        }
        ("POST", None) => {
            let opts = write_options(query, headers)?;
            let obj = as_stored(t, decode_body(headers, &body)?)?;
            create(app, t, obj, &opts).await
        }
        ("PUT", Some(name)) => {
            let opts = write_options(query, headers)?;
            let obj = as_stored(t, decode_body(headers, &body)?)?;
            update(app, t, name, obj, status_path, &opts).await
        }
        ("PATCH", Some(name)) => {
            let opts = write_options(query, headers)?;
            patch(app, t, name, headers, &body, query, status_path, &opts).await
        }
        ("DELETE", Some(name)) => delete(app, t, name, query, &body).await,
        ("DELETE", None) => delete_collection(app, t, query, &body).await,
        (m, _) => Err(ApiError::method_not_allowed(m)),
    }
}

/// A request body addressed to a view (events.k8s.io Events) in the stored form.
fn as_stored(t: &Target, obj: Value) -> Result<Value, ApiError> {
    match &t.view {
        Some(view) => crate::events::to_core(view, obj),
        None => Ok(obj),
    }
}

fn list(app: &Arc<App>, t: &Target, query: &Query) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(t, query)?;
    let limit = match query.get("limit").map(|l| l.parse::<i64>()) {
        None => None,
        Some(Ok(l)) if l > 0 => Some(l as usize),
        Some(Ok(_)) => None,
        Some(Err(_)) => return Err(ApiError::bad_request("limit must be an integer")),
    };
    let (after, snapshot_rv) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (rv, key) = decode_continue(token)?;
            (Some(key), Some(rv))
        }
        None => (None, None),
    };
    let st = app.store.lock();
    let rv = snapshot_rv.unwrap_or_else(|| st.resource_version());
    let ns = (t.namespaced_url && t.r.namespaced).then_some(t.namespace.as_str());
    let keep = |o: &Value| labels.matches_object(o) && fields.matches(&|f| field_value(o, f));
    let (items, last) = st.list_page(&t.r, ns, after.as_ref(), limit, &keep);
    drop(st);
    let builtin = t.r.is_builtin();
    let items: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut o = (**o).clone();
            if builtin && let Some(m) = o.as_object_mut() {
                m.remove("apiVersion");
                m.remove("kind");
            }
            o
        })
        .collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(last) = last {
        metadata["continue"] = json!(encode_continue(rv, &last));
    }
    let list = json!({
        "kind": format!("{}List", t.r.kind),
        "apiVersion": t.r.api_version(),
        "metadata": metadata,
        "items": items,
    });
    Ok(json_response(StatusCode::OK, &list))
}

fn encode_continue(rv: u64, key: &ObjKey) -> String {
    use base64::Engine;
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> Result<(u64, ObjKey), ApiError> {
    use base64::Engine;
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let ns = v["ns"].as_str().ok_or_else(bad)?.to_string();
    let name = v["name"].as_str().ok_or_else(bad)?.to_string();
    Ok((rv, (ns, name)))
}

fn selectors(t: &Target, query: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let fields = FieldSelector::parse(query.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    for f in fields.fields() {
        let supported = if t.view.is_some() {
            matches!(f, "metadata.name" | "metadata.namespace")
        } else {
            supported_field(&t.r, f)
        };
        if !supported {
            return Err(ApiError::bad_request(format!(
                "\"{f}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            )));
        }
    }
    Ok((labels, fields))
}

fn supported_field(r: &ResourceInfo, f: &str) -> bool {
    matches!(f, "metadata.name" | "metadata.namespace")
        || (crate::events::is_core(r) && crate::events::supported_field(f))
        || (r.is_builtin() && kind_fields(&r.group, &r.kind).iter().any(|(k, _)| *k == f))
}

/// The field selectors the API server registers for a built-in kind (`GetAttrs` of its registry
/// strategy) besides `metadata.name` and `metadata.namespace`, each with where its value is
/// read and what it selects on when unset. Events have their own ([`crate::events`]).
fn kind_fields(group: &str, kind: &str) -> &'static [(&'static str, Field)] {
    const POD: &[(&str, Field)] = &[
        ("spec.nodeName", Field::Text("spec.nodeName")),
        ("spec.restartPolicy", Field::Text("spec.restartPolicy")),
        ("spec.schedulerName", Field::Text("spec.schedulerName")),
        (
            "spec.serviceAccountName",
            Field::Text("spec.serviceAccountName"),
        ),
        ("status.phase", Field::Text("status.phase")),
        ("status.podIP", Field::Text("status.podIP")),
        (
            "status.nominatedNodeName",
            Field::Text("status.nominatedNodeName"),
        ),
    ];
    match (group, kind) {
        ("", "Pod") => POD,
        ("", "Node") => &[("spec.unschedulable", Field::Bool("spec.unschedulable"))],
        ("", "Namespace") => &[("status.phase", Field::Text("status.phase"))],
        ("", "Secret") => &[("type", Field::Text("type"))],
        ("batch", "Job") => &[("status.successful", Field::Count("status.succeeded"))],
        ("apps", "ReplicaSet") | ("", "ReplicationController") => {
            &[("status.replicas", Field::Count("status.replicas"))]
        }
        _ => &[],
    }
}

/// Where a selectable field's value is read, and its value when unset (Go's zero value, as the
/// API server formats it).
#[derive(Clone, Copy)]
enum Field {
    /// A string; unset: empty.
    Text(&'static str),
    /// A boolean; unset: `false`.
    Bool(&'static str),
    /// A number; unset: `0`.
    Count(&'static str),
}

fn field_value(o: &Value, field: &str) -> Option<String> {
    if o["kind"] == "Event" && o["apiVersion"] == "v1" {
        return crate::events::field_value(o, field);
    }
    let at = |path: &str| {
        let mut cur = o;
        for part in path.split('.') {
            cur = cur.get(part)?;
        }
        match cur {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    };
    let kind = o["kind"].as_str().unwrap_or_default();
    let group = o["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map_or("", |(g, _)| g);
    match kind_fields(group, kind).iter().find(|(k, _)| *k == field) {
        Some((_, Field::Text(path))) => Some(at(path).unwrap_or_default()),
        Some((_, Field::Bool(path))) => Some(at(path).unwrap_or_else(|| "false".into())),
        Some((_, Field::Count(path))) => Some(at(path).unwrap_or_else(|| "0".into())),
        None => at(field),
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
async fn update(
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

#[allow(clippy::too_many_arguments)]
async fn patch(
    app: &Arc<App>,
    t: &Target,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
    query: &Query,
    status_path: bool,
    opts: &WriteOptions,
) -> Result<Response, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
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

async fn delete(
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

async fn delete_collection(
    app: &Arc<App>,
    t: &Target,
    query: &Query,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let opts = delete_options(query, body)?;
    let (labels, fields) = selectors(t, query)?;
    let ns = (t.namespaced_url && t.r.namespaced).then_some(t.namespace.as_str());
    let items = {
        let st = app.store.lock();
        let keep = |o: &Value| labels.matches_object(o) && fields.matches(&|f| field_value(o, f));
        st.list_page(&t.r, ns, None, None, &keep).0
    };
    let mut deleted = Vec::new();
    for item in items {
        let name = meta_str(&item, "name").unwrap_or_default().to_string();
        let item_ns = meta_str(&item, "namespace").unwrap_or_default().to_string();
        if delete_one(app, &t.r, &item_ns, &name, &opts, None, None)
            .await
            .is_ok()
        {
            deleted.push((*item).clone());
        }
    }
    let rv = app.store.lock().resource_version();
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": format!("{}List", t.r.kind), "apiVersion": t.r.api_version(), "metadata": {"resourceVersion": rv.to_string()}, "items": deleted}),
    ))
}

/// Starts a watch stream.
fn watch(
    app: &Arc<App>,
    t: &Target,
    query: &Query,
    presentation: negotiate::Presentation,
) -> Result<Response, ApiError> {
    if query.get("sendInitialEvents").is_some_and(|v| v == "true") {
        return Err(ApiError::not_implemented(
            "the emulator does not emulate streaming lists (sendInitialEvents); list, then watch from the list's resourceVersion",
        ));
    }
    let (labels, fields) = selectors(t, query)?;
    let mut timeout = query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    if let Some(drop_after) = app.faults.watch_drop() {
        timeout = timeout.min(drop_after);
    }
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let start_rv = query
        .get("resourceVersion")
        .filter(|s| !s.is_empty() && *s != "0")
        .cloned();
    let ns = (t.namespaced_url && t.r.namespaced).then(|| t.namespace.clone());
    let key = t.r.key();
    let r = t.r.clone();

    // Initial events and the live subscription, taken under one lock so nothing falls between.
    let (initial, mut rx, mut last_rv) = {
        let st = app.store.lock();
        let rx = app.store.subscribe();
        let current = st.resource_version();
        let initial: Vec<Event> = match &start_rv {
            None => {
                let objs = st.objects_of(&key, ns.as_deref());
                objs.into_iter()
                    .filter(|o| labels.matches_object(o) && fields.matches(&|f| field_value(o, f)))
                    .map(|o| ("ADDED", o))
                    .collect()
            }
            Some(rv) => {
                let rv: u64 = rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {rv}"))
                })?;
                let history = if app.faults.take_expiry(&key) {
                    Err(st.resource_version())
                } else {
                    st.events_since(&key, rv)
                };
                match history {
                    Ok(events) => events
                        .iter()
                        .filter(|e| ns.as_deref().is_none_or(|n| e.namespace == n))
                        .filter_map(|e| selected_event(e, &labels, &fields))
                        .collect(),
                    Err(oldest) => {
                        let status =
                            ApiError::gone(format!("too old resource version: {rv} ({oldest})"))
                                .to_status();
                        vec![("ERROR", Arc::new(status))]
                    }
                }
            }
        };
        (initial, rx, current)
    };
    let expired = initial.iter().any(|(kind, _)| *kind == "ERROR");
    let stream = async_stream(move |tx| async move {
        for e in initial {
            if tx.send(e).await.is_err() {
                return;
            }
        }
        if expired {
            return;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut bookmark_tick = tokio::time::interval(Duration::from_secs(1));
        bookmark_tick.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = bookmark_tick.tick(), if bookmarks => {
                    let bm = ("BOOKMARK", Arc::new(json!({
                        "kind": r.kind, "apiVersion": r.api_version(),
                        "metadata": {"resourceVersion": last_rv.to_string()}
                    })));
                    if tx.send(bm).await.is_err() { return; }
                }
                ev = rx.recv() => match ev {
                    Ok(ev) => {
                        last_rv = last_rv.max(ev.rv);
                        if ev.resource != key || ns.as_deref().is_some_and(|n| ev.namespace != n) {
                            continue;
                        }
                        if let Some(j) = selected_event(&ev, &labels, &fields)
                            && tx.send(j).await.is_err()
                        {
                            return;
                        }
                    }
                    // A watcher too slow for the event rate is closed; the client re-watches.
                    Err(_) => return,
                }
            }
        }
    });
    // Each event object as negotiated (`kubectl get -w` asks for Tables: a one-row Table per
    // event, the first one with the column definitions); a watch whose objects cannot be
    // transformed ends, as the API server's does.
    let mut first = true;
    let body = Body::from_stream(
        stream
            .map(move |(kind, object)| presentation.watch_event(kind, object, &mut first))
            .take_while(|v| futures::future::ready(v.is_some()))
            .map(|v| {
                let mut line = v
                    .map(|(kind, object)| crate::wire::event_to_vec(kind, &object))
                    .unwrap_or_default();
                line.push(b'\n');
                Ok::<_, std::convert::Infallible>(Bytes::from(line))
            }),
    );
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(body)
        .unwrap_or_else(|_| error_response(&ApiError::internal("watch response"))))
}

/// A watch event for a selector-filtered watcher: objects moving into the selection are ADDED,
/// moving out are DELETED (as the API server's watch cache does).
fn selected_event(e: &WatchEvent, labels: &LabelSelector, fields: &FieldSelector) -> Option<Event> {
    let matches = |o: &Value| labels.matches_object(o) && fields.matches(&|f| field_value(o, f));
    let now = matches(&e.object);
    let before = e.old.as_deref().is_some_and(matches);
    let kind = match e.kind {
        EventType::Added if now => "ADDED",
        EventType::Modified if now && before => "MODIFIED",
        EventType::Modified if now => "ADDED",
        EventType::Modified if before => "DELETED",
        EventType::Deleted if before || now => "DELETED",
        _ => return None,
    };
    Some((kind, e.object.clone()))
}

/// A stream fed by a spawned task through a channel.
fn async_stream<T, F, Fut>(f: F) -> impl futures::Stream<Item = T>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(f(tx));
    tokio_stream_from(rx)
}

fn tokio_stream_from<T>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
