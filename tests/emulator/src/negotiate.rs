//! Content negotiation, in one place, as the API server does it (apimachinery
//! `endpoints/handlers/negotiation`): the `Accept` header is parsed into media ranges with
//! parameters and q-values (goautoneg: higher q first, then specific types before wildcards),
//! and the first clause the endpoint can serve wins. `as=`, `g=` and `v=` ask for a
//! transformation (`meta.k8s.io/v1` Table, PartialObjectMetadata, PartialObjectMetadataList on
//! resource endpoints; `apidiscovery.k8s.io` APIGroupDiscoveryList on `/api` and `/apis`); a
//! clause asking for one the endpoint does not serve is skipped. When no clause is acceptable,
//! the answer is 406 NotAcceptable.
//!
//! Responses are rendered here too: [`render`] turns the plain object (or list) a handler
//! produced into what was negotiated, and [`render_event`] does the same per watch event.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::registry::ResourceInfo;
use crate::status::ApiError;

/// One clause of an `Accept` header.
#[derive(Clone, Debug, PartialEq)]
pub struct Clause {
    pub typ: String,
    pub subtype: String,
    pub params: Vec<(String, String)>,
    pub q: f32,
}

impl Clause {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses an `Accept` header like goautoneg's `ParseAccept`: clauses sorted by q-value, then
/// specific types and subtypes before wildcards, otherwise in header order.
pub fn parse_accept(header: &str) -> Vec<Clause> {
    let mut out = Vec::new();
    for part in header.split(',') {
        let mut pieces = part.trim().split(';');
        let range = pieces.next().unwrap_or("").trim();
        let mut sp = range.split('/');
        let typ = sp.next().unwrap_or("").trim().to_string();
        let subtype = match (sp.next(), sp.next()) {
            (None, _) if typ == "*" => "*".to_string(),
            (Some(s), None) => s.trim().to_string(),
            _ => continue,
        };
        if typ.is_empty() {
            continue;
        }
        let mut clause = Clause {
            typ,
            subtype,
            params: Vec::new(),
            q: 1.0,
        };
        for p in pieces {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let k = k.trim();
            if k == "q" {
                clause.q = v.trim().parse().unwrap_or(0.0);
            } else {
                clause.params.push((k.to_string(), v.trim().to_string()));
            }
        }
        out.push(clause);
    }
    let rank = |c: &Clause| (c.typ == "*", c.subtype == "*");
    out.sort_by(|a, b| {
        b.q.partial_cmp(&a.q)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| rank(a).cmp(&rank(b)))
    });
    out
}

/// The serialization of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Yaml => "application/yaml",
        }
    }
}

/// A transformation asked for with `as=`, `g=`, `v=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transform {
    /// The object as stored (in the requested group version).
    None,
    /// `meta.k8s.io/v1` (or v1beta1) Table.
    Table,
    /// `meta.k8s.io/v1` PartialObjectMetadata.
    Metadata,
    /// `meta.k8s.io/v1` PartialObjectMetadataList.
    MetadataList,
    /// `apidiscovery.k8s.io/v2` (or v2beta1) APIGroupDiscoveryList.
    Discovery(&'static str),
}

/// What was negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Output {
    pub format: Format,
    pub transform: Transform,
    /// The `meta.k8s.io` version of a Table or PartialObjectMetadata answer.
    pub meta_version: &'static str,
}

impl Output {
    pub const JSON: Output = Output {
        format: Format::Json,
        transform: Transform::None,
        meta_version: "v1",
    };

    /// Whether the handler's plain JSON answer is sent unchanged.
    pub fn is_plain(&self) -> bool {
        *self == Output::JSON
    }
}

/// Which transformations an endpoint serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A resource collection or object: Table and PartialObjectMetadata(List).
    Resource,
    /// A watch: as Resource, JSON only (YAML has no stream framing).
    Watch,
    /// `/api`, `/apis`: the aggregated discovery document.
    Discovery,
    /// Other documents: no transformation.
    Plain,
}

