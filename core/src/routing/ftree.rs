//! Ftree, OpenSM-style (seed 001 §4.7, Alg. 1 with the §9 #8 fixes), and the
//! traversal it shares with Ftree2 (§4.9, [`super::ftree2`]) and Ftree-Random
//! (§4.8, [`super::ftree_random`]).
//!
//! For each destination δ (leaves in GUID order, endports in port order) the
//! traversal walks *up* from δ's leaf and *down* from every switch reached;
//! each link traversed sets the route for δ in the reverse direction, so the
//! routes towards δ form a tree (coalescing, §4.1). Port usage counters
//! spread different destinations. The "remaining leaves" counter stops the
//! walk once every leaf has a route, so on an undegraded PGFT only primary
//! routes exist and Ftree equals Dmodk (§4.3, §9 #19); under faults the
//! remaining upports give the secondary routes.
//!
//! Paths are up*/down* by construction: switches reached by `ascend` route
//! down, switches reached by `descend` route up towards a switch that routes
//! up or down — never down then up. Works on any [`Orientation`] where leaf
//! pairs have up*/down* paths (ranked fat-trees, or BFS orientations).

use super::ranking::Orientation;
use super::{Lft, RoutingEngine, RoutingError, RoutingTables, SwitchTable};
use crate::topology::{FaultSet, HostId, PortNo, SwitchId, Topology};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// How candidate ports are ordered and charged.
pub enum Policy {
    /// Ftree: by (port usage, port); only the first upport is charged.
    Usage,
    /// Ftree2: by (remote switch's asc/desc counter, port usage, port).
    /// `charge_secondary`: charge every new assignment (Alg. 9 as printed)
    /// rather than only the primary upport (§4.9 caution, §9 #10).
    Remote { charge_secondary: bool },
    /// Ftree-Random: random order, no counters.
    Random(Box<ChaCha8Rng>),
}

struct Walk<'a> {
    o: &'a Orientation,
    policy: Policy,
    lft: Vec<Vec<Option<PortNo>>>,
    /// usage[s][port]
    usage: Vec<Vec<u32>>,
    asc: Vec<u32>,
    desc: Vec<u32>,
    is_leaf: Vec<bool>,
    remaining: usize,
    delta: usize,
}

impl Walk<'_> {
    fn has(&self, s: SwitchId) -> bool {
        self.lft[s as usize][self.delta].is_some()
    }

    /// Up ports of s in visiting order: (local port, remote switch, remote port).
    fn up_order(&mut self, s: SwitchId) -> Vec<(PortNo, SwitchId, PortNo)> {
        let mut v: Vec<(PortNo, SwitchId, PortNo)> = self.o.up[s as usize]
            .iter()
            .flat_map(|g| g.ports.iter().map(move |&(p, rp)| (p, g.remote, rp)))
            .collect();
        let usage = &self.usage[s as usize];
        match &mut self.policy {
            Policy::Usage => v.sort_by_key(|&(p, _, _)| (usage[p as usize], p)),
            Policy::Remote { .. } => {
                let asc = &self.asc;
                v.sort_by_key(|&(p, r, _)| (asc[r as usize], usage[p as usize], p))
            }
            Policy::Random(rng) => v.shuffle(rng),
        }
        v
    }

    fn ascend(&mut self, s: SwitchId) {
        let order = self.up_order(s);
        for (i, (u, a, d)) in order.into_iter().enumerate() {
            if self.has(a) {
                continue;
            }
            self.lft[a as usize][self.delta] = Some(d);
            let charge = match self.policy {
                Policy::Usage => i == 0,
                Policy::Remote { charge_secondary } => charge_secondary || i == 0,
                Policy::Random(_) => false,
            };
            if charge {
                self.usage[s as usize][u as usize] += 1;
                self.asc[a as usize] += 1;
            }
            if self.is_leaf[a as usize] {
                // Only in non-tree orientations (BFS) is a leaf above a switch.
                self.remaining = self.remaining.saturating_sub(1);
            }
            self.descend(a);
            self.ascend(a);
            if self.remaining == 0 {
                break;
            }
        }
    }

    fn descend(&mut self, s: SwitchId) {
        // (local port, remote switch, remote port) of the chosen port per
        // down group, in visiting order.
        let o = self.o;
        let groups = &o.down[s as usize];
        let mut order: Vec<usize> = (0..groups.len()).collect();
        match &mut self.policy {
            Policy::Usage => {}
            Policy::Remote { .. } => {
                // Ftree2 sorts individual down ports by (desc[remote], usage, port);
                // ports of one group share the remote, so sorting groups by
                // (desc[remote], least usage, its port) is the same visit order.
                let desc = &self.desc;
                let usage = &self.usage[s as usize];
                order.sort_by_key(|&k| {
                    let g = &groups[k];
                    let best = g
                        .ports
                        .iter()
                        .map(|&(p, _)| (usage[p as usize], p))
                        .min()
                        .unwrap_or((0, 0));
                    (desc[g.remote as usize], best)
                });
            }
            Policy::Random(rng) => order.shuffle(rng),
        }
        for k in order {
            let g = &groups[k];
            let b = g.remote;
            if self.has(b) {
                continue;
            }
            let (d, u) = match &mut self.policy {
                Policy::Random(rng) => *g.ports.choose(rng).unwrap_or(&g.ports[0]),
                _ => {
                    let usage = &self.usage[s as usize];
                    *g.ports
                        .iter()
                        .min_by_key(|&&(p, _)| (usage[p as usize], p))
                        .unwrap_or(&g.ports[0])
                }
            };
            self.lft[b as usize][self.delta] = Some(u);
            if !matches!(self.policy, Policy::Random(_)) {
                self.usage[s as usize][d as usize] += 1;
                self.desc[b as usize] += 1;
            }
            if self.is_leaf[b as usize] {
                self.remaining = self.remaining.saturating_sub(1);
            }
            self.descend(b);
            if self.remaining == 0 {
                break;
            }
        }
    }
}

