//! Dynamic FT²EI (seed 000 §4.5–§4.6) inside the switch core. With a
//! [`Ft2eiDynSwitch`] configured, the switch
//! - routes every head by it (interval routing with this switch's own
//!   exclusion registers, adaptive among the allowed up ports), instead of
//!   the installed table;
//! - reacts to a port it declares dead (peer silent past the liveness
//!   timeout, or set down) with `on_local_fault`, with no controller;
//! - carries the protocol's `CTRL{FaultySwitch, ELIB, EUIB}` as one-flit
//!   packets flagged [`flags::FT2EI_CTRL`]: a received one is consumed
//!   whole before anything is decided (store-and-forward), the copies to
//!   send enter through the local input (the one the SBRP recover requests
//!   use) ahead of queued recover requests, each bound to its port;
//! - deflects a packet whose only output is a dead down port down another
//!   live down port (emergency path) and tags it
//!   [`route_flags::DEFLECTED`] so that the child does not send it back up
//!   the port it came in on.
//!
//! Faults are permanent (§4.1): a port that comes back stays excluded until
//! the tables are reinstalled with a new state.

use super::protocol::{Ctrl, DynRoute, Ft2eiDynSwitch, Send};
use super::NAME;
use crate::flit::{flags, route_flags, Flit, FlitKind, Head};
use crate::mechanism::hook_any;
use crate::switch::hook::{Intercept, SwitchHook};
use crate::switch::input::InState;
use crate::switch::routing::{self, Route};
use crate::switch::{Decision, DropReason, Switch};
use crate::topology::{HostId, PortNo};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::VecDeque;

/// Why a switch refuses a dynamic FT²EI configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "switch {switch}: FT²EI for a {k}-ary tree needs radix {need}, this switch has {radix} ports"
)]
pub struct Ft2eiConfigError {
    pub switch: u32,
    pub k: u32,
    pub need: usize,
    pub radix: usize,
}

/// The payload of a CTRL flit.
pub fn encode_ctrl(c: Ctrl) -> Bytes {
    let mut b = BytesMut::with_capacity(12);
    b.put_u32_le(c.faulty);
    b.put_u32_le(c.elib);
    b.put_u32_le(c.euib);
    b.freeze()
}

/// Reads a CTRL payload; `None` if it is not 12 bytes.
pub fn decode_ctrl(p: &[u8]) -> Option<Ctrl> {
    if p.len() != 12 {
        return None;
    }
    let w = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().expect("4 bytes"));
    Some(Ctrl {
        faulty: w(0),
        elib: w(4),
        euib: w(8),
    })
}

/// A one-flit CTRL packet (it has a head like every packet; `dst`/`src`
/// carry the interval for readability in traces, the payload is what
/// counts).
pub fn ctrl_flit(c: Ctrl, now: u64) -> Flit {
    Flit {
        kind: FlitKind::HeadTail,
        vc: 0,
        flags: flags::FT2EI_CTRL,
        msg: 0,
        packet: 0,
        seq: 0,
        head: Some(Head {
            dst: c.euib as HostId,
            src: c.elib as HostId,
            msg_flits: 1,
            born_ns: now,
            route_flags: route_flags::DETERMINISTIC,
            ..Head::default()
        }),
        payload: encode_ctrl(c),
    }
}

/// The protocol's state in one switch.
struct Ft2eiHook {
    state: Ft2eiDynSwitch,
    /// CTRL copies to send, each bound to its port, fed through the local
    /// input ahead of the RRQs.
    ctrl_pending: VecDeque<(PortNo, Flit)>,
    /// The port of the CTRL now in the local input.
    ctrl_local_port: Option<PortNo>,
    /// The last protocol error, until the owner takes it.
    error: Option<String>,
}

impl Ft2eiHook {
    /// Queues the protocol's output and accounts for its updates.
    fn after(
        &mut self,
        sw: &mut Switch,
        before: u64,
        r: Result<Vec<Send>, impl std::fmt::Display>,
    ) {
        let applied = self.state.updates() - before;
        if applied > 0 {
            sw.counters.ft2ei.exclusion_updates += applied;
            sw.counters.ft2ei.last_update_ns = sw.now;
        }
        match r {
            Ok(sends) => {
                let now = sw.now;
                self.ctrl_pending
                    .extend(sends.into_iter().map(|s| (s.port, ctrl_flit(s.ctrl, now))));
            }
            Err(e) => {
                sw.counters.ft2ei.errors += 1;
                self.error = Some(e.to_string());
            }
        }
    }

