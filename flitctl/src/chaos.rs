//! `flitctl chaos SCENARIO.yaml`: bring a fabric up, run traffic, inject
//! the scenario's faults and repairs while it runs, let the controller
//! react (re-route on detected faults, spec 002 §3.10 DDRC), and check at
//! the end that the chosen mechanism kept its promise.
//!
//! The controller learns of faults only from the daemons' port-down and
//! port-up events (never from its own knowledge of what it broke), so a
//! SIGKILLed switch is handled exactly like a pulled cable: its neighbours'
//! keepalive timeouts are the detection.

use crate::controller::{fault_timing, link_name, Controller, Element, Policy, SETTLE_MAX};
use crate::events::{ControllerEvent, Event, Record};
use crate::fabric::Reconfiguration;
use crate::plot::{self, Marker};
use crate::report::{self, Drain, FaultTiming, RunReport};
use crate::scenario::{Action, ActionKind, Mechanism, Scenario, Target};
use crate::session::{Collected, Session, SessionOptions};
use anyhow::{Context, Result};
use clap::Args;
use flitnet_core::control::EventKind;
use flitnet_core::control::{HostDaemonReport, Request, SwitchReport};
use flitnet_core::switch::DropReason;
use flitnet_core::topology::{FaultSet, NodeRef, PortRef, Topology};
use flitnet_runtime::clock::now_ns;
use flitnet_runtime::clock::{emulated, wall};
use flitnet_runtime::control::ControlClient;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct ChaosArgs {
    /// The scenario file (YAML; see docs/chaos.md).
    pub scenario: PathBuf,
    /// Directory for configs, logs, events.jsonl, report and plot
    /// (default: a fresh private temp dir, removed after a successful run
    /// unless --keep).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Keep the default run directory (and the plot in it) after a
    /// successful run.
    #[arg(long)]
    pub keep: bool,
    /// Serve Prometheus metrics on every daemon.
    #[arg(long)]
    pub metrics: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Time dilation, instead of the scenario's `time_dilation` (`auto` by
    /// default): every emulated duration lasts N times longer in wall
    /// time; `auto` calibrates on this machine (docs/fidelity.md).
    #[arg(long, value_name = "N|auto")]
    pub time_dilation: Option<flitnet_runtime::clock::Dilation>,
    /// What carries the flits, instead of the scenario's `transport`.
    #[arg(long, value_enum)]
    pub transport: Option<crate::up::Transport>,
}

/// Throughput sampling period.
const SAMPLE_PERIOD: Duration = Duration::from_millis(100);

pub use crate::report::ActionTiming;

/// Where every lost message went (spec 002 §3.2 loss model).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Accounting {
    pub messages_lost: u64,
    /// Flits dropped by switches, by cause (live switches, plus the
    /// counters of SIGKILLed switches read just before the kill).
    pub dropped_flits: BTreeMap<String, u64>,
    /// Packets dropped by switches, by cause (head decisions).
    pub dropped_packets: BTreeMap<String, u64>,
    /// Flits written off on links (lost on the wire, or in a datagram
    /// rejected by the CRC check).
    pub link_lost_flits: u64,
    pub crc_errors: u64,
    /// Link errors switches detected (each took a link down for a retrain,
    /// so its port dropped what was routed to it meanwhile: `port-down`).
    #[serde(default)]
    pub link_errors: u64,
    /// Items that reached a disabled port (flits and credits).
    pub dropped_at_disabled_ports: u64,
    /// Upper bound of the flits a SIGKILLed switch held when it died:
    /// input buffers and output queues of every port (they die with it).
    pub killed_switch_capacity_flits: u64,
    /// Flits live switches still held at the end (input buffers and link
    /// queues): a message stuck behind them is not lost to a cause but
    /// waits in a stalled fabric, which the stall report names.
    #[serde(default)]
    pub held_in_switches_flits: u64,
    /// Sum of the above: every lost message lost (or still waits behind)
    /// at least one of them.
    pub accounted_flits: u64,
    /// Lost messages beyond what the counted causes can explain.
    pub unaccounted_messages: u64,
}

/// The state once the last action is over and the controller is idle.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AfterLastAction {
    /// Seconds after traffic started.
    pub at_s: f64,
    /// Messages sent but not yet delivered at that instant: the most that
    /// can still be lost from before it.
    pub in_flight_messages: u64,
    /// Flits dropped anywhere after that instant (0 = the repaired fabric
    /// loses nothing).
    pub flits_dropped_since: u64,
    /// Messages delivered after that instant.
    pub delivered_since: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChaosReport {
    pub scenario: String,
    pub mechanism: String,
    pub run: RunReport,
    pub actions: Vec<ActionTiming>,
    pub accounting: Accounting,
    pub after_last_action: Option<AfterLastAction>,
    /// Packets the hosts' recovery protocol (SBRP) sent again; 0 without
    /// one.
    pub packets_resent: u64,
    /// Route recomputations installed during the run.
    pub reroutes: usize,
    /// Packets the switches re-routed on their own (dynamic local
    /// rerouting; 0 without it).
    #[serde(default)]
    pub local_reroutes: u64,
    /// Actions that could not be carried out, with why.
    pub failed_actions: Vec<String>,
    /// (seconds, delivered flits/s) every 100 ms.
    pub throughput: Vec<(f64, f64)>,
    /// The timeline's `pingall` actions (`tun: true`).
    #[serde(default)]
    pub pingall: Vec<crate::apps::PingallReport>,
    /// The timeline's `iperf3` flows, with each fault's dip and recovery.
    #[serde(default)]
    pub iperf3: Vec<crate::apps::Iperf3Report>,
    pub plot: String,
    pub promise: String,
    pub promise_kept: bool,
    /// The mechanism's own section (`ft2ei`, `intermediate`, `dlr`, …),
    /// under its key, as in `up`'s report.
    #[serde(flatten)]
    pub mechanism_section: std::collections::BTreeMap<String, serde_json::Value>,
    /// Its one line for the text report.
    #[serde(skip)]
    pub mechanism_line: Option<String>,
}

/// Applied action and the controller's record of it.
pub(crate) struct Applied {
    pub(crate) action: Action,
    pub(crate) record: Record,
    /// See [`ActionTiming::local_reroutes_before`].
    pub(crate) local_reroutes_before: Option<u64>,
}

