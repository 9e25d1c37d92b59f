//! The control protocol between `flitctl` and the daemons, and the daemons'
//! configuration files.
//!
//! Control messages are JSON, one per line, over TCP. Every request carries
//! the fabric's shared token; a daemon refuses any request whose token does
//! not match, so that a stray client on the same machine (or container
//! network) cannot reprogram the fabric.

mod event;
mod reply;

pub use event::{open_event, seal_event, EventAuthError};
pub use reply::{
    HostDaemonReport, HostLinkReport, LatenessSummary, LinkState, LoopReport, NodeKind,
    PortBacklog, Reply, SchedShare, SwitchReport, TransportCounters, UnexpectedReply,
};

use crate::routing::{SwitchTable, VcPolicy};
pub use crate::switch_params::SwitchLatency;
use crate::topology::{HostId, PortNo, SwitchId};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// How switches move packets (issue: selectable per fabric).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchingMode {
    /// Flits advance as soon as the next VC has one credit.
    #[default]
    Wormhole,
    /// A head advances only when the next VC has room for the whole packet.
    VirtualCutThrough,
}

/// What carries the datagrams between daemons (docs/wire.md, "Transports").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataTransport {
    /// One UDP socket per daemon; a port's peer is a socket address.
    #[default]
    Udp,
    /// Raw Ethernet frames (AF_PACKET) of EtherType [`ETHERTYPE_FLITNET`],
    /// one network interface per port (a veth end, a container's interface).
    Ethernet,
    /// Shared-memory rings between daemons on one machine: every link is a
    /// file of two single-producer single-consumer rings, every daemon has
    /// a doorbell (docs/wire.md, "Shared-memory transport").
    Shm,
}

impl DataTransport {
    pub fn name(self) -> &'static str {
        match self {
            DataTransport::Udp => "udp",
            DataTransport::Ethernet => "ethernet",
            DataTransport::Shm => "shm",
        }
    }
}

/// EtherType of flitnet frames: the first of IEEE 802's two "local
/// experimental" EtherTypes (0x88B5, 0x88B6), free for private protocols.
pub const ETHERTYPE_FLITNET: u16 = 0x88B5;

/// Longest Linux interface name (IFNAMSIZ - 1).
pub const MAX_INTERFACE_NAME: usize = 15;

/// Parses a MAC address written `02:f1:00:0a:00:03`.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for b in &mut mac {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Link and buffer parameters shared by every port of a fabric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricParams {
    pub vcs: u8,
    /// Input buffer depth per VC, in flits.
    pub buffer_depth: u16,
    pub switching: SwitchingMode,
    /// Emulated link bandwidth in flits per second (None = as fast as the
    /// host can go).
    pub bandwidth_flits_per_s: Option<u64>,
    /// Emulated propagation delay per link.
    pub propagation_ns: u64,
    pub keepalive_interval_ns: u64,
    /// A peer silent for this long is declared down.
    pub dead_after_ns: u64,
    /// Largest datagram a link sends.
    pub mtu: usize,
    /// Payload bytes per flit.
    pub flit_payload: u16,
    /// Longest packet, in flits.
    pub max_packet_flits: u32,
    /// Recovery protocol switches and hosts run (seed 003 SBRP, see
    /// `docs/sbrp.md`); `none` by default.
    #[serde(default)]
    pub recovery: crate::mechanism::sbrp::RecoveryProtocol,
    /// What carries the datagrams; `udp` by default.
    #[serde(default)]
    pub transport: DataTransport,
    /// How long a link stays down after a link error (a lost or rejected
    /// datagram) before it retrains; 0 = no link error recovery (losses
    /// are only counted). docs/wire.md, "Link errors and retraining".
    #[serde(default = "default_link_retrain_ns")]
    pub link_retrain_ns: u64,
    /// Switches' head-of-queue lifetime, ns: a head that waits this long
    /// for an output VC is discarded (deadlock recovery, docs/sbrp.md
    /// "Deadlock"); None (the default) = off, and left out of the file
    /// (a configuration without it reads as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_of_queue_lifetime_ns: Option<u64>,
    /// Switch traversal latency (routing, allocation, crossbar);
    /// [`SwitchLatency::DEFAULT`] by default (docs/performance.md, "The
    /// timing model").
    #[serde(default)]
    pub switch_latency: SwitchLatency,
    /// Crossbar speedup: flits per input and per output port per flit
    /// time (1 by default).
    #[serde(default = "default_crossbar_speedup")]
    pub crossbar_speedup: u8,
    /// Time dilation: every emulated duration lasts this many times longer
    /// in wall time (the daemons' clock reads wall time / factor;
    /// docs/fidelity.md). 1 (the default, left out of the file) = none.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub time_dilation: u32,
    /// SBRP's receiver gap recovery and its senders' tail probes,
    /// flitnet's addition to the protocols (docs/sbrp.md, "Receiver gap
    /// recovery"): on by default (left out of the file); off runs the
    /// papers' protocols exactly.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub sbrp_gap_recovery: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn default_link_retrain_ns() -> u64 {
    crate::link::DEFAULT_RETRAIN_NS
}

fn default_crossbar_speedup() -> u8 {
    1
}

