//! Support code for flitnet's end-to-end tests (in `tests/`): they start the
//! real `flitctl`, `switchd` and `hostd` binaries, as a user would.

pub mod prom;

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Once;

/// Whether a test must skip because a tool it needs is missing: locally it
/// says so and skips; under CI (`CI` set) a missing tool is a failure,
/// since CI installs every tool the tests use.
pub fn skip_without(available: bool, what: &str) -> bool {
    if available {
        return false;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} is missing, and CI installs it (.ci/run): failing instead of skipping"
    );
    println!("skipped: {what} is missing");
    true
}

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
const BINARIES: [&str; 4] = ["switchd", "hostd", "flitctl", "flitnet-experiments"];

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
            cmd.current_dir(workspace_dir()).args([
                "build",
                "-p",
                "switchd",
                "-p",
                "hostd",
                "-p",
                "flitctl",
                "-p",
                "flitnet-experiments",
            ]);
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
/// `up` and `chaos` run at time dilation 1 unless the test says otherwise:
/// the tests' timings were chosen for wall-clock speed, and CI time must
/// stay bounded (`auto`, the users' default, is tested in tests/fidelity.rs).
pub fn flitctl(args: &[&str]) -> Result<Output> {
    let mut args = args.to_vec();
    if matches!(args.first(), Some(&"up") | Some(&"chaos")) && !args.contains(&"--time-dilation") {
        args.extend(["--time-dilation", "1"]);
    }
    Command::new(bin("flitctl"))
        .args(&args)
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

/// The run directory of one end-to-end run (`flitctl … --run-dir DIR`):
/// fresh when made, removed when dropped, and the place to check that a
/// run left no daemon behind.
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// `$TMPDIR/flitnet-test-<name>-<pid>`, emptied if a crashed earlier
    /// run left it.
    pub fn new(name: &str) -> RunDir {
        let path = std::env::temp_dir().join(format!("flitnet-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        RunDir { path }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Runs `flitctl ARGS --run-dir DIR --json` ([`flitctl_json`]) and
    /// panics if any process of the run is still alive afterwards, whether
    /// flitctl succeeded or not.
    pub fn flitctl_json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let dir = self.path.to_str().expect("a UTF-8 temp dir");
        let mut all = args.to_vec();
        all.extend(["--run-dir", dir]);
        let result = flitctl_json(&all);
        let left = processes_matching(dir);
        assert_eq!(left, 0, "{left} daemons of {dir} left running");
        result
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
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

/// Support for the daemons' own CLI tests (`switchd/tests/cli.rs`,
/// `hostd/tests/cli.rs`): start a daemon binary on a configuration file
/// and check that it refuses it by name.
pub mod daemon_cli {
    use flitnet_core::control::{DaemonConfig, FabricParams, PortPeer, Role};
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// One daemon binary under test.
    pub struct DaemonCli {
        /// Its name (`switchd`, `hostd`): scratch directory and messages.
        pub name: &'static str,
        /// Its path (`env!("CARGO_BIN_EXE_…")`).
        pub exe: &'static str,
    }

    impl DaemonCli {
        /// A path in this test process's scratch directory.
        pub fn scratch(&self, file: &str) -> PathBuf {
            let dir =
                std::env::temp_dir().join(format!("{}-cli-{}", self.name, std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            dir.join(file)
        }

        /// Writes `text` to `file` in the scratch directory.
        pub fn write(&self, file: &str, text: &str) -> PathBuf {
            let path = self.scratch(file);
            std::fs::write(&path, text).unwrap();
            path
        }

        /// Writes `cfg` as JSON to `file` in the scratch directory.
        pub fn write_config(&self, file: &str, cfg: &DaemonConfig) -> PathBuf {
            self.write(file, &serde_json::to_string(cfg).unwrap())
        }

        /// Starts the daemon on `config`, asserts that it exits with an
        /// error naming the file and without a panic; returns its stderr.
        pub fn refused(&self, config: &Path) -> String {
            let out = Command::new(self.exe)
                .arg("--config")
                .arg(config)
                .output()
                .unwrap_or_else(|e| panic!("running {}: {e}", self.name));
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            let name = self.name;
            assert!(
                !out.status.success(),
                "{name} accepted {config:?}: {stderr}"
            );
            assert!(!stderr.contains("panicked"), "{name} panicked: {stderr}");
            assert!(
                stderr.contains(&config.display().to_string()),
                "the error does not name the file: {stderr}"
            );
            stderr
        }
    }

    /// A configuration named `s0` on loopback with the given role and ports.
    pub fn config(role: Role, ports: Vec<PortPeer>) -> DaemonConfig {
        DaemonConfig {
            name: "s0".into(),
            role,
            token: "t".into(),
            data_addr: "127.0.0.1:0".parse().unwrap(),
            control_addr: "127.0.0.1:0".parse().unwrap(),
            metrics_addr: None,
            ports,
            fabric: FabricParams::default(),
            seed: 1,
            events_addr: None,
            netns: None,
            doorbell: None,
            tun: None,
        }
    }
}
