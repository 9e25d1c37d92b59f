//! End-to-end data-plane tests: `flitctl up` starts one real `switchd` per
//! switch and one `hostd` per host, traffic flows over shared-memory rings
//! (the default transport; one run over UDP on loopback) with
//! credit-based flow control, and every message must arrive exactly once,
//! in order per flow, with zero drops and zero credit violations.
//!
//! The matrix covers each topology family of the data-plane issue (4-ary
//! 2-tree, 3x3 mesh, 4-cube) with both patterns (all-to-all, uniform
//! random), both switching modes and 1 and 2 VCs, spread over six runs so
//! that every value of every dimension is exercised.

use flitnet::{flitctl, topology, RunDir};

fn run(topo: &str, pattern: &str, switching: &str, vcs: u8, extra: &[&str]) -> serde_json::Value {
    let topo_path = topology(topo);
    let vcs = vcs.to_string();
    let run_dir = RunDir::new(&format!(
        "{}-{}-{}-{vcs}",
        topo.trim_end_matches(".yaml"),
        pattern.replace(':', "_"),
        switching
    ));
    let mut args = vec![
        "up",
        topo_path.to_str().unwrap(),
        "--pattern",
        pattern,
        "--switching",
        switching,
        "--vcs",
        &vcs,
        "--bandwidth",
        "50000",
        "--load",
        "0.1",
        "--duration",
        "2s",
    ];
    args.extend_from_slice(extra);
    let report = run_dir
        .flitctl_json(&args)
        .unwrap_or_else(|e| panic!("{topo} {pattern}: {e:#}"));
    let t = &report["totals"];
    let sent = t["messages_sent"].as_u64().unwrap();
    let delivered = t["messages_delivered"].as_u64().unwrap();
    assert!(sent > 0, "{topo} {pattern}: nothing was sent: {report:#}");
    assert_eq!(
        delivered, sent,
        "{topo} {pattern}: lost messages: {report:#}"
    );
    for field in [
        "duplicates",
        "out_of_order",
        "corrupted",
        "incomplete_packets",
        "misdelivered_packets",
    ] {
        assert_eq!(t[field], 0, "{topo} {pattern}: {field}: {report:#}");
    }
    assert_eq!(
        report["credit_violations"], 0,
        "{topo} {pattern}: {report:#}"
    );
    assert!(
        report["drops"].as_object().unwrap().is_empty(),
        "{topo} {pattern}: drops: {report:#}"
    );
    assert_eq!(report["lossless"], true);
    report
}

#[test]
fn kary_4_2_all_to_all_wormhole_1vc() {
    let r = run("kary-4-2.yaml", "all-to-all", "wormhole", 1, &[]);
    // All-to-all: every host sends one message to each of the 15 others.
    assert_eq!(r["totals"]["messages_delivered"], 16 * 15);
}

/// Over UDP: the other tests run over the default transport, shm.
#[test]
fn kary_4_2_uniform_vct_2vcs_over_udp() {
    run(
        "kary-4-2.yaml",
        "uniform",
        "vct",
        2,
        &["--transport", "udp"],
    );
}

#[test]
fn mesh_3x3_all_to_all_vct_1vc() {
    let r = run("mesh-3x3.yaml", "all-to-all:2", "vct", 1, &[]);
    assert_eq!(r["totals"]["messages_delivered"], 9 * 8 * 2);
}

#[test]
fn mesh_3x3_uniform_wormhole_2vcs() {
    run("mesh-3x3.yaml", "uniform", "wormhole", 2, &[]);
}

#[test]
fn hypercube_4_all_to_all_wormhole_2vcs() {
    let r = run("hypercube-4.yaml", "all-to-all", "wormhole", 2, &[]);
    assert_eq!(r["totals"]["messages_delivered"], 16 * 15);
}

#[test]
fn hypercube_4_uniform_vct_1vc_long_messages() {
    // Messages of 24 flits are cut into 3 packets of 8.
    run(
        "hypercube-4.yaml",
        "uniform",
        "vct",
        1,
        &["--message-flits", "24"],
    );
}

