//! Dmodc (seed 001 §4.10, Alg. 5–7, Eq. 4.1–4.8): Dmodk's closed form
//! generalised to degraded and irregular fat-trees. "c" is for *closer*: a
//! switch only forwards to neighbours strictly closer (in up*/down* hops) to
//! the destination's leaf, choosing among them with `⌊t/Π⌋ mod #C`.
//!
//! Steps, each a `pub fn` so the lead can time them:
//! 1. [`Preprocessed::compute`]: costs `c[s][λ]` (up*/down* hops to every
//!    leaf), down-only costs `c'`, dividers `Π_s` (max over down-paths of the
//!    product of distinct up-neighbour counts) — one pass by ascending level
//!    and one by descending level (Alg. 5; the orientation is a DAG by level,
//!    so Alg. 6's fixpoint converges in one pass);
//! 2. topological NIDs `t_n` by the lexicographic-key form of Eq. 4.1–4.4
//!    (§9 #15);
//! 3. [`route_orientation`]: Eq. 4.5–4.8 with the rank-aware guarded
//!    candidate rule of §9 #12 (down groups with decreasing `c'` if `λ` is
//!    below, else up groups with decreasing `c`), so every path is up*/down*.
//!
//! Levels come from ranking the *intended* topology, so faults never move a
//! switch to another level and every degraded table set is a sub-function of
//! one up*/down* super-function (§5). Memory: `#switches × #leaves` costs
//! (u16) plus the LFTs; nothing is O(N²).

use super::ranking::{Orientation, PortGroup};
use super::{Lft, RoutingEngine, RoutingError, RoutingTables, SwitchTable};
use crate::topology::{FaultSet, HostId, PortNo, SwitchId, Topology};

/// Cost of "no up*/down* path".
pub const INF: u16 = u16::MAX;

/// Dmodc's preprocessing products.
#[derive(Clone, Debug)]
pub struct Preprocessed {
    /// Number of leaves (columns).
    pub nl: usize,
    /// `cost[s * nl + i]`: up*/down* hops from switch s to leaf `leaves[i]`.
    pub cost: Vec<u16>,
    /// Down-only hops (finite iff s reaches the leaf purely downwards).
    pub down_cost: Vec<u16>,
    /// `Π_s`.
    pub divider: Vec<u64>,
    /// Topological NID of every host (`u64::MAX` for hosts with no alive leaf).
    pub tnid: Vec<u64>,
}

impl Preprocessed {
    pub fn compute(o: &Orientation) -> Self {
        let ns = o.level.len();
        let nl = o.leaves.len();
        let mut cost = vec![INF; ns * nl];
        let mut divider = vec![1u64; ns];
        for (i, &l) in o.leaves.iter().enumerate() {
            cost[l as usize * nl + i] = 0;
        }
        let order = o.by_level();
        // Upward phase: down-only costs and dividers.
        for &s in &order {
            let pi = divider[s as usize] * o.up[s as usize].len().max(1) as u64;
            for g in &o.up[s as usize] {
                let r = g.remote as usize;
                relax(&mut cost, s as usize, r, nl);
                if divider[r] < pi {
                    divider[r] = pi;
                }
            }
        }
        let down_cost = cost.clone();
        // Downward phase: up-then-down paths.
        for &s in order.iter().rev() {
            for g in &o.down[s as usize] {
                relax(&mut cost, s as usize, g.remote as usize, nl);
            }
        }
        let tnid = topological_nids(o, &cost, nl);
        Preprocessed {
            nl,
            cost,
            down_cost,
            divider,
            tnid,
        }
    }

    pub fn cost(&self, s: SwitchId, leaf_idx: usize) -> u16 {
        self.cost[s as usize * self.nl + leaf_idx]
    }

    pub fn down_cost(&self, s: SwitchId, leaf_idx: usize) -> u16 {
        self.down_cost[s as usize * self.nl + leaf_idx]
    }

