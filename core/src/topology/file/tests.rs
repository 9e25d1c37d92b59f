use super::*;
use crate::switch_params::SwitchLatency;
use crate::topology::generators::{hypercube, kary_ntree, mesh_or_torus, pgft, ruft};
use proptest::prelude::*;

const TINY: &str = "\
name: tiny
switches:
  - {name: s0, ports: 4, level: 0}
  - {name: s1, ports: 4, level: 0}
hosts:
  - {name: h0}
  - {name: h1, kind: storage}
  - {name: h2}
  - {name: h3}
links:
  - h0:0 -- s0:0
  - h1:0 -- s0:1
  - h2:0 -- s1:0
  - h3:0 -- s1:1
  - s0:2 -- s1:2
";

fn load(text: &str) -> Result<Topology, TopologyFileError> {
    Topology::from_yaml_str(text, "test.yaml")
}

/// Loads `text`, expecting an error; checks that the message names the file,
/// the element and (when `line` is given) the line.
fn expect_error(text: &str, element: &str, line: Option<usize>) -> TopologyFileError {
    let err = load(text).expect_err("the file should be rejected");
    let message = err.to_string();
    assert!(message.starts_with("test.yaml"), "{message}");
    assert!(
        message.contains(element),
        "`{element}` missing from: {message}"
    );
    assert_eq!(err.line(), line, "{message}");
    if let Some(l) = line {
        assert!(
            message.starts_with(&format!("test.yaml:{l}: ")),
            "{message}"
        );
    }
    err
}

#[test]
fn explicit_form_builds_the_listed_fabric() {
    let t = load(TINY).unwrap();
    assert_eq!(t.name, "tiny");
    assert_eq!(t.family, Family::Custom);
    assert_eq!(t.num_switches(), 2);
    assert_eq!(t.num_hosts(), 4);
    assert_eq!(t.links.len(), 5);
    assert_eq!(t.hosts[1].kind, HostKind::Storage);
    assert_eq!(t.hosts[0].ports.len(), 1);
    assert_eq!(t.peer(PortRef::switch(0, 2)), Some(PortRef::switch(1, 2)));
    assert_eq!(t.peer(PortRef::switch(1, 1)), Some(PortRef::host(3, 0)));
    // Without `name:`, the file's stem names the fabric.
    let unnamed =
        Topology::from_yaml_str(&TINY.replace("name: tiny\n", ""), "dir/fabric.yaml").unwrap();
    assert_eq!(unnamed.name, "fabric");
}

#[test]
fn generator_form_matches_the_generators() {
    let cases: Vec<(&str, Topology)> = vec![
        (
            "generator: kary-ntree\nk: 4\nn: 2\n",
            kary_ntree(4, 2).unwrap(),
        ),
        (
            "generator: pgft\nm: [4, 4, 6]\nw: [1, 2, 2]\np: [1, 1, 1]\n",
            pgft(&PgftParams {
                m: vec![4, 4, 6],
                w: vec![1, 2, 2],
                p: vec![1, 1, 1],
            })
            .unwrap(),
        ),
        ("generator: ruft\nk: 2\nn: 3\n", ruft(2, 3).unwrap()),
        (
            "generator: mesh\ndims: [3, 3]\n",
            mesh_or_torus(&[3, 3], false).unwrap(),
        ),
        (
            "generator: torus\ndims: [3, 3, 3]\n",
            mesh_or_torus(&[3, 3, 3], true).unwrap(),
        ),
        ("generator: hypercube\nd: 4\n", hypercube(4).unwrap()),
    ];
    for (text, expected) in cases {
        assert_eq!(load(text).unwrap(), expected, "{text}");
    }
}

