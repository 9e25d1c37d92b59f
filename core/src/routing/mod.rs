//! Routing: the tables switches forward by, and the engines that compute them.
//!
//! One engine per file (OpenSM's routing engines are the model), all behind
//! [`RoutingEngine`]. Every table set an engine returns can be checked by the
//! shared checker (connectivity, loop freedom, deadlock freedom where claimed).

pub mod adaptive;
pub mod checker;
pub mod destro;
pub mod dmodc;
pub mod dmodk;
pub mod dor;
pub mod ecube;
pub mod ft2ei;
pub mod ftree;
pub mod ftree2;
pub mod ftree_random;
pub mod gxmodk;
pub mod interval;
pub mod local_reroute;
pub mod metrics;
pub mod minhop;
pub mod opensm;
pub mod random;
pub mod ranking;
pub mod registry;
pub mod ruft;
pub mod smodk;
pub mod tables;
pub mod updown;
pub mod vc;

pub use tables::*;

use crate::topology::{FaultSet, Topology};

/// Why an engine could not produce tables.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    #[error("engine {engine} does not apply to this topology: {reason}")]
    NotApplicable {
        engine: &'static str,
        reason: String,
    },
    #[error("engine {engine} failed: {reason}")]
    Failed {
        engine: &'static str,
        reason: String,
    },
}

/// A routing engine: topology + failed elements in, one table per switch out.
pub trait RoutingEngine: Send + Sync {
    /// Short name used on the command line (`dmodk`, `updown`, `dor`, …).
    fn name(&self) -> &'static str;
    /// Whether the engine promises deadlock freedom with the VCs it uses, so
    /// that the checker verifies it.
    fn claims_deadlock_free(&self) -> bool;
    /// Computes tables for `topo` with `faults` removed.
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError>;
}