    /// Leaf pairs with no up*/down* path (the unroutable report, §8.5 X3).
    pub fn unroutable_leaf_pairs(&self, o: &Orientation) -> Vec<(SwitchId, SwitchId)> {
        let mut v = Vec::new();
        for (i, &a) in o.leaves.iter().enumerate() {
            for (j, &b) in o.leaves.iter().enumerate() {
                if i != j && self.cost(a, j) == INF {
                    v.push((a, b));
                }
            }
        }
        v
    }

    /// The guarded candidate groups of switch `s` towards leaf index `li`
    /// (§9 #12): closer down groups if the leaf is below, else closer up
    /// groups. Pushes indices into `o.down[s]` (`true`) or `o.up[s]`.
    pub fn candidates(
        &self,
        o: &Orientation,
        s: SwitchId,
        li: usize,
        out: &mut Vec<usize>,
    ) -> bool {
        out.clear();
        let dc = self.down_cost(s, li);
        if dc != INF {
            for (k, g) in o.down[s as usize].iter().enumerate() {
                if self.down_cost(g.remote, li) < dc {
                    out.push(k);
                }
            }
            true
        } else {
            let c = self.cost(s, li);
            if c != INF {
                for (k, g) in o.up[s as usize].iter().enumerate() {
                    if self.cost(g.remote, li) < c {
                        out.push(k);
                    }
                }
            }
            false
        }
    }
}

/// `c[to][l] = min(c[to][l], c[from][l] + 1)` for every leaf column.
fn relax(cost: &mut [u16], from: usize, to: usize, nl: usize) {
    if from == to {
        return;
    }
    let (src, dst) = if from < to {
        let (a, b) = cost.split_at_mut(to * nl);
        (&a[from * nl..from * nl + nl], &mut b[..nl])
    } else {
        let (a, b) = cost.split_at_mut(from * nl);
        (&b[..nl], &mut a[to * nl..to * nl + nl])
    };
    for (d, &s) in dst.iter_mut().zip(src) {
        let c = s.saturating_add(1);
        if c < *d {
            *d = c;
        }
    }
}

/// Eq. 4.1–4.4 as a lexicographic sort: leaf l's key is
/// `(min id of {l'' : c[l][l''] ≤ 2k} for k = K..1, id(l))`, then hosts by
/// port rank on their leaf. On an undegraded PGFT this is the NID order.
fn topological_nids(o: &Orientation, cost: &[u16], nl: usize) -> Vec<u64> {
    let nh = o.host_leaf.len();
    let mut max_half = 0u16;
    for &l in &o.leaves {
        for &c in &cost[l as usize * nl..l as usize * nl + nl] {
            if c != INF {
                max_half = max_half.max(c.div_ceil(2));
            }
        }
    }
    let k_levels = max_half as usize;
    let mut keys: Vec<(Vec<SwitchId>, usize)> = Vec::with_capacity(nl);
    for (i, &l) in o.leaves.iter().enumerate() {
        let row = &cost[l as usize * nl..l as usize * nl + nl];
        // min id among leaves within 2k hops, for each k (leaves are sorted by id,
        // so the first hit is the minimum).
        let mut key = Vec::with_capacity(k_levels + 1);
        for k in (1..=k_levels).rev() {
            let bound = (2 * k) as u16;
            let first = row.iter().position(|&c| c <= bound).unwrap_or(i);
            key.push(o.leaves[first]);
        }
        key.push(l);
        keys.push((key, i));
    }
    keys.sort();
    let by_switch = o.hosts_by_switch();
    let mut tnid = vec![u64::MAX; nh];
    let mut t = 0u64;
    for (_, i) in keys {
        for &(_, h) in &by_switch[o.leaves[i] as usize] {
            tnid[h as usize] = t;
            t += 1;
        }
    }
    tnid
}

/// Eq. 4.7–4.8: the port among candidate groups `c` for arithmetic key `t`.
pub fn select_port(groups: &[PortGroup], c: &[usize], t: u64, divider: u64) -> PortNo {
    let nc = c.len() as u64;
    let g = &groups[c[((t / divider) % nc) as usize]];
    g.ports[((t / (divider * nc)) % g.ports.len() as u64) as usize].0
}

