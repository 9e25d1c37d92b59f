//! Local rerouting without a controller (the faithful mode of *Software-
//! Based Recovery of Packets Cut by Faults*): the `local-reroute` engine
//! ([`crate::routing::local_reroute`]) computes fault-free tables with
//! misroute ports once; a switch that loses a neighbour routes around it on
//! its own ([`switch`]). Selected by that engine, not by a name of its own.

pub mod switch;

use super::{Applies, Mechanism, Variant};
use crate::switch::hook::SwitchHook;

/// The mechanism's registry name (the engine's too).
pub const NAME: &str = crate::routing::local_reroute::NAME;

/// Local rerouting in the registry.
pub struct LocalReroute;

impl Mechanism for LocalReroute {
    fn name(&self) -> &'static str {
        NAME
    }
    fn applies(&self) -> Applies {
        Applies::MeshOrHypercube
    }
    fn variants(&self) -> &'static [Variant] {
        &[]
    }
    fn standing_hook(&self) -> Option<Box<dyn SwitchHook>> {
        Some(Box::new(switch::LocalRerouteHook))
    }
}
