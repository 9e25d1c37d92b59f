//! `flitctl sim`: a topology with `up`'s flags, or a chaos scenario, run in
//! the deterministic simulator instead of as processes. The report is
//! `up`'s or `chaos`'s, its times emulated; the same seed gives the same
//! event log byte for byte (`--events FILE`).
//!
//! Live-only features map to their simulated equivalents: a SIGKILLed
//! switch is a node that stops (what reaches it is lost, it sends nothing);
//! `--kill-by carrier` is a pulled cable (what is sent on the link
//! vanishes; its ends notice by keepalive timeout). Options that concern
//! processes (`--metrics`, `--run-dir`, `--transport ethernet`, …) are
//! refused with a message saying why.

pub mod engine;
pub mod swarm;

use crate::chaos::{self, Applied, ChaosReport};
use crate::events::ControllerEvent;
use crate::fabric::Reconfiguration;
use crate::report::{self, FaultTiming, RunReport};
use crate::scenario::{Action, ActionKind, Scenario, Target};
use crate::session::Collected;
use crate::up::{self, KillBy, Recovery, Transport, UpArgs, UpOutcome};
use anyhow::{bail, Context, Result};
use clap::{Args, Parser};
use engine::{Op, Outcome, Plan, RestartTables, Sim, Step};
use flitnet_core::topology::{FaultSet, NodeRef, PortRef, Topology};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `flitctl sim ARGS…`: parsed here rather than by the top-level parser,
/// because the topology or scenario file is required for a run but not for
/// `swarm` or `--replay` (see [`SimRun`], [`SwarmCli`]).
#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct SimArgs {
    /// FILE [up's flags] | swarm [--runs N --seed S …] | --replay SEED
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// `flitctl sim FILE`.
#[derive(Parser, Debug)]
#[command(
    name = "flitctl sim",
    about = "Run a topology (with up's flags) or a chaos scenario in the deterministic simulator: \
             the same switch and host state machines and controller loop, no processes, emulated \
             time, the same report as up or chaos; the same seed gives the same event log (--events).",
    after_help = "Also:\n  flitctl sim swarm [--runs N] [--seed S] [--jobs J]   random fault schedules checked \
                  against each mechanism's promise (flitctl sim swarm --help)\n  flitctl sim --replay SEED [--events FILE]            \
                  one swarm run again, from its seed (--stops if the swarm had it)"
)]
pub struct SimRun {
    /// Write the event log here, one JSON record per line (the records of
    /// a live run's events.jsonl, stamped in emulated ns).
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Write the delivered-throughput plot (SVG) here.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// More logging (as `flitctl -v`).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// The topology (with `up`'s flags) or a chaos scenario file (it has a
    /// `topology:` key; its own fabric, traffic and timeline are used).
    #[command(flatten)]
    pub up: UpArgs,
}

/// `flitctl sim swarm`.
#[derive(Parser, Debug)]
#[command(
    name = "flitctl sim swarm",
    about = "Swarm testing: random fabrics, mechanisms, fault schedules and traffic, each run \
             checked against what its mechanism promises; a failure prints its seed and a shrunk \
             schedule (docs/simulation.md)."
)]
pub struct SwarmCli {
    #[command(flatten)]
    pub swarm: swarm::SwarmArgs,
}

