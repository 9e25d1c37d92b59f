use super::*;
use crate::topology::generators::{hypercube, kary_ntree, mesh_or_torus, pgft, ruft};
use crate::topology::PgftParams;
use std::collections::BTreeSet;

/// Names, radices and levels of the nodes, and the links as unordered pairs
/// of (node name, port): what "the same fabric" means across formats.
type Shape = (
    Vec<(String, usize, Option<u32>)>,
    Vec<(String, usize)>,
    BTreeSet<[(String, PortNo); 2]>,
);

fn shape(t: &Topology) -> Shape {
    let switches = t
        .switches
        .iter()
        .map(|s| (s.name.clone(), s.ports.len(), s.level))
        .collect();
    let hosts = t
        .hosts
        .iter()
        .map(|h| (h.name.clone(), h.ports.len()))
        .collect();
    let links = t
        .links
        .iter()
        .map(|l| {
            let mut ends = [
                (t.node_name(l.a.node).to_string(), l.a.port),
                (t.node_name(l.b.node).to_string(), l.b.port),
            ];
            ends.sort();
            ends
        })
        .collect();
    (switches, hosts, links)
}

#[test]
fn assigned_guids_follow_peers_md() {
    let t = kary_ntree(4, 2).unwrap();
    let g = GuidMap::assigned(&t);
    assert_eq!(g.switch_guid(0), Some(0x1000_0000_0000));
    assert_eq!(g.switch_guid(3), Some(0x1000_0000_0003));
    assert_eq!(g.switch_guid(4), Some(0x1000_0001_0000)); // level 1, index 0
    assert_eq!(g.host_guid(15), Some(0x2000_0000_00f0));
    assert_eq!(g.host_port_guid(15, 0), Some(0x2000_0000_00f1)); // ibtracert's h015
    assert_eq!(host_port_guid(&t, 15, 0), Some(0x2000_0000_00f1));
    assert_eq!(switch_guid(&t, 7), Some(0x1000_0001_0003));
    assert_eq!(g.node_by_guid(0x1000_0001_0002), Some(NodeRef::Switch(6)));
    assert_eq!(g.port_by_guid(0x2000_0000_0031), Some(PortRef::host(3, 0)));
    assert_eq!(
        g.port_by_guid(0x1000_0000_0001),
        Some(PortRef::switch(1, 0))
    );
    assert_eq!(
        g.port_by_guid(0x2000_0000_0030),
        None,
        "a node GUID is not a CA port GUID"
    );
    assert_eq!(g.switch_guid(8), None);
    // No level: level 0, index = position.
    let m = mesh_or_torus(&[3, 3], false).unwrap();
    assert_eq!(GuidMap::assigned(&m).switch_guid(8), Some(0x1000_0000_0008));
}

#[test]
fn export_writes_both_ends_with_one_based_ports_and_lids() {
    let t = kary_ntree(4, 2).unwrap();
    let text = to_ibnet(&t).unwrap();
    assert!(text.contains("caguid=0x200000000000\nHca\t1 \"h00\"\t\t# \"h00\"\n[1](200000000001) \t\"s0-0\"[1]\t\t# lid 1 lmc 0 \"s0-0\" lid 17 4xQDR\n"), "{text}");
    assert!(text.contains("switchguid=0x100000010000\nSwitch\t8 \"s1-0\"\t\t# \"s1-0\" base port 0 lid 21 lmc 0\n"), "{text}");
    // Leaf 0's first up port (flitnet port 4) goes to s1-0's down port 0.
    assert!(
        text.contains("[5]\t\"s1-0\"[1]\t\t# \"s1-0\" lid 21 4xQDR\n"),
        "{text}"
    );
    assert!(
        text.contains("[1]\t\"h00\"[1](200000000001)\t\t# \"h00\" lid 1 4xQDR\n"),
        "{text}"
    );
    // Every link appears once per end.
    let port_lines = text.lines().filter(|l| l.starts_with('[')).count();
    assert_eq!(port_lines, 2 * t.links.len());
}

