//! The one controller loop every front end runs (`up`, `chaos`, `attach`):
//! take in the daemons' port events, and when they settle, recompute routes
//! around the links that are down and install them (or, for seed 004's
//! intermediate nodes, push the fault set to the hosts). Faults are injected
//! by the front ends; whoever injected them, the controller only believes
//! what the daemons report. Fault timing is read back from the event log
//! ([`fault_timing`]), so every front end times faults the same way.

pub mod decide;

use crate::events::{ControllerEvent, EventLog, Record, RoutesInstalled};
use crate::fabric::{Fabric, Reconfiguration};
use decide::{Decider, Reroute, Settle};
use flitnet_core::routing::RoutingTables;
use flitnet_core::topology::{LinkId, NodeRef, PortRef, Topology};
use flitnet_runtime::clock::{emulated, now_ns};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Quiet time after the last port event before the controller recomputes:
/// a dead switch's neighbours time out within one keepalive interval of
/// each other, and one recomputation for all of them is enough.
pub const SETTLE: Duration = Duration::from_millis(20);
/// Longest the controller waits for events to settle.
pub const SETTLE_MAX: Duration = Duration::from_millis(100);

/// How the controller answers faults.
pub struct Policy {
    /// Re-route (or push faults to the hosts) on detected faults; off for
    /// mechanisms that handle faults without the controller (none, DLR,
    /// dynamic FT²EI, faithful-mode SBRP).
    pub reroute: bool,
    /// The run's routing engine (`auto` picks per fabric and fault set).
    pub engine: String,
    /// A mechanism that answers detected faults itself (intermediate
    /// nodes: the hosts route around them, the switches keep their
    /// tables), in place of a re-route.
    pub answers_faults: Option<crate::mechanism::Plan>,
    pub reconfiguration: Reconfiguration,
    /// Virtual channels of the fabric: tables needing more are refused.
    pub vcs: u8,
}

/// The controller's state over a run.
pub struct Controller<'a> {
    pub topo: &'a Topology,
    pub fabric: Fabric,
    pub events: EventLog,
    pub policy: Policy,
    /// What the daemons' reports say, and when to act on them.
    decider: Decider,
    /// Tables currently installed.
    pub tables: RoutingTables,
    cursor: usize,
    /// Route recomputations installed.
    pub reroutes: usize,
}

impl<'a> Controller<'a> {
    /// A controller for `fabric`, running `tables`, that acts on events
    /// recorded from now on.
    pub fn new(
        topo: &'a Topology,
        fabric: Fabric,
        events: EventLog,
        tables: RoutingTables,
        policy: Policy,
    ) -> Self {
        let cursor = events.snapshot().len();
        Controller {
            topo,
            fabric,
            events,
            decider: Decider::new(policy.reroute, Settle::default()),
            policy,
            tables,
            cursor,
            reroutes: 0,
        }
    }

    /// Takes `links` as down and already routed around (down when the run
    /// started, with no event to say so).
    pub fn assume_down(&mut self, links: &[LinkId]) {
        self.decider.assume_down(self.topo, links);
    }

    /// Links the daemons say are down (either end reported it).
    pub fn detected_faults(&self) -> BTreeSet<LinkId> {
        self.decider.detected_faults(self.topo)
    }

    /// Whether port events are waiting to be acted on.
    pub fn is_busy(&self) -> bool {
        self.decider.is_busy()
    }

    /// Takes in new records.
    fn absorb(&mut self, records: Vec<Record>) {
        self.cursor += records.len();
        let now = now_ns();
        for r in &records {
            self.decider.absorb(self.topo, r, now);
        }
    }

    /// When a recomputation is due (wall clock), if one is pending.
    fn reroute_due(&self) -> Option<Instant> {
        let due = self.decider.due()?;
        let wait = Duration::from_nanos(due.saturating_sub(now_ns()));
        // Emulated durations: under dilation they last N times longer.
        Some(Instant::now() + flitnet_runtime::clock::wall(wait))
    }

    /// Waits for events up to `until`, re-routing when due; returns early
    /// on SIGINT or SIGTERM.
    pub fn serve_until(&mut self, until: Instant) {
        loop {
            if crate::interrupt::requested() {
                return;
            }
            let now_emulated = now_ns();
            if self.decider.due().is_some_and(|due| due <= now_emulated) {
                if let Some(reroute) = self.decider.take_due(self.topo, now_emulated) {
                    self.reroute(reroute);
                }
                continue;
            }
            let now = Instant::now();
            if now >= until {
                // Take in what already arrived, so that the decider is current.
                let new = self.events.wait_since(self.cursor, Duration::ZERO);
                if new.is_empty() {
                    return;
                }
                self.absorb(new);
                continue;
            }
            let wake = self.reroute_due().map_or(until, |d| d.min(until));
            // In slices, so that a signal is seen within one.
            let slice = (wake - now).min(Duration::from_millis(50));
            let new = self.events.wait_since(self.cursor, slice);
            self.absorb(new);
        }
    }

