//! The static fault analysis of seed 004 §4 / §5.1: for every combination of
//! n link faults (exhaustive, the distance-1 worst-case region, or random
//! samples), does each mechanism set find a fault-free route for every
//! connected pair? Reproduces Table 2 (§6.1) and, optionally, Table 3's
//! affected-pair share and per-mechanism split (§6.2).
//!
//! Speed (§5 "Recipe for a fast Rust version"): node sets are `u64` bitsets
//! and fault sets `u128` link masks, so the analysis takes meshes and tori of
//! at most 64 routers and 128 links (the paper's 3×3×3 torus has 27 and 81).
//! Per combination:
//! - the safe-leg rows (adaptive, DOR, direction order) are maintained
//!   incrementally down the lexicographic enumeration — changing the last
//!   fault only redoes the last level;
//! - only affected pairs (a fault on some minimal path) are examined, and a
//!   mechanism set stops at its first failing pair;
//! - a set whose menu contains a tolerating set's menu is not examined;
//! - misroute rows are computed lazily, per source, only when asked for.
//!
//! The enumeration runs on `threads` scoped threads taking chunks of the
//! combination space; results do not depend on the thread count.

use flitnet_core::flit::MAX_INTERMEDIATES;
use flitnet_core::mechanism::intermediate::cube::{Cube, DetOrder};
use flitnet_core::mechanism::intermediate::legs::{LegKind, LegSafety, MechanismUse, Mechanisms};
use flitnet_core::mechanism::intermediate::select::{best_route, components, LegCache};
use flitnet_core::mechanism::intermediate::IntermediateError;
use flitnet_core::topology::{HostId, Topology};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which fault combinations to evaluate (§4 "Analysis models").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FaultMode {
    /// Every combination of n of the switch links: C(81, n) in 3×3×3.
    Exhaustive,
    /// Every combination of n links of the distance-1 region around
    /// `centre`: links with an endpoint adjacent to it (33 in 3×3×3).
    DistanceOne { centre: HostId },
    /// `samples` combinations of n distinct links drawn uniformly, seeded
    /// (§8 item 7's resolution).
    Sampled { samples: u64, seed: u64 },
}

/// How to run the analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnalysisOptions {
    /// Worker threads (at least one).
    pub threads: usize,
    /// Also choose a route for every affected pair to fill Table 3. Costs
    /// far more than the tolerance test; meant for small fault counts.
    pub mechanism_split: bool,
}

impl Default for AnalysisOptions {
    fn default() -> Self {
        AnalysisOptions {
            threads: 2,
            mechanism_split: false,
        }
    }
}

/// Table 3 for one mechanism set, as raw counts over the combinations it
/// tolerates (footnote 12).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MechanismSplit {
    pub tolerated_combinations: u64,
    /// Ordered pairs with a fault on some minimal path, summed over the
    /// tolerated combinations (disconnected pairs included).
    pub affected_pairs: u64,
    /// Of those, pairs the faults disconnect (no route chosen).
    pub disconnected_pairs: u64,
    /// Routed affected pairs by the mechanisms their chosen route uses.
    pub by_mechanism: BTreeMap<MechanismUse, u64>,
}

impl MechanismSplit {
    /// Table 3's "Affected" column: mean affected ordered pairs over the
    /// number of ordered pairs including self-pairs (27² = 729) (§6.2).
    pub fn affected_percent(&self, pairs_per_combination: u64) -> f64 {
        100.0 * self.affected_pairs as f64
            / (self.tolerated_combinations as f64 * pairs_per_combination as f64)
    }
    /// Share of the routed affected pairs that use `m`, exactly normalised.
    pub fn share_percent(&self, m: MechanismUse) -> f64 {
        let routed: u64 = self.by_mechanism.values().sum();
        100.0 * *self.by_mechanism.get(&m).unwrap_or(&0) as f64 / routed as f64
    }
    /// Share as the paper printed it: the mechanism's pairs per ordered pair,
    /// divided by the *printed* affected percentage (6.85 for 6.8587 at one
    /// fault), which is why its rows sum to slightly more than 100% (§6.2,
    /// §8 item 5).
    pub fn paper_share_percent(
        &self,
        m: MechanismUse,
        pairs_per_combination: u64,
        printed_affected_percent: f64,
    ) -> f64 {
        let used = 100.0 * *self.by_mechanism.get(&m).unwrap_or(&0) as f64
            / (self.tolerated_combinations as f64 * pairs_per_combination as f64);
        100.0 * used / printed_affected_percent
    }
}

