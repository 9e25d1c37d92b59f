//! OpenSM's LFT dump (`opensm-lfts.dump`), both ways (peers.md §1 "Dump file
//! formats" and "Feeding *our* LFTs back in").
//!
//! The format, one section per switch:
//!
//! ```text
//! Unicast lids [0-24] of switch Lid 17 guid 0x0000100000000000 ('s0-0'):
//! 0x0001 001 # Channel Adapter portguid 0x0000200000000001: 'h00'
//! 0x0011 000 # Switch portguid 0x0000100000000000: 's0-0'
//! 24 lids dumped
//! ```
//!
//! Ports are 1-based (port 000 is the switch itself); flitnet's port p is
//! p + 1. OpenSM's own loader (`-R file -U <dump>`, osm_ucast_file.c) needs
//! ` guid 0x<switch GUID>` in the header and `0x<lid> <port>` per entry; when
//! an entry carries ` portguid 0x<GUID>` it remaps the LID to the one it
//! assigned to that port, so the LIDs we write need not match OpenSM's.
//!
//! **Export** ([`to_lfts_dump`]) writes one section per switch with
//! flitnet's LIDs ([`Topology::lid`], the ones the net file export
//! announces) and every entry annotated with the destination's port GUID
//! (from a [`GuidMap`]). Each switch also gets its own LID → port 0.
//!
//! **Import** ([`from_lfts_dump`]) maps each section to a switch by its node
//! GUID, and each entry to a destination host by, in order:
//! 1. the entry's ` portguid 0x…` annotation (OpenSM always writes it);
//! 2. otherwise its LID, through the LIDs OpenSM assigned ([`LidAssignment`],
//!    read from its `guid2lid` cache file) and then the GUID map;
//! 3. otherwise its LID read as flitnet's own LID.
//!
//! Entries for switch LIDs are not part of flitnet's tables (they route
//! management traffic to switches) and are counted, not kept.

use super::{Lft, RoutingTables, SwitchTable, VcPolicy};
use crate::topology::ibnet::GuidMap;
use crate::topology::{HostId, NodeRef, PortNo, PortRef, SwitchId, Topology};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Why tables cannot be written as an OpenSM dump.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpensmExportError {
    #[error("tables cover {tables} switches but the topology has {switches}")]
    TableCount { tables: usize, switches: usize },
    #[error("switch {switch}: adaptive tables have no single output port per destination; OpenSM LFTs cannot hold them")]
    Adaptive { switch: String },
    #[error("switch {switch}: VC changes along the path (datelines) cannot be expressed in an OpenSM LFT dump")]
    VcPolicy { switch: String },
    #[error("{node}: no GUID in the GUID map (built for another topology?)")]
    NoGuid { node: String },
    #[error("switch {switch}: port {port} does not fit OpenSM's one-byte port numbers")]
    PortTooLarge { switch: String, port: PortNo },
}

/// Why a dump or a guid2lid file was rejected: file, 1-based line, reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpensmError {
    #[error("{file}:{line}: {message}")]
    Parse {
        file: String,
        line: usize,
        message: String,
    },
}

impl OpensmError {
    /// The 1-based line at fault.
    pub fn line(&self) -> usize {
        match self {
            OpensmError::Parse { line, .. } => *line,
        }
    }
}

/// The LIDs OpenSM assigned, by port GUID (its `guid2lid` cache file:
/// `0x<port GUID> 0x<min LID> 0x<max LID>` per record, blank lines between).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LidAssignment {
    by_lid: HashMap<u32, u64>,
}

