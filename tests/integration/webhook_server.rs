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
use sites_operator::config::{Installation, PlatformConfig};
use sites_operator::metrics::{self, WebhookMetrics};
use sites_operator::tls::{self, CertStore, Reload};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::support::{eventually, repo_file};

pub(super) struct Server {
    pub(super) addr: std::net::SocketAddr,
    pub(super) bundle: Bundle,
    store: Arc<CertStore>,
    dir: PathBuf,
    pub(super) registry: Registry,
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
    start_limited(client_ca, server::Limits::default()).await
}

pub(super) async fn start_limited(client_ca: Option<&Bundle>, limits: server::Limits) -> Server {
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
        &Installation::default(),
    )
    .unwrap();
    let registry = Registry::new();
    let webhook_metrics = WebhookMetrics::register(&registry).unwrap();
    let state = WebhookState {
        config: Arc::new(config).into(),
        metrics: webhook_metrics.clone(),
        platform: Default::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve_tls_limited(
        listener,
        tls_config,
        server::router(state, &limits),
        async move {
            let _ = stopped.await;
        },
        Duration::from_secs(5),
        limits,
        Some(webhook_metrics),
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

pub(super) struct Client<'a> {
    ca_pem: &'a str,
    pub(super) alpn: &'a [&'a [u8]],
    versions: &'a [&'static rustls::SupportedProtocolVersion],
    identity: Option<&'a Bundle>,
}

impl<'a> Client<'a> {
    pub(super) fn new(ca_pem: &'a str) -> Self {
        Client {
            ca_pem,
            alpn: HTTP1,
            versions: BOTH_VERSIONS,
            identity: None,
        }
    }

    fn config(&self) -> std::io::Result<rustls::ClientConfig> {
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
        Ok(config)
    }

    pub(super) async fn connect(
        &self,
        addr: std::net::SocketAddr,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        self.handshake(TcpStream::connect(addr).await?).await
    }

    /// [`Client::connect`] from the loopback address `from`: another peer of the server.
    pub(super) async fn connect_from(
        &self,
        addr: std::net::SocketAddr,
        from: [u8; 4],
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((std::net::Ipv4Addr::from(from), 0).into())?;
        self.handshake(socket.connect(addr).await?).await
    }

    /// The TLS handshake on a connected `tcp`.
    pub(super) async fn handshake(&self, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        let config = self.config()?;
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
pub(super) async fn send(
    tls: TlsStream<TcpStream>,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Bytes), hyper::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    exchange(tls, req).await
}

/// Sends `req` on a fresh connection; h2 when ALPN negotiated it.
async fn exchange<B>(
    tls: TlsStream<TcpStream>,
    req: http::Request<B>,
) -> Result<(u16, Bytes), hyper::Error>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
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

pub(super) fn review(object: Value) -> Vec<u8> {
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

pub(super) fn site(port: i64) -> Value {
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
    let ops = patch.as_array().unwrap();
    let stamp = ops
        .iter()
        .find(|op| op["path"] == "/metadata/annotations/sites.ecmwf.int~1upgrade-request")
        .expect("the upgrade request is stamped");
    assert!(uuid::Uuid::parse_str(stamp["value"].as_str().unwrap()).is_ok());
    // A CREATE also records the image of each built-in application without one (SPEC 4.6).
    assert!(
        ops.iter()
            .any(|op| op["path"].as_str().unwrap().ends_with("/image") && op["op"] == "add"),
        "{patch}"
    );

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

/// A valid review for `path`: a Site for the Site webhooks, the `sites-config` ConfigMap for
/// `/validate-config`.
fn valid_review(path: &str) -> String {
    let body = if path == server::VALIDATE_CONFIG {
        let config = std::fs::read_to_string(repo_file("manifests/base/config.yaml")).unwrap();
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "6e2b1f0c-0000-4000-8000-000000000002",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "sites-config", "namespace": "sites", "operation": "UPDATE",
                "userInfo": {"username": "admin"},
                "object": {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "sites-config", "namespace": "sites"},
                           "data": {"config.yaml": config}},
                "oldObject": null
            }
        }))
        .unwrap()
    } else {
        review(site(8000))
    };
    String::from_utf8(body).unwrap()
}

/// `n` nested empty arrays.
fn nested_arrays(n: usize) -> String {
    format!("{}{}", "[".repeat(n), "]".repeat(n))
}

/// `n` nested single-key objects around `null`.
fn nested_objects(n: usize) -> String {
    format!("{}null{}", "{\"a\":".repeat(n), "}".repeat(n))
}

