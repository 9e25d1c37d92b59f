//! `flitctl bench datapath`: how fast the emulated data path is, always as a
//! ratio to something measured in the same run on the same machine.
//!
//! * **Socket ceiling.** A minimal UDP forwarder (the runtime's own
//!   `recvmmsg`→`sendmmsg` transport, no flits, no credits) between a
//!   blasting sender and a receiver on loopback: datagrams/s it moves.
//! * **One switchd.** Two real `hostd` processes around one `switchd` at
//!   full offered load: flits/s and datagrams/s the switch forwards, as a
//!   multiple of the ceiling (bundling puts many flits in one datagram).
//! * **Latency.** Message latency host→switch→host at 10/50/90 % of the
//!   switch's saturation rate, beside the baseline forwarder's datagram
//!   latency at the same datagram rate.
//! * **Fabric.** A 4-ary 2-tree under uniform traffic: accepted throughput
//!   as a fraction of the configured link bandwidth.
//! * **Scale.** Bring-up time and resident memory (VmRSS) per process of a
//!   4-ary 3-tree (112 processes) and an 8-ary 3-tree (704), and whether a
//!   low-load all-to-all delivers every message.
//!
//! * **Transports.** The same switchd forwarding measurement over UDP on
//!   loopback, shared-memory rings and (as root) raw Ethernet on veth
//!   pairs, alternated in the same run, beside the bare UDP forwarder: flits/s
//!   and CPU per flit at saturation, per-hop latency at 10/50/90 % load, the
//!   faithful capacity of a 4-ary 2-tree (shm and udp) beside the
//!   simulator's flit-hops/s, and a shm daemon's memory with its rings
//!   counted apart.
//!
//! Timer lateness (the emulation's dilation) comes from the daemons' event
//! loops, which add it to their `Report` answers.

use crate::bench_baseline::{baseline, baseline_ethernet, baseline_processes};
use crate::fabric::{Fabric, LaunchOptions};
use crate::parse::parse_duration;
use crate::report::{self, RunReport};
use crate::route::compute_routes;
use anyhow::{bail, Context, Result};
use clap::Args;
use flitnet_core::control::{
    DataTransport, FabricParams, HostDaemonReport, LatenessSummary, SwitchReport, SwitchingMode,
    TrafficSpec, TransportCounters,
};
use flitnet_core::host::histogram::Percentiles;
use flitnet_core::topology::{generators, FaultSet, NodeRef, Topology};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct DatapathArgs {
    /// Directory holding the `switchd` and `hostd` to measure (default: the
    /// one `flitctl` is in). Point it at an older build to compare.
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Length of each measurement window.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub window: Duration,
    /// Sections to run, comma separated: forwarding, latency, fabric,
    /// transports, scale.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "forwarding,latency,fabric,transports,scale"
    )]
    pub only: Vec<String>,
    /// Leave the 704-process 8-ary 3-tree out of the scale section.
    #[arg(long)]
    pub skip_large: bool,
    /// Print the results as JSON as well.
    #[arg(long)]
    pub json: bool,
    /// Directory for configs and logs (default: a fresh temp dir).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
}

/// Runs the benchmark and prints its results.
pub fn run_datapath(args: DatapathArgs) -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!("warning: flitctl is a debug build; benchmark a --release build");
    }
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("flitctl has no directory")?
            .to_path_buf(),
    };
    for b in ["switchd", "hostd"] {
        if !bin_dir.join(b).exists() {
            bail!("{}: no {b} there", bin_dir.display());
        }
    }
    // Private (one fabric's run directory per measurement inside it);
    // removed at the end either way.
    let run_dir = crate::rundir::create(args.run_dir.as_deref(), "bench", true)?.path;
    let b = Bench {
        bin_dir,
        run_dir,
        window: args.window,
        flitctl: std::env::current_exe().context("finding flitctl")?,
    };
    println!("load average before: {}", loadavg());
    let want = |s: &str| args.only.iter().any(|o| o == s);
    let mut out = json!({});
    let mut saturation = None;
    if want("forwarding") || want("latency") {
        let fwd = b.forwarding()?;
        saturation = Some(fwd.clone());
        out["forwarding"] = fwd.to_json();
    }
    if want("latency") {
        let sat = saturation.as_ref().expect("measured above");
        out["latency"] = b.latency(sat)?;
    }
    if want("fabric") {
        out["fabric"] = b.fabric_throughput()?;
    }
    if want("transports") {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            println!("   (the ethernet transport needs root: udp and shm only)");
        }
        out["transports"] = b.transports(root)?;
    }
    if want("scale") {
        let mut scale = vec![b.scale(4, 3)?];
        if !args.skip_large {
            scale.push(b.scale(8, 3)?);
        }
        out["scale"] = Value::Array(scale);
    }
    println!(
        "load average after: {} (other work on the machine skews every figure)",
        loadavg()
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    let _ = std::fs::remove_dir_all(&b.run_dir);
    Ok(())
}

struct Bench {
    bin_dir: PathBuf,
    run_dir: PathBuf,
    window: Duration,
    /// This `flitctl`, which plays the process baseline's roles.
    flitctl: PathBuf,
}

/// One measurement window of the 2-host, 1-switch fabric.
struct PairRun {
    flits_per_s: f64,
    datagrams_per_s: f64,
    /// Mean size of the datagrams the switch received.
    datagram_bytes: f64,
    /// switchd CPU time per flit it received in the window.
    cpu_ns_per_flit: f64,
    /// The switch's report at the end of the window.
    switch: SwitchReport,
    /// The hosts' reports after draining.
    hosts: Vec<HostDaemonReport>,
}

