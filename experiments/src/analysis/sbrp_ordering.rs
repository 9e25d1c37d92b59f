//! Seed 003 §6.3/§6.4: the corrupted-message latency orderings of SBRP-0,
//! SBRP-1 and SBRP-2 (Figs 80 and 82: SBRP-1 < SBRP-0 < SBRP-2 at ML 8,
//! SBRP-1 < SBRP-2 < SBRP-0 at ML 128), measured in the deterministic
//! simulator ([`flitnet_core::sim`]) in the thesis's own setting as far as the
//! digest gives it, with many paired samples.
//!
//! The setting (docs/sbrp.md, "The ordering in the simulator"):
//! - **ticks**: one cycle = one flit time on a link (50 Mflit/s, 20 ns);
//!   each hop adds one more cycle of wire (standing for the thesis's
//!   1-cycle crossbar, §3.6 #4) and buffers hold one flit per VC (§3.6 #6);
//! - 4 VCs, one packet per message, fixed ML 8 or 128, uniform traffic;
//! - **software overhead** in cycles ([`Overhead`]): the thesis's lump of
//!   100 cycles per recovery at the sender, or the J-Machine split, 13 at
//!   the reporter (C or R) and 19 at the sender (§5.9);
//! - **faults**: transient router faults in faithful mode — the
//!   `local-reroute` tables (never changed, one misroute), no controller,
//!   the dead router's neighbours told at the instant it dies, the flits
//!   it holds lost. Per run one router dies [`Config::kills_per_run`]
//!   times (down [`DOWN_CYCLES`], then back as a fresh switch); its host
//!   stops at the first kill and nobody generates messages to it any more
//!   (§3.6 #12: no message from or to a faulty node). One router per run
//!   keeps the mesh clear of the local-reroute deadlock with two dead
//!   routers in one column (docs/sbrp.md, faithful mode, "Deadlock");
//! - **paired design**: run `r` of a cell uses the same router, kill
//!   instants and traffic seed under all three protocols.
//!
//! A corrupted message is one a resend completed (the sink's `recovered`),
//! between live hosts; its latency runs from generation to delivery, in
//! cycles. Per cell: for each protocol n, mean and a 95 % interval, and for
//! each pair the thesis orders the per-run paired difference of means with
//! a 95 % t interval over runs. Every run is also checked: each message
//! between live hosts delivered exactly once and in order, nothing left
//! retained.

use crate::stats::t975;
use flitnet_core::host::endpoint::{HostConfig, InjectionVc};
use flitnet_core::host::histogram::Moments;
use flitnet_core::host::message::split_message_id;
use flitnet_core::host::retained::ReleasePolicy;
use flitnet_core::host::source::{ArrivalProcess, MessageLength, OfferedLoad, SourceConfig};
use flitnet_core::host::traffic::TrafficPattern;
use flitnet_core::link::LinkConfig;
use flitnet_core::mechanism::sbrp::{host::SbrpConfig, RecoveryProtocol};
use flitnet_core::routing::RoutingTables;
use flitnet_core::sim::{build_fabric, fresh_switch, Fabric, SimConfig};
use flitnet_core::switch::{Switch, SwitchTiming, Switching};
use flitnet_core::topology::generators::{hypercube, mesh_or_torus};
use flitnet_core::topology::{FaultSet, NodeRef, PortRef, Topology};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One cycle: one flit time on a link (50 Mflit/s).
pub const CYCLE_NS: u64 = 20;
/// Link bandwidth giving [`CYCLE_NS`].
const LINK_FLITS_PER_S: u64 = 1_000_000_000 / CYCLE_NS;
/// How long a killed router stays down before it comes back (cycles).
pub const DOWN_CYCLES: u64 = 300;
/// Warm-up before the first kill (cycles).
const FIRST_KILL_CYCLES: u64 = 1_500;
/// Time between kills (cycles); each kill falls at a random instant in the
/// first half of its period.
const KILL_PERIOD_CYCLES: u64 = 1_000;
/// Traffic goes on this long after the last kill (cycles).
const TAIL_CYCLES: u64 = 1_500;
/// Sender hold window (G1, spec 003 §5.10), far beyond any recovery here.
const HOLD_NS: u64 = 2_000_000;
/// A run that has not drained by then is wedged (simulated ns).
const LIMIT_NS: u64 = 30_000_000;

