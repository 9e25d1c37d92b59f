//! Interval-routing helpers shared by DESTRO and FT²EI (seed 000 §3.2, §3.7):
//! cyclic intervals of destination NIDs, the k-ary n-tree label arithmetic
//! the thesis's interval bounds are written in, compression of an LFT into
//! per-port intervals, and the per-switch memory counts of §3.7.

use super::tables::{Interval, IntervalTable, Lft, PortIntervals};
use super::RoutingError;
use crate::topology::{Family, HostId, PortNo, SwitchId, Topology};

/// An interval `[lo..hi]` of NIDs modulo `N` (seed 000 §3.2): when
/// `lo > hi` it is cyclic, `[lo..N−1] ∪ [0..hi]`. `[0..N−1]` is the whole ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CyclicInterval {
    pub lo: HostId,
    pub hi: HostId,
}

impl CyclicInterval {
    pub fn new(lo: HostId, hi: HostId) -> Self {
        CyclicInterval { lo, hi }
    }

    /// The whole ring of `n` destinations.
    pub fn full(n: u32) -> Self {
        CyclicInterval { lo: 0, hi: n - 1 }
    }

    pub fn is_cyclic(&self) -> bool {
        self.lo > self.hi
    }

    /// The thesis's `in(d, [LIB..UIB])`.
    pub fn contains(&self, d: HostId) -> bool {
        if self.lo <= self.hi {
            self.lo <= d && d <= self.hi
        } else {
            d >= self.lo || d <= self.hi
        }
    }

    /// Number of destinations covered on a ring of `n`.
    pub fn len(&self, n: u32) -> u32 {
        if self.lo <= self.hi {
            self.hi - self.lo + 1
        } else {
            n - self.lo + self.hi + 1
        }
    }

    /// The same set as at most two plain intervals (what [`IntervalTable`]
    /// stores).
    pub fn to_linear(&self, n: u32) -> Vec<Interval> {
        if self.lo <= self.hi {
            vec![Interval {
                lo: self.lo,
                hi: self.hi,
            }]
        } else {
            vec![
                Interval { lo: 0, hi: self.hi },
                Interval {
                    lo: self.lo,
                    hi: n - 1,
                },
            ]
        }
    }

    /// True when the two arcs share a destination (touching is not enough).
    pub fn intersects(&self, other: &CyclicInterval, n: u32) -> bool {
        let (la, lb) = (self.len(n), other.len(n));
        let b_from_a = (other.lo + n - self.lo) % n;
        let a_from_b = (self.lo + n - other.lo) % n;
        b_from_a < la || a_from_b < lb
    }

    /// The union of two intersecting arcs (an arc, or the whole ring);
    /// `None` if they are disjoint.
    pub fn union(&self, other: &CyclicInterval, n: u32) -> Option<CyclicInterval> {
        let arc = |start: u32, len: u32| {
            if len >= n {
                CyclicInterval::full(n)
            } else {
                CyclicInterval::new(start, (start + len - 1) % n)
            }
        };
        let (la, lb) = (self.len(n), other.len(n));
        let b_from_a = (other.lo + n - self.lo) % n;
        if b_from_a < la {
            return Some(arc(self.lo, la.max(b_from_a + lb)));
        }
        let a_from_b = (self.lo + n - other.lo) % n;
        if a_from_b < lb {
            return Some(arc(other.lo, lb.max(a_from_b + la)));
        }
        None
    }
}

/// ⌈log₂ x⌉ for x ≥ 1 (the thesis's `log`; seed 000 §3.7).
pub fn ceil_log2(x: u64) -> u32 {
    if x <= 1 {
        0
    } else {
        64 - (x - 1).leading_zeros()
    }
}

/// Bits per switch of the memory schemes compared in seed 000 §3.7
/// (Figs 3.24 and 4.25), for a k-ary n-tree of `n_hosts` nodes (radix 2k).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryModel {
    pub k: u64,
    pub n_hosts: u64,
}

