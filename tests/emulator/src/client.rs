//! A small client of a Kubernetes API server, for the components the emulator runs against other
//! API servers ([`crate::node`]): the kubeconfig's current context (server URL, CA, bearer token)
//! and JSON requests over one kept-alive HTTP/1.1 connection, TLS-verified against that CA.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use serde_json::Value;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(15);

/// What a kubeconfig's current context says about reaching its API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `https://host:port` or `http://host:port`, without a trailing slash (a path prefix is
    /// kept).
    pub server: String,
    /// PEM of the CA the server certificate must chain to; None: the system has no roots here,
    /// so an `https` server without one is refused.
    pub ca_pem: Option<Vec<u8>>,
    /// Bearer token.
    pub token: Option<String>,
}

/// Reads a kubeconfig file (see [`parse_kubeconfig`]); relative paths in it are relative to its
/// folder.
pub fn load_kubeconfig(path: &Path) -> Result<Target, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    parse_kubeconfig(&text, &|p| {
        let p = dir.join(p);
        std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    })
}

/// The current context of a kubeconfig (YAML or JSON): its cluster's `server`,
/// `certificate-authority-data` (base64) or `certificate-authority` (a file, read with `read`),
/// and its user's `token` or `tokenFile`. Client certificates are not supported.
pub fn parse_kubeconfig(
    text: &str,
    read: &dyn Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<Target, String> {
    let cfg: Value =
        serde_yaml_ng::from_str(text).map_err(|e| format!("the kubeconfig is not YAML: {e}"))?;
    let current = cfg["current-context"]
        .as_str()
        .filter(|c| !c.is_empty())
        .ok_or("the kubeconfig has no current-context")?;
    let named = |list: &str, name: &str, field: &str| -> Result<Value, String> {
        cfg[list]
            .as_array()
            .and_then(|items| items.iter().find(|i| i["name"] == name))
            .map(|i| i[field].clone())
            .ok_or_else(|| format!("the kubeconfig has no {list} entry named {name:?}"))
    };
    let context = named("contexts", current, "context")?;
    let cluster_name = context["cluster"]
        .as_str()
        .ok_or_else(|| format!("context {current:?} names no cluster"))?;
    let cluster = named("clusters", cluster_name, "cluster")?;
    let server = cluster["server"]
        .as_str()
        .filter(|s| s.starts_with("https://") || s.starts_with("http://"))
        .ok_or_else(|| format!("cluster {cluster_name:?} has no http(s) server URL"))?
        .trim_end_matches('/')
        .to_string();
    let ca_pem = match (
        cluster["certificate-authority-data"].as_str(),
        cluster["certificate-authority"].as_str(),
    ) {
        (Some(data), _) if !data.is_empty() => Some(
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| format!("certificate-authority-data is not base64: {e}"))?,
        ),
        (_, Some(file)) if !file.is_empty() => Some(read(file)?),
        _ => None,
    };
    let user = match context["user"].as_str() {
        Some(u) if !u.is_empty() => named("users", u, "user")?,
        _ => Value::Null,
    };
    let token = match (user["token"].as_str(), user["tokenFile"].as_str()) {
        (Some(t), _) if !t.is_empty() => Some(t.to_string()),
        (_, Some(file)) if !file.is_empty() => {
            Some(String::from_utf8_lossy(&read(file)?).trim().to_string())
        }
        _ => None,
    };
    Ok(Target {
        server,
        ca_pem,
        token,
    })
}

/// An answer: the status code and the body (JSON when the server sent JSON).
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub body: Value,
}

