//! `flitctl attach`: the controller of a fabric that something else started —
//! the containers of a `flitctl compose` bundle. It attaches to the daemons
//! listed in `fabric.json` (waiting until each answers), installs routes,
//! drives traffic, optionally kills a link, re-routes around every fault it
//! injects *or detects* (a container killed with `docker kill` shows up as
//! keepalive timeouts on its neighbours' ports), and prints the same report
//! as `flitctl up`. It never stops the daemons unless asked (`--shutdown`):
//! their lifetime is Compose's business.

use crate::compose::ComposeFabric;
use crate::controller::{
    fault_timing, link_name, link_named, links_of, Controller, Element, Policy,
};
use crate::ctl_metrics;
use crate::events::{ControllerEvent, Event, EventLog, Record};
use crate::fabric::{Fabric, HostReports, Reconfiguration, ReconfigurationChoice, SwitchReports};
use crate::parse::{parse_duration, parse_link};
use crate::report::{self, FaultTiming, RunReport};
use crate::route::compute_routes;
use crate::traffic::TrafficArgs;
use crate::up::Recovery;
use anyhow::{bail, Result};
use clap::Args;
use flitnet_core::control::{HostDaemonReport, SwitchReport, TrafficSpec};
use flitnet_core::topology::{FaultSet, LinkId, NodeRef, PortRef, Topology};
use std::collections::{BTreeMap, BTreeSet};
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
    pub fail_link: Vec<String>,
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
    pub controller_metrics: Option<SocketAddr>,
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

