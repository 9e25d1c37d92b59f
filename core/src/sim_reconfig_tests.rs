//! Table swaps in a running fabric, through the deterministic simulator
//! ([`crate::sim`]): a 4-cube with one VC routed by e-cube loses a
//! switch-to-switch link, the controller swaps every switch to up*/down*
//! tables computed without it, and when the link is back, swaps back to
//! e-cube. Each routing function is deadlock-free alone; packets routed by
//! one at some switches and by the other at the next are not covered by
//! either proof.
//!
//! - *Live* swap: the tables go in while traffic flows, in every switch at
//!   the same instant (the kindest live swap: no two switches ever route
//!   new heads by different functions; only worms already under way mix
//!   them) or one switch after the other.
//! - *Quiesced* swap (what the controller does on non-fat-trees): every
//!   host holds injection ([`HostEndpoint::set_injection_paused`]), the
//!   fabric drains until every [`Switch::in_flight_flits`] and
//!   [`HostEndpoint::in_flight_flits`] is 0, the tables go in, injection
//!   resumes. No packet ever sees two routing functions.
//!
//! SBRP-2 is on, as in `sbrp2_routes_around_a_link_whose_errors_persist`
//! (tests/chaos.rs), whose live swap this models: without a recovery
//! protocol a worm cut by the dying link is never closed downstream (no
//! non-final tail), keeps an output VC with no flit behind it, and wedges
//! live and quiesced runs alike; with it every message is delivered.

use crate::host::endpoint::{HostConfig, HostEndpoint, InjectionVc};
use crate::host::message::split_message_id;
use crate::host::retained::ReleasePolicy;
use crate::host::source::{MessageLength, OfferedLoad, SourceConfig};
use crate::host::traffic::TrafficPattern;
use crate::link::LinkConfig;
use crate::mechanism::sbrp::{host::SbrpConfig, RecoveryProtocol};
use crate::routing::registry::engine;
use crate::routing::{RoutingTables, SwitchTable};
use crate::sim::{build_fabric, Fabric, SimConfig};
use crate::switch::{Switch, SwitchTiming, Switching};
use crate::topology::generators::hypercube;
use crate::topology::{FaultSet, NodeRef, PortRef, Topology};

/// How long a sender keeps a fully sent message for SBRP.
const HOLD_NS: u64 = 2_000_000;
/// No flit moved anywhere for this long while flits are in flight: the
/// fabric is wedged (nothing in it waits on a timer: a blocked worm only
/// moves when another one does).
const WEDGE_NS: u64 = 2_000_000;
/// Bound on a quiesced drain.
const DRAIN_LIMIT_NS: u64 = 2_000_000;

/// How the controller puts new tables in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Swap {
    /// While traffic flows, switch after switch, `stagger_ns` apart.
    Live { stagger_ns: u64 },
    /// Hold injection, drain, install, resume.
    Quiesced,
}

/// One run's parameters.
#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    /// Message length, flits (one packet per message).
    flits: (u32, u32),
    /// Offered load per host, flits/s (links carry 50 Mflit/s).
    rate: f64,
    /// The switch end of the link that dies.
    link: PortRef,
    kill_ns: u64,
    /// From the kill (and from the link being up again) to the swap.
    react_ns: u64,
    restore_ns: u64,
    /// Sources stop generating.
    stop_ns: u64,
    protocol: RecoveryProtocol,
}

/// A wedged fabric, as found.
#[derive(Clone, Debug)]
struct Wedge {
    /// The last flit moved then.
    since_ns: u64,
    at_ns: u64,
    /// Flits in flight (every switch's and host's count summed).
    in_flight: u64,
    /// Flits buffered in switch inputs.
    buffered: usize,
    /// Messages not yet fully sent (source queues).
    queued_messages: usize,
    /// Input VCs (switch, port) each waiting for the next.
    cycle: Option<Vec<(usize, usize)>>,
}

