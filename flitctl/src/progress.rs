//! Progress of a long traffic phase on stderr: once a second, how far the run
//! is and what the hosts have sent and delivered so far, so that a user
//! watching a 60 s run sees it move (and sees at once when delivery stalls).

use crate::fabric::Fabric;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// When to print progress lines.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// Only when stderr is a terminal.
    #[default]
    Auto,
    Always,
    Never,
}

/// Sleeps through a traffic phase, printing a progress line every
/// [`Progress::INTERVAL`] when enabled.
pub struct Progress {
    enabled: bool,
    start: Instant,
    total: Duration,
    last_flits: u64,
    last_at: Instant,
}

/// What the hosts have done so far (summed over all host reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostTotals {
    pub messages_sent: u64,
    pub messages_delivered: u64,
    pub flits_delivered: u64,
}

impl HostTotals {
    pub fn from_reports(reports: &crate::fabric::HostReports) -> Self {
        reports
            .iter()
            .fold(HostTotals::default(), |t, (_, r)| HostTotals {
                messages_sent: t.messages_sent + r.endpoint.source.messages_sent,
                messages_delivered: t.messages_delivered + r.endpoint.sink.delivered_messages,
                flits_delivered: t.flits_delivered + r.endpoint.sink.delivered_flits,
            })
    }
}

impl Progress {
    pub const INTERVAL: Duration = Duration::from_secs(1);

    /// Progress of a phase of `total` that started at `start`.
    pub fn new(mode: ProgressMode, start: Instant, total: Duration) -> Progress {
        let enabled = match mode {
            ProgressMode::Always => true,
            ProgressMode::Never => false,
            ProgressMode::Auto => std::io::stderr().is_terminal(),
        };
        Progress {
            enabled,
            start,
            total,
            last_flits: 0,
            last_at: start,
        }
    }

    /// Whether lines are printed.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Prints one progress line from the hosts' reports. A failed report
    /// request (a daemon just killed by a fault) skips the line; it never
    /// ends the run.
    pub fn print(&mut self, fabric: &Fabric) {
        if !self.enabled {
            return;
        }
        if let Ok(reports) = fabric.host_reports() {
            let totals = HostTotals::from_reports(&reports);
            eprintln!("{}", self.line(totals, Instant::now()));
            let _ = std::io::stderr().flush();
        }
    }

    /// One progress line; remembers the flit count for the next rate.
    fn line(&mut self, t: HostTotals, now: Instant) -> String {
        let dt = now.duration_since(self.last_at).as_secs_f64();
        let rate = if dt > 0.0 {
            t.flits_delivered.saturating_sub(self.last_flits) as f64 / dt
        } else {
            0.0
        };
        self.last_flits = t.flits_delivered;
        self.last_at = now;
        format!(
            "[{:>6.1}s / {:.1}s] sent {} msgs, delivered {}, in flight {}, {:.0} flits/s delivered",
            now.duration_since(self.start).as_secs_f64(),
            self.total.as_secs_f64(),
            t.messages_sent,
            t.messages_delivered,
            t.messages_sent.saturating_sub(t.messages_delivered),
            rate
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_shows_time_counts_and_the_rate_since_the_last_line() {
        let start = Instant::now();
        let mut p = Progress::new(ProgressMode::Always, start, Duration::from_secs(6));
        let t = HostTotals {
            messages_sent: 120,
            messages_delivered: 100,
            flits_delivered: 4000,
        };
        let line = p.line(t, start + Duration::from_secs(2));
        assert!(line.starts_with("[   2.0s / 6.0s]"), "{line}");
        assert!(
            line.contains("sent 120 msgs, delivered 100, in flight 20"),
            "{line}"
        );
        assert!(line.contains("2000 flits/s"), "{line}");
        let t2 = HostTotals {
            flits_delivered: 5000,
            ..t
        };
        let line = p.line(t2, start + Duration::from_secs(3));
        assert!(line.contains("1000 flits/s"), "{line}");
    }

    #[test]
    fn totals_sum_the_host_reports() {
        use flitnet_core::control::HostDaemonReport;
        use flitnet_core::topology::NodeRef;
        let mut busy = HostDaemonReport::default();
        busy.endpoint.source.messages_sent = 3;
        busy.endpoint.sink.delivered_messages = 2;
        busy.endpoint.sink.delivered_flits = 40;
        let reports = vec![
            (NodeRef::Host(0), busy),
            (NodeRef::Host(1), HostDaemonReport::default()),
        ];
        assert_eq!(
            HostTotals::from_reports(&reports),
            HostTotals {
                messages_sent: 3,
                messages_delivered: 2,
                flits_delivered: 40
            }
        );
    }
}
