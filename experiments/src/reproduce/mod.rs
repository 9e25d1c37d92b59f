//! `flitctl reproduce`: re-runs the papers' static experiments and sets our
//! numbers beside the papers' (docs/reproduction.md is this command's output).
//! Seed 003's comparison of SBRP-0/1/2 is not static: it brings fabrics of
//! real `switchd`/`hostd` processes up (the `flitctl up` code) and kills a
//! link under traffic.
//!
//! Every paper figure below is a constant quoted with its source (the seed's
//! digest section in ../shared/spec); every "ours" is computed here, by
//! the same code `flitctl analyze faults` and the routing engines use. A row
//! is a [`Verdict::Match`] only when our number prints as the paper's at the
//! paper's precision (exact targets) or the paper's claim holds (trends).
//! Seed 003's latency orderings are measured on a few dozen messages: each
//! pair the paper orders is tested with a 95 % Welch interval of the
//! difference of the means, and a cell whose intervals neither confirm nor
//! reverse the paper's order is [`Verdict::Inconclusive`].

mod sbrp_sim;
mod section;

pub use section::{line, Line, Section, Verdict};

use crate::analysis::dlr_connectivity::{connectivity_curve, Row as CurveRow};
use crate::stats::t975;
use anyhow::{Context, Result};
use clap::Args;
use flitctl::analyze_faults::{analyze, AnalyzeFaultsArgs, FaultAnalysis, Mode};
use flitctl::analyze_faults::{tolerance_table, AnalysisOptions, FaultMode};
use flitnet_core::host::histogram::Moments;
use flitnet_core::mechanism::intermediate::{MechanismUse, Mechanisms};
use flitnet_core::routing::gxmodk::{gdmodk, gsmodk};
use flitnet_core::routing::interval::MemoryModel;
use flitnet_core::routing::metrics::{
    memory_per_switch, mu_flows, mu_rp, mu_sp, path_stats, TableRouter,
};
use flitnet_core::routing::registry::engine;
use flitnet_core::routing::smodk::SmodkRouter;
use flitnet_core::topology::generators::{kary_ntree, mesh_or_torus, pgft};
use flitnet_core::topology::{FaultSet, HostId, HostKind, PgftParams, Topology};
use flitnet_runtime::clock::Dilation;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug, Clone)]
pub struct ReproduceArgs {
    /// Small versions of every experiment (seconds, not an hour).
    #[arg(long)]
    pub quick: bool,
    /// Write the Markdown report here (e.g. docs/reproduction.md).
    #[arg(long)]
    pub write: Option<PathBuf>,
    /// Print the report as JSON instead of Markdown.
    #[arg(long)]
    pub json: bool,
    /// Worker threads for the fault analyses.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Only these sections (comma-separated ids: 004-table2, 004-table3,
    /// 002-connectivity, 000-ft2ei, 001-routing, 003-sbrp, 003-sbrp-sim).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Largest fault count of the Table 2 distance-1 rows to run (5 to 8;
    /// 7 and 8 enumerate 4.3M and 13.9M combinations × 10 variants, minutes
    /// of CPU in release).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(5..=8))]
    pub distance1_faults: u32,
    /// Time dilation of seed 003's real-process runs (docs/fidelity.md):
    /// `auto` calibrates on each topology's first run, and every later run
    /// on that topology takes the same factor (paired runs share it); or a
    /// whole factor for every run.
    #[arg(long, default_value = "auto", value_name = "N|auto")]
    pub time_dilation: Dilation,
    /// Seed 003's real-process runs per cell in local-rerouting mode (1 to
    /// 24): run r kills router pair r mod 6 under traffic seed r / 6 + 1.
    /// Default 12 (every pair under seeds 1 and 2); 1 with `--quick`. The
    /// ordering's intervals are over runs, so fewer runs widen them.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=24))]
    pub sbrp_local_runs: Option<u32>,
    /// Seed 003's runs per cell in controller re-routing mode, under traffic
    /// seeds 1 to N; 0 leaves that mode out. Default 4; 0 with `--quick`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=16))]
    pub sbrp_controller_runs: Option<u32>,
    /// Keepalive dead-after of seed 003's local-rerouting runs. The senders
    /// hold every message 2 × this + 0.5 s, and each run drains until they
    /// let go, so it sets most of a run's length; the neighbours of a killed
    /// router are told at once, so it decides no detection.
    #[arg(long, default_value = "3s", value_parser = flitctl::parse::parse_duration)]
    pub sbrp_dead_after: std::time::Duration,
}

/// How many runs seed 003 makes and how long each lasts
/// (`--sbrp-local-runs`, `--sbrp-controller-runs`, `--sbrp-dead-after`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sbrp003Runs {
    /// Runs per cell in local-rerouting mode.
    pub local: u32,
    /// Runs per cell in controller re-routing mode (0: mode left out).
    pub controller: u32,
    /// Keepalive dead-after of the local-rerouting runs.
    pub dead_after: std::time::Duration,
}

impl Sbrp003Runs {
    /// The full section's runs.
    pub const FULL: Sbrp003Runs = Sbrp003Runs {
        local: 12,
        controller: 4,
        dead_after: std::time::Duration::from_secs(3),
    };
    /// `--quick`'s: one local run per cell, no controller mode.
    pub const QUICK: Sbrp003Runs = Sbrp003Runs {
        local: 1,
        controller: 0,
        dead_after: std::time::Duration::from_secs(3),
    };

    /// The runs of `a`: its options over the defaults of its mode.
    pub fn of(a: &ReproduceArgs) -> Sbrp003Runs {
        let base = if a.quick { Self::QUICK } else { Self::FULL };
        Sbrp003Runs {
            local: a.sbrp_local_runs.unwrap_or(base.local),
            controller: a.sbrp_controller_runs.unwrap_or(base.controller),
            dead_after: a.sbrp_dead_after,
        }
    }
}

/// Section ids, in report order.
pub const SECTIONS: [&str; 7] = [
    "004-table2",
    "004-table3",
    "002-connectivity",
    "000-ft2ei",
    "001-routing",
    "003-sbrp",
    sbrp_sim::ID,
];

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub quick: bool,
    /// The arguments the report was made with, as a user would type them
    /// after `flitctl reproduce` (set by [`run`]; empty for the defaults).
    pub args: String,
    pub sections: Vec<Section>,
    pub seconds: f64,
}

impl Report {
    /// The line of section `id` whose `what` starts with `what`.
    pub fn line(&self, id: &str, what: &str) -> Option<&Line> {
        self.sections
            .iter()
            .find(|s| s.id == id)?
            .lines
            .iter()
            .find(|l| l.what.starts_with(what))
    }
}

/// True when `pct` prints as `printed` at the printed precision ("0" and
/// "100" are exact claims).
pub fn prints_as(pct: f64, printed: &str) -> bool {
    match printed {
        "0" => pct == 0.0,
        "100" => pct == 100.0,
        _ => {
            let decimals = printed.split('.').nth(1).map_or(0, str::len);
            let want: f64 = printed.parse().unwrap_or(f64::NAN);
            (pct - want).abs() <= 0.5 * 10f64.powi(-(decimals as i32)) + 1e-9
        }
    }
}

/// `pct` at the precision of `printed`.
fn like(pct: f64, printed: &str) -> String {
    let decimals = printed.split('.').nth(1).map_or(0, str::len);
    if pct == 0.0 || pct == 100.0 {
        format!("{pct:.0}")
    } else {
        format!("{pct:.*}", decimals.max(2))
    }
}

fn args(
    topo: &str,
    mech: &str,
    faults: usize,
    mode: Mode,
    samples: u64,
    threads: usize,
) -> AnalyzeFaultsArgs {
    AnalyzeFaultsArgs {
        topo: topo.into(),
        mechanism: mech.into(),
        faults,
        mode,
        samples,
        seed: 2006,
        threads,
        json: false,
        quiet: false,
    }
}

fn command_of(a: &AnalyzeFaultsArgs) -> String {
    let mode = match a.mode {
        Mode::Exhaustive => "exhaustive".to_string(),
        Mode::Distance1 => "distance1".to_string(),
        Mode::Sampled => format!("sampled --samples {} --seed {}", a.samples, a.seed),
    };
    format!(
        "flitctl analyze faults {} --mechanism {} --faults {} --mode {mode}",
        a.topo, a.mechanism, a.faults
    )
}

// ---------------------------------------------------------------- seed 004

/// Seed 004 Table 2, digest §6.1: (faults, combinations, cells). The
/// 1-fault row is not printed; it is implied by "I is 1-fault-tolerant" and
/// "D alone is useless" (§6.1 "Paper's reading").
const T2_EXHAUSTIVE: [(usize, u64, [&str; 10]); 4] = [
    (1, 81, ["100", "0", "0", "0", "0", "0", "0", "0", "0", "0"]),
    (
        2,
        3_240,
        ["100", "2.5", "0", "0", "0", "0", "0", "0", "0", "0"],
    ),
    (
        3,
        85_320,
        ["100", "7.44", "0", "0", "0", "0", "0", "0", "0", "0"],
    ),
    (
        4,
        1_663_740,
        ["100", "14.67", "0.95", "0.84", "0", "0", "0", "0", "0", "0"],
    ),
];

/// Table 2's distance-1 rows (digest §6.1).
const T2_DISTANCE1: [(usize, u64, [&str; 10]); 4] = [
    (
        5,
        237_336,
        ["100", "38.16", "8.47", "7.09", "0", "0", "0", "0", "0", "0"],
    ),
    (
        6,
        1_107_568,
        [
            "100", "54.52", "20.39", "17.29", "0.057", "0", "0", "0.01", "0", "0",
        ],
    ),
    (
        7,
        4_272_048,
        [
            "100", "70.31", "36.95", "31.96", "0.35", "0", "0", "0.06", "0", "0",
        ],
    ),
    (
        8,
        13_884_156,
        [
            "100", "83.30", "55.33", "49", "1.25", "0.0006", "0.0004", "0.31", "0", "0",
        ],
    ),
];

/// Table 2's statistical rows ("error < 1%", digest §6.1; the 8-fault M /
/// D+M reading is the digest's).
const T2_STATISTICAL: [(usize, [&str; 10]); 5] = [
    (
        6,
        [
            "100", "35.46", "11.22", "8.11", "0", "0", "0", "0", "0", "0",
        ],
    ),
    (
        8,
        [
            "100", "62.98", "41.04", "37.60", "0", "0", "0", "0", "0", "0",
        ],
    ),
    (
        10,
        [
            "100", "87.40", "70.29", "69.71", "0.48", "0", "0", "0.09", "0", "0",
        ],
    ),
    (
        12,
        [
            "100", "98.05", "91.69", "90.12", "2.79", "0", "0", "0.52", "0", "0",
        ],
    ),
    (
        14,
        [
            "100", "99.88", "98.86", "98.17", "8.47", "0", "0", "2.13", "0", "0",
        ],
    ),
];

