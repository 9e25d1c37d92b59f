//! `flitctl up`: the embedded default. Brings a topology up as local
//! processes on loopback, installs routing, drives traffic, optionally kills
//! a link or a switch mid-run (and re-routes), prints a report, and stops
//! everything.

use crate::fabric::Fabric;
use crate::report::{self, RunReport};
use crate::session::{traffic_spec, Session, SessionOptions};
use anyhow::{bail, Context, Result};
use clap::Args;
use flitnet_core::control::{FabricParams, Request, SwitchingMode};
use flitnet_core::recovery::dlr::{DlrConfig, DlrFaults, DlrSwitch, DlrVariant};
use flitnet_core::routing::{registry, RoutingTables};
use flitnet_core::topology::{FaultSet, LinkId, NodeRef, PortRef, Topology};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options shared by every command that runs traffic on a fabric.
#[derive(Args, Debug, Clone)]
pub struct TrafficArgs {
    /// Traffic pattern: uniform, all-to-all, bit-reversal, shuffle, butterfly,
    /// bit-complement, transpose, hotspot:<node>:<fraction>, shift:<s>,
    /// permutation:<file>.
    #[arg(long, default_value = "uniform")]
    pub pattern: String,
    /// Offered load per host, as a fraction of the link bandwidth.
    #[arg(long, default_value_t = 0.3)]
    pub load: f64,
    /// Message length in flits.
    #[arg(long, default_value_t = 8)]
    pub message_flits: u32,
    /// How long hosts generate traffic (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// For all-to-all: rounds through every destination.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
}

/// Link and switch parameters of the emulated fabric.
#[derive(Args, Debug, Clone)]
pub struct FabricArgs {
    /// Virtual channels per link.
    #[arg(long, default_value_t = 2)]
    pub vcs: u8,
    /// Input buffer depth per VC, in flits.
    #[arg(long, default_value_t = 16)]
    pub buffer_depth: u16,
    /// Switching mode.
    #[arg(long, value_enum, default_value_t = Switching::Wormhole)]
    pub switching: Switching,
    /// Link bandwidth in flits per second (0 = unlimited).
    #[arg(long, default_value_t = 200_000)]
    pub bandwidth: u64,
    /// Link propagation delay.
    #[arg(long, default_value = "10us", value_parser = parse_duration)]
    pub delay: Duration,
    /// A peer silent for this long is declared down.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub dead_after: Duration,
    /// Longest packet, in flits.
    #[arg(long, default_value_t = 8)]
    pub max_packet_flits: u32,
    /// Recovery protocol for packets cut by a fault: none, sbrp0, sbrp1,
    /// sbrp2 (seed 003, docs/sbrp.md).
    #[arg(long, default_value = "none", value_parser = parse_recovery)]
    pub recovery_protocol: flitnet_core::host::sbrp::RecoveryProtocol,
}