/// Runs the Ftree-family traversal over `o` with `policy`.
pub fn route_with_policy(
    topo: &Topology,
    o: &Orientation,
    policy: Policy,
    engine: &str,
) -> RoutingTables {
    let ns = o.level.len();
    let nh = topo.num_hosts();
    let mut is_leaf = vec![false; ns];
    for &l in &o.leaves {
        is_leaf[l as usize] = true;
    }
    let mut walk = Walk {
        o,
        policy,
        lft: vec![vec![None; nh]; ns],
        usage: topo
            .switches
            .iter()
            .map(|s| vec![0; s.ports.len()])
            .collect(),
        asc: vec![0; ns],
        desc: vec![0; ns],
        is_leaf,
        remaining: 0,
        delta: 0,
    };
    let by_switch = o.hosts_by_switch();
    for &l in &o.leaves {
        for &(p, h) in &by_switch[l as usize] {
            walk.delta = h as usize;
            walk.lft[l as usize][h as usize] = Some(p);
            walk.remaining = o.leaves.len() - 1;
            // As for every switch reached going up: down first, then up. A
            // no-op on fat-trees (leaves have no down switches) but needed in
            // BFS orientations, where the root leaf is the top.
            walk.descend(l);
            if walk.remaining > 0 {
                walk.ascend(l);
            }
        }
    }
    RoutingTables {
        engine: engine.to_string(),
        switches: walk
            .lft
            .into_iter()
            .map(|ports| SwitchTable::Lft(Lft { ports }))
            .collect(),
        vcs: 1,
        vc_policy: Vec::new(),
    }
}

pub(crate) fn ranked(
    topo: &Topology,
    faults: &FaultSet,
    engine: &'static str,
) -> Result<Orientation, RoutingError> {
    Orientation::ranked(topo, faults).map_err(|e| RoutingError::NotApplicable {
        engine,
        reason: e.to_string(),
    })
}

/// The Ftree engine on ranked levels.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ftree;

impl RoutingEngine for Ftree {
    fn name(&self) -> &'static str {
        "ftree"
    }
    fn claims_deadlock_free(&self) -> bool {
        true
    }
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        let o = ranked(topo, faults, "ftree")?;
        Ok(route_with_policy(topo, &o, Policy::Usage, "ftree"))
    }
}

/// Number of distinct remote switches used at `s` by routes to `dests`
/// (used by the G_d examples of §4.7 / §4.9).
pub fn distinct_next_switches(
    topo: &Topology,
    tables: &RoutingTables,
    s: SwitchId,
    dests: &[HostId],
) -> Vec<Option<SwitchId>> {
    dests
        .iter()
        .map(|&d| {
            let p = tables.switches[s as usize].lookup(d)?;
            match topo.peer(crate::topology::PortRef::switch(s, p))?.node {
                crate::topology::NodeRef::Switch(x) => Some(x),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::dmodk::dmodk;
    use crate::routing::metrics::{mu_sp, TableRouter};
    use crate::topology::generators::{kary_ntree, pgft};
    use crate::topology::PgftParams;

    #[test]
    fn equals_dmodk_on_every_primary_route_of_a_perfect_pgft() {
        // §4.3 / §9 #19: Ftree ≡ Dmodk on undegraded PGFTs, except that Ftree
        // leaves out the routes no packet takes (primary routes only).
        for t in [
            kary_ntree(4, 3).unwrap(),
            pgft(&PgftParams {
                m: vec![4, 4, 6],
                w: vec![1, 2, 2],
                p: vec![1, 1, 1],
            })
            .unwrap(),
            pgft(&PgftParams {
                m: vec![4, 2, 4],
                w: vec![1, 2, 2],
                p: vec![1, 2, 1],
            })
            .unwrap(),
        ] {
            let f = FaultSet::none();
            let a = Ftree.route(&t, &f).unwrap();
            let b = dmodk(&t).unwrap();
            let mut present = 0;
            for (x, y) in a.switches.iter().zip(&b.switches) {
                for d in 0..t.num_hosts() as HostId {
                    if let Some(p) = x.lookup(d) {
                        present += 1;
                        assert_eq!(Some(p), y.lookup(d), "{} dest {d}", t.name);
                    }
                }
            }
            assert!(present < t.num_switches() * t.num_hosts(), "primary only");
            let sa = mu_sp(&TableRouter::new(&t, &f, &a), &t).0;
            let sb = mu_sp(&TableRouter::new(&t, &f, &b), &t).0;
            assert_eq!(sa, sb, "{}", t.name);
        }
    }
}
