//! In-process fabrics: switches and host links wired together by a tiny
//! deterministic loop that passes datagrams and advances a fake clock.

use super::*;
use crate::flit::{FlitKind, Head};
use crate::routing::{AdaptiveEntry, AdaptiveTable, Lft};
use crate::topology::HostId;
use crate::wire::{self, FrameWriter, Header};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Host(usize),
    Sw(usize, PortNo),
}

pub(crate) struct Host {
    pub(crate) link: Link,
    pub(crate) consume: bool,
    pub(crate) to_send: VecDeque<Flit>,
    pub(crate) received: Vec<Flit>,
}

pub(crate) struct Net {
    pub(crate) now: u64,
    pub(crate) hosts: Vec<Host>,
    pub(crate) switches: Vec<Switch>,
    pub(crate) wires: Vec<(End, End)>,
    pub(crate) buf: Vec<u8>,
}

pub(crate) fn link_cfg() -> LinkConfig {
    LinkConfig {
        keepalive_interval_ns: 1_000_000,
        dead_after_ns: 5_000_000,
        propagation_ns: 100,
        credit_coalesce_ns: 500,
        ..LinkConfig::default()
    }
}

pub(crate) fn sw_cfg(radix: usize, vcs: u8, switching: Switching) -> SwitchConfig {
    SwitchConfig {
        radix,
        vcs,
        buffer_depth: 8,
        switching,
        link: link_cfg(),
        max_packet_flits: 4,
        timing: Default::default(),
    }
}

/// The flits of one packet of `len` flits from `src` to `dst` on `vc`.
pub(crate) fn packet(src: HostId, dst: HostId, msg: u64, len: u32, vc: u8) -> Vec<Flit> {
    (0..len)
        .map(|seq| {
            let kind = match (seq, len) {
                (_, 1) => FlitKind::HeadTail,
                (0, _) => FlitKind::Head,
                (s, l) if s + 1 == l => FlitKind::Tail,
                _ => FlitKind::Body,
            };
            Flit {
                kind,
                vc,
                flags: 0,
                msg,
                packet: 0,
                seq,
                head: kind.is_head().then_some(Head {
                    dst,
                    src,
                    msg_flits: len,
                    ..Head::default()
                }),
                payload: Bytes::from(vec![msg as u8; 32]),
            }
        })
        .collect()
}

impl Net {
    pub(crate) fn new(
        n_hosts: usize,
        vcs: u8,
        switches: Vec<Switch>,
        wires: Vec<(End, End)>,
    ) -> Self {
        let hcfg = LinkConfig {
            vcs,
            buffer_depth: 8,
            ..link_cfg()
        };
        let hosts = (0..n_hosts)
            .map(|h| Host {
                link: Link::with_epoch(hcfg.clone(), 100 + h as u16).unwrap(),
                consume: true,
                to_send: VecDeque::new(),
                received: Vec::new(),
            })
            .collect();
        Net {
            now: 0,
            hosts,
            switches,
            wires,
            buf: Vec::new(),
        }
    }

    pub(crate) fn peer(&self, e: End) -> End {
        for &(a, b) in &self.wires {
            if a == e {
                return b;
            }
            if b == e {
                return a;
            }
        }
        panic!("{e:?} is not wired");
    }

    pub(crate) fn deliver(&mut self, to: End, data: &[u8]) {
        let now = self.now;
        match to {
            End::Host(h) => {
                let _ = self.hosts[h].link.handle_datagram_slice(now, data);
            }
            End::Sw(s, p) => {
                let _ = self.switches[s].handle_datagram_slice(now, p, data);
            }
        }
    }

    /// Everything that can happen at `self.now`.
    pub(crate) fn settle(&mut self) {
        let now = self.now;
        for s in &mut self.switches {
            s.handle_timeout(now);
        }
        for h in &mut self.hosts {
            h.link.handle_timeout(now);
        }
        let mut iters = 0;
        loop {
            iters += 1;
            if iters > 10_000 {
                panic!("settle loops at {now}");
            }
            let mut moved = false;
            for h in 0..self.hosts.len() {
                let host = &mut self.hosts[h];
                while let Some(f) = host.to_send.front() {
                    if !host.link.can_send(f.vc) {
                        break;
                    }
                    let f = host.to_send.pop_front().unwrap();
                    host.link.send(f).unwrap();
                }
                if host.consume {
                    while let Some(f) = host.link.poll_received() {
                        host.link.release(f.vc, 1).unwrap();
                        host.received.push(f);
                    }
                }
                let mut buf = std::mem::take(&mut self.buf);
                while self.hosts[h].link.poll_transmit(now, &mut buf) {
                    moved = true;
                    let to = self.peer(End::Host(h));
                    self.deliver(to, &buf);
                }
                self.buf = buf;
            }
            for s in 0..self.switches.len() {
                let mut buf = std::mem::take(&mut self.buf);
                while let Some(p) = self.switches[s].poll_transmit(now, &mut buf) {
                    moved = true;
                    let to = self.peer(End::Sw(s, p));
                    self.deliver(to, &buf);
                }
                self.buf = buf;
            }
            if !moved {
                break;
            }
        }
    }

