//! SBRP (seed 003, docs/sbrp.md) end to end: `flitctl up` starts one real
//! `switchd` per switch and one `hostd` per host of the 4-cube, long
//! messages (64 flits, one packet each) flow, and the link `r05:2`–`r07:2`
//! is killed mid-run while packets cross it. The controller re-routes
//! around it; in between, packets are cut on the link or dropped at its
//! ends, and the recovery protocol must resend every one of them.
//!
//! The traffic is a fixed partial permutation whose e-cube paths cross
//! the killed link in both directions (plus two flows that do not), so the
//! fault always hits traffic; the run without recovery shows it does.
//!
//! Asserted on counts only (the machine is shared and slow): every message
//! sent is delivered exactly once and in order, senders received recover
//! requests and resent packets (a protocol that did nothing fails), and no
//! sender still holds a message at the end (the drain waits for the hold
//! windows). The runs are serialised: four fabrics of 32 processes at once
//! on two cores would miss keepalives.

use flitnet::{flitctl_json, processes_matching, topology};
use std::sync::Mutex;

static ONE_FABRIC_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Sources and destinations whose e-cube paths use r07→r05 (6→9, 7→1) or
/// r05→r07 (4→11, 5→3), and two bystander flows.
const PERMUTATION: &str = "6 9\n7 1\n4 11\n5 3\n0 14\n10 12\n";

fn run(protocol: &str) -> serde_json::Value {
    let report = run_with(protocol, None, &["--kill-link", "r05:2"]);
    // A killed link in a hypercube cuts nobody off.
    assert_eq!(report["totals"]["lost_unreachable"], 0, "{report:#}");
    assert!(report["unreachable_hosts"].as_array().unwrap().is_empty());
    report
}

/// `flitctl up` on the 4-cube with `fault` at 1 s; traffic on the flows
/// crossing r05–r07 at load 0.4, or `load` uniform traffic.
fn run_with(protocol: &str, uniform_load: Option<&str>, fault: &[&str]) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!(
        "flitnet-test-sbrp-{protocol}-{}",
        fault.join("").replace([':', '-'], "")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let perm = dir.join("cross-r05-r07.txt");
    std::fs::write(&perm, PERMUTATION).unwrap();
    let (pattern, load) = match uniform_load {
        Some(load) => ("uniform".to_string(), load),
        None => (format!("permutation:{}", perm.display()), "0.4"),
    };
    let topo = topology("hypercube-4.yaml");
    let mut args = vec![
        topo.to_str().unwrap(),
        "--pattern",
        &pattern,
        "--message-flits",
        "64",
        "--max-packet-flits",
        "64",
        "--bandwidth",
        "20000",
        "--load",
        load,
        "--duration",
        "3s",
        "--kill-at",
        "1s",
    ];
    args.extend_from_slice(fault);
    run_up(protocol, &dir, &args)
}

/// `flitctl up ARGS --recovery-protocol PROTOCOL` with its run dir in
/// `dir` (removed after), one fabric at a time; checks what every run must
/// show and returns the report.
fn run_up(protocol: &str, dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let _one = ONE_FABRIC_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let run_dir = dir.join("run");
    let mut args: Vec<&str> = [&["up"], args].concat();
    args.extend([
        "--recovery-protocol",
        protocol,
        "--run-dir",
        run_dir.to_str().unwrap(),
    ]);
    let report = flitctl_json(&args).unwrap_or_else(|e| panic!("{protocol}: {e:#}"));
    assert_eq!(
        processes_matching(run_dir.to_str().unwrap()),
        0,
        "{protocol}: daemons left running"
    );
    let t = &report["totals"];
    assert!(
        t["messages_sent"].as_u64().unwrap() > 100,
        "{protocol}: too little traffic: {report:#}"
    );
    let fault = &report["faults"][0];
    // Faithful mode (`--recovery none`, local rerouting): no controller.
    let controller = !fault_args_say(&args, "--recovery", "none");
    assert!(
        !controller || fault["routes_installed_ms"].is_number(),
        "{protocol}: the controller never re-routed: {report:#}"
    );
    assert_eq!(report["credit_violations"], 0, "{protocol}: {report:#}");
    let _ = std::fs::remove_dir_all(dir);
    report
}

/// `zero` totals are 0, the run is lossless, and recovery really acted
/// (recover requests sent, packets resent).
fn assert_recovered_exactly_once(r: &serde_json::Value, protocol: &str, zero: &[&str]) {
    for field in zero {
        assert_eq!(u(r, field), 0, "{protocol}: {field}: {r:#}");
    }
    assert_eq!(r["lossless"], true, "{protocol}: {r:#}");
    assert!(u(r, "recover_requests") > 0, "{protocol}: no RRQ: {r:#}");
    assert!(u(r, "resent_packets") > 0, "{protocol}: no resend: {r:#}");
}

