//! Chaos scenario files: what `flitctl chaos SCENARIO.yaml` runs.
//!
//! ```yaml
//! topology: ../kary-4-3.yaml        # relative to this file
//! mechanism: reroute                # reroute | none | sbrp0/1/2 | dlr… | i …
//! recovery-protocol: none           # with dlr…: sbrp0/1/2 on top of it
//! seed: 1
//! traffic: {pattern: uniform, load: 0.05, duration: 6s}
//! fabric: {bandwidth: 20000, dead-after: 300ms}
//! timeline:
//!   - {at: 1.5s, action: kill-link, target: "s0-0:4"}
//!   - {at: 3s, action: restore-link, target: "s0-0:4"}
//!   - {at: 3.5s, action: corrupt, target: "s1-0:2", count: 5}
//! random: {rate-per-s: 0.02, seed: 7, kinds: [kill-link], repair-after: 1s}
//! ```
//!
//! Everything is checked before any process starts ([`Scenario::load`]):
//! unknown keys (serde `deny_unknown_fields`), unknown mechanisms, actions
//! and elements, times out of order or beyond the traffic duration, repairs
//! of elements that are not broken. Errors name the file, the line and the
//! timeline entry.

use crate::mechanism::Mechanism as FabricMechanism;
use crate::parse::parse_duration;
use anyhow::{bail, Context, Result};
use flitnet_core::control::{DataTransport, FabricParams, SwitchLatency, SwitchingMode};
use flitnet_core::mechanism::sbrp::RecoveryProtocol;
use flitnet_core::mechanism::RunSpec;
use flitnet_core::topology::{FaultSet, LinkId, NodeRef, PortRef, SwitchId, Topology};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A duration written `1.5s`, `300ms`, … or a bare number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Time(pub Duration);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Number(n) => n.to_string(),
            Raw::Text(t) => t,
        };
        parse_duration(&text)
            .map(Time)
            .map_err(serde::de::Error::custom)
    }
}

/// What the controller (and the fabric) do about faults: `reroute`, or a
/// registered mechanism by its one spelling (`none`, `sbrp1`, `dlr-link`,
/// `i-d`, …; [`crate::mechanism::Mechanism`]).
///
/// - `reroute`: recompute tables without the failed elements on every
///   detected fault, and back on every repair.
/// - `none`: leave the tables alone; packets routed to a dead port are
///   dropped.
/// - `sbrp0`, `sbrp1`, `sbrp2`: controller re-routing as `reroute`, plus
///   source-based recovery of the packets the faults cut (docs/sbrp.md):
///   every message is promised delivered exactly once.
/// - the dynamic local rerouting variants (k-ary n-trees): the switches
///   route around faults on their own; the controller leaves the tables
///   alone.
/// - the intermediate-node variants (meshes and tori): on every detected
///   fault the controller pushes the fault set to the hosts, which route
///   affected pairs through intermediate nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    Reroute,
    Fabric(FabricMechanism),
}

impl Mechanism {
    /// No mechanism.
    pub const NONE: Mechanism = Mechanism::Fabric(FabricMechanism::NONE);

    /// `reroute` or a registered mechanism's name.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "reroute" => Ok(Mechanism::Reroute),
            _ => FabricMechanism::parse(name)
                .map(Mechanism::Fabric)
                .map_err(|e| e.replace("(known: none,", "(known: reroute, none,")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Reroute => "reroute",
            Mechanism::Fabric(m) => m.name(),
        }
    }

    /// The registered mechanism the fabric runs (`none` for `reroute`).
    pub fn fabric(self) -> FabricMechanism {
        match self {
            Mechanism::Reroute => FabricMechanism::NONE,
            Mechanism::Fabric(m) => m,
        }
    }

    /// The intermediate-node mechanism set of the intermediate-node variants.
    pub fn intermediate(self) -> Option<flitnet_core::mechanism::intermediate::Mechanisms> {
        self.fabric().intermediate()
    }

    /// Whether the controller acts on detected faults (re-routes the
    /// switches, or pushes the fault set to the hosts).
    pub fn acts_on_faults(self) -> bool {
        self == Mechanism::Reroute
            || self.recovery_protocol().is_on()
            || self.intermediate().is_some()
    }

    /// The recovery protocol the fabric runs with (SBRP levels only).
    pub fn recovery_protocol(self) -> RecoveryProtocol {
        self.fabric().recovery_protocol()
    }

    /// Whether the mechanism promises every message delivered exactly once
    /// (between hosts the faults never cut off).
    pub fn promises_delivery(self) -> bool {
        self.recovery_protocol().is_on()
    }

    /// One of the dynamic local rerouting variants.
    pub fn is_dlr(self) -> bool {
        self.fabric().is_dlr()
    }
}

impl<'de> Deserialize<'de> for Mechanism {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Mechanism::parse(&name).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for Mechanism {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One kind of fault or repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionKind {
    KillLink,
    RestoreLink,
    KillSwitch,
    RestoreSwitch,
    SigkillSwitch,
    RestartSwitch,
    /// The switch's process stopped for `duration` with its state kept,
    /// then let run again (live: SIGSTOP, then SIGCONT; what a process
    /// starved of CPU does to its neighbours).
    StopSwitch,
    Corrupt,
    /// Every ordered pair of hosts pings once (`fabric.tun` only).
    Pingall,
    /// An iperf3 flow between two hosts (`fabric.tun` only).
    Iperf3,
}

impl ActionKind {
    pub fn name(self) -> &'static str {
        match self {
            ActionKind::KillLink => "kill-link",
            ActionKind::RestoreLink => "restore-link",
            ActionKind::KillSwitch => "kill-switch",
            ActionKind::RestoreSwitch => "restore-switch",
            ActionKind::SigkillSwitch => "sigkill-switch",
            ActionKind::RestartSwitch => "restart-switch",
            ActionKind::StopSwitch => "stop-switch",
            ActionKind::Corrupt => "corrupt",
            ActionKind::Pingall => "pingall",
            ActionKind::Iperf3 => "iperf3",
        }
    }

    /// A program run on the hosts' IP interfaces, not a fault or repair.
    pub fn is_application(self) -> bool {
        matches!(self, ActionKind::Pingall | ActionKind::Iperf3)
    }

    fn targets_link(self) -> bool {
        matches!(
            self,
            ActionKind::KillLink | ActionKind::RestoreLink | ActionKind::Corrupt
        )
    }

    /// A repair (as opposed to a fault).
    pub fn is_repair(self) -> bool {
        matches!(
            self,
            ActionKind::RestoreLink | ActionKind::RestoreSwitch | ActionKind::RestartSwitch
        )
    }

