//! The switch core: an input-buffered, credit-flow-controlled VC router,
//! sans-IO. Organised as in BookSim2: [`input`] buffers, [`routing`],
//! [`vc_alloc`], [`sw_alloc`] (switch allocator) and [`output`] VC state; this
//! module glues them to one [`Link`] per port.
//!
//! Per allocation round every input VC is examined: a head at the front is
//! routed and, once it holds an output VC, each flit requests its output
//! port; the switch allocator grants one flit per output and per input
//! port; granted flits move into the output link (consuming a credit) and
//! their input slot is released (a credit owed upstream). Rounds repeat
//! until nothing moves.

pub mod counters;
pub mod ft2ei_dyn;
pub mod input;
pub mod output;
pub mod reroute;
pub mod routing;
pub mod sw_alloc;
pub mod vc_alloc;

pub use counters::{
    DropCounters, DropReason, Ft2eiCounters, PortCounters, SwitchCounters, VcCounters,
};

use crate::flit::{flags, route_flags, Flit, FlitKind};
use crate::host::sbrp::{self, RecoveryProtocol};
use crate::link::{ConfigError, Link, LinkConfig, LinkErrorCause, LinkEvent};
use crate::recovery::ft2ei_dyn::DynRoute as ft2ei_dyn_route;
use crate::routing::{SwitchTable, VcPolicy};
use crate::topology::PortNo;
use crate::wire::WireError;
use bytes::Bytes;
use input::{InState, InputVc, Tracked};
use output::OutputVcs;
use routing::Route;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use sw_alloc::SwitchAllocator;

/// How far a packet must be admitted downstream before its head moves on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Switching {
    /// A head moves as soon as it holds an output VC; flits follow as
    /// credits allow, so a blocked packet spans several switches.
    #[default]
    Wormhole,
    /// A head moves only when the downstream VC has credits for the whole
    /// packet, so a blocked packet sits entirely in one buffer.
    VirtualCutThrough,
}

/// Buffer drains in the default head-of-queue lifetime
/// ([`default_head_of_queue_lifetime_ns`]).
pub const HOQ_LIFETIME_BUFFER_DRAINS: u64 = 128;

/// The head-of-queue lifetime (see [`Switch::set_head_of_queue_lifetime`])
/// for links of `bandwidth_flits_per_s` (None: unpaced, taken as 1 µs per
/// flit) and input buffers of `buffer_depth` flits:
/// [`HOQ_LIFETIME_BUFFER_DRAINS`] times the time one full input buffer
/// takes to drain at link rate (`buffer_depth` flit times; see
/// [`default_head_of_queue_lifetime_for_packets_ns`] for long packets).
///
/// Why that long: a head that is not deadlocked waits for the worm that
/// holds its output VC, which moves as soon as the worm ahead of it does.
/// Behind a hot spot a head waits for the packets ahead of it for that
/// output (the other `(radix − 1) × vcs` input VCs, each up to a full
/// buffer), so ordinary waits are a few buffer drains; 128 leaves an order
/// of magnitude above that (in the simulator's fault-free 7×7 mesh at
/// twice the seed 003 load no head waited more than 1/30 of it, 680 ns of
/// 20 µs: `sim_hoq_tests`). Why not longer: a deadlocked head never moves,
/// the lifetime is the recovery's latency, and around two dead routers the
/// deadlock re-forms again and again (on real processes, 7×7 mesh, r10 and
/// r38 dead: 410 ms (1024 drains) still held 370 messages when the drain
/// gave up, 51 ms none; docs/sbrp.md "Deadlock"). `flitctl` adds a floor
/// for the daemons' scheduling delays.
pub fn default_head_of_queue_lifetime_ns(
    bandwidth_flits_per_s: Option<u64>,
    buffer_depth: u16,
) -> u64 {
    default_head_of_queue_lifetime_for_packets_ns(bandwidth_flits_per_s, buffer_depth, 0)
}

/// [`default_head_of_queue_lifetime_ns`] for packets of up to
/// `max_packet_flits`: a worm holds its output VC until its tail passes,
/// so with packets longer than a buffer each one ahead of a waiting head
/// costs its length, not a buffer; the drain unit is
/// `max(buffer_depth, max_packet_flits)` flit times.
pub fn default_head_of_queue_lifetime_for_packets_ns(
    bandwidth_flits_per_s: Option<u64>,
    buffer_depth: u16,
    max_packet_flits: u32,
) -> u64 {
    let flit_ns = bandwidth_flits_per_s
        .filter(|&b| b > 0)
        .map_or(1_000, |b| (1_000_000_000 / b).max(1));
    let drain = (buffer_depth as u64).max(max_packet_flits as u64).max(1);
    HOQ_LIFETIME_BUFFER_DRAINS
        .saturating_mul(drain)
        .saturating_mul(flit_ns)
}

/// Static parameters of a switch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchConfig {
    pub radix: usize,
    pub vcs: u8,
    /// Flits per input VC (overrides `link.buffer_depth`).
    pub buffer_depth: u16,
    pub switching: Switching,
    /// Per-port link parameters (`vcs` and `buffer_depth` are taken from
    /// the fields above).
    pub link: LinkConfig,
    /// Longest packet, in flits; VCT admission needs this much buffer.
    pub max_packet_flits: u16,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            radix: 4,
            vcs: 1,
            buffer_depth: 8,
            switching: Switching::Wormhole,
            link: LinkConfig::default(),
            max_packet_flits: 8,
        }
    }
}

impl SwitchConfig {
    /// The link configuration every port uses.
    pub fn port_link(&self) -> LinkConfig {
        LinkConfig {
            vcs: self.vcs,
            buffer_depth: self.buffer_depth,
            ..self.link.clone()
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, value: u64, reason| ConfigError::Invalid {
            field,
            value: value.to_string(),
            reason,
        };
        if self.radix == 0 || self.radix > PortNo::MAX as usize {
            return Err(invalid(
                "switch.radix",
                self.radix as u64,
                "must be 1..=65535",
            ));
        }
        if self.max_packet_flits == 0 {
            return Err(invalid("switch.max_packet_flits", 0, "must be positive"));
        }
        if self.switching == Switching::VirtualCutThrough
            && self.max_packet_flits > self.buffer_depth
        {
            return Err(invalid(
                "switch.max_packet_flits",
                self.max_packet_flits as u64,
                "virtual cut-through needs buffer_depth >= max_packet_flits",
            ));
        }
        self.port_link().validate()
    }
}

/// Errors of the switch API.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SwitchError {
    #[error("port {port} does not exist (radix {radix})")]
    UnknownPort { port: PortNo, radix: usize },
    #[error("bad datagram on port {port}: {source}")]
    BadDatagram {
        port: PortNo,
        #[source]
        source: WireError,
    },
}

/// What the owner should know about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchEvent {
    /// The peer on `port` spoke after silence (or for the first time), or
    /// the port was set administratively up.
    PortUp { port: PortNo },
    /// The peer on `port` went silent, or the port was set down (`admin`).
    PortDown { port: PortNo, admin: bool },
    /// The peer on `port` restarted (new epoch); link credits were reset.
    PeerRestarted { port: PortNo },
    /// A link error on `port` (detected here, or by the peer: `by_peer`):
    /// the link retrains; `PortDown` follows if it was up.
    LinkError {
        port: PortNo,
        cause: LinkErrorCause,
        by_peer: bool,
    },
    /// Flits that arrived on `port`/`vc` were dropped: one event per packet
    /// (or datagram, for `BadDatagram`).
    Dropped {
        port: PortNo,
        vc: u8,
        reason: DropReason,
        msg: u64,
    },
}

