//! `flitctl bench tun`: iperf3 TCP throughput across the fabric's IP
//! interfaces (docs/ip.md), against the configured link bandwidth, and
//! against iperf3 over a plain veth pair between two namespaces measured in
//! the same run (the kernel's own path, with the fabric's MTU).
//!
//! The fabric is a 4-ary 2-tree brought up by `flitctl up --tun --pattern
//! none` in a child process; the flow goes from h00 to h15, on opposite
//! sides of the tree (through a root switch).

use crate::iperf::{self, Iperf3Run};
use crate::state::FabricState;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct BenchTunArgs {
    /// The 4-ary 2-tree's topology file.
    #[arg(long, default_value = "topologies/kary-4-2.yaml")]
    pub topology: PathBuf,
    /// Seconds each iperf3 run sends (`iperf3 -t`).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Link bandwidth of the fabric, flits/s (as `flitctl up --bandwidth`).
    #[arg(long, default_value_t = crate::spec::FabricSpec::default().bandwidth)]
    pub bandwidth: u64,
    /// Time dilation of the fabric (as `flitctl up --time-dilation`): a
    /// whole factor, or `auto` to calibrate on this machine. Rates against
    /// the link are in emulated time (iperf3's × the factor used).
    #[arg(long, value_name = "N|auto", default_value = "1")]
    pub time_dilation: flitnet_runtime::clock::Dilation,
    #[arg(long)]
    pub json: bool,
}

