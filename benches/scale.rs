//! Reconcile scale against the emulator, with the real operator binary (release build) as a
//! separate process:
//! 1. cold creation of N Sites: time until every Site is Available, API writes per Site;
//! 2. restart of the operator with N converged Sites: requests and writes it makes, time until
//!    every Site is verified (reconciled once);
//! 3. an audit-only change (`description`) on every Site: writes per Site;
//! 4. a quota change on every Site: writes per Site;
//!
//! and the operator's peak resident memory (VmHWM).
//!
//! Run: `cargo bench --bench scale` (N=1000; override with `SCALE_SITES`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use sites_emulator::{Emulator, Options};
use sites_operator::crd::Site;

const NS: &str = "sites";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Operator {
    child: Child,
    metrics: u16,
}

impl Operator {
    fn start(kubeconfig: &std::path::Path, dir: &std::path::Path) -> Operator {
        let metrics = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_sites-operator"))
            .args([
                "run",
                "--self-signed",
                "--leader-elect=false",
                "--namespace",
                NS,
                "--config",
            ])
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/manifests/base/config.yaml"
            ))
            .args(["--webhook-addr", &format!("127.0.0.1:{}", free_port())])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .arg("--cert-dir")
            .arg(dir.join("certs"))
            .args(["--log-level", "warn"])
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("operator starts");
        Operator { child, metrics }
    }

    fn metric(&self, prefix: &str) -> f64 {
        let out = Command::new("curl")
            .args(["-fs", &format!("http://127.0.0.1:{}/metrics", self.metrics)])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn ready(&self) -> bool {
        Command::new("curl")
            .args(["-fs", &format!("http://127.0.0.1:{}/readyz", self.metrics)])
            .status()
            .is_ok_and(|s| s.success())
    }

    fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

async fn wait_for(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < timeout, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    start.elapsed()
}

async fn available(sites: &Api<Site>, n: usize) -> bool {
    let Ok(list) = sites.list(&ListParams::default()).await else {
        return false;
    };
    list.items.len() == n
        && list.items.iter().all(|s| {
            s.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "Available" && c.status == "True")
                    && st.observed_generation == s.metadata.generation
            })
        })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("SCALE_SITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let emulator = Emulator::start(Options::default()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("sites-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    emulator.write_kubeconfig(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(&emulator.kubeconfig_yaml()).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let pp = PostParams::default();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&pp, &sites_operator::crd::crd())
        .await
        .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "sites-retain"}, "provisioner": "x", "reclaimPolicy": "Retain"})).unwrap())
        .await
        .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "sites-session"}, "stringData": {"secret_key": "bench"}})).unwrap())
        .await
        .unwrap();
    let sites: Api<Site> = Api::namespaced(client.clone(), NS);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/examples/site.yaml"
    ))
    .unwrap();
    let template: Site = serde_yaml_ng::from_str(&text).unwrap();

    println!(
        "reconcile scale: {n} Sites, operator binary {} (release)",
        env!("CARGO_BIN_EXE_sites-operator")
    );
    let op = Operator::start(&kubeconfig, &dir);
    wait_for("operator ready", Duration::from_secs(60), async || {
        op.ready()
    })
    .await;

    // 1. Cold creation.
    emulator.stats().reset();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(n.div_ceil(16)) {
        let (sites, template, chunk) = (sites.clone(), template.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for i in chunk {
                let mut s = template.clone();
                s.metadata.name = Some(format!("site-{i}"));
                s.spec.name = format!("site-{i}");
                sites.create(&PostParams::default(), &s).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let created_in = start.elapsed();
    wait_for("all available", Duration::from_secs(3600), async || {
        available(&sites, n).await
    })
    .await;
    let converged = start.elapsed();
    let writes = emulator.stats().writes() as f64 - n as f64;
    println!(
        "cold creation: Sites created in {:.1} s, all Available after {:.1} s; operator writes per Site {:.2}",
        created_in.as_secs_f64(),
        converged.as_secs_f64(),
        writes / n as f64
    );
    let rss_converged = op.peak_rss_mib();
    println!("operator peak RSS after creation: {rss_converged:.0} MiB");
    op.stop();

    // 2. Restart with converged Sites.
    emulator.stats().reset();
    let start = Instant::now();
    let op = Operator::start(&kubeconfig, &dir);
    wait_for(
        "every site verified",
        Duration::from_secs(3600),
        async || {
            op.metric("controller_runtime_reconcile_total") >= n as f64
                && op.metric("workqueue_depth") == 0.0
                && op.metric("controller_runtime_active_workers") == 0.0
        },
    )
    .await;
    let verified = start.elapsed();
    let stats = emulator.stats().to_json();
    let requests: u64 = stats
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    println!(
        "restart: every Site verified after {:.1} s (process start included); {} requests, {} writes",
        verified.as_secs_f64(),
        requests,
        emulator.stats().writes()
    );

    // 3. Audit-only change.
    let change = async |patch: serde_json::Value, what: &str| {
        let before = op.metric("controller_runtime_reconcile_total");
        emulator.stats().reset();
        let start = Instant::now();
        for i in 0..n {
            sites
                .patch(
                    &format!("site-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .unwrap();
        }
        wait_for(what, Duration::from_secs(3600), async || {
            op.metric("controller_runtime_reconcile_total") >= before + n as f64
                && op.metric("workqueue_depth") == 0.0
                && op.metric("controller_runtime_active_workers") == 0.0
        })
        .await;
        let writes = emulator.stats().writes() as f64 - n as f64;
        println!(
            "{what}: operator writes per Site {:.2} ({:.1} s)",
            writes / n as f64,
            start.elapsed().as_secs_f64()
        );
    };
    change(
        json!({"spec": {"description": "audit-only change"}}),
        "audit-only change",
    )
    .await;

    // 4. Quota change (volume expansion unsupported: the claim stays, the pods restart).
    change(
        json!({"spec": {"configuration": {"quota": "3Gi"}}}),
        "quota change",
    )
    .await;
    wait_for(
        "all available again",
        Duration::from_secs(3600),
        async || available(&sites, n).await,
    )
    .await;
    println!("operator peak RSS: {:.0} MiB", op.peak_rss_mib());
    op.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
