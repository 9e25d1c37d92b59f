//! Offline analyses behind the papers' results.

pub mod dlr_connectivity;
pub mod sbrp_ordering;
