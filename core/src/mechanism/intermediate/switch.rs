//! Intermediate nodes in the switch pipeline (*A Routing Methodology for
//! Achieving Fault Tolerance in Direct Networks*, §3.2, §3.9): under the
//! [`VcPolicy::Legs`] tables a head is routed leg by leg toward its current
//! target by Duato's protocol, with the adaptive VCs shared by all legs
//! and one escape set per leg; a leg that ends at an intermediate node
//! attached to this switch is popped here (no ejection), and a forced
//! misroute hop is spent when taken.

use super::NAME;
use crate::flit::{route_flags, Flit};
use crate::mechanism::hook_any;
use crate::routing::VcPolicy;
use crate::switch::hook::SwitchHook;
use crate::switch::routing::{self, Route};
use crate::switch::{vc_alloc, Decision, DropReason, Switch};
use crate::topology::PortNo;

/// The standing hook: it acts while the installed policy is
/// [`VcPolicy::Legs`].
pub(crate) struct LegsHook;

impl SwitchHook for LegsHook {
    fn name(&self) -> &'static str {
        NAME
    }
    hook_any!();

    fn route(&mut self, sw: &mut Switch, i: usize) -> Option<Decision> {
        if !matches!(sw.policy, VcPolicy::Legs { .. }) {
            return None;
        }
        sw.advance_leg(i);
        let f = sw.inputs[i].buf.front()?;
        Some(sw.decide_legs(i, f))
    }

    fn on_grant(&mut self, sw: &mut Switch, i: usize, _out: usize) {
        if !matches!(sw.policy, VcPolicy::Legs { .. }) {
            return;
        }
        if let Some(h) = sw.inputs[i].buf.front_mut().and_then(|f| f.head.as_mut()) {
            if h.pending_run().is_some() {
                // The forced hop is taken: rewrite the head (§3.10
                // hops_left − 1).
                h.spend_run_hop();
                sw.counters.misroute_hops += 1;
            }
        }
    }
}

impl Switch {
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
        let need = self.need(head, f.seq);
        let usable = |port: PortNo| -> Result<usize, DropReason> {
            let out = port as usize;
            if out >= self.ports.len() {
                return Err(DropReason::BadRoute);
            }
            if !self.port_alive(out) {
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
}

#[cfg(test)]
#[path = "switch_tests.rs"]
pub(crate) mod switch_tests;