fn t2_line(
    label: String,
    a: &FaultAnalysis,
    paper_combos: Option<u64>,
    cells: &[&str; 10],
    statistical: bool,
) -> Line {
    let mut bad = Vec::new();
    let mut ours = Vec::new();
    for (r, printed) in a.results.iter().zip(cells) {
        ours.push(like(r.not_tolerated_percent, printed));
        let ok = if statistical {
            // "error < 1%": the paper's value within our 95% interval
            // widened by one point.
            let want: f64 = printed.parse().unwrap_or(f64::NAN);
            let (lo, hi) = r
                .ci95_percent
                .unwrap_or((r.not_tolerated_percent, r.not_tolerated_percent));
            want >= lo - 1.0 && want <= hi + 1.0
        } else {
            prints_as(r.not_tolerated_percent, printed)
        };
        if !ok {
            bad.push(format!(
                "{} {}% vs {printed}%",
                r.mechanism,
                like(r.not_tolerated_percent, printed)
            ));
        }
    }
    let combos_ok = paper_combos.is_none_or(|c| c == a.combinations);
    let paper = match paper_combos {
        Some(c) => format!("{c} combos: {}", cells.join(" / ")),
        None => cells.join(" / "),
    };
    let ours_s = format!("{} combos: {}", a.combinations, ours.join(" / "));
    let mut l = line(label, paper, ours_s).matches(bad.is_empty() && combos_ok);
    if !bad.is_empty() {
        l = l.note(format!("differs: {}", bad.join("; ")));
    }
    l
}

