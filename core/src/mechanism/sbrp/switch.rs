//! The switch half of SBRP: as node C (its output died mid-packet) the
//! switch absorbs the rest of the packet and, for SBRP-0/1, sends the
//! source a recover request (RRQ); as node A (its input died) it closes
//! the packet downstream with a non-final tail (NFT); and it keeps the R-3
//! "shadow" of packets whose tail left but may still die on the link.

use super::{
    is_best_effort, relay_through_reporter, rrq_flit, RecoveryProtocol, NAME,
    PARKED_NOTICE_MSG_FLITS, PASSED_ON_RRQ_MSG_FLITS, RECEIVER_RRQ_MSG_FLITS,
    RELAYED_RRQ_MSG_FLITS, TAIL_PROBE_MSG_FLITS,
};
use crate::flit::{route_flags, Flit};
use crate::mechanism::hook_any;
use crate::routing::VcPolicy;
use crate::switch::hook::{RestartLoss, SwitchHook};
use crate::switch::input::Tracked;
use crate::switch::{DropReason, Switch};
use crate::topology::HostId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// What this switch did for SBRP.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SbrpSwitchCounters {
    /// Recover requests generated as node C (or for a head whose output died).
    pub rrq_sent: u64,
    /// Non-final tails generated as node A.
    pub nft_generated: u64,
    /// Packets whose output died mid-packet (their rest is absorbed).
    pub cut_packets: u64,
    /// RRQs not queued because the queue was full.
    pub rrq_overflow: u64,
    /// Packets reported from the R-3 shadow: their tail had left, but not
    /// yet been freed by the peer, when the port died (part of
    /// `cut_packets`).
    #[serde(default)]
    pub shadow_reports: u64,
    /// RRQs (own or passing through) that found their route dead and
    /// waited for new tables instead of being dropped.
    #[serde(default)]
    pub rrq_parked: u64,
    /// With dynamic local rerouting: RRQs passing through that DLR could not
    /// route on (their detour's return path died) and that this switch
    /// started afresh from its local input instead of parking them.
    #[serde(default)]
    pub rrq_restarted: u64,
    /// RRQs passing through that were among a dead port's unfreed flits
    /// (on the link or in the peer's buffer when it died): made again here
    /// and routed anew, since nothing else would ask for their packets.
    #[serde(default)]
    pub rrq_reissued: u64,
    /// RRQs for which this switch's tables had no route to the sender,
    /// sent to their reporter instead, which passes them on.
    #[serde(default)]
    pub rrq_relayed: u64,
}

/// Times a parked RRQ is released by its deadline, per packet, between two
/// table changes: one resend suffices when the tables are already right.
const PARK_RETRIES: u8 = 2;

/// RRQs a switch queues at most (a burst of cuts after a node death).
const MAX_PENDING_RRQS: usize = 4096;

/// Under DLR, the RRQ for a head DLR discards is sent at once while the
/// packet has been resent fewer times than this (its SSNF); after that it is
/// parked until a port comes back. Within DLR's guarantee one fresh route
/// from the source suffices; beyond it (more than k−1 faults, a switch fault
/// under a link-only variant) every resend may meet the same dead end, and
/// without this bound sender and switch would bounce it forever.
pub(crate) const DLR_EAGER_RESENDS: u16 = 8;

/// Under DLR, how many of a packet's resends past [`DLR_EAGER_RESENDS`]
/// have the request parked for them released by a deadline,
/// `park_retry_ns` after it was parked. The dead end that discarded the
/// packet may be several hops away, and its repair (a link retrained, a
/// port back) is seen by no port of this switch. One: a packet whose
/// destination is cut off for good is discarded at every resend, and each
/// resend re-arms its sender's hold, so more releases keep the message
/// retained and end in requests its sender has already released.
pub(crate) const DLR_PARKED_RESENDS: u16 = 1;

/// When a parked RRQ is released, besides a table change or a port back
/// up at this switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Release {
    /// Only then.
    OnChange,
    /// Parked for a `no-route` drop: also `park_retry_ns` after it was
    /// parked, [`PARK_RETRIES`] times per packet between table changes.
    Deadline,
    /// Parked under DLR for a packet resent `DLR_EAGER_RESENDS + n` times:
    /// also `park_retry_ns` after it was parked, while n <
    /// [`DLR_PARKED_RESENDS`].
    AfterResends(u16),
}

