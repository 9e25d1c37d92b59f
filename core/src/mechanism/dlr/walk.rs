//! A functional (untimed) model of a k-ary n-tree running DLR: a packet is
//! walked hop by hop, each switch deciding with the very [`DlrSwitch`] logic a
//! `switchd` runs, following the cabling with [`Topology::peer`]. This is the
//! digest's §9 verifier: connectivity (delivered / discarded / looped) and the
//! channel dependency graph of the paths taken.

use super::logic::{DiscardReason, DlrConfig, DlrDecision, DlrError, DlrPacketState, DlrStep};
use super::logic::{DlrFaults, DlrSwitch};
use crate::topology::{FaultSet, HostId, LinkId, NodeRef, PortNo, PortRef, SwitchId, Topology};
use std::collections::BTreeSet;

/// One hop: the switch, the port it sent on and the VC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hop {
    pub switch: SwitchId,
    pub port: PortNo,
    pub vc: u8,
    pub step: DlrStep,
    /// False for the last hop, leaf → host.
    pub to_switch: bool,
}

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WalkOutcome {
    Delivered,
    /// DLR gave up (the fault set is beyond what it tolerates).
    Discarded {
        at: SwitchId,
        reason: DiscardReason,
    },
    /// More than the hop limit: a livelock.
    Looped,
    /// A bug indicator: DLR chose a port `port_up` says is dead or uncabled.
    DeadPort {
        at: SwitchId,
        port: PortNo,
    },
    /// A bug indicator: the packet reached the wrong host.
    Misdelivered {
        to: HostId,
    },
}

/// A packet's whole journey.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    pub outcome: WalkOutcome,
    pub hops: Vec<Hop>,
}

impl Walk {
    pub fn delivered(&self) -> bool {
        self.outcome == WalkOutcome::Delivered
    }
    /// Switch-to-switch hops.
    pub fn switch_hops(&self) -> usize {
        self.hops.iter().filter(|h| h.to_switch).count()
    }
}

/// Problems setting up or running the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    #[error(transparent)]
    Dlr(#[from] DlrError),
    #[error("host {0} does not exist or is not cabled to a switch")]
    BadHost(HostId),
}

/// A fabric of [`DlrSwitch`]es with a fault set applied.
#[derive(Clone, Debug)]
pub struct DlrFabric<'t> {
    topo: &'t Topology,
    switches: Vec<DlrSwitch>,
    port_up: Vec<Vec<bool>>,
    hop_limit: usize,
}

