//! The counters a host's mechanisms keep, as its report carries them. The
//! hooks that fill them live with their mechanisms (`crate::mechanism`);
//! the types live here, beside the report, as the switch's mechanism
//! counters live in `crate::switch::counters`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Host-side SBRP counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SbrpStats {
    pub rrq_received: u64,
    /// RRQs for a sub-message already superseded (multi-fault, duplicates).
    pub stale_rrq: u64,
    /// RRQs for a message no longer retained (released too early).
    pub unrecoverable_rrq: u64,
    /// Packets stopped mid-injection and closed with a virtual tail.
    pub aborted_packets: u64,
    pub resent_packets: u64,
    /// Flits resent (the recovery overhead, spec 003 §5.7).
    pub resent_flits: u64,
    /// RRQs this host sent as a receiver (SBRP-2, or R-4 fallback).
    pub rrq_sent: u64,
    /// NFTs received that left a packet incomplete.
    pub nft_received: u64,
    /// Notices of RRQs a switch parked whose request never came (the
    /// switch died holding it), acted on as the request.
    #[serde(default)]
    pub notices_acted_on: u64,
    /// Gap requests this host sent as a receiver (a flow's in-order
    /// delivery waited `gap_wait_ns` for a message nothing reported cut).
    #[serde(default)]
    pub gap_rrq_sent: u64,
    /// Gap requests for a message this host no longer retained.
    #[serde(default)]
    pub gap_rrq_unanswered: u64,
    /// Tail probes this host sent as a sender: one per flow whose newest
    /// message no newer one followed within the probe wait.
    #[serde(default)]
    pub tail_probes_sent: u64,
    /// Tail probes this host received that named a message it lacked:
    /// each opened a gap for gap recovery.
    #[serde(default)]
    pub tail_probe_gaps: u64,
}

/// Summary of a host's route table (per destination), for its report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteTableSummary {
    /// The mechanism the table was planned for (`I`, `I×2`, `I+D`, …).
    pub mechanism: String,
    /// Faulty links the table avoids.
    pub faulty_links: usize,
    pub direct: u32,
    pub routed: u32,
    /// Destinations no allowed route reaches without meeting a fault.
    pub not_tolerated: u32,
    /// Destinations cut off by the faults.
    pub disconnected: u32,
    /// Routed destinations by mechanism used (Table 3's columns).
    pub by_mechanism: BTreeMap<String, u32>,
}

/// What a host did with intermediate-node routes (its report and metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntermediateStats {
    /// Route tables installed (one per fault-set push).
    pub table_updates: u64,
    /// Packets injected with at least one intermediate node in the head.
    pub packets_via_intermediate: u64,
    /// Packets injected with some leg's D bit set.
    pub packets_deterministic: u64,
    /// Packets injected with forced misroute runs (M).
    #[serde(default)]
    pub packets_misrouted: u64,
    /// Packets for destinations no allowed route reaches safely (sent
    /// direct; they may meet the fault).
    pub packets_unrouted: u64,
    /// The current table.
    #[serde(default)]
    pub table: Option<RouteTableSummary>,
}
