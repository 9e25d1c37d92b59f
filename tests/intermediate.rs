//! End-to-end test of seed 004's intermediate nodes through the real
//! processes: `flitctl up --mechanism i` brings up a 3x3x3 torus (27
//! `switchd` + 27 `hostd`) with one escape VC set per leg, kills a link
//! mid-run, and pushes the fault set to the hosts, which from then on route
//! the packets whose minimal paths touch the dead link through an
//! intermediate node. Switches are not re-routed. Assertions are on counts
//! only: nothing is dropped after the switchover, every message lost was
//! lost to a drop at the kill, and the intermediate-node counters moved.

use flitnet::{flitctl, topology, RunDir};
use std::sync::Mutex;

/// One fabric (54 processes) at a time on two cores.
static FABRIC: Mutex<()> = Mutex::new(());

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// `flitctl up --mechanism MECH --vcs VCS` on the 3x3x3 torus with the link
/// (0,0,0)–(1,0,0) killed mid-run; checks what every mechanism promises and
/// returns the report.
fn kill_a_torus_link(mech: &str, vcs: &str) -> serde_json::Value {
    let _one = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let run_dir = RunDir::new(&format!("inodes-{mech}"));
    let topo = topology("torus-3x3x3.yaml");
    let result = run_dir.flitctl_json(&[
        "up",
        topo.to_str().unwrap(),
        "--mechanism",
        mech,
        "--vcs",
        vcs,
        "--pattern",
        "uniform",
        "--bandwidth",
        "20000",
        "--load",
        "0.05",
        "--duration",
        "4s",
        // r00 port 1 is +X: the link (0,0,0)–(1,0,0).
        "--kill-link",
        "r00:1",
        "--kill-at",
        "1.5s",
        // The kill is an admin-down at both ends, seen at once; a long
        // keepalive timeout keeps a starved machine (2 shared cores) from
        // declaring healthy links dead.
        "--dead-after",
        "5s",
    ]);
    let report = result.unwrap_or_else(|e| panic!("{mech}: {e:#}"));
    let t = &report["totals"];
    let i = &report["intermediate"];
    let (sent, delivered, lost) = (
        u(&t["messages_sent"]),
        u(&t["messages_delivered"]),
        u(&t["messages_lost"]),
    );
    assert!(sent > 0, "{report:#}");
    assert_eq!(delivered + lost, sent, "{report:#}");
    for field in ["duplicates", "corrupted", "misdelivered_packets"] {
        assert_eq!(t[field], 0, "{mech}: {field}: {report:#}");
    }
    assert_eq!(report["credit_violations"], 0, "{report:#}");
    assert_eq!(i["vcs"].to_string(), vcs);
    assert_eq!(i["packets_unrouted"], 0, "one fault is tolerated: {i:#}");
    // Drops only at the kill instant: none after the switchover, and every
    // lost message lost at least one flit then: dropped by a switch, or
    // caught on the link the controller disabled.
    assert_eq!(i["drops_after_switchover"], 0, "{mech}: {report:#}");
    let at_kill = u(&i["drops_at_switchover"]);
    let on_link = u(&i["lost_at_disabled_ports"]);
    assert!(
        lost <= at_kill + on_link,
        "{mech}: lost {lost} messages, {at_kill} drops, {on_link} on the link: {report:#}"
    );
    assert_eq!(u(&i["switch_drops"]), at_kill);
    // Only dead-port drops (no leg without VCs, no bad VC).
    let drops = report["drops"].as_object().unwrap();
    assert!(
        drops.keys().all(|k| k == "port-down"),
        "{mech}: unexpected drops: {drops:?}"
    );
    report
}

#[test]
fn torus_hosts_switch_to_intermediate_nodes_after_a_link_kill() {
    // I: 2 legs × (dateline pair) + 1 adaptive.
    let report = kill_a_torus_link("i", "5");
    let i = &report["intermediate"];
    assert_eq!(i["mechanism"], "i");
    // The hosts switched: packets went via intermediates, and the switches
    // popped the legs there (never more pops than such packets: one IN each).
    let via = u(&i["packets_via_intermediate"]);
    let pops = u(&i["intermediate_pops"]);
    assert!(via > 0, "no packet used an intermediate node: {i:#}");
    assert!(pops > 0 && pops <= via, "{i:#}");
}

#[test]
fn torus_hosts_switch_to_misroute_runs_after_a_link_kill() {
    // M: one leg, direction-order escape pair + 1 adaptive.
    let report = kill_a_torus_link("m", "3");
    let i = &report["intermediate"];
    assert_eq!(i["mechanism"], "m");
    let misrouted = u(&i["packets_misrouted"]);
    assert!(misrouted > 0, "no packet was misrouted: {i:#}");
    assert!(u(&i["misroute_hops"]) > 0, "{i:#}");
    assert_eq!(i["intermediate_pops"], 0);
}

#[test]
fn a_mechanism_needing_more_vcs_than_configured_is_refused_before_bring_up() {
    let topo = topology("torus-3x3x3.yaml");
    // I×2 on a torus: 3 legs × 2 + 1 adaptive = 7 VCs.
    let out = flitctl(&[
        "up",
        topo.to_str().unwrap(),
        "--mechanism",
        "ix2",
        "--vcs",
        "5",
    ])
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs 7 virtual channels") && err.contains("--vcs 7"),
        "{err}"
    );
    // Fat-trees have no intermediate nodes.
    let tree = topology("kary-4-2.yaml");
    let out = flitctl(&[
        "up",
        tree.to_str().unwrap(),
        "--mechanism",
        "i",
        "--vcs",
        "5",
    ])
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("applies to meshes and tori only"), "{err}");
}

#[test]
fn chaos_pushes_each_detected_fault_to_the_hosts_and_accounts_every_loss() {
    let _one = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let run_dir = RunDir::new("inodes-chaos");
    let scenario =
        flitnet::workspace_dir().join("topologies/scenarios/torus-3x3x3-intermediate.yaml");
    let result = run_dir.flitctl_json(&["chaos", scenario.to_str().unwrap()]);
    let report = result.unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(report["promise_kept"], true, "{}", report["promise"]);
    assert_eq!(
        report["accounting"]["unaccounted_messages"], 0,
        "{report:#}"
    );
    assert_eq!(report["run"]["totals"]["duplicates"], 0);
    // Both kills led to a push of the (growing) fault set.
    let actions = report["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 2, "{report:#}");
    for a in actions {
        assert!(a["routes_installed_ms"].is_number(), "no push after {a:#}");
    }
    let events = std::fs::read_to_string(run_dir.path().join("events.jsonl")).unwrap();
    let pushes: Vec<serde_json::Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["event"]["engine"] == "intermediate-nodes")
        .collect();
    assert_eq!(pushes.len(), 2, "{events}");
    assert_eq!(pushes[1]["event"]["faulty_links"], 2);
    assert_eq!(pushes[1]["event"]["not_tolerated_pairs"], 0);
}
