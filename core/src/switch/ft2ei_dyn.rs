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

use super::{Decision, Switch};
use crate::flit::{flags, route_flags, Flit, FlitKind, Head};
use crate::recovery::ft2ei_dyn::{Ctrl, DynRoute, Ft2eiDynSwitch, Send};
use crate::topology::{HostId, PortNo};
use bytes::{BufMut, Bytes, BytesMut};

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
        self.ft2ei = state;
        let dead: Vec<usize> = (0..self.ports.len())
            .filter(|&p| self.ports[p].failed || !self.ports[p].link.is_admin_up())
            .collect();
        for p in dead {
            self.ft2ei_local_fault(p);
        }
        self.pump();
        Ok(())
    }

    pub fn ft2ei_dyn(&self) -> Option<&Ft2eiDynSwitch> {
        self.ft2ei.as_ref()
    }

    /// The last protocol error (counted in `counters().ft2ei.errors`),
    /// taken so that the owner logs each once.
    pub fn take_ft2ei_error(&mut self) -> Option<String> {
        self.ft2ei_error.take()
    }

    /// Queues the protocol's output and accounts for its updates.
    fn ft2ei_after(&mut self, before: u64, r: Result<Vec<Send>, impl std::fmt::Display>) {
        let Some(s) = self.ft2ei.as_ref() else {
            return;
        };
        let applied = s.updates() - before;
        if applied > 0 {
            self.counters.ft2ei.exclusion_updates += applied;
            self.counters.ft2ei.last_update_ns = self.now;
        }
        match r {
            Ok(sends) => {
                let now = self.now;
                self.ctrl_pending
                    .extend(sends.into_iter().map(|s| (s.port, ctrl_flit(s.ctrl, now))));
            }
            Err(e) => {
                self.counters.ft2ei.errors += 1;
                self.ft2ei_error = Some(e.to_string());
            }
        }
    }

    /// `on_local_fault` for port `p`, which was just declared dead.
    pub(super) fn ft2ei_local_fault(&mut self, p: usize) {
        let Some(s) = self.ft2ei.as_mut() else {
            return;
        };
        let t = s.tree();
        if t.is_top(s.id()) && p as u32 >= t.k && !s.is_ruft() {
            // A top switch's up ports are not cabled in a k-ary n-tree:
            // nothing the protocol needs to know.
            return;
        }
        let before = s.updates();
        let r = s.on_local_fault(p as PortNo);
        if self.counters.ft2ei.fault_ns == 0 {
            self.counters.ft2ei.fault_ns = self.now.max(1);
        }
        self.ft2ei_after(before, r);
    }

    /// A CTRL flit arrived on `port`: it is consumed here.
    pub(super) fn ft2ei_receive(&mut self, port: usize, f: &Flit) {
        self.counters.ft2ei.ctrl_received += 1;
        let Some(s) = self.ft2ei.as_mut() else {
            return;
        };
        let Some(c) = decode_ctrl(&f.payload) else {
            self.counters.ft2ei.errors += 1;
            self.ft2ei_error = Some(format!(
                "switch {}: CTRL on port {port} with a {}-byte payload (12 expected)",
                s.id(),
                f.payload.len()
            ));
            return;
        };
        let before = s.updates();
        let r = s.on_ctrl(c, port as PortNo);
        self.ft2ei_after(before, r);
    }

    /// The allocation decision for a CTRL in the local input, bound to
    /// `port`: `None` when the port died and the copy must be discarded.
    pub(super) fn decide_ctrl(&self, port: PortNo) -> Option<Decision> {
        let out = port as usize;
        if out >= self.ports.len() || self.ports[out].failed || !self.ports[out].link.is_admin_up()
        {
            return None;
        }
        let out_vc = 0;
        let free = self.outputs.is_free(out, out_vc);
        let admitted = free && self.ports[out].link.credits(out_vc) >= 1;
        Some(if admitted {
            Decision::Grant { out, out_vc }
        } else {
            Decision::Wait {
                on_credits: free.then_some((out, out_vc)),
            }
        })
    }

    /// The dynamic routing function's ports for the head at input `i`.
    pub(super) fn ft2ei_route(&self, in_port: usize, head: &Head) -> Option<DynRoute> {
        let s = self.ft2ei.as_ref()?;
        let deflected = head.route_flags & route_flags::DEFLECTED != 0;
        Some(s.route(super::routing::target(head), in_port as PortNo, deflected))
    }

    /// A head routed by the protocol was granted `out`: tag it if that is
    /// an emergency deflection, untag it otherwise.
    pub(super) fn ft2ei_granted(&mut self, i: usize, out: usize) {
        let Some(s) = self.ft2ei.as_ref() else {
            return;
        };
        let t = s.tree();
        let id = s.id();
        let Some(h) = self.inputs[i].buf.front_mut().and_then(|f| f.head.as_mut()) else {
            return;
        };
        let d = super::routing::target(h);
        let deflected = !s.is_ruft() && t.is_below(id, d) && out as u32 != t.digit(d, t.stage(id));
        if deflected {
            h.route_flags |= route_flags::DEFLECTED;
            self.counters.ft2ei.deflections += 1;
        } else {
            h.route_flags &= !route_flags::DEFLECTED;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{Link, LinkConfig};
    use crate::recovery::ft2ei_dyn::Ft2eiDynConfig;
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
        Rig { sw, peers, now: 1 }
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
        assert!(r.sw.take_ft2ei_error().unwrap().contains("3-byte payload"));
    }
}
