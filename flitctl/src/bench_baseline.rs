//! The bare forwarder the data path is measured against: a sender, a
//! `recvmmsg`→`sendmmsg` forwarder and a receiver on loopback UDP (or veth
//! pairs), with no flits, no credits and no routing: the ceiling of a
//! socket forwarder on this machine. Two shapes of it:
//! - **threads** of the bench process (the cheapest: no process switch);
//! - **processes** (`flitctl bench baseline-role`), one per role, as the
//!   two `hostd` and the `switchd` of the measured path are: the same path
//!   and the same kind of context switches.

use crate::netns::{interface_mac, interface_name, EthernetNet};
use anyhow::{bail, Context, Result};
use flitnet_core::control::PortPeer;
use flitnet_core::topology::generators;
use flitnet_runtime::clock::now_ns;
use flitnet_runtime::ethernet::EthernetTransport;
use flitnet_runtime::transport::{Transport, UdpTransport, RECV_SLOTS};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the baseline forwarder did.
pub struct BaselineResult {
    pub datagrams_per_s: f64,
    /// CPU time of the forwarder thread per datagram it forwarded.
    pub cpu_ns_per_datagram: f64,
    pub p50_ns: f64,
    pub p99_ns: f64,
}

/// Bytes of a baseline datagram's header: sequence number and send time.
const STAMP: usize = 16;

/// Sender → forwarder → receiver on loopback, one thread each. With `rate`
/// None the sender blasts and the result is the forwarder's ceiling; with a
/// rate it paces and the receiver records one-way latency.
pub fn baseline(datagram: usize, rate: Option<f64>, window: Duration) -> Result<BaselineResult> {
    let datagram = datagram.max(STAMP);
    let (sender, forwarder, receiver) = udp_trio(datagram)?;
    forward(
        Transport::Udp(sender),
        Transport::Udp(forwarder),
        Transport::Udp(receiver),
        datagram,
        rate,
        window,
    )
}

/// The bare forwarder over raw Ethernet: sender, forwarder and receiver
/// each on their veth ends, in a namespace of their own (deleted after).
pub fn baseline_ethernet(datagram: usize, window: Duration) -> Result<BaselineResult> {
    let datagram = datagram.max(STAMP);
    // Host 0 — switch (node 2) — host 1, as a 2-ary 1-tree is cabled.
    let topo = generators::kary_ntree(2, 1)?;
    let name = format!("flitnet-bench-{}", std::process::id());
    let net = EthernetNet::create(&name, &topo, datagram + 2)?;
    let eth = |port: u16, node: usize, peer: (usize, u16)| {
        PortPeer::ethernet(
            port,
            &interface_name(node, port),
            Some(interface_mac(peer.0, peer.1)),
        )
    };
    let ns = Some(net.name());
    let sender = EthernetTransport::open(&[eth(0, 0, (2, 0))], ns, datagram)?;
    let forwarder = EthernetTransport::open(&[eth(0, 2, (0, 0)), eth(1, 2, (1, 0))], ns, datagram)?;
    let receiver = EthernetTransport::open(&[eth(0, 1, (2, 1))], ns, datagram)?;
    forward(
        Transport::Ethernet(sender),
        Transport::Ethernet(forwarder),
        Transport::Ethernet(receiver),
        datagram,
        None,
        window,
    )
}

/// Sender, forwarder (port 0 from the sender, port 1 to the receiver) and
/// receiver on loopback UDP.
fn udp_trio(datagram: usize) -> Result<(UdpTransport, UdpTransport, UdpTransport)> {
    let any: std::net::SocketAddr = "127.0.0.1:0".parse()?;
    let mut receiver = UdpTransport::bind(any, &[])?;
    let mut sender = UdpTransport::bind(any, &[])?;
    let r_addr = receiver.local_addr()?;
    let s_addr = sender.local_addr()?;
    let mut forwarder =
        UdpTransport::bind(any, &[PortPeer::udp(0, s_addr), PortPeer::udp(1, r_addr)])?;
    let f_addr = forwarder.local_addr()?;
    let to_forwarder = PortPeer::udp(0, f_addr);
    receiver.add_peer(&to_forwarder);
    sender.add_peer(&to_forwarder);
    for t in [&mut receiver, &mut sender, &mut forwarder] {
        t.set_max_datagram(datagram);
    }
    Ok((sender, forwarder, receiver))
}