/// [`select_port`] for consecutive keys, carried incrementally.
struct Stepper {
    div: u64,
    nc: u64,
    /// t mod Π
    r: u64,
    /// ⌊t/Π⌋ mod #C
    gi: u64,
    /// ⌊t/(Π·#C)⌋
    q2: u64,
    /// When every candidate group has the same number of ports n (always on
    /// PGFTs): n and q2 mod n, so no division is needed per entry.
    same: Option<(u64, u64)>,
}

impl Stepper {
    fn new(t0: u64, div: u64, groups: &[PortGroup], c: &[usize]) -> Self {
        let nc = c.len() as u64;
        let q = t0 / div;
        let q2 = q / nc;
        let n0 = groups[c[0]].ports.len() as u64;
        let same = c
            .iter()
            .all(|&k| groups[k].ports.len() as u64 == n0)
            .then_some((n0, q2 % n0));
        Stepper {
            div,
            nc,
            r: t0 % div,
            gi: q % nc,
            q2,
            same,
        }
    }

    fn port(&self, groups: &[PortGroup], c: &[usize]) -> PortNo {
        let g = &groups[c[self.gi as usize]];
        let j = match self.same {
            Some((_, j)) => j,
            None => self.q2 % g.ports.len() as u64,
        };
        g.ports[j as usize].0
    }

    /// Writes the ports of consecutive keys for `hosts` (in key order).
    /// With equal group sizes the current port of each candidate group is
    /// cached in `row` and refreshed only when the parallel index changes.
    fn fill(
        mut self,
        groups: &[PortGroup],
        c: &[usize],
        hosts: &[(PortNo, HostId)],
        ports: &mut [Option<PortNo>],
        row: &mut Vec<PortNo>,
    ) {
        let Some((_, j0)) = self.same else {
            for &(_, h) in hosts {
                ports[h as usize] = Some(self.port(groups, c));
                self.advance();
            }
            return;
        };
        let refill = |row: &mut Vec<PortNo>, j: u64| {
            row.clear();
            row.extend(c.iter().map(|&k| groups[k].ports[j as usize].0));
        };
        refill(row, j0);
        for &(_, h) in hosts {
            ports[h as usize] = Some(row[self.gi as usize]);
            let before = self.same;
            self.advance();
            if self.same != before {
                if let Some((_, j)) = self.same {
                    refill(row, j);
                }
            }
        }
    }

    fn advance(&mut self) {
        self.r += 1;
        if self.r == self.div {
            self.r = 0;
            self.gi += 1;
            if self.gi == self.nc {
                self.gi = 0;
                self.q2 += 1;
                if let Some((n, j)) = &mut self.same {
                    *j += 1;
                    if *j == *n {
                        *j = 0;
                    }
                }
            }
        }
    }
}

