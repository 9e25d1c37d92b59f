//! Synthetic traffic patterns: which destination a host sends its next
//! message to.
//!
//! The definitions follow the seeds exactly:
//! - uniform, hot-spot, complement, bit reversal: seed 000 §6.2 (uniform and
//!   hot-spot exclude the source itself; bit reversal is *binary* reversal of
//!   the log₂N-bit NID; complement is `N−1−i`);
//! - all-to-all (A2A) and shift `SP_k = (s+k) mod N`: seed 001 §6.4;
//! - transpose ("dimension reversal"), perfect shuffle, butterfly: seed 003
//!   §6.2.2 / §7.6 (hypercube transpose swaps the two halves of the binary
//!   address and keeps the middle bit when the dimension is odd; mesh
//!   transpose is `(x,y) → (y,x)`).
//!
//! A node whose pattern maps it onto itself (a transpose diagonal node, a
//! bit-reversal palindrome, `shift:0`…) sends nothing: seed 003 §8 item 22
//! resolves the transpose diagonal this way and we apply the same rule to
//! every deterministic pattern, so no message ever goes from a host to itself.

use crate::topology::HostId;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Problems with a traffic pattern or its parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrafficError {
    #[error("unknown traffic pattern `{0}` (expected uniform, bit-reversal, shuffle, butterfly, bit-complement, transpose, hotspot:<node>:<fraction>, all-to-all[:<rounds>], shift:<s> or permutation:<file>)")]
    UnknownPattern(String),
    #[error("traffic pattern `{pattern}`: bad parameter `{value}`: {reason}")]
    BadParameter {
        pattern: &'static str,
        value: String,
        reason: String,
    },
    #[error("traffic pattern {pattern} needs a power-of-two number of hosts, got {hosts}")]
    NotPowerOfTwo { pattern: &'static str, hosts: u32 },
    #[error("transpose needs a power-of-two (hypercube) or square (k×k mesh) number of hosts, got {hosts}")]
    NotTransposable { hosts: u32 },
    #[error("traffic pattern {pattern}: node {node} is out of range for {hosts} hosts")]
    NodeOutOfRange {
        pattern: &'static str,
        node: u32,
        hosts: u32,
    },
    #[error("a fabric needs at least 2 hosts to carry traffic, got {0}")]
    TooFewHosts(u32),
    #[error("permutation line {line}: {reason}")]
    PermutationSyntax { line: usize, reason: String },
    #[error("permutation file {path}: {reason}")]
    PermutationFile { path: String, reason: String },
    #[error("permutation from file {0} has not been loaded (call TrafficPattern::resolve first)")]
    PermutationNotLoaded(String),
}

/// A fixed, possibly partial, permutation: `map[src] = dst`. Sources absent
/// from the map send nothing. Every source and every destination appears at
/// most once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedPermutation {
    pub map: BTreeMap<HostId, HostId>,
}

impl FixedPermutation {
    /// Parses one `src dst` pair per line. Blank lines and text after `#`
    /// are ignored. Errors name the (1-based) line.
    pub fn parse(text: &str) -> Result<Self, TrafficError> {
        let mut map = BTreeMap::new();
        let mut src_line: BTreeMap<HostId, usize> = BTreeMap::new();
        let mut dst_line: BTreeMap<HostId, usize> = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let err = |reason: String| TrafficError::PermutationSyntax { line, reason };
            let fields: Vec<&str> = content.split_whitespace().collect();
            if fields.len() != 2 {
                return Err(err(format!(
                    "expected `src dst`, found {} field(s) in `{content}`",
                    fields.len()
                )));
            }
            let num = |s: &str, what: &str| {
                s.parse::<HostId>()
                    .map_err(|_| err(format!("{what} `{s}` is not a host number")))
            };
            let (src, dst) = (num(fields[0], "source")?, num(fields[1], "destination")?);
            if let Some(prev) = src_line.insert(src, line) {
                return Err(err(format!("source {src} already mapped on line {prev}")));
            }
            if let Some(prev) = dst_line.insert(dst, line) {
                return Err(err(format!(
                    "destination {dst} already used on line {prev}"
                )));
            }
            map.insert(src, dst);
        }
        Ok(FixedPermutation { map })
    }
}

