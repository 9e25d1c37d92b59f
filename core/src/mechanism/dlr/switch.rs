//! Dynamic local rerouting (DLR, seed 002) inside the switch core: when a
//! [`DlrSwitch`] is configured, every head is routed by it instead of the
//! installed table, so a switch of a k-ary n-tree misroutes around a dead
//! port on its own, with no controller involvement (digest §3.2), and takes
//! the fault-free d-mod-k port again as soon as the port is back (§3.9: no
//! table ever changes).
//!
//! What the switch provides to the sans-IO decision logic of
//! [`super::logic`]: the local port liveness (`port_up[p]` = not
//! administratively down and the peer not declared dead), the head's port
//! field ([`crate::flit::Head::dlr_port_field`]) and the input VC, which
//! *is* the DLR layer (NL / ML / ML1 / ML2). A decision is committed (port
//! field written back, reroute counted) only when the head is granted its
//! output VC; a head that must wait is decided afresh on the next round, so
//! a port that dies meanwhile is avoided.

use super::logic::{
    DiscardReason, DlrDecision, DlrError, DlrPacketState, DlrStep, DlrSwitch, PortField, NL,
};
use super::NAME;
use crate::mechanism::hook_any;
use crate::switch::hook::SwitchHook;
use crate::switch::routing;
use crate::switch::{Decision, DropReason, Switch, Switching};
use crate::topology::PortNo;

/// Why a switch refuses a DLR configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RerouteConfigError {
    #[error(
        "switch {switch}: DLR for a {k}-ary tree needs radix {need}, this switch has {radix} ports"
    )]
    Radix {
        switch: u32,
        k: u32,
        need: usize,
        radix: usize,
    },
    #[error(
        "switch {switch}: this DLR variant needs {need} virtual channels, the fabric has {vcs}"
    )]
    Vcs { switch: u32, need: u8, vcs: u8 },
}

/// DLR's state in one switch.
struct DlrHook {
    dlr: DlrSwitch,
    /// Why DLR discarded the head it decided last (if it did).
    discard: Option<DiscardReason>,
}

