//! SBRP, the software-based recovery protocols of *Software-Based Recovery
//! of Packets Cut by Faults* (SBRP-0, SBRP-1, SBRP-2): the host
//! (network-interface) half, as a host hook ([`SbrpHost`]). The switch half
//! (orphan absorption at C, the non-final tail (NFT) at A, recover requests
//! (RRQ) from C) is [`super::switch`]. The whole protocol, message formats
//! and the holes of the protocol's description it closes are in
//! `docs/sbrp.md`.
//!
//! Formats (no new wire field is needed; see `docs/sbrp.md`):
//! - a **sub-message** is an ordinary packet whose head carries the
//!   sub-message serial number ([`crate::flit::Head::submsg`], SSNF) and,
//!   when it does not start at the packet's first flit, the
//!   [`flags::FIRST_SEQUENCE`] flag: the head flit's own `seq` *is* the FSN
//!   (every flit carries its flit number, so no extra FSN flit is needed);
//! - an **RRQ** is a one-flit packet (`HeadTail`) flagged
//!   [`flags::RECOVER_REQUEST`], routed to the sender (`head.dst`): `msg` and
//!   `packet` name the interrupted packet, `head.submsg` its SSNF, and `seq`
//!   the flit the reporter asks the sender to restart from;
//! - an **NFT** (switch-made, or the sender's "virtual tail" that closes an
//!   interrupted path) is a `Tail` flagged [`flags::NON_FINAL_TAIL`]; it
//!   carries no data.

use super::{
    is_gap_rrq, is_parked_notice, is_relayed_rrq, is_rrq, is_tail_probe, receiver_rrq_flit,
    relayed_rrq, rrq_from_receiver, tail_probe_flit, RecoveryProtocol, GAP_RRQ_SSNF,
};
use crate::flit::{flags, Flit};
pub use crate::host::counters::SbrpStats;
use crate::host::endpoint::HostReport;
use crate::host::endpoint::{ConfigError, HostEndpoint};
use crate::host::hook::HostHook;
use crate::host::message::{split_message_id, Message, OutPacket, Packetiser};
use crate::host::retained::ReleasePolicy;
use crate::mechanism::hook_any;
use crate::topology::HostId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Host-side SBRP parameters.
///
/// **Software overhead** (spec 003 §5.9, docs/sbrp.md "Software overhead
/// model"): every recovery event costs handler time, which the host models
/// with its sans-IO timers (no clock is read):
/// - the sender's resending handler (`T_r + T_o`, 19 J-Machine cycles):
///   `resend_delay_ns` between an RRQ's arrival and the resend's start;
/// - the receiver's recover handler in SBRP-2 (`L + T_s + T_w`, 13 cycles):
///   `report_delay_ns` between the NFT and the RRQ;
/// - node C's recover handler in SBRP-0/1 (`L + T_s + T_w` as well):
///   `switch_report_delay_ns`. The switch half keeps no timer for it, so
///   the sender charges it on an RRQ a switch made (see
///   [`rrq_from_receiver`]), before its own `resend_delay_ns`: the RRQ
///   reaches the sender that much earlier, the resend starts at the same
///   instant as if C had waited (the RRQ's network trip, one flit on the
///   control path, is the same either way).
///
/// The thesis's other figure, "100 simulator cycles" per recovery, is the
/// lump `resend_delay_ns` = 100 cycles with both reporter delays 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SbrpConfig {
    pub protocol: RecoveryProtocol,
    /// The sender's software overhead before it resends (spec 003 §5.9,
    /// `T_r + T_o`; the thesis's lump is 100 cycles).
    pub resend_delay_ns: u64,
    /// The receiver's recover-handler overhead before its RRQ (SBRP-2).
    pub report_delay_ns: u64,
    /// Node C's recover-handler overhead (SBRP-0/1, and SBRP-2's head-loss
    /// RRQ): charged by the sender on an RRQ a switch made, on top of
    /// `resend_delay_ns`. 0 (the default) keeps C's RRQ free of software
    /// time.
    #[serde(default)]
    pub switch_report_delay_ns: u64,
    /// After an NFT leaves a packet incomplete, how long the receiver waits
    /// for the resend before it asks itself (R-4, spec 003 §8 item 3; in
    /// SBRP-2 this is the retry period after the first RRQ).
    pub nft_wait_ns: u64,
    /// RRQs a receiver sends for one cut packet at most (R-4 retries also
    /// cover a lost RRQ, spec 003 §8 item 18); the wait doubles after each,
    /// so 12 cover about `4096 × nft_wait_ns`.
    pub max_receiver_rrqs: u32,
    /// Receiver gap recovery (flitnet's addition, `docs/sbrp.md` "Receiver
    /// gap recovery"): how long a flow's in-order delivery may wait for a
    /// message that nothing reported cut before the receiver asks its
    /// sender for it; `None` turns it off. The daemons and `flitctl sim`
    /// use [`crate::control::FabricParams::sbrp_gap_wait_ns`].
    #[serde(default)]
    pub gap_wait_ns: Option<u64>,
}

impl Default for SbrpConfig {
    fn default() -> Self {
        SbrpConfig {
            protocol: RecoveryProtocol::None,
            resend_delay_ns: 1_000,
            report_delay_ns: 1_000,
            switch_report_delay_ns: 0,
            nft_wait_ns: 200_000,
            max_receiver_rrqs: 12,
            gap_wait_ns: None,
        }
    }
}

/// The sender half: SSNF per interrupted packet and resends waiting for the
/// software overhead to elapse.
#[derive(Clone, Debug, Default)]
pub struct SenderRecovery {
    /// Current SSNF of each (msg, packet) that was ever interrupted.
    ssnf: BTreeMap<(u64, u32), u16>,
    /// (ready time, resend) in arrival order.
    pending: VecDeque<(u64, OutPacket)>,
    /// Notices of RRQs parked at a switch, per (msg, packet): when to act
    /// on one if the request itself has not come, and the request.
    noticed: BTreeMap<(u64, u32), (u64, Flit)>,
}

