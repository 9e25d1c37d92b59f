//! The datagram format spoken on every flitnet link (documented byte by byte
//! in `docs/wire.md`).
//!
//! A datagram is a 17-byte header followed by `count` items. Items are data
//! flits, cumulative credit counters, keepalives, link-sync records and
//! length-prefixed extensions. Body and tail flits that continue the previous
//! flit on the same VC within the datagram are written as *continuations*
//! (3 bytes + payload for short payloads), so bundling a packet's flits costs
//! little beyond the payload.
//!
//! Decoding never panics: every read is bounds-checked and every malformed
//! input maps to a [`WireError`] that says where it went wrong.

use crate::flit::{
    route_flags, Flit, FlitKind, Head, MAX_INTERMEDIATES, MAX_LEGS, MAX_RUNS, MAX_RUN_HOPS,
};
use bytes::Bytes;

/// Magic (high nibble `0xF`) and version (low nibble `2`) in the first byte.
/// Version 2 added the sending port to the header.
pub const MAGIC_VERSION: u8 = 0xF2;
/// Bytes in the datagram header.
pub const HEADER_LEN: usize = 17;
/// Byte offset of the sending port (u16 LE) in the header.
const PORT_OFFSET: usize = 11;
/// Byte offset of the CRC32 in the header.
const CRC_OFFSET: usize = 13;
/// Most VCs a link can have: the VC travels in the low nibble of an item tag
/// (as InfiniBand's VL0–VL14, the last nibble value is kept out of use).
pub const MAX_VCS: usize = 15;
/// Bytes of a credit item.
pub const CREDIT_ITEM_LEN: usize = 3;
/// Bytes of a keepalive item.
pub const KEEPALIVE_ITEM_LEN: usize = 1;
/// Most bytes a flit item takes beyond its payload: tag, flags, msg (10),
/// packet (5), seq (5), a head with three intermediates and the DLR port
/// field (44), misroute runs for four legs (12) and the payload length (3).
pub const MAX_FLIT_OVERHEAD: usize = 2 + 10 + 5 + 5 + 44 + 12 + 3;
/// Default datagram size limit (fits a 1500-byte Ethernet MTU with IP/UDP).
pub const DEFAULT_MTU: usize = 1400;

/// Item type codes (high nibble of an item's first byte).
mod tag {
    pub const HEAD: u8 = 0x1;
    pub const BODY: u8 = 0x2;
    pub const TAIL: u8 = 0x3;
    pub const HEAD_TAIL: u8 = 0x4;
    pub const BODY_CONT: u8 = 0x5;
    pub const TAIL_CONT: u8 = 0x6;
    pub const CREDIT: u8 = 0x7;
    pub const KEEPALIVE: u8 = 0x8;
    pub const SYNC: u8 = 0x9;
    /// 0xA..=0xE are reserved and rejected; 0xF is the extension escape.
    pub const EXTENSION: u8 = 0xF;
}

/// Extension code of a **link reset** (docs/wire.md, "Link errors and
/// retraining"): the sender detected a link error and is retraining; the
/// receiver takes the link down and retrains too. Body: generation (u16
/// LE, repeats of one reset carry the same), cause (u8: 1 CRC, 2 malformed,
/// 3 sequence gap, 0 unspecified); longer bodies are accepted (extra bytes
/// ignored), shorter ones are not a reset.
pub const EXT_LINK_RESET: u8 = 0x01;
/// Bytes of a link reset's extension body.
pub const LINK_RESET_BODY_LEN: usize = 3;

/// The extension body of a link reset.
pub fn encode_link_reset(gen: u16, cause: u8) -> [u8; LINK_RESET_BODY_LEN] {
    let g = gen.to_le_bytes();
    [g[0], g[1], cause]
}

/// Generation and cause of a link reset's extension body; `None` if too short.
pub fn decode_link_reset(body: &[u8]) -> Option<(u16, u8)> {
    match body {
        [a, b, cause, ..] => Some((u16::from_le_bytes([*a, *b]), *cause)),
        _ => None,
    }
}

/// Extension code of a **sent-at** stamp (docs/wire.md, "Propagation
/// delay"): the sender's monotonic clock, in ns, when it wrote the
/// datagram (u64 LE; longer bodies accepted, shorter ones ignored). A
/// receiver whose link counts transit time ([`crate::link::LinkConfig::count_transit`])
/// subtracts the time the datagram already spent between the daemons from
/// the emulated propagation delay.
pub const EXT_SENT_AT: u8 = 0x02;
/// Bytes of a sent-at extension item (tag, code, length, body).
pub const SENT_AT_ITEM_LEN: usize = 4 + 8;

/// Extension code of a **sync request** (empty body), in the sync
/// datagrams of an end not synchronised with its peer (new, restarted, or
/// re-enabled: a disabled port may have hidden a restart of the peer). It
/// holds its data until the receiver's header shows it knows the sender's
/// epoch, so the receiver answers with a sync record at once instead of at
/// its next keepalive.
pub const EXT_SYNC_REQUEST: u8 = 0x03;

/// Extension code of a **departure** stamp (docs/wire.md,
/// "Serialisation"): the emulated time, in ns of the sender's clock, at
/// which the datagram's first flit started on the wire (u64 LE; longer
/// bodies accepted, shorter ones ignored). The datagram's other flits
/// followed it back to back, one flit time each. Every datagram carrying
/// flits on a link with a bandwidth has one.
pub const EXT_DEPARTURE: u8 = 0x04;
/// Bytes of a departure extension item (tag, code, length, body).
pub const DEPARTURE_ITEM_LEN: usize = 4 + 8;

/// The departure stamp of an extension body; `None` if too short.
pub fn decode_departure(body: &[u8]) -> Option<u64> {
    decode_sent_at(body)
}

