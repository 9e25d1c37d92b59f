//! The daemons' notion of time: CLOCK_MONOTONIC in nanoseconds, dilated.
//!
//! CLOCK_MONOTONIC is shared by every process on one machine (and every
//! container on one kernel), so a message's birth time stamped by one
//! `hostd` can be compared with its arrival time at another.
//!
//! **Time dilation** (docs/fidelity.md, after "DieCast: Testing Distributed
//! Systems with an Accurate Scale Model"): with a factor N, every process of
//! a run reads *emulated* time `wall / N` from [`now_ns`], so every emulated
//! duration (flit times, propagation, keepalives, traffic arrivals, fault
//! timeline) lasts N times longer in wall time, and a machine too slow for
//! the fabric at full speed keeps up with it. The origin is 0 (not the run's
//! start) so that processes started apart, or in containers built before the
//! run, agree on emulated time without sharing anything but the factor. The
//! core state machines only ever see emulated time; the event loop converts
//! their deadlines back to wall time ([`to_wall_ns`]) to sleep.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The process's dilation factor (1: emulated time is wall time).
static DILATION: AtomicU32 = AtomicU32::new(1);

/// Largest factor accepted: past this a second of emulated time lasts
/// over a quarter of an hour.
pub const MAX_DILATION: u32 = flitnet_core::control::limits::MAX_TIME_DILATION;

/// Sets the process's dilation factor (clamped to `1..=MAX_DILATION`).
/// Called once at start, before any time is read.
pub fn set_dilation(factor: u32) {
    DILATION.store(factor.clamp(1, MAX_DILATION), Ordering::Relaxed);
}

/// The process's dilation factor.
pub fn dilation() -> u32 {
    DILATION.load(Ordering::Relaxed)
}

/// Share of a flit time by which a sleeping daemon may find input late
/// ([`input_slack_ns`]).
pub const INPUT_SLACK_FLIT_TIMES: f64 = 0.5;

/// The input slack of a process whose links carry `bandwidth` flits per
/// emulated second: [`INPUT_SLACK_FLIT_TIMES`] of a flit time, in wall ns
/// (so the dilation factor must be set first). A shm producer does not
/// ring the doorbell of a neighbour that sleeps but wakes by itself within
/// the slack: the neighbour finds the datagram then. A wake-up costs more
/// CPU than the work it does (two context switches, a pipe write and a
/// ppoll, against a few microseconds of state machine), and under dilation
/// a flit time is hundreds of wall microseconds in which a busy daemon
/// usually has a timer of its own. Datagrams arrive up to a pacing quantum
/// before their flits are due (docs/wire.md, "Serialisation"), so finding
/// one a little later rarely makes a flit late; the fidelity verdict counts
/// it when it does. Unlimited links (None) have no flit time and no slack.
pub fn input_slack_ns(bandwidth: Option<u64>) -> u64 {
    bandwidth.filter(|&b| b > 0).map_or(0, |b| {
        (1e9 / b as f64 * INPUT_SLACK_FLIT_TIMES * dilation() as f64) as u64
    })
}

/// Nanoseconds of CLOCK_MONOTONIC, undilated.
pub fn wall_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC
    // is always available on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Emulated nanoseconds: CLOCK_MONOTONIC divided by the dilation factor.
pub fn now_ns() -> u64 {
    wall_ns() / dilation() as u64
}

/// The wall instant (CLOCK_MONOTONIC ns) at which emulated time reaches
/// `emulated_ns`.
pub fn to_wall_ns(emulated_ns: u64) -> u64 {
    emulated_ns.saturating_mul(dilation() as u64)
}

/// How long an emulated duration lasts in wall time.
pub fn wall(emulated: Duration) -> Duration {
    emulated.saturating_mul(dilation())
}

/// How much emulated time a wall duration is.
pub fn emulated(wall: Duration) -> Duration {
    wall / dilation()
}

/// A factor given as `N` or `auto` (`--time-dilation`, the scenario key
/// `time-dilation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dilation {
    /// Chosen by calibration before the run.
    Auto,
    Fixed(u32),
}

impl std::str::FromStr for Dilation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(Dilation::Auto);
        }
        match s.parse::<u32>() {
            Ok(n) if (1..=MAX_DILATION).contains(&n) => Ok(Dilation::Fixed(n)),
            _ => Err(format!(
                "time dilation `{s}` must be `auto` or a whole factor 1..={MAX_DILATION}"
            )),
        }
    }
}

impl std::fmt::Display for Dilation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dilation::Auto => write!(f, "auto"),
            Dilation::Fixed(n) => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a > 0);
        assert!(wall_ns() >= b);
    }

    #[test]
    fn factors_parse_and_bad_ones_are_named() {
        assert_eq!("auto".parse::<Dilation>(), Ok(Dilation::Auto));
        assert_eq!("8".parse::<Dilation>(), Ok(Dilation::Fixed(8)));
        let e = "0".parse::<Dilation>().unwrap_err();
        assert!(e.contains("`0`") && e.contains("auto"), "{e}");
        assert!("fast".parse::<Dilation>().is_err());
        assert!("2000".parse::<Dilation>().is_err());
    }
}