    pub(crate) fn next_deadline(&self) -> u64 {
        let t = self
            .switches
            .iter()
            .filter_map(|s| s.poll_timeout())
            .chain(self.hosts.iter().filter_map(|h| h.link.poll_timeout()))
            .min()
            .unwrap_or(u64::MAX);
        t.max(self.now + 1)
    }

    pub(crate) fn run_for(&mut self, ns: u64) {
        let end = self.now + ns;
        let mut steps = 0u64;
        while self.now < end {
            steps += 1;
            if steps > 1_000_000 {
                panic!(
                    "run_for stuck at {} (deadline {})",
                    self.now,
                    self.next_deadline()
                );
            }
            self.settle();
            self.now = self.next_deadline().min(end);
        }
        self.settle();
    }

    pub(crate) fn total_drops(&self) -> u64 {
        self.switches
            .iter()
            .map(|s| s.counters().drops.total())
            .sum()
    }
}

pub(crate) fn lft(ports: &[Option<PortNo>]) -> SwitchTable {
    SwitchTable::Lft(Lft {
        ports: ports.to_vec(),
    })
}

/// host0 — S0 — S1 — … — S(n-1) — host1; every switch has port 0 toward
/// host0 and port 1 toward host1.
pub(crate) fn chain(n: usize, vcs: u8, switching: Switching) -> Net {
    let mut switches = Vec::new();
    let mut wires = vec![
        (End::Host(0), End::Sw(0, 0)),
        (End::Sw(n - 1, 1), End::Host(1)),
    ];
    for s in 0..n {
        let mut sw = Switch::with_epoch(sw_cfg(2, vcs, switching), 10 + s as u16).unwrap();
        sw.install_table(lft(&[Some(0), Some(1)]), VcPolicy::Keep);
        switches.push(sw);
        if s + 1 < n {
            wires.push((End::Sw(s, 1), End::Sw(s + 1, 0)));
        }
    }
    Net::new(2, vcs, switches, wires)
}

/// Checks every message arrived complete and in flit order.
pub(crate) fn assert_in_order(received: &[Flit], msgs: u64, len: u32) {
    let mut next: HashMap<u64, u32> = HashMap::new();
    for f in received {
        let n = next.entry(f.msg).or_default();
        assert_eq!(f.seq, *n, "msg {} out of order", f.msg);
        *n += 1;
    }
    assert_eq!(next.len() as u64, msgs, "messages delivered");
    assert!(next.values().all(|&n| n == len), "incomplete message");
}

pub(crate) fn chain_delivers(n: usize, vcs: u8, switching: Switching) {
    let mut net = chain(n, vcs, switching);
    let msgs = 40u64;
    for m in 0..msgs {
        net.hosts[0]
            .to_send
            .extend(packet(0, 1, m, 4, (m % vcs as u64) as u8));
        net.hosts[1].to_send.extend(packet(1, 0, 1000 + m, 3, 0));
    }
    net.run_for(20_000_000);
    assert_in_order(&net.hosts[1].received, msgs, 4);
    assert_in_order(&net.hosts[0].received, msgs, 3);
    assert_eq!(net.total_drops(), 0);
    for s in &net.switches {
        let c = s.counters();
        assert_eq!(
            c.ports[0].vcs.iter().map(|v| v.rx_flits).sum::<u64>(),
            msgs * 4
        );
        assert_eq!(
            c.ports[1].vcs.iter().map(|v| v.tx_flits).sum::<u64>(),
            msgs * 4
        );
        if vcs == 2 {
            assert_eq!(c.ports[1].vcs[1].tx_flits, msgs * 2, "VC kept");
        }
    }
}

#[test]
pub(crate) fn two_switch_chain_wormhole_1vc() {
    chain_delivers(2, 1, Switching::Wormhole);
}

#[test]
pub(crate) fn two_switch_chain_wormhole_2vc() {
    chain_delivers(2, 2, Switching::Wormhole);
}

#[test]
pub(crate) fn two_switch_chain_vct_1vc() {
    chain_delivers(2, 1, Switching::VirtualCutThrough);
}

#[test]
pub(crate) fn three_switch_chain_vct_2vc() {
    chain_delivers(3, 2, Switching::VirtualCutThrough);
}