impl LidAssignment {
    /// Parses a `guid2lid` file; `origin` names it in errors.
    pub fn parse_guid2lid(text: &str, origin: &str) -> Result<LidAssignment, OpensmError> {
        let mut by_lid = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |message: String| OpensmError::Parse {
                file: origin.to_string(),
                line: i + 1,
                message,
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 2 {
                return Err(err(format!(
                    "expected `0x<port GUID> 0x<min LID> [0x<max LID>]`, got `{line}`"
                )));
            }
            let guid =
                hex(fields[0]).ok_or_else(|| err(format!("`{}` is not a GUID", fields[0])))?;
            let lo = hex(fields[1]).ok_or_else(|| err(format!("`{}` is not a LID", fields[1])))?;
            let hi = match fields.get(2) {
                Some(f) => hex(f).ok_or_else(|| err(format!("`{f}` is not a LID")))?,
                None => lo,
            };
            if lo > 0xFFFF || hi < lo || hi > 0xFFFF {
                return Err(err(format!("LID range 0x{lo:x}-0x{hi:x} is not valid")));
            }
            for lid in lo..=hi {
                by_lid.insert(lid as u32, guid);
            }
        }
        Ok(LidAssignment { by_lid })
    }

    /// The port GUID that holds `lid`.
    pub fn port_guid(&self, lid: u32) -> Option<u64> {
        self.by_lid.get(&lid).copied()
    }
}

fn hex(s: &str) -> Option<u64> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    u64::from_str_radix(digits, 16).ok()
}

/// The host port a destination's LFT entry is announced for: its first
/// cabled port (the one flitnet hosts inject through when nothing failed).
fn host_main_port(topo: &Topology, h: HostId) -> PortNo {
    topo.hosts[h as usize]
        .ports
        .iter()
        .position(Option::is_some)
        .unwrap_or(0) as PortNo
}

/// Writes `tables` as an `opensm-lfts.dump` that `opensm -R file -U` loads
/// (see the module doc). LFT and interval tables are written by their
/// deterministic lookup; adaptive tables and dateline VC policies are refused.
pub fn to_lfts_dump(
    topo: &Topology,
    tables: &RoutingTables,
    guids: &GuidMap,
) -> Result<String, OpensmExportError> {
    if tables.switches.len() != topo.num_switches() {
        return Err(OpensmExportError::TableCount {
            tables: tables.switches.len(),
            switches: topo.num_switches(),
        });
    }
    let max_lid = topo.lid(NodeRef::Switch(
        topo.num_switches().saturating_sub(1) as SwitchId
    ));
    let mut host_guids = Vec::with_capacity(topo.num_hosts());
    for h in &topo.hosts {
        let g = guids
            .host_port_guid(h.id, host_main_port(topo, h.id))
            .ok_or_else(|| OpensmExportError::NoGuid {
                node: h.name.clone(),
            })?;
        host_guids.push(g);
    }
    let mut out = String::new();
    for (sw, table) in topo.switches.iter().zip(&tables.switches) {
        if matches!(table, SwitchTable::Adaptive(_)) {
            return Err(OpensmExportError::Adaptive {
                switch: sw.name.clone(),
            });
        }
        if matches!(tables.vc_policy(sw.id as usize), VcPolicy::Dateline { .. }) {
            return Err(OpensmExportError::VcPolicy {
                switch: sw.name.clone(),
            });
        }
        let guid = guids
            .switch_guid(sw.id)
            .ok_or_else(|| OpensmExportError::NoGuid {
                node: sw.name.clone(),
            })?;
        let own_lid = topo.lid(NodeRef::Switch(sw.id));
        let _ = writeln!(
            out,
            "Unicast lids [0-{max_lid}] of switch Lid {own_lid} guid 0x{guid:016x} ('{}'):",
            sw.name
        );
        let mut dumped = 0;
        for h in &topo.hosts {
            let Some(port) = table.lookup(h.id) else {
                continue;
            };
            if port >= 255 {
                return Err(OpensmExportError::PortTooLarge {
                    switch: sw.name.clone(),
                    port,
                });
            }
            let _ = writeln!(
                out,
                "0x{:04x} {:03} # Channel Adapter portguid 0x{:016x}: '{}'",
                topo.lid(NodeRef::Host(h.id)),
                port + 1,
                host_guids[h.id as usize],
                h.name
            );
            dumped += 1;
        }
        let _ = writeln!(
            out,
            "0x{own_lid:04x} 000 # Switch portguid 0x{guid:016x}: '{}'",
            sw.name
        );
        let _ = writeln!(out, "{} lids dumped", dumped + 1);
    }
    Ok(out)
}

