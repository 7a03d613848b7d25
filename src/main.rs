//! `sites-operator`: command-line entry point.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use sites_operator::app::{self, CertSource, ConfigSource, RunOptions};
use sites_operator::config::{ConfigError, Installation, PlatformConfig};
use sites_operator::telemetry::{self, LogFormat};

// mimalloc: at 10,000 Sites the operator's resident memory under the system allocator was about
// three times its live heap (many small, long-lived cache objects), and every webhook request
// allocates. Built without transparent huge pages (Cargo.toml), with a short purge delay
// (`allocator::tune`); see BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Kubernetes operator and admission webhook server for Site resources (sites.ecmwf.int/v1).
///
/// A Site describes a hosted web site; the operator turns each Site into its Kubernetes objects
/// and reports the state of its pods back into the Site status.
#[derive(Parser, Debug)]
#[command(name = "sites-operator", version, propagate_version = true)]
struct Cli {
    /// Log output format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SITES_OPERATOR_LOG_FORMAT")]
    log_format: LogFormat,

    /// Log level (error, warn, info, debug, trace) or filter directives such as
    /// `info,sites_operator=debug`. The Kubernetes client crates follow the configuration's
    /// `dependency_log_level` unless named here (`info,kube=trace`).
    #[arg(
        long,
        global = true,
        default_value = "info",
        env = "SITES_OPERATOR_LOG_LEVEL"
    )]
    log_level: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the Site CustomResourceDefinition as YAML.
    ///
    /// The output is what `manifests/base/crd.yaml` holds: `sites-operator crd | kubectl apply -f -`
    /// installs or updates the CRD.
    Crd {
        /// Also print the Gateway API HTTPRoute and Gateway CRDs (standard channel, as this
        /// release's gateway-api types define them, with the upstream printer columns), for
        /// development clusters without the Gateway API.
        /// Production clusters install the upstream Gateway API CRDs.
        #[arg(long)]
        with_gateway_api: bool,
    },

    /// Validate a platform configuration file.
    ///
    /// FILE is the configuration YAML (the `config.yaml` key of the `sites-config` ConfigMap),
    /// or a ConfigMap manifest holding it, or `-` for standard input. Prints `ok` and exits 0 when
    /// the configuration is valid; otherwise prints one line per problem, `key: message`, and
    /// exits 2.
    CheckConfig {
        /// Configuration file, ConfigMap manifest, or `-` for standard input.
        file: PathBuf,
        /// Namespace the platform is installed in; enables the rule that a chart-created Gateway
        /// lives in that namespace.
        #[arg(long)]
        namespace: Option<String>,
    },

    /// Run the operator: webhook server, reconcile workers, metrics and health endpoints.
    ///
    /// The admission webhooks are served over HTTPS; /metrics over HTTPS to callers a TokenReview
    /// authenticates and a SubjectAccessReview allows (plain HTTP with --metrics-insecure);
    /// /healthz and /readyz over plain HTTP on their own port.
    ///
    /// Validates the platform configuration first and refuses to start (exit 2, one line) when it
    /// is invalid or the certificate cannot be loaded. The serving certificate is reloaded when
    /// its files change. SIGTERM or Ctrl-C stops accepting, drains in-flight requests and exits 0.
    /// Reconcile workers run behind leader election; every replica serves the webhooks.
    Run(Box<RunArgs>),

    /// Upgrade Sites to the platform version (the Hub's "Upgrade" flow).
    ///
    /// Rewrites every built-in application's image to the catalogue image at
    /// `sitesConfig.version` and keeps custom images; the operator then re-renders and restarts
    /// the site. `--force` also requests a forced upgrade (a new
    /// `sites.ecmwf.int/upgrade-request` UUID), so up-to-date sites restart too. Archived sites
    /// are upgraded and stay at zero replicas. Prints one line per site; exit 1 when a site could
    /// not be upgraded.
    Upgrade {
        /// The Site to upgrade (its name); or use --all.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        site: Option<String>,
        /// Upgrade every Site in the namespace.
        #[arg(long)]
        all: bool,
        /// Request a forced upgrade even when the images are current.
        #[arg(long)]
        force: bool,
        /// Instead of upgrading: record, in each Site, the image its built-in applications run
        /// now (for Sites created before images were recorded on creation), so that a new
        /// platform version moves them only through an upgrade. Nothing restarts.
        #[arg(long, conflicts_with = "force")]
        record_images: bool,
        /// Show what would change; the API server checks the change (server-side dry run) but
        /// stores nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        target: SitesArgs,
    },

    /// Apply the retention policy once (the operator also runs it hourly).
    ///
    /// Sites past `retention_date` + `sitesConfig.retention.archive_after_days` are archived
    /// (`enabled: false`); archived sites are deleted `delete_after_days` after archiving. Sites
    /// without a retention date are never touched. Prints one line per site acted on.
    Retention {
        /// Decide and print, write nothing.
        #[arg(long)]
        dry_run: bool,
        /// The date to apply the policy for (YYYY-MM-DD); default today (UTC).
        #[arg(long)]
        today: Option<String>,
        #[command(flatten)]
        target: SitesArgs,
    },

    /// Write a development CA and serving certificate (ca.crt, tls.crt, tls.key).
    ///
    /// For local runs: `sites-operator certs --out certs/` then
    /// `sites-operator run --tls-cert certs/tls.crt --tls-key certs/tls.key ...`.
    Certs {
        /// Directory to write into (created when missing).
        #[arg(long, default_value = "certs")]
        out: PathBuf,
        /// Webhook Service name; its cluster DNS names go into the certificate.
        #[arg(long, default_value = "sites-operator-webhook")]
        service: String,
        /// Namespace of the webhook Service.
        #[arg(long, default_value = "sites")]
        namespace: String,
        /// Extra DNS names or IP addresses (repeatable); localhost and 127.0.0.1 are always included.
        #[arg(long = "name")]
        names: Vec<String>,
        /// Validity in days.
        #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
        days: u32,
    },

    /// Platform rollouts: the change budget's waves across the Sites.
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
}

