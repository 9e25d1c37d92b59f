//! The Grafana dashboards (grafana/dashboards/*.json) against the metrics
//! contract (docs/metrics.md): every query uses the provisioned datasource,
//! only documented metric and label names, and — when `promtool` is
//! installed — is valid PromQL.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const DATASOURCE_UID: &str = "flitnet-prom";
const DASHBOARDS: [&str; 3] = ["fabric-overview.json", "switch-ports.json", "recovery.json"];
/// Labels Prometheus attaches to every scraped series (prometheus.yml of
/// `flitctl compose`), usable in legends and groupings.
const TARGET_LABELS: [&str; 3] = ["instance", "job", "role"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("flitctl lives inside the workspace")
        .to_path_buf()
}

/// Metric name → label names, from the tables of docs/metrics.md. A
/// histogram `x` yields `x_bucket` (with `le`), `x_sum` and `x_count`; a
/// metric listed in several tables (switch and host) gets the union.
fn documented_metrics() -> BTreeMap<String, BTreeSet<String>> {
    let path = repo().join("docs/metrics.md");
    let text = std::fs::read_to_string(&path).expect("docs/metrics.md is readable");
    let mut metrics: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "| `name` | type | labels | meaning |" splits into 6 cells.
        if cells.len() < 5 || !cells[1].starts_with("`flitnet_") {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        let kind = cells[2];
        let labels: BTreeSet<String> = cells[3]
            .split(',')
            .map(|l| l.trim().trim_matches('`').to_string())
            .filter(|l| !l.is_empty())
            .collect();
        if kind == "histogram" {
            let mut bucket = labels.clone();
            bucket.insert("le".to_string());
            metrics
                .entry(format!("{name}_bucket"))
                .or_default()
                .extend(bucket);
            for suffix in ["_sum", "_count"] {
                metrics
                    .entry(format!("{name}{suffix}"))
                    .or_default()
                    .extend(labels.clone());
            }
        } else {
            metrics.entry(name).or_default().extend(labels);
        }
    }
    assert!(
        metrics.len() >= 20,
        "docs/metrics.md tables were not recognised ({} metrics found)",
        metrics.len()
    );
    metrics
}

struct Dashboard {
    file: String,
    json: Value,
}

fn dashboards() -> Vec<Dashboard> {
    let dir = repo().join("grafana/dashboards");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("grafana/dashboards exists") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let file = path.file_name().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{file} is not valid JSON: {e}"));
            out.push(Dashboard { file, json });
        }
    }
    out.sort_by(|a, b| a.file.cmp(&b.file));
    out
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// One PromQL query found in a dashboard, with where it came from.
struct Query {
    place: String,
    expr: String,
    /// Label names the query's result is displayed with (`{{label}}`).
    display_labels: Vec<String>,
}

fn template_labels(format: &str) -> Vec<String> {
    format
        .split("{{")
        .skip(1)
        .filter_map(|s| s.split_once("}}"))
        .map(|(label, _)| label.trim().to_string())
        .collect()
}

fn queries(d: &Dashboard) -> Vec<Query> {
    let mut out = Vec::new();
    for p in panels(&d.json) {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                out.push(Query {
                    place: format!(
                        "{} panel {:?} {}",
                        d.file,
                        p["title"].as_str().unwrap_or("?"),
                        t["refId"].as_str().unwrap_or("?")
                    ),
                    expr: expr.to_string(),
                    display_labels: template_labels(t["legendFormat"].as_str().unwrap_or("")),
                });
            }
        }
    }
    for a in d.json["annotations"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(expr) = a["expr"].as_str() {
            let mut labels = template_labels(a["titleFormat"].as_str().unwrap_or(""));
            labels.extend(template_labels(a["textFormat"].as_str().unwrap_or("")));
            labels.extend(
                a["tagKeys"]
                    .as_str()
                    .unwrap_or("")
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty()),
            );
            out.push(Query {
                place: format!(
                    "{} annotation {:?}",
                    d.file,
                    a["name"].as_str().unwrap_or("?")
                ),
                expr: expr.to_string(),
                display_labels: labels,
            });
        }
    }
    out
}

