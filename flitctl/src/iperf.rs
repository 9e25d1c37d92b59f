//! iperf3 between two network namespaces (docs/ip.md): `iperf3 -s -1 -J`
//! in the receiver's, `iperf3 -c -J` in the sender's, both through `ip
//! netns exec`, and their JSON results read into typed structs. Used by the
//! scenario action `iperf3` and `flitctl bench tun`.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What iperf3 -J prints (the parts read here; unknown keys are ignored).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Iperf3Json {
    #[serde(default)]
    pub start: Option<Iperf3Start>,
    #[serde(default)]
    pub intervals: Vec<Iperf3Interval>,
    #[serde(default)]
    pub end: Option<Iperf3End>,
    /// Set when the test failed.
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Iperf3Start {
    #[serde(default)]
    pub test_start: Option<Iperf3TestStart>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Iperf3TestStart {
    /// `TCP` or `UDP`.
    pub protocol: String,
    /// Seconds (`-t`).
    pub duration: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Iperf3Interval {
    pub sum: Iperf3Sum,
}

/// A sum over the streams: of one interval, or of the whole test.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Iperf3Sum {
    /// Seconds since the test started (wall-clock).
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
    /// Per wall-clock second.
    pub bits_per_second: f64,
    /// TCP, sender side.
    #[serde(default)]
    pub retransmits: Option<u64>,
    /// UDP.
    #[serde(default)]
    pub packets: Option<u64>,
    #[serde(default)]
    pub lost_packets: Option<u64>,
    #[serde(default)]
    pub lost_percent: Option<f64>,
    #[serde(default)]
    pub jitter_ms: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Iperf3End {
    /// TCP (and UDP in recent versions): what the sender sent.
    #[serde(default)]
    pub sum_sent: Option<Iperf3Sum>,
    /// What the receiver received.
    #[serde(default)]
    pub sum_received: Option<Iperf3Sum>,
    /// UDP: the receiver's loss and jitter.
    #[serde(default)]
    pub sum: Option<Iperf3Sum>,
}

impl Iperf3Json {
    pub fn parse(text: &str) -> Result<Iperf3Json> {
        serde_json::from_str(text).context("reading iperf3's JSON")
    }

    /// Bytes the receiver counted.
    pub fn bytes_received(&self) -> Option<u64> {
        let end = self.end.as_ref()?;
        end.sum_received
            .as_ref()
            .or(end.sum.as_ref())
            .map(|s| s.bytes)
    }
}

/// One iperf3 run between two namespaces.
#[derive(Clone, Debug)]
pub struct Iperf3Run {
    /// The server's (receiver's) address.
    pub server: Ipv4Addr,
    pub port: u16,
    /// `-t`, wall seconds.
    pub seconds: u64,
    /// `-i`, wall seconds.
    pub interval: Duration,
    pub udp: bool,
    /// `-b` as iperf3 takes it (`4M`).
    pub bitrate: Option<String>,
    /// The client's `--connect-timeout`.
    pub connect_timeout: Duration,
}

/// What both ends printed.
#[derive(Clone, Debug)]
pub struct Iperf3Outcome {
    /// When the client was started.
    pub client_started: Instant,
    pub client: Iperf3Json,
    pub server: Iperf3Json,
}

/// A child that is killed if it is still running when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

fn in_netns(ns: &str, out: &Path) -> Result<Command> {
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(Stdio::null());
    Ok(c)
}

/// Whether the process `pid` (in its own network namespace) has a TCP
/// socket listening on `port`: `/proc/PID/net/tcp{,6}` list the sockets of
/// the process's network namespace.
fn listening(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let mut cols = l.split_whitespace();
                let local = cols.nth(1).unwrap_or("");
                let state = cols.nth(1).unwrap_or("");
                format!("{local} ").ends_with(&want) && state == "0A"
            })
        })
    })
}

