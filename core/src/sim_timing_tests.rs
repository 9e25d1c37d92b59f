//! The timing model in the simulator (docs/performance.md, "The timing
//! model"): links serialise (one flit per flit time, no burst after idle
//! time), switches add their traversal latency, and the crossbar moves at
//! most one flit per input and output port per flit time.
//!
//! - Zero-load latency equals the analytical value exactly: a message of
//!   `n` flits over `H` links and `H − 1` switches takes
//!   `H × (propagation + flit time) + (H − 1) × traversal + (n − 1) × flit time`
//!   (each flit is received whole, one flit time after it started, before a
//!   switch works on it; the tail follows the head `n − 1` flit times later).
//! - No link carries more than its bandwidth over any window longer than a
//!   flit time, whatever the traffic.

use crate::host::endpoint::{HostConfig, HostEndpoint, HostEvent, InjectionVc};
use crate::host::source::{ArrivalProcess, MessageLength, OfferedLoad, SourceConfig};
use crate::host::traffic::TrafficPattern;
use crate::link::LinkConfig;
use crate::routing::RoutingTables;
use crate::sim::{build_fabric, shortest_path_lfts, Fabric, SimConfig};
use crate::switch::{Switch, SwitchTiming, Switching};
use crate::topology::generators::{kary_ntree, mesh_or_torus};
use crate::topology::{FaultSet, NodeRef, PortRef, Topology};
use crate::wire::{self, Item};
use std::collections::BTreeMap;

/// 10⁶ flits/s: one flit time is 1 µs.
const RATE: u64 = 1_000_000;
const FLIT_NS: u64 = 1_000;
const PROPAGATION_NS: u64 = 1_000;
/// The fabrics' default: four flit times.
const TRAVERSAL_NS: u64 = 4 * FLIT_NS;
const MESSAGE_FLITS: u32 = 8;

fn link() -> LinkConfig {
    LinkConfig {
        vcs: 2,
        buffer_depth: 16,
        bandwidth_flits_per_s: Some(RATE),
        propagation_ns: PROPAGATION_NS,
        keepalive_interval_ns: 1_000_000,
        dead_after_ns: 50_000_000,
        credit_coalesce_ns: 0,
        ..LinkConfig::default()
    }
}

fn host_template(source: SourceConfig) -> HostConfig {
    HostConfig {
        host: 0,
        hosts: 0,
        source,
        injection: InjectionVc::RoundRobin,
        link: link(),
        epoch: 1,
        seed: 1,
        record_trace: false,
    }
}

fn sim_config(host: HostConfig) -> SimConfig {
    SimConfig {
        host,
        switching: Switching::Wormhole,
        switch_timing: SwitchTiming {
            traversal_ns: TRAVERSAL_NS,
            crossbar_speedup: 1,
        },
        // The links' propagation delay is the whole wire time.
        wire_ns: 0,
    }
}

fn tables(topo: &Topology) -> RoutingTables {
    if topo.family.is_fat_tree() {
        crate::routing::registry::engine("dmodk")
            .unwrap()
            .route(topo, &FaultSet::none())
            .unwrap()
    } else {
        shortest_path_lfts(topo)
    }
}

/// The latency of one message of `MESSAGE_FLITS` flits from `src` to
/// `dst` in an otherwise idle fabric, and the links on its path.
fn one_message(topo: &Topology, tables: &RoutingTables, src: u32, dst: u32) -> (u64, u64) {
    let n = topo.num_hosts() as u32;
    let source = SourceConfig {
        pattern: TrafficPattern::Shift {
            shift: dst as i64 - src as i64,
        },
        load: OfferedLoad::FlitsPerSecond { rate: 1e4 },
        arrivals: ArrivalProcess::Constant,
        length: MessageLength::Fixed {
            flits: MESSAGE_FLITS,
        },
        max_packet_flits: MESSAGE_FLITS,
        max_messages: Some(1),
        ..SourceConfig::default()
    };
    let cfg = sim_config(host_template(source));
    let mut f = build_fabric(topo.clone(), tables, &cfg).unwrap();
    for h in 0..n {
        let mut c = cfg.host.clone();
        c.host = h;
        c.hosts = n;
        if h != src {
            c.source.max_messages = Some(0);
        }
        f.hosts[h as usize] = HostEndpoint::new(c).unwrap();
    }
    // Links train first; then the one message goes.
    f.wake_all();
    f.run_until(1_000_000);
    f.start(1_000_000);
    assert!(f.run_to_quiescence(100_000, 200_000, 100_000_000));
    let mut latencies = Vec::new();
    while let Some(e) = f.hosts[dst as usize].poll_event() {
        if let HostEvent::Delivered {
            src: s, latency_ns, ..
        } = e
        {
            assert_eq!(s, src);
            latencies.push(latency_ns);
        }
    }
    assert_eq!(latencies.len(), 1, "{src} -> {dst}");
    let links = topo.distances_from(NodeRef::Host(src), &FaultSet::none())[dst as usize]
        .expect("connected") as u64;
    (latencies[0], links)
}

/// The analytical zero-load latency of a message over `links` links.
fn analytical(links: u64) -> u64 {
    let switches = links - 1;
    links * (PROPAGATION_NS + FLIT_NS)
        + switches * TRAVERSAL_NS
        + (MESSAGE_FLITS as u64 - 1) * FLIT_NS
}

