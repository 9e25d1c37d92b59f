//! A deterministic in-process fabric for tests and experiments: every switch
//! and host state machine of a topology, wired by its cabling, driven by a
//! discrete-event scheduler. Nothing here is used by the daemons.
//!
//! Determinism: events are ordered by (time, insertion number), nodes are
//! visited in a fixed order, and every random choice is made by the hosts'
//! seeded generators, so two runs with the same configuration and seed
//! produce identical delivery traces.

use crate::host::endpoint::{self, HostConfig, HostEndpoint};
use crate::link::{self, Decoded};
use crate::node::{InProcess, Node};
use crate::routing::{Lft, RoutingTables, SwitchTable};
use crate::switch::{Switch, SwitchConfig, SwitchTiming, Switching};
use crate::topology::{FaultSet, LinkId, NodeRef, PortNo, PortRef, SwitchId, Topology};
use bytes::Bytes;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    /// A datagram reaches `node` on `port`.
    Arrive {
        node: usize,
        port: PortNo,
        data: Bytes,
    },
    /// A datagram, held decoded in [`Fabric`]'s slot `slot`, reaches
    /// `node` on `port`.
    ArriveDecoded {
        node: usize,
        port: PortNo,
        slot: u32,
    },
    /// `node` asked to be woken up (may be stale: checked when it fires).
    Wake { node: usize },
    /// A stopped `node` ([`Fabric::stall`]) runs again (stale unless the
    /// stall still ends at this event's time).
    Resume { node: usize },
}

/// A datagram that reached a stopped node, kept for when it runs again
/// (live: in its socket buffer or shared-memory ring).
#[derive(Debug)]
enum Stashed {
    Encoded { port: PortNo, data: Bytes },
    Decoded { port: PortNo, slot: u32 },
}

/// One queued event: ordered by (time, insertion number), which the
/// single-threaded simulation makes repeatable.
type Entry = (u64, u64, EventKind);

/// Which event queue a fabric uses. Both pop events in the same (time,
/// insertion number) order, so a run's results do not depend on it; the
/// wheel is the faster (`flitctl bench sim` measures both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueKind {
    /// A timing wheel: one bucket per [`WHEEL_SLOT_NS`] over a horizon of
    /// [`WHEEL_SLOTS`] buckets, a small heap for the current bucket, a heap
    /// for what lies beyond the horizon.
    #[default]
    Wheel,
    /// One binary heap of every event.
    Heap,
}

/// Width of one timing-wheel bucket, ns: about a flit time on the fastest
/// links simulated, so that a bucket holds a few events per node.
pub const WHEEL_SLOT_NS: u64 = 1 << 10;
/// Buckets on the wheel (horizon ≈ 4.2 ms: keepalives and most timers
/// land on it; longer timers wait in the far heap).
pub const WHEEL_SLOTS: usize = 4096;

/// The simulator's event queue ([`QueueKind`]).
#[derive(Debug)]
pub struct Scheduler {
    kind: QueueKind,
    /// Heap: every event. Wheel: the events before `near_end`.
    near: BinaryHeap<Reverse<Entry>>,
    /// Wheel: end (exclusive) of the current bucket.
    near_end: u64,
    /// Wheel: bucket `(t / WHEEL_SLOT_NS) % WHEEL_SLOTS` holds the events of
    /// [near_end, horizon) in that slot, unordered.
    buckets: Vec<Vec<Entry>>,
    /// Events in `buckets`.
    on_wheel: usize,
    /// Wheel: the events at or beyond the horizon.
    far: BinaryHeap<Reverse<Entry>>,
    /// Events queued for the instant of the last event popped (`current`)
    /// while it was current, in insertion order. Their insertion numbers
    /// are above those of every event queued for that instant before it
    /// became current, so they follow those in a FIFO and cost no heap
    /// sifting: the simulator's datagrams (no wire latency) all land here.
    instant: std::collections::VecDeque<Entry>,
    /// Time of the last event popped.
    current: u64,
    next_seq: u64,
    len: usize,
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler::new(QueueKind::default())
    }
}

impl Scheduler {
    pub fn new(kind: QueueKind) -> Self {
        Scheduler {
            kind,
            near: BinaryHeap::new(),
            near_end: WHEEL_SLOT_NS,
            buckets: match kind {
                QueueKind::Wheel => (0..WHEEL_SLOTS).map(|_| Vec::new()).collect(),
                QueueKind::Heap => Vec::new(),
            },
            on_wheel: 0,
            far: BinaryHeap::new(),
            instant: std::collections::VecDeque::new(),
            current: 0,
            next_seq: 0,
            len: 0,
        }
    }

    fn horizon(&self) -> u64 {
        self.near_end + (WHEEL_SLOTS as u64 - 1) * WHEEL_SLOT_NS
    }

    fn slot(t: u64) -> usize {
        (t / WHEEL_SLOT_NS) as usize % WHEEL_SLOTS
    }

    fn place(&mut self, e: Entry) {
        if self.kind == QueueKind::Heap || e.0 < self.near_end {
            self.near.push(Reverse(e));
        } else if e.0 < self.horizon() {
            self.buckets[Self::slot(e.0)].push(e);
            self.on_wheel += 1;
        } else {
            self.far.push(Reverse(e));
        }
    }

    fn push(&mut self, at: u64, kind: EventKind) {
        let e = (at, self.next_seq, kind);
        self.next_seq += 1;
        self.len += 1;
        if at == self.current && self.instant.back().is_none_or(|b| b.0 == at) {
            // Every other event at `current` has a lower number: it goes
            // after them (nothing is ever queued before `current`).
            self.instant.push_back(e);
        } else {
            self.place(e);
        }
    }

    /// Wheel: turns until the current bucket holds an event (or nothing is
    /// queued).
    fn advance(&mut self) {
        while self.near.is_empty() && self.len > 0 {
            if self.on_wheel == 0 {
                // Nothing on the wheel: jump to the far heap's first event.
                let Some(Reverse(first)) = self.far.peek() else {
                    return;
                };
                let t = first.0;
                self.near_end = (t / WHEEL_SLOT_NS + 1) * WHEEL_SLOT_NS;
            } else {
                self.near_end += WHEEL_SLOT_NS;
            }
            // The bucket of [near_end - slot, near_end) becomes current.
            let slot = Self::slot(self.near_end - WHEEL_SLOT_NS);
            let bucket = std::mem::take(&mut self.buckets[slot]);
            self.on_wheel -= bucket.len();
            let mut spare = bucket;
            self.near.extend(spare.drain(..).map(Reverse));
            self.buckets[slot] = spare;
            // The horizon moved: bring what it now covers off the far heap.
            let horizon = self.horizon();
            while self.far.peek().is_some_and(|Reverse(e)| e.0 < horizon) {
                let Some(Reverse(e)) = self.far.pop() else {
                    break;
                };
                self.place(e);
            }
        }
    }

