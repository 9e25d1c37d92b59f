//! The k-ary n-cube (mesh or torus) geometry the intermediate-node method
//! reasons about (seed 004 §2): coordinates, minimal distances, minimal
//! directions, the two deterministic escape functions and misroute prefixes.
//!
//! Nodes are the routers, numbered by their [`SwitchId`]; links are the
//! switch-to-switch links, numbered 0.. in the order they appear in
//! [`Topology::links`] ("compact" link index; host links are not network
//! links for this method).

use super::IntermediateError;
use crate::topology::generators::direct_port;
use crate::topology::{Family, HostId, LinkId, NodeRef, PortRef, SwitchId, Topology};

/// Longest forced run the 3-bit hop field can express (seed 004 §3.6, §8 item 11).
pub const MAX_RUN_HOPS: u32 = 8;
/// Forced runs per leg: the header has three (direction, hops) slots (§3.10).
pub const MAX_RUNS: usize = 3;

/// A travel direction: index `d` is +d, index `n + d` is −d, so that for
/// three dimensions X+=0, Y+=1, Z+=2, X−=3, Y−=4, Z−=5 — exactly the
/// direction order `X+Y+Z+X−Y−Z−` of seed 004 §3.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Dir(pub u8);

impl Dir {
    pub fn new(dim: usize, positive: bool, ndims: usize) -> Dir {
        Dir((dim + if positive { 0 } else { ndims }) as u8)
    }
    pub fn dim(self, ndims: usize) -> usize {
        self.0 as usize % ndims
    }
    pub fn positive(self, ndims: usize) -> bool {
        (self.0 as usize) < ndims
    }
}

/// A forced run of a misroute prefix: `hops` hops in direction `dir`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Run {
    pub dir: Dir,
    pub hops: u8,
}

/// The deterministic routing function used by escape channels and by D
/// (seed 004 §3.1, §3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum DetOrder {
    /// Dimension order `X±Y±Z±`: finish dimension 0, then 1, …
    Dor,
    /// Direction order `X+Y+Z+X−Y−Z−`: every + move (dimension order), then
    /// every − move.
    DirectionOrder,
}

/// Which minimal directions a dimension needs from a to b.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimMove {
    pub plus: bool,
    pub minus: bool,
    /// Hops needed in this dimension.
    pub hops: u32,
}

/// One switch-to-switch link, with its endpoints as node numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CubeLink {
    pub topo_link: LinkId,
    pub a: u32,
    pub b: u32,
}

/// A mesh or torus, read from a [`Topology`] made by
/// [`crate::topology::generators::mesh_or_torus`] (or any topology with the
/// same family, coordinates and port numbering).
#[derive(Clone, Debug)]
pub struct Cube {
    dims: Vec<u32>,
    wrap: bool,
    coords: Vec<Vec<u32>>,
    /// `step[node * 2n + dir]` = (neighbour, compact link), if that port is cabled.
    step: Vec<Option<(u32, u32)>>,
    links: Vec<CubeLink>,
    /// Topology link id → compact link index (switch links only).
    compact_of: Vec<Option<u32>>,
    /// Host → router it is attached to.
    host_node: Vec<u32>,
    /// Router → lowest host attached to it.
    node_host: Vec<HostId>,
    /// `l(a, b)` for every pair when the network is small enough (the
    /// searches ask for distances in their innermost loops).
    dist_table: Vec<u16>,
}

/// Routers up to which [`Cube`] keeps an n² distance table (2 MiB).
const DIST_TABLE_MAX_NODES: usize = 1024;