/// What a quiesced swap cost.
#[derive(Clone, Copy, Debug)]
struct Quiesce {
    drain_ns: u64,
    in_flight_at_pause: u64,
}

#[derive(Debug)]
struct Outcome {
    wedge: Option<Wedge>,
    /// When each swap was complete (tables in every switch).
    swapped_at: Vec<u64>,
    quiesces: Vec<Quiesce>,
}

fn host_cfg(case: &Case) -> HostConfig {
    let (min, max) = case.flits;
    HostConfig {
        host: 0,
        hosts: 0,
        source: SourceConfig {
            pattern: TrafficPattern::Uniform,
            load: OfferedLoad::FlitsPerSecond { rate: case.rate },
            length: if min == max {
                MessageLength::Fixed { flits: min }
            } else {
                MessageLength::Uniform { min, max }
            },
            max_packet_flits: max,
            payload_bytes: 8,
            queue_capacity: 64,
            duration_ns: Some(case.stop_ns),
            release: if case.protocol.is_on() {
                ReleasePolicy::HoldFor { hold_ns: HOLD_NS }
            } else {
                ReleasePolicy::WhenSent
            },
            ..SourceConfig::default()
        },
        injection: InjectionVc::Fixed { vc: 0 },
        link: LinkConfig {
            vcs: 1,
            buffer_depth: 4,
            bandwidth_flits_per_s: Some(50_000_000),
            propagation_ns: 0,
            keepalive_interval_ns: 200_000,
            dead_after_ns: 50_000_000,
            credit_coalesce_ns: 0,
            retrain_ns: 300_000,
            ..LinkConfig::default()
        },
        epoch: 1,
        seed: case.seed,
        record_trace: true,
    }
}

fn tables(name: &str, topo: &Topology, faults: &FaultSet) -> RoutingTables {
    engine(name).unwrap().route(topo, faults).unwrap()
}

/// Flits that left any switch or reached any host so far: the progress
/// measure of the wedge detector (keepalives go on in a wedged fabric).
fn flit_moves(f: &Fabric<Switch>) -> u64 {
    let switches: u64 = f
        .switches
        .iter()
        .flat_map(|s| &s.counters().ports)
        .flat_map(|p| &p.vcs)
        .map(|v| v.tx_flits)
        .sum();
    let hosts: u64 = f
        .hosts
        .iter()
        .map(|h| h.sink().stats().received_flits)
        .sum();
    switches + hosts
}

fn in_flight(f: &Fabric<Switch>) -> u64 {
    let s: u64 = f.switches.iter().map(Switch::in_flight_flits).sum();
    let h: u64 = f.hosts.iter().map(HostEndpoint::in_flight_flits).sum();
    s + h
}

fn wedge_report(f: &Fabric<Switch>, tables: &[SwitchTable], since_ns: u64) -> Wedge {
    let buffered = f
        .switches
        .iter()
        .flat_map(|sw| (0..sw.config().radix).map(|p| sw.input_occupancy(p as u16, 0)))
        .map(|n| n.unwrap_or(0))
        .sum();
    Wedge {
        since_ns,
        at_ns: f.now(),
        in_flight: in_flight(f),
        buffered,
        queued_messages: f.hosts.iter().map(|h| h.source().queued()).sum(),
        cycle: wait_cycle(f, tables),
    }
}

