//! Local rerouting in the switch pipeline (the SBRP paper's local fault
//! handling, under the `local-reroute` engine's tables,
//! [`VcPolicy::LocalReroute`]): an adaptive VC on the live minimal port
//! with the most credits, else the escape VC on the escape port; with every
//! minimal port dead, one misroute per packet.

use super::NAME;
use crate::flit::{route_flags, Flit};
use crate::mechanism::hook_any;
use crate::routing::{SwitchTable, VcPolicy};
use crate::switch::hook::SwitchHook;
use crate::switch::routing;
use crate::switch::{Decision, DropReason, Switch};
use crate::topology::PortNo;

/// The standing hook: it acts while the installed policy is
/// [`VcPolicy::LocalReroute`].
pub(crate) struct LocalRerouteHook;

impl SwitchHook for LocalRerouteHook {
    fn name(&self) -> &'static str {
        NAME
    }
    hook_any!();

    fn route(&mut self, sw: &mut Switch, i: usize) -> Option<Decision> {
        if sw.policy != VcPolicy::LocalReroute {
            return None;
        }
        let f = sw.inputs[i].buf.front()?;
        Some(sw.decide_local(i, f))
    }

    fn on_grant(&mut self, sw: &mut Switch, i: usize, out: usize) {
        if sw.policy == VcPolicy::LocalReroute {
            sw.mark_local_misroute(i, out);
        }
    }

    /// A head no live port could take may be routed again from scratch
    /// (no controller will install tables that would unpark its recover
    /// request) when it came in on a link: a packet this switch injected
    /// itself was already routed from scratch.
    fn may_route_afresh(&self, sw: &Switch, i: usize) -> bool {
        sw.policy == VcPolicy::LocalReroute && i < sw.local_input()
    }
}

impl Switch {
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
        let need = self.need(head, f.seq);
        let usable = |port: PortNo| {
            let out = port as usize;
            out < self.ports.len() && out != in_port && self.port_alive(out)
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
}

#[cfg(test)]
#[path = "switch_tests.rs"]
pub(crate) mod switch_tests;
