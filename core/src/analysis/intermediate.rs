//! The static fault analysis behind the tables of *A Routing Methodology
//! for Achieving Fault Tolerance in Direct Networks* (§4, §6): which fault
//! combinations each mechanism set tolerates ([`tolerance_table`]). The
//! mechanism itself (route choice, legs) is
//! [`crate::mechanism::intermediate`], re-exported here.

pub mod table;

pub use crate::mechanism::intermediate::*;
pub use table::{
    binomial, distance_one_region, tolerance_table, tolerated_by, AnalysisOptions, FaultMode,
    MechanismSplit, Rows, VariantRow,
};

#[cfg(test)]
mod golden;
