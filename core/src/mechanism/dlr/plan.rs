//! DLR's controller half: every switch gets the fabric's configuration and
//! its place in the tree; the switches do the rest.

use super::{DlrConfig, DlrFaults, DlrSwitch, NAME};
use crate::mechanism::plan::{
    encode, ConfigureError, MechanismPlan, MechanismReport, NodeConfig, PlanError, Reported,
};
use crate::mechanism::{RunSpec, Variant};
use crate::switch::Switch;
use crate::topology::{NodeRef, SwitchId};
use serde::{Deserialize, Serialize};

/// What one switch is told: the fabric's configuration, and its level
/// (0 = leaves) and digits `1..n-1` ([`crate::topology::Switch`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlrSwitchConfig {
    pub config: DlrConfig,
    pub level: u32,
    pub label: Vec<u32>,
}

/// DLR in a run.
#[derive(Debug)]
pub struct DlrPlan {
    variant: &'static Variant,
    config: DlrConfig,
    /// Each switch's place in the tree.
    places: Vec<(u32, Vec<u32>)>,
}

impl DlrPlan {
    pub fn new(variant: &'static Variant, run: &RunSpec<'_>) -> Result<Self, PlanError> {
        let config = DlrConfig::of_variant(variant, run.topo)
            .map_err(|e| PlanError::new(variant, e.to_string()))?
            .ok_or_else(|| PlanError::new(variant, "not a DLR variant"))?;
        if config.faults_handled == DlrFaults::Link && run.kills_switches && run.recovery.is_on() {
            return Err(PlanError::new(
                variant,
                format!(
                    "routes around link faults only (*Dynamic Fault Tolerance in Fat Trees* \
                     §3.4, §3.6): with a switch killed, {} would resend into the same dead end \
                     again and again; use dlr or dlr-adaptive (link and switch faults)",
                    run.recovery.name()
                ),
            ));
        }
        let mut places = Vec::with_capacity(run.topo.num_switches());
        for s in 0..run.topo.num_switches() as SwitchId {
            // Checks the switch's place in the tree before any daemon sees it.
            let d = DlrSwitch::from_topology(config, run.topo, s)
                .map_err(|e| PlanError::new(variant, e.to_string()))?;
            places.push((d.level(), d.digits().to_vec()));
        }
        Ok(DlrPlan {
            variant,
            config,
            places,
        })
    }
}

impl MechanismPlan for DlrPlan {
    fn variant(&self) -> &'static Variant {
        self.variant
    }

    fn bring_up(&self, node: NodeRef) -> Option<NodeConfig> {
        let NodeRef::Switch(s) = node else {
            return None;
        };
        let (level, label) = self.places.get(s as usize)?.clone();
        Some(encode(&DlrSwitchConfig {
            config: self.config,
            level,
            label,
        }))
    }

    fn describe(&self) -> Option<NodeConfig> {
        Some(encode(&self.config))
    }

    fn report(&self, reported: &Reported<'_>) -> Option<MechanismReport> {
        let local_reroutes: u64 = reported.switches.iter().map(|c| c.reroutes).sum();
        Some(MechanismReport {
            key: "dlr",
            body: encode(&DlrReport { local_reroutes }),
            line: format!("local reroutes: {local_reroutes}"),
        })
    }
}

/// A switch daemon's side: local rerouting on (`Some`) or off.
pub fn configure_switch(
    sw: &mut Switch,
    id: SwitchId,
    config: Option<&NodeConfig>,
) -> Result<(), ConfigureError> {
    let dlr = match config {
        None => None,
        Some(c) => {
            let c: DlrSwitchConfig = ConfigureError::decode(NAME, c)?;
            Some(
                DlrSwitch::new(c.config, id, c.level, c.label)
                    .map_err(|e| ConfigureError::refused(NAME, e))?,
            )
        }
    };
    sw.set_local_reroute(dlr)
        .map_err(|e| ConfigureError::refused(NAME, e))
}

/// What DLR did over the run (the `dlr` section of the run report).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlrReport {
    /// Heads the switches misrouted around a dead port.
    pub local_reroutes: u64,
}