/// The bad-input catalogue of the AdmissionReview envelope: every webhook answers each mistake
/// with a 400 whose text names the problem (never a 5xx, never a panic, never an answer as if
/// the review were valid).
#[tokio::test]
async fn bad_admission_reviews_get_400_naming_the_problem_on_every_webhook() {
    let s = start(None).await;
    let client = Client::new(&s.bundle.ca_pem);
    let mut counted = std::collections::BTreeMap::<&str, usize>::new();
    for path in server::WEBHOOKS {
        let valid = valid_review(path);
        let object_field = if path == server::VALIDATE_CONFIG {
            "\"data\":{"
        } else {
            "\"spec\":{"
        };
        assert!(valid.contains(object_field), "{valid}");
        let object_metadata = "\"metadata\":{";
        assert!(valid.contains(object_metadata), "{valid}");
        // Sanity: the unmodified review is answered.
        let tls = client.connect(s.addr).await.unwrap();
        let (status, body) = send(tls, "POST", path, valid.clone().into_bytes())
            .await
            .unwrap();
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));

        let bytes = valid.as_bytes();
        let non_utf8_string = {
            let at = valid
                .find("\"CREATE\"")
                .or_else(|| valid.find("\"UPDATE\""))
                .unwrap()
                + 1;
            let mut b = bytes.to_vec();
            b[at] = 0xff;
            b
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("malformed JSON", b"{not json".to_vec(), "not an AdmissionReview: key must be a string"),
            ("empty body", Vec::new(), "not an AdmissionReview: EOF while parsing"),
            ("whitespace only", b" \n\t ".to_vec(), "EOF while parsing"),
            ("JSON null", b"null".to_vec(), "invalid type: null, expected struct"),
            ("JSON string", b"\"AdmissionReview\"".to_vec(), "invalid type: string"),
            ("JSON number", b"42".to_vec(), "invalid type: integer `42`"),
            ("trailing garbage", format!("{valid}}}").into_bytes(), "trailing characters"),
            ("two reviews", format!("{valid}{valid}").into_bytes(), "trailing characters"),
            ("truncated after one byte", bytes[..1].to_vec(), "EOF while parsing"),
            ("truncated at a quarter", bytes[..bytes.len() / 4].to_vec(), "EOF while parsing"),
            ("truncated at half", bytes[..bytes.len() / 2].to_vec(), "EOF while parsing"),
            ("truncated inside the object", bytes[..valid.find(object_field).unwrap() + 4].to_vec(), "EOF while parsing"),
            ("last byte missing", bytes[..bytes.len() - 1].to_vec(), "EOF while parsing"),
            ("kind Pod", valid.replacen("\"kind\":\"AdmissionReview\"", "\"kind\":\"Pod\"", 1).into_bytes(), "kind \"Pod\" is not AdmissionReview"),
            ("kind missing", valid.replacen("\"kind\":\"AdmissionReview\",", "", 1).into_bytes(), "missing field `kind`|kind \"\" is not AdmissionReview"),
            ("apiVersion v1beta1", valid.replacen("admission.k8s.io/v1\"", "admission.k8s.io/v1beta1\"", 1).into_bytes(), "apiVersion \"admission.k8s.io/v1beta1\" is not supported: use admission.k8s.io/v1"),
            ("apiVersion v2", valid.replacen("admission.k8s.io/v1\"", "admission.k8s.io/v2\"", 1).into_bytes(), "use admission.k8s.io/v1"),
            ("apiVersion missing", valid.replacen("\"apiVersion\":\"admission.k8s.io/v1\",", "", 1).into_bytes(), "missing field `apiVersion`|apiVersion \"\" is not supported: use admission.k8s.io/v1"),
            ("request missing", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(), "the AdmissionReview has no request"),
            ("request null", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#.to_vec(), "the AdmissionReview has no request"),
            ("request not an object", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":5}"#.to_vec(), "invalid type: integer `5`, expected struct AdmissionRequest"),
            ("only a response", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"x","allowed":true,"status":{}}}"#.to_vec(), "the AdmissionReview has no request"),
            ("request.uid missing", regex_free_remove(&valid, "\"uid\":\"6e2b1f0c-0000-4000-8000-00000000000"), "missing field `uid`"),
            ("request.uid a number", valid.replacen("\"uid\":\"6e2b1f0c", "\"uid\":5,\"x\":\"", 1).into_bytes(), "invalid type: integer `5`, expected a string"),
            ("request.operation unknown", valid.replacen("\"operation\":\"", "\"operation\":\"PATCH\",\"x\":\"", 1).into_bytes(), "unknown variant `PATCH`"),
            ("request.userInfo missing", valid.replacen("\"userInfo\":", "\"x\":", 1).into_bytes(), "missing field `userInfo`"),
            ("non-UTF-8 byte in a string", non_utf8_string, "not UTF-8 text: invalid utf-8 sequence of 1 bytes from index"),
            ("non-UTF-8 body", vec![0xff, 0xfe, b'{', 0x00], "not an AdmissionReview: not UTF-8 text"),
            ("UTF-16 body", valid.encode_utf16().flat_map(u16::to_le_bytes).collect(), "not an AdmissionReview"),
            ("byte-order mark", [&[0xef, 0xbb, 0xbf][..], bytes].concat(), "expected value at line 1 column 1"),
            // In a string the handlers read (fields they never read are skipped unread, their
            // escapes unchecked, as the API server never sends them malformed).
            ("lone surrogate escape", valid.replacen("\"uid\":\"", "\"uid\":\"\\ud800", 1).into_bytes(), "hex escape"),
            ("NUL escape in the uid", valid.replacen("\"uid\":\"", "\"uid\":\"\\u0000", 1).into_bytes(), ""),
            ("duplicate request", valid.replacen("{", "{\"request\":null,", 1).into_bytes(), "duplicate field `request`"),
            ("duplicate kind", valid.replacen("{", "{\"kind\":\"AdmissionReview\",", 1).into_bytes(), "duplicate field `kind`"),
            ("duplicate uid", valid.replacen("\"uid\":", "\"uid\":\"other\",\"uid\":", 1).into_bytes(), "duplicate field `uid`"),
            ("10,000 nested arrays as the body", nested_arrays(10_000).into_bytes(), "invalid type: sequence"),
            ("10,000 nested objects as the body", nested_objects(10_000).into_bytes(), "recursion limit exceeded|kind \"\" is not AdmissionReview"),
            ("10,000 nested arrays as an annotation value", valid.replacen(object_metadata, &format!("{object_metadata}\"annotations\":{{\"a\":{}}},", nested_arrays(10_000)), 1).into_bytes(), "recursion limit exceeded|invalid type: sequence, expected a string"),
            ("10,000 nested objects as an annotation value", valid.replacen(object_metadata, &format!("{object_metadata}\"annotations\":{{\"a\":{}}},", nested_objects(10_000)), 1).into_bytes(), "recursion limit exceeded|invalid type: map, expected a string"),
        ];
        for (case, body, reason) in cases {
            let tls = client.connect(s.addr).await.unwrap();
            let (status, text) = send(tls, "POST", path, body).await.unwrap();
            let text = String::from_utf8_lossy(&text);
            if case == "NUL escape in the uid" {
                // A NUL in a JSON string is legal JSON: the review is answered, the uid echoed.
                assert_eq!(status, 200, "{path} {case}: {text}");
                let answer: Value = serde_json::from_str(&text).unwrap();
                assert!(
                    answer["response"]["uid"]
                        .as_str()
                        .unwrap()
                        .starts_with('\0')
                );
                continue;
            }
            assert_eq!(status, 400, "{path} {case}: {text}");
            assert!(
                reason.split('|').any(|r| text.contains(r)),
                "{path} {case}: {text}"
            );
            *counted.entry(path).or_default() += 1;
        }

        // Deep nesting in fields nothing reads (unknown keys): skipped, or refused at the
        // recursion limit where the decoder buffers them; never a stack overflow or a 5xx.
        for (case, body) in [
            (
                "envelope",
                valid.replacen("{", &format!("{{\"x\":{},", nested_arrays(10_000)), 1),
            ),
            (
                "request",
                valid.replacen(
                    "\"uid\":",
                    &format!("\"x\":{},\"uid\":", nested_arrays(10_000)),
                    1,
                ),
            ),
            (
                "object",
                valid.replacen(
                    object_field,
                    &format!("{object_field}\"x\":{},", nested_arrays(10_000)),
                    1,
                ),
            ),
            (
                "object, objects",
                valid.replacen(
                    object_field,
                    &format!("{object_field}\"x\":{},", nested_objects(10_000)),
                    1,
                ),
            ),
        ] {
            let tls = client.connect(s.addr).await.unwrap();
            let (status, text) = send(tls, "POST", path, body.into_bytes()).await.unwrap();
            let text = String::from_utf8_lossy(&text);
            match status {
                200 => assert!(text.contains("\"allowed\""), "{path} {case}: {text}"),
                400 => {
                    assert!(
                        text.contains("recursion limit exceeded"),
                        "{path} {case}: {text}"
                    );
                    *counted.entry(path).or_default() += 1;
                }
                other => panic!("{path} deep unknown field in the {case}: {other} {text}"),
            }
        }

        // The content type is not consulted: the body decides. A valid review labelled otherwise
        // is answered; a bad one is still a 400 with its reason.
        for content_type in ["text/plain", "application/x-www-form-urlencoded", ""] {
            for (body, want, reason) in [
                (valid.clone(), 200, "\"allowed\""),
                ("{not json".to_string(), 400, "not an AdmissionReview"),
            ] {
                let tls = client.connect(s.addr).await.unwrap();
                let req = http::Request::builder()
                    .method("POST")
                    .uri(format!("https://localhost{path}"))
                    .header("content-type", content_type)
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                let (status, text) = exchange(tls, req).await.unwrap();
                let text = String::from_utf8_lossy(&text);
                assert_eq!(status, want, "{path} {content_type:?}: {text}");
                assert!(text.contains(reason), "{path} {content_type:?}: {text}");
            }
        }
    }
    // Every 400 above was counted under its webhook; nothing was a 5xx.
    let exposition = metrics::encode(&s.registry);
    for (path, n) in &counted {
        let line = format!(
            r#"controller_runtime_webhook_requests_total{{code="400",webhook="{path}"}} {}"#,
            n + 3
        );
        assert!(
            exposition.contains(&line),
            "missing {line} in\n{exposition}"
        );
    }
    assert!(!exposition.contains("code=\"5"), "{exposition}");
}

