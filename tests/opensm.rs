//! OpenSM interop (peers.md §1): the real OpenSM 3.3.23 routes flitnet's
//! fat-trees under ibsim, flitnet imports its LFT dumps, checks them, runs
//! traffic on them in a live fabric, and compares them with its own engines
//! by the static metrics of seed 001 §6. The other way round, OpenSM loads
//! flitnet's tables with `-R file -U` and programs them into ibsim.
//!
//! Needs the Debian packages opensm, ibsim-utils and infiniband-diags
//! (`.ci/run` installs them); without them every test prints why and passes.

use flitnet::{flitctl, flitctl_json, processes_matching, topology};
use flitnet_core::routing::checker::{check, CheckOptions};
use flitnet_core::routing::metrics::{mu_a2a, mu_rp, mu_sp, path_stats, TableRouter};
use flitnet_core::routing::opensm::{from_lfts_dump, to_lfts_dump, LidAssignment};
use flitnet_core::routing::{registry, RoutingTables};
use flitnet_core::topology::ibnet::{to_ibnet, GuidMap};
use flitnet_core::topology::{FaultSet, Topology};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn opensm_missing() -> bool {
    let available = Path::new("/usr/sbin/opensm").exists()
        && Path::new("/usr/bin/ibsim").exists()
        && flitctl::ibsim::umad2sim().is_some();
    flitnet::skip_without(
        available,
        "OpenSM/ibsim (apt-get install -y --no-install-recommends opensm ibsim-utils infiniband-diags)",
    )
}

fn work_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flitnet-opensm-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn load(name: &str) -> Topology {
    Topology::load(topology(name)).unwrap()
}

/// `flitctl route TOPO --engine opensm:<engine> --format opensm`: OpenSM run
/// on ibsim by flitctl; returns the dump and flitctl's stderr.
fn opensm_dump(topo_file: &str, engine: &str, dir: &Path) -> (String, String) {
    let out_file = dir.join(format!("{engine}.dump"));
    let t = topology(topo_file);
    let out = flitctl(&[
        "route",
        t.to_str().unwrap(),
        "--engine",
        &format!("opensm:{engine}"),
        "--format",
        "opensm",
        "-o",
        out_file.to_str().unwrap(),
    ])
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{topo_file} {engine}: {stderr}");
    // The log line proves the engine really ran (no silent minhop fallback).
    assert!(
        stderr.contains(&format!(
            "osm_ucast_mgr_process: {engine} tables configured on all switches"
        )),
        "{stderr}"
    );
    (std::fs::read_to_string(out_file).unwrap(), stderr)
}

struct Metrics {
    mu: u32,
    mu_sp: u32,
    rp: (u32, u32, u32),
    nu: f64,
}

fn metrics(topo: &Topology, tables: &RoutingTables) -> Metrics {
    let f = FaultSet::none();
    let r = TableRouter::new(topo, &f, tables);
    let rp = mu_rp(&r, topo, 200, 7);
    let a2a = mu_a2a(&r, topo);
    let (sp, _) = mu_sp(&r, topo);
    let ps = path_stats(&r);
    assert_eq!(a2a.unrouted + sp.unrouted + rp.unrouted + ps.unrouted, 0);
    Metrics {
        mu: a2a.mu,
        mu_sp: sp.mu,
        rp: (rp.q1_40, rp.median, rp.q39_40),
        nu: ps.nu,
    }
}

