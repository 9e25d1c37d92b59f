//! A chaos scenario's applications (docs/chaos.md, "Applications"): the
//! timeline's `pingall` and `iperf3` actions, run in the hosts' network
//! namespaces of a `tun: true` fabric while the faults happen, and their
//! results as the run report gives them.
//!
//! ping and iperf3 measure wall-clock time. The report maps every instant
//! to emulated time since traffic start (wall ÷ the run's time dilation N)
//! and every rate to bits per emulated second (× N); ping's RTTs are given
//! both as measured and ÷ N.

use crate::iperf::{self, Iperf3Json, Iperf3Run};
use crate::report::ActionTiming;
use crate::scenario::{AppAction, Application, Iperf3Flow, Protocol};
use crate::tun::TunState;
use flitnet_runtime::clock::wall;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A throughput back within this fraction of its pre-fault mean has
/// recovered.
pub const RECOVERED_FRACTION: f64 = 0.9;

/// Pings running at once during a `pingall`.
const PING_WORKERS: usize = 8;

/// The first iperf3 port; the n-th iperf3 action of a scenario uses this +
/// n, so flows to one server may overlap.
const IPERF3_PORT: u16 = 5201;

/// Round-trip times, ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RttSummary {
    pub min: f64,
    pub avg: f64,
    pub max: f64,
    pub p50: f64,
    pub p99: f64,
}

impl RttSummary {
    fn of(mut rtts: Vec<f64>) -> Option<RttSummary> {
        if rtts.is_empty() {
            return None;
        }
        rtts.sort_by(f64::total_cmp);
        let pick = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize];
        Some(RttSummary {
            min: rtts[0],
            avg: rtts.iter().sum::<f64>() / rtts.len() as f64,
            max: rtts[rtts.len() - 1],
            p50: pick(0.5),
            p99: pick(0.99),
        })
    }

    fn scaled(&self, by: f64) -> RttSummary {
        RttSummary {
            min: self.min * by,
            avg: self.avg * by,
            max: self.max * by,
            p50: self.p50 * by,
            p99: self.p99 * by,
        }
    }
}

/// One `pingall`: every ordered pair of hosts, one echo request each.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PingallReport {
    /// Emulated seconds after traffic started.
    pub at_s: f64,
    pub pairs: usize,
    pub answered: usize,
    pub loss_percent: f64,
    /// Pairs without an answer, `src->dst`.
    pub unanswered: Vec<String>,
    /// As ping measured them (wall-clock).
    pub rtt_ms: Option<RttSummary>,
    /// Divided by the time dilation: the emulated network's RTTs.
    pub emulated_rtt_ms: Option<RttSummary>,
    pub time_dilation: u32,
    /// Wall-clock seconds the whole pingall took.
    pub took_wall_s: f64,
}

/// One reporting interval of an iperf3 flow, at the receiver.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowInterval {
    /// Emulated seconds after traffic started.
    pub start_s: f64,
    pub end_s: f64,
    pub bytes: u64,
    /// Bits per emulated second (iperf3's wall-clock rate × the dilation).
    pub bits_per_second: f64,
    /// TCP: segments the sender retransmitted in its interval of the same
    /// index.
    pub sender_retransmits: Option<u64>,
}

/// What a fault did to a flow (docs/chaos.md, "Applications").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultImpact {
    /// Emulated seconds after traffic started.
    pub at_s: f64,
    pub action: String,
    pub element: String,
    /// Mean throughput of the flow's intervals that ended before the
    /// fault (leaving out its first, slow-start, interval when there are
    /// two or more), bits per emulated second.
    pub pre_fault_bits_per_second: Option<f64>,
    /// The lowest interval from the fault to the next fault or the flow's
    /// end.
    pub min_bits_per_second: Option<f64>,
    /// 100 × (1 − min ÷ pre-fault mean), at least 0.
    pub dip_percent: Option<f64>,
    /// Fault → the start of the first interval back at 90 % of the
    /// pre-fault mean after one below it; 0 when none fell below it;
    /// emulated ms. None when it did not recover before the next fault or
    /// the flow's end.
    pub recovery_ms: Option<f64>,
}

