//! One fabric specification, whether it comes from flags (`up`, `compose`:
//! [`FabricArgs`]) or from a scenario's `fabric:` section
//! ([`crate::scenario::FabricSection`]): one set of defaults (the flags'),
//! and one builder of the daemons' [`FabricParams`].

use crate::parse::parse_duration;
use anyhow::{bail, Result};
use clap::Args;
use flitnet_core::control::{DataTransport, FabricParams, SwitchLatency, SwitchingMode};
use flitnet_core::mechanism::sbrp::RecoveryProtocol;
use flitnet_core::topology::Topology;
use std::time::Duration;

/// Link and switch parameters of an emulated fabric.
#[derive(Clone, Debug, PartialEq)]
pub struct FabricSpec {
    pub vcs: u8,
    /// Input buffer depth per VC, in flits.
    pub buffer_depth: u16,
    pub switching: SwitchingMode,
    /// Flits per second per link (0 = unlimited).
    pub bandwidth: u64,
    pub delay: Duration,
    /// A peer silent this long is declared down.
    pub dead_after: Duration,
    pub max_packet_flits: u32,
    pub recovery_protocol: RecoveryProtocol,
    pub transport: DataTransport,
    /// How long a link stays down after a link error (0: no retraining).
    pub link_retrain: Duration,
    pub hoq_lifetime: HoqLifetime,
    pub switch_latency: SwitchLatency,
    pub crossbar_speedup: u8,
    /// SBRP's receiver gap recovery and tail probes (flitnet's addition).
    pub gap_recovery: bool,
}

impl Default for FabricSpec {
    /// The flags' defaults: a scenario that leaves a key out gets what the
    /// command line gives when its flag is left out.
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            fabric: FabricArgs,
        }
        <Defaults as clap::Parser>::parse_from(["flitctl"])
            .fabric
            .spec()
    }
}

impl FabricSpec {
    /// The daemons' parameters. The head-of-queue lifetime `auto` is off
    /// here (it depends on the engine: see [`FabricSpec::params_for`]).
    pub fn params(&self) -> FabricParams {
        let dead_after_ns = self.dead_after.as_nanos() as u64;
        FabricParams {
            vcs: self.vcs,
            buffer_depth: self.buffer_depth,
            switching: self.switching,
            bandwidth_flits_per_s: (self.bandwidth > 0).then_some(self.bandwidth),
            propagation_ns: self.delay.as_nanos() as u64,
            // Six keepalives per dead-after interval, at most one per ms.
            keepalive_interval_ns: (dead_after_ns / 6).max(1_000_000),
            dead_after_ns,
            mtu: 1400,
            flit_payload: 16,
            max_packet_flits: self.max_packet_flits,
            recovery: self.recovery_protocol,
            transport: self.transport,
            link_retrain_ns: self.link_retrain.as_nanos() as u64,
            head_of_queue_lifetime_ns: match self.hoq_lifetime {
                HoqLifetime::Auto | HoqLifetime::Off => None,
                HoqLifetime::Fixed(d) => Some(d.as_nanos() as u64).filter(|&ns| ns > 0),
            },
            switch_latency: self.switch_latency,
            crossbar_speedup: self.crossbar_speedup,
            // Set by the front end (`--time-dilation`, `time-dilation:`).
            time_dilation: 1,
            sbrp_gap_recovery: self.gap_recovery,
        }
    }

