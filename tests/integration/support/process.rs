//! The real `sites-operator run` binary as a child process of the test.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use sites_operator::app::Listening;

use super::{Cluster, eventually, repo_file};

/// The real `sites-operator run --self-signed` binary against a kubeconfig. It listens on ports
/// it picks itself (port 0) and reports them through `--listen-report`; a port chosen here and
/// released before the process binds it could be taken by a parallel test. Its log goes to a file
/// (a pipe nobody reads would fill up and block the process).
pub struct OperatorProcess {
    // Behind a lock so that waiting for the report can notice an early exit through `&self`.
    child: Mutex<std::process::Child>,
    log: PathBuf,
    report: PathBuf,
}

impl OperatorProcess {
    /// Starts the binary with extra arguments for `run`. Metrics are plain HTTP and open
    /// (`--metrics-insecure`), as in local runs.
    pub fn start_with(
        kubeconfig: &std::path::Path,
        namespace: &str,
        cert_dir: &std::path::Path,
        extra: &[&str],
    ) -> OperatorProcess {
        let mut args = vec!["--metrics-insecure"];
        args.extend_from_slice(extra);
        Self::spawn(kubeconfig, namespace, cert_dir, &args)
    }

    /// [`OperatorProcess::start_with`] with metrics as in a cluster: HTTPS, for callers with a token
    /// that the API server authenticates and authorizes.
    pub fn start_secure(
        kubeconfig: &std::path::Path,
        namespace: &str,
        cert_dir: &std::path::Path,
    ) -> OperatorProcess {
        Self::spawn(kubeconfig, namespace, cert_dir, &[])
    }

    fn spawn(
        kubeconfig: &std::path::Path,
        namespace: &str,
        cert_dir: &std::path::Path,
        extra: &[&str],
    ) -> OperatorProcess {
        ensure_config_map(
            kubeconfig,
            namespace,
            &cert_dir.with_extension("kubectl-cache"),
        );
        let mut command = Command::new(env!("CARGO_BIN_EXE_sites-operator"));
        command
            .args(["run", "--self-signed", "--namespace", namespace])
            .arg("--cert-dir")
            .arg(cert_dir)
            .args(extra)
            .env("KUBECONFIG", kubeconfig);
        Self::launch(command, &cert_dir.with_extension("run"))
    }

