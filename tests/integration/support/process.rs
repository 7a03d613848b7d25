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
    pub fn start(
        kubeconfig: &std::path::Path,
        namespace: &str,
        cert_dir: &std::path::Path,
    ) -> OperatorProcess {
        Self::start_with(kubeconfig, namespace, cert_dir, &[])
    }

    /// [`OperatorProcess::start`] with extra arguments for `run`.
    pub fn start_with(
        kubeconfig: &std::path::Path,
        namespace: &str,
        cert_dir: &std::path::Path,
        extra: &[&str],
    ) -> OperatorProcess {
        // Per start: a restarted operator must not be taken for its predecessor.
        let run = uuid::Uuid::new_v4().simple().to_string();
        let log = cert_dir.with_extension(format!("{run}.log"));
        let report = cert_dir.with_extension(format!("{run}.listening"));
        let file = std::fs::File::create(&log).expect("log file");
        ensure_config_map(
            kubeconfig,
            namespace,
            &cert_dir.with_extension("kubectl-cache"),
        );
        let child = Command::new(env!("CARGO_BIN_EXE_sites-operator"))
            .args(["run", "--self-signed", "--namespace", namespace])
            .args([
                "--webhook-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .arg("--listen-report")
            .arg(&report)
            .arg("--cert-dir")
            .arg(cert_dir)
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
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

    /// The metrics and health address; panics before the process listens.
    pub fn metrics(&self) -> SocketAddr {
        self.reported().expect("the operator listens").metrics
    }

    /// GET on the metrics/health port: (status, whole response).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(self.reported()?.metrics)
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        let status = out.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, out))
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
    c.emulator
        .map_service(namespace, "sites-operator-webhook", 443, listening.webhook);
    op.ready(timeout).await;
    op
}
