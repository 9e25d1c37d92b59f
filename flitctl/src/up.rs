//! `flitctl up`: the embedded default. Brings a topology up as local
//! processes on loopback, installs routing, drives traffic, optionally kills
//! a link or a switch mid-run (and re-routes), prints a report, and stops
//! everything.

use crate::controller::{fault_timing, link_name, Controller, Element, Policy};
use crate::events::ControllerEvent;
use crate::fabric::{Reconfiguration, ReconfigurationChoice};
use crate::mechanism::{total_switch_drops, Mechanism, SWITCHOVER_SETTLE};
mod faults;

pub use faults::UpFaults;

use crate::parse::parse_duration;
use crate::progress::{Progress, ProgressMode};
use crate::report::{self, RunReport};
use crate::session::{Session, SessionOptions};
use crate::traffic::TrafficArgs;
use anyhow::{bail, Result};
use clap::Args;
use flitnet_core::topology::{FaultSet, NodeRef, PortRef, SwitchId, Topology};
use flitnet_runtime::clock::now_ns;
use flitnet_runtime::clock::wall;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use crate::spec::{
    needs_hoq_lifetime, parse_hoq_lifetime, FabricArgs, HoqLifetime, Switching, Transport,
    HOQ_LIFETIME_FLOOR_NS,
};

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
    /// How `--kill-link` kills: `admin` tells both ends' daemons to take
    /// the port down (they know at once); `carrier` sets both veth ends
    /// down (`ip link set down`, ethernet transport) or marks both rings
    /// of the link down (shm transport): frames vanish
    /// and the daemons must notice by themselves (keepalive timeout).
    #[arg(long, value_enum, default_value_t = KillBy::Admin)]
    pub kill_by: KillBy,
    /// SIGKILL this switch's process mid-run (its neighbours must notice).
    /// Repeat to kill several, `--kill-every` apart (the first at
    /// `--kill-at`). Not with `--kill-link`; for other fault sequences use
    /// `flitctl chaos`.
    #[arg(long)]
    pub kill_switch: Vec<String>,
    /// With several --kill-switch: time between two kills (the killed
    /// switches stay dead).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub kill_every: Duration,
    /// With --kill-switch: start each killed switch's process again this
    /// long after its kill (a transient node fault: same configuration,
    /// empty buffers, a new link epoch; it gets the initial tables, and
    /// with --notify-neighbours its neighbours' ports come up again at the
    /// same instant). A restarted switch may be named again in
    /// --kill-switch to kill it once more; it must be less than
    /// --kill-every.
    #[arg(long, value_parser = parse_duration)]
    pub restart_after: Option<Duration>,
    /// With --kill-switch: the controller takes the killed switch's
    /// neighbours' ports toward it down at the same instant, as the SBRP
    /// thesis assumes (each node knows whether each neighbour is
    /// faulty, no detection delay); without it they notice by keepalive
    /// (--dead-after).
    #[arg(long)]
    pub notify_neighbours: bool,
    /// Fault injection for stall diagnosis: at `--kill-at`, this switch
    /// port (`NODE:PORT`) stops returning credits to its peer, so the
    /// traffic through it stops and the run must end with a stall
    /// diagnosis and a non-zero exit. A testing tool, not a fault model.
    #[arg(long, value_name = "NODE:PORT")]
    pub withhold_credits: Option<String>,
    /// Stop this switch's process with its state kept for --stop-for
    /// (SIGSTOP, then SIGCONT: what a daemon starved of CPU does to its
    /// neighbours), at --stop-at. Repeat to stop several at once. As the
    /// `stop-switch` action of a chaos scenario (docs/chaos.md).
    #[arg(long)]
    pub stop_switch: Vec<String>,
    /// With --stop-switch: when, after traffic starts (default: --kill-at).
    #[arg(long, value_parser = parse_duration)]
    pub stop_at: Option<Duration>,
    /// With --stop-switch: how long each stays stopped.
    #[arg(long, value_parser = parse_duration)]
    pub stop_for: Option<Duration>,
    /// When to kill, after traffic starts.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub kill_at: Duration,
    /// What the controller does about a fault: `reroute` recomputes the
    /// tables without the failed element and installs them; `none` leaves
    /// the fabric as it is.
    #[arg(long, value_enum, default_value_t = Recovery::Reroute)]
    pub recovery: Recovery,
    /// How `reroute` swaps the tables: `live` while traffic flows,
    /// `quiesced` (hosts hold injection until nothing is in flight, so old
    /// and new tables never route one packet), `auto` = live on fat-trees,
    /// quiesced elsewhere (docs/chaos.md, "Quiesced reconfiguration").
    #[arg(long, value_enum, default_value_t = ReconfigurationChoice::Auto)]
    pub reconfiguration: ReconfigurationChoice,
    /// What switches do about a fault on their own, with no controller
    /// (k-ary n-trees only): `dlr` = dynamic local rerouting, deterministic,
    /// link and switch faults (3 VCs); `dlr-link` = link faults only (2 VCs);
    /// `dlr-adaptive` = adaptive, link and switch faults (1 VC);
    /// `dlr-adaptive-link`; `ft2ei-dyn` = dynamic FT²EI: the
    /// switches exclude the dead link's destinations by control packets
    /// among themselves and deflect packets caught in between down an
    /// emergency path (needs `--engine ft2ei --recovery none`);
    /// `ft2ei-dyn-drop` = the same without emergency paths;
    /// `none` = drop packets for dead ports.
    /// Meshes and tori: intermediate nodes, chosen by the hosts
    /// from the fault set the controller pushes them (`i`, `ix2`, `ix3`,
    /// `i-d`, `ix2-d`, `d`, `m`, `d-m`, `i-m`, `i-d-m`; docs/recovery.md):
    /// the switches run adaptive
    /// routing with one escape VC set per leg, so the run needs
    /// `--vcs` = legs × escape VCs per leg (2 on tori, 1 on meshes) + 1.
    #[arg(long, default_value = "none", value_parser = Mechanism::parse_fabric)]
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
    /// Directory for configs, logs, events (default: a fresh private temp
    /// dir, removed after a successful run unless --keep).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Keep the default run directory after a successful run (`flitctl
    /// runs` lists kept ones, `flitctl runs --clean` removes them).
    #[arg(long)]
    pub keep: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Start the fabric even when the capacity check says this machine
    /// cannot hold it (`up` only).
    #[arg(long)]
    pub force: bool,
    /// Progress lines on stderr once a second during the traffic phase:
    /// auto = when stderr is a terminal.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
    /// Time dilation: every emulated duration (flit times, delays, timers,
    /// traffic, the fault timeline, the controller's timeouts) lasts N
    /// times longer in wall time, so a machine too slow for the fabric at
    /// full speed still emulates it faithfully; every time reported is
    /// emulated time. `auto` measures this machine first and picks the
    /// smallest N expected to give a faithful run (docs/fidelity.md).
    #[arg(long, default_value = "auto", value_name = "N|auto")]
    pub time_dilation: flitnet_runtime::clock::Dilation,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillBy {
    Admin,
    Carrier,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    Reroute,
    None,
}