/// The SBRP state of one switch.
struct SbrpHook {
    protocol: RecoveryProtocol,
    /// RRQs waiting for the local input VC (input index `radix * vcs`,
    /// which has no link).
    rrq_pending: VecDeque<Flit>,
    /// RRQs whose route leads to a dead port, with when they are due again
    /// (`u64::MAX`: only when the tables change): kept until a new table
    /// (or the port coming back) may route them, or at the latest
    /// `park_retry_ns` after they were parked, then re-injected through
    /// the local input. Dropping them would lose the recovery they ask
    /// for. The deadline covers what no table change will release: a
    /// packet that met no route here because switches upstream still
    /// routed by their old tables when this one got its new table (found
    /// by `flitctl sim swarm`: its request waited for a table change that
    /// never came).
    rrq_parked: VecDeque<(u64, Flit)>,
    /// The earliest deadline among `rrq_parked`.
    park_due: Option<u64>,
    /// How long an RRQ stays parked at most: one keepalive interval, short
    /// beside the senders' hold window (a request released after its
    /// message was released recovers nothing). A request released before
    /// the tables change only costs a resend cut again and parked again,
    /// and [`PARK_RETRIES`] bounds those.
    park_retry_ns: u64,
    /// Per packet asked for ((sender, msg, packet)), how often its RRQ was
    /// released by the deadline since the tables last changed: at most
    /// [`PARK_RETRIES`] times, so that a packet whose destination no
    /// route reaches any more (cut off) is not resent for ever.
    park_retries: BTreeMap<(HostId, u64, u32), u8>,
    /// Per output VC (`port * vcs + vc`), the packets whose tail already
    /// left on it, with the VC's flit count at their tail: the R-3
    /// "shadow" of node C. A packet whose tail is among the flits the peer
    /// has not freed yet may still die on the link (case d: C no longer
    /// tracks it, and if its head died too nobody else will report it).
    /// RRQs passing through are shadowed too: one lost on the link is the
    /// only request for its packet, so it is made again.
    shadows: Vec<VecDeque<(u64, Tracked)>>,
    counters: SbrpSwitchCounters,
}

impl SbrpHook {
    /// Flits that may be lost between C's count and A (`max_ca`, the SBRP
    /// paper's §8 item 6): B's input buffer plus what B may hold toward A
    /// (its output queue is bounded by A's credits), one buffer depth each.
    fn max_ca(sw: &Switch) -> u32 {
        2 * sw.cfg.buffer_depth as u32
    }

    /// Queues a recover request for a packet this switch could not carry
    /// past a dead output (as node C, `FRH_C`).
    fn report_cut(&mut self, sw: &Switch, t: Tracked) {
        self.queue_rrq(sw, t, false, Release::OnChange);
    }

    /// Builds the RRQ for `t` (none for an RRQ, or when the protocol leaves
    /// it to the receiver) and queues it, or parks it until new tables (or
    /// as `release` says) when `park` (the packet's route is a dead port: a
    /// resend sent before the tables change would take the same dead route
    /// and be cut again).
    fn queue_rrq(&mut self, sw: &Switch, t: Tracked, park: bool, release: Release) {
        if t.is_rrq {
            return;
        }
        let max_ca = Self::max_ca(sw);
        let from = match self.protocol {
            RecoveryProtocol::None => return,
            RecoveryProtocol::Sbrp0 => t.first_seq,
            RecoveryProtocol::Sbrp1 => t.first_seq + t.forwarded.saturating_sub(max_ca),
            // SBRP-2 leaves the RRQ to the receiver, unless the head itself
            // may have died in B (head loss, §8 item 4: the hybrid the
            // digest suggests): then nothing reaches the receiver.
            RecoveryProtocol::Sbrp2 if t.forwarded <= max_ca => t.first_seq,
            RecoveryProtocol::Sbrp2 => return,
        };
        if self.rrq_pending.len() + self.rrq_parked.len() >= MAX_PENDING_RRQS {
            self.counters.rrq_overflow += 1;
            return;
        }
        self.counters.rrq_sent += 1;
        let rrq = rrq_flit(t.dst, t.src, t.msg, t.packet, t.submsg, from, 0, sw.now);
        if park {
            // The sender hears of it at once (a notice): a request parked
            // here dies with this switch, and a switch that cut a packet
            // may die before its tables change (found by `flitctl sim
            // swarm`: a link kill, then the switch at its end killed
            // 0.56 ms later, holding the only request for a packet it
            // had dropped whole).
            let mut notice = rrq.clone();
            if let Some(h) = notice.head.as_mut() {
                h.msg_flits = PARKED_NOTICE_MSG_FLITS;
            }
            self.rrq_pending.push_back(notice);
            self.park(sw.now, rrq, release);
        } else {
            self.rrq_pending.push_back(rrq);
        }
    }
}

