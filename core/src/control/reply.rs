//! Typed answers of the daemons to control requests. Each request has one
//! reply kind ([`Reply`]); the controller matches on it instead of looking
//! up JSON keys, so a renamed field is a compile error on both sides.

use crate::host::endpoint::{HostEndpoint, HostReport};
use crate::link::Link;
use crate::mechanism::sbrp::SbrpSwitchCounters;
use crate::switch::SwitchCounters;
use crate::topology::PortNo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a daemon answers to a successful request.
///
/// Externally tagged (`{"host-report": {...}}`): an internally tagged enum
/// makes serde buffer the body, and buffered maps lose their integer keys
/// (the per-flow counts are keyed by host id).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reply {
    /// The request was carried out; nothing to say.
    Done,
    /// Answer to [`super::Request::Ping`].
    Pong { name: String, role: NodeKind },
    /// Answer to [`super::Request::InFlight`].
    InFlight { in_flight_flits: u64 },
    /// A switch's answer to [`super::Request::Report`].
    SwitchReport(Box<SwitchReport>),
    /// A host's answer to [`super::Request::Report`].
    HostReport(Box<HostDaemonReport>),
    /// A host's answer to [`super::Request::ConfigureMechanism`]: what the
    /// mechanism's host half made of it, for its controller half
    /// ([`crate::mechanism::MechanismPlan::faults_answered`]).
    MechanismConfigured {
        answer: Option<crate::mechanism::NodeConfig>,
    },
}

/// Which kind of daemon answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    Switch,
    Host,
}

/// How late something happened against its schedule (a summary of a
/// [`crate::lateness::LatenessHistogram`]): timers an event loop fired,
/// flits links read after their release time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatenessSummary {
    /// Samples: timers fired, flits read.
    #[serde(alias = "timers")]
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// What the data transport did and refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportCounters {
    pub unknown_peer: u64,
    pub send_errors: u64,
    pub would_block: u64,
    /// Datagrams longer than the receive slots (cut by the kernel, dropped).
    pub truncated: u64,
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    /// `recvmmsg` calls that returned at least one datagram.
    pub rx_syscalls: u64,
    /// `sendmmsg`/`sendto` calls.
    pub tx_syscalls: u64,
    /// Ethernet: frames that were not flitnet frames or whose length field
    /// overran them.
    pub bad_frames: u64,
    /// Ethernet: datagrams longer than the port interface's MTU carries,
    /// refused instead of sent.
    pub oversized: u64,
    /// Shm: datagrams lost because the peer's ring was full (a dead or
    /// stalled consumer).
    #[serde(default)]
    pub ring_full: u64,
    /// Shm: rings found with an index or record out of bounds, refused.
    #[serde(default)]
    pub ring_corrupt: u64,
    /// Shm: link files this daemon put fresh ones in place of when it
    /// started, because its end had been attached before (a restart).
    #[serde(default)]
    pub ring_replaced: u64,
    /// Shm: link files this daemon moved to because the peer restarted
    /// and replaced them.
    #[serde(default)]
    pub ring_reattached: u64,
}

/// The event loop's own figures, added by the runtime to every report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopReport {
    /// In emulated time (wall lateness / `dilation`).
    #[serde(default)]
    pub timer_lateness: LatenessSummary,
    /// How late the daemon's links read flits against their emulated
    /// release time (departure stamp + serialisation + propagation), all
    /// links together, in emulated time: a daemon that waits for a CPU
    /// reads its input late and fires no late timer for it.
    #[serde(default)]
    pub arrival_lateness: LatenessSummary,
    #[serde(default)]
    pub transport: TransportCounters,
    /// The daemon's time dilation factor (0 in reports of daemons that
    /// predate it: read as 1).
    #[serde(default)]
    pub dilation: u32,
    /// The event loop thread's scheduler figures when the loop started and
    /// when this report was made (None where Linux does not tell).
    #[serde(default)]
    pub sched_start: Option<SchedShare>,
    #[serde(default)]
    pub sched_now: Option<SchedShare>,
    /// Per port: how long its link had flits queued, and how many it sent
    /// meanwhile (emulated time).
    #[serde(default)]
    pub backlog: Vec<PortBacklog>,
}

