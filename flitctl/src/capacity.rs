//! Will this machine hold the fabric as processes? `flitctl up` estimates
//! what one process per switch and host needs — processes and threads,
//! memory, file descriptors, CPU for the daemons' timers alone, and the
//! flit forwarding the offered traffic asks for — against what the machine
//! has, and refuses at once (before any process starts) when it cannot,
//! naming the alternatives. `--force` runs anyway.
//!
//! The per-process figures are the measurements of docs/performance.md
//! ("Memory per process", "Scale"; `flitctl bench datapath` re-measures
//! them).

use crate::up::UpArgs;
use anyhow::{bail, Result};
use flitnet_core::topology::{FaultSet, NodeRef, Topology};
use flitnet_runtime::clock::Dilation;
use std::fmt::Write as _;

/// Memory one daemon costs the machine: its private pages (0.3–0.55 MiB
/// measured), its share of the binary's and libraries' pages, page tables,
/// kernel task and socket state, and what its sockets may queue.
pub const MEMORY_PER_PROCESS_BYTES: u64 = 3 << 20;
/// Threads per daemon (event loop, control endpoint, control connections).
pub const THREADS_PER_PROCESS: u64 = 3;
/// Descriptors `flitctl` itself holds per daemon (log file, control
/// connection, child handle), plus its own.
pub const CONTROLLER_FDS_PER_PROCESS: u64 = 3;
pub const CONTROLLER_FDS_BASE: u64 = 64;
/// CPU an idle daemon uses for its keepalive and timer work: 0.46 cores
/// for 704 processes at the default timers.
pub const IDLE_CORES_PER_PROCESS: f64 = 0.46 / 704.0;
/// Flit hops one core forwards through `switchd` (paced saturation of one
/// switchd: 750–920 k flits/s; taken lower, since the hosts share the
/// cores).
pub const FLIT_HOPS_PER_CORE: f64 = 500_000.0;
/// Beyond this many times the machine's forwarding capacity, the emulated
/// timing means nothing: refused. Above 1× a warning says the run will be
/// dilated.
pub const MAX_OVERLOAD: f64 = 100.0;

/// What a fabric needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Need {
    pub processes: u64,
    pub threads: u64,
    pub memory_bytes: u64,
    pub controller_fds: u64,
    pub idle_cores: f64,
    /// Flit hops per second the offered load asks for (None: links unpaced).
    pub flit_hops_per_s: Option<f64>,
}

/// What the machine has.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    pub cores: u64,
    pub memory_available_bytes: u64,
    /// Tasks this user may still start (the smallest of the limits, less
    /// what runs).
    pub tasks_left: u64,
    pub fd_limit: u64,
}

/// Mean links crossed by a flit between two hosts (the host links
/// included), over up to 16 sources spread over the hosts.
pub fn mean_hops(topo: &Topology) -> f64 {
    let n = topo.num_hosts();
    if n < 2 {
        return 0.0;
    }
    let samples = n.min(16);
    let (mut sum, mut count) = (0u64, 0u64);
    for k in 0..samples {
        let src = (k * n / samples) as u32;
        let dist = topo.distances_from(NodeRef::Host(src), &FaultSet::none());
        for (d, x) in dist.iter().take(n).enumerate() {
            if d as u32 != src {
                if let Some(x) = x {
                    sum += *x as u64;
                    count += 1;
                }
            }
        }
    }
    if count == 0 {
        0.0
    } else {
        sum as f64 / count as f64
    }
}

impl Need {
    pub fn of(topo: &Topology, bandwidth: Option<u64>, load: f64) -> Need {
        let processes = (topo.num_hosts() + topo.num_switches()) as u64;
        Need {
            processes,
            threads: processes * THREADS_PER_PROCESS,
            memory_bytes: processes * MEMORY_PER_PROCESS_BYTES,
            controller_fds: CONTROLLER_FDS_BASE + processes * CONTROLLER_FDS_PER_PROCESS,
            idle_cores: processes as f64 * IDLE_CORES_PER_PROCESS,
            flit_hops_per_s: bandwidth
                .map(|b| topo.num_hosts() as f64 * load * b as f64 * mean_hops(topo)),
        }
    }
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn rlimit(resource: libc::__rlimit_resource_t) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(resource, &mut r) } != 0 || r.rlim_cur == libc::RLIM_INFINITY {
        return u64::MAX;
    }
    r.rlim_cur
}

impl Machine {
    /// This machine, from /proc and the process limits.
    pub fn this() -> Machine {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_available_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(u64::MAX, |kb| kb * 1024);
        let running = std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .bytes()
                            .all(|b| b.is_ascii_digit())
                    })
                    .count() as u64
            })
            .unwrap_or(0);
        let limit = [
            read_u64("/proc/sys/kernel/pid_max"),
            read_u64("/proc/sys/kernel/threads-max"),
            Some(rlimit(libc::RLIMIT_NPROC)),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(u64::MAX);
        Machine {
            cores,
            memory_available_bytes,
            tasks_left: limit.saturating_sub(running * 2),
            fd_limit: rlimit(libc::RLIMIT_NOFILE),
        }
    }
}

