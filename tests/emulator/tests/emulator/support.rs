//! Test support: an emulator with the Site CRD installed, a kube client for it, a kubectl
//! runner with its own cache directory, and a local `Site` type.
//!
//! The emulator is test infrastructure for sites-operator but does not depend on it: the CRD
//! comes from the committed `manifests/base/crd.yaml` (which a test of the operator keeps equal
//! to the one its Rust types generate), and `Site` here is a minimal mirror of the operator's
//! type. The fields the tests read are typed; every other field passes through unchanged, so a
//! read-modify-write sends back exactly what the server returned.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sites_emulator::control_plane::ControlPlane;
use sites_emulator::{Emulator, Options};

/// Fields of a Site's spec the tests use; the rest are kept in `other`. Serialises like the
/// operator's type: the defaulted `enabled` and `settings.replicas` are always written.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sites.ecmwf.int",
    version = "v1",
    kind = "Site",
    plural = "sites",
    namespaced,
    status = "SiteStatus",
    // The schema is the committed CRD manifest's, not one generated from this mirror.
    schema = "disabled"
)]
pub struct SiteSpec {
    pub name: String,
    pub owner: String,
    #[serde(rename = "type")]
    pub site_type: String,
    pub configuration: SiteConfiguration,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `spec.configuration` of a Site.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SiteConfiguration {
    pub space: String,
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default)]
    pub settings: Settings,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `spec.configuration.settings` of a Site.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Settings {
    #[serde(default = "default_replicas")]
    pub replicas: i32,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            replicas: default_replicas(),
            other: Map::new(),
        }
    }
}

/// The status of a Site, as the operator writes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct SiteStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(
        default,
        rename = "observedGeneration",
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Phase of the site pods.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Disabled,
    Failed,
}

fn default_true() -> bool {
    true
}

fn default_replicas() -> i32 {
    1
}

/// A minimal valid Site called `name` (namespace from the request).
pub fn site(name: &str) -> Site {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "sites.ecmwf.int/v1",
        "kind": "Site",
        "metadata": {"name": name},
        "spec": {"name": "handbook", "owner": "jdoe", "type": "static", "configuration": {"space": "docs"}}
    }))
    .expect("the fixture is a valid Site")
}

/// The Site CRD: the committed manifest the operator installs.
pub fn site_crd() -> CustomResourceDefinition {
    let path = repo_file("manifests/base/crd.yaml");
    let yaml = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml_ng::from_str(&yaml).expect("the CRD manifest parses")
}

/// Path of a file in the repository (the emulator crate lives two levels below its root).
pub fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// Where a test's cluster runs.
pub enum Backend {
    /// The in-process emulator.
    Emulator(Emulator),
    /// A real Kubernetes 1.20.2 control plane (`scripts/control-plane.sh`), started for the
    /// test and stopped when the cluster is dropped, with the emulator's kubelet in-process as
    /// its node, scheduler and volume provisioner.
    Real(ControlPlane),
}

