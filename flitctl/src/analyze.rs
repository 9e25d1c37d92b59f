//! `flitctl analyze routes`: engines side by side on one topology, by the
//! static metrics of seed 001 §6 (μ over all-to-all, μ^SP, μ^RP(r) median
//! and 1st/39th 40-quantiles, ν and the effective diameter, routes per
//! switch↔switch link, table memory), plus route computation time and the
//! checker's verdict (§8.6 A1–A5).

use crate::route::{check_tables, compute, load_tables, FaultArgs};
use anyhow::Result;
use clap::{Args, Subcommand};
use flitnet_core::routing::metrics::{
    edge_forwarding, memory_per_switch, mu_a2a, mu_rp, mu_sp, path_stats, TableRouter,
};
use flitnet_core::routing::RoutingTables;
use flitnet_core::topology::{FaultSet, NodeRef, PortRef, Topology};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum AnalyzeCommand {
    /// Compare routing engines by static metrics on one topology.
    Routes(AnalyzeRoutesArgs),
    /// Static fault-tolerance analysis: which link-fault combinations a
    /// mechanism tolerates.
    Faults(crate::analyze_faults::AnalyzeFaultsArgs),
}

#[derive(Args, Debug)]
pub struct AnalyzeRoutesArgs {
    /// Topology file (YAML or ibnetdiscover .net).
    pub topology: PathBuf,
    /// Engines, comma-separated: registry names or `opensm:<engine>`.
    #[arg(long, value_delimiter = ',', default_value = "dmodk,dmodc,ftree")]
    pub engine: Vec<String>,
    /// Also compare tables read from files (flitnet JSON or opensm-lfts.dump).
    #[arg(long, value_name = "FILE")]
    pub tables: Vec<PathBuf>,
    #[command(flatten)]
    pub faults: FaultArgs,
    /// Random permutations for μ^RP.
    #[arg(long, default_value_t = 1000)]
    pub rp_samples: usize,
    /// Seed of the random permutations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One engine's column.
#[derive(Clone, Debug, Serialize)]
pub struct RouteAnalysis {
    pub engine: String,
    /// Route computation time in ms (OpenSM: its log's routing span).
    pub compute_ms: Option<f64>,
    /// `ok`, `ok (deadlock-free)` or what the checker found.
    pub verdict: String,
    pub pairs_delivered: u64,
    pub pairs_connected: u64,
    pub mu_a2a: u32,
    pub mu_sp: u32,
    pub mu_rp_q1_40: u32,
    pub mu_rp_median: u32,
    pub mu_rp_q39_40: u32,
    pub nu: f64,
    pub diameter: u32,
    /// Routes (all-to-all) over the busiest directed switch↔switch link (Ξ).
    pub max_link_routes: u64,
    /// Mean over directed switch↔switch links.
    pub mean_link_routes: f64,
    pub max_table_bits: u64,
    pub mean_table_bits: f64,
    /// Flows whose route failed, summed over the metrics' patterns.
    pub unrouted: u64,
}

/// Measures one set of tables.
pub fn analyze(
    topo: &Topology,
    faults: &FaultSet,
    tables: &RoutingTables,
    compute_time: Option<Duration>,
    deadlock: bool,
    rp_samples: usize,
    seed: u64,
) -> RouteAnalysis {
    let report = check_tables(topo, faults, tables, deadlock);
    let verdict = if report.is_ok() {
        if report.cdg_checked {
            "ok (deadlock-free)".to_string()
        } else {
            "ok".to_string()
        }
    } else if let Some(first) = report.failures.first() {
        format!("{} failed: {first}", report.failed_pairs.max(1))
    } else {
        format!("{} pairs failed", report.failed_pairs)
    };
    let router = TableRouter::new(topo, faults, tables);
    let a2a = mu_a2a(&router, topo);
    let (sp, _) = mu_sp(&router, topo);
    let rp = mu_rp(&router, topo, rp_samples, seed);
    let ps = path_stats(&router);
    let ef = edge_forwarding(&router, topo);
    let mut link_routes = Vec::new();
    for (s, ports) in ef.per_port.iter().enumerate() {
        for (p, &c) in ports.iter().enumerate() {
            let peer = topo.peer(PortRef::switch(s as u32, p as u16));
            if matches!(peer.map(|x| x.node), Some(NodeRef::Switch(_))) {
                link_routes.push(c);
            }
        }
    }
    let mem = memory_per_switch(topo, tables);
    RouteAnalysis {
        engine: tables.engine.clone(),
        compute_ms: compute_time.map(|t| t.as_secs_f64() * 1e3),
        verdict,
        pairs_delivered: report.delivered,
        pairs_connected: report.pairs_checked,
        mu_a2a: a2a.mu,
        mu_sp: sp.mu,
        mu_rp_q1_40: rp.q1_40,
        mu_rp_median: rp.median,
        mu_rp_q39_40: rp.q39_40,
        nu: ps.nu,
        diameter: ps.max,
        max_link_routes: ef.big_xi,
        mean_link_routes: mean(link_routes.iter().map(|&c| c as f64)),
        max_table_bits: mem.iter().copied().max().unwrap_or(0),
        mean_table_bits: mean(mem.iter().map(|&b| b as f64)),
        unrouted: a2a.unrouted + sp.unrouted + rp.unrouted + ps.unrouted,
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// A row of the side-by-side table: its label and how to fill a cell.
type Row = (String, Box<dyn Fn(&RouteAnalysis) -> String>);

/// The side-by-side table: one row per metric, one column per engine.
pub fn render_table(topo: &Topology, rp_samples: usize, cols: &[RouteAnalysis]) -> String {
    let rows: Vec<Row> = vec![
        (
            "compute time (ms)".into(),
            Box::new(|a| a.compute_ms.map_or("-".into(), |t| format!("{t:.2}"))),
        ),
        (
            "checker".into(),
            Box::new(|a| {
                if a.verdict.starts_with("ok") {
                    a.verdict.clone()
                } else {
                    format!("FAIL ({}/{})", a.pairs_delivered, a.pairs_connected)
                }
            }),
        ),
        ("μ (all-to-all)".into(), Box::new(|a| a.mu_a2a.to_string())),
        ("μ^SP".into(), Box::new(|a| a.mu_sp.to_string())),
        (
            format!("μ^RP({rp_samples}) median [q1/40, q39/40]"),
            Box::new(|a| format!("{} [{}, {}]", a.mu_rp_median, a.mu_rp_q1_40, a.mu_rp_q39_40)),
        ),
        ("ν (mean hops)".into(), Box::new(|a| format!("{:.3}", a.nu))),
        (
            "diameter (hops)".into(),
            Box::new(|a| a.diameter.to_string()),
        ),
        (
            "routes/link max (Ξ)".into(),
            Box::new(|a| a.max_link_routes.to_string()),
        ),
        (
            "routes/link mean".into(),
            Box::new(|a| format!("{:.1}", a.mean_link_routes)),
        ),
        (
            "table bits/switch max".into(),
            Box::new(|a| a.max_table_bits.to_string()),
        ),
        (
            "table bits/switch mean".into(),
            Box::new(|a| format!("{:.0}", a.mean_table_bits)),
        ),
        (
            "unrouted flows".into(),
            Box::new(|a| a.unrouted.to_string()),
        ),
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(_, f)| cols.iter().map(f).collect())
        .collect();
    let label_w = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    let col_w: Vec<usize> = (0..cols.len())
        .map(|i| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([cols[i].engine.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let pad = |s: &str, w: usize| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count())));
    let mut out = format!(
        "{}: {} hosts, {} switches\n",
        topo.name,
        topo.num_hosts(),
        topo.num_switches()
    );
    out += &pad("", label_w);
    for (c, w) in cols.iter().zip(&col_w) {
        out += &format!("  {}", pad(&c.engine, *w));
    }
    out.push('\n');
    for ((label, _), row) in rows.iter().zip(&cells) {
        out += &pad(label, label_w);
        for (cell, w) in row.iter().zip(&col_w) {
            out += &format!("  {}", pad(cell, *w));
        }
        out = out.trim_end().to_string() + "\n";
    }
    for c in cols.iter().filter(|c| !c.verdict.starts_with("ok")) {
        out += &format!("{}: {}\n", c.engine, c.verdict);
    }
    out
}

pub fn run(cmd: AnalyzeCommand) -> Result<()> {
    let args = match cmd {
        AnalyzeCommand::Routes(args) => args,
        AnalyzeCommand::Faults(args) => return crate::analyze_faults::run(args),
    };
    let topo = crate::topo::load(&args.topology)?;
    let faults = args.faults.resolve(&topo)?;
    let mut cols = Vec::new();
    for e in &args.engine {
        let c = compute(&topo, e, &faults)?;
        if let Some(run) = &c.opensm {
            eprintln!("opensm: {}", run.log_line);
        }
        cols.push(analyze(
            &topo,
            &faults,
            &c.tables,
            Some(c.time),
            c.claims_deadlock_free,
            args.rp_samples,
            args.seed,
        ));
    }
    for path in &args.tables {
        let mut tables = load_tables(&topo, path)?;
        tables.engine = path
            .file_name()
            .map_or(tables.engine.clone(), |n| n.to_string_lossy().into_owned());
        // Deadlock freedom is unknown for foreign tables: check it.
        cols.push(analyze(
            &topo,
            &faults,
            &tables,
            None,
            true,
            args.rp_samples,
            args.seed,
        ));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&cols)?);
    } else {
        print!("{}", render_table(&topo, args.rp_samples, &cols));
    }
    Ok(())
}