    /// [`FabricSpec::params`] for a fabric routed by `engine` under
    /// `mechanism`: `auto` turns the head-of-queue lifetime on where it is
    /// needed ([`needs_hoq_lifetime`]), at the default for these links
    /// (128 drains of a full buffer or a longest packet, at least
    /// [`HOQ_LIFETIME_FLOOR_NS`]).
    pub fn params_for(&self, engine: &str, mechanism: crate::mechanism::Mechanism) -> FabricParams {
        let mut p = self.params();
        if self.hoq_lifetime == HoqLifetime::Auto
            && needs_hoq_lifetime(engine, mechanism, p.recovery)
        {
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
    /// sbrp2 (docs/sbrp.md).
    #[arg(long, default_value = "none", value_parser = parse_recovery)]
    pub recovery_protocol: flitnet_core::mechanism::sbrp::RecoveryProtocol,
    /// What carries the flits between daemons: `udp` on loopback,
    /// `ethernet`: raw Ethernet frames over one veth pair per link, in a
    /// network namespace made for the run (needs root), or `shm`:
    /// shared-memory rings between the daemons (docs/wire.md). Default:
    /// shm (compose: udp).
    #[arg(long, value_enum)]
    pub transport: Option<Transport>,
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
    /// `--engine local-reroute` and a recovery protocol (SBRP's faithful
    /// mode, docs/sbrp.md, whose adaptive VCs can deadlock once a fault cuts the escape
    /// network); `off`; or a duration (e.g. 400ms).
    #[arg(long, default_value = "auto", value_parser = parse_hoq_lifetime)]
    pub hoq_lifetime: HoqLifetime,
    /// Switch traversal latency (routing, allocation, crossbar): flit
    /// times (`4ft`: a four-stage router pipeline) or a duration
    /// (`250ns`); docs/performance.md, "The timing model". Default: the
    /// topology file's `switch-latency:`, else 4ft.
    #[arg(long, value_parser = parse_switch_latency)]
    pub switch_latency: Option<SwitchLatency>,
    /// Crossbar speedup: flits each switch input and output port moves per
    /// flit time (1 = none). Default: the topology file's
    /// `crossbar-speedup:`, else 1.
    #[arg(long)]
    pub crossbar_speedup: Option<u8>,
    /// SBRP's receiver gap recovery and its senders' tail probes,
    /// flitnet's addition to the papers' protocols (docs/sbrp.md,
    /// "Receiver gap recovery"): `off` runs SBRP-0/1/2 exactly as the
    /// thesis describes them.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub gap_recovery: OnOff,
    /// Give every host an IP interface (a TUN device `flit0` in a network
    /// namespace of its own, needs root): IP packets cross the fabric as
    /// messages, beside the generated traffic (`--pattern none`: IP only).
    /// Run programs there with `flitctl exec HOST -- CMD` (docs/ip.md).
    #[arg(long)]
    pub tun: bool,
    /// With --tun: the hosts' IPv4 subnet; host i gets its (i+1)th address.
    /// Default 10.B.0.0/16, B the fabric's loopback octet.
    #[arg(long, value_name = "A.B.C.D/N", requires = "tun")]
    pub tun_subnet: Option<flitnet_core::host::ip::IpPlan>,
    /// With --tun: the interfaces' MTU. Default: the fabric's largest
    /// packet (max packet flits × flit payload), times the smallest whole
    /// number that reaches 1280 bytes.
    #[arg(long, requires = "tun")]
    pub tun_mtu: Option<u32>,
}

/// A feature turned on or off (`--gap-recovery on|off`, `gap-recovery:
/// off`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    #[default]
    On,
    Off,
}

/// Crossbar speedup when neither a flag, a scenario nor the topology file
/// sets one: none.
pub const DEFAULT_CROSSBAR_SPEEDUP: u8 = 1;

fn parse_switch_latency(s: &str) -> Result<SwitchLatency, String> {
    SwitchLatency::parse(s).map_err(|e| e.0)
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

pub fn parse_hoq_lifetime(s: &str) -> Result<HoqLifetime, String> {
    match s {
        "auto" => Ok(HoqLifetime::Auto),
        "off" => Ok(HoqLifetime::Off),
        _ => match parse_duration(s)? {
            d if d.is_zero() => Ok(HoqLifetime::Off),
            d => Ok(HoqLifetime::Fixed(d)),
        },
    }
}

/// Whether a fabric routed by `engine` under `mechanism` with `protocol`
/// needs deadlock recovery: a routing that deadlocks around faults, with a
/// recovery protocol to resend what the lifetime discards. Seed 003's
/// local rerouting does once a fault cuts the escape network, adaptive DLR
/// once the faults go beyond its guarantee (docs/sbrp.md, "Deadlock").
/// Everything else is deadlock-free by its routing (or re-routed by the
/// controller), and keeps the lifetime off so that ordinary congestion can
/// never cost a packet.
pub fn needs_hoq_lifetime(
    engine: &str,
    mechanism: crate::mechanism::Mechanism,
    protocol: flitnet_core::mechanism::sbrp::RecoveryProtocol,
) -> bool {
    protocol.is_on() && (engine == "local-reroute" || mechanism.deadlocks_beyond_guarantee())
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Ethernet,
    /// Shared-memory rings between the daemons (docs/wire.md,
    /// "Shared-memory transport").
    Shm,
}

impl Transport {
    pub fn data(self) -> DataTransport {
        match self {
            Transport::Udp => DataTransport::Udp,
            Transport::Ethernet => DataTransport::Ethernet,
            Transport::Shm => DataTransport::Shm,
        }
    }
}

fn parse_recovery(s: &str) -> Result<flitnet_core::mechanism::sbrp::RecoveryProtocol, String> {
    flitnet_core::mechanism::sbrp::RecoveryProtocol::parse(s)
        .ok_or_else(|| format!("unknown recovery protocol {s:?} (none, sbrp0, sbrp1, sbrp2)"))
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switching {
    Wormhole,
    Vct,
}

impl FabricArgs {
    /// The flags as a [`crate::spec::FabricSpec`].
    pub fn spec(&self) -> crate::spec::FabricSpec {
        crate::spec::FabricSpec {
            vcs: self.vcs,
            buffer_depth: self.buffer_depth,
            switching: match self.switching {
                Switching::Wormhole => SwitchingMode::Wormhole,
                Switching::Vct => SwitchingMode::VirtualCutThrough,
            },
            bandwidth: self.bandwidth,
            delay: self.delay,
            dead_after: self.dead_after,
            max_packet_flits: self.max_packet_flits,
            recovery_protocol: self.recovery_protocol,
            transport: self.transport().data(),
            link_retrain: self.link_retrain,
            hoq_lifetime: self.hoq_lifetime,
            switch_latency: self.switch_latency.unwrap_or_default(),
            crossbar_speedup: self.crossbar_speedup.unwrap_or(DEFAULT_CROSSBAR_SPEEDUP),
            gap_recovery: self.gap_recovery == OnOff::On,
        }
    }

    /// The flags, with the switch parameters they leave out taken from
    /// `topo`'s file ([`flitnet_core::topology::SwitchParams`]; flag > topology file > default).
    pub fn with_topology(&self, topo: &Topology) -> FabricArgs {
        let file = topo.switch_params;
        FabricArgs {
            switch_latency: self.switch_latency.or(file.switch_latency),
            crossbar_speedup: self.crossbar_speedup.or(file.crossbar_speedup),
            ..self.clone()
        }
    }

    /// The daemons' parameters ([`crate::spec::FabricSpec::params`]).
    pub fn params(&self) -> FabricParams {
        self.spec().params()
    }

    /// The daemons' parameters for a fabric routed by `engine` under
    /// `mechanism` ([`crate::spec::FabricSpec::params_for`]).
    pub fn params_for(&self, engine: &str, mechanism: crate::mechanism::Mechanism) -> FabricParams {
        self.spec().params_for(engine, mechanism)
    }

    /// What carries the flits: `--transport`, shm by default.
    pub fn transport(&self) -> Transport {
        self.transport.unwrap_or(Transport::Shm)
    }

    /// `--tun` and its options.
    pub fn tun_options(&self) -> Option<crate::tun::TunOptions> {
        self.tun.then_some(crate::tun::TunOptions {
            plan: self.tun_subnet,
            mtu: self.tun_mtu,
        })
    }

    /// The `--netns` name, checked; refused without `--transport ethernet`.
    pub fn netns(&self) -> Result<Option<String>> {
        match (&self.netns, self.transport()) {
            (None, _) => Ok(None),
            (Some(n), Transport::Ethernet) => {
                crate::netns::check_name(n)?;
                if crate::netns::EthernetNet::exists(n) {
                    bail!("--netns {n}: that network namespace exists already (delete it with `ip netns del {n}`, or pick another name)");
                }
                Ok(Some(n.clone()))
            }
            (Some(n), Transport::Udp | Transport::Shm) => {
                bail!("--netns {n}: a network namespace is only made for --transport ethernet")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanism::Mechanism;

    #[test]
    fn a_scenario_without_a_fabric_section_gets_the_flags_defaults() {
        let section = crate::scenario::FabricSection::default();
        assert_eq!(section.spec(), FabricSpec::default());
        let spec = FabricSpec::default();
        assert_eq!(spec.bandwidth, 200_000);
        assert_eq!(spec.dead_after, Duration::from_secs(1));
        assert_eq!(spec.hoq_lifetime, HoqLifetime::Auto);
    }

    #[test]
    fn auto_head_of_queue_lifetime_is_on_only_where_needed() {
        let spec = FabricSpec {
            recovery_protocol: RecoveryProtocol::parse("sbrp1").unwrap(),
            ..FabricSpec::default()
        };
        let none = Mechanism::NONE;
        let lifetime = |engine, m| spec.params_for(engine, m).head_of_queue_lifetime_ns;
        assert!(lifetime("local-reroute", none).is_some());
        assert_eq!(lifetime("dmodk", none), None);
        assert_eq!(spec.params().head_of_queue_lifetime_ns, None);
        // Adaptive DLR deadlocks beyond its guarantee; the deterministic
        // variants' extra VCs do not.
        for (name, on) in [
            ("dlr-adaptive", true),
            ("dlr-adaptive-link", true),
            ("dlr", false),
            ("dlr-link", false),
        ] {
            let m = Mechanism::parse(name).unwrap();
            assert_eq!(lifetime("dmodk", m).is_some(), on, "{name}");
        }
        // Without a recovery protocol nothing would resend a discarded worm.
        let bare = FabricSpec::default();
        let adaptive = Mechanism::parse("dlr-adaptive").unwrap();
        assert_eq!(
            bare.params_for("dmodk", adaptive).head_of_queue_lifetime_ns,
            None
        );
    }
}