#[derive(Subcommand, Debug)]
enum RolloutCommand {
    /// Follow the rollout of the platform configuration in force.
    ///
    /// Shows the configuration's version, the Sites rolled, rolling, waiting, failed and
    /// paused, and the time left at the pace so far, as the leading operator publishes them (the
    /// ConfigMap `sites-rollout`); on a terminal a progress bar, rewritten in place, otherwise a
    /// line at each change. Follows until the rollout is done (exit 0) or halted (exit 1, the
    /// line names the Site that halted it).
    Status {
        /// Namespace the operator runs in.
        #[arg(long, env = "POD_NAMESPACE", default_value = "sites")]
        namespace: String,
        /// Print the state once and exit: 0 done, 1 halted, 3 under way.
        #[arg(long)]
        once: bool,
    },
}

/// Where the one-shot commands find the Sites and the platform configuration.
#[derive(clap::Args, Debug)]
struct SitesArgs {
    /// Namespace of the Sites.
    #[arg(long, env = "POD_NAMESPACE", default_value = "sites")]
    namespace: String,
    #[command(flatten)]
    config: ConfigArgs,
}

/// Where the platform configuration comes from.
#[derive(clap::Args, Debug)]
struct ConfigArgs {
    /// The ConfigMap in the namespace that holds the platform configuration under `config.yaml`,
    /// read through the API (`run` follows it: a valid change is in force without a restart).
    #[arg(long, default_value = sites_operator::config::CONFIGMAP_NAME, value_name = "NAME")]
    config_map: String,
    /// Read the configuration from this file instead (the `config.yaml` of the ConfigMap, or a
    /// ConfigMap manifest), once: for local runs without the ConfigMap.
    #[arg(long, env = "SITES_OPERATOR_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
}