impl FabricParams {
    /// Checks every value against what the daemons support
    /// ([`limits`]); names the value and the allowed range. The daemons
    /// run it on their configuration and `flitctl` before it starts
    /// anything.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use limits::*;
        let f = self;
        if f.vcs == 0 || f.vcs as usize > MAX_VCS {
            return Err(ConfigError(format!(
                "vcs = {} must be 1..={MAX_VCS} (the wire format's credit item carries {MAX_VCS})",
                f.vcs
            )));
        }
        if f.buffer_depth == 0 || f.buffer_depth > MAX_BUFFER_DEPTH {
            return Err(ConfigError(format!(
                "buffer_depth = {} must be 1..={MAX_BUFFER_DEPTH} flits",
                f.buffer_depth
            )));
        }
        if f.mtu < MIN_MTU || f.mtu > MAX_MTU {
            return Err(ConfigError(format!(
                "mtu = {} must be {MIN_MTU}..={MAX_MTU}",
                f.mtu
            )));
        }
        if f.flit_payload == 0 || f.flit_payload > MAX_FLIT_PAYLOAD {
            return Err(ConfigError(format!(
                "flit_payload = {} must be 1..={MAX_FLIT_PAYLOAD} bytes",
                f.flit_payload
            )));
        }
        if f.max_packet_flits == 0 || f.max_packet_flits > MAX_PACKET_FLITS {
            return Err(ConfigError(format!(
                "max_packet_flits = {} must be 1..={MAX_PACKET_FLITS}",
                f.max_packet_flits
            )));
        }
        if f.switching == SwitchingMode::VirtualCutThrough
            && f.max_packet_flits > f.buffer_depth as u32
        {
            return Err(ConfigError(format!(
                "virtual cut-through needs buffer_depth ({}) >= max_packet_flits ({})",
                f.buffer_depth, f.max_packet_flits
            )));
        }
        if f.bandwidth_flits_per_s == Some(0) {
            return Err(ConfigError(
                "bandwidth must be at least 1 flit/s (none = unlimited)".into(),
            ));
        }
        if f.propagation_ns > MAX_PROPAGATION_NS {
            return Err(ConfigError(format!(
                "propagation delay {} ns is longer than {} s",
                f.propagation_ns,
                MAX_PROPAGATION_NS / 1_000_000_000
            )));
        }
        if f.keepalive_interval_ns == 0 {
            return Err(ConfigError(
                "keepalive interval must be longer than 0".into(),
            ));
        }
        if f.dead_after_ns <= f.keepalive_interval_ns {
            return Err(ConfigError(
                "dead_after must be longer than the keepalive interval".into(),
            ));
        }
        if f.time_dilation == 0 || f.time_dilation > MAX_TIME_DILATION {
            return Err(ConfigError(format!(
                "time_dilation = {} must be 1..={MAX_TIME_DILATION}",
                f.time_dilation
            )));
        }
        if f.dead_after_ns > MAX_TIMER_NS {
            return Err(ConfigError(format!(
                "dead_after {} ns is longer than {} s",
                f.dead_after_ns,
                MAX_TIMER_NS / 1_000_000_000
            )));
        }
        if f.link_retrain_ns > MAX_TIMER_NS {
            return Err(ConfigError(format!(
                "link_retrain_ns {} is longer than 60 s (0 = no link error recovery)",
                f.link_retrain_ns
            )));
        }
        let flit_ns = f
            .bandwidth_flits_per_s
            .map(|r| 1_000_000_000u64.div_ceil(r));
        if let SwitchLatency::FlitTimes(n) = f.switch_latency {
            if n > MAX_SWITCH_LATENCY_FLIT_TIMES {
                return Err(ConfigError(format!(
                    "switch latency {n}ft must be at most {MAX_SWITCH_LATENCY_FLIT_TIMES} flit times"
                )));
            }
        }
        // A latency in flit times scales with the links; one in ns is capped
        // in ns.
        let latency = f.switch_latency.ns(flit_ns);
        if matches!(f.switch_latency, SwitchLatency::Ns(_)) && latency > MAX_SWITCH_LATENCY_NS {
            return Err(ConfigError(format!(
                "switch latency {} = {latency} ns must be at most {} ms",
                f.switch_latency,
                MAX_SWITCH_LATENCY_NS / 1_000_000
            )));
        }
        if f.crossbar_speedup == 0 || f.crossbar_speedup > MAX_CROSSBAR_SPEEDUP {
            return Err(ConfigError(format!(
                "crossbar speedup {} must be 1..={MAX_CROSSBAR_SPEEDUP}",
                f.crossbar_speedup
            )));
        }
        if f.head_of_queue_lifetime_ns == Some(0) {
            return Err(ConfigError(
                "head-of-queue lifetime must be longer than 0 (none = off)".into(),
            ));
        }
        Ok(())
    }

    /// How long a sender keeps a fully sent message when a recovery
    /// protocol runs (`docs/sbrp.md`, "Sender buffer release"): twice the
    /// time to declare a dead peer (a cut is detected within one
    /// `dead_after_ns` of the fault) plus half a second for re-routing, the
    /// RRQ's trip and the resend.
    pub fn recovery_hold_ns(&self) -> u64 {
        self.dead_after_ns
            .saturating_mul(2)
            .saturating_add(500_000_000)
    }

    /// How long a receiver's in-order delivery waits for a message nothing
    /// reported cut before it asks the sender (SBRP's receiver gap
    /// recovery, docs/sbrp.md): half the hold window, `dead_after` + 250
    /// ms. Far above a delivery's latency and a recovery's (detection
    /// within `dead_after`, then re-routing and the resend), so a healthy
    /// run never asks; and below the hold, so that the sender still
    /// retains a message the next one followed within the other half.
    /// None with gap recovery off (`sbrp_gap_recovery`).
    pub fn sbrp_gap_wait_ns(&self) -> Option<u64> {
        self.sbrp_gap_recovery.then(|| self.recovery_hold_ns() / 2)
    }

    /// The link configuration of every port of the fabric, switch and host
    /// alike, for nodes driven by `driver`.
    pub fn link_config(&self, driver: &LinkDriver) -> crate::link::LinkConfig {
        crate::link::LinkConfig {
            vcs: self.vcs,
            buffer_depth: self.buffer_depth,
            bandwidth_flits_per_s: self.bandwidth_flits_per_s,
            propagation_ns: self.propagation_ns,
            count_transit: driver.count_transit,
            keepalive_interval_ns: self.keepalive_interval_ns,
            dead_after_ns: self.dead_after_ns,
            mtu: self.mtu,
            pacing_quantum_ns: driver.pacing_quantum_ns,
            retrain_ns: self.link_retrain_ns,
            ..crate::link::LinkConfig::default()
        }
    }

    /// The configuration of a switch of `radix` ports in this fabric.
    pub fn switch_config(&self, radix: usize, driver: &LinkDriver) -> crate::switch::SwitchConfig {
        crate::switch::SwitchConfig {
            radix,
            vcs: self.vcs,
            buffer_depth: self.buffer_depth,
            switching: match self.switching {
                SwitchingMode::Wormhole => crate::switch::Switching::Wormhole,
                SwitchingMode::VirtualCutThrough => crate::switch::Switching::VirtualCutThrough,
            },
            link: self.link_config(driver),
            max_packet_flits: self.max_packet_flits.min(u16::MAX as u32) as u16,
            timing: self.switch_timing(),
        }
    }

    /// The switches' traversal latency (in ns) and crossbar speedup.
    pub fn switch_timing(&self) -> crate::switch::SwitchTiming {
        let flit_ns = self
            .bandwidth_flits_per_s
            .map(|r| 1_000_000_000u64.div_ceil(r));
        crate::switch::SwitchTiming {
            traversal_ns: self.switch_latency.ns(flit_ns),
            crossbar_speedup: self.crossbar_speedup,
        }
    }
}