/// What a PromQL expression refers to: metric names, and label names used in
/// selectors (per metric) and in groupings.
#[derive(Default, Debug)]
struct References {
    metrics: BTreeSet<String>,
    selector_labels: Vec<(String, String)>,
    grouping_labels: BTreeSet<String>,
}

/// Words that are never metric names: binary operators, modifiers, and
/// aggregation operators (which may be followed by `by (...)` rather than
/// by their parenthesised argument).
const KEYWORDS: [&str; 26] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// A small PromQL scanner: enough to tell metric names from functions,
/// keywords, label names, strings, numbers, durations and Grafana variables.
fn references(expr: &str) -> References {
    let chars: Vec<char> = expr.chars().collect();
    let mut refs = References::default();
    let mut i = 0;
    let ident_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let next_non_space = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    // Label names inside `{...}` or `(...)` starting at `open`; returns the
    // names and the index after the closing bracket.
    let label_list = |open: usize, close: char| -> (Vec<String>, usize) {
        let mut names = Vec::new();
        let mut j = open + 1;
        while j < chars.len() && chars[j] != close {
            let c = chars[j];
            if c == '"' || c == '\'' || c == '`' {
                j += 1;
                while j < chars.len() && chars[j] != c {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
                j += 1;
            } else if ident_start(c) {
                let s = j;
                while j < chars.len() && ident_char(chars[j]) {
                    j += 1;
                }
                names.push(chars[s..j].iter().collect());
            } else {
                j += 1;
            }
        }
        (names, j + 1)
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '[' {
            // Range or subquery durations: nothing to check.
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '$' {
            i += 1;
            while i < chars.len() && (ident_char(chars[i]) || chars[i] == '{' || chars[i] == '}') {
                i += 1;
            }
        } else if c.is_ascii_digit()
            || (c == '.' && i + 1 < chars.len() && chars[i + 1].is_ascii_digit())
        {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                // An exponent sign belongs to the number (1e-9).
                if matches!(chars[i], 'e' | 'E')
                    && i + 1 < chars.len()
                    && matches!(chars[i + 1], '+' | '-')
                {
                    i += 1;
                }
                i += 1;
            }
        } else if ident_start(c) {
            let s = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[s..i].iter().collect();
            let after = next_non_space(i);
            let followed_by = chars.get(after).copied();
            if matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) {
                if followed_by == Some('(') {
                    let (names, end) = label_list(after, ')');
                    refs.grouping_labels.extend(names);
                    i = end;
                } else if !word.starts_with("group_") {
                    // `sum(x) by (l)` puts the list right after the keyword
                    // too; only group_left/right may stand alone.
                    panic!("{word} without a label list in {expr:?}");
                }
            } else if KEYWORDS.contains(&word.as_str()) {
            } else if followed_by == Some('(') {
                // A function or aggregation; `sum (x) by (l)` is handled
                // when `by` comes.
            } else {
                refs.metrics.insert(word.clone());
                if followed_by == Some('{') {
                    let (names, end) = label_list(after, '}');
                    for n in names {
                        refs.selector_labels.push((word.clone(), n));
                    }
                    i = end;
                }
            }
        } else if c == '{' {
            let (names, end) = label_list(i, '}');
            for n in names {
                refs.selector_labels.push((String::new(), n));
            }
            i = end;
        } else {
            i += 1;
        }
    }
    refs
}