impl ConfigArgs {
    fn source(self) -> ConfigSource {
        match self.config {
            Some(path) => ConfigSource::File(path),
            None => ConfigSource::ConfigMap(self.config_map),
        }
    }
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Namespace the operator runs in (the platform namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "sites")]
    namespace: String,
    /// Address of the HTTPS webhook server (port 0: any free port, see --listen-report).
    #[arg(long, default_value = "0.0.0.0:9443")]
    webhook_addr: std::net::SocketAddr,
    /// Address of the metrics server (/metrics; port 0: any free port). HTTPS with the serving
    /// certificate; a caller needs a bearer token that a TokenReview authenticates and a
    /// SubjectAccessReview allows `get` on the non-resource URL /metrics (401/403 otherwise).
    #[arg(long, default_value = "0.0.0.0:8443")]
    metrics_addr: std::net::SocketAddr,
    /// Serve /metrics over plain HTTP to anyone (local runs and the playground).
    #[arg(long)]
    metrics_insecure: bool,
    /// Address of the health server (/healthz, /readyz; plain HTTP, open; port 0: any free port).
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_addr: std::net::SocketAddr,
    /// Once the servers listen, write their addresses to this file as one line
    /// `webhook=IP:PORT metrics=IP:PORT health=IP:PORT` (how a caller that asked for port 0
    /// learns the ports).
    #[arg(long, value_name = "FILE")]
    listen_report: Option<PathBuf>,
    /// Serving certificate (PEM chain); reloaded when it changes.
    #[arg(
        long,
        required_unless_present = "self_signed",
        conflicts_with = "self_signed"
    )]
    tls_cert: Option<PathBuf>,
    /// Serving private key (PEM); reloaded with the certificate.
    #[arg(
        long,
        required_unless_present = "self_signed",
        conflicts_with = "self_signed"
    )]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA bundle (PEM), so only the API server can
    /// call the webhooks.
    #[arg(long)]
    client_ca: Option<PathBuf>,
    /// Generate a CA and serving certificate, share them through a Secret and patch the CA into
    /// the webhook configurations (for clusters without cert-manager).
    #[arg(long)]
    self_signed: bool,
    /// Secret holding the self-signed certificate.
    #[arg(long, default_value = "sites-operator-webhook-tls")]
    self_signed_secret: String,
    /// Webhook Service whose DNS names the self-signed certificate covers.
    #[arg(long, default_value = "sites-operator-webhook")]
    webhook_service: String,
    /// Metrics Service whose DNS names the self-signed certificate covers too (Prometheus
    /// verifies the metrics server against them).
    #[arg(long, default_value = sites_operator::labels::METRICS_SERVICE)]
    metrics_service: String,
    /// Directory the self-signed certificate is written to for serving.
    #[arg(long, default_value = "/tmp/sites-operator-certs")]
    cert_dir: PathBuf,
    /// MutatingWebhookConfiguration to patch the self-signed CA into (repeatable).
    #[arg(long, default_value = "sites-operator")]
    mutating_webhook: Vec<String>,
    /// ValidatingWebhookConfiguration to patch the self-signed CA into (repeatable).
    #[arg(long, default_value = "sites-operator")]
    validating_webhook: Vec<String>,
    /// Reconcile workers (default: `sitesConfig.operator.worker_limit`).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
    workers: Option<u16>,
    /// Elect a leader through a coordination.k8s.io Lease so only one replica writes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Name of the leader Lease (in --namespace).
    #[arg(long, default_value = "sites-operator")]
    lease_name: String,
    /// This replica's identity (Lease holder, Event reporter); default: POD_NAME or the host
    /// name, plus a random suffix.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// How often the certificate files are checked for changes.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    cert_reload_interval: std::time::Duration,
    /// How long in-flight requests may take to finish on shutdown.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    shutdown_timeout: std::time::Duration,
    /// How long a webhook client may take to send a request header (HTTP/1.1; an idle HTTP/1.1
    /// keep-alive connection waits under this limit too), and to send anything after the TLS
    /// handshake. At most 10 minutes.
    #[arg(long, default_value = "10s", value_parser = parse_limit_duration)]
    webhook_header_read_timeout: std::time::Duration,
    /// How long a webhook connection may stay without a request before it is closed (a request
    /// in progress finishes first); HTTP/2 PINGs do not count as requests. At most 1 hour.
    #[arg(long, default_value = "120s", value_parser = parse_idle_duration)]
    webhook_idle_timeout: std::time::Duration,
    /// Most webhook connections open at once; further ones are closed on accept and counted in
    /// sites_webhook_connections_refused_total.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    webhook_max_connections: u32,
    /// Most webhook connections one peer address may hold open at once; further ones are closed
    /// on accept and counted in sites_webhook_connections_refused_total. Default: half of
    /// --webhook-max-connections (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    webhook_max_connections_per_peer: Option<u32>,
    /// How long a webhook answer may take to be written once it is ready (an HTTP/2 client
    /// that keeps its flow-control window shut), and how long a client may leave the answers
    /// unread (its socket full); then its connection is dropped. At most 10 minutes.
    #[arg(long, default_value = "10s", value_parser = parse_limit_duration)]
    webhook_answer_timeout: std::time::Duration,
    /// How long a webhook client may take to send a request body, from the end of its header;
    /// a slower one is answered 408 and its connection closed. At most 10 minutes.
    #[arg(long, default_value = "10s", value_parser = parse_limit_duration)]
    webhook_body_timeout: std::time::Duration,
    /// The memory, in MiB, that webhook requests in flight may hold together (their bodies,
    /// what decoding them takes, their answers until written); a request waits for its share at
    /// most 1 s, then gets 503. An eighth is kept for small reviews whose body has come, so
    /// that large and slow requests never hold it all. At least 64: the largest request alone
    /// needs about 55 of the other seven eighths.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(64..=65_536))]
    webhook_memory_budget_mib: u32,
}