/// What the program driving the nodes adds to a fabric's link parameters:
/// how its clock and timers behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkDriver {
    /// The nodes share one clock, so a flit's send time stamped by one is
    /// meaningful to the other (see `LinkConfig::count_transit`).
    pub count_transit: bool,
    /// See `LinkConfig::pacing_quantum_ns`.
    pub pacing_quantum_ns: u64,
}

impl Default for FabricParams {
    fn default() -> Self {
        FabricParams {
            vcs: 2,
            buffer_depth: 16,
            switching: SwitchingMode::Wormhole,
            bandwidth_flits_per_s: Some(200_000),
            propagation_ns: 10_000,
            keepalive_interval_ns: 50_000_000,
            dead_after_ns: 300_000_000,
            mtu: 1400,
            flit_payload: 16,
            max_packet_flits: 8,
            recovery: Default::default(),
            transport: DataTransport::Udp,
            link_retrain_ns: crate::link::DEFAULT_RETRAIN_NS,
            head_of_queue_lifetime_ns: None,
            switch_latency: SwitchLatency::DEFAULT,
            crossbar_speedup: 1,
            time_dilation: 1,
            sbrp_gap_recovery: true,
        }
    }
}

/// One cabled port of a daemon: its number and what reaches the peer on the
/// other end of the cable — the peer's UDP data address (UDP transport) or
/// the local network interface the cable is plugged into (Ethernet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortPeer {
    pub port: PortNo,
    /// UDP transport: the peer process's data address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<SocketAddr>,
    /// UDP transport: the port number on the peer's end of the cable. The
    /// peer writes it into every datagram's header; it tells apart
    /// parallel cables to one peer address, and is required for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_port: Option<PortNo>,
    /// Ethernet transport: the local interface of this port (`n3p1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Ethernet transport: the MAC address of the peer's interface. Frames
    /// go to it and frames from any other source are dropped; when absent,
    /// frames go to the broadcast address and any source is accepted (a
    /// point-to-point cable has one peer anyway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_mac: Option<String>,
    /// Shm transport: the link's ring file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<std::path::PathBuf>,
    /// Shm transport: which end of the link this port is (0: the ring file's
    /// first ring is ours to write, 1: the second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_end: Option<u8>,
    /// Shm transport: the peer daemon's doorbell (a named pipe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_doorbell: Option<std::path::PathBuf>,
}

impl PortPeer {
    /// A port whose peer listens on UDP at `peer`.
    pub fn udp(port: PortNo, peer: SocketAddr) -> Self {
        PortPeer {
            port,
            peer: Some(peer),
            peer_port: None,
            interface: None,
            peer_mac: None,
            ring: None,
            ring_end: None,
            peer_doorbell: None,
        }
    }

    /// A port cabled by end `end` of the shared-memory link file `ring`,
    /// whose peer's doorbell is `peer_doorbell`.
    pub fn shm(
        port: PortNo,
        ring: &std::path::Path,
        end: u8,
        peer_doorbell: &std::path::Path,
    ) -> Self {
        PortPeer {
            port,
            peer: None,
            peer_port: None,
            interface: None,
            peer_mac: None,
            ring: Some(ring.to_path_buf()),
            ring_end: Some(end),
            peer_doorbell: Some(peer_doorbell.to_path_buf()),
        }
    }

    /// The same port, knowing the port number on the peer's end.
    pub fn with_peer_port(mut self, peer_port: PortNo) -> Self {
        self.peer_port = Some(peer_port);
        self
    }

    /// A port cabled through the local interface `interface`.
    pub fn ethernet(port: PortNo, interface: &str, peer_mac: Option<[u8; 6]>) -> Self {
        PortPeer {
            port,
            peer: None,
            peer_port: None,
            interface: Some(interface.to_string()),
            peer_mac: peer_mac.map(|m| {
                m.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":")
            }),
            ring: None,
            ring_end: None,
            peer_doorbell: None,
        }
    }
}

/// What a role-specific daemon is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "role")]
pub enum Role {
    Switch {
        id: SwitchId,
        radix: usize,
    },
    /// A host has one port (full duplex), or two on one-way links (RUFT):
    /// it sends on port 0 and receives on port 1
    /// ([`HOST_SEND_PORT`], [`HOST_RECEIVE_PORT`]).
    Host {
        id: HostId,
        hosts: u32,
        #[serde(default = "one_port", skip_serializing_if = "is_one_port")]
        ports: usize,
    },
}

/// The port a two-port host sends on (the sending end of a one-way link).
pub const HOST_SEND_PORT: PortNo = 0;
/// The port a two-port host receives on (the receiving end of a one-way link).
pub const HOST_RECEIVE_PORT: PortNo = 1;

fn one_port() -> usize {
    1
}

