//! The receiving side of a host: reassembles flits into packets and packets
//! into messages, and checks what the network delivered.
//!
//! Reassembly follows wormhole switching: on one VC of the ejection link the
//! flits of a packet arrive contiguously, head first, so a body or tail flit
//! belongs to the packet last opened on its VC. Packets of one message may
//! arrive on different VCs and in any order; a message is complete when each
//! of its `msg_flits` flit numbers has arrived once.
//!
//! Checks, per flow (source → this host), seed 000 §7.3 / seed 003 §7.6:
//! - **exactly once**: a message whose first packet arrives after the message
//!   was already delivered counts as a duplicate (its flits are discarded);
//!   a flit number arriving twice within one message is a duplicate flit;
//! - **in order**: a message delivered after a later message of the same
//!   flow counts as out of order (message numbers are per (src, dst), see
//!   [`crate::host::message`]);
//! - **integrity**: every flit's payload must equal the sender's
//!   deterministic payload, heads must agree with each other and name this
//!   host; a packet cut short (a new head on its VC before its tail, or a
//!   switch-made non-final tail, seed 003) is counted as incomplete, and a
//!   body/tail flit with no open packet is an orphan.

use super::histogram::{Histogram, Moments};
use super::message::{message_id, payload_for, split_message_id};
use crate::flit::{flags, Flit};
use crate::topology::HostId;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Largest message the sink will reassemble, so that a corrupt `msg_flits`
/// cannot make it allocate without bound.
pub const MAX_MESSAGE_FLITS: u32 = 1 << 20;

/// Per flow, how many delivered message numbers above the first missing one
/// are remembered. A message lost for good (no recovery protocol) would
/// otherwise make this set grow for the rest of the run; past the window
/// the sink gives up on the oldest gap (counted in
/// [`SinkStats::abandoned_gaps`]) and a late arrival below it is counted
/// as a duplicate.
pub const REORDER_WINDOW: usize = 1 << 16;

/// Messages kept partly reassembled at most; past this the oldest (by
/// source and id) is discarded and counted in
/// [`SinkStats::abandoned_partial_messages`], so packets lost for good
/// cannot exhaust memory.
pub const MAX_PARTIAL_MESSAGES: usize = 1 << 16;

/// Events kept for [`Sink::poll_event`] before the oldest are dropped (and
/// counted), so an application that never polls cannot exhaust memory.
pub const MAX_PENDING_EVENTS: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkConfig {
    pub host: HostId,
    pub vcs: u8,
    /// Expected payload bytes per flit (the fabric's flit payload).
    pub payload_bytes: usize,
    /// Keep the full delivery trace (for determinism tests); the trace hash
    /// is kept either way.
    pub record_trace: bool,
}

/// Sink counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkStats {
    pub received_flits: u64,
    pub delivered_messages: u64,
    pub delivered_flits: u64,
    pub duplicate_messages: u64,
    pub duplicate_flits: u64,
    pub out_of_order_messages: u64,
    /// Messages completed with at least one bad flit (not delivered).
    pub corrupted_messages: u64,
    pub corrupted_flits: u64,
    /// Packets cut before their tail (new head on the VC, or non-final tail).
    pub incomplete_packets: u64,
    /// Body/tail flits with no open packet on their VC.
    pub orphan_flits: u64,
    /// Heads for another host, or message ids naming another destination.
    pub misdelivered_packets: u64,
    pub dropped_events: u64,
    /// Message numbers given up on (see [`REORDER_WINDOW`]).
    pub abandoned_gaps: u64,
    /// Partial messages discarded (see [`MAX_PARTIAL_MESSAGES`]).
    pub abandoned_partial_messages: u64,
    /// Recovery resends that arrived for a message already delivered.
    #[serde(default)]
    pub redundant_resends: u64,
    /// Original copies (no retransmission flag) of a message that a resend
    /// had already completed: the original was reported cut but was only
    /// held up somewhere (e.g. a head parked at a router until its port
    /// came back). Discarded, like a redundant resend (spec 003 I2); not a
    /// duplicate delivery.
    #[serde(default)]
    pub stale_originals: u64,
    /// Messages that completed early and were held back for order.
    #[serde(default)]
    pub held_for_order: u64,
    /// Messages delivered with flits from a recovery resend ("corrupted
    /// messages" of spec 003 §6.2, recovered).
    #[serde(default)]
    pub recovered_messages: u64,
    /// Flits of recovery resends that reached this host (SBRP overhead).
    #[serde(default)]
    pub retransmitted_flits: u64,
}

