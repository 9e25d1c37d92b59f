//! The IO shell shared by `switchd` and `hostd`.
//!
//! A daemon is a sans-IO state machine from `flitnet-core` wrapped in a
//! [`Daemon`] (a core [`Node`] that also takes control requests), driven by [`event_loop::run`]: one thread that owns the data
//! sockets (UDP, raw Ethernet or shared-memory rings per [`transport::Transport`]) and the timers (`ppoll(2)` with nanosecond timeouts, because
//! emulated links pace flits at microsecond scale and tokio's timer wheel
//! ticks in milliseconds), plus a control thread that accepts the
//! controller's requests and hands them to the loop.

pub mod clock;
pub mod control;
pub mod daemon;
pub mod event_loop;
pub mod events;
pub mod resolve;
pub mod telemetry;
pub mod transport;

// The transports, by their short paths.
pub use transport::{ethernet, shm};
pub mod tun;

pub use event_loop::{run, Daemon, Node};
pub use events::epoch;