/// Why the machine cannot hold the fabric (empty: it can), and warnings.
pub fn judge(need: &Need, m: &Machine) -> (Vec<String>, Vec<String>) {
    let mut refuse = Vec::new();
    let mut warn = Vec::new();
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if need.processes + need.threads > m.tasks_left {
        refuse.push(format!(
            "{} processes with {} threads, but only {} more tasks may start (pid_max, threads-max, ulimit -u)",
            need.processes, need.threads, m.tasks_left
        ));
    }
    if need.memory_bytes > m.memory_available_bytes / 10 * 8 {
        refuse.push(format!(
            "about {:.1} GiB of memory ({} MiB per process), {:.1} GiB available",
            gib(need.memory_bytes),
            MEMORY_PER_PROCESS_BYTES >> 20,
            gib(m.memory_available_bytes)
        ));
    }
    if need.controller_fds > m.fd_limit {
        refuse.push(format!(
            "{} file descriptors in flitctl, its limit is {} (ulimit -n)",
            need.controller_fds, m.fd_limit
        ));
    }
    if need.idle_cores > m.cores as f64 {
        refuse.push(format!(
            "{:.1} cores for the daemons' timers alone, before any traffic; the machine has {}",
            need.idle_cores, m.cores
        ));
    }
    if let Some(f) = need.flit_hops_per_s {
        let capacity = m.cores as f64 * FLIT_HOPS_PER_CORE;
        let over = f / capacity;
        if over > MAX_OVERLOAD {
            refuse.push(format!(
                "{:.3e} flit hops per second offered, {:.0}× what {} cores forward (~{:.0e} per core)",
                f, over, m.cores, FLIT_HOPS_PER_CORE
            ));
        } else if over > 1.0 {
            warn.push(format!(
                "the offered traffic needs {:.3e} flit hops per second, {:.1}× what {} cores forward: the emulation will run behind its timing (see the report's fidelity)",
                f, over, m.cores
            ));
        }
    }
    (refuse, warn)
}

/// `flitctl up`'s check: refuses a fabric this machine cannot hold, unless
/// `--force`.
pub fn check_up(args: &UpArgs) -> Result<()> {
    let topo = crate::topo::load(&args.topology)?;
    let params = args
        .fabric
        .with_topology(&topo)
        .params_for(&args.engine, args.mechanism);
    let mut need = Need::of(&topo, params.bandwidth_flits_per_s, args.traffic.load);
    // Forwarding is needed per second of wall time: a fixed dilation
    // divides it, and `auto` chooses the factor that keeps up (so falling
    // behind is not to be warned of; the report's fidelity says if it did).
    let auto = match args.time_dilation {
        Dilation::Fixed(n) => {
            need.flit_hops_per_s = need.flit_hops_per_s.map(|f| f / n.max(1) as f64);
            false
        }
        Dilation::Auto => true,
    };
    let machine = Machine::this();
    let (refuse, mut warn) = judge(&need, &machine);
    if auto {
        warn.clear();
    }
    for w in &warn {
        eprintln!("warning: {w}");
    }
    if refuse.is_empty() || args.force {
        if !refuse.is_empty() {
            eprintln!(
                "warning: --force: starting {} processes that this machine cannot hold ({})",
                need.processes,
                refuse.join("; ")
            );
        }
        return Ok(());
    }
    let mut msg = format!(
        "this machine cannot run {} ({} switches, {} hosts) as {} processes:\n",
        args.topology.display(),
        topo.num_switches(),
        topo.num_hosts(),
        need.processes
    );
    for r in &refuse {
        let _ = writeln!(msg, "  - {r}");
    }
    let _ = write!(
        msg,
        "alternatives:\n  - flitctl sim {} (same flags): the same switch and host state machines in the deterministic simulator, no processes\n  - slow the emulated time down (time dilation), or lower --bandwidth/--load\n  - spread the fabric over several machines: flitctl compose (Docker Swarm, docs/compose.md)\n  - --force starts it anyway",
        args.topology.display()
    );
    bail!("{msg}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::topology::generators::kary_ntree;

    fn small_machine() -> Machine {
        Machine {
            cores: 2,
            memory_available_bytes: 24 << 30,
            tasks_left: 100_000,
            fd_limit: 1024,
        }
    }

    #[test]
    fn the_default_fabric_fits_and_a_huge_one_does_not() {
        let m = small_machine();
        let small = Need::of(&kary_ntree(4, 2).unwrap(), Some(200_000), 0.3);
        assert_eq!(small.processes, 24);
        let (refuse, _) = judge(&small, &m);
        assert!(refuse.is_empty(), "{refuse:?}");
        let big = Need::of(&kary_ntree(16, 3).unwrap(), Some(200_000), 0.3);
        let (refuse, _) = judge(&big, &m);
        assert!(
            refuse.iter().any(|r| r.contains("timers alone")),
            "{refuse:?}"
        );
        assert!(
            refuse.iter().any(|r| r.contains("file descriptors")),
            "{refuse:?}"
        );
        assert!(refuse.iter().any(|r| r.contains("flit hops")), "{refuse:?}");
    }

    #[test]
    fn a_fat_tree_flit_crosses_about_2n_links() {
        let h = mean_hops(&kary_ntree(4, 2).unwrap());
        // 3 of 15 destinations share the leaf (2 links), 12 do not (4).
        assert!((h - (3.0 * 2.0 + 12.0 * 4.0) / 15.0).abs() < 1e-9, "{h}");
    }
}