impl Cube {
    /// Reads the cube out of `topo`; fails for any other family, or when
    /// coordinates or cabling do not follow the generator's conventions.
    pub fn from_topology(topo: &Topology) -> Result<Cube, IntermediateError> {
        let (dims, wrap) = match &topo.family {
            Family::Mesh { dims } => (dims.clone(), false),
            Family::Torus { dims } => (dims.clone(), true),
            other => {
                return Err(IntermediateError::NotMeshOrTorus {
                    topology: topo.name.clone(),
                    family: format!("{other:?}"),
                })
            }
        };
        let n = dims.len();
        let nodes = topo.switches.len();
        let mut coords = Vec::with_capacity(nodes);
        for sw in &topo.switches {
            match &sw.coords {
                Some(c) if c.len() == n && c.iter().zip(&dims).all(|(x, k)| x < k) => {
                    coords.push(c.clone())
                }
                _ => {
                    return Err(IntermediateError::BadCoordinates {
                        switch: sw.name.clone(),
                    })
                }
            }
        }
        let mut compact_of = vec![None; topo.links.len()];
        let mut links = Vec::new();
        for (i, l) in topo.links.iter().enumerate() {
            if let (NodeRef::Switch(a), NodeRef::Switch(b)) = (l.a.node, l.b.node) {
                compact_of[i] = Some(links.len() as u32);
                links.push(CubeLink {
                    topo_link: i as LinkId,
                    a,
                    b,
                });
            }
        }
        let mut step = vec![None; nodes * 2 * n];
        for s in 0..nodes {
            for d in 0..n {
                for positive in [true, false] {
                    let port = PortRef::switch(s as SwitchId, direct_port(d, positive));
                    let (Some(l), Some(peer)) = (topo.link_at(port), topo.peer(port)) else {
                        continue;
                    };
                    let NodeRef::Switch(t) = peer.node else {
                        return Err(IntermediateError::BadCabling {
                            switch: topo.switches[s].name.clone(),
                            port: port.port,
                        });
                    };
                    // The neighbour must be one step away along d.
                    let k = dims[d];
                    let (a, b) = (coords[s][d], coords[t as usize][d]);
                    let expected = if positive {
                        (a + 1) % k
                    } else {
                        (a + k - 1) % k
                    };
                    let same_elsewhere =
                        (0..n).all(|e| e == d || coords[s][e] == coords[t as usize][e]);
                    if b != expected || !same_elsewhere {
                        return Err(IntermediateError::BadCabling {
                            switch: topo.switches[s].name.clone(),
                            port: port.port,
                        });
                    }
                    let c = compact_of[l as usize].expect("switch-switch link");
                    step[s * 2 * n + Dir::new(d, positive, n).0 as usize] = Some((t, c));
                }
            }
        }
        let mut host_node = Vec::with_capacity(topo.hosts.len());
        let mut node_host = vec![HostId::MAX; nodes];
        for h in &topo.hosts {
            let att = topo.host_attachments(h.id);
            let Some(NodeRef::Switch(s)) = att.first().map(|(_, p)| p.node) else {
                return Err(IntermediateError::HostNotAttached {
                    host: h.name.clone(),
                });
            };
            host_node.push(s);
            node_host[s as usize] = node_host[s as usize].min(h.id);
        }
        if let Some(s) = node_host.iter().position(|&h| h == HostId::MAX) {
            return Err(IntermediateError::RouterWithoutHost {
                switch: topo.switches[s].name.clone(),
            });
        }
        let mut cube = Cube {
            dims,
            wrap,
            coords,
            step,
            links,
            compact_of,
            host_node,
            node_host,
            dist_table: Vec::new(),
        };
        if nodes <= DIST_TABLE_MAX_NODES {
            let table = (0..nodes as u32)
                .flat_map(|a| (0..nodes as u32).map(move |b| (a, b)))
                .map(|(a, b)| cube.dist_from_coords(a, b) as u16)
                .collect();
            cube.dist_table = table;
        }
        Ok(cube)
    }

    pub fn ndims(&self) -> usize {
        self.dims.len()
    }
    pub fn dims(&self) -> &[u32] {
        &self.dims
    }
    pub fn is_torus(&self) -> bool {
        self.wrap
    }
    pub fn num_nodes(&self) -> usize {
        self.coords.len()
    }
    /// Number of switch-to-switch links (81 in the 3×3×3 torus).
    pub fn num_links(&self) -> usize {
        self.links.len()
    }
    pub fn link(&self, c: u32) -> CubeLink {
        self.links[c as usize]
    }
    /// Compact index of a topology link, if it is a switch-to-switch link.
    pub fn compact_link(&self, l: LinkId) -> Option<u32> {
        self.compact_of.get(l as usize).copied().flatten()
    }
    /// Topology link id of a compact link index.
    pub fn topo_link(&self, c: u32) -> LinkId {
        self.links[c as usize].topo_link
    }
    pub fn coords(&self, node: u32) -> &[u32] {
        &self.coords[node as usize]
    }
    /// Router a host is attached to.
    pub fn node_of_host(&self, h: HostId) -> Option<u32> {
        self.host_node.get(h as usize).copied()
    }
    /// The host that stands for a router when it serves as an intermediate node.
    pub fn host_of_node(&self, node: u32) -> HostId {
        self.node_host[node as usize]
    }

    /// Neighbour and link one hop from `node` in `dir`, if cabled.
    pub fn step(&self, node: u32, dir: Dir) -> Option<(u32, u32)> {
        self.step[node as usize * 2 * self.ndims() + dir.0 as usize]
    }

