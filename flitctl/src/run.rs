//! `flitctl run`: the controller of a fabric that something else started —
//! the containers of a `flitctl compose` bundle. It attaches to the daemons
//! listed in `fabric.json` (waiting until each answers), installs routes,
//! drives traffic, optionally kills a link, re-routes around every fault it
//! injects *or detects* (a container killed with `docker kill` shows up as
//! keepalive timeouts on its neighbours' ports), and prints the same report
//! as `flitctl up`. It never stops the daemons unless asked (`--shutdown`):
//! their lifetime is Compose's business.

use crate::compose::ComposeFabric;
use crate::ctl_metrics;
use crate::events::{EventLog, Record};
use crate::fabric::{Fabric, Reconfiguration, ReconfigurationChoice};
use crate::report::{self, FaultTiming, RunReport};
use crate::up::{compute_routes, parse_duration, parse_link, Recovery, TrafficArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use flitnet_core::control::TrafficSpec;
use flitnet_core::topology::{FaultSet, LinkId, NodeRef, PortRef, Topology};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The fabric description written by `flitctl compose` (configs/fabric.json).
    #[arg(long)]
    pub fabric: PathBuf,
    #[command(flatten)]
    pub traffic: TrafficArgs,
    /// Routing engine (`auto`: as for `flitctl up`).
    #[arg(long, default_value = "auto")]
    pub engine: String,
    /// Kill this link mid-run, named by one end: `NODE:PORT` (e.g. s0-0:4).
    #[arg(long)]
    pub kill_link: Option<String>,
    /// When to kill, after traffic starts.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub kill_at: Duration,
    /// A link already down when the run starts (`NODE:PORT`; repeatable):
    /// it is disabled at both ends and routed around from the start.
    #[arg(long)]
    pub down_link: Vec<String>,
    /// What the controller does about a fault (injected or detected).
    #[arg(long, value_enum, default_value_t = Recovery::Reroute)]
    pub recovery: Recovery,
    /// How re-routing swaps the tables (as for `flitctl up`).
    #[arg(long, value_enum, default_value_t = ReconfigurationChoice::Auto)]
    pub reconfiguration: ReconfigurationChoice,
    /// Seed for traffic.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Serve the controller's Prometheus metrics on this address (e.g. 0.0.0.0:9100).
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Where to receive daemon events (default: every address, on the port
    /// of the `events_addr` in fabric.json).
    #[arg(long)]
    pub events: Option<SocketAddr>,
    /// How long to wait for every daemon to answer (containers start in any order).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub ready_timeout: Duration,
    /// Directory for the event log (default: a fresh temp dir).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Ask every daemon to exit at the end.
    #[arg(long)]
    pub shutdown: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A link end that reported its peer silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Silent {
    link: LinkId,
    /// The node across the link from the one that reported.
    far: NodeRef,
}

/// Turns new daemon events into faults the controller has not heard of:
/// keepalive timeouts (not ports the controller disabled itself).
struct Watcher {
    seen: usize,
    pending: Vec<Silent>,
    first_pending: Option<Record>,
}

impl Watcher {
    /// Watches events from record number `from` on: what daemons reported
    /// before the run started (ports down while the containers were still
    /// starting) is history, not a fault.
    fn new(from: usize) -> Watcher {
        Watcher {
            seen: from,
            pending: Vec::new(),
            first_pending: None,
        }
    }

    /// Collects port-down events since the last call that concern elements
    /// not yet in `faults`.
    fn poll(&mut self, events: &EventLog, topo: &Topology, faults: &FaultSet) {
        let records = events.snapshot();
        for r in &records[self.seen.min(records.len())..] {
            let down = r.event["event"] == "port-down";
            let up = r.event["event"] == "port-up";
            if r.source == "controller"
                || !(down || up)
                || r.event["reason"] == "disabled by the controller"
                // Transient: the link retrains on its own (chaos.rs).
                || crate::chaos::is_link_error(&r.event)
            {
                continue;
            }
            let Some(node) = topo.find_node(&r.source) else {
                continue;
            };
            let Some(port) = r.event["port"].as_u64() else {
                continue;
            };
            let here = PortRef {
                node,
                port: port as u16,
            };
            let (Some(link), Some(far)) = (topo.link_at(here), topo.peer(here)) else {
                continue;
            };
            if up {
                // Back before the controller acted on it: a hiccup.
                self.pending.retain(|p| p.link != link);
                if self.pending.is_empty() {
                    self.first_pending = None;
                }
                continue;
            }
            let known = faults.links.contains(&link)
                || matches!(far.node, NodeRef::Switch(s) if faults.switches.contains(&s))
                || self.pending.iter().any(|p| p.link == link);
            if !known {
                self.pending.push(Silent {
                    link,
                    far: far.node,
                });
                self.first_pending.get_or_insert_with(|| r.clone());
            }
        }
        self.seen = records.len();
    }
}

pub fn run(args: RunArgs) -> Result<()> {
    let description = ComposeFabric::load(&args.fabric)?;
    let topo = description.topology.clone();
    let kill_link = args
        .kill_link
        .as_deref()
        .map(|s| parse_link(&topo, s))
        .transpose()?;
    let down_links = args
        .down_link
        .iter()
        .map(|s| parse_link(&topo, s))
        .collect::<Result<Vec<_>>>()?;
    let run_dir = match &args.run_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("flitnet-run-{}", std::process::id())),
    };
    // The event log is a convenience: the FROM-scratch image has no /tmp
    // (and runs as nobody), so without --run-dir a failure only loses it.
    let log_file = match std::fs::create_dir_all(&run_dir) {
        Ok(()) => Some(run_dir.join("events.jsonl")),
        Err(e) if args.run_dir.is_none() => {
            tracing::warn!(dir = %run_dir.display(), error = %e, "no event log file");
            None
        }
        Err(e) => return Err(e).with_context(|| format!("creating {}", run_dir.display())),
    };
    let events_bind = args.events.unwrap_or_else(|| {
        let port = description.events_addr.map_or(0, |a| a.port());
        SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)
    });
    let events = EventLog::start(events_bind, log_file.as_deref())?;
    if let Some(addr) = args.metrics {
        ctl_metrics::install(addr)?;
    }
    let mut faults = FaultSet::none();
    faults.links.extend(down_links.iter().copied());
    let tables = compute_routes(&topo, &args.engine, &faults)?;
    if tables.vcs > description.params.vcs {
        bail!(
            "routing engine {} needs {} virtual channels, the fabric was configured with {}",
            tables.engine,
            tables.vcs,
            description.params.vcs
        );
    }
    // The head-of-queue lifetime is a fabric parameter: the daemons were
    // configured with it by `flitctl compose --hoq-lifetime` (`run` only
    // attaches to them).
    if crate::up::needs_hoq_lifetime(&tables.engine, description.params.recovery)
        && description.params.head_of_queue_lifetime_ns.is_none()
    {
        tracing::warn!(
            "local-reroute with a recovery protocol and no head-of-queue lifetime: the \
             fabric can deadlock around faults (docs/sbrp.md \"Deadlock\"); configure \
             the daemons with `flitctl compose --hoq-lifetime 400ms`"
        );
    }
    let started = Instant::now();
    let daemons = description
        .daemons
        .iter()
        .map(|d| {
            if !description.dns_names {
                return Ok((d.name.clone(), d.control_addr, Some(d.metrics_addr)));
            }
            // A swarm: the service's task address, once it is in DNS.
            let by_name = |port: u16| {
                let name = format!("{}:{port}", d.service);
                flitnet_runtime::resolve::resolve_with_retry(&name, args.ready_timeout)
            };
            Ok((
                d.name.clone(),
                by_name(d.control_addr.port())?,
                Some(by_name(d.metrics_addr.port())?),
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut fabric = Fabric::attach(
        topo.clone(),
        description.token.clone(),
        daemons,
        run_dir.clone(),
        args.ready_timeout,
    )?;
    let bring_up = started.elapsed();
    for &l in &down_links {
        fabric.set_link(l, false)?;
    }
    fabric.install_routes(&tables)?;
    events.record(serde_json::json!({"event": "routes-installed", "engine": tables.engine}));
    eprintln!(
        "fabric attached: {} switches, {} hosts answered in {:.2}s (events on {}, log {:?})",
        topo.num_switches(),
        topo.num_hosts(),
        bring_up.as_secs_f64(),
        events.addr(),
        log_file
    );
    let spec = TrafficSpec {
        pattern: args.traffic.pattern.clone(),
        load: args.traffic.load,
        message_flits: args.traffic.message_flits,
        duration_ns: args.traffic.duration.as_nanos() as u64,
        rounds: args.traffic.rounds,
        seed: args.seed,
    };
    fabric.start_traffic(&spec)?;
    let traffic_start = Instant::now();
    events.record(serde_json::json!({"event": "traffic-started", "pattern": spec.pattern}));

    let mut controller = Controller {
        fabric: &mut fabric,
        topo: &topo,
        events: &events,
        engine: &args.engine,
        recovery: args.recovery,
        reconfiguration: Reconfiguration::choose(args.reconfiguration, &topo),
        faults,
        log: Vec::new(),
    };
    let mut pending_kill = kill_link;
    let mut watcher = Watcher::new(events.snapshot().len());
    // Faults are watched for during the traffic phase and the drain after it.
    let watch_until = args.traffic.duration + Duration::from_secs(1);
    while traffic_start.elapsed() < watch_until {
        if let Some(l) = pending_kill {
            if traffic_start.elapsed() >= args.kill_at {
                pending_kill = None;
                controller.kill_link(l)?;
            }
        }
        watcher.poll(&events, &topo, &controller.faults);
        // Neighbours of a dead switch time out within a few keepalive
        // periods of each other: give them a moment to all speak up, so
        // that one re-route covers the whole switch.
        let settled = watcher
            .first_pending
            .as_ref()
            .is_some_and(|r| flitnet_runtime::clock::now_ns() >= r.time_ns + 150_000_000);
        if settled {
            watcher.poll(&events, &topo, &controller.faults);
            let silent = std::mem::take(&mut watcher.pending);
            let first = watcher.first_pending.take().expect("settled has a record");
            controller.handle_detected(&silent, &first)?;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // A switch that died too late for its neighbours to report it must
    // still not fail the report.
    controller.find_dead_switches();
    let Controller { log: fault_log, .. } = controller;
    let reports = report::drain(&fabric, Duration::from_secs(5))?;
    let switch_reports = fabric.switch_reports()?;
    let run = RunReport::build(
        &topo,
        &tables.engine,
        &spec,
        reports,
        switch_reports,
        fault_log,
        bring_up,
    );
    if args.shutdown {
        let still = shut_down_remote(&fabric, Duration::from_secs(5));
        if !still.is_empty() {
            tracing::warn!(
                "still answering after shutdown requests: {}",
                still.join(", ")
            );
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&run)?);
    } else {
        print!("{run}");
    }
    Ok(())
}

/// Asks every live daemon of a fabric we did not start (containers) to exit,
/// one by one, and asks again until it stops answering or `patience` runs
/// out: a daemon busy under load may miss the first request, and one that
/// exits before its answer is read must not keep the others running.
/// Returns the names of the daemons that still answer.
fn shut_down_remote(fabric: &Fabric, patience: Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + patience;
    let mut left: Vec<usize> = (0..fabric.daemons.len())
        .filter(|&i| !fabric.daemons[i].dead)
        .collect();
    while !left.is_empty() {
        for &i in &left {
            if let Ok(mut c) = fabric.client(i) {
                let _ = c.call(flitnet_core::control::Request::Shutdown);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        left.retain(|&i| fabric.answers(i));
        if std::time::Instant::now() >= deadline {
            break;
        }
    }
    left.iter()
        .map(|&i| fabric.daemons[i].name.clone())
        .collect()
}

/// What the controller knows and does during the run.
struct Controller<'a> {
    fabric: &'a mut Fabric,
    topo: &'a Topology,
    events: &'a EventLog,
    engine: &'a str,
    recovery: Recovery,
    reconfiguration: Reconfiguration,
    faults: FaultSet,
    log: Vec<FaultTiming>,
}

impl Controller<'_> {
    fn link_name(&self, l: LinkId) -> String {
        let link = &self.topo.links[l as usize];
        format!(
            "{}:{}-{}:{}",
            self.topo.node_name(link.a.node),
            link.a.port,
            self.topo.node_name(link.b.node),
            link.b.port
        )
    }

    /// Disables both ends of `l`, waits for a daemon to report it, re-routes.
    fn kill_link(&mut self, l: LinkId) -> Result<()> {
        self.fabric.set_link(l, false)?;
        self.faults.links.insert(l);
        let what = self.link_name(l);
        let fault = self
            .events
            .record(serde_json::json!({"event": "fault", "kind": "link-down", "element": what}));
        ctl_metrics::fault("link-down", &what);
        let detected =
            report::wait_detection(self.events, self.topo, &self.faults, Duration::from_secs(5));
        let installed = self.reroute(detected.as_ref().unwrap_or(&fault))?;
        self.log.push(FaultTiming::new(
            &fault,
            detected.as_ref(),
            installed.as_ref(),
        ));
        Ok(())
    }

    /// Faults the controller did not inject: a silent peer is a dead switch
    /// if it no longer answers its control port, else a dead link.
    fn handle_detected(&mut self, silent: &[Silent], first: &Record) -> Result<()> {
        let mut found = Vec::new();
        for s in silent {
            match s.far {
                NodeRef::Switch(id) if self.faults.switches.contains(&id) => {}
                NodeRef::Switch(id) if !self.fabric.answers(self.fabric.daemon_of(s.far)) => {
                    self.faults.switches.insert(id);
                    let i = self.fabric.daemon_of(s.far);
                    self.fabric.mark_dead(i);
                    found.push(("switch-lost", self.topo.node_name(s.far).to_string()));
                }
                _ => {
                    self.faults.links.insert(s.link);
                    found.push(("link-lost", self.link_name(s.link)));
                }
            }
        }
        if found.is_empty() {
            return Ok(());
        }
        // The fault happened before its first detection; the detection is
        // the earliest moment the controller could know.
        let mut records = Vec::new();
        for (kind, element) in &found {
            tracing::warn!(kind, element, "fault detected");
            ctl_metrics::fault(kind, element);
            let mut r = first.clone();
            r.event = serde_json::json!({"event": "fault", "kind": kind, "element": element});
            records.push(r);
        }
        let installed = self.reroute(first)?;
        for r in &records {
            self.log
                .push(FaultTiming::new(r, Some(first), installed.as_ref()));
        }
        Ok(())
    }

    /// Marks every switch that no longer answers as lost; returns how many.
    fn find_dead_switches(&mut self) -> usize {
        let mut found = 0;
        for s in 0..self.topo.num_switches() as u32 {
            let node = NodeRef::Switch(s);
            let i = self.fabric.daemon_of(node);
            if self.fabric.daemons[i].dead || self.fabric.answers(i) {
                continue;
            }
            self.fabric.mark_dead(i);
            self.faults.switches.insert(s);
            let name = self.topo.node_name(node).to_string();
            tracing::warn!(element = %name, "switch lost: no answer on its control port");
            ctl_metrics::fault("switch-lost", &name);
            let r = self.events.record(
                serde_json::json!({"event": "fault", "kind": "switch-lost", "element": name}),
            );
            self.log.push(FaultTiming::new(&r, None, None));
            found += 1;
        }
        found
    }

    /// Recomputes and installs tables without every known fault; returns
    /// the installation record. `since` is when the fault was detected.
    fn reroute(&mut self, since: &Record) -> Result<Option<Record>> {
        if self.recovery != Recovery::Reroute {
            return Ok(None);
        }
        let logged = self.log.len();
        let (tables, swap) = loop {
            let tables = compute_routes(self.topo, self.engine, &self.faults)
                .context("re-routing around the faults")?;
            match self.fabric.swap_routes(&tables, self.reconfiguration) {
                Ok(swap) => break (tables, swap),
                // A switch died since the last look (its neighbours have
                // not all timed out yet): count it and route around it too.
                Err(e) => {
                    if self.find_dead_switches() == 0 {
                        return Err(e);
                    }
                }
            }
        };
        let mut event = serde_json::json!({"event": "routes-installed", "engine": tables.engine});
        swap.event_fields(&mut event);
        let installed = self.events.record(event);
        ctl_metrics::reroute(Duration::from_nanos(
            installed.time_ns.saturating_sub(since.time_ns),
        ));
        // Switches found dead while installing were routed around now too.
        for f in &mut self.log[logged..] {
            f.routes_installed_ms =
                Some(installed.time_ns.saturating_sub(since.time_ns) as f64 / 1e6);
        }
        Ok(Some(installed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::control::{DaemonEvent, EventKind};
    use flitnet_core::topology::generators::kary_ntree;

    fn push(log: &EventLog, node: &str, port: u16, reason: &str) {
        let ev = DaemonEvent {
            node: node.into(),
            time_ns: flitnet_runtime::clock::now_ns(),
            kind: EventKind::PortDown {
                port,
                reason: reason.into(),
            },
        };
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(&serde_json::to_vec(&ev).unwrap(), log.addr())
            .unwrap();
        let n = node.to_string();
        log.wait_for(Duration::from_secs(2), |r| {
            r.source == n && r.event["port"] == port
        })
        .expect("event arrives");
    }

    #[test]
    fn the_watcher_reports_silent_peers_once_and_ignores_the_controllers_own() {
        let topo = kary_ntree(4, 2).unwrap();
        let log = EventLog::start("127.0.0.1:0".parse().unwrap(), None).unwrap();
        let mut w = Watcher::new(0);
        let mut faults = FaultSet::none();
        push(&log, "s0-0", 5, "disabled by the controller");
        w.poll(&log, &topo, &faults);
        assert!(w.pending.is_empty(), "a port the controller disabled");
        push(&log, "s0-0", 4, "keepalive timeout");
        push(&log, "s1-0", 0, "keepalive timeout"); // the other end, same link
        push(&log, "nobody", 0, "keepalive timeout");
        w.poll(&log, &topo, &faults);
        let here = PortRef::switch(0, 4);
        assert_eq!(
            w.pending,
            [Silent {
                link: topo.link_at(here).unwrap(),
                far: topo.peer(here).unwrap().node,
            }]
        );
        assert!(w.first_pending.is_some());
        // Once the link is a known fault, its ends are no news.
        faults.links.insert(topo.link_at(here).unwrap());
        let mut w = Watcher::new(0);
        w.poll(&log, &topo, &faults);
        assert!(w.pending.is_empty());
    }
}
