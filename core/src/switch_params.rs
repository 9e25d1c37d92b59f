//! The switch parameters a fabric sets (traversal latency, crossbar
//! speedup) and their bounds: the control protocol carries them to the
//! daemons, and topology files may set them, so both read them from here.

use serde::{Deserialize, Serialize};

/// Longest switch traversal latency: 1 ms, far beyond any router (tens of
/// ns) even on emulated links 1000 times slower.
pub const MAX_SWITCH_LATENCY_NS: u64 = 1_000_000;
/// Longest switch traversal latency in flit times.
pub const MAX_SWITCH_LATENCY_FLIT_TIMES: u32 = 1_000;
/// Largest crossbar speedup (beyond the radix it changes nothing).
pub const MAX_CROSSBAR_SPEEDUP: u8 = 64;

/// A switch latency that does not parse (the message names the text).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SwitchLatencyError(pub String);

/// A switch traversal latency, in ns or in flit times of the fabric's
/// links. Written `250ns`, `1.5us`, `4ft` (flit times) or `0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchLatency {
    Ns(u64),
    FlitTimes(u32),
}

impl SwitchLatency {
    /// Four flit times: the classic four-stage virtual-channel router
    /// pipeline (routing, VC allocation, switch allocation, switch
    /// traversal; Peh and Dally, "A Delay Model and Speculative
    /// Architecture for Pipelined Routers"), with one flit per cycle.
    pub const DEFAULT: SwitchLatency = SwitchLatency::FlitTimes(4);

    /// The latency in ns on links of `flit_time_ns` per flit (none:
    /// unpaced links, where flit times count 0).
    pub fn ns(self, flit_time_ns: Option<u64>) -> u64 {
        match self {
            SwitchLatency::Ns(ns) => ns,
            SwitchLatency::FlitTimes(n) => flit_time_ns.unwrap_or(0).saturating_mul(n as u64),
        }
    }

    /// Parses `4ft` (flit times), `250ns`, `2us`, `1ms`, or `0`.
    pub fn parse(text: &str) -> Result<Self, SwitchLatencyError> {
        let t = text.trim();
        let bad = || {
            SwitchLatencyError(format!(
                "switch latency {text:?}: expected flit times (4ft) or a duration (250ns, 2us, 1ms)"
            ))
        };
        if t == "0" {
            return Ok(SwitchLatency::Ns(0));
        }
        if let Some(n) = t.strip_suffix("ft") {
            return n
                .trim()
                .parse()
                .map(SwitchLatency::FlitTimes)
                .map_err(|_| bad());
        }
        let (num, scale) = if let Some(n) = t.strip_suffix("ns") {
            (n, 1.0)
        } else if let Some(n) = t.strip_suffix("us") {
            (n, 1e3)
        } else if let Some(n) = t.strip_suffix("ms") {
            (n, 1e6)
        } else {
            return Err(bad());
        };
        let v: f64 = num.trim().parse().map_err(|_| bad())?;
        if !v.is_finite() || v < 0.0 {
            return Err(bad());
        }
        Ok(SwitchLatency::Ns((v * scale).round() as u64))
    }
}

impl Default for SwitchLatency {
    fn default() -> Self {
        SwitchLatency::DEFAULT
    }
}

impl std::fmt::Display for SwitchLatency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SwitchLatency::Ns(ns) => write!(f, "{ns}ns"),
            SwitchLatency::FlitTimes(n) => write!(f, "{n}ft"),
        }
    }
}