/// Removes the first occurrence of `prefix` and the rest of the JSON string value it starts, with
/// the comma after it.
fn regex_free_remove(text: &str, prefix: &str) -> Vec<u8> {
    let start = text.find(prefix).unwrap();
    let end = start + prefix.len() + text[start + prefix.len()..].find('"').unwrap() + 1;
    let end = if text[end..].starts_with(',') {
        end + 1
    } else {
        end
    };
    format!("{}{}", &text[..start], &text[end..]).into_bytes()
}

/// Bodies at and past the 5 MiB limit on every webhook: at the limit the review is answered, one
/// byte more is a 413 with a reason, also when the client streams the body without announcing
/// its length.
#[tokio::test]
async fn bodies_at_and_past_the_limit() {
    let s = start(None).await;
    let client = Client::new(&s.bundle.ca_pem);
    for path in server::WEBHOOKS {
        let valid = valid_review(path);
        let padded = |len: usize| {
            let mut body = valid.clone().into_bytes();
            body.resize(len, b' ');
            body
        };
        let tls = client.connect(s.addr).await.unwrap();
        let (status, text) = send(tls, "POST", path, padded(BODY_LIMIT)).await.unwrap();
        assert_eq!(
            status,
            200,
            "{path} at the limit: {}",
            String::from_utf8_lossy(&text)
        );

        let tls = client.connect(s.addr).await.unwrap();
        let (status, text) = send(tls, "POST", path, padded(BODY_LIMIT + 1))
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&text);
        assert_eq!(status, 413, "{path} past the limit: {text}");
        assert!(
            text.contains("at most 5242880 are accepted"),
            "{path}: {text}"
        );

        // Streamed in 64 KiB chunks without a content-length.
        let body = padded(BODY_LIMIT + 1);
        let chunks: Vec<Result<hyper::body::Frame<Bytes>, std::convert::Infallible>> = body
            .chunks(64 * 1024)
            .map(|c| Ok(hyper::body::Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("https://localhost{path}"))
            .header("content-type", "application/json")
            .body(http_body_util::StreamBody::new(futures::stream::iter(
                chunks,
            )))
            .unwrap();
        let tls = client.connect(s.addr).await.unwrap();
        let (status, text) = exchange(tls, req).await.unwrap();
        let text = String::from_utf8_lossy(&text);
        assert_eq!(status, 413, "{path} streamed past the limit: {text}");
        assert!(
            text.contains("at most 5242880 are accepted"),
            "{path}: {text}"
        );
    }
}

