//! Legs in the switch pipeline, on the in-process fabric of the switch tests.

use crate::routing::{AdaptiveEntry, AdaptiveTable, SwitchTable, VcPolicy};
use crate::switch::tests::*;
use crate::switch::{Switch, Switching};
use crate::topology::PortNo;

/// One switch, hosts 0..4 on ports 0..4, host 1 attached here as far as
/// the [`VcPolicy::Legs`] policy is concerned; mesh-style (one escape VC per
/// leg), 2 legs, `vcs` VCs (VC 2 and up adaptive).
fn legs_switch(vcs: u8, table: SwitchTable) -> Net {
    let mut sw = Switch::new(sw_cfg(4, vcs, Switching::Wormhole)).unwrap();
    sw.install_table(
        table,
        VcPolicy::Legs {
            legs: 2,
            escape_per_leg: 1,
            port_dim: vec![None; 4],
            dateline: vec![false; 4],
            local_hosts: vec![1],
            dir_ports: vec![2, 3],
        },
    );
    let wires = (0..4)
        .map(|h| (End::Host(h), End::Sw(0, h as PortNo)))
        .collect();
    Net::new(4, vcs, vec![sw], wires)
}

#[test]
fn a_head_at_its_intermediates_switch_starts_the_next_leg_without_ejection() {
    let mut net = legs_switch(2, lft(&[Some(0), Some(1), Some(2), Some(3)]));
    net.hosts[0]
        .to_send
        .extend(with_head(packet(0, 2, 1, 3, 0), |h| {
            h.intermediates[0] = 1;
            h.n_intermediates = 1;
        }));
    net.run_for(5_000_000);
    assert!(
        net.hosts[1].received.is_empty(),
        "ejected at the intermediate"
    );
    let got = &net.hosts[2].received;
    assert_eq!(got.len(), 3);
    // Leg 1's escape VC (1 · escape_per_leg), and the head says leg 1.
    assert!(got.iter().all(|f| f.vc == 1), "{got:?}");
    assert_eq!(got[0].head.as_ref().unwrap().leg, 1);
    assert_eq!(net.switches[0].counters().intermediate_pops, 1);
    assert_eq!(net.total_drops(), 0);
}

#[test]
fn a_leg_without_an_escape_vc_set_is_dropped_and_counted() {
    let mut net = legs_switch(3, lft(&[Some(0), Some(1), Some(2), Some(3)]));
    // Two intermediates both here: the packet would need a third leg.
    net.hosts[0]
        .to_send
        .extend(with_head(packet(0, 2, 1, 2, 0), |h| {
            h.intermediates = [1, 1, 0];
            h.n_intermediates = 2;
        }));
    net.hosts[0].to_send.extend(packet(0, 3, 2, 2, 0));
    net.run_for(5_000_000);
    assert!(net.hosts[2].received.is_empty());
    assert_eq!(net.hosts[3].received.len(), 2, "later packets still flow");
    assert_eq!(net.switches[0].counters().drops.leg_vc, 2);
}

#[test]
fn the_d_bit_of_the_current_leg_confines_a_packet_to_the_escape_port() {
    // Destination 2: candidates 2 and 3, escape 3. Host 3 does not consume,
    // so adaptive packets soon prefer port 2; deterministic ones may not.
    let entry = |candidates: Vec<PortNo>, escape| AdaptiveEntry {
        candidates,
        escape: Some(escape),
        misroute: Vec::new(),
    };
    let table = SwitchTable::Adaptive(AdaptiveTable {
        entries: vec![
            entry(vec![0], 0),
            entry(vec![1], 1),
            entry(vec![2, 3], 3),
            entry(vec![3], 3),
        ],
    });
    let run = |flags: u8| {
        let mut net = legs_switch(3, table.clone());
        net.hosts[3].consume = false;
        for m in 0..6 {
            net.hosts[0]
                .to_send
                .extend(with_head(packet(0, 2, m, 2, 0), |h| h.route_flags = flags));
        }
        net.run_for(10_000_000);
        (net.hosts[2].received.len(), net.hosts[3].link.pending_rx())
    };
    let (adaptive_via2, _) = run(0);
    assert!(adaptive_via2 > 0, "adaptive packets use the free port");
    let (det_via2, det_via3) = run(crate::flit::route_flags::deterministic_leg(0));
    assert_eq!(det_via2, 0, "D: escape port only");
    assert!(det_via3 > 0);
    // A D bit on another leg does not bind leg 0.
    let (other_leg_via2, _) = run(crate::flit::route_flags::deterministic_leg(1));
    assert!(other_leg_via2 > 0);
}

#[test]
fn a_forced_misroute_hop_takes_its_directions_port_and_is_spent_in_the_head() {
    // dir_ports = [2, 3]: direction 1 leaves by port 3. The head's leg 0
    // still has one forced hop in direction 1, so although its intermediate
    // (host 1) is attached here, the leg does not end here (§3.10: never
    // pop in the middle of a forced prefix) and the table is not consulted.
    let mut net = legs_switch(2, lft(&[Some(0), Some(1), Some(2), Some(2)]));
    net.hosts[0]
        .to_send
        .extend(with_head(packet(0, 2, 1, 2, 0), |h| {
            h.intermediates[0] = 1;
            h.n_intermediates = 1;
            h.route_flags = crate::flit::route_flags::MISROUTE;
            h.runs[0][0] = crate::flit::pack_run(1, 1);
        }));
    net.run_for(5_000_000);
    let got = &net.hosts[3].received;
    assert_eq!(got.len(), 2, "forced port 3");
    let h = got[0].head.as_ref().unwrap();
    assert_eq!(h.runs[0][0], crate::flit::pack_run(1, 0), "hop spent");
    assert_eq!(h.leg, 0, "no pop mid-prefix");
    assert_eq!(net.switches[0].counters().misroute_hops, 1);
    assert_eq!(net.switches[0].counters().intermediate_pops, 0);
    assert!(net.hosts[2].received.is_empty());
}