/// A traffic pattern, as configured (serde) or typed on the command line
/// ([`FromStr`] / [`fmt::Display`] round-trip).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "pattern")]
pub enum TrafficPattern {
    /// Uniform random over every other host (seed 000 §6.2).
    Uniform,
    /// Binary reversal of the log₂N-bit NID (seed 000 §6.2).
    BitReversal,
    /// Perfect shuffle: rotate the log₂N-bit NID left by one bit.
    Shuffle,
    /// Butterfly: swap the most and least significant bits of the NID.
    Butterfly,
    /// Complement `N−1−i` (seed 000 §6.2); the bitwise complement when N is
    /// a power of two, and still a permutation otherwise.
    BitComplement,
    /// Transpose (seed 003 §6.2.2): for N = 2^b, swap the high and low
    /// ⌊b/2⌋ bits, keeping the middle bit when b is odd (hypercube); for
    /// N = k² (a k×k mesh numbered `x + k·y`, as
    /// [`crate::topology::generators::mesh_or_torus`] does), `(x,y)→(y,x)`.
    /// Any other N is rejected.
    Transpose,
    /// `fraction` of the messages go to `node`, the rest are uniform
    /// (seed 000 §6.2: 5% to node 0). The hot node itself sends uniform
    /// traffic.
    Hotspot { node: HostId, fraction: f64 },
    /// Each source cycles through every other destination, starting with
    /// its successor (`src+1, src+2, …` mod N, which staggers the sources),
    /// for `rounds` rounds, then stops (seed 001 §6.4 A2A).
    AllToAll { rounds: u32 },
    /// `d = (s + shift) mod N` (seed 001 §6.4 `SP_k`); negative shifts allowed.
    Shift { shift: i64 },
    /// A fixed permutation read from a file, not yet loaded (the core does no
    /// I/O: see [`TrafficPattern::resolve`]).
    PermutationFile { path: PathBuf },
    /// A fixed permutation.
    Permutation(FixedPermutation),
}

impl TrafficPattern {
    /// Replaces a [`TrafficPattern::PermutationFile`] by the permutation it
    /// holds, reading the file through `read` (the caller does the I/O).
    /// Other patterns are returned unchanged.
    pub fn resolve(
        self,
        read: impl FnOnce(&Path) -> std::io::Result<String>,
    ) -> Result<Self, TrafficError> {
        match self {
            TrafficPattern::PermutationFile { path } => {
                let shown = path.display().to_string();
                let text = read(&path).map_err(|e| TrafficError::PermutationFile {
                    path: shown.clone(),
                    reason: e.to_string(),
                })?;
                let perm =
                    FixedPermutation::parse(&text).map_err(|e| TrafficError::PermutationFile {
                        path: shown,
                        reason: e.to_string(),
                    })?;
                Ok(TrafficPattern::Permutation(perm))
            }
            other => Ok(other),
        }
    }

    /// True when every source always sends to the same destination.
    pub fn is_deterministic(&self) -> bool {
        !matches!(
            self,
            TrafficPattern::Uniform
                | TrafficPattern::Hotspot { .. }
                | TrafficPattern::AllToAll { .. }
        )
    }

