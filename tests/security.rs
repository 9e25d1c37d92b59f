//! flitctl run as root on a machine shared with other users: run
//! directories nobody else can plant files in or read, a token other users
//! cannot read, clean shutdown on SIGINT, SIGTERM and SIGKILL, `down`
//! refusing reused PIDs, bounded control input, stalled daemons reported,
//! bad values refused before anything starts. Each test starts the real
//! binaries; "another user" is `nobody` (uid 65534), which the tests
//! switch to with setuid in the child (they run as root, as CI does).

use flitnet::{bin, processes_matching, topology};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One fabric at a time (two cores).
static FABRIC: Mutex<()> = Mutex::new(());

const NOBODY: u32 = 65534;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    FABRIC.lock().unwrap_or_else(|e| e.into_inner())
}

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "these tests switch to user nobody: run them as root (CI does)"
    );
}

/// A scratch directory like /tmp: world-writable and sticky, so that
/// nobody can plant things in it.
fn shared_tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flitnet-sec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

/// `sh -c script` as user nobody.
fn as_nobody(script: &str) -> Output {
    Command::new("sh")
        .args(["-c", script])
        .uid(NOBODY)
        .gid(NOBODY)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("running sh as nobody")
}

/// flitctl with `$TMPDIR` = `tmp` (where default run dirs go).
fn flitctl_in(tmp: &Path) -> Command {
    let mut c = Command::new(bin("flitctl"));
    c.env("TMPDIR", tmp).current_dir(flitnet::workspace_dir());
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits until `state.json` in `run_dir` lists `n` daemons and the fabric
/// answers (the `fabric up` line), or fails with flitctl's output.
fn wait_started(child: &mut Child, run_dir: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = std::fs::read(run_dir.join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|s| s["daemons"].as_array().map(Vec::len))
            .unwrap_or(0);
        if listed >= n {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("flitctl exited early ({status})");
        }
        assert!(Instant::now() < deadline, "the fabric did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn events_contain(run_dir: &Path, what: &str) -> bool {
    std::fs::read_to_string(run_dir.join("events.jsonl")).is_ok_and(|t| t.contains(what))
}

fn wait_for_event(child: &mut Child, run_dir: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !events_contain(run_dir, what) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("flitctl exited early ({status})");
        }
        assert!(Instant::now() < deadline, "no {what} event");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// Waits (briefly) until no process mentions `needle`.
fn none_left(needle: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = processes_matching(needle);
        if n == 0 || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_symlink_planted_by_another_user_is_never_followed() {
    require_root();
    let _one = serial();
    let tmp = shared_tmp("plant");
    let precious =
        std::env::temp_dir().join(format!("flitnet-sec-precious-{}", std::process::id()));
    std::fs::write(&precious, "root's file\n").unwrap();
    // nobody plants run directories under every name the old scheme
    // (flitnet-up-<pid>) could pick next, and one the user will name, each
    // with events.jsonl pointing at root's file.
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let planted = as_nobody(&format!(
        "set -e; for p in $(seq {} {}); do mkdir {t}/flitnet-up-$p; ln -s {f} {t}/flitnet-up-$p/events.jsonl; done; \
         mkdir {t}/named; ln -s {f} {t}/named/events.jsonl; ln -s {t}/named {t}/link",
        pid,
        pid + 200,
        t = tmp.display(),
        f = precious.display()
    ));
    assert!(planted.status.success(), "{}", text(&planted.stderr));

    // The default run directory: a fresh one, private, not a planted one.
    let out = flitctl_in(&tmp)
        .args(["up", topology("kary-4-2.yaml").to_str().unwrap()])
        .args(["--time-dilation", "1"])
        .args(["--duration", "500ms", "--keep"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "root's file\n");
    let ours: Vec<PathBuf> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.uid() == 0))
        .collect();
    assert_eq!(ours.len(), 1, "one run directory of root's: {ours:?}");
    let meta = std::fs::symlink_metadata(&ours[0]).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.mode() & 0o777, 0o700);
    for e in std::fs::read_dir(&ours[0]).unwrap().flatten() {
        let mode = e.metadata().unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", e.path().display());
    }

    // A directory the user names but nobody owns, or a symlink: refused
    // before anything starts, root's file untouched.
    for (dir, expect) in [("named", "belongs to uid 65534"), ("link", "is a symlink")] {
        let run_dir = tmp.join(dir);
        let out = flitctl_in(&tmp)
            .args(["up", topology("kary-4-2.yaml").to_str().unwrap()])
            .args(["--time-dilation", "1"])
            .args(["--duration", "500ms", "--run-dir"])
            .arg(&run_dir)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expect),
            "{dir}: {err}"
        );
        assert_eq!(processes_matching(run_dir.to_str().unwrap()), 0);
    }
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "root's file\n");
    std::fs::remove_file(&precious).unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Sends a line longer than the daemon's limit; returns its answer.