/// Blasts (or paces, with `rate`) datagrams from `sender` through
/// `forwarder` to `receiver` for `window`, one thread each.
fn forward(
    mut sender: Transport,
    mut forwarder: Transport,
    mut receiver: Transport,
    datagram: usize,
    rate: Option<f64>,
    window: Duration,
) -> Result<BaselineResult> {
    let stop = Arc::new(AtomicBool::new(false));
    let fwd_stop = stop.clone();
    let fwd = std::thread::spawn(move || {
        forwarder_loop(&mut forwarder, datagram, || {
            fwd_stop.load(Ordering::Relaxed)
        })
    });
    let rx_stop = stop.clone();
    let capacity = latency_capacity(rate, window);
    let rx = std::thread::spawn(move || {
        receiver_loop(&mut receiver, capacity, || rx_stop.load(Ordering::Relaxed))
    });
    sender_loop(&mut sender, datagram, rate, window);
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let fwd = fwd
        .join()
        .map_err(|_| anyhow::anyhow!("forwarder panicked"))?;
    let rx = rx
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))?;
    Ok(BaselineResult::from_loops(fwd, rx))
}

/// What the forwarder loop measured: its CPU time and datagrams forwarded.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct ForwarderRun {
    cpu_ns: u64,
    forwarded: u64,
}

/// What the receiver loop measured: datagrams, the span from the first to
/// the last, and one-way latencies (ns, up to the capacity it was given).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct ReceiverRun {
    count: u64,
    span_ns: u64,
    latencies_ns: Vec<u64>,
}

/// Latency samples to keep for a run at `rate` (none when blasting).
fn latency_capacity(rate: Option<f64>, window: Duration) -> usize {
    rate.map(|r| (r * window.as_secs_f64() * 1.5) as usize + 1024)
        .unwrap_or(0)
}

/// The bare forwarder: until `stop()`, everything that arrives (port 0)
/// leaves on port 1, in `recvmmsg`/`sendmmsg` batches.
fn forwarder_loop(
    forwarder: &mut Transport,
    datagram: usize,
    stop: impl Fn() -> bool,
) -> ForwarderRun {
    let mut bufs: Vec<Vec<u8>> = (0..RECV_SLOTS)
        .map(|_| Vec::with_capacity(datagram))
        .collect();
    let ports = [1; RECV_SLOTS];
    let cpu0 = thread_cpu_ns();
    let mut forwarded = 0u64;
    while !stop() {
        wait_readable(forwarder.raw_fd(), 20);
        let mut n = 0;
        forwarder.recv_batch(RECV_SLOTS, |_, d| {
            bufs[n].clear();
            bufs[n].extend_from_slice(d);
            n += 1;
        });
        // A full socket buffer drops the rest, as a real forwarder would.
        forwarded += forwarder.send_batch(&ports[..n], &bufs[..n]) as u64;
    }
    ForwarderRun {
        cpu_ns: thread_cpu_ns().saturating_sub(cpu0),
        forwarded,
    }
}

