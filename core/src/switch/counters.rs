//! What a switch counts: per port and VC traffic, stalls and occupancy, and
//! drops by reason.

use serde::{Deserialize, Serialize};

/// Why a switch discarded flits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropReason {
    /// No table installed, or the table has no entry for the destination.
    NoRoute,
    /// The table named a port this switch does not have.
    BadRoute,
    /// The flit arrived on, or the VC policy chose, a VC that does not exist.
    BadVc,
    /// The output port is administratively down or its peer is dead.
    PortDown,
    /// The datagram failed to decode (counted in datagrams, not flits).
    BadDatagram,
    /// A body or tail flit with no head before it (its head was lost).
    Orphan,
    /// The head is on a leg (seed 004 intermediate nodes) for which the
    /// switch has no escape VC set: the fabric has fewer VCs than the
    /// packet's route needs.
    LegVc,
    /// The head waited at the front of its input VC, ungranted, for the
    /// switch's head-of-queue lifetime (InfiniBand's HOQ lifetime, Disha's
    /// `t_deadlock`): presumed deadlocked, it is discarded with the rest of
    /// its worm (and, under SBRP, its source is asked for a resend).
    HoqLifetime,
}

impl DropReason {
    pub const ALL: [DropReason; 8] = [
        DropReason::NoRoute,
        DropReason::BadRoute,
        DropReason::BadVc,
        DropReason::PortDown,
        DropReason::BadDatagram,
        DropReason::Orphan,
        DropReason::LegVc,
        DropReason::HoqLifetime,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DropReason::NoRoute => "no-route",
            DropReason::BadRoute => "bad-route",
            DropReason::BadVc => "bad-vc",
            DropReason::PortDown => "port-down",
            DropReason::BadDatagram => "bad-datagram",
            DropReason::Orphan => "orphan",
            DropReason::LegVc => "leg-vc",
            DropReason::HoqLifetime => "hoq-lifetime",
        }
    }
}

/// Drops by reason (flits, except `bad_datagram`: datagrams).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropCounters {
    pub no_route: u64,
    pub bad_route: u64,
    pub bad_vc: u64,
    pub port_down: u64,
    pub bad_datagram: u64,
    pub orphan: u64,
    #[serde(default)]
    pub leg_vc: u64,
    #[serde(default)]
    pub hoq_lifetime: u64,
}

impl DropCounters {
    pub fn get(&self, r: DropReason) -> u64 {
        match r {
            DropReason::NoRoute => self.no_route,
            DropReason::BadRoute => self.bad_route,
            DropReason::BadVc => self.bad_vc,
            DropReason::PortDown => self.port_down,
            DropReason::BadDatagram => self.bad_datagram,
            DropReason::Orphan => self.orphan,
            DropReason::LegVc => self.leg_vc,
            DropReason::HoqLifetime => self.hoq_lifetime,
        }
    }

    pub fn add(&mut self, r: DropReason, n: u64) {
        *self.slot(r) += n;
    }

    pub fn set(&mut self, r: DropReason, n: u64) {
        *self.slot(r) = n;
    }

    fn slot(&mut self, r: DropReason) -> &mut u64 {
        match r {
            DropReason::NoRoute => &mut self.no_route,
            DropReason::BadRoute => &mut self.bad_route,
            DropReason::BadVc => &mut self.bad_vc,
            DropReason::PortDown => &mut self.port_down,
            DropReason::BadDatagram => &mut self.bad_datagram,
            DropReason::Orphan => &mut self.orphan,
            DropReason::LegVc => &mut self.leg_vc,
            DropReason::HoqLifetime => &mut self.hoq_lifetime,
        }
    }

    pub fn total(&self) -> u64 {
        DropReason::ALL.iter().map(|&r| self.get(r)).sum()
    }
}

/// One VC of one port. `rx` is the input side, `tx` the output side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VcCounters {
    pub rx_flits: u64,
    pub tx_flits: u64,
    pub rx_payload_bytes: u64,
    pub tx_payload_bytes: u64,
    /// Time a packet waited here with zero credits on this output VC.
    pub credit_stall_ns: u64,
    /// Flits in the input buffer now, and the most ever.
    pub occupancy: u32,
    pub max_occupancy: u32,
}

/// One port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortCounters {
    pub vcs: Vec<VcCounters>,
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub crc_errors: u64,
    pub bad_datagrams: u64,
    /// Datagrams missing from the peer's sequence.
    pub seq_gaps: u64,
    /// Flits the peer sent that never arrived (link-level sync).
    pub lost_flits: u64,
    /// Drops of flits that arrived on this port.
    pub drops: DropCounters,
    /// Link errors detected on this port (lost or rejected datagrams that
    /// took the link down for a retrain; docs/wire.md).
    #[serde(default)]
    pub link_errors: u64,
    /// Link resets the peer sent (it detected an error; this end retrained).
    #[serde(default)]
    pub peer_link_resets: u64,
    /// Retrain periods completed.
    #[serde(default)]
    pub retrains: u64,
    /// Last and longest time from a link error to the peer being heard
    /// again (the link back up), in ns.
    #[serde(default)]
    pub last_recovery_ns: u64,
    #[serde(default)]
    pub max_recovery_ns: u64,
}

/// Everything a switch counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchCounters {
    pub ports: Vec<PortCounters>,
    /// Sum of the ports' drops.
    pub drops: DropCounters,
    /// Packets cut short because a new head arrived before their tail
    /// (the tail was lost upstream) or their input port died mid-packet.
    pub truncated_packets: u64,
    /// Events discarded because the event queue was full.
    pub events_lost: u64,
    /// Packets that dynamic local rerouting sent somewhere else than the
    /// fault-free route (detour, misroute, bounce, U-turn; seed 002 §3).
    #[serde(default)]
    pub reroutes: u64,
    /// Heads that reached their current intermediate node here and started
    /// their next leg without ejection (seed 004 §3.2).
    #[serde(default)]
    pub intermediate_pops: u64,
    /// Forced misroute hops heads took here (seed 004 M).
    #[serde(default)]
    pub misroute_hops: u64,
    /// Dynamic FT²EI (seed 000 §4.5–§4.6), when on.
    #[serde(default)]
    pub ft2ei: Ft2eiCounters,
    /// Packets discarded for waiting longer than the head-of-queue
    /// lifetime (the flits are in `drops.hoq_lifetime`).
    #[serde(default)]
    pub hoq_discards: u64,
    /// Longest a head waited at the front of an input VC for an output VC
    /// and was then granted one, ns (what ordinary congestion costs; the
    /// head-of-queue lifetime must stay well above it).
    #[serde(default)]
    pub head_wait_max_ns: u64,
}

/// What the dynamic FT²EI protocol did on one switch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ft2eiCounters {
    /// Control packets this switch transmitted (own and forwarded copies).
    pub ctrl_sent: u64,
    /// Control packets received.
    pub ctrl_received: u64,
    /// Control packets not sent because their port died first.
    pub ctrl_dropped: u64,
    /// Exclusion-interval updates applied to this switch's registers.
    pub exclusion_updates: u64,
    /// Data packets sent down an emergency path (§4.6).
    pub deflections: u64,
    /// Protocol errors (malformed CTRL, fault combination not tolerated).
    pub errors: u64,
    /// Switch clock (ns) of the last exclusion update, 0 if none.
    pub last_update_ns: u64,
    /// Switch clock (ns) when this switch first declared a port dead with
    /// the protocol on, 0 if never.
    #[serde(default)]
    pub fault_ns: u64,
}
