//! Placement of a fabric on several machines: a balanced partition of its
//! nodes (one process each, hosts and switches alike) into `parts` that
//! keeps as many links as possible inside one part.
//!
//! Three starting points, each refined by the same k-way Fiduccia–Mattheyses
//! pass (single-node moves in gain order, with the best balanced prefix kept;
//! *A Linear-Time Heuristic for Improving Network Partitions*):
//!
//! * **subtrees** (fabrics whose switches have levels: k-ary n-trees, PGFTs,
//!   RUFTs): hosts in NID order, which numbers the leaves of one subtree
//!   consecutively, cut into equal runs; then switches level by level,
//!   bottom up, each to the part it has most links into (while that part has
//!   room), so that whole pods stay together and the top stage is spread;
//! * **bisection** (fabrics whose switches have coordinates: meshes, tori,
//!   hypercubes): recursive coordinate bisection across the longest
//!   dimension, hosts with their switch;
//! * **graph growing** (every fabric, the only one for irregular ones): the
//!   breadth-first order from a pseudo-peripheral node, cut into equal runs.
//!
//! The partition with the fewest cut links wins. A hand-written refinement
//! rather than a crate: `coupe` brings rayon threads (the core is sans-IO)
//! and `metis` needs the C library; fabrics have at most 10⁵ nodes, where
//! one FM pass takes milliseconds.
//!
//! [`random_balanced`] is the baseline the tests and `flitctl compose`
//! compare against: the same part sizes, nodes dealt at random.

use super::{NodeRef, Topology};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// How a partition was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionMethod {
    /// Whole subtrees per part (levelled fabrics), refined.
    Subtrees,
    /// Recursive coordinate bisection (direct networks), refined.
    Bisection,
    /// Breadth-first graph growing, refined.
    GraphGrowing,
    /// Nodes dealt at random (the baseline).
    Random,
}

impl PartitionMethod {
    pub fn name(&self) -> &'static str {
        match self {
            PartitionMethod::Subtrees => "subtrees",
            PartitionMethod::Bisection => "bisection",
            PartitionMethod::GraphGrowing => "graph-growing",
            PartitionMethod::Random => "random",
        }
    }
}

/// Why a fabric cannot be partitioned as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error("a fabric is placed on at least one machine (asked for 0)")]
    NoParts,
    #[error("{parts} machines for {nodes} processes: every machine needs at least one process")]
    MorePartsThanNodes { parts: usize, nodes: usize },
}

/// Which part (machine) every node runs on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub parts: usize,
    /// Part of every node, hosts first then switches (the order of
    /// [`Topology::nodes`]).
    pub assignment: Vec<u32>,
    pub method: PartitionMethod,
}

/// What a partition costs: processes per part and links cut.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionSummary {
    pub parts: usize,
    pub method: PartitionMethod,
    /// Processes (hosts + switches) per part.
    pub processes: Vec<usize>,
    pub hosts: Vec<usize>,
    pub switches: Vec<usize>,
    /// Links whose ends are in different parts.
    pub cut_links: usize,
    /// All links of the fabric (host links included).
    pub links: usize,
}

impl PartitionSummary {
    /// Cut links as a share of all links, 0..=1.
    pub fn cut_share(&self) -> f64 {
        if self.links == 0 {
            0.0
        } else {
            self.cut_links as f64 / self.links as f64
        }
    }
}

fn index(topo: &Topology, node: NodeRef) -> usize {
    match node {
        NodeRef::Host(h) => h as usize,
        NodeRef::Switch(s) => topo.hosts.len() + s as usize,
    }
}

impl Partition {
    /// The part `node` runs on.
    pub fn part_of(&self, topo: &Topology, node: NodeRef) -> usize {
        self.assignment[index(topo, node)] as usize
    }

    /// Links whose two ends run on different parts, by link id.
    pub fn cut_links(&self, topo: &Topology) -> Vec<u32> {
        topo.links
            .iter()
            .enumerate()
            .filter(|(_, l)| self.part_of(topo, l.a.node) != self.part_of(topo, l.b.node))
            .map(|(i, _)| i as u32)
            .collect()
    }