/// The media types the emulator serves, in the order `*/*` picks them.
const SERVED: &[(&str, &str, Format)] = &[
    ("application", "json", Format::Json),
    ("application", "yaml", Format::Yaml),
];

fn not_acceptable(endpoint: Endpoint) -> ApiError {
    let types = if endpoint == Endpoint::Watch {
        "application/json"
    } else {
        "application/json, application/yaml"
    };
    ApiError::new(
        406,
        "NotAcceptable",
        format!("only the following media types are accepted: {types}"),
    )
}

/// Negotiates the response of `endpoint` for an `Accept` header.
pub fn negotiate(accept: Option<&str>, endpoint: Endpoint) -> Result<Output, ApiError> {
    let accept = accept.map(str::trim).unwrap_or("");
    if accept.is_empty() {
        return Ok(Output::JSON);
    }
    for clause in parse_accept(accept) {
        for &(typ, subtype, format) in SERVED {
            if endpoint == Endpoint::Watch && format != Format::Json {
                continue;
            }
            let matches = (clause.typ == typ
                && (clause.subtype == subtype || clause.subtype == "*"))
                || (clause.typ == "*" && clause.subtype == "*");
            if !matches {
                continue;
            }
            if let Some(out) = accept_clause(&clause, format, endpoint) {
                return Ok(out);
            }
        }
    }
    Err(not_acceptable(endpoint))
}

fn accept_clause(clause: &Clause, format: Format, endpoint: Endpoint) -> Option<Output> {
    if let Some(stream) = clause.param("stream")
        && !stream.is_empty()
        && !(endpoint == Endpoint::Watch && stream == "watch")
    {
        return None;
    }
    let (kind, group, version) = (clause.param("as"), clause.param("g"), clause.param("v"));
    let mut out = Output {
        format,
        transform: Transform::None,
        meta_version: "v1",
    };
    if kind.is_none() && group.is_none() && version.is_none() {
        return Some(out);
    }
    let (kind, group, version) = (
        kind.unwrap_or(""),
        group.unwrap_or(""),
        version.unwrap_or(""),
    );
    match endpoint {
        Endpoint::Resource | Endpoint::Watch => {
            if group != "meta.k8s.io" {
                return None;
            }
            out.meta_version = match version {
                "v1" => "v1",
                "v1beta1" => "v1beta1",
                _ => return None,
            };
            out.transform = match kind {
                "Table" => Transform::Table,
                "PartialObjectMetadata" => Transform::Metadata,
                "PartialObjectMetadataList" => Transform::MetadataList,
                _ => return None,
            };
        }
        Endpoint::Discovery => {
            if group != "apidiscovery.k8s.io" || kind != "APIGroupDiscoveryList" {
                return None;
            }
            out.transform = match version {
                "v2" => Transform::Discovery("v2"),
                "v2beta1" => Transform::Discovery("v2beta1"),
                _ => return None,
            };
        }
        Endpoint::Plain => return None,
    }
    Some(out)
}

/// How a response object is presented: the negotiated output, the resource as addressed
/// (which may be another view of the stored resource, such as `events.k8s.io` Events of core
/// Events), and the Table `includeObject` option.
#[derive(Clone)]
pub struct Presentation {
    pub output: Output,
    /// The stored resource.
    pub stored: Arc<ResourceInfo>,
    /// The resource as addressed when it differs from the stored one.
    pub view: Option<Arc<ResourceInfo>>,
    pub include_object: String,
}

impl Presentation {
    /// Whether the handler's answer goes out unchanged.
    pub fn is_identity(&self) -> bool {
        self.output.is_plain() && self.view.is_none()
    }

