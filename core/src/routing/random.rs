//! RandSP, random shortest path (seed 001 §4.6, Alg. 2): every switch sends
//! each destination through a port drawn uniformly (seeded) among the ports
//! on a shortest alive path. On fat-trees shortest paths are up*/down*, so it
//! is deadlock-free there, but not in general: it does not claim it. Poor for
//! shifts (Table 2.1: μ^SP 7–9 on the 512-node RLFT) because routes to one
//! destination do not coalesce.

use super::minhop::{lft_tables, AliveGraph};
use super::{RoutingEngine, RoutingError, RoutingTables};
use crate::topology::{FaultSet, HostId, SwitchId, Topology};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub fn random_shortest_path(topo: &Topology, faults: &FaultSet, seed: u64) -> RoutingTables {
    let g = AliveGraph::new(topo, faults);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ns = topo.num_switches();
    let nh = topo.num_hosts();
    let mut lft = vec![vec![None; nh]; ns];
    let mut cands = Vec::new();
    for d in 0..nh as HostId {
        let dist = g.distances_to(d);
        for s in 0..ns as SwitchId {
            g.shortest_ports(s, d, &dist, &mut cands);
            lft[s as usize][d as usize] = cands.choose(&mut rng).copied();
        }
    }
    lft_tables(lft, "random")
}

#[derive(Clone, Copy, Debug)]
pub struct RandomShortestPath {
    pub seed: u64,
}

impl Default for RandomShortestPath {
    fn default() -> Self {
        RandomShortestPath { seed: 1 }
    }
}

impl RoutingEngine for RandomShortestPath {
    fn name(&self) -> &'static str {
        "random"
    }
    fn claims_deadlock_free(&self) -> bool {
        false
    }
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        Ok(random_shortest_path(topo, faults, self.seed))
    }
}
