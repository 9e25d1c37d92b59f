//! `flitctl bench routes`: route computation time of Dmodk, Dmodc and Ftree
//! on PGFTs from hundreds to over 100,000 end nodes, and of OpenSM's ftree on
//! the same fabric in the same run where ibsim can hold it (seed 001 §7.4,
//! §8.6 A8: "Dmodc ≥ 15× faster than OpenSM"). Build with `--release`.
//!
//! OpenSM's time is the span its log gives from "building routing with
//! 'ftree'" to "FatTree routing is done" (fabric construction, ranking,
//! indexing and LFT filling, i.e. the same work as ours; not discovery, LID
//! assignment or the LFT upload), run with `-D 0x07` so no dump is written.
//! Its whole `opensm -o` wall time (discovery through ibsim included) is
//! printed too.

use crate::ibsim::{self, OpensmOptions};
use crate::route::check_tables;
use anyhow::{bail, Result};
use clap::Args;
use flitnet_core::routing::registry;
use flitnet_core::topology::generators::{kary_ntree, pgft};
use flitnet_core::topology::{FaultSet, PgftParams, Topology};
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct BenchRoutesArgs {
    /// Fabrics, comma-separated: preset host counts (512, 4096, 8640, 32768,
    /// 110592) or topology files.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "512,4096,8640,32768,110592"
    )]
    pub sizes: Vec<String>,
    /// Our engines to time.
    #[arg(long, value_delimiter = ',', default_value = "dmodk,dmodc,ftree")]
    pub engines: Vec<String>,
    /// Run OpenSM's ftree on fabrics up to this many hosts (0: never).
    #[arg(long, default_value_t = 8640)]
    pub opensm_max_hosts: usize,
    /// Timing runs per engine and fabric; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Check every table set with the checker (delivery only) up to this many hosts.
    #[arg(long, default_value_t = 8640)]
    pub check_max_hosts: usize,
}

/// The preset fabrics (seed 001 §7.4 asks for RLFT-like PGFTs from ~10³ to
/// tens of thousands of nodes; §9 item 17 for the 8640-node stand-in).
pub fn preset(size: &str) -> Result<Option<Topology>> {
    let pg = |m: &[u32], w: &[u32], p: &[u32]| {
        pgft(&PgftParams {
            m: m.to_vec(),
            w: w.to_vec(),
            p: p.to_vec(),
        })
    };
    Ok(Some(match size {
        "512" => kary_ntree(8, 3)?,
        "4096" => kary_ntree(16, 3)?,
        // = topologies/pgft-8640.yaml
        "8640" => pg(&[24, 24, 15], &[1, 24, 2], &[1, 1, 3])?,
        "32768" => kary_ntree(32, 3)?,
        // Blocking factor 4 at the leaves: 2848 switches, 315 M LFT entries.
        "110592" => pg(&[64, 32, 54], &[1, 16, 16], &[1, 1, 1])?,
        _ => return Ok(None),
    }))
}

struct Row {
    name: String,
    hosts: usize,
    switches: usize,
    ours: Vec<(String, Option<Duration>, String)>,
    opensm: Option<Result<(Duration, Option<Duration>), String>>,
}