/// A request whose client goes away before the answer (its connection closed, the request's
/// future dropped) leaves `requests_in_flight` as it found it.
#[tokio::test]
async fn an_abandoned_request_is_no_longer_in_flight() {
    use tower::ServiceExt as _;
    const STUCK: &str = "/stuck";
    let registry = Registry::new();
    let metrics = WebhookMetrics::register(&registry).unwrap();
    let in_flight = metrics.in_flight.with_label_values(&[STUCK]);
    let state = WebhookState {
        config: Arc::new(
            PlatformConfig::load(
                &repo_file("manifests/base/config.yaml"),
                &Installation::default(),
            )
            .unwrap(),
        )
        .into(),
        metrics,
        platform: Default::default(),
    };
    // A handler that never answers, counted like the webhooks.
    let routes = server::routes().route(
        STUCK,
        axum::routing::post(std::future::pending::<&'static str>),
    );
    let app = server::with_layers(routes, &[STUCK], state, &server::Limits::default());
    let req = http::Request::post(STUCK)
        .body(axum::body::Body::empty())
        .unwrap();
    let request = tokio::spawn(app.oneshot(req));
    eventually("the request in flight", Duration::from_secs(10), || {
        let n = in_flight.get();
        async move { (n == 1).then_some(()) }
    })
    .await;
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());
    assert_eq!(in_flight.get(), 0);
}

/// A valid review cut at every offset, through the router in process: always a 400 naming the
/// early end (an AdmissionReview is one JSON object, so no proper prefix of it is valid JSON).
#[tokio::test]
async fn a_review_truncated_at_any_offset_is_a_400() {
    use tower::ServiceExt as _;
    let config = PlatformConfig::load(
        &repo_file("manifests/base/config.yaml"),
        &Installation::default(),
    )
    .unwrap();
    let state = WebhookState {
        config: Arc::new(config).into(),
        metrics: WebhookMetrics::register(&Registry::new()).unwrap(),
        platform: Default::default(),
    };
    let app = server::router(state, &server::Limits::default());
    for path in server::WEBHOOKS {
        let valid = valid_review(path);
        for cut in 0..valid.len() {
            let req = http::Request::builder()
                .method("POST")
                .uri(path)
                .header("content-type", "application/json")
                .body(axum::body::Body::from(valid.as_bytes()[..cut].to_vec()))
                .unwrap();
            let resp = app.clone().oneshot(req).await.unwrap();
            let status = resp.status().as_u16();
            let text = resp.into_body().collect().await.unwrap().to_bytes();
            let text = String::from_utf8_lossy(&text);
            assert_eq!(status, 400, "{path} cut at {cut}: {text}");
            assert!(
                text.starts_with("the body is not an AdmissionReview: EOF while parsing"),
                "{path} cut at {cut}: {text}"
            );
        }
    }
}

/// The object of a review that is not a Site: denied naming the field (not a 5xx, not allowed).
#[tokio::test]
async fn objects_of_the_wrong_kind_are_denied_naming_the_field() {
    let s = start(None).await;
    let client = Client::new(&s.bundle.ca_pem);
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "docs-handbook", "namespace": "sites"}, "data": {"a": "b"}});
    let mut site_shaped = site(8000);
    site_shaped["apiVersion"] = json!("v1");
    site_shaped["kind"] = json!("ConfigMap");
    let mut other_version = site(8000);
    other_version["apiVersion"] = json!("sites.ecmwf.int/v2");
    let cases = [
        (
            configmap,
            "object: kind \"ConfigMap\" of apiVersion \"v1\" is not a Site",
        ),
        (
            site_shaped,
            "object: kind \"ConfigMap\" of apiVersion \"v1\" is not a Site",
        ),
        (
            other_version,
            "object: kind \"Site\" of apiVersion \"sites.ecmwf.int/v2\" is not a Site",
        ),
        (
            json!({"metadata": {"name": "x"}, "spec": 5}),
            "object: not a valid Site: invalid type: integer `5`",
        ),
        (json!([1, 2]), ""),
        (json!("a string"), ""),
    ];
    for (object, reason) in cases {
        let tls = client.connect(s.addr).await.unwrap();
        let (status, body) = send(tls, "POST", server::VALIDATE_SITES, review(object.clone()))
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&body);
        if !object.is_object() {
            // Not even an object: the envelope itself is malformed.
            assert_eq!(status, 400, "{object}: {text}");
            assert!(
                text.contains("not an AdmissionReview: invalid type"),
                "{object}: {text}"
            );
            continue;
        }
        assert_eq!(status, 200, "{object}: {text}");
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(answer["response"]["allowed"], false, "{object}: {text}");
        assert_eq!(answer["response"]["status"]["code"], 403, "{text}");
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(message.starts_with(reason), "{object}: {message}");
        assert_eq!(
            answer["response"]["status"]["details"]["causes"][0]["field"],
            "object"
        );
    }
    // A Site sent to the configuration webhook is not the sites-config ConfigMap: let through
    // (the webhook configuration's matchConditions only send that ConfigMap).
    let tls = client.connect(s.addr).await.unwrap();
    let (status, body) = send(tls, "POST", server::VALIDATE_CONFIG, review(site(8000)))
        .await
        .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
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
    // ECDHE-ECDSA/RSA-AES128-GCM-SHA256
    client_hello_with(version, &[0xc0, 0x2b, 0xc0, 0x2f])
}

/// [`client_hello`] offering only `suites` (two bytes each).
fn client_hello_with(version: [u8; 2], suites: &[u8]) -> Vec<u8> {
    let mut body = version.to_vec();
    body.extend([7u8; 32]); // random
    body.push(0); // session id
    body.extend((suites.len() as u16).to_be_bytes());
    body.extend(suites);
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

/// The first bytes (up to 7, one alert record) the server answers a raw ClientHello with, up to
/// the point it closes the connection. The deadline only guards against a hang: a server that
/// says nothing is not refusing anything, and the callers require an answer.
async fn raw_answer(addr: std::net::SocketAddr, hello: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(hello).await.unwrap();
    let mut answer = vec![0u8; 7];
    let mut got = 0;
    while got < answer.len() {
        match tokio::time::timeout(Duration::from_secs(60), tcp.read(&mut answer[got..])).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got += n,
        }
    }
    answer.truncate(got);
    answer
}

/// The TLS alert descriptions a refusal may carry (RFC 8446 6.2).
const PROTOCOL_VERSION: u8 = 70;
const HANDSHAKE_FAILURE: u8 = 40;

