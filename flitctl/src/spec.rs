//! One fabric specification, whether it comes from flags (`up`, `compose`:
//! [`crate::up::FabricArgs`]) or from a scenario's `fabric:` section
//! ([`crate::scenario::FabricSection`]): one set of defaults (the flags'),
//! and one builder of the daemons' [`FabricParams`].

use crate::up::{FabricArgs, HoqLifetime, HOQ_LIFETIME_FLOOR_NS};
use flitnet_core::control::{DataTransport, FabricParams, SwitchLatency, SwitchingMode};
use flitnet_core::host::sbrp::RecoveryProtocol;
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
        }
    }

    /// [`FabricSpec::params`] for a fabric routed by `engine`: `auto` turns
    /// the head-of-queue lifetime on where it is needed
    /// ([`crate::up::needs_hoq_lifetime`]), at the default for these links
    /// (128 drains of a full buffer or a longest packet, at least
    /// [`HOQ_LIFETIME_FLOOR_NS`]).
    pub fn params_for(&self, engine: &str) -> FabricParams {
        let mut p = self.params();
        if self.hoq_lifetime == HoqLifetime::Auto
            && crate::up::needs_hoq_lifetime(engine, p.recovery)
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(spec
            .params_for("local-reroute")
            .head_of_queue_lifetime_ns
            .is_some());
        assert_eq!(spec.params_for("dmodk").head_of_queue_lifetime_ns, None);
        assert_eq!(spec.params().head_of_queue_lifetime_ns, None);
    }
}