/// What a violation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Violation {
    Duplicate,
    OutOfOrder,
    Corrupted,
    Incomplete,
    Orphan,
    Misdelivered,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum SinkEvent {
    Delivered {
        src: HostId,
        msg: u64,
        flits: u32,
        latency_ns: u64,
    },
    Violation {
        kind: Violation,
        /// The flow's source, when known.
        src: Option<HostId>,
        msg: u64,
    },
    /// The application data a delivered message carried (its flits had
    /// [`flags::DATA`]): every flit's payload in order, the last one
    /// padded. Comes just before the message's `Delivered`. (Not
    /// serialised: it lives between the sink and its host only.)
    #[serde(skip)]
    Data { src: HostId, msg: u64, data: Bytes },
}

/// One delivery, for determinism checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub at_ns: u64,
    pub src: HostId,
    pub msg: u64,
    /// Generation to delivery (ns).
    #[serde(default)]
    pub latency_ns: u64,
    /// A resend completed the message (a corrupted message, spec 003 §6.2).
    #[serde(default)]
    pub recovered: bool,
}

#[derive(Clone, Debug)]
struct OpenPacket {
    src: HostId,
    msg: u64,
    next_seq: u32,
    /// Flits of this packet are thrown away (duplicate or misdelivered).
    discard: bool,
}

#[derive(Clone, Debug)]
struct Assembly {
    msg_flits: u32,
    born_ns: u64,
    /// One bit per flit number.
    received: Vec<u64>,
    count: u32,
    corrupted: bool,
    /// Some flit came from a recovery resend (SBRP): the message was hit.
    recovered: bool,
    /// Application data (flits with [`flags::DATA`]), flit `seq` at
    /// `seq × payload bytes`.
    data: Option<Vec<u8>>,
}

impl Assembly {
    fn new(msg_flits: u32, born_ns: u64) -> Self {
        Assembly {
            msg_flits,
            born_ns,
            received: vec![0; msg_flits.div_ceil(64) as usize],
            count: 0,
            corrupted: false,
            recovered: false,
            data: None,
        }
    }

    fn has(&self, seq: u32) -> bool {
        self.received[(seq / 64) as usize] & (1 << (seq % 64)) != 0
    }

    /// Marks flit `seq`; false if it was already there.
    fn mark(&mut self, seq: u32) -> bool {
        let (w, b) = ((seq / 64) as usize, seq % 64);
        let fresh = self.received[w] & (1 << b) == 0;
        self.received[w] |= 1 << b;
        self.count += u32::from(fresh);
        fresh
    }
}

/// Delivery state of one flow (one source).
#[derive(Clone, Debug, Default)]
struct Flow {
    /// Every message number below this has been delivered.
    watermark: u32,
    /// Delivered numbers at or above the watermark.
    above: BTreeSet<u32>,
    highest: Option<u32>,
    /// In-order mode (SBRP): complete messages waiting for an earlier one,
    /// by message number, with the time they completed.
    held: BTreeMap<u32, (Assembly, u64)>,
    /// Messages delivered from this source.
    count: u64,
    /// Recent message numbers completed with flits of a recovery resend
    /// (at most [`MAX_RECOVERED_REMEMBERED`]).
    recovered: BTreeSet<u32>,
}

/// Recovered messages a flow remembers, to tell a late original copy of
/// one from a duplicate.
const MAX_RECOVERED_REMEMBERED: usize = 1024;

impl Flow {
    fn delivered(&self, seq: u32) -> bool {
        seq < self.watermark || self.above.contains(&seq) || self.held.contains_key(&seq)
    }

    /// Whether `seq` was completed with flits of a recovery resend: one
    /// delivered so, or one held back for order (its original may still
    /// arrive meanwhile: late, not doubled).
    fn recovered(&self, seq: u32) -> bool {
        self.recovered.contains(&seq) || self.held.get(&seq).is_some_and(|(a, _)| a.recovered)
    }

    /// Records delivery of `seq` (`recovered`: completed with flits of a
    /// recovery resend); returns (out of order, message numbers given up
    /// on to keep within the reorder window).
    fn deliver(&mut self, seq: u32, recovered: bool) -> (bool, u64) {
        self.count += 1;
        if recovered {
            self.recovered.insert(seq);
            if self.recovered.len() > MAX_RECOVERED_REMEMBERED {
                self.recovered.pop_first();
            }
        }
        let late = self.highest.is_some_and(|h| seq < h);
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
        self.above.insert(seq);
        let mut abandoned = 0;
        if self.above.len() > REORDER_WINDOW {
            if let Some(&first) = self.above.first() {
                abandoned = (first - self.watermark) as u64;
                self.watermark = first;
            }
        }
        while self.above.remove(&self.watermark) {
            self.watermark += 1;
        }
        (late, abandoned)
    }
}