impl SbrpHook {
    /// The packet an RRQ asks for, as its sender knows it.
    fn asked_for(rrq: &Flit) -> (HostId, u64, u32) {
        (rrq.head.as_ref().map_or(0, |h| h.dst), rrq.msg, rrq.packet)
    }

    /// Parks an RRQ whose route is dead; a table change or a port back up
    /// releases it, and `release` may give it a deadline too (a dead port
    /// of this switch is followed by one of the former; a `no-route` drop
    /// or a dead end of local rerouting further on may not be).
    fn park(&mut self, now: u64, rrq: Flit, release: Release) {
        self.counters.rrq_parked += 1;
        let wait = match release {
            Release::OnChange => None,
            Release::Deadline => {
                let retries = self
                    .park_retries
                    .get(&Self::asked_for(&rrq))
                    .copied()
                    .unwrap_or(0);
                (retries < PARK_RETRIES).then_some(self.park_retry_ns)
            }
            Release::AfterResends(n) => (n < DLR_PARKED_RESENDS).then_some(self.park_retry_ns),
        };
        let due = match wait {
            Some(wait) => {
                let due = now.saturating_add(wait);
                self.park_due = Some(self.park_due.map_or(due, |t| t.min(due)));
                due
            }
            None => u64::MAX,
        };
        self.rrq_parked.push_back((due, rrq));
    }

    /// A shadowed packet (or recover request) the port's death or its
    /// peer's restart may have lost: reported, or the request made again.
    fn report_shadow(&mut self, sw: &Switch, t: Tracked) {
        if t.is_rrq {
            self.reissue_rrq(sw, t);
        } else {
            self.counters.cut_packets += 1;
            self.counters.shadow_reports += 1;
            self.report_cut(sw, t);
        }
    }

    /// Makes again an RRQ that passed through and may have died with the
    /// port it left on; it enters through the local input and is routed
    /// anew (parked if its route is dead too). A copy that did arrive only
    /// makes the sender see a stale request (same SSNF as the resend's
    /// predecessor) and ignore it.
    fn reissue_rrq(&mut self, sw: &Switch, t: Tracked) {
        if self.rrq_pending.len() + self.rrq_parked.len() >= MAX_PENDING_RRQS {
            self.counters.rrq_overflow += 1;
            return;
        }
        let mut rrq = rrq_flit(
            t.src,
            t.dst,
            t.msg,
            t.packet,
            t.submsg,
            t.first_seq,
            0,
            sw.now,
        );
        if let Some(h) = rrq.head.as_mut() {
            h.msg_flits = match t.msg_flits {
                RECEIVER_RRQ_MSG_FLITS
                | RELAYED_RRQ_MSG_FLITS
                | PASSED_ON_RRQ_MSG_FLITS
                | PARKED_NOTICE_MSG_FLITS
                | TAIL_PROBE_MSG_FLITS => t.msg_flits,
                _ => 1,
            };
        }
        self.counters.rrq_reissued += 1;
        self.rrq_pending.push_back(rrq);
    }
}

