//! Shared test support: an emulator with the Site CRD installed, a kube client for it, a kubectl
//! runner with its own cache directory, and polling with a deadline. [`operator`] runs the
//! controller in the test process against the emulator; [`OperatorProcess`] runs the real
//! binary.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use sites_emulator::{Emulator, Options};

pub mod argocd;
pub mod deployed;
pub mod operator;
pub mod process;

pub use process::{OperatorProcess, api_requests, serve_webhooks};

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
        let c = Cluster::empty(Options {
            tls,
            ..Default::default()
        })
        .await;
        let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
        crds.create(&PostParams::default(), &sites_operator::crd::crd())
            .await
            .expect("Site CRD is accepted");
        c
    }

    /// Starts an emulator with `options` and nothing installed.
    pub async fn empty(options: Options) -> Cluster {
        let emulator = Emulator::start(options).await.expect("emulator starts");
        let dir = std::env::temp_dir().join(format!("sites-it-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        emulator.write_kubeconfig(&dir.join("kubeconfig")).unwrap();
        let client = kube::Client::try_from(client_config(&emulator).await).expect("client");
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
    check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match poll_until(timeout, interval, check).await {
        Some(v) => v,
        None => panic!("timed out waiting for {what}"),
    }
}

/// Polls `check` every `interval` until it returns Some; None after `timeout`.
pub async fn poll_until<T, F, Fut>(timeout: Duration, interval: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(interval).await;
    }
}

/// Path of a file in the repository.
pub fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}
