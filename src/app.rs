//! `sites-operator run`: the process. It serves the admission webhooks (HTTPS), `/metrics`
//! (HTTPS for callers the API server authenticates and authorizes, or plain HTTP with
//! `--metrics-insecure`) and the health endpoints (plain HTTP, a port of their own, open), and
//! runs the reconcile workers behind leader election.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admission;
use crate::admission::server::{self, WebhookState};
use crate::certs::{CERT_FILE, KEY_FILE};
use crate::config::live::Live;
use crate::config::{Installation, PlatformConfig};
use crate::controller::accounting::CountLayer;
use crate::controller::context::Tunables;
use crate::controller::leader::{Elector, Timing};
use crate::controller::{self, Controller};
use crate::metrics::{self, WebhookMetrics, access};
use crate::selfsigned;
use crate::tls::{self, CertStore};
use crate::validation::FieldError;

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// Certificate and key files (e.g. a mounted cert-manager Secret), reloaded when they change.
    Files { cert: PathBuf, key: PathBuf },
    /// Generated and shared through a Secret; the CA is patched into the webhook configurations.
    SelfSigned {
        secret: String,
        dns_names: Vec<String>,
        cert_dir: PathBuf,
        mutating: Vec<String>,
        validating: Vec<String>,
    },
}

/// Where the platform configuration comes from.
#[derive(Clone, Debug)]
pub enum ConfigSource {
    /// The ConfigMap of this name in the operator's namespace, read through the API and followed:
    /// a valid change is in force without a restart (SPEC 4.6).
    ConfigMap(String),
    /// A file (`run --config`), read once at start: for local runs without the ConfigMap.
    File(PathBuf),
}

/// Everything `run` needs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub config: ConfigSource,
    /// Reconcile workers; None: `sitesConfig.operator.worker_limit`.
    pub workers: Option<usize>,
    /// Elect a leader through a Lease (off: this replica always writes).
    pub leader_election: bool,
    /// Name of the leader Lease.
    pub lease_name: String,
    /// This replica's identity (Lease holder, Event instance).
    pub identity: String,
    pub namespace: String,
    /// Webhook server address; port 0 picks a free port (see `listen_report`).
    pub webhook_addr: SocketAddr,
    /// Metrics server address; port 0 picks a free port.
    pub metrics_addr: SocketAddr,
    /// Serve `/metrics` over plain HTTP to anyone (local runs); otherwise HTTPS with the serving
    /// certificate, for callers a TokenReview and a SubjectAccessReview admit ([`access`]).
    pub metrics_insecure: bool,
    /// Health server address (`/healthz`, `/readyz`, plain HTTP, open); port 0 picks a free port.
    pub health_addr: SocketAddr,
    /// File the bound addresses are written to once the servers listen (`--listen-report`).
    pub listen_report: Option<PathBuf>,
    pub certs: CertSource,
    pub client_ca: Option<PathBuf>,
    pub cert_reload_interval: Duration,
    pub shutdown_timeout: Duration,
    /// The webhook server's connection limits.
    pub webhook_limits: server::Limits,
    /// Names of the platform's objects in the namespace that no Site object may take, besides
    /// the ones the configuration and the constants name ([`admission::Platform::reserves`]).
    pub reserved_names: Vec<String>,
}

/// The webhook asks the controller's Site cache who uses a public path.
impl admission::SiteDirectory for crate::controller::caches::Caches {
    fn path_users(&self, namespace: &str, name: &str, site_path: &str) -> Vec<String> {
        self.sharing(namespace, name, site_path)
            .iter()
            .filter_map(|other| other.metadata.name.clone())
            .collect()
    }
}