impl SwitchHook for SbrpHook {
    fn name(&self) -> &'static str {
        NAME
    }
    hook_any!();

    fn on_drop(
        &mut self,
        sw: &mut Switch,
        _i: usize,
        mut f: Flit,
        reason: DropReason,
        track: Option<Tracked>,
        afresh: bool,
    ) -> Option<Flit> {
        // A packet with no route here (a table swapped in mid-flight that
        // has no entry for its destination yet) is cut like one routed to
        // a dead port: nothing of it passed, so ask for all of it once the
        // tables change (found by `flitctl sim swarm`: such drops were
        // lost under SBRP with controller re-routing).
        let resend = matches!(
            reason,
            DropReason::PortDown | DropReason::HoqLifetime | DropReason::NoRoute
        );
        if !(resend && self.protocol.is_on()) {
            return Some(f);
        }
        if track.is_some_and(|t| t.is_rrq && is_best_effort(t.msg_flits)) {
            // A notice is best effort: the parked request it announces
            // is still kept where it was parked. So is a tail probe: it
            // leaves its sender long after the flow's last message, when
            // a dead route means its receiver is cut off, not that the
            // tables are still changing.
            return Some(f);
        }
        if track.is_some_and(|t| t.is_rrq)
            && self.rrq_pending.len() + self.rrq_parked.len() < MAX_PENDING_RRQS
        {
            if reason == DropReason::HoqLifetime || afresh {
                // Local rerouting could not continue this RRQ's detour (its
                // way back died), or it waited out the head-of-queue
                // lifetime (presumed deadlocked: out of the buffer it
                // goes): route it anew from here, in the normal layer.
                // Should that fail too, it is parked (local input) or waits
                // out the lifetime again.
                if let Some(h) = f.head.as_mut() {
                    h.dlr_port_field = 0;
                    h.route_flags &= !route_flags::LOCAL_MISROUTED;
                }
                f.vc = 0;
                self.counters.rrq_restarted += 1;
                self.rrq_pending.push_back(f);
            } else if reason == DropReason::NoRoute && relay_through_reporter(&mut f) {
                // No route to the sender here, and no table change may
                // bring one: a switch left without a path toward the
                // sender under the final tables (found by `flitctl sim
                // swarm`: a top switch that lost its only link down to
                // the sender's subtree, a level-1 switch that lost its
                // only link up, both holding RRQs parked before that
                // second fault). The reporter (the cut packet's
                // destination) is connected to the sender by the
                // routing when SBRP can recover at all: it passes the
                // request on.
                f.vc = 0;
                self.counters.rrq_relayed += 1;
                self.rrq_pending.push_back(f);
            } else {
                // An RRQ toward a dead port (tables not yet updated, or
                // nothing local rerouting can route around): keep it for
                // new tables or a port back up.
                let release = if reason == DropReason::NoRoute {
                    Release::Deadline
                } else {
                    Release::OnChange
                };
                self.park(sw.now, f, release);
            }
            return None;
        }
        // Its route leads to a dead port: nothing of the packet passed, so
        // ask for all of it (from its head). Controller routing: once the
        // tables have changed (a resend now would take the same dead
        // route). Local rerouting: at once, the resend is routed afresh
        // around what is dead now, unless the destination itself is cut off
        // or the packet was already resent `DLR_EAGER_RESENDS` times. A head
        // that waited out its lifetime: at once, always (its route is
        // alive, and no new table or port coming back would unpark the
        // request; each round costs a lifetime, so no storm).
        // A request parked once local rerouting gave up on the packet is
        // also released once on a deadline: the dead end that discarded
        // it may lie hops away, and its repair is then seen by no port of
        // this switch (found by `flitctl sim swarm`: a leaf switch held
        // the request for a packet to a host cut off for 3 ms, both of
        // that host's leaf's links up down, one retraining, for good).
        let park = reason == DropReason::NoRoute
            || (reason == DropReason::PortDown
                && (!afresh || track.is_some_and(|t| t.submsg >= DLR_EAGER_RESENDS)));
        // Not under the mesh's local rerouting: its dead ends are dead
        // routers, and a packet for a dead router's host (which it cannot
        // tell from one for a host behind it) is discarded at every
        // resend, each re-arming its sender's hold; on a loaded 7×7 mesh
        // with two dead routers such releases delay connected flows'
        // recovery past their senders' hold windows.
        let local_reroute = sw.policy == VcPolicy::LocalReroute;
        let release = match track {
            _ if reason == DropReason::NoRoute => Release::Deadline,
            Some(t) if afresh && !local_reroute && t.submsg >= DLR_EAGER_RESENDS => {
                Release::AfterResends(t.submsg - DLR_EAGER_RESENDS)
            }
            _ => Release::OnChange,
        };
        if let Some(t) = track {
            self.queue_rrq(sw, t, park, release);
        }
        Some(f)
    }

    fn on_input_dead(&mut self, sw: &mut Switch, i: usize) -> bool {
        if !self.protocol.is_on() || sw.inputs[i].synthetic_tail {
            return false;
        }
        // Node A: close the packet downstream with a non-final tail, after
        // what was buffered.
        if !sw.close_with_non_final_tail(i) {
            return false;
        }
        self.counters.nft_generated += 1;
        true
    }

    fn on_tail_sent(&mut self, sw: &mut Switch, out: usize, out_vc: u8, t: Tracked, sent: u64) {
        if !self.protocol.is_on() {
            return;
        }
        let window = Self::max_ca(sw) as u64;
        let q = &mut self.shadows[out * sw.cfg.vcs as usize + out_vc as usize];
        // Only the last `max_ca` flits of a VC can be lost with the port
        // (see `on_port_failed`).
        while q.front().is_some_and(|(n, _)| n + window <= sent) {
            q.pop_front();
        }
        q.push_back((sent, t));
    }

    fn on_port_failed(&mut self, sw: &mut Switch, p: usize, _newly: bool) {
        if !self.protocol.is_on() {
            return;
        }
        // R-3 (§8 item 3): packets whose tail left on this port but is not
        // yet freed by the peer may be lost with it; and, when the peer
        // itself may have died (it fell silent: this end did not set the
        // port down), so may the flits it freed but still held toward its
        // next hop (its output queue, bounded by that hop's credits: one
        // buffer depth, the second half of `max_ca`). A silent peer may be
        // a dead link or a dead switch, so both are reported; a packet
        // that did arrive is resent for nothing and discarded by its
        // receiver (found by `flitctl sim swarm`: packets in a killed
        // switch's output queue were lost with nobody to report them).
        let vcs = sw.cfg.vcs as usize;
        let depth = sw.cfg.buffer_depth;
        let peer_silent = sw.ports[p].link.is_admin_up();
        for vc in 0..vcs {
            let sent = sw.counters.ports[p].vcs[vc].tx_flits;
            let outstanding = depth.saturating_sub(sw.ports[p].link.credits(vc as u8)) as u64;
            let at_risk = outstanding + if peer_silent { depth as u64 } else { 0 };
            let shadows = std::mem::take(&mut self.shadows[p * vcs + vc]);
            for (tail_no, t) in shadows {
                if tail_no + at_risk <= sent {
                    continue;
                }
                self.report_shadow(sw, t);
            }
        }
    }

    fn on_peer_restarted(&mut self, sw: &mut Switch, p: usize, loss: &[RestartLoss]) {
        if !self.protocol.is_on() {
            return;
        }
        // R-3 for a peer that restarted unseen: as `on_port_failed` with a
        // silent peer, but the flits still queued here are not lost. A
        // packet whose tail left may have died in the old incarnation (its
        // buffer, or its output queue toward the next hop); one whose tail
        // is still queued and whose head left lost its rest (discarded by
        // the switch); one whose head is still queued goes to the new
        // incarnation whole and stays shadowed.
        let vcs = sw.cfg.vcs as usize;
        for (vc, l) in loss.iter().enumerate().take(vcs) {
            let shadows = std::mem::take(&mut self.shadows[p * vcs + vc]);
            for (tail_no, t) in shadows {
                let head_no = (tail_no + 1).saturating_sub(t.forwarded as u64);
                if head_no > l.left {
                    self.shadows[p * vcs + vc].push_back((tail_no, t));
                } else if tail_no > l.lost_after {
                    self.report_shadow(sw, t);
                }
            }
        }
    }

    fn on_packet_cut(&mut self, sw: &mut Switch, i: usize) {
        // Node C: the orphans are absorbed up to the tail; report.
        if !self.protocol.is_on() {
            return;
        }
        self.counters.cut_packets += 1;
        if let Some(t) = sw.inputs[i].track.take() {
            self.report_cut(sw, t);
        }
    }

    fn on_routes_changed(&mut self, _sw: &mut Switch) {
        // Parked RRQs get another chance (new tables, or a port back up).
        self.rrq_pending
            .extend(self.rrq_parked.drain(..).map(|(_, f)| f));
        self.park_due = None;
        self.park_retries.clear();
    }

    fn begin_pass(&mut self, now: u64) {
        if self.park_due.is_none_or(|t| t > now) {
            return;
        }
        let mut due = None;
        for (at, f) in std::mem::take(&mut self.rrq_parked) {
            if at <= now {
                *self.park_retries.entry(Self::asked_for(&f)).or_default() += 1;
                self.rrq_pending.push_back(f);
            } else {
                if at != u64::MAX {
                    due = Some(due.map_or(at, |t: u64| t.min(at)));
                }
                self.rrq_parked.push_back((at, f));
            }
        }
        self.park_due = due;
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.park_due
    }

    fn inject(&mut self, _sw: &mut Switch) -> Option<Flit> {
        self.rrq_pending.pop_front()
    }

    fn in_flight_flits(&self) -> u64 {
        self.rrq_pending.len() as u64
    }
}

