//! Prometheus metrics with controller-runtime names, so existing dashboards work; [`access`]
//! decides who may read them.

pub mod access;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// The controller name in metrics (controller-runtime's `controller` label).
pub const RECONCILER: &str = "site";

/// The commit the binary was built from (`git rev-parse --short HEAD` at build time, or
/// `SITES_OPERATOR_COMMIT`, or "unknown"; see build.rs).
pub const COMMIT: &str = env!("SITES_OPERATOR_COMMIT");

/// `sites_operator_build_info{version,commit}` = 1.
pub fn register_build_info(registry: &Registry) -> prometheus::Result<IntGauge> {
    let gauge = IntGauge::with_opts(
        Opts::new(
            "sites_operator_build_info",
            "Always 1; the labels name the version and commit of the running binary.",
        )
        .const_label("version", env!("CARGO_PKG_VERSION"))
        .const_label("commit", COMMIT),
    )?;
    registry.register(Box::new(gauge.clone()))?;
    gauge.set(1);
    Ok(gauge)
}

/// `leader_election_master_status{name}` (client-go's name): 1 while this replica holds the
/// leader Lease `name`, 0 otherwise. Exists from the start at 0.
pub fn register_leader(registry: &Registry, lease: &str) -> prometheus::Result<IntGauge> {
    let gauge = IntGauge::with_opts(
        Opts::new(
            "leader_election_master_status",
            "1 while this replica is the leader of the named Lease, 0 otherwise.",
        )
        .const_label("name", lease),
    )?;
    registry.register(Box::new(gauge.clone()))?;
    Ok(gauge)
}

/// Webhook metrics: `controller_runtime_webhook_requests_total{webhook,code}`,
/// `controller_runtime_webhook_requests_in_flight{webhook}`,
/// `controller_runtime_webhook_latency_seconds{webhook}`; and the connection limits' metrics,
/// `sites_webhook_open_connections` and `sites_webhook_connections_refused_total` (connections
/// closed on accept because `--webhook-max-connections` were open, or the peer address's
/// `--webhook-max-connections-per-peer`); the memory budget's,
/// `sites_webhook_memory_in_use_bytes`; and the serving certificate's notAfter,
/// `sites_webhook_certificate_expiry_timestamp_seconds` (set by [`crate::tls::CertStore::report_expiry`]).
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    pub requests: IntCounterVec,
    pub in_flight: IntGaugeVec,
    pub latency: HistogramVec,
    pub open_connections: IntGauge,
    pub connections_refused: IntCounter,
    pub memory_in_use: IntGauge,
    pub certificate_expiry: IntGauge,
}

impl WebhookMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<WebhookMetrics> {
        let requests = IntCounterVec::new(
            Opts::new(
                "controller_runtime_webhook_requests_total",
                "Total number of admission requests by HTTP status code.",
            ),
            &["webhook", "code"],
        )?;
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "controller_runtime_webhook_requests_in_flight",
                "Current number of admission requests being served.",
            ),
            &["webhook"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "controller_runtime_webhook_latency_seconds",
                "Histogram of the latency of processing admission requests.",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0,
            ]),
            &["webhook"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        let open_connections = IntGauge::new(
            "sites_webhook_open_connections",
            "Current number of open connections to the webhook server.",
        )?;
        let connections_refused = IntCounter::new(
            "sites_webhook_connections_refused_total",
            "Connections to the webhook server closed on accept because the connection limit, or the peer address's share of it, was reached.",
        )?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(open_connections.clone()))?;
        registry.register(Box::new(connections_refused.clone()))?;
        let memory_in_use = IntGauge::new(
            "sites_webhook_memory_in_use_bytes",
            "Bytes of the webhook server's memory budget held by requests in flight (their bodies and what decoding them takes).",
        )?;
        registry.register(Box::new(memory_in_use.clone()))?;
        let certificate_expiry = IntGauge::new(
            "sites_webhook_certificate_expiry_timestamp_seconds",
            "Expiry (notAfter) of the serving certificate of the webhook and metrics servers, in seconds since the Unix epoch.",
        )?;
        registry.register(Box::new(certificate_expiry.clone()))?;
        // The series of each webhook path are made with the server's router
        // (`admission::server::with_layers`), so they exist from the start.
        Ok(WebhookMetrics {
            requests,
            in_flight,
            latency,
            open_connections,
            connections_refused,
            memory_in_use,
            certificate_expiry,
        })
    }
}

