//! `flitctl analyze faults`: static fault-tolerance analysis. For a topology
//! and a routing / fault-tolerance mechanism, decide for every combination of
//! n link faults (exhaustive, seed 004's distance-1 region, or seeded random
//! samples) whether the mechanism still serves every pair, exactly as the
//! mechanism's paper defines "tolerated":
//!
//! - meshes / tori, seed 004's I, D, M, I+D, I×2, … (§4: every *connected*
//!   pair has a route whose legs avoid the faults) — delegated to
//!   [`tolerance_table`];
//! - k-ary n-trees, `dlr` / `dlr-adaptive` (seed 002 §6.4: every packet is
//!   delivered by local rerouting, walked with the switch logic itself);
//! - k-ary n-trees, `reroute` (§6.4's controller reconfiguration:
//!   every pair keeps an up*/down* path over the surviving links);
//! - k-ary n-trees, `ft2ei[:EIs]` (seed 000 §4.8: every pair has an allowed
//!   path and no allowed path runs into a fault; faults are *directed* links,
//!   the thesis's granularity, applied in increasing link order).
//!
//! Work is split in chunks over `--threads` scoped threads; the results do
//! not depend on the thread count (sampled chunks have their own RNG stream).

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
#[cfg(test)]
mod golden;
pub mod table;

pub use table::{
    binomial, distance_one_region, tolerance_table, tolerated_by, AnalysisOptions, FaultMode,
    MechanismSplit, Rows, VariantRow,
};

use flitnet_core::mechanism::dlr::walk::{switch_links, Sweeper};
use flitnet_core::mechanism::dlr::{DlrConfig, DlrFaults, DlrVariant};
use flitnet_core::mechanism::intermediate::Mechanisms;
use flitnet_core::routing::ft2ei::{self, directed_links, Ft2eiConfig};
use flitnet_core::routing::interval::KaryTree;
use flitnet_core::topology::generators::{kary_ntree, mesh_or_torus};
use flitnet_core::topology::{Family, FaultSet, LinkId, NodeRef, PortRef, Topology};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// How fault combinations are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every combination of the candidate links.
    Exhaustive,
    /// Every combination of the links next to a node (the intermediate-node paper's Fig. 7);
    /// meshes and tori only.
    Distance1,
    /// `--samples` uniform random combinations drawn from `--seed`.
    Sampled,
}

#[derive(Args, Debug, Clone)]
pub struct AnalyzeFaultsArgs {
    /// Topology: a file (flitnet YAML or .net) or a shorthand:
    /// `torus:3x3x3`, `mesh:4x4`, `kary:4,3` (k-ary n-tree).
    pub topo: String,
    /// Mechanism(s), comma-separated. Meshes/tori: the intermediate-node
    /// mechanisms (i, d, m, d-m, i-d, i-m, i-d-m, ix2, ix3, ix2-d) or
    /// `table2` for all ten. Fat-trees: dlr, dlr-adaptive, reroute
    /// (controller re-routing by up*/down*), ft2ei[:EIs].
    #[arg(long, short)]
    pub mechanism: String,
    /// Number of simultaneous link faults.
    #[arg(long, short)]
    pub faults: usize,
    #[arg(long, value_enum, default_value = "exhaustive")]
    pub mode: Mode,
    /// Combinations drawn in sampled mode.
    #[arg(long, default_value_t = 100_000)]
    pub samples: u64,
    /// Seed of the sampled mode.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress line on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The verdict for one mechanism.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MechanismResult {
    pub mechanism: String,
    pub not_tolerated: u64,
    pub not_tolerated_percent: f64,
    /// 95% Wilson interval of the non-tolerated percentage (sampled mode).
    pub ci95_percent: Option<(f64, f64)>,
}

/// The outcome of one analysis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultAnalysis {
    pub topology: String,
    pub faults: usize,
    pub mode: Mode,
    /// Links faults are drawn from.
    pub candidate_links: usize,
    pub combinations: u64,
    pub results: Vec<MechanismResult>,
    pub seconds: f64,
}

impl FaultAnalysis {
    /// The result for `mechanism` (as given on the command line).
    pub fn result(&self, mechanism: &str) -> Option<&MechanismResult> {
        self.results.iter().find(|r| r.mechanism == mechanism)
    }
}