/// What input VC (switch, port) of a stuck fabric waits for: the input
/// VC whose progress would unblock it (VC 0 only: the fabric has one).
/// An active packet with flits waits for credits, i.e. for the input it
/// feeds downstream; an active packet without flits waits for its
/// upstream; a head waits for the input holding the output VC it is
/// routed to (by `tables`, what each switch holds now).
fn waits_for(
    f: &Fabric<Switch>,
    tables: &[SwitchTable],
    s: usize,
    i: usize,
) -> Option<(usize, usize)> {
    use crate::switch::input::InState;
    let sw = &f.switches[s];
    let states = sw.input_states();
    let radix = sw.config().radix;
    let owner = |t: usize, out: usize| {
        f.switches[t]
            .input_states()
            .iter()
            .position(|(st, _)| matches!(st, InState::Active { out: o, .. } if *o as usize == out))
    };
    let downstream = |out: usize| match f.topo.peer(PortRef::switch(s as u32, out as u16))?.node {
        NodeRef::Switch(t) => Some((
            t as usize,
            f.topo.peer(PortRef::switch(s as u32, out as u16))?.port as usize,
        )),
        NodeRef::Host(_) => None,
    };
    let (state, front) = states[i];
    match (state, front) {
        (InState::Active { out, .. }, Some(_)) => {
            if sw.link(out).ok()?.credits(0) > 0 {
                return None;
            }
            downstream(out as usize)
        }
        (InState::Active { .. }, None) if i < radix => {
            let up = f.topo.peer(PortRef::switch(s as u32, i as u16))?;
            let NodeRef::Switch(u) = up.node else {
                return None;
            };
            owner(u as usize, up.port as usize).map(|j| (u as usize, j))
        }
        (InState::Idle, Some(fl)) => {
            let out = tables[s].lookup(fl.head.as_ref()?.dst)? as usize;
            match owner(s, out) {
                Some(j) => Some((s, j)),
                None if sw.link(out as u16).ok()?.credits(0) == 0 => downstream(out),
                None => None,
            }
        }
        _ => None,
    }
}

/// A cycle of input VCs each waiting for the next, if the stuck fabric
/// has one: a deadlock, not a packet left open or a slow drain.
fn wait_cycle(f: &Fabric<Switch>, tables: &[SwitchTable]) -> Option<Vec<(usize, usize)>> {
    for s in 0..f.switches.len() {
        for i in 0..f.switches[s].input_states().len() {
            // Follow the waits from (s, i); a cycle shows within as many
            // steps as there are inputs.
            let mut at = (s, i);
            let mut seen = vec![at];
            while let Some(next) = waits_for(f, tables, at.0, at.1) {
                if let Some(k) = seen.iter().position(|&x| x == next) {
                    return Some(seen[k..].to_vec());
                }
                seen.push(next);
                at = next;
            }
        }
    }
    None
}

/// Runs to `until`, watching for a wedge (no flit moved for [`WEDGE_NS`]
/// while some are in flight).
fn run_watching(
    f: &mut Fabric<Switch>,
    tables: &[SwitchTable],
    until: u64,
    last: &mut (u64, u64),
) -> Option<Wedge> {
    while f.now() < until {
        let t = (f.now() + 20_000).min(until);
        f.run_until(t);
        let moves = flit_moves(f);
        if moves != last.0 || in_flight(f) == 0 {
            *last = (moves, f.now());
        } else if f.now() - last.1 >= WEDGE_NS {
            return Some(wedge_report(f, tables, last.1));
        }
    }
    None
}

/// Sets both ends of the link at `end` up or down (the controller's
/// `set-port` to both switches).
fn set_link(f: &mut Fabric<Switch>, end: PortRef, up: bool) {
    let peer = f.topo.peer(end).expect("a cabled port");
    for e in [end, peer] {
        let NodeRef::Switch(s) = e.node else {
            panic!("kill a switch-to-switch link")
        };
        f.switches[s as usize].set_port_admin(e.port, up).unwrap();
    }
}

