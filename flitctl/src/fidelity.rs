//! Whether a live run measured the emulated network or this machine: the
//! fidelity verdict every run report carries (docs/fidelity.md).
//!
//! The figures come from the daemons' own reports: timer lateness (how late
//! the event loops fired the state machines' timers, emulated time),
//! arrival lateness (how late the links read flits against their emulated
//! release time: a daemon waiting for a CPU fires no late timer, it reads
//! its input late), the
//! share of wall time each daemon was runnable but not running
//! (`/proc/thread-self/schedstat`), and how fast links went while they had
//! flits queued, against their configured bandwidth. Offered versus carried
//! load is shown beside them: a fabric driven past its saturation carries
//! less than offered on any machine, so it is a figure, not a criterion.

use flitnet_core::control::{
    FabricParams, HostDaemonReport, LatenessSummary, LoopReport, SwitchReport,
};
use flitnet_core::topology::{NodeRef, Topology};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Timer lateness p50, in flit times, up to which a run is faithful: the
/// typical flit leaves and lands within a flit time of when it should.
pub const LATENESS_P50_FAITHFUL_FLIT_TIMES: f64 = 1.0;
/// Past this p50 the run is not faithful: every hop adds the machine's
/// wake-up delay to the latencies measured.
pub const LATENESS_P50_UNFAITHFUL_FLIT_TIMES: f64 = 8.0;
/// Timer lateness p99, in flit times, up to which a run is faithful: one
/// timer in a hundred may be late by about two messages' serialisation.
pub const LATENESS_P99_FAITHFUL_FLIT_TIMES: f64 = 16.0;
/// Past this p99 the run is not faithful: latency tails measure the
/// machine's scheduling, not the fabric.
pub const LATENESS_P99_UNFAITHFUL_FLIT_TIMES: f64 = 256.0;
/// Backlogged links carrying at least this share of their configured rate
/// are faithful.
pub const BACKLOG_RATE_FAITHFUL: f64 = 0.9;
/// Below this share the run is not faithful: the daemons could not feed
/// their links.
pub const BACKLOG_RATE_UNFAITHFUL: f64 = 0.6;
/// Backlogged time (in flit times, all links together) needed before the
/// backlogged rate is judged at all: a few queued messages say nothing.
pub const BACKLOG_MIN_FLIT_TIMES: f64 = 2_000.0;
/// A share of the run waiting for a CPU worth naming in the reason of a
/// run that is not faithful (the machine is shared, or has too few cores
/// for the daemons).
pub const SCHED_WAIT_NOTED: f64 = 0.10;
/// Largest factor the verdict suggests.
const MAX_SUGGESTED: u32 = 256;

/// The one-word verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Faithful,
    Degraded,
    NotFaithful,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Faithful => "faithful",
            Verdict::Degraded => "degraded",
            Verdict::NotFaithful => "not faithful",
        }
    }
}

/// Timer or arrival lateness, emulated µs and flit times.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LatenessFigures {
    /// Samples over all daemons (timers fired, flits read).
    #[serde(default)]
    pub count: u64,
    /// Mean over all samples (emulated µs) and in flit times.
    #[serde(default)]
    pub mean_us: f64,
    #[serde(default)]
    pub mean_flit_times: Option<f64>,
    /// Median over daemons of their p50, and the worst daemon's p99 and max.
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// The same in flit times (None with unlimited bandwidth).
    pub p50_flit_times: Option<f64>,
    pub p99_flit_times: Option<f64>,
    pub max_flit_times: Option<f64>,
    /// The daemon with the worst p99.
    pub worst: String,
}

/// Links while they had flits queued.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BacklogFigures {
    /// Links that were ever backlogged.
    pub links: usize,
    /// Their total backlogged time, emulated ms.
    pub backlogged_ms: f64,
    /// Flits they sent while backlogged per second backlogged, over their
    /// configured rate (all links together).
    pub rate_share: Option<f64>,
    /// The slowest link backlogged long enough to judge, and its share.
    pub slowest: Option<(String, f64)>,
}

/// How long the daemons waited for a CPU.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SchedFigures {
    /// Share of wall time runnable but not running: mean over daemons and
    /// the worst one.
    pub mean_wait_share: f64,
    pub max_wait_share: f64,
    pub worst: String,
    /// Mean share of wall time the daemons ran (CPU use per daemon).
    pub mean_run_share: f64,
    /// Daemons whose figures Linux gave.
    pub daemons: usize,
}

