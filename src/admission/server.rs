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
use kube::core::admission::AdmissionResponse;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::budget::{Budget, Share, Spent};
#[cfg(test)]
use super::review::decode;
use super::review::{self, SiteBody, encode};
use crate::config::PlatformConfig;
use crate::config::live::Live;
use crate::metrics::WebhookMetrics;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Largest accepted request body: what the API server can send. The object is at most 3 MiB, the
/// API server's limit on a request body (an object that grows past it in admission, by defaults
/// or managed fields, cannot be stored: etcd refuses it at its own limit); the oldObject is what
/// etcd stored, at most 1.5 MiB by default (`--max-request-bytes`); the rest of the envelope
/// (uid, names, the user's groups and extra, options) is far smaller than the 512 KiB left.
pub const BODY_LIMIT: usize = 5 * MIB;

/// What decoding a body of `len` bytes for `path` and judging it may take beyond the body
/// itself, in bytes: the budget a request must hold before it is decoded. The bounds are
/// measured by `admission::tests::memory` on the shapes that expand most (maps of short
/// strings; per-site routing; YAML aliases), which must stay within them:
/// - a Site review decodes to borrowed text, its maps at most ~8 bytes per body byte (a copy
///   of the body when the `kubectl apply` annotation is cut out; 64 applications at most, a few
///   hundred bytes each); per-site routing and share lists are checked, not kept; judging an
///   UPDATE whose both objects break rules everywhere adds ~2 bytes per byte (the violations
///   of each, at most [`crate::validation::MAX_KEPT`], and one object serialised to compare
///   the fields of the violations they share);
/// - a configuration review keeps only `config.yaml` (a copy at most as long as the body), whose
///   parse is bounded by the configuration's own limits: its text, whose every YAML event the
///   parser holds at once (~160 bytes per byte, [`crate::config::MAX_TEXT_BYTES`]), and its values
///   ([`crate::config::MAX_VALUES`], YAML aliases included).
pub fn decode_cost(path: &str, len: usize) -> usize {
    match path {
        VALIDATE_CONFIG => len + len.min(crate::config::MAX_TEXT_BYTES) * 160 + 4 * MIB,
        _ => len * 10 + 256 * KIB,
    }
}

/// How long a request may wait, in all, for its share of the memory budget before it is answered
/// 503.
pub const BUDGET_WAIT: Duration = Duration::from_secs(1);
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

/// The webhook server's application: [`routes`] with the server's layers, the request limits of
/// `limits`.
pub fn router(state: WebhookState, limits: &Limits) -> Router {
    with_layers(routes(), &WEBHOOKS, state, limits)
}

/// The webhook routes, without the server's layers.
pub fn routes() -> Router<Arc<WebhookState>> {
    Router::new()
        .route(MUTATE_SITES, post(mutate_sites))
        .route(VALIDATE_SITES, post(validate_sites))
        .route(VALIDATE_CONFIG, post(validate_config))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: the webhooks are POST /mutate-sites, /validate-sites, /validate-config\n") })
}