/// Counters of a switch that never ran SBRP.
const NO_COUNTERS: SbrpSwitchCounters = SbrpSwitchCounters {
    rrq_sent: 0,
    nft_generated: 0,
    cut_packets: 0,
    rrq_overflow: 0,
    shadow_reports: 0,
    rrq_parked: 0,
    rrq_restarted: 0,
    rrq_reissued: 0,
    rrq_relayed: 0,
};

impl Switch {
    /// Selects the recovery protocol. With one, a port that dies mid-packet
    /// no longer leaves the packet open: as node C (output died) the switch
    /// absorbs the rest and, for SBRP-0/1, sends the source a recover
    /// request; as node A (input died) it closes the packet downstream with
    /// a non-final tail. See `docs/sbrp.md`.
    pub fn set_recovery(&mut self, protocol: RecoveryProtocol) {
        if let Some(h) = self.hook_mut::<SbrpHook>() {
            // Parked requests and counters stay.
            h.protocol = protocol;
            return;
        }
        if !protocol.is_on() {
            return;
        }
        let shadows = vec![VecDeque::new(); self.cfg.radix * self.cfg.vcs as usize];
        let hook = SbrpHook {
            protocol,
            rrq_pending: VecDeque::new(),
            rrq_parked: VecDeque::new(),
            park_due: None,
            park_retry_ns: self.cfg.link.keepalive_interval_ns,
            park_retries: BTreeMap::new(),
            shadows,
            counters: SbrpSwitchCounters::default(),
        };
        self.set_hook(crate::mechanism::rank(NAME), NAME, Some(Box::new(hook)));
    }