/// Loads `spec`: an existing file, or a `torus:` / `mesh:` / `kary:` shorthand.
pub fn load_topology(spec: &str) -> Result<Topology> {
    if Path::new(spec).exists() {
        return crate::topo::load(Path::new(spec));
    }
    let (family, params) = spec
        .split_once(':')
        .with_context(|| format!("topology `{spec}`: no such file, and not family:params"))?;
    let nums = |sep: char| -> Result<Vec<u32>> {
        params
            .split(sep)
            .map(|x| {
                x.trim()
                    .parse::<u32>()
                    .with_context(|| format!("topology `{spec}`: `{x}` is not a number"))
            })
            .collect()
    };
    let topo = match family {
        "torus" => mesh_or_torus(&nums('x')?, true)?,
        "mesh" => mesh_or_torus(&nums('x')?, false)?,
        "kary" => match nums(',')?[..] {
            [k, n] => kary_ntree(k, n)?,
            _ => bail!("topology `{spec}`: kary takes k,n"),
        },
        other => bail!("topology `{spec}`: unknown family `{other}` (torus, mesh, kary)"),
    };
    Ok(topo)
}

/// 95% Wilson score interval of a proportion, in percent.
pub fn wilson95(hits: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 100.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let (n, p) = (n as f64, hits as f64 / n as f64);
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    // Exact at the ends (the formula leaves rounding dust there).
    let lo = if hits == 0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let hi = if hits as f64 == n {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    (100.0 * lo, 100.0 * hi)
}

/// A progress line on stderr, rewritten in place at most every 200 ms.
pub struct Progress {
    label: String,
    started: Instant,
    last: Mutex<Instant>,
    enabled: bool,
}

impl Progress {
    pub fn new(label: impl Into<String>, enabled: bool) -> Self {
        Progress {
            label: label.into(),
            started: Instant::now(),
            last: Mutex::new(Instant::now()),
            enabled,
        }
    }
    pub fn update(&self, done: u64, total: u64) {
        if !self.enabled {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if done < total && last.elapsed().as_millis() < 200 {
            return;
        }
        *last = Instant::now();
        let pct = 100.0 * done as f64 / total.max(1) as f64;
        let secs = self.started.elapsed().as_secs_f64();
        let eta = if done > 0 {
            secs * (total - done.min(total)) as f64 / done as f64
        } else {
            0.0
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r{}: {done}/{total} ({pct:.1}%) {secs:.0}s, eta {eta:.0}s   ",
            self.label
        );
        let _ = err.flush();
    }
    pub fn finish(&self) {
        if self.enabled {
            eprintln!();
        }
    }
}

/// What a fat-tree mechanism is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TreeMechanism {
    Dlr(DlrVariant),
    Reroute,
    Ft2ei(usize),
}

fn parse_tree_mechanism(m: &str) -> Result<TreeMechanism> {
    Ok(match m {
        "dlr" => TreeMechanism::Dlr(DlrVariant::Deterministic),
        "dlr-adaptive" => TreeMechanism::Dlr(DlrVariant::Adaptive),
        "reroute" => TreeMechanism::Reroute,
        "ft2ei" => TreeMechanism::Ft2ei(1),
        _ => match m.strip_prefix("ft2ei:") {
            Some(n) => TreeMechanism::Ft2ei(
                n.parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .with_context(|| format!("mechanism `{m}`: EIs must be a positive number"))?,
            ),
            None => bail!(
                "mechanism `{m}` does not apply to a fat-tree (dlr, dlr-adaptive, reroute, ft2ei[:EIs])"
            ),
        },
    })
}

/// The registered spelling of an intermediate-node mechanism set.
fn intermediate_name(m: Mechanisms) -> String {
    flitnet_core::mechanism::variants()
        .find(|v| Mechanisms::of_variant(v) == Some(m))
        .map_or_else(|| m.to_string(), |v| v.name.to_string())
}

/// Every registered intermediate-node mechanism's spelling.
fn intermediate_names() -> Vec<&'static str> {
    flitnet_core::mechanism::variants()
        .filter(|v| Mechanisms::of_variant(v).is_some())
        .map(|v| v.name)
        .collect()
}

