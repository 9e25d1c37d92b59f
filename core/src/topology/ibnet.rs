//! The ibnetdiscover / ibsim "net" format (peers.md §1), both ways.
//!
//! A file is a list of records, one per node, ended by a blank line:
//!
//! ```text
//! switchguid=0x100000000000
//! Switch 8 "s0-0"  # "s0-0" base port 0 lid 17 lmc 0
//! [1] "h00"[1](200000000001)  # "h00" lid 1 4xQDR
//! [5] "s1-0"[1]  # "s1-0" lid 21 4xQDR
//! ```
//!
//! Ports are 1-based there (flitnet's port p is `[p+1]`), every link is
//! listed on both of its ends, and `switchguid=` / `caguid=` set the GUID of
//! the next node of that kind. Export writes ibnetdiscover's trailers (LIDs,
//! `4xQDR`) so that ibsim 0.10 loads the file without warnings and keeps
//! flitnet's LIDs ([`Topology::lid`]). Import accepts real ibnetdiscover
//! output: comments, `vendid=`/`devid=`/`sysimgguid=`, `(portguid)` suffixes
//! and trailers are read past.
//!
//! GUIDs flitnet assigns (peers.md §1, the generator in its appendix):
//! switch `0x100000000000 + (level << 16) + index within its level` (no
//! level counts as level 0), host node `0x200000000000 + (NID << 4)`, host
//! port GUID = node GUID + port number (1-based), switch port GUID = node
//! GUID. [`GuidMap`] maps them both ways, for reading OpenSM's dumps.

use super::{HostId, NodeRef, PortNo, PortRef, SwitchId, Topology, TopologyError};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// Base of the switch GUIDs flitnet assigns.
pub const SWITCH_GUID_BASE: u64 = 0x1000_0000_0000;
/// Base of the host node GUIDs flitnet assigns.
pub const HOST_GUID_BASE: u64 = 0x2000_0000_0000;
/// Largest unicast LID; bigger fabrics are exported without LIDs.
const MAX_UNICAST_LID: u32 = 0xBFFF;
/// InfiniBand numbers ports with one byte and reserves 255.
const MAX_IB_PORTS: usize = 254;

/// Node GUIDs of every switch and host, and the way back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuidMap {
    switches: Vec<u64>,
    hosts: Vec<u64>,
    by_guid: HashMap<u64, NodeRef>,
}

impl GuidMap {
    /// The GUIDs flitnet assigns to `topo` (see the module doc). The level
    /// field is 16 bits wide, unless some level has 65536 switches or more,
    /// in which case it moves to bit 32 so that GUIDs stay distinct.
    pub fn assigned(topo: &Topology) -> GuidMap {
        let mut per_level: HashMap<u32, u64> = HashMap::new();
        let mut index_in_level = Vec::with_capacity(topo.switches.len());
        for s in &topo.switches {
            let slot = per_level.entry(s.level.unwrap_or(0)).or_insert(0);
            index_in_level.push(*slot);
            *slot += 1;
        }
        let shift = if per_level.values().any(|&n| n > 1 << 16) {
            32
        } else {
            16
        };
        let switches = topo
            .switches
            .iter()
            .zip(&index_in_level)
            .map(|(s, &i)| SWITCH_GUID_BASE + ((s.level.unwrap_or(0) as u64) << shift) + i)
            .collect();
        let hosts = (0..topo.hosts.len() as u64)
            .map(|h| HOST_GUID_BASE + (h << 4))
            .collect();
        GuidMap::from_parts(switches, hosts)
    }

    fn from_parts(switches: Vec<u64>, hosts: Vec<u64>) -> GuidMap {
        let by_guid = switches
            .iter()
            .enumerate()
            .map(|(i, &g)| (g, NodeRef::Switch(i as SwitchId)))
            .chain(
                hosts
                    .iter()
                    .enumerate()
                    .map(|(i, &g)| (g, NodeRef::Host(i as HostId))),
            )
            .collect();
        GuidMap {
            switches,
            hosts,
            by_guid,
        }
    }

    /// A switch's node GUID (also the GUID of all its ports).
    pub fn switch_guid(&self, s: SwitchId) -> Option<u64> {
        self.switches.get(s as usize).copied()
    }