/// Runs `run` from namespace `client_ns` to namespace `server_ns`, writing
/// both ends' JSON as `<stem>-server.json` and `<stem>-client.json` under
/// `dir`; kills both if they outlive `deadline`.
pub fn run(
    server_ns: &str,
    client_ns: &str,
    run: &Iperf3Run,
    dir: &Path,
    stem: &str,
    deadline: Instant,
) -> Result<Iperf3Outcome> {
    let server_path = dir.join(format!("{stem}-server.json"));
    let client_path = dir.join(format!("{stem}-client.json"));
    let interval = format!("{:.3}", run.interval.as_secs_f64());
    let port = run.port.to_string();
    let mut server = Reaped(
        in_netns(server_ns, &server_path)?
            .args(["iperf3", "-s", "-1", "-J", "-p", &port, "-i", &interval])
            .spawn()
            .context("running `ip netns exec … iperf3 -s` (iproute2 and iperf3 are needed)")?,
    );
    // `ip netns exec` execs iperf3 in place: the child is the server.
    let ready_by = Instant::now() + Duration::from_secs(10);
    while !listening(server.0.id(), run.port) {
        if let Some(status) = server.0.try_wait()? {
            bail!(
                "iperf3 -s in {server_ns} exited ({status}): {}",
                std::fs::read_to_string(&server_path).unwrap_or_default()
            );
        }
        if Instant::now() > ready_by {
            bail!("iperf3 -s in {server_ns} is not listening on port {port} after 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = in_netns(client_ns, &client_path)?;
    client.args([
        "iperf3",
        "-c",
        &run.server.to_string(),
        "-p",
        &port,
        "-J",
        "-t",
        &run.seconds.to_string(),
        "-i",
        &interval,
        "--connect-timeout",
        &run.connect_timeout.as_millis().to_string(),
    ]);
    if run.udp {
        client.arg("-u");
    }
    if let Some(b) = &run.bitrate {
        client.args(["-b", b]);
    }
    let client_started = Instant::now();
    let mut client = Reaped(client.spawn().context("running iperf3 -c")?);
    let mut killed = Vec::new();
    for (who, child) in [("client", &mut client), ("server", &mut server)] {
        loop {
            if child.0.try_wait()?.is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.0.kill();
                let _ = child.0.wait();
                killed.push(who);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let read = |path: &PathBuf| -> Result<Iperf3Json> {
        let text = std::fs::read_to_string(path)?;
        Iperf3Json::parse(&text).with_context(|| format!("{}: {text}", path.display()))
    };
    if !killed.is_empty() {
        bail!(
            "iperf3 did not finish in time: {} killed (the flow stalled?)",
            killed.join(" and ")
        );
    }
    let client = read(&client_path)?;
    let server = read(&server_path)?;
    if let Some(e) = client.error.as_ref().or(server.error.as_ref()) {
        bail!("iperf3: {e}");
    }
    Ok(Iperf3Outcome {
        client_started,
        client,
        server,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_and_udp_results_are_read_into_typed_fields() {
        let tcp = r#"{"start":{"test_start":{"protocol":"TCP","num_streams":1,"duration":2}},
            "intervals":[{"streams":[],"sum":{"start":0,"end":0.25,"seconds":0.25,"bytes":393216,
              "bits_per_second":12578684.9,"retransmits":1,"omitted":false,"sender":true}}],
            "end":{"sum_sent":{"start":0,"end":1.0,"seconds":1.0,"bytes":1310720,
              "bits_per_second":10484847.8,"retransmits":3,"sender":true},
              "sum_received":{"start":0,"end":1.0,"seconds":1.0,"bytes":1310000,
              "bits_per_second":10472857.4,"sender":true}}}"#;
        let j = Iperf3Json::parse(tcp).unwrap();
        assert_eq!(
            j.start
                .as_ref()
                .unwrap()
                .test_start
                .as_ref()
                .unwrap()
                .protocol,
            "TCP"
        );
        assert_eq!(j.intervals[0].sum.retransmits, Some(1));
        assert_eq!(
            j.end
                .as_ref()
                .unwrap()
                .sum_sent
                .as_ref()
                .unwrap()
                .retransmits,
            Some(3)
        );
        assert_eq!(j.bytes_received(), Some(1_310_000));
        let udp = r#"{"start":{},"intervals":[],"end":{"sum":{"start":0,"end":1,"seconds":1,
            "bytes":524288,"bits_per_second":4193846.8,"jitter_ms":0.005,"lost_packets":2,
            "packets":16,"lost_percent":12.5,"sender":true}}}"#;
        let j = Iperf3Json::parse(udp).unwrap();
        assert_eq!(j.bytes_received(), Some(524_288));
        assert_eq!(j.end.unwrap().sum.unwrap().lost_percent, Some(12.5));
        let failed = r#"{"start":{},"intervals":[],"end":{},"error":"unable to connect"}"#;
        let j = Iperf3Json::parse(failed).unwrap();
        assert_eq!(j.error.as_deref(), Some("unable to connect"));
        assert_eq!(j.bytes_received(), None);
    }
}