/// Runs the analysis described by `args`; `progress` reports on stderr.
pub fn analyze(args: &AnalyzeFaultsArgs) -> Result<FaultAnalysis> {
    let topo = load_topology(&args.topo)?;
    let started = Instant::now();
    let progress = Progress::new(
        format!("{} f={} {}", args.mechanism, args.faults, topo.name),
        !args.quiet,
    );
    let mut out = match &topo.family {
        Family::Mesh { .. } | Family::Torus { .. } => analyze_direct(&topo, args, &progress)?,
        Family::KaryNTree { k, n } => analyze_tree(&topo, *k, *n, args, &progress)?,
        other => bail!(
            "topology `{}` is a {other:?}; analyze faults handles meshes, tori and k-ary n-trees",
            topo.name
        ),
    };
    progress.finish();
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

fn analyze_direct(
    topo: &Topology,
    args: &AnalyzeFaultsArgs,
    progress: &Progress,
) -> Result<FaultAnalysis> {
    let mechs: Vec<Mechanisms> = if args.mechanism == "table2" {
        Mechanisms::table2_columns().to_vec()
    } else {
        args.mechanism
            .split(',')
            .map(|l| {
                let l = l.trim();
                crate::mechanism::Mechanism::parse(l)
                    .ok()
                    .and_then(|m| m.intermediate())
                    .with_context(|| {
                        format!(
                            "mechanism `{l}` is not an intermediate-node mechanism ({})",
                            intermediate_names().join(", ")
                        )
                    })
            })
            .collect::<Result<_>>()?
    };
    let labels: Vec<String> = mechs.iter().map(|m| intermediate_name(*m)).collect();
    let mode = match args.mode {
        Mode::Exhaustive => FaultMode::Exhaustive,
        // Every node of a torus is alike; in a mesh, the centre-most host.
        Mode::Distance1 => FaultMode::DistanceOne {
            centre: centre_host(topo),
        },
        Mode::Sampled => FaultMode::Sampled {
            samples: args.samples,
            seed: args.seed,
        },
    };
    let options = AnalysisOptions {
        threads: args.threads.max(1),
        mechanism_split: false,
    };
    let rows = tolerance_table(topo, &mechs, args.faults, mode, &options, &|d, t| {
        progress.update(d, t)
    })
    .with_context(|| format!("analysing {}", topo.name))?;
    let results = labels
        .iter()
        .zip(&rows.rows)
        .map(|(label, r)| MechanismResult {
            mechanism: label.clone(),
            not_tolerated: r.not_tolerated,
            not_tolerated_percent: rows.not_tolerated_percent(r),
            ci95_percent: (args.mode == Mode::Sampled)
                .then(|| wilson95(r.not_tolerated, rows.combinations)),
        })
        .collect();
    Ok(FaultAnalysis {
        topology: topo.name.clone(),
        faults: args.faults,
        mode: args.mode,
        candidate_links: rows.candidate_links,
        combinations: rows.combinations,
        results,
        seconds: 0.0,
    })
}

/// The host on the switch whose coordinates are nearest the middle (in a
/// torus every node is alike).
fn centre_host(topo: &Topology) -> u32 {
    let best = topo
        .switches
        .iter()
        .min_by_key(|s| {
            s.coords
                .as_ref()
                .map_or(u32::MAX, |c| c.iter().map(|&x| x.abs_diff(1)).sum::<u32>())
        })
        .map(|s| s.id);
    topo.hosts
        .iter()
        .find(|h| {
            topo.peer(PortRef::host(h.id, 0))
                .is_some_and(|p| best.is_some_and(|b| p.node == NodeRef::Switch(b)))
        })
        .map_or(0, |h| h.id)
}

fn analyze_tree(
    topo: &Topology,
    k: u32,
    n: u32,
    args: &AnalyzeFaultsArgs,
    progress: &Progress,
) -> Result<FaultAnalysis> {
    if args.mode == Mode::Distance1 {
        bail!("distance-1 mode is defined for meshes and tori only (the intermediate-nodes paper, §2)");
    }
    let labels: Vec<&str> = args.mechanism.split(',').map(str::trim).collect();
    let mechs = labels
        .iter()
        .map(|m| parse_tree_mechanism(m))
        .collect::<Result<Vec<_>>>()?;
    let directed = mechs.iter().any(|m| matches!(m, TreeMechanism::Ft2ei(_)));
    if directed && mechs.len() > 1 {
        bail!("ft2ei counts directed link faults; analyse it on its own");
    }
    let tree_links = switch_links(topo);
    let tree = KaryTree { k, n };
    let directed_faults = directed_links(&tree);
    let universe = if directed {
        directed_faults.len()
    } else {
        tree_links.len()
    };
    if args.faults > universe {
        bail!(
            "{} faults requested but {} has only {universe} candidate links",
            args.faults,
            topo.name
        );
    }
    let plan = Plan::new(universe, args.faults, args.mode, args.samples, args.seed)?;
    let mk = || -> Result<Evaluator<'_>> {
        let mut dlr: Vec<Option<Sweeper>> = Vec::new();
        for m in &mechs {
            dlr.push(match m {
                TreeMechanism::Dlr(v) => Some(Sweeper::new(
                    topo,
                    DlrConfig::new(k, n, *v, DlrFaults::Link),
                )?),
                _ => None,
            });
        }
        let mut count = 0u64;
        let updown = UpDown::new(topo);
        let links = &tree_links;
        let dfaults = &directed_faults;
        let mechs = &mechs;
        Ok(Box::new(move |combo: &[usize]| {
            count += 1;
            let mut out = Vec::with_capacity(mechs.len());
            // ft2ei indexes directed links and is analysed alone.
            let faults = if directed {
                FaultSet::none()
            } else {
                FaultSet::with_links(combo.iter().map(|&i| links[i]))
            };
            for (m, sweeper) in mechs.iter().zip(dlr.iter_mut()) {
                out.push(match m {
                    TreeMechanism::Dlr(_) => sweeper
                        .as_mut()
                        .expect("built for dlr")
                        .all_delivered(&faults, count * 1_000_000_000)?,
                    TreeMechanism::Reroute => updown.all_pairs(topo, &faults),
                    TreeMechanism::Ft2ei(eis) => {
                        let set: Vec<_> = combo.iter().map(|&i| dfaults[i]).collect();
                        ft2ei::evaluate(tree, Ft2eiConfig::thesis(*eis), &set).is_ok()
                    }
                });
            }
            Ok(out)
        }))
    };
    let not_tolerated = plan.run(mechs.len(), args.threads, mk, progress)?;
    let results = labels
        .iter()
        .zip(not_tolerated)
        .map(|(label, bad)| MechanismResult {
            mechanism: label.to_string(),
            not_tolerated: bad,
            not_tolerated_percent: 100.0 * bad as f64 / plan.total.max(1) as f64,
            ci95_percent: (args.mode == Mode::Sampled).then(|| wilson95(bad, plan.total)),
        })
        .collect();
    Ok(FaultAnalysis {
        topology: topo.name.clone(),
        faults: args.faults,
        mode: args.mode,
        candidate_links: universe,
        combinations: plan.total,
        results,
        seconds: 0.0,
    })
}

