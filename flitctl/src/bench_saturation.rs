//! `flitctl bench saturation`: accepted throughput and message latency
//! over offered load, in the deterministic simulator (which drives the same
//! link and switch code as the daemons), for the fabrics of
//! docs/performance.md "Saturation": the 4-ary 2-tree and 4-ary 3-tree
//! routed by Dmodk and a 4×4 mesh in dimension order, uniform traffic,
//! 2 VCs × 16 flits, 8-flit messages. Build with `--release`.

use crate::load_point::{load_point, reference_params, LoadPointSpec};
use anyhow::{bail, Context, Result};
use clap::Args;
use flitnet_core::control::SwitchLatency;
use flitnet_core::host::endpoint::InjectionVc;
use flitnet_core::host::traffic::TrafficPattern;
use flitnet_core::routing::{registry, RoutingTables};
use flitnet_core::sim::shortest_path_lfts;
use flitnet_core::topology::generators::{kary_ntree, mesh_or_torus};
use flitnet_core::topology::{FaultSet, Topology};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct SaturationArgs {
    /// Fabrics, comma-separated: kary-4-2, kary-4-3, mesh-4x4.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kary-4-2,kary-4-3,mesh-4x4"
    )]
    pub fabrics: Vec<String>,
    /// Offered loads (fractions of the link bandwidth), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0"
    )]
    pub loads: Vec<f64>,
    /// Emulated warm-up before the measurement window.
    #[arg(long, default_value = "1ms", value_parser = crate::parse::parse_duration)]
    pub warmup: std::time::Duration,
    /// Emulated measurement window.
    #[arg(long, default_value = "4ms", value_parser = crate::parse::parse_duration)]
    pub measure: std::time::Duration,
    /// Switch traversal latency (`4ft`, `250ns`).
    #[arg(long, default_value = "4ft", value_parser = |s: &str| SwitchLatency::parse(s).map_err(|e| e.0))]
    pub switch_latency: SwitchLatency,
    /// Crossbar speedup.
    #[arg(long, default_value_t = 1)]
    pub crossbar_speedup: u8,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn fabric(name: &str) -> Result<(Topology, RoutingTables, &'static str)> {
    let dmodk = |t: &Topology| -> Result<RoutingTables> {
        Ok(registry::engine("dmodk")
            .context("dmodk engine")?
            .route(t, &FaultSet::none())?)
    };
    Ok(match name {
        "kary-4-2" => {
            let t = kary_ntree(4, 2)?;
            let r = dmodk(&t)?;
            (t, r, "dmodk")
        }
        "kary-4-3" => {
            let t = kary_ntree(4, 3)?;
            let r = dmodk(&t)?;
            (t, r, "dmodk")
        }
        "mesh-4x4" => {
            let t = mesh_or_torus(&[4, 4], false)?;
            let r = shortest_path_lfts(&t);
            (t, r, "dimension order")
        }
        other => bail!("unknown fabric {other:?} (kary-4-2, kary-4-3, mesh-4x4)"),
    })
}

pub fn run_saturation(args: SaturationArgs) -> Result<()> {
    let mut params = reference_params();
    params.switch_latency = args.switch_latency;
    params.crossbar_speedup = args.crossbar_speedup;
    params.validate()?;
    if let Some(bad) = args.loads.iter().find(|l| !(**l > 0.0 && **l <= 2.0)) {
        bail!("offered load {bad} must be in (0, 2]");
    }
    let fabrics = args
        .fabrics
        .iter()
        .map(|n| fabric(n).map(|f| (n.clone(), f)))
        .collect::<Result<Vec<_>>>()?;
    let rate = params.bandwidth_flits_per_s.unwrap_or(1);
    println!(
        "links {rate} flits/s, {} ns propagation; {} VCs x {} flits; switch latency {} ({} ns), crossbar speedup {}; uniform traffic, 8-flit messages, Poisson arrivals; warm-up {:?}, window {:?}",
        params.propagation_ns,
        params.vcs,
        params.buffer_depth,
        params.switch_latency,
        params.switch_timing().traversal_ns,
        params.crossbar_speedup,
        args.warmup,
        args.measure,
    );
    for (name, (topo, tables, routing)) in &fabrics {
        println!("== {name} ({} hosts, {routing})", topo.num_hosts());
        println!(
            "{:>8} {:>9} {:>9} {:>12} {:>12} {:>8}",
            "offered", "accepted", "messages", "p50 us", "p99 us", "wall s"
        );
        for &load in &args.loads {
            let started = Instant::now();
            let spec = LoadPointSpec {
                params: params.clone(),
                pattern: TrafficPattern::Uniform,
                load,
                message_flits: 8,
                injection: InjectionVc::RoundRobin,
                warmup_ns: args.warmup.as_nanos() as u64,
                measure_ns: args.measure.as_nanos() as u64,
                seed: args.seed,
            };
            let p = load_point(topo, tables, &spec)?;
            println!(
                "{:>8.2} {:>9.3} {:>9} {:>12.1} {:>12.1} {:>8.1}",
                p.offered,
                p.accepted,
                p.messages,
                p.latency_p50_ns as f64 / 1e3,
                p.latency_p99_ns as f64 / 1e3,
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
