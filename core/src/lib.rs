//! flitnet's sans-IO core. Nothing in this crate opens a socket or reads a
//! clock: the daemons feed it datagrams and time, and carry out what it returns.

pub mod control;
pub mod flit;
pub mod host;
pub mod input;
pub mod lateness;
pub mod link;
pub mod mechanism;
pub mod node;
pub mod routing;
pub mod sim;
pub mod switch;
pub mod switch_params;
pub mod topology;
pub mod wire;

#[cfg(test)]
mod sim_hoq_tests;
#[cfg(test)]
mod sim_reconfig_tests;
#[cfg(test)]
mod sim_timing_tests;
