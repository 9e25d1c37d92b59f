//! End-to-end chaos tests: `flitctl chaos` brings up real `switchd` and
//! `hostd` processes, injects faults while traffic runs, and the controller
//! re-routes on the port-down events the daemons push. Each run's traffic
//! lasts at most 6 s; runs are serialised (the machine has two cores) and
//! each must leave no process behind.

use flitnet::{flitctl, flitctl_json, processes_matching, topology};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One fabric at a time: 112 processes on two cores are plenty.
static FABRIC: Mutex<()> = Mutex::new(());

fn scratch(name: &str) -> PathBuf {
    let dir = scratch_dir(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The run directory [`chaos`] used for `name`.
fn scratch_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("flitnet-chaos-{name}-{}", std::process::id()))
}

/// Writes `body` (without the topology line) as a scenario for `topo`.
/// The fabric's transport is the default, shm, unless `body` says udp.
fn scenario(name: &str, topo: &str, body: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("flitnet-chaos-{name}-{}.yaml", std::process::id()));
    let text = format!("topology: {}\n{body}", topology(topo).display());
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs a scenario; checks the report files and that nothing is left running.
fn chaos(name: &str, scenario: &Path) -> Value {
    let _one = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let run_dir = scratch(name);
    let result = flitctl_json(&[
        "chaos",
        scenario.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
    ]);
    let left = processes_matching(run_dir.to_str().unwrap());
    assert_eq!(left, 0, "{name}: {left} daemons left running");
    // Nor ring files (the shm transport's, under /dev/shm).
    let base = format!(
        "flitnet-{}-",
        run_dir.file_name().unwrap().to_string_lossy()
    );
    let rings: Vec<_> = std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&base))
        .collect();
    assert!(rings.is_empty(), "{name}: ring files left: {rings:?}");
    let report = result.unwrap_or_else(|e| panic!("{name}: {e:#}"));
    for file in [
        "report.json",
        "report.txt",
        "throughput.svg",
        "events.jsonl",
    ] {
        assert!(
            run_dir.join(file).exists(),
            "{name}: no {file} in the run dir"
        );
    }
    let svg = std::fs::read_to_string(run_dir.join("throughput.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("stroke-dasharray"),
        "{name}: plot lacks fault markers"
    );
    report
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn action<'a>(report: &'a Value, kind: &str) -> &'a Value {
    report["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {report:#}"))
}

/// Every loss is explained by a counted cause; nothing duplicated.
fn assert_losses_accounted(report: &Value) {
    let acc = &report["accounting"];
    assert_eq!(acc["unaccounted_messages"], 0, "{report:#}");
    assert!(
        acc["messages_lost"].as_u64().unwrap() <= acc["accounted_flits"].as_u64().unwrap(),
        "{acc:#}"
    );
    assert_eq!(report["run"]["totals"]["duplicates"], 0);
    assert_eq!(report["run"]["credit_violations"], 0);
    assert_eq!(report["promise_kept"], true, "{}", report["promise"]);
    assert_eq!(
        report["failed_actions"],
        serde_json::json!([]),
        "{report:#}"
    );
}