/// The description of the fatal alert `answer` is (a whole alert record: content type 21,
/// length 2, level fatal), or None for anything else: a ServerHello, another record, silence.
fn fatal_alert(answer: &[u8]) -> Option<u8> {
    match answer {
        [0x15, 0x03, _, 0x00, 0x02, 0x02, description] => Some(*description),
        _ => None,
    }
}

/// Whether `answer` starts with a ServerHello (a handshake record of type 2).
fn server_hello(answer: &[u8]) -> bool {
    answer.first() == Some(&0x16) && answer.get(5) == Some(&0x02)
}

/// TLS 1.0, 1.1 and weak TLS 1.2 suites are refused: the server answers with a fatal alert that
/// names the reason (protocol_version, handshake_failure), not merely silence, which a server that
/// is down gives too. Each refused hello is paired with the same hello at TLS 1.2 with a strong
/// suite, answered with a ServerHello by the same server, so only the version or the suite
/// decides; a rustls client then still completes a handshake.
#[tokio::test]
async fn tls_below_1_2_and_weak_suites_are_refused() {
    let s = start(None).await;
    let accepted = || async {
        let answer = raw_answer(s.addr, &client_hello([0x03, 0x03])).await;
        assert!(
            server_hello(&answer),
            "a TLS 1.2 hello gets a ServerHello, got {answer:02x?}"
        );
    };
    // The same hello as TLS 1.1 and 1.0: a protocol_version alert, never a ServerHello.
    for version in [[0x03, 0x02], [0x03, 0x01]] {
        accepted().await;
        let old = raw_answer(s.addr, &client_hello(version)).await;
        assert_eq!(
            fatal_alert(&old),
            Some(PROTOCOL_VERSION),
            "the server answered a {version:02x?} hello with {old:02x?}"
        );
    }
    // TLS 1.2 offering only weak suites (static RSA key exchange, CBC, 3DES, RC4, NULL): a
    // handshake_failure alert, never a ServerHello.
    for (name, suite) in [
        ("RSA-AES128-CBC-SHA", [0x00, 0x2f]),
        ("RSA-AES256-GCM-SHA384", [0x00, 0x9d]),
        ("ECDHE-RSA-AES128-CBC-SHA", [0xc0, 0x13]),
        ("RSA-3DES-EDE-CBC-SHA", [0x00, 0x0a]),
        ("RSA-RC4-128-SHA", [0x00, 0x05]),
        ("RSA-NULL-SHA256", [0x00, 0x3b]),
    ] {
        accepted().await;
        let weak = raw_answer(s.addr, &client_hello_with([0x03, 0x03], &suite)).await;
        assert_eq!(
            fatal_alert(&weak),
            Some(HANDSHAKE_FAILURE),
            "the server answered {name} with {weak:02x?}"
        );
    }
    // The same server still completes a TLS 1.2 handshake.
    let client = Client {
        versions: &[&rustls::version::TLS12],
        ..Client::new(&s.bundle.ca_pem)
    };
    let tls = client.connect(s.addr).await.expect("a TLS 1.2 handshake");
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_concurrent_requests_fails_no_request() {
    let s = start(None).await;
    // Clients trust every CA the rotation will use, as the API server does with a caBundle that
    // holds the old and the new CA during a rotation.
    // A new certificate every second for 10 seconds.
    let bundles: Vec<Bundle> = (0..10)
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
        let next = tokio::time::Instant::now() + Duration::from_secs(1);
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
        // Requests keep flowing under this certificate until the next second (pacing, not
        // synchronisation: the rotation itself was awaited above).
        tokio::time::sleep_until(next).await;
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

/// Reads from `conn` until the server closes it (EOF or a reset); how long that took, or None
/// when it stayed open for `within`.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    conn: &mut S,
    within: Duration,
) -> Option<Duration> {
    use tokio::io::AsyncReadExt as _;
    let started = tokio::time::Instant::now();
    let mut buf = [0u8; 1024];
    let deadline = started + within;
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            // A 408 or similar before the close is fine.
            Ok(Ok(_)) => continue,
        }
    }
}

pub(super) fn metric_line(registry: &Registry, name: &str) -> Option<f64> {
    metrics::encode(registry)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.parse().ok())
}

fn short_limits() -> server::Limits {
    server::Limits {
        header_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(60),
        max_connections: 100,
        ..server::Limits::default()
    }
}