/// The three protocols, in report order.
pub const PROTOCOLS: [RecoveryProtocol; 3] = [
    RecoveryProtocol::Sbrp0,
    RecoveryProtocol::Sbrp1,
    RecoveryProtocol::Sbrp2,
];

/// The fabric of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Net {
    /// The 16-node hypercube (4-cube).
    Hypercube4,
    /// The 7×7 mesh (49 nodes).
    Mesh7x7,
}

impl Net {
    pub fn name(self) -> &'static str {
        match self {
            Net::Hypercube4 => "4-cube",
            Net::Mesh7x7 => "7x7 mesh",
        }
    }

    fn topology(self) -> Topology {
        match self {
            Net::Hypercube4 => hypercube(4).expect("the 4-cube"),
            Net::Mesh7x7 => mesh_or_torus(&[7, 7], false).expect("the 7x7 mesh"),
        }
    }

    /// Offered load per host, in flits per cycle: 0.15 of the thesis's
    /// maximum load (spec 003 §6.2: 2 flits/cycle/node on the 4-cube,
    /// 4/7 on the 7×7 mesh) on the mesh; 0.2 of it on the cube, where one
    /// host link (1 flit/cycle) is the injection limit.
    fn load(self) -> f64 {
        match self {
            Net::Hypercube4 => 0.4,
            Net::Mesh7x7 => 0.15 * 4.0 / 7.0,
        }
    }
}

/// Software overhead per recovery event, in cycles (spec 003 §5.9).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overhead {
    pub name: String,
    /// The sender's resending handler, before a resend starts.
    pub sender_cycles: u64,
    /// The reporter's recover handler (node C in SBRP-0/1, the receiver in
    /// SBRP-2), before its RRQ leaves.
    pub reporter_cycles: u64,
}

impl Overhead {
    /// "100 simulator cycles" per recovery, all at the sender.
    pub fn lump() -> Self {
        Overhead {
            name: "100-cycle lump".into(),
            sender_cycles: 100,
            reporter_cycles: 0,
        }
    }

    /// The J-Machine split: L + T_s + T_w = 13 at the reporter, T_r + T_o
    /// = 19 at the sender.
    pub fn split() -> Self {
        Overhead {
            name: "13/19 split".into(),
            sender_cycles: 19,
            reporter_cycles: 13,
        }
    }

    fn sbrp(&self, protocol: RecoveryProtocol) -> SbrpConfig {
        SbrpConfig {
            protocol,
            resend_delay_ns: self.sender_cycles * CYCLE_NS,
            report_delay_ns: self.reporter_cycles * CYCLE_NS,
            switch_report_delay_ns: self.reporter_cycles * CYCLE_NS,
            // R-4, the receiver's fallback (SBRP-0/1): a safety net far
            // beyond the protocols' own latencies.
            nft_wait_ns: 100_000,
            max_receiver_rrqs: 8,
            // The thesis's protocols alone.
            gap_wait_ns: None,
        }
    }
}

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub nets: Vec<Net>,
    /// Message lengths (flits, one packet each).
    pub lengths: Vec<u32>,
    pub overheads: Vec<Overhead>,
    /// Runs per cell (each with its own router, instants and seed).
    pub runs: u32,
    /// Transient kills of the run's router per run.
    pub kills_per_run: u32,
    /// Worker threads.
    pub threads: usize,
    pub seed: u64,
}

impl Config {
    /// The full experiment: both fabrics, ML 8 and 128, both overhead
    /// models.
    pub fn full() -> Self {
        Config {
            nets: vec![Net::Hypercube4, Net::Mesh7x7],
            lengths: vec![8, 128],
            overheads: vec![Overhead::lump(), Overhead::split()],
            runs: 32,
            kills_per_run: 8,
            threads: 2,
            seed: 3,
        }
    }

    /// A reduced run for tests: the 4-cube, both lengths, the lump.
    pub fn smoke() -> Self {
        Config {
            nets: vec![Net::Hypercube4],
            lengths: vec![8, 128],
            overheads: vec![Overhead::lump()],
            runs: 4,
            kills_per_run: 3,
            threads: 2,
            seed: 3,
        }
    }
}

