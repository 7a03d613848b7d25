//! A real Kubernetes control plane for tests and benchmarks: `scripts/control-plane.sh` (etcd,
//! kube-apiserver and kube-controller-manager 1.20.2 on loopback) with this crate's kubelet
//! ([`crate::node`]) as its node, scheduler and volume provisioner. Dropping it stops exactly
//! what it started; the script's watchdog stops it too when the process ends without dropping.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The script, in the repository this crate lives in.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/control-plane.sh")
}

/// An image whose containers the kubelet of every control plane started here runs but never
/// reports ready: a change that rolls pods onto it never completes (a halted rollout).
pub const NEVER_READY_IMAGE: &str = "registry.example.org/test/never-ready:1";

/// A started control plane and its kubelet.
pub struct ControlPlane {
    dir: PathBuf,
    kubelet: Option<tokio::task::JoinHandle<()>>,
    stopped: bool,
}

impl ControlPlane {
    /// Starts one in `dir` (the administrator's kubeconfig is `dir/kubeconfig`) and the kubelet,
    /// provisioning volumes of `storage_classes`; returns once the node is Ready. The binaries
    /// must be built (`scripts/control-plane.sh install`, `make control-plane`).
    pub async fn start(dir: &Path, storage_classes: &[&str]) -> Result<ControlPlane, String> {
        let (path, pid) = (dir.to_path_buf(), std::process::id().to_string());
        let out = tokio::task::spawn_blocking(move || {
            Command::new(script())
                .arg("start")
                .arg(&path)
                .arg("--watch-pid")
                .arg(pid)
                .output()
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot run {}: {e}", script().display()))?;
        let mut plane = ControlPlane {
            dir: dir.to_path_buf(),
            kubelet: None,
            stopped: false,
        };
        if !out.status.success() {
            return Err(format!(
                "the control plane did not start (make control-plane builds it):\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let target = crate::client::load_kubeconfig(&plane.kubeconfig())?;
        let client = crate::client::Client::new(&target)?;
        let ready = dir.join("kubelet.ready");
        let config = crate::node::Config {
            storage_classes: storage_classes.iter().map(|c| c.to_string()).collect(),
            ready_file: Some(ready.clone()),
            image_behaviours: [(
                NEVER_READY_IMAGE.to_string(),
                crate::state::Behaviour::NeverReady,
            )]
            .into(),
            ..Default::default()
        };
        plane.kubelet = Some(tokio::spawn(crate::node::run(
            client,
            config,
            std::future::pending(),
        )));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            if tokio::time::Instant::now() > deadline {
                return Err("the kubelet's node did not become Ready in 60 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(plane)
    }

    /// The administrator's kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// The API server's audit log: every write request ([`crate::audit`]).
    pub fn audit(&self) -> crate::audit::AuditLog {
        crate::audit::AuditLog::new(&self.dir.join("audit.log"))
    }

    /// The log of a component (`etcd`, `kube-apiserver`, `kube-controller-manager`).
    pub fn log(&self, component: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{component}.log"))).unwrap_or_default()
    }

    /// SIGKILLs `component` (`etcd`, `kube-apiserver` or `kube-controller-manager`), as a crash
    /// or the OOM killer would; returns once it is gone.
    pub async fn kill(&self, component: &str) -> Result<(), String> {
        self.script(&["kill", component]).await
    }

    /// Starts `component` again as it was first started (same ports and data); returns once it
    /// serves.
    pub async fn restart(&self, component: &str) -> Result<(), String> {
        self.script(&["restart", component]).await
    }

    async fn script(&self, args: &[&str]) -> Result<(), String> {
        let (verb, rest) = args.split_first().expect("a verb");
        let mut command = Command::new(script());
        command.arg(verb).arg(&self.dir).args(rest);
        let out = tokio::task::spawn_blocking(move || command.output())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot run {}: {e}", script().display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "control-plane.sh {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Stops the kubelet and the control plane (once).
    pub fn stop(&mut self) {
        if let Some(k) = self.kubelet.take() {
            k.abort();
        }
        if !std::mem::replace(&mut self.stopped, true) {
            let _ = Command::new(script()).arg("stop").arg(&self.dir).status();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}