/// A duration of at most 10 minutes.
fn parse_limit_duration(s: &str) -> Result<std::time::Duration, String> {
    parse_duration(s).and_then(|d| at_most(s, d, 600))
}

/// A duration of at most 1 hour.
fn parse_idle_duration(s: &str) -> Result<std::time::Duration, String> {
    parse_duration(s).and_then(|d| at_most(s, d, 3600))
}

fn at_most(s: &str, d: std::time::Duration, secs: u64) -> Result<std::time::Duration, String> {
    if d > std::time::Duration::from_secs(secs) {
        return Err(format!("{s:?} is longer than the maximum of {secs}s"));
    }
    Ok(d)
}

/// Parses `500ms`, `10s`, `2m`, `1h`.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (number, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))
        .ok_or_else(|| format!("{s:?} needs a unit: ms, s, m or h"))?;
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 10s, 2m or 1h"))?;
    let d = match unit {
        "ms" => std::time::Duration::from_millis(n),
        "s" => std::time::Duration::from_secs(n),
        "m" => std::time::Duration::from_secs(n.saturating_mul(60)),
        "h" => std::time::Duration::from_secs(n.saturating_mul(3600)),
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if d.is_zero() {
        return Err(format!("{s:?} must be greater than zero"));
    }
    Ok(d)
}