    /// Serves until `until` or until the controller has re-routed and has
    /// nothing pending, whichever comes first.
    pub fn serve_until_rerouted(&mut self, until: Instant) {
        let before = self.reroutes;
        while Instant::now() < until
            && (self.reroutes == before || self.is_busy())
            && !crate::interrupt::requested()
        {
            self.serve_until((Instant::now() + Duration::from_millis(10)).min(until));
        }
    }

    /// Recomputes routes without the detected faults and installs them on
    /// every live switch (or pushes them to the hosts). Levels stay those
    /// of the intact topology (the ranking ignores faults), so a fabric
    /// holding old and new tables at once routes up*/down* with one
    /// ordering and stays deadlock-free.
    fn reroute(&mut self, reroute: Reroute) {
        let faults = reroute.faults();
        let failed_links = reroute.failed_links();
        let started = Instant::now();
        if let Some(plan) = &self.policy.answers_faults {
            match crate::mechanism::answer_faults(
                &self.fabric,
                plan.as_ref(),
                &faults,
                &self.events,
            ) {
                Ok(_) => {
                    self.decider.routed(reroute);
                    self.reroutes += 1;
                }
                Err(e) => self.reroute_failed(failed_links, e),
            }
            return;
        }
        let result =
            decide::tables_around(self.topo, &self.policy.engine, self.policy.vcs, &faults)
                .map(|t| (t, started.elapsed()));
        let cut_off = self.cut_off_switches(&reroute.faulty);
        let result = result.and_then(|(t, computed)| {
            let swap = self.install(&t, &cut_off)?;
            Ok((t, computed, swap))
        });
        match result {
            Ok((tables, computed, swap)) => {
                let mut event = RoutesInstalled {
                    engine: tables.engine.clone(),
                    failed_links: Some(failed_links),
                    // Emulated time, like every other figure of the run.
                    compute_ms: Some(emulated(computed).as_secs_f64() * 1e3),
                    total_ms: Some(emulated(started.elapsed()).as_secs_f64() * 1e3),
                    ..RoutesInstalled::default()
                };
                swap.describe(&mut event);
                let record = self.events.record(ControllerEvent::RoutesInstalled(event));
                if let Some(first) = self.first_detection_since_last_reroute(record.time_ns) {
                    crate::ctl_metrics::reroute(Duration::from_nanos(
                        record.time_ns.saturating_sub(first),
                    ));
                }
                self.tables = tables;
                self.decider.routed(reroute);
                self.reroutes += 1;
                // Only now, since asking a dead switch costs a connect
                // timeout: is a switch the faults cut off dead?
                if !cut_off.is_empty() {
                    self.find_dead_switches();
                }
            }
            Err(e) => self.reroute_failed(failed_links, e),
        }
    }

    /// Live switches every cabled link of which is in `faulty`: no flit
    /// reaches them, and when their neighbours all lost them at once they
    /// are most likely dead (a killed container), so the install does not
    /// wait for them.
    fn cut_off_switches(&self, faulty: &BTreeSet<LinkId>) -> Vec<flitnet_core::topology::SwitchId> {
        (0..self.topo.num_switches() as u32)
            .filter(|&s| {
                let node = NodeRef::Switch(s);
                let links = links_of(self.topo, node);
                !self.fabric.daemons[self.fabric.daemon_of(node)].dead
                    && !links.is_empty()
                    && links.iter().all(|l| faulty.contains(l))
            })
            .collect()
    }