/// Why the process did not start. Each prints as one line, an invalid configuration as one line
/// per problem.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{}", .problems.iter().map(|p| format!("invalid configuration in {origin}: {p}")).collect::<Vec<_>>().join("\n"))]
    Config {
        /// The file, or `ConfigMap NS/NAME`.
        origin: String,
        problems: Vec<FieldError>,
    },
    #[error("TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("{0}")]
    SelfSigned(String),
    #[error("cannot listen on {addr}: {reason}")]
    Bind { addr: SocketAddr, reason: String },
    #[error("--cert-dir {path}: {reason}")]
    CertDir { path: PathBuf, reason: String },
    #[error("cannot write the listen report {path}: {reason}")]
    ListenReport { path: PathBuf, reason: String },
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("cannot reach the Kubernetes API server: {0}")]
    Api(String),
}

/// Loads and validates a configuration file.
pub fn load_config_file(path: &Path, namespace: &str) -> Result<PlatformConfig, StartError> {
    let ctx = Installation {
        namespace: Some(namespace),
    };
    PlatformConfig::load(path, &ctx).map_err(|e| StartError::Config {
        origin: path.display().to_string(),
        problems: e.into_problems("(document)"),
    })
}

/// Reads and validates the configuration ConfigMap `name` of `namespace` through the API.
pub async fn load_config_map(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<PlatformConfig, StartError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let invalid = |problems| StartError::Config {
        origin: format!("ConfigMap {namespace}/{name}"),
        problems,
    };
    let found = with_retry("reading the configuration", || api.get_opt(name))
        .await
        .map_err(|e| StartError::Api(e.to_string()))?;
    let Some(cm) = found else {
        return Err(invalid(vec![FieldError::new(
            "metadata.name",
            format!(
                "not found in namespace {namespace}: create it (manifests/base/config.yaml shows every key) or run with --config FILE"
            ),
        )]));
    };
    let ctx = Installation {
        namespace: Some(namespace),
    };
    crate::config::validate_configmap_data(cm.data.as_ref(), &ctx)
        .map_err(|e| invalid(e.into_problems(&crate::config::data_field())))
}

/// Retries `f` a bounded number of times with growing delays (the API server may still be
/// starting), returning the last error.
async fn with_retry<T, E: std::fmt::Display, F, Fut>(what: &str, mut f: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut delay = Duration::from_millis(250);
    let mut attempt = 1;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt >= 6 => return Err(e),
            Err(e) => {
                tracing::warn!(attempt, error = %e, "{what} failed; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(4));
                attempt += 1;
            }
        }
    }
}

/// The `User-Agent` of every request: `sites-operator/<version> (<command>)`, as kubectl and the
/// cluster's controllers name themselves, so that the API server's audit log, its metrics and
/// its logs tell the operator's requests (`run`) from its commands' (`upgrade`, `retention`,
/// `rollout status`) and from other clients of the same credentials.
pub fn identify(config: &mut kube::Config, command: &str) {
    let agent = format!("sites-operator/{} ({command})", env!("CARGO_PKG_VERSION"));
    if let Ok(value) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, value));
    }
}

/// A client for the cluster (in-cluster config or KUBECONFIG), checked by asking the API server
/// for its version, with a bounded retry.
async fn connect(counter: &prometheus::IntCounterVec) -> Result<kube::Client, StartError> {
    with_retry("connecting to the API server", || async {
        let mut config = kube::Config::infer().await.map_err(|e| e.to_string())?;
        identify(&mut config, "run");
        let client = kube::client::ClientBuilder::try_from(config)
            .map_err(|e| e.to_string())?
            .with_layer(&CountLayer::new(counter.clone()))
            .build();
        client
            .apiserver_version()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(client)
    })
    .await
    .map_err(StartError::Api)
}

/// Makes sure `--cert-dir` is a directory only this user controls ([`crate::certs::private_dir`]):
/// whoever can write to it can replace the certificate and key served.
pub fn cert_dir_ready(cert_dir: &Path) -> Result<(), StartError> {
    crate::certs::private_dir(cert_dir).map_err(|e| StartError::CertDir {
        path: cert_dir.to_path_buf(),
        reason: e.to_string(),
    })
}