/// One column of Table 2 (one mechanism set) for one fault count.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VariantRow {
    pub mechanisms: Mechanisms,
    pub label: String,
    pub not_tolerated: u64,
    /// Present when [`AnalysisOptions::mechanism_split`] was set.
    pub split: Option<MechanismSplit>,
}

/// The result for one fault count: a Table-2 row plus Table-3 data.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rows {
    pub faults: usize,
    pub mode: FaultMode,
    /// Links faults were drawn from (81 whole torus, 33 distance-1).
    pub candidate_links: usize,
    pub combinations: u64,
    /// Combinations that disconnect at least one pair (those pairs are
    /// excluded from the tolerance test, §4).
    pub disconnecting_combinations: u64,
    /// Ordered pairs per combination, self-pairs included (Table 3's divisor).
    pub pairs_per_combination: u64,
    pub rows: Vec<VariantRow>,
}

impl Rows {
    /// Percentage of combinations `row` does not tolerate (Table 2's cells).
    pub fn not_tolerated_percent(&self, row: &VariantRow) -> f64 {
        100.0 * row.not_tolerated as f64 / self.combinations as f64
    }
    pub fn row(&self, m: &Mechanisms) -> Option<&VariantRow> {
        self.rows.iter().find(|r| r.mechanisms == *m)
    }
}

/// Largest number of combinations [`FaultMode::Exhaustive`] and
/// [`FaultMode::DistanceOne`] accept (about an hour of work on two cores).
pub const MAX_COMBINATIONS: u64 = 2_000_000_000;

