//! Load–throughput–latency curves of a fabric in the simulator (the
//! `flitctl bench saturation` measurement, docs/performance.md
//! "Saturation"): every host offers Poisson traffic at a fraction of its
//! link's bandwidth; after a warm-up, the flits delivered in a measurement
//! window give the accepted throughput and the messages delivered in it
//! their latency percentiles (from generation, source queueing included,
//! as in Dally and Towles, "Principles and Practices of Interconnection
//! Networks").

use flitnet_core::control::{FabricParams, LinkDriver};
use flitnet_core::host::endpoint::{HostConfig, HostEvent, InjectionVc};
use flitnet_core::host::source::{ArrivalProcess, MessageLength, OfferedLoad, SourceConfig};
use flitnet_core::host::traffic::TrafficPattern;
use flitnet_core::routing::RoutingTables;
use flitnet_core::sim::{build_fabric, SimConfig, SimError};
use flitnet_core::switch::Switching;
use flitnet_core::topology::Topology;

/// One load point's set-up.
#[derive(Clone, Debug)]
pub struct LoadPointSpec {
    pub params: FabricParams,
    pub pattern: TrafficPattern,
    /// Offered load per host, as a fraction of the link bandwidth.
    pub load: f64,
    pub message_flits: u32,
    pub injection: InjectionVc,
    pub warmup_ns: u64,
    pub measure_ns: u64,
    pub seed: u64,
}

/// What one load point measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadPoint {
    pub offered: f64,
    /// Flits delivered per host per flit time in the window (1 = every
    /// host's ejection link busy all the time).
    pub accepted: f64,
    /// Messages delivered in the window and their latency p50/p99, ns.
    pub messages: u64,
    pub latency_p50_ns: u64,
    pub latency_p99_ns: u64,
}

/// Why a load point could not run.
#[derive(Debug, thiserror::Error)]
pub enum SaturationError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("the fabric needs a link bandwidth (flits per second) to measure a load against")]
    Unpaced,
}

/// Runs one load point of `topo` routed by `tables`.
pub fn load_point(
    topo: &Topology,
    tables: &RoutingTables,
    spec: &LoadPointSpec,
) -> Result<LoadPoint, SaturationError> {
    let p = &spec.params;
    let rate = p.bandwidth_flits_per_s.ok_or(SaturationError::Unpaced)?;
    // The simulator shares one clock but hands datagrams over at once: no
    // transit time to count, no batching.
    let driver = LinkDriver {
        count_transit: false,
        pacing_quantum_ns: 0,
    };
    let host = HostConfig {
        host: 0,
        hosts: 0,
        source: SourceConfig {
            pattern: spec.pattern.clone(),
            load: OfferedLoad::Fraction {
                fraction: spec.load,
                link_flits_per_s: rate as f64,
            },
            arrivals: ArrivalProcess::Poisson,
            length: MessageLength::Fixed {
                flits: spec.message_flits,
            },
            max_packet_flits: p.max_packet_flits,
            payload_bytes: p.flit_payload as usize,
            duration_ns: Some(spec.warmup_ns + spec.measure_ns),
            ..SourceConfig::default()
        },
        injection: spec.injection,
        link: p.link_config(&driver),
        epoch: 1,
        seed: spec.seed,
        record_trace: false,
    };
    let cfg = SimConfig {
        host,
        switching: match p.switching {
            flitnet_core::control::SwitchingMode::Wormhole => Switching::Wormhole,
            flitnet_core::control::SwitchingMode::VirtualCutThrough => Switching::VirtualCutThrough,
        },
        switch_timing: p.switch_timing(),
        wire_ns: 0,
    };
    let mut f = build_fabric(topo.clone(), tables, &cfg)?;
    // Links train before traffic starts.
    f.wake_all();
    let t0 = 1_000_000;
    f.run_until(t0);
    f.start(t0);
    let from = t0 + spec.warmup_ns;
    let to = from + spec.measure_ns;
    f.run_until(from);
    let delivered = |f: &flitnet_core::sim::Fabric<flitnet_core::switch::Switch>| -> u64 {
        f.hosts
            .iter()
            .map(|h| h.sink().stats().received_flits)
            .sum()
    };
    for h in &mut f.hosts {
        while h.poll_event().is_some() {}
    }
    let before = delivered(&f);
    let mut latencies = Vec::new();
    // In steps, so that the hosts' bounded event queues never overflow.
    let step = 20_000;
    let mut now = from;
    while now < to {
        now = (now + step).min(to);
        f.run_until(now);
        for h in &mut f.hosts {
            while let Some(e) = h.poll_event() {
                if let HostEvent::Delivered { latency_ns, .. } = e {
                    latencies.push(latency_ns);
                }
            }
        }
    }
    let carried = delivered(&f) - before;
    let hosts = topo.num_hosts() as f64;
    let capacity = hosts * rate as f64 * spec.measure_ns as f64 / 1e9;
    // Exact order statistics of one run's latencies: a sort is all it takes.
    latencies.sort_unstable();
    let pct = |q: f64| -> u64 {
        if latencies.is_empty() {
            return 0;
        }
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len());
        latencies[i - 1]
    };
    Ok(LoadPoint {
        offered: spec.load,
        accepted: carried as f64 / capacity,
        messages: latencies.len() as u64,
        latency_p50_ns: pct(0.50),
        latency_p99_ns: pct(0.99),
    })
}

/// The fabric the saturation curves of docs/performance.md use: links of
/// 10⁶ flits/s (1 µs per flit) with 1 µs propagation, 2 VCs × 16 flits,
/// 8-flit packets, the default switch (4 flit times, no speedup).
pub fn reference_params() -> FabricParams {
    FabricParams {
        vcs: 2,
        buffer_depth: 16,
        bandwidth_flits_per_s: Some(1_000_000),
        propagation_ns: 1_000,
        keepalive_interval_ns: 10_000_000,
        dead_after_ns: 100_000_000,
        max_packet_flits: 8,
        ..FabricParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::topology::generators::kary_ntree;
    use flitnet_core::topology::FaultSet;

    fn spec(load: f64) -> LoadPointSpec {
        LoadPointSpec {
            params: reference_params(),
            pattern: TrafficPattern::Uniform,
            load,
            message_flits: 8,
            injection: InjectionVc::RoundRobin,
            warmup_ns: 200_000,
            measure_ns: 400_000,
            seed: 3,
        }
    }

    #[test]
    fn light_load_is_carried_and_overload_saturates_below_the_offer() {
        let topo = kary_ntree(2, 2).unwrap();
        let tables = flitnet_core::routing::registry::engine("dmodk")
            .unwrap()
            .route(&topo, &FaultSet::none())
            .unwrap();
        let light = load_point(&topo, &tables, &spec(0.1)).unwrap();
        assert!(
            (light.accepted - 0.1).abs() < 0.05,
            "accepted {} at 0.1",
            light.accepted
        );
        assert!(light.messages > 0 && light.latency_p50_ns <= light.latency_p99_ns);
        let over = load_point(&topo, &tables, &spec(1.0)).unwrap();
        assert!(over.accepted < 0.95, "accepted {} at 1.0", over.accepted);
        assert!(over.accepted > light.accepted);
        assert!(over.latency_p50_ns > light.latency_p50_ns);
    }
}
