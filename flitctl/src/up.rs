//! `flitctl up`: the embedded default. Brings a topology up as local
//! processes on loopback, installs routing, drives traffic, optionally kills
//! a link or a switch mid-run (and re-routes), prints a report, and stops
//! everything.

use crate::controller::{fault_timing, link_name, Controller, Element, Policy};
use crate::events::{ControllerEvent, RoutesInstalled};
use crate::fabric::{Fabric, HostReports, Reconfiguration, ReconfigurationChoice, SwitchReports};
use crate::progress::{Progress, ProgressMode};
use crate::report::{self, RunReport};
use crate::session::{traffic_spec, Session, SessionOptions};
use anyhow::{bail, Context, Result};
use clap::Args;
use flitnet_core::analysis::intermediate::Mechanisms;
use flitnet_core::control::{DataTransport, FabricParams, Request, SwitchReport, SwitchingMode};
use flitnet_core::mechanism::dlr::{DlrConfig, DlrFaults, DlrSwitch, DlrVariant};
use flitnet_core::mechanism::ft2ei_dyn::Ft2eiDynConfig;
use flitnet_core::mechanism::intermediate::{IntermediateStats, RouteTableSummary};
use flitnet_core::routing::adaptive::{escape_vcs_per_leg, leg_tables_ordered, EscapeOrder};
use flitnet_core::routing::{registry, RoutingTables};
use flitnet_core::topology::{FaultSet, LinkId, NodeRef, PortRef, SwitchId, Topology};
use flitnet_runtime::clock::now_ns;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options shared by every command that runs traffic on a fabric.
#[derive(Args, Debug, Clone)]
pub struct TrafficArgs {
    /// Traffic pattern: uniform, all-to-all, bit-reversal, shuffle, butterfly,
    /// bit-complement, transpose, hotspot:<node>:<fraction>, shift:<s>,
    /// permutation:<file>.
    #[arg(long, default_value = "uniform")]
    pub pattern: String,
    /// Offered load per host, as a fraction of the link bandwidth.
    #[arg(long, default_value_t = 0.3)]
    pub load: f64,
    /// Message length in flits.
    #[arg(long, default_value_t = 8)]
    pub message_flits: u32,
    /// How long hosts generate traffic (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// For all-to-all: rounds through every destination.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
}

/// Link and switch parameters of the emulated fabric.
#[derive(Args, Debug, Clone)]
pub struct FabricArgs {
    /// Virtual channels per link.
    #[arg(long, default_value_t = 2)]
    pub vcs: u8,
    /// Input buffer depth per VC, in flits.
    #[arg(long, default_value_t = 16)]
    pub buffer_depth: u16,
    /// Switching mode.
    #[arg(long, value_enum, default_value_t = Switching::Wormhole)]
    pub switching: Switching,
    /// Link bandwidth in flits per second (0 = unlimited).
    #[arg(long, default_value_t = 200_000)]
    pub bandwidth: u64,
    /// Link propagation delay.
    #[arg(long, default_value = "10us", value_parser = parse_duration)]
    pub delay: Duration,
    /// A peer silent for this long is declared down.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub dead_after: Duration,
    /// Longest packet, in flits.
    #[arg(long, default_value_t = 8)]
    pub max_packet_flits: u32,
    /// Recovery protocol for packets cut by a fault: none, sbrp0, sbrp1,
    /// sbrp2 (seed 003, docs/sbrp.md).
    #[arg(long, default_value = "none", value_parser = parse_recovery)]
    pub recovery_protocol: flitnet_core::host::sbrp::RecoveryProtocol,
    /// What carries the flits between daemons: `udp` on loopback, or
    /// `ethernet`: raw Ethernet frames over one veth pair per link, in a
    /// network namespace made for the run (needs root; docs/wire.md).
    #[arg(long, value_enum, default_value_t = Transport::Udp)]
    pub transport: Transport,
    /// Ethernet transport: name of the network namespace to create (it
    /// must not exist; deleted when the run ends). Default: flitnet-<random>.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// How long a link stays down after a link error (a datagram lost or
    /// rejected by its CRC) before it retrains; 0 = no link error
    /// recovery, losses are only counted (docs/wire.md).
    #[arg(long, default_value = "10ms", value_parser = parse_duration)]
    pub link_retrain: Duration,
    /// Switches' head-of-queue lifetime: a head that waits this long for
    /// an output VC is presumed deadlocked and discarded with its worm
    /// (resent by SBRP; docs/sbrp.md "Deadlock"). `auto`: on, at
    /// 128 buffer drains (128 × max(buffer depth, max packet) × flit
    /// time, at least 50 ms;
    /// 51 ms at 20,000 flits/s and 8-flit buffers), only with
    /// `--engine local-reroute` and a recovery protocol (seed 003's faithful
    /// mode, whose adaptive VCs can deadlock once a fault cuts the escape
    /// network); `off`; or a duration (e.g. 400ms).
    #[arg(long, default_value = "auto", value_parser = parse_hoq_lifetime)]
    pub hoq_lifetime: HoqLifetime,
}

/// The shortest head-of-queue lifetime `--hoq-lifetime auto` gives real
/// daemons: a daemon that two loaded cores leave unscheduled for tens of
/// ms must not see every head it holds as deadlocked (a false positive
/// costs a resend, not a message).
pub const HOQ_LIFETIME_FLOOR_NS: u64 = 50_000_000;

/// `--hoq-lifetime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoqLifetime {
    Auto,
    Off,
    Fixed(Duration),
}

fn parse_hoq_lifetime(s: &str) -> Result<HoqLifetime, String> {
    match s {
        "auto" => Ok(HoqLifetime::Auto),
        "off" => Ok(HoqLifetime::Off),
        _ => match parse_duration(s)? {
            d if d.is_zero() => Ok(HoqLifetime::Off),
            d => Ok(HoqLifetime::Fixed(d)),
        },
    }
}

/// Whether a fabric routed by `engine` with `protocol` needs deadlock
/// recovery: seed 003's local rerouting (its adaptive VCs deadlock once a
/// fault cuts the escape network, docs/sbrp.md) with a recovery protocol to
/// resend what the lifetime discards. Everything else is deadlock-free by
/// its routing (or re-routed by the controller), and keeps the lifetime
/// off so that ordinary congestion can never cost a packet.
pub fn needs_hoq_lifetime(
    engine: &str,
    protocol: flitnet_core::host::sbrp::RecoveryProtocol,
) -> bool {
    engine == "local-reroute" && protocol.is_on()
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Ethernet,
}

