//! E-cube routing on hypercubes (seed 003 §2.4, §4.2 R2): correct the bits
//! in which the current router and the destination differ, least significant
//! first. Dimensions are taken in increasing order, so the channel order has
//! no cycle and one VC suffices. Router i reaches `i XOR 2^b` through port
//! `1 + b`; its host is on port 0.
//!
//! Like DOR, e-cube is oblivious: faults do not change the tables.

use super::tables::{Lft, RoutingTables, SwitchTable};
use super::{RoutingEngine, RoutingError};
use crate::topology::generators::DIRECT_HOST_PORT;
use crate::topology::{Family, FaultSet, HostId, PortNo, SwitchId, Topology};

const NAME: &str = "ecube";

/// The dimension of a generated hypercube (router i = host i = label i).
pub fn cube_dimension(topo: &Topology, engine: &'static str) -> Result<u32, RoutingError> {
    match topo.family {
        Family::Hypercube { d } if topo.num_switches() == 1 << d && topo.num_hosts() == 1 << d => {
            Ok(d)
        }
        ref other => Err(RoutingError::NotApplicable {
            engine,
            reason: format!(
                "{} ({other:?}, {} switches) is not a generated hypercube",
                topo.name,
                topo.num_switches()
            ),
        }),
    }
}

/// The port for dimension b.
pub fn cube_port(b: u32) -> PortNo {
    (1 + b) as PortNo
}

/// The e-cube port at router `sw` for host `dest`.
pub fn ecube_port(sw: SwitchId, dest: HostId) -> PortNo {
    let diff = sw ^ dest;
    if diff == 0 {
        DIRECT_HOST_PORT
    } else {
        cube_port(diff.trailing_zeros())
    }
}

/// E-cube as a routing engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ecube;

impl RoutingEngine for Ecube {
    fn name(&self) -> &'static str {
        NAME
    }
    fn claims_deadlock_free(&self) -> bool {
        true
    }
    fn route(&self, topo: &Topology, _faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        let d = cube_dimension(topo, NAME)?;
        let n = 1u32 << d;
        let switches = (0..n)
            .map(|sw| {
                SwitchTable::Lft(Lft {
                    ports: (0..n).map(|dest| Some(ecube_port(sw, dest))).collect(),
                })
            })
            .collect();
        Ok(RoutingTables {
            engine: NAME.to_string(),
            switches,
            vcs: 1,
            vc_policy: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckOptions, Tracer};
    use crate::topology::generators::{hypercube, mesh_or_torus};

    #[test]
    fn cubes_are_minimal_lsb_first_and_deadlock_free() {
        for d in [4u32, 6] {
            let topo = hypercube(d).unwrap();
            let faults = FaultSet::none();
            let rt = Ecube.route(&topo, &faults).unwrap();
            let report = check(&topo, &faults, &rt, &CheckOptions::default());
            assert!(report.is_ok(), "{}-cube: {:?}", d, report.failures);
            assert!(report.cdg_checked && report.dependencies > 0);
            let n = 1u32 << d;
            let tracer = Tracer::new(&topo, &faults, &rt);
            for s in 0..n {
                for t in 0..n {
                    let hops = tracer.trace(s, t).unwrap();
                    assert_eq!(hops.len() as u32, (s ^ t).count_ones() + 1);
                    let ports: Vec<PortNo> = hops.iter().map(|h| h.port).collect();
                    assert!(ports[..ports.len() - 1].windows(2).all(|w| w[0] < w[1]));
                }
            }
        }
    }

    #[test]
    fn worked_example_0101_to_1010() {
        // Seed 003 §2.4: 0101 → 0100 → 0110 → 0010 → 1010.
        let topo = hypercube(4).unwrap();
        let faults = FaultSet::none();
        let rt = Ecube.route(&topo, &faults).unwrap();
        let hops = Tracer::new(&topo, &faults, &rt)
            .trace(0b0101, 0b1010)
            .unwrap();
        let routers: Vec<u32> = hops.iter().map(|h| h.switch).collect();
        assert_eq!(routers, vec![0b0101, 0b0100, 0b0110, 0b0010, 0b1010]);
    }

    #[test]
    fn refuses_meshes() {
        let mesh = mesh_or_torus(&[4, 4], false).unwrap();
        assert!(Ecube.route(&mesh, &FaultSet::none()).is_err());
    }
}