async fn self_signed_files(
    client: &kube::Client,
    secret: &str,
    dns_names: &[String],
    cert_dir: &std::path::Path,
    mutating: &[String],
    validating: &[String],
    namespace: &str,
) -> Result<(PathBuf, PathBuf), StartError> {
    let failed = |e: &dyn std::fmt::Display| StartError::SelfSigned(e.to_string());
    let ensured = with_retry("storing the webhook certificate", || {
        selfsigned::ensure_certificate(client, namespace, secret, dns_names)
    })
    .await
    .map_err(|e| failed(&e))?;
    with_retry("patching the webhook CA bundle", || {
        selfsigned::patch_ca_bundles(client, &ensured.trust_pem, mutating, validating)
    })
    .await
    .map_err(|e| failed(&e))?;
    ensured.bundle.write(cert_dir).map_err(|e| failed(&e))?;
    Ok((cert_dir.join(CERT_FILE), cert_dir.join(KEY_FILE)))
}

/// `/metrics`: the registry's text exposition; behind [`access::require`] when `gate` is given.
fn metrics_router(registry: Registry, gate: Option<Arc<access::Gate>>) -> Router {
    let router = Router::new().route(
        "/metrics",
        get(|State(registry): State<Registry>| async move {
            (
                [(
                    axum::http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                metrics::encode(&registry),
            )
        }),
    );
    let router = match gate {
        // A route layer: a path that is not served is a 404 before anything is reviewed.
        Some(gate) => {
            router.route_layer(axum::middleware::from_fn_with_state(gate, access::require))
        }
        None => router,
    };
    router.with_state(registry)
}

/// `/healthz` (the process serves) and `/readyz` (TLS loaded, caches synced), open to anyone.
fn health_router(ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(ready): State<Arc<AtomicBool>>| async move {
                if ready.load(Ordering::Acquire) {
                    (StatusCode::OK, "ok\n").into_response()
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
                }
            }),
        )
        .with_state(ready)
}

/// Serves `router` over plain HTTP until `stop` resolves; `what` names the server in the log.
async fn serve_plain(
    listener: TcpListener,
    router: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    what: &'static str,
) {
    if let Err(e) = axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, server = what, "server failed");
    }
}

/// How `/metrics` is served, for the start-up log line.
fn metrics_access(insecure: bool) -> &'static str {
    if insecure {
        "plain HTTP, open to anyone"
    } else {
        "HTTPS, for callers a TokenReview and a SubjectAccessReview admit"
    }
}

/// Binds `addr` and returns the listener with the address it got (the real port when `addr`
/// asked for port 0).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let failed = |e: std::io::Error| StartError::Bind {
        addr,
        reason: e.to_string(),
    };
    let listener = TcpListener::bind(addr).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    Ok((listener, bound))
}

/// The addresses the servers listen on, as `--listen-report` writes them: one line,
/// `webhook=ADDR metrics=ADDR health=ADDR`.
///
/// With port 0 the kernel picks the ports while the socket is bound, so whoever started the
/// process learns them only from the process; a port chosen by the caller beforehand could be
/// taken by someone else before the process binds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listening {
    pub webhook: SocketAddr,
    pub metrics: SocketAddr,
    pub health: SocketAddr,
}

impl Listening {
    /// Reads a report line; None unless it has the three addresses.
    pub fn parse(text: &str) -> Option<Listening> {
        let mut webhook = None;
        let mut metrics = None;
        let mut health = None;
        for field in text.split_whitespace() {
            match field.split_once('=') {
                Some(("webhook", a)) => webhook = a.parse().ok(),
                Some(("metrics", a)) => metrics = a.parse().ok(),
                Some(("health", a)) => health = a.parse().ok(),
                _ => {}
            }
        }
        Some(Listening {
            webhook: webhook?,
            metrics: metrics?,
            health: health?,
        })
    }

