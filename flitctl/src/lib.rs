//! The controller's library: everything `flitctl` does, usable from tests.

pub mod analyze;
pub mod analyze_faults;
pub mod bench;
pub mod bench_baseline;
pub mod bench_routes;
pub mod chaos;
pub mod compose;
pub mod controller;
pub mod ctl_metrics;
pub mod events;
pub mod fabric;
pub mod ibsim;
pub mod netns;
pub mod plot;
pub mod progress;
pub mod report;
pub mod reproduce;
pub mod reproduce_sbrp_sim;
pub mod route;
pub mod run;
pub mod scenario;
pub mod session;
pub mod stall;
pub mod topo;
pub mod up;