pub fn run(args: RunArgs) -> Result<()> {
    let description = ComposeFabric::load(&args.fabric)?;
    let topo = description.topology.clone();
    let kill_link = args
        .kill_link
        .as_deref()
        .map(|s| parse_link(&topo, s))
        .transpose()?;
    let down_links = args
        .fail_link
        .iter()
        .map(|s| parse_link(&topo, s))
        .collect::<Result<Vec<_>>>()?;
    // The event log is a convenience: the FROM-scratch image has no /tmp
    // (and runs as nobody), so without --run-dir a failure only loses it.
    let (run_dir, log_file) = match crate::rundir::create(args.run_dir.as_deref(), "run", true) {
        Ok(dir) => (dir.path.clone(), Some(dir.path.join("events.jsonl"))),
        Err(e) if args.run_dir.is_none() => {
            tracing::warn!(error = %format!("{e:#}"), "no event log file");
            (std::env::temp_dir(), None)
        }
        Err(e) => return Err(e),
    };
    let events_bind = args.events.unwrap_or_else(|| {
        let port = description.events_addr.map_or(0, |a| a.port());
        SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)
    });
    let events_problem = event_path_problem(&description, events_bind);
    if let Some(problem) = &events_problem {
        tracing::warn!("{problem}");
    }
    let events = EventLog::start(events_bind, log_file.as_deref(), &description.token)?;
    if let Some(addr) = args.controller_metrics {
        ctl_metrics::install(addr)?;
    }
    // The daemons run at the dilation `flitctl compose` configured them
    // with; the controller's clock and waits follow it.
    let factor = description.params.time_dilation.max(1);
    flitnet_runtime::clock::set_dilation(factor);
    let wall = flitnet_runtime::clock::wall;
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
    if crate::up::needs_hoq_lifetime(
        &tables.engine,
        crate::mechanism::Mechanism::NONE,
        description.params.recovery,
    ) && description.params.head_of_queue_lifetime_ns.is_none()
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
    let fabric = Fabric::attach(
        topo.clone(),
        description.token.clone(),
        daemons,
        run_dir.clone(),
        args.ready_timeout,
    )?;
    let bring_up = started.elapsed();
    // The fabric may have run traffic for an earlier controller: what that
    // run left in flight lands first, then the switches' and hosts'
    // counters are taken as this run's baseline (hosts also start their
    // delivery figures afresh when traffic starts), so the report
    // describes this run alone.
    if let Some(left) = fabric.wait_idle(wall(Duration::from_secs(5)))? {
        tracing::warn!(flits = left, "flits of an earlier run still in flight");
    }
    let baseline = Baseline::take(&fabric)?;
    // Links a daemon already reports down (disabled, or its peer silent)
    // are routed around from the start, like --fail-link ones.
    let mut down_links = down_links;
    let found_down = baseline.links_down(&topo);
    let mut tables = tables;
    if !found_down.iter().all(|l| down_links.contains(l)) {
        let names: Vec<String> = found_down.iter().map(|&l| link_name(&topo, l)).collect();
        tracing::warn!(
            links = %names.join(" "),
            "links already down when the run starts: routed around from the start"
        );
        for l in found_down {
            if !down_links.contains(&l) {
                down_links.push(l);
            }
        }
        let faults = FaultSet::with_links(down_links.iter().copied());
        tables = compute_routes(&topo, &args.engine, &faults)?;
    }
    // A fabric over several machines: which links cross, and how slow
    // crossing is (measured before traffic loads the daemons).
    let cut_links = crate::compose::placement::cut_links_of(&fabric, &description);
    for &l in &down_links {
        fabric.set_link(l, false)?;
    }
    fabric.install_routes(&tables)?;
    events.record(ControllerEvent::routes_installed(
        &tables.engine,
        down_links.clone(),
    ));
    eprintln!(
        "fabric attached: {} switches, {} hosts answered in {:.2}s (events on {}, log {})",
        topo.num_switches(),
        topo.num_hosts(),
        bring_up.as_secs_f64(),
        events.addr(),
        log_file
            .as_deref()
            .map_or("none".into(), |p| p.display().to_string())
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
    events.record(ControllerEvent::traffic_started(&spec.pattern));

    let policy = Policy {
        reroute: args.recovery == Recovery::Reroute,
        engine: args.engine.clone(),
        answers_faults: None,
        reconfiguration: Reconfiguration::choose(args.reconfiguration, &topo),
        vcs: description.params.vcs,
    };
    let mut ctl = Controller::new(&topo, fabric, events.clone(), tables.clone(), policy);
    ctl.assume_down(&down_links);
    let mut pending_kill = kill_link;
    let mut killed = None;
    // Faults are watched for during the traffic phase and the drain after it.
    let watch_until = traffic_start + wall(args.traffic.duration + Duration::from_secs(1));
    while Instant::now() < watch_until {
        let next = match pending_kill {
            Some(_) => (traffic_start + wall(args.kill_at)).min(watch_until),
            None => watch_until,
        };
        ctl.serve_until(next);
        if let Some(l) =
            pending_kill.filter(|_| Instant::now() >= traffic_start + wall(args.kill_at))
        {
            pending_kill = None;
            killed = Some(l);
            let started_ns = flitnet_runtime::clock::now_ns();
            ctl.fabric.set_link(l, false)?;
            let what = link_name(&topo, l);
            ctl_metrics::fault("link-down", &what);
            // `fault_log` reads it back from the event log.
            events.record_at(started_ns, ControllerEvent::fault("link-down", what));
        }
    }
    // A switch that died too late for its neighbours to report it must
    // still not fail the report.
    ctl.find_dead_switches();
    let fabric = ctl.fabric;
    let reports = baseline.hosts_since(report::drain(&fabric, wall(Duration::from_secs(5)))?);
    let switch_reports = baseline.switches_since(fabric.switch_reports()?);
    // Read after the drain: a fault detected after the traffic window
    // (a switch killed near its end) still has its detection logged.
    let fault_log = fault_log(&topo, &events.snapshot(), &down_links);
    let fidelity = crate::fidelity::judge(
        &crate::fidelity::Context {
            topo: &topo,
            params: &description.params,
            load: spec.load,
            hosts_offering: topo.num_hosts(),
            dilation_source: "set by flitctl compose".into(),
        },
        &reports,
        &switch_reports,
    );
    let mut run = RunReport::build(
        &topo,
        &tables.engine,
        &spec,
        reports,
        switch_reports,
        fault_log,
        bring_up,
    );
    run.fidelity = Some(fidelity);
    run.warnings.extend(events_problem);
    // The link this run killed is this run's fault: the fabric is left as
    // found for the next run (which would otherwise route through a
    // disabled port it has no event about).
    if let Some(l) = killed.filter(|_| !args.shutdown) {
        if let Err(e) = fabric.set_link(l, true) {
            tracing::warn!(error = %format!("{e:#}"), "could not bring the killed link back up");
        }
    }
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
        let mut json = serde_json::to_value(&run)?;
        if let Some(c) = &cut_links {
            json["cut_links"] = serde_json::to_value(c)?;
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{run}");
        if let Some(c) = &cut_links {
            print!("{c}");
        }
    }
    Ok(())
}

