//! The operator as `manifests/` deploys it: a kustomize overlay applied with kubectl to an
//! emulator that authorizes like an RBAC cluster (`Options::authorize`), and the binary started as
//! the pod of the overlay's Deployment would run it — the container's args, its env (the downward
//! API's `metadata.namespace` and `metadata.name`), its `emptyDir` mounts, and a token of its
//! ServiceAccount as its only credentials. Every call the operator makes is then authorized by the
//! RBAC the overlay ships: a missing grant is a 403, as in a user's cluster.
//!
//! What a node would provide and a test process cannot: the pod's own network (the binary listens
//! on ports it picks, reported with `--listen-report`, and the overlay's Services are routed to them
//! by their named target ports) and in-cluster configuration (a kubeconfig holding the token and the
//! emulator's CA stands for the mounted service account files).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sites_emulator::Options;

use super::{Cluster, OperatorProcess};

/// The manifests the suite deploys: `SITES_E2E_MANIFESTS` (a copy of `manifests/`, e.g. with
/// one grant removed) or the repository's.
pub fn manifests() -> PathBuf {
    std::env::var_os("SITES_E2E_MANIFESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::repo_file("manifests"))
}

/// An HTTPS emulator that authorizes every request of the tokens it issues against the stored
/// RBAC (kubectl sends bearer tokens over HTTPS only).
pub async fn authorizing_cluster() -> Cluster {
    Cluster::empty(Options {
        tls: true,
        authorize: true,
        ..Default::default()
    })
    .await
}

/// The operator's pod, as far as the test runs it.
pub struct Pod {
    pub process: OperatorProcess,
    /// The pod's name (`POD_NAME`).
    pub name: String,
    /// Where the pod's `emptyDir` volumes live, by mount path.
    pub mounts: Vec<(String, PathBuf)>,
}

impl Pod {
    /// The host directory of a path inside the container (under an `emptyDir` mount).
    pub fn host_path(&self, container_path: &str) -> Option<PathBuf> {
        self.mounts.iter().find_map(|(mount, dir)| {
            let rest = container_path.strip_prefix(mount.as_str())?;
            Some(dir.join(rest.trim_start_matches('/')))
        })
    }
}

fn kubectl_json(c: &Cluster, args: &[&str]) -> Value {
    serde_json::from_str(&c.kubectl_ok(args)).expect("kubectl prints JSON")
}

/// Starts the first container of Deployment `namespace/name` as its pod would run it, routes the
/// Services selecting the pod to it (on the emulator; on a real API server the webhooks name the
/// port the pod reported by URL, once [`super::real::point_webhooks_at`] points them at it), and
/// waits until it is ready.
pub async fn run_deployment(c: &Cluster, namespace: &str, name: &str, timeout: Duration) -> Pod {
    let deployment = kubectl_json(
        c,
        &["get", "deployment", name, "-n", namespace, "-o", "json"],
    );
    let template = &deployment["spec"]["template"];
    let spec = &template["spec"];
    let container = &spec["containers"][0];
    assert!(
        container["command"].is_null(),
        "the image's entrypoint is the binary; a `command` is not supported here"
    );
    // The name a ReplicaSet's pod gets: <deployment>-<template hash>-<suffix>.
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let pod_name = format!("{name}-{}-{}", &suffix[..10], &suffix[10..15]);
    let root = c.dir.join(format!("pod-{pod_name}"));
    std::fs::create_dir_all(&root).unwrap();

    // Volumes: emptyDir only (what the overlay mounts).
    let mut mounts = Vec::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let volume_name = mount["name"].as_str().unwrap_or_default();
        let volume = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == volume_name)
            .unwrap_or_else(|| panic!("volume {volume_name} is not defined"));
        assert!(
            volume["emptyDir"].is_object(),
            "volume {volume_name}: only emptyDir volumes are supported here: {volume}"
        );
        let dir = root.join(volume_name);
        std::fs::create_dir_all(&dir).unwrap();
        let path = mount["mountPath"].as_str().unwrap().to_string();
        mounts.push((path, dir));
    }
    let host = |arg: &str| -> String {
        // Arguments naming a path under a mount name the mounted directory.
        for (path, dir) in &mounts {
            if let Some((flag, value)) = arg.split_once('=')
                && let Some(rest) = value.strip_prefix(path.as_str())
            {
                return format!("{flag}={}{rest}", dir.display());
            }
            if let Some(rest) = arg.strip_prefix(path.as_str()) {
                return format!("{}{rest}", dir.display());
            }
        }
        arg.to_string()
    };
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("the container has args")
        .iter()
        .map(|a| host(a.as_str().unwrap()))
        .collect();

    // Env: values and the downward API's pod fields.
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let key = var["name"].as_str().unwrap().to_string();
        let value = if let Some(v) = var["value"].as_str() {
            v.to_string()
        } else {
            match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.namespace") => namespace.to_string(),
                Some("metadata.name") => pod_name.clone(),
                _ => panic!("env {key}: not supported here: {var}"),
            }
        };
        env.push((key, value));
    }

    // Credentials: a token of the pod's ServiceAccount, nothing else.
    let account = spec["serviceAccountName"].as_str().unwrap_or("default");
    let token = c.kubectl_ok(&["create", "token", account, "-n", namespace]);
    let kubeconfig = root.join("kubeconfig");
    std::fs::write(&kubeconfig, token_kubeconfig(c, token.trim())).unwrap();

    let mut command = Command::new(env!("CARGO_BIN_EXE_sites-operator"));
    command
        .args(&args)
        .env_clear()
        .envs(env)
        .env("KUBECONFIG", &kubeconfig)
        .current_dir(&root);
    let process = OperatorProcess::launch(command, &root.join("operator"));
    let listening = process.listening(timeout).await;
    if c.real_plane().is_some() {
        process.ready(timeout).await;
        return Pod {
            process,
            name: pod_name,
            mounts,
        };
    }

    // The Services selecting the pod reach it on their named target ports.
    let labels = &template["metadata"]["labels"];
    let services = kubectl_json(c, &["get", "services", "-n", namespace, "-o", "json"]);
    for service in services["items"].as_array().into_iter().flatten() {
        let selector = service["spec"]["selector"].as_object();
        let selects =
            selector.is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v));
        if !selects {
            continue;
        }
        for port in service["spec"]["ports"].as_array().into_iter().flatten() {
            let addr = match port["targetPort"].as_str() {
                Some("webhook") => listening.webhook,
                Some("metrics") => listening.metrics,
                Some("health") => listening.health,
                other => panic!("service port {port}: target port {other:?} is not routed here"),
            };
            c.emulator().map_service(
                namespace,
                service["metadata"]["name"].as_str().unwrap(),
                port["port"].as_u64().unwrap() as u16,
                addr,
            );
        }
    }
    process.ready(timeout).await;
    Pod {
        process,
        name: pod_name,
        mounts,
    }
}

/// The cluster's kubeconfig holding only `token`.
fn token_kubeconfig(c: &Cluster, token: &str) -> String {
    let mut config: Value = serde_yaml_ng::from_str(&c.kubeconfig_yaml()).unwrap();
    config["users"][0]["user"] = serde_json::json!({ "token": token });
    serde_yaml_ng::to_string(&config).unwrap()
}

/// A path under [`manifests`].
pub fn manifest(path: &str) -> PathBuf {
    manifests().join(path)
}

/// A line of the operator's log refusing a call with 403 (a grant the shipped RBAC lacks).
pub fn forbidden_line(log: &str) -> Option<&str> {
    log.lines().find(|l| l.contains("forbidden: User"))
}
