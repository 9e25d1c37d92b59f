//! Graphviz export. Full-duplex links are undirected edges, one-way links
//! (RUFT) are `->` edges; switches are boxes, hosts ellipses (storage hosts
//! filled), and switches of one level share a rank, leaves at the bottom.
//! Edge ends are labelled with the (0-based) port numbers.

use super::{HostKind, Topology};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A DOT identifier: always quoted, with `"` and `\` escaped.
fn id(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            '\n' => s.push_str("\\n"),
            _ => s.push(c),
        }
    }
    s.push('"');
    s
}

/// Writes `topo` in Graphviz DOT. An all-duplex fabric is a `graph`; a
/// fabric with one-way links is a `digraph` whose duplex edges carry
/// `dir=none`, since DOT cannot mix `--` and `->` in one graph.
pub fn to_dot(topo: &Topology) -> String {
    let directed = topo.links.iter().any(|l| !l.duplex);
    let (kind, duplex_edge) = if directed {
        ("digraph", " -> ")
    } else {
        ("graph", " -- ")
    };
    let mut out = String::new();
    let _ = writeln!(out, "{kind} {} {{", id(&topo.name));
    out.push_str("  rankdir=BT;\n  node [fontsize=10];\n  edge [fontsize=8];\n");
    for h in &topo.hosts {
        let style = match h.kind {
            HostKind::Storage => ", style=filled, fillcolor=lightgoldenrod",
            HostKind::Compute => "",
        };
        let _ = writeln!(out, "  {} [shape=ellipse{style}];", id(&h.name));
    }
    for s in &topo.switches {
        let _ = writeln!(out, "  {} [shape=box];", id(&s.name));
    }
    // Hosts below everything, then one rank per switch level.
    let mut levels: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for s in &topo.switches {
        if let Some(l) = s.level {
            levels.entry(l).or_default().push(&s.name);
        }
    }
    if !levels.is_empty() {
        let hosts: Vec<String> = topo.hosts.iter().map(|h| id(&h.name)).collect();
        let _ = writeln!(out, "  {{ rank=min; {}; }}", hosts.join("; "));
        for names in levels.values() {
            let names: Vec<String> = names.iter().map(|n| id(n)).collect();
            let _ = writeln!(out, "  {{ rank=same; {}; }}", names.join("; "));
        }
    }
    for l in &topo.links {
        let a = id(topo.node_name(l.a.node));
        let b = id(topo.node_name(l.b.node));
        let ports = format!("taillabel=\"{}\", headlabel=\"{}\"", l.a.port, l.b.port);
        if l.duplex {
            let extra = if directed { ", dir=none" } else { "" };
            let _ = writeln!(out, "  {a}{duplex_edge}{b} [{ports}{extra}];");
        } else {
            let _ = writeln!(out, "  {a} -> {b} [{ports}];");
        }
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::{kary_ntree, mesh_or_torus, ruft};

    #[test]
    fn duplex_fabrics_are_undirected_graphs_ranked_by_level() {
        let mut t = kary_ntree(2, 2).unwrap();
        t.hosts[1].kind = HostKind::Storage;
        let dot = to_dot(&t);
        assert!(dot.starts_with("graph \"2-ary 2-tree\" {\n"), "{dot}");
        assert!(!dot.contains("->"));
        assert!(
            dot.contains("  \"h0\" -- \"s0-0\" [taillabel=\"0\", headlabel=\"0\"];"),
            "{dot}"
        );
        assert!(dot.contains("{ rank=same; \"s0-0\"; \"s0-1\"; }"), "{dot}");
        assert!(dot.contains("{ rank=same; \"s1-0\"; \"s1-1\"; }"), "{dot}");
        assert!(
            dot.contains("{ rank=min; \"h0\"; \"h1\"; \"h2\"; \"h3\"; }"),
            "{dot}"
        );
        assert!(dot.contains("\"h1\" [shape=ellipse, style=filled"), "{dot}");
        assert_eq!(dot.matches(" -- ").count(), t.links.len());
        assert!(dot.ends_with("}\n"));
    }

    #[test]
    fn one_way_links_are_arrows() {
        let t = ruft(2, 2).unwrap();
        let dot = to_dot(&t);
        assert!(dot.starts_with("digraph "), "{dot}");
        assert_eq!(dot.matches(" -> ").count(), t.links.len());
        assert!(!dot.contains("dir=none"));
        assert!(
            dot.contains("\"h0\" -> \"s0-0\" [taillabel=\"0\", headlabel=\"0\"]"),
            "{dot}"
        );
    }

    #[test]
    fn level_less_fabrics_have_no_ranks_and_names_are_escaped() {
        let mut t = mesh_or_torus(&[2, 2], false).unwrap();
        t.name = "a \"quoted\" name".into();
        let dot = to_dot(&t);
        assert!(
            dot.starts_with("graph \"a \\\"quoted\\\" name\" {"),
            "{dot}"
        );
        assert!(!dot.contains("rank="));
    }
}