/// Computes Table 2 (and with `mechanism_split` Table 3) for `faults` link
/// faults on `topo`. `progress(done, total)` is called from the workers
/// after each chunk of combinations.
pub fn tolerance_table(
    topo: &Topology,
    mechanisms: &[Mechanisms],
    faults: usize,
    mode: FaultMode,
    options: &AnalysisOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Rows, IntermediateError> {
    let cube = Cube::from_topology(topo)?;
    if cube.num_nodes() > 64 || cube.num_links() > 128 {
        return Err(IntermediateError::TooLargeForAnalysis {
            routers: cube.num_nodes(),
            links: cube.num_links(),
        });
    }
    if let Some(m) = mechanisms
        .iter()
        .find(|m| m.max_intermediates as usize > MAX_INTERMEDIATES)
    {
        return Err(IntermediateError::TooManyIntermediates {
            requested: m.max_intermediates,
            max: MAX_INTERMEDIATES,
        });
    }
    let universe: Vec<u32> = match mode {
        FaultMode::DistanceOne { centre } => distance_one_region(&cube, centre)?,
        _ => (0..cube.num_links() as u32).collect(),
    };
    if faults > universe.len() {
        return Err(IntermediateError::TooManyFaults {
            faults,
            links: universe.len(),
        });
    }
    let total = match mode {
        FaultMode::Sampled { samples, .. } => samples,
        _ => binomial(universe.len() as u64, faults as u64)
            .filter(|&c| c <= MAX_COMBINATIONS)
            .ok_or(IntermediateError::TooManyCombinations {
                links: universe.len(),
                faults,
                max: MAX_COMBINATIONS,
            })?,
    };
    let model = Model::new(&cube, mechanisms);
    let threads = options.threads.max(1);
    let chunk: u64 = 8192;
    let chunks = total.div_ceil(chunk);
    let done = AtomicU64::new(0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a worker pool");
    // One evaluator per worker (its caches are worth keeping across
    // chunks); counts are merged at the end, so the order chunks run in
    // does not matter.
    let counts = pool.install(|| {
        use rayon::prelude::*;
        (0..chunks)
            .into_par_iter()
            .fold(
                || {
                    (
                        Evaluator::new(&model, faults, options.mechanism_split),
                        Counts::new(mechanisms.len()),
                        vec![0u32; faults],
                    )
                },
                |(mut eval, mut counts, mut combo), c| {
                    let (start, end) = (c * chunk, ((c + 1) * chunk).min(total));
                    match mode {
                        FaultMode::Sampled { seed, .. } => {
                            let mut rng = ChaCha8Rng::seed_from_u64(seed);
                            rng.set_stream(c);
                            for _ in start..end {
                                let mut idx =
                                    rand::seq::index::sample(&mut rng, universe.len(), faults)
                                        .into_vec();
                                idx.sort_unstable();
                                for (slot, i) in combo.iter_mut().zip(idx) {
                                    *slot = i as u32;
                                }
                                eval.evaluate(&universe, &combo, 0, &mut counts);
                            }
                        }
                        _ => {
                            unrank(start, universe.len() as u32, &mut combo);
                            let mut changed = 0;
                            for r in start..end {
                                eval.evaluate(&universe, &combo, changed, &mut counts);
                                if r + 1 < end {
                                    changed = next_combination(&mut combo, universe.len() as u32);
                                }
                            }
                        }
                    }
                    let d = done.fetch_add(end - start, Ordering::Relaxed) + (end - start);
                    progress(d, total);
                    (eval, counts, combo)
                },
            )
            .map(|(_, counts, _)| counts)
            .reduce(
                || Counts::new(mechanisms.len()),
                |mut a, b| {
                    a.merge(&b);
                    a
                },
            )
    });
    let n = cube.num_nodes() as u64;
    Ok(Rows {
        faults,
        mode,
        candidate_links: universe.len(),
        combinations: total,
        disconnecting_combinations: counts.disconnecting,
        pairs_per_combination: n * n,
        rows: mechanisms
            .iter()
            .enumerate()
            .map(|(i, m)| VariantRow {
                mechanisms: *m,
                label: m.to_string(),
                not_tolerated: counts.not_tolerated[i],
                split: options.mechanism_split.then(|| counts.split[i].clone()),
            })
            .collect(),
    })
}

/// Which of `mechanisms` tolerate one fault set (switch-link faults only):
/// the per-combination test of [`tolerance_table`], for a single scenario.
pub fn tolerated_by(
    topo: &Topology,
    faulty_links: &[flitnet_core::topology::LinkId],
    mechanisms: &[Mechanisms],
) -> Result<Vec<bool>, IntermediateError> {
    let cube = Cube::from_topology(topo)?;
    if cube.num_nodes() > 64 || cube.num_links() > 128 {
        return Err(IntermediateError::TooLargeForAnalysis {
            routers: cube.num_nodes(),
            links: cube.num_links(),
        });
    }
    let mut universe = Vec::with_capacity(faulty_links.len());
    for &l in faulty_links {
        let c = cube
            .compact_link(l)
            .ok_or(IntermediateError::UnknownLink { link: l })?;
        if !universe.contains(&c) {
            universe.push(c);
        }
    }
    let model = Model::new(&cube, mechanisms);
    let mut eval = Evaluator::new(&model, universe.len(), false);
    let mut counts = Counts::new(mechanisms.len());
    let combo: Vec<u32> = (0..universe.len() as u32).collect();
    eval.evaluate(&universe, &combo, 0, &mut counts);
    Ok(counts.not_tolerated.iter().map(|&c| c == 0).collect())
}

/// The distance-1 region (§2, Fig. 7): links with at least one endpoint
/// adjacent to `centre`, as compact link indices.
pub fn distance_one_region(cube: &Cube, centre: HostId) -> Result<Vec<u32>, IntermediateError> {
    let c = cube
        .node_of_host(centre)
        .ok_or(IntermediateError::UnknownHost { host: centre })?;
    let near: Vec<u32> = (0..2 * cube.ndims() as u8)
        .filter_map(|d| {
            cube.step(c, flitnet_core::mechanism::intermediate::cube::Dir(d))
                .map(|(n, _)| n)
        })
        .collect();
    Ok((0..cube.num_links() as u32)
        .filter(|&l| {
            let link = cube.link(l);
            near.contains(&link.a) || near.contains(&link.b)
        })
        .collect())
}

/// C(n, k), `None` on overflow.
pub fn binomial(n: u64, k: u64) -> Option<u64> {
    if k > n {
        return Some(0);
    }
    let k = k.min(n - k);
    let mut acc: u128 = 1;
    for i in 0..k {
        acc = acc * (n - i) as u128 / (i + 1) as u128;
        if acc > u64::MAX as u128 {
            return None;
        }
    }
    Some(acc as u64)
}

/// The `rank`-th k-combination of 0..m in lexicographic order, into `out`.
fn unrank(mut rank: u64, m: u32, out: &mut [u32]) {
    let k = out.len() as u64;
    let mut next = 0u32;
    for (i, slot) in out.iter_mut().enumerate() {
        let left = k - i as u64 - 1;
        loop {
            let with_next = binomial((m - next - 1) as u64, left).unwrap_or(u64::MAX);
            if rank < with_next {
                break;
            }
            rank -= with_next;
            next += 1;
        }
        *slot = next;
        next += 1;
    }
}

/// Advances to the next combination; returns the first position changed.
fn next_combination(c: &mut [u32], m: u32) -> usize {
    let k = c.len();
    let mut i = k;
    while i > 0 {
        i -= 1;
        if c[i] < m - (k - i) as u32 {
            c[i] += 1;
            for j in i + 1..k {
                c[j] = c[j - 1] + 1;
            }
            return i;
        }
    }
    0
}

/// Per-worker tallies, merged at the end.
struct Counts {
    not_tolerated: Vec<u64>,
    disconnecting: u64,
    split: Vec<MechanismSplit>,
}

impl Counts {
    fn new(variants: usize) -> Self {
        Counts {
            not_tolerated: vec![0; variants],
            disconnecting: 0,
            split: vec![MechanismSplit::default(); variants],
        }
    }
    fn merge(&mut self, o: &Counts) {
        self.disconnecting += o.disconnecting;
        for (a, b) in self.not_tolerated.iter_mut().zip(&o.not_tolerated) {
            *a += b;
        }
        for (a, b) in self.split.iter_mut().zip(&o.split) {
            a.tolerated_combinations += b.tolerated_combinations;
            a.affected_pairs += b.affected_pairs;
            a.disconnected_pairs += b.disconnected_pairs;
            for (m, c) in &b.by_mechanism {
                *a.by_mechanism.entry(*m).or_default() += c;
            }
        }
    }
}

/// A safe-leg relation, by which rows it draws on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowKind {
    Adaptive,
    Det(DetOrder),
    Misroute,
    MisrouteDet(DetOrder),
}

impl From<LegKind> for RowKind {
    fn from(k: LegKind) -> Self {
        match k {
            LegKind::Adaptive => RowKind::Adaptive,
            LegKind::Deterministic(o) => RowKind::Det(o),
            LegKind::MisrouteAdaptive => RowKind::Misroute,
            LegKind::MisrouteDeterministic(o) => RowKind::MisrouteDet(o),
        }
    }
}

struct PrefixInfo {
    end: u32,
    len: u32,
    links: u128,
    /// Targets the remainder may head for under the order constraint.
    order_ok: u64,
}

/// Everything that does not depend on the fault set.
struct Model<'a> {
    cube: &'a Cube,
    n: usize,
    full: u64,
    /// `blocked[kind][l * n + a]`: targets b whose leg a→b uses link l
    /// (kind 0 adaptive: any minimal path; 1 DOR; 2 direction order).
    blocked: [Vec<u64>; 3],
    prefixes: Vec<Vec<PrefixInfo>>,
    variants: Vec<Mechanisms>,
    kinds: Vec<Vec<RowKind>>,
    /// For each variant, the earlier-evaluated variants whose menus it contains.
    subsets: Vec<Vec<usize>>,
    /// Evaluation order: smaller menus first.
    order: Vec<usize>,
    /// A lower bound on the link faults needed to disconnect the network:
    /// 2n for a torus with every k ≥ 3 (k-ary n-cubes are maximally
    /// edge-connected), else 0 (always check).
    edge_connectivity: usize,
}