/// The sent-at stamp of an extension body; `None` if too short.
pub fn decode_sent_at(body: &[u8]) -> Option<u64> {
    let b: [u8; 8] = body.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// Datagram header fields other than the item count and CRC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Header {
    /// Sender's incarnation number (non-zero once the link is configured).
    pub epoch: u16,
    /// The last epoch the sender heard from the receiver (0 = none yet).
    pub peer_epoch: u16,
    /// Link-level datagram sequence number.
    pub seq: u32,
    /// The sender's port number: with the sender's address it names the
    /// cable, so that parallel cables between two nodes stay apart.
    pub port: u16,
}

/// The sending port of a datagram, read from its header without checking
/// anything else (the transports demultiplex on it before the link layer
/// checks the CRC); `None` if the datagram is shorter than a header or
/// not of this version.
pub fn peek_port(datagram: &[u8]) -> Option<u16> {
    if datagram.len() < HEADER_LEN || datagram[0] != MAGIC_VERSION {
        return None;
    }
    Some(u16::from_le_bytes([
        datagram[PORT_OFFSET],
        datagram[PORT_OFFSET + 1],
    ]))
}

/// Per-VC count of flits the sender has put on the wire (wrapping), so the
/// receiver can account for flits lost in transit (see `docs/wire.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SyncInfo {
    pub vcs: u8,
    pub transmitted: [u16; MAX_VCS],
}

/// One item of a datagram.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Item {
    Flit(Flit),
    /// The receiver's cumulative count of freed buffer slots on `vc`
    /// (wrapping). Cumulative, so a lost credit datagram is healed by the
    /// next one.
    Credit {
        vc: u8,
        freed_total: u16,
    },
    Keepalive,
    Sync(SyncInfo),
    /// Reserved room for future item types: skipped by the link layer.
    Extension {
        code: u8,
        body: Bytes,
    },
}

/// A decoded datagram.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frame {
    pub header: Header,
    pub items: Vec<Item>,
}

/// Why a datagram could not be decoded. Offsets are byte offsets in the datagram.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error(
        "datagram truncated: {what} needs {needed} bytes at offset {offset}, only {have} left"
    )]
    Truncated {
        what: &'static str,
        offset: usize,
        needed: usize,
        have: usize,
    },
    #[error("bad magic/version byte {found:#04x} (expected {MAGIC_VERSION:#04x})")]
    BadVersion { found: u8 },
    #[error("bad CRC32: header says {stated:#010x}, datagram hashes to {computed:#010x}")]
    BadCrc { stated: u32, computed: u32 },
    #[error("item {index} at offset {offset}: unknown item type {code:#x}")]
    UnknownItem { index: u16, offset: usize, code: u8 },
    #[error("item {index} at offset {offset}: bad {what} ({value})")]
    BadLength {
        index: u16,
        offset: usize,
        what: &'static str,
        value: u64,
    },
    #[error("item {index} at offset {offset}: {n} intermediates (at most {MAX_INTERMEDIATES})")]
    TooManyIntermediates { index: u16, offset: usize, n: u8 },
    #[error("item {index} at offset {offset}: leg {leg} beyond {n} intermediates")]
    BadLeg {
        index: u16,
        offset: usize,
        leg: u8,
        n: u8,
    },
    #[error("item {index} at offset {offset}: bad misroute run byte {byte:#04x} (direction 0..=5, at most 8 hops)")]
    BadMisrouteRun { index: u16, offset: usize, byte: u8 },
    #[error("item {index} at offset {offset}: continuation flit on vc {vc} with no previous flit on that vc")]
    OrphanContinuation { index: u16, offset: usize, vc: u8 },
    #[error("{trailing} trailing bytes after the {count} items the header announced")]
    TrailingBytes { count: u16, trailing: usize },
}

// ---------------------------------------------------------------- encoding

/// What a continuation flit leaves out: the previous flit's (msg, packet, seq) on its VC.
type ContState = [Option<(u64, u32, u32)>; 16];

/// Writes one datagram item by item into a caller-owned buffer, so the link
/// layer can bundle flits up to the MTU without building a [`Frame`].
pub struct FrameWriter<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    count: u16,
    last: ContState,
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn continues(last: &ContState, f: &Flit) -> bool {
    matches!(f.kind, FlitKind::Body | FlitKind::Tail)
        && last[(f.vc & 0x0F) as usize] == Some((f.msg, f.packet, f.seq.wrapping_sub(1)))
}

/// Bytes a head's routing header takes on the wire.
fn head_len(h: &Head) -> usize {
    let n = (h.n_intermediates as usize).min(MAX_INTERMEDIATES);
    varint_len(h.dst as u64)
        + varint_len(h.src as u64)
        + 1
        + h.intermediates[..n]
            .iter()
            .map(|&i| varint_len(i as u64))
            .sum::<usize>()
        + 1
        + run_bytes(h)
        + varint_len(h.msg_flits as u64)
        + varint_len(h.submsg as u64)
        + 8
        + 1
}

/// Misroute runs on the wire: with M, three bytes per leg.
fn run_bytes(h: &Head) -> usize {
    if h.route_flags & route_flags::MISROUTE == 0 {
        return 0;
    }
    (h.n_intermediates.min(MAX_INTERMEDIATES as u8) as usize + 1) * MAX_RUNS
}

fn encoded_flit_len(last: &ContState, f: &Flit) -> usize {
    let plen = f.payload.len();
    let tail = varint_len(plen as u64) + plen;
    if continues(last, f) {
        return 2 + tail;
    }
    let mut n = 2 + varint_len(f.msg) + varint_len(f.packet as u64) + varint_len(f.seq as u64);
    if f.kind.is_head() {
        n += match &f.head {
            Some(h) => head_len(h),
            None => head_len(&Head::default()),
        };
    }
    n + tail
}