/// An imported dump: flitnet tables plus what was read past.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedLfts {
    /// One LFT per switch (all `None` for a switch the dump has no section for).
    pub tables: RoutingTables,
    /// The LID the dump gives each host (the LID of its entries), if any.
    pub host_lids: Vec<Option<u32>>,
    /// The LID in each switch's section header, if it had one.
    pub switch_lids: Vec<Option<u32>>,
    /// Switches the dump has no section for.
    pub missing_switches: Vec<SwitchId>,
    /// Entries for switch LIDs (management routes, not kept).
    pub switch_entries: usize,
    /// Entries for a host port other than the one flitnet injects through.
    pub other_port_entries: usize,
}

/// Reads an `opensm-lfts.dump` into LFT tables for `topo` (see the module
/// doc for how switches and destinations are resolved). `engine` names the
/// tables (e.g. `opensm-ftree`); `origin` names the file in errors.
pub fn from_lfts_dump(
    text: &str,
    origin: &str,
    topo: &Topology,
    guids: &GuidMap,
    lids: Option<&LidAssignment>,
    engine: &str,
) -> Result<ImportedLfts, OpensmError> {
    let nh = topo.num_hosts();
    let ns = topo.num_switches();
    let mut lfts: Vec<Option<Lft>> = vec![None; ns];
    let mut host_lids = vec![None; nh];
    let mut switch_lids = vec![None; ns];
    let mut switch_entries = 0;
    let mut other_port_entries = 0;
    let mut current: Option<SwitchId> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |message: String| OpensmError::Parse {
            file: origin.to_string(),
            line: line_no,
            message,
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with("Unicast lids") {
            let s = parse_header(line, topo, guids).map_err(err)?;
            if lfts[s as usize].is_some() {
                return Err(err(format!(
                    "a second section for switch {}",
                    topo.switches[s as usize].name
                )));
            }
            lfts[s as usize] = Some(Lft {
                ports: vec![None; nh],
            });
            switch_lids[s as usize] = header_lid(line);
            current = Some(s);
            continue;
        }
        if line.starts_with("Multicast mlids") {
            return Err(err(
                "this is a multicast dump (opensm.mcfdbs); expected opensm-lfts.dump".into(),
            ));
        }
        if !line.starts_with("0x") {
            // "N lids dumped" trailers and anything else OpenSM may print.
            if line.ends_with("lids dumped") {
                continue;
            }
            return Err(err(format!("unrecognised line `{line}`")));
        }
        let Some(s) = current else {
            return Err(err(
                "LFT entry before any `Unicast lids ... guid 0x...` header".into(),
            ));
        };
        let entry = parse_entry(line).map_err(err)?;
        let radix = topo.switches[s as usize].ports.len();
        let dest = resolve_destination(&entry, topo, guids, lids).map_err(err)?;
        let h = match dest.node {
            NodeRef::Switch(_) => {
                switch_entries += 1;
                continue;
            }
            NodeRef::Host(h) => h,
        };
        // One entry per host is kept: the one for the port it injects through.
        if dest.port != host_main_port(topo, h) {
            other_port_entries += 1;
            continue;
        }
        if entry.port == 0 {
            return Err(err(format!(
                "switch {} sends host {} to port 0 (the switch itself)",
                topo.switches[s as usize].name, topo.hosts[h as usize].name
            )));
        }
        if entry.port as usize > radix {
            return Err(err(format!(
                "switch {} has ports 1..={radix}; there is no port {}",
                topo.switches[s as usize].name, entry.port
            )));
        }
        let lft = lfts[s as usize].as_mut().expect("section opened above");
        lft.ports[h as usize] = Some(entry.port - 1);
        host_lids[h as usize].get_or_insert(entry.lid);
    }
    let missing_switches = (0..ns as SwitchId)
        .filter(|&s| lfts[s as usize].is_none())
        .collect();
    let switches = lfts
        .into_iter()
        .map(|l| {
            SwitchTable::Lft(l.unwrap_or_else(|| Lft {
                ports: vec![None; nh],
            }))
        })
        .collect();
    Ok(ImportedLfts {
        tables: RoutingTables {
            engine: engine.to_string(),
            switches,
            vcs: 1,
            vc_policy: Vec::new(),
        },
        host_lids,
        switch_lids,
        missing_switches,
        switch_entries,
        other_port_entries,
    })
}