fn det_index(o: DetOrder) -> usize {
    match o {
        DetOrder::Dor => 1,
        DetOrder::DirectionOrder => 2,
    }
}

impl<'a> Model<'a> {
    fn new(cube: &'a Cube, variants: &[Mechanisms]) -> Self {
        let n = cube.num_nodes();
        let links = cube.num_links();
        let full = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        let mut blocked = [
            vec![0u64; links * n],
            vec![0u64; links * n],
            vec![0u64; links * n],
        ];
        for a in 0..n as u32 {
            for b in 0..n as u32 {
                for l in 0..links as u32 {
                    if cube.link_on_minimal_path(l, a, b) {
                        blocked[0][l as usize * n + a as usize] |= 1 << b;
                    }
                }
                for (i, o) in [(1, DetOrder::Dor), (2, DetOrder::DirectionOrder)] {
                    cube.walk_det(o, a, b, |l| {
                        blocked[i][l as usize * n + a as usize] |= 1 << b;
                        true
                    });
                }
            }
        }
        let prefixes = (0..n as u32)
            .map(|u| {
                let mut list = Vec::new();
                cube.for_each_prefix(u, &|_| true, &|_, _| true, &mut |runs, end, len, ls| {
                    let last = runs.last().expect("non-empty").dir;
                    list.push(PrefixInfo {
                        end,
                        len,
                        links: ls.iter().fold(0u128, |m, &l| m | 1 << l),
                        order_ok: (0..n as u32)
                            .filter(|&t| cube.remainder_in_order(end, t, last))
                            .fold(0u64, |m, t| m | 1 << t),
                    });
                });
                list
            })
            .collect();
        let kinds: Vec<Vec<RowKind>> = variants
            .iter()
            .map(|m| m.leg_kinds().into_iter().map(RowKind::from).collect())
            .collect();
        let mut order: Vec<usize> = (0..variants.len()).collect();
        order.sort_by_key(|&i| (variants[i].max_intermediates, kinds[i].len()));
        let subsets = (0..variants.len())
            .map(|i| {
                let pos = order.iter().position(|&x| x == i).expect("in order");
                order[..pos]
                    .iter()
                    .copied()
                    .filter(|&j| variants[j].is_subset_of(&variants[i]))
                    .collect()
            })
            .collect();
        let edge_connectivity = if cube.is_torus() && cube.dims().iter().all(|&k| k >= 3) {
            2 * cube.ndims()
        } else {
            0
        };
        Model {
            edge_connectivity,
            cube,
            n,
            full,
            blocked,
            prefixes,
            variants: variants.to_vec(),
            kinds,
            subsets,
            order,
        }
    }
}