/// Dmodc's routing pass over any orientation; `key[h]` is the arithmetic NID
/// of host h (topological NIDs, or grouped ones for Gdmodc).
pub fn route_orientation(
    o: &Orientation,
    pre: &Preprocessed,
    key: &[u64],
    nh: usize,
    engine: &str,
) -> RoutingTables {
    let ns = o.level.len();
    let by_switch = o.hosts_by_switch();
    let mut switches = Vec::with_capacity(ns);
    let mut cands = Vec::new();
    let mut row = Vec::new();
    // Per leaf: the first key if its hosts' keys are consecutive.
    let first_key: Vec<Option<u64>> = o
        .leaves
        .iter()
        .map(|&l| {
            let hosts = &by_switch[l as usize];
            let t0 = key[hosts.first()?.1 as usize];
            hosts
                .iter()
                .enumerate()
                .all(|(i, &(_, h))| key[h as usize] == t0.wrapping_add(i as u64))
                .then_some(t0)
        })
        .collect();
    for s in 0..ns as SwitchId {
        let mut ports: Vec<Option<PortNo>> = vec![None; nh];
        if o.level[s as usize].is_some() {
            let div = pre.divider[s as usize];
            for (li, &leaf) in o.leaves.iter().enumerate() {
                let hosts = &by_switch[leaf as usize];
                if leaf == s {
                    for &(p, h) in hosts {
                        ports[h as usize] = Some(p);
                    }
                    continue;
                }
                let down = pre.candidates(o, s, li, &mut cands);
                if cands.is_empty() {
                    continue;
                }
                let groups = if down {
                    &o.down[s as usize]
                } else {
                    &o.up[s as usize]
                };
                match first_key[li] {
                    // Keys t0, t0+1, …: step through Eq. 4.7–4.8 without a
                    // division per entry (the 8640-node budget is ~10 ns/entry).
                    Some(t0) => {
                        let step = Stepper::new(t0, div, groups, &cands);
                        step.fill(groups, &cands, hosts, &mut ports, &mut row);
                    }
                    None => {
                        for &(_, h) in hosts {
                            ports[h as usize] =
                                Some(select_port(groups, &cands, key[h as usize], div));
                        }
                    }
                }
            }
        }
        switches.push(SwitchTable::Lft(Lft { ports }));
    }
    RoutingTables {
        engine: engine.to_string(),
        switches,
        vcs: 1,
        vc_policy: Vec::new(),
    }
}

/// Dmodc end to end: rank (intended topology), orient, preprocess, route.
pub fn dmodc(topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
    let o = Orientation::ranked(topo, faults).map_err(|e| RoutingError::NotApplicable {
        engine: "dmodc",
        reason: e.to_string(),
    })?;
    let pre = Preprocessed::compute(&o);
    Ok(route_orientation(
        &o,
        &pre,
        &pre.tnid,
        topo.num_hosts(),
        "dmodc",
    ))
}

/// The Dmodc engine (deadlock-free: up*/down* paths on ranked levels).
#[derive(Clone, Copy, Debug, Default)]
pub struct Dmodc;

impl RoutingEngine for Dmodc {
    fn name(&self) -> &'static str {
        "dmodc"
    }
    fn claims_deadlock_free(&self) -> bool {
        true
    }
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        dmodc(topo, faults)
    }
}

