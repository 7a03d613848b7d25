//! Emulator throughput and memory: creates N ConfigMaps over C keep-alive HTTP/1.1
//! connections, then GETs them, and reports requests per second and the process's resident
//! memory growth for the stored objects.
//!
//! Run: `cargo bench -p sites-emulator --bench api` (N=100000, C=8; override with
//! `EMULATOR_BENCH_OBJECTS` and `EMULATOR_BENCH_CONNECTIONS`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use sites_emulator::{Emulator, Options};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn run_phase<F>(addr: std::net::SocketAddr, connections: usize, total: usize, make: F) -> f64
where
    F: Fn(usize) -> hyper::Request<Full<Bytes>> + Send + Sync + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let make = Arc::new(make);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let next = next.clone();
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).ok();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .expect("handshake");
            tokio::spawn(conn);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let resp = sender.send_request(make(i)).await.expect("request");
                let status = resp.status();
                let _ = resp.into_body().collect().await;
                assert!(status.is_success(), "request {i} failed with {status}");
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let objects = env("EMULATOR_BENCH_OBJECTS", 100_000);
    let connections = env("EMULATOR_BENCH_CONNECTIONS", 8);
    let rss_before = rss_kib();
    let emulator = Emulator::start(Options::default()).await.expect("emulator");
    let addr = emulator.addr;

    let create_rate = run_phase(addr, connections, objects, |i| {
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i}","labels":{{"sites.ecmwf.int/id":"site-{i}"}}}},"data":{{"index":"{i}","nginx.conf":"server {{ listen 8080; location /space/site-{i}/ {{ root /data; }} }}"}}}}"#
        );
        hyper::Request::post("/api/v1/namespaces/default/configmaps")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request")
    })
    .await;
    let stored = emulator.app.store.lock().object_count();
    let rss_after = rss_kib();

    let get_rate = run_phase(addr, connections, objects, move |i| {
        let n = (i * 7919) % objects;
        hyper::Request::get(format!("/api/v1/namespaces/default/configmaps/cm-{n}"))
            .header("host", "127.0.0.1")
            .body(Full::new(Bytes::new()))
            .expect("request")
    })
    .await;

    println!("command: cargo bench -p sites-emulator --bench api");
    println!("objects: {objects}, connections: {connections}");
    println!("create: {create_rate:.0} requests/s");
    println!("get:    {get_rate:.0} requests/s");
    println!("stored objects: {stored}");
    println!(
        "resident memory: {:.1} MiB before start, {:.1} MiB with the objects stored ({:.2} KiB per object)",
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        (rss_after.saturating_sub(rss_before)) as f64 / objects as f64
    );
}
