//! Generators for the seeds' topologies, with the papers' labelling and port
//! numbering.

use super::{Family, NodeRef, PgftParams, PortNo, PortRef, Topology, TopologyError};

fn invalid(
    family: &'static str,
    param: impl Into<String>,
    value: impl ToString,
    reason: impl Into<String>,
) -> TopologyError {
    TopologyError::InvalidParameter {
        family,
        param: param.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Upper bound on generated nodes, so that a typo (k=400) is an error rather
/// than an out-of-memory.
pub const MAX_NODES: u64 = 4_000_000;

/// Upper bound on a node's port count (port numbers are `u16`).
pub const MAX_RADIX: u64 = u16::MAX as u64;
/// Upper bound on generated links.
pub const MAX_LINKS: u64 = 16_000_000;

/// Product of parameters, saturating instead of overflowing (the caller
/// compares it with a bound).
fn saturating_product(xs: &[u32]) -> u64 {
    xs.iter().fold(1u64, |a, &x| a.saturating_mul(x as u64))
}

/// Mixed-radix decomposition, digit 0 fastest.
fn digits(mut x: u64, radices: &[u32]) -> Vec<u32> {
    radices
        .iter()
        .map(|&r| {
            let d = (x % r as u64) as u32;
            x /= r as u64;
            d
        })
        .collect()
}

/// Mixed-radix composition, digit 0 fastest.
fn compose(ds: &[u32], radices: &[u32]) -> u64 {
    ds.iter()
        .zip(radices)
        .rev()
        .fold(0u64, |acc, (&d, &r)| acc * r as u64 + d as u64)
}

/// PGFT(h; m; w; p) with seed 001 §3.4's labels and ports:
/// - element labels `a_0..a_{h-1}`; at level ℓ digit i ranges over `w_i` if
///   i ≤ ℓ, else `m_i` (hosts: level −1, all digits over `m_i`);
/// - a level-(ℓ−1) element X and a level-ℓ switch Y are linked iff their labels
///   differ at most in digit ℓ, by `p_ℓ` parallel links j;
/// - on Y, down port `c + j·m_ℓ` (c = X's digit ℓ); on X, up port
///   `#down(X) + a + j·w_ℓ` (a = Y's digit ℓ);
/// - NID and switch index are mixed-radix numbers, digit 0 fastest; switch ids
///   run level by level.
pub fn pgft(params: &PgftParams) -> Result<Topology, TopologyError> {
    const F: &str = "pgft";
    let h = params.m.len();
    if h == 0 {
        return Err(invalid(F, "h", 0, "a PGFT needs at least one level"));
    }
    if params.w.len() != h || params.p.len() != h {
        return Err(invalid(
            F,
            "w/p",
            format!("{}/{}", params.w.len(), params.p.len()),
            format!("m, w and p must all have h = {h} entries"),
        ));
    }
    for (name, v) in [("m", &params.m), ("w", &params.w), ("p", &params.p)] {
        if let Some(i) = v.iter().position(|&x| x == 0) {
            return Err(invalid(F, format!("{name}[{i}]"), 0, "must be at least 1"));
        }
    }
    let hosts: u64 = saturating_product(&params.m);
    let level_radices = |l: usize| -> Vec<u32> {
        (0..h)
            .map(|i| if i <= l { params.w[i] } else { params.m[i] })
            .collect()
    };
    let level_sizes: Vec<u64> = (0..h)
        .map(|l| saturating_product(&level_radices(l)))
        .collect();
    let total = level_sizes.iter().fold(hosts, |a, &b| a.saturating_add(b));
    if total > MAX_NODES {
        let shown = if total == u64::MAX {
            "more than 2^64".to_string()
        } else {
            total.to_string()
        };
        return Err(invalid(
            F,
            "size",
            shown,
            format!("more than {MAX_NODES} nodes"),
        ));
    }
    // Ports are numbered with u16 and every link is stored: bound both so
    // that a typo (p = 100000) is an error, not a wrap-around or an OOM.
    for (l, &size) in level_sizes.iter().enumerate() {
        let down = params.m[l] as u64 * params.p[l] as u64;
        let up = params
            .w
            .get(l + 1)
            .map_or(0, |&w| w as u64 * params.p[l + 1] as u64);
        if down + up > MAX_RADIX {
            return Err(invalid(
                F,
                format!("m[{l}]·p[{l}] + w[{}]·p[{}]", l + 1, l + 1),
                down + up,
                format!("switch radix above {MAX_RADIX}"),
            ));
        }
        if size.saturating_mul(down) > MAX_LINKS {
            return Err(invalid(
                F,
                format!("p[{l}]"),
                params.p[l],
                format!("more than {MAX_LINKS} links"),
            ));
        }
    }
    if params.w[0] as u64 * params.p[0] as u64 > MAX_RADIX {
        return Err(invalid(
            F,
            "w[0]·p[0]",
            params.w[0] as u64 * params.p[0] as u64,
            format!("host radix above {MAX_RADIX}"),
        ));
    }
    let down_ports = |l: usize| (params.m[l] * params.p[l]) as usize;
    let up_ports = |l: usize| {
        if l + 1 < h {
            (params.w[l + 1] * params.p[l + 1]) as usize
        } else {
            0
        }
    };
    let host_ports = (params.w[0] * params.p[0]) as usize;

    let mut topo = Topology::new(
        format!(
            "PGFT({h};{};{};{})",
            join(&params.m),
            join(&params.w),
            join(&params.p)
        ),
        Family::Pgft(params.clone()),
    );
    let host_radices = params.m.clone();
    let nid_width = width(hosts);
    for nid in 0..hosts {
        let id = topo.add_host(format!("h{nid:0nid_width$}"), host_ports);
        topo.hosts[id as usize].label = digits(nid, &host_radices);
    }
    let mut level_offset = Vec::with_capacity(h);
    for (l, &size) in level_sizes.iter().enumerate() {
        level_offset.push(topo.switches.len() as u64);
        let radices = level_radices(l);
        let w = width(size);
        for idx in 0..size {
            let id = topo.add_switch(format!("s{l}-{idx:0w$}"), down_ports(l) + up_ports(l));
            let sw = &mut topo.switches[id as usize];
            sw.level = Some(l as u32);
            sw.label = digits(idx, &radices);
        }
    }
    // Cable every level ℓ switch Y to its children X at level ℓ−1.
    for l in 0..h {
        let radices = level_radices(l);
        let child_radices = if l == 0 {
            host_radices.clone()
        } else {
            level_radices(l - 1)
        };
        let child_down = if l == 0 { 0 } else { down_ports(l - 1) };
        for idx in 0..level_sizes[l] {
            let y = (level_offset[l] + idx) as u32;
            let ylabel = digits(idx, &radices);
            let a = ylabel[l];
            for c in 0..params.m[l] {
                let mut xlabel = ylabel.clone();
                xlabel[l] = c;
                let xidx = compose(&xlabel, &child_radices);
                let x = if l == 0 {
                    NodeRef::Host(xidx as u32)
                } else {
                    NodeRef::Switch((level_offset[l - 1] + xidx) as u32)
                };
                for j in 0..params.p[l] {
                    let ydown = (c + j * params.m[l]) as PortNo;
                    let xup = (child_down as u32 + a + j * params.w[l]) as PortNo;
                    topo.connect(
                        PortRef { node: x, port: xup },
                        PortRef::switch(y, ydown),
                        true,
                    )?;
                }
            }
        }
    }
    Ok(topo)
}

/// k-ary n-tree (seed 000 §2.1), built as XGFT(n; k..k; 1, k..k). Switch
/// `⟨s, o⟩` has id `s·k^(n-1) + Σ o_i k^i`, down ports 0..k−1 and up ports
/// k..2k−1 (up port k+j leads to the parent whose digit o_s is j).
pub fn kary_ntree(k: u32, n: u32) -> Result<Topology, TopologyError> {
    const F: &str = "kary-ntree";
    if k < 2 {
        return Err(invalid(F, "k", k, "a k-ary n-tree needs k >= 2"));
    }
    if n < 1 {
        return Err(invalid(F, "n", n, "a k-ary n-tree needs n >= 1"));
    }
    if (k as f64).powi(n as i32) * (n as f64 + 1.0) > MAX_NODES as f64 {
        return Err(invalid(
            F,
            "k^n",
            format!("{k}^{n}"),
            format!("more than {MAX_NODES} nodes"),
        ));
    }
    let n_us = n as usize;
    let mut w = vec![k; n_us];
    w[0] = 1;
    let params = PgftParams {
        m: vec![k; n_us],
        w,
        p: vec![1; n_us],
    };
    let mut topo = pgft(&params)?;
    topo.name = format!("{k}-ary {n}-tree");
    topo.family = Family::KaryNTree { k, n };
    // Seed 000 labels switches with the n−1 digits o_0..o_{n−2} = a_1..a_{n−1}.
    // Every switch has radix 2k; the top stage leaves its up ports unused.
    for sw in &mut topo.switches {
        sw.label.remove(0);
        sw.ports.resize(2 * k as usize, None);
    }
    Ok(topo)
}

/// Port of a RUFT host that sends (the injection link starts here).
pub const RUFT_HOST_SEND_PORT: PortNo = 0;
/// Port of a RUFT host that receives (the top stage's long link ends here).
pub const RUFT_HOST_RECV_PORT: PortNo = 1;

/// RUFT switch port of output `j` (0 ≤ j < k). Inputs are ports `0..k`,
/// outputs ports `k..2k`, mirroring a k-ary n-tree switch's down/up ports.
pub fn ruft_output_port(k: u32, j: u32) -> PortNo {
    (k + j) as PortNo
}

/// RUFT, the Reduced Unidirectional Fat-Tree (seed 000 §2.2, thesis §5.2):
/// N = kⁿ hosts, n·kⁿ⁻¹ switches with k inputs and k outputs, and (n+1)·kⁿ
/// one-way links (`duplex: false`, flits go from `a` to `b`). Switch ids and
/// labels are those of the k-ary n-tree (`id = s·kⁿ⁻¹ + Σ o_i kⁱ`, label
/// `o_0..o_{n−2}`). Wiring (digest §2.2):
/// - injection: host q's send port 0 → input `q_0` of `⟨0, q_{n−1}…q_1⟩`;
/// - inter-stage: output j of `⟨s,o⟩`, s < n−1 → `⟨s+1, o with o_s := j⟩`,
///   arriving on its input `o_s`;
/// - long link: output j of `⟨n−1,o⟩` → host `j·kⁿ⁻¹ + Σ o_i kⁱ`, on its
///   receive port 1.
///
/// Output j is port `k + j` ([`ruft_output_port`]); routing is "at stage s
/// leave through output `d_s`", and every pair has exactly one path.
pub fn ruft(k: u32, n: u32) -> Result<Topology, TopologyError> {
    const F: &str = "ruft";
    if k < 2 {
        return Err(invalid(F, "k", k, "a RUFT needs k >= 2"));
    }
    if n < 1 {
        return Err(invalid(F, "n", n, "a RUFT needs n >= 1"));
    }
    if (k as f64).powi(n as i32) * (n as f64 + 1.0) > MAX_NODES as f64 {
        return Err(invalid(
            F,
            "k^n",
            format!("{k}^{n}"),
            format!("more than {MAX_NODES} nodes"),
        ));
    }
    let hosts = (k as u64).pow(n);
    let per_stage = (k as u64).pow(n - 1);
    let switch_radices = vec![k; n as usize - 1];
    let host_radices = vec![k; n as usize];
    let mut topo = Topology::new(format!("{k}-ary {n}-RUFT"), Family::Ruft { k, n });
    let nid_width = width(hosts);
    for nid in 0..hosts {
        let id = topo.add_host(format!("h{nid:0nid_width$}"), 2);
        topo.hosts[id as usize].label = digits(nid, &host_radices);
    }
    let w = width(per_stage);
    for s in 0..n {
        for idx in 0..per_stage {
            let id = topo.add_switch(format!("s{s}-{idx:0w$}"), 2 * k as usize);
            let sw = &mut topo.switches[id as usize];
            sw.level = Some(s);
            sw.label = digits(idx, &switch_radices);
        }
    }
    let switch_id = |s: u32, o: &[u32]| (s as u64 * per_stage + compose(o, &switch_radices)) as u32;
    // Injection: host q → ⟨0, q_{n−1}…q_1⟩ (o_i = q_{i+1}), input q_0.
    for q in 0..hosts {
        let qd = digits(q, &host_radices);
        let leaf = switch_id(0, &qd[1..]);
        topo.connect(
            PortRef::host(q as u32, RUFT_HOST_SEND_PORT),
            PortRef::switch(leaf, qd[0] as PortNo),
            false,
        )?;
    }
    // Inter-stage: output j of ⟨s,o⟩ → ⟨s+1, o with o_s := j⟩, input o_s.
    for s in 0..n.saturating_sub(1) {
        for idx in 0..per_stage {
            let o = digits(idx, &switch_radices);
            for j in 0..k {
                let mut next = o.clone();
                next[s as usize] = j;
                topo.connect(
                    PortRef::switch(switch_id(s, &o), ruft_output_port(k, j)),
                    PortRef::switch(switch_id(s + 1, &next), o[s as usize] as PortNo),
                    false,
                )?;
            }
        }
    }
    // Long links: output j of ⟨n−1,o⟩ → host j·kⁿ⁻¹ + Σ o_i kⁱ.
    for idx in 0..per_stage {
        let o = digits(idx, &switch_radices);
        for j in 0..k {
            let dest = j as u64 * per_stage + idx;
            topo.connect(
                PortRef::switch(switch_id(n - 1, &o), ruft_output_port(k, j)),
                PortRef::host(dest as u32, RUFT_HOST_RECV_PORT),
                false,
            )?;
        }
    }
    Ok(topo)
}

/// Builds the topology a [`Family`] describes (the `generator:` of a
/// topology file, `flitctl topo gen`).
pub fn generate(family: &Family) -> Result<Topology, TopologyError> {
    match family {
        Family::KaryNTree { k, n } => kary_ntree(*k, *n),
        Family::Ruft { k, n } => ruft(*k, *n),
        Family::Pgft(p) => pgft(p),
        Family::Mesh { dims } => mesh_or_torus(dims, false),
        Family::Torus { dims } => mesh_or_torus(dims, true),
        Family::Hypercube { d } => hypercube(*d),
        Family::Custom => Err(TopologyError::InvalidParameter {
            family: "custom",
            param: "generator".into(),
            value: "custom".into(),
            reason: "a custom topology has no generator; list its switches, hosts and links".into(),
        }),
    }
}

fn join(v: &[u32]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn width(count: u64) -> usize {
    count.saturating_sub(1).max(1).to_string().len()
}

/// Port of the local host on a direct-network router.
pub const DIRECT_HOST_PORT: PortNo = 0;

/// Router port for travelling along dimension `d`, `positive` or negative:
/// `1 + 2d` for +d, `2 + 2d` for −d.
pub fn direct_port(d: usize, positive: bool) -> PortNo {
    (1 + 2 * d + usize::from(!positive)) as PortNo
}

/// n-dimensional mesh (`wrap = false`) or torus (`wrap = true`), any radix per
/// dimension, one host per router. Router i has coordinates
/// `c_d = (i / Π_{e<d} k_e) mod k_d` (dimension 0 fastest), host i is on its
/// port 0, and +d / −d links use ports `1+2d` / `2+2d` (see [`direct_port`]).
pub fn mesh_or_torus(dims: &[u32], wrap: bool) -> Result<Topology, TopologyError> {
    let family: &'static str = if wrap { "torus" } else { "mesh" };
    if dims.is_empty() {
        return Err(invalid(
            family,
            "dims",
            "[]",
            "needs at least one dimension",
        ));
    }
    if let Some(i) = dims.iter().position(|&k| k < 2) {
        return Err(invalid(
            family,
            format!("dims[{i}]"),
            dims[i],
            "every dimension needs radix >= 2",
        ));
    }
    let total: u64 = saturating_product(dims);
    if total.saturating_mul(2) > MAX_NODES {
        return Err(invalid(
            family,
            "dims",
            join(dims),
            format!("more than {MAX_NODES} nodes"),
        ));
    }
    let name = dims
        .iter()
        .map(|k| k.to_string())
        .collect::<Vec<_>>()
        .join("x");
    let fam = if wrap {
        Family::Torus {
            dims: dims.to_vec(),
        }
    } else {
        Family::Mesh {
            dims: dims.to_vec(),
        }
    };
    let mut topo = Topology::new(format!("{name} {family}"), fam);
    let radix = 1 + 2 * dims.len();
    let w = width(total);
    for i in 0..total {
        let coords = digits(i, dims);
        let s = topo.add_switch(format!("r{i:0w$}"), radix);
        topo.switches[s as usize].coords = Some(coords.clone());
        topo.switches[s as usize].label = coords.clone();
        let h = topo.add_host(format!("h{i:0w$}"), 1);
        topo.hosts[h as usize].coords = Some(coords.clone());
        topo.hosts[h as usize].label = coords;
        topo.connect(
            PortRef::host(h, 0),
            PortRef::switch(s, DIRECT_HOST_PORT),
            true,
        )?;
    }
    for i in 0..total {
        let coords = digits(i, dims);
        for (d, &k) in dims.iter().enumerate() {
            if !wrap && coords[d] + 1 == k {
                continue;
            }
            let mut next = coords.clone();
            next[d] = (coords[d] + 1) % k;
            let j = compose(&next, dims) as u32;
            topo.connect(
                PortRef::switch(i as u32, direct_port(d, true)),
                PortRef::switch(j, direct_port(d, false)),
                true,
            )?;
        }
    }
    Ok(topo)
}

/// Hypercube of dimension d (seed 003), one host per router: router i links
/// to `i XOR 2^b` through port `1 + b`; the host is on port 0.
pub fn hypercube(d: u32) -> Result<Topology, TopologyError> {
    const F: &str = "hypercube";
    if !(1..=20).contains(&d) {
        return Err(invalid(F, "d", d, "dimension must be 1..=20"));
    }
    let total = 1u32 << d;
    let mut topo = Topology::new(format!("{d}-cube"), Family::Hypercube { d });
    let w = width(total as u64);
    for i in 0..total {
        let bits: Vec<u32> = (0..d).map(|b| (i >> b) & 1).collect();
        let s = topo.add_switch(format!("r{i:0w$}"), 1 + d as usize);
        topo.switches[s as usize].coords = Some(bits.clone());
        topo.switches[s as usize].label = bits.clone();
        let h = topo.add_host(format!("h{i:0w$}"), 1);
        topo.hosts[h as usize].coords = Some(bits.clone());
        topo.hosts[h as usize].label = bits;
        topo.connect(
            PortRef::host(h, 0),
            PortRef::switch(s, DIRECT_HOST_PORT),
            true,
        )?;
    }
    for i in 0..total {
        for b in 0..d {
            let j = i ^ (1 << b);
            if i < j {
                let port = (1 + b) as PortNo;
                topo.connect(PortRef::switch(i, port), PortRef::switch(j, port), true)?;
            }
        }
    }
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::FaultSet;

    #[test]
    fn kary_ntree_counts_match_closed_forms() {
        for (k, n) in [(2u32, 3u32), (2, 4), (4, 2), (4, 3), (8, 3), (2, 7)] {
            let t = kary_ntree(k, n).unwrap();
            let kn = k.pow(n) as usize;
            assert_eq!(t.num_hosts(), kn);
            assert_eq!(t.num_switches(), n as usize * kn / k as usize);
            assert_eq!(t.links.len(), n as usize * kn, "links incl. node links");
            assert_eq!(t.num_switch_links(), (n as usize - 1) * kn);
            assert!(t.switches.iter().all(|s| s.ports.len() == 2 * k as usize));
            t.validate().unwrap();
        }
    }

    #[test]
    fn kary_ntree_wiring_matches_seed_000_figures() {
        // Fig 3.2 (2-ary 3-tree): switch 0's links 2 and 3 reach switches 4 and 5;
        // from 4 or 5, link 1 reaches switch 1; switch 1's link 0 reaches node 2.
        let t = kary_ntree(2, 3).unwrap();
        assert_eq!(
            t.peer(PortRef::switch(0, 2)).unwrap().node,
            NodeRef::Switch(4)
        );
        assert_eq!(
            t.peer(PortRef::switch(0, 3)).unwrap().node,
            NodeRef::Switch(5)
        );
        assert_eq!(
            t.peer(PortRef::switch(4, 1)).unwrap().node,
            NodeRef::Switch(1)
        );
        assert_eq!(
            t.peer(PortRef::switch(5, 1)).unwrap().node,
            NodeRef::Switch(1)
        );
        assert_eq!(t.peer(PortRef::switch(1, 0)), Some(PortRef::host(2, 0)));
        // Figs 3.8/3.9: switch 6 link 1 → nodes 6,7 (leaf 3); link 3 → switch 10;
        // switch 8 link 0 → switch 4, link 1 → switch 6.
        assert_eq!(
            t.peer(PortRef::switch(6, 1)).unwrap().node,
            NodeRef::Switch(3)
        );
        assert_eq!(t.peer(PortRef::switch(3, 0)), Some(PortRef::host(6, 0)));
        assert_eq!(t.peer(PortRef::switch(3, 1)), Some(PortRef::host(7, 0)));
        assert_eq!(
            t.peer(PortRef::switch(6, 3)).unwrap().node,
            NodeRef::Switch(10)
        );
        assert_eq!(
            t.peer(PortRef::switch(8, 0)).unwrap().node,
            NodeRef::Switch(4)
        );
        assert_eq!(
            t.peer(PortRef::switch(8, 1)).unwrap().node,
            NodeRef::Switch(6)
        );
        // Fig 3.7 (2-ary 4-tree): switch 8's port 3 → 18 and port 2 → 16;
        // switch 9 → 17, 19; switch 18's parents are 26 and 30.
        let t = kary_ntree(2, 4).unwrap();
        assert_eq!(
            t.peer(PortRef::switch(8, 3)).unwrap().node,
            NodeRef::Switch(18)
        );
        assert_eq!(
            t.peer(PortRef::switch(8, 2)).unwrap().node,
            NodeRef::Switch(16)
        );
        assert_eq!(
            t.peer(PortRef::switch(9, 2)).unwrap().node,
            NodeRef::Switch(17)
        );
        assert_eq!(
            t.peer(PortRef::switch(9, 3)).unwrap().node,
            NodeRef::Switch(19)
        );
        let parents: Vec<_> = [2, 3]
            .iter()
            .map(|&p| t.peer(PortRef::switch(18, p)).unwrap().node)
            .collect();
        assert_eq!(parents, vec![NodeRef::Switch(26), NodeRef::Switch(30)]);
        // Up port k+j arrives on the parent's down port o_s.
        let up = t.peer(PortRef::switch(18, 2)).unwrap();
        assert!(up.port < 2);
    }

    #[test]
    fn kary_ntree_rejects_bad_parameters() {
        assert!(matches!(
            kary_ntree(1, 3),
            Err(TopologyError::InvalidParameter { .. })
        ));
        assert!(matches!(
            kary_ntree(4, 0),
            Err(TopologyError::InvalidParameter { .. })
        ));
        assert!(matches!(
            kary_ntree(400, 9),
            Err(TopologyError::InvalidParameter { .. })
        ));
    }

    #[test]
    fn pgft_counts_match_xgft_algebra() {
        // (m, w, p, hosts, switches per level)
        type Case = (Vec<u32>, Vec<u32>, Vec<u32>, usize, Vec<usize>);
        let cases: Vec<Case> = vec![
            (vec![4, 4], vec![1, 2], vec![1, 2], 16, vec![4, 2]), // Fig 1.6b RLFT
            (
                vec![4, 2, 4],
                vec![1, 2, 2],
                vec![1, 2, 1],
                32,
                vec![8, 8, 4],
            ), // G_P
            (
                vec![4, 4, 6],
                vec![1, 2, 2],
                vec![1, 1, 1],
                96,
                vec![24, 12, 4],
            ), // G_3
            (
                vec![2, 2, 3],
                vec![1, 2, 2],
                vec![1, 2, 1],
                12,
                vec![6, 6, 4],
            ), // Fig 4.1
            (
                vec![2, 2, 2],
                vec![1, 2, 1],
                vec![1, 1, 2],
                8,
                vec![4, 4, 2],
            ), // Fig 12
        ];
        for (m, w, p, hosts, per_level) in cases {
            let params = PgftParams { m: m.clone(), w, p };
            let t = pgft(&params).unwrap();
            assert_eq!(t.num_hosts(), hosts, "{}", t.name);
            for (l, &count) in per_level.iter().enumerate() {
                assert_eq!(
                    t.switches
                        .iter()
                        .filter(|s| s.level == Some(l as u32))
                        .count(),
                    count,
                    "{} level {l}",
                    t.name
                );
            }
            // Links between ℓ−1 and ℓ = #switches(ℓ)·m_ℓ·p_ℓ.
            let expected: usize = (0..m.len())
                .map(|l| per_level[l] * (params.m[l] * params.p[l]) as usize)
                .sum();
            assert_eq!(t.links.len(), expected, "{}", t.name);
            // Every port is cabled except the top switches' (which have none up).
            for s in &t.switches {
                assert!(s.ports.iter().all(|p| p.is_some()), "{} {}", t.name, s.name);
            }
            t.validate().unwrap();
        }
    }

    #[test]
    fn pgft_up_port_decodes_as_parent_and_parallel_link() {
        // Fig 1.6b: PGFT(2;4,4;1,2;1,2): a leaf has 4 down ports and 2·2 up ports;
        // up port q = 4 + a + j·2 leads to parent a (q mod w) via parallel link j.
        let t = pgft(&PgftParams {
            m: vec![4, 4],
            w: vec![1, 2],
            p: vec![1, 2],
        })
        .unwrap();
        for q in 0..4u16 {
            let peer = t.peer(PortRef::switch(0, 4 + q)).unwrap();
            let parent = peer.node;
            let a = (q % 2) as u32;
            let j = (q / 2) as u32;
            assert_eq!(parent, NodeRef::Switch(4 + a), "up port {q}");
            // Leaf 0 is child c=0 of the top: down port c + j·m.
            assert_eq!(peer.port as u32, j * 4);
        }
    }

    #[test]
    fn mesh_and_torus_counts_and_neighbours() {
        let t = mesh_or_torus(&[3, 3, 3], true).unwrap();
        assert_eq!(t.num_switches(), 27);
        assert_eq!(t.num_switch_links(), 81);
        let m = mesh_or_torus(&[8, 8], false).unwrap();
        assert_eq!(m.num_switches(), 64);
        assert_eq!(m.num_switch_links(), 2 * 8 * 7);
        // Router (1,0) = id 1: +x → (2,0) = 2 arriving on its −x port; −x → 0.
        assert_eq!(
            m.peer(PortRef::switch(1, direct_port(0, true))),
            Some(PortRef::switch(2, direct_port(0, false)))
        );
        assert_eq!(
            m.peer(PortRef::switch(1, direct_port(0, false))),
            Some(PortRef::switch(0, direct_port(0, true)))
        );
        // Mesh edge: (7,0) has no +x link; the torus wraps.
        assert_eq!(m.peer(PortRef::switch(7, direct_port(0, true))), None);
        let t2 = mesh_or_torus(&[8, 8], true).unwrap();
        assert_eq!(
            t2.peer(PortRef::switch(7, direct_port(0, true))),
            Some(PortRef::switch(0, direct_port(0, false)))
        );
        // +y from (0,7) wraps to (0,0).
        assert_eq!(
            t2.peer(PortRef::switch(56, direct_port(1, true))),
            Some(PortRef::switch(0, direct_port(1, false)))
        );
        assert_eq!(t.switches[13].coords, Some(vec![1, 1, 1]));
        // Diameter of a 3x3x3 torus is 3 switch hops.
        let d = t.distances_from(NodeRef::Switch(0), &FaultSet::none());
        let max_sw = d[27..].iter().map(|x| x.unwrap()).max().unwrap();
        assert_eq!(max_sw, 3);
        assert!(mesh_or_torus(&[3, 1], false).is_err());
        assert!(mesh_or_torus(&[], true).is_err());
    }

    #[test]
    fn hypercube_counts_and_neighbours() {
        for d in [4u32, 6] {
            let t = hypercube(d).unwrap();
            let n = 1usize << d;
            assert_eq!(t.num_switches(), n);
            assert_eq!(t.num_switch_links(), n * d as usize / 2);
        }
        let t = hypercube(4).unwrap();
        assert_eq!(
            t.peer(PortRef::switch(5, 1 + 1)),
            Some(PortRef::switch(7, 2))
        );
        assert_eq!(
            t.peer(PortRef::switch(5, 1 + 3)),
            Some(PortRef::switch(13, 4))
        );
        assert!(hypercube(0).is_err());
    }

    /// Every (source, destination) pair's number of directed host-to-host
    /// paths, counted over the one-way links (the RUFT is acyclic).
    fn ruft_path_counts(t: &Topology, src: u32) -> Vec<u64> {
        // Paths to each switch, stage by stage (switch ids run stage by stage).
        let mut to_switch = vec![0u64; t.num_switches()];
        let mut to_host = vec![0u64; t.num_hosts()];
        for (_, peer) in t.out_neighbours(NodeRef::Host(src), &FaultSet::none()) {
            match peer.node {
                NodeRef::Switch(s) => to_switch[s as usize] += 1,
                NodeRef::Host(h) => to_host[h as usize] += 1,
            }
        }
        for s in 0..t.num_switches() as u32 {
            let here = to_switch[s as usize];
            for (_, peer) in t.out_neighbours(NodeRef::Switch(s), &FaultSet::none()) {
                match peer.node {
                    NodeRef::Switch(next) => {
                        assert!(next > s, "RUFT links must go to a later stage");
                        to_switch[next as usize] += here;
                    }
                    NodeRef::Host(h) => to_host[h as usize] += here,
                }
            }
        }
        to_host
    }

    #[test]
    fn ruft_counts_match_seed_000() {
        for (k, n) in [(2u32, 1u32), (2, 3), (4, 2), (4, 4), (8, 3), (2, 7)] {
            let t = ruft(k, n).unwrap();
            let kn = k.pow(n) as usize;
            assert_eq!(t.num_hosts(), kn);
            assert_eq!(t.num_switches(), n as usize * kn / k as usize);
            assert_eq!(t.links.len(), (n as usize + 1) * kn);
            assert!(t.links.iter().all(|l| !l.duplex));
            // Every switch: inputs 0..k receive, outputs k..2k send, all cabled.
            for s in &t.switches {
                assert_eq!(s.ports.len(), 2 * k as usize);
                for p in 0..2 * k as u16 {
                    let here = PortRef::switch(s.id, p);
                    assert!(t.link_at(here).is_some(), "{} port {p}", s.name);
                    assert_eq!(t.can_send(here), p >= k as u16, "{} port {p}", s.name);
                }
            }
            for h in &t.hosts {
                assert!(t.can_send(PortRef::host(h.id, RUFT_HOST_SEND_PORT)));
                assert!(!t.can_send(PortRef::host(h.id, RUFT_HOST_RECV_PORT)));
            }
            t.validate().unwrap();
        }
    }

    #[test]
    fn ruft_has_exactly_one_path_per_pair_following_destination_digits() {
        for (k, n) in [(2u32, 3u32), (4, 2), (3, 3), (2, 1)] {
            let t = ruft(k, n).unwrap();
            let hosts = t.num_hosts() as u32;
            for src in 0..hosts {
                let counts = ruft_path_counts(&t, src);
                assert!(
                    counts.iter().all(|&c| c == 1),
                    "k={k} n={n} src={src}: {counts:?}"
                );
                // n switches and n+1 links on the unique path.
                let d = t.distances_from(NodeRef::Host(src), &FaultSet::none());
                for dst in 0..hosts {
                    if dst != src {
                        assert_eq!(d[dst as usize], Some(n + 1));
                    }
                }
                // Digest §2.2: at stage s, leave through output d_s.
                for dst in 0..hosts {
                    let mut at = t.peer(PortRef::host(src, RUFT_HOST_SEND_PORT)).unwrap();
                    for s in 0..n {
                        let NodeRef::Switch(sw) = at.node else {
                            panic!("left the switches early")
                        };
                        assert_eq!(t.switches[sw as usize].level, Some(s));
                        let digit = (dst / k.pow(s)) % k;
                        at = t
                            .peer(PortRef::switch(sw, ruft_output_port(k, digit)))
                            .unwrap();
                    }
                    assert_eq!(at, PortRef::host(dst, RUFT_HOST_RECV_PORT));
                }
            }
        }
    }

    #[test]
    fn ruft_top_switch_depends_only_on_low_destination_digits() {
        // Digest §2.2: the top switch reached depends only on d's low n−1
        // digits, so the long link of each top output is private to one host.
        let t = ruft(4, 3).unwrap();
        let top = 2 * 16;
        for o in 0..16u32 {
            for j in 0..4u32 {
                let peer = t
                    .peer(PortRef::switch(top + o, ruft_output_port(4, j)))
                    .unwrap();
                assert_eq!(peer, PortRef::host(j * 16 + o, RUFT_HOST_RECV_PORT));
            }
        }
        assert!(matches!(
            ruft(1, 3),
            Err(TopologyError::InvalidParameter { .. })
        ));
        assert!(matches!(
            ruft(4, 0),
            Err(TopologyError::InvalidParameter { .. })
        ));
    }

    #[test]
    fn connect_refuses_bad_ports_without_changing_state() {
        let mut t = Topology::new("x", Family::Custom);
        let a = t.add_switch("a", 2);
        let b = t.add_switch("b", 2);
        t.connect(PortRef::switch(a, 0), PortRef::switch(b, 0), true)
            .unwrap();
        let before = t.clone();
        assert!(matches!(
            t.connect(PortRef::switch(a, 0), PortRef::switch(b, 1), true),
            Err(TopologyError::PortInUse { .. })
        ));
        assert!(matches!(
            t.connect(PortRef::switch(a, 1), PortRef::switch(b, 5), true),
            Err(TopologyError::PortOutOfRange {
                port: 5,
                radix: 2,
                ..
            })
        ));
        assert!(matches!(
            t.connect(PortRef::switch(a, 1), PortRef::switch(9, 0), true),
            Err(TopologyError::UnknownNode(_))
        ));
        assert_eq!(t, before);
    }
}
