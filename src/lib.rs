//! Support code for flitnet's end-to-end tests (in `tests/`): they start the
//! real `flitctl`, `switchd` and `hostd` binaries, as a user would.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Once;

/// The workspace root.
pub fn workspace_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Directory of the binaries of the profile the tests were built with.
pub fn bin_dir() -> PathBuf {
    // tests run from target/<profile>/deps/<test-binary>
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|p| p.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

static BUILD: Once = Once::new();

/// The binaries the end-to-end tests start.
const BINARIES: [&str; 3] = ["switchd", "hostd", "flitctl"];

/// Path of a workspace binary. `cargo test --workspace` builds them all
/// before running tests (each daemon crate has integration tests of its
/// own, which is what makes cargo build its binary); when a single test is
/// run by hand some may be missing, so they are built once on demand.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    if BINARIES.iter().any(|b| !bin_dir().join(b).exists()) {
        BUILD.call_once(|| {
            let release = bin_dir().ends_with("release");
            let mut cmd = Command::new(env!("CARGO"));
            cmd.current_dir(workspace_dir())
                .args(["build", "-p", "switchd", "-p", "hostd", "-p", "flitctl"]);
            if release {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("running cargo build");
            assert!(status.success(), "building the daemons failed");
        });
    }
    path
}

/// A topology file from `topologies/`.
pub fn topology(name: &str) -> PathBuf {
    workspace_dir().join("topologies").join(name)
}

/// Runs `flitctl` with `args`; returns its output whatever the exit code.
pub fn flitctl(args: &[&str]) -> Result<Output> {
    Command::new(bin("flitctl"))
        .args(args)
        .current_dir(workspace_dir())
        .output()
        .context("running flitctl")
}

/// Runs `flitctl … --json` and parses the JSON report it prints on stdout.
/// Fails with flitctl's stderr if it exits non-zero.
pub fn flitctl_json(args: &[&str]) -> Result<serde_json::Value> {
    let mut all: Vec<&str> = args.to_vec();
    all.push("--json");
    let out = flitctl(&all)?;
    if !out.status.success() {
        bail!(
            "flitctl {} failed ({}):\n{}",
            all.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "flitctl printed no JSON report:\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Number of live processes whose command line mentions `needle`
/// (to check that a run left nothing behind).
pub fn processes_matching(needle: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains(needle))
        .count()
}