impl UpArgs {
    /// What a mechanism's controller half needs to know about this run.
    pub fn run_spec<'a>(&'a self, topo: &'a Topology) -> flitnet_core::mechanism::RunSpec<'a> {
        flitnet_core::mechanism::RunSpec {
            topo,
            vcs: self.fabric.vcs,
            engine: &self.engine,
            tables_given: self.tables.is_some(),
            controller_reroutes: self.recovery == Recovery::Reroute,
            recovery: self.fabric.recovery_protocol,
            kills_switches: !self.kill_switch.is_empty(),
        }
    }
}

/// Why a run that did not deliver everything it generated failed, or
/// `None` when it delivered everything or a fault, a drop or the faults'
/// unreachable hosts account for the difference.
pub fn shortfall(run: &RunReport) -> Option<String> {
    let t = &run.totals;
    // Messages whose flits a fault dropped never arrive: their receivers
    // wait on, which looks like a stall but is the loss the faults and
    // drops already explain.
    let lost_to_faults = !run.faults.is_empty() && !run.drops.is_empty();
    if let Some(stall) = run.stall.as_ref().filter(|_| !lost_to_faults) {
        return Some(format!(
            "the traffic stalled with {} messages pending (diagnosis in the report)",
            stall.messages_pending
        ));
    }
    let explained = !run.faults.is_empty()
        || !run.drops.is_empty()
        || run.credit_violations > 0
        || !run.unreachable_hosts.is_empty();
    if t.messages_lost > 0 && !explained {
        return Some(format!(
            "{} of {} messages sent were not delivered, and no fault, drop or stall explains it",
            t.messages_lost, t.messages_sent
        ));
    }
    None
}

/// `flitctl up` once the capacity check (`capacity::check_up`, called by
/// main) has passed.
pub fn run(args: UpArgs) -> Result<()> {
    let outcome = execute(&args)?;
    print_outcome(&args, outcome)
}