/// The fidelity part of a run report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Fidelity {
    pub verdict: Option<Verdict>,
    /// Why, with the figures behind it.
    pub reason: String,
    /// The dilation factor of the run and how it was chosen.
    pub dilation: u32,
    pub dilation_source: String,
    /// A factor that should make the run faithful (None when it is).
    pub suggested_dilation: Option<u32>,
    /// Emulated flits per second the hosts were asked to offer, all hosts.
    pub offered_flits_per_s: f64,
    /// Messages offered (generated, or refused at a full source queue) and
    /// carried (fully injected); their ratio.
    pub offered_messages: u64,
    pub carried_messages: u64,
    pub carried_share: f64,
    pub lateness: LatenessFigures,
    /// How late links read flits against their release time (paced links
    /// between daemons sharing a clock; none otherwise).
    #[serde(default)]
    pub arrivals: LatenessFigures,
    pub backlog: BacklogFigures,
    pub sched: SchedFigures,
}

/// What a verdict is judged on, besides the reports.
pub struct Context<'a> {
    pub topo: &'a Topology,
    pub params: &'a FabricParams,
    /// Offered load per host (fraction of the link bandwidth).
    pub load: f64,
    /// Hosts that offer traffic.
    pub hosts_offering: usize,
    pub dilation_source: String,
}

