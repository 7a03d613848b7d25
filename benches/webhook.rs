//! Webhook load: AdmissionReview bodies POSTed over TLS (keep-alive, http/1.1 and h2) to the
//! real webhook server stack (`server::router` + `server::serve_tls`, rustls, hyper) by a small
//! client on the same machine. For each case it prints requests/s, p50/p99/p999 latency, errors,
//! and the server's CPU time per 1,000 requests (from the server threads' scheduler statistics).
//!
//! The server also answers `/fixed-allowed` with fixed bytes after reading the body, without
//! decoding it, through the same layers (body limit, request metrics) as the webhooks:
//! comparing it with `/validate-sites` in the same run gives the cost of the handler (decode →
//! validate → encode). `/fixed-bare` is the same answer without the layers (run by the
//! quick bench, and in the full matrix when `WEBHOOK_PATH` selects it). `/fixed-busy` is the
//! fixed answer after `WEBHOOK_BUSY_NS` nanoseconds (default 6000) of busy CPU, run only when
//! selected: what a handler of that pure cost would reach, against which the handler's figures
//! can be read (the server shares its cores with the client, so a handler costs more than its
//! own time).
//!
//! Run: `cargo bench --bench webhook` (full matrix, 5 s per case; `WEBHOOK_SECONDS=N` changes
//! the duration, `WEBHOOK_QUICK=1` runs only the typical Site at 16 connections over http/1.1,
//! validate, fixed and bare, as `make bench` does; `WEBHOOK_BODY=typical|large` and
//! `WEBHOOK_PROTO=http/1.1|h2` and
//! `WEBHOOK_PATH=/validate-sites|/mutate-sites|/fixed-allowed|/fixed-bare|/fixed-busy` and
//! `WEBHOOK_CONNS=1|16|64|1x16` select cases; `1x16` is h2's one connection with 16 streams in
//! flight, the way the API server multiplexes its calls).

#[path = "common/bodies.rs"]
mod bodies;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::header;
use axum::routing::post;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use sites_operator::admission::server::{self, WebhookState};
use sites_operator::config::{Installation, PlatformConfig};
use sites_operator::metrics::WebhookMetrics;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

// The allocator of the `sites-operator` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SERVER_THREAD: &str = "webhook-server";
const FIXED: &str = "/fixed-allowed";
const FIXED_BARE: &str = "/fixed-bare";
const FIXED_BUSY: &str = "/fixed-busy";
const ALLOWED: &[u8] = b"\"allowed\":true";
/// What the server answers for an allowed review, as fixed bytes (the baseline handler).
const FIXED_ALLOWED: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"6e2b1f0c-0000-4000-8000-000000000001","allowed":true}}"#;

#[derive(Clone, Copy, PartialEq)]
enum Proto {
    Http1,
    H2,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::Http1 => "http/1.1",
            Proto::H2 => "h2",
        }
    }
}

struct Case {
    body: &'static str,
    path: &'static str,
    proto: Proto,
    connections: usize,
    /// Requests in flight on each connection: 1, or more over h2 (streams on one connection, as
    /// the API server multiplexes its calls to a webhook).
    streams: usize,
}

struct Outcome {
    requests: usize,
    errors: usize,
    elapsed: Duration,
    latencies: Vec<u64>,
    server_cpu: Duration,
}

/// CPU time of this process's threads named `name` (scheduler statistics, nanoseconds).
fn thread_cpu(name: &str) -> Duration {
    let mut total = 0u64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        if let Some(ns) = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        {
            total += ns;
        }
    }
    Duration::from_nanos(total)
}

fn client_config(ca_pem: &str, proto: Proto) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA certificate")).expect("CA accepted");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![match proto {
        Proto::Http1 => b"http/1.1".to_vec(),
        Proto::H2 => b"h2".to_vec(),
    }];
    Arc::new(config)
}

