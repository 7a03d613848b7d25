//! The HTTP layer: URL routing and dispatch of every request to its handler, content
//! negotiation (JSON, YAML, Tables). The handlers: [`crate::list`] (list, watch),
//! [`crate::write`] (create, update, patch, delete), [`crate::subresources`], discovery.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::list::{list, watch};
use crate::ops::WriteOptions;
use crate::registry::ResourceInfo;
use crate::request::{Query, Target, decode_body, error_response, json_response};
use crate::state::App;
use crate::status::ApiError;
use crate::write::{as_stored, create, delete, delete_collection, patch, update};
use crate::{discovery, negotiate};

/// Request body limit, as the API server's.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Entry point for every request.
pub async fn handle(app: Arc<App>, req: Request<Body>) -> Response {
    let _in_flight = app.stats.begin();
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
                .get_stored(&t.r, &t.namespace, name)
                .ok_or_else(|| ApiError::not_found(&t.r, name))?;
            // The object's text as stored, as `json_response` would write it.
            let mut body = Vec::with_capacity(obj.json().len() + 1);
            body.extend_from_slice(obj.json().as_bytes());
            body.push(b'\n');
            Ok(crate::request::raw_json_response(StatusCode::OK, body))
        }
        ("POST", None) => {
            let opts = WriteOptions::of(query, headers)?;
            let obj = as_stored(t, decode_body(headers, &body)?)?;
            create(app, t, obj, &opts).await
        }
        ("PUT", Some(name)) => {
            let opts = WriteOptions::of(query, headers)?;
            let obj = as_stored(t, decode_body(headers, &body)?)?;
            update(app, t, name, obj, status_path, &opts).await
        }
        ("PATCH", Some(name)) => {
            let opts = WriteOptions::of(query, headers)?;
            patch(app, t, name, headers, &body, query, status_path, &opts).await
        }
        ("DELETE", Some(name)) => delete(app, t, name, query, &body).await,
        ("DELETE", None) => delete_collection(app, t, query, &body).await,
        (m, _) => Err(ApiError::method_not_allowed(m)),
    }
}
