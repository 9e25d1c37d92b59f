//! `flitctl bench fidelity`: the same fabric, parameters, traffic and seed
//! run live (real daemons, `--time-dilation auto` unless told otherwise)
//! and in the deterministic simulator (core/src/sim.rs, which drives the
//! same link and switch state machines), side by side: accepted throughput
//! and message latency p50/p99, with live/sim ratios and the live run's
//! fidelity verdict and dilation (docs/fidelity.md). Fault rows kill a link
//! mid-run, both ways through `flitctl up`'s flags (`flitctl sim` runs them
//! in the simulator): messages lost, time to detect and to recover.

use crate::report::RunReport;
use anyhow::{Context, Result};
use clap::Args;
use flitnet_core::control::{FabricParams, HostDaemonReport, TrafficSpec};
use flitnet_core::host::endpoint::HostConfig;
use flitnet_core::host::retained::ReleasePolicy;
use flitnet_core::host::source::{MessageLength, OfferedLoad, SourceConfig};
use flitnet_core::host::traffic::TrafficPattern;
use flitnet_core::sim::{build_fabric, SimConfig};
use flitnet_core::topology::generators::{kary_ntree, mesh_or_torus};
use flitnet_core::topology::{NodeRef, Topology};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct BenchFidelityArgs {
    /// Emulated traffic time per run.
    #[arg(long, default_value = "500ms", value_parser = crate::parse::parse_duration)]
    pub duration: Duration,
    /// Time dilation of the live runs (`auto` calibrates per row).
    #[arg(long, default_value = "auto", value_name = "N|auto")]
    pub time_dilation: flitnet_runtime::clock::Dilation,
    /// Only the first row (4-ary 2-tree at 0.1) and the first fault row:
    /// a quick check.
    #[arg(long)]
    pub quick: bool,
    /// Only the fault rows (with `--quick`, only the first).
    #[arg(long)]
    pub faults_only: bool,
    /// Seed of the traffic, live and simulated.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
    /// Keep the topology files and every live run's directory (its
    /// `reports.json`, events and logs) here, instead of a scratch
    /// directory removed at the end.
    #[arg(long, value_name = "DIR")]
    pub keep_runs: Option<PathBuf>,
}

/// One row of the table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub fabric: String,
    pub load: f64,
    pub sim_accepted: f64,
    pub live_accepted: f64,
    pub sim_p50_us: f64,
    pub live_p50_us: f64,
    pub sim_p99_us: f64,
    pub live_p99_us: f64,
    pub verdict: String,
    /// The verdict's reason, with the figures behind it.
    pub reason: String,
    pub dilation: u32,
}

/// One fault row: the same link kill run live and simulated.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FaultRow {
    pub fabric: String,
    pub load: f64,
    /// What fails and what recovers (`link kill, controller re-route`).
    pub fault: String,
    pub sim_lost: u64,
    pub live_lost: u64,
    /// Fault to the first neighbour reporting it, ms (emulated).
    pub sim_detection_ms: Option<f64>,
    pub live_detection_ms: Option<f64>,
    /// Fault to new tables installed on every switch, ms (emulated): the
    /// time to recover.
    pub sim_recovery_ms: Option<f64>,
    pub live_recovery_ms: Option<f64>,
    /// Messages a recovery protocol resent and delivered.
    pub sim_recovered: u64,
    pub live_recovered: u64,
    /// Their mean latency (generation to delivery), ms; 0 when none.
    pub sim_recovered_latency_ms: f64,
    pub live_recovered_latency_ms: f64,
    pub verdict: String,
    /// The verdict's reason, with the figures behind it.
    pub reason: String,
    pub dilation: u32,
}

/// The whole table (`--json`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Table {
    pub rows: Vec<Row>,
    pub faults: Vec<FaultRow>,
}