impl<'a> FrameWriter<'a> {
    /// Starts a datagram at the end of `out` (which is not cleared).
    pub fn new(out: &'a mut Vec<u8>, header: Header) -> Self {
        let start = out.len();
        out.push(MAGIC_VERSION);
        out.extend_from_slice(&header.epoch.to_le_bytes());
        out.extend_from_slice(&header.peer_epoch.to_le_bytes());
        out.extend_from_slice(&header.seq.to_le_bytes());
        out.extend_from_slice(&[0; 2]); // count, filled by finish()
        out.extend_from_slice(&header.port.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // CRC, filled by finish()
        FrameWriter {
            out,
            start,
            count: 0,
            last: [None; 16],
        }
    }

    /// Bytes written so far, header included.
    pub fn len(&self) -> usize {
        self.out.len() - self.start
    }

    /// Never true: a datagram always has its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Items written so far.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Bytes `f` would take if pushed next.
    pub fn flit_len(&self, f: &Flit) -> usize {
        encoded_flit_len(&self.last, f)
    }

    /// Bytes `item` would take if pushed next.
    pub fn item_len(&self, item: &Item) -> usize {
        match item {
            Item::Flit(f) => self.flit_len(f),
            Item::Credit { .. } => CREDIT_ITEM_LEN,
            Item::Keepalive => KEEPALIVE_ITEM_LEN,
            Item::Sync(s) => sync_len(s.vcs),
            Item::Extension { body, .. } => 4 + body.len().min(u16::MAX as usize),
        }
    }

    /// Appends a flit. A head-kind flit without a head is written with a
    /// default head; unused intermediate slots are not transmitted.
    pub fn push_flit(&mut self, f: &Flit) {
        let vc = f.vc & 0x0F;
        let out = &mut *self.out;
        if continues(&self.last, f) {
            let code = if f.kind == FlitKind::Body {
                tag::BODY_CONT
            } else {
                tag::TAIL_CONT
            };
            out.push(code << 4 | vc);
            out.push(f.flags);
        } else {
            let code = match f.kind {
                FlitKind::Head => tag::HEAD,
                FlitKind::Body => tag::BODY,
                FlitKind::Tail => tag::TAIL,
                FlitKind::HeadTail => tag::HEAD_TAIL,
            };
            out.push(code << 4 | vc);
            out.push(f.flags);
            put_varint(out, f.msg);
            put_varint(out, f.packet as u64);
            put_varint(out, f.seq as u64);
            if f.kind.is_head() {
                let default = Head::default();
                let h = f.head.as_ref().unwrap_or(&default);
                let n = h.n_intermediates.min(MAX_INTERMEDIATES as u8);
                put_varint(out, h.dst as u64);
                put_varint(out, h.src as u64);
                out.push(n << 4 | (h.leg & 0x0F));
                for &i in &h.intermediates[..n as usize] {
                    put_varint(out, i as u64);
                }
                out.push(h.route_flags);
                if h.route_flags & route_flags::MISROUTE != 0 {
                    for leg in &h.runs[..=n as usize] {
                        out.extend_from_slice(leg);
                    }
                }
                put_varint(out, h.msg_flits as u64);
                put_varint(out, h.submsg as u64);
                out.extend_from_slice(&h.born_ns.to_le_bytes());
                out.push(h.dlr_port_field);
            }
        }
        put_varint(out, f.payload.len() as u64);
        out.extend_from_slice(&f.payload);
        self.last[vc as usize] = Some((f.msg, f.packet, f.seq));
        self.count = self.count.wrapping_add(1);
    }

    /// Appends a cumulative credit counter for `vc`.
    pub fn push_credit(&mut self, vc: u8, freed_total: u16) {
        self.out.push(tag::CREDIT << 4 | (vc & 0x0F));
        self.out.extend_from_slice(&freed_total.to_le_bytes());
        self.count = self.count.wrapping_add(1);
    }

    pub fn push_keepalive(&mut self) {
        self.out.push(tag::KEEPALIVE << 4);
        self.count = self.count.wrapping_add(1);
    }

    pub fn push_sync(&mut self, s: &SyncInfo) {
        let n = s.vcs.min(MAX_VCS as u8);
        self.out.push(tag::SYNC << 4);
        self.out.push(n);
        for t in &s.transmitted[..n as usize] {
            self.out.extend_from_slice(&t.to_le_bytes());
        }
        self.count = self.count.wrapping_add(1);
    }

    /// Appends an extension item (body truncated to 65535 bytes).
    pub fn push_extension(&mut self, code: u8, body: &[u8]) {
        let body = &body[..body.len().min(u16::MAX as usize)];
        self.out.push(tag::EXTENSION << 4);
        self.out.push(code);
        self.out
            .extend_from_slice(&(body.len() as u16).to_le_bytes());
        self.out.extend_from_slice(body);
        self.count = self.count.wrapping_add(1);
    }

    pub fn push(&mut self, item: &Item) {
        match item {
            Item::Flit(f) => self.push_flit(f),
            Item::Credit { vc, freed_total } => self.push_credit(*vc, *freed_total),
            Item::Keepalive => self.push_keepalive(),
            Item::Sync(s) => self.push_sync(s),
            Item::Extension { code, body } => self.push_extension(*code, body),
        }
    }

    /// Fills in the item count and CRC; returns the datagram's length.
    pub fn finish(self) -> usize {
        let d = &mut self.out[self.start..];
        d[9..11].copy_from_slice(&self.count.to_le_bytes());
        let crc = datagram_crc(d);
        d[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        d.len()
    }
}

/// The length of a datagram as a [`FrameWriter`] would write it, counted
/// item by item without writing (for a peer in the same process that takes
/// the items themselves, [`crate::link::Decoded`]).
#[derive(Clone, Debug)]
pub struct FrameLen {
    len: usize,
    last: ContState,
}

impl Default for FrameLen {
    fn default() -> Self {
        FrameLen {
            len: HEADER_LEN,
            last: [None; 16],
        }
    }
}

impl FrameLen {
    /// Bytes counted so far, header included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a datagram always has its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Bytes `f` would take if added next.
    pub fn flit_len(&self, f: &Flit) -> usize {
        encoded_flit_len(&self.last, f)
    }

    /// Counts `f` as the next item.
    pub fn add_flit(&mut self, f: &Flit) {
        self.len += encoded_flit_len(&self.last, f);
        self.last[(f.vc & 0x0F) as usize] = Some((f.msg, f.packet, f.seq));
    }

    /// Counts an item of `n` bytes other than a flit.
    pub fn add(&mut self, n: usize) {
        self.len += n;
    }
}

/// Turns `f` into what decoding its encoding yields (the VC's low nibble,
/// a head exactly on head kinds, zero in the intermediate and misroute-run
/// slots the encoding leaves out), or returns the error decoding reports
/// for it as item `index` starting at byte `offset` (a leg beyond the
/// intermediates, a misroute run byte out of range).
pub fn as_decoded(f: &mut Flit, index: u16, offset: usize) -> Result<(), WireError> {
    f.vc &= 0x0F;
    if !f.kind.is_head() {
        f.head = None;
        return Ok(());
    }
    let h = f.head.get_or_insert_with(Head::default);
    let n = h.n_intermediates.min(MAX_INTERMEDIATES as u8);
    let leg = h.leg & 0x0F;
    if leg > n {
        return Err(WireError::BadLeg {
            index,
            offset,
            leg,
            n,
        });
    }
    h.n_intermediates = n;
    h.leg = leg;
    h.intermediates[n as usize..].fill(0);
    if h.route_flags & route_flags::MISROUTE != 0 {
        for &byte in h.runs[..=n as usize].iter().flatten() {
            if byte >> 4 > 5 || byte & 0x0F > MAX_RUN_HOPS {
                return Err(WireError::BadMisrouteRun {
                    index,
                    offset,
                    byte,
                });
            }
        }
        h.runs[n as usize + 1..].fill([0; MAX_RUNS]);
    } else {
        h.runs = [[0; MAX_RUNS]; MAX_LEGS];
    }
    Ok(())
}

/// Bytes `f` takes on the wire when it does not continue a previous flit
/// (the worst case), so callers can check it fits an MTU.
pub fn flit_wire_len(f: &Flit) -> usize {
    encoded_flit_len(&[None; 16], f)
}

/// Bytes of a sync item for `vcs` VCs.
pub fn sync_len(vcs: u8) -> usize {
    2 + 2 * (vcs as usize).min(MAX_VCS)
}

/// CRC32 of a datagram, skipping the CRC field itself.
fn datagram_crc(d: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&d[..CRC_OFFSET]);
    h.update(&d[CRC_OFFSET + 4..]);
    h.finalize()
}

/// Appends `frame`'s encoding to `out`. Items beyond 65535 are not written.
pub fn encode(frame: &Frame, out: &mut Vec<u8>) {
    let mut w = FrameWriter::new(out, frame.header);
    for item in frame.items.iter().take(u16::MAX as usize) {
        w.push(item);
    }
    w.finish();
}

// ---------------------------------------------------------------- decoding

/// Bounds-checked reader over a datagram. Payloads are sliced from `src`
/// when it is a [`Bytes`], copied otherwise.
struct Reader<'a> {
    data: &'a [u8],
    src: Option<&'a Bytes>,
    pos: usize,
    index: u16,
    item_start: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        let have = self.data.len() - self.pos;
        if n > have {
            return Err(WireError::Truncated {
                what,
                offset: self.pos,
                needed: n,
                have,
            });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u64_fixed(&mut self, what: &'static str) -> Result<u64, WireError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn bad(&self, what: &'static str, value: u64) -> WireError {
        WireError::BadLength {
            index: self.index,
            offset: self.item_start,
            what,
            value,
        }
    }

    fn varint(&mut self, what: &'static str, max: u64) -> Result<u64, WireError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8(what)?;
            let bits = (b & 0x7F) as u64;
            if i == 9 && bits > 1 {
                return Err(self.bad(what, u64::MAX));
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                if v > max {
                    return Err(self.bad(what, v));
                }
                return Ok(v);
            }
        }
        Err(self.bad(what, u64::MAX))
    }

