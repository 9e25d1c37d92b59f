//! Valid inputs built from the structures they encode: the corpus the
//! mutator starts from.

use bytes::Bytes;
use flitnet_core::control::{Envelope, Request, TrafficSpec};
use flitnet_core::flit::{Flit, FlitKind, Head, MAX_INTERMEDIATES};
use flitnet_core::routing::registry;
use flitnet_core::topology::{generators, FaultSet, Topology};
use flitnet_core::wire::{Frame, Header, Item, SyncInfo, MAX_VCS};
use rand::Rng;

/// A random flit of `kind` (heads carry a random [`Head`]).
pub fn flit(rng: &mut impl Rng, kind: FlitKind) -> Flit {
    let head = kind.is_head().then(|| {
        let mut h = Head {
            dst: rng.gen_range(0..64),
            src: rng.gen_range(0..64),
            n_intermediates: rng.gen_range(0..=MAX_INTERMEDIATES as u8),
            route_flags: rng.gen(),
            msg_flits: rng.gen_range(1..100),
            submsg: rng.gen(),
            born_ns: rng.gen(),
            dlr_port_field: rng.gen(),
            ..Head::default()
        };
        h.leg = rng.gen_range(0..=h.n_intermediates);
        for i in 0..h.n_intermediates as usize {
            h.intermediates[i] = rng.gen_range(0..64);
        }
        h
    });
    let payload: Vec<u8> = (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect();
    Flit {
        kind,
        vc: rng.gen_range(0..4),
        flags: rng.gen::<u8>() & 0x1f,
        msg: rng.gen_range(0..1 << 20),
        packet: rng.gen_range(0..1000),
        seq: rng.gen_range(0..1000),
        head,
        payload: Bytes::from(payload),
    }
}

/// A random frame: a header and up to 12 items of every kind, worms
/// (head, bodies, tail on one VC) included.
pub fn frame(rng: &mut impl Rng) -> Frame {
    let mut items = Vec::new();
    for _ in 0..rng.gen_range(0..12) {
        items.push(match rng.gen_range(0..6) {
            0 => Item::Keepalive,
            1 => Item::Credit {
                vc: rng.gen_range(0..MAX_VCS as u8),
                freed_total: rng.gen(),
            },
            2 => {
                let mut s = SyncInfo {
                    vcs: rng.gen_range(1..=MAX_VCS as u8),
                    transmitted: [0; MAX_VCS],
                };
                for t in s.transmitted.iter_mut().take(s.vcs as usize) {
                    *t = rng.gen();
                }
                Item::Sync(s)
            }
            3 if rng.gen_bool(0.25) => Item::Extension {
                // A departure stamp (docs/wire.md, "Serialisation").
                code: flitnet_core::wire::EXT_DEPARTURE,
                body: Bytes::copy_from_slice(&rng.gen::<u64>().to_le_bytes()),
            },
            3 => Item::Extension {
                code: rng.gen_range(8..=255),
                body: Bytes::from(
                    (0..rng.gen_range(0..16))
                        .map(|_| rng.gen())
                        .collect::<Vec<u8>>(),
                ),
            },
            4 => Item::Flit(flit(rng, FlitKind::HeadTail)),
            _ => {
                let kind = [FlitKind::Head, FlitKind::Body, FlitKind::Tail][rng.gen_range(0..3)];
                Item::Flit(flit(rng, kind))
            }
        });
    }
    Frame {
        header: Header {
            port: rng.gen_range(0..64),
            epoch: rng.gen(),
            peer_epoch: rng.gen(),
            seq: rng.gen(),
        },
        items,
    }
}

/// The CRC a datagram carries (the header's last 4 bytes, over everything
/// else), so that mutated datagrams reach the item parser.
pub fn fix_crc(d: &mut [u8]) {
    const CRC_OFFSET: usize = flitnet_core::wire::HEADER_LEN - 4;
    if d.len() < flitnet_core::wire::HEADER_LEN {
        return;
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&d[..CRC_OFFSET]);
    h.update(&d[CRC_OFFSET + 4..]);
    let crc = h.finalize();
    d[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Small topologies of every family.
pub fn topologies() -> Vec<Topology> {
    let mut t = vec![
        generators::kary_ntree(2, 2).unwrap(),
        generators::kary_ntree(3, 2).unwrap(),
        generators::mesh_or_torus(&[3, 3], false).unwrap(),
        generators::mesh_or_torus(&[3, 2, 2], true).unwrap(),
        generators::hypercube(3).unwrap(),
    ];
    t.push(
        flitnet_core::topology::Topology::from_yaml_str(
            include_str!("../../topologies/explicit-tiny.yaml"),
            "explicit-tiny.yaml",
        )
        .unwrap(),
    );
    t
}

/// Control request lines of every kind, a routing table install included.
pub fn request_lines(rng: &mut impl Rng) -> Vec<String> {
    let topo = generators::kary_ntree(2, 2).unwrap();
    let tables = registry::engine("dmodk")
        .unwrap()
        .route(&topo, &FaultSet::none())
        .unwrap();
    let spec = TrafficSpec {
        pattern: "uniform".into(),
        load: 0.3,
        message_flits: 8,
        duration_ns: 1_000_000_000,
        rounds: 1,
        seed: 7,
    };
    let mut requests = vec![
        Request::Ping,
        Request::InstallTable {
            table: tables.switches[0].clone(),
            vc_policy: tables.vc_policy(0).clone(),
        },
        Request::SetPort {
            port: rng.gen_range(0..8),
            up: rng.gen(),
        },
        Request::StartTraffic { spec },
        Request::StopTraffic,
        Request::Report,
        Request::Shutdown,
        Request::SetAllPorts { up: false },
        Request::Corrupt { port: 1, count: 3 },
        Request::ConfigureMechanism {
            mechanism: "ft2ei-dyn".into(),
            config: None,
        },
        Request::SetInjection { paused: true },
        Request::InFlight,
    ];
    requests.push(Request::ConfigureMechanism {
        mechanism: "intermediate".into(),
        config: Some(flitnet_core::mechanism::plan::encode(
            &flitnet_core::mechanism::intermediate::plan::FaultRoutesConfig {
                topology: Box::new(generators::mesh_or_torus(&[2, 2], false).unwrap()),
                faults: FaultSet::none(),
                variant: "i".into(),
                legs: 2,
            },
        )),
    });
    requests
        .into_iter()
        .map(|request| {
            serde_json::to_string(&Envelope {
                token: "0123456789abcdef".into(),
                request,
            })
            .unwrap()
        })
        .collect()
}

/// Topology files: generator forms with random parameters and the
/// explicit form of small fabrics.
pub fn topology_texts(rng: &mut impl Rng) -> Vec<String> {
    let mut texts: Vec<String> = topologies().iter().map(Topology::to_yaml).collect();
    texts.push(format!(
        "generator: kary-ntree\nk: {}\nn: {}\n",
        rng.gen_range(2..5),
        rng.gen_range(1..4)
    ));
    texts.push("generator: mesh\ndims: [3, 4]\nname: m\n".into());
    texts.push("generator: torus\ndims: [3, 3, 3]\n".into());
    texts.push("generator: hypercube\nd: 4\n".into());
    texts.push("generator: pgft\nm: [4, 4]\nw: [1, 2]\np: [1, 1]\n".into());
    texts.push("generator: ruft\nk: 4\nn: 2\n".into());
    texts.push("generator: kary-ntree\nk: 2\nn: 2\nstorage: [0, 3]\n".into());
    texts
}

/// ibnetdiscover files of small fabrics.
pub fn ibnet_texts() -> Vec<String> {
    topologies()
        .iter()
        .filter_map(|t| flitnet_core::topology::ibnet::to_ibnet(t).ok())
        .collect()
}

/// The repository's scenario files and variations of them.
pub fn scenario_texts() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topologies/scenarios");
    let mut texts: Vec<String> = std::fs::read_dir(&dir)
        .expect("the repository's scenarios")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    texts.sort();
    texts.push(
        "topology: ../kary-4-2.yaml\nmechanism: none\nrandom: {rate-per-s: 0.5, seed: 3, kinds: [kill-link, kill-switch], repair-after: 1s}\ntraffic: {duration: 2s}\n"
            .into(),
    );
    texts
}

/// Tokens of the YAML formats.
pub const YAML_TOKENS: &[&[u8]] = &[
    b"[",
    b"]",
    b"{",
    b"}",
    b", ",
    b": ",
    b"\n- ",
    b"\n  ",
    b"&a ",
    b"*a",
    b"!!str ",
    b"'",
    b"\"",
    b"#",
    b"---\n",
    b"...\n",
    b"~",
    b"-1",
    b"4294967296",
    b"1e309",
    b"nan",
    b" -- ",
    b" -> ",
    b":0",
    b":999",
    b"kary-ntree",
    b"torus",
    b"dims",
    b"ports: ",
    b"links:\n",
    b"switches:\n",
    b"hosts:\n",
    b"generator: ",
    b"at: ",
    b"action: ",
    b"target: ",
    b"kill-switch",
    b"restore-link",
    b"0s",
    b"1ms",
    b"99999999h",
    b"\t",
    b"\r",
];

/// Tokens of the control protocol.
pub const JSON_TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\u0000",
    b"\\\"",
    b"null",
    b"true",
    b"-1",
    b"1e999",
    b"18446744073709551616",
    b"\"op\":\"set-port\"",
    b"\"op\":\"install-table\"",
    b"\"token\":",
    b"\"port\":",
    b"\"spec\":",
    b"\"load\":",
    b"NaN",
];

/// Tokens of the ibnetdiscover format.
pub const IBNET_TOKENS: &[&[u8]] = &[
    b"\n\n",
    b"Switch ",
    b"Ca ",
    b"switchguid=0x",
    b"caguid=0x",
    b"[0]",
    b"[1]",
    b"[255]",
    b"[99999999999]",
    b"\"",
    b"(",
    b")",
    b"#",
    b" lid ",
    b" 4xQDR",
    b"vendid=",
    b"0x",
];

/// Tokens of the wire format (magic, item codes).
pub const WIRE_TOKENS: &[&[u8]] = &[
    &[0xF1],
    &[0x01],
    &[0x02],
    &[0x03],
    &[0x04],
    &[0x05],
    &[0x06],
    &[0x07],
    &[0xff, 0xff],
    &[0, 0],
];

/// Ring capacity of the generated link-file images (the smallest allowed:
/// small images, and wrap-arounds within a few records).
pub const RING_CAPACITY: usize = 4096;

/// A link-file image as `flitctl up` creates it and a producer at end
/// `1 - end` fills it (docs/wire.md, "Shared-memory transport", written
/// from the documented layout, not with the transport's code): the header,
/// then, in the ring the daemon at `end` reads, records of random datagrams
/// of at most `max_datagram` bytes starting at a random place, wrap markers
/// included. Returns the image (a multiple of 8 bytes) and the datagrams in
/// the order a reader gets them.
pub fn ring_image(rng: &mut impl Rng, end: u8, max_datagram: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
    use flitnet_runtime::shm::{file_len, MAGIC, VERSION};
    const LINE: usize = 64;
    let cap = RING_CAPACITY;
    let mut image = vec![0u8; file_len(cap)];
    image[..8].copy_from_slice(&MAGIC.to_le_bytes());
    image[8..12].copy_from_slice(&VERSION.to_le_bytes());
    image[12..16].copy_from_slice(&(cap as u32).to_le_bytes());
    let ring = LINE + (1 - end as usize) * (3 * LINE + cap);
    let data = ring + 3 * LINE;
    // Indices are byte counts since the ring was made: start anywhere.
    let start = rng.gen_range(0..1u64 << 40) & !7;
    let mut head = start;
    let mut datagrams = Vec::new();
    for _ in 0..rng.gen_range(0..12) {
        let len = rng.gen_range(0..=max_datagram.min(600));
        let rec = (8 + len as u64 + 7) & !7;
        let off = head % cap as u64;
        let contiguous = cap as u64 - off;
        let need = if rec > contiguous {
            contiguous + rec
        } else {
            rec
        };
        if head + need - start > cap as u64 {
            break;
        }
        if rec > contiguous {
            let at = data + off as usize;
            image[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            head += contiguous;
        }
        let at = data + (head % cap as u64) as usize;
        let d: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        image[at..at + 4].copy_from_slice(&(len as u32).to_le_bytes());
        image[at + 8..at + 8 + len].copy_from_slice(&d);
        head += rec;
        datagrams.push(d);
    }
    image[ring..ring + 8].copy_from_slice(&head.to_le_bytes());
    image[ring + LINE..ring + LINE + 8].copy_from_slice(&start.to_le_bytes());
    (image, datagrams)
}

/// Offsets of the words of a link-file image worth mutating: the header's,
/// and both rings' `head`, `tail`, `need-wakeup` and `carrier-down`.
pub fn ring_image_words() -> Vec<usize> {
    const LINE: usize = 64;
    let mut words = vec![0, 8, 12, 16, 20, 24];
    for r in 0..2 {
        let base = LINE + r * (3 * LINE + RING_CAPACITY);
        words.extend([base, base + LINE, base + LINE + 8, base + 2 * LINE]);
    }
    words
}
