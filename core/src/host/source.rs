//! Message generation: when messages are born, where they go, how long they
//! are, and the bounded queue they wait in until the link takes them packet
//! by packet.
//!
//! **Saturation.** The source queue holds at most `queue_capacity` messages
//! that still have packets to send. An arrival that finds it full is not
//! generated at all and is counted in
//! [`SourceStats::not_generated_queue_full`]. Seed 000 §7.3 asks for an
//! unbounded queue; an emulator that runs for minutes past saturation would
//! grow it without limit, so we bound it and report what was refused: the
//! offered load is then `generated + not_generated`, the accepted load what
//! the sink counts. Finite patterns (all-to-all) are not affected in their
//! schedule: a refused arrival does not advance the destination cursor, so
//! every pair is still served and the run ends.
//!
//! Every generated message enters the [`RetainedStore`] and leaves it under
//! its [`ReleasePolicy`].

use super::message::{message_id, Message, OutPacket, Packetiser, MAX_PAYLOAD_BYTES};
use super::retained::{ReleasePolicy, RetainedStore};
use super::traffic::{DestinationGenerator, TrafficError, TrafficPattern};
use crate::topology::HostId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Offered load per node.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "unit")]
pub enum OfferedLoad {
    /// Flits per node per second.
    FlitsPerSecond { rate: f64 },
    /// A fraction of the injection link's bandwidth.
    Fraction {
        fraction: f64,
        link_flits_per_s: f64,
    },
}

impl OfferedLoad {
    pub fn flits_per_second(&self) -> f64 {
        match *self {
            OfferedLoad::FlitsPerSecond { rate } => rate,
            OfferedLoad::Fraction {
                fraction,
                link_flits_per_s,
            } => fraction * link_flits_per_s,
        }
    }
}

/// Inter-arrival time distribution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArrivalProcess {
    /// Exponential inter-arrival times (Poisson arrivals).
    #[default]
    Poisson,
    /// Fixed inter-arrival time (periodic).
    Constant,
    /// Uniform on [0, 2/λ] (spec 003 §6.2.2's reading of "uniform
    /// distribution within an interval").
    Uniform,
}

/// Message length in flits (all flits, headers included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum MessageLength {
    Fixed {
        flits: u32,
    },
    /// Uniform on [min, max], inclusive.
    Uniform {
        min: u32,
        max: u32,
    },
}

impl MessageLength {
    pub fn mean(&self) -> f64 {
        match *self {
            MessageLength::Fixed { flits } => flits as f64,
            MessageLength::Uniform { min, max } => (min as f64 + max as f64) / 2.0,
        }
    }

    fn sample(&self, rng: &mut impl Rng) -> u32 {
        match *self {
            MessageLength::Fixed { flits } => flits,
            MessageLength::Uniform { min, max } => rng.gen_range(min..=max),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceConfig {
    pub pattern: TrafficPattern,
    pub load: OfferedLoad,
    #[serde(default)]
    pub arrivals: ArrivalProcess,
    pub length: MessageLength,
    pub max_packet_flits: u32,
    /// Payload bytes per flit.
    pub payload_bytes: usize,
    /// Messages waiting to be sent, at most.
    pub queue_capacity: usize,
    /// Stop generating after this many messages (all-to-all stops by itself).
    #[serde(default)]
    pub max_messages: Option<u64>,
    /// Stop generating this long after `start`.
    #[serde(default)]
    pub duration_ns: Option<u64>,
    #[serde(default)]
    pub release: ReleasePolicy,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            pattern: TrafficPattern::Uniform,
            load: OfferedLoad::Fraction {
                fraction: 0.1,
                link_flits_per_s: 200_000.0,
            },
            arrivals: ArrivalProcess::Poisson,
            length: MessageLength::Fixed { flits: 8 },
            max_packet_flits: 8,
            payload_bytes: 16,
            queue_capacity: 64,
            max_messages: None,
            duration_ns: None,
            release: ReleasePolicy::WhenSent,
        }
    }
}

/// A source configuration that cannot work, naming the parameter at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Traffic(#[from] TrafficError),
    #[error("offered load {0} flits/s is not a finite non-negative number")]
    BadLoad(f64),
    #[error("message length: {0}")]
    BadLength(String),
    #[error("max_packet_flits must be at least 1")]
    BadPacketLength,
    #[error("payload_bytes {0} exceeds the maximum {MAX_PAYLOAD_BYTES}")]
    PayloadTooLarge(usize),
    #[error("queue_capacity must be at least 1")]
    ZeroQueue,
    #[error("host {host} is out of range for {hosts} hosts")]
    HostOutOfRange { host: HostId, hosts: u32 },
}