fn run(args: RunArgs) -> ExitCode {
    // The platform objects a Site's objects may never be named like (with the configuration's).
    let reserved_names = vec![
        args.webhook_service.clone(),
        args.metrics_service.clone(),
        args.self_signed_secret.clone(),
        args.lease_name.clone(),
    ];
    let certs = if args.self_signed {
        let mut dns_names =
            sites_operator::certs::service_dns_names(&args.webhook_service, &args.namespace);
        dns_names.extend(sites_operator::certs::service_dns_names(
            &args.metrics_service,
            &args.namespace,
        ));
        dns_names.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
        CertSource::SelfSigned {
            secret: args.self_signed_secret,
            dns_names,
            cert_dir: args.cert_dir,
            mutating: args.mutating_webhook,
            validating: args.validating_webhook,
        }
    } else {
        match (args.tls_cert, args.tls_key) {
            (Some(cert), Some(key)) => CertSource::Files { cert, key },
            _ => {
                eprintln!("error: --tls-cert and --tls-key are required without --self-signed");
                return ExitCode::from(EXIT_INVALID);
            }
        }
    };
    let identity = args.identity.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "sites-operator".into());
        format!("{host}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
    });
    let opts = RunOptions {
        config: args.config.source(),
        workers: args.workers.map(usize::from),
        leader_election: args.leader_elect,
        lease_name: args.lease_name,
        identity,
        namespace: args.namespace,
        webhook_addr: args.webhook_addr,
        metrics_addr: args.metrics_addr,
        metrics_insecure: args.metrics_insecure,
        health_addr: args.health_addr,
        listen_report: args.listen_report,
        certs,
        client_ca: args.client_ca,
        cert_reload_interval: args.cert_reload_interval,
        shutdown_timeout: args.shutdown_timeout,
        webhook_limits: sites_operator::admission::server::Limits {
            header_read_timeout: args.webhook_header_read_timeout,
            idle_timeout: args.webhook_idle_timeout,
            max_connections: args.webhook_max_connections as usize,
            body_timeout: args.webhook_body_timeout,
            memory_budget: args.webhook_memory_budget_mib as usize * 1024 * 1024,
            answer_timeout: args.webhook_answer_timeout,
            max_connections_per_peer: args
                .webhook_max_connections_per_peer
                .unwrap_or(args.webhook_max_connections.div_ceil(2))
                as usize,
        },
        reserved_names,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(app::run(opts, app::termination_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "not started");
            for line in e.to_string().lines() {
                eprintln!("error: {line}");
            }
            ExitCode::from(EXIT_INVALID)
        }
    }
}

/// Loads the platform configuration for a one-shot command; an invalid one is one `error:` line
/// and exit 2.
/// The platform configuration of a one-shot command: the file, or the ConfigMap through the
/// API. An invalid one prints one line per problem.
async fn platform_config(
    client: &kube::Client,
    namespace: &str,
    source: &ConfigSource,
) -> Result<PlatformConfig, ExitCode> {
    let loaded = match source {
        ConfigSource::File(path) => app::load_config_file(path, namespace),
        ConfigSource::ConfigMap(name) => app::load_config_map(client, namespace, name).await,
    };
    loaded.map_err(|e| {
        for line in e.to_string().lines() {
            eprintln!("error: {line}");
        }
        ExitCode::from(EXIT_INVALID)
    })
}

/// Runs the one-shot command `name` with a Kubernetes client (KUBECONFIG or in-cluster) that
/// names it in its User-Agent ([`sites_operator::app::identify`]).
fn with_client<F, Fut>(name: &str, command: F) -> ExitCode
where
    F: FnOnce(kube::Client) -> Fut,
    Fut: std::future::Future<Output = ExitCode>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let client = kube::Config::infer()
            .await
            .map_err(|e| e.to_string())
            .and_then(|mut config| {
                sites_operator::app::identify(&mut config, name);
                kube::Client::try_from(config).map_err(|e| e.to_string())
            });
        match client {
            Ok(client) => command(client).await,
            Err(e) => {
                eprintln!("error: cannot reach the Kubernetes API server: {e}");
                ExitCode::from(EXIT_INVALID)
            }
        }
    })
}

