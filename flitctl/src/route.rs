//! `flitctl route`: compute routing tables, check them, write them out.
//!
//! Engines are the registry's (`dmodk`, `dmodc`, `ftree`, …) or
//! `opensm:<engine>` (`opensm:ftree`, `opensm:minhop`, …): the real OpenSM
//! run on an ibsim copy of the topology, its `opensm-lfts.dump` imported
//! (docs/routing.md). Tables are always checked by the shared checker
//! before they are written; failures list the offending pairs.

use crate::ibsim::{self, OpensmOptions, OpensmRun};
use crate::parse::parse_link;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use flitnet_core::routing::checker::{check, CheckOptions, CheckReport};
use flitnet_core::routing::opensm::{from_lfts_dump, to_lfts_dump, LidAssignment};
use flitnet_core::routing::{registry, RoutingTables, SwitchTable};
use flitnet_core::topology::ibnet::GuidMap;
use flitnet_core::topology::{FaultSet, HostId, NodeRef, PortNo, Topology};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Output formats of `flitctl route`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    /// One line per switch: the output port for host 0, 1, … (`-` = none).
    Lft,
    /// Per switch and port, the destination intervals it serves
    /// (derived from the LFT when the engine computes LFTs).
    Intervals,
    /// OpenSM's `opensm-lfts.dump` (load with `opensm -R file -U FILE`).
    Opensm,
    /// flitnet's JSON (what `flitctl up --tables` and switchd install).
    Json,
}

/// Failed elements, as given on the command line.
#[derive(Args, Debug, Clone, Default)]
pub struct FaultArgs {
    /// Fail a link, named by one end: `NODE:PORT` (e.g. s0-0:4). Repeatable.
    #[arg(long = "fail-link", value_name = "LINK")]
    pub links: Vec<String>,
    /// Fail a switch by name. Repeatable.
    #[arg(long = "fail-switch", value_name = "SWITCH")]
    pub switches: Vec<String>,
}

impl FaultArgs {
    pub fn resolve(&self, topo: &Topology) -> Result<FaultSet> {
        let mut f = FaultSet::none();
        for l in &self.links {
            f.links.insert(parse_link(topo, l)?);
        }
        for name in &self.switches {
            match topo.find_node(name) {
                Some(NodeRef::Switch(s)) => {
                    f.switches.insert(s);
                }
                Some(NodeRef::Host(_)) => bail!("--fail-switch {name}: that is a host"),
                None => bail!("--fail-switch {name}: no such switch"),
            }
        }
        Ok(f)
    }
}

#[derive(Args, Debug)]
pub struct RouteArgs {
    /// Topology file (YAML or ibnetdiscover .net).
    pub topology: PathBuf,
    /// Routing engine: a registry name, or `opensm:<engine>` to run OpenSM.
    #[arg(long, default_value = "auto")]
    pub engine: String,
    #[command(flatten)]
    pub faults: FaultArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TableFormat::Json)]
    pub format: TableFormat,
    /// Write here instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write the tables even if the checker finds problems.
    #[arg(long)]
    pub force: bool,
}

/// Tables from one engine, how long they took, and OpenSM's run if any.
pub struct Computed {
    pub tables: RoutingTables,
    /// Route computation time (for OpenSM: its log's routing span, else wall).
    pub time: Duration,
    pub opensm: Option<OpensmRun>,
    /// Whether the engine promises deadlock freedom (the checker then
    /// verifies it).
    pub claims_deadlock_free: bool,
}

/// OpenSM engines whose routes are deadlock-free by construction.
const OPENSM_DEADLOCK_FREE: &[&str] = &["ftree", "updn", "dnup", "dfsssp", "lash", "nue"];

