//! `flitctl route` and `flitctl analyze routes` as a user runs them.

use flitnet::{flitctl, topology};
use flitnet_core::routing::RoutingTables;

fn run(args: &[&str]) -> (bool, String, String) {
    let out = flitctl(args).unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn route_writes_every_format_and_json_round_trips() {
    let t = topology("kary-4-2.yaml");
    let t = t.to_str().unwrap();
    let (ok, json, err) = run(&["route", t, "--engine", "dmodc", "--format", "json"]);
    assert!(ok, "{err}");
    assert!(err.contains("240 pairs delivered, deadlock-free"), "{err}");
    let tables: RoutingTables = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (tables.engine.as_str(), tables.switches.len()),
        ("dmodc", 8)
    );

    let (ok, lft, _) = run(&["route", t, "--engine", "dmodk", "--format", "lft"]);
    assert!(ok);
    // Leaf s0-0: hosts 0-3 on ports 0-3, the rest up by d mod 4.
    assert!(
        lft.lines()
            .any(|l| l == "s0-0: 0 1 2 3 4 5 6 7 4 5 6 7 4 5 6 7"),
        "{lft}"
    );
    let (ok, iv, _) = run(&["route", t, "--engine", "dmodk", "--format", "intervals"]);
    assert!(ok);
    assert!(iv.contains("s0-0:\n  port 0: [0]\n"), "{iv}");
    assert!(iv.contains("  port 4: [4] [8] [12]\n"), "{iv}");

    let dir = std::env::temp_dir().join(format!("flitnet-routes-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dump = dir.join("dmodk.dump");
    let (ok, _, err) = run(&[
        "route",
        t,
        "--engine",
        "dmodk",
        "--format",
        "opensm",
        "-o",
        dump.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&dump).unwrap();
    assert!(text
        .starts_with("Unicast lids [0-24] of switch Lid 17 guid 0x0000100000000000 ('s0-0'):\n"));
    // The dump is read back by `analyze routes --tables` as a column.
    let (ok, table, err) = run(&[
        "analyze",
        "routes",
        t,
        "--engine",
        "dmodk",
        "--tables",
        dump.to_str().unwrap(),
        "--rp-samples",
        "50",
    ]);
    assert!(ok, "{err}");
    assert!(table.contains("dmodk.dump"), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn route_refuses_broken_tables_and_names_the_pairs() {
    let t = topology("kary-4-2.yaml");
    let t = t.to_str().unwrap();
    // Dmodk ignores faults, so a failed leaf uplink breaks some routes.
    let (ok, out, err) = run(&["route", t, "--engine", "dmodk", "--fail-link", "s0-0:4"]);
    assert!(!ok && out.is_empty());
    assert!(err.contains("24 failed"), "{err}");
    assert!(err.contains("4->0:"), "{err}");
    assert!(err.contains("--force"), "{err}");
    let (ok, out, _) = run(&[
        "route",
        t,
        "--engine",
        "dmodk",
        "--fail-link",
        "s0-0:4",
        "--force",
    ]);
    assert!(ok && out.starts_with('{'));
    // Dmodc routes around the fault.
    let (ok, _, err) = run(&[
        "route",
        t,
        "--engine",
        "dmodc",
        "--fail-link",
        "s0-0:4",
        "--fail-switch",
        "s1-1",
    ]);
    assert!(ok, "{err}");
    for (args, expect) in [
        (vec!["route", t, "--fail-link", "s0-0:99"], "has no port 99"),
        (vec!["route", t, "--fail-switch", "h00"], "is a host"),
        (vec!["route", t, "--engine", "warp"], "warp"),
    ] {
        let (ok, _, err) = run(&args);
        assert!(!ok && err.contains(expect), "{args:?}: {err}");
    }
}

#[test]
fn analyze_compares_engines_side_by_side() {
    let t = topology("kary-4-3.yaml");
    let (ok, table, err) = run(&[
        "analyze",
        "routes",
        t.to_str().unwrap(),
        "--engine",
        "dmodk,dmodc,random",
        "--rp-samples",
        "100",
        "--seed",
        "3",
    ]);
    assert!(ok, "{err}");
    let row = |label: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label}: {table}"))[label.len()..]
            .split("  ")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    // Dmodk and Dmodc are shift-optimal on a k-ary n-tree.
    let sp = row("μ^SP");
    assert_eq!(&sp[..2], ["1", "1"], "{table}");
    assert_eq!(row("checker")[0], "ok (deadlock-free)");
    let nu = row("ν (mean hops)");
    assert!(nu.len() == 3 && nu.iter().all(|v| *v == nu[0]), "{table}");
    for label in [
        "compute time (ms)",
        "μ (all-to-all)",
        "μ^RP(100) median [q1/40, q39/40]",
        "diameter (hops)",
        "routes/link max (Ξ)",
        "table bits/switch max",
    ] {
        assert_eq!(row(label).len(), 3, "{label}: {table}");
    }
}
