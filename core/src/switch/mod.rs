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
//!
//! Recovery and routing mechanisms (SBRP, DLR, dynamic FT²EI, intermediate
//! nodes, local rerouting, the head-of-queue lifetime) are not written
//! here: each is a [`hook::SwitchHook`] in its folder of
//! [`crate::mechanism`], which also builds switches (`Switch::new`) with
//! the hooks every switch carries.

pub mod counters;
pub mod hook;
pub mod input;
pub mod output;
pub mod routing;
pub mod sw_alloc;
pub mod vc_alloc;

pub use counters::{
    DropCounters, DropReason, Ft2eiCounters, PortCounters, SwitchCounters, VcCounters,
};

use crate::flit::{flags, route_flags, Flit, FlitKind, Head};
use crate::link::{ConfigError, Decoded, Link, LinkConfig, LinkErrorCause, LinkEvent};
use crate::routing::{SwitchTable, VcPolicy};
use crate::topology::PortNo;
use crate::wire::WireError;
use bytes::Bytes;
use hook::{Installed, Intercept, SwitchHook};
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
    /// Traversal latency and crossbar speedup.
    #[serde(default)]
    pub timing: SwitchTiming,
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
            timing: SwitchTiming::default(),
        }
    }
}

/// How fast a switch moves flits from its inputs to its outputs
/// (docs/performance.md, "The timing model").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SwitchTiming {
    /// Switch traversal latency (routing, VC and switch allocation,
    /// crossbar): a flit may cross the crossbar no earlier than this long
    /// after its link released it. 0 here; fabrics default to 4 flit
    /// times ([`crate::control::FabricParams::switch_latency`]).
    pub traversal_ns: u64,
    /// Crossbar speedup: each input port and each output port moves at
    /// most this many flits per flit time of its links (1 = one, as in an
    /// input-queued router without speedup). Unpaced links: no limit.
    pub crossbar_speedup: u8,
}