impl Response {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The answer as an error message: `<code> <Status message>`.
    pub fn error(&self, what: &str) -> String {
        let message = self.body["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| self.body.to_string());
        format!("{what}: {} {message}", self.status)
    }
}

/// A client of one API server.
pub struct Client {
    /// `host:port`, the Host header and where to connect.
    authority: String,
    /// The TLS server name (an IP address or a DNS name).
    host: String,
    /// Path prefix of the server URL (usually empty).
    prefix: String,
    tls: Option<tokio_rustls::TlsConnector>,
    token: Option<String>,
    conn: tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>,
}

impl Client {
    pub fn new(target: &Target) -> Result<Client, String> {
        let (https, rest) = match target.server.split_once("://") {
            Some(("https", rest)) => (true, rest),
            Some(("http", rest)) => (false, rest),
            _ => return Err(format!("{}: not an http(s) URL", target.server)),
        };
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = split_host_port(authority, if https { 443 } else { 80 })
            .ok_or_else(|| format!("{}: bad host or port", target.server))?;
        let tls = if https {
            let pem = target.ca_pem.as_deref().ok_or_else(|| {
                format!(
                    "{}: the kubeconfig names no certificate authority",
                    target.server
                )
            })?;
            Some(connector(pem)?)
        } else {
            None
        };
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Client {
            authority,
            host,
            prefix: prefix.to_string(),
            tls,
            token: target.token.clone(),
            conn: tokio::sync::Mutex::new(None),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Response, String> {
        self.request("GET", path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Response, String> {
        self.request("POST", path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<Response, String> {
        self.request("PUT", path, Some(body)).await
    }

    pub async fn delete(&self, path: &str, body: &Value) -> Result<Response, String> {
        self.request("DELETE", path, Some(body)).await
    }

    /// One request with a JSON body; a kept connection the server closed is replaced once.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response, String> {
        let what = format!("{method} {path}");
        let body = body.map(|b| Bytes::from(b.to_string()));
        let mut conn = self.conn.lock().await;
        loop {
            let (mut sender, reused) = match conn.take() {
                Some(s) if !s.is_closed() => (s, true),
                _ => (
                    self.connect().await.map_err(|e| format!("{what}: {e}"))?,
                    false,
                ),
            };
            let req = self.build(method, path, body.clone())?;
            let sent = tokio::time::timeout(TIMEOUT, async {
                sender.ready().await?;
                let resp = sender.send_request(req).await?;
                let status = resp.status().as_u16();
                let bytes = resp.into_body().collect().await?.to_bytes();
                Ok::<_, hyper::Error>((status, bytes))
            })
            .await;
            match sent {
                Ok(Ok((status, bytes))) => {
                    *conn = Some(sender);
                    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                        Value::String(String::from_utf8_lossy(&bytes).into_owned())
                    });
                    return Ok(Response { status, body });
                }
                // A kept connection the server closed meanwhile: once more on a new one.
                Ok(Err(e)) if reused => tracing::debug!("{what}: {e}; reconnecting"),
                Ok(Err(e)) => return Err(format!("{what}: {e}")),
                Err(_) => return Err(format!("{what}: no answer within {TIMEOUT:?}")),
            }
        }
    }

    fn build(
        &self,
        method: &str,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<hyper::Request<Full<Bytes>>, String> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header("host", &self.authority)
            .header("accept", "application/json")
            .header("user-agent", "sites-emulator-kubelet");
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        req.body(Full::new(body.unwrap_or_default()))
            .map_err(|e| e.to_string())
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let tcp = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| format!("dial tcp {}: {e}", self.authority))?;
        let _ = tcp.set_nodelay(true);
        let sender = match &self.tls {
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                    .map_err(|e| format!("{}: {e}", self.host))?;
                let tls = connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("tls: {e}"))?;
                handshake(tls).await?
            }
            None => handshake(tcp).await?,
        };
        Ok(sender)
    }
}

async fn handshake<S>(io: S) -> Result<SendRequest<Full<Bytes>>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(sender)
}