#[test]
fn the_scanner_tells_metrics_from_everything_else() {
    let r = references(
        r#"histogram_quantile(0.99, sum by (le, host) (rate(flitnet_x_bucket{host=~"$host", le!="1e-9"}[$__rate_interval]))) / 1e-3 > bool 2 or vector(0)"#,
    );
    assert_eq!(
        r.metrics.iter().collect::<Vec<_>>(),
        ["flitnet_x_bucket"],
        "{r:?}"
    );
    assert_eq!(
        r.selector_labels,
        [
            ("flitnet_x_bucket".to_string(), "host".to_string()),
            ("flitnet_x_bucket".to_string(), "le".to_string())
        ]
    );
    assert_eq!(r.grouping_labels.iter().collect::<Vec<_>>(), ["host", "le"]);
    let r = references("sum(up) without (instance) + on (job) group_left node_x");
    assert_eq!(references("max by (switch) (y)").metrics.len(), 1);
    assert_eq!(r.metrics.iter().collect::<Vec<_>>(), ["node_x", "up"]);
    assert_eq!(
        r.grouping_labels.iter().collect::<Vec<_>>(),
        ["instance", "job"]
    );
}

#[test]
fn the_metrics_contract_is_parsed() {
    let m = documented_metrics();
    assert!(m["flitnet_port_tx_flits_total"].contains("vc"));
    // flitnet_drops_total is in the switch and the host tables.
    assert!(
        m["flitnet_drops_total"].contains("switch") && m["flitnet_drops_total"].contains("host")
    );
    assert!(m["flitnet_host_message_latency_seconds_bucket"].contains("le"));
    assert!(m.contains_key("flitnet_host_message_latency_seconds_count"));
    assert!(!m.contains_key("flitnet_host_message_latency_seconds"));
    assert!(m["flitnet_controller_reroute_seconds"].is_empty());
}