/// Cumulative host delivery counters, sampled while traffic runs.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    t_s: f64,
    delivered_flits: u64,
    delivered_messages: u64,
    sent_messages: u64,
}

/// Polls every host's report over one persistent connection each.
fn spawn_sampler(
    hosts: Vec<SocketAddr>,
    token: String,
    start: Instant,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<Sample>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut clients: Vec<Option<ControlClient>> = hosts.iter().map(|_| None).collect();
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let mut s = Sample {
                t_s: emulated(start.elapsed()).as_secs_f64(),
                ..Sample::default()
            };
            let mut complete = true;
            for (addr, slot) in hosts.iter().zip(clients.iter_mut()) {
                if slot.is_none() {
                    *slot = ControlClient::connect(*addr, &token).ok();
                }
                let body = slot.as_mut().map(|c| c.call_ok(Request::Report));
                match body {
                    Some(Ok(reply)) => match reply.into_host_report() {
                        Ok(r) => {
                            s.delivered_flits += r.endpoint.sink.delivered_flits;
                            s.delivered_messages += r.endpoint.sink.delivered_messages;
                            s.sent_messages += r.endpoint.source.messages_sent;
                        }
                        Err(_) => complete = false,
                    },
                    _ => {
                        *slot = None;
                        complete = false;
                    }
                }
            }
            if complete {
                out.lock().expect("samples poisoned").push(s);
            }
            next += wall(SAMPLE_PERIOD);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    })
}

/// The chaos front end: applies the scenario's actions to the fabric the
/// controller serves, and keeps what the report needs.
struct Chaos<'a> {
    ctl: Controller<'a>,
    mechanism: Mechanism,
    /// Reports of switches read just before they were SIGKILLed.
    retired: Vec<SwitchReport>,
    killed_capacity: u64,
    /// Flits one port can buffer (VCs × depth).
    buffered_per_port: u64,
    /// The kills in force, not yet repaired ([`Action::apply_to`]): what
    /// a repair leaves down ([`Action::held_down`]).
    faults: FaultSet,
    applied: Vec<Applied>,
    /// Actions that could not be carried out, with why.
    failed_actions: Vec<String>,
}

impl Chaos<'_> {
    fn element(&self, target: Target) -> String {
        match target {
            Target::Link { link, .. } => link_name(self.ctl.topo, link),
            Target::Switch(s) => self.ctl.topo.node_name(NodeRef::Switch(s)).to_string(),
        }
    }

    /// Carries out one action and records it.
    /// Local reroutes counted so far by every switch (live ones, and the
    /// last report of SIGKILLed ones); only under a DLR mechanism.
    fn local_reroutes_now(&self) -> Option<u64> {
        if !self.mechanism.is_dlr() {
            return None;
        }
        let live = self.ctl.fabric.switch_reports().ok()?;
        Some(
            live.iter()
                .map(|(_, r)| r)
                .chain(self.retired.iter())
                .map(|r| r.counters.reroutes)
                .sum(),
        )
    }

    fn apply(&mut self, action: &Action) -> Result<()> {
        let topo = self.ctl.topo;
        let local_reroutes_before = self.local_reroutes_now();
        if let (ActionKind::SigkillSwitch, Target::Switch(s)) = (action.kind, action.target) {
            // Its counters die with it: keep what it counted so far.
            if let Ok(r) = self
                .ctl
                .fabric
                .report_of(NodeRef::Switch(s))
                .and_then(|reply| Ok(reply.into_switch_report()?))
            {
                self.retired.push(r);
            }
        }
        // The fault happens when its injection starts: detections can come
        // back before the injection call returns.
        let started_ns = now_ns();
        let what = || {
            format!(
                "{} {} ({})",
                action.kind.name(),
                action.label,
                action.origin
            )
        };
        let held = action.held_down(topo, &self.faults);
        action.apply_to(&mut self.faults);
        let ends_up = |ends: &mut dyn Iterator<Item = PortRef>| -> Result<()> {
            for end in ends.filter(|e| !held.contains(e)) {
                self.ctl.fabric.set_port(end, true).with_context(what)?;
            }
            Ok(())
        };
        match (action.kind, action.target) {
            (ActionKind::KillLink, Target::Link { link, .. }) => {
                self.ctl.fabric.set_link(link, false).with_context(what)?
            }
            (ActionKind::RestoreLink, Target::Link { link, .. }) if held.is_empty() => {
                self.ctl.fabric.set_link(link, true).with_context(what)?
            }
            (ActionKind::RestoreLink, Target::Link { link, .. }) => {
                let l = &topo.links[link as usize];
                ends_up(&mut [l.a, l.b].into_iter())?
            }
            (ActionKind::Corrupt, Target::Link { end, .. }) => self
                .ctl
                .fabric
                .corrupt(end, action.count)
                .with_context(what)?,
            (ActionKind::KillSwitch, Target::Switch(s)) => self
                .ctl
                .fabric
                .set_all_ports(NodeRef::Switch(s), false)
                .with_context(what)?,
            (ActionKind::RestoreSwitch, Target::Switch(s)) if held.is_empty() => self
                .ctl
                .fabric
                .set_all_ports(NodeRef::Switch(s), true)
                .with_context(what)?,
            (ActionKind::RestoreSwitch, Target::Switch(s)) => ends_up(
                &mut topo.switches[s as usize]
                    .cabled_ports()
                    .map(|(port, _)| PortRef::switch(s, port)),
            )?,
            (ActionKind::SigkillSwitch, Target::Switch(s)) => {
                let node = NodeRef::Switch(s);
                // Input buffers and link output queues of every port.
                self.killed_capacity += 2 * topo.radix(node) as u64 * self.buffered_per_port;
                self.ctl.fabric.kill(node).with_context(what)?
            }
            (ActionKind::StopSwitch, Target::Switch(s)) => self
                .ctl
                .fabric
                .stop_for(NodeRef::Switch(s), action.lasts)
                .with_context(what)?,
            // A rebooted switch has no table: it gets the current ones.
            (ActionKind::RestartSwitch, Target::Switch(s)) => {
                self.ctl
                    .fabric
                    .restart_switch(s, &self.ctl.tables, Duration::from_secs(10))
                    .with_context(what)?;
                for &end in &held {
                    self.ctl.fabric.set_port(end, false).with_context(what)?;
                }
            }
            (kind, target) => anyhow::bail!("{}: {kind:?} does not apply to {target:?}", what()),
        }
        let (kind, element) = (action.kind.name().to_string(), self.element(action.target));
        let origin = Some(action.origin.clone());
        let event = if action.kind.is_repair() {
            ControllerEvent::Repair {
                kind,
                element,
                origin,
            }
        } else {
            ControllerEvent::Fault {
                kind,
                element,
                origin,
            }
        };
        let record = self.ctl.events.record_at(started_ns, event);
        self.applied.push(Applied {
            action: action.clone(),
            record,
            local_reroutes_before,
        });
        Ok(())
    }
}