fn is_one_port(n: &usize) -> bool {
    *n == 1
}

/// The file the controller writes for each daemon (`--config FILE`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// Node name (from the topology), used in logs and metric labels.
    pub name: String,
    pub role: Role,
    /// Shared secret of the fabric.
    pub token: String,
    /// UDP address for flits (bound by the UDP transport only).
    pub data_addr: SocketAddr,
    /// TCP address for control requests.
    pub control_addr: SocketAddr,
    /// HTTP address for Prometheus metrics (None = no exporter).
    #[serde(default)]
    pub metrics_addr: Option<SocketAddr>,
    pub ports: Vec<PortPeer>,
    pub fabric: FabricParams,
    /// Seed for the daemon's random choices.
    #[serde(default)]
    pub seed: u64,
    /// Where to push [`DaemonEvent`]s (UDP, one JSON object per datagram),
    /// so the controller learns of detected faults without polling.
    #[serde(default)]
    pub events_addr: Option<SocketAddr>,
    /// Ethernet transport: the network namespace (a name under
    /// /var/run/netns, or a path) holding the ports' interfaces. The daemon
    /// opens its data sockets there and everything else (control, metrics,
    /// events) where it was started. None = the daemon's own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// Shm transport: this daemon's doorbell, a named pipe its neighbours
    /// write to when it sleeps and they wrote into its rings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doorbell: Option<std::path::PathBuf>,
    /// Hosts only: an IP interface (a TUN device) whose packets cross the
    /// fabric as messages (docs/ip.md). None = no IP interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tun: Option<TunConfig>,
}

/// A host's IP interface (docs/ip.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunConfig {
    /// The network namespace to create the device in (a name under
    /// /var/run/netns, or a path); None = the daemon's own (a container's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// Device name.
    pub device: String,
    /// The fabric's subnet: this host's address and every peer's.
    pub plan: crate::host::ip::IpPlan,
    /// The device's MTU ([`crate::host::ip::interface_mtu`] by default).
    pub mtu: u32,
}

/// Smallest MTU an IP interface gets (IPv4's minimum datagram every host
/// must accept).
pub const MIN_TUN_MTU: u32 = 576;

impl TunConfig {
    fn validate(&self, name: &str, role: &Role) -> Result<(), ConfigError> {
        let Role::Host { hosts, .. } = role else {
            return Err(ConfigError(format!(
                "{name}: only hosts have an IP interface (tun)"
            )));
        };
        let d = &self.device;
        if d.is_empty() || d.len() > MAX_INTERFACE_NAME || d.contains(['/', ':', ' ']) {
            return Err(ConfigError(format!(
                "{name}: tun device `{d}` is not a valid interface name (1..={MAX_INTERFACE_NAME} characters, no `/`, `:` or spaces)"
            )));
        }
        if !(MIN_TUN_MTU..=65_535).contains(&self.mtu) {
            return Err(ConfigError(format!(
                "{name}: tun MTU {} must be {MIN_TUN_MTU}..=65535",
                self.mtu
            )));
        }
        self.plan
            .check_hosts(*hosts as u64)
            .map_err(|e| ConfigError(format!("{name}: {e}")))
    }
}

/// Something a daemon noticed, pushed to the controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonEvent {
    /// Node name.
    pub node: String,
    /// CLOCK_MONOTONIC of the daemon when it noticed, in ns.
    pub time_ns: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum EventKind {
    /// The link on `port` went down: the peer fell silent (keepalive
    /// timeout) or the port was administratively disabled.
    PortDown {
        port: PortNo,
        reason: String,
        /// When the peer was last heard (same clock as `time_ns`; 0 if
        /// never): for a peer that died, the best estimate of when it did.
        #[serde(default)]
        last_heard_ns: u64,
    },
    /// The link on `port` works again.
    PortUp { port: PortNo },
    /// A link error on `port` (docs/wire.md, "Link errors and retraining"):
    /// a datagram was lost or rejected here (`by_peer` false; `cause` crc,
    /// malformed, seq_gap) or the peer detected one and sent a link reset.
    /// The link retrains for `retrain_ns`; a `port-down` follows if it was up.
    LinkError {
        port: PortNo,
        cause: String,
        by_peer: bool,
        retrain_ns: u64,
    },
}

impl DaemonConfig {
    /// Checks the parts the daemons rely on; names what is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let radix = match self.role {
            Role::Switch { radix, .. } => radix,
            Role::Host { id, hosts, ports } => {
                if id >= hosts {
                    return Err(ConfigError(format!(
                        "host id {id} is not below the host count {hosts}"
                    )));
                }
                if !(1..=2).contains(&ports) {
                    return Err(ConfigError(format!(
                        "{}: a host has 1 port, or 2 on one-way links (send on {HOST_SEND_PORT}, receive on {HOST_RECEIVE_PORT}), not {ports}",
                        self.name
                    )));
                }
                ports
            }
        };
        let mut seen = std::collections::BTreeSet::new();
        for p in &self.ports {
            if p.port as usize >= radix {
                return Err(ConfigError(format!(
                    "{}: port {} does not exist (radix {radix})",
                    self.name, p.port
                )));
            }
            if !seen.insert(p.port) {
                return Err(ConfigError(format!(
                    "{}: port {} is listed twice",
                    self.name, p.port
                )));
            }
        }
        self.validate_transport()?;
        if let Some(t) = &self.tun {
            t.validate(&self.name, &self.role)?;
        }
        self.fabric
            .validate()
            .map_err(|e| ConfigError(format!("{}: {}", self.name, e.0)))?;
        Ok(())
    }
}