/// A thread's cumulative CPU time and run-queue wait
/// (`/proc/thread-self/schedstat`), and the wall instant (CLOCK_MONOTONIC
/// ns) they were read; all wall nanoseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedShare {
    pub run_ns: u64,
    pub wait_ns: u64,
    pub wall_ns: u64,
}

impl SchedShare {
    /// Share of the wall time from `self` to `later` the thread was
    /// runnable but waiting for a CPU (None for an empty interval).
    pub fn wait_share_until(&self, later: &SchedShare) -> Option<f64> {
        let wall = later.wall_ns.checked_sub(self.wall_ns).filter(|&w| w > 0)?;
        Some(later.wait_ns.saturating_sub(self.wait_ns) as f64 / wall as f64)
    }

    /// Share of that wall time the thread ran.
    pub fn run_share_until(&self, later: &SchedShare) -> Option<f64> {
        let wall = later.wall_ns.checked_sub(self.wall_ns).filter(|&w| w > 0)?;
        Some(later.run_ns.saturating_sub(self.run_ns) as f64 / wall as f64)
    }
}

/// One port's link while it had flits queued (emulated ns).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortBacklog {
    pub port: PortNo,
    pub backlogged_ns: u64,
    /// Flits the link sent while backlogged.
    pub flits: u64,
}

/// One port's link now, for a stall diagnosis (which ports wait for
/// credits, which hold flits, which withhold credits).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkState {
    pub port: PortNo,
    /// Credits left, per VC.
    pub credits: Vec<u16>,
    /// Flits accepted by the link and not yet transmitted.
    pub queued_flits: u64,
    /// Admin up and the peer alive.
    pub up: bool,
    /// Fault injection: this end returns no credits.
    #[serde(default)]
    pub credits_withheld: bool,
}

impl LinkState {
    pub fn of(port: PortNo, link: &Link) -> Self {
        LinkState {
            port,
            credits: (0..link.config().vcs).map(|vc| link.credits(vc)).collect(),
            queued_flits: link.queued() as u64,
            up: link.is_up(),
            credits_withheld: link.credits_withheld(),
        }
    }
}

/// Everything a switch daemon reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SwitchReport {
    pub name: String,
    pub counters: SwitchCounters,
    /// Flits that arrived with no buffer slot for them: a credit protocol
    /// violation, which must never happen.
    pub credit_violations: u64,
    /// Credits not (yet) back from the peers of live links: in a drained
    /// fabric every one is back, so anything left is a leak.
    pub credits_missing: u64,
    /// Items (flits and credits) that reached a disabled port or were still
    /// propagating when it was disabled: lost.
    pub rx_dropped_down: u64,
    /// Whole packets dropped, by drop reason label.
    #[serde(default)]
    pub dropped_packets: BTreeMap<String, u64>,
    /// Datagrams deliberately corrupted (fault injection), per port.
    #[serde(default)]
    pub corrupted_datagrams_sent: Vec<u64>,
    /// SBRP's switch half: RRQs sent as node C, NFTs made as A.
    #[serde(default)]
    pub sbrp: SbrpSwitchCounters,
    /// Every cabled port's link.
    #[serde(default)]
    pub links: Vec<LinkState>,
    #[serde(default)]
    pub event_loop: LoopReport,
}

impl SwitchReport {
    /// Flits dropped, every reason.
    pub fn dropped_flits(&self) -> u64 {
        self.counters.drops.total()
    }