    /// `on_local_fault` for port `p`, which was just declared dead.
    fn local_fault(&mut self, sw: &mut Switch, p: usize) {
        let t = self.state.tree();
        if t.is_top(self.state.id()) && p as u32 >= t.k && !self.state.is_ruft() {
            // A top switch's up ports are not cabled in a k-ary n-tree:
            // nothing the protocol needs to know.
            return;
        }
        let before = self.state.updates();
        let r = self.state.on_local_fault(p as PortNo);
        if sw.counters.ft2ei.fault_ns == 0 {
            sw.counters.ft2ei.fault_ns = sw.now.max(1);
        }
        self.after(sw, before, r);
    }

    /// A CTRL flit arrived on `port`: it is consumed here.
    fn receive(&mut self, sw: &mut Switch, port: usize, f: &Flit) {
        sw.counters.ft2ei.ctrl_received += 1;
        let Some(c) = decode_ctrl(&f.payload) else {
            sw.counters.ft2ei.errors += 1;
            self.error = Some(format!(
                "switch {}: CTRL on port {port} with a {}-byte payload (12 expected)",
                self.state.id(),
                f.payload.len()
            ));
            return;
        };
        let before = self.state.updates();
        let r = self.state.on_ctrl(c, port as PortNo);
        self.after(sw, before, r);
    }

    /// The allocation decision for a CTRL in the local input, bound to
    /// `port`: `None` when the port died and the copy must be discarded.
    fn decide_ctrl(sw: &Switch, port: PortNo) -> Option<Decision> {
        let out = port as usize;
        if out >= sw.ports.len() || !sw.port_alive(out) {
            return None;
        }
        let out_vc = 0;
        let free = sw.outputs.is_free(out, out_vc);
        let admitted = free && sw.ports[out].link.credits(out_vc) >= 1;
        Some(if admitted {
            Decision::Grant { out, out_vc }
        } else {
            Decision::Wait {
                on_credits: free.then_some((out, out_vc)),
            }
        })
    }
}

impl SwitchHook for Ft2eiHook {
    fn name(&self) -> &'static str {
        NAME
    }
    hook_any!();

    /// A received CTRL is consumed whole (store-and-forward: the one-flit
    /// packet is all here); one of ours in the local input claims its port.
    fn intercept(&mut self, sw: &mut Switch, i: usize) -> Intercept {
        let Some(f) = sw.inputs[i].buf.front() else {
            return Intercept::Pass;
        };
        if f.flags & flags::FT2EI_CTRL == 0 {
            return Intercept::Pass;
        }
        if i < sw.local_input() {
            let port = i / sw.cfg.vcs as usize;
            if let Some(f) = sw.pop_input(i) {
                self.receive(sw, port, &f);
            }
            return Intercept::Again;
        }
        let port = self.ctrl_local_port.unwrap_or(PortNo::MAX);
        match Self::decide_ctrl(sw, port) {
            Some(Decision::Grant { out, out_vc }) => {
                sw.counters.ft2ei.ctrl_sent += 1;
                sw.outputs.claim(out, out_vc, i as u32);
                sw.inputs[i].state = InState::Active {
                    out: out as PortNo,
                    out_vc,
                    started: false,
                };
                Intercept::Again
            }
            Some(_) => Intercept::Wait,
            None => {
                sw.pop_input(i);
                self.ctrl_local_port = None;
                sw.counters.ft2ei.ctrl_dropped += 1;
                Intercept::Again
            }
        }
    }

    /// The dynamic routing function's ports for the head at input `i`
    /// (interval routing with this switch's own exclusion registers,
    /// adaptive among the allowed up ports), instead of the table's.
    fn route(&mut self, sw: &mut Switch, i: usize) -> Option<Decision> {
        let f = sw.inputs[i].buf.front()?;
        let Some(head) = f.head.as_ref() else {
            return Some(Decision::Drop(DropReason::Orphan));
        };
        let in_port = i / sw.cfg.vcs as usize;
        let deflected = head.route_flags & route_flags::DEFLECTED != 0;
        let ports: Vec<PortNo>;
        let route = match self
            .state
            .route(routing::target(head), in_port as PortNo, deflected)
        {
            DynRoute::Ports(p) => {
                ports = p;
                Route::Adaptive {
                    candidates: &ports,
                    escape: None,
                }
            }
            DynRoute::Deflect(p) => Route::Fixed(p),
            DynRoute::None => return Some(Decision::Drop(DropReason::NoRoute)),
        };
        Some(sw.decide_route(i, head, f.seq, route))
    }

    /// A head routed by the protocol was granted `out`: tag it if that is
    /// an emergency deflection, untag it otherwise.
    fn on_grant(&mut self, sw: &mut Switch, i: usize, out: usize) {
        let t = self.state.tree();
        let id = self.state.id();
        let Some(h) = sw.inputs[i].buf.front_mut().and_then(|f| f.head.as_mut()) else {
            return;
        };
        let d = routing::target(h);
        let deflected =
            !self.state.is_ruft() && t.is_below(id, d) && out as u32 != t.digit(d, t.stage(id));
        if deflected {
            h.route_flags |= route_flags::DEFLECTED;
            sw.counters.ft2ei.deflections += 1;
        } else {
            h.route_flags &= !route_flags::DEFLECTED;
        }
    }

    fn on_port_failed(&mut self, sw: &mut Switch, p: usize, newly: bool) {
        if newly {
            self.local_fault(sw, p);
        }
    }

    /// Control packets first: they keep reconfiguration short (§4.5).
    fn inject(&mut self, _sw: &mut Switch) -> Option<Flit> {
        let (port, f) = self.ctrl_pending.pop_front()?;
        self.ctrl_local_port = Some(port);
        Some(f)
    }

    /// The non-preemptive priority of §4.5: control packets (local input)
    /// get the first claim on a free output VC.
    fn local_input_first(&self) -> bool {
        true
    }

    fn take_warning(&mut self) -> Option<String> {
        self.error.take()
    }

    fn in_flight_flits(&self) -> u64 {
        self.ctrl_pending.len() as u64
    }
}