/// The thesis's order of a cell, fastest first (Figs 80, 82).
pub fn thesis_order(ml: u32) -> [RecoveryProtocol; 3] {
    use RecoveryProtocol::*;
    if ml <= 8 {
        [Sbrp1, Sbrp0, Sbrp2]
    } else {
        [Sbrp1, Sbrp2, Sbrp0]
    }
}

/// A protocol's numbers in one cell, pooled over its runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProtocolStats {
    pub protocol: RecoveryProtocol,
    /// Corrupted (recovered) messages between live hosts.
    pub n: u64,
    /// Their mean latency, generation to delivery (cycles).
    pub mean_cycles: f64,
    /// 95 % interval of the mean, from the messages' standard deviation
    /// (normal approximation; messages of one run are not independent, so
    /// the verdict uses the paired run-level intervals instead).
    pub ci95_cycles: (f64, f64),
    /// Runs with at least one corrupted message.
    pub runs_with_samples: u32,
    /// Messages between live hosts: expected and delivered exactly once.
    pub expected: u64,
    pub delivered: u64,
    /// Packets and flits the senders resent (all, including resends for
    /// the dead router's host).
    pub resent_packets: u64,
    pub resent_flits: u64,
    /// Resent flits received by live hosts, per corrupted message.
    pub resent_flits_per_recovered: f64,
    pub duplicate_flits: u64,
    pub rrq_from_switches: u64,
    pub rrq_from_receivers: u64,
}

/// A pair the thesis orders: `slower − faster`, per run, averaged over the
/// runs where both recovered something.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairDiff {
    pub faster: RecoveryProtocol,
    pub slower: RecoveryProtocol,
    pub runs: u32,
    /// Mean paired difference (cycles); > 0 is the thesis's direction.
    pub mean_cycles: f64,
    pub ci95_cycles: (f64, f64),
}

impl PairDiff {
    /// Significantly in the thesis's direction.
    pub fn in_order(&self) -> bool {
        self.runs >= 2 && self.ci95_cycles.0 > 0.0
    }

    /// Significantly reversed.
    pub fn reversed(&self) -> bool {
        self.runs >= 2 && self.ci95_cycles.1 < 0.0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Every pair the thesis orders is significantly in its order.
    Match,
    /// At least one pair is significantly reversed.
    Differs,
    Inconclusive,
}

/// One cell: a fabric, a message length and an overhead model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub net: Net,
    pub ml: u32,
    pub overhead: Overhead,
    pub runs: u32,
    /// SBRP-0, SBRP-1, SBRP-2.
    pub protocols: Vec<ProtocolStats>,
    /// The thesis's pairs: (1st, 2nd), (1st, 3rd), (2nd, 3rd) of its order.
    pub pairs: Vec<PairDiff>,
    pub thesis: [RecoveryProtocol; 3],
    /// The measured order by mean, fastest first.
    pub measured: [RecoveryProtocol; 3],
    pub verdict: Verdict,
    /// Broken guarantees (loss, duplicate, disorder, wedge), one line
    /// each; empty when every run delivered every message exactly once.
    pub violations: Vec<String>,
}