    pub fn recovery(&self) -> RecoveryProtocol {
        self.hook::<SbrpHook>()
            .map_or(RecoveryProtocol::None, |h| h.protocol)
    }

    pub fn sbrp_counters(&self) -> &SbrpSwitchCounters {
        self.hook::<SbrpHook>()
            .map_or(&NO_COUNTERS, |h| &h.counters)
    }

    /// Recover requests parked until new tables or a port back up (for
    /// tests that account for every message).
    #[cfg(test)]
    pub(crate) fn parked_rrqs(&self) -> impl Iterator<Item = &Flit> {
        self.hook::<SbrpHook>()
            .into_iter()
            .flat_map(|h| h.rrq_parked.iter().map(|(_, f)| f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flit::flags;
    use crate::mechanism::sbrp::is_rrq;
    use crate::mechanism::sbrp::{is_parked_notice, is_relayed_rrq, RELAYED_RRQ_MSG_FLITS};
    use crate::routing::VcPolicy;
    use crate::switch::input::InState;
    use crate::switch::tests::{chain, lft, packet, sw_cfg, Net};
    use crate::switch::{SwitchEvent, Switching};

    /// host0 — S0 — S1 — S2 — host1 under SBRP-1.
    fn three_switches() -> Net {
        let mut net = chain(3, 1, Switching::Wormhole);
        for sw in &mut net.switches {
            sw.set_recovery(RecoveryProtocol::Sbrp1);
        }
        net
    }

    /// Puts a fresh S1 (a restarted process: new epoch, its table, SBRP-1)
    /// in the old one's place, long before its neighbours' `dead_after`.
    fn restart_middle(net: &mut Net) {
        let mut fresh = Switch::with_epoch(sw_cfg(2, 1, Switching::Wormhole), 50).unwrap();
        fresh.install_table(lft(&[Some(0), Some(1)]), VcPolicy::Keep);
        fresh.set_recovery(RecoveryProtocol::Sbrp1);
        net.switches[1] = fresh;
    }

    fn requests(f: &[Flit]) -> Vec<(u64, u32)> {
        f.iter()
            .filter(|f| is_rrq(f) && !is_parked_notice(f))
            .map(|f| (f.msg, f.seq))
            .collect()
    }

    /// A worm crossing into a switch that restarts faster than keepalive
    /// detection: its neighbours never see the port go down, yet the
    /// packet is cut as if it had. Upstream (node C) absorbs its rest and
    /// asks the sender for it; downstream (node A) closes the part the old
    /// incarnation passed on with an NFT, so the path is free and the
    /// resend arrives whole through the new incarnation.
    #[test]
    fn a_worm_crossing_into_a_peer_restarted_within_detection_is_cut_and_recovered() {
        let mut net = three_switches();
        let flits = packet(0, 1, 1, 4, 0);
        net.hosts[0].to_send.extend(flits[..2].iter().cloned());
        net.run_for(1_000_000);
        assert_eq!(net.hosts[1].received.len(), 2);
        restart_middle(&mut net);
        net.run_for(200_000);
        // Its rest comes once S0 knows the new incarnation: absorbed.
        net.hosts[0].to_send.extend(flits[2..].iter().cloned());
        net.run_for(2_000_000);
        let events: Vec<_> = std::iter::from_fn(|| net.switches[0].poll_event()).collect();
        assert!(events.contains(&SwitchEvent::PeerRestarted { port: 1 }));
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, SwitchEvent::PortDown { .. })),
            "{events:?}"
        );
        let c = net.switches[0].sbrp_counters();
        assert_eq!((c.cut_packets, c.rrq_sent), (1, 1), "{c:?}");
        assert_eq!(requests(&net.hosts[0].received), vec![(1, 0)]);
        assert_eq!(net.switches[0].counters().drops.port_down, 2, "its rest");
        assert_eq!(net.switches[2].sbrp_counters().nft_generated, 1);
        let got = &net.hosts[1].received;
        assert_eq!(got.len(), 3);
        assert!(got[2].kind.is_tail() && got[2].flags & flags::NON_FINAL_TAIL != 0);
        assert_eq!(got[2].seq, 2);
        for (s, sw) in net.switches.iter().enumerate() {
            for (i, vc) in sw.inputs.iter().enumerate() {
                assert_eq!(vc.state, InState::Idle, "switch {s} input VC {i}");
            }
        }
        // The sender resends; the path is free.
        net.hosts[0].to_send.extend(flits);
        net.run_for(2_000_000);
        let got = &net.hosts[1].received;
        assert_eq!(got.len(), 7);
        assert!(got[3..].iter().map(|f| f.seq).eq(0..4));
        assert_eq!(net.switches[1].counters().drops.total(), 0);
    }