    /// A host's node GUID.
    pub fn host_guid(&self, h: HostId) -> Option<u64> {
        self.hosts.get(h as usize).copied()
    }

    /// The GUID of a host port (`port` 0-based, as everywhere in flitnet):
    /// node GUID + port + 1, as ibsim numbers CA ports from 1.
    pub fn host_port_guid(&self, h: HostId, port: PortNo) -> Option<u64> {
        self.host_guid(h).map(|g| g + port as u64 + 1)
    }

    /// The GUID OpenSM reports for a port (`portguid` in its dumps).
    pub fn port_guid(&self, p: PortRef) -> Option<u64> {
        match p.node {
            NodeRef::Switch(s) => self.switch_guid(s),
            NodeRef::Host(h) => self.host_port_guid(h, p.port),
        }
    }

    /// The node with this node GUID.
    pub fn node_by_guid(&self, guid: u64) -> Option<NodeRef> {
        self.by_guid.get(&guid).copied()
    }

    /// The port with this port GUID: a host port, or a switch's port 0 (the
    /// management port all switch port GUIDs name).
    pub fn port_by_guid(&self, guid: u64) -> Option<PortRef> {
        if let Some(NodeRef::Switch(s)) = self.node_by_guid(guid) {
            return Some(PortRef::switch(s, 0));
        }
        // Host port GUIDs are node + 1..=15 (nodes are 16 apart).
        (1..16u64).find_map(|p| match self.node_by_guid(guid.checked_sub(p)?)? {
            NodeRef::Host(h) => Some(PortRef::host(h, (p - 1) as PortNo)),
            NodeRef::Switch(_) => None,
        })
    }
}

/// flitnet's GUID for a switch (see [`GuidMap::assigned`]; build a
/// [`GuidMap`] once when looking up many).
pub fn switch_guid(topo: &Topology, s: SwitchId) -> Option<u64> {
    GuidMap::assigned(topo).switch_guid(s)
}

/// flitnet's GUID for a host port (`port` 0-based).
pub fn host_port_guid(topo: &Topology, h: HostId, port: PortNo) -> Option<u64> {
    (h < topo.hosts.len() as u32).then(|| HOST_GUID_BASE + ((h as u64) << 4) + port as u64 + 1)
}

/// OpenSM's `--root_guid_file` (`-a`, used by ftree and updn): the node
/// GUIDs of the switches at the highest level, one `0x%016x` per line. Empty
/// when no switch has a level.
pub fn root_guids_file(topo: &Topology) -> String {
    let guids = GuidMap::assigned(topo);
    let Some(top) = topo.switches.iter().filter_map(|s| s.level).max() else {
        return String::new();
    };
    topo.switches
        .iter()
        .filter(|s| s.level == Some(top))
        .filter_map(|s| guids.switch_guid(s.id))
        .map(|g| format!("0x{g:016x}\n"))
        .collect()
}

/// OpenSM's `--cn_guid_file` (`-u`, compute nodes for ftree, dfsssp): the
/// port GUIDs of every cabled port of the compute hosts (storage hosts are
/// left out, as I/O nodes), one `0x%016x` per line.
pub fn compute_node_guids_file(topo: &Topology) -> String {
    let guids = GuidMap::assigned(topo);
    let mut out = String::new();
    for h in topo
        .hosts
        .iter()
        .filter(|h| h.kind == super::HostKind::Compute)
    {
        for (p, link) in h.ports.iter().enumerate() {
            if link.is_some() {
                if let Some(g) = guids.host_port_guid(h.id, p as PortNo) {
                    let _ = writeln!(out, "0x{g:016x}");
                }
            }
        }
    }
    out
}

/// Why a topology cannot be written as a net file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IbnetExportError {
    #[error("link {a} -> {b} is one-way; InfiniBand links are full duplex")]
    OneWayLink { a: String, b: String },
    #[error("{node} has {ports} ports; InfiniBand allows at most {MAX_IB_PORTS}")]
    TooManyPorts { node: String, ports: usize },
    #[error("{node} has more than 15 ports; host GUIDs leave room for 15")]
    TooManyHostPorts { node: String },
    #[error("node name `{0}` cannot be written: names must be 1..=63 characters without `\"`, `=`, `#`, `@` or control characters")]
    BadName(String),
}

