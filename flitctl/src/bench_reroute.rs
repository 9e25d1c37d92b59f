//! `flitctl bench reroute`: how long the controller takes from the first
//! authenticated down-event of a fault to the last switch's acknowledgement
//! of the new tables, for a link killed by the controller and a switch
//! killed behind its back (SIGKILL of the process, or `docker kill` of the
//! container), on local fabrics (`flitctl up`: the 4-ary 2-tree's 24
//! processes, the 4-ary 3-tree's 112) and, when Docker and an image are
//! there, on the 24 containers of a Compose bundle (`flitctl attach`). Each
//! row is one run in a child process; the switch loss is also given as a
//! ratio to the link kill of the same fabric, measured in the same bench
//! run (re-routing after a lost switch should cost what a link kill costs).

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct BenchRerouteArgs {
    /// Directory holding the topologies (kary-4-2.yaml, kary-4-3.yaml).
    #[arg(long, default_value = "topologies")]
    pub topologies: PathBuf,
    /// Runs per row (the median is printed).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Leave out the 112-process 4-ary 3-tree.
    #[arg(long)]
    pub quick: bool,
    /// Image for the Compose rows (compose/build-image.sh); none: no
    /// Compose rows.
    #[arg(long)]
    pub image: Option<String>,
    /// Compose project name of the Compose rows' fabric (and the stem of
    /// its temporary directory).
    #[arg(long, default_value = "flitnet-bench")]
    pub project: String,
    #[arg(long)]
    pub json: bool,
}

/// One row: a fault on a fabric.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub fabric: String,
    pub fault: String,
    /// Fault instant → first down-event, ms (median).
    pub detection_ms: f64,
    /// First down-event → last switch's acknowledgement, ms (median).
    pub install_ms: f64,
    /// The goal for `install_ms` on this fabric.
    pub goal_ms: f64,
    /// `install_ms` over the link kill's on the same fabric.
    pub ratio_to_link: Option<f64>,
}

pub fn run(args: BenchRerouteArgs) -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!("warning: flitctl is a debug build; benchmark a --release build");
    }
    let exe = std::env::current_exe().context("finding flitctl")?;
    let mut fabrics = vec![("kary-4-2.yaml", "s0-0:4", "s1-3", 50.0)];
    if !args.quick {
        fabrics.push(("kary-4-3.yaml", "s0-00:4", "s2-15", 100.0));
    }
    let mut rows = Vec::new();
    for (file, link, switch, goal) in fabrics {
        let topo = args.topologies.join(file);
        let name = format!("local {}", file.trim_end_matches(".yaml"));
        let up = |kill: &[&str]| -> Result<(f64, f64)> {
            let out = Command::new(&exe)
                .arg("up")
                .arg(&topo)
                .args(["--duration", "3s", "--load", "0.1", "--kill-at", "1s"])
                .args(["--time-dilation", "1", "--progress", "never", "--json"])
                .args(kill)
                .output()
                .context("running flitctl up")?;
            // A run that printed no report says why on stderr.
            timing(&out.stdout).with_context(|| {
                let err = String::from_utf8_lossy(&out.stderr);
                format!("flitctl up: {}", err.lines().last().unwrap_or("").trim())
            })
        };
        let link_row = measure(&name, "link-down", goal, args.runs, || {
            up(&["--kill-link", link])
        })?;
        let mut switch_row = measure(&name, "switch-lost", goal, args.runs, || {
            up(&["--kill-switch", switch])
        })?;
        switch_row.ratio_to_link = Some(switch_row.install_ms / link_row.install_ms.max(1e-3));
        rows.push(link_row);
        rows.push(switch_row);
    }
    if let Some(image) = &args.image {
        rows.extend(compose_rows(
            &exe,
            &args.topologies.join("kary-4-2.yaml"),
            image,
            &args.project,
            args.runs,
        )?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "{:<22} {:<12} {:>13} {:>20} {:>8} {:>14}",
        "fabric", "fault", "detection ms", "detect→installed ms", "goal", "× link kill"
    );
    for r in &rows {
        println!(
            "{:<22} {:<12} {:>13.1} {:>20.1} {:>8} {:>14}",
            r.fabric,
            r.fault,
            r.detection_ms,
            r.install_ms,
            format!("<{}", r.goal_ms),
            r.ratio_to_link.map_or("-".into(), |x| format!("{x:.2}"))
        );
    }
    Ok(())
}

