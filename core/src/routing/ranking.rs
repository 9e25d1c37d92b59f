//! Level discovery and link orientation for the fat-tree engines.
//!
//! - [`rank_from_leaves`]: seed 001 §4.2, Alg. 3 — BFS upwards from the
//!   leaves (switches with hosts); a link between two switches whose ranks
//!   differ by anything but 1 (e.g. two linked leaves) is an inconsistency.
//! - [`Orientation`]: every alive switch's up and down *port groups* (ports
//!   to the same remote switch, §2.1), ordered by remote GUID (our switch id,
//!   which is monotone in the label digits, §3.4 item 5). Built either from
//!   ranks ([`Orientation::ranked`]) — computed on the *intended* topology so
//!   that levels never change across faults (§2.4 super-function argument,
//!   §5, checklist R3) — or from a BFS from a root leaf
//!   ([`Orientation::bfs`], §4.11 Alg. 10, same-depth links dropped, §9 #14).

use crate::topology::{FaultSet, HostId, NodeRef, PortNo, PortRef, SwitchId, Topology};
use std::collections::VecDeque;

/// Why levels could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RankError {
    #[error("no switch has a host attached, so there are no leaves to rank from")]
    NoLeaves,
    #[error("inconsistent ranks: switch {a} (rank {rank_a}) is linked to switch {b} (rank {rank_b}); linked switches must be one level apart")]
    Inconsistent {
        a: String,
        rank_a: u32,
        b: String,
        rank_b: u32,
    },
}

/// Ports of one switch leading to the same remote switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortGroup {
    pub remote: SwitchId,
    /// (local port, remote port), in local port order.
    pub ports: Vec<(PortNo, PortNo)>,
}

/// True if switch `s` has a host cabled to it (regardless of faults).
fn has_host(topo: &Topology, s: SwitchId) -> bool {
    topo.switches[s as usize]
        .ports
        .iter()
        .enumerate()
        .any(|(p, l)| {
            l.is_some()
                && matches!(
                    topo.peer(PortRef::switch(s, p as PortNo)).map(|x| x.node),
                    Some(NodeRef::Host(_))
                )
        })
}

/// True if two switches with hosts are cabled together (direct networks).
fn linked_leaves(topo: &Topology) -> bool {
    let none = FaultSet::none();
    (0..topo.num_switches() as SwitchId).any(|s| {
        has_host(topo, s) && switch_links(topo, &none, s).any(|(_, r, _)| has_host(topo, r))
    })
}

/// Switch neighbours of `s` over alive duplex links to alive switches, with
/// (local port, remote port).
fn switch_links<'a>(
    topo: &'a Topology,
    faults: &'a FaultSet,
    s: SwitchId,
) -> impl Iterator<Item = (PortNo, SwitchId, PortNo)> + 'a {
    let sw = &topo.switches[s as usize];
    let alive = !faults.node_failed(NodeRef::Switch(s));
    sw.ports.iter().enumerate().filter_map(move |(p, l)| {
        let l = (*l)?;
        if !alive || !faults.link_alive(topo, l) || !topo.links[l as usize].duplex {
            return None;
        }
        let peer = topo.links[l as usize].other(PortRef::switch(s, p as PortNo))?;
        match peer.node {
            NodeRef::Switch(r) if !faults.node_failed(peer.node) => {
                Some((p as PortNo, r, peer.port))
            }
            _ => None,
        }
    })
}

/// Alg. 3: rank 0 for every leaf, then BFS upwards. Unreached or failed
/// switches get `None`.
pub fn rank_from_leaves(topo: &Topology, faults: &FaultSet) -> Result<Vec<Option<u32>>, RankError> {
    let ns = topo.num_switches();
    let mut rank = vec![None; ns];
    let mut frontier: Vec<SwitchId> = (0..ns as SwitchId)
        .filter(|&s| !faults.node_failed(NodeRef::Switch(s)) && has_host(topo, s))
        .collect();
    if frontier.is_empty() {
        return Err(RankError::NoLeaves);
    }
    for &l in &frontier {
        rank[l as usize] = Some(0u32);
    }
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for &s in &frontier {
            let rs = rank[s as usize].unwrap_or(0);
            for (_, r, _) in switch_links(topo, faults, s) {
                match rank[r as usize] {
                    None => {
                        rank[r as usize] = Some(rs + 1);
                        next.push(r);
                    }
                    Some(rr) if rr.abs_diff(rs) == 1 => {}
                    Some(rr) => {
                        return Err(RankError::Inconsistent {
                            a: topo.switches[s as usize].name.clone(),
                            rank_a: rs,
                            b: topo.switches[r as usize].name.clone(),
                            rank_b: rr,
                        })
                    }
                }
            }
        }
        frontier = next;
    }
    Ok(rank)
}