/// Detection and installation times of every applied action, from the
/// event log.
pub(crate) fn timings(
    topo: &Topology,
    applied: &[Applied],
    records: &[Record],
    traffic_start_ns: u64,
    switches: &[(NodeRef, SwitchReport)],
    hosts: &[(NodeRef, HostDaemonReport)],
) -> Vec<ActionTiming> {
    let ms = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e6;
    applied
        .iter()
        .map(|a| {
            let t0 = a.record.time_ns;
            let repair = a.action.kind.is_repair();
            let mut timing = ActionTiming {
                at_s: t0.saturating_sub(traffic_start_ns) as f64 / 1e9,
                action: a.action.kind.name().to_string(),
                element: match &a.record.event {
                    Event::Controller(
                        ControllerEvent::Fault { element, .. }
                        | ControllerEvent::Repair { element, .. },
                    ) => element.clone(),
                    _ => "?".into(),
                },
                origin: a.action.origin.clone(),
                local_reroutes_before: a.local_reroutes_before,
                late_ms: {
                    let scheduled = traffic_start_ns.saturating_add(a.action.at.as_nanos() as u64);
                    Some(ms(scheduled, t0)).filter(|&l| l >= crate::report::LATE_ACTION_MS)
                },
                stopped_ms: (a.action.kind == ActionKind::StopSwitch)
                    .then_some(a.action.lasts.as_secs_f64() * 1e3),
                ..ActionTiming::default()
            };
            if a.action.kind == ActionKind::Corrupt {
                timing.count = Some(a.action.count);
                if let Target::Link { end, .. } = a.action.target {
                    // A switch port's counters, or a host's link counters.
                    let port_counter = |e: Option<PortRef>, field: LinkCounter| {
                        e.and_then(|r| {
                            let switch = switches.iter().find(|(n, _)| *n == r.node);
                            let host = hosts.iter().find(|(n, _)| *n == r.node);
                            match (switch, host) {
                                (Some((_, rep)), _) => {
                                    let p = rep.counters.ports.get(r.port as usize)?;
                                    Some(field.of_port(p))
                                }
                                (None, Some((_, rep))) => Some(field.of_host_link(&rep.link)),
                                (None, None) => None,
                            }
                        })
                    };
                    let receiver = topo.peer(end);
                    timing.crc_errors_at_receiver = port_counter(receiver, LinkCounter::CrcErrors);
                    timing.link_errors_at_receiver =
                        port_counter(receiver, LinkCounter::LinkErrors);
                    timing.link_resets_at_sender =
                        port_counter(Some(end), LinkCounter::PeerLinkResets);
                    // Detection: the first link error either end reported;
                    // back up: both ends reported port-up with no link
                    // error after (a run of damaged datagrams retrains the
                    // link several times).
                    let ends: Vec<PortRef> = std::iter::once(end).chain(receiver).collect();
                    let port_of = |r: &Record| match &r.event {
                        Event::Daemon(
                            EventKind::PortDown { port, .. }
                            | EventKind::PortUp { port }
                            | EventKind::LinkError { port, .. },
                        ) => Some(*port),
                        _ => None,
                    };
                    let on_link = |r: &&Record| {
                        r.time_ns >= t0
                            && ends.iter().any(|e| {
                                topo.node_name(e.node) == r.source && port_of(r) == Some(e.port)
                            })
                    };
                    let cause_of = |r: &Record| match &r.event {
                        Event::Daemon(EventKind::LinkError { cause, .. }) => Some(cause.clone()),
                        _ => None,
                    };
                    let mut events = records.iter().filter(on_link);
                    if let Some((d, cause)) = events.find_map(|r| Some((r, cause_of(r)?))) {
                        timing.detection_ms = Some(ms(t0, d.time_ns));
                        timing.detected_by = Some(d.source.clone());
                        timing.detection_reason = Some(format!("link error ({cause})"));
                        let mut up: BTreeMap<&str, bool> = ends
                            .iter()
                            .map(|e| (topo.node_name(e.node), false))
                            .collect();
                        for r in events {
                            let Some(state) = up.get_mut(r.source.as_str()) else {
                                continue;
                            };
                            match &r.event {
                                Event::Daemon(
                                    EventKind::LinkError { .. } | EventKind::PortDown { .. },
                                ) => *state = false,
                                Event::Daemon(EventKind::PortUp { .. }) => *state = true,
                                _ => {}
                            }
                            if up.values().all(|u| *u) {
                                timing.link_down_ms = Some(ms(d.time_ns, r.time_ns));
                                break;
                            }
                        }
                    }
                }
                return timing;
            }
            let element = match a.action.target {
                Target::Link { link, .. } => Element::Link(link),
                Target::Switch(s) => Element::Switch(s),
            };
            let handled = fault_timing(topo, &[element], repair, t0, records);
            if let Some(d) = &handled.detected {
                timing.detection_ms = Some(ms(t0, d.time_ns));
                timing.detected_by = Some(d.source.clone());
                timing.detection_reason = match &d.event {
                    Event::Daemon(EventKind::PortDown { reason, .. }) => Some(reason.clone()),
                    _ => None,
                };
            }
            let installed = handled.installed;
            timing.routes_installed_ms = installed.map(|r| ms(t0, r.time_ns));
            timing
        })
        .collect()
}

/// A link error counter, read from a switch port or a host's link.
#[derive(Clone, Copy)]
enum LinkCounter {
    CrcErrors,
    LinkErrors,
    PeerLinkResets,
}

impl LinkCounter {
    fn of_port(self, p: &flitnet_core::switch::PortCounters) -> u64 {
        match self {
            LinkCounter::CrcErrors => p.crc_errors,
            LinkCounter::LinkErrors => p.link_errors,
            LinkCounter::PeerLinkResets => p.peer_link_resets,
        }
    }

