//! Every decoder fed [`flitnet_fuzz::inputs`] generated and mutated inputs
//! (10⁶ by default; the crate is built with optimisations even in debug
//! profiles, see the workspace Cargo.toml). Each test prints its count and
//! rate. A failure names the seed: `FLITNET_FUZZ_SEED=<seed>` reproduces
//! it, `FLITNET_FUZZ_INPUTS=<n>` runs longer.

use bytes::Bytes;
use flitnet_core::control::Envelope;
use flitnet_core::flit::{Flit, FlitKind, Head};
use flitnet_core::link::{Link, LinkConfig};
use flitnet_core::topology::Topology;
use flitnet_core::wire::{decode_bytes_into, encode, Frame};
use flitnet_fuzz::{gen, inputs, seed, Mutator, Tally};
use rand::Rng;

#[test]
fn wire_decoder() {
    let mut m = Mutator::new(seed(), gen::WIRE_TOKENS.to_vec());
    let corpus: Vec<Vec<u8>> = (0..256)
        .map(|_| {
            let mut out = Vec::new();
            encode(&gen::frame(&mut m.rng), &mut out);
            out
        })
        .collect();
    let mut frame = Frame::default();
    let mut again = Frame::default();
    let mut buf = Vec::with_capacity(2048);
    let mut reencoded = Vec::with_capacity(2048);
    let (mut items_seen, mut sample) = (0u64, None);
    let tally = Tally::run("wire decoder", inputs(), |_| {
        buf.clear();
        let pick = m.rng.gen_range(0..corpus.len());
        if m.rng.gen_ratio(1, 8) {
            // Plain random bytes, sometimes with the right magic.
            let len = m.rng.gen_range(0..64);
            buf.extend((0..len).map(|_| m.rng.gen::<u8>()));
            if len > 0 && m.rng.gen_bool(0.5) {
                buf[0] = flitnet_core::wire::MAGIC_VERSION;
            }
        } else {
            buf.extend_from_slice(&corpus[pick]);
            let other = &corpus[(pick + 1) % corpus.len()];
            m.mutate(&mut buf, other);
        }
        if m.rng.gen_bool(0.75) {
            gen::fix_crc(&mut buf);
        }
        let data = Bytes::copy_from_slice(&buf);
        match decode_bytes_into(&data, &mut frame) {
            Ok(()) => {
                items_seen += frame.items.len() as u64;
                // What the decoder accepts, the encoder writes back the
                // same way.
                reencoded.clear();
                encode(&frame, &mut reencoded);
                let back = Bytes::copy_from_slice(&reencoded);
                decode_bytes_into(&back, &mut again)
                    .unwrap_or_else(|e| panic!("re-encoded {:?} does not decode: {e}", frame));
                assert_eq!(frame, again, "decode∘encode changed an accepted frame");
                if sample.is_none() && !frame.items.is_empty() {
                    sample = Some(buf.clone());
                }
                true
            }
            Err(_) => false,
        }
    });
    // The mutator must get past the CRC into the item parser.
    assert!(tally.accepted > tally.inputs / 20, "{tally:?}");
    assert!(
        items_seen > tally.inputs / 4,
        "item parser barely reached: {items_seen}"
    );
}

fn link_pair() -> (Link, Link) {
    let cfg = LinkConfig {
        vcs: 2,
        buffer_depth: 8,
        retrain_ns: 1_000_000,
        // Paced, so that every data datagram carries a departure stamp
        // and the receiver schedules each flit by it.
        bandwidth_flits_per_s: Some(100_000),
        propagation_ns: 2_000,
        ..LinkConfig::default()
    };
    (
        Link::with_epoch(cfg.clone(), 1).unwrap(),
        Link::with_epoch(cfg, 2).unwrap(),
    )
}