/// Annex 2's resilient top-switch criterion: for each switch the smallest
/// most frequent (mode) hop distance to the hosts; the tops are the switches
/// with the smallest mode. Needs no levels, so it works on irregular trees
/// (leaves at several levels). One BFS per switch: O(#S·(#S+#E)).
pub fn resilient_tops(topo: &Topology, faults: &FaultSet) -> Vec<SwitchId> {
    let nh = topo.num_hosts();
    let mut best = u32::MAX;
    let mut tops = Vec::new();
    for s in 0..topo.num_switches() as SwitchId {
        if faults.node_failed(NodeRef::Switch(s)) {
            continue;
        }
        let dist = topo.distances_from(NodeRef::Switch(s), faults);
        let mut hist: Vec<u32> = Vec::new();
        for d in dist[..nh].iter().flatten() {
            let d = *d as usize;
            if hist.len() <= d {
                hist.resize(d + 1, 0);
            }
            hist[d] += 1;
        }
        let Some(max) = hist.iter().copied().max().filter(|&m| m > 0) else {
            continue;
        };
        let mode = hist.iter().position(|&c| c == max).unwrap_or(0) as u32;
        if mode < best {
            best = mode;
            tops.clear();
        }
        if mode == best {
            tops.push(s);
        }
    }
    tops
}

/// Ranks downwards from `tops` (§4.2): BFS depth from the tops, mapped to
/// `rank = max depth − depth`, so leaves hanging off upper levels get a
/// higher rank than the others.
pub fn rank_from_tops(topo: &Topology, faults: &FaultSet, tops: &[SwitchId]) -> Vec<Option<u32>> {
    let ns = topo.num_switches();
    let mut depth = vec![None; ns];
    let mut queue = VecDeque::new();
    for &t in tops {
        if depth[t as usize].is_none() && !faults.node_failed(NodeRef::Switch(t)) {
            depth[t as usize] = Some(0u32);
            queue.push_back(t);
        }
    }
    while let Some(s) = queue.pop_front() {
        let d = depth[s as usize].unwrap_or(0);
        for (_, r, _) in switch_links(topo, faults, s) {
            if depth[r as usize].is_none() {
                depth[r as usize] = Some(d + 1);
                queue.push_back(r);
            }
        }
    }
    let max = depth.iter().flatten().copied().max().unwrap_or(0);
    depth.iter().map(|d| d.map(|d| max - d)).collect()
}

/// Up/down port groups of every alive switch, plus the leaf/host facts the
/// fat-tree engines need.
#[derive(Clone, Debug)]
pub struct Orientation {
    /// Level (rank or BFS depth); `None` for switches outside the fabric.
    pub level: Vec<Option<u32>>,
    pub up: Vec<Vec<PortGroup>>,
    pub down: Vec<Vec<PortGroup>>,
    /// Alive switches with a host cabled, in id (GUID) order.
    pub leaves: Vec<SwitchId>,
    /// Index of a switch in `leaves`.
    pub leaf_index: Vec<Option<u32>>,
    /// Per switch: (port, host) of alive host links, in port order.
    pub endports: Vec<Vec<(PortNo, HostId)>>,
    /// Per host: the alive (leaf, port) it injects through and is reached by.
    pub host_leaf: Vec<Option<(SwitchId, PortNo)>>,
}

