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

/// Serves `/metrics` on `addr` (a background thread): the `metrics`
/// facade's series, rendered by the exporter crate, and the float counters
/// of [`set_float_counter`].
pub fn init_metrics(addr: SocketAddr) -> Result<()> {
    // Without buckets the exporter renders histograms as summaries, which
    // cannot be aggregated across hosts (histogram_quantile needs `_bucket`).
    let latency_buckets = [
        10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1,
        0.25, 0.5, 1.0, 2.5,
    ];
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("starting the Prometheus exporter on {addr}"))?;
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Suffix("_latency_seconds".into()),
            &latency_buckets,
        )
        .context("histogram buckets")?
        .install_recorder()
        .with_context(|| format!("starting the Prometheus exporter on {addr}"))?;
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(5));
            upkeep.run_upkeep();
        })?;
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = serve_scrape(stream, &handle);
            }
        })?;
    Ok(())
}

/// Answers one HTTP request: `GET /metrics` gets the exposition, anything
/// else a 404.
fn serve_scrape(
    mut stream: std::net::TcpStream,
    handle: &metrics_exporter_prometheus::PrometheusHandle,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let timeout = Some(std::time::Duration::from_secs(2));
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = if line.starts_with("GET ") && path.split('?').next() == Some("/metrics") {
        ("200 OK", handle.render() + &render_float_counters())
    } else {
        ("404 Not Found", "try /metrics\n".to_string())
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A counter family with fractional values (the `metrics` facade counts
/// integers only): help text and series by rendered label set.
struct FloatFamily {
    help: &'static str,
    series: std::collections::BTreeMap<String, f64>,
}

static FLOAT_COUNTERS: std::sync::Mutex<std::collections::BTreeMap<&'static str, FloatFamily>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn float_counters(
) -> std::sync::MutexGuard<'static, std::collections::BTreeMap<&'static str, FloatFamily>> {
    FLOAT_COUNTERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the cumulative value of a fractional counter (e.g. seconds spent
/// stalled), exported as a Prometheus counter. `help` is its HELP line.
pub fn set_float_counter(
    name: &'static str,
    help: &'static str,
    labels: &[(&str, &str)],
    value: f64,
) {
    let mut key = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            key.push(',');
        }
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        key.push_str(&format!("{k}=\"{v}\""));
    }
    float_counters()
        .entry(name)
        .or_insert_with(|| FloatFamily {
            help,
            series: Default::default(),
        })
        .series
        .insert(key, value);
}

fn render_float_counters() -> String {
    let mut out = String::new();
    for (name, family) in float_counters().iter() {
        out.push_str(&format!(
            "# HELP {name} {}\n# TYPE {name} counter\n",
            family.help
        ));
        for (labels, value) in &family.series {
            out.push_str(&format!("{name}{{{labels}}} {value}\n"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_counters_render_as_prometheus_counters() {
        set_float_counter(
            "flitnet_test_seconds_total",
            "A test.",
            &[("switch", "s\"0"), ("vc", "1")],
            1.25,
        );
        let text = render_float_counters();
        assert!(
            text.contains("# TYPE flitnet_test_seconds_total counter"),
            "{text}"
        );
        assert!(
            text.contains("flitnet_test_seconds_total{switch=\"s\\\"0\",vc=\"1\"} 1.25"),
            "{text}"
        );
    }
}