/// `routes` with the server's layers: for the paths in `observed`, the request metrics, the
/// body limit and deadline and the memory budget of `limits` (other paths are served
/// uncounted, with the body limit only).
pub fn with_layers(
    routes: Router<Arc<WebhookState>>,
    observed: &[&'static str],
    state: WebhookState,
    limits: &Limits,
) -> Router {
    let observed = Arc::new(Observed::new(&state.metrics, observed, limits));
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
    budget: Budget,
    body_timeout: Duration,
}

struct PathMetrics {
    path: &'static str,
    in_flight: prometheus::IntGauge,
    latency: prometheus::Histogram,
    /// `requests_total{code="200"}`, the common answer.
    ok: prometheus::IntCounter,
}

impl Observed {
    fn new(metrics: &WebhookMetrics, paths: &[&'static str], limits: &Limits) -> Observed {
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
            budget: Budget::new(limits.memory_budget, BUDGET_WAIT)
                .counted(metrics.memory_in_use.clone()),
            body_timeout: limits.body_timeout,
        }
    }
}

/// Counts requests, in-flight requests and latency per webhook path; reads the body of each
/// ([`Observed::admit`]) before the handler runs.
async fn observe(State(observed): State<Arc<Observed>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let Some(m) = observed.paths.iter().find(|m| m.path == path) else {
        return next.run(req).await;
    };
    // Counted down when the request ends, also when its connection closed before the answer.
    let _in_flight = Counted::new(&m.in_flight);
    let started = Instant::now();
    let response = match observed.admit(m.path, req).await {
        // The answer's bytes stay counted in the request's share until they are written.
        Ok((req, share)) => next.run(req).await.map(|body| {
            Body::new(Held {
                body,
                _share: share,
            })
        }),
        Err(refused) => refused,
    };
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

impl Observed {
    /// Reads the body of a request for `path` within the body deadline, holding a share of the
    /// memory budget for each byte as it arrives, then for what decoding it may take
    /// ([`decode_cost`]): the request with its body read, and the share to hold until it is
    /// answered. A client that trickles its body holds only what it sent, and for the body
    /// deadline at most.
    async fn admit(&self, path: &str, req: Request) -> Result<(Request, Share), Response> {
        use http_body_util::BodyExt;
        let deadline = tokio::time::Instant::now() + self.body_timeout;
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        if let Some(len) = declared
            && len > BODY_LIMIT
        {
            return Err(closing(too_large(len)));
        }
        let mut share = self.budget.share();
        let (parts, mut body) = req.into_parts();
        let mut received = 0;
        let read = async {
            // Grown as the body arrives, never past what is held: memory is taken for bytes
            // that came, not for a length a client announced.
            let mut buf: Vec<u8> = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame =
                    frame.map_err(|e| bad_request(format!("the body could not be read: {e}")))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let len = buf.len() + data.len();
                received = len;
                if len > BODY_LIMIT {
                    return Err(too_large(len));
                }
                // The whole body in one piece, the common case: kept as it came.
                if buf.is_empty() && declared == Some(len) {
                    share.grow_to(len).await.map_err(|spent| self.busy(spent))?;
                    return Ok(data);
                }
                if len > buf.capacity() {
                    // Doubling (few copies), up to the announced length (no more once it came).
                    let announced = declared.unwrap_or(BODY_LIMIT).max(len);
                    let capacity = len.max(buf.capacity() * 2).min(announced);
                    share
                        .grow_to(capacity)
                        .await
                        .map_err(|spent| self.busy(spent))?;
                    buf.reserve_exact(capacity - buf.len());
                }
                buf.extend_from_slice(&data);
            }
            Ok(bytes::Bytes::from(buf))
        };
        let body = match tokio::time::timeout_at(deadline, read).await {
            // Answered before the body was read whole: the connection cannot carry another
            // request, and the client is told so.
            Ok(read) => read.map_err(closing)?,
            Err(_) => return Err(body_timeout(self.body_timeout, received)),
        };
        let len = body.len();
        if let Err(spent) = share
            .grow_to(share.bytes().max(len) + decode_cost(path, len))
            .await
        {
            return Err(self.busy(spent));
        }
        Ok((Request::from_parts(parts, Body::from(body)), share))
    }

    fn busy(&self, spent: Spent) -> Response {
        let budget = self.budget.bytes() / MIB;
        match spent {
            Spent::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                format!(
                    "the webhook is busy: requests in flight hold its memory budget ({budget} MiB) \
                     for longer than a request waits ({}s); retry\n",
                    BUDGET_WAIT.as_secs_f32()
                ),
            )
                .into_response(),
            Spent::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request needs more memory than the webhook's whole budget ({budget} MiB)\n"
                ),
            )
                .into_response(),
        }
    }
}

/// A response body holding its request's [`Share`] of the memory budget until the body is
/// written (or dropped with its connection); its length stays known (`Content-Length`).
struct Held {
    body: Body,
    _share: Share,
}

impl hyper::body::Body for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// `response` with `Connection: close`: sent before the request's body was read whole.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

fn too_large(len: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the body has {len} bytes or more; at most {BODY_LIMIT} are accepted (the most the \
             API server sends)\n"
        ),
    )
        .into_response()
}

fn body_timeout(limit: Duration, read: usize) -> Response {
    (
        StatusCode::REQUEST_TIMEOUT,
        [(header::CONNECTION, "close")],
        format!(
            "the body did not arrive within {}s ({read} bytes came)\n",
            limit.as_secs_f32()
        ),
    )
        .into_response()
}

fn bad_request(reason: String) -> Response {
    (StatusCode::BAD_REQUEST, reason + "\n").into_response()
}

/// The answer of the configuration webhook to a body.
pub fn review_config(body: &[u8]) -> Response {
    match review::decode_config(body) {
        Ok(config) => respond(&super::validate_config_text(
            &config.request,
            config.name(),
            config.text(),
        )),
        Err(reason) => bad_request(reason),
    }
}

/// Longest `request.uid` answered: the API server sends 36-character UIDs, and the answer
/// echoes it, so a longer one would make the answer as large as the client likes.
const MAX_UID_BYTES: usize = 128;

