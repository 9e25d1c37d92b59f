//! Run directories: where a fabric's configs, logs, state and event log go.
//!
//! flitctl runs as root (the Ethernet transport needs it) on machines other
//! users share, so a run directory is made private and fresh: a default one
//! is created by `mkdtemp` (mode 0700, an unpredictable name, never an
//! existing directory); a directory the user names is created 0700 if it
//! is missing, and refused if it exists but is a symlink, belongs to
//! another user, or lets other users write into it. Files inside are opened
//! with `O_NOFOLLOW` and mode 0600 (the configs and `state.json` hold the
//! fabric's control token). A marker file tells `flitctl runs` which
//! directories are run directories.

use anyhow::{bail, Context, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Name of the file that marks a run directory.
pub const MARKER: &str = ".flitnet-run";

/// Prefix of default run directory names (`flitnet-up-Xa83Kq`).
pub const PREFIX: &str = "flitnet-";

/// A run directory, and whether it goes when the run ends well.
#[derive(Debug)]
pub struct RunDir {
    pub path: PathBuf,
    /// Made by flitctl for this run (no `--run-dir`) and not `--keep`:
    /// removed when the command succeeds ([`finish`]).
    pub remove_after: bool,
}

/// Creates the run directory for a `what` run (`up`, `chaos`, `run`):
/// `requested` if given (see the module doc for what is refused), else a
/// fresh private directory in the temp dir, removed after a clean run
/// unless `keep`.
pub fn create(requested: Option<&Path>, what: &str, keep: bool) -> Result<RunDir> {
    let (path, fresh) = match requested {
        Some(p) => (prepare_given(p)?, false),
        None => (make_temp(what)?, true),
    };
    write_new(&path.join(MARKER), what.as_bytes())?;
    Ok(RunDir {
        path,
        remove_after: fresh && !keep,
    })
}

/// `mkdtemp($TMPDIR/flitnet-<what>-XXXXXX)`: created exclusively, 0700,
/// with a name nobody can guess ahead.
fn make_temp(what: &str) -> Result<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let template = std::env::temp_dir().join(format!("{PREFIX}{what}-XXXXXX"));
    let mut bytes = template.into_os_string().into_vec();
    bytes.push(0);
    // SAFETY: `bytes` is a NUL-terminated buffer that mkdtemp rewrites in
    // place (the six X's), and it outlives the call.
    let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if made.is_null() {
        let err = std::io::Error::last_os_error();
        bytes.pop();
        return Err(err).with_context(|| {
            format!(
                "creating a run directory {}",
                String::from_utf8_lossy(&bytes)
            )
        });
    }
    bytes.pop();
    Ok(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

/// A directory the user named: created 0700 if missing (its parents with
/// default permissions), else checked.
fn prepare_given(path: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(path) {
                Ok(()) => Ok(path.to_path_buf()),
                // Someone made it in between: check it like any existing one.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => check_existing(path),
                Err(e) => {
                    Err(e).with_context(|| format!("creating run directory {}", path.display()))
                }
            }
        }
        Err(e) => Err(e).with_context(|| format!("run directory {}", path.display())),
        Ok(_) => check_existing(path),
    }
}

/// An existing run directory must be a real directory of ours that no
/// other user can write into (or they could plant symlinks in it).
fn check_existing(path: &Path) -> Result<PathBuf> {
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("run directory {}", path.display()))?;
    let shown = path.display();
    if meta.file_type().is_symlink() {
        bail!("run directory {shown} is a symlink: refused (name the directory itself)");
    }
    if !meta.is_dir() {
        bail!("run directory {shown} exists and is not a directory");
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        bail!(
            "run directory {shown} belongs to uid {}, not to this user (uid {me}): refused \
             (its owner could plant files in it); pick another directory",
            meta.uid()
        );
    }
    if meta.mode() & 0o022 != 0 {
        bail!(
            "run directory {shown} is writable by other users (mode {:o}): refused; \
             `chmod go-w` it or pick another directory",
            meta.mode() & 0o7777
        );
    }
    Ok(path.to_path_buf())
}

fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    o
}

/// Refuses anything but a regular file of ours (a FIFO or device in a run
/// directory is a plant).
fn checked(file: File, path: &Path) -> Result<File> {
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        bail!("{} is not a regular file: refused", path.display());
    }
    Ok(file)
}

/// Creates (or truncates) `path` for writing: mode 0600, no symlink
/// followed.
pub fn create_file(path: &Path) -> Result<File> {
    let file = options()
        .create(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    checked(file, path)
}

/// Opens `path` for appending, creating it 0600; no symlink followed.
pub fn append_file(path: &Path) -> Result<File> {
    let file = options()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    checked(file, path)
}

/// Writes `bytes` to `path` ([`create_file`]).
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    create_file(path)?
        .write_all(bytes.as_ref())
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes a file that must not exist yet (`O_EXCL`).
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = match options().create_new(true).open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // A run directory used again: the marker is ours.
            return write(path, bytes);
        }
        other => other.with_context(|| format!("creating {}", path.display()))?,
    };
    file.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// Replaces `path` atomically: a reader sees the old or the new content,