/// Puts `rt` in every switch, live or quiesced.
fn swap(
    f: &mut Fabric<Switch>,
    installed: &mut [SwitchTable],
    rt: &RoutingTables,
    how: Swap,
    q: &mut Vec<Quiesce>,
) {
    match how {
        Swap::Live { stagger_ns } => {
            for (s, table) in installed.iter_mut().enumerate() {
                if s > 0 && stagger_ns > 0 {
                    let t = f.now() + stagger_ns;
                    f.run_until(t);
                }
                f.switches[s].install_table(rt.switches[s].clone(), rt.vc_policy(s).clone());
                *table = rt.switches[s].clone();
            }
        }
        Swap::Quiesced => {
            let start = f.now();
            for h in &mut f.hosts {
                h.set_injection_paused(start, true);
            }
            let in_flight_at_pause = in_flight(f);
            while in_flight(f) > 0 {
                assert!(
                    f.now() - start < DRAIN_LIMIT_NS,
                    "the quiesced fabric did not drain: {:?}",
                    wedge_report(f, installed, f.now())
                );
                let t = f.now() + 1_000;
                f.run_until(t);
            }
            q.push(Quiesce {
                drain_ns: f.now() - start,
                in_flight_at_pause,
            });
            for (s, sw) in f.switches.iter_mut().enumerate() {
                sw.install_table(rt.switches[s].clone(), rt.vc_policy(s).clone());
                installed[s] = rt.switches[s].clone();
            }
            let now = f.now();
            for h in &mut f.hosts {
                h.set_injection_paused(now, false);
            }
        }
    }
    f.wake_all();
}

/// E-cube; at `kill_ns` the link dies and, `react_ns` later, the fabric is
/// swapped to up*/down* without it; at `restore_ns` the link comes back
/// and, once both ends are up and `react_ns` later, e-cube again. Then
/// runs until every host is done, or the fabric wedges.
fn run(case: &Case, how: Swap) -> (Fabric<Switch>, Outcome) {
    let topo = hypercube(4).unwrap();
    let link = topo.link_at(case.link).expect("a cabled port");
    let ecube = tables("ecube", &topo, &FaultSet::none());
    let updown = tables("updown", &topo, &FaultSet::with_links([link]));
    let cfg = SimConfig {
        host: host_cfg(case),
        switching: Switching::Wormhole,
        switch_timing: SwitchTiming::default(),
        wire_ns: 100,
    };
    let mut f = build_fabric(topo, &ecube, &cfg).unwrap();
    if case.protocol.is_on() {
        let sbrp = SbrpConfig {
            protocol: case.protocol,
            resend_delay_ns: 2_000,
            report_delay_ns: 0,
            switch_report_delay_ns: 0,
            nft_wait_ns: 100_000,
            max_receiver_rrqs: 8,
            gap_wait_ns: None,
        };
        for h in &mut f.hosts {
            h.set_recovery(sbrp.clone()).unwrap();
        }
        for s in &mut f.switches {
            s.set_recovery(case.protocol);
        }
    }
    let mut quiesces = Vec::new();
    let mut installed = ecube.switches.clone();
    let mut last = (0, 0);
    let mut swapped_at = Vec::new();
    f.start(0);
    macro_rules! watch {
        ($until:expr) => {
            if let Some(w) = run_watching(&mut f, &installed, $until, &mut last) {
                let o = Outcome {
                    wedge: Some(w),
                    swapped_at,
                    quiesces,
                };
                return (f, o);
            }
        };
    }
    watch!(case.kill_ns);
    set_link(&mut f, case.link, false);
    watch!(case.kill_ns + case.react_ns);
    swap(&mut f, &mut installed, &updown, how, &mut quiesces);
    swapped_at.push(f.now());
    watch!(case.restore_ns);
    set_link(&mut f, case.link, true);
    let peer = f.topo.peer(case.link).unwrap();
    let up = |f: &Fabric<Switch>| {
        [case.link, peer].iter().all(|e| {
            let NodeRef::Switch(s) = e.node else {
                unreachable!()
            };
            f.switches[s as usize].link(e.port).unwrap().is_up()
        })
    };
    while !up(&f) {
        assert!(
            f.now() < case.restore_ns + 10_000_000,
            "the link stays down"
        );
        let t = f.now() + 1_000;
        watch!(t);
    }
    let t = f.now() + case.react_ns;
    watch!(t);
    swap(&mut f, &mut installed, &ecube, how, &mut quiesces);
    swapped_at.push(f.now());
    // Until every host is done (SBRP included) and nothing is in flight.
    let limit = case.stop_ns + 100_000_000;
    loop {
        let t = f.now() + 50_000;
        watch!(t);
        let busy = f
            .hosts
            .iter()
            .any(|h| !h.is_drained() || h.recovery_in_progress() > 0);
        if !busy && in_flight(&f) == 0 {
            break;
        }
        assert!(
            f.now() < limit,
            "neither done nor wedged: {:?}",
            wedge_report(&f, &installed, f.now())
        );
    }
    let o = Outcome {
        wedge: None,
        swapped_at,
        quiesces,
    };
    (f, o)
}