fn loops<'a>(
    topo: &'a Topology,
    hosts: &'a [(NodeRef, HostDaemonReport)],
    switches: &'a [(NodeRef, SwitchReport)],
) -> impl Iterator<Item = (String, &'a LoopReport)> + 'a {
    hosts
        .iter()
        .map(move |(n, r)| (topo.node_name(*n).to_string(), &r.event_loop))
        .chain(
            switches
                .iter()
                .map(move |(n, r)| (topo.node_name(*n).to_string(), &r.event_loop)),
        )
}

/// Judges a run from its daemons' last reports.
pub fn judge(
    cx: &Context<'_>,
    hosts: &[(NodeRef, HostDaemonReport)],
    switches: &[(NodeRef, SwitchReport)],
) -> Fidelity {
    let flit_ns = cx.params.bandwidth_flits_per_s.map(|b| 1e9 / b as f64);
    let dilation = cx.params.time_dilation.max(1);
    let mut f = Fidelity {
        dilation,
        dilation_source: cx.dilation_source.clone(),
        ..Fidelity::default()
    };
    // Offered versus carried.
    f.offered_flits_per_s = cx
        .params
        .bandwidth_flits_per_s
        .map_or(0.0, |b| cx.load * b as f64 * cx.hosts_offering as f64);
    for (_, r) in hosts {
        let s = &r.endpoint.source;
        f.offered_messages += s.generated_messages + s.not_generated_queue_full;
        f.carried_messages += s.messages_sent;
    }
    f.carried_share = if f.offered_messages == 0 {
        1.0
    } else {
        f.carried_messages as f64 / f.offered_messages as f64
    };
    f.lateness = lateness_figures(cx.topo, hosts, switches, flit_ns, |l| &l.timer_lateness);
    f.arrivals = lateness_figures(cx.topo, hosts, switches, flit_ns, |l| &l.arrival_lateness);
    // Backlogged links.
    let (mut ns, mut flits) = (0u64, 0u64);
    for (name, l) in loops(cx.topo, hosts, switches) {
        for b in &l.backlog {
            f.backlog.links += 1;
            ns += b.backlogged_ns;
            flits += b.flits;
            let (Some(ft), Some(rate)) = (flit_ns, cx.params.bandwidth_flits_per_s) else {
                continue;
            };
            if (b.backlogged_ns as f64) < BACKLOG_MIN_FLIT_TIMES / 10.0 * ft {
                continue;
            }
            let share = b.flits as f64 / (b.backlogged_ns as f64 / 1e9 * rate as f64);
            if f.backlog.slowest.as_ref().is_none_or(|(_, s)| share < *s) {
                f.backlog.slowest = Some((format!("{name}:{}", b.port), share));
            }
        }
    }
    f.backlog.backlogged_ms = ns as f64 / 1e6;
    if let (Some(ft), Some(rate)) = (flit_ns, cx.params.bandwidth_flits_per_s) {
        if ns as f64 >= BACKLOG_MIN_FLIT_TIMES * ft {
            f.backlog.rate_share = Some(flits as f64 / (ns as f64 / 1e9 * rate as f64));
        }
    }
    // Waiting for a CPU.
    let (mut wait_sum, mut run_sum) = (0.0, 0.0);
    for (name, l) in loops(cx.topo, hosts, switches) {
        let (Some(a), Some(b)) = (&l.sched_start, &l.sched_now) else {
            continue;
        };
        let (Some(wait), Some(run)) = (a.wait_share_until(b), a.run_share_until(b)) else {
            continue;
        };
        f.sched.daemons += 1;
        wait_sum += wait;
        run_sum += run;
        if wait >= f.sched.max_wait_share || f.sched.worst.is_empty() {
            f.sched.max_wait_share = wait;
            f.sched.worst = name;
        }
    }
    if f.sched.daemons > 0 {
        f.sched.mean_wait_share = wait_sum / f.sched.daemons as f64;
        f.sched.mean_run_share = run_sum / f.sched.daemons as f64;
    }
    decide(&mut f);
    f
}

/// Median over daemons of their p50, worst p99 and max, of the lateness
/// `pick` takes from each daemon's loop report.
fn lateness_figures(
    topo: &Topology,
    hosts: &[(NodeRef, HostDaemonReport)],
    switches: &[(NodeRef, SwitchReport)],
    flit_ns: Option<f64>,
    pick: impl Fn(&LoopReport) -> &LatenessSummary,
) -> LatenessFigures {
    let mut f = LatenessFigures::default();
    let mut p50s = Vec::new();
    let mut sum_ns = 0.0;
    for (name, l) in loops(topo, hosts, switches) {
        let t = pick(l);
        if t.count == 0 {
            continue;
        }
        f.count += t.count;
        sum_ns += t.mean_ns as f64 * t.count as f64;
        p50s.push(t.p50_ns);
        let p99 = t.p99_ns as f64 / 1e3;
        if p99 >= f.p99_us || f.worst.is_empty() {
            f.p99_us = p99;
            f.worst = name;
        }
        f.max_us = f.max_us.max(t.max_ns as f64 / 1e3);
    }
    p50s.sort_unstable();
    f.p50_us = p50s.get(p50s.len() / 2).copied().unwrap_or(0) as f64 / 1e3;
    if f.count > 0 {
        f.mean_us = sum_ns / f.count as f64 / 1e3;
    }
    if let Some(ft) = flit_ns.filter(|_| f.count > 0) {
        f.mean_flit_times = Some(f.mean_us * 1e3 / ft);
        f.p50_flit_times = Some(f.p50_us * 1e3 / ft);
        f.p99_flit_times = Some(f.p99_us * 1e3 / ft);
        f.max_flit_times = Some(f.max_us * 1e3 / ft);
    }
    f
}

/// Sets the verdict, its reason and the suggested factor from the figures.
fn decide(f: &mut Fidelity) {
    // Each criterion: (verdict, text, factor it asks for).
    let mut findings: Vec<(Verdict, String, f64)> = Vec::new();
    let grade = |x: f64, ok: f64, bad: f64, higher_is_better: bool| {
        let (x, ok, bad) = if higher_is_better {
            (-x, -ok, -bad)
        } else {
            (x, ok, bad)
        };
        if x <= ok {
            Verdict::Faithful
        } else if x <= bad {
            Verdict::Degraded
        } else {
            Verdict::NotFaithful
        }
    };
    // Late timers and late arrivals are judged alike: either way a flit
    // left or landed that much later than the emulated network would have.
    // Of arrivals the mean, not the median: most flits are read in time,
    // and what the late ones lose adds up hop by hop in every latency.
    let timers = &f.lateness;
    let arrivals = &f.arrivals;
    for (what, l, stat, typical, typical_us) in [
        (
            "timers",
            timers,
            "p50",
            timers.p50_flit_times,
            timers.p50_us,
        ),
        (
            "arrivals",
            arrivals,
            "mean",
            arrivals.mean_flit_times,
            arrivals.mean_us,
        ),
    ] {
        if let Some(typical) = typical {
            let v = grade(
                typical,
                LATENESS_P50_FAITHFUL_FLIT_TIMES,
                LATENESS_P50_UNFAITHFUL_FLIT_TIMES,
                false,
            );
            findings.push((
                v,
                format!(
                    "{what} {stat} late {} = {typical:.1} flit times",
                    fmt_us(typical_us)
                ),
                typical / LATENESS_P50_FAITHFUL_FLIT_TIMES,
            ));
        }
        if let Some(p99) = l.p99_flit_times {
            let v = grade(
                p99,
                LATENESS_P99_FAITHFUL_FLIT_TIMES,
                LATENESS_P99_UNFAITHFUL_FLIT_TIMES,
                false,
            );
            findings.push((
                v,
                format!(
                    "{what} p99 late {} = {p99:.0} flit times ({})",
                    fmt_us(l.p99_us),
                    l.worst
                ),
                p99 / LATENESS_P99_FAITHFUL_FLIT_TIMES,
            ));
        }
    }
    if let Some(share) = f.backlog.rate_share {
        let v = grade(share, BACKLOG_RATE_FAITHFUL, BACKLOG_RATE_UNFAITHFUL, true);
        findings.push((
            v,
            format!(
                "backlogged links carried {:.0} % of their configured rate",
                share * 100.0
            ),
            BACKLOG_RATE_FAITHFUL / share.max(1e-3),
        ));
    }
    // Waiting for a CPU is a cause, not an effect: a dilated run absorbs
    // it (its timers are late by wall delay / N). It is shown, and named
    // in the reason when the run is not faithful.
    let Some(worst) = findings.iter().map(|x| x.0).max() else {
        f.verdict = None;
        f.reason = "no figures (the daemons reported no timers)".into();
        return;
    };
    f.verdict = Some(worst);
    let texts: Vec<&str> = findings
        .iter()
        .filter(|x| worst == Verdict::Faithful || x.0 != Verdict::Faithful)
        .map(|x| x.1.as_str())
        .collect();
    f.reason = texts.join("; ");
    if worst != Verdict::Faithful && f.sched.max_wait_share >= SCHED_WAIT_NOTED {
        f.reason.push_str(&format!(
            "; {} waited for a CPU {:.0} % of the run",
            f.sched.worst,
            f.sched.max_wait_share * 100.0
        ));
    }
    if worst != Verdict::Faithful {
        let need = findings
            .iter()
            .filter(|x| x.0 != Verdict::Faithful)
            .map(|x| x.2)
            .fold(1.0f64, f64::max);
        let n = (f.dilation as f64 * need)
            .ceil()
            .max(f.dilation as f64 + 1.0) as u32;
        f.suggested_dilation = Some(n.next_power_of_two().min(MAX_SUGGESTED));
    }
}

fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{us:.0} us")
    }
}

