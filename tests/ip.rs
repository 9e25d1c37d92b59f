//! Real IP traffic over the fabric (docs/ip.md): `flitctl up --tun` gives
//! every host a TUN device in a network namespace of its own, `flitctl
//! exec` runs ping and iperf3 there, and their packets cross the emulated
//! fabric as messages, faults included.
//!
//! Needs root (namespaces, TUN devices), `ip`, `ping` and `iperf3`: CI runs
//! as root and installs them (`.ci/run`); elsewhere the tests say they are
//! skipped, and under CI=true a missing one fails. Every test checks that
//! flitctl deleted its namespaces, and deletes any it left on the way out.

use flitnet::{bin, topology};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn tool(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Root and the tools, or a skip (a failure under CI).
fn ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let missing: Vec<&str> = ["ip", "ping", "iperf3"]
        .into_iter()
        .filter(|t| !tool(t))
        .collect();
    if root && missing.is_empty() {
        return true;
    }
    let why = if root {
        format!("missing {}", missing.join(", "))
    } else {
        "not root".to_string()
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "the IP tests need root, ip, ping and iperf3 (CI installs them): {why}"
    );
    eprintln!("skipped: {why}");
    false
}

/// A running `flitctl up --tun` (in the background).
struct TunFabric {
    child: Option<Child>,
    run_dir: PathBuf,
    stderr: Arc<Mutex<String>>,
    namespaces: Vec<String>,
}

