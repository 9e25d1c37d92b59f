//! Fault tolerance through intermediate nodes in meshes and tori (*A
//! Routing Methodology for Achieving Fault Tolerance in Direct Networks*).
//!
//! Switches keep fault-oblivious minimal adaptive routing (Duato, bubble
//! escape); the **source** picks, per destination, a route whose every leg
//! avoids every fault (§3.2):
//! - **I / I×N**: go through up to N intermediate nodes, without ejection;
//! - **D**: disable adaptivity on a leg (DOR, or direction order with M);
//! - **M**: force up to three direction runs at the start of a leg.
//!
//! Submodules: [`cube`] (geometry, deterministic paths, misroute prefixes),
//! [`legs`] (mechanism sets, leg types, routes, leg safety), [`select`]
//! (route choice: [`choose_route`] / [`RoutePlanner`] answer "what does the
//! source put in the head", §3.8), [`host`] (the source's per-destination
//! routes) and [`switch`] (legs in the switch pipeline). The static fault
//! analysis behind the paper's tables is flitctl's `analyze faults`.

pub mod cube;
pub mod host;
pub mod legs;
pub mod plan;
pub mod select;
pub mod switch;

pub use cube::{Cube, DetOrder, Dir, Run};
pub use host::{Applied, IntermediateRoutes, IntermediateStats, RouteTableSummary};
pub use legs::{Leg, LegKind, MechanismUse, Mechanisms, Route, RouteChoice};
pub use select::{choose_route, RoutePlanner};

use super::{Applies, ConfigureError, Mechanism, MechanismPlan, NodeConfig, PlanError};
use super::{RunSpec, Variant};
use crate::host::endpoint::HostEndpoint;
use crate::switch::hook::SwitchHook;
use crate::topology::{Family, Topology};

/// The mechanism's registry name.
pub const NAME: &str = "intermediate";

/// Intermediate nodes in the registry.
pub struct Intermediate;

/// Virtual channels a variant using up to `max_intermediates` needs on
/// `topo`: one escape set per leg (two VCs per leg on a torus, for the
/// dateline; one on a mesh) plus the shared adaptive VC.
fn legs_vcs(topo: &Topology, max_intermediates: u8) -> u8 {
    let per_leg = if matches!(topo.family, Family::Torus { .. }) {
        2
    } else {
        1
    };
    (max_intermediates + 1) * per_leg + 1
}

const fn variant(
    name: &'static str,
    summary: &'static str,
    vcs_needed: fn(&Topology) -> u8,
) -> Variant {
    Variant {
        name,
        mechanism: NAME,
        summary,
        vcs_needed,
    }
}

const VARIANTS: &[Variant] = &[
    variant("i", "one intermediate node, adaptive legs", |t| {
        legs_vcs(t, 1)
    }),
    variant("ix2", "up to two intermediate nodes", |t| legs_vcs(t, 2)),
    variant("ix3", "up to three intermediate nodes", |t| legs_vcs(t, 3)),
    variant(
        "i-d",
        "one intermediate node, adaptivity disabled on any leg",
        |t| legs_vcs(t, 1),
    ),
    variant(
        "ix2-d",
        "up to two intermediate nodes, adaptivity disabled on any leg",
        |t| legs_vcs(t, 2),
    ),
    variant(
        "d",
        "adaptivity disabled per packet, no intermediate node",
        |t| legs_vcs(t, 0),
    ),
    variant("m", "forced misroute runs at the start of the path", |t| {
        legs_vcs(t, 0)
    }),
    variant("d-m", "adaptivity disabled and misroute runs", |t| {
        legs_vcs(t, 0)
    }),
    variant("i-m", "one intermediate node and misroute runs", |t| {
        legs_vcs(t, 1)
    }),
    variant(
        "i-d-m",
        "one intermediate node, adaptivity disabled and misroute runs",
        |t| legs_vcs(t, 1),
    ),
];