    /// Swaps `tables` in on every switch but those `cut_off` by the
    /// faults. A switch that died on its own (its container
    /// killed, say) before its neighbours all reported it fails the
    /// install: it is found, recorded as lost, and skipped, and the install
    /// is retried.
    fn install(
        &mut self,
        tables: &RoutingTables,
        cut_off: &[flitnet_core::topology::SwitchId],
    ) -> anyhow::Result<crate::fabric::Swap> {
        loop {
            match self
                .fabric
                .swap_routes_except(tables, self.policy.reconfiguration, cut_off)
            {
                Ok(swap) => return Ok(swap),
                Err(e) => {
                    if self.find_dead_switches() == 0 {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Marks every switch that no longer answers its control port as lost,
    /// recording a `switch-lost` fault at the moment its neighbours last
    /// heard it (the best estimate of when it died); returns how many.
    pub fn find_dead_switches(&mut self) -> usize {
        let mut found = 0;
        for s in 0..self.topo.num_switches() as u32 {
            let node = NodeRef::Switch(s);
            let i = self.fabric.daemon_of(node);
            if self.fabric.daemons[i].dead || self.fabric.answers(i) {
                continue;
            }
            self.fabric.mark_dead(i);
            let name = self.topo.node_name(node).to_string();
            tracing::warn!(element = %name, "switch lost: no answer on its control port");
            crate::ctl_metrics::fault("switch-lost", &name);
            let died_ns =
                decide::lost_switch_died_ns(self.topo, s, &self.events.snapshot(), now_ns());
            self.events
                .record_at(died_ns, ControllerEvent::fault("switch-lost", name));
            found += 1;
        }
        found
    }

    fn reroute_failed(&self, failed_links: Vec<LinkId>, e: anyhow::Error) {
        let error = format!("{e:#}");
        tracing::warn!(%error, "re-routing failed");
        self.events.record(ControllerEvent::RerouteFailed {
            failed_links,
            error,
        });
    }

    /// The earliest port event since the previous installation, for the
    /// detection-to-installed metric.
    fn first_detection_since_last_reroute(&self, installed_ns: u64) -> Option<u64> {
        let records = self.events.snapshot();
        let last_install = records
            .iter()
            .filter(|r| {
                r.time_ns < installed_ns
                    && r.is_controller()
                    && matches!(
                        r.event,
                        crate::events::Event::Controller(ControllerEvent::RoutesInstalled(_))
                    )
            })
            .map(|r| r.time_ns)
            .max()
            .unwrap_or(0);
        records
            .iter()
            .filter(|r| r.time_ns > last_install && r.time_ns <= installed_ns)
            .filter(|r| r.port_down().is_some() || r.port_up().is_some())
            .map(|r| r.time_ns)
            .min()
    }
}

/// What a fault or repair acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    Link(LinkId),
    Switch(flitnet_core::topology::SwitchId),
}

/// A link's name in reports: both ends, `NODE:PORT-NODE:PORT`.
pub fn link_name(topo: &Topology, l: LinkId) -> String {
    let link = &topo.links[l as usize];
    format!(
        "{}:{}-{}:{}",
        topo.node_name(link.a.node),
        link.a.port,
        topo.node_name(link.b.node),
        link.b.port
    )
}

/// The link whose [`link_name`] is `name`.
pub fn link_named(topo: &Topology, name: &str) -> Option<LinkId> {
    (0..topo.links.len() as LinkId).find(|&l| link_name(topo, l) == name)
}

/// The links cabled to `node`.
pub fn links_of(topo: &Topology, node: NodeRef) -> Vec<LinkId> {
    (0..topo.radix(node) as u16)
        .filter_map(|port| topo.link_at(PortRef { node, port }))
        .collect()
}

/// The ends through which neighbours see `element`: both ends of a link,
/// the peers of a switch's ports.
pub fn watched_ends(topo: &Topology, element: Element) -> Vec<PortRef> {
    match element {
        Element::Link(link) => {
            let l = &topo.links[link as usize];
            vec![l.a, l.b]
        }
        Element::Switch(s) => {
            let node = NodeRef::Switch(s);
            (0..topo.radix(node) as u16)
                .filter_map(|port| topo.peer(PortRef { node, port }))
                .collect()
        }
    }
}

/// How a fault (or repair) recorded at `t0` was seen and handled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Handled {
    /// The first daemon report of a watched end going down (up, for a
    /// repair) at or after `t0`, from the daemon on that end.
    pub detected: Option<Record>,
    /// The first installation at or after `t0` whose routes avoid (for a
    /// repair: no longer avoid) every link of the element.
    pub installed: Option<Record>,
}

/// Reads from `records` how the fault or repair of `elements` (injected at
/// one instant `t0`) was detected and routed around. Only records from `t0`
/// on count: an earlier report, or one from a daemon not facing an
/// element, says nothing about this fault.
pub fn fault_timing(
    topo: &Topology,
    elements: &[Element],
    repair: bool,
    t0: u64,
    records: &[Record],
) -> Handled {
    let watched: Vec<PortRef> = elements
        .iter()
        .flat_map(|&e| watched_ends(topo, e))
        .collect();
    // The earliest by the daemons' own clocks, not the first to arrive:
    // events from several neighbours race over UDP.
    let detected = records
        .iter()
        .filter(|r| {
            r.time_ns >= t0
                && !r.is_controller()
                && (if repair {
                    r.port_up()
                } else {
                    r.port_down_any()
                })
                .is_some_and(|port| {
                    watched
                        .iter()
                        .any(|e| e.port == port && topo.node_name(e.node) == r.source)
                })
        })
        .min_by_key(|r| r.time_ns)
        .cloned();
    let links: Vec<LinkId> = elements
        .iter()
        .flat_map(|&e| match e {
            Element::Link(link) => vec![link],
            Element::Switch(s) => links_of(topo, NodeRef::Switch(s)),
        })
        .collect();
    let installed = records
        .iter()
        .find(|r| {
            let crate::events::Event::Controller(ControllerEvent::RoutesInstalled(i)) = &r.event
            else {
                return false;
            };
            let Some(avoided) = &i.failed_links else {
                return false;
            };
            r.time_ns >= t0
                && r.is_controller()
                && if repair {
                    links.iter().all(|l| !avoided.contains(l))
                } else {
                    links.iter().all(|l| avoided.contains(l))
                }
        })
        .cloned();
    Handled {
        detected,
        installed,
    }
}
