//! `hostd` as a user meets it: bad configuration files are refused with a
//! message naming the file and the problem, never a panic.
//!
//! These integration tests also make `cargo test --workspace` build the
//! `hostd` binary, which the end-to-end tests in `tests/` start.

use flitnet::daemon_cli::{config, DaemonCli};
use flitnet_core::control::Role;

const DAEMON: DaemonCli = DaemonCli {
    name: "hostd",
    exe: env!("CARGO_BIN_EXE_hostd"),
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
fn a_host_id_beyond_the_host_count_is_named() {
    let cfg = config(
        Role::Host {
            id: 9,
            hosts: 4,
            ports: 1,
        },
        vec![],
    );
    let stderr = DAEMON.refused(&DAEMON.write_config("id.json", &cfg));
    assert!(
        stderr.contains("host id 9 is not below the host count 4"),
        "{stderr}"
    );
}

#[test]
fn a_switch_configuration_is_refused() {
    let cfg = config(Role::Switch { id: 0, radix: 4 }, vec![]);
    let stderr = DAEMON.refused(&DAEMON.write_config("switch.json", &cfg));
    assert!(stderr.contains("start switchd"), "{stderr}");
}