/// Every message fully sent was delivered exactly once, in order per flow;
/// every generated message was sent; nothing is in flight; no credit was
/// overcommitted anywhere. Returns the messages delivered.
fn check_delivered(f: &mut Fabric<Switch>, name: &str) -> u64 {
    // Past the hold window, so that every sender may release.
    let end = f.now() + HOLD_NS + 1_000_000;
    f.run_until(end);
    assert_eq!(in_flight(f), 0, "{name}");
    let n = f.hosts.len();
    let mut delivered = 0;
    for (me, h) in f.hosts.iter().enumerate() {
        let r = h.report();
        assert!(h.is_drained(), "{name}: host {me}");
        assert_eq!(r.retained, 0, "{name}: host {me} still retains messages");
        assert_eq!(r.sink.duplicate_messages, 0, "{name}: host {me}");
        assert_eq!(r.sink.corrupted_messages, 0, "{name}: host {me}");
        assert_eq!(r.sink.out_of_order_messages, 0, "{name}: host {me}");
        assert_eq!(r.partial_messages, 0, "{name}: host {me}");
        let sent: u64 = r.sent_to.values().sum();
        assert_eq!(sent, r.source.generated_messages, "{name}: host {me}");
        let mut per_src = vec![Vec::new(); n];
        for d in h.delivery_trace() {
            let (dst, seq) = split_message_id(d.msg);
            assert_eq!(dst as usize, me, "{name}");
            per_src[d.src as usize].push(seq as u64);
        }
        for (src, seqs) in per_src.iter().enumerate() {
            let sent = f.hosts[src]
                .source()
                .sent_to()
                .get(&(me as u32))
                .copied()
                .unwrap_or(0);
            assert_eq!(
                seqs,
                &(0..sent).collect::<Vec<_>>(),
                "{name}: flow {src} -> {me}"
            );
            delivered += sent;
        }
    }
    for (s, sw) in f.switches.iter().enumerate() {
        for p in 0..sw.config().radix {
            let l = sw.link(p as u16).unwrap();
            assert_eq!(l.stats().rx_overflow, 0, "{name}: switch {s} port {p}");
        }
    }
    delivered
}

/// The 4-cube's link between switches 5 and 7 (dimension 1, port 2).
fn r05_2() -> PortRef {
    PortRef::switch(5, 2)
}

/// A run whose live swap wedges the fabric, found by
/// [`search_live_wedges`] (most runs do not wedge: 1 in the 96 runs of
/// `SEEDS=12` with serialising links). Up to the wedge, and so the wedge itself, does not
/// depend on `stop_ns`; the quiesced run with the same parameters is
/// identical up to the first swap.
fn wedging_case() -> Case {
    Case {
        seed: 5,
        flits: (32, 32),
        rate: 3e7,
        link: r05_2(),
        kill_ns: 70_000,
        react_ns: 5_000,
        restore_ns: 170_000,
        stop_ns: 320_000,
        protocol: RecoveryProtocol::Sbrp2,
    }
}