impl Orientation {
    /// Orients links from per-switch levels: higher level = up; equal-level
    /// links are dropped. Switches with no level or failed are left out.
    pub fn from_levels(topo: &Topology, faults: &FaultSet, levels: &[Option<u32>]) -> Self {
        let ns = topo.num_switches();
        let mut level = levels.to_vec();
        level.resize(ns, None);
        for (s, l) in level.iter_mut().enumerate() {
            if faults.node_failed(NodeRef::Switch(s as SwitchId)) {
                *l = None;
            }
        }
        let mut up = vec![Vec::new(); ns];
        let mut down = vec![Vec::new(); ns];
        for s in 0..ns as SwitchId {
            let Some(ls) = level[s as usize] else {
                continue;
            };
            let mut groups: Vec<(bool, PortGroup)> = Vec::new();
            for (p, r, rp) in switch_links(topo, faults, s) {
                let Some(lr) = level[r as usize] else {
                    continue;
                };
                if lr == ls {
                    continue;
                }
                let is_up = lr > ls;
                match groups.iter_mut().find(|(_, g)| g.remote == r) {
                    Some((_, g)) => g.ports.push((p, rp)),
                    None => groups.push((
                        is_up,
                        PortGroup {
                            remote: r,
                            ports: vec![(p, rp)],
                        },
                    )),
                }
            }
            groups.sort_by_key(|(_, g)| g.remote);
            for (is_up, g) in groups {
                if is_up {
                    up[s as usize].push(g);
                } else {
                    down[s as usize].push(g);
                }
            }
        }
        let mut endports = vec![Vec::new(); ns];
        let mut host_leaf = vec![None; topo.num_hosts()];
        for h in 0..topo.num_hosts() as HostId {
            for (_, peer) in topo.out_neighbours(NodeRef::Host(h), faults) {
                if let NodeRef::Switch(s) = peer.node {
                    if level[s as usize].is_none() {
                        continue;
                    }
                    endports[s as usize].push((peer.port, h));
                    if host_leaf[h as usize].is_none() {
                        host_leaf[h as usize] = Some((s, peer.port));
                    }
                }
            }
        }
        for e in &mut endports {
            e.sort_unstable();
        }
        let leaves: Vec<SwitchId> = (0..ns as SwitchId)
            .filter(|&s| level[s as usize].is_some() && has_host(topo, s))
            .collect();
        let mut leaf_index = vec![None; ns];
        for (i, &l) in leaves.iter().enumerate() {
            leaf_index[l as usize] = Some(i as u32);
        }
        Orientation {
            level,
            up,
            down,
            leaves,
            leaf_index,
            endports,
            host_leaf,
        }
    }

    /// Ranks on the *intended* topology (no faults), so a fault never moves
    /// a switch to another level, then orients the alive links. Ranking is
    /// from the leaves (Alg. 3); if that finds an inconsistency (irregular
    /// trees with leaves at several levels), the generator's levels are used
    /// when every switch has one, else ranks come down from the Annex 2
    /// resilient tops. Meshes and other non-trees are refused: linked leaves
    /// are an inconsistency, and a top-down ranking of them would put two
    /// hosts' switches on one level.
    pub fn ranked(topo: &Topology, faults: &FaultSet) -> Result<Self, RankError> {
        let intended = FaultSet::none();
        let levels = match rank_from_leaves(topo, &intended) {
            Ok(l) => l,
            Err(e) => {
                if topo.switches.iter().all(|s| s.level.is_some()) {
                    topo.switches.iter().map(|s| s.level).collect()
                } else if linked_leaves(topo) {
                    return Err(e);
                } else {
                    rank_from_tops(topo, &intended, &resilient_tops(topo, &intended))
                }
            }
        };
        Ok(Self::from_levels(topo, faults, &levels))
    }

    /// Alg. 10: BFS depth from a root leaf (the alive switch with a host and
    /// the smallest id) over the degraded fabric; up = towards the root.
    pub fn bfs(topo: &Topology, faults: &FaultSet) -> Result<Self, RankError> {
        let ns = topo.num_switches();
        let is_leaf = |s: SwitchId| {
            !faults.node_failed(NodeRef::Switch(s))
                && topo
                    .out_neighbours(NodeRef::Switch(s), faults)
                    .iter()
                    .any(|(_, p)| matches!(p.node, NodeRef::Host(_)))
        };
        let mut depth: Vec<Option<u32>> = vec![None; ns];
        let mut levels: Vec<Option<u32>> = vec![None; ns];
        let mut any_root = false;
        // One BFS per connected component, each from its smallest leaf.
        for root in 0..ns as SwitchId {
            if depth[root as usize].is_some() || !is_leaf(root) {
                continue;
            }
            any_root = true;
            depth[root as usize] = Some(0u32);
            let mut component = vec![root];
            let mut queue = VecDeque::from([root]);
            while let Some(s) = queue.pop_front() {
                let d = depth[s as usize].unwrap_or(0);
                for (_, r, _) in switch_links(topo, faults, s) {
                    if depth[r as usize].is_none() {
                        depth[r as usize] = Some(d + 1);
                        component.push(r);
                        queue.push_back(r);
                    }
                }
            }
            // The root is the *top*: level = max depth − depth, so "up" is
            // towards the root and every pair has an up*/down* path through
            // it (Autonet). Orienting the other way (root at the bottom)
            // leaves e.g. the root leaf's siblings with no up-neighbour.
            let max = component
                .iter()
                .filter_map(|&s| depth[s as usize])
                .max()
                .unwrap_or(0);
            for &s in &component {
                levels[s as usize] = depth[s as usize].map(|d| max - d);
            }
        }
        if !any_root {
            return Err(RankError::NoLeaves);
        }
        Ok(Self::from_levels(topo, faults, &levels))
    }

