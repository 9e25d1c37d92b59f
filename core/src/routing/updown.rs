//! Up*/Down* over a BFS orientation and the seed-001 variants (§4.11,
//! Alg. 10–12; Autonet-style topology-agnostic deadlock freedom).
//!
//! Links are oriented by BFS depth from a root leaf (the alive switch with a
//! host and the smallest id); links between switches of equal depth are
//! dropped (§9 #14). Costs `c` (up*/down* hops) and `c'` (down-only hops) come
//! from Dmodc's preprocessing (Alg. 6 in one pass, the orientation being a
//! DAG by depth). At switch s towards leaf λ the candidates are the guarded
//! set of §9 #12: down groups with decreasing `c'` if λ is below, else up
//! groups with decreasing `c` — identical to Alg. 11/12's union under strict
//! depth orientation (§9 #13), and never a down→up turn, so every variant is
//! deadlock-free on any connected topology (meshes, tori, hypercubes, IFTs).
//!
//! Variants (choice among the candidates):
//! - `updown`: the least-loaded candidate port (route counts, as OpenSM's
//!   updn balances), ties by port;
//! - `bfs-random` (Alg. 11): a seeded uniform random candidate port;
//! - `bfs-dmodc` (Alg. 12): Dmodc's Eq. 4.6–4.8 with the BFS dividers;
//! - `bfs-ftree`, `bfs-ftree2`, `bfs-ftree-random`: the Ftree-family
//!   traversals (§4.7–4.9) with BFS directions as up/down.
//!
//! Unlike the rank-based engines, the BFS orientation is recomputed on the
//! degraded fabric, so levels may move across faults.

use super::dmodc::{route_orientation, Preprocessed};
use super::ftree::{route_with_policy, Policy};
use super::minhop::lft_tables;
use super::ranking::Orientation;
use super::{RoutingEngine, RoutingError, RoutingTables};
use crate::topology::{FaultSet, PortNo, SwitchId, Topology};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// How an up*/down* variant picks among candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Balanced,
    Random,
    Dmodc,
    Ftree,
    Ftree2,
    FtreeRandom,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Balanced => "updown",
            Variant::Random => "bfs-random",
            Variant::Dmodc => "bfs-dmodc",
            Variant::Ftree => "bfs-ftree",
            Variant::Ftree2 => "bfs-ftree2",
            Variant::FtreeRandom => "bfs-ftree-random",
        }
    }
}

/// An up*/down* engine over a BFS orientation.
#[derive(Clone, Copy, Debug)]
pub struct UpDown {
    pub variant: Variant,
    /// Seed of the random variants.
    pub seed: u64,
}

impl UpDown {
    pub fn new(variant: Variant) -> Self {
        UpDown { variant, seed: 1 }
    }
}

/// Per-port choice among the guarded candidates (Balanced / Random).
fn route_by_choice(
    topo: &Topology,
    o: &Orientation,
    pre: &Preprocessed,
    mut choose: impl FnMut(SwitchId, &[PortNo]) -> PortNo,
    engine: &str,
) -> RoutingTables {
    let ns = o.level.len();
    let nh = topo.num_hosts();
    let mut lft = vec![vec![None; nh]; ns];
    let mut groups = Vec::new();
    let mut ports = Vec::new();
    for (h, attach) in o.host_leaf.iter().enumerate() {
        let Some((leaf, endport)) = *attach else {
            continue;
        };
        let Some(li) = o.leaf_index[leaf as usize] else {
            continue;
        };
        for s in 0..ns as SwitchId {
            if o.level[s as usize].is_none() {
                continue;
            }
            if s == leaf {
                lft[s as usize][h] = Some(endport);
                continue;
            }
            let down = pre.candidates(o, s, li as usize, &mut groups);
            let side = if down {
                &o.down[s as usize]
            } else {
                &o.up[s as usize]
            };
            ports.clear();
            for &g in &groups {
                ports.extend(side[g].ports.iter().map(|&(p, _)| p));
            }
            if !ports.is_empty() {
                lft[s as usize][h] = Some(choose(s, &ports));
            }
        }
    }
    lft_tables(lft, engine)
}

pub fn updown(
    topo: &Topology,
    faults: &FaultSet,
    variant: Variant,
    seed: u64,
) -> Result<RoutingTables, RoutingError> {
    let name = variant.name();
    let o = Orientation::bfs(topo, faults).map_err(|e| RoutingError::NotApplicable {
        engine: name,
        reason: e.to_string(),
    })?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Ok(match variant {
        Variant::Balanced => {
            let pre = Preprocessed::compute(&o);
            let mut usage: Vec<Vec<u32>> = topo
                .switches
                .iter()
                .map(|s| vec![0; s.ports.len()])
                .collect();
            route_by_choice(
                topo,
                &o,
                &pre,
                |s, ports| {
                    let u = &mut usage[s as usize];
                    let p = *ports
                        .iter()
                        .min_by_key(|&&p| (u[p as usize], p))
                        .unwrap_or(&ports[0]);
                    u[p as usize] += 1;
                    p
                },
                name,
            )
        }
        Variant::Random => {
            let pre = Preprocessed::compute(&o);
            route_by_choice(
                topo,
                &o,
                &pre,
                |_, ports| *ports.choose(&mut rng).unwrap_or(&ports[0]),
                name,
            )
        }
        Variant::Dmodc => {
            let pre = Preprocessed::compute(&o);
            route_orientation(&o, &pre, &pre.tnid, topo.num_hosts(), name)
        }
        Variant::Ftree => route_with_policy(topo, &o, Policy::Usage, name),
        Variant::Ftree2 => route_with_policy(
            topo,
            &o,
            Policy::Remote {
                charge_secondary: false,
            },
            name,
        ),
        Variant::FtreeRandom => route_with_policy(topo, &o, Policy::Random(Box::new(rng)), name),
    })
}

impl RoutingEngine for UpDown {
    fn name(&self) -> &'static str {
        self.variant.name()
    }
    fn claims_deadlock_free(&self) -> bool {
        true
    }
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        updown(topo, faults, self.variant, self.seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::metrics::{mu_sp, TableRouter};
    use crate::topology::generators::pgft;
    use crate::topology::PgftParams;

    #[test]
    fn bfs_ftree2_is_competitive_and_bfs_ftree_is_not() {
        // §7.6 take-aways, on the 512-node RLFT of Table 2.1.
        let t = pgft(&PgftParams {
            m: vec![16, 32],
            w: vec![1, 16],
            p: vec![1, 1],
        })
        .unwrap();
        let f = FaultSet::none();
        let sp = |v| {
            let tables = updown(&t, &f, v, 1).unwrap();
            mu_sp(&TableRouter::new(&t, &f, &tables), &t).0.mu
        };
        assert_eq!(sp(Variant::Ftree2), 1);
        assert!(sp(Variant::Ftree) > 4);
    }
}
