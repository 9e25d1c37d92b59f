//! `flitctl bench sim`: how fast the simulator runs fabrics of growing
//! size — flit hops and events per second of wall time, peak memory —
//! with the event queue the simulator uses (a timing wheel) beside the
//! binary heap it replaced, measured in the same run on the same workload
//! (the ratio is what to compare across machines), or beside another
//! build of `flitctl` (`--baseline-bin`: an older simulator on the same
//! workloads). Each workload runs in a child process of its own, so that
//! its peak resident set is its own.

use crate::controller::decide::Settle;
use crate::events::ControllerEvent;
use crate::fabric::Reconfiguration;
use crate::sim::engine::{ControllerTiming, Op, Plan, Sim, Step};
use anyhow::{bail, Context, Result};
use clap::Args;
use flitnet_core::control::{FabricParams, TrafficSpec};
use flitnet_core::sim::QueueKind;
use flitnet_core::topology::{NodeRef, Topology};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BenchSimArgs {
    /// Workloads to run (default: all): kary-4-2, kary-8-3, pgft-8640.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Skip the baseline (it doubles the time).
    #[arg(long)]
    pub no_baseline: bool,
    /// The baseline is this `flitctl` (another build, e.g. the previous
    /// commit's) running the same workloads with its timing wheel,
    /// instead of this build's binary-heap queue. Both must give the same
    /// results unless the simulation itself changed (then the digests
    /// differ and the bench says so).
    #[arg(long, value_name = "FLITCTL")]
    pub baseline_bin: Option<std::path::PathBuf>,
    #[arg(long)]
    pub json: bool,
    /// Run one workload with one queue in this process and print its
    /// figures as JSON (what the parent starts; not for use by hand).
    #[arg(long, hide = true, value_name = "NAME")]
    pub one: Option<String>,
    #[arg(long, hide = true, value_enum, default_value_t = Queue::Wheel)]
    pub queue: Queue,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Queue {
    Wheel,
    Heap,
}

/// One workload.
struct Workload {
    name: &'static str,
    what: &'static str,
    topo: fn() -> Result<Topology>,
    bandwidth: u64,
    load: f64,
    duration_ns: u64,
    /// Kill a link between switches at this instant and re-route (Dmodc).
    kill_at_ns: Option<u64>,
}

/// The controller's delays in the benched runs: re-routing within the
/// millisecond, the live delays scaled down with the interval.
const TIMING: ControllerTiming = ControllerTiming {
    settle: Settle {
        quiet_ns: 50_000,
        max_ns: 100_000,
    },
    install_ns: 100_000,
};

const WORKLOADS: [Workload; 3] = [
    Workload {
        name: "kary-4-2",
        what: "4-ary 2-tree (16 hosts, 8 switches), 10^6 flits/s links, load 0.3, 5 ms",
        topo: || Ok(flitnet_core::topology::generators::kary_ntree(4, 2)?),
        bandwidth: 1_000_000,
        load: 0.3,
        duration_ns: 5_000_000,
        kill_at_ns: None,
    },
    Workload {
        name: "kary-8-3",
        what: "8-ary 3-tree (512 hosts, 192 switches), 10^6 flits/s links, load 0.3, 5 ms",
        topo: || Ok(flitnet_core::topology::generators::kary_ntree(8, 3)?),
        bandwidth: 1_000_000,
        load: 0.3,
        duration_ns: 5_000_000,
        kill_at_ns: None,
    },
    Workload {
        name: "pgft-8640",
        what: "PGFT 8,640 hosts, 768 switches (topologies/pgft-8640.yaml), 200,000 flits/s links, load 0.3, 1 ms, a link killed at 0.3 ms and Dmodc re-routing",
        topo: || {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../topologies/pgft-8640.yaml");
            crate::topo::load(&path)
        },
        bandwidth: 200_000,
        load: 0.3,
        duration_ns: 1_000_000,
        kill_at_ns: Some(300_000),
    },
];

/// What one workload measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Figures {
    pub name: String,
    pub queue: Queue,
    pub hosts: usize,
    pub switches: usize,
    /// Building the fabric and the first routes.
    pub build_s: f64,
    /// Simulating the emulated interval.
    pub run_s: f64,
    pub emulated_ns: u64,
    pub flit_hops: u64,
    pub events: u64,
    pub datagrams: u64,
    pub messages_delivered: u64,
    pub reroutes: usize,
    pub peak_rss_bytes: u64,
    /// A digest of the run's results (every host's and switch's report):
    /// the two queues must agree on it.
    pub digest: String,
}

fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn run_one(w: &Workload, queue: Queue) -> Result<Figures> {
    let started = Instant::now();
    let topo = (w.topo)()?;
    let params = FabricParams {
        bandwidth_flits_per_s: Some(w.bandwidth),
        ..FabricParams::default()
    };
    let spec = TrafficSpec {
        pattern: "uniform".into(),
        load: w.load,
        message_flits: 8,
        duration_ns: w.duration_ns,
        rounds: 1,
        seed: 1,
    };
    let mut steps = Vec::new();
    if let Some(at) = w.kill_at_ns {
        let link = (0..topo.links.len() as u32)
            .find(|&l| {
                let link = &topo.links[l as usize];
                matches!(link.a.node, NodeRef::Switch(_))
                    && matches!(link.b.node, NodeRef::Switch(_))
            })
            .context("no link between switches")?;
        steps.push(Step {
            at_ns: at,
            ops: vec![Op::SetLink { link, up: false }],
            record: Some(ControllerEvent::fault(
                "kill-link",
                crate::controller::link_name(&topo, link),
            )),
        });
    }
    let plan = Plan {
        reconfiguration: Reconfiguration::Live,
        spec,
        engine: "auto".into(),
        tables: None,
        reroute: true,
        mechanism: None,
        steps,
        seed: 1,
        params,
        timing: TIMING,
        drain: false,
        topo,
    };
    let mut sim = Sim::new(&plan, None)?;
    sim.fabric.set_queue(match queue {
        Queue::Wheel => QueueKind::Wheel,
        Queue::Heap => QueueKind::Heap,
    });
    let build_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let out = sim.run(&BTreeSet::new())?;
    let run_s = started.elapsed().as_secs_f64();
    let digest = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        serde_json::to_string(&out.hosts)?.hash(&mut h);
        serde_json::to_string(&out.switches)?.hash(&mut h);
        serde_json::to_string(&out.records)?.hash(&mut h);
        format!("{:016x}", h.finish())
    };
    Ok(Figures {
        name: w.name.into(),
        queue,
        hosts: plan.topo.num_hosts(),
        switches: plan.topo.num_switches(),
        build_s,
        run_s,
        emulated_ns: out.stats.emulated_ns,
        flit_hops: out.stats.flit_hops,
        events: out.stats.events,
        datagrams: out.stats.datagrams,
        messages_delivered: out
            .hosts
            .iter()
            .map(|(_, r)| r.endpoint.sink.delivered_messages)
            .sum(),
        reroutes: out.reroutes,
        peak_rss_bytes: peak_rss(),
        digest,
    })
}