    /// Writes the report to `path` through a new temporary file and a rename, so a reader
    /// polling for the file never sees half of it ([`crate::certs::write_file`]: the temporary
    /// file has a random name and is created exclusively, never through a symlink, mode 0644;
    /// a symlink at `path` is replaced, not followed). The report is often written to a shared
    /// directory such as /tmp, where anyone may plant a file or symlink by a predictable name.
    async fn write(&self, path: &std::path::Path) -> Result<(), StartError> {
        let failed = |e: std::io::Error| StartError::ListenReport {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let (target, line) = (path.to_path_buf(), format!("{self}\n"));
        tokio::task::spawn_blocking(move || {
            crate::certs::write_file(&target, line.as_bytes(), false)
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|written| written)
        .map_err(failed)
    }
}

impl ConfigSource {
    /// The ConfigMap's name, when the configuration comes from one.
    pub fn config_map(&self) -> Option<&str> {
        match self {
            ConfigSource::ConfigMap(name) => Some(name),
            ConfigSource::File(_) => None,
        }
    }
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::ConfigMap(name) => write!(f, "ConfigMap {name}"),
            ConfigSource::File(path) => write!(f, "{}", path.display()),
        }
    }
}

impl std::fmt::Display for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "webhook={} metrics={} health={}",
            self.webhook, self.metrics, self.health
        )
    }
}