    pub fn summary(&self, topo: &Topology) -> PartitionSummary {
        let mut processes = vec![0; self.parts];
        let mut hosts = vec![0; self.parts];
        let mut switches = vec![0; self.parts];
        for node in topo.nodes() {
            let p = self.part_of(topo, node);
            processes[p] += 1;
            match node {
                NodeRef::Host(_) => hosts[p] += 1,
                NodeRef::Switch(_) => switches[p] += 1,
            }
        }
        PartitionSummary {
            parts: self.parts,
            method: self.method,
            processes,
            hosts,
            switches,
            cut_links: self.cut_links(topo).len(),
            links: topo.links.len(),
        }
    }
}

/// The fabric as a weighted graph: node i's neighbours with the number of
/// links between them.
struct Graph {
    adj: Vec<Vec<(u32, u32)>>,
    /// Processes each vertex stands for.
    weight: Vec<i64>,
}

impl Graph {
    fn of(topo: &Topology) -> Graph {
        let n = topo.hosts.len() + topo.switches.len();
        Graph::build(topo, (0..n).collect(), n)
    }

    /// The fabric with every host that hangs off one switch merged into
    /// that switch (one level of multilevel coarsening): moving a switch
    /// then moves its hosts, which single-node moves on the full graph
    /// never do (each host move alone cuts a link). Returns the coarse
    /// graph and the coarse vertex of every node.
    fn coarse(topo: &Topology) -> (Graph, Vec<usize>) {
        let h = topo.hosts.len();
        let n = h + topo.switches.len();
        let mut map = vec![usize::MAX; n];
        for s in 0..topo.switches.len() {
            map[h + s] = s;
        }
        let mut next = topo.switches.len();
        for host in &topo.hosts {
            let mut homes: Vec<u32> = topo
                .host_attachments(host.id)
                .iter()
                .filter_map(|(_, p)| match p.node {
                    NodeRef::Switch(s) => Some(s),
                    NodeRef::Host(_) => None,
                })
                .collect();
            homes.dedup();
            map[host.id as usize] = match homes.as_slice() {
                [s] => *s as usize,
                _ => {
                    next += 1;
                    next - 1
                }
            };
        }
        (Graph::build(topo, map.clone(), next), map)
    }

    /// The graph of `topo` with node i merged into vertex `map[i]`.
    fn build(topo: &Topology, map: Vec<usize>, vertices: usize) -> Graph {
        let mut adj: Vec<Vec<(u32, u32)>> = vec![Vec::new(); vertices];
        let mut weight = vec![0i64; vertices];
        for &v in &map {
            weight[v] += 1;
        }
        for l in &topo.links {
            let (a, b) = (map[index(topo, l.a.node)], map[index(topo, l.b.node)]);
            if a == b {
                continue;
            }
            adj[a].push((b as u32, 1));
            adj[b].push((a as u32, 1));
        }
        for list in &mut adj {
            list.sort_unstable();
            let mut merged: Vec<(u32, u32)> = Vec::with_capacity(list.len());
            for &(v, w) in list.iter() {
                match merged.last_mut() {
                    Some(last) if last.0 == v => last.1 += w,
                    _ => merged.push((v, w)),
                }
            }
            *list = merged;
        }
        Graph { adj, weight }
    }

    fn len(&self) -> usize {
        self.adj.len()
    }

    fn cut(&self, part: &[u32]) -> u64 {
        let mut cut = 0u64;
        for (v, list) in self.adj.iter().enumerate() {
            for &(u, w) in list {
                if (u as usize) > v && part[u as usize] != part[v] {
                    cut += w as u64;
                }
            }
        }
        cut
    }
}

/// Balanced part sizes: `floor(n/parts)` or one more, larger parts first.
fn capacities(n: usize, parts: usize) -> Vec<usize> {
    (0..parts)
        .map(|i| n / parts + usize::from(i < n % parts))
        .collect()
}

/// Deals `order` into runs of the balanced sizes.
fn chunks(order: &[usize], parts: usize) -> Vec<u32> {
    let caps = capacities(order.len(), parts);
    let mut part = vec![0u32; order.len()];
    let mut i = 0;
    for (p, &cap) in caps.iter().enumerate() {
        for &v in &order[i..i + cap] {
            part[v] = p as u32;
        }
        i += cap;
    }
    part
}

