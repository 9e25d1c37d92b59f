//! Dynamic FT²EI (*Low-Memory Techniques for Routing and Fault-Tolerance
//! on the Fat-Tree Topology*): the controller turns it on in every switch
//! and sums what the switches did.

use crate::fabric::{Fabric, SwitchReports};
use anyhow::Result;
use flitnet_core::control::Request;
use flitnet_core::mechanism::ft2ei_dyn::Ft2eiDynConfig;
use flitnet_core::topology::NodeRef;

/// Turns dynamic FT²EI on in every switch (§4.5).
pub fn configure_ft2ei_dyn(fabric: &Fabric, cfg: Ft2eiDynConfig) -> Result<()> {
    fabric.broadcast(
        |n| matches!(n, NodeRef::Switch(_)),
        |_| Request::ConfigureFt2eiDyn { config: Some(cfg) },
    )?;
    Ok(())
}

/// What dynamic FT²EI did over the run, summed over the switches.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Ft2eiDynReport {
    pub ctrl_sent: u64,
    pub ctrl_received: u64,
    pub ctrl_dropped: u64,
    pub exclusion_updates: u64,
    pub deflections: u64,
    pub errors: u64,
    /// Switches that applied at least one exclusion update.
    pub switches_updated: u64,
    /// First fault detection to the last exclusion update anywhere (the
    /// daemons share CLOCK_MONOTONIC), if both happened.
    pub reconfiguration_ns: Option<u64>,
}

impl Ft2eiDynReport {
    pub fn from_switches(reports: &SwitchReports) -> Self {
        let mut r = Ft2eiDynReport::default();
        let (mut first_fault, mut last_update) = (u64::MAX, 0u64);
        for (_, v) in reports {
            let f = &v.counters.ft2ei;
            r.ctrl_sent += f.ctrl_sent;
            r.ctrl_received += f.ctrl_received;
            r.ctrl_dropped += f.ctrl_dropped;
            r.exclusion_updates += f.exclusion_updates;
            r.deflections += f.deflections;
            r.errors += f.errors;
            if f.exclusion_updates > 0 {
                r.switches_updated += 1;
                last_update = last_update.max(f.last_update_ns);
            }
            if f.fault_ns > 0 {
                first_fault = first_fault.min(f.fault_ns);
            }
        }
        if first_fault != u64::MAX && last_update >= first_fault {
            r.reconfiguration_ns = Some(last_update - first_fault);
        }
        r
    }
}
