//! The host (end node) core, sans-IO like the rest of the crate:
//! - [`traffic`]: destination patterns (seeds 000 §6.2, 001 §6.4, 003 §6.2.2);
//! - [`source`]: message generation, bounded source queue, packetisation;
//! - [`message`]: message ids, packets, flits and their deterministic payload;
//! - [`retained`]: the sender's store of messages kept for resending (SBRP);
//! - [`sink`]: reassembly and exactly-once / in-order / integrity checks;
//! - [`histogram`]: the latency histogram;
//! - [`ip`]: IP packets as messages (address plan, segmentation);
//! - [`endpoint`]: all of the above plus the port's link layer;
//! - [`counters`]: the mechanisms' counters in the host's report;
//! - [`hook`]: where the mechanisms' host halves act on the endpoint.

pub mod counters;
pub mod endpoint;
pub mod histogram;
pub mod hook;
pub mod ip;
pub mod message;
pub mod retained;
pub mod sink;
pub mod source;
pub mod traffic;