/// Events kept before the oldest are discarded (and counted).
const MAX_EVENTS: usize = 4096;

struct Port {
    link: Link,
    /// Admin down, or the peer declared dead: packets routed here are dropped.
    failed: bool,
    /// The link's `rx_bad_vc` already counted as drops.
    bad_vc_seen: u64,
}

/// An allocation decision for the head at the front of an input VC.
enum Decision {
    /// Blocked; `on_credits` names the output VC whose credits it awaits.
    Wait {
        on_credits: Option<(usize, u8)>,
    },
    Drop(DropReason),
    Grant {
        out: usize,
        out_vc: u8,
    },
}

/// A switch: `radix` ports, each one end of a [`Link`].
pub struct Switch {
    cfg: SwitchConfig,
    table: Option<SwitchTable>,
    policy: VcPolicy,
    ports: Vec<Port>,
    inputs: Vec<InputVc>,
    outputs: OutputVcs,
    alloc: SwitchAllocator,
    grants: Vec<(u16, u32)>,
    /// Input VCs that requested in the last allocation round (scratch).
    requesters: Vec<u32>,
    next_requesters: Vec<u32>,
    counters: SwitchCounters,
    events: VecDeque<SwitchEvent>,
    next_tx_port: usize,
    now: u64,
    /// Dynamic local rerouting (seed 002), when on: see [`reroute`].
    reroute: Option<crate::recovery::dlr::DlrSwitch>,
    /// Why DLR discarded the head it decided last (if it did).
    dlr_discard: Option<crate::recovery::dlr::DiscardReason>,
    /// Dynamic FT²EI (seed 000 §4.5), when on: see [`ft2ei_dyn`].
    ft2ei: Option<crate::recovery::ft2ei_dyn::Ft2eiDynSwitch>,
    /// CTRL copies to send, each bound to its port, fed through the local
    /// input ahead of the RRQs.
    ctrl_pending: VecDeque<(PortNo, Flit)>,
    /// The port of the CTRL now in the local input.
    ctrl_local_port: Option<PortNo>,
    ft2ei_error: Option<String>,
    /// SBRP (spec 003 §5): the protocol, and RRQs waiting for the local
    /// input VC (input index `radix * vcs`, which has no link).
    recovery: RecoveryProtocol,
    rrq_pending: VecDeque<Flit>,
    /// RRQs whose route leads to a dead port: kept until a new table (or
    /// the port coming back) may route them, then re-injected through the
    /// local input. Dropping them would lose the recovery they ask for.
    rrq_parked: VecDeque<Flit>,
    /// Per output VC (`port * vcs + vc`), the packets whose tail already
    /// left on it, with the VC's flit count at their tail: spec 003's R-3
    /// "shadow" of node C. A packet whose tail is among the flits the peer
    /// has not freed yet may still die on the link (case d: C no longer
    /// tracks it, and if its head died too nobody else will report it).
    shadows: Vec<VecDeque<(u64, Tracked)>>,
    sbrp: SbrpSwitchCounters,
    /// Head-of-queue lifetime (ns), when on: see
    /// [`Switch::set_head_of_queue_lifetime`].
    hoq_lifetime_ns: Option<u64>,
    /// The earliest instant a waiting head's lifetime runs out, as of the
    /// last allocation pass (a head granted since leaves it early: one
    /// spurious wake-up, after which the next pass recomputes it).
    hoq_next: Option<u64>,
}

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
}

/// RRQs a switch queues at most (a burst of cuts after a node death).
const MAX_PENDING_RRQS: usize = 4096;

/// Under DLR, the RRQ for a head DLR discards is sent at once while the
/// packet has been resent fewer times than this (its SSNF); after that it is
/// parked until a port comes back. Within DLR's guarantee one fresh route
/// from the source suffices; beyond it (more than k−1 faults, a switch fault
/// under a link-only variant) every resend may meet the same dead end, and
/// without this bound sender and switch would bounce it forever.
const DLR_EAGER_RESENDS: u16 = 8;

impl Switch {
    pub fn new(cfg: SwitchConfig) -> Result<Self, ConfigError> {
        Self::with_epoch(cfg, 1)
    }