    /// Whether the next event is the instant FIFO's front rather than the
    /// near heap's top (by time, then insertion number).
    fn instant_first(&self) -> bool {
        match (self.instant.front(), self.near.peek()) {
            (Some(a), Some(Reverse(b))) => (a.0, a.1) < (b.0, b.1),
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    fn pop_entry(&mut self) -> Option<Entry> {
        if self.kind == QueueKind::Wheel && self.instant.is_empty() {
            self.advance();
        }
        let e = if self.instant_first() {
            self.instant.pop_front()?
        } else {
            self.near.pop()?.0
        };
        self.len -= 1;
        self.current = e.0;
        Some(e)
    }

    fn pop(&mut self) -> Option<(u64, EventKind)> {
        self.pop_entry().map(|(t, _, k)| (t, k))
    }

    fn peek_time(&mut self) -> Option<u64> {
        if self.kind == QueueKind::Wheel && self.instant.is_empty() {
            self.advance();
        }
        if self.instant_first() {
            self.instant.front().map(|e| e.0)
        } else {
            self.near.peek().map(|Reverse((t, _, _))| *t)
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A node type with no values, for fabrics without switches (hosts cabled
/// back to back).
#[derive(Debug)]
pub enum NoSwitch {}

impl InProcess for NoSwitch {
    fn handle_decoded(&mut self, _: u64, _: PortNo, _: &mut Decoded) {
        match *self {}
    }
    fn poll_transmit_decoded(&mut self, _: u64, _: &mut Decoded) -> Option<PortNo> {
        match *self {}
    }
}

impl Node for NoSwitch {
    fn handle_datagram(&mut self, _: u64, _: PortNo, _: Bytes) {
        match *self {}
    }
    fn handle_timeout(&mut self, _: u64) {
        match *self {}
    }
    fn poll_transmit(&mut self, _: u64, _: &mut Vec<u8>) -> Option<PortNo> {
        match *self {}
    }
    fn poll_timeout(&self) -> Option<u64> {
        match *self {}
    }
}

/// The nodes of a topology wired by its cables, with a fixed per-hop wire
/// latency. Node index: hosts first, then switches (as [`Topology::nodes`]).
#[derive(Debug)]
pub struct Fabric<S: InProcess> {
    pub topo: Topology,
    pub hosts: Vec<HostEndpoint>,
    pub switches: Vec<S>,
    pub wire_ns: u64,
    sched: Scheduler,
    /// Wake-up already queued per node (to avoid flooding the heap).
    wake_at: Vec<Option<u64>>,
    /// Per node: its `poll_timeout` when it was last armed, and the run
    /// ([`Fabric::run_until`] call) that armed it. Within a run every call
    /// on a node is followed by its flush, which arms it, so a wake-up
    /// reads whether the node is due here instead of asking it again. A
    /// caller may change nodes directly between runs: a deadline armed in
    /// an earlier run is asked afresh.
    deadline: Vec<Option<u64>>,
    armed_in: Vec<u64>,
    run: u64,
    now: u64,
    buf: Vec<u8>,
    /// Datagrams sent to an uncabled port (dropped).
    pub unroutable: u64,
    pub datagrams: u64,
    pub events: u64,
    /// Datagrams still to damage, per sending port ([`Fabric::corrupt`]).
    corrupt_left: std::collections::BTreeMap<PortRef, u32>,
    /// Datagrams damaged so far.
    pub corrupted: u64,
    /// When set, every datagram sent is recorded here: (time, sending
    /// port, bytes), for tests that check what went on the wire.
    pub wire_log: Option<Vec<(u64, PortRef, Bytes)>>,
    /// Where each port of each node (by index) sends: the cabling resolved
    /// once, so that a datagram costs no topology lookup.
    wires: Vec<Vec<Option<Wire>>>,
    /// Nodes running (a stopped node neither hears nor sends: a killed
    /// process, [`Fabric::set_running`]).
    running: Vec<bool>,
    /// Nodes stopped with their state kept ([`Fabric::stall`]): until when,
    /// and the datagrams that reached them meanwhile, in arrival order.
    stalled_until: Vec<Option<u64>>,
    inbox: Vec<Vec<Stashed>>,
    /// Datagrams a stopped node took in when it ran again.
    pub stashed: u64,
    /// Links whose cable is pulled: what is sent on them vanishes
    /// ([`Fabric::set_cable`]), as on a veth pair whose carrier is down.
    cut: Vec<bool>,
    /// Datagrams that reached a stopped node, or vanished on a pulled cable.
    pub lost_to_stopped: u64,
    pub lost_on_cut: u64,
    /// Send every datagram encoded, as the daemons do, instead of decoded
    /// ([`Fabric::set_encode_all`]).
    encode_all: bool,
    /// Datagrams in flight, decoded ([`EventKind::ArriveDecoded`]), and
    /// the free slots; each keeps its item vector for reuse.
    decoded: Vec<Decoded>,
    free_decoded: Vec<u32>,
    /// Where the next datagram is written before it takes a slot.
    spare: Decoded,
}

/// One end of a cable as seen from the sender: the receiving node's index
/// and port, and the link.
#[derive(Clone, Copy, Debug)]
struct Wire {
    to: usize,
    port: PortNo,
    link: LinkId,
}

impl<S: InProcess> Fabric<S> {
    /// Wires `hosts` (index = host id) and `switches` (index = switch id)
    /// by `topo`'s cables.
    pub fn new(topo: Topology, hosts: Vec<HostEndpoint>, switches: Vec<S>, wire_ns: u64) -> Self {
        let n = hosts.len() + switches.len();
        let index = |r: NodeRef| match r {
            NodeRef::Host(h) => h as usize,
            NodeRef::Switch(s) => hosts.len() + s as usize,
        };
        let wires = (0..n)
            .map(|i| {
                let me = if i < hosts.len() {
                    NodeRef::Host(i as u32)
                } else {
                    NodeRef::Switch((i - hosts.len()) as u32)
                };
                (0..topo.radix(me))
                    .map(|p| {
                        let from = PortRef {
                            node: me,
                            port: p as PortNo,
                        };
                        // Both ends of a one-way cable (RUFT) reach each
                        // other, as the daemons' UDP peers do: flits go one
                        // way, credits and keepalives come back.
                        let link = topo.link_at(from)?;
                        let to = topo.peer(from)?;
                        Some(Wire {
                            to: index(to.node),
                            port: to.port,
                            link,
                        })
                    })
                    .collect()
            })
            .collect();
        let links = topo.links.len();
        Fabric {
            topo,
            hosts,
            switches,
            wire_ns,
            sched: Scheduler::default(),
            wake_at: vec![None; n],
            deadline: vec![None; n],
            armed_in: vec![0; n],
            run: 0,
            now: 0,
            buf: Vec::new(),
            unroutable: 0,
            datagrams: 0,
            events: 0,
            corrupt_left: Default::default(),
            corrupted: 0,
            wire_log: None,
            wires,
            running: vec![true; n],
            stalled_until: vec![None; n],
            inbox: (0..n).map(|_| Vec::new()).collect(),
            stashed: 0,
            cut: vec![false; links],
            lost_to_stopped: 0,
            lost_on_cut: 0,
            encode_all: false,
            decoded: Vec::new(),
            free_decoded: Vec::new(),
            spare: Decoded::default(),
        }
    }

    /// Sends every datagram encoded and has the receiver decode it (the
    /// daemons' path), instead of handing the decoded items over: both
    /// give the same results. Datagrams that are logged ([`Fabric::wire_log`])
    /// or may be damaged ([`Fabric::corrupt`]) are always encoded.
    pub fn set_encode_all(&mut self, on: bool) {
        self.encode_all = on;
    }

    /// Stops node `n` (a killed process: what reaches it is lost, it sends
    /// nothing, its timers never fire) or lets it run again (after a
    /// restart put a fresh node in its place, or after a pause).
    pub fn set_running(&mut self, n: NodeRef, running: bool) {
        let i = self.index(n);
        self.running[i] = running;
        // A stopped process killed: what waited in its buffers dies with it.
        self.stalled_until[i] = None;
        for stashed in std::mem::take(&mut self.inbox[i]) {
            self.lost_to_stopped += 1;
            if let Stashed::Decoded { slot, .. } = stashed {
                self.free_slot(slot);
            }
        }
        if running {
            self.wake_at[i] = None;
            self.flush(i);
        }
    }

    pub fn is_running(&self, n: NodeRef) -> bool {
        self.running[self.index(n)]
    }

    /// Stops node `n` with its state kept until `until` (live: SIGSTOP,
    /// then SIGCONT; or a process starved of CPU): it sends nothing and its
    /// timers do not fire; what reaches it waits, as in a socket buffer.
    /// When it runs again it takes in everything that waited, at that
    /// instant and in arrival order, then its timers, as the daemons'
    /// event loop does after a long sleep. A later stall of a stopped node
    /// extends it.
    pub fn stall(&mut self, n: NodeRef, until: u64) {
        let i = self.index(n);
        if !self.running[i] || until <= self.now {
            return;
        }
        let until = self.stalled_until[i].map_or(until, |u| u.max(until));
        self.stalled_until[i] = Some(until);
        self.sched.push(until, EventKind::Resume { node: i });
    }

    /// When node `n`, stopped by [`Fabric::stall`], runs again.
    pub fn stalled_until(&self, n: NodeRef) -> Option<u64> {
        self.stalled_until[self.index(n)]
    }

    fn free_slot(&mut self, slot: u32) {
        self.decoded[slot as usize].clear();
        self.free_decoded.push(slot);
    }

    /// Pulls link `l`'s cable (`connected` false: everything sent on it in
    /// either direction vanishes, and its ends notice only by their peer's
    /// silence) or plugs it back.
    pub fn set_cable(&mut self, l: LinkId, connected: bool) {
        self.cut[l as usize] = !connected;
    }

    /// Moves every queued event to a queue of `kind` (same order).
    pub fn set_queue(&mut self, kind: QueueKind) {
        let mut q = Scheduler::new(kind);
        let mut old = std::mem::replace(&mut self.sched, Scheduler::new(kind));
        q.next_seq = old.next_seq;
        q.current = old.current;
        // Re-queue with the original insertion numbers.
        while let Some(e) = old.pop_entry() {
            q.len += 1;
            q.place(e);
        }
        self.sched = q;
    }

    /// Lets node `n` send what it has now and re-arms its wake-up, after
    /// the caller acted on it directly (a port set down, a table
    /// installed, injection paused).
    pub fn touch(&mut self, n: NodeRef) {
        let i = self.index(n);
        self.flush(i);
    }

    /// The node at index `i` (hosts first, then switches).
    pub fn node_ref_of(&self, i: usize) -> NodeRef {
        self.node_ref(i)
    }

    /// Damages the next `count` datagrams `from` sends (one byte flipped,
    /// as `switchd`'s corrupt fault does): the receiver's CRC check
    /// rejects them.
    pub fn corrupt(&mut self, from: PortRef, count: u32) {
        if count == 0 {
            return;
        }
        *self.corrupt_left.entry(from).or_default() += count;
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    fn node(&mut self, i: usize) -> &mut dyn InProcess {
        let h = self.hosts.len();
        if i < h {
            &mut self.hosts[i]
        } else {
            &mut self.switches[i - h]
        }
    }

    fn node_ref(&self, i: usize) -> NodeRef {
        let h = self.hosts.len();
        if i < h {
            NodeRef::Host(i as u32)
        } else {
            NodeRef::Switch((i - h) as u32)
        }
    }

    fn index(&self, n: NodeRef) -> usize {
        match n {
            NodeRef::Host(h) => h as usize,
            NodeRef::Switch(s) => self.hosts.len() + s as usize,
        }
    }

    /// Sends everything node `i` has to send now, then arms its next wake-up.
    fn flush(&mut self, i: usize) {
        if !self.running[i] || self.stalled_until[i].is_some() {
            return;
        }
        let corrupting = !self.corrupt_left.is_empty();
        if corrupting || self.encode_all || self.wire_log.is_some() {
            self.flush_encoded(i);
        } else {
            self.flush_decoded(i);
        }
        self.arm(i);
    }

    /// Sends what node `i` has to send now, decoded.
    fn flush_decoded(&mut self, i: usize) {
        let now = self.now;
        let mut d = std::mem::take(&mut self.spare);
        while let Some(port) = self.node(i).poll_transmit_decoded(now, &mut d) {
            self.datagrams += 1;
            let Some(w) = self.live_wire(i, port) else {
                continue;
            };
            let slot = match self.free_decoded.pop() {
                Some(s) => s,
                None => {
                    self.decoded.push(Decoded::default());
                    (self.decoded.len() - 1) as u32
                }
            };
            // The slot's emptied vector becomes the next spare.
            std::mem::swap(&mut self.decoded[slot as usize], &mut d);
            self.sched.push(
                now + self.wire_ns,
                EventKind::ArriveDecoded {
                    node: w.to,
                    port: w.port,
                    slot,
                },
            );
        }
        self.spare = d;
    }

    /// Sends what node `i` has to send now, encoded.
    fn flush_encoded(&mut self, i: usize) {
        let now = self.now;
        let mut buf = std::mem::take(&mut self.buf);
        let corrupting = !self.corrupt_left.is_empty();
        while let Some(port) = self.node(i).poll_transmit(now, &mut buf) {
            self.datagrams += 1;
            if corrupting {
                let from = PortRef {
                    node: self.node_ref(i),
                    port,
                };
                if let Some(left) = self.corrupt_left.get_mut(&from) {
                    *left -= 1;
                    if *left == 0 {
                        self.corrupt_left.remove(&from);
                    }
                    self.corrupted += 1;
                    if let Some(b) = buf.last_mut() {
                        *b ^= 0xa5;
                    }
                }
            }
            let Some(w) = self.live_wire(i, port) else {
                continue;
            };
            let data = Bytes::copy_from_slice(&buf);
            if self.wire_log.is_some() {
                let from = PortRef {
                    node: self.node_ref(i),
                    port,
                };
                if let Some(log) = self.wire_log.as_mut() {
                    log.push((now, from, data.clone()));
                }
            }
            self.sched.push(
                now + self.wire_ns,
                EventKind::Arrive {
                    node: w.to,
                    port: w.port,
                    data,
                },
            );
        }
        self.buf = buf;
    }

    /// The cable a datagram node `i` sends on `port` travels, if it can
    /// carry it: a datagram on a pulled cable is counted lost there, one
    /// on an uncabled port unroutable.
    fn live_wire(&mut self, i: usize, port: PortNo) -> Option<Wire> {
        match self.wires[i].get(port as usize).copied().flatten() {
            Some(w) if self.cut[w.link as usize] => {
                self.lost_on_cut += 1;
                None
            }
            None => {
                self.unroutable += 1;
                None
            }
            w => w,
        }
    }

    /// Arms node `i`'s next wake-up.
    fn arm(&mut self, i: usize) {
        let now = self.now;
        let deadline = self.node(i).poll_timeout();
        self.deadline[i] = deadline;
        self.armed_in[i] = self.run;
        if let Some(t) = deadline {
            let t = t.max(now);
            // Queue a wake-up unless an earlier pending one covers it.
            if self.wake_at[i].is_none_or(|w| w > t) {
                self.wake_at[i] = Some(t);
                self.sched.push(t, EventKind::Wake { node: i });
            }
        }
    }

    /// Starts every host's traffic at `now` and lets every node send.
    pub fn start(&mut self, now: u64) {
        self.now = now;
        for h in &mut self.hosts {
            h.start(now);
        }
        for i in 0..self.wake_at.len() {
            self.flush(i);
        }
    }

    /// Lets every node send what it has at the current time and re-arms its
    /// wake-up: for a test that acted on nodes directly between runs (new
    /// tables, injection resumed), whose effects would otherwise wait for
    /// the node's next event.
    pub fn wake_all(&mut self) {
        for i in 0..self.wake_at.len() {
            self.flush(i);
        }
    }

    /// Processes events up to time `until` (inclusive).
    pub fn run_until(&mut self, until: u64) {
        // The caller may have changed nodes directly since the last run.
        self.run += 1;
        self.run_until_observed(until, |_, _| {});
    }

    /// [`Fabric::run_until`], calling `after(self, i)` once node `i` has
    /// handled an event and sent what it had (to drain the events it
    /// raised at the instant it raised them). Whatever `after`, or the
    /// caller since its last run, changes on a node directly is followed
    /// by [`Fabric::touch`] of that node: a deadline armed in an earlier
    /// call of this one is trusted.
    pub fn run_until_observed<F: FnMut(&mut Self, usize)>(&mut self, until: u64, mut after: F) {
        while let Some(t) = self.sched.peek_time() {
            if t > until {
                break;
            }
            let Some((t, kind)) = self.sched.pop() else {
                break;
            };
            self.events += 1;
            self.now = self.now.max(t);
            let now = self.now;
            let i = match kind {
                EventKind::Arrive { node, port, data } => {
                    if !self.running[node] {
                        self.lost_to_stopped += 1;
                        continue;
                    }
                    if self.stalled_until[node].is_some() {
                        self.inbox[node].push(Stashed::Encoded { port, data });
                        continue;
                    }
                    self.node(node).handle_datagram(now, port, data);
                    node
                }
                EventKind::ArriveDecoded { node, port, slot } => {
                    if self.running[node] && self.stalled_until[node].is_some() {
                        self.inbox[node].push(Stashed::Decoded { port, slot });
                        continue;
                    }
                    let running = self.running[node];
                    let mut d = std::mem::take(&mut self.decoded[slot as usize]);
                    if running {
                        self.node(node).handle_decoded(now, port, &mut d);
                    } else {
                        self.lost_to_stopped += 1;
                    }
                    // The slot is freed either way.
                    d.clear();
                    self.decoded[slot as usize] = d;
                    self.free_decoded.push(slot);
                    if !running {
                        continue;
                    }
                    node
                }
                EventKind::Wake { node } => {
                    if self.wake_at[node] == Some(t) {
                        self.wake_at[node] = None;
                    }
                    if !self.running[node] || self.stalled_until[node].is_some() {
                        continue;
                    }
                    let deadline = if self.armed_in[node] == self.run {
                        let armed = self.deadline[node];
                        debug_assert_eq!(
                            armed,
                            self.node(node).poll_timeout(),
                            "node {node} was changed during a run without Fabric::touch"
                        );
                        armed
                    } else {
                        self.node(node).poll_timeout()
                    };
                    if deadline.is_some_and(|d| d <= now) {
                        self.node(node).handle_timeout(now);
                    }
                    node
                }
                EventKind::Resume { node } => {
                    if self.stalled_until[node] != Some(t) {
                        continue;
                    }
                    self.stalled_until[node] = None;
                    self.resume(node);
                    node
                }
            };
            self.flush(i);
            after(self, i);
        }
        self.now = self.now.max(until);
    }

    /// A stopped node runs again: what reached it meanwhile, then its
    /// timers (the caller flushes it, which re-arms its wake-up).
    fn resume(&mut self, i: usize) {
        let now = self.now;
        for stashed in std::mem::take(&mut self.inbox[i]) {
            self.stashed += 1;
            match stashed {
                Stashed::Encoded { port, data } => self.node(i).handle_datagram(now, port, data),
                Stashed::Decoded { port, slot } => {
                    let mut d = std::mem::take(&mut self.decoded[slot as usize]);
                    self.node(i).handle_decoded(now, port, &mut d);
                    self.decoded[slot as usize] = d;
                    self.free_slot(slot);
                }
            }
        }
        self.wake_at[i] = None;
        if self.node(i).poll_timeout().is_some_and(|d| d <= now) {
            self.node(i).handle_timeout(now);
        }
    }

    /// The time of the next event, if any.
    pub fn next_event_time(&mut self) -> Option<u64> {
        self.sched.peek_time()
    }

    /// Runs until every host has sent everything and no flit has been
    /// received anywhere for `quiet_ns`, or until `limit_ns`. Returns true
    /// if the fabric went quiet (false: the limit was hit).
    pub fn run_to_quiescence(&mut self, step_ns: u64, quiet_ns: u64, limit_ns: u64) -> bool {
        let received = |f: &Self| -> u64 {
            f.hosts
                .iter()
                .map(|h| h.sink().stats().received_flits)
                .sum()
        };
        let mut last = received(self);
        let mut last_change = self.now;
        while self.now < limit_ns {
            let next = (self.now + step_ns).min(limit_ns);
            self.run_until(next);
            let r = received(self);
            if r != last {
                last = r;
                last_change = self.now;
            }
            if self.hosts.iter().all(HostEndpoint::is_drained)
                && self.now.saturating_sub(last_change) >= quiet_ns
            {
                return true;
            }
        }
        false
    }
}

/// Shortest-path linear forwarding tables, a test/sim utility (the real
/// routing engines live in [`crate::routing`]).
///
/// For each destination host, every switch forwards to a neighbour one hop
/// closer. Ties are broken so that the result is deadlock-free on the
/// families the simulator is tested on:
/// - meshes and hypercubes: the lowest-numbered port, which with the
///   generators' port numbering (`1+2d`/`2+2d`, `1+b`) corrects the lowest
///   dimension first: dimension-order (XY) routing and e-cube;
/// - fat trees: `candidates[dest mod #candidates]` (Dmodk-like spreading);
///   minimal fat-tree paths go up then down, so any choice is deadlock-free.
///
/// Tori are *not* deadlock-free with these tables (they would need
/// datelines); other topologies get shortest paths with no such guarantee.
pub fn shortest_path_lfts(topo: &Topology) -> RoutingTables {
    shortest_path_lfts_avoiding(topo, &FaultSet::none())
}

/// [`shortest_path_lfts`] on what `faults` leaves of the topology (the
/// controller's re-routing after a switch died, for SBRP tests): paths
/// avoid failed switches and links; destinations cut off get no entry.
pub fn shortest_path_lfts_avoiding(topo: &Topology, faults: &FaultSet) -> RoutingTables {
    let faults = faults.clone();
    let hosts = topo.num_hosts();
    let spread = topo.family.is_fat_tree();
    let mut lfts = vec![
        Lft {
            ports: vec![None; hosts]
        };
        topo.num_switches()
    ];
    for dest in 0..hosts as u32 {
        // Links are full duplex in every family this serves, so distances
        // from the destination are distances to it.
        let dist = topo.distances_from(NodeRef::Host(dest), &faults);
        let dist_of = |n: NodeRef| match n {
            NodeRef::Host(h) if h == dest => Some(0),
            NodeRef::Host(_) => None,
            NodeRef::Switch(s) => dist[hosts + s as usize],
        };
        for (s, lft) in lfts.iter_mut().enumerate() {
            let Some(d) = dist_of(NodeRef::Switch(s as u32)) else {
                continue;
            };
            let candidates: Vec<PortNo> = topo
                .out_neighbours(NodeRef::Switch(s as u32), &faults)
                .into_iter()
                .filter(|(_, peer)| dist_of(peer.node) == Some(d.wrapping_sub(1)))
                .map(|(port, _)| port)
                .collect();
            if candidates.is_empty() {
                continue;
            }
            let pick = if spread {
                candidates[dest as usize % candidates.len()]
            } else {
                candidates[0]
            };
            lft.ports[dest as usize] = Some(pick);
        }
    }
    RoutingTables {
        engine: "sim-shortest-path".into(),
        switches: lfts.into_iter().map(SwitchTable::Lft).collect(),
        vcs: 1,
        vc_policy: Vec::new(),
    }
}

/// How to build a simulated fabric: one host template (its `link` is used
/// for every link, switch ports included, since both ends of a link must
/// agree on VCs and buffer depth), the switching mode, and the wire latency.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub host: HostConfig,
    pub switching: Switching,
    /// Switches' traversal latency and crossbar speedup.
    pub switch_timing: SwitchTiming,
    /// Time a datagram spends between two nodes, on top of the links'
    /// `propagation_ns` (the simulator's links do not count transit time).
    pub wire_ns: u64,
}

/// Why a fabric could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Host(#[from] endpoint::ConfigError),
    #[error("switch {switch}: {source}")]
    Switch {
        switch: SwitchId,
        #[source]
        source: link::ConfigError,
    },
    #[error("the routing tables cover {tables} switches, the topology has {switches}")]
    TableCount { tables: usize, switches: usize },
}

/// Builds the whole fabric of `topo`: one host endpoint per host, one switch
/// per switch with its table from `tables` installed.
pub fn build_fabric(
    topo: Topology,
    tables: &RoutingTables,
    cfg: &SimConfig,
) -> Result<Fabric<Switch>, SimError> {
    if tables.switches.len() != topo.num_switches() {
        return Err(SimError::TableCount {
            tables: tables.switches.len(),
            switches: topo.num_switches(),
        });
    }
    let hosts = hosts_for(&topo, &cfg.host)?;
    let switches = topo
        .switches
        .iter()
        .map(|sw| {
            let mut s = fresh_switch(&topo, cfg, sw.id, cfg.host.epoch)?;
            s.install_table(
                tables.switches[sw.id as usize].clone(),
                tables.vc_policy(sw.id as usize).clone(),
            );
            Ok(s)
        })
        .collect::<Result<Vec<_>, SimError>>()?;
    Ok(Fabric::new(topo, hosts, switches, cfg.wire_ns))
}

/// Switch `s` of `topo` as a fresh process with link epoch `epoch`: the
/// configuration `cfg` gives every switch, its uncabled ports down (their
/// links would otherwise keep sending sync records into the void), no
/// table yet. [`build_fabric`] makes every switch so; a simulated restart
/// makes one again ([`Fabric::replace_switch`]).
pub fn fresh_switch(
    topo: &Topology,
    cfg: &SimConfig,
    s: SwitchId,
    epoch: u16,
) -> Result<Switch, SimError> {
    let link = &cfg.host.link;
    let ports = &topo.switches[s as usize].ports;
    let sc = SwitchConfig {
        radix: ports.len(),
        vcs: link.vcs,
        buffer_depth: link.buffer_depth,
        switching: cfg.switching,
        link: link.clone(),
        max_packet_flits: cfg.host.source.max_packet_flits.min(u16::MAX as u32) as u16,
        timing: cfg.switch_timing,
    };
    let mut sw =
        Switch::with_epoch(sc, epoch).map_err(|source| SimError::Switch { switch: s, source })?;
    for (port, cable) in ports.iter().enumerate() {
        if cable.is_none() {
            let _ = sw.set_port_admin(port as PortNo, false);
        }
    }
    Ok(sw)
}

impl Fabric<Switch> {
    /// Puts `fresh` in switch `s`'s place (a restarted process) and brings
    /// its switch neighbours' ports toward it up again, as a neighbour does
    /// when it hears the new incarnation; their links resynchronise
    /// credits against its new epoch.
    pub fn replace_switch(&mut self, s: SwitchId, fresh: Switch) {
        self.switches[s as usize] = fresh;
        let radix = self.topo.switches[s as usize].ports.len();
        for p in 0..radix {
            if let Some(peer) = self.topo.peer(PortRef::switch(s, p as PortNo)) {
                if let NodeRef::Switch(n) = peer.node {
                    let _ = self.switches[n as usize].set_port_admin(peer.port, true);
                }
            }
        }
        self.wake_all();
    }
}

/// Host endpoints for every host of `topo` from one template: the template's
/// `host`/`hosts` are overwritten, every host shares `seed` (each draws from
/// its own ChaCha stream, see [`crate::host::source::Source::new`]).
pub fn hosts_for(
    topo: &Topology,
    template: &HostConfig,
) -> Result<Vec<HostEndpoint>, endpoint::ConfigError> {
    (0..topo.num_hosts() as u32)
        .map(|h| -> Result<HostEndpoint, endpoint::ConfigError> {
            let mut c = template.clone();
            c.host = h;
            c.hosts = topo.num_hosts() as u32;
            HostEndpoint::new(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::endpoint::InjectionVc;
    use crate::host::message::split_message_id;
    use crate::host::sink::Delivery;
    use crate::host::source::{MessageLength, OfferedLoad, SourceConfig};
    use crate::host::traffic::TrafficPattern;
    use crate::link::LinkConfig;
    use crate::topology::generators::{hypercube, kary_ntree, mesh_or_torus};
    use crate::topology::{Family, HostId};

    pub(super) fn host_template(pattern: TrafficPattern, vcs: u8, seed: u64) -> HostConfig {
        HostConfig {
            host: 0,
            hosts: 0,
            source: SourceConfig {
                pattern,
                load: OfferedLoad::FlitsPerSecond { rate: 2e6 },
                length: MessageLength::Uniform { min: 1, max: 10 },
                max_packet_flits: 4,
                payload_bytes: 16,
                queue_capacity: 16,
                ..SourceConfig::default()
            },
            injection: InjectionVc::default(),
            link: LinkConfig {
                vcs,
                buffer_depth: 4,
                bandwidth_flits_per_s: Some(50_000_000),
                propagation_ns: 0,
                keepalive_interval_ns: 200_000,
                dead_after_ns: 5_000_000,
                credit_coalesce_ns: 500,
                ..LinkConfig::default()
            },
            epoch: 1,
            seed,
            record_trace: true,
        }
    }

    /// Both queues pop every event in (time, insertion number) order,
    /// whether it was queued for the instant being processed (the FIFO),
    /// within the current bucket, on the wheel or beyond its horizon, and
    /// a datagram comes back with its own bytes.
    #[test]
    fn the_queues_pop_in_time_then_insertion_order() {
        for kind in [QueueKind::Wheel, QueueKind::Heap] {
            let mut q = Scheduler::new(kind);
            let mut expected = std::collections::BTreeMap::new();
            let mut seq = 0u64;
            let mut now = 0u64;
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            for step in 0..20_000 {
                let r = next();
                if r % 5 < 3 || q.is_empty() {
                    let delta = match (r >> 8) % 4 {
                        0 => 0,
                        1 => (r >> 16) % WHEEL_SLOT_NS,
                        2 => (r >> 16) % (WHEEL_SLOT_NS * 8),
                        _ => (r >> 16) % (WHEEL_SLOT_NS * WHEEL_SLOTS as u64 * 2),
                    };
                    let at = now + delta;
                    let kind = if r & (1 << 40) != 0 {
                        EventKind::Arrive {
                            node: step,
                            port: 3,
                            data: Bytes::from(step.to_le_bytes().to_vec()),
                        }
                    } else {
                        EventKind::Wake { node: step }
                    };
                    q.push(at, kind);
                    expected.insert((at, seq), step);
                    seq += 1;
                } else {
                    let ((at, _), step) = expected.pop_first().expect("queue not empty");
                    let (t, kind) = q.pop().expect("an event is queued");
                    assert_eq!(t, at, "{kind:?}");
                    match kind {
                        EventKind::Arrive { node, data, .. } => {
                            assert_eq!(node, step);
                            assert_eq!(data.as_ref(), &step.to_le_bytes());
                        }
                        EventKind::ArriveDecoded { .. } => unreachable!("none queued"),
                        EventKind::Wake { node } => assert_eq!(node, step),
                        EventKind::Resume { .. } => unreachable!("none queued"),
                    }
                    now = t;
                }
                assert_eq!(q.len(), expected.len());
            }
        }
    }

    #[test]
    fn back_to_back_fabric_runs_all_to_all_to_completion() {
        let mut topo = Topology::new("pair", Family::Custom);
        for h in 0..2 {
            topo.add_host(format!("h{h}"), 1);
        }
        topo.connect(PortRef::host(0, 0), PortRef::host(1, 0), true)
            .unwrap();
        let t = host_template(TrafficPattern::AllToAll { rounds: 50 }, 1, 3);
        let hosts = hosts_for(&topo, &t).unwrap();
        let mut f: Fabric<NoSwitch> = Fabric::new(topo, hosts, Vec::new(), 1_000);
        f.start(0);
        assert!(f.run_to_quiescence(100_000, 500_000, 1_000_000_000));
        for h in &f.hosts {
            let r = h.report();
            assert_eq!(r.source.generated_messages, 50);
            assert_eq!(r.sink.delivered_messages, 50);
            assert_eq!(r.sink.out_of_order_messages, 0);
        }
        assert_eq!(f.unroutable, 0);
    }

    /// Follows the tables from `src`'s switch to `dst`; returns the hop
    /// count, or panics on a loop or a hole.
    fn walk(topo: &Topology, rt: &RoutingTables, src: HostId, dst: HostId) -> usize {
        let mut at = topo.peer(PortRef::host(src, 0)).unwrap();
        for hops in 1..=topo.num_switches() + 1 {
            let NodeRef::Switch(s) = at.node else {
                assert_eq!(at.node, NodeRef::Host(dst));
                return hops;
            };
            let port = rt.switches[s as usize].lookup(dst).expect("hole in table");
            at = topo.peer(PortRef::switch(s, port)).unwrap();
        }
        panic!("loop from {src} to {dst}");
    }

    #[test]
    fn tables_reach_every_destination_minimally() {
        for topo in [
            kary_ntree(4, 2).unwrap(),
            mesh_or_torus(&[3, 3], false).unwrap(),
            hypercube(4).unwrap(),
        ] {
            let rt = shortest_path_lfts(&topo);
            for s in 0..topo.num_hosts() as u32 {
                let d_all = topo.distances_from(NodeRef::Host(s), &FaultSet::none());
                for d in 0..topo.num_hosts() as u32 {
                    if s != d {
                        assert_eq!(
                            Some(walk(&topo, &rt, s, d) as u32),
                            d_all[d as usize],
                            "{}: {s} -> {d}",
                            topo.name
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn mesh_tables_are_dimension_order() {
        // 3x3 mesh, from router 0 (0,0) to host 8 (2,2): +x first (port 1).
        let topo = mesh_or_torus(&[3, 3], false).unwrap();
        let rt = shortest_path_lfts(&topo);
        assert_eq!(rt.switches[0].lookup(8), Some(1));
        // From router 2 (2,0): x done, +y (port 3).
        assert_eq!(rt.switches[2].lookup(8), Some(3));
    }

    /// Runs all-to-all (`rounds` rounds) on `topo` with shortest-path tables
    /// and checks exactly-once, in-order delivery and zero drops; returns
    /// every host's delivery trace.
    fn all_to_all(topo: Topology, rounds: u32, seed: u64) -> Vec<Vec<Delivery>> {
        all_to_all_at(topo, rounds, seed, 2e6)
    }

    fn all_to_all_at(topo: Topology, rounds: u32, seed: u64, rate: f64) -> Vec<Vec<Delivery>> {
        let tables = shortest_path_lfts(&topo);
        all_to_all_with(topo, &tables, rounds, seed, rate)
    }

    fn all_to_all_with(
        topo: Topology,
        tables: &RoutingTables,
        rounds: u32,
        seed: u64,
        rate: f64,
    ) -> Vec<Vec<Delivery>> {
        let n = topo.num_hosts() as u32;
        let mut host = host_template(TrafficPattern::AllToAll { rounds }, 1, seed);
        host.source.load = OfferedLoad::FlitsPerSecond { rate };
        let cfg = SimConfig {
            host,
            switching: Switching::Wormhole,
            switch_timing: SwitchTiming::default(),
            wire_ns: 1_000,
        };
        let name = topo.name.clone();
        let mut f = build_fabric(topo, tables, &cfg).unwrap();
        f.start(0);
        assert!(
            f.run_to_quiescence(50_000, 200_000, 2_000_000_000),
            "{name}: did not finish"
        );
        let expected = rounds as u64 * (n as u64 - 1);
        for h in &f.hosts {
            let r = h.report();
            let me = r.host;
            assert_eq!(r.source.generated_messages, expected, "{name} host {me}");
            assert_eq!(r.source.messages_sent, expected, "{name} host {me}");
            assert_eq!(r.sink.delivered_messages, expected, "{name} host {me}");
            assert_eq!(r.sink.duplicate_messages, 0, "{name} host {me}");
            assert_eq!(r.sink.out_of_order_messages, 0, "{name} host {me}");
            assert_eq!(
                r.sink.corrupted_flits + r.sink.orphan_flits,
                0,
                "{name} host {me}"
            );
            assert_eq!(r.sink.incomplete_packets + r.sink.misdelivered_packets, 0);
            assert_eq!(r.partial_messages, 0);
            // Per flow: messages 0..rounds, in order, once each.
            let mut per_src = vec![Vec::new(); n as usize];
            for d in h.delivery_trace() {
                let (dst, seq) = split_message_id(d.msg);
                assert_eq!(dst, me);
                per_src[d.src as usize].push(seq);
            }
            for (src, seqs) in per_src.iter().enumerate() {
                let want: Vec<u32> = if src as u32 == me {
                    vec![]
                } else {
                    (0..rounds).collect()
                };
                assert_eq!(seqs, &want, "{name}: flow {src} -> {me}");
            }
        }
        for (i, s) in f.switches.iter().enumerate() {
            assert_eq!(
                s.counters().drops.total(),
                0,
                "{name} switch {i}: {:?}",
                s.counters().drops
            );
            assert_eq!(s.counters().truncated_packets, 0);
        }
        assert_eq!(f.unroutable, 0);
        f.hosts
            .iter()
            .map(|h| h.delivery_trace().to_vec())
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]
        /// Random small PGFTs with parallel links (p up to 3) run all-to-all
        /// under Dmodk (which spreads destinations over the parallel
        /// links) lossless, exactly once and in order: each parallel cable
        /// is a link of its own.
        #[test]
        fn random_pgfts_with_parallel_links_deliver_exactly_once(
            m0 in 2u32..=3,
            upper in proptest::collection::vec((2u32..=3, 1u32..=2, 1u32..=3), 1..=2),
            seed in 0u64..1000,
        ) {
            use crate::topology::PgftParams;
            // Hosts are single-homed (w_0 = p_0 = 1), as Dmodk needs.
            let levels: Vec<(u32, u32, u32)> =
                std::iter::once((m0, 1, 1)).chain(upper).collect();
            let params = PgftParams {
                m: levels.iter().map(|l| l.0).collect(),
                w: levels.iter().map(|l| l.1).collect(),
                p: levels.iter().map(|l| l.2).collect(),
            };
            let topo = crate::topology::generators::pgft(&params).unwrap();
            let tables = crate::routing::registry::engine("dmodk")
                .unwrap()
                .route(&topo, &FaultSet::none())
                .unwrap();
            all_to_all_with(topo, &tables, 2, seed, 2e6);
        }
    }

    /// Seed 004 in the data plane: all-to-all on `topo` with the link from
    /// router 0 in +X dead (both ends down) and every host routing with
    /// `mech` around it; `vcs` VCs per link. Returns the fabric after
    /// quiescence, having checked exactly-once delivery and zero drops.
    fn all_to_all_around_a_dead_link(
        topo: Topology,
        mech: crate::mechanism::intermediate::Mechanisms,
        vcs: u8,
    ) -> Fabric<Switch> {
        use crate::mechanism::intermediate::IntermediateRoutes;
        use crate::routing::adaptive::{leg_tables_ordered, EscapeOrder};
        use crate::topology::generators::direct_port;
        let legs = mech.max_intermediates + 1;
        let order = if mech.misroute {
            EscapeOrder::DirectionOrder
        } else {
            EscapeOrder::Dor
        };
        let tables = leg_tables_ordered(&topo, legs, order).unwrap();
        assert!(tables.vcs <= vcs + 1);
        let rounds = 2;
        let mut host = host_template(TrafficPattern::AllToAll { rounds }, vcs, 5);
        host.link.buffer_depth = 8;
        let cfg = SimConfig {
            host,
            switching: Switching::Wormhole,
            switch_timing: SwitchTiming::default(),
            wire_ns: 1_000,
        };
        let dead = PortRef::switch(0, direct_port(0, true));
        let l = topo.link_at(dead).unwrap();
        let other = topo.links[l as usize].other(dead).unwrap();
        let faults = FaultSet::with_links([l]);
        let mut f = build_fabric(topo.clone(), &tables, &cfg).unwrap();
        for end in [dead, other] {
            let NodeRef::Switch(s) = end.node else {
                panic!()
            };
            f.switches[s as usize]
                .set_port_admin(end.port, false)
                .unwrap();
        }
        for h in 0..topo.num_hosts() as u32 {
            let r = IntermediateRoutes::plan(&topo, &faults, h, &mech, legs).unwrap();
            assert_eq!(r.summary().not_tolerated, 0, "{mech} tolerates one fault");
            f.hosts[h as usize].set_intermediate_routes(Some(r));
        }
        f.start(0);
        assert!(
            f.run_to_quiescence(50_000, 200_000, 2_000_000_000),
            "did not finish"
        );
        let expected = rounds as u64 * (topo.num_hosts() as u64 - 1);
        for h in &f.hosts {
            let r = h.report();
            assert_eq!(r.sink.delivered_messages, expected, "host {}", r.host);
            assert_eq!(r.sink.duplicate_messages + r.sink.misdelivered_packets, 0);
        }
        for s in &f.switches {
            assert_eq!(s.counters().drops.total(), 0, "{:?}", s.counters().drops);
        }
        f
    }

    #[test]
    fn intermediate_nodes_route_all_to_all_around_a_dead_torus_link() {
        use crate::mechanism::intermediate::Mechanisms;
        // 2 legs × dateline pair + 1 adaptive VC.
        let f = all_to_all_around_a_dead_link(
            mesh_or_torus(&[3, 3], true).unwrap(),
            Mechanisms::i(),
            5,
        );
        let via: u64 = f
            .hosts
            .iter()
            .map(|h| h.intermediate_stats().packets_via_intermediate)
            .sum();
        let pops: u64 = f
            .switches
            .iter()
            .map(|s| s.counters().intermediate_pops)
            .sum();
        assert!(via > 0);
        // Every packet with one intermediate is popped exactly once, and
        // never ejected there (no host saw a packet for someone else).
        assert_eq!(pops, via);
    }

    #[test]
    fn without_adaptive_vcs_the_second_leg_travels_on_its_own_escape_vcs() {
        use crate::mechanism::intermediate::Mechanisms;
        // 4 VCs = 2 legs × dateline pair, no adaptive VC: every flit is on
        // its leg's escape set, so leg 1's VCs (2, 3) carry exactly the
        // second legs.
        let f = all_to_all_around_a_dead_link(
            mesh_or_torus(&[3, 3], true).unwrap(),
            Mechanisms::i(),
            4,
        );
        let on = |vcs: std::ops::Range<usize>| -> u64 {
            f.switches
                .iter()
                .flat_map(|s| s.counters().ports.iter())
                .flat_map(|p| p.vcs[vcs.clone()].iter())
                .map(|v| v.tx_flits)
                .sum()
        };
        assert!(on(2..4) > 0, "no flit on leg 1's escape VCs");
        assert!(on(0..2) > on(2..4));
    }

    #[test]
    fn misroute_runs_are_taken_hop_by_hop_and_then_the_leg_ends() {
        use crate::mechanism::intermediate::Mechanisms;
        // M alone (one leg, direction-order escape), then I+M and I+D+M.
        for (mech, vcs) in [
            (Mechanisms::m(), 3),
            (Mechanisms::i_m(), 5),
            (Mechanisms::i_d_m(), 5),
        ] {
            let f = all_to_all_around_a_dead_link(mesh_or_torus(&[3, 3], true).unwrap(), mech, vcs);
            let misrouted: u64 = f
                .hosts
                .iter()
                .map(|h| h.intermediate_stats().packets_misrouted)
                .sum();
            let hops: u64 = f.switches.iter().map(|s| s.counters().misroute_hops).sum();
            if mech == Mechanisms::m() {
                assert!(misrouted > 0, "{mech}: no packet was misrouted");
            }
            // Every forced hop of every misrouted packet was taken.
            assert!(
                hops >= misrouted,
                "{mech}: {hops} forced hops, {misrouted} packets"
            );
        }
    }

    #[test]
    fn two_intermediates_and_d_bits_go_around_a_blocked_mesh_row() {
        use crate::mechanism::intermediate::Mechanisms;
        // Mesh: some pairs need two INs (I×2) or a deterministic leg (I+D).
        let f = all_to_all_around_a_dead_link(
            mesh_or_torus(&[3, 3], false).unwrap(),
            Mechanisms::i_x(2),
            4,
        );
        let pops: u64 = f
            .switches
            .iter()
            .map(|s| s.counters().intermediate_pops)
            .sum();
        let via: u64 = f
            .hosts
            .iter()
            .map(|h| h.intermediate_stats().packets_via_intermediate)
            .sum();
        assert!(pops > via, "some packets crossed two intermediates");
        let f = all_to_all_around_a_dead_link(
            mesh_or_torus(&[3, 3], false).unwrap(),
            Mechanisms::i_d(),
            3,
        );
        let det: u64 = f
            .hosts
            .iter()
            .map(|h| h.intermediate_stats().packets_deterministic)
            .sum();
        assert!(det > 0, "I+D used its D bits");
    }

    #[test]
    fn all_to_all_on_a_4_ary_2_tree_is_exactly_once_and_in_order() {
        all_to_all(kary_ntree(4, 2).unwrap(), 3, 1);
    }

    #[test]
    fn all_to_all_on_a_3x3_mesh_is_exactly_once_and_in_order() {
        all_to_all(mesh_or_torus(&[3, 3], false).unwrap(), 3, 1);
    }

    #[test]
    fn all_to_all_on_a_4_cube_is_exactly_once_and_in_order() {
        all_to_all(hypercube(4).unwrap(), 3, 1);
    }

    /// A 4-ary 2-tree 20 µs into three rounds of all-to-all traffic (its
    /// links up, packets crossing the top switches).
    fn all_to_all_under_way() -> Fabric<Switch> {
        let topo = kary_ntree(4, 2).unwrap();
        let tables = shortest_path_lfts(&topo);
        let mut host = host_template(TrafficPattern::AllToAll { rounds: 3 }, 1, 7);
        host.source.load = OfferedLoad::FlitsPerSecond { rate: 2e6 };
        let cfg = SimConfig {
            host,
            switching: Switching::Wormhole,
            switch_timing: SwitchTiming::default(),
            wire_ns: 1_000,
        };
        let mut f = build_fabric(topo, &tables, &cfg).unwrap();
        f.start(0);
        f.run_until(20_000);
        f
    }

    /// A switch stopped for less than keepalive detection (SIGSTOP, or a
    /// process starved of CPU) loses nothing: what reached it waited, its
    /// neighbours' credits held their flits back, no port went down, and
    /// every flow is still delivered exactly once and in order.
    #[test]
    fn a_switch_stopped_for_less_than_detection_loses_nothing() {
        let mut f = all_to_all_under_way();
        // A top switch, on half the paths; dead_after is 5 ms.
        let top = NodeRef::Switch(4);
        f.stall(top, 3_020_000);
        assert_eq!(f.stalled_until(top), Some(3_020_000));
        f.run_until(3_000_000);
        assert!(!f.inbox[f.index(top)].is_empty(), "nothing reached it");
        assert!(f.run_to_quiescence(50_000, 200_000, 2_000_000_000));
        assert_eq!(f.stalled_until(top), None);
        assert!(f.stashed > 0);
        assert_eq!(f.lost_to_stopped, 0);
        for h in &f.hosts {
            let r = h.report();
            assert_eq!(r.sink.delivered_messages, 3 * 15, "host {}", r.host);
            assert_eq!(r.sink.out_of_order_messages + r.sink.duplicate_messages, 0);
        }
        for s in &f.switches {
            assert_eq!(s.counters().drops.total(), 0, "{:?}", s.counters().drops);
        }
    }

    /// A stopped switch killed before it runs again loses what waited for
    /// it, as a SIGKILL loses the socket buffer's contents, and a stale
    /// resume does not wake the dead process.
    #[test]
    fn a_stopped_switch_killed_loses_what_waited_for_it() {
        let mut f = all_to_all_under_way();
        let top = NodeRef::Switch(4);
        f.stall(top, 1_000_000);
        f.run_until(500_000);
        let waiting = f.inbox[f.index(top)].len() as u64;
        assert!(waiting > 0);
        f.set_running(top, false);
        assert_eq!(f.lost_to_stopped, waiting);
        assert_eq!(f.stalled_until(top), None);
        f.run_until(2_000_000);
        assert!(!f.is_running(top));
        assert_eq!(f.stashed, 0);
    }

    /// The switches' port index (only ports with work are visited) gives
    /// every switch the deadline its links give when each is asked, after
    /// every event of a loaded fabric with paced links, a traversal
    /// latency and a link that goes down and comes back.
    #[test]
    fn the_port_index_keeps_every_switchs_deadline_exact() {
        let topo = kary_ntree(4, 2).unwrap();
        let tables = shortest_path_lfts(&topo);
        let mut host = host_template(TrafficPattern::AllToAll { rounds: 20 }, 2, 7);
        host.link.bandwidth_flits_per_s = Some(1_000_000);
        host.link.propagation_ns = 3_000;
        let cfg = SimConfig {
            host,
            switching: Switching::Wormhole,
            switch_timing: SwitchTiming {
                traversal_ns: 4_000,
                crossbar_speedup: 1,
            },
            wire_ns: 500,
        };
        let mut f = build_fabric(topo, &tables, &cfg).unwrap();
        f.start(0);
        let mut checked = 0u64;
        let mut check = |f: &mut Fabric<Switch>, i: usize| {
            let h = f.hosts.len();
            if i < h {
                return;
            }
            let now = f.now();
            let sw = &f.switches[i - h];
            let indexed = sw.poll_timeout().map(|t| t.max(now));
            let asked = sw.poll_timeout_of_every_link().map(|t| t.max(now));
            assert_eq!(indexed, asked, "switch {} at {now}", i - h);
            checked += 1;
        };
        f.run_until_observed(2_000_000, &mut check);
        let _ = f.switches[0].set_port_admin(4, false);
        f.touch(NodeRef::Switch(0));
        f.run_until_observed(4_000_000, &mut check);
        let _ = f.switches[0].set_port_admin(4, true);
        f.touch(NodeRef::Switch(0));
        f.run_until_observed(30_000_000, &mut check);
        assert!(checked > 10_000, "{checked} events checked");
        let delivered: u64 = f
            .hosts
            .iter()
            .map(|h| h.report().sink.delivered_messages)
            .sum();
        assert!(delivered > 1_000, "{delivered}");
    }

    /// A fabric handing datagrams over decoded runs exactly as one that
    /// encodes and decodes every datagram, as the daemons do.
    #[test]
    fn decoded_datagrams_give_the_same_run_as_encoded_ones() {
        let run = |encode: bool| {
            let topo = crate::topology::generators::kary_ntree(4, 2).unwrap();
            let rt = shortest_path_lfts(&topo);
            let mut host = host_template(TrafficPattern::Uniform, 2, 5);
            host.source.load = OfferedLoad::FlitsPerSecond { rate: 20e6 };
            host.link.propagation_ns = 700;
            let cfg = SimConfig {
                host,
                switching: Switching::Wormhole,
                switch_timing: SwitchTiming::default(),
                wire_ns: 0,
            };
            let mut f = build_fabric(topo, &rt, &cfg).unwrap();
            f.set_encode_all(encode);
            f.start(0);
            f.run_until(300_000);
            let hosts: Vec<String> = f
                .hosts
                .iter()
                .map(|h| format!("{:?} {:?}", h.report(), h.delivery_trace()))
                .collect();
            let switches: Vec<String> = f
                .switches
                .iter()
                .map(|s| format!("{:?}", s.counters()))
                .collect();
            (hosts, switches, f.events, f.datagrams)
        };
        let decoded = run(false);
        assert!(decoded.3 > 1_000, "{} datagrams", decoded.3);
        assert_eq!(decoded, run(true));
    }

    #[test]
    fn same_seed_same_traces_other_seed_other_traces() {
        let topo = mesh_or_torus(&[3, 3], false).unwrap();
        let a = all_to_all(topo.clone(), 2, 7);
        assert_eq!(a, all_to_all(topo.clone(), 2, 7));
        assert_ne!(a, all_to_all(topo, 2, 8));
    }

    #[test]
    fn all_to_all_near_saturation_on_a_mesh_still_delivers_everything_in_order() {
        // 40 Mflit/s offered per host on 50 Mflit/s links: queues fill,
        // worms block across switches, dimension order keeps it deadlock-free.
        all_to_all_at(mesh_or_torus(&[3, 3], false).unwrap(), 6, 4, 40e6);
    }

    #[test]
    fn uniform_load_with_round_robin_vcs_loses_nothing_on_a_fat_tree() {
        let topo = kary_ntree(4, 2).unwrap();
        let tables = shortest_path_lfts(&topo);
        let mut host = host_template(TrafficPattern::Uniform, 2, 9);
        host.injection = InjectionVc::RoundRobin;
        host.source.load = OfferedLoad::FlitsPerSecond { rate: 20e6 };
        host.source.duration_ns = Some(300_000);
        let cfg = SimConfig {
            host,
            switching: Switching::VirtualCutThrough,
            switch_timing: SwitchTiming::default(),
            wire_ns: 1_000,
        };
        let mut f = build_fabric(topo, &tables, &cfg).unwrap();
        f.start(0);
        assert!(f.run_to_quiescence(50_000, 200_000, 2_000_000_000));
        let total = |g: fn(&crate::host::endpoint::HostReport) -> u64| -> u64 {
            f.hosts.iter().map(|h| g(&h.report())).sum()
        };
        let generated = total(|r| r.source.generated_messages);
        assert!(generated > 1_000, "{generated}");
        assert_eq!(total(|r| r.sink.delivered_messages), generated);
        assert_eq!(
            total(|r| r.sink.delivered_flits),
            total(|r| r.source.generated_flits)
        );
        assert_eq!(
            total(|r| r.sink.duplicate_messages + r.sink.corrupted_flits),
            0
        );
        assert!(f.switches.iter().all(|s| s.counters().drops.total() == 0));
        // Both VCs carried traffic out of every host.
        for h in &f.hosts {
            let tx = h.link().stats().tx_flits;
            assert!(tx[0] > 0 && tx[1] > 0, "{tx:?}");
        }
    }
}
