//! Which process a PID is: its start time (`/proc/PID/stat` field 22, clock
//! ticks after boot) and executable (`/proc/PID/exe`). A PID alone names a
//! different process once the first one exits and the kernel hands the
//! number out again, so `flitctl down` signals a PID only when both still
//! match what `state.json` recorded when the daemon started.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A process as recorded when it started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    /// `/proc/PID/stat` field 22: when it started, in clock ticks after boot.
    pub start_time: u64,
    /// Its executable.
    pub exe: PathBuf,
}

/// Field 22 (`starttime`) of `/proc/<pid>/stat`.
pub fn start_time(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_start_time(&stat).with_context(|| format!("{path}: no start time"))
}

/// The command name (field 2) is in parentheses and may itself hold spaces
/// and parentheses: fields are counted from the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow; starttime is field 22.
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Whether `pid` has exited: no such process, or a zombie waiting to be
/// reaped (it has a stat file but no executable any more).
pub fn exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    parse_state(&stat).is_none_or(|s| s == 'Z' || s == 'X')
}

/// Field 3 (`state`): R, S, D, T (stopped), Z (zombie), …
fn parse_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// `/proc/<pid>/exe`, without the ` (deleted)` the kernel appends when the
/// file was replaced (a rebuilt binary is still the same daemon).
pub fn exe(pid: u32) -> Result<PathBuf> {
    let link = std::fs::read_link(format!("/proc/{pid}/exe"))
        .with_context(|| format!("reading /proc/{pid}/exe"))?;
    let text = link.to_string_lossy();
    Ok(match text.strip_suffix(" (deleted)") {
        Some(t) => PathBuf::from(t),
        None => link,
    })
}

impl ProcessId {
    /// The process `pid`, started from `exe` (made absolute and canonical,
    /// as `/proc/PID/exe` shows it).
    pub fn of(pid: u32, exe: &Path) -> Result<ProcessId> {
        Ok(ProcessId {
            pid,
            start_time: start_time(pid)?,
            exe: exe.canonicalize().unwrap_or_else(|_| exe.to_path_buf()),
        })
    }

    /// This process.
    pub fn current() -> Result<ProcessId> {
        let pid = std::process::id();
        Ok(ProcessId {
            pid,
            start_time: start_time(pid)?,
            exe: exe(pid)?,
        })
    }

    /// Ok if `pid` is still this process; else why not (gone, or the PID
    /// now belongs to a process with another start time or executable).
    pub fn check(&self) -> Result<()> {
        let pid = self.pid;
        let Ok(now) = start_time(pid) else {
            bail!("pid {pid} is not running");
        };
        if exited(pid) {
            bail!("pid {pid} has exited");
        }
        if now != self.start_time {
            bail!(
                "pid {pid} started at tick {now}, not at tick {} as recorded: another \
                 process has the PID now",
                self.start_time
            );
        }
        // Readable for our own processes and for root; a process we may not
        // inspect is not one we started.
        let exe = exe(pid).with_context(|| format!("pid {pid}"))?;
        if exe != self.exe {
            bail!(
                "pid {pid} runs {}, not {} as recorded",
                exe.display(),
                self.exe.display()
            );
        }
        Ok(())
    }

    pub fn is_running(&self) -> bool {
        self.check().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22_even_with_parentheses_in_the_name() {
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("garbage"), None);
        assert_eq!(parse_state(stat), Some('S'));
    }

    #[test]
    fn a_process_is_recognised_and_a_different_start_time_or_exe_is_refused() {
        let me = ProcessId::current().unwrap();
        me.check().unwrap();
        let reused = ProcessId {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        let err = reused.check().unwrap_err().to_string();
        assert!(err.contains("another process has the PID"), "{err}");
        let other_exe = ProcessId {
            exe: "/usr/sbin/switchd-impostor".into(),
            ..me.clone()
        };
        assert!(other_exe.check().unwrap_err().to_string().contains("runs "));
        let gone = ProcessId {
            pid: u32::MAX / 2,
            ..me
        };
        assert!(gone
            .check()
            .unwrap_err()
            .to_string()
            .contains("not running"));
    }
}
