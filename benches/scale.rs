//! Reconcile scale against the emulator, with the real operator binary (release build) as a
//! separate process:
//! 1. cold creation of N Sites: time until every Site is Available, API writes per Site;
//! 2. restart of the operator with N converged Sites: requests and writes it makes, time until
//!    every Site is verified (reconciled once);
//! 3. a pod-event storm: status writes against distinct status changes;
//! 4. an audit-only change (`description`) on every Site: writes per Site;
//! 5. a quota change on every Site: writes per Site;
//!
//! and the operator's peak resident memory (VmHWM).
//!
//! Run: `cargo bench --bench scale` (N=1000; override with `SCALE_SITES`; `SCALE_STEPS=none`
//! skips steps 3 and 4; `SCALE_HISTORY` sets the emulator's watch history, 200,000 events;
//! `SCALE_KUBELET_PACE_MS` the least time its kubelet leaves a pod in each state, 0).
//! The emulator's resident memory (this process) is printed after the creation.
//!
//! With `SCALE_APISERVER=real`, `SCALE_STEPS=chaos` adds chaos: a configuration change rolls
//! every Site while N/10 more are created, and etcd, kube-apiserver, kube-controller-manager and
//! the operator are SIGKILLed one at a time and together; then the time to all rolled and
//! Available, writes per object against those the changes need (from the audit log), and a
//! fresh operator's writes.
//!
//! `SCALE_APISERVER=real` runs steps 1, 2, 4 and 5 against a real kube-apiserver 1.20.2 with etcd
//! and its controller manager (`scripts/control-plane.sh`, `make control-plane` first), the
//! emulator's kubelet as the node; writes are then those of the operator's User-Agent in the
//! API server's audit log, cross-checked with its own count (`sites_api_requests_total`), and
//! the storm (which drives the emulator's kubelet) is skipped.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use sites_emulator::controllers::Behaviour;
use sites_emulator::{Emulator, Options};
use sites_operator::crd::Site;

// The emulator runs in this process: with the system allocator, malloc and free took a quarter
// of its CPU, which the operator shares the two cores with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NS: &str = "sites";

/// The operator binary. It picks its own ports and reports them in a file (`--listen-report`):
/// ports chosen here and released before it binds them could be taken by another process.
struct Operator {
    child: Child,
    report: std::path::PathBuf,
}

impl Operator {
    fn start(kubeconfig: &std::path::Path, dir: &std::path::Path) -> Operator {
        // A restarted operator writes a report of its own: the previous one's is gone.
        let report = dir.join("operator.listening");
        let _ = std::fs::remove_file(&report);
        // SCALE_WRAP runs the operator under a profiler, e.g. `heaptrack -o /tmp/op`.
        let binary = env!("CARGO_BIN_EXE_sites-operator");
        let mut command = match std::env::var("SCALE_WRAP") {
            Ok(wrap) if !wrap.is_empty() => {
                let mut words = wrap.split_whitespace();
                let mut c = Command::new(words.next().unwrap_or_default());
                c.args(words).arg(binary);
                c
            }
            _ => Command::new(binary),
        };
        let child = command
            .args([
                "run",
                "--self-signed",
                "--leader-elect=false",
                "--namespace",
                NS,
            ])
            .args([
                "--webhook-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
                "--metrics-insecure",
                "--health-addr",
                "127.0.0.1:0",
            ])
            .arg("--listen-report")
            .arg(&report)
            .arg("--cert-dir")
            .arg(dir.join("certs"))
            .args(["--log-level", "warn"])
            .env("KUBECONFIG", kubeconfig)
            // A process group of its own, stopped whole (see `signal`).
            .process_group(0)
            .stdout(Stdio::null())
            // SCALE_OPERATOR_LOG appends the operator's log (warnings and errors) to a file.
            .stderr(match std::env::var("SCALE_OPERATOR_LOG") {
                Ok(path) if !path.is_empty() => std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
                _ => Stdio::null(),
            })
            .spawn()
            .expect("operator starts");
        Operator { child, report }
    }

    /// The addresses, once the operator listens.
    fn listening(&self) -> Option<sites_operator::app::Listening> {
        let text = std::fs::read_to_string(&self.report).ok()?;
        sites_operator::app::Listening::parse(&text)
    }