#[test]
fn link_layer() {
    let mut m = Mutator::new(seed() ^ 1, gen::WIRE_TOKENS.to_vec());
    let (mut a, mut b) = link_pair();
    let mut now = 1_000u64;
    let mut out = Vec::with_capacity(2048);
    let mut back = Vec::with_capacity(2048);
    let mut last_good = Vec::new();
    let mut msg = 0u64;
    let (mut delivered, mut accepted) = (0u64, 0u64);
    let tally = Tally::run("link layer", inputs(), |i| {
        if i % 5_000 == 0 {
            // A fresh pair now and then: a link kept in retraining by
            // garbage would stop exercising the data path.
            (a, b) = link_pair();
        }
        now += m.rng.gen_range(1..50_000);
        // A sends a one-flit packet whenever it has a credit.
        let vc = m.rng.gen_range(0..2);
        if a.can_send(vc) {
            msg += 1;
            let _ = a.send(Flit {
                kind: FlitKind::HeadTail,
                vc,
                flags: 0,
                msg,
                packet: 0,
                seq: 0,
                head: Some(Head {
                    dst: 1,
                    msg_flits: 1,
                    ..Head::default()
                }),
                payload: Bytes::from_static(b"payload!"),
            });
        }
        a.handle_timeout(now);
        out.clear();
        let sent = a.poll_transmit(now, &mut out);
        let ok = if sent {
            last_good.clone_from(&out);
            if m.rng.gen_bool(0.5) {
                m.mutate(&mut out, &last_good);
                if m.rng.gen_bool(0.75) {
                    gen::fix_crc(&mut out);
                }
            }
            b.handle_datagram_slice(now, &out).is_ok()
        } else {
            // Replays and garbage between datagrams.
            let mut junk = last_good.clone();
            m.mutate(&mut junk, &[]);
            b.handle_datagram_slice(now, &junk).is_ok()
        };
        b.handle_timeout(now);
        while let Some(f) = b.poll_received() {
            delivered += 1;
            let _ = b.release(f.vc, 1);
        }
        while b.poll_event().is_some() {}
        while a.poll_event().is_some() {}
        back.clear();
        if b.poll_transmit(now, &mut back) {
            let _ = a.handle_datagram_slice(now, &back);
        }
        for vc in 0..2 {
            assert!(
                a.credits(vc) <= 8 && b.credits(vc) <= 8,
                "credits beyond the buffer"
            );
        }
        if ok {
            accepted += 1;
        }
        ok
    });
    // Credits bound what A sends; garbage costs retraining time, and
    // after each reset A waits a round trip for B's buffer report before
    // it has a credit (with the default seed, 9,897 flits of 1,000,000
    // inputs).
    assert!(
        delivered > tally.inputs / 200,
        "only {delivered} flits delivered"
    );
    assert!(accepted > 0);
}

#[test]
fn control_protocol() {
    let mut m = Mutator::new(seed() ^ 2, gen::JSON_TOKENS.to_vec());
    let corpus: Vec<Vec<u8>> = gen::request_lines(&mut m.rng)
        .into_iter()
        .map(String::into_bytes)
        .collect();
    // Every request but the big ones (a table, a topology) most of the time.
    let small: Vec<usize> = (0..corpus.len())
        .filter(|&i| corpus[i].len() < 400)
        .collect();
    let mut buf = Vec::new();
    let tally = Tally::run("control protocol", inputs(), |_| {
        let pick = if m.rng.gen_ratio(1, 50) {
            m.rng.gen_range(0..corpus.len())
        } else {
            small[m.rng.gen_range(0..small.len())]
        };
        buf.clear();
        buf.extend_from_slice(&corpus[pick]);
        let other = &corpus[small[m.rng.gen_range(0..small.len())]];
        m.mutate(&mut buf, other);
        match serde_json::from_slice::<Envelope>(&buf) {
            Ok(env) => {
                let text = serde_json::to_string(&env).unwrap();
                let again: Envelope = serde_json::from_str(&text).unwrap();
                // NaN loads do not compare equal; everything else must.
                if !text.contains("NaN") {
                    assert_eq!(env, again, "{text}");
                }
                true
            }
            Err(_) => false,
        }
    });
    assert!(tally.accepted > tally.inputs / 100, "{tally:?}");
}

