//! The topology model: switches with numbered ports, hosts (end nodes) attached
//! to switch ports, and full-duplex (or, for RUFT, one-way) links port to port.
//!
//! Identifiers follow the papers, so that routing engines can use the labels
//! the papers use:
//! - a host's [`HostId`] is its NID (seed 001 §3.4, seed 000 §2.1): 0..N-1;
//! - a switch's [`SwitchId`] numbers switches level by level from 0 (seed 000
//!   §2.1: `id = s·k^(n-1) + Σ o_i·k^i` for k-ary n-trees);
//! - ports are numbered from 0 as in the papers; InfiniBand exports add 1;
//! - InfiniBand-style LIDs are derived: hosts first (`1 + nid`), then switches.

pub mod dot;
pub mod file;
pub mod generators;
pub mod ibnet;
pub mod partition;
pub mod summary;

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, VecDeque};
use std::fmt;

/// A host's NID, 0-based.
pub type HostId = u32;
/// A switch's number, 0-based, level by level.
pub type SwitchId = u32;
/// A port number on a switch or host, 0-based.
pub type PortNo = u16;
/// Index of a link in [`Topology::links`].
pub type LinkId = u32;

/// A switch or a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeRef {
    Host(HostId),
    Switch(SwitchId),
}

/// One port of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PortRef {
    pub node: NodeRef,
    pub port: PortNo,
}

impl PortRef {
    pub fn switch(id: SwitchId, port: PortNo) -> Self {
        PortRef {
            node: NodeRef::Switch(id),
            port,
        }
    }
    pub fn host(id: HostId, port: PortNo) -> Self {
        PortRef {
            node: NodeRef::Host(id),
            port,
        }
    }
}

/// A cable between two ports. Full duplex unless `duplex` is false, in which
/// case flits only travel from `a` to `b` (RUFT's unidirectional links).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub a: PortRef,
    pub b: PortRef,
    pub duplex: bool,
}

impl Link {
    /// The far end seen from `end`, if `end` is one of this link's ports.
    pub fn other(&self, end: PortRef) -> Option<PortRef> {
        if self.a == end {
            Some(self.b)
        } else if self.b == end {
            Some(self.a)
        } else {
            None
        }
    }
}

/// What an end node is used for (seed 001 §4.5: node types for Gdmodk/Gsmodk).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostKind {
    #[default]
    Compute,
    Storage,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    pub id: SwitchId,
    pub name: String,
    /// Level in a tree (0 = leaves), when the topology has levels.
    pub level: Option<u32>,
    /// Coordinates in a direct network (mesh, torus, hypercube bits).
    pub coords: Option<Vec<u32>>,
    /// The paper's label digits (fat-trees: `a_0..a_{h-1}` of seed 001 §3.4).
    pub label: Vec<u32>,
    /// `ports[p]` is the link on port p, if cabled. `ports.len()` is the radix.
    pub ports: Vec<Option<LinkId>>,
}

impl Switch {
    /// Its cabled ports and their links, lowest port first.
    pub fn cabled_ports(&self) -> impl Iterator<Item = (PortNo, LinkId)> + '_ {
        self.ports
            .iter()
            .enumerate()
            .filter_map(|(port, l)| l.map(|l| (port as PortNo, l)))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub id: HostId,
    pub name: String,
    pub kind: HostKind,
    pub coords: Option<Vec<u32>>,
    pub label: Vec<u32>,
    pub ports: Vec<Option<LinkId>>,
}

/// PGFT(h; m_0..m_{h-1}; w_0..w_{h-1}; p_0..p_{h-1}) parameters (seed 001 §3.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgftParams {
    pub m: Vec<u32>,
    pub w: Vec<u32>,
    pub p: Vec<u32>,
}

impl PgftParams {
    pub fn height(&self) -> usize {
        self.m.len()
    }
}

/// How a topology was made; engines with closed forms (Dmodk, DOR, e-cube)
/// read their parameters from here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "family")]
pub enum Family {
    KaryNTree {
        k: u32,
        n: u32,
    },
    Pgft(PgftParams),
    Ruft {
        k: u32,
        n: u32,
    },
    Mesh {
        dims: Vec<u32>,
    },
    Torus {
        dims: Vec<u32>,
    },
    Hypercube {
        d: u32,
    },
    /// Listed explicitly or imported; no closed form applies.
    Custom,
}