/// Partitions `topo` over `parts` machines, balanced in processes (part
/// sizes differ by at most one), with few links cut.
pub fn partition(topo: &Topology, parts: usize) -> Result<Partition, PartitionError> {
    let g = Graph::of(topo);
    let n = g.len();
    if parts == 0 {
        return Err(PartitionError::NoParts);
    }
    if parts > n {
        return Err(PartitionError::MorePartsThanNodes { parts, nodes: n });
    }
    if parts == 1 {
        return Ok(Partition {
            parts,
            assignment: vec![0; n],
            method: PartitionMethod::GraphGrowing,
        });
    }
    let mut candidates: Vec<(PartitionMethod, Vec<u32>)> = Vec::new();
    if !topo.switches.is_empty() && topo.switches.iter().all(|s| s.level.is_some()) {
        candidates.push((PartitionMethod::Subtrees, subtree_seed(topo, &g, parts)));
    }
    if !topo.switches.is_empty() && topo.switches.iter().all(|s| s.coords.is_some()) {
        candidates.push((PartitionMethod::Bisection, bisection_seed(topo, parts)));
    }
    candidates.push((PartitionMethod::GraphGrowing, growing_seed(&g, parts)));
    let (coarse, map) = Graph::coarse(topo);
    let mut best: Option<(u64, PartitionMethod, Vec<u32>)> = None;
    for (method, seed) in candidates {
        // Refined as it is, and refined first with hosts merged into their
        // switch (then node by node again, for the exact balance).
        let mut direct = seed.clone();
        let mut merged = vec![0u32; coarse.len()];
        for (v, &c) in map.iter().enumerate() {
            if v >= topo.hosts.len() || coarse.weight[c] == 1 {
                merged[c] = seed[v];
            }
        }
        refine(&coarse, &mut merged, parts);
        let mut projected: Vec<u32> = map.iter().map(|&c| merged[c]).collect();
        for part in [&mut direct, &mut projected] {
            rebalance(&g, part, parts);
            refine(&g, part, parts);
            let cut = g.cut(part);
            if best.as_ref().is_none_or(|(c, _, _)| cut < *c) {
                best = Some((cut, method, part.clone()));
            }
        }
    }
    let (_, method, assignment) = best.expect("graph growing always gives a candidate");
    Ok(Partition {
        parts,
        assignment,
        method,
    })
}

