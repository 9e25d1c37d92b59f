//! The single-threaded event loop every daemon runs.

use crate::clock::{dilation, now_ns, to_wall_ns, wall_ns};
use crate::control::ControlInbox;
use crate::transport::{Transport, SEND_BATCH};
use anyhow::{Context, Result};
use bytes::Bytes;
use flitnet_core::control::{LoopReport, PortBacklog, Reply, Request, Response, SchedShare};
use flitnet_core::lateness::LatenessHistogram;
use flitnet_core::link::Link;
pub use flitnet_core::node::Node;
use flitnet_core::topology::PortNo;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// A daemon's node: the sans-IO driving API shared with the simulator
/// ([`Node`]) plus what only a daemon does.
pub trait Daemon: Node {
    /// Carries out a control request (the token was already checked).
    fn control(&mut self, now: u64, request: Request) -> Response;
    /// Called after every round of IO: drain events into logs.
    fn after_io(&mut self, _now: u64) {}
    /// Called a few times per second: copy counters into the metrics facade.
    fn publish_metrics(&mut self, _now: u64) {}
    /// The label naming this daemon in metrics: (`switch` or `host`, name).
    fn metric_label(&self) -> (&'static str, String);
    /// Calls `f` with every cabled port's link (for the backlog meter).
    fn for_each_link(&self, f: &mut dyn FnMut(PortNo, &Link));
    /// A further descriptor to watch for reading now (a host's TUN device,
    /// docs/ip.md); None when there is none, or the node cannot take
    /// what it would read.
    fn extra_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// [`Daemon::extra_fd`] is readable.
    fn handle_extra(&mut self, _now: u64) {}
}

/// How the daemons drive their links: the processes share the machine's
/// monotonic clock (docs/wire.md, "Propagation delay"), and their loop
/// batches flits as [`PACING_QUANTUM_NS`] says.
pub const LINK_DRIVER: flitnet_core::control::LinkDriver = flitnet_core::control::LinkDriver {
    count_transit: true,
    pacing_quantum_ns: PACING_QUANTUM_NS,
};

/// How often (wall time) counters are copied into the metrics registry.
const METRICS_PERIOD_NS: u64 = 250_000_000;
/// Datagrams read per wake-up before timers and transmissions get a turn.
const RECV_BATCH: usize = 256;
/// A deadline at most this far away (wall time) is waited for by spinning on the
/// clock instead of sleeping in `ppoll`: a sleep costs two context switches
/// and on a busy machine wakes 10-30 us late, far longer than the wait
/// (emulated propagation delays and credit coalescing of 1-2 us).
const SPIN_NS: u64 = 2_000;

/// Pacing quantum the daemons give their links
/// (`LinkConfig::pacing_quantum_ns`): about the loop's wake-up lateness on a
/// busy machine (docs/performance.md), so a paced link writes what its
/// wire starts within a quantum into one datagram instead of one datagram
/// per flit; the receiver still releases each flit at its emulated time
/// (docs/wire.md, "Serialisation").
pub const PACING_QUANTUM_NS: u64 = 20_000;

/// How fast each link carried flits while it had flits queued (credits
/// are taken when a flit is queued, so a queued flit waits only for the
/// link's pacing and for the event loop): the achieved rate of a
/// backlogged link, against its configured bandwidth, says whether the
/// daemon kept up (docs/fidelity.md). Observed after every transmit round:
/// between two observations a link's queue only grows, so a link queued at
/// one observation was backlogged until the next.
#[derive(Default)]
pub struct BacklogMeter {
    /// Per port: (backlogged at the last observation, transmitted flits then).
    last: Vec<Option<(bool, u64)>>,
    last_ns: u64,
    /// Per port: (backlogged ns, flits sent while backlogged).
    totals: Vec<(u64, u64)>,
}

impl BacklogMeter {
    /// Observes every link of `node` at emulated time `now`.
    pub fn observe<N: Daemon + ?Sized>(&mut self, node: &N, now: u64) {
        let dt = now.saturating_sub(self.last_ns);
        self.last_ns = now;
        let (last, totals) = (&mut self.last, &mut self.totals);
        node.for_each_link(&mut |port, link| {
            let i = port as usize;
            if last.len() <= i {
                last.resize(i + 1, None);
                totals.resize(i + 1, (0, 0));
            }
            let tx: u64 = link.stats().tx_flits.iter().sum();
            let backlogged = link.is_up() && link.queued() > 0;
            if let Some((was, tx_then)) = last[i] {
                if was {
                    totals[i].0 += dt;
                    totals[i].1 += tx.saturating_sub(tx_then);
                }
            }
            last[i] = Some((backlogged, tx));
        });
    }

