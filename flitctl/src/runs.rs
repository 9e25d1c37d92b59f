//! `flitctl runs` and `flitctl down --all`: this user's run directories in
//! the temp directory, listed, cleaned up, or stopped and removed.

use crate::rundir::{self, RunInfo};
use anyhow::Result;

fn describe(r: &RunInfo) -> String {
    let state = match (r.controller, r.live_daemons) {
        (Some(pid), n) => format!("running (controller pid {pid}, {n} daemons)"),
        (None, 0) => "finished".to_string(),
        (None, n) => format!("orphaned ({n} daemons, no controller)"),
    };
    format!(
        "{}  {}  {:.1} MB  {} ago",
        r.path.display(),
        state,
        r.bytes as f64 / 1e6,
        age(r.age_s)
    )
}

fn age(s: u64) -> String {
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

/// `flitctl runs [--clean]`: lists them; `clean` removes those no live
/// process uses (a running fabric is left for `flitctl down`).
pub fn list(clean: bool) -> Result<()> {
    let runs = rundir::list()?;
    if runs.is_empty() {
        println!("no run directories in {}", std::env::temp_dir().display());
    }
    for r in &runs {
        println!("{}", describe(r));
        if clean {
            if r.controller.is_some() || r.live_daemons > 0 {
                println!(
                    "  kept: in use (stop it with `flitctl down {}`)",
                    r.path.display()
                );
            } else {
                std::fs::remove_dir_all(&r.path)?;
                println!("  removed");
            }
        }
    }
    Ok(())
}

/// `flitctl down --all`: stops the fabric of every run directory whose
/// controller is gone (a controller still running stops its own), and
/// removes the directories.
pub fn down_all() -> Result<()> {
    for r in rundir::list()? {
        if let Some(pid) = r.controller {
            println!(
                "{}: its controller (pid {pid}) is running: left to it (send it SIGTERM)",
                r.path.display()
            );
            continue;
        }
        if r.live_daemons > 0 {
            let done = crate::fabric::down(&r.path)?;
            for why in &done.refused {
                println!("{}: left alone: {why}", r.path.display());
            }
            println!(
                "{}: {} daemons stopped ({} killed)",
                r.path.display(),
                r.live_daemons,
                done.killed
            );
        }
        std::fs::remove_dir_all(&r.path)?;
        println!("{}: removed", r.path.display());
    }
    Ok(())
}