/// Source counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStats {
    pub generated_messages: u64,
    pub generated_flits: u64,
    /// Arrivals refused because the source queue was full.
    pub not_generated_queue_full: u64,
    pub packets_started: u64,
    pub packets_sent: u64,
    pub flits_sent: u64,
    /// Messages whose every packet has been sent.
    pub messages_sent: u64,
    /// Messages the application handed in ([`Source::push`]: IP packets,
    /// docs/ip.md); counted in `generated_messages` too.
    #[serde(default)]
    pub data_messages: u64,
    /// Application messages refused because the source queue was full.
    #[serde(default)]
    pub data_refused_queue_full: u64,
}

/// Arrivals handled per [`Source::handle_timeout`] call at most, so one call
/// after a long stall cannot loop for ever; the rest are handled on the next
/// call (`poll_timeout` is then already due).
const MAX_ARRIVALS_PER_CALL: u32 = 1 << 16;

#[derive(Clone, Debug)]
pub struct Source {
    host: HostId,
    hosts: u32,
    cfg: SourceConfig,
    destinations: DestinationGenerator,
    packetiser: Packetiser,
    rng: ChaCha8Rng,
    /// Mean inter-arrival time in ns (`None`: zero load).
    mean_gap_ns: Option<f64>,
    /// Next arrival, exact (fractional ns keep a constant rate from drifting).
    next_arrival: Option<f64>,
    stop_at: Option<u64>,
    next_seq: BTreeMap<HostId, u32>,
    /// Messages fully sent, per destination (for loss accounting by flow).
    sent_to: BTreeMap<HostId, u64>,
    /// Messages with packets still to take, oldest first, and how many of
    /// the front message's packets were taken.
    queue: VecDeque<(Message, u32)>,
    front_taken: u32,
    retained: RetainedStore,
    stats: SourceStats,
    /// Destinations known to be down: arrivals that draw one are not
    /// generated (spec 003 §3.6 #12, "no message is sent from or to a
    /// faulty node"; [`Source::set_destination_down`]).
    down: std::collections::BTreeSet<HostId>,
}

