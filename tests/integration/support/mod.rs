//! Shared test support: an emulator with the Site CRD installed, a kube client for it, a kubectl
//! runner with its own cache directory, and polling with a deadline. [`operator`] runs the
//! controller in the test process against the emulator; [`OperatorProcess`] runs the real
//! binary.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use sites_emulator::{Emulator, Options};

pub mod argocd;
pub mod deployed;
pub mod operator;
pub mod process;
pub mod real;

pub use process::{OperatorProcess, api_requests, serve_webhooks};

/// A running API server, the emulator or a real one, plus a temporary directory for kubeconfig
/// and kubectl cache. Tests that use only the API (kubectl, the client, the operator) run against
/// either; the emulator's own handles (faults, the kubelet's behaviours, Service routes) are
/// [`Cluster::emulator`]'s.
pub struct Cluster {
    backend: Backend,
    pub client: kube::Client,
    pub dir: PathBuf,
}

enum Backend {
    Emulator(Box<Emulator>),
    Real(real::ControlPlane),
    Gone,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The control plane stops first (its files are in the directory).
        self.backend = Backend::Gone;
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
    /// Starts an emulator (HTTP or HTTPS) with the Site CRD registered and the shipped
    /// PriorityClasses ([`install_priority_classes`]).
    pub async fn start(tls: bool) -> Cluster {
        let c = Cluster::empty(Options {
            tls,
            ..Default::default()
        })
        .await;
        let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
        crds.create(&PostParams::default(), &sites_operator::definitions::crd())
            .await
            .expect("Site CRD is accepted");
        install_priority_classes(&c.client).await;
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
            backend: Backend::Emulator(Box::new(emulator)),
            client,
            dir,
        }
    }

    /// Starts a real control plane ([`real::ControlPlane`]) with nothing installed.
    pub async fn real() -> Cluster {
        let dir = std::env::temp_dir().join(format!("sites-real-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let plane = real::ControlPlane::start(&dir, &[real::STORAGE_CLASS])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let kubeconfig = Kubeconfig::read_from(plane.kubeconfig()).expect("kubeconfig");
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("kubeconfig is valid");
        config.default_retry = false;
        let client = kube::Client::try_from(config).expect("client");
        Cluster {
            backend: Backend::Real(plane),
            client,
            dir,
        }
    }

    /// The emulator; panics for a real API server (a test that needs the emulator's handles).
    pub fn emulator(&self) -> &Emulator {
        match &self.backend {
            Backend::Emulator(e) => e,
            _ => panic!("this test needs the emulator"),
        }
    }

    /// The real control plane, if this cluster is one.
    pub fn real_plane(&self) -> Option<&real::ControlPlane> {
        match &self.backend {
            Backend::Real(p) => Some(p),
            _ => None,
        }
    }

    /// The kubeconfig's YAML (the administrator's credentials).
    pub fn kubeconfig_yaml(&self) -> String {
        std::fs::read_to_string(self.kubeconfig()).expect("the kubeconfig")
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

/// Creates the PriorityClasses of `manifests/base/priorityclasses.yaml`, as an installation
/// does: the API server refuses pods naming a class that does not exist.
pub async fn install_priority_classes(client: &kube::Client) {
    use serde::Deserialize;
    let text = std::fs::read_to_string(repo_file("manifests/base/priorityclasses.yaml")).unwrap();
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let class = PriorityClass::deserialize(doc).expect("a PriorityClass");
        classes
            .create(&PostParams::default(), &class)
            .await
            .expect("the PriorityClass is accepted");
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
