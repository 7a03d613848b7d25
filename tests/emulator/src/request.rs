//! A request as every handler sees it: the resource it addresses ([`Target`]), its query, its
//! body decoded (JSON, YAML, protobuf), the events a watch answers with, and a JSON answer.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::registry::ResourceInfo;
use crate::status::ApiError;

/// The query parameters of a request, by name.
pub type Query = HashMap<String, String>;

/// A resolved resource request.
pub struct Target {
    /// The stored resource.
    pub r: Arc<ResourceInfo>,
    /// The resource as addressed, when it is another view of the stored one (events.k8s.io
    /// Events of core Events).
    pub view: Option<Arc<ResourceInfo>>,
    /// Namespace from the URL ("" for cluster-scoped or all-namespaces requests).
    pub namespace: String,
    /// Whether the URL named a namespace.
    pub namespaced_url: bool,
    pub name: Option<String>,
    pub sub: Option<String>,
}

/// Decodes a YAML document. JSON is YAML, and what clients send as YAML (kubectl's and kube's
/// apply patches) is most often JSON: a body that is an object in JSON text is decoded by the JSON
/// parser (the same value, several times faster); anything else by the YAML parser.
pub fn from_yaml(body: &[u8]) -> Result<Value, serde_yaml_ng::Error> {
    if body.trim_ascii_start().starts_with(b"{")
        && let Ok(value) = serde_json::from_slice(body)
    {
        return Ok(value);
    }
    serde_yaml_ng::from_slice(body)
}

/// Decodes a JSON, YAML or protobuf request body.
pub fn decode_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("application/json");
    if ct.starts_with("application/yaml") || ct.contains("+yaml") {
        return from_yaml(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    if ct.starts_with("application/vnd.kubernetes.protobuf") {
        return crate::protobuf::decode(body).map_err(|e| {
            if e.starts_with("the emulator decodes protobuf only") {
                ApiError::unsupported_media_type(e)
            } else {
                ApiError::bad_request(format!("error decoding protobuf: {e}"))
            }
        });
    }
    if ct.contains("cbor") {
        return Err(ApiError::unsupported_media_type(format!(
            "the emulator does not decode {ct}; send application/json"
        )));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

/// A watch event as negotiated: its type and object (a status, a bookmark, or a stored object
/// transformed for the watcher's presentation).
pub(crate) type Event = (&'static str, Arc<Value>);

/// A JSON answer, its members in the API server's order ([`crate::wire`]).
pub fn json_response(code: StatusCode, v: &Value) -> Response {
    let body = crate::wire::to_vec(v);
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A JSON answer already written in the API server's form (a stored object's text, a list of
/// them), ended by a newline.
pub fn raw_json_response(code: StatusCode, body: Vec<u8>) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// An error answer: its Status as JSON, with its code.
pub fn error_response(e: &ApiError) -> Response {
    json_response(
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.to_status(),
    )
}

/// The media type of a request's `Content-Type` (parameters left out; empty when absent).
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

/// The request's `User-Agent` ("" without one).
pub fn user_agent(headers: &HeaderMap) -> String {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}