impl Source {
    /// A source for `host` among `hosts`. Its random stream is `seed`'s
    /// ChaCha8 stream number `host`, so hosts draw independent sequences and
    /// a run is reproducible from one seed.
    pub fn new(
        cfg: SourceConfig,
        host: HostId,
        hosts: u32,
        seed: u64,
    ) -> Result<Self, SourceError> {
        if host >= hosts {
            return Err(SourceError::HostOutOfRange { host, hosts });
        }
        let destinations = DestinationGenerator::new(cfg.pattern.clone(), host, hosts)?;
        let rate = cfg.load.flits_per_second();
        if !rate.is_finite() || rate < 0.0 {
            return Err(SourceError::BadLoad(rate));
        }
        match cfg.length {
            MessageLength::Fixed { flits: 0 } => {
                return Err(SourceError::BadLength(
                    "a message needs at least one flit".into(),
                ))
            }
            MessageLength::Uniform { min, max } if min == 0 || min > max => {
                return Err(SourceError::BadLength(format!(
                    "uniform [{min}, {max}] needs 1 <= min <= max"
                )))
            }
            _ => {}
        }
        if cfg.max_packet_flits == 0 {
            return Err(SourceError::BadPacketLength);
        }
        if cfg.payload_bytes > MAX_PAYLOAD_BYTES {
            return Err(SourceError::PayloadTooLarge(cfg.payload_bytes));
        }
        if cfg.queue_capacity == 0 {
            return Err(SourceError::ZeroQueue);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(host as u64);
        let mean_gap_ns = (rate > 0.0).then(|| 1e9 * cfg.length.mean() / rate);
        Ok(Source {
            host,
            hosts,
            packetiser: Packetiser {
                max_packet_flits: cfg.max_packet_flits,
            },
            retained: RetainedStore::new(cfg.release),
            destinations,
            rng,
            mean_gap_ns,
            next_arrival: None,
            stop_at: None,
            next_seq: BTreeMap::new(),
            sent_to: BTreeMap::new(),
            queue: VecDeque::new(),
            front_taken: 0,
            stats: SourceStats::default(),
            down: std::collections::BTreeSet::new(),
            cfg,
        })
    }

    pub fn config(&self) -> &SourceConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &SourceStats {
        &self.stats
    }

    pub fn retained(&self) -> &RetainedStore {
        &self.retained
    }

    /// Messages fully sent to each destination.
    pub fn sent_to(&self) -> &BTreeMap<HostId, u64> {
        &self.sent_to
    }

    pub fn retained_mut(&mut self) -> &mut RetainedStore {
        &mut self.retained
    }

    /// Starts generating: the first message arrives one inter-arrival time
    /// after `now`.
    pub fn start(&mut self, now: u64) {
        self.stop_at = self.cfg.duration_ns.map(|d| now.saturating_add(d));
        self.next_arrival = match (self.mean_gap_ns, self.destinations.total_messages()) {
            (None, _) | (_, Some(0)) => None,
            (Some(_), _) => Some(now as f64 + self.gap()),
        };
    }

    /// Stops generating; queued messages are still sent.
    pub fn stop(&mut self) {
        self.next_arrival = None;
    }

    /// True while more messages may be generated.
    pub fn is_generating(&self) -> bool {
        self.next_arrival.is_some()
    }

    /// True when nothing more will be generated and everything generated has
    /// been handed to the link.
    pub fn is_drained(&self) -> bool {
        self.next_arrival.is_none() && self.queue.is_empty()
    }

    /// Whether [`Source::push`] has room for another message.
    pub fn has_room(&self) -> bool {
        self.queue.len() < self.cfg.queue_capacity
    }

    /// Messages waiting (with packets not yet taken).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    fn gap(&mut self) -> f64 {
        let mean = self.mean_gap_ns.unwrap_or(0.0);
        match self.cfg.arrivals {
            ArrivalProcess::Constant => mean,
            ArrivalProcess::Uniform => self.rng.gen_range(0.0..=2.0 * mean),
            ArrivalProcess::Poisson => {
                let u: f64 = self.rng.gen();
                -(1.0 - u).ln() * mean
            }
        }
    }

