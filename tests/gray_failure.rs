//! A gray failure: a switch stops (SIGSTOP) for longer than `dead_after`,
//! its neighbours report it down, and it comes back (SIGCONT). `flitctl up`
//! runs the same controller loop as `chaos`: it routes around the stopped
//! switch as soon as its neighbours report it, and back once they hear it
//! again, without being told of the fault.

use flitnet::{flitctl_json, processes_matching, topology, RunDir};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The pid of the daemon whose command line names `config`.
fn pid_of(config: &str) -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(config))
        })
}

#[test]
fn up_routes_around_a_stopped_switch_and_back() {
    let run_dir = RunDir::new("gray-failure");
    let dir = run_dir.path().to_str().unwrap().to_string();
    let topo = topology("kary-4-2.yaml");
    let args_dir = dir.clone();
    let up = std::thread::spawn(move || {
        flitctl_json(&[
            "up",
            topo.to_str().unwrap(),
            "--duration",
            "6s",
            "--load",
            "0.05",
            "--bandwidth",
            "20000",
            "--dead-after",
            "300ms",
            "--run-dir",
            &args_dir,
        ])
    });
    // s1-0 is a spine of the 4-ary 2-tree: every leaf reaches it.
    let config = format!("{dir}/s1-0.json");
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Some(pid) = pid_of(&config) {
            break pid;
        }
        assert!(Instant::now() < deadline, "s1-0 never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    let events = format!("{dir}/events.jsonl");
    while !std::fs::read_to_string(&events).is_ok_and(|t| t.contains("traffic-started")) {
        assert!(Instant::now() < deadline, "traffic never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: plain signals to a process of this test's fabric.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(1500));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let report = up.join().unwrap().expect("flitctl up");
    let log = std::fs::read_to_string(&events).expect("the event log");
    let installs: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["source"] == "controller" && r["event"]["event"] == "routes-installed")
        .map(|r| r["event"].clone())
        .filter(|e| e["failed_links"].is_array())
        .collect();
    let around = installs
        .iter()
        .position(|e| e["failed_links"].as_array().unwrap().len() >= 4)
        .unwrap_or_else(|| panic!("never routed around the stopped switch: {installs:#?}"));
    assert!(
        installs[around..]
            .iter()
            .any(|e| e["failed_links"].as_array().unwrap().is_empty()),
        "never routed back once the switch answered again: {installs:#?}"
    );
    assert_eq!(report["credit_violations"], 0, "{report:#}");
    assert_eq!(processes_matching(&dir), 0, "daemons of {dir} left running");
    drop(run_dir);
}