#[test]
fn generator_form_takes_a_name_and_storage_nids() {
    let t = load("name: small\ngenerator: kary-ntree\nk: 2\nn: 2\nstorage: [1, 3]\n").unwrap();
    assert_eq!(t.name, "small");
    let kinds: Vec<HostKind> = t.hosts.iter().map(|h| h.kind).collect();
    use HostKind::*;
    assert_eq!(kinds, vec![Compute, Storage, Compute, Storage]);
    let err = expect_error(
        "generator: kary-ntree\nk: 2\nn: 2\nstorage:\n  - 1\n  - 4\n",
        "storage[1]",
        Some(6),
    );
    assert!(err.to_string().contains("NID 4"), "{err}");
}

#[test]
fn to_yaml_round_trips_exactly() {
    let mut with_storage = pgft(&PgftParams {
        m: vec![4, 4, 6],
        w: vec![1, 2, 2],
        p: vec![1, 2, 2],
    })
    .unwrap();
    with_storage.hosts[3].kind = HostKind::Storage;
    let mut odd_names = load(TINY).unwrap();
    odd_names.name = "PGFT(2;4,4;1,2;1,2) \"quoted\": yes".into();
    odd_names.switches[0].name = "true".into();
    odd_names.switches[1].name = "leaf 1: A, #2".into();
    odd_names.hosts[0].name = "0x12".into();
    odd_names.hosts[1].name = "node:with:colons".into();
    let cases = vec![
        kary_ntree(4, 3).unwrap(),
        ruft(4, 2).unwrap(),
        mesh_or_torus(&[4, 3], false).unwrap(),
        mesh_or_torus(&[3, 3, 3], true).unwrap(),
        hypercube(3).unwrap(),
        with_storage,
        load(TINY).unwrap(),
        odd_names,
    ];
    for t in cases {
        let text = t.to_yaml();
        let back = Topology::from_yaml_str(&text, "round-trip.yaml")
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, t, "{text}");
        assert_eq!(back.to_yaml(), text);
    }
}

#[test]
fn line_finder_handles_block_and_flow_sequences() {
    let text = "a: 1\nlinks:\n# comment\n  - x\n\n  - y\n  -\n    z\nnext: [1, 2]\n";
    assert_eq!(key_line(text, "links"), Some(2));
    assert_eq!(item_lines(text, "links"), vec![4, 6, 7]);
    assert_eq!(item_lines("links: [a, b]\n", "links"), Vec::<usize>::new());
    assert_eq!(
        item_lines("links:\n- a\n- b\nhosts: []\n", "links"),
        vec![2, 3]
    );
}

// One test per error kind.

#[test]
fn error_unknown_key_names_the_key_and_line() {
    let text = TINY.replace(
        "  - {name: s1, ports: 4, level: 0}",
        "  - {name: s1, portz: 4, level: 0}",
    );
    let err = expect_error(&text, "portz", Some(4));
    assert!(matches!(err, TopologyFileError::Syntax { .. }));
    expect_error(
        "generator: kary-ntree\nk: 4\nn: 2\nradix: 8\n",
        "radix",
        Some(4),
    );
}

#[test]
fn error_port_used_twice() {
    let text = TINY.replace("  - h1:0 -- s0:1", "  - h1:0 -- s0:0");
    let err = expect_error(&text, "links[1] `h1:0 -- s0:0`", Some(12));
    assert!(matches!(
        err.topology_error(),
        Some(TopologyError::PortInUse { port: 0, .. })
    ));
    assert!(
        err.to_string().contains("s0: port 0 is already cabled"),
        "{err}"
    );
}

#[test]
fn error_self_loop_cable_names_the_link() {
    let text = TINY.replace("  - s0:2 -- s1:2", "  - s0:2 -- s0:1");
    let text = text.replace("  - h1:0 -- s0:1\n", "  - h1:0 -- s1:3\n");
    let err = expect_error(&text, "links[4] `s0:2 -- s0:1`", Some(15));
    assert_eq!(
        err.topology_error(),
        Some(&TopologyError::SelfLoop {
            node: "s0".into(),
            port: 2,
            other_port: 1
        })
    );
    assert!(err.to_string().contains("self-loop"), "{err}");
    // The same port twice is a self-loop too.
    let text = TINY.replace("  - s0:2 -- s1:2", "  - s0:2 -> s0:2");
    expect_error(&text, "links[4] `s0:2 -> s0:2`", Some(15));
}