impl SwitchHook for DlrHook {
    fn name(&self) -> &'static str {
        NAME
    }
    hook_any!();

    /// Route and VC allocation for the head at the front of input VC `i`
    /// by dynamic local rerouting: every head, instead of the table.
    fn route(&mut self, sw: &mut Switch, i: usize) -> Option<Decision> {
        let vcs = sw.cfg.vcs as usize;
        let local = i >= sw.local_input();
        let (mut in_port, mut in_vc) = (i / vcs, (i % vcs) as u8);
        self.discard = None;
        let f = sw.inputs[i].buf.front()?;
        let Some(head) = f.head.as_ref() else {
            return Some(Decision::Drop(DropReason::Orphan));
        };
        let dlr = &mut self.dlr;
        let k = dlr.config().k;
        // A host injects on whatever VC its endpoint uses; a packet entering
        // the fabric is in the normal layer by definition.
        if dlr.level() == 0 && (in_port as u32) < k {
            in_vc = NL;
        }
        let target = routing::target(head);
        if local {
            // A packet this switch made (an SBRP recover request, or one it
            // starts afresh) enters the fabric here, in the normal layer.
            // The local input has no port number, so it is presented as an
            // arrival that leaves DLR's choices intact: from above when the
            // destination is below (down phase: the down port, or a
            // misroute around it if it is dead), from below otherwise (up
            // phase: d-mod-k's up port or another live one). Neither rule
            // sends the packet back to its input port.
            in_vc = NL;
            in_port = if dlr.reaches_down(target) {
                k as usize
            } else {
                0
            };
        }
        let Some(port_field) = PortField::from_wire(head.dlr_port_field, k) else {
            return Some(Decision::Drop(DropReason::BadRoute));
        };
        let mut pkt = DlrPacketState { port_field };
        // radix = 2k ≤ 128 (DlrConfig caps k at 64): no allocation per head.
        let mut alive = [false; 128];
        let radix = sw.ports.len().min(alive.len());
        for (p, a) in alive.iter_mut().enumerate().take(radix) {
            *a = sw.port_alive(p);
        }
        let port_up = &alive[..radix];
        let need = sw.need(head, f.seq);
        let result = dlr.route(sw.now, target, in_port as PortNo, in_vc, &mut pkt, port_up);
        let (port, vc, step) = match result {
            Ok(DlrDecision::Forward { port, vc, step }) => (port as usize, vc, step),
            Ok(DlrDecision::Discard { reason }) => {
                self.discard = Some(reason);
                return Some(Decision::Drop(DropReason::PortDown));
            }
            Err(DlrError::BadVc { .. }) => return Some(Decision::Drop(DropReason::BadVc)),
            Err(DlrError::BadDestination { .. }) => {
                return Some(Decision::Drop(DropReason::NoRoute))
            }
            Err(_) => return Some(Decision::Drop(DropReason::BadRoute)),
        };
        if port >= sw.ports.len() || !port_up[port] {
            // DLR only forwards on ports it was told are alive.
            return Some(Decision::Drop(DropReason::BadRoute));
        }
        if vc >= sw.cfg.vcs {
            return Some(Decision::Drop(DropReason::BadVc));
        }
        let free = sw.outputs.is_free(port, vc);
        let admitted = free
            && match sw.cfg.switching {
                Switching::Wormhole => true,
                Switching::VirtualCutThrough => sw.ports[port].link.credits(vc) >= need,
            };
        if !admitted {
            return Some(Decision::Wait {
                on_credits: free.then_some((port, vc)),
            });
        }
        if let Some(h) = sw.inputs[i].buf.front_mut().and_then(|f| f.head.as_mut()) {
            h.dlr_port_field = pkt.port_field.to_wire();
        }
        if step != DlrStep::Normal {
            sw.counters.reroutes += 1;
        }
        Some(Decision::Grant {
            out: port,
            out_vc: vc,
        })
    }

    /// The head DLR just discarded may be routed again from scratch with a
    /// chance of success (no controller will install tables that would
    /// unpark it) when it came in on a link (a packet this switch injected
    /// itself was already routed from scratch) and its destination is not
    /// cut off (the leaf's host link is dead: nothing reaches it until that
    /// port is back).
    fn may_route_afresh(&self, sw: &Switch, i: usize) -> bool {
        i < sw.local_input() && self.discard != Some(DiscardReason::HostLinkDown)
    }
}

impl Switch {
    /// Routes every head with dynamic local rerouting from now on (`Some`),
    /// or with the installed table again (`None`). Packets already holding
    /// an output VC finish on it.
    pub fn set_local_reroute(&mut self, dlr: Option<DlrSwitch>) -> Result<(), RerouteConfigError> {
        if let Some(d) = &dlr {
            let c = d.config();
            let need = 2 * c.k as usize;
            if self.cfg.radix != need {
                return Err(RerouteConfigError::Radix {
                    switch: d.id(),
                    k: c.k,
                    need,
                    radix: self.cfg.radix,
                });
            }
            if c.vcs_needed() > self.cfg.vcs {
                return Err(RerouteConfigError::Vcs {
                    switch: d.id(),
                    need: c.vcs_needed(),
                    vcs: self.cfg.vcs,
                });
            }
        }
        let hook = dlr.map(|dlr| Box::new(DlrHook { dlr, discard: None }) as Box<dyn SwitchHook>);
        self.set_hook(crate::mechanism::rank(NAME), NAME, hook);
        self.pump();
        Ok(())
    }

    /// The DLR state, if local rerouting is on.
    pub fn local_reroute(&self) -> Option<&DlrSwitch> {
        self.hook::<DlrHook>().map(|h| &h.dlr)
    }