    fn of_host_link(self, l: &flitnet_core::control::HostLinkReport) -> u64 {
        match self {
            LinkCounter::CrcErrors => l.crc_errors,
            LinkCounter::LinkErrors => l.link_errors,
            LinkCounter::PeerLinkResets => l.peer_link_resets,
        }
    }
}

/// Switch-side loss counters, summed over `reports`.
fn add_switch_losses(acc: &mut Accounting, reports: &[&SwitchReport]) {
    for r in reports {
        for reason in DropReason::ALL {
            *acc.dropped_flits
                .entry(reason.name().to_string())
                .or_default() += r.counters.drops.get(reason);
        }
        for (cause, n) in &r.dropped_packets {
            *acc.dropped_packets.entry(cause.clone()).or_default() += n;
        }
        for p in &r.counters.ports {
            acc.link_lost_flits += p.lost_flits;
            acc.crc_errors += p.crc_errors;
            acc.link_errors += p.link_errors;
        }
        acc.dropped_at_disabled_ports += r.rx_dropped_down;
    }
}

/// Every flit the switches counted as lost, for the after-repair check.
pub(crate) fn flits_lost_total(reports: &[(NodeRef, SwitchReport)]) -> u64 {
    let mut acc = Accounting::default();
    add_switch_losses(
        &mut acc,
        &reports.iter().map(|(_, r)| r).collect::<Vec<_>>(),
    );
    acc.dropped_flits.values().sum::<u64>() + acc.link_lost_flits
}

pub(crate) fn accounting(
    run: &RunReport,
    collected: &Collected,
    retired: &[SwitchReport],
    killed_capacity: u64,
) -> Accounting {
    let mut acc = Accounting {
        // Losses on the flows of cut-off hosts are losses too: each lost
        // at least one counted flit like any other.
        messages_lost: run.totals.messages_lost + run.totals.lost_unreachable,
        killed_switch_capacity_flits: killed_capacity,
        ..Accounting::default()
    };
    let reports: Vec<&SwitchReport> = collected
        .switches
        .iter()
        .map(|(_, r)| r)
        .chain(retired.iter())
        .collect();
    add_switch_losses(&mut acc, &reports);
    // Flits written off on the last hop, at the hosts' own links (a switch
    // taken for dead by its host and heard again drops what it sent).
    acc.link_lost_flits += collected
        .hosts
        .iter()
        .map(|(_, h)| h.link.lost_flits)
        .sum::<u64>();
    acc.held_in_switches_flits = collected
        .switches
        .iter()
        .map(|(_, r)| {
            let buffered: u64 = r
                .counters
                .ports
                .iter()
                .flat_map(|p| p.vcs.iter().map(|vc| vc.occupancy as u64))
                .sum();
            buffered + r.links.iter().map(|l| l.queued_flits).sum::<u64>()
        })
        .sum();
    acc.dropped_flits.retain(|_, v| *v > 0);
    acc.dropped_packets.retain(|_, v| *v > 0);
    acc.accounted_flits = acc.dropped_flits.values().sum::<u64>()
        + acc.link_lost_flits
        + acc.dropped_at_disabled_ports
        + acc.killed_switch_capacity_flits
        + acc.held_in_switches_flits;
    acc.unaccounted_messages = acc.messages_lost.saturating_sub(acc.accounted_flits);
    acc
}

/// Hosts cut off from the main part of the fabric at any point of the
/// schedule: the faults of `actions` are replayed in order (repairs undo
/// them) and every intermediate state's cut-off hosts are collected.
pub(crate) fn cut_off_hosts<'a>(
    topo: &Topology,
    actions: impl IntoIterator<Item = &'a Action>,
) -> BTreeSet<NodeRef> {
    let mut faults = FaultSet::none();
    let mut cut = BTreeSet::new();
    for a in actions {
        if !a.apply_to(&mut faults) {
            continue;
        }
        cut.extend(report::unreachable_hosts(topo, &faults));
    }
    cut
}

/// Runs `flitctl chaos`.
pub fn run(args: ChaosArgs) -> Result<()> {
    // Every mistake in the scenario is caught here, before anything starts.
    let mut scenario = Scenario::load(&args.scenario)?;
    if let Some(d) = args.time_dilation {
        scenario.file.fabric.time_dilation = crate::scenario::DilationKey(d);
    }
    if let Some(t) = args.transport {
        scenario.file.fabric.transport = t.data();
    }
    let run_dir = RunDirChoice {
        path: args.run_dir.clone(),
        keep: args.keep,
    };
    let report = run_scenario(&scenario, run_dir, args.metrics)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    if !report.promise_kept {
        anyhow::bail!(
            "{}: promise broken: {}",
            scenario.path.display(),
            report.promise
        );
    }
    Ok(())
}

/// Brings the scenario's fabric up, runs it, and writes `report.json`,
/// `report.txt` and `throughput.svg` into the run directory.
/// Where a chaos run writes: `path` (`--run-dir`), or a temporary
/// directory removed after a successful run unless `keep`.
#[derive(Clone, Debug, Default)]
pub struct RunDirChoice {
    pub path: Option<PathBuf>,
    pub keep: bool,
}