impl Switch {
    /// Runs dynamic FT²EI from now on (`Some`), or stops (`None`). Ports
    /// already dead are reported to the protocol at once.
    pub fn set_ft2ei_dyn(&mut self, state: Option<Ft2eiDynSwitch>) -> Result<(), Ft2eiConfigError> {
        if let Some(s) = &state {
            let need = 2 * s.tree().k as usize;
            if self.cfg.radix != need {
                return Err(Ft2eiConfigError {
                    switch: s.id(),
                    k: s.tree().k,
                    need,
                    radix: self.cfg.radix,
                });
            }
        }
        let rank = crate::mechanism::rank(NAME);
        let Some(state) = state else {
            self.set_hook(rank, NAME, None);
            self.pump();
            return Ok(());
        };
        let mut hook = Ft2eiHook {
            state,
            ctrl_pending: VecDeque::new(),
            ctrl_local_port: None,
            error: None,
        };
        for p in 0..self.ports.len() {
            // Dead, not merely not yet heard (a port trains after the
            // protocol is configured at bring-up).
            if self.ports[p].failed || !self.ports[p].link.is_admin_up() {
                hook.local_fault(self, p);
            }
        }
        self.set_hook(rank, NAME, Some(Box::new(hook)));
        self.pump();
        Ok(())
    }

    pub fn ft2ei_dyn(&self) -> Option<&Ft2eiDynSwitch> {
        self.hook::<Ft2eiHook>().map(|h| &h.state)
    }
}

#[cfg(test)]
mod tests {
    use super::super::protocol::Ft2eiDynConfig;
    use super::*;
    use crate::link::{Link, LinkConfig};
    use crate::switch::SwitchConfig;

    #[test]
    fn ctrl_payload_round_trips_and_rejects_bad_lengths() {
        let c = Ctrl {
            faulty: 6,
            elib: 6,
            euib: 7,
        };
        assert_eq!(decode_ctrl(&encode_ctrl(c)), Some(c));
        assert_eq!(decode_ctrl(&[0; 11]), None);
        let f = ctrl_flit(c, 5);
        assert!(f.flags & flags::FT2EI_CTRL != 0);
        assert!(f.kind.is_head() && f.kind.is_tail());
    }

    fn link_cfg() -> LinkConfig {
        LinkConfig {
            vcs: 1,
            buffer_depth: 4,
            bandwidth_flits_per_s: None,
            propagation_ns: 0,
            ..LinkConfig::default()
        }
    }

    /// One switch of the 2-ary 3-tree with the protocol on and a peer link
    /// per port.
    struct Rig {
        sw: Switch,
        peers: Vec<Link>,
        now: u64,
    }

    fn rig(id: u32, emergency: bool) -> Rig {
        let mut sw = Switch::new(SwitchConfig {
            radix: 4,
            vcs: 1,
            buffer_depth: 4,
            link: link_cfg(),
            ..SwitchConfig::default()
        })
        .unwrap();
        let cfg = Ft2eiDynConfig {
            k: 2,
            n: 3,
            n_ei: 2,
            emergency,
            ruft: false,
        };
        sw.set_ft2ei_dyn(Some(cfg.switch(id).unwrap())).unwrap();
        let peers = (0..4)
            .map(|p| Link::with_epoch(link_cfg(), 10 + p as u16).unwrap())
            .collect();
        let mut r = Rig { sw, peers, now: 1 };
        // Every port trained (a port carries nothing until its peer is heard).
        assert!(r.run(None).is_empty());
        for p in 0..4 {
            assert!(r.sw.port_alive(p), "port {p} up");
        }
        r
    }