fn parse_recovery(s: &str) -> Result<flitnet_core::host::sbrp::RecoveryProtocol, String> {
    flitnet_core::host::sbrp::RecoveryProtocol::parse(s)
        .ok_or_else(|| format!("unknown recovery protocol {s:?} (none, sbrp0, sbrp1, sbrp2)"))
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switching {
    Wormhole,
    Vct,
}

impl FabricArgs {
    pub fn params(&self) -> FabricParams {
        FabricParams {
            vcs: self.vcs,
            buffer_depth: self.buffer_depth,
            switching: match self.switching {
                Switching::Wormhole => SwitchingMode::Wormhole,
                Switching::Vct => SwitchingMode::VirtualCutThrough,
            },
            bandwidth_flits_per_s: (self.bandwidth > 0).then_some(self.bandwidth),
            propagation_ns: self.delay.as_nanos() as u64,
            keepalive_interval_ns: (self.dead_after.as_nanos() as u64 / 6).max(1_000_000),
            dead_after_ns: self.dead_after.as_nanos() as u64,
            mtu: 1400,
            flit_payload: 16,
            max_packet_flits: self.max_packet_flits,
            recovery: self.recovery_protocol,
            transport: match self.transport {
                Transport::Udp => DataTransport::Udp,
                Transport::Ethernet => DataTransport::Ethernet,
            },
            link_retrain_ns: self.link_retrain.as_nanos() as u64,
            head_of_queue_lifetime_ns: match self.hoq_lifetime {
                // Without the engine `auto` cannot tell: see `params_for`.
                HoqLifetime::Auto | HoqLifetime::Off => None,
                HoqLifetime::Fixed(d) => Some(d.as_nanos() as u64),
            },
        }
    }

    /// [`FabricArgs::params`] for a fabric routed by `engine`: `auto` turns
    /// the head-of-queue lifetime on where it is needed
    /// ([`needs_hoq_lifetime`]), at the default for these links
    /// ([`default_head_of_queue_lifetime_for_packets_ns`]: 128 drains of a full buffer or a longest packet, at
    /// least [`HOQ_LIFETIME_FLOOR_NS`]; 51 ms at 20,000 flits/s and 8-flit
    /// buffers).
    ///
    /// [`default_head_of_queue_lifetime_for_packets_ns`]: flitnet_core::mechanism::hoq::default_head_of_queue_lifetime_for_packets_ns
    pub fn params_for(&self, engine: &str) -> FabricParams {
        let mut p = self.params();
        if self.hoq_lifetime == HoqLifetime::Auto && needs_hoq_lifetime(engine, p.recovery) {
            let formula =
                flitnet_core::mechanism::hoq::default_head_of_queue_lifetime_for_packets_ns(
                    p.bandwidth_flits_per_s,
                    p.buffer_depth,
                    p.max_packet_flits,
                );
            p.head_of_queue_lifetime_ns = Some(formula.max(HOQ_LIFETIME_FLOOR_NS));
        }
        p
    }

    /// The `--netns` name, checked; refused without `--transport ethernet`.
    pub fn netns(&self) -> Result<Option<String>> {
        match (&self.netns, self.transport) {
            (None, _) => Ok(None),
            (Some(n), Transport::Ethernet) => {
                crate::netns::check_name(n)?;
                if crate::netns::EthernetNet::exists(n) {
                    bail!("--netns {n}: that network namespace exists already (delete it with `ip netns del {n}`, or pick another name)");
                }
                Ok(Some(n.clone()))
            }
            (Some(n), Transport::Udp) => {
                bail!("--netns {n}: a network namespace is only made for --transport ethernet")
            }
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct UpArgs {
    /// Topology file (YAML or ibnetdiscover .net).
    pub topology: PathBuf,
    #[command(flatten)]
    pub traffic: TrafficArgs,
    #[command(flatten)]
    pub fabric: FabricArgs,
    /// Routing engine (`auto`: dmodk on fat-trees, dor on meshes and tori,
    /// e-cube on hypercubes, up*/down* otherwise).
    #[arg(long, default_value = "auto")]
    pub engine: String,
    /// Install these tables instead of computing them: flitnet JSON or an
    /// OpenSM opensm-lfts.dump (`flitctl route`, docs/routing.md).
    #[arg(long, value_name = "FILE")]
    pub tables: Option<PathBuf>,
    /// Kill this link mid-run, named by one end: `NODE:PORT` (e.g. s0-0:4).
    #[arg(long)]
    /// Repeat to kill several links at the same instant.
    pub kill_link: Vec<String>,
    /// How `--kill-link` kills: `admin` tells both ends' daemons to take
    /// the port down (they know at once); `carrier` sets both veth ends
    /// down (`ip link set down`, ethernet transport only): frames vanish
    /// and the daemons must notice by themselves (keepalive timeout).
    #[arg(long, value_enum, default_value_t = KillBy::Admin)]
    pub kill_by: KillBy,
    /// SIGKILL this switch's process mid-run (its neighbours must notice).
    /// Repeat to kill several, `--kill-every` apart (the first at
    /// `--kill-at`). Not with `--kill-link`; for other fault sequences use
    /// `flitctl chaos`.
    #[arg(long)]
    pub kill_switch: Vec<String>,
    /// With several --kill-switch: time between two kills (the killed
    /// switches stay dead).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub kill_every: Duration,
    /// With --kill-switch: start each killed switch's process again this
    /// long after its kill (a transient node fault: same configuration,
    /// empty buffers, a new link epoch; it gets the initial tables, and
    /// with --notify-neighbours its neighbours' ports come up again at the
    /// same instant). A restarted switch may be named again in
    /// --kill-switch to kill it once more; it must be less than
    /// --kill-every.
    #[arg(long, value_parser = parse_duration)]
    pub restart_after: Option<Duration>,
    /// With --kill-switch: the controller takes the killed switch's
    /// neighbours' ports toward it down at the same instant, as the thesis
    /// of seed 003 assumes (each node knows whether each neighbour is
    /// faulty, no detection delay); without it they notice by keepalive
    /// (--dead-after).
    #[arg(long)]
    pub notify_neighbours: bool,
    /// Fault injection for stall diagnosis: at `--kill-at`, this switch
    /// port (`NODE:PORT`) stops returning credits to its peer, so the
    /// traffic through it stops and the run must end with a stall
    /// diagnosis and a non-zero exit. A testing tool, not a fault model.
    #[arg(long, value_name = "NODE:PORT")]
    pub withhold_credits: Option<String>,
    /// When to kill, after traffic starts.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub kill_at: Duration,
    /// What the controller does about a fault: `reroute` recomputes the
    /// tables without the failed element and installs them; `none` leaves
    /// the fabric as it is.
    #[arg(long, value_enum, default_value_t = Recovery::Reroute)]
    pub recovery: Recovery,
    /// How `reroute` swaps the tables: `live` while traffic flows,
    /// `quiesced` (hosts hold injection until nothing is in flight, so old
    /// and new tables never route one packet), `auto` = live on fat-trees,
    /// quiesced elsewhere (docs/chaos.md, "Quiesced reconfiguration").
    #[arg(long, value_enum, default_value_t = ReconfigurationChoice::Auto)]
    pub reconfiguration: ReconfigurationChoice,
    /// What switches do about a fault on their own, with no controller
    /// (k-ary n-trees only): `dlr` = dynamic local rerouting, deterministic,
    /// link and switch faults (3 VCs); `dlr-link` = link faults only (2 VCs);
    /// `dlr-adaptive` = adaptive, link and switch faults (1 VC);
    /// `dlr-adaptive-link`; `ft2ei-dyn` = seed 000's dynamic FT²EI: the
    /// switches exclude the dead link's destinations by control packets
    /// among themselves and deflect packets caught in between down an
    /// emergency path (needs `--engine ft2ei --recovery none`);
    /// `ft2ei-dyn-drop` = the same without emergency paths;
    /// `none` = drop packets for dead ports.
    /// Meshes and tori: seed 004's intermediate nodes, chosen by the hosts
    /// from the fault set the controller pushes them (`i`, `ix2`, `ix3`,
    /// `i-d`, `ix2-d`, `d`, `m`, `d-m`, `i-m`, `i-d-m`; docs/recovery.md):
    /// the switches run adaptive
    /// routing with one escape VC set per leg, so the run needs
    /// `--vcs` = legs × escape VCs per leg (2 on tori, 1 on meshes) + 1.
    #[arg(long, value_enum, default_value_t = Mechanism::None)]
    pub mechanism: Mechanism,
    /// Seed for traffic and random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Serve Prometheus metrics on every daemon (port 9100 of its address).
    #[arg(long)]
    pub metrics: bool,
    /// Serve the controller's own metrics (faults, reroute time) on this
    /// address (docs/metrics.md, "flitctl").
    #[arg(long)]
    pub controller_metrics: Option<std::net::SocketAddr>,
    /// Directory for configs, logs, events (default: a fresh private temp
    /// dir, removed after a successful run unless --keep).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Keep the default run directory after a successful run (`flitctl
    /// runs` lists kept ones, `flitctl runs --clean` removes them).
    #[arg(long)]
    pub keep: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Start the fabric even when the capacity check says this machine
    /// cannot hold it (`up` only).
    #[arg(long)]
    pub force: bool,
    /// Progress lines on stderr once a second during the traffic phase:
    /// auto = when stderr is a terminal.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillBy {
    Admin,
    Carrier,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    None,
    Dlr,
    DlrLink,
    DlrAdaptive,
    DlrAdaptiveLink,
    /// Seed 000 dynamic FT²EI (exclusion intervals by control packets).
    #[value(name = "ft2ei-dyn")]
    Ft2eiDyn,
    /// Dynamic FT²EI without emergency paths: packets caught between the
    /// fault and their switch's update are dropped.
    #[value(name = "ft2ei-dyn-drop")]
    Ft2eiDynDrop,
    /// Seed 004 I: one intermediate node, adaptive legs.
    #[value(name = "i")]
    I,
    /// Seed 004 I×2: up to two intermediate nodes.
    #[value(name = "ix2")]
    Ix2,
    /// Seed 004 I×3: up to three intermediate nodes.
    #[value(name = "ix3")]
    Ix3,
    /// Seed 004 I+D: one intermediate node, D (DOR only) on any leg.
    #[value(name = "i-d")]
    ID,
    /// Seed 004 I×2+D.
    #[value(name = "ix2-d")]
    Ix2D,
    /// Seed 004 D: adaptive routing disabled per packet, no intermediates.
    #[value(name = "d")]
    D,
    /// Seed 004 M: forced misroute runs at the start of the path.
    #[value(name = "m")]
    M,
    /// Seed 004 D+M.
    #[value(name = "d-m")]
    DM,
    /// Seed 004 I+M.
    #[value(name = "i-m")]
    IM,
    /// Seed 004 I+D+M.
    #[value(name = "i-d-m")]
    IDM,
}

impl Mechanism {
    /// The mechanism's name, as `--mechanism` spells it.
    pub fn name(self) -> String {
        use clap::ValueEnum;
        self.to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_string())
    }

    /// The seed 004 mechanism set, for the intermediate-node variants.
    pub fn intermediate(self) -> Option<Mechanisms> {
        Some(match self {
            Mechanism::I => Mechanisms::i(),
            Mechanism::Ix2 => Mechanisms::i_x(2),
            Mechanism::Ix3 => Mechanisms::i_x(3),
            Mechanism::ID => Mechanisms::i_d(),
            Mechanism::Ix2D => Mechanisms::i_x2_d(),
            Mechanism::D => Mechanisms::d(),
            Mechanism::M => Mechanisms::m(),
            Mechanism::DM => Mechanisms::d_m(),
            Mechanism::IM => Mechanisms::i_m(),
            Mechanism::IDM => Mechanisms::i_d_m(),
            _ => return None,
        })
    }

    /// The dynamic local rerouting configuration for `topo`, if any.
    pub fn dlr(self, topo: &Topology) -> Result<Option<DlrConfig>> {
        use flitnet_core::topology::Family;
        let (variant, faults) = match self {
            m if m.intermediate().is_some() => return Ok(None),
            Mechanism::None | Mechanism::Ft2eiDyn | Mechanism::Ft2eiDynDrop => return Ok(None),
            Mechanism::Dlr => (DlrVariant::Deterministic, DlrFaults::Switch),
            Mechanism::DlrLink => (DlrVariant::Deterministic, DlrFaults::Link),
            Mechanism::DlrAdaptive => (DlrVariant::Adaptive, DlrFaults::Switch),
            Mechanism::DlrAdaptiveLink => (DlrVariant::Adaptive, DlrFaults::Link),
            _ => unreachable!("intermediate-node variants returned above"),
        };
        let Family::KaryNTree { k, n } = topo.family else {
            bail!(
                "--mechanism {self:?}: dynamic local rerouting needs a k-ary n-tree, `{}` is not one",
                topo.name
            );
        };
        Ok(Some(DlrConfig::new(k, n, variant, faults)))
    }
}

impl Mechanism {
    /// The dynamic FT²EI configuration for `topo`, if this is `ft2ei-dyn`.
    pub fn ft2ei_dyn(self, topo: &Topology, args: &UpArgs) -> Result<Option<Ft2eiDynConfig>> {
        use flitnet_core::topology::Family;
        let emergency = match self {
            Mechanism::Ft2eiDyn => true,
            Mechanism::Ft2eiDynDrop => false,
            _ => return Ok(None),
        };
        let (k, n, ruft) = match topo.family {
            Family::KaryNTree { k, n } => (k, n, false),
            Family::Ruft { k, n } => (k, n, true),
            _ => bail!(
                "--mechanism ft2ei-dyn needs a k-ary n-tree or a RUFT, `{}` is neither",
                topo.name
            ),
        };
        if args.engine != "ft2ei" || args.tables.is_some() {
            bail!(
                "--mechanism ft2ei-dyn routes with the FT²EI interval tables: run with \
                 --engine ft2ei and no --tables"
            );
        }
        if args.recovery != Recovery::None {
            bail!(
                "--mechanism ft2ei-dyn reconfigures the switches by itself: run with \
                 --recovery none (a controller re-route would hide it)"
            );
        }
        // "Two exclusion intervals are enough" (seed 000 §6.3), as the engine.
        Ok(Some(Ft2eiDynConfig {
            k,
            n,
            n_ei: 2,
            emergency,
            ruft,
        }))
    }
}

/// Turns dynamic FT²EI on in every switch (seed 000 §4.5).
fn configure_ft2ei_dyn(fabric: &Fabric, cfg: Ft2eiDynConfig) -> Result<()> {
    fabric.broadcast(
        |n| matches!(n, NodeRef::Switch(_)),
        |_| Request::ConfigureFt2eiDyn { config: Some(cfg) },
    )?;
    Ok(())
}

/// What dynamic FT²EI did over the run, summed over the switches.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Ft2eiDynReport {
    pub ctrl_sent: u64,
    pub ctrl_received: u64,
    pub ctrl_dropped: u64,
    pub exclusion_updates: u64,
    pub deflections: u64,
    pub errors: u64,
    /// Switches that applied at least one exclusion update.
    pub switches_updated: u64,
    /// First fault detection to the last exclusion update anywhere (the
    /// daemons share CLOCK_MONOTONIC), if both happened.
    pub reconfiguration_ns: Option<u64>,
}

impl Ft2eiDynReport {
    pub fn from_switches(reports: &SwitchReports) -> Self {
        let mut r = Ft2eiDynReport::default();
        let (mut first_fault, mut last_update) = (u64::MAX, 0u64);
        for (_, v) in reports {
            let f = &v.counters.ft2ei;
            r.ctrl_sent += f.ctrl_sent;
            r.ctrl_received += f.ctrl_received;
            r.ctrl_dropped += f.ctrl_dropped;
            r.exclusion_updates += f.exclusion_updates;
            r.deflections += f.deflections;
            r.errors += f.errors;
            if f.exclusion_updates > 0 {
                r.switches_updated += 1;
                last_update = last_update.max(f.last_update_ns);
            }
            if f.fault_ns > 0 {
                first_fault = first_fault.min(f.fault_ns);
            }
        }
        if first_fault != u64::MAX && last_update >= first_fault {
            r.reconfiguration_ns = Some(last_update - first_fault);
        }
        r
    }
}

/// Turns dynamic local rerouting on in every switch (seed 002).
pub fn configure_reroute(fabric: &Fabric, topo: &Topology, cfg: DlrConfig) -> Result<()> {
    for s in 0..topo.num_switches() as u32 {
        // Checks the switch's place in the tree before any daemon sees it.
        DlrSwitch::from_topology(cfg, topo, s)?;
    }
    fabric.broadcast(
        |n| matches!(n, NodeRef::Switch(_)),
        |n| {
            let NodeRef::Switch(s) = n else {
                unreachable!()
            };
            let sw = &topo.switches[s as usize];
            Request::ConfigureReroute {
                config: Some(cfg),
                level: sw.level.unwrap_or(0),
                label: sw.label.clone(),
            }
        },
    )?;
    Ok(())
}

/// Time after pushing intermediate-node routes before drops are counted
/// as "after the switchover": packets whose heads left before the push
/// either meet the fault or land well within it.
pub const SWITCHOVER_SETTLE: Duration = Duration::from_millis(500);

/// A run with seed 004's intermediate nodes: the leg tables it installs and
/// what it measured at the switchover.
pub struct IntermediateSetup {
    pub mechanisms: Mechanisms,
    pub legs: u8,
    pub tables: RoutingTables,
    /// Switch drops (all reasons) when hosts had switched and old packets
    /// had settled.
    pub drops_at_switchover: Option<u64>,
}

impl IntermediateSetup {
    /// Leg tables for `topo` (a mesh or torus), refusing a fabric with
    /// fewer VCs than the mechanism's escape networks need.
    pub fn new(topo: &Topology, mechanisms: Mechanisms, vcs: u8) -> Result<Self> {
        let legs = mechanisms.max_intermediates + 1;
        // M's forced runs need the direction-order escape (seed 004 §3.6).
        let order = if mechanisms.misroute {
            EscapeOrder::DirectionOrder
        } else {
            EscapeOrder::Dor
        };
        let tables = leg_tables_ordered(topo, legs, order).with_context(|| {
            format!("--mechanism {mechanisms}: intermediate nodes need a mesh or torus")
        })?;
        if tables.vcs > vcs {
            bail!(
                "--mechanism {mechanisms} needs {} virtual channels on `{}` ({legs} legs × {} \
                 escape VCs + 1 adaptive); run with --vcs {}",
                tables.vcs,
                topo.name,
                escape_vcs_per_leg(topo)?,
                tables.vcs
            );
        }
        Ok(IntermediateSetup {
            mechanisms,
            legs,
            tables,
            drops_at_switchover: None,
        })
    }

    /// Pushes the fault set to every host (seed 004 §3.2: the route table
    /// lives at the source); returns the event-log record.
    pub fn push_faults(
        &self,
        fabric: &Fabric,
        topo: &Topology,
        faults: &FaultSet,
        events: &crate::events::EventLog,
    ) -> Result<crate::events::Record> {
        let answers = fabric
            .broadcast(
                |n| matches!(n, NodeRef::Host(_)),
                |_| Request::SetIntermediateRoutes {
                    topology: Box::new(topo.clone()),
                    faults: faults.clone(),
                    mechanism: self.mechanisms.to_string(),
                    legs: self.legs,
                },
            )
            .context("pushing the fault set to the hosts")?;
        let summaries = answers
            .into_iter()
            .map(|(_, reply)| reply.into_intermediate_routes())
            .collect::<Result<Vec<_>, _>>()?;
        let sum = |f: fn(&RouteTableSummary) -> u32| -> u64 {
            summaries.iter().map(|s| f(s) as u64).sum()
        };
        // The same event as a switch re-route (the chaos report times
        // recovery by it), saying what was installed.
        Ok(
            events.record(ControllerEvent::RoutesInstalled(RoutesInstalled {
                engine: "intermediate-nodes".into(),
                failed_links: Some(faults.links.iter().copied().collect()),
                mechanism: Some(self.mechanisms.to_string()),
                faulty_links: Some(faults.links.len()),
                routed_pairs: Some(sum(|s| s.routed)),
                not_tolerated_pairs: Some(sum(|s| s.not_tolerated)),
                disconnected_pairs: Some(sum(|s| s.disconnected)),
                ..RoutesInstalled::default()
            })),
        )
    }

    /// The `intermediate` section of the JSON report.
    pub fn report(&self, switches: &SwitchReports, hosts: &HostReports) -> IntermediateReport {
        let host_sum = |f: fn(&IntermediateStats) -> u64| -> u64 {
            hosts.iter().map(|(_, r)| f(&r.endpoint.intermediate)).sum()
        };
        let switch_sum =
            |f: fn(&SwitchReport) -> u64| -> u64 { switches.iter().map(|(_, r)| f(r)).sum() };
        let drops = switch_sum(SwitchReport::dropped_flits);
        IntermediateReport {
            mechanism: self.mechanisms.to_string(),
            legs: self.legs,
            vcs: self.tables.vcs,
            intermediate_pops: switch_sum(|r| r.counters.intermediate_pops),
            packets_via_intermediate: host_sum(|s| s.packets_via_intermediate),
            packets_deterministic: host_sum(|s| s.packets_deterministic),
            packets_misrouted: host_sum(|s| s.packets_misrouted),
            misroute_hops: switch_sum(|r| r.counters.misroute_hops),
            packets_unrouted: host_sum(|s| s.packets_unrouted),
            switch_drops: drops,
            lost_at_disabled_ports: switch_sum(|r| r.rx_dropped_down),
            drops_at_switchover: self.drops_at_switchover,
            drops_after_switchover: self.drops_at_switchover.map(|d| drops.saturating_sub(d)),
        }
    }
}

/// What seed 004's intermediate nodes did in a run (the `intermediate`
/// section of `up --json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IntermediateReport {
    pub mechanism: String,
    pub legs: u8,
    pub vcs: u8,
    /// Heads that started their next leg in a switch without ejection.
    pub intermediate_pops: u64,
    pub packets_via_intermediate: u64,
    pub packets_deterministic: u64,
    pub packets_misrouted: u64,
    pub misroute_hops: u64,
    pub packets_unrouted: u64,
    pub switch_drops: u64,
    /// Items (flits, credits) that reached a port the controller had
    /// disabled, or were still propagating on it: lost with the link.
    pub lost_at_disabled_ports: u64,
    pub drops_at_switchover: Option<u64>,
    pub drops_after_switchover: Option<u64>,
}

/// Every live switch's drops, summed.
fn total_switch_drops(fabric: &Fabric) -> Result<u64> {
    Ok(fabric
        .switch_reports()?
        .iter()
        .map(|(_, r)| r.dropped_flits())
        .sum())
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    Reroute,
    None,
}

/// Parses `5s`, `500ms`, `20us`, `100ns`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 5s, 500ms, 20us)"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}` (use ns, us, ms, s, m)"
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{text}` is not a valid duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Finds the link on `NODE:PORT`.
pub fn parse_link(topo: &Topology, spec: &str) -> Result<LinkId> {
    let (name, port) = spec
        .rsplit_once(':')
        .with_context(|| format!("link `{spec}`: expected NODE:PORT, e.g. s0-0:4"))?;
    let node = topo
        .find_node(name)
        .with_context(|| format!("link `{spec}`: no node named `{name}`"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("link `{spec}`: `{port}` is not a port number"))?;
    if port as usize >= topo.radix(node) {
        bail!(
            "link `{spec}`: {name} has no port {port} (radix {})",
            topo.radix(node)
        );
    }
    topo.link_at(PortRef { node, port })
        .with_context(|| format!("link `{spec}`: port {port} of {name} is not cabled"))
}

/// A cabled switch port named `NODE:PORT`.
pub fn parse_switch_port(topo: &Topology, spec: &str) -> Result<PortRef> {
    let link = parse_link(topo, spec)?;
    let l = &topo.links[link as usize];
    let end = [l.a, l.b]
        .into_iter()
        .find(|e| spec.rsplit_once(':').map(|(n, _)| n) == Some(topo.node_name(e.node)))
        .expect("parse_link found the link by this end");
    if !matches!(end.node, NodeRef::Switch(_)) {
        bail!("`{spec}`: credits are withheld on switch ports only");
    }
    Ok(end)
}

/// Why a run that did not deliver everything it generated failed, or
/// `None` when it delivered everything or a fault, a drop or the faults'
/// unreachable hosts account for the difference.
pub fn shortfall(run: &RunReport) -> Option<String> {
    let t = &run.totals;
    // Messages whose flits a fault dropped never arrive: their receivers
    // wait on, which looks like a stall but is the loss the faults and
    // drops already explain.
    let lost_to_faults = !run.faults.is_empty() && !run.drops.is_empty();
    if let Some(stall) = run.stall.as_ref().filter(|_| !lost_to_faults) {
        return Some(format!(
            "the traffic stalled with {} messages pending (diagnosis in the report)",
            stall.messages_pending
        ));
    }
    let explained = !run.faults.is_empty()
        || !run.drops.is_empty()
        || run.credit_violations > 0
        || !run.unreachable_hosts.is_empty();
    if t.messages_lost > 0 && !explained {
        return Some(format!(
            "{} of {} messages sent were not delivered, and no fault, drop or stall explains it",
            t.messages_lost, t.messages_sent
        ));
    }
    None
}

/// Picks the engine for `auto`.
pub fn auto_engine(topo: &Topology) -> &'static str {
    use flitnet_core::topology::Family;
    match topo.family {
        Family::KaryNTree { .. } | Family::Pgft(_) => "dmodk",
        Family::Mesh { .. } | Family::Torus { .. } => "dor",
        Family::Hypercube { .. } => "ecube",
        Family::Ruft { .. } => "ft2ei",
        _ => "updown",
    }
}

/// Computes and checks tables for `topo` minus `faults`.
pub fn compute_routes(topo: &Topology, engine: &str, faults: &FaultSet) -> Result<RoutingTables> {
    let name = if engine == "auto" {
        if faults.is_empty() {
            auto_engine(topo)
        } else if topo.family.is_fat_tree() {
            "dmodc"
        } else {
            "updown"
        }
    } else {
        engine
    };
    let engine = registry::engine(name)?;
    let tables = engine.route(topo, faults)?;
    Ok(tables)
}

pub fn run(args: UpArgs) -> Result<()> {
    crate::capacity::check_up(&args)?;
    let outcome = execute(&args)?;
    print_outcome(&args, outcome)
}

/// Prints what `up` (or `sim` on a topology) did, and fails on a shortfall.
pub fn print_outcome(args: &UpArgs, outcome: UpOutcome) -> Result<()> {
    let UpOutcome {
        run,
        reroutes,
        dlr,
        intermediate,
        ft2ei,
    } = outcome;
    if args.json {
        let mut json = serde_json::to_value(&run)?;
        json["mechanism"] = args.mechanism.name().into();
        json["reroutes"] = reroutes.into();
        if let Some(r) = &intermediate {
            json["intermediate"] = serde_json::to_value(r)?;
        }
        if let Some(r) = &ft2ei {
            json["ft2ei"] = serde_json::to_value(r)?;
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{run}");
        if dlr {
            println!("local reroutes: {reroutes}");
        }
        if let Some(r) = &ft2ei {
            println!(
                "dynamic FT²EI: {} control packets sent, {} exclusion updates on {} switches, \
                 {} emergency deflections, {} errors, reconfiguration {}",
                r.ctrl_sent,
                r.exclusion_updates,
                r.switches_updated,
                r.deflections,
                r.errors,
                r.reconfiguration_ns
                    .map_or("n/a".to_string(), |ns| format!("{:.1} µs", ns as f64 / 1e3))
            );
        }
        if let Some(r) = &intermediate {
            println!(
                "intermediate nodes ({}): {} packets routed via intermediates, {} leg advances \
                 in switches, {} drops after the switchover",
                r.mechanism,
                r.packets_via_intermediate,
                r.intermediate_pops,
                r.drops_after_switchover
                    .map_or("n/a".to_string(), |d| d.to_string())
            );
        }
    }
    if let Some(why) = shortfall(&run) {
        bail!("{why}");
    }
    Ok(())
}

/// Serves the controller until `until`, printing a progress line a second
/// when asked to. A failed report request (a daemon just killed by a
/// fault) skips that line; it never ends the run.
fn serve_with_progress(ctl: &mut Controller<'_>, progress: &mut Progress, until: Instant) {
    if !progress.is_enabled() {
        ctl.serve_until(until);
        return;
    }
    while Instant::now() < until && !crate::interrupt::requested() {
        let tick = (Instant::now() + Progress::INTERVAL).min(until);
        ctl.serve_until(tick);
        if tick < until {
            progress.print(&ctl.fabric);
        }
    }
}

/// What one `up` run produced.
pub struct UpOutcome {
    pub run: RunReport,
    /// Local reroutes counted by the switches.
    pub reroutes: u64,
    /// Whether dynamic local rerouting was on.
    pub dlr: bool,
    /// The intermediate-node report (seed 004 mechanisms only).
    pub intermediate: Option<IntermediateReport>,
    /// The dynamic FT²EI report (`--mechanism ft2ei-dyn` only).
    pub ft2ei: Option<Ft2eiDynReport>,
}

/// The ports of `s`'s neighbouring switches that face it.
pub fn neighbour_ports(topo: &Topology, s: SwitchId) -> Vec<PortRef> {
    let me = NodeRef::Switch(s);
    (0..topo.radix(me) as u16)
        .filter_map(|port| topo.peer(PortRef { node: me, port }))
        .filter(|p| matches!(p.node, NodeRef::Switch(_)) && p.node != me)
        .collect()
}

/// Brings the fabric up, runs the traffic and the fault, and returns what
/// happened (`flitctl reproduce` runs seed 003 this way).
pub fn execute(args: &UpArgs) -> Result<UpOutcome> {
    crate::session::check_before_launch(
        &args.fabric.params_for(&args.engine),
        &traffic_spec(&args.traffic, args.seed),
    )?;
    let topo = crate::topo::load(&args.topology)?;
    let kill_links = args
        .kill_link
        .iter()
        .map(|s| parse_link(&topo, s))
        .collect::<Result<Vec<_>>>()?;
    let withhold = args
        .withhold_credits
        .as_deref()
        .map(|spec| parse_switch_port(&topo, spec))
        .transpose()?;
    let kill_switches = args
        .kill_switch
        .iter()
        .map(|name| match topo.find_node(name) {
            Some(NodeRef::Switch(s)) => Ok(s),
            Some(_) => bail!("--kill-switch {name}: that is a host, not a switch"),
            None => bail!("--kill-switch {name}: no such switch"),
        })
        .collect::<Result<Vec<_>>>()?;
    let kill_switch = kill_switches.first().copied();
    if let Some(twice) = kill_switches
        .iter()
        .enumerate()
        .find(|(i, s)| kill_switches[..*i].contains(s))
        .map(|(i, _)| &args.kill_switch[i])
    {
        if args.restart_after.is_none() {
            bail!(
                "--kill-switch {twice} twice: a killed switch stays dead (unless --restart-after)"
            );
        }
    }
    if let Some(after) = args.restart_after {
        if kill_switch.is_none() {
            bail!("--restart-after restarts killed switches: it needs --kill-switch");
        }
        if kill_switches.len() > 1 && after >= args.kill_every {
            bail!("--restart-after must be less than --kill-every (a switch is back before the next kill)");
        }
        if args.recovery == Recovery::Reroute {
            bail!(
                "--restart-after with --recovery reroute: `up` does not re-route back after a \
                 restart; use --recovery none (faithful mode) or a chaos scenario \
                 (restart-switch)"
            );
        }
    }
    if kill_switches.len() > 1 && args.kill_every.is_zero() {
        bail!("several --kill-switch: say how far apart with --kill-every");
    }
    if args.notify_neighbours && kill_switch.is_none() {
        bail!("--notify-neighbours tells a killed switch's neighbours: it needs --kill-switch");
    }
    if !kill_links.is_empty() && kill_switch.is_some() {
        // One fault instant (`--kill-at`): the switch would be ignored.
        bail!(
            "--kill-link and --kill-switch together: `up` applies its faults at one instant \
             (--kill-at) and kills either links or a switch; to kill a link and then a switch \
             in one run, use a chaos scenario (flitctl chaos, docs/chaos.md, e.g. \
             topologies/scenarios/kary-4-3-dlr-sbrp2.yaml)"
        );
    }
    if args.kill_by == KillBy::Carrier && args.fabric.transport != Transport::Ethernet {
        bail!("--kill-by carrier pulls a veth cable: it needs --transport ethernet");
    }
    let inodes: Option<IntermediateSetup> = match args.mechanism.intermediate() {
        Some(m) => {
            if args.tables.is_some() {
                bail!(
                    "--mechanism {} installs its own tables; drop --tables",
                    args.mechanism.name()
                );
            }
            Some(IntermediateSetup::new(&topo, m, args.fabric.vcs)?)
        }
        None => None,
    };
    let opts = SessionOptions {
        params: args.fabric.params_for(&args.engine),
        engine: args.engine.clone(),
        seed: args.seed,
        metrics: args.metrics,
        run_dir: args.run_dir.clone(),
        keep: args.keep,
        netns: args.fabric.netns()?,
        tables: match (&args.tables, &inodes) {
            (Some(path), _) => Some(crate::route::load_tables(&topo, path)?),
            (None, Some(i)) => Some(i.tables.clone()),
            (None, None) => None,
        },
    };
    let dlr = args.mechanism.dlr(&topo)?;
    let ft2ei_dyn = args.mechanism.ft2ei_dyn(&topo, args)?;
    if let Some(c) = dlr {
        if c.faults_handled == DlrFaults::Link
            && kill_switch.is_some()
            && args.fabric.recovery_protocol.is_on()
        {
            bail!(
                "--mechanism {} routes around link faults only (seed 002 §3.4, §3.6): with \
                 --kill-switch, {} would resend into the same dead end again and again; use \
                 --mechanism dlr or dlr-adaptive (link and switch faults)",
                args.mechanism.name(),
                args.fabric.recovery_protocol.name()
            );
        }
        if c.vcs_needed() > args.fabric.vcs {
            bail!(
                "--mechanism {} needs {} virtual channels; run with --vcs {}",
                args.mechanism.name(),
                c.vcs_needed(),
                c.vcs_needed()
            );
        }
    }
    if let Some(addr) = args.controller_metrics {
        crate::ctl_metrics::install(addr)?;
    }
    let session = Session::start(topo.clone(), &opts, "up")?;
    let (fabric, events) = (session.fabric, session.events);
    let (tables, bring_up) = (session.tables, session.bring_up);
    let run_dir = session.run_dir;
    if let Some(c) = dlr {
        configure_reroute(&fabric, &topo, c)?;
        events.record(ControllerEvent::LocalRerouteConfigured { config: c });
    }
    if let Some(c) = ft2ei_dyn {
        configure_ft2ei_dyn(&fabric, c)?;
        events.record(ControllerEvent::Ft2eiDynConfigured { config: c });
    }
    let policy = Policy {
        reroute: args.recovery == Recovery::Reroute,
        engine: args.engine.clone(),
        intermediate: inodes,
        reconfiguration: Reconfiguration::choose(args.reconfiguration, &topo),
        vcs: args.fabric.vcs,
    };
    let mut ctl = Controller::new(&topo, fabric, events.clone(), tables.clone(), policy);
    let spec = traffic_spec(&args.traffic, args.seed);
    ctl.fabric.start_traffic(&spec)?;
    let traffic_start = Instant::now();
    let mut progress = Progress::new(args.progress, traffic_start, args.traffic.duration);
    events.record(ControllerEvent::traffic_started(&spec.pattern));
    let mut faults = FaultSet::none();
    // The faults `up` injected, one record per instant, with what they
    // acted on.
    let mut injected: Vec<(crate::events::Record, Vec<Element>)> = Vec::new();
    let mut drops_at_switchover = None;
    // One fault step per `--kill-switch` (`--kill-every` apart), or the
    // links all at once.
    let steps: Vec<Option<SwitchId>> = if !kill_links.is_empty() {
        vec![None]
    } else {
        kill_switches.iter().copied().map(Some).collect()
    };
    for (k, step) in steps.into_iter().enumerate() {
        let at = args.kill_at + args.kill_every * k as u32;
        serve_with_progress(&mut ctl, &mut progress, traffic_start + at);
        if crate::interrupt::requested() {
            break;
        }
        // The fault happens when its injection starts: detections can come
        // back before the injection call returns.
        let started_ns = now_ns();
        if let Some(s) = step {
            ctl.fabric.kill(NodeRef::Switch(s))?;
            if args.notify_neighbours {
                for live in neighbour_ports(&topo, s) {
                    ctl.fabric.set_port(live, false)?;
                }
            }
            faults.switches.insert(s);
            let name = topo.node_name(NodeRef::Switch(s)).to_string();
            crate::ctl_metrics::fault("switch-sigkill", &name);
            let r = events.record_at(started_ns, ControllerEvent::fault("switch-sigkill", name));
            injected.push((r, vec![Element::Switch(s)]));
        } else {
            let kind = match args.kill_by {
                KillBy::Admin => "link-down",
                KillBy::Carrier => "carrier-down",
            };
            let mut names = Vec::new();
            for &l in &kill_links {
                match args.kill_by {
                    KillBy::Admin => ctl.fabric.set_link(l, false)?,
                    KillBy::Carrier => ctl.fabric.set_carrier(l, false)?,
                }
                faults.links.insert(l);
                names.push(link_name(&topo, l));
            }
            let what = names.join(",");
            crate::ctl_metrics::fault(kind, &what);
            let r = events.record_at(started_ns, ControllerEvent::fault(kind, what));
            injected.push((r, kill_links.iter().map(|&l| Element::Link(l)).collect()));
        }
        if ctl.policy.intermediate.is_some() {
            // Seed 004: once the hosts route around the faults, packets
            // whose heads left before the push may still meet them; give
            // them time to, then count drops from here on.
            let left = args
                .traffic
                .duration
                .saturating_sub(traffic_start.elapsed());
            ctl.serve_until_rerouted(Instant::now() + left / 2);
            let settle = SWITCHOVER_SETTLE.min(
                args.traffic
                    .duration
                    .saturating_sub(traffic_start.elapsed())
                    / 2,
            );
            ctl.serve_until(Instant::now() + settle);
            drops_at_switchover = Some(total_switch_drops(&ctl.fabric)?);
        }
        if let (Some(after), Some(s)) = (args.restart_after, step) {
            serve_with_progress(&mut ctl, &mut progress, traffic_start + at + after);
            let started_ns = now_ns();
            // The initial tables (the controller does not re-route in
            // this mode).
            ctl.fabric
                .restart_switch(s, &tables, Duration::from_secs(10))?;
            if args.notify_neighbours {
                for live in neighbour_ports(&topo, s) {
                    ctl.fabric.set_port(live, true)?;
                }
            }
            let name = topo.node_name(NodeRef::Switch(s)).to_string();
            events.record_at(started_ns, ControllerEvent::repair("switch-restart", name));
        }
    }
    if let Some(end) = withhold {
        serve_with_progress(&mut ctl, &mut progress, traffic_start + args.kill_at);
        ctl.fabric.withhold_credits(end, true)?;
        let name = format!("{}:{}", topo.node_name(end.node), end.port);
        events.record(ControllerEvent::fault("withhold-credits", name));
    }
    // Let the traffic phase finish, then give in-flight messages time to land.
    serve_with_progress(
        &mut ctl,
        &mut progress,
        traffic_start + args.traffic.duration,
    );
    crate::session::stop_traffic_if_interrupted(&ctl.fabric, &events);
    let records = events.snapshot();
    let fault_log = injected
        .iter()
        .map(|(r, elements)| {
            let handled = fault_timing(&topo, elements, false, r.time_ns, &records);
            report::FaultTiming::new(r, handled.detected.as_ref(), handled.installed.as_ref())
        })
        .collect();
    let Controller { fabric, policy, .. } = ctl;
    let mut inodes = policy.intermediate;
    if let Some(i) = inodes.as_mut() {
        i.drops_at_switchover = drops_at_switchover;
    }
    // With a recovery protocol, senders hold each message for the hold
    // window after it left: drain until they have let go (or a resend is
    // shown stuck), so `retained` counts only what is really still held.
    let params = args.fabric.params_for(&args.engine);
    let drain = report::Drain {
        until_released: params.recovery.is_on(),
        unreachable: report::unreachable_hosts(&topo, &faults),
    };
    // Resends after a fault may still be on their way when traffic ends.
    let timeout = if drain.until_released {
        Duration::from_secs(10) + Duration::from_nanos(params.recovery_hold_ns())
    } else {
        Duration::from_secs(5)
    };
    let drained = report::drain_watch(&fabric, timeout, &drain)?;
    let reports = drained.reports;
    let switch_reports = fabric.switch_reports()?;
    let stall = drained
        .stalled_for
        .map(|quiet| crate::stall::diagnose(&topo, &reports, &switch_reports, quiet));
    report::save_reports(&run_dir, &topo, &reports, &switch_reports)?;
    let reroutes: u64 = switch_reports
        .iter()
        .map(|(_, r)| r.counters.reroutes)
        .sum();
    let intermediate = inodes.as_ref().map(|i| i.report(&switch_reports, &reports));
    let ft2ei = ft2ei_dyn.map(|_| Ft2eiDynReport::from_switches(&switch_reports));
    let mut run = RunReport::build(
        &topo,
        &tables.engine,
        &spec,
        reports.clone(),
        switch_reports,
        fault_log,
        bring_up,
    );
    run.stall = stall;
    run.account_unreachable(&topo, &reports, &drain.unreachable);
    fabric.shutdown()?;
    Ok(UpOutcome {
        run,
        reroutes,
        dlr: dlr.is_some(),
        intermediate,
        ft2ei,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("20us").unwrap(), Duration::from_micros(20));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("fast")
            .unwrap_err()
            .contains("not a duration"));
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn links_are_found_by_either_end_and_errors_name_the_problem() {
        let topo = flitnet_core::topology::generators::kary_ntree(4, 2).unwrap();
        let l = parse_link(&topo, "s0-0:4").unwrap();
        let link = &topo.links[l as usize];
        let other = link.other(PortRef::switch(0, 4)).unwrap();
        let spec = format!("{}:{}", topo.node_name(other.node), other.port);
        assert_eq!(parse_link(&topo, &spec).unwrap(), l);
        assert!(parse_link(&topo, "nope:1")
            .unwrap_err()
            .to_string()
            .contains("no node named `nope`"));
        assert!(parse_link(&topo, "s0-0:99")
            .unwrap_err()
            .to_string()
            .contains("has no port 99"));
        assert!(parse_link(&topo, "s0-0")
            .unwrap_err()
            .to_string()
            .contains("expected NODE:PORT"));
    }
}
