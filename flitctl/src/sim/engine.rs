//! The simulated fabric behind `flitctl sim`: every daemon's state machine
//! (the same `Switch` and `HostEndpoint` as `switchd` and `hostd`) in one
//! deterministic discrete-event simulation ([`flitnet_core::sim`]), with the
//! controller's loop (detect → re-route → record) run in emulated time.
//!
//! What the daemons push to the controller (port down and up, link errors)
//! is recorded as the same typed [`Record`]s as live, stamped with the
//! emulated time in ns since the simulation began, so the report code of
//! `up` and `chaos` reads a simulated run's log as it reads a live one.

use crate::controller::decide::{lost_switch_died_ns, tables_around, Decider, Reroute, Settle};
use crate::events::Quiesced;
use crate::events::{ControllerEvent, Event, Record, RoutesInstalled, CONTROLLER};
use crate::fabric::{Reconfiguration, QUIESCE_STALL};
use crate::route::compute_routes;
use anyhow::{bail, Context, Result};
use flitnet_core::control::{
    EventKind, FabricParams, HostDaemonReport, LinkDriver, LinkState, SwitchReport, TrafficSpec,
};
use flitnet_core::host::endpoint::{HostConfig, HostEndpoint, HostEvent};
use flitnet_core::host::retained::ReleasePolicy;
use flitnet_core::host::source::{MessageLength, OfferedLoad, SourceConfig};
use flitnet_core::host::traffic::TrafficPattern;
use flitnet_core::link::LinkEvent;
use flitnet_core::mechanism::sbrp::host::SbrpConfig;
use flitnet_core::routing::RoutingTables;
use flitnet_core::sim::Fabric;
use flitnet_core::switch::{Switch, SwitchEvent};
use flitnet_core::topology::{FaultSet, LinkId, NodeRef, PortNo, PortRef, SwitchId, Topology};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

/// How the simulator drives links: one clock for every node (a flit's send
/// stamp is exact at the receiver) and no pacing quantum (each flit leaves
/// at its own instant).
pub const SIM_DRIVER: LinkDriver = LinkDriver {
    count_transit: true,
    pacing_quantum_ns: 0,
};

/// The controller's modelled time from deciding to re-route to the tables
/// being in every switch: route computation and one control round trip per
/// switch take this long in the model (live, `compute_ms` + the installs;
/// the simulation cannot take it from a wall clock without losing
/// determinism).
pub const INSTALL_DELAY_NS: u64 = 2_000_000;

/// How often the controller looks at in-flight flits during a quiesced swap
/// (live: a 1 ms poll).
const QUIESCE_POLL_NS: u64 = 1_000_000;

/// A mutation the simulation applies at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Both ends of a link administratively down (up): they know at once.
    SetLink { link: LinkId, up: bool },
    /// A cable pulled (plugged back): what is sent on it vanishes, its
    /// ends notice only by the peer's silence (live: veth carrier loss).
    SetCable { link: LinkId, connected: bool },
    /// One port of a node down (up), administratively.
    SetPort { end: PortRef, up: bool },
    /// Every cabled port of a switch down (up), administratively.
    SetAllPorts { switch: SwitchId, up: bool },
    /// The switch's process stops at once (live: SIGKILL).
    Stop { switch: SwitchId },
    /// A stopped switch starts again: fresh state, a new link epoch, and
    /// `tables` (`Current`: the controller's tables now; `Initial`: the
    /// run's first tables).
    Restart {
        switch: SwitchId,
        tables: RestartTables,
    },
    /// The switch's process stops for `for_ns` with its state kept, then
    /// runs again (live: SIGSTOP, and SIGCONT from a timer of its own).
    Stall { switch: SwitchId, for_ns: u64 },
    /// The next `count` datagrams sent from `end` are damaged.
    Corrupt { end: PortRef, count: u32 },
    /// `end` stops (resumes) returning credits.
    WithholdCredits { end: PortRef, on: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartTables {
    Current,
    Initial,
}

/// One fault or repair of the schedule: what it does, and the record the
/// controller writes for it.
#[derive(Clone, Debug)]
pub struct Step {
    /// After traffic starts.
    pub at_ns: u64,
    pub ops: Vec<Op>,
    /// The record written when it is applied (`None`: none).
    pub record: Option<ControllerEvent>,
}

/// Everything a simulated run needs.
#[derive(Clone, Debug)]
pub struct Plan {
    pub topo: Topology,
    /// With `recovery` set to the protocol hosts and switches run.
    pub params: FabricParams,
    pub spec: TrafficSpec,
    pub engine: String,
    /// Tables to start with instead of computing them with `engine`.
    pub tables: Option<RoutingTables>,
    /// The controller re-routes (or pushes the fault set) on detected faults.
    pub reroute: bool,
    pub reconfiguration: Reconfiguration,
    /// The mechanism's controller half, if it has one.
    pub mechanism: Option<crate::mechanism::Plan>,
    pub steps: Vec<Step>,
    /// Host seed (`--seed`, the scenario's `seed`).
    pub seed: u64,
    pub timing: ControllerTiming,
    /// After the traffic phase, wait for in-flight messages (and held
    /// ones) as `up` and `chaos` do; off, the run ends with the traffic.
    pub drain: bool,
}

/// The controller's delays in emulated time.
#[derive(Clone, Copy, Debug)]
pub struct ControllerTiming {
    /// When port events are acted on.
    pub settle: Settle,
    /// Decision to tables installed ([`INSTALL_DELAY_NS`]).
    pub install_ns: u64,
}

impl Default for ControllerTiming {
    /// The live controller's settling.
    fn default() -> Self {
        ControllerTiming {
            settle: Settle::default(),
            install_ns: INSTALL_DELAY_NS,
        }
    }
}

/// A loss-relevant snapshot taken when the controller settled after the
/// last step (see `chaos`'s `after_last_action`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Settled {
    pub at_ns: u64,
    pub sent: u64,
    pub delivered: u64,
    pub lost_flits: u64,
}

