//! Seed 003's fault handling, local and without a controller (digest §4
//! "faithful mode", §3.6 assumptions 12–13, §4.1 "at most 1 misroute"):
//! minimal adaptive routing with an e-cube / XY escape (Duato, §4.2 R7/R8,
//! the same entries as [`super::adaptive::AdaptiveEscape`]), plus, per
//! destination, the *misroute* ports: the sideways ones (every non-minimal
//! port on a hypercube; on a mesh both directions of each dimension in
//! which the packet is already aligned, never the reverse of a minimal
//! direction, from where the only way on would be back). The tables are computed once, fault-free; a switch that loses a
//! neighbour routes around it on its own:
//!
//! - a head takes an adaptive VC (1 and up) on any live minimal port, else
//!   the escape VC (0) on the escape port; a dead escape port with a live
//!   minimal one means waiting for that one;
//! - a head whose minimal ports are all dead (a distance-1 pair whose link
//!   died; a mesh pair in one row or column with the dead router between)
//!   takes one misroute port on an adaptive VC, once per packet
//!   ([`crate::flit::route_flags::LOCAL_MISROUTED`]);
//! - a head never leaves by the port it arrived on (after a misroute, the
//!   way back is minimal again).
//!
//! With nothing left, the head is dropped and (SBRP) its source asked at
//! once to resend: the resend is routed afresh (see `crate::mechanism::local_reroute`).
//!
//! Deadlock: fault-free, the escape network (VC 0, e-cube / XY) is acyclic
//! and connected, so Duato's theorem holds (the checker verifies it). After
//! a fault it is no longer connected for the pairs whose escape path crosses
//! it, and those packets wait on adaptive VCs only, so the theorem no longer
//! covers them; the misroute bound and the no-U-turn rule exclude livelock,
//! and SBRP resends whatever is dropped. See docs/sbrp.md, "Faithful mode".

use super::adaptive::{cube_entry, grid_entry};
use super::dor::Grid;
use super::ecube::cube_dimension;
use super::tables::{AdaptiveEntry, AdaptiveTable, RoutingTables, SwitchTable, VcPolicy};
use super::{RoutingEngine, RoutingError};
use crate::topology::generators::direct_port;
use crate::topology::{Family, FaultSet, NodeRef, PortNo, PortRef, SwitchId, Topology};

pub const NAME: &str = "local-reroute";

/// Adaptive-escape tables with misroute ports and the
/// [`VcPolicy::LocalReroute`] policy (meshes and hypercubes).
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalReroute;

/// Router-to-router ports of `sw`.
fn router_ports(topo: &Topology, sw: SwitchId) -> Vec<PortNo> {
    (0..topo.radix(NodeRef::Switch(sw)) as PortNo)
        .filter(|&p| {
            topo.peer(PortRef::switch(sw, p))
                .is_some_and(|q| matches!(q.node, NodeRef::Switch(_)))
        })
        .collect()
}

/// `e` with the router ports of `sw` in `sideways` as misroute ports (none
/// at the destination's own router).
fn with_misroutes(mut e: AdaptiveEntry, sideways: Vec<PortNo>, at_dest: bool) -> AdaptiveEntry {
    if !at_dest {
        e.misroute = sideways
            .into_iter()
            .filter(|p| !e.candidates.contains(p))
            .collect();
    }
    e
}

/// The misroute ports on a mesh at `sw` toward `dest`: both directions of
/// every dimension in which the packet is already aligned (a sideways step).
/// Never the reverse of a minimal direction: from there the only minimal
/// move would be straight back, which a head may not take.
fn grid_sideways(grid: &Grid, sw: SwitchId, dest: u32, ports: &[PortNo]) -> Vec<PortNo> {
    (0..grid.dims.len())
        .filter(|&d| grid.minimal_moves(sw, dest, d).is_empty())
        .flat_map(|d| [direct_port(d, true), direct_port(d, false)])
        .filter(|p| ports.contains(p))
        .collect()
}