/// Computes tables with `engine` (see the module doc).
pub fn compute(topo: &Topology, engine: &str, faults: &FaultSet) -> Result<Computed> {
    if let Some(osm) = engine.strip_prefix("opensm:") {
        let run = ibsim::run_opensm(topo, faults, osm, &OpensmOptions::default())?;
        let lids = LidAssignment::parse_guid2lid(&run.guid2lid, "guid2lid")?;
        let imported = from_lfts_dump(
            &run.lfts_dump,
            "opensm-lfts.dump",
            topo,
            &GuidMap::assigned(topo),
            Some(&lids),
            engine,
        )?;
        return Ok(Computed {
            tables: imported.tables,
            time: run.routing_span.unwrap_or(run.wall),
            claims_deadlock_free: OPENSM_DEADLOCK_FREE.contains(&osm),
            opensm: Some(run),
        });
    }
    let name = if engine == "auto" {
        flitnet_core::routing::registry::auto_engine(topo, false)
    } else {
        engine
    };
    let e = registry::engine(name)?;
    let t0 = Instant::now();
    let tables = e.route(topo, faults)?;
    Ok(Computed {
        tables,
        time: t0.elapsed(),
        opensm: None,
        claims_deadlock_free: e.claims_deadlock_free(),
    })
}

/// Checks tables as `flitctl route` does (deadlock freedom where claimed).
pub fn check_tables(
    topo: &Topology,
    faults: &FaultSet,
    tables: &RoutingTables,
    deadlock: bool,
) -> CheckReport {
    check(
        topo,
        faults,
        tables,
        &CheckOptions {
            deadlock,
            max_listed: 20,
            ..CheckOptions::default()
        },
    )
}

/// Reads tables for `topo` from `path`: flitnet JSON, or an OpenSM
/// `opensm-lfts.dump` (switches and hosts resolved by flitnet's GUIDs;
/// a `guid2lid` file next to it is used for entries without port GUIDs).
pub fn load_tables(topo: &Topology, path: &Path) -> Result<RoutingTables> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading tables from {}", path.display()))?;
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(&text)
            .with_context(|| format!("{}: not flitnet JSON tables", path.display()));
    }
    let lids = match path.parent().map(|d| d.join("guid2lid")) {
        Some(p) if p.exists() => Some(LidAssignment::parse_guid2lid(
            &std::fs::read_to_string(&p)?,
            &p.display().to_string(),
        )?),
        _ => None,
    };
    let imported = from_lfts_dump(
        &text,
        &path.display().to_string(),
        topo,
        &GuidMap::assigned(topo),
        lids.as_ref(),
        "opensm-file",
    )?;
    Ok(imported.tables)
}

/// `tables` in `format`.
pub fn render(topo: &Topology, tables: &RoutingTables, format: TableFormat) -> Result<String> {
    Ok(match format {
        TableFormat::Json => serde_json::to_string_pretty(tables)? + "\n",
        TableFormat::Opensm => to_lfts_dump(topo, tables, &GuidMap::assigned(topo))?,
        TableFormat::Lft => render_lft(topo, tables),
        TableFormat::Intervals => render_intervals(topo, tables),
    })
}

fn render_lft(topo: &Topology, tables: &RoutingTables) -> String {
    let mut out = format!(
        "# engine {}: output port per destination host 0..{} (- = no route)\n",
        tables.engine,
        topo.num_hosts()
    );
    for (sw, t) in topo.switches.iter().zip(&tables.switches) {
        let ports: Vec<String> = (0..topo.num_hosts() as HostId)
            .map(|d| t.lookup(d).map_or("-".into(), |p| p.to_string()))
            .collect();
        let _ = writeln!(out, "{}: {}", sw.name, ports.join(" "));
    }
    out
}

fn render_intervals(topo: &Topology, tables: &RoutingTables) -> String {
    let mut out = format!(
        "# engine {}: per switch port, destination intervals [lo-hi] (exclusions after `except`)\n",
        tables.engine
    );
    let iv = |lo: HostId, hi: HostId| {
        if lo == hi {
            format!("[{lo}]")
        } else {
            format!("[{lo}-{hi}]")
        }
    };
    for (sw, t) in topo.switches.iter().zip(&tables.switches) {
        let _ = writeln!(out, "{}:", sw.name);
        match t {
            SwitchTable::Intervals(it) => {
                for p in &it.ports {
                    let inc: Vec<String> = p.include.iter().map(|i| iv(i.lo, i.hi)).collect();
                    let exc: Vec<String> = p.exclude.iter().map(|i| iv(i.lo, i.hi)).collect();
                    let _ = write!(out, "  port {}: {}", p.port, inc.join(" "));
                    if !exc.is_empty() {
                        let _ = write!(out, " except {}", exc.join(" "));
                    }
                    out.push('\n');
                }
            }
            _ => {
                // Runs of consecutive destinations sharing a port.
                let mut runs: Vec<(PortNo, Vec<String>)> = Vec::new();
                let n = topo.num_hosts() as HostId;
                let mut d = 0;
                while d < n {
                    let Some(p) = t.lookup(d) else {
                        d += 1;
                        continue;
                    };
                    let mut e = d;
                    while e + 1 < n && t.lookup(e + 1) == Some(p) {
                        e += 1;
                    }
                    match runs.iter_mut().find(|(q, _)| *q == p) {
                        Some((_, v)) => v.push(iv(d, e)),
                        None => runs.push((p, vec![iv(d, e)])),
                    }
                    d = e + 1;
                }
                runs.sort_by_key(|(p, _)| *p);
                for (p, v) in runs {
                    let _ = writeln!(out, "  port {p}: {}", v.join(" "));
                }
            }
        }
    }
    out
}