/// The daemons' counters when this run started (see [`Baseline::take`]).
struct Baseline {
    hosts: BTreeMap<NodeRef, HostDaemonReport>,
    switches: BTreeMap<NodeRef, SwitchReport>,
}

impl Baseline {
    fn take(fabric: &Fabric) -> Result<Baseline> {
        Ok(Baseline {
            hosts: fabric.host_reports()?.into_iter().collect(),
            switches: fabric.switch_reports()?.into_iter().collect(),
        })
    }

    /// Links some end of which a daemon reported down at the baseline.
    fn links_down(&self, topo: &Topology) -> Vec<LinkId> {
        let states = self
            .switches
            .iter()
            .flat_map(|(&n, r)| r.links.iter().map(move |l| (n, l)))
            .chain(
                self.hosts
                    .iter()
                    .flat_map(|(&n, r)| r.links.iter().map(move |l| (n, l))),
            );
        let mut down: Vec<LinkId> = states
            .filter(|(_, l)| !l.up)
            .filter_map(|(node, l)| topo.link_at(PortRef { node, port: l.port }))
            .collect();
        down.sort_unstable();
        down.dedup();
        down
    }

    fn hosts_since(&self, reports: HostReports) -> HostReports {
        reports
            .into_iter()
            .map(|(n, r)| match self.hosts.get(&n) {
                Some(b) => (n, r.since(b)),
                None => (n, r),
            })
            .collect()
    }

    fn switches_since(&self, reports: SwitchReports) -> SwitchReports {
        reports
            .into_iter()
            .map(|(n, r)| match self.switches.get(&n) {
                Some(b) => (n, r.since(b)),
                None => (n, r),
            })
            .collect()
    }
}