/// Up*/down* reachability over the surviving links of a leveled tree: the
/// graph-sense connectivity a reconfiguring subnet manager can restore with
/// (possibly non-minimal) up*/down* routes (seed 002 §6.4).
struct UpDown {
    /// Switches, lowest level first.
    order: Vec<u32>,
    /// Per switch port: (link, far end, far end is higher).
    ports: Vec<Vec<Option<(LinkId, NodeRef, bool)>>>,
    leaves_with_hosts: Vec<u32>,
}

impl UpDown {
    fn new(topo: &Topology) -> Self {
        let level = |s: u32| topo.switches[s as usize].level.unwrap_or(0);
        let mut order: Vec<u32> = (0..topo.num_switches() as u32).collect();
        order.sort_by_key(|&s| level(s));
        let ports = topo
            .switches
            .iter()
            .map(|sw| {
                (0..sw.ports.len())
                    .map(|p| {
                        let here = PortRef::switch(sw.id, p as u16);
                        let far = topo.peer(here)?.node;
                        let up = matches!(far, NodeRef::Switch(u) if level(u) > level(sw.id));
                        Some((topo.link_at(here)?, far, up))
                    })
                    .collect()
            })
            .collect::<Vec<Vec<_>>>();
        let leaves_with_hosts = (0..topo.num_switches() as u32)
            .filter(|&s| {
                ports[s as usize]
                    .iter()
                    .any(|p| matches!(p, Some((_, NodeRef::Host(_), _))))
            })
            .collect();
        UpDown {
            order,
            ports,
            leaves_with_hosts,
        }
    }