    /// Switch ids with a level, by ascending level (ties by id).
    pub fn by_level(&self) -> Vec<SwitchId> {
        let mut v: Vec<SwitchId> = (0..self.level.len() as SwitchId)
            .filter(|&s| self.level[s as usize].is_some())
            .collect();
        v.sort_by_key(|&s| (self.level[s as usize], s));
        v
    }

    /// Hosts injected at each leaf (by `host_leaf`), in port order.
    pub fn hosts_by_switch(&self) -> Vec<Vec<(PortNo, HostId)>> {
        let mut v = vec![Vec::new(); self.level.len()];
        for (h, a) in self.host_leaf.iter().enumerate() {
            if let Some((s, p)) = a {
                v[*s as usize].push((*p, h as HostId));
            }
        }
        for x in &mut v {
            x.sort_unstable();
        }
        v
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::topology::generators::{kary_ntree, mesh_or_torus, pgft};
    use crate::topology::PgftParams;

    #[test]
    fn ranks_of_a_pgft_equal_its_generated_levels() {
        let t = pgft(&PgftParams {
            m: vec![4, 4, 6],
            w: vec![1, 2, 2],
            p: vec![1, 1, 1],
        })
        .unwrap();
        let r = rank_from_leaves(&t, &FaultSet::none()).unwrap();
        for (s, sw) in t.switches.iter().enumerate() {
            assert_eq!(r[s], sw.level, "{}", sw.name);
        }
    }

    #[test]
    fn ranks_survive_faults_and_linked_leaves_are_rejected() {
        let t = kary_ntree(2, 3).unwrap();
        // Fail leaf 0's up link to switch 4 and switch 8 (a top).
        let l = t.link_at(PortRef::switch(0, 2)).unwrap();
        let faults = FaultSet {
            links: [l].into(),
            switches: [8].into(),
        };
        let o = Orientation::ranked(&t, &faults).unwrap();
        assert_eq!(o.level[8], None);
        assert_eq!(o.level[4], Some(1));
        assert_eq!(o.up[0].len(), 1);
        assert_eq!(o.up[0][0].remote, 5);
        assert_eq!(o.down[4].len(), 1, "switch 4 lost leaf 0");
        // A mesh has linked leaves: Alg. 3 rejects it.
        let m = mesh_or_torus(&[3, 3], false).unwrap();
        assert!(matches!(
            rank_from_leaves(&m, &FaultSet::none()),
            Err(RankError::Inconsistent { .. })
        ));
    }

    /// The 4-ary 3-tree plus a leaf with two hosts hanging off tops 32 and
    /// 33 (an IFT with leaves at two levels, §3.3 case 4). On a 2-ary tree
    /// the mode criterion picks the L2 switches (half the hosts are 2 hops
    /// away), so the example needs arity 4.
    pub(crate) fn tree_with_high_leaf() -> Topology {
        let mut t = kary_ntree(4, 3).unwrap();
        t.family = crate::topology::Family::Custom;
        let x = t.add_switch("high-leaf", 4);
        for j in 0..2u16 {
            let h = t.add_host(format!("hx{j}"), 1);
            t.connect(PortRef::host(h, 0), PortRef::switch(x, j), true)
                .unwrap();
        }
        t.connect(PortRef::switch(x, 2), PortRef::switch(32, 4), true)
            .unwrap();
        t.connect(PortRef::switch(x, 3), PortRef::switch(33, 4), true)
            .unwrap();
        for s in &mut t.switches {
            s.level = None;
        }
        t
    }

    #[test]
    fn leaves_at_several_levels_are_ranked_from_the_resilient_tops() {
        let t = tree_with_high_leaf();
        assert!(rank_from_leaves(&t, &FaultSet::none()).is_err());
        let tops = resilient_tops(&t, &FaultSet::none());
        assert_eq!(tops, (32..48).collect::<Vec<_>>());
        let o = Orientation::ranked(&t, &FaultSet::none()).unwrap();
        assert_eq!(o.level[0], Some(0));
        assert_eq!(o.level[16], Some(1));
        assert_eq!(o.level[32], Some(2));
        assert_eq!(o.level[48], Some(1), "the high leaf sits at level 1");
        assert_eq!(o.leaves.len(), 17);
    }

    #[test]
    fn bfs_orientation_is_by_depth_from_the_root_leaf() {
        let m = mesh_or_torus(&[3, 3], false).unwrap();
        let o = Orientation::bfs(&m, &FaultSet::none()).unwrap();
        assert_eq!(o.level[0], Some(4));
        assert_eq!(o.level[8], Some(0));
        assert_eq!(o.down[0].len(), 2);
        assert!(o.up[0].is_empty());
        assert_eq!(o.up[8].len(), 2);
        assert_eq!(o.leaves.len(), 9);
    }
}
