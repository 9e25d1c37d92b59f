//! `flitctl sim swarm`: swarm testing of the recovery mechanisms in the
//! deterministic simulator, after FoundationDB's simulation and
//! TigerBeetle's VOPR. Each run draws from its own seed a fabric, a
//! mechanism (with or without SBRP), a fault schedule and traffic; runs it
//! as `flitctl sim` runs a chaos scenario; and checks what the mechanism
//! promises:
//!
//! * `buffer-overflow`: no flit arrived at a full buffer (credits);
//! * `exactly-once`: under SBRP, every message between hosts the faults
//!   never cut off delivered exactly once, in order, none still held;
//! * `accounted`: without SBRP, every lost message lost a flit a counter
//!   names (a drop by cause, a link loss, a killed switch's buffers), and
//!   nothing was duplicated or misdelivered;
//! * `progress`: within the drain after traffic, every host the faults
//!   left connected sent what it generated, and under SBRP the fabric
//!   drained (no deadlock, no stall).
//!
//! A failing run is printed with its seed, what broke, and a shrunk
//! schedule: faults dropped one at a time while it still fails, then
//! shorter traffic. `flitctl sim --replay SEED` runs one seed again.

use crate::controller::decide::Settle;
use crate::mechanism::Mechanism as FabricMechanism;
use crate::scenario::{
    Action, ActionKind, FabricSection, Mechanism, Scenario, ScenarioFile, Target, Time,
    TrafficSection,
};
use crate::sim::engine::{ControllerTiming, Sim};
use anyhow::{Context, Result};
use clap::Args;
use flitnet_core::control::SwitchingMode;
use flitnet_core::mechanism::dlr::walk::DlrFabric;
use flitnet_core::mechanism::dlr::DlrConfig;
use flitnet_core::mechanism::sbrp::RecoveryProtocol;
use flitnet_core::routing::checker::{self, CheckFailure, CheckOptions};
use flitnet_core::routing::RoutingTables;
use flitnet_core::topology::generators;
use flitnet_core::topology::{FaultSet, HostId, LinkId, NodeRef, PgftParams, SwitchId, Topology};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct SwarmArgs {
    /// Runs to make.
    #[arg(long, default_value_t = 100)]
    pub runs: u64,
    /// The swarm's seed: run i uses the seed derived from it and i (printed
    /// with every failure, for `flitctl sim --replay`).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Runs in parallel (default: the machine's cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Stop at the first failing run.
    #[arg(long)]
    pub fail_fast: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write every failing case (topology and scenario files, shrunk) here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also stop switch processes with their state kept (stop-switch:
    /// SIGSTOP live), for less and for more than keepalive detection. A
    /// run seed draws the same case with and without; replay with
    /// `flitctl sim --replay SEED --stops`.
    #[arg(long)]
    pub stops: bool,
}

/// A topology the swarm draws, as its generator spells it.
#[derive(Clone, Debug, PartialEq)]
pub enum TopoSpec {
    Kary { k: u32, n: u32 },
    Pgft(PgftParams),
    Ruft { k: u32, n: u32 },
    Mesh(Vec<u32>),
    Torus(Vec<u32>),
    Hypercube(u32),
}

impl TopoSpec {
    pub fn build(&self) -> Result<Topology> {
        Ok(match self {
            TopoSpec::Kary { k, n } => generators::kary_ntree(*k, *n)?,
            TopoSpec::Pgft(p) => generators::pgft(p)?,
            TopoSpec::Ruft { k, n } => generators::ruft(*k, *n)?,
            TopoSpec::Mesh(d) => generators::mesh_or_torus(d, false)?,
            TopoSpec::Torus(d) => generators::mesh_or_torus(d, true)?,
            TopoSpec::Hypercube(d) => generators::hypercube(*d)?,
        })
    }

    /// The topology file (`flitctl sim` reads it).
    pub fn yaml(&self) -> String {
        let list = |v: &[u32]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            TopoSpec::Kary { k, n } => {
                format!("name: swarm\ngenerator: kary-ntree\nk: {k}\nn: {n}\n")
            }
            TopoSpec::Pgft(p) => format!(
                "name: swarm\ngenerator: pgft\nm: [{}]\nw: [{}]\np: [{}]\n",
                list(&p.m),
                list(&p.w),
                list(&p.p)
            ),
            TopoSpec::Ruft { k, n } => format!("name: swarm\ngenerator: ruft\nk: {k}\nn: {n}\n"),
            TopoSpec::Mesh(d) => format!("name: swarm\ngenerator: mesh\ndims: [{}]\n", list(d)),
            TopoSpec::Torus(d) => format!("name: swarm\ngenerator: torus\ndims: [{}]\n", list(d)),
            TopoSpec::Hypercube(d) => format!("name: swarm\ngenerator: hypercube\nd: {d}\n"),
        }
    }

    fn draw(rng: &mut ChaCha8Rng) -> TopoSpec {
        match rng.gen_range(0..6) {
            0 => {
                let (k, n) =
                    [(2, 2), (2, 3), (3, 2), (4, 2), (2, 4), (3, 3), (4, 3)][rng.gen_range(0..7)];
                TopoSpec::Kary { k, n }
            }
            1 => {
                let m0 = rng.gen_range(2..=3);
                let levels = rng.gen_range(1..=2);
                let mut p = PgftParams {
                    m: vec![m0],
                    w: vec![1],
                    p: vec![1],
                };
                for _ in 0..levels {
                    p.m.push(rng.gen_range(2..=3));
                    p.w.push(rng.gen_range(1..=2));
                    p.p.push(rng.gen_range(1..=3));
                }
                TopoSpec::Pgft(p)
            }
            2 => TopoSpec::Ruft {
                k: rng.gen_range(2..=4),
                n: 2,
            },
            3 => {
                let dims = if rng.gen_bool(0.2) {
                    vec![2, 2, 2]
                } else {
                    vec![rng.gen_range(2..=5), rng.gen_range(2..=5)]
                };
                TopoSpec::Mesh(dims)
            }
            4 => {
                let dims = [vec![3, 3], vec![3, 4], vec![4, 4], vec![3, 3, 3]][rng.gen_range(0..4)]
                    .clone();
                TopoSpec::Torus(dims)
            }
            _ => TopoSpec::Hypercube(rng.gen_range(2..=4)),
        }
    }
}

/// One drawn case: the scenario as a chaos file would say it.
#[derive(Clone, Debug)]
pub struct Case {
    pub seed: u64,
    pub topo: TopoSpec,
    pub file: ScenarioFile,
    /// (at, action, target as written, count).
    pub timeline: Vec<(Duration, ActionKind, String, u32)>,
    /// Switches stopped with their state kept (`--stops` only).
    pub stops: Vec<Stop>,
    /// Drawn with `--stops` (its replay needs it too).
    pub with_stops: bool,
}

