//! Fuzzing flitnet's decoders without a coverage-guided engine (cargo-fuzz
//! needs a nightly toolchain): each target builds valid inputs from the
//! structures themselves (frames, requests, topologies, scenarios), then
//! mutates them byte- and token-wise ([`Mutator`]), and checks that the
//! decoder never panics and that whatever it accepts re-encodes to the same
//! value. `tests/fuzz.rs` runs every target for [`inputs`] inputs
//! (10⁶ unless `FLITNET_FUZZ_INPUTS` says otherwise).

pub mod gen;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

/// Inputs per target: `FLITNET_FUZZ_INPUTS`, else one million.
pub fn inputs() -> u64 {
    std::env::var("FLITNET_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(1_000_000)
}

/// The seed of a run: `FLITNET_FUZZ_SEED`, else fixed (a failure
/// reproduces).
pub fn seed() -> u64 {
    std::env::var("FLITNET_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x00f1_17e7)
}

/// Byte- and token-level mutations of a valid input.
pub struct Mutator {
    pub rng: ChaCha8Rng,
    /// Tokens worth splicing in (format keywords, delimiters, edge numbers).
    dictionary: Vec<&'static [u8]>,
}

impl Mutator {
    pub fn new(seed: u64, dictionary: Vec<&'static [u8]>) -> Self {
        Mutator {
            rng: ChaCha8Rng::seed_from_u64(seed),
            dictionary,
        }
    }

    /// Applies 1..=4 random mutations to `buf`; `other` is another valid
    /// input to splice from.
    pub fn mutate(&mut self, buf: &mut Vec<u8>, other: &[u8]) {
        for _ in 0..self.rng.gen_range(1..=4) {
            let len = buf.len();
            match self.rng.gen_range(0..10) {
                0 if len > 0 => {
                    let i = self.rng.gen_range(0..len);
                    buf[i] ^= 1 << self.rng.gen_range(0..8);
                }
                1 if len > 0 => {
                    let i = self.rng.gen_range(0..len);
                    buf[i] = *[0u8, 0xff, 0x7f, 0x80, b'\n', b'"', b':']
                        .get(self.rng.gen_range(0..7))
                        .unwrap();
                }
                2 => {
                    let cut = self.rng.gen_range(0..=len);
                    buf.truncate(cut);
                }
                3 => {
                    let i = self.rng.gen_range(0..=len);
                    let b = self.rng.gen();
                    buf.insert(i, b);
                }
                4 if len > 1 => {
                    // Delete a run.
                    let a = self.rng.gen_range(0..len);
                    let b = (a + self.rng.gen_range(1..=16)).min(len);
                    buf.drain(a..b);
                }
                5 if len > 1 => {
                    // Duplicate a run in place (repeated items, nesting).
                    let a = self.rng.gen_range(0..len);
                    let b = (a + self.rng.gen_range(1..=32)).min(len);
                    let run: Vec<u8> = buf[a..b].to_vec();
                    let at = self.rng.gen_range(0..=len);
                    buf.splice(at..at, run);
                }
                6 if !other.is_empty() => {
                    // Splice: our head, the other's tail.
                    let at = self.rng.gen_range(0..=len);
                    let from = self.rng.gen_range(0..other.len());
                    buf.truncate(at);
                    buf.extend_from_slice(&other[from..]);
                }
                7 | 8 if !self.dictionary.is_empty() => {
                    let token = self.dictionary[self.rng.gen_range(0..self.dictionary.len())];
                    let at = self.rng.gen_range(0..=len);
                    if self.rng.gen_bool(0.5) && at < len {
                        // Overwrite.
                        let end = (at + token.len()).min(len);
                        buf.splice(at..end, token.iter().copied());
                    } else {
                        buf.splice(at..at, token.iter().copied());
                    }
                }
                _ if len >= 2 => {
                    // An interesting number in little endian at a random place.
                    let v: u32 = *[0, 1, 0x7fff_ffff, 0xffff_ffff, 0xffff, 0x8000, 15, 16]
                        .get(self.rng.gen_range(0..8))
                        .unwrap();
                    let at = self.rng.gen_range(0..len - 1);
                    let n = self.rng.gen_range(1..=4usize).min(len - at);
                    buf[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
                }
                _ => buf.push(self.rng.gen()),
            }
        }
    }
}

/// What a target run did.
#[derive(Debug, Default)]
pub struct Tally {
    pub inputs: u64,
    /// Inputs the decoder accepted.
    pub accepted: u64,
    pub elapsed: Duration,
}

impl Tally {
    /// Runs `one` for `n` inputs; `one` returns whether the input was
    /// accepted. Prints the count and rate (the CI log keeps them).
    pub fn run(name: &str, n: u64, mut one: impl FnMut(u64) -> bool) -> Tally {
        let started = Instant::now();
        let mut accepted = 0;
        for i in 0..n {
            if one(i) {
                accepted += 1;
            }
        }
        let elapsed = started.elapsed();
        println!(
            "fuzz {name}: {n} inputs in {:.1} s ({:.0}/s), {accepted} accepted",
            elapsed.as_secs_f64(),
            n as f64 / elapsed.as_secs_f64().max(1e-9)
        );
        Tally {
            inputs: n,
            accepted,
            elapsed,
        }
    }
}
