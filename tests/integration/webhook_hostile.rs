//! The webhook server under clients that hold its resources without using them: HTTP/2 streams
//! whose flow-control window stays shut, HTTP/1.1 clients that never read their answers,
//! refusals sent while the client is still sending, a peer that opens many connections. In
//! each, an ordinary client beside them is served, and what they held comes back.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use sites_operator::admission::server;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::webhook_server::{Client, NEVER, Server, ask, metric_line, review, site, start_limited};
use crate::support::eventually;

const H2: &[&[u8]] = &[b"h2"];

fn in_use(s: &Server) -> f64 {
    metric_line(&s.registry, "sites_webhook_memory_in_use_bytes").unwrap_or(-1.0)
}

fn open_connections(s: &Server) -> f64 {
    metric_line(&s.registry, "sites_webhook_open_connections").unwrap_or(-1.0)
}

/// Waits until no memory is held and no connection is open.
async fn given_back(s: &Server) {
    eventually(
        "the budget and the connections to come back",
        Duration::from_secs(10),
        || async { (in_use(s) == 0.0 && open_connections(s) == 0.0).then_some(()) },
    )
    .await;
}

/// An ordinary client sends `n` Site reviews, one connection each: every one is a 200.
async fn all_served(s: &Server, n: usize) {
    let client = Client::new(&s.bundle.ca_pem);
    for i in 0..n {
        let (status, text) = ask(s, &client).await;
        assert_eq!(status, 200, "review {i} of {n}: {text}");
    }
}

/// 32 HTTP/2 connections, each with 16 Site reviews whose answers it never lets through
/// (SETTINGS_INITIAL_WINDOW_SIZE 0, no WINDOW_UPDATE, a PING every 200 ms): each answer holds
/// only its own bytes, an ordinary client is served all along, and once the answer timeout
/// passes the connections are dropped and the budget is whole again. Before, each answer held
/// its request's whole share (10 x body + 256 KiB) for as long as the connection lived, and
/// every other review got 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_answers_held_by_a_shut_window_hold_only_their_bytes_until_the_answer_timeout() {
    const CONNECTIONS: usize = 32;
    const STREAMS: usize = 16;
    let answer_timeout = Duration::from_secs(6);
    let limits = server::Limits {
        header_read_timeout: NEVER,
        idle_timeout: NEVER,
        body_timeout: NEVER,
        answer_timeout,
        ..server::Limits::default()
    };
    let s = start_limited(None, limits).await;
    let mut client = Client::new(&s.bundle.ca_pem);
    client.alpn = H2;
    let body = Bytes::from(review(site(8080)));
    let mut connections = Vec::new();
    let mut senders = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..CONNECTIONS {
        let tls = client.connect(s.addr).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .initial_stream_window_size(0)
            .keep_alive_interval(Duration::from_millis(200))
            .keep_alive_while_idle(true)
            .handshake::<_, Full<Bytes>>(TokioIo::new(tls))
            .await
            .unwrap();
        connections.push(tokio::spawn(conn));
        for _ in 0..STREAMS {
            let mut sender = sender.clone();
            let req = http::Request::post("https://localhost/validate-sites")
                .header("content-type", "application/json")
                .body(Full::new(body.clone()))
                .unwrap();
            // The answer's headers come (HEADERS frames are not flow-controlled); its body
            // never can.
            answers.push(tokio::spawn(async move { sender.send_request(req).await }));
        }
        // Kept, with the answers: a client whose handles are all gone closes its connection.
        senders.push(sender);
    }
    let started = tokio::time::Instant::now();
    let mut held = Vec::new();
    for answer in answers {
        let answer = answer.await.unwrap().expect("the answer's headers");
        assert_eq!(answer.status(), 200);
        // Never read: dropping it would reset its stream.
        held.push(answer);
    }
    // Every answer is judged and waits to be written: each holds 1 KiB of the budget, the
    // unit, for its few hundred bytes.
    let holding = in_use(&s);
    assert!(
        holding <= (CONNECTIONS * STREAMS * 1024) as f64,
        "{holding} bytes held by {} unwritten answers",
        CONNECTIONS * STREAMS
    );
    assert!(
        started.elapsed() < answer_timeout,
        "the setup outlasted the answer timeout: the test shows nothing"
    );
    all_served(&s, 10).await;
    assert!(
        started.elapsed() < answer_timeout,
        "the reviews outlasted the answer timeout: the test shows nothing"
    );
    // The answer timeout passes: the connections are dropped, what they held comes back.
    for conn in connections {
        let ended = tokio::time::timeout(answer_timeout * 3, conn)
            .await
            .expect("the connection dropped after the answer timeout");
        assert!(ended.unwrap().is_err(), "dropped, not closed cleanly");
    }
    given_back(&s).await;
}