#[test]
fn error_one_way_link_without_a_way_back() {
    // h3 can send into the fabric but nothing reaches it.
    let text = TINY.replace("  - h3:0 -- s1:1", "  - h3:0 -> s1:1");
    let err = expect_error(&text, "link `h3:0 -> s1:1`", Some(14));
    assert!(
        err.to_string().contains("h3 cannot be reached from h0"),
        "{err}"
    );
    // Turned around, h3 is reached but cannot answer.
    let text = TINY.replace("  - h3:0 -- s1:1", "  - s1:1 -> h3:0");
    let err = expect_error(&text, "link `s1:1 -> h3:0`", Some(14));
    assert!(
        err.to_string().contains("h0 cannot be reached from h3"),
        "{err}"
    );
    // Two one-way links in opposite directions between the same nodes
    // make a way back, and a RUFT (one-way links only) is valid.
    let text = TINY.replace("  - s0:2 -- s1:2", "  - s0:2 -> s1:2\n  - s1:3 -> s0:3");
    load(&text).unwrap();
    ruft(2, 3).unwrap().validate().unwrap();
}

#[test]
fn error_port_beyond_the_radix() {
    let text = TINY.replace("  - s0:2 -- s1:2", "  - s0:2 -- s1:4");
    let err = expect_error(&text, "links[4]", Some(15));
    assert!(matches!(
        err.topology_error(),
        Some(TopologyError::PortOutOfRange {
            port: 4,
            radix: 4,
            ..
        })
    ));
}

#[test]
fn error_link_to_a_missing_node() {
    let text = TINY.replace("  - h3:0 -- s1:1", "  - h3:0 -- s9:1");
    let err = expect_error(&text, "links[3]", Some(14));
    assert_eq!(
        err.topology_error(),
        Some(&TopologyError::UnknownNode("s9".into()))
    );
    assert!(err.to_string().contains("`s9`"), "{err}");
}

#[test]
fn error_duplicate_names() {
    let text = TINY.replace("  - {name: h2}", "  - {name: s1}");
    let err = expect_error(&text, "hosts[2] `s1`", Some(8));
    assert_eq!(
        err.topology_error(),
        Some(&TopologyError::DuplicateName("s1".into()))
    );
}

#[test]
fn error_disconnected_fabric() {
    let text = TINY.replace("  - s0:2 -- s1:2\n", "");
    let err = expect_error(&text, "node `h2`", Some(8));
    assert!(matches!(
        err.topology_error(),
        Some(TopologyError::Disconnected { .. })
    ));
    assert!(
        err.to_string().contains("cannot be reached from `h0`"),
        "{err}"
    );
}

#[test]
fn error_generator_parameter_out_of_range() {
    let err = expect_error(
        "generator: kary-ntree\nk: 1\nn: 3\n",
        "test.yaml:2: generator: kary-ntree: parameter k = 1",
        Some(2),
    );
    assert!(matches!(
        err.topology_error(),
        Some(TopologyError::InvalidParameter { .. })
    ));
    assert!(err.to_string().contains("k = 1"), "{err}");
    expect_error("generator: torus\ndims: [3, 1]\n", "dims[1] = 1", Some(2));
    expect_error("generator: hypercube\nd: 0\n", "d = 0", Some(2));
    expect_error(
        "generator: pgft\nm: [4]\nw: [1]\np: [100000]\n",
        "radix",
        Some(2),
    );
    expect_error(
        "generator: pgft\nm: [4000000000, 4000000000, 4000000000]\nw: [1, 1, 1]\np: [1, 1, 1]\n",
        "nodes",
        Some(1),
    );
}