#[tokio::test]
async fn a_client_that_sends_half_a_header_is_dropped_within_the_header_timeout() {
    use tokio::io::AsyncWriteExt as _;
    let s = start_limited(None, short_limits()).await;
    let client = Client::new(&s.bundle.ca_pem);
    // Half an HTTP/1.1 request header, then nothing.
    let mut half = client.connect(s.addr).await.unwrap();
    half.write_all(b"POST /validate-sites HTTP/1.1\r\nHost: loc")
        .await
        .unwrap();
    half.flush().await.unwrap();
    // Nothing at all after the handshake.
    let mut silent = client.connect(s.addr).await.unwrap();
    // A prefix of the HTTP/2 preface (the protocol is not known yet).
    let mut preface = client.connect(s.addr).await.unwrap();
    preface.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    preface.flush().await.unwrap();
    for (what, conn) in [
        ("half a header", &mut half),
        ("silent", &mut silent),
        ("half a preface", &mut preface),
    ] {
        let took = closed_within(conn, Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("{what}: still open after 10 s"));
        assert!(
            took < Duration::from_secs(5),
            "{what}: closed after {took:?}"
        );
    }
    // A client that completes its request in time is served.
    served(&s, &client).await;
    eventually(
        "the closed connections to be uncounted",
        Duration::from_secs(10),
        || async {
            (metric_line(&s.registry, "sites_webhook_open_connections") == Some(0.0)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn the_connection_past_the_limit_is_refused_and_counted() {
    let limits = server::Limits {
        header_read_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(60),
        max_connections: 3,
        ..server::Limits::default()
    };
    let s = start_limited(None, limits).await;
    let client = Client::new(&s.bundle.ca_pem);
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(client.connect(s.addr).await.unwrap());
    }
    assert_eq!(
        metric_line(&s.registry, "sites_webhook_connections_refused_total"),
        Some(0.0)
    );
    // The fourth: accepted by the kernel, closed by the server before the TLS handshake.
    assert!(
        client.connect(s.addr).await.is_err(),
        "the 4th connection is refused"
    );
    assert_eq!(
        metric_line(&s.registry, "sites_webhook_connections_refused_total"),
        Some(1.0)
    );
    assert_eq!(
        metric_line(&s.registry, "sites_webhook_open_connections"),
        Some(3.0)
    );
    // One closes: there is room again.
    drop(open.pop());
    served_once_open(&s, &client, 2.0).await;
    assert_eq!(
        metric_line(&s.registry, "sites_webhook_connections_refused_total"),
        Some(1.0)
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let limits = server::Limits {
        // Longer than the idle timeout: the idle timeout is what closes.
        header_read_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_millis(500),
        max_connections: 100,
        ..server::Limits::default()
    };
    let s = start_limited(None, limits).await;
    // HTTP/1.1, raw: one keep-alive request, its response, then silence until the server closes.
    {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut tls = Client::new(&s.bundle.ca_pem).connect(s.addr).await.unwrap();
        let body = review(site(8080));
        let head = format!(
            "POST /validate-sites HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        tls.write_all(&body).await.unwrap();
        tls.flush().await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains("\"uid\"") {
            let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf))
                .await
                .expect("a response")
                .unwrap();
            assert!(n > 0, "closed before the response");
            got.extend_from_slice(&buf[..n]);
        }
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&got)
        );
        let took = closed_within(&mut tls, Duration::from_secs(10))
            .await
            .expect("the idle HTTP/1.1 connection is closed");
        assert!(took >= Duration::from_millis(300), "closed after {took:?}");
    }
    for alpn in [HTTP1, &[b"h2".as_slice()][..]] {
        let client = Client {
            alpn,
            ..Client::new(&s.bundle.ca_pem)
        };
        let tls = client.connect(s.addr).await.unwrap();
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(tls);
        let req = || {
            http::Request::builder()
                .method("POST")
                .uri("https://localhost/validate-sites")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(review(site(8080)))))
                .unwrap()
        };
        // One request on a keep-alive connection, then nothing: the server closes it, which
        // ends the client's connection task.
        let started = tokio::time::Instant::now();
        // The request sender stays alive: a client drops an unused connection by itself.
        let (conn, _sender): (tokio::task::JoinHandle<()>, Box<dyn std::any::Any + Send>) = if h2 {
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .unwrap();
            let task = tokio::spawn(async move {
                let _ = conn.await;
            });
            let resp = sender.send_request(req()).await.unwrap();
            assert_eq!(resp.status(), 200);
            (task, Box::new(sender))
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            let task = tokio::spawn(async move {
                let _ = conn.await;
            });
            let resp = sender.send_request(req()).await.unwrap();
            assert_eq!(resp.status(), 200);
            let _ = resp.into_body().collect().await.unwrap();
            (task, Box::new(sender))
        };
        tokio::time::timeout(Duration::from_secs(10), conn)
            .await
            .unwrap_or_else(|_| panic!("h2={h2}: the idle connection is still open after 10 s"))
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "h2={h2}: closed after {:?}, before the idle timeout",
            started.elapsed()
        );
    }
}

/// Writes a request header announcing a body of `len` bytes on a fresh connection, and `sent`
/// bytes of that body (spaces), then nothing more.
pub(super) async fn begin_body(
    client: &Client<'_>,
    addr: std::net::SocketAddr,
    len: usize,
    sent: usize,
) -> TlsStream<TcpStream> {
    begin_body_from(client, addr, [127, 0, 0, 1], len, sent).await
}

/// [`begin_body`] from the loopback address `from` (another peer than 127.0.0.1).
pub(super) async fn begin_body_from(
    client: &Client<'_>,
    addr: std::net::SocketAddr,
    from: [u8; 4],
    len: usize,
    sent: usize,
) -> TlsStream<TcpStream> {
    use tokio::io::AsyncWriteExt as _;
    let mut tls = client.connect_from(addr, from).await.unwrap();
    let head = format!(
        "POST /validate-sites HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&vec![b' '; sent]).await.unwrap();
    tls.flush().await.unwrap();
    tls
}

/// A timeout no test waits for: what a test with it shows cannot be that timeout's doing.
pub(super) const NEVER: Duration = Duration::from_secs(3600);

/// Clients in the middle of their request bodies, holding every connection slot but the API
/// server's: its keep-alive connection is served all along, a new connection is refused, and
/// the slots come free when the slow clients go. No timeout fires meanwhile (all of them are
/// [`NEVER`]), so however long the setup takes, the slow requests are in flight while the
/// API server's are served.
#[tokio::test]
async fn slow_bodies_at_the_connection_cap_leave_the_api_server_served() {
    const CAP: usize = 6;
    let limits = server::Limits {
        header_read_timeout: NEVER,
        idle_timeout: NEVER,
        max_connections: CAP,
        body_timeout: NEVER,
        ..server::Limits::default()
    };
    let s = start_limited(None, limits).await;
    let client = Client::new(&s.bundle.ca_pem);
    // The API server's connection, opened first and kept alive across its requests.
    let io = TokioIo::new(client.connect(s.addr).await.unwrap());
    let (mut api, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let mut slow = Vec::new();
    for _ in 1..CAP {
        slow.push(begin_body(&client, s.addr, 1 << 20, 1).await);
    }
    let in_flight = r#"controller_runtime_webhook_requests_in_flight{webhook="/validate-sites"}"#;
    eventually(
        "the slow requests in flight",
        Duration::from_secs(10),
        || async { (metric_line(&s.registry, in_flight) == Some((CAP - 1) as f64)).then_some(()) },
    )
    .await;
    assert!(
        client.connect(s.addr).await.is_err(),
        "at the cap, a new connection is refused"
    );
    for i in 0..3 {
        let req = http::Request::post("https://localhost/validate-sites")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(review(site(8080)))))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(60), api.send_request(req))
            .await
            .unwrap_or_else(|_| panic!("the API server's request {i} is not answered"))
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.unwrap();
    }
    // The slow requests were in flight all along (the API server's were served beside them).
    assert_eq!(metric_line(&s.registry, in_flight), Some((CAP - 1) as f64));
    drop(slow);
    served_once_open(&s, &client, 1.0).await;
}