    /// Starts `command` (the binary with its arguments for `run`), listening on ports it picks
    /// and reporting them; its log and report are files beside `base` (`<base>.<run>.log`).
    pub fn launch(mut command: Command, base: &std::path::Path) -> OperatorProcess {
        // Per start: a restarted operator must not be taken for its predecessor.
        let run = uuid::Uuid::new_v4().simple().to_string();
        let log = base.with_extension(format!("{run}.log"));
        let report = base.with_extension(format!("{run}.listening"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = command
            .args([
                "--webhook-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
                "--health-addr",
                "127.0.0.1:0",
            ])
            .arg("--listen-report")
            .arg(&report)
            .stdout(std::process::Stdio::null())
            .stderr(file)
            .spawn()
            .expect("the binary starts");
        OperatorProcess {
            child: Mutex::new(child),
            log,
            report,
        }
    }

    /// The addresses the process reported, None before it listens.
    pub fn reported(&self) -> Option<Listening> {
        Listening::parse(&std::fs::read_to_string(&self.report).ok()?)
    }

    /// Waits until the process reports the addresses it listens on (it binds after connecting to
    /// the API server and setting up its certificate). Fails with the log (which is removed with
    /// the process) when it exits first or the deadline passes.
    pub async fn listening(&self, timeout: Duration) -> Listening {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(listening) = self.reported() {
                return listening;
            }
            let exited = self.child.lock().unwrap().try_wait().ok().flatten();
            if let Some(status) = exited {
                panic!(
                    "the operator exited ({status}) before listening:\n{}",
                    self.log()
                );
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "the operator did not listen within {timeout:?}:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The metrics address; panics before the process listens.
    pub fn metrics(&self) -> SocketAddr {
        self.reported().expect("the operator listens").metrics
    }

    /// Plain-HTTP GET on the metrics port (`--metrics-insecure`), or on the health port for
    /// `/healthz` and `/readyz`: (status, whole response).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let reported = self.reported()?;
        let addr = if matches!(path, "/healthz" | "/readyz") {
            reported.health
        } else {
            reported.metrics
        };
        http_get(addr, path, &[]).await
    }

    /// Waits until /readyz answers 200.
    pub async fn ready(&self, timeout: Duration) {
        eventually("the operator is ready", timeout, || async {
            self.get("/readyz").await.filter(|(s, _)| *s == 200)
        })
        .await;
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no drain, no Lease release (a crash).
    pub fn kill(&mut self) {
        let child = self.child.get_mut().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGTERM, then the exit code and the log.
    pub fn stop(mut self) -> (Option<i32>, String) {
        let child = self.child.get_mut().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let code = child.wait().ok().and_then(|s| s.code());
        (code, self.log())
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(&self.report);
    }
}

/// Creates the `sites-config` ConfigMap of `namespace` from the committed example unless it
/// exists: the operator reads its configuration from it through the API, as in a cluster.
fn ensure_config_map(kubeconfig: &std::path::Path, namespace: &str, cache: &std::path::Path) {
    let exists = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(["get", "configmap", "sites-config", "-n", namespace])
        .output()
        .expect("kubectl runs");
    if exists.status.success() {
        return;
    }
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(["create", "configmap", "sites-config", "-n", namespace])
        .arg(format!(
            "--from-file=config.yaml={}",
            repo_file("manifests/base/config.yaml").display()
        ))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "cannot create the sites-config ConfigMap: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `sites_api_requests_total` series of a metrics exposition: (verb, resource, value).
pub fn api_requests(metrics: &str) -> Vec<(String, String, f64)> {
    metrics
        .lines()
        .filter(|l| l.starts_with("sites_api_requests_total{"))
        .map(|line| {
            let label = |name: &str| {
                let start = line.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                line[start..].split('"').next().unwrap().to_string()
            };
            let value = line.rsplit(' ').next().unwrap().parse().unwrap();
            (label("verb"), label("resource"), value)
        })
        .collect()
}

/// Starts the operator and sends the emulator's calls of the webhook Service
/// `sites-operator-webhook` (port 443) in `namespace` to it, once it reports its webhook address;
/// returns when it is ready.
pub async fn serve_webhooks(
    c: &Cluster,
    namespace: &str,
    extra: &[&str],
    timeout: Duration,
) -> OperatorProcess {
    let op = OperatorProcess::start_with(
        &c.kubeconfig(),
        namespace,
        &c.dir.join("operator-certs"),
        extra,
    );
    let listening = op.listening(timeout).await;
    c.emulator()
        .map_service(namespace, "sites-operator-webhook", 443, listening.webhook);
    op.ready(timeout).await;
    op
}

/// A plain-HTTP/1.0 GET with extra header lines: (status, whole response).
pub async fn http_get(addr: SocketAddr, path: &str, headers: &[&str]) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let mut request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n");
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).await.ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, out))
}

/// An HTTPS GET (HTTP/1.0) verified against `ca_pem` for `server_name`, with a bearer token when
/// given: (status, whole response); Err when no TLS session could be made.
pub async fn https_get(
    addr: SocketAddr,
    ca_pem: &str,
    server_name: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let mut request = format!("GET {path} HTTP/1.0\r\nHost: {server_name}\r\n");
    if let Some(t) = token {
        request.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    request.push_str("\r\n");
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    // A peer that closes without close_notify ends the read with an error after the response.
    let _ = tls.read_to_end(&mut raw).await;
    let out = String::from_utf8_lossy(&raw).into_owned();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no HTTP response: {out:?}"))?;
    Ok((status, out))
}