    pub fn report(&self) -> Vec<PortBacklog> {
        self.totals
            .iter()
            .enumerate()
            .filter(|(_, t)| t.0 > 0)
            .map(|(port, &(backlogged_ns, flits))| PortBacklog {
                port: port as PortNo,
                backlogged_ns,
                flits,
            })
            .collect()
    }
}

/// This thread's CPU time and run-queue wait (`/proc/thread-self/schedstat`,
/// fields 1 and 2, ns), with the wall instant they were read: the share of
/// a run the daemon was runnable but not running is the wait over the wall
/// time between two readings. None where Linux does not tell (no schedstats).
pub fn read_schedstat() -> Option<SchedShare> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    let run_ns = fields.next()??;
    let wait_ns = fields.next()??;
    Some(SchedShare {
        run_ns,
        wait_ns,
        wall_ns: wall_ns(),
    })
}

/// Datagrams the node produced, waiting for the socket. The buffers are
/// allocated once and reused, so the hot path does not allocate.
struct TxBatch {
    bufs: Vec<Vec<u8>>,
    ports: Vec<PortNo>,
    /// Filled entries are `head..len`; `..head` were sent.
    head: usize,
    len: usize,
}

impl TxBatch {
    fn new() -> Self {
        TxBatch {
            bufs: (0..SEND_BATCH).map(|_| Vec::new()).collect(),
            ports: vec![0; SEND_BATCH],
            head: 0,
            len: 0,
        }
    }

    fn pending(&self) -> bool {
        self.head < self.len
    }

    /// Sends what is queued; true when everything went.
    fn flush(&mut self, transport: &mut Transport) -> bool {
        if self.pending() {
            self.head += transport.send_batch(
                &self.ports[self.head..self.len],
                &self.bufs[self.head..self.len],
            );
        }
        if self.pending() {
            return false;
        }
        self.head = 0;
        self.len = 0;
        true
    }

    /// Collects what the node has ready and sends it, batch by batch,
    /// until the node has nothing more or the socket is full.
    fn pump<N: Daemon>(&mut self, node: &mut N, now: u64, transport: &mut Transport) {
        loop {
            if !self.flush(transport) {
                return;
            }
            while self.len < SEND_BATCH {
                let buf = &mut self.bufs[self.len];
                buf.clear();
                match node.poll_transmit(now, buf) {
                    Some(port) => {
                        self.ports[self.len] = port;
                        self.len += 1;
                    }
                    None => break,
                }
            }
            let full = self.len == SEND_BATCH;
            if !self.flush(transport) || !full {
                return;
            }
        }
    }
}

/// Runs `node` until SIGTERM/SIGINT or a `Shutdown` request.
pub fn run<N: Daemon>(node: &mut N, transport: &mut Transport, inbox: ControlInbox) -> Result<()> {
    let (sig_rx, sig_tx) = UnixStream::pair()?;
    sig_rx.set_nonblocking(true)?;
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::low_level::pipe::register(sig, sig_tx.try_clone()?)
            .context("installing signal handler")?;
    }
    // Linux lets a sleeping thread's timers fire up to 50 us late by
    // default (timer slack); emulated flit times are microseconds, so ask
    // for none. Best effort: an old kernel just keeps the default.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let mut wake = inbox.wake;
    let mut tx = TxBatch::new();
    let mut lateness = LatenessHistogram::default();
    let mut backlog = BacklogMeter::default();
    let sched_start = read_schedstat();
    let mut next_metrics = 0u64;
    let mut scratch = [0u8; 64];
    let mut busy_rounds = 0u64;
    loop {
        let now = now_ns();
        // Transmit everything that is ready.
        tx.pump(node, now, transport);
        backlog.observe(node, now);
        let wall = wall_ns();
        if wall >= next_metrics {
            node.publish_metrics(now);
            publish_loop_metrics(&*node, &lateness, sched_start.as_ref());
            next_metrics = wall + METRICS_PERIOD_NS;
        }
        // The node's deadline is emulated time; the loop waits in wall time.
        let timer = node.poll_timeout();
        let deadline = timer.map_or(u64::MAX, to_wall_ns).min(next_metrics);
        let mut wait_ns = deadline.saturating_sub(wall_ns());
        if wait_ns > 0 && wait_ns <= SPIN_NS && !tx.pending() {
            while wall_ns() < deadline {
                std::hint::spin_loop();
            }
            wait_ns = 0;
        }
        // Shared-memory rings: the neighbours ring the doorbell only once
        // asked to, just before the sleep, and only if the loop would not
        // wake by itself within the input slack (clock::input_slack_ns);
        // input that came meanwhile cancels the sleep.
        if wait_ns > 0 && transport.prepare_sleep(deadline) {
            wait_ns = 0;
        }
        let mut fds = [
            libc::pollfd {
                fd: transport.raw_fd(),
                events: libc::POLLIN | if tx.pending() { libc::POLLOUT } else { 0 },
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sig_rx.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            // A negative descriptor is ignored by ppoll.
            libc::pollfd {
                fd: node.extra_fd().unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // A busy shm daemon looks at its descriptors on every 64th round
        // only: its input is in the rings, and a poll that cannot sleep is
        // a system call for nothing.
        busy_rounds = if wait_ns == 0 { busy_rounds + 1 } else { 0 };
        let skip_poll = transport.polls_always() && busy_rounds % 64 != 0;
        let ts = libc::timespec {
            tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
        };
        let rc = if skip_poll {
            0
        } else {
            // SAFETY: fds is a valid array of pollfd for its length; ts outlives the call.
            unsafe {
                libc::ppoll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    &ts,
                    std::ptr::null(),
                )
            }
        };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err).context("ppoll");
            }
        }
        transport.woke(fds[0].revents & libc::POLLIN != 0);
        let now = now_ns();
        if fds[2].revents != 0 {
            tracing::info!("signal received, shutting down");
            return Ok(());
        }
        if fds[1].revents != 0 {
            while let Ok(n) = wake.read(&mut scratch) {
                if n == 0 {
                    break;
                }
            }
            while let Ok(pending) = inbox.requests.try_recv() {
                let shutdown = matches!(pending.request, Request::Shutdown);
                let peer = pending.peer;
                let report = matches!(pending.request, Request::Report);
                let mut response = node.control(now, pending.request);
                if report {
                    let figures = LoopReport {
                        timer_lateness: lateness.summary(),
                        arrival_lateness: arrival_lateness(&*node).summary(),
                        transport: transport.counters().clone(),
                        dilation: dilation(),
                        sched_start: sched_start.clone(),
                        sched_now: read_schedstat(),
                        backlog: backlog.report(),
                    };
                    annotate_report(&mut response, figures);
                }
                let _ = pending.reply.send(response);
                if shutdown {
                    tracing::info!(?peer, "shutdown requested over the control endpoint");
                    return Ok(());
                }
            }
        }
        if fds[0].revents & libc::POLLIN != 0 || transport.polls_always() {
            transport.recv_batch(RECV_BATCH, |port, data| {
                node.handle_datagram(now, port, Bytes::copy_from_slice(data))
            });
        }
        if fds[3].revents != 0 {
            node.handle_extra(now);
        }
        if let Some(due) = node.poll_timeout().filter(|&t| t <= now) {
            // Lateness of the timer the loop slept for (a deadline that
            // moved earlier while data arrived is not the loop's delay).
            if timer == Some(due) {
                lateness.record(now - due);
            }
            node.handle_timeout(now);
        }
        node.after_io(now);
    }
}