/// What one switchd forwarded at saturation, beside the socket ceiling.
#[derive(Clone, Debug)]
struct Forwarding {
    /// Most the switch forwarded with paced links (the latency runs pace).
    paced_flits_per_s: f64,
    switch_flits_per_s: f64,
    switch_datagrams_per_s: f64,
    mean_datagram_bytes: f64,
    baseline_datagrams_per_s: f64,
    /// The same forwarder with a process per role (the measured path's shape).
    process_baseline_datagrams_per_s: f64,
    /// CPU time (user + system) switchd's event loop spent per flit forwarded.
    switch_cpu_ns_per_flit: f64,
    /// CPU time the forwarder thread spent per datagram forwarded.
    baseline_cpu_ns_per_datagram: f64,
    lateness: LatenessSummary,
    transport: TransportCounters,
}

impl Forwarding {
    fn to_json(&self) -> Value {
        json!({
            "paced_saturation_flits_per_s": self.paced_flits_per_s,
            "switch_flits_per_s": self.switch_flits_per_s,
            "switch_datagrams_per_s": self.switch_datagrams_per_s,
            "flits_per_datagram": self.switch_flits_per_s / self.switch_datagrams_per_s.max(1.0),
            "mean_datagram_bytes": self.mean_datagram_bytes,
            "baseline_datagrams_per_s": self.baseline_datagrams_per_s,
            "flits_vs_baseline": self.switch_flits_per_s / self.baseline_datagrams_per_s.max(1.0),
            "process_baseline_datagrams_per_s": self.process_baseline_datagrams_per_s,
            "flits_vs_process_baseline": self.switch_flits_per_s / self.process_baseline_datagrams_per_s.max(1.0),
            "datagrams_vs_baseline": self.switch_datagrams_per_s / self.baseline_datagrams_per_s.max(1.0),
            "switch_cpu_ns_per_flit": self.switch_cpu_ns_per_flit,
            "baseline_cpu_ns_per_datagram": self.baseline_cpu_ns_per_datagram,
            "flits_vs_baseline_per_core": self.baseline_cpu_ns_per_datagram / self.switch_cpu_ns_per_flit.max(1e-3),
            "switch_timer_lateness": self.lateness,
            "switch_transport": self.transport,
        })
    }
}