    /// For the deterministic patterns, the host `src` maps to, which may be
    /// `src` itself (then the source is silent). `None` for random patterns,
    /// all-to-all and unmapped permutation sources.
    pub fn map(&self, src: HostId, hosts: u32) -> Result<Option<HostId>, TrafficError> {
        if hosts < 2 {
            return Err(TrafficError::TooFewHosts(hosts));
        }
        if src >= hosts {
            return Err(TrafficError::NodeOutOfRange {
                pattern: self.name(),
                node: src,
                hosts,
            });
        }
        let bits = |pattern: &'static str| {
            if hosts.is_power_of_two() {
                Ok(hosts.trailing_zeros())
            } else {
                Err(TrafficError::NotPowerOfTwo { pattern, hosts })
            }
        };
        let mask = |b: u32| (1u32 << b) - 1;
        Ok(match self {
            TrafficPattern::Uniform
            | TrafficPattern::Hotspot { .. }
            | TrafficPattern::AllToAll { .. } => None,
            TrafficPattern::BitReversal => {
                let b = bits(self.name())?;
                Some(src.reverse_bits().checked_shr(32 - b).unwrap_or(0))
            }
            TrafficPattern::Shuffle => {
                let b = bits(self.name())?;
                Some(((src << 1) | (src >> (b - 1))) & mask(b))
            }
            TrafficPattern::Butterfly => {
                let b = bits(self.name())?;
                let (lo, hi) = (src & 1, (src >> (b - 1)) & 1);
                let cleared = src & !1 & !(1 << (b - 1));
                Some(cleared | hi | (lo << (b - 1)))
            }
            TrafficPattern::BitComplement => Some(hosts - 1 - src),
            TrafficPattern::Transpose => Some(transpose(src, hosts)?),
            TrafficPattern::Shift { shift } => {
                Some((src as i64 + shift).rem_euclid(hosts as i64) as HostId)
            }
            TrafficPattern::Permutation(p) => match p.map.get(&src) {
                Some(&d) if d >= hosts => {
                    return Err(TrafficError::NodeOutOfRange {
                        pattern: self.name(),
                        node: d,
                        hosts,
                    })
                }
                other => other.copied(),
            },
            TrafficPattern::PermutationFile { path } => {
                return Err(TrafficError::PermutationNotLoaded(
                    path.display().to_string(),
                ))
            }
        })
    }

    /// Short name, as on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            TrafficPattern::Uniform => "uniform",
            TrafficPattern::BitReversal => "bit-reversal",
            TrafficPattern::Shuffle => "shuffle",
            TrafficPattern::Butterfly => "butterfly",
            TrafficPattern::BitComplement => "bit-complement",
            TrafficPattern::Transpose => "transpose",
            TrafficPattern::Hotspot { .. } => "hotspot",
            TrafficPattern::AllToAll { .. } => "all-to-all",
            TrafficPattern::Shift { .. } => "shift",
            TrafficPattern::PermutationFile { .. } | TrafficPattern::Permutation(_) => {
                "permutation"
            }
        }
    }
}

/// Transpose of `src` among `hosts` nodes (see [`TrafficPattern::Transpose`]).
fn transpose(src: HostId, hosts: u32) -> Result<HostId, TrafficError> {
    if hosts.is_power_of_two() {
        let b = hosts.trailing_zeros();
        let half = b / 2;
        let low = src & ((1 << half) - 1);
        let high = src >> (b - half);
        let middle = src & !((1 << half) - 1) & ((1 << (b - half)) - 1);
        Ok((low << (b - half)) | middle | high)
    } else {
        let k = (hosts as f64).sqrt().round() as u32;
        if k * k != hosts {
            return Err(TrafficError::NotTransposable { hosts });
        }
        let (x, y) = (src % k, src / k);
        Ok(y + k * x)
    }
}