/// Per-worker, per-combination state.
struct Evaluator<'m, 'c> {
    model: &'m Model<'c>,
    split: bool,
    fault_mask: u128,
    fault_list: Vec<u32>,
    /// `levels[kind][(i * n) + a]`: rows after the first i faults.
    levels: [Vec<u64>; 3],
    misroute_rows: [Vec<Option<u64>>; 3],
    component: Vec<u32>,
    /// Per variant: the merged safe rows, and the "can finish within z more
    /// legs" columns per destination, computed on demand.
    merged: Vec<Option<Vec<u64>>>,
    columns: Vec<BTreeMap<(u32, usize), u64>>,
    /// Leg lengths for Table 3's route choices under this combination.
    legs: LegCache,
}

impl<'m, 'c> Evaluator<'m, 'c> {
    fn new(model: &'m Model<'c>, faults: usize, split: bool) -> Self {
        let n = model.n;
        let mut level = vec![0u64; (faults + 1) * n];
        level[..n].fill(model.full);
        Evaluator {
            model,
            split,
            fault_mask: 0,
            fault_list: Vec::with_capacity(faults),
            levels: [level.clone(), level.clone(), level],
            misroute_rows: std::array::from_fn(|_| vec![None; n]),
            component: vec![0; n],
            merged: vec![None; model.variants.len()],
            columns: vec![BTreeMap::new(); model.variants.len()],
            legs: LegCache::new(if split { n } else { 0 }),
        }
    }

    fn rows(&self, kind: usize) -> &[u64] {
        let n = self.model.n;
        let k = self.fault_list.len();
        &self.levels[kind][k * n..(k + 1) * n]
    }

    /// The safe row of `u` for leg kind `kind` (misroute rows lazily).
    fn row(&mut self, kind: RowKind, u: u32) -> u64 {
        match kind {
            RowKind::Adaptive => self.rows(0)[u as usize],
            RowKind::Det(o) => self.rows(det_index(o))[u as usize],
            RowKind::Misroute => self.misroute_row(0, u),
            RowKind::MisrouteDet(o) => self.misroute_row(det_index(o), u),
        }
    }

    /// §3.7: `RSm[u] = ⋃ over safe prefixes P of (rows[E_P] ∩ orderOK_P)`.
    fn misroute_row(&mut self, rem: usize, u: u32) -> u64 {
        if let Some(r) = self.misroute_rows[rem][u as usize] {
            return r;
        }
        let rows = self.rows(rem);
        let r = self.model.prefixes[u as usize]
            .iter()
            .filter(|p| p.links & self.fault_mask == 0)
            .fold(0u64, |acc, p| acc | (rows[p.end as usize] & p.order_ok));
        self.misroute_rows[rem][u as usize] = Some(r);
        r
    }

