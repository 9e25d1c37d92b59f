//! Parsers for the values users type: durations and link or port names.

use anyhow::{bail, Context, Result};
use flitnet_core::topology::{LinkId, NodeRef, PortRef, Topology};
use std::time::Duration;

/// Parses `5s`, `500ms`, `20us`, `100ns`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 5s, 500ms, 20us)"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}` (use ns, us, ms, s, m)"
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{text}` is not a valid duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Finds the link on `NODE:PORT`.
pub fn parse_link(topo: &Topology, spec: &str) -> Result<LinkId> {
    let (name, port) = spec
        .rsplit_once(':')
        .with_context(|| format!("link `{spec}`: expected NODE:PORT, e.g. s0-0:4"))?;
    let node = topo
        .find_node(name)
        .with_context(|| format!("link `{spec}`: no node named `{name}`"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("link `{spec}`: `{port}` is not a port number"))?;
    if port as usize >= topo.radix(node) {
        bail!(
            "link `{spec}`: {name} has no port {port} (radix {})",
            topo.radix(node)
        );
    }
    topo.link_at(PortRef { node, port })
        .with_context(|| format!("link `{spec}`: port {port} of {name} is not cabled"))
}

/// A cabled switch port named `NODE:PORT`.
pub fn parse_switch_port(topo: &Topology, spec: &str) -> Result<PortRef> {
    let link = parse_link(topo, spec)?;
    let l = &topo.links[link as usize];
    let end = [l.a, l.b]
        .into_iter()
        .find(|e| spec.rsplit_once(':').map(|(n, _)| n) == Some(topo.node_name(e.node)))
        .expect("parse_link found the link by this end");
    if !matches!(end.node, NodeRef::Switch(_)) {
        bail!("`{spec}`: credits are withheld on switch ports only");
    }
    Ok(end)
}
