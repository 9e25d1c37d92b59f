//! One end of a point-to-point link with credit-based flow control, used by
//! switch ports and host ports alike. Sans-IO in the quinn-proto style: the
//! owner feeds datagrams and time in, and polls datagrams, flits, events and
//! the next deadline out.
//!
//! Flow control keeps *cumulative* per-VC counters on both sides (see
//! `docs/wire.md`, "Credits and resynchronisation"):
//!
//! * sender: `consumed` (credits taken by [`Link::send`]), `transmitted`
//!   (flits put on the wire), `peer_freed` (the receiver's last reported
//!   freed count). Credits = `buffer_depth - (consumed - peer_freed)`.
//! * receiver: `received`, `freed` ([`Link::release`]); `received - freed`
//!   slots are in use and never exceed `buffer_depth`.
//!
//! Credit items carry `freed` itself, so a lost credit datagram is healed by
//! the next one; sync items carry `transmitted`, so flits lost in transit are
//! written off and their slots freed. Epochs in every header detect a peer
//! that restarted, which resets the counters against it.

use crate::flit::{Flit, MAX_INTERMEDIATES};
use crate::lateness::LatenessHistogram;
use crate::wire::{
    self, FrameWriter, Header, Item, SyncInfo, WireError, CREDIT_ITEM_LEN, HEADER_LEN,
    KEEPALIVE_ITEM_LEN, MAX_VCS,
};
use bytes::Bytes;
use std::collections::VecDeque;

/// Largest buffer depth: the wrapping 16-bit counters are compared as
/// signed differences, so in-flight amounts must stay below 2^15.
pub const MAX_BUFFER_DEPTH: u16 = 16_384;
const NS_PER_S: u128 = 1_000_000_000;

/// Static parameters of one link end (both ends must agree).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LinkConfig {
    /// Virtual channels, 1..=15.
    pub vcs: u8,
    /// Flits per VC at the receiver = initial credits of the sender.
    pub buffer_depth: u16,
    /// Emulated link bandwidth; `None` = unlimited. A paced link
    /// serialises: a flit starts on the emulated wire no earlier than one
    /// flit time after the previous one started, and no earlier than it
    /// was queued; the receiver releases it one flit time after its start
    /// plus `propagation_ns` (docs/wire.md, "Serialisation").
    pub bandwidth_flits_per_s: Option<u64>,
    /// One-way propagation delay applied to everything received.
    pub propagation_ns: u64,
    /// A datagram carrying a sync record goes out at least this often; when
    /// the link is otherwise idle it is a keepalive.
    pub keepalive_interval_ns: u64,
    /// Silence after which the peer is declared down.
    pub dead_after_ns: u64,
    /// Largest datagram this end sends, in bytes.
    pub mtu: usize,
    /// How long freed credits may wait for a data datagram to ride on
    /// before they are sent alone (they go at once when half a VC's buffer
    /// is owed).
    pub credit_coalesce_ns: u64,
    /// Paced links with `count_transit` only: when a flit's emulated
    /// start is reached, the datagram that carries it also takes every
    /// queued flit starting within the next quantum (back to back), so one
    /// datagram carries what the wire sends in a quantum instead of one
    /// datagram per flit. The receiver still releases each
    /// flit at its own emulated start + flit time + propagation (the
    /// stamps are in the ends' shared clock), so timing is unchanged;
    /// batching is a transport matter. 0 = a flit leaves when its start
    /// is reached. Daemons set it near their event loop's wake-up
    /// lateness. Ignored without `count_transit` (the receiver could not
    /// tell an early flit from a late one).
    pub pacing_quantum_ns: u64,
    /// Link error recovery (docs/wire.md, "Link errors and retraining"):
    /// a datagram lost or rejected while the link is in service (CRC
    /// failure, malformed datagram, sequence gap) is a *link error*: this
    /// end stops the link at once and tells the peer with a link-reset
    /// item, both ends report `PeerDown`, stay down for `retrain_ns` and
    /// then come back up with credits resynchronised. 0 = off: losses are
    /// only counted and the lost flits written off by sync records.
    pub retrain_ns: u64,
    /// Count the real time a datagram spent between the two ends towards
    /// `propagation_ns`, so that an emulated wire of 1 µs on a loopback
    /// path of 10 µs adds nothing rather than 1 µs and a timer wake-up per
    /// hop: the emulated delay is max(real transit, `propagation_ns`).
    /// Each datagram then carries the sender's clock (a 12-byte sent-at
    /// extension, only while `propagation_ns` > 0), so both ends must read
    /// one clock (CLOCK_MONOTONIC on one machine, as message latencies
    /// already assume). A stamp in the future or over a second old is
    /// taken for another machine's clock and ignored (full delay).
    pub count_transit: bool,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            vcs: 1,
            buffer_depth: 8,
            bandwidth_flits_per_s: None,
            propagation_ns: 0,
            keepalive_interval_ns: 50_000_000,
            dead_after_ns: 500_000_000,
            mtu: wire::DEFAULT_MTU,
            credit_coalesce_ns: 2_000,
            pacing_quantum_ns: 0,
            retrain_ns: DEFAULT_RETRAIN_NS,
            count_transit: false,
        }
    }
}

/// The extension items of one datagram the link layer acts on (others
/// are skipped), found in one pass over its items.
#[derive(Clone, Copy, Debug, Default)]
struct Extensions {
    /// A link reset's generation and cause.
    link_reset: Option<(u16, u8)>,
    /// The sender's clock when it wrote the datagram.
    sent_at: Option<u64>,
    /// The sender waits for our header before it sends data.
    sync_request: bool,
    /// Emulated start of the datagram's first flit on the wire.
    departure: Option<u64>,
}

impl Extensions {
    fn of(items: &[Item]) -> Self {
        let mut ext = Extensions::default();
        for i in items {
            if let Item::Extension { code, body } = i {
                ext.note(*code, body);
            }
        }
        ext
    }

    /// Takes in one extension item (the first of each kind counts).
    fn note(&mut self, code: u8, body: &[u8]) {
        match code {
            wire::EXT_LINK_RESET => {
                self.link_reset = self.link_reset.or(wire::decode_link_reset(body))
            }
            wire::EXT_SENT_AT => self.sent_at = self.sent_at.or(wire::decode_sent_at(body)),
            wire::EXT_SYNC_REQUEST => self.sync_request = true,
            wire::EXT_DEPARTURE => self.departure = self.departure.or(wire::decode_departure(body)),
            _ => {}
        }
    }
}

/// A datagram handed from one link end to its peer in the same process
/// without its wire encoding: the items, header and extensions the peer
/// would decode from the bytes, the length the bytes would have, and the
/// error decoding them would report. [`Link::poll_transmit_decoded`]
/// writes one, [`Link::handle_decoded`] takes it in exactly as
/// [`Link::handle_datagram`] takes in the encoded bytes: the simulator
/// saves encoding, decoding and the CRC on every datagram that is not
/// damaged on the way. Reusable: its item vector keeps its capacity.
#[derive(Debug, Default)]
pub struct Decoded {
    header: Header,
    items: Vec<Item>,
    ext: Extensions,
    len: usize,
    malformed: Option<WireError>,
}

impl Decoded {
    /// Bytes the datagram would take on the wire.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true once written: a datagram always has its header.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops what it holds (its flits' payloads with them).
    pub fn clear(&mut self) {
        self.items.clear();
        self.ext = Extensions::default();
        self.len = 0;
        self.malformed = None;
    }
}

/// Where [`Link::poll_transmit`] writes a datagram: the wire encoding
/// ([`wire::FrameWriter`]) or the decoded items ([`Decoded`]).
trait DatagramOut {
    /// Bytes written so far, header included.
    fn len(&self) -> usize;
    /// Bytes `f` would take if pushed next.
    fn flit_len(&self, f: &Flit) -> usize;
    fn push_flit(&mut self, f: Flit);
    fn push_credit(&mut self, vc: u8, freed_total: u16);
    fn push_keepalive(&mut self);
    fn push_sync(&mut self, s: &SyncInfo);
    fn push_extension(&mut self, code: u8, body: &[u8]);
    /// Completes the datagram; returns its length in bytes.
    fn finish(self) -> usize;
}

impl DatagramOut for FrameWriter<'_> {
    fn len(&self) -> usize {
        FrameWriter::len(self)
    }
    fn flit_len(&self, f: &Flit) -> usize {
        FrameWriter::flit_len(self, f)
    }
    fn push_flit(&mut self, f: Flit) {
        FrameWriter::push_flit(self, &f);
    }
    fn push_credit(&mut self, vc: u8, freed_total: u16) {
        FrameWriter::push_credit(self, vc, freed_total);
    }
    fn push_keepalive(&mut self) {
        FrameWriter::push_keepalive(self);
    }
    fn push_sync(&mut self, s: &SyncInfo) {
        FrameWriter::push_sync(self, s);
    }
    fn push_extension(&mut self, code: u8, body: &[u8]) {
        FrameWriter::push_extension(self, code, body);
    }
    fn finish(self) -> usize {
        FrameWriter::finish(self)
    }
}

/// Writes a [`Decoded`]: each item as decoding its encoding yields it,
/// counting the encoding's length.
struct DecodedWriter<'a> {
    d: &'a mut Decoded,
    len: wire::FrameLen,
}

impl<'a> DecodedWriter<'a> {
    fn new(d: &'a mut Decoded, header: Header) -> Self {
        d.clear();
        d.header = header;
        DecodedWriter {
            d,
            len: wire::FrameLen::default(),
        }
    }

    fn push_item(&mut self, item: Item, len: usize) {
        self.len.add(len);
        self.d.items.push(item);
    }
}

impl DatagramOut for DecodedWriter<'_> {
    fn len(&self) -> usize {
        self.len.len()
    }
    fn flit_len(&self, f: &Flit) -> usize {
        self.len.flit_len(f)
    }
    fn push_flit(&mut self, mut f: Flit) {
        let (index, offset) = (self.d.items.len() as u16, self.len.len());
        self.len.add_flit(&f);
        if let Err(e) = wire::as_decoded(&mut f, index, offset) {
            self.d.malformed.get_or_insert(e);
        }
        self.d.items.push(Item::Flit(f));
    }
    fn push_credit(&mut self, vc: u8, freed_total: u16) {
        let vc = vc & 0x0F;
        self.push_item(Item::Credit { vc, freed_total }, CREDIT_ITEM_LEN);
    }
    fn push_keepalive(&mut self) {
        self.push_item(Item::Keepalive, KEEPALIVE_ITEM_LEN);
    }
    fn push_sync(&mut self, s: &SyncInfo) {
        let vcs = s.vcs.min(MAX_VCS as u8);
        let mut transmitted = [0; MAX_VCS];
        transmitted[..vcs as usize].copy_from_slice(&s.transmitted[..vcs as usize]);
        self.push_item(
            Item::Sync(SyncInfo { vcs, transmitted }),
            wire::sync_len(vcs),
        );
    }
    fn push_extension(&mut self, code: u8, body: &[u8]) {
        let body = &body[..body.len().min(u16::MAX as usize)];
        self.d.ext.note(code, body);
        // The link acts on extensions through `ext`; the item keeps its
        // place among the others (it is queued like them) without its body.
        self.push_item(
            Item::Extension {
                code,
                body: Bytes::new(),
            },
            4 + body.len(),
        );
    }
    fn finish(self) -> usize {
        self.d.len = self.len.len();
        self.d.len
    }
}

/// A sent-at stamp older than this is taken for another machine's clock
/// ([`LinkConfig::count_transit`]).
const MAX_TRUSTED_TRANSIT_NS: u64 = 1_000_000_000;

/// Default [`LinkConfig::retrain_ns`]: 10 ms, a few keepalive round trips
/// on loopback and the order of an InfiniBand link retrain.
pub const DEFAULT_RETRAIN_NS: u64 = 10_000_000;

/// A configuration value out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{field} = {value}: {reason}")]
    Invalid {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
}

fn invalid(field: &'static str, value: impl ToString, reason: &'static str) -> ConfigError {
    ConfigError::Invalid {
        field,
        value: value.to_string(),
        reason,
    }
}

impl LinkConfig {
    /// Bytes a datagram must keep free for a full sync record (credits for
    /// every VC, the sync item and a keepalive).
    pub fn control_reserve(&self) -> usize {
        let stamp = if self.count_transit && self.propagation_ns > 0 {
            wire::SENT_AT_ITEM_LEN
        } else {
            0
        };
        let departure = if self.bandwidth_flits_per_s.is_some() {
            wire::DEPARTURE_ITEM_LEN
        } else {
            0
        };
        self.vcs as usize * CREDIT_ITEM_LEN
            + wire::sync_len(self.vcs)
            + KEEPALIVE_ITEM_LEN
            + stamp
            + departure
    }

    /// One flit time in ns (rounded up), `None` on an unpaced link.
    pub fn flit_time_ns(&self) -> Option<u64> {
        self.bandwidth_flits_per_s
            .map(|rate| NS_PER_S.div_ceil(rate as u128) as u64)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.vcs == 0 || self.vcs as usize > MAX_VCS {
            return Err(invalid("link.vcs", self.vcs, "must be 1..=15"));
        }
        if self.buffer_depth == 0 || self.buffer_depth > MAX_BUFFER_DEPTH {
            return Err(invalid(
                "link.buffer_depth",
                self.buffer_depth,
                "must be 1..=16384",
            ));
        }
        if self.bandwidth_flits_per_s == Some(0) {
            return Err(invalid(
                "link.bandwidth_flits_per_s",
                0,
                "must be positive (or absent for unlimited)",
            ));
        }
        if self.keepalive_interval_ns == 0 {
            return Err(invalid("link.keepalive_interval_ns", 0, "must be positive"));
        }
        if self.dead_after_ns <= self.keepalive_interval_ns {
            return Err(invalid(
                "link.dead_after_ns",
                self.dead_after_ns,
                "must exceed keepalive_interval_ns",
            ));
        }
        if self.retrain_ns > 60_000_000_000 {
            return Err(invalid(
                "link.retrain_ns",
                self.retrain_ns,
                "must be at most 60 s (0 = no link error recovery)",
            ));
        }
        let min_mtu = HEADER_LEN + self.control_reserve() + 64;
        if self.mtu < min_mtu || self.mtu > 65_507 {
            return Err(invalid(
                "link.mtu",
                self.mtu,
                "must leave room for the header, a sync record and a 64-byte flit, and fit a UDP datagram (65507)",
            ));
        }
        Ok(())
    }
}

/// Why [`Link::send`] or [`Link::release`] refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("no credit on vc {vc}")]
    NoCredit { vc: u8 },
    #[error("vc {vc} out of range (link has {vcs})")]
    BadVc { vc: u8, vcs: u8 },
    #[error("link is administratively down")]
    AdminDown,
    #[error("malformed flit (msg {msg}, seq {seq}): {reason}")]
    MalformedFlit {
        msg: u64,
        seq: u32,
        reason: &'static str,
    },
    #[error("flit of {len} wire bytes does not fit the {mtu}-byte MTU")]
    FlitTooLarge { len: usize, mtu: usize },
    #[error("release of {n} slots on vc {vc}, but only {held} delivered flits are held")]
    ReleaseTooMany { vc: u8, n: u16, held: u16 },
}

/// State changes the owner should know about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// The peer spoke after silence (or for the first time).
    PeerUp,
    /// Nothing heard for `dead_after_ns`.
    PeerDown,
    /// The peer came back with a new epoch (it restarted): credit state was reset.
    PeerRestarted { old_epoch: u16, new_epoch: u16 },
    /// A link error: a datagram was lost or rejected here (`by_peer`
    /// false) or the peer detected one and sent a link reset (`by_peer`
    /// true, `cause` is the peer's). The link is down and retrains for
    /// `retrain_ns`; `PeerDown` follows if the peer was up.
    LinkError {
        cause: LinkErrorCause,
        by_peer: bool,
    },
}

/// What made a link error (the code travels in the link-reset item).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkErrorCause {
    /// A datagram failed its CRC check.
    Crc,
    /// A datagram failed to decode for another reason (truncated, bad
    /// version, bad item).
    Malformed,
    /// Datagrams missing from the link sequence.
    SeqGap,
    /// The peer was declared dead by its silence and spoke again as the
    /// same incarnation (a process stopped or starved of CPU, then run
    /// again): what each end believes of the other's buffers and worms is
    /// stale, so both reset before data flows again.
    PeerReturned,
    /// This end was disabled while the peer, not told, went on sending:
    /// the flits it dropped meanwhile are lost, which the peer would
    /// otherwise only write off from a sync record, with nothing reported.
    /// Re-enabled before its silence was taken for death, it resets the
    /// link, so the peer's owner fails the port and reports what crossed
    /// it (a switch administratively killed and restored within
    /// detection).
    DroppedWhileDisabled,
    /// The peer's reset named a cause this end does not know.
    Unspecified,
}

