//! Minimal adaptive routing with an escape channel (Duato's protocol; seed
//! 003 §4.2 R7/R8, seed 004 §3.1): the candidates for a destination are all
//! minimal directions (every unaligned dimension, both ways on a torus tie;
//! every differing bit on a hypercube), and the escape port is the DOR /
//! e-cube port.
//!
//! VC layout (the data plane's contract): the escape VCs come first — VC 0
//! on meshes and hypercubes, VCs 0–1 with Dally–Seitz datelines on tori —
//! and the adaptive VC is the next one. Deadlock freedom rests on the escape
//! function alone being connected and acyclic, which is what the checker
//! verifies for adaptive tables. Like DOR, the tables ignore faults.

use super::dor::{dor_port, Grid};
use super::ecube::{cube_dimension, cube_port, ecube_port};
use super::tables::{AdaptiveEntry, AdaptiveTable, RoutingTables, SwitchTable, VcPolicy};
use super::{RoutingEngine, RoutingError};
use crate::topology::generators::DIRECT_HOST_PORT;
use crate::topology::{Family, FaultSet, HostId, PortNo, SwitchId, Topology};

const NAME: &str = "adaptive-escape";

/// The entry at the destination's own router: deliver.
fn eject() -> AdaptiveEntry {
    AdaptiveEntry {
        candidates: vec![DIRECT_HOST_PORT],
        escape: Some(DIRECT_HOST_PORT),
        misroute: Vec::new(),
    }
}

/// Mesh/torus entry at router `sw` for host `dest`.
pub fn grid_entry(grid: &Grid, sw: SwitchId, dest: HostId) -> AdaptiveEntry {
    if sw == dest {
        return eject();
    }
    let candidates = (0..grid.dims.len())
        .flat_map(|d| grid.minimal_moves(sw, dest, d))
        .map(|m| m.port())
        .collect();
    AdaptiveEntry {
        candidates,
        escape: Some(dor_port(grid, sw, dest)),
        misroute: Vec::new(),
    }
}

/// Hypercube entry at router `sw` for host `dest`.
pub fn cube_entry(d: u32, sw: SwitchId, dest: HostId) -> AdaptiveEntry {
    if sw == dest {
        return eject();
    }
    let diff = sw ^ dest;
    AdaptiveEntry {
        candidates: (0..d)
            .filter(|b| diff >> b & 1 == 1)
            .map(cube_port)
            .collect::<Vec<PortNo>>(),
        escape: Some(ecube_port(sw, dest)),
        misroute: Vec::new(),
    }
}

/// Minimal adaptive routing with a DOR / e-cube escape.
#[derive(Clone, Copy, Debug, Default)]
pub struct AdaptiveEscape;

impl RoutingEngine for AdaptiveEscape {
    fn name(&self) -> &'static str {
        NAME
    }
    fn claims_deadlock_free(&self) -> bool {
        true
    }
    fn route(&self, topo: &Topology, _faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        let table = |entries: Vec<AdaptiveEntry>| SwitchTable::Adaptive(AdaptiveTable { entries });
        match topo.family {
            Family::Hypercube { .. } => {
                let d = cube_dimension(topo, NAME)?;
                let n = 1u32 << d;
                Ok(RoutingTables {
                    engine: NAME.to_string(),
                    switches: (0..n)
                        .map(|sw| table((0..n).map(|t| cube_entry(d, sw, t)).collect()))
                        .collect(),
                    vcs: 2,
                    vc_policy: Vec::new(),
                })
            }
            _ => {
                let grid = Grid::of(topo, NAME)?;
                let n = grid.size();
                Ok(RoutingTables {
                    engine: NAME.to_string(),
                    switches: (0..n)
                        .map(|sw| table((0..n).map(|t| grid_entry(&grid, sw, t)).collect()))
                        .collect(),
                    vcs: if grid.wrap { 3 } else { 2 },
                    vc_policy: if grid.wrap {
                        (0..n).map(|sw| grid.dateline_policy(sw)).collect()
                    } else {
                        Vec::new()
                    },
                })
            }
        }
    }
}

/// Escape VCs one leg needs on `topo`: a Dally–Seitz pair on tori (no
/// bubble flow control in the data plane), one VC on meshes.
pub fn escape_vcs_per_leg(topo: &Topology) -> Result<u8, RoutingError> {
    Ok(if Grid::of(topo, NAME)?.wrap { 2 } else { 1 })
}

