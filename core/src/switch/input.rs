//! Input buffers: one FIFO per (input port, VC), bounded by the link's
//! buffer depth (the credits the upstream sender was given), and the state
//! of the packet at its front (BookSim2's `Buffer` + `VC` state).

use super::counters::DropReason;
use crate::flit::Flit;
use crate::topology::PortNo;
use std::collections::VecDeque;

/// Where the packet at the front of an input VC stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InState {
    /// The front flit, if any, must be a head waiting for a route and an
    /// output VC.
    Idle,
    /// The packet holds output VC `out_vc` of port `out` until its tail
    /// passes; `started` once its head has left.
    Active {
        out: PortNo,
        out_vc: u8,
        started: bool,
    },
    /// The packet is being discarded up to and including its tail.
    Dropping { reason: DropReason },
}

/// SBRP's per-VC head copy and flit counter (spec 003 §5.4/§5.5, the
/// hardware SBRP-0/1 add to a router): who the packet holding the output VC
/// belongs to and how many of its flits this switch has forwarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tracked {
    pub src: crate::topology::HostId,
    pub dst: crate::topology::HostId,
    pub msg: u64,
    pub packet: u32,
    /// SSNF of the sub-message.
    pub submsg: u16,
    /// Flit number of its head (the sub-message's first flit, its FSN).
    pub first_seq: u32,
    /// Flits forwarded so far (`k_C`, counted from `first_seq`).
    pub forwarded: u32,
    /// The packet is itself an RRQ (never recovered, spec 003 §8 item 18).
    pub is_rrq: bool,
    /// The head's message length (for an RRQ it tells who made it:
    /// [`crate::mechanism::sbrp::RECEIVER_RRQ_MSG_FLITS`]).
    pub msg_flits: u32,
}

/// One input VC.
#[derive(Debug)]
pub struct InputVc {
    pub buf: VecDeque<Flit>,
    /// When each flit the link delivered arrived (the flits of `buf`
    /// after a synthetic front one).
    pub arrived: VecDeque<u64>,
    pub state: InState,
    depth: usize,
    /// The packet being forwarded (SBRP).
    pub track: Option<Tracked>,
    /// The *front* flit of `buf` was made by this switch (an NFT, or an RRQ
    /// on the local input; always put at the front): it took no credit
    /// from the link, so the link may still fill `depth` slots behind it
    /// (a peer declared dead that speaks again, a restarted peer).
    pub synthetic_tail: bool,
    /// Flits at the front of `buf` (after a synthetic one) that an
    /// incarnation of the peer sent before it restarted: the last of them
    /// may leave a packet open whose tail will never come.
    pub stale: u32,
    /// The last flit of a restarted peer's old incarnation left here in
    /// the middle of the packet this VC forwards: its tail will never
    /// come, so the packet is closed before anything else moves.
    pub tail_lost: bool,
    /// When the head at the front started waiting for an output VC (None
    /// while no head waits): the head-of-queue lifetime runs from here.
    pub waiting_since: Option<u64>,
}

impl InputVc {
    pub fn new(depth: u16) -> Self {
        InputVc {
            buf: VecDeque::with_capacity(depth as usize),
            arrived: VecDeque::with_capacity(depth as usize),
            state: InState::Idle,
            depth: depth as usize,
            track: None,
            synthetic_tail: false,
            stale: 0,
            tail_lost: false,
            waiting_since: None,
        }
    }

    /// Stores a flit the link delivered at `at`. The link never delivers
    /// more than `depth` unreleased flits, so this cannot overflow.
    pub fn push(&mut self, f: Flit, at: u64) {
        self.buf.push_back(f);
        self.arrived.push_back(at);
        debug_assert!(
            self.buf.len() <= self.depth + usize::from(self.synthetic_tail),
            "input VC holds {} flits, depth {}",
            self.buf.len(),
            self.depth
        );
    }

    /// When the front flit arrived; `None` for one made by the switch
    /// (ready at once) or an empty buffer.
    pub fn front_arrival(&self) -> Option<u64> {
        if self.synthetic_tail || self.buf.is_empty() {
            return None;
        }
        self.arrived.front().copied()
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn depth(&self) -> usize {
        self.depth
    }
}