#[test]
pub(crate) fn three_switch_chain_wormhole_2vc() {
    chain_delivers(3, 2, Switching::Wormhole);
}

pub(crate) fn backpressure(switching: Switching) -> Net {
    let mut net = chain(2, 1, switching);
    net.hosts[1].consume = false;
    for m in 0..30 {
        net.hosts[0].to_send.extend(packet(0, 1, m, 4, 0));
    }
    net.run_for(30_000_000);
    // Every buffer on the way is full and nothing was dropped.
    assert_eq!(net.total_drops(), 0);
    assert_eq!(net.hosts[0].link.credits(0), 0);
    assert!(!net.hosts[0].to_send.is_empty(), "source must be blocked");
    assert_eq!(net.hosts[1].link.pending_rx(), 8, "sink buffer full");
    for s in &net.switches {
        assert_eq!(s.input_occupancy(0, 0), Some(8));
        assert_eq!(s.link(1).unwrap().credits(0), 0);
        assert!(s.counters().ports[1].vcs[0].max_occupancy <= 8);
    }
    net
}

#[test]
pub(crate) fn backpressure_holds_without_drops_then_drains() {
    for switching in [Switching::Wormhole, Switching::VirtualCutThrough] {
        let mut net = backpressure(switching);
        let stall = net.switches[1].counters_at(net.now).ports[1].vcs[0].credit_stall_ns;
        assert!(stall > 0);
        net.hosts[1].consume = true;
        net.run_for(30_000_000);
        assert_in_order(&net.hosts[1].received, 30, 4);
        assert_eq!(net.total_drops(), 0);
    }
}

/// A running credit stall is kept as its start time: read at any time it
/// counts up to then (what copying it at a wake-up then would have given),
/// and a wake-up meanwhile changes no counter.
#[test]
fn a_running_credit_stall_counts_up_to_when_it_is_read() {
    let mut net = backpressure(Switching::Wormhole);
    let now = net.now;
    let sw = &mut net.switches[1];
    let stall = |sw: &Switch, t: u64| sw.counters_at(t).ports[1].vcs[0].credit_stall_ns;
    let at_now = stall(sw, now);
    assert!(at_now > 0, "the switch waits for credits on port 1");
    assert_eq!(
        sw.counters().ports[1].vcs[0].credit_stall_ns,
        0,
        "none ended"
    );
    let kept = sw.counters().clone();
    sw.handle_timeout(now + 1_000);
    assert_eq!(sw.counters(), &kept, "a wake-up copies no running stall");
    assert_eq!(stall(sw, now + 1_000), at_now + 1_000);
    assert_eq!(stall(sw, now + 5_000), at_now + 5_000);
}

pub(crate) fn in_flight(net: &Net) -> Vec<u64> {
    net.switches.iter().map(Switch::in_flight_flits).collect()
}

/// `in_flight_flits`: 0 on an idle fabric; while traffic is blocked, each
/// switch counts its buffered flits and those it sent on whose credits are
/// not back, each once; 0 again once the fabric has drained.
#[test]
pub(crate) fn in_flight_flits_counts_buffered_and_unacknowledged_flits() {
    let mut net = chain(2, 1, Switching::Wormhole);
    net.run_for(3_000_000);
    assert!(net.switches.iter().all(|s| s.link(1).unwrap().is_up()));
    assert_eq!(in_flight(&net), [0, 0], "links up, no traffic");
    // Host 1 consumes nothing: every buffer on the way fills up (the
    // blocked traffic of `backpressure`).
    let mut net = backpressure(Switching::Wormhole);
    for s in &net.switches {
        // 8 flits in the input buffer, 8 sent on and not freed downstream.
        assert_eq!(s.link(1).unwrap().credits_missing(), 8);
        assert_eq!(s.in_flight_flits(), 16);
    }
    net.hosts[1].consume = true;
    net.run_for(30_000_000);
    assert_in_order(&net.hosts[1].received, 30, 4);
    assert_eq!(in_flight(&net), [0, 0], "drained");
    // A flit queued on a link has taken its credit: counted once. Host 0
    // sends one 4-flit packet; switch 0 takes it in and forwards it onto
    // port 1's link, where it waits for `poll_transmit`.
    let now = net.now;
    for f in packet(0, 1, 100, 4, 0) {
        net.hosts[0].link.send(f).unwrap();
    }
    let mut buf = Vec::new();
    assert!(net.hosts[0].link.poll_transmit(now, &mut buf));
    net.switches[0].handle_datagram_slice(now, 0, &buf).unwrap();
    net.switches[0].handle_timeout(now + link_cfg().propagation_ns);
    assert_eq!(net.switches[0].link(1).unwrap().queued(), 4);
    assert_eq!(net.switches[0].in_flight_flits(), 4);
    net.now = now + link_cfg().propagation_ns;
    net.run_for(10_000_000);
    assert_eq!(in_flight(&net), [0, 0]);
    assert_eq!(net.hosts[1].received.len(), 30 * 4 + 4);
}

