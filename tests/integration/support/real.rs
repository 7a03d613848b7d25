//! A real Kubernetes control plane for the tests: etcd, kube-apiserver and
//! kube-controller-manager 1.20.2 started by `scripts/control-plane.sh` (which builds them once
//! into a cache outside the checkout), on loopback ports of their own, with the emulator's
//! kubelet as the node that schedules and runs pods and provisions volumes of the platform's
//! storage class.
//!
//! Tests against it are `#[ignore]`d in the default run and named `real_apiserver::…`:
//! `make real-apiserver-test` (part of `make test`) builds the control plane, then runs exactly
//! them (`--run-ignored only`).

use std::path::{Path, PathBuf};

/// The storage class the example configuration names (`manifests/dev/`), provisioned by the
/// kubelet.
pub const STORAGE_CLASS: &str = "sites-retain";

pub use sites_emulator::control_plane::ControlPlane;

/// `manifests/overlays/local-1.20` for an operator whose webhook server listens on
/// `127.0.0.1:port`: a copy in `dir` with the port and its base's path replaced.
pub fn local_overlay(manifests: &Path, dir: &Path, port: u16) -> PathBuf {
    let source = manifests.join("overlays/local-1.20/kustomization.yaml");
    let text = std::fs::read_to_string(&source).expect("the local-1.20 overlay");
    assert!(text.contains("127.0.0.1:9443"), "{}", source.display());
    let overlay = dir.join("overlay-local-1.20");
    // Kustomize takes bases by relative path only: up to the root, then down to the base.
    let overlay = std::path::absolute(overlay).unwrap();
    let base = std::path::absolute(manifests.join("overlays/kind-e2e")).unwrap();
    let up = "../".repeat(overlay.components().count() - 1);
    let base = format!("{up}{}", base.strip_prefix("/").unwrap().display());
    let text = text
        .replace("127.0.0.1:9443", &format!("127.0.0.1:{port}"))
        .replace("../kind-e2e", &base);
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(overlay.join("kustomization.yaml"), text).unwrap();
    overlay
}

/// A free loopback port (for a server that must listen where a webhook URL already points).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