    /// Packets that left whole for a switch that restarts faster than
    /// detection and died in it are reported from node C's shadow, with
    /// those it may have held toward its next hop (one buffer depth);
    /// older ones are not, and what it had passed on whole arrives.
    #[test]
    fn packets_held_by_a_peer_restarted_within_detection_are_reported() {
        let mut net = three_switches();
        net.hosts[1].consume = false;
        for m in 0..6 {
            net.hosts[0].to_send.extend(packet(0, 1, m, 4, 0));
        }
        net.run_for(1_000_000);
        // host1's buffer, S2's and S1's inputs are full (8 flits each).
        assert_eq!(net.switches[1].input_occupancy(0, 0), Some(8));
        assert_eq!(net.switches[2].input_occupancy(0, 0), Some(8));
        restart_middle(&mut net);
        net.run_for(2_000_000);
        let c = net.switches[0].sbrp_counters().clone();
        assert_eq!(c.rrq_sent, c.cut_packets);
        let asked = requests(&net.hosts[0].received);
        // Messages 4 and 5 died in the old S1; 2 and 3 sat in S2 (freed
        // by S1 within one buffer depth: reported too, resent for
        // nothing).
        for m in 2..6 {
            assert!(asked.contains(&(m, 0)), "message {m}: {asked:?}");
        }
        assert!(!asked.iter().any(|&(m, _)| m < 2), "{asked:?}");
        net.hosts[1].consume = true;
        net.run_for(3_000_000);
        let got: Vec<u64> = net.hosts[1]
            .received
            .iter()
            .filter(|f| f.kind.is_tail())
            .map(|f| f.msg)
            .collect();
        assert_eq!(got[..4], [0, 1, 2, 3], "{got:?}");
    }