fn send_long_line(addr: &str, bytes: usize) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..bytes >> 20 {
            if w.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let mut line = String::new();
    let _ = BufReader::new(&mut s).read_line(&mut line);
    drop(s);
    let _ = writer.join();
    line
}

fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// While a fabric runs: user nobody can neither read its token nor stop
/// it; a 100 MiB control line and 300 idle connections cost a daemon
/// nothing; then the signal stops the run with a report marked
/// interrupted and no daemon left.
#[test]
fn another_user_cannot_command_the_fabric_bounded_input_and_signals_mid_run() {
    require_root();
    let _one = serial();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let tmp = shared_tmp(&format!("midrun-{sig}"));
        let run_dir = tmp.join("run");
        let mut up = flitctl_in(&tmp)
            .args(["up", topology("kary-4-2.yaml").to_str().unwrap()])
            .args(["--time-dilation", "1"])
            .args(["--duration", "60s", "--load", "0.1", "--run-dir"])
            .arg(&run_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_started(&mut up, &run_dir, 24);
        wait_for_event(&mut up, &run_dir, "traffic-started");
        let needle = run_dir.to_str().unwrap().to_string();
        // The 24 daemons and flitctl (its command line names the run dir).
        let running = processes_matching(&needle);
        assert_eq!(running, 25);

        if sig == libc::SIGTERM {
            // The token is in 0600 files in a 0700 directory.
            let read = as_nobody(&format!(
                "cat {d}/state.json || cat {d}/s0-0.json || ls {d}",
                d = run_dir.display()
            ));
            assert!(
                !read.status.success(),
                "nobody read: {}",
                text(&read.stdout)
            );
            assert!(text(&read.stderr).contains("Permission denied"));
            let down = Command::new(bin("flitctl"))
                .args(["down"])
                .arg(&run_dir)
                .uid(NOBODY)
                .gid(NOBODY)
                .output()
                .unwrap();
            assert!(!down.status.success());
            assert!(
                text(&down.stderr).contains("Permission denied"),
                "{}",
                text(&down.stderr)
            );
            assert_eq!(
                processes_matching(&needle),
                running,
                "nobody stopped a daemon"
            );

            // Bounded control input, on a real switch.
            let cfg: serde_json::Value =
                serde_json::from_slice(&std::fs::read(run_dir.join("s0-0.json")).unwrap()).unwrap();
            let addr = cfg["control_addr"].as_str().unwrap().to_string();
            let state: serde_json::Value =
                serde_json::from_slice(&std::fs::read(run_dir.join("state.json")).unwrap())
                    .unwrap();
            let pid = state["daemons"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["name"] == "s0-0")
                .unwrap()["pid"]
                .as_u64()
                .unwrap() as u32;
            let rss_before = rss_kib(pid);
            let answer = send_long_line(&addr, 100 << 20);
            assert!(
                answer.contains("request line longer than 1048576 bytes"),
                "{answer}"
            );
            let rss_after = rss_kib(pid);
            assert!(
                rss_after < rss_before + 16 * 1024,
                "a 100 MiB line grew s0-0 from {rss_before} to {rss_after} KiB"
            );
            let threads_before = threads_of(pid);
            let idle: Vec<TcpStream> = (0..300)
                .map(|_| TcpStream::connect(&addr).unwrap())
                .collect();
            std::thread::sleep(Duration::from_millis(300));
            let threads = threads_of(pid);
            assert!(
                threads <= threads_before + 32,
                "300 idle connections: {threads_before} -> {threads} threads"
            );
            drop(idle);
            let log = std::fs::read_to_string(run_dir.join("s0-0.log")).unwrap();
            assert!(log.contains("too many open"), "{log}");
        }

        signal(&up, sig);
        let (code, stdout, stderr) = finish(up);
        let name = if sig == libc::SIGTERM {
            "SIGTERM"
        } else {
            "SIGINT"
        };
        assert_eq!(code, 130, "{stderr}");
        assert!(
            stdout.contains(&format!("INTERRUPTED by {name}")),
            "{stdout}\n{stderr}"
        );
        assert!(stdout.contains("messages    generated"), "{stdout}");
        assert_eq!(none_left(&needle), 0, "daemons left after {name}");
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

/// A signal while the daemons start: every daemon started so far is
/// stopped (SIGINT, SIGTERM by flitctl; SIGKILL by their death signal), and
/// state.json names them.
#[test]
fn signals_at_bring_up_leave_no_daemon() {
    require_root();
    let _one = serial();
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGKILL] {
        let tmp = shared_tmp(&format!("bringup-{sig}"));
        let run_dir = tmp.join("run");
        let mut up = flitctl_in(&tmp)
            .args(["up", topology("kary-4-3.yaml").to_str().unwrap()])
            .args(["--time-dilation", "1"])
            .args(["--duration", "30s", "--run-dir"])
            .arg(&run_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A few of the 112 daemons started.
        wait_started(&mut up, &run_dir, 5);
        signal(&up, sig);
        let (code, _, stderr) = finish(up);
        let needle = run_dir.to_str().unwrap().to_string();
        assert_eq!(
            none_left(&needle),
            0,
            "daemons left after signal {sig}: {stderr}"
        );
        if sig == libc::SIGKILL {
            assert_eq!(code, -1);
            // The state file names what was started; down finds nothing
            // left to kill.
            let out = Command::new(bin("flitctl"))
                .arg("down")
                .arg(&run_dir)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            assert!(text(&out.stderr).contains("0 processes had to be killed"));
        } else {
            assert_ne!(code, 0);
            assert!(stderr.contains("interrupted during bring-up"), "{stderr}");
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

/// `flitctl down` on a stale state.json whose PID now belongs to an
/// unrelated process (a `sleep`): left alone. The same state with the
/// right start time: killed.
#[test]
fn down_refuses_a_reused_pid() {
    let dir = std::env::temp_dir().join(format!("flitnet-sec-down-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = sleeper.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let state = |start_time: u64| {
        serde_json::json!({
            "token": "t", "subnet": 40,
            "daemons": [{"name": "s0-0", "control_addr": "127.0.0.1:1", "pid": pid,
                         "start_time": start_time, "exe": exe}],
        })
    };
    std::fs::write(dir.join("state.json"), state(start + 1).to_string()).unwrap();
    let out = Command::new(bin("flitctl"))
        .arg("down")
        .arg(&dir)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("left alone: s0-0") && err.contains("another process has the PID"),
        "{err}"
    );
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "down killed an unrelated process"
    );

    std::fs::write(dir.join("state.json"), state(start).to_string()).unwrap();
    let out = Command::new(bin("flitctl"))
        .arg("down")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("1 processes had to be killed"),
        "{}",
        text(&out.stderr)
    );
    let status = sleeper.wait().unwrap();
    assert!(!status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A daemon stopped with SIGSTOP: the report names it as stalled and the
/// rest is printed; nothing is left running.
#[test]
fn a_stopped_daemon_is_reported_stalled_and_the_report_still_printed() {
    let _one = serial();
    let tmp = shared_tmp("sigstop");
    let run_dir = tmp.join("run");
    let mut up = flitctl_in(&tmp)
        .args(["up", topology("kary-4-2.yaml").to_str().unwrap()])
        .args(["--time-dilation", "1"])
        .args(["--duration", "2s", "--load", "0.1", "--run-dir"])
        .arg(&run_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_started(&mut up, &run_dir, 24);
    wait_for_event(&mut up, &run_dir, "traffic-started");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("state.json")).unwrap()).unwrap();
    let pid = state["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "s1-0")
        .unwrap()["pid"]
        .as_i64()
        .unwrap();
    // SAFETY: kill(2) on a daemon of the fabric this test started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    let (code, stdout, stderr) = finish(up);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("stalled     s1-0 (no answer"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("messages    generated"), "{stdout}");
    assert!(
        !stderr.contains("Resource temporarily unavailable"),
        "{stderr}"
    );
    assert_eq!(none_left(run_dir.to_str().unwrap()), 0);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Every out-of-range value is refused by name before any process starts
/// (no run directory is even made).
#[test]
fn bad_values_are_refused_before_anything_starts() {
    let tmp = shared_tmp("values");
    let topo = topology("kary-4-2.yaml");
    for (args, expect) in [
        (vec!["--load", "0"], "load 0 must be in (0, 1]"),
        (vec!["--load", "5"], "load 5 must be in (0, 1]"),
        (vec!["--load=-1"], "load -1 must be in (0, 1]"),
        (vec!["--vcs", "16"], "vcs = 16 must be 1..=15"),
        (vec!["--vcs", "0"], "vcs = 0 must be 1..=15"),
        (vec!["--message-flits", "0"], "message length 0 flits"),
        (vec!["--duration", "0s"], "traffic duration 0 ns"),
        (vec!["--buffer-depth", "0"], "buffer_depth = 0"),
        (vec!["--max-packet-flits", "0"], "max_packet_flits = 0"),
        (
            vec!["--pattern", "zigzag"],
            "unknown traffic pattern `zigzag`",
        ),
    ] {
        let out = flitctl_in(&tmp)
            .arg("up")
            .arg(&topo)
            .args(&args)
            .args(["--time-dilation", "1"])
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expect),
            "{args:?}: {err}"
        );
        assert!(!err.contains("fabric up"), "{args:?}: started: {err}");
    }
    // A scenario's values, the same way.
    let scenario = tmp.join("bad.yaml");
    std::fs::write(
        &scenario,
        format!(
            "topology: {}\nmechanism: none\ntraffic: {{load: 2, duration: 1s}}\n",
            topo.display()
        ),
    )
    .unwrap();
    let out = flitctl_in(&tmp)
        .arg("chaos")
        .arg(&scenario)
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("traffic: load 2 must be in (0, 1]"),
        "{}",
        text(&out.stderr)
    );
    // A deeply nested topology file: refused at once, by line.
    let nested = tmp.join("nested.yaml");
    std::fs::write(
        &nested,
        format!("switches: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
    )
    .unwrap();
    let out = flitctl_in(&tmp)
        .args(["topo", "show"])
        .arg(&nested)
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("nested.yaml:1: nested deeper than 64 levels"),
        "{}",
        text(&out.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("flitnet-"))
        .collect();
    assert!(left.is_empty(), "run directories made: {left:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A successful run removes its run directory; `--keep` keeps it, `flitctl
/// runs` lists it and `runs --clean` removes it.
#[test]
fn run_directories_are_cleaned_up_and_listed() {
    let _one = serial();
    let tmp = shared_tmp("runs");
    let up = |keep: bool| {
        let mut c = flitctl_in(&tmp);
        c.args([
            "up",
            topology("kary-4-2.yaml").to_str().unwrap(),
            "--duration",
            "300ms",
            "--time-dilation",
            "1",
        ]);
        if keep {
            c.arg("--keep");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    let entries = || std::fs::read_dir(&tmp).unwrap().count();
    up(false);
    assert_eq!(entries(), 0, "a successful run left its directory");
    up(true);
    assert_eq!(entries(), 1);
    let list = flitctl_in(&tmp).arg("runs").output().unwrap();
    let listed = text(&list.stdout);
    assert!(
        listed.contains("flitnet-up-") && listed.contains("finished"),
        "{listed}"
    );
    let clean = flitctl_in(&tmp).args(["runs", "--clean"]).output().unwrap();
    assert!(
        text(&clean.stdout).contains("removed"),
        "{}",
        text(&clean.stdout)
    );
    assert_eq!(entries(), 0);
    let _ = std::fs::remove_dir_all(&tmp);
}
