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

/// A kube client configuration for the emulator, without client-side retries (the tests look
/// at raw responses).
async fn client_config(emulator: &Emulator) -> kube::Config {
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
        Cluster::start_with(Options {
            tls,
            ..Default::default()
        })
        .await
    }

    /// [`Cluster::start`] with any options.
    pub async fn start_with(options: Options) -> Cluster {
        let emulator = Emulator::start(options).await.expect("emulator starts");
        let dir = std::env::temp_dir().join(format!("sites-emulator-it-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        emulator.write_kubeconfig(&dir.join("kubeconfig")).unwrap();
        let client = kube::Client::try_from(client_config(&emulator).await).expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &site_crd())
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

    /// A kubeconfig of the emulator with `token` as its credentials, written as `<name>.kubeconfig`.
    pub fn kubeconfig_with_token(&self, name: &str, token: &str) -> PathBuf {
        let mut config: Value = serde_yaml_ng::from_str(&self.emulator.kubeconfig_yaml()).unwrap();
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
