//! The HTTPS webhook server: decodes an AdmissionReview, calls the pure handler, encodes the
//! answer. Client mistakes get a 4xx with a reason (400 malformed, 413 too large, 404 unknown
//! path, 405 wrong method), never a 500 or a panic.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::{DynamicObject, TypeMeta};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::SiteObject;
use crate::config::live::Live;
use crate::metrics::WebhookMetrics;

/// Largest accepted request body. The API server sends at most two objects of up to 3 MiB each
/// (object and oldObject) plus the envelope.
pub const BODY_LIMIT: usize = 7 * 1024 * 1024;
/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The webhook paths.
pub const MUTATE_SITES: &str = "/mutate-sites";
pub const VALIDATE_SITES: &str = "/validate-sites";
pub const VALIDATE_CONFIG: &str = "/validate-config";

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct WebhookState {
    /// The configuration in force (replaced when `sites-config` changes).
    pub config: Live,
    pub metrics: WebhookMetrics,
    /// Reserved names and the Site directory (see [`super::Platform`]).
    pub platform: Arc<super::Platform>,
}

/// The webhook routes.
pub fn router(state: WebhookState) -> Router {
    let metrics = state.metrics.clone();
    Router::new()
        .route(MUTATE_SITES, post(mutate_sites))
        .route(VALIDATE_SITES, post(validate_sites))
        .route(VALIDATE_CONFIG, post(validate_config))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: the webhooks are POST /mutate-sites, /validate-sites, /validate-config\n") })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(metrics, observe))
        .with_state(state)
}

/// Counts requests, in-flight requests and latency per webhook path.
async fn observe(State(metrics): State<WebhookMetrics>, req: Request, next: Next) -> Response {
    let webhook: &'static str = match req.uri().path() {
        MUTATE_SITES => MUTATE_SITES,
        VALIDATE_SITES => VALIDATE_SITES,
        VALIDATE_CONFIG => VALIDATE_CONFIG,
        _ => return next.run(req).await,
    };
    let in_flight = metrics.in_flight.with_label_values(&[webhook]);
    in_flight.inc();
    let started = Instant::now();
    let response = next.run(req).await;
    metrics
        .latency
        .with_label_values(&[webhook])
        .observe(started.elapsed().as_secs_f64());
    metrics
        .requests
        .with_label_values(&[webhook, response.status().as_str()])
        .inc();
    in_flight.dec();
    response
}

fn bad_request(reason: String) -> Response {
    (StatusCode::BAD_REQUEST, reason + "\n").into_response()
}

/// The AdmissionReview envelope. kube's `AdmissionReview` flattens its type fields, which makes
/// serde buffer the whole document before decoding it; this one reads the body once.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound = "K: Resource + DeserializeOwned")]
struct Envelope<K: Resource> {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    request: Option<AdmissionRequest<K>>,
}

/// Decodes an `admission.k8s.io/v1` AdmissionReview request.
pub fn decode(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
    decode_as(body)
}

/// [`decode`] with the objects decoded as `K`.
pub fn decode_as<K: Resource + DeserializeOwned>(
    body: &[u8],
) -> Result<AdmissionRequest<K>, String> {
    let review: Envelope<K> = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
    let kind = review.kind.unwrap_or_default();
    if kind != "AdmissionReview" {
        return Err(format!("kind {kind:?} is not AdmissionReview"));
    }
    let api_version = review.api_version.unwrap_or_default();
    if api_version != "admission.k8s.io/v1" {
        return Err(format!(
            "apiVersion {api_version:?} is not supported: use admission.k8s.io/v1"
        ));
    }
    let mut req = review
        .request
        .ok_or_else(|| "the AdmissionReview has no request".to_string())?;
    req.types = TypeMeta { api_version, kind };
    Ok(req)
}

fn answer(
    body: &[u8],
    handle: impl FnOnce(&AdmissionRequest<DynamicObject>) -> AdmissionResponse,
) -> Response {
    match decode(body) {
        Ok(req) => respond(&handle(&req)),
        Err(reason) => bad_request(reason),
    }
}