/// Host ids in topological-NID order (useful to see the renumbering).
pub fn topological_order(pre: &Preprocessed) -> Vec<HostId> {
    let mut v: Vec<HostId> = (0..pre.tnid.len() as HostId).collect();
    v.sort_by_key(|&h| pre.tnid[h as usize]);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckOptions};
    use crate::routing::dmodk::dmodk;
    use crate::topology::generators::{kary_ntree, pgft};
    use crate::topology::PgftParams;

    fn pg(m: &[u32], w: &[u32], p: &[u32]) -> Topology {
        pgft(&PgftParams {
            m: m.to_vec(),
            w: w.to_vec(),
            p: p.to_vec(),
        })
        .unwrap()
    }

    #[test]
    fn equals_dmodk_on_perfect_pgfts() {
        for t in [
            pg(&[4, 4, 6], &[1, 2, 2], &[1, 1, 1]),
            pg(&[4, 2, 4], &[1, 2, 2], &[1, 2, 1]),
            pg(&[4, 4], &[1, 2], &[1, 2]),
            pg(&[4, 2, 8], &[1, 2, 4], &[1, 2, 1]),
            pg(&[2, 2, 3], &[1, 2, 2], &[1, 2, 1]),
            pg(&[2, 2, 2], &[1, 2, 1], &[1, 1, 2]),
            kary_ntree(2, 3).unwrap(),
            kary_ntree(4, 3).unwrap(),
        ] {
            let o = Orientation::ranked(&t, &FaultSet::none()).unwrap();
            let pre = Preprocessed::compute(&o);
            let ids: Vec<u64> = (0..t.num_hosts() as u64).collect();
            assert_eq!(pre.tnid, ids, "{}: topological NIDs = NIDs", t.name);
            let a = dmodc(&t, &FaultSet::none()).unwrap();
            let b = dmodk(&t).unwrap();
            assert_eq!(a.switches, b.switches, "{}", t.name);
        }
    }

    #[test]
    fn dividers_reproduce_w_products() {
        let t = pg(&[4, 4, 6], &[1, 2, 2], &[1, 1, 1]);
        let o = Orientation::ranked(&t, &FaultSet::none()).unwrap();
        let pre = Preprocessed::compute(&o);
        for (s, sw) in t.switches.iter().enumerate() {
            let expect = [1, 2, 4][sw.level.unwrap() as usize];
            assert_eq!(pre.divider[s], expect, "{}", sw.name);
        }
    }

    #[test]
    fn stepper_matches_the_closed_form() {
        let groups: Vec<PortGroup> = (0..3)
            .map(|g| PortGroup {
                remote: g,
                ports: (0..(g + 1)).map(|j| ((10 * g + j) as PortNo, 0)).collect(),
            })
            .collect();
        for (c, div, t0) in [
            (vec![0, 1, 2], 4u64, 7u64),
            (vec![2, 0], 1, 0),
            (vec![1], 3, 5),
            (vec![2], 2, 3),
        ] {
            let mut st = Stepper::new(t0, div, &groups, &c);
            for t in t0..t0 + 50 {
                assert_eq!(st.port(&groups, &c), select_port(&groups, &c, t, div));
                st.advance();
            }
            let hosts: Vec<(PortNo, HostId)> = (0..50).map(|i| (0, i)).collect();
            let mut ports = vec![None; 50];
            Stepper::new(t0, div, &groups, &c).fill(
                &groups,
                &c,
                &hosts,
                &mut ports,
                &mut Vec::new(),
            );
            for (i, p) in ports.iter().enumerate() {
                assert_eq!(*p, Some(select_port(&groups, &c, t0 + i as u64, div)));
            }
        }
    }

    #[test]
    fn fig_4_4_port_choice() {
        // Π_s = 4, d = 20, two candidate upgroups of 3 ports: group 1, port 2.
        let groups: Vec<PortGroup> = (0..2)
            .map(|g| PortGroup {
                remote: g,
                ports: (0..3).map(|j| ((10 * g + j) as PortNo, 0)).collect(),
            })
            .collect();
        assert_eq!(select_port(&groups, &[0, 1], 20, 4), 12);
    }

    #[test]
    fn routes_degraded_trees_and_keeps_levels() {
        let t = pg(&[4, 4, 6], &[1, 2, 2], &[1, 1, 1]);
        // Remove a leaf uplink, an L2 uplink and a top switch.
        let l1 = t.link_at(crate::topology::PortRef::switch(0, 4)).unwrap();
        let l2 = t.link_at(crate::topology::PortRef::switch(30, 4)).unwrap();
        let faults = FaultSet {
            links: [l1, l2].into(),
            switches: [37].into(),
        };
        let o = Orientation::ranked(&t, &faults).unwrap();
        for (s, sw) in t.switches.iter().enumerate() {
            if s != 37 {
                assert_eq!(o.level[s], sw.level);
            }
        }
        let tables = dmodc(&t, &faults).unwrap();
        let r = check(&t, &faults, &tables, &CheckOptions::default());
        assert!(r.is_ok(), "{:?}", r.failures);
        assert_eq!(r.delivered, 96 * 95);
        // Levels are fixed, so old and new tables mix without deadlock (§5).
        let before = dmodc(&t, &FaultSet::none()).unwrap();
        assert_eq!(
            crate::routing::checker::check_transition(&t, &faults, &before, &tables),
            None
        );
        // Dmodk ignores the faults and the checker says so.
        let k = dmodk(&t).unwrap();
        assert!(!check(&t, &faults, &k, &CheckOptions::default()).is_ok());
    }

    #[test]
    fn routes_leaves_at_several_levels() {
        let t = crate::routing::ranking::tests::tree_with_high_leaf();
        let tables = dmodc(&t, &FaultSet::none()).unwrap();
        let r = check(&t, &FaultSet::none(), &tables, &CheckOptions::default());
        assert!(r.is_ok(), "{:?}", r.failures);
        assert_eq!(r.delivered, 66 * 65);
    }

    #[test]
    fn routes_an_irregular_tree() {
        // Leaves of different up-arity, a parallel pair, spines of different
        // down-arity (seed 001 §3.3 IFT case 2).
        use crate::topology::{Family, PortRef};
        let mut t = Topology::new("ift", Family::Custom);
        for l in 0..3u32 {
            t.add_switch(format!("leaf{l}"), 6);
        }
        for s in 0..3u32 {
            t.add_switch(format!("spine{s}"), 6);
        }
        for l in 0..3u32 {
            for j in 0..2u16 {
                let h = t.add_host(format!("h{}", 2 * l + j as u32), 1);
                t.connect(PortRef::host(h, 0), PortRef::switch(l, j), true)
                    .unwrap();
            }
        }
        let cables = [
            (0, 2, 3, 0),
            (0, 3, 4, 0),
            (0, 4, 5, 0),
            (1, 2, 3, 1),
            (1, 3, 3, 2),
            (1, 4, 4, 1),
            (2, 2, 4, 2),
            (2, 3, 5, 1),
        ];
        for (a, pa, b, pb) in cables {
            t.connect(PortRef::switch(a, pa), PortRef::switch(b, pb), true)
                .unwrap();
        }
        let tables = dmodc(&t, &FaultSet::none()).unwrap();
        let r = check(&t, &FaultSet::none(), &tables, &CheckOptions::default());
        assert!(r.is_ok(), "{:?}", r.failures);
        assert_eq!(r.delivered, 30);
        // Leaf 1 spreads over its parallel pair to spine 0 and spine 1.
        let used: std::collections::BTreeSet<_> = (2..6)
            .filter_map(|d| tables.switches[1].lookup(d))
            .collect();
        assert!(used.len() >= 2, "{used:?}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]
        #[test]
        fn random_faults_keep_every_up_down_pair_routed(seed in 0u64..1000, links in 0usize..12, switches in 0usize..3) {
            use rand::seq::SliceRandom;
            use rand::SeedableRng;
            let t = pg(&[4, 4, 6], &[1, 2, 2], &[1, 1, 1]);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut all: Vec<u32> = (0..t.links.len() as u32)
                .filter(|&l| matches!(t.links[l as usize].a.node, crate::topology::NodeRef::Switch(_)))
                .collect();
            all.shuffle(&mut rng);
            let mut sw: Vec<u32> = (24..40).collect();
            sw.shuffle(&mut rng);
            let faults = FaultSet {
                links: all.into_iter().take(links).collect(),
                switches: sw.into_iter().take(switches).collect(),
            };
            let o = Orientation::ranked(&t, &faults).unwrap();
            let pre = Preprocessed::compute(&o);
            let cut = pre.unroutable_leaf_pairs(&o);
            let tables = dmodc(&t, &faults).unwrap();
            let r = check(&t, &faults, &tables, &CheckOptions::default());
            // No cycle, no loop, no fault crossed; only up*/down*-cut pairs unrouted.
            proptest::prop_assert!(r.cycle().is_none());
            let mut cut_pairs = 0u64;
            for s in 0..96u32 {
                // Pairs cut off by the faults altogether are not routing failures.
                let dist = t.distances_from(crate::topology::NodeRef::Host(s), &faults);
                for d in 0..96u32 {
                    if let (Some(a), Some(b)) = (o.host_leaf[s as usize], o.host_leaf[d as usize]) {
                        cut_pairs += u64::from(cut.contains(&(a.0, b.0)) && dist[d as usize].is_some());
                    }
                }
            }
            proptest::prop_assert_eq!(r.failed_pairs, cut_pairs);
            let only_no_route = r
                .failures
                .iter()
                .all(|f| matches!(f, crate::routing::checker::CheckFailure::NoRoute { .. }));
            proptest::prop_assert!(only_no_route, "{:?}", r.failures);
        }
    }
}