#[test]
fn controller_reroutes_a_4_ary_3_tree_around_a_dead_link_and_a_killed_switch() {
    let file = scenario(
        "k43",
        "kary-4-3.yaml",
        "mechanism: reroute\nseed: 3\n\
         traffic: {pattern: uniform, load: 0.05, duration: 6s}\n\
         fabric: {bandwidth: 20000, dead-after: 600ms}\n\
         timeline:\n\
         \x20 - {at: 1.5s, action: kill-link, target: \"s1-00:4\"}\n\
         \x20 - {at: 3s, action: sigkill-switch, target: \"s1-05\"}\n",
    );
    let report = chaos("k43", &file);
    let link = action(&report, "kill-link");
    // Both ends are disabled by the controller: one of them reports it as
    // such (not as a keepalive timeout). No bound on the time: that is the
    // benchmark's business, and a loaded CI machine stretches it.
    assert!(f(&link["detection_ms"]) >= 0.0, "{link:#}");
    assert_eq!(
        link["detection_reason"], "disabled by the controller",
        "{link:#}"
    );
    let end = link["detected_by"].as_str().unwrap();
    assert!(
        end == "s1-00" || end == "s2-00",
        "{end} is not an end of the link"
    );
    let link_installed = f(&link["routes_installed_ms"]);
    assert!(link_installed >= f(&link["detection_ms"]), "{link:#}");
    let kill = action(&report, "sigkill-switch");
    assert_eq!(kill["detection_reason"], "keepalive timeout", "{kill:#}");
    let by = kill["detected_by"].as_str().unwrap();
    assert!(
        by.starts_with("s0-") || by.starts_with("s2-"),
        "{by} is no neighbour of s1-05"
    );
    let detection = f(&kill["detection_ms"]);
    let installed = f(&kill["routes_installed_ms"]);
    assert!(installed >= detection, "{kill:#}");
    assert!(report["reroutes"].as_u64().unwrap() >= 2);
    assert!(
        report["run"]["totals"]["messages_delivered"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        report["accounting"]["killed_switch_capacity_flits"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_losses_accounted(&report);
    eprintln!(
        "4-ary 3-tree: link detected {:.1} ms, installed {link_installed:.1} ms; SIGKILL detected {detection:.1} ms by {by}, installed {installed:.1} ms; lost {} of {} ({})",
        f(&link["detection_ms"]),
        report["accounting"]["messages_lost"],
        report["run"]["totals"]["messages_sent"],
        report["accounting"]["dropped_flits"]
    );
}

#[test]
fn a_sigkilled_switchd_is_detected_by_its_neighbours_keepalive_and_restarts() {
    let file = scenario(
        "sigkill",
        "kary-4-2.yaml",
        "mechanism: reroute\n\
         traffic: {pattern: uniform, load: 0.05, duration: 4s}\n\
         fabric: {bandwidth: 20000, dead-after: 300ms}\n\
         timeline:\n\
         \x20 - {at: 1s, action: sigkill-switch, target: \"s1-1\"}\n\
         \x20 - {at: 2.5s, action: restart-switch, target: \"s1-1\"}\n",
    );
    let report = chaos("sigkill", &file);
    let kill = action(&report, "sigkill-switch");
    assert_eq!(kill["detection_reason"], "keepalive timeout", "{kill:#}");
    let by = kill["detected_by"].as_str().unwrap();
    assert!(by.starts_with("s0-"), "{by} is no neighbour of s1-1");
    let detection = f(&kill["detection_ms"]);
    // Last keepalive heard at most one interval (50 ms) before the kill:
    // a detection earlier than that would be a spurious timeout. (No upper
    // bound: a loaded machine delays it, and durations are for benchmarks.)
    assert!(
        detection >= 300.0 - 60.0,
        "detected after {detection} ms with dead_after 300 ms"
    );
    assert!(f(&kill["routes_installed_ms"]) >= detection);
    let restart = action(&report, "restart-switch");
    // The restarted switch is heard again (detection_ms is present).
    let back = f(&restart["detection_ms"]);
    assert!(
        back >= 0.0,
        "restarted switch never heard again: {restart:#}"
    );
    assert!(
        restart["routes_installed_ms"].as_f64().is_some(),
        "{restart:#}"
    );
    assert_losses_accounted(&report);
    // Over shm the restarted switch re-attached to fresh rings, not to the
    // ones its killed run left, and its four neighbours followed it there.
    let reports = std::fs::read(scratch_dir("sigkill").join("reports.json")).unwrap();
    let reports: Value = serde_json::from_slice(&reports).unwrap();
    let counter = |node: &str, key: &str| {
        reports[node]["event_loop"]["transport"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("{node}: no {key}"))
    };
    assert_eq!(
        counter("s1-1", "ring_replaced"),
        4,
        "one fresh file per link"
    );
    for s in ["s0-0", "s0-1", "s0-2", "s0-3"] {
        assert_eq!(counter(s, "ring_reattached"), 1, "{s} followed s1-1");
        assert_eq!(counter(s, "ring_corrupt"), 0, "{s}");
    }
    eprintln!(
        "SIGKILL s1-1: detected {detection:.1} ms by {by}, installed {:.1} ms; restart heard after {back:.1} ms, routes back after {:.1} ms; lost {}",
        f(&kill["routes_installed_ms"]),
        f(&restart["routes_installed_ms"]),
        report["accounting"]["messages_lost"]
    );
}

/// The shipped stop-switch scenario, live: `switchd` processes stopped
/// with SIGSTOP and let go with SIGCONT while traffic flows under SBRP-1.
/// s1-0, stopped for less than keepalive detection, is noticed by no
/// neighbour; s1-1, stopped for longer, is taken for dead: its neighbours
/// report the packets cut toward it and the controller re-routes around it
/// without waiting for its answer. Every message is delivered exactly
/// once, and both processes run to the end.
#[test]
fn switches_stopped_with_sigstop_lose_nothing_under_sbrp1() {
    let file = topology("scenarios/kary-4-2-stop-switch.yaml");
    let report = chaos("stop-switch", &file);
    check_recovered(report.clone(), "sbrp1");
    let actions = report["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 2, "{report:#}");
    let (short, long) = (&actions[0], &actions[1]);
    assert_eq!(short["element"], "s1-0");
    assert_eq!(f(&short["stopped_ms"]), 100.0);
    assert!(short["detection_ms"].is_null(), "{short:#}");
    assert_eq!(long["element"], "s1-1");
    assert_eq!(long["detection_reason"], "keepalive timeout", "{long:#}");
    let detection = f(&long["detection_ms"]);
    assert!(detection >= 300.0 - 60.0, "detected after {detection} ms");
    // Installed before s1-1 ran again (700 ms): the controller did not
    // wait for the switch the faults cut off.
    let installed = f(&long["routes_installed_ms"]);
    assert!(
        installed < 700.0,
        "installed after {installed} ms: {long:#}"
    );
    // Both answered the controller to the end (the list is left out
    // when empty).
    assert!(
        report["run"]["unanswered"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "{report:#}"
    );
    eprintln!(
        "SIGSTOP s1-1 700 ms: detected {detection:.1} ms, routes installed {installed:.1} ms; {} recover requests",
        report["run"]["totals"]["recover_requests"]
    );
}

/// A switch administratively killed (every port set down, its neighbours
/// not told) and restored before their keepalive timeout: its ports drop
/// what the neighbours go on sending, and once enabled each resets its
/// link when it hears its neighbour again (docs/wire.md, "Disabled,
/// unbeknown to the peer"), so the
/// neighbours fail their ports and SBRP-1's node C reports what crossed
/// them. The receivers' gap recovery is off: only the switches' reports
/// can bring those messages back.
#[test]
fn a_switch_restored_within_detection_has_its_losses_reported_by_its_neighbours() {
    let file = scenario(
        "restore-within-detection",
        "kary-4-2.yaml",
        "mechanism: sbrp1\n\
         traffic: {pattern: uniform, load: 0.1, duration: 3s}\n\
         fabric: {bandwidth: 20000, dead-after: 1s, gap-recovery: off}\n\
         timeline:\n\
         \x20 - {at: 1s, action: kill-switch, target: \"s1-0\"}\n\
         \x20 - {at: 1300ms, action: restore-switch, target: \"s1-0\"}\n",
    );
    let report = chaos("restore-within-detection", &file);
    check_recovered(report.clone(), "sbrp1");
    let t = &report["run"]["totals"];
    assert_eq!(t["gap_requests"], 0, "{t:#}");
    assert!(t["rrq_from_switches"].as_u64().unwrap() > 0, "{t:#}");
    let kill = action(&report, "kill-switch");
    assert!(
        kill["detection_reason"]
            .as_str()
            .is_some_and(|r| r.contains("dropped_while_disabled")),
        "{kill:#}"
    );
    eprintln!(
        "s1-0 disabled 300 ms: detected {} ms ({}); {} recover requests from switches, {} messages recovered",
        kill["detection_ms"], kill["detection_reason"], t["rrq_from_switches"], t["recovered_messages"]
    );
}

#[test]
fn restoring_a_switch_brings_traffic_back_without_further_loss() {
    let file = scenario(
        "restore",
        "kary-4-2.yaml",
        "mechanism: reroute\n\
         traffic: {pattern: uniform, load: 0.05, duration: 4.5s}\n\
         fabric: {bandwidth: 20000, dead-after: 500ms, transport: udp}\n\
         timeline:\n\
         \x20 - {at: 1s, action: kill-switch, target: \"s1-2\"}\n\
         \x20 - {at: 2s, action: restore-switch, target: \"s1-2\"}\n",
    );
    let report = chaos("restore", &file);
    let kill = action(&report, "kill-switch");
    assert!(kill["routes_installed_ms"].as_f64().is_some(), "{kill:#}");
    let restore = action(&report, "restore-switch");
    assert!(
        restore["routes_installed_ms"].as_f64().is_some(),
        "{restore:#}"
    );
    let after = &report["after_last_action"];
    assert!(
        after.is_object(),
        "the controller never settled: {report:#}"
    );
    // Nothing generated after the repair is lost: no flit dropped since,
    // and the final loss is at most what was in flight at that instant.
    assert_eq!(after["flits_dropped_since"], 0, "{after:#}");
    assert!(after["delivered_since"].as_u64().unwrap() > 0, "{after:#}");
    let lost = report["accounting"]["messages_lost"].as_u64().unwrap();
    assert!(
        lost <= after["in_flight_messages"].as_u64().unwrap(),
        "{after:#}"
    );
    // Throughput is back after the repair.
    let restored_at = f(&restore["at_s"]);
    let back: Vec<f64> = report["throughput"]
        .as_array()
        .unwrap()
        .iter()
        // Until traffic generation stops (4.5 s); the drain comes after.
        .filter(|p| f(&p[0]) > restored_at + 0.5 && f(&p[0]) < 4.3)
        .map(|p| f(&p[1]))
        .collect();
    assert!(
        !back.is_empty() && back.iter().all(|&r| r > 0.0),
        "{back:?}"
    );
    assert_losses_accounted(&report);
}

/// The shipped SBRP-2 example: two links of the 4-cube die a second apart
/// and the first comes back, under uniform traffic of 32-flit messages.
/// The controller re-routes from the daemons' events; SBRP resends what
/// each fault cut. Counts only: every message delivered exactly once, the
/// protocol did act (a fault that hit nothing would prove nothing), and no
/// sender still holds a message after the drain.
#[test]
fn sbrp2_delivers_every_message_exactly_once_across_link_kills_and_a_restore() {
    let file = topology("scenarios/hypercube-4-sbrp2.yaml");
    let report = chaos("sbrp2", &file);
    assert_eq!(report["mechanism"], "sbrp2");
    // Every message exactly once, and SBRP did act.
    check_recovered(report.clone(), "sbrp2");
    let t = &report["run"]["totals"];
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    // A killed link cuts no host off a hypercube.
    assert_eq!(report["run"]["unreachable_hosts"], serde_json::json!([]));
    assert!(
        report["accounting"]["dropped_flits"]["port-down"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "nothing was cut at a dead port: {report:#}"
    );
    // Every fault and the repair were re-routed (from daemon events).
    assert_eq!(report["actions"].as_array().unwrap().len(), 3);
    for a in report["actions"].as_array().unwrap() {
        assert!(a["routes_installed_ms"].is_number(), "{a:#}");
    }
    assert!(report["reroutes"].as_u64().unwrap() >= 3, "{report:#}");
    assert_eq!(report["run"]["credit_violations"], 0);
    assert_eq!(report["failed_actions"], serde_json::json!([]));
    eprintln!(
        "4-cube SBRP-2, 2 link kills + restore: {} sent, {} lost; {} recover requests ({} from switches, {} from receivers), {} packets / {} flits resent, {} messages recovered; port-down drops {}",
        n("messages_sent"),
        n("messages_lost"),
        n("recover_requests"),
        n("rrq_from_switches"),
        n("rrq_from_receivers"),
        n("resent_packets"),
        n("resent_flits"),
        n("recovered_messages"),
        report["accounting"]["dropped_flits"]["port-down"]
    );
}

/// A SIGKILLed router of the 4-cube takes its host with it: flows to and
/// from h10 are lost by definition (spec 003 §5.1) and counted apart; every
/// other message, including those cut at the dead link and switch, is
/// delivered exactly once, and no reachable sender still holds anything.
#[test]
fn sbrp2_sets_apart_only_the_flows_of_a_killed_routers_host() {
    let file = scenario(
        "sbrp-kill",
        "hypercube-4.yaml",
        "mechanism: sbrp2\nseed: 3\n\
         traffic: {pattern: uniform, load: 0.1, message-flits: 32, duration: 4s}\n\
         fabric: {bandwidth: 20000, dead-after: 300ms, max-packet-flits: 32}\n\
         timeline:\n\
         \x20 - {at: 1s, action: kill-link, target: \"r05:2\"}\n\
         \x20 - {at: 1.5s, action: sigkill-switch, target: \"r10\"}\n\
         \x20 - {at: 2.5s, action: restore-link, target: \"r05:2\"}\n",
    );
    let report = chaos("sbrp-kill", &file);
    assert_eq!(report["promise_kept"], true, "{}", report["promise"]);
    let run = &report["run"];
    assert_eq!(run["unreachable_hosts"], serde_json::json!(["h10"]));
    let t = &run["totals"];
    assert!(t["lost_unreachable"].as_u64().unwrap() > 0, "{t:#}");
    for k in ["messages_lost", "duplicates", "out_of_order", "retained"] {
        assert_eq!(t[k], 0, "{k}: {t:#}");
    }
    assert!(t["recover_requests"].as_u64().unwrap() > 0, "{t:#}");
    // The cut-off host's losses still count in the accounting.
    assert_eq!(
        report["accounting"]["messages_lost"], t["lost_unreachable"],
        "{report:#}"
    );
}

/// A link restored while a switch at one end is administratively killed
/// stays down at that end: the switch is still dead, so it must not take
/// packets through the one port the restore would bring up (under
/// adaptive DLR its neighbour sends down it, and the dead switch can only
/// bounce or discard them). Every message arrives once; with the port
/// brought up, 35 of 2,640 were lost in the simulator.
#[test]
fn a_link_restored_to_a_killed_switch_stays_down_at_its_end() {
    let file = scenario(
        "restore-link-to-killed",
        "kary-3-3.yaml",
        "mechanism: dlr-adaptive\nrecovery-protocol: sbrp2\n\
         traffic: {pattern: uniform, load: 0.02, duration: 4s}\n\
         fabric: {vcs: 2, buffer-depth: 16, bandwidth: 10000, dead-after: 300ms}\n\
         timeline:\n\
         \x20 - {at: 1s, action: kill-switch, target: \"s1-0\"}\n\
         \x20 - {at: 1500ms, action: kill-link, target: \"s1-0:0\"}\n\
         \x20 - {at: 2s, action: restore-link, target: \"s1-0:0\"}\n",
    );
    let report = chaos("restore-link-to-killed", &file);
    check_recovered(report, "dlr-adaptive+sbrp2");
}

/// Dynamic local rerouting (seed 002) in a chaos run: the switches route
/// around a dead link and a SIGKILLed switch on their own; the controller
/// installs nothing; every loss is accounted for.
#[test]
fn dlr_switches_route_around_a_dead_link_and_a_killed_switch_on_their_own() {
    let file = scenario(
        "dlr",
        "kary-3-3.yaml",
        "mechanism: dlr\nseed: 2\n\
         traffic: {pattern: uniform, load: 0.02, duration: 4s}\n\
         fabric: {vcs: 3, buffer-depth: 16, bandwidth: 10000, dead-after: 1s}\n\
         timeline:\n\
         \x20 - {at: 1s, action: kill-link, target: \"s1-0:3\"}\n\
         \x20 - {at: 2s, action: sigkill-switch, target: \"s1-4\"}\n",
    );
    let report = chaos("dlr", &file);
    assert_eq!(report["mechanism"], "dlr");
    assert_eq!(
        report["reroutes"], 0,
        "the controller re-routed: {report:#}"
    );
    for a in report["actions"].as_array().unwrap() {
        assert!(a["routes_installed_ms"].is_null(), "{a:#}");
        assert!(a["detection_ms"].is_number(), "never detected: {a:#}");
    }
    assert!(
        report["local_reroutes"].as_u64().unwrap() > 0,
        "no switch rerouted: {report:#}"
    );
    assert!(
        report["run"]["totals"]["messages_delivered"]
            .as_u64()
            .unwrap()
            > 1000
    );
    assert_losses_accounted(&report);
}

#[test]
fn scenarios_with_mistakes_are_refused_before_anything_starts() {
    let cases = [
        (
            "unknown-link",
            "mechanism: reroute\ntimeline:\n  - {at: 1s, action: kill-link, target: \"s9-9:4\"}\n",
            ":4: timeline[0]: kill-link s9-9:4",
            "no node named `s9-9`",
        ),
        (
            "past",
            "mechanism: reroute\ntimeline:\n  - {at: 2s, action: kill-link, target: \"s0-0:4\"}\n  - {at: 1s, action: restore-link, target: \"s0-0:4\"}\n",
            ":5: timeline[1]: restore-link s0-0:4",
            "in the past",
        ),
        (
            "too-late",
            "mechanism: reroute\ntraffic: {duration: 3s}\ntimeline:\n  - {at: 5s, action: kill-link, target: \"s0-0:4\"}\n",
            ":5: timeline[0]",
            "not within the traffic duration",
        ),
        (
            "mechanism",
            "mechanism: prayer\n",
            ":2: mechanism",
            "unknown mechanism `prayer`",
        ),
        (
            // (corrupt itself is accepted with SBRP: a link error is a port
            // death SBRP acts on; see the corruption tests below)
            "sbrp-corrupt-no-count",
            "mechanism: sbrp1\ntimeline:\n  - {at: 1s, action: corrupt, target: \"s0-0:4\"}\n",
            ":4: timeline[0]",
            "corrupt needs a count",
        ),
        (
            "sbrp-without-dlr",
            "mechanism: reroute\nrecovery-protocol: sbrp2\n",
            ": recovery-protocol: sbrp2",
            "is for the dlr mechanisms",
        ),
        (
            "dlr-link-sbrp-switch",
            "mechanism: dlr-link\nrecovery-protocol: sbrp0\nfabric: {vcs: 2}\ntimeline:\n  - {at: 1s, action: sigkill-switch, target: \"s1-1\"}\n",
            ":6: timeline[0]: sigkill-switch",
            "link faults only",
        ),
        (
            "reconfiguration",
            "mechanism: reroute\nfabric: {reconfiguration: sometimes}\n",
            "line 3",
            "unknown variant `sometimes`",
        ),
        (
            "unknown-key",
            "mechanism: none\ntimeline:\n  - {at: 1s, action: corrupt, target: \"s0-0:4\", cuont: 3}\n",
            "line 4",
            "unknown field `cuont`",
        ),
        (
            "pingall-without-tun",
            "mechanism: reroute\ntimeline:\n  - {at: 1s, action: pingall}\n",
            ":4: timeline[0]: pingall",
            "set fabric: {tun: true}",
        ),
        (
            "iperf3-unknown-host",
            "mechanism: reroute\nfabric: {tun: true}\ntimeline:\n  - {at: 1s, action: iperf3, client: h00, server: h99, duration: 2s}\n",
            ":5: timeline[0]: iperf3 h00->h99",
            "no host named `h99`",
        ),
    ];
    for (name, body, place, why) in cases {
        let file = scenario(name, "kary-4-2.yaml", body);
        let run_dir = scratch(name);
        let out = flitctl(&[
            "chaos",
            file.to_str().unwrap(),
            "--run-dir",
            run_dir.to_str().unwrap(),
        ])
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: accepted");
        assert!(
            err.contains(file.to_str().unwrap()),
            "{name}: file not named: {err}"
        );
        assert!(err.contains(place), "{name}: `{place}` not in: {err}");
        assert!(err.contains(why), "{name}: `{why}` not in: {err}");
        assert!(!run_dir.exists(), "{name}: something started");
        assert_eq!(processes_matching(run_dir.to_str().unwrap()), 0);
    }
}

/// Datagrams damaged on two links of the 4-cube mid-run: one, then a run
/// of five (the other direction), then three on a second link
/// (`topologies/scenarios/hypercube-4-sbrp2-corrupt.yaml`, run under each
/// mechanism). Each damaged datagram is a link error: the link goes down at
/// both ends and retrains (docs/wire.md, "Link errors and retraining"), so
/// the switches' port-death path acts on the flits it carried.
fn corruption_body() -> String {
    let text =
        std::fs::read_to_string(topology("scenarios/hypercube-4-sbrp2-corrupt.yaml")).unwrap();
    text.lines()
        .filter(|l| {
            !l.starts_with('#') && !l.starts_with("topology:") && !l.starts_with("mechanism:")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Datagrams damaged on two switch-to-host links (`r05:0` faces h05): the
/// host end detects the errors and resets the switch's port.
const HOST_CORRUPTION: &str = "seed: 3
traffic: {pattern: uniform, load: 0.2, message-flits: 32, duration: 3s}
fabric: {bandwidth: 20000, dead-after: 300ms, max-packet-flits: 32}
timeline:
  - {at: 1s, action: corrupt, target: \"r05:0\", count: 3}
  - {at: 1.8s, action: corrupt, target: \"r09:0\", count: 1}
";

/// Runs the corruption scenario under `mechanism`; checks that every damaged
/// datagram was rejected and escalated, and the links came back.
fn corruption_run(mechanism: &str) -> Value {
    corruption_run_of(mechanism, "switch-links", &corruption_body())
}

fn corruption_run_of(mechanism: &str, what: &str, body: &str) -> Value {
    let started = std::time::Instant::now();
    let name = format!("corrupt-{what}-{mechanism}");
    let file = scenario(
        &name,
        "hypercube-4.yaml",
        &format!("mechanism: {mechanism}\n{body}"),
    );
    let report = chaos(&name, &file);
    let actions = report["actions"].as_array().unwrap();
    assert_eq!(
        actions.len(),
        body.matches("action: corrupt").count(),
        "{report:#}"
    );
    for a in actions {
        assert_eq!(a["action"], "corrupt");
        let count = a["count"].as_u64().unwrap();
        // Every damaged datagram failed its CRC at the receiver ...
        assert_eq!(a["crc_errors_at_receiver"].as_u64(), Some(count), "{a:#}");
        // ... and was a link error there (a damaged datagram that arrives
        // while the link already retrains is not a second one), which the
        // damaging end heard about as a link reset (one that reaches it
        // while it still retrains from the previous one is noted, not
        // counted again).
        let errors = a["link_errors_at_receiver"].as_u64().unwrap();
        assert!((1..=count).contains(&errors), "{a:#}");
        let resets = a["link_resets_at_sender"].as_u64().unwrap();
        assert!((1..=errors).contains(&resets), "{a:#}");
        assert_eq!(a["detection_reason"], "link error (crc)", "{a:#}");
        // Both ends came back up (daemon events).
        assert!(a["link_down_ms"].is_number(), "never back up: {a:#}");
    }
    assert_eq!(report["run"]["credit_violations"], 0);
    assert_eq!(report["failed_actions"], serde_json::json!([]));
    // No credit leak: in the drained fabric every live link has all its
    // credits back (the flits lost in the damaged datagrams and at the
    // dead ports were written off).
    let reports: Value = serde_json::from_str(
        &std::fs::read_to_string(scratch_dir(&name).join("reports.json")).unwrap(),
    )
    .unwrap();
    for (node, r) in reports.as_object().unwrap() {
        assert_eq!(r["credits_missing"], 0, "{node}: credits leaked: {r:#}");
    }
    let t = &report["run"]["totals"];
    eprintln!(
        "4-cube {mechanism}, corruption on {what}: {} sent, {} delivered, {} lost, {} duplicates, {} retained; {} RRQs ({} from switches, {} from receivers), {} packets / {} flits resent; link errors {:?}, down {:?} ms, detected after {:?} ms; port-down drops {}; test wall {:.1} s",
        t["messages_sent"],
        t["messages_delivered"],
        t["messages_lost"],
        t["duplicates"],
        t["retained"],
        t["recover_requests"],
        t["rrq_from_switches"],
        t["rrq_from_receivers"],
        t["resent_packets"],
        t["resent_flits"],
        actions
            .iter()
            .map(|a| a["link_errors_at_receiver"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        actions
            .iter()
            .map(|a| f(&a["link_down_ms"]))
            .collect::<Vec<_>>(),
        actions
            .iter()
            .map(|a| f(&a["detection_ms"]))
            .collect::<Vec<_>>(),
        report["accounting"]["dropped_flits"]["port-down"],
        started.elapsed().as_secs_f64(),
    );
    report
}

/// SBRP under corruption: the link error is a port death, so A closes the
/// cut packets with non-final tails and C / the receivers send recover
/// requests; every message is delivered exactly once.
fn check_corruption_recovered(mechanism: &str) {
    check_recovered(corruption_run(mechanism), mechanism);
}

fn check_recovered(report: Value, mechanism: &str) {
    assert_eq!(report["promise_kept"], true, "{}", report["promise"]);
    let t = &report["run"]["totals"];
    let n = |k: &str| {
        t[k].as_u64()
            .unwrap_or_else(|| panic!("no totals.{k}: {t:#}"))
    };
    assert!(n("messages_sent") > 500, "too little traffic: {t:#}");
    for k in [
        "messages_lost",
        "duplicates",
        "out_of_order",
        "corrupted",
        "misdelivered_packets",
        "retained",
        "lost_unreachable",
    ] {
        assert_eq!(n(k), 0, "{mechanism}: {k}: {t:#}");
    }
    assert_eq!(n("messages_delivered"), n("messages_sent"), "{t:#}");
    assert_eq!(report["run"]["lossless"], true);
    // The link errors cut packets and SBRP recovered them.
    assert!(n("recover_requests") > 0, "{mechanism}: no RRQ: {t:#}");
    assert!(n("resent_flits") > 0, "{mechanism}: nothing resent: {t:#}");
}

#[test]
fn sbrp0_delivers_every_message_exactly_once_through_corrupted_datagrams() {
    check_corruption_recovered("sbrp0");
}

#[test]
fn sbrp1_delivers_every_message_exactly_once_through_corrupted_datagrams() {
    check_corruption_recovered("sbrp1");
}

#[test]
fn sbrp2_delivers_every_message_exactly_once_through_corrupted_datagrams() {
    check_corruption_recovered("sbrp2");
}

/// Without a recovery protocol the same corruption loses the packets the
/// link errors cut, and every loss is explained by a counted cause (flits
/// dropped at the port that went down, flits written off on the link);
/// no credit leaks, nothing panics.
#[test]
fn without_recovery_corruption_losses_are_counted_not_silent() {
    let report = corruption_run("none");
    assert_losses_accounted(&report);
    let acc = &report["accounting"];
    let t = &report["run"]["totals"];
    assert!(t["messages_sent"].as_u64().unwrap() > 500, "{t:#}");
    assert!(
        acc["dropped_flits"]["port-down"].as_u64().unwrap_or(0)
            + acc["link_lost_flits"].as_u64().unwrap_or(0)
            > 0,
        "the link errors cut nothing: {acc:#}"
    );
    assert_eq!(acc["crc_errors"].as_u64(), Some(9), "{acc:#}");
    // Every link error is counted where it was detected.
    let detected: u64 = report["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["link_errors_at_receiver"].as_u64().unwrap())
        .sum();
    assert_eq!(acc["link_errors"].as_u64(), Some(detected), "{acc:#}");
}

/// A damaged datagram on a host's link is a link error like any other:
/// the host end detects it, the switch port facing it dies for the retrain,
/// and SBRP-2 recovers what it cut (the receiver side of the host link is
/// the host itself, whose counters the report reads).
#[test]
fn sbrp2_delivers_every_message_exactly_once_through_corrupted_host_links() {
    let report = corruption_run_of("sbrp2", "host-links", HOST_CORRUPTION);
    check_recovered(report, "sbrp2");
}

/// Sixty damaged datagrams in a row keep `r05:2`–`r07:2` flapping for
/// longer than `dead_after` (300 ms): no longer a transient, the detecting
/// end reports a `persistent link errors` port-down and the controller
/// routes around the link (and back once it is clean); SBRP-2 still
/// delivers every message exactly once.
#[test]
fn sbrp2_routes_around_a_link_whose_errors_persist() {
    let body = "seed: 3
traffic: {pattern: uniform, load: 0.2, message-flits: 32, duration: 3s}
fabric: {bandwidth: 20000, dead-after: 300ms, max-packet-flits: 32}
timeline:
  - {at: 1s, action: corrupt, target: \"r05:2\", count: 60}
";
    let report = corruption_run_of("sbrp2", "persistent", body);
    let events =
        std::fs::read_to_string(scratch_dir("corrupt-persistent-sbrp2").join("events.jsonl"))
            .unwrap();
    assert!(
        events.contains("persistent link errors"),
        "no persistent port-down in the events"
    );
    assert!(report["reroutes"].as_u64().unwrap() >= 1, "{report:#}");
    // On the 4-cube the healthy tables are e-cube and the re-routed ones
    // up*/down*: every swap, there and back, was quiesced (hosts held,
    // nothing in flight when the tables went in), so no packet met both.
    let swaps: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["source"] == "controller" && r["event"]["failed_links"].is_array())
        .map(|r| r["event"].clone())
        .filter(|e| e["event"] == "routes-installed")
        .collect();
    assert!(swaps.len() >= 2, "around and back: {swaps:#?}");
    for e in &swaps {
        assert_eq!(e["reconfiguration"], "quiesced", "{e:#}");
        assert_eq!(e["quiesce"]["drained"], true, "{e:#}");
        assert_eq!(e["quiesce"]["left_in_flight"], 0, "{e:#}");
    }
    eprintln!(
        "quiesced swaps: {:?}",
        swaps
            .iter()
            .map(|e| (e["engine"].clone(), e["quiesce"]["drain_ms"].clone()))
            .collect::<Vec<_>>()
    );
    check_recovered(report, "sbrp2");
}