/// What the sender decided about one RRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RrqVerdict {
    /// Superseded: the sender already resent a later sub-message.
    Stale,
    /// Resend packet `packet` from flit `from` with SSNF `ssnf`.
    Resend { from: u32, ssnf: u16 },
}

impl SenderRecovery {
    /// Judges an RRQ for a packet spanning `[first, first + len)`.
    pub fn judge(
        &mut self,
        protocol: RecoveryProtocol,
        rrq: &Flit,
        first: u32,
        len: u32,
    ) -> RrqVerdict {
        let key = (rrq.msg, rrq.packet);
        let asked = rrq.head.as_ref().map_or(0, |h| h.submsg);
        let cur = self.ssnf.get(&key).copied().unwrap_or(0);
        if asked < cur {
            return RrqVerdict::Stale;
        }
        let ssnf = cur.wrapping_add(1);
        self.ssnf.insert(key, ssnf);
        let last = first + len.max(1) - 1;
        let from = match protocol {
            RecoveryProtocol::Sbrp0 | RecoveryProtocol::None => first,
            // A resend must hold at least one flit to be a packet.
            _ => rrq.seq.clamp(first, last),
        };
        RrqVerdict::Resend { from, ssnf }
    }

    /// A switch parked an RRQ (`notice` is its copy): unless the request
    /// itself comes by `due`, act on the copy then.
    pub fn note_parked(&mut self, due: u64, notice: &Flit) {
        let mut rrq = notice.clone();
        if let Some(h) = rrq.head.as_mut() {
            h.msg_flits = 1;
        }
        self.noticed
            .entry((rrq.msg, rrq.packet))
            .or_insert((due, rrq));
    }

    /// A request for (msg, packet) of sub-message `submsg` came: a notice
    /// of it, or of an earlier sub-message, is settled.
    fn settle_notice(&mut self, rrq: &Flit) {
        let asked = rrq.head.as_ref().map_or(0, |h| h.submsg);
        let key = (rrq.msg, rrq.packet);
        if self
            .noticed
            .get(&key)
            .is_some_and(|(_, n)| n.head.as_ref().map_or(0, |h| h.submsg) <= asked)
        {
            self.noticed.remove(&key);
        }
    }

    /// Notices whose request did not come in time: the requests to act on.
    fn take_due_notices(&mut self, now: u64) -> Vec<Flit> {
        let due: Vec<_> = self
            .noticed
            .iter()
            .filter(|(_, (t, _))| *t <= now)
            .map(|(k, _)| *k)
            .collect();
        due.into_iter()
            .filter_map(|k| self.noticed.remove(&k).map(|(_, f)| f))
            .collect()
    }

    pub fn schedule(&mut self, ready_at: u64, p: OutPacket) {
        self.pending.push_back((ready_at, p));
    }

    /// The first resend due at `now`.
    pub fn take_due(&mut self, now: u64) -> Option<OutPacket> {
        let i = self.pending.iter().position(|(t, _)| *t <= now)?;
        self.pending.remove(i).map(|(_, p)| p)
    }

    /// Drops a not yet started resend of (msg, packet), superseded by a
    /// newer one; returns whether there was one.
    pub fn cancel(&mut self, msg: u64, packet: u32) -> bool {
        let before = self.pending.len();
        self.pending
            .retain(|(_, p)| !(p.msg.id == msg && p.packet == packet));
        self.pending.len() != before
    }

    pub fn next_due(&self) -> Option<u64> {
        self.pending
            .iter()
            .map(|(t, _)| *t)
            .chain(self.noticed.values().map(|(t, _)| *t))
            .min()
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Notices waiting for their request.
    pub fn noticed(&self) -> usize {
        self.noticed.len()
    }

    /// Forgets SSNFs of messages no longer retained.
    pub fn prune(&mut self, retained: impl Fn(u64) -> bool) {
        self.ssnf.retain(|&(m, _), _| retained(m));
    }
}

/// A packet cut by an NFT that the receiver waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CutPacket {
    at: u64,
    ssnf: u16,
    rrqs: u32,
}

/// The packet open on one VC of the ejection link, as the receiver sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Open {
    src: HostId,
    msg: u64,
    packet: u32,
    ssnf: u16,
    msg_flits: u32,
}

/// The receiver half: follows the packets on each ejection VC, arms a timer
/// per packet cut by an NFT and builds the RRQs.
#[derive(Clone, Debug)]
pub struct ReceiverRecovery {
    open: Vec<Option<Open>>,
    /// (src, msg, packet) -> cut packet, with the message length.
    cut: BTreeMap<(HostId, u64, u32), (CutPacket, u32)>,
}

impl ReceiverRecovery {
    pub fn new(vcs: u8) -> Self {
        ReceiverRecovery {
            open: vec![None; vcs.max(1) as usize],
            cut: BTreeMap::new(),
        }
    }

    /// Follows one (non-RRQ) flit; returns true when it is an NFT that cut
    /// a packet (the caller then checks completeness with the sink).
    pub fn observe(&mut self, now: u64, cfg: &SbrpConfig, flit: &Flit) -> bool {
        let vc = flit.vc as usize;
        if vc >= self.open.len() {
            return false;
        }
        if let Some(h) = flit.head.as_ref().filter(|_| flit.kind.is_head()) {
            let key = (h.src, flit.msg, flit.packet);
            // A newer sub-message is on its way: stop waiting for it.
            if self.cut.get(&key).is_some_and(|(c, _)| h.submsg > c.ssnf) {
                self.cut.remove(&key);
            }
            self.open[vc] = Some(Open {
                src: h.src,
                msg: flit.msg,
                packet: flit.packet,
                ssnf: h.submsg,
                msg_flits: h.msg_flits,
            });
        }
        if !flit.kind.is_tail() {
            return false;
        }
        let Some(o) = self.open[vc].take() else {
            return false;
        };
        if flit.flags & flags::NON_FINAL_TAIL == 0 || o.msg != flit.msg {
            return false;
        }
        let first_wait = match cfg.protocol {
            RecoveryProtocol::Sbrp2 => cfg.report_delay_ns,
            _ => cfg.nft_wait_ns,
        };
        self.cut.insert(
            (o.src, o.msg, o.packet),
            (
                CutPacket {
                    at: now.saturating_add(first_wait),
                    ssnf: o.ssnf,
                    rrqs: 0,
                },
                o.msg_flits,
            ),
        );
        true
    }