/// Whether `args` has `flag` followed by `value`.
fn fault_args_say(args: &[&str], flag: &str, value: &str) -> bool {
    args.windows(2).any(|w| w[0] == flag && w[1] == value)
}

fn u(report: &serde_json::Value, field: &str) -> u64 {
    report["totals"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("no totals.{field} in {report:#}"))
}

fn check_recovered(protocol: &str) -> serde_json::Value {
    let r = run(protocol);
    for field in [
        "messages_lost",
        "duplicates",
        "out_of_order",
        "corrupted",
        "misdelivered_packets",
        "retained",
    ] {
        assert_eq!(u(&r, field), 0, "{protocol}: {field}: {r:#}");
    }
    assert_eq!(u(&r, "messages_delivered"), u(&r, "messages_sent"));
    assert_eq!(r["lossless"], true, "{protocol}: {r:#}");
    // SBRP did something: the fault hit packets and they were resent.
    assert!(u(&r, "recover_requests") > 0, "{protocol}: no RRQ: {r:#}");
    assert!(u(&r, "resent_packets") > 0, "{protocol}: no resend: {r:#}");
    assert!(u(&r, "resent_flits") > 0, "{protocol}: {r:#}");
    assert!(
        u(&r, "recovered_messages") > 0,
        "{protocol}: no message needed recovery: {r:#}"
    );
    assert!(
        r["drops"]["port-down"].as_u64().unwrap_or(0) > 0,
        "{protocol}: nothing was cut at the dead link: {r:#}"
    );
    r
}

#[test]
fn sbrp0_recovers_every_message_cut_by_a_link_kill() {
    let r = check_recovered("sbrp0");
    // SBRP-0 resends whole packets only.
    assert_eq!(u(&r, "resent_flits"), 64 * u(&r, "resent_packets"), "{r:#}");
}

#[test]
fn sbrp1_recovers_every_message_cut_by_a_link_kill() {
    let r = check_recovered("sbrp1");
    // The switches (node C) report cuts in SBRP-1.
    assert!(u(&r, "rrq_from_switches") > 0, "{r:#}");
}

#[test]
fn sbrp2_recovers_every_message_cut_by_a_link_kill() {
    check_recovered("sbrp2");
}

#[test]
fn without_recovery_the_same_link_kill_loses_messages() {
    let r = run("none");
    assert!(
        u(&r, "messages_lost") > 0,
        "the fault hit no traffic, so the SBRP runs prove nothing: {r:#}"
    );
    assert_eq!(u(&r, "recover_requests"), 0);
    assert_eq!(u(&r, "resent_flits"), 0);
    assert_eq!(r["lossless"], false);
}

/// A SIGKILLed switch takes its host with it (one host per router): flows
/// to and from h07 are lost by definition (spec 003 §5.1) and counted
/// apart; every other message, including those cut while crossing r07,
/// is recovered, and no reachable sender still holds anything.
/// A router SIGKILLed while long messages cross it: its own host is cut
/// off (a hypercube router has one host), every other message arrives
/// exactly once, and SBRP had packets to recover (the kill cut some).
fn check_switch_kill(protocol: &str) {
    let r = run_with(protocol, Some("0.05"), &["--kill-switch", "r07"]);
    assert_eq!(
        r["unreachable_hosts"],
        serde_json::json!(["h07"]),
        "{protocol}: {r:#}"
    );
    assert!(u(&r, "lost_unreachable") > 0, "{protocol}: {r:#}");
    assert_recovered_exactly_once(
        &r,
        protocol,
        &["messages_lost", "duplicates", "out_of_order", "retained"],
    );
    eprintln!(
        "{protocol}, r07 killed: {} sent, {} lost to/from h07, {} recover requests, {} packets resent",
        u(&r, "messages_sent"),
        u(&r, "lost_unreachable"),
        u(&r, "recover_requests"),
        u(&r, "resent_packets")
    );
}

#[test]
fn sbrp0_recovers_all_but_the_dead_nodes_flows_after_a_switch_kill() {
    check_switch_kill("sbrp0");
}

#[test]
fn sbrp1_recovers_all_but_the_dead_nodes_flows_after_a_switch_kill() {
    check_switch_kill("sbrp1");
}

#[test]
fn sbrp2_recovers_all_but_the_dead_nodes_flows_after_a_switch_kill() {
    check_switch_kill("sbrp2");
}