/// Prints what `up` (or `sim` on a topology) did, and fails on a shortfall.
pub fn print_outcome(args: &UpArgs, outcome: UpOutcome) -> Result<()> {
    let UpOutcome {
        run,
        reroutes,
        mechanism,
    } = outcome;
    if args.json {
        let mut json = serde_json::to_value(&run)?;
        json["mechanism"] = args.mechanism.name().into();
        json["reroutes"] = reroutes.into();
        if let Some(r) = &mechanism {
            json[r.key] = r.body.clone();
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{run}");
        if let Some(r) = &mechanism {
            println!("{}", r.line);
        }
    }
    if let Some(why) = shortfall(&run) {
        bail!("{why}");
    }
    Ok(())
}

/// Serves the controller until `until`, printing a progress line a second
/// when asked to. A failed report request (a daemon just killed by a
/// fault) skips that line; it never ends the run.
fn serve_with_progress(ctl: &mut Controller<'_>, progress: &mut Progress, until: Instant) {
    if !progress.is_enabled() {
        ctl.serve_until(until);
        return;
    }
    while Instant::now() < until && !crate::interrupt::requested() {
        let tick = (Instant::now() + Progress::INTERVAL).min(until);
        ctl.serve_until(tick);
        if tick < until {
            progress.print(&ctl.fabric);
        }
    }
}

impl UpArgs {
    /// `flitctl up`'s arguments from `argv` (`flitctl up …`), parsed and
    /// defaulted as on the command line.
    pub fn from_argv(argv: &[String]) -> Result<UpArgs> {
        #[derive(clap::Parser)]
        struct UpCli {
            #[command(subcommand)]
            up: UpSub,
        }
        #[derive(clap::Subcommand)]
        enum UpSub {
            Up(UpArgs),
        }
        let UpSub::Up(up) = <UpCli as clap::Parser>::try_parse_from(argv)
            .map_err(|e| anyhow::anyhow!("{}: {e}", argv.join(" ")))?
            .up;
        Ok(up)
    }
}

/// What one `up` run produced.
pub struct UpOutcome {
    pub run: RunReport,
    /// Local reroutes counted by the switches.
    pub reroutes: u64,
    /// The mechanism's section of the report, if it has one.
    pub mechanism: Option<flitnet_core::mechanism::MechanismReport>,
}

/// The ports of `s`'s neighbouring switches that face it.
pub fn neighbour_ports(topo: &Topology, s: SwitchId) -> Vec<PortRef> {
    let me = NodeRef::Switch(s);
    (0..topo.radix(me) as u16)
        .filter_map(|port| topo.peer(PortRef { node: me, port }))
        .filter(|p| matches!(p.node, NodeRef::Switch(_)) && p.node != me)
        .collect()
}

/// Brings the fabric up, runs the traffic and the fault, and returns what
/// happened (`flitctl reproduce` runs seed 003 this way).
pub fn execute(args: &UpArgs) -> Result<UpOutcome> {
    // `--pattern none`: no generated traffic, only IP packets (--tun).
    let ip_only = args.traffic.pattern == "none";
    if ip_only && !args.fabric.tun {
        bail!("--pattern none generates nothing: it is for IP traffic alone, with --tun");
    }
    let mut checked = args.traffic.spec(args.seed);
    if ip_only {
        checked.pattern = "uniform".into();
    }
    let topo = crate::topo::load(&args.topology)?;
    let fabric = args.fabric.with_topology(&topo);
    crate::session::check_before_launch(
        &fabric.params_for(&args.engine, args.mechanism),
        &checked,
    )?;
    let UpFaults {
        kill_links,
        kill_switches,
        withhold,
        stops,
    } = UpFaults::of(args, &topo)?;
    if args.kill_by == KillBy::Carrier && args.fabric.transport() == Transport::Udp {
        bail!("--kill-by carrier pulls a cable (a veth pair's carrier, a ring's): it needs --transport ethernet or shm");
    }
    let plan = args.mechanism.plan(&args.run_spec(&topo))?;
    let mut params = fabric.params_for(&args.engine, args.mechanism);
    let (factor, dilation_source) =
        crate::fidelity::resolve(args.time_dilation, &topo, &params, args.traffic.load);
    params.time_dilation = factor;
    let opts = SessionOptions {
        params: params.clone(),
        engine: args.engine.clone(),
        seed: args.seed,
        metrics: args.metrics,
        run_dir: args.run_dir.clone(),
        keep: args.keep,
        netns: args.fabric.netns()?,
        tun: args.fabric.tun_options(),
        tables: match (&args.tables, plan.as_ref().and_then(|p| p.tables())) {
            (Some(path), _) => Some(crate::route::load_tables(&topo, path)?),
            (None, Some(t)) => Some(t.clone()),
            (None, None) => None,
        },
    };
    if let Some(addr) = args.controller_metrics {
        crate::ctl_metrics::install(addr)?;
    }
    let session = Session::start(topo.clone(), &opts, "up")?;
    let (fabric, events) = (session.fabric, session.events);
    let (tables, bring_up) = (session.tables, session.bring_up);
    let run_dir = session.run_dir;
    if let Some(p) = &plan {
        crate::mechanism::install(&fabric, p.as_ref(), &events)?;
    }
    let policy = Policy {
        reroute: args.recovery == Recovery::Reroute,
        engine: args.engine.clone(),
        answers_faults: plan.clone().filter(|p| p.answers_faults()),
        reconfiguration: Reconfiguration::choose(args.reconfiguration, &topo),
        vcs: args.fabric.vcs,
    };
    let mut ctl = Controller::new(&topo, fabric, events.clone(), tables.clone(), policy);
    let spec = args.traffic.spec(args.seed);
    if !ip_only {
        ctl.fabric.start_traffic(&spec)?;
    }
    // Checked before traffic starts: a stop that cannot be made fails now.
    let stoppers = match &stops {
        Some(st) => st
            .switches
            .iter()
            .map(|&s| ctl.fabric.stopper(NodeRef::Switch(s), st.lasts))
            .collect::<Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    let traffic_start = Instant::now();
    let mut progress = Progress::new(args.progress, traffic_start, wall(args.traffic.duration));
    events.record(ControllerEvent::traffic_started(&spec.pattern));
    // Stops happen on a timer of their own, beside the faults' loop below.
    let stop_timer = stops.as_ref().map(|st| {
        let (events, at) = (events.clone(), traffic_start + wall(st.at));
        std::thread::spawn(move || -> Result<crate::events::Record> {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            let started_ns = now_ns();
            let names: Vec<String> = stoppers.iter().map(|s| s.name.clone()).collect();
            for stopper in stoppers {
                stopper.stop()?;
            }
            let what = names.join(",");
            crate::ctl_metrics::fault("stop-switch", &what);
            Ok(events.record_at(started_ns, ControllerEvent::fault("stop-switch", what)))
        })
    });
    let mut faults = FaultSet::none();
    // The faults `up` injected, one record per instant, with what they
    // acted on.
    let mut injected: Vec<(crate::events::Record, Vec<Element>)> = Vec::new();
    let mut drops_at_switchover = None;
    // One fault step per `--kill-switch` (`--kill-every` apart), or the
    // links all at once.
    let steps: Vec<Option<SwitchId>> = if !kill_links.is_empty() {
        vec![None]
    } else {
        kill_switches.iter().copied().map(Some).collect()
    };
    for (k, step) in steps.into_iter().enumerate() {
        let at = wall(args.kill_at + args.kill_every * k as u32);
        serve_with_progress(&mut ctl, &mut progress, traffic_start + at);
        if crate::interrupt::requested() {
            break;
        }
        // The fault happens when its injection starts: detections can come
        // back before the injection call returns.
        let started_ns = now_ns();
        if let Some(s) = step {
            ctl.fabric.kill(NodeRef::Switch(s))?;
            if args.notify_neighbours {
                for live in neighbour_ports(&topo, s) {
                    ctl.fabric.set_port(live, false)?;
                }
            }
            faults.switches.insert(s);
            let name = topo.node_name(NodeRef::Switch(s)).to_string();
            crate::ctl_metrics::fault("switch-sigkill", &name);
            let r = events.record_at(started_ns, ControllerEvent::fault("switch-sigkill", name));
            injected.push((r, vec![Element::Switch(s)]));
        } else {
            let kind = match args.kill_by {
                KillBy::Admin => "link-down",
                KillBy::Carrier => "carrier-down",
            };
            let mut names = Vec::new();
            for &l in &kill_links {
                match args.kill_by {
                    KillBy::Admin => ctl.fabric.set_link(l, false)?,
                    KillBy::Carrier => ctl.fabric.set_carrier(l, false)?,
                }
                faults.links.insert(l);
                names.push(link_name(&topo, l));
            }
            let what = names.join(",");
            crate::ctl_metrics::fault(kind, &what);
            let r = events.record_at(started_ns, ControllerEvent::fault(kind, what));
            injected.push((r, kill_links.iter().map(|&l| Element::Link(l)).collect()));
        }
        if ctl.policy.answers_faults.is_some() {
            // Seed 004: once the hosts route around the faults, packets
            // whose heads left before the push may still meet them; give
            // them time to, then count drops from here on.
            let left = wall(args.traffic.duration).saturating_sub(traffic_start.elapsed());
            ctl.serve_until_rerouted(Instant::now() + left / 2);
            let settle = wall(SWITCHOVER_SETTLE)
                .min(wall(args.traffic.duration).saturating_sub(traffic_start.elapsed()) / 2);
            ctl.serve_until(Instant::now() + settle);
            drops_at_switchover = Some(total_switch_drops(&ctl.fabric)?);
        }
        if let (Some(after), Some(s)) = (args.restart_after, step) {
            serve_with_progress(&mut ctl, &mut progress, traffic_start + at + wall(after));
            let started_ns = now_ns();
            // The initial tables (the controller does not re-route in
            // this mode).
            ctl.fabric.restart_switch(
                s,
                &tables,
                Duration::from_secs(10) + wall(Duration::from_nanos(params.dead_after_ns)),
            )?;
            if args.notify_neighbours {
                for live in neighbour_ports(&topo, s) {
                    ctl.fabric.set_port(live, true)?;
                }
            }
            // Back: its host is cut off from nobody (unless killed again).
            faults.switches.remove(&s);
            let name = topo.node_name(NodeRef::Switch(s)).to_string();
            events.record_at(started_ns, ControllerEvent::repair("switch-restart", name));
        }
    }
    if let Some(end) = withhold {
        serve_with_progress(&mut ctl, &mut progress, traffic_start + wall(args.kill_at));
        ctl.fabric.withhold_credits(end, true)?;
        let name = format!("{}:{}", topo.node_name(end.node), end.port);
        events.record(ControllerEvent::fault("withhold-credits", name));
    }
    // Let the traffic phase finish, then give in-flight messages time to land.
    serve_with_progress(
        &mut ctl,
        &mut progress,
        traffic_start + wall(args.traffic.duration),
    );
    crate::session::stop_traffic_if_interrupted(&ctl.fabric, &events);
    if let (Some(timer), Some(st)) = (stop_timer, &stops) {
        let record = timer
            .join()
            .map_err(|_| anyhow::anyhow!("the stop-switch timer panicked"))??;
        injected.push((
            record,
            st.switches.iter().map(|&s| Element::Switch(s)).collect(),
        ));
        injected.sort_by_key(|(r, _)| r.time_ns);
    }
    let records = events.snapshot();
    let fault_log = injected
        .iter()
        .map(|(r, elements)| {
            let handled = fault_timing(&topo, elements, false, r.time_ns, &records);
            report::FaultTiming::new(r, handled.detected.as_ref(), handled.installed.as_ref())
        })
        .collect();
    let Controller { fabric, .. } = ctl;
    // With a recovery protocol, senders hold each message for the hold
    // window after it left: drain until they have let go (or a resend is
    // shown stuck), so `retained` counts only what is really still held.
    let drain = report::Drain {
        until_released: params.recovery.is_on(),
        unreachable: report::unreachable_hosts(&topo, &faults),
    };
    // Resends after a fault may still be on their way when traffic ends.
    let timeout = wall(if drain.until_released {
        Duration::from_secs(10) + Duration::from_nanos(params.recovery_hold_ns())
    } else {
        Duration::from_secs(5)
    });
    let drained = report::drain_watch(&fabric, timeout, &drain)?;
    let reports = drained.reports;
    let switch_reports = fabric.switch_reports()?;
    let stall = drained
        .stalled_for
        .map(|quiet| crate::stall::diagnose(&topo, &reports, &switch_reports, quiet));
    report::save_reports(&run_dir, &topo, &reports, &switch_reports)?;
    let reroutes: u64 = switch_reports
        .iter()
        .map(|(_, r)| r.counters.reroutes)
        .sum();
    let mechanism = plan.as_ref().and_then(|p| {
        crate::mechanism::report(p.as_ref(), &switch_reports, &reports, drops_at_switchover)
    });
    let fidelity = crate::fidelity::judge(
        &crate::fidelity::Context {
            topo: &topo,
            params: &params,
            load: spec.load,
            hosts_offering: topo.num_hosts(),
            dilation_source,
        },
        &reports,
        &switch_reports,
    );
    let mut run = RunReport::build(
        &topo,
        &tables.engine,
        &spec,
        reports.clone(),
        switch_reports,
        fault_log,
        bring_up,
    );
    run.fidelity = Some(fidelity);
    run.stall = stall;
    run.account_unreachable(&topo, &reports, &drain.unreachable);
    fabric.shutdown()?;
    Ok(UpOutcome {
        run,
        reroutes,
        mechanism,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_link;

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
