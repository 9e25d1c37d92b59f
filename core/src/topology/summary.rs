//! A topology's vital statistics: node and link counts, switches per level,
//! port usage per radix, and the host-to-host diameter.

use super::{Family, HostKind, NodeRef, Topology};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Diameters cost one BFS over the switches per group of hosts with the
/// same attachments; above this many steps the summary skips it.
const DIAMETER_BUDGET: u64 = 300_000_000;

/// The largest host-to-host distance, in links crossed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Diameter {
    /// Every host reaches every other host; the longest shortest path.
    Hops(u32),
    /// Some host cannot reach another (one-way links, or no path at all).
    Unreachable { from: String, to: String },
    /// Fewer than two hosts.
    NotApplicable,
    /// Too large to compute here (see `DIAMETER_BUDGET`).
    Skipped,
}

/// How many switches of one radix use how many of their ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RadixRow {
    pub radix: usize,
    pub switches: usize,
    /// Cabled ports → number of switches with that many.
    pub used: BTreeMap<usize, usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub name: String,
    pub family: Family,
    pub hosts: usize,
    pub storage_hosts: usize,
    pub switches: usize,
    pub links: usize,
    /// Links between two switches.
    pub switch_links: usize,
    /// Links with a host on at least one end.
    pub host_links: usize,
    /// Links that carry flits one way only.
    pub one_way_links: usize,
    /// Switches per level (switches without a level are not counted here).
    pub levels: BTreeMap<u32, usize>,
    pub switches_without_level: usize,
    pub radix: Vec<RadixRow>,
    pub diameter: Diameter,
}

impl Summary {
    pub fn of(topo: &Topology) -> Summary {
        let mut levels = BTreeMap::new();
        let mut switches_without_level = 0;
        let mut by_radix: BTreeMap<usize, RadixRow> = BTreeMap::new();
        for s in &topo.switches {
            match s.level {
                Some(l) => *levels.entry(l).or_insert(0) += 1,
                None => switches_without_level += 1,
            }
            let row = by_radix.entry(s.ports.len()).or_insert_with(|| RadixRow {
                radix: s.ports.len(),
                switches: 0,
                used: BTreeMap::new(),
            });
            row.switches += 1;
            *row.used
                .entry(s.ports.iter().flatten().count())
                .or_insert(0) += 1;
        }
        let is_switch = |n: NodeRef| matches!(n, NodeRef::Switch(_));
        let switch_links = topo
            .links
            .iter()
            .filter(|l| is_switch(l.a.node) && is_switch(l.b.node))
            .count();
        Summary {
            name: topo.name.clone(),
            family: topo.family.clone(),
            hosts: topo.hosts.len(),
            storage_hosts: topo
                .hosts
                .iter()
                .filter(|h| h.kind == HostKind::Storage)
                .count(),
            switches: topo.switches.len(),
            links: topo.links.len(),
            switch_links,
            host_links: topo.links.len() - switch_links,
            one_way_links: topo.links.iter().filter(|l| !l.duplex).count(),
            levels,
            switches_without_level,
            radix: by_radix.into_values().collect(),
            diameter: diameter(topo),
        }
    }
}