/// The flits a dead link held (unacknowledged by its peer) are not
/// counted: they will never move. The packets routed to the dead port
/// are dropped, and the fabric drains to 0 though host 1 never consumed.
#[test]
pub(crate) fn in_flight_flits_leaves_out_a_dead_links_flits() {
    let mut net = backpressure(Switching::Wormhole);
    assert_eq!(in_flight(&net), [16, 16]);
    net.switches[1].set_port_admin(1, false).unwrap();
    // Switch 1's buffered flits were bound for the dead port (dropped at
    // once) and the 8 in host 1's buffer are gone with the link.
    assert_eq!(net.switches[1].link(1).unwrap().credits_missing(), 0);
    assert_eq!(net.switches[1].in_flight_flits(), 0);
    assert_eq!(net.switches[0].in_flight_flits(), 16, "not its business");
    net.run_for(10_000_000);
    assert_eq!(in_flight(&net), [0, 0]);
    assert!(net.hosts[0].to_send.is_empty());
    // Everything host 0 sent is either in host 1's buffer or dropped.
    let dropped = net.switches[1].counters().drops.port_down;
    assert_eq!(dropped + 8, 30 * 4);
}

#[test]
pub(crate) fn fairness_between_two_inputs_for_one_output() {
    // host0 on port 0 and host1 on port 1 both send to host2 on port 2.
    let mut sw = Switch::new(sw_cfg(3, 1, Switching::Wormhole)).unwrap();
    sw.install_table(lft(&[Some(0), Some(1), Some(2)]), VcPolicy::Keep);
    let wires = vec![
        (End::Host(0), End::Sw(0, 0)),
        (End::Host(1), End::Sw(0, 1)),
        (End::Host(2), End::Sw(0, 2)),
    ];
    let mut net = Net::new(3, 1, vec![sw], wires);
    for m in 0..400 {
        net.hosts[0].to_send.extend(packet(0, 2, m, 1, 0));
        net.hosts[1].to_send.extend(packet(1, 2, 10_000 + m, 1, 0));
    }
    // The sink drains slowly so the output is the bottleneck.
    net.hosts[2].consume = false;
    net.run_for(2_000_000);
    for _ in 0..200 {
        net.hosts[2].consume = true;
        net.settle();
        net.hosts[2].consume = false;
        net.run_for(10_000);
    }
    let got = &net.hosts[2].received;
    let from0 = got.iter().filter(|f| f.msg < 10_000).count();
    let from1 = got.len() - from0;
    assert!(got.len() > 100, "only {} delivered", got.len());
    let share = from0 as f64 / got.len() as f64;
    assert!((0.45..=0.55).contains(&share), "{from0} vs {from1}");
}

#[test]
pub(crate) fn unroutable_packet_is_dropped_whole_and_counted() {
    let mut net = chain(2, 1, Switching::Wormhole);
    net.hosts[0].to_send.extend(packet(0, 7, 1, 4, 0)); // host 7: no route
    net.hosts[0].to_send.extend(packet(0, 1, 2, 4, 0));
    net.run_for(10_000_000);
    assert_in_order(&net.hosts[1].received, 1, 4);
    let c = net.switches[0].counters();
    assert_eq!(c.drops.no_route, 4);
    assert_eq!(c.ports[0].drops.no_route, 4);
    let mut dropped_events = 0;
    while let Some(e) = net.switches[0].poll_event() {
        if let SwitchEvent::Dropped { reason, msg, .. } = e {
            assert_eq!((reason, msg), (DropReason::NoRoute, 1));
            dropped_events += 1;
        }
    }
    assert_eq!(dropped_events, 1, "one event per packet");
}