    /// A packet that meets no route at a switch whose table will not
    /// change again (its new table arrived before the upstream switches
    /// stopped sending that way): the recover request parked for it is
    /// sent once a keepalive interval has passed, instead of waiting for
    /// ever.
    #[test]
    fn a_request_parked_for_want_of_a_route_goes_out_without_a_table_change() {
        let mut net = chain(1, 1, Switching::Wormhole);
        net.switches[0].set_recovery(RecoveryProtocol::Sbrp0);
        net.hosts[0].to_send.extend(packet(0, 7, 1, 4, 0)); // host 7: no route
        let retry = net.switches[0].config().link.keepalive_interval_ns;
        net.run_for(retry / 2);
        assert_eq!(net.switches[0].counters().drops.no_route, 4);
        assert_eq!(net.switches[0].parked_rrqs().count(), 1);
        let request = |f: &&Flit| is_rrq(f) && !is_parked_notice(f);
        assert!(!net.hosts[0].received.iter().any(|f| request(&f)));
        assert_eq!(
            net.hosts[0]
                .received
                .iter()
                .filter(|f| is_parked_notice(f))
                .count(),
            1,
            "the sender hears at once that its request is parked"
        );
        net.run_for(retry);
        assert_eq!(net.switches[0].parked_rrqs().count(), 0);
        let rrqs: Vec<_> = net.hosts[0].received.iter().filter(request).collect();
        assert_eq!(rrqs.len(), 1, "one recover request reaches the source");
        assert_eq!((rrqs[0].msg, rrqs[0].seq), (1, 0));
    }

    /// A recover request at a switch whose tables have no route to the
    /// sender (it lost its only way toward the sender's part of the
    /// fabric) goes to its reporter instead, turned around and marked
    /// relayed, rather than being parked for a table change that never
    /// brings a route.
    #[test]
    fn a_request_with_no_route_to_its_sender_goes_to_its_reporter() {
        let mut net = chain(1, 1, Switching::Wormhole);
        net.switches[0].set_recovery(RecoveryProtocol::Sbrp0);
        // Host 0 (the sender) has no route; host 1 (the reporter) has.
        net.switches[0].install_table(lft(&[None, Some(1)]), VcPolicy::Keep);
        net.hosts[1]
            .to_send
            .push_back(rrq_flit(1, 0, 5, 0, 0, 0, 0, 0));
        net.run_for(1_000_000);
        assert_eq!(net.switches[0].sbrp_counters().rrq_relayed, 1);
        assert_eq!(net.switches[0].parked_rrqs().count(), 0);
        let back: Vec<_> = net.hosts[1].received.iter().filter(|f| is_rrq(f)).collect();
        assert_eq!(back.len(), 1, "the request comes back to its reporter");
        assert!(is_relayed_rrq(back[0]));
        let h = back[0].head.as_ref().unwrap();
        assert_eq!((h.src, h.dst, h.msg_flits), (0, 1, RELAYED_RRQ_MSG_FLITS));
        assert_eq!(back[0].msg, 5);
    }
}