/// A switch process stopped at `at` for `lasts` ([`ActionKind::StopSwitch`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Stop {
    pub at: Duration,
    pub switch: String,
    pub lasts: Duration,
}

/// Salt of the stops' own random stream: the rest of a case is drawn as
/// without `--stops`, so a seed's other faults stay the same.
const STOP_DRAW_SALT: u64 = 0x5709_c0de_5709_c0de;

/// The scenario's timing: a fault is noticed within `dead_after` (plus a
/// keepalive), the controller settles within a few ms.
const DEAD_AFTER: Duration = Duration::from_millis(3);
const TIMING: ControllerTiming = ControllerTiming {
    settle: Settle {
        quiet_ns: 1_000_000,
        max_ns: 5_000_000,
    },
    install_ns: 1_000_000,
};

/// One or two switches stopped with their state kept, each for less or
/// for more than keepalive detection, drawn from a stream of their own.
/// A switch the timeline kills or restarts is not stopped (its process
/// may not be running then). On a RUFT a stop is shorter than detection:
/// a longer one cuts its one-path flows while it lasts.
fn draw_stops(
    seed: u64,
    topo: &Topology,
    timeline: &[(Duration, ActionKind, String, u32)],
    end: Duration,
    ruft: bool,
) -> Vec<Stop> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ STOP_DRAW_SALT);
    let free: Vec<String> = (0..topo.num_switches() as SwitchId)
        .map(|s| topo.node_name(NodeRef::Switch(s)).to_string())
        .filter(|name| !timeline.iter().any(|(_, _, target, _)| target == name))
        .collect();
    let first = Duration::from_millis(2);
    if free.is_empty() || end <= first {
        return Vec::new();
    }
    let dead = DEAD_AFTER;
    let lengths = [dead / 3, dead * 2 / 3, dead * 3 / 2, dead * 3];
    let mut stops: Vec<Stop> = Vec::new();
    for _ in 0..rng.gen_range(1..=2) {
        let switch = free[rng.gen_range(0..free.len())].clone();
        let at = first + (end - first).mul_f64(rng.gen::<f64>());
        let lasts = lengths[rng.gen_range(0..if ruft { 2 } else { 4 })];
        if stops.iter().any(|s| s.switch == switch) {
            continue;
        }
        stops.push(Stop { at, switch, lasts });
    }
    stops.sort_by_key(|s| s.at);
    stops
}

fn switch_links(topo: &Topology) -> Vec<LinkId> {
    (0..topo.links.len() as LinkId)
        .filter(|&l| {
            let link = &topo.links[l as usize];
            matches!(link.a.node, NodeRef::Switch(_)) && matches!(link.b.node, NodeRef::Switch(_))
        })
        .collect()
}

fn end_name(topo: &Topology, l: LinkId, b: bool) -> String {
    let link = &topo.links[l as usize];
    let e = if b { link.b } else { link.a };
    format!("{}:{}", topo.node_name(e.node), e.port)
}

impl Case {
    /// The case of `seed`.
    pub fn draw(seed: u64) -> Result<Case> {
        Case::draw_with(seed, false)
    }