impl Cell {
    /// A few lines of plain text: the cell, each protocol, each pair.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{} ML {} {} ({} runs): {:?}, measured {:?}, thesis {:?}\n",
            self.net.name(),
            self.ml,
            self.overhead.name,
            self.runs,
            self.verdict,
            self.measured,
            self.thesis
        );
        for s in &self.protocols {
            out += &format!(
                "  {:?}: n={} mean {:.1} cyc [{:.1}, {:.1}] runs {} resent {}/{} flits, {:.1} flits/recovered, dup {}, RRQs sw {} rx {}, delivered {}/{}\n",
                s.protocol,
                s.n,
                s.mean_cycles,
                s.ci95_cycles.0,
                s.ci95_cycles.1,
                s.runs_with_samples,
                s.resent_packets,
                s.resent_flits,
                s.resent_flits_per_recovered,
                s.duplicate_flits,
                s.rrq_from_switches,
                s.rrq_from_receivers,
                s.delivered,
                s.expected
            );
        }
        for p in &self.pairs {
            out += &format!(
                "  {:?} - {:?}: {:+.1} cyc [{:+.1}, {:+.1}] over {} runs\n",
                p.slower, p.faster, p.mean_cycles, p.ci95_cycles.0, p.ci95_cycles.1, p.runs
            );
        }
        for v in self.violations.iter().take(5) {
            out += &format!("  VIOLATION {v}\n");
        }
        out
    }

    pub fn stats(&self, p: RecoveryProtocol) -> Option<&ProtocolStats> {
        self.protocols.iter().find(|s| s.protocol == p)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub config: Config,
    pub cells: Vec<Cell>,
    /// Simulated runs in all.
    pub runs: u64,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
struct RunOutcome {
    /// Corrupted messages' latencies (cycles).
    recovered: Moments,
    expected: u64,
    delivered: u64,
    resent_packets: u64,
    resent_flits: u64,
    retransmitted_received: u64,
    duplicate_flits: u64,
    rrq_from_switches: u64,
    rrq_from_receivers: u64,
    violations: Vec<String>,
}

/// The schedule of one run, shared by the three protocols.
#[derive(Clone, Debug)]
struct Plan {
    router: u32,
    kills_ns: Vec<u64>,
    stop_ns: u64,
    seed: u64,
}

fn plan(cfg: &Config, net: Net, ml: u32, run: u32, routers: u32) -> Plan {
    let mut rng = ChaCha8Rng::seed_from_u64(
        cfg.seed ^ (ml as u64) << 40 ^ (net as u64) << 56 ^ (run as u64).wrapping_mul(0x9E37),
    );
    // Every router in turn, starting at a random one (so that small runs
    // still see different routers).
    let start = rng.gen_range(0..routers);
    let router = (start + run) % routers;
    let kills_ns = (0..cfg.kills_per_run as u64)
        .map(|i| {
            let c = FIRST_KILL_CYCLES
                + i * KILL_PERIOD_CYCLES
                + rng.gen_range(0..KILL_PERIOD_CYCLES / 2);
            c * CYCLE_NS
        })
        .collect::<Vec<_>>();
    let stop_ns = kills_ns.last().copied().unwrap_or(0) + (DOWN_CYCLES + TAIL_CYCLES) * CYCLE_NS;
    Plan {
        router,
        kills_ns,
        stop_ns,
        seed: rng.gen(),
    }
}

fn host_template(net: Net, ml: u32, seed: u64, stop_ns: u64) -> HostConfig {
    HostConfig {
        host: 0,
        hosts: 0,
        source: SourceConfig {
            pattern: TrafficPattern::Uniform,
            load: OfferedLoad::FlitsPerSecond {
                rate: net.load() * LINK_FLITS_PER_S as f64,
            },
            // Uniform inter-arrival times on [0, 2/λ] (spec 003 §6.1).
            arrivals: ArrivalProcess::Uniform,
            length: MessageLength::Fixed { flits: ml },
            max_packet_flits: ml,
            payload_bytes: 8,
            queue_capacity: 256,
            max_messages: None,
            duration_ns: Some(stop_ns),
            release: ReleasePolicy::HoldFor { hold_ns: HOLD_NS },
        },
        injection: InjectionVc::RoundRobin,
        link: LinkConfig {
            vcs: 4,
            buffer_depth: 1,
            bandwidth_flits_per_s: Some(LINK_FLITS_PER_S),
            propagation_ns: 0,
            keepalive_interval_ns: 200_000,
            dead_after_ns: 50_000_000,
            credit_coalesce_ns: 0,
            retrain_ns: 300_000,
            ..LinkConfig::default()
        },
        epoch: 1,
        seed,
        record_trace: true,
    }
}

/// Router `dead` dies: its flits are lost, its neighbours' ports to it go
/// down at the same instant (faithful mode: told at once), its hosts stop
/// and nobody generates messages for them any more.
fn kill(f: &mut Fabric<Switch>, topo: &Topology, dead: u32) {
    let now = f.now();
    f.switches[dead as usize].set_recovery(RecoveryProtocol::None);
    let radix = topo.switches[dead as usize].ports.len();
    for p in 0..radix {
        let _ = f.switches[dead as usize].set_port_admin(p as u16, false);
    }
    for p in 0..radix {
        let Some(peer) = topo.peer(PortRef::switch(dead, p as u16)) else {
            continue;
        };
        match peer.node {
            NodeRef::Switch(s) => {
                let _ = f.switches[s as usize].set_port_admin(peer.port, false);
            }
            NodeRef::Host(h) => {
                f.hosts[h as usize].stop(now);
                for e in f.hosts.iter_mut() {
                    e.peer_down(h);
                }
            }
        }
    }
}

/// Router `s` comes back as a fresh process (empty buffers, a new link
/// epoch, its fault-free local-reroute table) and its neighbours' ports
/// toward it come up again at once.
fn restart(
    f: &mut Fabric<Switch>,
    cfg: &SimConfig,
    tables: &RoutingTables,
    s: u32,
    epoch: u16,
    protocol: RecoveryProtocol,
) {
    let topo = f.topo.clone();
    let mut fresh = fresh_switch(&topo, cfg, s, epoch).expect("the switch config was valid once");
    fresh.set_recovery(protocol);
    arm_deadlock_recovery(&mut fresh);
    fresh.install_table(
        tables.switches[s as usize].clone(),
        tables.vc_policy(s as usize).clone(),
    );
    f.replace_switch(s, fresh);
}

/// Gives a switch the default head-of-queue lifetime of these links (1024
/// cycles with 1-flit buffers), as the daemons have in faithful mode: once
/// a fault cuts the escape network the local-reroute tables can deadlock
/// (docs/sbrp.md, faithful mode, "Deadlock"); a head stuck that long is
/// dropped and its message resent, so such a run still drains and counts.
fn arm_deadlock_recovery(s: &mut Switch) {
    s.set_head_of_queue_lifetime(Some(
        flitnet_core::mechanism::hoq::default_head_of_queue_lifetime_ns(Some(LINK_FLITS_PER_S), 1),
    ));
}

/// One simulated run of `protocol` under `plan`.
fn one_run(
    net: Net,
    ml: u32,
    overhead: &Overhead,
    protocol: RecoveryProtocol,
    plan: &Plan,
    topo: &Topology,
    tables: &RoutingTables,
) -> RunOutcome {
    let name = format!(
        "{} ML {ml} {protocol:?} ({}) router {} kills {:?} seed {}",
        net.name(),
        overhead.name,
        plan.router,
        plan.kills_ns,
        plan.seed
    );
    let cfg = SimConfig {
        host: host_template(net, ml, plan.seed, plan.stop_ns),
        switching: Switching::Wormhole,
        switch_timing: SwitchTiming::default(),
        // One more cycle per hop: the thesis's crossbar cycle (§3.6 #4).
        wire_ns: CYCLE_NS,
    };
    let mut out = RunOutcome::default();
    let mut f = match build_fabric(topo.clone(), tables, &cfg) {
        Ok(f) => f,
        Err(e) => {
            out.violations.push(format!("{name}: {e}"));
            return out;
        }
    };
    let sbrp = overhead.sbrp(protocol);
    for h in &mut f.hosts {
        if let Err(e) = h.set_recovery(sbrp.clone()) {
            out.violations.push(format!("{name}: {e}"));
            return out;
        }
    }
    for s in &mut f.switches {
        s.set_recovery(protocol);
        arm_deadlock_recovery(s);
    }
    let n = topo.num_hosts() as u32;
    let dead_hosts: Vec<u32> = (0..n)
        .filter(|&h| topo.switch_of_host(h) == Some(plan.router))
        .collect();
    let live = |h: u32| !dead_hosts.contains(&h);
    f.start(0);
    let mut epoch = cfg.host.epoch;
    for &k in &plan.kills_ns {
        f.run_until(k);
        kill(&mut f, topo, plan.router);
        f.run_until(k + DOWN_CYCLES * CYCLE_NS);
        epoch += 1;
        restart(&mut f, &cfg, tables, plan.router, epoch, protocol);
    }
    // Until the live hosts are done and recovery has settled, then past the
    // hold window so that every sender may release.
    loop {
        let t = f.now() + 20_000;
        f.run_until(t);
        let busy = f
            .hosts
            .iter()
            .enumerate()
            .any(|(h, e)| live(h as u32) && (!e.is_drained() || e.recovery_in_progress() > 0));
        if !busy {
            break;
        }
        if t > LIMIT_NS {
            // Where it is stuck: switches still holding flits (a routing
            // deadlock) or hosts still waiting on a recovery.
            let holding: Vec<usize> = (0..f.switches.len())
                .filter(|&i| f.switches[i].in_flight_flits() > 0)
                .collect();
            let waiting: Vec<usize> = (0..f.hosts.len())
                .filter(|&h| live(h as u32) && f.hosts[h].recovery_in_progress() > 0)
                .collect();
            out.violations.push(format!(
                "{name}: did not drain by {LIMIT_NS} ns (wedged: switches holding flits {holding:?}, hosts waiting on a recovery {waiting:?})"
            ));
            return out;
        }
    }
    let end = f.now() + HOLD_NS + 1_000_000;
    f.run_until(end);

    for (h, e) in f.hosts.iter().enumerate() {
        let me = h as u32;
        if !live(me) {
            continue;
        }
        let r = e.report();
        let mut bad = |what: &str, v: u64| {
            if v != 0 {
                out.violations
                    .push(format!("{name}: host {me}: {what} {v}"));
            }
        };
        bad("retained", r.retained as u64);
        bad("recovery in progress", e.recovery_in_progress() as u64);
        bad("duplicate messages", r.sink.duplicate_messages);
        bad("out-of-order messages", r.sink.out_of_order_messages);
        bad("corrupted messages", r.sink.corrupted_messages);
        // Every live flow: messages 0.. exactly once, in order.
        let mut per_src = vec![Vec::new(); n as usize];
        for d in e.delivery_trace() {
            let (dst, seq) = split_message_id(d.msg);
            if dst != me || d.src >= n {
                out.violations
                    .push(format!("{name}: host {me}: misdelivered {:?}", d));
                continue;
            }
            per_src[d.src as usize].push(seq);
            if d.recovered && live(d.src) {
                out.recovered.record(d.latency_ns / CYCLE_NS);
            }
        }
        for (src, seqs) in per_src.iter().enumerate() {
            let src = src as u32;
            if src == me || !live(src) {
                continue;
            }
            let sent = f.hosts[src as usize]
                .source()
                .sent_to()
                .get(&me)
                .copied()
                .unwrap_or(0);
            let ok =
                seqs.len() as u64 == sent && seqs.iter().enumerate().all(|(i, &s)| i == s as usize);
            if !ok {
                out.violations.push(format!(
                    "{name}: flow {src} -> {me}: {} of {sent} delivered, in order and once: {ok}",
                    seqs.len()
                ));
            }
            out.expected += sent;
            out.delivered += (seqs.len() as u64).min(sent);
        }
        out.retransmitted_received += r.sink.retransmitted_flits;
        out.duplicate_flits += r.sink.duplicate_flits;
        out.rrq_from_receivers += r.sbrp.rrq_sent;
        out.resent_packets += r.sbrp.resent_packets;
        out.resent_flits += r.sbrp.resent_flits;
    }
    for (s, sw) in f.switches.iter().enumerate() {
        if s as u32 != plan.router {
            out.rrq_from_switches += sw.sbrp_counters().rrq_sent;
        }
    }
    out
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let m = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (m, f64::NAN);
    }
    let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, v.sqrt())
}

