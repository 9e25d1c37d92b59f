//! Logging and the Prometheus exporter.

use anyhow::{Context, Result};
use std::net::SocketAddr;

/// Logs to stderr through `tracing`; `RUST_LOG` overrides the default level.
pub fn init_logging(default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Serves `/metrics` on `addr` (a background thread of the exporter crate).
pub fn init_metrics(addr: SocketAddr) -> Result<()> {
    // Without buckets the exporter renders histograms as summaries, which
    // cannot be aggregated across hosts (histogram_quantile needs `_bucket`).
    let latency_buckets = [
        10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1,
        0.25, 0.5, 1.0, 2.5,
    ];
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Suffix("_latency_seconds".into()),
            &latency_buckets,
        )
        .context("histogram buckets")?
        .with_http_listener(addr)
        .install()
        .with_context(|| format!("starting the Prometheus exporter on {addr}"))
}
