//! The single-threaded event loop every daemon runs.

use crate::clock::now_ns;
use crate::control::ControlInbox;
use crate::transport::{Transport, TransportCounters, SEND_BATCH};
use anyhow::{Context, Result};
use bytes::Bytes;
use flitnet_core::control::{LoopReport, Reply, Request, Response, TimerLateness};
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
}

/// How the daemons drive their links: the processes share the machine's
/// monotonic clock (docs/wire.md, "Propagation delay"), and their loop
/// batches flits as [`PACING_QUANTUM_NS`] says.
pub const LINK_DRIVER: flitnet_core::control::LinkDriver = flitnet_core::control::LinkDriver {
    count_transit: true,
    pacing_quantum_ns: PACING_QUANTUM_NS,
};

/// How often counters are copied into the metrics registry.
const METRICS_PERIOD_NS: u64 = 250_000_000;
/// Datagrams read per wake-up before timers and transmissions get a turn.
const RECV_BATCH: usize = 256;
/// A deadline at most this far away is waited for by spinning on the
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

/// How late timers fire: the emulation's time dilation. A log2 histogram,
/// so recording is a few instructions and never allocates.
#[derive(Debug, Clone)]
pub struct Lateness {
    /// `buckets[i]` counts lateness in `[2^(i-1), 2^i)` ns (bucket 0: 0 ns).
    buckets: [u64; 64],
    count: u64,
    sum_ns: u64,
    max_ns: u64,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness {
            buckets: [0; 64],
            count: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

impl Lateness {
    pub fn record(&mut self, ns: u64) {
        let i = (64 - ns.leading_zeros()) as usize;
        self.buckets[i.min(63)] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Upper bound of the bucket holding quantile `q` (0..=1), in ns.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = ((self.count as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= target {
                return if i == 0 {
                    0
                } else {
                    (1u64 << i).min(self.max_ns)
                };
            }
        }
        self.max_ns
    }

    pub fn summary(&self) -> TimerLateness {
        TimerLateness {
            timers: self.count,
            mean_ns: self.sum_ns.checked_div(self.count).unwrap_or(0),
            p50_ns: self.quantile_ns(0.5),
            p99_ns: self.quantile_ns(0.99),
            max_ns: self.max_ns,
        }
    }
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
    let mut lateness = Lateness::default();
    let mut next_metrics = 0u64;
    let mut scratch = [0u8; 64];
    loop {
        let now = now_ns();
        // Transmit everything that is ready.
        tx.pump(node, now, transport);
        if now >= next_metrics {
            node.publish_metrics(now);
            next_metrics = now + METRICS_PERIOD_NS;
        }
        let timer = node.poll_timeout();
        let deadline = timer.unwrap_or(u64::MAX).min(next_metrics);
        let mut wait_ns = deadline.saturating_sub(now_ns());
        if wait_ns > 0 && wait_ns <= SPIN_NS && !tx.pending() {
            while now_ns() < deadline {
                std::hint::spin_loop();
            }
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
        ];
        let ts = libc::timespec {
            tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: fds is a valid array of pollfd for its length; ts outlives the call.
        let rc = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err).context("ppoll");
            }
        }
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
                    annotate_report(&mut response, &lateness, transport.counters());
                }
                let _ = pending.reply.send(response);
                if shutdown {
                    tracing::info!(?peer, "shutdown requested over the control endpoint");
                    return Ok(());
                }
            }
        }
        if fds[0].revents & libc::POLLIN != 0 {
            transport.recv_batch(RECV_BATCH, |port, data| {
                node.handle_datagram(now, port, Bytes::copy_from_slice(data))
            });
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

/// Adds the loop's own figures to a `Report` answer: how late timers fired
/// and what the transport did (datagrams per system call).
fn annotate_report(response: &mut Response, lateness: &Lateness, counters: &TransportCounters) {
    let event_loop = match response {
        Response::Ok {
            body: Reply::SwitchReport(r),
        } => &mut r.event_loop,
        Response::Ok {
            body: Reply::HostReport(r),
        } => &mut r.event_loop,
        _ => return,
    };
    *event_loop = LoopReport {
        timer_lateness: lateness.summary(),
        transport: counters.clone(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_quantiles_bound_the_recorded_values() {
        let mut l = Lateness::default();
        assert_eq!(l.quantile_ns(0.5), 0);
        for ns in [0, 1_000, 1_500, 2_000, 3_000, 1_000_000] {
            l.record(ns);
        }
        let p50 = l.quantile_ns(0.5);
        assert!((1_500..=2_048).contains(&p50), "{p50}");
        assert_eq!(l.quantile_ns(1.0), 1_000_000);
        assert_eq!(l.summary().timers, 6);
        assert_eq!(l.summary().max_ns, 1_000_000);
    }
}
