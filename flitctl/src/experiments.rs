//! `flitctl reproduce`: the papers' experiments live in their own crate
//! (`experiments/`, binary `flitnet-experiments`), which builds on this
//! one; `flitctl` hands the command to that binary, found beside its own
//! (as `git` runs `git-<command>`).

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The experiments binary's name.
pub const EXPERIMENTS_BIN: &str = "flitnet-experiments";

/// Where the experiments binary is: beside this executable.
pub fn experiments_bin() -> Result<PathBuf> {
    let me = std::env::current_exe().context("finding flitctl's own path")?;
    let dir = me.parent().context("flitctl's directory")?;
    let bin = dir.join(EXPERIMENTS_BIN);
    if !bin.exists() {
        bail!(
            "`flitctl reproduce` runs {EXPERIMENTS_BIN}, which is not beside flitctl in {}: \
             build it with `cargo build --release -p flitnet-experiments` (or `cargo build \
             --release` at the workspace root)",
            dir.display()
        );
    }
    Ok(bin)
}

/// Runs `flitnet-experiments reproduce ARGS` and returns its outcome.
pub fn reproduce(args: &[String]) -> Result<()> {
    let bin = experiments_bin()?;
    let status = Command::new(&bin)
        .arg("reproduce")
        .args(args)
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    if !status.success() {
        bail!("{EXPERIMENTS_BIN} reproduce failed ({status})");
    }
    Ok(())
}
