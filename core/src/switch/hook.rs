//! The switch's side of a mechanism ([`crate::mechanism`]): the points of
//! the pipeline where a recovery or routing mechanism may act, as one trait.
//! The pipeline knows no mechanism by name; it calls every installed hook
//! at each point, in the registry's order (the first one that answers wins
//! where only one may: interception, routing, injection into the local
//! input).
//!
//! Hooks are consulted on heads, drops, tails that carry a tracked packet,
//! port failures and table changes, never on body flits: a boxed hook's
//! indirect call costs nothing measurable there (the datapath benchmark).

use super::counters::DropReason;
use super::input::Tracked;
use super::{Decision, Switch};
use crate::flit::Flit;
use std::any::Any;

/// What a hook did with the packet at the front of an idle input VC,
/// before it is routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intercept {
    /// Not the hook's packet: route it as usual.
    Pass,
    /// The hook consumed the front flit or settled the input's state:
    /// look at the front again.
    Again,
    /// The packet must wait (nothing to request this round).
    Wait,
}

/// What a port's peer restart took on one output VC, in the VC's flit
/// numbers (its `tx_flits` count: the n-th flit the switch sent on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartLoss {
    /// The last flit that left on the wire for the old incarnation (the
    /// ones after it were still queued: they go to the new one, apart
    /// from the rest of a packet whose head left, which is discarded).
    pub left: u64,
    /// Flits up to this one had been freed by the old incarnation and
    /// were past its output queue, bounded by the next hop's credits
    /// (the last one buffer depth of freed flits may still have been
    /// there): those after it may be lost.
    pub lost_after: u64,
}

/// One mechanism's switch hooks. Every method has a default that does
/// nothing, so a mechanism implements only the points it acts on.
pub trait SwitchHook: Any + Send {
    /// The mechanism's name in the registry.
    fn name(&self) -> &'static str;

    fn as_any(&self) -> &dyn Any;

    fn as_any_mut(&mut self) -> &mut dyn Any;

    /// The packet at the front of idle input VC `i` is about to be routed.
    fn intercept(&mut self, _sw: &mut Switch, _i: usize) -> Intercept {
        Intercept::Pass
    }

    /// Route and VC allocation for the head at the front of input VC `i`,
    /// if this mechanism routes it (the first hook that answers decides;
    /// with none, the installed table does).
    fn route(&mut self, _sw: &mut Switch, _i: usize) -> Option<Decision> {
        None
    }

    /// Whether the head just dropped at input VC `i` (the route decided
    /// `Drop`) could be routed afresh from this switch with a chance of
    /// success, without new tables.
    fn may_route_afresh(&self, _sw: &Switch, _i: usize) -> bool {
        false
    }

    /// A head at the front of an input VC has waited for an output VC
    /// since `since` (it still must wait at `now`): drop it (`Some`) or let
    /// it wait.
    fn on_wait(&mut self, _now: u64, _since: u64) -> Option<DropReason> {
        None
    }

    /// The head at the front of input VC `i` was granted output port `out`.
    fn on_grant(&mut self, _sw: &mut Switch, _i: usize, _out: usize) {}

    /// The head `f`, just taken from input VC `i`, is dropped for `reason`
    /// (`track`: its packet; `afresh`: see [`SwitchHook::may_route_afresh`]).
    /// Returns the flit to discard, or `None` when the hook kept it.
    fn on_drop(
        &mut self,
        _sw: &mut Switch,
        _i: usize,
        f: Flit,
        _reason: DropReason,
        _track: Option<Tracked>,
        _afresh: bool,
    ) -> Option<Flit> {
        Some(f)
    }

    /// The packet holding an output VC from input VC `i` will never get
    /// its tail and has nothing more here (its port is dead and the VC
    /// empty, or the peer restarted after sending its last flit here):
    /// returns whether the hook put a flit at the VC's front to close the
    /// packet (the pipeline then looks at the input again).
    fn on_input_dead(&mut self, _sw: &mut Switch, _i: usize) -> bool {
        false
    }

    /// The tail of packet `track` left on output VC `out_vc` of port `out`,
    /// the VC's `sent`-th flit.
    fn on_tail_sent(
        &mut self,
        _sw: &mut Switch,
        _out: usize,
        _out_vc: u8,
        _track: Tracked,
        _sent: u64,
    ) {
    }

    /// Port `p` died or was set down (`newly`: it was alive until now).
    fn on_port_failed(&mut self, _sw: &mut Switch, _p: usize, _newly: bool) {}

    /// The packet holding an output VC from input VC `i` was cut mid-way
    /// by its output's death or its peer's restart (its head had left).
    fn on_packet_cut(&mut self, _sw: &mut Switch, _i: usize) {}

    /// Port `p`'s peer restarted before it was declared dead (the port
    /// never went down): per output VC, `loss` says which flits sent on it
    /// the old incarnation may have taken. The packets still crossing the
    /// port were cut already (`on_packet_cut`); this is for what the hook
    /// keeps about packets that left whole.
    fn on_peer_restarted(&mut self, _sw: &mut Switch, _p: usize, _loss: &[RestartLoss]) {}

    /// A new table was installed or a port came back.
    fn on_routes_changed(&mut self, _sw: &mut Switch) {}

    /// The local input VC is free: a flit this switch makes to send.
    fn inject(&mut self, _sw: &mut Switch) -> Option<Flit> {
        None
    }

    /// Whether the local input gets the first claim on free output VCs.
    fn local_input_first(&self) -> bool {
        false
    }

    /// An allocation pass starts at `now` (every waiting head is examined
    /// again).
    fn begin_pass(&mut self, _now: u64) {}

    /// When the hook next needs the switch to run, if ever.
    fn poll_timeout(&self) -> Option<u64> {
        None
    }

    /// Flits the hook holds that are still in the network's care.
    /// A problem worth a warning in the daemon's log (counted by the
    /// mechanism too), taken so that the owner logs each once.
    fn take_warning(&mut self) -> Option<String> {
        None
    }

    fn in_flight_flits(&self) -> u64 {
        0
    }
}

/// An installed hook and its rank in the registry (hooks run in rank order).
pub(crate) struct Installed {
    pub rank: usize,
    pub hook: Box<dyn SwitchHook>,
}
