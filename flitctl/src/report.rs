//! Collecting what a run did: host delivery reports, switch drop counters,
//! fault detection and recovery times, and printing them.

use crate::events::{ControllerEvent, Event, EventLog, Record};
use crate::fabric::{Fabric, HostReports, SwitchReports};
use anyhow::Result;
use flitnet_core::control::{HostDaemonReport, TrafficSpec};
use flitnet_core::switch::DropReason;
use flitnet_core::topology::{FaultSet, NodeRef, PortRef, Topology};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

/// Timing of one injected fault.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FaultTiming {
    pub kind: String,
    pub element: String,
    /// Fault → first neighbour reporting the port down (keepalive timeout or
    /// the killed port itself), in ms. None if nobody noticed in time.
    pub detection_ms: Option<f64>,
    /// Who noticed.
    pub detected_by: Option<String>,
    /// Fault → new tables installed on every switch, in ms.
    pub routes_installed_ms: Option<f64>,
}

impl FaultTiming {
    pub fn new(fault: &Record, detected: Option<&Record>, installed: Option<&Record>) -> Self {
        let ms = |r: &Record| r.time_ns.saturating_sub(fault.time_ns) as f64 / 1e6;
        let (kind, element) = match &fault.event {
            Event::Controller(
                ControllerEvent::Fault { kind, element, .. }
                | ControllerEvent::Repair { kind, element, .. },
            ) => (kind.clone(), element.clone()),
            other => ("?".into(), format!("{other:?}")),
        };
        FaultTiming {
            kind,
            element,
            detection_ms: detected.map(ms),
            detected_by: detected.map(|r| r.source.clone()),
            routes_installed_ms: installed.map(ms),
        }
    }
}

/// The ports (node name, port) through which neighbours see `faults`.
fn watched_ports(topo: &Topology, faults: &FaultSet) -> Vec<(String, u16)> {
    let mut ports = Vec::new();
    for &l in &faults.links {
        let link = &topo.links[l as usize];
        for end in [link.a, link.b] {
            ports.push((topo.node_name(end.node).to_string(), end.port));
        }
    }
    for &s in &faults.switches {
        let node = NodeRef::Switch(s);
        for p in 0..topo.radix(node) as u16 {
            if let Some(peer) = topo.peer(PortRef { node, port: p }) {
                ports.push((topo.node_name(peer.node).to_string(), peer.port));
            }
        }
    }
    ports
}

/// Waits for the first port-down event on a port facing one of `faults`,
/// reported at or after the fault instant `since_ns` by the daemon on the
/// other end of that port (an earlier or unrelated report says nothing
/// about this fault).
pub fn wait_detection(
    events: &EventLog,
    topo: &Topology,
    faults: &FaultSet,
    since_ns: u64,
    timeout: Duration,
) -> Option<Record> {
    let watched = watched_ports(topo, faults);
    events.wait_for(timeout, |r| {
        r.time_ns >= since_ns
            && r.port_down_any()
                .is_some_and(|port| watched.iter().any(|(n, p)| *n == r.source && *p == port))
    })
}

/// Polls host reports until every host has sent everything it generated
/// and deliveries stop changing (in-flight messages have landed), or
/// `timeout` passes. Returns the last reports.
pub fn drain(fabric: &Fabric, timeout: Duration) -> Result<HostReports> {
    drain_until(fabric, timeout, &Drain::default())
}

/// What [`drain_until`] waits for beyond the plain drain.
#[derive(Clone, Debug, Default)]
pub struct Drain {
    /// A recovery protocol runs: also wait until no host retains a message
    /// (their hold windows expired) or has recovery work in progress, so
    /// the report's `retained` is 0 unless something is really stuck.
    pub until_released: bool,
    /// Hosts cut off by the faults: they may never drain, so they are not
    /// waited for.
    pub unreachable: BTreeSet<NodeRef>,
}

/// [`drain`], waiting also for what `what` asks (until `timeout`, even
/// if nothing moves meanwhile).
pub fn drain_until(fabric: &Fabric, timeout: Duration, what: &Drain) -> Result<HostReports> {
    Ok(drain_for(fabric, timeout, what, false)?.reports)
}

/// What [`drain_watch`] saw.
pub struct Drained {
    /// The hosts' last reports.
    pub reports: HostReports,
    /// Set when the traffic stopped moving: a reachable host still had
    /// messages to send and nothing was delivered for this long (at least
    /// [`crate::stall::STALL_QUIET`]).
    pub stalled_for: Option<Duration>,
}

