//! The webhook server over real TLS connections: ALPN h2 and http/1.1, TLS 1.2 and 1.3, status
//! codes for client mistakes, metrics, certificate reload without restart, client certificates.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use sites_operator::admission::server::{self, BODY_LIMIT, WebhookState};
use sites_operator::certs::{self, Bundle};
use sites_operator::config::{Context, PlatformConfig};
use sites_operator::metrics::{self, WebhookMetrics};
use sites_operator::tls::{self, CertStore, Reload};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::support::{eventually, repo_file};

struct Server {
    addr: std::net::SocketAddr,
    bundle: Bundle,
    store: Arc<CertStore>,
    dir: PathBuf,
    registry: Registry,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn names() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into()]
}

async fn start(client_ca: Option<&Bundle>) -> Server {
    let dir = std::env::temp_dir().join(format!("webhook-it-{}", uuid::Uuid::new_v4()));
    let bundle = certs::generate(&names(), 30).unwrap();
    bundle.write(&dir).unwrap();
    let store = CertStore::load(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
    let roots = client_ca.map(|ca| {
        std::fs::write(dir.join("client-ca.crt"), &ca.ca_pem).unwrap();
        tls::load_roots(&dir.join("client-ca.crt")).unwrap()
    });
    let tls_config = Arc::new(tls::server_config(store.clone(), roots).unwrap());
    let config = PlatformConfig::load(
        &repo_file("manifests/base/config.yaml"),
        &Context::default(),
    )
    .unwrap();
    let registry = Registry::new();
    let state = WebhookState {
        config: Arc::new(config),
        metrics: WebhookMetrics::register(&registry).unwrap(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve_tls(
        listener,
        tls_config,
        server::router(state),
        async move {
            let _ = stopped.await;
        },
        Duration::from_secs(5),
    ));
    Server {
        addr,
        bundle,
        store,
        dir,
        registry,
        stop: Some(stop),
        task,
    }
}

const HTTP1: &[&[u8]] = &[b"http/1.1"];
const BOTH_VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

struct Client<'a> {
    ca_pem: &'a str,
    alpn: &'a [&'a [u8]],
    versions: &'a [&'static rustls::SupportedProtocolVersion],
    identity: Option<&'a Bundle>,
}

impl<'a> Client<'a> {
    fn new(ca_pem: &'a str) -> Self {
        Client {
            ca_pem,
            alpn: HTTP1,
            versions: BOTH_VERSIONS,
            identity: None,
        }
    }

    async fn connect(&self, addr: std::net::SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(self.versions)
        .unwrap()
        .with_root_certificates(roots);
        let mut config = match self.identity {
            Some(b) => {
                let chain = CertificateDer::pem_slice_iter(b.cert_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                let key = PrivateKeyDer::from_pem_slice(b.key_pem.as_bytes()).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = self.alpn.iter().map(|p| p.to_vec()).collect();
        let tcp = TcpStream::connect(addr).await?;
        let connector = TlsConnector::from(Arc::new(config));
        let mut tls = connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await?;
        // TLS 1.3 client-certificate failures surface on the first read; make them visible here.
        use tokio::io::AsyncWriteExt as _;
        tls.flush().await?;
        Ok(tls)
    }
}

/// Sends one request on a fresh connection; h2 when ALPN negotiated it.
async fn send(
    tls: TlsStream<TcpStream>,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Bytes), hyper::Error> {
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let req = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let io = TokioIo::new(tls);
    let resp = if h2 {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(conn);
        sender.send_request(req).await?
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(conn);
        sender.send_request(req).await?
    };
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

fn review(object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "6e2b1f0c-0000-4000-8000-000000000001",
            "kind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "resource": {"group": "sites.ecmwf.int", "version": "v1", "resource": "sites"},
            "name": "docs-handbook", "namespace": "sites", "operation": "CREATE",
            "userInfo": {"username": "jdoe"}, "object": object, "oldObject": null, "dryRun": false
        }
    }))
    .unwrap()
}

fn site(port: i64) -> Value {
    json!({
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
        "metadata": {"name": "docs-handbook", "namespace": "sites"},
        "spec": {"name": "handbook", "owner": "jdoe", "type": "static", "configuration": {
            "space": "docs", "enabled": true, "settings": {"replicas": 1},
            "applications": [{"name": "static"}, {"name": "app", "image": "ghcr.io/x/app:1", "port": port}]
        }}
    })
}