impl TunFabric {
    /// Brings `topo` up with IP interfaces and no generated traffic for
    /// `duration`, with `extra` arguments; returns once routes are in.
    fn up(tag: &str, topo: &str, duration: &str, extra: &[&str]) -> TunFabric {
        let run_dir =
            std::env::temp_dir().join(format!("flitnet-test-ip-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run_dir);
        let mut child = Command::new(bin("flitctl"))
            .args(["up", topology(topo).to_str().unwrap(), "--tun"])
            .args(["--pattern", "none", "--duration", duration])
            .args(["--time-dilation", "1", "--progress", "never", "--json"])
            .args(["--run-dir", run_dir.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting flitctl");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut f = TunFabric {
            child: Some(child),
            run_dir,
            stderr,
            namespaces: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !f.stderr.lock().unwrap().contains("fabric up:") {
            if let Some(status) = f.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "flitctl up --tun exited ({status}):\n{}",
                    f.stderr.lock().unwrap()
                );
            }
            assert!(Instant::now() < deadline, "the fabric did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        let state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(f.run_dir.join("state.json")).unwrap()).unwrap();
        f.namespaces = state["tun"]["hosts"]
            .as_array()
            .expect("state.json lists the hosts' interfaces")
            .iter()
            .map(|h| h["netns"].as_str().unwrap().to_string())
            .collect();
        f
    }

    /// Host `h`'s address.
    fn address(&self, h: usize) -> std::net::Ipv4Addr {
        let state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.run_dir.join("state.json")).unwrap())
                .unwrap();
        state["tun"]["hosts"][h]["address"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    fn exec_command(&self, host: &str, cmd: &[&str]) -> Command {
        let mut c = Command::new(bin("flitctl"));
        c.args([
            "exec",
            "--run-dir",
            self.run_dir.to_str().unwrap(),
            host,
            "--",
        ])
        .args(cmd);
        c
    }

    /// Runs `cmd` in `host`'s namespace to the end.
    fn exec(&self, host: &str, cmd: &[&str]) -> Output {
        self.exec_command(host, cmd).output().expect("flitctl exec")
    }

    /// Starts `cmd` in `host`'s namespace.
    fn spawn(&self, host: &str, cmd: &[&str]) -> Child {
        self.exec_command(host, cmd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("flitctl exec")
    }

    /// Waits for the run to end; its JSON report. Checks that nothing was
    /// left behind.
    fn finish(mut self) -> serde_json::Value {
        let mut child = self.child.take().unwrap();
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let status = child.wait().unwrap();
        let stderr = self.stderr.lock().unwrap().clone();
        assert!(status.success(), "flitctl up --tun: {status}:\n{stderr}");
        for ns in &self.namespaces {
            assert!(
                !Path::new("/var/run/netns").join(ns).exists(),
                "namespace {ns} left behind"
            );
            assert!(
                !Path::new("/etc/netns").join(ns).exists(),
                "/etc/netns/{ns} left behind"
            );
        }
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{stderr}"))
    }
}

impl Drop for TunFabric {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            let _ = Command::new(bin("flitctl"))
                .args(["down", self.run_dir.to_str().unwrap()])
                .output();
        }
        for ns in &self.namespaces {
            if Path::new("/var/run/netns").join(ns).exists() {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_f64().map(|f| f as u64))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn every_pair_of_a_4ary_2tree_answers_ping() {
    if !ready() {
        return;
    }
    let f = TunFabric::up("ping", "kary-4-2.yaml", "6s", &[]);
    let hosts: Vec<String> = (0..16).map(|h| format!("h{h:02}")).collect();
    let mut answered = 0;
    for src in &hosts {
        // Every other host once, by name (the namespace's hosts file).
        let script: String = hosts
            .iter()
            .filter(|d| *d != src)
            .map(|d| format!("ping -n -q -c1 -W2 {d} >/dev/null && echo ok {d} || echo lost {d};"))
            .collect();
        let out = f.exec(src, &["sh", "-c", &script]);
        let text = String::from_utf8_lossy(&out.stdout);
        let lost: Vec<&str> = text.lines().filter(|l| l.starts_with("lost")).collect();
        assert!(
            lost.is_empty(),
            "{src}: {lost:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        answered += text.lines().filter(|l| l.starts_with("ok")).count();
    }
    assert_eq!(answered, 16 * 15);
    let r = f.finish();
    // The pings were messages of the fabric: sent, and all delivered.
    let t = &r["totals"];
    assert!(n(&t["messages_delivered"]) >= 2 * 240, "{t:#}");
}

/// Runs `f` on a thread inside network namespace `ns` (sockets it makes
/// stay in that namespace).
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = Path::new("/var/run/netns").join(ns);
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: setns with an open namespace descriptor; this thread only.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {}", path.display());
        f()
    })
    .join()
    .unwrap()
}

/// What one TCP transfer did.
struct Transfer {
    received: u64,
    intact: bool,
    retransmits: u32,
    elapsed: Duration,
}

fn pattern_byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Sends `bytes` bytes over one TCP connection from h00 to h15 (opposite
/// sides of the 4-ary 2-tree: through a root switch); the receiver counts
/// them to the end of the stream and checks every byte, and the sender's
/// kernel says how many segments it retransmitted (TCP_INFO).
fn tcp_transfer(f: &TunFabric, bytes: u64) -> Transfer {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let listener = in_netns(&f.namespaces[15], || {
        std::net::TcpListener::bind("0.0.0.0:5301").unwrap()
    });
    let receiver = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        // A stalled transfer fails the test instead of hanging it.
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let (mut received, mut intact) = (0u64, true);
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let k = match s.read(&mut buf) {
                Ok(k) => k,
                Err(e) => panic!("receiving, {received} bytes in: {e}"),
            };
            if k == 0 {
                break;
            }
            for (j, b) in buf[..k].iter().enumerate() {
                intact &= *b == pattern_byte(received + j as u64);
            }
            received += k as u64;
        }
        (received, intact)
    });
    let dst = f.address(15);
    let started = Instant::now();
    let mut sender = in_netns(&f.namespaces[0], move || {
        std::net::TcpStream::connect((dst, 5301)).unwrap()
    });
    sender
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let chunk: Vec<u8> = (0..bytes).map(pattern_byte).collect();
    sender.write_all(&chunk).unwrap();
    sender.shutdown(std::net::Shutdown::Write).unwrap();
    let (received, intact) = receiver.join().unwrap();
    let elapsed = started.elapsed();
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`.
    let rc = unsafe {
        libc::getsockopt(
            sender.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO");
    Transfer {
        received,
        intact,
        retransmits: info.tcpi_total_retrans,
        elapsed,
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn a_fixed_size_tcp_transfer_and_iperf3_cross_the_tree() {
    if !ready() {
        return;
    }
    let f = TunFabric::up("tcp", "kary-4-2.yaml", "6s", &[]);
    let t = tcp_transfer(&f, MIB);
    assert_eq!(t.received, MIB);
    assert!(t.intact, "the bytes arrived damaged");
    // iperf3 with a fixed size: everything sent, no error.
    let server = f.spawn("h15", &["iperf3", "-s", "-1", "-J"]);
    std::thread::sleep(Duration::from_millis(300));
    let out = f.exec(
        "h00",
        &["timeout", "20", "iperf3", "-c", "h15", "-n", "1M", "-J"],
    );
    let c = json(&out);
    let _ = server.wait_with_output();
    assert!(out.status.success() && c.get("error").is_none(), "{c:#}");
    assert_eq!(n(&c["end"]["sum_sent"]["bytes"]), MIB, "{:#}", c["end"]);
    assert!(n(&c["end"]["sum_received"]["bytes"]) > 0, "{:#}", c["end"]);
    f.finish();
}

/// A 4 MiB transfer from h00 to h15 with link `link` killed 500 ms into
/// the run: at the configured 200 000 flits/s of 16 bytes the transfer
/// takes at least 1.3 s, so the kill falls in the middle of it.
fn transfer_through_a_kill(tag: &str, link: &str, extra: &[&str]) -> (Transfer, serde_json::Value) {
    let mut args = vec!["--kill-link", link, "--kill-at", "500ms"];
    args.extend_from_slice(extra);
    let f = TunFabric::up(tag, "kary-4-2.yaml", "12s", &args);
    let t = tcp_transfer(&f, 4 * MIB);
    assert_eq!(t.received, 4 * MIB);
    assert!(t.intact, "the bytes arrived damaged");
    assert!(t.elapsed > Duration::from_millis(600), "{:?}", t.elapsed);
    let r = f.finish();
    assert_eq!(r["faults"].as_array().map(Vec::len), Some(1), "{r:#}");
    (t, r)
}

/// The controller re-routes around the link that carries the transfer's
/// data (s0-0:7: h00's uplink toward h15's root under dmodk); TCP resends
/// the segments the kill cut and goes on over the new route. The switch
/// closes a packet cut at its input with a non-final tail, so the cut
/// packet's downstream half frees its channels (docs/ip.md).
#[test]
fn a_transfer_survives_a_link_kill_by_rerouting() {
    if !ready() {
        return;
    }
    let (t, r) = transfer_through_a_kill("reroute", "s0-0:7", &[]);
    assert!(
        r["faults"][0]["routes_installed_ms"].is_number(),
        "no re-route: {:#}",
        r["faults"]
    );
    eprintln!(
        "re-routing: {} TCP retransmissions, {:?}; fabric totals {}",
        t.retransmits, t.elapsed, r["totals"]
    );
}

/// SBRP-2 resends the packets the kill of s0-0:7 (h00's uplink toward
/// h15's root under dmodk: the data path) cut: TCP never notices.
#[test]
fn under_sbrp_a_link_kill_costs_tcp_no_retransmission() {
    if !ready() {
        return;
    }
    let (t, r) = transfer_through_a_kill("sbrp", "s0-0:7", &["--recovery-protocol", "sbrp2"]);
    let totals = &r["totals"];
    assert!(
        n(&totals["recovered_messages"]) > 0,
        "the kill cut nothing: {totals:#}"
    );
    assert_eq!(n(&totals["messages_lost"]), 0, "{totals:#}");
    assert_eq!(t.retransmits, 0, "{totals:#}");
    eprintln!("sbrp2: {:?}; fabric totals {totals}", t.elapsed);
}

#[test]
fn udp_at_a_set_rate_loses_nothing_without_faults() {
    if !ready() {
        return;
    }
    let f = TunFabric::up("udp", "kary-4-2.yaml", "5s", &[]);
    let server = f.spawn("h15", &["iperf3", "-s", "-1", "-J"]);
    std::thread::sleep(Duration::from_millis(300));
    let out = f.exec(
        "h00",
        &[
            "timeout", "20", "iperf3", "-c", "h15", "-u", "-b", "4M", "-t", "2", "-J",
        ],
    );
    let c = json(&out);
    let _ = server.wait_with_output();
    let sum = &c["end"]["sum"];
    assert!(n(&sum["packets"]) > 500, "{sum:#}");
    let lost = sum["lost_percent"].as_f64().unwrap();
    assert!(lost < 0.5, "{sum:#}");
    f.finish();
}

/// topologies/scenarios/kary-4-2-tcp-link-kill.yaml through `flitctl
/// chaos`: a pingall, then a 3 s TCP flow across the tree with the link
/// carrying its acknowledgements killed 1.5 s in; the report has every
/// pair's answer, the flow's intervals and bytes, and the kill's dip and
/// recovery.
#[test]
fn a_scenario_runs_pingall_and_an_iperf3_flow_through_a_link_kill() {
    if !ready() {
        return;
    }
    let run_dir = std::env::temp_dir().join(format!("flitnet-test-ip-apps-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run_dir);
    let file = flitnet::topology("scenarios/kary-4-2-tcp-link-kill.yaml");
    let out = Command::new(bin("flitctl"))
        .args(["chaos", file.to_str().unwrap(), "--json", "--run-dir"])
        .arg(&run_dir)
        .output()
        .expect("flitctl chaos");
    let r = json(&out);
    assert!(
        out.status.success(),
        "{r:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ping = &r["pingall"][0];
    assert_eq!(n(&ping["pairs"]), 16 * 15, "{ping:#}");
    assert_eq!(n(&ping["answered"]), 16 * 15, "{ping:#}");
    assert!(ping["rtt_ms"]["p99"].as_f64().unwrap() > 0.0, "{ping:#}");
    let flow = &r["iperf3"][0];
    assert!(flow["error"].is_null(), "{flow:#}");
    assert_eq!(flow["client"], "h00");
    assert!(n(&flow["bytes_received"]) > 0, "{flow:#}");
    assert!(flow["retransmits"].is_number(), "{flow:#}");
    let intervals = flow["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 8, "{flow:#}");
    // Emulated instants: the flow starts about 1 s after traffic.
    assert!(n(&intervals[0]["start_s"]) < 2, "{flow:#}");
    let kill = &flow["faults"][0];
    assert_eq!(kill["action"], "kill-link", "{flow:#}");
    for key in [
        "pre_fault_bits_per_second",
        "min_bits_per_second",
        "dip_percent",
    ] {
        assert!(kill[key].is_number(), "{key}: {kill:#}");
    }
    assert!(kill.get("recovery_ms").is_some(), "{kill:#}");
    let svg = std::fs::read_to_string(run_dir.join("throughput.svg")).unwrap();
    assert!(svg.contains("iperf3 h00→h15 (tcp)"), "the plot has no flow");
    for f in ["iperf3-0-client.json", "iperf3-0-server.json"] {
        assert!(run_dir.join(f).exists(), "{f} missing");
    }
    let _ = std::fs::remove_dir_all(&run_dir);
    eprintln!("pingall {ping}\niperf3 faults {}", flow["faults"]);
}
