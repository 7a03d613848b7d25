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
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
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

/// The webhook paths, each a series of the webhook metrics (`webhook` label).
pub const WEBHOOKS: [&str; 3] = [MUTATE_SITES, VALIDATE_SITES, VALIDATE_CONFIG];

/// The webhook server's application: [`routes`] with the server's layers.
pub fn router(state: WebhookState) -> Router {
    with_layers(routes(), &WEBHOOKS, state)
}

/// The webhook routes, without the server's layers.
pub fn routes() -> Router<Arc<WebhookState>> {
    Router::new()
        .route(MUTATE_SITES, post(mutate_sites))
        .route(VALIDATE_SITES, post(validate_sites))
        .route(VALIDATE_CONFIG, post(validate_config))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: the webhooks are POST /mutate-sites, /validate-sites, /validate-config\n") })
}

/// `routes` with the server's layers: the body limit, and the request metrics of the paths in
/// `observed` (other paths are served uncounted).
pub fn with_layers(
    routes: Router<Arc<WebhookState>>,
    observed: &[&'static str],
    state: WebhookState,
) -> Router {
    let observed = Arc::new(Observed::new(&state.metrics, observed));
    routes
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(observed, observe))
        .with_state(Arc::new(state))
}

/// The metrics of each observed path, resolved once: a request does not look its series up.
/// Resolving them makes the series, so they exist from the start, as controller-runtime's do.
struct Observed {
    paths: Vec<PathMetrics>,
    requests: prometheus::IntCounterVec,
}

struct PathMetrics {
    path: &'static str,
    in_flight: prometheus::IntGauge,
    latency: prometheus::Histogram,
    /// `requests_total{code="200"}`, the common answer.
    ok: prometheus::IntCounter,
}

impl Observed {
    fn new(metrics: &WebhookMetrics, paths: &[&'static str]) -> Observed {
        Observed {
            paths: paths
                .iter()
                .map(|&path| PathMetrics {
                    path,
                    in_flight: metrics.in_flight.with_label_values(&[path]),
                    latency: metrics.latency.with_label_values(&[path]),
                    ok: metrics.requests.with_label_values(&[path, "200"]),
                })
                .collect(),
            requests: metrics.requests.clone(),
        }
    }
}

/// Counts requests, in-flight requests and latency per webhook path.
async fn observe(State(observed): State<Arc<Observed>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let Some(m) = observed.paths.iter().find(|m| m.path == path) else {
        return next.run(req).await;
    };
    // Counted down when the request ends, also when its connection closed before the answer.
    let _in_flight = Counted::new(&m.in_flight);
    let started = Instant::now();
    let response = next.run(req).await;
    m.latency.observe(started.elapsed().as_secs_f64());
    if response.status() == StatusCode::OK {
        m.ok.inc();
    } else {
        observed
            .requests
            .with_label_values(&[m.path, response.status().as_str()])
            .inc();
    }
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

/// The AdmissionReview envelope of a Site review, as the Site handlers read it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SiteEnvelope<'a> {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default, borrow)]
    request: Option<SiteRequest<'a>>,
}

/// The fields of an AdmissionRequest the Site handlers read. `resource` and `userInfo`, which
/// the API requires, must be there but are skipped unread, as are the optional fields the
/// handlers never read (`requestKind`, `requestResource`, `options`): nothing is allocated for
/// them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SiteRequest<'a> {
    uid: String,
    kind: kube::core::GroupVersionKind,
    #[allow(dead_code)]
    resource: serde::de::IgnoredAny,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: kube::core::admission::Operation,
    #[allow(dead_code)]
    user_info: serde::de::IgnoredAny,
    #[serde(default, borrow)]
    object: Option<SiteObject<'a>>,
    #[serde(default, borrow)]
    old_object: Option<SiteObject<'a>>,
    #[serde(default)]
    dry_run: bool,
}

/// The body of an AdmissionReview of a Site, for the Site handlers' path: [`SiteBody::decode`]
/// decodes it like [`decode_as`] for [`SiteObject`], without decoding what the handlers never
/// read, and with the Site's text borrowed from the body.
///
/// The [`super::reader`] reads the body first. A body it refuses is decoded with serde_json,
/// the values of the `kubectl apply` annotation cut out of it first when they are where the API
/// server writes them (see [`super::applied`]): what is left decodes several times faster, to
/// the same request.
#[derive(Debug)]
pub struct SiteBody<'b> {
    text: &'b str,
    /// The cut body, made when serde_json decodes.
    cut: std::cell::OnceCell<Option<super::applied::Cut>>,
}

impl<'b> SiteBody<'b> {
    /// The body, unless it is not UTF-8 text (the reason, as for a decoding error).
    pub fn new(body: &'b [u8]) -> Result<SiteBody<'b>, String> {
        Ok(SiteBody {
            text: utf8(body)?,
            cut: std::cell::OnceCell::new(),
        })
    }

    /// The review's request, its Site's text borrowed from the body.
    pub fn decode(&self) -> Result<AdmissionRequest<SiteObject<'_>>, String> {
        match self.read() {
            Some(req) => req,
            None => self.decode_with_serde_json(),
        }
    }