    /// Stops waiting for a packet (complete or delivered).
    pub fn settle(&mut self, src: HostId, msg: u64, packet: u32) {
        self.cut.remove(&(src, msg, packet));
    }

    pub fn next_due(&self) -> Option<u64> {
        self.cut.values().map(|(c, _)| c.at).min()
    }

    pub fn waiting(&self) -> usize {
        self.cut.len()
    }

    /// Stops waiting for the cut packets of `src`, a host known to be dead
    /// (it will never resend: spec 003 §3.6 #12, no message from a faulty
    /// node); returns how many there were.
    pub fn forget_source(&mut self, src: HostId) -> usize {
        let before = self.cut.len();
        self.cut.retain(|&(s, _, _), _| s != src);
        before - self.cut.len()
    }

    /// RRQs due at `now`. `first_missing(src, msg, from, to)` asks the sink
    /// for the first flit of `[from, to)` it still lacks (`None`: nothing
    /// missing, or the message was delivered).
    #[allow(clippy::too_many_arguments)]
    pub fn due_rrqs(
        &mut self,
        now: u64,
        me: HostId,
        cfg: &SbrpConfig,
        packetiser: &Packetiser,
        vc: u8,
        first_missing: impl Fn(HostId, u64, u32, u32) -> Option<u32>,
        out: &mut VecDeque<Flit>,
    ) -> u64 {
        let mut sent = 0;
        let due: Vec<_> = self
            .cut
            .iter()
            .filter(|(_, (c, _))| c.at <= now)
            .map(|(&k, &v)| (k, v))
            .collect();
        for ((src, msg, packet), (mut c, msg_flits)) in due {
            let (first, len) = packetiser.bounds(
                msg_flits,
                packet.min(packetiser.packets(msg_flits).saturating_sub(1)),
            );
            let missing = first_missing(src, msg, first, first + len);
            let Some(from) = missing.filter(|_| c.rrqs < cfg.max_receiver_rrqs) else {
                self.cut.remove(&(src, msg, packet));
                continue;
            };
            // SBRP-0 discards the cut packet: ask for all of it (§5.4).
            let from = if cfg.protocol == RecoveryProtocol::Sbrp0 {
                first
            } else {
                from
            };
            out.push_back(receiver_rrq_flit(
                me, src, msg, packet, c.ssnf, from, vc, now,
            ));
            sent += 1;
            c.rrqs += 1;
            // Exponential back-off: on real processes the resend may wait
            // for the controller's new tables (tens to hundreds of ms), and
            // each retry is a stale RRQ for the sender to ignore meanwhile.
            let backoff = cfg.nft_wait_ns.max(1) << c.rrqs.min(16);
            c.at = now.saturating_add(backoff);
            self.cut.insert((src, msg, packet), (c, msg_flits));
        }
        sent
    }
}

/// Gap requests a receiver sends for one gap at most. A resend it brings
/// is an ordinary sub-message, recovered by the switches' rules if cut;
/// asking again would only resend, and re-arm the sender's hold of, a
/// message whose destination the routing does not reach.
const GAP_RRQS: u32 = 1;

/// Missing messages of one flow a receiver asks for at once. Every message
/// missing below the last one held is asked for together: asked one after
/// the other, each `gap_wait_ns` after the one before it was delivered, a
/// later one would be released by its sender before its turn.
const GAP_MESSAGES: usize = 64;

/// A flow whose in-order delivery waits for message number `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Gap {
    seq: u32,
    /// When to ask (again).
    at: u64,
    rrqs: u32,
}

/// Receiver gap recovery (flitnet's addition to the protocols, see
/// `docs/sbrp.md` "Receiver gap recovery"): the last resort for a packet
/// lost with no report that reaches its sender (the switch that cut it
/// isolated or dead, two dead hops beyond node C's R-3 window). Its
/// receiver then sees a gap: a later message of the flow complete and held
/// for order, the earlier one missing. A gap that lasts `gap_wait_ns`, far
/// longer than any delivery or recovery in progress takes, is asked for
/// with an RRQ to the sender per missing message below the last one held
/// (first missing flit, [`GAP_RRQ_SSNF`]), which resends the message from
/// that flit on if it still retains it, [`GAP_RRQS`] times per gap.
///
/// A lost message that is the last of its flow leaves no later one to
/// reveal the gap: its sender's [`TailProbes`] name the flow's newest
/// message to the receiver, which notes it here ([`GapRecovery::note_tail`])
/// when it lacks it; the flow then has a gap up to and including that
/// message, waited for and asked for as any other.
#[derive(Clone, Debug, Default)]
pub struct GapRecovery {
    /// Per source, the gap its flow waits on.
    gaps: BTreeMap<HostId, Gap>,
    /// Per source, the newest message number a tail probe named that had
    /// not arrived when the probe came, until it arrives or is asked for.
    tails: BTreeMap<HostId, u32>,
}

impl GapRecovery {
    /// Follows the sink's gaps (`gaps`: source, missing message number):
    /// a new gap is asked for `wait` from now; a closed one is forgotten.
    pub fn observe(&mut self, now: u64, wait: u64, gaps: impl Iterator<Item = (HostId, u32)>) {
        let mut open = BTreeMap::new();
        for (src, seq) in gaps {
            let gap = match self.gaps.get(&src) {
                Some(g) if g.seq == seq => *g,
                _ => Gap {
                    seq,
                    at: now.saturating_add(wait),
                    rrqs: 0,
                },
            };
            open.insert(src, gap);
        }
        self.gaps = open;
    }