/// Clients that trickle their bodies steadily, as many as there are connection slots: each is
/// answered 408 once the body timeout has passed since its header, and its connection closed,
/// which frees its slot. Measured by each client from just before it sent its header (the server
/// cannot start the timeout sooner), so a slow setup cannot make an answer look late or early;
/// and each answer must come while its client was still sending (less than the timeout after
/// its last byte), which a timeout that every byte restarts would never do.
#[tokio::test]
async fn a_trickled_body_is_answered_408_once_the_body_timeout_passes() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    const CAP: usize = 6;
    const BODY_TIMEOUT: Duration = Duration::from_secs(5);
    let limits = server::Limits {
        header_read_timeout: NEVER,
        idle_timeout: NEVER,
        max_connections: CAP,
        body_timeout: BODY_TIMEOUT,
        ..server::Limits::default()
    };
    let s = start_limited(None, limits).await;
    let client = Client::new(&s.bundle.ca_pem);
    let mut trickles = Vec::new();
    for _ in 0..CAP {
        // The TLS handshake before the header: the timeout starts at the header's end.
        let mut tls = client.connect(s.addr).await.unwrap();
        let head = format!(
            "POST /validate-sites HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            1 << 20
        );
        // One byte every 50 ms, until the answer comes; then the answer, until the server
        // closes. Returns the answer, when it came and when the client last began to write,
        // both from just before the header.
        trickles.push(tokio::spawn(async move {
            let header_sent = tokio::time::Instant::now();
            tls.write_all(head.as_bytes()).await.unwrap();
            tls.write_all(b" ").await.unwrap();
            tls.flush().await.unwrap();
            let mut last_write = header_sent;
            let mut answered = None;
            let mut answer = Vec::new();
            let mut buf = [0u8; 1024];
            loop {
                tokio::select! {
                    read = tls.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            answered.get_or_insert_with(|| header_sent.elapsed());
                            answer.extend_from_slice(&buf[..n]);
                        }
                    },
                    _ = tokio::time::sleep(Duration::from_millis(50)), if answer.is_empty() => {
                        last_write = tokio::time::Instant::now();
                        let _ = tls.write_all(b" ").await;
                        let _ = tls.flush().await;
                    }
                }
            }
            (
                String::from_utf8_lossy(&answer).into_owned(),
                answered,
                last_write - header_sent,
            )
        }));
    }
    for trickle in trickles {
        let (answer, answered, last_write) = tokio::time::timeout(Duration::from_secs(60), trickle)
            .await
            .expect("the slow client is answered and its connection closed")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(
            answer.contains("the body did not arrive within 5s"),
            "{answer}"
        );
        let answered = answered.unwrap();
        assert!(
            answered >= BODY_TIMEOUT,
            "answered {answered:?} after the header, before the body timeout"
        );
        assert!(
            answered - last_write < BODY_TIMEOUT,
            "answered {:?} after the client's last byte: the server waited for the client \
             to fall silent, not for the body timeout",
            answered - last_write
        );
    }
    served_once_open(&s, &client, 0.0).await;
}

/// Waits until `open` connections are open (slots came free), then a review on a new connection
/// is served.
async fn served_once_open(s: &Server, client: &Client<'_>, open: f64) {
    eventually("slots to come free", Duration::from_secs(10), || async {
        (metric_line(&s.registry, "sites_webhook_open_connections") == Some(open)).then_some(())
    })
    .await;
    served(s, client).await;
}

/// A Site review on a new connection is answered 200.
pub(super) async fn served(s: &Server, client: &Client<'_>) {
    let (status, text) = ask(s, client).await;
    assert_eq!(status, 200, "{text}");
}

/// The answer to a Site review on a new connection: status and text.
pub(super) async fn ask(s: &Server, client: &Client<'_>) -> (u16, String) {
    let (status, text) = send(
        client.connect(s.addr).await.unwrap(),
        "POST",
        "/validate-sites",
        review(site(8080)),
    )
    .await
    .unwrap();
    (status, String::from_utf8_lossy(&text).into_owned())
}

