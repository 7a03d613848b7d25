//! Shared test support: an emulator with the Site CRD installed, a kube client for it, and a
//! kubectl runner with its own cache directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use sites_emulator::{Emulator, Options};
use sites_operator::app::Listening;

/// A running emulator plus a temporary directory for kubeconfig and kubectl cache.
pub struct Cluster {
    pub emulator: Emulator,
    pub client: kube::Client,
    pub dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A kube client configuration for the emulator, without client-side retries (emulator tests
/// look at raw responses).
pub async fn client_config(emulator: &Emulator) -> kube::Config {
    let kubeconfig = Kubeconfig::from_yaml(&emulator.kubeconfig_yaml()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig is valid");
    config.default_retry = false;
    config
}

impl Cluster {
    /// Starts an emulator (HTTP or HTTPS) with the Site CRD registered.
    pub async fn start(tls: bool) -> Cluster {
        let emulator = Emulator::start(Options {
            tls,
            ..Default::default()
        })
        .await
        .expect("emulator starts");
        let dir = std::env::temp_dir().join(format!("sites-it-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        emulator.write_kubeconfig(&dir.join("kubeconfig")).unwrap();
        let client = kube::Client::try_from(client_config(&emulator).await).expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &sites_operator::crd::crd())
            .await
            .expect("Site CRD is accepted");
        Cluster {
            emulator,
            client,
            dir,
        }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Runs kubectl against the emulator; never with `--validate=false`.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_stdin(args, None)
    }

    /// Runs kubectl with `stdin` as standard input.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write;
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig())
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl with `stdin` and asserts success, returning stdout.
    pub fn kubectl_ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        Self::succeeded(args, self.kubectl_stdin(args, Some(stdin)))
    }

    /// Runs kubectl and asserts success, returning stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        Self::succeeded(args, self.kubectl(args))
    }

    fn succeeded(args: &[&str], out: Output) -> String {
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// Polls `check` until it returns Some, or panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_every(what, timeout, Duration::from_millis(20), check).await
}

/// [`eventually`] with a polling interval, for checks that are expensive to run.
pub async fn eventually_every<T, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(interval).await;
    }
}

/// Path of a file in the repository.
pub fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The Status of an API error; panics (failing the test) on any other error.
pub fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A minimal valid Site called `name` (namespace from the request).
pub fn site(name: &str) -> sites_operator::crd::Site {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "sites.ecmwf.int/v1",
        "kind": "Site",
        "metadata": {"name": name},
        "spec": {"name": "handbook", "owner": "jdoe", "type": "static", "configuration": {"space": "docs"}}
    }))
    .expect("the fixture is a valid Site")
}

/// The real `sites-operator run --self-signed` binary against a kubeconfig. It listens on ports
/// it picks itself (port 0) and reports them through `--listen-report`; a port chosen here and
/// released before the process binds it could be taken by a parallel test. Its log goes to a file
/// (a pipe nobody reads would fill up and block the process).
pub struct OperatorProcess {
    child: std::process::Child,
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
        let child = Command::new(env!("CARGO_BIN_EXE_sites-operator"))
            .args(["run", "--self-signed", "--namespace", namespace, "--config"])
            .arg(repo_file("manifests/base/config.yaml"))
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
        OperatorProcess { child, log, report }
    }

    /// The addresses the process reported, None before it listens.
    pub fn reported(&self) -> Option<Listening> {
        Listening::parse(&std::fs::read_to_string(&self.report).ok()?)
    }

    /// Waits until the process reports the addresses it listens on (it binds after connecting to
    /// the API server and setting up its certificate).
    pub async fn listening(&self, timeout: Duration) -> Listening {
        let what = format!("the operator to listen (log: {})", self.log.display());
        eventually(&what, timeout, || async { self.reported() }).await
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
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then the exit code and the log.
    pub fn stop(mut self) -> (Option<i32>, String) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let code = self.child.wait().ok().and_then(|s| s.code());
        (code, self.log())
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(&self.report);
    }
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