#[test]
fn switch_parameters_are_read_in_both_forms_and_round_trip() {
    let t = load("generator: kary-ntree\nk: 2\nn: 2\nswitch-latency: 250ns\ncrossbar-speedup: 2\n")
        .unwrap();
    assert_eq!(
        t.switch_params,
        SwitchParams {
            switch_latency: Some(SwitchLatency::Ns(250)),
            crossbar_speedup: Some(2),
        }
    );
    let back = load(&t.to_yaml()).unwrap();
    assert_eq!(back, t);
    // A number is a latency too (0: none), and the explicit form takes them.
    let t = load(&format!("switch-latency: 0\n{TINY}")).unwrap();
    assert_eq!(t.switch_params.switch_latency, Some(SwitchLatency::Ns(0)));
    assert_eq!(t.switch_params.crossbar_speedup, None);
    let t = load(&format!("switch-latency: 6ft\n{TINY}")).unwrap();
    assert_eq!(
        t.switch_params.switch_latency,
        Some(SwitchLatency::FlitTimes(6))
    );
    // Left out, nothing is set: the run's flags or the defaults apply.
    assert!(load(TINY).unwrap().switch_params.is_unset());
    assert!(!TINY.contains("switch-latency") && !load(TINY).unwrap().to_yaml().contains("switch-"));
}

#[test]
fn error_bad_switch_parameters_name_the_key_and_line() {
    let g = "generator: kary-ntree\nk: 2\nn: 2\n";
    expect_error(
        &format!("{g}switch-latency: fast\n"),
        "test.yaml:4: switch-latency: switch latency \"fast\": expected flit times",
        Some(4),
    );
    expect_error(
        &format!("{g}switch-latency: [4]\n"),
        "switch-latency",
        Some(4),
    );
    expect_error(
        &format!("{g}switch-latency: -3ns\n"),
        "switch-latency",
        Some(4),
    );
    expect_error(
        &format!("{g}switch-latency: 5000ft\n"),
        "5000ft is too long",
        Some(4),
    );
    expect_error(&format!("{g}switch-latency: 2ms\n"), "is too long", Some(4));
    expect_error(
        &format!("{g}crossbar-speedup: 0\n"),
        "test.yaml:4: crossbar-speedup: 0 is out of range: a crossbar speedup is 1..=64",
        Some(4),
    );
    expect_error(
        &format!("{g}crossbar-speedup: 65\n"),
        "65 is out of range",
        Some(4),
    );
    expect_error(&format!("{g}crossbar-speedup: -1\n"), "-1", Some(4));
    expect_error(
        &format!("crossbar-speedup: 100\n{TINY}"),
        "crossbar-speedup",
        Some(1),
    );
}

#[test]
fn error_missing_or_foreign_generator_parameter() {
    expect_error("generator: kary-ntree\nk: 4\n", "needs `n`", Some(1));
    expect_error(
        "generator: mesh\ndims: [2, 2]\nk: 4\n",
        "`k` is not a parameter of mesh",
        Some(3),
    );
    expect_error("generator: fat\nk: 4\n", "unknown family `fat`", Some(1));
    expect_error(
        "generator: kary-ntree\nk: 2\nn: 2\nlinks: []\n",
        "explicit form",
        Some(4),
    );
    expect_error(&format!("k: 4\n{TINY}"), "needs a `family:`", Some(1));
}

#[test]
fn error_malformed_links_and_names() {
    let text = TINY.replace("  - h0:0 -- s0:0", "  - h0:0 <-> s0:0");
    expect_error(&text, "links[0]", Some(11));
    let text = TINY.replace("  - h0:0 -- s0:0", "  - h0 -- s0:0");
    expect_error(&text, "`h0` is not NODE:PORT", Some(11));
    let text = TINY.replace("  - {name: h0}", "  - {name: \"\"}");
    expect_error(&text, "cannot be empty", Some(6));
}