    /// The case of `seed`, with switches stopped (`stops`) or not.
    pub fn draw_with(seed: u64, stops: bool) -> Result<Case> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Redraw fabrics without a link between switches (nothing to break).
        let (spec, topo) = loop {
            let spec = TopoSpec::draw(&mut rng);
            let topo = spec.build()?;
            if !switch_links(&topo).is_empty() {
                break (spec, topo);
            }
        };
        let family_tree = matches!(spec, TopoSpec::Kary { .. });
        let direct = matches!(spec, TopoSpec::Mesh(_) | TopoSpec::Torus(_));
        let ruft = matches!(spec, TopoSpec::Ruft { .. });
        let protocols = [
            RecoveryProtocol::None,
            RecoveryProtocol::Sbrp0,
            RecoveryProtocol::Sbrp1,
            RecoveryProtocol::Sbrp2,
        ];
        // Mechanism.
        let (mechanism, mut recovery) = match rng.gen_range(0..10) {
            _ if ruft => (
                [Mechanism::NONE, Mechanism::Reroute][rng.gen_range(0..2)],
                RecoveryProtocol::None,
            ),
            0..=1 if family_tree => (
                [
                    named("dlr"),
                    named("dlr-link"),
                    named("dlr-adaptive"),
                    named("dlr-adaptive-link"),
                ][rng.gen_range(0..4)],
                protocols[rng.gen_range(0..4)],
            ),
            0..=1 if direct => (
                [
                    named("i"),
                    named("ix2"),
                    named("i-d"),
                    named("d"),
                    named("m"),
                    named("i-m"),
                ][rng.gen_range(0..6)],
                RecoveryProtocol::None,
            ),
            2..=3 => (Mechanism::Reroute, RecoveryProtocol::None),
            4 => (Mechanism::NONE, RecoveryProtocol::None),
            _ => (
                [named("sbrp0"), named("sbrp1"), named("sbrp2")][rng.gen_range(0..3)],
                RecoveryProtocol::None,
            ),
        };
        // As many VCs as the mechanism's controller half asks for (its
        // tables', or its variant's), at least 2.
        let mut vcs: u8 = 2;
        let run = flitnet_core::mechanism::RunSpec {
            topo: &topo,
            vcs: 15,
            engine: "auto",
            tables_given: false,
            controller_reroutes: false,
            recovery: RecoveryProtocol::None,
            kills_switches: false,
        };
        if let (Some(v), Some(plan)) =
            (mechanism.fabric().variant(), mechanism.fabric().plan(&run)?)
        {
            vcs = vcs.max(plan.tables().map_or((v.vcs_needed)(&topo), |t| t.vcs));
        }
        // Traffic.
        let duration = Duration::from_millis(rng.gen_range(20..=40));
        let max_packet_flits = [8u32, 16, 32][rng.gen_range(0..3)];
        // Bit permutations need a power-of-two number of hosts.
        let pow2 = topo.num_hosts().is_power_of_two();
        let patterns: &[&str] = if pow2 {
            &[
                "uniform",
                "uniform",
                "bit-reversal",
                "shuffle",
                "bit-complement",
            ]
        } else {
            &["uniform"]
        };
        let traffic = TrafficSection {
            pattern: patterns[rng.gen_range(0..patterns.len())].into(),
            load: [0.05, 0.1, 0.2, 0.3][rng.gen_range(0..4)],
            message_flits: [1u32, 4, 8, 16, 32][rng.gen_range(0..5)],
            duration: Time(duration),
            rounds: 1,
        };
        let fabric = FabricSection {
            vcs,
            buffer_depth: [4u16, 8, 16][rng.gen_range(0..3)].max(max_packet_flits.min(16) as u16),
            switching: SwitchingMode::Wormhole,
            bandwidth: [100_000u64, 200_000][rng.gen_range(0..2)],
            delay: Time(Duration::from_micros(rng.gen_range(1..=20))),
            dead_after: Time(DEAD_AFTER),
            max_packet_flits,
            link_retrain: Time(Duration::from_millis(1)),
            ..FabricSection::default()
        };
        // Faults: one to three, sometimes two close together.
        let links = switch_links(&topo);
        let inner: Vec<SwitchId> = (0..topo.num_switches() as SwitchId)
            .filter(|&s| !crate::scenario::is_leaf(&topo, s))
            .collect();
        let all: Vec<SwitchId> = (0..topo.num_switches() as SwitchId).collect();
        let faults = rng.gen_range(1..=3);
        let mut timeline = Vec::new();
        let mut t = Duration::from_millis(rng.gen_range(3..=8));
        let end = duration - Duration::from_millis(2);
        let dead = DEAD_AFTER;
        let mut broken: Vec<String> = Vec::new();
        let switch_faults_ok =
            !(recovery.is_on() && matches!(mechanism.name(), "dlr-link" | "dlr-adaptive-link"));
        for _ in 0..faults {
            if t >= end {
                break;
            }
            // A RUFT has one path per pair: any dead link or switch cuts
            // flows off for good, which the per-host connectivity the
            // report judges by does not see (its links are one-way). Its
            // faults are transient: damaged datagrams.
            let kind = if ruft { 7 } else { rng.gen_range(0..8) };
            let pick_switch = |rng: &mut ChaCha8Rng| {
                let pool = if inner.is_empty() || rng.gen_bool(0.1) {
                    &all
                } else {
                    &inner
                };
                topo.node_name(NodeRef::Switch(pool[rng.gen_range(0..pool.len())]))
                    .to_string()
            };
            match kind {
                // A link dies (and maybe comes back: a flap).
                0..=2 => {
                    let l = links[rng.gen_range(0..links.len())];
                    let name = end_name(&topo, l, false);
                    if broken.contains(&name) {
                        continue;
                    }
                    timeline.push((t, ActionKind::KillLink, name.clone(), 0));
                    if kind == 2 {
                        let back = t + Duration::from_micros(rng.gen_range(200..=6_000));
                        if back < end {
                            timeline.push((back, ActionKind::RestoreLink, name.clone(), 0));
                        } else {
                            broken.push(name);
                        }
                    } else {
                        broken.push(name);
                    }
                }
                // A switch process dies; it may restart faster than
                // detection, or slower.
                3..=4 if switch_faults_ok => {
                    let name = pick_switch(&mut rng);
                    if broken.contains(&name) {
                        continue;
                    }
                    timeline.push((t, ActionKind::SigkillSwitch, name.clone(), 0));
                    let back = match rng.gen_range(0..3) {
                        0 => Some(t + dead / 3),
                        1 => Some(t + dead * 2),
                        _ => None,
                    };
                    match back.filter(|b| *b < end) {
                        Some(b) => timeline.push((b, ActionKind::RestartSwitch, name, 0)),
                        None => broken.push(name),
                    }
                }
                // Every port of a switch down, and maybe up again.
                5 if switch_faults_ok => {
                    let name = pick_switch(&mut rng);
                    if broken.contains(&name) {
                        continue;
                    }
                    timeline.push((t, ActionKind::KillSwitch, name.clone(), 0));
                    let back = t + Duration::from_millis(rng.gen_range(1..=8));
                    if back < end && rng.gen_bool(0.5) {
                        timeline.push((back, ActionKind::RestoreSwitch, name, 0));
                    } else {
                        broken.push(name);
                    }
                }
                // Damaged datagrams on a switch link.
                _ => {
                    let l = links[rng.gen_range(0..links.len())];
                    let name = end_name(&topo, l, rng.gen_bool(0.5));
                    let name = if name.starts_with('h') {
                        end_name(&topo, l, false)
                    } else {
                        name
                    };
                    timeline.push((t, ActionKind::Corrupt, name, rng.gen_range(1..=5)));
                }
            }
            // The next fault: close behind (under a detection time) or later.
            t += if rng.gen_bool(0.3) {
                Duration::from_micros(rng.gen_range(10..=1_000))
            } else {
                Duration::from_millis(rng.gen_range(2..=10))
            };
        }
        timeline.sort_by_key(|e| e.0);
        let stop_list = if stops && switch_faults_ok {
            draw_stops(seed, &topo, &timeline, end, ruft)
        } else {
            Vec::new()
        };
        if !mechanism.is_dlr() {
            recovery = RecoveryProtocol::None;
        }
        let file = ScenarioFile {
            topology: PathBuf::from("topology.yaml"),
            mechanism,
            recovery_protocol: recovery,
            engine: "auto".into(),
            seed: seed & 0xffff_ffff,
            traffic,
            fabric,
            timeline: Vec::new(),
            random: None,
        };
        Ok(Case {
            seed,
            topo: spec,
            file,
            timeline,
            stops: stop_list,
            with_stops: stops,
        })
    }

    /// `flitctl sim --replay` of this case.
    pub fn replay_command(&self) -> String {
        let stops = if self.with_stops { " --stops" } else { "" };
        format!("flitctl sim --replay {}{stops}", self.seed)
    }

    /// The case as a checked scenario (what `flitctl sim` would run from
    /// its files).
    pub fn scenario(&self) -> Result<Scenario> {
        let topo = self.topo.build()?;
        let mut actions = Vec::new();
        for (i, (at, kind, target, count)) in self.timeline.iter().enumerate() {
            let target_ref = if matches!(
                kind,
                ActionKind::KillLink | ActionKind::RestoreLink | ActionKind::Corrupt
            ) {
                let link = crate::parse::parse_link(&topo, target)?;
                let (name, port) = target.rsplit_once(':').context("NODE:PORT")?;
                let node = topo.find_node(name).context("node")?;
                Target::Link {
                    link,
                    end: flitnet_core::topology::PortRef {
                        node,
                        port: port.parse()?,
                    },
                }
            } else {
                match topo.find_node(target) {
                    Some(NodeRef::Switch(s)) => Target::Switch(s),
                    _ => anyhow::bail!("no switch {target}"),
                }
            };
            actions.push(Action {
                at: *at,
                kind: *kind,
                target: target_ref,
                label: target.clone(),
                count: *count,
                lasts: Duration::ZERO,
                origin: format!("timeline[{i}]"),
            });
        }
        for (i, stop) in self.stops.iter().enumerate() {
            let Some(NodeRef::Switch(s)) = topo.find_node(&stop.switch) else {
                anyhow::bail!("no switch {}", stop.switch);
            };
            actions.push(Action {
                at: stop.at,
                kind: ActionKind::StopSwitch,
                target: Target::Switch(s),
                label: stop.switch.clone(),
                count: 0,
                lasts: stop.lasts,
                origin: format!("stops[{i}]"),
            });
        }
        // In time order; the stable sort keeps the timeline's order at an instant.
        actions.sort_by_key(|a| a.at);
        Ok(Scenario {
            path: PathBuf::from(format!("swarm-{}.yaml", self.seed)),
            file: self.file.clone(),
            topo,
            topology_path: PathBuf::from("topology.yaml"),
            actions,
            apps: Vec::new(),
        })
    }

    /// The scenario file of this case (beside `topology.yaml`).
    pub fn yaml(&self) -> String {
        let f = &self.file;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# flitctl sim swarm case {} ({})",
            self.seed,
            self.replay_command()
        );
        let _ = writeln!(s, "topology: topology.yaml");
        let _ = writeln!(s, "mechanism: {}", f.mechanism.name());
        if f.recovery_protocol.is_on() {
            let _ = writeln!(s, "recovery-protocol: {}", f.recovery_protocol.name());
        }
        let _ = writeln!(s, "seed: {}", f.seed);
        let t = &f.traffic;
        let _ = writeln!(
            s,
            "traffic: {{pattern: {}, load: {}, message-flits: {}, duration: {}ms}}",
            t.pattern,
            t.load,
            t.message_flits,
            t.duration.0.as_millis()
        );
        let b = &f.fabric;
        let _ = writeln!(
            s,
            "fabric: {{vcs: {}, buffer-depth: {}, bandwidth: {}, delay: {}us, dead-after: {}ms, max-packet-flits: {}, link-retrain: {}ms}}",
            b.vcs,
            b.buffer_depth,
            b.bandwidth,
            b.delay.0.as_micros(),
            b.dead_after.0.as_millis(),
            b.max_packet_flits,
            b.link_retrain.0.as_millis()
        );
        let mut entries: Vec<(Duration, String)> = self
            .timeline
            .iter()
            .map(|(at, kind, target, count)| {
                let count = if *kind == ActionKind::Corrupt {
                    format!(", count: {count}")
                } else {
                    String::new()
                };
                let line = format!(
                    "  - {{at: {}us, action: {}, target: \"{}\"{count}}}",
                    at.as_micros(),
                    kind.name(),
                    target
                );
                (*at, line)
            })
            .collect();
        for stop in &self.stops {
            let line = format!(
                "  - {{at: {}us, action: {}, target: \"{}\", duration: {}us}}",
                stop.at.as_micros(),
                ActionKind::StopSwitch.name(),
                stop.switch,
                stop.lasts.as_micros()
            );
            entries.push((stop.at, line));
        }
        // The timeline file must be in time order.
        entries.sort_by_key(|e| e.0);
        if !entries.is_empty() {
            let _ = writeln!(s, "timeline:");
        }
        for (_, line) in entries {
            let _ = writeln!(s, "{line}");
        }
        s
    }
}