impl Fidelity {
    /// The one-line verdict.
    pub fn line(&self) -> String {
        let Some(v) = self.verdict else {
            return format!("unknown: {}", self.reason);
        };
        let mut s = format!("{}: {}", v.name(), self.reason);
        if let Some(n) = self.suggested_dilation {
            s.push_str(&format!("; try --time-dilation {n}"));
        }
        s
    }

    /// "×N dilation" beside figures; empty at 1.
    pub fn factor_note(&self) -> String {
        if self.dilation > 1 {
            format!(" (×{} dilation)", self.dilation)
        } else {
            String::new()
        }
    }
}

impl fmt::Display for Fidelity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  dilation    ×{} ({}); every time above is emulated time",
            self.dilation, self.dilation_source
        )?;
        writeln!(
            f,
            "  load        offered {:.0} flits/s; {} of {} offered messages carried ({:.1} %)",
            self.offered_flits_per_s,
            self.carried_messages,
            self.offered_messages,
            self.carried_share * 100.0
        )?;
        let ft = |x: Option<f64>| x.map_or(String::new(), |v| format!(" = {v:.1} flit times"));
        writeln!(
            f,
            "  timers      late p50 {}{}  p99 {}{}  max {}{}",
            fmt_us(self.lateness.p50_us),
            ft(self.lateness.p50_flit_times),
            fmt_us(self.lateness.p99_us),
            ft(self.lateness.p99_flit_times),
            fmt_us(self.lateness.max_us),
            ft(self.lateness.max_flit_times),
        )?;
        if self.arrivals.count > 0 {
            writeln!(
                f,
                "  arrivals    late mean {}{}  p99 {}{}  max {}{} over {} flits read",
                fmt_us(self.arrivals.mean_us),
                ft(self.arrivals.mean_flit_times),
                fmt_us(self.arrivals.p99_us),
                ft(self.arrivals.p99_flit_times),
                fmt_us(self.arrivals.max_us),
                ft(self.arrivals.max_flit_times),
                self.arrivals.count,
            )?;
        }
        match self.backlog.rate_share {
            Some(s) => writeln!(
                f,
                "  backlog     {} links backlogged {:.1} ms in all, carried {:.0} % of their configured rate{}",
                self.backlog.links,
                self.backlog.backlogged_ms,
                s * 100.0,
                self.backlog
                    .slowest
                    .as_ref()
                    .map_or(String::new(), |(l, s)| format!(" (slowest {l}: {:.0} %)", s * 100.0))
            )?,
            None => writeln!(
                f,
                "  backlog     {} links backlogged {:.1} ms in all: too little to judge",
                self.backlog.links, self.backlog.backlogged_ms
            )?,
        }
        if self.sched.daemons > 0 {
            writeln!(
                f,
                "  cpu         daemons ran {:.0} % and waited for a CPU {:.0} % of the time (mean); worst wait {} {:.0} %",
                self.sched.mean_run_share * 100.0,
                self.sched.mean_wait_share * 100.0,
                self.sched.worst,
                self.sched.max_wait_share * 100.0
            )?;
        }
        writeln!(f, "  fidelity    {}", self.line())
    }
}