    /// What dimension `d` needs from `a` to `b` (seed 004 §2 "Distances"). In
    /// an even ring at offset k/2 both directions are minimal (§8 item 12).
    pub fn dim_move(&self, d: usize, a: u32, b: u32) -> DimMove {
        let (x, y, k) = (
            self.coords[a as usize][d],
            self.coords[b as usize][d],
            self.dims[d],
        );
        if x == y {
            return DimMove {
                plus: false,
                minus: false,
                hops: 0,
            };
        }
        if !self.wrap {
            return DimMove {
                plus: y > x,
                minus: y < x,
                hops: x.abs_diff(y),
            };
        }
        let fwd = (y + k - x) % k;
        let back = k - fwd;
        DimMove {
            plus: fwd <= back,
            minus: back <= fwd,
            hops: fwd.min(back),
        }
    }

    /// Fault-free minimal hop distance `l(a, b)`.
    pub fn dist(&self, a: u32, b: u32) -> u32 {
        if self.dist_table.is_empty() {
            self.dist_from_coords(a, b)
        } else {
            self.dist_table[a as usize * self.coords.len() + b as usize] as u32
        }
    }

    fn dist_from_coords(&self, a: u32, b: u32) -> u32 {
        (0..self.ndims()).map(|d| self.dim_move(d, a, b).hops).sum()
    }

    /// True iff compact link `c` lies on some minimal path from `a` to `b`
    /// (seed 004 §3.3: `l(a,u)+1+l(v,b) = l(a,b)` in either orientation).
    pub fn link_on_minimal_path(&self, c: u32, a: u32, b: u32) -> bool {
        let CubeLink { a: u, b: v, .. } = self.links[c as usize];
        let l = self.dist(a, b);
        self.dist(a, u) + 1 + self.dist(v, b) == l || self.dist(a, v) + 1 + self.dist(u, b) == l
    }

    /// Next direction of the deterministic function from `u` to `t`, `None`
    /// at the target. Ties (offset k/2) go +, as §8 item 12 suggests.
    pub fn det_next(&self, order: DetOrder, u: u32, t: u32) -> Option<Dir> {
        let n = self.ndims();
        let moves = (0..n)
            .map(|d| (d, self.dim_move(d, u, t)))
            .filter(|(_, m)| m.hops > 0);
        match order {
            DetOrder::Dor => moves.map(|(d, m)| Dir::new(d, m.plus, n)).next(),
            DetOrder::DirectionOrder => moves.map(|(d, m)| Dir::new(d, m.plus, n)).min(),
        }
    }

    /// Walks the deterministic path from `u` to `t`, calling `visit` with each
    /// compact link; stops early (returning false) when `visit` does.
    pub fn walk_det(
        &self,
        order: DetOrder,
        mut u: u32,
        t: u32,
        mut visit: impl FnMut(u32) -> bool,
    ) -> bool {
        while let Some(dir) = self.det_next(order, u, t) {
            let Some((next, link)) = self.step(u, dir) else {
                return false;
            };
            if !visit(link) {
                return false;
            }
            u = next;
        }
        true
    }

    /// True iff every minimal direction from `e` to `t` has an index at least
    /// `last` — the order constraint on a misroute remainder (seed 004 §3.6).
    pub fn remainder_in_order(&self, e: u32, t: u32, last: Dir) -> bool {
        let n = self.ndims();
        (0..n).all(|d| {
            let m = self.dim_move(d, e, t);
            (!m.plus || Dir::new(d, true, n) >= last) && (!m.minus || Dir::new(d, false, n) >= last)
        })
    }

    /// Enumerates the misroute prefixes from `u` allowed by seed 004 §3.6
    /// [verified]: 1..=3 runs, direction indices strictly increasing, each
    /// dimension at most once, `1 ≤ h ≤ min(8, k−1)`, every link walked
    /// accepted by `link_ok` (unsafe runs are cut at the first bad link).
    /// `visit(runs, end, length, links)` is called once per prefix.
    ///
    /// `keep(node, length)` prunes: when it returns false after a hop, that
    /// run and everything extending it is skipped. Callers bound the total
    /// leg length with it: by the triangle inequality no extension of a
    /// prefix ending at `node` can finish a leg to `v` in fewer than
    /// `length + l(node, v)` hops.
    pub fn for_each_prefix(
        &self,
        u: u32,
        link_ok: &impl Fn(u32) -> bool,
        keep: &impl Fn(u32, u32) -> bool,
        visit: &mut impl FnMut(&[Run], u32, u32, &[u32]),
    ) {
        let mut runs = Vec::with_capacity(MAX_RUNS);
        let mut links = Vec::new();
        let walk = PrefixWalk { link_ok, keep };
        self.extend_prefix(&walk, u, 0, 0, &mut runs, &mut links, visit);
    }