/// What a simulated run produced.
pub struct Outcome {
    pub records: Vec<Record>,
    /// Index in `records` of each applied step's record (same order as the
    /// plan's steps).
    pub step_records: Vec<Option<Record>>,
    /// Local reroutes summed over every switch just before each step.
    pub local_reroutes_before: Vec<u64>,
    pub hosts: Vec<(NodeRef, HostDaemonReport)>,
    pub switches: Vec<(NodeRef, SwitchReport)>,
    /// Reports of stopped switches read just before they stopped.
    pub retired: Vec<SwitchReport>,
    /// Input buffers and output queues of stopped switches (flits).
    pub killed_capacity: u64,
    pub tables: RoutingTables,
    pub initial_engine: String,
    pub reroutes: usize,
    pub traffic_start_ns: u64,
    /// Reachable hosts still had messages to send and nothing was
    /// delivered for this long at the end.
    pub stalled_for_ns: Option<u64>,
    pub settled: Option<Settled>,
    /// (seconds after traffic start, cumulative delivered flits), every 100 ms.
    pub samples: Vec<(f64, u64)>,
    /// Switch drops when the hosts had switched to intermediate-node routes
    /// and the old packets had settled.
    pub drops_at_switchover: Option<u64>,
    pub stats: SimStats,
}

/// The simulator's own counters.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct SimStats {
    pub events: u64,
    pub datagrams: u64,
    /// Flits that crossed a link (sent by a host or a switch port).
    pub flit_hops: u64,
    pub emulated_ns: u64,
}

/// The daemon half of a node that the simulation keeps beside the state
/// machine: what `switchd`/`hostd` keep for their events and reports.
#[derive(Default)]
struct Shell {
    name: String,
    /// The last link error per port, not yet followed by a port-down.
    last_link_error: Option<(PortNo, String)>,
    /// Packets dropped, by reason (switches).
    dropped_packets: BTreeMap<&'static str, u64>,
}

impl Shell {
    fn down_reason(&mut self, port: PortNo) -> String {
        match self.last_link_error.take() {
            Some((p, reason)) if p == port => reason,
            _ => "keepalive timeout".into(),
        }
    }

    fn link_error(&mut self, port: PortNo, cause: &str, by_peer: bool) {
        let who = if by_peer { "reset by peer" } else { "detected" };
        self.last_link_error = Some((port, format!("link error ({cause}, {who})")));
    }
}

/// The source configuration a host runs for `spec` (as `hostd` builds it
/// from a `StartTraffic` request).
pub fn source_config(spec: &TrafficSpec, params: &FabricParams) -> Result<SourceConfig> {
    let pattern: TrafficPattern = spec.pattern.parse()?;
    let pattern = pattern.resolve(|p| std::fs::read_to_string(p))?;
    spec.validate(params)
        .map_err(|e| anyhow::anyhow!("traffic: {}", e.0))?;
    let link = params.bandwidth_flits_per_s.unwrap_or(1_000_000) as f64;
    Ok(SourceConfig {
        pattern,
        load: OfferedLoad::Fraction {
            fraction: spec.load,
            link_flits_per_s: link,
        },
        length: MessageLength::Fixed {
            flits: spec.message_flits,
        },
        max_packet_flits: params.max_packet_flits,
        payload_bytes: params.flit_payload as usize,
        duration_ns: Some(spec.duration_ns),
        release: if params.recovery.is_on() {
            ReleasePolicy::HoldFor {
                hold_ns: params.recovery_hold_ns(),
            }
        } else {
            ReleasePolicy::WhenSent
        },
        ..SourceConfig::default()
    })
}

/// The simulation in progress.
pub struct Sim<'p> {
    plan: &'p Plan,
    pub fabric: Fabric<Switch>,
    shells: Vec<Shell>,
    records: Vec<Record>,
    /// Records not yet looked at by the controller.
    cursor: usize,
    /// Where records go as they are made (`--events`).
    sink: Option<Box<dyn Write + 'p>>,
    initial: RoutingTables,
    tables: RoutingTables,
    // The controller: the live controller's decisions, in virtual time.
    decider: Decider,
    reroutes: usize,
    lost_switches: BTreeSet<SwitchId>,
    /// Restarts per switch (each restart gets a new link epoch).
    restarts: Vec<u16>,
    retired: Vec<SwitchReport>,
    killed_capacity: u64,
    /// Accepting daemon events (after bring-up).
    controller_on: bool,
}