pub fn run_scenario(
    scenario: &Scenario,
    run_dir: RunDirChoice,
    metrics: bool,
) -> Result<ChaosReport> {
    let f = &scenario.file;
    // SBRP levels: the daemons run the recovery protocol; the controller
    // re-routes as with `reroute`. DLR with `recovery_protocol`: the
    // daemons run it and the switches reroute on their own.
    let mut params = f.params();
    let (factor, dilation_source) = crate::fidelity::resolve(
        f.fabric.time_dilation.0,
        &scenario.topo,
        &params,
        f.traffic.load,
    );
    params.time_dilation = factor;
    let plan = f.mechanism.fabric().plan(&scenario.run_spec(&params))?;
    let opts = SessionOptions {
        params: params.clone(),
        engine: f.engine.clone(),
        seed: f.seed,
        metrics,
        run_dir: run_dir.path,
        keep: run_dir.keep,
        tables: plan.as_ref().and_then(|p| p.tables()).cloned(),
        netns: None,
        tun: f.fabric.tun.then(crate::tun::TunOptions::default),
    };
    let spec = f.traffic.spec(f.seed);
    let session = Session::start(scenario.topo.clone(), &opts, "chaos")?;
    let run_dir = session.run_dir.clone();
    let hosts: Vec<SocketAddr> = session
        .fabric
        .daemons
        .iter()
        .filter(|d| matches!(d.node, NodeRef::Host(_)))
        .map(|d| d.control_addr)
        .collect();
    let token = session.fabric.token.clone();
    let Session {
        topo,
        fabric,
        events,
        tables,
        bring_up,
        ..
    } = session;
    let engine_name = tables.engine.clone();
    if let Some(p) = &plan {
        // On error the fabric's Drop stops the daemons.
        crate::mechanism::install(&fabric, p.as_ref(), &events)?;
    }
    let policy = Policy {
        reroute: f.mechanism.acts_on_faults(),
        engine: f.engine.clone(),
        answers_faults: plan.clone().filter(|p| p.answers_faults()),
        reconfiguration: Reconfiguration::choose(f.fabric.reconfiguration, &topo),
        vcs: params.vcs,
    };
    let mut ctl = Chaos {
        ctl: Controller::new(&topo, fabric, events.clone(), tables, policy),
        mechanism: f.mechanism,
        retired: Vec::new(),
        killed_capacity: 0,
        buffered_per_port: params.vcs as u64 * params.buffer_depth as u64,
        faults: FaultSet::none(),
        applied: Vec::new(),
        failed_actions: Vec::new(),
    };
    if !f.traffic.generates_nothing() {
        ctl.ctl.fabric.start_traffic(&spec)?;
    }
    let start = Instant::now();
    let start_ns = events
        .record(ControllerEvent::traffic_started(&spec.pattern))
        .time_ns;
    let mut apps = ctl
        .ctl
        .fabric
        .tun_state()
        .map(|tun| crate::apps::Apps::new(tun.clone(), factor, run_dir.clone(), start));
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = spawn_sampler(hosts, token, start, stop.clone(), samples.clone());
    let outcome = drive(
        &mut ctl,
        scenario,
        start,
        params.dead_after_ns,
        apps.as_mut(),
    );
    // The applications end on their own (each bounds its run time); their
    // packets must be through before the drain counts what is in flight.
    while apps.as_ref().is_some_and(|a| !a.done()) && !crate::interrupt::requested() {
        ctl.ctl
            .serve_until(Instant::now() + Duration::from_millis(50));
    }
    // Hosts cut off at some point of the schedule: their flows are lost by
    // definition (spec 003 §5.1), and they may never drain.
    let drain = Drain {
        until_released: params.recovery.is_on(),
        unreachable: cut_off_hosts(&topo, ctl.applied.iter().map(|a| &a.action)),
    };
    // With a recovery protocol senders hold each message for the hold
    // window after it (or its last resend) left, and resends after a late
    // fault may still be on their way: wait for them to let go.
    let drain_timeout = wall(if drain.until_released {
        Duration::from_secs(10) + Duration::from_nanos(params.recovery_hold_ns())
    } else {
        Duration::from_secs(5)
    });
    let collected = outcome.and_then(|settled| {
        let collected = ctl.fabric_collect(&drain, drain_timeout)?;
        Ok((settled, collected))
    });
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let (settled, collected) = match collected {
        Ok(c) => c,
        Err(e) => {
            let _ = ctl.ctl.fabric.stop();
            return Err(e);
        }
    };
    let records = events.snapshot();
    let actions = timings(
        &topo,
        &ctl.applied,
        &records,
        start_ns,
        &collected.switches,
        &collected.hosts,
    );
    let (pingall, iperf3) = apps.map(|a| a.finish(&actions)).unwrap_or_default();
    let flows = crate::apps::plot_series(&iperf3);
    let mut run = RunReport::build(
        &topo,
        &engine_name,
        &spec,
        collected.hosts.clone(),
        collected.switches.clone(),
        // The richer per-action timings are in `actions`.
        Vec::<FaultTiming>::new(),
        bring_up,
    );
    run.engine = format!("{engine_name} (re-routing: {})", f.mechanism_name());
    run.fidelity = Some(crate::fidelity::judge(
        &crate::fidelity::Context {
            topo: &topo,
            params: &params,
            load: spec.load,
            hosts_offering: topo.num_hosts(),
            dilation_source,
        },
        &collected.hosts,
        &collected.switches,
    ));
    run.account_unreachable(&topo, &collected.hosts, &drain.unreachable);
    report::save_reports(&run_dir, &topo, &collected.hosts, &collected.switches)?;
    let samples = samples.lock().expect("samples poisoned").clone();
    let cumulative: Vec<(f64, u64)> = samples.iter().map(|s| (s.t_s, s.delivered_flits)).collect();
    let plot_path = run_dir.join("throughput.svg");
    let plot = if crate::rundir::removed_when_done(&run_dir) {
        "(removed with the run directory; --keep or --run-dir keeps it)".into()
    } else {
        plot_path.display().to_string()
    };
    let (mut report, svg) = ChaosReport::assemble(Assembly {
        scenario: &scenario.path.display().to_string(),
        mechanism: f.mechanism_name(),
        title: format!(
            "{} under {} ({})",
            topo.name,
            scenario.path.display(),
            f.mechanism_name()
        ),
        promises_delivery: f.promises_delivery(),
        run,
        actions,
        collected: &collected,
        retired: &ctl.retired,
        killed_capacity: ctl.killed_capacity,
        settled: settled.map(|(at_s, sent, delivered, lost_flits)| SettledAt {
            at_s,
            sent,
            delivered,
            lost_flits,
        }),
        cumulative: &cumulative,
        reroutes: ctl.ctl.reroutes,
        failed_actions: ctl.failed_actions.clone(),
        plot,
        flows: &flows,
        mechanism_report: plan.as_ref().and_then(|p| {
            crate::mechanism::report(p.as_ref(), &collected.switches, &collected.hosts, None)
        }),
    });
    report.pingall = pingall;
    report.iperf3 = iperf3;
    crate::rundir::write(&plot_path, svg)?;
    ctl.ctl.fabric.stop()?;
    crate::rundir::write(
        &run_dir.join("report.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    crate::rundir::write(&run_dir.join("report.txt"), report.to_string())?;
    Ok(report)
}

/// The controller's state once the last action is over (see
/// [`AfterLastAction`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SettledAt {
    pub at_s: f64,
    pub sent: u64,
    pub delivered: u64,
    pub lost_flits: u64,
}

/// A chaos run's figures, live or simulated, before they become its report.
pub(crate) struct Assembly<'a> {
    pub scenario: &'a str,
    pub mechanism: String,
    /// The throughput plot's title.
    pub title: String,
    pub promises_delivery: bool,
    pub run: RunReport,
    pub actions: Vec<ActionTiming>,
    pub collected: &'a Collected,
    pub retired: &'a [SwitchReport],
    pub killed_capacity: u64,
    pub settled: Option<SettledAt>,
    /// (seconds after traffic started, delivered flits so far).
    pub cumulative: &'a [(f64, u64)],
    pub reroutes: usize,
    pub failed_actions: Vec<String>,
    /// Where the plot is, as the report says it.
    pub plot: String,
    /// Application flows' throughput (Mbit per emulated second), plotted
    /// beside the fabric's.
    pub flows: &'a [plot::Series],
    /// The mechanism's section of the report, if it has one.
    pub mechanism_report: Option<flitnet_core::mechanism::MechanismReport>,
}