/// Host-to-host diameter over the links' directions, without faults. Hosts
/// do not forward. Hosts with the same out-neighbours share one BFS.
pub fn diameter(topo: &Topology) -> Diameter {
    let h = topo.hosts.len();
    if h < 2 {
        return Diameter::NotApplicable;
    }
    let none = super::FaultSet::none();
    // Switches with a link that sends into each host.
    let mut into_host: Vec<Vec<u32>> = vec![Vec::new(); h];
    let mut groups: HashMap<Vec<NodeRef>, Vec<u32>> = HashMap::new();
    for host in 0..h as u32 {
        let mut out: Vec<NodeRef> = topo
            .out_neighbours(NodeRef::Host(host), &none)
            .into_iter()
            .map(|(_, p)| p.node)
            .collect();
        out.sort();
        out.dedup();
        groups.entry(out).or_default().push(host);
    }
    for s in 0..topo.switches.len() as u32 {
        for (_, peer) in topo.out_neighbours(NodeRef::Switch(s), &none) {
            if let NodeRef::Host(x) = peer.node {
                into_host[x as usize].push(s);
            }
        }
    }
    let work = groups.len() as u64 * (topo.switches.len() + 2 * topo.links.len()) as u64;
    if work > DIAMETER_BUDGET {
        return Diameter::Skipped;
    }
    // Deterministic order, so that `Unreachable` names the same pair each run.
    let mut groups: Vec<(Vec<NodeRef>, Vec<u32>)> = groups.into_iter().collect();
    groups.sort_by_key(|(_, members)| members[0]);
    let mut worst = 0;
    let mut sw_dist = vec![u32::MAX; topo.switches.len()];
    let mut queue = std::collections::VecDeque::new();
    for (out, members) in &groups {
        sw_dist.fill(u32::MAX);
        queue.clear();
        let mut host_dist = vec![u32::MAX; h];
        for n in out {
            match *n {
                NodeRef::Switch(s) => {
                    sw_dist[s as usize] = 1;
                    queue.push_back(s);
                }
                NodeRef::Host(x) => host_dist[x as usize] = 1,
            }
        }
        while let Some(s) = queue.pop_front() {
            let d = sw_dist[s as usize];
            for (_, peer) in topo.out_neighbours(NodeRef::Switch(s), &none) {
                if let NodeRef::Switch(t) = peer.node {
                    if sw_dist[t as usize] == u32::MAX {
                        sw_dist[t as usize] = d + 1;
                        queue.push_back(t);
                    }
                }
            }
        }
        for (x, dist) in host_dist.iter_mut().enumerate() {
            for &s in &into_host[x] {
                let via = sw_dist[s as usize].saturating_add(1);
                *dist = (*dist).min(via);
            }
        }
        // The two farthest hosts, so that each member skips itself.
        let mut best: [(u32, Option<usize>); 2] = [(0, None); 2];
        for (x, &d) in host_dist.iter().enumerate() {
            if d > best[0].0 || best[0].1.is_none() {
                best[1] = best[0];
                best[0] = (d, Some(x));
            } else if d > best[1].0 || best[1].1.is_none() {
                best[1] = (d, Some(x));
            }
        }
        for &src in members {
            let (d, to) = if best[0].1 == Some(src as usize) {
                best[1]
            } else {
                best[0]
            };
            let Some(to) = to else { continue };
            if d == u32::MAX {
                return Diameter::Unreachable {
                    from: topo.hosts[src as usize].name.clone(),
                    to: topo.hosts[to].name.clone(),
                };
            }
            worst = worst.max(d);
        }
    }
    Diameter::Hops(worst)
}

/// `kary-ntree k=4 n=2`, `pgft m=[4,4] w=[1,2] p=[1,2]`, `torus dims=3x3x3`.
pub struct FamilyDisplay<'a>(pub &'a Family);

