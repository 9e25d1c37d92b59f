//! DESTRO: deterministic destination- and stage-based routing on k-ary
//! n-trees (seed 000 §3.4). At stage s a packet for d goes down on port `d_s`
//! if d is below the switch, else up on port `k + d_s` (d_s = digit s of d,
//! base k). Every link is statically balanced and each down link carries a
//! single destination.
//!
//! The engine installs the route as interval tables (the DESTRO LFT
//! compressed into per-port intervals, [`super::interval::compress_lft`]);
//! [`FirSwitch`] is the thesis's hardware form (FIR: IR plus a mask register
//! and a routing-restriction register per port, §3.4 / Fig 4.11), kept to
//! check that the register configuration routes exactly like the LFT.

use super::interval::{compress_lft, interval_bits, interval_table, CyclicInterval, KaryTree};
use super::tables::{Lft, RoutingTables, SwitchTable};
use super::{RoutingEngine, RoutingError};
use crate::topology::{FaultSet, HostId, PortNo, SwitchId, Topology};

const NAME: &str = "destro";

/// The DESTRO port at switch `sw` for destination `d` (§3.4).
pub fn destro_port(tree: &KaryTree, sw: SwitchId, d: HostId) -> PortNo {
    let digit = tree.digit(d, tree.stage(sw));
    if tree.is_below(sw, d) {
        digit as PortNo
    } else {
        (tree.k + digit) as PortNo
    }
}

/// The DESTRO LFT of one switch.
pub fn destro_lft(tree: &KaryTree, sw: SwitchId) -> Lft {
    Lft {
        ports: (0..tree.hosts())
            .map(|d| Some(destro_port(tree, sw, d)))
            .collect(),
    }
}

/// DESTRO as a routing engine. It is fault-free only: DESTRO has a single
/// path per pair, so a failed link disconnects the pairs routed over it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Destro;

impl RoutingEngine for Destro {
    fn name(&self) -> &'static str {
        NAME
    }
    fn claims_deadlock_free(&self) -> bool {
        // Up*/down*: every up hop precedes every down hop (§3.8).
        true
    }
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        let tree = KaryTree::of(topo, NAME)?;
        if !faults.is_empty() {
            return Err(RoutingError::NotApplicable {
                engine: NAME,
                reason: format!(
                    "DESTRO has one path per pair and no fault tolerance; {} link(s) and {} \
                     switch(es) are failed (use ft2ei)",
                    faults.links.len(),
                    faults.switches.len()
                ),
            });
        }
        let switches = (0..tree.switches())
            .map(|sw| {
                let compressed = compress_lft(&destro_lft(&tree, sw));
                SwitchTable::Intervals(interval_table(&compressed, tree.hosts()))
            })
            .collect();
        Ok(RoutingTables {
            engine: NAME.to_string(),
            switches,
            vcs: 1,
            vc_policy: Vec::new(),
        })
    }
}

/// Memory of one DESTRO switch in bits, per representation (§3.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestroMemory {
    /// Plain (cyclic) intervals needed without masks.
    pub intervals: usize,
    /// Those intervals as `[LIB..UIB]` registers.
    pub interval_bits: u64,
    /// FIR registers: `2k·(3·log N + 2k)`.
    pub fir_bits: u64,
    /// LFT indexed by destination: `N·⌈log₂ 2k⌉`.
    pub lft_bits: u64,
}

/// Memory of switch `sw` under DESTRO.
pub fn destro_memory(tree: &KaryTree, sw: SwitchId) -> DestroMemory {
    let compressed = compress_lft(&destro_lft(tree, sw));
    let intervals = compressed.iter().map(|(_, ivs)| ivs.len()).sum();
    let model = super::interval::MemoryModel {
        k: tree.k as u64,
        n_hosts: tree.hosts() as u64,
    };
    DestroMemory {
        intervals,
        interval_bits: interval_bits(intervals, tree.hosts() as u64),
        fir_bits: model.fir(),
        lft_bits: model.lft(),
    }
}

/// One FIR output port (§3.4, Fig 4.11): the destination AND-ed with `mask`
/// must fall in `[lib..uib]`, and no port whose bit is set in `rrr` may
/// also match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirPort {
    pub port: PortNo,
    pub interval: CyclicInterval,
    pub mask: u32,
    /// Bit j set: port j has priority over this port.
    pub rrr: u64,
}

/// The FIR registers of one switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirSwitch {
    pub ports: Vec<FirPort>,
}