/// Why the daemons' events would not reach this controller, if they would
/// not: then it hears of no fault it did not inject (a container killed,
/// a cable cut), never re-routes around one, and its report cannot say why
/// messages were lost.
fn event_path_problem(fabric: &ComposeFabric, bind: SocketAddr) -> Option<String> {
    let unseen = "faults this controller does not inject (docker kill, a cut network) go unnoticed";
    let Some(target) = fabric.events_addr else {
        return Some(format!(
            "the fabric description names no event address: the daemons send no events, so {unseen}"
        ));
    };
    if target.port() != bind.port() {
        return Some(format!(
            "the daemons send their events to port {}, this controller listens on {bind}: {unseen}",
            target.port()
        ));
    }
    // A swarm's daemons send to the controller service by name.
    if fabric.dns_names {
        return None;
    }
    let local = std::net::UdpSocket::bind(SocketAddr::new(target.ip(), 0)).is_ok();
    if !local || (!bind.ip().is_unspecified() && bind.ip() != target.ip()) {
        return Some(format!(
            "the daemons send their events to {target}, which this controller does not listen \
             on (not an address of this machine, or not --events): {unseen}; run the \
             controller service of the bundle, or write the bundle with `flitctl compose \
             --events <gateway>:{}` for a controller on the Docker host (docs/compose.md)",
            target.port()
        ));
    }
    None
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

/// The timing of every fault of the run: those the controller injected,
/// switches found lost, and links reported down that it did not disable
/// (a cable or a container's interface gone), read from the event log.
fn fault_log(topo: &Topology, records: &[Record], down_at_start: &[LinkId]) -> Vec<FaultTiming> {
    let mut log = Vec::new();
    let mut explained: BTreeSet<LinkId> = down_at_start.iter().copied().collect();
    for r in records {
        let Event::Controller(ControllerEvent::Fault { kind, element, .. }) = &r.event else {
            continue;
        };
        let element = if kind == "switch-lost" {
            match topo.find_node(element) {
                Some(NodeRef::Switch(s)) => Element::Switch(s),
                _ => continue,
            }
        } else {
            let Some(link) = link_named(topo, element) else {
                continue;
            };
            Element::Link(link)
        };
        match element {
            Element::Link(l) => {
                explained.insert(l);
            }
            Element::Switch(s) => {
                explained.extend(links_of(topo, NodeRef::Switch(s)));
            }
        }
        let handled = fault_timing(topo, &[element], false, r.time_ns, records);
        log.push(FaultTiming::new(
            r,
            handled.detected.as_ref(),
            handled.installed.as_ref(),
        ));
    }
    // Links reported down with no fault to explain them: lost on their own.
    for r in records {
        let Some(port) = r.port_down() else { continue };
        let Some(node) = topo.find_node(&r.source) else {
            continue;
        };
        let Some(link) = topo.link_at(PortRef { node, port }) else {
            continue;
        };
        if !explained.insert(link) {
            continue;
        }
        let t0 = r.last_heard_ns().unwrap_or(r.time_ns);
        let fault = Record {
            time_ns: t0,
            source: crate::events::CONTROLLER.into(),
            event: ControllerEvent::fault("link-lost", link_name(topo, link)).into(),
        };
        let handled = fault_timing(topo, &[Element::Link(link)], false, t0, records);
        log.push(FaultTiming::new(
            &fault,
            handled.detected.as_ref(),
            handled.installed.as_ref(),
        ));
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;
    use flitnet_core::control::EventKind;
    use flitnet_core::topology::generators::kary_ntree;

    fn daemon(time_ns: u64, node: &str, port: u16, reason: &str, last_heard_ns: u64) -> Record {
        Record {
            time_ns,
            source: node.into(),
            event: Event::Daemon(EventKind::PortDown {
                port,
                reason: reason.into(),
                last_heard_ns,
            }),
        }
    }

    fn controller(time_ns: u64, event: ControllerEvent) -> Record {
        Record {
            time_ns,
            source: crate::events::CONTROLLER.into(),
            event: event.into(),
        }
    }

    #[test]
    fn faults_are_timed_from_their_instant_and_unexplained_links_are_lost_ones() {
        let topo = kary_ntree(4, 2).unwrap();
        let killed = topo.link_at(PortRef::switch(0, 4)).unwrap();
        let far = topo.peer(PortRef::switch(0, 4)).unwrap();
        let far_name = topo.node_name(far.node);
        let cable = topo.link_at(PortRef::switch(1, 5)).unwrap();
        let records = vec![
            // A report from before the fault says nothing about it.
            daemon(5, "s0-0", 4, "keepalive timeout", 1),
            controller(
                10,
                ControllerEvent::fault("link-down", link_name(&topo, killed)),
            ),
            daemon(12, far_name, far.port, "disabled by the controller", 9),
            daemon(13, "s0-0", 4, "disabled by the controller", 9),
            controller(20, ControllerEvent::routes_installed("dmodc", vec![killed])),
            // A cable pulled behind the controller's back.
            daemon(90, "s0-1", 5, "keepalive timeout", 60),
            controller(
                95,
                ControllerEvent::routes_installed("dmodc", vec![killed, cable]),
            ),
        ];
        let log = fault_log(&topo, &records, &[]);
        assert_eq!(log.len(), 2, "{log:?}");
        assert_eq!(log[0].kind, "link-down");
        assert_eq!(log[0].detection_ms, Some(2.0 / 1e6));
        assert_eq!(log[0].detected_by.as_deref(), Some(far_name));
        assert_eq!(log[0].routes_installed_ms, Some(10.0 / 1e6));
        assert_eq!(log[1].kind, "link-lost");
        assert_eq!(log[1].element, link_name(&topo, cable));
        // Timed from when the peer was last heard, not from the report.
        assert_eq!(log[1].detection_ms, Some(30.0 / 1e6));
        assert_eq!(log[1].routes_installed_ms, Some(35.0 / 1e6));
        // A link down from the start is no fault of the run; unexplained,
        // it is a lost one.
        assert!(fault_log(&topo, &records[..1], &[killed]).is_empty());
        assert_eq!(fault_log(&topo, &records[..1], &[])[0].kind, "link-lost");
    }
}