impl ChaosReport {
    /// The report of a run and its throughput plot (SVG), the same for
    /// `chaos` and `sim`.
    pub(crate) fn assemble(a: Assembly) -> (ChaosReport, String) {
        let acc = accounting(&a.run, a.collected, a.retired, a.killed_capacity);
        let switches = &a.collected.switches;
        let after_last_action = a.settled.map(|s| AfterLastAction {
            at_s: s.at_s,
            in_flight_messages: s.sent.saturating_sub(s.delivered),
            flits_dropped_since: flits_lost_total(switches).saturating_sub(s.lost_flits),
            delivered_since: a.run.totals.messages_delivered.saturating_sub(s.delivered),
        });
        let throughput = plot::rates(a.cumulative);
        let markers: Vec<Marker> = a
            .actions
            .iter()
            .map(|t| Marker {
                t_s: t.at_s,
                label: format!("{} {}", t.action, t.element),
                repair: t.action.starts_with("restore") || t.action.starts_with("restart"),
            })
            .collect();
        let svg = if a.flows.is_empty() {
            plot::line_chart(&a.title, "delivered flits/s", &throughput, &markers)
        } else {
            plot::line_chart_with_flows(
                &a.title,
                "delivered flits/s",
                &throughput,
                "iperf3 at the receiver, Mbit per emulated s",
                a.flows,
                &markers,
            )
        };
        let (promise, promise_kept) = verdict(a.promises_delivery, &a.run, &acc);
        let report = ChaosReport {
            scenario: a.scenario.to_string(),
            mechanism: a.mechanism,
            packets_resent: a
                .collected
                .hosts
                .iter()
                .map(|(_, r)| r.endpoint.sbrp.resent_packets)
                .sum(),
            local_reroutes: switches.iter().map(|(_, r)| r.counters.reroutes).sum(),
            run: a.run,
            actions: a.actions,
            accounting: acc,
            after_last_action,
            reroutes: a.reroutes,
            failed_actions: a.failed_actions,
            throughput,
            pingall: Vec::new(),
            iperf3: Vec::new(),
            plot: a.plot,
            promise,
            promise_kept,
            mechanism_section: a
                .mechanism_report
                .iter()
                .map(|r| (r.key.to_string(), r.body.clone()))
                .collect(),
            mechanism_line: a.mechanism_report.map(|r| r.line),
        };
        (report, svg)
    }
}

/// What the mechanism promises, and whether the run kept it.
pub(crate) fn verdict(
    promises_delivery: bool,
    run: &RunReport,
    acc: &Accounting,
) -> (String, bool) {
    let t = &run.totals;
    if promises_delivery {
        // `lossless` after the losses on cut-off hosts' flows were set
        // apart; nothing may still be held by a reachable sender either.
        let kept = run.lossless && t.retained == 0 && run.credit_violations == 0;
        return (
            format!(
                "every message delivered exactly once: {} sent, {} delivered, {} lost, {} duplicated, \
                 {} out of order, {} corrupted, {} still held by senders; {} recover requests, \
                 {} flits resent, {} messages recovered{}",
                t.messages_sent,
                t.messages_delivered,
                t.messages_lost,
                t.duplicates,
                t.out_of_order,
                t.corrupted,
                t.retained,
                t.recover_requests,
                t.resent_flits,
                t.recovered_messages,
                if run.unreachable_hosts.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} lost to or from cut-off hosts {}, by definition)",
                        t.lost_unreachable,
                        run.unreachable_hosts.join(" ")
                    )
                }
            ),
            kept,
        );
    }
    let kept = acc.unaccounted_messages == 0
        && t.duplicates == 0
        && t.misdelivered_packets == 0
        && run.credit_violations == 0;
    (
        format!(
            "every loss accounted for: {} messages lost, {} flits counted lost by cause, {} unaccounted; {} duplicated, {} misdelivered, {} credit violations",
            acc.messages_lost,
            acc.accounted_flits,
            acc.unaccounted_messages,
            t.duplicates,
            t.misdelivered_packets,
            run.credit_violations
        ),
        kept,
    )
}