    /// The repair undoing this fault, if any.
    fn repair(self) -> Option<ActionKind> {
        match self {
            ActionKind::KillLink => Some(ActionKind::RestoreLink),
            ActionKind::KillSwitch => Some(ActionKind::RestoreSwitch),
            ActionKind::SigkillSwitch => Some(ActionKind::RestartSwitch),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TimelineEntry {
    pub at: Time,
    pub action: ActionKind,
    /// `NODE:PORT` for link actions, a switch name for switch actions.
    #[serde(default)]
    pub target: Option<String>,
    /// Datagrams to corrupt (corrupt only).
    #[serde(default)]
    pub count: Option<u32>,
    /// iperf3: the host sending (`iperf3 -c`).
    #[serde(default)]
    pub client: Option<String>,
    /// iperf3: the host receiving (`iperf3 -s`).
    #[serde(default)]
    pub server: Option<String>,
    /// iperf3: how long the client sends, whole seconds (`-t`);
    /// stop-switch: how long the switch stays stopped.
    #[serde(default)]
    pub duration: Option<Time>,
    /// iperf3: the reporting interval (`-i`), 100 ms at least.
    #[serde(default)]
    pub interval: Option<Time>,
    /// iperf3: `tcp` (default) or `udp`.
    #[serde(default)]
    pub protocol: Option<Protocol>,
    /// iperf3: the target rate, `#[KMG]` bits/s (`-b`; iperf3's default
    /// for UDP is 1M, for TCP unlimited).
    #[serde(default)]
    pub bitrate: Option<String>,
}

/// An iperf3 flow's transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// What an application action runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Application {
    /// Every ordered pair of hosts pings once.
    Pingall,
    /// `iperf3 -c client → -s server`.
    Iperf3(Iperf3Flow),
}

/// One iperf3 flow of a scenario, checked (times emulated).
#[derive(Clone, Debug, PartialEq)]
pub struct Iperf3Flow {
    pub client: String,
    pub server: String,
    pub duration: Duration,
    pub interval: Duration,
    pub protocol: Protocol,
    pub bitrate: Option<String>,
}

/// The reporting interval of an iperf3 action without `interval`.
pub const DEFAULT_IPERF3_INTERVAL: Duration = Duration::from_millis(250);

/// A checked application action of the timeline.
#[derive(Clone, Debug)]
pub struct AppAction {
    /// After traffic starts.
    pub at: Duration,
    pub app: Application,
    /// Where it came from: `timeline[2] (line 14)`.
    pub origin: String,
}

/// Bits per second of an iperf3 rate, `#[KMG]` (`4M`, `500k`, `1.5G`).
pub fn parse_bitrate(text: &str) -> Result<f64> {
    let t = text.trim();
    let (number, scale) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let scale = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'G' => 1e9,
                _ => bail!("bitrate `{text}`: the unit is K, M or G (bits/s)"),
            };
            (&t[..i], scale)
        }
        _ => (t, 1.0),
    };
    match number.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 => Ok(n * scale),
        _ => bail!("bitrate `{text}` must be a positive number of bits/s with an optional K, M or G (e.g. 4M)"),
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RandomFaults {
    /// Faults per second per element (Poisson).
    pub rate_per_s: f64,
    pub seed: u64,
    /// Fault kinds to draw from (repairs are not faults).
    pub kinds: Vec<ActionKind>,
    /// Repair each fault this long after it (None: faults are permanent).
    #[serde(default)]
    pub repair_after: Option<Time>,
    /// Datagrams per corrupt fault.
    #[serde(default = "default_corrupt_count")]
    pub corrupt_count: u32,
}

fn default_corrupt_count() -> u32 {
    10
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct TrafficSection {
    pub pattern: String,
    pub load: f64,
    pub message_flits: u32,
    pub duration: Time,
    pub rounds: u32,
}

impl TrafficSection {
    /// `pattern: none`: no generated traffic (IP traffic alone).
    pub fn generates_nothing(&self) -> bool {
        self.pattern == "none"
    }

    /// The traffic the hosts run, with `seed`.
    pub fn spec(&self, seed: u64) -> flitnet_core::control::TrafficSpec {
        flitnet_core::control::TrafficSpec {
            pattern: crate::traffic::absolute_permutation(&self.pattern),
            load: self.load,
            message_flits: self.message_flits,
            duration_ns: self.duration.0.as_nanos() as u64,
            rounds: self.rounds,
            seed,
        }
    }
}

impl Default for TrafficSection {
    fn default() -> Self {
        TrafficSection {
            pattern: "uniform".into(),
            load: 0.05,
            message_flits: 8,
            duration: Time(Duration::from_secs(5)),
            rounds: 1,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct FabricSection {
    pub vcs: u8,
    pub buffer_depth: u16,
    pub switching: SwitchingMode,
    /// Flits per second per link (0 = unlimited).
    pub bandwidth: u64,
    pub delay: Time,
    pub dead_after: Time,
    pub max_packet_flits: u32,
    /// `shm` (default: shared-memory rings), `udp` or `ethernet` (veth
    /// pairs in a network namespace made for the run; needs root,
    /// docs/wire.md "Transports").
    pub transport: DataTransport,
    /// How long a link stays down after a link error before it retrains
    /// (0 = no link error recovery; docs/wire.md).
    pub link_retrain: Time,
    /// How the controller swaps tables when it re-routes: `auto`, `live`
    /// or `quiesced` (docs/chaos.md, "Quiesced reconfiguration").
    pub reconfiguration: crate::fabric::ReconfigurationChoice,
    /// Switches' head-of-queue lifetime (deadlock recovery: a head that
    /// waits this long for an output VC is discarded with its worm and,
    /// under SBRP, resent; docs/sbrp.md "Deadlock"): `auto` (the default,
    /// as `--hoq-lifetime`), `off` (or 0), or a duration.
    pub hoq_lifetime: HoqKey,
    /// Switch traversal latency: flit times (`4ft`) or a duration
    /// (`250ns`); docs/performance.md, "The timing model". Default: the
    /// topology file's `switch-latency:`, else 4ft.
    pub switch_latency: Option<ScenarioSwitchLatency>,
    /// Crossbar speedup (1 = none). Default: the topology file's
    /// `crossbar-speedup:`, else 1.
    pub crossbar_speedup: Option<u8>,
    /// Time dilation: a whole factor, or `auto` (the default) to calibrate
    /// on this machine (docs/fidelity.md).
    pub time_dilation: DilationKey,
    /// An IP interface per host (`flitctl up --tun`, docs/ip.md; root):
    /// programs run with `flitctl exec` cross the fabric during the run.
    pub tun: bool,
    /// SBRP's receiver gap recovery and tail probes (`flitctl up
    /// --gap-recovery`): `on` (default) or `off`.
    pub gap_recovery: crate::spec::OnOff,
}

/// `switch-latency:` as written (`4ft`, `250ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScenarioSwitchLatency(pub SwitchLatency);

/// A key written as a whole number (`8`) or as text (`auto`, `4ft`), as
/// text.
fn whole_number_or_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }
    Ok(match Raw::deserialize(d)? {
        Raw::Number(n) => n.to_string(),
        Raw::Text(t) => t,
    })
}

impl<'de> Deserialize<'de> for ScenarioSwitchLatency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = whole_number_or_text(d)?;
        SwitchLatency::parse(&text)
            .map(ScenarioSwitchLatency)
            .map_err(|e| serde::de::Error::custom(e.0))
    }
}

/// `time-dilation:` in a scenario: `auto` or a whole factor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DilationKey(pub flitnet_runtime::clock::Dilation);

impl Default for DilationKey {
    fn default() -> Self {
        DilationKey(flitnet_runtime::clock::Dilation::Auto)
    }
}

impl<'de> Deserialize<'de> for DilationKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = whole_number_or_text(d)?;
        text.parse()
            .map(DilationKey)
            .map_err(serde::de::Error::custom)
    }
}

/// `hoq-lifetime:` as written (`auto`, `off`, `400ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoqKey(pub crate::up::HoqLifetime);

impl<'de> Deserialize<'de> for HoqKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = whole_number_or_text(d)?;
        crate::up::parse_hoq_lifetime(&text)
            .map(HoqKey)
            .map_err(serde::de::Error::custom)
    }
}

impl Default for FabricSection {
    /// The flags' defaults ([`crate::spec::FabricSpec::default`]).
    fn default() -> Self {
        let d = crate::spec::FabricSpec::default();
        FabricSection {
            vcs: d.vcs,
            buffer_depth: d.buffer_depth,
            switching: d.switching,
            bandwidth: d.bandwidth,
            delay: Time(d.delay),
            dead_after: Time(d.dead_after),
            max_packet_flits: d.max_packet_flits,
            transport: d.transport,
            link_retrain: Time(d.link_retrain),
            reconfiguration: Default::default(),
            hoq_lifetime: HoqKey(d.hoq_lifetime),
            switch_latency: None,
            crossbar_speedup: None,
            time_dilation: DilationKey::default(),
            tun: false,
            gap_recovery: crate::spec::OnOff::On,
        }
    }
}

