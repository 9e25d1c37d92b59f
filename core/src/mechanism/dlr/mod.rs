//! Dynamic local rerouting (*Dynamic Fault Tolerance in Fat Trees*): the
//! switches of a k-ary n-tree misroute around a dead port on their own.
//! The decision logic is [`logic`], its place in the switch pipeline
//! [`switch`], and [`walk`] an untimed model of a fabric running it (for
//! tests and the connectivity analysis).

pub mod logic;
pub mod plan;
pub mod switch;
pub mod walk;

pub use logic::*;
pub use switch::RerouteConfigError;

use super::{Applies, ConfigureError, Mechanism, MechanismPlan, NodeConfig, PlanError};
use super::{RunSpec, Variant};
use crate::switch::Switch;
use crate::topology::{Family, SwitchId, Topology};

/// The mechanism's registry name.
pub const NAME: &str = "dlr";

/// DLR in the registry.
pub struct Dlr;

const VARIANTS: &[Variant] = &[
    Variant {
        name: "dlr",
        mechanism: NAME,
        summary: "deterministic, link and switch faults",
        vcs_needed: |_| {
            DlrConfig::new(2, 2, DlrVariant::Deterministic, DlrFaults::Switch).vcs_needed()
        },
    },
    Variant {
        name: "dlr-link",
        mechanism: NAME,
        summary: "deterministic, link faults only",
        vcs_needed: |_| {
            DlrConfig::new(2, 2, DlrVariant::Deterministic, DlrFaults::Link).vcs_needed()
        },
    },
    Variant {
        name: "dlr-adaptive",
        mechanism: NAME,
        summary: "adaptive re-route vector, link and switch faults",
        vcs_needed: |_| DlrConfig::new(2, 2, DlrVariant::Adaptive, DlrFaults::Switch).vcs_needed(),
    },
    Variant {
        name: "dlr-adaptive-link",
        mechanism: NAME,
        summary: "adaptive re-route vector, link faults only",
        vcs_needed: |_| DlrConfig::new(2, 2, DlrVariant::Adaptive, DlrFaults::Link).vcs_needed(),
    },
];

impl Mechanism for Dlr {
    fn name(&self) -> &'static str {
        NAME
    }
    fn applies(&self) -> Applies {
        Applies::KaryNTree
    }
    fn variants(&self) -> &'static [Variant] {
        VARIANTS
    }
    fn switch_metrics(&self) -> &'static [super::SwitchMetric] {
        &[super::SwitchMetric {
            name: "flitnet_reroutes_total",
            help: "Packets sent around a dead port by dynamic local rerouting.",
            value: |c| c.reroutes,
        }]
    }
    fn plan(
        &self,
        variant: &'static Variant,
        run: &RunSpec<'_>,
    ) -> Result<Option<Box<dyn MechanismPlan>>, PlanError> {
        Ok(Some(Box::new(plan::DlrPlan::new(variant, run)?)))
    }
    fn configure_switch(
        &self,
        sw: &mut Switch,
        id: SwitchId,
        config: Option<&NodeConfig>,
    ) -> Result<(), ConfigureError> {
        plan::configure_switch(sw, id, config)
    }
}

impl DlrConfig {
    /// The configuration a registry variant selects for `topo`: `Ok(None)`
    /// for a variant of another mechanism, an error when `topo` is not a
    /// k-ary n-tree.
    pub fn of_variant(
        v: &Variant,
        topo: &Topology,
    ) -> Result<Option<Self>, super::ApplicabilityError> {
        let Some((variant, faults)) = kind_of(v) else {
            return Ok(None);
        };
        let Family::KaryNTree { k, n } = topo.family else {
            return Err(super::ApplicabilityError::WrongTopology {
                variant: v.name,
                applies: Applies::KaryNTree.describe(),
                topology: topo.name.clone(),
            });
        };
        Ok(Some(DlrConfig::new(k, n, variant, faults)))
    }
}

/// The algorithm and the faults a registry variant selects (`None`: a
/// variant of another mechanism).
fn kind_of(v: &Variant) -> Option<(DlrVariant, DlrFaults)> {
    Some(match v.name {
        "dlr" => (DlrVariant::Deterministic, DlrFaults::Switch),
        "dlr-link" => (DlrVariant::Deterministic, DlrFaults::Link),
        "dlr-adaptive" => (DlrVariant::Adaptive, DlrFaults::Switch),
        "dlr-adaptive-link" => (DlrVariant::Adaptive, DlrFaults::Link),
        _ => return None,
    })
}

/// Whether variant `v` can deadlock once the faults go beyond its
/// guarantee (k−1 faults, leaf switches excluded): the adaptive variants,
/// whose one VC rests on Duato's argument for fewer than k faults, and
/// which do deadlock beyond it (*Dynamic Fault Tolerance in Fat Trees*,
/// Fig. 12). A leaf switch dead, or stopped long enough to be taken for
/// dead, is such a fault: the packets for its hosts bounce between leaves
/// and upper switches on the one VC. The deterministic variants' extra
/// VCs keep them deadlock-free for any number of faults.
pub fn deadlocks_beyond_guarantee(v: &Variant) -> bool {
    kind_of(v).is_some_and(|(variant, _)| variant == DlrVariant::Adaptive)
}