/// What the switch received over all its ports: flits, datagrams, bytes.
fn received(report: &SwitchReport) -> (u64, u64, u64) {
    let ports = &report.counters.ports;
    (
        ports
            .iter()
            .flat_map(|p| &p.vcs)
            .map(|vc| vc.rx_flits)
            .sum(),
        ports.iter().map(|p| p.rx_datagrams).sum(),
        ports.iter().map(|p| p.rx_bytes).sum(),
    )
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

fn lateness_text(v: &LatenessSummary) -> String {
    format!(
        "p50 {:.1} us, p99 {:.1} us, max {:.1} us over {} timers",
        v.p50_ns as f64 / 1e3,
        v.p99_ns as f64 / 1e3,
        v.max_ns as f64 / 1e3,
        v.count
    )
}

impl Bench {
    fn launch(
        &self,
        topo: Topology,
        params: FabricParams,
        tag: &str,
    ) -> Result<(Fabric, Duration)> {
        let opts = LaunchOptions {
            params,
            subnet: None,
            run_dir: self.run_dir.join(tag),
            bin_dir: self.bin_dir.clone(),
            metrics: false,
            seed: 1,
            ready_timeout: Duration::from_secs(120),
            events_addr: None,
            token: crate::fabric::new_token(),
            netns: None,
            tun: None,
        };
        let started = Instant::now();
        let fabric = Fabric::launch(topo, &opts)?;
        let took = started.elapsed();
        let tables = compute_routes(&fabric.topo, "auto", &FaultSet::none())?;
        fabric.install_routes(&tables)?;
        Ok((fabric, took))
    }

    /// Two hosts around one switch, link pacing at `bandwidth` flits/s.
    fn pair_params(bandwidth: Option<u64>) -> FabricParams {
        FabricParams {
            vcs: 2,
            buffer_depth: 128,
            switching: SwitchingMode::Wormhole,
            bandwidth_flits_per_s: bandwidth,
            propagation_ns: 1_000,
            keepalive_interval_ns: 100_000_000,
            dead_after_ns: 2_000_000_000,
            mtu: 1400,
            flit_payload: 16,
            max_packet_flits: 8,
            recovery: Default::default(),
            transport: Default::default(),
            link_retrain_ns: flitnet_core::link::DEFAULT_RETRAIN_NS,
            head_of_queue_lifetime_ns: None,
            switch_latency: Default::default(),
            crossbar_speedup: 1,
            time_dilation: 1,
            sbrp_gap_recovery: true,
        }
    }

    fn traffic(pattern: &str, load: f64, duration: Duration) -> TrafficSpec {
        TrafficSpec {
            pattern: pattern.into(),
            load,
            message_flits: 8,
            duration_ns: duration.as_nanos() as u64,
            rounds: 1,
            seed: 7,
        }
    }

    fn switch_report(fabric: &Fabric) -> Result<SwitchReport> {
        let reports = fabric.switch_reports()?;
        Ok(reports.into_iter().next().context("no switch")?.1)
    }

    /// Runs the 2-host fabric at `load` of `bandwidth`; returns the switch
    /// rates over the measurement window and the hosts' reports after.
    fn pair_run(&self, bandwidth: Option<u64>, load: f64, tag: &str) -> Result<PairRun> {
        self.pair_run_on(DataTransport::Udp, bandwidth, load, tag)
    }

    fn pair_run_on(
        &self,
        transport: DataTransport,
        bandwidth: Option<u64>,
        load: f64,
        tag: &str,
    ) -> Result<PairRun> {
        let topo = generators::kary_ntree(2, 1)?;
        let mut params = Self::pair_params(bandwidth);
        params.transport = transport;
        let (fabric, _) = self.launch(topo, params, tag)?;
        let switch_pid = fabric
            .daemons
            .iter()
            .find(|d| matches!(d.node, NodeRef::Switch(_)))
            .map(|d| d.pid)
            .context("no switch process")?;
        let warmup = Duration::from_millis(500);
        fabric.start_traffic(&Self::traffic("uniform", load, warmup + self.window))?;
        std::thread::sleep(warmup);
        let (t0, r0) = (Instant::now(), Self::switch_report(&fabric)?);
        let cpu0 = pid_cpu_ns(switch_pid);
        std::thread::sleep(self.window);
        let r1 = Self::switch_report(&fabric)?;
        let cpu = pid_cpu_ns(switch_pid).saturating_sub(cpu0);
        let dt = t0.elapsed().as_secs_f64();
        let ((f0, d0, b0), (f1, d1, b1)) = (received(&r0), received(&r1));
        let (flits, dgrams, bytes) = ((f1 - f0) as f64, (d1 - d0) as f64, (b1 - b0) as f64);
        let run = PairRun {
            flits_per_s: flits / dt,
            datagrams_per_s: dgrams / dt,
            datagram_bytes: bytes / dgrams.max(1.0),
            cpu_ns_per_flit: cpu as f64 / flits.max(1.0),
            switch: r1,
            hosts: Vec::new(),
        };
        let hosts = report::drain(&fabric, Duration::from_secs(5))?;
        fabric.shutdown()?;
        Ok(PairRun {
            hosts: hosts.into_iter().map(|(_, r)| r).collect(),
            ..run
        })
    }

    fn forwarding(&self) -> Result<Forwarding> {
        println!("== forwarding: one switchd between two hostd vs a bare UDP forwarder");
        // Raise the link rate until the switch no longer keeps up with what
        // the hosts offer: pacing far above the machine's speed would only
        // make the hosts burn CPU on messages their full queues refuse.
        let mut best: Option<(u64, PairRun)> = None;
        // Paced links first: their saturation sets the latency section's rate.
        let mut bandwidth = 250_000u64;
        while bandwidth <= 16_000_000 {
            let run = self.pair_run(Some(bandwidth), 1.0, &format!("fwd{bandwidth}"))?;
            let flits = run.flits_per_s;
            println!("  (2 hosts offering {bandwidth} flits/s each: switch forwarded {flits:.0} flits/s, {:.1} flits/datagram)", flits / run.datagrams_per_s.max(1.0));
            let saturated = flits < 0.8 * 2.0 * bandwidth as f64;
            if best.as_ref().is_none_or(|b| flits > b.1.flits_per_s) {
                best = Some((bandwidth, run));
            }
            if saturated {
                break;
            }
            bandwidth *= 2;
        }
        let paced_flits_per_s = best.as_ref().map(|b| b.1.flits_per_s).unwrap_or(0.0);
        // Unpaced links (bandwidth None): the hosts offer 1 M flits/s each
        // and the switch sends as soon as credits allow, so bundling is
        // limited only by how many flits wait per event-loop round.
        let run = self.pair_run(None, 1.0, "fwd-unpaced")?;
        println!("  (unpaced links, hosts offering 1000000 flits/s each: switch forwarded {:.0} flits/s, {:.1} flits/datagram)", run.flits_per_s, run.flits_per_s / run.datagrams_per_s.max(1.0));
        if let Some((bw, b)) = &best {
            println!(
                "  paced saturation: {:.0} flits/s with links paced at {bw} flits/s",
                b.flits_per_s
            );
        }
        // The ratio always compares the unpaced run, where bundling is
        // largest and the switch's own cost shows: taking whichever run
        // was fastest made the figure jump between a 9-flit and a 50-flit
        // datagram size from one run to the next on a noisy machine.
        let (flits, dgrams, bytes, sw) = (
            run.flits_per_s,
            run.datagrams_per_s,
            run.datagram_bytes,
            run.switch,
        );
        let datagram = (bytes.round() as usize).clamp(32, 1400);
        let base = baseline(datagram, None, self.window)?;
        let procs = baseline_processes(&self.flitctl, datagram, None, self.window)?;
        let f = Forwarding {
            paced_flits_per_s,
            switch_flits_per_s: flits,
            switch_datagrams_per_s: dgrams,
            mean_datagram_bytes: bytes,
            baseline_datagrams_per_s: base.datagrams_per_s,
            process_baseline_datagrams_per_s: procs.datagrams_per_s,
            switch_cpu_ns_per_flit: run.cpu_ns_per_flit,
            baseline_cpu_ns_per_datagram: base.cpu_ns_per_datagram,
            lateness: sw.event_loop.timer_lateness.clone(),
            transport: sw.event_loop.transport.clone(),
        };
        println!(
            "  switchd:  {:>12.0} flits/s  {:>10.0} datagrams/s  ({:.1} flits/datagram, {:.0} B mean)",
            flits,
            dgrams,
            flits / dgrams.max(1.0),
            bytes
        );
        println!(
            "  baseline: {:>12} {:>10.0} datagrams/s  of {datagram} B (recvmmsg->sendmmsg forwarder)",
            "", base.datagrams_per_s
        );
        println!(
            "  ratio:    switchd flits/s = {:.2} x baseline datagrams/s; switchd datagrams/s = {:.2} x baseline",
            flits / base.datagrams_per_s.max(1.0),
            dgrams / base.datagrams_per_s.max(1.0)
        );
        println!(
            "  process baseline (one process per role, as hostd -> switchd -> hostd): {:.0} datagrams/s; switchd flits/s = {:.2} x",
            procs.datagrams_per_s,
            flits / procs.datagrams_per_s.max(1.0)
        );
        // Throughput ratios on a shared machine measure the scheduler as
        // much as the code (the bench's three threads and the three daemons
        // each get what the other work leaves). CPU time per unit of work
        // does not depend on how much CPU there was: this ratio is what one
        // switchd would forward per forwarder datagram with a core each.
        println!(
            "  cpu:      switchd {:.0} ns per flit; baseline {:.0} ns per datagram -> per-core ratio {:.2} x",
            f.switch_cpu_ns_per_flit,
            f.baseline_cpu_ns_per_datagram,
            f.baseline_cpu_ns_per_datagram / f.switch_cpu_ns_per_flit.max(1e-3)
        );
        println!("  switchd timer lateness: {}", lateness_text(&f.lateness));
        let t = &f.transport;
        let per = |a: u64, b: u64| a as f64 / (b as f64).max(1.0);
        println!(
            "  switchd datagrams per syscall: rx {:.2}, tx {:.2}",
            per(t.rx_datagrams, t.rx_syscalls),
            per(t.tx_datagrams, t.tx_syscalls)
        );
        Ok(f)
    }

    fn latency(&self, sat: &Forwarding) -> Result<Value> {
        println!("== latency: message host->switchd->host vs datagram sender->forwarder->receiver");
        // Paced links (the emulated link model) at 10/50/90 % of the paced
        // saturation: each host's link is paced at half of it. Paced links
        // bundle fewer flits per datagram (one wake-up per few tokens), so
        // the saturation that matters there is the paced one.
        let per_host = (sat.paced_flits_per_s / 2.0).max(1_000.0) as u64;
        println!("  paced links at {per_host} flits/s (half the paced saturation rate):");
        let mut rows = Vec::new();
        for load in [0.1, 0.5, 0.9] {
            rows.push(self.latency_row(sat, Some(per_host), load, load)?);
        }
        // Unpaced links at 10/50/90 % of the unpaced saturation: no link
        // model (no serialisation, no pacing quantum, no token burst), so
        // what is left is the data path itself, as in the baseline. Hosts
        // offer `load × 1 M flits/s` on an unpaced link (hostd), hence the
        // conversion.
        let unpaced_per_host = sat.switch_flits_per_s / 2.0;
        println!(
            "  unpaced links (the data path alone; {unpaced_per_host:.0} flits/s per host = its saturation):"
        );
        for fraction in [0.1, 0.5, 0.9] {
            let load = (fraction * unpaced_per_host / 1e6).clamp(0.001, 1.0);
            rows.push(self.latency_row(sat, None, load, fraction)?);
        }
        Ok(Value::Array(rows))
    }

    /// One latency measurement: the pair at `load` (the hosts' offered
    /// load) over links paced at `bandwidth` (None: unpaced), against the
    /// baseline forwarder at the datagram rate the switch saw. `fraction`
    /// is the share of saturation it stands for, for the printout.
    fn latency_row(
        &self,
        sat: &Forwarding,
        bandwidth: Option<u64>,
        load: f64,
        fraction: f64,
    ) -> Result<Value> {
        let tag = format!(
            "lat{}-{}",
            (fraction * 100.0) as u32,
            if bandwidth.is_some() {
                "paced"
            } else {
                "unpaced"
            }
        );
        let run = self.pair_run(bandwidth, load, &tag)?;
        let (flits, dgrams, sw, hosts) =
            (run.flits_per_s, run.datagrams_per_s, run.switch, run.hosts);
        let p = |q: &dyn Fn(&Percentiles) -> u64| {
            hosts
                .iter()
                .map(|h| q(&h.endpoint.latency_ns) as f64)
                .fold(0.0, f64::max)
        };
        let (p50, p99) = (p(&|l| l.p50), p(&|l| l.p99));
        let size = sat.mean_datagram_bytes.round().clamp(32.0, 1400.0) as usize;
        let rate = Some(dgrams.max(100.0));
        let base = baseline(size, rate, self.window)?;
        // The same path as the switch's: sender, forwarder and receiver
        // each a process, so each hop costs a process switch as it does
        // between hostd, switchd and hostd.
        let procs = baseline_processes(&self.flitctl, size, rate, self.window)?;
        if base.p50_ns == 0.0 {
            println!(
                "  {:>3.0} % load: the baseline receiver got nothing (starved by other work); no ratio",
                fraction * 100.0
            );
        }
        // What the emulation itself must add at zero load: two propagation
        // delays, plus serialisation of whatever part of an 8-flit message
        // exceeds the links' 16-flit token burst (none).
        let ideal_ns = 2.0 * 1_000.0;
        println!(
            "  {:>3.0} % load ({:.0} flits/s, {:.0} datagrams/s): switchd p50 {:.1} us p99 {:.1} us (emulated ideal {:.1} us, p50 overhead {:.1} us) | baseline p50 {:.1} us p99 {:.1} us | p50 ratio {:.2}, overhead/baseline {:.2}",
            fraction * 100.0,
            flits,
            dgrams,
            p50 / 1e3,
            p99 / 1e3,
            ideal_ns / 1e3,
            (p50 - ideal_ns) / 1e3,
            base.p50_ns / 1e3,
            base.p99_ns / 1e3,
            p50 / base.p50_ns.max(1.0),
            (p50 - ideal_ns) / base.p50_ns.max(1.0)
        );
        println!(
            "        process baseline p50 {:.1} us p99 {:.1} us | p50 ratio {:.2}",
            procs.p50_ns / 1e3,
            procs.p99_ns / 1e3,
            p50 / procs.p50_ns.max(1.0)
        );
        println!(
            "        switchd timer lateness: {}",
            lateness_text(&sw.event_loop.timer_lateness)
        );
        Ok(json!({
            "links": if bandwidth.is_some() { "paced" } else { "unpaced" },
            "link_flits_per_s": bandwidth,
            "load": fraction, "flits_per_s": flits, "datagrams_per_s": dgrams,
            "switch_p50_ns": p50, "switch_p99_ns": p99,
            "baseline_p50_ns": base.p50_ns, "baseline_p99_ns": base.p99_ns,
            "p50_ratio": p50 / base.p50_ns.max(1.0),
            "process_baseline_p50_ns": procs.p50_ns, "process_baseline_p99_ns": procs.p99_ns,
            "p50_ratio_vs_process_baseline": p50 / procs.p50_ns.max(1.0),
            "emulated_ideal_ns": ideal_ns,
            "switch_timer_lateness": sw.event_loop.timer_lateness,
        }))
    }

    fn fabric_throughput(&self) -> Result<Value> {
        println!("== fabric: 4-ary 2-tree, uniform traffic at full offered load");
        // A rate the machine can emulate faithfully, and the default of the
        // data-plane tests: when the fabric needs more CPU than there is,
        // the second figure shows it.
        let mut rows = Vec::new();
        for bandwidth in [5_000u64, 50_000] {
            rows.push(self.fabric_at(bandwidth)?);
        }
        Ok(Value::Array(rows))
    }

    fn fabric_at(&self, bandwidth: u64) -> Result<Value> {
        self.fabric_at_on(DataTransport::Udp, bandwidth)
    }

    fn fabric_at_on(&self, transport: DataTransport, bandwidth: u64) -> Result<Value> {
        let topo = generators::kary_ntree(4, 2)?;
        let hosts = topo.num_hosts();
        let mut params = Self::pair_params(Some(bandwidth));
        params.buffer_depth = 16;
        params.propagation_ns = 10_000;
        params.transport = transport;
        let tag = format!("fabric{bandwidth}-{}", transport.name());
        let (fabric, took) = self.launch(topo.clone(), params, &tag)?;
        let duration = Duration::from_secs(3).max(self.window);
        let spec = Self::traffic("uniform", 1.0, duration);
        fabric.start_traffic(&spec)?;
        std::thread::sleep(duration);
        let reports = report::drain(&fabric, Duration::from_secs(5))?;
        let switches = fabric.switch_reports()?;
        let lateness: Vec<f64> = switches
            .iter()
            .map(|(_, r)| r.event_loop.timer_lateness.p99_ns as f64)
            .collect();
        let run = RunReport::build(&topo, "auto", &spec, reports, switches, vec![], took);
        fabric.shutdown()?;
        let fraction = run.accepted_flits_per_s / (hosts as f64 * bandwidth as f64);
        let worst_lateness = lateness.iter().cloned().fold(0.0, f64::max);
        println!(
            "  {} links at {bandwidth} flits/s: accepted {:.0} flits/s over {hosts} hosts = {} of link bandwidth; lossless: {}; worst switch timer p99 lateness {:.1} us",
            transport.name(),
            run.accepted_flits_per_s,
            pct(fraction),
            run.lossless,
            worst_lateness / 1e3
        );
        Ok(json!({
            "transport": transport.name(),
            "link_flits_per_s": bandwidth,
            "accepted_flits_per_s": run.accepted_flits_per_s,
            "fraction_of_link_bandwidth": fraction,
            "lossless": run.lossless,
            "latency": run.latency,
            "worst_switch_lateness_p99_ns": worst_lateness,
        }))
    }

    /// The transports against each other, alternated so that each sees
    /// the same machine: UDP on loopback, shared-memory rings and (as root)
    /// raw Ethernet on veth pairs. One switchd forwarding unpaced (best of
    /// two runs each) with its CPU per flit, beside the bare UDP forwarder;
    /// per-hop latency at 10/50/90 % load; the faithful capacity of a 4-ary
    /// 2-tree beside the simulator's flit-hops/s; a shm daemon's memory.
    fn transports(&self, ethernet: bool) -> Result<Value> {
        let mut all = vec![DataTransport::Udp, DataTransport::Shm];
        if ethernet {
            all.push(DataTransport::Ethernet);
        }
        let names: Vec<&str> = all.iter().map(|t| t.name()).collect();
        println!(
            "== transports: {} (one switchd at saturation, per-hop latency, faithful 4-ary 2-tree capacity)",
            names.join(" vs ")
        );
        #[derive(Clone, Default)]
        struct Best {
            flits: f64,
            dgrams: f64,
            bytes: f64,
            cpu_ns_per_flit: f64,
            counters: TransportCounters,
        }
        let mut best = vec![Best::default(); all.len()];
        for round in 0..2 {
            for (i, &t) in all.iter().enumerate() {
                let run = self.pair_run_on(t, None, 1.0, &format!("tr-{}-{round}", t.name()))?;
                println!(
                    "  ({} round {round}: switchd forwarded {:.0} flits/s, {:.0} datagrams/s, {:.0} ns CPU per flit)",
                    t.name(),
                    run.flits_per_s,
                    run.datagrams_per_s,
                    run.cpu_ns_per_flit
                );
                if run.flits_per_s > best[i].flits {
                    best[i] = Best {
                        flits: run.flits_per_s,
                        dgrams: run.datagrams_per_s,
                        bytes: run.datagram_bytes,
                        cpu_ns_per_flit: run.cpu_ns_per_flit,
                        counters: run.switch.event_loop.transport.clone(),
                    };
                }
            }
        }
        let datagram = (best[0].bytes.round() as usize).clamp(32, 1400);
        let base_udp = baseline(datagram, None, self.window)?;
        let base_eth = if ethernet {
            Some(baseline_ethernet(datagram, self.window)?)
        } else {
            None
        };
        let ratio = |a: f64, b: f64| a / b.max(1e-9);
        let mut rows = Vec::new();
        for (i, &t) in all.iter().enumerate() {
            let b = &best[i];
            let c = &b.counters;
            println!(
                "  {:<8} switchd {:>10.0} flits/s {:>9.0} datagrams/s ({:.1} flits/datagram, {:.0} B), {:.0} ns CPU per flit, {:.3} send syscalls per datagram",
                t.name(),
                b.flits,
                b.dgrams,
                b.flits / b.dgrams.max(1.0),
                b.bytes,
                b.cpu_ns_per_flit,
                ratio(c.tx_syscalls as f64, c.tx_datagrams as f64)
            );
            rows.push(json!({
                "transport": t.name(),
                "switch_flits_per_s": b.flits,
                "switch_datagrams_per_s": b.dgrams,
                "mean_datagram_bytes": b.bytes,
                "switch_cpu_ns_per_flit": b.cpu_ns_per_flit,
                "switch_transport": c,
            }));
        }
        println!(
            "  bare UDP forwarder {:>9.0} datagrams/s of {datagram} B, {:.0} ns CPU per datagram{}",
            base_udp.datagrams_per_s,
            base_udp.cpu_ns_per_datagram,
            base_eth
                .as_ref()
                .map(|e| format!(
                    "; bare ethernet forwarder {:.0} datagrams/s",
                    e.datagrams_per_s
                ))
                .unwrap_or_default()
        );
        let shm_vs_udp = ratio(best[1].flits, best[0].flits);
        let shm_vs_bare = ratio(best[1].flits, base_udp.datagrams_per_s);
        let cpu_udp_vs_shm = ratio(best[0].cpu_ns_per_flit, best[1].cpu_ns_per_flit);
        println!(
            "  ratio shm/udp: switchd flits/s {shm_vs_udp:.2}; shm switchd flits/s / bare UDP forwarder datagrams/s {shm_vs_bare:.2}; CPU per flit udp/shm {cpu_udp_vs_shm:.2}"
        );
        // Per-hop latency: unpaced links (the data path alone), both
        // transports offered the same rate, 10/50/90 % of UDP's saturation.
        let per_host = best[0].flits / 2.0;
        let mut latency = Vec::new();
        for fraction in [0.1, 0.5, 0.9] {
            let load = (fraction * per_host / 1e6).clamp(0.001, 1.0);
            let mut row = json!({ "load": fraction });
            let mut dgrams_udp = 100.0;
            let mut p50s = [0.0; 2];
            for (i, t) in [DataTransport::Udp, DataTransport::Shm]
                .into_iter()
                .enumerate()
            {
                let tag = format!("trlat{}-{}", (fraction * 100.0) as u32, t.name());
                let run = self.pair_run_on(t, None, load, &tag)?;
                let p = |q: &dyn Fn(&Percentiles) -> u64| {
                    run.hosts
                        .iter()
                        .map(|h| q(&h.endpoint.latency_ns) as f64)
                        .fold(0.0, f64::max)
                };
                // host -> switch -> host: two hops.
                let (p50, p99) = (p(&|l| l.p50) / 2.0, p(&|l| l.p99) / 2.0);
                p50s[i] = p50;
                if i == 0 {
                    dgrams_udp = run.datagrams_per_s.max(100.0);
                }
                row[t.name()] = json!({ "per_hop_p50_ns": p50, "per_hop_p99_ns": p99,
                    "flits_per_s": run.flits_per_s });
            }
            let base = baseline(datagram, Some(dgrams_udp), self.window)?;
            // sender -> forwarder -> receiver: two hops as well.
            let base_hop = base.p50_ns / 2.0;
            row["bare_udp_forwarder_per_hop_p50_ns"] = json!(base_hop);
            row["shm_p50_vs_bare_udp"] = json!(ratio(p50s[1], base_hop));
            row["shm_p50_vs_udp"] = json!(ratio(p50s[1], p50s[0]));
            println!(
                "  {:>3.0} % load: per hop p50/p99 shm {:.1}/{:.1} us, udp {:.1}/{:.1} us; bare UDP forwarder p50 {:.1} us per hop; shm p50 = {:.2} x udp, {:.2} x bare forwarder",
                fraction * 100.0,
                row["shm"]["per_hop_p50_ns"].as_f64().unwrap_or(0.0) / 1e3,
                row["shm"]["per_hop_p99_ns"].as_f64().unwrap_or(0.0) / 1e3,
                row["udp"]["per_hop_p50_ns"].as_f64().unwrap_or(0.0) / 1e3,
                row["udp"]["per_hop_p99_ns"].as_f64().unwrap_or(0.0) / 1e3,
                base_hop / 1e3,
                ratio(p50s[1], p50s[0]),
                ratio(p50s[1], base_hop)
            );
            latency.push(row);
        }
        let mut capacity = Vec::new();
        for t in [DataTransport::Udp, DataTransport::Shm] {
            capacity.push(self.faithful_capacity(t)?);
        }
        let cap = |i: usize| capacity[i]["capacity_flits_per_s"].as_f64().unwrap_or(0.0);
        let capacity_ratio = ratio(cap(1), cap(0));
        println!("  ratio shm/udp: faithful 4-ary 2-tree capacity {capacity_ratio:.2}");
        let mut fabric = Vec::new();
        if ethernet {
            for t in [DataTransport::Udp, DataTransport::Ethernet] {
                fabric.push(self.fabric_at_on(t, 50_000)?);
            }
        }
        Ok(json!({
            "forwarding": rows,
            "bare_udp_forwarder": { "datagrams_per_s": base_udp.datagrams_per_s,
                "cpu_ns_per_datagram": base_udp.cpu_ns_per_datagram, "datagram_bytes": datagram },
            "bare_ethernet_forwarder_datagrams_per_s": base_eth.as_ref().map(|e| e.datagrams_per_s),
            "switch_flits_ratio_shm_udp": shm_vs_udp,
            "switch_cpu_per_flit_ratio_udp_shm": cpu_udp_vs_shm,
            "latency": latency,
            "capacity": capacity,
            "capacity_ratio_shm_udp": capacity_ratio,
            "fabric_udp_ethernet": fabric,
        }))
    }

    /// The highest aggregate flits/s a 4-ary 2-tree carries over
    /// `transport` at time dilation 1 while the fidelity verdict says
    /// faithful: uniform traffic at half the link bandwidth, the link rate
    /// doubled until a run is no longer faithful. Beside it, the
    /// simulator's flit-hops/s on the same fabric at the last rate, and
    /// (shm) a daemon's resident memory with the ring memory apart.
    fn faithful_capacity(&self, transport: DataTransport) -> Result<Value> {
        let topo = generators::kary_ntree(4, 2)?;
        let load = 0.5;
        let mut best: Option<(u64, f64)> = None;
        let mut memory = Value::Null;
        let mut steps = Vec::new();
        let mut bandwidth = 2_500u64;
        while bandwidth <= 2_560_000 {
            let mut params = Self::pair_params(Some(bandwidth));
            params.buffer_depth = 16;
            params.propagation_ns = 10_000;
            params.transport = transport;
            let tag = format!("cap{bandwidth}-{}", transport.name());
            let ring_bytes = crate::shmnet::ShmNet::link_file_bytes(&params);
            let (fabric, took) = self.launch(topo.clone(), params.clone(), &tag)?;
            let duration = Duration::from_secs(2).max(self.window);
            let spec = Self::traffic("uniform", load, duration);
            fabric.start_traffic(&spec)?;
            std::thread::sleep(duration / 2);
            let mem: Vec<(bool, [u64; 4])> = fabric
                .daemons
                .iter()
                .map(|d| (matches!(d.node, NodeRef::Switch(_)), memory_kib(d.pid)))
                .collect();
            std::thread::sleep(duration - duration / 2);
            let reports = report::drain(&fabric, Duration::from_secs(5))?;
            let switches = fabric.switch_reports()?;
            let fidelity = crate::fidelity::judge(
                &crate::fidelity::Context {
                    topo: &topo,
                    params: &params,
                    load,
                    hosts_offering: topo.num_hosts(),
                    dilation_source: "bench".into(),
                },
                &reports,
                &switches,
            );
            let run = RunReport::build(&topo, "auto", &spec, reports, switches, vec![], took);
            fabric.shutdown()?;
            let faithful = fidelity.verdict == Some(crate::fidelity::Verdict::Faithful);
            let verdict = fidelity.verdict.map_or("unknown", |v| v.name());
            println!(
                "  ({} links at {bandwidth} flits/s, load {load}: accepted {:.0} flits/s, {verdict})",
                transport.name(),
                run.accepted_flits_per_s
            );
            steps.push(json!({ "link_flits_per_s": bandwidth,
                "accepted_flits_per_s": run.accepted_flits_per_s, "verdict": verdict,
                "reason": fidelity.reason }));
            if !faithful {
                break;
            }
            if best.is_none_or(|b| run.accepted_flits_per_s > b.1) {
                best = Some((bandwidth, run.accepted_flits_per_s));
            }
            let max = |switch: bool, k: usize| {
                mem.iter()
                    .filter(|m| m.0 == switch)
                    .map(|m| m.1[k])
                    .max()
                    .unwrap_or(0)
            };
            memory = json!({
                "switchd_rss_kib_max": max(true, 0), "switchd_rss_anon_kib_max": max(true, 1),
                "switchd_rss_shmem_kib_max": max(true, 3),
                "hostd_rss_kib_max": max(false, 0), "hostd_rss_anon_kib_max": max(false, 1),
                "hostd_rss_shmem_kib_max": max(false, 3),
                "ring_bytes_per_link": ring_bytes,
            });
            bandwidth *= 2;
        }
        let (bw, capacity) = best.unwrap_or((0, 0.0));
        let sim = if bw > 0 {
            let mut params = Self::pair_params(Some(bw));
            params.buffer_depth = 16;
            params.propagation_ns = 10_000;
            crate::bench_sim::flit_hops_per_s(topo.clone(), params, load, 500_000_000)?
        } else {
            0.0
        };
        println!(
            "  {:<8} faithful capacity {:.0} flits/s (links at {bw} flits/s); simulator {:.0} flit-hops/s on the same fabric",
            transport.name(),
            capacity,
            sim
        );
        if transport == DataTransport::Shm && !memory.is_null() {
            println!(
                "  shm memory: switchd VmRSS {} KiB (private {} KiB, shared-memory pages {} KiB), hostd VmRSS {} KiB (private {} KiB, shared {} KiB); rings {} KiB per link (two rings)",
                memory["switchd_rss_kib_max"],
                memory["switchd_rss_anon_kib_max"],
                memory["switchd_rss_shmem_kib_max"],
                memory["hostd_rss_kib_max"],
                memory["hostd_rss_anon_kib_max"],
                memory["hostd_rss_shmem_kib_max"],
                memory["ring_bytes_per_link"].as_u64().unwrap_or(0) / 1024
            );
        }
        Ok(json!({
            "transport": transport.name(),
            "capacity_flits_per_s": capacity,
            "link_flits_per_s": bw,
            "load": load,
            "simulator_flit_hops_per_s": sim,
            "steps": steps,
            "memory": memory,
        }))
    }

    fn scale(&self, k: u32, n: u32) -> Result<Value> {
        let topo = generators::kary_ntree(k, n)?;
        let procs = topo.num_hosts() + topo.num_switches();
        println!("== scale: {k}-ary {n}-tree, {procs} processes");
        let params = FabricParams {
            vcs: 2,
            buffer_depth: 16,
            switching: SwitchingMode::Wormhole,
            bandwidth_flits_per_s: Some(100_000),
            propagation_ns: 10_000,
            // Idle daemons must cost next to nothing: two keepalives a second.
            keepalive_interval_ns: 500_000_000,
            dead_after_ns: 5_000_000_000,
            mtu: 1400,
            flit_payload: 16,
            max_packet_flits: 8,
            recovery: Default::default(),
            transport: Default::default(),
            link_retrain_ns: flitnet_core::link::DEFAULT_RETRAIN_NS,
            head_of_queue_lifetime_ns: None,
            switch_latency: Default::default(),
            crossbar_speedup: 1,
            time_dilation: 1,
            sbrp_gap_recovery: true,
        };
        let (fabric, took) = self.launch(topo.clone(), params, &format!("scale-{k}-{n}"))?;
        let (cpu0, t0) = (cpu_ns(&fabric), Instant::now());
        std::thread::sleep(Duration::from_secs(2));
        let idle_cpu = cpu_ns(&fabric).saturating_sub(cpu0) as f64 / t0.elapsed().as_nanos() as f64;
        let rss: Vec<(bool, [u64; 3])> = fabric
            .daemons
            .iter()
            .map(|d| (matches!(d.node, NodeRef::Switch(_)), rss_kib(d.pid)))
            .collect();
        let stat = |switch: bool, k: usize| {
            let v: Vec<u64> = rss
                .iter()
                .filter(|r| r.0 == switch)
                .map(|r| r.1[k])
                .collect();
            let max = v.iter().copied().max().unwrap_or(0);
            let mean = v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
            (max, mean)
        };
        let (sw_max, sw_mean) = stat(true, 0);
        let (h_max, h_mean) = stat(false, 0);
        let (sw_anon, _) = stat(true, 1);
        let (h_anon, _) = stat(false, 1);
        let (sw_pss, _) = stat(true, 2);
        let (h_pss, _) = stat(false, 2);
        let hosts = topo.num_hosts() as u64;
        // One flit per message and a low rate: every pair exactly once,
        // without loading 2 cores with hundreds of busy processes.
        let per_host_flits_per_s = if hosts > 100 { 50.0 } else { 100.0 };
        let expected = hosts * (hosts - 1);
        let mut spec = Self::traffic(
            "all-to-all",
            per_host_flits_per_s / 100_000.0,
            Duration::ZERO,
        );
        spec.message_flits = 1;
        // The sources stop by themselves after the last destination; the
        // duration only bounds a run the machine cannot keep up with.
        let nominal = (hosts - 1) as f64 / per_host_flits_per_s;
        let budget = Duration::from_secs_f64(nominal * 6.0 + 10.0);
        spec.duration_ns = budget.as_nanos() as u64;
        let started = Instant::now();
        fabric.start_traffic(&spec)?;
        std::thread::sleep(Duration::from_secs_f64(nominal));
        while started.elapsed() < budget {
            let delivered: u64 = fabric
                .host_reports()?
                .iter()
                .map(|(_, r)| r.endpoint.sink.delivered_messages)
                .sum();
            if delivered >= expected {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        let all_to_all_s = started.elapsed().as_secs_f64();
        println!(
            "  all-to-all took {all_to_all_s:.1} s (nominal {nominal:.1} s at the offered rate)"
        );
        let reports = report::drain(&fabric, Duration::from_secs(30))?;
        let switches = fabric.switch_reports()?;
        let run = RunReport::build(&topo, "auto", &spec, reports, switches, vec![], took);
        fabric.shutdown()?;
        let delivered_all = run.lossless && run.totals.messages_delivered == expected;
        println!(
            "  bring-up {:.2} s; VmRSS switchd max {:.2} MiB (mean {:.2}), hostd max {:.2} MiB (mean {:.2}); idle CPU {:.2} cores for {procs} processes",
            took.as_secs_f64(),
            sw_max as f64 / 1024.0,
            sw_mean / 1024.0,
            h_max as f64 / 1024.0,
            h_mean / 1024.0,
            idle_cpu
        );
        println!(
            "  private (RssAnon) max: switchd {:.2} MiB, hostd {:.2} MiB; Pss max: switchd {:.2} MiB, hostd {:.2} MiB",
            sw_anon as f64 / 1024.0,
            h_anon as f64 / 1024.0,
            sw_pss as f64 / 1024.0,
            h_pss as f64 / 1024.0
        );
        println!(
            "  all-to-all (1 flit, {per_host_flits_per_s} flits/s per host): delivered {}/{expected}, lossless {} -> {}",
            run.totals.messages_delivered,
            run.lossless,
            if delivered_all { "OK" } else { "FAILED" }
        );
        Ok(json!({
            "k": k, "n": n, "processes": procs, "bring_up_s": took.as_secs_f64(),
            "switchd_rss_kib_max": sw_max, "switchd_rss_kib_mean": sw_mean,
            "hostd_rss_kib_max": h_max, "hostd_rss_kib_mean": h_mean,
            "switchd_rss_anon_kib_max": sw_anon, "hostd_rss_anon_kib_max": h_anon,
            "switchd_pss_kib_max": sw_pss, "hostd_pss_kib_max": h_pss,
            "idle_cpu_cores": idle_cpu,
            "all_to_all_expected": expected, "all_to_all_delivered": run.totals.messages_delivered,
            "lossless": run.lossless, "delivered_all": delivered_all,
        }))
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A `Field:   N kB` line of a /proc file, in KiB (0 if absent).
fn proc_kib(path: &str, field: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resident memory of a process in KiB: VmRSS (shared text counted in
/// full), RssAnon (its private heap and stacks) and Pss (shared pages
/// divided among the processes mapping them).
fn rss_kib(pid: u32) -> [u64; 3] {
    [
        proc_kib(&format!("/proc/{pid}/status"), "VmRSS:"),
        proc_kib(&format!("/proc/{pid}/status"), "RssAnon:"),
        proc_kib(&format!("/proc/{pid}/smaps_rollup"), "Pss:"),
    ]
}

/// VmRSS, RssAnon, Pss and RssShmem (shared-memory pages mapped: the
/// shm transport's rings) of a process, in KiB.
fn memory_kib(pid: u32) -> [u64; 4] {
    let [rss, anon, pss] = rss_kib(pid);
    [
        rss,
        anon,
        pss,
        proc_kib(&format!("/proc/{pid}/status"), "RssShmem:"),
    ]
}

/// CPU time of a process's main thread (a daemon's event loop; its control
/// thread only wakes for requests), in ns; 0 if it is gone.
fn pid_cpu_ns(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU time of every daemon of `fabric`, in ns (from /proc/PID/schedstat,
/// which counts nanoseconds where /proc/PID/stat counts 10 ms ticks).
fn cpu_ns(fabric: &Fabric) -> u64 {
    fabric.daemons.iter().map(|d| pid_cpu_ns(d.pid)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_of_this_process_is_read() {
        let [rss, anon, pss] = rss_kib(std::process::id());
        assert!(
            rss > 0 && anon > 0 && anon <= rss && pss > 0,
            "{rss} {anon} {pss}"
        );
        assert_eq!(rss_kib(u32::MAX)[0], 0);
    }
}
