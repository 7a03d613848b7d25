//! Prometheus metrics with controller-runtime names, so existing dashboards work.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Webhook metrics: `controller_runtime_webhook_requests_total{webhook,code}`,
/// `controller_runtime_webhook_requests_in_flight{webhook}`,
/// `controller_runtime_webhook_latency_seconds{webhook}`.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    pub requests: IntCounterVec,
    pub in_flight: IntGaugeVec,
    pub latency: HistogramVec,
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
        registry.register(Box::new(latency.clone()))?;
        Ok(WebhookMetrics {
            requests,
            in_flight,
            latency,
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
