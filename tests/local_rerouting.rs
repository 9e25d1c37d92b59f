//! Dynamic local rerouting (seed 002) end to end: real `switchd`/`hostd`
//! processes brought up by `flitctl up`, a link or a switch killed mid-run,
//! and NO controller re-routing (`--recovery none`): the switches route
//! around the fault on their own.
//!
//! What the paper promises (digest §3.2): with at most k−1 faults (host
//! links excluded), only the packets that are on, or queued for, the failing
//! element when it fails are lost; every packet injected afterwards is
//! delivered. In this emulator, with credit-based flow control, that bounds
//! the lost flits by
//! - the flits switches dropped because their output port died (queued for
//!   the link, or the rest of a packet whose head had crossed it) plus the
//!   body flits of those packets found headless downstream (`orphan`), and
//! - the flits that vanished on the dead element itself: a sender never has
//!   more than `vcs × buffer_depth` uncredited flits in flight on one port,
//!   so a dead link swallows at most 2 × that, a dead switch at most
//!   `radix × vcs × buffer_depth` (everything its neighbours could send it
//!   before they declared it dead).
//!
//! A lost message loses at least one flit, so the lost messages obey the
//! same bound, which is small next to the thousands of messages generated
//! after the fault: those are all delivered. Zero duplicates and zero
//! misdelivered packets are required throughout.
//!
//! The DLR-only tests use the 3-ary 3-tree (54 processes,
//! topologies/kary-3-3.yaml, `flitctl topo gen kary-ntree --k 3 --n 3`),
//! where k−1 = 2 simultaneous faults are guaranteed.
//!
//! **DLR with SBRP** (the last tests): zero lost, zero duplicated. SBRP
//! (seed 003) on top of DLR recovers what the papers' DLR loses: every
//! packet a fault cuts, or that DLR cannot carry any further, is resent by
//! its sender, the recover requests and the resends being rerouted around
//! the faults by the switches like any packet; no controller is involved.
//! A link and then (a second later, in the same run) a level-1 switch die in
//! the 4-ary 3-tree (112 processes), which `flitctl up` cannot do (one fault
//! instant), so these run the chaos scenario
//! topologies/scenarios/kary-4-3-dlr-sbrp2.yaml, once per SBRP level. At
//! load 0.02, 10 000 flits/s per link and a 1 s dead interval the 2-core
//! machine keeps up (about 10 s per run, debug build). Fabrics run one at a
//! time.

use flitnet::{topology, RunDir};
use std::sync::Mutex;

/// One fabric at a time: two of them on two cores starve each other's
/// keepalives.
static FABRIC: Mutex<()> = Mutex::new(());

const VCS: u64 = 3;
const DEPTH: u64 = 16;
const RADIX: u64 = 6;