/// One iperf3 flow's result.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub path: String,
    /// At the receiver, bits per wall second.
    pub bits_per_second: f64,
    pub bytes_received: u64,
    pub retransmits: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchTun {
    pub load_average_before: String,
    pub load_average_after: String,
    pub time_dilation: u32,
    pub mtu: u32,
    /// Flit payload bits per second of one link (bandwidth × payload × 8).
    pub link_bits_per_second: f64,
    pub fabric: Row,
    pub veth: Row,
    /// The fabric's throughput in emulated time (× the dilation) over the
    /// link's.
    pub fabric_to_link: f64,
    /// The fabric's throughput (wall) over the veth pair's.
    pub fabric_to_veth: f64,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The receiver's figures of one outcome.
fn row(path: &str, o: &iperf::Iperf3Outcome) -> Result<Row> {
    let end = o.client.end.as_ref().context("iperf3 printed no result")?;
    let received = end
        .sum_received
        .as_ref()
        .context("iperf3 printed no receiver sum")?;
    Ok(Row {
        path: path.into(),
        bits_per_second: received.bits_per_second,
        bytes_received: received.bytes,
        retransmits: end.sum_sent.as_ref().and_then(|s| s.retransmits),
    })
}

/// A `flitctl up --tun` running in the background; stopped on drop.
struct UpChild {
    child: Child,
    run_dir: PathBuf,
}

impl Drop for UpChild {
    fn drop(&mut self) {
        // Interrupted, `flitctl up` stops, reports and deletes what it made.
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            if let Ok(exe) = std::env::current_exe() {
                let _ = Command::new(exe)
                    .arg("down")
                    .arg(&self.run_dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// Brings the fabric up for `seconds` + a margin; returns once routes are in.
fn fabric_up(args: &BenchTunArgs, run_dir: &Path) -> Result<UpChild> {
    let exe = std::env::current_exe().context("finding flitctl")?;
    let duration = format!("{}s", args.seconds + 6);
    let mut child = Command::new(exe)
        .arg("up")
        .arg(&args.topology)
        .args(["--tun", "--pattern", "none", "--duration", &duration])
        .args(["--bandwidth", &args.bandwidth.to_string()])
        .args(["--time-dilation", &args.time_dilation.to_string()])
        .args(["--progress", "never", "--run-dir"])
        .arg(run_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running flitctl up --tun")?;
    let stderr = Arc::new(Mutex::new(String::new()));
    let pipe = child.stderr.take().expect("piped");
    let sink = stderr.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut s = sink.lock().expect("stderr");
            s.push_str(&line);
            s.push('\n');
        }
    });
    let mut up = UpChild {
        child,
        run_dir: run_dir.to_path_buf(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stderr.lock().expect("stderr").contains("fabric up:") {
        if let Some(status) = up.child.try_wait()? {
            bail!(
                "flitctl up --tun exited ({status}):\n{}",
                stderr.lock().expect("stderr")
            );
        }
        if Instant::now() > deadline {
            bail!("the fabric did not come up within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(up)
}

/// Two namespaces joined by a veth pair; deleted on drop.
struct VethPair {
    names: [String; 2],
}

impl VethPair {
    fn create(mtu: u32) -> Result<VethPair> {
        let id = std::process::id();
        let pair = VethPair {
            names: [format!("flt-bench-{id}-a"), format!("flt-bench-{id}-b")],
        };
        let [a, b] = &pair.names;
        let ip = |args: &[&str]| crate::netns::ip(args, None);
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        let mtu = mtu.to_string();
        ip(&[
            "link", "add", "va", "netns", a, "mtu", &mtu, "type", "veth", "peer", "name", "vb",
            "netns", b, "mtu", &mtu,
        ])?;
        for (ns, dev, addr) in [(a, "va", "10.254.0.1/30"), (b, "vb", "10.254.0.2/30")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(pair)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

pub fn run(args: BenchTunArgs) -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!("warning: flitctl is a debug build; benchmark a --release build");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench tun creates network namespaces and TUN devices: run as root");
    }
    let load_average_before = loadavg();
    let scratch = crate::rundir::create(None, "bench-tun", true)?.path;
    let run_dir = scratch.join("fabric");
    let up = fabric_up(&args, &run_dir)?;
    let state = FabricState::read(&run_dir)?;
    // The factor the fabric runs with (`auto` resolves at bring-up), from a
    // daemon's configuration.
    let config: flitnet_core::control::DaemonConfig = serde_json::from_slice(
        &std::fs::read(run_dir.join("h00.json")).context("reading h00.json")?,
    )
    .context("reading h00.json")?;
    let time_dilation = config.fabric.time_dilation;
    let tun = state.tun.context("the fabric has no IP interfaces")?;
    let (client, server) = (
        tun.host("h00").context("no host h00")?,
        tun.host("h15").context("no host h15")?,
    );
    let flow = |server_addr| Iperf3Run {
        server: server_addr,
        port: 5201,
        seconds: args.seconds,
        interval: Duration::from_secs(1),
        udp: false,
        bitrate: None,
        connect_timeout: Duration::from_secs(5),
    };
    let deadline = || Instant::now() + Duration::from_secs(args.seconds + 20);
    let fabric = iperf::run(
        &server.netns,
        &client.netns,
        &flow(server.address),
        &scratch,
        "fabric",
        deadline(),
    )
    .context("iperf3 over the fabric")?;
    let fabric = row("fabric h00→h15", &fabric)?;
    drop(up);
    let veth_pair = VethPair::create(tun.mtu)?;
    let veth = iperf::run(
        &veth_pair.names[1],
        &veth_pair.names[0],
        &flow("10.254.0.2".parse().expect("an address")),
        &scratch,
        "veth",
        deadline(),
    )
    .context("iperf3 over the veth pair")?;
    drop(veth_pair);
    let veth = row("veth pair", &veth)?;
    let _ = std::fs::remove_dir_all(&scratch);
    let link_bits_per_second = args.bandwidth as f64
        * crate::spec::FabricSpec::default().params().flit_payload as f64
        * 8.0;
    let n = time_dilation.max(1) as f64;
    let out = BenchTun {
        load_average_after: loadavg(),
        load_average_before,
        time_dilation,
        mtu: tun.mtu,
        link_bits_per_second,
        fabric_to_link: fabric.bits_per_second * n / link_bits_per_second.max(1.0),
        fabric_to_veth: fabric.bits_per_second / veth.bits_per_second.max(1.0),
        fabric,
        veth,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("load average before: {}", out.load_average_before);
    println!(
        "4-ary 2-tree, h00 → h15, MTU {}, time dilation {}, link {} flits/s = {:.2} Mbit/s of payload; iperf3 -t {}",
        out.mtu,
        out.time_dilation,
        args.bandwidth,
        out.link_bits_per_second / 1e6,
        args.seconds
    );
    println!(
        "{:<18} {:>12} {:>12} {:>12} {:>10}",
        "path", "Mbit/s (wall)", "retransmits", "× link", "× veth"
    );
    for (r, to_link, to_veth) in [
        (&out.fabric, Some(out.fabric_to_link), out.fabric_to_veth),
        (&out.veth, None, 1.0),
    ] {
        println!(
            "{:<18} {:>12.2} {:>12} {:>12} {:>10.5}",
            r.path,
            r.bits_per_second / 1e6,
            r.retransmits.map_or("-".into(), |x| x.to_string()),
            to_link.map_or("-".into(), |x| format!("{x:.3}")),
            to_veth
        );
    }
    println!(
        "load average after: {} (other work on the machine skews every figure)",
        out.load_average_after
    );
    Ok(())
}