#[test]
fn error_wrong_types_and_non_yaml_never_panic() {
    expect_error("generator: kary-ntree\nk: -1\nn: 2\n", "-1", Some(2));
    expect_error("[1, 2, 3]\n", "expected struct", Some(1));
    expect_error("name: [unclosed\n", "expected a string", Some(1));
    let err = load("name: 'unterminated\nhosts: []\n").unwrap_err();
    assert!(
        matches!(err, TopologyFileError::Syntax { line: Some(_), .. }),
        "{err}"
    );
    let err = load("").unwrap_err();
    assert!(err.to_string().starts_with("test.yaml"), "{err}");
    expect_error("name: x\n", "needs either `generator:` or `hosts:`", None);
    expect_error("hosts: []\n", "no hosts", Some(1));
    let many = format!("hosts:\n{}", "  - {name: x, ports: 65535}\n".repeat(1000));
    // Duplicate names do not matter: the bound is checked first.
    expect_error(&many, "at most 64000000", None);
    let text = TINY.replace("  - h0:0 -- s0:0", "  - [h0:0, s0:0]");
    expect_error(&text, "expected a string", Some(11));
}

#[test]
fn load_reads_files_and_names_them_in_errors() {
    let dir = std::env::temp_dir().join(format!("flitnet-topo-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("tiny.yaml");
    std::fs::write(&good, TINY).unwrap();
    assert_eq!(Topology::load(&good).unwrap(), load(TINY).unwrap());
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, TINY.replace("  - h1:0 -- s0:1", "  - h1:0 -- s0:0")).unwrap();
    let err = Topology::load(&bad).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:12: links[1]", bad.display())),
        "{err}"
    );
    let missing = dir.join("missing.yaml");
    let err = Topology::load(&missing).unwrap_err();
    assert!(matches!(err, TopologyFileError::Io { .. }));
    assert!(err.to_string().contains("missing.yaml"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn generated_topologies_round_trip(
        k in 2u32..5, n in 1u32..4, dims in proptest::collection::vec(2u32..5, 1..4), wrap: bool,
    ) {
        for t in [kary_ntree(k, n).unwrap(), ruft(k, n).unwrap(), mesh_or_torus(&dims, wrap).unwrap()] {
            let back = Topology::from_yaml_str(&t.to_yaml(), "p.yaml").unwrap();
            prop_assert_eq!(back, t);
        }
    }
}

/// Every example in `topologies/` loads, validates and round-trips; the
/// sizes the papers use come out right.
#[test]
fn every_example_topology_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topologies");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let t = Topology::load(&path).unwrap_or_else(|e| panic!("{e}"));
        t.validate().unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name != "pgft-8640" {
            assert_eq!(
                Topology::from_yaml_str(&t.to_yaml(), &name).unwrap(),
                t,
                "{name}"
            );
        }
        let storage = t
            .hosts
            .iter()
            .filter(|h| h.kind == HostKind::Storage)
            .count();
        seen.push((
            name,
            t.num_hosts(),
            t.num_switches(),
            t.links.len(),
            storage,
        ));
    }
    seen.sort();
    let expected = [
        ("explicit-tiny", 4, 2, 5, 1),
        ("hypercube-4", 16, 16, 16 + 32, 0),
        ("hypercube-6", 64, 64, 64 + 192, 0),
        ("kary-3-3", 27, 27, 81, 0),
        ("kary-4-2", 16, 8, 32, 0),
        ("kary-4-3", 64, 48, 192, 0),
        ("mesh-3x3", 9, 9, 9 + 12, 0),
        ("mesh-7x7", 49, 49, 49 + 84, 0),
        ("mesh-8x8", 64, 64, 64 + 112, 0),
        ("pgft-8640", 8640, 768, 8640 + 8640 + 2160, 0),
        ("pgft-g3", 96, 40, 96 + 12 * 4 + 4 * 6, 24),
        ("pgft-rlft-16", 16, 6, 16 + 16, 0),
        ("ruft-4-2", 16, 8, 48, 0),
        ("torus-3x3x3", 27, 27, 27 + 81, 0),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|&(n, h, s, l, st)| (n.to_string(), h, s, l, st))
        .collect();
    assert_eq!(seen, expected);
}