impl Default for SwitchTiming {
    fn default() -> Self {
        SwitchTiming {
            traversal_ns: 0,
            crossbar_speedup: 1,
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
        if self.timing.crossbar_speedup == 0 {
            return Err(invalid("switch.crossbar_speedup", 0, "must be at least 1"));
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

pub(crate) struct Port {
    pub link: Link,
    /// Admin down, or the peer declared dead: packets routed here are dropped.
    pub failed: bool,
    /// The link has heard its peer at least once (its first `PeerUp`).
    /// Until then the port is not active, as an InfiniBand port that has
    /// not trained: packets routed here are dropped. A switch restarted
    /// beside a peer that never answers (a dead switch, a killed cable)
    /// thus drops what its tables route there instead of holding heads
    /// for credits that never come: a link that never heard its peer has
    /// no silence to time out, so it is never declared dead.
    pub heard: bool,
    /// The link's `rx_bad_vc` already counted as drops.
    bad_vc_seen: u64,
}

/// An allocation decision for the head at the front of an input VC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
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
    pub(crate) cfg: SwitchConfig,
    pub(crate) table: Option<SwitchTable>,
    pub(crate) policy: VcPolicy,
    pub(crate) ports: Vec<Port>,
    pub(crate) inputs: Vec<InputVc>,
    pub(crate) outputs: OutputVcs,
    alloc: SwitchAllocator,
    grants: Vec<(u16, u32)>,
    /// Input VCs that requested in the last allocation round (scratch).
    requesters: Vec<u32>,
    next_requesters: Vec<u32>,
    pub(crate) counters: SwitchCounters,
    events: VecDeque<SwitchEvent>,
    next_tx_port: usize,
    pub(crate) now: u64,
    /// The mechanisms' hooks, in registry order (see [`hook`]).
    hooks: Vec<Installed>,
    /// Crossbar: per input port (the local input last) and per output
    /// port, the earliest time it may move its next flit.
    in_free_at: Vec<u64>,
    out_free_at: Vec<u64>,
    /// Time one crossbar port takes per flit: a flit time over the
    /// speedup (0 on unpaced links).
    xbar_step_ns: u64,
    /// Earliest time a flit held back by the traversal latency or the
    /// crossbar may move (found by the last allocation pass).
    xbar_wake_at: Option<u64>,
    /// Which ports have work, so that a call costs what the ports it
    /// touches cost, not the radix ([`PortIndex`]).
    idx: PortIndex,
    /// Input VCs an allocation pass must examine, one bit each: those
    /// holding flits or a packet's output VC (an empty idle or dropping
    /// VC has nothing to settle). Set when a flit is buffered, cleared by
    /// the pass that finds the VC empty and without a packet.
    live: Vec<u64>,
    /// Per input VC: when its front flit's traversal latency ends, if an
    /// allocation pass found it held back by it (0 otherwise). Until then
    /// examining it would only note that time again, so a pass skips it;
    /// popping its front forgets the time.
    held: Vec<u64>,
}

/// The switch's index of its ports' work: each link's deadline as of when
/// it last had nothing to send, and which links changed since. A port
/// whose link is unchanged and not due is skipped by `poll_transmit` and
/// `handle_timeout`: the calls it skips would have found nothing to do,
/// and the little they would have changed (the link's clock, an idle
/// wire's earliest start) is applied when the port is next touched
/// ([`Link::catch_up`]), so that every port behaves exactly as if every
/// call had visited it.
#[derive(Debug)]
struct PortIndex {
    /// Per port: `Link::poll_timeout` when the link last settled (a
    /// `poll_transmit` found nothing to send); `u64::MAX` for none.
    due: Vec<u64>,
    /// Per port: the link changed since it last settled (it must be
    /// polled, and its `due` is stale).
    dirty: Vec<bool>,
    /// Per port: the link changed since its counters were last copied.
    unsynced: Vec<bool>,
    /// Per port: the last transmit sweep that visited it (skipped it),
    /// beyond `swept_at` (a sweep the owner stopped early).
    polled_at: Vec<u64>,
    /// Per port: the sweep time whose effects its link has had.
    caught: Vec<u64>,
    /// The last transmit sweep that visited every port (`poll_transmit`
    /// returned `None`).
    swept_at: u64,
    /// The last `handle_timeout`.
    timed_at: u64,
}

impl PortIndex {
    fn new(radix: usize) -> Self {
        PortIndex {
            due: vec![0; radix],
            dirty: vec![true; radix],
            unsynced: vec![true; radix],
            polled_at: vec![0; radix],
            caught: vec![0; radix],
            swept_at: 0,
            timed_at: 0,
        }
    }
}

impl Switch {
    /// A switch whose links announce `epoch` (see [`Link::with_epoch`]),
    /// carrying the `hooks` (ranked) every switch has: what
    /// `crate::mechanism`'s `Switch::new` and `Switch::with_epoch` build.
    pub(crate) fn with_hooks(
        cfg: SwitchConfig,
        epoch: u16,
        hooks: Vec<(usize, Box<dyn SwitchHook>)>,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let link_cfg = cfg.port_link();
        let mut ports = Vec::with_capacity(cfg.radix);
        for p in 0..cfg.radix {
            let mut link = Link::with_epoch(link_cfg.clone(), epoch)?;
            link.set_port(p as u16);
            ports.push(Port {
                link,
                failed: false,
                heard: false,
                bad_vc_seen: 0,
            });
        }
        let vcs = cfg.vcs as usize;
        let speedup = cfg.timing.crossbar_speedup.max(1) as u128;
        let xbar_step_ns = link_cfg.bandwidth_flits_per_s.map_or(0, |rate| {
            1_000_000_000u128.div_ceil(rate as u128 * speedup) as u64
        });
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
            hooks: hooks
                .into_iter()
                .map(|(rank, hook)| Installed { rank, hook })
                .collect(),
            in_free_at: vec![0; cfg.radix + 1],
            out_free_at: vec![0; cfg.radix],
            xbar_step_ns,
            xbar_wake_at: None,
            idx: PortIndex::new(cfg.radix),
            live: vec![0; ((cfg.radix + 1) * vcs).div_ceil(64)],
            held: vec![0; (cfg.radix + 1) * vcs],
            cfg,
        })
    }

    /// Installs (`Some`) or removes (`None`) the hook of mechanism `name`,
    /// which runs at `rank` among the others.
    pub(crate) fn set_hook(&mut self, rank: usize, name: &str, hook: Option<Box<dyn SwitchHook>>) {
        self.hooks.retain(|h| h.hook.name() != name);
        if let Some(hook) = hook {
            let at = self.hooks.partition_point(|h| h.rank <= rank);
            self.hooks.insert(at, Installed { rank, hook });
        }
    }

    /// The installed hook of type `T`, if any.
    pub(crate) fn hook<T: SwitchHook>(&self) -> Option<&T> {
        self.hooks
            .iter()
            .find_map(|h| h.hook.as_any().downcast_ref::<T>())
    }

    /// The installed hook of type `T`, if any.
    pub(crate) fn hook_mut<T: SwitchHook>(&mut self) -> Option<&mut T> {
        self.hooks
            .iter_mut()
            .find_map(|h| h.hook.as_any_mut().downcast_mut::<T>())
    }

    /// Runs `f` on every hook in rank order until one returns `Some`. The
    /// hooks are taken out of the switch meanwhile (a move of the list, no
    /// allocation), so that each gets the switch mutably.
    fn first_hook<R>(
        &mut self,
        mut f: impl FnMut(&mut dyn SwitchHook, &mut Switch) -> Option<R>,
    ) -> Option<R> {
        if self.hooks.is_empty() {
            return None;
        }
        let mut hooks = std::mem::take(&mut self.hooks);
        let r = hooks.iter_mut().find_map(|h| f(h.hook.as_mut(), self));
        debug_assert!(self.hooks.is_empty(), "a hook changed the hooks");
        self.hooks = hooks;
        r
    }

    /// Runs `f` on every hook in rank order.
    fn each_hook(&mut self, mut f: impl FnMut(&mut dyn SwitchHook, &mut Switch)) {
        self.first_hook(|h, sw| {
            f(h, sw);
            None::<()>
        });
    }

    /// The next warning a mechanism raised (`(mechanism, text)`), taken so
    /// that the owner logs each once.
    pub fn take_mechanism_warning(&mut self) -> Option<(&'static str, String)> {
        self.hooks
            .iter_mut()
            .find_map(|h| h.hook.take_warning().map(|w| (h.hook.name(), w)))
    }

    /// Index of the first local input VC (no link behind it).
    pub(crate) fn local_input(&self) -> usize {
        self.cfg.radix * self.cfg.vcs as usize
    }

    /// Moves the next flit a hook makes into the local input VC if it is
    /// free; returns whether it did.
    fn feed_local_input(&mut self) -> bool {
        let l = self.local_input();
        if !(self.inputs[l].is_empty() && self.inputs[l].state == InState::Idle) {
            return false;
        }
        let Some(f) = self.first_hook(|h, sw| h.inject(sw)) else {
            return false;
        };
        self.inputs[l].buf.push_back(f);
        self.inputs[l].synthetic_tail = true;
        self.mark_live(l);
        true
    }

    pub fn config(&self) -> &SwitchConfig {
        &self.cfg
    }

    /// Replaces the forwarding table and VC policy. Packets already holding
    /// an output VC finish on it; new heads use the new table.
    pub fn install_table(&mut self, table: SwitchTable, policy: VcPolicy) {
        self.table = Some(table);
        self.policy = policy;
        self.each_hook(|h, sw| h.on_routes_changed(sw));
    }

    /// The table installed last, and its VC policy.
    pub fn table(&self) -> (Option<&SwitchTable>, &VcPolicy) {
        (self.table.as_ref(), &self.policy)
    }

    /// Whether port `p` can carry traffic now: not administratively down,
    /// its peer not declared dead.
    pub(crate) fn port_alive(&self, p: usize) -> bool {
        let port = &self.ports[p];
        !port.failed && port.heard && port.link.is_admin_up()
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
        self.link_mut(p).set_admin_up(up);
        if up {
            self.ports[p].failed = false;
            self.each_hook(|h, sw| h.on_routes_changed(sw));
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
        self.link_mut(p).set_credits_withheld(on);
        Ok(())
    }

    /// The counters as the switch keeps them: each VC's
    /// `credit_stall_ns` counts the stalls that ended
    /// ([`Switch::counters_at`] adds those still running).
    pub fn counters(&self) -> &SwitchCounters {
        &self.counters
    }

    /// The counters as of `now`, for a report: [`Switch::counters`] with
    /// each credit stall still running counted up to `now`. A running
    /// stall is kept as its start time, so that its time depends only on
    /// when it is read, not on which calls the switch had meanwhile.
    pub fn counters_at(&self, now: u64) -> SwitchCounters {
        let mut c = self.counters.clone();
        for (port, pc) in self.ports.iter().zip(c.ports.iter_mut()) {
            for (vc, v) in pc.vcs.iter_mut().enumerate() {
                v.credit_stall_ns = port.link.credit_stall_ns(vc as u8, now);
            }
        }
        c
    }

    pub fn poll_event(&mut self) -> Option<SwitchEvent> {
        self.events.pop_front()
    }

    pub(crate) fn push_event(&mut self, e: SwitchEvent) {
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
        self.take_datagram(now, port, |l| l.handle_datagram(now, data))
    }

    /// [`Switch::handle_datagram`] of a datagram a peer in the same
    /// process wrote without encoding it ([`Link::handle_decoded`]).
    pub fn handle_decoded(
        &mut self,
        now: u64,
        port: PortNo,
        d: &mut Decoded,
    ) -> Result<(), SwitchError> {
        self.take_datagram(now, port, |l| l.handle_decoded(now, d))
    }

    /// A datagram on `port`, taken in by `take` on its link.
    fn take_datagram(
        &mut self,
        now: u64,
        port: PortNo,
        take: impl FnOnce(&mut Link) -> Result<(), WireError>,
    ) -> Result<(), SwitchError> {
        let p = self.check_port(port)?;
        self.now = self.now.max(now);
        let r = take(self.link_mut(p));
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
    ///
    /// Only ports with something due, or changed since they last settled,
    /// are visited in full; the others would only have moved their clocks
    /// ([`Link::catch_up`] does that when they are next touched), except
    /// that a port's counters are copied again if they changed. A running
    /// credit stall needs no visit: its time is computed when read
    /// ([`Switch::counters_at`]).
    pub fn handle_timeout(&mut self, now: u64) {
        self.now = self.now.max(now);
        self.idx.timed_at = self.idx.timed_at.max(now);
        for p in 0..self.ports.len() {
            let idx = &self.idx;
            let due = if idx.dirty[p] {
                self.ports[p].link.poll_timeout().unwrap_or(u64::MAX)
            } else {
                idx.due[p]
            };
            if due <= now {
                self.link_mut(p).handle_timeout(now);
                self.service_port(p);
            } else if idx.unsynced[p] {
                // Nothing due: the call would only move the clock, and
                // copy counters that changed.
                self.catch_up(p);
                self.sync_port_counters(p);
            }
        }
        self.pump();
    }

    /// Port `p`'s link, to act on it: first what the calls that skipped
    /// it would have done ([`Switch::catch_up`]); then it is marked
    /// changed (polled at the next transmit sweep). Its counters are
    /// copied where they change: after a datagram or a timeout
    /// (`service_port`), after a datagram sent, and at the next timeout
    /// after a retrain ended without one (`unsynced`).
    fn link_mut(&mut self, p: usize) -> &mut Link {
        self.catch_up(p);
        self.idx.dirty[p] = true;
        &mut self.ports[p].link
    }

    /// Applies to port `p`'s link what the `poll_transmit` and
    /// `handle_timeout` calls that skipped it since it was last touched
    /// would have done.
    fn catch_up(&mut self, p: usize) {
        let idx = &mut self.idx;
        let polled = idx.swept_at.max(idx.polled_at[p]);
        let skipped = (polled > idx.caught[p]).then_some(polled);
        idx.caught[p] = idx.caught[p].max(polled);
        let now = polled.max(idx.timed_at);
        self.ports[p].link.catch_up(now, skipped);
    }

    /// Writes the next datagram for some port into `out` and returns the
    /// port, or `None` when no port has anything to send. Ports are served
    /// round-robin; call until `None`.
    ///
    /// A port whose link is unchanged since it last had nothing to send
    /// and has nothing due is skipped: it would send nothing
    /// ([`PortIndex`]).
    pub fn poll_transmit(&mut self, now: u64, out: &mut Vec<u8>) -> Option<PortNo> {
        self.transmit(now, |l| l.poll_transmit(now, out))
    }

    /// [`Switch::poll_transmit`] for a peer in the same process
    /// ([`Link::poll_transmit_decoded`]).
    pub fn poll_transmit_decoded(&mut self, now: u64, out: &mut Decoded) -> Option<PortNo> {
        self.transmit(now, |l| l.poll_transmit_decoded(now, out))
    }

    /// [`Switch::poll_transmit`] with `poll` asking a port's link for a
    /// datagram.
    fn transmit(&mut self, now: u64, mut poll: impl FnMut(&mut Link) -> bool) -> Option<PortNo> {
        self.now = self.now.max(now);
        let n = self.ports.len();
        let start = self.next_tx_port;
        for k in 0..n {
            let p = if start + k < n {
                start + k
            } else {
                start + k - n
            };
            if !(self.idx.dirty[p] || self.idx.due[p] <= now) {
                continue;
            }
            let retrains = self.ports[p].link.stats().retrains;
            let sent = poll(self.link_mut(p));
            self.idx.caught[p] = self.idx.caught[p].max(now);
            if self.ports[p].link.stats().retrains != retrains {
                self.idx.unsynced[p] = true;
            }
            if sent {
                self.next_tx_port = (p + 1) % n;
                self.sync_port_counters(p);
                // The ports before it were visited at `now` too.
                for j in 0..k {
                    let q = if start + j < n {
                        start + j
                    } else {
                        start + j - n
                    };
                    let at = &mut self.idx.polled_at[q];
                    *at = (*at).max(now);
                }
                return Some(p as PortNo);
            }
            // Settled: nothing to send until its deadline or a change.
            self.idx.dirty[p] = false;
            self.idx.due[p] = self.ports[p].link.poll_timeout().unwrap_or(u64::MAX);
        }
        self.idx.swept_at = self.idx.swept_at.max(now);
        None
    }

    /// Earliest time any port needs `handle_timeout` or `poll_transmit`,
    /// or a waiting head's lifetime runs out.
    pub fn poll_timeout(&self) -> Option<u64> {
        let idx = &self.idx;
        let mut t = u64::MAX;
        for (p, (&due, &dirty)) in idx.due.iter().zip(&idx.dirty).enumerate() {
            let d = if dirty {
                self.ports[p].link.poll_timeout().unwrap_or(u64::MAX)
            } else {
                due
            };
            t = t.min(d);
        }
        (t != u64::MAX)
            .then_some(t)
            .into_iter()
            .chain(self.hooks.iter().filter_map(|h| h.hook.poll_timeout()))
            .chain(self.xbar_wake_at)
            .min()
    }

    /// [`Switch::poll_timeout`] asked of every link, without the port
    /// index (what the index must agree with, up to deadlines already
    /// past).
    #[cfg(test)]
    pub(crate) fn poll_timeout_of_every_link(&self) -> Option<u64> {
        self.ports
            .iter()
            .filter_map(|p| p.link.poll_timeout())
            .chain(self.hooks.iter().filter_map(|h| h.hook.poll_timeout()))
            .chain(self.xbar_wake_at)
            .min()
    }

    /// Link events and newly visible flits of one port.
    fn service_port(&mut self, p: usize) {
        while let Some(e) = self.ports[p].link.poll_event() {
            let port = p as PortNo;
            match e {
                LinkEvent::PeerUp => {
                    self.ports[p].failed = false;
                    self.ports[p].heard = true;
                    self.each_hook(|h, sw| h.on_routes_changed(sw));
                    self.push_event(SwitchEvent::PortUp { port });
                }
                LinkEvent::PeerDown => {
                    self.fail_port(p);
                    self.push_event(SwitchEvent::PortDown { port, admin: false });
                }
                LinkEvent::PeerRestarted { .. } => {
                    self.peer_restarted(p);
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
        while let Some((at, f)) = self.ports[p].link.poll_received_at() {
            let vc = f.vc as usize;
            let c = &mut self.counters.ports[p].vcs[vc];
            c.rx_flits += 1;
            c.rx_payload_bytes += f.payload.len() as u64;
            let ivc = &mut self.inputs[p * vcs + vc];
            ivc.push(f, at);
            self.live[(p * vcs + vc) / 64] |= 1 << ((p * vcs + vc) % 64);
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
        for (v, &stalled) in c.vcs.iter_mut().zip(&s.credit_stall_ns) {
            v.credit_stall_ns = stalled;
        }
        self.idx.unsynced[p] = false;
    }

    /// The port died or was set down: packets bound for it are dropped from
    /// now on, and what its link still had queued is discarded.
    fn fail_port(&mut self, p: usize) {
        let newly = !self.ports[p].failed;
        self.ports[p].failed = true;
        self.each_hook(|h, sw| h.on_port_failed(sw, p, newly));
        let discarded = self.link_mut(p).discard_queued();
        if discarded > 0 {
            self.counters.drops.port_down += discarded as u64;
        }
        for i in 0..self.inputs.len() {
            if let InState::Active { out, .. } = self.inputs[i].state {
                if out as usize == p {
                    self.cut_output_packet(i);
                }
            }
        }
    }

    /// The packet input VC `i` forwards lost its output: the output VC is
    /// freed, the rest of the packet is absorbed up to its tail (credits
    /// keep flowing upstream), and, if its head had left, the hooks hear
    /// of the cut (SBRP's node C reports it).
    fn cut_output_packet(&mut self, i: usize) {
        let InState::Active {
            out,
            out_vc,
            started,
        } = self.inputs[i].state
        else {
            return;
        };
        self.outputs.release(out as usize, out_vc);
        self.inputs[i].state = InState::Dropping {
            reason: DropReason::PortDown,
        };
        if started {
            // A peer not told of a disabled port would wait for the rest.
            self.link_mut(out as usize).note_packet_cut_while_disabled();
            self.each_hook(|h, sw| h.on_packet_cut(sw, i));
        }
    }

    /// Port `p`'s peer restarted (a new incarnation spoke) without having
    /// been declared dead: for what crossed this port, that is a cut, as
    /// when the port dies and comes back, except that what the link still
    /// queues is not lost (it goes to the new incarnation). The link has
    /// already reset its counters against the new incarnation
    /// ([`Link::peer_restart`] says what the old one took).
    ///
    /// Outputs: a packet whose head left for the old incarnation is cut
    /// (its queued rest is discarded, it is absorbed and reported as under
    /// `fail_port`), and the hooks hear which flits of each VC the old
    /// incarnation may have taken ([`hook::RestartLoss`]); a packet whose
    /// head is still queued goes on. Inputs: a packet the old incarnation
    /// had not finished sending is closed once its last flit here has
    /// left (`InputVc::tail_lost`), as a dead input's is. No `PortDown`
    /// is reported and no other hook sees the port fail: its link never
    /// went down and its routes are unchanged.
    fn peer_restarted(&mut self, p: usize) {
        let vcs = self.cfg.vcs as usize;
        let depth = self.cfg.buffer_depth as u64;
        let restarted = self.ports[p].link.peer_restart().to_vec();
        for (vc, r) in restarted.iter().enumerate() {
            let i = p * vcs + vc;
            let input = &mut self.inputs[i];
            input.stale = input.arrived.len() as u32 + r.undelivered as u32;
            input.tail_lost = input.stale == 0
                && !input.synthetic_tail
                && matches!(input.state, InState::Active { .. });
            self.mark_live(i);
        }
        let mut loss = Vec::with_capacity(vcs);
        let mut head_queued = Vec::with_capacity(vcs);
        for (vc, r) in restarted.iter().enumerate() {
            let (queued, head) = self.ports[p].link.queued_on(vc as u8);
            let left = self.counters.ports[p].vcs[vc]
                .tx_flits
                .saturating_sub(queued as u64);
            let orphans = self.link_mut(p).discard_queued_rest(vc as u8);
            if orphans > 0 {
                self.counters.drops.port_down += orphans as u64;
            }
            loss.push(hook::RestartLoss {
                left,
                lost_after: left.saturating_sub(r.unfreed as u64 + depth),
            });
            head_queued.push(head);
        }
        for i in 0..self.inputs.len() {
            if let InState::Active {
                out,
                out_vc,
                started: true,
            } = self.inputs[i].state
            {
                // The VC's queued flits are this packet's (it holds the
                // VC) after earlier whole packets: a queued head is its.
                if out as usize == p && !head_queued[out_vc as usize] {
                    self.cut_output_packet(i);
                }
            }
        }
        self.each_hook(|h, sw| h.on_peer_restarted(sw, p, &loss));
    }

    pub(crate) fn count_drop(&mut self, port: usize, vc: u8, reason: DropReason, n: u64, msg: u64) {
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
    pub(crate) fn pop_input(&mut self, i: usize) -> Option<Flit> {
        let vcs = self.cfg.vcs as usize;
        let (p, vc) = (i / vcs, i % vcs);
        let f = self.inputs[i].buf.pop_front()?;
        self.held[i] = 0;
        if self.inputs[i].synthetic_tail {
            // Made here (always pushed into an empty buffer, so it is the
            // front): no link slot to free.
            self.inputs[i].synthetic_tail = false;
            return Some(f);
        }
        self.inputs[i].arrived.pop_front();
        if p >= self.ports.len() {
            return Some(f);
        }
        let input = &mut self.inputs[i];
        if input.stale > 0 {
            input.stale -= 1;
            // The old incarnation's last flit, mid-packet, on its way out.
            input.tail_lost = input.stale == 0
                && !f.kind.is_tail()
                && matches!(input.state, InState::Active { .. });
        }
        // Cannot fail: the flit was delivered by this link and not yet released.
        let released = self.link_mut(p).release(vc as u8, 1);
        debug_assert!(released.is_ok(), "{released:?}");
        self.counters.ports[p].vcs[vc].occupancy = self.inputs[i].len() as u32;
        Some(f)
    }

    /// Route and VC allocation for a head of input VC `i` by the
    /// installed table.
    fn decide(&self, i: usize, f: &Flit) -> Decision {
        let Some(head) = f.head.as_ref() else {
            return Decision::Drop(DropReason::Orphan);
        };
        let Some(table) = self.table.as_ref() else {
            return Decision::Drop(DropReason::NoRoute);
        };
        let Some(route) = routing::lookup(table, routing::target(head)) else {
            return Decision::Drop(DropReason::NoRoute);
        };
        self.decide_route(i, head, f.seq, route)
    }

    /// Credits a head (flit number `seq`) needs to be admitted downstream:
    /// one under wormhole switching, its whole rest under virtual
    /// cut-through.
    pub(crate) fn need(&self, head: &Head, seq: u32) -> u16 {
        match self.cfg.switching {
            Switching::Wormhole => 1,
            Switching::VirtualCutThrough => {
                vc_alloc::vct_need(self.cfg.max_packet_flits, head, seq)
            }
        }
    }

    /// VC allocation for `head` (flit number `seq`) at input VC `i` among
    /// the ports `route` offers, under the installed VC policy.
    pub(crate) fn decide_route(&self, i: usize, head: &Head, seq: u32, route: Route) -> Decision {
        let vcs = self.cfg.vcs as usize;
        let (in_port, in_vc) = (i / vcs, (i % vcs) as u8);
        let need = self.need(head, seq);
        // Credits a port/VC offers, or why it cannot be used at all.
        let assess = |port: PortNo| -> Result<(u8, u16), DropReason> {
            let out = port as usize;
            if out >= self.ports.len() {
                return Err(DropReason::BadRoute);
            }
            if !self.port_alive(out) {
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

    /// Output VC `out_vc` of port `out` for a head that needs `need`
    /// credits: granted when the VC is free (under virtual cut-through,
    /// with room for `need`), else wait for it (on its credits if free).
    pub(crate) fn admit(&self, out: usize, out_vc: u8, need: u16) -> Decision {
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
    pub(crate) fn most_credited_vc(
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
                InState::Idle => {
                    match self.first_hook(|h, sw| match h.intercept(sw, i) {
                        Intercept::Pass => None,
                        taken => Some(taken),
                    }) {
                        Some(Intercept::Again) => continue,
                        Some(Intercept::Wait) => return None,
                        Some(Intercept::Pass) | None => {}
                    }
                    let f = self.inputs[i].buf.front()?;
                    let msg = f.msg;
                    let track = f.head.as_ref().map(|h| Tracked {
                        src: h.src,
                        dst: h.dst,
                        msg: f.msg,
                        packet: f.packet,
                        submsg: h.submsg,
                        first_seq: f.seq,
                        forwarded: 0,
                        is_rrq: f.flags & flags::RECOVER_REQUEST != 0,
                        msg_flits: h.msg_flits,
                    });
                    let decision = match self.first_hook(|h, sw| h.route(sw, i)) {
                        Some(d) => d,
                        None => {
                            let f = self.inputs[i].buf.front().expect("checked above");
                            self.decide(i, f)
                        }
                    };
                    match self.wait_clock(i, decision) {
                        Decision::Wait { on_credits } => {
                            if let Some((out, out_vc)) = on_credits {
                                self.note_stalled(out, out_vc);
                            }
                            return None;
                        }
                        Decision::Grant { out, out_vc } => {
                            self.each_hook(|h, sw| h.on_grant(sw, i, out));
                            self.inputs[i].track = track;
                            self.outputs.claim(out, out_vc, i as u32);
                            self.inputs[i].state = InState::Active {
                                out: out as PortNo,
                                out_vc,
                                started: false,
                            };
                        }
                        Decision::Drop(reason) => {
                            let f = self.pop_input(i)?;
                            let afresh =
                                self.hooks.iter().any(|h| h.hook.may_route_afresh(self, i));
                            let Some(f) = self.drop_through_hooks(i, f, reason, track, afresh)
                            else {
                                continue;
                            };
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

    /// Offers the dropped head `f` to every hook in turn; `None` once one
    /// kept it.
    fn drop_through_hooks(
        &mut self,
        i: usize,
        f: Flit,
        reason: DropReason,
        track: Option<Tracked>,
        afresh: bool,
    ) -> Option<Flit> {
        if self.hooks.is_empty() {
            return Some(f);
        }
        let mut hooks = std::mem::take(&mut self.hooks);
        let mut f = Some(f);
        for h in hooks.iter_mut() {
            let Some(flit) = f.take() else { break };
            f = h.hook.on_drop(self, i, flit, reason, track, afresh);
        }
        self.hooks = hooks;
        f
    }

    /// How long the head at the front of input VC `i` has waited for an
    /// output VC: a head that must wait starts its clock (or keeps it
    /// running) and the hooks may drop it for waiting too long
    /// (`on_wait`); a grant or a drop stops the clock, and a grant counts
    /// toward `head_wait_max_ns`.
    fn wait_clock(&mut self, i: usize, decision: Decision) -> Decision {
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
        if self.hooks.is_empty() {
            return decision;
        }
        let dropped = self
            .hooks
            .iter_mut()
            .find_map(|h| h.hook.on_wait(now, since));
        match dropped {
            Some(reason) => {
                self.inputs[i].waiting_since = None;
                Decision::Drop(reason)
            }
            None => decision,
        }
    }

    /// Allocation rounds until no flit moves. The first round examines
    /// every input VC; later rounds only those that requested in the
    /// previous one, because within a pump credits only decrease and the
    /// only thing that can unblock another input is a tail freeing an
    /// output VC (which triggers a full scan again).
    pub(crate) fn pump(&mut self) {
        let mut requesters = std::mem::take(&mut self.requesters);
        let mut next = std::mem::take(&mut self.next_requesters);
        let mut grants = std::mem::take(&mut self.grants);
        let mut scan_all = true;
        // The first round examines every input VC, so every head still
        // waiting is seen again (`SwitchHook::on_wait`).
        let now = self.now;
        for h in self.hooks.iter_mut() {
            h.hook.begin_pass(now);
        }
        self.xbar_wake_at = None;
        loop {
            scan_all |= self.feed_local_input();
            next.clear();
            if scan_all {
                // A hook may give the local input the first claim on an
                // output VC that is free (never pre-empting a port already
                // carrying a packet).
                let l = self.local_input();
                let ctrl_first = self.hooks.iter().any(|h| h.hook.local_input_first());
                if ctrl_first {
                    let mut at = l;
                    while let Some(i) = self.next_live(at) {
                        self.examine_live(i, &mut next);
                        at = i + 1;
                    }
                }
                let end = if ctrl_first { l } else { self.inputs.len() };
                let mut at = 0;
                while let Some(i) = self.next_live(at).filter(|&i| i < end) {
                    self.examine_live(i, &mut next);
                    at = i + 1;
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

    /// Marks input VC `i` for the next allocation pass.
    fn mark_live(&mut self, i: usize) {
        self.live[i / 64] |= 1 << (i % 64);
    }

    /// The first input VC from `from` on that a pass must examine, read
    /// afresh (examining one VC may give another flits).
    fn next_live(&self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        if w >= self.live.len() {
            return None;
        }
        let mut bits = self.live[w] & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            if w >= self.live.len() {
                return None;
            }
            bits = self.live[w];
        }
    }

    /// [`Switch::examine`] of a VC of the live set, which leaves the set
    /// once it holds nothing and no packet (examining it again would do
    /// nothing until a flit arrives).
    fn examine_live(&mut self, i: usize, requested: &mut Vec<u32>) {
        let held = self.held[i];
        if held > self.now {
            self.wake_xbar_at(held);
            return;
        }
        self.examine(i, requested);
        let vc = &self.inputs[i];
        if vc.is_empty() && !matches!(vc.state, InState::Active { .. }) {
            self.live[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Settles input VC `i` and, if its front flit can go, files its
    /// request with the switch allocator (and notes `i` in `requested`).
    fn examine(&mut self, i: usize, requested: &mut Vec<u32>) {
        let vcs = self.cfg.vcs as usize;
        if std::mem::take(&mut self.inputs[i].tail_lost) {
            // A restarted peer's old incarnation left this packet open:
            // closed as a dead input's is (below), ahead of the new
            // incarnation's flits.
            self.close_dead_input(i);
        }
        if self.inputs[i].is_empty() {
            // An input whose port died mid-packet will never see the
            // tail: a hook may close the packet (SBRP's NFT), else the
            // switch closes it itself with a non-final tail, so that the
            // worm's downstream path is freed hop by hop (its receiver
            // counts the packet incomplete). Freeing only the output VC
            // here would leave every VC after it held by a worm with no
            // tail, for good once re-routing sends nothing that way again
            // (found by `flitctl sim swarm`: a link kill under controller
            // re-routing stalled the fabric). Failing that (nothing
            // forwarded yet), the output VC it holds is freed.
            let input_dead = self.ports.get(i / vcs).is_some_and(|p| p.failed);
            if input_dead && self.close_dead_input(i) {
                self.examine(i, requested);
            }
            return;
        }
        // The traversal latency: a flit is routed and allocated no
        // earlier than that long after it arrived.
        if let Some(at) = self.inputs[i].front_arrival() {
            let ready = at.saturating_add(self.cfg.timing.traversal_ns);
            if ready > self.now {
                self.held[i] = ready;
                self.wake_xbar_at(ready);
                return;
            }
        }
        if let Some((out, out_vc)) = self.resolve_front(i) {
            // The crossbar: the input and the output port must be free.
            let free = self.in_free_at[i / vcs].max(self.out_free_at[out]);
            if free > self.now {
                self.wake_xbar_at(free);
                return;
            }
            if self.ports[out].link.credits(out_vc) > 0 {
                self.alloc.request(out as u16, i as u32);
                requested.push(i as u32);
            } else {
                self.note_stalled(out, out_vc);
            }
        }
    }

    /// Closes the packet input VC `i` forwards, whose tail will never
    /// come and of which nothing is left here: a hook may close it (SBRP's
    /// NFT), else the switch puts a non-final tail in front, else (nothing
    /// forwarded yet) its output VC is freed. Returns whether a tail was
    /// put in (the input must be looked at again). Nothing for an input
    /// not forwarding a packet.
    fn close_dead_input(&mut self, i: usize) -> bool {
        let InState::Active { out, out_vc, .. } = self.inputs[i].state else {
            return false;
        };
        let by_hook = self
            .first_hook(|h, sw| h.on_input_dead(sw, i).then_some(()))
            .is_some();
        if by_hook || self.close_with_non_final_tail(i) {
            if !by_hook {
                self.counters.truncated_packets += 1;
            }
            return true;
        }
        self.outputs.release(out as usize, out_vc);
        self.inputs[i].state = InState::Idle;
        self.counters.truncated_packets += 1;
        false
    }

    /// Puts a non-final tail at the front of input VC `i` for the packet
    /// it forwards, whose own tail will never come (its input died, or the
    /// peer that sent it restarted; whatever is buffered behind belongs to
    /// later packets); returns whether it did (not when the packet already
    /// has one, or is not tracked).
    pub(crate) fn close_with_non_final_tail(&mut self, i: usize) -> bool {
        let vcs = self.cfg.vcs as usize;
        let input = &mut self.inputs[i];
        if input.synthetic_tail {
            return false;
        }
        let Some(t) = input.track else {
            return false;
        };
        input.buf.push_front(Flit {
            kind: FlitKind::Tail,
            vc: (i % vcs) as u8,
            flags: flags::NON_FINAL_TAIL,
            msg: t.msg,
            packet: t.packet,
            seq: t.first_seq + t.forwarded,
            head: None,
            payload: Bytes::new(),
        });
        input.synthetic_tail = true;
        true
    }

    /// Starts the credit-stall clock of output `out`, VC `vc` (its
    /// counters change; its transmission does not).
    fn note_stalled(&mut self, out: usize, vc: u8) {
        self.catch_up(out);
        self.ports[out].link.note_stalled(vc);
    }

    /// Notes that a flit held back by timing may move at `at`.
    fn wake_xbar_at(&mut self, at: u64) {
        self.xbar_wake_at = Some(self.xbar_wake_at.map_or(at, |w| w.min(at)));
    }

    /// Moves the front flit of input VC `i` into output port `out`;
    /// returns whether that freed the output VC (a tail left).
    fn forward(&mut self, out: usize, i: usize) -> bool {
        let InState::Active { out_vc, .. } = self.inputs[i].state else {
            return false;
        };
        let vcs = self.cfg.vcs as usize;
        let now = self.now;
        // When the flit crosses the crossbar. Exactly now in the simulator
        // (woken when it may move). A daemon woken late (its links count
        // transit time: one shared clock) backdates it to when the flit
        // could have crossed, as its links backdate each flit's start, so
        // that a late wake-up moves what the switch would have moved
        // meanwhile instead of one flit per port.
        let crossed = if self.cfg.link.count_transit {
            let ready = self.inputs[i]
                .front_arrival()
                .map_or(0, |a| a.saturating_add(self.cfg.timing.traversal_ns));
            ready
                .max(self.in_free_at[i / vcs])
                .max(self.out_free_at[out])
                .min(now)
        } else {
            now
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
        for free in [&mut self.in_free_at[i / vcs], &mut self.out_free_at[out]] {
            *free = (*free).max(crossed) + self.xbar_step_ns;
        }
        match self.link_mut(out).send_at(crossed, f) {
            Ok(()) => {
                let c = &mut self.counters.ports[out].vcs[out_vc as usize];
                c.tx_flits += 1;
                c.tx_payload_bytes += bytes;
                let sent = c.tx_flits;
                if let Some(t) = shadow {
                    self.each_hook(|h, sw| h.on_tail_sent(sw, out, out_vc, t, sent));
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
    /// on the link: a queued flit has taken its credit), plus what the
    /// hooks hold for the local input (recover requests, control packets). A flit in the next switch's
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
        let hooks: u64 = self.hooks.iter().map(|h| h.hook.in_flight_flits()).sum();
        buffered as u64 + links + hooks
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
pub(crate) mod test_rig;
#[cfg(test)]
pub(crate) mod tests;