/// What one run checked.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verdict {
    pub seed: u64,
    /// Broken invariants, each `name: detail`.
    pub violations: Vec<String>,
    /// Set when the violations are a documented limitation of the
    /// mechanism (outside its promise), with where it is documented.
    pub explained: Option<String>,
    /// Which kind of run broke (a failing run's [`failure_class`]).
    pub class: Option<&'static str>,
    pub summary: String,
    /// A failing run's messages lost between connected hosts, per flow
    /// (`"h01->h03"`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lost_flows: BTreeMap<String, u64>,
}

/// The kind of a failing run, by what its schedule and mechanism hold
/// (docs/simulation.md lists what the swarm found per class):
/// `admin-switch-kill` (SBRP, an administrative switch kill),
/// `faults-within-detection` (SBRP, two faults less than `dead_after`
/// apart), `sbrp` (any other SBRP failure), `progress` (no SBRP, hosts
/// could not send everything), `accounting` (no SBRP, a loss no counter
/// names, or a duplicate).
fn failure_class(case: &Case, sbrp: bool, violations: &[String]) -> &'static str {
    if !case.stops.is_empty() {
        return "stopped-switch";
    }
    let mut faults: Vec<_> = case
        .timeline
        .iter()
        .filter(|(_, k, _, _)| !k.is_repair())
        .collect();
    faults.sort_by_key(|(at, _, _, _)| *at);
    if sbrp {
        if faults
            .iter()
            .any(|(_, k, _, _)| *k == ActionKind::KillSwitch)
        {
            return "admin-switch-kill";
        }
        let dead = case.file.fabric.dead_after.0;
        let close = faults
            .windows(2)
            .any(|w| w[1].0.saturating_sub(w[0].0) < dead);
        return if close {
            "faults-within-detection"
        } else {
            "sbrp"
        };
    }
    if violations.iter().any(|v| v.starts_with("accounted")) {
        "accounting"
    } else {
        "progress"
    }
}

/// The faults still in force at the end of the schedule.
fn final_faults(scenario: &Scenario) -> FaultSet {
    let mut faults = FaultSet::none();
    for a in &scenario.actions {
        a.apply_to(&mut faults);
    }
    faults
}

/// Host pairs that the topology minus the faults in force at the end still
/// connects but the routing tables in force at the end do not (the
/// routing checker finds no route, a loop or the wrong host). Under
/// controller re-routing on a fat tree this is the up*/down* routing's
/// limit: with a dead switch on each side of a pair, the only paths left
/// may go down to a leaf and up again, which the routing forbids.
fn unrouted_pairs(
    topo: &Topology,
    faults: &FaultSet,
    tables: &RoutingTables,
) -> BTreeSet<(HostId, HostId)> {
    let opts = CheckOptions {
        deadlock: false,
        max_listed: usize::MAX,
        ..CheckOptions::default()
    };
    checker::check(topo, faults, tables, &opts)
        .failures
        .iter()
        .filter_map(|f| match f {
            CheckFailure::NoRoute { src, dst, .. }
            | CheckFailure::Loop { src, dst, .. }
            | CheckFailure::Misdelivered { src, dst, .. } => Some((*src, *dst)),
            _ => None,
        })
        .collect()
}

/// Messages lost per (sender, receiver) between hosts the faults did not
/// cut off: sent minus delivered, by the hosts' per-flow counts.
fn lost_by_pair(
    hosts: &[(NodeRef, flitnet_core::control::HostDaemonReport)],
    unreachable: &BTreeSet<NodeRef>,
) -> BTreeMap<(HostId, HostId), u64> {
    let by_host: BTreeMap<HostId, &flitnet_core::control::HostDaemonReport> = hosts
        .iter()
        .filter(|(n, _)| !unreachable.contains(n))
        .filter_map(|(n, r)| match n {
            NodeRef::Host(h) => Some((*h, r)),
            NodeRef::Switch(_) => None,
        })
        .collect();
    let mut lost = BTreeMap::new();
    for (&s, rs) in &by_host {
        for (&d, &sent) in &rs.endpoint.sent_to {
            let Some(rd) = by_host.get(&d) else { continue };
            let delivered = rd.endpoint.delivered_from.get(&s).copied().unwrap_or(0);
            if sent > delivered {
                lost.insert((s, d), sent - delivered);
            }
        }
    }
    lost
}

