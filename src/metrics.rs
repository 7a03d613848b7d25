//! Prometheus metrics with controller-runtime names, so existing dashboards work; [`access`]
//! decides who may read them.

pub mod access;

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

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
/// closed on accept because `--webhook-max-connections` were open); and the memory budget's,
/// `sites_webhook_memory_in_use_bytes`.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    pub requests: IntCounterVec,
    pub in_flight: IntGaugeVec,
    pub latency: HistogramVec,
    pub open_connections: IntGauge,
    pub connections_refused: IntCounter,
    pub memory_in_use: IntGauge,
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
            "Connections to the webhook server closed on accept because the connection limit was reached.",
        )?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(open_connections.clone()))?;
        registry.register(Box::new(connections_refused.clone()))?;
        let memory_in_use = IntGauge::new(
            "sites_webhook_memory_in_use_bytes",
            "Bytes of the webhook server's memory budget held by requests in flight (their bodies and what decoding them takes).",
        )?;
        registry.register(Box::new(memory_in_use.clone()))?;
        // The series of each webhook path are made with the server's router
        // (`admission::server::with_layers`), so they exist from the start.
        Ok(WebhookMetrics {
            requests,
            in_flight,
            latency,
            open_connections,
            connections_refused,
            memory_in_use,
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