    fn payload(&mut self) -> Result<Bytes, WireError> {
        let len = self.varint("payload length", u16::MAX as u64)? as usize;
        let start = self.pos;
        let s = self.take(len, "payload")?;
        Ok(match self.src {
            Some(b) => b.slice(start..start + len),
            None => Bytes::copy_from_slice(s),
        })
    }

    fn head(&mut self) -> Result<Head, WireError> {
        let dst = self.varint("dst", u32::MAX as u64)? as u32;
        let src = self.varint("src", u32::MAX as u64)? as u32;
        let nl = self.u8("intermediates/leg")?;
        let (n, leg) = (nl >> 4, nl & 0x0F);
        if n as usize > MAX_INTERMEDIATES {
            return Err(WireError::TooManyIntermediates {
                index: self.index,
                offset: self.item_start,
                n,
            });
        }
        if leg > n {
            return Err(WireError::BadLeg {
                index: self.index,
                offset: self.item_start,
                leg,
                n,
            });
        }
        let mut intermediates = [0; MAX_INTERMEDIATES];
        for slot in intermediates.iter_mut().take(n as usize) {
            *slot = self.varint("intermediate", u32::MAX as u64)? as u32;
        }
        let rflags = self.u8("route flags")?;
        let mut runs = [[0u8; MAX_RUNS]; MAX_LEGS];
        if rflags & route_flags::MISROUTE != 0 {
            for leg in runs.iter_mut().take(n as usize + 1) {
                for slot in leg.iter_mut() {
                    let byte = self.u8("misroute run")?;
                    if byte >> 4 > 5 || byte & 0x0F > MAX_RUN_HOPS {
                        return Err(WireError::BadMisrouteRun {
                            index: self.index,
                            offset: self.item_start,
                            byte,
                        });
                    }
                    *slot = byte;
                }
            }
        }
        Ok(Head {
            dst,
            src,
            intermediates,
            n_intermediates: n,
            leg,
            route_flags: rflags,
            runs,
            msg_flits: self.varint("msg_flits", u32::MAX as u64)? as u32,
            submsg: self.varint("submsg", u16::MAX as u64)? as u16,
            born_ns: self.u64_fixed("born_ns")?,
            dlr_port_field: self.u8("DLR port field")?,
        })
    }