/// `rollout status`: reads what the leader publishes, once a second, until done or halted.
fn rollout_status(namespace: &str, once: bool) -> ExitCode {
    use sites_operator::controller::rollout::{RolloutStatus, STATUS_CONFIGMAP, STATUS_KEY};
    use std::io::{IsTerminal, Write};
    with_client("rollout status", |client| async move {
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, namespace);
        let live = std::io::stdout().is_terminal() && !once;
        let mut shown: Option<RolloutStatus> = None;
        loop {
            let status = match api.get_opt(STATUS_CONFIGMAP).await {
                Ok(cm) => cm
                    .and_then(|cm| cm.data?.remove(STATUS_KEY))
                    .and_then(|text| serde_json::from_str::<RolloutStatus>(&text).ok()),
                Err(e) => {
                    eprintln!("error: cannot read ConfigMap {namespace}/{STATUS_CONFIGMAP}: {e}");
                    return ExitCode::from(EXIT_INVALID);
                }
            };
            let Some(status) = status else {
                eprintln!(
                    "error: no rollout in ConfigMap {namespace}/{STATUS_CONFIGMAP}: the leading operator publishes it (is one running in {namespace}?)"
                );
                return ExitCode::from(EXIT_INVALID);
            };
            let line = status.line(k8s_openapi::jiff::Timestamp::now(), live);
            let end = match (status.halted.is_some(), status.done()) {
                (true, _) => Some(ExitCode::FAILURE),
                (false, true) => Some(ExitCode::SUCCESS),
                (false, false) if once => Some(ExitCode::from(3)),
                _ => None,
            };
            let mut out = std::io::stdout();
            if live {
                let _ = write!(out, "\r\x1b[K{line}");
            } else if shown.as_ref() != Some(&status) || end.is_some() {
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
            if let Some(code) = end {
                if live {
                    let _ = writeln!(out);
                }
                return code;
            }
            shown = Some(status);
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    })
}

fn retention(
    dry_run: bool,
    today: Option<&str>,
    namespace: &str,
    config: ConfigSource,
) -> ExitCode {
    let today = match today {
        None => sites_operator::retention::today(),
        Some(d) => match d.parse() {
            Ok(d) => d,
            Err(_) => {
                eprintln!("error: --today: {d:?} is not a date (YYYY-MM-DD)");
                return ExitCode::from(EXIT_INVALID);
            }
        },
    };
    with_client("retention", |client| async move {
        let cfg = match platform_config(&client, namespace, &config).await {
            Ok(c) => c,
            Err(code) => return code,
        };
        let mut progress = sites_operator::progress::Progress::stderr(
            "retention",
            if dry_run { "to act on" } else { "acted on" },
        );
        let result = sites_operator::retention::run_once_with_progress(
            &client,
            namespace,
            &cfg.sites.retention,
            today,
            dry_run,
            |c| progress.update(c),
        )
        .await;
        progress.finish();
        match result {
            Ok(acted) => {
                for (site, action) in acted {
                    let what = match action {
                        sites_operator::retention::Action::Archive => "archived",
                        sites_operator::retention::Action::Delete => "deleted",
                        sites_operator::retention::Action::Keep => "kept",
                    };
                    println!("{site}: {what}{}", if dry_run { " (dry run)" } else { "" });
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn upgrade(
    site: Option<String>,
    action: sites_operator::upgrade::Action,
    dry_run: bool,
    namespace: &str,
    config: ConfigSource,
) -> ExitCode {
    let target = match site {
        Some(s) => sites_operator::upgrade::Target::One(s),
        None => sites_operator::upgrade::Target::All,
    };
    with_client("upgrade", |client| async move {
        let cfg = match platform_config(&client, namespace, &config).await {
            Ok(c) => c,
            Err(code) => return code,
        };
        // Progress for --all (one Site needs none): live on a terminal, else one summary line.
        let all = matches!(target, sites_operator::upgrade::Target::All);
        let mut progress = all.then(|| {
            sites_operator::progress::Progress::stderr(
                "upgrade",
                if dry_run { "to change" } else { "changed" },
            )
        });
        let result = sites_operator::upgrade::upgrade_with_progress(
            &client,
            namespace,
            &cfg,
            &target,
            action,
            dry_run,
            |c| {
                if let Some(p) = progress.as_mut() {
                    p.update(c)
                }
            },
        )
        .await;
        if let Some(p) = progress {
            p.finish();
        }
        match result {
            Ok(outcomes) => {
                let failed = outcomes.iter().any(|o| o.error.is_some());
                for o in &outcomes {
                    println!(
                        "{o}{}",
                        if dry_run && o.written {
                            " (dry run)"
                        } else {
                            ""
                        }
                    );
                }
                if failed {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                eprintln!(
                    "error: no such Site in namespace {namespace}: {}",
                    s.message
                );
                ExitCode::from(EXIT_INVALID)
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn write_certs(
    out: &std::path::Path,
    service: &str,
    namespace: &str,
    names: Vec<String>,
    days: u32,
) -> ExitCode {
    let mut all = sites_operator::certs::service_dns_names(service, namespace);
    all.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
    for n in names {
        if !all.contains(&n) {
            all.push(n);
        }
    }
    match sites_operator::certs::generate(&all, days).and_then(|b| b.write(out)) {
        Ok(()) => {
            println!(
                "wrote {}/ca.crt, tls.crt, tls.key for {}",
                out.display(),
                all.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

/// Exit code for invalid input: a bad configuration, unreadable file, bad flag value.
const EXIT_INVALID: u8 = 2;

fn main() -> ExitCode {
    sites_operator::allocator::tune();
    let cli = Cli::parse();
    // The client crates' level (`sitesConfig.operator.dependency_log_level`) is set once `run`
    // has read the configuration.
    if let Err(e) = telemetry::init(cli.log_format, &cli.log_level) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_INVALID);
    }
    let allocator = sites_operator::allocator::in_use();
    tracing::debug!(
        mimalloc = allocator.mimalloc,
        purge_delay_ms = allocator.purge_delay_ms,
        "memory allocator"
    );

    match cli.command {
        Command::Crd { with_gateway_api } => {
            print!("{}", sites_operator::definitions::crd_yaml());
            if with_gateway_api {
                for crd in sites_operator::definitions::gateway_api_crds() {
                    match serde_yaml_ng::to_string(&crd) {
                        Ok(yaml) => print!("---\n{yaml}"),
                        Err(e) => {
                            eprintln!("error: cannot print the Gateway API CRDs: {e}");
                            return ExitCode::FAILURE;
                        }
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Command::CheckConfig { file, namespace } => {
            let ctx = Installation {
                namespace: namespace.as_deref(),
            };
            match PlatformConfig::load(&file, &ctx) {
                Ok(_) => {
                    println!("ok");
                    ExitCode::SUCCESS
                }
                Err(ConfigError::Invalid(problems)) => {
                    for p in problems {
                        println!("{p}");
                    }
                    ExitCode::from(EXIT_INVALID)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_INVALID)
                }
            }
        }
        Command::Run(args) => run(*args),
        Command::Retention {
            dry_run,
            today,
            target,
        } => retention(
            dry_run,
            today.as_deref(),
            &target.namespace,
            target.config.source(),
        ),
        Command::Upgrade {
            site,
            all: _,
            force,
            record_images,
            dry_run,
            target,
        } => upgrade(
            site,
            if record_images {
                sites_operator::upgrade::Action::RecordImages
            } else {
                sites_operator::upgrade::Action::Upgrade { force }
            },
            dry_run,
            &target.namespace,
            target.config.source(),
        ),
        Command::Certs {
            out,
            service,
            namespace,
            names,
            days,
        } => write_certs(&out, &service, &namespace, names, days),
        Command::Rollout {
            command: RolloutCommand::Status { namespace, once },
        } => rollout_status(&namespace, once),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_name_their_unit_and_limit() {
        let ok = [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        let bad = [
            ("10", "needs a unit"),
            ("10d", "unknown unit \"d\""),
            ("0s", "greater than zero"),
            ("s", "not a duration"),
            ("99999999999999999999h", "not a duration"),
        ];
        for (text, want) in bad {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
        assert_eq!(parse_idle_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(
            parse_idle_duration("2h")
                .unwrap_err()
                .contains("maximum of 3600s")
        );
        assert!(
            parse_limit_duration("11m")
                .unwrap_err()
                .contains("maximum of 600s")
        );
        // Saturates instead of overflowing.
        assert!(parse_idle_duration("18446744073709551615h").is_err());
    }
}