/// OpenSM's ftree and minhop on the 4-ary 2-tree and 4-ary 3-tree: every
/// imported table set delivers every pair, deadlock-free, on min-hop paths,
/// and compares with ours.
#[test]
fn opensm_tables_import_check_and_compare_with_ours() {
    if opensm_missing() {
        return;
    }
    let dir = work_dir("compare");
    for (file, hosts) in [("kary-4-2.yaml", 16u64), ("kary-4-3.yaml", 64)] {
        let topo = load(file);
        let guids = GuidMap::assigned(&topo);
        let ours: Vec<(&str, RoutingTables)> = ["dmodk", "ftree"]
            .into_iter()
            .map(|e| {
                let t = registry::engine(e)
                    .unwrap()
                    .route(&topo, &FaultSet::none())
                    .unwrap();
                (e, t)
            })
            .collect();
        let dmodk = metrics(&topo, &ours[0].1);
        for engine in ["ftree", "minhop"] {
            let (dump, _) = opensm_dump(file, engine, &dir);
            let imported = from_lfts_dump(
                &dump,
                "dump",
                &topo,
                &guids,
                None,
                &format!("opensm-{engine}"),
            )
            .unwrap();
            assert!(imported.missing_switches.is_empty());
            let r = check(
                &topo,
                &FaultSet::none(),
                &imported.tables,
                &CheckOptions::default(),
            );
            assert!(r.is_ok(), "{file} {engine}: {:?}", r.failures);
            assert_eq!(r.delivered, hosts * (hosts - 1));
            let m = metrics(&topo, &imported.tables);
            println!(
                "{file}: opensm {engine}: μ {} μ^SP {} μ^RP(200) {} [{}, {}] ν {:.3}",
                m.mu, m.mu_sp, m.rp.1, m.rp.0, m.rp.2, m.nu
            );
            for (name, t) in &ours {
                let o = metrics(&topo, t);
                let differing = t
                    .switches
                    .iter()
                    .zip(&imported.tables.switches)
                    .map(|(a, b)| {
                        (0..hosts as u32)
                            .filter(|&d| a.lookup(d) != b.lookup(d))
                            .count()
                    })
                    .sum::<usize>();
                println!(
                    "{file}: flitnet {name} differs from opensm {engine} in {differing} of {} LFT entries",
                    topo.num_switches() as u64 * hosts
                );
                println!(
                    "{file}: flitnet {name}: μ {} μ^SP {} μ^RP(200) {} [{}, {}] ν {:.3}",
                    o.mu, o.mu_sp, o.rp.1, o.rp.0, o.rp.2, o.nu
                );
            }
            // Every engine here routes on shortest up*/down* paths.
            assert!((m.nu - dmodk.nu).abs() < 1e-9, "{file} {engine}");
            // Dmodk is shift-optimal on k-ary n-trees (seed 001 §6.3): no
            // engine can beat μ^SP = 1, and OpenSM's ftree matches it.
            assert_eq!(dmodk.mu_sp, 1);
            if engine == "ftree" {
                assert_eq!(m.mu_sp, 1, "{file}: opensm ftree μ^SP");
                assert_eq!(m.mu, dmodk.mu, "{file}: opensm ftree μ(A2A)");
            }
            assert!(m.mu_sp >= dmodk.mu_sp && m.mu >= dmodk.mu);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// OpenSM's ftree tables installed in a live flitnet fabric: all-to-all
/// traffic arrives exactly once, lossless.
#[test]
fn opensm_ftree_tables_run_traffic_losslessly_in_a_live_fabric() {
    if opensm_missing() {
        return;
    }
    let dir = work_dir("live");
    let (_, _) = opensm_dump("kary-4-2.yaml", "ftree", &dir);
    let dump = dir.join("ftree.dump");
    let run_dir = dir.join("run");
    let t = topology("kary-4-2.yaml");
    let report = flitctl_json(&[
        "up",
        t.to_str().unwrap(),
        "--tables",
        dump.to_str().unwrap(),
        "--pattern",
        "all-to-all",
        "--vcs",
        "1",
        "--bandwidth",
        "50000",
        "--duration",
        "2s",
        "--run-dir",
        run_dir.to_str().unwrap(),
    ])
    .unwrap();
    let totals = &report["totals"];
    assert_eq!(totals["messages_delivered"], 16 * 15, "{report:#}");
    assert_eq!(totals["messages_sent"], totals["messages_delivered"]);
    for field in ["duplicates", "out_of_order", "misdelivered_packets"] {
        assert_eq!(totals[field], 0, "{field}: {report:#}");
    }
    assert_eq!(report["lossless"], true, "{report:#}");
    assert_eq!(report["engine"], "opensm-file", "{report:#}");
    assert_eq!(processes_matching(run_dir.to_str().unwrap()), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs ibsim + `opensm -o` exactly as peers.md §1 shows, with `extra`
/// OpenSM arguments, in `dir`; returns (log, lfts dump, guid2lid).
fn run_opensm_by_hand(topo: &Topology, dir: &Path, extra: &[&str]) -> (String, String, String) {
    std::fs::write(dir.join("fabric.net"), to_ibnet(topo).unwrap()).unwrap();
    std::fs::create_dir_all(dir.join("dump")).unwrap();
    // Unique per run: the work dir name carries the pid and the case.
    let sock = format!("flitnet-{}", dir.file_name().unwrap().to_string_lossy());
    let out = std::fs::File::create(dir.join("ibsim.out")).unwrap();
    let mut ibsim = Command::new("ibsim")
        .current_dir(dir)
        .env("IBSIM_SOCKNAME", &sock)
        .args(["-s", "-n", "fabric.net"])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !std::fs::read_to_string(dir.join("ibsim.out"))
        .unwrap()
        .contains("Network simulator ready")
    {
        assert!(ibsim.try_wait().unwrap().is_none(), "ibsim died");
        assert!(t0.elapsed() < Duration::from_secs(30), "ibsim not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    let cache = dir.join("cache");
    let status = Command::new("timeout")
        .current_dir(dir)
        .env("IBSIM_SOCKNAME", &sock)
        .env("SIM_HOST", &topo.hosts[0].name)
        .env("OSM_CACHE_DIR", &cache)
        .env("OSM_TMP_DIR", &cache)
        .env(
            "LD_PRELOAD",
            flitctl::ibsim::umad2sim().expect("checked by opensm_missing"),
        )
        .args(["-k", "5", "60", "opensm", "-o", "-s", "0", "-e", "-f"])
        .arg(dir.join("osm.log"))
        .args(["-D", "0x43", "--dump_files_dir"])
        .arg(dir.join("dump"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let _ = ibsim.kill();
    let _ = ibsim.wait();
    let log = std::fs::read_to_string(dir.join("osm.log")).unwrap_or_default();
    assert!(status.success(), "opensm failed ({status}):\n{log}");
    (
        log,
        std::fs::read_to_string(dir.join("dump/opensm-lfts.dump")).unwrap(),
        std::fs::read_to_string(cache.join("guid2lid")).unwrap(),
    )
}

/// Reverse direction: our Dmodk and Dmodc tables, exported, are loaded by
/// OpenSM (`-R file -U`), programmed into ibsim and dumped back; the
/// re-import equals what we exported.
#[test]
fn opensm_loads_our_tables_and_dumps_them_back_unchanged() {
    if opensm_missing() {
        return;
    }
    let topo = load("kary-4-3.yaml");
    let guids = GuidMap::assigned(&topo);
    for engine in ["dmodk", "dmodc"] {
        let dir = work_dir(&format!("reverse-{engine}"));
        let ours = registry::engine(engine)
            .unwrap()
            .route(&topo, &FaultSet::none())
            .unwrap();
        let file = dir.join("ours.dump");
        std::fs::write(&file, to_lfts_dump(&topo, &ours, &guids).unwrap()).unwrap();
        let (log, dump, guid2lid) =
            run_opensm_by_hand(&topo, &dir, &["-R", "file", "-U", file.to_str().unwrap()]);
        assert!(
            log.contains("osm_ucast_mgr_process: file tables configured on all switches"),
            "{log}"
        );
        let lids = LidAssignment::parse_guid2lid(&guid2lid, "guid2lid").unwrap();
        let back = from_lfts_dump(&dump, "re-dump", &topo, &guids, Some(&lids), engine).unwrap();
        assert_eq!(back.tables, ours, "{engine}: OpenSM changed our tables");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A degraded 4-ary 3-tree (2 links and a root switch failed): OpenSM's
/// ftree, given the root and compute-node GUID files, still routes it (no
/// minhop fallback), and every connected pair is delivered, deadlock-free.
#[test]
fn opensm_ftree_routes_a_degraded_tree() {
    if opensm_missing() {
        return;
    }
    let t = topology("kary-4-3.yaml");
    let out = flitctl(&[
        "analyze",
        "routes",
        t.to_str().unwrap(),
        "--engine",
        "dmodc,opensm:ftree",
        "--fail-link",
        "s0-00:4",
        "--fail-link",
        "s1-05:6",
        "--fail-switch",
        "s2-03",
        "--rp-samples",
        "100",
        "--json",
    ])
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("osm_ucast_mgr_process: ftree tables configured"),
        "{stderr}"
    );
    let cols: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for c in cols.as_array().unwrap() {
        assert_eq!(c["verdict"], "ok (deadlock-free)", "{c:#}");
        assert_eq!(c["pairs_delivered"], 64 * 63, "{c:#}");
        assert_eq!(c["unrouted"], 0, "{c:#}");
    }
}