/// Runs until `shutdown` resolves: validates the configuration, loads (or creates) the serving
/// certificate, connects to the cluster, serves webhooks and health, starts the controller
/// (ready once its caches synced), then drains in-flight requests and reconciles for up to
/// `shutdown_timeout` and releases the Lease.
pub async fn run(
    opts: RunOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    // A configuration file is checked before anything else: a bad one fails fast.
    let from_file = match &opts.config {
        ConfigSource::File(path) => Some(load_config_file(path, &opts.namespace)?),
        ConfigSource::ConfigMap(_) => None,
    };
    let registry = Registry::new();
    #[cfg(target_os = "linux")]
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    let api_requests = crate::metrics::register_api_requests(&registry)?;
    metrics::register_build_info(&registry)?;
    let leader_status = metrics::register_leader(&registry, &opts.lease_name)?;
    // Files are checked before the API server is contacted: a bad certificate path fails fast.
    let client_ca = opts.client_ca.as_deref().map(tls::load_roots).transpose()?;
    let files = match &opts.certs {
        CertSource::Files { cert, key } => Some(CertStore::load(cert, key)?),
        CertSource::SelfSigned { cert_dir, .. } => {
            cert_dir_ready(cert_dir)?;
            None
        }
    };
    let client = connect(&api_requests).await?;
    let config = match from_file {
        Some(config) => config,
        None => {
            let name = opts
                .config
                .config_map()
                .unwrap_or(crate::config::CONFIGMAP_NAME);
            load_config_map(&client, &opts.namespace, name).await?
        }
    };
    crate::telemetry::set_dependency_level(config.sites.operator.dependency_log_level);
    let store = match (files, &opts.certs) {
        (Some(store), _) => store,
        (
            None,
            CertSource::SelfSigned {
                secret,
                dns_names,
                cert_dir,
                mutating,
                validating,
            },
        ) => {
            let (cert, key) = self_signed_files(
                &client,
                secret,
                dns_names,
                cert_dir,
                mutating,
                validating,
                &opts.namespace,
            )
            .await?;
            CertStore::load(&cert, &key)?
        }
        (None, CertSource::Files { cert, key }) => CertStore::load(cert, key)?,
    };
    let tls_config = Arc::new(tls::server_config(store.clone(), client_ca)?);

    let webhook_metrics = WebhookMetrics::register(&registry)?;
    store.report_expiry(webhook_metrics.certificate_expiry.clone());
    let (webhook_listener, webhook) = bind(opts.webhook_addr).await?;
    let (metrics_listener, metrics) = bind(opts.metrics_addr).await?;
    let (health_listener, health) = bind(opts.health_addr).await?;
    let listening = Listening {
        webhook,
        metrics,
        health,
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        webhook = %webhook,
        metrics = %metrics,
        metrics_access = metrics_access(opts.metrics_insecure),
        health = %health,
        routing_mode = config.routing.mode.as_str(),
        config = %opts.config,
        "sites-operator started"
    );
    // Every socket is bound (connections queue until the servers run): the report is a promise
    // that connecting works, not that the webhooks are ready (/readyz says that).
    if let Some(path) = &opts.listen_report {
        listening.write(path).await?;
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let ready = Arc::new(AtomicBool::new(false));
    let health_task = tokio::spawn(serve_plain(
        health_listener,
        health_router(ready.clone()),
        stopped(stop_rx.clone()),
        "health",
    ));
    let metrics_task = if opts.metrics_insecure {
        tokio::spawn(serve_plain(
            metrics_listener,
            metrics_router(registry.clone(), None),
            stopped(stop_rx.clone()),
            "metrics",
        ))
    } else {
        // The serving certificate of the webhooks (reloaded with it), no client certificates.
        tokio::spawn(server::serve_tls_limited(
            metrics_listener,
            Arc::new(tls::server_config(store.clone(), None)?),
            metrics_router(registry.clone(), Some(access::Gate::new(client.clone()))),
            stopped(stop_rx.clone()),
            opts.shutdown_timeout,
            server::Limits::default(),
            None,
        ))
    };
    let reload_task = tokio::spawn(
        store
            .clone()
            .watch(opts.cert_reload_interval, stopped(stop_rx.clone())),
    );
    let live = Live::new(config);
    let log_level = tokio::spawn(follow_log_level(live.changes()));
    let platform = Arc::new(admission::Platform {
        reserved: opts.reserved_names.clone(),
        ..Default::default()
    });
    let app = server::router(
        WebhookState {
            config: live.clone(),
            metrics: webhook_metrics.clone(),
            platform: platform.clone(),
        },
        &opts.webhook_limits,
    );
    let webhook_task = tokio::spawn(server::serve_tls_limited(
        webhook_listener,
        tls_config,
        app,
        stopped(stop_rx.clone()),
        opts.shutdown_timeout,
        opts.webhook_limits,
        Some(webhook_metrics),
    ));

    // Reconcile workers: caches first (all replicas keep them warm), writes only when leading.
    let (leading_tx, leading_rx) = watch::channel(!opts.leader_election);
    let leader_task = tokio::spawn(follow_leadership(leading_rx.clone(), leader_status));
    let elector = opts.leader_election.then(|| {
        let elector = Elector::new(
            client.clone(),
            &opts.namespace,
            &opts.lease_name,
            opts.identity.clone(),
            Timing::default(),
        );
        tokio::spawn(elector.run(leading_tx, stopped(stop_rx.clone())))
    });
    let controller_options = controller::Options {
        namespace: opts.namespace.clone(),
        workers: opts.workers,
        config_map: opts.config.config_map().map(String::from),
        tunables: Tunables::default(),
        instance: Some(opts.identity.clone()),
        drain: opts.shutdown_timeout,
        retention_interval: Some(Duration::from_secs(3600)),
    };
    tokio::pin!(shutdown);
    let controller = tokio::select! {
        c = Controller::start(client.clone(), live, &registry, controller_options, leading_rx) => Some(c?),
        _ = &mut shutdown => None,
    };
    if let Some(c) = &controller {
        // One path, one Site: from now on the webhook answers from the synced Site cache.
        let _ = platform.sites.set(Arc::new(c.context.caches.clone()));
        ready.store(true, Ordering::Release);
        tracing::info!("ready");
        shutdown.await;
    }
    tracing::info!("shutting down: draining in-flight requests and reconciles");
    ready.store(false, Ordering::Release);
    let _ = stop_tx.send(true);
    if let Some(c) = controller {
        c.shutdown().await;
    }
    if let Some(e) = elector {
        let _ = e.await;
    }
    log_level.abort();
    leader_task.abort();
    let _ = webhook_task.await;
    let _ = reload_task.await;
    let _ = metrics_task.await;
    let _ = health_task.await;
    tracing::info!("stopped");
    Ok(())
}

/// Keeps `leader_election_master_status` at 1 while this replica leads (always, without leader
/// election: it then writes as the only replica), 0 otherwise.
async fn follow_leadership(mut leading: watch::Receiver<bool>, gauge: prometheus::IntGauge) {
    loop {
        gauge.set(i64::from(*leading.borrow_and_update()));
        if leading.changed().await.is_err() {
            gauge.set(0);
            return;
        }
    }
}

/// Sets the Kubernetes client crates' log level (`sitesConfig.operator.dependency_log_level`)
/// from every configuration that comes into force.
async fn follow_log_level(mut changes: watch::Receiver<Arc<PlatformConfig>>) {
    while changes.changed().await.is_ok() {
        let level = changes
            .borrow_and_update()
            .sites
            .operator
            .dependency_log_level;
        crate::telemetry::set_dependency_level(level);
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn termination_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listen_report_reads_back_what_it_writes() {
        let listening = Listening {
            webhook: "127.0.0.1:40153".parse().unwrap(),
            metrics: "[::1]:38421".parse().unwrap(),
            health: "127.0.0.1:8081".parse().unwrap(),
        };
        let line = format!("{listening}\n");
        assert_eq!(
            line,
            "webhook=127.0.0.1:40153 metrics=[::1]:38421 health=127.0.0.1:8081\n"
        );
        assert_eq!(Listening::parse(&line), Some(listening));
        assert_eq!(
            Listening::parse("webhook=127.0.0.1:1"),
            None,
            "half a report"
        );
        assert_eq!(Listening::parse(""), None);
    }

    /// The report is often written to a shared directory: symlinks planted at the names a
    /// writer would use (`<report>.partial`, which the previous version wrote through, and the
    /// report itself) redirect nothing.
    #[cfg(unix)]
    #[tokio::test]
    async fn the_listen_report_is_never_written_through_a_planted_symlink() {
        use std::os::unix::fs::{PermissionsExt as _, symlink};
        let dir = std::env::temp_dir().join(format!("report-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "victim").unwrap();
        let report = dir.join("listening");
        let partial = dir.join("listening.partial");
        symlink(&victim, &partial).unwrap();
        symlink(&victim, &report).unwrap();
        let listening = Listening {
            webhook: "127.0.0.1:1".parse().unwrap(),
            metrics: "127.0.0.1:2".parse().unwrap(),
            health: "127.0.0.1:3".parse().unwrap(),
        };
        listening.write(&report).await.unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim");
        let meta = std::fs::symlink_metadata(&report).unwrap();
        assert!(meta.file_type().is_file(), "the symlink is replaced");
        // 0644 at most (the umask may take more away), read and written by its owner.
        let mode = meta.permissions().mode() & 0o7777;
        assert_eq!((mode & !0o644, mode & 0o600), (0, 0o600), "{mode:o}");
        assert_eq!(
            std::fs::read_to_string(&report).unwrap(),
            format!("{listening}\n")
        );
        // Written again over the report; nothing is left beside it but what was planted.
        listening.write(&report).await.unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["listening", "listening.partial", "victim"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A refused `--cert-dir` names the flag and the directory.
    #[cfg(unix)]
    #[test]
    fn a_cert_dir_others_may_write_is_refused_naming_the_flag() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("cert-dir-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = cert_dir_ready(&dir).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "--cert-dir {}: the directory may be written by its group or others (mode 0777); \
                 make it private (chmod 700) or choose another",
                dir.display()
            )
        );
        std::fs::remove_dir(&dir).unwrap();
        cert_dir_ready(&dir).unwrap();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::remove_dir(&dir).unwrap();
    }
}
