//! Every topology the model accepts runs live: each file in `topologies/`
//! that fits this machine (all but the 8,640-node PGFT, which has an issue
//! of its own) is brought up by `flitctl up` with real daemons and runs
//! all-to-all traffic, lossless and exactly once, over UDP and, as root,
//! over raw Ethernet. That covers parallel cables (the PGFTs with p > 1,
//! whose cables the transports tell apart by the sending port in each
//! datagram's header, docs/wire.md) and RUFT's one-way links (credits back
//! over each cable's back channel, docs/topology.md). Random small PGFTs
//! with parallel links run live the same way, a forced stall ends with a
//! diagnosis and a non-zero exit, and a self-loop cable is refused before
//! any daemon starts.
//!
//! The files run one after another with one round of all-to-all (one
//! message per ordered pair) for 1 s each: the whole UDP pass takes about
//! a minute on the 2-core CI machine.

use flitnet::{flitctl, skip_without, topology, workspace_dir, RunDir};
use flitnet_core::topology::generators::pgft;
use flitnet_core::topology::PgftParams;
use proptest::prelude::*;
use std::path::Path;

/// The topology files to run: all of `topologies/` but the 8,640-node one.
fn topology_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(workspace_dir().join("topologies"))
        .expect("topologies/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "pgft-8640.yaml")
        .collect();
    files.sort();
    for needed in ["pgft-rlft-16.yaml", "pgft-g3.yaml", "ruft-4-2.yaml"] {
        assert!(files.iter().any(|f| f == needed), "{needed} is missing");
    }
    files
}

/// `flitctl up FILE --pattern all-to-all` with `extra`; checks that every
/// message generated was delivered exactly once, in order, with no drop
/// and no credit violation. Returns the report.
fn all_to_all(name: &str, file: &Path, extra: &[&str]) -> serde_json::Value {
    let run_dir = RunDir::new(&format!("topo-{name}"));
    let mut args = vec![
        "up",
        file.to_str().unwrap(),
        "--pattern",
        "all-to-all",
        "--duration",
        "1s",
    ];
    args.extend_from_slice(extra);
    let r = run_dir
        .flitctl_json(&args)
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
    let t = &r["totals"];
    let generated = t["messages_generated"].as_u64().unwrap();
    assert!(generated > 0, "{name}: nothing generated: {r:#}");
    assert_eq!(t["messages_sent"], generated, "{name}: {r:#}");
    assert_eq!(t["messages_delivered"], generated, "{name}: {r:#}");
    for field in [
        "duplicates",
        "out_of_order",
        "corrupted",
        "incomplete_packets",
        "misdelivered_packets",
    ] {
        assert_eq!(t[field], 0, "{name}: {field}: {r:#}");
    }
    assert_eq!(r["credit_violations"], 0, "{name}: {r:#}");
    assert!(
        r["drops"].as_object().unwrap().is_empty(),
        "{name}: drops: {r:#}"
    );
    assert_eq!(r["lossless"], true, "{name}: {r:#}");
    assert!(r.get("stall").is_none(), "{name}: {r:#}");
    r
}

#[test]
fn every_topology_file_runs_all_to_all_over_udp() {
    for file in topology_files() {
        let r = all_to_all(&file, &topology(&file), &[]);
        // Hosts all talk to each other in these files (no storage
        // exclusions): one message per ordered pair.
        let hosts = r["hosts"].as_u64().unwrap();
        if file != "pgft-g3.yaml" {
            assert_eq!(
                r["totals"]["messages_delivered"],
                hosts * (hosts - 1),
                "{file}"
            );
        }
    }
}

/// Root is needed for network namespaces and raw sockets (CI runs as root).
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    !skip_without(root, "root (the ethernet transport needs it)")
}