fn run(name: &str, mechanism: &str, fault: &[&str]) -> serde_json::Value {
    let _one = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let topo = topology("kary-3-3.yaml");
    let run_dir = RunDir::new(&format!("dlr-{name}-{mechanism}"));
    let mut args = vec![
        "up",
        topo.to_str().unwrap(),
        "--mechanism",
        mechanism,
        "--recovery",
        "none",
        "--vcs",
        "3",
        "--buffer-depth",
        "16",
        "--bandwidth",
        "10000",
        "--load",
        "0.02",
        "--duration",
        "5s",
        // Starved processes on a loaded 2-core machine must not be taken
        // for dead ones.
        "--dead-after",
        "1s",
        "--kill-at",
        "1s",
    ];
    args.extend_from_slice(fault);
    run_dir
        .flitctl_json(&args)
        .unwrap_or_else(|e| panic!("{name} {mechanism}: {e:#}"))
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Checks the paper's promise with `vanish` flits allowed to disappear on
/// the dead element; returns (lost messages, reroutes).
fn assert_only_in_flight_lost(name: &str, r: &serde_json::Value, vanish: u64) -> (u64, u64) {
    let t = &r["totals"];
    let sent = n(&t["messages_sent"]);
    let lost = n(&t["messages_lost"]);
    let lost_flits = n(&t["flits_sent"]).saturating_sub(n(&t["flits_delivered"]));
    let dropped = n(&r["drops"]["port-down"]) + n(&r["drops"]["orphan"]);
    let other_drops: u64 = r["drops"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "port-down" && *k != "orphan")
        .map(|(_, v)| n(v))
        .sum();
    assert!(sent > 1000, "{name}: too little traffic to judge: {r:#}");
    assert_eq!(other_drops, 0, "{name}: drops other than port-down: {r:#}");
    assert!(
        lost_flits <= dropped + vanish,
        "{name}: {lost_flits} flits lost, more than the {dropped} dropped at the fault \
         plus the {vanish} it can swallow: {r:#}"
    );
    assert!(lost <= lost_flits, "{name}: {r:#}");
    for field in ["duplicates", "misdelivered_packets", "corrupted"] {
        assert_eq!(t[field], 0, "{name}: {field}: {r:#}");
    }
    assert_eq!(r["credit_violations"], 0, "{name}: {r:#}");
    assert_eq!(r["faults"].as_array().unwrap().len(), 1, "{name}: {r:#}");
    (lost, n(&r["reroutes"]))
}

#[test]
fn a_link_killed_mid_run_loses_only_what_was_on_it() {
    // A level-1 switch's up link: every flow whose d-mod-k route climbs
    // through it is detoured by s1-0 itself.
    let fault = ["--kill-link", "s1-0:3"];
    let r = run("link", "dlr", &fault);
    let (lost, reroutes) = assert_only_in_flight_lost("dlr link", &r, 2 * VCS * DEPTH);
    assert!(reroutes > 0, "nobody rerouted: {r:#}");
    // The same fault without local rerouting keeps dropping every packet
    // routed over the dead link until the end of the run.
    let none = run("link", "none", &fault);
    let lost_none = n(&none["totals"]["messages_lost"]);
    assert!(
        lost_none > lost + 2 * VCS * DEPTH,
        "without rerouting {lost_none} lost, with {lost}: the test cannot tell them apart"
    );
    assert_eq!(n(&none["reroutes"]), 0);
}

#[test]
fn a_switch_killed_mid_run_loses_only_what_it_held() {
    let r = run("switch", "dlr", &["--kill-switch", "s1-0"]);
    let (_, reroutes) = assert_only_in_flight_lost("dlr switch", &r, RADIX * VCS * DEPTH);
    assert!(reroutes > 0, "nobody rerouted: {r:#}");
    assert!(
        r["faults"][0]["detection_ms"].as_f64().is_some(),
        "the neighbours never noticed: {r:#}"
    );
}

#[test]
fn k_minus_one_simultaneous_link_faults_are_tolerated() {
    // k−1 = 2 for k = 3: a leaf's up link and a level-1 switch's up link,
    // killed at the same instant.
    let r = run(
        "links",
        "dlr",
        &["--kill-link", "s0-0:3", "--kill-link", "s1-1:4"],
    );
    let (_, reroutes) = assert_only_in_flight_lost("dlr 2 links", &r, 2 * 2 * VCS * DEPTH);
    assert!(reroutes > 0, "nobody rerouted: {r:#}");
}

#[test]
fn the_adaptive_variant_also_routes_around_a_dead_link() {
    let r = run("link-adaptive", "dlr-adaptive", &["--kill-link", "s1-2:5"]);
    let (_, reroutes) = assert_only_in_flight_lost("dlr-adaptive link", &r, 2 * VCS * DEPTH);
    assert!(reroutes > 0, "nobody rerouted: {r:#}");
}

/// Runs topologies/scenarios/kary-4-3-dlr-sbrp2.yaml with SBRP level
/// `protocol` (the file's own is sbrp2) and checks the zero-loss promise.
fn dlr_with_sbrp(protocol: &str) -> serde_json::Value {
    let _one = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!("dlr+{protocol}");
    let file = topology("scenarios/kary-4-3-dlr-sbrp2.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let topo_line = "topology: ../kary-4-3.yaml";
    let proto_line = "recovery-protocol: sbrp2";
    assert!(
        text.contains(topo_line) && text.contains(proto_line),
        "{text}"
    );
    let text = text
        .replace(
            topo_line,
            &format!("topology: {}", topology("kary-4-3.yaml").display()),
        )
        .replace(proto_line, &format!("recovery-protocol: {protocol}"));
    let run_dir = RunDir::new(&name);
    let scenario = run_dir.path().with_extension("yaml");
    std::fs::write(&scenario, text).unwrap();
    let result = run_dir.flitctl_json(&["chaos", scenario.to_str().unwrap()]);
    let _ = std::fs::remove_file(&scenario);
    let r = result.unwrap_or_else(|e| panic!("{name}: {e:#}"));

    assert_eq!(r["mechanism"], name.as_str());
    let t = &r["run"]["totals"];
    assert!(
        n(&t["messages_sent"]) > 500,
        "{name}: too little traffic to judge: {t:#}"
    );
    for field in [
        "messages_lost",
        "duplicates",
        "out_of_order",
        "retained",
        "misdelivered_packets",
        "corrupted",
        "lost_unreachable",
    ] {
        assert_eq!(t[field], 0, "{name}: {field}: {r:#}");
    }
    assert_eq!(t["messages_delivered"], t["messages_sent"], "{name}: {t:#}");
    // The faults cut something, and it was recovered.
    assert!(n(&t["recover_requests"]) > 0, "{name}: nothing cut: {t:#}");
    assert!(n(&t["resent_packets"]) > 0, "{name}: {t:#}");
    assert_eq!(r["run"]["credit_violations"], 0, "{name}: {r:#}");
    assert_eq!(
        r["run"]["unreachable_hosts"],
        serde_json::json!([]),
        "{name}"
    );
    // The switches rerouted on their own; the controller installed nothing.
    assert!(
        n(&r["local_reroutes"]) > 0,
        "{name}: nobody rerouted: {r:#}"
    );
    assert_eq!(r["reroutes"], 0, "{name}: the controller re-routed: {r:#}");
    let actions = r["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 2, "{name}: {r:#}");
    for a in actions {
        assert!(
            a["detection_ms"].is_number(),
            "{name}: never detected: {a:#}"
        );
        assert!(a["routes_installed_ms"].is_null(), "{name}: {a:#}");
    }
    assert_eq!(r["failed_actions"], serde_json::json!([]), "{name}: {r:#}");
    assert_eq!(r["promise_kept"], true, "{name}: {}", r["promise"]);
    eprintln!(
        "{name}: {} sent, {} delivered, {} lost, {} duplicated; {} RRQs ({} from switches, {} from \
         receivers), {} packets / {} flits resent; {} local reroutes; switch detected after {} ms",
        t["messages_sent"],
        t["messages_delivered"],
        t["messages_lost"],
        t["duplicates"],
        t["recover_requests"],
        t["rrq_from_switches"],
        t["rrq_from_receivers"],
        t["resent_packets"],
        t["resent_flits"],
        r["local_reroutes"],
        actions[1]["detection_ms"]
    );
    r
}

#[test]
fn dlr_with_sbrp2_loses_nothing_when_a_link_then_a_switch_die_in_a_4_ary_3_tree() {
    dlr_with_sbrp("sbrp2");
}

#[test]
fn dlr_with_sbrp1_loses_nothing_when_a_link_then_a_switch_die_in_a_4_ary_3_tree() {
    dlr_with_sbrp("sbrp1");
}

#[test]
fn dlr_with_sbrp0_loses_nothing_when_a_link_then_a_switch_die_in_a_4_ary_3_tree() {
    dlr_with_sbrp("sbrp0");
}

/// Seed 002: "returning transparently to the original routes when the fault
/// is repaired". A level-1 up link of the 3-ary 3-tree dies at 1 s and comes
/// back at 2 s (chaos `restore-link`), DLR alone, no controller. The
/// switches' local-reroute counters, read just before each action and at
/// the end, must show detours while the link is dead and (almost) none
/// after the repair: the table port is taken again as soon as the link is
/// back. Were the detours kept, the 2 s after the repair would count about
/// twice the 1 s before it.
#[test]
fn dlr_returns_to_the_original_routes_when_the_link_is_repaired() {
    let _one = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let run_dir = RunDir::new("dlr-repair");
    let scenario = run_dir.path().with_extension("yaml");
    std::fs::write(
        &scenario,
        format!(
            "topology: {}\nmechanism: dlr\nseed: 5\n\
             traffic: {{pattern: uniform, load: 0.02, message-flits: 16, duration: 4s}}\n\
             fabric: {{vcs: 3, buffer-depth: 16, bandwidth: 10000, dead-after: 1s}}\n\
             timeline:\n\
             \x20 - {{at: 1s, action: kill-link, target: \"s1-0:3\"}}\n\
             \x20 - {{at: 2s, action: restore-link, target: \"s1-0:3\"}}\n",
            topology("kary-3-3.yaml").display()
        ),
    )
    .unwrap();
    let result = run_dir.flitctl_json(&["chaos", scenario.to_str().unwrap()]);
    let _ = std::fs::remove_file(&scenario);
    let r = result.unwrap_or_else(|e| panic!("{e:#}"));

    let actions = r["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 2, "{r:#}");
    let before = |i: usize| {
        actions[i]["local_reroutes_before"]
            .as_u64()
            .unwrap_or_else(|| panic!("no reroute count before action {i}: {r:#}"))
    };
    let (at_kill, at_repair, at_end) = (before(0), before(1), n(&r["local_reroutes"]));
    let during = at_repair - at_kill;
    let after = at_end - at_repair;
    assert_eq!(at_kill, 0, "detours before any fault: {r:#}");
    assert!(during > 20, "too few detours to judge ({during}): {r:#}");
    // The repair takes a keepalive handshake before data flows again, so a
    // few detours follow it; kept detours would give about 2 × `during`.
    assert!(
        after * 2 < during,
        "{after} detours in the 2 s after the repair against {during} in the 1 s the link \
         was dead: the original routes were not taken again: {r:#}"
    );
    let t = &r["run"]["totals"];
    for field in ["duplicates", "misdelivered_packets", "corrupted"] {
        assert_eq!(t[field], 0, "{field}: {r:#}");
    }
    assert_eq!(r["run"]["credit_violations"], 0, "{r:#}");
    eprintln!(
        "dlr repair: {during} local reroutes while s1-0:3 was dead (1 s), {after} in the 2 s \
         after its repair; {} sent, {} lost",
        t["messages_sent"], t["messages_lost"]
    );
}