#[tokio::test]
async fn webhooks_answer_over_h2_and_http1() {
    let s = start(None).await;
    for (alpn, want) in [
        (&b"h2"[..], &b"h2"[..]),
        (&b"http/1.1"[..], &b"http/1.1"[..]),
    ] {
        let client = Client {
            alpn: &[alpn],
            ..Client::new(&s.bundle.ca_pem)
        };
        let tls = client.connect(s.addr).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(want));
        let (status, body) = send(tls, "POST", "/validate-sites", review(site(8000)))
            .await
            .unwrap();
        assert_eq!(status, 200);
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        assert_eq!(
            answer["response"]["uid"],
            "6e2b1f0c-0000-4000-8000-000000000001"
        );
        assert_eq!(answer["response"]["allowed"], true);

        let tls = client.connect(s.addr).await.unwrap();
        let (status, body) = send(tls, "POST", "/validate-sites", review(site(70000)))
            .await
            .unwrap();
        assert_eq!(status, 200);
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["response"]["allowed"], false);
        assert_eq!(answer["response"]["status"]["code"], 403);
        assert_eq!(answer["response"]["status"]["reason"], "Forbidden");
        assert_eq!(
            answer["response"]["status"]["message"],
            "spec.configuration.applications[1].port: must be between 1 and 65535"
        );
    }
    // The mutating webhook answers with a base64 JSONPatch.
    let mut forced = site(8000);
    forced["metadata"]["annotations"] = json!({"sites.ecmwf.int/upgrade-request": "force"});
    let tls = Client::new(&s.bundle.ca_pem).connect(s.addr).await.unwrap();
    let (status, body) = send(tls, "POST", "/mutate-sites", review(forced))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
    use base64::Engine as _;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(
            answer["response"]["patch"]
                .as_str()
                .expect("a base64 string"),
        )
        .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(
        patch[0]["path"],
        "/metadata/annotations/sites.ecmwf.int~1upgrade-request"
    );
    assert!(uuid::Uuid::parse_str(patch[0]["value"].as_str().unwrap()).is_ok());

    // Both TLS versions work on their own.
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let client = Client {
            versions: &[version],
            ..Client::new(&s.bundle.ca_pem)
        };
        let tls = client.connect(s.addr).await.unwrap();
        assert_eq!(tls.get_ref().1.protocol_version(), Some(version.version));
    }
}

#[tokio::test]
async fn client_mistakes_get_4xx_with_a_reason_and_are_counted() {
    let s = start(None).await;
    let client = Client::new(&s.bundle.ca_pem);
    let wrong_version = br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x", "kind": {"group": "", "version": "v1", "kind": "X"}, "resource": {"group": "", "version": "v1", "resource": "x"}, "operation": "CREATE", "userInfo": {}, "name": "x"}}"#;
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (
            "POST",
            "/validate-sites",
            b"{not json".to_vec(),
            400,
            "not an AdmissionReview",
        ),
        (
            "POST",
            "/mutate-sites",
            b"".to_vec(),
            400,
            "not an AdmissionReview",
        ),
        (
            "POST",
            "/validate-config",
            br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#.to_vec(),
            400,
            "has no request",
        ),
        (
            "POST",
            "/validate-sites",
            br#"{"apiVersion": "v1", "kind": "ConfigMap"}"#.to_vec(),
            400,
            "kind \"ConfigMap\" is not AdmissionReview",
        ),
        (
            "POST",
            "/validate-sites",
            wrong_version.to_vec(),
            400,
            "use admission.k8s.io/v1",
        ),
        (
            "POST",
            "/validate-sites",
            vec![b' '; BODY_LIMIT + 1],
            413,
            "",
        ),
        ("GET", "/validate-sites", Vec::new(), 405, ""),
        (
            "POST",
            "/other",
            Vec::new(),
            404,
            "/mutate-sites, /validate-sites, /validate-config",
        ),
        (
            "POST",
            "/validate-sites",
            vec![0xff, 0xfe, 0x00],
            400,
            "not an AdmissionReview",
        ),
    ];
    for (method, path, body, want, reason) in cases {
        let tls = client.connect(s.addr).await.unwrap();
        let (status, text) = send(tls, method, path, body).await.unwrap();
        let text = String::from_utf8_lossy(&text);
        assert_eq!(status, want, "{method} {path}: {text}");
        assert!(text.contains(reason), "{method} {path}: {text}");
    }
    let exposition = metrics::encode(&s.registry);
    for line in [
        r#"controller_runtime_webhook_requests_total{code="400",webhook="/validate-sites"} 4"#,
        r#"controller_runtime_webhook_requests_total{code="413",webhook="/validate-sites"} 1"#,
        r#"controller_runtime_webhook_requests_total{code="405",webhook="/validate-sites"} 1"#,
        r#"controller_runtime_webhook_requests_in_flight{webhook="/validate-sites"} 0"#,
        r#"controller_runtime_webhook_latency_seconds_count{webhook="/mutate-sites"} 1"#,
    ] {
        assert!(exposition.contains(line), "missing {line} in\n{exposition}");
    }
    assert!(
        !exposition.contains("/other"),
        "unknown paths are not labels"
    );
}