/// Counts and times what reaches `receiver` until `stop()`.
fn receiver_loop(
    receiver: &mut Transport,
    capacity: usize,
    stop: impl Fn() -> bool,
) -> ReceiverRun {
    let mut count = 0u64;
    let mut first = None;
    let mut last = 0;
    let mut lat = Vec::with_capacity(capacity);
    while !stop() {
        wait_readable(receiver.raw_fd(), 20);
        receiver.recv_batch(256, |_, d| {
            let now = now_ns();
            first.get_or_insert(now);
            last = now;
            count += 1;
            if lat.len() < lat.capacity() {
                let sent = u64::from_le_bytes(d[8..16].try_into().unwrap_or_default());
                lat.push(now.saturating_sub(sent));
            }
        });
    }
    ReceiverRun {
        count,
        span_ns: first.map(|f| last.saturating_sub(f)).unwrap_or(0),
        latencies_ns: lat,
    }
}

/// Sends stamped datagrams for `window`: as fast as the socket takes
/// them, or at `rate` per second.
fn sender_loop(sender: &mut Transport, datagram: usize, rate: Option<f64>, window: Duration) {
    let mut payload: Vec<Vec<u8>> = (0..32).map(|_| vec![0u8; datagram]).collect();
    let ports = [0; 32];
    let start = Instant::now();
    let mut seq = 0u64;
    while start.elapsed() < window {
        let n = match rate {
            None => 32,
            Some(r) => {
                let due = (start.elapsed().as_secs_f64() * r) as u64;
                let n = (due.saturating_sub(seq) as usize).min(32);
                if n == 0 {
                    std::thread::sleep(Duration::from_micros(20));
                    continue;
                }
                n
            }
        };
        let now = now_ns();
        for p in payload.iter_mut().take(n) {
            p[..8].copy_from_slice(&seq.to_le_bytes());
            p[8..16].copy_from_slice(&now.to_le_bytes());
            seq += 1;
        }
        if sender.send_batch(&ports[..n], &payload[..n]) < n {
            wait_sendable(sender);
        }
    }
}

impl BaselineResult {
    fn from_loops(fwd: ForwarderRun, mut rx: ReceiverRun) -> Self {
        let lat = &mut rx.latencies_ns;
        lat.sort_unstable();
        let q = |f: f64| {
            if lat.is_empty() {
                0.0
            } else {
                lat[((lat.len() - 1) as f64 * f) as usize] as f64
            }
        };
        BaselineResult {
            datagrams_per_s: rx.count as f64 / (rx.span_ns.max(1) as f64 / 1e9),
            cpu_ns_per_datagram: fwd.cpu_ns as f64 / fwd.forwarded.max(1) as f64,
            p50_ns: q(0.5),
            p99_ns: q(0.99),
        }
    }
}

fn poll_one(fd: i32, events: i16, timeout_ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) };
}

fn wait_readable(fd: i32, timeout_ms: i32) {
    poll_one(fd, libc::POLLIN, timeout_ms)
}

/// Waits (up to 5 ms) until `t` can send again after a full buffer.
fn wait_sendable(t: &mut Transport) {
    match t {
        Transport::Udp(u) => poll_one(u.raw_fd(), libc::POLLOUT, 5),
        // The Ethernet transport's descriptor is an epoll set, readable
        // when its sending socket drains; `recv_batch` takes note of that.
        Transport::Ethernet(e) => {
            poll_one(e.raw_fd(), libc::POLLIN, 5);
            e.recv_batch(0, |_, _| {});
        }
        // A ring never makes its sender wait: a full one loses the datagram.
        Transport::Shm(_) => {}
    }
}

/// CPU time of the calling thread, in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Loopback addresses of a sender, forwarder and receiver run as
/// processes: 127.93.x.y, from the bench's pid so that two benches do not
/// collide, on one port.
#[derive(Clone, Copy, Debug)]
pub struct Trio {
    pub sender: std::net::SocketAddr,
    pub forwarder: std::net::SocketAddr,
    pub receiver: std::net::SocketAddr,
}

/// Port the process baseline's sockets bind.
const TRIO_PORT: u16 = 7093;

impl Trio {
    pub fn for_process(pid: u32) -> Self {
        let x = (pid >> 6) as u8;
        let y = (pid as u8 & 0x3f) << 2;
        let at = |i: u8| {
            std::net::SocketAddr::from((std::net::Ipv4Addr::new(127, 93, x, y + i), TRIO_PORT))
        };
        Trio {
            sender: at(1),
            forwarder: at(2),
            receiver: at(3),
        }
    }
}