#[test]
pub(crate) fn bad_datagrams_and_bad_vcs_are_counted() {
    let mut net = chain(1, 1, Switching::Wormhole);
    net.run_for(3_000_000);
    // The host's next link sequence number: a gap would be a link error.
    let next_seq = net.hosts[0].link.stats().tx_datagrams as u32;
    let sw = &mut net.switches[0];
    assert!(matches!(
        sw.handle_datagram_slice(net.now, 9, b""),
        Err(SwitchError::UnknownPort { port: 9, radix: 2 })
    ));
    // A well-formed datagram from host 0 with a flit on VC 5.
    let mut buf = Vec::new();
    let mut w = FrameWriter::new(
        &mut buf,
        Header {
            epoch: 100,
            peer_epoch: 10,
            seq: next_seq,
            port: 0,
        },
    );
    w.push_flit(&packet(0, 1, 1, 1, 5)[0]);
    w.finish();
    assert!(wire::decode(&buf).is_ok());
    sw.handle_datagram_slice(net.now, 0, &buf).unwrap();
    sw.handle_timeout(net.now + 100); // after the propagation delay
    assert_eq!(sw.counters().drops.bad_vc, 1);
    // Garbage is a link error: the port goes down and retrains.
    assert!(matches!(
        sw.handle_datagram_slice(net.now, 0, b"not a datagram"),
        Err(SwitchError::BadDatagram { port: 0, .. })
    ));
    let c = sw.counters();
    assert_eq!(c.drops.bad_datagram, 1);
    assert_eq!(c.ports[0].bad_datagrams, 1);
    assert_eq!(c.ports[0].link_errors, 1);
    let events: Vec<_> = std::iter::from_fn(|| sw.poll_event()).collect();
    assert!(events.contains(&SwitchEvent::LinkError {
        port: 0,
        cause: crate::link::LinkErrorCause::Malformed,
        by_peer: false
    }));
    assert!(events.contains(&SwitchEvent::PortDown {
        port: 0,
        admin: false
    }));
    assert!(!sw.link(0).unwrap().is_up());
    // A corrupted datagram counts as a CRC error (no second link error
    // while retraining).
    buf[20] ^= 1;
    assert!(sw.handle_datagram_slice(net.now, 0, &buf).is_err());
    assert_eq!(sw.counters().ports[0].crc_errors, 1);
    assert_eq!(sw.counters().ports[0].link_errors, 1);
    // After the retrain the port is up again, and the host heard the reset.
    net.run_for(LinkConfig::default().retrain_ns + 3_000_000);
    let sw = &net.switches[0];
    assert!(sw.link(0).unwrap().is_up());
    assert_eq!(sw.counters().ports[0].retrains, 1);
    assert_eq!(net.hosts[0].link.stats().peer_link_resets, 1);
}

#[test]
pub(crate) fn admin_down_port_drops_packets_routed_to_it() {
    let mut net = chain(1, 1, Switching::Wormhole);
    net.run_for(3_000_000);
    assert_eq!(
        net.switches[0].set_port_admin(5, false),
        Err(SwitchError::UnknownPort { port: 5, radix: 2 })
    );
    net.switches[0].set_port_admin(1, false).unwrap();
    assert!(matches!(
        std::iter::from_fn(|| net.switches[0].poll_event()).last(),
        Some(SwitchEvent::PortDown {
            port: 1,
            admin: true
        })
    ));
    net.hosts[0].to_send.extend(packet(0, 1, 1, 4, 0));
    net.run_for(3_000_000);
    assert_eq!(net.switches[0].counters().drops.port_down, 4);
    assert!(net.hosts[1].received.is_empty());
    // Back up: traffic flows again.
    net.switches[0].set_port_admin(1, true).unwrap();
    net.hosts[0].to_send.extend(packet(0, 1, 2, 4, 0));
    net.run_for(10_000_000);
    assert_in_order(&net.hosts[1].received, 1, 4);
}

#[test]
pub(crate) fn a_port_whose_peer_was_never_heard_drops_what_is_routed_to_it() {
    let mut net = chain(1, 1, Switching::Wormhole);
    // Host 1 is silent from the start (a dead neighbour of a restarted
    // switch): the link never hears it, so it is never declared dead.
    net.hosts[1].link.set_admin_up(false);
    net.run_for(3_000_000);
    assert!(!net.switches[0].port_alive(1));
    net.hosts[0].to_send.extend(packet(0, 1, 1, 4, 0));
    net.run_for(20_000_000);
    // Dropped at once, not held for credits that never come.
    assert_eq!(net.switches[0].counters().drops.port_down, 4);
    assert_eq!(net.switches[0].in_flight_flits(), 0);
    let events: Vec<_> = std::iter::from_fn(|| net.switches[0].poll_event()).collect();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, SwitchEvent::PortDown { port: 1, .. })),
        "{events:?}"
    );
    // Heard at last: the port comes up and carries traffic.
    net.hosts[1].link.set_admin_up(true);
    net.run_for(3_000_000);
    let events: Vec<_> = std::iter::from_fn(|| net.switches[0].poll_event()).collect();
    assert!(
        events.contains(&SwitchEvent::PortUp { port: 1 }),
        "{events:?}"
    );
    net.hosts[0].to_send.extend(packet(0, 1, 2, 4, 0));
    net.run_for(5_000_000);
    assert_in_order(&net.hosts[1].received, 1, 4);
}

