//! SBRP, the software-based recovery protocols of *Software-Based
//! Recovery of Packets Cut by Faults* (SBRP-0, SBRP-1, SBRP-2): the packet
//! formats both halves share and the protocol's place in the registry. The
//! switch half (orphan absorption at C, the non-final tail at A, recover
//! requests from C) is [`switch`]; the host half (sender and receiver
//! recovery) is [`host`]. See `docs/sbrp.md`.

pub mod host;
pub mod switch;

pub use switch::SbrpSwitchCounters;

use super::{Applies, Mechanism, Variant};
use crate::flit::{flags, Flit, FlitKind, Head};
use crate::topology::{HostId, Topology};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The mechanism's registry name.
pub const NAME: &str = "sbrp";

/// SBRP in the registry.
pub struct Sbrp;

fn one_vc(_: &Topology) -> u8 {
    1
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "sbrp0",
        mechanism: NAME,
        summary: "recover request from the switch before the fault; the whole packet is resent",
        vcs_needed: one_vc,
    },
    Variant {
        name: "sbrp1",
        mechanism: NAME,
        summary: "recover request with the switch's flit count; the sender resends from there",
        vcs_needed: one_vc,
    },
    Variant {
        name: "sbrp2",
        mechanism: NAME,
        summary: "recover request from the receiver; exactly the missing rest is resent",
        vcs_needed: one_vc,
    },
];

impl Mechanism for Sbrp {
    fn name(&self) -> &'static str {
        NAME
    }
    fn applies(&self) -> Applies {
        Applies::Anywhere
    }
    fn variants(&self) -> &'static [Variant] {
        VARIANTS
    }
}

/// Which recovery protocol the fabric runs (spec 003 §5.4–§5.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryProtocol {
    /// No recovery: packets cut by a fault are lost.
    #[default]
    None,
    /// RRQ from C; the sender resends the whole packet (§5.4).
    Sbrp0,
    /// RRQ from C with C's count of forwarded flits; the sender resends from
    /// `k_C − max_ca` (§5.5).
    Sbrp1,
    /// RRQ from the receiver on the NFT, with its contiguous prefix; the
    /// sender resends exactly the rest (§5.6).
    Sbrp2,
}

impl RecoveryProtocol {
    /// The protocol's name, as the CLI, scenarios and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            RecoveryProtocol::None => "none",
            RecoveryProtocol::Sbrp0 => "sbrp0",
            RecoveryProtocol::Sbrp1 => "sbrp1",
            RecoveryProtocol::Sbrp2 => "sbrp2",
        }
    }

    pub fn is_on(self) -> bool {
        self != RecoveryProtocol::None
    }

    /// Parses `none`, `sbrp0`/`sbrp-0`, `sbrp1`, `sbrp2`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().replace('-', "").as_str() {
            "none" | "off" => Some(RecoveryProtocol::None),
            "sbrp0" => Some(RecoveryProtocol::Sbrp0),
            "sbrp1" => Some(RecoveryProtocol::Sbrp1),
            "sbrp2" => Some(RecoveryProtocol::Sbrp2),
            _ => None,
        }
    }
}

impl RecoveryProtocol {
    /// The protocol a registry variant selects (`None` for a variant of
    /// another mechanism).
    pub fn of_variant(v: &Variant) -> Option<Self> {
        match v.name {
            "sbrp0" => Some(RecoveryProtocol::Sbrp0),
            "sbrp1" => Some(RecoveryProtocol::Sbrp1),
            "sbrp2" => Some(RecoveryProtocol::Sbrp2),
            _ => None,
        }
    }
}

/// An RRQ: a one-flit packet to `to` asking it to resend `packet` of `msg`
/// from flit `from`; `ssnf` is the SSNF of the interrupted sub-message.
#[allow(clippy::too_many_arguments)]
pub fn rrq_flit(
    reporter: HostId,
    to: HostId,
    msg: u64,
    packet: u32,
    ssnf: u16,
    from: u32,
    vc: u8,
    now: u64,
) -> Flit {
    Flit {
        kind: FlitKind::HeadTail,
        vc,
        flags: flags::RECOVER_REQUEST,
        msg,
        packet,
        seq: from,
        head: Some(Head {
            dst: to,
            src: reporter,
            msg_flits: 1,
            submsg: ssnf,
            born_ns: now,
            ..Head::default()
        }),
        payload: Bytes::new(),
    }
}

/// `head.msg_flits` of an RRQ a receiver made (a switch's RRQ, built by
/// [`rrq_flit`], says 1). An RRQ's length is meaningless otherwise (it is
/// one flit whatever the field says), so the field tells the sender who
/// reported, without a new wire field: the sender charges node C's
/// software overhead ([`SbrpConfig::switch_report_delay_ns`]) only on RRQs
/// that are not marked.
pub const RECEIVER_RRQ_MSG_FLITS: u32 = 2;

/// An RRQ made by the receiver (SBRP-2, or the R-4 fallback): [`rrq_flit`]
/// marked with [`RECEIVER_RRQ_MSG_FLITS`].
#[allow(clippy::too_many_arguments)]
pub fn receiver_rrq_flit(
    reporter: HostId,
    to: HostId,
    msg: u64,
    packet: u32,
    ssnf: u16,
    from: u32,
    vc: u8,
    now: u64,
) -> Flit {
    let mut f = rrq_flit(reporter, to, msg, packet, ssnf, from, vc, now);
    if let Some(h) = f.head.as_mut() {
        h.msg_flits = RECEIVER_RRQ_MSG_FLITS;
    }
    f
}