/// Runs `parse` on mutations of `corpus`; `parse` says whether it accepted.
fn text_target(
    name: &str,
    n: u64,
    seed: u64,
    tokens: &[&'static [u8]],
    corpus: &[String],
    mut parse: impl FnMut(&str) -> bool,
) -> Tally {
    let mut m = Mutator::new(seed, tokens.to_vec());
    let mut buf = Vec::new();
    Tally::run(name, n, |_| {
        let pick = m.rng.gen_range(0..corpus.len());
        buf.clear();
        buf.extend_from_slice(corpus[pick].as_bytes());
        let other = corpus[(pick + 1) % corpus.len()].as_bytes();
        m.mutate(&mut buf, other);
        let text = String::from_utf8_lossy(&buf);
        parse(&text)
    })
}

#[test]
fn topology_parser() {
    let mut rng = Mutator::new(seed() ^ 3, vec![]).rng;
    let corpus = gen::topology_texts(&mut rng);
    let tally = text_target(
        "topology parser",
        inputs(),
        seed() ^ 3,
        gen::YAML_TOKENS,
        &corpus,
        |text| match Topology::from_yaml_str(text, "fuzz.yaml") {
            Ok(topo) => {
                topo.validate().expect("an accepted topology is valid");
                let explicit = topo.to_yaml();
                // A few generator lines can describe up to 4 million nodes,
                // whose explicit form is over the file bound: refused by it.
                if explicit.len() as u64 > flitnet_core::input::MAX_FILE_BYTES {
                    let err = Topology::from_yaml_str(&explicit, "again.yaml").unwrap_err();
                    assert!(err.to_string().contains("larger than"), "{err}");
                    return true;
                }
                let again = Topology::from_yaml_str(&explicit, "again.yaml")
                    .expect("the explicit form of an accepted topology loads");
                assert_eq!(again.links, topo.links);
                true
            }
            Err(e) => {
                assert!(e.to_string().starts_with("fuzz.yaml"), "{e}");
                false
            }
        },
    );
    assert!(tally.accepted > 0, "{tally:?}");
}

#[test]
fn ibnet_parser() {
    let corpus = gen::ibnet_texts();
    let tally = text_target(
        "ibnetdiscover parser",
        inputs(),
        seed() ^ 4,
        gen::IBNET_TOKENS,
        &corpus,
        |text| flitnet_core::topology::ibnet::from_ibnet_str(text, "fuzz.net").is_ok(),
    );
    assert!(tally.accepted > 0, "{tally:?}");
}

#[test]
fn scenario_parser() {
    // Scenarios name their topology relative to their own path.
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topologies/scenarios/fuzz.yaml");
    let corpus = gen::scenario_texts();
    let tally = text_target(
        "scenario parser",
        inputs(),
        seed() ^ 5,
        gen::YAML_TOKENS,
        &corpus,
        |text| flitctl::scenario::Scenario::parse(&path, text).is_ok(),
    );
    assert!(tally.accepted > 0, "{tally:?}");
}

/// Memory whose last byte is followed by an inaccessible page, so that a
/// read past the end of what it lends faults instead of going unnoticed.
struct Guarded {
    base: *mut u8,
    len: usize,
    page: usize,
}

impl Guarded {
    fn new(bytes: usize) -> Guarded {
        // SAFETY: sysconf takes no pointer.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = bytes.div_ceil(page) * page + page;
        // SAFETY: an anonymous private mapping; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap");
        let base = base as *mut u8;
        // SAFETY: the last page of our own mapping.
        let rc = unsafe { libc::mprotect(base.add(len - page) as _, page, libc::PROT_NONE) };
        assert_eq!(rc, 0, "mprotect");
        Guarded { base, len, page }
    }

    /// `bytes` copied so that they end at the guard page.
    fn lend(&mut self, bytes: &[u8]) -> &mut [u8] {
        let end = self.len - self.page;
        assert!(bytes.len() <= end);
        // SAFETY: `end - bytes.len()..end` is inside the accessible part of
        // the mapping, which `self` owns and lends for `&mut self`.
        unsafe {
            let at = self.base.add(end - bytes.len());
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
            std::slice::from_raw_parts_mut(at, bytes.len())
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.base as _, self.len) };
    }
}