impl LinkErrorCause {
    pub fn name(self) -> &'static str {
        match self {
            LinkErrorCause::Crc => "crc",
            LinkErrorCause::Malformed => "malformed",
            LinkErrorCause::SeqGap => "seq_gap",
            LinkErrorCause::PeerReturned => "peer_returned",
            LinkErrorCause::DroppedWhileDisabled => "dropped_while_disabled",
            LinkErrorCause::Unspecified => "unspecified",
        }
    }

    /// Wire code in the link-reset item (docs/wire.md).
    pub fn code(self) -> u8 {
        match self {
            LinkErrorCause::Crc => 1,
            LinkErrorCause::Malformed => 2,
            LinkErrorCause::SeqGap => 3,
            LinkErrorCause::PeerReturned => 4,
            LinkErrorCause::DroppedWhileDisabled => 5,
            LinkErrorCause::Unspecified => 0,
        }
    }

    pub fn from_code(code: u8) -> Self {
        match code {
            1 => LinkErrorCause::Crc,
            2 => LinkErrorCause::Malformed,
            3 => LinkErrorCause::SeqGap,
            4 => LinkErrorCause::PeerReturned,
            5 => LinkErrorCause::DroppedWhileDisabled,
            _ => LinkErrorCause::Unspecified,
        }
    }
}

/// Counters of one link end. Per-VC arrays are indexed by VC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub tx_flits: [u64; MAX_VCS],
    pub rx_flits: [u64; MAX_VCS],
    pub tx_payload_bytes: u64,
    pub rx_payload_bytes: u64,
    pub tx_datagrams: u64,
    pub rx_datagrams: u64,
    /// Whole datagram bytes.
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Credits (buffer slots) returned to the peer / received from it.
    pub tx_credits: u64,
    pub rx_credits: u64,
    /// Time with the owner waiting to send on the VC but zero credits
    /// (closed intervals only; a stall in progress is added when it ends).
    pub credit_stall_ns: [u64; MAX_VCS],
    /// Datagrams missing from the sequence (each gap counted once, even if
    /// the datagram later shows up reordered).
    pub seq_gaps: u64,
    /// Datagrams that arrived after a later one.
    pub reordered: u64,
    /// Reordered datagrams older than the last sync: dropped (their flits
    /// were already written off as lost).
    pub stale_dropped: u64,
    pub crc_errors: u64,
    /// Datagrams that failed to decode for another reason.
    pub bad_datagrams: u64,
    /// Flits received on a VC this link does not have (dropped).
    pub rx_bad_vc: u64,
    /// Flits received with the VC's buffer full (peer broke flow control; dropped).
    pub rx_overflow: u64,
    /// Flits the peer transmitted that were lost on the link: written off
    /// by its sync records as never arrived, or dropped here while the
    /// link retrained.
    pub rx_lost_flits: u64,
    /// Datagrams dropped because the link is administratively down, or
    /// because the peer does not know our epoch yet.
    pub rx_dropped_down: u64,
    pub rx_dropped_unsynced: u64,
    pub peer_down_events: u64,
    /// Link errors this end detected (each starts a retrain).
    pub link_errors: u64,
    /// Link resets received from the peer (each starts a retrain here).
    pub peer_link_resets: u64,
    /// Link-reset items sent.
    pub tx_link_resets: u64,
    /// Retrain periods completed.
    pub retrains: u64,
    /// Datagrams received while retraining (dropped, like on a down link).
    pub rx_dropped_retraining: u64,
    /// From the last link error to the peer being heard again, in ns.
    pub last_recovery_ns: u64,
    pub max_recovery_ns: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct TxVc {
    consumed: u16,
    transmitted: u16,
    peer_freed: u16,
    /// False after a reset until the peer reports its freed counter.
    baseline: bool,
    stall_since: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default)]
struct RxVc {
    received: u16,
    freed: u16,
    /// Last `freed` value sent to the peer.
    advertised: u16,
    /// Received flits not yet handed out by `poll_received`.
    undelivered: u16,
}

/// What a peer's restart took with it on one VC, as the link saw it when
/// it heard the new incarnation ([`Link::peer_restart`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestartedVc {
    /// Flits transmitted to the old incarnation that it had not freed:
    /// in its buffer or on the wire when it died.
    pub unfreed: u16,
    /// Flits the old incarnation sent that were received here and not
    /// yet taken with `poll_received` (they are still handed out, ahead of
    /// anything from the new incarnation).
    pub undelivered: u16,
}

#[derive(Clone, Copy, Debug, Default)]
struct RxSeq {
    started: bool,
    next: u32,
    /// Datagrams older than the last sync are stale.
    floor: u32,
}

/// One end of a link.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    now: u64,
    epoch: u16,
    peer_epoch: Option<u16>,
    /// The peer's last header echoed our epoch.
    peer_synced: bool,
    admin_up: bool,
    alive: bool,
    last_heard: u64,
    /// The peer was declared dead by its silence: should it speak again
    /// as the same incarnation, both ends reset first
    /// ([`LinkErrorCause::PeerReturned`]).
    silenced: bool,
    /// While disabled, flits from the peer arrived and were dropped: if
    /// the peer did not know, the link resets once it is heard again
    /// ([`LinkErrorCause::DroppedWhileDisabled`]).
    dropped_while_disabled: bool,
    /// When the peer was last heard (and dropped) while disabled.
    heard_while_disabled: Option<u64>,
    /// Set when the link is brought back up administratively: if the peer
    /// stays silent for `dead_after_ns` from then, `PeerDown` is reported
    /// again (it may have died while we were not listening).
    probe_since: Option<u64>,
    tx_seq: u32,
    /// Next time a sync record is due; `None` = as soon as possible.
    next_sync_at: Option<u64>,
    tx: Vec<TxVc>,
    /// Flits accepted by `send`, with the time each was queued.
    tx_queue: VecDeque<(u64, Flit)>,
    rx: Vec<RxVc>,
    rx_seq: RxSeq,
    credit_dirty_since: Option<u64>,
    /// Received control items (credits, sync records, keepalives) waiting
    /// out the propagation delay. A sync record carries the number of
    /// flits received before it (`rx_flits_queued` then): it is applied
    /// only after they were, since its counters include them.
    in_flight: VecDeque<(u64, Item, u64)>,
    /// Received flits waiting for their release time (emulated start +
    /// flit time + propagation). Kept apart from the control items so
    /// that credits are not held behind a serialising flit (credits have
    /// their own channel, as in BookSim2).
    flits_in_flight: VecDeque<(u64, Flit)>,
    /// Flits ever put into / taken out of `flits_in_flight`.
    rx_flits_queued: u64,
    rx_flits_taken: u64,
    /// Released flits and their release time.
    ready: VecDeque<(u64, Flit)>,
    /// Paced links: when the emulated wire is free for the next flit to
    /// start, in ns × bandwidth (exact for any rate).
    wire_free: u128,
    events: VecDeque<LinkEvent>,
    stats: LinkStats,
    /// How late flits were read against their release time (paced links
    /// whose stamps are in a clock shared with the peer). Boxed: it is
    /// touched once per flit received, the rest of the link far more often.
    arrival_lateness: Box<LatenessHistogram>,
    scratch: wire::Frame,
    /// Retraining after a link error until this time: nothing but link
    /// resets is sent and everything received is dropped.
    retrain_until: Option<u64>,
    /// This end detected the error being retrained for: it repeats the
    /// link reset (generation, cause) at `next_reset_at`.
    reset_tx: Option<(u16, LinkErrorCause)>,
    next_reset_at: u64,
    /// Generation of the last link error this end detected.
    reset_gen: u16,
    /// Sender epoch and generation of the last link reset the peer sent
    /// that was acted on (its repeats are ignored; a restarted peer's
    /// generations start again under a new epoch).
    peer_reset_gen: Option<(u16, u16)>,
    /// When the link error being recovered from happened.
    error_at: Option<u64>,
    /// Link errors have kept the link down for `dead_after_ns` (reported
    /// with a second `PeerDown`); cleared when the link is up again.
    errors_persist: bool,
    /// This end's port number, written into every header so that the
    /// receiver tells parallel cables from one node apart (docs/wire.md).
    port: u16,
    /// Fault injection: this end returns no credits (see
    /// [`Link::set_credits_withheld`]).
    credits_withheld: bool,
    /// Per VC, what the peer's last restart took ([`Link::peer_restart`]).
    restarted: Vec<RestartedVc>,
}

/// How many of `flits` are on each VC (VCs beyond [`MAX_VCS`] are not
/// counted: no link has them).
fn per_vc<'a>(flits: impl Iterator<Item = &'a Flit>) -> [u16; MAX_VCS] {
    let mut n = [0u16; MAX_VCS];
    for f in flits {
        if let Some(c) = n.get_mut(f.vc as usize) {
            *c = c.wrapping_add(1);
        }
    }
    n
}

fn ahead(a: u16, b: u16) -> i16 {
    a.wrapping_sub(b) as i16
}

impl Link {
    /// A link end with epoch 1. Daemons should use [`Link::with_epoch`]
    /// with a value that changes across restarts (e.g. from the start time).
    pub fn new(cfg: LinkConfig) -> Result<Self, ConfigError> {
        Self::with_epoch(cfg, 1)
    }

