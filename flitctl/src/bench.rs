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
//! * **Transports.** The same switchd forwarding measurement (and the bare
//!   forwarder, and the 4-ary 2-tree) over UDP on loopback and over raw
//!   Ethernet on veth pairs in a network namespace, alternated in the same
//!   run, as ethernet/udp ratios (needs root).
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
    DataTransport, FabricParams, HostDaemonReport, SwitchReport, SwitchingMode, TimerLateness,
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
        if unsafe { libc::geteuid() } == 0 {
            out["transports"] = b.transports()?;
        } else {
            println!("== transports: skipped (the ethernet transport needs root)");
        }
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
    lateness: TimerLateness,
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

fn lateness_text(v: &TimerLateness) -> String {
    format!(
        "p50 {:.1} us, p99 {:.1} us, max {:.1} us over {} timers",
        v.p50_ns as f64 / 1e3,
        v.p99_ns as f64 / 1e3,
        v.max_ns as f64 / 1e3,
        v.timers
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

    /// UDP on loopback against raw Ethernet on veth pairs, alternated so
    /// that both see the same machine: one switchd forwarding unpaced
    /// (best of two runs each), the bare forwarders, and a 4-ary 2-tree.
    fn transports(&self) -> Result<Value> {
        println!("== transports: udp (loopback) vs ethernet (AF_PACKET on veth pairs)");
        let both = [DataTransport::Udp, DataTransport::Ethernet];
        let mut best: [(f64, f64, f64, TransportCounters); 2] =
            std::array::from_fn(|_| (0.0, 0.0, 0.0, TransportCounters::default()));
        for round in 0..2 {
            for (i, &t) in both.iter().enumerate() {
                let run = self.pair_run_on(t, None, 1.0, &format!("tr-{}-{round}", t.name()))?;
                let (flits, dgrams, bytes, sw) = (
                    run.flits_per_s,
                    run.datagrams_per_s,
                    run.datagram_bytes,
                    run.switch,
                );
                println!(
                    "  ({} round {round}: switchd forwarded {flits:.0} flits/s, {dgrams:.0} frames/s)",
                    t.name()
                );
                if flits > best[i].0 {
                    best[i] = (flits, dgrams, bytes, sw.event_loop.transport.clone());
                }
            }
        }
        let datagram = (best[0].2.round() as usize).clamp(32, 1400);
        let base_udp = baseline(datagram, None, self.window)?;
        let base_eth = baseline_ethernet(datagram, self.window)?;
        let mut rows = Vec::new();
        for (i, &t) in both.iter().enumerate() {
            let (flits, dgrams, bytes, tr) = &best[i];
            let base = if i == 0 { &base_udp } else { &base_eth };
            println!(
                "  {:<8} switchd {:>10.0} flits/s {:>9.0} datagrams/s ({:.1} flits/datagram, {:.0} B) | bare forwarder {:>9.0} datagrams/s of {datagram} B",
                t.name(),
                flits,
                dgrams,
                flits / dgrams.max(1.0),
                bytes,
                base.datagrams_per_s
            );
            rows.push(json!({
                "transport": t.name(),
                "switch_flits_per_s": flits,
                "switch_datagrams_per_s": dgrams,
                "mean_datagram_bytes": bytes,
                "baseline_datagrams_per_s": base.datagrams_per_s,
                "switch_transport": tr,
            }));
        }
        let ratio = |a: f64, b: f64| a / b.max(1.0);
        let switch_ratio = ratio(best[1].0, best[0].0);
        let base_ratio = ratio(base_eth.datagrams_per_s, base_udp.datagrams_per_s);
        println!(
            "  ratio ethernet/udp: switchd flits/s {switch_ratio:.2}, bare forwarder datagrams/s {base_ratio:.2}"
        );
        let mut fabric = Vec::new();
        for t in both {
            fabric.push(self.fabric_at_on(t, 50_000)?);
        }
        let accepted = |i: usize| fabric[i]["accepted_flits_per_s"].as_f64().unwrap_or(0.0);
        let fabric_ratio = ratio(accepted(1), accepted(0));
        println!("  ratio ethernet/udp: 4-ary 2-tree accepted flits/s {fabric_ratio:.2}");
        Ok(json!({
            "forwarding": rows,
            "switch_flits_ratio": switch_ratio,
            "baseline_ratio": base_ratio,
            "fabric": fabric,
            "fabric_ratio": fabric_ratio,
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