impl FabricSection {
    /// The section as a [`crate::spec::FabricSpec`] (the recovery protocol
    /// is the scenario's: [`ScenarioFile::protocol`]).
    pub fn spec(&self) -> crate::spec::FabricSpec {
        crate::spec::FabricSpec {
            vcs: self.vcs,
            buffer_depth: self.buffer_depth,
            switching: self.switching,
            bandwidth: self.bandwidth,
            delay: self.delay.0,
            dead_after: self.dead_after.0,
            max_packet_flits: self.max_packet_flits,
            recovery_protocol: RecoveryProtocol::None,
            transport: self.transport,
            link_retrain: self.link_retrain.0,
            hoq_lifetime: self.hoq_lifetime.0,
            switch_latency: self.switch_latency.map(|l| l.0).unwrap_or_default(),
            crossbar_speedup: self
                .crossbar_speedup
                .unwrap_or(crate::spec::DEFAULT_CROSSBAR_SPEEDUP),
            gap_recovery: self.gap_recovery == crate::spec::OnOff::On,
        }
    }

    /// The daemons' parameters, without a recovery protocol or an engine
    /// (the bounds checks; [`ScenarioFile::params`] is the run's).
    pub fn params(&self) -> FabricParams {
        self.spec().params()
    }
}

/// The file as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ScenarioFile {
    pub topology: PathBuf,
    pub mechanism: Mechanism,
    /// SBRP on top of dynamic local rerouting (`dlr…` mechanisms only):
    /// the switches route around the faults on their own, and every packet
    /// a fault cuts is recovered by its sender (docs/recovery.md "DLR with
    /// SBRP"). `none` (default), `sbrp0`, `sbrp1`, `sbrp2`.
    #[serde(default)]
    pub recovery_protocol: RecoveryProtocol,
    #[serde(default = "default_engine")]
    pub engine: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    #[serde(default)]
    pub traffic: TrafficSection,
    #[serde(default)]
    pub fabric: FabricSection,
    #[serde(default)]
    pub timeline: Vec<TimelineEntry>,
    #[serde(default)]
    pub random: Option<RandomFaults>,
}

impl ScenarioFile {
    /// The daemons' parameters for this scenario: its fabric, its recovery
    /// protocol, and the head-of-queue lifetime its engine and mechanism
    /// need.
    pub fn params(&self) -> FabricParams {
        let mut spec = self.fabric.spec();
        spec.recovery_protocol = self.protocol();
        spec.params_for(&self.engine, self.mechanism.fabric())
    }

    /// The recovery protocol the fabric runs: the SBRP level of an `sbrp…`
    /// mechanism, or `recovery-protocol` with a `dlr…` one.
    pub fn protocol(&self) -> RecoveryProtocol {
        match self.mechanism.recovery_protocol() {
            RecoveryProtocol::None => self.recovery_protocol,
            p => p,
        }
    }

    /// Whether the run promises every message delivered exactly once
    /// (between hosts the faults never cut off): whenever SBRP runs.
    pub fn promises_delivery(&self) -> bool {
        self.protocol().is_on()
    }

    /// The mechanism as reports name it: `dlr+sbrp2` for DLR with SBRP.
    pub fn mechanism_name(&self) -> String {
        if self.mechanism.is_dlr() && self.recovery_protocol.is_on() {
            format!(
                "{}+{}",
                self.mechanism.name(),
                self.recovery_protocol.name()
            )
        } else {
            self.mechanism.name().to_string()
        }
    }
}

fn default_engine() -> String {
    "auto".into()
}

fn default_seed() -> u64 {
    1
}

/// The element an action applies to, resolved against the topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// A link, and the end named (corrupt damages what that end sends).
    Link {
        link: LinkId,
        end: PortRef,
    },
    Switch(SwitchId),
}

/// One checked action of the schedule.
#[derive(Clone, Debug)]
pub struct Action {
    /// After traffic starts.
    pub at: Duration,
    pub kind: ActionKind,
    pub target: Target,
    /// The target as written (or generated), for reports.
    pub label: String,
    pub count: u32,
    /// How long a stop-switch keeps the switch stopped (zero otherwise).
    pub lasts: Duration,
    /// Where it came from: `timeline[2] (line 14)` or `random`.
    pub origin: String,
}

impl Action {
    /// Applies a kill or a repair to the faults in force; returns whether
    /// it was one (corruptions and the like change no fault set).
    pub fn apply_to(&self, faults: &mut FaultSet) -> bool {
        match (self.kind, self.target) {
            (ActionKind::KillLink, Target::Link { link, .. }) => {
                faults.links.insert(link);
            }
            (ActionKind::RestoreLink, Target::Link { link, .. }) => {
                faults.links.remove(&link);
            }
            (ActionKind::KillSwitch | ActionKind::SigkillSwitch, Target::Switch(s)) => {
                faults.switches.insert(s);
            }
            (ActionKind::RestoreSwitch | ActionKind::RestartSwitch, Target::Switch(s)) => {
                faults.switches.remove(&s);
            }
            _ => return false,
        }
        true
    }