    fn merged_rows(&mut self, v: usize) -> Vec<u64> {
        if let Some(r) = &self.merged[v] {
            return r.clone();
        }
        let kinds = self.model.kinds[v].clone();
        let rows: Vec<u64> = (0..self.model.n as u32)
            .map(|u| kinds.iter().fold(0u64, |acc, &k| acc | self.row(k, u)))
            .collect();
        self.merged[v] = Some(rows.clone());
        rows
    }

    /// Nodes that reach `d` with at most `z` more legs under variant `v`.
    fn column(&mut self, v: usize, d: u32, z: usize, rows: &[u64]) -> u64 {
        if let Some(&c) = self.columns[v].get(&(d, z)) {
            return c;
        }
        let c = if z == 1 {
            (0..self.model.n)
                .filter(|&x| rows[x] >> d & 1 == 1)
                .fold(0, |m, x| m | 1 << x)
        } else {
            let prev = self.column(v, d, z - 1, rows);
            (0..self.model.n)
                .filter(|&x| rows[x] & prev != 0)
                .fold(0, |m, x| m | 1 << x)
        };
        self.columns[v].insert((d, z), c);
        c
    }

    /// Does variant `v` route every affected connected pair? `affected[s]`
    /// lists s's affected connected destinations.
    fn tolerates(&mut self, v: usize, affected: &[u64]) -> bool {
        let legs = self.model.variants[v].max_intermediates as usize + 1;
        if legs == 1 {
            // One leg: only the sources' own rows matter.
            let kinds = self.model.kinds[v].clone();
            return affected.iter().enumerate().all(|(s, &aff)| {
                aff == 0 || {
                    let r = kinds
                        .iter()
                        .fold(0u64, |acc, &k| acc | self.row(k, s as u32));
                    aff & !r == 0
                }
            });
        }
        let rows = self.merged_rows(v);
        for (s, &aff) in affected.iter().enumerate() {
            let mut left = aff & !rows[s];
            while left != 0 {
                let d = left.trailing_zeros();
                left &= left - 1;
                if rows[s] & self.column(v, d, legs - 1, &rows) == 0 {
                    return false;
                }
            }
        }
        true
    }

    fn evaluate(&mut self, universe: &[u32], combo: &[u32], changed: usize, counts: &mut Counts) {
        let n = self.model.n;
        // Incremental rows: levels up to `changed` are still valid.
        for i in changed..combo.len() {
            let l = universe[combo[i] as usize] as usize;
            for kind in 0..3 {
                let (before, after) = self.levels[kind].split_at_mut((i + 1) * n);
                let prev = &before[i * n..];
                let blocked = &self.model.blocked[kind][l * n..(l + 1) * n];
                for a in 0..n {
                    after[a] = prev[a] & !blocked[a];
                }
            }
        }
        self.fault_list.clear();
        self.fault_list
            .extend(combo.iter().map(|&c| universe[c as usize]));
        self.fault_mask = self.fault_list.iter().fold(0u128, |m, &l| m | 1 << l);
        for r in &mut self.misroute_rows {
            r.fill(None);
        }
        self.merged.fill(None);
        for c in &mut self.columns {
            c.clear();
        }
        if self.split {
            self.legs.reset();
        }
        // Fewer faults than the edge connectivity cannot disconnect anything.
        let mut comp_mask = vec![0u64; n];
        if self.fault_list.len() < self.model.edge_connectivity {
            self.component.fill(0);
            comp_mask[0] = self.model.full;
        } else {
            self.component = components(self.model.cube, &self.fault_list);
            for (x, &c) in self.component.iter().enumerate() {
                comp_mask[c as usize] |= 1 << x;
            }
        }
        let adaptive = self.rows(0).to_vec();
        let mut disconnected = false;
        let affected: Vec<u64> = (0..n)
            .map(|s| {
                let reachable = comp_mask[self.component[s] as usize];
                if reachable != self.model.full {
                    disconnected = true;
                }
                !adaptive[s] & reachable
            })
            .collect();
        if disconnected {
            counts.disconnecting += 1;
        }
        let mut tolerated = vec![false; self.model.variants.len()];
        for oi in 0..self.model.order.len() {
            let v = self.model.order[oi];
            let ok =
                self.model.subsets[v].iter().any(|&j| tolerated[j]) || self.tolerates(v, &affected);
            tolerated[v] = ok;
            if !ok {
                counts.not_tolerated[v] += 1;
            } else if self.split {
                self.record_split(v, &adaptive, &affected, &mut counts.split[v]);
            }
        }
    }

