//! Fault tolerance through intermediate nodes in meshes and tori (seed 004:
//! Gómez et al., *A Routing Methodology for Achieving Fault Tolerance in
//! Direct Networks*, IEEE TC 2006).
//!
//! Switches keep fault-oblivious minimal adaptive routing (Duato, bubble
//! escape); the **source** picks, per destination, a route whose every leg
//! avoids every fault (§3.2):
//! - **I / I×N**: go through up to N intermediate nodes, without ejection;
//! - **D**: disable adaptivity on a leg (DOR, or direction order with M);
//! - **M**: force up to three direction runs at the start of a leg.
//!
//! This module is pure: [`choose_route`] / [`RoutePlanner`] answer "what does
//! the source put in the head" (§3.8), and [`tolerance_table`] runs the
//! static fault analysis that reproduces Tables 2 and 3 (§4, §6).
//!
//! Submodules: [`cube`] (geometry, deterministic paths, misroute prefixes),
//! [`legs`] (mechanism sets, leg types, routes, leg safety), [`select`]
//! (route choice), [`table`] (fault-combination analysis).

pub mod cube;
pub mod legs;
pub mod select;
pub mod table;

pub use cube::{Cube, DetOrder, Dir, Run};
pub use legs::{Leg, LegKind, MechanismUse, Mechanisms, Route, RouteChoice};
pub use select::{choose_route, RoutePlanner};
pub use table::{
    binomial, distance_one_region, tolerance_table, tolerated_by, AnalysisOptions, FaultMode,
    MechanismSplit, Rows, VariantRow,
};

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

#[cfg(test)]
mod golden;