impl fmt::Display for TrafficPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrafficPattern::Hotspot { node, fraction } => {
                write!(f, "hotspot:{node}:{fraction}")
            }
            TrafficPattern::AllToAll { rounds } => write!(f, "all-to-all:{rounds}"),
            TrafficPattern::Shift { shift } => write!(f, "shift:{shift}"),
            TrafficPattern::PermutationFile { path } => {
                write!(f, "permutation:{}", path.display())
            }
            TrafficPattern::Permutation(p) => write!(f, "permutation({} pairs)", p.map.len()),
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for TrafficPattern {
    type Err = TrafficError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (head, rest) = match s.split_once(':') {
            Some((h, r)) => (h, Some(r)),
            None => (s, None),
        };
        let bad = |pattern: &'static str, value: &str, reason: &str| TrafficError::BadParameter {
            pattern,
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let no_args = |p: TrafficPattern| match rest {
            None => Ok(p),
            Some(r) => Err(bad(p.name(), r, "this pattern takes no parameter")),
        };
        match head {
            "uniform" => no_args(TrafficPattern::Uniform),
            "bit-reversal" => no_args(TrafficPattern::BitReversal),
            "shuffle" => no_args(TrafficPattern::Shuffle),
            "butterfly" => no_args(TrafficPattern::Butterfly),
            "bit-complement" | "complement" => no_args(TrafficPattern::BitComplement),
            "transpose" => no_args(TrafficPattern::Transpose),
            "hotspot" => {
                let r =
                    rest.ok_or_else(|| bad("hotspot", "", "expected hotspot:<node>:<fraction>"))?;
                let (node, fraction) = r
                    .split_once(':')
                    .ok_or_else(|| bad("hotspot", r, "expected hotspot:<node>:<fraction>"))?;
                let node = node
                    .parse()
                    .map_err(|_| bad("hotspot", node, "node must be a host number"))?;
                let fraction: f64 = fraction
                    .parse()
                    .map_err(|_| bad("hotspot", fraction, "fraction must be a number"))?;
                if !(0.0..=1.0).contains(&fraction) {
                    return Err(bad(
                        "hotspot",
                        &fraction.to_string(),
                        "fraction must be in [0, 1]",
                    ));
                }
                Ok(TrafficPattern::Hotspot { node, fraction })
            }
            "all-to-all" => {
                let rounds =
                    match rest {
                        None => 1,
                        Some(r) => r.parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| {
                            bad("all-to-all", r, "rounds must be a positive integer")
                        })?,
                    };
                Ok(TrafficPattern::AllToAll { rounds })
            }
            "shift" => {
                let r = rest.ok_or_else(|| bad("shift", "", "expected shift:<s>"))?;
                let shift = r
                    .parse()
                    .map_err(|_| bad("shift", r, "shift must be an integer"))?;
                Ok(TrafficPattern::Shift { shift })
            }
            "permutation" => match rest {
                Some(p) if !p.is_empty() => Ok(TrafficPattern::PermutationFile {
                    path: PathBuf::from(p),
                }),
                _ => Err(bad("permutation", "", "expected permutation:<file>")),
            },
            _ => Err(TrafficError::UnknownPattern(s.to_string())),
        }
    }
}

/// One source's destination generator: a pattern bound to a host and a
/// fabric size, with the state stateful patterns need (all-to-all's cursor).
#[derive(Clone, Debug)]
pub struct DestinationGenerator {
    pattern: TrafficPattern,
    src: HostId,
    hosts: u32,
    /// Deterministic patterns: the fixed destination (`None` = silent).
    fixed: Option<HostId>,
    /// All-to-all: messages generated so far.
    a2a_sent: u64,
}

impl DestinationGenerator {
    /// Binds `pattern` to source `src` among `hosts` hosts, checking that the
    /// pattern applies to that many hosts.
    pub fn new(pattern: TrafficPattern, src: HostId, hosts: u32) -> Result<Self, TrafficError> {
        let mapped = pattern.map(src, hosts)?;
        match &pattern {
            TrafficPattern::Hotspot { node, fraction } => {
                if *node >= hosts {
                    return Err(TrafficError::NodeOutOfRange {
                        pattern: "hotspot",
                        node: *node,
                        hosts,
                    });
                }
                if !(0.0..=1.0).contains(fraction) {
                    return Err(TrafficError::BadParameter {
                        pattern: "hotspot",
                        value: fraction.to_string(),
                        reason: "fraction must be in [0, 1]".into(),
                    });
                }
            }
            TrafficPattern::AllToAll { rounds: 0 } => {
                return Err(TrafficError::BadParameter {
                    pattern: "all-to-all",
                    value: "0".into(),
                    reason: "rounds must be positive".into(),
                })
            }
            _ => {}
        }
        Ok(DestinationGenerator {
            fixed: mapped.filter(|&d| d != src),
            pattern,
            src,
            hosts,
            a2a_sent: 0,
        })
    }

    pub fn pattern(&self) -> &TrafficPattern {
        &self.pattern
    }