#[test]
fn every_topology_file_runs_all_to_all_over_ethernet() {
    if !is_root() {
        return;
    }
    for file in topology_files() {
        let netns = format!("flitnet-t{}-topo", std::process::id());
        all_to_all(
            &format!("eth-{file}"),
            &topology(&file),
            &["--transport", "ethernet", "--netns", &netns],
        );
        assert!(
            !Path::new("/var/run/netns").join(&netns).exists(),
            "{file}: flitctl left network namespace {netns} behind"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2, failure_persistence: None, ..ProptestConfig::default() })]
    /// Random small PGFTs with parallel links (p up to 3, at least one
    /// level with p > 1) run live under Dmodk, which spreads destinations
    /// over the parallel cables: each is a link of its own.
    #[test]
    fn random_pgfts_with_parallel_links_run_live(
        m0 in 2u32..=3,
        upper in proptest::collection::vec((2u32..=3, 1u32..=2, 2u32..=3), 1..=2),
    ) {
        let levels: Vec<(u32, u32, u32)> = std::iter::once((m0, 1, 1)).chain(upper).collect();
        let params = PgftParams {
            m: levels.iter().map(|l| l.0).collect(),
            w: levels.iter().map(|l| l.1).collect(),
            p: levels.iter().map(|l| l.2).collect(),
        };
        let topo = pgft(&params).unwrap();
        let dir = RunDir::new("random-pgft-file");
        std::fs::create_dir_all(dir.path()).unwrap();
        let file = dir.path().join("pgft.yaml");
        std::fs::write(&file, topo.to_yaml()).unwrap();
        let name = format!("pgft-{:?}-{:?}-{:?}", params.m, params.w, params.p);
        let r = all_to_all(&name, &file, &["--engine", "dmodk"]);
        let hosts = topo.num_hosts() as u64;
        prop_assert_eq!(&r["totals"]["messages_delivered"], &serde_json::json!(hosts * (hosts - 1)));
    }
}

/// Credits withheld on one switch port stop the traffic behind it: the run
/// ends early with a diagnosis naming the port, who waits for its
/// credits and what the other ports hold, and `flitctl up` exits non-zero.
#[test]
fn a_forced_stall_is_diagnosed_and_fails_the_run() {
    let run_dir = RunDir::new("stall");
    let t = topology("kary-4-2.yaml");
    let out = flitctl(&[
        "up",
        t.to_str().unwrap(),
        "--pattern",
        "uniform",
        "--load",
        "0.3",
        "--bandwidth",
        "50000",
        "--duration",
        "2s",
        "--withhold-credits",
        "s1-0:0",
        "--kill-at",
        "500ms",
        "--run-dir",
        run_dir.path().to_str().unwrap(),
    ])
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a stalled run exited 0:\n{stdout}");
    assert!(
        stderr.contains("the traffic stalled"),
        "stderr: {stderr}\nstdout: {stdout}"
    );
    assert!(stdout.contains("STALL"), "{stdout}");
    assert!(
        stdout.contains("s1-0:0: withholds its credits from s0-0:4 (fault injection)"),
        "{stdout}"
    );
    // s1-0:0's peer is out of credits, and the leaf's hosts wait behind it.
    let waiting = stdout
        .lines()
        .find(|l| l.contains("waiting for credits"))
        .unwrap_or_default();
    assert!(
        waiting.contains("s0-0:4 vc [0] (owed by s1-0:0)"),
        "{stdout}"
    );
    let holding = stdout
        .lines()
        .find(|l| l.contains("holding flits"))
        .unwrap_or_default();
    assert!(holding.contains("s0-0:"), "{stdout}");
    assert_eq!(
        flitnet::processes_matching(run_dir.path().to_str().unwrap()),
        0
    );
}

/// A cable from a switch to itself is refused when the file loads, naming
/// the link and its line, before any daemon starts.
#[test]
fn a_self_loop_cable_is_refused_before_anything_starts() {
    let run_dir = RunDir::new("self-loop");
    std::fs::create_dir_all(run_dir.path()).unwrap();
    let file = run_dir.path().join("loop.yaml");
    let text = std::fs::read_to_string(topology("explicit-tiny.yaml"))
        .unwrap()
        .replace("  - s0:3 -- s1:3", "  - s0:3 -- s1:3\n  - s0:2 -- s0:1")
        .replace("  - h1:0 -- s0:1\n", "  - h1:0 -- s1:2\n");
    std::fs::write(&file, text).unwrap();
    let out = flitctl(&[
        "up",
        file.to_str().unwrap(),
        "--run-dir",
        run_dir.path().join("run").to_str().unwrap(),
    ])
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("links[5] `s0:2 -- s0:1`") && stderr.contains("self-loop"),
        "{stderr}"
    );
    assert!(
        !run_dir.path().join("run").exists(),
        "a run directory was made: something started"
    );
}