    /// Whether an input VC holds a packet in progress (for tests).
    #[cfg(test)]
    pub(crate) fn input_state(&self, i: usize) -> crate::switch::input::InState {
        self.inputs[i].state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flit::{Flit, FlitKind, Head};
    use crate::link::Link;
    use crate::link::LinkConfig;
    use crate::mechanism::dlr::{DlrConfig, DlrFaults, DlrVariant, ML2};
    use crate::mechanism::sbrp::{self, RecoveryProtocol};
    use crate::switch::input::InState;
    use crate::switch::SwitchConfig;
    use crate::topology::generators::kary_ntree;
    use bytes::Bytes;

    /// A switch under test with one peer [`Link`] per port.
    struct Rig {
        sw: Switch,
        peers: Vec<Link>,
        now: u64,
    }

    fn link_cfg() -> LinkConfig {
        LinkConfig {
            vcs: 3,
            buffer_depth: 4,
            bandwidth_flits_per_s: None,
            propagation_ns: 0,
            ..LinkConfig::default()
        }
    }

    fn rig(k: u32, n: u32, id: u32, variant: DlrVariant, faults: DlrFaults) -> Rig {
        let topo = kary_ntree(k, n).unwrap();
        let cfg = DlrConfig::new(k, n, variant, faults);
        let radix = 2 * k as usize;
        let mut sw = Switch::new(SwitchConfig {
            radix,
            vcs: 3,
            buffer_depth: 4,
            link: link_cfg(),
            ..SwitchConfig::default()
        })
        .unwrap();
        sw.set_local_reroute(Some(DlrSwitch::from_topology(cfg, &topo, id).unwrap()))
            .unwrap();
        let peers = (0..radix)
            .map(|p| Link::with_epoch(link_cfg(), 10 + p as u16).unwrap())
            .collect();
        Rig { sw, peers, now: 1 }
    }

    impl Rig {
        /// Sends a one-flit packet for `dst` into `port` on `vc` and returns
        /// (port, vc, port field) of every flit the switch forwarded.
        fn inject(
            &mut self,
            port: usize,
            dst: u32,
            vc: u8,
            port_field: u8,
        ) -> Vec<(PortNo, u8, u8)> {
            self.peers[port]
                .send(Flit {
                    kind: FlitKind::HeadTail,
                    vc,
                    flags: 0,
                    msg: 1,
                    packet: 0,
                    seq: 0,
                    head: Some(Head {
                        dst,
                        msg_flits: 1,
                        dlr_port_field: port_field,
                        ..Head::default()
                    }),
                    payload: Bytes::new(),
                })
                .unwrap();
            crate::switch::test_rig::exchange(&mut self.sw, &mut self.peers, &mut self.now)
                .into_iter()
                .map(|(p, f)| (p, f.vc, f.head.as_ref().map_or(0, |h| h.dlr_port_field)))
                .collect()
        }
    }

    /// One flit of packet 0 of message `msg`, `src` → `dst`.
    fn flit(kind: FlitKind, src: u32, dst: u32, msg: u64, seq: u32, vc: u8) -> Flit {
        Flit {
            kind,
            vc,
            flags: 0,
            msg,
            packet: 0,
            seq,
            head: kind.is_head().then(|| Head {
                src,
                dst,
                msg_flits: 4,
                ..Head::default()
            }),
            payload: Bytes::new(),
        }
    }

    impl Rig {
        /// Sends `flits` into `port` and returns every flit forwarded.
        fn send(&mut self, port: usize, flits: Vec<Flit>) -> Vec<(PortNo, Flit)> {
            for f in flits {
                self.peers[port].send(f).unwrap();
            }
            crate::switch::test_rig::exchange(&mut self.sw, &mut self.peers, &mut self.now)
        }

        /// Takes `port` down (as a dead peer would) and returns what the
        /// switch forwarded afterwards.
        fn kill(&mut self, port: u16) -> Vec<(PortNo, Flit)> {
            self.sw.set_port_admin(port, false).unwrap();
            crate::switch::test_rig::exchange(&mut self.sw, &mut self.peers, &mut self.now)
        }
    }

    /// A level-1 switch of the 4-ary 3-tree, with SBRP `protocol` on.
    fn level1_with_sbrp(variant: DlrVariant, faults: DlrFaults, protocol: RecoveryProtocol) -> Rig {
        let topo = kary_ntree(4, 3).unwrap();
        let id = topo
            .switches
            .iter()
            .position(|sw| sw.level == Some(1))
            .unwrap() as u32;
        let mut r = rig(4, 3, id, variant, faults);
        r.sw.set_recovery(protocol);
        r
    }

    /// The recover requests proper (not the notices of a parked one).
    fn rrqs(out: &[(PortNo, Flit)]) -> Vec<(PortNo, Flit)> {
        out.iter()
            .filter(|(_, f)| sbrp::is_rrq(f) && !sbrp::is_parked_notice(f))
            .cloned()
            .collect()
    }

    /// Nothing sent but the notice to the sender (below port 1) that its
    /// request is parked.
    fn only_a_parked_notice(out: &[(PortNo, Flit)]) -> bool {
        out.iter()
            .all(|(p, f)| *p == 1 && sbrp::is_parked_notice(f))
    }

    #[test]
    fn a_recover_request_made_at_a_cut_is_itself_routed_around_a_dead_port() {
        // Level-1 switch: a packet from a host outside its subtree comes
        // down from above toward a host below it; its down port dies
        // mid-packet (node C). The RRQ to the sender climbs, and d-mod-k's
        // up port toward the sender is dead too: DLR must take another one
        // (handed the local input, where RRQs enter and which has no port
        // number DLR knows, DLR alone would drop it as bad_route).
        for variant in [DlrVariant::Deterministic, DlrVariant::Adaptive] {
            for faults in [DlrFaults::Link, DlrFaults::Switch] {
                let mut r = level1_with_sbrp(variant, faults, RecoveryProtocol::Sbrp0);
                let dlr = r.sw.local_reroute().unwrap().clone();
                let dst = (0..64).find(|&d| dlr.reaches_down(d)).unwrap();
                let src = (0..64u32)
                    .find(|&s| !dlr.reaches_down(s) && (s / 4) % 4 == 2)
                    .unwrap();
                let (down, src_up) = (((dst / 4) % 4) as u16, 4 + 2u16);
                let from = 4; // another up port than the sender's
                let out = r.send(
                    from,
                    vec![
                        flit(FlitKind::Head, src, dst, 9, 0, 0),
                        flit(FlitKind::Body, src, dst, 9, 1, 0),
                    ],
                );
                assert_eq!(out.len(), 2, "{variant:?} {faults:?}: {out:?}");
                assert!(out.iter().all(|(p, _)| *p == down));
                assert!(r.kill(src_up).is_empty());
                let out = r.kill(down);
                let rrq = rrqs(&out);
                assert_eq!(rrq.len(), 1, "{variant:?} {faults:?}: {out:?}");
                let (port, f) = &rrq[0];
                assert!(
                    *port >= 4 && *port != src_up,
                    "{variant:?} {faults:?}: an up port other than the dead one: {port}"
                );
                let h = f.head.as_ref().unwrap();
                assert_eq!((h.dst, h.src, f.msg, f.seq), (src, dst, 9, 0));
                assert_eq!(f.vc, NL);
                let c = r.sw.counters();
                assert_eq!(c.drops.bad_route, 0, "{variant:?} {faults:?}: {c:?}");
                assert_eq!(c.reroutes, 1, "the RRQ's up detour");
                assert_eq!(r.sw.sbrp_counters().rrq_sent, 1);
                assert_eq!(r.sw.sbrp_counters().cut_packets, 1);
            }
        }
    }

    #[test]
    fn a_recover_request_for_a_host_below_goes_straight_down() {
        // The RRQ's destination is in the switch's subtree: it is presented
        // to DLR as coming from above, so it takes the down port (and is
        // never bounced into the port it did not come from).
        let mut r = level1_with_sbrp(
            DlrVariant::Deterministic,
            DlrFaults::Switch,
            RecoveryProtocol::Sbrp1,
        );
        let dlr = r.sw.local_reroute().unwrap().clone();
        let src = (0..64).find(|&d| dlr.reaches_down(d)).unwrap();
        let dst = (0..64).find(|&d| !dlr.reaches_down(d)).unwrap();
        let src_down = ((src / 4) % 4) as u16;
        let up = 4 + ((dst / 4) % 4) as u16;
        let out = r.send(
            src_down as usize,
            vec![
                flit(FlitKind::Head, src, dst, 3, 0, 0),
                flit(FlitKind::Body, src, dst, 3, 1, 0),
            ],
        );
        assert!(out.iter().all(|(p, _)| *p == up), "{out:?}");
        let rrq = rrqs(&r.kill(up));
        assert_eq!(rrq.len(), 1, "{rrq:?}");
        assert_eq!(rrq[0].0, src_down);
        assert_eq!(r.sw.counters().reroutes, 0);
    }

    #[test]
    fn a_head_dlr_cannot_route_is_recovered_at_once_unless_its_host_is_cut_off() {
        // A leaf whose up ports are all dead discards heads for remote
        // hosts: with controller routing the RRQ would wait for new tables,
        // which DLR never installs; the resend is routed afresh at its
        // source, so the RRQ goes at once.
        let mut r = rig(4, 2, 0, DlrVariant::Deterministic, DlrFaults::Switch);
        r.sw.set_recovery(RecoveryProtocol::Sbrp2);
        for p in 4..8 {
            r.sw.set_port_admin(p, false).unwrap();
        }
        let out = r.send(1, vec![flit(FlitKind::HeadTail, 1, 9, 5, 0, 0)]);
        let rrq = rrqs(&out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(rrq.len(), 1, "{out:?}");
        assert_eq!(rrq[0].0, 1, "back down to the sender");
        assert_eq!(r.sw.counters().drops.port_down, 1);
        assert_eq!(r.sw.sbrp_counters().rrq_parked, 0);
        // A host whose own link is dead is cut off: a resend cannot reach it
        // before the port is back, so that RRQ is parked until then.
        r.sw.set_port_admin(3, false).unwrap();
        let out = r.send(1, vec![flit(FlitKind::HeadTail, 1, 3, 6, 0, 0)]);
        assert!(only_a_parked_notice(&out), "{out:?}");
        assert_eq!(r.sw.sbrp_counters().rrq_parked, 1);
        r.sw.set_port_admin(3, true).unwrap();
        let out = crate::switch::test_rig::exchange(&mut r.sw, &mut r.peers, &mut r.now);
        let rrq = rrqs(&out);
        assert_eq!(rrq.len(), 1, "{out:?}");
        assert_eq!((rrq[0].0, rrq[0].1.msg), (1, 6));
    }

    #[test]
    fn a_packet_dlr_keeps_discarding_is_not_bounced_between_sender_and_switch_forever() {
        // Beyond DLR's guarantee every resend may meet the same dead end:
        // after `DLR_EAGER_RESENDS` resends (the head's SSNF) the RRQ waits
        // for a port to come back instead of asking for one more at once.
        let mut r = rig(4, 2, 0, DlrVariant::Deterministic, DlrFaults::Switch);
        r.sw.set_recovery(RecoveryProtocol::Sbrp0);
        for p in 4..8 {
            r.sw.set_port_admin(p, false).unwrap();
        }
        let resend = |ssnf: u16| {
            let mut f = flit(FlitKind::HeadTail, 1, 9, 5, 0, 0);
            f.head.as_mut().unwrap().submsg = ssnf;
            vec![f]
        };
        let out = r.send(
            1,
            resend(crate::mechanism::sbrp::switch::DLR_EAGER_RESENDS - 1),
        );
        assert_eq!(rrqs(&out).len(), 1, "{out:?}");
        let out = r.send(1, resend(crate::mechanism::sbrp::switch::DLR_EAGER_RESENDS));
        assert!(only_a_parked_notice(&out), "{out:?}");
        assert_eq!(r.sw.sbrp_counters().rrq_sent, 2);
        assert_eq!(r.sw.sbrp_counters().rrq_parked, 1);
        // An up port comes back: the parked RRQ goes, and the resend it asks
        // for will find the way.
        r.sw.set_port_admin(6, true).unwrap();
        let out = crate::switch::test_rig::exchange(&mut r.sw, &mut r.peers, &mut r.now);
        let rrq = rrqs(&out);
        assert_eq!(rrq.len(), 1, "{out:?}");
        assert_eq!(
            rrq[0].1.head.as_ref().unwrap().submsg,
            crate::mechanism::sbrp::switch::DLR_EAGER_RESENDS
        );
    }

    #[test]
    fn a_request_parked_after_the_eager_resends_goes_out_once_on_a_deadline() {
        // The dead end that discards a packet may lie hops away (a leaf
        // whose up links are all down, one retraining) and its repair is
        // seen by no port of this switch: the request parked for the
        // packet's `DLR_EAGER_RESENDS`-th resend goes out a keepalive
        // interval later anyway, and one parked after `DLR_PARKED_RESENDS`
        // more waits for a port to come back.
        use crate::mechanism::sbrp::switch::{DLR_EAGER_RESENDS, DLR_PARKED_RESENDS};
        let mut r = rig(4, 2, 0, DlrVariant::Deterministic, DlrFaults::Switch);
        r.sw.set_recovery(RecoveryProtocol::Sbrp0);
        for p in 4..8 {
            r.sw.set_port_admin(p, false).unwrap();
        }
        let resend = |msg: u64, ssnf: u16| {
            let mut f = flit(FlitKind::HeadTail, 1, 9, msg, 0, 0);
            f.head.as_mut().unwrap().submsg = ssnf;
            vec![f]
        };
        let out = r.send(1, resend(5, DLR_EAGER_RESENDS));
        assert!(only_a_parked_notice(&out), "{out:?}");
        let out = r.send(1, resend(6, DLR_EAGER_RESENDS + DLR_PARKED_RESENDS));
        assert!(only_a_parked_notice(&out), "{out:?}");
        assert_eq!(r.sw.sbrp_counters().rrq_parked, 2);
        // Jumps of one interval stay well inside `dead_after`: no peer
        // falls silent meanwhile.
        let interval = r.sw.config().link.keepalive_interval_ns;
        let mut released = Vec::new();
        for _ in 0..8 {
            r.now += interval;
            let out = crate::switch::test_rig::exchange(&mut r.sw, &mut r.peers, &mut r.now);
            released.push(rrqs(&out));
        }
        let first = &released[0];
        assert_eq!(first.len(), 1, "{released:?}");
        assert_eq!((first[0].0, first[0].1.msg), (1, 5), "back to the sender");
        assert_eq!(first[0].1.head.as_ref().unwrap().submsg, DLR_EAGER_RESENDS);
        assert!(released[1..].iter().all(|o| o.is_empty()), "{released:?}");
        assert_eq!(r.sw.parked_rrqs().map(|f| f.msg).collect::<Vec<_>>(), [6]);
        r.sw.set_port_admin(6, true).unwrap();
        let out = crate::switch::test_rig::exchange(&mut r.sw, &mut r.peers, &mut r.now);
        let rrq = rrqs(&out);
        assert_eq!(rrq.len(), 1, "{out:?}");
        assert_eq!(rrq[0].1.msg, 6);
    }

    #[test]
    fn a_passing_recover_request_whose_detour_died_is_routed_afresh() {
        // An RRQ on a 2-hop detour comes back from above to the middle
        // switch, whose port field names the way back to the U-turn switch;
        // that port is dead (ReturnPathDown). Parking it would lose it (DLR
        // never installs tables): the switch starts it again from its local
        // input, in the normal layer with a clear port field, and it climbs.
        let mut r = level1_with_sbrp(
            DlrVariant::Deterministic,
            DlrFaults::Switch,
            RecoveryProtocol::Sbrp0,
        );
        let dlr = r.sw.local_reroute().unwrap().clone();
        let to = (0..64).find(|&d| !dlr.reaches_down(d)).unwrap();
        r.sw.set_port_admin(2, false).unwrap();
        let mut rrq = sbrp::rrq_flit(7, to, 11, 0, 0, 0, ML2, 0);
        rrq.head.as_mut().unwrap().dlr_port_field = PortField::ReturnPort(2).to_wire();
        let out = r.send(5, vec![rrq]);
        assert_eq!(out.len(), 1, "{out:?}");
        let (port, f) = &out[0];
        assert!(*port >= 4, "it climbs: {port}");
        assert_eq!(f.vc, NL);
        assert_eq!(f.head.as_ref().unwrap().dlr_port_field, 0);
        assert_eq!(r.sw.sbrp_counters().rrq_restarted, 1);
        assert_eq!(r.sw.sbrp_counters().rrq_parked, 0);
        assert_eq!(r.sw.counters().drops.total(), 0, "restarted, not dropped");
    }

    #[test]
    fn a_leaf_detours_around_a_dead_up_port_and_comes_back_when_it_is_repaired() {
        // 4-ary 2-tree, leaf 0: host 5 is not below it, d-mod-k takes up
        // port k + d_0 = 4 + 1 = 5.
        let mut r = rig(4, 2, 0, DlrVariant::Deterministic, DlrFaults::Link);
        assert_eq!(r.inject(0, 5, 0, 0), vec![(5, 0, 0)]);
        assert_eq!(r.sw.counters().reroutes, 0);
        r.sw.set_port_admin(5, false).unwrap();
        let out = r.inject(0, 5, 0, 0);
        assert_eq!(out.len(), 1);
        assert_ne!(out[0].0, 5, "a dead port is never used");
        assert!(out[0].0 >= 4, "an up port: {out:?}");
        assert_eq!(r.sw.counters().reroutes, 1);
        assert_eq!(r.sw.counters().drops.total(), 0);
        r.sw.set_port_admin(5, true).unwrap();
        assert_eq!(
            r.inject(0, 5, 0, 0),
            vec![(5, 0, 0)],
            "back on the table port"
        );
        assert_eq!(r.sw.counters().reroutes, 1);
    }

    #[test]
    fn a_top_switch_routes_around_its_dead_down_port() {
        // 4-ary 2-tree: switches 0..4 are leaves, 4..8 top. A top switch
        // reaches host 5 on down port d_1 = 1.
        let mut r = rig(4, 2, 4, DlrVariant::Deterministic, DlrFaults::Link);
        assert_eq!(r.inject(0, 5, 0, 0), vec![(1, 0, 0)]);
        r.sw.set_port_admin(1, false).unwrap();
        let out = r.inject(0, 5, 0, 0);
        assert_eq!(out.len(), 1);
        assert!(out[0].0 < 4 && out[0].0 != 1, "another down port: {out:?}");
        assert_eq!(r.sw.counters().drops.total(), 0);
        // The layer is whatever the DLR logic chose for this step.
        let mut dlr = r.sw.local_reroute().unwrap().clone();
        let mut up = vec![true; 8];
        up[1] = false;
        let want = dlr
            .route(0, 5, 0, 0, &mut DlrPacketState::default(), &up)
            .unwrap();
        let DlrDecision::Forward { port, vc, step } = want else {
            panic!("one dead port is tolerated: {want:?}")
        };
        assert_eq!((port, vc), (out[0].0, out[0].1));
        assert_ne!(step, DlrStep::Normal);
        assert_eq!(r.sw.counters().reroutes, 1);
    }

    #[test]
    fn the_switch_variant_writes_the_port_field_into_the_head() {
        let topo = kary_ntree(4, 3).unwrap();
        // A level-1 switch whose down port towards the destination is dead
        // and whose other down ports are alive bounces the packet through a
        // 2-hop group: whatever it does, the header must round-trip and
        // never name a dead port.
        let id = topo
            .switches
            .iter()
            .position(|sw| sw.level == Some(1))
            .unwrap() as u32;
        let mut r = rig(4, 3, id, DlrVariant::Deterministic, DlrFaults::Switch);
        let dlr = r.sw.local_reroute().unwrap().clone();
        let dst = (0..64).find(|&d| dlr.reaches_down(d)).unwrap();
        let down = ((dst / 4) % 4) as u16;
        r.sw.set_port_admin(down, false).unwrap();
        let out = r.inject(4, dst, 0, 0);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_ne!(out[0].0, down);
        assert!(PortField::from_wire(out[0].2, 4).is_some());
        assert_eq!(r.sw.counters().reroutes, 1);
    }

    #[test]
    fn a_packet_with_a_garbage_port_field_is_dropped_not_panicked_on() {
        let mut r = rig(4, 2, 0, DlrVariant::Deterministic, DlrFaults::Switch);
        assert!(r.inject(0, 5, 0, 200).is_empty());
        assert_eq!(r.sw.counters().drops.bad_route, 1);
        assert_eq!(r.sw.input_state(0), InState::Idle);
        assert_eq!(
            r.inject(0, 5, 0, 0).len(),
            1,
            "the next packet goes through"
        );
    }

    #[test]
    fn configurations_that_cannot_work_are_refused() {
        let topo = kary_ntree(4, 2).unwrap();
        let mut s = Switch::new(SwitchConfig {
            radix: 8,
            vcs: 1,
            ..SwitchConfig::default()
        })
        .unwrap();
        let det = DlrConfig::new(4, 2, DlrVariant::Deterministic, DlrFaults::Switch);
        let e = s
            .set_local_reroute(Some(DlrSwitch::from_topology(det, &topo, 0).unwrap()))
            .unwrap_err();
        assert!(e.to_string().contains("3 virtual channels"), "{e}");
        let mut small = Switch::new(SwitchConfig {
            radix: 6,
            vcs: 1,
            ..SwitchConfig::default()
        })
        .unwrap();
        let ad = DlrConfig::new(4, 2, DlrVariant::Adaptive, DlrFaults::Link);
        let e = small
            .set_local_reroute(Some(DlrSwitch::from_topology(ad, &topo, 0).unwrap()))
            .unwrap_err();
        assert!(e.to_string().contains("radix 8"), "{e}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Whatever the dead ports, a head is either forwarded exactly once
        /// on a live port or dropped as port-down; never elsewhere, never a
        /// panic, and the input is free for the next packet.
        #[test]
        fn heads_go_out_on_live_ports_or_are_dropped_as_port_down(
            k in 2u32..5,
            n in 2u32..4,
            sw in 0u32..64,
            dead in proptest::prelude::any::<u16>(),
            dst in 0u32..64,
            in_port in 0usize..8,
            variant in 0u8..4,
        ) {
            let switches = n * k.pow(n - 1);
            let hosts = k.pow(n);
            let (sw, dst, in_port) = (sw % switches, dst % hosts, in_port % (2 * k as usize));
            let (v, f) = match variant {
                0 => (DlrVariant::Deterministic, DlrFaults::Link),
                1 => (DlrVariant::Deterministic, DlrFaults::Switch),
                2 => (DlrVariant::Adaptive, DlrFaults::Link),
                _ => (DlrVariant::Adaptive, DlrFaults::Switch),
            };
            let mut r = rig(k, n, sw, v, f);
            for p in 0..2 * k as u16 {
                if dead & (1 << p) != 0 && p as usize != in_port {
                    r.sw.set_port_admin(p, false).unwrap();
                }
            }
            let out = r.inject(in_port, dst, 0, 0);
            let c = r.sw.counters();
            proptest::prop_assert!(out.len() + c.drops.port_down as usize == 1, "{out:?} {c:?}");
            for (p, _, _) in &out {
                proptest::prop_assert!(r.sw.port_alive(*p as usize));
            }
            proptest::prop_assert_eq!(r.sw.input_state(in_port * 3), InState::Idle);
        }
    }
}
