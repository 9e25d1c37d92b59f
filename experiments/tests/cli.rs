//! The experiments binary answers on its own and through `flitctl
//! reproduce` (an integration test also makes `cargo test --workspace`
//! build the binary the end-to-end tests reach through flitctl).

use std::process::Command;

#[test]
fn an_unknown_section_is_refused_by_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_flitnet-experiments"))
        .args(["reproduce", "--only", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope"), "{err}");
}