/// Prints the checker's failures (each names its pair) on stderr.
pub fn print_failures(engine: &str, report: &CheckReport) {
    eprintln!(
        "{engine}: checker: {} of {} connected pairs delivered, {} failed",
        report.delivered, report.pairs_checked, report.failed_pairs
    );
    for f in &report.failures {
        eprintln!("  {f}");
    }
    let unlisted =
        report.failed_pairs as usize - report.failures.len().min(report.failed_pairs as usize);
    if unlisted > 0 {
        eprintln!("  … and {unlisted} more failed pairs");
    }
}

pub fn run(args: RouteArgs) -> Result<()> {
    let topo = crate::topo::load(&args.topology)?;
    let faults = args.faults.resolve(&topo)?;
    let c = compute(&topo, &args.engine, &faults)?;
    if let Some(run) = &c.opensm {
        eprintln!("opensm: {}", run.log_line);
    }
    let report = check_tables(&topo, &faults, &c.tables, c.claims_deadlock_free);
    if !report.is_ok() {
        print_failures(&c.tables.engine, &report);
        if !args.force {
            bail!(
                "{}: the checker rejected the tables (use --force to write them anyway)",
                c.tables.engine
            );
        }
    } else {
        eprintln!(
            "{}: {} pairs delivered{} in {:.3} ms",
            c.tables.engine,
            report.delivered,
            if report.cdg_checked {
                ", deadlock-free"
            } else {
                ""
            },
            c.time.as_secs_f64() * 1e3
        );
    }
    let text = render(&topo, &c.tables, args.format)?;
    match &args.output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// The tables of engine `engine` (`auto` resolved by the core registry)
/// for `topo` minus `faults`.
pub fn compute_routes(topo: &Topology, engine: &str, faults: &FaultSet) -> Result<RoutingTables> {
    Ok(flitnet_core::routing::registry::route(
        engine, topo, faults,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::topology::generators::kary_ntree;

    #[test]
    fn interval_rendering_groups_runs_per_port() {
        let topo = kary_ntree(2, 2).unwrap();
        let c = compute(&topo, "dmodk", &FaultSet::none()).unwrap();
        let text = render(&topo, &c.tables, TableFormat::Intervals).unwrap();
        // Leaf s0-0 serves hosts 0 and 1 on its down ports 0 and 1, and
        // sends the rest up: d mod 2 picks between ports 2 and 3.
        assert!(
            text.contains("s0-0:\n  port 0: [0]\n  port 1: [1]\n  port 2: [2]\n  port 3: [3]\n"),
            "{text}"
        );
        let lft = render(&topo, &c.tables, TableFormat::Lft).unwrap();
        assert!(lft.lines().any(|l| l == "s0-0: 0 1 2 3"), "{lft}");
    }

    #[test]
    fn faults_resolve_by_name_and_refuse_hosts() {
        let topo = kary_ntree(2, 2).unwrap();
        let f = FaultArgs {
            links: vec!["s0-0:2".into()],
            switches: vec!["s1-0".into()],
        }
        .resolve(&topo)
        .unwrap();
        assert_eq!((f.links.len(), f.switches.len()), (1, 1));
        let e = FaultArgs {
            links: vec![],
            switches: vec!["h0".into()],
        }
        .resolve(&topo)
        .unwrap_err();
        assert!(e.to_string().contains("host"), "{e}");
    }
}