fn exportable_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name
            .chars()
            .any(|c| matches!(c, '"' | '=' | '#' | '@') || c.is_control())
}

/// Writes `topo` as an ibnetdiscover / ibsim net file.
pub fn to_ibnet(topo: &Topology) -> Result<String, IbnetExportError> {
    for l in &topo.links {
        if !l.duplex {
            return Err(IbnetExportError::OneWayLink {
                a: format!("{}:{}", topo.node_name(l.a.node), l.a.port),
                b: format!("{}:{}", topo.node_name(l.b.node), l.b.port),
            });
        }
    }
    for n in topo.nodes() {
        let name = topo.node_name(n);
        if !exportable_name(name) {
            return Err(IbnetExportError::BadName(name.to_string()));
        }
        let ports = topo.radix(n);
        if ports > MAX_IB_PORTS {
            return Err(IbnetExportError::TooManyPorts {
                node: name.to_string(),
                ports,
            });
        }
        if matches!(n, NodeRef::Host(_)) && ports > 15 {
            return Err(IbnetExportError::TooManyHostPorts {
                node: name.to_string(),
            });
        }
    }
    let guids = GuidMap::assigned(topo);
    let with_lids = topo.hosts.len() + topo.switches.len() <= MAX_UNICAST_LID as usize;
    let lid = |n: NodeRef| topo.lid(n);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Topology file: written by flitnet from \"{}\"",
        topo.name
    );
    let _ = writeln!(
        out,
        "# {} hosts, {} switches, {} links. Ports are 1-based: flitnet port p is [p+1].",
        topo.hosts.len(),
        topo.switches.len(),
        topo.links.len()
    );
    let _ = writeln!(
        out,
        "# GUIDs: switch 0x{SWITCH_GUID_BASE:x} + (level<<16) + index in level; host 0x{HOST_GUID_BASE:x} + (NID<<4), port GUID = node GUID + port."
    );
    out.push('\n');
    // Hosts first: ibsim's first node is where a client attaches by default.
    for h in &topo.hosts {
        let node = NodeRef::Host(h.id);
        let _ = writeln!(out, "caguid=0x{:x}", guids.host_guid(h.id).unwrap_or(0));
        let _ = writeln!(
            out,
            "Hca\t{} \"{}\"\t\t# \"{}\"",
            h.ports.len(),
            h.name,
            h.name
        );
        for p in 0..h.ports.len() as PortNo {
            let here = PortRef::host(h.id, p);
            let Some(peer) = topo.peer(here) else {
                continue;
            };
            let port_guid = guids.port_guid(here).unwrap_or(0);
            let peer_name = topo.node_name(peer.node);
            let _ = write!(
                out,
                "[{}]({port_guid:x}) \t\"{peer_name}\"[{}]",
                p + 1,
                peer.port + 1
            );
            if let (NodeRef::Host(_), Some(g)) = (peer.node, guids.port_guid(peer)) {
                let _ = write!(out, "({g:x})");
            }
            if with_lids {
                let _ = write!(
                    out,
                    "\t\t# lid {} lmc 0 \"{peer_name}\" lid {} 4xQDR",
                    lid(node),
                    lid(peer.node)
                );
            }
            out.push('\n');
        }
        out.push('\n');
    }
    for s in &topo.switches {
        let _ = writeln!(
            out,
            "switchguid=0x{:x}",
            guids.switch_guid(s.id).unwrap_or(0)
        );
        let _ = write!(
            out,
            "Switch\t{} \"{}\"\t\t# \"{}\"",
            s.ports.len(),
            s.name,
            s.name
        );
        if with_lids {
            let _ = write!(out, " base port 0 lid {} lmc 0", lid(NodeRef::Switch(s.id)));
        }
        out.push('\n');
        for p in 0..s.ports.len() as PortNo {
            let Some(peer) = topo.peer(PortRef::switch(s.id, p)) else {
                continue;
            };
            let peer_name = topo.node_name(peer.node);
            let _ = write!(out, "[{}]\t\"{peer_name}\"[{}]", p + 1, peer.port + 1);
            if let (NodeRef::Host(_), Some(g)) = (peer.node, guids.port_guid(peer)) {
                let _ = write!(out, "({g:x})");
            }
            if with_lids {
                let _ = write!(out, "\t\t# \"{peer_name}\" lid {} 4xQDR", lid(peer.node));
            }
            out.push('\n');
        }
        out.push('\n');
    }
    Ok(out)
}