#[test]
pub(crate) fn dead_peer_is_reported_and_its_traffic_dropped() {
    let mut net = chain(1, 1, Switching::Wormhole);
    net.run_for(3_000_000);
    // Host 1 goes silent: its link stops talking.
    net.hosts[1].link.set_admin_up(false);
    net.run_for(10_000_000);
    let events: Vec<_> = std::iter::from_fn(|| net.switches[0].poll_event()).collect();
    assert!(events.contains(&SwitchEvent::PortDown {
        port: 1,
        admin: false
    }));
    net.hosts[0].to_send.extend(packet(0, 1, 1, 4, 0));
    net.run_for(3_000_000);
    assert_eq!(net.switches[0].counters().drops.port_down, 4);
    net.hosts[1].link.set_admin_up(true);
    net.run_for(3_000_000);
    let events: Vec<_> = std::iter::from_fn(|| net.switches[0].poll_event()).collect();
    assert!(events.contains(&SwitchEvent::PortUp { port: 1 }));
    net.hosts[0].to_send.extend(packet(0, 1, 2, 4, 0));
    net.run_for(5_000_000);
    assert_in_order(&net.hosts[1].received, 1, 4);
}

#[test]
pub(crate) fn head_is_routed_toward_its_current_intermediate() {
    // Port 1 reaches host 1, port 2 reaches host 2 (the intermediate).
    let mut sw = Switch::new(sw_cfg(3, 1, Switching::Wormhole)).unwrap();
    sw.install_table(lft(&[Some(0), Some(1), Some(2)]), VcPolicy::Keep);
    let wires = vec![
        (End::Host(0), End::Sw(0, 0)),
        (End::Host(1), End::Sw(0, 1)),
        (End::Host(2), End::Sw(0, 2)),
    ];
    let mut net = Net::new(3, 1, vec![sw], wires);
    let mut p = packet(0, 1, 1, 2, 0);
    let h = p[0].head.as_mut().unwrap();
    h.intermediates[0] = 2;
    h.n_intermediates = 1;
    net.hosts[0].to_send.extend(p);
    net.run_for(5_000_000);
    assert_eq!(net.hosts[2].received.len(), 2);
    assert!(net.hosts[1].received.is_empty());
}

#[test]
pub(crate) fn adaptive_routing_prefers_the_port_with_most_credits() {
    // Host 1 (port 1) and host 2 (port 2) both count as "destination 1":
    // candidates 1 and 2, escape 1. Host 1 stops consuming, so once its
    // buffer fills, traffic goes through port 2.
    let mut sw = Switch::new(sw_cfg(3, 1, Switching::Wormhole)).unwrap();
    sw.install_table(
        SwitchTable::Adaptive(AdaptiveTable {
            entries: vec![
                AdaptiveEntry {
                    candidates: vec![0],
                    escape: Some(0),
                    misroute: Vec::new(),
                },
                AdaptiveEntry {
                    candidates: vec![1, 2],
                    escape: Some(1),
                    misroute: Vec::new(),
                },
            ],
        }),
        VcPolicy::Keep,
    );
    let wires = vec![
        (End::Host(0), End::Sw(0, 0)),
        (End::Host(1), End::Sw(0, 1)),
        (End::Host(2), End::Sw(0, 2)),
    ];
    let mut net = Net::new(3, 1, vec![sw], wires);
    net.hosts[1].consume = false;
    for m in 0..20 {
        net.hosts[0].to_send.extend(packet(0, 1, m, 2, 0));
    }
    net.run_for(10_000_000);
    let via1 = net.hosts[1].link.pending_rx();
    let via2 = net.hosts[2].received.len();
    assert_eq!(via1 + via2, 40, "all flits delivered somewhere");
    assert!(
        via1 <= 8 && via2 >= 32,
        "via port 1: {via1}, via port 2: {via2}"
    );
    assert_eq!(net.total_drops(), 0);
}

#[test]
pub(crate) fn vct_never_splits_a_blocked_packet_across_switches() {
    let net = backpressure(Switching::VirtualCutThrough);
    for s in &net.switches {
        // 8-flit buffers hold exactly two 4-flit packets, whole.
        let c = s.counters();
        assert_eq!(c.ports[0].vcs[0].occupancy % 4, 0);
    }
}

#[test]
pub(crate) fn config_is_validated() {
    let mut c = sw_cfg(2, 1, Switching::VirtualCutThrough);
    c.max_packet_flits = 9;
    assert!(matches!(
        Switch::new(c),
        Err(ConfigError::Invalid {
            field: "switch.max_packet_flits",
            ..
        })
    ));
    let c = sw_cfg(0, 1, Switching::Wormhole);
    assert!(Switch::new(c).is_err());
    let c = sw_cfg(2, 16, Switching::Wormhole);
    assert!(Switch::new(c).is_err());
}