/// `head.submsg` of a receiver's gap request (flitnet's addition, see
/// `docs/sbrp.md` "Receiver gap recovery"): the receiver saw no cut of the
/// packet and knows no sub-message of it, so it names one above any the
/// sender has used, and the sender never takes the request as stale.
pub const GAP_RRQ_SSNF: u16 = u16::MAX;

/// Whether an RRQ is a receiver's gap request.
pub fn is_gap_rrq(f: &Flit) -> bool {
    is_rrq(f) && rrq_from_receiver(f) && f.head.as_ref().is_some_and(|h| h.submsg == GAP_RRQ_SSNF)
}

/// Whether an RRQ was made by the receiver rather than by a switch (C).
pub fn rrq_from_receiver(f: &Flit) -> bool {
    f.head
        .as_ref()
        .is_some_and(|h| h.msg_flits == RECEIVER_RRQ_MSG_FLITS)
}

/// `msg_flits` of an RRQ on its way to its reporter (the cut packet's
/// destination) instead of its sender: a switch whose tables have no route
/// to the sender sends it there (head `src` and `dst` swapped), and the
/// reporter's host passes it on to the sender ([`relayed_rrq`]).
pub const RELAYED_RRQ_MSG_FLITS: u32 = 3;

/// `msg_flits` of a notice: a copy of an RRQ that node C parked until new
/// tables, sent to the sender at once. Should C die before it releases
/// the request, the parked copy dies with it and nothing else would ask
/// for the packet; the sender acts on the notice after a fallback delay
/// unless the request itself came first.
pub const PARKED_NOTICE_MSG_FLITS: u32 = 4;

/// Whether `f` is the notice of a parked RRQ.
pub fn is_parked_notice(f: &Flit) -> bool {
    is_rrq(f)
        && f.head
            .as_ref()
            .is_some_and(|h| h.msg_flits == PARKED_NOTICE_MSG_FLITS)
}

/// `msg_flits` of a tail probe (flitnet's addition beside receiver gap
/// recovery, `docs/sbrp.md` "Receiver gap recovery"): a one-flit packet
/// flagged like an RRQ so that the receiver's SBRP unit takes it, but
/// going from a sender to a receiver, `msg` naming the newest message the
/// sender sent it (the message id holds the per-destination number the
/// receiver's in-order sink orders the flow by). Switches forward it as
/// they do any one-flit packet and, like a notice, drop it when its route
/// is dead: it is best effort, and neither reported nor parked.
pub const TAIL_PROBE_MSG_FLITS: u32 = 6;

/// The tail probe from `sender` to `to` naming message `msg`.
pub fn tail_probe_flit(sender: HostId, to: HostId, msg: u64, vc: u8, now: u64) -> Flit {
    let mut f = rrq_flit(sender, to, msg, 0, 0, 0, vc, now);
    if let Some(h) = f.head.as_mut() {
        h.msg_flits = TAIL_PROBE_MSG_FLITS;
    }
    f
}

/// Whether `f` is a tail probe.
pub fn is_tail_probe(f: &Flit) -> bool {
    is_rrq(f)
        && f.head
            .as_ref()
            .is_some_and(|h| h.msg_flits == TAIL_PROBE_MSG_FLITS)
}

/// Whether an RRQ-flagged packet of `msg_flits` is best effort: a notice
/// or a tail probe, dropped rather than parked or relayed when its route
/// is dead.
pub fn is_best_effort(msg_flits: u32) -> bool {
    msg_flits == PARKED_NOTICE_MSG_FLITS || msg_flits == TAIL_PROBE_MSG_FLITS
}

/// Whether `f` is an RRQ relayed through its reporter.
pub fn is_relayed_rrq(f: &Flit) -> bool {
    is_rrq(f)
        && f.head
            .as_ref()
            .is_some_and(|h| h.msg_flits == RELAYED_RRQ_MSG_FLITS)
}

/// `msg_flits` of the RRQ a reporter passes on to the sender: a switch
/// with no route to the sender parks it rather than relaying it again
/// (without this, a sender no route reaches would have its requests
/// bounce between switch and reporter for ever).
pub const PASSED_ON_RRQ_MSG_FLITS: u32 = 5;

/// Turns an RRQ around toward its reporter (see [`RELAYED_RRQ_MSG_FLITS`]);
/// false for one already relayed or passed on (it is not bounced back).
pub fn relay_through_reporter(f: &mut Flit) -> bool {
    if f.head.as_ref().is_some_and(|h| {
        h.msg_flits == RELAYED_RRQ_MSG_FLITS || h.msg_flits == PASSED_ON_RRQ_MSG_FLITS
    }) {
        return false;
    }
    let Some(h) = f.head.as_mut() else {
        return false;
    };
    std::mem::swap(&mut h.src, &mut h.dst);
    h.msg_flits = RELAYED_RRQ_MSG_FLITS;
    true
}

/// The RRQ a reporter passes on to the sender, from one relayed to it.
pub fn relayed_rrq(f: &Flit, now: u64) -> Option<Flit> {
    let h = f.head.as_ref()?;
    let mut rrq = rrq_flit(h.dst, h.src, f.msg, f.packet, h.submsg, f.seq, f.vc, now);
    if let Some(h) = rrq.head.as_mut() {
        h.msg_flits = PASSED_ON_RRQ_MSG_FLITS;
    }
    Some(rrq)
}

/// Whether a flit is an RRQ (it goes to the sender half, not the sink).
pub fn is_rrq(f: &Flit) -> bool {
    f.flags & flags::RECOVER_REQUEST != 0
}