/// One `iperf3` action's flow.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Iperf3Report {
    /// Emulated seconds after traffic started.
    pub at_s: f64,
    pub client: String,
    pub server: String,
    pub protocol: String,
    pub bitrate: Option<String>,
    /// Emulated seconds the client sent for.
    pub duration_s: f64,
    pub time_dilation: u32,
    /// How iperf3's wall-clock figures map to the report's.
    pub timing: String,
    pub bytes_sent: Option<u64>,
    pub bytes_received: Option<u64>,
    /// TCP: segments the sender retransmitted.
    pub retransmits: Option<u64>,
    /// UDP: datagrams the receiver missed, %.
    pub lost_percent: Option<f64>,
    /// At the receiver, bits per emulated second.
    pub mean_bits_per_second: Option<f64>,
    pub intervals: Vec<FlowInterval>,
    /// Every fault of the timeline during the flow.
    pub faults: Vec<FaultImpact>,
    /// Why the flow has no result.
    pub error: Option<String>,
}

enum Running {
    Pingall(JoinHandle<PingallReport>),
    Iperf3(AppAction, JoinHandle<anyhow::Result<iperf::Iperf3Outcome>>),
}

/// The applications of a run, started as the timeline reaches them.
pub struct Apps {
    tun: Arc<TunState>,
    dilation: u32,
    dir: PathBuf,
    traffic_start: Instant,
    running: Vec<Running>,
    iperf3_started: u16,
}

impl Apps {
    /// `dir`: where iperf3's JSON goes (the run directory).
    pub fn new(tun: TunState, dilation: u32, dir: PathBuf, traffic_start: Instant) -> Apps {
        Apps {
            tun: Arc::new(tun),
            dilation: dilation.max(1),
            dir,
            traffic_start,
            running: Vec::new(),
            iperf3_started: 0,
        }
    }

    /// Starts `a` on threads of its own (returns at once).
    pub fn start(&mut self, a: &AppAction) {
        let tun = self.tun.clone();
        let dilation = self.dilation;
        let at_s = a.at.as_secs_f64();
        match &a.app {
            Application::Pingall => {
                self.running
                    .push(Running::Pingall(std::thread::spawn(move || {
                        pingall(&tun, dilation, at_s)
                    })))
            }
            Application::Iperf3(flow) => {
                let port = IPERF3_PORT + self.iperf3_started;
                let stem = format!("iperf3-{}", self.iperf3_started);
                self.iperf3_started += 1;
                let dir = self.dir.clone();
                let flow = flow.clone();
                self.running.push(Running::Iperf3(
                    a.clone(),
                    std::thread::spawn(move || iperf3(&tun, &flow, port, &dir, &stem)),
                ));
            }
        }
    }

    /// Whether every started application has finished.
    pub fn done(&self) -> bool {
        self.running.iter().all(|r| match r {
            Running::Pingall(h) => h.is_finished(),
            Running::Iperf3(_, h) => h.is_finished(),
        })
    }

    /// Waits for every application (each bounds its own run time) and
    /// reports them, iperf3 flows against the run's `faults`.
    pub fn finish(self, faults: &[ActionTiming]) -> (Vec<PingallReport>, Vec<Iperf3Report>) {
        let mut pings = Vec::new();
        let mut flows = Vec::new();
        for r in self.running {
            match r {
                Running::Pingall(h) => pings.push(h.join().unwrap_or_default()),
                Running::Iperf3(a, h) => {
                    let outcome = h
                        .join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("the iperf3 thread panicked")));
                    flows.push(iperf3_report(
                        &a,
                        outcome,
                        self.traffic_start,
                        self.dilation,
                        faults,
                    ));
                }
            }
        }
        (pings, flows)
    }
}