impl<'p> Sim<'p> {
    /// Builds the fabric of `plan`: every host and switch as its daemon
    /// configures it, with the first tables installed, and the mechanisms
    /// configured.
    pub fn new(plan: &'p Plan, sink: Option<Box<dyn Write + 'p>>) -> Result<Sim<'p>> {
        let topo = &plan.topo;
        let params = &plan.params;
        params
            .validate()
            .map_err(|e| anyhow::anyhow!("fabric: {}", e.0))?;
        let tables = match &plan.tables {
            Some(t) => t.clone(),
            None => compute_routes(topo, &plan.engine, &FaultSet::none())?,
        };
        if tables.vcs > params.vcs {
            bail!(
                "routing engine {} needs {} virtual channels; run with --vcs {}",
                tables.engine,
                tables.vcs,
                tables.vcs
            );
        }
        if tables.switches.len() != topo.num_switches() {
            bail!(
                "routing has {} tables for {} switches",
                tables.switches.len(),
                topo.num_switches()
            );
        }
        let source = source_config(&plan.spec, params)?;
        let mut hosts = Vec::with_capacity(topo.num_hosts());
        for h in 0..topo.num_hosts() as u32 {
            let cfg = HostConfig {
                host: h,
                hosts: topo.num_hosts() as u32,
                source: SourceConfig::default(),
                injection: Default::default(),
                link: params.link_config(&SIM_DRIVER),
                epoch: 1,
                seed: plan.seed,
                record_trace: false,
            };
            let mut e = HostEndpoint::new(cfg)?;
            if topo.radix(NodeRef::Host(h)) == 2 {
                e.add_receive_port(flitnet_core::control::HOST_RECEIVE_PORT)?;
            }
            e.set_source(source.clone(), plan.spec.seed)?;
            e.set_recovery(SbrpConfig {
                protocol: params.recovery,
                gap_wait_ns: params.sbrp_gap_wait_ns(),
                ..SbrpConfig::default()
            })?;
            if let Some(m) = &plan.mechanism {
                if let Some(config) = m.bring_up(NodeRef::Host(h)) {
                    flitnet_core::mechanism::configure_host(
                        &mut e,
                        m.variant().mechanism,
                        Some(&config),
                    )?;
                }
            }
            hosts.push(e);
        }
        let mut switches = Vec::with_capacity(topo.num_switches());
        for s in 0..topo.num_switches() as SwitchId {
            switches.push(fresh_switch(plan, s, 1, &tables)?);
        }
        let fabric = Fabric::new(topo.clone(), hosts, switches, 0);
        let shells = (0..topo.num_hosts() + topo.num_switches())
            .map(|i| Shell {
                name: topo.node_name(fabric.node_ref_of(i)).to_string(),
                ..Shell::default()
            })
            .collect();
        Ok(Sim {
            plan,
            fabric,
            shells,
            records: Vec::new(),
            cursor: 0,
            sink,
            initial: tables.clone(),
            tables,
            decider: Decider::new(plan.reroute, plan.timing.settle),
            reroutes: 0,
            lost_switches: BTreeSet::new(),
            restarts: vec![0; topo.num_switches()],
            retired: Vec::new(),
            killed_capacity: 0,
            controller_on: false,
        })
    }

    fn now(&self) -> u64 {
        self.fabric.now()
    }

    fn push(&mut self, record: Record) -> Record {
        if let Some(sink) = self.sink.as_mut() {
            if let Ok(line) = serde_json::to_string(&record) {
                let _ = writeln!(sink, "{line}");
            }
        }
        self.records.push(record.clone());
        record
    }

    /// Records a controller event at `time_ns`.
    fn record_at(&mut self, time_ns: u64, event: ControllerEvent) -> Record {
        self.push(Record {
            time_ns,
            source: CONTROLLER.into(),
            event: event.into(),
        })
    }

    fn daemon_event(&mut self, i: usize, kind: EventKind) {
        let record = Record {
            time_ns: self.now(),
            source: self.shells[i].name.clone(),
            event: Event::Daemon(kind),
        };
        self.push(record);
    }

    /// Drains what node `i` raised (as its daemon's `after_io` does).
    fn observe(&mut self, i: usize) {
        let h = self.fabric.hosts.len();
        if i < h {
            while let Some(ev) = self.fabric.hosts[i].poll_event() {
                match ev {
                    HostEvent::Link(e) => {
                        let retrain_ns = self.plan.params.link_retrain_ns;
                        let last_heard_ns = self.fabric.hosts[i].link().last_heard_ns();
                        let kind = match &e {
                            LinkEvent::PeerDown => EventKind::PortDown {
                                port: 0,
                                reason: self.shells[i].down_reason(0),
                                last_heard_ns,
                            },
                            LinkEvent::PeerUp | LinkEvent::PeerRestarted { .. } => {
                                EventKind::PortUp { port: 0 }
                            }
                            LinkEvent::LinkError { cause, by_peer } => {
                                self.shells[i].link_error(0, cause.name(), *by_peer);
                                EventKind::LinkError {
                                    port: 0,
                                    cause: cause.name().into(),
                                    by_peer: *by_peer,
                                    retrain_ns,
                                }
                            }
                        };
                        self.daemon_event(i, kind);
                    }
                    HostEvent::Delivered { .. }
                    | HostEvent::Data { .. }
                    | HostEvent::Violation { .. }
                    | HostEvent::SendFailed(_) => {}
                }
            }
            return;
        }
        let s = i - h;
        while self.fabric.switches[s].take_mechanism_warning().is_some() {}
        while let Some(ev) = self.fabric.switches[s].poll_event() {
            let kind = match ev {
                SwitchEvent::PortDown { port, admin } => {
                    let sw = &self.fabric.switches[s];
                    let persist = sw.link(port).is_ok_and(|l| l.link_errors_persist());
                    let last_heard_ns = sw.link(port).map_or(0, |l| l.last_heard_ns());
                    let reason = if admin {
                        "disabled by the controller".into()
                    } else if persist {
                        let _ = self.shells[i].down_reason(port);
                        "persistent link errors (down longer than dead_after)".into()
                    } else {
                        self.shells[i].down_reason(port)
                    };
                    EventKind::PortDown {
                        port,
                        reason,
                        last_heard_ns,
                    }
                }
                SwitchEvent::LinkError {
                    port,
                    cause,
                    by_peer,
                } => {
                    self.shells[i].link_error(port, cause.name(), by_peer);
                    EventKind::LinkError {
                        port,
                        cause: cause.name().into(),
                        by_peer,
                        retrain_ns: self.plan.params.link_retrain_ns,
                    }
                }
                SwitchEvent::PortUp { port } | SwitchEvent::PeerRestarted { port } => {
                    EventKind::PortUp { port }
                }
                SwitchEvent::Dropped { reason, .. } => {
                    *self.shells[i]
                        .dropped_packets
                        .entry(reason.name())
                        .or_default() += 1;
                    continue;
                }
            };
            self.daemon_event(i, kind);
        }
    }

    /// Runs the fabric to `until`, draining every node's events as they
    /// happen and letting the controller act at its own instants.
    fn run_to(&mut self, until: u64) {
        loop {
            self.step_fabric(until);
            match self.decider.due() {
                Some(d) if d <= self.now() => {
                    if let Some(reroute) = self.decider.take_due(&self.plan.topo, self.now()) {
                        self.reroute(reroute);
                    }
                }
                _ if self.now() < until => {}
                _ => return,
            }
        }
    }

    /// Runs the fabric to `until`, or (controller on) to the instant a
    /// re-route falls due if that is earlier, one instant at a time: the
    /// events every node raised at an instant are drained and stamped with
    /// it.
    fn step_fabric(&mut self, until: u64) {
        let mut touched: Vec<usize> = Vec::new();
        loop {
            let limit = match self.decider.due() {
                Some(d) if self.controller_on => until.min(d),
                _ => until,
            };
            match self.fabric.next_event_time() {
                Some(t) if t <= limit => {
                    self.fabric.run_until_observed(t, |_, i| {
                        if touched.last() != Some(&i) {
                            touched.push(i);
                        }
                    });
                    for i in touched.drain(..) {
                        self.observe(i);
                    }
                    if self.controller_on {
                        self.absorb();
                    }
                }
                _ => {
                    self.fabric.run_until(limit);
                    return;
                }
            }
        }
    }

    /// Takes in the daemons' records since the last look (as
    /// [`crate::controller::Controller`] does).
    fn absorb(&mut self) {
        if !self.controller_on {
            self.cursor = self.records.len();
            return;
        }
        let now = self.now();
        for r in &self.records[self.cursor..] {
            self.decider.absorb(&self.plan.topo, r, now);
        }
        self.cursor = self.records.len();
    }

    /// Records a re-route (or a push of the faults) that failed.
    fn reroute_failed(&mut self, failed_links: Vec<LinkId>, error: String) {
        self.record_at(
            self.now(),
            ControllerEvent::RerouteFailed {
                failed_links,
                error,
            },
        );
    }

    /// The controller's re-route: new tables around the detected faults,
    /// in after [`INSTALL_DELAY_NS`] (or quiesced), or the fault set pushed
    /// to the hosts (intermediate nodes).
    fn reroute(&mut self, reroute: Reroute) {
        let topo = &self.plan.topo;
        let faults = reroute.faults();
        let failed_links = reroute.failed_links();
        let started = self.now();
        if let Some(mech) = self.plan.mechanism.clone().filter(|m| m.answers_faults()) {
            let variant = mech.variant();
            let mut answers = Vec::new();
            let mut error = None;
            for h in 0..topo.num_hosts() as u32 {
                let Some(config) = mech.on_faults(&faults, NodeRef::Host(h)) else {
                    continue;
                };
                match flitnet_core::mechanism::configure_host(
                    &mut self.fabric.hosts[h as usize],
                    variant.mechanism,
                    Some(&config),
                ) {
                    Ok(answer) => answers.extend(answer),
                    Err(e) => error = Some(e.to_string()),
                }
            }
            let answered = mech.faults_answered(&answers).map_err(|e| e.to_string());
            let done = started + self.plan.timing.install_ns;
            self.run_fabric_only(done);
            let answered = match (error, answered) {
                (None, Ok(a)) => a,
                (Some(error), _) | (None, Err(error)) => {
                    return self.reroute_failed(failed_links, error);
                }
            };
            let event = crate::mechanism::installed(mech.as_ref(), &faults, &answered);
            self.record_at(self.now(), ControllerEvent::RoutesInstalled(event));
            self.decider.routed(reroute);
            self.reroutes += 1;
            return;
        }
        let result = tables_around(topo, &self.plan.engine, self.plan.params.vcs, &faults);
        let tables = match result {
            Ok(t) => t,
            Err(e) => return self.reroute_failed(failed_links, format!("{e:#}")),
        };
        // Computation and the installs take the modelled delay, during
        // which the fabric runs on.
        self.run_fabric_only(started + self.plan.timing.install_ns);
        let quiesce = match self.plan.reconfiguration {
            Reconfiguration::Live => None,
            Reconfiguration::Quiesced { drain_timeout } => {
                Some(self.quiesce(drain_timeout.as_nanos() as u64))
            }
        };
        self.find_lost_switches();
        // The live controller installs on every switch but those the
        // faults cut off (`Controller::cut_off_switches`): a stopped switch
        // cut off does not hold the install up.
        let cut_off: Vec<SwitchId> = (0..topo.num_switches() as SwitchId)
            .filter(|&s| {
                let links = crate::controller::links_of(topo, NodeRef::Switch(s));
                !links.is_empty() && links.iter().all(|l| reroute.faulty.contains(l))
            })
            .collect();
        self.install(&tables, &cut_off);
        if quiesce.is_some() {
            self.set_injection_paused(false);
        }
        let mut event = RoutesInstalled {
            engine: tables.engine.clone(),
            failed_links: Some(failed_links),
            total_ms: Some(self.now().saturating_sub(started) as f64 / 1e6),
            reconfiguration: Some(
                if quiesce.is_some() {
                    "quiesced"
                } else {
                    "live"
                }
                .into(),
            ),
            quiesce,
            ..RoutesInstalled::default()
        };
        if event.quiesce.is_none() {
            event.quiesce = None;
        }
        self.record_at(self.now(), ControllerEvent::RoutesInstalled(event));
        self.tables = tables;
        self.decider.routed(reroute);
        self.reroutes += 1;
        // Then it asks whether those are dead, which a stopped one answers
        // once it runs again.
        for s in cut_off {
            self.await_stalled(NodeRef::Switch(s));
        }
    }

    /// Runs the fabric (no controller decisions) to `until`, events drained.
    fn run_fabric_only(&mut self, until: u64) {
        let on = self.controller_on;
        // Records made meanwhile are absorbed afterwards, in order.
        let cursor = self.cursor;
        self.controller_on = false;
        self.step_fabric(until);
        self.controller_on = on;
        self.cursor = cursor;
        self.absorb();
    }

    fn set_injection_paused(&mut self, paused: bool) {
        let now = self.now();
        for h in 0..self.fabric.hosts.len() {
            self.fabric.hosts[h].set_injection_paused(now, paused);
            self.fabric.touch(NodeRef::Host(h as u32));
            self.observe(h);
        }
    }

    fn in_flight(&self) -> u64 {
        let hosts: u64 = self
            .fabric
            .hosts
            .iter()
            .map(HostEndpoint::in_flight_flits)
            .sum();
        let switches: u64 = (0..self.fabric.switches.len())
            .filter(|&s| self.fabric.is_running(NodeRef::Switch(s as u32)))
            .map(|s| self.fabric.switches[s].in_flight_flits())
            .sum();
        hosts + switches
    }

    /// A quiesced swap's drain ([`crate::fabric::Fabric::swap_routes`]):
    /// hosts hold injection; the controller polls in-flight flits until two
    /// readings in a row are 0, the timeout, or no fall for
    /// [`QUIESCE_STALL`]. Injection stays paused (the caller resumes it).
    fn quiesce(&mut self, timeout_ns: u64) -> Quiesced {
        let started = self.now();
        self.set_injection_paused(true);
        let (mut zeros, mut lowest, mut fell_at) = (0, u64::MAX, started);
        let stall = QUIESCE_STALL.as_nanos() as u64;
        let left = loop {
            self.await_stalled_switches(&[]);
            let left = self.in_flight();
            zeros = if left == 0 { zeros + 1 } else { 0 };
            if zeros >= 2 {
                break None;
            }
            let now = self.now();
            if left < lowest {
                lowest = left;
                fell_at = now;
            }
            if now >= started + timeout_ns || (left > 0 && now - fell_at >= stall) {
                break Some(left);
            }
            self.run_fabric_only(now + QUIESCE_POLL_NS);
        };
        let ms = (self.now() - started) as f64 / 1e6;
        Quiesced {
            drained: left.is_none(),
            left_in_flight: left.unwrap_or(0),
            drain_ms: ms,
            paused_ms: ms,
        }
    }

    /// A stopped switch fails the install live: it is marked lost, with a
    /// `switch-lost` fault at the moment its neighbours last heard it.
    fn find_lost_switches(&mut self) {
        for s in 0..self.plan.topo.num_switches() as SwitchId {
            let node = NodeRef::Switch(s);
            if self.fabric.is_running(node) || !self.lost_switches.insert(s) {
                continue;
            }
            let topo = &self.plan.topo;
            let died_ns = lost_switch_died_ns(topo, s, &self.records, self.now());
            let name = topo.node_name(node).to_string();
            self.record_at(died_ns, ControllerEvent::fault("switch-lost", name));
        }
    }

    /// Waits, running the fabric, until `node` is no longer stopped by a
    /// stall: the live controller's request to a SIGSTOPped daemon is
    /// answered once it runs again.
    fn await_stalled(&mut self, node: NodeRef) {
        if let Some(t) = self.fabric.stalled_until(node).filter(|&t| t > self.now()) {
            self.run_fabric_only(t);
        }
    }

    /// [`Sim::await_stalled`] for every switch but those in `skip` (a
    /// request to all of them is answered once the last runs again).
    fn await_stalled_switches(&mut self, skip: &[SwitchId]) {
        let until = (0..self.fabric.switches.len() as SwitchId)
            .filter(|s| !skip.contains(s))
            .filter_map(|s| self.fabric.stalled_until(NodeRef::Switch(s)))
            .max();
        if let Some(t) = until.filter(|&t| t > self.now()) {
            self.run_fabric_only(t);
        }
    }

    /// Installs `tables` on every running switch and lets them act on it;
    /// a switch in `cut_off` that is stopped keeps its table (live: the
    /// controller does not ask it), and the install waits for any other
    /// stopped one.
    fn install(&mut self, tables: &RoutingTables, cut_off: &[SwitchId]) {
        self.await_stalled_switches(cut_off);
        let h = self.fabric.hosts.len();
        for s in 0..self.fabric.switches.len() {
            let node = NodeRef::Switch(s as u32);
            if !self.fabric.is_running(node)
                || (cut_off.contains(&(s as SwitchId)) && self.fabric.stalled_until(node).is_some())
            {
                continue;
            }
            self.fabric.switches[s]
                .install_table(tables.switches[s].clone(), tables.vc_policy(s).clone());
            self.fabric.touch(NodeRef::Switch(s as u32));
            self.observe(h + s);
        }
    }

    fn touch(&mut self, n: NodeRef) {
        self.fabric.touch(n);
        let i = match n {
            NodeRef::Host(h) => h as usize,
            NodeRef::Switch(s) => self.fabric.hosts.len() + s as usize,
        };
        self.observe(i);
    }

    fn set_port(&mut self, end: PortRef, up: bool) -> Result<()> {
        match end.node {
            NodeRef::Switch(s) => {
                self.fabric.switches[s as usize]
                    .set_port_admin(end.port, up)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            NodeRef::Host(h) => {
                let e = &mut self.fabric.hosts[h as usize];
                if end.port == 0 {
                    e.link_mut().set_admin_up(up);
                } else if e.receive_link().is_some_and(|(p, _)| p == end.port) {
                    e.link_of_mut(end.port).set_admin_up(up);
                } else {
                    bail!("host {h} has no port {}", end.port);
                }
            }
        }
        self.touch(end.node);
        Ok(())
    }

    fn cabled(&self, s: SwitchId) -> Vec<PortNo> {
        self.plan.topo.switches[s as usize]
            .cabled_ports()
            .map(|(p, _)| p)
            .collect()
    }

    /// Applies one operation now.
    fn apply(&mut self, op: &Op) -> Result<()> {
        // A request to a stopped daemon is answered when it runs again.
        match *op {
            Op::SetLink { link, .. } => {
                let l = &self.plan.topo.links[link as usize];
                for end in [l.a, l.b] {
                    self.await_stalled(end.node);
                }
            }
            Op::SetPort { end, .. } | Op::Corrupt { end, .. } | Op::WithholdCredits { end, .. } => {
                self.await_stalled(end.node)
            }
            Op::SetAllPorts { switch, .. } => self.await_stalled(NodeRef::Switch(switch)),
            _ => {}
        }
        let topo = &self.plan.topo;
        let name = |n: NodeRef| topo.node_name(n).to_string();
        match *op {
            Op::SetLink { link, up } => {
                let l = topo.links[link as usize].clone();
                for end in [l.a, l.b] {
                    if let NodeRef::Switch(s) = end.node {
                        if !self.fabric.is_running(end.node) {
                            bail!("{} is not running", name(NodeRef::Switch(s)));
                        }
                    }
                    self.set_port(end, up)?;
                }
            }
            Op::SetCable { link, connected } => self.fabric.set_cable(link, connected),
            Op::SetPort { end, up } => {
                if !self.fabric.is_running(end.node) {
                    bail!("{} is not running", name(end.node));
                }
                self.set_port(end, up)?
            }
            Op::SetAllPorts { switch, up } => {
                let node = NodeRef::Switch(switch);
                if !self.fabric.is_running(node) {
                    bail!("{} is not running", name(node));
                }
                for port in self.cabled(switch) {
                    self.set_port(PortRef { node, port }, up)?;
                }
            }
            Op::Stop { switch } => {
                let node = NodeRef::Switch(switch);
                if !self.fabric.is_running(node) {
                    bail!("{} is not running", name(node));
                }
                self.retired.push(self.switch_report(switch));
                let per_port = self.plan.params.vcs as u64 * self.plan.params.buffer_depth as u64;
                self.killed_capacity += 2 * topo.radix(node) as u64 * per_port;
                self.fabric.set_running(node, false);
            }
            Op::Restart { switch, tables } => {
                let node = NodeRef::Switch(switch);
                if self.fabric.is_running(node) {
                    bail!(
                        "{} is running; only a killed daemon can be restarted",
                        name(node)
                    );
                }
                self.restarts[switch as usize] += 1;
                let epoch = 1 + 2 * self.restarts[switch as usize];
                let t = match tables {
                    RestartTables::Current => self.tables.clone(),
                    RestartTables::Initial => self.initial.clone(),
                };
                let fresh = fresh_switch(self.plan, switch, epoch, &t)?;
                let i = self.fabric.hosts.len() + switch as usize;
                self.fabric.switches[switch as usize] = fresh;
                self.shells[i].dropped_packets.clear();
                self.shells[i].last_link_error = None;
                self.lost_switches.remove(&switch);
                self.fabric.set_running(node, true);
                self.observe(i);
            }
            Op::Stall { switch, for_ns } => {
                let node = NodeRef::Switch(switch);
                if !self.fabric.is_running(node) {
                    bail!("{} is not running", name(node));
                }
                let until = self.now().saturating_add(for_ns);
                self.fabric.stall(node, until);
            }
            Op::Corrupt { end, count } => {
                if !self.fabric.is_running(end.node) {
                    bail!("{} is not running", name(end.node));
                }
                self.fabric.corrupt(end, count)
            }
            Op::WithholdCredits { end, on } => {
                let NodeRef::Switch(s) = end.node else {
                    bail!("credits are withheld on switch ports only");
                };
                self.fabric.switches[s as usize]
                    .set_credits_withheld(end.port, on)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                self.touch(end.node);
            }
        }
        Ok(())
    }

    /// Local reroutes counted so far (running switches and retired ones).
    fn local_reroutes(&self) -> u64 {
        self.fabric
            .switches
            .iter()
            .map(|s| s.counters().reroutes)
            .chain(self.retired.iter().map(|r| r.counters.reroutes))
            .sum()
    }

    /// What `hostd` answers to `Report`.
    pub fn host_report(&self, h: usize) -> HostDaemonReport {
        HostDaemonReport::of(self.shells[h].name.clone(), &self.fabric.hosts[h])
    }

    /// What `switchd` answers to `Report`.
    pub fn switch_report(&self, s: SwitchId) -> SwitchReport {
        let sw = &self.fabric.switches[s as usize];
        let i = self.fabric.hosts.len() + s as usize;
        let c = sw.counters();
        let cabled = self.cabled(s);
        let links = || (0..c.ports.len() as PortNo).filter_map(|p| sw.link(p).ok());
        SwitchReport {
            name: self.shells[i].name.clone(),
            counters: sw.counters_at(self.fabric.now()),
            credit_violations: links().map(|l| l.stats().rx_overflow).sum(),
            credits_missing: cabled
                .iter()
                .filter_map(|&p| sw.link(p).ok())
                .map(|l| l.credits_missing())
                .sum(),
            rx_dropped_down: links().map(|l| l.stats().rx_dropped_down).sum(),
            dropped_packets: self.shells[i]
                .dropped_packets
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            corrupted_datagrams_sent: Vec::new(),
            sbrp: sw.sbrp_counters().clone(),
            links: cabled
                .iter()
                .filter_map(|&p| sw.link(p).ok().map(|l| LinkState::of(p, l)))
                .collect(),
            event_loop: Default::default(),
        }
    }

    /// Reports of every host.
    pub fn host_reports(&self) -> Vec<(NodeRef, HostDaemonReport)> {
        (0..self.fabric.hosts.len())
            .map(|h| (NodeRef::Host(h as u32), self.host_report(h)))
            .collect()
    }

    /// Reports of every running switch.
    pub fn switch_reports(&self) -> Vec<(NodeRef, SwitchReport)> {
        (0..self.fabric.switches.len() as SwitchId)
            .filter(|&s| self.fabric.is_running(NodeRef::Switch(s)))
            .map(|s| (NodeRef::Switch(s), self.switch_report(s)))
            .collect()
    }

    fn delivered(&self) -> (u64, u64, u64) {
        let mut flits = 0;
        let mut msgs = 0;
        let mut sent = 0;
        for h in &self.fabric.hosts {
            let s = h.sink().stats();
            flits += s.delivered_flits;
            msgs += s.delivered_messages;
            sent += h.source().stats().messages_sent;
        }
        (flits, msgs, sent)
    }

    fn flits_lost(&self) -> u64 {
        let mut n = 0;
        for s in &self.fabric.switches {
            let c = s.counters();
            n += c.drops.total();
            n += c.ports.iter().map(|p| p.lost_flits).sum::<u64>();
        }
        n
    }

    fn total_drops(&self) -> u64 {
        self.switch_reports()
            .iter()
            .map(|(_, r)| r.dropped_flits())
            .sum()
    }

    /// Runs the whole plan: bring-up, traffic with the steps, drain.
    /// `unreachable`: hosts the schedule cuts off (never waited for).
    pub fn run(mut self, unreachable: &BTreeSet<NodeRef>) -> Result<Outcome> {
        let plan = self.plan;
        let first = self.initial.engine.clone();
        self.record_at(0, ControllerEvent::first_routes(&first));
        // The switches were configured as they were made (`fresh_switch`).
        if let Some((m, config)) = plan
            .mechanism
            .as_ref()
            .and_then(|m| m.describe().map(|c| (m, c)))
        {
            self.record_at(
                0,
                ControllerEvent::MechanismConfigured {
                    mechanism: m.variant().name.to_string(),
                    config,
                },
            );
        }
        // Bring-up: the links find their peers before traffic starts.
        let bring_up = plan.params.keepalive_interval_ns.clamp(100_000, 1_000_000);
        self.fabric.wake_all();
        for i in 0..self.shells.len() {
            self.observe(i);
        }
        self.step_fabric(bring_up);
        let start = self.now();
        self.controller_on = true;
        self.cursor = self.records.len();
        for h in &mut self.fabric.hosts {
            h.start(start);
        }
        self.fabric.wake_all();
        let start_record =
            self.record_at(start, ControllerEvent::traffic_started(&plan.spec.pattern));
        let _ = start_record;
        let duration = plan.spec.duration_ns;
        let sample_every = 100_000_000u64;
        let mut samples = vec![(0.0, 0u64)];
        let mut next_sample = start + sample_every;
        let mut step_records = Vec::new();
        let mut reroutes_before = Vec::new();
        let mut switchover: Option<u64> = None;
        let mut drops_at_switchover = None;
        for step in &plan.steps {
            let at = start + step.at_ns;
            while next_sample <= at {
                self.run_to(next_sample);
                samples.push(((next_sample - start) as f64 / 1e9, self.delivered().0));
                next_sample += sample_every;
            }
            self.run_to(at);
            reroutes_before.push(self.local_reroutes());
            let mut failed = None;
            for op in &step.ops {
                if let Err(e) = self.apply(op) {
                    failed = Some(format!("{e:#}"));
                    break;
                }
            }
            // Stamped when it took effect: a step due while a re-route was
            // being computed, installed or quiesced waits for it to end,
            // as the live controller's single loop makes it wait.
            let now = self.now();
            let record = match (failed, &step.record) {
                (Some(error), _) => {
                    self.record_at(now, ControllerEvent::ActionFailed { error });
                    None
                }
                (None, Some(ev)) => Some(self.record_at(now, ev.clone())),
                (None, None) => None,
            };
            step_records.push(record);
            if plan.mechanism.as_ref().is_some_and(|m| m.answers_faults()) && switchover.is_none() {
                switchover = Some(now);
            }
        }
        // The snapshot after the last step: detection (two dead
        // intervals) and the controller's settling.
        let mut settled = None;
        let grace =
            2 * plan.params.dead_after_ns + 2 * crate::controller::SETTLE_MAX.as_nanos() as u64;
        let snapshot_at = plan
            .steps
            .last()
            .map(|s| (start + s.at_ns + grace).min(start + duration));
        let end = start + duration;
        let mut marks: Vec<(u64, u8)> = Vec::new();
        if let Some(t) = snapshot_at {
            marks.push((t, 0));
        }
        if let Some(t) = switchover {
            // Seed 004: once the hosts route around the faults, old packets
            // settle; drops are counted from then on (as `up` does).
            let left = end.saturating_sub(t);
            marks.push((
                (t + (left / 2).min(500_000_000 + INSTALL_DELAY_NS)).min(end),
                1,
            ));
        }
        marks.sort();
        for (t, what) in marks {
            while next_sample <= t {
                self.run_to(next_sample);
                samples.push(((next_sample - start) as f64 / 1e9, self.delivered().0));
                next_sample += sample_every;
            }
            self.run_to(t);
            match what {
                0 if !self.decider.is_busy() && t < end => {
                    let (_, delivered, sent) = self.delivered();
                    settled = Some(Settled {
                        at_ns: t - start,
                        sent,
                        delivered,
                        lost_flits: self.flits_lost(),
                    })
                }
                1 => drops_at_switchover = Some(self.total_drops()),
                _ => {}
            }
        }
        while next_sample <= end {
            self.run_to(next_sample);
            samples.push(((next_sample - start) as f64 / 1e9, self.delivered().0));
            next_sample += sample_every;
        }
        self.run_to(end);
        if !plan.drain {
            return Ok(self.outcome(
                None,
                settled,
                samples,
                step_records,
                reroutes_before,
                drops_at_switchover,
                start,
            ));
        }
        // Drain (report::drain_watch in emulated time).
        let until_released = plan.params.recovery.is_on();
        let timeout = if until_released {
            10_000_000_000 + plan.params.recovery_hold_ns()
        } else {
            5_000_000_000
        };
        let deadline = self.now() + timeout;
        let quiet_limit = crate::stall::STALL_QUIET.as_nanos() as u64;
        let mut last_delivered = u64::MAX;
        let mut stable_since = self.now();
        let stalled_for_ns = loop {
            let (_, delivered, sent) = self.delivered();
            let reachable = |h: usize| !unreachable.contains(&NodeRef::Host(h as u32));
            let hosts = &self.fabric.hosts;
            let drained = (0..hosts.len())
                .filter(|&h| reachable(h))
                .all(|h| hosts[h].is_drained());
            let released = !until_released
                || (0..hosts.len()).filter(|&h| reachable(h)).all(|h| {
                    let r = &hosts[h];
                    r.source().retained().is_empty() && r.recovery_in_progress() == 0
                });
            if delivered != last_delivered {
                last_delivered = delivered;
                stable_since = self.now();
            }
            let quiet = self.now() - stable_since;
            let settled_now = drained && released && (delivered >= sent || quiet > 500_000_000);
            let stalled = (!drained && quiet >= quiet_limit).then_some(quiet);
            if (stalled.is_some() && !until_released) || settled_now || self.now() >= deadline {
                break stalled;
            }
            let next = self.now() + 50_000_000;
            self.run_to(next);
        };
        Ok(self.outcome(
            stalled_for_ns,
            settled,
            samples,
            step_records,
            reroutes_before,
            drops_at_switchover,
            start,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn outcome(
        self,
        stalled_for_ns: Option<u64>,
        settled: Option<Settled>,
        samples: Vec<(f64, u64)>,
        step_records: Vec<Option<Record>>,
        local_reroutes_before: Vec<u64>,
        drops_at_switchover: Option<u64>,
        traffic_start_ns: u64,
    ) -> Outcome {
        let hosts = self.host_reports();
        let switches = self.switch_reports();
        let stats = SimStats {
            events: self.fabric.events,
            datagrams: self.fabric.datagrams,
            flit_hops: self.flit_hops_total(),
            emulated_ns: self.now(),
        };
        Outcome {
            records: self.records,
            step_records,
            local_reroutes_before,
            hosts,
            switches,
            retired: self.retired,
            killed_capacity: self.killed_capacity,
            tables: self.tables,
            initial_engine: self.initial.engine.clone(),
            reroutes: self.reroutes,
            traffic_start_ns,
            stalled_for_ns,
            settled,
            samples,
            drops_at_switchover,
            stats,
        }
    }

    /// Flits sent on every link so far (hosts and switch ports; retired
    /// switches included).
    fn flit_hops_total(&self) -> u64 {
        let hosts: u64 = self
            .fabric
            .hosts
            .iter()
            .map(|h| h.link().stats().tx_flits.iter().sum::<u64>())
            .sum();
        let switches: u64 = self
            .fabric
            .switches
            .iter()
            .map(|s| s.counters())
            .chain(self.retired.iter().map(|r| &r.counters))
            .flat_map(|c| c.ports.iter())
            .flat_map(|p| p.vcs.iter())
            .map(|v| v.tx_flits)
            .sum();
        hosts + switches
    }
}

/// Switch `s` as its daemon starts: the fabric's configuration, the
/// recovery protocol, the head-of-queue lifetime, uncabled ports down, the
/// mechanisms configured and `tables` installed.
fn fresh_switch(plan: &Plan, s: SwitchId, epoch: u16, tables: &RoutingTables) -> Result<Switch> {
    let topo = &plan.topo;
    let ports = &topo.switches[s as usize].ports;
    let mut sw = Switch::with_epoch(plan.params.switch_config(ports.len(), &SIM_DRIVER), epoch)
        .with_context(|| format!("switch {}", topo.node_name(NodeRef::Switch(s))))?;
    sw.set_recovery(plan.params.recovery);
    sw.set_head_of_queue_lifetime(plan.params.head_of_queue_lifetime_ns);
    for (port, cable) in ports.iter().enumerate() {
        if cable.is_none() {
            let _ = sw.set_port_admin(port as PortNo, false);
        }
    }
    if let Some(m) = &plan.mechanism {
        if let Some(config) = m.bring_up(NodeRef::Switch(s)) {
            flitnet_core::mechanism::configure_switch(
                &mut sw,
                s,
                m.variant().mechanism,
                Some(&config),
            )?;
        }
    }
    sw.install_table(
        tables.switches[s as usize].clone(),
        tables.vc_policy(s as usize).clone(),
    );
    // Drain the events the configuration raised (port-downs of uncabled
    // ports): a daemon raises them before it reports to anyone.
    while sw.poll_event().is_some() {}
    Ok(sw)
}