/// Flit handlings (a switch forwarding a flit, a host sending or
/// receiving one) one core does per wall second in a dilated run, measured
/// with release daemons over shm on the 2-core reference machine
/// (docs/fidelity.md, "`auto`"). Under dilation nearly every handling is a
/// wake-up of its own (a flit time is hundreds of wall microseconds), so
/// this is mostly the cost of waking a process, not of the state machine.
pub const FLIT_HANDLINGS_PER_CORE_S: f64 = if cfg!(debug_assertions) {
    // Unoptimised daemons (`cargo test` runs them).
    DEBUG_FLIT_HANDLINGS_PER_CORE_S
} else {
    62_000.0
};
const DEBUG_FLIT_HANDLINGS_PER_CORE_S: f64 = 30_000.0;
/// Share of the machine's cores `auto` plans the daemons to use: queues and
/// bursts need headroom, and a daemon that waits for a CPU fires its
/// timers late. Of all the cores, whatever the load average: a fabric's
/// dozens of daemon threads outnumber a few builds, and the scheduler
/// shares the CPUs by thread (measured: the README's fabric ran on 1.6 to
/// 1.85 of 2 cores at load averages 5 to 23).
pub const CPU_TARGET_SHARE: f64 = 0.8;
/// Sleeps of the wake-up probe, and how long each asks for: enough for
/// the p99 to rest on ten samples and the probe to span several scheduler
/// time slices of whatever else the machine runs (about 60 ms in all).
const PROBE_SLEEPS: usize = 1000;
const PROBE_SLEEP_NS: u64 = 50_000;

/// What `--time-dilation auto` measured and chose.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Calibration {
    pub factor: u32,
    /// p50 and p99 of how late a 50 µs sleep woke up on this machine
    /// now, wall µs.
    pub wake_p50_us: f64,
    pub wake_p99_us: f64,
    /// CPUs and the 1-minute load average before the run.
    pub cpus: usize,
    pub load_average: f64,
    /// Flit handlings per emulated second the run asks for.
    pub demand_per_s: f64,
    /// The factors the wake-up lateness and the CPU demand call for.
    pub factor_for_wake_up: f64,
    pub factor_for_cpu: f64,
}

impl Calibration {
    pub fn describe(&self) -> String {
        format!(
            "auto: wake-ups late p50 {:.0} us p99 {:.0} us, {} CPUs at load {:.2}, {:.2} M flit handlings/s asked for",
            self.wake_p50_us,
            self.wake_p99_us,
            self.cpus,
            self.load_average,
            self.demand_per_s / 1e6
        )
    }
}