    /// A tail probe from `src` named message number `seq`, which has not
    /// arrived: the flow has a gap up to it.
    pub fn note_tail(&mut self, src: HostId, seq: u32) {
        let t = self.tails.entry(src).or_insert(seq);
        *t = (*t).max(seq);
    }

    /// Whether a probed tail is waited for.
    pub fn has_tails(&self) -> bool {
        !self.tails.is_empty()
    }

    /// The gaps the probed tails open (source, number the flow waits for,
    /// from `awaits(src, seq)`, `None` once `seq` has arrived); tails that
    /// have arrived are forgotten.
    pub fn tail_gaps(&mut self, awaits: impl Fn(HostId, u32) -> Option<u32>) -> Vec<(HostId, u32)> {
        let mut open = Vec::new();
        self.tails.retain(|&src, &mut seq| match awaits(src, seq) {
            Some(first) => {
                open.push((src, first));
                true
            }
            None => false,
        });
        open
    }

    /// Gap requests due at `now`. `missing(src, tail)` lists the missing
    /// messages of `src`'s flow below its last one held and up to `tail`,
    /// its probed tail if any (at most [`GAP_MESSAGES`]), each with its id
    /// and first missing flit.
    #[allow(clippy::too_many_arguments)]
    pub fn due_rrqs(
        &mut self,
        now: u64,
        me: HostId,
        cfg: &SbrpConfig,
        wait: u64,
        packetiser: &Packetiser,
        vc: u8,
        missing: impl Fn(HostId, Option<u32>) -> Vec<(u64, u32)>,
        out: &mut VecDeque<Flit>,
    ) -> u64 {
        let mut sent = 0;
        for (&src, gap) in self.gaps.iter_mut() {
            if gap.at > now || gap.rrqs >= GAP_RRQS {
                continue;
            }
            // Asked for now, the probed tail needs no more watching: the
            // gap is asked for once, whether or not it stays open.
            let tail = self.tails.remove(&src);
            for (msg, flit) in missing(src, tail) {
                let packet = flit / packetiser.max_packet_flits.max(1);
                // SBRP-0 resends whole packets (§5.4).
                let from = if cfg.protocol == RecoveryProtocol::Sbrp0 {
                    packet * packetiser.max_packet_flits.max(1)
                } else {
                    flit
                };
                out.push_back(receiver_rrq_flit(
                    me,
                    src,
                    msg,
                    packet,
                    GAP_RRQ_SSNF,
                    from,
                    vc,
                    now,
                ));
                sent += 1;
            }
            gap.rrqs += 1;
            gap.at = now.saturating_add(wait);
        }
        sent
    }

    /// Gaps still to be asked for.
    pub fn waiting(&self) -> usize {
        self.gaps.values().filter(|g| g.rrqs < GAP_RRQS).count()
    }

    pub fn next_due(&self) -> Option<u64> {
        self.gaps
            .values()
            .filter(|g| g.rrqs < GAP_RRQS)
            .map(|g| g.at)
            .min()
    }

    /// Forgets every gap (no flow waits any more).
    pub fn clear(&mut self) {
        self.gaps.clear();
        self.tails.clear();
    }

    /// Stops asking a dead source (it will never resend).
    pub fn forget_source(&mut self, src: HostId) {
        self.gaps.remove(&src);
        self.tails.remove(&src);
    }
}

/// How long a sender waits after a flow's newest message left, with no
/// newer one, before it probes the flow's tail: half of `gap_wait`. The
/// receiver that lacks the message waits `gap_wait` more before it asks,
/// so the request leaves 3/4 of the hold window (`2 × gap_wait` in the
/// daemons and `flitctl sim`) after the message did: the sender still
/// retains it, with a quarter of the window (`dead_after / 2` + 125 ms)
/// for the probe's and the request's trips. Far above a delivery's
/// latency, so a flow that goes on sending is rarely probed.
pub fn tail_probe_wait(gap_wait: u64) -> u64 {
    gap_wait / 2
}

/// The sender half of the tail-loss probe (flitnet's addition, see
/// `docs/sbrp.md` "Receiver gap recovery"): per destination, the newest
/// message sent and when its probe is due. A message a fault cut with no
/// report that reaches the sender, and that is the last of its flow,
/// leaves its receiver no later message to reveal the gap; the probe, one
/// flit naming that message, does. One probe per flow tail: a newer
/// message re-arms it, a resend does not.
#[derive(Clone, Debug, Default)]
pub struct TailProbes {
    /// Per destination, the newest message sent.
    newest: BTreeMap<HostId, u64>,
    /// (due time, destination) of the probes not yet sent.
    due: BTreeSet<(u64, HostId)>,
    /// Per destination with a probe armed, its due time.
    armed: BTreeMap<HostId, u64>,
}

impl TailProbes {
    /// A packet of message `msg` left at `now`: if the message is its
    /// flow's newest (or newer), the flow's probe is due `wait` later.
    pub fn sent(&mut self, now: u64, wait: u64, msg: u64) {
        let (dst, seq) = split_message_id(msg);
        if self
            .newest
            .get(&dst)
            .is_some_and(|&m| split_message_id(m).1 > seq)
        {
            return;
        }
        self.newest.insert(dst, msg);
        self.forget(dst);
        let at = now.saturating_add(wait);
        self.due.insert((at, dst));
        self.armed.insert(dst, at);
    }

    /// The probes due at `now`: (destination, its newest message), each
    /// once.
    pub fn take_due(&mut self, now: u64) -> Vec<(HostId, u64)> {
        let mut out = Vec::new();
        while let Some(&(at, dst)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.pop_first();
            self.armed.remove(&dst);
            if let Some(&msg) = self.newest.get(&dst) {
                out.push((dst, msg));
            }
        }
        out
    }