/// Medians of `runs` runs of `once` (detection, install).
fn measure(
    fabric: &str,
    fault: &str,
    goal_ms: f64,
    runs: usize,
    mut once: impl FnMut() -> Result<(f64, f64)>,
) -> Result<Row> {
    let mut detection = Vec::new();
    let mut install = Vec::new();
    for _ in 0..runs.max(1) {
        let (d, i) = once().with_context(|| format!("{fabric}, {fault}"))?;
        detection.push(d);
        install.push(i);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(Row {
        fabric: fabric.into(),
        fault: fault.into(),
        detection_ms: median(&mut detection),
        install_ms: median(&mut install),
        goal_ms,
        ratio_to_link: None,
    })
}

/// (detection, detection → installed) of a run's only fault, from its JSON
/// report.
fn timing(report: &[u8]) -> Result<(f64, f64)> {
    let report: crate::report::RunReport =
        serde_json::from_slice(report).context("no JSON report")?;
    let Some(fault) = report.faults.first() else {
        bail!("the run reports no fault");
    };
    figures(fault)
}

/// (detection, detection → installed) of one fault.
fn figures(fault: &crate::report::FaultTiming) -> Result<(f64, f64)> {
    let (Some(detected), Some(installed)) = (fault.detection_ms, fault.routes_installed_ms) else {
        bail!(
            "the fault ({} {}) was not detected and routed around",
            fault.kind,
            fault.element
        );
    };
    Ok((detected, installed - detected))
}

/// The Compose rows: the 4-ary 2-tree's 24 containers from `image`, a link
/// killed by `flitctl attach`, a spine switch's container `docker kill`ed.
fn compose_rows(
    exe: &Path,
    topo: &Path,
    image: &str,
    project: &str,
    runs: usize,
) -> Result<Vec<Row>> {
    let Some(compose) = crate::compose::compose_command() else {
        bail!("--image: neither docker-compose nor the docker compose plugin works");
    };
    let project = format!("{project}-{}", std::process::id());
    let dir = std::env::temp_dir().join(&project);
    let events = std::net::UdpSocket::bind("0.0.0.0:0")?.local_addr()?.port();
    let status = Command::new(exe)
        .arg("compose")
        .arg(topo)
        .arg("-o")
        .arg(&dir)
        .args(["--subnet", "10.236.0.0/24", "--image", image])
        .args(["--events", &format!("10.236.0.1:{events}")])
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "flitctl compose failed");
    let docker = |args: &[&str]| -> Result<String> {
        let out = Command::new(compose[0])
            .args(&compose[1..])
            .args(["-p", &project])
            .args(args)
            .current_dir(&dir)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    struct Down<'a>(&'a dyn Fn(&[&str]) -> Result<String>);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = (self.0)(&["down", "--remove-orphans", "--timeout", "3"]);
        }
    }
    let mut rows = Vec::new();
    for (fault, kill_link) in [("link-down", true), ("switch-lost", false)] {
        let once = || -> Result<(f64, f64)> {
            // A fresh fabric each run: a killed container stays dead.
            let _down = Down(&docker);
            let services = crate::compose::node_services(&dir)?;
            let mut up = vec!["up", "-d", "--no-color"];
            up.extend(services.iter().map(String::as_str));
            docker(&up)?;
            let run_dir = dir.join(format!("run-{fault}"));
            let _ = std::fs::remove_dir_all(&run_dir);
            let mut attach = Command::new(exe);
            attach
                .arg("attach")
                .arg("--fabric")
                .arg(dir.join("configs/fabric.json"))
                .args(["--duration", "5s", "--load", "0.1", "--json"])
                .args(["--events", &format!("0.0.0.0:{events}")])
                .arg("--run-dir")
                .arg(&run_dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            if kill_link {
                attach.args(["--kill-link", "s0-0:4", "--kill-at", "1s"]);
            }
            let child = attach.spawn()?;
            if !kill_link {
                let victim = docker(&["ps", "-q", "s1-3"])?;
                let deadline = Instant::now() + Duration::from_secs(60);
                while !std::fs::read_to_string(run_dir.join("events.jsonl"))
                    .unwrap_or_default()
                    .contains("traffic-started")
                {
                    anyhow::ensure!(Instant::now() < deadline, "traffic never started");
                    std::thread::sleep(Duration::from_millis(50));
                }
                std::thread::sleep(Duration::from_secs(1));
                let out = Command::new("docker").args(["kill", &victim]).output()?;
                anyhow::ensure!(out.status.success(), "docker kill failed");
            }
            let out = child.wait_with_output()?;
            let report: crate::report::RunReport =
                serde_json::from_slice(&out.stdout).context("no JSON report")?;
            let kinds: Vec<&str> = report.faults.iter().map(|f| f.kind.as_str()).collect();
            let only = report
                .faults
                .iter()
                .find(|f| f.kind == fault)
                .with_context(|| format!("no {fault} among the run's faults {kinds:?}"))?;
            figures(only)
        };
        rows.push(measure("compose kary-4-2", fault, 50.0, runs, once)?);
    }
    let link = rows[0].install_ms;
    rows[1].ratio_to_link = Some(rows[1].install_ms / link.max(1e-3));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}