    /// Total messages this source will generate, if the pattern is finite
    /// (all-to-all: `rounds·(N−1)`; a silent source: 0).
    pub fn total_messages(&self) -> Option<u64> {
        match self.pattern {
            TrafficPattern::AllToAll { rounds } => Some(rounds as u64 * (self.hosts as u64 - 1)),
            _ if self.pattern.is_deterministic() && self.fixed.is_none() => Some(0),
            _ => None,
        }
    }

    /// The destination of the next message, or `None` if this source sends
    /// nothing (more).
    pub fn next_destination(&mut self, rng: &mut impl Rng) -> Option<HostId> {
        match self.pattern {
            TrafficPattern::Uniform => Some(self.uniform_other(rng)),
            TrafficPattern::Hotspot { node, fraction } => {
                if self.src != node && rng.gen_bool(fraction) {
                    Some(node)
                } else {
                    Some(self.uniform_other(rng))
                }
            }
            TrafficPattern::AllToAll { rounds } => {
                let others = self.hosts as u64 - 1;
                if self.a2a_sent >= rounds as u64 * others {
                    return None;
                }
                let offset = 1 + self.a2a_sent % others;
                self.a2a_sent += 1;
                Some(((self.src as u64 + offset) % self.hosts as u64) as HostId)
            }
            _ => self.fixed,
        }
    }

    /// Uniform over the hosts other than the source.
    fn uniform_other(&self, rng: &mut impl Rng) -> HostId {
        let d = rng.gen_range(0..self.hosts - 1);
        if d >= self.src {
            d + 1
        } else {
            d
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn map_all(p: &TrafficPattern, n: u32) -> Vec<HostId> {
        (0..n).map(|s| p.map(s, n).unwrap().unwrap()).collect()
    }

    #[test]
    fn bit_reversal_matches_seed_000_example() {
        // 8-ary 3-tree, N = 512 (9 bits): ⟨0,0,1⟩ → ⟨4,0,0⟩, ⟨0,0,2⟩ → ⟨2,0,0⟩
        // in base-8 digits, i.e. 1 → 256 and 2 → 128.
        let p = TrafficPattern::BitReversal;
        assert_eq!(p.map(1, 512).unwrap(), Some(256));
        assert_eq!(p.map(2, 512).unwrap(), Some(128));
        assert_eq!(p.map(0b100, 8).unwrap(), Some(0b001));
        assert_eq!(p.map(0b110, 8).unwrap(), Some(0b011));
    }

    #[test]
    fn shuffle_butterfly_complement_on_small_cube() {
        assert_eq!(
            map_all(&TrafficPattern::Shuffle, 8),
            vec![0, 2, 4, 6, 1, 3, 5, 7]
        );
        assert_eq!(
            map_all(&TrafficPattern::Butterfly, 8),
            vec![0, 4, 2, 6, 1, 5, 3, 7]
        );
        assert_eq!(
            map_all(&TrafficPattern::BitComplement, 8),
            vec![7, 6, 5, 4, 3, 2, 1, 0]
        );
        // Complement N−1−i is defined for any N.
        assert_eq!(
            map_all(&TrafficPattern::BitComplement, 5),
            vec![4, 3, 2, 1, 0]
        );
    }

    #[test]
    fn transpose_matches_seed_003_examples() {
        let p = TrafficPattern::Transpose;
        // d = 5: 11100 → 00111 (middle bit kept).
        assert_eq!(p.map(0b11100, 32).unwrap(), Some(0b00111));
        assert_eq!(p.map(0b10110, 32).unwrap(), Some(0b10110));
        // d = 4: abcd → cdab.
        assert_eq!(p.map(0b1101, 16).unwrap(), Some(0b0111));
        // d = 6: abcdef → defabc.
        assert_eq!(p.map(0b110_001, 64).unwrap(), Some(0b001_110));
        // 7×7 mesh: (x,y) = (2,5) → (5,2).
        assert_eq!(p.map(2 + 7 * 5, 49).unwrap(), Some(5 + 7 * 2));
        // 4×4 mesh and 4-cube agree.
        assert_eq!(p.map(1 + 4 * 3, 16).unwrap(), Some(3 + 4));
        assert_eq!(
            p.map(0, 12),
            Err(TrafficError::NotTransposable { hosts: 12 })
        );
    }

    #[test]
    fn diagonal_nodes_are_silent() {
        let mut g = DestinationGenerator::new(TrafficPattern::Transpose, 0, 49).unwrap();
        assert_eq!(g.total_messages(), Some(0));
        assert_eq!(g.next_destination(&mut ChaCha8Rng::seed_from_u64(1)), None);
        let mut g = DestinationGenerator::new(TrafficPattern::Shift { shift: 8 }, 3, 8).unwrap();
        assert_eq!(g.next_destination(&mut ChaCha8Rng::seed_from_u64(1)), None);
    }

    #[test]
    fn power_of_two_patterns_reject_other_sizes() {
        for p in [
            TrafficPattern::BitReversal,
            TrafficPattern::Shuffle,
            TrafficPattern::Butterfly,
        ] {
            assert!(matches!(
                DestinationGenerator::new(p, 0, 12),
                Err(TrafficError::NotPowerOfTwo { hosts: 12, .. })
            ));
        }
    }

    #[test]
    fn shift_handles_negative_and_large_shifts() {
        let p = TrafficPattern::Shift { shift: -1 };
        assert_eq!(p.map(0, 5).unwrap(), Some(4));
        let p = TrafficPattern::Shift { shift: 13 };
        assert_eq!(p.map(4, 5).unwrap(), Some(2));
    }

    #[test]
    fn all_to_all_visits_every_other_node_per_round_then_stops() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut g =
            DestinationGenerator::new(TrafficPattern::AllToAll { rounds: 2 }, 2, 5).unwrap();
        assert_eq!(g.total_messages(), Some(8));
        let got: Vec<_> = std::iter::from_fn(|| g.next_destination(&mut rng)).collect();
        assert_eq!(got, vec![3, 4, 0, 1, 3, 4, 0, 1]);
    }

    #[test]
    fn uniform_excludes_self_and_covers_the_others() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut g = DestinationGenerator::new(TrafficPattern::Uniform, 3, 6).unwrap();
        let mut seen = [0u32; 6];
        for _ in 0..6000 {
            seen[g.next_destination(&mut rng).unwrap() as usize] += 1;
        }
        assert_eq!(seen[3], 0);
        for (d, &c) in seen.iter().enumerate().filter(|(d, _)| *d != 3) {
            assert!((1000..1400).contains(&c), "dest {d}: {c} of 6000");
        }
    }