/// A transient node fault in seed 003's faithful mode (local rerouting, no
/// controller, neighbours told at once): on the 7×7 mesh r24 (the centre,
/// on many XY paths) is SIGKILLed at 0.8 s, started again 0.5 s later (a
/// fresh process, new link epoch, the initial tables; its neighbours'
/// ports come back up), SIGKILLed again at 1.5 s and started again at
/// 2.0 s, while 128-flit messages (one packet each) cross it. Its host is
/// back by the end, so every message, its own included, must arrive
/// exactly once. Without the sync request (docs/sbrp.md, "Transient node
/// faults") this loses a message in most runs: the neighbours send data
/// to the new r24 with the old incarnation's epoch the moment their ports
/// come back up.
fn check_kill_restart_kill(protocol: &str) {
    let dir = std::env::temp_dir().join(format!("flitnet-test-sbrp-{protocol}-restart"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let topo = topology("mesh-7x7.yaml");
    let r = run_up(
        protocol,
        &dir,
        &[
            topo.to_str().unwrap(),
            "--engine",
            "local-reroute",
            "--recovery",
            "none",
            "--notify-neighbours",
            "--kill-switch",
            "r24",
            "--kill-switch",
            "r24",
            "--kill-every",
            "700ms",
            "--restart-after",
            "500ms",
            "--kill-at",
            "800ms",
            "--message-flits",
            "128",
            "--max-packet-flits",
            "128",
            "--buffer-depth",
            "8",
            "--bandwidth",
            "20000",
            "--dead-after",
            "3s",
            "--load",
            "0.03",
            "--duration",
            "3s",
        ],
    );
    assert_eq!(
        r["unreachable_hosts"],
        serde_json::json!([]),
        "{protocol}: {r:#}"
    );
    assert_recovered_exactly_once(
        &r,
        protocol,
        &[
            "messages_lost",
            "lost_unreachable",
            "duplicates",
            "out_of_order",
            "corrupted",
            "misdelivered_packets",
            "retained",
        ],
    );
    assert_eq!(r["faults"].as_array().map(Vec::len), Some(2), "{r:#}");
    eprintln!(
        "{protocol}, r24 killed, restarted, killed: {} sent, {} lost, {} lost to/from h24, {} recover requests, {} packets resent",
        u(&r, "messages_sent"),
        u(&r, "messages_lost"),
        u(&r, "lost_unreachable"),
        u(&r, "recover_requests"),
        u(&r, "resent_packets")
    );
}

#[test]
fn sbrp0_loses_nothing_when_a_router_is_killed_restarted_and_killed_again() {
    check_kill_restart_kill("sbrp0");
}

#[test]
fn sbrp1_loses_nothing_when_a_router_is_killed_restarted_and_killed_again() {
    check_kill_restart_kill("sbrp1");
}

/// A router SIGKILLed and started again faster than keepalive detection
/// (docs/sbrp.md, "A switch restarted faster than keepalive detection"):
/// r05, on the e-cube paths of four of the flows, dies at 1 s and is back
/// 100 ms later, with `--dead-after 1s`, so no neighbour ever sees its
/// ports go down. What it held and what was sent into it meanwhile is
/// gone without a cut any switch saw; every message must still arrive
/// exactly once, and its host, back with it, is cut off from nobody.
fn check_restart_within_detection(protocol: &str) {
    let r = run_with(
        protocol,
        None,
        &[
            "--kill-switch",
            "r05",
            "--restart-after",
            "100ms",
            "--dead-after",
            "1s",
            "--recovery",
            "none",
        ],
    );
    assert!(
        r["unreachable_hosts"].as_array().unwrap().is_empty(),
        "{protocol}: {r:#}"
    );
    assert_recovered_exactly_once(
        &r,
        protocol,
        &[
            "messages_lost",
            "lost_unreachable",
            "duplicates",
            "out_of_order",
            "corrupted",
            "misdelivered_packets",
            "retained",
        ],
    );
    eprintln!(
        "{protocol}, r05 restarted within detection: {} sent, {} recover requests ({} from switches, {} from receivers, {} gap requests), {} packets resent",
        u(&r, "messages_sent"),
        u(&r, "recover_requests"),
        u(&r, "rrq_from_switches"),
        u(&r, "rrq_from_receivers"),
        u(&r, "gap_requests"),
        u(&r, "resent_packets")
    );
}

#[test]
fn sbrp1_loses_nothing_when_a_router_restarts_faster_than_detection() {
    check_restart_within_detection("sbrp1");
}

#[test]
fn sbrp2_loses_nothing_when_a_router_restarts_faster_than_detection() {
    check_restart_within_detection("sbrp2");
}

/// `up --stop-switch`: r05, on four flows' e-cube paths, is SIGSTOPped at
/// 1 s for 200 ms, less than keepalive detection (`--dead-after 1s`), and
/// let go with SIGCONT. Its neighbours' credits hold their flits back
/// meanwhile and nothing reaching it is lost: no port goes down, nothing
/// is cut, nothing needs recovering, every message arrives exactly once.
#[test]
fn a_router_stopped_for_less_than_detection_is_noticed_by_nobody_and_loses_nothing() {
    let r = run_with(
        "sbrp1",
        None,
        &[
            "--stop-switch",
            "r05",
            "--stop-for",
            "200ms",
            "--dead-after",
            "1s",
            "--recovery",
            "none",
        ],
    );
    let fault = &r["faults"][0];
    assert_eq!(fault["kind"], "stop-switch", "{r:#}");
    assert_eq!(fault["element"], "r05", "{r:#}");
    assert!(fault["detection_ms"].is_null(), "{fault:#}");
    for field in [
        "messages_lost",
        "duplicates",
        "out_of_order",
        "retained",
        "recover_requests",
        "resent_packets",
    ] {
        assert_eq!(u(&r, field), 0, "{field}: {r:#}");
    }
    assert_eq!(r["lossless"], true, "{r:#}");
    assert!(r["drops"].as_object().is_none_or(|d| d.is_empty()), "{r:#}");
}

/// Seed 003's faithful mode deadlocks with two dead routers in one mesh
/// column (docs/sbrp.md, "Deadlock"): 7×7 mesh, r10 and r38 (column 3)
/// SIGKILLed at 0.8 s and 1.4 s, neighbours told at once, uniform 8-flit
/// traffic at load 0.15. `hoq_lifetime` is `--hoq-lifetime`'s value.
fn two_dead_routers_in_a_column(protocol: &str, hoq_lifetime: &str) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("flitnet-test-sbrp-{protocol}-hoq-{hoq_lifetime}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let topo = topology("mesh-7x7.yaml");
    let r = run_up(
        protocol,
        &dir,
        &[
            topo.to_str().unwrap(),
            "--engine",
            "local-reroute",
            "--recovery",
            "none",
            "--notify-neighbours",
            "--kill-switch",
            "r10",
            "--kill-switch",
            "r38",
            "--kill-every",
            "600ms",
            "--kill-at",
            "800ms",
            "--message-flits",
            "8",
            "--max-packet-flits",
            "8",
            "--buffer-depth",
            "8",
            "--bandwidth",
            "20000",
            "--dead-after",
            "3s",
            "--load",
            "0.15",
            "--duration",
            "3s",
            "--hoq-lifetime",
            hoq_lifetime,
        ],
    );
    assert_eq!(
        r["unreachable_hosts"],
        serde_json::json!(["h10", "h38"]),
        "{protocol}: {r:#}"
    );
    eprintln!(
        "{protocol}, r10+r38 dead, --hoq-lifetime {hoq_lifetime}: {} sent, {} delivered, {} lost, {} duplicated, {} retained, hoq drops {}, {} recover requests, {} packets resent",
        u(&r, "messages_sent"),
        u(&r, "messages_delivered"),
        u(&r, "messages_lost"),
        u(&r, "duplicates"),
        u(&r, "retained"),
        r["drops"]["hoq-lifetime"].as_u64().unwrap_or(0),
        u(&r, "recover_requests"),
        u(&r, "resent_packets")
    );
    r
}

#[test]
fn the_hoq_lifetime_unwedges_local_rerouting_around_two_dead_routers_in_a_column() {
    // The default (`auto`: on for local rerouting with SBRP): the deadlocked
    // heads are discarded and resent, the fabric drains, no sender still
    // holds a message, nothing is duplicated. A few messages are still lost
    // on the flows that must pass both faults with one misroute (the
    // eager-resend bound, docs/sbrp.md "What remains"): bounded, not 0.
    let r = two_dead_routers_in_a_column("sbrp0", "auto");
    for field in [
        "retained",
        "duplicates",
        "corrupted",
        "misdelivered_packets",
    ] {
        assert_eq!(u(&r, field), 0, "{field}: {r:#}");
    }
    assert!(
        r["drops"]["hoq-lifetime"].as_u64().unwrap_or(0) > 0,
        "the lifetime never fired: {r:#}"
    );
    assert!(u(&r, "resent_packets") > 0, "{r:#}");
    assert!(
        u(&r, "messages_lost") * 100 < 3 * u(&r, "messages_sent"),
        "{r:#}"
    );
}

#[test]
fn without_the_hoq_lifetime_two_dead_routers_in_a_column_wedge_the_mesh() {
    // The control experiment: the same run with the lifetime off wedges
    // (senders still hold thousands of messages when the drain gives up).
    let r = two_dead_routers_in_a_column("sbrp0", "off");
    assert!(u(&r, "retained") > 100, "no wedge: {r:#}");
    assert_eq!(r["drops"]["hoq-lifetime"].as_u64().unwrap_or(0), 0);
}
