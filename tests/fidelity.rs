//! The fidelity verdict through real processes (docs/fidelity.md): a
//! fabric driven far past this machine's capacity at dilation 1 is called
//! not faithful; the same fabric at a trivial load, and the overloaded run
//! under `--time-dilation auto`, are faithful. Runs are serialised (the
//! verdict measures the machine) and short in emulated time.

use flitnet::{topology, RunDir};
use serde_json::Value;
use std::sync::Mutex;

static FABRIC: Mutex<()> = Mutex::new(());

/// 4 hosts offering half of 200,000 flits/s each: some 1.5 million flit
/// handlings a second (a flit crosses 1.7 switches on average), several
/// times what two cores do, and a flit time of 5 µs, shorter than a busy
/// machine's wake-ups.
const OVERLOAD: [&str; 6] = ["--load", "0.5", "--duration", "200ms", "--delay", "1us"];

fn up(name: &str, args: &[&str]) -> Value {
    let _one = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let dir = RunDir::new(name);
    let topo = topology("explicit-tiny.yaml");
    let mut all = vec!["up", topo.to_str().unwrap(), "--progress", "never"];
    all.extend_from_slice(args);
    dir.flitctl_json(&all)
        .unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

fn fidelity(report: &Value) -> (&str, u64, String) {
    let f = &report["fidelity"];
    let line = format!("{} ({})", f["reason"], f["dilation_source"]);
    (
        f["verdict"]
            .as_str()
            .unwrap_or_else(|| panic!("no verdict: {report:#}")),
        f["dilation"].as_u64().unwrap(),
        line,
    )
}

#[test]
fn an_overloaded_fabric_is_not_faithful_at_dilation_1() {
    let mut args = OVERLOAD.to_vec();
    args.extend(["--time-dilation", "1"]);
    let r = up("overload-1", &args);
    let (verdict, n, why) = fidelity(&r);
    assert_eq!(verdict, "not-faithful", "{why}");
    assert_eq!(n, 1);
    // It says what would help.
    let suggested = r["fidelity"]["suggested_dilation"].as_u64().unwrap();
    assert!(suggested > 1, "{r:#}");
    // The figures behind it are in the report.
    assert!(
        r["fidelity"]["lateness"]["p99_flit_times"]
            .as_f64()
            .unwrap()
            > 16.0
    );
    assert_eq!(
        r["fidelity"]["offered_flits_per_s"].as_f64().unwrap(),
        400_000.0
    );
}

#[test]
fn a_trivial_load_on_slow_links_is_faithful() {
    // 1,000 flits/s: a flit time of 1 ms, load 0.02.
    let r = up(
        "trivial",
        &[
            "--bandwidth",
            "1000",
            "--load",
            "0.02",
            "--duration",
            "1s",
            "--time-dilation",
            "1",
        ],
    );
    let (verdict, n, why) = fidelity(&r);
    assert_eq!(verdict, "faithful", "{why}");
    assert_eq!(n, 1);
    assert!(r["fidelity"]["suggested_dilation"].is_null());
}

#[test]
fn the_overloaded_fabric_under_auto_dilation_is_faithful() {
    let mut args = OVERLOAD.to_vec();
    args.extend(["--time-dilation", "auto"]);
    let r = up("overload-auto", &args);
    let (verdict, n, why) = fidelity(&r);
    assert_eq!(verdict, "faithful", "×{n}: {why}");
    assert!(
        n > 1,
        "auto kept dilation 1 for an overloaded fabric: {why}"
    );
    assert!(
        r["fidelity"]["dilation_source"]
            .as_str()
            .unwrap()
            .starts_with("auto"),
        "{r:#}"
    );
    // Emulated time: the traffic phase is 200 ms whatever the factor.
    assert_eq!(r["duration_s"].as_f64().unwrap(), 0.2);
    assert!(r["totals"]["messages_delivered"].as_u64().unwrap() > 0);
}

/// `flitctl bench fidelity --quick`: one row and one fault row, live and
/// simulated, with their ratios, verdicts and dilations.
#[test]
fn the_fidelity_bench_prints_live_against_simulated() {
    let _one = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let table = flitnet::flitctl_json(&[
        "bench",
        "fidelity",
        "--quick",
        "--duration",
        "100ms",
        "--time-dilation",
        "auto",
    ])
    .unwrap_or_else(|e| panic!("{e:#}"));
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let r = &rows[0];
    assert_eq!(r["fabric"], "4-ary 2-tree");
    for key in ["sim_accepted", "live_accepted", "sim_p50_us", "live_p50_us"] {
        assert!(r[key].as_f64().unwrap() > 0.0, "{key}: {r:#}");
    }
    // Offered 0.1 of 200,000 flits/s by 16 hosts: both carry about that.
    let sim = r["sim_accepted"].as_f64().unwrap();
    assert!((250_000.0..=400_000.0).contains(&sim), "{r:#}");
    assert!(r["dilation"].as_u64().unwrap() >= 1);
    assert!(r["verdict"].is_string());
    // The link kill: both ways the controller sees it and re-routes.
    let faults = table["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 1, "{faults:#?}");
    let f = &faults[0];
    assert_eq!(f["fault"], "link kill, controller re-route");
    for key in ["sim_recovery_ms", "live_recovery_ms"] {
        assert!(f[key].as_f64().unwrap() > 0.0, "{key}: {f:#}");
    }
    for key in ["sim_lost", "live_lost"] {
        assert!(f[key].is_u64(), "{key}: {f:#}");
    }
}
