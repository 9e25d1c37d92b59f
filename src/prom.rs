//! Talking to a real Prometheus (Debian's `prometheus` package) from the
//! end-to-end tests: HTTP queries, `promtool check metrics`, and every PromQL
//! query of the Grafana dashboards, as Grafana would send it.

use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Whether `tool --version` runs.
pub fn installed(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A minimal HTTP/1.0 GET (no proxy, no client crate): the body, if the
/// status is 200.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}

pub fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `promtool check metrics` on one exposition: (ok, promtool's output).
pub fn promtool_check(exposition: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Metric names of an exposition (sample lines, without labels).
pub fn exposed_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every PromQL query of a dashboard, with where it came from.
pub fn dashboard_queries(file: &str, json: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, file: &str, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    let title = p["title"].as_str().unwrap_or("?");
                    out.push((format!("{file} panel {title:?}"), e.to_string()));
                }
            }
            walk(&p["panels"], file, out);
        }
    }
    let mut out = Vec::new();
    walk(&json["panels"], file, &mut out);
    for a in json["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(e) = a["expr"].as_str() {
            let name = a["name"].as_str().unwrap_or("?");
            out.push((format!("{file} annotation {name:?}"), e.to_string()));
        }
    }
    for v in json["templating"]["list"].as_array().into_iter().flatten() {
        let q = match &v["query"] {
            Value::String(s) => s.clone(),
            other => other["query"].as_str().unwrap_or("").to_string(),
        };
        // Grafana's `label_values(METRIC, LABEL)`: the PromQL that has the
        // same answer is `count by (LABEL) (METRIC)`.
        if let Some(args) = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
        {
            if let Some((metric, label)) = args.rsplit_once(',') {
                let name = v["name"].as_str().unwrap_or("?");
                out.push((
                    format!("{file} variable ${name}"),
                    format!("count by ({}) ({})", label.trim(), metric.trim()),
                ));
            }
        }
    }
    out
}

/// Grafana's variables, as Grafana would expand them for a short range
/// with every switch, host and port selected.
pub fn instantiate(expr: &str) -> String {
    expr.replace("$__rate_interval", "15s")
        .replace("$__interval", "1m")
        .replace("$__range", "5m")
        .replace("${switch}", ".*")
        .replace("${host}", ".*")
        .replace("${port}", ".*")
        .replace("$switch", ".*")
        .replace("$host", ".*")
        .replace("$port", ".*")
}

pub fn query(prom: SocketAddr, expr: &str) -> Result<Vec<Value>, String> {
    let body = http_get(prom, &format!("/api/v1/query?query={}", url_encode(expr)))
        .ok_or_else(|| format!("Prometheus refused {expr:?}"))?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if v["status"] != "success" {
        return Err(format!("{expr:?}: {body}"));
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// Every query of grafana/dashboards/*.json, checked against Prometheus at
/// `prom`: each must return data and name only metrics in `exported`
/// (skipped when empty). Returns how many queries were checked and the
/// failures.
pub fn check_dashboards(
    dir: &Path,
    prom: SocketAddr,
    exported: &BTreeSet<String>,
) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut failures = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|err| panic!("{file} is not valid JSON: {err}"));
        for (place, expr) in dashboard_queries(&file, &json) {
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("flitnet_") && !exported.is_empty() && !exported.contains(word)
                {
                    failures.push(format!("{place}: {word} is exported by nobody"));
                }
            }
            let promql = instantiate(&expr);
            match query(prom, &promql) {
                Ok(result) if result.is_empty() => {
                    failures.push(format!("{place}: no data for {promql}"))
                }
                Ok(_) => {}
                Err(err) => failures.push(format!("{place}: {err}")),
            }
            checked += 1;
        }
    }
    (checked, failures)
}

/// The single value of an instant query's first series, if any.
pub fn scalar(prom: SocketAddr, expr: &str) -> Option<f64> {
    query(prom, expr)
        .ok()?
        .first()
        .and_then(|r| r["value"][1].as_str())
        .and_then(|v| v.parse().ok())
}