fn parse_recovery(s: &str) -> Result<flitnet_core::host::sbrp::RecoveryProtocol, String> {
    flitnet_core::host::sbrp::RecoveryProtocol::parse(s)
        .ok_or_else(|| format!("unknown recovery protocol {s:?} (none, sbrp0, sbrp1, sbrp2)"))
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switching {
    Wormhole,
    Vct,
}

impl FabricArgs {
    pub fn params(&self) -> FabricParams {
        FabricParams {
            vcs: self.vcs,
            buffer_depth: self.buffer_depth,
            switching: match self.switching {
                Switching::Wormhole => SwitchingMode::Wormhole,
                Switching::Vct => SwitchingMode::VirtualCutThrough,
            },
            bandwidth_flits_per_s: (self.bandwidth > 0).then_some(self.bandwidth),
            propagation_ns: self.delay.as_nanos() as u64,
            keepalive_interval_ns: (self.dead_after.as_nanos() as u64 / 6).max(1_000_000),
            dead_after_ns: self.dead_after.as_nanos() as u64,
            mtu: 1400,
            flit_payload: 16,
            max_packet_flits: self.max_packet_flits,
            recovery: self.recovery_protocol,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct UpArgs {
    /// Topology file (YAML or ibnetdiscover .net).
    pub topology: PathBuf,
    #[command(flatten)]
    pub traffic: TrafficArgs,
    #[command(flatten)]
    pub fabric: FabricArgs,
    /// Routing engine (`auto`: dmodk on fat-trees, dor on meshes and tori,
    /// e-cube on hypercubes, up*/down* otherwise).
    #[arg(long, default_value = "auto")]
    pub engine: String,
    /// Install these tables instead of computing them: flitnet JSON or an
    /// OpenSM opensm-lfts.dump (`flitctl route`, docs/routing.md).
    #[arg(long, value_name = "FILE")]
    pub tables: Option<PathBuf>,
    /// Kill this link mid-run, named by one end: `NODE:PORT` (e.g. s0-0:4).
    #[arg(long)]
    /// Repeat to kill several links at the same instant.
    pub kill_link: Vec<String>,
    /// SIGKILL this switch's process mid-run (its neighbours must notice).
    #[arg(long)]
    pub kill_switch: Option<String>,
    /// When to kill, after traffic starts.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub kill_at: Duration,
    /// What the controller does about a fault: `reroute` recomputes the
    /// tables without the failed element and installs them; `none` leaves
    /// the fabric as it is.
    #[arg(long, value_enum, default_value_t = Recovery::Reroute)]
    pub recovery: Recovery,
    /// What switches do about a fault on their own, with no controller
    /// (k-ary n-trees only): `dlr` = dynamic local rerouting, deterministic,
    /// link and switch faults (3 VCs); `dlr-link` = link faults only (2 VCs);
    /// `dlr-adaptive` = adaptive, link and switch faults (1 VC);
    /// `dlr-adaptive-link`; `none` = drop packets for dead ports.
    #[arg(long, value_enum, default_value_t = Mechanism::None)]
    pub mechanism: Mechanism,
    /// Seed for traffic and random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Serve Prometheus metrics on every daemon (port 9100 of its address).
    #[arg(long)]
    pub metrics: bool,
    /// Serve the controller's own metrics (faults, reroute time) on this
    /// address (docs/metrics.md, "flitctl").
    #[arg(long)]
    pub controller_metrics: Option<std::net::SocketAddr>,
    /// Directory for configs, logs, events (default: a fresh temp dir).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    None,
    Dlr,
    DlrLink,
    DlrAdaptive,
    DlrAdaptiveLink,
}

impl Mechanism {
    /// The dynamic local rerouting configuration for `topo`, if any.
    pub fn dlr(self, topo: &Topology) -> Result<Option<DlrConfig>> {
        use flitnet_core::topology::Family;
        let (variant, faults) = match self {
            Mechanism::None => return Ok(None),
            Mechanism::Dlr => (DlrVariant::Deterministic, DlrFaults::Switch),
            Mechanism::DlrLink => (DlrVariant::Deterministic, DlrFaults::Link),
            Mechanism::DlrAdaptive => (DlrVariant::Adaptive, DlrFaults::Switch),
            Mechanism::DlrAdaptiveLink => (DlrVariant::Adaptive, DlrFaults::Link),
        };
        let Family::KaryNTree { k, n } = topo.family else {
            bail!(
                "--mechanism {self:?}: dynamic local rerouting needs a k-ary n-tree, `{}` is not one",
                topo.name
            );
        };
        Ok(Some(DlrConfig::new(k, n, variant, faults)))
    }
}

/// Turns dynamic local rerouting on in every switch (seed 002).
fn configure_reroute(fabric: &Fabric, topo: &Topology, cfg: DlrConfig) -> Result<()> {
    for s in 0..topo.num_switches() as u32 {
        // Checks the switch's place in the tree before any daemon sees it.
        DlrSwitch::from_topology(cfg, topo, s)?;
    }
    fabric.broadcast(
        |n| matches!(n, NodeRef::Switch(_)),
        |n| {
            let NodeRef::Switch(s) = n else {
                unreachable!()
            };
            let sw = &topo.switches[s as usize];
            Request::ConfigureReroute {
                config: Some(cfg),
                level: sw.level.unwrap_or(0),
                label: sw.label.clone(),
            }
        },
    )?;
    Ok(())
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    Reroute,
    None,
}

/// Parses `5s`, `500ms`, `20us`, `100ns`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 5s, 500ms, 20us)"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}` (use ns, us, ms, s, m)"
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{text}` is not a valid duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Finds the link on `NODE:PORT`.
pub fn parse_link(topo: &Topology, spec: &str) -> Result<LinkId> {
    let (name, port) = spec
        .rsplit_once(':')
        .with_context(|| format!("link `{spec}`: expected NODE:PORT, e.g. s0-0:4"))?;
    let node = topo
        .find_node(name)
        .with_context(|| format!("link `{spec}`: no node named `{name}`"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("link `{spec}`: `{port}` is not a port number"))?;
    if port as usize >= topo.radix(node) {
        bail!(
            "link `{spec}`: {name} has no port {port} (radix {})",
            topo.radix(node)
        );
    }
    topo.link_at(PortRef { node, port })
        .with_context(|| format!("link `{spec}`: port {port} of {name} is not cabled"))
}

/// Picks the engine for `auto`.
pub fn auto_engine(topo: &Topology) -> &'static str {
    use flitnet_core::topology::Family;
    match topo.family {
        Family::KaryNTree { .. } | Family::Pgft(_) => "dmodk",
        Family::Mesh { .. } | Family::Torus { .. } => "dor",
        Family::Hypercube { .. } => "ecube",
        _ => "updown",
    }
}

/// Computes and checks tables for `topo` minus `faults`.
pub fn compute_routes(topo: &Topology, engine: &str, faults: &FaultSet) -> Result<RoutingTables> {
    let name = if engine == "auto" {
        if faults.is_empty() {
            auto_engine(topo)
        } else if topo.family.is_fat_tree() {
            "dmodc"
        } else {
            "updown"
        }
    } else {
        engine
    };
    let engine = registry::engine(name)?;
    let tables = engine.route(topo, faults)?;
    Ok(tables)
}

pub fn run(args: UpArgs) -> Result<()> {
    let (run, reroutes, dlr) = execute(&args)?;
    if args.json {
        let mut json = serde_json::to_value(&run)?;
        json["mechanism"] = format!("{:?}", args.mechanism).into();
        json["reroutes"] = reroutes.into();
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{run}");
        if dlr {
            println!("local reroutes: {reroutes}");
        }
    }
    Ok(())
}

/// Brings the fabric up, runs the traffic and the fault, and returns the
/// report, the local reroutes counted by the switches, and whether dynamic
/// local rerouting was on (`flitctl reproduce` runs seed 003 this way).
pub fn execute(args: &UpArgs) -> Result<(RunReport, u64, bool)> {
    let topo = crate::topo::load(&args.topology)?;
    let kill_links = args
        .kill_link
        .iter()
        .map(|s| parse_link(&topo, s))
        .collect::<Result<Vec<_>>>()?;
    let kill_switch = match args.kill_switch.as_deref() {
        Some(name) => match topo.find_node(name) {
            Some(NodeRef::Switch(s)) => Some(s),
            Some(_) => bail!("--kill-switch {name}: that is a host, not a switch"),
            None => bail!("--kill-switch {name}: no such switch"),
        },
        None => None,
    };
    let opts = SessionOptions {
        params: args.fabric.params(),
        engine: args.engine.clone(),
        seed: args.seed,
        metrics: args.metrics,
        run_dir: args.run_dir.clone(),
        tables: match &args.tables {
            Some(path) => Some(crate::route::load_tables(&topo, path)?),
            None => None,
        },
    };
    let dlr = args.mechanism.dlr(&topo)?;
    if let Some(c) = dlr {
        if c.vcs_needed() > args.fabric.vcs {
            bail!(
                "--mechanism {:?} needs {} virtual channels; run with --vcs {}",
                args.mechanism,
                c.vcs_needed(),
                c.vcs_needed()
            );
        }
    }
    if let Some(addr) = args.controller_metrics {
        crate::ctl_metrics::install(addr)?;
    }
    let session = Session::start(topo.clone(), &opts, "up")?;
    let (mut fabric, events) = (session.fabric, session.events);
    let (tables, bring_up) = (session.tables, session.bring_up);
    let run_dir = session.run_dir;
    if let Some(c) = dlr {
        configure_reroute(&fabric, &topo, c)?;
        events.record(serde_json::json!({"event": "local-reroute-configured", "config": c}));
    }
    let spec = traffic_spec(&args.traffic, args.seed);
    fabric.start_traffic(&spec)?;
    let traffic_start = Instant::now();
    events.record(serde_json::json!({"event": "traffic-started", "pattern": spec.pattern}));
    let mut faults = FaultSet::none();
    let mut fault_log = Vec::new();
    if !kill_links.is_empty() || kill_switch.is_some() {
        std::thread::sleep(args.kill_at.saturating_sub(traffic_start.elapsed()));
        let fault = if !kill_links.is_empty() {
            let mut names = Vec::new();
            for &l in &kill_links {
                fabric.set_link(l, false)?;
                faults.links.insert(l);
                let link = &topo.links[l as usize];
                names.push(format!(
                    "{}:{}-{}:{}",
                    topo.node_name(link.a.node),
                    link.a.port,
                    topo.node_name(link.b.node),
                    link.b.port
                ));
            }
            let what = names.join(",");
            crate::ctl_metrics::fault("link-down", &what);
            events
                .record(serde_json::json!({"event": "fault", "kind": "link-down", "element": what}))
        } else {
            let s = kill_switch.expect("one of the two");
            fabric.kill(NodeRef::Switch(s))?;
            faults.switches.insert(s);
            let name = topo.node_name(NodeRef::Switch(s)).to_string();
            crate::ctl_metrics::fault("switch-sigkill", &name);
            events.record(
                serde_json::json!({"event": "fault", "kind": "switch-sigkill", "element": name}),
            )
        };
        let detected = report::wait_detection(&events, &topo, &faults, Duration::from_secs(5));
        let mut installed = None;
        if args.recovery == Recovery::Reroute {
            let new_tables = compute_routes(&topo, &args.engine, &faults)?;
            fabric.install_routes(&new_tables)?;
            let record = events.record(
                serde_json::json!({"event": "routes-installed", "engine": new_tables.engine}),
            );
            let since = detected.as_ref().unwrap_or(&fault);
            crate::ctl_metrics::reroute(Duration::from_nanos(
                record.time_ns.saturating_sub(since.time_ns),
            ));
            installed = Some(record);
        }
        fault_log.push(report::FaultTiming::new(
            &fault,
            detected.as_ref(),
            installed.as_ref(),
        ));
    }
    // Let the traffic phase finish, then give in-flight messages time to land.
    std::thread::sleep(
        args.traffic
            .duration
            .saturating_sub(traffic_start.elapsed()),
    );
    // With a recovery protocol, senders hold each message for the hold
    // window after it left: drain until they have let go (or a resend is
    // shown stuck), so `retained` counts only what is really still held.
    let params = args.fabric.params();
    let drain = report::Drain {
        until_released: params.recovery.is_on(),
        unreachable: report::unreachable_hosts(&topo, &faults),
    };
    // Resends after a fault may still be on their way when traffic ends.
    let timeout = if drain.until_released {
        Duration::from_secs(10) + Duration::from_nanos(params.recovery_hold_ns())
    } else {
        Duration::from_secs(5)
    };
    let reports = report::drain_until(&fabric, timeout, &drain)?;
    let switch_reports = fabric.reports(false)?;
    report::save_reports(&run_dir, &topo, &reports, &switch_reports)?;
    let reroutes: u64 = switch_reports
        .iter()
        .map(|(_, r)| r["reroutes"].as_u64().unwrap_or(0))
        .sum();
    let mut run = RunReport::build(
        &topo,
        &tables.engine,
        &spec,
        reports.clone(),
        switch_reports,
        fault_log,
        bring_up,
    );
    run.account_unreachable(&topo, &reports, &drain.unreachable);
    fabric.shutdown()?;
    Ok((run, reroutes, dlr.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("20us").unwrap(), Duration::from_micros(20));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("fast")
            .unwrap_err()
            .contains("not a duration"));
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn links_are_found_by_either_end_and_errors_name_the_problem() {
        let topo = flitnet_core::topology::generators::kary_ntree(4, 2).unwrap();
        let l = parse_link(&topo, "s0-0:4").unwrap();
        let link = &topo.links[l as usize];
        let other = link.other(PortRef::switch(0, 4)).unwrap();
        let spec = format!("{}:{}", topo.node_name(other.node), other.port);
        assert_eq!(parse_link(&topo, &spec).unwrap(), l);
        assert!(parse_link(&topo, "nope:1")
            .unwrap_err()
            .to_string()
            .contains("no node named `nope`"));
        assert!(parse_link(&topo, "s0-0:99")
            .unwrap_err()
            .to_string()
            .contains("has no port 99"));
        assert!(parse_link(&topo, "s0-0")
            .unwrap_err()
            .to_string()
            .contains("expected NODE:PORT"));
    }
}