    fn item(&mut self, last: &mut ContState) -> Result<Item, WireError> {
        self.item_start = self.pos;
        let t = self.u8("item tag")?;
        let (code, low) = (t >> 4, t & 0x0F);
        let kind = match code {
            tag::HEAD => FlitKind::Head,
            tag::BODY | tag::BODY_CONT => FlitKind::Body,
            tag::TAIL | tag::TAIL_CONT => FlitKind::Tail,
            tag::HEAD_TAIL => FlitKind::HeadTail,
            tag::CREDIT => {
                let freed_total = self.u16("credit count")?;
                return Ok(Item::Credit {
                    vc: low,
                    freed_total,
                });
            }
            tag::KEEPALIVE => return Ok(Item::Keepalive),
            tag::SYNC => {
                let vcs = self.u8("sync vc count")?;
                if vcs as usize > MAX_VCS {
                    return Err(self.bad("sync vc count", vcs as u64));
                }
                let mut s = SyncInfo {
                    vcs,
                    transmitted: [0; MAX_VCS],
                };
                for t in s.transmitted.iter_mut().take(vcs as usize) {
                    *t = self.u16("sync counter")?;
                }
                return Ok(Item::Sync(s));
            }
            tag::EXTENSION => {
                let code = self.u8("extension code")?;
                let len = self.u16("extension length")? as usize;
                let start = self.pos;
                let s = self.take(len, "extension body")?;
                let body = match self.src {
                    Some(b) => b.slice(start..start + len),
                    None => Bytes::copy_from_slice(s),
                };
                return Ok(Item::Extension { code, body });
            }
            _ => {
                return Err(WireError::UnknownItem {
                    index: self.index,
                    offset: self.item_start,
                    code,
                })
            }
        };
        let vc = low;
        let flags = self.u8("flit flags")?;
        let (msg, packet, seq) = if code == tag::BODY_CONT || code == tag::TAIL_CONT {
            match last[vc as usize] {
                Some((m, p, s)) => (m, p, s.wrapping_add(1)),
                None => {
                    return Err(WireError::OrphanContinuation {
                        index: self.index,
                        offset: self.item_start,
                        vc,
                    })
                }
            }
        } else {
            (
                self.varint("msg id", u64::MAX)?,
                self.varint("packet", u32::MAX as u64)? as u32,
                self.varint("flit seq", u32::MAX as u64)? as u32,
            )
        };
        let head = if kind.is_head() {
            Some(self.head()?)
        } else {
            None
        };
        let payload = self.payload()?;
        last[vc as usize] = Some((msg, packet, seq));
        Ok(Item::Flit(Flit {
            kind,
            vc,
            flags,
            msg,
            packet,
            seq,
            head,
            payload,
        }))
    }
}

fn decode_impl(data: &[u8], src: Option<&Bytes>, frame: &mut Frame) -> Result<(), WireError> {
    frame.items.clear();
    if data.len() < HEADER_LEN {
        return Err(WireError::Truncated {
            what: "header",
            offset: 0,
            needed: HEADER_LEN,
            have: data.len(),
        });
    }
    if data[0] != MAGIC_VERSION {
        return Err(WireError::BadVersion { found: data[0] });
    }
    let stated = u32::from_le_bytes([
        data[CRC_OFFSET],
        data[CRC_OFFSET + 1],
        data[CRC_OFFSET + 2],
        data[CRC_OFFSET + 3],
    ]);
    let computed = datagram_crc(data);
    if stated != computed {
        return Err(WireError::BadCrc { stated, computed });
    }
    frame.header = Header {
        epoch: u16::from_le_bytes([data[1], data[2]]),
        peer_epoch: u16::from_le_bytes([data[3], data[4]]),
        seq: u32::from_le_bytes([data[5], data[6], data[7], data[8]]),
        port: u16::from_le_bytes([data[PORT_OFFSET], data[PORT_OFFSET + 1]]),
    };
    let count = u16::from_le_bytes([data[9], data[10]]);
    let mut r = Reader {
        data,
        src,
        pos: HEADER_LEN,
        index: 0,
        item_start: HEADER_LEN,
    };
    let mut last: ContState = [None; 16];
    for i in 0..count {
        r.index = i;
        let item = r.item(&mut last)?;
        frame.items.push(item);
    }
    if r.pos != data.len() {
        return Err(WireError::TrailingBytes {
            count,
            trailing: data.len() - r.pos,
        });
    }
    Ok(())
}

/// Decodes a datagram, copying payloads.
pub fn decode(data: &[u8]) -> Result<Frame, WireError> {
    let mut f = Frame::default();
    decode_impl(data, None, &mut f)?;
    Ok(f)
}

/// Decodes a datagram; payloads are slices of `data` (no copy).
pub fn decode_bytes(data: Bytes) -> Result<Frame, WireError> {
    let mut f = Frame::default();
    decode_bytes_into(&data, &mut f)?;
    Ok(f)
}