/// The memory budget: a body counts as it arrives (not as announced); while bodies on their
/// way hold the general part, an ordinary review is served from the reserve, and a larger one
/// waits, then is answered 503 naming the budget; the budget comes back when its holders go; a
/// request that alone needs more than one request may hold is a 413.
#[tokio::test]
async fn requests_past_the_memory_budget_wait_then_get_503() {
    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;
    // 14 MiB general, a reserve of 2 MiB, small requests of at most 512 KiB.
    let limits = server::Limits {
        body_timeout: Duration::from_secs(120),
        memory_budget: 16 * MIB,
        ..server::Limits::default()
    };
    let s = start_limited(None, limits).await;
    let client = Client::new(&s.bundle.ca_pem);
    let in_use =
        || metric_line(&s.registry, "sites_webhook_memory_in_use_bytes").unwrap_or(-1.0) as usize;
    let held = |at_least: usize| {
        eventually(
            "the bodies sent to be held",
            Duration::from_secs(30),
            move || async move { (in_use() >= at_least).then_some(()) },
        )
    };
    // 300 KiB sent of a body announced as 5 MiB: what came is held (with room to grow, at
    // most twice as much), not what was announced.
    let first = begin_body(&client, s.addr, BODY_LIMIT, 300 * KIB).await;
    held(300 * KIB).await;
    let first_holds = in_use();
    assert!(first_holds <= 601 * KIB, "{first_holds}");
    // A review (with what decoding it takes, about 310 KiB) fits beside it.
    let ask = || ask(&s, &client);
    assert_eq!(ask().await.0, 200);
    // Three more slow clients take all of the general part but 100 KiB, each from an address
    // of its own (a peer's bodies may hold half of it at most).
    let mut rest = 14 * MIB - first_holds - 100 * KIB;
    let mut slow = vec![first];
    while rest > 0 {
        let part = rest.min(BODY_LIMIT - KIB);
        let from = [127, 0, 0, 1 + slow.len() as u8];
        slow.push(begin_body_from(&client, s.addr, from, part + 1, part).await);
        rest -= part;
    }
    held(14 * MIB - 100 * KIB).await;
    // An ordinary review is served from the reserve.
    let (status, text) = ask().await;
    assert_eq!(status, 200, "{text}");
    // A review needing more than a small request (a 300 KiB body: about 3.3 MiB) waits for
    // the general part, then is refused.
    let mut big = review(site(8080));
    big.resize(300 * KIB, b' ');
    let big = || async {
        send(
            client.connect(s.addr).await.unwrap(),
            "POST",
            "/validate-sites",
            big.clone(),
        )
        .await
        .map(|(status, text)| (status, String::from_utf8_lossy(&text).into_owned()))
        .unwrap()
    };
    let (status, text) = big().await;
    assert_eq!(status, 503, "{text}");
    assert!(
        text.contains("requests in flight hold its memory budget (16 MiB)"),
        "{text}"
    );
    // The slow clients go: the budget is back, and the large review is served.
    drop(slow);
    eventually(
        "the budget to come back",
        Duration::from_secs(10),
        || async { (in_use() == 0).then_some(()) },
    )
    .await;
    assert_eq!(big().await.0, 200);
    // 1.5 MiB whose decoding may take ten times as much: more than one request may hold.
    let mut huge = review(site(8080));
    huge.resize(1536 * KIB, b' ');
    let (status, text) = send(
        client.connect(s.addr).await.unwrap(),
        "POST",
        "/validate-sites",
        huge,
    )
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&text);
    assert_eq!(status, 413, "{text}");
    assert!(
        text.contains("more memory than the webhook's budget allows one request (14 of 16 MiB)"),
        "{text}"
    );
    assert_eq!(
        metric_line(
            &s.registry,
            r#"controller_runtime_webhook_requests_total{code="503",webhook="/validate-sites"}"#
        ),
        Some(1.0)
    );
}

/// Sixteen hostile reviews at once, of the two shapes that once made answers or expansions
/// huge (a Site whose every environment key is invalid, on both Site webhooks; a configuration
/// aliasing a long scalar 10,000 times): every one is answered, none dropped, with a 200 (a
/// short denial, or the mutating webhook's answer) or a 503 with Retry-After when the memory
/// budget or the turn of heavy reviews is held; each client retries after its 503 as the API
/// server's callers do, and every one of the sixteen ends with its 200 within a minute. The
/// budget is given back once the answers are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_hostile_reviews_at_once_get_short_answers_or_503() {
    const MIB: usize = 1 << 20;
    let limits = server::Limits {
        body_timeout: Duration::from_secs(120),
        memory_budget: 24 * MIB,
        ..server::Limits::default()
    };
    let s = std::sync::Arc::new(start_limited(None, limits).await);
    let env: serde_json::Map<String, Value> = (0..40_000)
        .map(|i| (format!("9 bad=key/{i:07}"), json!("")))
        .collect();
    let mut invalid = site(8080);
    invalid["spec"]["configuration"]["applications"][0]["env"] = Value::Object(env);
    let invalid = review(invalid);
    let mut yaml = format!("bomb: &a \"{}\"\n", "x".repeat(30_000));
    for (prev, name) in [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")] {
        yaml.push_str(&format!(
            "{name}: &{name} [{}]\n",
            vec![format!("*{prev}"); 10].join(",")
        ));
    }
    let aliases = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "6e2b1f0c-0000-4000-8000-000000000002",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "sites-config", "namespace": "sites", "operation": "UPDATE",
            "userInfo": {"username": "a"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "sites-config", "namespace": "sites"},
                       "data": {"config.yaml": yaml}}
        }
    }))
    .unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (path, body) = match i % 3 {
            0 => ("/validate-sites", invalid.clone()),
            1 => ("/mutate-sites", invalid.clone()),
            _ => ("/validate-config", aliases.clone()),
        };
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let client = Client::new(&s.bundle.ca_pem);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            let mut refused = 0;
            loop {
                let tls = client.connect(s.addr).await.expect("connected");
                let io = TokioIo::new(tls);
                let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
                tokio::spawn(conn);
                let req = http::Request::builder()
                    .method("POST")
                    .uri(format!("https://localhost{path}"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body.clone())))
                    .unwrap();
                let resp = sender.send_request(req).await.expect("answered");
                let status = resp.status().as_u16();
                let retry_after = resp.headers().contains_key("retry-after");
                let length = resp
                    .headers()
                    .get("content-length")
                    .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                // The answer's length is announced, not chunked.
                assert_eq!(length, Some(body.len()), "{path}");
                match status {
                    200 => {
                        assert!(body.len() < 64 * 1024, "{path}: {} bytes", body.len());
                        let answer: Value = serde_json::from_slice(&body).unwrap();
                        if path != "/mutate-sites" {
                            assert_eq!(answer["response"]["allowed"], json!(false), "{path}");
                        }
                        return;
                    }
                    503 => {
                        assert!(retry_after, "{path}: a 503 without Retry-After");
                        refused += 1;
                        assert!(
                            tokio::time::Instant::now() < deadline,
                            "{path}: still refused after {refused} tries"
                        );
                        // Retry-After: 1, a tenth of it: the test waits for nothing else.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => panic!("{path}: {other} {}", String::from_utf8_lossy(&body)),
                }
            }
        }));
    }
    // Each task ends only with its 200 (or fails the test).
    for task in tasks {
        task.await.unwrap();
    }
    let in_use =
        || metric_line(&s.registry, "sites_webhook_memory_in_use_bytes").unwrap_or(-1.0) as usize;
    eventually("the budget given back", Duration::from_secs(10), || async {
        (in_use() == 0).then_some(())
    })
    .await;
}
