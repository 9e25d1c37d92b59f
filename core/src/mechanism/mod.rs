//! Recovery and routing mechanisms, one folder each, behind one registry
//! (the routing engines' layout, after OpenSM's): a mechanism is its
//! [`Mechanism`] description (name, variants, virtual channels needed,
//! where it applies), its switch hook ([`crate::switch::hook::SwitchHook`])
//! and, where it has one, its host hook ([`crate::host::hook::HostHook`]).
//!
//! - [`sbrp`]: source-based recovery of packets cut by a fault (SBRP-0/1/2);
//! - [`dlr`]: dynamic local rerouting in k-ary n-trees;
//! - [`ft2ei_dyn`]: dynamic FT²EI, exclusion intervals updated by control
//!   packets;
//! - [`intermediate`]: intermediate nodes, disabled adaptivity and
//!   misrouting in meshes and tori, chosen by the source;
//! - [`local_reroute`]: one misroute around a dead port, under the
//!   `local-reroute` engine's tables;
//! - [`hoq`]: the head-of-queue lifetime (deadlock recovery).
//!
//! The switch and host pipelines call the hooks and never name a
//! mechanism; adding one is a folder here plus its line in [`REGISTRY`].

pub mod dlr;
pub mod ft2ei_dyn;
pub mod hoq;
pub mod intermediate;
pub mod local_reroute;
pub mod plan;
pub mod sbrp;

pub use plan::{
    ConfigureError, FaultsAnswered, MechanismPlan, MechanismReport, NodeConfig, PlanError,
    Reported, RunSpec,
};

use crate::host::endpoint::HostEndpoint;
use crate::link::ConfigError;
use crate::switch::hook::SwitchHook;
use crate::switch::{Switch, SwitchConfig};
use crate::topology::{Family, SwitchId, Topology};

/// The registered mechanisms. Their order is the order in which their
/// switch hooks run: the first that routes a head decides it, the first
/// that has a flit for the local input sends it.
pub const REGISTRY: &[&dyn Mechanism] = &[
    &dlr::Dlr,
    &local_reroute::LocalReroute,
    &intermediate::Intermediate,
    &ft2ei_dyn::Ft2eiDyn,
    &sbrp::Sbrp,
    &hoq::Hoq,
];

/// Where a mechanism applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applies {
    /// Any topology.
    Anywhere,
    /// k-ary n-trees only.
    KaryNTree,
    /// k-ary n-trees and RUFTs.
    FatTree,
    /// Meshes and tori only.
    MeshOrTorus,
    /// Meshes and hypercubes only.
    MeshOrHypercube,
}

impl Applies {
    pub fn to(self, family: &Family) -> bool {
        match self {
            Applies::Anywhere => true,
            Applies::KaryNTree => matches!(family, Family::KaryNTree { .. }),
            Applies::FatTree => matches!(family, Family::KaryNTree { .. } | Family::Ruft { .. }),
            Applies::MeshOrTorus => matches!(family, Family::Mesh { .. } | Family::Torus { .. }),
            Applies::MeshOrHypercube => {
                matches!(family, Family::Mesh { .. } | Family::Hypercube { .. })
            }
        }
    }

    /// The topologies, in words (for error messages).
    pub fn describe(self) -> &'static str {
        match self {
            Applies::Anywhere => "any topology",
            Applies::KaryNTree => "k-ary n-trees",
            Applies::FatTree => "k-ary n-trees and RUFTs",
            Applies::MeshOrTorus => "meshes and tori",
            Applies::MeshOrHypercube => "meshes and hypercubes",
        }
    }
}

/// One selectable form of a mechanism, as spelled on the command line, in
/// scenario YAML and in reports (`dlr-link`, `i-d`, `sbrp1`, …). Variants
/// are equal when their names are (a name is unique in the registry).
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    /// The one spelling (kebab-case).
    pub name: &'static str,
    /// The registry name of its mechanism.
    pub mechanism: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// Virtual channels the fabric needs for it, on a given topology.
    pub vcs_needed: fn(&Topology) -> u8,
}

impl PartialEq for Variant {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Variant {}

/// What the registry knows of a mechanism.
pub trait Mechanism: Sync {
    /// The registry name (kebab-case), also the hooks' name.
    fn name(&self) -> &'static str;

    /// Where it applies.
    fn applies(&self) -> Applies;

    /// Its selectable forms (empty: it is configured by its own option,
    /// not selected by name).
    fn variants(&self) -> &'static [Variant];