/// Why a net file was rejected: the file, the line and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum IbnetError {
    /// The cause is part of the message (not a `source`), so that it is
    /// printed once whether or not the caller walks the error chain.
    #[error("{file}: cannot read: {error}")]
    Io { file: String, error: std::io::Error },
    #[error("{file}:{line}: {message}")]
    Parse {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: {error}")]
    Invalid { file: String, error: TopologyError },
}

impl IbnetError {
    /// The 1-based line, for parse errors.
    pub fn line(&self) -> Option<usize> {
        match self {
            IbnetError::Parse { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// A parsed net file: the fabric and the GUIDs the file gave its nodes.
#[derive(Clone, Debug)]
pub struct IbnetFabric {
    pub topology: Topology,
    pub guids: GuidMap,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Switch,
    Host,
}

struct RawPort {
    port: u16,
    remote: String,
    remote_port: u16,
    line: usize,
}

struct RawNode {
    kind: Kind,
    nports: u16,
    name: String,
    guid: u64,
    line: usize,
    ports: Vec<RawPort>,
}

/// Reads a net file; see [`from_ibnet_str`].
pub fn load_ibnet(path: impl AsRef<Path>) -> Result<IbnetFabric, IbnetError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let text = crate::input::read_bounded(path).map_err(|e| IbnetError::Io {
        file: file.clone(),
        error: match e {
            crate::input::InputError::Io(error) => error,
            other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
        },
    })?;
    from_ibnet_str(&text, &file)
}

/// Parses ibnetdiscover / ibsim net text; `origin` names it in errors.
///
/// Node names are the quoted node ids; hosts get NIDs and switches ids in
/// file order. Switch levels are taken back from GUIDs of flitnet's scheme
/// when at least one of them is above level 0 (a flat fabric stays
/// level-less). Links listed on one end only are accepted; two ends that
/// disagree are an error.
pub fn from_ibnet_str(text: &str, origin: &str) -> Result<IbnetFabric, IbnetError> {
    let err = |line: usize, message: String| IbnetError::Parse {
        file: origin.to_string(),
        line,
        message,
    };
    // ibsim 0.10's defaults when no guid directive is given.
    let mut next_switch_guid: u64 = 0x20_0000;
    let mut next_host_guid: u64 = 0x10_0000;
    let mut nodes: Vec<RawNode> = Vec::new();
    let mut in_record = false;
    for (i, raw_line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw_line.trim();
        if line.is_empty() {
            in_record = false;
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            let Some(node) = nodes.last_mut().filter(|_| in_record) else {
                return Err(err(
                    line_no,
                    "port line outside a node record (a blank line ended the record?)".into(),
                ));
            };
            let port = parse_port_line(line).map_err(|m| err(line_no, m))?;
            if port.port == 0 || port.port > node.nports {
                return Err(err(
                    line_no,
                    format!(
                        "`{}` has ports 1..={}; there is no port {}",
                        node.name, node.nports, port.port
                    ),
                ));
            }
            node.ports.push(RawPort {
                line: line_no,
                ..port
            });
            continue;
        }
        in_record = false;
        let keyword: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        match keyword.as_str() {
            "switchguid" | "caguid" | "hcaguids" | "rtguid" => {
                let value = parse_guid_assignment(line).map_err(|m| err(line_no, m))?;
                let slot = match keyword.as_str() {
                    "switchguid" => &mut next_switch_guid,
                    "rtguid" => continue,
                    _ => &mut next_host_guid,
                };
                *slot = match value {
                    GuidValue::Absolute(g) => g,
                    GuidValue::Relative(d) => slot.wrapping_add(d),
                };
            }
            "Switch" | "Hca" | "Ca" => {
                let kind = if keyword == "Switch" {
                    Kind::Switch
                } else {
                    Kind::Host
                };
                let (nports, name) =
                    parse_header(&line[keyword.len()..]).map_err(|m| err(line_no, m))?;
                let guid = match kind {
                    Kind::Switch => {
                        let g = next_switch_guid;
                        next_switch_guid = g.wrapping_add(1);
                        g
                    }
                    Kind::Host => {
                        let g = next_host_guid;
                        next_host_guid = g.wrapping_add(nports as u64 + 1);
                        g
                    }
                };
                nodes.push(RawNode {
                    kind,
                    nports,
                    name,
                    guid,
                    line: line_no,
                    ports: Vec::new(),
                });
                in_record = true;
            }
            "Rt" => return Err(err(line_no, "routers (Rt) are not supported".into())),
            "include" | "do" => {
                return Err(err(
                    line_no,
                    format!("`{keyword}` directives are not supported; inline the file"),
                ))
            }
            // Other directives (vendid, devid, sysimgguid, width, speed,
            // extspeed, module, pdebug) carry nothing flitnet models.
            _ if line.contains('=') => {}
            _ => return Err(err(line_no, format!("unrecognised line `{line}`"))),
        }
    }
    build(nodes, origin)
}

enum GuidValue {
    Absolute(u64),
    Relative(u64),
}

/// `switchguid=0x..[(portguid)]` or `caguid+0x..`.
fn parse_guid_assignment(line: &str) -> Result<GuidValue, String> {
    let (relative, value) = match line.find(['=', '+']) {
        Some(i) => (line.as_bytes()[i] == b'+', &line[i + 1..]),
        None => return Err(format!("`{line}`: expected `=` or `+` and a GUID")),
    };
    let digits: &str = value.trim().split(['(', ' ', '\t']).next().unwrap_or("");
    let parsed = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => digits.parse(),
    };
    let g = parsed.map_err(|_| format!("`{digits}` is not a GUID (e.g. 0x100000000000)"))?;
    Ok(if relative {
        GuidValue::Relative(g)
    } else {
        GuidValue::Absolute(g)
    })
}

/// `<nports> "<nodeid>" [# "desc" ...]` after the node type keyword.
fn parse_header(rest: &str) -> Result<(u16, String), String> {
    let rest = rest.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let nports: u16 = digits.parse().map_err(|_| {
        "expected a port count after the node type, e.g. `Switch 8 \"name\"`".to_string()
    })?;
    if nports == 0 || nports as usize > MAX_IB_PORTS + 1 {
        return Err(format!("{nports} ports: a node has 1..=255 ports"));
    }
    let after = &rest[digits.len()..];
    let (name, _) =
        quoted(after).ok_or("expected the node id in double quotes after the port count")?;
    if name.is_empty() {
        return Err("empty node id".into());
    }
    Ok((nports, name.to_string()))
}

/// The first `"..."` in `s` and what follows it.
fn quoted(s: &str) -> Option<(&str, &str)> {
    let start = s.find('"')?;
    let len = s[start + 1..].find('"')?;
    Some((&s[start + 1..start + 1 + len], &s[start + 2 + len..]))
}

/// `[lp](portguid) "remote"[rp](guid) trailer`, the `(..)` parts optional,
/// `[rp]` defaulting to 1 as in ibsim.
fn parse_port_line(line: &str) -> Result<RawPort, String> {
    let close = line
        .find(']')
        .ok_or("expected `[port]` at the start of a port line")?;
    let port: u16 = line[1..close]
        .trim()
        .parse()
        .map_err(|_| format!("`{}` is not a port number", &line[1..close]))?;
    let (remote, after) =
        quoted(&line[close + 1..]).ok_or("expected the remote node id in double quotes")?;
    let remote_port = match after.strip_prefix('[') {
        Some(r) => {
            let end = r.find(']').ok_or("unclosed `[` after the remote node id")?;
            r[..end]
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| format!("`{}` is not a remote port number (1-based)", &r[..end]))?
        }
        None => 1,
    };
    Ok(RawPort {
        port,
        remote: remote.to_string(),
        remote_port,
        line: 0,
    })
}

fn build(nodes: Vec<RawNode>, origin: &str) -> Result<IbnetFabric, IbnetError> {
    let err = |line: usize, message: String| IbnetError::Parse {
        file: origin.to_string(),
        line,
        message,
    };
    let mut topo = Topology::new(
        Path::new(origin)
            .file_stem()
            .map_or("imported".into(), |s| s.to_string_lossy().into_owned()),
        super::Family::Custom,
    );
    let mut first_line: HashMap<&str, usize> = HashMap::new();
    for n in &nodes {
        if let Some(first) = first_line.insert(&n.name, n.line) {
            return Err(err(
                n.line,
                format!("node id `{}` is also used on line {first}", n.name),
            ));
        }
    }
    let mut by_name: HashMap<&str, NodeRef> = HashMap::new();
    let mut switch_guids = Vec::new();
    let mut host_guids = Vec::new();
    // Hosts and switches, each in file order.
    let order: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].kind == Kind::Host)
        .chain((0..nodes.len()).filter(|&i| nodes[i].kind == Kind::Switch))
        .collect();
    for &i in &order {
        let n = &nodes[i];
        let node = match n.kind {
            Kind::Host => {
                host_guids.push(n.guid);
                NodeRef::Host(topo.add_host(n.name.clone(), n.nports as usize))
            }
            Kind::Switch => {
                switch_guids.push(n.guid);
                NodeRef::Switch(topo.add_switch(n.name.clone(), n.nports as usize))
            }
        };
        by_name.insert(&n.name, node);
    }
    restore_levels(&mut topo, &switch_guids);
    for &i in &order {
        let n = &nodes[i];
        let node = by_name[n.name.as_str()];
        for p in &n.ports {
            let here = PortRef {
                node,
                port: p.port - 1,
            };
            let Some(&remote) = by_name.get(p.remote.as_str()) else {
                return Err(err(
                    p.line,
                    format!(
                        "`{}` port {}: no node `{}` in the file",
                        n.name, p.port, p.remote
                    ),
                ));
            };
            let there = PortRef {
                node: remote,
                port: p.remote_port - 1,
            };
            if there.port as usize >= topo.radix(remote) {
                return Err(err(
                    p.line,
                    format!(
                        "`{}` has ports 1..={}; there is no port {}",
                        p.remote,
                        topo.radix(remote),
                        p.remote_port
                    ),
                ));
            }
            match (topo.peer(here), topo.peer(there)) {
                (Some(peer), _) if peer == there => continue, // the other end listed it
                (Some(peer), _) => {
                    return Err(err(
                        p.line,
                        format!(
                            "`{}` port {} is already linked to `{}`[{}]",
                            n.name,
                            p.port,
                            topo.node_name(peer.node),
                            peer.port + 1
                        ),
                    ))
                }
                (None, Some(peer)) => {
                    return Err(err(
                        p.line,
                        format!(
                            "`{}` port {} is linked to `{}`[{}], not to `{}`[{}]",
                            p.remote,
                            p.remote_port,
                            topo.node_name(peer.node),
                            peer.port + 1,
                            n.name,
                            p.port
                        ),
                    ))
                }
                (None, None) => {}
            }
            topo.connect(here, there, true)
                .map_err(|e| err(p.line, e.to_string()))?;
        }
    }
    topo.validate().map_err(|error| IbnetError::Invalid {
        file: origin.to_string(),
        error,
    })?;
    Ok(IbnetFabric {
        topology: topo,
        guids: GuidMap::from_parts(switch_guids, host_guids),
    })
}

/// Levels from flitnet-scheme switch GUIDs, if all switches have one and
/// some level is above 0.
fn restore_levels(topo: &mut Topology, guids: &[u64]) {
    let span = HOST_GUID_BASE - SWITCH_GUID_BASE;
    let offsets: Option<Vec<u64>> = guids
        .iter()
        .map(|&g| g.checked_sub(SWITCH_GUID_BASE).filter(|&o| o < span))
        .collect();
    let Some(offsets) = offsets else { return };
    let shift = if offsets.iter().any(|&o| o >> 32 != 0) {
        32
    } else {
        16
    };
    let levels: Vec<u32> = offsets.iter().map(|&o| (o >> shift) as u32).collect();
    if levels.iter().any(|&l| l > 0) {
        for (s, level) in topo.switches.iter_mut().zip(levels) {
            s.level = Some(level);
        }
    }
}

#[cfg(test)]
mod tests;