/// What an explanation of a run that broke exactly-once by losses alone
/// looks at ([`EXPLANATIONS`]).
struct FailedRun<'a> {
    scenario: &'a Scenario,
    out: &'a crate::sim::engine::Outcome,
    /// Messages lost between hosts the faults never cut off, per (sender,
    /// receiver); not empty.
    lost: &'a BTreeMap<(HostId, HostId), u64>,
    /// Flits the head-of-queue lifetime dropped (deadlocks broken).
    hoq_lifetime_drops: u64,
}

/// The documented limitations a failed run may fall under, tried in turn
/// (docs/simulation.md, "Explained"): each returns why, or `None`.
const EXPLANATIONS: &[fn(&FailedRun) -> Option<String>] = &[
    lost_only_where_unrouted,
    lost_only_past_a_switch_without_a_way_up,
    lost_only_where_dlr_does_not_connect,
    lost_after_a_deadlock_beyond_adaptive_dlrs_guarantee,
];

/// Whether exactly-once delivery broke only by messages lost: none
/// duplicated, out of order, corrupted, misdelivered or still held (what
/// an explanation by where the losses are can account for).
fn broken_only_by_loss(t: &crate::report::Totals) -> bool {
    t.messages_lost > 0
        && t.duplicates == 0
        && t.out_of_order == 0
        && t.corrupted == 0
        && t.misdelivered_packets == 0
        && t.retained == 0
}

/// Under SBRP with controller re-routing, a loss outside the promise: every
/// message lost between connected hosts was between a pair the final
/// tables do not route (SBRP recovers what a detected fault cut, over a
/// routing that still connects the pair), and nothing else broke.
fn lost_only_where_unrouted(run: &FailedRun) -> Option<String> {
    let (scenario, out, lost) = (run.scenario, run.out, run.lost);
    if scenario.file.mechanism.is_dlr() {
        return None;
    }
    let unrouted = unrouted_pairs(&scenario.topo, &final_faults(scenario), &out.tables);
    if unrouted.is_empty() || !lost.keys().all(|p| unrouted.contains(p)) {
        return None;
    }
    let n: u64 = lost.values().sum();
    Some(format!(
        "every message lost ({n}, on {} flows) was between hosts that the topology still connects but the re-routed tables do not ({} pairs without a route, e.g. {}): outside SBRP's promise, which recovers over a routing that still connects the pair (docs/simulation.md)",
        lost.len(),
        unrouted.len(),
        unrouted
            .iter()
            .next()
            .map(|(s, d)| format!("{} -> {}", scenario.topo.node_name(NodeRef::Host(*s)), scenario.topo.node_name(NodeRef::Host(*d))))
            .unwrap_or_default()
    ))
}

/// Hosts below switch `s` in a tree: reached from it going only down
/// (to hosts, or to switches of a lower level), whatever the faults.
fn hosts_below(topo: &Topology, s: SwitchId) -> BTreeSet<HostId> {
    let mut below = BTreeSet::new();
    let mut todo = vec![s];
    while let Some(s) = todo.pop() {
        let level = topo.switches[s as usize].level;
        for (port, _) in topo.out_neighbours(NodeRef::Switch(s), &FaultSet::none()) {
            let Some(peer) = topo.peer(flitnet_core::topology::PortRef::switch(s, port)) else {
                continue;
            };
            match peer.node {
                NodeRef::Host(h) => {
                    below.insert(h);
                }
                NodeRef::Switch(t) if topo.switches[t as usize].level < level => todo.push(t),
                NodeRef::Switch(_) => {}
            }
        }
    }
    below
}

/// Live switches of a tree with up-links of which none is alive under
/// `faults` (each dead, or its upper switch dead): a switch with no way up.
fn switches_without_a_way_up(topo: &Topology, faults: &FaultSet) -> Vec<SwitchId> {
    topo.switches
        .iter()
        .filter(|sw| !faults.switches.contains(&sw.id))
        .filter(|sw| {
            let Some(level) = sw.level else { return false };
            let mut up_links = sw
                .ports
                .iter()
                .flatten()
                .filter(|&&l| {
                    let link = &topo.links[l as usize];
                    [link.a.node, link.b.node].iter().any(|n| {
                        matches!(n, NodeRef::Switch(t) if topo.switches[*t as usize].level > Some(level))
                    })
                })
                .peekable();
            up_links.peek().is_some() && up_links.all(|&l| !faults.link_alive(topo, l))
        })
        .map(|sw| sw.id)
        .collect()
}

/// Under dynamic local rerouting, a loss outside DLR's guarantee (one
/// fault per switch: a switch routes around a dead port through another
/// port of the same direction): in the final faults some live switch has
/// every up-link dead, and every message lost between connected hosts was
/// from a host below such a switch to a host outside its subtree. The
/// leaves below it still send such packets up through it (DLR's decisions
/// see only a switch's own ports), it can only discard them, and SBRP's
/// resends meet the same dead end; controller re-routing avoids the switch.
fn lost_only_past_a_switch_without_a_way_up(run: &FailedRun) -> Option<String> {
    let (scenario, lost) = (run.scenario, run.lost);
    if !scenario.file.mechanism.is_dlr() {
        return None;
    }
    let topo = &scenario.topo;
    let stuck: Vec<(SwitchId, BTreeSet<HostId>)> =
        switches_without_a_way_up(topo, &final_faults(scenario))
            .into_iter()
            .map(|s| (s, hosts_below(topo, s)))
            .collect();
    let explained = |(src, dst): &(HostId, HostId)| {
        stuck
            .iter()
            .any(|(_, below)| below.contains(src) && !below.contains(dst))
    };
    if stuck.is_empty() || !lost.keys().all(explained) {
        return None;
    }
    let n: u64 = lost.values().sum();
    let names: Vec<&str> = stuck
        .iter()
        .map(|(s, _)| topo.node_name(NodeRef::Switch(*s)))
        .collect();
    Some(format!(
        "every message lost ({n}, on {} flows) left the subtree of a switch whose up-links are all dead ({}) under dynamic local rerouting: outside DLR's guarantee of one fault per switch, which reroutes only through another port of the same direction (docs/simulation.md)",
        lost.len(),
        names.join(", ")
    ))
}

