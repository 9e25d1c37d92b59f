//! `hostd` as a user meets it: bad configuration files are refused with a
//! message naming the file and the problem, never a panic.
//!
//! These integration tests also make `cargo test --workspace` build the
//! `hostd` binary, which the end-to-end tests in `tests/` start.

use flitnet_core::control::{DaemonConfig, FabricParams, PortPeer, Role};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hostd-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn switchd(config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hostd"))
        .arg("--config")
        .arg(config)
        .output()
        .expect("running hostd")
}

fn refused(config: &Path) -> String {
    let out = switchd(config);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "hostd accepted {config:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "hostd panicked: {stderr}");
    assert!(
        stderr.contains(&config.display().to_string()),
        "the error does not name the file: {stderr}"
    );
    stderr
}

fn config(role: Role, ports: Vec<PortPeer>) -> DaemonConfig {
    DaemonConfig {
        name: "s0".into(),
        role,
        token: "t".into(),
        data_addr: "127.0.0.1:0".parse().unwrap(),
        control_addr: "127.0.0.1:0".parse().unwrap(),
        metrics_addr: None,
        ports,
        fabric: FabricParams::default(),
        seed: 1,
        events_addr: None,
        netns: None,
    }
}

fn write(name: &str, text: &str) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_missing_configuration_file_is_named() {
    let stderr = refused(&scratch("does-not-exist.json"));
    assert!(stderr.contains("reading"), "{stderr}");
}

#[test]
fn malformed_json_is_refused() {
    let stderr = refused(&write("broken.json", "{\"name\": \"s0\", "));
    assert!(stderr.contains("bad configuration"), "{stderr}");
}

#[test]
fn an_unknown_key_is_named() {
    let mut json = serde_json::to_value(config(Role::Switch { id: 0, radix: 4 }, vec![])).unwrap();
    json["colour"] = serde_json::json!("blue");
    let stderr = refused(&write("unknown-key.json", &json.to_string()));
    assert!(stderr.contains("colour"), "{stderr}");
}

#[test]
fn a_host_id_beyond_the_host_count_is_named() {
    let cfg = config(Role::Host { id: 9, hosts: 4 }, vec![]);
    let stderr = refused(&write("id.json", &serde_json::to_string(&cfg).unwrap()));
    assert!(
        stderr.contains("host id 9 is not below the host count 4"),
        "{stderr}"
    );
}

#[test]
fn a_switch_configuration_is_refused() {
    let cfg = config(Role::Switch { id: 0, radix: 4 }, vec![]);
    let stderr = refused(&write("switch.json", &serde_json::to_string(&cfg).unwrap()));
    assert!(stderr.contains("start switchd"), "{stderr}");
}