    /// A link end with the given incarnation number (0 is mapped to 1:
    /// 0 means "unknown" on the wire).
    pub fn with_epoch(cfg: LinkConfig, epoch: u16) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let vcs = cfg.vcs as usize;
        // Both ends of a new fabric start empty: a new end presumes the
        // peer's buffer is, until the peer's first header resets it.
        let baseline_tx = TxVc {
            baseline: true,
            ..TxVc::default()
        };
        Ok(Link {
            now: 0,
            epoch: epoch.max(1),
            peer_epoch: None,
            peer_synced: false,
            admin_up: true,
            alive: false,
            silenced: false,
            dropped_while_disabled: false,
            heard_while_disabled: None,
            last_heard: 0,
            probe_since: None,
            tx_seq: 0,
            next_sync_at: None,
            tx: vec![baseline_tx; vcs],
            tx_queue: VecDeque::with_capacity(vcs * cfg.buffer_depth as usize),
            rx: vec![RxVc::default(); vcs],
            rx_seq: RxSeq::default(),
            credit_dirty_since: None,
            in_flight: VecDeque::new(),
            flits_in_flight: VecDeque::new(),
            rx_flits_queued: 0,
            rx_flits_taken: 0,
            ready: VecDeque::new(),
            wire_free: 0,
            events: VecDeque::new(),
            stats: LinkStats::default(),
            arrival_lateness: Box::default(),
            scratch: wire::Frame::default(),
            retrain_until: None,
            reset_tx: None,
            next_reset_at: 0,
            reset_gen: 0,
            peer_reset_gen: None,
            error_at: None,
            errors_persist: false,
            port: 0,
            restarted: vec![RestartedVc::default(); vcs],
            credits_withheld: false,
            cfg,
        })
    }

    /// While disabled: the owner cut a packet whose head the peer already
    /// has (its rest died here), so the peer waits for a tail that never
    /// comes. As for flits dropped while disabled, the link resets when a
    /// peer that was not told is heard again, and the peer closes the
    /// packet when it fails its port.
    pub fn note_packet_cut_while_disabled(&mut self) {
        if !self.admin_up {
            self.dropped_while_disabled = true;
            self.heard_while_disabled.get_or_insert(self.now);
        }
    }

    /// Fault injection, for testing stall diagnosis: while on, this end
    /// sends no credit items (not even in sync records), so the peer's
    /// credits run out and its traffic towards this end stops. Off again,
    /// the next datagram carries every credit owed meanwhile (the counters
    /// are cumulative), and the peer recovers.
    pub fn set_credits_withheld(&mut self, on: bool) {
        self.credits_withheld = on;
    }

    /// Whether this end withholds its credits ([`Link::set_credits_withheld`]).
    pub fn credits_withheld(&self) -> bool {
        self.credits_withheld
    }

    /// Sets the port number this end writes into every header (0 until set).
    pub fn set_port(&mut self, port: u16) {
        self.port = port;
    }

    /// The port number this end writes into every header.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    pub fn epoch(&self) -> u16 {
        self.epoch
    }

    /// Credits left on `vc` (0 for a VC out of range). None until the
    /// peer has reported its buffer: a peer heard for the first time may
    /// still hold flits of this end's previous incarnation (it did not
    /// restart; this end did), so its buffer is not presumed empty.
    pub fn credits(&self, vc: u8) -> u16 {
        match self.tx.get(vc as usize) {
            Some(t) if !t.baseline => 0,
            Some(t) => {
                let used = t.consumed.wrapping_sub(t.peer_freed);
                self.cfg.buffer_depth.saturating_sub(used)
            }
            None => 0,
        }
    }

    /// Credits of an up link not (yet) back from the peer, over every VC.
    /// In a drained fabric all are back, so what is left is a leak (lost
    /// flits whose buffer slots were never written off). 0 while down.
    pub fn credits_missing(&self) -> u64 {
        if !self.is_up() {
            return 0;
        }
        // Before the peer's buffer report only the flits queued since the
        // reset are out (`peer_freed` is 0 then).
        self.tx
            .iter()
            .map(|t| t.consumed.wrapping_sub(t.peer_freed) as u64)
            .sum()
    }

    /// Whether [`Link::send`] would accept a flit on `vc` now.
    pub fn can_send(&self, vc: u8) -> bool {
        self.admin_up && self.credits(vc) > 0
    }

    /// Whether the link can carry traffic: admin up and the peer alive.
    pub fn is_up(&self) -> bool {
        self.admin_up && self.alive
    }

    /// When a datagram from the peer last arrived (0: never).
    pub fn last_heard_ns(&self) -> u64 {
        self.last_heard
    }

    pub fn is_peer_alive(&self) -> bool {
        self.alive
    }

    pub fn is_admin_up(&self) -> bool {
        self.admin_up
    }

    /// Retraining after a link error (down until the retrain delay is over).
    pub fn is_retraining(&self) -> bool {
        self.retrain_until.is_some()
    }

    /// Link errors have kept the link down for at least `dead_after_ns`:
    /// not a transient any more (an owner may route around it, as it
    /// would around a silent peer). Cleared when the link is up again.
    pub fn link_errors_persist(&self) -> bool {
        self.errors_persist
    }

    /// Flits accepted by `send` and not yet transmitted.
    pub fn queued(&self) -> usize {
        self.tx_queue.len()
    }

    /// Flits received and not yet taken by `poll_received` (including those
    /// still propagating).
    pub fn pending_rx(&self) -> usize {
        self.ready.len() + self.flits_in_flight.len()
    }

    /// Records that the owner is waiting for credits on `vc` (none left,
    /// or fewer than a virtual cut-through packet needs), starting the
    /// credit-stall clock; the next credit arrival stops it. `send` does
    /// this itself when it refuses for lack of credit.
    pub fn note_stalled(&mut self, vc: u8) {
        let now = self.now;
        if let Some(t) = self.tx.get_mut(vc as usize) {
            t.stall_since.get_or_insert(now);
        }
    }

    fn check_flit(&self, f: &Flit) -> Result<(), LinkError> {
        let bad = |reason| LinkError::MalformedFlit {
            msg: f.msg,
            seq: f.seq,
            reason,
        };
        if f.kind.is_head() != f.head.is_some() {
            return Err(bad("head flits must carry a head, others must not"));
        }
        if let Some(h) = &f.head {
            if h.n_intermediates as usize > MAX_INTERMEDIATES {
                return Err(bad("too many intermediates"));
            }
            if h.leg > h.n_intermediates {
                return Err(bad("leg beyond the intermediates"));
            }
        }
        if f.payload.len() > u16::MAX as usize {
            return Err(bad("payload longer than 65535 bytes"));
        }
        // Cheap bound first: the largest a flit's item can be beyond its payload.
        let room = self.cfg.mtu - HEADER_LEN - self.cfg.control_reserve();
        if f.payload.len() + wire::MAX_FLIT_OVERHEAD <= room {
            return Ok(());
        }
        let len = wire::flit_wire_len(f);
        if len > room {
            return Err(LinkError::FlitTooLarge {
                len,
                mtu: self.cfg.mtu,
            });
        }
        Ok(())
    }

    /// Queues `flit` for transmission on `flit.vc`, consuming one credit;
    /// it was ready at the last time passed to any method.
    pub fn send(&mut self, flit: Flit) -> Result<(), LinkError> {
        self.send_at(self.now, flit)
    }

    /// [`Link::send`] of a flit ready at `now` (it starts on the emulated
    /// wire no earlier; `now` may be before the last time passed to the
    /// link, for an owner that backdates what it did late).
    pub fn send_at(&mut self, now: u64, flit: Flit) -> Result<(), LinkError> {
        self.advance(now);
        let vc = flit.vc;
        if vc >= self.cfg.vcs {
            return Err(LinkError::BadVc {
                vc,
                vcs: self.cfg.vcs,
            });
        }
        if !self.admin_up {
            return Err(LinkError::AdminDown);
        }
        if self.credits(vc) == 0 {
            self.note_stalled(vc);
            return Err(LinkError::NoCredit { vc });
        }
        self.check_flit(&flit)?;
        let t = &mut self.tx[vc as usize];
        t.consumed = t.consumed.wrapping_add(1);
        debug_assert!(t.consumed.wrapping_sub(t.peer_freed) <= self.cfg.buffer_depth);
        self.tx_queue.push_back((now, flit));
        Ok(())
    }

    /// Drops every queued, untransmitted flit and gives its credit back
    /// (for an owner tearing down traffic to a dead peer). Returns how many.
    pub fn discard_queued(&mut self) -> usize {
        let n = self.tx_queue.len();
        for (_, f) in self.tx_queue.drain(..) {
            let t = &mut self.tx[f.vc as usize];
            t.consumed = t.consumed.wrapping_sub(1);
        }
        n
    }

    /// Flits of `vc` accepted by `send` and not yet transmitted, and
    /// whether a head is among them.
    pub fn queued_on(&self, vc: u8) -> (usize, bool) {
        let mut n = 0;
        let mut head = false;
        for (_, f) in self.tx_queue.iter().filter(|(_, f)| f.vc == vc) {
            n += 1;
            head |= f.kind.is_head();
        }
        (n, head)
    }

    /// Drops the queued, untransmitted flits of `vc` ahead of its first
    /// queued head, giving their credits back: the rest of a packet whose
    /// head already left, for an owner whose peer restarted (the new
    /// incarnation would discard them as orphans). Returns how many.
    pub fn discard_queued_rest(&mut self, vc: u8) -> usize {
        let mut n = 0;
        let mut at_head = false;
        let tx = &mut self.tx;
        self.tx_queue.retain(|(_, f)| {
            if f.vc != vc || at_head {
                return true;
            }
            if f.kind.is_head() {
                at_head = true;
                return true;
            }
            let t = &mut tx[vc as usize];
            t.consumed = t.consumed.wrapping_sub(1);
            n += 1;
            false
        });
        n
    }

    /// Per VC, what the peer's last restart ([`LinkEvent::PeerRestarted`])
    /// took: read when the event is polled, before anything else touches
    /// the link.
    pub fn peer_restart(&self) -> &[RestartedVc] {
        &self.restarted
    }

    /// The owner freed `n` buffer slots of `vc` (flits it took with
    /// `poll_received`): the credits are owed to the peer.
    pub fn release(&mut self, vc: u8, n: u16) -> Result<(), LinkError> {
        let r = self.rx.get_mut(vc as usize).ok_or(LinkError::BadVc {
            vc,
            vcs: self.cfg.vcs,
        })?;
        let held = r.received.wrapping_sub(r.freed).wrapping_sub(r.undelivered);
        if n > held {
            return Err(LinkError::ReleaseTooMany { vc, n, held });
        }
        if n == 0 {
            return Ok(());
        }
        r.freed = r.freed.wrapping_add(n);
        self.credit_dirty_since.get_or_insert(self.now);
        Ok(())
    }

    /// Controller switch: when down, nothing is sent and everything
    /// received (including what is still propagating) is dropped.
    pub fn set_admin_up(&mut self, up: bool) {
        self.admin_up = up;
        if !up {
            // Flits still propagating are dropped as if they arrived now:
            // they may be the middle of a packet whose rest the peer goes
            // on sending, so they count as dropped while disabled (below).
            let flits_dropped = !self.flits_in_flight.is_empty();
            self.stats.rx_dropped_down += self.drop_in_flight();
            // While disabled we hear nothing, so we no longer know which
            // incarnation is at the other end: data waits, once re-enabled,
            // until the peer has shown it knows our epoch. Otherwise a peer
            // that restarted meanwhile (a switch killed and started again
            // while the controller held its neighbours' ports down) would
            // drop our first data datagrams as meant for its old self, and
            // we would forget them when we learn its new epoch. Once
            // enabled, our syncs ask the peer to answer at once.
            self.peer_synced = false;
            // A disabled link does not train; re-enabling starts afresh.
            self.retrain_until = None;
            self.reset_tx = None;
            self.dropped_while_disabled = flits_dropped;
            self.heard_while_disabled = flits_dropped.then_some(self.now);
        } else {
            self.next_sync_at = None;
            // What the peer sent while we were down was dropped on purpose,
            // not lost: sequence tracking restarts.
            self.rx_seq = RxSeq::default();
            // Its silence meanwhile was our deafness: no stale belief.
            self.silenced = false;
            if !self.alive {
                self.probe_since = Some(self.now);
            }
            // A peer taken for dead fell silent (or took this end's
            // silence for death): it saw the port go down.
            self.dropped_while_disabled &= self.alive;
        }
    }

    /// For an owner that skipped calls on this link while it had nothing
    /// due ([`Link::poll_timeout`] later than each) and was not otherwise
    /// changed: does what they would have done. `now` is the latest time
    /// they passed; `polled`, the latest skipped `poll_transmit` not yet
    /// caught up. Such calls only move the clock, and a `poll_transmit`
    /// finds the wire idle at its time when no flit could leave.
    pub fn catch_up(&mut self, now: u64, polled: Option<u64>) {
        self.advance(now);
        if let Some(t) = polled {
            let blocked = self.retrain_until.is_some() || !self.data_ok();
            if self.admin_up && (blocked || self.tx_queue.is_empty()) {
                self.idle_wire(t);
            }
        }
    }

    /// Credit-stall time of `vc` up to `now`: the stalls that ended, and
    /// one still running counted until `now` (not before it started).
    pub fn credit_stall_ns(&self, vc: u8, now: u64) -> u64 {
        let done = self
            .stats
            .credit_stall_ns
            .get(vc as usize)
            .copied()
            .unwrap_or(0);
        match self.tx.get(vc as usize).and_then(|t| t.stall_since) {
            Some(since) => done + now.saturating_sub(since),
            None => done,
        }
    }

    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// How late this end read the flits it received, against each flit's
    /// emulated release time (its departure stamp, its serialisation and
    /// the propagation delay). A flit read after that time is released at
    /// once, late by the difference: the reader was busy, asleep or waiting
    /// for a CPU, and the emulated wire was slower than configured. Only
    /// paced links whose stamps the ends can compare
    /// ([`LinkConfig::count_transit`]) record it.
    pub fn arrival_lateness(&self) -> &LatenessHistogram {
        &self.arrival_lateness
    }

    pub fn poll_event(&mut self) -> Option<LinkEvent> {
        self.events.pop_front()
    }

    /// Next flit whose propagation delay has elapsed (as of the last time
    /// passed to any method).
    pub fn poll_received(&mut self) -> Option<Flit> {
        let now = self.now;
        self.deliver_due(now);
        self.poll_received_at().map(|(_, f)| f)
    }

    /// [`Link::poll_received`] with the flit's release time (its emulated
    /// arrival: never later than now, earlier if the owner is late).
    pub fn poll_received_at(&mut self) -> Option<(u64, Flit)> {
        let now = self.now;
        self.deliver_due(now);
        let (at, f) = self.ready.pop_front()?;
        let r = &mut self.rx[f.vc as usize];
        r.undelivered -= 1;
        Some((at, f))
    }

    /// Peeks at the next deliverable flit without taking it.
    pub fn peek_received(&mut self) -> Option<&Flit> {
        let now = self.now;
        self.deliver_due(now);
        self.ready.front().map(|(_, f)| f)
    }

    /// Handles a datagram copied from a slice (one copy per datagram).
    pub fn handle_datagram_slice(&mut self, now: u64, data: &[u8]) -> Result<(), WireError> {
        self.handle_datagram(now, Bytes::copy_from_slice(data))
    }

    /// Validates and takes in one datagram from the peer. Flits become
    /// visible to `poll_received` after `propagation_ns`; credits and sync
    /// records take effect after the same delay.
    pub fn handle_datagram(&mut self, now: u64, data: Bytes) -> Result<(), WireError> {
        self.advance(now);
        self.end_retrain_if_due(now);
        let mut frame = std::mem::take(&mut self.scratch);
        let r = match wire::decode_bytes_into(&data, &mut frame) {
            Ok(()) => {
                let ext = Extensions::of(&frame.items);
                self.take_in(now, data.len(), frame.header, &mut frame.items, ext);
                Ok(())
            }
            Err(e) => Err(self.reject(now, e)),
        };
        frame.items.clear();
        self.scratch = frame;
        self.deliver_due(now);
        r
    }

    /// [`Link::handle_datagram`] of the datagram the peer wrote with
    /// [`Link::poll_transmit_decoded`]: the same effects as its encoding
    /// would have, without decoding it. Leaves `d` empty.
    pub fn handle_decoded(&mut self, now: u64, d: &mut Decoded) -> Result<(), WireError> {
        self.advance(now);
        self.end_retrain_if_due(now);
        let r = match d.malformed.take() {
            None => {
                self.take_in(now, d.len, d.header, &mut d.items, d.ext);
                Ok(())
            }
            Some(e) => Err(self.reject(now, e)),
        };
        d.clear();
        self.deliver_due(now);
        r
    }

    /// A datagram that does not decode: counted, and on a point-to-point
    /// link one the peer sent and we lost.
    fn reject(&mut self, now: u64, e: WireError) -> WireError {
        let cause = match e {
            WireError::BadCrc { .. } => {
                self.stats.crc_errors += 1;
                LinkErrorCause::Crc
            }
            _ => {
                self.stats.bad_datagrams += 1;
                LinkErrorCause::Malformed
            }
        };
        self.link_error(now, cause);
        e
    }

    /// Takes in a decoded datagram of `len` bytes.
    fn take_in(
        &mut self,
        now: u64,
        len: usize,
        header: Header,
        items: &mut Vec<Item>,
        ext: Extensions,
    ) {
        if !self.admin_up {
            self.stats.rx_dropped_down += 1;
            self.dropped_while_disabled |= items.iter().any(|i| matches!(i, Item::Flit(_)));
            self.heard_while_disabled = Some(now);
            return;
        }
        self.stats.rx_datagrams += 1;
        self.stats.rx_bytes += len as u64;
        // A datagram of the incarnation we are synced with counts its
        // flits in our counters: dropped below, they are written off here.
        let ours = self.peer_epoch == Some(header.epoch) && header.peer_epoch == self.epoch;
        // With link error recovery off, a link reset is an unknown
        // extension like any other (skipped).
        let reset = ext.link_reset.filter(|_| self.cfg.retrain_ns > 0);
        if self.retrain_until.is_some() {
            // Everything is dropped while retraining; a reset from the peer
            // (both ends detected an error) is noted so that its repeats,
            // which may arrive after this end is back, are not new errors.
            if let Some((gen, _)) = reset {
                self.peer_reset_gen = Some((header.epoch, gen));
            }
            self.stats.rx_dropped_retraining += 1;
            self.write_off_dropped(ours, items);
            return;
        }
        if let Some((gen, code)) = reset {
            let id = (header.epoch, gen);
            if self.peer_reset_gen != Some(id) {
                self.peer_reset_gen = Some(id);
                self.stats.peer_link_resets += 1;
                self.enter_retrain(now, LinkErrorCause::from_code(code), true);
            } else {
                self.stats.rx_dropped_retraining += 1;
            }
            self.write_off_dropped(ours, items);
            return;
        }
        // A peer that believes nothing happened: the same incarnation, not
        // asking for a sync (one whose port was down asks, having gone
        // through the port's death itself). Its datagram, and every belief
        // about its buffers or what it sent, is stale when it was declared
        // dead by its silence (stopped, then run again), or when this end
        // dropped its flits while disabled and it talked all along (heard
        // within two keepalive intervals: it was never disabled itself,
        // and believes them delivered). A restarted peer has a new epoch
        // and resets both ends anyway.
        let unaware =
            self.peer_epoch == Some(header.epoch) && !ext.sync_request && self.cfg.retrain_ns > 0;
        let stale = if self.silenced && unaware {
            Some(LinkErrorCause::PeerReturned)
        } else if std::mem::take(&mut self.dropped_while_disabled)
            && unaware
            && self.heard_while_disabled.take().is_some_and(|at| {
                now.saturating_sub(at)
                    <= 2 * self.cfg.keepalive_interval_ns + self.cfg.propagation_ns
            })
        {
            Some(LinkErrorCause::DroppedWhileDisabled)
        } else {
            None
        };
        if let Some(cause) = stale {
            self.silenced = false;
            self.link_error(now, cause);
            self.stats.rx_dropped_retraining += 1;
            self.write_off_dropped(ours, items);
            return;
        }
        self.silenced = false;
        self.last_heard = now;
        self.probe_since = None;
        if !self.alive {
            // Answer at once so the peer resynchronises without waiting a
            // keepalive interval.
            self.alive = true;
            self.next_sync_at = None;
            self.errors_persist = false;
            if let Some(at) = self.error_at.take() {
                let d = now.saturating_sub(at);
                self.stats.last_recovery_ns = d;
                self.stats.max_recovery_ns = self.stats.max_recovery_ns.max(d);
            }
            self.events.push_back(LinkEvent::PeerUp);
        }
        if ext.sync_request {
            // The peer waits for our header before it sends data.
            self.next_sync_at = None;
        }
        let h = header;
        if self.peer_epoch != Some(h.epoch) {
            if let Some(old) = self.peer_epoch {
                self.events.push_back(LinkEvent::PeerRestarted {
                    old_epoch: old,
                    new_epoch: h.epoch,
                });
            }
            self.reset_against(h.epoch);
        }
        self.peer_synced = h.peer_epoch == self.epoch;
        if !self.peer_synced {
            // Its counters are not about us yet: only learn its epoch.
            self.stats.rx_dropped_unsynced += 1;
            self.next_sync_at = None;
            return;
        }
        let s = &mut self.rx_seq;
        if !s.started {
            *s = RxSeq {
                started: true,
                next: h.seq.wrapping_add(1),
                floor: h.seq,
            };
        } else {
            let d = h.seq.wrapping_sub(s.next) as i32;
            if d > 0 && self.cfg.retrain_ns > 0 {
                // Datagrams were lost: their flits may include a tail that
                // would never come. The link goes down instead of limping on.
                self.stats.seq_gaps += d as u64;
                self.link_error(now, LinkErrorCause::SeqGap);
                self.write_off_dropped(ours, items);
                return;
            } else if d >= 0 {
                self.stats.seq_gaps += d as u64;
                s.next = h.seq.wrapping_add(1);
            } else if (h.seq.wrapping_sub(s.floor) as i32) < 0 {
                self.stats.stale_dropped += 1;
                return;
            } else {
                self.stats.reordered += 1;
            }
        }
        let has_sync = items.iter().any(|i| matches!(i, Item::Sync(_)));
        if has_sync && (h.seq.wrapping_sub(self.rx_seq.floor) as i32) > 0 {
            self.rx_seq.floor = h.seq;
        }
        let due = self.propagation_due(now, ext.sent_at);
        let mut flits = 0u64;
        for item in items.drain(..) {
            match item {
                Item::Flit(f) => {
                    let at = self.flit_due(now, due, ext.departure, flits);
                    flits += 1;
                    self.flits_in_flight.push_back((at, f));
                    self.rx_flits_queued += 1;
                }
                item => self.in_flight.push_back((due, item, self.rx_flits_queued)),
            }
        }
    }

    /// When flit number `i` of a datagram received at `now` is released:
    /// on a paced link whose datagram names its first flit's emulated
    /// start `departure`, one flit time after that flit's own start (the
    /// `i`-th after the first, back to back) plus the propagation delay.
    /// With `count_transit` the stamp is read in the ends' shared clock
    /// (never before `now`; a stamp over a second away from `now` is
    /// another machine's clock); otherwise the datagram is taken to have
    /// left when its first flit started (as in the simulator), and the
    /// flits follow its arrival at the wire's pace. Without a stamp or a
    /// rate: `due`, the control items' time. A trusted stamp's lateness
    /// (`now` past the release time) goes to [`Link::arrival_lateness`].
    fn flit_due(&mut self, now: u64, due: u64, departure: Option<u64>, i: u64) -> u64 {
        let (Some(rate), Some(start)) = (self.cfg.bandwidth_flits_per_s, departure) else {
            return due;
        };
        let serialised = ((i as u128 + 1) * NS_PER_S).div_ceil(rate as u128) as u64;
        let trusted = self.cfg.count_transit && now.abs_diff(start) <= MAX_TRUSTED_TRANSIT_NS;
        if trusted {
            let release = start
                .saturating_add(serialised)
                .saturating_add(self.cfg.propagation_ns);
            self.arrival_lateness.record(now.saturating_sub(release));
            release.max(now)
        } else {
            now.saturating_add(self.cfg.propagation_ns)
                .saturating_add(serialised)
        }
    }

    /// Drops everything received and still propagating; returns how many
    /// items that was.
    fn drop_in_flight(&mut self) -> u64 {
        let n = self.in_flight.len() + self.flits_in_flight.len();
        self.in_flight.clear();
        self.flits_in_flight.clear();
        self.rx_flits_taken = self.rx_flits_queued;
        n as u64
    }

    /// When items received at `now` become visible: after the propagation
    /// delay, less the transit time the sender's stamp `sent_at` shows when
    /// [`LinkConfig::count_transit`] is on (never before `now`, never later
    /// than without the stamp).
    fn propagation_due(&self, now: u64, sent_at: Option<u64>) -> u64 {
        let full = now.saturating_add(self.cfg.propagation_ns);
        if !self.cfg.count_transit || self.cfg.propagation_ns == 0 {
            return full;
        }
        match sent_at {
            Some(at) if at <= now && now - at <= MAX_TRUSTED_TRANSIT_NS => {
                at.saturating_add(self.cfg.propagation_ns).max(now)
            }
            _ => full,
        }
    }

    /// The peer is a new incarnation `epoch`: restart every counter against
    /// it. Flits we still hold keep their slots (`freed` starts behind
    /// `received` by that much); flits we have queued keep their credits.
    fn reset_against(&mut self, epoch: u16) {
        if self.peer_epoch.is_some() {
            for ((r, t), rx) in self.restarted.iter_mut().zip(&self.tx).zip(&self.rx) {
                *r = RestartedVc {
                    unfreed: t.transmitted.wrapping_sub(t.peer_freed),
                    undelivered: rx.undelivered,
                };
            }
        }
        self.peer_epoch = Some(epoch);
        self.peer_synced = false;
        self.rx_seq = RxSeq::default();
        self.stats.rx_dropped_down += self.drop_in_flight();
        for r in &mut self.rx {
            let held = r.received.wrapping_sub(r.freed);
            r.received = 0;
            r.freed = 0u16.wrapping_sub(held);
            r.advertised = r.freed;
        }
        for t in &mut self.tx {
            t.transmitted = 0;
            t.peer_freed = 0;
            t.consumed = 0;
            t.baseline = false;
        }
        for (_, f) in &self.tx_queue {
            let t = &mut self.tx[f.vc as usize];
            t.consumed = t.consumed.wrapping_add(1);
        }
        self.next_sync_at = None;
    }

    /// Applies every received item whose propagation delay has elapsed,
    /// in time order; a sync record waits for the flits received before it.
    fn deliver_due(&mut self, now: u64) {
        loop {
            let flit_at = self.flits_in_flight.front().map(|(at, _)| *at);
            let ctl = self.in_flight.front().map(|(at, item, before)| {
                let waits = matches!(item, Item::Sync(_)) && *before > self.rx_flits_taken;
                (*at, waits)
            });
            let flit_due = flit_at.filter(|&at| at <= now);
            match ctl {
                Some((at, false)) if at <= now && flit_due.is_none_or(|f| at <= f) => {
                    let Some((_, item, _)) = self.in_flight.pop_front() else {
                        break;
                    };
                    match item {
                        Item::Credit { vc, freed_total } => self.apply_credit(now, vc, freed_total),
                        Item::Sync(s) => self.apply_sync(&s),
                        // Link resets are acted on when the datagram
                        // arrives; flits are not in this queue.
                        Item::Flit(_) | Item::Keepalive | Item::Extension { .. } => {}
                    }
                }
                _ => {
                    let Some(at) = flit_due else {
                        break;
                    };
                    let Some((_, f)) = self.flits_in_flight.pop_front() else {
                        break;
                    };
                    self.rx_flits_taken += 1;
                    self.accept_flit(at, f);
                }
            }
        }
    }

    fn accept_flit(&mut self, at: u64, f: Flit) {
        let vc = f.vc as usize;
        let Some(r) = self.rx.get_mut(vc) else {
            self.stats.rx_bad_vc += 1;
            return;
        };
        r.received = r.received.wrapping_add(1);
        if r.received.wrapping_sub(r.freed) > self.cfg.buffer_depth {
            // The peer over-committed: drop, and free the slot at once so
            // the counters stay in step.
            r.freed = r.freed.wrapping_add(1);
            self.stats.rx_overflow += 1;
            self.credit_dirty_since.get_or_insert(self.now);
            return;
        }
        r.undelivered += 1;
        self.stats.rx_flits[vc] += 1;
        self.stats.rx_payload_bytes += f.payload.len() as u64;
        self.ready.push_back((at, f));
    }

    fn apply_credit(&mut self, now: u64, vc: u8, freed_total: u16) {
        let depth = self.cfg.buffer_depth;
        let Some(t) = self.tx.get_mut(vc as usize) else {
            return;
        };
        let outstanding = t.consumed.wrapping_sub(freed_total);
        if !t.baseline {
            // First report after a reset: absolute.
            t.baseline = true;
            t.peer_freed = freed_total;
        } else {
            let d = ahead(freed_total, t.peer_freed);
            if d <= 0 || (outstanding as i16) < 0 {
                return; // old (reordered) or impossible
            }
            t.peer_freed = freed_total;
            self.stats.rx_credits += d as u64;
        }
        if t.consumed.wrapping_sub(t.peer_freed) < depth {
            if let Some(since) = t.stall_since.take() {
                self.stats.credit_stall_ns[vc as usize] += now.saturating_sub(since);
            }
        }
    }

    /// The flits of a datagram dropped while the link retrains (or as it
    /// starts to) are lost on the link. They are written off at once,
    /// as the peer's next sync would write them off: a link killed before
    /// that sync would otherwise leave them counted nowhere. `ours`: the
    /// datagram's counters are about this incarnation of each end.
    fn write_off_dropped(&mut self, ours: bool, items: &[Item]) {
        if ours {
            self.write_off(&per_vc(items.iter().filter_map(|i| match i {
                Item::Flit(f) => Some(f),
                _ => None,
            })));
        }
    }

    /// Writes off `lost[vc]` flits on each VC: counted lost on the link,
    /// and taken as received with their slots freed, so that the peer's
    /// credits come back and a later sync does not count them again.
    fn write_off(&mut self, lost: &[u16; MAX_VCS]) {
        for (r, &n) in self.rx.iter_mut().zip(lost) {
            if n > 0 {
                r.received = r.received.wrapping_add(n);
                r.freed = r.freed.wrapping_add(n);
                self.stats.rx_lost_flits += n as u64;
                self.credit_dirty_since.get_or_insert(self.now);
            }
        }
    }

    /// What the peer transmitted and this end never received is lost.
    fn apply_sync(&mut self, s: &SyncInfo) {
        let n = (s.vcs as usize).min(self.rx.len());
        let mut lost = [0u16; MAX_VCS];
        for (vc, r) in self.rx.iter().enumerate().take(n) {
            lost[vc] = ahead(s.transmitted[vc], r.received).max(0) as u16;
        }
        self.write_off(&lost);
    }

    fn advance(&mut self, now: u64) {
        if now > self.now {
            self.now = now;
        }
    }

    /// Timer processing: delivers propagated items and declares the peer
    /// down after `dead_after_ns` of silence.
    pub fn handle_timeout(&mut self, now: u64) {
        self.advance(now);
        self.end_retrain_if_due(now);
        self.deliver_due(now);
        if self.alive && now.saturating_sub(self.last_heard) >= self.cfg.dead_after_ns {
            self.alive = false;
            self.silenced = true;
            self.stats.peer_down_events += 1;
            self.events.push_back(LinkEvent::PeerDown);
        }
        if let Some(since) = self.probe_since {
            if now.saturating_sub(since) >= self.cfg.dead_after_ns {
                self.probe_since = None;
                self.stats.peer_down_events += 1;
                self.events.push_back(LinkEvent::PeerDown);
            }
        }
    }

    /// A datagram was lost or rejected: unless the link is disabled,
    /// already retraining or link error recovery is off, it goes down and
    /// retrains, and the peer is told with link-reset items.
    fn link_error(&mut self, now: u64, cause: LinkErrorCause) {
        if !self.admin_up || self.retrain_until.is_some() || self.cfg.retrain_ns == 0 {
            return;
        }
        self.stats.link_errors += 1;
        self.reset_gen = self.reset_gen.wrapping_add(1);
        self.enter_retrain(now, cause, false);
        self.reset_tx = Some((self.reset_gen, cause));
        self.next_reset_at = now;
    }

    /// Takes the link down for `retrain_ns`, as a dead peer would: what is
    /// still propagating is dropped (the peer's next sync writes its flits
    /// off), and the owner sees `LinkError` then `PeerDown`.
    fn enter_retrain(&mut self, now: u64, cause: LinkErrorCause, by_peer: bool) {
        self.retrain_until = Some(now.saturating_add(self.cfg.retrain_ns));
        self.reset_tx = None;
        self.probe_since = None;
        let dropped = per_vc(self.flits_in_flight.iter().map(|(_, f)| f));
        self.stats.rx_dropped_retraining += self.drop_in_flight();
        self.write_off(&dropped);
        let first = *self.error_at.get_or_insert(now);
        self.events
            .push_back(LinkEvent::LinkError { cause, by_peer });
        if self.alive {
            self.alive = false;
            self.stats.peer_down_events += 1;
            self.events.push_back(LinkEvent::PeerDown);
        } else if !self.errors_persist && now.saturating_sub(first) >= self.cfg.dead_after_ns {
            // Errors have kept the link down as long as silence would
            // take to declare the peer dead: a second `PeerDown`, which
            // `link_errors_persist` tells apart from the first.
            self.errors_persist = true;
            self.stats.peer_down_events += 1;
            self.events.push_back(LinkEvent::PeerDown);
        }
    }

    /// Ends a retrain whose delay is over: sequence tracking restarts (what
    /// was dropped meanwhile is not a new error) and a sync goes out at once;
    /// the link is up when the peer is heard (`PeerUp`), and reported down
    /// again if it stays silent for `dead_after_ns`.
    fn end_retrain_if_due(&mut self, now: u64) {
        let Some(until) = self.retrain_until else {
            return;
        };
        if now < until {
            return;
        }
        self.retrain_until = None;
        self.reset_tx = None;
        self.stats.retrains += 1;
        self.rx_seq = RxSeq::default();
        self.next_sync_at = None;
        self.probe_since = Some(now);
    }

    /// Data may flow once both ends know each other's epoch and the peer
    /// has reported its buffer state.
    fn data_ok(&self) -> bool {
        self.admin_up && self.alive && self.peer_synced && self.tx.iter().all(|t| t.baseline)
    }

    /// How far ahead of `now` a flit may be written (see
    /// [`LinkConfig::pacing_quantum_ns`]).
    fn send_ahead_ns(&self) -> u64 {
        if self.cfg.count_transit {
            self.cfg.pacing_quantum_ns
        } else {
            0
        }
    }

    /// Emulated start of the front flit on a paced link (ns × rate): when
    /// the wire is free, and not before it was queued.
    fn front_start(&self, rate: u64) -> Option<u128> {
        let (ready, _) = self.tx_queue.front()?;
        Some(self.wire_free.max(*ready as u128 * rate as u128))
    }

    fn credits_urgent(&self, now: u64) -> bool {
        let Some(since) = self.credit_dirty_since else {
            return false;
        };
        if now.saturating_sub(since) >= self.cfg.credit_coalesce_ns {
            return true;
        }
        let half = self.cfg.buffer_depth.div_ceil(2);
        self.rx
            .iter()
            .any(|r| r.freed.wrapping_sub(r.advertised) >= half)
    }

    fn sync_due(&self, now: u64) -> bool {
        self.next_sync_at.is_none_or(|t| now >= t)
    }

    /// Writes the next datagram into `out` (cleared first) and returns true,
    /// or returns false when nothing is due. Call until it returns false.
    ///
    /// Received items are not applied here (only in `handle_datagram`,
    /// `handle_timeout` and `poll_received`), so an owner that re-examines
    /// credits after those calls never misses a change.
    pub fn poll_transmit(&mut self, now: u64, out: &mut Vec<u8>) -> bool {
        out.clear();
        self.transmit(now, |h| FrameWriter::new(out, h))
    }

    /// [`Link::poll_transmit`] for a peer in the same process: the next
    /// datagram into `out` as its peer would decode it ([`Decoded`], for
    /// [`Link::handle_decoded`]). Everything else is as with the encoding.
    pub fn poll_transmit_decoded(&mut self, now: u64, out: &mut Decoded) -> bool {
        out.clear();
        self.transmit(now, |h| DecodedWriter::new(out, h))
    }

    /// [`Link::poll_transmit`] into the writer `start` makes for a header.
    fn transmit<W: DatagramOut>(&mut self, now: u64, start: impl FnOnce(Header) -> W) -> bool {
        self.advance(now);
        self.end_retrain_if_due(now);
        if !self.admin_up {
            return false;
        }
        if self.retrain_until.is_some() {
            self.idle_wire(now);
            return self.poll_link_reset(now, start);
        }
        let data_ok = self.data_ok() && !self.tx_queue.is_empty();
        if !data_ok {
            // A flit that could not leave starts no earlier than now.
            self.idle_wire(now);
        }
        let rate = self.cfg.bandwidth_flits_per_s;
        // The latest emulated start a flit may have to go into this datagram.
        let horizon = rate.map(|r| (now.saturating_add(self.send_ahead_ns())) as u128 * r as u128);
        let front = match rate {
            Some(r) if data_ok => self.front_start(r),
            _ => None,
        };
        // A datagram starts for data once the front flit's start is
        // reached; flits starting up to the horizon ride along on it (and
        // on any datagram that goes anyway).
        let first_start = front.filter(|&s| horizon.is_some_and(|h| s <= h));
        let data_starts = data_ok
            && match (rate, front) {
                (None, _) => true,
                (Some(r), Some(s)) => s <= now as u128 * r as u128,
                (Some(_), None) => false,
            };
        let data_rides = data_starts || (data_ok && first_start.is_some());
        let sync = self.sync_due(now);
        let owed = !self.credits_withheld && self.rx.iter().any(|r| r.freed != r.advertised);
        if !owed {
            self.credit_dirty_since = None;
        }
        let credits = owed && (data_starts || self.credits_urgent(now));
        if !data_starts && !sync && !credits {
            return false;
        }
        let mut w = start(self.next_header());
        if self.cfg.count_transit && self.cfg.propagation_ns > 0 {
            w.push_extension(wire::EXT_SENT_AT, &now.to_le_bytes());
        }
        if let (Some(r), Some(start), true) = (rate, first_start, data_rides) {
            // The first flit's emulated start, in ns; the others follow
            // back to back (docs/wire.md, "Serialisation").
            let ns = start.div_ceil(r as u128) as u64;
            w.push_extension(wire::EXT_DEPARTURE, &ns.to_le_bytes());
        }
        // Owed credits first (all VCs in a sync record), then flits, then
        // the sync record last so its counters include this datagram's flits.
        let mut credit_items = 0;
        for (vc, r) in self.rx.iter_mut().enumerate() {
            if self.credits_withheld {
                break;
            }
            if sync || (credits && r.freed != r.advertised) {
                let owed = r.freed.wrapping_sub(r.advertised);
                if (owed as i16) > 0 {
                    self.stats.tx_credits += owed as u64;
                }
                w.push_credit(vc as u8, r.freed);
                r.advertised = r.freed;
                credit_items += 1;
            }
        }
        if credit_items > 0 || sync {
            self.credit_dirty_since = None;
        }
        let reserve = if sync {
            wire::sync_len(self.cfg.vcs) + KEEPALIVE_ITEM_LEN
        } else {
            0
        };
        let mut sent = 0usize;
        while let Some((ready, f)) = self.tx_queue.front().filter(|_| data_rides) {
            if let (Some(r), Some(h)) = (rate, horizon) {
                // Back to back only: a flit queued after the wire went idle
                // starts a datagram of its own.
                let ready = *ready as u128 * r as u128;
                if (sent > 0 && ready > self.wire_free) || self.wire_free.max(ready) > h {
                    break;
                }
            }
            if w.len() + w.flit_len(f) + reserve > self.cfg.mtu {
                break;
            }
            let Some((ready, f)) = self.tx_queue.pop_front() else {
                break;
            };
            if let Some(r) = rate {
                self.wire_free = self.wire_free.max(ready as u128 * r as u128) + NS_PER_S;
            }
            let vc = f.vc as usize;
            self.stats.tx_payload_bytes += f.payload.len() as u64;
            w.push_flit(f);
            self.tx[vc].transmitted = self.tx[vc].transmitted.wrapping_add(1);
            self.stats.tx_flits[vc] += 1;
            sent += 1;
        }
        if sync && !self.peer_synced {
            // Until the peer's header shows it knows us, ask it to answer
            // (see [`Link::set_admin_up`]).
            w.push_extension(wire::EXT_SYNC_REQUEST, &[]);
        }
        if sync {
            let mut s = SyncInfo {
                vcs: self.cfg.vcs,
                transmitted: [0; MAX_VCS],
            };
            for (d, t) in s.transmitted.iter_mut().zip(&self.tx) {
                *d = t.transmitted;
            }
            w.push_sync(&s);
            if sent == 0 {
                w.push_keepalive();
            }
            self.next_sync_at = Some(now.saturating_add(self.cfg.keepalive_interval_ns));
        }
        self.count_sent(w.finish());
        true
    }

    /// The emulated wire carries nothing before `now`: flits that could
    /// not leave (link down, not synchronised) start no earlier.
    fn idle_wire(&mut self, now: u64) {
        if let Some(rate) = self.cfg.bandwidth_flits_per_s {
            self.wire_free = self.wire_free.max(now as u128 * rate as u128);
        }
    }

    /// A datagram of `len` bytes was written: the next one takes the next
    /// sequence number.
    fn count_sent(&mut self, len: usize) {
        self.tx_seq = self.tx_seq.wrapping_add(1);
        self.stats.tx_datagrams += 1;
        self.stats.tx_bytes += len as u64;
    }

    /// The header of the next datagram this end sends.
    fn next_header(&self) -> Header {
        Header {
            epoch: self.epoch,
            peer_epoch: self.peer_epoch.unwrap_or(0),
            seq: self.tx_seq,
            port: self.port,
        }
    }

    /// While retraining after an error detected here: the link-reset
    /// datagram, sent at once and then four times per retrain delay.
    fn poll_link_reset<W: DatagramOut>(
        &mut self,
        now: u64,
        start: impl FnOnce(Header) -> W,
    ) -> bool {
        let Some((gen, cause)) = self.reset_tx else {
            return false;
        };
        if now < self.next_reset_at {
            return false;
        }
        let mut w = start(self.next_header());
        w.push_extension(
            wire::EXT_LINK_RESET,
            &wire::encode_link_reset(gen, cause.code()),
        );
        self.count_sent(w.finish());
        self.stats.tx_link_resets += 1;
        self.next_reset_at = now.saturating_add((self.cfg.retrain_ns / 4).max(1));
        true
    }

    /// Earliest time at which `handle_timeout` or `poll_transmit` has work.
    pub fn poll_timeout(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        let mut at = |x: u64| t = Some(t.map_or(x, |t| t.min(x)));
        if let Some(until) = self.retrain_until {
            at(until);
            if self.admin_up && self.reset_tx.is_some() {
                at(self.next_reset_at);
            }
            return t;
        }
        if let Some((due, item, before)) = self.in_flight.front() {
            // A sync record waiting for flits goes with the last of them.
            if !(matches!(item, Item::Sync(_)) && *before > self.rx_flits_taken) {
                at(*due);
            }
        }
        if let Some((due, _)) = self.flits_in_flight.front() {
            at(*due);
        }
        if self.alive {
            at(self.last_heard.saturating_add(self.cfg.dead_after_ns));
        }
        if let Some(since) = self.probe_since {
            at(since.saturating_add(self.cfg.dead_after_ns));
        }
        if self.admin_up {
            at(self.next_sync_at.unwrap_or(self.now));
            if let Some(since) = self.credit_dirty_since {
                at(since.saturating_add(self.cfg.credit_coalesce_ns));
            }
            if self.data_ok() && !self.tx_queue.is_empty() {
                match self.cfg.bandwidth_flits_per_s {
                    None => at(self.now),
                    Some(rate) => {
                        let start = self.front_start(rate).unwrap_or(0);
                        at((start.div_ceil(rate as u128) as u64).max(self.now));
                    }
                }
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flit::{FlitKind, Head};
    use proptest::prelude::*;

    fn cfg() -> LinkConfig {
        LinkConfig {
            vcs: 2,
            buffer_depth: 4,
            keepalive_interval_ns: 1_000_000,
            dead_after_ns: 5_000_000,
            credit_coalesce_ns: 0,
            retrain_ns: RETRAIN,
            ..LinkConfig::default()
        }
    }

    const RETRAIN: u64 = 2_000_000;

    /// Links that only count losses (no link error recovery).
    fn lossy_cfg() -> LinkConfig {
        LinkConfig {
            retrain_ns: 0,
            ..cfg()
        }
    }

    fn flit(vc: u8, seq: u32) -> Flit {
        Flit {
            kind: FlitKind::HeadTail,
            vc,
            flags: 0,
            msg: 1,
            packet: seq,
            seq,
            head: Some(Head {
                dst: 1,
                msg_flits: 1,
                ..Head::default()
            }),
            payload: Bytes::from_static(&[7; 16]),
        }
    }

    /// Moves every due datagram both ways until both ends are quiet,
    /// passing each through `filter` (which may drop or alter it).
    fn exchange(
        now: u64,
        a: &mut Link,
        b: &mut Link,
        filter: &mut dyn FnMut(bool, &mut Vec<u8>) -> bool,
    ) -> usize {
        let mut buf = Vec::new();
        let mut moved = 0;
        for _ in 0..1000 {
            let mut any = false;
            a.handle_timeout(now);
            b.handle_timeout(now);
            while a.poll_transmit(now, &mut buf) {
                any = true;
                moved += 1;
                if filter(true, &mut buf) {
                    let _ = b.handle_datagram_slice(now, &buf);
                }
            }
            while b.poll_transmit(now, &mut buf) {
                any = true;
                moved += 1;
                if filter(false, &mut buf) {
                    let _ = a.handle_datagram_slice(now, &buf);
                }
            }
            if !any {
                return moved;
            }
        }
        panic!("links never went quiet at {now}");
    }

    fn pass(_: bool, _: &mut Vec<u8>) -> bool {
        true
    }

    fn connected(c: LinkConfig) -> (Link, Link) {
        let mut a = Link::with_epoch(c.clone(), 10).unwrap();
        let mut b = Link::with_epoch(c.clone(), 20).unwrap();
        exchange(0, &mut a, &mut b, &mut pass);
        // The buffer reports (the credit baselines) are in after the
        // propagation delay; until then neither end has a credit.
        a.handle_timeout(c.propagation_ns);
        b.handle_timeout(c.propagation_ns);
        assert!(a.is_peer_alive() && b.is_peer_alive());
        assert_eq!(a.poll_event(), Some(LinkEvent::PeerUp));
        assert_eq!(b.poll_event(), Some(LinkEvent::PeerUp));
        (a, b)
    }

    fn drain(l: &mut Link) -> Vec<Flit> {
        std::iter::from_fn(|| l.poll_received()).collect()
    }

    /// One round of a saturating sender at `now`: `a` queues flits while
    /// it has credits (numbered from `*seq` on), the links exchange, `b`
    /// takes and frees what arrived. Returns the flits delivered.
    fn saturate_round(now: u64, a: &mut Link, b: &mut Link, seq: &mut u32) -> u64 {
        while a.can_send(0) {
            a.send(flit(0, *seq)).unwrap();
            *seq += 1;
        }
        exchange(now, a, b, &mut pass);
        let got = drain(b).len() as u16;
        b.release(0, got).unwrap();
        exchange(now, a, b, &mut pass);
        got as u64
    }

    #[test]
    fn config_validation_names_the_field() {
        let bad = LinkConfig { vcs: 16, ..cfg() };
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::Invalid {
                field: "link.vcs",
                ..
            })
        ));
        let bad = LinkConfig { mtu: 40, ..cfg() };
        assert!(Link::new(bad).is_err());
        let bad = LinkConfig {
            dead_after_ns: 1,
            ..cfg()
        };
        assert!(bad.validate().is_err());
        assert!(LinkConfig::default().validate().is_ok());
    }

    #[test]
    fn handshake_then_flits_flow_and_credits_return() {
        let (mut a, mut b) = connected(cfg());
        for i in 0..4 {
            a.send(flit(1, i)).unwrap();
        }
        assert_eq!(a.credits(1), 0);
        assert_eq!(a.credits(0), 4);
        assert_eq!(a.send(flit(1, 9)), Err(LinkError::NoCredit { vc: 1 }));
        exchange(1000, &mut a, &mut b, &mut pass);
        let got = drain(&mut b);
        assert_eq!(
            got.iter().map(|f| f.seq).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        assert_eq!(a.credits(1), 0, "no credit before the receiver frees");
        b.release(1, 4).unwrap();
        assert!(matches!(
            b.release(1, 1),
            Err(LinkError::ReleaseTooMany { .. })
        ));
        exchange(2000, &mut a, &mut b, &mut pass);
        assert_eq!(a.credits(1), 4);
        assert_eq!(a.stats().rx_credits, 4);
        assert_eq!(b.stats().tx_credits, 4);
        assert_eq!(a.send(flit(2, 0)), Err(LinkError::BadVc { vc: 2, vcs: 2 }));
    }

    #[test]
    fn flits_are_bundled_up_to_the_mtu() {
        let c = LinkConfig {
            vcs: 1,
            buffer_depth: 200,
            mtu: 400,
            ..cfg()
        };
        let (mut a, mut b) = connected(c);
        for i in 0..100 {
            a.send(flit(0, i)).unwrap();
        }
        let mut buf = Vec::new();
        let mut datagrams = 0;
        while a.poll_transmit(10, &mut buf) {
            assert!(buf.len() <= 400);
            datagrams += 1;
            b.handle_datagram_slice(10, &buf).unwrap();
        }
        assert_eq!(drain(&mut b).len(), 100);
        assert!(datagrams < 20, "{datagrams} datagrams for 100 flits");
    }

    #[test]
    fn credit_stall_time_is_measured() {
        let (mut a, mut b) = connected(cfg());
        for i in 0..4 {
            a.send(flit(0, i)).unwrap();
        }
        exchange(100, &mut a, &mut b, &mut pass);
        assert!(a.send(flit(0, 5)).is_err());
        drain(&mut b);
        exchange(1_100, &mut a, &mut b, &mut pass); // no release yet
                                                    // A running stall counts up to whenever it is read.
        assert_eq!(a.stats().credit_stall_ns[0], 0);
        assert_eq!(a.credit_stall_ns(0, 1_100), 1_000);
        assert_eq!(a.credit_stall_ns(0, 3_100), 3_000);
        assert_eq!(a.credit_stall_ns(0, 50), 0, "read before it started");
        b.release(0, 1).unwrap();
        exchange(5_100, &mut a, &mut b, &mut pass);
        assert_eq!(a.stats().credit_stall_ns[0], 5_000);
        assert_eq!(a.credit_stall_ns(0, 9_000), 5_000, "ended: no longer grows");
    }

    #[test]
    fn bandwidth_is_respected_over_a_simulated_second() {
        let rate = 20_000u64;
        let c = LinkConfig {
            vcs: 1,
            buffer_depth: 64,
            bandwidth_flits_per_s: Some(rate),
            ..cfg()
        };
        let (mut a, mut b) = connected(c);
        let mut now = 0;
        let mut seq = 0;
        let mut delivered = 0u64;
        while now < 1_000_000_000 {
            delivered += saturate_round(now, &mut a, &mut b, &mut seq);
            let next = a.poll_timeout().unwrap().min(b.poll_timeout().unwrap());
            now = next.max(now + 1);
        }
        let err = (delivered as f64 - rate as f64).abs() / rate as f64;
        assert!(err < 0.01, "delivered {delivered} flits in 1 s at {rate}/s");
    }

    /// Like [`saturate_round`], returning the flits delivered with their
    /// release times.
    fn saturate_round_at(now: u64, a: &mut Link, b: &mut Link, seq: &mut u32) -> Vec<(u64, u32)> {
        while a.can_send(0) {
            a.send_at(now, flit(0, *seq)).unwrap();
            *seq += 1;
        }
        exchange(now, a, b, &mut pass);
        let got: Vec<(u64, u32)> = std::iter::from_fn(|| b.poll_received_at())
            .map(|(at, f)| (at, f.seq))
            .collect();
        b.release(0, got.len() as u16).unwrap();
        exchange(now, a, b, &mut pass);
        got
    }

    #[test]
    fn a_pacing_quantum_bundles_flits_without_changing_their_times() {
        let rate = 20_000u64;
        let run = |quantum_ns: u64| {
            let c = LinkConfig {
                vcs: 1,
                buffer_depth: 64,
                bandwidth_flits_per_s: Some(rate),
                pacing_quantum_ns: quantum_ns,
                // The quantum needs the ends' shared clock.
                count_transit: true,
                propagation_ns: 3_000,
                keepalive_interval_ns: 100_000_000,
                dead_after_ns: 500_000_000,
                ..cfg()
            };
            let (mut a, mut b) = connected(c);
            let (mut now, mut seq) = (0, 0);
            let mut released = Vec::new();
            while now < 1_000_000_000 {
                released.extend(saturate_round_at(now, &mut a, &mut b, &mut seq));
                let next = a.poll_timeout().unwrap().min(b.poll_timeout().unwrap());
                now = next.max(now + 1);
            }
            (released, a.stats().tx_datagrams)
        };
        let (plain, plain_datagrams) = run(0);
        // 200 us at 20 000 flits/s: 4 flits per datagram.
        let (bundled, bundled_datagrams) = run(200_000);
        let err = (plain.len() as f64 - rate as f64).abs() / rate as f64;
        assert!(
            err < 0.01,
            "delivered {} flits in 1 s at {rate}/s",
            plain.len()
        );
        assert!(plain_datagrams > 15_000, "{plain_datagrams}");
        assert!(
            bundled_datagrams < plain_datagrams / 3,
            "{bundled_datagrams} datagrams with a quantum, {plain_datagrams} without"
        );
        // Every flit is released at the same emulated time either way.
        let n = plain.len().min(bundled.len());
        assert!(n + 8 >= plain.len());
        assert_eq!(plain[..n], bundled[..n]);
    }

    #[test]
    fn flits_serialise_one_flit_time_apart_even_after_idle_time() {
        let rate = 1_000_000u64; // 1 us per flit
        let c = |count_transit: bool| LinkConfig {
            vcs: 1,
            buffer_depth: 64,
            bandwidth_flits_per_s: Some(rate),
            propagation_ns: 500,
            count_transit,
            keepalive_interval_ns: 100_000_000,
            dead_after_ns: 5_000_000_000,
            ..cfg()
        };
        for count_transit in [false, true] {
            // A second of idle time earns nothing: 40 flits queued at once
            // start 1 us apart and are released at start + 1 us + 0.5 us.
            let (mut a, mut b) = connected(c(count_transit));
            let t0 = 1_000_000_000;
            for seq in 0..40 {
                a.send_at(t0, flit(0, seq)).unwrap();
            }
            let mut now = t0;
            let mut got = Vec::new();
            while got.len() < 40 {
                exchange(now, &mut a, &mut b, &mut pass);
                got.extend(std::iter::from_fn(|| b.poll_received_at()).map(|(at, f)| (at, f.seq)));
                now = a.poll_timeout().unwrap().min(b.poll_timeout().unwrap());
            }
            let want: Vec<(u64, u32)> = (0..40u32)
                .map(|k| (t0 + (k as u64 + 1) * 1_000 + 500, k))
                .collect();
            assert_eq!(got, want, "count_transit {count_transit}");
            assert_eq!(a.stats().tx_datagrams, b.stats().rx_datagrams);
            // Read in time, every one: none late. Without a shared clock
            // nothing is recorded.
            let late = b.arrival_lateness();
            assert_eq!(late.count(), if count_transit { 40 } else { 0 });
            assert_eq!(late.max_ns(), 0);
        }
    }

    #[test]
    fn a_late_owner_keeps_the_emulated_pace_and_gains_no_burst() {
        // The owner polls every 10 ms instead of when `poll_timeout` asks
        // (a descheduled daemon). Credits never limit: 1 024-flit buffers.
        let rate = 20_000u64; // 50 us per flit
        let c = LinkConfig {
            vcs: 1,
            buffer_depth: 1024,
            bandwidth_flits_per_s: Some(rate),
            count_transit: true,
            keepalive_interval_ns: 100_000_000,
            dead_after_ns: 5_000_000_000,
            ..cfg()
        };
        let (mut a, mut b) = connected(c.clone());
        let mut seq = 0;
        let mut released = Vec::new();
        for tick in 1..=100u64 {
            released.extend(saturate_round_at(
                tick * 10_000_000,
                &mut a,
                &mut b,
                &mut seq,
            ));
        }
        // What the wire sent while the owner slept leaves in one burst, but
        // no capacity is lost (each flit carries its emulated start, below):
        // from the first flit queued at 10 ms, the wire carried `rate`
        // flits a second.
        let want = rate as f64 * 0.99;
        let err = (released.len() as f64 - want).abs() / want;
        assert!(
            err < 0.002,
            "{} flits in 0.99 s at {rate}/s",
            released.len()
        );

        // The emulated departures themselves: the stamps of what left.
        let (mut a, mut b) = connected(c);
        for seq in 0..100 {
            a.send_at(1_000_000_000, flit(0, seq)).unwrap();
        }
        // The owner comes back 1 ms late: 20 flits started meanwhile.
        let mut buf = Vec::new();
        let now = 1_001_000_000;
        assert!(a.poll_transmit(now, &mut buf));
        let frame = wire::decode(&buf).unwrap();
        let flits = frame
            .items
            .iter()
            .filter(|i| matches!(i, Item::Flit(_)))
            .count();
        assert_eq!(flits, 21, "flits started in [t, t + 1 ms]");
        assert_eq!(Extensions::of(&frame.items).departure, Some(1_000_000_000));
        b.handle_datagram_slice(now, &buf).unwrap();
        let got: Vec<u64> = std::iter::from_fn(|| b.poll_received_at())
            .map(|(at, _)| at)
            .collect();
        // Released at once: their emulated arrival is already past.
        assert_eq!(got.len(), 20);
        assert!(got.iter().all(|&at| at == now));
        // And the receiver says by how much: flit k was due at
        // (k + 1) × 50 us, read at 1 ms; the 20th and 21st were in time.
        let late = b.arrival_lateness();
        assert_eq!(late.count(), 21);
        assert_eq!(late.max_ns(), 950_000);
        assert_eq!(
            late.summary().mean_ns,
            (1..=19u64).map(|k| k * 50_000).sum::<u64>() / 21
        );
        assert!(!a.poll_transmit(now, &mut buf), "nothing more is due");
        assert_eq!(a.poll_timeout(), Some(now + 50_000));
    }

    #[test]
    fn credits_missing_counts_what_the_peer_has_not_freed() {
        let (mut a, mut b) = connected(cfg());
        a.send(flit(0, 0)).unwrap();
        a.send(flit(1, 1)).unwrap();
        exchange(10, &mut a, &mut b, &mut pass);
        assert_eq!(a.credits_missing(), 2);
        assert_eq!(drain(&mut b).len(), 2);
        b.release(0, 1).unwrap();
        b.release(1, 1).unwrap();
        exchange(20, &mut a, &mut b, &mut pass);
        assert_eq!(a.credits_missing(), 0);
        a.set_admin_up(false);
        assert_eq!(a.credits_missing(), 0, "a down link owes nothing");
    }

    #[test]
    fn withheld_credits_stop_the_peer_until_released() {
        let (mut a, mut b) = connected(cfg());
        let depth = cfg().buffer_depth;
        b.set_credits_withheld(true);
        assert!(b.credits_withheld());
        let mut seq = 0;
        while a.can_send(0) {
            a.send(flit(0, seq)).unwrap();
            seq += 1;
        }
        assert_eq!(seq, depth as u32);
        // b takes and frees everything, across several keepalive periods,
        // but returns nothing.
        let mut t = 10;
        for _ in 0..4 {
            exchange(t, &mut a, &mut b, &mut pass);
            for f in drain(&mut b) {
                b.release(f.vc, 1).unwrap();
            }
            t += cfg().keepalive_interval_ns;
        }
        assert_eq!(a.credits(0), 0, "no credit came back");
        assert!(a.is_peer_alive(), "the link itself stays up");
        b.set_credits_withheld(false);
        exchange(t, &mut a, &mut b, &mut pass);
        exchange(t + cfg().keepalive_interval_ns, &mut a, &mut b, &mut pass);
        assert_eq!(a.credits(0), depth, "every credit owed came back at once");
    }

    #[test]
    fn propagation_delay_is_respected() {
        let c = LinkConfig {
            propagation_ns: 5_000,
            ..cfg()
        };
        let mut a = Link::with_epoch(c.clone(), 1).unwrap();
        let mut b = Link::with_epoch(c, 2).unwrap();
        let mut t = 0;
        while !(a.is_peer_alive() && b.is_peer_alive() && a.data_ok()) {
            exchange(t, &mut a, &mut b, &mut pass);
            t += 1_000;
        }
        a.send(flit(0, 0)).unwrap();
        exchange(t, &mut a, &mut b, &mut pass);
        b.handle_timeout(t + 4_999);
        assert!(b.poll_received().is_none());
        assert_eq!(b.poll_timeout().map(|d| d <= t + 5_000), Some(true));
        b.handle_timeout(t + 5_000);
        assert_eq!(b.poll_received().map(|f| f.seq), Some(0));
    }

    /// With `count_transit`, the time a datagram spent between the ends
    /// (sender's stamp to the receiver's `now`) is part of the emulated
    /// propagation delay, never more than all of it; implausible stamps
    /// (the future, over a second old: another machine's clock) get the
    /// full delay; without it no stamp is sent at all.
    /// A peer that restarts while this end is disabled (a switch killed
    /// and started again while the controller held its neighbours' ports
    /// down) gets no data until it has synchronised with this end: before
    /// the fix the first data datagrams after re-enabling carried the old
    /// peer epoch, the new peer dropped them as unsynchronised, and this
    /// end forgot them on learning the new epoch (flits lost silently).
    #[test]
    fn no_data_reaches_a_peer_restarted_while_the_link_was_disabled() {
        let (mut a, b) = connected(cfg());
        let mut t = 10;
        a.set_admin_up(false);
        // b dies and a new b (another epoch) takes its place.
        drop(b);
        let mut b = Link::with_epoch(cfg(), 21).unwrap();
        a.send(flit(0, 0)).unwrap_err();
        a.set_admin_up(true);
        a.send(flit(0, 0)).unwrap();
        a.send(flit(0, 1)).unwrap();
        // Whatever a sends before it has heard the new b carries no data.
        let mut buf = Vec::new();
        while a.poll_transmit(t, &mut buf) {
            let _ = b.handle_datagram_slice(t, &buf);
        }
        assert!(drain(&mut b).is_empty());
        assert_eq!(
            a.stats().tx_flits[0],
            0,
            "data sent to an unknown incarnation"
        );
        t += 1_000;
        exchange(t, &mut a, &mut b, &mut pass);
        let got: Vec<u32> = drain(&mut b).iter().map(|f| f.seq).collect();
        assert_eq!(got, vec![0, 1], "queued flits reach the new peer");
        assert_eq!(b.stats().rx_overflow, 0);
        // The same after a plain disable / enable (same peer): one round
        // trip, then data flows.
        let (mut a, mut b) = connected(cfg());
        a.set_admin_up(false);
        b.set_admin_up(false);
        a.set_admin_up(true);
        b.set_admin_up(true);
        a.send(flit(0, 5)).unwrap();
        exchange(t, &mut a, &mut b, &mut pass);
        assert_eq!(
            drain(&mut b).iter().map(|f| f.seq).collect::<Vec<_>>(),
            vec![5]
        );
    }

    #[test]
    fn transit_time_counts_towards_the_propagation_delay() {
        let c = LinkConfig {
            propagation_ns: 5_000,
            count_transit: true,
            ..cfg()
        };
        let connected_at = |c: &LinkConfig| {
            let mut a = Link::with_epoch(c.clone(), 1).unwrap();
            let mut b = Link::with_epoch(c.clone(), 2).unwrap();
            let mut t = 0;
            while !(a.is_peer_alive() && b.is_peer_alive() && a.data_ok()) {
                exchange(t, &mut a, &mut b, &mut pass);
                t += 10_000;
            }
            // Let every delayed keepalive and credit land.
            t += 1_000_000;
            a.handle_timeout(t);
            b.handle_timeout(t);
            (a, b, t)
        };
        // (sent at, received at) -> visible at
        let cases = [
            // 3 us on the way: 2 us of emulated wire left.
            (0u64, 3_000u64, 5_000u64),
            // Longer on the way than the wire: visible at once.
            (0, 7_000, 7_000),
            // A stamp from the future: full delay after arrival.
            (9_000, 1_000, 6_000),
        ];
        for (sent, received, at) in cases {
            let (mut a, mut b, t) = connected_at(&c);
            a.send(flit(0, 0)).unwrap();
            let mut buf = Vec::new();
            assert!(a.poll_transmit(t + sent, &mut buf));
            b.handle_datagram_slice(t + received, &buf).unwrap();
            if at > received {
                assert!(b.poll_received().is_none(), "{sent}/{received}: early");
                b.handle_timeout(t + at - 1);
                assert!(b.poll_received().is_none(), "{sent}/{received}: early");
                assert_eq!(b.poll_timeout().map(|d| d <= t + at), Some(true));
                b.handle_timeout(t + at);
            }
            assert_eq!(
                b.poll_received().map(|f| f.seq),
                Some(0),
                "{sent}/{received}: not visible at {at}"
            );
        }
        // Over a second old: another clock, full delay.
        let (mut a, mut b, t) = connected_at(&c);
        a.send(flit(0, 0)).unwrap();
        let mut buf = Vec::new();
        assert!(a.poll_transmit(t, &mut buf));
        let late = t + 2_000_000_000;
        b.handle_datagram_slice(late, &buf).unwrap();
        b.handle_timeout(late + 4_999);
        assert!(b.poll_received().is_none());
        b.handle_timeout(late + 5_000);
        assert_eq!(b.poll_received().map(|f| f.seq), Some(0));
        // The stamp costs 12 bytes, and only when asked for.
        let (mut a, _, t) = connected_at(&LinkConfig {
            count_transit: false,
            ..c.clone()
        });
        a.send(flit(0, 0)).unwrap();
        let mut plain = Vec::new();
        assert!(a.poll_transmit(t, &mut plain));
        assert_eq!(buf.len(), plain.len() + wire::SENT_AT_ITEM_LEN);
    }

    #[test]
    fn loss_reorder_and_corruption_are_detected_and_counted() {
        let (mut a, mut b) = connected(lossy_cfg());
        let mut bufs = Vec::new();
        let mut buf = Vec::new();
        for i in 0..3 {
            a.send(flit(0, i)).unwrap();
            assert!(a.poll_transmit(10, &mut buf));
            bufs.push(buf.clone());
        }
        // Datagram 0 lost, 2 before 1.
        b.handle_datagram_slice(10, &bufs[2]).unwrap();
        b.handle_datagram_slice(10, &bufs[1]).unwrap();
        assert_eq!(b.stats().seq_gaps, 2);
        assert_eq!(b.stats().reordered, 1);
        let mut bad = bufs[0].clone();
        bad[20] ^= 0x10;
        assert!(matches!(
            b.handle_datagram_slice(10, &bad),
            Err(WireError::BadCrc { .. })
        ));
        assert_eq!(b.stats().crc_errors, 1);
        assert!(b.handle_datagram_slice(10, b"garbage").is_err());
        assert_eq!(b.stats().bad_datagrams, 1);
        assert_eq!(drain(&mut b).len(), 2);
        b.release(0, 2).unwrap();
        // The next sync writes the lost flit off and its credit comes back.
        exchange(2_000_000, &mut a, &mut b, &mut pass);
        assert_eq!(b.stats().rx_lost_flits, 1);
        assert_eq!(a.credits(0), 4);
        // The lost datagram showing up now is stale and dropped.
        b.handle_datagram_slice(2_000_000, &bufs[0]).unwrap();
        assert_eq!(b.stats().stale_dropped, 1);
        assert!(b.poll_received().is_none());
    }

    #[test]
    fn peer_death_is_detected_and_credits_resync_after_restore() {
        // Without link error recovery: the cut direction's datagrams are
        // lost, and only the sync records reconcile (with it, the gap
        // would be a link error: `a_one_way_cut_heals_through_a_retrain`).
        let (mut a, mut b) = connected(lossy_cfg());
        let mut cut = true;
        for i in 0..4 {
            a.send(flit(0, i)).unwrap();
        }
        // Everything a sends is lost; b hears nothing.
        let mut t = 0;
        while t <= 6_000_000 {
            exchange(t, &mut a, &mut b, &mut |ab, _| !(ab && cut));
            t += 500_000;
        }
        assert!(!b.is_peer_alive());
        assert_eq!(b.poll_event(), Some(LinkEvent::PeerDown));
        assert!(a.is_peer_alive(), "b still talks to a");
        assert_eq!(a.credits(0), 0);
        cut = false;
        t += 1_000_000; // a's next keepalive
        exchange(t, &mut a, &mut b, &mut |ab, _| !(ab && cut));
        assert_eq!(b.poll_event(), Some(LinkEvent::PeerUp));
        assert_eq!(b.stats().rx_lost_flits, 4);
        assert_eq!(a.credits(0), 4, "credits resynchronised");
        a.send(flit(0, 9)).unwrap();
        exchange(t + 10, &mut a, &mut b, &mut pass);
        assert_eq!(drain(&mut b).len(), 1);
    }

    #[test]
    fn restarted_peer_resets_credit_state() {
        let (mut a, mut b) = connected(cfg());
        a.send(flit(0, 0)).unwrap();
        b.send(flit(0, 0)).unwrap();
        exchange(10, &mut a, &mut b, &mut pass);
        assert_eq!(drain(&mut a).len(), 1); // a holds one of b's flits
        drop(b);
        let mut b = Link::with_epoch(cfg(), 21).unwrap();
        exchange(20, &mut a, &mut b, &mut pass);
        assert!(matches!(
            a.poll_event(),
            Some(LinkEvent::PeerRestarted {
                old_epoch: 20,
                new_epoch: 21
            })
        ));
        assert_eq!(a.credits(0), 4, "fresh peer: empty buffer");
        assert_eq!(b.credits(0), 3, "a still holds one slot");
        a.release(0, 1).unwrap();
        exchange(30, &mut a, &mut b, &mut pass);
        assert_eq!(b.credits(0), 4);
    }

    /// An end that restarted hears a peer that did not, and that still
    /// holds flits of the end's old incarnation. The end has no credit
    /// until the peer's buffer report (one propagation delay behind its
    /// header) counts them, so nothing it sends finds a full buffer.
    #[test]
    fn a_restarted_end_has_no_credit_until_the_peer_reports_what_it_holds() {
        let c = LinkConfig {
            propagation_ns: 1_000,
            ..cfg()
        };
        let (mut a, mut b) = connected(c.clone());
        for seq in 0..4 {
            a.send(flit(0, seq)).unwrap();
        }
        exchange(10_000, &mut a, &mut b, &mut pass);
        exchange(20_000, &mut a, &mut b, &mut pass);
        assert_eq!(drain(&mut b).len(), 4, "b holds four: its buffer is full");
        drop(a);
        let mut a = Link::with_epoch(c, 11).unwrap();
        let now = 30_000;
        let mut buf = Vec::new();
        assert!(a.poll_transmit(now, &mut buf));
        b.handle_datagram_slice(now, &buf).unwrap();
        while b.poll_transmit(now, &mut buf) {
            a.handle_datagram_slice(now, &buf).unwrap();
        }
        assert!(a.is_peer_alive(), "a knows b; b's report is propagating");
        let mut seq = 100;
        while a.can_send(0) && seq < 110 {
            a.send(flit(0, seq)).unwrap();
            seq += 1;
        }
        assert_eq!(seq, 100, "no credit before the report");
        for t in [1_000, 2_000, 3_000] {
            exchange(now + t, &mut a, &mut b, &mut pass);
        }
        assert_eq!(a.credits(0), 0, "the report counts b's four");
        b.release(0, 4).unwrap();
        for t in [4_000, 5_000, 6_000] {
            exchange(now + t, &mut a, &mut b, &mut pass);
        }
        assert_eq!(a.credits(0), 4);
        for seq in 200..204 {
            a.send(flit(0, seq)).unwrap();
        }
        for t in [7_000, 8_000, 9_000] {
            exchange(now + t, &mut a, &mut b, &mut pass);
        }
        assert_eq!(drain(&mut b).len(), 4);
        assert_eq!(b.stats().rx_overflow, 0);
    }

    #[test]
    fn admin_down_stops_sending_and_drops_incoming() {
        let (mut a, mut b) = connected(cfg());
        a.set_admin_up(false);
        assert_eq!(a.send(flit(0, 0)), Err(LinkError::AdminDown));
        b.send(flit(0, 0)).unwrap();
        let mut t = 0;
        while t <= 6_000_000 {
            exchange(t, &mut a, &mut b, &mut pass);
            t += 500_000;
        }
        assert!(a.poll_received().is_none());
        assert!(a.stats().rx_dropped_down > 0);
        assert!(!b.is_peer_alive() && !a.is_peer_alive());
        a.set_admin_up(true);
        exchange(t, &mut a, &mut b, &mut pass);
        assert!(b.is_peer_alive() && a.is_peer_alive());
        assert_eq!(b.credits(0), 4, "the flit lost while down was written off");
    }

    #[test]
    fn admin_up_toward_a_dead_peer_reports_it_down_again() {
        let (mut a, mut b) = connected(cfg());
        a.set_admin_up(false);
        let mut t = 0;
        while t <= 6_000_000 {
            exchange(t, &mut a, &mut b, &mut pass);
            t += 500_000;
        }
        assert_eq!(a.poll_event(), Some(LinkEvent::PeerDown));
        drop(b); // the peer dies while a is down
        a.handle_timeout(t);
        a.set_admin_up(true);
        a.handle_timeout(t + 4_999_999);
        assert_eq!(a.poll_event(), None);
        assert!(a.poll_timeout().unwrap() <= t + 5_000_000);
        a.handle_timeout(t + 5_000_000);
        assert_eq!(a.poll_event(), Some(LinkEvent::PeerDown));
    }

    /// Steps time by `step` from `from` to `to`, exchanging through
    /// `filter` at every step; returns the time reached.
    fn run(
        from: u64,
        to: u64,
        step: u64,
        a: &mut Link,
        b: &mut Link,
        filter: &mut dyn FnMut(bool, &mut Vec<u8>) -> bool,
    ) -> u64 {
        let mut t = from;
        while t <= to {
            exchange(t, a, b, filter);
            t += step;
        }
        t
    }

    fn events(l: &mut Link) -> Vec<LinkEvent> {
        std::iter::from_fn(|| l.poll_event()).collect()
    }

    /// What an end reports when its link goes into a retrain for `cause`
    /// while it is up: the error, then the link down.
    fn retrain_events(cause: LinkErrorCause, by_peer: bool) -> Vec<LinkEvent> {
        vec![LinkEvent::LinkError { cause, by_peer }, LinkEvent::PeerDown]
    }

    fn flip(buf: &mut [u8]) {
        let i = buf.len() - 1;
        buf[i] ^= 0x5A;
    }

    /// Runs `a` alone for 7 ms, longer than detection, while its peer is
    /// stopped: what `a` sends waits, as in a socket buffer. Returns what
    /// waited and the time.
    fn run_while_the_peer_is_stopped(a: &mut Link) -> (Vec<Vec<u8>>, u64) {
        let (mut held, mut buf) = (Vec::new(), Vec::new());
        let mut t = 1_000;
        while t <= 7_000_000 {
            a.handle_timeout(t);
            while a.poll_transmit(t, &mut buf) {
                held.push(buf.clone());
            }
            t += 500_000;
        }
        (held, t)
    }

    /// `b` stops for longer than detection (its process stopped, say) and
    /// runs again: `a` took its silence for death and failed the port, `b`
    /// saw nothing wrong. The first datagram `a` hears from it is a link
    /// error (`peer_returned`): both ends go down and retrain before data
    /// flows again, as after a damaged datagram. With retraining off `b` is
    /// simply up again.
    fn stop_and_resume(c: LinkConfig) -> (Link, Link, u64) {
        let (mut a, mut b) = connected(c);
        let (held, t) = run_while_the_peer_is_stopped(&mut a);
        assert_eq!(events(&mut a), vec![LinkEvent::PeerDown]);
        // b runs again: what waited for it, then its timers.
        for d in &held {
            let _ = b.handle_datagram_slice(t, d);
        }
        b.handle_timeout(t);
        assert!(events(&mut b).is_empty(), "b heard a all along");
        exchange(t, &mut a, &mut b, &mut pass);
        (a, b, t)
    }

    #[test]
    fn a_peer_heard_again_after_its_silence_was_taken_for_death_retrains_both_ends() {
        let (mut a, mut b, t) = stop_and_resume(cfg());
        assert_eq!(
            events(&mut a),
            vec![LinkEvent::LinkError {
                cause: LinkErrorCause::PeerReturned,
                by_peer: false
            }]
        );
        assert_eq!(
            events(&mut b),
            retrain_events(LinkErrorCause::PeerReturned, true)
        );
        assert!(a.is_retraining() && b.is_retraining());
        let t = run(t, t + RETRAIN, RETRAIN / 4, &mut a, &mut b, &mut pass);
        exchange(t, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
        assert_eq!(events(&mut a), vec![LinkEvent::PeerUp]);
        assert_eq!(events(&mut b), vec![LinkEvent::PeerUp]);
        assert_eq!((a.credits(0), b.credits(0)), (4, 4));
        // The code travels: an older end reads it as unspecified.
        assert_eq!(
            LinkErrorCause::from_code(LinkErrorCause::PeerReturned.code()),
            LinkErrorCause::PeerReturned
        );
        let (mut a, mut b, _) = stop_and_resume(lossy_cfg());
        assert_eq!(events(&mut a), vec![LinkEvent::PeerUp]);
        assert!(events(&mut b).is_empty());
        assert!(a.is_up() && b.is_up());
    }

    /// Flits dropped as a link goes into a retrain are lost on the link:
    /// written off at once, since the peer's next sync, which would write
    /// them off, never comes if the link is killed meanwhile; and written
    /// off once, since that sync, when it comes, finds nothing more.
    #[test]
    fn flits_dropped_by_a_retrain_are_written_off_at_once_and_once() {
        for killed in [true, false] {
            let (mut a, mut b) = connected(cfg());
            let (held, t) = run_while_the_peer_is_stopped(&mut a);
            // `b` runs again with a flit to send; `a` drops the datagram
            // that carries it (`peer_returned`).
            b.send(flit(0, 0)).unwrap();
            for d in &held {
                let _ = b.handle_datagram_slice(t, d);
            }
            exchange(t, &mut a, &mut b, &mut pass);
            assert!(a.is_retraining());
            assert_eq!(b.stats().tx_flits[0], 1);
            assert_eq!(a.stats().rx_lost_flits, 1, "written off at once");
            if killed {
                a.set_admin_up(false);
                b.set_admin_up(false);
            }
            let t = run(t, t + 2 * RETRAIN, RETRAIN / 4, &mut a, &mut b, &mut pass);
            exchange(t, &mut a, &mut b, &mut pass);
            assert_eq!(a.stats().rx_lost_flits, 1, "written off once");
            assert_eq!(a.stats().rx_flits[0], 0);
            if !killed {
                assert!(a.is_up() && b.is_up());
                assert_eq!(b.credits(0), 4, "its slot is free again");
            }
        }
    }

    /// `a`, disabled unbeknown to `b`, is enabled again at `t`: it asks
    /// for a sync, `b`'s answer asks for none (it never saw the port go
    /// down), so `a` resets the link; `b` fails its port on the reset, and
    /// its owner reports what crossed it.
    fn enabled_again_resets(t: u64, a: &mut Link, b: &mut Link) {
        a.set_admin_up(true);
        exchange(t, a, b, &mut pass);
        assert_eq!(
            events(a),
            retrain_events(LinkErrorCause::DroppedWhileDisabled, false)
        );
        exchange(t, a, b, &mut pass);
        assert_eq!(
            events(b),
            retrain_events(LinkErrorCause::DroppedWhileDisabled, true)
        );
    }

    #[test]
    fn an_end_that_dropped_flits_while_briefly_disabled_resets_the_link_on_re_enable() {
        // `a` is disabled for 2 ms (less than `dead_after`), its peer not
        // told; `b` sends two flits meanwhile, which `a` drops.
        let (mut a, mut b) = connected(cfg());
        a.set_admin_up(false);
        b.send(flit(0, 0)).unwrap();
        b.send(flit(0, 1)).unwrap();
        let t = run(0, 2_000_000, 500_000, &mut a, &mut b, &mut pass);
        assert!(a.stats().rx_dropped_down > 0 && b.is_peer_alive());
        events(&mut a);
        events(&mut b);
        enabled_again_resets(t, &mut a, &mut b);
        let t = run(t, t + RETRAIN, RETRAIN / 4, &mut a, &mut b, &mut pass);
        exchange(t, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
        assert_eq!(b.credits(0), 4, "the dropped flits were written off");
        assert_eq!(
            LinkErrorCause::from_code(LinkErrorCause::DroppedWhileDisabled.code()),
            LinkErrorCause::DroppedWhileDisabled
        );
        // Disabled as briefly with nothing sent to it: nothing to report.
        let (mut a, mut b) = connected(cfg());
        a.set_admin_up(false);
        let t = run(0, 2_000_000, 500_000, &mut a, &mut b, &mut pass);
        events(&mut a);
        a.set_admin_up(true);
        exchange(t, &mut a, &mut b, &mut pass);
        assert!(events(&mut a).is_empty() && events(&mut b).is_empty());
        assert_eq!((a.stats().link_errors, b.stats().link_errors), (0, 0));
        // Both ends disabled (a link kill), `b` a little later: `a` drops
        // its flit, but `b` asks for a sync when back, so it knew.
        let (mut a, mut b) = connected(cfg());
        a.set_admin_up(false);
        b.send(flit(0, 0)).unwrap();
        let t = run(0, 500_000, 500_000, &mut a, &mut b, &mut pass);
        assert!(a.dropped_while_disabled);
        b.set_admin_up(false);
        let t = run(t, t + 3_000_000, 500_000, &mut a, &mut b, &mut pass);
        a.set_admin_up(true);
        b.set_admin_up(true);
        run(t, t + 1_000_000, 500_000, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
        assert_eq!((a.stats().link_errors, b.stats().link_errors), (0, 0));
        assert_eq!(b.credits(0), 4, "the dropped flit was written off");
        // Disabled and enabled again at once (a switch killed and restored
        // in one step) with flits still propagating toward `a`: they are
        // dropped, the middle of a packet `b` goes on sending, so the link
        // resets as if they had arrived while `a` was disabled.
        let c = LinkConfig {
            propagation_ns: 1_000,
            ..cfg()
        };
        let (mut a, mut b) = connected(c);
        b.send(flit(0, 0)).unwrap();
        let mut buf = Vec::new();
        assert!(b.poll_transmit(10_000, &mut buf));
        a.handle_datagram_slice(10_000, &buf).unwrap();
        events(&mut a);
        a.set_admin_up(false);
        a.set_admin_up(true);
        assert_eq!(a.stats().rx_dropped_down, 1);
        b.send(flit(0, 1)).unwrap();
        exchange(10_500, &mut a, &mut b, &mut pass);
        assert_eq!(
            events(&mut a),
            retrain_events(LinkErrorCause::DroppedWhileDisabled, false)
        );
        assert!(drain(&mut a).is_empty(), "nothing after the dropped flit");
        // Disabled with nothing dropped, but its owner cut a packet whose
        // head `b` already has: reset too, so that `b` closes it.
        let (mut a, mut b) = connected(cfg());
        a.set_admin_up(false);
        a.note_packet_cut_while_disabled();
        let t = run(0, 1_000_000, 500_000, &mut a, &mut b, &mut pass);
        events(&mut a);
        enabled_again_resets(t, &mut a, &mut b);
        // Enabled, it notes nothing.
        let (mut a, mut b) = connected(cfg());
        a.note_packet_cut_while_disabled();
        let t = run(0, 1_000_000, 500_000, &mut a, &mut b, &mut pass);
        assert_eq!(
            (a.stats().link_errors, b.stats().link_errors),
            (0, 0),
            "{t}"
        );
    }

    #[test]
    fn a_corrupted_datagram_takes_both_ends_down_and_a_retrain_restores_full_credits() {
        let (mut a, mut b) = connected(cfg());
        for i in 0..4 {
            a.send(flit(0, i)).unwrap();
        }
        a.send(flit(1, 0)).unwrap();
        // The datagram with the five flits is damaged on the way to b.
        let mut damaged = 0;
        exchange(1_000, &mut a, &mut b, &mut |ab, buf| {
            if ab && damaged == 0 {
                damaged += 1;
                flip(buf);
            }
            true
        });
        assert_eq!(damaged, 1);
        assert_eq!(b.stats().crc_errors, 1);
        assert_eq!(b.stats().link_errors, 1);
        assert_eq!(events(&mut b), retrain_events(LinkErrorCause::Crc, false));
        // b told a at once with a link reset: both ends are down.
        assert_eq!(b.stats().tx_link_resets, 1);
        assert_eq!(a.stats().peer_link_resets, 1);
        assert_eq!(events(&mut a), retrain_events(LinkErrorCause::Crc, true));
        assert!(a.is_retraining() && b.is_retraining());
        assert!(!a.is_up() && !b.is_up());
        assert!(
            b.poll_received().is_none(),
            "nothing of the damaged datagram"
        );
        assert_eq!(a.credits(0), 0, "the lost flits' credits are not back yet");
        // Nothing but resets goes out while retraining, and a deadline is
        // always set (no busy loop).
        let mut buf = Vec::new();
        assert!(!a.poll_transmit(1_000 + RETRAIN / 2, &mut buf));
        assert!(a.poll_timeout().unwrap() <= 1_000 + RETRAIN);
        // The retrain delay passes: both back up, credits resynchronised.
        let t = run(
            1_000 + RETRAIN / 2,
            1_000 + RETRAIN,
            RETRAIN / 4,
            &mut a,
            &mut b,
            &mut pass,
        );
        exchange(t, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
        assert_eq!(events(&mut a), vec![LinkEvent::PeerUp]);
        assert_eq!(events(&mut b), vec![LinkEvent::PeerUp]);
        assert_eq!(a.credits(0), 4);
        assert_eq!(a.credits(1), 4);
        assert_eq!(b.stats().rx_lost_flits, 5);
        assert_eq!(b.stats().rx_overflow, 0);
        assert_eq!((a.stats().retrains, b.stats().retrains), (1, 1));
        assert!(b.stats().last_recovery_ns >= RETRAIN);
        assert!(a.stats().last_recovery_ns > 0);
        // And traffic flows again.
        for i in 0..4 {
            a.send(flit(0, 10 + i)).unwrap();
        }
        exchange(t + 10, &mut a, &mut b, &mut pass);
        assert_eq!(drain(&mut b).len(), 4);
    }

    #[test]
    fn a_run_of_corrupted_datagrams_retrains_until_the_link_is_clean() {
        // Five retrains take longer than `cfg()`'s dead_after (that case is
        // `errors_that_keep_the_link_down_past_dead_after_are_reported_again`).
        let (mut a, mut b) = connected(LinkConfig {
            dead_after_ns: 50_000_000,
            ..cfg()
        });
        let (mut held, mut got) = (0u16, 0usize);
        let mut left = 5;
        let mut t = 0;
        let mut seq = 0;
        // Traffic a → b all along; the next five datagrams a sends are damaged.
        while t < 200_000_000 && !(left == 0 && a.is_up() && b.is_up() && t > 50_000_000) {
            while a.can_send(0) && seq < 400 {
                a.send(flit(0, seq)).unwrap();
                seq += 1;
            }
            exchange(t, &mut a, &mut b, &mut |ab, buf| {
                if ab && left > 0 {
                    left -= 1;
                    flip(buf);
                }
                true
            });
            let n = drain(&mut b).len();
            got += n;
            held += n as u16;
            b.release(0, held).unwrap();
            held = 0;
            let r = b.rx[0];
            assert!(r.received.wrapping_sub(r.freed) <= 4);
            assert!(a.credits(0) <= 4);
            t += 250_000;
        }
        assert_eq!(left, 0, "all five damaged");
        assert!(a.is_up() && b.is_up(), "back up at {t}");
        // Every damaged datagram was a link error (one at b per retrain),
        // each one reset a, and each retrain finished.
        assert_eq!(b.stats().crc_errors, 5);
        assert_eq!(b.stats().link_errors, 5);
        assert_eq!(a.stats().peer_link_resets, 5);
        assert_eq!(a.stats().retrains, 5);
        assert_eq!(b.stats().retrains, 5);
        assert_eq!(b.stats().rx_overflow, 0);
        // Once: one down and one up per end, however many errors.
        let ev = events(&mut b);
        assert_eq!(ev.iter().filter(|e| **e == LinkEvent::PeerDown).count(), 1);
        assert_eq!(ev.iter().filter(|e| **e == LinkEvent::PeerUp).count(), 1);
        exchange(t, &mut a, &mut b, &mut pass);
        exchange(t + 2_000_000, &mut a, &mut b, &mut pass);
        got += drain(&mut b).len();
        assert_eq!(
            got as u64 + b.stats().rx_lost_flits,
            a.stats().tx_flits[0],
            "every flit sent was delivered or written off"
        );
        assert_eq!(a.credits(0), 4 - a.queued() as u16);
    }

    #[test]
    fn errors_detected_at_both_ends_at_once_cost_one_retrain() {
        let (mut a, mut b) = connected(cfg());
        a.send(flit(0, 0)).unwrap();
        b.send(flit(0, 0)).unwrap();
        let mut buf = Vec::new();
        assert!(a.poll_transmit(10, &mut buf));
        let mut from_a = buf.clone();
        assert!(b.poll_transmit(10, &mut buf));
        let mut from_b = buf.clone();
        flip(&mut from_a);
        flip(&mut from_b);
        assert!(b.handle_datagram_slice(10, &from_a).is_err());
        assert!(a.handle_datagram_slice(10, &from_b).is_err());
        let t = run(10, 10 + 3 * RETRAIN, RETRAIN / 8, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
        assert_eq!((a.stats().link_errors, b.stats().link_errors), (1, 1));
        // Each end heard the other's reset while retraining: no second round.
        assert_eq!(
            (a.stats().peer_link_resets, b.stats().peer_link_resets),
            (0, 0)
        );
        assert_eq!((a.stats().retrains, b.stats().retrains), (1, 1));
        exchange(t, &mut a, &mut b, &mut pass);
        assert_eq!((a.credits(0), b.credits(0)), (4, 4));
    }

    #[test]
    fn a_one_way_cut_heals_through_a_retrain() {
        let (mut a, mut b) = connected(cfg());
        // One datagram a → b vanishes; b learns of it from the next one.
        a.send(flit(0, 0)).unwrap();
        let mut dropped = false;
        exchange(10, &mut a, &mut b, &mut |ab, _| {
            if ab && !dropped {
                dropped = true;
                return false;
            }
            true
        });
        assert_eq!(b.stats().link_errors, 0, "nothing seen yet");
        let t = run(20, 1_500_000, 500_000, &mut a, &mut b, &mut pass);
        assert_eq!(b.stats().link_errors, 1);
        assert_eq!(b.stats().seq_gaps, 1);
        assert!(matches!(
            b.poll_event(),
            Some(LinkEvent::LinkError {
                cause: LinkErrorCause::SeqGap,
                by_peer: false
            })
        ));
        let t = run(t, t + 2 * RETRAIN, RETRAIN / 4, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
        exchange(t, &mut a, &mut b, &mut pass);
        assert_eq!(a.credits(0), 4);
        assert_eq!(b.stats().rx_lost_flits, 1);
    }

    #[test]
    fn retraining_is_off_with_a_zero_delay() {
        let (mut a, mut b) = connected(lossy_cfg());
        a.send(flit(0, 0)).unwrap();
        exchange(10, &mut a, &mut b, &mut |ab, buf| {
            if ab {
                flip(buf);
            }
            true
        });
        assert_eq!(b.stats().crc_errors, 1);
        assert_eq!(b.stats().link_errors, 0);
        assert!(b.is_up() && !b.is_retraining());
        assert_eq!(b.poll_event(), None);
    }

    #[test]
    fn a_reset_repeat_after_the_retrain_is_not_a_new_error() {
        let (mut a, mut b) = connected(cfg());
        a.send(flit(0, 0)).unwrap();
        let mut buf = Vec::new();
        assert!(a.poll_transmit(10, &mut buf));
        flip(&mut buf);
        assert!(b.handle_datagram_slice(10, &buf).is_err());
        assert!(b.poll_transmit(10, &mut buf));
        let reset = buf.clone();
        a.handle_datagram_slice(10, &reset).unwrap();
        assert_eq!(a.stats().peer_link_resets, 1);
        let t = run(20, 20 + 2 * RETRAIN, RETRAIN / 4, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
        // A delayed copy of the same reset arrives: ignored.
        a.handle_datagram_slice(t, &reset).unwrap();
        assert_eq!(a.stats().peer_link_resets, 1);
        assert!(a.is_up() && !a.is_retraining());
    }

    #[test]
    fn a_restarted_peers_first_reset_is_acted_on() {
        let damage_next = |left: &mut u32| {
            let mut left = std::mem::take(left);
            move |ab: bool, buf: &mut Vec<u8>| {
                if ab && left > 0 {
                    left -= 1;
                    flip(buf);
                }
                true
            }
        };
        let (mut a, mut b) = connected(cfg());
        let t = run(
            10,
            10 + 3 * RETRAIN,
            RETRAIN / 4,
            &mut a,
            &mut b,
            &mut damage_next(&mut 1),
        );
        assert_eq!((b.stats().link_errors, a.stats().peer_link_resets), (1, 1));
        assert!(a.is_up() && b.is_up());
        // b restarts, and the first thing the new b sends is a reset (a's
        // first datagram to it arrived damaged): its generations start
        // again at 1, under a new epoch, and a must act on it.
        let mut b = Link::with_epoch(cfg(), 21).unwrap();
        let mut buf = Vec::new();
        a.send(flit(0, 0)).unwrap();
        assert!(a.poll_transmit(t, &mut buf));
        flip(&mut buf);
        assert!(b.handle_datagram_slice(t, &buf).is_err());
        assert_eq!(b.stats().link_errors, 1);
        assert!(b.poll_transmit(t, &mut buf));
        a.handle_datagram_slice(t, &buf).unwrap();
        assert_eq!(a.stats().peer_link_resets, 2);
        assert!(a.is_retraining());
        run(t, t + 3 * RETRAIN, RETRAIN / 4, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
    }

    #[test]
    fn errors_that_keep_the_link_down_past_dead_after_are_reported_again() {
        let (mut a, mut b) = connected(cfg());
        // Everything a sends arrives damaged, until it stops below.
        let t = run(10, 4_000_000, 250_000, &mut a, &mut b, &mut |ab, buf| {
            if ab {
                flip(buf);
            }
            true
        });
        assert_eq!(
            events(&mut b)
                .iter()
                .filter(|e| **e == LinkEvent::PeerDown)
                .count(),
            1
        );
        assert!(!b.link_errors_persist(), "not yet dead_after_ns");
        let t = run(t, 10_000_000, 250_000, &mut a, &mut b, &mut |ab, buf| {
            if ab {
                flip(buf);
            }
            true
        });
        assert!(b.stats().link_errors >= 2);
        assert!(b.link_errors_persist());
        assert_eq!(
            events(&mut b)
                .iter()
                .filter(|e| **e == LinkEvent::PeerDown)
                .count(),
            1
        );
        assert!(!b.is_up());
        // The damage stops: up again, and no longer persistent.
        run(t, t + 3 * RETRAIN, RETRAIN / 4, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
        assert!(!b.link_errors_persist());
        assert_eq!(a.credits(0), 4);
    }

    #[test]
    fn admin_down_then_up_is_not_a_link_error() {
        let (mut a, mut b) = connected(cfg());
        a.set_admin_up(false);
        b.send(flit(0, 0)).unwrap();
        let t = run(0, 6_000_000, 500_000, &mut a, &mut b, &mut pass);
        a.set_admin_up(true);
        exchange(t, &mut a, &mut b, &mut pass);
        assert!(a.is_up() && b.is_up());
        assert_eq!((a.stats().link_errors, b.stats().link_errors), (0, 0));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Send(u8),
        Release(u8),
        Transmit { drop_ab: bool, drop_ba: bool },
        Tick(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..2).prop_map(Op::Send),
            3 => (0u8..2).prop_map(Op::Release),
            3 => (proptest::bool::weighted(0.2), proptest::bool::weighted(0.2))
                .prop_map(|(drop_ab, drop_ba)| Op::Transmit { drop_ab, drop_ba }),
            1 => (1u32..3_000_000).prop_map(Op::Tick),
        ]
    }

    proptest! {
        /// Whatever arrives — random bytes, or a real datagram with bytes
        /// changed or cut — nothing panics, and after the retrain the link
        /// is up with every credit back and the flow-control invariant kept.
        #[test]
        fn garbage_datagrams_never_panic_and_the_link_recovers(
            junk in proptest::collection::vec(any::<u8>(), 0..300),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..4),
            cut in any::<prop::sample::Index>(),
            mode in 0u8..3,
        ) {
            let (mut a, mut b) = connected(cfg());
            for i in 0..3 {
                a.send(flit(0, i)).unwrap();
            }
            let mut buf = Vec::new();
            prop_assert!(a.poll_transmit(10, &mut buf));
            let bad = match mode {
                0 => junk,
                1 => {
                    let mut d = buf.clone();
                    for (i, x) in &flips {
                        let k = i.index(d.len());
                        d[k] ^= x;
                    }
                    d
                }
                _ => buf[..cut.index(buf.len())].to_vec(),
            };
            let valid = bad == buf;
            let r = b.handle_datagram_slice(10, &bad);
            prop_assert_eq!(r.is_err() || valid, b.stats().link_errors == 1 || valid);
            let t = run(10, 10 + 2 * RETRAIN + 2_000_000, RETRAIN / 4, &mut a, &mut b, &mut pass);
            prop_assert!(a.is_up() && b.is_up());
            let got = drain(&mut b).len() as u16;
            b.release(0, got).unwrap();
            exchange(t, &mut a, &mut b, &mut pass);
            prop_assert_eq!(a.credits(0), 4);
            prop_assert_eq!(b.stats().rx_overflow, 0);
            prop_assert_eq!(got as u64 + b.stats().rx_lost_flits, 3);
        }

        /// Under random sends, releases, losses and time, the sender never
        /// holds more credits than the depth, never over-commits the
        /// receiver, and after a clean exchange all credits come home.
        #[test]
        fn credits_never_exceed_depth_and_never_overcommit(ops in proptest::collection::vec(op(), 1..200), recovery in proptest::bool::ANY) {
            // With link error recovery every drop is a link error and retrain.
            let (mut a, mut b) = connected(if recovery { cfg() } else { lossy_cfg() });
            let mut now = 0u64;
            let mut held = [0u16; 2];
            let mut buf = Vec::new();
            for op in ops {
                match op {
                    Op::Send(vc) => {
                        let had = a.credits(vc);
                        let r = a.send(flit(vc, 0));
                        prop_assert_eq!(r.is_ok(), had > 0);
                    }
                    Op::Release(vc) => {
                        while let Some(f) = b.poll_received() { held[f.vc as usize] += 1; }
                        if held[vc as usize] > 0 {
                            b.release(vc, held[vc as usize]).unwrap();
                            held[vc as usize] = 0;
                        }
                    }
                    Op::Transmit { drop_ab, drop_ba } => {
                        while a.poll_transmit(now, &mut buf) { if !drop_ab { let _ = b.handle_datagram_slice(now, &buf); } }
                        while b.poll_transmit(now, &mut buf) { if !drop_ba { let _ = a.handle_datagram_slice(now, &buf); } }
                    }
                    Op::Tick(dt) => { now += dt as u64; a.handle_timeout(now); b.handle_timeout(now); }
                }
                for vc in 0..2 {
                    prop_assert!(a.credits(vc) <= 4);
                    let r = b.rx[vc as usize];
                    prop_assert!(r.received.wrapping_sub(r.freed) <= 4);
                }
                prop_assert_eq!(b.stats().rx_overflow, 0);
            }
            // Heal: release everything and exchange cleanly past a sync (and
            // past any retrain).
            for _ in 0..3 {
                now += 2_000_000;
                exchange(now, &mut a, &mut b, &mut pass);
                while let Some(f) = b.poll_received() { held[f.vc as usize] += 1; }
                for vc in 0..2u8 {
                    if held[vc as usize] > 0 { b.release(vc, held[vc as usize]).unwrap(); held[vc as usize] = 0; }
                }
            }
            now += 2_000_000;
            exchange(now, &mut a, &mut b, &mut pass);
            prop_assert_eq!(a.credits(0), 4);
            prop_assert_eq!(a.credits(1), 4);
        }
    }

    /// A flit with whatever a head may hold, including values the encoding
    /// leaves out or the decoder rejects.
    fn arb_wild_flit() -> impl Strategy<Value = Flit> {
        let run = prop_oneof![Just(0u8), Just(0x13), Just(0x58), Just(0x69), Just(0x19)];
        (
            (0u8..4, 0u8..15, any::<bool>(), any::<u8>()),
            (0u64..3, 0u32..3, 0u32..4),
            (0u8..5, 0u8..5, any::<[u32; 3]>(), any::<bool>()),
            proptest::collection::vec(run, 12),
            0usize..40,
        )
            .prop_map(
                |((k, vc, with_head, fl), (msg, packet, seq), (n, leg, im, m), runs, len)| {
                    let kind = [
                        FlitKind::Head,
                        FlitKind::Body,
                        FlitKind::Tail,
                        FlitKind::HeadTail,
                    ][k as usize];
                    let mut h = Head {
                        dst: im[0],
                        src: im[1] / 3,
                        intermediates: im,
                        n_intermediates: n,
                        leg,
                        route_flags: if m {
                            crate::flit::route_flags::MISROUTE
                        } else {
                            0
                        },
                        msg_flits: im[2],
                        born_ns: 99,
                        ..Head::default()
                    };
                    for (i, r) in runs.iter().enumerate() {
                        h.runs[i / 3][i % 3] = *r;
                    }
                    Flit {
                        kind,
                        vc,
                        flags: fl,
                        msg,
                        packet,
                        seq,
                        head: with_head.then_some(h),
                        payload: Bytes::from(vec![fl; len]),
                    }
                },
            )
    }

    proptest! {
        /// A datagram written decoded holds what decoding its encoding
        /// gives (or the error decoding reports), and its length.
        #[test]
        fn a_decoded_datagram_is_what_decoding_its_encoding_gives(
            flits in proptest::collection::vec(arb_wild_flit(), 0..8),
            credits in proptest::collection::vec((0u8..15, any::<u16>()), 0..3),
            sync in any::<bool>(),
            departure in proptest::option::of(any::<u64>()),
        ) {
            let header = Header { epoch: 3, peer_epoch: 4, seq: 77, port: 2 };
            let mut bytes = Vec::new();
            let mut d = Decoded::default();
            fn write<W: DatagramOut>(
                mut w: W,
                flits: &[Flit],
                credits: &[(u8, u16)],
                sync: bool,
                departure: Option<u64>,
            ) -> usize {
                if let Some(t) = departure {
                    w.push_extension(wire::EXT_DEPARTURE, &t.to_le_bytes());
                }
                for &(vc, n) in credits {
                    w.push_credit(vc, n);
                }
                for f in flits {
                    let _ = w.flit_len(f);
                    w.push_flit(f.clone());
                }
                if sync {
                    w.push_extension(wire::EXT_SYNC_REQUEST, &[]);
                    let mut s = SyncInfo { vcs: 3, transmitted: [0; MAX_VCS] };
                    s.transmitted[..3].copy_from_slice(&[1, 2, 3]);
                    w.push_sync(&s);
                    w.push_keepalive();
                }
                w.finish()
            }
            let n = write(FrameWriter::new(&mut bytes, header), &flits, &credits, sync, departure);
            let m = write(DecodedWriter::new(&mut d, header), &flits, &credits, sync, departure);
            prop_assert_eq!(n, bytes.len());
            prop_assert_eq!(m, n);
            prop_assert_eq!(d.len(), n);
            match wire::decode(&bytes) {
                Err(e) => prop_assert_eq!(d.malformed.clone(), Some(e)),
                Ok(frame) => {
                    prop_assert!(d.malformed.is_none());
                    prop_assert_eq!(frame.header, d.header);
                    let blank = |i: &Item| match i {
                        Item::Extension { code, .. } => Item::Extension { code: *code, body: Bytes::new() },
                        i => i.clone(),
                    };
                    let want: Vec<Item> = frame.items.iter().map(blank).collect();
                    prop_assert_eq!(&want, &d.items);
                    prop_assert_eq!(
                        format!("{:?}", Extensions::of(&frame.items)),
                        format!("{:?}", d.ext)
                    );
                }
            }
        }
    }

    /// Two link pairs, one passing datagrams encoded and one decoded, stay
    /// in step: the same datagrams, deadlines, deliveries and counters.
    #[test]
    fn links_passing_decoded_datagrams_behave_as_with_the_encoding() {
        let c = LinkConfig {
            bandwidth_flits_per_s: Some(10_000_000),
            propagation_ns: 300,
            count_transit: true,
            pacing_quantum_ns: 250,
            credit_coalesce_ns: 400,
            ..cfg()
        };
        let pair = || {
            (
                Link::with_epoch(c.clone(), 10).unwrap(),
                Link::with_epoch(c.clone(), 20).unwrap(),
            )
        };
        let (mut a, mut b) = pair();
        let (mut x, mut y) = pair();
        let mut buf = Vec::new();
        let mut d = Decoded::default();
        let mut seq = 0;
        /// One direction at `now`: `s` sends to `r` encoded, `p` to `q`
        /// decoded.
        #[allow(clippy::too_many_arguments)]
        fn side(
            now: u64,
            queue: bool,
            (s, r): (&mut Link, &mut Link),
            (p, q): (&mut Link, &mut Link),
            seq: &mut u32,
            buf: &mut Vec<u8>,
            d: &mut Decoded,
        ) {
            if queue {
                for vc in 0..2 {
                    if s.can_send(vc) {
                        s.send(flit(vc, *seq)).unwrap();
                        p.send(flit(vc, *seq)).unwrap();
                        *seq += 1;
                    }
                }
            }
            s.handle_timeout(now);
            p.handle_timeout(now);
            loop {
                let sent = s.poll_transmit(now, buf);
                assert_eq!(sent, p.poll_transmit_decoded(now, d), "at {now}");
                if !sent {
                    break;
                }
                assert_eq!(buf.len(), d.len());
                let _ = r.handle_datagram_slice(now, buf);
                let _ = q.handle_decoded(now, d);
            }
            let got: Vec<Flit> = std::iter::from_fn(|| r.poll_received()).collect();
            let got2: Vec<Flit> = std::iter::from_fn(|| q.poll_received()).collect();
            assert_eq!(got, got2);
            for f in &got {
                r.release(f.vc, 1).unwrap();
                q.release(f.vc, 1).unwrap();
            }
            assert_eq!(s.poll_timeout(), p.poll_timeout());
            assert_eq!(r.poll_timeout(), q.poll_timeout());
        }
        for step in 0..400u64 {
            let now = step * 97;
            let queue = step % 3 == 0;
            side(
                now,
                queue,
                (&mut a, &mut b),
                (&mut x, &mut y),
                &mut seq,
                &mut buf,
                &mut d,
            );
            side(
                now,
                queue,
                (&mut b, &mut a),
                (&mut y, &mut x),
                &mut seq,
                &mut buf,
                &mut d,
            );
        }
        assert!(a.stats().rx_flits[0] > 50, "{:?}", a.stats());
        assert_eq!(a.stats(), x.stats());
        assert_eq!(b.stats(), y.stats());
    }
}