/// How late `node`'s links read flits against their release times, all
/// links together.
fn arrival_lateness<N: Daemon + ?Sized>(node: &N) -> LatenessHistogram {
    let mut all = LatenessHistogram::default();
    node.for_each_link(&mut |_, link| all.merge(link.arrival_lateness()));
    all
}

/// The loop's fidelity figures as gauges (docs/metrics.md): timer and
/// arrival lateness quantiles (emulated seconds), the share of wall time the daemon waited
/// to run, the dilation factor.
fn publish_loop_metrics<N: Daemon + ?Sized>(
    node: &N,
    lateness: &LatenessHistogram,
    sched_start: Option<&SchedShare>,
) {
    let (kind, name) = node.metric_label();
    let arrivals = arrival_lateness(node);
    for (family, histogram) in [
        ("flitnet_timer_lateness_seconds", lateness),
        ("flitnet_arrival_lateness_seconds", &arrivals),
    ] {
        // `stat`, not `quantile`: that label belongs to summaries.
        for (stat, ns) in [
            ("p50", histogram.quantile_ns(0.5)),
            ("p99", histogram.quantile_ns(0.99)),
            ("max", histogram.max_ns()),
        ] {
            metrics::gauge!(family, kind => name.clone(), "stat" => stat).set(ns as f64 / 1e9);
        }
    }
    if let (Some(a), Some(b)) = (sched_start, read_schedstat()) {
        if let Some(share) = a.wait_share_until(&b) {
            metrics::gauge!("flitnet_sched_wait_ratio", kind => name.clone()).set(share);
        }
    }
    metrics::gauge!("flitnet_time_dilation", kind => name).set(dilation() as f64);
}

/// Registers the help text of the loop's fidelity gauges (Prometheus'
/// exposition format wants one per family).
pub fn describe_fidelity_metrics() {
    metrics::describe_gauge!(
        "flitnet_timer_lateness_seconds",
        "How late the event loop fired timers since it started, emulated seconds (stat p50, p99, max)."
    );
    metrics::describe_gauge!(
        "flitnet_arrival_lateness_seconds",
        "How late the links read flits against their emulated release time since the loop started, emulated seconds (stat p50, p99, max)."
    );
    metrics::describe_gauge!(
        "flitnet_sched_wait_ratio",
        "Share of wall time since the loop started that its thread waited for a CPU."
    );
    metrics::describe_gauge!(
        "flitnet_time_dilation",
        "The run's time dilation factor: emulated time is wall time divided by it."
    );
}

/// Adds the loop's own figures to a `Report` answer: how late timers fired,
/// what the transport did (datagrams per system call), how long the daemon
/// waited to run, how fast backlogged links went.
fn annotate_report(response: &mut Response, figures: LoopReport) {
    let event_loop = match response {
        Response::Ok {
            body: Reply::SwitchReport(r),
        } => &mut r.event_loop,
        Response::Ok {
            body: Reply::HostReport(r),
        } => &mut r.event_loop,
        _ => return,
    };
    *event_loop = figures;
}