#[test]
fn every_dashboard_parses_and_is_well_formed() {
    let all = dashboards();
    let files: BTreeSet<&str> = all.iter().map(|d| d.file.as_str()).collect();
    for expected in DASHBOARDS {
        assert!(
            files.contains(expected),
            "grafana/dashboards/{expected} is missing"
        );
    }
    let mut uids = BTreeSet::new();
    for d in &all {
        let j = &d.json;
        let uid = j["uid"]
            .as_str()
            .unwrap_or_else(|| panic!("{} has no uid", d.file));
        assert!(uids.insert(uid.to_string()), "uid {uid} used twice");
        assert!(
            j["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{}",
            d.file
        );
        let schema = j["schemaVersion"].as_u64().unwrap_or(0);
        assert!(schema >= 36, "{}: schemaVersion {schema} < 36", d.file);
        let mut ids = BTreeSet::new();
        let panels = panels(j);
        assert!(!panels.is_empty(), "{} has no panels", d.file);
        for p in panels {
            let title = &p["title"];
            let id = p["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("{}: {title} has no id", d.file));
            assert!(ids.insert(id), "{}: panel id {id} used twice", d.file);
            let g = &p["gridPos"];
            let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
            assert!(
                x + w <= 24 && g["h"].as_u64().unwrap() > 0,
                "{}: {title} gridPos {g}",
                d.file
            );
        }
    }
}

#[test]
fn every_panel_and_query_uses_the_provisioned_datasource() {
    for d in dashboards() {
        for p in panels(&d.json) {
            if p["type"] == "row" {
                continue;
            }
            let title = &p["title"];
            assert_eq!(
                p["datasource"]["uid"], DATASOURCE_UID,
                "{}: panel {title} datasource",
                d.file
            );
            let targets = p["targets"].as_array();
            assert!(
                targets.is_some_and(|t| !t.is_empty()),
                "{}: panel {title} has no query",
                d.file
            );
            for t in targets.unwrap() {
                if !t["datasource"].is_null() {
                    assert_eq!(
                        t["datasource"]["uid"], DATASOURCE_UID,
                        "{}: {title}",
                        d.file
                    );
                }
            }
        }
        for v in d.json["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if v["type"] == "query" {
                assert_eq!(
                    v["datasource"]["uid"], DATASOURCE_UID,
                    "{}: ${}",
                    d.file, v["name"]
                );
            }
        }
        for a in d.json["annotations"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if a["expr"].is_string() {
                assert_eq!(
                    a["datasource"]["uid"], DATASOURCE_UID,
                    "{}: {}",
                    d.file, a["name"]
                );
            }
        }
    }
    let provisioning =
        std::fs::read_to_string(repo().join("grafana/provisioning/datasources/prometheus.yaml"))
            .unwrap();
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&provisioning).unwrap();
    let ds = &doc["datasources"][0];
    assert_eq!(ds["uid"].as_str(), Some(DATASOURCE_UID));
    assert_eq!(ds["url"].as_str(), Some("http://prometheus:9090"));
    let provider: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo().join("grafana/provisioning/dashboards/flitnet.yaml"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(provider["providers"][0]["type"].as_str(), Some("file"));
    assert_eq!(
        provider["providers"][0]["options"]["path"].as_str(),
        Some("/var/lib/grafana/dashboards")
    );
}

#[test]
fn every_query_uses_only_documented_metrics_and_labels() {
    let metrics = documented_metrics();
    let mut problems = Vec::new();
    let mut count = 0;
    for d in dashboards() {
        for q in queries(&d) {
            count += 1;
            let refs = references(&q.expr);
            if refs.metrics.is_empty() {
                problems.push(format!("{}: {:?} queries no metric", q.place, q.expr));
            }
            let mut available: BTreeSet<&str> = TARGET_LABELS.into();
            for m in &refs.metrics {
                match metrics.get(m) {
                    Some(labels) => available.extend(labels.iter().map(String::as_str)),
                    None => problems.push(format!(
                        "{}: {m} is not in docs/metrics.md (expr {:?})",
                        q.place, q.expr
                    )),
                }
            }
            for (metric, label) in &refs.selector_labels {
                let known = match metrics.get(metric) {
                    Some(labels) => {
                        labels.contains(label) || TARGET_LABELS.contains(&label.as_str())
                    }
                    None => available.contains(label.as_str()),
                };
                if !known && label != "__name__" {
                    problems.push(format!("{}: {metric} has no label {label:?}", q.place));
                }
            }
            for label in refs.grouping_labels.iter().chain(&q.display_labels) {
                if !available.contains(label.as_str()) {
                    problems.push(format!(
                        "{}: label {label:?} is on none of {:?}",
                        q.place, refs.metrics
                    ));
                }
            }
        }
        // Variables: label_values(metric{...}, label).
        for v in d.json["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Some(def) = v["definition"].as_str() else {
                continue;
            };
            let inner = def
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{}: ${} is not label_values(...)", d.file, v["name"]));
            let (selector, label) = inner.rsplit_once(',').unwrap();
            let refs = references(selector);
            for m in &refs.metrics {
                match metrics.get(m) {
                    Some(labels) if labels.contains(label.trim()) => {}
                    _ => problems.push(format!(
                        "{}: ${}: {m} has no label {label}",
                        d.file, v["name"]
                    )),
                }
            }
        }
    }
    assert!(
        count >= 30,
        "only {count} queries found: is the extraction broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_documented_metric_is_on_some_dashboard() {
    let mut used = BTreeSet::new();
    for d in dashboards() {
        for q in queries(&d) {
            used.extend(references(&q.expr).metrics);
        }
    }
    let unused: Vec<String> = documented_metrics()
        .into_keys()
        .filter(|m| !used.contains(m))
        // A histogram is shown once through its buckets or its mean.
        .filter(|m| {
            !(m.ends_with("_sum") || m.ends_with("_count")) || {
                let base = m.trim_end_matches("_sum").trim_end_matches("_count");
                !used.contains(&format!("{base}_bucket"))
            }
        })
        .collect();
    assert!(
        unused.is_empty(),
        "documented but on no dashboard: {unused:?}"
    );
}

#[test]
fn dashboards_show_what_the_fabric_overview_promises() {
    let all = dashboards();
    let find = |file: &str| all.iter().find(|d| d.file == file).unwrap();
    let overview = find("fabric-overview.json");
    let exprs: Vec<String> = queries(overview).into_iter().map(|q| q.expr).collect();
    let has = |needle: &str| exprs.iter().any(|e| e.contains(needle));
    assert!(has("rate(flitnet_port_tx_flits_total"), "fabric throughput");
    assert!(
        has("flitnet_host_messages_delivered_total"),
        "delivered messages"
    );
    assert!(
        has("sum by (reason) (rate(flitnet_drops_total"),
        "drops by reason"
    );
    assert!(has("histogram_quantile(0.99"), "latency percentiles");
    assert!(
        panels(&overview.json)
            .iter()
            .any(|p| p["type"] == "state-timeline"
                && p["targets"][0]["expr"]
                    .as_str()
                    .unwrap()
                    .starts_with("flitnet_port_up")),
        "link states as a state timeline"
    );
    let annotations = overview.json["annotations"]["list"].to_string();
    assert!(annotations.contains("changes(flitnet_fault_events_total"));
    assert!(annotations.contains("flitnet_fault_last_timestamp_seconds"));
    let ports = find("switch-ports.json");
    assert!(panels(&ports.json).iter().any(|p| p["type"] == "heatmap"));
    let recovery = find("recovery.json");
    assert!(panels(&recovery.json)
        .iter()
        .any(|p| p["type"] == "gauge"
            && p["targets"][0]["expr"] == "flitnet_controller_reroute_seconds"));
}

/// Grafana macros and variables replaced by values PromQL accepts, so that
/// promtool can parse the expression.
fn instantiate(expr: &str) -> String {
    let mut out = expr
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h");
    // Remaining `$var` / `${var}` only occur inside label matchers' strings.
    while let Some(start) = out.find('$') {
        let rest = &out[start + 1..];
        let len = if let Some(r) = rest.strip_prefix('{') {
            r.find('}').map_or(rest.len(), |e| e + 2)
        } else {
            rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())
        };
        out.replace_range(start..start + 1 + len, "x");
    }
    out
}

