//! `flitctl bench fidelity`: the same fabric, parameters, traffic and seed
//! run live (real daemons, `--time-dilation auto` unless told otherwise)
//! and in the deterministic simulator (core/src/sim.rs, which drives the
//! same link and switch state machines), side by side: accepted throughput
//! and message latency p50/p99, with live/sim ratios and the live run's
//! fidelity verdict and dilation (docs/fidelity.md).

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
    /// Only the first row (4-ary 2-tree at 0.1): a quick check.
    #[arg(long)]
    pub quick: bool,
    /// Seed of the traffic, live and simulated.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
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
    pub dilation: u32,
}

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
    let params = up.fabric.params_for(&run.engine);
    Ok((run, params))
}

pub fn run(args: BenchFidelityArgs) -> Result<()> {
    let scratch = ScratchDir::new()?;
    let mut table = Vec::new();
    eprintln!(
        "load average before: {}",
        std::fs::read_to_string("/proc/loadavg")?.trim()
    );
    for (i, (topo, load)) in rows(args.quick)?.into_iter().enumerate() {
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
            dilation: fi.dilation,
        };
        eprintln!("{}", format_row(&row));
        table.push(row);
    }
    eprintln!(
        "load average after: {}",
        std::fs::read_to_string("/proc/loadavg")?.trim()
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&table)?);
    } else {
        println!("{}", header());
        for r in &table {
            println!("{}", format_row(r));
        }
    }
    Ok(())
}

/// A private directory for the topology files and run dirs, removed at
/// the end.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("flitnet-bench-fidelity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(ScratchDir(dir))
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
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
