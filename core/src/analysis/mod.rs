//! Offline analyses behind the papers' fault-tolerance results.

pub mod dlr_connectivity;
pub mod intermediate;
pub mod saturation;
pub mod sbrp_ordering;
