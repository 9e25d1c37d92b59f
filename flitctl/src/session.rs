//! The bring-up → traffic → collect flow shared by `flitctl up` and
//! `flitctl chaos`: start the event log and one process per node, install
//! fault-free routes, start traffic, and at the end wait for in-flight
//! messages and gather every daemon's report.

use crate::events::{ControllerEvent, EventLog};
use crate::fabric::{Fabric, HostReports, LaunchOptions, SwitchReports};
use crate::report;
use crate::route::compute_routes;
use anyhow::{bail, Context, Result};
use flitnet_core::control::{FabricParams, TrafficSpec};
use flitnet_core::routing::RoutingTables;
use flitnet_core::topology::{FaultSet, Topology};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What a fabric is brought up with.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub params: FabricParams,
    /// Routing engine name, or `auto`.
    pub engine: String,
    pub seed: u64,
    pub metrics: bool,
    /// Directory for configs, logs, events; a fresh private temp dir when
    /// None, removed after a successful run unless `keep`.
    pub run_dir: Option<PathBuf>,
    pub keep: bool,
    /// Tables to install instead of computing them with `engine`
    /// (`--tables`: flitnet JSON or an OpenSM dump).
    pub tables: Option<RoutingTables>,
    /// Ethernet transport: the network namespace to create (None = a
    /// fresh name).
    pub netns: Option<String>,
    /// `--tun`: an IP interface per host (docs/ip.md).
    pub tun: Option<crate::tun::TunOptions>,
}

/// A running fabric with its event log and installed routes.
pub struct Session {
    pub topo: Topology,
    pub fabric: Fabric,
    pub events: EventLog,
    /// The fault-free tables installed at bring-up.
    pub tables: RoutingTables,
    pub run_dir: PathBuf,
    /// Time from the first process started to every daemon answering.
    pub bring_up: Duration,
}

/// Every daemon's final report.
pub struct Collected {
    pub hosts: HostReports,
    pub switches: SwitchReports,
}

/// Checks the fabric and its traffic against the bounds the daemons
/// enforce ([`flitnet_core::control::limits`]), so that a bad value is
/// refused before any process starts, not by the daemons later.
pub fn check_before_launch(params: &FabricParams, traffic: &TrafficSpec) -> Result<()> {
    params
        .validate()
        .map_err(|e| anyhow::anyhow!("fabric: {}", e.0))?;
    traffic
        .validate(params)
        .map_err(|e| anyhow::anyhow!("traffic: {}", e.0))?;
    Ok(())
}

/// After a SIGINT or SIGTERM: the hosts stop generating (what is in
/// flight still lands), so the drain that follows is short and the report
/// shows the run up to the signal.
pub fn stop_traffic_if_interrupted(fabric: &Fabric, events: &EventLog) {
    let Some(signal) = crate::interrupt::received() else {
        return;
    };
    eprintln!("{signal}: stopping traffic, collecting the reports, stopping the fabric");
    events.record(crate::events::ControllerEvent::Interrupted {
        signal: signal.to_string(),
    });
    if let Err(e) = fabric.broadcast(
        |n| matches!(n, flitnet_core::topology::NodeRef::Host(_)),
        |_| flitnet_core::control::Request::StopTraffic,
    ) {
        tracing::warn!(error = %format!("{e:#}"), "stopping traffic after {signal}");
    }
}

impl Session {
    /// Computes the fault-free routes (refusing an engine that needs more
    /// VCs than the fabric has *before* anything starts), launches the
    /// fabric and installs them.
    pub fn start(topo: Topology, opts: &SessionOptions, what: &str) -> Result<Session> {
        let tables = match &opts.tables {
            Some(t) => t.clone(),
            None => compute_routes(&topo, &opts.engine, &FaultSet::none())?,
        };
        if tables.vcs > opts.params.vcs {
            bail!(
                "routing engine {} needs {} virtual channels; run with --vcs {}",
                tables.engine,
                tables.vcs,
                tables.vcs
            );
        }
        opts.params
            .validate()
            .map_err(|e| anyhow::anyhow!("fabric: {}", e.0))?;
        let dir = crate::rundir::create(opts.run_dir.as_deref(), what, opts.keep)?;
        crate::rundir::remove_when_done(&dir);
        let run_dir = dir.path;
        let token = crate::fabric::new_token();
        let events = EventLog::start(
            "127.0.0.1:0".parse()?,
            Some(&run_dir.join("events.jsonl")),
            &token,
        )?;
        let bin_dir = std::env::current_exe()?
            .parent()
            .context("flitctl has no directory")?
            .to_path_buf();
        let launch = LaunchOptions {
            params: opts.params.clone(),
            subnet: None,
            run_dir: run_dir.clone(),
            bin_dir,
            metrics: opts.metrics,
            seed: opts.seed,
            ready_timeout: Duration::from_secs(30),
            events_addr: Some(events.addr()),
            token,
            netns: opts.netns.clone(),
            tun: opts.tun.clone(),
        };
        let started = Instant::now();
        let fabric = Fabric::launch(topo.clone(), &launch)?;
        let bring_up = started.elapsed();
        fabric.install_routes(&tables)?;
        events.record(ControllerEvent::first_routes(&tables.engine));
        eprintln!(
            "fabric up: {} switches, {} hosts in {:.2}s over {}{} (run dir {})",
            topo.num_switches(),
            topo.num_hosts(),
            bring_up.as_secs_f64(),
            opts.params.transport.name(),
            match fabric.netns() {
                Some(ns) => format!(" (veth pairs in network namespace {ns})"),
                None => String::new(),
            } + &fabric.tun_summary(),
            run_dir.display()
        );
        Ok(Session {
            topo,
            fabric,
            events,
            tables,
            run_dir,
            bring_up,
        })
    }

    /// Starts `spec` on every host; returns when traffic started.
    pub fn start_traffic(&self, spec: &TrafficSpec) -> Result<Instant> {
        self.fabric.start_traffic(spec)?;
        let at = Instant::now();
        self.events
            .record(ControllerEvent::traffic_started(&spec.pattern));
        Ok(at)
    }

    /// Waits (up to `drain`) for in-flight messages to land, then gathers
    /// every live daemon's report.
    pub fn collect(&self, drain: Duration) -> Result<Collected> {
        let hosts = report::drain(&self.fabric, drain)?;
        let switches = self.fabric.switch_reports()?;
        Ok(Collected { hosts, switches })
    }

    /// Stops every daemon.
    pub fn shutdown(self) -> Result<()> {
        self.fabric.shutdown()
    }
}
