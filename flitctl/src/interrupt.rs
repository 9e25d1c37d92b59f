//! SIGINT and SIGTERM: a run stops traffic, collects what the daemons have,
//! prints its report marked "interrupted" and stops every daemon, instead
//! of dying with them still running. A second signal of the same kind ends
//! flitctl at once (the daemons then die with it: they are started with
//! `PR_SET_PDEATHSIG`, see `fabric::spawn_daemon`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 0 = none; else the signal number that came first.
static RECEIVED: AtomicUsize = AtomicUsize::new(0);

/// Installs the handlers (once, at start; later calls do nothing new).
pub fn install() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        let seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Registered first, so that it sees the flag as the previous
        // signal left it: the second signal exits.
        signal_hook::flag::register_conditional_shutdown(signal, 130, seen.clone())?;
        signal_hook::flag::register(signal, seen)?;
        // SAFETY: the action only does an atomic compare-and-swap, which
        // is async-signal-safe.
        unsafe {
            signal_hook::low_level::register(signal, move || {
                let _ = RECEIVED.compare_exchange(
                    0,
                    signal as usize,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            })?;
        }
    }
    Ok(())
}

/// The signal that interrupted the run (`SIGINT`, `SIGTERM`), if one came.
pub fn received() -> Option<&'static str> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s if s == signal_hook::consts::SIGINT as usize => Some("SIGINT"),
        s if s == signal_hook::consts::SIGTERM as usize => Some("SIGTERM"),
        _ => Some("a signal"),
    }
}

pub fn requested() -> bool {
    received().is_some()
}

/// Sleeps `d`, waking early on a signal; false if interrupted.
pub fn sleep(d: Duration) -> bool {
    let until = Instant::now() + d;
    loop {
        if requested() {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(20)));
    }
}
