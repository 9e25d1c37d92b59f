//! The controller's own Prometheus metrics (docs/metrics.md, "flitctl"):
//! faults it injected or detected, and how long re-routing took. Served by
//! metrics-exporter-prometheus on the address given with `--metrics` (`run`)
//! or `--controller-metrics` (`up`); without it the calls below are no-ops
//! (the `metrics` facade has no recorder).

use anyhow::{Context, Result};
use metrics::{counter, describe_counter, describe_gauge, gauge};
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Starts the exporter's HTTP listener on `addr` (`/metrics`).
pub fn install(addr: SocketAddr) -> Result<()> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .with_context(|| format!("starting the controller's Prometheus exporter on {addr}"))?;
    describe_counter!(
        "flitnet_fault_events_total",
        "Faults injected or detected by the controller."
    );
    describe_gauge!(
        "flitnet_fault_last_timestamp_seconds",
        "Unix time of the last fault of this kind on this element."
    );
    describe_gauge!(
        "flitnet_controller_reroute_seconds",
        "Fault detected to all tables installed, last reroute."
    );
    Ok(())
}

/// Label value of a fault kind: the event log's and the report's own
/// spelling (`link-down`, `switch-lost`), one spelling everywhere.
fn kind_label(kind: &str) -> String {
    kind.to_string()
}

/// Counts one fault event and stamps its wall-clock time (for Grafana
/// annotations, which need Unix time, not CLOCK_MONOTONIC).
pub fn fault(kind: &str, element: &str) {
    let labels = [("kind", kind_label(kind)), ("element", element.to_string())];
    counter!("flitnet_fault_events_total", &labels).increment(1);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    gauge!("flitnet_fault_last_timestamp_seconds", &labels).set(now);
}

/// Fault detected → every table installed, for the last re-route.
pub fn reroute(took: Duration) {
    gauge!("flitnet_controller_reroute_seconds").set(took.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_keep_their_report_spelling_as_labels() {
        assert_eq!(kind_label("link-down"), "link-down");
        assert_eq!(kind_label("switch-lost"), "switch-lost");
    }
}
