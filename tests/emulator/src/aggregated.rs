//! Aggregated discovery (`apidiscovery.k8s.io/v2` and `v2beta1` `APIGroupDiscoveryList` on
//! `/api` and `/apis`), as kubectl 1.32 asks for it first: every group, version and resource in
//! one document (apiserver `pkg/endpoints/discovery/aggregated`, types in
//! `k8s.io/api/apidiscovery/v2`). The legacy documents stay for clients that ask for them.
//!
//! The subresources listed in both forms of discovery come from [`crate::discovery::SUBRESOURCES`].

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::negotiate::{Output, Transform};
use crate::registry::{Registry, ResourceInfo};
use crate::state::App;

fn resource_entry(r: &ResourceInfo) -> Value {
    let mut e = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": crate::kinds::verbs(r),
    });
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    let categories = crate::discovery::categories(r);
    if !categories.is_empty() {
        e["categories"] = json!(categories);
    }
    let subs: Vec<Value> = crate::discovery::SUBRESOURCES
        .iter()
        .filter(|s| (s.applies)(r))
        .map(|s| {
            let (group, version, kind) = (s.response_kind)(r);
            json!({
                "subresource": s.name,
                "responseKind": {"group": group, "version": version, "kind": kind},
                "verbs": s.verbs,
            })
        })
        .collect();
    if !subs.is_empty() {
        e["subresources"] = Value::Array(subs);
    }
    e
}

fn group_entry(reg: &Registry, group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = reg
                .group_version(group, v)
                .iter()
                .map(|r| resource_entry(r))
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let mut metadata = json!({"creationTimestamp": null});
    if !group.is_empty() {
        metadata["name"] = json!(group);
    }
    json!({"metadata": metadata, "versions": versions})
}

/// The `APIGroupDiscoveryList` of `/api` (`core`) or `/apis`.
pub fn document(reg: &Registry, core: bool, version: &str) -> Value {
    let items: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, vs)| group_entry(reg, g, vs))
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// Answers `/api` and `/apis` when aggregated discovery was negotiated; `None` otherwise (the
/// legacy documents answer).
pub fn serve(app: &Arc<App>, segs: &[&str], out: &Output) -> Option<Response> {
    let Transform::Discovery(version) = out.transform else {
        return None;
    };
    let core = match segs {
        ["api"] => true,
        ["apis"] => false,
        _ => return None,
    };
    let doc = {
        let st = app.store.lock();
        document(&st.registry, core, version)
    };
    let body = crate::negotiate::body(&doc, out.format);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    let etag = format!("\"{:016X}\"", hasher.finish());
    let content_type = match out.format {
        crate::negotiate::Format::Json => "application/json",
        crate::negotiate::Format::Yaml => "application/yaml",
    };
    let mut resp = (StatusCode::OK, body).into_response();
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{content_type};g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
    )) {
        headers.insert(header::CONTENT_TYPE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    Some(resp)
}
