//! The HTTPS webhook server: decodes an AdmissionReview, calls the pure handler, encodes the
//! answer. Client mistakes get a 4xx with a reason (400 malformed, 413 too large, 404 unknown
//! path, 405 wrong method), never a 500 or a panic.
//!
//! What a request may hold: its share of the memory budget ([`super::budget`]), taken as its
//! body arrives and for its decoding, then only its answer's bytes; reviews of configurations
//! and of bodies over [`HEAVY_BODY`] are judged one at a time on a blocking thread. What a
//! connection may hold, and the deadline of every phase: [`super::connection`].

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
use kube::core::admission::AdmissionResponse;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::budget::{Budget, Share, Spent};
use super::connection::{BodyHold, Conn, Deadlines, Ending, Peers, ReadAhead, Tracked, Tracking};
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
/// ([`Observed::admit`]) before the handler runs, and keeps of its share of the memory budget
/// only its answer's bytes once the handler returned.
async fn observe(State(observed): State<Arc<Observed>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let Some(m) = observed.paths.iter().find(|m| m.path == path) else {
        return next.run(req).await;
    };
    // Counted down when the request ends, also when its connection closed before the answer.
    let _in_flight = Counted::new(&m.in_flight);
    let started = Instant::now();
    let conn = req.extensions().get::<Arc<Conn>>().cloned();
    let response = match observed.admit(m.path, req, conn.as_deref()).await {
        // The answer's bytes stay counted in the request's share until they are written.
        Ok((req, mut share)) => next.run(req).await.map(|body| {
            let hint = axum::body::HttpBody::size_hint(&body);
            let answer = hint.upper().unwrap_or(hint.lower());
            share.shrink_to(answer as usize);
            Body::new(Held {
                body,
                _share: share,
            })
        }),
        Err(refused) => {
            if refused.headers().contains_key(header::CONNECTION)
                && let Some(conn) = &conn
            {
                conn.answered_early();
            }
            refused
        }
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
    /// memory budget for each byte as it arrives (within what the connection `conn` may hold for
    /// bodies), then for what decoding it may take ([`decode_cost`]; a small request may take
    /// the reserve then): the request with its body read, and the share to hold until it is
    /// answered. A client that trickles its body holds only what it sent, and for the body
    /// deadline at most.
    async fn admit(
        &self,
        path: &str,
        req: Request,
        conn: Option<&Conn>,
    ) -> Result<(Request, Share), Response> {
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
        // What this request's body holds of its connection's and its peer's parts, until the
        // body is read.
        let mut on_connection = BodyHold::default();
        let mut hold_on_connection = |bytes: usize| match conn {
            Some(conn) => conn.hold_body(&mut on_connection, bytes),
            None => true,
        };
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
                // The whole body in one piece, the common case: kept as it came, and held with
                // what decoding it takes at once (a small one may take the reserve).
                if buf.is_empty() && declared == Some(len) {
                    share
                        .grow_complete_to(len + decode_cost(path, len))
                        .await
                        .map_err(|spent| self.busy(spent))?;
                    return Ok((data, true));
                }
                if len > buf.capacity() {
                    // Doubling (few copies), up to the announced length (no more once it came).
                    let announced = declared.unwrap_or(BODY_LIMIT).max(len);
                    let capacity = len.max(buf.capacity() * 2).min(announced);
                    if !hold_on_connection(capacity) {
                        return Err(connection_busy());
                    }
                    // A small body may take the first half of the reserve on its way.
                    share
                        .grow_body_to(capacity, announced + decode_cost(path, announced))
                        .await
                        .map_err(|spent| self.busy(spent))?;
                    buf.reserve_exact(capacity - buf.len());
                }
                buf.extend_from_slice(&data);
            }
            let capacity = buf.capacity();
            Ok((bytes::Bytes::from(buf), capacity == 0))
        };
        let (body, held) = match tokio::time::timeout_at(deadline, read).await {
            // Answered before the body was read whole: the connection cannot carry another
            // request, and the client is told so.
            Ok(read) => read.map_err(closing)?,
            Err(_) => return Err(body_timeout(self.body_timeout, received)),
        };
        // What the body took (its buffer, at most the share held for it), and what decoding it
        // may take, unless held with the body in one piece.
        if !held {
            let len = body.len();
            if let Err(spent) = share
                .grow_complete_to(share.bytes().max(len) + decode_cost(path, len))
                .await
            {
                return Err(self.busy(spent));
            }
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
                    "the request needs more memory than the webhook's budget allows one request \
                     ({} of {budget} MiB)\n",
                    self.budget.general() / MIB
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

/// The bodies on their way of a connection's requests, or of its peer's, hold their part of the
/// memory budget: one more is refused at once.
fn connection_busy() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        format!(
            "the webhook is busy: the bodies on their way of this connection ({} MiB at most) or \
             of its peer address (half the memory budget) hold their part; retry\n",
            CONNECTION_BODIES / MIB
        ),
    )
        .into_response()
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

/// A 400 with `reason`, clipped: a decoder's message may quote the client's text (serde's
/// "unknown variant" quotes the value whole).
fn bad_request(reason: String) -> Response {
    let reason = crate::validation::clip(&reason) + "\n";
    (StatusCode::BAD_REQUEST, reason.into_owned()).into_response()
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

/// Bodies longer than this are judged apart ([`judged_apart`]): only hostile or exceptional
/// reviews are so large (a Site shared with thousands of users is 100-200 KB; its judging takes
/// a fraction of a millisecond), and judging one of 5 MB may take tens of milliseconds.
pub const HEAVY_BODY: usize = 512 * KIB;

/// Judges `body` with `judge` on a blocking thread, one such review at a time in the whole
/// server, so that the async workers stay free for ordinary reviews whatever a client sends:
/// what would wait more than [`BUDGET_WAIT`] for its turn is answered 503.
async fn judged_apart(
    body: Bytes,
    judge: impl FnOnce(&[u8]) -> Response + Send + 'static,
) -> Response {
    static ONE_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let Ok(Ok(turn)) = tokio::time::timeout(BUDGET_WAIT, ONE_AT_A_TIME.acquire()).await else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "the webhook is busy: configuration reviews and reviews over 512 KiB are judged \
             one at a time; retry\n",
        )
            .into_response();
    };
    // The turn ends with the judging, also when the client is gone before.
    let judged = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        judge(&body)
    });
    judged.await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "a review could not be judged");
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the review could not be judged\n",
        )
            .into_response()
    })
}