    /// Disarms the probe of `dst`'s flow (a destination known down).
    pub fn forget(&mut self, dst: HostId) {
        if let Some(at) = self.armed.remove(&dst) {
            self.due.remove(&(at, dst));
        }
    }

    pub fn next_due(&self) -> Option<u64> {
        self.due.first().map(|&(at, _)| at)
    }

    /// Probes armed.
    pub fn waiting(&self) -> usize {
        self.due.len()
    }
}

/// Cuts of one packet (its SSNF) up to which a notice of a parked RRQ is
/// acted on (see `SbrpHost::intercept`).
const NOTICE_RESENDS: u32 = 2;

/// The host half of SBRP, installed by [`HostEndpoint::set_recovery`]: the
/// sender answers recover requests from its retained copies, the receiver
/// follows its ejection VCs and asks for cut packets itself.
#[derive(Debug)]
pub struct SbrpHost {
    cfg: SbrpConfig,
    sender: SenderRecovery,
    receiver: ReceiverRecovery,
    gaps: GapRecovery,
    probes: TailProbes,
    stats: SbrpStats,
    /// One-flit control packets (RRQs, tail probes) waiting for an idle
    /// lane.
    control_out: VecDeque<Flit>,
}

impl SbrpHost {
    fn new(cfg: SbrpConfig, vcs: u8) -> Self {
        SbrpHost {
            cfg,
            sender: SenderRecovery::default(),
            receiver: ReceiverRecovery::new(vcs),
            gaps: GapRecovery::default(),
            probes: TailProbes::default(),
            stats: SbrpStats::default(),
            control_out: VecDeque::new(),
        }
    }

    /// Resends not yet started, and when the first is due.
    #[cfg(test)]
    pub(crate) fn resends(&self) -> (usize, Option<u64>) {
        (self.sender.pending(), self.sender.next_due())
    }

    /// Resends not yet started: (packet, first flit, SSNF).
    #[cfg(test)]
    pub(crate) fn pending_resends(&self) -> Vec<(u32, u32, u16)> {
        self.sender
            .pending
            .iter()
            .map(|(_, p)| (p.packet, p.first_seq, p.submsg))
            .collect()
    }

    fn is_on(&self) -> bool {
        self.cfg.protocol.is_on()
    }

    /// A tail probe reached this host as a receiver: if the message it
    /// names (the newest its sender sent here) has not arrived, the flow
    /// has a gap up to it, which gap recovery waits for and asks for.
    /// Without gap recovery, or from a source known dead, it is ignored.
    fn on_tail_probe(&mut self, host: &HostEndpoint, probe: &Flit) {
        let Some(src) = probe.head.as_ref().map(|h| h.src) else {
            return;
        };
        let (dst, seq) = split_message_id(probe.msg);
        if self.cfg.gap_wait_ns.is_none()
            || dst != host.cfg.host
            || host.source.destinations_down().any(|d| d == src)
            || host.sink.awaits(src, seq).is_none()
        {
            return;
        }
        self.gaps.note_tail(src, seq);
        self.stats.tail_probe_gaps += 1;
    }

    /// A recover request reached this host as a sender (the paper's §5.3
    /// steps 5–6, §5.11.3): stop the packet if it is still being injected
    /// (its path is closed by a virtual tail), then resend it (whole in
    /// SBRP-0, from the flit the RRQ names in SBRP-1/2) with the next SSNF,
    /// after the software overhead; for a receiver's gap request, every
    /// later packet of the message as well.
    fn on_rrq(&mut self, host: &mut HostEndpoint, now: u64, rrq: &Flit) {
        self.stats.rrq_received += 1;
        self.sender.settle_notice(rrq);
        let Some(retained) = host.source.retained().get(rrq.msg) else {
            // A gap request may come for a message its sender sent more
            // than the hold window ago: not a hold too short for a cut.
            if is_gap_rrq(rrq) {
                self.stats.gap_rrq_unanswered += 1;
            } else {
                self.stats.unrecoverable_rrq += 1;
            }
            return;
        };
        let msg = retained.msg;
        let packetiser = Packetiser {
            max_packet_flits: host.cfg.source.max_packet_flits,
        };
        let packets = packetiser.packets(msg.flits);
        if rrq.packet >= packets {
            self.stats.unrecoverable_rrq += 1;
            return;
        }
        self.resend(host, now, rrq, msg, &packetiser);
        if !is_gap_rrq(rrq) {
            return;
        }
        // A gap request asks for the message from its first missing flit
        // on: the packets after that one may be missing too (a second
        // fault cut them, or nothing of the message arrived, and then its
        // receiver does not even know how many packets it has), and the
        // receiver asks for each gap once. They are resent whole; the
        // receiver discards what it already has.
        for packet in rrq.packet + 1..packets {
            let mut ask = rrq.clone();
            ask.packet = packet;
            ask.seq = packetiser.bounds(msg.flits, packet).0;
            self.sender.settle_notice(&ask);
            self.resend(host, now, &ask, msg, &packetiser);
        }
    }