enum Sender {
    Http1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

async fn connect(
    addr: std::net::SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    proto: Proto,
) -> Sender {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let stream = TlsConnector::from(tls)
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("TLS handshake");
    let io = TokioIo::new(stream);
    match proto {
        Proto::Http1 => {
            let (sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("http/1.1");
            tokio::spawn(conn);
            Sender::Http1(sender)
        }
        Proto::H2 => {
            let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .expect("h2");
            tokio::spawn(conn);
            Sender::H2(sender)
        }
    }
}

/// Sends one request; true when the answer is a 200 allowing the request.
async fn send(sender: &mut Sender, path: &str, body: &Bytes) -> bool {
    let req = http::Request::post(format!("https://localhost{path}"))
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .expect("request");
    let resp = match sender {
        Sender::Http1(s) => {
            if s.ready().await.is_err() {
                return false;
            }
            s.send_request(req).await
        }
        Sender::H2(s) => {
            if s.ready().await.is_err() {
                return false;
            }
            s.send_request(req).await
        }
    };
    let Ok(resp) = resp else { return false };
    let ok = resp.status() == 200;
    let Ok(body) = resp.into_body().collect().await else {
        return false;
    };
    let body = body.to_bytes();
    let allowed = ok && body.windows(ALLOWED.len()).any(|w| w == ALLOWED);
    if !allowed && std::env::var_os("WEBHOOK_DEBUG").is_some() {
        eprintln!("{}", String::from_utf8_lossy(&body));
    }
    allowed
}

async fn run_case(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    case: &Case,
    body: Bytes,
    duration: Duration,
) -> Outcome {
    let tls = client_config(ca_pem, case.proto);
    let mut senders = Vec::new();
    for _ in 0..case.connections {
        let mut s = connect(addr, tls.clone(), case.proto).await;
        // One request per connection before measuring: handshakes and first allocations.
        assert!(
            send(&mut s, case.path, &body).await,
            "warm-up request on {}",
            case.path
        );
        senders.push(s);
    }
    let cpu_before = thread_cpu(SERVER_THREAD);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    let senders = senders.into_iter().flat_map(|s| match s {
        Sender::H2(h2) => (0..case.streams)
            .map(|_| Sender::H2(h2.clone()))
            .collect::<Vec<_>>(),
        http1 => vec![http1],
    });
    for mut sender in senders {
        let body = body.clone();
        let path = case.path;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(1 << 16);
            let mut errors = 0usize;
            loop {
                let t = Instant::now();
                if t >= deadline {
                    break;
                }
                if send(&mut sender, path, &body).await {
                    latencies.push(t.elapsed().as_nanos() as u64);
                } else {
                    errors += 1;
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.expect("client task");
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed();
    let server_cpu = thread_cpu(SERVER_THREAD).saturating_sub(cpu_before);
    latencies.sort_unstable();
    Outcome {
        requests: latencies.len() + errors,
        errors,
        elapsed,
        latencies,
        server_cpu,
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1e6
}

fn main() {
    sites_operator::allocator::tune();
    let seconds: f64 = std::env::var("WEBHOOK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let quick = std::env::var("WEBHOOK_QUICK").is_ok_and(|v| v == "1");
    let duration = Duration::from_secs_f64(seconds);

    let typical = Bytes::from(bodies::typical());
    let large = Bytes::from(bodies::large());

    let bundle =
        sites_operator::certs::generate(&["localhost".to_string()], 30).expect("certificate");
    let dir = std::env::temp_dir().join(format!("webhook-bench-{}", std::process::id()));
    bundle.write(&dir).expect("certificate files");
    let store = sites_operator::tls::CertStore::load(&dir.join("tls.crt"), &dir.join("tls.key"))
        .expect("certificate store");
    let tls = Arc::new(sites_operator::tls::server_config(store, None).expect("TLS config"));
    let config = PlatformConfig::from_yaml(bodies::CONFIG, "config.yaml", &Installation::default())
        .expect("platform configuration");
    let registry = prometheus::Registry::new();
    let state = WebhookState {
        config: Arc::new(config).into(),
        metrics: WebhookMetrics::register(&registry).expect("metrics"),
        platform: Default::default(),
    };
    // The fixed answer goes through the server's layers (the body limit, the request metrics)
    // as the webhooks do, so the difference is the handler's alone; `/fixed-bare` skips them.
    fn fixed<S: Clone + Send + Sync + 'static>() -> axum::routing::MethodRouter<S> {
        post(|body: Bytes| async move {
            // Reads the body, as the webhooks do, without decoding it.
            std::hint::black_box(body);
            ([(header::CONTENT_TYPE, "application/json")], FIXED_ALLOWED)
        })
    }
    let busy = Duration::from_nanos(
        std::env::var("WEBHOOK_BUSY_NS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(6000),
    );
    let fixed_busy = post(move |body: Bytes| async move {
        std::hint::black_box(body);
        let started = Instant::now();
        while started.elapsed() < busy {
            std::hint::spin_loop();
        }
        ([(header::CONTENT_TYPE, "application/json")], FIXED_ALLOWED)
    });
    let mut observed = server::WEBHOOKS.to_vec();
    observed.extend([FIXED, FIXED_BUSY]);
    let routes = server::routes()
        .route(FIXED, fixed())
        .route(FIXED_BUSY, fixed_busy);
    let app = server::with_layers(routes, &observed, state, &server::Limits::default())
        .route(FIXED_BARE, fixed());

    // The server gets its own runtime with two workers, as the operator has on a 2-core node.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(SERVER_THREAD)
        .enable_all()
        .build()
        .expect("server runtime");
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("listen");
    let addr = listener.local_addr().expect("address");
    server_rt.spawn(server::serve_tls(
        listener,
        tls,
        app,
        std::future::pending(),
        Duration::from_secs(1),
    ));

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("webhook-client")
        .enable_all()
        .build()
        .expect("client runtime");

    let mut cases = Vec::new();
    let protos: &[Proto] = if quick {
        &[Proto::Http1]
    } else {
        &[Proto::Http1, Proto::H2]
    };
    let conns: &[usize] = if quick { &[16] } else { &[1, 16, 64] };
    let sizes: &[&str] = if quick {
        &["typical"]
    } else {
        &["typical", "large"]
    };
    let paths: &[&str] = if quick {
        &[server::VALIDATE_SITES, FIXED, FIXED_BARE]
    } else {
        &[
            server::VALIDATE_SITES,
            server::MUTATE_SITES,
            FIXED,
            FIXED_BARE,
        ]
    };
    let only = |var: &str, value: &str| std::env::var(var).map_or(true, |v| v == value);
    // The bare answer runs in the quick bench and when selected, the busy one when selected.
    let selected = |path: &str| std::env::var("WEBHOOK_PATH").is_ok_and(|p| p == path);
    let paths: Vec<&str> = paths
        .iter()
        .copied()
        .chain(selected(FIXED_BUSY).then_some(FIXED_BUSY))
        .filter(|&p| p != FIXED_BARE || quick || selected(FIXED_BARE))
        .collect();
    for &body in sizes.iter().filter(|b| only("WEBHOOK_BODY", b)) {
        for &proto in protos.iter().filter(|p| only("WEBHOOK_PROTO", p.name())) {
            // Over h2 also one connection with 16 streams in flight.
            let shapes = conns
                .iter()
                .map(|&c| (c, 1))
                .chain((proto == Proto::H2 && !quick).then_some((1, 16)));
            for (connections, streams) in shapes {
                let shape = if streams > 1 {
                    format!("{connections}x{streams}")
                } else {
                    connections.to_string()
                };
                if !only("WEBHOOK_CONNS", &shape) {
                    continue;
                }
                for &path in paths.iter().filter(|p| only("WEBHOOK_PATH", p)) {
                    cases.push(Case {
                        body,
                        path,
                        proto,
                        connections,
                        streams,
                    });
                }
            }
        }
    }

    println!(
        "# webhook load: typical body {} bytes, large body {} bytes, {seconds} s per case, {} cores",
        typical.len(),
        large.len(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "| body | protocol | conns | path | req/s | p50 ms | p99 ms | p999 ms | errors | server CPU ms / 1000 req |"
    );
    println!("|---|---|---:|---|---:|---:|---:|---:|---:|---:|");
    for case in &cases {
        let body = if case.body == "typical" {
            typical.clone()
        } else {
            large.clone()
        };
        let o = client_rt.block_on(run_case(addr, &bundle.ca_pem, case, body, duration));
        let ok = o.latencies.len();
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {} | {:.1} |",
            case.body,
            case.proto.name(),
            if case.streams > 1 {
                format!("{}×{} streams", case.connections, case.streams)
            } else {
                case.connections.to_string()
            },
            case.path,
            ok as f64 / o.elapsed.as_secs_f64(),
            percentile(&o.latencies, 0.50),
            percentile(&o.latencies, 0.99),
            percentile(&o.latencies, 0.999),
            o.errors,
            o.server_cpu.as_secs_f64() * 1e3 * 1000.0 / o.requests.max(1) as f64,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "command: {}cargo bench --bench webhook",
        if quick { "WEBHOOK_QUICK=1 " } else { "" }
    );
}