/// A TLS connector trusting only the CA certificates in `pem`.
fn connector(pem: &[u8]) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("the certificate authority is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("bad CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("the certificate authority holds no certificate".into());
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// `host`, `host:port`, `[v6]`, `[v6]:port` → (host, port).
fn split_host_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    if authority.is_empty() {
        return None;
    }
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host.to_string(), port.parse().ok()?)),
        Some(_) => None,
        None => Some((authority.to_string(), default_port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n\
             contexts:\n- name: other\n  context: {{cluster: nowhere, user: nobody}}\n\
             - name: ctx\n  context: {{cluster: c, user: u, namespace: default}}\n\
             clusters:\n- name: c\n  cluster: {cluster}\n\
             users:\n- name: u\n  user: {user}\n"
        )
    }

    #[test]
    fn kubeconfigs_give_server_ca_and_token() {
        let files = |p: &str| match p {
            "/etc/ca.crt" => Ok(b"PEM FROM FILE".to_vec()),
            "token" => Ok(b"file-token\n".to_vec()),
            other => Err(format!("cannot read {other}")),
        };
        let target = |server: &str, ca: Option<&[u8]>, token: Option<&str>| Target {
            server: server.into(),
            ca_pem: ca.map(<[u8]>::to_vec),
            token: token.map(str::to_string),
        };
        // (kubeconfig, expected)
        let cases: Vec<(String, Result<Target, &str>)> = vec![
            (
                kubeconfig(
                    "{server: 'https://127.0.0.1:6443', certificate-authority: /etc/ca.crt}",
                    "{token: abc}",
                ),
                Ok(target(
                    "https://127.0.0.1:6443",
                    Some(b"PEM FROM FILE"),
                    Some("abc"),
                )),
            ),
            (
                kubeconfig(
                    "{server: 'https://127.0.0.1:6443/', certificate-authority-data: UEVNIERBVEE=}",
                    "{tokenFile: token}",
                ),
                Ok(target(
                    "https://127.0.0.1:6443",
                    Some(b"PEM DATA"),
                    Some("file-token"),
                )),
            ),
            // The data wins over the file, as in kubectl.
            (
                kubeconfig(
                    "{server: 'https://k:1', certificate-authority-data: UEVNIERBVEE=, certificate-authority: /missing}",
                    "{}",
                ),
                Ok(target("https://k:1", Some(b"PEM DATA"), None)),
            ),
            (
                kubeconfig("{server: 'http://127.0.0.1:8080'}", "{token: t}"),
                Ok(target("http://127.0.0.1:8080", None, Some("t"))),
            ),
            (
                kubeconfig(
                    "{server: 'https://k:1', certificate-authority: /missing}",
                    "{}",
                ),
                Err("cannot read /missing"),
            ),
            (
                kubeconfig("{server: 'k:1'}", "{}"),
                Err("has no http(s) server URL"),
            ),
            (
                kubeconfig(
                    "{server: 'https://k:1', certificate-authority-data: '!!'}",
                    "{}",
                ),
                Err("not base64"),
            ),
            (
                kubeconfig("{server: 'https://k:1'}", "{}")
                    .replace("current-context: ctx", "current-context: gone"),
                Err("no contexts entry named \"gone\""),
            ),
            (
                kubeconfig("{server: 'https://k:1'}", "{}").replace("current-context: ctx\n", ""),
                Err("no current-context"),
            ),
            (
                kubeconfig("{server: 'https://k:1'}", "{}").replace("- name: c\n", "- name: d\n"),
                Err("no clusters entry named \"c\""),
            ),
            ("[not yaml".to_string(), Err("not YAML")),
        ];
        for (text, want) in cases {
            let got = parse_kubeconfig(&text, &files);
            match (&got, &want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{text}"),
                (Err(g), Err(w)) => assert!(g.contains(w), "{text}: {g:?} lacks {w:?}"),
                _ => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        let cases = [
            ("127.0.0.1:6443", Some(("127.0.0.1", 6443))),
            ("localhost", Some(("localhost", 443))),
            ("[::1]:6443", Some(("::1", 6443))),
            ("[::1]", Some(("::1", 443))),
            ("::1", None),
            ("host:port", None),
            ("", None),
        ];
        for (authority, want) in cases {
            let got = split_host_port(authority, 443);
            assert_eq!(got, want.map(|(h, p)| (h.to_string(), p)), "{authority}");
        }
    }

    #[test]
    fn clients_need_a_ca_for_https_and_keep_the_path_prefix() {
        let no_ca = Target {
            server: "https://127.0.0.1:6443".into(),
            ca_pem: None,
            token: None,
        };
        assert!(
            Client::new(&no_ca)
                .err()
                .unwrap()
                .contains("no certificate authority")
        );
        let bad_ca = Target {
            ca_pem: Some(b"not pem".to_vec()),
            ..no_ca
        };
        assert!(
            Client::new(&bad_ca)
                .err()
                .unwrap()
                .contains("no certificate")
        );
        let plain = Client::new(&Target {
            server: "http://127.0.0.1:8080/prefix/".into(),
            ca_pem: None,
            token: Some("t".into()),
        })
        .unwrap();
        assert_eq!(
            (plain.authority.as_str(), plain.prefix.as_str()),
            ("127.0.0.1:8080", "/prefix")
        );
        let req = plain.build("GET", "/api", None).unwrap();
        assert_eq!(req.uri(), "/prefix/api");
        assert_eq!(req.headers()["authorization"], "Bearer t");
    }
}