#[derive(Clone, Debug)]
pub struct Sink {
    cfg: SinkConfig,
    open: Vec<Option<OpenPacket>>,
    assemblies: BTreeMap<(HostId, u64), Assembly>,
    flows: BTreeMap<HostId, Flow>,
    latency: Histogram,
    /// Latency of the recovered messages only (spec 003 §6.2).
    recovered_latency: Histogram,
    /// The same latencies' count, sum and sum of squares (exact mean and
    /// variance, for confidence intervals).
    recovered_moments: Moments,
    stats: SinkStats,
    events: VecDeque<SinkEvent>,
    trace: Vec<Delivery>,
    trace_hash: u64,
    first_delivery: Option<u64>,
    last_delivery: Option<u64>,
    /// Deliver each flow's messages in order, holding back those that
    /// complete early (SBRP: a resent message completes after its
    /// successors, spec 003 §8 item 17).
    in_order: bool,
    /// Messages held for order, over all flows (kept so that asking costs
    /// nothing per flow: the SBRP host asks after every receive).
    held: usize,
}

impl Sink {
    pub fn new(cfg: SinkConfig) -> Self {
        Sink {
            open: vec![None; cfg.vcs.max(1) as usize],
            cfg,
            assemblies: BTreeMap::new(),
            flows: BTreeMap::new(),
            latency: Histogram::new(),
            recovered_latency: Histogram::new(),
            recovered_moments: Moments::default(),
            stats: SinkStats::default(),
            events: VecDeque::new(),
            trace: Vec::new(),
            trace_hash: 0xcbf2_9ce4_8422_2325,
            first_delivery: None,
            last_delivery: None,
            in_order: false,
            held: 0,
        }
    }

    /// Holds messages that complete before an earlier message of their flow
    /// until that one is delivered (used with a recovery protocol).
    pub fn set_in_order(&mut self, in_order: bool) {
        self.in_order = in_order;
    }

    /// Starts a new run's figures: counters, latency histograms, trace and
    /// per-flow counts start from zero, while what tells a duplicate from a
    /// new message (each flow's delivered numbers) and partly received
    /// messages are kept.
    pub fn begin_run(&mut self) {
        self.stats = SinkStats::default();
        self.latency = Histogram::new();
        self.recovered_latency = Histogram::new();
        self.recovered_moments = Moments::default();
        self.trace.clear();
        self.trace_hash = 0xcbf2_9ce4_8422_2325;
        self.first_delivery = None;
        self.last_delivery = None;
        for flow in self.flows.values_mut() {
            flow.count = 0;
        }
    }

    /// Messages delivered from each source.
    pub fn delivered_from(&self) -> BTreeMap<HostId, u64> {
        self.flows.iter().map(|(&s, f)| (s, f.count)).collect()
    }

    /// Complete messages held back waiting for an earlier one.
    pub fn held_messages(&self) -> usize {
        self.held
    }