/// never half of it (`state.json` is rewritten as each daemon starts).
pub fn replace(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    let name = path
        .file_name()
        .context("a file path has a name")?
        .to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.new"));
    write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Temporary run directories of this flitctl process ([`RunDir::remove_after`]).
static TEMPORARY: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Marks `dir` for removal when the command ends ([`finish`]).
pub fn remove_when_done(dir: &RunDir) {
    if dir.remove_after {
        TEMPORARY
            .lock()
            .expect("run dirs poisoned")
            .push(dir.path.clone());
    }
}

/// Whether `path` goes when the command ends well.
pub fn removed_when_done(path: &Path) -> bool {
    TEMPORARY
        .lock()
        .expect("run dirs poisoned")
        .iter()
        .any(|p| p == path)
}

/// At the end of a command: a command that succeeded and was not
/// interrupted removes its temporary run directories; otherwise they stay
/// for a look (their paths are printed), and `flitctl runs --clean`
/// removes them later.
pub fn finish(succeeded: bool) {
    let dirs = std::mem::take(&mut *TEMPORARY.lock().expect("run dirs poisoned"));
    for path in dirs {
        if succeeded && !crate::interrupt::requested() {
            if let Err(e) = std::fs::remove_dir_all(&path) {
                tracing::warn!(dir = %path.display(), error = %e, "run directory not removed");
            }
        } else {
            eprintln!("run directory kept: {}", path.display());
        }
    }
}

/// One run directory found by [`list`].
#[derive(Debug)]
pub struct RunInfo {
    pub path: PathBuf,
    /// Seconds since it was last modified.
    pub age_s: u64,
    pub bytes: u64,
    /// Daemons of its `state.json` still running (checked by start time
    /// and executable, as `flitctl down` does).
    pub live_daemons: usize,
    /// Its controller, if still running.
    pub controller: Option<u32>,
}

/// The run directories of this user in the temp dir.
pub fn list() -> Result<Vec<RunInfo>> {
    let tmp = std::env::temp_dir();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(&tmp).with_context(|| format!("reading {}", tmp.display()))? {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me || !entry.path().join(MARKER).is_file() {
            continue;
        }
        let path = entry.path();
        let state = crate::state::FabricState::read(&path).ok();
        let live_daemons = state.as_ref().map_or(0, |s| s.live_daemons().len());
        let controller = state
            .as_ref()
            .and_then(|s| s.controller.as_ref())
            .filter(|c| c.is_running())
            .map(|c| c.pid);
        runs.push(RunInfo {
            age_s: meta.modified()?.elapsed().map_or(0, |d| d.as_secs()),
            bytes: dir_size(&path),
            path,
            live_daemons,
            controller,
        });
    }
    runs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(runs)
}

fn dir_size(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.path().symlink_metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("rundir-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn default_directories_are_fresh_private_and_unpredictable() {
        let a = create(None, "unit", false).unwrap();
        let b = create(None, "unit", false).unwrap();
        assert_ne!(a.path, b.path);
        for d in [&a, &b] {
            let mode = std::fs::metadata(&d.path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", d.path.display());
            assert!(d.remove_after);
            std::fs::remove_dir_all(&d.path).unwrap();
        }
        assert!(!create(None, "unit", true)
            .map(|d| {
                std::fs::remove_dir_all(&d.path).unwrap();
                d.remove_after
            })
            .unwrap());
    }

    #[test]
    fn files_are_0600_and_symlinks_are_not_followed() {
        let dir = scratch("files");
        let d = create(Some(&dir), "unit", false).unwrap();
        assert!(!d.remove_after);
        write(&dir.join("a.json"), b"{}").unwrap();
        let mode = std::fs::metadata(dir.join("a.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let target = dir.join("target");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("events.jsonl")).unwrap();
        let err = create_file(&dir.join("events.jsonl")).unwrap_err();
        assert!(format!("{err:#}").contains("events.jsonl"), "{err:#}");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_named_directory_that_others_can_write_or_a_symlink_is_refused() {
        let dir = scratch("open");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = format!("{:#}", create(Some(&dir), "unit", false).unwrap_err());
        assert!(err.contains("writable by other users"), "{err}");
        let link = scratch("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let err = format!("{:#}", create(Some(&link), "unit", false).unwrap_err());
        assert!(err.contains("is a symlink"), "{err}");
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_temporary_directory_goes_after_success_and_stays_after_failure() {
        let d = create(None, "unit", false).unwrap();
        remove_when_done(&d);
        assert!(removed_when_done(&d.path));
        finish(false);
        assert!(d.path.exists());
        assert!(!removed_when_done(&d.path));
        remove_when_done(&d);
        finish(true);
        assert!(!d.path.exists());
    }
}
