//! `switchd` as a user meets it: bad configuration files are refused with a
//! message naming the file and the problem, never a panic.
//!
//! These integration tests also make `cargo test --workspace` build the
//! `switchd` binary, which the end-to-end tests in `tests/` start.

use flitnet_core::control::{DaemonConfig, FabricParams, PortPeer, Role};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchd-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn switchd(config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchd"))
        .arg("--config")
        .arg(config)
        .output()
        .expect("running switchd")
}

fn refused(config: &Path) -> String {
    let out = switchd(config);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "switchd accepted {config:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "switchd panicked: {stderr}");
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
fn a_port_beyond_the_radix_is_named() {
    let cfg = config(
        Role::Switch { id: 0, radix: 4 },
        vec![PortPeer::udp(7, "127.0.0.1:9".parse().unwrap())],
    );
    let stderr = refused(&write("port.json", &serde_json::to_string(&cfg).unwrap()));
    assert!(stderr.contains("port 7 does not exist"), "{stderr}");
}

#[test]
fn a_host_configuration_is_refused() {
    let cfg = config(Role::Host { id: 0, hosts: 4 }, vec![]);
    let stderr = refused(&write("host.json", &serde_json::to_string(&cfg).unwrap()));
    assert!(stderr.contains("start hostd"), "{stderr}");
}

#[test]
fn an_ethernet_port_on_a_missing_interface_names_interface_and_node() {
    let mut cfg = config(
        Role::Switch { id: 0, radix: 4 },
        vec![PortPeer::ethernet(2, "flitnet-nope0", None)],
    );
    cfg.fabric.transport = flitnet_core::control::DataTransport::Ethernet;
    let stderr = refused(&write(
        "no-iface.json",
        &serde_json::to_string(&cfg).unwrap(),
    ));
    assert!(
        stderr.contains("s0") && stderr.contains("port 2: no interface `flitnet-nope0`"),
        "{stderr}"
    );
    // A UDP fabric's port must have a peer address, an Ethernet one an
    // interface: a half-converted configuration is named.
    cfg.fabric.transport = flitnet_core::control::DataTransport::Udp;
    let stderr = refused(&write(
        "udp-iface.json",
        &serde_json::to_string(&cfg).unwrap(),
    ));
    assert!(stderr.contains("port 2 has no peer address"), "{stderr}");
}