/// The baseline: balanced part sizes, nodes dealt at random (`seed`).
pub fn random_balanced(
    topo: &Topology,
    parts: usize,
    seed: u64,
) -> Result<Partition, PartitionError> {
    let n = topo.hosts.len() + topo.switches.len();
    if parts == 0 {
        return Err(PartitionError::NoParts);
    }
    if parts > n {
        return Err(PartitionError::MorePartsThanNodes { parts, nodes: n });
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    Ok(Partition {
        parts,
        assignment: chunks(&order, parts),
        method: PartitionMethod::Random,
    })
}

/// Hosts in NID order in equal runs, then switches bottom-up to the part
/// they have most links into, among parts with room.
fn subtree_seed(topo: &Topology, g: &Graph, parts: usize) -> Vec<u32> {
    let h = topo.hosts.len();
    let n = g.len();
    let caps = capacities(n, parts);
    let host_caps = capacities(h, parts);
    let mut part = vec![u32::MAX; n];
    let mut size = vec![0usize; parts];
    let mut v = 0;
    for (p, &cap) in host_caps.iter().enumerate() {
        for _ in 0..cap {
            part[v] = p as u32;
            size[p] += 1;
            v += 1;
        }
    }
    let mut switches: Vec<usize> = (0..topo.switches.len()).collect();
    switches.sort_by_key(|&s| (topo.switches[s].level, s));
    let mut affinity = vec![0u64; parts];
    for s in switches {
        let v = h + s;
        affinity.iter_mut().for_each(|a| *a = 0);
        for &(u, w) in &g.adj[v] {
            if part[u as usize] != u32::MAX {
                affinity[part[u as usize] as usize] += w as u64;
            }
        }
        let p = (0..parts)
            .filter(|&p| size[p] < caps[p])
            .max_by_key(|&p| (affinity[p], caps[p] - size[p], Reverse(p)))
            // More processes than capacity cannot happen (Σcaps = n); a
            // full fabric still needs a part.
            .unwrap_or(0);
        part[v] = p as u32;
        size[p] += 1;
    }
    part
}

/// Recursive coordinate bisection of the switches (each weighing itself and
/// its hosts); hosts go with the switch they hang off.
fn bisection_seed(topo: &Topology, parts: usize) -> Vec<u32> {
    let h = topo.hosts.len();
    let n = h + topo.switches.len();
    let mut weight = vec![1usize; topo.switches.len()];
    let mut home = vec![None; h];
    for host in &topo.hosts {
        if let Some(s) = topo.switch_of_host(host.id) {
            weight[s as usize] += 1;
            home[host.id as usize] = Some(s as usize);
        }
    }
    let mut switch_part = vec![0u32; topo.switches.len()];
    let coords = |s: usize| topo.switches[s].coords.clone().unwrap_or_default();
    let mut stack: Vec<(Vec<usize>, usize, usize)> =
        vec![((0..topo.switches.len()).collect(), 0, parts)];
    while let Some((mut set, p0, p1)) = stack.pop() {
        if p1 - p0 <= 1 || set.len() <= 1 {
            for s in set {
                switch_part[s] = p0 as u32;
            }
            continue;
        }
        let dims = set.iter().map(|&s| coords(s).len()).max().unwrap_or(0);
        let extent = |d: usize| {
            let vals = set.iter().map(|&s| coords(s).get(d).copied().unwrap_or(0));
            vals.clone().max().unwrap_or(0) - vals.min().unwrap_or(0)
        };
        let d = (0..dims)
            .max_by_key(|&d| (extent(d), Reverse(d)))
            .unwrap_or(0);
        set.sort_by_key(|&s| {
            let c = coords(s);
            let mut key = vec![c.get(d).copied().unwrap_or(0)];
            key.extend(
                c.iter()
                    .enumerate()
                    .filter(|(i, _)| *i != d)
                    .map(|(_, x)| *x),
            );
            key
        });
        let left_parts = (p1 - p0) / 2;
        let total: usize = set.iter().map(|&s| weight[s]).sum();
        let target = total * left_parts / (p1 - p0);
        let mut acc = 0;
        let mut cut_at = 0;
        for (i, &s) in set.iter().enumerate() {
            if acc + weight[s] / 2 >= target {
                break;
            }
            acc += weight[s];
            cut_at = i + 1;
        }
        let cut_at = cut_at.clamp(1, set.len() - 1);
        let right = set.split_off(cut_at);
        stack.push((set, p0, p0 + left_parts));
        stack.push((right, p0 + left_parts, p1));
    }
    let mut part = vec![0u32; n];
    for (host, s) in home.iter().enumerate() {
        part[host] = s.map(|s| switch_part[s]).unwrap_or(0);
    }
    for (s, &p) in switch_part.iter().enumerate() {
        part[h + s] = p;
    }
    part
}

/// Breadth-first order from a pseudo-peripheral node (the farthest node of
/// a breadth-first search from the farthest node of one from node 0), cut
/// into equal runs. Unreachable nodes come last.
fn growing_seed(g: &Graph, parts: usize) -> Vec<u32> {
    let bfs = |start: usize| -> Vec<usize> {
        let mut seen = vec![false; g.len()];
        let mut order = Vec::with_capacity(g.len());
        let mut queue = VecDeque::from([start]);
        seen[start] = true;
        while let Some(v) = queue.pop_front() {
            order.push(v);
            for &(u, _) in &g.adj[v] {
                if !seen[u as usize] {
                    seen[u as usize] = true;
                    queue.push_back(u as usize);
                }
            }
        }
        for (v, s) in seen.iter().enumerate() {
            if !s {
                order.push(v);
            }
        }
        order
    };
    let far = *bfs(0).last().expect("a fabric has nodes");
    let far = *bfs(far).last().expect("a fabric has nodes");
    chunks(&bfs(far), parts)
}

/// Links from `v` into each part, as (part, weight) pairs.
fn connections(g: &Graph, part: &[u32], v: usize, out: &mut Vec<(u32, i64)>) {
    out.clear();
    for &(u, w) in &g.adj[v] {
        let p = part[u as usize];
        match out.iter_mut().find(|(q, _)| *q == p) {
            Some(e) => e.1 += w as i64,
            None => out.push((p, w as i64)),
        }
    }
}

/// Moves nodes out of parts above their balanced size, each time the node
/// (of an over-full part) whose move to an under-full part cuts fewest
/// links.
fn rebalance(g: &Graph, part: &mut [u32], parts: usize) {
    let n = g.len();
    let hi = n.div_ceil(parts);
    let lo = n / parts;
    let mut size = vec![0usize; parts];
    for &p in part.iter() {
        size[p as usize] += 1;
    }
    let mut conn = Vec::new();
    while let Some(over) = (0..parts).find(|&p| size[p] > hi) {
        let under: Vec<usize> = (0..parts).filter(|&p| size[p] < hi).collect();
        let prefer: Vec<usize> = under.iter().copied().filter(|&p| size[p] < lo).collect();
        let targets = if prefer.is_empty() { under } else { prefer };
        let mut best: Option<(i64, usize, usize)> = None;
        for v in (0..n).filter(|&v| part[v] as usize == over) {
            connections(g, part, v, &mut conn);
            let internal = conn
                .iter()
                .find(|(p, _)| *p as usize == over)
                .map_or(0, |e| e.1);
            for &t in &targets {
                let to = conn
                    .iter()
                    .find(|(p, _)| *p as usize == t)
                    .map_or(0, |e| e.1);
                let gain = to - internal;
                if best.is_none_or(|(g, _, _)| gain > g) {
                    best = Some((gain, v, t));
                }
            }
        }
        let (_, v, t) = best.expect("an over-full part has nodes and some part has room");
        part[v] = t as u32;
        size[over] -= 1;
        size[t] += 1;
    }
    // Parts below `lo` only exist if others are above `hi`: none are now.
}

/// k-way Fiduccia–Mattheyses refinement: passes of single-node moves in
/// order of gain (links un-cut minus links cut), each node moved at most
/// once per pass; part sizes may leave the balanced range by one during a
/// pass, and the pass is rolled back to its best balanced prefix. Stops
/// when a pass gains nothing.
fn refine(g: &Graph, part: &mut [u32], parts: usize) {
    let n = g.len();
    let total: i64 = g.weight.iter().sum();
    let heaviest = g.weight.iter().copied().max().unwrap_or(1);
    // Balanced: within the heaviest vertex's weight (less one) of an even
    // split; during a pass, one heaviest vertex further.
    let hi = (total + parts as i64 - 1) / parts as i64 + heaviest - 1;
    let lo = total / parts as i64 - (heaviest - 1);
    let mut size = vec![0i64; parts];
    for (v, &p) in part.iter().enumerate() {
        size[p as usize] += g.weight[v];
    }
    let out_of_range = |s: i64| i64::from(s < lo || s > hi);
    let mut conn = Vec::new();
    // Best move of v among the parts it links into: (gain, target).
    let best_move = |part: &[u32], size: &[i64], v: usize, conn: &mut Vec<(u32, i64)>| {
        connections(g, part, v, conn);
        let src = part[v];
        let internal = conn.iter().find(|(p, _)| *p == src).map_or(0, |e| e.1);
        conn.iter()
            .filter(|(p, _)| *p != src)
            .filter(|(p, _)| {
                size[*p as usize] + g.weight[v] <= hi + heaviest
                    && size[src as usize] - g.weight[v] >= lo - heaviest
            })
            .map(|&(p, w)| (w - internal, p))
            .max_by_key(|&(gain, p)| (gain, Reverse(p)))
    };
    for _pass in 0..16 {
        let mut stamp = vec![0u32; n];
        let mut locked = vec![false; n];
        let mut heap: BinaryHeap<(i64, Reverse<u32>, u32, u32)> = BinaryHeap::new();
        for v in 0..n {
            if let Some((gain, t)) = best_move(part, &size, v, &mut conn) {
                heap.push((gain, Reverse(v as u32), t, 0));
            }
        }
        let mut moves: Vec<(usize, u32)> = Vec::new();
        let mut unbalanced: i64 = size.iter().map(|&s| out_of_range(s)).sum();
        let (mut gain_sum, mut best_gain, mut best_len) = (0i64, 0i64, 0usize);
        let patience = 100 + n / 20;
        while let Some((_, Reverse(v), _, st)) = heap.pop() {
            let v = v as usize;
            if locked[v] || st != stamp[v] {
                continue;
            }
            // Sizes may have changed since the entry was pushed.
            let Some((gain, t)) = best_move(part, &size, v, &mut conn) else {
                continue;
            };
            let src = part[v] as usize;
            unbalanced -= out_of_range(size[src]) + out_of_range(size[t as usize]);
            size[src] -= g.weight[v];
            size[t as usize] += g.weight[v];
            unbalanced += out_of_range(size[src]) + out_of_range(size[t as usize]);
            part[v] = t;
            locked[v] = true;
            moves.push((v, src as u32));
            gain_sum += gain;
            if unbalanced == 0 && gain_sum > best_gain {
                best_gain = gain_sum;
                best_len = moves.len();
            }
            if moves.len() > best_len + patience {
                break;
            }
            for &(u, _) in &g.adj[v] {
                let u = u as usize;
                if !locked[u] {
                    stamp[u] += 1;
                    if let Some((gain, t)) = best_move(part, &size, u, &mut conn) {
                        heap.push((gain, Reverse(u as u32), t, stamp[u]));
                    }
                }
            }
        }
        for &(v, src) in moves[best_len..].iter().rev() {
            size[part[v] as usize] -= g.weight[v];
            size[src as usize] += g.weight[v];
            part[v] = src;
        }
        if best_gain <= 0 {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::{hypercube, kary_ntree, mesh_or_torus, pgft};
    use crate::topology::{PgftParams, PortRef};

    /// Best random balanced cut over a few seeds.
    fn random_cut(topo: &Topology, parts: usize) -> usize {
        (0..8)
            .map(|seed| {
                random_balanced(topo, parts, seed)
                    .unwrap()
                    .summary(topo)
                    .cut_links
            })
            .min()
            .unwrap()
    }

    fn check(topo: &Topology, parts: usize) -> PartitionSummary {
        let p = partition(topo, parts).unwrap();
        let s = p.summary(topo);
        let n = topo.hosts.len() + topo.switches.len();
        assert_eq!(s.processes.iter().sum::<usize>(), n);
        let (min, max) = (
            *s.processes.iter().min().unwrap(),
            *s.processes.iter().max().unwrap(),
        );
        assert!(
            max - min <= 1,
            "{} over {parts}: unbalanced {:?}",
            topo.name,
            s.processes
        );
        assert_eq!(
            p.summary(topo),
            partition(topo, parts).unwrap().summary(topo)
        );
        s
    }

    #[test]
    fn k_ary_n_trees_keep_pods_whole_and_cut_only_the_top_stage() {
        // 4-ary 2-tree over 2: two leaves with their 8 hosts and two top
        // switches per machine; each top switch reaches the other machine's
        // two leaves: 8 of 32 links.
        let t = kary_ntree(4, 2).unwrap();
        let s = check(&t, 2);
        assert_eq!(s.cut_links, 8, "{s:?}");
        assert!(s.cut_links < random_cut(&t, 2));
        // 8-ary 3-tree (704 processes): 8 pods of 64 hosts + 16 switches, and
        // 64 top switches that each link into every pod. Over 2, 4, 8
        // machines, whole pods per machine: each top switch cuts the links
        // into the pods of other machines: 64 × 8·(1 − 1/m) at most.
        let t = kary_ntree(8, 3).unwrap();
        for m in [2usize, 4, 8] {
            let s = check(&t, m);
            let pods_bound = 64 * 8 * (m - 1) / m;
            let random = random_cut(&t, m);
            assert_eq!(s.cut_links, pods_bound, "{m}: {s:?}");
            assert_eq!(s.method, PartitionMethod::Subtrees);
            assert!(s.cut_links * 2 < random, "{m}: {} vs {random}", s.cut_links);
        }
    }

    #[test]
    fn pgfts_are_split_into_subtrees() {
        // PGFT(3; 4,4,4; 1,2,2; 1,2,1): parallel links included.
        let t = pgft(&PgftParams {
            m: vec![4, 4, 4],
            w: vec![1, 2, 2],
            p: vec![1, 2, 1],
        })
        .unwrap();
        for m in [2usize, 4] {
            let s = check(&t, m);
            let random = random_cut(&t, m);
            assert!(s.cut_links * 3 < random, "{m}: {} vs {random}", s.cut_links);
        }
    }

    #[test]
    fn meshes_and_tori_are_bisected() {
        // 8×8 mesh: a straight cut crosses 8 links, the torus's 16.
        let mesh = mesh_or_torus(&[8, 8], false).unwrap();
        assert_eq!(check(&mesh, 2).cut_links, 8);
        assert_eq!(check(&mesh, 4).cut_links, 16);
        let torus = mesh_or_torus(&[8, 8], true).unwrap();
        assert_eq!(check(&torus, 2).cut_links, 16);
        assert_eq!(check(&torus, 4).cut_links, 32);
        for (t, m) in [
            (&mesh, 2),
            (&mesh, 4),
            (&torus, 2),
            (&torus, 4),
            (&torus, 8),
        ] {
            let s = check(t, m);
            assert!(s.cut_links * 3 < random_cut(t, m), "{m}: {s:?}");
        }
        let cube = hypercube(6).unwrap();
        assert_eq!(check(&cube, 2).cut_links, 32);
        // 3×3×3 torus over 3: slabs would cut 27 of 108; within 25 %.
        let t = mesh_or_torus(&[3, 3, 3], true).unwrap();
        let s = check(&t, 3);
        assert!(s.cut_links <= 27 * 5 / 4, "{s:?}");
        assert!(s.cut_links * 2 < random_cut(&t, 3), "{s:?}");
    }

    #[test]
    fn irregular_fabrics_use_the_graph_partitioner() {
        // A ring of 12 switches with chords and two hosts each, no levels
        // or coordinates: only graph growing applies.
        let mut t = Topology::new("ring", crate::topology::Family::Custom);
        let k = 12u32;
        for s in 0..k {
            t.add_switch(format!("s{s}"), 6);
        }
        for h in 0..2 * k {
            t.add_host(format!("h{h}"), 1);
        }
        for s in 0..k {
            let sw = PortRef::switch;
            t.connect(sw(s, 0), sw((s + 1) % k, 1), true).unwrap();
            if s % 3 == 0 {
                t.connect(sw(s, 2), sw((s + 2) % k, 3), true).unwrap();
            }
            t.connect(PortRef::host(2 * s, 0), sw(s, 4), true).unwrap();
            t.connect(PortRef::host(2 * s + 1, 0), sw(s, 5), true)
                .unwrap();
        }
        for m in [2usize, 3, 4] {
            let p = partition(&t, m).unwrap();
            assert_eq!(p.method, PartitionMethod::GraphGrowing);
            let s = check(&t, m);
            assert!(s.cut_links * 2 < random_cut(&t, m), "{m}: {s:?}");
        }
        // A ring cut in two places: 2 ring links + a chord or two.
        assert!(check(&t, 2).cut_links <= 4, "{:?}", check(&t, 2));
    }

    #[test]
    fn bad_part_counts_are_refused() {
        let t = kary_ntree(2, 1).unwrap();
        assert_eq!(partition(&t, 0), Err(PartitionError::NoParts));
        assert!(matches!(
            partition(&t, 100),
            Err(PartitionError::MorePartsThanNodes { parts: 100, .. })
        ));
        let one = partition(&t, 1).unwrap().summary(&t);
        assert_eq!(one.cut_links, 0);
        assert_eq!(one.cut_share(), 0.0);
    }
}