/// A running cluster (the emulator, or a real control plane) with the Site CRD established,
/// plus a temporary directory for kubeconfig and kubectl cache.
pub struct Cluster {
    pub backend: Backend,
    pub client: kube::Client,
    pub dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The control plane lives in the directory: stopped first (its pid file is there).
        if let Backend::Real(plane) = &mut self.backend {
            plane.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A kube client configuration for a kubeconfig, without client-side retries (the tests look
/// at raw responses).
async fn client_config(kubeconfig: &str) -> kube::Config {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig is valid");
    config.default_retry = false;
    config
}

/// Defines a test that runs against the emulator and, under the same name with
/// `::real_apiserver` appended (ignored unless asked for: `make real-apiserver-test`), against
/// a real control plane. The body gets the cluster as `$c`; [`Cluster::is_real`] tells it which
/// one it has, for the points where Kubernetes 1.20 answers otherwise than 1.32.
macro_rules! on_both {
    ($(#[$attr:meta])* async fn $name:ident($c:ident: Cluster) $body:block) => {
        $(#[$attr])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            $name::body($crate::support::Cluster::start(false).await).await
        }

        mod $name {
            #[allow(unused_imports)]
            use super::*;

            pub(super) async fn body($c: $crate::support::Cluster) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs the real control plane: make real-apiserver-test"]
            async fn real_apiserver() {
                body($crate::support::Cluster::start_real().await).await
            }
        }
    };
}
pub(crate) use on_both;

impl Cluster {
    /// Starts an emulator (HTTP or HTTPS) with the Site CRD registered.
    pub async fn start(tls: bool) -> Cluster {
        Cluster::start_with(Options {
            tls,
            ..Default::default()
        })
        .await
    }

    /// [`Cluster::start`] with any options.
    pub async fn start_with(options: Options) -> Cluster {
        let emulator = Emulator::start(options).await.expect("emulator starts");
        let dir = temp_dir();
        emulator.write_kubeconfig(&dir.join("kubeconfig")).unwrap();
        let client = kube::Client::try_from(client_config(&emulator.kubeconfig_yaml()).await)
            .expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &site_crd())
            .await
            .expect("Site CRD is accepted");
        Cluster {
            backend: Backend::Emulator(emulator),
            client,
            dir,
        }
    }

    /// Starts a real control plane (in a directory of its own) with the Site CRD established.
    pub async fn start_real() -> Cluster {
        let dir = temp_dir();
        let plane = ControlPlane::start(&dir.join("control-plane"), &[STORAGE_CLASS])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::copy(plane.kubeconfig(), dir.join("kubeconfig")).unwrap();
        let yaml = std::fs::read_to_string(plane.kubeconfig()).unwrap();
        let client = kube::Client::try_from(client_config(&yaml).await).expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &site_crd())
            .await
            .expect("Site CRD is accepted");
        kube::runtime::wait::await_condition(
            crds,
            "sites.sites.ecmwf.int",
            kube::runtime::wait::conditions::is_crd_established(),
        )
        .await
        .expect("the Site CRD is established");
        let cluster = Cluster {
            backend: Backend::Real(plane),
            client,
            dir,
        };
        // The CRD's handler serves once it is established; discovery follows shortly after.
        eventually(
            "the Site resource to be served",
            Duration::from_secs(30),
            || {
                let sites: Api<Site> = Api::namespaced(cluster.client.clone(), "default");
                async move { sites.list(&Default::default()).await.ok().map(|_| ()) }
            },
        )
        .await;
        // kubectl (1.32) validates against OpenAPI v2 here, which publishes a new CRD's
        // schema some seconds after it is established.
        eventually(
            "the Site schema in /openapi/v2",
            Duration::from_secs(60),
            || {
                let client = cluster.client.clone();
                async move {
                    let request = http::Request::get("/openapi/v2").body(Vec::new()).unwrap();
                    let doc = client.request_text(request).await.ok()?;
                    doc.contains("\"int.ecmwf.sites.v1.Site\"").then_some(())
                }
            },
        )
        .await;
        cluster
    }

    /// Whether this is a real control plane (Kubernetes 1.20.2) rather than the emulator.
    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Real(_))
    }

    /// The emulator; panics for a real control plane (a test that needs the emulator's own
    /// handles runs on the emulator only).
    pub fn emulator(&self) -> &Emulator {
        match &self.backend {
            Backend::Emulator(e) => e,
            Backend::Real(_) => panic!("this test needs the emulator's own handles"),
        }
    }

    /// The API server's URL.
    pub fn url(&self) -> String {
        match &self.backend {
            Backend::Emulator(e) => e.url(),
            Backend::Real(_) => self.kubeconfig_value()["clusters"][0]["cluster"]["server"]
                .as_str()
                .unwrap()
                .to_string(),
        }
    }

    /// curl arguments that authenticate as the kubeconfig's user and trust the server's CA
    /// (none for a plain HTTP emulator).
    pub fn curl_auth(&self) -> Vec<String> {
        let config = self.kubeconfig_value();
        let mut args = Vec::new();
        let cluster = &config["clusters"][0]["cluster"];
        if let Some(ca) = cluster["certificate-authority"].as_str() {
            args.extend(["--cacert".to_string(), ca.to_string()]);
        } else if let Some(data) = cluster["certificate-authority-data"].as_str() {
            use base64::Engine;
            let pem = base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap();
            let path = self.dir.join("ca.crt");
            std::fs::write(&path, pem).unwrap();
            args.extend(["--cacert".to_string(), path.display().to_string()]);
        }
        if let Some(token) = config["users"][0]["user"]["token"].as_str() {
            args.extend(["-H".to_string(), format!("Authorization: Bearer {token}")]);
        }
        args
    }

    fn kubeconfig_value(&self) -> Value {
        serde_yaml_ng::from_str(&std::fs::read_to_string(self.kubeconfig()).unwrap()).unwrap()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// A kubeconfig of the emulator with `token` as its credentials, written as `<name>.kubeconfig`.
    pub fn kubeconfig_with_token(&self, name: &str, token: &str) -> PathBuf {
        let mut config = self.kubeconfig_value();
        config["users"][0]["user"]["token"] = Value::String(token.to_string());
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, serde_yaml_ng::to_string(&config).unwrap()).unwrap();
        path
    }

    /// Runs kubectl with another kubeconfig (and this cluster's cache directory).
    pub fn kubectl_as(&self, kubeconfig: &std::path::Path, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args)
            .output()
            .expect("kubectl runs")
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

    /// Runs kubectl and asserts success, returning stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sites-emulator-it-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The storage class the kubelet provisions volumes of on a real control plane.
pub const STORAGE_CLASS: &str = "standard";

/// Polls `check` every 20 ms until it returns Some, or panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
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
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Status of an API error; panics (failing the test) on any other error.
pub fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}