impl<'t> DlrFabric<'t> {
    /// Every switch of `topo` (a `kary_ntree(cfg.k, cfg.n)`), no faults.
    pub fn new(topo: &'t Topology, cfg: DlrConfig) -> Result<Self, WalkError> {
        let switches = (0..topo.num_switches() as SwitchId)
            .map(|s| DlrSwitch::from_topology(cfg, topo, s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut fabric = DlrFabric {
            topo,
            switches,
            port_up: Vec::new(),
            // The digest's model used 20·n·k (link) and 40·n·k (switch) hops.
            hop_limit: match cfg.faults_handled {
                DlrFaults::Link => 20,
                DlrFaults::Switch => 40,
            } * (cfg.n * cfg.k) as usize,
        };
        fabric.set_faults(&FaultSet::none());
        Ok(fabric)
    }

    /// Applies a fault set: a port is up iff it is cabled, its link is not
    /// failed and neither end switch is failed. Switch state (the adaptive
    /// vectors) is kept, as in a live fabric.
    pub fn set_faults(&mut self, faults: &FaultSet) {
        let topo = self.topo;
        self.port_up = topo
            .switches
            .iter()
            .map(|sw| {
                sw.ports
                    .iter()
                    .map(|l| l.is_some_and(|l| faults.link_alive(topo, l)))
                    .collect()
            })
            .collect();
    }

    pub fn hop_limit(&self) -> usize {
        self.hop_limit
    }

    pub fn switch(&self, id: SwitchId) -> Option<&DlrSwitch> {
        self.switches.get(id as usize)
    }

    /// Walks one packet from `src` to `dst` at time `now`.
    pub fn walk(&mut self, src: HostId, dst: HostId, now: u64) -> Result<Walk, WalkError> {
        let start = self
            .topo
            .hosts
            .get(src as usize)
            .and_then(|_| self.topo.peer(PortRef::host(src, 0)))
            .ok_or(WalkError::BadHost(src))?;
        if dst as usize >= self.topo.num_hosts() {
            return Err(WalkError::BadHost(dst));
        }
        let mut at = start;
        let mut vc = 0u8;
        let mut pkt = DlrPacketState::default();
        let mut hops = Vec::new();
        let outcome = loop {
            let NodeRef::Switch(s) = at.node else {
                break match at.node {
                    NodeRef::Host(h) if h == dst => WalkOutcome::Delivered,
                    NodeRef::Host(h) => WalkOutcome::Misdelivered { to: h },
                    NodeRef::Switch(_) => unreachable!("matched above"),
                };
            };
            if hops.len() >= self.hop_limit {
                break WalkOutcome::Looped;
            }
            let up = &self.port_up[s as usize];
            let decision = self.switches[s as usize].route(now, dst, at.port, vc, &mut pkt, up)?;
            let (port, out_vc, step) = match decision {
                DlrDecision::Forward { port, vc, step } => (port, vc, step),
                DlrDecision::Discard { reason } => {
                    break WalkOutcome::Discarded { at: s, reason };
                }
            };
            let next = match up.get(port as usize) {
                Some(true) => self.topo.peer(PortRef::switch(s, port)),
                _ => None,
            };
            let Some(next) = next else {
                break WalkOutcome::DeadPort { at: s, port };
            };
            hops.push(Hop {
                switch: s,
                port,
                vc: out_vc,
                step,
                to_switch: matches!(next.node, NodeRef::Switch(_)),
            });
            at = next;
            vc = out_vc;
        };
        Ok(Walk { outcome, hops })
    }
}

/// A channel: the sending switch, its port, and the VC.
pub type Channel = (SwitchId, PortNo, u8);

/// Channel dependency graph built from walks: an edge a → b when some packet
/// held channel a and then requested channel b (Dally–Seitz; for routing that
/// depends on the input channel these are exactly the realisable
/// dependencies, digest §9). Channels are numbered densely; edges are kept
/// as a flat list (duplicates allowed) and sorted into adjacency only when
/// searched, which keeps big sweeps cheap.
#[derive(Clone, Debug)]
pub struct ChannelGraph {
    radix: usize,
    vcs: usize,
    channels: usize,
    /// Count every VC as VC 0 (what the dependencies would be with one VC).
    merge_vcs: bool,
    edges: Vec<(u32, u32)>,
}

impl ChannelGraph {
    /// A graph for `switches` switches of `radix` ports with `vcs` VCs.
    pub fn new(switches: usize, radix: usize, vcs: u8) -> Self {
        ChannelGraph {
            radix,
            vcs: vcs as usize,
            channels: switches * radix * vcs as usize,
            merge_vcs: false,
            edges: Vec::new(),
        }
    }

    /// The same graph with every VC folded onto VC 0, to check what the
    /// routing would do on a single VC (e.g. Theorem 2's single-fault case).
    pub fn merging_vcs(mut self) -> Self {
        self.merge_vcs = true;
        self
    }

    fn id(&self, (s, p, vc): Channel) -> Option<u32> {
        let (p, vc) = (p as usize, if self.merge_vcs { 0 } else { vc as usize });
        let id = (s as usize * self.radix + p) * self.vcs + vc;
        (p < self.radix && vc < self.vcs && id < self.channels).then_some(id as u32)
    }

    fn channel(&self, id: u32) -> Channel {
        let id = id as usize;
        let vc = id % self.vcs;
        let p = (id / self.vcs) % self.radix;
        let s = id / self.vcs / self.radix;
        (s as SwitchId, p as PortNo, vc as u8)
    }

    /// Adds the dependencies of one walk (switch-to-switch channels only;
    /// host links cannot be on a cycle). Channels outside the graph's
    /// dimensions are ignored.
    pub fn add_walk(&mut self, walk: &Walk) {
        let mut prev: Option<u32> = None;
        for h in walk.hops.iter().filter(|h| h.to_switch) {
            let c = self.id((h.switch, h.port, h.vc));
            if let (Some(a), Some(b)) = (prev, c) {
                self.edges.push((a, b));
            }
            prev = c;
        }
    }

    /// Adds every dependency of `other` (same dimensions assumed).
    pub fn extend(&mut self, other: &ChannelGraph) {
        self.edges.extend_from_slice(&other.edges);
    }

    /// Number of distinct dependencies.
    pub fn num_edges(&self) -> usize {
        let mut e = self.edges.clone();
        e.sort_unstable();
        e.dedup();
        e.len()
    }

    /// A dependency cycle, if any (iterative three-colour DFS over a
    /// counting-sorted adjacency).
    pub fn find_cycle(&self) -> Option<Vec<Channel>> {
        const WHITE: u8 = 0;
        const GREY: u8 = 1;
        const BLACK: u8 = 2;
        let n = self.channels;
        let mut start = vec![0usize; n + 1];
        for &(a, _) in &self.edges {
            start[a as usize + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut succ = vec![0u32; self.edges.len()];
        for &(a, b) in &self.edges {
            succ[fill[a as usize]] = b;
            fill[a as usize] += 1;
        }
        let mut mark = vec![WHITE; n];
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for root in 0..n {
            if mark[root] != WHITE || start[root] == start[root + 1] {
                continue;
            }
            mark[root] = GREY;
            stack.push((root, start[root]));
            while let Some(top) = stack.last_mut() {
                let (node, next) = *top;
                if next == start[node + 1] {
                    mark[node] = BLACK;
                    stack.pop();
                    continue;
                }
                top.1 += 1;
                let s = succ[next] as usize;
                match mark[s] {
                    GREY => {
                        let from = stack.iter().position(|&(c, _)| c == s).unwrap_or(0);
                        return Some(
                            stack[from..]
                                .iter()
                                .map(|&(c, _)| self.channel(c as u32))
                                .collect(),
                        );
                    }
                    WHITE => {
                        mark[s] = GREY;
                        stack.push((s, start[s]));
                    }
                    _ => {}
                }
            }
        }
        None
    }
}

/// The switch-to-switch links of a topology (the paper's fault candidates:
/// node links are excluded, §3.2).
pub fn switch_links(topo: &Topology) -> Vec<LinkId> {
    (0..topo.links.len() as LinkId)
        .filter(|&l| {
            let link = &topo.links[l as usize];
            matches!(
                (link.a.node, link.b.node),
                (NodeRef::Switch(_), NodeRef::Switch(_))
            )
        })
        .collect()
}

/// Switches that are not leaves (leaf faults are not tolerated, §3.2).
pub fn non_leaf_switches(topo: &Topology) -> Vec<SwitchId> {
    topo.switches
        .iter()
        .filter(|s| s.level.is_some_and(|l| l > 0))
        .map(|s| s.id)
        .collect()
}

/// One host per leaf switch: hosts on the same leaf are routed identically
/// (the injection port only matters for arrivals from above), so walking
/// from these covers every source.
pub fn one_host_per_leaf(topo: &Topology) -> Vec<HostId> {
    let mut seen = BTreeSet::new();
    topo.hosts
        .iter()
        .filter(|h| {
            topo.peer(PortRef::host(h.id, 0))
                .is_some_and(|p| seen.insert(p.node))
        })
        .map(|h| h.id)
        .collect()
}

/// Result of walking every (source leaf, destination) pair under one fault set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub walks: usize,
    pub delivered: usize,
    /// Walks that met a dead port, i.e. that were actually rerouted or lost.
    pub affected: usize,
    /// The first walk that was not delivered, as (src, dst, outcome).
    pub first_failure: Option<(HostId, HostId, WalkOutcome)>,
    pub max_switch_hops: usize,
}

impl SweepReport {
    pub fn all_delivered(&self) -> bool {
        self.delivered == self.walks
    }
}

/// Walks every (source leaf, destination) pair of a fabric under successive
/// fault sets. A packet whose fault-free path meets no dead port takes exactly
/// that path in every variant (each rule tries the table port first, and the
/// adaptive state is only read at U-turns), so only the affected pairs are
/// walked again; [`Sweeper::sweep_all`] walks everything, to test that claim.
#[derive(Clone, Debug)]
pub struct Sweeper<'t> {
    pub fabric: DlrFabric<'t>,
    /// (src, dst, fault-free walk) for one source per leaf and every dst.
    baseline: Vec<(HostId, HostId, Walk)>,
    /// The dependencies of all fault-free walks.
    baseline_cdg: ChannelGraph,
    /// `users[s][p]`: indices into `baseline` of the walks that leave
    /// switch s through port p.
    users: Vec<Vec<Vec<u32>>>,
}

impl<'t> Sweeper<'t> {
    pub fn new(topo: &'t Topology, cfg: DlrConfig) -> Result<Self, WalkError> {
        let mut fabric = DlrFabric::new(topo, cfg)?;
        let mut baseline = Vec::new();
        let mut baseline_cdg = Self::empty_cdg(topo, cfg);
        for src in one_host_per_leaf(topo) {
            for dst in 0..topo.num_hosts() as HostId {
                let w = fabric.walk(src, dst, 0)?;
                baseline_cdg.add_walk(&w);
                baseline.push((src, dst, w));
            }
        }
        let mut edges = std::mem::take(&mut baseline_cdg.edges);
        edges.sort_unstable();
        edges.dedup();
        baseline_cdg.edges = edges;
        let mut users: Vec<Vec<Vec<u32>>> = topo
            .switches
            .iter()
            .map(|sw| vec![Vec::new(); sw.ports.len()])
            .collect();
        for (i, (_, _, w)) in baseline.iter().enumerate() {
            for h in &w.hops {
                users[h.switch as usize][h.port as usize].push(i as u32);
            }
        }
        Ok(Sweeper {
            fabric,
            baseline,
            baseline_cdg,
            users,
        })
    }

    /// An empty dependency graph sized for this fabric.
    pub fn empty_cdg(topo: &Topology, cfg: DlrConfig) -> ChannelGraph {
        ChannelGraph::new(topo.num_switches(), 2 * cfg.k as usize, cfg.vcs_needed())
    }

    /// Applies `faults` and accounts every pair, re-walking only those whose
    /// fault-free path meets a dead port. `cdg` gets the re-walked paths plus
    /// every fault-free path: a conservative superset (the fault-free paths
    /// of rerouted pairs are included too), so "acyclic" is still a proof.
    pub fn sweep(
        &mut self,
        faults: &FaultSet,
        now: u64,
        cdg: Option<&mut ChannelGraph>,
    ) -> Result<SweepReport, WalkError> {
        self.run(faults, now, cdg, false)
    }

    /// Whether every pair is delivered under `faults`, stopping at the first
    /// pair that is not (for Monte Carlo connectivity counts). Only the walks
    /// through a dead port are redone, in baseline order.
    pub fn all_delivered(&mut self, faults: &FaultSet, now: u64) -> Result<bool, WalkError> {
        self.fabric.set_faults(faults);
        let mut hit: Vec<u32> = Vec::new();
        for (s, ports) in self.fabric.port_up.iter().enumerate() {
            for (p, &up) in ports.iter().enumerate() {
                if !up {
                    hit.extend_from_slice(&self.users[s][p]);
                }
            }
        }
        hit.sort_unstable();
        hit.dedup();
        for i in hit {
            let (src, dst, _) = self.baseline[i as usize];
            if !self.fabric.walk(src, dst, now)?.delivered() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Like [`Sweeper::sweep`] but re-walks every pair.
    pub fn sweep_all(
        &mut self,
        faults: &FaultSet,
        now: u64,
        cdg: Option<&mut ChannelGraph>,
    ) -> Result<SweepReport, WalkError> {
        self.run(faults, now, cdg, true)
    }

    fn run(
        &mut self,
        faults: &FaultSet,
        now: u64,
        mut cdg: Option<&mut ChannelGraph>,
        walk_all: bool,
    ) -> Result<SweepReport, WalkError> {
        self.fabric.set_faults(faults);
        if let Some(g) = cdg.as_deref_mut() {
            g.extend(&self.baseline_cdg);
        }
        let mut rep = SweepReport::default();
        for (src, dst, clean) in &self.baseline {
            let up = &self.fabric.port_up;
            let hit = clean
                .hops
                .iter()
                .any(|h| !up[h.switch as usize][h.port as usize]);
            let fresh;
            let w = if hit || walk_all {
                fresh = self.fabric.walk(*src, *dst, now)?;
                &fresh
            } else {
                clean
            };
            rep.walks += 1;
            rep.affected += usize::from(hit);
            rep.max_switch_hops = rep.max_switch_hops.max(w.switch_hops());
            if w.delivered() {
                rep.delivered += 1;
            } else if rep.first_failure.is_none() {
                rep.first_failure = Some((*src, *dst, w.outcome));
            }
            if hit || walk_all {
                if let Some(g) = cdg.as_deref_mut() {
                    g.add_walk(w);
                }
            }
        }
        Ok(rep)
    }
}

#[cfg(test)]
mod tests;