    /// What the review reader gives, `None` when it refuses the body.
    pub fn read(&self) -> Option<Result<AdmissionRequest<SiteObject<'_>>, String>> {
        super::reader::from_str(self.text).ok().map(site_request)
    }

    /// [`SiteBody::decode`] without the review reader: serde_json's decoding.
    pub fn decode_with_serde_json(&self) -> Result<AdmissionRequest<SiteObject<'_>>, String> {
        if let Some(cut) = self.cut.get_or_init(|| super::applied::Cut::of(self.text))
            && let Some(req) = cut.decode(decode_site_text)
        {
            return Ok(req);
        }
        decode_site_text(self.text)
    }
}

pub(super) fn decode_site_text(text: &str) -> Result<AdmissionRequest<SiteObject<'_>>, String> {
    let review: SiteEnvelope = serde_json::from_str(text)
        .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
    site_request(review)
}

/// The request of a decoded Site review, unless the review is not an `admission.k8s.io/v1` one
/// or has no request.
fn site_request(review: SiteEnvelope<'_>) -> Result<AdmissionRequest<SiteObject<'_>>, String> {
    let types = envelope_types(review.api_version, review.kind)?;
    let r = review
        .request
        .ok_or_else(|| "the AdmissionReview has no request".to_string())?;
    Ok(AdmissionRequest {
        types,
        uid: r.uid,
        kind: r.kind,
        resource: kube::core::GroupVersionResource::gvr("", "", ""),
        sub_resource: r.sub_resource,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name: r.name,
        namespace: r.namespace,
        operation: r.operation,
        user_info: Default::default(),
        object: r.object,
        old_object: r.old_object,
        dry_run: r.dry_run,
        options: None,
    })
}

/// The body as text. JSON is UTF-8 (RFC 8259); checking the whole body at once (with SIMD) is
/// much faster than serde_json's check of each string as it decodes from bytes. The standard
/// library's check names where a body that is not UTF-8 goes wrong.
fn utf8(body: &[u8]) -> Result<&str, String> {
    simdutf8::basic::from_utf8(body).or_else(|_| {
        std::str::from_utf8(body)
            .map_err(|e| format!("the body is not an AdmissionReview: not UTF-8 text: {e}"))
    })
}

/// The envelope's type fields, when they name an `admission.k8s.io/v1` AdmissionReview.
fn envelope_types(api_version: Option<String>, kind: Option<String>) -> Result<TypeMeta, String> {
    let kind = kind.unwrap_or_default();
    if kind != "AdmissionReview" {
        return Err(format!("kind {kind:?} is not AdmissionReview"));
    }
    let api_version = api_version.unwrap_or_default();
    if api_version != "admission.k8s.io/v1" {
        return Err(format!(
            "apiVersion {api_version:?} is not supported: use admission.k8s.io/v1"
        ));
    }
    Ok(TypeMeta { api_version, kind })
}

/// Decodes an `admission.k8s.io/v1` AdmissionReview request.
pub fn decode(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
    decode_as(body)
}

/// [`decode`] with the objects decoded as `K`.
pub fn decode_as<K: Resource + DeserializeOwned>(
    body: &[u8],
) -> Result<AdmissionRequest<K>, String> {
    let review: Envelope<K> = serde_json::from_str(utf8(body)?)
        .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
    let types = envelope_types(review.api_version, review.kind)?;
    let mut req = review
        .request
        .ok_or_else(|| "the AdmissionReview has no request".to_string())?;
    req.types = types;
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

async fn mutate_sites(State(state): State<Arc<WebhookState>>, body: Bytes) -> Response {
    let config = state.config.get();
    if let Ok(response) = SiteBody::new(&body).and_then(|b| {
        b.decode()
            .map(|req| super::mutate_site(&req, &config, uuid::Uuid::new_v4))
    }) {
        return respond(&response);
    }
    answer(&body, |req| {
        super::mutate_site(req, &config, uuid::Uuid::new_v4)
    })
}

async fn validate_sites(State(state): State<Arc<WebhookState>>, body: Bytes) -> Response {
    let config = state.config.get();
    if let Ok(response) = SiteBody::new(&body).and_then(|b| {
        b.decode()
            .map(|req| super::validate_site_object_in(req, &config, &state.platform))
    }) {
        return respond(&response);
    }
    answer(&body, |req| {
        super::validate_site_in(req, &config, &state.platform)
    })
}

async fn validate_config(body: Bytes) -> Response {
    answer(&body, super::validate_config)
}

/// The webhook server's defences against clients that hold connections without using them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take to send a request's header (HTTP/1.1), and to send anything
    /// at all after the TLS handshake before its protocol is known.
    pub header_read_timeout: Duration,
    /// How long a connection may stay without any traffic before it is closed (gracefully: a
    /// request in progress finishes).
    pub idle_timeout: Duration,
    /// Most connections open at once; further ones are closed on accept and counted in
    /// `sites_webhook_connections_refused_total`.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            // Longer than the API server's idle-connection timeout (90 s, Go's default), so the
            // client normally closes an idle connection first and never races a server close.
            idle_timeout: Duration::from_secs(120),
            max_connections: 1000,
        }
    }
}