/// Runs `promtool check rules` on one recording rule per expression;
/// returns promtool's verdict and output.
fn promtool_check(exprs: &[String]) -> (bool, String) {
    #[derive(serde::Serialize)]
    struct Rule<'a> {
        record: String,
        expr: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Group<'a> {
        name: &'static str,
        rules: Vec<Rule<'a>>,
    }
    #[derive(serde::Serialize)]
    struct Rules<'a> {
        groups: Vec<Group<'a>>,
    }
    let rules = Rules {
        groups: vec![Group {
            name: "flitnet-dashboards",
            rules: exprs
                .iter()
                .enumerate()
                .map(|(i, e)| Rule {
                    record: format!("flitnet:dashboard_query_{i}"),
                    expr: e,
                })
                .collect(),
        }],
    };
    let path = std::env::temp_dir().join(format!(
        "flitnet-dashboard-rules-{}-{}.yml",
        std::process::id(),
        exprs.len()
    ));
    std::fs::write(&path, serde_yaml_ng::to_string(&rules).unwrap()).unwrap();
    let out = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&path)
        .output()
        .expect("promtool runs");
    let _ = std::fs::remove_file(&path);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn every_query_is_valid_promql_when_promtool_is_installed() {
    let installed = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is missing, and CI installs it (.ci/run): failing instead of skipping"
        );
        println!("skipped: promtool not installed (apt-get install prometheus); the other dashboard checks still ran");
        return;
    }
    assert_eq!(
        instantiate(r#"rate(x{a=~"$switch", b="${host}"}[$__rate_interval])"#),
        r#"rate(x{a=~"x", b="x"}[1m])"#
    );
    // The check itself must be able to fail.
    let (ok, text) = promtool_check(&["sum(rate(flitnet_x[1m])".to_string()]);
    assert!(!ok, "promtool accepted broken PromQL:\n{text}");
    let exprs: Vec<String> = dashboards()
        .iter()
        .flat_map(queries)
        .map(|q| instantiate(&q.expr))
        .collect();
    let (ok, text) = promtool_check(&exprs);
    assert!(
        ok,
        "promtool rejected a dashboard query:\n{text}\nqueries:\n{}",
        exprs.join("\n")
    );
    println!(
        "promtool: {} dashboard queries are valid PromQL",
        exprs.len()
    );
}