#[test]
fn a_long_run_shows_progress_once_a_second() {
    let t = topology("kary-4-2.yaml");
    let out = flitctl(&[
        "up",
        t.to_str().unwrap(),
        "--duration",
        "3s",
        "--progress",
        "always",
        "--json",
    ])
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" msgs, delivered "))
        .collect();
    // One line a second over 3 s; a loaded machine may stretch a report
    // request past a tick, so at least two.
    assert!(lines.len() >= 2, "progress lines: {lines:?}\n{err}");
    let delivered: Vec<u64> = lines
        .iter()
        .map(|l| {
            l.split("delivered ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(delivered.windows(2).all(|w| w[0] <= w[1]), "{lines:?}");
    assert!(*delivered.last().unwrap() > 0, "{lines:?}");
    // The JSON report on stdout is not disturbed by the progress lines.
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["totals"]["messages_delivered"].as_u64().unwrap() >= *delivered.last().unwrap());
}

#[test]
fn torus_needs_two_vcs_and_says_so() {
    let t = topology("torus-3x3x3.yaml");
    let out = flitctl(&["up", t.to_str().unwrap(), "--vcs", "1", "--duration", "1s"]).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs 2 virtual channels"), "{err}");
}

#[test]
fn bad_arguments_are_refused_before_anything_starts() {
    let t = topology("kary-4-2.yaml");
    let t = t.to_str().unwrap();
    for (args, expect) in [
        (
            vec!["up", t, "--kill-link", "s9-9:1"],
            "no node named `s9-9`",
        ),
        (vec!["up", t, "--kill-link", "s0-0:77"], "has no port 77"),
        (vec!["up", t, "--kill-switch", "h00"], "is a host"),
        (
            vec!["up", t, "--kill-link", "s0-0:4", "--kill-switch", "s1-1"],
            "use a chaos scenario",
        ),
        (
            vec![
                "up",
                t,
                "--mechanism",
                "dlr-link",
                "--recovery",
                "none",
                "--vcs",
                "2",
                "--recovery-protocol",
                "sbrp2",
                "--kill-switch",
                "s1-1",
            ],
            "link faults only",
        ),
        (vec!["up", t, "--engine", "warp-drive"], "warp-drive"),
        (vec!["up", "/nonexistent.yaml"], "nonexistent.yaml"),
    ] {
        let out = flitctl(&args).unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(expect),
            "{args:?}: expected `{expect}` in: {err}"
        );
    }
}

/// The shm transport treats a ring as untrusted input: garbage written into
/// a link's ring file while traffic runs (a neighbour scribbling over
/// shared memory) is refused and counted by the daemon reading it, which
/// goes on running and reports at the end like every other.
#[test]
fn garbage_written_into_a_shared_ring_is_refused_and_counted() {
    use std::os::unix::fs::FileExt;
    use std::process::{Command, Stdio};
    let run_dir = RunDir::new("shm-garbage");
    let dir = run_dir.path().to_str().unwrap().to_string();
    let topo = topology("kary-4-2.yaml");
    let child = Command::new(flitnet::bin("flitctl"))
        .args([
            "up",
            topo.to_str().unwrap(),
            "--transport",
            "shm",
            "--bandwidth",
            "50000",
            "--load",
            "0.1",
            "--duration",
            "3s",
            "--time-dilation",
            "1",
            "--json",
            "--run-dir",
            &dir,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The ring directory, from the run's state file.
    let started = std::time::Instant::now();
    let ring = loop {
        let state = std::fs::read(run_dir.path().join("state.json")).unwrap_or_default();
        let state: serde_json::Value = serde_json::from_slice(&state).unwrap_or_default();
        if let Some(d) = state["shm_dir"].as_str() {
            let ring = std::path::Path::new(d).join("link-0");
            if ring.exists() && state["daemons"].as_array().is_some_and(|a| a.len() == 24) {
                break ring;
            }
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no ring files"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // Ring 0 of the file: its producer's index (8 bytes at 64) and its
    // data area (from 256), overwritten with pseudo-random bytes, again
    // and again while the producer writes.
    let file = std::fs::OpenOptions::new().write(true).open(&ring).unwrap();
    let data_len = (file.metadata().unwrap().len() as usize - 64) / 2 - 192;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut garbage = vec![0u8; data_len];
    for _ in 0..20 {
        for b in garbage.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        file.write_all_at(&garbage, 256).unwrap();
        file.write_all_at(&x.to_le_bytes(), 64).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        flitnet::processes_matching(&dir),
        0,
        "daemons of {dir} left running"
    );
    let reports = std::fs::read(run_dir.path().join("reports.json")).unwrap_or_else(|e| {
        panic!(
            "no reports.json ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let reports: serde_json::Value = serde_json::from_slice(&reports).unwrap();
    let reports = reports.as_object().unwrap();
    // Every daemon answered at the end: none died of the garbage.
    assert_eq!(reports.len(), 24, "{:?}", reports.keys());
    let refused: u64 = reports
        .values()
        .map(|r| {
            r["event_loop"]["transport"]["ring_corrupt"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(refused > 0, "no daemon counted a corrupt ring");
}
