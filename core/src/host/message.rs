//! What a message is, how it is cut into packets and flits, and the
//! deterministic payload the sink checks flits against.
//!
//! Message ids: a source numbers its messages *per destination* (0, 1, 2…
//! for each destination), which is what the sink's in-order check needs, and
//! the id carried in [`Flit::msg`] is `dst << 32 | seq`, so that it is also
//! unique per source, as [`Flit::msg`] promises, and tells a misrouted
//! message apart.

use crate::flit::{flags, Flit, FlitKind, Head};
use crate::topology::HostId;
use bytes::Bytes;

/// Largest payload per flit the deterministic payload pattern supports.
pub const MAX_PAYLOAD_BYTES: usize = 4096;

/// Builds a message id from its destination and its per-destination number.
pub fn message_id(dst: HostId, seq: u32) -> u64 {
    (dst as u64) << 32 | seq as u64
}

/// Splits a message id into (destination, per-destination number).
pub fn split_message_id(id: u64) -> (HostId, u32) {
    ((id >> 32) as HostId, id as u32)
}

/// One generated message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    pub id: u64,
    pub dst: HostId,
    /// Total flits, headers included (seed 003 §8 item 25: message length
    /// counts every flit on the wire).
    pub flits: u32,
    /// When the message was generated (ns): latency is measured from here,
    /// so it includes source queueing (seed 003 §6.2).
    pub born_ns: u64,
}

/// How a message is cut into packets: every packet has `max_packet_flits`
/// flits except the last, which has the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packetiser {
    pub max_packet_flits: u32,
}

impl Packetiser {
    pub fn packets(&self, msg_flits: u32) -> u32 {
        msg_flits.div_ceil(self.max_packet_flits)
    }

    /// (first flit seq, length) of packet `k` of a message.
    pub fn bounds(&self, msg_flits: u32, k: u32) -> (u32, u32) {
        let first = k * self.max_packet_flits;
        (first, (msg_flits - first).min(self.max_packet_flits))
    }
}

/// A packet on its way out, flit by flit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutPacket {
    pub src: HostId,
    pub msg: Message,
    pub packet: u32,
    pub first_seq: u32,
    pub len: u32,
    /// Flits emitted so far.
    pub emitted: u32,
    /// Sub-message serial number put in the head (SBRP, spec 003 §5.5).
    pub submsg: u16,
    /// [`crate::flit::flags`] set on every flit (`RETRANSMISSION`) and, for
    /// `FIRST_SEQUENCE`, on the head only.
    pub flags: u8,
    /// Stop: the next flit is a data-less non-final tail that closes the
    /// path (the sender's "virtual tail", spec 003 §5.3 step 5).
    pub abort: bool,
}

impl OutPacket {
    pub fn is_done(&self) -> bool {
        self.emitted >= self.len
    }

    /// The next flit, on VC `vc`, with `payload_bytes` of payload; `None`
    /// once the tail has been emitted.
    pub fn next_flit(&mut self, vc: u8, payload_bytes: usize) -> Option<Flit> {
        if self.is_done() {
            return None;
        }
        if self.abort {
            let seq = self.first_seq + self.emitted;
            let started = self.emitted > 0;
            self.emitted = self.len;
            // Nothing left the host: there is no path to close.
            return started.then(|| Flit {
                kind: FlitKind::Tail,
                vc,
                flags: flags::NON_FINAL_TAIL | (self.flags & flags::RETRANSMISSION),
                msg: self.msg.id,
                packet: self.packet,
                seq,
                head: None,
                payload: Bytes::new(),
            });
        }
        let i = self.emitted;
        self.emitted += 1;
        let kind = match (i == 0, i + 1 == self.len) {
            (true, true) => FlitKind::HeadTail,
            (true, false) => FlitKind::Head,
            (false, true) => FlitKind::Tail,
            (false, false) => FlitKind::Body,
        };
        let seq = self.first_seq + i;
        let head = kind.is_head().then(|| Head {
            dst: self.msg.dst,
            src: self.src,
            msg_flits: self.msg.flits,
            born_ns: self.msg.born_ns,
            submsg: self.submsg,
            ..Head::default()
        });
        let flit_flags = if kind.is_head() {
            self.flags
        } else {
            self.flags & !flags::FIRST_SEQUENCE
        };
        Some(Flit {
            kind,
            vc,
            flags: flit_flags,
            msg: self.msg.id,
            packet: self.packet,
            seq,
            head,
            payload: payload_for(self.src, self.msg.id, seq, payload_bytes),
        })
    }
}