/// Throughput of one switch (2 ports) with host links on both sides:
/// `cargo test --release -p flitnet-core switch_throughput -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark; run in release"]
pub(crate) fn switch_throughput() {
    use std::time::{Duration, Instant};
    let hcfg = LinkConfig {
        buffer_depth: 64,
        credit_coalesce_ns: 1_000,
        ..link_cfg()
    };
    let cfg = SwitchConfig {
        buffer_depth: 64,
        link: LinkConfig {
            propagation_ns: 0,
            ..hcfg.clone()
        },
        ..sw_cfg(2, 1, Switching::Wormhole)
    };
    let hcfg = LinkConfig {
        propagation_ns: 0,
        ..hcfg
    };
    let mut sw = Switch::new(cfg).unwrap();
    sw.install_table(lft(&[Some(0), Some(1)]), VcPolicy::Keep);
    let mut a = Link::with_epoch(hcfg.clone(), 7).unwrap();
    let mut b = Link::with_epoch(hcfg, 8).unwrap();
    let mut buf = Vec::new();
    let (mut now, mut delivered, mut m) = (0u64, 0u64, 0u64);
    let mut in_switch = Duration::ZERO;
    let mut pending: VecDeque<Flit> = VecDeque::new();
    let target = 2_000_000u64;
    let start = Instant::now();
    while delivered < target {
        now += 1_000;
        if pending.is_empty() {
            pending.extend(packet(0, 1, m, 8, 0));
            m += 1;
        }
        while let Some(f) = pending.front() {
            if !a.can_send(f.vc) {
                break;
            }
            a.send(pending.pop_front().unwrap()).unwrap();
            if pending.is_empty() {
                pending.extend(packet(0, 1, m, 8, 0));
                m += 1;
            }
        }
        a.handle_timeout(now);
        b.handle_timeout(now);
        while a.poll_transmit(now, &mut buf) {
            let t = Instant::now();
            let _ = sw.handle_datagram(now, 0, Bytes::copy_from_slice(&buf));
            in_switch += t.elapsed();
        }
        while b.poll_transmit(now, &mut buf) {
            let t = Instant::now();
            let _ = sw.handle_datagram(now, 1, Bytes::copy_from_slice(&buf));
            in_switch += t.elapsed();
        }
        let t = Instant::now();
        sw.handle_timeout(now);
        in_switch += t.elapsed();
        loop {
            let t = Instant::now();
            let p = sw.poll_transmit(now, &mut buf);
            in_switch += t.elapsed();
            match p {
                Some(0) => {
                    let _ = a.handle_datagram_slice(now, &buf);
                }
                Some(_) => {
                    let _ = b.handle_datagram_slice(now, &buf);
                }
                None => break,
            }
        }
        while let Some(f) = b.poll_received() {
            b.release(f.vc, 1).unwrap();
            delivered += 1;
        }
    }
    let total = start.elapsed();
    assert_eq!(sw.counters().drops.total(), 0);
    eprintln!(
        "{delivered} flits: {:.2} M flits/s in the switch alone, {:.2} M flits/s end to end ({} datagrams into the switch)",
        delivered as f64 / in_switch.as_secs_f64() / 1e6,
        delivered as f64 / total.as_secs_f64() / 1e6,
        sw.counters().ports[0].rx_datagrams,
    );
}

mod random_traffic {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
        /// Random packets between the four hosts of a radix-4 switch, with
        /// sinks pausing at random: everything arrives, in order, with no
        /// drop and no buffer over its depth.
        #[test]
        fn everything_arrives_in_order(
            pkts in proptest::collection::vec((0usize..4, 0usize..4, 1u32..6, 0u8..2), 1..60),
            vct in any::<bool>(),
            pauses in proptest::collection::vec((0usize..4, 1u64..200_000), 0..10),
        ) {
            let switching = if vct { Switching::VirtualCutThrough } else { Switching::Wormhole };
            let mut cfg = sw_cfg(4, 2, switching);
            cfg.max_packet_flits = 5;
            let mut sw = Switch::new(cfg).unwrap();
            sw.install_table(lft(&[Some(0), Some(1), Some(2), Some(3)]), VcPolicy::Keep);
            let wires = (0..4).map(|h| (End::Host(h), End::Sw(0, h as PortNo))).collect();
            let mut net = Net::new(4, 2, vec![sw], wires);
            let mut expect: HashMap<u64, (usize, u32)> = HashMap::new();
            for (m, &(src, dst, len, vc)) in pkts.iter().enumerate() {
                net.hosts[src].to_send.extend(packet(src as HostId, dst as HostId, m as u64, len, vc));
                expect.insert(m as u64, (dst, len));
            }
            net.run_for(2_000_000);
            for &(h, dt) in &pauses {
                net.hosts[h].consume = false;
                net.run_for(dt);
                net.hosts[h].consume = true;
            }
            net.run_for(20_000_000);
            prop_assert_eq!(net.total_drops(), 0);
            for (h, host) in net.hosts.iter().enumerate() {
                let mut next: HashMap<u64, u32> = HashMap::new();
                for f in &host.received {
                    let n = next.entry(f.msg).or_default();
                    prop_assert_eq!(f.seq, *n);
                    *n += 1;
                    prop_assert_eq!(expect[&f.msg].0, h);
                }
                for (m, n) in next {
                    prop_assert_eq!(expect[&m].1, n);
                }
            }
            let delivered: usize = net.hosts.iter().map(|h| h.received.len()).sum();
            prop_assert_eq!(delivered as u32, pkts.iter().map(|p| p.2).sum::<u32>());
            for p in &net.switches[0].counters().ports {
                for v in &p.vcs {
                    prop_assert!(v.max_occupancy <= 8);
                }
            }
        }
    }
}