async fn mutate_sites(State(state): State<Arc<WebhookState>>, body: Bytes) -> Response {
    let config = state.config.get();
    if body.len() > HEAVY_BODY {
        return judged_apart(body, move |body| review_mutation(body, &config)).await;
    }
    review_mutation(&body, &config)
}

async fn validate_sites(State(state): State<Arc<WebhookState>>, body: Bytes) -> Response {
    let config = state.config.get();
    if body.len() > HEAVY_BODY {
        let platform = state.platform.clone();
        return judged_apart(body, move |body| {
            review_validation(body, &config, &platform)
        })
        .await;
    }
    review_validation(&body, &config, &state.platform)
}

/// A configuration review may cost milliseconds (64 KiB of YAML, 20,000 values): always apart.
async fn validate_config(body: Bytes) -> Response {
    judged_apart(body, review_config).await
}

/// The webhook server's defences against clients that hold connections without using them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take to send a request's header (HTTP/1.1), and to send anything
    /// at all after the TLS handshake before its protocol is known.
    pub header_read_timeout: Duration,
    /// How long a connection may stay without a request in flight before it is closed
    /// (gracefully), counted from the end of its last request: frames that are no request
    /// (HTTP/2 PINGs, SETTINGS) do not keep it open.
    pub idle_timeout: Duration,
    /// Most connections open at once; further ones are closed on accept and counted in
    /// `sites_webhook_connections_refused_total`.
    pub max_connections: usize,
    /// How long a client may take to send a request's body, from the end of its header: a
    /// client that trickles a body is answered 408 and its connection closed.
    pub body_timeout: Duration,
    /// The memory requests in flight may hold together, in bytes: their bodies as they arrive,
    /// then what decoding them may take ([`decode_cost`]), then their answers until written. An
    /// eighth is a reserve for small requests ([`super::budget`]). A request waits for its share
    /// at most [`BUDGET_WAIT`] in all, then is answered 503.
    pub memory_budget: usize,
    /// How long an answer may take to be written, from the handler's return (an HTTP/2 client
    /// that keeps its flow-control window shut), and how long the transport may refuse writes
    /// (a client that does not read): then the connection is dropped, and what its requests
    /// held is given back.
    pub answer_timeout: Duration,
    /// Most connections one peer address may hold open at once (part of `max_connections`).
    pub max_connections_per_peer: usize,
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
            answer_timeout: Duration::from_secs(10),
            max_connections_per_peer: 500,
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

/// The kernel's send buffer of a connection (Linux doubles it): far more than an answer, which is
/// at most tens of KiB.
const SEND_BUFFER: usize = 64 * KIB;