/// Applies the schedule while serving events; then lets the traffic phase
/// finish. Returns, if the controller settled after the last action, the
/// instant (s after start) and the totals then: messages sent and
/// delivered, flits counted lost.
fn drive(
    ctl: &mut Chaos<'_>,
    scenario: &Scenario,
    start: Instant,
    dead_after_ns: u64,
    mut apps: Option<&mut crate::apps::Apps>,
) -> Result<Option<(f64, u64, u64, u64)>> {
    let mut pending_apps = scenario.apps.iter().peekable();
    for action in &scenario.actions {
        // Applications due first start first (at the same instant, before
        // the fault).
        while let Some(app) = pending_apps.next_if(|a| a.at <= action.at) {
            ctl.ctl.serve_until(start + wall(app.at));
            if let Some(apps) = apps.as_deref_mut() {
                apps.start(app);
            }
        }
        ctl.ctl.serve_until(start + wall(action.at));
        if crate::interrupt::requested() {
            break;
        }
        // A failed injection (e.g. corrupting a port of a SIGKILLed switch)
        // is reported; the run and the checks go on.
        if let Err(e) = ctl.apply(action) {
            let message = format!("{e:#}");
            eprintln!("warning: {message}");
            ctl.ctl.events.record(ControllerEvent::ActionFailed {
                error: message.clone(),
            });
            ctl.failed_actions.push(message);
        }
    }
    for app in pending_apps {
        ctl.ctl.serve_until(start + wall(app.at));
        if crate::interrupt::requested() {
            break;
        }
        if let Some(apps) = apps.as_deref_mut() {
            apps.start(app);
        }
    }
    let duration = wall(scenario.file.traffic.duration.0);
    let mut settled = None;
    if !scenario.actions.is_empty() && !crate::interrupt::requested() {
        // After the last action, wait for detection (up to two dead
        // intervals) and for the controller to go idle, then snapshot.
        let grace = wall(Duration::from_nanos(2 * dead_after_ns) + SETTLE_MAX * 2);
        let last = start + wall(scenario.actions.last().map_or(Duration::ZERO, |a| a.at));
        let snapshot_at = (last + grace).min(start + duration);
        ctl.ctl.serve_until(snapshot_at);
        // Detections may still be arriving: serve until the controller is
        // idle, as long as traffic runs.
        let idle_by = (start + duration).checked_sub(wall(Duration::from_millis(300)));
        while ctl.ctl.is_busy() && idle_by.is_some_and(|t| Instant::now() < t) {
            ctl.ctl
                .serve_until(Instant::now() + Duration::from_millis(50));
        }
        if !ctl.ctl.is_busy() && Instant::now() < start + duration {
            let hosts = ctl.ctl.fabric.host_reports()?;
            let sent = hosts
                .iter()
                .map(|(_, r)| r.endpoint.source.messages_sent)
                .sum();
            let delivered = hosts
                .iter()
                .map(|(_, r)| r.endpoint.sink.delivered_messages)
                .sum();
            let lost = flits_lost_total(&ctl.ctl.fabric.switch_reports()?);
            settled = Some((
                emulated(start.elapsed()).as_secs_f64(),
                sent,
                delivered,
                lost,
            ));
        }
    }
    ctl.ctl.serve_until(start + duration);
    crate::session::stop_traffic_if_interrupted(&ctl.ctl.fabric, &ctl.ctl.events);
    Ok(settled)
}

