//! The traffic a run drives: the options every command that runs traffic
//! shares, and the spec the hosts receive.

use crate::parse::parse_duration;
use clap::Args;
use flitnet_core::control::TrafficSpec;
use std::path::Path;
use std::time::Duration;

/// Options shared by every command that runs traffic on a fabric.
#[derive(Args, Debug, Clone)]
pub struct TrafficArgs {
    /// Traffic pattern: uniform, all-to-all, bit-reversal, shuffle, butterfly,
    /// bit-complement, transpose, hotspot:<node>:<fraction>, shift:<s>,
    /// permutation:<file>.
    #[arg(long, default_value = "uniform")]
    pub pattern: String,
    /// Offered load per host, as a fraction of the link bandwidth.
    #[arg(long, default_value_t = 0.3)]
    pub load: f64,
    /// Message length in flits.
    #[arg(long, default_value_t = 8)]
    pub message_flits: u32,
    /// How long hosts generate traffic (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// For all-to-all: rounds through every destination.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
}

impl TrafficArgs {
    /// The traffic the hosts run, with `seed`.
    pub fn spec(&self, seed: u64) -> TrafficSpec {
        TrafficSpec {
            pattern: absolute_permutation(&self.pattern),
            load: self.load,
            message_flits: self.message_flits,
            duration_ns: self.duration.as_nanos() as u64,
            rounds: self.rounds,
            seed,
        }
    }
}

/// `permutation:FILE` with FILE made absolute (the daemons read it and do
/// not share flitctl's working directory); other patterns unchanged.
pub fn absolute_permutation(pattern: &str) -> String {
    match pattern.strip_prefix("permutation:") {
        Some(file) if !Path::new(file).is_absolute() => match std::env::current_dir() {
            Ok(cwd) => format!("permutation:{}", cwd.join(file).display()),
            Err(_) => pattern.to_string(),
        },
        _ => pattern.to_string(),
    }
}