/// The switch named by a `Unicast lids ... guid 0x<GUID> ...` header.
fn parse_header(line: &str, topo: &Topology, guids: &GuidMap) -> Result<SwitchId, String> {
    let at = line
        .find(" guid 0x")
        .ok_or("switch header without ` guid 0x<GUID>`")?;
    let rest = &line[at + 8..];
    let digits: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
    let guid = u64::from_str_radix(&digits, 16)
        .map_err(|_| format!("cannot read the switch GUID in `{rest}`"))?;
    match guids.node_by_guid(guid) {
        Some(NodeRef::Switch(s)) if (s as usize) < topo.num_switches() => Ok(s),
        Some(NodeRef::Host(h)) => Err(format!(
            "GUID 0x{guid:016x} is host {}, not a switch",
            topo.hosts.get(h as usize).map_or("?", |h| h.name.as_str())
        )),
        _ => Err(format!(
            "switch GUID 0x{guid:016x} is not in the topology (dump from another fabric?)"
        )),
    }
}

/// `... switch Lid <n> guid ...` → n.
fn header_lid(line: &str) -> Option<u32> {
    let rest = &line[line.find("switch Lid ")? + 11..];
    rest.split_whitespace().next()?.parse().ok()
}

struct Entry {
    lid: u32,
    /// 1-based switch port, 0 = the switch itself.
    port: u16,
    port_guid: Option<u64>,
}

/// `0x<lid> <port> [# ... portguid 0x<GUID>: '<desc>']`.
fn parse_entry(line: &str) -> Result<Entry, String> {
    let mut fields = line.split_whitespace();
    let lid_text = fields.next().unwrap_or("");
    let lid = hex(lid_text)
        .filter(|&l| (1..=0xFFFF).contains(&l))
        .ok_or_else(|| format!("`{lid_text}` is not a unicast LID (0x0001..0xffff)"))?
        as u32;
    let port_text = fields.next().ok_or("LID without an output port")?;
    let port: u16 = port_text
        .parse()
        .ok()
        .filter(|&p| p < 255)
        .ok_or_else(|| format!("`{port_text}` is not a port number (0..=254)"))?;
    let port_guid = match line.find(" portguid 0x") {
        Some(at) => {
            let rest = &line[at + 12..];
            let digits: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
            Some(
                u64::from_str_radix(&digits, 16)
                    .map_err(|_| format!("cannot read the port GUID in `{rest}`"))?,
            )
        }
        None => None,
    };
    Ok(Entry {
        lid,
        port,
        port_guid,
    })
}

/// The port an entry routes to (see the module doc for the order of lookups).
fn resolve_destination(
    entry: &Entry,
    topo: &Topology,
    guids: &GuidMap,
    lids: Option<&LidAssignment>,
) -> Result<PortRef, String> {
    let guid = entry
        .port_guid
        .or_else(|| lids.and_then(|l| l.port_guid(entry.lid)));
    let port = match guid {
        Some(g) => guids.port_by_guid(g).ok_or_else(|| {
            format!(
                "port GUID 0x{g:016x} (LID 0x{:04x}) is not in the topology",
                entry.lid
            )
        })?,
        None => match topo.node_by_lid(entry.lid) {
            Some(NodeRef::Host(h)) => PortRef::host(h, host_main_port(topo, h)),
            Some(NodeRef::Switch(s)) => PortRef::switch(s, 0),
            None => {
                return Err(format!(
                    "LID 0x{:04x} has no port GUID and is not one of flitnet's LIDs",
                    entry.lid
                ))
            }
        },
    };
    match port.node {
        NodeRef::Host(h) if h as usize >= topo.num_hosts() => {
            Err(format!("host {h} is not in the topology"))
        }
        NodeRef::Switch(s) if s as usize >= topo.num_switches() => {
            Err(format!("switch {s} is not in the topology"))
        }
        _ => Ok(port),
    }
}

#[cfg(test)]
mod tests;