fn respond(response: &AdmissionResponse) -> Response {
    match encode(response) {
        Ok(bytes) => (
            [(header::CONTENT_TYPE, "application/json")],
            Body::from(bytes),
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode an AdmissionReview");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot encode the response\n",
            )
                .into_response()
        }
    }
}

/// Encodes a response as an `admission.k8s.io/v1` AdmissionReview, with the patch as a base64
/// string (the canonical encoding of Kubernetes' `[]byte` fields).
pub fn encode(response: &AdmissionResponse) -> serde_json::Result<Vec<u8>> {
    use base64::Engine as _;
    if response.allowed
        && response.patch.is_none()
        && response.warnings.as_ref().is_none_or(Vec::is_empty)
        && response.audit_annotations.is_empty()
    {
        // The most common answer, written directly (no copy of the response, no empty status).
        let mut out = Vec::with_capacity(96 + response.uid.len());
        out.extend_from_slice(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
        );
        serde_json::to_writer(&mut out, &response.uid)?;
        out.extend_from_slice(br#","allowed":true}}"#);
        return Ok(out);
    }
    if response.patch.is_none() {
        return serde_json::to_vec(&response.clone().into_review());
    }
    let mut review = serde_json::to_value(response.clone().into_review())?;
    if let Some(patch) = response.patch.as_ref() {
        review["response"]["patch"] = base64::engine::general_purpose::STANDARD
            .encode(patch)
            .into();
    }
    serde_json::to_vec(&review)
}

// The Site handlers decode typed first; a body that does not decode that way (malformed, or an
// object that is not a Site) takes the generic path, which names the problem.

async fn mutate_sites(State(state): State<WebhookState>, body: Bytes) -> Response {
    let config = state.config.get();
    if let Ok(req) = decode_as::<SiteObject>(&body) {
        return respond(&super::mutate_site(&req, &config, uuid::Uuid::new_v4));
    }
    answer(&body, |req| {
        super::mutate_site(req, &config, uuid::Uuid::new_v4)
    })
}

async fn validate_sites(State(state): State<WebhookState>, body: Bytes) -> Response {
    let config = state.config.get();
    if let Ok(req) = decode_as::<SiteObject>(&body) {
        return respond(&super::validate_site_object_in(
            req,
            &config,
            &state.platform,
        ));
    }
    answer(&body, |req| {
        super::validate_site_in(req, &config, &state.platform)
    })
}

async fn validate_config(body: Bytes) -> Response {
    answer(&body, super::validate_config)
}

/// Serves `app` over TLS on `listener` until `shutdown` resolves, then stops accepting and waits
/// up to `drain` for in-flight requests.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Without TCP_NODELAY, an h2 response (HEADERS and DATA frames written separately) waits
        // for the client's delayed ACK: ~40 ms per request.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        let service = TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "webhook requests still running after the drain period"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowed_answer_is_the_review_kube_writes_without_the_empty_status() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a\"b","kind":{"group":"","version":"v1","kind":"ConfigMap"},"resource":{"group":"","version":"v1","resource":"configmaps"},"operation":"CREATE","userInfo":{},"name":"x","namespace":"y"}}"#;
        let req = decode(body).unwrap();
        let allowed = AdmissionResponse::from(&req);
        let fast: serde_json::Value = serde_json::from_slice(&encode(&allowed).unwrap()).unwrap();
        let mut general = serde_json::to_value(allowed.clone().into_review()).unwrap();
        general["response"]
            .as_object_mut()
            .unwrap()
            .remove("status");
        assert_eq!(fast, general);
        assert_eq!(fast["response"]["uid"], "a\"b");
        // Warnings, denials and patches take the general path.
        let mut warned = allowed.clone();
        warned.warnings = Some(vec!["careful".into()]);
        let out: serde_json::Value = serde_json::from_slice(&encode(&warned).unwrap()).unwrap();
        assert_eq!(out["response"]["warnings"][0], "careful");
        let denied = AdmissionResponse::from(&req).deny("no");
        let out: serde_json::Value = serde_json::from_slice(&encode(&denied).unwrap()).unwrap();
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["message"], "no");
    }
}