impl DaemonConfig {
    /// Every port names what the fabric's transport needs, and nothing of
    /// the other transport (a half-converted configuration is a mistake).
    fn validate_transport(&self) -> Result<(), ConfigError> {
        let name = &self.name;
        let transport = self.fabric.transport.name();
        let mut interfaces = std::collections::BTreeSet::new();
        let mut cables: std::collections::BTreeMap<SocketAddr, Vec<(PortNo, Option<PortNo>)>> =
            Default::default();
        for p in &self.ports {
            let port = p.port;
            match self.fabric.transport {
                DataTransport::Udp => {
                    if p.peer.is_none() {
                        return Err(ConfigError(format!(
                            "{name}: port {port} has no peer address (the udp transport needs one)"
                        )));
                    }
                    if p.interface.is_some() || p.peer_mac.is_some() {
                        return Err(ConfigError(format!(
                            "{name}: port {port} names an interface, but the fabric's transport is udp"
                        )));
                    }
                    if p.ring.is_some() {
                        return Err(ConfigError(format!(
                            "{name}: port {port} names a ring, but the fabric's transport is udp"
                        )));
                    }
                    if let Some(peer) = p.peer {
                        cables.entry(peer).or_default().push((port, p.peer_port));
                    }
                }
                DataTransport::Ethernet => {
                    let Some(iface) = &p.interface else {
                        return Err(ConfigError(format!(
                            "{name}: port {port} has no interface (the ethernet transport needs one)"
                        )));
                    };
                    if iface.is_empty()
                        || iface.len() > MAX_INTERFACE_NAME
                        || iface
                            .chars()
                            .any(|c| c == '/' || c == ':' || c.is_whitespace())
                    {
                        return Err(ConfigError(format!(
                            "{name}: port {port}: `{iface}` is not a valid interface name (1..={MAX_INTERFACE_NAME} characters, no `/`, `:` or spaces)"
                        )));
                    }
                    if !interfaces.insert(iface.as_str()) {
                        return Err(ConfigError(format!(
                            "{name}: interface `{iface}` is given to two ports"
                        )));
                    }
                    if let Some(mac) = &p.peer_mac {
                        if parse_mac(mac).is_none() {
                            return Err(ConfigError(format!(
                                "{name}: port {port}: peer MAC `{mac}` is not of the form 02:f1:00:00:00:01"
                            )));
                        }
                    }
                    if p.peer.is_some() {
                        return Err(ConfigError(format!(
                            "{name}: port {port} has a peer address, but the fabric's transport is ethernet"
                        )));
                    }
                    if p.ring.is_some() {
                        return Err(ConfigError(format!(
                            "{name}: port {port} names a ring, but the fabric's transport is ethernet"
                        )));
                    }
                }
                DataTransport::Shm => {
                    if p.ring.is_none() || p.peer_doorbell.is_none() {
                        return Err(ConfigError(format!(
                            "{name}: port {port} names no ring file or no peer doorbell (the shm transport needs both)"
                        )));
                    }
                    if !matches!(p.ring_end, Some(0 | 1)) {
                        return Err(ConfigError(format!(
                            "{name}: port {port}: ring_end must be 0 or 1"
                        )));
                    }
                    if p.peer.is_some() || p.interface.is_some() {
                        return Err(ConfigError(format!(
                            "{name}: port {port} has a peer address or an interface, but the fabric's transport is shm"
                        )));
                    }
                }
            }
        }
        // Parallel cables to one peer address are told apart by the peer's
        // port, which each must name, and no two alike.
        for (peer, ends) in cables.iter().filter(|(_, ends)| ends.len() > 1) {
            let mut peer_ports = std::collections::BTreeSet::new();
            for &(port, peer_port) in ends {
                let Some(peer_port) = peer_port else {
                    return Err(ConfigError(format!(
                        "{name}: port {port} is one of {} cables to {peer} but names no peer_port (parallel cables are told apart by it)",
                        ends.len()
                    )));
                };
                if !peer_ports.insert(peer_port) {
                    return Err(ConfigError(format!(
                        "{name}: port {port} and another port are both cabled to port {peer_port} of {peer}"
                    )));
                }
            }
        }
        if self.netns.is_some() && self.fabric.transport != DataTransport::Ethernet {
            return Err(ConfigError(format!(
                "{name}: a network namespace is only used by the ethernet transport, not {transport}"
            )));
        }
        if (self.fabric.transport == DataTransport::Shm) != self.doorbell.is_some() {
            return Err(ConfigError(format!(
                "{name}: a doorbell is needed by, and only used by, the shm transport (this one is {transport})"
            )));
        }
        if let Some(ns) = &self.netns {
            if ns.is_empty() || ns.contains('\0') {
                return Err(ConfigError(format!(
                    "{name}: `{ns}` is not a network namespace name"
                )));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid daemon configuration: {0}")]
pub struct ConfigError(pub String);

/// The bounds every value of a fabric and its traffic must keep, in one
/// place: the daemons refuse a configuration or request outside them and
/// `flitctl` checks the same bounds before it starts a process.
pub mod limits {
    /// Virtual channels per link: the credit item carries one counter per
    /// VC ([`crate::wire::MAX_VCS`]).
    pub const MAX_VCS: usize = crate::wire::MAX_VCS;
    /// Input buffer depth per VC, in flits.
    pub const MAX_BUFFER_DEPTH: u16 = 4096;
    pub const MIN_MTU: usize = 128;
    pub const MAX_MTU: usize = 65_000;
    /// Payload bytes per flit.
    pub const MAX_FLIT_PAYLOAD: u16 = 1024;
    /// Longest packet, in flits.
    pub const MAX_PACKET_FLITS: u32 = 4096;
    /// Time dilation factor (past this a second of emulated time lasts
    /// over a quarter of an hour).
    pub const MAX_TIME_DILATION: u32 = 1000;
    /// Longest message, in flits (a host builds each message in memory).
    pub const MAX_MESSAGE_FLITS: u32 = 1 << 20;
    /// Longest link propagation delay.
    pub const MAX_PROPAGATION_NS: u64 = 10_000_000_000;
    /// Longest dead-peer and retrain timers.
    pub const MAX_TIMER_NS: u64 = 60_000_000_000;
    pub use crate::switch_params::{
        MAX_CROSSBAR_SPEEDUP, MAX_SWITCH_LATENCY_FLIT_TIMES, MAX_SWITCH_LATENCY_NS,
    };
    /// Longest traffic phase: a day.
    pub const MAX_TRAFFIC_NS: u64 = 86_400_000_000_000;
    /// Longest control request line, in bytes (a routing table of a large
    /// fabric is well below it).
    pub const MAX_CONTROL_LINE: usize = 1 << 20;
}

/// What traffic a host generates (see [`crate::host`] for the patterns).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficSpec {
    /// Pattern name as accepted by the host's traffic module (`uniform`,
    /// `all-to-all`, `bit-reversal`, …).
    pub pattern: String,
    /// Offered load as a fraction of the link bandwidth (0..=1).
    pub load: f64,
    /// Message length in flits.
    pub message_flits: u32,
    /// Stop generating after this long (ns).
    pub duration_ns: u64,
    /// For all-to-all: rounds through every destination.
    #[serde(default)]
    pub rounds: u32,
    pub seed: u64,
}

impl TrafficSpec {
    /// Checks the traffic against [`limits`] and `params`; names the value
    /// and the allowed range. Hosts run it on every `start-traffic`,
    /// `flitctl` before it starts anything.
    pub fn validate(&self, params: &FabricParams) -> Result<(), ConfigError> {
        use limits::*;
        self.pattern
            .parse::<crate::host::traffic::TrafficPattern>()
            .map_err(|e| ConfigError(e.to_string()))?;
        if !(self.load.is_finite() && self.load > 0.0 && self.load <= 1.0) {
            return Err(ConfigError(format!(
                "load {} must be in (0, 1] (a fraction of the link bandwidth)",
                self.load
            )));
        }
        if self.message_flits == 0 || self.message_flits > MAX_MESSAGE_FLITS {
            return Err(ConfigError(format!(
                "message length {} flits must be 1..={MAX_MESSAGE_FLITS}",
                self.message_flits
            )));
        }
        // A message is cut into packets numbered by a 16-bit field.
        let most = params.max_packet_flits as u64 * u16::MAX as u64;
        if self.message_flits as u64 > most {
            return Err(ConfigError(format!(
                "message length {} flits needs more than {} packets of {} flits",
                self.message_flits,
                u16::MAX,
                params.max_packet_flits
            )));
        }
        if self.duration_ns == 0 || self.duration_ns > MAX_TRAFFIC_NS {
            return Err(ConfigError(format!(
                "traffic duration {} ns must be longer than 0 and at most a day",
                self.duration_ns
            )));
        }
        Ok(())
    }
}

/// A control request. Every variant is wrapped in [`Envelope`] with the token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "op")]
pub enum Request {
    /// Liveness and identity.
    Ping,
    /// Install a forwarding table (switches only).
    InstallTable {
        table: SwitchTable,
        vc_policy: VcPolicy,
    },
    /// Administratively bring a port down or up (a link kill is both ends).
    SetPort { port: PortNo, up: bool },
    /// Start generating traffic (hosts only).
    StartTraffic { spec: TrafficSpec },
    /// Stop generating new messages (in-flight ones still complete).
    StopTraffic,
    /// Counters and, for hosts, the delivery report, as JSON.
    Report,
    /// Exit cleanly.
    Shutdown,
    /// Administratively bring every cabled port of a switch down or up at
    /// once (a switch fault: the flits it buffers are dropped and counted).
    SetAllPorts { up: bool },
    /// Transient link fault: damage the payload of the next `count`
    /// datagrams sent on `port`, so the receiver's CRC check rejects them
    /// (counted there as link errors).
    Corrupt { port: PortNo, count: u32 },
    /// Fault injection for stall diagnosis: the switch's `port` stops
    /// (`on`) or resumes returning credits to its peer, whose traffic
    /// towards it then stops for want of credits while the link stays up
    /// ([`crate::link::Link::set_credits_withheld`]). Never used outside
    /// tests and `flitctl up --withhold-credits`.
    WithholdCredits { port: PortNo, on: bool },
    /// Configure a registered mechanism on this node (`config` set) or
    /// turn it off: the configuration its controller half made
    /// ([`crate::mechanism::MechanismPlan`]), applied by its switch or host
    /// half ([`crate::mechanism::configure_switch`],
    /// [`crate::mechanism::configure_host`]). Hosts answer with
    /// [`Reply::MechanismConfigured`].
    ConfigureMechanism {
        mechanism: String,
        config: Option<crate::mechanism::NodeConfig>,
    },
    /// Hold (`paused`) or let go of injection (hosts only): packets partly
    /// sent finish, nothing new starts. Used around a table swap
    /// (quiesced reconfiguration, docs/chaos.md).
    SetInjection { paused: bool },
    /// How many flits this daemon still has in the network: body
    /// `{"in_flight_flits": n}` ([`crate::switch::Switch::in_flight_flits`],
    /// [`crate::host::HostEndpoint::in_flight_flits`]).
    InFlight,
}

impl Request {
    /// The request's `op` on the wire (`set-port`, …), for logs.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::InstallTable { .. } => "install-table",
            Request::SetPort { .. } => "set-port",
            Request::StartTraffic { .. } => "start-traffic",
            Request::StopTraffic => "stop-traffic",
            Request::Report => "report",
            Request::Shutdown => "shutdown",
            Request::SetAllPorts { .. } => "set-all-ports",
            Request::Corrupt { .. } => "corrupt",
            Request::ConfigureMechanism { .. } => "configure-mechanism",
            Request::SetInjection { .. } => "set-injection",
            Request::InFlight => "in-flight",
            Request::WithholdCredits { .. } => "withhold-credits",
        }
    }

    /// Whether it only reads the daemon's state.
    pub fn is_read_only(&self) -> bool {
        matches!(self, Request::Ping | Request::Report | Request::InFlight)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub token: String,
    #[serde(flatten)]
    pub request: Request,
}

/// A daemon's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Response {
    Ok { body: Reply },
    Error { message: String },
}

impl Response {
    /// The request was carried out, with nothing to report.
    pub fn ok() -> Self {
        Response::Ok { body: Reply::Done }
    }
    pub fn reply(body: Reply) -> Self {
        Response::Ok { body }
    }
    pub fn error(message: impl Into<String>) -> Self {
        Response::Error {
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> DaemonConfig {
        DaemonConfig {
            name: "s0".into(),
            role: Role::Switch { id: 0, radix: 4 },
            token: "t".into(),
            data_addr: "127.0.0.1:7000".parse().unwrap(),
            control_addr: "127.0.0.1:7001".parse().unwrap(),
            metrics_addr: None,
            ports: vec![PortPeer::udp(0, "127.0.0.2:7000".parse().unwrap())],
            fabric: FabricParams::default(),
            seed: 1,
            events_addr: None,
            netns: None,
            doorbell: None,
            tun: None,
        }
    }

    #[test]
    fn switch_timing_parses_converts_and_bad_values_are_named() {
        assert_eq!(SwitchLatency::parse("4ft"), Ok(SwitchLatency::FlitTimes(4)));
        assert_eq!(SwitchLatency::parse("250ns"), Ok(SwitchLatency::Ns(250)));
        assert_eq!(SwitchLatency::parse("1.5us"), Ok(SwitchLatency::Ns(1_500)));
        assert_eq!(SwitchLatency::parse("0"), Ok(SwitchLatency::Ns(0)));
        for bad in ["4", "fast", "-1us", "ft"] {
            let e = SwitchLatency::parse(bad).unwrap_err();
            assert!(e.0.contains("switch latency"), "{bad}: {e}");
        }
        // 4 flit times at the default 200 000 flits/s: 20 us.
        let p = FabricParams::default();
        assert_eq!(p.switch_timing().traversal_ns, 20_000);
        assert_eq!(
            p.switch_config(
                8,
                &LinkDriver {
                    count_transit: false,
                    pacing_quantum_ns: 0
                }
            )
            .timing
            .crossbar_speedup,
            1
        );
        let bad = FabricParams {
            crossbar_speedup: 0,
            ..FabricParams::default()
        };
        assert!(bad.validate().unwrap_err().0.contains("crossbar speedup 0"));
        let bad = FabricParams {
            switch_latency: SwitchLatency::FlitTimes(5_000),
            ..FabricParams::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .0
            .contains("switch latency 5000ft"));
        let bad = FabricParams {
            switch_latency: SwitchLatency::Ns(2_000_000),
            ..FabricParams::default()
        };
        assert!(bad.validate().unwrap_err().0.contains("switch latency"));
        // The daemons' configuration carries both.
        let text = serde_json::to_string(&p).unwrap();
        let back: FabricParams = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn config_round_trips_and_validates() {
        let c = cfg();
        c.validate().unwrap();
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<DaemonConfig>(&text).unwrap(), c);
    }

    #[test]
    fn config_errors_name_the_problem() {
        let mut c = cfg();
        c.ports
            .push(PortPeer::udp(9, "127.0.0.3:7000".parse().unwrap()));
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("port 9 does not exist"));
        let mut c = cfg();
        c.ports.push(c.ports[0].clone());
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("listed twice"));
        let mut c = cfg();
        c.fabric.switching = SwitchingMode::VirtualCutThrough;
        c.fabric.max_packet_flits = 64;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("cut-through"));
        let mut text = serde_json::to_string(&cfg()).unwrap();
        text.insert_str(1, "\"bogus\":1,");
        assert!(serde_json::from_str::<DaemonConfig>(&text)
            .unwrap_err()
            .to_string()
            .contains("bogus"));
    }

