use super::*;
use crate::routing::checker::{check, CheckOptions};
use crate::routing::dmodk::dmodk;
use crate::routing::registry;
use crate::topology::generators::{kary_ntree, mesh_or_torus, pgft};
use crate::topology::{FaultSet, PgftParams};

/// Real OpenSM 3.3.23 output: `-R ftree` on flitnet's 4-ary 2-tree net file
/// under ibsim 0.10 (peers.md §1 commands), and the LIDs it assigned.
const FTREE_K42_DUMP: &str = include_str!("ftree-kary-4-2.lfts.dump");
const K42_GUID2LID: &str = include_str!("kary-4-2.guid2lid");

fn roundtrip(topo: &Topology, tables: &RoutingTables) -> ImportedLfts {
    let guids = GuidMap::assigned(topo);
    let text = to_lfts_dump(topo, tables, &guids).unwrap();
    from_lfts_dump(&text, "ours.dump", topo, &guids, None, &tables.engine).unwrap()
}

#[test]
fn export_then_import_gives_the_same_tables() {
    let pg = pgft(&PgftParams {
        m: vec![4, 4, 6],
        w: vec![1, 2, 2],
        p: vec![1, 1, 1],
    })
    .unwrap();
    for topo in [kary_ntree(4, 2).unwrap(), kary_ntree(4, 3).unwrap(), pg] {
        for engine in ["dmodk", "dmodc", "ftree", "updown"] {
            let tables = registry::engine(engine)
                .unwrap()
                .route(&topo, &FaultSet::none())
                .unwrap();
            let back = roundtrip(&topo, &tables);
            assert_eq!(back.tables, tables, "{engine} on {}", topo.name);
            assert!(back.missing_switches.is_empty());
            assert_eq!(back.switch_entries, topo.num_switches());
            let lids: Vec<_> = (0..topo.num_hosts() as u32)
                .map(|h| Some(topo.lid(NodeRef::Host(h))))
                .collect();
            assert_eq!(back.host_lids, lids);
        }
    }
}

#[test]
fn export_matches_opensms_layout() {
    let topo = kary_ntree(4, 2).unwrap();
    let text = to_lfts_dump(&topo, &dmodk(&topo).unwrap(), &GuidMap::assigned(&topo)).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "Unicast lids [0-24] of switch Lid 17 guid 0x0000100000000000 ('s0-0'):"
    );
    assert_eq!(
        lines.next().unwrap(),
        "0x0001 001 # Channel Adapter portguid 0x0000200000000001: 'h00'"
    );
    assert!(
        text.contains("0x0011 000 # Switch portguid 0x0000100000000000: 's0-0'\n17 lids dumped\n")
    );
}

#[test]
fn real_opensm_ftree_dump_imports_and_delivers_every_pair() {
    let topo = kary_ntree(4, 2).unwrap();
    let guids = GuidMap::assigned(&topo);
    let imported = from_lfts_dump(
        FTREE_K42_DUMP,
        "ftree.dump",
        &topo,
        &guids,
        None,
        "opensm-ftree",
    )
    .unwrap();
    assert!(imported.missing_switches.is_empty());
    // ftree leaves root→root switch LIDs out (peers.md §1): 8 switch LIDs on
    // leaves, 4 + 1 on roots.
    assert_eq!(imported.switch_entries, 4 * 8 + 4 * 5);
    let r = check(
        &topo,
        &FaultSet::none(),
        &imported.tables,
        &CheckOptions::default(),
    );
    assert!(r.is_ok(), "{:?}", r.failures);
    assert_eq!(r.delivered, 16 * 15);
    // OpenSM kept the LIDs the net file announced (hosts 1..=16).
    assert_eq!(imported.host_lids[15], Some(16));
    assert_eq!(imported.switch_lids[0], Some(17));
}

#[test]
fn without_port_guids_lids_resolve_through_guid2lid_then_flitnets_lids() {
    let topo = kary_ntree(4, 2).unwrap();
    let guids = GuidMap::assigned(&topo);
    let strip = |t: &str| -> String {
        t.lines()
            .map(|l| l.split(" #").next().unwrap().to_string() + "\n")
            .collect()
    };
    let want = from_lfts_dump(FTREE_K42_DUMP, "a", &topo, &guids, None, "x").unwrap();
    // Shuffle LIDs: host h gets LID 100 + h in a made-up guid2lid, and the
    // stripped dump uses those LIDs.
    let mut cache = String::new();
    let mut renumbered = String::new();
    for h in 0..16u32 {
        let g = guids.host_port_guid(h, 0).unwrap();
        cache += &format!("0x{g:016x} 0x{:04x} 0x{:04x}\n\n", 100 + h, 100 + h);
    }
    for line in strip(FTREE_K42_DUMP).lines() {
        match line.strip_prefix("0x") {
            Some(rest) if u32::from_str_radix(&rest[..4], 16).unwrap() <= 16 => {
                let lid = u32::from_str_radix(&rest[..4], 16).unwrap();
                renumbered += &format!("0x{:04x}{}\n", 99 + lid, &rest[4..]);
            }
            _ => renumbered += &format!("{line}\n"),
        }
    }
    let lids = LidAssignment::parse_guid2lid(&cache, "guid2lid").unwrap();
    let got = from_lfts_dump(&renumbered, "b", &topo, &guids, Some(&lids), "x").unwrap();
    assert_eq!(got.tables, want.tables);
    // The real cache file parses, and flitnet's own LIDs work without it.
    let real = LidAssignment::parse_guid2lid(K42_GUID2LID, "guid2lid").unwrap();
    assert_eq!(real.port_guid(1), guids.host_port_guid(0, 0));
    let plain = from_lfts_dump(&strip(FTREE_K42_DUMP), "c", &topo, &guids, None, "x").unwrap();
    assert_eq!(plain.tables, want.tables);
}