/// Which part of the process baseline this process plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Sender,
    Forwarder,
    Receiver,
}

/// `flitctl bench baseline-role`: one role of the process baseline (the
/// bench starts three of them; not meant to be run by hand).
#[derive(clap::Args, Debug, Clone)]
pub struct RoleArgs {
    #[arg(long, value_enum)]
    pub role: Role,
    /// Address this role's socket binds.
    #[arg(long)]
    pub bind: std::net::SocketAddr,
    /// Sender, receiver: the forwarder. Forwarder: the sender (port 0).
    #[arg(long)]
    pub peer: Option<std::net::SocketAddr>,
    /// Forwarder: the receiver (port 1).
    #[arg(long)]
    pub to: Option<std::net::SocketAddr>,
    /// Bytes per datagram.
    #[arg(long)]
    pub datagram: usize,
    /// Sender: datagrams per second (absent: as fast as it can).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Sender: how long to send. Receiver: sizes the latency record.
    #[arg(long, value_parser = crate::parse::parse_duration)]
    pub window: Duration,
}

/// Runs one role. The forwarder and the receiver print `ready` once bound,
/// run until their standard input closes, then print what they measured
/// as one JSON line; the sender sends for its window and exits.
pub fn run_role(args: &RoleArgs) -> Result<()> {
    use std::io::Write;
    let datagram = args.datagram.max(STAMP);
    let peer = |p: std::net::SocketAddr, port: u16| PortPeer::udp(port, p);
    let peers: Vec<PortPeer> = match args.role {
        Role::Sender | Role::Receiver => args.peer.map(|p| peer(p, 0)).into_iter().collect(),
        Role::Forwarder => match (args.peer, args.to) {
            (Some(from), Some(to)) => vec![peer(from, 0), peer(to, 1)],
            _ => bail!("the forwarder needs --peer and --to"),
        },
    };
    let mut udp =
        UdpTransport::bind(args.bind, &peers).with_context(|| format!("binding {}", args.bind))?;
    udp.set_max_datagram(datagram);
    let mut t = Transport::Udp(udp);
    let stop = Arc::new(AtomicBool::new(false));
    if args.role != Role::Sender {
        // The bench closes our standard input to stop us.
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            stop.store(true, Ordering::Relaxed);
        });
        println!("ready");
        std::io::stdout().flush()?;
    }
    let out = match args.role {
        Role::Sender => {
            sender_loop(&mut t, datagram, args.rate, args.window);
            return Ok(());
        }
        Role::Forwarder => serde_json::to_string(&forwarder_loop(&mut t, datagram, || {
            stop.load(Ordering::Relaxed)
        }))?,
        Role::Receiver => {
            let capacity = latency_capacity(Some(args.rate.unwrap_or(0.0)), args.window);
            serde_json::to_string(&receiver_loop(&mut t, capacity, || {
                stop.load(Ordering::Relaxed)
            }))?
        }
    };
    println!("{out}");
    Ok(())
}

