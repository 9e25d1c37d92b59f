//! The control protocol between `flitctl` and the daemons, and the daemons'
//! configuration files.
//!
//! Control messages are JSON, one per line, over TCP. Every request carries
//! the fabric's shared token; a daemon refuses any request whose token does
//! not match, so that a stray client on the same machine (or container
//! network) cannot reprogram the fabric.

use crate::routing::{SwitchTable, VcPolicy};
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
    pub recovery: crate::host::sbrp::RecoveryProtocol,
}

impl FabricParams {
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
        }
    }
}

/// One cabled port of a daemon: its number and the data address of the peer
/// process on the other end of the cable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortPeer {
    pub port: PortNo,
    pub peer: SocketAddr,
}

/// What a role-specific daemon is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "role")]
pub enum Role {
    Switch { id: SwitchId, radix: usize },
    Host { id: HostId, hosts: u32 },
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
    /// UDP address for flits.
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
    PortDown { port: PortNo, reason: String },
    /// The link on `port` works again.
    PortUp { port: PortNo },
}

impl DaemonConfig {
    /// Checks the parts the daemons rely on; names what is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let radix = match self.role {
            Role::Switch { radix, .. } => radix,
            Role::Host { id, hosts } => {
                if id >= hosts {
                    return Err(ConfigError(format!(
                        "host id {id} is not below the host count {hosts}"
                    )));
                }
                1
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
        let f = &self.fabric;
        if f.vcs == 0 || f.vcs > 16 {
            return Err(ConfigError(format!("vcs = {} must be 1..=16", f.vcs)));
        }
        if f.buffer_depth == 0 {
            return Err(ConfigError("buffer_depth must be at least 1 flit".into()));
        }
        if f.mtu < 128 || f.mtu > 65_000 {
            return Err(ConfigError(format!("mtu = {} must be 128..=65000", f.mtu)));
        }
        if f.max_packet_flits == 0 {
            return Err(ConfigError("max_packet_flits must be at least 1".into()));
        }
        if f.switching == SwitchingMode::VirtualCutThrough
            && f.max_packet_flits > f.buffer_depth as u32
        {
            return Err(ConfigError(format!(
                "virtual cut-through needs buffer_depth ({}) >= max_packet_flits ({})",
                f.buffer_depth, f.max_packet_flits
            )));
        }
        if f.dead_after_ns <= f.keepalive_interval_ns {
            return Err(ConfigError(
                "dead_after must be longer than the keepalive interval".into(),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid daemon configuration: {0}")]
pub struct ConfigError(pub String);

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
    /// Turn dynamic local rerouting (seed 002) on (`config` set) or off on
    /// a switch of a k-ary n-tree: the switch then misroutes around dead
    /// ports on its own. `level` (0 = leaves) and `label` (digits 1..n-1)
    /// place the switch in the tree ([`crate::topology::Switch`]).
    ConfigureReroute {
        config: Option<crate::recovery::dlr::DlrConfig>,
        #[serde(default)]
        level: u32,
        #[serde(default)]
        label: Vec<u32>,
    },
    /// Seed 004 (hosts only): the faults of a mesh/torus fabric whose
    /// switches run [`VcPolicy::Legs`] with `legs` escape virtual networks.
    /// The host plans, per destination, a route avoiding every fault with
    /// `mechanism` (a Table 2 label: `I`, `I×2`, `I+D`, `Ix2+D`, …) and
    /// puts it in the heads of the packets it builds from then on. An
    /// empty fault set goes back to direct routes.
    SetIntermediateRoutes {
        topology: Box<crate::topology::Topology>,
        faults: crate::topology::FaultSet,
        mechanism: String,
        legs: u8,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub token: String,
    #[serde(flatten)]
    pub request: Request,
}

/// A daemon's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Response {
    Ok {
        #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
        body: serde_json::Value,
    },
    Error {
        message: String,
    },
}

impl Response {
    pub fn ok() -> Self {
        Response::Ok {
            body: serde_json::Value::Null,
        }
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
            ports: vec![PortPeer {
                port: 0,
                peer: "127.0.0.2:7000".parse().unwrap(),
            }],
            fabric: FabricParams::default(),
            seed: 1,
            events_addr: None,
        }
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
        c.ports.push(PortPeer {
            port: 9,
            peer: "127.0.0.3:7000".parse().unwrap(),
        });
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
        let all = r#"{"token":"x","op":"set-all-ports","up":false}"#;
        assert_eq!(
            serde_json::from_str::<Envelope>(all).unwrap().request,
            Request::SetAllPorts { up: false }
        );
        let dlr = Envelope {
            token: "x".into(),
            request: Request::ConfigureReroute {
                config: Some(crate::recovery::dlr::DlrConfig::new(
                    4,
                    3,
                    crate::recovery::dlr::DlrVariant::Deterministic,
                    crate::recovery::dlr::DlrFaults::Switch,
                )),
                level: 1,
                label: vec![2, 3],
            },
        };
        let line = serde_json::to_string(&dlr).unwrap();
        assert!(line.contains(r#""op":"configure-reroute""#), "{line}");
        assert_eq!(serde_json::from_str::<Envelope>(&line).unwrap(), dlr);
    }
}