fn write_pair(dir: &Path, cert: &str, key: &str) {
    certs::write_file(&dir.join("tls.crt"), cert.as_bytes(), false).unwrap();
    certs::write_file(&dir.join("tls.key"), key.as_bytes(), true).unwrap();
}

#[tokio::test]
async fn certificates_reload_without_restart_and_bad_files_keep_the_old_one() {
    let s = start(None).await;
    let old = s.bundle.clone();
    // An established connection keeps working across the rotation.
    let kept = Client::new(&old.ca_pem).connect(s.addr).await.unwrap();

    // A key that does not match the certificate is refused; the old certificate keeps serving.
    let other = certs::generate(&names(), 30).unwrap();
    write_pair(&s.dir, &old.cert_pem, &other.key_pem);
    let err = s.store.reload().unwrap_err();
    assert!(
        err.to_string().contains("does not match the certificate"),
        "{err}"
    );
    write_pair(
        &s.dir,
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
        &old.key_pem,
    );
    assert!(s.store.reload().is_err());
    assert!(Client::new(&old.ca_pem).connect(s.addr).await.is_ok());

    // The watcher picks up a valid new pair: new handshakes get the new certificate.
    let watcher = tokio::spawn(
        s.store
            .clone()
            .watch(Duration::from_millis(20), std::future::pending()),
    );
    write_pair(&s.dir, &other.cert_pem, &other.key_pem);
    eventually(
        "the new certificate is served",
        Duration::from_secs(10),
        || async { Client::new(&other.ca_pem).connect(s.addr).await.ok() },
    )
    .await;
    assert!(
        Client::new(&old.ca_pem).connect(s.addr).await.is_err(),
        "the old CA no longer verifies new handshakes"
    );
    watcher.abort();
    assert_eq!(s.store.reload().unwrap(), Reload::Unchanged);
    let (status, _) = send(kept, "POST", "/validate-sites", review(site(8000)))
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn client_certificates_are_required_when_a_client_ca_is_set() {
    let client_ca =
        certs::generate_for(&["kube-apiserver".to_string()], 30, certs::Usage::Client).unwrap();
    let s = start(Some(&client_ca)).await;
    let anonymous = Client::new(&s.bundle.ca_pem);
    let refused = match anonymous.connect(s.addr).await {
        Err(_) => true,
        Ok(tls) => send(tls, "POST", "/validate-sites", review(site(8000)))
            .await
            .is_err(),
    };
    assert!(
        refused,
        "a client without a certificate must not get an answer"
    );
    let stranger =
        certs::generate_for(&["intruder".to_string()], 30, certs::Usage::Client).unwrap();
    let wrong = Client {
        identity: Some(&stranger),
        ..Client::new(&s.bundle.ca_pem)
    };
    let refused = match wrong.connect(s.addr).await {
        Err(_) => true,
        Ok(tls) => send(tls, "POST", "/validate-sites", review(site(8000)))
            .await
            .is_err(),
    };
    assert!(refused, "a certificate from another CA must be refused");
    let apiserver = Client {
        identity: Some(&client_ca),
        ..Client::new(&s.bundle.ca_pem)
    };
    let tls = apiserver.connect(s.addr).await.unwrap();
    let (status, _) = send(tls, "POST", "/validate-sites", review(site(8000)))
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn shutdown_stops_accepting_and_returns() {
    let mut s = start(None).await;
    s.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), &mut s.task)
        .await
        .expect("the server returns after shutdown")
        .unwrap();
    assert!(Client::new(&s.bundle.ca_pem).connect(s.addr).await.is_err());
}