impl Family {
    /// True for the fat-tree family (k-ary n-trees and PGFTs).
    pub fn is_fat_tree(&self) -> bool {
        matches!(self, Family::KaryNTree { .. } | Family::Pgft(_))
    }
}

/// Problems with a topology, each naming the element at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("{node}: port {port} is already cabled")]
    PortInUse { node: String, port: PortNo },
    #[error("{node}: port {port} does not exist (radix {radix}, ports are 0..{radix})")]
    PortOutOfRange {
        node: String,
        port: PortNo,
        radix: usize,
    },
    #[error("unknown node `{0}`")]
    UnknownNode(String),
    #[error("two nodes are named `{0}`")]
    DuplicateName(String),
    #[error(
        "link {node}:{port} -- {node}:{other_port} is a self-loop: a cable must join two different nodes"
    )]
    SelfLoop {
        node: String,
        port: PortNo,
        other_port: PortNo,
    },
    #[error(
        "one-way link {link} has no reverse path: over the one-way links {to} cannot be reached from {from}"
    )]
    NoReversePath {
        link: String,
        from: String,
        to: String,
    },
    #[error("the fabric is disconnected: `{unreachable}` cannot be reached from `{from}`")]
    Disconnected { from: String, unreachable: String },
    #[error("{family}: parameter {param} = {value} is out of range: {reason}")]
    InvalidParameter {
        family: &'static str,
        param: String,
        value: String,
        reason: String,
    },
    #[error("the topology has no hosts")]
    NoHosts,
}

/// A whole fabric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub name: String,
    pub family: Family,
    pub switches: Vec<Switch>,
    pub hosts: Vec<Host>,
    pub links: Vec<Link>,
    /// The switch parameters the topology file sets, if any.
    #[serde(default, skip_serializing_if = "SwitchParams::is_unset")]
    pub switch_params: SwitchParams,
}

/// Switch parameters a topology file may set (`switch-latency:`,
/// `crossbar-speedup:`; docs/topology.md). A run's flag or scenario key
/// wins over them; what none of the three sets takes the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SwitchParams {
    /// Switch traversal latency (routing, allocation, crossbar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_latency: Option<crate::switch_params::SwitchLatency>,
    /// Flits per input and per output port per flit time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crossbar_speedup: Option<u8>,
}

impl SwitchParams {
    /// True when the file sets neither parameter.
    pub fn is_unset(&self) -> bool {
        self.switch_latency.is_none() && self.crossbar_speedup.is_none()
    }
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeRef::Host(h) => write!(f, "host {h}"),
            NodeRef::Switch(s) => write!(f, "switch {s}"),
        }
    }
}

impl Topology {
    /// An empty topology, to be filled through [`Topology::add_switch`],
    /// [`Topology::add_host`] and [`Topology::connect`].
    pub fn new(name: impl Into<String>, family: Family) -> Self {
        Topology {
            name: name.into(),
            family,
            switches: Vec::new(),
            hosts: Vec::new(),
            links: Vec::new(),
            switch_params: SwitchParams::default(),
        }
    }

    /// Adds a switch with `radix` ports; returns its id.
    pub fn add_switch(&mut self, name: impl Into<String>, radix: usize) -> SwitchId {
        let id = self.switches.len() as SwitchId;
        self.switches.push(Switch {
            id,
            name: name.into(),
            level: None,
            coords: None,
            label: Vec::new(),
            ports: vec![None; radix],
        });
        id
    }

    /// Adds a host with `ports` ports; returns its id (NID).
    pub fn add_host(&mut self, name: impl Into<String>, ports: usize) -> HostId {
        let id = self.hosts.len() as HostId;
        self.hosts.push(Host {
            id,
            name: name.into(),
            kind: HostKind::Compute,
            coords: None,
            label: Vec::new(),
            ports: vec![None; ports],
        });
        id
    }