fn child(exe: &std::path::Path, name: &str, queue: Queue) -> Result<Figures> {
    let q = match queue {
        Queue::Wheel => "wheel",
        Queue::Heap => "heap",
    };
    let out = std::process::Command::new(exe)
        .args(["bench", "sim", "--one", name, "--queue", q])
        .output()
        .with_context(|| format!("starting the bench child {}", exe.display()))?;
    if !out.status.success() {
        bail!(
            "{name} ({q}): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// `flitctl bench sim`.
pub fn run(args: BenchSimArgs) -> Result<()> {
    if let Some(name) = &args.one {
        let w = WORKLOADS
            .iter()
            .find(|w| w.name == name)
            .with_context(|| format!("no workload {name}"))?;
        println!("{}", serde_json::to_string(&run_one(w, args.queue)?)?);
        return Ok(());
    }
    let chosen: Vec<&Workload> = WORKLOADS
        .iter()
        .filter(|w| args.only.is_empty() || args.only.iter().any(|o| o == w.name))
        .collect();
    if chosen.is_empty() {
        bail!(
            "--only {}: no such workload (kary-4-2, kary-8-3, pgft-8640)",
            args.only.join(",")
        );
    }
    let me = std::env::current_exe()?;
    if let Some(b) = &args.baseline_bin {
        if !b.is_file() {
            bail!("--baseline-bin {}: no such file", b.display());
        }
    }
    let load_before = load_average();
    let mut rows = Vec::new();
    let mut differ = Vec::new();
    for w in chosen {
        let wheel = child(&me, w.name, Queue::Wheel)?;
        let base = match (&args.baseline_bin, args.no_baseline) {
            (_, true) => None,
            (Some(b), false) => Some(child(b, w.name, Queue::Wheel)?),
            (None, false) => Some(child(&me, w.name, Queue::Heap)?),
        };
        if let Some(h) = &base {
            if h.digest != wheel.digest {
                if args.baseline_bin.is_none() {
                    bail!(
                        "{}: the heap and the wheel gave different results ({} vs {}): the queue changed the simulation",
                        w.name,
                        h.digest,
                        wheel.digest
                    );
                }
                differ.push(w.name);
            }
        }
        rows.push((w, wheel, base));
    }
    let base_label = match &args.baseline_bin {
        Some(b) => format!("baseline: {}", b.display()),
        None => "baseline: binary-heap queue".into(),
    };
    let load_after = load_average();
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(w, a, b)| serde_json::json!({"workload": w.name, "what": w.what, "wheel": a, "baseline": b}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "load_average_before": load_before,
                "load_average_after": load_after,
                "baseline": base_label,
                "results_differ": differ,
                "workloads": v,
            }))?
        );
        return Ok(());
    }
    println!("flitctl bench sim (load average before {load_before}, after {load_after})");
    for (w, a, b) in &rows {
        let rate = |f: &Figures| f.flit_hops as f64 / f.run_s;
        println!("{}: {}", w.name, w.what);
        println!(
            "  wheel  {:>8.2} M flit-hops/s  {:>8.2} M events/s  {:>6.2} s for {:.1} ms emulated ({} flit hops, {} events)  build {:.2} s  peak RSS {:.0} MiB  {} re-routes  digest {}",
            rate(a) / 1e6,
            a.events as f64 / a.run_s / 1e6,
            a.run_s,
            a.emulated_ns as f64 / 1e6,
            a.flit_hops,
            a.events,
            a.build_s,
            a.peak_rss_bytes as f64 / (1u64 << 20) as f64,
            a.reroutes,
            a.digest
        );
        if let Some(b) = b {
            let same = if b.digest == a.digest {
                "same results".to_string()
            } else {
                format!("DIFFERENT results: digest {}", b.digest)
            };
            println!(
                "  base   {:>8.2} M flit-hops/s  {:>8.2} M events/s  {:>6.2} s  peak RSS {:.0} MiB  ({base_label}, {same})",
                rate(b) / 1e6,
                b.events as f64 / b.run_s / 1e6,
                b.run_s,
                b.peak_rss_bytes as f64 / (1u64 << 20) as f64
            );
            println!(
                "  ratio  {:.2}× the baseline's flit-hops/s",
                rate(a) / rate(b)
            );
        }
    }
    Ok(())
}

/// The simulator's speed on a fabric: flit hops per second of CPU (wall
/// time of this one thread), for `topo` under uniform traffic at `load`
/// with links at `params`' bandwidth, `duration_ns` of emulated time. The
/// compute limit the live data path is measured against
/// (`flitctl bench datapath`, transports).
pub fn flit_hops_per_s(
    topo: Topology,
    params: FabricParams,
    load: f64,
    duration_ns: u64,
) -> Result<f64> {
    let plan = Plan {
        reconfiguration: Reconfiguration::Live,
        spec: TrafficSpec {
            pattern: "uniform".into(),
            load,
            message_flits: 8,
            duration_ns,
            rounds: 1,
            seed: 1,
        },
        engine: "auto".into(),
        tables: None,
        reroute: false,
        mechanism: None,
        steps: Vec::new(),
        seed: 1,
        params,
        timing: TIMING,
        drain: false,
        topo,
    };
    let sim = Sim::new(&plan, None)?;
    let started = Instant::now();
    let out = sim.run(&BTreeSet::new())?;
    Ok(out.stats.flit_hops as f64 / started.elapsed().as_secs_f64().max(1e-9))
}