#[test]
fn export_import_round_trip_gives_the_same_fabric() {
    let cases = vec![
        kary_ntree(4, 2).unwrap(),
        kary_ntree(2, 4).unwrap(),
        pgft(&PgftParams {
            m: vec![4, 4, 6],
            w: vec![1, 2, 2],
            p: vec![1, 1, 1],
        })
        .unwrap(),
        pgft(&PgftParams {
            m: vec![4, 4],
            w: vec![1, 2],
            p: vec![1, 2],
        })
        .unwrap(),
        pgft(&PgftParams {
            m: vec![2, 2],
            w: vec![2, 2],
            p: vec![1, 1],
        })
        .unwrap(), // 2-port hosts
        mesh_or_torus(&[3, 3], false).unwrap(),
        mesh_or_torus(&[3, 3, 3], true).unwrap(),
        hypercube(4).unwrap(),
    ];
    for t in cases {
        let text = to_ibnet(&t).unwrap();
        let back = from_ibnet_str(&text, "x.net").unwrap_or_else(|e| panic!("{}: {e}", t.name));
        assert_eq!(shape(&back.topology), shape(&t), "{}", t.name);
        assert_eq!(back.guids, GuidMap::assigned(&t), "{}", t.name);
        // Exporting again gives the same text (up to the name in the header).
        let again = to_ibnet(&back.topology).unwrap();
        assert_eq!(
            again.lines().skip(1).collect::<Vec<_>>(),
            text.lines().skip(1).collect::<Vec<_>>()
        );
    }
}

#[test]
fn yaml_to_ibnet_to_model_keeps_the_fabric() {
    let t = Topology::from_yaml_str("generator: kary-ntree\nk: 4\nn: 3\n", "k.yaml").unwrap();
    let back = from_ibnet_str(&to_ibnet(&t).unwrap(), "k.net")
        .unwrap()
        .topology;
    assert_eq!(shape(&back), shape(&t));
    // Same port-level wiring, port by port.
    for s in &t.switches {
        for p in 0..s.ports.len() as PortNo {
            let peer = t
                .peer(PortRef::switch(s.id, p))
                .map(|x| (t.node_name(x.node).to_string(), x.port));
            let got = back
                .peer(PortRef::switch(s.id, p))
                .map(|x| (back.node_name(x.node).to_string(), x.port));
            assert_eq!(got, peer, "{} port {p}", s.name);
        }
    }
}

#[test]
fn opensm_guid_files_list_roots_and_compute_ports() {
    let t = kary_ntree(4, 2).unwrap();
    let roots = root_guids_file(&t);
    assert_eq!(
        roots,
        "0x0000100000010000\n0x0000100000010001\n0x0000100000010002\n0x0000100000010003\n"
    );
    let mut g3 = pgft(&PgftParams {
        m: vec![4, 4, 6],
        w: vec![1, 2, 2],
        p: vec![1, 1, 1],
    })
    .unwrap();
    for nid in (3..96).step_by(4) {
        g3.hosts[nid].kind = crate::topology::HostKind::Storage;
    }
    let cns = compute_node_guids_file(&g3);
    assert_eq!(cns.lines().count(), 72);
    assert!(
        cns.starts_with(
            "0x0000200000000001\n0x0000200000000011\n0x0000200000000021\n0x0000200000000041\n"
        ),
        "{cns}"
    );
    assert_eq!(root_guids_file(&g3).lines().count(), 4);
    assert_eq!(root_guids_file(&mesh_or_torus(&[2, 2], false).unwrap()), "");
}

/// ibnetdiscover output as real fabrics print it.
const REAL: &str = r#"#
# Topology file: generated on Tue Jun  5 14:15:10 2007
#
# Max of 3 hops discovered
# Initiated from node 0008f10403960558 port 0008f10403960559

vendid=0x8f1
devid=0x5a06
sysimgguid=0x5442ba00003000
switchguid=0x5442ba00003080(5442ba00003080)
Switch	24 "S-005442ba00003080"		# "ISR9024 Voltaire" base port 0 lid 6 lmc 0
[22]	"H-0008f10403961354"[1](8f10403961355) 		# "MT23108 InfiniHost Mellanox Technologies" lid 4 4xSDR
[10]	"S-0008f10400410015"[1]		# "SW-6IB4 Voltaire" lid 3 4xSDR
[12]	"H-0008f10403960558"[1](8f10403960559) 		# "MT23108 InfiniHost Mellanox Technologies" lid 10 4xSDR

