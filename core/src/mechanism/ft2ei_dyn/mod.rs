//! Dynamic FT²EI (*Fault-Tolerant Routing in Fat Trees with Exclusion
//! Intervals*, §4.5–§4.6): the switches of a k-ary n-tree install exclusion
//! intervals themselves, by control packets, while traffic runs. The
//! protocol is [`protocol`]; its place in the switch pipeline is [`switch`].

pub mod plan;
pub mod protocol;
pub mod switch;

pub use protocol::*;
pub use switch::{ctrl_flit, decode_ctrl, encode_ctrl, Ft2eiConfigError};

use super::{Applies, ConfigureError, Mechanism, MechanismPlan, NodeConfig, PlanError};
use super::{RunSpec, Variant};
use crate::switch::Switch;
use crate::topology::{SwitchId, Topology};

/// The mechanism's registry name.
pub const NAME: &str = "ft2ei-dyn";

/// Dynamic FT²EI in the registry.
pub struct Ft2eiDyn;

fn one_vc(_: &Topology) -> u8 {
    1
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "ft2ei-dyn",
        mechanism: NAME,
        summary: "exclusion intervals by control packets; caught packets take an emergency path",
        vcs_needed: one_vc,
    },
    Variant {
        name: "ft2ei-dyn-drop",
        mechanism: NAME,
        summary: "exclusion intervals by control packets; caught packets are dropped",
        vcs_needed: one_vc,
    },
];

impl Mechanism for Ft2eiDyn {
    fn name(&self) -> &'static str {
        NAME
    }
    fn applies(&self) -> Applies {
        Applies::FatTree
    }
    fn variants(&self) -> &'static [Variant] {
        VARIANTS
    }
    fn switch_metrics(&self) -> &'static [super::SwitchMetric] {
        &[
            super::SwitchMetric {
                name: "flitnet_ft2ei_ctrl_sent_total",
                help: "Dynamic FT²EI control packets sent (Fault-Tolerant Routing in Fat Trees with Exclusion Intervals, §4.5).",
                value: |c| c.ft2ei.ctrl_sent,
            },
            super::SwitchMetric {
                name: "flitnet_ft2ei_exclusion_updates_total",
                help: "Exclusion-interval updates applied by dynamic FT²EI.",
                value: |c| c.ft2ei.exclusion_updates,
            },
            super::SwitchMetric {
                name: "flitnet_ft2ei_deflections_total",
                help: "Packets sent down an FT²EI emergency path (§4.6).",
                value: |c| c.ft2ei.deflections,
            },
        ]
    }
    fn plan(
        &self,
        variant: &'static Variant,
        run: &RunSpec<'_>,
    ) -> Result<Option<Box<dyn MechanismPlan>>, PlanError> {
        Ok(Some(Box::new(plan::Ft2eiDynPlan::new(variant, run)?)))
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

impl Ft2eiDynConfig {
    /// The configuration a registry variant selects for a `k`-ary
    /// `n`-tree, with the two exclusion intervals per port the paper finds
    /// enough (§6.3); `None` for a variant of another mechanism.
    pub fn of_variant(v: &Variant, k: u32, n: u32) -> Option<Self> {
        let emergency = match v.name {
            "ft2ei-dyn" => true,
            "ft2ei-dyn-drop" => false,
            _ => return None,
        };
        Some(Ft2eiDynConfig {
            k,
            n,
            n_ei: 2,
            emergency,
            ruft: false,
        })
    }
}
