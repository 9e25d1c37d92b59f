//! Running the real OpenSM against an ibsim-simulated copy of a topology
//! (peers.md §1, "Commands that work"): write the net file, start `ibsim -s
//! -n` on a socket name of its own, wait for "Network simulator ready.", run
//! `opensm -o` under `LD_PRELOAD=libumad2sim.so` in a temp dir (umad2sim
//! leaves `sys-<pid>` dirs in the cwd), bounded by `timeout -k` (opensm
//! blocks SIGTERM when ibsim is gone), check the log line naming the engine
//! that really ran (OpenSM falls back to minhop silently), read the dumps.

use anyhow::{bail, Context, Result};
use flitnet_core::routing::checker::host_attachment;
use flitnet_core::topology::ibnet::{compute_node_guids_file, root_guids_file, to_ibnet, GuidMap};
use flitnet_core::topology::{FaultSet, LinkId, NodeRef, Topology};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where Debian's libumad2sim0 puts the preload library: under the
/// multiarch directory of this machine (x86_64-linux-gnu,
/// aarch64-linux-gnu, …), found by looking rather than assumed.
pub fn umad2sim() -> Option<std::path::PathBuf> {
    std::fs::read_dir("/usr/lib")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("umad2sim/libumad2sim.so"))
        .find(|p| p.exists())
}

/// Why OpenSM cannot be run here, or `None` if it can.
pub fn unavailable_reason() -> Option<String> {
    let mut missing: Vec<&str> = ["/usr/sbin/opensm", "/usr/bin/ibsim", "/usr/bin/timeout"]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if umad2sim().is_none() {
        missing.push("/usr/lib/<multiarch>/umad2sim/libumad2sim.so");
    }
    (!missing.is_empty()).then(|| {
        format!(
            "missing {} (apt-get install -y --no-install-recommends opensm ibsim-utils infiniband-diags)",
            missing.join(", ")
        )
    })
}

/// How to run OpenSM.
#[derive(Clone, Debug)]
pub struct OpensmOptions {
    /// Hard bound on `opensm -o` (then SIGKILL 5 s later).
    pub timeout: Duration,
    /// Ask for the routing dumps (`-D 0x47`); without them OpenSM only logs
    /// (`-D 0x07`), which keeps big fabrics' runs free of dump writing.
    pub dumps: bool,
    /// Load these LFTs with `-R file -U` instead of running `engine`.
    pub lfts_file: Option<PathBuf>,
    /// Keep the work directory (net file, logs, dumps) for inspection.
    pub keep: bool,
}

impl Default for OpensmOptions {
    fn default() -> Self {
        OpensmOptions {
            timeout: Duration::from_secs(120),
            dumps: true,
            lfts_file: None,
            keep: false,
        }
    }
}

/// What one `opensm -o` run produced.
#[derive(Clone, Debug)]
pub struct OpensmRun {
    /// The engine named by `osm_ucast_mgr_process: <engine> tables configured`.
    pub engine_ran: String,
    /// That log line, verbatim.
    pub log_line: String,
    /// `opensm-lfts.dump` (empty without `dumps`).
    pub lfts_dump: String,
    /// The `guid2lid` cache OpenSM wrote (the LIDs it assigned).
    pub guid2lid: String,
    /// Wall time of `opensm -o`: discovery through ibsim, LID assignment,
    /// routing, LFT upload, dumps.
    pub wall: Duration,
    /// Route computation time from the log's timestamps: "building routing
    /// with '<engine>'" to the engine's "routing is done" line (ftree), else
    /// to "tables configured" (which also covers queueing the LFT upload).
    pub routing_span: Option<Duration>,
    /// The work directory (deleted unless `keep`).
    pub dir: PathBuf,
}

static RUNS: AtomicU32 = AtomicU32::new(0);

/// ibsim itself, killed on drop.
struct Ibsim(Child);

impl Drop for Ibsim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs OpenSM's `engine` (ftree, minhop, updn, dfsssp, …) on `topo` minus
/// `faults` (failed links are left out of the net file on both ends, as
/// peers.md §1 advises; a failed switch keeps its record but loses every
/// cable, so OpenSM never discovers it).
pub fn run_opensm(
    topo: &Topology,
    faults: &FaultSet,
    engine: &str,
    opts: &OpensmOptions,
) -> Result<OpensmRun> {
    if let Some(why) = unavailable_reason() {
        bail!("cannot run OpenSM: {why}");
    }
    let seq = RUNS.fetch_add(1, Ordering::Relaxed);
    let tag = format!("{}-{seq}", std::process::id());
    // Private and fresh (mkdtemp): OpenSM runs as root and writes there.
    let dir = crate::rundir::create(None, &format!("opensm-{engine}"), true)?.path;
    std::fs::create_dir_all(dir.join("dump"))?;
    std::fs::create_dir_all(dir.join("cache"))?;
    let result = run_in(topo, faults, engine, opts, &dir, &tag);
    if !opts.keep && result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result.with_context(|| format!("OpenSM -R {engine} (work dir {})", dir.display()))
}