const PATTERN_OFFSETS: usize = 256;
static PATTERN: [u8; MAX_PAYLOAD_BYTES + PATTERN_OFFSETS] = make_pattern();

const fn make_pattern() -> [u8; MAX_PAYLOAD_BYTES + PATTERN_OFFSETS] {
    let mut out = [0u8; MAX_PAYLOAD_BYTES + PATTERN_OFFSETS];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut i = 0;
    while i < out.len() {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (x >> 24) as u8;
        i += 1;
    }
    out
}

/// The payload of flit `seq` of message `msg` from `src`: a window of a
/// fixed pseudo-random pattern chosen by a hash of the three, so that a flit
/// delivered to the wrong message or with damaged bytes is detected, and no
/// flit allocates (the window is a static slice). `len` is clamped to
/// [`MAX_PAYLOAD_BYTES`].
pub fn payload_for(src: HostId, msg: u64, seq: u32, len: usize) -> Bytes {
    let len = len.min(MAX_PAYLOAD_BYTES);
    let mut h = (src as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ msg.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ (seq as u64).wrapping_mul(0x1656_67B1_9E37_79F9);
    h ^= h >> 29;
    let off = (h % PATTERN_OFFSETS as u64) as usize;
    Bytes::from_static(&PATTERN[off..off + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packetiser_cuts_full_packets_and_a_remainder() {
        let p = Packetiser {
            max_packet_flits: 4,
        };
        assert_eq!(p.packets(10), 3);
        assert_eq!(p.bounds(10, 0), (0, 4));
        assert_eq!(p.bounds(10, 2), (8, 2));
        assert_eq!(p.packets(8), 2);
        assert_eq!(p.packets(1), 1);
    }

    #[test]
    fn packet_flits_are_head_body_tail_or_headtail() {
        let msg = Message {
            id: message_id(3, 7),
            dst: 3,
            flits: 4,
            born_ns: 55,
        };
        let mut p = OutPacket {
            src: 1,
            msg,
            packet: 0,
            first_seq: 0,
            len: 3,
            emitted: 0,
            submsg: 0,
            flags: 0,
            abort: false,
        };
        let flits: Vec<Flit> = std::iter::from_fn(|| p.next_flit(1, 16)).collect();
        let kinds: Vec<_> = flits.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [FlitKind::Head, FlitKind::Body, FlitKind::Tail]);
        let head = flits[0].head.as_ref().unwrap();
        assert_eq!(
            (head.src, head.dst, head.msg_flits, head.born_ns),
            (1, 3, 4, 55)
        );
        assert!(flits[1].head.is_none());
        assert_eq!(flits.iter().map(|f| f.seq).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(flits.iter().all(|f| f.vc == 1 && f.payload.len() == 16));
        let mut single = OutPacket {
            first_seq: 3,
            len: 1,
            packet: 1,
            emitted: 0,
            ..p
        };
        let f = single.next_flit(0, 0).unwrap();
        assert_eq!((f.kind, f.seq, f.payload.len()), (FlitKind::HeadTail, 3, 0));
        assert!(single.next_flit(0, 0).is_none());
    }

    #[test]
    fn payload_depends_on_flit_identity() {
        let a = payload_for(1, 2, 3, 32);
        assert_eq!(a, payload_for(1, 2, 3, 32));
        let others = [
            payload_for(0, 2, 3, 32),
            payload_for(1, 1, 3, 32),
            payload_for(1, 2, 4, 32),
        ];
        assert!(others.iter().filter(|o| **o == a).count() <= 1);
        assert_eq!(payload_for(1, 2, 3, 1 << 20).len(), MAX_PAYLOAD_BYTES);
        assert_eq!(split_message_id(message_id(70_000, 9)), (70_000, 9));
    }
}