/// A TLS 1.2-style ClientHello with `version` as client_version and no supported_versions
/// extension, offering the server's own suite, groups and signature schemes, so only the version
/// decides the outcome.
fn client_hello(version: [u8; 2]) -> Vec<u8> {
    let mut body = version.to_vec();
    body.extend([7u8; 32]); // random
    body.push(0); // session id
    body.extend([0x00, 0x04, 0xc0, 0x2b, 0xc0, 0x2f]); // ECDHE-ECDSA/RSA-AES128-GCM-SHA256
    body.extend([0x01, 0x00]); // compression: null
    let extensions: Vec<u8> = [
        // supported_groups: x25519, secp256r1
        vec![0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17],
        // ec_point_formats: uncompressed
        vec![0x00, 0x0b, 0x00, 0x02, 0x01, 0x00],
        // signature_algorithms: ecdsa_secp256r1_sha256, rsa_pss_rsae_sha256, rsa_pkcs1_sha256
        vec![
            0x00, 0x0d, 0x00, 0x08, 0x00, 0x06, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01,
        ],
    ]
    .concat();
    body.extend((extensions.len() as u16).to_be_bytes());
    body.extend(extensions);
    let mut handshake = vec![0x01, 0x00];
    handshake.extend((body.len() as u16).to_be_bytes());
    handshake.extend(body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend((handshake.len() as u16).to_be_bytes());
    record.extend(handshake);
    record
}

/// The first bytes the server answers a raw ClientHello with.
async fn raw_answer(addr: std::net::SocketAddr, hello: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(hello).await.unwrap();
    let mut answer = vec![0u8; 7];
    let mut got = 0;
    while got < answer.len() {
        match tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut answer[got..])).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got += n,
        }
    }
    answer.truncate(got);
    answer
}

#[tokio::test]
async fn tls_below_1_2_is_refused() {
    let s = start(None).await;
    // The TLS 1.2 hello gets a ServerHello (handshake record) ...
    let tls12 = raw_answer(s.addr, &client_hello([0x03, 0x03])).await;
    assert_eq!(tls12.first(), Some(&0x16), "{tls12:02x?}");
    assert_eq!(tls12.get(5), Some(&0x02), "ServerHello, got {tls12:02x?}");
    // ... the same hello as TLS 1.1 and 1.0 an alert, never a ServerHello.
    for version in [[0x03, 0x02], [0x03, 0x01]] {
        let old = raw_answer(s.addr, &client_hello(version)).await;
        assert!(
            old.is_empty() || old[0] == 0x15,
            "the server answered a {version:02x?} hello with {old:02x?}"
        );
    }
    // The same server still serves TLS 1.2.
    let client = Client {
        versions: &[&rustls::version::TLS12],
        ..Client::new(&s.bundle.ca_pem)
    };
    assert!(client.connect(s.addr).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_concurrent_requests_fails_no_request() {
    let s = start(None).await;
    // Clients trust every CA the rotation will use, as the API server does with a caBundle that
    // holds the old and the new CA during a rotation.
    let bundles: Vec<Bundle> = (0..5)
        .map(|_| certs::generate(&names(), 30).unwrap())
        .collect();
    let mut trust = s.bundle.ca_pem.clone();
    for b in &bundles {
        trust.push_str(&b.ca_pem);
    }
    let trust = Arc::new(trust);
    let watcher = tokio::spawn(
        s.store
            .clone()
            .watch(Duration::from_millis(10), std::future::pending()),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..8 {
        let (trust, stop, addr) = (trust.clone(), stop.clone(), s.addr);
        workers.push(tokio::spawn(async move {
            let alpn: &[&[u8]] = if w % 2 == 0 { &[b"h2"] } else { HTTP1 };
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || ok == 0 {
                let client = Client {
                    alpn,
                    ..Client::new(&trust)
                };
                let result = match client.connect(addr).await {
                    Ok(tls) => send(tls, "POST", "/validate-sites", review(site(8000)))
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|(status, _)| {
                            if status == 200 {
                                Ok(())
                            } else {
                                Err(format!("status {status}"))
                            }
                        }),
                    Err(e) => Err(e.to_string()),
                };
                match result {
                    Ok(()) => ok += 1,
                    Err(e) => failed.push(e),
                }
            }
            (ok, failed)
        }));
    }
    for b in &bundles {
        write_pair(&s.dir, &b.cert_pem, &b.key_pem);
        let expected = b.cert_pem.clone();
        eventually(
            "the rotated certificate is served",
            Duration::from_secs(10),
            || {
                let store = s.store.clone();
                let expected = expected.clone();
                async move {
                    let der = CertificateDer::pem_slice_iter(expected.as_bytes())
                        .next()?
                        .ok()?;
                    (store.current().end_entity_cert().ok()? == &der).then_some(())
                }
            },
        )
        .await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for w in workers {
        let (ok, failed) = w.await.unwrap();
        assert!(
            failed.is_empty(),
            "failed requests during rotation: {failed:?}"
        );
        total += ok;
    }
    watcher.abort();
    assert!(total >= 8, "{total} requests");
}