    /// Cables `a` to `b`. Fails without changing anything if either port does
    /// not exist or is already cabled.
    pub fn connect(
        &mut self,
        a: PortRef,
        b: PortRef,
        duplex: bool,
    ) -> Result<LinkId, TopologyError> {
        if a.node == b.node {
            return Err(TopologyError::SelfLoop {
                node: self.node_name(a.node).to_string(),
                port: a.port,
                other_port: b.port,
            });
        }
        for end in [a, b] {
            let ports = self.ports_of(end.node)?;
            match ports.get(end.port as usize) {
                None => {
                    return Err(TopologyError::PortOutOfRange {
                        node: self.node_name(end.node).to_string(),
                        port: end.port,
                        radix: ports.len(),
                    })
                }
                Some(Some(_)) => {
                    return Err(TopologyError::PortInUse {
                        node: self.node_name(end.node).to_string(),
                        port: end.port,
                    })
                }
                Some(None) => {}
            }
        }
        let id = self.links.len() as LinkId;
        self.links.push(Link { a, b, duplex });
        *self.port_slot(a) = Some(id);
        *self.port_slot(b) = Some(id);
        Ok(id)
    }

    fn ports_of(&self, node: NodeRef) -> Result<&[Option<LinkId>], TopologyError> {
        match node {
            NodeRef::Host(h) => self.hosts.get(h as usize).map(|h| h.ports.as_slice()),
            NodeRef::Switch(s) => self.switches.get(s as usize).map(|s| s.ports.as_slice()),
        }
        .ok_or_else(|| TopologyError::UnknownNode(node.to_string()))
    }

    fn port_slot(&mut self, p: PortRef) -> &mut Option<LinkId> {
        match p.node {
            NodeRef::Host(h) => &mut self.hosts[h as usize].ports[p.port as usize],
            NodeRef::Switch(s) => &mut self.switches[s as usize].ports[p.port as usize],
        }
    }

    pub fn num_hosts(&self) -> usize {
        self.hosts.len()
    }

    pub fn num_switches(&self) -> usize {
        self.switches.len()
    }

    /// The name of a node (`"?"` for an id out of range).
    pub fn node_name(&self, node: NodeRef) -> &str {
        match node {
            NodeRef::Host(h) => self.hosts.get(h as usize).map(|h| h.name.as_str()),
            NodeRef::Switch(s) => self.switches.get(s as usize).map(|s| s.name.as_str()),
        }
        .unwrap_or("?")
    }

    /// Looks a node up by name.
    pub fn find_node(&self, name: &str) -> Option<NodeRef> {
        self.switches
            .iter()
            .find(|s| s.name == name)
            .map(|s| NodeRef::Switch(s.id))
            .or_else(|| {
                self.hosts
                    .iter()
                    .find(|h| h.name == name)
                    .map(|h| NodeRef::Host(h.id))
            })
    }

    /// Number of ports of a node.
    pub fn radix(&self, node: NodeRef) -> usize {
        self.ports_of(node).map(|p| p.len()).unwrap_or(0)
    }

    /// The link on a port, if cabled.
    pub fn link_at(&self, p: PortRef) -> Option<LinkId> {
        self.ports_of(p.node)
            .ok()?
            .get(p.port as usize)
            .copied()
            .flatten()
    }

    /// The port at the other end of the cable on `p`, if any.
    pub fn peer(&self, p: PortRef) -> Option<PortRef> {
        let l = self.link_at(p)?;
        self.links[l as usize].other(p)
    }

    /// The switch host `h`'s port 0 is cabled to, if it is cabled to one.
    pub fn switch_of_host(&self, h: HostId) -> Option<SwitchId> {
        match self.peer(PortRef::host(h, 0))?.node {
            NodeRef::Switch(s) => Some(s),
            NodeRef::Host(_) => None,
        }
    }

    /// True when flits can leave through `p` (cabled, and not the receiving
    /// end of a one-way link).
    pub fn can_send(&self, p: PortRef) -> bool {
        match self.link_at(p) {
            Some(l) => {
                let link = &self.links[l as usize];
                link.duplex || link.a == p
            }
            None => false,
        }
    }