    /// When the next message is due.
    pub fn poll_timeout(&self) -> Option<u64> {
        let arrival = self.next_arrival.map(|t| t.ceil() as u64);
        [arrival, self.retained.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Generates every message due by `now` and expires held messages.
    pub fn handle_timeout(&mut self, now: u64) {
        self.retained.handle_timeout(now);
        for _ in 0..MAX_ARRIVALS_PER_CALL {
            let Some(t) = self.next_arrival else { break };
            let born = t.ceil() as u64;
            if born > now {
                break;
            }
            if self.stop_at.is_some_and(|s| born >= s)
                || self
                    .cfg
                    .max_messages
                    .is_some_and(|m| self.stats.generated_messages >= m)
            {
                self.next_arrival = None;
                break;
            }
            if self.queue.len() >= self.cfg.queue_capacity {
                self.stats.not_generated_queue_full += 1;
            } else if !self.generate(born) {
                self.next_arrival = None;
                break;
            }
            self.next_arrival = Some(t + self.gap());
        }
    }

    /// Marks `dst` as down (or up again): while it is down, an arrival
    /// that draws it generates nothing (the thesis's traffic model, spec
    /// 003 §3.6 #12: nobody sends to a faulty node). Messages already
    /// generated for it are not withdrawn. The draw itself is unchanged, so
    /// the other destinations see the same sequence of arrivals.
    pub fn set_destination_down(&mut self, dst: HostId, down: bool) {
        if down {
            self.down.insert(dst);
        } else {
            self.down.remove(&dst);
        }
    }

    /// The destinations marked down ([`Source::set_destination_down`]).
    pub fn destinations_down(&self) -> impl Iterator<Item = HostId> + '_ {
        self.down.iter().copied()
    }

    /// Generates one message born at `born`; false if the pattern is
    /// exhausted.
    fn generate(&mut self, born: u64) -> bool {
        let Some(dst) = self.destinations.next_destination(&mut self.rng) else {
            return false;
        };
        if self.down.contains(&dst) {
            return true;
        }
        let flits = self.cfg.length.sample(&mut self.rng);
        let seq = self.next_seq.entry(dst).or_insert(0);
        let msg = Message {
            id: message_id(dst, *seq),
            dst,
            flits,
            born_ns: born,
        };
        *seq = seq.wrapping_add(1);
        self.retained.insert(msg, self.packetiser.packets(flits));
        self.queue.push_back((msg, self.packetiser.packets(flits)));
        self.stats.generated_messages += 1;
        self.stats.generated_flits += flits as u64;
        true
    }

    /// Queues a message of `flits` flits for `dst` handed in by the
    /// application (an IP packet, docs/ip.md) at `now`, numbered in the
    /// same per-destination sequence as generated ones (the sink's order
    /// and exactly-once checks see one flow). `None` if the source queue is
    /// full (the packet is dropped, as a full NIC queue would) or `dst` is
    /// not another host of the fabric.
    pub fn push(&mut self, dst: HostId, flits: u32, now: u64) -> Option<Message> {
        if dst == self.host || dst >= self.hosts || flits == 0 {
            return None;
        }
        if self.queue.len() >= self.cfg.queue_capacity {
            self.stats.data_refused_queue_full += 1;
            return None;
        }
        let seq = self.next_seq.entry(dst).or_insert(0);
        let msg = Message {
            id: message_id(dst, *seq),
            dst,
            flits,
            born_ns: now,
        };
        *seq = seq.wrapping_add(1);
        let packets = self.packetiser.packets(flits);
        self.retained.insert(msg, packets);
        self.queue.push_back((msg, packets));
        self.stats.generated_messages += 1;
        self.stats.generated_flits += flits as u64;
        self.stats.data_messages += 1;
        Some(msg)
    }

    /// Continues `previous`'s per-destination message numbering: a source
    /// replaced while the fabric carries traffic (IP packets sent before
    /// the generator starts, a host reconfigured for another run) must not
    /// number its messages from 0 again, or the receivers would take them
    /// for duplicates.
    pub fn continue_numbering(&mut self, previous: &Source) {
        for (&dst, &seq) in &previous.next_seq {
            let next = self.next_seq.entry(dst).or_insert(0);
            *next = (*next).max(seq);
        }
    }

    /// Takes the next packet to send, in generation order.
    pub fn take_packet(&mut self) -> Option<OutPacket> {
        let &(msg, packets) = self.queue.front()?;
        let k = self.front_taken;
        let (first_seq, len) = self.packetiser.bounds(msg.flits, k);
        self.front_taken += 1;
        if self.front_taken == packets {
            self.queue.pop_front();
            self.front_taken = 0;
        }
        self.stats.packets_started += 1;
        Some(OutPacket {
            src: self.host,
            msg,
            packet: k,
            first_seq,
            len,
            emitted: 0,
            submsg: 0,
            flags: 0,
            abort: false,
        })
    }

    /// Records that `packet`'s tail has been handed to the link.
    pub fn packet_sent(&mut self, packet: &OutPacket, now: u64) {
        self.stats.packets_sent += 1;
        self.stats.flits_sent += packet.len as u64;
        if self.retained.packet_sent(packet.msg.id, now) {
            self.stats.messages_sent += 1;
            *self.sent_to.entry(packet.msg.dst).or_insert(0) += 1;
        }
    }

    /// Records that `packet` left the host, as a recovery protocol sees it
    /// (SBRP, spec 003): an original packet counts in the statistics even
    /// when it was stopped mid-way (its flits are the message's; what is
    /// sent again is recovery overhead, counted by the protocol), and only
    /// a packet that went out whole completes its message in the retained
    /// store (a stopped one is completed by its resend).
    pub fn packet_done(&mut self, packet: &OutPacket, now: u64) {
        let resend = packet.flags & crate::flit::flags::RETRANSMISSION != 0;
        if !resend {
            self.stats.packets_sent += 1;
            self.stats.flits_sent += packet.len as u64;
        }
        if !packet.abort && self.retained.packet_sent(packet.msg.id, now) {
            self.stats.messages_sent += 1;
            *self.sent_to.entry(packet.msg.dst).or_insert(0) += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flit::FlitKind;

    fn cfg() -> SourceConfig {
        SourceConfig {
            pattern: TrafficPattern::Uniform,
            load: OfferedLoad::FlitsPerSecond { rate: 8e6 },
            arrivals: ArrivalProcess::Constant,
            length: MessageLength::Fixed { flits: 8 },
            max_packet_flits: 3,
            payload_bytes: 4,
            queue_capacity: 4,
            ..SourceConfig::default()
        }
    }

    #[test]
    fn constant_arrivals_follow_the_rate() {
        // 8e6 flits/s in 8-flit messages: one message per µs.
        let mut s = Source::new(cfg(), 0, 4, 1).unwrap();
        s.start(1_000);
        assert_eq!(s.poll_timeout(), Some(2_000));
        s.handle_timeout(1_999);
        assert_eq!(s.stats().generated_messages, 0);
        s.handle_timeout(4_500);
        assert_eq!(s.stats().generated_messages, 3);
        assert_eq!(s.poll_timeout(), Some(5_000));
    }

    #[test]
    fn poisson_mean_gap_matches_the_rate() {
        let mut c = cfg();
        c.arrivals = ArrivalProcess::Poisson;
        c.queue_capacity = usize::MAX;
        let mut s = Source::new(c, 0, 4, 9).unwrap();
        s.start(0);
        s.handle_timeout(10_000_000); // 10 ms: 10 000 expected
        let n = s.stats().generated_messages;
        assert!((9_600..10_400).contains(&n), "{n}");
    }

    #[test]
    fn full_queue_refuses_and_counts_arrivals() {
        let mut s = Source::new(cfg(), 0, 4, 1).unwrap();
        s.start(0);
        s.handle_timeout(10_000);
        assert_eq!(s.stats().generated_messages, 4);
        assert_eq!(s.stats().not_generated_queue_full, 6);
        assert_eq!(s.queued(), 4);
        assert_eq!(s.retained().len(), 4);
    }

    #[test]
    fn messages_are_packetised_and_released_when_fully_sent() {
        let mut s = Source::new(cfg(), 2, 4, 1).unwrap();
        s.start(0);
        s.handle_timeout(1_000);
        let mut packets = Vec::new();
        while let Some(p) = s.take_packet() {
            packets.push(p);
        }
        // 8 flits, 3 per packet: 3 + 3 + 2.
        assert_eq!(packets.iter().map(|p| p.len).collect::<Vec<_>>(), [3, 3, 2]);
        assert_eq!(s.queued(), 0);
        let mut seqs = Vec::new();
        for mut p in packets {
            assert_eq!(s.retained().len(), 1);
            while let Some(f) = p.next_flit(0, 4) {
                assert_eq!(f.kind.is_head(), f.seq == p.first_seq);
                if let Some(h) = &f.head {
                    assert_eq!((h.src, h.born_ns, h.msg_flits), (2, 1_000, 8));
                }
                seqs.push(f.seq);
            }
            s.packet_sent(&p, 1_500);
        }
        assert_eq!(seqs, (0..8).collect::<Vec<_>>());
        assert!(s.retained().is_empty());
        assert_eq!(s.stats().messages_sent, 1);
        assert_eq!(s.stats().flits_sent, 8);
    }

    #[test]
    fn message_ids_count_per_destination() {
        let mut c = cfg();
        c.pattern = TrafficPattern::AllToAll { rounds: 2 };
        c.queue_capacity = 100;
        c.max_packet_flits = 8;
        let mut s = Source::new(c, 0, 3, 1).unwrap();
        s.start(0);
        s.handle_timeout(1_000_000);
        let ids: Vec<(HostId, u64)> = std::iter::from_fn(|| s.take_packet())
            .map(|p| (p.msg.dst, p.msg.id))
            .collect();
        assert_eq!(
            ids,
            [
                (1, message_id(1, 0)),
                (2, message_id(2, 0)),
                (1, message_id(1, 1)),
                (2, message_id(2, 1))
            ]
        );
        assert!(s.is_drained(), "all-to-all ends by itself");
    }

    #[test]
    fn all_to_all_completes_despite_a_small_queue() {
        let mut c = cfg();
        c.pattern = TrafficPattern::AllToAll { rounds: 1 };
        c.queue_capacity = 1;
        c.length = MessageLength::Fixed { flits: 1 };
        let mut s = Source::new(c, 1, 5, 1).unwrap();
        s.start(0);
        let mut dsts = Vec::new();
        let mut now = 0;
        while !s.is_drained() {
            now += 10_000;
            s.handle_timeout(now);
            if let Some(mut p) = s.take_packet() {
                assert_eq!(p.next_flit(0, 0).unwrap().kind, FlitKind::HeadTail);
                dsts.push(p.msg.dst);
                s.packet_sent(&p, now);
            }
        }
        assert!(s.stats().not_generated_queue_full > 0);
        assert_eq!(dsts, [2, 3, 4, 0]);
    }

    #[test]
    fn duration_and_message_limits_stop_generation() {
        let mut c = cfg();
        c.duration_ns = Some(5_500);
        c.queue_capacity = 100;
        let mut s = Source::new(c.clone(), 0, 4, 1).unwrap();
        s.start(0);
        s.handle_timeout(100_000);
        assert_eq!(s.stats().generated_messages, 5);
        assert!(!s.is_generating());
        c.duration_ns = None;
        c.max_messages = Some(3);
        let mut s = Source::new(c, 0, 4, 1).unwrap();
        s.start(0);
        s.handle_timeout(100_000);
        assert_eq!(s.stats().generated_messages, 3);
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn uniform_lengths_stay_in_range_and_same_seed_repeats() {
        let mut c = cfg();
        c.length = MessageLength::Uniform { min: 2, max: 5 };
        c.arrivals = ArrivalProcess::Uniform;
        c.queue_capacity = 1000;
        let run = |seed| {
            let mut s = Source::new(c.clone(), 1, 8, seed).unwrap();
            s.start(0);
            s.handle_timeout(200_000);
            std::iter::from_fn(|| s.take_packet())
                .map(|p| (p.msg.dst, p.msg.flits, p.msg.born_ns))
                .collect::<Vec<_>>()
        };
        let a = run(5);
        assert!(a.len() > 100);
        assert!(a.iter().all(|&(_, f, _)| (2..=5).contains(&f)));
        assert_eq!(a, run(5));
        assert_ne!(a, run(6));
    }

    #[test]
    fn bad_configurations_are_rejected() {
        let bad = |f: fn(&mut SourceConfig)| {
            let mut c = cfg();
            f(&mut c);
            Source::new(c, 0, 4, 0).unwrap_err()
        };
        assert!(matches!(
            bad(|c| c.load = OfferedLoad::FlitsPerSecond { rate: -1.0 }),
            SourceError::BadLoad(_)
        ));
        assert!(matches!(
            bad(|c| c.length = MessageLength::Fixed { flits: 0 }),
            SourceError::BadLength(_)
        ));
        assert!(matches!(
            bad(|c| c.length = MessageLength::Uniform { min: 4, max: 3 }),
            SourceError::BadLength(_)
        ));
        assert!(matches!(
            bad(|c| c.max_packet_flits = 0),
            SourceError::BadPacketLength
        ));
        assert!(matches!(
            bad(|c| c.payload_bytes = 1 << 20),
            SourceError::PayloadTooLarge(_)
        ));
        assert!(matches!(
            bad(|c| c.queue_capacity = 0),
            SourceError::ZeroQueue
        ));
        assert!(matches!(
            Source::new(cfg(), 4, 4, 0),
            Err(SourceError::HostOutOfRange { .. })
        ));
        let mut c = cfg();
        c.pattern = TrafficPattern::Transpose;
        assert!(Source::new(c.clone(), 0, 16, 0).is_ok());
        assert!(matches!(
            Source::new(c, 0, 12, 0),
            Err(SourceError::Traffic(_))
        ));
    }

    #[test]
    fn zero_load_and_silent_sources_generate_nothing() {
        let mut c = cfg();
        c.load = OfferedLoad::FlitsPerSecond { rate: 0.0 };
        let mut s = Source::new(c, 0, 4, 0).unwrap();
        s.start(0);
        assert_eq!(s.poll_timeout(), None);
        assert!(s.is_drained());
        let mut c = cfg();
        c.pattern = TrafficPattern::BitComplement;
        // 5 hosts: node 2 maps to itself.
        let mut s = Source::new(c, 2, 5, 0).unwrap();
        s.start(0);
        assert!(s.is_drained());
    }
}