/// The fault rows: what fails and how the fabric recovers, as `flitctl up`
/// flags. The link between leaf s0-0 and its first spine dies at 40 % of
/// the traffic time; the controller re-routes around it (and SBRP-1 resends
/// what it cut).
fn fault_cases(quick: bool) -> Vec<(&'static str, &'static [&'static str])> {
    let mut all: Vec<(&'static str, &'static [&'static str])> = vec![
        ("link kill, controller re-route", &[]),
        (
            "link kill, re-route + SBRP-1",
            &["--recovery-protocol", "sbrp1"],
        ),
    ];
    if quick {
        all.truncate(1);
    }
    all
}

/// Offered load of the fault rows.
const FAULT_LOAD: f64 = 0.3;

/// The link the fault rows kill (an end of it, as `--kill-link` takes it).
const FAULT_LINK: &str = "s0-0:4";

/// The fabrics and loads of the table.
fn rows(quick: bool) -> Result<Vec<(Topology, f64)>> {
    let tree = kary_ntree(4, 2)?;
    let mesh = mesh_or_torus(&[4, 4], false)?;
    let mut all = Vec::new();
    for load in [0.1, 0.3, 0.5, 0.7, 0.9] {
        all.push((tree.clone(), load));
    }
    for load in [0.1, 0.5] {
        all.push((mesh.clone(), load));
    }
    if quick {
        all.truncate(1);
    }
    Ok(all)
}

/// The traffic source a host daemon builds from `spec` (hostd's
/// `source_config`, which reads permutation files; the bench's patterns
/// need none).
fn source_config(spec: &TrafficSpec, params: &FabricParams) -> Result<SourceConfig> {
    let pattern: TrafficPattern = spec.pattern.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(SourceConfig {
        pattern,
        load: OfferedLoad::Fraction {
            fraction: spec.load,
            link_flits_per_s: params.bandwidth_flits_per_s.unwrap_or(1_000_000) as f64,
        },
        length: MessageLength::Fixed {
            flits: spec.message_flits,
        },
        max_packet_flits: params.max_packet_flits,
        payload_bytes: params.flit_payload as usize,
        duration_ns: Some(spec.duration_ns),
        release: ReleasePolicy::WhenSent,
        ..SourceConfig::default()
    })
}

/// The run in the simulator, reported as `flitctl up` reports a live one.
fn simulate(
    topo: &Topology,
    params: &FabricParams,
    spec: &TrafficSpec,
    engine: &str,
) -> Result<RunReport> {
    let tables = crate::route::compute_routes(topo, engine, &Default::default())?;
    let host = HostConfig {
        host: 0,
        hosts: 0,
        source: source_config(spec, params)?,
        injection: Default::default(),
        link: params.link_config(&flitnet_runtime::event_loop::LINK_DRIVER),
        epoch: 1,
        seed: spec.seed,
        record_trace: false,
    };
    let cfg = SimConfig {
        host,
        switching: params
            .switch_config(2, &flitnet_runtime::event_loop::LINK_DRIVER)
            .switching,
        wire_ns: 0,
        switch_timing: params.switch_timing(),
    };
    let mut f = build_fabric(topo.clone(), &tables, &cfg).context("building the simulation")?;
    f.start(0);
    f.run_until(spec.duration_ns);
    f.run_to_quiescence(100_000, 5_000_000, spec.duration_ns + 10_000_000_000);
    let hosts: Vec<(NodeRef, HostDaemonReport)> = f
        .hosts
        .iter()
        .enumerate()
        .map(|(h, e)| {
            let r = HostDaemonReport {
                endpoint: e.report(),
                ..HostDaemonReport::default()
            };
            (NodeRef::Host(h as u32), r)
        })
        .collect();
    Ok(RunReport::build(
        topo,
        &tables.engine,
        spec,
        hosts,
        Vec::new(),
        Vec::new(),
        Duration::ZERO,
    ))
}

/// The same run live, through `flitctl up`'s code; returns its report and
/// the fabric parameters it ran with.
fn live(
    topo_file: &std::path::Path,
    load: f64,
    args: &BenchFidelityArgs,
    run_dir: PathBuf,
) -> Result<(RunReport, FabricParams)> {
    let argv = [
        "flitctl".to_string(),
        "up".into(),
        topo_file.display().to_string(),
        "--load".into(),
        load.to_string(),
        "--duration".into(),
        format!("{}ms", args.duration.as_millis()),
        "--seed".into(),
        args.seed.to_string(),
        "--time-dilation".into(),
        args.time_dilation.to_string(),
        "--progress".into(),
        "never".into(),
        "--run-dir".into(),
        run_dir.display().to_string(),
    ];
    let up = crate::up::UpArgs::from_argv(&argv)?;
    let run = crate::up::execute(&up)?.run;
    let topo = crate::topo::load(&up.topology)?;
    let params = up
        .fabric
        .with_topology(&topo)
        .params_for(&run.engine, up.mechanism);
    Ok((run, params))
}

/// `flitctl up`'s arguments for one fault row, live (`run_dir`) or
/// simulated (none).
fn fault_argv(
    topo_file: &std::path::Path,
    extra: &[&str],
    args: &BenchFidelityArgs,
    run_dir: Option<PathBuf>,
) -> Vec<String> {
    let kill_at = args.duration * 2 / 5;
    let mut argv: Vec<String> = [
        "flitctl",
        "up",
        &topo_file.display().to_string(),
        "--load",
        &FAULT_LOAD.to_string(),
        "--duration",
        &format!("{}ms", args.duration.as_millis()),
        "--seed",
        &args.seed.to_string(),
        "--kill-link",
        FAULT_LINK,
        "--kill-at",
        &format!("{}us", kill_at.as_micros()),
        "--time-dilation",
        &args.time_dilation.to_string(),
        "--progress",
        "never",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(extra.iter().map(|s| s.to_string()));
    if let Some(dir) = run_dir {
        argv.extend(["--run-dir".to_string(), dir.display().to_string()]);
    }
    argv
}

/// One fault row: the run live, then in the simulator with the same flags.
fn fault_row(
    topo: &Topology,
    topo_file: &std::path::Path,
    (fault, extra): (&str, &[&str]),
    args: &BenchFidelityArgs,
    run_dir: PathBuf,
) -> Result<FaultRow> {
    let live_args =
        crate::up::UpArgs::from_argv(&fault_argv(topo_file, extra, args, Some(run_dir)))?;
    let live = crate::up::execute(&live_args)
        .with_context(|| format!("{fault}, live"))?
        .run;
    let sim_args = crate::up::UpArgs::from_argv(&fault_argv(topo_file, extra, args, None))?;
    let sim = crate::sim::run_up(&sim_args, None)
        .with_context(|| format!("{fault}, simulated"))?
        .run;
    let first = |r: &RunReport| r.faults.first().cloned();
    let (sim_fault, live_fault) = (first(&sim), first(&live));
    let fi = live.fidelity.clone().unwrap_or_default();
    Ok(FaultRow {
        fabric: topo.name.clone(),
        load: FAULT_LOAD,
        fault: fault.to_string(),
        sim_lost: sim.totals.messages_lost,
        live_lost: live.totals.messages_lost,
        sim_detection_ms: sim_fault.as_ref().and_then(|f| f.detection_ms),
        live_detection_ms: live_fault.as_ref().and_then(|f| f.detection_ms),
        sim_recovery_ms: sim_fault.as_ref().and_then(|f| f.routes_installed_ms),
        live_recovery_ms: live_fault.as_ref().and_then(|f| f.routes_installed_ms),
        sim_recovered: sim.totals.recovered_messages,
        live_recovered: live.totals.recovered_messages,
        sim_recovered_latency_ms: sim.totals.recovered_latency_mean_us / 1e3,
        live_recovered_latency_ms: live.totals.recovered_latency_mean_us / 1e3,
        verdict: fi.verdict.map_or("unknown", |v| v.name()).to_string(),
        reason: fi.reason.clone(),
        dilation: fi.dilation,
    })
}

pub fn run(args: BenchFidelityArgs) -> Result<()> {
    let scratch = ScratchDir::new(args.keep_runs.clone())?;
    let mut table = Vec::new();
    eprintln!(
        "load average before: {}",
        std::fs::read_to_string("/proc/loadavg")?.trim()
    );
    let table_rows = if args.faults_only {
        Vec::new()
    } else {
        rows(args.quick)?
    };
    for (i, (topo, load)) in table_rows.into_iter().enumerate() {
        let file = scratch.path().join(format!("topo-{i}.yaml"));
        std::fs::write(&file, topo.to_yaml())?;
        let (live, params) = live(&file, load, &args, scratch.path().join(format!("run-{i}")))?;
        // The simulator with the live run's parameters and engine.
        let spec = TrafficSpec {
            pattern: "uniform".into(),
            load,
            message_flits: 8,
            duration_ns: args.duration.as_nanos() as u64,
            rounds: 1,
            seed: args.seed,
        };
        let sim = simulate(&topo, &params, &spec, &live.engine)?;
        let fi = live.fidelity.clone().unwrap_or_default();
        let row = Row {
            fabric: topo.name.clone(),
            load,
            sim_accepted: sim.accepted_flits_per_s,
            live_accepted: live.accepted_flits_per_s,
            sim_p50_us: sim.latency.p50_us,
            live_p50_us: live.latency.p50_us,
            sim_p99_us: sim.latency.p99_us,
            live_p99_us: live.latency.p99_us,
            verdict: fi.verdict.map_or("unknown", |v| v.name()).to_string(),
            reason: fi.reason.clone(),
            dilation: fi.dilation,
        };
        eprintln!("{}", format_row(&row));
        table.push(row);
    }
    let tree = kary_ntree(4, 2)?;
    let tree_file = scratch.path().join("faults.yaml");
    std::fs::write(&tree_file, tree.to_yaml())?;
    let mut faults = Vec::new();
    for (i, case) in fault_cases(args.quick).into_iter().enumerate() {
        let row = fault_row(
            &tree,
            &tree_file,
            case,
            &args,
            scratch.path().join(format!("fault-{i}")),
        )?;
        eprintln!("{}", format_fault_row(&row));
        faults.push(row);
    }
    eprintln!(
        "load average after: {}",
        std::fs::read_to_string("/proc/loadavg")?.trim()
    );
    if args.json {
        let table = Table {
            rows: table,
            faults,
        };
        println!("{}", serde_json::to_string_pretty(&table)?);
    } else {
        println!("{}", header());
        for r in &table {
            println!("{}", format_row(r));
        }
        println!();
        println!("{}", fault_header());
        for r in &faults {
            println!("{}", format_fault_row(r));
        }
    }
    Ok(())
}

/// The directory for the topology files and run dirs: a private one
/// removed at the end, or the one `--keep-runs` names, left in place.
struct ScratchDir {
    path: PathBuf,
    remove: bool,
}

impl ScratchDir {
    fn new(keep: Option<PathBuf>) -> Result<Self> {
        let (path, remove) = match keep {
            Some(dir) => (dir, false),
            None => {
                let dir = std::env::temp_dir()
                    .join(format!("flitnet-bench-fidelity-{}", std::process::id()));
                let _ = std::fs::remove_dir_all(&dir);
                (dir, true)
            }
        };
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(ScratchDir { path, remove })
    }

    fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn header() -> String {
    format!(
        "{:<14} {:>4}  {:>9} {:>9} {:>5}  {:>8} {:>8} {:>5}  {:>8} {:>8} {:>5}  {:<13} {:>4}",
        "fabric",
        "load",
        "acc sim",
        "acc live",
        "ratio",
        "p50 sim",
        "p50 live",
        "ratio",
        "p99 sim",
        "p99 live",
        "ratio",
        "verdict",
        "×N"
    )
}

fn format_row(r: &Row) -> String {
    let ratio = |live: f64, sim: f64| {
        if sim > 0.0 {
            format!("{:.2}", live / sim)
        } else {
            "-".into()
        }
    };
    format!(
        "{:<14} {:>4.1}  {:>9.0} {:>9.0} {:>5}  {:>8.1} {:>8.1} {:>5}  {:>8.1} {:>8.1} {:>5}  {:<13} {:>4}",
        r.fabric,
        r.load,
        r.sim_accepted,
        r.live_accepted,
        ratio(r.live_accepted, r.sim_accepted),
        r.sim_p50_us,
        r.live_p50_us,
        ratio(r.live_p50_us, r.sim_p50_us),
        r.sim_p99_us,
        r.live_p99_us,
        ratio(r.live_p99_us, r.sim_p99_us),
        r.verdict,
        r.dilation
    )
}

fn fault_header() -> String {
    format!(
        "{:<14} {:>4}  {:<30}  {:>8} {:>9} {:>5}  {:>7} {:>8}  {:>7} {:>8} {:>5}  {:>13} {:>13}  {:<13} {:>4}",
        "fabric",
        "load",
        "fault",
        "lost sim",
        "lost live",
        "ratio",
        "det sim",
        "det live",
        "rec sim",
        "rec live",
        "ratio",
        "resent sim",
        "resent live",
        "verdict",
        "×N"
    )
}

/// Lost messages sim / live with their ratio; detection and recovery (new
/// tables) in ms, with the live/sim ratio of recovery; messages resent by
/// SBRP, with their mean latency in ms.
fn format_fault_row(r: &FaultRow) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let ratio = |live: f64, sim: f64| {
        if sim > 0.0 {
            format!("{:.2}", live / sim)
        } else {
            "-".into()
        }
    };
    let recovery_ratio = match (r.live_recovery_ms, r.sim_recovery_ms) {
        (Some(live), Some(sim)) => ratio(live, sim),
        _ => "-".into(),
    };
    let resent = |n: u64, latency_ms: f64| {
        if n == 0 {
            "0".to_string()
        } else {
            format!("{n} @{latency_ms:.1}ms")
        }
    };
    format!(
        "{:<14} {:>4.1}  {:<30}  {:>8} {:>9} {:>5}  {:>7} {:>8}  {:>7} {:>8} {:>5}  {:>13} {:>13}  {:<13} {:>4}",
        r.fabric,
        r.load,
        r.fault,
        r.sim_lost,
        r.live_lost,
        ratio(r.live_lost as f64, r.sim_lost as f64),
        ms(r.sim_detection_ms),
        ms(r.live_detection_ms),
        ms(r.sim_recovery_ms),
        ms(r.live_recovery_ms),
        recovery_ratio,
        resent(r.sim_recovered, r.sim_recovered_latency_ms),
        resent(r.live_recovered, r.live_recovered_latency_ms),
        r.verdict,
        r.dilation
    )
}