/// Like [`decode_bytes`], reusing `frame`'s item vector (no allocation once
/// it has grown). On error `frame.items` holds the items decoded before the fault.
pub fn decode_bytes_into(data: &Bytes, frame: &mut Frame) -> Result<(), WireError> {
    decode_impl(data, Some(data), frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flit::{flags, route_flags};
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn head_flit(vc: u8, payload: &[u8]) -> Flit {
        Flit {
            kind: FlitKind::Head,
            vc,
            flags: 0,
            msg: 7,
            packet: 0,
            seq: 0,
            head: Some(Head {
                dst: 12,
                src: 3,
                intermediates: [5, 0, 0],
                n_intermediates: 1,
                leg: 0,
                route_flags: route_flags::DETERMINISTIC,
                msg_flits: 4,
                submsg: 0,
                born_ns: 1_700_000_000_000,
                dlr_port_field: 3,
                runs: Default::default(),
            }),
            payload: Bytes::copy_from_slice(payload),
        }
    }

    fn body_flit(vc: u8, seq: u32, kind: FlitKind, payload: &[u8]) -> Flit {
        Flit {
            kind,
            vc,
            flags: 0,
            msg: 7,
            packet: 0,
            seq,
            head: None,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    fn sample_frame() -> Frame {
        let mut s = SyncInfo {
            vcs: 2,
            transmitted: [0; MAX_VCS],
        };
        s.transmitted[0] = 9;
        s.transmitted[1] = 65535;
        Frame {
            header: Header {
                epoch: 3,
                peer_epoch: 4,
                seq: 77,
                port: 513,
            },
            items: vec![
                Item::Flit(head_flit(1, b"abc")),
                Item::Credit {
                    vc: 0,
                    freed_total: 1000,
                },
                Item::Flit(body_flit(1, 1, FlitKind::Body, &[0xAA; 32])),
                Item::Flit(body_flit(1, 2, FlitKind::Body, &[])),
                Item::Flit(body_flit(1, 3, FlitKind::Tail, b"z")),
                Item::Keepalive,
                Item::Sync(s),
                Item::Extension {
                    code: 9,
                    body: Bytes::from_static(b"ext"),
                },
            ],
        }
    }

    #[test]
    fn link_reset_bodies_round_trip_and_short_ones_are_not_resets() {
        let body = encode_link_reset(0xBEEF, 3);
        assert_eq!(body.len(), LINK_RESET_BODY_LEN);
        assert_eq!(decode_link_reset(&body), Some((0xBEEF, 3)));
        // Longer bodies: extra bytes ignored (room to grow).
        assert_eq!(decode_link_reset(&[1, 0, 2, 9, 9]), Some((1, 2)));
        assert_eq!(decode_link_reset(&[1, 0]), None);
        assert_eq!(decode_link_reset(&[]), None);
        // It travels as an extension item through the ordinary codec.
        let mut buf = Vec::new();
        let mut w = FrameWriter::new(&mut buf, Header::default());
        w.push_extension(EXT_LINK_RESET, &body);
        w.finish();
        let f = decode(&buf).unwrap();
        assert_eq!(
            f.items,
            vec![Item::Extension {
                code: EXT_LINK_RESET,
                body: Bytes::copy_from_slice(&body)
            }]
        );
    }

    #[test]
    fn sample_roundtrip_and_sizes() {
        let f = sample_frame();
        let mut out = Vec::new();
        encode(&f, &mut out);
        assert_eq!(decode(&out).unwrap(), f);
        assert_eq!(decode_bytes(Bytes::from(out.clone())).unwrap(), f);
        // Sizes documented in docs/wire.md.
        let mut buf = Vec::new();
        let mut w = FrameWriter::new(&mut buf, Header::default());
        assert_eq!(w.len(), HEADER_LEN);
        let h = head_flit(0, &[0; 64]);
        let head_len = w.flit_len(&h);
        w.push_flit(&h);
        let b = body_flit(0, 1, FlitKind::Body, &[0; 64]);
        assert_eq!(
            w.flit_len(&b),
            3 + 64,
            "continuation body = 3 bytes + payload"
        );
        let before = w.len();
        w.push_flit(&b);
        assert_eq!(w.len() - before, 3 + 64);
        assert_eq!(head_len, 2 + 3 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 8 + 1 + 1 + 64);
        w.finish();
    }

    #[test]
    fn misroute_runs_round_trip_and_bad_runs_are_refused() {
        let encoded = |f: &Flit| {
            let mut buf = Vec::new();
            let mut w = FrameWriter::new(&mut buf, Header::default());
            w.push_flit(f);
            w.finish();
            buf
        };
        let mut f = head_flit(0, b"x");
        let h = f.head.as_mut().unwrap();
        h.route_flags = route_flags::MISROUTE | route_flags::deterministic_leg(1);
        h.runs[0] = [crate::flit::pack_run(3, 2), crate::flit::pack_run(4, 8), 0];
        h.runs[1] = [crate::flit::pack_run(1, 1), 0, 0];
        let bytes = encoded(&f);
        let d = decode(&bytes).unwrap();
        assert_eq!(d.items, vec![Item::Flit(f.clone())]);
        // Without M the runs are not on the wire: 2 legs × 3 bytes fewer.
        let mut plain = f.clone();
        plain.head.as_mut().unwrap().route_flags = 0;
        assert_eq!(encoded(&plain).len() + 6, bytes.len());
        // Direction 6 does not exist.
        f.head.as_mut().unwrap().runs[0][0] = crate::flit::pack_run(6, 1);
        assert!(matches!(
            decode(&encoded(&f)),
            Err(WireError::BadMisrouteRun { byte: 0x61, .. })
        ));
    }

    #[test]
    fn max_flit_overhead_bounds_every_flit() {
        let f = Flit {
            kind: FlitKind::HeadTail,
            vc: 14,
            flags: 0xFF,
            msg: u64::MAX,
            packet: u32::MAX,
            seq: u32::MAX,
            head: Some(Head {
                dst: u32::MAX,
                src: u32::MAX,
                intermediates: [u32::MAX; 3],
                n_intermediates: 3,
                leg: 3,
                route_flags: 0xFF,
                msg_flits: u32::MAX,
                submsg: u16::MAX,
                born_ns: u64::MAX,
                dlr_port_field: u8::MAX,
                runs: Default::default(),
            }),
            payload: Bytes::from(vec![0; 20_000]),
        };
        assert_eq!(flit_wire_len(&f), f.payload.len() + MAX_FLIT_OVERHEAD);
    }

    #[test]
    fn payload_is_sliced_not_copied() {
        let mut out = Vec::new();
        encode(&sample_frame(), &mut out);
        let data = Bytes::from(out);
        let f = decode_bytes(data.clone()).unwrap();
        let Item::Flit(fl) = &f.items[2] else {
            panic!("item 2 is a flit")
        };
        let base = data.as_ptr() as usize;
        let p = fl.payload.as_ptr() as usize;
        assert!(p >= base && p < base + data.len());
    }

    #[test]
    fn errors_name_the_fault() {
        let mut out = Vec::new();
        encode(&sample_frame(), &mut out);
        assert!(matches!(
            decode(&out[..10]),
            Err(WireError::Truncated { what: "header", .. })
        ));
        let mut bad = out.clone();
        bad[0] = 0xF1;
        assert_eq!(decode(&bad), Err(WireError::BadVersion { found: 0xF1 }));
        assert_eq!(peek_port(&bad), None, "another version's port is not read");
        let mut bad = out.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(decode(&bad), Err(WireError::BadCrc { .. })));
        // An unknown item type with a valid CRC.
        let mut buf = Vec::new();
        let w = FrameWriter::new(&mut buf, Header::default());
        w.finish();
        buf.push(0xA0);
        buf[9] = 1;
        let crc = datagram_crc(&buf);
        buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode(&buf),
            Err(WireError::UnknownItem {
                index: 0,
                offset: HEADER_LEN,
                code: 0xA
            })
        );
        // Continuation with no previous flit.
        buf[HEADER_LEN] = 0x50;
        buf.extend_from_slice(&[0, 0]);
        let crc = datagram_crc(&buf);
        buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode(&buf),
            Err(WireError::OrphanContinuation { vc: 0, .. })
        ));
    }

    #[test]
    fn too_many_intermediates_rejected() {
        let mut f = head_flit(0, b"");
        f.head.as_mut().unwrap().n_intermediates = 3;
        let mut buf = Vec::new();
        let mut w = FrameWriter::new(&mut buf, Header::default());
        w.push_flit(&f);
        w.finish();
        // The n/leg byte follows tag, flags, msg, packet, seq, dst, src.
        let nl = HEADER_LEN + 2 + 1 + 1 + 1 + 1 + 1;
        assert_eq!(buf[nl], 0x30);
        buf[nl] = 0x40;
        let crc = datagram_crc(&buf);
        buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode(&buf),
            Err(WireError::TooManyIntermediates { n: 4, .. })
        ));
    }

    fn arb_flit() -> impl Strategy<Value = Flit> {
        (
            0u8..4,
            0u8..15,
            any::<u8>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            (
                any::<u32>(),
                any::<u32>(),
                0u8..=3,
                any::<[u32; 3]>(),
                any::<u8>(),
            ),
            (any::<u32>(), any::<u16>(), any::<u64>(), 0u8..4),
            proptest::collection::vec(any::<u8>(), 0..40),
        )
            .prop_map(
                |(k, vc, fl, msg, packet, seq, (dst, src, n, im, rf), (mf, sm, born, lg), p)| {
                    let kind = [
                        FlitKind::Head,
                        FlitKind::Body,
                        FlitKind::Tail,
                        FlitKind::HeadTail,
                    ][k as usize];
                    let mut intermediates = [0; 3];
                    intermediates[..n as usize].copy_from_slice(&im[..n as usize]);
                    Flit {
                        kind,
                        vc,
                        flags: fl,
                        msg,
                        packet,
                        seq,
                        head: kind.is_head().then_some(Head {
                            dst,
                            src,
                            intermediates,
                            n_intermediates: n,
                            leg: lg.min(n),
                            route_flags: rf,
                            msg_flits: mf,
                            submsg: sm,
                            born_ns: born,
                            dlr_port_field: rf.rotate_left(3),
                            runs: Default::default(),
                        }),
                        payload: Bytes::from(p),
                    }
                },
            )
    }

    fn arb_item() -> impl Strategy<Value = Item> {
        prop_oneof![
            4 => arb_flit().prop_map(Item::Flit),
            // Runs of continuing flits, to exercise the continuation form.
            2 => (arb_flit(), 1u32..4).prop_map(|(f, _)| Item::Flit(Flit { kind: FlitKind::Body, head: None, ..f })),
            1 => (0u8..15, any::<u16>()).prop_map(|(vc, freed_total)| Item::Credit { vc, freed_total }),
            1 => Just(Item::Keepalive),
            1 => (0u8..=15, any::<[u16; 15]>()).prop_map(|(vcs, t)| {
                let mut transmitted = [0; MAX_VCS];
                transmitted[..vcs as usize].copy_from_slice(&t[..vcs as usize]);
                Item::Sync(SyncInfo { vcs, transmitted })
            }),
            1 => (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..20))
                .prop_map(|(code, b)| Item::Extension { code, body: Bytes::from(b) }),
            1 => any::<u64>().prop_map(|ns| Item::Extension {
                code: EXT_DEPARTURE,
                body: Bytes::copy_from_slice(&ns.to_le_bytes()),
            }),
        ]
    }

    /// Makes some flits continue their predecessor on the same VC.
    fn chain(mut items: Vec<Item>, links: Vec<bool>) -> Vec<Item> {
        let mut prev: Option<(u8, u64, u32, u32)> = None;
        for (it, l) in items.iter_mut().zip(links) {
            if let Item::Flit(f) = it {
                if let (true, Some((vc, m, p, s))) = (l, prev) {
                    if !f.kind.is_head() {
                        f.vc = vc;
                        f.msg = m;
                        f.packet = p;
                        f.seq = s.wrapping_add(1);
                    }
                }
                prev = Some((f.vc, f.msg, f.packet, f.seq));
            }
        }
        items
    }

    proptest! {
        #[test]
        fn encode_decode_identity(
            header in (any::<u16>(), any::<u16>(), any::<u32>(), any::<u16>()),
            items in proptest::collection::vec(arb_item(), 0..12),
            links in proptest::collection::vec(any::<bool>(), 12),
            flags_extra in any::<u8>(),
        ) {
            let _ = (flags::NON_FINAL_TAIL, flags_extra);
            let frame = Frame {
                header: Header { epoch: header.0, peer_epoch: header.1, seq: header.2, port: header.3 },
                items: chain(items, links),
            };
            let mut out = Vec::new();
            encode(&frame, &mut out);
            // The transports read the sending port before anything is checked.
            prop_assert_eq!(peek_port(&out), Some(header.3));
            prop_assert_eq!(&decode(&out).unwrap(), &frame);
            prop_assert_eq!(decode_bytes(Bytes::from(out)).unwrap(), frame);
        }
    }

    proptest! {
        /// A departure stamp survives the trip: the extension item the
        /// link writes decodes to the same time, whatever else rides in
        /// the datagram, and takes `DEPARTURE_ITEM_LEN` bytes.
        #[test]
        fn departure_stamps_round_trip(
            ns in any::<u64>(),
            items in proptest::collection::vec(arb_item(), 0..6),
            extra in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let mut out = Vec::new();
            let mut w = FrameWriter::new(&mut out, Header::default());
            w.push_extension(EXT_DEPARTURE, &ns.to_le_bytes());
            let after_stamp = w.len();
            for i in &items {
                w.push(i);
            }
            w.finish();
            prop_assert_eq!(after_stamp, HEADER_LEN + DEPARTURE_ITEM_LEN);
            let frame = decode(&out).unwrap();
            let stamp = frame.items.iter().find_map(|i| match i {
                Item::Extension { code: EXT_DEPARTURE, body } => decode_departure(body),
                _ => None,
            });
            prop_assert_eq!(stamp, Some(ns));
            // Longer bodies are accepted (extra bytes ignored); shorter
            // ones are no stamp.
            let mut long = ns.to_le_bytes().to_vec();
            long.extend_from_slice(&extra);
            prop_assert_eq!(decode_departure(&long), Some(ns));
            prop_assert_eq!(decode_departure(&long[..7]), None);
        }
    }

    /// Feeds `n` random and mutated byte strings to the decoder. Mutations
    /// of valid datagrams get their CRC fixed half of the time so that the
    /// item parser, not just the CRC check, sees the garbage.
    fn fuzz(n: usize, seed: u64) -> (usize, usize) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut valid = Vec::new();
        encode(&sample_frame(), &mut valid);
        let mut frame = Frame::default();
        let mut buf = Vec::with_capacity(256);
        let (mut ok, mut parsed_items) = (0, 0);
        for _ in 0..n {
            buf.clear();
            match rng.gen_range(0..3) {
                0 => {
                    let len = rng.gen_range(0..48);
                    buf.extend((0..len).map(|_| rng.gen::<u8>()));
                    if len > 0 && rng.gen_bool(0.5) {
                        buf[0] = MAGIC_VERSION;
                    }
                }
                _ => {
                    buf.extend_from_slice(&valid);
                    for _ in 0..rng.gen_range(1..4) {
                        match rng.gen_range(0..3) {
                            0 if !buf.is_empty() => {
                                let i = rng.gen_range(0..buf.len());
                                buf[i] = rng.gen();
                            }
                            0 | 1 => {
                                let cut = rng.gen_range(0..=buf.len());
                                buf.truncate(cut);
                            }
                            _ => {
                                let i = rng.gen_range(0..=buf.len());
                                buf.insert(i, rng.gen());
                            }
                        }
                    }
                }
            }
            if buf.len() >= HEADER_LEN && rng.gen_bool(0.5) {
                let crc = datagram_crc(&buf);
                buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
            }
            // The port peek never panics and agrees with a full decode.
            let peeked = peek_port(&buf);
            let data = Bytes::copy_from_slice(&buf);
            match decode_bytes_into(&data, &mut frame) {
                Ok(()) => {
                    assert_eq!(peeked, Some(frame.header.port));
                    ok += 1
                }
                Err(_) => parsed_items += frame.items.len(),
            }
        }
        (ok, parsed_items)
    }

    #[test]
    fn decoder_survives_100k_mutations() {
        let (ok, parsed) = fuzz(100_000, 1);
        // The mutator must reach deep into the item parser, not stop at the CRC.
        assert!(ok > 100, "only {ok} mutated datagrams decoded");
        assert!(parsed > 10_000, "item parser barely exercised ({parsed})");
    }

    #[cfg(not(debug_assertions))]
    #[test]
    fn decoder_survives_1m_mutations() {
        let (ok, _) = fuzz(1_000_000, 2);
        assert!(ok > 1000);
    }
}