    impl Rig {
        /// Sends `f` into `port` (if any), runs the switch a while and
        /// returns every flit it sent, with its port.
        fn run(&mut self, input: Option<(usize, Flit)>) -> Vec<(PortNo, Flit)> {
            if let Some((port, f)) = input {
                self.peers[port].send(f).unwrap();
            }
            crate::switch::test_rig::exchange(&mut self.sw, &mut self.peers, &mut self.now)
        }
    }

    fn data(dst: u32, route_flags: u8) -> Flit {
        Flit {
            kind: FlitKind::HeadTail,
            vc: 0,
            flags: 0,
            msg: 1,
            packet: 0,
            seq: 0,
            head: Some(Head {
                dst,
                msg_flits: 1,
                route_flags,
                ..Head::default()
            }),
            payload: Bytes::new(),
        }
    }

    #[test]
    fn the_faulty_switch_sends_ctrl_up_and_deflects_caught_packets() {
        // Switch 6 = ⟨1,10⟩ loses down link 1 (nodes 6, 7, §4.5 Fig 3.8).
        let mut r = rig(6, true);
        r.sw.set_port_admin(1, false).unwrap();
        let out = r.run(None);
        assert_eq!(out.len(), 1, "{out:?}");
        let (port, f) = &out[0];
        assert_eq!(*port, 2, "one up port without exclusions");
        assert!(f.flags & flags::FT2EI_CTRL != 0);
        assert_eq!(
            decode_ctrl(&f.payload),
            Some(Ctrl {
                faulty: 6,
                elib: 6,
                euib: 7
            })
        );
        assert_eq!(r.sw.counters().ft2ei.ctrl_sent, 1);
        // A packet for 7 coming down from switch 8 (port 2): emergency path.
        let out = r.run(Some((2, data(7, 0))));
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, 0, "deflected down the other live down port");
        let h = out[0].1.head.as_ref().unwrap();
        assert!(h.route_flags & route_flags::DEFLECTED != 0);
        assert_eq!(r.sw.counters().ft2ei.deflections, 1);
        assert_eq!(r.sw.counters().drops.total(), 0);
        // Without emergency paths the same packet is dropped.
        let mut d = rig(6, false);
        d.sw.set_port_admin(1, false).unwrap();
        d.run(None);
        assert!(d.run(Some((2, data(7, 0)))).is_empty());
        assert_eq!(d.sw.counters().drops.no_route, 1);
        // A top switch's uncabled up port going down is no fault.
        let mut top = rig(8, true);
        top.sw.set_port_admin(3, false).unwrap();
        assert!(top.run(None).is_empty());
        assert_eq!(top.sw.counters().ft2ei.errors, 0);
        // Its down port 0 (to switch 4, nodes 0..3): flooded on port 1.
        top.sw.set_port_admin(0, false).unwrap();
        let out = top.run(None);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 1);
        assert_eq!(
            decode_ctrl(&out[0].1.payload),
            Some(Ctrl {
                faulty: 8,
                elib: 0,
                euib: 3
            })
        );
    }

    #[test]
    fn a_target_switch_applies_the_exclusion_and_a_deflected_packet_does_not_go_back() {
        // Leaf 2 = ⟨0,10⟩ under switch 6 (port 2) and switch 7 (port 3).
        let mut r = rig(2, true);
        // Before any update, a deflected packet for 7 arriving from 6 must
        // not be sent back to 6.
        for _ in 0..4 {
            let out = r.run(Some((2, data(7, route_flags::DEFLECTED))));
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].0, 3, "never back up the arrival port");
            let h = out[0].1.head.as_ref().unwrap();
            assert_eq!(h.route_flags & route_flags::DEFLECTED, 0, "tag cleared");
        }
        // The CTRL comes down from 6: [6..7] excluded on port 2, consumed.
        let c = Ctrl {
            faulty: 6,
            elib: 6,
            euib: 7,
        };
        let out = r.run(Some((2, ctrl_flit(c, 0))));
        assert!(out.is_empty(), "consumed, no cascade: {out:?}");
        let s = r.sw.ft2ei_dyn().unwrap();
        assert_eq!(
            s.exclusions(2),
            &[crate::routing::interval::CyclicInterval::new(6, 7)]
        );
        assert_eq!(r.sw.counters().ft2ei.ctrl_received, 1);
        assert_eq!(r.sw.counters().ft2ei.exclusion_updates, 1);
        // Now untagged packets for 6..7 never take port 2 either.
        for _ in 0..4 {
            let out = r.run(Some((0, data(6, 0))));
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].0, 3);
        }
        // A malformed CTRL is counted, not forwarded.
        let mut bad = ctrl_flit(c, 0);
        bad.payload = Bytes::from_static(&[1, 2, 3]);
        assert!(r.run(Some((2, bad))).is_empty());
        assert_eq!(r.sw.counters().ft2ei.errors, 1);
        assert!(r
            .sw
            .take_mechanism_warning()
            .unwrap()
            .1
            .contains("3-byte payload"));
    }
}