pub fn run_routes(args: BenchRoutesArgs) -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!("warning: debug build; times are meaningless (cargo run --release -p flitctl -- bench routes)");
    }
    let osm_missing = ibsim::unavailable_reason();
    if let Some(why) = &osm_missing {
        eprintln!("OpenSM comparison skipped: {why}");
    }
    let mut rows = Vec::new();
    for size in &args.sizes {
        let topo = match preset(size)? {
            Some(t) => t,
            None if Path::new(size).exists() => crate::topo::load(Path::new(size))?,
            None => {
                bail!("--sizes {size}: not a preset (512, 4096, 8640, 32768, 110592) nor a file")
            }
        };
        eprintln!(
            "{}: {} hosts, {} switches",
            topo.name,
            topo.num_hosts(),
            topo.num_switches()
        );
        let mut row = Row {
            name: topo.name.clone(),
            hosts: topo.num_hosts(),
            switches: topo.num_switches(),
            ours: Vec::new(),
            opensm: None,
        };
        for e in &args.engines {
            let engine = registry::engine(e)?;
            let mut best: Option<Duration> = None;
            let mut note = String::new();
            for _ in 0..args.repeat.max(1) {
                let t0 = Instant::now();
                let res = engine.route(&topo, &FaultSet::none());
                let dt = t0.elapsed();
                match res {
                    Ok(tables) => {
                        best = Some(best.map_or(dt, |b| b.min(dt)));
                        if note.is_empty() && topo.num_hosts() <= args.check_max_hosts {
                            let r = check_tables(&topo, &FaultSet::none(), &tables, false);
                            note = if r.is_ok() {
                                "ok".into()
                            } else {
                                format!("checker: {} pairs failed", r.failed_pairs)
                            };
                        }
                    }
                    Err(err) => {
                        note = err.to_string();
                        break;
                    }
                }
            }
            eprintln!(
                "  {e}: {} {note}",
                best.map_or("-".into(), |b| format!("{:.1} ms", b.as_secs_f64() * 1e3))
            );
            row.ours.push((e.clone(), best, note));
        }
        if osm_missing.is_none() && topo.num_hosts() <= args.opensm_max_hosts {
            let opts = OpensmOptions {
                timeout: Duration::from_secs(900),
                dumps: false,
                ..OpensmOptions::default()
            };
            let r = ibsim::run_opensm(&topo, &FaultSet::none(), "ftree", &opts)
                .map(|run| (run.wall, run.routing_span))
                .map_err(|e| format!("{e:#}"));
            match &r {
                Ok((wall, span)) => eprintln!(
                    "  opensm ftree: routing {} (opensm -o wall {:.2} s)",
                    span.map_or("?".into(), |s| format!("{:.1} ms", s.as_secs_f64() * 1e3)),
                    wall.as_secs_f64()
                ),
                Err(e) => eprintln!("  opensm ftree: {e}"),
            }
            row.opensm = Some(r);
        }
        rows.push(row);
    }
    print!("{}", render(&args.engines, &rows));
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn render(engines: &[String], rows: &[Row]) -> String {
    let mut head: Vec<String> = vec!["fabric".into(), "hosts".into(), "switches".into()];
    head.extend(engines.iter().map(|e| format!("{e} ms")));
    head.extend(["opensm ftree ms".into(), "opensm -o wall s".into()]);
    head.extend(engines.iter().map(|e| format!("opensm/{e}")));
    let mut table = vec![head];
    for r in rows {
        let mut line = vec![r.name.clone(), r.hosts.to_string(), r.switches.to_string()];
        line.extend(r.ours.iter().map(|(_, t, _)| t.map_or("-".into(), ms)));
        let span = match &r.opensm {
            Some(Ok((wall, span))) => {
                line.push(span.map_or("?".into(), ms));
                line.push(format!("{:.2}", wall.as_secs_f64()));
                *span
            }
            Some(Err(_)) => {
                line.extend(["failed".into(), "-".into()]);
                None
            }
            None => {
                line.extend(["-".into(), "-".into()]);
                None
            }
        };
        line.extend(r.ours.iter().map(|(_, t, _)| match (span, t) {
            (Some(s), Some(t)) if !t.is_zero() => {
                format!("{:.1}x", s.as_secs_f64() / t.as_secs_f64())
            }
            _ => "-".into(),
        }));
        table.push(line);
    }
    let widths: Vec<usize> = (0..table[0].len())
        .map(|i| {
            table
                .iter()
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in &table {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        out += &cells.join("  ");
        out.push('\n');
    }
    for r in rows {
        for (e, _, note) in &r.ours {
            if note != "ok" && !note.is_empty() {
                out += &format!("{} {e}: {note}\n", r.name);
            }
        }
        if let Some(Err(e)) = &r.opensm {
            out += &format!("{} opensm: {e}\n", r.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_the_host_counts_they_are_named_after() {
        for s in ["512", "4096", "8640"] {
            let t = preset(s).unwrap().unwrap();
            assert_eq!(t.num_hosts().to_string(), s);
        }
        assert_eq!(preset("8640").unwrap().unwrap().num_switches(), 768);
        assert!(preset("7").unwrap().is_none());
    }

    #[test]
    fn render_puts_ratios_of_opensm_to_ours() {
        let rows = vec![Row {
            name: "t".into(),
            hosts: 16,
            switches: 8,
            ours: vec![("dmodc".into(), Some(Duration::from_millis(2)), "ok".into())],
            opensm: Some(Ok((
                Duration::from_secs(1),
                Some(Duration::from_millis(30)),
            ))),
        }];
        let text = render(&["dmodc".into()], &rows);
        assert!(text.contains("15.0x"), "{text}");
        assert!(text.contains("30.0"), "{text}");
    }
}