/// `flitctl sim`.
pub fn run(args: SimArgs) -> Result<()> {
    let words = args.args;
    match words.first().map(String::as_str) {
        Some("swarm") => {
            let cli = SwarmCli::parse_from(
                std::iter::once("flitctl sim swarm".to_string()).chain(words[1..].iter().cloned()),
            );
            return swarm::run(cli.swarm);
        }
        Some(w) if w == "--replay" || w.starts_with("--replay=") => {
            let (seed, rest) = match w.strip_prefix("--replay=") {
                Some(seed) => (seed, &words[1..]),
                None => (
                    words
                        .get(1)
                        .context("--replay needs the run's SEED")?
                        .as_str(),
                    words.get(2..).unwrap_or_default(),
                ),
            };
            let seed = seed.parse::<u64>().context("--replay SEED: a number")?;
            let stops = rest.iter().any(|w| w == "--stops");
            let rest: Vec<&String> = rest.iter().filter(|w| *w != "--stops").collect();
            let events = match rest.as_slice() {
                [] => None,
                [flag, file] if *flag == "--events" => Some(PathBuf::from(file)),
                [flag] if flag.starts_with("--events=") => {
                    Some(PathBuf::from(&flag["--events=".len()..]))
                }
                _ => {
                    bail!("--replay SEED takes only --stops (as the swarm drew it) and --events FILE (the seed says everything else)")
                }
            };
            return swarm::replay(seed, stops, events.as_deref());
        }
        _ => {}
    }
    let cli = SimRun::parse_from(std::iter::once("flitctl sim".to_string()).chain(words));
    let up = cli.up;
    let file = up.topology.clone();
    if is_scenario(&file)? {
        refuse_up_flags(&up)?;
        let scenario = Scenario::load(&file)?;
        let report = run_scenario(&scenario, cli.events.as_deref(), cli.plot.as_deref())?;
        if up.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{report}");
        }
        if !report.promise_kept {
            bail!(
                "{}: promise broken: {}",
                scenario.path.display(),
                report.promise
            );
        }
        return Ok(());
    }
    let outcome = run_up(&up, cli.events.as_deref())?;
    up::print_outcome(&up, outcome)
}

/// A scenario file has a top-level `topology:` key; a topology file never
/// does.
fn is_scenario(path: &Path) -> Result<bool> {
    if path.extension().is_some_and(|e| e == "net") {
        return Ok(false);
    }
    let text = flitnet_core::input::read_bounded(path)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(text.lines().any(|l| l.starts_with("topology:")))
}

/// With a scenario file, the scenario says what to run: `up`'s fault flags
/// would be silently ignored, so they are refused.
fn refuse_up_flags(a: &UpArgs) -> Result<()> {
    let given = [
        ("--kill-link", !a.kill_link.is_empty()),
        ("--kill-switch", !a.kill_switch.is_empty()),
        ("--withhold-credits", a.withhold_credits.is_some()),
        ("--tables", a.tables.is_some()),
        ("--restart-after", a.restart_after.is_some()),
        ("--stop-switch", !a.stop_switch.is_empty()),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
        bail!("{flag}: a scenario file carries its own schedule; put the fault in its timeline (docs/chaos.md)");
    }
    refuse_live_only(a)
}

/// Options that only mean something for processes.
fn refuse_live_only(a: &UpArgs) -> Result<()> {
    let why = |flag: &str, what: &str| -> Result<()> {
        bail!("{flag}: {what}; `flitctl sim` starts no process (drop it, or use `flitctl up`)")
    };
    if a.metrics {
        why("--metrics", "daemons serve Prometheus metrics")?;
    }
    if a.controller_metrics.is_some() {
        why("--controller-metrics", "the live controller serves metrics")?;
    }
    if a.run_dir.is_some() || a.keep {
        why(
            "--run-dir/--keep",
            "a run directory holds processes' configs and logs (--events FILE writes the event log)",
        )?;
    }
    if a.fabric.tun {
        why(
            "--tun",
            "IP interfaces carry real packets between processes",
        )?;
    }
    if a.fabric.transport == Some(Transport::Ethernet) || a.fabric.netns.is_some() {
        why(
            "--transport ethernet/--netns",
            "the transport carries datagrams between processes",
        )?;
    }
    Ok(())
}

pub(crate) fn open_events(path: Option<&Path>) -> Result<Option<Box<dyn std::io::Write>>> {
    Ok(match path {
        Some(p) => {
            let f = std::fs::File::create(p)
                .with_context(|| format!("creating the event log {}", p.display()))?;
            Some(Box::new(std::io::BufWriter::new(f)))
        }
        None => None,
    })
}

