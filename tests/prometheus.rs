//! A real Prometheus (Debian's `prometheus` package) scrapes a running
//! fabric, and the observability contract is checked end to end:
//!
//! (a) every daemon's and the controller's exposition passes
//!     `promtool check metrics` (valid, and HELP/TYPE lint clean);
//! (b) every PromQL query of grafana/dashboards/*.json (panels,
//!     annotations, template variables) returns data from that Prometheus;
//! (c) the dashboards parse and reference only metric names some daemon or
//!     the controller really exports.
//!
//! The fabric is `flitctl up --metrics --controller-metrics` on loopback with
//! a link killed mid-run, so that fault, port-down and reroute series exist.
//! Skipped, with a message, only when `prometheus` or `promtool` is missing
//! (`apt-get install prometheus`; .ci/run installs it).

use flitnet::prom::{exposed_names, http_get, installed, promtool_check, query};
use flitnet::{bin, topology, workspace_dir};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the child when dropped, so a failing assertion leaves nothing behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `flitctl up` and its daemons: dropping it kills the controller and then
/// stops the daemons through the run directory's state file (`flitctl
/// down`), since a killed controller cannot stop them itself.
struct FabricGuard {
    up: Guard,
    run_dir: std::path::PathBuf,
}

impl Drop for FabricGuard {
    fn drop(&mut self) {
        let _ = self.up.0.kill();
        let _ = self.up.0.wait();
        let _ = Command::new(bin("flitctl"))
            .arg("down")
            .arg(&self.run_dir)
            .output();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Metrics addresses of the daemons `flitctl up` configured in `run_dir`.
fn daemon_metrics(run_dir: &Path) -> Vec<(String, SocketAddr)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(run_dir).unwrap().flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name == "state.json" || !name.ends_with(".json") {
            continue;
        }
        let cfg: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        if let Some(addr) = cfg["metrics_addr"].as_str() {
            out.push((
                cfg["name"].as_str().unwrap().to_string(),
                addr.parse().unwrap(),
            ));
        }
    }
    out.sort();
    out
}

#[test]
fn prometheus_scrapes_the_fabric_and_every_dashboard_query_has_data() {
    if flitnet::skip_without(
        installed("prometheus") && installed("promtool"),
        "Debian's `prometheus` package (prometheus, promtool; apt-get install -y --no-install-recommends prometheus)",
    ) {
        return;
    }
    let scratch = std::env::temp_dir().join(format!("flitnet-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let run_dir = scratch.join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let started = Instant::now();
    let controller: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();

    // The fabric: traffic for up to 120 s (stopped when the test ends), a link killed after 2 s and re-routed.
    let topo = topology("kary-4-2.yaml");
    let mut fabric = FabricGuard {
        run_dir: run_dir.clone(),
        up: Guard(
            Command::new(bin("flitctl"))
                .args(["up", topo.to_str().unwrap(), "--metrics"])
                .args(["--time-dilation", "1"])
                .args(["--controller-metrics", &controller.to_string()])
                .args(["--duration", "120s", "--load", "0.2"])
                .args(["--kill-link", "s0-0:4", "--kill-at", "2s"])
                .arg("--run-dir")
                .arg(&run_dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("flitctl up starts"),
        ),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    // state.json lists each daemon as it starts: all 24 = every config written.
    let all_started = |dir: &Path| {
        std::fs::read(dir.join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|s| s["daemons"].as_array().is_some_and(|d| d.len() == 24))
    };
    while !all_started(&run_dir) {
        if let Some(status) = fabric.up.0.try_wait().unwrap() {
            let mut err = String::new();
            fabric
                .up
                .0
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("flitctl up exited early ({status}):\n{err}");
        }
        assert!(Instant::now() < deadline, "the fabric did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let daemons = daemon_metrics(&run_dir);
    assert_eq!(daemons.len(), 24, "16 hosts and 8 switches export metrics");

    // Prometheus on loopback, scraping every daemon and the controller each second.
    let prom: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let targets: Vec<String> = daemons.iter().map(|(_, a)| format!("'{a}'")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n\
         \x20 - job_name: daemons\n    static_configs:\n      - targets: [{}]\n\
         \x20 - job_name: flitctl\n    static_configs:\n      - targets: ['{controller}']\n",
        targets.join(", ")
    );
    let config_path = scratch.join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let prom_log = std::fs::File::create(scratch.join("prometheus.log")).unwrap();
    let _prometheus = Guard(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                scratch.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={prom}"))
            .stdout(prom_log.try_clone().unwrap())
            .stderr(prom_log)
            .spawn()
            .expect("prometheus starts"),
    );

    // (a) Every exposition is valid and lint-clean.
    let mut exported = BTreeSet::new();
    for (name, addr) in daemons
        .iter()
        .cloned()
        .chain([("controller".to_string(), controller)])
    {
        let text = http_get(addr, "/metrics")
            .unwrap_or_else(|| panic!("{name} serves no /metrics on {addr}"));
        let (ok, report) = promtool_check(&text);
        assert!(
            ok,
            "promtool check metrics rejects {name}'s exposition:\n{report}"
        );
        exported.extend(exposed_names(&text));
    }

    // Wait until every target is up and the fault has been scraped.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let up = query(prom, "sum(up)").unwrap_or_default();
        let ups = up
            .first()
            .and_then(|r| r["value"][1].as_str())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        let fault = query(prom, "flitnet_controller_reroute_seconds").unwrap_or_default();
        if ups == 25.0 && !fault.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not scrape all 25 targets and the reroute in time (up = {ups}); log: {}",
            std::fs::read_to_string(scratch.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "all targets scraped after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    // Rates need a few samples after the fault.
    std::thread::sleep(Duration::from_secs(6));
    // Exports published after the first scrape (port-down events, the
    // latency histogram once messages land) are in the sets too.
    for (_, addr) in &daemons {
        if let Some(text) = http_get(*addr, "/metrics") {
            exported.extend(exposed_names(&text));
        }
    }

    // (b) and (c): every dashboard query returns data and names only
    // exported metrics.
    let (checked, failures) = flitnet::prom::check_dashboards(
        &workspace_dir().join("grafana/dashboards"),
        prom,
        &exported,
    );
    eprintln!(
        "{checked} dashboard queries checked after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert!(checked >= 40, "only {checked} dashboard queries found");
    assert!(
        failures.is_empty(),
        "{} of {checked} dashboard queries fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
    drop(fabric);
    std::fs::remove_dir_all(&scratch).unwrap();
}
