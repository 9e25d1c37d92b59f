//! A fabric spread over a real two-node Docker swarm, on one machine.
//!
//! compose/second-engine.sh starts a second `dockerd` (own data root, exec
//! root, socket, pid file) in a network namespace joined to this host by a
//! veth pair; it joins the host engine's swarm as a worker, and
//! compose/push-image.sh loads the image into it with `docker save` /
//! `docker load` (no registry). `flitctl compose --placement` partitions a
//! 4-ary 2-tree over the two nodes (12 processes each, 8 cut links) and pins
//! every service with a node-label constraint; `docker stack deploy` runs it
//! over the overlay network. Mid-run the test kills a spine switch's
//! container on each node. The stack's controller must re-route around both,
//! account for every lost message, and list the cut links with their
//! measured crossing delay. Everything is torn down: the stack, the swarm
//! (left by both engines, or only the worker removed if the host was in a
//! swarm already), the second engine, its namespace and veth pair, and the
//! `docker_gwbridge` network if the swarm created it.
//!
//! The stack names the image by its ID, which a swarm node never pulls: it
//! tries to pull a tag before it starts each task, and from the second
//! engine's namespace no nameserver answers, so each attempt would wait out
//! a 10 s DNS timeout and its 12 tasks would start over about 100 s.
//!
//! Needs root, Docker, `ip` and `nsenter`; fails under CI=true without them.