/// The operations and record of one scenario action; `before`, the
/// faults in force before it ([`Action::held_down`]).
fn step_of(topo: &Topology, a: &Action, before: &FaultSet) -> Step {
    let held = a.held_down(topo, before);
    let ends_up = |ends: Vec<PortRef>| -> Vec<Op> {
        ends.into_iter()
            .filter(|e| !held.contains(e))
            .map(|end| Op::SetPort { end, up: true })
            .collect()
    };
    let ops = match (a.kind, a.target) {
        (ActionKind::KillLink, Target::Link { link, .. }) => vec![Op::SetLink { link, up: false }],
        (ActionKind::RestoreLink, Target::Link { link, .. }) if held.is_empty() => {
            vec![Op::SetLink { link, up: true }]
        }
        (ActionKind::RestoreLink, Target::Link { link, .. }) => {
            let l = &topo.links[link as usize];
            ends_up(vec![l.a, l.b])
        }
        (ActionKind::Corrupt, Target::Link { end, .. }) => vec![Op::Corrupt {
            end,
            count: a.count,
        }],
        (ActionKind::KillSwitch, Target::Switch(s)) => vec![Op::SetAllPorts {
            switch: s,
            up: false,
        }],
        (ActionKind::RestoreSwitch, Target::Switch(s)) if held.is_empty() => {
            vec![Op::SetAllPorts {
                switch: s,
                up: true,
            }]
        }
        (ActionKind::RestoreSwitch, Target::Switch(s)) => ends_up(
            topo.switches[s as usize]
                .cabled_ports()
                .map(|(port, _)| PortRef::switch(s, port))
                .collect(),
        ),
        (ActionKind::SigkillSwitch, Target::Switch(s)) => vec![Op::Stop { switch: s }],
        (ActionKind::StopSwitch, Target::Switch(s)) => vec![Op::Stall {
            switch: s,
            for_ns: a.lasts.as_nanos() as u64,
        }],
        (ActionKind::RestartSwitch, Target::Switch(s)) => {
            let restart = Op::Restart {
                switch: s,
                tables: RestartTables::Current,
            };
            let down = held.iter().map(|&end| Op::SetPort { end, up: false });
            std::iter::once(restart).chain(down).collect()
        }
        _ => Vec::new(),
    };
    let element = match a.target {
        Target::Link { link, .. } => crate::controller::link_name(topo, link),
        Target::Switch(s) => topo.node_name(NodeRef::Switch(s)).to_string(),
    };
    let (kind, origin) = (a.kind.name().to_string(), Some(a.origin.clone()));
    let record = if a.kind.is_repair() {
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
    Step {
        at_ns: a.at.as_nanos() as u64,
        ops,
        record: Some(record),
    }
}

/// The plan of a scenario (what `chaos` would bring up and do).
pub fn scenario_plan(scenario: &Scenario) -> Result<Plan> {
    let f = &scenario.file;
    let topo = &scenario.topo;
    if f.fabric.tun {
        bail!("tun: the simulator has no IP interfaces (they carry real packets between processes); run the scenario with `flitctl chaos`");
    }
    let params = f.params();
    let mechanism = scenario.plan()?;
    Ok(Plan {
        topo: topo.clone(),
        spec: f.traffic.spec(f.seed),
        engine: f.engine.clone(),
        tables: mechanism.as_ref().and_then(|m| m.tables()).cloned(),
        reroute: f.mechanism.acts_on_faults(),
        reconfiguration: Reconfiguration::choose(f.fabric.reconfiguration, topo),
        mechanism,
        steps: scenario
            .actions
            .iter()
            .scan(FaultSet::none(), |faults, a| {
                let step = step_of(topo, a, faults);
                a.apply_to(faults);
                Some(step)
            })
            .collect(),
        seed: f.seed,
        params,
        timing: Default::default(),
        drain: true,
    })
}

/// Runs a scenario in the simulator and builds `chaos`'s report from it.
pub fn run_scenario(
    scenario: &Scenario,
    events: Option<&Path>,
    plot_path: Option<&Path>,
) -> Result<ChaosReport> {
    let plan = scenario_plan(scenario)?;
    let sink = open_events(events)?;
    let unreachable = chaos::cut_off_hosts(&scenario.topo, &scenario.actions);
    let out = Sim::new(&plan, sink)?.run(&unreachable)?;
    chaos_report(scenario, &plan, &out, &unreachable, plot_path)
}

/// `chaos`'s report of a simulated scenario run.
pub fn chaos_report(
    scenario: &Scenario,
    plan: &Plan,
    out: &Outcome,
    unreachable: &BTreeSet<NodeRef>,
    plot_path: Option<&Path>,
) -> Result<ChaosReport> {
    let f = &scenario.file;
    let topo = &scenario.topo;
    let applied: Vec<Applied> = scenario
        .actions
        .iter()
        .zip(&out.step_records)
        .zip(&out.local_reroutes_before)
        .filter_map(|((a, r), before)| {
            Some(Applied {
                action: a.clone(),
                record: r.clone()?,
                local_reroutes_before: f.mechanism.is_dlr().then_some(*before),
            })
        })
        .collect();
    let failed_actions: Vec<String> = out
        .records
        .iter()
        .filter_map(|r| match &r.event {
            crate::events::Event::Controller(ControllerEvent::ActionFailed { error }) => {
                Some(error.clone())
            }
            _ => None,
        })
        .collect();
    let actions = chaos::timings(
        topo,
        &applied,
        &out.records,
        out.traffic_start_ns,
        &out.switches,
        &out.hosts,
    );
    let mut run = RunReport::build(
        topo,
        &out.initial_engine,
        &plan.spec,
        out.hosts.clone(),
        out.switches.clone(),
        Vec::<FaultTiming>::new(),
        Duration::ZERO,
    );
    run.engine = format!(
        "{} (re-routing: {})",
        out.initial_engine,
        f.mechanism_name()
    );
    if let Some(quiet) = out.stalled_for_ns {
        run.stall = Some(crate::stall::diagnose(
            topo,
            &out.hosts,
            &out.switches,
            Duration::from_nanos(quiet),
        ));
    }
    run.account_unreachable(topo, &out.hosts, unreachable);
    let collected = Collected {
        hosts: out.hosts.clone(),
        switches: out.switches.clone(),
    };
    let (report, svg) = ChaosReport::assemble(chaos::Assembly {
        scenario: &scenario.path.display().to_string(),
        mechanism: f.mechanism_name(),
        title: format!(
            "{} under {} ({}, simulated)",
            topo.name,
            scenario.path.display(),
            f.mechanism_name()
        ),
        promises_delivery: f.promises_delivery(),
        run,
        actions,
        collected: &collected,
        retired: &out.retired,
        killed_capacity: out.killed_capacity,
        settled: out.settled.map(|s| chaos::SettledAt {
            at_s: s.at_ns as f64 / 1e9,
            sent: s.sent,
            delivered: s.delivered,
            lost_flits: s.lost_flits,
        }),
        cumulative: &out.samples,
        reroutes: out.reroutes,
        failed_actions,
        plot: match plot_path {
            Some(p) => p.display().to_string(),
            None => "(not written; --plot FILE writes it)".into(),
        },
        flows: &[],
        mechanism_report: plan.mechanism.as_ref().and_then(|m| {
            crate::mechanism::report(
                m.as_ref(),
                &out.switches,
                &out.hosts,
                out.drops_at_switchover,
            )
        }),
    });
    if let Some(p) = plot_path {
        std::fs::write(p, svg).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(report)
}

/// `up`'s flags as the simulator runs them.
pub struct UpPlan {
    pub plan: Plan,
    /// The elements each step acts on (empty for a repair).
    pub elements: Vec<Vec<crate::controller::Element>>,
    /// The faults still in place at the end, which cut hosts off: killed
    /// links, and killed switches unless `--restart-after` brings them
    /// back (a stopped switch always runs again).
    pub lasting: FaultSet,
}

/// The plan of `up`'s flags, the elements each fault step acts on, and
/// the faults that last.
pub fn up_plan(args: &UpArgs) -> Result<UpPlan> {
    use crate::controller::Element;
    let topo = crate::topo::load(&args.topology)?;
    let params = args
        .fabric
        .with_topology(&topo)
        .params_for(&args.engine, args.mechanism);
    let spec = args.traffic.spec(args.seed);
    crate::session::check_before_launch(&params, &spec)?;
    let crate::up::UpFaults {
        kill_links,
        kill_switches,
        withhold,
        stops,
    } = crate::up::UpFaults::of(args, &topo)?;
    // `--kill-by carrier` is the simulator's pulled cable: no Ethernet needed.
    let mechanism = args.mechanism.plan(&args.run_spec(&topo))?;
    let tables = match (&args.tables, mechanism.as_ref().and_then(|m| m.tables())) {
        (Some(path), _) => Some(crate::route::load_tables(&topo, path)?),
        (None, Some(t)) => Some(t.clone()),
        (None, None) => None,
    };
    let mut steps = Vec::new();
    let mut elements = Vec::new();
    let at = |k: usize| (args.kill_at + args.kill_every * k as u32).as_nanos() as u64;
    if !kill_links.is_empty() {
        let (kind, ops): (&str, Vec<Op>) = match args.kill_by {
            KillBy::Admin => (
                "link-down",
                kill_links
                    .iter()
                    .map(|&link| Op::SetLink { link, up: false })
                    .collect(),
            ),
            KillBy::Carrier => (
                "carrier-down",
                kill_links
                    .iter()
                    .map(|&link| Op::SetCable {
                        link,
                        connected: false,
                    })
                    .collect(),
            ),
        };
        let names: Vec<String> = kill_links
            .iter()
            .map(|&l| crate::controller::link_name(&topo, l))
            .collect();
        steps.push(Step {
            at_ns: at(0),
            ops,
            record: Some(ControllerEvent::fault(kind, names.join(","))),
        });
        elements.push(kill_links.iter().map(|&l| Element::Link(l)).collect());
    }
    for (k, &s) in kill_switches.iter().enumerate() {
        let mut ops = vec![Op::Stop { switch: s }];
        if args.notify_neighbours {
            ops.extend(
                up::neighbour_ports(&topo, s)
                    .into_iter()
                    .map(|end| Op::SetPort { end, up: false }),
            );
        }
        let name = topo.node_name(NodeRef::Switch(s)).to_string();
        steps.push(Step {
            at_ns: at(k),
            ops,
            record: Some(ControllerEvent::fault("switch-sigkill", name.clone())),
        });
        elements.push(vec![Element::Switch(s)]);
        if let Some(after) = args.restart_after {
            let mut ops = vec![Op::Restart {
                switch: s,
                tables: RestartTables::Initial,
            }];
            if args.notify_neighbours {
                ops.extend(
                    up::neighbour_ports(&topo, s)
                        .into_iter()
                        .map(|end| Op::SetPort { end, up: true }),
                );
            }
            steps.push(Step {
                at_ns: at(k) + after.as_nanos() as u64,
                ops,
                record: Some(ControllerEvent::repair("switch-restart", name)),
            });
            elements.push(Vec::new());
        }
    }
    if let Some(stops) = &stops {
        let names: Vec<&str> = stops
            .switches
            .iter()
            .map(|&s| topo.node_name(NodeRef::Switch(s)))
            .collect();
        steps.push(Step {
            at_ns: stops.at.as_nanos() as u64,
            ops: stops
                .switches
                .iter()
                .map(|&switch| Op::Stall {
                    switch,
                    for_ns: stops.lasts.as_nanos() as u64,
                })
                .collect(),
            record: Some(ControllerEvent::fault("stop-switch", names.join(","))),
        });
        elements.push(stops.switches.iter().map(|&s| Element::Switch(s)).collect());
    }
    if let Some(end) = withhold {
        steps.push(Step {
            at_ns: args.kill_at.as_nanos() as u64,
            ops: vec![Op::WithholdCredits { end, on: true }],
            record: Some(ControllerEvent::fault(
                "withhold-credits",
                format!("{}:{}", topo.node_name(end.node), end.port),
            )),
        });
        elements.push(Vec::new());
    }
    let duration = args.traffic.duration.as_nanos() as u64;
    if let Some(late) = steps.iter().find(|s| s.at_ns >= duration) {
        bail!(
            "a fault at {:?} is not within the traffic duration {:?} (--kill-at, --kill-every, --duration)",
            Duration::from_nanos(late.at_ns),
            args.traffic.duration
        );
    }
    let mut order: Vec<usize> = (0..steps.len()).collect();
    order.sort_by_key(|&i| (steps[i].at_ns, i));
    let steps: Vec<Step> = order.iter().map(|&i| steps[i].clone()).collect();
    let elements: Vec<Vec<Element>> = order.iter().map(|&i| elements[i].clone()).collect();
    let mut lasting = FaultSet::none();
    lasting.links.extend(kill_links.iter().copied());
    if args.restart_after.is_none() {
        lasting.switches.extend(kill_switches.iter().copied());
    }
    Ok(UpPlan {
        plan: Plan {
            reconfiguration: Reconfiguration::choose(args.reconfiguration, &topo),
            topo,
            spec,
            engine: args.engine.clone(),
            tables,
            reroute: args.recovery == Recovery::Reroute,
            mechanism,
            steps,
            seed: args.seed,
            params,
            timing: Default::default(),
            drain: true,
        },
        elements,
        lasting,
    })
}

/// Runs `up`'s flags in the simulator; the outcome `up` prints.
pub fn run_up(args: &UpArgs, events: Option<&Path>) -> Result<UpOutcome> {
    refuse_live_only(args)?;
    let UpPlan {
        plan,
        elements,
        lasting,
    } = up_plan(args)?;
    let topo = &plan.topo;
    let unreachable = report::unreachable_hosts(topo, &lasting);
    let sink = open_events(events)?;
    let out = Sim::new(&plan, sink)?.run(&unreachable)?;
    let fault_log = out
        .step_records
        .iter()
        .zip(&elements)
        .filter(|(_, e)| !e.is_empty())
        .filter_map(|(r, e)| {
            let r = r.as_ref()?;
            let h = crate::controller::fault_timing(topo, e, false, r.time_ns, &out.records);
            Some(FaultTiming::new(
                r,
                h.detected.as_ref(),
                h.installed.as_ref(),
            ))
        })
        .collect();
    let mut run = RunReport::build(
        topo,
        &out.initial_engine,
        &plan.spec,
        out.hosts.clone(),
        out.switches.clone(),
        fault_log,
        Duration::ZERO,
    );
    if let Some(quiet) = out.stalled_for_ns {
        run.stall = Some(crate::stall::diagnose(
            topo,
            &out.hosts,
            &out.switches,
            Duration::from_nanos(quiet),
        ));
    }
    run.account_unreachable(topo, &out.hosts, &unreachable);
    let reroutes = out.switches.iter().map(|(_, r)| r.counters.reroutes).sum();
    let mechanism = plan.mechanism.as_ref().and_then(|m| {
        crate::mechanism::report(
            m.as_ref(),
            &out.switches,
            &out.hosts,
            out.drops_at_switchover,
        )
    });
    Ok(UpOutcome {
        run,
        reroutes,
        mechanism,
    })
}