    /// Every host reaches every other host by going up, then down.
    fn all_pairs(&self, topo: &Topology, faults: &FaultSet) -> bool {
        let hosts = topo.num_hosts();
        let alive = |l: LinkId| faults.link_alive(topo, l);
        // Hosts reachable from each switch going down only.
        let mut below = vec![vec![false; hosts]; topo.num_switches()];
        for &s in &self.order {
            let mut acc = vec![false; hosts];
            for (l, far, up) in self.ports[s as usize].iter().flatten() {
                if *up || !alive(*l) {
                    continue;
                }
                match far {
                    NodeRef::Host(h) => acc[*h as usize] = true,
                    NodeRef::Switch(c) => {
                        for (a, b) in acc.iter_mut().zip(&below[*c as usize]) {
                            *a |= *b;
                        }
                    }
                }
            }
            below[s as usize] = acc;
        }
        self.leaves_with_hosts.iter().all(|&leaf| {
            // Switches reachable going up only; their down sets are reachable.
            let mut reach = vec![false; hosts];
            let mut seen = vec![false; topo.num_switches()];
            let mut stack = vec![leaf];
            seen[leaf as usize] = true;
            while let Some(s) = stack.pop() {
                for (r, b) in reach.iter_mut().zip(&below[s as usize]) {
                    *r |= *b;
                }
                for (l, far, up) in self.ports[s as usize].iter().flatten() {
                    if let (true, NodeRef::Switch(u)) = (*up && alive(*l), far) {
                        if !seen[*u as usize] {
                            seen[*u as usize] = true;
                            stack.push(*u);
                        }
                    }
                }
            }
            // A leaf's own hosts may be cut off by a host-link fault; those
            // are not switch-link faults, so every host must be reachable.
            reach.iter().all(|&r| r)
        })
    }
}

/// One thread's verdicts on a fault combination (one bool per mechanism:
/// tolerated).
type Evaluator<'a> = Box<dyn FnMut(&[usize]) -> Result<Vec<bool>> + 'a>;

/// Which combinations to evaluate, and the parallel driver.
struct Plan {
    universe: usize,
    faults: usize,
    total: u64,
    sampled: Option<u64>,
}

/// Combinations per chunk of work.
const CHUNK: u64 = 1024;

impl Plan {
    fn new(universe: usize, faults: usize, mode: Mode, samples: u64, seed: u64) -> Result<Self> {
        let (total, sampled) = match mode {
            Mode::Sampled => {
                if samples == 0 {
                    bail!("--samples must be at least 1");
                }
                (samples, Some(seed))
            }
            _ => (
                binomial(universe as u64, faults as u64)
                    .filter(|&c| c <= 1_000_000_000)
                    .with_context(|| {
                        format!(
                            "C({universe}, {faults}) combinations is too many; use --mode sampled"
                        )
                    })?,
                None,
            ),
        };
        Ok(Plan {
            universe,
            faults,
            total,
            sampled,
        })
    }