use flitnet::{bin, topology, workspace_dir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const IMAGE: &str = "flitnet:compose-test";

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn works(prog: &str, args: &[&str]) -> bool {
    Command::new(prog)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `docker` on the host engine, or on the second one.
fn docker(engine: Option<&str>) -> Command {
    let mut c = Command::new("docker");
    if let Some(host) = engine {
        c.args(["-H", host]);
    }
    c
}

/// The second engine and the swarm, torn down in Drop whatever happened.
struct TwoNodes {
    env: Vec<(&'static str, String)>,
    engine: String,
    stack: Option<(String, PathBuf)>,
    created_swarm: bool,
    worker_id: Option<String>,
    had_gwbridge: bool,
}

impl TwoNodes {
    fn script(&self, action: &str) -> Output {
        run(
            Command::new(workspace_dir().join("compose/second-engine.sh"))
                .arg(action)
                .envs(self.env.iter().map(|(k, v)| (*k, v.as_str()))),
        )
    }

    fn tasks_left(&self, stack: &str) -> bool {
        let label = format!("label=com.docker.stack.namespace={stack}");
        [None, Some(self.engine.as_str())].into_iter().any(|e| {
            let out = run(docker(e).args(["ps", "-aq", "--filter", &label]));
            !out.stdout.is_empty()
        })
    }
}

impl Drop for TwoNodes {
    fn drop(&mut self) {
        if let Some((stack, dir)) = self.stack.take() {
            let _ = run(docker(None).args(["stack", "rm", &stack]));
            let deadline = Instant::now() + Duration::from_secs(40);
            while self.tasks_left(&stack) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(500));
            }
            let _ = std::fs::remove_dir_all(dir);
        }
        let _ = run(docker(Some(&self.engine)).args(["swarm", "leave", "--force"]));
        // Other tests share the host engine: a swarm or a network left
        // behind would change what they run on.
        if self.created_swarm {
            retry(|| run(docker(None).args(["swarm", "leave", "--force"])));
        } else if let Some(id) = &self.worker_id {
            retry(|| run(docker(None).args(["node", "rm", "--force", id])));
        }
        if !self.had_gwbridge {
            retry(|| run(docker(None).args(["network", "rm", "docker_gwbridge"])));
        }
        let out = self.script("stop");
        if !out.status.success() {
            eprintln!(
                "second-engine.sh stop failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Runs `attempt` until it succeeds, at most 10 times, 0.5 s apart; prints
/// the last failure.
fn retry(mut attempt: impl FnMut() -> Output) {
    for left in (0..10).rev() {
        let out = attempt();
        if out.status.success() {
            return;
        }
        if left == 0 {
            eprintln!("teardown: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The container of a stack service's task on `engine`.
fn task_container(engine: Option<&str>, service: &str) -> String {
    let label = format!("label=com.docker.swarm.service.name={service}");
    ok(docker(engine).args(["ps", "-aq", "--filter", &label]))
}

fn u(v: &Value, path: &[&str]) -> u64 {
    path.iter().fold(v, |v, p| &v[*p]).as_u64().unwrap_or(0)
}

#[test]
fn a_fabric_partitioned_over_a_two_node_swarm_survives_a_switch_kill_on_each_node() {
    let root = works("id", &["-u"])
        && String::from_utf8_lossy(&run(Command::new("id").arg("-u")).stdout).trim() == "0";
    let available = root
        && works("docker", &["info"])
        && works("dockerd", &["--version"])
        && works("ip", &["-V"])
        && works("nsenter", &["--version"]);
    if flitnet::skip_without(
        available,
        "root with Docker (engine, dockerd), iproute2 and nsenter",
    ) {
        return;
    }
    let started = Instant::now();
    let pid = std::process::id();
    // The image of tests/compose.rs (the build is incremental).
    ok(Command::new(workspace_dir().join("compose/build-image.sh"))
        .arg(IMAGE)
        .env("PROFILE", "image-test")
        .current_dir(workspace_dir()));
    let image_built = started.elapsed();
    let image_id = ok(docker(None).args(["image", "inspect", "-f", "{{.Id}}", IMAGE]));

    let state = ok(docker(None).args(["info", "--format", "{{.Swarm.LocalNodeState}}"]));
    let had_gwbridge = works("docker", &["network", "inspect", "docker_gwbridge"]);
    let name = format!("flitnet-t{pid}");
    let octet = 100 + pid % 100;
    let (host_ip, node_ip) = (format!("10.251.{octet}.1"), format!("10.251.{octet}.2"));
    let state_dir = std::env::temp_dir().join(&name);
    let mut nodes = TwoNodes {
        env: vec![
            ("NAME", name.clone()),
            ("VETH", format!("ft{}", pid % 100_000)),
            ("HOST_IP", host_ip.clone()),
            ("NODE_IP", node_ip.clone()),
            ("STATE", state_dir.to_string_lossy().to_string()),
        ],
        engine: format!("unix://{}/docker.sock", state_dir.display()),
        stack: None,
        created_swarm: false,
        worker_id: None,
        had_gwbridge,
    };
    let out = nodes.script("start");
    assert!(
        out.status.success(),
        "the second engine did not start:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let engine = nodes.engine.clone();
    let e2 = Some(engine.as_str());

    // The swarm: the host engine manages (created here unless it already
    // is in one), the second engine joins it as a worker over the veth.
    let manager_addr = if state == "active" {
        ok(docker(None).args(["info", "--format", "{{.Swarm.NodeAddr}}"]))
    } else {
        ok(docker(None).args(["swarm", "init", "--advertise-addr", &host_ip]));
        nodes.created_swarm = true;
        host_ip.clone()
    };
    let token = ok(docker(None).args(["swarm", "join-token", "-q", "worker"]));
    ok(docker(e2).args([
        "swarm",
        "join",
        "--token",
        &token,
        "--advertise-addr",
        &node_ip,
        &format!("{manager_addr}:2377"),
    ]));
    let manager_id = ok(docker(None).args(["info", "--format", "{{.Swarm.NodeID}}"]));
    let worker_id = ok(docker(e2).args(["info", "--format", "{{.Swarm.NodeID}}"]));
    nodes.worker_id = Some(worker_id.clone());
    let swarm_up = started.elapsed();

    // The image, without a registry.
    ok(Command::new(workspace_dir().join("compose/push-image.sh")).args([IMAGE, &engine]));

    // Machines named for this run, so that no other node's label matches.
    let (m0, m1) = (format!("t{pid}-a"), format!("t{pid}-b"));
    ok(docker(None).args([
        "node",
        "update",
        "--label-add",
        &format!("flitnet-part={m0}"),
        &manager_id,
    ]));
    ok(docker(None).args([
        "node",
        "update",
        "--label-add",
        &format!("flitnet-part={m1}"),
        &worker_id,
    ]));
    let dir = std::env::temp_dir().join(format!("flitnet-two-nodes-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let placement = dir.join("placement.yaml");
    std::fs::write(&placement, format!("machines: [{m0}, {m1}]\n")).unwrap();
    let bundle = dir.join("stack");
    let printed = ok(Command::new(bin("flitctl"))
        .args(["compose", topology("kary-4-2.yaml").to_str().unwrap(), "-o"])
        .arg(&bundle)
        .args([
            "--subnet",
            "10.236.0.0/16",
            "--image",
            &image_id,
            "--placement",
        ])
        .arg(&placement));
    assert!(printed.contains("cut links: 8 of 32 (25.0 %)"), "{printed}");
    // The controller: JSON report, 20 s of traffic, daemons stopped at the end.
    let stack_file = bundle.join("docker-stack.yml");
    let mut doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&stack_file).unwrap()).unwrap();
    let command: Vec<serde_yaml_ng::Value> = [
        "/flitctl",
        "attach",
        "--fabric",
        "/etc/flitnet/fabric.json",
        "--duration",
        "20s",
        "--load",
        "0.2",
        "--ready-timeout",
        "120s",
        "--json",
        "--shutdown",
    ]
    .map(Into::into)
    .to_vec();
    doc["services"]["controller"]["command"] = command.into();
    std::fs::write(&stack_file, serde_yaml_ng::to_string(&doc).unwrap()).unwrap();
    let fabric: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("configs/fabric.json")).unwrap())
            .unwrap();
    // A spine switch (level 1) on each machine.
    let spine_on = |m: &str| -> String {
        fabric["daemons"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["machine"] == m && d["service"].as_str().unwrap().starts_with("s1-"))
            .map(|d| d["service"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no spine on {m}: {fabric}"))
    };
    let (victim0, victim1) = (spine_on(&m0), spine_on(&m1));

    let stack = format!("flitnet-two-{pid}");
    nodes.stack = Some((stack.clone(), dir.clone()));
    let deploy_at = Instant::now();
    ok(docker(None)
        .args(["stack", "deploy", "--resolve-image", "never"])
        .args(["-c", "docker-stack.yml", &stack])
        .current_dir(&bundle));

    // Both engines run their share of the tasks.
    let controller_service = format!("{stack}_controller");
    let deadline = Instant::now() + Duration::from_secs(120);
    let label = format!("label=com.docker.stack.namespace={stack}");
    let running = |engine: Option<&str>| {
        ok(docker(engine).args(["ps", "-q", "--filter", &label]))
            .lines()
            .count()
    };
    let mut all_running = None;
    let controller = loop {
        if all_running.is_none() && running(None) + running(e2) == 25 {
            all_running = Some(deploy_at.elapsed());
        }
        let c = task_container(None, &controller_service);
        if !c.is_empty() {
            let logs = run(docker(None).args(["logs", &c]));
            if String::from_utf8_lossy(&logs.stderr).contains("fabric attached") {
                break c;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the controller did not attach within 120 s:\n{}",
            ok(docker(None).args(["stack", "ps", "--no-trunc", &stack]))
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let attached = deploy_at.elapsed();
    let (on_host, on_second) = (running(None), running(e2));
    assert_eq!(
        (on_host, on_second),
        (13, 12),
        "12 fabric processes per machine, the controller on the first"
    );

    // Traffic runs; a spine dies on each machine.
    std::thread::sleep(Duration::from_secs(3));
    let c0 = task_container(None, &format!("{stack}_{victim0}"));
    let c1 = task_container(e2, &format!("{stack}_{victim1}"));
    ok(docker(None).args(["kill", &c0]));
    ok(docker(e2).args(["kill", &c1]));
    let killed = deploy_at.elapsed();

    // The report.
    let status = ok(docker(None).args(["wait", &controller]));
    let exited = deploy_at.elapsed();
    let logs = run(docker(None).args(["logs", &controller]));
    let stdout = String::from_utf8_lossy(&logs.stdout).to_string();
    let stderr = String::from_utf8_lossy(&logs.stderr).to_string();
    assert_eq!(status, "0", "the controller failed:\n{stderr}");
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}):\n{stdout}\n{stderr}"));
    let run_time = deploy_at.elapsed();

    let faults = report["faults"].as_array().expect("faults listed");
    for victim in [&victim0, &victim1] {
        let f = faults
            .iter()
            .find(|f| f["kind"] == "switch-lost" && f["element"] == victim.as_str())
            .unwrap_or_else(|| panic!("{victim} is not reported lost: {faults:?}\n{stderr}"));
        assert!(f["routes_installed_ms"].as_f64().is_some(), "{f}");
    }
    let t = &report["totals"];
    let (sent, delivered, lost) = (
        u(t, &["messages_sent"]),
        u(t, &["messages_delivered"]),
        u(t, &["messages_lost"]),
    );
    assert!(delivered > 1000, "{t}");
    assert_eq!(u(t, &["duplicates"]), 0, "{t}");
    assert_eq!(u(t, &["corrupted"]), 0, "{t}");
    assert_eq!(u(t, &["misdelivered_packets"]), 0, "{t}");
    assert_eq!(u(&report, &["credit_violations"]), 0);
    // A lost message lost a flit: counted by a switch, or stranded in one
    // of the two killed switches (8 ports × 2 VCs × 16 flits of buffer each
    // bound by credits what was sent to it).
    let drops: u64 = report["drops"]
        .as_object()
        .map(|d| d.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0);
    let stranded = 2 * 8 * 2 * 16;
    assert!(
        lost <= drops + stranded,
        "{lost} of {sent} lost, {drops} flits dropped and {stranded} stranded at most"
    );
    // The cut links, from the placement in fabric.json, and their timing.
    let cut = &report["cut_links"];
    assert_eq!(u(cut, &["count"]), 8, "{cut}");
    assert_eq!(cut["links"].as_array().map(Vec::len), Some(8), "{cut}");
    assert_eq!(cut["controller_machine"], m0.as_str(), "{cut}");
    let crossing = cut["cut_one_way_us"].as_f64().unwrap_or(0.0);
    let local = cut["local_one_way_us"].as_f64().unwrap_or(0.0);
    assert!(crossing > 0.0 && local > 0.0, "{cut}");
    eprintln!(
        "image {:.0}s, swarm of two {:.1}s, deploy -> 25 tasks running {:.1}s -> attached {:.1}s -> spines killed {:.1}s -> controller exited {:.1}s, report read {:.1}s; \
         {delivered} of {sent} delivered, {lost} lost ({drops} flits dropped); \
         one-way: local {local:.0} us, across machines {crossing:.0} us, emulated {:.0} us; \
         slower than emulated: {}",
        image_built.as_secs_f64(),
        (swarm_up - image_built).as_secs_f64(),
        all_running.map_or(f64::NAN, |d| d.as_secs_f64()),
        attached.as_secs_f64(),
        killed.as_secs_f64(),
        exited.as_secs_f64(),
        run_time.as_secs_f64(),
        cut["emulated_propagation_us"].as_f64().unwrap_or(0.0),
        cut["slower_than_emulated"],
    );
    eprintln!(
        "{}",
        serde_json::to_string_pretty(&report["faults"]).unwrap()
    );
    let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
    eprintln!(
        "controller, last lines:\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );

    // Tear down and check that nothing is left.
    let teardown_at = Instant::now();
    drop(nodes);
    let teardown = teardown_at.elapsed();
    let netns = ok(Command::new("ip").args(["netns", "list"]));
    assert!(!netns.contains(&name), "{netns}");
    let veth = format!("ft{}-h", pid % 100_000);
    assert!(!works("ip", &["link", "show", &veth]), "{veth} is left");
    assert!(
        had_gwbridge || !works("docker", &["network", "inspect", "docker_gwbridge"]),
        "docker_gwbridge is left"
    );
    assert!(!Path::new(&state_dir).exists());
    let state_after = ok(docker(None).args(["info", "--format", "{{.Swarm.LocalNodeState}}"]));
    assert_eq!(state_after == "active", state == "active");
    assert!(ok(docker(None).args(["ps", "-aq", "--filter", &label])).is_empty());
    eprintln!(
        "teardown {:.1}s, whole test {:.1}s",
        teardown.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