/// The registry's metrics in the Prometheus text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    let encoder = prometheus::TextEncoder::new();
    if let Err(e) = encoder.encode_utf8(&registry.gather(), &mut out) {
        tracing::error!(error = %e, "cannot encode metrics");
    }
    out
}

/// Reconcile metrics (controller-runtime names) and the phase gauge.
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    pub total: IntCounterVec,
    pub errors: IntCounterVec,
    /// Terminal errors: the Site or the cluster has to change (see [`crate::controller::reconcile::Next::Terminal`]).
    pub terminal_errors: IntCounterVec,
    /// Reconciles that panicked (caught; the key is retried with backoff).
    pub panics: IntCounterVec,
    pub time: Histogram,
    pub active_workers: IntGauge,
    pub max_concurrent: IntGauge,
    pub by_phase: IntGaugeVec,
    /// Sites with `sites.ecmwf.int/paused: "true"` (ROL-03).
    pub paused: IntGauge,
    /// The rollout of the configuration in force (ROL-01, ROL-02, ROL-04), by state: `rolled`
    /// (since the configuration came in force), `rolling`, `waiting`, `failed`.
    pub rollout_sites: IntGaugeVec,
    /// 1 while the rollout of the configuration in force is halted.
    pub rollout_halted: IntGauge,
}

impl ReconcileMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<ReconcileMetrics> {
        let c = |o: Opts| o.const_label("controller", RECONCILER);
        let m = ReconcileMetrics {
            total: IntCounterVec::new(
                c(Opts::new(
                    "controller_runtime_reconcile_total",
                    "Total number of reconciliations per controller",
                )),
                &["result"],
            )?,
            errors: IntCounterVec::new(
                c(Opts::new(
                    "controller_runtime_reconcile_errors_total",
                    "Total number of reconciliation errors per controller",
                )),
                &[],
            )?,
            terminal_errors: IntCounterVec::new(
                c(Opts::new(
                    "controller_runtime_terminal_reconcile_errors_total",
                    "Total number of terminal reconciliation errors per controller",
                )),
                &[],
            )?,
            panics: IntCounterVec::new(
                c(Opts::new(
                    "controller_runtime_reconcile_panics_total",
                    "Total number of reconciliation panics per controller",
                )),
                &[],
            )?,
            time: Histogram::with_opts(
                HistogramOpts::new(
                    "controller_runtime_reconcile_time_seconds",
                    "Length of time per reconciliation per controller",
                )
                .const_label("controller", RECONCILER)
                .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16)?),
            )?,
            active_workers: IntGauge::with_opts(c(Opts::new(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
            )))?,
            max_concurrent: IntGauge::with_opts(c(Opts::new(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
            )))?,
            by_phase: IntGaugeVec::new(
                Opts::new("sites_by_phase", "Sites by status phase"),
                &["phase"],
            )?,
            paused: IntGauge::new(
                "sites_paused",
                "Sites paused by the sites.ecmwf.int/paused annotation: the operator writes nothing for them",
            )?,
            rollout_sites: IntGaugeVec::new(
                Opts::new(
                    "sites_rollout_sites",
                    "Sites in the rollout of the platform configuration in force, by state (rolled, rolling, waiting, failed)",
                ),
                &["state"],
            )?,
            rollout_halted: IntGauge::new(
                "sites_rollout_halted",
                "1 while the rollout of the platform configuration in force is halted: a rolled Site was not Available again within the progress deadline",
            )?,
        };
        registry.register(Box::new(m.total.clone()))?;
        registry.register(Box::new(m.errors.clone()))?;
        registry.register(Box::new(m.terminal_errors.clone()))?;
        registry.register(Box::new(m.panics.clone()))?;
        registry.register(Box::new(m.time.clone()))?;
        registry.register(Box::new(m.active_workers.clone()))?;
        registry.register(Box::new(m.max_concurrent.clone()))?;
        registry.register(Box::new(m.by_phase.clone()))?;
        registry.register(Box::new(m.paused.clone()))?;
        registry.register(Box::new(m.rollout_sites.clone()))?;
        registry.register(Box::new(m.rollout_halted.clone()))?;
        // Series exist from the start, as controller-runtime does, so rates and alerts work
        // before the first occurrence.
        for result in ["success", "error", "requeue", "requeue_after"] {
            m.total.with_label_values(&[result]);
        }
        m.errors.with_label_values(&[] as &[&str]);
        m.terminal_errors.with_label_values(&[] as &[&str]);
        m.panics.with_label_values(&[] as &[&str]);
        for phase in ["Pending", "Running", "Disabled", "Failed"] {
            m.by_phase.with_label_values(&[phase]);
        }
        for state in ["rolled", "rolling", "waiting", "failed"] {
            m.rollout_sites.with_label_values(&[state]);
        }
        Ok(m)
    }
}