    /// The hook every switch carries for it, if it has a standing one (a
    /// hook that acts on what the installed tables say rather than on a
    /// configuration of its own).
    fn standing_hook(&self) -> Option<Box<dyn SwitchHook>> {
        None
    }

    /// The counters its switch half exports.
    fn switch_metrics(&self) -> &'static [SwitchMetric] {
        &[]
    }

    /// The counters its host half exports.
    fn host_metrics(&self) -> &'static [HostMetric] {
        &[]
    }

    /// Its controller half for a run of `variant` (one of its own), checked
    /// against the run before anything starts; `None` when the controller
    /// has nothing to install for it.
    fn plan(
        &self,
        variant: &'static Variant,
        run: &RunSpec<'_>,
    ) -> Result<Option<Box<dyn MechanismPlan>>, PlanError> {
        let _ = (variant, run);
        Ok(None)
    }

    /// Applies a configuration its controller half made to switch `id`
    /// (`None` turns the mechanism off there).
    fn configure_switch(
        &self,
        sw: &mut Switch,
        id: SwitchId,
        config: Option<&NodeConfig>,
    ) -> Result<(), ConfigureError> {
        let _ = (sw, id, config);
        Err(ConfigureError::NotOnSwitches(self.name()))
    }

    /// Applies a configuration its controller half made to a host (`None`
    /// turns the mechanism off there); the answer goes back to the
    /// controller half ([`MechanismPlan::faults_answered`]).
    fn configure_host(
        &self,
        host: &mut HostEndpoint,
        config: Option<&NodeConfig>,
    ) -> Result<Option<NodeConfig>, ConfigureError> {
        let _ = (host, config);
        Err(ConfigureError::NotOnHosts(self.name()))
    }
}

/// A Prometheus counter a mechanism's switch half keeps, read from the
/// switch's counters (the switch daemon exports it with a `switch` label).
pub struct SwitchMetric {
    pub name: &'static str,
    pub help: &'static str,
    pub value: fn(&crate::switch::SwitchCounters) -> u64,
}

/// A Prometheus counter a mechanism's host half keeps, read from the host's
/// report (the host daemon exports it with a `host` label).
pub struct HostMetric {
    pub name: &'static str,
    pub help: &'static str,
    pub value: fn(&crate::host::endpoint::HostReport) -> u64,
}

/// Every registered mechanism's switch counters.
pub fn switch_metrics() -> impl Iterator<Item = &'static SwitchMetric> {
    REGISTRY.iter().flat_map(|m| m.switch_metrics().iter())
}

/// Every registered mechanism's host counters.
pub fn host_metrics() -> impl Iterator<Item = &'static HostMetric> {
    REGISTRY.iter().flat_map(|m| m.host_metrics().iter())
}

/// The controller half of a run of `variant`, checked against `run`.
pub fn plan(
    variant: &'static Variant,
    run: &RunSpec<'_>,
) -> Result<Option<Box<dyn MechanismPlan>>, PlanError> {
    variant.check(run.topo, run.vcs).map_err(|e| match e {
        ApplicabilityError::TooFewVcs {
            need,
            vcs,
            topology,
            ..
        } => PlanError::new(
            variant,
            format!(
                "needs {need} virtual channels on `{topology}`, the fabric has {vcs}: run with \
                 --vcs {need} (fabric.vcs: {need} in a scenario)"
            ),
        ),
        ApplicabilityError::WrongTopology {
            applies, topology, ..
        } => PlanError::new(
            variant,
            format!("applies to {applies} only; `{topology}` is not one"),
        ),
    })?;
    mechanism(variant.mechanism)
        .expect("a variant names its registered mechanism")
        .plan(variant, run)
}

/// Applies mechanism `name`'s configuration to switch `id`: what a switch
/// daemon and the simulator do with a controller's configuration.
pub fn configure_switch(
    sw: &mut Switch,
    id: SwitchId,
    name: &str,
    config: Option<&NodeConfig>,
) -> Result<(), ConfigureError> {
    mechanism(name)
        .ok_or_else(|| ConfigureError::Unknown(name.to_string()))?
        .configure_switch(sw, id, config)
}

/// Applies mechanism `name`'s configuration to a host; its answer.
pub fn configure_host(
    host: &mut HostEndpoint,
    name: &str,
    config: Option<&NodeConfig>,
) -> Result<Option<NodeConfig>, ConfigureError> {
    mechanism(name)
        .ok_or_else(|| ConfigureError::Unknown(name.to_string()))?
        .configure_host(host, config)
}

