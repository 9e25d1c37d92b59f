//! The cabling of a shm-transport fabric: a private directory (mode 0700)
//! under /dev/shm holding one ring file per link (`link-<id>`) and one
//! doorbell per daemon (`n<index>.bell`), all mode 0600, removed when the
//! fabric goes down (docs/wire.md, "Shared-memory transport").

use anyhow::{Context, Result};
use flitnet_core::control::FabricParams;
use flitnet_core::topology::{LinkId, Topology};
use flitnet_runtime::shm;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Where the ring directories go: a tmpfs, so that the rings are memory and
/// never written back to a disk.
const SHM_ROOT: &str = "/dev/shm";

/// A fabric's ring directory; removed on drop unless kept.
#[derive(Debug)]
pub struct ShmNet {
    dir: PathBuf,
    keep: bool,
    /// Bytes of one link file.
    pub link_bytes: usize,
}

/// The ring file of `link`.
pub fn ring_path(dir: &Path, link: LinkId) -> PathBuf {
    dir.join(format!("link-{link}"))
}

/// The doorbell of the daemon with node index `index`.
pub fn bell_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("n{index}.bell"))
}

impl ShmNet {
    /// Creates the directory, a ring file for every link of `topo` and a
    /// doorbell for every node. The directory is named after `run_dir`'s
    /// own name and this process, under /dev/shm (or inside `run_dir` where
    /// there is no /dev/shm).
    pub fn create(run_dir: &Path, topo: &Topology, params: &FabricParams) -> Result<ShmNet> {
        let base = run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!("flitnet-{base}-{}-{nanos:x}", std::process::id());
        let root = Path::new(SHM_ROOT);
        let dir = if root.is_dir() {
            root.join(name)
        } else {
            run_dir.join("rings")
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating the ring directory {}", dir.display()))?;
        let capacity = shm::ring_capacity(params);
        let net = ShmNet {
            dir,
            keep: false,
            link_bytes: shm::file_len(capacity),
        };
        for l in 0..topo.links.len() {
            shm::create_link_file(&ring_path(&net.dir, l as LinkId), capacity)?;
        }
        for i in 0..topo.nodes().count() {
            shm::create_doorbell(&bell_path(&net.dir, i))?;
        }
        Ok(net)
    }

    /// Bytes of one link file (both rings) for a fabric of `params`.
    pub fn link_file_bytes(params: &FabricParams) -> usize {
        shm::file_len(shm::ring_capacity(params))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Leaves the directory behind (a detached fabric; `flitctl down`
    /// removes it).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Sets the carrier of `link` down (or up): a pulled cable.
    pub fn set_carrier(&self, link: LinkId, up: bool) -> Result<()> {
        shm::set_carrier(&ring_path(&self.dir, link), up)
    }

    /// Removes a ring directory (what `flitctl down` does).
    pub fn remove(dir: &Path) -> Result<()> {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", dir.display()))
            }
            _ => Ok(()),
        }
    }
}

impl Drop for ShmNet {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