impl Mechanism for Intermediate {
    fn name(&self) -> &'static str {
        NAME
    }
    fn applies(&self) -> Applies {
        Applies::MeshOrTorus
    }
    fn variants(&self) -> &'static [Variant] {
        VARIANTS
    }
    fn switch_metrics(&self) -> &'static [super::SwitchMetric] {
        &[
            super::SwitchMetric {
                name: "flitnet_intermediate_pops_total",
                help: "Heads that reached their intermediate node here and started their next leg.",
                value: |c| c.intermediate_pops,
            },
            super::SwitchMetric {
                name: "flitnet_misroute_hops_total",
                help: "Forced misroute hops heads took here (intermediate-node variants with M).",
                value: |c| c.misroute_hops,
            },
        ]
    }
    fn host_metrics(&self) -> &'static [super::HostMetric] {
        &[
            super::HostMetric {
                name: "flitnet_host_intermediate_packets_total",
                help: "Packets injected with intermediate nodes in the head.",
                value: |r| r.intermediate.packets_via_intermediate,
            },
            super::HostMetric {
                name: "flitnet_host_deterministic_packets_total",
                help:
                    "Packets injected with adaptive routing disabled on some leg (variants with D).",
                value: |r| r.intermediate.packets_deterministic,
            },
            super::HostMetric {
                name: "flitnet_host_misrouted_packets_total",
                help: "Packets injected with forced misroute runs (variants with M).",
                value: |r| r.intermediate.packets_misrouted,
            },
            super::HostMetric {
                name: "flitnet_host_unrouted_packets_total",
                help: "Packets for destinations no allowed intermediate-node route reaches safely.",
                value: |r| r.intermediate.packets_unrouted,
            },
        ]
    }
    fn standing_hook(&self) -> Option<Box<dyn SwitchHook>> {
        Some(Box::new(switch::LegsHook))
    }
    fn plan(
        &self,
        variant: &'static Variant,
        run: &RunSpec<'_>,
    ) -> Result<Option<Box<dyn MechanismPlan>>, PlanError> {
        Ok(Some(Box::new(plan::IntermediatePlan::new(variant, run)?)))
    }
    fn configure_host(
        &self,
        host: &mut HostEndpoint,
        config: Option<&NodeConfig>,
    ) -> Result<Option<NodeConfig>, ConfigureError> {
        plan::configure_host(host, config)
    }
}

impl Mechanisms {
    /// The mechanism set a registry variant selects (`None` for a variant
    /// of another mechanism).
    pub fn of_variant(v: &Variant) -> Option<Self> {
        Some(match v.name {
            "i" => Mechanisms::i(),
            "ix2" => Mechanisms::i_x(2),
            "ix3" => Mechanisms::i_x(3),
            "i-d" => Mechanisms::i_d(),
            "ix2-d" => Mechanisms::i_x2_d(),
            "d" => Mechanisms::d(),
            "m" => Mechanisms::m(),
            "d-m" => Mechanisms::d_m(),
            "i-m" => Mechanisms::i_m(),
            "i-d-m" => Mechanisms::i_d_m(),
            _ => return None,
        })
    }

    /// The registry variant of this set, if it is one of the paper's.
    pub fn variant(&self) -> Option<&'static Variant> {
        VARIANTS.iter().find(|v| Self::of_variant(v) == Some(*self))
    }
}

use crate::topology::{HostId, LinkId, PortNo, SwitchId};

/// Why a route or an analysis could not be computed; each names the culprit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntermediateError {
    #[error("topology `{topology}` is a {family}, not a mesh or torus")]
    NotMeshOrTorus { topology: String, family: String },
    #[error("switch {switch} has no coordinates matching the mesh/torus dimensions")]
    BadCoordinates { switch: String },
    #[error("switch {switch} port {port} is not cabled to its mesh/torus neighbour")]
    BadCabling { switch: String, port: PortNo },
    #[error("host {host} is not attached to any router")]
    HostNotAttached { host: String },
    #[error("router {switch} has no host to stand for it as an intermediate node")]
    RouterWithoutHost { switch: String },
    #[error("host {host} does not exist")]
    UnknownHost { host: HostId },
    #[error("fault on link {link}, which does not exist")]
    UnknownLink { link: LinkId },
    #[error("fault on switch {switch}, which does not exist")]
    UnknownSwitch { switch: SwitchId },
    #[error("{requested} intermediate nodes requested; a head carries at most {max}")]
    TooManyIntermediates { requested: u8, max: usize },
    #[error(
        "mechanism {mechanism} routes packets over up to {needed} legs, but the fabric has escape \
         virtual channels for {legs} (configure more VCs)"
    )]
    NotEnoughLegs {
        mechanism: String,
        needed: u8,
        legs: u8,
    },
    #[error("the packet head cannot carry {what} yet")]
    HeadCannotCarry { what: &'static str },
    #[error(
        "the fast analysis handles at most 64 routers and 128 links; this network has {routers} and {links}"
    )]
    TooLargeForAnalysis { routers: usize, links: usize },
    #[error("{faults} faults requested but only {links} candidate links")]
    TooManyFaults { faults: usize, links: usize },
    #[error("C({links}, {faults}) combinations exceed the limit of {max}; use sampling")]
    TooManyCombinations {
        links: usize,
        faults: usize,
        max: u64,
    },
}
