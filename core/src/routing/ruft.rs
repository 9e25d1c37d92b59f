//! Interval routing on a RUFT, the Reduced Unidirectional Fat-Tree (seed 000
//! §2.2, thesis §5.2–§5.3), with FT²EI's exclusion intervals.
//!
//! At stage s a packet leaves through output `d_s` (port `k + d_s`), the
//! destination's s-th base-k digit; every pair has exactly one path. As
//! interval routing, output j of a stage-s switch owns the destinations
//! whose digit s is j: `k^(n−1−s)` intervals of `k^s` NIDs each (one
//! interval at the top stage, whose outputs are the long links to hosts).
//!
//! A failed link has no alternative (RUFT has no path diversity), so FT²EI
//! can only exclude: the switch feeding it excludes every destination of
//! that output, and packets for them are dropped there at once instead of
//! waiting for a link that will never take them. [`ruft_exclusions`] is the
//! same rule the switches apply dynamically
//! ([`crate::mechanism::ft2ei_dyn`]).

use super::tables::{Interval, IntervalTable, PortIntervals, RoutingTables, SwitchTable};
use crate::topology::{FaultSet, HostId, NodeRef, PortNo, Topology};

/// Output port of output `j` of a RUFT switch (inputs are `0..k`).
pub fn output_port(k: u32, j: u32) -> PortNo {
    (k + j) as PortNo
}

/// Stage of switch `sw` in a k-ary n-RUFT (`k^(n−1)` switches per stage).
pub fn stage(k: u32, n: u32, sw: u32) -> u32 {
    sw / k.pow(n - 1)
}

/// Digit `s` of destination `d` (base k, digit 0 lowest).
pub fn digit(k: u32, d: HostId, s: u32) -> u32 {
    (d / k.pow(s)) % k
}

/// The destinations whose digit `s` is `j`, as intervals in NID order.
pub fn digit_intervals(k: u32, n: u32, s: u32, j: u32) -> Vec<Interval> {
    let run = k.pow(s);
    (0..k.pow(n - 1 - s))
        .map(|high| {
            let lo = high * run * k + j * run;
            Interval {
                lo,
                hi: lo + run - 1,
            }
        })
        .collect()
}

/// Per switch, the outputs whose link `faults` failed (the link's sending
/// end is that switch's output): all their destinations are excluded.
pub fn ruft_exclusions(topo: &Topology, faults: &FaultSet) -> Vec<Vec<PortNo>> {
    let mut dead = vec![Vec::new(); topo.num_switches()];
    for (id, link) in topo.links.iter().enumerate() {
        if faults.link_alive(topo, id as u32) {
            continue;
        }
        if let NodeRef::Switch(s) = link.a.node {
            dead[s as usize].push(link.a.port);
        }
    }
    dead
}

/// The interval tables of a k-ary n-RUFT without the failed links of
/// `faults` (their destinations excluded at the switch feeding them).
pub fn ruft_tables(
    topo: &Topology,
    k: u32,
    n: u32,
    faults: &FaultSet,
    engine: &str,
) -> RoutingTables {
    let dead = ruft_exclusions(topo, faults);
    let switches = (0..topo.num_switches() as u32)
        .map(|sw| {
            let s = stage(k, n, sw);
            let ports = (0..k)
                .map(|j| {
                    let port = output_port(k, j);
                    let include = digit_intervals(k, n, s, j);
                    let exclude = if dead[sw as usize].contains(&port) {
                        include.clone()
                    } else {
                        Vec::new()
                    };
                    PortIntervals {
                        port,
                        include,
                        exclude,
                    }
                })
                .collect();
            SwitchTable::Intervals(IntervalTable { ports })
        })
        .collect();
    RoutingTables {
        engine: engine.to_string(),
        switches,
        vcs: 1,
        vc_policy: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckOptions};
    use crate::topology::generators::ruft;
    use crate::topology::PortRef;

    /// Follows the tables from `src` to `dst`: the hosts reached, in order.
    fn walk(topo: &Topology, t: &RoutingTables, src: HostId, dst: HostId) -> Option<usize> {
        let mut at = topo.peer(PortRef::host(src, 0))?;
        for hops in 1..=topo.num_switches() + 1 {
            let NodeRef::Switch(s) = at.node else {
                return (at.node == NodeRef::Host(dst)).then_some(hops);
            };
            let out = t.switches[s as usize].lookup(dst)?;
            at = topo.peer(PortRef::switch(s, out))?;
        }
        None
    }

    #[test]
    fn every_pair_has_its_one_path_of_n_switches() {
        for (k, n) in [(2, 1), (2, 3), (4, 2), (3, 3)] {
            let topo = ruft(k, n).unwrap();
            let t = ruft_tables(&topo, k, n, &FaultSet::none(), "ft2ei");
            for s in 0..topo.num_hosts() as u32 {
                for d in 0..topo.num_hosts() as u32 {
                    assert_eq!(
                        walk(&topo, &t, s, d),
                        Some(n as usize + 1),
                        "{k}-ary {n}: {s} -> {d}"
                    );
                }
            }
            let opts = CheckOptions {
                deadlock: true,
                ..CheckOptions::default()
            };
            let report = check(&topo, &FaultSet::none(), &t, &opts);
            assert!(report.is_ok(), "{k}-ary {n}: {report:?}");
        }
    }

    #[test]
    fn a_failed_link_excludes_exactly_the_destinations_behind_it() {
        let (k, n) = (4, 2);
        let topo = ruft(k, n).unwrap();
        // Output 2 of stage-0 switch 1 (port 6): the link to ⟨1, 2⟩.
        let l = topo.link_at(PortRef::switch(1, 6)).unwrap();
        let faults = FaultSet::with_links([l]);
        let t = ruft_tables(&topo, k, n, &faults, "ft2ei");
        let report = check(&topo, &faults, &t, &CheckOptions::default());
        assert!(report.is_ok(), "cut pairs are the topology's: {report:?}");
        for s in 0..16 {
            for d in 0..16 {
                // Sources on switch 1 (q_1 = 1) to destinations with d_0 = 2.
                let cut = s / 4 == 1 && d % 4 == 2;
                assert_eq!(walk(&topo, &t, s, d).is_none(), cut, "{s} -> {d}");
            }
        }
    }

    #[test]
    fn digit_intervals_partition_the_destinations() {
        for (k, n) in [(2u32, 3u32), (4, 2), (3, 3)] {
            for s in 0..n {
                let mut seen = vec![0; k.pow(n) as usize];
                for j in 0..k {
                    for iv in digit_intervals(k, n, s, j) {
                        for d in iv.lo..=iv.hi {
                            assert_eq!(digit(k, d, s), j);
                            seen[d as usize] += 1;
                        }
                    }
                }
                assert!(seen.iter().all(|&c| c == 1));
            }
        }
    }
}