/// Host pairs that dynamic local rerouting does not connect under
/// `faults`, by DLR's untimed walk model (`dlr::walk`, the switches'
/// own decision logic) from a fresh state: every pair is walked three
/// times over, so that an adaptive switch's re-route vector learns from
/// the earlier walks, and a pair no walk delivered is not connected.
/// Empty when the topology is not one DLR runs on.
fn pairs_dlr_does_not_connect(
    topo: &Topology,
    mechanism: FabricMechanism,
    faults: &FaultSet,
) -> BTreeSet<(HostId, HostId)> {
    let Some(cfg) = mechanism
        .variant()
        .and_then(|v| DlrConfig::of_variant(v, topo).ok().flatten())
    else {
        return BTreeSet::new();
    };
    let Ok(mut fabric) = DlrFabric::new(topo, cfg) else {
        return BTreeSet::new();
    };
    fabric.set_faults(faults);
    let hosts = topo.num_hosts() as HostId;
    let pairs = (0..hosts).flat_map(|s| (0..hosts).filter(move |&d| d != s).map(move |d| (s, d)));
    let mut unconnected: BTreeSet<(HostId, HostId)> = pairs.collect();
    for _ in 0..3 {
        unconnected.retain(|&(s, d)| !fabric.walk(s, d, 0).is_ok_and(|w| w.delivered()));
    }
    unconnected
}

/// Under dynamic local rerouting, a loss outside DLR's guarantee: the
/// faults in force at the end leave some pairs that DLR's walk model does
/// not connect ([`pairs_dlr_does_not_connect`]), and every message lost
/// between connected hosts was between such a pair. SBRP resends over the
/// routing the switches do, so a pair they do not connect stays cut off;
/// controller re-routing would connect it.
fn lost_only_where_dlr_does_not_connect(run: &FailedRun) -> Option<String> {
    let (scenario, lost) = (run.scenario, run.lost);
    if !scenario.file.mechanism.is_dlr() {
        return None;
    }
    let topo = &scenario.topo;
    let unconnected = pairs_dlr_does_not_connect(
        topo,
        scenario.file.mechanism.fabric(),
        &final_faults(scenario),
    );
    if unconnected.is_empty() || !lost.keys().all(|p| unconnected.contains(p)) {
        return None;
    }
    let n: u64 = lost.values().sum();
    let (s, d) = lost.keys().next().copied()?;
    Some(format!(
        "every message lost ({n}, on {} flows) was between hosts that the topology still connects but dynamic local rerouting does not under the final faults ({} pairs, by DLR's walk model, e.g. {} -> {}): outside DLR's guarantee, which the faults exceed (docs/simulation.md)",
        lost.len(),
        unconnected.len(),
        topo.node_name(NodeRef::Host(s)),
        topo.node_name(NodeRef::Host(d)),
    ))
}

/// The fault sets in force one after the other during `scenario`: after
/// each kill or repair, and with a switch stopped for longer than
/// `dead_after` counted dead from its stop until it runs again (its
/// neighbours take it for dead meanwhile).
fn fault_sets_in_turn(scenario: &Scenario) -> Vec<FaultSet> {
    enum Change<'a> {
        Action(&'a Action),
        Stopped(SwitchId),
        Runs(SwitchId),
    }
    let dead_after = scenario.file.fabric.dead_after.0;
    let mut changes: Vec<(Duration, Change)> = Vec::new();
    for a in &scenario.actions {
        match (a.kind, a.target) {
            (ActionKind::StopSwitch, Target::Switch(s)) if a.lasts >= dead_after => {
                changes.push((a.at, Change::Stopped(s)));
                changes.push((a.at + a.lasts, Change::Runs(s)));
            }
            _ => changes.push((a.at, Change::Action(a))),
        }
    }
    // Stable: changes at the same time keep the schedule's order.
    changes.sort_by_key(|(at, _)| *at);
    let mut faults = FaultSet::none();
    let mut sets: Vec<FaultSet> = Vec::new();
    for (_, change) in changes {
        match change {
            Change::Action(a) => _ = a.apply_to(&mut faults),
            Change::Stopped(s) => _ = faults.switches.insert(s),
            Change::Runs(s) => _ = faults.switches.remove(&s),
        }
        if sets.last() != Some(&faults) {
            sets.push(faults.clone());
        }
    }
    sets
}

/// Under adaptive DLR, a loss after the faults went beyond its guarantee
/// and it deadlocked, as *Dynamic Fault Tolerance in Fat Trees* reports
/// it can (Fig. 12): some fault set in force during the run leaves pairs
/// that DLR's walk model does not connect, the head-of-queue lifetime
/// broke deadlocks (its drops), and nothing but loss broke the promise.
/// Deadlock recovery drops a head per lifetime; a deadlock that outlasts
/// the senders' hold window loses what they no longer retain, even
/// between pairs the final faults connect.
fn lost_after_a_deadlock_beyond_adaptive_dlrs_guarantee(run: &FailedRun) -> Option<String> {
    let (scenario, lost, hoq_lifetime_drops) = (run.scenario, run.lost, run.hoq_lifetime_drops);
    let mechanism = scenario.file.mechanism.fabric();
    if !mechanism.deadlocks_beyond_guarantee() || hoq_lifetime_drops == 0 {
        return None;
    }
    let beyond = BeyondDlrsGuarantee::first_in(scenario)?;
    let n: u64 = lost.values().sum();
    Some(format!(
        "every message lost ({n}, on {} flows) was lost after adaptive DLR went beyond its guarantee ({beyond}) and deadlocked ({hoq_lifetime_drops} head-of-queue lifetime drops): outside DLR's guarantee, which the faults exceed (docs/simulation.md)",
        lost.len(),
    ))
}

/// The first fault set in force during a run ([`fault_sets_in_turn`])
/// that leaves pairs DLR's walk model does not connect: DLR beyond its
/// guarantee.
struct BeyondDlrsGuarantee {
    /// The faults in force, by name.
    faults: Vec<String>,
    unconnected: usize,
}

impl BeyondDlrsGuarantee {
    fn first_in(scenario: &Scenario) -> Option<Self> {
        let topo = &scenario.topo;
        let mechanism = scenario.file.mechanism.fabric();
        let (faults, unconnected) = fault_sets_in_turn(scenario)
            .into_iter()
            .map(|f| {
                let cut = pairs_dlr_does_not_connect(topo, mechanism, &f);
                (f, cut)
            })
            .find(|(_, cut)| !cut.is_empty())?;
        let faults = faults
            .switches
            .iter()
            .map(|&s| topo.node_name(NodeRef::Switch(s)).to_string())
            .chain(
                faults
                    .links
                    .iter()
                    .map(|&l| crate::controller::link_name(topo, l)),
            )
            .collect();
        Some(BeyondDlrsGuarantee {
            faults,
            unconnected: unconnected.len(),
        })
    }
}

impl std::fmt::Display for BeyondDlrsGuarantee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} pairs DLR's walk model does not connect with {} down",
            self.unconnected,
            self.faults.join(", ")
        )
    }
}