    /// In-order mode: per flow holding complete messages back, the source
    /// and the message number they wait for (a later message of the flow
    /// arrived, this one has not).
    pub fn order_gaps(&self) -> impl Iterator<Item = (HostId, u32)> + '_ {
        self.flows
            .iter()
            .filter(|(_, f)| !f.held.is_empty())
            .map(|(&src, f)| (src, f.watermark))
    }

    /// In-order mode: the message numbers of `src`'s flow missing below
    /// its highest held message and, with `through`, up to and including
    /// that number (neither delivered nor held), the first `at_most`,
    /// with their ids.
    pub fn missing_before_held(
        &self,
        src: HostId,
        through: Option<u32>,
        at_most: usize,
    ) -> Vec<(u32, u64)> {
        let flow = self.flows.get(&src);
        let held = flow.and_then(|f| f.held.last_key_value()).map(|(&h, _)| h);
        let end = held.max(through.map(|t| t.saturating_add(1)));
        let Some(end) = end else {
            return Vec::new();
        };
        (flow.map_or(0, |f| f.watermark)..end)
            .filter(|&seq| !flow.is_some_and(|f| f.delivered(seq)))
            .take(at_most)
            .map(|seq| (seq, message_id(self.cfg.host, seq)))
            .collect()
    }

    /// In-order mode: if message number `seq` of `src`'s flow is neither
    /// delivered nor held, the number the flow's delivery waits for (it
    /// or an earlier one); `None` once it has arrived.
    pub fn awaits(&self, src: HostId, seq: u32) -> Option<u32> {
        match self.flows.get(&src) {
            Some(f) if f.delivered(seq) => None,
            Some(f) => Some(f.watermark),
            None => Some(0),
        }
    }

    /// The first flit of `[from, to)` of message `msg` from `src` not yet
    /// received; `None` if all are there or the message was delivered.
    pub fn first_missing(&self, src: HostId, msg: u64, from: u32, to: u32) -> Option<u32> {
        let (_, seq) = split_message_id(msg);
        if self.flows.get(&src).is_some_and(|f| f.delivered(seq)) {
            return None;
        }
        let Some(a) = self.assemblies.get(&(src, msg)) else {
            return Some(from);
        };
        (from..to.min(a.msg_flits)).find(|&s| !a.has(s))
    }

    /// Changes the payload size flits are checked against (when the fabric's
    /// traffic is reconfigured).
    pub fn set_payload_bytes(&mut self, payload_bytes: usize) {
        self.cfg.payload_bytes = payload_bytes;
    }

    pub fn stats(&self) -> &SinkStats {
        &self.stats
    }

    pub fn latency(&self) -> &Histogram {
        &self.latency
    }

    /// Latency of messages that needed a recovery resend.
    pub fn recovered_latency(&self) -> &Histogram {
        &self.recovered_latency
    }

    /// Count, sum and sum of squares of [`Sink::recovered_latency`]'s samples.
    pub fn recovered_latency_moments(&self) -> &Moments {
        &self.recovered_moments
    }

    pub fn poll_event(&mut self) -> Option<SinkEvent> {
        self.events.pop_front()
    }

    /// Every delivery in order (empty unless `record_trace`).
    pub fn trace(&self) -> &[Delivery] {
        &self.trace
    }

    /// FNV-1a hash over every (time, src, msg) delivered, in order.
    pub fn trace_hash(&self) -> u64 {
        self.trace_hash
    }

    /// Time of the first and the last delivery.
    pub fn delivery_span(&self) -> Option<(u64, u64)> {
        Some((self.first_delivery?, self.last_delivery?))
    }

    /// Messages partly received, waiting for more flits.
    pub fn partial_messages(&self) -> usize {
        self.assemblies.len()
    }

    fn push_event(&mut self, e: SinkEvent) {
        if self.events.len() >= MAX_PENDING_EVENTS {
            self.events.pop_front();
            self.stats.dropped_events += 1;
        }
        self.events.push_back(e);
    }

    fn violation(&mut self, kind: Violation, src: Option<HostId>, msg: u64) {
        self.push_event(SinkEvent::Violation { kind, src, msg });
    }

    /// Takes one flit off the ejection link at time `now`.
    pub fn receive(&mut self, now: u64, flit: &Flit) {
        self.stats.received_flits += 1;
        let vc = flit.vc as usize;
        if vc >= self.open.len() {
            self.stats.corrupted_flits += 1;
            self.violation(Violation::Corrupted, None, flit.msg);
            return;
        }
        if flit.kind.is_head() {
            if let Some(cut) = self.open[vc].take() {
                self.stats.incomplete_packets += 1;
                self.violation(Violation::Incomplete, Some(cut.src), cut.msg);
            }
            let Some(open) = self.open_packet(flit) else {
                return;
            };
            self.open[vc] = Some(open);
        }
        let Some(open) = self.open[vc].as_mut() else {
            self.stats.orphan_flits += 1;
            self.violation(Violation::Orphan, None, flit.msg);
            return;
        };
        let in_sequence = flit.msg == open.msg && flit.seq == open.next_seq;
        open.next_seq = open.next_seq.wrapping_add(1);
        let (src, msg, discard) = (open.src, open.msg, open.discard);
        if flit.kind.is_tail() {
            self.open[vc] = None;
            if flit.flags & flags::NON_FINAL_TAIL != 0 {
                self.stats.incomplete_packets += 1;
                self.violation(Violation::Incomplete, Some(src), msg);
                // A non-final tail closes a cut path and carries no data.
                return;
            }
        }
        if discard {
            return;
        }
        self.accept(now, src, msg, flit, in_sequence);
    }

    /// Opens a packet for a head flit, or returns `None` (and counts why)
    /// when the head is unusable.
    fn open_packet(&mut self, flit: &Flit) -> Option<OpenPacket> {
        let Some(head) = &flit.head else {
            self.stats.corrupted_flits += 1;
            self.violation(Violation::Corrupted, None, flit.msg);
            return None;
        };
        let (src, msg) = (head.src, flit.msg);
        let mut open = OpenPacket {
            src,
            msg,
            next_seq: flit.seq,
            discard: false,
        };
        let (dst, seq) = split_message_id(msg);
        if head.dst != self.cfg.host || dst != self.cfg.host {
            self.stats.misdelivered_packets += 1;
            self.violation(Violation::Misdelivered, Some(src), msg);
            open.discard = true;
            return Some(open);
        }
        if let Some(flow) = self.flows.get(&src).filter(|f| f.delivered(seq)) {
            if flit.flags & flags::RETRANSMISSION != 0 {
                // A recovery resend of a message that made it after all
                // (spec 003 §5.8): expected, and discarded.
                self.stats.redundant_resends += 1;
            } else if flow.recovered(seq) {
                // The original of a message its resend completed: late,
                // not doubled; discarded.
                self.stats.stale_originals += 1;
            } else if flit.packet == 0 {
                self.stats.duplicate_messages += 1;
                self.violation(Violation::Duplicate, Some(src), msg);
            }
            open.discard = true;
            return Some(open);
        }
        if head.msg_flits == 0 || head.msg_flits > MAX_MESSAGE_FLITS {
            self.stats.corrupted_flits += 1;
            self.violation(Violation::Corrupted, Some(src), msg);
            open.discard = true;
            return Some(open);
        }
        if self.assemblies.len() >= MAX_PARTIAL_MESSAGES
            && !self.assemblies.contains_key(&(src, msg))
        {
            self.assemblies.pop_first();
            self.stats.abandoned_partial_messages += 1;
        }
        let a = self
            .assemblies
            .entry((src, msg))
            .or_insert_with(|| Assembly::new(head.msg_flits, head.born_ns));
        if a.msg_flits != head.msg_flits || a.born_ns != head.born_ns {
            a.corrupted = true;
        }
        Some(open)
    }

    fn accept(&mut self, now: u64, src: HostId, msg: u64, flit: &Flit, in_sequence: bool) {
        let Some(a) = self.assemblies.get_mut(&(src, msg)) else {
            return;
        };
        let is_data = flit.flags & flags::DATA != 0;
        let payload_ok = flit.payload.len() == self.cfg.payload_bytes
            && (is_data || flit.payload == payload_for(src, msg, flit.seq, self.cfg.payload_bytes));
        if !in_sequence || !payload_ok || flit.seq >= a.msg_flits {
            self.stats.corrupted_flits += 1;
            a.corrupted = true;
            if flit.seq >= a.msg_flits {
                return;
            }
        }
        if flit.flags & flags::RETRANSMISSION != 0 {
            a.recovered = true;
            self.stats.retransmitted_flits += 1;
        }
        if !a.mark(flit.seq) {
            self.stats.duplicate_flits += 1;
            return;
        }
        if is_data && payload_ok {
            let size = self.cfg.payload_bytes;
            let data = a
                .data
                .get_or_insert_with(|| vec![0; a.msg_flits as usize * size]);
            let at = flit.seq as usize * size;
            data[at..at + size].copy_from_slice(&flit.payload);
        }
        if a.count < a.msg_flits {
            return;
        }
        let Some(a) = self.assemblies.remove(&(src, msg)) else {
            return;
        };
        let (_, seq) = split_message_id(msg);
        debug_assert_eq!(message_id(self.cfg.host, seq), msg);
        if a.corrupted {
            self.stats.corrupted_messages += 1;
            self.violation(Violation::Corrupted, Some(src), msg);
            return;
        }
        let flow = self.flows.entry(src).or_default();
        if self.in_order && seq > flow.watermark {
            if flow.held.insert(seq, (a, now)).is_none() {
                self.held += 1;
            }
            self.stats.held_for_order += 1;
            return;
        }
        self.deliver(now, src, seq, a);
        // Release what this delivery unblocked.
        while let Some(a) = self.flows.get_mut(&src).and_then(|flow| {
            let next = flow.watermark;
            flow.held.remove(&next).map(|(a, _)| (next, a))
        }) {
            self.held -= 1;
            self.deliver(now, src, a.0, a.1);
        }
    }

    fn deliver(&mut self, now: u64, src: HostId, seq: u32, a: Assembly) {
        let msg = message_id(self.cfg.host, seq);
        let flow = self.flows.entry(src).or_default();
        let (late, abandoned) = flow.deliver(seq, a.recovered);
        self.stats.abandoned_gaps += abandoned;
        if late {
            self.stats.out_of_order_messages += 1;
            self.violation(Violation::OutOfOrder, Some(src), msg);
        }
        let latency_ns = now.saturating_sub(a.born_ns);
        self.latency.record(latency_ns);
        if a.recovered {
            self.stats.recovered_messages += 1;
            self.recovered_latency.record(latency_ns);
            self.recovered_moments.record(latency_ns);
        }
        self.stats.delivered_messages += 1;
        self.stats.delivered_flits += a.msg_flits as u64;
        self.first_delivery.get_or_insert(now);
        self.last_delivery = Some(now);
        for x in [now, src as u64, msg] {
            for b in x.to_le_bytes() {
                self.trace_hash = (self.trace_hash ^ b as u64).wrapping_mul(0x0100_0000_01b3);
            }
        }
        if self.cfg.record_trace {
            self.trace.push(Delivery {
                at_ns: now,
                src,
                msg,
                latency_ns,
                recovered: a.recovered,
            });
        }
        if let Some(data) = a.data {
            self.push_event(SinkEvent::Data {
                src,
                msg,
                data: Bytes::from(data),
            });
        }
        self.push_event(SinkEvent::Delivered {
            src,
            msg,
            flits: a.msg_flits,
            latency_ns,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::message::{Message, OutPacket, Packetiser};
    use super::*;

    const ME: HostId = 5;

    fn sink() -> Sink {
        Sink::new(SinkConfig {
            host: ME,
            vcs: 2,
            payload_bytes: 8,
            record_trace: true,
        })
    }

    /// The flits of message `seq` from `src` to ME, `flits` long, cut into
    /// packets of at most `max` flits, all on `vc`.
    fn message(src: HostId, seq: u32, flits: u32, max: u32, vc: u8) -> Vec<Vec<Flit>> {
        let msg = Message {
            id: message_id(ME, seq),
            dst: ME,
            flits,
            born_ns: 100,
        };
        let p = Packetiser {
            max_packet_flits: max,
        };
        (0..p.packets(flits))
            .map(|k| {
                let (first_seq, len) = p.bounds(flits, k);
                let mut out = OutPacket {
                    src,
                    msg,
                    packet: k,
                    first_seq,
                    len,
                    emitted: 0,
                    submsg: 0,
                    flags: 0,
                    abort: false,
                };
                std::iter::from_fn(|| out.next_flit(vc, 8)).collect()
            })
            .collect()
    }

    fn feed(s: &mut Sink, now: u64, flits: &[Flit]) {
        for f in flits {
            s.receive(now, f);
        }
    }

    #[test]
    fn reassembles_a_multi_packet_message_and_measures_latency() {
        let mut s = sink();
        let packets = message(1, 0, 10, 4, 0);
        feed(&mut s, 300, &packets[0]);
        feed(&mut s, 400, &packets[1]);
        assert_eq!(s.stats().delivered_messages, 0);
        assert_eq!(s.partial_messages(), 1);
        feed(&mut s, 500, &packets[2]);
        assert_eq!(s.stats().delivered_messages, 1);
        assert_eq!(s.stats().delivered_flits, 10);
        assert_eq!(s.latency().max(), 400);
        assert_eq!(
            s.poll_event(),
            Some(SinkEvent::Delivered {
                src: 1,
                msg: message_id(ME, 0),
                flits: 10,
                latency_ns: 400
            })
        );
        assert_eq!(s.partial_messages(), 0);
        assert_eq!(s.trace().len(), 1);
    }

    #[test]
    fn packets_of_one_message_may_interleave_across_vcs() {
        let mut s = sink();
        let a = message(1, 0, 4, 2, 0);
        let b = message(1, 0, 4, 2, 1);
        // Packet 1 on VC 1, packet 0 on VC 0, flits interleaved.
        s.receive(1, &b[1][0]);
        s.receive(2, &a[0][0]);
        s.receive(3, &b[1][1]);
        s.receive(4, &a[0][1]);
        assert_eq!(s.stats().delivered_messages, 1);
        assert_eq!(s.stats().corrupted_flits, 0);
    }

    #[test]
    fn counts_out_of_order_and_duplicate_messages() {
        let mut s = sink();
        for seq in [0, 2, 1] {
            feed(&mut s, 10, &message(1, seq, 2, 8, 0)[0]);
        }
        assert_eq!(s.stats().delivered_messages, 3);
        assert_eq!(s.stats().out_of_order_messages, 1);
        feed(&mut s, 20, &message(1, 1, 2, 8, 0)[0]);
        assert_eq!(s.stats().duplicate_messages, 1);
        assert_eq!(s.stats().delivered_messages, 3);
        // Another flow has its own numbering.
        feed(&mut s, 30, &message(2, 0, 2, 8, 0)[0]);
        assert_eq!(s.stats().delivered_messages, 4);
        assert_eq!(s.stats().out_of_order_messages, 1);
        let kinds: Vec<_> = std::iter::from_fn(|| s.poll_event())
            .filter_map(|e| match e {
                SinkEvent::Violation { kind, .. } => Some(kind),
                _ => None,
            })
            .collect();
        assert_eq!(kinds, [Violation::OutOfOrder, Violation::Duplicate]);
    }

    /// A message completed by a recovery resend, whose original copy
    /// (held up, not lost) arrives afterwards: discarded and counted as a
    /// stale original, not as a duplicate; without a resend, a second copy
    /// is still a duplicate.
    #[test]
    fn a_late_original_of_a_recovered_message_is_not_a_duplicate() {
        let mut s = sink();
        let original = message(1, 0, 4, 4, 0).remove(0);
        let mut resend = original.clone();
        for f in &mut resend {
            f.flags |= flags::RETRANSMISSION;
        }
        feed(&mut s, 10, &resend);
        assert_eq!(s.stats().delivered_messages, 1);
        assert_eq!(s.stats().recovered_messages, 1);
        feed(&mut s, 20, &original);
        assert_eq!(s.stats().stale_originals, 1);
        assert_eq!(s.stats().duplicate_messages, 0);
        assert_eq!(s.stats().delivered_messages, 1);
        // Message 1 arrives whole the first time: a second copy is a
        // duplicate.
        let plain = message(1, 1, 4, 4, 0).remove(0);
        feed(&mut s, 30, &plain);
        feed(&mut s, 40, &plain);
        assert_eq!(s.stats().duplicate_messages, 1);
        assert_eq!(s.stats().stale_originals, 1);
        assert_eq!(s.stats().delivered_messages, 2);
    }

    /// In order (SBRP), a message a resend completed may wait for an
    /// earlier one; its original arriving meanwhile is late, not doubled.
    #[test]
    fn a_late_original_of_a_recovered_message_held_for_order_is_not_a_duplicate() {
        let mut s = sink();
        s.set_in_order(true);
        let original = message(1, 1, 1, 4, 0).remove(0);
        let mut resend = original.clone();
        for f in &mut resend {
            f.flags |= flags::RETRANSMISSION;
        }
        feed(&mut s, 10, &resend);
        assert_eq!(s.held_messages(), 1, "message 1 waits for message 0");
        feed(&mut s, 20, &original);
        assert_eq!(s.stats().duplicate_messages, 0);
        assert_eq!(s.stats().stale_originals, 1);
        feed(&mut s, 30, &message(1, 0, 1, 4, 0).remove(0));
        assert_eq!(s.stats().delivered_messages, 2);
        assert_eq!(s.stats().recovered_messages, 1);
    }

    #[test]
    fn damaged_payload_corrupts_the_message() {
        let mut s = sink();
        let mut p = message(1, 0, 3, 8, 0).remove(0);
        p[1].payload = bytes::Bytes::from_static(&[0; 8]);
        feed(&mut s, 10, &p);
        assert_eq!(s.stats().corrupted_flits, 1);
        assert_eq!(s.stats().corrupted_messages, 1);
        assert_eq!(s.stats().delivered_messages, 0);
    }

    #[test]
    fn cut_packets_orphans_and_misdelivery_are_counted() {
        let mut s = sink();
        let p = message(1, 0, 3, 8, 0).remove(0);
        // Head and body, then a new head on the same VC: packet cut.
        feed(&mut s, 1, &p[..2]);
        let q = message(2, 0, 1, 8, 0).remove(0);
        feed(&mut s, 2, &q);
        assert_eq!(s.stats().incomplete_packets, 1);
        assert_eq!(s.stats().delivered_messages, 1);
        // The old tail now has no open packet.
        s.receive(3, &p[2]);
        assert_eq!(s.stats().orphan_flits, 1);
        // A switch-made non-final tail closes the packet as incomplete.
        let mut r = message(3, 0, 3, 8, 1).remove(0);
        r[1].kind = crate::flit::FlitKind::Tail;
        r[1].flags |= flags::NON_FINAL_TAIL;
        feed(&mut s, 4, &r[..2]);
        assert_eq!(s.stats().incomplete_packets, 2);
        assert_eq!(s.partial_messages(), 2);
        // A head for another host.
        let mut m = message(1, 1, 1, 8, 0).remove(0);
        m[0].head.as_mut().unwrap().dst = ME + 1;
        feed(&mut s, 5, &m);
        assert_eq!(s.stats().misdelivered_packets, 1);
        assert_eq!(s.stats().delivered_messages, 1);
        // A flit on a VC the link does not have.
        let mut v = message(1, 2, 1, 8, 0).remove(0);
        v[0].vc = 7;
        feed(&mut s, 6, &v);
        assert_eq!(s.stats().corrupted_flits, 1);
    }

    #[test]
    fn duplicate_flits_within_a_message_are_ignored() {
        let mut s = sink();
        let p = message(1, 0, 4, 2, 0);
        feed(&mut s, 1, &p[0]);
        feed(&mut s, 2, &p[0]);
        assert_eq!(s.stats().duplicate_flits, 2);
        feed(&mut s, 3, &p[1]);
        assert_eq!(s.stats().delivered_messages, 1);
    }

    #[test]
    fn pending_events_are_bounded() {
        let mut s = sink();
        for seq in 0..(MAX_PENDING_EVENTS as u32 + 10) {
            feed(&mut s, 1, &message(1, seq, 1, 8, 0)[0]);
        }
        assert_eq!(s.stats().dropped_events, 10);
        assert_eq!(
            std::iter::from_fn(|| s.poll_event()).count(),
            MAX_PENDING_EVENTS
        );
    }

    #[test]
    fn partial_messages_are_bounded() {
        let mut s = sink();
        for seq in 0..=(MAX_PARTIAL_MESSAGES as u32) {
            // Only the head packet of a two-packet message: never completes.
            let p = message(1, seq, 4, 2, 0).remove(0);
            feed(&mut s, 1, &p);
        }
        assert_eq!(s.partial_messages(), MAX_PARTIAL_MESSAGES);
        assert_eq!(s.stats().abandoned_partial_messages, 1);
    }

    #[test]
    fn a_lost_message_does_not_grow_the_flow_state_for_ever() {
        let mut f = Flow::default();
        // Message 0 never arrives.
        for seq in 1..=(REORDER_WINDOW as u32) {
            assert_eq!(f.deliver(seq, false), (false, 0));
        }
        assert_eq!(f.above.len(), REORDER_WINDOW);
        assert_eq!(f.deliver(REORDER_WINDOW as u32 + 1, false), (false, 1));
        assert!(f.above.is_empty());
        assert_eq!(f.watermark, REORDER_WINDOW as u32 + 2);
        assert!(
            f.delivered(0),
            "given up: a late copy counts as a duplicate"
        );
    }

    proptest::proptest! {
        /// Packets spread over VCs and interleaved flit by flit (wormhole per
        /// VC) are reassembled into every message exactly once.
        #[test]
        fn any_wormhole_interleaving_reassembles_everything(
            msgs in proptest::collection::vec((0u32..4, 1u32..12), 1..20),
            vc_of in proptest::collection::vec(0u8..2, 64),
            picks in proptest::collection::vec(proptest::bool::ANY, 512),
        ) {
            let mut s = sink();
            let mut next_seq = [0u32; 4];
            let mut lanes: [Vec<Flit>; 2] = [Vec::new(), Vec::new()];
            let mut k = 0;
            for &(src, len) in &msgs {
                let seq = next_seq[src as usize];
                next_seq[src as usize] += 1;
                for packet in message(src, seq, len, 3, 0) {
                    let vc = vc_of[k % vc_of.len()];
                    k += 1;
                    lanes[vc as usize].extend(packet.into_iter().map(|mut f| { f.vc = vc; f }));
                }
            }
            let (mut a, mut b) = (lanes[0].iter(), lanes[1].iter());
            let mut pick = picks.iter().cycle();
            loop {
                let next = if *pick.next().unwrap() { a.next().or_else(|| b.next()) } else { b.next().or_else(|| a.next()) };
                let Some(f) = next else { break };
                s.receive(1, f);
            }
            let st = s.stats();
            proptest::prop_assert_eq!(st.delivered_messages, msgs.len() as u64);
            proptest::prop_assert_eq!(st.delivered_flits, msgs.iter().map(|m| m.1 as u64).sum::<u64>());
            proptest::prop_assert_eq!(st.corrupted_flits + st.duplicate_flits + st.incomplete_packets + st.orphan_flits, 0);
            proptest::prop_assert_eq!(s.partial_messages(), 0);
        }
    }
}
