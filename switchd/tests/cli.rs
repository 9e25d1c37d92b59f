//! `switchd` as a user meets it: bad configuration files are refused with a
//! message naming the file and the problem, never a panic.
//!
//! These integration tests also make `cargo test --workspace` build the
//! `switchd` binary, which the end-to-end tests in `tests/` start.

use flitnet::daemon_cli::{config, DaemonCli};
use flitnet_core::control::{PortPeer, Role};

const DAEMON: DaemonCli = DaemonCli {
    name: "switchd",
    exe: env!("CARGO_BIN_EXE_switchd"),
};

#[test]
fn a_missing_configuration_file_is_named() {
    let stderr = DAEMON.refused(&DAEMON.scratch("does-not-exist.json"));
    assert!(stderr.contains("reading"), "{stderr}");
}

#[test]
fn malformed_json_is_refused() {
    let stderr = DAEMON.refused(&DAEMON.write("broken.json", "{\"name\": \"s0\", "));
    assert!(stderr.contains("bad configuration"), "{stderr}");
}

#[test]
fn an_unknown_key_is_named() {
    let mut json = serde_json::to_value(config(Role::Switch { id: 0, radix: 4 }, vec![])).unwrap();
    json["colour"] = serde_json::json!("blue");
    let stderr = DAEMON.refused(&DAEMON.write("unknown-key.json", &json.to_string()));
    assert!(stderr.contains("colour"), "{stderr}");
}

#[test]
fn a_port_beyond_the_radix_is_named() {
    let cfg = config(
        Role::Switch { id: 0, radix: 4 },
        vec![PortPeer::udp(7, "127.0.0.1:9".parse().unwrap())],
    );
    let stderr = DAEMON.refused(&DAEMON.write_config("port.json", &cfg));
    assert!(stderr.contains("port 7 does not exist"), "{stderr}");
}

#[test]
fn a_host_configuration_is_refused() {
    let cfg = config(
        Role::Host {
            id: 0,
            hosts: 4,
            ports: 1,
        },
        vec![],
    );
    let stderr = DAEMON.refused(&DAEMON.write_config("host.json", &cfg));
    assert!(stderr.contains("start hostd"), "{stderr}");
}

#[test]
fn an_ethernet_port_on_a_missing_interface_names_interface_and_node() {
    let mut cfg = config(
        Role::Switch { id: 0, radix: 4 },
        vec![PortPeer::ethernet(2, "flitnet-nope0", None)],
    );
    cfg.fabric.transport = flitnet_core::control::DataTransport::Ethernet;
    let stderr = DAEMON.refused(&DAEMON.write_config("no-iface.json", &cfg));
    assert!(
        stderr.contains("s0") && stderr.contains("port 2: no interface `flitnet-nope0`"),
        "{stderr}"
    );
    // A UDP fabric's port must have a peer address, an Ethernet one an
    // interface: a half-converted configuration is named.
    cfg.fabric.transport = flitnet_core::control::DataTransport::Udp;
    let stderr = DAEMON.refused(&DAEMON.write_config("udp-iface.json", &cfg));
    assert!(stderr.contains("port 2 has no peer address"), "{stderr}");
}