    /// InfiniBand-style LID: hosts first (1 + NID), then switches.
    pub fn lid(&self, node: NodeRef) -> u32 {
        match node {
            NodeRef::Host(h) => 1 + h,
            NodeRef::Switch(s) => 1 + self.hosts.len() as u32 + s,
        }
    }

    /// The node with a given LID.
    pub fn node_by_lid(&self, lid: u32) -> Option<NodeRef> {
        let n = self.hosts.len() as u32;
        if lid == 0 {
            None
        } else if lid <= n {
            Some(NodeRef::Host(lid - 1))
        } else if lid - 1 - n < self.switches.len() as u32 {
            Some(NodeRef::Switch(lid - 1 - n))
        } else {
            None
        }
    }

    /// The (switch, switch port) pairs a host's ports are cabled to.
    pub fn host_attachments(&self, h: HostId) -> Vec<(PortNo, PortRef)> {
        let host = &self.hosts[h as usize];
        (0..host.ports.len() as PortNo)
            .filter_map(|p| self.peer(PortRef::host(h, p)).map(|peer| (p, peer)))
            .collect()
    }

    /// Every node, hosts first.
    pub fn nodes(&self) -> impl Iterator<Item = NodeRef> + '_ {
        (0..self.hosts.len() as u32)
            .map(NodeRef::Host)
            .chain((0..self.switches.len() as u32).map(NodeRef::Switch))
    }

    /// Neighbours reachable in one hop through alive links, with the local
    /// port, in port order. One-way links are followed only forwards.
    pub fn out_neighbours(&self, node: NodeRef, faults: &FaultSet) -> Vec<(PortNo, PortRef)> {
        let Ok(ports) = self.ports_of(node) else {
            return Vec::new();
        };
        ports
            .iter()
            .enumerate()
            .filter_map(|(p, l)| {
                let l = (*l)?;
                let here = PortRef {
                    node,
                    port: p as PortNo,
                };
                if !self.can_send(here) || !faults.link_alive(self, l) {
                    return None;
                }
                Some((p as PortNo, self.links[l as usize].other(here)?))
            })
            .collect()
    }

    /// Hop distances from `from` to every node over alive links (index: hosts
    /// first, then switches, as in [`Topology::nodes`]); `None` = unreachable.
    pub fn distances_from(&self, from: NodeRef, faults: &FaultSet) -> Vec<Option<u32>> {
        let idx = |n: NodeRef| match n {
            NodeRef::Host(h) => h as usize,
            NodeRef::Switch(s) => self.hosts.len() + s as usize,
        };
        let mut dist = vec![None; self.hosts.len() + self.switches.len()];
        if faults.node_failed(from) {
            return dist;
        }
        dist[idx(from)] = Some(0);
        let mut queue = VecDeque::from([from]);
        while let Some(u) = queue.pop_front() {
            let du = dist[idx(u)].unwrap_or(0);
            // Hosts do not forward: paths only pass through switches.
            if matches!(u, NodeRef::Host(_)) && u != from {
                continue;
            }
            for (_, peer) in self.out_neighbours(u, faults) {
                if faults.node_failed(peer.node) {
                    continue;
                }
                let slot = &mut dist[idx(peer.node)];
                if slot.is_none() {
                    *slot = Some(du + 1);
                    queue.push_back(peer.node);
                }
            }
        }
        dist
    }

    /// Checks the things every fabric must satisfy: unique names, at least one
    /// host, and every node reachable (ignoring link direction).
    pub fn validate(&self) -> Result<(), TopologyError> {
        if self.hosts.is_empty() {
            return Err(TopologyError::NoHosts);
        }
        let mut names = BTreeSet::new();
        for n in self.nodes() {
            let name = self.node_name(n);
            if !names.insert(name) {
                return Err(TopologyError::DuplicateName(name.to_string()));
            }
        }
        // Undirected reachability from host 0.
        let total = self.hosts.len() + self.switches.len();
        let idx = |n: NodeRef| match n {
            NodeRef::Host(h) => h as usize,
            NodeRef::Switch(s) => self.hosts.len() + s as usize,
        };
        let mut seen = vec![false; total];
        let start = NodeRef::Host(0);
        seen[0] = true;
        let mut queue = VecDeque::from([start]);
        while let Some(u) = queue.pop_front() {
            for l in self.ports_of(u)?.iter().flatten() {
                let link = &self.links[*l as usize];
                for end in [link.a, link.b] {
                    if !seen[idx(end.node)] {
                        seen[idx(end.node)] = true;
                        queue.push_back(end.node);
                    }
                }
            }
        }
        if let Some(missing) = self.nodes().find(|n| !seen[idx(*n)]) {
            return Err(TopologyError::Disconnected {
                from: self.node_name(start).to_string(),
                unreachable: self.node_name(missing).to_string(),
            });
        }
        for link in &self.links {
            if link.a.node == link.b.node {
                return Err(TopologyError::SelfLoop {
                    node: self.node_name(link.a.node).to_string(),
                    port: link.a.port,
                    other_port: link.b.port,
                });
            }
        }
        self.validate_one_way()
    }

    /// `A:1 -> B:2` or `A:1 -- B:2`, as the topology file writes a link.
    pub fn link_text(&self, l: &Link) -> String {
        let arrow = if l.duplex { "--" } else { "->" };
        format!(
            "{}:{} {arrow} {}:{}",
            self.node_name(l.a.node),
            l.a.port,
            self.node_name(l.b.node),
            l.b.port
        )
    }

    /// With one-way links, every host must reach every other host along
    /// the links' directions (through switches): traffic that leaves a
    /// host over a one-way link must have a way back, or replies and
    /// all-to-all traffic cannot run. The error names a one-way link on the
    /// side that cannot be reached (its way in, or failing that its way out).
    fn validate_one_way(&self) -> Result<(), TopologyError> {
        if self.links.iter().all(|l| l.duplex) {
            return Ok(());
        }
        let none = FaultSet::none();
        for from in 0..self.hosts.len() as HostId {
            let dist = self.distances_from(NodeRef::Host(from), &none);
            let Some(to) = (0..self.hosts.len() as HostId).find(|&h| dist[h as usize].is_none())
            else {
                continue;
            };
            let one_way_at = |h: HostId, inbound: bool| {
                self.hosts[h as usize]
                    .ports
                    .iter()
                    .flatten()
                    .map(|&l| &self.links[l as usize])
                    .find(|l| !l.duplex && (l.b.node == NodeRef::Host(h)) == inbound)
            };
            let link = one_way_at(to, true)
                .or_else(|| one_way_at(from, false))
                .or_else(|| self.links.iter().find(|l| !l.duplex))
                .expect("a one-way link exists");
            return Err(TopologyError::NoReversePath {
                link: self.link_text(link),
                from: self.node_name(NodeRef::Host(from)).to_string(),
                to: self.node_name(NodeRef::Host(to)).to_string(),
            });
        }
        Ok(())
    }

    /// Number of cabled switch-to-switch links.
    pub fn num_switch_links(&self) -> usize {
        self.links
            .iter()
            .filter(|l| {
                matches!(
                    (l.a.node, l.b.node),
                    (NodeRef::Switch(_), NodeRef::Switch(_))
                )
            })
            .count()
    }
}

/// Failed links and switches. A link attached to a failed switch counts as
/// failed too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSet {
    pub links: BTreeSet<LinkId>,
    pub switches: BTreeSet<SwitchId>,
}

impl FaultSet {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn with_links(links: impl IntoIterator<Item = LinkId>) -> Self {
        FaultSet {
            links: links.into_iter().collect(),
            switches: BTreeSet::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty() && self.switches.is_empty()
    }

    pub fn node_failed(&self, n: NodeRef) -> bool {
        matches!(n, NodeRef::Switch(s) if self.switches.contains(&s))
    }

    pub fn link_alive(&self, topo: &Topology, l: LinkId) -> bool {
        if self.links.contains(&l) {
            return false;
        }
        let link = &topo.links[l as usize];
        !self.node_failed(link.a.node) && !self.node_failed(link.b.node)
    }
}