/// (source, destination) host indices and the RTT, ms (None: lost).
type PingResult = ((usize, usize), Option<f64>);

/// One echo request from every host to every other, `PING_WORKERS` at a
/// time, each through `ip netns exec` in the source's namespace.
fn pingall(tun: &TunState, dilation: u32, at_s: f64) -> PingallReport {
    let started = Instant::now();
    let n = tun.hosts.len();
    // Pair k of a round: source i to i + offset, so that pings running
    // together come from different hosts.
    let pairs: Vec<(usize, usize)> = (1..n)
        .flat_map(|offset| (0..n).map(move |i| (i, (i + offset) % n)))
        .collect();
    // An answer later than 2 s of wall time per unit of dilation is lost.
    let wait_s = 2 * dilation;
    let queue = Mutex::new(pairs.clone().into_iter());
    let results: Mutex<Vec<PingResult>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..PING_WORKERS.min(pairs.len()) {
            s.spawn(|| loop {
                let Some((a, b)) = queue.lock().expect("queue").next() else {
                    break;
                };
                let rtt = ping_once(&tun.hosts[a].netns, tun.hosts[b].address, wait_s);
                results.lock().expect("results").push(((a, b), rtt));
            });
        }
    });
    let mut results = results.into_inner().expect("results");
    results.sort_by_key(|(p, _)| *p);
    let rtts: Vec<f64> = results.iter().filter_map(|(_, r)| *r).collect();
    let unanswered: Vec<String> = results
        .iter()
        .filter(|(_, r)| r.is_none())
        .map(|((a, b), _)| format!("{}->{}", tun.hosts[*a].name, tun.hosts[*b].name))
        .collect();
    let rtt_ms = RttSummary::of(rtts.clone());
    PingallReport {
        at_s,
        pairs: pairs.len(),
        answered: rtts.len(),
        loss_percent: 100.0 * unanswered.len() as f64 / pairs.len().max(1) as f64,
        unanswered,
        emulated_rtt_ms: rtt_ms.as_ref().map(|r| r.scaled(1.0 / dilation as f64)),
        rtt_ms,
        time_dilation: dilation,
        took_wall_s: started.elapsed().as_secs_f64(),
    }
}

/// The RTT of one ping from namespace `ns` to `to`, ms; None if lost.
fn ping_once(ns: &str, to: std::net::Ipv4Addr, wait_s: u32) -> Option<f64> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-n", "-q", "-c1"])
        .args(["-W", &wait_s.to_string(), &to.to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    rtt_of(&String::from_utf8_lossy(&out.stdout))
}

/// The average of `ping -q`'s summary line, `rtt min/avg/max/mdev =
/// 0.061/0.061/0.061/0.000 ms`.
fn rtt_of(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.starts_with("rtt ") || l.starts_with("round-trip "))?;
    let values = line.split('=').nth(1)?.trim();
    values.split('/').nth(1)?.trim().parse().ok()
}

fn iperf3(
    tun: &TunState,
    flow: &Iperf3Flow,
    port: u16,
    dir: &std::path::Path,
    stem: &str,
) -> anyhow::Result<iperf::Iperf3Outcome> {
    let host = |name: &str| {
        tun.host(name)
            .ok_or_else(|| anyhow::anyhow!("no host {name} with an IP interface"))
    };
    let (client, server) = (host(&flow.client)?, host(&flow.server)?);
    let run = Iperf3Run {
        server: server.address,
        port,
        seconds: wall(flow.duration).as_secs(),
        interval: wall(flow.interval),
        udp: flow.protocol == Protocol::Udp,
        bitrate: flow.bitrate.clone(),
        connect_timeout: wall(Duration::from_secs(3)),
    };
    // Connection set-up and the results exchange take a few round trips
    // beyond the duration; a flow that stalls for good is killed.
    let deadline =
        Instant::now() + wall(flow.duration + Duration::from_secs(5)) + Duration::from_secs(10);
    iperf::run(&server.netns, &client.netns, &run, dir, stem, deadline)
}