/// Adaptive-escape tables for seed 004's intermediate nodes: the same
/// entries as [`AdaptiveEscape`] (indexed by the head's *current* target,
/// so intermediates cost nothing in the switches), with the
/// [`VcPolicy::Legs`] policy: `legs` escape virtual networks, then one
/// adaptive VC (`vcs` = legs · escape VCs per leg + 1). A fabric with more
/// VCs uses the extra ones as adaptive VCs too.
pub fn leg_tables(topo: &Topology, legs: u8) -> Result<RoutingTables, RoutingError> {
    leg_tables_ordered(topo, legs, EscapeOrder::Dor)
}

/// The deterministic function of the escape VCs (seed 004 §3.1, §3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EscapeOrder {
    /// Dimension order `X±Y±Z±` (I, I×N, I+D, D).
    Dor,
    /// Direction order `X+Y+Z+X−Y−Z−` (every variant with M): a leg may
    /// then start with forced runs in any directions in this order and stay
    /// one monotone direction-order path (§3.6's order constraint).
    DirectionOrder,
}

/// The direction-order port at router `sw` for host `dest`: the first
/// needed direction in `X+Y+Z+X−Y−Z−` (a tie on an even ring counts as +).
pub fn direction_order_port(grid: &Grid, sw: SwitchId, dest: HostId) -> PortNo {
    let moves: Vec<_> = (0..grid.dims.len())
        .filter_map(|d| grid.minimal_moves(sw, dest, d).first().copied())
        .collect();
    moves
        .iter()
        .find(|m| m.positive)
        .or_else(|| moves.first())
        .map_or(DIRECT_HOST_PORT, |m| m.port())
}

