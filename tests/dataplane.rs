//! End-to-end data-plane tests: `flitctl up` starts one real `switchd` per
//! switch and one `hostd` per host on loopback, traffic flows over UDP with
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
    run("kary-4-2.yaml", "uniform", "vct", 2, &["--transport", "udp"]);
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