    /// Resends packet `rrq.packet` of `msg` as `rrq` asks (see
    /// [`SbrpHost::on_rrq`]), unless the request is stale.
    fn resend(
        &mut self,
        host: &mut HostEndpoint,
        now: u64,
        rrq: &Flit,
        msg: Message,
        packetiser: &Packetiser,
    ) {
        let (first, len) = packetiser.bounds(msg.flits, rrq.packet);
        let (from, ssnf) = match self.sender.judge(self.cfg.protocol, rrq, first, len) {
            RrqVerdict::Stale => {
                self.stats.stale_rrq += 1;
                return;
            }
            RrqVerdict::Resend { from, ssnf } => (from, ssnf),
        };
        // Was the packet fully sent (counted), or is it still going out?
        let mut was_counted = true;
        for p in host.lanes.iter_mut().flatten() {
            if p.msg.id == rrq.msg && p.packet == rrq.packet && !p.is_done() && !p.abort {
                p.abort = true;
                was_counted = false;
                self.stats.aborted_packets += 1;
            }
        }
        if self.sender.cancel(rrq.msg, rrq.packet) {
            was_counted = false;
        }
        host.source.retained_mut().reopen(msg.id, was_counted);
        let mut flags = flags::RETRANSMISSION;
        if from > first {
            flags |= flags::FIRST_SEQUENCE;
        }
        let resend = OutPacket {
            src: host.cfg.host,
            msg,
            packet: rrq.packet,
            first_seq: from,
            len: first + len - from,
            emitted: 0,
            submsg: ssnf,
            flags,
            abort: false,
        };
        self.stats.resent_packets += 1;
        self.stats.resent_flits += resend.len as u64;
        // The software overhead (§5.9): the resending handler's, plus node
        // C's recover handler when C made the RRQ (the switch keeps no
        // timer for it; see `SbrpConfig`).
        let mut overhead = self.cfg.resend_delay_ns;
        if !rrq_from_receiver(rrq) {
            overhead = overhead.saturating_add(self.cfg.switch_report_delay_ns);
        }
        self.sender.schedule(now.saturating_add(overhead), resend);
        // Forget SSNFs of released messages now and then.
        if self.stats.resent_packets % 256 == 0 {
            let retained = host.source.retained();
            self.sender.prune(|m| retained.get(m).is_some());
        }
    }
}

