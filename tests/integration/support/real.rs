//! A real Kubernetes control plane for the tests: etcd, kube-apiserver and
//! kube-controller-manager 1.20.2 started by `scripts/control-plane.sh` (which builds them once
//! into a cache outside the checkout), on loopback ports of their own, with the emulator's
//! kubelet as the node that schedules and runs pods and provisions volumes of the platform's
//! storage class.
//!
//! Tests against it are `#[ignore]`d in the default run and named `real_apiserver::…`:
//! `make real-apiserver-test` (part of `make test`) builds the control plane, then runs exactly
//! them (`--run-ignored only`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::deployed::{self, Pod};
use super::{Cluster, eventually_every};

/// The storage class the example configuration names (`manifests/dev/`), provisioned by the
/// kubelet.
pub const STORAGE_CLASS: &str = "sites-retain";

/// The overlay's namespace.
const NS: &str = "sites";

/// The webhook port [`local_overlay`] is rendered with before the operator has reported the port
/// its webhook server got: nothing can listen on port 0, so until [`point_webhooks_at`] names a
/// replica the API server's calls fail at once, as with no replica serving (Site validation
/// fails closed, the rest open), and never reach another process on this machine.
pub const NO_REPLICA: u16 = 0;

pub use sites_emulator::audit::Mark;
pub use sites_emulator::control_plane::ControlPlane;

/// The CRDs as `sites-operator crd` prints them (with `--with-gateway-api`: and the Gateway
/// API's), applied with kubectl; returns once the Site CRD (and the HTTPRoute CRD) is
/// Established.
pub fn install_printed_crds(c: &Cluster, with_gateway_api: bool) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sites-operator"));
    command.arg("crd");
    if with_gateway_api {
        command.arg("--with-gateway-api");
    }
    let printed = command.output().expect("the binary runs");
    assert!(printed.status.success());
    c.kubectl_ok_stdin(
        &["apply", "-f", "-"],
        &String::from_utf8(printed.stdout).unwrap(),
    );
    let mut crds = vec!["crd/sites.sites.ecmwf.int"];
    if with_gateway_api {
        crds.push("crd/httproutes.gateway.networking.k8s.io");
    }
    for crd in crds {
        c.kubectl_ok(&["wait", "--for=condition=Established", "--timeout=60s", crd]);
    }
}

/// `manifests/examples/site.yaml` as Site `docs-<short>` on the path `.../<short>/`, written to
/// `dir/<short>.yaml`; returns the file's path.
pub fn example_site_file(dir: &Path, short: &str) -> String {
    let text = std::fs::read_to_string(deployed::manifest("examples/site.yaml"))
        .unwrap()
        .replace("name: docs-handbook", &format!("name: docs-{short}"))
        .replace("name: handbook", &format!("name: {short}"));
    let path = dir.join(format!("{short}.yaml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The kinds a Site owns in ingress mode (SPEC 4.1), as `kubectl get` takes them.
pub const OWNED_KINDS: &str =
    "secrets,configmaps,persistentvolumeclaims,statefulsets,services,ingresses";

/// The operator's ServiceAccount in the overlay, as the API server's audit log names its requests.
pub const OPERATOR_USER: &str = "system:serviceaccount:sites:sites-operator";

/// Where the real control plane's audit log ends now ([`operator_writes`] counts from there).
pub fn mark(c: &Cluster) -> Mark {
    audit_log(c).mark()
}

fn audit_log(c: &Cluster) -> sites_emulator::audit::AuditLog {
    c.real_plane().expect("a real control plane").audit()
}

/// What the API server's audit log shows the operator's ServiceAccount stored since `mark`,
/// as `verb resource namespace/name`, but its Lease renewals and the token and access reviews
/// of those who read its metrics: the writes to objects and statuses, Events included.
pub fn operator_writes(c: &Cluster, mark: Mark) -> Vec<String> {
    audit_log(c)
        .stored_by(OPERATOR_USER, mark)
        .into_iter()
        .filter(|w| {
            !w.resource.starts_with("leases.")
                && !w.resource.starts_with("tokenreviews.")
                && !w.resource.starts_with("subjectaccessreviews.")
        })
        .map(|w| format!("{} {} {}", w.verb, w.resource, w.object))
        .collect()
}

/// [`operator_writes`] by `verb resource`, as the operator's `sites_api_requests_total` counts
/// them (`support::api_requests`), to cross-check one with the other.
pub fn operator_writes_by_kind(c: &Cluster, mark: Mark) -> BTreeMap<String, usize> {
    sites_emulator::audit::count(operator_writes(c, mark).into_iter().map(|w| {
        let mut parts = w.split(' ');
        format!("{} {}", parts.next().unwrap(), parts.next().unwrap())
    }))
}

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

/// Points the webhooks at `pod`, one of the operator's replicas, which listens on a port its
/// webhook server picked (`--listen-report`): `manifests/overlays/local-1.20` rendered for that
/// port ([`local_overlay`]) and its two webhook configurations applied, nothing else. The
/// `caBundle` that `--self-signed` patched into them when the first replica started (the
/// configurations are applied with the overlay before it, by URL to [`NO_REPLICA`]) is not in the
/// manifests and stays. A replica that takes the webhooks over from one that stopped is pointed
/// at the same way.
///
/// Returns once the API server calls `pod`, its configurations being in force by watch, not at
/// once: a server-side dry run of a new Site comes back mutated (the image recorded) and one of an
/// invalid Site is denied by the validating webhook.
pub async fn point_webhooks_at(c: &Cluster, pod: &Pod, timeout: Duration) {
    let port = pod
        .process
        .reported()
        .expect("the operator listens")
        .webhook
        .port();
    let manifests = deployed::manifests();
    let overlay = local_overlay(&manifests, &c.dir, port);
    let rendered = c.kubectl_ok(&["kustomize", &overlay.display().to_string()]);
    let webhooks: Vec<String> = serde_yaml_ng::Deserializer::from_str(&rendered)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).expect("kustomize prints YAML"))
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration")
            )
        })
        .map(|o| serde_yaml_ng::to_string(&o).unwrap())
        .collect();
    assert_eq!(webhooks.len(), 2, "{rendered}");
    c.kubectl_ok_stdin(&["apply", "-f", "-"], &webhooks.join("---\n"));

    // A Site of its own name and path (an existing one's is denied), so that only the webhook
    // can have recorded its image.
    let mut probe: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(manifests.join("examples/site.yaml")).unwrap(),
    )
    .unwrap();
    probe["metadata"]["name"] = "webhook-probe".into();
    probe["spec"]["name"] = "webhook-probe".into();
    let probe = probe.to_string();
    let invalid = manifests.join("examples/invalid/port.yaml");
    let invalid = invalid.display().to_string();
    let dry_run = ["create", "--dry-run=server", "-n", NS, "-f"];
    eventually_every(
        &format!("the API server to call the webhooks on port {port}"),
        timeout,
        Duration::from_millis(250),
        || {
            let mutated = c.kubectl_stdin(
                &[&dry_run[..], &["-", "-o", "json"][..]].concat(),
                Some(&probe),
            );
            let mutated = mutated.status.success()
                && String::from_utf8_lossy(&mutated.stdout).contains("\"image\"");
            let denied = c.kubectl(&[&dry_run[..], &[invalid.as_str()][..]].concat());
            let denied = !denied.status.success()
                && String::from_utf8_lossy(&denied.stderr).contains(
                    "admission webhook \"validate-sites.sites.ecmwf.int\" denied the request",
                );
            async move { (mutated && denied).then_some(()) }
        },
    )
    .await;
}