    /// This report's counts of a run, less what `baseline` (the same
    /// switch's report when the run started) had already counted: a
    /// switch's counters grow over its whole life, a report describes one
    /// run. Figures that are states, not counts (links, occupancy, the
    /// event loop's), are this report's.
    pub fn since(mut self, baseline: &SwitchReport) -> SwitchReport {
        let sub = |now: &mut u64, then: u64| *now = now.saturating_sub(then);
        for r in crate::switch::DropReason::ALL {
            let n = self
                .counters
                .drops
                .get(r)
                .saturating_sub(baseline.counters.drops.get(r));
            self.counters.drops.set(r, n);
        }
        let (c, b) = (&mut self.counters, &baseline.counters);
        sub(&mut c.truncated_packets, b.truncated_packets);
        sub(&mut c.events_lost, b.events_lost);
        sub(&mut c.reroutes, b.reroutes);
        sub(&mut c.intermediate_pops, b.intermediate_pops);
        sub(&mut c.misroute_hops, b.misroute_hops);
        sub(&mut c.hoq_discards, b.hoq_discards);
        sub(&mut self.credit_violations, baseline.credit_violations);
        sub(&mut self.rx_dropped_down, baseline.rx_dropped_down);
        for (reason, n) in self.dropped_packets.iter_mut() {
            sub(
                n,
                baseline.dropped_packets.get(reason).copied().unwrap_or(0),
            );
        }
        self.dropped_packets.retain(|_, n| *n > 0);
        let (s, b) = (&mut self.sbrp, &baseline.sbrp);
        sub(&mut s.rrq_sent, b.rrq_sent);
        sub(&mut s.nft_generated, b.nft_generated);
        sub(&mut s.cut_packets, b.cut_packets);
        sub(&mut s.rrq_overflow, b.rrq_overflow);
        sub(&mut s.shadow_reports, b.shadow_reports);
        sub(&mut s.rrq_parked, b.rrq_parked);
        sub(&mut s.rrq_reissued, b.rrq_reissued);
        sub(&mut s.rrq_relayed, b.rrq_relayed);
        self
    }
}

/// A host link's errors and recoveries (docs/wire.md, "Link errors and
/// retraining").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLinkReport {
    pub crc_errors: u64,
    pub bad_datagrams: u64,
    pub seq_gaps: u64,
    pub lost_flits: u64,
    pub link_errors: u64,
    pub peer_link_resets: u64,
    pub retrains: u64,
    pub last_recovery_ns: u64,
    pub max_recovery_ns: u64,
}

/// Everything a host daemon reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostDaemonReport {
    pub name: String,
    pub endpoint: HostReport,
    /// Nothing left to send or resend and nothing expected.
    pub drained: bool,
    pub credit_violations: u64,
    pub credits_missing: u64,
    #[serde(default)]
    pub link: HostLinkReport,
    /// The host's links: its port, and its receive port on one-way links.
    #[serde(default)]
    pub links: Vec<LinkState>,
    #[serde(default)]
    pub event_loop: LoopReport,
}

impl HostDaemonReport {
    /// This report's link counts less `baseline`'s (the same host's report
    /// when the run started; see [`SwitchReport::since`]). The endpoint's
    /// figures need nothing: a host starts them afresh with every run
    /// ([`HostEndpoint::begin_run`]).
    pub fn since(mut self, baseline: &HostDaemonReport) -> HostDaemonReport {
        let sub = |now: &mut u64, then: u64| *now = now.saturating_sub(then);
        sub(&mut self.credit_violations, baseline.credit_violations);
        let (l, b) = (&mut self.link, &baseline.link);
        sub(&mut l.crc_errors, b.crc_errors);
        sub(&mut l.bad_datagrams, b.bad_datagrams);
        sub(&mut l.seq_gaps, b.seq_gaps);
        sub(&mut l.lost_flits, b.lost_flits);
        sub(&mut l.link_errors, b.link_errors);
        sub(&mut l.peer_link_resets, b.peer_link_resets);
        sub(&mut l.retrains, b.retrains);
        self
    }

    /// What host `name` reports of its endpoint (the event loop's figures
    /// are the daemon's to add). A host on one-way links has a receive
    /// link too: its errors and overflows count with the sending link's.
    pub fn of(name: String, e: &HostEndpoint) -> Self {
        let links: Vec<(PortNo, &Link)> = std::iter::once((e.link().port(), e.link()))
            .chain(e.receive_link())
            .collect();
        let sum = |f: fn(&crate::link::LinkStats) -> u64| -> u64 {
            links.iter().map(|(_, l)| f(l.stats())).sum()
        };
        let max = |f: fn(&crate::link::LinkStats) -> u64| -> u64 {
            links.iter().map(|(_, l)| f(l.stats())).max().unwrap_or(0)
        };
        HostDaemonReport {
            name,
            endpoint: e.report(),
            drained: e.is_drained(),
            credit_violations: sum(|s| s.rx_overflow),
            // Credits of a live link not back from the switch (in a
            // drained fabric: a leak).
            credits_missing: e.link().credits_missing(),
            link: HostLinkReport {
                crc_errors: sum(|s| s.crc_errors),
                bad_datagrams: sum(|s| s.bad_datagrams),
                seq_gaps: sum(|s| s.seq_gaps),
                lost_flits: sum(|s| s.rx_lost_flits),
                link_errors: sum(|s| s.link_errors),
                peer_link_resets: sum(|s| s.peer_link_resets),
                retrains: sum(|s| s.retrains),
                last_recovery_ns: max(|s| s.last_recovery_ns),
                max_recovery_ns: max(|s| s.max_recovery_ns),
            },
            links: links.iter().map(|(p, l)| LinkState::of(*p, l)).collect(),
            event_loop: Default::default(),
        }
    }
}

