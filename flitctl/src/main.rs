//! `flitctl`, flitnet's controller. One module per group of subcommands;
//! add a variant to [`Command`] and a module for each new group.

use clap::{ArgAction, Parser, Subcommand};
use flitctl::{
    analyze, bench, bench_baseline, bench_routes, bench_sim, chaos, compose, route, run, sim, topo,
    up,
};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "flitctl",
    version,
    about = "flitnet's controller: topologies, routing, bring-up, traffic, faults"
)]
struct Cli {
    /// More logging on stderr: -v for debug, -vv for trace (RUST_LOG overrides).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show, generate, convert and import topologies.
    #[command(subcommand)]
    Topo(topo::TopoCommand),
    /// Bring a topology up as local processes on loopback, install routing,
    /// drive traffic, optionally kill a link or switch mid-run, and report.
    Up(Box<up::UpArgs>),
    /// Run a chaos scenario: a fabric under traffic, faults and repairs on a
    /// timeline (or at random), the controller re-routing, and a report of
    /// detection and recovery times and of every lost message.
    Chaos(chaos::ChaosArgs),
    /// Run a topology (with `up`'s flags) or a chaos scenario in the
    /// deterministic simulator: the same switch and host state machines and
    /// controller loop, no processes, emulated time, the same report;
    /// the same seed gives the same event log (--events). `sim swarm`:
    /// random fault schedules checked against each mechanism's promise.
    #[command(disable_help_flag = true)]
    Sim(sim::SimArgs),
    /// Compute routing tables, check them, and write them (lft, intervals,
    /// opensm, json).
    Route(route::RouteArgs),
    /// Static analyses: `analyze routes` compares engines side by side,
    /// `analyze faults` finds the link-fault combinations a mechanism
    /// tolerates.
    #[command(subcommand)]
    Analyze(analyze::AnalyzeCommand),
    /// Benchmarks, each reported as ratios to a baseline measured in the same run.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Re-run the papers' experiments and compare with their figures: runs
    /// `flitnet-experiments reproduce` (the experiments crate) with these
    /// arguments (`flitctl reproduce --help` lists them).
    #[command(disable_help_flag = true)]
    Reproduce {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Write a Docker Compose bundle (compose file, stack file, per-node
    /// configs, fabric.json, prometheus.yml) for a topology.
    Compose(compose::ComposeArgs),
    /// Attach to a fabric started by Compose (configs/fabric.json): install
    /// routes, drive traffic, inject faults, re-route, report.
    Attach(run::RunArgs),
    /// Run a program inside a host's network namespace on a running
    /// `--tun` fabric: `flitctl exec h03 -- iperf3 -c h07` (docs/ip.md).
    Exec(flitctl::exec::ExecArgs),
    /// Stop a fabric left running (its run directory holds state.json).
    /// Only processes whose start time and executable match what the
    /// state file recorded are signalled.
    Down {
        /// The run directory of the fabric.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        run_dir: Option<PathBuf>,
        /// Stop every fabric of this user left in the temp directory and
        /// remove their run directories.
        #[arg(long)]
        all: bool,
    },
    /// List this user's run directories in the temp directory (kept with
    /// --keep, or left by failed or interrupted runs).
    Runs {
        /// Remove the ones no running controller or daemon uses.
        #[arg(long)]
        clean: bool,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Data path: one switchd against a bare UDP forwarder, per-hop latency,
    /// fabric throughput, bring-up time and memory at scale.
    Datapath(bench::DatapathArgs),
    /// Route computation time: Dmodc, Dmodk and Ftree on PGFTs of growing
    /// size, against OpenSM's ftree on the same fabric where ibsim holds it.
    Routes(bench_routes::BenchRoutesArgs),
    /// Accepted throughput and latency p50/p99 over offered load in the
    /// simulator: 4-ary 2- and 3-tree (Dmodk), 4x4 mesh, uniform traffic.
    Saturation(flitctl::bench_saturation::SaturationArgs),
    /// Live against simulated: the same fabric, traffic and seed run by the
    /// daemons and by the simulator; accepted throughput and latency with
    /// ratios, and the live run's fidelity verdict and dilation.
    Fidelity(flitctl::bench_fidelity::BenchFidelityArgs),
    /// Simulator speed: flit hops and events per second and peak memory
    /// for a 4-ary 2-tree, an 8-ary 3-tree and the 8,640-host PGFT, the
    /// timing-wheel queue against the binary heap in the same run.
    Sim(bench_sim::BenchSimArgs),
    /// Fault detection to new tables installed, for a killed link and a
    /// killed switch, on local fabrics and (with --image) Compose.
    Reroute(flitctl::bench_reroute::BenchRerouteArgs),
    /// iperf3 TCP across a 4-ary 2-tree's IP interfaces (--tun) against the
    /// link bandwidth and against a plain veth pair in the same run (root).
    Tun(flitctl::bench_tun::BenchTunArgs),
    /// One process of the bare forwarder baseline (the datapath bench
    /// starts three; not for use by hand).
    #[command(hide = true)]
    BaselineRole(bench_baseline::RoleArgs),
}

/// `flitctl down DIR`.
fn down(dir: &std::path::Path) -> anyhow::Result<()> {
    let done = flitctl::fabric::down(dir)?;
    for why in &done.refused {
        eprintln!("left alone: {why}");
    }
    eprintln!(
        "fabric stopped ({} processes had to be killed)",
        done.killed
    );
    Ok(())
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    if let Err(e) = flitctl::interrupt::install() {
        eprintln!("error: installing the SIGINT/SIGTERM handlers: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Topo(cmd) => topo::run(cmd),
        Command::Up(args) => flitctl::capacity::check_up(&args).and_then(|()| up::run(*args)),
        Command::Chaos(args) => chaos::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Route(args) => route::run(args),
        Command::Analyze(cmd) => analyze::run(cmd),
        Command::Bench(BenchCommand::Datapath(args)) => bench::run_datapath(args),
        Command::Bench(BenchCommand::Routes(args)) => bench_routes::run_routes(args),
        Command::Bench(BenchCommand::Saturation(args)) => {
            flitctl::bench_saturation::run_saturation(args)
        }
        Command::Bench(BenchCommand::Fidelity(args)) => flitctl::bench_fidelity::run(args),
        Command::Bench(BenchCommand::Sim(args)) => bench_sim::run(args),
        Command::Bench(BenchCommand::Reroute(args)) => flitctl::bench_reroute::run(args),
        Command::Bench(BenchCommand::Tun(args)) => flitctl::bench_tun::run(args),
        Command::Bench(BenchCommand::BaselineRole(args)) => bench_baseline::run_role(&args),
        Command::Reproduce { args } => flitctl::experiments::reproduce(&args),
        Command::Compose(args) => compose::run(args),
        Command::Attach(args) => run::run(args),
        Command::Exec(args) => flitctl::exec::run(args),
        Command::Down { run_dir, all } => match run_dir {
            Some(dir) if !all => down(&dir),
            _ => flitctl::runs::down_all(),
        },
        Command::Runs { clean } => flitctl::runs::list(clean),
    };
    flitctl::rundir::finish(result.is_ok());
    match result {
        // The report was printed; the exit status still says the run was
        // cut short (128 + SIGINT, as a shell reports it).
        Ok(()) if flitctl::interrupt::requested() => ExitCode::from(130),
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the context chain on one line: `a: b: c`.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