fn respond(response: &AdmissionResponse) -> Response {
    if response.uid.len() > MAX_UID_BYTES {
        return bad_request(format!(
            "request.uid has {} bytes; at most {MAX_UID_BYTES} are answered",
            response.uid.len()
        ));
    }
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

/// The answer of the mutating Site webhook to a body.
pub fn review_mutation(body: &[u8], config: &PlatformConfig) -> Response {
    // An object that is no Site gets no patch: the validating webhook refuses it.
    match SiteBody::new(body).and_then(|b| {
        b.decode_all()
            .map(|(req, _)| super::mutate_site(&req, config, uuid::Uuid::new_v4))
    }) {
        Ok(response) => respond(&response),
        Err(reason) => bad_request(reason),
    }
}

/// The answer of the validating Site webhook to a body.
pub fn review_validation(
    body: &[u8],
    config: &PlatformConfig,
    platform: &super::Platform,
) -> Response {
    match SiteBody::new(body).and_then(|b| {
        b.decode_all().map(|(req, refused)| match refused {
            None => super::validate_site_object_in(req, config, platform),
            Some(refused) => super::deny(&req, &[refused]),
        })
    }) {
        Ok(response) => respond(&response),
        Err(reason) => bad_request(reason),
    }
}

async fn mutate_sites(State(state): State<Arc<WebhookState>>, body: Bytes) -> Response {
    review_mutation(&body, &state.config.get())
}

async fn validate_sites(State(state): State<Arc<WebhookState>>, body: Bytes) -> Response {
    review_validation(&body, &state.config.get(), &state.platform)
}

async fn validate_config(body: Bytes) -> Response {
    review_config(&body)
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
    /// How long a client may take to send a request's body, from the end of its header: a
    /// client that trickles a body is answered 408 and its connection closed.
    pub body_timeout: Duration,
    /// The memory requests in flight may hold together, in bytes: their bodies as they arrive,
    /// then what decoding them may take ([`decode_cost`]). A request waits for its share at most
    /// [`BUDGET_WAIT`] in all, then is answered 503.
    pub memory_budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            // Longer than the API server's idle-connection timeout (90 s, Go's default), so the
            // client normally closes an idle connection first and never races a server close.
            idle_timeout: Duration::from_secs(120),
            max_connections: 1000,
            body_timeout: Duration::from_secs(10),
            memory_budget: DEFAULT_MEMORY_BUDGET,
        }
    }
}

/// The default [`Limits::memory_budget`]: room for the largest request (a [`BODY_LIMIT`] body and
/// its decoding) with others beside it.
pub const DEFAULT_MEMORY_BUDGET: usize = 64 * MIB;

/// Most bytes hyper buffers per HTTP/1.1 connection (header and body data read ahead), beyond
/// what the memory budget holds: with a thousand connections open, 1,000 times this.
const H1_BUFFER: usize = 16 * KIB;
/// The first [`ROOMY_CONNECTIONS`] connections open at once read ahead up to this many bytes
/// instead: a large review (a Site shared with thousands of users is 100-200 KB) then comes in
/// a few reads, often one, and its body in one piece, which is kept as it came instead of being
/// copied together from 16 KiB frames. The API server calls a webhook over a handful of
/// connections, so these are its; the rest of a flood gets [`H1_BUFFER`]. Together they can read
/// ahead at most `ROOMY_CONNECTIONS * (ROOMY_H1_BUFFER - H1_BUFFER + ROOMY_READ)` = 9.5 MiB more
/// than 32 other connections, outside the memory budget.
const ROOMY_H1_BUFFER: usize = 256 * KIB;
const ROOMY_CONNECTIONS: usize = 32;
/// The read buffer under TLS of those connections: what the client sent is taken from the
/// socket in reads of up to this many bytes (rustls asks for 4 KiB at a time).
const ROOMY_READ: usize = 64 * KIB;
/// HTTP/2 flow-control windows (the protocol's default, 64 KiB) and the most streams per
/// connection: bounds what a connection can make the server buffer before the budget holds it.
const H2_WINDOW: u32 = 65_535;
const H2_STREAMS: u32 = 16;

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
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(H1_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .initial_stream_window_size(H2_WINDOW)
        .initial_connection_window_size(H2_WINDOW)
        .max_concurrent_streams(H2_STREAMS);
    let mut roomy = builder.clone();
    roomy.http1().max_buf_size(ROOMY_H1_BUFFER);
    let roomy_slots = Arc::new(tokio::sync::Semaphore::new(ROOMY_CONNECTIONS));
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
        let roomy_slot = roomy_slots.clone().try_acquire_owned().ok();
        let builder = match roomy_slot {
            Some(_) => roomy.clone(),
            None => builder.clone(),
        };
        let service = TowerToHyperService::new(app.clone());
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _open = open;
            let connection = Connection {
                peer,
                acceptor,
                builder,
                service,
                stop,
                limits,
            };
            match roomy_slot {
                // rustls reads at most 4 KiB at a time from its transport: from a buffer rather
                // than one system call each.
                Some(_roomy_slot) => {
                    connection
                        .serve(tokio::io::BufReader::with_capacity(ROOMY_READ, stream))
                        .await
                }
                None => connection.serve(stream).await,
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

/// One accepted connection, served until it ends.
struct Connection {
    peer: std::net::SocketAddr,
    acceptor: TlsAcceptor,
    builder: auto::Builder<TokioExecutor>,
    service: TowerToHyperService<Router>,
    stop: tokio::sync::watch::Receiver<bool>,
    limits: Limits,
}

impl Connection {
    /// The TLS handshake on `stream`, then HTTP until the client closes, the server shuts
    /// down or the connection is idle too long.
    async fn serve<S>(self, stream: S)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            peer,
            acceptor,
            builder,
            service,
            stop,
            limits,
        } = self;
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