    #[test]
    fn hotspot_sends_the_configured_fraction_to_the_hot_node() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let p = TrafficPattern::Hotspot {
            node: 0,
            fraction: 0.3,
        };
        let mut g = DestinationGenerator::new(p, 5, 16).unwrap();
        let hot = (0..10_000)
            .filter(|_| g.next_destination(&mut rng) == Some(0))
            .count();
        // 0.3 + 0.7/15 ≈ 0.347 of the messages.
        assert!((3200..3750).contains(&hot), "{hot}");
        let mut hot_node = DestinationGenerator::new(
            TrafficPattern::Hotspot {
                node: 0,
                fraction: 1.0,
            },
            0,
            16,
        )
        .unwrap();
        assert!((0..100).all(|_| hot_node.next_destination(&mut rng) != Some(0)));
        assert!(DestinationGenerator::new(
            TrafficPattern::Hotspot {
                node: 16,
                fraction: 0.1
            },
            0,
            16
        )
        .is_err());
    }

    #[test]
    fn from_str_round_trips_and_rejects_garbage() {
        for s in [
            "uniform",
            "bit-reversal",
            "shuffle",
            "butterfly",
            "bit-complement",
            "transpose",
            "hotspot:3:0.05",
            "all-to-all:2",
            "shift:-3",
            "permutation:/tmp/p.txt",
        ] {
            let p: TrafficPattern = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<TrafficPattern>(&json).unwrap(), p);
        }
        assert_eq!(
            "all-to-all".parse::<TrafficPattern>().unwrap(),
            TrafficPattern::AllToAll { rounds: 1 }
        );
        for bad in [
            "nope",
            "hotspot:1",
            "hotspot:x:0.1",
            "hotspot:1:1.5",
            "shift:",
            "shift:a",
            "uniform:3",
            "all-to-all:0",
            "permutation:",
        ] {
            assert!(bad.parse::<TrafficPattern>().is_err(), "{bad}");
        }
    }

    #[test]
    fn permutation_parse_reports_line_numbers() {
        let p = FixedPermutation::parse("# header\n0 3\n\n3 0  # swap\n1 1\n").unwrap();
        assert_eq!(p.map.len(), 3);
        let err = |t: &str| match FixedPermutation::parse(t) {
            Err(TrafficError::PermutationSyntax { line, .. }) => line,
            other => panic!("{other:?}"),
        };
        assert_eq!(err("0 1\n1 x\n"), 2);
        assert_eq!(err("0 1\n\n2\n"), 3);
        assert_eq!(err("0 1\n0 2\n"), 2);
        assert_eq!(err("0 1\n2 1\n"), 2);
        assert_eq!(err("0 1 2\n"), 1);
        assert_eq!(err("-1 2\n"), 1);
    }

    #[test]
    fn permutation_file_is_resolved_through_the_callers_reader() {
        let p: TrafficPattern = "permutation:perm.txt".parse().unwrap();
        assert!(matches!(
            DestinationGenerator::new(p.clone(), 0, 4),
            Err(TrafficError::PermutationNotLoaded(_))
        ));
        let resolved = p
            .clone()
            .resolve(|path| {
                assert_eq!(path, Path::new("perm.txt"));
                Ok("0 2\n2 9\n".into())
            })
            .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut g = DestinationGenerator::new(resolved.clone(), 0, 4).unwrap();
        assert_eq!(g.next_destination(&mut rng), Some(2));
        // Unmapped source: silent.
        let mut g = DestinationGenerator::new(resolved.clone(), 1, 4).unwrap();
        assert_eq!(g.next_destination(&mut rng), None);
        // Destination 9 is out of range for 4 hosts.
        assert!(matches!(
            DestinationGenerator::new(resolved, 2, 4),
            Err(TrafficError::NodeOutOfRange { node: 9, .. })
        ));
        let missing = p.resolve(|_| Err(std::io::Error::other("no such file")));
        assert!(matches!(missing, Err(TrafficError::PermutationFile { .. })));
    }

    fn deterministic_patterns() -> Vec<TrafficPattern> {
        vec![
            TrafficPattern::BitReversal,
            TrafficPattern::Shuffle,
            TrafficPattern::Butterfly,
            TrafficPattern::BitComplement,
            TrafficPattern::Transpose,
        ]
    }

    proptest! {
        #[test]
        fn permutation_patterns_are_permutations(b in 1u32..=12, shift in -100i64..100) {
            let n = 1u32 << b;
            let mut patterns = deterministic_patterns();
            patterns.push(TrafficPattern::Shift { shift });
            for p in patterns {
                let mut image = map_all(&p, n);
                image.sort_unstable();
                prop_assert_eq!(image, (0..n).collect::<Vec<_>>(), "{}", p);
            }
        }

        #[test]
        fn no_pattern_leaves_the_fabric(
            n in 2u32..300,
            src_frac in 0.0f64..1.0,
            seed in any::<u64>(),
            shift in any::<i32>(),
            hot in 0u32..300,
        ) {
            let src = ((n as f64 * src_frac) as u32).min(n - 1);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut patterns = deterministic_patterns();
            patterns.extend([
                TrafficPattern::Uniform,
                TrafficPattern::Hotspot { node: hot % n, fraction: 0.5 },
                TrafficPattern::AllToAll { rounds: 1 },
                TrafficPattern::Shift { shift: shift as i64 },
            ]);
            for p in patterns {
                // Patterns that do not apply to n hosts must say so, not panic.
                let Ok(mut g) = DestinationGenerator::new(p, src, n) else { continue };
                for _ in 0..50 {
                    if let Some(d) = g.next_destination(&mut rng) {
                        prop_assert!(d < n);
                        prop_assert_ne!(d, src);
                    }
                }
            }
        }
    }
}