impl HostHook for SbrpHost {
    fn name(&self) -> &'static str {
        super::NAME
    }

    hook_any!();

    fn intercept(&mut self, host: &mut HostEndpoint, now: u64, flit: &Flit) -> bool {
        if !(self.is_on() && is_rrq(flit)) {
            return false;
        }
        if is_tail_probe(flit) {
            self.on_tail_probe(host, flit);
            return true;
        }
        if is_parked_notice(flit) {
            // A switch parked the request for this packet until its
            // tables change. The request normally follows; should that
            // switch die first, act on the notice. The delay leaves the
            // controller time to re-route (as the receiver's R-4 wait
            // does), and doubles with each resend of the packet: one
            // made too early is cut at the same dead port and parked
            // again, with a new notice.
            // Acted on for the first two cuts of a packet at most: a
            // notice only covers a switch's death, and a packet whose
            // destination is cut off is cut and parked again at every
            // resend (without the bound its sender would keep resending
            // it, and keep its hold re-armed, for ever).
            let submsg = flit.head.as_ref().map_or(0, |h| h.submsg) as u32;
            let wait = self.cfg.nft_wait_ns.max(1) << (4 + submsg.min(NOTICE_RESENDS));
            if submsg < NOTICE_RESENDS && host.source.retained().get(flit.msg).is_some() {
                self.sender.note_parked(now.saturating_add(wait), flit);
            }
            return true;
        }
        if is_relayed_rrq(flit) {
            // A switch with no route to the sender sent this request
            // here, to the cut packet's destination: pass it on.
            if let Some(rrq) = relayed_rrq(flit, now) {
                self.control_out.push_back(rrq);
            }
            return true;
        }
        self.on_rrq(host, now, flit);
        true
    }

    fn on_received(&mut self, host: &mut HostEndpoint, now: u64, flit: &Flit) {
        if self.is_on() && self.receiver.observe(now, &self.cfg, flit) {
            self.stats.nft_received += 1;
            // A packet from a dead host, cut on its way out of the dead
            // router: no resend will ever come.
            for dead in host.source.destinations_down() {
                self.receiver.forget_source(dead);
            }
        }
    }

    fn on_peer_down(&mut self, peer: HostId) {
        self.receiver.forget_source(peer);
        self.gaps.forget_source(peer);
        self.probes.forget(peer);
    }

    fn on_packet_sent(&mut self, packet: &OutPacket, now: u64) {
        // A resend re-arms nothing: the probe is for the flow's newest
        // message, once.
        if let Some(wait) = self.cfg.gap_wait_ns.filter(|_| self.is_on()) {
            if packet.flags & flags::RETRANSMISSION == 0 {
                self.probes.sent(now, tail_probe_wait(wait), packet.msg.id);
            }
        }
    }

    fn after_receive(&mut self, host: &mut HostEndpoint, now: u64) {
        if !self.is_on() {
            return;
        }
        let packetiser = Packetiser {
            max_packet_flits: host.cfg.source.max_packet_flits,
        };
        for rrq in self.sender.take_due_notices(now) {
            // The parked request never came: its switch died holding it.
            if host.source.retained().get(rrq.msg).is_some() {
                self.stats.rrq_received = self.stats.rrq_received.saturating_sub(1);
                self.on_rrq(host, now, &rrq);
                self.stats.notices_acted_on += 1;
            }
        }
        let vc = host.lane_vc(0);
        let sink = &host.sink;
        self.stats.rrq_sent += self.receiver.due_rrqs(
            now,
            host.cfg.host,
            &self.cfg,
            &packetiser,
            vc,
            |src, msg, from, to| sink.first_missing(src, msg, from, to),
            &mut self.control_out,
        );
        if self.cfg.gap_wait_ns.is_some() {
            for (dst, msg) in self.probes.take_due(now) {
                // Not to a destination known down (nothing would answer),
                // nor about a message no longer retained (nothing could
                // be resent).
                if host.source.destinations_down().all(|d| d != dst)
                    && host.source.retained().get(msg).is_some()
                {
                    self.control_out
                        .push_back(tail_probe_flit(host.cfg.host, dst, msg, vc, now));
                    self.stats.tail_probes_sent += 1;
                }
            }
        }
        let waits = sink.held_messages() > 0 || self.gaps.has_tails();
        if let Some(wait) = self.cfg.gap_wait_ns.filter(|_| waits) {
            let tails = self.gaps.tail_gaps(|src, seq| sink.awaits(src, seq));
            self.gaps.observe(now, wait, sink.order_gaps().chain(tails));
            for dead in host.source.destinations_down() {
                self.gaps.forget_source(dead);
            }
            self.stats.gap_rrq_sent += self.gaps.due_rrqs(
                now,
                host.cfg.host,
                &self.cfg,
                wait,
                &packetiser,
                vc,
                |src, tail| {
                    sink.missing_before_held(src, tail, GAP_MESSAGES)
                        .into_iter()
                        .filter_map(|(_, msg)| {
                            sink.first_missing(src, msg, 0, u32::MAX)
                                .map(|flit| (msg, flit))
                        })
                        .collect()
                },
                &mut self.control_out,
            );
        } else {
            // Nothing held for order, no probed tail: no flow waits.
            self.gaps.clear();
        }
    }

    fn take_control(&mut self, vc: u8) -> Option<Flit> {
        let mut rrq = self.control_out.pop_front()?;
        rrq.vc = vc;
        Some(rrq)
    }

    fn take_packet(&mut self, now: u64) -> Option<OutPacket> {
        self.sender.take_due(now)
    }

    fn poll_timeout(&self, now: u64) -> Option<u64> {
        // A resend already due waits for credits or a lane, which arrive
        // with a datagram: no wake-up for it.
        [
            self.sender.next_due().filter(|&t| t > now),
            self.receiver.next_due(),
            self.gaps.next_due(),
            self.probes.next_due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn in_progress(&self) -> usize {
        self.receiver.waiting()
            + self.gaps.waiting()
            + self.sender.pending()
            + self.sender.noticed()
            + self.probes.waiting()
            + self.control_out.len()
    }

    fn is_drained(&self) -> bool {
        self.sender.pending() == 0 && self.control_out.is_empty()
    }

    fn begin_run(&mut self) {
        self.stats = SbrpStats::default();
    }

    fn report(&self, report: &mut HostReport) {
        report.sbrp = self.stats.clone();
    }
}

impl HostEndpoint {
    /// Turns on a recovery protocol. The source must retain its messages
    /// ([`ReleasePolicy::HoldFor`] or `UntilReleased`), since a recover
    /// request can only be served from the retained copy; the sink then
    /// delivers each flow in order.
    pub fn set_recovery(&mut self, cfg: SbrpConfig) -> Result<(), ConfigError> {
        if cfg.protocol.is_on() && self.source.config().release == ReleasePolicy::WhenSent {
            return Err(ConfigError::RecoveryNeedsRetention {
                host: self.cfg.host,
                protocol: cfg.protocol.name(),
            });
        }
        self.sink.set_in_order(cfg.protocol.is_on());
        match self.hook_mut::<SbrpHost>() {
            Some(h) => h.cfg = cfg,
            None => {
                let vcs = self.cfg.link.vcs;
                self.install_hook(
                    crate::mechanism::rank(super::NAME),
                    Box::new(SbrpHost::new(cfg, vcs)),
                );
            }
        }
        Ok(())
    }

    /// The host's SBRP counters (zero without a recovery protocol).
    pub fn sbrp_stats(&self) -> SbrpStats {
        self.hook::<SbrpHost>()
            .map_or_else(SbrpStats::default, |h| h.stats.clone())
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod sim_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flit::{FlitKind, Head};
    use crate::mechanism::sbrp::rrq_flit;
    use bytes::Bytes;

    /// The head of 16-flit message 7 from `src` to host 3 on ejection VC
    /// `vc`, and the NFT that cuts it after flit 5.
    fn head_and_nft(vc: u8, src: HostId) -> (Flit, Flit) {
        let head = Flit {
            kind: FlitKind::Head,
            vc,
            flags: 0,
            msg: 7,
            packet: 0,
            seq: 0,
            head: Some(Head {
                dst: 3,
                src,
                msg_flits: 16,
                ..Head::default()
            }),
            payload: Bytes::new(),
        };
        let nft = Flit {
            kind: FlitKind::Tail,
            flags: flags::NON_FINAL_TAIL,
            seq: 5,
            head: None,
            ..head.clone()
        };
        (head, nft)
    }

    #[test]
    fn protocol_names_parse() {
        assert_eq!(
            RecoveryProtocol::parse("sbrp-1"),
            Some(RecoveryProtocol::Sbrp1)
        );
        assert_eq!(
            RecoveryProtocol::parse("SBRP2"),
            Some(RecoveryProtocol::Sbrp2)
        );
        assert_eq!(
            RecoveryProtocol::parse("none"),
            Some(RecoveryProtocol::None)
        );
        assert_eq!(RecoveryProtocol::parse("sbrp3"), None);
    }

    #[test]
    fn sender_ignores_rrqs_for_superseded_sub_messages() {
        let mut s = SenderRecovery::default();
        let r = rrq_flit(9, 1, 7, 0, 0, 40, 0, 0);
        assert_eq!(
            s.judge(RecoveryProtocol::Sbrp1, &r, 0, 128),
            RrqVerdict::Resend { from: 40, ssnf: 1 }
        );
        // A second RRQ about the same (now superseded) sub-message.
        assert_eq!(
            s.judge(RecoveryProtocol::Sbrp1, &r, 0, 128),
            RrqVerdict::Stale
        );
        // An RRQ about the resend itself is acted on.
        let r1 = rrq_flit(9, 1, 7, 0, 1, 500, 0, 0);
        assert_eq!(
            s.judge(RecoveryProtocol::Sbrp2, &r1, 0, 128),
            RrqVerdict::Resend { from: 127, ssnf: 2 }
        );
        let r0 = rrq_flit(9, 1, 8, 0, 0, 40, 0, 0);
        assert_eq!(
            s.judge(RecoveryProtocol::Sbrp0, &r0, 0, 128),
            RrqVerdict::Resend { from: 0, ssnf: 1 }
        );
    }

    /// A flow that waits for messages nothing reported cut: after
    /// `gap_wait_ns`, not before, the receiver asks the sender for every
    /// missing one (whole packets under SBRP-0), with requests the sender
    /// cannot take as stale; once per gap, which it forgets once the flow
    /// moves on.
    #[test]
    fn a_gap_held_for_order_is_asked_for_after_the_gap_wait() {
        let cfg = SbrpConfig {
            protocol: RecoveryProtocol::Sbrp0,
            ..SbrpConfig::default()
        };
        let p = Packetiser {
            max_packet_flits: 4,
        };
        let wait = 1_000;
        let mut g = GapRecovery::default();
        let mut out = VecDeque::new();
        // Messages 7 (flits from 6 on missing) and 8 (nothing arrived).
        let missing = |src: HostId, tail: Option<u32>| {
            assert_eq!((src, tail), (9, None));
            vec![(7, 6), (8, 0)]
        };
        g.observe(100, wait, [(9, 7)].into_iter());
        assert_eq!(g.next_due(), Some(1_100));
        assert_eq!(
            g.due_rrqs(1_099, 3, &cfg, wait, &p, 0, missing, &mut out),
            0
        );
        g.observe(1_099, wait, [(9, 7)].into_iter());
        assert_eq!(
            g.due_rrqs(1_100, 3, &cfg, wait, &p, 0, missing, &mut out),
            2
        );
        let asked: Vec<_> = out.drain(..).collect();
        assert!(asked.iter().all(is_gap_rrq));
        let what: Vec<_> = asked.iter().map(|f| (f.msg, f.packet, f.seq)).collect();
        assert_eq!(what, [(7, 1, 4), (8, 0, 0)]);
        let mut s = SenderRecovery::default();
        s.ssnf.insert((7, 1), 3);
        assert_eq!(
            s.judge(RecoveryProtocol::Sbrp0, &asked[0], 4, 4),
            RrqVerdict::Resend { from: 4, ssnf: 4 }
        );
        assert_eq!(g.next_due(), None, "once per gap");
        assert_eq!(
            g.due_rrqs(9_000, 3, &cfg, wait, &p, 0, missing, &mut out),
            0
        );
        g.observe(9_000, wait, [(9, 9)].into_iter());
        assert_eq!(g.next_due(), Some(10_000), "a new gap is waited for afresh");
        g.observe(9_500, wait, std::iter::empty());
        assert_eq!(g.waiting(), 0);
    }

    /// One probe per flow tail: due `wait` after the flow's newest message
    /// left, sent once; a packet of an older message does not move it, a
    /// newer message re-arms it, a destination known down disarms it.
    #[test]
    fn a_flows_tail_is_probed_once_per_newest_message() {
        use crate::host::message::message_id;
        let mut p = TailProbes::default();
        let (m0, m1) = (message_id(4, 0), message_id(4, 1));
        p.sent(100, 50, m0);
        p.sent(120, 50, m1);
        p.sent(130, 50, m0);
        p.sent(140, 50, message_id(5, 0));
        assert_eq!((p.next_due(), p.waiting()), (Some(170), 2));
        assert!(p.take_due(169).is_empty());
        assert_eq!(p.take_due(170), [(4, m1)]);
        assert_eq!(p.take_due(190), [(5, message_id(5, 0))]);
        assert_eq!((p.next_due(), p.waiting()), (None, 0));
        assert!(p.take_due(10_000).is_empty(), "once per tail");
        p.sent(10_000, 50, message_id(4, 2));
        assert_eq!(p.next_due(), Some(10_050), "a new tail is probed afresh");
        p.forget(4);
        assert_eq!((p.next_due(), p.waiting()), (None, 0));
    }

    /// SBRP-2's receiver sends its RRQ `report_delay_ns` after the NFT (its
    /// recover handler's software overhead), not before, and marks it as
    /// the receiver's; a switch's RRQ is not marked.
    #[test]
    fn the_receivers_rrq_waits_for_its_handler() {
        let cfg = SbrpConfig {
            protocol: RecoveryProtocol::Sbrp2,
            report_delay_ns: 260,
            ..SbrpConfig::default()
        };
        let mut r = ReceiverRecovery::new(2);
        let (head, nft) = head_and_nft(1, 9);
        assert!(!r.observe(1_000, &cfg, &head));
        assert!(r.observe(2_000, &cfg, &nft));
        assert_eq!(r.next_due(), Some(2_260));
        let p = Packetiser {
            max_packet_flits: 16,
        };
        let mut out = VecDeque::new();
        let missing = |_, _, _, _| Some(5);
        assert_eq!(r.due_rrqs(2_259, 3, &cfg, &p, 0, missing, &mut out), 0);
        assert!(out.is_empty(), "RRQ before the handler's overhead");
        assert_eq!(r.due_rrqs(2_260, 3, &cfg, &p, 0, missing, &mut out), 1);
        let rrq = out.pop_front().unwrap();
        assert!(is_rrq(&rrq) && rrq_from_receiver(&rrq));
        assert_eq!((rrq.seq, rrq.head.as_ref().unwrap().dst), (5, 9));
        assert!(!rrq_from_receiver(&rrq_flit(3, 9, 7, 0, 0, 5, 0, 0)));
    }

    /// A cut packet from a host known dead is no longer waited on (it
    /// would never be resent): only that source's waits go.
    #[test]
    fn a_dead_sources_cut_packets_are_forgotten() {
        let cfg = SbrpConfig {
            protocol: RecoveryProtocol::Sbrp0,
            ..SbrpConfig::default()
        };
        let mut r = ReceiverRecovery::new(2);
        for (vc, src) in [(0u8, 9), (1, 4)] {
            let (head, nft) = head_and_nft(vc, src);
            assert!(!r.observe(1_000, &cfg, &head));
            assert!(r.observe(2_000, &cfg, &nft));
        }
        assert_eq!(r.waiting(), 2);
        assert_eq!(r.forget_source(5), 0);
        assert_eq!(r.forget_source(9), 1);
        assert_eq!(r.waiting(), 1);
        assert_eq!(r.forget_source(4), 1);
        assert_eq!(r.next_due(), None);
    }
}
