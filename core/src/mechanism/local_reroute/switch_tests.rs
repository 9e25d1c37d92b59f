//! Local rerouting in the switch pipeline, on the in-process fabric of
//! the switch tests.

use crate::mechanism::sbrp::{self, RecoveryProtocol};
use crate::routing::{AdaptiveEntry, AdaptiveTable, SwitchTable, VcPolicy};
use crate::switch::tests::*;
use crate::switch::{Switch, Switching};
use crate::topology::PortNo;

// ------------------------------------------- seed 003 local fault rerouting

/// One radix-4 switch with host `h` on port `h`, [`VcPolicy::LocalReroute`]
/// and 2 VCs; `entries[d]` routes destination `d`.
pub(crate) fn local_reroute_switch(entries: Vec<AdaptiveEntry>) -> Net {
    let mut sw = Switch::new(sw_cfg(4, 2, Switching::Wormhole)).unwrap();
    sw.install_table(
        SwitchTable::Adaptive(AdaptiveTable { entries }),
        VcPolicy::LocalReroute,
    );
    let wires = (0..4)
        .map(|h| (End::Host(h), End::Sw(0, h as PortNo)))
        .collect();
    Net::new(4, 2, vec![sw], wires)
}

pub(crate) fn local_entry(
    candidates: Vec<PortNo>,
    escape: PortNo,
    misroute: Vec<PortNo>,
) -> AdaptiveEntry {
    AdaptiveEntry {
        candidates,
        escape: Some(escape),
        misroute,
    }
}

/// Destination 0 and 1 direct; destination 2: minimal port 2 only,
/// misroute port 3.
pub(crate) fn distance1_entries() -> Vec<AdaptiveEntry> {
    vec![
        local_entry(vec![0], 0, vec![]),
        local_entry(vec![1], 1, vec![]),
        local_entry(vec![2], 2, vec![3]),
        local_entry(vec![3], 3, vec![]),
    ]
}

#[test]
fn local_reroute_uses_the_adaptive_vc_and_misroutes_once_around_a_dead_port() {
    use crate::flit::route_flags::LOCAL_MISROUTED;
    let mut net = local_reroute_switch(distance1_entries());
    net.hosts[0].to_send.extend(packet(0, 2, 1, 3, 0));
    net.run_for(2_000_000);
    let got = &net.hosts[2].received;
    assert_eq!(got.len(), 3, "fault-free: the minimal port");
    assert!(got.iter().all(|f| f.vc == 1), "on the adaptive VC");
    assert_eq!(
        got[0].head.as_ref().unwrap().route_flags & LOCAL_MISROUTED,
        0
    );
    // Port 2 dies: the only minimal port. The head takes misroute port 3,
    // marked so that it takes no second misroute.
    net.switches[0].set_port_admin(2, false).unwrap();
    net.hosts[0].to_send.extend(packet(0, 2, 2, 3, 0));
    net.run_for(2_000_000);
    let got = &net.hosts[3].received;
    assert_eq!(got.len(), 3, "misrouted to port 3");
    assert_ne!(
        got[0].head.as_ref().unwrap().route_flags & LOCAL_MISROUTED,
        0
    );
    assert_eq!(net.switches[0].counters().misroute_hops, 1);
    assert_eq!(net.switches[0].counters().drops.total(), 0);
}

#[test]
fn local_reroute_drops_a_second_misroute_and_asks_for_the_resend_at_once() {
    use crate::flit::route_flags::LOCAL_MISROUTED;
    let mut net = local_reroute_switch(distance1_entries());
    net.switches[0].set_recovery(RecoveryProtocol::Sbrp0);
    net.switches[0].set_port_admin(2, false).unwrap();
    // Already misrouted once upstream: no second misroute, never the dead
    // port; the head is dropped and its source asked for a resend at once
    // (no controller will install tables that would unpark it).
    net.hosts[1]
        .to_send
        .extend(with_head(packet(1, 2, 7, 3, 0), |h| {
            h.route_flags |= LOCAL_MISROUTED
        }));
    net.run_for(2_000_000);
    assert!(net.hosts[3].received.is_empty(), "no second misroute");
    assert_eq!(net.switches[0].counters().drops.port_down, 3);
    let s = net.switches[0].sbrp_counters();
    assert_eq!((s.rrq_sent, s.rrq_parked), (1, 0));
    let rrq: Vec<_> = net.hosts[1]
        .received
        .iter()
        .filter(|f| sbrp::is_rrq(f))
        .collect();
    assert_eq!(rrq.len(), 1, "the RRQ reached the source");
}

#[test]
fn local_reroute_never_sends_a_head_back_out_of_its_input_port() {
    // Destination 2 from port 1: minimal ports 1 and 2, escape 1. Port 1 is
    // the way back (after a misroute it is minimal again): only 2 is taken,
    // even with port 1 idle.
    let mut entries = distance1_entries();
    entries[2] = local_entry(vec![1, 2], 1, vec![3]);
    let mut net = local_reroute_switch(entries);
    for m in 0..4 {
        net.hosts[1].to_send.extend(packet(1, 2, m, 2, 0));
    }
    net.run_for(5_000_000);
    assert_eq!(net.hosts[2].received.len(), 8);
    assert!(net.hosts[1].received.is_empty());
    // With port 2 dead the remaining minimal port is the way back: the
    // packet misroutes (port 3) rather than turning around.
    net.switches[0].set_port_admin(2, false).unwrap();
    net.hosts[1].to_send.extend(packet(1, 2, 9, 2, 0));
    net.run_for(2_000_000);
    assert!(net.hosts[1].received.is_empty());
    assert_eq!(net.hosts[3].received.len(), 2);
}