/// Without a recovery protocol, under adaptive DLR: progress broke
/// because the fabric deadlocked once the faults went beyond DLR's
/// guarantee (*Dynamic Fault Tolerance in Fat Trees*, Fig. 12). Flits are
/// still held in switches at the end, no head-of-queue lifetime broke a
/// deadlock (`hoq-lifetime: auto` turns it on only with a recovery
/// protocol, docs/sbrp.md "Deadlock"), and some fault set in force
/// during the run leaves pairs DLR's walk model does not connect.
fn stalled_beyond_adaptive_dlrs_guarantee(
    scenario: &Scenario,
    held_in_switches_flits: u64,
    hoq_lifetime_drops: u64,
) -> Option<String> {
    let mechanism = scenario.file.mechanism.fabric();
    if !mechanism.deadlocks_beyond_guarantee()
        || scenario.file.promises_delivery()
        || held_in_switches_flits == 0
        || hoq_lifetime_drops > 0
    {
        return None;
    }
    let beyond = BeyondDlrsGuarantee::first_in(scenario)?;
    Some(format!(
        "the fabric deadlocked ({held_in_switches_flits} flits still in switches) after adaptive DLR went beyond its guarantee ({beyond}), with no deadlock recovery (without a recovery protocol `hoq-lifetime: auto` is off): outside DLR's guarantee, which the faults exceed (docs/simulation.md)"
    ))
}

/// Runs one case and checks its invariants.
pub fn check(case: &Case) -> Result<(Verdict, crate::chaos::ChaosReport)> {
    check_logged(case, None)
}

/// [`check`], writing the run's event log to `events` (`flitctl sim
/// --replay SEED --events FILE`).
pub fn check_logged(
    case: &Case,
    events: Option<&std::path::Path>,
) -> Result<(Verdict, crate::chaos::ChaosReport)> {
    let scenario = case.scenario()?;
    let mut plan = crate::sim::scenario_plan(&scenario)?;
    plan.timing = TIMING;
    let unreachable = crate::chaos::cut_off_hosts(&scenario.topo, &scenario.actions);
    let sink = crate::sim::open_events(events)?;
    let out = Sim::new(&plan, sink)?.run(&unreachable)?;
    let report = crate::sim::chaos_report(&scenario, &plan, &out, &unreachable, None)?;
    let run = &report.run;
    let t = &run.totals;
    let mut violations = Vec::new();
    if run.credit_violations > 0 {
        violations.push(format!(
            "buffer-overflow: {} flits arrived at a full buffer",
            run.credit_violations
        ));
    }
    let sbrp = scenario.file.promises_delivery();
    if sbrp {
        if !run.lossless || t.retained > 0 {
            violations.push(format!(
                "exactly-once: {} sent, {} delivered, {} lost, {} duplicated, {} out of order, {} corrupted, {} misdelivered, {} still held (between connected hosts)",
                t.messages_sent, t.messages_delivered, t.messages_lost, t.duplicates, t.out_of_order, t.corrupted, t.misdelivered_packets, t.retained
            ));
        }
    } else {
        let acc = &report.accounting;
        if acc.unaccounted_messages > 0 || t.duplicates > 0 || t.misdelivered_packets > 0 {
            violations.push(format!(
                "accounted: {} lost, {} flits counted lost by cause, {} unaccounted; {} duplicated, {} misdelivered",
                acc.messages_lost, acc.accounted_flits, acc.unaccounted_messages, t.duplicates, t.misdelivered_packets
            ));
        }
    }
    // Progress: every connected host sent what it generated.
    let unsent: u64 = out
        .hosts
        .iter()
        .filter(|(n, _)| !unreachable.contains(n))
        .map(|(_, r)| {
            r.endpoint
                .source
                .generated_messages
                .saturating_sub(r.endpoint.source.messages_sent)
        })
        .sum();
    if unsent > 0 {
        violations.push(format!(
            "progress: connected hosts still had {unsent} messages unsent at the end of the drain"
        ));
    } else if sbrp && run.stall.is_some() {
        violations.push(format!(
            "progress: stalled with {} messages pending",
            run.stall.as_ref().map_or(0, |s| s.messages_pending)
        ));
    }
    let summary = format!(
        "{} {} {} actions: {} sent, {} delivered, {} lost ({} to cut-off hosts), {} re-routes, {} resent",
        topo_label(&case.topo),
        scenario.file.mechanism_name(),
        scenario.actions.len(),
        t.messages_sent,
        t.messages_delivered,
        t.messages_lost,
        t.lost_unreachable,
        report.reroutes,
        report.packets_resent
    );
    let class = (!violations.is_empty()).then(|| failure_class(case, sbrp, &violations));
    let lost = if violations.is_empty() {
        BTreeMap::new()
    } else {
        lost_by_pair(&out.hosts, &unreachable)
    };
    let hoq_lifetime_drops = run.drops.get("hoq-lifetime").copied().unwrap_or(0);
    let explained = if violations.is_empty() {
        None
    } else if sbrp && violations.iter().all(|v| v.starts_with("exactly-once")) {
        let failed = FailedRun {
            scenario: &scenario,
            out: &out,
            lost: &lost,
            hoq_lifetime_drops,
        };
        (broken_only_by_loss(t) && !lost.is_empty())
            .then(|| EXPLANATIONS.iter().find_map(|explain| explain(&failed)))
            .flatten()
    } else if !sbrp && violations.iter().all(|v| v.starts_with("progress")) {
        stalled_beyond_adaptive_dlrs_guarantee(
            &scenario,
            report.accounting.held_in_switches_flits,
            hoq_lifetime_drops,
        )
    } else {
        None
    };
    let host = |h: HostId| scenario.topo.node_name(NodeRef::Host(h)).to_string();
    let lost_flows = lost
        .iter()
        .map(|((s, d), n)| (format!("{}->{}", host(*s), host(*d)), *n))
        .collect();
    Ok((
        Verdict {
            seed: case.seed,
            violations,
            explained,
            class,
            summary,
            lost_flows,
        },
        report,
    ))
}

fn topo_label(t: &TopoSpec) -> String {
    match t {
        TopoSpec::Kary { k, n } => format!("{k}-ary {n}-tree"),
        TopoSpec::Pgft(p) => format!("PGFT({:?};{:?};{:?})", p.m, p.w, p.p),
        TopoSpec::Ruft { k, n } => format!("{k}-ary {n}-RUFT"),
        TopoSpec::Mesh(d) => format!("mesh {d:?}"),
        TopoSpec::Torus(d) => format!("torus {d:?}"),
        TopoSpec::Hypercube(d) => format!("{d}-cube"),
    }
}