fn moments_mean(m: &Moments) -> Option<f64> {
    (m.count > 0).then(|| m.sum / m.count as f64)
}

/// Builds one cell from its runs (`runs[protocol index][run]`).
fn cell(net: Net, ml: u32, overhead: &Overhead, runs: &[Vec<RunOutcome>; 3]) -> Cell {
    let mut protocols = Vec::new();
    let mut violations = Vec::new();
    for (i, &p) in PROTOCOLS.iter().enumerate() {
        let mut all = Moments::default();
        let mut s = ProtocolStats {
            protocol: p,
            n: 0,
            mean_cycles: f64::NAN,
            ci95_cycles: (f64::NAN, f64::NAN),
            runs_with_samples: 0,
            expected: 0,
            delivered: 0,
            resent_packets: 0,
            resent_flits: 0,
            resent_flits_per_recovered: f64::NAN,
            duplicate_flits: 0,
            rrq_from_switches: 0,
            rrq_from_receivers: 0,
        };
        let mut received = 0;
        for r in &runs[i] {
            all.merge(&r.recovered);
            s.runs_with_samples += (r.recovered.count > 0) as u32;
            s.expected += r.expected;
            s.delivered += r.delivered;
            s.resent_packets += r.resent_packets;
            s.resent_flits += r.resent_flits;
            received += r.retransmitted_received;
            s.duplicate_flits += r.duplicate_flits;
            s.rrq_from_switches += r.rrq_from_switches;
            s.rrq_from_receivers += r.rrq_from_receivers;
            violations.extend(r.violations.iter().cloned());
        }
        s.n = all.count;
        if all.count > 0 {
            let n = all.count as f64;
            let m = all.sum / n;
            let var = ((all.sum_sq - n * m * m) / (n - 1.0).max(1.0)).max(0.0);
            let half = 1.96 * (var / n).sqrt();
            s.mean_cycles = m;
            s.ci95_cycles = (m - half, m + half);
            s.resent_flits_per_recovered = received as f64 / n;
        }
        protocols.push(s);
    }
    let thesis = thesis_order(ml);
    let idx = |p: RecoveryProtocol| PROTOCOLS.iter().position(|&q| q == p).unwrap();
    let pairs: Vec<PairDiff> = [(0, 1), (0, 2), (1, 2)]
        .into_iter()
        .map(|(a, b)| {
            let (fa, sl) = (thesis[a], thesis[b]);
            let diffs: Vec<f64> = runs[idx(fa)]
                .iter()
                .zip(&runs[idx(sl)])
                .filter_map(|(x, y)| {
                    Some(moments_mean(&y.recovered)? - moments_mean(&x.recovered)?)
                })
                .collect();
            let (m, sd) = mean_sd(&diffs);
            let half =
                t975(diffs.len().saturating_sub(1) as f64) * sd / (diffs.len() as f64).sqrt();
            PairDiff {
                faster: fa,
                slower: sl,
                runs: diffs.len() as u32,
                mean_cycles: m,
                ci95_cycles: (m - half, m + half),
            }
        })
        .collect();
    let verdict = if pairs.iter().any(PairDiff::reversed) {
        Verdict::Differs
    } else if pairs.iter().all(PairDiff::in_order) {
        Verdict::Match
    } else {
        Verdict::Inconclusive
    };
    let mut measured = PROTOCOLS;
    measured.sort_by(|&a, &b| {
        let m = |p| protocols[idx(p)].mean_cycles;
        m(a).partial_cmp(&m(b)).unwrap_or(std::cmp::Ordering::Equal)
    });
    Cell {
        net,
        ml,
        overhead: overhead.clone(),
        runs: runs[0].len() as u32,
        protocols,
        pairs,
        thesis,
        measured,
        verdict,
        violations,
    }
}