#[test]
fn bad_dumps_are_refused_with_the_line_at_fault() {
    let topo = kary_ntree(4, 2).unwrap();
    let guids = GuidMap::assigned(&topo);
    let header = "Unicast lids [0-24] of switch Lid 17 guid 0x0000100000000000 ('s0-0'):\n";
    let cases: &[(String, usize, &str)] = &[
        ("0x0001 001\n".into(), 1, "before any"),
        (format!("{header}0x0001 009\n"), 2, "no port 9"),
        (format!("{header}0x0001 000\n"), 2, "port 0"),
        (format!("{header}0x0001 abc\n"), 2, "not a port number"),
        (format!("{header}\n0xzz 001\n"), 3, "not a unicast LID"),
        (
            format!("{header}0x0300 001\n"),
            2,
            "not one of flitnet's LIDs",
        ),
        (
            format!("{header}0x0001 001 # CA portguid 0x0000000000000abc: 'x'\n"),
            2,
            "not in the topology",
        ),
        (
            "Unicast lids [0-24] of switch Lid 17 guid 0x0000100000000999 ('s'):\n".into(),
            1,
            "not in the topology",
        ),
        ("Unicast lids [0-24] of switch\n".into(), 1, "guid 0x"),
        (format!("{header}{header}"), 2, "second section"),
        (format!("{header}hello\n"), 2, "unrecognised"),
        (
            "Multicast mlids [0xc000-0xc001] of switch Lid 17 guid 0x0000100000000000 ('s0-0'):\n"
                .into(),
            1,
            "multicast",
        ),
    ];
    for (text, line, what) in cases {
        let e = from_lfts_dump(text, "bad.dump", &topo, &guids, None, "x").unwrap_err();
        assert_eq!(e.line(), *line, "{text:?}: {e}");
        assert!(e.to_string().contains(what), "{text:?}: {e}");
        assert!(e.to_string().starts_with(&format!("bad.dump:{line}:")));
    }
    let e = LidAssignment::parse_guid2lid("0x1 0x2\n\n0x3\n", "g2l").unwrap_err();
    assert_eq!(e.line(), 3);
}

#[test]
fn sections_missing_from_a_dump_leave_empty_tables_that_the_checker_flags() {
    let topo = kary_ntree(4, 2).unwrap();
    let guids = GuidMap::assigned(&topo);
    let first_section: String = FTREE_K42_DUMP
        .split_inclusive('\n')
        .take_while(|l| !l.contains("lids dumped"))
        .collect();
    let imported = from_lfts_dump(&first_section, "part", &topo, &guids, None, "x").unwrap();
    assert_eq!(imported.missing_switches, (1..8).collect::<Vec<_>>());
    let r = check(
        &topo,
        &FaultSet::none(),
        &imported.tables,
        &CheckOptions::default(),
    );
    assert!(r.failed_pairs > 0);
}

#[test]
fn adaptive_and_dateline_tables_are_refused() {
    let torus = mesh_or_torus(&[3, 3], true).unwrap();
    let dor = registry::engine("dor")
        .unwrap()
        .route(&torus, &FaultSet::none())
        .unwrap();
    let e = to_lfts_dump(&torus, &dor, &GuidMap::assigned(&torus)).unwrap_err();
    assert!(matches!(e, OpensmExportError::VcPolicy { .. }), "{e}");
    let topo = kary_ntree(2, 2).unwrap();
    let mut t = dmodk(&topo).unwrap();
    t.switches[1] = SwitchTable::Adaptive(Default::default());
    let e = to_lfts_dump(&topo, &t, &GuidMap::assigned(&topo)).unwrap_err();
    assert!(e.to_string().contains(&topo.switches[1].name), "{e}");
    t.switches.pop();
    assert!(matches!(
        to_lfts_dump(&topo, &t, &GuidMap::assigned(&topo)),
        Err(OpensmExportError::TableCount { .. })
    ));
}
