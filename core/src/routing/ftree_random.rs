//! Ftree-Random (seed 001 §4.8, Alg. 8): Ftree's per-destination traversal
//! (so routes to one destination still coalesce) with up and down ports
//! visited in a seeded random order and no usage counters.

use super::ftree::{ranked, route_with_policy, Policy};
use super::{RoutingEngine, RoutingError, RoutingTables};
use crate::topology::{FaultSet, Topology};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Copy, Debug)]
pub struct FtreeRandom {
    pub seed: u64,
}

impl Default for FtreeRandom {
    fn default() -> Self {
        FtreeRandom { seed: 1 }
    }
}

impl RoutingEngine for FtreeRandom {
    fn name(&self) -> &'static str {
        "ftree-random"
    }
    fn claims_deadlock_free(&self) -> bool {
        true
    }
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        let o = ranked(topo, faults, "ftree-random")?;
        Ok(route_with_policy(
            topo,
            &o,
            Policy::Random(Box::new(ChaCha8Rng::seed_from_u64(self.seed))),
            "ftree-random",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::kary_ntree;

    #[test]
    fn seeded_and_reproducible() {
        let t = kary_ntree(4, 3).unwrap();
        let f = FaultSet::none();
        let a = FtreeRandom { seed: 7 }.route(&t, &f).unwrap();
        let b = FtreeRandom { seed: 7 }.route(&t, &f).unwrap();
        let c = FtreeRandom { seed: 8 }.route(&t, &f).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.switches, c.switches);
    }
}