/// [`leg_tables`] with the escape function `order`. With direction order,
/// the policy's `port_dim` names each port's *direction* (a ring per
/// direction for the datelines) and `dir_ports` maps directions to ports
/// for forced hops.
pub fn leg_tables_ordered(
    topo: &Topology,
    legs: u8,
    order: EscapeOrder,
) -> Result<RoutingTables, RoutingError> {
    let failed = |reason: String| RoutingError::Failed {
        engine: NAME,
        reason,
    };
    if legs == 0 || legs as usize > crate::flit::MAX_INTERMEDIATES + 1 {
        return Err(failed(format!(
            "{legs} legs: a head carries 1..={} legs",
            crate::flit::MAX_INTERMEDIATES + 1
        )));
    }
    let grid = Grid::of(topo, NAME)?;
    let per_leg = escape_vcs_per_leg(topo)?;
    let mut rt = AdaptiveEscape.route(topo, &FaultSet::none())?;
    let ndims = grid.dims.len();
    if order == EscapeOrder::DirectionOrder {
        for (sw, t) in rt.switches.iter_mut().enumerate() {
            if let SwitchTable::Adaptive(a) = t {
                for (dest, e) in a.entries.iter_mut().enumerate() {
                    e.escape = Some(direction_order_port(&grid, sw as SwitchId, dest as HostId));
                }
            }
        }
    }
    let faults = FaultSet::none();
    let mut local: Vec<Vec<HostId>> = vec![Vec::new(); topo.num_switches()];
    for h in 0..topo.num_hosts() as HostId {
        let at = super::checker::host_attachment(topo, &faults, h)
            .ok_or_else(|| failed(format!("host {h} is not attached to a router")))?;
        if let crate::topology::NodeRef::Switch(s) = at.node {
            local[s as usize].push(h);
        }
    }
    rt.vc_policy = (0..topo.num_switches() as SwitchId)
        .map(|sw| {
            let (mut port_dim, mut dateline) = match grid.dateline_policy(sw) {
                VcPolicy::Dateline { port_dim, dateline } => (port_dim, dateline),
                _ => unreachable!("dateline_policy returns a Dateline policy"),
            };
            if !grid.wrap {
                dateline.iter_mut().for_each(|d| *d = false);
            }
            let mut dir_ports = Vec::new();
            if order == EscapeOrder::DirectionOrder {
                for positive in [true, false] {
                    for d in 0..ndims {
                        let p = crate::topology::generators::direct_port(d, positive);
                        let dir = d + if positive { 0 } else { ndims };
                        port_dim[p as usize] = Some(dir as u8);
                        dir_ports.push(p);
                    }
                }
            }
            VcPolicy::Legs {
                legs,
                escape_per_leg: per_leg,
                port_dim,
                dateline,
                local_hosts: std::mem::take(&mut local[sw as usize]),
                dir_ports,
            }
        })
        .collect();
    rt.vcs = legs * per_leg + 1;
    rt.engine = match order {
        EscapeOrder::Dor => format!("{NAME}+legs{legs}"),
        EscapeOrder::DirectionOrder => format!("{NAME}+legs{legs}+dir-order"),
    };
    Ok(rt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckOptions};
    use crate::topology::generators::{direct_port, hypercube, kary_ntree, mesh_or_torus};

    fn assert_ok(topo: &Topology) -> RoutingTables {
        let faults = FaultSet::none();
        let rt = AdaptiveEscape.route(topo, &faults).unwrap();
        let report = check(topo, &faults, &rt, &CheckOptions::default());
        assert!(report.is_ok(), "{}: {:?}", topo.name, report.failures);
        assert!(report.cdg_checked);
        let n = topo.num_hosts() as u64;
        assert_eq!(report.delivered, n * (n - 1));
        rt
    }

    #[test]
    fn meshes_tori_and_cubes_pass_the_checker() {
        for (dims, wrap) in [(vec![3, 3], false), (vec![8, 8], false)] {
            let rt = assert_ok(&mesh_or_torus(&dims, wrap).unwrap());
            assert_eq!(rt.vcs, 2);
        }
        for dims in [vec![3, 3, 3], vec![4, 4]] {
            let rt = assert_ok(&mesh_or_torus(&dims, true).unwrap());
            assert_eq!(rt.vcs, 3);
        }
        for d in [4, 6] {
            assert_ok(&hypercube(d).unwrap());
        }
    }

    #[test]
    fn candidates_are_exactly_the_minimal_directions() {
        let topo = mesh_or_torus(&[4, 4], true).unwrap();
        let grid = Grid::of(&topo, "t").unwrap();
        for sw in 0..16 {
            for t in 0..16 {
                let e = grid_entry(&grid, sw, t);
                let escape = e.escape.unwrap();
                assert!(e.candidates.contains(&escape), "{sw}->{t}");
                // Every candidate lowers the distance by one.
                for &p in &e.candidates {
                    if p == DIRECT_HOST_PORT {
                        assert_eq!(sw, t);
                        continue;
                    }
                    let next = topo
                        .peer(crate::topology::PortRef::switch(sw, p))
                        .unwrap()
                        .node;
                    let crate::topology::NodeRef::Switch(next) = next else {
                        panic!("router port to a host");
                    };
                    assert_eq!(grid.distance(next, t) + 1, grid.distance(sw, t));
                }
            }
        }
        // (0,0) → (2,0): a tie, both x directions; → (2,2): four candidates.
        assert_eq!(grid_entry(&grid, 0, 2).candidates.len(), 2);
        assert_eq!(grid_entry(&grid, 0, 10).candidates.len(), 4);
        assert_eq!(cube_entry(6, 0, 0b101101).candidates, vec![1, 3, 4, 6]);
        assert_eq!(cube_entry(6, 0, 0b101101).escape, Some(1));
    }

    #[test]
    fn leg_tables_give_each_leg_an_escape_network_and_pass_the_checker() {
        let torus = mesh_or_torus(&[3, 3, 3], true).unwrap();
        let rt = leg_tables(&torus, 2).unwrap();
        assert_eq!(rt.vcs, 5, "2 legs × dateline pair + 1 adaptive");
        let VcPolicy::Legs {
            legs,
            escape_per_leg,
            local_hosts,
            ..
        } = rt.vc_policy(13)
        else {
            panic!("{:?}", rt.vc_policy(13))
        };
        assert_eq!((*legs, *escape_per_leg), (2, 2));
        assert_eq!(local_hosts, &vec![13]);
        assert_eq!(rt.vc_policy(13).min_vcs(), 4);
        // Leg 0's escape network is DOR with datelines: acyclic.
        let report = check(&torus, &FaultSet::none(), &rt, &CheckOptions::default());
        assert!(report.is_ok(), "{:?}", report.failures);
        // Direction-order escape (M variants): acyclic too, one dateline
        // ring per direction.
        let rt = leg_tables_ordered(&torus, 2, EscapeOrder::DirectionOrder).unwrap();
        let report = check(&torus, &FaultSet::none(), &rt, &CheckOptions::default());
        assert!(report.is_ok(), "{:?}", report.failures);
        let grid = Grid::of(&torus, "t").unwrap();
        // (0,0,0) → (2,1,0): X needs −1, Y needs +1: direction order takes Y+.
        assert_eq!(direction_order_port(&grid, 0, 2 + 3), direct_port(1, true));
        let mesh = mesh_or_torus(&[3, 3], false).unwrap();
        assert_eq!(leg_tables(&mesh, 3).unwrap().vcs, 4);
        assert!(leg_tables(&mesh, 5).is_err());
        assert!(leg_tables(&kary_ntree(2, 2).unwrap(), 2).is_err());
    }

    #[test]
    fn refuses_fat_trees() {
        let tree = kary_ntree(2, 3).unwrap();
        assert!(matches!(
            AdaptiveEscape.route(&tree, &FaultSet::none()),
            Err(RoutingError::NotApplicable { .. })
        ));
    }
}
