//! The papers' experiments, kept out of the product: `flitnet-experiments
//! reproduce` (also reached as `flitctl reproduce`) regenerates
//! docs/reproduction.md from the analyses here and from live runs of the
//! product (`flitctl`'s `up`).
//!
//! - [`analysis`]: offline analyses behind the papers' results (SBRP
//!   orderings in the simulator, DLR connectivity);
//! - [`reproduce`]: the paper constants, one section per paper and the
//!   Markdown report;
//! - [`stats`]: the statistics both use.

pub mod analysis;
pub mod reproduce;
pub mod stats;