/// The factor of a run and how it was chosen: `auto` calibrates
/// ([`calibrate`]), and sets the process's clock (the controller's waits
/// and timestamps are dilated like the daemons').
pub fn resolve(
    d: flitnet_runtime::clock::Dilation,
    topo: &Topology,
    params: &FabricParams,
    load: f64,
) -> (u32, String) {
    let (n, source) = match d {
        flitnet_runtime::clock::Dilation::Fixed(n) => (n, "fixed".to_string()),
        flitnet_runtime::clock::Dilation::Auto => {
            let c = calibrate(topo, params, load);
            tracing::info!(factor = c.factor, "{}", c.describe());
            (c.factor, c.describe())
        }
    };
    flitnet_runtime::clock::set_dilation(n);
    (n, source)
}

/// Mean number of switches a message crosses between two distinct hosts,
/// on shortest paths (a breadth-first search per source switch).
pub fn mean_switch_hops(topo: &Topology) -> f64 {
    use std::collections::VecDeque;
    let ns = topo.num_switches();
    // Hosts per switch.
    let mut hosts_at = vec![0u64; ns];
    for h in 0..topo.num_hosts() as u32 {
        let node = NodeRef::Host(h);
        for port in 0..topo.radix(node) as u16 {
            if let Some(p) = topo.peer(flitnet_core::topology::PortRef { node, port }) {
                if let NodeRef::Switch(s) = p.node {
                    hosts_at[s as usize] += 1;
                    break;
                }
            }
        }
    }
    let (mut sum, mut pairs) = (0.0f64, 0.0f64);
    for src in 0..ns {
        if hosts_at[src] == 0 {
            continue;
        }
        let mut dist = vec![u32::MAX; ns];
        dist[src] = 0;
        let mut q = VecDeque::from([src]);
        while let Some(s) = q.pop_front() {
            let node = NodeRef::Switch(s as u32);
            for port in 0..topo.radix(node) as u16 {
                let Some(p) = topo.peer(flitnet_core::topology::PortRef { node, port }) else {
                    continue;
                };
                if let NodeRef::Switch(t) = p.node {
                    if dist[t as usize] == u32::MAX {
                        dist[t as usize] = dist[s] + 1;
                        q.push_back(t as usize);
                    }
                }
            }
        }
        for dst in 0..ns {
            if dist[dst] == u32::MAX || hosts_at[dst] == 0 {
                continue;
            }
            let n = if dst == src {
                hosts_at[src] * (hosts_at[src] - 1)
            } else {
                hosts_at[src] * hosts_at[dst]
            } as f64;
            sum += n * (dist[dst] + 1) as f64;
            pairs += n;
        }
    }
    if pairs == 0.0 {
        1.0
    } else {
        sum / pairs
    }
}

