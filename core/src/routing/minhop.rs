//! Min-hop (seed 001 §4.14, OpenSM's MinHop as a baseline): on *any*
//! topology, every switch forwards each destination through a port on a
//! shortest alive path, choosing among equal ones the port that carries the
//! fewest routes so far (ties: lowest port).
//!
//! **Not deadlock-free** in general: shortest paths on meshes, tori or
//! hypercubes have cyclic channel dependencies with one VC. On fat-trees its
//! paths are shortest, hence up*/down*, but it does not claim so.

use super::{Lft, RoutingEngine, RoutingError, RoutingTables, SwitchTable};
use crate::topology::{FaultSet, HostId, NodeRef, PortNo, SwitchId, Topology};
use std::collections::VecDeque;

/// Unreached.
pub const FAR: u32 = u32::MAX;

/// Alive forwarding graph: per switch, (port, peer) of alive links that can
/// send, plus reverse switch adjacency.
pub struct AliveGraph {
    pub out: Vec<Vec<(PortNo, NodeRef)>>,
    inn: Vec<Vec<SwitchId>>,
    /// Per host: alive switches with a port to it.
    host_switches: Vec<Vec<SwitchId>>,
}

impl AliveGraph {
    pub fn new(topo: &Topology, faults: &FaultSet) -> Self {
        let ns = topo.num_switches();
        let mut out = vec![Vec::new(); ns];
        let mut inn = vec![Vec::new(); ns];
        let mut host_switches = vec![Vec::new(); topo.num_hosts()];
        for s in 0..ns as SwitchId {
            if faults.node_failed(NodeRef::Switch(s)) {
                continue;
            }
            for (p, peer) in topo.out_neighbours(NodeRef::Switch(s), faults) {
                if faults.node_failed(peer.node) {
                    continue;
                }
                match peer.node {
                    NodeRef::Switch(v) => inn[v as usize].push(s),
                    NodeRef::Host(h) => host_switches[h as usize].push(s),
                }
                out[s as usize].push((p, peer.node));
            }
        }
        AliveGraph {
            out,
            inn,
            host_switches,
        }
    }

    /// Switch hops from every switch to host `d` (1 for its own switch).
    pub fn distances_to(&self, d: HostId) -> Vec<u32> {
        let mut dist = vec![FAR; self.out.len()];
        let mut queue = VecDeque::new();
        for &s in &self.host_switches[d as usize] {
            if dist[s as usize] == FAR {
                dist[s as usize] = 1;
                queue.push_back(s);
            }
        }
        while let Some(v) = queue.pop_front() {
            for &u in &self.inn[v as usize] {
                if dist[u as usize] == FAR {
                    dist[u as usize] = dist[v as usize] + 1;
                    queue.push_back(u);
                }
            }
        }
        dist
    }

    /// Ports of `s` on a shortest path to `d`, in port order.
    pub fn shortest_ports(&self, s: SwitchId, d: HostId, dist: &[u32], out: &mut Vec<PortNo>) {
        out.clear();
        let ds = dist[s as usize];
        if ds == FAR {
            return;
        }
        for &(p, peer) in &self.out[s as usize] {
            let ok = match peer {
                NodeRef::Host(h) => ds == 1 && h == d,
                NodeRef::Switch(v) => dist[v as usize] != FAR && dist[v as usize] + 1 == ds,
            };
            if ok {
                out.push(p);
            }
        }
    }
}

pub(crate) fn lft_tables(lft: Vec<Vec<Option<PortNo>>>, engine: &str) -> RoutingTables {
    RoutingTables {
        engine: engine.to_string(),
        switches: lft
            .into_iter()
            .map(|ports| SwitchTable::Lft(Lft { ports }))
            .collect(),
        vcs: 1,
        vc_policy: Vec::new(),
    }
}

pub fn minhop(topo: &Topology, faults: &FaultSet) -> RoutingTables {
    let g = AliveGraph::new(topo, faults);
    let ns = topo.num_switches();
    let nh = topo.num_hosts();
    let mut lft = vec![vec![None; nh]; ns];
    let mut usage: Vec<Vec<u32>> = topo
        .switches
        .iter()
        .map(|s| vec![0; s.ports.len()])
        .collect();
    let mut cands = Vec::new();
    for d in 0..nh as HostId {
        let dist = g.distances_to(d);
        for s in 0..ns as SwitchId {
            g.shortest_ports(s, d, &dist, &mut cands);
            let u = &mut usage[s as usize];
            if let Some(&p) = cands.iter().min_by_key(|&&p| (u[p as usize], p)) {
                u[p as usize] += 1;
                lft[s as usize][d as usize] = Some(p);
            }
        }
    }
    lft_tables(lft, "minhop")
}

#[derive(Clone, Copy, Debug, Default)]
pub struct MinHop;

impl RoutingEngine for MinHop {
    fn name(&self) -> &'static str {
        "minhop"
    }
    fn claims_deadlock_free(&self) -> bool {
        false
    }
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        Ok(minhop(topo, faults))
    }
}