impl MemoryModel {
    fn log_n(&self) -> u64 {
        ceil_log2(self.n_hosts) as u64
    }
    fn log_ports(&self) -> u64 {
        ceil_log2(2 * self.k) as u64
    }
    /// `C_FTdet = N·(log N + log 2k)`: a deterministic forwarding table
    /// storing each destination and its port.
    pub fn table_deterministic(&self) -> u64 {
        self.n_hosts * (self.log_n() + self.log_ports())
    }
    /// `C_FTadap = N·(log N + k·log 2k)`: k candidate ports per entry.
    pub fn table_adaptive(&self) -> u64 {
        self.n_hosts * (self.log_n() + self.k * self.log_ports())
    }
    /// An InfiniBand-style LFT indexed by destination: `N·log₂(2k)`.
    pub fn lft(&self) -> u64 {
        self.n_hosts * self.log_ports()
    }
    /// IR: one `[LIB..UIB]` per port, `2k·2·log N`.
    pub fn ir(&self) -> u64 {
        2 * self.k * 2 * self.log_n()
    }
    /// FT²EI: `(2 + n_ei)·2·k·log N` (inclusion on 2k ports plus `n_ei`
    /// exclusion pairs on the k up ports; enable bits not counted, as in §3.7).
    pub fn ft2ei(&self, n_ei: u64) -> u64 {
        (2 + n_ei) * 2 * self.k * self.log_n()
    }
    /// FIR for DESTRO: `2k·(3·log N + 2k)` (LIB, UIB, MR and a 2k-bit RRR).
    pub fn fir(&self) -> u64 {
        2 * self.k * (3 * self.log_n() + 2 * self.k)
    }
}

/// Bits for `intervals` plain `[LIB..UIB]` registers on a fabric of
/// `n_hosts` destinations.
pub fn interval_bits(intervals: usize, n_hosts: u64) -> u64 {
    intervals as u64 * 2 * ceil_log2(n_hosts) as u64
}

/// Compresses an LFT into per-port cyclic intervals: each port gets the
/// maximal runs of consecutive destinations it serves, the run through
/// `N−1 → 0` joined into one cyclic interval (seed 000 §3.2 allows cyclic
/// intervals). Ports are listed in increasing order.
pub fn compress_lft(lft: &Lft) -> Vec<(PortNo, Vec<CyclicInterval>)> {
    let n = lft.ports.len() as u32;
    let mut runs: Vec<(PortNo, CyclicInterval)> = Vec::new();
    let mut d = 0u32;
    while d < n {
        let Some(port) = lft.ports[d as usize] else {
            d += 1;
            continue;
        };
        let start = d;
        while d + 1 < n && lft.ports[d as usize + 1] == Some(port) {
            d += 1;
        }
        runs.push((port, CyclicInterval::new(start, d)));
        d += 1;
    }
    // Join the last run with the first when the same port wraps around.
    if runs.len() > 1 {
        let (first_port, first) = runs[0];
        let (last_port, last) = runs[runs.len() - 1];
        if first_port == last_port && first.lo == 0 && last.hi == n - 1 {
            runs[0].1 = CyclicInterval::new(last.lo, first.hi);
            runs.pop();
        }
    }
    let mut ports: Vec<PortNo> = runs.iter().map(|r| r.0).collect();
    ports.sort_unstable();
    ports.dedup();
    ports
        .into_iter()
        .map(|p| {
            let ivs = runs
                .iter()
                .filter(|r| r.0 == p)
                .map(|r| r.1)
                .collect::<Vec<_>>();
            (p, ivs)
        })
        .collect()
}

/// The [`IntervalTable`] a compressed LFT installs as (cyclic intervals split).
pub fn interval_table(compressed: &[(PortNo, Vec<CyclicInterval>)], n: u32) -> IntervalTable {
    IntervalTable {
        ports: compressed
            .iter()
            .map(|(port, ivs)| PortIntervals {
                port: *port,
                include: ivs.iter().flat_map(|iv| iv.to_linear(n)).collect(),
                exclude: Vec::new(),
            })
            .collect(),
    }
}

/// Label arithmetic of a k-ary n-tree (seed 000 §2.1): switch
/// `⟨s, o_{n−2}…o_0⟩` has id `s·k^(n−1) + Σ o_i k^i`, down ports `0..k−1`,
/// up ports `k..2k−1`; up port `k+j` leads to `⟨s+1, o with o_s := j⟩`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KaryTree {
    pub k: u32,
    pub n: u32,
}