    /// A switch whose links announce `epoch` (see [`Link::with_epoch`]).
    pub fn with_epoch(cfg: SwitchConfig, epoch: u16) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let link_cfg = cfg.port_link();
        let mut ports = Vec::with_capacity(cfg.radix);
        for p in 0..cfg.radix {
            let mut link = Link::with_epoch(link_cfg.clone(), epoch)?;
            link.set_port(p as u16);
            ports.push(Port {
                link,
                failed: false,
                bad_vc_seen: 0,
            });
        }
        let vcs = cfg.vcs as usize;
        let port_counters = PortCounters {
            vcs: vec![VcCounters::default(); vcs],
            ..PortCounters::default()
        };
        Ok(Switch {
            table: None,
            policy: VcPolicy::Keep,
            ports,
            // One extra set of VCs, the local input where the switch's own
            // RRQs enter.
            inputs: (0..(cfg.radix + 1) * vcs)
                .map(|_| InputVc::new(cfg.buffer_depth))
                .collect(),
            outputs: OutputVcs::new(cfg.radix, cfg.vcs),
            alloc: SwitchAllocator::new(cfg.radix + 1, cfg.vcs),
            grants: Vec::new(),
            requesters: Vec::new(),
            next_requesters: Vec::new(),
            counters: SwitchCounters {
                ports: vec![port_counters; cfg.radix],
                ..SwitchCounters::default()
            },
            events: VecDeque::new(),
            next_tx_port: 0,
            now: 0,
            reroute: None,
            dlr_discard: None,
            ft2ei: None,
            ctrl_pending: VecDeque::new(),
            ctrl_local_port: None,
            ft2ei_error: None,
            recovery: RecoveryProtocol::None,
            rrq_pending: VecDeque::new(),
            rrq_parked: VecDeque::new(),
            shadows: vec![VecDeque::new(); cfg.radix * vcs],
            sbrp: SbrpSwitchCounters::default(),
            hoq_lifetime_ns: None,
            hoq_next: None,
            cfg,
        })
    }

    /// Selects the recovery protocol (spec 003 §5). With one, a port that
    /// dies mid-packet no longer leaves the packet open: as node C (output
    /// died) the switch absorbs the rest and, for SBRP-0/1, sends the
    /// source a recover request; as node A (input died) it closes the
    /// packet downstream with a non-final tail. See `docs/sbrp.md`.
    pub fn set_recovery(&mut self, protocol: RecoveryProtocol) {
        self.recovery = protocol;
    }

    pub fn recovery(&self) -> RecoveryProtocol {
        self.recovery
    }

    pub fn sbrp_counters(&self) -> &SbrpSwitchCounters {
        &self.sbrp
    }

    /// Deadlock recovery by a head-of-queue lifetime, as InfiniBand
    /// switches do (HOQ lifetime) and as Disha's `t_deadlock` (spec 003
    /// §5.10): a head that has waited at the front of its input VC for an
    /// output VC for `lifetime_ns` (`Some`) without being granted one is
    /// presumed deadlocked and discarded with the rest of its worm (the
    /// flits here and those still arriving, each credited back upstream),
    /// counted as [`DropReason::HoqLifetime`]. With SBRP on, its source is
    /// asked for a resend at once, as for a head local rerouting cannot
    /// route; a recover request that waits that long is started afresh
    /// from the local input instead. `None` (the default) turns it off.
    ///
    /// A setter (as [`Switch::set_recovery`]) rather than a
    /// [`SwitchConfig`] field: it is a policy of the recovery layer, and
    /// the simulator and its tests build `SwitchConfig` field by field.
    /// The time comes from the switch's inputs (`now` of the last datagram
    /// or timeout); the deadline is part of [`Switch::poll_timeout`].
    pub fn set_head_of_queue_lifetime(&mut self, lifetime_ns: Option<u64>) {
        self.hoq_lifetime_ns = lifetime_ns.filter(|&l| l > 0);
        self.pump();
    }

    pub fn head_of_queue_lifetime(&self) -> Option<u64> {
        self.hoq_lifetime_ns
    }

    /// Flits that may be lost between C's count and A (`max_ca`, spec 003
    /// §8 item 6): B's input buffer plus what B may hold toward A (its
    /// output queue is bounded by A's credits), one buffer depth each.
    fn max_ca(&self) -> u32 {
        2 * self.cfg.buffer_depth as u32
    }

    /// Queues a recover request for a packet this switch could not carry
    /// past a dead output (as node C, spec 003 §5.11.2 `FRH_C`).
    fn report_cut(&mut self, t: Tracked) {
        self.queue_rrq(t, false);
    }

    /// Builds the RRQ for `t` (none for an RRQ, or when the protocol leaves
    /// it to the receiver) and queues it, or parks it until new tables when
    /// `park` (the packet's route is a dead port: a resend sent before the
    /// tables change would take the same dead route and be cut again).
    fn queue_rrq(&mut self, t: Tracked, park: bool) {
        if t.is_rrq {
            return;
        }
        let from = match self.recovery {
            RecoveryProtocol::None => return,
            RecoveryProtocol::Sbrp0 => t.first_seq,
            RecoveryProtocol::Sbrp1 => t.first_seq + t.forwarded.saturating_sub(self.max_ca()),
            // SBRP-2 leaves the RRQ to the receiver, unless the head itself
            // may have died in B (head loss, spec 003 §8 item 4: the hybrid
            // the digest suggests): then nothing reaches the receiver.
            RecoveryProtocol::Sbrp2 if t.forwarded <= self.max_ca() => t.first_seq,
            RecoveryProtocol::Sbrp2 => return,
        };
        if self.rrq_pending.len() + self.rrq_parked.len() >= MAX_PENDING_RRQS {
            self.sbrp.rrq_overflow += 1;
            return;
        }
        self.sbrp.rrq_sent += 1;
        let rrq = sbrp::rrq_flit(t.dst, t.src, t.msg, t.packet, t.submsg, from, 0, self.now);
        if park {
            self.sbrp.rrq_parked += 1;
            self.rrq_parked.push_back(rrq);
        } else {
            self.rrq_pending.push_back(rrq);
        }
    }

    /// Index of the first local input VC (no link behind it).
    fn local_input(&self) -> usize {
        self.cfg.radix * self.cfg.vcs as usize
    }

    /// Whether the head DLR (or seed 003's local rerouting,
    /// [`VcPolicy::LocalReroute`]) just discarded at input VC `i` may be
    /// routed again from scratch with a chance of success (no controller
    /// will install tables that would unpark it): local rerouting is on, the head came
    /// in on a link (a packet this switch injected itself was already routed
    /// from scratch), and its destination is not cut off (the leaf's host
    /// link is dead: nothing reaches it until that port is back).
    fn dlr_may_route_afresh(&self, i: usize) -> bool {
        use crate::recovery::dlr::DiscardReason;
        (self.reroute.is_some() || self.policy == VcPolicy::LocalReroute)
            && i < self.local_input()
            && self.dlr_discard != Some(DiscardReason::HostLinkDown)
    }

    /// Moves the next queued RRQ into the local input VC if it is free;
    /// returns whether it did.
    fn feed_local_input(&mut self) -> bool {
        let l = self.local_input();
        if self.inputs[l].is_empty() && self.inputs[l].state == InState::Idle {
            // Control packets first: they keep reconfiguration short (§4.5).
            if let Some((port, f)) = self.ctrl_pending.pop_front() {
                self.inputs[l].buf.push_back(f);
                self.inputs[l].synthetic_tail = true;
                self.ctrl_local_port = Some(port);
                return true;
            }
            if let Some(f) = self.rrq_pending.pop_front() {
                self.inputs[l].buf.push_back(f);
                self.inputs[l].synthetic_tail = true;
                return true;
            }
        }
        false
    }

    pub fn config(&self) -> &SwitchConfig {
        &self.cfg
    }

    /// Replaces the forwarding table and VC policy. Packets already holding
    /// an output VC finish on it; new heads use the new table.
    pub fn install_table(&mut self, table: SwitchTable, policy: VcPolicy) {
        self.table = Some(table);
        self.policy = policy;
        self.unpark_rrqs();
    }

    /// Parked RRQs get another chance (new tables, or a port back up).
    fn unpark_rrqs(&mut self) {
        self.rrq_pending.extend(self.rrq_parked.drain(..));
    }

    fn check_port(&self, port: PortNo) -> Result<usize, SwitchError> {
        if (port as usize) < self.cfg.radix {
            Ok(port as usize)
        } else {
            Err(SwitchError::UnknownPort {
                port,
                radix: self.cfg.radix,
            })
        }
    }

    /// The link of one port (read-only: credits, liveness, stats).
    pub fn link(&self, port: PortNo) -> Result<&Link, SwitchError> {
        let p = self.check_port(port)?;
        Ok(&self.ports[p].link)
    }

    /// Controller switch for one port: down stops its link and drops every
    /// packet routed to it.
    pub fn set_port_admin(&mut self, port: PortNo, up: bool) -> Result<(), SwitchError> {
        let p = self.check_port(port)?;
        if self.ports[p].link.is_admin_up() == up {
            return Ok(());
        }
        self.ports[p].link.set_admin_up(up);
        if up {
            self.ports[p].failed = false;
            self.unpark_rrqs();
            self.push_event(SwitchEvent::PortUp { port });
        } else {
            self.fail_port(p);
            self.push_event(SwitchEvent::PortDown { port, admin: true });
        }
        self.pump();
        Ok(())
    }

    /// Fault injection: the port stops (or resumes) returning credits to
    /// its peer ([`Link::set_credits_withheld`]).
    pub fn set_credits_withheld(&mut self, port: PortNo, on: bool) -> Result<(), SwitchError> {
        let p = self.check_port(port)?;
        self.ports[p].link.set_credits_withheld(on);
        Ok(())
    }

    pub fn counters(&self) -> &SwitchCounters {
        &self.counters
    }

    pub fn poll_event(&mut self) -> Option<SwitchEvent> {
        self.events.pop_front()
    }

    fn push_event(&mut self, e: SwitchEvent) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
            self.counters.events_lost += 1;
        }
        self.events.push_back(e);
    }

    /// Takes in one datagram received on `port`. A datagram that fails to
    /// decode is counted and reported as an error; nothing else changes.
    pub fn handle_datagram(
        &mut self,
        now: u64,
        port: PortNo,
        data: Bytes,
    ) -> Result<(), SwitchError> {
        let p = self.check_port(port)?;
        self.now = self.now.max(now);
        let r = self.ports[p].link.handle_datagram(now, data);
        if let Err(source) = r {
            self.count_drop(p, 0, DropReason::BadDatagram, 1, 0);
            // The link may have declared a link error and gone down.
            self.service_port(p);
            self.pump();
            return Err(SwitchError::BadDatagram { port, source });
        }
        self.service_port(p);
        self.pump();
        Ok(())
    }

    /// [`Switch::handle_datagram`] from a slice (one copy).
    pub fn handle_datagram_slice(
        &mut self,
        now: u64,
        port: PortNo,
        data: &[u8],
    ) -> Result<(), SwitchError> {
        self.handle_datagram(now, port, Bytes::copy_from_slice(data))
    }

    /// Timer processing for every port (propagation, liveness), then
    /// forwarding of whatever became possible.
    pub fn handle_timeout(&mut self, now: u64) {
        self.now = self.now.max(now);
        for p in 0..self.ports.len() {
            self.ports[p].link.handle_timeout(now);
            self.service_port(p);
        }
        self.pump();
    }

    /// Writes the next datagram for some port into `out` and returns the
    /// port, or `None` when no port has anything to send. Ports are served
    /// round-robin; call until `None`.
    pub fn poll_transmit(&mut self, now: u64, out: &mut Vec<u8>) -> Option<PortNo> {
        self.now = self.now.max(now);
        let n = self.ports.len();
        for k in 0..n {
            let p = (self.next_tx_port + k) % n;
            if self.ports[p].link.poll_transmit(now, out) {
                self.next_tx_port = (p + 1) % n;
                self.sync_port_counters(p);
                return Some(p as PortNo);
            }
        }
        None
    }

    /// Earliest time any port needs `handle_timeout` or `poll_transmit`,
    /// or a waiting head's lifetime runs out.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.ports
            .iter()
            .filter_map(|p| p.link.poll_timeout())
            .chain(self.hoq_next)
            .min()
    }

    /// Link events and newly visible flits of one port.
    fn service_port(&mut self, p: usize) {
        while let Some(e) = self.ports[p].link.poll_event() {
            let port = p as PortNo;
            match e {
                LinkEvent::PeerUp => {
                    self.ports[p].failed = false;
                    self.unpark_rrqs();
                    self.push_event(SwitchEvent::PortUp { port });
                }
                LinkEvent::PeerDown => {
                    self.fail_port(p);
                    self.push_event(SwitchEvent::PortDown { port, admin: false });
                }
                LinkEvent::PeerRestarted { .. } => {
                    self.push_event(SwitchEvent::PeerRestarted { port })
                }
                LinkEvent::LinkError { cause, by_peer } => {
                    self.push_event(SwitchEvent::LinkError {
                        port,
                        cause,
                        by_peer,
                    })
                }
            }
        }
        // The link drops flits on VCs it does not have when they arrive.
        let bad_vc = self.ports[p].link.stats().rx_bad_vc;
        if bad_vc > self.ports[p].bad_vc_seen {
            let n = bad_vc - self.ports[p].bad_vc_seen;
            self.ports[p].bad_vc_seen = bad_vc;
            self.count_drop(p, 0, DropReason::BadVc, n, 0);
        }
        let vcs = self.cfg.vcs as usize;
        while let Some(f) = self.ports[p].link.poll_received() {
            let vc = f.vc as usize;
            let c = &mut self.counters.ports[p].vcs[vc];
            c.rx_flits += 1;
            c.rx_payload_bytes += f.payload.len() as u64;
            let ivc = &mut self.inputs[p * vcs + vc];
            ivc.push(f);
            c.occupancy = ivc.len() as u32;
            c.max_occupancy = c.max_occupancy.max(c.occupancy);
        }
        self.sync_port_counters(p);
    }

    /// Copies one port's link statistics into the switch counters.
    fn sync_port_counters(&mut self, p: usize) {
        let s = self.ports[p].link.stats();
        let c = &mut self.counters.ports[p];
        c.rx_datagrams = s.rx_datagrams;
        c.tx_datagrams = s.tx_datagrams;
        c.rx_bytes = s.rx_bytes;
        c.tx_bytes = s.tx_bytes;
        c.crc_errors = s.crc_errors;
        c.bad_datagrams = s.bad_datagrams;
        c.seq_gaps = s.seq_gaps;
        c.lost_flits = s.rx_lost_flits;
        c.link_errors = s.link_errors;
        c.peer_link_resets = s.peer_link_resets;
        c.retrains = s.retrains;
        c.last_recovery_ns = s.last_recovery_ns;
        c.max_recovery_ns = s.max_recovery_ns;
        let link = &self.ports[p].link;
        for (vc, v) in c.vcs.iter_mut().enumerate() {
            v.credit_stall_ns = link.credit_stall_ns(vc as u8);
        }
    }

    /// The port died or was set down: packets bound for it are dropped from
    /// now on, and what its link still had queued is discarded.
    fn fail_port(&mut self, p: usize) {
        let newly = !self.ports[p].failed;
        self.ports[p].failed = true;
        if newly {
            self.ft2ei_local_fault(p);
        }
        if self.recovery.is_on() {
            // R-3 (spec 003 §8 item 3): packets whose tail left on this
            // port but is not yet freed by the peer may be lost with it.
            let vcs = self.cfg.vcs as usize;
            let depth = self.cfg.buffer_depth;
            for vc in 0..vcs {
                let sent = self.counters.ports[p].vcs[vc].tx_flits;
                let outstanding = depth.saturating_sub(self.ports[p].link.credits(vc as u8)) as u64;
                let shadows = std::mem::take(&mut self.shadows[p * vcs + vc]);
                for (tail_no, t) in shadows {
                    if tail_no + outstanding > sent {
                        self.sbrp.cut_packets += 1;
                        self.sbrp.shadow_reports += 1;
                        self.report_cut(t);
                    }
                }
            }
        }
        let discarded = self.ports[p].link.discard_queued();
        if discarded > 0 {
            self.counters.drops.port_down += discarded as u64;
        }
        for i in 0..self.inputs.len() {
            if let InState::Active {
                out,
                out_vc,
                started,
            } = self.inputs[i].state
            {
                if out as usize == p {
                    self.outputs.release(p, out_vc);
                    // Node C (spec 003 §5.11.2): absorb the orphans up to
                    // the tail (credits keep flowing upstream) and report.
                    self.inputs[i].state = InState::Dropping {
                        reason: DropReason::PortDown,
                    };
                    if started && self.recovery.is_on() {
                        self.sbrp.cut_packets += 1;
                        if let Some(t) = self.inputs[i].track.take() {
                            self.report_cut(t);
                        }
                    }
                }
            }
        }
    }

    fn count_drop(&mut self, port: usize, vc: u8, reason: DropReason, n: u64, msg: u64) {
        if let Some(c) = self.counters.ports.get_mut(port) {
            c.drops.add(reason, n);
        }
        self.counters.drops.add(reason, n);
        self.push_event(SwitchEvent::Dropped {
            port: port as PortNo,
            vc,
            reason,
            msg,
        });
    }

    /// Removes the front flit of input VC `i` and frees its slot upstream.
    fn pop_input(&mut self, i: usize) -> Option<Flit> {
        let vcs = self.cfg.vcs as usize;
        let (p, vc) = (i / vcs, i % vcs);
        let f = self.inputs[i].buf.pop_front()?;
        if self.inputs[i].synthetic_tail {
            // Made here (always pushed into an empty buffer, so it is the
            // front): no link slot to free.
            self.inputs[i].synthetic_tail = false;
            return Some(f);
        }
        if p >= self.ports.len() {
            return Some(f);
        }
        // Cannot fail: the flit was delivered by this link and not yet released.
        let released = self.ports[p].link.release(vc as u8, 1);
        debug_assert!(released.is_ok(), "{released:?}");
        self.counters.ports[p].vcs[vc].occupancy = self.inputs[i].len() as u32;
        Some(f)
    }

    /// Route and VC allocation for a head of input VC `i`.
    fn decide(&self, i: usize, f: &Flit) -> Decision {
        let vcs = self.cfg.vcs as usize;
        let (in_port, in_vc) = (i / vcs, (i % vcs) as u8);
        let Some(head) = f.head.as_ref() else {
            return Decision::Drop(DropReason::Orphan);
        };
        let dyn_ports: Vec<PortNo>;
        let route = match self.ft2ei_route(in_port, head) {
            Some(ft2ei_dyn_route::Ports(p)) => {
                dyn_ports = p;
                Route::Adaptive {
                    candidates: &dyn_ports,
                    escape: None,
                }
            }
            Some(ft2ei_dyn_route::Deflect(p)) => Route::Fixed(p),
            Some(ft2ei_dyn_route::None) => return Decision::Drop(DropReason::NoRoute),
            None => {
                let Some(table) = self.table.as_ref() else {
                    return Decision::Drop(DropReason::NoRoute);
                };
                let Some(route) = routing::lookup(table, routing::target(head)) else {
                    return Decision::Drop(DropReason::NoRoute);
                };
                route
            }
        };
        let need = match self.cfg.switching {
            Switching::Wormhole => 1,
            Switching::VirtualCutThrough => {
                vc_alloc::vct_need(self.cfg.max_packet_flits, head, f.seq)
            }
        };
        // Credits a port/VC offers, or why it cannot be used at all.
        let assess = |port: PortNo| -> Result<(u8, u16), DropReason> {
            let out = port as usize;
            if out >= self.ports.len() {
                return Err(DropReason::BadRoute);
            }
            if self.ports[out].failed || !self.ports[out].link.is_admin_up() {
                return Err(DropReason::PortDown);
            }
            let out_vc = vc_alloc::output_vc(&self.policy, in_port, in_vc, out);
            if out_vc >= self.cfg.vcs {
                return Err(DropReason::BadVc);
            }
            let free = self.outputs.is_free(out, out_vc);
            let credits = if free {
                self.ports[out].link.credits(out_vc)
            } else {
                0
            };
            Ok((out_vc, credits))
        };
        let try_port = |port: PortNo| match assess(port) {
            Err(r) => Decision::Drop(r),
            Ok((out_vc, _)) => self.admit(port as usize, out_vc, need),
        };
        match route {
            Route::Fixed(port) => try_port(port),
            Route::Adaptive { candidates, escape } => {
                let escape = escape.or_else(|| candidates.first().copied());
                if head.route_flags & route_flags::DETERMINISTIC == 0 {
                    // The candidate with the most free credits, if any has
                    // room for what this head needs.
                    let mut best: Option<(PortNo, u8, u16)> = None;
                    for &c in candidates {
                        if let Ok((out_vc, credits)) = assess(c) {
                            if credits >= need && best.is_none_or(|b| credits > b.2) {
                                best = Some((c, out_vc, credits));
                            }
                        }
                    }
                    if let Some((port, out_vc, _)) = best {
                        return Decision::Grant {
                            out: port as usize,
                            out_vc,
                        };
                    }
                }
                match escape {
                    Some(e) => match try_port(e) {
                        // A dead escape port: wait if some candidate lives.
                        Decision::Drop(DropReason::PortDown)
                            if candidates.iter().any(|&c| assess(c).is_ok()) =>
                        {
                            Decision::Wait { on_credits: None }
                        }
                        d => d,
                    },
                    None => Decision::Drop(DropReason::NoRoute),
                }
            }
        }
    }

    /// Seed 004 §3.2 "no ejection": while the head at the front of input VC
    /// `i` is routed toward an intermediate node attached to this switch,
    /// that leg is over: pop it (advance `leg`), so the packet is routed on
    /// toward its next target without visiting the intermediate's host.
    fn advance_leg(&mut self, i: usize) {
        let VcPolicy::Legs { local_hosts, .. } = &self.policy else {
            return;
        };
        let Some(h) = self.inputs[i].buf.front_mut().and_then(|f| f.head.as_mut()) else {
            return;
        };
        let n = (h.n_intermediates as usize).min(h.intermediates.len());
        // Never in the middle of a forced misroute prefix (§3.10).
        while (h.leg as usize) < n
            && h.pending_run().is_none()
            && local_hosts.contains(&h.intermediates[h.leg as usize])
        {
            h.leg += 1;
            self.counters.intermediate_pops += 1;
        }
    }

    /// Route and VC allocation under [`VcPolicy::Legs`] (seed 004 §3.2,
    /// §3.9): Duato's protocol toward the head's current target, with the
    /// adaptive VCs shared by all legs and one escape set per leg. A head
    /// whose leg has D set (§3.5) may only take the escape port (on an
    /// adaptive VC of that port if one has room, §8 item 13, else on its
    /// leg's escape VC).
    fn decide_legs(&self, i: usize, f: &Flit) -> Decision {
        let VcPolicy::Legs {
            legs,
            escape_per_leg,
            port_dim,
            dateline,
            dir_ports,
            ..
        } = &self.policy
        else {
            return Decision::Drop(DropReason::BadVc);
        };
        let vcs = self.cfg.vcs as usize;
        let (in_port, in_vc) = (i / vcs, (i % vcs) as u8);
        let Some(head) = f.head.as_ref() else {
            return Decision::Drop(DropReason::Orphan);
        };
        if head.leg >= *legs {
            return Decision::Drop(DropReason::LegVc);
        }
        // A forced misroute hop (seed 004 M): its direction's port only, on
        // an adaptive VC if one has room, else on the leg's escape VC.
        let forced = head
            .pending_run()
            .map(|(_, dir)| dir_ports.get(dir as usize).copied());
        let forced_port;
        let (candidates, escape): (&[PortNo], PortNo) = match forced {
            Some(None) => return Decision::Drop(DropReason::BadRoute),
            Some(Some(p)) => {
                forced_port = [p];
                (&forced_port, p)
            }
            None => {
                let Some(table) = self.table.as_ref() else {
                    return Decision::Drop(DropReason::NoRoute);
                };
                let Some(route) = routing::lookup(table, routing::target(head)) else {
                    return Decision::Drop(DropReason::NoRoute);
                };
                match route {
                    Route::Fixed(p) => (&[], p),
                    Route::Adaptive { candidates, escape } => {
                        match escape.or_else(|| candidates.first().copied()) {
                            Some(e) => (candidates, e),
                            None => return Decision::Drop(DropReason::NoRoute),
                        }
                    }
                }
            }
        };
        let need = match self.cfg.switching {
            Switching::Wormhole => 1,
            Switching::VirtualCutThrough => {
                vc_alloc::vct_need(self.cfg.max_packet_flits, head, f.seq)
            }
        };
        let usable = |port: PortNo| -> Result<usize, DropReason> {
            let out = port as usize;
            if out >= self.ports.len() {
                return Err(DropReason::BadRoute);
            }
            if self.ports[out].failed || !self.ports[out].link.is_admin_up() {
                return Err(DropReason::PortDown);
            }
            Ok(out)
        };
        let escape_base = legs.saturating_mul(*escape_per_leg);
        let deterministic =
            forced.is_some() || route_flags::is_deterministic(head.route_flags, head.leg);
        // Adaptive VCs: any minimal port (only the escape port under D).
        let single = [escape];
        let adaptive_ports: &[PortNo] = if deterministic { &single } else { candidates };
        let live = adaptive_ports.iter().filter_map(|&c| usable(c).ok());
        if let Some((out, out_vc)) = self.most_credited_vc(live, escape_base..self.cfg.vcs, need) {
            return Decision::Grant { out, out_vc };
        }
        let out = match usable(escape) {
            Ok(out) => out,
            // A dead escape port: wait if some adaptive candidate lives.
            Err(DropReason::PortDown)
                if escape_base < self.cfg.vcs
                    && adaptive_ports.iter().any(|&c| usable(c).is_ok()) =>
            {
                return Decision::Wait { on_credits: None };
            }
            Err(r) => return Decision::Drop(r),
        };
        let out_vc = vc_alloc::leg_escape_vc(
            *escape_per_leg,
            port_dim,
            dateline,
            head.leg,
            in_port,
            in_vc,
            out,
        );
        if out_vc >= self.cfg.vcs {
            return Decision::Drop(DropReason::LegVc);
        }
        self.admit(out, out_vc, need)
    }

    /// Output VC `out_vc` of port `out` for a head that needs `need`
    /// credits: granted when the VC is free (under virtual cut-through,
    /// with room for `need`), else wait for it (on its credits if free).
    fn admit(&self, out: usize, out_vc: u8, need: u16) -> Decision {
        let free = self.outputs.is_free(out, out_vc);
        let admitted = match self.cfg.switching {
            Switching::Wormhole => free,
            Switching::VirtualCutThrough => free && self.ports[out].link.credits(out_vc) >= need,
        };
        if admitted {
            Decision::Grant { out, out_vc }
        } else {
            Decision::Wait {
                on_credits: free.then_some((out, out_vc)),
            }
        }
    }

    /// Among the free VCs `vcs` of the ports `outs` with at least `need`
    /// credits, the one with the most (the first met on a tie).
    fn most_credited_vc(
        &self,
        outs: impl Iterator<Item = usize>,
        vcs: std::ops::Range<u8>,
        need: u16,
    ) -> Option<(usize, u8)> {
        let mut best: Option<(usize, u8, u16)> = None;
        for out in outs {
            for vc in vcs.clone() {
                if !self.outputs.is_free(out, vc) {
                    continue;
                }
                let credits = self.ports[out].link.credits(vc);
                if credits >= need && best.is_none_or(|b| credits > b.2) {
                    best = Some((out, vc, credits));
                }
            }
        }
        best.map(|(out, vc, _)| (out, vc))
    }

    /// The adaptive entry of the installed table for `head`'s target.
    fn adaptive_entry(&self, head: &crate::flit::Head) -> Option<&crate::routing::AdaptiveEntry> {
        match self.table.as_ref()? {
            SwitchTable::Adaptive(a) => a.entries.get(routing::target(head) as usize),
            _ => None,
        }
    }

    /// Under [`VcPolicy::LocalReroute`], after the head of input VC `i` was
    /// granted `out`: if that is not a minimal port, it was the packet's one
    /// misroute; mark the head so it takes no second one.
    fn mark_local_misroute(&mut self, i: usize, out: usize) {
        let Some(head) = self.inputs[i].buf.front().and_then(|f| f.head.as_ref()) else {
            return;
        };
        let minimal = self.adaptive_entry(head).is_none_or(|e| {
            e.candidates.contains(&(out as PortNo)) || e.escape == Some(out as PortNo)
        });
        if minimal {
            return;
        }
        if let Some(h) = self.inputs[i].buf.front_mut().and_then(|f| f.head.as_mut()) {
            h.route_flags |= route_flags::LOCAL_MISROUTED;
            self.counters.misroute_hops += 1;
        }
    }

    /// Route and VC allocation under [`VcPolicy::LocalReroute`] (seed 003's
    /// local fault handling, `routing::local_reroute`): an adaptive VC (1
    /// and up) on the live minimal port with the most credits, else the
    /// escape VC 0 on the escape port; if every minimal port is dead, one
    /// misroute per packet on an adaptive VC. Never a dead port, never back
    /// out of the input port. Nothing left: drop (the caller asks for a
    /// resend).
    fn decide_local(&self, i: usize, f: &Flit) -> Decision {
        let vcs = self.cfg.vcs as usize;
        let in_port = i / vcs;
        let Some(head) = f.head.as_ref() else {
            return Decision::Drop(DropReason::Orphan);
        };
        let Some(e) = self.adaptive_entry(head) else {
            return Decision::Drop(DropReason::NoRoute);
        };
        let need = match self.cfg.switching {
            Switching::Wormhole => 1,
            Switching::VirtualCutThrough => {
                vc_alloc::vct_need(self.cfg.max_packet_flits, head, f.seq)
            }
        };
        let usable = |port: PortNo| {
            let out = port as usize;
            out < self.ports.len()
                && out != in_port
                && !self.ports[out].failed
                && self.ports[out].link.is_admin_up()
        };
        // The adaptive VC (1 and up) with the most credits among `ports`.
        let best_adaptive = |ports: &[PortNo]| {
            let live = ports.iter().filter(|&&p| usable(p)).map(|&p| p as usize);
            self.most_credited_vc(live, 1..self.cfg.vcs, need)
                .map(|(out, out_vc)| Decision::Grant { out, out_vc })
        };
        if let Some(d) = best_adaptive(&e.candidates) {
            return d;
        }
        if let Some(esc) = e.escape.filter(|&p| usable(p)) {
            return self.admit(esc as usize, 0, need);
        }
        if e.candidates.iter().any(|&p| usable(p)) {
            // The escape port is dead (or the way back): a live minimal port
            // will free up.
            return Decision::Wait { on_credits: None };
        }
        if head.route_flags & route_flags::LOCAL_MISROUTED == 0
            && e.misroute.iter().any(|&p| usable(p))
        {
            return best_adaptive(&e.misroute).unwrap_or(Decision::Wait { on_credits: None });
        }
        Decision::Drop(DropReason::PortDown)
    }

    /// The head-of-queue lifetime applied to `decision`, the allocation
    /// just made for the head at the front of input VC `i`: a head that
    /// must wait starts its clock (or keeps it running), and one that has
    /// waited `hoq_lifetime_ns` is dropped instead ([`DropReason::HoqLifetime`]);
    /// a grant or a drop stops the clock. The earliest end of a running
    /// clock is kept in `hoq_next` for [`Switch::poll_timeout`]: no scan of
    /// the input VCs beyond the allocation pass that decides them anyway.
    fn head_of_queue(&mut self, i: usize, decision: Decision) -> Decision {
        let now = self.now;
        let Decision::Wait { .. } = decision else {
            if let Some(since) = self.inputs[i].waiting_since.take() {
                if matches!(decision, Decision::Grant { .. }) {
                    let waited = now.saturating_sub(since);
                    let max = &mut self.counters.head_wait_max_ns;
                    *max = (*max).max(waited);
                }
            }
            return decision;
        };
        let since = *self.inputs[i].waiting_since.get_or_insert(now);
        let Some(lifetime) = self.hoq_lifetime_ns else {
            return decision;
        };
        let end = since.saturating_add(lifetime);
        if now >= end {
            self.inputs[i].waiting_since = None;
            return Decision::Drop(DropReason::HoqLifetime);
        }
        self.hoq_next = Some(self.hoq_next.map_or(end, |t| t.min(end)));
        decision
    }

    /// Settles the front of input VC `i` until it is a flit ready to
    /// request an output (returns the output and VC) or must wait.
    fn resolve_front(&mut self, i: usize) -> Option<(usize, u8)> {
        let vcs = self.cfg.vcs as usize;
        loop {
            let f = self.inputs[i].buf.front()?;
            match self.inputs[i].state {
                InState::Dropping { reason } => {
                    if f.kind.is_head() {
                        // The dropped packet's tail never came: start afresh.
                        self.inputs[i].state = InState::Idle;
                        continue;
                    }
                    let f = self.pop_input(i)?;
                    if let Some(c) = self.counters.ports.get_mut(i / vcs) {
                        c.drops.add(reason, 1);
                    }
                    self.counters.drops.add(reason, 1);
                    if f.kind.is_tail() {
                        self.inputs[i].state = InState::Idle;
                    }
                }
                InState::Active {
                    out,
                    out_vc,
                    started,
                } => {
                    if started && f.kind.is_head() {
                        // A new head before the tail: the tail was lost upstream.
                        self.outputs.release(out as usize, out_vc);
                        self.inputs[i].state = InState::Idle;
                        self.counters.truncated_packets += 1;
                        continue;
                    }
                    return Some((out as usize, out_vc));
                }
                InState::Idle if f.flags & flags::FT2EI_CTRL != 0 => {
                    let local = i >= self.local_input();
                    if !local {
                        // Store-and-forward: the whole (one-flit) packet is
                        // here; it is consumed, never forwarded as is.
                        let f = self.pop_input(i)?;
                        self.ft2ei_receive(i / vcs, &f);
                        continue;
                    }
                    let port = self.ctrl_local_port.unwrap_or(PortNo::MAX);
                    match self.decide_ctrl(port) {
                        Some(Decision::Grant { out, out_vc }) => {
                            self.counters.ft2ei.ctrl_sent += 1;
                            self.outputs.claim(out, out_vc, i as u32);
                            self.inputs[i].state = InState::Active {
                                out: out as PortNo,
                                out_vc,
                                started: false,
                            };
                        }
                        Some(_) => return None,
                        None => {
                            self.pop_input(i)?;
                            self.ctrl_local_port = None;
                            self.counters.ft2ei.ctrl_dropped += 1;
                        }
                    }
                }
                InState::Idle => {
                    let msg = f.msg;
                    let track = f.head.as_ref().map(|h| Tracked {
                        src: h.src,
                        dst: h.dst,
                        msg: f.msg,
                        packet: f.packet,
                        submsg: h.submsg,
                        first_seq: f.seq,
                        forwarded: 0,
                        is_rrq: sbrp::is_rrq(f),
                    });
                    let decision = if self.reroute.is_some() {
                        self.decide_local_reroute(i)
                    } else if self.policy == VcPolicy::LocalReroute {
                        self.decide_local(i, f)
                    } else if matches!(self.policy, VcPolicy::Legs { .. }) {
                        self.advance_leg(i);
                        let f = self.inputs[i].buf.front().expect("checked above");
                        self.decide_legs(i, f)
                    } else {
                        self.decide(i, f)
                    };
                    let decision = self.head_of_queue(i, decision);
                    match decision {
                        Decision::Wait { on_credits } => {
                            if let Some((out, out_vc)) = on_credits {
                                self.ports[out].link.note_stalled(out_vc);
                            }
                            return None;
                        }
                        Decision::Grant { out, out_vc } => {
                            if let (VcPolicy::Legs { .. }, Some(h)) = (
                                &self.policy,
                                self.inputs[i].buf.front_mut().and_then(|f| f.head.as_mut()),
                            ) {
                                if h.pending_run().is_some() {
                                    // The forced hop is taken: rewrite the
                                    // head (§3.10 hops_left − 1).
                                    h.spend_run_hop();
                                    self.counters.misroute_hops += 1;
                                }
                            }
                            if self.policy == VcPolicy::LocalReroute {
                                self.mark_local_misroute(i, out);
                            }
                            if self.ft2ei.is_some() {
                                self.ft2ei_granted(i, out);
                            }
                            self.inputs[i].track = track;
                            self.outputs.claim(out, out_vc, i as u32);
                            self.inputs[i].state = InState::Active {
                                out: out as PortNo,
                                out_vc,
                                started: false,
                            };
                        }
                        Decision::Drop(
                            reason @ (DropReason::PortDown | DropReason::HoqLifetime),
                        ) if self.recovery.is_on()
                            && track.is_some_and(|t| t.is_rrq)
                            && self.rrq_pending.len() + self.rrq_parked.len()
                                < MAX_PENDING_RRQS =>
                        {
                            let mut f = self.pop_input(i)?;
                            if reason == DropReason::HoqLifetime || self.dlr_may_route_afresh(i) {
                                // DLR could not continue this RRQ's detour
                                // (its way back died), or it waited out the
                                // head-of-queue lifetime (presumed
                                // deadlocked: out of the buffer it goes):
                                // route it anew from here, in the normal
                                // layer. Should that fail too, it is parked
                                // (local input) or waits out the lifetime
                                // again.
                                if let Some(h) = f.head.as_mut() {
                                    h.dlr_port_field = 0;
                                    h.route_flags &= !route_flags::LOCAL_MISROUTED;
                                }
                                f.vc = 0;
                                self.sbrp.rrq_restarted += 1;
                                self.rrq_pending.push_back(f);
                            } else {
                                // An RRQ toward a dead port (tables not yet
                                // updated, or nothing DLR can route around):
                                // keep it for new tables or a port back up.
                                self.sbrp.rrq_parked += 1;
                                self.rrq_parked.push_back(f);
                            }
                        }
                        Decision::Drop(reason) => {
                            let f = self.pop_input(i)?;
                            let resend =
                                matches!(reason, DropReason::PortDown | DropReason::HoqLifetime);
                            if resend && self.recovery.is_on() {
                                // Its route leads to a dead port: nothing of
                                // the packet passed, so ask for all of it
                                // (from its head). Controller routing: once
                                // the tables have changed (a resend now would
                                // take the same dead route). DLR: at once,
                                // the resend is routed afresh around what is
                                // dead now, unless the destination itself is
                                // cut off or the packet was already resent
                                // `DLR_EAGER_RESENDS` times. A head that
                                // waited out its lifetime: at once, always
                                // (its route is alive, and no new table or
                                // port coming back would unpark the request;
                                // each round costs a lifetime, so no storm).
                                let park = reason == DropReason::PortDown
                                    && (!self.dlr_may_route_afresh(i)
                                        || track.is_some_and(|t| t.submsg >= DLR_EAGER_RESENDS));
                                if let Some(t) = track {
                                    self.queue_rrq(t, park);
                                }
                            }
                            if reason == DropReason::HoqLifetime {
                                // Reported by the `Dropped` event below
                                // (switchd logs it).
                                self.counters.hoq_discards += 1;
                            }
                            let (p, vc) = (i / vcs, (i % vcs) as u8);
                            self.count_drop(p, vc, reason, 1, msg);
                            if !f.kind.is_tail() {
                                self.inputs[i].state = InState::Dropping { reason };
                            }
                        }
                    }
                }
            }
        }
    }

    /// Allocation rounds until no flit moves. The first round examines
    /// every input VC; later rounds only those that requested in the
    /// previous one, because within a pump credits only decrease and the
    /// only thing that can unblock another input is a tail freeing an
    /// output VC (which triggers a full scan again).
    fn pump(&mut self) {
        let mut requesters = std::mem::take(&mut self.requesters);
        let mut next = std::mem::take(&mut self.next_requesters);
        let mut grants = std::mem::take(&mut self.grants);
        let mut scan_all = true;
        // The first round examines every input VC, so every head still
        // waiting registers its lifetime's end again (`head_of_queue`).
        self.hoq_next = None;
        loop {
            scan_all |= self.feed_local_input();
            next.clear();
            if scan_all {
                // Dynamic FT²EI control packets (local input) get the first
                // claim on an output VC that is free: the non-preemptive
                // priority of seed 000 §4.5 (a port already carrying a
                // packet is never pre-empted).
                let l = self.local_input();
                let ctrl_first = self.ft2ei.is_some();
                if ctrl_first {
                    for i in l..self.inputs.len() {
                        self.examine(i, &mut next);
                    }
                }
                for i in 0..self.inputs.len() {
                    if !(ctrl_first && i >= l) {
                        self.examine(i, &mut next);
                    }
                }
            } else {
                for &i in &requesters {
                    self.examine(i as usize, &mut next);
                }
            }
            self.alloc.allocate(&mut grants);
            if grants.is_empty() {
                break;
            }
            scan_all = false;
            for &(out, i) in &grants {
                scan_all |= self.forward(out as usize, i as usize);
            }
            std::mem::swap(&mut requesters, &mut next);
        }
        self.grants = grants;
        self.requesters = requesters;
        self.next_requesters = next;
    }

    /// Settles input VC `i` and, if its front flit can go, files its
    /// request with the switch allocator (and notes `i` in `requested`).
    fn examine(&mut self, i: usize, requested: &mut Vec<u32>) {
        let vcs = self.cfg.vcs as usize;
        if self.inputs[i].is_empty() {
            // An input whose port died mid-packet will never see the
            // tail: free the output VC it holds.
            if let InState::Active { out, out_vc, .. } = self.inputs[i].state {
                let input_dead = self.ports.get(i / vcs).is_some_and(|p| p.failed);
                if input_dead && self.recovery.is_on() && !self.inputs[i].synthetic_tail {
                    // Node A (spec 003 §5.11.2): close the packet downstream
                    // with a non-final tail, after what was buffered.
                    if let Some(t) = self.inputs[i].track {
                        self.inputs[i].buf.push_back(Flit {
                            kind: FlitKind::Tail,
                            vc: (i % vcs) as u8,
                            flags: flags::NON_FINAL_TAIL,
                            msg: t.msg,
                            packet: t.packet,
                            seq: t.first_seq + t.forwarded,
                            head: None,
                            payload: Bytes::new(),
                        });
                        self.inputs[i].synthetic_tail = true;
                        self.sbrp.nft_generated += 1;
                        self.examine(i, requested);
                        return;
                    }
                }
                if input_dead {
                    self.outputs.release(out as usize, out_vc);
                    self.inputs[i].state = InState::Idle;
                    self.counters.truncated_packets += 1;
                }
            }
            return;
        }
        if let Some((out, out_vc)) = self.resolve_front(i) {
            if self.ports[out].link.credits(out_vc) > 0 {
                self.alloc.request(out as u16, i as u32);
                requested.push(i as u32);
            } else {
                self.ports[out].link.note_stalled(out_vc);
            }
        }
    }

    /// Moves the front flit of input VC `i` into output port `out`;
    /// returns whether that freed the output VC (a tail left).
    fn forward(&mut self, out: usize, i: usize) -> bool {
        let InState::Active { out_vc, .. } = self.inputs[i].state else {
            return false;
        };
        let Some(mut f) = self.pop_input(i) else {
            return false;
        };
        let tail = f.kind.is_tail();
        if let Some(t) = self.inputs[i].track.as_mut() {
            t.forwarded += 1;
        }
        let shadow = if tail {
            self.inputs[i].track.take()
        } else {
            None
        };
        self.inputs[i].state = if f.kind.is_tail() {
            self.outputs.release(out, out_vc);
            InState::Idle
        } else {
            InState::Active {
                out: out as PortNo,
                out_vc,
                started: true,
            }
        };
        f.vc = out_vc;
        let bytes = f.payload.len() as u64;
        match self.ports[out].link.send(f) {
            Ok(()) => {
                let c = &mut self.counters.ports[out].vcs[out_vc as usize];
                c.tx_flits += 1;
                c.tx_payload_bytes += bytes;
                let sent = c.tx_flits;
                if let Some(t) = shadow.filter(|t| self.recovery.is_on() && !t.is_rrq) {
                    let depth = self.cfg.buffer_depth as u64;
                    let q = &mut self.shadows[out * self.cfg.vcs as usize + out_vc as usize];
                    // Only the last `depth` flits of a VC can be unfreed.
                    while q.front().is_some_and(|(n, _)| n + depth <= sent) {
                        q.pop_front();
                    }
                    q.push_back((sent, t));
                }
            }
            Err(_) => {
                // Only possible if the port went admin down in between.
                let vcs = self.cfg.vcs as usize;
                self.count_drop(i / vcs, (i % vcs) as u8, DropReason::PortDown, 1, 0);
            }
        }
        tail
    }

    /// Flits of this switch still in the network: buffered in its input
    /// VCs (the local one too), received and not yet taken, and, on live
    /// links, sent without their credits back (which covers flits queued
    /// on the link: a queued flit has taken its credit), plus recover
    /// requests waiting for the local input. A flit in the next switch's
    /// buffer is counted there too; only 0 matters. 0 in a drained fabric:
    /// the controller waits for 0 everywhere before it swaps tables under
    /// quiesced reconfiguration (docs/chaos.md). Parked RRQs are not
    /// counted: they wait for new tables or a port, outside the network.
    pub fn in_flight_flits(&self) -> u64 {
        let buffered: usize = self.inputs.iter().map(|i| i.len()).sum();
        let links: u64 = self
            .ports
            .iter()
            // What a dead link held will never move: it is lost.
            .filter(|p| p.link.is_up())
            .map(|p| p.link.pending_rx() as u64 + p.link.credits_missing())
            .sum();
        buffered as u64 + links + (self.rrq_pending.len() + self.ctrl_pending.len()) as u64
    }

    /// Per input VC (`port * vcs + vc`, the local input last): the state
    /// of the packet at its front, and its front flit (for tests that
    /// explain a wedged fabric).
    #[cfg(test)]
    pub(crate) fn input_states(&self) -> Vec<(InState, Option<&Flit>)> {
        self.inputs
            .iter()
            .map(|i| (i.state, i.buf.front()))
            .collect()
    }

    /// Recover requests parked until new tables or a port back up (for
    /// tests that account for every message).
    #[cfg(test)]
    pub(crate) fn parked_rrqs(&self) -> impl Iterator<Item = &Flit> {
        self.rrq_parked.iter()
    }

    /// Flits buffered in input VC `vc` of `port` (for tests and metrics).
    pub fn input_occupancy(&self, port: PortNo, vc: u8) -> Option<usize> {
        let (p, v) = (port as usize, vc as usize);
        if p >= self.cfg.radix || v >= self.cfg.vcs as usize {
            return None;
        }
        Some(self.inputs[p * self.cfg.vcs as usize + v].len())
    }
}

#[cfg(test)]
mod test_rig;
#[cfg(test)]
mod tests;