impl Reply {
    /// The reply's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Reply::Done => "done",
            Reply::Pong { .. } => "pong",
            Reply::InFlight { .. } => "in-flight",
            Reply::SwitchReport(_) => "switch-report",
            Reply::HostReport(_) => "host-report",
            Reply::MechanismConfigured { .. } => "mechanism-configured",
        }
    }
}

/// A daemon answered a request with a reply of another kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected a `{expected}` reply, got `{got}`")]
pub struct UnexpectedReply {
    pub expected: &'static str,
    pub got: &'static str,
}

impl Reply {
    fn unexpected(&self, expected: &'static str) -> UnexpectedReply {
        UnexpectedReply {
            expected,
            got: self.kind(),
        }
    }

    pub fn into_switch_report(self) -> Result<SwitchReport, UnexpectedReply> {
        match self {
            Reply::SwitchReport(r) => Ok(*r),
            other => Err(other.unexpected("switch-report")),
        }
    }

    pub fn into_host_report(self) -> Result<HostDaemonReport, UnexpectedReply> {
        match self {
            Reply::HostReport(r) => Ok(*r),
            other => Err(other.unexpected("host-report")),
        }
    }

    pub fn into_in_flight(self) -> Result<u64, UnexpectedReply> {
        match self {
            Reply::InFlight { in_flight_flits } => Ok(in_flight_flits),
            other => Err(other.unexpected("in-flight")),
        }
    }

    /// A host's answer to a mechanism's configuration (`None` from a
    /// switch, which answers `done`).
    pub fn into_mechanism_answer(
        self,
    ) -> Result<Option<crate::mechanism::NodeConfig>, UnexpectedReply> {
        match self {
            Reply::Done => Ok(None),
            Reply::MechanismConfigured { answer } => Ok(answer),
            other => Err(other.unexpected("mechanism-configured")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Response;

    #[test]
    fn replies_round_trip_through_json_with_their_kind() {
        let replies = [
            Reply::Done,
            Reply::Pong {
                name: "s0".into(),
                role: NodeKind::Switch,
            },
            Reply::InFlight { in_flight_flits: 7 },
            Reply::SwitchReport(Box::new(SwitchReport {
                name: "s0".into(),
                credits_missing: 3,
                ..SwitchReport::default()
            })),
        ];
        for reply in replies {
            let text = serde_json::to_string(&Response::reply(reply.clone())).unwrap();
            assert!(text.contains(&format!("\"{}\"", reply.kind())), "{text}");
            let back: Response = serde_json::from_str(&text).unwrap();
            assert_eq!(back, Response::reply(reply));
        }
    }

    #[test]
    fn host_reports_keep_their_per_flow_counts() {
        let mut r = HostDaemonReport::default();
        r.endpoint.sent_to.insert(3, 9);
        r.endpoint.delivered_from.insert(12, 4);
        let reply = Reply::HostReport(Box::new(r));
        let text = serde_json::to_string(&Response::reply(reply.clone())).unwrap();
        let back: Response = serde_json::from_str(&text).unwrap();
        assert_eq!(back, Response::reply(reply));
    }

    #[test]
    fn a_reply_of_the_wrong_kind_names_both_kinds() {
        let e = Reply::Done.into_host_report().unwrap_err();
        assert_eq!(e.to_string(), "expected a `host-report` reply, got `done`");
        assert_eq!(
            Reply::InFlight { in_flight_flits: 4 }.into_in_flight(),
            Ok(4)
        );
    }
}