impl RoutingEngine for LocalReroute {
    fn name(&self) -> &'static str {
        NAME
    }
    fn claims_deadlock_free(&self) -> bool {
        // Fault-free: Duato with an acyclic escape network (checked).
        true
    }
    fn route(&self, topo: &Topology, _faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        let n = topo.num_switches() as SwitchId;
        // (entry, misroute ports) per switch, destination and router ports.
        type Entry = Box<dyn Fn(SwitchId, u32, &[PortNo]) -> (AdaptiveEntry, Vec<PortNo>)>;
        let entry: Entry = match topo.family {
            // Every non-minimal dimension is sideways on a hypercube.
            Family::Hypercube { .. } => {
                let d = cube_dimension(topo, NAME)?;
                Box::new(move |sw, t, ports| (cube_entry(d, sw, t), ports.to_vec()))
            }
            _ => {
                let grid = Grid::of(topo, NAME)?;
                if grid.wrap {
                    return Err(RoutingError::NotApplicable {
                        engine: NAME,
                        reason: format!(
                            "{} is a torus: its escape network would need datelines (use a mesh or a hypercube)",
                            topo.name
                        ),
                    });
                }
                Box::new(move |sw, t, ports| {
                    (grid_entry(&grid, sw, t), grid_sideways(&grid, sw, t, ports))
                })
            }
        };
        let switches = (0..n)
            .map(|sw| {
                let ports = router_ports(topo, sw);
                SwitchTable::Adaptive(AdaptiveTable {
                    entries: (0..topo.num_hosts() as u32)
                        .map(|t| {
                            let (e, sideways) = entry(sw, t, &ports);
                            with_misroutes(e, sideways, sw == t)
                        })
                        .collect(),
                })
            })
            .collect();
        Ok(RoutingTables {
            engine: NAME.to_string(),
            switches,
            vcs: 2,
            vc_policy: (0..n).map(|_| VcPolicy::LocalReroute).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckOptions};
    use crate::topology::generators::{hypercube, mesh_or_torus, DIRECT_HOST_PORT};

    #[test]
    fn fault_free_tables_pass_the_checker_with_an_acyclic_escape() {
        for topo in [
            hypercube(4).unwrap(),
            mesh_or_torus(&[7, 7], false).unwrap(),
        ] {
            let faults = FaultSet::none();
            let rt = LocalReroute.route(&topo, &faults).unwrap();
            let report = check(&topo, &faults, &rt, &CheckOptions::default());
            assert!(report.is_ok(), "{}: {:?}", topo.name, report.failures);
            assert!(report.cdg_checked);
            let n = topo.num_hosts() as u64;
            assert_eq!(report.delivered, n * (n - 1));
            assert_eq!(rt.vcs, 2);
            assert!(rt.vc_policy.iter().all(|p| *p == VcPolicy::LocalReroute));
        }
    }

    #[test]
    fn misroute_ports_are_the_other_router_ports() {
        let cube = hypercube(4).unwrap();
        let rt = LocalReroute.route(&cube, &FaultSet::none()).unwrap();
        let SwitchTable::Adaptive(a) = &rt.switches[0] else {
            panic!()
        };
        // 0 → 1 (distance 1): minimal port 1 (dimension 0); misroutes on
        // the three other dimensions.
        assert_eq!(a.entries[1].candidates, vec![1]);
        assert_eq!(a.entries[1].misroute, vec![2, 3, 4]);
        // 0 → 15: every port is minimal, nothing to misroute to.
        assert!(a.entries[15].misroute.is_empty());
        // At the destination's router: eject only.
        assert_eq!(a.entries[0].candidates, vec![DIRECT_HOST_PORT]);
        assert!(a.entries[0].misroute.is_empty());
        // A mesh corner has two router ports; the host port is never one.
        let mesh = mesh_or_torus(&[7, 7], false).unwrap();
        let rt = LocalReroute.route(&mesh, &FaultSet::none()).unwrap();
        let SwitchTable::Adaptive(a) = &rt.switches[0] else {
            panic!()
        };
        assert_eq!(a.entries[2].candidates.len(), 1, "same row");
        assert_eq!(a.entries[2].misroute.len(), 1);
        assert!(!a.entries[2].misroute.contains(&DIRECT_HOST_PORT));
        // (2,1) → (2,5), one column: the misroutes step sideways (±X),
        // never back (−Y), from where the only minimal move is the U-turn.
        let SwitchTable::Adaptive(a) = &rt.switches[9] else {
            panic!()
        };
        assert_eq!(a.entries[37].candidates, vec![direct_port(1, true)]);
        assert_eq!(
            a.entries[37].misroute,
            vec![direct_port(0, true), direct_port(0, false)]
        );
        // (2,1) → (4,3): no aligned dimension, no misroute.
        assert!(a.entries[4 + 3 * 7].misroute.is_empty());
        assert!(LocalReroute
            .route(&mesh_or_torus(&[4, 4], true).unwrap(), &FaultSet::none())
            .is_err());
    }
}