/// [`drain_until`], telling a stall (a host still has messages to send,
/// nothing delivered for [`crate::stall::STALL_QUIET`]) apart from a
/// fabric that drained. Without a recovery protocol a stall ends the wait
/// early; with one, senders may rightly be quiet for a whole hold window
/// before they resend, so it is judged when `timeout` is up.
pub fn drain_watch(fabric: &Fabric, timeout: Duration, what: &Drain) -> Result<Drained> {
    drain_for(fabric, timeout, what, !what.until_released)
}

fn drain_for(
    fabric: &Fabric,
    timeout: Duration,
    what: &Drain,
    stop_on_stall: bool,
) -> Result<Drained> {
    let deadline = Instant::now() + timeout;
    let mut last_delivered = u64::MAX;
    let mut stable_since = Instant::now();
    loop {
        let reports = fabric.host_reports()?;
        let delivered: u64 = reports
            .iter()
            .map(|(_, r)| r.endpoint.sink.delivered_messages)
            .sum();
        let sent: u64 = reports
            .iter()
            .map(|(_, r)| r.endpoint.source.messages_sent)
            .sum();
        let reachable = || {
            reports
                .iter()
                .filter(|(n, _)| !what.unreachable.contains(n))
        };
        let drained = reachable().all(|(_, r)| r.drained);
        let released = !what.until_released
            || reachable()
                .all(|(_, r)| r.endpoint.retained == 0 && r.endpoint.recovery_in_progress == 0);
        if delivered != last_delivered {
            last_delivered = delivered;
            stable_since = Instant::now();
        }
        let settled = drained
            && released
            && (delivered >= sent
                || stable_since.elapsed()
                    > flitnet_runtime::clock::wall(Duration::from_millis(500)));
        let quiet = stable_since.elapsed();
        let stalled = (!drained
            && quiet >= flitnet_runtime::clock::wall(crate::stall::STALL_QUIET))
        .then_some(flitnet_runtime::clock::emulated(quiet));
        if stalled.is_some() && stop_on_stall {
            return Ok(Drained {
                reports,
                stalled_for: stalled,
            });
        }
        if settled || Instant::now() > deadline {
            return Ok(Drained {
                reports,
                stalled_for: stalled,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes every daemon's last report into `run_dir/reports.json`, by node
/// name, so a run can be examined after the fact.
pub fn save_reports(
    run_dir: &std::path::Path,
    topo: &Topology,
    hosts: &[(NodeRef, HostDaemonReport)],
    switches: &SwitchReports,
) -> Result<()> {
    let mut all = serde_json::Map::new();
    for (n, r) in hosts {
        all.insert(topo.node_name(*n).to_string(), serde_json::to_value(r)?);
    }
    for (n, r) in switches {
        all.insert(topo.node_name(*n).to_string(), serde_json::to_value(r)?);
    }
    crate::rundir::write(
        &run_dir.join("reports.json"),
        serde_json::to_vec_pretty(&all)?,
    )
}

/// Totals over every host.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Totals {
    pub messages_generated: u64,
    pub messages_sent: u64,
    pub messages_delivered: u64,
    /// Sent but never delivered.
    pub messages_lost: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub corrupted: u64,
    pub incomplete_packets: u64,
    pub misdelivered_packets: u64,
    pub not_generated_queue_full: u64,
    pub flits_sent: u64,
    pub flits_delivered: u64,
    /// Messages senders still retain for recovery at the end (SBRP).
    #[serde(default)]
    pub retained: u64,
    /// Messages delivered after an SBRP recovery, and flits resent for it.
    #[serde(default)]
    pub recovered_messages: u64,
    #[serde(default)]
    pub resent_flits: u64,
    /// Sent but never delivered on flows whose source and destination the
    /// faults disconnected (lost by definition, spec 003 §5.1: "no message
    /// from or to the faulty node"); not part of `messages_lost`.
    #[serde(default)]
    pub lost_unreachable: u64,
    /// SBRP recover requests that reached senders, and how many of them
    /// the switches (node C) and the receivers sent.
    #[serde(default)]
    pub recover_requests: u64,
    #[serde(default)]
    pub rrq_from_switches: u64,
    #[serde(default)]
    pub rrq_from_receivers: u64,
    /// Receivers' gap requests (docs/sbrp.md, "Receiver gap recovery"): a
    /// flow's in-order delivery waited for a message nothing reported cut,
    /// and its receiver asked the sender for it; and how many of them
    /// found the message released (the sender's hold window over).
    #[serde(default)]
    pub gap_requests: u64,
    #[serde(default)]
    pub gap_requests_unanswered: u64,
    /// Senders' tail probes (docs/sbrp.md, "Receiver gap recovery"): one
    /// per flow whose newest message no newer one followed for the probe
    /// wait; and how many of them named a message their receiver lacked
    /// (each opened a gap, asked for among `gap_requests`).
    #[serde(default)]
    pub tail_probes_sent: u64,
    #[serde(default)]
    pub tail_probe_gaps: u64,
    /// Recover requests the switches parked (their route dead: they wait
    /// for new tables or the port's return; in faithful mode nothing ever
    /// releases them, so each is a message lost unless the receiver asks)
    /// and dropped because the switch's queue was full.
    #[serde(default)]
    pub rrq_parked: u64,
    #[serde(default)]
    pub rrq_overflow: u64,
    /// Recover requests that reached their sender after it had released
    /// the message (its hold window ran out first): each is a message lost,
    /// and under in-order delivery its flow's later messages are held
    /// behind it for good.
    #[serde(default)]
    pub rrq_unrecoverable: u64,
    /// Packets resent by senders.
    #[serde(default)]
    pub resent_packets: u64,
    /// Duplicate flits the receivers dropped (SBRP-0/1's overlap).
    #[serde(default)]
    pub duplicate_flits: u64,
    /// Mean latency of the recovered messages, µs (0 when none).
    #[serde(default)]
    pub recovered_latency_mean_us: f64,
    /// Their latency's count, sum and sum of squares over every host, ns
    /// (exact mean and variance, for confidence intervals).
    #[serde(default)]
    pub recovered_latency_moments_ns: flitnet_core::host::histogram::Moments,
}

impl Totals {
    /// Sums every host's delivery report and the switches' SBRP counters.
    pub fn of(hosts: &[(NodeRef, HostDaemonReport)], switches: &SwitchReports) -> Totals {
        let mut t = Totals::default();
        let (mut rec_n, mut rec_sum) = (0u64, 0.0f64);
        for (_, r) in hosts {
            let e = &r.endpoint;
            t.messages_generated += e.source.generated_messages;
            t.messages_sent += e.source.messages_sent;
            t.not_generated_queue_full += e.source.not_generated_queue_full;
            t.flits_sent += e.source.flits_sent;
            t.messages_delivered += e.sink.delivered_messages;
            t.flits_delivered += e.sink.delivered_flits;
            t.duplicates += e.sink.duplicate_messages;
            t.out_of_order += e.sink.out_of_order_messages;
            t.corrupted += e.sink.corrupted_messages;
            t.incomplete_packets += e.sink.incomplete_packets;
            t.misdelivered_packets += e.sink.misdelivered_packets;
            t.retained += e.retained as u64;
            t.recovered_messages += e.sink.recovered_messages;
            t.resent_flits += e.sbrp.resent_flits;
            t.recover_requests += e.sbrp.rrq_received;
            t.rrq_from_receivers += e.sbrp.rrq_sent;
            t.gap_requests += e.sbrp.gap_rrq_sent;
            t.gap_requests_unanswered += e.sbrp.gap_rrq_unanswered;
            t.tail_probes_sent += e.sbrp.tail_probes_sent;
            t.tail_probe_gaps += e.sbrp.tail_probe_gaps;
            t.resent_packets += e.sbrp.resent_packets;
            t.rrq_unrecoverable += e.sbrp.unrecoverable_rrq;
            t.duplicate_flits += e.sink.duplicate_flits;
            t.recovered_latency_moments_ns
                .merge(&e.recovered_latency_moments_ns);
            let n = e.recovered_latency_ns.count;
            if n > 0 {
                rec_n += n;
                rec_sum += n as f64 * e.recovered_latency_ns.mean;
            }
        }
        t.messages_lost = t.messages_sent.saturating_sub(t.messages_delivered);
        if rec_n > 0 {
            t.recovered_latency_mean_us = rec_sum / rec_n as f64 / 1e3;
        }
        for (_, r) in switches {
            t.rrq_from_switches += r.sbrp.rrq_sent;
            t.rrq_parked += r.sbrp.rrq_parked;
            t.rrq_overflow += r.sbrp.rrq_overflow;
        }
        t
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// What `flitctl up` prints.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunReport {
    pub topology: String,
    pub switches: usize,
    pub hosts: usize,
    pub engine: String,
    pub pattern: String,
    pub load: f64,
    pub duration_s: f64,
    pub bring_up_s: f64,
    pub totals: Totals,
    /// Accepted throughput, flits/s, whole fabric.
    pub accepted_flits_per_s: f64,
    pub latency: Latency,
    /// Flits dropped by switches, by reason.
    pub drops: BTreeMap<String, u64>,
    /// Datagrams switches dropped whole because they could not decode
    /// them (`bad-datagram`; counted in datagrams, not flits).
    #[serde(default)]
    pub bad_datagrams: u64,
    pub faults: Vec<FaultTiming>,
    /// Flits that arrived at a full buffer (hosts and switches): must be 0.
    pub credit_violations: u64,
    /// True when every sent message was delivered exactly once, in order.
    pub lossless: bool,
    /// Hosts the faults cut off from the largest part of the fabric.
    #[serde(default)]
    pub unreachable_hosts: Vec<String>,
    /// Set when the traffic stopped moving before every message was
    /// delivered: where the flits are and what they wait for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<crate::stall::StallDiagnosis>,
    /// Set when a signal (SIGINT, SIGTERM) cut the run short: the counts
    /// are what the daemons had when it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
    /// Daemons that did not answer the report request (stopped or
    /// stalled), with why: their counts are missing from the totals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unanswered: Vec<String>,
    /// Whether the run measured the emulated network or this machine
    /// (docs/fidelity.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<crate::fidelity::Fidelity>,
    /// What makes the figures less than they seem (e.g. no daemon event
    /// can reach the controller, so it saw no fault it did not inject).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Hosts the faults cut off: those outside the largest connected part of
/// the fabric without the failed links and switches (ties: the part
/// holding the lowest-numbered host). A part of one host is never the
/// largest: a host alone talks to nobody, so when no two hosts stay
/// connected every host is cut off.
pub fn unreachable_hosts(topo: &Topology, faults: &FaultSet) -> BTreeSet<NodeRef> {
    let mut part: BTreeMap<NodeRef, usize> = BTreeMap::new();
    let mut sizes = Vec::new();
    for h in 0..topo.num_hosts() as u32 {
        let start = NodeRef::Host(h);
        if part.contains_key(&start) {
            continue;
        }
        let id = sizes.len();
        let mut hosts = 0;
        let mut stack = vec![start];
        part.insert(start, id);
        while let Some(n) = stack.pop() {
            if matches!(n, NodeRef::Host(_)) {
                hosts += 1;
            }
            if matches!(n, NodeRef::Switch(s) if faults.switches.contains(&s)) {
                continue;
            }
            for port in 0..topo.radix(n) as u16 {
                let p = PortRef { node: n, port };
                let Some(l) = topo.link_at(p) else { continue };
                if faults.links.contains(&l) {
                    continue;
                }
                let Some(peer) = topo.peer(p) else { continue };
                if matches!(peer.node, NodeRef::Switch(s) if faults.switches.contains(&s)) {
                    continue;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = part.entry(peer.node) {
                    e.insert(id);
                    stack.push(peer.node);
                }
            }
        }
        sizes.push(hosts);
    }
    let main = (0..sizes.len())
        .filter(|&i| sizes[i] >= 2)
        .max_by_key(|&i| (sizes[i], std::cmp::Reverse(i)));
    part.into_iter()
        .filter(|(n, id)| matches!(n, NodeRef::Host(_)) && Some(*id) != main)
        .map(|(n, _)| n)
        .collect()
}

impl RunReport {
    /// Moves the losses on flows to or from `unreachable` hosts out of
    /// `messages_lost` into `lost_unreachable` (hosts report per-flow
    /// counts; without them nothing moves), and re-judges `lossless`.
    pub fn account_unreachable(
        &mut self,
        topo: &Topology,
        hosts: &[(NodeRef, HostDaemonReport)],
        unreachable: &BTreeSet<NodeRef>,
    ) {
        self.unreachable_hosts = unreachable
            .iter()
            .map(|&n| topo.node_name(n).to_string())
            .collect();
        if unreachable.is_empty() {
            return;
        }
        let id = |n: &NodeRef| match n {
            NodeRef::Host(h) => Some(*h),
            NodeRef::Switch(_) => None,
        };
        let cut: BTreeSet<u32> = unreachable.iter().filter_map(id).collect();
        let by_host: BTreeMap<u32, &HostDaemonReport> = hosts
            .iter()
            .filter_map(|(n, r)| Some((id(n)?, r)))
            .collect();
        let mut lost = 0;
        for (&s, rs) in &by_host {
            for (&d, rd) in &by_host {
                if s != d && (cut.contains(&s) || cut.contains(&d)) {
                    let sent = rs.endpoint.sent_to.get(&d).copied().unwrap_or(0);
                    let delivered = rd.endpoint.delivered_from.get(&s).copied().unwrap_or(0);
                    lost += sent.saturating_sub(delivered);
                }
            }
        }
        // What cut-off senders still hold can never be sent or resent.
        let held: u64 = by_host
            .iter()
            .filter(|(h, _)| cut.contains(h))
            .map(|(_, r)| r.endpoint.retained as u64)
            .sum();
        let t = &mut self.totals;
        t.retained = t.retained.saturating_sub(held);
        t.lost_unreachable = lost.min(t.messages_lost);
        t.messages_lost -= t.lost_unreachable;
        self.lossless = self.stall.is_none()
            && t.messages_lost == 0
            && t.duplicates == 0
            && t.out_of_order == 0
            && t.corrupted == 0
            && t.misdelivered_packets == 0
            && self.unanswered.is_empty();
    }
}

impl RunReport {
    pub fn build(
        topo: &Topology,
        engine: &str,
        spec: &TrafficSpec,
        hosts: HostReports,
        switches: SwitchReports,
        faults: Vec<FaultTiming>,
        bring_up: Duration,
    ) -> RunReport {
        let t = Totals::of(&hosts, &switches);
        let mut accepted = 0.0;
        let mut p50 = Vec::new();
        let (mut p99, mut max) = (0u64, 0u64);
        for (_, r) in &hosts {
            let e = &r.endpoint;
            accepted += e.throughput.accepted_flits_per_s;
            if e.latency_ns.count > 0 {
                p50.push(e.latency_ns.p50);
                p99 = p99.max(e.latency_ns.p99);
                max = max.max(e.latency_ns.max);
            }
        }
        p50.sort_unstable();
        let mut drops = BTreeMap::new();
        let mut bad_datagrams = 0;
        for (_, r) in &switches {
            for reason in DropReason::ALL {
                let n = r.counters.drops.get(reason);
                if reason == DropReason::BadDatagram {
                    bad_datagrams += n;
                } else if n > 0 {
                    *drops.entry(reason.name().to_string()).or_insert(0) += n;
                }
            }
        }
        let credit_violations = hosts.iter().map(|(_, r)| r.credit_violations).sum::<u64>()
            + switches
                .iter()
                .map(|(_, r)| r.credit_violations)
                .sum::<u64>();
        let lossless = t.messages_lost == 0
            && t.duplicates == 0
            && t.out_of_order == 0
            && t.corrupted == 0
            && t.misdelivered_packets == 0;
        let unanswered = crate::fabric::stalled_daemons();
        RunReport {
            topology: topo.name.clone(),
            switches: topo.num_switches(),
            hosts: topo.num_hosts(),
            engine: engine.to_string(),
            pattern: spec.pattern.clone(),
            load: spec.load,
            duration_s: spec.duration_ns as f64 / 1e9,
            bring_up_s: bring_up.as_secs_f64(),
            totals: t,
            accepted_flits_per_s: accepted,
            latency: Latency {
                // The median host's median: hosts report percentiles, not
                // raw samples. p99 and max are the worst host's.
                p50_us: p50.get(p50.len() / 2).copied().unwrap_or(0) as f64 / 1e3,
                p99_us: p99 as f64 / 1e3,
                max_us: max as f64 / 1e3,
            },
            drops,
            bad_datagrams,
            faults,
            credit_violations,
            // Missing counts cannot be called lossless.
            lossless: lossless && unanswered.is_empty(),
            unreachable_hosts: Vec::new(),
            stall: None,
            interrupted: crate::interrupt::received().map(str::to_string),
            unanswered,
            fidelity: None,
            warnings: Vec::new(),
        }
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.totals;
        if let Some(signal) = &self.interrupted {
            writeln!(
                f,
                "INTERRUPTED by {signal}: traffic stopped early; the counts are what the daemons had then"
            )?;
        }
        writeln!(
            f,
            "flitnet run: {} ({} switches, {} hosts), routing {}",
            self.topology, self.switches, self.hosts, self.engine
        )?;
        for who in &self.unanswered {
            writeln!(f, "  stalled     {who}: its counts are missing")?;
        }
        for warning in &self.warnings {
            writeln!(f, "  warning     {warning}")?;
        }
        let x = self
            .fidelity
            .as_ref()
            .map_or(String::new(), |fi| fi.factor_note());
        writeln!(
            f,
            "  traffic     {} at load {:.2} for {:.1}s{x}; fabric up in {:.2}s (wall time)",
            self.pattern, self.load, self.duration_s, self.bring_up_s
        )?;
        writeln!(
            f,
            "  messages    generated {}  sent {}  delivered {}  lost {}",
            t.messages_generated, t.messages_sent, t.messages_delivered, t.messages_lost
        )?;
        if !self.unreachable_hosts.is_empty() {
            writeln!(
                f,
                "  unreachable {} (cut off by the faults; {} messages to or from them lost by definition, not counted above)",
                self.unreachable_hosts.join(" "),
                t.lost_unreachable
            )?;
        }
        if t.recovered_messages > 0 || t.resent_flits > 0 || t.retained > 0 {
            writeln!(
                f,
                "  recovery    {} recover requests ({} from switches, {} from receivers), {} packets / {} flits resent, {} messages recovered (mean latency {:.1} us), {} still held by senders (not lost)",
                t.recover_requests, t.rrq_from_switches, t.rrq_from_receivers, t.resent_packets, t.resent_flits, t.recovered_messages, t.recovered_latency_mean_us, t.retained
            )?;
            if t.gap_requests > 0 {
                writeln!(
                    f,
                    "              {} gap requests from receivers (a message nothing reported cut), {} for a message already released",
                    t.gap_requests, t.gap_requests_unanswered
                )?;
            }
            if t.tail_probe_gaps > 0 {
                writeln!(
                    f,
                    "              {} tail probes from senders, {} named a message its receiver lacked",
                    t.tail_probes_sent, t.tail_probe_gaps
                )?;
            }
            if t.rrq_parked + t.rrq_overflow > 0 {
                writeln!(
                    f,
                    "              {} recover requests parked by switches (route dead), {} dropped (switch queue full)",
                    t.rrq_parked, t.rrq_overflow
                )?;
            }
            if t.rrq_unrecoverable > 0 {
                writeln!(
                    f,
                    "              {} recover requests reached their sender after it released the message (hold window over)",
                    t.rrq_unrecoverable
                )?;
            }
        }
        writeln!(f, "  integrity   duplicates {}  out-of-order {}  corrupted {}  incomplete packets {}  misdelivered {}", t.duplicates, t.out_of_order, t.corrupted, t.incomplete_packets, t.misdelivered_packets)?;
        writeln!(
            f,
            "  flits       sent {}  delivered {}  accepted {:.0} flits/s{x}",
            t.flits_sent, t.flits_delivered, self.accepted_flits_per_s
        )?;
        writeln!(
            f,
            "  latency     p50 {:.1} us  p99 {:.1} us  max {:.1} us{x}",
            self.latency.p50_us, self.latency.p99_us, self.latency.max_us
        )?;
        writeln!(
            f,
            "  credits     {} violations (flits that found no buffer)",
            self.credit_violations
        )?;
        if self.drops.is_empty() {
            writeln!(f, "  drops       none")?;
        } else {
            let d: Vec<String> = self.drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
            writeln!(f, "  drops       {}", d.join("  "))?;
        }
        if self.bad_datagrams > 0 {
            writeln!(
                f,
                "  datagrams   {} dropped undecodable (bad-datagram)",
                self.bad_datagrams
            )?;
        }
        for fault in &self.faults {
            let opt = |x: Option<f64>| x.map_or("never".to_string(), |v| format!("{v:.1} ms"));
            writeln!(
                f,
                "  fault       {} {}: detected after {}{}, new routes installed after {}{x}",
                fault.kind,
                fault.element,
                opt(fault.detection_ms),
                fault
                    .detected_by
                    .as_ref()
                    .map_or(String::new(), |b| format!(" by {b}")),
                opt(fault.routes_installed_ms)
            )?;
        }
        if let Some(stall) = &self.stall {
            write!(f, "{stall}")?;
        }
        if let Some(fi) = &self.fidelity {
            write!(f, "{fi}")?;
        }
        writeln!(
            f,
            "  verdict     {}",
            if let Some(stall) = &self.stall {
                format!(
                    "STALLED with {} messages pending (see above)",
                    stall.messages_pending
                )
            } else if self.lossless {
                "every message sent was delivered exactly once, in order".to_string()
            } else {
                format!(
                    "{} messages lost, {} duplicated, {} out of order",
                    t.messages_lost, t.duplicates, t.out_of_order
                )
            }
        )
    }
}

/// Timing of one fault or repair.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ActionTiming {
    /// Seconds after traffic started.
    pub at_s: f64,
    pub action: String,
    pub element: String,
    pub origin: String,
    /// Fault → the first neighbour's port-down (repair → port-up), ms.
    pub detection_ms: Option<f64>,
    pub detected_by: Option<String>,
    pub detection_reason: Option<String>,
    /// Fault (or repair) → tables without (with) the element installed on
    /// every live switch, ms. Only with mechanism `reroute`.
    pub routes_installed_ms: Option<f64>,
    /// Corrupt: CRC errors counted by the receiving end at the end of the run.
    pub crc_errors_at_receiver: Option<u64>,
    /// Corrupt: datagrams asked to be damaged.
    pub count: Option<u32>,
    /// Corrupt: link errors the receiving end detected (each took the link
    /// down for a retrain; docs/wire.md), and link resets the damaging
    /// end received from it, at the end of the run.
    #[serde(default)]
    pub link_errors_at_receiver: Option<u64>,
    #[serde(default)]
    pub link_resets_at_sender: Option<u64>,
    /// Corrupt: from the first link error to both ends back up (daemon
    /// events), ms.
    #[serde(default)]
    pub link_down_ms: Option<f64>,
    /// DLR mechanisms: heads the switches had sent off their table port
    /// (local reroutes, summed over every switch) just before the action,
    /// so that a report shows rerouting start at a fault and stop at its
    /// repair (seed 002: routes return to the original ones).
    #[serde(default)]
    pub local_reroutes_before: Option<u64>,
    /// How long after its scheduled time the action took effect, ms, when
    /// that is at least [`LATE_ACTION_MS`]: the controller applies the
    /// timeline between re-routes, so a step due while one is computed
    /// and installed waits for it (`at_s` is when it took effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_ms: Option<f64>,
    /// Stop-switch: how long the switch's process was stopped, ms (it is
    /// detected only if that is longer than `dead-after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_ms: Option<f64>,
}

/// The lateness from which an action's report states it (`late_ms`):
/// above the controller's ordinary wake-up delay.
pub const LATE_ACTION_MS: f64 = 0.1;

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::control::SwitchReport;
    use flitnet_core::topology::generators::{hypercube, mesh_or_torus};

    #[test]
    fn only_hosts_the_faults_really_cut_off_are_unreachable() {
        let cube = hypercube(4).unwrap();
        let link = crate::parse::parse_link(&cube, "r05:2").unwrap();
        assert!(unreachable_hosts(&cube, &FaultSet::with_links([link])).is_empty());
        let mut dead = FaultSet::none();
        dead.switches.insert(7);
        assert_eq!(
            unreachable_hosts(&cube, &dead),
            BTreeSet::from([NodeRef::Host(7)])
        );
        // A corner of a mesh loses both its links: cut off too.
        let mesh = mesh_or_torus(&[3, 3], false).unwrap();
        let corner = [
            crate::parse::parse_link(&mesh, "r0:1").unwrap(),
            crate::parse::parse_link(&mesh, "r0:3").unwrap(),
        ];
        assert_eq!(
            unreachable_hosts(&mesh, &FaultSet::with_links(corner)),
            BTreeSet::from([NodeRef::Host(0)])
        );
        // Opposite corners of a 2-cube dead: r1 and r2 share no link, so
        // no two hosts can talk, h0 (whose own switch is dead) included.
        let square = hypercube(2).unwrap();
        let mut dead = FaultSet::none();
        dead.switches.extend([0, 3]);
        assert_eq!(
            unreachable_hosts(&square, &dead),
            (0..4).map(NodeRef::Host).collect::<BTreeSet<_>>()
        );
    }

    /// The switches' parked and overflowed recover requests reach the
    /// totals and the printed recovery line (a parked RRQ in faithful mode
    /// is a message nobody will resend).
    #[test]
    fn parked_and_gap_recover_requests_are_totalled_and_printed() {
        let cube = hypercube(2).unwrap();
        let spec = TrafficSpec {
            pattern: "uniform".into(),
            load: 0.1,
            message_flits: 8,
            duration_ns: 1_000_000,
            rounds: 1,
            seed: 1,
        };
        let sw = |parked: u64, overflow: u64| {
            let mut r = SwitchReport::default();
            r.sbrp.rrq_sent = 3;
            r.sbrp.rrq_parked = parked;
            r.sbrp.rrq_overflow = overflow;
            r
        };
        let resender = || {
            let mut h = HostDaemonReport::default();
            h.endpoint.sbrp.resent_packets = 2;
            h.endpoint.sbrp.resent_flits = 16;
            h
        };
        let mut host = resender();
        host.endpoint.sbrp.unrecoverable_rrq = 5;
        host.endpoint.sbrp.gap_rrq_sent = 7;
        host.endpoint.sbrp.gap_rrq_unanswered = 2;
        host.endpoint.sbrp.tail_probes_sent = 9;
        host.endpoint.sbrp.tail_probe_gaps = 3;
        let r = RunReport::build(
            &cube,
            "auto",
            &spec,
            vec![(NodeRef::Host(0), host)],
            vec![
                (NodeRef::Switch(0), sw(2, 0)),
                (NodeRef::Switch(1), sw(1, 4)),
            ],
            vec![],
            Duration::from_millis(1),
        );
        assert_eq!(
            (
                r.totals.rrq_from_switches,
                r.totals.rrq_parked,
                r.totals.rrq_overflow
            ),
            (6, 3, 4)
        );
        assert_eq!(r.totals.rrq_unrecoverable, 5);
        assert_eq!(
            (
                r.totals.gap_requests,
                r.totals.gap_requests_unanswered,
                r.totals.tail_probes_sent,
                r.totals.tail_probe_gaps
            ),
            (7, 2, 9, 3)
        );
        let text = r.to_string();
        assert!(
            text.contains("7 gap requests from receivers (a message nothing reported cut), 2 for a message already released"),
            "{text}"
        );
        assert!(
            text.contains("9 tail probes from senders, 3 named a message its receiver lacked"),
            "{text}"
        );
        assert!(
            text.contains("3 recover requests parked by switches (route dead), 4 dropped"),
            "{text}"
        );
        assert!(
            text.contains("5 recover requests reached their sender after it released the message"),
            "{text}"
        );
        let quiet = RunReport::build(
            &cube,
            "auto",
            &spec,
            vec![(NodeRef::Host(0), resender())],
            vec![(NodeRef::Switch(0), sw(0, 0))],
            vec![],
            Duration::from_millis(1),
        );
        assert!(!quiet.to_string().contains("parked"), "{quiet}");
        assert!(!quiet.to_string().contains("gap requests"), "{quiet}");
        assert!(!quiet.to_string().contains("tail probes"), "{quiet}");
    }

    #[test]
    fn losses_on_flows_of_unreachable_hosts_are_counted_apart() {
        let cube = hypercube(2).unwrap();
        let host = |sent_to: &[(u32, u64)], delivered_from: &[(u32, u64)]| {
            let mut h = HostDaemonReport::default();
            h.endpoint.sent_to = sent_to.iter().copied().collect();
            h.endpoint.delivered_from = delivered_from.iter().copied().collect();
            h.endpoint.retained = 1;
            h
        };
        let hosts = vec![
            (NodeRef::Host(0), host(&[(1, 5), (3, 4)], &[(1, 5)])),
            (NodeRef::Host(1), host(&[(0, 5)], &[(0, 4)])),
            (NodeRef::Host(3), host(&[(0, 2)], &[])),
        ];
        let mut r = RunReport {
            totals: Totals {
                messages_lost: 7,
                retained: 3,
                ..Totals::default()
            },
            ..RunReport::default()
        };
        r.account_unreachable(&cube, &hosts, &BTreeSet::from([NodeRef::Host(3)]));
        // 0→3: 4 sent, none delivered; 3→0: 2 sent, none delivered; 0→1
        // lost one, which stays a loss.
        assert_eq!(r.totals.lost_unreachable, 6);
        assert_eq!(r.totals.messages_lost, 1);
        assert_eq!(r.totals.retained, 2);
        assert_eq!(r.unreachable_hosts, ["h3"]);
        assert!(!r.lossless);
    }
}