vendid=0x8f1
devid=0x5a05
switchguid=0x8f10400410015(8f10400410015)
Switch	8 "S-0008f10400410015"		# "SW-6IB4 Voltaire" base port 0 lid 3 lmc 0
[6]	"H-0008f10403960984"[1](8f10403960985) 		# "MT23108 InfiniHost Mellanox Technologies" lid 16 4xSDR
[1]	"S-005442ba00003080"[10]		# "ISR9024 Voltaire" lid 6 1xSDR

vendid=0x8f1
devid=0x5a44
caguid=0x8f10403960984
Ca	2 "H-0008f10403960984"		# "MT23108 InfiniHost Mellanox Technologies"
[1](8f10403960985) 	"S-0008f10400410015"[6]		# lid 16 lmc 1 "SW-6IB4 Voltaire" lid 3 4xSDR

vendid=0x2c9
devid=0x5a44
caguid=0x8f10403960558
Ca	2 "H-0008f10403960558"		# "MT23108 InfiniHost Mellanox Technologies"
[1](8f10403960559) 	"S-005442ba00003080"[12]		# lid 10 lmc 1 "ISR9024 Voltaire" lid 6 4xSDR

caguid=0x8f10403961354
Ca	2 "H-0008f10403961354"		# "MT23108 InfiniHost Mellanox Technologies"
[1](8f10403961355) 	"S-005442ba00003080"[22]		# lid 4 lmc 1 "ISR9024 Voltaire" lid 6 4xSDR
"#;

#[test]
fn imports_real_ibnetdiscover_output() {
    let f = from_ibnet_str(REAL, "fabric.net").unwrap();
    let t = &f.topology;
    assert_eq!(t.num_switches(), 2);
    assert_eq!(t.num_hosts(), 3);
    assert_eq!(t.links.len(), 4);
    assert_eq!(t.switches[0].name, "S-005442ba00003080");
    assert_eq!(t.switches[0].ports.len(), 24);
    assert_eq!(t.switches[0].level, None);
    assert_eq!(t.hosts[0].name, "H-0008f10403960984");
    assert_eq!(t.hosts[0].ports.len(), 2);
    // [10] of the big switch is [1] of the small one (ports 0-based here).
    assert_eq!(t.peer(PortRef::switch(0, 9)), Some(PortRef::switch(1, 0)));
    assert_eq!(t.peer(PortRef::host(2, 0)), Some(PortRef::switch(0, 21)));
    assert_eq!(t.peer(PortRef::host(2, 1)), None);
    assert_eq!(f.guids.switch_guid(0), Some(0x5442ba00003080));
    assert_eq!(f.guids.host_port_guid(1, 0), Some(0x8f10403960559));
    assert_eq!(
        f.guids.port_by_guid(0x8f10403961355),
        Some(PortRef::host(2, 0))
    );
}

#[test]
fn default_guids_and_omitted_remote_port_follow_ibsim() {
    let text = "Switch 4 \"S\"\n[1] \"H1\"\n[2] \"H2\"[1]\n\nHca 1 \"H1\"\n[1] \"S\"[1]\n\nHca 2 \"H2\"\n[1] \"S\"[2]\n";
    let f = from_ibnet_str(text, "t.net").unwrap();
    assert_eq!(f.guids.switch_guid(0), Some(0x20_0000));
    assert_eq!(f.guids.host_guid(0), Some(0x10_0000));
    assert_eq!(f.guids.host_guid(1), Some(0x10_0002), "+(nports+1) per CA");
    assert_eq!(
        f.topology.peer(PortRef::switch(0, 0)),
        Some(PortRef::host(0, 0))
    );
}

fn parse_error(text: &str) -> (usize, String) {
    let e = from_ibnet_str(text, "bad.net").unwrap_err();
    let message = e.to_string();
    (
        e.line().unwrap_or_else(|| panic!("no line in: {message}")),
        message,
    )
}

