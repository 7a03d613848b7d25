//! Discovery (`/version`, `/api`, `/apis`, group versions) and OpenAPI v3 documents.
//!
//! kubectl 1.32 with default validation reads `/openapi/v3` and the group-version document; when
//! the kind's POST and PATCH operations carry `x-kubernetes-group-version-kind` and a
//! `fieldValidation` parameter, it relies on server-side field validation. The component schemas
//! make `kubectl explain` work.

use std::hash::{Hash, Hasher};

use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceInfo};
use crate::status::ApiError;

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0",
        "gitCommit": "emulated",
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T00:00:00Z",
        "goVersion": "go1.23.3",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs[0]})
}

/// `/apis`.
pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`.
pub fn api_group(reg: &Registry, group: &str) -> Result<Value, ApiError> {
    let groups = reg.groups();
    let vs = groups.get(group).ok_or_else(ApiError::no_route)?;
    let mut g = group_entry(group, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Ok(g)
}

/// Categories a resource belongs to: `all` for the built-in workload kinds kubectl lists,
/// `api-extensions` for the kinds that extend the API (as their REST storages declare).
pub fn categories(r: &ResourceInfo) -> Vec<String> {
    let mut categories = r.categories.clone();
    if r.is_builtin()
        && matches!(
            r.kind.as_str(),
            "Pod"
                | "Service"
                | "StatefulSet"
                | "Deployment"
                | "ReplicaSet"
                | "DaemonSet"
                | "ReplicationController"
                | "Job"
                | "CronJob"
        )
    {
        categories.push("all".into());
    }
    if r.is_builtin()
        && matches!(
            r.kind.as_str(),
            "CustomResourceDefinition"
                | "MutatingWebhookConfiguration"
                | "ValidatingWebhookConfiguration"
        )
    {
        categories.push("api-extensions".into());
    }
    categories
}

/// `/api/v1`, `/apis/{group}/{version}`.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Result<Value, ApiError> {
    let resources = reg.group_version(group, version);
    if resources.is_empty() {
        return Err(ApiError::no_route());
    }
    let mut out = Vec::new();
    for r in &resources {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": crate::kinds::verbs(r),
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        let categories = categories(r);
        if !categories.is_empty() {
            entry["categories"] = json!(categories);
        }
        out.push(entry);
        for sub in SUBRESOURCES.iter().filter(|s| (s.applies)(r)) {
            let (group, version, kind) = (sub.response_kind)(r);
            let mut e = json!({
                "name": format!("{}/{}", r.plural, sub.name),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": sub.verbs,
            });
            if group != r.group || version != r.version {
                e["group"] = json!(group);
                e["version"] = json!(version);
            }
            out.push(e);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}))
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of group-version documents.
pub fn openapi_index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, versions) in reg.groups() {
        for v in versions {
            let p = gv_path(&group, &v);
            let hash = openapi_doc(reg, &p)
                .map(|d| {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    d.to_string().hash(&mut h);
                    format!("{:016X}", h.finish())
                })
                .unwrap_or_default();
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
            );
        }
    }
    json!({"paths": paths})
}

/// The OpenAPI name of a custom resource schema: the group reversed, version, kind.
fn custom_schema_name(r: &ResourceInfo) -> String {
    let reversed: Vec<&str> = r.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), r.version, r.kind)
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// `/openapi/v3/{api/v1 | apis/G/V}`.
pub fn openapi_doc(reg: &Registry, gv: &str) -> Result<Value, ApiError> {
    let parts: Vec<&str> = gv.split('/').collect();
    let (group, version) = match parts.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return Err(ApiError::no_route()),
    };
    let resources = reg.group_version(group, version);
    if resources.is_empty() {
        return Err(ApiError::no_route());
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for r in &resources {
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let schema_name = match &r.custom {
            Some(c) => {
                let name = custom_schema_name(r);
                let mut s = c.schema.clone();
                if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
                    props.insert(
                        "metadata".into(),
                        json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "description": "Standard object's metadata."}),
                    );
                }
                s["x-kubernetes-group-version-kind"] = json!([gvk]);
                schemas.insert(name.clone(), s);
                add_builtin_defs::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(
                    &mut schemas,
                );
                name
            }
            None => match crate::builtin::kind_schema(&r.group, &r.kind) {
                Some(ks) => {
                    let mut root = rewrite_refs(ks.root.clone());
                    if let Some(o) = root.as_object_mut() {
                        o.remove("$schema");
                        o.remove("title");
                    }
                    root["x-kubernetes-group-version-kind"] = json!([gvk]);
                    for (k, v) in &ks.defs {
                        schemas
                            .entry(k.clone())
                            .or_insert_with(|| rewrite_refs(v.clone()));
                    }
                    let full = builtin_schema_name(r);
                    schemas.insert(full.clone(), root);
                    full
                }
                None => continue,
            },
        };
        let reference = json!({"$ref": format!("#/components/schemas/{schema_name}")});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ]);
        let op = |action: &str, id: &str| {
            json!({
                "operationId": format!("{id}{}", r.kind),
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "requestBody": {"content": {"application/json": {"schema": reference}}},
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
            })
        };
        let base = if r.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(group, version),
                r.plural
            )
        } else {
            format!("/{}/{}", gv_path(group, version), r.plural)
        };
        paths.insert(
            base.clone(),
            json!({"post": op("post", "create"), "get": op("list", "list")}),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({"get": op("get", "read"), "put": op("put", "replace"), "patch": op("patch", "patch"), "delete": op("delete", "delete")}),
        );
        if r.status_subresource {
            paths.insert(
                format!("{base}/{{name}}/status"),
                json!({"get": op("get", "readStatus"), "put": op("put", "replaceStatus"), "patch": op("patch", "patchStatus")}),
            );
        }
    }
    Ok(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn builtin_schema_name(r: &ResourceInfo) -> String {
    let group = match r.group.as_str() {
        "" => "core".to_string(),
        "apiextensions.k8s.io" => {
            return format!(
                "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{}.{}",
                r.version, r.kind
            );
        }
        g => g.trim_end_matches(".k8s.io").to_string(),
    };
    format!("io.k8s.api.{group}.{}.{}", r.version, r.kind)
}

fn add_builtin_defs<T: schemars::JsonSchema>(schemas: &mut Map<String, Value>) {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    let mut root = schema.to_value();
    let defs = root.as_object_mut().and_then(|o| o.remove("$defs"));
    if let Some(Value::Object(defs)) = defs {
        for (k, v) in defs {
            schemas.entry(k).or_insert_with(|| rewrite_refs(v));
        }
    }
    if let Some(o) = root.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    schemas
        .entry(T::schema_name().to_string())
        .or_insert_with(|| rewrite_refs(root));
}

/// Rewrites JSON Schema `#/$defs/X` references to OpenAPI `#/components/schemas/X`.
fn rewrite_refs(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get_mut("$ref")
                    && let Some(rest) = r.strip_prefix("#/$defs/")
                {
                    *r = format!("#/components/schemas/{rest}");
                }
                for child in o.values_mut() {
                    walk(child);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

/// A subresource as discovery lists it.
pub struct Subresource {
    pub name: &'static str,
    /// Whether a resource has it.
    pub applies: fn(&ResourceInfo) -> bool,
    /// (group, version, kind) of its request and response bodies.
    pub response_kind: fn(&ResourceInfo) -> (String, String, String),
    pub verbs: &'static [&'static str],
}

fn own_kind(r: &ResourceInfo) -> (String, String, String) {
    (r.group.clone(), r.version.clone(), r.kind.clone())
}

/// The subresources discovery lists, one row each.
pub const SUBRESOURCES: &[Subresource] = &[
    Subresource {
        name: "approval",
        applies: crate::kinds::has_approval,
        response_kind: own_kind,
        verbs: &["get", "patch", "update"],
    },
    Subresource {
        name: "eviction",
        applies: crate::kinds::has_eviction,
        response_kind: |_| ("policy".into(), "v1".into(), "Eviction".into()),
        verbs: &["create"],
    },
    Subresource {
        name: "scale",
        applies: crate::kinds::has_scale,
        response_kind: |_| ("autoscaling".into(), "v1".into(), "Scale".into()),
        verbs: &["get", "patch", "update"],
    },
    Subresource {
        name: "status",
        applies: |r| r.status_subresource,
        response_kind: own_kind,
        verbs: &["get", "patch", "update"],
    },
    Subresource {
        name: "token",
        applies: crate::kinds::has_token,
        response_kind: |_| {
            (
                "authentication.k8s.io".into(),
                "v1".into(),
                "TokenRequest".into(),
            )
        },
        verbs: &["create"],
    },
];