/// How late a short sleep wakes up on this machine now: p50 and p99 over
/// [`PROBE_SLEEPS`] sleeps of 50 µs, in wall ns.
pub fn probe_wake_up_ns() -> (u64, u64) {
    use flitnet_runtime::clock::wall_ns;
    let mut late: Vec<u64> = (0..PROBE_SLEEPS)
        .map(|_| {
            let t = wall_ns();
            std::thread::sleep(std::time::Duration::from_nanos(PROBE_SLEEP_NS));
            (wall_ns() - t).saturating_sub(PROBE_SLEEP_NS)
        })
        .collect();
    late.sort_unstable();
    (
        late[late.len() / 2],
        late[(late.len() * 99 / 100).min(late.len() - 1)],
    )
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// `--time-dilation auto`: the smallest factor at which this machine should
/// run `topo` faithfully with `params` at offered `load`: timer wake-ups
/// late by at most half the faithful lateness, and the daemons' CPU demand
/// within [`CPU_TARGET_SHARE`] of the machine's cores.
pub fn calibrate(topo: &Topology, params: &FabricParams, load: f64) -> Calibration {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load_average = load_average();
    let (wake50, wake) = probe_wake_up_ns();
    let (wake50, wake) = (wake50 as f64, wake as f64);
    let mut c = Calibration {
        cpus,
        load_average,
        wake_p50_us: wake50 / 1e3,
        wake_p99_us: wake / 1e3,
        ..Calibration::default()
    };
    let Some(bw) = params.bandwidth_flits_per_s else {
        // Unlimited links: nothing to scale against.
        c.factor = 1;
        return c;
    };
    let flit_ns = 1e9 / bw as f64;
    c.factor_for_wake_up = (wake50 / (LATENESS_P50_FAITHFUL_FLIT_TIMES / 2.0 * flit_ns))
        .max(wake / (LATENESS_P99_FAITHFUL_FLIT_TIMES / 2.0 * flit_ns));
    // Each flit is sent by a host, handled by every switch on its path and
    // received by a host.
    c.demand_per_s =
        topo.num_hosts() as f64 * load.max(0.0) * bw as f64 * (mean_switch_hops(topo) + 2.0);
    c.factor_for_cpu =
        c.demand_per_s / (FLIT_HANDLINGS_PER_CORE_S * cpus as f64 * CPU_TARGET_SHARE);
    c.factor = c
        .factor_for_wake_up
        .max(c.factor_for_cpu)
        .ceil()
        .clamp(1.0, flitnet_runtime::clock::MAX_DILATION as f64) as u32;
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::control::{LatenessSummary, PortBacklog, SchedShare};
    use flitnet_core::topology::generators::hypercube;

    fn host(p99_ns: u64, wait_share: f64, backlog: Option<(u64, u64)>) -> HostDaemonReport {
        host_with(p99_ns / 4, p99_ns, wait_share, backlog)
    }

    fn host_with(
        p50_ns: u64,
        p99_ns: u64,
        wait_share: f64,
        backlog: Option<(u64, u64)>,
    ) -> HostDaemonReport {
        let mut h = HostDaemonReport::default();
        h.endpoint.source.generated_messages = 90;
        h.endpoint.source.not_generated_queue_full = 10;
        h.endpoint.source.messages_sent = 90;
        h.event_loop.timer_lateness = LatenessSummary {
            count: 100,
            mean_ns: p50_ns,
            p50_ns,
            p99_ns,
            max_ns: p99_ns * 2,
        };
        h.event_loop.sched_start = Some(SchedShare::default());
        h.event_loop.sched_now = Some(SchedShare {
            run_ns: 100_000_000,
            wait_ns: (wait_share * 1e9) as u64,
            wall_ns: 1_000_000_000,
        });
        if let Some((backlogged_ns, flits)) = backlog {
            h.event_loop.backlog = vec![PortBacklog {
                port: 0,
                backlogged_ns,
                flits,
            }];
        }
        h
    }

    fn judge_one(h: HostDaemonReport) -> Fidelity {
        let topo = hypercube(1).unwrap();
        let params = FabricParams::default(); // 200,000 flits/s: 5 µs flit time
        let cx = Context {
            topo: &topo,
            params: &params,
            load: 0.5,
            hosts_offering: 2,
            dilation_source: "fixed".into(),
        };
        judge(&cx, &[(NodeRef::Host(0), h)], &[])
    }

    #[test]
    fn a_machine_that_keeps_up_is_faithful() {
        // p50 1 µs, p99 40 µs = 8 flit times; links at 95 % while backlogged.
        let f = judge_one(host_with(1_000, 40_000, 0.01, Some((100_000_000, 19_000))));
        assert_eq!(f.verdict, Some(Verdict::Faithful), "{}", f.line());
        assert_eq!(f.suggested_dilation, None);
        assert!((f.carried_share - 0.9).abs() < 1e-9);
        assert_eq!(f.offered_flits_per_s, 200_000.0);
        assert!(
            f.line().starts_with(
                "faithful: timers p50 late 1 us = 0.2 flit times; timers p99 late 40 us = 8 flit times"
            ),
            "{}",
            f.line()
        );
    }

    #[test]
    fn late_timers_and_slow_links_are_not_faithful_and_ask_for_dilation() {
        // p99 3.2 ms = 640 flit times; links at 18 %.
        let f = judge_one(host(3_200_000, 0.05, Some((100_000_000, 3_600))));
        assert_eq!(f.verdict, Some(Verdict::NotFaithful));
        let line = f.line();
        assert!(
            line.starts_with(
                "not faithful: timers p50 late 800 us = 160.0 flit times; timers p99 late 3.2 ms = 640 flit times"
            ),
            "{line}"
        );
        assert!(line.contains("backlogged links carried 18 %"), "{line}");
        // p50 asks for 160 → 256 (the most suggested).
        assert_eq!(f.suggested_dilation, Some(256));
        assert!(line.ends_with("try --time-dilation 256"), "{line}");
        assert!(!line.contains("CPU"), "a short wait is left out: {line}");
    }

    #[test]
    fn in_between_is_degraded_and_a_long_wait_for_a_cpu_is_named() {
        // p50 2 µs, p99 160 µs = 32 flit times: twice the faithful p99.
        let f = judge_one(host_with(2_000, 160_000, 0.01, None));
        assert_eq!(f.verdict, Some(Verdict::Degraded), "{}", f.line());
        assert_eq!(f.suggested_dilation, Some(2));
        assert!(
            f.line().starts_with("degraded: timers p99 late 160 us"),
            "{}",
            f.line()
        );
        // Waiting alone does not judge a run whose timers are on time...
        let f = judge_one(host_with(1_000, 5_000, 0.5, None));
        assert_eq!(f.verdict, Some(Verdict::Faithful), "{}", f.line());
        // ...but is named beside late ones.
        let f = judge_one(host_with(10_000, 5_000, 0.5, None));
        assert_eq!(f.verdict, Some(Verdict::Degraded), "{}", f.line());
        assert!(
            f.line().contains("h0 waited for a CPU 50 %"),
            "{}",
            f.line()
        );
    }

    #[test]
    fn a_daemon_that_reads_its_input_late_is_not_faithful_though_its_timers_are_on_time() {
        // Timers p50 1 µs, p99 5 µs; waited for a CPU half the run, and
        // read flits 50 µs (10 flit times) late on average, 2 ms at p99.
        let mut h = host_with(1_000, 5_000, 0.5, None);
        h.event_loop.arrival_lateness = LatenessSummary {
            count: 1_000,
            mean_ns: 50_000,
            p50_ns: 0,
            p99_ns: 2_000_000,
            max_ns: 3_000_000,
        };
        let f = judge_one(h);
        assert_eq!(f.verdict, Some(Verdict::NotFaithful), "{}", f.line());
        assert_eq!(f.arrivals.count, 1_000);
        assert_eq!(f.arrivals.mean_flit_times, Some(10.0));
        let line = f.line();
        assert!(
            line.starts_with(
                "not faithful: arrivals mean late 50 us = 10.0 flit times; arrivals p99 late 2.0 ms = 400 flit times (h0)"
            ),
            "{line}"
        );
        assert!(line.contains("h0 waited for a CPU 50 %"), "{line}");
        // 400 flit times at p99 ask for 25 times the factor: 32.
        assert_eq!(f.suggested_dilation, Some(32));
        assert!(f
            .to_string()
            .contains("  arrivals    late mean 50 us = 10.0 flit times  p99 2.0 ms"));
        // A mean of two flit times alone is degraded: every hop adds it.
        let mut h = host_with(1_000, 5_000, 0.5, None);
        h.event_loop.arrival_lateness = LatenessSummary {
            count: 1_000,
            mean_ns: 10_000,
            p99_ns: 40_000,
            max_ns: 90_000,
            ..LatenessSummary::default()
        };
        let f = judge_one(h);
        assert_eq!(f.verdict, Some(Verdict::Degraded), "{}", f.line());
        assert!(
            f.line()
                .starts_with("degraded: arrivals mean late 10 us = 2.0 flit times;"),
            "{}",
            f.line()
        );
        // The same daemon reading in time is faithful, and says so.
        let mut h = host_with(1_000, 5_000, 0.5, None);
        h.event_loop.arrival_lateness = LatenessSummary {
            count: 1_000,
            p99_ns: 4_000,
            max_ns: 9_000,
            ..LatenessSummary::default()
        };
        let f = judge_one(h);
        assert_eq!(f.verdict, Some(Verdict::Faithful), "{}", f.line());
        assert!(
            f.line()
                .contains("arrivals p99 late 4 us = 1 flit times (h0)"),
            "{}",
            f.line()
        );
    }

    #[test]
    fn a_two_level_tree_crosses_2_6_switches_on_average() {
        let t = flitnet_core::topology::generators::kary_ntree(4, 2).unwrap();
        // 3 of 15 destinations share the leaf (1 switch), 12 cross 3.
        assert!((mean_switch_hops(&t) - 2.6).abs() < 1e-9);
    }

    #[test]
    fn a_short_backlog_is_not_judged() {
        // 100 flit times backlogged at 10 %: too little to say anything.
        let f = judge_one(host(5_000, 0.0, Some((500_000, 10))));
        assert_eq!(f.backlog.rate_share, None);
        assert_eq!(f.verdict, Some(Verdict::Faithful));
    }
}