fn seed004_table2(quick: bool, threads: usize, distance1_faults: u32) -> Result<Section> {
    let started = Instant::now();
    let mut lines = Vec::new();
    let max_exhaustive = if quick { 3 } else { 4 };
    for (f, combos, cells) in T2_EXHAUSTIVE.iter().filter(|r| r.0 <= max_exhaustive) {
        let a = args("torus:3x3x3", "table2", *f, Mode::Exhaustive, 0, threads);
        let res = analyze(&a)?;
        lines.push(
            t2_line(
                format!("Exhaustive, {f} fault(s)"),
                &res,
                Some(*combos),
                cells,
                false,
            )
            .cmd(command_of(&a)),
        );
    }
    if !quick {
        for (f, combos, cells) in T2_DISTANCE1
            .iter()
            .filter(|r| r.0 as u32 <= distance1_faults)
        {
            let a = args("torus:3x3x3", "table2", *f, Mode::Distance1, 0, threads);
            let res = analyze(&a)?;
            lines.push(
                t2_line(
                    format!("Distance-1, {f} faults"),
                    &res,
                    Some(*combos),
                    cells,
                    false,
                )
                .cmd(command_of(&a)),
            );
        }
        for (f, combos, cells) in T2_DISTANCE1
            .iter()
            .filter(|r| r.0 as u32 > distance1_faults)
        {
            lines.push(
                line(
                    format!("Distance-1, {f} faults"),
                    format!("{combos} combos: {}", cells.join(" / ")),
                    "not run",
                )
                .verdict(Verdict::NotHere)
                .cmd(format!(
                    "flitctl analyze faults torus:3x3x3 --mechanism table2 --faults {f} --mode distance1"
                ))
                .note(
                    "4.3M / 13.9M combinations × 10 variants did not fit the time budget of the committed run \
                     (about 80 / 260 CPU-seconds in release); run the command, or `flitctl reproduce \
                     --only 004-table2 --distance1-faults 8`",
                ),
            );
        }
    }
    let (stat_rows, samples): (Vec<_>, u64) = if quick {
        (
            T2_STATISTICAL
                .iter()
                .filter(|r| r.0 == 6 || r.0 == 10)
                .collect(),
            2_000,
        )
    } else {
        (T2_STATISTICAL.iter().collect(), 20_000)
    };
    for (f, cells) in stat_rows {
        let a = args("torus:3x3x3", "table2", *f, Mode::Sampled, samples, threads);
        let res = analyze(&a)?;
        lines.push(
            t2_line(format!("Statistical, {f} faults"), &res, None, cells, true)
                .cmd(command_of(&a)),
        );
    }
    Ok(Section {
        id: "004-table2",
        title: "*A Routing Methodology for Achieving Fault Tolerance in Direct Networks*, Table 2: % of link-fault combinations not tolerated, 3×3×3 torus",
        source: "digest `../shared/spec/004-intermediate-nodes-ft.md` §6.1 (Table 2 as rebuilt there); columns D / I / M / D+M / I+D / I+M / I+D+M / I×2 / I×3 / I×2+D",
        lines,
        notes: vec![
            "Exhaustive and distance-1 rows must match at the printed precision (digest §6.1: exact golden targets).".into(),
            "Statistical rows: the paper's sampling procedure is not described (digest §8 item 7); we draw uniform \
             combinations and call a cell matching when the paper's value lies within our 95% interval widened by the \
             paper's stated 1% error. The digest already reports deviations for M at 8 faults, D+M, and I+D at 13–14 faults."
                .into(),
        ],
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn seed004_table3(quick: bool, threads: usize) -> Result<Section> {
    let started = Instant::now();
    let topo = mesh_or_torus(&[3, 3, 3], true)?;
    let u = |i, d, m| MechanismUse {
        intermediates: i,
        deterministic: d,
        misroute: m,
    };
    // (faults, affected, I+D+M's I share, D+M's D share, D+M's M + D+M shares).
    const PAPER: [(usize, &str, &str, &str, &str); 3] = [
        (1, "6.85", "100", "64.08", "36.04"),
        (2, "13.03", "99.70", "62.40", "37.58"),
        (3, "18.60", "99.26", "60.82", "39.15"),
    ];
    let mut lines = Vec::new();
    for (f, affected, i_share, d_share, m_share) in PAPER.iter().filter(|p| !quick || p.0 <= 2) {
        let rows = tolerance_table(
            &topo,
            &[Mechanisms::i_d_m(), Mechanisms::d_m()],
            *f,
            FaultMode::Exhaustive,
            &AnalysisOptions {
                threads,
                mechanism_split: true,
            },
            &|_, _| {},
        )?;
        let ppc = rows.pairs_per_combination;
        let printed: f64 = affected.parse().unwrap_or(f64::NAN);
        let idm = rows.rows[0].split.as_ref().context("split requested")?;
        let dm = rows.rows[1].split.as_ref().context("split requested")?;
        let aff = idm.affected_percent(ppc);
        // The paper truncated 6.8587 to 6.85 and rounded 13.0316 to 13.03
        // (digest §6.2): accept either.
        let truncated = (aff * 100.0).floor() / 100.0;
        let cmd = format!(
            "flitctl reproduce (tolerance_table with mechanism split, {f} exhaustive faults)"
        );
        lines.push(
            line(
                format!("{f} faults: affected pairs"),
                format!("{affected}%"),
                format!("{aff:.4}%"),
            )
            .matches(prints_as(aff, affected) || prints_as(truncated, affected))
            .cmd(cmd.clone()),
        );
        let i = idm.paper_share_percent(u(1, false, false), ppc, printed);
        let i_exact = idm.share_percent(u(1, false, false));
        let want: f64 = i_share.parse().unwrap_or(f64::NAN);
        lines.push(
            line(
                format!("{f} faults: I+D+M, share using one IN"),
                format!("{i_share}%"),
                format!("{i:.2}% (exactly normalised {i_exact:.2}%)"),
            )
            .matches((i - want).abs() <= 0.03 || (i_exact - want).abs() <= 0.03)
            .cmd(cmd.clone()),
        );
        let d = dm.paper_share_percent(u(0, true, false), ppc, printed);
        lines.push(
            line(
                format!("{f} faults: D+M, share using D"),
                format!("{d_share}%"),
                format!("{d:.2}%"),
            )
            .matches((d - d_share.parse::<f64>().unwrap_or(f64::NAN)).abs() <= 0.03)
            .cmd(cmd.clone()),
        );
        let m = dm.paper_share_percent(u(0, false, true), ppc, printed)
            + dm.paper_share_percent(u(0, true, true), ppc, printed);
        lines.push(
            line(format!("{f} faults: D+M, share using M or D+M"), format!("{m_share}%"), format!("{m:.2}%"))
                .matches((m - m_share.parse::<f64>().unwrap_or(f64::NAN)).abs() <= 0.03)
                .cmd(cmd)
                .note("M and D+M summed: their split is not determined by the paper's route choice (digest §3.8)"),
        );
    }
    Ok(Section {
        id: "004-table3",
        title: "*A Routing Methodology for Achieving Fault Tolerance in Direct Networks*, Table 3: affected pairs and the mechanisms they use, 3×3×3 torus, exhaustive",
        source: "digest `../shared/spec/004-intermediate-nodes-ft.md` §6.2 (shares normalised by the printed affected %, as the paper did)",
        lines,
        notes: vec!["A share matches within 0.03 points (the paper's rounding of the affected % it divides by).".into()],
        seconds: started.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------- seed 002

fn curve_cells(r: &CurveRow) -> String {
    format!(
        "DLR {:.3}, ADLR {:.3}, reconfig {:.3}, minimal {:.3}, physical {:.3} ({} sets{})",
        r.p_dlr(),
        r.p_dlr_adaptive(),
        r.p_updown(),
        r.p_minimal(),
        r.p_physical(),
        r.sets,
        if r.exhaustive { ", exhaustive" } else { "" }
    )
}

fn seed002(quick: bool, threads: usize) -> Result<Section> {
    let started = Instant::now();
    let samples = if quick { 30 } else { 500 };
    let mut lines = Vec::new();
    let cmd = |k: u32, n: u32| {
        format!("flitctl reproduce (connectivity_curve({k}, {n}, 10 faults, {samples} samples, seed 2009))")
    };
    let t43 = connectivity_curve(4, 3, 10, samples, 2009)?;
    let all = |r: &CurveRow| r.dlr == r.sets && r.dlr_adaptive == r.sets && r.updown == r.sets;
    lines.push(
        line(
            "4-ary 3-tree, 4 faults",
            "all 500 tested combinations connected, all algorithms",
            curve_cells(&t43[4]),
        )
        .matches(all(&t43[4]))
        .cmd(cmd(4, 3)),
    );
    // "≈97%": 97 within each method's 95% interval, widened by one point
    // for the "≈" (Fig. 11 is read off a plot).
    let r10 = &t43[10];
    let near97 = [r10.dlr, r10.dlr_adaptive, r10.updown].iter().all(|&c| {
        let (lo, hi) = flitctl::analyze_faults::wilson95(c, r10.sets);
        (lo - 1.0..=hi + 1.0).contains(&97.0)
    });
    lines.push(
        line(
            "4-ary 3-tree, 10 faults",
            "≈97% for all three",
            curve_cells(&t43[10]),
        )
        .matches(near97)
        .cmd(cmd(4, 3))
        .note(
            "≈97% read off Fig. 11: matched when 97% lies in each method's 95% interval ±1 point",
        ),
    );
    for r in t43.iter().filter(|r| r.faults != 4 && r.faults != 10) {
        lines.push(
            line(
                format!("4-ary 3-tree, {} faults", r.faults),
                "curve only",
                curve_cells(r),
            )
            .cmd(cmd(4, 3)),
        );
    }
    let t26 = connectivity_curve(2, 6, 10, samples, 2009)?;
    lines.push(
        line(
            "2-ary 6-tree, 2 faults",
            "no algorithm at 100%",
            curve_cells(&t26[2]),
        )
        .matches(t26[2].p_dlr() < 1.0 && t26[2].p_updown() < 1.0 && t26[2].p_minimal() < 1.0)
        .cmd(cmd(2, 6)),
    );
    let sum = |f: fn(&CurveRow) -> u64| t26[2..].iter().map(f).sum::<u64>();
    lines.push(
        line(
            "2-ary 6-tree, 2–10 faults: DDRC vs DLR",
            "DDRC (minimal-path reconfiguration) falls faster than DLR",
            format!(
                "sets connected over 2–10 faults: DLR {}, DDRC {}",
                sum(|r| r.dlr),
                sum(|r| r.minimal)
            ),
        )
        .matches(sum(|r| r.minimal) < sum(|r| r.dlr))
        .cmd(cmd(2, 6)),
    );
    for r in t26.iter().filter(|r| r.faults != 2) {
        lines.push(
            line(
                format!("2-ary 6-tree, {} faults", r.faults),
                "curve only",
                curve_cells(r),
            )
            .cmd(cmd(2, 6)),
        );
    }
    // The k−1 guarantee, exhaustively.
    let guarantee: Vec<(&str, usize)> = if quick {
        vec![("kary:4,3", 1), ("kary:2,6", 1)]
    } else {
        vec![
            ("kary:4,3", 1),
            ("kary:4,3", 2),
            ("kary:4,3", 3),
            ("kary:2,6", 1),
        ]
    };
    for (topo, f) in guarantee {
        let a = args(
            topo,
            "dlr,dlr-adaptive,reroute",
            f,
            Mode::Exhaustive,
            0,
            threads,
        );
        let res = analyze(&a)?;
        let bad: u64 = res.results[..2].iter().map(|r| r.not_tolerated).sum();
        lines.push(
            line(
                format!("k−1 guarantee, {topo}, {f} faults"),
                "every combination of ≤ k−1 link faults tolerated (DLR, ADLR)",
                format!(
                    "{} combinations: DLR {} / ADLR {} / reconfig {} not tolerated",
                    res.combinations,
                    res.results[0].not_tolerated,
                    res.results[1].not_tolerated,
                    res.results[2].not_tolerated
                ),
            )
            .matches(bad == 0)
            .cmd(command_of(&a)),
        );
    }
    Ok(Section {
        id: "002-connectivity",
        title: "*Dynamic Fault Tolerance in Fat Trees*, Fig. 11: probability every pair stays connected beyond k−1 link faults",
        source: "digest `../shared/spec/002-dynamic-ft-fat-trees.md` §6.4 (Fig. 11 prose), §4 (k−1 guarantee)",
        lines,
        notes: vec![
            "DLR / ADLR are walked with the switch's own DlrSwitch logic; reconfig = every pair keeps an up*/down* path \
             (any height); minimal = DDRC's minimal up/down paths (digest §3.10)."
                .into(),
            "Fig. 11's curves are not printed as numbers: only the stated points and trends are compared.".into(),
        ],
        seconds: started.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------- seed 000

fn seed000(quick: bool, threads: usize) -> Result<Section> {
    let started = Instant::now();
    let mut lines = Vec::new();
    let run = |what: String,
               paper: &str,
               topo: &str,
               mech: &str,
               f: usize,
               mode: Mode,
               samples: u64,
               check: &dyn Fn(f64) -> bool,
               note: &str|
     -> Result<Line> {
        let a = args(topo, mech, f, mode, samples, threads);
        let res = analyze(&a)?;
        let r = &res.results[0];
        let ours = format!(
            "{:.2}% ({} of {})",
            r.not_tolerated_percent, r.not_tolerated, res.combinations
        );
        Ok(line(what, paper, ours)
            .matches(check(r.not_tolerated_percent))
            .cmd(command_of(&a))
            .note(note))
    };
    // Tables 3.1/3.2: k−1 tolerated, with 1, 2 and 3 EIs.
    for (k, n) in [(2, 2), (2, 3), (3, 3), (4, 2)] {
        let eis_list: &[usize] = if quick && k == 4 { &[1] } else { &[1, 2, 3] };
        for &eis in eis_list {
            lines.push(run(
                format!(
                    "Table 3.1/3.2, {k}-ary {n}-tree, {} faults, {eis} EI",
                    k - 1
                ),
                "0% (k−1 tolerated)",
                &format!("kary:{k},{n}"),
                &format!("ft2ei:{eis}"),
                k as usize - 1,
                Mode::Exhaustive,
                0,
                &|p| p == 0.0,
                "",
            )?);
        }
    }
    lines.push(run(
        "Table 3.1, 4-ary 3-tree, 3 faults".into(),
        "0%",
        "kary:4,3",
        "ft2ei",
        3,
        Mode::Sampled,
        if quick { 200 } else { 10_000 },
        &|p| p == 0.0,
        "",
    )?);
    // 2-ary 2-tree: none tolerated at 5 faults.
    let max22 = if quick { 2 } else { 5 };
    for f in 2..=max22 {
        if f == 5 {
            lines.push(run(
                format!("Fig 3.13, 2-ary 2-tree, {f} faults"),
                "100% (no combination tolerated)",
                "kary:2,2",
                "ft2ei",
                f,
                Mode::Exhaustive,
                0,
                &|p| p == 100.0,
                "",
            )?);
        } else {
            lines.push(run(
                format!("Fig 3.13, 2-ary 2-tree, {f} faults"),
                "curve only",
                "kary:2,2",
                "ft2ei",
                f,
                Mode::Exhaustive,
                0,
                &|_| true,
                "digest §4.8 replication: 28.57 / 71.43 / 94.29% at 2 / 3 / 4",
            )?);
            if let Some(l) = lines.last_mut() {
                l.verdict = Verdict::OursOnly;
            }
        }
    }
    lines.push(run(
        "Fig 3.13, 2-ary 3-tree, 2 faults".into(),
        "6%",
        "kary:2,3",
        "ft2ei",
        2,
        Mode::Exhaustive,
        0,
        &|p| prints_as(p, "6"),
        "",
    )?);
    if !quick {
        let why = "digest §4.8/§8: the thesis's tool was more conservative than an exact oracle; its 4-ary 3-tree figures are upper bounds";
        lines.push(run(
            "Fig 3.13, 4-ary 3-tree, 4 faults".into(),
            "0.23%",
            "kary:4,3",
            "ft2ei",
            4,
            Mode::Sampled,
            10_000,
            &|p| prints_as(p, "0.23"),
            why,
        )?);
        lines.push(run(
            "§3.5, 4-ary 3-tree, 8 faults".into(),
            "1.95% (98.05% tolerated)",
            "kary:4,3",
            "ft2ei",
            8,
            Mode::Sampled,
            10_000,
            &|p| prints_as(p, "1.95"),
            why,
        )?);
    }
    // §3.7 memory at k = 32.
    const MEMORY: [(u64, [u64; 5]); 4] = [
        (64, [768, 12_672, 1_536, 5_248, 768]),
        (1_024, [16_384, 206_848, 2_560, 6_016, 1_280]),
        (32_768, [688_128, 6_782_976, 3_840, 6_976, 1_920]),
        (1_048_576, [27_262_976, 222_298_112, 5_120, 7_936, 2_560]),
    ];
    for (n, paper) in MEMORY {
        let m = MemoryModel { k: 32, n_hosts: n };
        let ours = [
            m.table_deterministic(),
            m.table_adaptive(),
            m.ft2ei(2),
            m.fir(),
            m.ir(),
        ];
        let fmt = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" / ");
        lines.push(
            line(
                format!("§3.7 memory bits, k=32, N={n} (FTdet / FTadap / FT²EI(2) / FIR / IR)"),
                fmt(&paper),
                fmt(&ours),
            )
            .matches(ours == paper)
            .cmd("flitctl reproduce (MemoryModel)")
            .note("formulas [T]; values computed in the digest [D]"),
        );
    }
    // Interval routing vs installed LFTs on a real tree.
    for (k, n) in [(4, 3), (8, 3)] {
        let topo = kary_ntree(k, n)?;
        let tables = engine("dmodk")?.route(&topo, &FaultSet::none())?;
        let lft = memory_per_switch(&topo, &tables)
            .into_iter()
            .max()
            .unwrap_or(0);
        let m = MemoryModel {
            k: k as u64,
            n_hosts: topo.num_hosts() as u64,
        };
        lines.push(
            line(
                format!("{k}-ary {n}-tree, bits per switch: installed Dmodk LFT vs IR vs FT²EI(2)"),
                "tables ≫ intervals (Fig 3.24)",
                format!("LFT {lft} / IR {} / FT²EI(2) {}", m.ir(), m.ft2ei(2)),
            )
            .matches(lft > m.ft2ei(2))
            .cmd("flitctl reproduce (memory_per_switch of dmodk tables, MemoryModel)"),
        );
    }
    Ok(Section {
        id: "000-ft2ei",
        title: "*Low-Memory Techniques for Routing and Fault-Tolerance on the Fat-Tree Topology*: FT²EI fault tolerance and memory per switch",
        source: "digest `../shared/spec/000-fat-tree-low-memory.md` §6.3 (Tables 3.1/3.2, Fig 3.13), §4.8 (replication notes), §3.7 (memory)",
        lines,
        notes: vec![
            "Faults are directed switch-to-switch links, the thesis's granularity (digest §4.8, §8 #1); applied in \
             increasing link order; tolerated = every pair has an allowed path and no allowed path runs into a fault."
                .into(),
        ],
        seconds: started.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------- seed 001

fn pg(m: &[u32], w: &[u32], p: &[u32]) -> Result<Topology> {
    Ok(pgft(&PgftParams {
        m: m.to_vec(),
        w: w.to_vec(),
        p: p.to_vec(),
    })?)
}

fn seed001(quick: bool) -> Result<Section> {
    let started = Instant::now();
    let mut lines = Vec::new();
    let none = FaultSet::none();
    // G_P: ν and μ^SP under Dmodk.
    let gp = pg(&[4, 2, 4], &[1, 2, 2], &[1, 2, 1])?;
    let t = engine("dmodk")?.route(&gp, &none)?;
    let r = TableRouter::new(&gp, &none, &t);
    let nu = path_stats(&r).nu;
    lines.push(
        line(
            "G_P = PGFT(3;4,2,4;1,2,2;1,2,1), Dmodk: ν",
            "5.35",
            format!("{nu:.4}"),
        )
        .matches(format!("{nu:.2}") == "5.35")
        .cmd("flitctl reproduce (path_stats)"),
    );
    let sp = mu_sp(&r, &gp).0.mu;
    lines.push(
        line("G_P, Dmodk: μ^SP", "2", sp.to_string())
            .matches(sp == 2)
            .cmd("flitctl reproduce (mu_sp)"),
    );
    // G_3 C2IO (§7.2).
    let mut g3 = pg(&[4, 4, 6], &[1, 2, 2], &[1, 1, 1])?;
    for h in &mut g3.hosts {
        if h.id % 4 == 3 {
            h.kind = HostKind::Storage;
        }
    }
    let flows: Vec<(HostId, HostId)> = (0..96u32)
        .filter(|n| n % 4 != 3)
        .map(|n| (n, ((n / 4 + 4) % 24) * 4 + 3))
        .collect();
    let dm = engine("dmodk")?.route(&g3, &none)?;
    let gd = gdmodk(&g3)?;
    let results = [
        (
            "Dmodk",
            "4",
            mu_flows(&TableRouter::new(&g3, &none, &dm), &g3, &flows).mu,
        ),
        (
            "Smodk",
            "4",
            mu_flows(&SmodkRouter::new(&g3)?, &g3, &flows).mu,
        ),
        (
            "Gdmodk",
            "1",
            mu_flows(&TableRouter::new(&g3, &none, &gd), &g3, &flows).mu,
        ),
        ("Gsmodk", "3", mu_flows(&gsmodk(&g3)?, &g3, &flows).mu),
    ];
    for (name, paper, mu) in results {
        lines.push(
            line(
                format!("G_3 = XGFT(3;4,4,6;1,2,2), C2IO, {name}: μ"),
                paper,
                mu.to_string(),
            )
            .matches(paper == mu.to_string())
            .cmd("flitctl reproduce (mu_flows, C2IO)"),
        );
    }
    // Table 2.1 on the 512-node RLFT (the printed G_2 cannot give it, §7.1).
    let rlft = pg(&[16, 32], &[1, 16], &[1, 1])?;
    let rp_runs = if quick { 100 } else { 1000 };
    let engines: &[(&str, &str)] = if quick {
        &[("dmodk", "1")]
    } else {
        &[("dmodk", "1"), ("ftree", "1"), ("minhop", "1")]
    };
    for (name, paper_sp) in engines {
        let began = Instant::now();
        let t = engine(name)?.route(&rlft, &none)?;
        let ms = began.elapsed().as_secs_f64() * 1e3;
        let r = TableRouter::new(&rlft, &none, &t);
        let sp = if quick {
            None
        } else {
            Some(mu_sp(&r, &rlft).0.mu)
        };
        let rp = mu_rp(&r, &rlft, rp_runs, 1);
        let ours = format!(
            "μ^SP {} / μ^RP({rp_runs}) median {} [{}..{}]; routed in {ms:.1} ms",
            sp.map_or("not run".into(), |s| s.to_string()),
            rp.median,
            rp.q1_40,
            rp.q39_40
        );
        let ok = sp.is_none_or(|s| s.to_string() == *paper_sp) && rp.median == 5;
        lines.push(
            line(
                format!("Table 2.1, 512-node RLFT XGFT(2;16,32;1,16), {name}"),
                format!("μ^SP {paper_sp} / μ^RP(1000) median 5"),
                ours,
            )
            .matches(ok)
            .cmd("flitctl reproduce (mu_sp, mu_rp)"),
        );
    }
    if !quick {
        let mut sps = Vec::new();
        for seed in 1..=6u64 {
            let t = flitnet_core::routing::random::random_shortest_path(&rlft, &none, seed);
            sps.push(mu_sp(&TableRouter::new(&rlft, &none, &t), &rlft).0.mu);
        }
        let ok = sps.iter().all(|&s| s > 1);
        lines.push(
            line(
                "Table 2.1, 512-node RLFT, RandSP μ^SP (6 runs)",
                "9,7,7,9,7,8 (poor on shifts)",
                format!("{sps:?}"),
            )
            .matches(ok)
            .cmd("flitctl reproduce (random_shortest_path seeds 1..6, mu_sp)")
            .note("random: the claim (RandSP poor on SP) is compared, not the draws"),
        );
        // Degraded: random link removal, Dmodc vs the OpenSM-style engines.
        let mut rng = ChaCha8Rng::seed_from_u64(2022);
        let switch_links = flitnet_core::mechanism::dlr::walk::switch_links(&rlft);
        let dead: Vec<u32> = sample(&mut rng, switch_links.len(), 32)
            .into_iter()
            .map(|i| switch_links[i])
            .collect();
        let faults = FaultSet::with_links(dead);
        let mut rps = Vec::new();
        for name in ["dmodc", "ftree", "minhop", "updown"] {
            let began = Instant::now();
            let t = engine(name)?.route(&rlft, &faults)?;
            let ms = began.elapsed().as_secs_f64() * 1e3;
            let r = TableRouter::new(&rlft, &faults, &t);
            let sp = mu_sp(&r, &rlft).0;
            let rp = mu_rp(&r, &rlft, 1000, 1);
            let nu = path_stats(&r).nu;
            rps.push((name, rp.median, sp.mu));
            lines.push(line(
                format!("512-node RLFT, 32 random links removed, {name}"),
                "—",
                format!("μ^SP {} / μ^RP(1000) median {} [{}..{}] / ν {nu:.3} / unrouted {}; routed in {ms:.1} ms", sp.mu, rp.median, rp.q1_40, rp.q39_40, sp.unrouted),
            ).cmd("flitctl reproduce (degraded RLFT, seed 2022)"));
        }
        let dmodc = rps[0];
        let best = rps.iter().all(|r| dmodc.1 <= r.1);
        lines.push(
            line("Degraded: Dmodc has the lowest congestion risk", "Dmodc lowest μ across degradation (Figs 4.6/4.7)", format!("μ^RP medians {:?}", rps.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>()))
                .matches(best)
                .cmd("flitctl reproduce (degraded RLFT, seed 2022)")
                .note("one throw on a 512-node stand-in, not the unpublished 8640-node PGFT (digest §7.5, §9)"),
        );
        // Route computation time on the 8640-node PGFT stand-in.
        let path = std::path::Path::new("topologies/pgft-8640.yaml");
        if path.exists() {
            let big = flitctl::topo::load(path)?;
            let began = Instant::now();
            engine("dmodc")?.route(&big, &none)?;
            let ms = began.elapsed().as_secs_f64() * 1e3;
            lines.push(
                line("Dmodc route computation, 8640-node PGFT stand-in", "tens of thousands of nodes in < 1 s", format!("{ms:.0} ms ({} switches)", big.num_switches()))
                    .matches(ms < 1000.0)
                    .cmd("flitctl reproduce (engine dmodc on topologies/pgft-8640.yaml)")
                    .note("digest §7.4: absolute times lost with Fig. 4.5; the ≥15× ratio to OpenSM is not measured here"),
            );
        }
    }
    Ok(Section {
        id: "001-routing",
        title: "*New routing algorithms for heterogeneous exaflop supercomputers*: congestion risk μ / μ^SP / μ^RP, effective distance ν, route computation",
        source: "digest `../shared/spec/001-gliksberg-routing.md` §6.3 (ν on G_P), §7.1 (Table 2.1, 512-node reading), §7.2 (C2IO), §7.4–7.5",
        lines,
        notes: vec![
            "Table 2.1 is compared on XGFT(2;16,32;1,16): its printed values are impossible on the printed 32-node G_2 (digest §7.1, §9 #1).".into(),
        ],
        seconds: started.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------- seed 003

/// The link of `topo` between switches `a` and `b`, named by `a`'s end
/// (`NODE:PORT`, as `flitctl up --kill-link` takes it).
fn link_between(topo: &Topology, a: &str, b: &str) -> Result<String> {
    use flitnet_core::topology::PortRef;
    let na = topo.find_node(a).with_context(|| format!("no node {a}"))?;
    let nb = topo.find_node(b).with_context(|| format!("no node {b}"))?;
    (0..topo.radix(na) as u16)
        .find(|&port| {
            topo.peer(PortRef { node: na, port })
                .is_some_and(|p| p.node == nb)
        })
        .map(|port| format!("{a}:{port}"))
        .with_context(|| format!("{a} and {b} are not neighbours"))
}

/// A partial permutation whose fault-free routes cross the link `a`–`b`
/// (either direction), at most `flows` pairs, as a permutation file text:
/// traffic concentrated on the link that will fail, so every run cuts
/// packets (uniform traffic on 16 to 49 nodes puts a few percent of the
/// load on one link, and a run would often cut nothing).
fn crossing_permutation(topo: &Topology, a: &str, b: &str, flows: usize) -> Result<String> {
    use flitnet_core::routing::metrics::Router;
    use flitnet_core::topology::NodeRef;
    let id = |n: &str| match topo.find_node(n) {
        Some(NodeRef::Switch(s)) => Ok(s),
        _ => anyhow::bail!("no switch {n}"),
    };
    let (sa, sb) = (id(a)?, id(b)?);
    let none = FaultSet::none();
    let tables = flitctl::route::compute_routes(topo, "auto", &none)?;
    let router = TableRouter::new(topo, &none, &tables);
    let crosses = |src: HostId, dst: HostId| {
        router.path(src, dst).is_some_and(|p| {
            p.windows(2).any(|w| {
                (w[0].switch, w[1].switch) == (sa, sb) || (w[0].switch, w[1].switch) == (sb, sa)
            })
        })
    };
    greedy_permutation(topo.num_hosts() as HostId, flows, crosses)
        .with_context(|| format!("no route crosses {a}–{b}"))
}

/// At most `flows` pairs `src dst` (a partial permutation file text) with
/// `wanted(src, dst)`: each source in turn takes the highest destination
/// not yet taken. None when no pair qualifies.
fn greedy_permutation(
    hosts: HostId,
    flows: usize,
    wanted: impl Fn(HostId, HostId) -> bool,
) -> Option<String> {
    let mut used = std::collections::BTreeSet::new();
    let mut text = String::new();
    for src in 0..hosts {
        if used.len() == flows {
            break;
        }
        if let Some(dst) = (0..hosts)
            .rev()
            .find(|&d| d != src && !used.contains(&d) && wanted(src, d))
        {
            used.insert(dst);
            let _ = writeln!(text, "{src} {dst}");
        }
    }
    (!used.is_empty()).then_some(text)
}

/// A partial permutation whose fault-free routes pass *through* one of the
/// switches `bs` (neither starting nor ending at any of them: the thesis
/// sends no message from or to a faulty node, §3.6 #12), at most `flows`
/// pairs, as a permutation file text.
fn transit_permutation(topo: &Topology, bs: &[&str], flows: usize) -> Result<String> {
    use flitnet_core::routing::metrics::Router;
    use flitnet_core::topology::NodeRef;
    let sbs = bs
        .iter()
        .map(|b| match topo.find_node(b) {
            Some(NodeRef::Switch(s)) => Ok(s),
            _ => anyhow::bail!("no switch {b}"),
        })
        .collect::<Result<Vec<_>>>()?;
    let none = FaultSet::none();
    let tables = flitctl::route::compute_routes(topo, "auto", &none)?;
    let router = TableRouter::new(topo, &none, &tables);
    let through = |src: HostId, dst: HostId| {
        router.path(src, dst).is_some_and(|p| {
            p.len() > 2
                && p.first().is_some_and(|h| !sbs.contains(&h.switch))
                && p.last().is_some_and(|h| !sbs.contains(&h.switch))
                && p.iter().any(|h| sbs.contains(&h.switch))
        })
    };
    greedy_permutation(topo.num_hosts() as HostId, flows, through)
        .with_context(|| format!("no route passes through {}", bs.join(", ")))
}

/// One SBRP run's figures.
#[derive(Clone, Debug)]
struct SbrpRun {
    sent: u64,
    lost: u64,
    lost_unreachable: u64,
    /// Messages delivered twice, or damaged.
    duplicates: u64,
    /// Messages delivered after a later one of their flow: SBRP promises
    /// every message whole and once (I1/I2), not an order across messages
    /// (digest §8 item 17); a resent message may arrive after its flow's
    /// next one.
    out_of_order: u64,
    recovered: u64,
    resent_packets: u64,
    resent_flits: u64,
    rrqs: u64,
    /// The recovered messages' latency (ns): count, sum, sum of squares,
    /// pooled over every host (and, summed, over the runs of a cell).
    latency: Moments,
    retained: u64,
}

impl SbrpRun {
    /// Two runs' figures together (latency: both runs' recovered messages
    /// pooled).
    fn plus(&self, o: &SbrpRun) -> SbrpRun {
        let recovered = self.recovered + o.recovered;
        let mut latency = self.latency;
        latency.merge(&o.latency);
        SbrpRun {
            sent: self.sent + o.sent,
            lost: self.lost + o.lost,
            lost_unreachable: self.lost_unreachable + o.lost_unreachable,
            duplicates: self.duplicates + o.duplicates,
            out_of_order: self.out_of_order + o.out_of_order,
            recovered,
            resent_packets: self.resent_packets + o.resent_packets,
            resent_flits: self.resent_flits + o.resent_flits,
            rrqs: self.rrqs + o.rrqs,
            latency,
            retained: self.retained + o.retained,
        }
    }
}

/// How seed 003's faults are handled in one set of rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SbrpFaults {
    /// The thesis's: transient router faults, the neighbours told at once,
    /// the switches routing around on their own (`local-reroute`), no
    /// controller.
    Local,
    /// Ours before: a link killed, the controller re-routing (up*/down*).
    Controller,
}

impl SbrpFaults {
    fn label(self) -> &'static str {
        match self {
            SbrpFaults::Local => "local rerouting",
            SbrpFaults::Controller => "controller re-routing",
        }
    }
}

/// How one real-process run of seed 003 measured: the factor it ran at,
/// its fidelity verdict (docs/fidelity.md) and its wall time.
#[derive(Clone, Debug)]
struct RunFidelity {
    dilation: u32,
    verdict: String,
    wall_s: f64,
    /// The 1-minute load average when the run started.
    load: Option<f64>,
}

/// Runs `cmd` (a `flitctl up` command line, with its `--time-dilation`;
/// `FILE` stands for `perm`) and returns its figures and fidelity.
fn sbrp_up(cmd: &str, perm: &std::path::Path, run_dir: PathBuf) -> Result<(SbrpRun, RunFidelity)> {
    let started = Instant::now();
    let load = load_average().parse().ok();
    let mut argv: Vec<String> = cmd
        .split_whitespace()
        .map(|a| a.replace("FILE", &perm.display().to_string()))
        .collect();
    argv.push("--run-dir".into());
    argv.push(run_dir.display().to_string());
    argv.push("--progress".into());
    argv.push("never".into());
    let up = flitctl::up::UpArgs::from_argv(&argv).with_context(|| cmd.to_string())?;
    let r = flitctl::up::execute(&up)
        .with_context(|| cmd.to_string())?
        .run;
    let fi = r.fidelity.clone().unwrap_or_default();
    let fidelity = RunFidelity {
        dilation: fi.dilation,
        verdict: fi.verdict.map_or("unknown", |v| v.name()).to_string(),
        wall_s: started.elapsed().as_secs_f64(),
        load,
    };
    tracing::info!(
        cmd,
        dilation = fidelity.dilation,
        verdict = fidelity.verdict,
        load = fidelity.load,
        wall_s = fidelity.wall_s,
        "seed 003 run"
    );
    let t = &r.totals;
    let latency = t.recovered_latency_moments_ns;
    anyhow::ensure!(
        latency.count == t.recovered_messages,
        "{cmd}: the hosts report {} recovered messages but latency moments of {} (a hostd older than flitctl? rebuild both)",
        t.recovered_messages,
        latency.count
    );
    let run = SbrpRun {
        sent: t.messages_sent,
        lost: t.messages_lost,
        lost_unreachable: t.lost_unreachable,
        duplicates: t.duplicates + t.corrupted,
        out_of_order: t.out_of_order,
        recovered: t.recovered_messages,
        resent_packets: t.resent_packets,
        resent_flits: t.resent_flits,
        rrqs: t.recover_requests,
        latency,
        retained: t.retained,
    };
    Ok((run, fidelity))
}

/// How many of `runs` each fidelity verdict covers: `12 faithful, 2
/// degraded`.
fn verdict_counts(runs: &[RunFidelity]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for r in runs {
        match counts.iter_mut().find(|(v, _)| *v == r.verdict) {
            Some((_, n)) => *n += 1,
            None => counts.push((&r.verdict, 1)),
        }
    }
    counts
        .iter()
        .map(|(v, n)| format!("{n} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The range of the 1-minute load average over the runs' starts: `3.1–9.8`.
fn load_range(runs: &[RunFidelity]) -> String {
    let loads: Vec<f64> = runs.iter().filter_map(|r| r.load).collect();
    let low = loads.iter().copied().fold(f64::INFINITY, f64::min);
    let high = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if loads.is_empty() {
        "unknown".into()
    } else {
        format!("{low:.1}–{high:.1}")
    }
}

/// The 1-minute load average (`/proc/loadavg`), as printed there.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Seed 003 (digest §6.3 Figs 79–82, §5.7 Table 2, §6.4): SBRP-0/1/2 on
/// real processes. Per topology and message length, each protocol runs the
/// same traffic and the same faults, one packet per message (the thesis
/// does not packetise). Faithful mode (digest §4, §5.1, §3.6 #12–13): two
/// routers on the flows' paths fail per run (SIGKILL, 0.6 s apart), their
/// neighbours are told at once, and the switches route around them on their
/// own (`--engine local-reroute --recovery none`: minimal adaptive, at most
/// one misroute). Full runs add the earlier controller mode (a link killed, the
/// controller re-routing) for comparison. Measured: the mean latency of
/// the messages that needed a resend ("corrupted messages", generation to
/// delivery), the flits resent per resent packet (overhead), and that
/// every message arrived exactly once.
fn seed003(quick: bool, dilation: Dilation, how_many: Sbrp003Runs) -> Result<Section> {
    let started = Instant::now();
    let load_before = load_average();
    // Every run's fidelity, and the factor each topology ran at.
    let mut fidelity: Vec<RunFidelity> = Vec::new();
    let mut factors: Vec<String> = Vec::new();
    // (name, file, routers failed in faithful mode (one per run), link ends
    // for controller mode, load per flow in controller mode).
    let cases: Vec<Sbrp003Case> = vec![
        (
            "4-cube",
            "topologies/hypercube-4.yaml",
            vec![
                ["r05", "r10"],
                ["r06", "r09"],
                ["r03", "r12"],
                ["r01", "r14"],
                ["r02", "r13"],
                ["r04", "r11"],
            ],
            ("r05", "r07"),
            "0.4",
        ),
        (
            "7×7 mesh",
            "topologies/mesh-7x7.yaml",
            vec![
                ["r16", "r32"],
                ["r18", "r30"],
                ["r08", "r40"],
                ["r12", "r36"],
                ["r15", "r33"],
                ["r22", "r26"],
            ],
            ("r24", "r25"),
            "0.2",
        ),
    ];
    let cases = if quick { &cases[..1] } else { &cases[..] };
    // Local run r kills router pair r mod 6 under traffic seed r / 6 + 1:
    // the first runs spread over the fault locations, later ones repeat
    // them under other traffic. The ordering is tested on per-run means,
    // paired across protocols, so the runs are its sample; the controller
    // mode's one link runs under seeds 1 to N.
    let local_runs = how_many.local as usize;
    let pairs_per_cell = local_runs.min(cases[0].2.len());
    let local_seeds: Vec<u64> = (0..local_runs)
        .map(|r| local_run(r, cases[0].2.len()).1)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let controller_seeds: Vec<u64> = (1..=how_many.controller as u64).collect();
    let dead_after = format!("{}ms", how_many.dead_after.as_millis());
    let duration = if quick { "2s" } else { "3s" };
    // One run per cell in quick mode: at the full runs' load a router kill
    // finds no 128-flit worm crossing it in about one run of five (the CI
    // test then has nothing recovered to compare); at 0.4 a flow is
    // mid-message 40 % of the time, and one of up to 8 flows through the
    // router almost surely is.
    let local_load = if quick { QUICK_LOCAL_LOAD } else { LOCAL_LOAD };
    let modes: &[SbrpFaults] = if controller_seeds.is_empty() {
        &[SbrpFaults::Local]
    } else {
        &[SbrpFaults::Local, SbrpFaults::Controller]
    };
    let protocols = ["sbrp0", "sbrp1", "sbrp2"];
    let mut lines = Vec::new();
    // Private (mkdtemp): the daemons read the permutation files in it.
    let dir = flitctl::rundir::create(None, "reproduce-003", true)?.path;
    for &mode in modes {
        for (name, file, routers, (a, b), ctl_load) in cases {
            let path = std::path::Path::new(file);
            let topo = flitctl::topo::load(path)?;
            // `auto` calibrates on this topology's first run; the rest
            // take its factor, so that the protocols' paired runs share it.
            let mut factor = match dilation {
                Dilation::Fixed(n) => Some(n),
                Dilation::Auto => None,
            };
            // Per run: (permutation file, what it is, the fault options).
            let mut setups = Vec::new();
            match mode {
                SbrpFaults::Local => {
                    for r in 0..local_runs {
                        let (p, seed) = local_run(r, routers.len());
                        let pair = &routers[p];
                        let perm = dir.join(format!("through-{}.txt", pair.join("-")));
                        std::fs::write(&perm, transit_permutation(&topo, pair, 8)?)
                            .with_context(|| format!("writing {}", perm.display()))?;
                        let [r1, r2] = pair;
                        setups.push((
                            perm.clone(),
                            format!("<flows through {r1} or {r2}>"),
                            format!(
                                "--engine local-reroute --recovery none --buffer-depth 8 --dead-after {dead_after} --load {local_load} --kill-switch {r1} --kill-switch {r2} --kill-every 600ms --notify-neighbours --kill-at 800ms --seed {seed}"
                            ),
                        ));
                    }
                }
                SbrpFaults::Controller => {
                    let kill = link_between(&topo, a, b)?;
                    let perm = dir.join(format!("{a}-{b}.txt"));
                    std::fs::write(&perm, crossing_permutation(&topo, a, b, 8)?)
                        .with_context(|| format!("writing {}", perm.display()))?;
                    for seed in &controller_seeds {
                        setups.push((
                            perm.clone(),
                            format!("<flows crossing {a}–{b}>"),
                            format!(
                                "--load {ctl_load} --kill-link {kill} --kill-at 1s --seed {seed}"
                            ),
                        ));
                    }
                }
            }
            for ml in [8u32, 128] {
                // Per protocol: its runs in setup order (the same faults,
                // flows and seed at each index for every protocol).
                let mut runs: Vec<Vec<SbrpRun>> = Vec::new();
                let mut totals = Vec::new();
                let mut cell_fidelity: Vec<RunFidelity> = Vec::new();
                for proto in protocols {
                    let mut cmds = Vec::new();
                    let mut each = Vec::new();
                    let mut each_fidelity = Vec::new();
                    for (k, (perm, what_flows, faults)) in setups.iter().enumerate() {
                        let dilated = factor.map_or("auto".to_string(), |n| n.to_string());
                        let cmd = format!(
                            "flitctl up {file} --pattern permutation:FILE --message-flits {ml} --max-packet-flits {ml} --bandwidth 20000 --duration {duration} {faults} --recovery-protocol {proto} --time-dilation {dilated}"
                        );
                        let tag = format!("{}-{ml}-{proto}-{k}", mode.label().replace(' ', "-"));
                        let (run, fi) = sbrp_up(&cmd, perm, dir.join(tag))?;
                        if factor.is_none() {
                            factor = Some(fi.dilation);
                            factors.push(format!("{name} ×{} ({})", fi.dilation, mode.label()));
                        }
                        each.push(run);
                        each_fidelity.push(fi);
                        cmds.push(cmd.replace("FILE", what_flows));
                    }
                    let run = each
                        .iter()
                        .skip(1)
                        .fold(each.first().context("no run")?.clone(), |t, r| t.plus(r));
                    let ok = run.lost == 0 && run.duplicates == 0 && run.retained == 0;
                    let dilations: std::collections::BTreeSet<u32> =
                        each_fidelity.iter().map(|f| f.dilation).collect();
                    let dilations: Vec<String> =
                        dilations.iter().map(|n| format!("×{n}")).collect();
                    let runs_note = format!(
                        "{}dilation {}; fidelity: {}",
                        if setups.len() > 1 {
                            format!("{} runs, summed; ", setups.len())
                        } else {
                            String::new()
                        },
                        dilations.join("/"),
                        verdict_counts(&each_fidelity)
                    );
                    lines.push(
                        line(
                            format!(
                                "{name}, {ml}-flit messages, {} ({})",
                                proto.to_uppercase().replace("SBRP", "SBRP-"),
                                mode.label()
                            ),
                            "I1/I2: every message whole, exactly once",
                            format!(
                                "{} sent, {} lost ({} more to or from a cut-off host), {} duplicated, {} out of order, {} still held by senders at the end; {} recover requests, {} packets / {} flits resent, {} messages recovered, their latency {:.1} ms",
                                run.sent, run.lost, run.lost_unreachable, run.duplicates, run.out_of_order, run.retained, run.rrqs, run.resent_packets, run.resent_flits, run.recovered, run.latency.mean() / 1e6
                            ),
                        )
                        .matches(ok)
                        .cmd(cmds.join(" ; "))
                        .note(runs_note),
                    );
                    totals.push(run);
                    runs.push(each);
                    cell_fidelity.extend(each_fidelity);
                }
                let mut ordering = ordering_line(name, ml, mode, &runs);
                ordering.note = format!(
                    "{}; runs' fidelity: {}",
                    ordering.note,
                    verdict_counts(&cell_fidelity)
                );
                lines.push(ordering);
                fidelity.extend(cell_fidelity);
                lines.extend(overhead_line(name, ml, mode, &totals));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut notes = vec![
        format!(
            "Real switchd/hostd processes on loopback, 20,000 flits/s links, 2 VCs, one packet per message. Local rerouting (the thesis's fault handling, digest §4, §5.1, §3.6 #12–13): per run two routers far apart are SIGKILLed, at 0.8 s and 1.4 s (node faults; they stay dead), and their neighbours are told at once (`--notify-neighbours`: their ports toward the dead router go down at the kill, so keepalive detects nothing here; `--dead-after {dead_after}` sets the senders' hold window, 2 × dead-after + 0.5 s, which every run drains after its traffic, and keeps a daemon starved of CPU from being declared dead by keepalive: undilated on a shared 2-core machine, with 98 processes on the mesh, 1 s was too short); no controller re-routing (`--engine local-reroute --recovery none`: each switch takes a live minimal port, else one misroute; docs/sbrp.md, \"Faithful mode\"). Traffic: up to 8 flows whose fault-free (e-cube / XY) routes pass through one of those routers, none from or to their own hosts (§3.6 #12), load {local_load} per flow, 8-flit buffers (the thesis has 1: Max(C,A) = 16 flits here, so 8-flit messages are resent whole by SBRP-1 too). {} per cell (router pairs {}; run r takes pair r mod {} under traffic seed ⌊r / {}⌋ + 1, seeds {} in all), the same for every protocol; counts summed over them.",
            match local_runs {
                1 => "One run".to_string(),
                n => format!("{n} runs"),
            },
            cases
                .iter()
                .map(|c| format!(
                    "{}: {}",
                    c.0,
                    c.2[..pairs_per_cell]
                        .iter()
                        .map(|p| p.join("+"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .collect::<Vec<_>>()
                .join("; "),
            cases[0].2.len(),
            cases[0].2.len(),
            local_seeds.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
        ),
        "Corrupted-message latency is generation to delivery of the messages that needed a resend; n is how many there were. \"Lost\" is not delivered when the report was taken (the drain waits for the senders' hold windows). Only the dead router's own host is cut off, and no flow starts or ends there.".into(),
        "Latency orderings are tested on runs, not on messages: a run is one fault schedule under one traffic seed, and every protocol runs the same schedules. Each protocol's mean is over its recovered messages (n, pooled), with how many runs recovered any; then, for every pair the paper orders (faster first), the mean over runs of the difference of the two protocols' per-run mean latencies, with its 95 % t interval (m − 1 degrees of freedom, m = the runs in which both recovered a message). Messages recovered after one kill share its timing, so they are not independent samples; runs are. ✔ match: every ordered pair's interval lies below 0 (if a pair were in truth tied or reversed, its interval would lie below 0 by chance at most 2.5 % of the time); ✘ differs: at least one pair's interval lies above 0, the paper's order significantly reversed (by chance at most 2.5 % per pair if the paper's order or a tie were true); ≈ inconclusive otherwise, including a pair with fewer than 2 such runs.".into(),
    ];
    let wall: f64 = fidelity.iter().map(|f| f.wall_s).sum();
    notes.push(format!(
        "Time dilation {} (docs/fidelity.md). Every duration above is emulated time. Fidelity of the {} runs: {}; 1-minute load average {} before the section, {} after, {} at the runs' starts; wall time per run {:.1} s on average ({:.0} s of runs in all).",
        match dilation {
            Dilation::Auto => format!(
                "auto, calibrated on each topology's first run and then fixed for that topology: {}",
                factors.join(", ")
            ),
            Dilation::Fixed(n) => format!("×{n} for every run"),
        },
        fidelity.len(),
        verdict_counts(&fidelity),
        load_before,
        load_average(),
        load_range(&fidelity),
        wall / fidelity.len().max(1) as f64,
        wall
    ));
    if !controller_seeds.is_empty() {
        notes.push(format!("Controller re-routing rows (ours, not the thesis's: its fault handling is local): a link killed once after 1 s, the controller re-routing (up*/down*), 16-flit buffers, load 0.4 per flow on the 4-cube, 0.2 on the mesh, up to 8 flows crossing that link, {} per cell (traffic seeds 1 to {}). There a resend waits for the controller's new tables (a resend sent earlier would be cut again at the dead link), which dominates the latency and varies run to run.", match controller_seeds.len() { 1 => "one run".to_string(), n => format!("{n} runs") }, controller_seeds.len()));
    }
    Ok(Section {
        id: "003-sbrp",
        title: "*Data Recovery in Wormhole Routing Networks in Hypercubes and Meshes*: SBRP-0/1/2 on real processes (corrupted-message latency, resend overhead)",
        source: "digest `../shared/spec/003-sbrp-recovery.md` §6.3 (Figs 79–82), §5.7 (Table 2), §5.3 (duties I1/I2), §4 and §5.1 (local fault handling, node faults)",
        lines,
        notes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// One topology of seed 003: name, file, the router pairs killed in
/// faithful mode (one pair per run), the link ends for controller mode,
/// and the load per flow in controller mode.
type Sbrp003Case = (
    &'static str,
    &'static str,
    Vec<[&'static str; 2]>,
    (&'static str, &'static str),
    &'static str,
);

/// Local-rerouting run `r` of seed 003 with `pairs` router pairs: which
/// pair it kills and under which traffic seed. The first `pairs` runs take
/// every pair once under seed 1, so a short section still spreads over the
/// fault locations; later runs repeat them under seeds 2, 3, …
fn local_run(r: usize, pairs: usize) -> (usize, u64) {
    (r % pairs, (r / pairs) as u64 + 1)
}

/// Offered load per flow in seed 003's faithful mode.
const LOCAL_LOAD: &str = "0.15";

/// [`LOCAL_LOAD`] of `--quick` (one run per cell; see `seed003`).
const QUICK_LOCAL_LOAD: &str = "0.4";

/// The paired comparison of two protocols over the same runs: the mean
/// over runs of mean latency(a) − mean latency(b), counting only the runs
/// in which both recovered a message, with the half-width of its 95 % t
/// interval (m − 1 degrees of freedom; none below 2 such runs) and m.
fn paired(a: &[SbrpRun], b: &[SbrpRun]) -> (f64, Option<f64>, usize) {
    let mut d = Moments::default();
    let mut diffs = Vec::new();
    for (x, y) in a.iter().zip(b) {
        if x.latency.count > 0 && y.latency.count > 0 {
            diffs.push(x.latency.mean() - y.latency.mean());
        }
    }
    // Moments records integers: sum the f64 differences by hand.
    let m = diffs.len();
    if m == 0 {
        return (0.0, None, 0);
    }
    d.count = m as u64;
    d.sum = diffs.iter().sum();
    d.sum_sq = diffs.iter().map(|v| v * v).sum();
    let half = (m >= 2).then(|| t975(m as f64 - 1.0) * (d.variance() / m as f64).sqrt());
    (d.mean(), half, m)
}

/// Where one ordered pair of a latency ordering stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PairOrder {
    /// The first is faster, the 95 % interval of the difference below 0.
    Holds,
    /// The first is slower, the interval above 0.
    Reversed,
    /// The interval holds 0, or a side has under 2 samples.
    Unclear,
}

fn pair_order(d: f64, half: Option<f64>) -> PairOrder {
    match half {
        Some(h) if d + h < 0.0 => PairOrder::Holds,
        Some(h) if d - h > 0.0 => PairOrder::Reversed,
        _ => PairOrder::Unclear,
    }
}

/// The verdict on a claimed order "first < second < …" from each pair's
/// standing: every pair holds → match; one reversed → differs; else
/// inconclusive.
fn ordering_verdict(pairs: &[PairOrder]) -> Verdict {
    if pairs.iter().all(|p| *p == PairOrder::Holds) {
        Verdict::Match
    } else if pairs.contains(&PairOrder::Reversed) {
        Verdict::Differs
    } else {
        Verdict::Inconclusive
    }
}

/// The thesis's latency ordering for corrupted messages (Figs 80 and 82),
/// tested pair by pair on runs ([`paired`]); `runs`: SBRP-0, 1, 2, each
/// protocol's runs in the same order (the same fault schedule and traffic
/// seed at each index).
fn ordering_line(name: &str, ml: u32, mode: SbrpFaults, runs: &[Vec<SbrpRun>]) -> Line {
    let names = ["SBRP-0", "SBRP-1", "SBRP-2"];
    // The paper's order, fastest first, as indices into `runs`.
    let (paper, order) = if ml <= 8 {
        ("SBRP-1 < SBRP-0 < SBRP-2 (Fig. 80, ML 8)", [1, 0, 2])
    } else {
        ("SBRP-1 < SBRP-2 < SBRP-0 (Fig. 82, ML 128)", [1, 2, 0])
    };
    let ms = |x: f64| x / 1e6;
    let pooled = |i: usize| {
        runs[i].iter().fold(Moments::default(), |mut m, r| {
            m.merge(&r.latency);
            m
        })
    };
    let with_any = |i: usize| runs[i].iter().filter(|r| r.latency.count > 0).count();
    let means = order
        .iter()
        .map(|&i| {
            let m = pooled(i);
            let of = format!("{} of {} runs", with_any(i), runs[i].len());
            if m.count == 0 {
                format!("{} — (n=0, {of})", names[i])
            } else {
                format!("{} {:.1} ms (n={}, {of})", names[i], ms(m.mean()), m.count)
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut pairs = Vec::new();
    let mut diffs = Vec::new();
    let mut stats_pairs = Vec::new();
    for (x, &i) in order.iter().enumerate() {
        for &j in &order[x + 1..] {
            let (d, half, m) = paired(&runs[i], &runs[j]);
            let p = pair_order(d, half);
            pairs.push(p);
            let short = format!("{}−{}", &names[i][5..], &names[j][5..]);
            diffs.push(match half {
                Some(h) => format!(
                    "{short} {:+.1} [{:+.1}, {:+.1}] (m={m}){}",
                    ms(d),
                    ms(d - h),
                    ms(d + h),
                    match p {
                        PairOrder::Holds => " ✔",
                        PairOrder::Reversed => " ✘",
                        PairOrder::Unclear => "",
                    }
                ),
                None => format!("{short} m={m} < 2"),
            });
            stats_pairs.push(serde_json::json!({
                "faster": names[i],
                "slower": names[j],
                "diff_ms": ms(d),
                "ci95_ms": half.map(|h| [ms(d - h), ms(d + h)]),
                "runs_paired": m,
            }));
        }
    }
    let verdict = ordering_verdict(&pairs);
    let stats = serde_json::json!({
        "protocols": order.iter().map(|&i| {
            let m = pooled(i);
            serde_json::json!({
                "protocol": names[i],
                "n": m.count,
                "mean_ms": ms(m.mean()),
                "runs": runs[i].iter().map(|r| serde_json::json!({
                    "n": r.latency.count,
                    "mean_ms": ms(r.latency.mean()),
                })).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
        "pairs": stats_pairs,
    });
    let note = match mode {
        SbrpFaults::Local => "local rerouting, transient router faults, no controller (the thesis's fault handling)",
        SbrpFaults::Controller => "recovery waits for the controller's new tables on real processes, which dominates and varies run to run (see the notes)",
    };
    let mut l = line(
        format!(
            "{name}, {ml}-flit messages: corrupted-message latency ordering ({})",
            mode.label()
        ),
        paper,
        format!(
            "{means}; paper-ordered differences of per-run means, ms (95 % t CI over m paired runs): {}",
            diffs.join(", ")
        ),
    )
    .verdict(verdict)
    .note(note);
    l.stats = Some(stats);
    l
}

/// Table 2: SBRP-0 resends whole messages, SBRP-1/2 only the rest.
fn overhead_line(name: &str, ml: u32, mode: SbrpFaults, runs: &[SbrpRun]) -> Vec<Line> {
    let per = |r: &SbrpRun| {
        if r.resent_packets == 0 {
            0.0
        } else {
            r.resent_flits as f64 / r.resent_packets as f64
        }
    };
    let (p0, p1, p2) = (per(&runs[0]), per(&runs[1]), per(&runs[2]));
    // Max(C,A) = 2 × the buffer depth: shorter packets are resent whole.
    let whole =
        runs[0].resent_packets > 0 && runs[0].resent_flits == ml as u64 * runs[0].resent_packets;
    let ok =
        whole && p1 <= p0 && p2 <= p0 && runs[1].resent_packets > 0 && runs[2].resent_packets > 0;
    let partial = (p1 < ml as f64, p2 < ml as f64);
    let mut lines = vec![line(
        format!(
            "{name}, {ml}-flit messages: flits resent per resent packet ({})",
            mode.label()
        ),
        "SBRP-0 whole message; SBRP-1, SBRP-2 part of it (Table 2); nothing added to fault-free messages",
        format!(
            "SBRP-0 {p0:.1}, SBRP-1 {p1:.1}, SBRP-2 {p2:.1} (of {ml}); per message sent: {:.3} / {:.3} / {:.3}",
            runs[0].resent_flits as f64 / runs[0].sent.max(1) as f64,
            runs[1].resent_flits as f64 / runs[1].sent.max(1) as f64,
            runs[2].resent_flits as f64 / runs[2].sent.max(1) as f64,
        ),
    )
    .matches(ok)
    .note("resends happen only for packets the fault hit: fault-free messages carry no extra flit and no ACK")];
    if ml > 32 {
        lines.push(
            line(
                format!(
                    "{name}, {ml}-flit messages: SBRP-1 and SBRP-2 resent less than whole packets ({})",
                    mode.label()
                ),
                "SBRP-1 from k_C − Max(C,A), SBRP-2 from the receiver's prefix (§5.5, §5.6)",
                format!("SBRP-1 {}, SBRP-2 {}", if partial.0 { "yes" } else { "no" }, if partial.1 { "yes" } else { "no" }),
            )
            .matches(partial.0 && partial.1)
            .note("needs a packet cut mid-link in that run; packets dropped whole before the re-routing are resent whole by every protocol"),
        );
    }
    lines
}

/// Runs the experiments in `only` (every one when empty); seed 004's
/// distance-1 rows up to `distance1_faults` faults.
pub fn reproduce(
    quick: bool,
    threads: usize,
    only: &[String],
    distance1_faults: u32,
    dilation: Dilation,
    sbrp_runs: Sbrp003Runs,
) -> Result<Report> {
    let started = Instant::now();
    if let Some(bad) = only.iter().find(|o| !SECTIONS.contains(&o.as_str())) {
        anyhow::bail!("unknown section `{bad}` (known: {})", SECTIONS.join(", "));
    }
    let wanted = |id: &str| only.is_empty() || only.iter().any(|o| o == id);
    let mut sections = Vec::new();
    for id in SECTIONS.iter().filter(|id| wanted(id)) {
        sections.push(match *id {
            "004-table2" => seed004_table2(quick, threads, distance1_faults)?,
            "004-table3" => seed004_table3(quick, threads)?,
            "002-connectivity" => seed002(quick, threads)?,
            "000-ft2ei" => seed000(quick, threads)?,
            "001-routing" => seed001(quick)?,
            "003-sbrp" => seed003(quick, dilation, sbrp_runs)?,
            _ => sbrp_sim::section(quick, threads)?,
        });
    }
    Ok(Report {
        quick,
        args: String::new(),
        sections,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The report as Markdown.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Reproduction of the papers' static results\n");
    let _ = writeln!(
        s,
        "GENERATED by `flitctl reproduce{}` ({:.0} s) — do not edit by hand. Paper figures are constants quoted \
         from the digests in ../shared/spec (section given per table); ours are computed by flitnet-core.\n",
        r.args,
        r.seconds
    );
    let count = |v: Verdict| {
        r.sections
            .iter()
            .flat_map(|s| &s.lines)
            .filter(|l| l.verdict == v)
            .count()
    };
    let _ = writeln!(
        s,
        "Summary: {} match, {} differ, {} inconclusive, {} ours only, {} not computed here.\n",
        count(Verdict::Match),
        count(Verdict::Differs),
        count(Verdict::Inconclusive),
        count(Verdict::OursOnly),
        count(Verdict::NotHere)
    );
    for sec in &r.sections {
        let _ = writeln!(s, "## {}\n", sec.title);
        let _ = writeln!(
            s,
            "Source of the paper figures: {}. Run time {:.1} s.\n",
            sec.source, sec.seconds
        );
        let _ = writeln!(s, "| Figure | Paper | Ours | Verdict | Command | Note |");
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for l in &sec.lines {
            let cmd = if l.command.is_empty() {
                String::new()
            } else {
                format!("`{}`", cell(&l.command))
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                cell(&l.what),
                cell(&l.paper),
                cell(&l.ours),
                l.verdict.mark(),
                cmd,
                cell(&l.note)
            );
        }
        s.push('\n');
        for n in &sec.notes {
            let _ = writeln!(s, "- {n}");
        }
        if !sec.notes.is_empty() {
            s.push('\n');
        }
    }
    s
}

/// The options of `a` that change the report, as typed after
/// `flitctl reproduce` (the header says how to regenerate the file).
fn command_args(a: &ReproduceArgs) -> String {
    let mut s = String::new();
    if a.quick {
        s += " --quick";
    }
    if !a.only.is_empty() {
        s += &format!(" --only {}", a.only.join(","));
    }
    if a.distance1_faults != 6 {
        s += &format!(" --distance1-faults {}", a.distance1_faults);
    }
    if a.time_dilation != Dilation::Auto {
        s += &format!(" --time-dilation {}", a.time_dilation);
    }
    if let Some(n) = a.sbrp_local_runs {
        s += &format!(" --sbrp-local-runs {n}");
    }
    if let Some(n) = a.sbrp_controller_runs {
        s += &format!(" --sbrp-controller-runs {n}");
    }
    if a.sbrp_dead_after != Sbrp003Runs::FULL.dead_after {
        s += &format!(" --sbrp-dead-after {}ms", a.sbrp_dead_after.as_millis());
    }
    if let Some(w) = &a.write {
        s += &format!(" --write {}", w.display());
    }
    s
}

/// `flitctl reproduce`.
pub fn run(a: ReproduceArgs) -> Result<()> {
    let mut report = reproduce(
        a.quick,
        a.threads,
        &a.only,
        a.distance1_faults,
        a.time_dilation,
        Sbrp003Runs::of(&a),
    )?;
    report.args = command_args(&a);
    let text = if a.json {
        serde_json::to_string_pretty(&report)?
    } else {
        render(&report)
    };
    match &a.write {
        Some(path) => {
            // `--only` into an existing report replaces just those
            // sections, so one slow experiment can be rerun alone.
            let text = match std::fs::read_to_string(path) {
                Ok(old) if !a.json && !a.only.is_empty() => {
                    splice(&old, &report).with_context(|| format!("updating {}", path.display()))?
                }
                _ => text,
            };
            std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// `old` (a report [`render`] wrote) with the sections of `fresh`
/// replacing those of the same title (appended when new), a line in the
/// header naming the command that regenerated them, and the summary
/// recounted over the whole file.
pub fn splice(old: &str, fresh: &Report) -> Result<String> {
    let first = old
        .find("\n## ")
        .map(|i| i + 1)
        .context("no section (`## …`) in the existing report: not one `flitctl reproduce` wrote")?;
    let (preamble, body) = old.split_at(first);
    // Sections as (title line, text including the title line).
    let mut sections: Vec<(String, String)> = Vec::new();
    for chunk in body.split_inclusive('\n') {
        if let Some(title) = chunk.strip_prefix("## ") {
            sections.push((title.trim_end().to_string(), String::new()));
        }
        let Some(last) = sections.last_mut() else {
            anyhow::bail!("text before the first section");
        };
        last.1.push_str(chunk);
    }
    let rendered = render(fresh);
    let new_body = &rendered[rendered
        .find("\n## ")
        .map(|i| i + 1)
        .context("the fresh report has no section")?..];
    let mut replaced = Vec::new();
    let mut fresh_texts: Vec<(String, String)> = Vec::new();
    for chunk in new_body.split_inclusive('\n') {
        if let Some(title) = chunk.strip_prefix("## ") {
            fresh_texts.push((title.trim_end().to_string(), String::new()));
        }
        if let Some(last) = fresh_texts.last_mut() {
            last.1.push_str(chunk);
        }
    }
    for (title, text) in fresh_texts {
        match sections.iter_mut().find(|(t, _)| *t == title) {
            Some(slot) => slot.1 = text,
            None => sections.push((title.clone(), text)),
        }
        replaced.push(title);
    }
    let body: String = sections.into_iter().map(|(_, t)| t).collect();
    let count = |v: Verdict| body.matches(&format!("| {} |", v.mark())).count();
    let summary = format!(
        "Summary: {} match, {} differ, {} inconclusive, {} ours only, {} not computed here.",
        count(Verdict::Match),
        count(Verdict::Differs),
        count(Verdict::Inconclusive),
        count(Verdict::OursOnly),
        count(Verdict::NotHere)
    );
    let mut head = String::new();
    for line in preamble.lines() {
        if line.starts_with("Summary: ") {
            continue;
        }
        // An earlier regeneration of only the sections regenerated now is
        // superseded by this one.
        if let Some(titles) = line
            .strip_prefix("REGENERATED by ")
            .and_then(|l| l.split_once(" s): "))
            .map(|(_, t)| t.trim_end_matches('.'))
        {
            if titles.split("; ").all(|t| replaced.iter().any(|r| r == t)) {
                continue;
            }
        }
        head.push_str(line);
        head.push('\n');
    }
    let head = head.trim_end().to_string();
    Ok(format!(
        "{head}\n\nREGENERATED by `flitctl reproduce{}` ({:.0} s): {}.\n\n{summary}\n\n{body}",
        fresh.args,
        fresh.seconds,
        replaced.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(id: &'static str, title: &'static str, verdicts: &[Verdict]) -> Section {
        Section {
            id,
            title,
            source: "digest",
            lines: verdicts
                .iter()
                .enumerate()
                .map(|(i, v)| line(format!("{id} row {i}"), "1", "1").verdict(*v))
                .collect(),
            notes: vec![format!("{id} note")],
            seconds: 1.0,
        }
    }

    fn report(args: &str, sections: Vec<Section>) -> Report {
        Report {
            quick: false,
            args: args.into(),
            sections,
            seconds: 2.0,
        }
    }

    /// Moments of `values` (ms, recorded in ns).
    fn ms(values: &[f64]) -> Moments {
        let mut m = Moments::default();
        for v in values {
            m.record((v * 1e6) as u64);
        }
        m
    }

    fn sbrp(latency: Moments) -> SbrpRun {
        SbrpRun {
            sent: 100,
            lost: 0,
            lost_unreachable: 0,
            duplicates: 0,
            out_of_order: 0,
            recovered: latency.count,
            resent_packets: latency.count,
            resent_flits: 8 * latency.count,
            rrqs: latency.count,
            latency,
            retained: 0,
        }
    }

    #[test]
    fn paired_intervals_match_a_worked_example() {
        // Per-run means a: 20, 22, 24, 30; b: 15, 18, 19, (none).
        // Differences 5, 4, 5 over m = 3 runs: mean 14/3, s² = 1/3.
        let a = [20.0, 22.0, 24.0, 30.0].map(|v| sbrp(ms(&[v - 1.0, v + 1.0])));
        let mut b = [15.0, 18.0, 19.0].map(|v| sbrp(ms(&[v]))).to_vec();
        b.push(sbrp(Moments::default()));
        let (d, h, m) = paired(&a, &b);
        assert_eq!(m, 3);
        assert!((d - 14e6 / 3.0).abs() < 1e-3, "{d}");
        let want = t975(2.0) * (1.0f64 / 3.0 / 3.0).sqrt() * 1e6;
        assert!((h.unwrap() - want).abs() < 1.0, "{h:?} vs {want}");
        // t(2) = 4.303: half-width 1.434 ms.
        assert!((h.unwrap() - 1.434e6).abs() < 1e3, "{h:?}");
        // One paired run: a difference but no interval; none: nothing.
        assert_eq!(paired(&a[..1], &b[..1]).1, None);
        assert_eq!(paired(&a[..1], &b[3..]).2, 0);
    }

    #[test]
    fn ordering_verdicts_need_every_pair_significant() {
        use PairOrder::*;
        assert_eq!(ordering_verdict(&[Holds, Holds, Holds]), Verdict::Match);
        assert_eq!(
            ordering_verdict(&[Holds, Unclear, Holds]),
            Verdict::Inconclusive
        );
        assert_eq!(
            ordering_verdict(&[Holds, Reversed, Holds]),
            Verdict::Differs
        );
        assert_eq!(
            ordering_verdict(&[Unclear, Reversed, Unclear]),
            Verdict::Differs
        );
        // Five runs per protocol, each run's mean near the protocol's
        // centre c (run k shifted by k ms for every protocol alike: the
        // pairing removes it). ML 128, paper SBRP-1 < SBRP-2 < SBRP-0;
        // runs are SBRP-0, 1, 2.
        let runs = |c: f64, jitter: f64| {
            (0..5)
                .map(|k| {
                    let v = c + k as f64 + if k % 2 == 0 { jitter } else { -jitter };
                    sbrp(ms(&[v - 3.0, v + 3.0]))
                })
                .collect::<Vec<_>>()
        };
        let clear = [runs(30.0, 0.1), runs(10.0, 0.0), runs(20.0, 0.1)];
        let l = ordering_line("t", 128, SbrpFaults::Local, &clear);
        assert_eq!(l.verdict, Verdict::Match, "{}", l.ours);
        assert!(
            l.ours
                .starts_with("SBRP-1 12.0 ms (n=10, 5 of 5 runs), SBRP-2 22.0"),
            "{}",
            l.ours
        );
        assert!(l.ours.contains("1−2 -10.0 ["), "{}", l.ours);
        assert!(l.ours.contains("(m=5) ✔"), "{}", l.ours);
        let stats = l.stats.unwrap();
        assert_eq!(stats["pairs"].as_array().unwrap().len(), 3);
        assert_eq!(stats["pairs"][0]["runs_paired"], 5);
        assert_eq!(stats["protocols"][0]["n"], 10);
        assert_eq!(stats["protocols"][0]["runs"].as_array().unwrap().len(), 5);
        // SBRP-2 clearly slower than SBRP-0: reversed.
        let swapped = [runs(20.0, 0.1), runs(10.0, 0.0), runs(30.0, 0.1)];
        let l = ordering_line("t", 128, SbrpFaults::Local, &swapped);
        assert_eq!(l.verdict, Verdict::Differs, "{}", l.ours);
        assert!(l.ours.contains("2−0 +10.0 ["), "{}", l.ours);
        assert!(l.ours.contains("✘"), "{}", l.ours);
        // Means in the paper's order but the per-run differences spread
        // wide: too few runs to tell, whatever the pooled means say.
        let l = ordering_line(
            "t",
            128,
            SbrpFaults::Local,
            &[runs(30.0, 12.0), runs(20.0, 0.0), runs(25.0, -12.0)],
        );
        assert_eq!(l.verdict, Verdict::Inconclusive, "{}", l.ours);
        // One run per protocol: no interval, however far apart.
        let one = |c: f64| vec![sbrp(ms(&[c, c + 1.0]))];
        let l = ordering_line(
            "t",
            8,
            SbrpFaults::Local,
            &[one(20.0), one(10.0), one(30.0)],
        );
        assert_eq!(l.verdict, Verdict::Inconclusive, "{}", l.ours);
        assert!(l.ours.contains("1−0 m=1 < 2"), "{}", l.ours);
        let l = ordering_line(
            "t",
            8,
            SbrpFaults::Local,
            &[
                runs(20.0, 0.1),
                vec![sbrp(Moments::default()); 5],
                runs(30.0, 0.1),
            ],
        );
        assert_eq!(l.verdict, Verdict::Inconclusive, "{}", l.ours);
        assert!(l.ours.contains("SBRP-1 — (n=0, 0 of 5 runs)"), "{}", l.ours);
    }

    #[test]
    fn local_runs_cover_every_pair_before_repeating_one() {
        let runs: Vec<(usize, u64)> = (0..12).map(|r| local_run(r, 6)).collect();
        // The default 12 runs are every pair under seeds 1 and 2.
        let mut expected: Vec<(usize, u64)> = (0..6).flat_map(|p| [(p, 1), (p, 2)]).collect();
        let mut sorted = runs.clone();
        sorted.sort();
        expected.sort();
        assert_eq!(sorted, expected);
        // Six runs: each pair once, under seed 1.
        assert!(runs[..6].iter().enumerate().all(|(p, &r)| r == (p, 1)));
        assert_eq!(local_run(13, 6), (1, 3));
    }

    #[test]
    fn seed003_runs_take_the_options_over_the_mode_defaults() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: ReproduceArgs,
        }
        let of = |argv: &[&str]| {
            let argv: Vec<&str> = std::iter::once("reproduce")
                .chain(argv.iter().copied())
                .collect();
            Sbrp003Runs::of(&Cli::parse_from(argv).a)
        };
        assert_eq!(of(&[]), Sbrp003Runs::FULL);
        assert_eq!(of(&["--quick"]), Sbrp003Runs::QUICK);
        let short = of(&[
            "--sbrp-local-runs",
            "6",
            "--sbrp-controller-runs",
            "0",
            "--sbrp-dead-after",
            "1s",
        ]);
        assert_eq!(
            short,
            Sbrp003Runs {
                local: 6,
                controller: 0,
                dead_after: std::time::Duration::from_secs(1)
            }
        );
        assert_eq!(of(&["--quick", "--sbrp-local-runs", "2"]).local, 2);
    }

    #[test]
    fn greedy_permutations_take_the_highest_free_destination() {
        assert_eq!(
            greedy_permutation(4, 2, |_, _| true).as_deref(),
            Some("0 3\n1 2\n")
        );
        // Destinations are never reused, and a source may find none.
        assert_eq!(
            greedy_permutation(4, 8, |_, d| d == 3).as_deref(),
            Some("0 3\n")
        );
        assert_eq!(greedy_permutation(4, 8, |_, _| false), None);
    }

    #[test]
    fn splicing_replaces_only_the_regenerated_sections_and_recounts() {
        use Verdict::*;
        let full = render(&report(
            " --write r.md",
            vec![
                section("a", "Seed A", &[Match, Match]),
                section("b", "Seed B", &[Differs, OursOnly]),
                section("c", "Seed C", &[Match]),
            ],
        ));
        assert!(full.contains("Summary: 3 match, 1 differ, 0 inconclusive, 1 ours only"));
        let fresh = report(
            " --only b --write r.md",
            vec![section("b", "Seed B", &[Match, Inconclusive, Match])],
        );
        let spliced = splice(&full, &fresh).unwrap();
        assert!(spliced.starts_with("# Reproduction"), "{spliced}");
        assert!(spliced.contains("GENERATED by `flitctl reproduce --write r.md`"));
        assert!(spliced
            .contains("REGENERATED by `flitctl reproduce --only b --write r.md` (2 s): Seed B."));
        assert!(
            spliced.contains("Summary: 5 match, 0 differ, 1 inconclusive, 0 ours only"),
            "{spliced}"
        );
        assert_eq!(spliced.matches("Summary:").count(), 1);
        // The other sections are untouched and keep their order.
        let (a, b, c) = (
            spliced.find("## Seed A").unwrap(),
            spliced.find("## Seed B").unwrap(),
            spliced.find("## Seed C").unwrap(),
        );
        assert!(a < b && b < c);
        assert!(spliced.contains("| a row 1 |") && spliced.contains("| b row 2 |"));
        assert!(!spliced.contains("✘ differs"));
        // A section the old report lacks is appended; text that is not a
        // report is refused.
        let new = report(" --only d", vec![section("d", "Seed D", &[Differs])]);
        let more = splice(&spliced, &new).unwrap();
        assert!(more.trim_end().ends_with("- d note"), "{more}");
        assert!(more.contains("Summary: 5 match, 1 differ, 1 inconclusive"));
        assert!(
            more.contains("| b row 1 | 1 | 1 | ≈ inconclusive |"),
            "{more}"
        );
        assert!(splice("just some text\n", &new).is_err());
        // Regenerating the same section again replaces its header line;
        // a line naming other sections stays.
        let again = splice(&more, &fresh).unwrap();
        assert_eq!(again.matches("REGENERATED by").count(), 2, "{again}");
        assert_eq!(again.matches("): Seed B.").count(), 1, "{again}");
        assert!(again.contains("): Seed D."), "{again}");
    }
}