    /// The ports this repair would bring up that stay down, given the
    /// faults in force before it (`before`, by [`Action::apply_to`]): a
    /// port carries traffic only while its link is not killed and its own
    /// switch is not killed. So a link restored while a switch at one end
    /// is killed stays down at that end (the switch is still dead), and a
    /// switch restored or restarted keeps its ends of killed links down.
    /// Empty for anything but restore-link, restore-switch and
    /// restart-switch.
    pub fn held_down(&self, topo: &Topology, before: &FaultSet) -> Vec<PortRef> {
        match (self.kind, self.target) {
            (ActionKind::RestoreLink, Target::Link { link, .. }) => {
                let l = &topo.links[link as usize];
                [l.a, l.b]
                    .into_iter()
                    .filter(
                        |e| matches!(e.node, NodeRef::Switch(s) if before.switches.contains(&s)),
                    )
                    .collect()
            }
            (ActionKind::RestoreSwitch | ActionKind::RestartSwitch, Target::Switch(s)) => topo
                .switches[s as usize]
                .cabled_ports()
                .filter(|(_, l)| before.links.contains(l))
                .map(|(port, _)| PortRef::switch(s, port))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// A checked scenario: everything needed to run it.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub path: PathBuf,
    pub file: ScenarioFile,
    pub topo: Topology,
    pub topology_path: PathBuf,
    /// Timeline and random actions merged, in time order.
    pub actions: Vec<Action>,
    /// The timeline's applications (pingall, iperf3), in time order.
    pub apps: Vec<AppAction>,
}

/// The 1-based line of item `index` of the top-level list `key`, found by
/// scanning the text (the YAML parser keeps no positions for values).
fn entry_line(text: &str, key: &str, index: usize) -> Option<usize> {
    let mut lines = text.lines().enumerate();
    let prefix = format!("{key}:");
    lines.find(|(_, l)| l.starts_with(&prefix))?;
    let mut seen = 0;
    let mut indent = None;
    for (n, l) in lines {
        let trimmed = l.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let depth = l.len() - trimmed.len();
        if depth == 0 && !trimmed.starts_with('-') {
            return None; // next top-level key
        }
        if trimmed.starts_with('-') && indent.is_none_or(|i| i == depth) {
            indent = Some(depth);
            if seen == index {
                return Some(n + 1);
            }
            seen += 1;
        }
    }
    None
}

/// Is `s` a leaf switch (one with a host attached)? Faults there cut hosts
/// off, which no rerouting can mend (spec 002 §3.2).
pub fn is_leaf(topo: &Topology, s: SwitchId) -> bool {
    let node = NodeRef::Switch(s);
    (0..topo.radix(node) as u16).any(|port| {
        topo.peer(PortRef { node, port })
            .is_some_and(|p| matches!(p.node, NodeRef::Host(_)))
    })
}

fn resolve(topo: &Topology, kind: ActionKind, target: &str) -> Result<Target> {
    if kind.targets_link() {
        let link = crate::parse::parse_link(topo, target)?;
        let (name, port) = target.rsplit_once(':').expect("parse_link checked");
        let node = topo.find_node(name).expect("parse_link checked");
        let port: u16 = port.parse().expect("parse_link checked");
        if kind == ActionKind::Corrupt && !matches!(node, NodeRef::Switch(_)) {
            bail!("corrupt `{target}`: corruption is injected by switches; name the switch end of the link");
        }
        Ok(Target::Link {
            link,
            end: PortRef { node, port },
        })
    } else {
        match topo.find_node(target) {
            Some(NodeRef::Switch(s)) => Ok(Target::Switch(s)),
            Some(NodeRef::Host(_)) => bail!("`{target}` is a host, not a switch"),
            None => bail!("no switch named `{target}`"),
        }
    }
}

impl Scenario {
    /// Reads and checks `path`. Nothing is started.
    pub fn load(path: &Path) -> Result<Scenario> {
        let text = flitnet_core::input::read_bounded(path)
            .with_context(|| format!("reading scenario {}", path.display()))?;
        Self::parse(path, &text)
    }

    /// Checks scenario `text` (read from `path`, which relative topology
    /// paths are resolved against).
    pub fn parse(path: &Path, text: &str) -> Result<Scenario> {
        flitnet_core::input::check_yaml(text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let mut file: ScenarioFile = serde_yaml_ng::from_str(text).map_err(|e| {
            // A value refused by its own parser (a mechanism's name) comes
            // without a position: name the line of its key.
            let key_line = (!e.to_string().contains(" line ")
                && e.to_string().contains("mechanism"))
            .then(|| text.lines().position(|l| l.starts_with("mechanism:")))
            .flatten();
            match key_line {
                Some(i) => anyhow::anyhow!("{}:{}: mechanism: {e}", path.display(), i + 1),
                None => anyhow::anyhow!("{}: {e}", path.display()),
            }
        })?;
        // The same bounds the daemons enforce, before anything starts.
        file.fabric
            .params()
            .validate()
            .map_err(|e| anyhow::anyhow!("{}: fabric: {}", path.display(), e.0))?;
        // `pattern: none` generates nothing: the IP traffic of the
        // timeline's applications alone (checked as uniform traffic).
        let mut checked = file.traffic.spec(file.seed);
        if file.traffic.generates_nothing() {
            if !file.fabric.tun {
                bail!(
                    "{}: traffic: pattern none generates nothing: it is for IP traffic alone, with fabric: {{tun: true}}",
                    path.display()
                );
            }
            checked.pattern = "uniform".into();
        }
        checked
            .validate(&file.fabric.params())
            .map_err(|e| anyhow::anyhow!("{}: traffic: {}", path.display(), e.0))?;
        let at_entry = |i: usize| match entry_line(text, "timeline", i) {
            Some(line) => format!("{}:{line}: timeline[{i}]", path.display()),
            None => format!("{}: timeline[{i}]", path.display()),
        };
        if file.recovery_protocol.is_on() && !file.mechanism.is_dlr() {
            let hint = if file.mechanism.recovery_protocol().is_on() {
                format!(
                    "mechanism `{}` already runs SBRP (with controller re-routing); drop \
                     recovery-protocol",
                    file.mechanism.name()
                )
            } else {
                format!(
                    "mechanism `{}` does not combine with it: recovery-protocol is for the \
                     dlr mechanisms (dlr, dlr-link, dlr-adaptive, dlr-adaptive-link), whose \
                     switches reroute on their own; for SBRP with controller re-routing use \
                     mechanism: sbrp0|sbrp1|sbrp2",
                    file.mechanism.name()
                )
            };
            bail!(
                "{}: recovery-protocol: {}: {hint}",
                path.display(),
                file.recovery_protocol.name()
            );
        }
        if file.recovery_protocol.is_on()
            && matches!(file.mechanism.name(), "dlr-link" | "dlr-adaptive-link")
        {
            // The link variants have 1-hop groups only: around a dead switch
            // they may find no way, and SBRP would then resend the same
            // packet into the same dead end forever.
            let switch_fault =
                |k: &ActionKind| matches!(k, ActionKind::KillSwitch | ActionKind::SigkillSwitch);
            let refused = |what: String| {
                anyhow::anyhow!(
                    "{what}: mechanism `{}` routes around link faults only (*Dynamic Fault Tolerance in Fat Trees* §3.4, \
                     §3.6), so recovery-protocol {} cannot promise delivery under a switch \
                     fault; use dlr or dlr-adaptive (link and switch faults)",
                    file.mechanism.name(),
                    file.recovery_protocol.name()
                )
            };
            if let Some(i) = file.timeline.iter().position(|e| switch_fault(&e.action)) {
                return Err(refused(format!(
                    "{}: {}",
                    at_entry(i),
                    file.timeline[i].action.name()
                )));
            }
            if let Some(k) = file
                .random
                .as_ref()
                .and_then(|r| r.kinds.iter().find(|k| switch_fault(k)))
            {
                return Err(refused(format!(
                    "{}: random.kinds: {}",
                    path.display(),
                    k.name()
                )));
            }
        }
        // `corrupt` is fine with SBRP: a datagram the CRC check rejects is a
        // link error, and the link goes down and retrains, so SBRP's port
        // death path (NFT, RRQ) acts on the flits it carried (spec 003 §8
        // item 14, docs/sbrp.md "Corruption").
        let topology_path = if file.topology.is_absolute() {
            file.topology.clone()
        } else {
            path.parent().unwrap_or(Path::new(".")).join(&file.topology)
        };
        let topo = crate::topo::load(&topology_path)
            .with_context(|| format!("{}: topology", path.display()))?;
        // The topology file's switch parameters, where the scenario sets none.
        let fabric = &mut file.fabric;
        fabric.switch_latency = fabric
            .switch_latency
            .or(topo.switch_params.switch_latency.map(ScenarioSwitchLatency));
        fabric.crossbar_speedup = fabric
            .crossbar_speedup
            .or(topo.switch_params.crossbar_speedup);
        let duration = file.traffic.duration.0;
        if duration.is_zero() {
            bail!("{}: traffic.duration must be positive", path.display());
        }
        let mut actions = Vec::new();
        let mut apps = Vec::new();
        let mut previous = Duration::ZERO;
        for (i, e) in file.timeline.iter().enumerate() {
            let what = match (&e.target, &e.client, &e.server) {
                (Some(t), _, _) => format!("{} {t} at {:?}", e.action.name(), e.at.0),
                (None, Some(c), Some(s)) => {
                    format!("{} {c}->{s} at {:?}", e.action.name(), e.at.0)
                }
                _ => format!("{} at {:?}", e.action.name(), e.at.0),
            };
            let at = e.at.0;
            if at < previous {
                bail!(
                    "{}: {what}: {:?} is in the past (the entry before is at {:?}); keep the timeline in time order",
                    at_entry(i),
                    at,
                    previous
                );
            }
            if at >= duration {
                bail!(
                    "{}: {what}: {:?} is not within the traffic duration {:?}",
                    at_entry(i),
                    at,
                    duration
                );
            }
            previous = at;
            if e.action.is_application() {
                let app = application(&topo, &file, e, duration - at)
                    .with_context(|| format!("{}: {what}", at_entry(i)))?;
                apps.push(AppAction {
                    at,
                    app,
                    origin: at_entry(i),
                });
                continue;
            }
            let lasts = match (e.action, e.duration) {
                (ActionKind::StopSwitch, Some(d)) if !d.0.is_zero() => d.0,
                (ActionKind::StopSwitch, _) => bail!(
                    "{}: {what}: stop-switch needs a positive duration (how long the switch stays stopped)",
                    at_entry(i)
                ),
                _ => Duration::ZERO,
            };
            if let Some(key) =
                iperf3_key(e).filter(|&k| !(k == "duration" && e.action == ActionKind::StopSwitch))
            {
                bail!("{}: {what}: `{key}` is only for iperf3", at_entry(i));
            }
            let Some(label) = &e.target else {
                bail!(
                    "{}: {what}: {} needs a target",
                    at_entry(i),
                    e.action.name()
                );
            };
            let target = resolve(&topo, e.action, label)
                .with_context(|| format!("{}: {what}", at_entry(i)))?;
            let count = match (e.action, e.count) {
                (ActionKind::Corrupt, Some(0)) => {
                    bail!("{}: {what}: count must be at least 1", at_entry(i))
                }
                (ActionKind::Corrupt, Some(n)) => n,
                (ActionKind::Corrupt, None) => {
                    bail!("{}: {what}: corrupt needs a count (datagrams)", at_entry(i))
                }
                (_, Some(_)) => bail!("{}: {what}: count is only for corrupt", at_entry(i)),
                (_, None) => 0,
            };
            let origin = at_entry(i);
            actions.push(Action {
                at,
                kind: e.action,
                target,
                label: label.clone(),
                count,
                lasts,
                origin,
            });
        }
        if let Some(r) = &file.random {
            actions.extend(random_actions(path, &topo, r, duration)?);
        }
        actions.sort_by_key(|a| a.at);
        check_states(&actions)?;
        let scenario = Scenario {
            path: path.to_path_buf(),
            file,
            topo,
            topology_path,
            actions,
            apps,
        };
        // The mechanism's own checks, before anything starts.
        scenario
            .plan()
            .with_context(|| path.display().to_string())?;
        Ok(scenario)
    }

    /// What the mechanism's controller half needs to know about the run.
    pub fn run_spec(&self, params: &FabricParams) -> RunSpec<'_> {
        let f = &self.file;
        RunSpec {
            topo: &self.topo,
            vcs: params.vcs,
            engine: &f.engine,
            tables_given: false,
            controller_reroutes: f.mechanism.acts_on_faults()
                && f.mechanism.intermediate().is_none(),
            recovery: f.protocol(),
            kills_switches: self
                .actions
                .iter()
                .any(|a| matches!(a.kind, ActionKind::KillSwitch | ActionKind::SigkillSwitch)),
        }
    }

    /// The mechanism's controller half for this run, checked.
    pub fn plan(&self) -> Result<Option<crate::mechanism::Plan>> {
        let params = self.file.params();
        self.file.mechanism.fabric().plan(&self.run_spec(&params))
    }
}

/// The first iperf3-only key an entry sets.
fn iperf3_key(e: &TimelineEntry) -> Option<&'static str> {
    [
        ("client", e.client.is_some()),
        ("server", e.server.is_some()),
        ("duration", e.duration.is_some()),
        ("interval", e.interval.is_some()),
        ("protocol", e.protocol.is_some()),
        ("bitrate", e.bitrate.is_some()),
    ]
    .into_iter()
    .find_map(|(k, set)| set.then_some(k))
}

/// Checks an application entry (`left`: traffic time left after it).
fn application(
    topo: &Topology,
    file: &ScenarioFile,
    e: &TimelineEntry,
    left: Duration,
) -> Result<Application> {
    if !file.fabric.tun {
        bail!(
            "{} runs programs on the hosts' IP interfaces: set fabric: {{tun: true}} (root; docs/ip.md)",
            e.action.name()
        );
    }
    if let Some(key) = [("target", e.target.is_some()), ("count", e.count.is_some())]
        .into_iter()
        .find_map(|(k, set)| set.then_some(k))
    {
        bail!("`{key}` is not for {}", e.action.name());
    }
    let host = |key: &str, name: &Option<String>| -> Result<String> {
        let Some(name) = name else {
            bail!("iperf3 needs a `{key}` host");
        };
        match topo.find_node(name) {
            Some(NodeRef::Host(_)) => Ok(name.clone()),
            Some(NodeRef::Switch(_)) => bail!("{key} `{name}` is a switch, not a host"),
            None => bail!("{key}: no host named `{name}`"),
        }
    };
    match e.action {
        ActionKind::Pingall => {
            if let Some(key) = iperf3_key(e) {
                bail!("`{key}` is only for iperf3");
            }
            if topo.num_hosts() < 2 {
                bail!("pingall needs two hosts at least");
            }
            Ok(Application::Pingall)
        }
        ActionKind::Iperf3 => {
            let client = host("client", &e.client)?;
            let server = host("server", &e.server)?;
            if client == server {
                bail!("client and server are the same host `{client}`");
            }
            let Some(Time(duration)) = e.duration else {
                bail!("iperf3 needs a `duration` (whole seconds, e.g. 3s)");
            };
            // iperf3 -t takes whole seconds; emulated seconds times a
            // whole dilation factor stay whole.
            if duration.is_zero() || duration.subsec_nanos() != 0 {
                bail!("duration {duration:?}: iperf3 runs for whole seconds (-t); use e.g. 3s");
            }
            if duration > left {
                bail!(
                    "duration {duration:?} runs past the end of traffic ({left:?} left); shorten it or lengthen traffic.duration"
                );
            }
            let interval = e.interval.map_or(DEFAULT_IPERF3_INTERVAL, |t| t.0);
            if interval < Duration::from_millis(100) || interval > duration {
                bail!(
                    "interval {interval:?} must be 100ms..={duration:?} (iperf3 -i, and within the duration)"
                );
            }
            if let Some(b) = &e.bitrate {
                parse_bitrate(b)?;
            }
            Ok(Application::Iperf3(Iperf3Flow {
                client,
                server,
                duration,
                interval,
                protocol: e.protocol.unwrap_or_default(),
                bitrate: e.bitrate.clone(),
            }))
        }
        k => bail!("{} is not an application", k.name()),
    }
}

/// Replays the schedule on the set of broken elements: a repair needs the
/// matching fault before it, and an element cannot break twice.
fn check_states(actions: &[Action]) -> Result<()> {
    let mut broken: BTreeSet<(Target, ActionKind)> = BTreeSet::new();
    for a in actions {
        let name = format!("{} {} at {:?}", a.kind.name(), a.label, a.at);
        let element = match a.target {
            Target::Link { link, .. } => Target::Link {
                link,
                end: PortRef::switch(0, 0),
            },
            t => t,
        };
        match a.kind {
            ActionKind::Corrupt => {}
            // A stop ends by itself; it needs a running process.
            ActionKind::StopSwitch => {
                if broken.iter().any(|(t, _)| *t == element) {
                    bail!("{}: {name}: it is already broken at that time", a.origin);
                }
            }
            k if k.is_repair() => {
                let fault = [
                    ActionKind::KillLink,
                    ActionKind::KillSwitch,
                    ActionKind::SigkillSwitch,
                ]
                .into_iter()
                .find(|f| f.repair() == Some(k))
                .expect("every repair undoes a fault");
                if !broken.remove(&(element, fault)) {
                    bail!(
                        "{}: {name}: nothing to repair (no {} of it before)",
                        a.origin,
                        fault.name()
                    );
                }
            }
            k => {
                if broken.iter().any(|(t, _)| *t == element) {
                    bail!("{}: {name}: it is already broken at that time", a.origin);
                }
                broken.insert((element, k));
            }
        }
    }
    Ok(())
}

/// A seeded Poisson schedule: every eligible element fails at
/// `rate_per_s`; the superposition is one Poisson process of rate
/// `rate × elements`, each arrival hitting an element drawn uniformly.
/// Leaf switches and host links are not eligible (spec 002 §3.2).
fn random_actions(
    path: &Path,
    topo: &Topology,
    r: &RandomFaults,
    duration: Duration,
) -> Result<Vec<Action>> {
    if !(r.rate_per_s.is_finite() && r.rate_per_s > 0.0) {
        bail!(
            "{}: random.rate_per_s = {} must be positive",
            path.display(),
            r.rate_per_s
        );
    }
    if r.kinds.is_empty() {
        bail!("{}: random.kinds is empty", path.display());
    }
    if let Some(k) = r.kinds.iter().find(|k| k.is_application()) {
        bail!(
            "{}: random.kinds: `{}` is an application, not a fault (put it in the timeline)",
            path.display(),
            k.name()
        );
    }
    if let Some(k) = r.kinds.iter().find(|k| k.is_repair()) {
        bail!(
            "{}: random.kinds: `{}` is a repair, not a fault (use repair_after)",
            path.display(),
            k.name()
        );
    }
    if r.kinds.contains(&ActionKind::StopSwitch) && r.repair_after.is_none_or(|d| d.0.is_zero()) {
        bail!(
            "{}: random.kinds: stop-switch needs repair-after (how long each stop lasts)",
            path.display()
        );
    }
    let links: Vec<LinkId> = (0..topo.links.len() as LinkId)
        .filter(|&l| {
            let link = &topo.links[l as usize];
            matches!(link.a.node, NodeRef::Switch(_)) && matches!(link.b.node, NodeRef::Switch(_))
        })
        .collect();
    let switches: Vec<SwitchId> = (0..topo.num_switches() as SwitchId)
        .filter(|&s| !is_leaf(topo, s))
        .collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(r.seed);
    let mut out = Vec::new();
    // Elements broken until the given time.
    let mut busy: Vec<(Target, Duration)> = Vec::new();
    let mut t = 0.0f64;
    for n in 0.. {
        let kind = r.kinds[rng.gen_range(0..r.kinds.len())];
        let pool = if kind.targets_link() {
            links.len()
        } else {
            switches.len()
        };
        if pool == 0 {
            bail!(
                "{}: random: no element is eligible for {}",
                path.display(),
                kind.name()
            );
        }
        let rate = r.rate_per_s * pool as f64;
        t += -(1.0 - rng.gen::<f64>()).ln() / rate;
        let at = Duration::from_secs_f64(t);
        if at >= duration || n > 10_000 {
            break;
        }
        let target = if kind.targets_link() {
            let link = links[rng.gen_range(0..links.len())];
            Target::Link {
                link,
                end: topo.links[link as usize].a,
            }
        } else {
            Target::Switch(switches[rng.gen_range(0..switches.len())])
        };
        let element = |t: Target| match t {
            Target::Link { link, .. } => (0, link),
            Target::Switch(s) => (1, s),
        };
        busy.retain(|(_, until)| *until > at);
        if busy.iter().any(|(b, _)| element(*b) == element(target)) {
            continue;
        }
        let label = match target {
            Target::Link { end, .. } => format!("{}:{}", topo.node_name(end.node), end.port),
            Target::Switch(s) => topo.node_name(NodeRef::Switch(s)).to_string(),
        };
        let repair_at = r.repair_after.map(|d| at + d.0);
        let count = if kind == ActionKind::Corrupt {
            r.corrupt_count.max(1)
        } else {
            0
        };
        // A random stop lasts repair_after (checked above).
        let lasts = match (kind, r.repair_after) {
            (ActionKind::StopSwitch, Some(d)) => d.0,
            _ => Duration::ZERO,
        };
        if kind == ActionKind::StopSwitch {
            busy.push((target, at + lasts));
        }
        out.push(Action {
            at,
            kind,
            target,
            label: label.clone(),
            count,
            lasts,
            origin: "random".into(),
        });
        match (kind.repair(), repair_at) {
            (Some(repair), Some(when)) if when < duration => {
                busy.push((target, when));
                out.push(Action {
                    at: when,
                    kind: repair,
                    target,
                    label,
                    count: 0,
                    lasts: Duration::ZERO,
                    origin: "random".into(),
                });
            }
            (Some(_), _) => busy.push((target, Duration::MAX)),
            (None, _) => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../topologies/scenarios/x.yaml");
        Scenario::parse(&dir, text)
    }

    const HEAD: &str = "topology: ../kary-4-2.yaml\nmechanism: reroute\ntraffic: {duration: 4s}\n";

    #[test]
    fn a_good_timeline_is_resolved_in_order() {
        let s = parse(&format!(
            "{HEAD}timeline:\n  - {{at: 1s, action: kill-link, target: \"s0-0:4\"}}\n  - {{at: 2s, action: restore-link, target: \"s0-0:4\"}}\n  - {{at: 2.5s, action: corrupt, target: \"s0-0:4\", count: 3}}\n"
        ))
        .unwrap();
        assert_eq!(s.actions.len(), 3);
        assert_eq!(s.actions[0].kind, ActionKind::KillLink);
        assert_eq!(s.actions[2].count, 3);
        assert_eq!(s.actions[1].at, Duration::from_secs(2));
    }

    #[test]
    fn a_stop_switch_carries_how_long_it_lasts_and_ends_by_itself() {
        let s = parse(&format!(
            "{HEAD}timeline:\n  - {{at: 1s, action: stop-switch, target: \"s1-0\", duration: 250ms}}\n  - {{at: 1.1s, action: sigkill-switch, target: \"s1-0\"}}\n  - {{at: 2s, action: stop-switch, target: \"s1-1\", duration: 1s}}\n"
        ))
        .unwrap();
        assert_eq!(s.actions[0].kind, ActionKind::StopSwitch);
        assert_eq!(s.actions[0].lasts, Duration::from_millis(250));
        assert_eq!(s.actions[1].lasts, Duration::ZERO);
        assert_eq!(s.actions[2].lasts, Duration::from_secs(1));
        // A stop is no fault in force: it changes no fault set.
        let mut faults = FaultSet::none();
        assert!(!s.actions[0].apply_to(&mut faults));
        // Random stops last repair_after, which they need.
        let random = format!("{HEAD}random: {{rate-per-s: 2, kinds: [stop-switch], seed: 3}}\n");
        let e = format!("{:#}", parse(&random).unwrap_err());
        assert!(e.contains("stop-switch needs repair-after"), "{e}");
        let random = format!(
            "{HEAD}random: {{rate-per-s: 2, kinds: [stop-switch], seed: 3, repair-after: 400ms}}\n"
        );
        let s = parse(&random).unwrap();
        assert!(!s.actions.is_empty());
        assert!(s
            .actions
            .iter()
            .all(|a| a.kind == ActionKind::StopSwitch && a.lasts == Duration::from_millis(400)));
    }

    /// A repair brings up only the ports whose link is alive afterwards:
    /// not the end of a restored link on a switch still killed, nor a
    /// restored or restarted switch's end of a link still killed.
    #[test]
    fn a_repair_leaves_down_the_ports_of_faults_still_in_force() {
        let s = parse(&format!(
            "{HEAD}timeline:\n  - {{at: 1s, action: kill-switch, target: \"s0-0\"}}\n  - {{at: 1.1s, action: kill-link, target: \"s0-0:4\"}}\n  - {{at: 1.2s, action: restore-link, target: \"s0-0:4\"}}\n  - {{at: 1.3s, action: kill-link, target: \"s0-0:5\"}}\n  - {{at: 1.4s, action: restore-switch, target: \"s0-0\"}}\n  - {{at: 1.5s, action: sigkill-switch, target: \"s0-0\"}}\n  - {{at: 1.6s, action: restart-switch, target: \"s0-0\"}}\n  - {{at: 1.7s, action: restore-link, target: \"s0-0:5\"}}\n"
        ))
        .unwrap();
        let s00 = match s.actions[0].target {
            Target::Switch(id) => id,
            Target::Link { .. } => unreachable!("a switch"),
        };
        let mut faults = FaultSet::none();
        let held: Vec<Vec<PortRef>> = s
            .actions
            .iter()
            .map(|a| {
                let held = a.held_down(&s.topo, &faults);
                a.apply_to(&mut faults);
                held
            })
            .collect();
        let end = |port| vec![PortRef::switch(s00, port)];
        assert_eq!(held[2], end(4), "restored while s0-0 is killed");
        assert_eq!(held[4], end(5), "s0-0 restored while its link is killed");
        assert_eq!(held[6], end(5), "s0-0 restarted while its link is killed");
        for i in [0, 1, 3, 5, 7] {
            assert!(held[i].is_empty(), "action {i}: {:?}", held[i]);
        }
        assert_eq!(faults, FaultSet::none());
    }

    #[test]
    fn time_dilation_is_auto_by_default_or_a_whole_factor() {
        use flitnet_runtime::clock::Dilation;
        let s = parse(HEAD).unwrap();
        assert_eq!(s.file.fabric.time_dilation.0, Dilation::Auto);
        let s = parse(&format!("{HEAD}fabric: {{time-dilation: 8}}\n")).unwrap();
        assert_eq!(s.file.fabric.time_dilation.0, Dilation::Fixed(8));
        let s = parse(&format!("{HEAD}fabric: {{time-dilation: auto}}\n")).unwrap();
        assert_eq!(s.file.fabric.time_dilation.0, Dilation::Auto);
        let e = format!(
            "{:#}",
            parse(&format!("{HEAD}fabric: {{time-dilation: 0}}\n")).unwrap_err()
        );
        assert!(
            e.contains("time dilation `0` must be `auto` or a whole factor"),
            "{e}"
        );
    }

    #[test]
    fn mistakes_are_named_with_file_line_and_entry() {
        let cases = [
            (
                "  - {at: 1s, action: kill-link, target: \"nope:4\"}\n",
                "no node named `nope`",
            ),
            (
                "  - {at: 9s, action: kill-link, target: \"s0-0:4\"}\n",
                "not within the traffic duration",
            ),
            (
                "  - {at: 1s, action: restore-link, target: \"s0-0:4\"}\n",
                "nothing to repair",
            ),
            (
                "  - {at: 1s, action: corrupt, target: \"s0-0:4\"}\n",
                "needs a count",
            ),
            (
                "  - {at: 1s, action: kill-switch, target: \"h00\"}\n",
                "is a host",
            ),
            (
                "  - {at: 1s, action: stop-switch, target: \"s1-1\"}\n",
                "stop-switch needs a positive duration",
            ),
            (
                "  - {at: 1s, action: stop-switch, target: \"s1-1\", duration: 0s}\n",
                "stop-switch needs a positive duration",
            ),
            (
                "  - {at: 1s, action: kill-link, target: \"s0-0:4\", duration: 1s}\n",
                "`duration` is only for iperf3",
            ),
            (
                "  - {at: 1s, action: stop-switch, target: \"s1-0\", duration: 100ms}\n",
                "already broken",
            ),
        ];
        for (entry, want) in cases {
            let text = format!(
                "{HEAD}timeline:\n  - {{at: 0.5s, action: kill-switch, target: \"s1-0\"}}\n{entry}"
            );
            let err = format!("{:#}", parse(&text).unwrap_err());
            assert!(err.contains(want), "{want}: {err}");
            assert!(err.contains("x.yaml:6: timeline[1]"), "{err}");
        }
        let past = format!(
            "{HEAD}timeline:\n  - {{at: 2s, action: kill-switch, target: \"s1-0\"}}\n  - {{at: 1s, action: restore-switch, target: \"s1-0\"}}\n"
        );
        assert!(format!("{:#}", parse(&past).unwrap_err()).contains("in the past"));
        let unknown_key = format!(
            "{HEAD}timeline:\n  - {{at: 1s, action: corrupt, target: \"s0-0:4\", cout: 3}}\n"
        );
        let err = format!("{:#}", parse(&unknown_key).unwrap_err());
        assert!(
            err.contains("unknown field `cout`") && err.contains("line 5"),
            "{err}"
        );
        let mech = "topology: ../kary-4-2.yaml\nmechanism: magic\n";
        let err = format!("{:#}", parse(mech).unwrap_err());
        assert!(
            err.contains("unknown mechanism `magic`") && err.contains("x.yaml:2:"),
            "{err}"
        );
        let few_vcs = "topology: ../kary-4-2.yaml\nmechanism: dlr\n";
        assert!(format!("{:#}", parse(few_vcs).unwrap_err()).contains("fabric.vcs: 3"));
        let dlr = "topology: ../kary-4-2.yaml\nmechanism: dlr-link\nfabric: {vcs: 2}\n";
        let m = parse(dlr).unwrap().file.mechanism;
        assert!(!m.acts_on_faults() && !m.promises_delivery());
        let not_a_tree = "topology: ../hypercube-4.yaml\nmechanism: dlr-adaptive\n";
        assert!(format!("{:#}", parse(not_a_tree).unwrap_err())
            .contains("applies to k-ary n-trees only"));
    }

    #[test]
    fn sbrp_scenarios_re_route_promise_delivery_and_accept_corruption() {
        let kill = "timeline:\n  - {at: 1s, action: kill-link, target: \"s0-0:4\"}\n";
        for (name, protocol) in [
            ("sbrp0", RecoveryProtocol::Sbrp0),
            ("sbrp1", RecoveryProtocol::Sbrp1),
            ("sbrp2", RecoveryProtocol::Sbrp2),
        ] {
            let text = format!("topology: ../kary-4-2.yaml\nmechanism: {name}\n{kill}");
            let s = parse(&text).unwrap();
            let m = s.file.mechanism;
            assert_eq!(m.recovery_protocol(), protocol);
            assert!(m.acts_on_faults() && m.promises_delivery(), "{name}");
        }
        assert!(!Mechanism::Reroute.promises_delivery());
        assert_eq!(
            Mechanism::Reroute.recovery_protocol(),
            RecoveryProtocol::None
        );
        // Corruption is a link error the SBRP port-death path acts on:
        // accepted, in the timeline and among random kinds.
        let corrupt = "topology: ../kary-4-2.yaml\nmechanism: sbrp2\ntimeline:\n  - {at: 1s, action: kill-link, target: \"s0-0:4\"}\n  - {at: 2s, action: corrupt, target: \"s0-0:4\", count: 3}\n";
        let s = parse(corrupt).unwrap();
        assert_eq!(s.actions[1].kind, ActionKind::Corrupt);
        assert_eq!(s.actions[1].count, 3);
        let random = "topology: ../kary-4-2.yaml\nmechanism: sbrp1\nrandom: {rate-per-s: 0.1, seed: 1, kinds: [kill-link, corrupt]}\n";
        assert!(parse(random).is_ok());
    }

    #[test]
    fn sbrp_combines_with_local_rerouting_only() {
        let kill = "timeline:\n  - {at: 1s, action: kill-link, target: \"s0-0:4\"}\n";
        for (mech, vcs) in [
            ("dlr", 3),
            ("dlr-link", 2),
            ("dlr-adaptive", 1),
            ("dlr-adaptive-link", 1),
        ] {
            let text = format!(
                "topology: ../kary-4-2.yaml\nmechanism: {mech}\nrecovery-protocol: sbrp1\nfabric: {{vcs: {vcs}}}\n{kill}"
            );
            let f = parse(&text).unwrap().file;
            assert_eq!(f.protocol(), RecoveryProtocol::Sbrp1);
            assert!(f.promises_delivery(), "{mech}");
            // The switches reroute; the controller stays out of it.
            assert!(!f.mechanism.acts_on_faults(), "{mech}");
            assert_eq!(f.mechanism_name(), format!("{mech}+sbrp1"));
        }
        let plain = parse("topology: ../kary-4-2.yaml\nmechanism: dlr-link\nfabric: {vcs: 2}\n")
            .unwrap()
            .file;
        assert_eq!(plain.protocol(), RecoveryProtocol::None);
        assert!(!plain.promises_delivery());
        assert_eq!(plain.mechanism_name(), "dlr-link");
        let cases = [
            ("sbrp2", "already runs SBRP"),
            ("reroute", "is for the dlr mechanisms"),
            ("none", "is for the dlr mechanisms"),
        ];
        for (mech, want) in cases {
            let text = format!(
                "topology: ../kary-4-2.yaml\nmechanism: {mech}\nrecovery-protocol: sbrp0\n"
            );
            let err = format!("{:#}", parse(&text).unwrap_err());
            assert!(
                err.contains("x.yaml: recovery-protocol: sbrp0") && err.contains(want),
                "{mech}: {err}"
            );
        }
        // The link variants cannot get around a dead switch.
        for mech in ["dlr-link", "dlr-adaptive-link"] {
            let text = format!(
                "topology: ../kary-4-2.yaml\nmechanism: {mech}\nrecovery-protocol: sbrp2\nfabric: {{vcs: 2}}\n{kill}  - {{at: 2s, action: sigkill-switch, target: \"s1-1\"}}\n"
            );
            let err = format!("{:#}", parse(&text).unwrap_err());
            assert!(
                err.contains("x.yaml:7: timeline[1]: sigkill-switch")
                    && err.contains("link faults only"),
                "{mech}: {err}"
            );
            let random = format!(
                "topology: ../kary-4-2.yaml\nmechanism: {mech}\nrecovery-protocol: sbrp0\nfabric: {{vcs: 2}}\nrandom: {{rate-per-s: 0.1, seed: 1, kinds: [kill-link, kill-switch]}}\n"
            );
            let err = format!("{:#}", parse(&random).unwrap_err());
            assert!(err.contains("random.kinds: kill-switch"), "{mech}: {err}");
        }
        let magic = "topology: ../kary-4-2.yaml\nmechanism: dlr\nrecovery-protocol: sbrp3\n";
        let err = format!("{:#}", parse(magic).unwrap_err());
        assert!(err.contains("unknown variant `sbrp3`"), "{err}");
        let corrupt = "topology: ../kary-4-2.yaml\nmechanism: dlr\nrecovery-protocol: sbrp2\nfabric: {vcs: 3}\ntimeline:\n  - {at: 2s, action: corrupt, target: \"s0-0:4\", count: 3}\n";
        // Accepted: a corrupted datagram is a link error, a port death that
        // DLR routes around and SBRP recovers (docs/sbrp.md "Corruption").
        let s = parse(corrupt).unwrap();
        assert!(s.file.promises_delivery(), "{s:?}");
        assert_eq!(s.file.mechanism_name(), "dlr+sbrp2");
    }

    #[test]
    fn random_schedules_are_seeded_and_pair_repairs() {
        let text = format!(
            "{HEAD}random: {{rate-per-s: 0.1, seed: 5, kinds: [kill-link, sigkill-switch], repair-after: 500ms}}\n"
        );
        let a = parse(&text).unwrap();
        let b = parse(&text).unwrap();
        let show = |s: &Scenario| {
            s.actions
                .iter()
                .map(|a| format!("{:?} {:?} {}", a.at, a.kind, a.label))
                .collect::<Vec<_>>()
        };
        assert_eq!(show(&a), show(&b));
        assert!(!a.actions.is_empty());
        let faults = a.actions.iter().filter(|x| !x.kind.is_repair()).count();
        let repairs = a.actions.len() - faults;
        assert!(repairs <= faults && faults - repairs <= faults);
        for x in &a.actions {
            if let Target::Switch(s) = x.target {
                assert!(!is_leaf(&a.topo, s), "leaf switch drawn: {}", x.label);
            }
        }
    }

    #[test]
    fn applications_need_ip_interfaces_and_checked_hosts() {
        let tun = "topology: ../kary-4-2.yaml\nmechanism: reroute\ntraffic: {pattern: none, duration: 5s}\nfabric: {tun: true}\n";
        let s = parse(&format!(
            "{tun}timeline:\n  - {{at: 0s, action: pingall}}\n  - {{at: 1s, action: iperf3, client: h00, server: h15, duration: 3s}}\n  - {{at: 1s, action: iperf3, client: h01, server: h14, duration: 2s, interval: 500ms, protocol: udp, bitrate: 4M}}\n  - {{at: 2s, action: kill-link, target: \"s0-3:4\"}}\n"
        ))
        .unwrap();
        assert_eq!(s.actions.len(), 1, "applications are not faults");
        assert_eq!(s.apps.len(), 3);
        assert_eq!(s.apps[0].app, Application::Pingall);
        let Application::Iperf3(flow) = &s.apps[2].app else {
            panic!("{:?}", s.apps[2]);
        };
        assert_eq!(
            (flow.protocol, flow.interval, flow.bitrate.as_deref()),
            (Protocol::Udp, Duration::from_millis(500), Some("4M"))
        );
        let Application::Iperf3(flow) = &s.apps[1].app else {
            panic!("{:?}", s.apps[1]);
        };
        assert_eq!(flow.interval, DEFAULT_IPERF3_INTERVAL);
        assert_eq!(flow.protocol, Protocol::Tcp);
        let cases = [
            (HEAD, "  - {at: 1s, action: pingall}\n", "set fabric: {tun: true}"),
            (tun, "  - {at: 1s, action: iperf3, client: h00, server: h99, duration: 2s}\n", "server: no host named `h99`"),
            (tun, "  - {at: 1s, action: iperf3, client: s0-0, server: h01, duration: 2s}\n", "client `s0-0` is a switch"),
            (tun, "  - {at: 1s, action: iperf3, client: h00, server: h01}\n", "needs a `duration`"),
            (tun, "  - {at: 1s, action: iperf3, client: h00, server: h01, duration: 1.5s}\n", "whole seconds"),
            (tun, "  - {at: 3s, action: iperf3, client: h00, server: h01, duration: 3s}\n", "runs past the end of traffic"),
            (tun, "  - {at: 1s, action: iperf3, client: h00, server: h00, duration: 2s}\n", "the same host"),
            (tun, "  - {at: 1s, action: iperf3, client: h00, server: h01, duration: 2s, interval: 50ms}\n", "interval 50ms must be 100ms"),
            (tun, "  - {at: 1s, action: iperf3, client: h00, server: h01, duration: 2s, bitrate: 4X}\n", "the unit is K, M or G"),
            (tun, "  - {at: 1s, action: pingall, target: h00}\n", "`target` is not for pingall"),
            (tun, "  - {at: 1s, action: pingall, client: h00}\n", "`client` is only for iperf3"),
            (tun, "  - {at: 1s, action: kill-link, target: \"s0-0:4\", server: h01}\n", "`server` is only for iperf3"),
            (tun, "  - {at: 1s, action: kill-link}\n", "kill-link needs a target"),
        ];
        for (head, entry, want) in cases {
            let err = format!(
                "{:#}",
                parse(&format!("{head}timeline:\n{entry}")).unwrap_err()
            );
            assert!(
                err.contains(want) && err.contains("x.yaml:"),
                "{want}: {err}"
            );
        }
        let random = format!("{tun}random: {{rate-per-s: 0.1, seed: 1, kinds: [pingall]}}\n");
        let err = format!("{:#}", parse(&random).unwrap_err());
        assert!(err.contains("is an application, not a fault"), "{err}");
        let silent = "topology: ../kary-4-2.yaml\nmechanism: reroute\ntraffic: {pattern: none}\n";
        let err = format!("{:#}", parse(silent).unwrap_err());
        assert!(err.contains("pattern none generates nothing"), "{err}");
        assert_eq!(parse_bitrate("4M").unwrap(), 4e6);
        assert_eq!(parse_bitrate("1.5g").unwrap(), 1.5e9);
        assert_eq!(parse_bitrate("800").unwrap(), 800.0);
        assert!(parse_bitrate("-1M").is_err() && parse_bitrate("M").is_err());
    }

    #[test]
    fn entry_lines_skip_comments_and_nested_lists() {
        let text = "a: 1\ntimeline:\n  # c\n  - x: [1]\n    y:\n      - 2\n  - z\nrandom: 3\n";
        assert_eq!(entry_line(text, "timeline", 0), Some(4));
        assert_eq!(entry_line(text, "timeline", 1), Some(7));
        assert_eq!(entry_line(text, "timeline", 2), None);
    }
}