fn zero_load_latency_is_analytical(topo: Topology) {
    let tables = tables(&topo);
    let n = topo.num_hosts() as u32;
    let mut seen = BTreeMap::new();
    // Every distance the fabric has, from a few sources.
    for src in [0, n / 2 - 1, n - 1] {
        for dst in 0..n {
            if dst == src {
                continue;
            }
            let links = topo.distances_from(NodeRef::Host(src), &FaultSet::none())[dst as usize]
                .unwrap() as u64;
            if seen.get(&links).is_some_and(|&c: &u32| c >= 2) {
                continue;
            }
            let (latency, links) = one_message(&topo, &tables, src, dst);
            assert_eq!(
                latency,
                analytical(links),
                "{}: {src} -> {dst} over {links} links",
                topo.name
            );
            *seen.entry(links).or_insert(0) += 1;
        }
    }
    assert!(seen.len() >= 2, "{}: distances {seen:?}", topo.name);
}

#[test]
fn zero_load_latency_on_a_4_ary_2_tree_is_analytical() {
    zero_load_latency_is_analytical(kary_ntree(4, 2).unwrap());
}

#[test]
fn zero_load_latency_on_a_4_ary_3_tree_is_analytical() {
    zero_load_latency_is_analytical(kary_ntree(4, 3).unwrap());
}

#[test]
fn zero_load_latency_on_a_4x4_mesh_is_analytical() {
    zero_load_latency_is_analytical(mesh_or_torus(&[4, 4], false).unwrap());
}

/// Every flit's emulated start on each directed link, from the departure
/// stamps of the datagrams the fabric sent.
fn starts_per_link(f: &Fabric<Switch>) -> BTreeMap<PortRef, Vec<u64>> {
    let mut starts: BTreeMap<PortRef, Vec<u64>> = BTreeMap::new();
    for (_, from, data) in f.wire_log.as_deref().unwrap_or_default() {
        let frame = wire::decode_bytes(data.clone()).unwrap();
        let flits = frame
            .items
            .iter()
            .filter(|i| matches!(i, Item::Flit(_)))
            .count() as u64;
        if flits == 0 {
            continue;
        }
        let first = frame
            .items
            .iter()
            .find_map(|i| match i {
                Item::Extension {
                    code: wire::EXT_DEPARTURE,
                    body,
                } => wire::decode_departure(body),
                _ => None,
            })
            .expect("every datagram with flits on a paced link is stamped");
        let list = starts.entry(*from).or_default();
        list.extend((0..flits).map(|k| first + k * FLIT_NS));
    }
    starts
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(8))]
    /// Over random traffic (uniform or a random shift, offered up to 1.5×
    /// what a link carries), no link starts a flit less than one flit time
    /// after the previous one, so over any window of `m` flit times at
    /// most `m` flits start: accepted throughput never exceeds the link's
    /// bandwidth.
    #[test]
    fn no_link_carries_more_than_its_bandwidth(
        mesh in proptest::bool::ANY,
        load in 0.2f64..1.5,
        shift in proptest::option::of(1i64..8),
        length in 1u32..12,
        speedup in 1u8..3,
        seed in 0u64..1000,
    ) {
        let topo = if mesh {
            mesh_or_torus(&[3, 3], false).unwrap()
        } else {
            kary_ntree(2, 3).unwrap()
        };
        let source = SourceConfig {
            pattern: match shift {
                Some(s) => TrafficPattern::Shift { shift: s },
                None => TrafficPattern::Uniform,
            },
            load: OfferedLoad::FlitsPerSecond { rate: load * RATE as f64 },
            length: MessageLength::Uniform { min: 1, max: length },
            max_packet_flits: 4,
            duration_ns: Some(300_000),
            ..SourceConfig::default()
        };
        let mut host = host_template(source);
        host.seed = seed;
        // Stamps read in the ends' shared clock, as the daemons and
        // `flitctl sim` do, so that links record their arrival lateness.
        host.link.count_transit = true;
        let mut cfg = sim_config(host);
        cfg.switch_timing.crossbar_speedup = speedup;
        let tables = tables(&topo);
        let mut f = build_fabric(topo, &tables, &cfg).unwrap();
        f.wire_log = Some(Vec::new());
        f.start(0);
        proptest::prop_assert!(f.run_to_quiescence(100_000, 200_000, 50_000_000));
        let starts = starts_per_link(&f);
        proptest::prop_assert!(!starts.is_empty());
        let mut carried = 0;
        for (link, s) in &starts {
            carried += s.len();
            for w in s.windows(2) {
                proptest::prop_assert!(w[1] >= w[0] + FLIT_NS, "{link:?}: {} then {}", w[0], w[1]);
            }
            // The window form, for windows of 1..=16 flit times.
            for m in 1..=16u64 {
                let mut lo = 0;
                for hi in 0..s.len() {
                    while s[hi] >= s[lo] + m * FLIT_NS {
                        lo += 1;
                    }
                    proptest::prop_assert!((hi - lo + 1) as u64 <= m, "{link:?}: {} flits in {m} flit times", hi - lo + 1);
                }
            }
        }
        proptest::prop_assert!(carried > 0);
        // The simulator delivers every datagram when it is sent, so no
        // link ever reads a flit after its release time: the arrival
        // lateness the fidelity verdict judges live runs by is the
        // machine's, never the model's.
        let mut read = 0;
        let links = f
            .hosts
            .iter()
            .map(|h| h.link())
            .chain(f.switches.iter().flat_map(|s| (0..64).filter_map(|p| s.link(p).ok())));
        for l in links {
            read += l.arrival_lateness().count();
            proptest::prop_assert_eq!(l.arrival_lateness().max_ns(), 0);
        }
        proptest::prop_assert_eq!(read, carried as u64);
    }
}