/// The run seed of run `i` of a swarm seeded `seed` (SplitMix64).
pub fn run_seed(seed: u64, i: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i.wrapping_add(1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A smaller case that still fails: faults dropped one at a time (a
/// repair goes with its fault), then the traffic shortened.
pub fn shrink(case: &Case) -> Case {
    let fails = |c: &Case| {
        check(c)
            .map(|(v, _)| !v.violations.is_empty())
            .unwrap_or(false)
    };
    let mut best = case.clone();
    let mut i = 0;
    while i < best.timeline.len() {
        let mut c = best.clone();
        let (_, kind, target, _) = c.timeline[i].clone();
        c.timeline.remove(i);
        if !kind.is_repair() {
            // Its repair goes too.
            if let Some(j) = c
                .timeline
                .iter()
                .position(|e| e.2 == target && e.1.is_repair())
            {
                c.timeline.remove(j);
            }
        } else {
            i += 1;
            continue;
        }
        if fails(&c) {
            best = c;
        } else {
            i += 1;
        }
    }
    let mut i = 0;
    while i < best.stops.len() {
        let mut c = best.clone();
        c.stops.remove(i);
        if fails(&c) {
            best = c;
        } else {
            i += 1;
        }
    }
    // Shorter traffic, as long as every fault stays within it.
    loop {
        let mut c = best.clone();
        let last = c
            .timeline
            .iter()
            .map(|e| e.0)
            .chain(c.stops.iter().map(|s| s.at))
            .max()
            .unwrap_or_default();
        let d = c.file.traffic.duration.0 * 3 / 4;
        if d <= last + Duration::from_millis(2) || d < Duration::from_millis(5) {
            break;
        }
        c.file.traffic.duration = Time(d);
        if fails(&c) {
            best = c;
        } else {
            break;
        }
    }
    best
}

/// Failures shrunk per swarm (each shrink re-runs the case a few times);
/// later ones are listed with their seed for `--replay`.
const SHRINK_AT_MOST: usize = 10;

fn describe_failure(
    v: &Verdict,
    case: &Case,
    out: Option<&PathBuf>,
    shrink_it: bool,
) -> Result<String> {
    let mut s = String::new();
    match &v.explained {
        Some(why) => {
            let _ = writeln!(s, "EXPLAINED seed {}: {} — {why}", v.seed, v.summary);
        }
        None => {
            let _ = writeln!(
                s,
                "FAILED seed {} ({}): {}",
                v.seed,
                v.class.unwrap_or("-"),
                v.summary
            );
        }
    }
    for x in &v.violations {
        let _ = writeln!(s, "  violated {x}");
    }
    if !shrink_it {
        let _ = writeln!(
            s,
            "  replay with: {} (not shrunk: {SHRINK_AT_MOST} were)",
            case.replay_command()
        );
        return Ok(s);
    }
    let small = shrink(case);
    let _ = writeln!(
        s,
        "  shrunk to {} of {} timeline entries, {} ms of traffic; replay with: {}",
        small.timeline.len() + small.stops.len(),
        case.timeline.len() + case.stops.len(),
        small.file.traffic.duration.0.as_millis(),
        case.replay_command()
    );
    let _ = writeln!(s, "  --- topology.yaml\n{}", indent(&small.topo.yaml()));
    let _ = writeln!(s, "  --- swarm-{}.yaml\n{}", v.seed, indent(&small.yaml()));
    if let Some(dir) = out {
        let d = dir.join(format!("swarm-{}", v.seed));
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("topology.yaml"), small.topo.yaml())?;
        std::fs::write(d.join("scenario.yaml"), small.yaml())?;
        let _ = writeln!(s, "  written to {}", d.display());
    }
    Ok(s)
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// `flitctl sim swarm`.
pub fn run(args: SwarmArgs) -> Result<()> {
    let started = Instant::now();
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .context("starting the swarm's workers")?;
    let results: Vec<_> = pool.install(|| {
        use rayon::prelude::*;
        (0..args.runs)
            .into_par_iter()
            .filter_map(|i| {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return None;
                }
                let seed = run_seed(args.seed, i);
                let r = Case::draw_with(seed, args.stops).and_then(|c| {
                    let (v, _) = check(&c)?;
                    Ok((c, v))
                });
                let failed =
                    !matches!(&r, Ok((_, v)) if v.violations.is_empty() || v.explained.is_some());
                if failed && args.fail_fast {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Some((i, seed, r))
            })
            .collect()
    });
    let mut failures = Vec::new();
    let mut explained = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    for (_, seed, r) in &results {
        match r {
            Ok((case, v)) if !v.violations.is_empty() => {
                let shrink_it = failures.len() + explained.len() < SHRINK_AT_MOST;
                text.push_str(&describe_failure(v, case, args.out.as_ref(), shrink_it)?);
                if v.explained.is_some() {
                    explained.push(v.clone());
                } else {
                    failures.push(v.clone());
                }
            }
            Ok(_) => {}
            Err(e) => {
                let _ = writeln!(text, "ERROR seed {seed}: {e:#}");
                errors.push((*seed, format!("{e:#}")));
            }
        }
    }
    let took = started.elapsed().as_secs_f64();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "seed": args.seed,
                "runs": results.len(),
                "failures": failures,
                "explained": explained,
                "errors": errors.iter().map(|(s, e)| serde_json::json!({"seed": s, "error": e})).collect::<Vec<_>>(),
                "seconds": took,
            }))?
        );
    } else {
        print!("{text}");
        let mut by_class = std::collections::BTreeMap::<&str, usize>::new();
        for v in &failures {
            *by_class.entry(v.class.unwrap_or("-")).or_default() += 1;
        }
        if !by_class.is_empty() {
            let classes: Vec<String> = by_class.iter().map(|(c, n)| format!("{c} {n}")).collect();
            println!("failed by class: {}", classes.join(", "));
        }
        println!(
            "swarm seed {}: {} runs in {:.1} s, {} failed, {} broke an invariant in a documented way (outside the promise), {} could not run",
            args.seed,
            results.len(),
            took,
            failures.len(),
            explained.len(),
            errors.len()
        );
    }
    if !failures.is_empty() || !errors.is_empty() {
        anyhow::bail!(
            "{} of {} swarm runs broke an invariant ({} could not run)",
            failures.len(),
            results.len(),
            errors.len()
        );
    }
    Ok(())
}

/// `flitctl sim --replay SEED [--stops] [--events FILE]`.
pub fn replay(seed: u64, stops: bool, events: Option<&std::path::Path>) -> Result<()> {
    let case = Case::draw_with(seed, stops)?;
    println!("--- topology.yaml\n{}", case.topo.yaml());
    println!("--- swarm-{seed}.yaml\n{}", case.yaml());
    let (v, report) = check_logged(&case, events)?;
    print!("{report}");
    if v.violations.is_empty() {
        println!("seed {seed}: every invariant held ({})", v.summary);
        return Ok(());
    }
    for x in &v.violations {
        println!("violated {x}");
    }
    if !v.lost_flows.is_empty() {
        let flows: Vec<String> = v
            .lost_flows
            .iter()
            .map(|(f, n)| format!("{f} {n}"))
            .collect();
        println!("lost per flow: {}", flows.join(", "));
    }
    if let Some(why) = &v.explained {
        println!("explained: {why}");
    }
    anyhow::bail!("seed {seed}: {} invariants broken", v.violations.len())
}

/// A registered mechanism by its spelling (the swarm draws from fixed
/// lists, so a run's seed always draws the same one).
fn named(name: &str) -> Mechanism {
    Mechanism::parse(name).expect("the swarm names registered mechanisms")
}
