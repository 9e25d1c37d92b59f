//! Ftree2 (seed 001 §4.9, Alg. 9 with the §9 #8 fixes): Ftree whose
//! candidate ports are ranked first by how much the *remote switch* has
//! already been used (separate ascending/descending counters), then by the
//! local port's usage. The traversal is shared with Ftree
//! ([`super::ftree::route_with_policy`]).
//!
//! Counter policy (§9 #10): by default only the primary upport is charged
//! while ascending, as in Ftree; `charge_secondary` charges every new
//! assignment as Alg. 9 is printed (the digest found it worse under faults).

use super::ftree::{ranked, route_with_policy, Policy};
use super::{RoutingEngine, RoutingError, RoutingTables};
use crate::topology::{FaultSet, Topology};

#[derive(Clone, Copy, Debug, Default)]
pub struct Ftree2 {
    pub charge_secondary: bool,
}

impl RoutingEngine for Ftree2 {
    fn name(&self) -> &'static str {
        "ftree2"
    }
    fn claims_deadlock_free(&self) -> bool {
        true
    }
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        let o = ranked(topo, faults, "ftree2")?;
        Ok(route_with_policy(
            topo,
            &o,
            Policy::Remote {
                charge_secondary: self.charge_secondary,
            },
            "ftree2",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckOptions};
    use crate::routing::ftree::{distinct_next_switches, Ftree};
    use crate::routing::metrics::{mu_a2a, TableRouter};
    use crate::topology::generators::kary_ntree;
    use crate::topology::PortRef;

    /// G_d: the 2-ary 3-tree with link L1-0 ↔ L2-1 failed (§3.5).
    fn g_d() -> (Topology, FaultSet) {
        let t = kary_ntree(2, 3).unwrap();
        let l = t.link_at(PortRef::switch(0, 3)).unwrap();
        (t, FaultSet::with_links([l]))
    }

    #[test]
    fn g_d_destinations_0_to_3_split_as_in_section_4_9() {
        let (t, f) = g_d();
        let ftree = Ftree.route(&t, &f).unwrap();
        let ftree2 = Ftree2::default().route(&t, &f).unwrap();
        for tables in [&ftree, &ftree2] {
            let r = check(&t, &f, tables, &CheckOptions::default());
            assert!(r.is_ok(), "{}: {:?}", tables.engine, r.failures);
        }
        // Ftree: L1-2 sends destinations 0, 1, 2 to L2-2 (switch 6).
        let n = distinct_next_switches(&t, &ftree, 2, &[0, 1, 2, 3]);
        assert_eq!(&n[..3], &[Some(6), Some(6), Some(6)], "{n:?}");
        // Ftree2: two to L2-2 and two to L2-3, on both L1-2 and L1-3.
        for leaf in [2, 3] {
            let n = distinct_next_switches(&t, &ftree2, leaf, &[0, 1, 2, 3]);
            assert_eq!(n.iter().filter(|x| **x == Some(6)).count(), 2, "{n:?}");
            assert_eq!(n.iter().filter(|x| **x == Some(7)).count(), 2, "{n:?}");
        }
        // §4.9: μ_A2A(Ftree2) = 2 on G_d.
        assert_eq!(mu_a2a(&TableRouter::new(&t, &f, &ftree2), &t).mu, 2);
    }
}
