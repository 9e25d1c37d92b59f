//! Dynamic local rerouting (*Dynamic Fault Tolerance in Fat Trees*): the
//! controller turns it on in every switch; the switches do the rest.

use crate::fabric::Fabric;
use anyhow::Result;
use flitnet_core::control::Request;
use flitnet_core::mechanism::dlr::{DlrConfig, DlrSwitch};
use flitnet_core::topology::{NodeRef, Topology};

/// Turns dynamic local rerouting on in every switch (*Dynamic Fault Tolerance in Fat Trees*).
pub fn configure_reroute(fabric: &Fabric, topo: &Topology, cfg: DlrConfig) -> Result<()> {
    for s in 0..topo.num_switches() as u32 {
        // Checks the switch's place in the tree before any daemon sees it.
        DlrSwitch::from_topology(cfg, topo, s)?;
    }
    fabric.broadcast(
        |n| matches!(n, NodeRef::Switch(_)),
        |n| {
            let NodeRef::Switch(s) = n else {
                unreachable!()
            };
            let sw = &topo.switches[s as usize];
            Request::ConfigureReroute {
                config: Some(cfg),
                level: sw.level.unwrap_or(0),
                label: sw.label.clone(),
            }
        },
    )?;
    Ok(())
}
