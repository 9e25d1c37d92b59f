//! The head-of-queue lifetime in the switch pipeline, on the in-process
//! fabric of the switch tests (the local-reroute switch, whose heads can
//! be blocked for good).

use crate::mechanism::local_reroute::switch::switch_tests::{
    distance1_entries, local_reroute_switch,
};
use crate::mechanism::sbrp::{self, RecoveryProtocol};
use crate::switch::input::InState;
use crate::switch::tests::*;
use crate::switch::{DropReason, SwitchEvent};

// ------------------------------------------- head-of-queue lifetime

/// Lifetime used by the head-of-queue tests.
const HOQ_NS: u64 = 1_000_000;

/// The local-reroute switch of the tests above with both VCs of port 2
/// held by worms that cannot move (host 2 stops consuming; host 0's
/// packet takes adaptive VC 1, host 3's the escape VC 0), then a 20-flit
/// packet (message 7) from host 1 to host 2, whose head can only wait.
/// Returns the net once that head waits at the front of input 1/VC 0.
fn blocked_head(lifetime: Option<u64>, protocol: RecoveryProtocol) -> Net {
    let mut net = local_reroute_switch(distance1_entries());
    net.switches[0].set_recovery(protocol);
    net.switches[0].set_head_of_queue_lifetime(lifetime);
    net.hosts[2].consume = false;
    net.hosts[0].to_send.extend(packet(0, 2, 1, 20, 0));
    net.run_for(50_000);
    net.hosts[3].to_send.extend(packet(3, 2, 2, 20, 0));
    net.run_for(50_000);
    net.hosts[1].to_send.extend(packet(1, 2, 7, 20, 0));
    net.run_for(50_000);
    let vcs = 2;
    let (state, front) = net.switches[0].input_states()[vcs];
    assert_eq!(state, InState::Idle, "the head waits for an output VC");
    assert!(front.is_some_and(|f| f.kind.is_head() && f.msg == 7));
    assert_eq!(net.switches[0].input_occupancy(1, 0), Some(8));
    net
}

fn hoq_drops(net: &Net) -> u64 {
    net.switches[0].counters().drops.hoq_lifetime
}

#[test]
fn a_head_blocked_longer_than_the_lifetime_is_discarded_with_its_worm() {
    let mut net = blocked_head(Some(HOQ_NS), RecoveryProtocol::None);
    // Not before the lifetime: it has waited about 50 µs, then 0.9 ms.
    net.run_for(HOQ_NS - 150_000);
    assert_eq!(hoq_drops(&net), 0, "discarded before its lifetime");
    assert_eq!(net.switches[0].input_occupancy(1, 0), Some(8));
    // After it: the head and the 7 flits behind it are discarded, and the
    // 12 still at host 1 come as credits return and are consumed too.
    net.run_for(300_000);
    assert_eq!(hoq_drops(&net), 20, "the whole worm");
    let c = net.switches[0].counters();
    assert_eq!(c.hoq_discards, 1);
    assert_eq!(c.drops.total(), 20);
    assert_eq!(net.switches[0].input_occupancy(1, 0), Some(0));
    assert_eq!(net.switches[0].input_states()[2].0, InState::Idle);
    assert!(net.hosts[1].to_send.is_empty());
    assert_eq!(net.hosts[1].link.credits(0), 8, "every slot credited back");
    // The held worms were left alone, and nothing else was discarded: the
    // drop is a `Dropped` event with the new reason.
    let mut dropped = Vec::new();
    while let Some(e) = net.switches[0].poll_event() {
        if let SwitchEvent::Dropped { reason, msg, .. } = e {
            dropped.push((reason, msg));
        }
    }
    assert_eq!(dropped, vec![(DropReason::HoqLifetime, 7)]);
    assert_eq!(DropReason::HoqLifetime.name(), "hoq-lifetime");
    assert!(DropReason::ALL.contains(&DropReason::HoqLifetime));
    // Host 2 consumes again: the two worms that held port 2 arrive whole,
    // and a new packet from host 1 goes through (the input is usable).
    net.hosts[2].consume = true;
    net.hosts[1].to_send.extend(packet(1, 2, 8, 4, 0));
    net.run_for(2_000_000);
    let got = &net.hosts[2].received;
    for (m, n) in [(1, 20), (2, 20), (8, 4), (7, 0)] {
        assert_eq!(got.iter().filter(|f| f.msg == m).count(), n, "msg {m}");
    }
    assert_eq!(hoq_drops(&net), 20);
}

