//! Dynamic FT²EI's controller half: every switch gets the tree and its
//! exclusion slots, and the run report sums what the switches did.

use super::{Ft2eiDynConfig, NAME};
use crate::mechanism::plan::{
    encode, ConfigureError, MechanismPlan, MechanismReport, NodeConfig, PlanError, Reported,
};
use crate::mechanism::{RunSpec, Variant};
use crate::switch::Switch;
use crate::topology::{Family, NodeRef, SwitchId};
use serde::{Deserialize, Serialize};

/// Dynamic FT²EI in a run.
#[derive(Debug)]
pub struct Ft2eiDynPlan {
    variant: &'static Variant,
    config: Ft2eiDynConfig,
}

impl Ft2eiDynPlan {
    /// Refused unless the run routes with the FT²EI interval tables and
    /// leaves re-routing to the switches.
    pub fn new(variant: &'static Variant, run: &RunSpec<'_>) -> Result<Self, PlanError> {
        let (k, n, ruft) = match run.topo.family {
            Family::KaryNTree { k, n } => (k, n, false),
            Family::Ruft { k, n } => (k, n, true),
            _ => {
                return Err(PlanError::new(
                    variant,
                    format!(
                        "needs a k-ary n-tree or a RUFT, `{}` is neither",
                        run.topo.name
                    ),
                ))
            }
        };
        if run.engine != "ft2ei" || run.tables_given {
            return Err(PlanError::new(
                variant,
                "routes with the FT²EI interval tables: run with --engine ft2ei and no --tables \
                 (engine: ft2ei in a scenario)",
            ));
        }
        if run.controller_reroutes {
            return Err(PlanError::new(
                variant,
                "reconfigures the switches by itself: run with --recovery none (a controller \
                 re-route would hide it)",
            ));
        }
        let config = Ft2eiDynConfig::of_variant(variant, k, n)
            .map(|c| Ft2eiDynConfig { ruft, ..c })
            .ok_or_else(|| PlanError::new(variant, "not a dynamic FT²EI variant"))?;
        Ok(Ft2eiDynPlan { variant, config })
    }
}

impl MechanismPlan for Ft2eiDynPlan {
    fn variant(&self) -> &'static Variant {
        self.variant
    }

    fn bring_up(&self, node: NodeRef) -> Option<NodeConfig> {
        matches!(node, NodeRef::Switch(_)).then(|| encode(&self.config))
    }

    fn describe(&self) -> Option<NodeConfig> {
        Some(encode(&self.config))
    }

    fn report(&self, reported: &Reported<'_>) -> Option<MechanismReport> {
        let r = Ft2eiDynReport::of(reported);
        let line = format!(
            "dynamic FT²EI: {} control packets sent, {} exclusion updates on {} switches, \
             {} emergency deflections, {} errors, reconfiguration {}",
            r.ctrl_sent,
            r.exclusion_updates,
            r.switches_updated,
            r.deflections,
            r.errors,
            r.reconfiguration_ns
                .map_or("n/a".to_string(), |ns| format!("{:.1} µs", ns as f64 / 1e3))
        );
        Some(MechanismReport {
            key: "ft2ei",
            body: encode(&r),
            line,
        })
    }
}

/// A switch daemon's side: the protocol on (`Some`) or off.
pub fn configure_switch(
    sw: &mut Switch,
    id: SwitchId,
    config: Option<&NodeConfig>,
) -> Result<(), ConfigureError> {
    let state = match config {
        None => None,
        Some(c) => {
            let c: Ft2eiDynConfig = ConfigureError::decode(NAME, c)?;
            Some(c.switch(id).map_err(|e| ConfigureError::refused(NAME, e))?)
        }
    };
    sw.set_ft2ei_dyn(state)
        .map_err(|e| ConfigureError::refused(NAME, e))
}

/// What dynamic FT²EI did over the run, summed over the switches (the
/// `ft2ei` section of the run report).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// daemons share one clock), if both happened.
    pub reconfiguration_ns: Option<u64>,
}

impl Ft2eiDynReport {
    pub fn of(reported: &Reported<'_>) -> Self {
        let mut r = Ft2eiDynReport::default();
        let (mut first_fault, mut last_update) = (u64::MAX, 0u64);
        for c in &reported.switches {
            let f = &c.ft2ei;
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