/// The baseline with one process per role, as the measured path has
/// (hostd → switchd → hostd): `flitctl` (at `exe`) started three times.
pub fn baseline_processes(
    exe: &std::path::Path,
    datagram: usize,
    rate: Option<f64>,
    window: Duration,
) -> Result<BaselineResult> {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let trio = Trio::for_process(std::process::id());
    let rate_arg = rate.map(|r| r.to_string());
    let window_arg = format!("{}ms", window.as_millis());
    let spawn = |role: &str,
                 bind: std::net::SocketAddr,
                 peer: std::net::SocketAddr,
                 to: Option<std::net::SocketAddr>| {
        let mut c = Command::new(exe);
        c.args(["bench", "baseline-role", "--role", role])
            .arg("--bind")
            .arg(bind.to_string())
            .arg("--peer")
            .arg(peer.to_string())
            .arg("--datagram")
            .arg(datagram.to_string())
            .arg("--window")
            .arg(&window_arg)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(to) = to {
            c.arg("--to").arg(to.to_string());
        }
        if let Some(r) = &rate_arg {
            c.arg("--rate").arg(r);
        }
        c.spawn()
            .with_context(|| format!("starting the baseline {role}"))
    };
    let mut receiver = spawn("receiver", trio.receiver, trio.forwarder, None)?;
    let mut forwarder = spawn(
        "forwarder",
        trio.forwarder,
        trio.sender,
        Some(trio.receiver),
    )?;
    let mut readers = Vec::new();
    for (name, child) in [("receiver", &mut receiver), ("forwarder", &mut forwarder)] {
        let mut lines = std::io::BufReader::new(child.stdout.take().context("no stdout")?).lines();
        match lines.next() {
            Some(Ok(l)) if l == "ready" => readers.push(lines),
            other => {
                let _ = child.kill();
                bail!("baseline {name} did not start: {other:?}");
            }
        }
    }
    let sent = spawn("sender", trio.sender, trio.forwarder, None)?.wait();
    std::thread::sleep(Duration::from_millis(100));
    // Closing their standard input stops them.
    drop(forwarder.stdin.take());
    drop(receiver.stdin.take());
    let mut results = readers.into_iter().map(|mut lines| {
        lines
            .next()
            .context("no result line")?
            .context("reading the result")
    });
    let rx: ReceiverRun = serde_json::from_str(&results.next().context("receiver")??)?;
    let fwd: ForwarderRun = serde_json::from_str(&results.next().context("forwarder")??)?;
    let _ = receiver.wait();
    let _ = forwarder.wait();
    anyhow::ensure!(sent?.success(), "the baseline sender failed");
    Ok(BaselineResult::from_loops(fwd, rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_forwards_and_times_datagrams() {
        let blast = baseline(200, None, Duration::from_millis(200)).unwrap();
        assert!(blast.datagrams_per_s > 100.0, "{}", blast.datagrams_per_s);
        assert!(blast.cpu_ns_per_datagram > 0.0);
        let paced = baseline(200, Some(2_000.0), Duration::from_millis(300)).unwrap();
        assert!(paced.datagrams_per_s > 200.0, "{}", paced.datagrams_per_s);
        assert!(paced.p50_ns > 0.0 && paced.p99_ns >= paced.p50_ns);
    }

    #[test]
    fn the_ethernet_baseline_forwards_over_veth_pairs() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skipped: the ethernet transport needs root");
            return;
        }
        let blast = baseline_ethernet(200, Duration::from_millis(200)).unwrap();
        assert!(blast.datagrams_per_s > 100.0, "{}", blast.datagrams_per_s);
        let ns = format!("flitnet-bench-{}", std::process::id());
        assert!(!EthernetNet::exists(&ns), "namespace {ns} left behind");
    }

    #[test]
    fn addresses_of_a_process_trio_are_distinct_loopback_ones() {
        let t = Trio::for_process(4242);
        let all = [t.sender, t.forwarder, t.receiver];
        for a in all {
            assert!(a.ip().is_loopback(), "{a}");
        }
        assert!(all[0] != all[1] && all[1] != all[2] && all[0] != all[2]);
        assert_ne!(Trio::for_process(4243).sender, t.sender);
    }

    #[test]
    fn a_role_refuses_what_it_cannot_do() {
        let bad = RoleArgs {
            role: Role::Forwarder,
            bind: "127.0.0.1:0".parse().unwrap(),
            peer: None,
            to: None,
            datagram: 200,
            rate: None,
            window: Duration::from_millis(10),
        };
        let err = run_role(&bad).unwrap_err().to_string();
        assert!(err.contains("forwarder needs --peer and --to"), "{err}");
    }
}