#[test]
fn a_head_discarded_for_its_lifetime_is_resent_by_its_source_under_sbrp() {
    for p in [
        RecoveryProtocol::Sbrp0,
        RecoveryProtocol::Sbrp1,
        RecoveryProtocol::Sbrp2,
    ] {
        let mut net = blocked_head(Some(HOQ_NS), p);
        net.run_for(HOQ_NS + 100_000);
        assert_eq!(hoq_drops(&net), 20, "{p:?}");
        let s = net.switches[0].sbrp_counters();
        assert_eq!((s.rrq_sent, s.rrq_parked), (1, 0), "{p:?}: at once");
        let rrq: Vec<_> = net.hosts[1]
            .received
            .iter()
            .filter(|f| sbrp::is_rrq(f))
            .collect();
        assert_eq!(rrq.len(), 1, "{p:?}: the RRQ reached the source");
        let h = rrq[0].head.as_ref().unwrap();
        // The whole packet: nothing of it left this switch.
        assert_eq!(
            (rrq[0].msg, rrq[0].seq, h.dst, h.src),
            (7, 0, 1, 2),
            "{p:?}"
        );
    }
}

#[test]
fn a_head_that_moves_within_its_lifetime_is_not_discarded() {
    let mut net = blocked_head(Some(HOQ_NS), RecoveryProtocol::Sbrp0);
    net.run_for(HOQ_NS / 2);
    // Port 2 drains before the lifetime: the head is granted and the
    // packet delivered whole; its wait is what the counter keeps.
    net.hosts[2].consume = true;
    net.run_for(5 * HOQ_NS);
    assert_eq!(hoq_drops(&net), 0);
    assert_eq!(net.switches[0].sbrp_counters().rrq_sent, 0);
    let got = &net.hosts[2].received;
    assert_eq!(got.iter().filter(|f| f.msg == 7).count(), 20);
    let waited = net.switches[0].counters().head_wait_max_ns;
    assert!(
        (HOQ_NS / 2..HOQ_NS).contains(&waited),
        "head waited {waited} ns"
    );
    // Heads that each wait less than the lifetime, one after the other on
    // the same input, never add up to a discard: each one's clock starts
    // when it reaches the front and stops when it is granted.
    for round in 0..3u64 {
        let m = 100 + 10 * round;
        net.hosts[2].consume = false;
        net.hosts[0].to_send.extend(packet(0, 2, m, 20, 0));
        net.run_for(50_000);
        net.hosts[3].to_send.extend(packet(3, 2, m + 1, 20, 0));
        net.run_for(50_000);
        net.hosts[1].to_send.extend(packet(1, 2, m + 2, 20, 0));
        net.run_for(HOQ_NS * 3 / 4);
        assert_eq!(net.switches[0].input_states()[2].0, InState::Idle);
        net.hosts[2].consume = true;
        net.run_for(2 * HOQ_NS);
    }
    assert_eq!(hoq_drops(&net), 0);
    assert_eq!(net.hosts[2].received.len(), 3 * 20 + 3 * 3 * 20);
}

#[test]
fn without_a_lifetime_a_blocked_head_waits_for_good() {
    let mut net = blocked_head(None, RecoveryProtocol::Sbrp0);
    net.run_for(20 * HOQ_NS);
    assert_eq!(net.switches[0].counters().drops.total(), 0);
    assert_eq!(net.switches[0].input_occupancy(1, 0), Some(8));
    assert_eq!(net.switches[0].sbrp_counters().rrq_sent, 0);
}