/// Why the controller quiesces: swapped live, the tables of every switch
/// changing at one instant, the 4-cube wedges after the swap back from
/// up*/down* to e-cube. Worms routed partly by one function and blocked
/// on a channel of the other form a cycle of input VCs each waiting for
/// the next; no flit moves again.
#[test]
fn a_live_swap_between_updown_and_ecube_wedges_the_4_cube() {
    let (f, o) = run(&wedging_case(), Swap::Live { stagger_ns: 0 });
    let w = o.wedge.clone().unwrap_or_else(|| panic!("no wedge: {o:?}"));
    assert_eq!(o.swapped_at.len(), 2, "{o:?}");
    assert!(
        w.since_ns > o.swapped_at[1],
        "wedged after the swap back: {w:?} {o:?}"
    );
    assert!(w.at_ns - w.since_ns >= WEDGE_NS, "{w:?}");
    assert!(w.in_flight > 0 && w.buffered > 0, "{w:?}");
    assert!(w.queued_messages > 0, "the senders are held up: {w:?}");
    eprintln!("live: {w:?}, swaps complete at {:?}", o.swapped_at);
    let cycle = w.cycle.as_ref().expect("a cycle of waits");
    let switches: std::collections::BTreeSet<usize> = cycle.iter().map(|&(s, _)| s).collect();
    assert!(switches.len() >= 3, "{cycle:?}");
    // Still stuck: the same flits, nothing delivered.
    let mut f = f;
    let (moves, stuck) = (flit_moves(&f), in_flight(&f));
    let t = f.now() + 1_000_000;
    f.run_until(t);
    assert_eq!((flit_moves(&f), in_flight(&f)), (moves, stuck));
}

/// The same run with quiesced swaps: injection held, the fabric drains to
/// zero flits in flight within microseconds, the tables go in, injection
/// resumes. No wedge, and every message is delivered exactly once and in
/// order (SBRP-2 resends what the dying link cut).
#[test]
fn a_quiesced_swap_on_the_same_run_delivers_every_message_once() {
    let (mut f, o) = run(&wedging_case(), Swap::Quiesced);
    assert!(o.wedge.is_none(), "{o:?}");
    assert_eq!(o.quiesces.len(), 2, "{o:?}");
    for q in &o.quiesces {
        assert!(q.in_flight_at_pause > 0, "nothing to drain: {o:?}");
        assert!(q.drain_ns <= 100_000, "{o:?}");
    }
    let delivered = check_delivered(&mut f, "quiesced");
    let cut: u64 = f
        .switches
        .iter()
        .map(|s| s.sbrp_counters().cut_packets)
        .sum();
    let resent: u64 = f.hosts.iter().map(|h| h.sbrp_stats().resent_packets).sum();
    assert!(cut > 0 && resent > 0, "the dying link cut nothing");
    assert!(delivered > 1_000, "{delivered}");
    eprintln!("quiesced: {o:?}, {delivered} messages delivered, {cut} cut, {resent} resent");
}

/// How [`wedging_case`] was found: live swaps (all switches at once, or
/// `STAGGER` ns apart) over a grid of seeds, loads, message lengths and
/// kill times; prints every wedge with its cycle of waits.
#[test]
#[ignore = "search: cargo test --release -p flitnet-core -- --ignored --nocapture search_live_wedges"]
fn search_live_wedges() {
    let env = |k: &str, d: u64| std::env::var(k).map_or(d, |s| s.parse().unwrap());
    let (seeds, stagger_ns) = (env("SEEDS", 25), env("STAGGER", 0));
    let (mut runs, mut found) = (0, 0);
    for seed in 1..=seeds {
        for rate in [2e7, 3e7] {
            for flits in [(16, 32), (32, 32)] {
                for kill_ns in [40_000, 70_000] {
                    let case = Case {
                        seed,
                        flits,
                        rate,
                        link: r05_2(),
                        kill_ns,
                        react_ns: 5_000,
                        restore_ns: kill_ns + 100_000,
                        stop_ns: kill_ns + 250_000,
                        protocol: RecoveryProtocol::Sbrp2,
                    };
                    runs += 1;
                    if let (_, Outcome { wedge: Some(w), .. }) =
                        run(&case, Swap::Live { stagger_ns })
                    {
                        found += 1;
                        eprintln!("wedge: {case:?}: {w:?}");
                    }
                }
            }
        }
    }
    eprintln!("{found} wedges in {runs} runs");
}