impl KaryTree {
    /// The tree geometry of `topo`, which must come from the k-ary n-tree
    /// generator (its ids and ports follow §2.1).
    pub fn of(topo: &Topology, engine: &'static str) -> Result<Self, RoutingError> {
        match topo.family {
            Family::KaryNTree { k, n } => Ok(KaryTree { k, n }),
            ref other => Err(RoutingError::NotApplicable {
                engine,
                reason: format!(
                    "{} is a {other:?} topology; this engine needs a k-ary n-tree",
                    topo.name
                ),
            }),
        }
    }

    pub fn pow(&self, e: u32) -> u32 {
        self.k.pow(e)
    }
    /// N = kⁿ.
    pub fn hosts(&self) -> u32 {
        self.pow(self.n)
    }
    /// k^(n−1).
    pub fn per_stage(&self) -> u32 {
        self.pow(self.n - 1)
    }
    pub fn switches(&self) -> u32 {
        self.n * self.per_stage()
    }
    pub fn stage(&self, sw: SwitchId) -> u32 {
        sw / self.per_stage()
    }
    /// The o-digits as one number, `Σ o_i k^i`.
    pub fn index(&self, sw: SwitchId) -> u32 {
        sw % self.per_stage()
    }
    pub fn switch_id(&self, stage: u32, index: u32) -> SwitchId {
        stage * self.per_stage() + index
    }
    /// Digit i (base k) of x.
    pub fn digit(&self, x: u32, i: u32) -> u32 {
        (x / self.pow(i)) % self.k
    }
    /// x with digit i replaced by v.
    pub fn with_digit(&self, x: u32, i: u32, v: u32) -> u32 {
        x - self.digit(x, i) * self.pow(i) + v * self.pow(i)
    }
    pub fn is_top(&self, sw: SwitchId) -> bool {
        self.stage(sw) + 1 == self.n
    }
    /// True when d is below `sw`: `d_i = o_{i−1}` for i = s+1..n−1.
    pub fn is_below(&self, sw: SwitchId, d: HostId) -> bool {
        let s = self.stage(sw);
        d / self.pow(s + 1) == self.index(sw) / self.pow(s)
    }
    /// The first destination below `sw`.
    fn base(&self, sw: SwitchId) -> u32 {
        let s = self.stage(sw);
        (self.index(sw) / self.pow(s)) * self.pow(s + 1)
    }
    /// IR interval of down port j (§3.2): `[base + j·kˢ, base + (j+1)·kˢ − 1]`.
    pub fn down_interval(&self, sw: SwitchId, j: u32) -> CyclicInterval {
        let s = self.stage(sw);
        let lo = self.base(sw) + j * self.pow(s);
        CyclicInterval::new(lo, lo + self.pow(s) - 1)
    }
    /// IR interval shared by all up ports: every destination not below
    /// (possibly cyclic); `None` at the top stage.
    pub fn up_interval(&self, sw: SwitchId) -> Option<CyclicInterval> {
        if self.is_top(sw) {
            return None;
        }
        let s = self.stage(sw);
        let n = self.hosts();
        let base = self.base(sw);
        Some(CyclicInterval::new(
            (base + self.pow(s + 1)) % n,
            (base + n - 1) % n,
        ))
    }
    /// The switch behind up port `k + j`.
    pub fn parent(&self, sw: SwitchId, j: u32) -> SwitchId {
        let s = self.stage(sw);
        self.switch_id(s + 1, self.with_digit(self.index(sw), s, j))
    }
    /// The switch behind down port j (stage ≥ 1).
    pub fn child(&self, sw: SwitchId, j: u32) -> SwitchId {
        let s = self.stage(sw);
        self.switch_id(s - 1, self.with_digit(self.index(sw), s - 1, j))
    }
    /// The port of `child(sw, j)` that leads back up to `sw`: `k + o_{s−1}`.
    pub fn up_port_towards(&self, sw: SwitchId) -> PortNo {
        let s = self.stage(sw);
        (self.k + self.digit(self.index(sw), s - 1)) as PortNo
    }
    /// Leaf switch of host d.
    pub fn leaf_of(&self, d: HostId) -> SwitchId {
        d / self.k
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::kary_ntree;
    use crate::topology::{NodeRef, PortRef};

    #[test]
    fn cyclic_membership_length_and_split() {
        let iv = CyclicInterval::new(3, 1);
        assert!(iv.is_cyclic());
        assert!(iv.contains(0) && iv.contains(1) && iv.contains(7) && !iv.contains(2));
        assert_eq!(iv.len(8), 7);
        assert_eq!(
            iv.to_linear(8),
            vec![Interval { lo: 0, hi: 1 }, Interval { lo: 3, hi: 7 }]
        );
    }

    #[test]
    fn union_of_arcs() {
        let n = 16;
        let a = CyclicInterval::new(4, 7);
        assert_eq!(
            a.union(&CyclicInterval::new(6, 9), n),
            Some(CyclicInterval::new(4, 9))
        );
        assert_eq!(
            a.union(&CyclicInterval::new(8, 9), n),
            None,
            "touching is disjoint"
        );
        assert_eq!(
            CyclicInterval::new(14, 1).union(&CyclicInterval::new(0, 3), n),
            Some(CyclicInterval::new(14, 3))
        );
        // Two arcs covering the ring between them.
        assert_eq!(
            CyclicInterval::new(0, 9).union(&CyclicInterval::new(8, 1), n),
            Some(CyclicInterval::full(n))
        );
        assert!(CyclicInterval::new(12, 5).intersects(&CyclicInterval::new(2, 3), n));
    }

    fn members(iv: &CyclicInterval, n: u32) -> Vec<bool> {
        (0..n).map(|d| iv.contains(d)).collect()
    }

    proptest::proptest! {
        #[test]
        fn union_and_intersection_agree_with_sets(
            n in 2u32..40, a in 0u32..40, b in 0u32..40, c in 0u32..40, d in 0u32..40
        ) {
            let x = CyclicInterval::new(a % n, b % n);
            let y = CyclicInterval::new(c % n, d % n);
            let (mx, my) = (members(&x, n), members(&y, n));
            let overlap = mx.iter().zip(&my).any(|(p, q)| *p && *q);
            proptest::prop_assert_eq!(x.intersects(&y, n), overlap);
            proptest::prop_assert_eq!(mx.iter().filter(|m| **m).count() as u32, x.len(n));
            match x.union(&y, n) {
                Some(u) => {
                    let want: Vec<bool> = mx.iter().zip(&my).map(|(p, q)| *p || *q).collect();
                    proptest::prop_assert!(overlap);
                    proptest::prop_assert_eq!(members(&u, n), want);
                }
                None => proptest::prop_assert!(!overlap),
            }
        }

        #[test]
        fn compressed_lft_routes_like_the_lft(
            ports in proptest::collection::vec(proptest::option::weighted(0.9, 0u16..4), 1..40)
        ) {
            let lft = Lft { ports };
            let n = lft.ports.len() as u32;
            let compressed = compress_lft(&lft);
            let table = interval_table(&compressed, n);
            for d in 0..n {
                proptest::prop_assert_eq!(table.lookup(d), lft.lookup(d));
            }
            // Each port's intervals are disjoint maximal runs.
            let runs: usize = compressed.iter().map(|(_, v)| v.len()).sum();
            let changes = (0..n as usize)
                .filter(|&d| lft.ports[d].is_some() && lft.ports[d] != lft.ports[(d + n as usize - 1) % n as usize])
                .count();
            proptest::prop_assert_eq!(runs, changes.max(usize::from(runs > 0 && changes == 0)));
        }
    }

    #[test]
    fn memory_matches_seed_000_section_3_7_at_k32() {
        // (N, FT det, FT adap, FT²EI n_ei=2, FIR, IR) from §3.7's table.
        let rows: [(u64, u64, u64, u64, u64, u64); 4] = [
            (64, 768, 12_672, 1_536, 5_248, 768),
            (1_024, 16_384, 206_848, 2_560, 6_016, 1_280),
            (32_768, 688_128, 6_782_976, 3_840, 6_976, 1_920),
            (1_048_576, 27_262_976, 222_298_112, 5_120, 7_936, 2_560),
        ];
        for (n, det, adap, ft2ei, fir, ir) in rows {
            let m = MemoryModel { k: 32, n_hosts: n };
            assert_eq!(m.table_deterministic(), det, "N={n}");
            assert_eq!(m.table_adaptive(), adap, "N={n}");
            assert_eq!(m.ft2ei(2), ft2ei, "N={n}");
            assert_eq!(m.fir(), fir, "N={n}");
            assert_eq!(m.ir(), ir, "N={n}");
        }
        // §3.7 crossover: FIR beats the deterministic table only from N ≈ 394.
        let first = (2..2000u64)
            .find(|&n| {
                let m = MemoryModel { k: 32, n_hosts: n };
                m.fir() < m.table_deterministic()
            })
            .unwrap();
        assert!((380..=400).contains(&first), "crossover at {first}");
    }

    #[test]
    fn compress_joins_wrapping_runs() {
        let lft = Lft {
            ports: [2, 2, 0, 1, 3, 3, 2, 2].iter().map(|&p| Some(p)).collect(),
        };
        let c = compress_lft(&lft);
        assert_eq!(
            c,
            vec![
                (0, vec![CyclicInterval::new(2, 2)]),
                (1, vec![CyclicInterval::new(3, 3)]),
                (2, vec![CyclicInterval::new(6, 1)]),
                (3, vec![CyclicInterval::new(4, 5)]),
            ]
        );
        let t = interval_table(&c, 8);
        for d in 0..8 {
            assert_eq!(t.lookup(d), lft.lookup(d));
        }
    }

    #[test]
    fn tree_arithmetic_matches_the_generator() {
        for (k, n) in [(2, 3), (4, 2), (4, 3), (3, 3)] {
            let topo = kary_ntree(k, n).unwrap();
            let t = KaryTree::of(&topo, "test").unwrap();
            for sw in 0..t.switches() {
                let s = t.stage(sw);
                for j in 0..k {
                    if !t.is_top(sw) {
                        let up = topo.peer(PortRef::switch(sw, (k + j) as PortNo)).unwrap();
                        assert_eq!(up.node, NodeRef::Switch(t.parent(sw, j)));
                        assert_eq!(up.port as u32, t.digit(t.index(sw), s));
                    }
                    let down = topo.peer(PortRef::switch(sw, j as PortNo)).unwrap();
                    if s == 0 {
                        assert_eq!(down.node, NodeRef::Host(sw * k + j));
                    } else {
                        assert_eq!(down.node, NodeRef::Switch(t.child(sw, j)));
                        assert_eq!(down.port, t.up_port_towards(sw));
                    }
                }
            }
        }
    }

    #[test]
    fn ir_golden_table_2ary_3tree() {
        // Seed 000 §3.2's golden table (Fig 3.2).
        let t = KaryTree { k: 2, n: 3 };
        let up = |sw| t.up_interval(sw).map(|i| (i.lo, i.hi));
        let down = |sw, j| {
            let i = t.down_interval(sw, j);
            (i.lo, i.hi)
        };
        assert_eq!(
            (down(0, 0), down(0, 1), up(0)),
            ((0, 0), (1, 1), Some((2, 7)))
        );
        assert_eq!(
            (down(1, 0), down(1, 1), up(1)),
            ((2, 2), (3, 3), Some((4, 1)))
        );
        assert_eq!((down(2, 0), up(2)), ((4, 4), Some((6, 3))));
        assert_eq!((down(3, 1), up(3)), ((7, 7), Some((0, 5))));
        assert_eq!(
            (down(4, 0), down(4, 1), up(4)),
            ((0, 1), (2, 3), Some((4, 7)))
        );
        assert_eq!(
            (down(7, 0), down(7, 1), up(7)),
            ((4, 5), (6, 7), Some((0, 3)))
        );
        assert_eq!((down(10, 0), down(10, 1), up(10)), ((0, 3), (4, 7), None));
        assert!(t.is_below(6, 6) && !t.is_below(6, 3));
    }
}