    /// Transforms a handler's plain answer (an object, a list or a Status).
    pub fn transform(&self, v: Value) -> Result<Value, ApiError> {
        if v["kind"] == "Status" && v["apiVersion"] == "v1" {
            return Ok(v);
        }
        let is_list =
            v["items"].is_array() && v["kind"].as_str().is_some_and(|k| k.ends_with("List"));
        let meta_av = format!("meta.k8s.io/{}", self.output.meta_version);
        match self.output.transform {
            Transform::None | Transform::Discovery(_) => Ok(self.convert(v, is_list)),
            Transform::Table => {
                let rv = v["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let items: Vec<Arc<Value>> = if is_list {
                    let mut v = v;
                    match v["items"].take() {
                        Value::Array(items) => items.into_iter().map(Arc::new).collect(),
                        _ => Vec::new(),
                    }
                } else {
                    vec![Arc::new(v)]
                };
                let mut t = crate::table::to_table(&self.stored, &items, rv, &self.include_object);
                t["apiVersion"] = json!(meta_av);
                Ok(t)
            }
            Transform::Metadata => {
                if is_list {
                    return Err(ApiError::new(
                        406,
                        "NotAcceptable",
                        format!(
                            "you requested PartialObjectMetadata, but the requested object is a list ({})",
                            go_type(&self.stored, true)
                        ),
                    ));
                }
                Ok(partial(&v, &meta_av))
            }
            Transform::MetadataList => {
                if !is_list {
                    return Err(ApiError::new(
                        406,
                        "NotAcceptable",
                        format!(
                            "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
                            go_type(&self.stored, false)
                        ),
                    ));
                }
                let items: Vec<Value> = v["items"]
                    .as_array()
                    .map(|items| items.iter().map(|o| partial(o, &meta_av)).collect())
                    .unwrap_or_default();
                let mut metadata = json!({"resourceVersion": v["metadata"]["resourceVersion"]});
                if let Some(c) = v["metadata"]["continue"].as_str() {
                    metadata["continue"] = json!(c);
                }
                Ok(json!({
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": meta_av,
                    "metadata": metadata,
                    "items": items,
                }))
            }
        }
    }

    /// The object (or list) in the addressed resource's form.
    fn convert(&self, v: Value, is_list: bool) -> Value {
        let Some(view) = &self.view else {
            return v;
        };
        if is_list {
            let mut v = v;
            v["kind"] = json!(format!("{}List", view.kind));
            v["apiVersion"] = json!(view.api_version());
            if let Some(items) = v["items"].as_array_mut() {
                for item in items {
                    *item = crate::events::from_core(item);
                }
            }
            return v;
        }
        crate::events::from_core(&v)
    }

    /// One watch event (type and object) as negotiated; `first` is true for the first
    /// object-carrying event (a Table watch sends the column definitions only then). `None`
    /// when the object cannot be transformed: the API server then ends the watch.
    pub fn watch_event(
        &self,
        kind: &'static str,
        object: Arc<Value>,
        first: &mut bool,
    ) -> Option<crate::request::Event> {
        if self.is_identity() || kind == "ERROR" {
            return Some((kind, object));
        }
        let bookmark = kind == "BOOKMARK";
        let meta_av = format!("meta.k8s.io/{}", self.output.meta_version);
        let transformed = match self.output.transform {
            Transform::Table if !bookmark => {
                let rv = object["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let mut t = crate::table::to_table(
                    &self.stored,
                    std::slice::from_ref(&object),
                    rv,
                    &self.include_object,
                );
                t["apiVersion"] = json!(meta_av);
                if !*first {
                    t["columnDefinitions"] = json!([]);
                }
                *first = false;
                t
            }
            Transform::Table => {
                json!({"kind": "Table", "apiVersion": meta_av, "metadata": object["metadata"], "columnDefinitions": [], "rows": []})
            }
            Transform::Metadata => partial(&object, &meta_av),
            Transform::MetadataList => return None,
            Transform::None | Transform::Discovery(_) => {
                self.convert(Arc::unwrap_or_clone(object), false)
            }
        };
        Some((kind, Arc::new(transformed)))
    }
}