fn iperf3_report(
    a: &AppAction,
    outcome: anyhow::Result<iperf::Iperf3Outcome>,
    traffic_start: Instant,
    dilation: u32,
    faults: &[ActionTiming],
) -> Iperf3Report {
    let Application::Iperf3(flow) = &a.app else {
        unreachable!("an iperf3 action")
    };
    let n = dilation as f64;
    let mut r = Iperf3Report {
        at_s: a.at.as_secs_f64(),
        client: flow.client.clone(),
        server: flow.server.clone(),
        protocol: flow.protocol.name().into(),
        bitrate: flow.bitrate.clone(),
        duration_s: flow.duration.as_secs_f64(),
        time_dilation: dilation,
        timing: format!(
            "iperf3 measures wall-clock time: instants here are emulated seconds since traffic \
             start (from the client's launch, wall ÷ {dilation}), rates bits per emulated second \
             (iperf3's × {dilation})"
        ),
        ..Iperf3Report::default()
    };
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            r.error = Some(format!("{e:#}"));
            return r;
        }
    };
    let offset_s = outcome
        .client_started
        .saturating_duration_since(traffic_start)
        .as_secs_f64()
        / n;
    let sent_end = outcome.client.end.clone().unwrap_or_default();
    let received_end = outcome.server.end.clone().unwrap_or_default();
    r.bytes_sent = sent_end.sum_sent.as_ref().map(|s| s.bytes);
    r.retransmits = sent_end.sum_sent.as_ref().and_then(|s| s.retransmits);
    r.bytes_received = outcome
        .client
        .bytes_received()
        .or(outcome.server.bytes_received());
    let udp_sum = sent_end.sum.as_ref().or(received_end.sum.as_ref());
    r.lost_percent = udp_sum.and_then(|s| s.lost_percent);
    r.mean_bits_per_second = sent_end
        .sum_received
        .as_ref()
        .or(udp_sum)
        .map(|s| s.bits_per_second * n);
    r.intervals = intervals(&outcome.server, &outcome.client, offset_s, n);
    r.faults = impacts(&r.intervals, faults);
    r
}

/// The receiver's intervals in emulated time, with the sender's
/// retransmits of the same index.
fn intervals(
    receiver: &Iperf3Json,
    sender: &Iperf3Json,
    offset_s: f64,
    n: f64,
) -> Vec<FlowInterval> {
    receiver
        .intervals
        .iter()
        .enumerate()
        .map(|(i, iv)| FlowInterval {
            start_s: offset_s + iv.sum.start / n,
            end_s: offset_s + iv.sum.end / n,
            bytes: iv.sum.bytes,
            bits_per_second: iv.sum.bits_per_second * n,
            sender_retransmits: sender.intervals.get(i).and_then(|s| s.sum.retransmits),
        })
        .collect()
}