    /// Table 3: the §3.8 choice for every affected pair of a tolerated combination.
    fn record_split(
        &mut self,
        v: usize,
        adaptive: &[u64],
        affected: &[u64],
        out: &mut MechanismSplit,
    ) {
        let n = self.model.n;
        out.tolerated_combinations += 1;
        let all_affected: u32 = adaptive
            .iter()
            .map(|r| (!r & self.model.full).count_ones())
            .sum();
        let routed: u32 = affected.iter().map(|a| a.count_ones()).sum();
        out.affected_pairs += all_affected as u64;
        out.disconnected_pairs += (all_affected - routed) as u64;
        let mech = self.model.variants[v];
        let safety = MaskSafety {
            cube: self.model.cube,
            fault_mask: self.fault_mask,
            prefixes: &self.model.prefixes,
            rows: {
                let k = self.fault_list.len();
                let [a, dor, dirord] = &self.levels;
                [
                    &a[k * n..(k + 1) * n],
                    &dor[k * n..(k + 1) * n],
                    &dirord[k * n..(k + 1) * n],
                ]
            },
        };
        for (s, &aff) in affected.iter().enumerate().take(n) {
            let mut left = aff;
            while left != 0 {
                let d = left.trailing_zeros();
                left &= left - 1;
                let legs = best_route(&safety, &mut self.legs, s as u32, d, &mech)
                    .expect("a tolerated combination routes every connected pair");
                let used = MechanismUse {
                    intermediates: (legs.len() - 1) as u8,
                    deterministic: legs.iter().any(|l| l.kind.deterministic()),
                    misroute: legs.iter().any(|l| l.kind.misrouted()),
                };
                *out.by_mechanism.entry(used).or_default() += 1;
            }
        }
    }
}

/// [`LegSafety`] read off the precomputed rows of one combination.
struct MaskSafety<'a> {
    cube: &'a Cube,
    fault_mask: u128,
    rows: [&'a [u64]; 3],
    prefixes: &'a [Vec<PrefixInfo>],
}

impl LegSafety for MaskSafety<'_> {
    fn cube(&self) -> &Cube {
        self.cube
    }
    fn link_ok(&self, link: u32) -> bool {
        self.fault_mask >> link & 1 == 0
    }
    fn adaptive_ok(&self, a: u32, b: u32) -> bool {
        self.rows[0][a as usize] >> b & 1 == 1
    }
    fn det_ok(&self, order: DetOrder, a: u32, b: u32) -> bool {
        self.rows[det_index(order)][a as usize] >> b & 1 == 1
    }
    fn shortest_misroute(&self, det: Option<DetOrder>, u: u32, v: u32) -> Option<Option<u32>> {
        let rows = self.rows[det.map_or(0, det_index)];
        Some(
            self.prefixes[u as usize]
                .iter()
                .filter(|p| {
                    p.links & self.fault_mask == 0
                        && p.order_ok >> v & 1 == 1
                        && rows[p.end as usize] >> v & 1 == 1
                })
                .map(|p| p.len + self.cube.dist(p.end, v))
                .min(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unranking_agrees_with_stepping() {
        let (m, k) = (9u32, 4usize);
        let mut c = vec![0u32; k];
        unrank(0, m, &mut c);
        assert_eq!(c, vec![0, 1, 2, 3]);
        for r in 1..binomial(m as u64, k as u64).unwrap() {
            next_combination(&mut c, m);
            let mut u = vec![0u32; k];
            unrank(r, m, &mut u);
            assert_eq!(u, c, "rank {r}");
        }
    }

    #[test]
    fn binomials_of_table_2() {
        assert_eq!(binomial(81, 2), Some(3_240));
        assert_eq!(binomial(81, 4), Some(1_663_740));
        assert_eq!(binomial(81, 5), Some(25_621_596));
        assert_eq!(binomial(33, 10), Some(92_561_040));
    }
}