impl fmt::Display for FamilyDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[u32], sep: &str| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(sep)
        };
        match self.0 {
            Family::KaryNTree { k, n } => write!(f, "kary-ntree k={k} n={n}"),
            Family::Ruft { k, n } => write!(f, "ruft k={k} n={n}"),
            Family::Pgft(p) => write!(
                f,
                "pgft h={} m=[{}] w=[{}] p=[{}]",
                p.height(),
                list(&p.m, ","),
                list(&p.w, ","),
                list(&p.p, ",")
            ),
            Family::Mesh { dims } => write!(f, "mesh dims={}", list(dims, "x")),
            Family::Torus { dims } => write!(f, "torus dims={}", list(dims, "x")),
            Family::Hypercube { d } => write!(f, "hypercube d={d}"),
            Family::Custom => write!(f, "custom (explicit or imported)"),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<10} {}", "topology", self.name)?;
        writeln!(f, "{:<10} {}", "family", FamilyDisplay(&self.family))?;
        writeln!(
            f,
            "{:<10} {} ({} compute, {} storage)",
            "hosts",
            self.hosts,
            self.hosts - self.storage_hosts,
            self.storage_hosts
        )?;
        writeln!(f, "{:<10} {}", "switches", self.switches)?;
        write!(
            f,
            "{:<10} {} ({} switch-switch, {} host)",
            "links", self.links, self.switch_links, self.host_links
        )?;
        if self.one_way_links > 0 {
            write!(f, ", {} one-way", self.one_way_links)?;
        }
        writeln!(f)?;
        let diameter = match &self.diameter {
            Diameter::Hops(d) => format!("{d} hops host to host"),
            Diameter::Unreachable { from, to } => format!("infinite: {from} cannot reach {to}"),
            Diameter::NotApplicable => "n/a (fewer than 2 hosts)".to_string(),
            Diameter::Skipped => "not computed (fabric too large)".to_string(),
        };
        writeln!(f, "{:<10} {diameter}", "diameter")?;
        if !self.levels.is_empty() {
            writeln!(f, "levels     level  switches")?;
            for (level, count) in &self.levels {
                writeln!(f, "           {level:<6} {count}")?;
            }
            if self.switches_without_level > 0 {
                writeln!(
                    f,
                    "           {:<6} {}",
                    "none", self.switches_without_level
                )?;
            }
        }
        if !self.radix.is_empty() {
            writeln!(
                f,
                "ports      radix  switches  cabled ports (count of switches)"
            )?;
            for row in &self.radix {
                let used: Vec<String> = row
                    .used
                    .iter()
                    .rev()
                    .map(|(u, n)| format!("{u} ({n})"))
                    .collect();
                writeln!(
                    f,
                    "           {:<6} {:<9} {}",
                    row.radix,
                    row.switches,
                    used.join(", ")
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::{hypercube, kary_ntree, mesh_or_torus, pgft, ruft};
    use crate::topology::{PgftParams, PortRef};

    #[test]
    fn kary_ntree_summary() {
        let s = Summary::of(&kary_ntree(4, 2).unwrap());
        assert_eq!((s.hosts, s.switches, s.links), (16, 8, 32));
        assert_eq!((s.switch_links, s.host_links, s.one_way_links), (16, 16, 0));
        assert_eq!(s.levels, BTreeMap::from([(0, 4), (1, 4)]));
        assert_eq!(s.radix.len(), 1);
        assert_eq!(s.radix[0].radix, 8);
        // Leaves use all 8 ports; tops only their 4 down ports.
        assert_eq!(s.radix[0].used, BTreeMap::from([(4, 4), (8, 4)]));
        assert_eq!(s.diameter, Diameter::Hops(4));
        let text = s.to_string();
        assert!(text.contains("family     kary-ntree k=4 n=2"), "{text}");
        assert!(
            text.contains("links      32 (16 switch-switch, 16 host)"),
            "{text}"
        );
        assert!(
            text.contains("           8      8         8 (4), 4 (4)"),
            "{text}"
        );
        assert!(text.contains("diameter   4 hops host to host"), "{text}");
    }

    #[test]
    fn diameters_match_closed_forms() {
        // k-ary n-tree: 2n; torus: Σ⌊k/2⌋ + 2; mesh: Σ(k−1) + 2; d-cube: d + 2.
        assert_eq!(diameter(&kary_ntree(2, 3).unwrap()), Diameter::Hops(6));
        assert_eq!(diameter(&kary_ntree(4, 3).unwrap()), Diameter::Hops(6));
        assert_eq!(
            diameter(&mesh_or_torus(&[3, 3, 3], true).unwrap()),
            Diameter::Hops(5)
        );
        assert_eq!(
            diameter(&mesh_or_torus(&[8, 8], false).unwrap()),
            Diameter::Hops(16)
        );
        assert_eq!(
            diameter(&mesh_or_torus(&[4, 5], true).unwrap()),
            Diameter::Hops(6)
        );
        assert_eq!(diameter(&hypercube(4).unwrap()), Diameter::Hops(6));
        // RUFT: every path has n+1 links.
        assert_eq!(diameter(&ruft(4, 2).unwrap()), Diameter::Hops(3));
        // G_3: leaves reach each other through the tops: 6 links.
        let g3 = pgft(&PgftParams {
            m: vec![4, 4, 6],
            w: vec![1, 2, 2],
            p: vec![1, 1, 1],
        })
        .unwrap();
        assert_eq!(diameter(&g3), Diameter::Hops(6));
    }

    #[test]
    fn one_way_cut_makes_the_diameter_infinite() {
        let mut t = Topology::new("line", Family::Custom);
        let s0 = t.add_switch("s0", 2);
        let s1 = t.add_switch("s1", 3);
        let a = t.add_host("a", 1);
        let b = t.add_host("b", 1);
        t.connect(PortRef::host(a, 0), PortRef::switch(s0, 0), true)
            .unwrap();
        t.connect(PortRef::switch(s0, 1), PortRef::switch(s1, 0), false)
            .unwrap();
        t.connect(PortRef::host(b, 0), PortRef::switch(s1, 1), true)
            .unwrap();
        assert_eq!(
            diameter(&t),
            Diameter::Unreachable {
                from: "b".into(),
                to: "a".into()
            }
        );
        let s = Summary::of(&t);
        assert_eq!(s.one_way_links, 1);
        assert_eq!(s.radix.len(), 2);
        assert_eq!(s.switches_without_level, 2);
        assert!(s.to_string().contains("infinite: b cannot reach a"));
    }

    #[test]
    fn hosts_linked_directly_are_one_hop_apart() {
        let mut t = Topology::new("pair", Family::Custom);
        let a = t.add_host("a", 1);
        let b = t.add_host("b", 1);
        t.connect(PortRef::host(a, 0), PortRef::host(b, 0), true)
            .unwrap();
        assert_eq!(diameter(&t), Diameter::Hops(1));
        let mut one = Topology::new("one", Family::Custom);
        one.add_host("a", 1);
        assert_eq!(diameter(&one), Diameter::NotApplicable);
    }
}