/// What the bodies of one connection's requests may hold of the memory budget at once: two of
/// the largest (HTTP/1.1 reads one request at a time; HTTP/2 streams share this).
const CONNECTION_BODIES: usize = 2 * BODY_LIMIT;

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
    // A peer's bodies on their way hold at most half of what one request may hold.
    let peers = Peers::new(
        limits.max_connections_per_peer,
        Budget::new(limits.memory_budget, BUDGET_WAIT).general() / 2 / super::budget::UNIT,
    );
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
    let builders = Arc::new((builder, roomy));
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
        let refused = |why: &str| {
            tracing::debug!(%peer, why, "connection refused");
            if let Some(m) = &metrics {
                m.connections_refused.inc();
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused("the connection limit is reached");
            continue;
        };
        let Some(peer_slot) = peers.take(peer.ip()) else {
            refused("the peer has its share of the connections open");
            continue;
        };
        // Without TCP_NODELAY, an h2 response (HEADERS and DATA frames written separately) waits
        // for the client's delayed ACK: ~40 ms per request.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        // A fixed send buffer (the kernel would grow it to megabytes): a client that does not
        // read finds the server's writes refused after a few hundred answers, not thousands.
        if let Err(e) = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER) {
            tracing::debug!(%peer, error = %e, "cannot set SO_SNDBUF");
        }
        let open = metrics.as_ref().map(|m| Counted::new(&m.open_connections));
        let conn = Conn::new(
            vec![slot],
            Some(peer_slot),
            CONNECTION_BODIES / super::budget::UNIT,
        );
        let connection = Connection {
            peer,
            acceptor: acceptor.clone(),
            builders: builders.clone(),
            roomy_slots: roomy_slots.clone(),
            service: Tracking {
                app: app.clone(),
                conn: conn.clone(),
            },
            stop: stop_rx.clone(),
            limits,
        };
        tokio::spawn(async move {
            let _open = open;
            connection.serve(stream, conn).await
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
    /// The ordinary and the roomy HTTP settings.
    builders: Arc<(auto::Builder<TokioExecutor>, auto::Builder<TokioExecutor>)>,
    roomy_slots: Arc<tokio::sync::Semaphore>,
    service: Tracking,
    stop: tokio::sync::watch::Receiver<bool>,
    limits: Limits,
}

impl Connection {
    /// The TLS handshake on `stream`, then HTTP until the client closes, the server shuts
    /// down, or the connection's watchdog ends it ([`Conn::watch`]).
    async fn serve(self, stream: tokio::net::TcpStream, conn: Arc<Conn>) {
        let Connection {
            peer,
            acceptor,
            builders,
            roomy_slots,
            service,
            stop,
            limits,
        } = self;
        let handshake = limits.header_read_timeout.min(HANDSHAKE_TIMEOUT);
        let accepted = acceptor.accept(ReadAhead::new(stream));
        let mut tls = match tokio::time::timeout(handshake, accepted).await {
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
        // The roomy settings go to the first connections that completed a handshake: a client
        // that only connects takes none.
        let builder = match roomy_slots.try_acquire_owned() {
            Ok(slot) => {
                // rustls reads at most 4 KiB at a time from its transport: from a buffer rather
                // than one system call each.
                tls.get_mut().0.enable(ROOMY_READ, slot);
                &builders.1
            }
            Err(_) => &builders.0,
        };
        let io = TokioIo::new(Tracked {
            inner: Some(tls),
            conn: conn.clone(),
        });
        let connection = builder.serve_connection_with_upgrades(io, service);
        // Driven until it ends; closed gracefully on shutdown or when idle too long, dropped
        // when an answer or a write overruns the answer timeout. A client that ignores the
        // graceful close is dropped `header_read_timeout` later.
        tokio::pin!(connection);
        let watch = conn.watch(Deadlines {
            first_bytes: limits.header_read_timeout,
            idle: limits.idle_timeout,
            answer: limits.answer_timeout,
        });
        tokio::pin!(watch);
        let mut stop = stop;
        let reason = tokio::select! {
            result = &mut connection => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.wait_for(|s| *s) => "shutdown",
            ending = &mut watch => match ending {
                Ending::Idle => "idle",
                Ending::Stalled => {
                    tracing::debug!(%peer, "connection dropped: an answer or a write overran the answer timeout");
                    return;
                }
            },
        };
        tracing::debug!(%peer, reason, "closing the connection");
        connection.as_mut().graceful_shutdown();
        if reason == "shutdown" {
            // The server's drain period bounds this.
            let _ = connection.await;
        } else if tokio::time::timeout(limits.header_read_timeout, connection)
            .await
            .is_err()
        {
            tracing::debug!(%peer, "connection dropped: the client ignored the close");
        }
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