/// `sites_reconcile_triggers_total{kind}`: Site keys queued by watch events, by the kind of the
/// object the event was about.
pub fn register_triggers(registry: &Registry) -> prometheus::Result<IntCounterVec> {
    let triggers = IntCounterVec::new(
        Opts::new(
            "sites_reconcile_triggers_total",
            "Site keys queued by watch events, by the kind of the object the event was about",
        ),
        &["kind"],
    )?;
    registry.register(Box::new(triggers.clone()))?;
    Ok(triggers)
}

/// Queue metrics (controller-runtime names, label `name`).
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    pub depth: IntGauge,
    pub adds: IntCounter,
    pub retries: IntCounter,
    pub queue_duration: Histogram,
    pub work_duration: Histogram,
    pub unfinished_work: prometheus::Gauge,
    pub longest_running: prometheus::Gauge,
}

impl QueueMetrics {
    /// Creates the metrics for the queue `name` and registers them.
    pub fn register(registry: &Registry, name: &str) -> prometheus::Result<QueueMetrics> {
        let opts = |metric: &str, help: &str| Opts::new(metric, help).const_label("name", name);
        let buckets = prometheus::exponential_buckets(1e-6, 10.0, 10)?;
        let hist = |metric: &str, help: &str| {
            Histogram::with_opts(
                HistogramOpts::new(metric, help)
                    .const_label("name", name)
                    .buckets(buckets.clone()),
            )
        };
        let m = QueueMetrics {
            depth: IntGauge::with_opts(opts("workqueue_depth", "Current depth of workqueue"))?,
            adds: IntCounter::with_opts(opts(
                "workqueue_adds_total",
                "Total number of adds handled by workqueue",
            ))?,
            retries: IntCounter::with_opts(opts(
                "workqueue_retries_total",
                "Total number of retries handled by workqueue",
            ))?,
            queue_duration: hist(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
            )?,
            work_duration: hist(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
            )?,
            unfinished_work: prometheus::Gauge::with_opts(opts(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress",
            ))?,
            longest_running: prometheus::Gauge::with_opts(opts(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
            ))?,
        };
        registry.register(Box::new(m.depth.clone()))?;
        registry.register(Box::new(m.adds.clone()))?;
        registry.register(Box::new(m.retries.clone()))?;
        registry.register(Box::new(m.queue_duration.clone()))?;
        registry.register(Box::new(m.work_duration.clone()))?;
        registry.register(Box::new(m.unfinished_work.clone()))?;
        registry.register(Box::new(m.longest_running.clone()))?;
        Ok(m)
    }
}

/// The gauge `sites_config_valid`: 1 while the ConfigMap as it stands is in force, 0 while it is
/// refused (the last valid configuration stays in force).
pub fn register_config_valid(registry: &Registry) -> prometheus::Result<IntGauge> {
    let gauge = IntGauge::new(
        "sites_config_valid",
        "1 when the sites-config ConfigMap is valid and in force; 0 when it is refused and the last valid configuration stays in force",
    )?;
    registry.register(Box::new(gauge.clone()))?;
    gauge.set(1);
    Ok(gauge)
}

/// The request counter `sites_api_requests_total{verb,resource,code}` (the API requests the
/// operator makes, counted by `controller/accounting.rs`).
pub fn register_api_requests(registry: &Registry) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(
        Opts::new(
            "sites_api_requests_total",
            "Kubernetes API requests made by the operator, by verb, resource and HTTP code",
        ),
        &["verb", "resource", "code"],
    )?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}