fn run_in(
    topo: &Topology,
    faults: &FaultSet,
    engine: &str,
    opts: &OpensmOptions,
    dir: &Path,
    tag: &str,
) -> Result<OpensmRun> {
    // OpenSM runs on the first host that is still cabled to the fabric.
    let first_host = topo
        .hosts
        .iter()
        .find(|h| host_attachment(topo, faults, h.id).is_some())
        .context("no host is attached to the fabric for OpenSM to run on")?
        .name
        .clone();
    std::fs::write(dir.join("fabric.net"), degraded_net(topo, faults)?)?;
    let sock = format!("flitnet-sim-{tag}");
    // ibsim's default limits are 2048 nodes, 256 switches, 13312 ports.
    let nodes = topo.num_hosts() + topo.num_switches();
    let ports: usize = topo.nodes().map(|n| topo.radix(n) + 1).sum();
    let ibsim_out = std::fs::File::create(dir.join("ibsim.out"))?;
    let child = Command::new("ibsim")
        .current_dir(dir)
        .env("IBSIM_SOCKNAME", &sock)
        .args(["-s", "-n"])
        .args(["-N", &(nodes + 16).max(2048).to_string()])
        .args(["-S", &(topo.num_switches() + 16).max(256).to_string()])
        .args(["-P", &(ports + 64).max(13312).to_string()])
        .arg("fabric.net")
        .stdin(Stdio::null())
        .stdout(ibsim_out.try_clone()?)
        .stderr(ibsim_out)
        .spawn()
        .context("starting ibsim")?;
    let mut ibsim = Ibsim(child);
    let started = Instant::now();
    loop {
        let out = std::fs::read_to_string(dir.join("ibsim.out")).unwrap_or_default();
        if out.contains("Network simulator ready") {
            break;
        }
        if let Some(status) = ibsim.0.try_wait()? {
            bail!(
                "ibsim exited ({status}) before it was ready:\n{}",
                tail(&out, 10)
            );
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("ibsim not ready after 120 s:\n{}", tail(&out, 10));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cmd = Command::new("timeout");
    cmd.current_dir(dir)
        .env("IBSIM_SOCKNAME", &sock)
        .env("SIM_HOST", &first_host)
        .env("OSM_CACHE_DIR", dir.join("cache"))
        .env("OSM_TMP_DIR", dir.join("cache"))
        .env("LD_PRELOAD", umad2sim().unwrap_or_default())
        .args([
            "-k",
            "5",
            &opts.timeout.as_secs().max(1).to_string(),
            "opensm",
        ])
        .args(["-o", "-s", "0", "-e"])
        .arg("-f")
        .arg(dir.join("osm.log"))
        // 0x04 (verbose) adds the "building routing" line that starts the
        // routing span; 0x40 (routing) makes OpenSM write the dumps.
        .args(["-D", if opts.dumps { "0x47" } else { "0x07" }])
        .arg("--dump_files_dir")
        .arg(dir.join("dump"));
    match &opts.lfts_file {
        Some(f) => {
            cmd.args(["-R", "file", "-U"]).arg(f);
        }
        None => {
            cmd.args(["-R", engine]);
            if engine == "ftree" {
                // Roots and compute nodes: ftree then also routes degraded trees.
                let dead = dead_guids(topo, faults);
                let alive = |text: String| -> String {
                    text.lines()
                        .filter(|l| !dead.contains(*l))
                        .map(|l| format!("{l}\n"))
                        .collect()
                };
                std::fs::write(dir.join("roots"), alive(root_guids_file(topo)))?;
                std::fs::write(dir.join("cns"), alive(compute_node_guids_file(topo)))?;
                cmd.arg("-a")
                    .arg(dir.join("roots"))
                    .arg("-u")
                    .arg(dir.join("cns"));
            }
        }
    }
    let t0 = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .context("running opensm")?;
    let wall = t0.elapsed();
    drop(ibsim);
    let log = std::fs::read_to_string(dir.join("osm.log")).unwrap_or_default();
    if !out.status.success() {
        bail!(
            "opensm exited with {} (124/137 = timed out):\n{}",
            out.status,
            tail(&log, 15)
        );
    }
    let log_line = log
        .lines()
        .find(|l| l.contains("osm_ucast_mgr_process:") && l.contains("tables configured"))
        .with_context(|| {
            format!(
                "opensm's log has no `tables configured` line:\n{}",
                tail(&log, 15)
            )
        })?
        .to_string();
    let engine_ran = log_line
        .split("osm_ucast_mgr_process: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or("")
        .to_string();
    let wanted = if opts.lfts_file.is_some() {
        "file"
    } else {
        engine
    };
    if engine_ran != wanted {
        bail!("OpenSM fell back: asked for {wanted}, log says `{log_line}`");
    }
    let routing_span = routing_span(&log, &log_line);
    let lfts_dump = if opts.dumps {
        std::fs::read_to_string(dir.join("dump/opensm-lfts.dump"))
            .context("opensm wrote no opensm-lfts.dump")?
    } else {
        String::new()
    };
    let guid2lid = std::fs::read_to_string(dir.join("cache/guid2lid")).unwrap_or_default();
    Ok(OpensmRun {
        engine_ran,
        log_line,
        lfts_dump,
        guid2lid,
        wall,
        routing_span,
        dir: dir.to_path_buf(),
    })
}

/// The net file of `topo` without the cables `faults` kill.
pub fn degraded_net(topo: &Topology, faults: &FaultSet) -> Result<String> {
    let text = to_ibnet(topo)?;
    if faults.is_empty() {
        return Ok(text);
    }
    // (node name, 1-based port) of every dead cable end.
    let mut cut: HashSet<(&str, u32)> = HashSet::new();
    for (l, link) in topo.links.iter().enumerate() {
        if !faults.link_alive(topo, l as LinkId) {
            for end in [link.a, link.b] {
                cut.insert((topo.node_name(end.node), end.port as u32 + 1));
            }
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut node = "";
    for line in text.lines() {
        if line.starts_with("Switch") || line.starts_with("Hca") {
            node = line.split('"').nth(1).unwrap_or("");
        } else if let Some(rest) = line.strip_prefix('[') {
            let port = rest.split(']').next().and_then(|p| p.parse().ok());
            if port.is_some_and(|p| cut.contains(&(node, p))) {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

/// `0x%016x` GUIDs of failed switches and of host ports on dead cables,
/// as the GUID files write them.
fn dead_guids(topo: &Topology, faults: &FaultSet) -> HashSet<String> {
    let guids = GuidMap::assigned(topo);
    let mut dead = HashSet::new();
    for &s in &faults.switches {
        if let Some(g) = guids.switch_guid(s) {
            dead.insert(format!("0x{g:016x}"));
        }
    }
    for (l, link) in topo.links.iter().enumerate() {
        if !faults.link_alive(topo, l as LinkId) {
            for end in [link.a, link.b] {
                if matches!(end.node, NodeRef::Host(_)) {
                    if let Some(g) = guids.port_guid(end) {
                        dead.insert(format!("0x{g:016x}"));
                    }
                }
            }
        }
    }
    dead
}

/// See [`OpensmRun::routing_span`].
fn routing_span(log: &str, configured: &str) -> Option<Duration> {
    let start = log_time(log.lines().find(|l| l.contains("building routing with"))?)?;
    let end = log
        .lines()
        .find(|l| l.contains("do_routing:") && l.contains("routing is done"))
        .unwrap_or(configured);
    let end = log_time(end)?;
    (end >= start).then(|| Duration::from_micros(end - start))
}

/// Microseconds since midnight of an OpenSM log line
/// (`Nov 23 08:29:09 321903 [8CAB86C0] ...`).
fn log_time(line: &str) -> Option<u64> {
    let mut f = line.split_whitespace().skip(2);
    let hms: Vec<u64> = f
        .next()?
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let micros: u64 = f.next()?.parse().ok()?;
    match hms[..] {
        [h, m, s] => Some(((h * 60 + m) * 60 + s) * 1_000_000 + micros),
        _ => None,
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_timestamps_parse() {
        let a = "Nov 23 08:29:09 304189 [8CAB86C0] 0x80 -> Entering MASTER state";
        let b = "Nov 23 08:29:10 000001 [8CAB86C0] 0x02 -> osm_ucast_mgr_process: ftree tables configured on all switches";
        assert_eq!(log_time(b).unwrap() - log_time(a).unwrap(), 695_812);
        assert_eq!(log_time("garbage"), None);
        let log = format!(
            "{a}\nNov 23 08:29:09 400000 [8CAB86C0] 0x04 -> ucast_mgr_route: building routing with 'ftree' routing algorithm...\n\
             Nov 23 08:29:09 400250 [8CAB86C0] 0x04 -> do_routing: FatTree routing is done\n{b}\n"
        );
        assert_eq!(routing_span(&log, b), Some(Duration::from_micros(250)));
        let minhop = log.replace("do_routing: FatTree routing is done", "x");
        assert_eq!(
            routing_span(&minhop, b),
            Some(Duration::from_micros(600_001))
        );
        assert_eq!(routing_span(a, b), None);
    }

    #[test]
    fn degraded_net_drops_both_ends_of_dead_cables() {
        let topo = flitnet_core::topology::generators::kary_ntree(2, 2).unwrap();
        let full = degraded_net(&topo, &FaultSet::none()).unwrap();
        let l = crate::parse::parse_link(&topo, "s0-0:2").unwrap();
        let cut = degraded_net(&topo, &FaultSet::with_links([l])).unwrap();
        let ports = |t: &str| t.lines().filter(|l| l.starts_with('[')).count();
        assert_eq!(ports(&full) - ports(&cut), 2);
        assert!(!cut.contains("[3]\t\"s1-0\"[1]"), "{cut}");
        let mut f = FaultSet::none();
        f.switches.insert(2); // a root: 2 cables, both ends
        let cut = degraded_net(&topo, &f).unwrap();
        assert_eq!(ports(&full) - ports(&cut), 4);
    }
}