impl Chaos<'_> {
    /// Drains in-flight messages (still serving events) and collects.
    fn fabric_collect(&mut self, drain: &Drain, timeout: Duration) -> Result<Collected> {
        self.ctl
            .serve_until(Instant::now() + wall(Duration::from_millis(200)));
        let hosts = report::drain_until(&self.ctl.fabric, timeout, drain)?;
        let switches = self.ctl.fabric.switch_reports()?;
        Ok(Collected { hosts, switches })
    }
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "flitnet chaos: {} (mechanism {})",
            self.scenario, self.mechanism
        )?;
        write!(f, "{}", self.run)?;
        if let Some(line) = &self.mechanism_line {
            writeln!(f, "{line}")?;
        }
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1} ms"));
        for a in &self.actions {
            write!(f, "  {:>7.3}s  {:<15} {:<24}", a.at_s, a.action, a.element)?;
            if let Some(late) = a.late_ms {
                write!(f, " applied {late:.1} ms late (behind a re-route);")?;
            }
            if let Some(stopped) = a.stopped_ms {
                write!(f, " stopped for {stopped:.1} ms;")?;
            }
            if a.action == "corrupt" {
                let n = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
                writeln!(
                    f,
                    " {} datagrams damaged, receiver counted {} CRC errors, {} link errors \
                     (sender reset {} times), link down {}",
                    a.count.unwrap_or(0),
                    n(a.crc_errors_at_receiver),
                    n(a.link_errors_at_receiver),
                    n(a.link_resets_at_sender),
                    opt(a.link_down_ms)
                )?;
            } else {
                writeln!(
                    f,
                    " detected {}{}{}, routes installed {}",
                    opt(a.detection_ms),
                    a.detected_by
                        .as_ref()
                        .map_or(String::new(), |b| format!(" by {b}")),
                    a.detection_reason
                        .as_ref()
                        .map_or(String::new(), |r| format!(" ({r})")),
                    opt(a.routes_installed_ms)
                )?;
            }
        }
        let acc = &self.accounting;
        let causes: Vec<String> = acc
            .dropped_flits
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        writeln!(
            f,
            "  losses      {} messages lost; flits dropped by cause: {}; lost on links {}; CRC errors {}; link errors {}; at disabled ports {}; killed switches held at most {}; still in switches {}",
            acc.messages_lost,
            if causes.is_empty() { "none".into() } else { causes.join(", ") },
            acc.link_lost_flits,
            acc.crc_errors,
            acc.link_errors,
            acc.dropped_at_disabled_ports,
            acc.killed_switch_capacity_flits,
            acc.held_in_switches_flits
        )?;
        if let Some(a) = &self.after_last_action {
            writeln!(
                f,
                "  settled     at {:.2}s: {} messages in flight; since then {} delivered, {} flits dropped",
                a.at_s, a.in_flight_messages, a.delivered_since, a.flits_dropped_since
            )?;
        }
        writeln!(
            f,
            "  recovery    {} re-routes, {} local reroutes in switches, {} packets resent",
            self.reroutes, self.local_reroutes, self.packets_resent
        )?;
        if self.mechanism.contains("sbrp") {
            let t = &self.run.totals;
            writeln!(
                f,
                "  sbrp        {} recover requests ({} from switches, {} from receivers, {} gap requests), {} tail probes ({} found a gap), {} packets / {} flits resent, {} messages recovered, {} duplicate flits dropped, {} still held",
                t.recover_requests,
                t.rrq_from_switches,
                t.rrq_from_receivers,
                t.gap_requests,
                t.tail_probes_sent,
                t.tail_probe_gaps,
                t.resent_packets,
                t.resent_flits,
                t.recovered_messages,
                t.duplicate_flits,
                t.retained
            )?;
        }
        for p in &self.pingall {
            write!(f, "{p}")?;
        }
        for flow in &self.iperf3 {
            write!(f, "{flow}")?;
        }
        for failed in &self.failed_actions {
            writeln!(f, "  FAILED      {failed}")?;
        }
        writeln!(f, "  plot        {}", self.plot)?;
        writeln!(
            f,
            "  promise     {} — {}",
            if self.promise_kept { "KEPT" } else { "BROKEN" },
            self.promise
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_error_port_downs_are_told_apart() {
        let down = |reason: &str| Record {
            time_ns: 1,
            source: "s0-0".into(),
            event: Event::Daemon(EventKind::PortDown {
                port: 2,
                reason: reason.into(),
                last_heard_ns: 0,
            }),
        };
        let le = down("link error (crc, detected)");
        assert_eq!((le.port_down(), le.port_down_any()), (None, Some(2)));
        assert_eq!(down("keepalive timeout").port_down(), Some(2));
        // Errors that outlast dead_after are a fault to route around.
        let persist = down("persistent link errors (down longer than dead_after)");
        assert_eq!(persist.port_down(), Some(2));
    }
    use crate::controller::links_of;
    use crate::scenario::Scenario;

    fn rec(time_ns: u64, source: &str, event: impl Into<Event>) -> Record {
        Record {
            time_ns,
            source: source.into(),
            event: event.into(),
        }
    }

    fn down(port: u16, reason: &str) -> Event {
        Event::Daemon(EventKind::PortDown {
            port,
            reason: reason.into(),
            last_heard_ns: 0,
        })
    }

    fn scenario(timeline: &str) -> Scenario {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../topologies/scenarios/t.yaml");
        let text = format!(
            "topology: ../kary-4-2.yaml\nmechanism: reroute\ntraffic: {{duration: 5s}}\ntimeline:\n{timeline}"
        );
        Scenario::parse(&path, &text).unwrap()
    }

    #[test]
    fn detection_is_the_first_neighbour_event_and_installation_must_avoid_every_link() {
        let s = scenario("  - {at: 1s, action: sigkill-switch, target: \"s1-1\"}\n");
        let topo = &s.topo;
        let node = topo.find_node("s1-1").unwrap();
        let links = links_of(topo, node);
        assert_eq!(links.len(), 4);
        let fault = rec(
            1_000,
            "controller",
            ControllerEvent::fault("sigkill-switch", "s1-1"),
        );
        let applied = [Applied {
            action: s.actions[0].clone(),
            record: fault,
            local_reroutes_before: None,
        }];
        // Port 0 of s1-1 faces a leaf switch: that leaf's port watches it.
        let neighbour = topo.peer(PortRef { node, port: 0 }).unwrap();
        let nname = topo.node_name(neighbour.node).to_string();
        let records = vec![
            // Before the fault: ignored.
            rec(500, &nname, down(neighbour.port, "old")),
            // An unrelated port: ignored.
            rec(1_100, "s0-0", down(0, "keepalive timeout")),
            rec(301_000, &nname, down(neighbour.port, "keepalive timeout")),
            // Tables avoiding only some of its links do not count.
            rec(
                310_000,
                "controller",
                ControllerEvent::routes_installed("dmodc", vec![links[0]]),
            ),
            rec(
                400_000,
                "controller",
                ControllerEvent::routes_installed("dmodc", links.clone()),
            ),
        ];
        let t = timings(topo, &applied, &records, 0, &[], &[]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].detection_ms, Some(0.3));
        assert_eq!(t[0].detected_by.as_deref(), Some(nname.as_str()));
        assert_eq!(t[0].detection_reason.as_deref(), Some("keepalive timeout"));
        assert_eq!(t[0].routes_installed_ms, Some(0.399));
        // Nothing installed: no installation time.
        let t = timings(topo, &applied, &records[..4], 0, &[], &[]);
        assert_eq!(t[0].routes_installed_ms, None);
    }

    #[test]
    fn hosts_cut_off_at_any_point_of_the_schedule_are_unreachable() {
        // A leaf switch dies and comes back: its hosts were cut off in
        // between. A link between levels cuts nobody off.
        let s = scenario(
            "  - {at: 1s, action: kill-link, target: \"s0-1:4\"}\n  - {at: 1.5s, action: kill-switch, target: \"s0-0\"}\n  - {at: 2s, action: restore-switch, target: \"s0-0\"}\n",
        );
        let cut = cut_off_hosts(&s.topo, &s.actions);
        let names: Vec<&str> = cut.iter().map(|&n| s.topo.node_name(n)).collect();
        assert_eq!(names.len(), 4, "{names:?}");
        let leaf = s.topo.find_node("s0-0").unwrap();
        for &h in &cut {
            let port = PortRef { node: h, port: 0 };
            assert_eq!(s.topo.peer(port).unwrap().node, leaf, "{names:?}");
        }
        assert!(cut_off_hosts(&s.topo, &s.actions[..1]).is_empty());
    }

    #[test]
    fn losses_beyond_the_counted_causes_break_the_promise() {
        let mut switch = SwitchReport::default();
        switch.counters.drops.port_down = 5;
        switch.counters.drops.no_route = 2;
        switch.dropped_packets.insert("port-down".into(), 1);
        switch.counters.ports = vec![Default::default(), Default::default()];
        switch.counters.ports[0].lost_flits = 1;
        switch.counters.ports[0].crc_errors = 2;
        switch.rx_dropped_down = 1;
        let collected = Collected {
            hosts: vec![],
            switches: vec![(NodeRef::Switch(0), switch)],
        };
        let mut run = RunReport::default();
        run.totals.messages_sent = 100;
        run.totals.messages_lost = 9;
        let acc = accounting(&run, &collected, &[], 0);
        assert_eq!(acc.accounted_flits, 5 + 2 + 1 + 1);
        assert_eq!(acc.unaccounted_messages, 0);
        assert!(!acc.dropped_flits.contains_key("orphan"));
        assert!(verdict(false, &run, &acc).1);
        run.totals.messages_lost = 12;
        let acc = accounting(&run, &collected, &[], 0);
        assert_eq!(acc.unaccounted_messages, 3);
        let (text, kept) = verdict(false, &run, &acc);
        assert!(!kept && text.contains("3 unaccounted"), "{text}");
        // A SIGKILLed switch's buffers explain what died with it.
        let acc = accounting(&run, &collected, &[], 256);
        assert!(verdict(false, &run, &acc).1);
        // Duplicates are never explained by a loss.
        run.totals.duplicates = 1;
        assert!(!verdict(false, &run, &acc).1);
    }
}