/// The shared-memory ring reader fed link-file images: valid ones (their
/// datagrams must come out exactly), mutated ones, random bytes, and
/// images changed between two reads (a peer scribbling while the reader
/// goes on). It must never panic, never read past the image (the page after
/// it faults), never hand out more than the MTU or than asked, and never
/// step past what the producer published.
#[test]
fn shm_ring_reader() {
    use flitnet_runtime::shm::read_image;
    const MTU: usize = 1400;
    let mut m = Mutator::new(seed() ^ 6, vec![]);
    let words = gen::ring_image_words();
    let ring_words: Vec<usize> = words.iter().copied().filter(|&w| w >= 64).collect();
    let interesting = [
        0u64,
        1,
        4,
        7,
        8,
        4096,
        4095,
        8192,
        u32::MAX as u64,
        u64::MAX,
        1 << 40,
    ];
    let mut memory = Guarded::new(flitnet_runtime::shm::file_len(gen::RING_CAPACITY) + 64);
    let (mut exact, mut corrupt, mut delivered) = (0u64, 0u64, 0u64);
    // A sixteenth of the inputs: the reader (flitnet-runtime) is not
    // optimised in test builds, and each input is an 8 KiB image.
    let tally = Tally::run("shm ring reader", inputs() / 16, |_| {
        let end = m.rng.gen_range(0..2u8);
        let (mut image, datagrams) = gen::ring_image(&mut m.rng, end, MTU);
        let mutated = m.rng.gen_ratio(3, 4);
        if mutated {
            for _ in 0..m.rng.gen_range(1..=4) {
                if image.len() < 64 {
                    break;
                }
                match m.rng.gen_range(0..5) {
                    0 => {
                        // An index or header word set to an edge value.
                        let at = words[m.rng.gen_range(0..words.len())];
                        let v = interesting[m.rng.gen_range(0..interesting.len())]
                            .wrapping_add(m.rng.gen_range(0..3) * 8);
                        let n = if (8..64).contains(&at) { 4 } else { 8 };
                        if at + n <= image.len() {
                            image[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
                        }
                    }
                    1 => {
                        // A record length word (8-aligned in the data area).
                        let at = m.rng.gen_range(0..image.len() / 8) * 8;
                        let v = [
                            0u32,
                            1,
                            MTU as u32,
                            MTU as u32 + 1,
                            4096,
                            u32::MAX,
                            u32::MAX - 1,
                        ][m.rng.gen_range(0..7)];
                        image[at..at + 4].copy_from_slice(&v.to_le_bytes());
                    }
                    2 => {
                        let i = m.rng.gen_range(0..image.len());
                        image[i] ^= 1 << m.rng.gen_range(0..8);
                    }
                    3 => {
                        // Random bytes over a stretch.
                        let a = m.rng.gen_range(0..image.len());
                        let b = (a + m.rng.gen_range(1..512)).min(image.len());
                        m.rng.fill(&mut image[a..b]);
                    }
                    _ => {
                        // A cut file (sometimes not a multiple of 8).
                        let cut = m.rng.gen_range(0..image.len());
                        image.truncate(cut);
                    }
                }
            }
        }
        let image = memory.lend(&image);
        let mut got: Vec<Vec<u8>> = Vec::new();
        let check = |got: &mut Vec<Vec<u8>>, d: &[u8]| {
            assert!(d.len() <= MTU, "a datagram of {} bytes", d.len());
            got.push(d.to_vec());
        };
        let max = m.rng.gen_range(1..64);
        let Ok(first) = read_image(image, end, None, MTU, max, |d| check(&mut got, d)) else {
            assert!(mutated, "a valid image refused");
            return false;
        };
        assert!(first.delivered <= max);
        if !mutated {
            let want = datagrams.len().min(max);
            assert_eq!(got, datagrams[..want], "a valid image read wrong");
            assert!(!first.corrupt);
            exact += 1;
        }
        // An index scribbled between two reads (the header is read once, at
        // attach); the reader goes on from its index.
        let at = ring_words[m.rng.gen_range(0..ring_words.len())];
        if at + 8 <= image.len() && m.rng.gen_bool(0.5) {
            let v = interesting[m.rng.gen_range(0..interesting.len())];
            image[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        let before = first.tail;
        let second = read_image(image, end, Some(before), MTU, 64, |d| check(&mut got, d))
            .expect("the header was accepted once");
        if !second.corrupt {
            assert!(
                second.tail.wrapping_sub(before) <= gen::RING_CAPACITY as u64,
                "the reader stepped {} bytes in a {}-byte ring",
                second.tail.wrapping_sub(before),
                gen::RING_CAPACITY
            );
        }
        corrupt += u64::from(first.corrupt || second.corrupt);
        delivered += got.len() as u64;
        true
    });
    assert!(exact > tally.inputs / 8, "{exact} valid images read");
    assert!(corrupt > tally.inputs / 20, "only {corrupt} images refused");
    assert!(delivered > tally.inputs, "only {delivered} datagrams read");
}