/// The registry position of mechanism `name` (its hooks' rank).
///
/// Panics on a name not in [`REGISTRY`]: the names come from the
/// mechanisms' own constants.
pub fn rank(name: &str) -> usize {
    REGISTRY
        .iter()
        .position(|m| m.name() == name)
        .unwrap_or_else(|| panic!("mechanism `{name}` is not registered"))
}

/// Every selectable variant, in registry order.
pub fn variants() -> impl Iterator<Item = &'static Variant> {
    REGISTRY.iter().flat_map(|m| m.variants().iter())
}

/// The variant spelled `name`, if any.
pub fn parse(name: &str) -> Option<&'static Variant> {
    variants().find(|v| v.name == name)
}

/// The mechanism registered as `name`, if any.
pub fn mechanism(name: &str) -> Option<&'static dyn Mechanism> {
    REGISTRY.iter().copied().find(|m| m.name() == name)
}

/// Why a variant cannot run on a topology.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplicabilityError {
    #[error("mechanism `{variant}` applies to {applies} only; `{topology}` is not one")]
    WrongTopology {
        variant: &'static str,
        applies: &'static str,
        topology: String,
    },
    #[error(
        "mechanism `{variant}` needs {need} virtual channels on `{topology}`; the fabric has {vcs}"
    )]
    TooFewVcs {
        variant: &'static str,
        need: u8,
        vcs: u8,
        topology: String,
    },
}

impl Variant {
    /// Whether this variant can run on `topo` with `vcs` virtual channels.
    pub fn check(&self, topo: &Topology, vcs: u8) -> Result<(), ApplicabilityError> {
        let applies = mechanism(self.mechanism)
            .expect("a variant names its registered mechanism")
            .applies();
        if !applies.to(&topo.family) {
            return Err(ApplicabilityError::WrongTopology {
                variant: self.name,
                applies: applies.describe(),
                topology: topo.name.clone(),
            });
        }
        let need = (self.vcs_needed)(topo);
        if vcs < need {
            return Err(ApplicabilityError::TooFewVcs {
                variant: self.name,
                need,
                vcs,
                topology: topo.name.clone(),
            });
        }
        Ok(())
    }
}

impl Switch {
    pub fn new(cfg: SwitchConfig) -> Result<Self, ConfigError> {
        Self::with_epoch(cfg, 1)
    }

    /// A switch whose links announce `epoch` (see
    /// [`crate::link::Link::with_epoch`]), with the standing hooks of the
    /// registered mechanisms.
    pub fn with_epoch(cfg: SwitchConfig, epoch: u16) -> Result<Self, ConfigError> {
        let hooks = REGISTRY
            .iter()
            .enumerate()
            .filter_map(|(rank, m)| m.standing_hook().map(|h| (rank, h)))
            .collect();
        Switch::with_hooks(cfg, epoch, hooks)
    }
}

/// Implements the `Any` plumbing of a [`SwitchHook`] or a host hook.
macro_rules! hook_any {
    () => {
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
        fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
            self
        }
    };
}
pub(crate) use hook_any;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::{kary_ntree, mesh_or_torus};

    #[test]
    fn every_variant_has_one_spelling_and_a_registered_mechanism() {
        let mut names: Vec<_> = variants().map(|v| v.name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate spelling");
        for v in variants() {
            assert!(mechanism(v.mechanism).is_some(), "{}", v.name);
            assert_eq!(parse(v.name), Some(v));
            assert!(
                v.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{} is not kebab-case",
                v.name
            );
        }
        for (i, m) in REGISTRY.iter().enumerate() {
            assert_eq!(rank(m.name()), i);
        }
    }

    #[test]
    fn applicability_names_the_topology_and_the_vcs() {
        let tree = kary_ntree(2, 3).unwrap();
        let mesh = mesh_or_torus(&[4, 4], false).unwrap();
        let dlr = parse("dlr").unwrap();
        assert_eq!(dlr.check(&tree, 3), Ok(()));
        let e = dlr.check(&tree, 2).unwrap_err().to_string();
        assert!(e.contains("needs 3 virtual channels"), "{e}");
        let e = dlr.check(&mesh, 3).unwrap_err().to_string();
        assert!(e.contains("k-ary n-trees only"), "{e}");
        let i_d = parse("i-d").unwrap();
        assert_eq!(i_d.check(&mesh, 3), Ok(()));
        assert!(i_d.check(&tree, 3).is_err());
        assert!(parse("I+D").is_none(), "one spelling");
    }
}