/// Length of the HTTP/2 connection preface: until this many bytes came, the protocol of a
/// connection may still be unknown, which the HTTP/1.1 header timeout does not cover.
const PREFACE_LEN: u64 = 24;

/// Serves `app` over TLS on `listener` until `shutdown` resolves, then stops accepting and waits
/// up to `drain` for in-flight requests. Uses the default [`Limits`].
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    serve_tls_limited(listener, tls, app, shutdown, drain, Limits::default(), None).await
}

/// [`serve_tls`] with explicit connection limits; `metrics` counts open and refused connections.
pub async fn serve_tls_limited(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    limits: Limits,
    metrics: Option<WebhookMetrics>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let max = limits
        .max_connections
        .clamp(1, tokio::sync::Semaphore::MAX_PERMITS) as u32;
    let slots = Arc::new(tokio::sync::Semaphore::new(max as usize));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, max, "connection limit reached: connection refused");
            if let Some(m) = &metrics {
                m.connections_refused.inc();
            }
            drop(stream);
            continue;
        };
        // Without TCP_NODELAY, an h2 response (HEADERS and DATA frames written separately) waits
        // for the client's delayed ACK: ~40 ms per request.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let open = metrics.as_ref().map(|m| Counted::new(&m.open_connections));
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        let service = TowerToHyperService::new(app.clone());
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _open = open;
            let handshake = limits.header_read_timeout.min(HANDSHAKE_TIMEOUT);
            let tls = match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
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
            let activity = Activity::new();
            let io = TokioIo::new(Tracked {
                inner: tls,
                activity: activity.clone(),
            });
            let conn = builder.serve_connection_with_upgrades(io, service);
            // Driven until it ends; closed gracefully on shutdown or when idle too long (before
            // its protocol is known: silent for the header timeout). A client that ignores the
            // graceful close is dropped `header_read_timeout` later.
            tokio::pin!(conn);
            let idle = idle_deadline(&activity, limits);
            tokio::pin!(idle);
            let mut stop = stop;
            let reason = tokio::select! {
                result = &mut conn => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = stop.wait_for(|s| *s) => "shutdown",
                _ = &mut idle => "idle",
            };
            tracing::debug!(%peer, reason, "closing the connection");
            conn.as_mut().graceful_shutdown();
            if reason == "shutdown" {
                // The server's drain period bounds this.
                let _ = conn.await;
            } else if tokio::time::timeout(limits.header_read_timeout, conn)
                .await
                .is_err()
            {
                tracing::debug!(%peer, "connection dropped: the client ignored the close");
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it ends: all slots back means all connections closed.
    if tokio::time::timeout(drain, slots.acquire_many(max))
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "webhook requests still running after the drain period"
        );
    }
}

/// Resolves once the connection has moved no bytes for the idle timeout (the header timeout
/// while fewer bytes than the HTTP/2 preface came).
async fn idle_deadline(activity: &Activity, limits: Limits) {
    loop {
        let limit = if activity.read_bytes() < PREFACE_LEN {
            limits.header_read_timeout
        } else {
            limits.idle_timeout
        };
        let deadline = activity.last() + limit;
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return;
        }
        // Look again at least every shorter limit: the limit in force changes once the
        // preface length has been read.
        let recheck = now + limits.header_read_timeout.min(limits.idle_timeout);
        tokio::time::sleep_until(deadline.min(recheck)).await;
    }
}

/// Counts a connection or a request in a gauge (`sites_webhook_open_connections`, the in-flight
/// requests) while it lives.
struct Counted(prometheus::IntGauge);

impl Counted {
    fn new(gauge: &prometheus::IntGauge) -> Counted {
        gauge.inc();
        Counted(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// When a connection last moved bytes, and how many it read.
#[derive(Clone)]
struct Activity {
    epoch: tokio::time::Instant,
    /// Milliseconds since `epoch` of the last read or write.
    last_ms: Arc<std::sync::atomic::AtomicU64>,
    read: Arc<std::sync::atomic::AtomicU64>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            epoch: tokio::time::Instant::now(),
            last_ms: Arc::default(),
            read: Arc::default(),
        }
    }

    fn touch(&self, read: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Relaxed);
        if read > 0 {
            self.read.fetch_add(read as u64, Relaxed);
        }
    }

    fn last(&self) -> tokio::time::Instant {
        let ms = self.last_ms.load(std::sync::atomic::Ordering::Relaxed);
        self.epoch + Duration::from_millis(ms)
    }

    fn read_bytes(&self) -> u64 {
        self.read.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// An IO stream that records its traffic in an [`Activity`].
struct Tracked<T> {
    inner: T,
    activity: Activity,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.activity.touch(read);
        }
        polled
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &polled
            && *n > 0
        {
            self.activity.touch(0);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let std::task::Poll::Ready(Ok(n)) = &polled
            && *n > 0
        {
            self.activity.touch(0);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
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
