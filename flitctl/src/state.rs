//! A run's `state.json`: what `flitctl down` and `flitctl runs` need to find
//! a fabric's processes again.

use crate::process::ProcessId;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::Path;

/// What `flitctl down` needs to find a fabric again: written (mode 0600:
/// it holds the token) before the first daemon starts and rewritten as
/// each one starts, so that a controller killed during bring-up leaves
/// nothing it cannot find.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FabricState {
    pub token: String,
    pub subnet: u8,
    pub daemons: Vec<DaemonRecord>,
    /// Ethernet transport: the fabric's network namespace.
    #[serde(default)]
    pub netns: Option<String>,
    /// Shm transport: the directory of the fabric's ring files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_dir: Option<std::path::PathBuf>,
    /// The flitctl process running the fabric.
    #[serde(default)]
    pub controller: Option<ProcessId>,
    /// `--tun`: the hosts' IP interfaces and namespaces (docs/ip.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tun: Option<crate::tun::TunState>,
}

/// One started daemon in `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DaemonRecord {
    pub name: String,
    pub control_addr: SocketAddr,
    #[serde(flatten)]
    pub process: ProcessId,
}

impl FabricState {
    pub const FILE: &'static str = "state.json";

    /// Reads `run_dir/state.json`.
    pub fn read(run_dir: &Path) -> Result<FabricState> {
        let path = run_dir.join(Self::FILE);
        serde_json::from_slice(
            &std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("parsing {}", path.display()))
    }

    /// The daemons still running (same PID, start time and executable as
    /// recorded).
    pub fn live_daemons(&self) -> Vec<&DaemonRecord> {
        self.daemons
            .iter()
            .filter(|d| d.process.is_running())
            .collect()
    }
}