    /// Runs `make()`'s evaluator on every planned combination over
    /// `threads` threads; returns per-mechanism counts of non-tolerated ones.
    fn run<'a, F>(
        &self,
        mechanisms: usize,
        threads: usize,
        make: F,
        progress: &Progress,
    ) -> Result<Vec<u64>>
    where
        F: Fn() -> Result<Evaluator<'a>> + Sync,
    {
        let chunks = self.total.div_ceil(CHUNK);
        let next = AtomicU64::new(0);
        let done = AtomicU64::new(0);
        let merged: Mutex<Result<Vec<u64>>> = Mutex::new(Ok(vec![0; mechanisms]));
        std::thread::scope(|scope| {
            for _ in 0..threads.max(1) {
                scope.spawn(|| {
                    let result = (|| -> Result<Vec<u64>> {
                        let mut eval = make()?;
                        let mut bad = vec![0u64; mechanisms];
                        let mut combo = vec![0usize; self.faults];
                        loop {
                            let c = next.fetch_add(1, Ordering::Relaxed);
                            if c >= chunks {
                                return Ok(bad);
                            }
                            let (start, end) = (c * CHUNK, ((c + 1) * CHUNK).min(self.total));
                            let mut rng = self.sampled.map(|seed| {
                                let mut r = ChaCha8Rng::seed_from_u64(seed);
                                r.set_stream(c);
                                r
                            });
                            if rng.is_none() {
                                unrank(start, self.universe, &mut combo);
                            }
                            for r in start..end {
                                if let Some(rng) = rng.as_mut() {
                                    let mut idx =
                                        rand::seq::index::sample(rng, self.universe, self.faults)
                                            .into_vec();
                                    idx.sort_unstable();
                                    combo.copy_from_slice(&idx);
                                } else if r > start {
                                    next_combination(&mut combo, self.universe);
                                }
                                for (b, ok) in bad.iter_mut().zip(eval(&combo)?) {
                                    *b += u64::from(!ok);
                                }
                            }
                            let d = done.fetch_add(end - start, Ordering::Relaxed) + end - start;
                            progress.update(d, self.total);
                        }
                    })();
                    let mut m = merged.lock().unwrap_or_else(|e| e.into_inner());
                    match (&mut *m, result) {
                        (Ok(acc), Ok(bad)) => acc.iter_mut().zip(bad).for_each(|(a, b)| *a += b),
                        (Ok(_), Err(e)) => *m = Err(e),
                        (Err(_), _) => {}
                    }
                });
            }
        });
        merged.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `rank`-th k-combination of 0..m in lexicographic order.
fn unrank(mut rank: u64, m: usize, out: &mut [usize]) {
    let k = out.len();
    let mut next = 0usize;
    for (i, slot) in out.iter_mut().enumerate() {
        loop {
            let rest = binomial((m - next - 1) as u64, (k - i - 1) as u64).unwrap_or(u64::MAX);
            if rank < rest {
                break;
            }
            rank -= rest;
            next += 1;
        }
        *slot = next;
        next += 1;
    }
}

/// Advances to the next k-combination of 0..m in lexicographic order.
fn next_combination(c: &mut [usize], m: usize) {
    let k = c.len();
    if let Some(i) = (0..k).rev().find(|&i| c[i] < m - k + i) {
        c[i] += 1;
        for j in i + 1..k {
            c[j] = c[j - 1] + 1;
        }
    }
}

/// Prints `a` as text.
pub fn render(a: &FaultAnalysis) -> String {
    let mut s = format!(
        "{}: {} fault(s), {:?}, {} candidate links, {} combinations, {:.2}s\n",
        a.topology, a.faults, a.mode, a.candidate_links, a.combinations, a.seconds
    );
    for r in &a.results {
        s += &format!(
            "  {:>14}: {:>10} not tolerated = {:.5}%",
            r.mechanism, r.not_tolerated, r.not_tolerated_percent
        );
        if let Some((lo, hi)) = r.ci95_percent {
            s += &format!("  (95% CI {lo:.4}%..{hi:.4}%)");
        }
        s += "\n";
    }
    s
}

/// `flitctl analyze faults`.
pub fn run(args: AnalyzeFaultsArgs) -> Result<()> {
    let a = analyze(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&a)?);
    } else {
        print!("{}", render(&a));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unrank_matches_the_enumeration() {
        let mut c = vec![0, 1, 2];
        for r in 0..binomial(7, 3).unwrap() {
            let mut u = vec![0; 3];
            unrank(r, 7, &mut u);
            assert_eq!(u, c, "rank {r}");
            next_combination(&mut c, 7);
        }
    }

    #[test]
    fn wilson_interval_brackets_the_estimate() {
        let (lo, hi) = wilson95(50, 1000);
        assert!(lo < 5.0 && 5.0 < hi && lo > 3.5 && hi < 6.6, "{lo} {hi}");
        assert_eq!(wilson95(0, 100).0, 0.0);
    }
}