/// Mutated copies of real datagrams (CRC fixed, so the flits inside get
/// decoded and routed) never make the switch panic or overfill a buffer.
#[test]
pub(crate) fn switch_survives_mutated_datagrams() {
    use rand::{Rng, SeedableRng};
    let mut net = chain(1, 2, Switching::Wormhole);
    net.run_for(3_000_000);
    // Capture what host 0 sends for a few packets.
    for m in 0..6 {
        net.hosts[0]
            .to_send
            .extend(packet(0, m % 3, m as u64, 3, (m % 2) as u8));
    }
    let mut captured = Vec::new();
    let mut buf = Vec::new();
    {
        let h = &mut net.hosts[0];
        while let Some(f) = h.to_send.pop_front() {
            if h.link.send(f).is_err() {
                break;
            }
        }
        while h.link.poll_transmit(net.now, &mut buf) {
            captured.push(buf.clone());
        }
    }
    assert!(!captured.is_empty());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let sw = &mut net.switches[0];
    let mut now = net.now;
    for _ in 0..20_000 {
        let mut d = captured[rng.gen_range(0..captured.len())].clone();
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(wire::HEADER_LEN.min(d.len() - 1)..d.len());
            d[i] = rng.gen();
        }
        // Keep the header's sequence moving so datagrams are not stale.
        d[5..9].copy_from_slice(&rng.gen::<u32>().to_le_bytes());
        let crc = {
            let mut h = crc32fast::Hasher::new();
            h.update(&d[..11]);
            h.update(&d[15..]);
            h.finalize()
        };
        d[11..15].copy_from_slice(&crc.to_le_bytes());
        now += 50;
        let _ = sw.handle_datagram_slice(now, 0, &d);
        sw.handle_timeout(now + 100);
        while sw.poll_transmit(now + 100, &mut buf).is_some() {}
        for vc in 0..2 {
            assert!(sw.input_occupancy(0, vc).unwrap() <= 8);
        }
    }
    let c = sw.counters();
    assert!(
        c.drops.total() > 0,
        "mutations must cause drops: {:?}",
        c.drops
    );
}

pub(crate) fn with_head(mut p: Vec<Flit>, f: impl Fn(&mut Head)) -> Vec<Flit> {
    f(p[0].head.as_mut().unwrap());
    p
}

/// A worm whose input port dies mid-packet is closed with a non-final tail
/// that frees its path hop by hop, with or without a recovery protocol:
/// otherwise every switch after the first keeps the VC held for a tail
/// that never comes.
#[test]
pub(crate) fn a_worm_cut_at_its_input_is_closed_all_the_way_down() {
    let mut net = chain(2, 1, Switching::Wormhole);
    let flits = packet(0, 1, 1, 4, 0);
    net.hosts[0].to_send.extend(flits[..2].iter().cloned());
    net.run_for(1_000_000);
    assert_eq!(net.hosts[1].received.len(), 2);
    net.switches[0].set_port_admin(0, false).unwrap();
    net.run_for(1_000_000);
    let got = &net.hosts[1].received;
    assert_eq!(got.len(), 3);
    assert!(got[2].kind.is_tail() && got[2].flags & flags::NON_FINAL_TAIL != 0);
    assert_eq!(got[2].seq, 2, "the tail says where the packet was cut");
    assert_eq!(net.switches[0].counters().truncated_packets, 1);
    for (s, sw) in net.switches.iter().enumerate() {
        for (i, vc) in sw.inputs.iter().enumerate() {
            assert_eq!(vc.state, InState::Idle, "switch {s} input VC {i}");
        }
    }
}