/// An HTTP/1.1 client that pipelines Site reviews and never reads a byte: once its socket is
/// full, the server's writes are refused, and the connection is dropped an answer timeout
/// later; an ordinary client is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_client_that_never_reads_is_dropped_after_the_answer_timeout() {
    let limits = server::Limits {
        header_read_timeout: NEVER,
        idle_timeout: NEVER,
        body_timeout: NEVER,
        answer_timeout: Duration::from_secs(2),
        ..server::Limits::default()
    };
    let s = start_limited(None, limits).await;
    let client = Client::new(&s.bundle.ca_pem);
    let body = review(site(8080));
    let mut request = format!(
        "POST /validate-sites HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    let mut mute = Vec::new();
    for _ in 0..4 {
        let mut tls = client.connect(s.addr).await.unwrap();
        // Writes until the server stops reading (its answers fill both socket buffers) or
        // drops the connection; reads nothing.
        let request = request.clone();
        mute.push(tokio::spawn(async move {
            for _ in 0..100_000 {
                let written = tokio::time::timeout(Duration::from_secs(60), async {
                    tls.write_all(&request).await?;
                    tls.flush().await
                })
                .await;
                match written {
                    Ok(Ok(())) => continue,
                    Ok(Err(_)) => return true,
                    Err(_) => return false,
                }
            }
            false
        }));
    }
    all_served(&s, 5).await;
    for writer in mute {
        assert!(
            writer.await.unwrap(),
            "the server kept a connection whose client never read"
        );
    }
    all_served(&s, 1).await;
    given_back(&s).await;
}

/// Requests refused before their bodies were read (a body announced past the limit: 413), each
/// client still sending its body when the answer comes: every client reads its answer. The
/// server closes its side and keeps reading what the client still sends, instead of closing
/// with unread data, which resets the connection and loses the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_sent_while_the_client_still_sends_reaches_it() {
    let s = start_limited(None, server::Limits::default()).await;
    let client = Client::new(&s.bundle.ca_pem);
    let announced = server::BODY_LIMIT + 1024 * 1024;
    let mut clients = Vec::new();
    for _ in 0..8 {
        let tls = client.connect(s.addr).await.unwrap();
        clients.push(tokio::spawn(async move {
            let (mut reader, mut writer) = tokio::io::split(tls);
            let head = format!(
                "POST /validate-sites HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {announced}\r\n\r\n"
            );
            let sending = tokio::spawn(async move {
                writer.write_all(head.as_bytes()).await?;
                let chunk = vec![b' '; 64 * 1024];
                for _ in 0..announced / chunk.len() {
                    writer.write_all(&chunk).await?;
                }
                writer.flush().await
            });
            let mut answer = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(30), async {
                let mut buf = [0u8; 4096];
                loop {
                    match reader.read(&mut buf).await {
                        Ok(0) => return Ok(()),
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                        Err(e) => return Err(e),
                    }
                }
            })
            .await
            .expect("the connection ends");
            let _ = sending.await;
            (read.map_err(|e| e.kind()), String::from_utf8_lossy(&answer).into_owned())
        }));
    }
    for c in clients {
        let (read, answer) = c.await.unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 413"),
            "no answer read ({read:?}): {answer:?}"
        );
        assert!(answer.contains("at most 5242880 are accepted"), "{answer}");
    }
}

/// One peer address holds at most its share of the connection slots: its next connection is
/// refused and counted, while another address still connects and is served.
#[tokio::test]
async fn a_peer_holds_at_most_its_share_of_the_connections() {
    let limits = server::Limits {
        header_read_timeout: NEVER,
        idle_timeout: NEVER,
        max_connections: 10,
        max_connections_per_peer: 2,
        ..server::Limits::default()
    };
    let s = start_limited(None, limits).await;
    let client = Client::new(&s.bundle.ca_pem);
    let _held = [
        client.connect(s.addr).await.unwrap(),
        client.connect(s.addr).await.unwrap(),
    ];
    assert!(
        client.connect(s.addr).await.is_err(),
        "a third from 127.0.0.1"
    );
    assert_eq!(
        metric_line(&s.registry, "sites_webhook_connections_refused_total"),
        Some(1.0)
    );
    // From 127.0.0.2, another peer on the loopback network: served.
    let tls = client.connect_from(s.addr, [127, 0, 0, 2]).await.unwrap();
    let (status, _) =
        super::webhook_server::send(tls, "POST", "/validate-sites", review(site(8080)))
            .await
            .unwrap();
    assert_eq!(status, 200);
}