    #[allow(clippy::too_many_arguments)]
    fn extend_prefix<L: Fn(u32) -> bool, K: Fn(u32, u32) -> bool>(
        &self,
        walk: &PrefixWalk<'_, L, K>,
        at: u32,
        first_dir: u8,
        used_dims: u32,
        runs: &mut Vec<Run>,
        links: &mut Vec<u32>,
        visit: &mut impl FnMut(&[Run], u32, u32, &[u32]),
    ) {
        if runs.len() == MAX_RUNS {
            return;
        }
        let n = self.ndims();
        for dir in first_dir..(2 * n) as u8 {
            let dir = Dir(dir);
            let d = dir.dim(n);
            if used_dims & (1 << d) != 0 {
                continue;
            }
            let max_h = MAX_RUN_HOPS.min(self.dims[d] - 1);
            let mark = links.len();
            let mut node = at;
            for h in 1..=max_h {
                let Some((next, link)) = self.step(node, dir) else {
                    break;
                };
                if !(walk.link_ok)(link) || !(walk.keep)(next, links.len() as u32 + 1) {
                    break;
                }
                links.push(link);
                node = next;
                runs.push(Run { dir, hops: h as u8 });
                let len = links.len() as u32;
                visit(runs, node, len, links);
                self.extend_prefix(
                    walk,
                    node,
                    dir.0 + 1,
                    used_dims | (1 << d),
                    runs,
                    links,
                    visit,
                );
                runs.pop();
            }
            links.truncate(mark);
        }
    }
}

/// The two callbacks steering a prefix enumeration.
struct PrefixWalk<'f, L, K> {
    link_ok: &'f L,
    keep: &'f K,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::mesh_or_torus;

    fn torus333() -> Cube {
        Cube::from_topology(&mesh_or_torus(&[3, 3, 3], true).unwrap()).unwrap()
    }

    #[test]
    fn torus_333_has_81_links_and_unique_minimal_directions() {
        let c = torus333();
        assert_eq!(c.num_links(), 81);
        assert_eq!(c.num_nodes(), 27);
        for a in 0..27 {
            for b in 0..27 {
                for d in 0..3 {
                    let m = c.dim_move(d, a, b);
                    assert!(!(m.plus && m.minus), "odd k has one minimal direction");
                }
                assert!(c.dist(a, b) <= 3);
            }
        }
    }

    #[test]
    fn a_single_link_blocks_50_ordered_pairs() {
        // Seed 004 §6.2 "Single fault": 50 affected ordered pairs per link.
        let c = torus333();
        for l in 0..81 {
            let n = (0..27)
                .flat_map(|a| (0..27).map(move |b| (a, b)))
                .filter(|&(a, b)| c.link_on_minimal_path(l, a, b))
                .count();
            assert_eq!(n, 50, "link {l}");
        }
    }

    #[test]
    fn there_are_124_prefixes_per_node_in_the_3_ary_3_cube() {
        // Seed 004 §3.6: 12 + 48 + 64.
        let c = torus333();
        for u in 0..27 {
            let mut by_runs = [0usize; 4];
            c.for_each_prefix(u, &|_| true, &|_, _| true, &mut |runs, _, _, _| {
                by_runs[runs.len()] += 1
            });
            assert_eq!(by_runs, [0, 12, 48, 64]);
        }
    }

    #[test]
    fn direction_order_takes_plus_moves_first() {
        let c = torus333();
        // From (0,0,0) to (2,1,0): X needs −1, Y needs +1.
        let t = 2 + 3;
        assert_eq!(c.det_next(DetOrder::Dor, 0, t), Some(Dir(3)));
        assert_eq!(c.det_next(DetOrder::DirectionOrder, 0, t), Some(Dir(1)));
        let mut hops = 0;
        assert!(c.walk_det(DetOrder::DirectionOrder, 0, t, |_| {
            hops += 1;
            true
        }));
        assert_eq!(hops, 2);
    }

    #[test]
    fn mesh_distances_have_no_wraparound() {
        let c = Cube::from_topology(&mesh_or_torus(&[4, 4], false).unwrap()).unwrap();
        assert_eq!(c.num_links(), 24);
        assert_eq!(c.dist(0, 3), 3);
        assert_eq!(c.dist(0, 15), 6);
    }

    #[test]
    fn other_families_are_rejected() {
        let t = crate::topology::generators::kary_ntree(2, 2).unwrap();
        assert!(matches!(
            Cube::from_topology(&t),
            Err(IntermediateError::NotMeshOrTorus { .. })
        ));
    }
}