/// Runs the experiment: every cell of `cfg`, every protocol, `cfg.runs`
/// paired runs each, on `cfg.threads` threads. Deterministic: the result
/// does not depend on the number of threads.
pub fn run(cfg: &Config) -> Report {
    struct Job {
        cell: usize,
        protocol: usize,
        run: u32,
    }
    let mut cells = Vec::new();
    for &net in &cfg.nets {
        for &ml in &cfg.lengths {
            for o in &cfg.overheads {
                cells.push((net, ml, o.clone()));
            }
        }
    }
    let nets: Vec<(Net, Topology, RoutingTables)> = cfg
        .nets
        .iter()
        .map(|&net| {
            let topo = net.topology();
            let tables = flitnet_core::routing::registry::engine("local-reroute")
                .expect("the local-reroute engine")
                .route(&topo, &FaultSet::none())
                .expect("local-reroute covers meshes and hypercubes");
            (net, topo, tables)
        })
        .collect();
    let mut jobs = Vec::new();
    for c in 0..cells.len() {
        for run in 0..cfg.runs {
            for protocol in 0..PROTOCOLS.len() {
                jobs.push(Job {
                    cell: c,
                    protocol,
                    run,
                });
            }
        }
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cfg.threads.max(1))
        .build()
        .expect("a worker pool");
    let results: Vec<RunOutcome> = pool.install(|| {
        use rayon::prelude::*;
        jobs.par_iter()
            .map(|job| {
                let (net, ml, ref o) = cells[job.cell];
                let (_, topo, tables) = nets.iter().find(|(n, _, _)| *n == net).unwrap();
                let routers = topo.num_switches() as u32;
                let p = plan(cfg, net, ml, job.run, routers);
                one_run(net, ml, o, PROTOCOLS[job.protocol], &p, topo, tables)
            })
            .collect()
    });
    let mut per_cell: Vec<[Vec<RunOutcome>; 3]> =
        (0..cells.len()).map(|_| Default::default()).collect();
    for (job, r) in jobs.iter().zip(results) {
        per_cell[job.cell][job.protocol].push(r);
    }
    Report {
        config: cfg.clone(),
        cells: cells
            .iter()
            .zip(&per_cell)
            .map(|((net, ml, o), runs)| cell(*net, *ml, o, runs))
            .collect(),
        runs: jobs.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RecoveryProtocol::*;

    #[test]
    fn verdicts_follow_the_pair_intervals() {
        let pair = |lo: f64, hi: f64| PairDiff {
            faster: Sbrp1,
            slower: Sbrp0,
            runs: 10,
            mean_cycles: (lo + hi) / 2.0,
            ci95_cycles: (lo, hi),
        };
        assert!(pair(1.0, 3.0).in_order() && !pair(1.0, 3.0).reversed());
        assert!(pair(-3.0, -1.0).reversed());
        assert!(!pair(-1.0, 1.0).in_order() && !pair(-1.0, 1.0).reversed());
    }

    /// The reduced experiment (4-cube, ML 8 and 128, the 100-cycle lump):
    /// every message between live hosts delivered exactly once, in order,
    /// under every protocol and every run; each protocol recovered
    /// something; SBRP-0 resends whole packets and SBRP-1/2 resend fewer
    /// flits per corrupted message on long messages (Table 2).
    #[test]
    fn the_ordering_experiment_keeps_sbrps_guarantees() {
        let report = run(&Config::smoke());
        assert_eq!(report.cells.len(), 2);
        for c in &report.cells {
            assert!(c.violations.is_empty(), "{:#?}", c.violations);
            for s in &c.protocols {
                assert!(
                    s.n > 0,
                    "{} ML {} {:?} recovered nothing",
                    c.net.name(),
                    c.ml,
                    s.protocol
                );
                assert_eq!(s.delivered, s.expected, "{s:?}");
                assert!(s.expected > 0);
            }
            let s0 = c.stats(Sbrp0).unwrap();
            assert_eq!(s0.resent_flits, s0.resent_packets * c.ml as u64, "{s0:?}");
            if c.ml == 128 {
                for p in [Sbrp1, Sbrp2] {
                    let s = c.stats(p).unwrap();
                    assert!(
                        s.resent_flits_per_recovered < s0.resent_flits_per_recovered,
                        "{s:?} vs {s0:?}"
                    );
                }
            }
        }
    }

    /// The full experiment, printed (release: `cargo test --release -p
    /// flitnet-core sbrp_ordering_full -- --ignored --nocapture`);
    /// `SBRP_ORDERING_RUNS` overrides the runs per cell, `SBRP_ORDERING_NET`
    /// (`cube` or `mesh`) keeps one fabric.
    #[test]
    #[ignore]
    fn sbrp_ordering_full() {
        let mut cfg = Config::full();
        if let Some(r) = std::env::var("SBRP_ORDERING_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            cfg.runs = r;
        }
        match std::env::var("SBRP_ORDERING_NET").as_deref() {
            Ok("cube") => cfg.nets = vec![Net::Hypercube4],
            Ok("mesh") => cfg.nets = vec![Net::Mesh7x7],
            _ => {}
        }
        let report = run(&cfg);
        for c in &report.cells {
            eprintln!("{}", c.summary());
        }
    }
}