/// The Go type the API server names in its not-a-list / is-a-list errors.
fn go_type(r: &ResourceInfo, list: bool) -> String {
    let suffix = if list { "List" } else { "" };
    if r.is_builtin() {
        let pkg = if r.group.is_empty() {
            "core"
        } else {
            r.group.split('.').next().unwrap_or("api")
        };
        format!("*{pkg}.{}{suffix}", r.kind)
    } else {
        format!("*unstructured.Unstructured{suffix}")
    }
}

/// `PartialObjectMetadata` of an object.
fn partial(o: &Value, api_version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": api_version,
        "metadata": o["metadata"],
    })
}

/// Serializes a value in the negotiated format.
pub fn body(v: &Value, format: Format) -> Vec<u8> {
    match format {
        Format::Json => crate::wire::to_vec(v),
        Format::Yaml => serde_yaml_ng::to_string(v).unwrap_or_default().into_bytes(),
    }
}

/// Renders a handler's response as negotiated. Error responses go out unchanged.
pub async fn render(resp: Response, p: &Presentation) -> Response {
    if p.is_identity() || !resp.status().is_success() {
        return resp;
    }
    let (mut parts, b) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(b, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let (format, v) = match p.transform(v) {
        Ok(v) => (p.output.format, v),
        Err(e) => {
            parts.status = StatusCode::from_u16(e.code).unwrap_or(StatusCode::NOT_ACCEPTABLE);
            (Format::Json, e.to_status())
        }
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(Bytes::from(body(&v, format))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_clauses_sort_by_q_then_specificity() {
        let c =
            parse_accept("*/*;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io, application/*");
        assert_eq!(c[0].param("as"), Some("Table"));
        assert_eq!(
            (c[1].typ.as_str(), c[1].subtype.as_str()),
            ("application", "*")
        );
        assert_eq!(c[2].typ, "*");
    }

    #[test]
    fn kubectl_get_negotiates_a_table() {
        let out = negotiate(
            Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"),
            Endpoint::Resource,
        )
        .unwrap();
        assert_eq!(out.transform, Transform::Table);
    }

    #[test]
    fn unserved_transformations_fall_through_or_406() {
        let out = negotiate(
            Some("application/json;as=Foo;g=meta.k8s.io;v=v1, application/json"),
            Endpoint::Resource,
        )
        .unwrap();
        assert!(out.is_plain());
        let e = negotiate(
            Some("application/json;as=Foo;g=meta.k8s.io;v=v1"),
            Endpoint::Resource,
        )
        .unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (406, "NotAcceptable"));
        let e = negotiate(
            Some("application/vnd.kubernetes.protobuf"),
            Endpoint::Resource,
        )
        .unwrap_err();
        assert_eq!(e.code, 406);
        assert!(
            negotiate(
                Some("application/vnd.kubernetes.protobuf, */*"),
                Endpoint::Resource
            )
            .unwrap()
            .is_plain()
        );
        assert_eq!(
            negotiate(Some("application/yaml"), Endpoint::Resource)
                .unwrap()
                .format,
            Format::Yaml
        );
        assert!(negotiate(Some("application/yaml"), Endpoint::Watch).is_err());
    }

    #[test]
    fn discovery_transformations() {
        let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            negotiate(Some(aggregated), Endpoint::Discovery)
                .unwrap()
                .transform,
            Transform::Discovery("v2")
        );
        assert!(
            negotiate(
                Some("application/json;as=Table;g=meta.k8s.io;v=v1"),
                Endpoint::Discovery
            )
            .is_err()
        );
        assert!(
            negotiate(
                Some("application/json;as=Table;g=meta.k8s.io;v=v1"),
                Endpoint::Plain
            )
            .is_err()
        );
    }
}