/// The dip and recovery of a flow around every fault (not repairs) that
/// falls within it.
pub fn impacts(intervals: &[FlowInterval], actions: &[ActionTiming]) -> Vec<FaultImpact> {
    let (Some(first), Some(last)) = (intervals.first(), intervals.last()) else {
        return Vec::new();
    };
    let faults: Vec<&ActionTiming> = actions
        .iter()
        .filter(|a| !(a.action.starts_with("restore") || a.action.starts_with("restart")))
        .collect();
    faults
        .iter()
        .enumerate()
        .filter(|(_, f)| f.at_s > first.start_s && f.at_s < last.end_s)
        .map(|(k, f)| {
            let t = f.at_s;
            let next = faults.get(k + 1).map_or(f64::INFINITY, |g| g.at_s);
            let mut impact = FaultImpact {
                at_s: t,
                action: f.action.clone(),
                element: f.element.clone(),
                ..FaultImpact::default()
            };
            let before: Vec<&FlowInterval> = intervals.iter().filter(|i| i.end_s <= t).collect();
            let steady = if before.len() >= 2 {
                &before[1..]
            } else {
                &before[..]
            };
            let window: Vec<&FlowInterval> = intervals
                .iter()
                .filter(|i| i.end_s > t && i.start_s < next)
                .collect();
            if steady.is_empty() || window.is_empty() {
                return impact;
            }
            let pre = steady.iter().map(|i| i.bits_per_second).sum::<f64>() / steady.len() as f64;
            let min = window
                .iter()
                .map(|i| i.bits_per_second)
                .fold(f64::INFINITY, f64::min);
            impact.pre_fault_bits_per_second = Some(pre);
            impact.min_bits_per_second = Some(min);
            if pre > 0.0 {
                impact.dip_percent = Some((100.0 * (1.0 - min / pre)).max(0.0));
            }
            let threshold = RECOVERED_FRACTION * pre;
            impact.recovery_ms = match window.iter().position(|i| i.bits_per_second < threshold) {
                None => Some(0.0),
                Some(low) => window[low..]
                    .iter()
                    .find(|i| i.bits_per_second >= threshold)
                    .map(|i| ((i.start_s - t) * 1000.0).max(0.0)),
            };
            impact
        })
        .collect()
}

/// The flows' throughput for the chaos plot: (label, (end of interval,
/// Mbit per emulated second)).
pub fn plot_series(flows: &[Iperf3Report]) -> Vec<crate::plot::Series> {
    flows
        .iter()
        .filter(|f| !f.intervals.is_empty())
        .map(|f| crate::plot::Series {
            label: format!("iperf3 {}→{} ({})", f.client, f.server, f.protocol),
            points: f
                .intervals
                .iter()
                .map(|i| (i.end_s, i.bits_per_second / 1e6))
                .collect(),
        })
        .collect()
}

impl fmt::Display for PingallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "  pingall     at {:.2}s: {}/{} pairs answered ({:.1} % lost)",
            self.at_s, self.answered, self.pairs, self.loss_percent
        )?;
        if let (Some(w), Some(e)) = (&self.rtt_ms, &self.emulated_rtt_ms) {
            write!(
                f,
                "; RTT min/avg/max {:.3}/{:.3}/{:.3} ms, p50 {:.3}, p99 {:.3} (wall; emulated ÷ {}: avg {:.3} ms, p99 {:.3})",
                w.min, w.avg, w.max, w.p50, w.p99, self.time_dilation, e.avg, e.p99
            )?;
        }
        writeln!(f)?;
        if !self.unanswered.is_empty() {
            writeln!(f, "              unanswered: {}", self.unanswered.join(" "))?;
        }
        Ok(())
    }
}