    /// The operator's metrics exposition (empty before it listens).
    fn scrape(&self) -> String {
        let Some(addr) = self.listening().map(|l| l.metrics) else {
            return String::new();
        };
        Command::new("curl")
            .args(["-fs", &format!("http://{addr}/metrics")])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    fn metric(&self, prefix: &str) -> f64 {
        self.scrape()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// `sites_reconcile_triggers_total` by kind: the watch events that queued a Site.
    fn triggers(&self) -> std::collections::BTreeMap<String, f64> {
        self.scrape()
            .lines()
            .filter_map(|l| l.strip_prefix("sites_reconcile_triggers_total{kind=\""))
            .filter_map(|l| {
                let (kind, rest) = l.split_once('"')?;
                Some((kind.to_string(), rest.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    /// Waits until the operator has made at least `reconciles` reconciles in all and has no
    /// work queued or running.
    async fn settled(&self, reconciles: f64) {
        wait_for("operator settled", Duration::from_secs(3600), async || {
            self.metric("controller_runtime_reconcile_total") >= reconciles
                && self.metric("workqueue_depth") == 0.0
                && self.metric("controller_runtime_active_workers") == 0.0
        })
        .await;
    }

    /// Waits until the operator has nothing queued or running and made no reconcile for
    /// `quiet` (events it does not queue leave no other trace).
    async fn quiet(&self, quiet: Duration) {
        let mut last = (f64::NAN, Instant::now());
        wait_for("operator quiet", Duration::from_secs(3600), async || {
            let reconciles = self.metric("controller_runtime_reconcile_total");
            let idle = self.metric("workqueue_depth") == 0.0
                && self.metric("controller_runtime_active_workers") == 0.0;
            if reconciles != last.0 || !idle {
                last = (reconciles, Instant::now());
            }
            last.1.elapsed() >= quiet
        })
        .await;
    }

    fn ready(&self) -> bool {
        let Some(addr) = self.listening().map(|l| l.health) else {
            return false;
        };
        Command::new("curl")
            .args(["-fs", &format!("http://{addr}/readyz")])
            .status()
            .is_ok_and(|s| s.success())
    }

    fn peak_rss_mib(&self) -> f64 {
        self.status_mib("VmHWM:")
    }

    /// The resident set now (the peak also holds what creation needed only for a while), and
    /// how much of it is the binary's own mapped pages (the rest is heap and stacks).
    fn rss_now(&self) -> String {
        format!(
            "resident now: {:.0} MiB, of it {:.0} MiB mapped from files",
            self.status_mib("VmRSS:"),
            self.status_mib("RssFile:")
        )
    }

    fn status_mib(&self, field: &str) -> f64 {
        status_mib(&format!("/proc/{}/status", self.child.id()), field)
    }

    fn stop(mut self) {
        self.signal("-TERM");
        let _ = self.child.wait();
    }

    /// Signals the operator's process group: the operator and, under `SCALE_WRAP`, the wrapper
    /// and everything it started (a profiler's child left running would go on reconciling
    /// beside the next operator).
    fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, "--", &format!("-{}", self.child.id())])
            .status();
    }
}

/// CPU seconds (user and system) of this process: the emulator, and the bench's own client.
/// A field of a `/proc/<pid>/status` file (kB) in MiB; 0 when absent.
fn status_mib(path: &str, field: &str) -> f64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which is in parentheses): utime and stime are the 12th
    // and 13th, in clock ticks (100 per second on Linux).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

impl Drop for Operator {
    /// A bench that fails (a timeout) must not leave the operator running.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal("-KILL");
            let _ = self.child.wait();
        }
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

/// The bench's view of the Sites, from its own watch (not a list every poll: listing 10,000
/// Sites four times a second would load the emulator more than the operator does), kept as
/// counts: a poll that went over every Site would cost, at 100,000 Sites, more than the polls
/// it waits for.
#[derive(Default)]
struct Seen {
    /// Distinct Sites seen.
    sites: AtomicUsize,
    /// Of those, the ones Available at their generation.
    available: AtomicUsize,
    /// Status changes seen: a status different from the Site's previous one.
    status_changes: AtomicU64,
}

impl Seen {
    /// Watches `sites`, counting, until the runtime ends.
    fn watch(sites: Api<Site>) -> Arc<Seen> {
        let seen = Arc::new(Seen::default());
        // Per Site: a hash of its last status, and whether it was Available.
        let mut last: HashMap<String, (u64, bool)> = HashMap::new();
        let counts = seen.clone();
        tokio::spawn(
            watcher(sites, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .for_each(move |s| {
                    if let Ok(s) = s {
                        let status = std::hash::BuildHasher::hash_one(
                            &std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default(),
                            serde_json::to_string(&s.status).unwrap_or_default(),
                        );
                        let now = (status, is_available(&s));
                        match last.insert(s.name_any(), now) {
                            None => {
                                counts.sites.fetch_add(1, Ordering::Relaxed);
                                if now.1 {
                                    counts.available.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Some(before) => {
                                if before.0 != now.0 {
                                    counts.status_changes.fetch_add(1, Ordering::Relaxed);
                                }
                                match (before.1, now.1) {
                                    (false, true) => {
                                        counts.available.fetch_add(1, Ordering::Relaxed)
                                    }
                                    (true, false) => {
                                        counts.available.fetch_sub(1, Ordering::Relaxed)
                                    }
                                    _ => 0,
                                };
                            }
                        }
                    }
                    async {}
                }),
        );
        seen
    }

    /// Every one of the `n` Sites is Available at its generation.
    fn all_available(&self, n: usize) -> bool {
        self.sites.load(Ordering::Relaxed) == n && self.available.load(Ordering::Relaxed) == n
    }

    fn none_available(&self) -> bool {
        self.available.load(Ordering::Relaxed) == 0
    }

    fn status_changes(&self) -> u64 {
        self.status_changes.load(Ordering::Relaxed)
    }
}

fn is_available(s: &Site) -> bool {
    s.status.as_ref().is_some_and(|st| {
        st.conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True")
            && st.observed_generation == s.metadata.generation
    })
}

/// Operator writes per Site by verb and resource (the bench's own Site creates subtracted).
fn print_writes(stats: &serde_json::Value, n: usize) {
    let mut rows: std::collections::BTreeMap<String, u64> = Default::default();
    for r in stats.as_array().into_iter().flatten() {
        let verb = r["verb"].as_str().unwrap_or_default();
        if !matches!(
            verb,
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) {
            continue;
        }
        *rows
            .entry(format!(
                "{verb} {}",
                r["resource"].as_str().unwrap_or_default()
            ))
            .or_default() += r["count"].as_u64().unwrap_or_default();
    }
    if let Some(c) = rows.get_mut("create sites.sites.ecmwf.int") {
        *c = c.saturating_sub(n as u64);
    }
    for (what, count) in rows.iter().filter(|(_, c)| **c > 0) {
        println!("  {what}: {:.2} per Site", *count as f64 / n as f64);
    }
}

/// Where the Sites live: the emulator in this process, or a real control plane (held until the
/// end: dropping it stops it) and where its audit log was at the last [`Backend::reset`].
enum Backend {
    Emulator(Emulator),
    Real(
        sites_emulator::control_plane::ControlPlane,
        std::cell::Cell<sites_emulator::audit::Mark>,
    ),
}

/// The operator's User-Agent prefix (`sites_operator::app::identify`): its requests in the
/// audit log, the bench's own (same credentials) left out.
const OPERATOR_AGENT: &str = "sites-operator/";

impl Backend {
    fn emulator(&self) -> Option<&Emulator> {
        match self {
            Backend::Emulator(e) => Some(e),
            Backend::Real(..) => None,
        }
    }

    fn plane(&self) -> Option<&sites_emulator::control_plane::ControlPlane> {
        match self {
            Backend::Emulator(_) => None,
            Backend::Real(plane, _) => Some(plane),
        }
    }

    fn reset(&self) {
        match self {
            Backend::Emulator(e) => e.stats().reset(),
            Backend::Real(plane, mark) => mark.set(plane.audit().mark()),
        }
    }

    /// The operator's stored writes since the last [`reset`](Self::reset), by the API server's
    /// audit log (real only).
    fn audited(&self) -> Option<Vec<sites_emulator::audit::Write>> {
        match self {
            Backend::Emulator(_) => None,
            Backend::Real(plane, mark) => {
                Some(plane.audit().stored_by_agent(OPERATOR_AGENT, mark.get()))
            }
        }
    }

    /// Writes since the last [`reset`](Self::reset): the emulator's count less the bench's own
    /// `own` creations, or, on a real API server, the operator's writes the audit log holds,
    /// cross-checked with the operator's own count less `before` (printed when they differ).
    fn writes(&self, op: &Operator, own: usize, before: f64) -> f64 {
        match self.audited() {
            None => self.emulator().unwrap().stats().writes() as f64 - own as f64,
            Some(audited) => {
                let counted = operator_writes(op) - before;
                if audited.len() as f64 != counted {
                    println!(
                        "  (the operator counted {counted} writes, {} of them stored: the rest failed)",
                        audited.len()
                    );
                }
                audited.len() as f64
            }
        }
    }

    /// The operator's writes by `verb resource` per Site: the emulator's count, or the audit
    /// log's on a real API server.
    fn print_writes(&self, n: usize) {
        match (self.emulator(), self.audited()) {
            (Some(emulator), _) => print_writes(&emulator.stats().to_json(), n),
            (None, Some(audited)) => {
                let by_kind = sites_emulator::audit::count(audited.iter().map(|w| w.kind()));
                for (kind, count) in by_kind {
                    println!(
                        "  {kind}: {:.2} per Site (audit log)",
                        count as f64 / n as f64
                    );
                }
            }
            (None, None) => {}
        }
    }
}

/// The operator's writes so far (`sites_api_requests_total`, write verbs).
fn operator_writes(op: &Operator) -> f64 {
    op.scrape()
        .lines()
        .filter(|l| l.starts_with("sites_api_requests_total{"))
        .filter(|l| {
            ["create", "update", "patch", "delete"]
                .iter()
                .any(|v| l.contains(&format!("verb=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// What the operator did so far, per Site: reconciles by result, requests by verb, and the
/// watch events that queued a Site, by kind (the operator's own counters).
fn print_operator_work(op: &Operator, n: usize) {
    let metrics = op.scrape();
    let sum_by = |metric: &str, label: &str| {
        let mut rows: std::collections::BTreeMap<String, f64> = Default::default();
        for line in metrics
            .lines()
            .filter(|l| l.starts_with(&format!("{metric}{{")))
        {
            let Some(start) = line.find(&format!("{label}=\"")) else {
                continue;
            };
            let value = line[start + label.len() + 2..]
                .split('"')
                .next()
                .unwrap_or_default();
            let count: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            *rows.entry(value.to_string()).or_default() += count;
        }
        rows.iter()
            .filter(|(_, c)| **c > 0.0)
            .map(|(k, c)| format!("{k} {:.2}", c / n as f64))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "  per Site: reconciles {}; requests {}; queued by {}",
        sum_by("controller_runtime_reconcile_total", "result"),
        sum_by("sites_api_requests_total", "verb"),
        sum_by("sites_reconcile_triggers_total", "kind"),
    );
}

/// A real control plane in `dir` with the emulator's kubelet as its node; its kubeconfig copied
/// to `dir/kubeconfig`.
async fn real_control_plane(dir: &std::path::Path) -> Backend {
    let plane = sites_emulator::control_plane::ControlPlane::start(
        &dir.join("control-plane"),
        &["sites-retain"],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(plane.kubeconfig(), dir.join("kubeconfig")).unwrap();
    let mark = plane.audit().mark();
    Backend::Real(plane, std::cell::Cell::new(mark))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("SCALE_SITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // Which of the later steps run (creation and restart always do): `storm` (pod events),
    // `rollout` (configuration changes that roll every Site under the change budget) and
    // `changes` (audit-only and quota changes). Default: all.
    let steps = std::env::var("SCALE_STEPS").unwrap_or_else(|_| "storm,rollout,changes".into());
    let real = std::env::var("SCALE_APISERVER").is_ok_and(|v| v == "real");
    let steps = if real {
        steps.replace("storm", "")
    } else {
        steps
    };
    let dir = std::env::temp_dir().join(format!("sites-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let backend = if real {
        real_control_plane(&dir).await
    } else {
        // SCALE_HISTORY: the watch events the emulator keeps for resuming watches (a real API
        // server keeps 100 per kind in its watch cache; the emulator 200,000 in all by default).
        let mut options = Options::default();
        if let Some(history) = std::env::var("SCALE_HISTORY")
            .ok()
            .and_then(|h| h.parse().ok())
        {
            options.history = history;
        }
        let emulator = Emulator::start(options).await.unwrap();
        // SCALE_KUBELET_PACE_MS: the least time a pod stays in each state (the pace of a real
        // node, so that the operator sees the states a real run shows; default 0, every tick).
        if let Some(pace) = std::env::var("SCALE_KUBELET_PACE_MS")
            .ok()
            .and_then(|p| p.parse().ok())
        {
            emulator.kubelet().set_pace(Duration::from_millis(pace));
        }
        emulator.write_kubeconfig(&kubeconfig).unwrap();
        Backend::Emulator(emulator)
    };
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let pp = PostParams::default();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&pp, &sites_operator::definitions::crd())
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
    // The PriorityClasses the configuration names (manifests/base/priorityclasses.yaml).
    for (name, value) in [("low-priority", 1000), ("medium-priority", 10000)] {
        Api::<k8s_openapi::api::scheduling::v1::PriorityClass>::all(client.clone())
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))
                    .unwrap(),
            )
            .await
            .unwrap();
    }
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "sites-session"}, "stringData": {"secret_key": "bench"}})).unwrap())
        .await
        .unwrap();
    // The configuration, as in a cluster: the operator reads and follows this ConfigMap.
    let config = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/base/config.yaml"
    ))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), NS)
        .create(
            &pp,
            &serde_json::from_value(
                json!({"metadata": {"name": "sites-config"}, "data": {"config.yaml": config}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let sites: Api<Site> = Api::namespaced(client.clone(), NS);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/examples/site.yaml"
    ))
    .unwrap();
    let template: Site = serde_yaml_ng::from_str(&text).unwrap();
    let seen = Seen::watch(sites.clone());

    println!(
        "reconcile scale: {n} Sites, operator binary {} (release), against {}",
        env!("CARGO_BIN_EXE_sites-operator"),
        if real {
            "a real kube-apiserver 1.20.2 with etcd"
        } else {
            "the emulator"
        }
    );
    let op = Operator::start(&kubeconfig, &dir);
    wait_for("operator ready", Duration::from_secs(60), async || {
        op.ready()
    })
    .await;

    // 1. Cold creation.
    backend.reset();
    let before = operator_writes(&op);
    let start = Instant::now();
    let emulator_cpu = own_cpu_seconds();
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
        seen.all_available(n)
    })
    .await;
    let converged = start.elapsed();
    let writes = backend.writes(&op, n, before);
    println!(
        "cold creation: Sites created in {:.1} s, all Available after {:.1} s; operator writes per Site {:.2}",
        created_in.as_secs_f64(),
        converged.as_secs_f64(),
        writes / n as f64
    );
    backend.print_writes(n);
    print_operator_work(&op, n);
    // The wall time also measures the emulator (both share the machine): the operator's own CPU.
    let cpu = op.metric("process_cpu_seconds_total");
    println!(
        "operator CPU for the creation: {cpu:.1} s ({:.2} s per 1,000 Sites); emulator and bench: {:.1} s",
        cpu * 1000.0 / n as f64,
        own_cpu_seconds() - emulator_cpu
    );
    let rss_converged = op.peak_rss_mib();
    println!(
        "operator peak RSS after creation: {rss_converged:.0} MiB ({})",
        op.rss_now()
    );
    if backend.emulator().is_some() {
        // The emulator runs in this process: what the cluster state costs (with the watch
        // history and the bench's client, which holds no objects).
        let own = |field| status_mib("/proc/self/status", field);
        println!(
            "emulator (this process): resident {:.0} MiB, peak {:.0} MiB ({:.1} KiB per Site)",
            own("VmRSS:"),
            own("VmHWM:"),
            own("VmRSS:") * 1024.0 / n as f64
        );
    }
    op.stop();

    // 2. Restart with converged Sites.
    backend.reset();
    let start = Instant::now();
    let op = Operator::start(&kubeconfig, &dir);
    op.settled(n as f64).await;
    let verified = start.elapsed();
    match backend.emulator() {
        Some(emulator) => {
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
            // A restart after a complete creation has nothing to write: show what it wrote, if
            // anything.
            print_writes(&stats, n);
        }
        None => {
            println!(
                "restart: every Site verified after {:.1} s (process start included); {} writes ({} in the audit log)",
                verified.as_secs_f64(),
                operator_writes(&op),
                backend.audited().map_or(0, |a| a.len())
            );
            backend.print_writes(n);
        }
    }

    // 3. Pod-event storm: every site pod changes five times in ways the Site status does not
    // show (an annotation), then becomes not ready and ready again (two distinct changes).
    if let Some(emulator) = backend.emulator().filter(|_| steps.contains("storm")) {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let before = op.metric("controller_runtime_reconcile_total");
        let triggers_before = op.triggers();
        emulator.stats().reset();
        let changes_before = seen.status_changes();
        let start = Instant::now();
        for round in 0..5 {
            let patch = json!({"metadata": {"annotations": {"bench/storm": round.to_string()}}});
            for i in 0..n {
                pods.patch(
                    &format!("site-{i}-0"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .unwrap();
            }
        }
        // The annotations change nothing the operator keeps: no reconcile is expected.
        op.quiet(Duration::from_secs(3)).await;
        let noise_writes = emulator.stats().count("patch", "sites.sites.ecmwf.int");
        let noise_reconciles = op.metric("controller_runtime_reconcile_total") - before;
        let noise_triggers: Vec<String> = op
            .triggers()
            .into_iter()
            .map(|(kind, v)| {
                (
                    kind.clone(),
                    v - triggers_before.get(&kind).copied().unwrap_or(0.0),
                )
            })
            .filter(|(_, v)| *v > 0.0)
            .map(|(kind, v)| format!("{kind} {v:.0}"))
            .collect();
        let kubelet = emulator.kubelet();
        for i in 0..n {
            kubelet.set_pod(NS, &format!("site-{i}-0"), Behaviour::NeverReady);
        }
        wait_for("all not ready", Duration::from_secs(3600), async || {
            seen.none_available()
        })
        .await;
        for i in 0..n {
            kubelet.set_pod(NS, &format!("site-{i}-0"), Behaviour::Ready);
        }
        wait_for(
            "all available after the storm",
            Duration::from_secs(3600),
            async || seen.all_available(n),
        )
        .await;
        op.settled(0.0).await;
        let writes = emulator.stats().count("patch", "sites.sites.ecmwf.int");
        let distinct = seen.status_changes() - changes_before;
        println!(
            "pod-event storm: {} pod annotation changes, then every pod not ready and ready again: \
             {noise_writes} status writes and {noise_reconciles:.0} reconciles for the annotations \
             (keys queued by watch events of: {}); \
             {writes} status writes in all for {distinct} distinct status changes; {:.0} \
             reconciles ({:.1} s)",
            5 * n,
            if noise_triggers.is_empty() {
                "none".to_string()
            } else {
                noise_triggers.join(", ")
            },
            op.metric("controller_runtime_reconcile_total") - before,
            start.elapsed().as_secs_f64()
        );
    }

    // 4. Platform rollouts (`rollout`): a configuration change of every Site's pod template
    // under a budget of 10%, then another with no budget to speak of (100%): the time until the
    // operator reports the rollout done and every Site Available, and the writes per Site.
    if steps.contains("rollout") {
        let configmaps =
            Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), NS);
        let mut text = config.clone();
        for (budget, memory) in [("10%", "48Mi"), ("100%", "64Mi")] {
            let previous = text.clone();
            text = previous
                .replace("max_rolling: 25%", &format!("max_rolling: {budget}"))
                .replace("max_rolling: 10%", &format!("max_rolling: {budget}"))
                .replacen(
                    &format!("memory: {}", if memory == "48Mi" { "32Mi" } else { "48Mi" }),
                    &format!("memory: {memory}"),
                    1,
                );
            assert_ne!(text, previous, "the change edits the configuration");
            backend.reset();
            let written = operator_writes(&op);
            let start = Instant::now();
            configmaps
                .patch(
                    "sites-config",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"data": {"config.yaml": text}})),
                )
                .await
                .unwrap();
            let status = async || -> Option<sites_operator::controller::rollout::RolloutStatus> {
                let cm = configmaps
                    .get_opt(sites_operator::controller::rollout::STATUS_CONFIGMAP)
                    .await
                    .ok()??;
                serde_json::from_str(
                    cm.data?
                        .get(sites_operator::controller::rollout::STATUS_KEY)?,
                )
                .ok()
            };
            let before = status().await.map(|s| s.version);
            wait_for("the rollout done", Duration::from_secs(3600), async || {
                status().await.is_some_and(|s| {
                    Some(&s.version) != before.as_ref() && s.done() && s.rolled == n
                }) && seen.all_available(n)
            })
            .await;
            // The bench's own write: the ConfigMap.
            let writes = backend.writes(&op, 1, written);
            println!(
                "rollout under max_rolling {budget}: {n} Sites rolled and Available after {:.1} s; operator writes per Site {:.2}",
                start.elapsed().as_secs_f64(),
                writes / n as f64
            );
            backend.print_writes(n);
        }
    }

    // Chaos on the real control plane (`chaos`, real only): a configuration change rolls every
    // Site (the memory request, under the configured budget) while a tenth as many Sites again
    // are created, retried until stored; meanwhile etcd, kube-apiserver, kube-controller-manager
    // and the operator are SIGKILLed one at a time and then all together, each started again
    // after a pause. Then: the time until every Site is rolled and Available, the writes per
    // object the audit log holds against those the changes need, and what a fresh operator
    // writes (nothing, when every object is as rendered).
    let mut op = op;
    let mut total = n;
    if let (Some(plane), true) = (backend.plane(), steps.contains("chaos")) {
        let configmaps =
            Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), NS);
        let statefulsets =
            Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), NS);
        let current =
            configmaps.get("sites-config").await.unwrap().data.unwrap()["config.yaml"].clone();
        // The first `memory:` is the containers' request (manifests/base/config.yaml).
        let at = current.find("memory: ").unwrap() + "memory: ".len();
        let end = at + current[at..].find("Mi").unwrap();
        let memory = format!("{}Mi", current[at..end].parse::<u32>().unwrap() + 8);
        let changed = format!("{}{memory}{}", &current[..at], &current[end + 2..]);
        let extra = (n / 10).max(1);
        total = n + extra;
        backend.reset();
        let start = Instant::now();
        configmaps
            .patch(
                "sites-config",
                &PatchParams::default(),
                &Patch::Merge(&json!({"data": {"config.yaml": changed}})),
            )
            .await
            .unwrap();
        let creator = tokio::spawn({
            let (sites, template) = (sites.clone(), template.clone());
            async move {
                let mut refused = 0u64;
                for i in 0..extra {
                    let mut s = template.clone();
                    s.metadata.name = Some(format!("chaos-{i}"));
                    s.spec.name = format!("chaos-{i}");
                    loop {
                        match sites.create(&PostParams::default(), &s).await {
                            // 409: stored by an attempt whose answer was lost.
                            Ok(_) => break,
                            Err(kube::Error::Api(e)) if e.code == 409 => break,
                            Err(_) => {
                                refused += 1;
                                tokio::time::sleep(Duration::from_millis(250)).await;
                            }
                        }
                    }
                }
                refused
            }
        });
        let components = ["etcd", "kube-apiserver", "kube-controller-manager"];
        let mut pause = sites_emulator::faults::Lcg(55);
        let mut kills = 0;
        for component in components {
            tokio::time::sleep(pause.millis(500, 3000)).await;
            plane.kill(component).await.unwrap();
            tokio::time::sleep(pause.millis(1000, 5000)).await;
            plane.restart(component).await.unwrap();
            kills += 1;
        }
        for together in [false, true] {
            tokio::time::sleep(pause.millis(500, 3000)).await;
            op.signal("-KILL");
            let _ = op.child.wait();
            if together {
                for component in components {
                    plane.kill(component).await.unwrap();
                }
            }
            tokio::time::sleep(pause.millis(1000, 5000)).await;
            if together {
                for component in components {
                    plane.restart(component).await.unwrap();
                }
            }
            kills += if together { 4 } else { 1 };
            op = Operator::start(&kubeconfig, &dir);
            wait_for("operator ready", Duration::from_secs(120), async || {
                op.ready()
            })
            .await;
        }
        let refused = creator.await.unwrap();
        wait_for(
            "every Site rolled and Available after the chaos",
            Duration::from_secs(3600),
            async || {
                seen.all_available(total)
                    && statefulsets.list(&Default::default()).await.is_ok_and(|l| {
                        l.items.len() == total
                            && l.items.iter().all(|s| {
                                s.spec
                                    .as_ref()
                                    .and_then(|s| s.template.spec.as_ref())
                                    .and_then(|p| p.containers[0].resources.as_ref())
                                    .and_then(|r| r.requests.as_ref())
                                    .and_then(|r| r.get("memory"))
                                    .is_some_and(|m| m.0 == memory)
                            })
                    })
            },
        )
        .await;
        let converged = start.elapsed();
        // Per object, the operator's writes against what the changes need: a Site's roll is one
        // write of its StatefulSet; a new Site's objects are written once each, its StatefulSet
        // twice when it was created before the new configuration reached the operator.
        let audited = backend.audited().unwrap();
        let per_object = sites_emulator::audit::count(
            audited
                .iter()
                .filter(|w| {
                    !w.resource.starts_with("events")
                        && !w.resource.ends_with("/status")
                        && !w.resource.starts_with("leases.")
                        && !w.object.ends_with("/sites-rollout")
                })
                .map(|w| (w.resource.clone(), w.object.clone())),
        );
        let over: Vec<String> = per_object
            .iter()
            .filter(|((resource, object), count)| {
                let new = object.contains("/chaos-") || resource == "persistentvolumes";
                let needed = match (new, resource.as_str()) {
                    (false, "statefulsets.apps") => 1,
                    (false, _) => 0,
                    (true, "statefulsets.apps") => 2,
                    (true, _) => 1,
                };
                **count > needed
            })
            .map(|((resource, object), count)| format!("{resource} {object}: {count}"))
            .collect();
        let statuses = audited
            .iter()
            .filter(|w| w.resource == "sites.sites.ecmwf.int/status")
            .count();
        println!(
            "chaos: {kills} kills; {n} Sites rolled and {extra} created ({refused} creations refused and retried), all Available after {:.1} s; operator writes per Site {:.2} (statuses {:.2}); objects written more often than their changes need: {}{}",
            converged.as_secs_f64(),
            audited.len() as f64 / total as f64,
            statuses as f64 / total as f64,
            over.len(),
            if over.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    over.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
                )
            }
        );
        backend.print_writes(total);
        // A fresh operator over what the chaos left: it verifies every Site and writes nothing
        // when every object is as rendered.
        op.stop();
        backend.reset();
        let start = Instant::now();
        op = Operator::start(&kubeconfig, &dir);
        op.settled(total as f64).await;
        let written: Vec<String> = backend
            .audited()
            .unwrap()
            .iter()
            .filter(|w| !w.resource.starts_with("leases."))
            .map(|w| w.to_string())
            .collect();
        println!(
            "chaos, then a fresh operator: every Site verified after {:.1} s; {} writes{}",
            start.elapsed().as_secs_f64(),
            written.len(),
            if written.is_empty() {
                String::new()
            } else {
                format!(
                    ": {}",
                    written
                        .iter()
                        .take(10)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            }
        );
    }

    if !steps.contains("changes") {
        println!(
            "operator peak RSS: {:.0} MiB ({})",
            op.peak_rss_mib(),
            op.rss_now()
        );
        op.stop();
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }

    // 5. Audit-only change.
    let change = async |patch: serde_json::Value, what: &str| {
        let before = op.metric("controller_runtime_reconcile_total");
        backend.reset();
        let written = operator_writes(&op);
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
        op.settled(before + n as f64).await;
        let writes = backend.writes(&op, n, written);
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

    // 6. Quota change (volume expansion unsupported: the claim stays, the pods restart).
    change(
        json!({"spec": {"configuration": {"quota": "3Gi"}}}),
        "quota change",
    )
    .await;
    wait_for(
        "all available again",
        Duration::from_secs(3600),
        async || seen.all_available(total),
    )
    .await;
    println!(
        "operator peak RSS: {:.0} MiB ({})",
        op.peak_rss_mib(),
        op.rss_now()
    );
    op.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
