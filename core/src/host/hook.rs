//! The host's side of a mechanism ([`crate::mechanism`]): the points of the
//! endpoint's pipeline where a recovery or routing mechanism may act, as
//! one trait (the switch's is [`crate::switch::hook::SwitchHook`]). The
//! endpoint knows no mechanism by name; it calls every installed hook at
//! each point, in the registry's order.
//!
//! A host carries a hook only once the controller configures its mechanism
//! ([`HostEndpoint::install_hook`]), so a host without one pays nothing on
//! its receive path.

use super::endpoint::HostEndpoint;
use super::message::OutPacket;
use crate::flit::{Flit, Head};
use crate::host::endpoint::HostReport;
use crate::topology::HostId;
use std::any::Any;
use std::fmt::Debug;

/// One mechanism's host hooks. Every method has a default that does
/// nothing, so a mechanism implements only the points it acts on.
pub trait HostHook: Any + Send + Debug {
    /// The mechanism's name in the registry.
    fn name(&self) -> &'static str;

    fn as_any(&self) -> &dyn Any;

    fn as_any_mut(&mut self) -> &mut dyn Any;

    /// A flit taken off the link, before the sink sees it: returns true
    /// when the hook consumed it (a control packet of its own).
    fn intercept(&mut self, _host: &mut HostEndpoint, _now: u64, _flit: &Flit) -> bool {
        false
    }

    /// A flit the sink has just received.
    fn on_received(&mut self, _host: &mut HostEndpoint, _now: u64, _flit: &Flit) {}

    /// Host `peer` is known dead: nothing it sent will be resent.
    fn on_peer_down(&mut self, _peer: HostId) {}

    /// The flits that arrived are handed over: work that falls due now.
    fn after_receive(&mut self, _host: &mut HostEndpoint, _now: u64) {}

    /// An idle lane on `vc`: a one-flit control packet to send first.
    fn take_control(&mut self, _vc: u8) -> Option<Flit> {
        None
    }

    /// An idle lane: a packet to send before the source's next one.
    fn take_packet(&mut self, _now: u64) -> Option<OutPacket> {
        None
    }

    /// `packet`'s last flit has been handed to the link (a resend's too).
    fn on_packet_sent(&mut self, _packet: &OutPacket, _now: u64) {}

    /// The head of a packet about to leave the host.
    fn shape_head(&mut self, _head: &mut Head) {}

    /// When the hook next needs the host to run (`now`: the host's latest
    /// time), if ever.
    fn poll_timeout(&self, _now: u64) -> Option<u64> {
        None
    }

    /// Work the hook still holds: packets to resend, control packets to
    /// send, packets it waits on (the report's `recovery_in_progress`).
    fn in_progress(&self) -> usize {
        0
    }

    /// Whether everything the hook makes to send has left.
    fn is_drained(&self) -> bool {
        true
    }

    /// A new run starts: counters from zero.
    fn begin_run(&mut self) {}

    /// Writes the hook's figures into the host's report.
    fn report(&self, _report: &mut HostReport) {}
}

/// An installed hook and its rank in the registry (hooks run in rank order).
#[derive(Debug)]
pub(crate) struct Installed {
    pub rank: usize,
    pub hook: Box<dyn HostHook>,
}

impl HostEndpoint {
    /// Installs `hook` (replacing one of the same mechanism) at `rank`, its
    /// mechanism's position in the registry (`crate::mechanism::rank`).
    pub fn install_hook(&mut self, rank: usize, hook: Box<dyn HostHook>) {
        self.hooks.retain(|h| h.rank != rank);
        let at = self.hooks.partition_point(|h| h.rank < rank);
        self.hooks.insert(at, Installed { rank, hook });
    }

    /// The installed hook of type `T`, if any.
    pub(crate) fn hook<T: HostHook>(&self) -> Option<&T> {
        self.hooks
            .iter()
            .find_map(|h| h.hook.as_any().downcast_ref::<T>())
    }

    pub(crate) fn hook_mut<T: HostHook>(&mut self) -> Option<&mut T> {
        self.hooks
            .iter_mut()
            .find_map(|h| h.hook.as_any_mut().downcast_mut::<T>())
    }

    /// Runs `f` on every installed hook, in rank order, with the endpoint
    /// lent to it (the hooks are set aside meanwhile: a hook never sees
    /// itself, or another, through the endpoint).
    pub(crate) fn each_hook(&mut self, mut f: impl FnMut(&mut dyn HostHook, &mut HostEndpoint)) {
        if self.hooks.is_empty() {
            return;
        }
        let mut hooks = std::mem::take(&mut self.hooks);
        for h in &mut hooks {
            f(h.hook.as_mut(), self);
        }
        // A hook installs none; whatever the endpoint holds now is empty.
        debug_assert!(self.hooks.is_empty());
        self.hooks = hooks;
    }
}