impl fmt::Display for Iperf3Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "  iperf3      {}→{} {} at {:.2}s for {}s",
            self.client, self.server, self.protocol, self.at_s, self.duration_s
        )?;
        if let Some(e) = &self.error {
            return writeln!(f, ": FAILED: {e}");
        }
        let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
        write!(
            f,
            ": {} bytes sent, {} received, {:.2} Mbit/s, {} intervals",
            opt(self.bytes_sent),
            opt(self.bytes_received),
            self.mean_bits_per_second.unwrap_or(0.0) / 1e6,
            self.intervals.len()
        )?;
        if let Some(r) = self.retransmits {
            write!(f, ", {r} retransmits")?;
        }
        if let Some(l) = self.lost_percent {
            write!(f, ", {l:.2} % lost")?;
        }
        writeln!(
            f,
            " (emulated time and rates: iperf3's wall clock ÷ {})",
            self.time_dilation
        )?;
        for i in &self.faults {
            let mbit = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.2}", v / 1e6));
            writeln!(
                f,
                "              {} {} at {:.2}s: pre-fault {} Mbit/s, min {} Mbit/s (dip {}), {}",
                i.action,
                i.element,
                i.at_s,
                mbit(i.pre_fault_bits_per_second),
                mbit(i.min_bits_per_second),
                i.dip_percent.map_or("-".into(), |d| format!("{d:.0} %")),
                match (i.pre_fault_bits_per_second, i.recovery_ms) {
                    (None, _) => "no interval before it to compare with".to_string(),
                    (Some(_), Some(ms)) => format!("back at 90 % after {ms:.0} ms"),
                    (Some(_), None) => "not back at 90 % before the flow ended".to_string(),
                }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(start_s: f64, mbit: f64) -> FlowInterval {
        FlowInterval {
            start_s,
            end_s: start_s + 0.25,
            bytes: 0,
            bits_per_second: mbit * 1e6,
            sender_retransmits: None,
        }
    }

    fn fault(at_s: f64, action: &str) -> ActionTiming {
        ActionTiming {
            at_s,
            action: action.into(),
            element: "s0-0:4".into(),
            ..ActionTiming::default()
        }
    }

    #[test]
    fn a_dip_and_its_recovery_are_measured_against_the_pre_fault_mean() {
        // Slow start, steady 20, the fault at 1.1 s, 5 then 12, back at 19
        // from 1.5 s.
        let flow: Vec<FlowInterval> = [5.0, 20.0, 20.0, 20.0, 5.0, 12.0, 19.0, 20.0]
            .iter()
            .enumerate()
            .map(|(i, m)| iv(i as f64 * 0.25, *m))
            .collect();
        let out = impacts(
            &flow,
            &[fault(1.1, "kill-link"), fault(1.8, "restore-link")],
        );
        assert_eq!(out.len(), 1, "repairs have no impact entry");
        let x = &out[0];
        assert_eq!(x.pre_fault_bits_per_second, Some(20e6));
        assert_eq!(x.min_bits_per_second, Some(5e6));
        assert_eq!(x.dip_percent, Some(75.0));
        assert!((x.recovery_ms.unwrap() - 400.0).abs() < 1e-6, "{x:?}");
        // Never below 90 %: recovered at once.
        let flat: Vec<FlowInterval> = (0..6).map(|i| iv(i as f64 * 0.25, 20.0)).collect();
        let x = &impacts(&flat, &[fault(0.8, "kill-link")])[0];
        assert_eq!((x.dip_percent, x.recovery_ms), (Some(0.0), Some(0.0)));
        // Never back: no recovery time; a fault before the flow: no entry;
        // a fault in the first interval: nothing to compare with.
        let dead: Vec<FlowInterval> = [20.0, 20.0, 20.0, 1.0, 0.0]
            .iter()
            .enumerate()
            .map(|(i, m)| iv(i as f64 * 0.25, *m))
            .collect();
        let x = &impacts(&dead, &[fault(0.7, "kill-link")])[0];
        assert_eq!(x.recovery_ms, None);
        assert!(impacts(&dead, &[fault(-1.0, "kill-link")]).is_empty());
        let x = &impacts(&dead, &[fault(0.1, "kill-link")])[0];
        assert_eq!(x.pre_fault_bits_per_second, None);
    }

    #[test]
    fn rtts_are_read_from_pings_summary_and_summarised() {
        let text = "PING 10.1.0.2 (10.1.0.2) 56(84) bytes of data.\n\n--- 10.1.0.2 ping statistics ---\n1 packets transmitted, 1 received, 0% packet loss, time 0ms\nrtt min/avg/max/mdev = 0.861/0.861/0.861/0.000 ms\n";
        assert_eq!(rtt_of(text), Some(0.861));
        assert_eq!(rtt_of("1 packets transmitted, 0 received"), None);
        let s = RttSummary::of((1..=100).map(f64::from).collect()).unwrap();
        assert_eq!((s.min, s.max, s.avg), (1.0, 100.0, 50.5));
        assert_eq!((s.p50, s.p99), (51.0, 99.0));
        assert!(RttSummary::of(Vec::new()).is_none());
    }
}
