//! The data-plane tests again, over the raw Ethernet transport: `flitctl up
//! --transport ethernet` makes a network namespace with one veth pair per
//! link, every daemon opens AF_PACKET sockets on its ends, and the same
//! invariants as on UDP must hold (every message exactly once, in order,
//! zero drops, zero credit violations). Link kills (told to the daemons,
//! and a real `ip link set down` they must notice themselves) are recovered
//! from by rerouting. Every test names its namespace and deletes it on the
//! way out, pass or fail, and checks that flitctl deleted it already.
//!
//! Needs root (network namespaces, raw sockets): CI runs as root; elsewhere
//! the tests say they are skipped (and fail under CI if not root).

use flitnet::{flitctl, flitctl_json, processes_matching, topology};
use std::path::PathBuf;
use std::process::Command;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        assert!(
            std::env::var_os("CI").is_none(),
            "the ethernet tests need root, and CI runs as root"
        );
        eprintln!("skipped: the ethernet transport needs root");
    }
    root
}

/// A namespace name for one test, deleted when dropped in case flitctl
/// could not (it crashed, or the test failed half way).
struct Netns {
    name: String,
    run_dir: PathBuf,
}

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("flitnet-t{}-{tag}", std::process::id());
        let run_dir = std::env::temp_dir().join(format!("flitnet-test-eth-{tag}"));
        let n = Netns { name, run_dir };
        n.delete();
        n
    }

    fn exists(&self) -> bool {
        PathBuf::from("/var/run/netns").join(&self.name).exists()
    }

    fn delete(&self) {
        if self.exists() {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.name])
                .status();
        }
    }

    /// `flitctl up --transport ethernet` in this namespace, with `extra`
    /// arguments; returns the JSON report after checking that flitctl
    /// cleaned up (no namespace, no daemon left).
    fn up(&self, topo: &str, extra: &[&str]) -> serde_json::Value {
        let topo_path = topology(topo);
        let mut args = vec![
            "up",
            topo_path.to_str().unwrap(),
            "--transport",
            "ethernet",
            "--netns",
            &self.name,
            "--run-dir",
            self.run_dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let report = flitctl_json(&args).unwrap_or_else(|e| panic!("{topo} {extra:?}: {e:#}"));
        assert!(
            !self.exists(),
            "flitctl left network namespace {} behind",
            self.name
        );
        assert_eq!(
            processes_matching(self.run_dir.to_str().unwrap()),
            0,
            "daemons left running"
        );
        report
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.delete();
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Nothing duplicated, damaged or misdelivered; no flit ever found a full
/// buffer. (Order per flow is checked by fault-free runs only: a reroute
/// may let a message on the new path overtake one still on the old.)
fn assert_integrity(what: &str, r: &serde_json::Value) {
    let t = &r["totals"];
    for field in ["duplicates", "corrupted", "misdelivered_packets"] {
        assert_eq!(t[field], 0, "{what}: {field}: {r:#}");
    }
    assert_eq!(r["credit_violations"], 0, "{what}: {r:#}");
}

/// A fault-free run: every message sent arrives, no drops at all.
fn lossless(
    tag: &str,
    topo: &str,
    pattern: &str,
    switching: &str,
    vcs: &str,
    extra: &[&str],
) -> serde_json::Value {
    let ns = Netns::new(tag);
    let mut args = vec![
        "--pattern",
        pattern,
        "--switching",
        switching,
        "--vcs",
        vcs,
        "--bandwidth",
        "50000",
        "--load",
        "0.1",
        "--duration",
        "2s",
    ];
    args.extend_from_slice(extra);
    let r = ns.up(topo, &args);
    let what = format!("{topo} {pattern} {switching} {vcs} VCs over ethernet");
    assert_integrity(&what, &r);
    let t = &r["totals"];
    assert_eq!(t["out_of_order"], 0, "{what}: {r:#}");
    assert!(n(&t["messages_sent"]) > 0, "{what}: nothing sent: {r:#}");
    assert_eq!(t["messages_delivered"], t["messages_sent"], "{what}: {r:#}");
    assert_eq!(t["incomplete_packets"], 0, "{what}: {r:#}");
    assert!(
        r["drops"].as_object().unwrap().is_empty(),
        "{what}: drops: {r:#}"
    );
    assert_eq!(r["lossless"], true, "{what}: {r:#}");
    r
}

#[test]
fn kary_4_2_all_to_all_wormhole_1vc_over_ethernet() {
    if !is_root() {
        return;
    }
    let r = lossless("a2a", "kary-4-2.yaml", "all-to-all", "wormhole", "1", &[]);
    assert_eq!(r["totals"]["messages_delivered"], 16 * 15);
}

#[test]
fn kary_4_2_uniform_vct_2vcs_over_ethernet() {
    if !is_root() {
        return;
    }
    lossless("vct", "kary-4-2.yaml", "uniform", "vct", "2", &[]);
}

#[test]
fn mesh_3x3_all_to_all_vct_long_messages_over_ethernet() {
    if !is_root() {
        return;
    }
    // 24-flit messages are cut into 3 packets of 8.
    let r = lossless(
        "mesh",
        "mesh-3x3.yaml",
        "all-to-all",
        "vct",
        "1",
        &["--message-flits", "24"],
    );
    assert_eq!(r["totals"]["messages_delivered"], 9 * 8);
}

/// A link killed at 1 s of 3 s of uniform traffic, the controller
/// reroutes: only what was on or headed for the dead link is lost, and the
/// traffic after the fault gets through. Returns the report and why the two
/// ends said their port went down (from the run's event log).
fn kill_and_recover(tag: &str, kill_by: &str) -> (serde_json::Value, Vec<String>) {
    let ns = Netns::new(tag);
    let r = ns.up(
        "kary-4-2.yaml",
        &[
            "--pattern",
            "uniform",
            "--load",
            "0.2",
            "--bandwidth",
            "50000",
            "--duration",
            "3s",
            "--dead-after",
            "300ms",
            "--kill-link",
            "s0-0:4",
            "--kill-at",
            "1s",
            "--kill-by",
            kill_by,
        ],
    );
    let what = format!("link killed by {kill_by} over ethernet");
    assert_integrity(&what, &r);
    let faults = r["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 1, "{what}: {r:#}");
    assert!(
        faults[0]["detection_ms"].as_f64().is_some(),
        "{what}: nobody noticed: {r:#}"
    );
    assert!(
        faults[0]["routes_installed_ms"].as_f64().is_some(),
        "{what}: not rerouted: {r:#}"
    );
    let t = &r["totals"];
    let (sent, delivered) = (n(&t["messages_sent"]), n(&t["messages_delivered"]));
    // Every lost message lost at least one flit that a switch dropped and
    // counted (buffered for the dead port, or routed to it before the new
    // tables), or that was on the link itself when it died (at most a
    // buffer per VC each way: 2 x 2 x 16 flits).
    let dropped: u64 = r["drops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(
        sent > 100 && sent - delivered <= dropped + 2 * 2 * 16,
        "{what}: {sent} sent, {delivered} delivered, {dropped} flits dropped: {r:#}"
    );
    // Two thirds of the traffic came after the fault.
    assert!(
        delivered * 10 >= sent * 9,
        "{what}: the fabric did not recover: {r:#}"
    );
    let events = std::fs::read_to_string(ns.run_dir.join("events.jsonl")).unwrap();
    // The first port-down of each end of the link says who noticed.
    let mut first = std::collections::BTreeMap::new();
    for line in events.lines() {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        let end = (e["source"].as_str(), e["event"]["port"].as_u64());
        if e["event"]["event"] == "port-down"
            && matches!(end, (Some("s0-0"), Some(4)) | (Some("s1-0"), Some(0)))
        {
            first
                .entry(end.0.unwrap().to_string())
                .or_insert_with(|| e["event"]["reason"].as_str().unwrap().to_string());
        }
    }
    let reasons: Vec<String> = first.into_values().collect();
    assert_eq!(
        reasons.len(),
        2,
        "{what}: both ends must report the link down: {events}"
    );
    (r, reasons)
}

#[test]
fn a_link_killed_by_the_controller_is_rerouted_around_over_ethernet() {
    if !is_root() {
        return;
    }
    let (r, reasons) = kill_and_recover("kill", "admin");
    assert_eq!(r["faults"][0]["kind"], "link-down");
    assert!(
        reasons.iter().all(|w| w == "disabled by the controller"),
        "{reasons:?}"
    );
}

#[test]
fn a_pulled_veth_cable_is_detected_by_keepalive_and_rerouted_around() {
    if !is_root() {
        return;
    }
    let (r, reasons) = kill_and_recover("carrier", "carrier");
    assert_eq!(r["faults"][0]["kind"], "carrier-down");
    // Nobody told the daemons: both ends noticed the silence themselves.
    assert!(
        reasons.iter().all(|w| w == "keepalive timeout"),
        "{reasons:?}"
    );
}

#[test]
fn bad_ethernet_arguments_are_refused_before_anything_starts() {
    if !is_root() {
        return;
    }
    let t = topology("kary-4-2.yaml");
    let t = t.to_str().unwrap();
    // A namespace that exists already is not taken over (nor deleted).
    let taken = Netns::new("taken");
    assert!(Command::new("ip")
        .args(["netns", "add", &taken.name])
        .status()
        .unwrap()
        .success());
    for (args, expect) in [
        (
            vec!["up", t, "--transport", "ethernet", "--netns", &taken.name],
            "exists already",
        ),
        (
            vec!["up", t, "--transport", "ethernet", "--netns", "no/slash"],
            "not a usable network namespace name",
        ),
        (
            vec!["up", t, "--netns", "flitnet-udp"],
            "only made for --transport ethernet",
        ),
        (
            vec![
                "up",
                t,
                "--transport",
                "udp",
                "--kill-link",
                "s0-0:4",
                "--kill-by",
                "carrier",
            ],
            "needs --transport ethernet or shm",
        ),
        (vec!["up", t, "--transport", "token-ring"], "token-ring"),
        (
            vec![
                "compose",
                t,
                "--output",
                "/tmp/flitnet-never",
                "--transport",
                "ethernet",
            ],
            "compose bundles carry flits over UDP",
        ),
    ] {
        let out = flitctl(&args).unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(expect),
            "{args:?}: expected `{expect}` in: {err}"
        );
    }
    assert!(
        taken.exists(),
        "flitctl deleted a namespace it did not make"
    );
}

/// A chaos scenario over ethernet: a SIGKILLed switchd (its veths stay up,
/// nobody reads them) is detected by keepalive and restarted into the same
/// namespace; a switch whose ports are all disabled (`SetAllPorts`) is
/// routed around and restored. Every loss is explained by a counted cause.
#[test]
fn chaos_sigkill_restart_and_switch_disable_over_ethernet() {
    if !is_root() {
        return;
    }
    let tag = "chaos";
    let run_dir = std::env::temp_dir().join(format!("flitnet-test-eth-{tag}"));
    let _ = std::fs::remove_dir_all(&run_dir);
    let file = std::env::temp_dir().join(format!("flitnet-test-eth-{tag}.yaml"));
    std::fs::write(
        &file,
        format!(
            "topology: {}\n\
             mechanism: reroute\n\
             traffic: {{pattern: uniform, load: 0.05, duration: 4.5s}}\n\
             fabric: {{bandwidth: 20000, dead-after: 300ms, transport: ethernet}}\n\
             timeline:\n\
             \x20 - {{at: 0.8s, action: sigkill-switch, target: \"s1-1\"}}\n\
             \x20 - {{at: 1.8s, action: restart-switch, target: \"s1-1\"}}\n\
             \x20 - {{at: 2.6s, action: kill-switch, target: \"s1-2\"}}\n\
             \x20 - {{at: 3.2s, action: restore-switch, target: \"s1-2\"}}\n",
            topology("kary-4-2.yaml").display()
        ),
    )
    .unwrap();
    let result = flitctl_json(&[
        "chaos",
        file.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
    ]);
    // The namespace flitctl made is recorded in the run's state file: it
    // must be gone (and is deleted here if not, before failing).
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("state.json")).unwrap()).unwrap();
    let ns = state["netns"]
        .as_str()
        .expect("an ethernet run records its namespace");
    let left = Netns {
        name: ns.to_string(),
        run_dir: run_dir.clone(),
    };
    assert!(!left.exists(), "flitctl left network namespace {ns} behind");
    assert_eq!(processes_matching(run_dir.to_str().unwrap()), 0);
    let report = result.unwrap_or_else(|e| panic!("chaos over ethernet: {e:#}"));
    let action = |kind: &str| {
        report["actions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["action"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {report:#}"))
            .clone()
    };
    let kill = action("sigkill-switch");
    assert_eq!(kill["detection_reason"], "keepalive timeout", "{kill:#}");
    assert!(kill["routes_installed_ms"].as_f64().is_some(), "{kill:#}");
    let restart = action("restart-switch");
    assert!(
        restart["detection_ms"].as_f64().is_some(),
        "the restarted switchd was never heard on its veths: {restart:#}"
    );
    assert!(
        restart["routes_installed_ms"].as_f64().is_some(),
        "{restart:#}"
    );
    for kind in ["kill-switch", "restore-switch"] {
        let a = action(kind);
        assert!(a["routes_installed_ms"].as_f64().is_some(), "{a:#}");
    }
    let acc = &report["accounting"];
    assert_eq!(acc["unaccounted_messages"], 0, "{report:#}");
    assert_eq!(report["run"]["totals"]["duplicates"], 0, "{report:#}");
    assert_eq!(report["run"]["credit_violations"], 0, "{report:#}");
    assert_eq!(
        report["failed_actions"],
        serde_json::json!([]),
        "{report:#}"
    );
    assert!(n(&report["run"]["totals"]["messages_delivered"]) > 0);
    let _ = std::fs::remove_file(&file);
}
