//! `flitctl exec HOST -- CMD`: runs a program in a host's network namespace
//! on a running `--tun` fabric (docs/ip.md), like `ip netns exec` (which it
//! uses, so the namespace's `/etc/netns/<ns>/hosts` makes host names
//! resolve).

use crate::state::FabricState;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// The run directory of the fabric (default: the one running fabric
    /// of this user with IP interfaces, `flitctl runs`).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// The host, by its topology name (e.g. h03).
    pub host: String,
    /// The program and its arguments (after `--`).
    #[arg(required = true, last = true)]
    pub command: Vec<String>,
}

/// The network namespace of `host` in the fabric of `run_dir`.
pub fn host_netns(run_dir: &Path, host: &str) -> Result<String> {
    let state = FabricState::read(run_dir)?;
    let Some(tun) = &state.tun else {
        bail!(
            "{}: this fabric has no IP interfaces (bring it up with --tun)",
            run_dir.display()
        );
    };
    let Some(h) = tun.host(host) else {
        let names: Vec<&str> = tun.hosts.iter().map(|h| h.name.as_str()).collect();
        bail!(
            "no host {host} in {} (hosts: {})",
            run_dir.display(),
            names.join(" ")
        );
    };
    if state.live_daemons().is_empty() {
        bail!("{}: the fabric is not running", run_dir.display());
    }
    Ok(h.netns.clone())
}

/// The run directory of the one running `--tun` fabric.
fn find_run() -> Result<PathBuf> {
    let runs: Vec<PathBuf> = crate::rundir::list()?
        .into_iter()
        .filter(|r| r.live_daemons > 0)
        .filter(|r| FabricState::read(&r.path).is_ok_and(|s| s.tun.is_some()))
        .map(|r| r.path)
        .collect();
    match runs.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "no running fabric with IP interfaces (flitctl up ... --tun); or name its --run-dir"
        ),
        many => bail!(
            "several running fabrics with IP interfaces; name one with --run-dir: {}",
            many.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Replaces this process with `ip netns exec NS CMD...`.
pub fn run(args: ExecArgs) -> Result<()> {
    let run_dir = match args.run_dir {
        Some(d) => d,
        None => find_run()?,
    };
    let ns = host_netns(&run_dir, &args.host)?;
    let err = std::process::Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(&args.command)
        .exec();
    Err(err).context("running `ip netns exec` (iproute2)")
}