    #[test]
    fn parallel_udp_cables_must_name_distinct_peer_ports() {
        let b: SocketAddr = "127.0.0.2:7000".parse().unwrap();
        let mut c = cfg();
        c.ports = vec![PortPeer::udp(0, b), PortPeer::udp(1, b)];
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("port 0 is one of 2 cables to 127.0.0.2:7000"),
            "{e}"
        );
        c.ports = vec![
            PortPeer::udp(0, b).with_peer_port(3),
            PortPeer::udp(1, b).with_peer_port(3),
        ];
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("both cabled to port 3 of 127.0.0.2:7000"), "{e}");
        c.ports[1].peer_port = Some(4);
        c.validate().unwrap();
    }

    #[test]
    fn ethernet_ports_need_interfaces_and_errors_name_them() {
        let eth = |ports: Vec<PortPeer>| {
            let mut c = cfg();
            c.fabric.transport = DataTransport::Ethernet;
            c.netns = Some("flitnet-x".into());
            c.ports = ports;
            c.validate().map_err(|e| e.to_string())
        };
        let ok = eth(vec![
            PortPeer::ethernet(0, "n4p0", Some([2, 0xf1, 0, 0, 0, 1])),
            PortPeer::ethernet(1, "n4p1", None),
        ]);
        assert_eq!(ok, Ok(()));
        let text = serde_json::to_string(&PortPeer::ethernet(
            0,
            "n4p0",
            Some([2, 0xf1, 0, 0xa, 0, 1]),
        ))
        .unwrap();
        assert_eq!(
            text,
            r#"{"port":0,"interface":"n4p0","peer_mac":"02:f1:00:0a:00:01"}"#
        );
        for (ports, expect) in [
            (
                vec![PortPeer::udp(0, "127.0.0.1:1".parse().unwrap())],
                "port 0 has no interface",
            ),
            (
                vec![PortPeer::ethernet(0, "an-interface-name-too-long", None)],
                "`an-interface-name-too-long` is not a valid interface name",
            ),
            (
                vec![
                    PortPeer::ethernet(0, "a", None),
                    PortPeer::ethernet(1, "a", None),
                ],
                "interface `a` is given to two ports",
            ),
        ] {
            let err = eth(ports).unwrap_err();
            assert!(err.contains(expect) && err.contains("s0"), "{err}");
        }
        let mut bad_mac = PortPeer::ethernet(0, "a", None);
        bad_mac.peer_mac = Some("02:f1:zz:00:00:01".into());
        assert!(eth(vec![bad_mac]).unwrap_err().contains("peer MAC"));
        // A UDP fabric refuses Ethernet ports and a namespace.
        let mut c = cfg();
        c.ports = vec![PortPeer::ethernet(0, "a", None)];
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("port 0 has no peer address"));
        let mut c = cfg();
        c.netns = Some("x".into());
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("only used by the ethernet"));
        assert_eq!(parse_mac("ff:ff:ff:ff:ff:ff"), Some([0xff; 6]));
        assert_eq!(parse_mac("ff:ff:ff:ff:ff"), None);
        assert_eq!(parse_mac("ff:ff:ff:ff:ff:ff:00"), None);
    }

    #[test]
    fn fabric_and_traffic_values_outside_the_limits_are_named() {
        let p = FabricParams::default();
        p.validate().unwrap();
        let fabric = |f: fn(&mut FabricParams)| {
            let mut p = FabricParams::default();
            f(&mut p);
            p.validate().unwrap_err().0
        };
        assert!(fabric(|p| p.vcs = 16).contains("vcs = 16 must be 1..=15"));
        assert!(fabric(|p| p.vcs = 0).contains("vcs = 0"));
        assert!(fabric(|p| p.buffer_depth = 0).contains("buffer_depth = 0"));
        assert!(fabric(|p| p.max_packet_flits = 0).contains("max_packet_flits = 0"));
        assert!(fabric(|p| p.bandwidth_flits_per_s = Some(0)).contains("bandwidth"));
        assert!(fabric(|p| p.flit_payload = 0).contains("flit_payload = 0"));
        let spec = TrafficSpec {
            pattern: "uniform".into(),
            load: 0.3,
            message_flits: 8,
            duration_ns: 1_000_000_000,
            rounds: 1,
            seed: 1,
        };
        spec.validate(&p).unwrap();
        let traffic = |f: fn(&mut TrafficSpec)| {
            let mut s = spec.clone();
            f(&mut s);
            s.validate(&p).unwrap_err().0
        };
        for load in [0.0, 5.0, -1.0, f64::NAN] {
            let mut s = spec.clone();
            s.load = load;
            assert!(s.validate(&p).unwrap_err().0.contains("must be in (0, 1]"));
        }
        assert!(traffic(|s| s.message_flits = 0).contains("message length 0 flits"));
        assert!(traffic(|s| s.message_flits = u32::MAX).contains("message length"));
        assert!(traffic(|s| s.duration_ns = 0).contains("duration 0 ns"));
        assert!(traffic(|s| s.pattern = "zigzag".into()).contains("unknown traffic pattern"));
        // The daemons refuse what the limits refuse: a config with 16 VCs.
        let mut c = cfg();
        c.fabric.vcs = 16;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("s0: vcs = 16"), "{err}");
    }

    #[test]
    fn op_names_are_the_wire_tags() {
        for r in [
            Request::Ping,
            Request::SetPort { port: 1, up: true },
            Request::StopTraffic,
            Request::Report,
            Request::Shutdown,
            Request::SetAllPorts { up: false },
            Request::Corrupt { port: 0, count: 1 },
            Request::ConfigureMechanism {
                mechanism: "dlr".into(),
                config: None,
            },
            Request::SetInjection { paused: true },
            Request::InFlight,
            Request::WithholdCredits { port: 1, on: true },
        ] {
            let v = serde_json::to_value(&r).unwrap();
            assert_eq!(v["op"], r.op());
        }
    }

    #[test]
    fn requests_are_tagged_json_lines() {
        let e = Envelope {
            token: "x".into(),
            request: Request::SetPort { port: 3, up: false },
        };
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(line, r#"{"token":"x","op":"set-port","port":3,"up":false}"#);
        assert_eq!(serde_json::from_str::<Envelope>(&line).unwrap(), e);
        assert!(serde_json::from_str::<Envelope>(r#"{"token":"x","op":"explode"}"#).is_err());
        let corrupt = Envelope {
            token: "x".into(),
            request: Request::Corrupt { port: 2, count: 5 },
        };
        let line = serde_json::to_string(&corrupt).unwrap();
        assert_eq!(line, r#"{"token":"x","op":"corrupt","port":2,"count":5}"#);
        let pause = r#"{"token":"x","op":"set-injection","paused":true}"#;
        assert_eq!(
            serde_json::from_str::<Envelope>(pause).unwrap().request,
            Request::SetInjection { paused: true }
        );
        let in_flight = r#"{"token":"x","op":"in-flight"}"#;
        assert_eq!(
            serde_json::from_str::<Envelope>(in_flight).unwrap().request,
            Request::InFlight
        );
        let all = r#"{"token":"x","op":"set-all-ports","up":false}"#;
        assert_eq!(
            serde_json::from_str::<Envelope>(all).unwrap().request,
            Request::SetAllPorts { up: false }
        );
        let dlr = Envelope {
            token: "x".into(),
            request: Request::ConfigureMechanism {
                mechanism: "dlr".into(),
                config: Some(crate::mechanism::plan::encode(
                    &crate::mechanism::dlr::plan::DlrSwitchConfig {
                        config: crate::mechanism::dlr::DlrConfig::new(
                            4,
                            3,
                            crate::mechanism::dlr::DlrVariant::Deterministic,
                            crate::mechanism::dlr::DlrFaults::Switch,
                        ),
                        level: 1,
                        label: vec![2, 3],
                    },
                )),
            },
        };
        let line = serde_json::to_string(&dlr).unwrap();
        assert!(line.contains(r#""op":"configure-mechanism""#), "{line}");
        assert_eq!(serde_json::from_str::<Envelope>(&line).unwrap(), dlr);
    }
}