#[test]
fn errors_carry_file_and_line() {
    let base = "Switch 4 \"S\"\n[1] \"H1\"[1]\n\nHca 1 \"H1\"\n[1] \"S\"[1]\n";
    let (line, m) = parse_error(&base.replace("[1] \"H1\"[1]", "[1] \"H9\"[1]"));
    assert_eq!(line, 2);
    assert!(
        m.starts_with("bad.net:2: ") && m.contains("no node `H9`"),
        "{m}"
    );
    let (line, m) = parse_error(&base.replace("[1] \"H1\"[1]", "[5] \"H1\"[1]"));
    assert_eq!(line, 2);
    assert!(m.contains("no port 5"), "{m}");
    let (line, m) = parse_error(&base.replace("[1] \"S\"[1]", "[1] \"S\"[3]"));
    // Hosts are cabled first, so the switch's line is the one that disagrees.
    assert_eq!(line, 2);
    assert!(
        m.contains("`H1` port 1 is linked to `S`[3], not to `S`[1]"),
        "{m}"
    );
    let (line, m) = parse_error(&base.replace("[1] \"S\"[1]", "[1] \"S\"[1]\n[1] \"S\"[2]"));
    assert_eq!(line, 6);
    assert!(m.contains("already linked"), "{m}");
    let (line, m) = parse_error(&base.replace("\n\nHca", "\n\n[2] \"H1\"\nHca"));
    assert_eq!(line, 4);
    assert!(m.contains("outside a node record"), "{m}");
    let (line, _) = parse_error(&base.replace("Hca 1 \"H1\"", "Hca x \"H1\""));
    assert_eq!(line, 4);
    let (line, m) = parse_error(&base.replace("Switch 4", "Switch 4000"));
    assert_eq!(line, 1);
    assert!(m.contains("1..=255 ports"), "{m}");
    let (line, m) = parse_error(&base.replace("Hca 1 \"H1\"", "Rt 1 \"H1\""));
    assert_eq!((line, m.contains("routers")), (4, true), "{m}");
    let (line, m) = parse_error(
        &base
            .replace("Hca 1 \"H1\"", "Hca 1 \"S\"")
            .replace("\"H1\"[1]", "\"S\"[1]"),
    );
    assert_eq!(line, 4);
    assert!(m.contains("also used on line 1"), "{m}");
    let (line, m) = parse_error(&format!("switchguid=0xzz\n{base}"));
    assert_eq!(line, 1);
    assert!(m.contains("not a GUID"), "{m}");
    let (line, _) = parse_error(&base.replace("[1] \"H1\"[1]", "[1] \"H1\"[0]"));
    assert_eq!(line, 2);
    let (line, _) = parse_error(&format!("garbage here\n{base}"));
    assert_eq!(line, 1);
    // A fabric in two pieces is invalid as a whole, without a line.
    let e = from_ibnet_str(&format!("{base}\nHca 1 \"lonely\"\n"), "bad.net").unwrap_err();
    assert!(e.to_string().contains("`lonely` cannot be reached"), "{e}");
}

#[test]
fn export_refuses_what_infiniband_cannot_express() {
    assert!(matches!(
        to_ibnet(&ruft(2, 2).unwrap()),
        Err(IbnetExportError::OneWayLink { .. })
    ));
    let mut t = kary_ntree(2, 2).unwrap();
    t.hosts[0].name = "bad\"name".into();
    assert!(matches!(to_ibnet(&t), Err(IbnetExportError::BadName(_))));
    let mut t = Topology::new("big", crate::topology::Family::Custom);
    let s = t.add_switch("s", 300);
    let h = t.add_host("h", 1);
    t.connect(PortRef::host(h, 0), PortRef::switch(s, 0), true)
        .unwrap();
    assert!(matches!(
        to_ibnet(&t),
        Err(IbnetExportError::TooManyPorts { ports: 300, .. })
    ));
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Any generated duplex fabric survives export and import. (Trees
        /// have ≥ 2 levels: a one-level tree's level 0 is indistinguishable
        /// from "no level" in the GUIDs, and comes back as none.)
        #[test]
        fn generated_fabrics_survive_ibnet(
            k in 2u32..5, n in 2u32..4, dims in proptest::collection::vec(2u32..5, 1..4), wrap: bool,
            m in proptest::collection::vec(1u32..4, 2..4), w in 1u32..3, p in 1u32..3,
        ) {
            let h = m.len();
            let params = PgftParams { m, w: vec![w; h], p: vec![p; h] };
            for t in [kary_ntree(k, n).unwrap(), mesh_or_torus(&dims, wrap).unwrap(), pgft(&params).unwrap()] {
                let back = from_ibnet_str(&to_ibnet(&t).unwrap(), "p.net").unwrap();
                prop_assert_eq!(shape(&back.topology), shape(&t));
                prop_assert_eq!(back.guids, GuidMap::assigned(&t));
            }
        }
    }
}