impl FirSwitch {
    /// DESTRO's FIR configuration for `sw` (Fig 4.11). Needs k = 2^r so that
    /// a digit is a bit field.
    pub fn destro(tree: &KaryTree, sw: SwitchId) -> Result<Self, RoutingError> {
        if !tree.k.is_power_of_two() {
            return Err(RoutingError::NotApplicable {
                engine: NAME,
                reason: format!("FIR masks need k a power of two, k = {}", tree.k),
            });
        }
        let r = tree.k.trailing_zeros();
        let s = tree.stage(sw);
        let all_bits = tree.hosts() - 1;
        let mut ports: Vec<FirPort> = (0..tree.k)
            .map(|j| FirPort {
                port: j as PortNo,
                interval: tree.down_interval(sw, j),
                mask: all_bits,
                rrr: 0,
            })
            .collect();
        if !tree.is_top(sw) {
            let down_first = (1u64 << tree.k) - 1;
            for j in 0..tree.k {
                let field = j << (s * r);
                ports.push(FirPort {
                    port: (tree.k + j) as PortNo,
                    interval: CyclicInterval::new(field, field),
                    mask: ((1 << r) - 1) << (s * r),
                    rrr: down_first,
                });
            }
        }
        Ok(FirSwitch { ports })
    }

    /// Ports the FIR logic allows for d.
    pub fn allowed(&self, d: HostId) -> Vec<PortNo> {
        let matches: Vec<bool> = self
            .ports
            .iter()
            .map(|p| p.interval.contains(d & p.mask))
            .collect();
        self.ports
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                matches[*i]
                    && !self
                        .ports
                        .iter()
                        .enumerate()
                        .any(|(j, q)| p.rrr >> q.port & 1 == 1 && matches[j])
            })
            .map(|(_, p)| p.port)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckOptions};
    use crate::routing::dmodk::dmodk;
    use crate::topology::generators::{kary_ntree, mesh_or_torus};
    use crate::topology::{NodeRef, PortRef};

    /// Follows the tables from host `src` to `dst`; returns the directed
    /// switch-to-switch links used, as (switch, out port).
    fn trace(topo: &Topology, rt: &RoutingTables, src: HostId, dst: HostId) -> Vec<(u32, u16)> {
        let mut at = topo.peer(PortRef::host(src, 0)).unwrap().node;
        let mut hops = Vec::new();
        loop {
            let NodeRef::Switch(sw) = at else {
                assert_eq!(at, NodeRef::Host(dst));
                return hops;
            };
            let port = rt.switches[sw as usize].lookup(dst).expect("route");
            hops.push((sw, port));
            assert!(hops.len() < 64, "loop from {src} to {dst}");
            at = topo.peer(PortRef::switch(sw, port)).unwrap().node;
        }
    }

    #[test]
    fn tables_equal_lft_and_fir_and_reach_every_destination() {
        for (k, n) in [(2, 3), (4, 2), (4, 3), (2, 4), (8, 2)] {
            let topo = kary_ntree(k, n).unwrap();
            let tree = KaryTree::of(&topo, "t").unwrap();
            let rt = Destro.route(&topo, &FaultSet::none()).unwrap();
            for sw in 0..tree.switches() {
                let fir = FirSwitch::destro(&tree, sw).unwrap();
                let lft = destro_lft(&tree, sw);
                for d in 0..tree.hosts() {
                    let want = lft.lookup(d).unwrap();
                    assert_eq!(rt.switches[sw as usize].lookup(d), Some(want));
                    assert_eq!(fir.allowed(d), vec![want], "{k}-ary {n}: sw {sw} d {d}");
                }
            }
            // Minimal: 2i+1 switches where i = highest differing digit.
            for s in 0..tree.hosts() {
                for d in 0..tree.hosts() {
                    let hops = trace(&topo, &rt, s, d);
                    let i = (0..n).rev().find(|&i| tree.digit(s, i) != tree.digit(d, i));
                    assert_eq!(hops.len() as u32, i.map_or(1, |i| 2 * i + 1));
                }
            }
        }
    }

    #[test]
    fn checker_passes_and_destro_equals_dmodk() {
        // Seed 000 §7.2: on k-ary n-trees DESTRO's up port ⌊d/kˢ⌋ mod k is Dmodk's.
        for (k, n) in [(2, 3), (4, 2), (4, 3)] {
            let topo = kary_ntree(k, n).unwrap();
            let faults = FaultSet::none();
            let rt = Destro.route(&topo, &faults).unwrap();
            let report = check(&topo, &faults, &rt, &CheckOptions::default());
            assert!(report.is_ok(), "{k}-ary {n}: {:?}", report.failures);
            assert!(report.cdg_checked && report.dependencies > 0);
            let reference = dmodk(&topo).unwrap();
            for (sw, table) in rt.switches.iter().enumerate() {
                for d in 0..topo.num_hosts() as HostId {
                    assert_eq!(
                        table.lookup(d),
                        reference.switches[sw].lookup(d),
                        "sw {sw} d {d}"
                    );
                }
            }
        }
    }

    #[test]
    fn fir_golden_registers_2ary_3tree() {
        // Fig 4.10.
        let tree = KaryTree { k: 2, n: 3 };
        let s0 = FirSwitch::destro(&tree, 0).unwrap();
        let regs: Vec<_> = s0
            .ports
            .iter()
            .map(|p| (p.interval.lo, p.interval.hi, p.mask, p.rrr))
            .collect();
        assert_eq!(
            regs,
            vec![
                (0, 0, 7, 0),
                (1, 1, 7, 0),
                (0, 0, 1, 0b0011),
                (1, 1, 1, 0b0011)
            ]
        );
        let s4 = FirSwitch::destro(&tree, 4).unwrap();
        let regs: Vec<_> = s4
            .ports
            .iter()
            .map(|p| (p.interval.lo, p.interval.hi, p.mask, p.rrr))
            .collect();
        assert_eq!(
            regs,
            vec![
                (0, 1, 7, 0),
                (2, 3, 7, 0),
                (0, 0, 2, 0b0011),
                (2, 2, 2, 0b0011)
            ]
        );
        assert!(FirSwitch::destro(&KaryTree { k: 3, n: 2 }, 0).is_err());
    }

    #[test]
    fn every_link_carries_n_minus_k_pow_s_plus_1_pairs() {
        // §3.4: under all-to-all, each up link leaving stage s and each down
        // link entering stage s carries N − k^(s+1) pairs; DESTRO down links
        // serve one destination each; all paths to node 7 of a 2-ary 3-tree
        // use 6 network links.
        for (k, n) in [(2, 3), (4, 3), (2, 4)] {
            let topo = kary_ntree(k, n).unwrap();
            let tree = KaryTree::of(&topo, "t").unwrap();
            let rt = Destro.route(&topo, &FaultSet::none()).unwrap();
            let mut load = std::collections::BTreeMap::<(u32, u16), u32>::new();
            let mut dests = std::collections::BTreeMap::<(u32, u16), Vec<u32>>::new();
            for s in 0..tree.hosts() {
                for d in 0..tree.hosts() {
                    if s == d {
                        continue;
                    }
                    for hop in trace(&topo, &rt, s, d) {
                        *load.entry(hop).or_default() += 1;
                        dests.entry(hop).or_default().push(d);
                    }
                }
            }
            for (&(sw, port), &pairs) in &load {
                let st = tree.stage(sw);
                if port as u32 >= k {
                    assert_eq!(pairs, tree.hosts() - tree.pow(st + 1), "up {sw}:{port}");
                } else if st > 0 {
                    // Entering stage st−1 from above.
                    assert_eq!(pairs, tree.hosts() - tree.pow(st), "down {sw}:{port}");
                    let mut ds = dests[&(sw, port)].clone();
                    ds.dedup();
                    assert_eq!(ds.len(), 1, "down link {sw}:{port} serves one destination");
                } else {
                    assert_eq!(pairs, tree.hosts() - 1, "ejection {sw}:{port}");
                }
            }
        }
        let topo = kary_ntree(2, 3).unwrap();
        let rt = Destro.route(&topo, &FaultSet::none()).unwrap();
        let mut links = std::collections::BTreeSet::new();
        for s in 0..7 {
            for (sw, port) in trace(&topo, &rt, s, 7) {
                let peer = topo.peer(PortRef::switch(sw, port)).unwrap();
                if matches!(peer.node, NodeRef::Switch(_)) {
                    links.insert((sw, port));
                }
            }
        }
        assert_eq!(links.len(), 6, "Fig 4.7");
    }

    #[test]
    fn memory_per_switch() {
        // 4-ary 3-tree (N = 64): FIR = 8·(18 + 8) = 208 bits vs LFT 64·3 = 192.
        let tree = KaryTree { k: 4, n: 3 };
        let leaf = destro_memory(&tree, 0);
        assert_eq!(leaf.fir_bits, 208);
        assert_eq!(leaf.lft_bits, 192);
        // Without masks a leaf's up port j needs one interval per value of
        // the digits above 0 except its own (k^(n−1) − 1 = 15), plus 4 down.
        assert_eq!(leaf.intervals, 4 + 4 * 15);
        assert_eq!(leaf.interval_bits, 64 * 12);
        let top = destro_memory(&tree, 2 * 16);
        assert_eq!(top.intervals, 4);
    }

    #[test]
    fn refuses_other_topologies_and_faults() {
        let mesh = mesh_or_torus(&[3, 3], false).unwrap();
        assert!(matches!(
            Destro.route(&mesh, &FaultSet::none()),
            Err(RoutingError::NotApplicable { .. })
        ));
        let topo = kary_ntree(2, 3).unwrap();
        assert!(Destro.route(&topo, &FaultSet::with_links([20])).is_err());
    }
}
