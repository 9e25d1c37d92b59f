//! The source side of seed 004's intermediate nodes (§3.2, §5.2): the
//! routing table lives at the **source**. Given the fault set the
//! controller pushes, a host chooses, per destination, the route its heads
//! carry — direct (no fault on any minimal path), or through one or more
//! intermediate nodes with per-leg D bits — with the offline selection code
//! ([`RoutePlanner`], §3.8 order). Switches stay fault-oblivious.

use super::{IntermediateError, Mechanisms, RouteChoice, RoutePlanner};
use crate::flit::{route_flags, Head, MAX_INTERMEDIATES, MAX_LEGS, MAX_RUNS};
pub use crate::host::counters::{IntermediateStats, RouteTableSummary};
use crate::host::endpoint::{HostEndpoint, HostReport};
use crate::host::hook::HostHook;
use crate::mechanism::hook_any;
use crate::topology::{FaultSet, HostId, Topology};

/// What the head of a packet for one destination carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DstRoute {
    /// Plain adaptive routing: no fault on any minimal path.
    Direct,
    /// Through intermediate nodes (and/or with D bits).
    Routed {
        intermediates: [HostId; MAX_INTERMEDIATES],
        n: u8,
        flags: u8,
        runs: [[u8; MAX_RUNS]; MAX_LEGS],
    },
    /// No route the mechanism allows avoids the faults (or the pair is
    /// disconnected): packets go direct and may meet the fault.
    Unrouted,
}

/// How a head was set by [`IntermediateRoutes::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    Direct,
    /// Routed with `intermediates` intermediate nodes; `deterministic` if
    /// some leg has its D bit set.
    Routed {
        intermediates: u8,
        deterministic: bool,
        misrouted: bool,
    },
    Unrouted,
}

/// A source host's per-destination routes under one fault set.
#[derive(Clone, Debug)]
pub struct IntermediateRoutes {
    routes: Vec<DstRoute>,
    summary: RouteTableSummary,
}

impl IntermediateRoutes {
    /// Plans the routes of host `src` on `topo` with `faults`, for a fabric
    /// whose switches have escape virtual networks for `legs` legs. Refuses a
    /// mechanism whose routes could need more legs than that. With M the
    /// switches must run the direction-order escape
    /// ([`crate::routing::adaptive::EscapeOrder::DirectionOrder`]).
    pub fn plan(
        topo: &Topology,
        faults: &FaultSet,
        src: HostId,
        mechanisms: &Mechanisms,
        legs: u8,
    ) -> Result<IntermediateRoutes, IntermediateError> {
        let needed = mechanisms.max_intermediates + 1;
        if needed > legs {
            return Err(IntermediateError::NotEnoughLegs {
                mechanism: mechanisms.to_string(),
                needed,
                legs,
            });
        }
        let planner = RoutePlanner::new(topo, faults)?;
        if src as usize >= topo.num_hosts() {
            return Err(IntermediateError::UnknownHost { host: src });
        }
        let mut summary = RouteTableSummary {
            mechanism: mechanisms.to_string(),
            faulty_links: faults.links.len(),
            ..RouteTableSummary::default()
        };
        let mut routes = Vec::with_capacity(topo.num_hosts());
        for dst in 0..topo.num_hosts() as HostId {
            if dst == src {
                routes.push(DstRoute::Direct);
                continue;
            }
            let r = match planner.choose(src, dst, mechanisms)? {
                RouteChoice::Direct => {
                    summary.direct += 1;
                    DstRoute::Direct
                }
                RouteChoice::Routed(route) => {
                    let mut head = Head::default();
                    route.apply_to_head(&mut head)?;
                    summary.routed += 1;
                    *summary
                        .by_mechanism
                        .entry(route.mechanism().to_string())
                        .or_default() += 1;
                    DstRoute::Routed {
                        intermediates: head.intermediates,
                        n: head.n_intermediates,
                        flags: head.route_flags,
                        runs: head.runs,
                    }
                }
                RouteChoice::NotTolerated => {
                    summary.not_tolerated += 1;
                    DstRoute::Unrouted
                }
                RouteChoice::Disconnected => {
                    summary.disconnected += 1;
                    DstRoute::Unrouted
                }
            };
            routes.push(r);
        }
        Ok(IntermediateRoutes { routes, summary })
    }

    pub fn summary(&self) -> &RouteTableSummary {
        &self.summary
    }

    /// Writes this destination's route into a head the host built (which
    /// carries no route yet: leg 0, no intermediates, no D bits).
    pub fn apply(&self, head: &mut Head) -> Applied {
        match self.routes.get(head.dst as usize) {
            None | Some(DstRoute::Direct) => Applied::Direct,
            Some(DstRoute::Unrouted) => Applied::Unrouted,
            Some(&DstRoute::Routed {
                intermediates,
                n,
                flags,
                runs,
            }) => {
                head.intermediates = intermediates;
                head.n_intermediates = n;
                head.leg = 0;
                head.route_flags = (head.route_flags
                    & !(route_flags::DETERMINISTIC | route_flags::MISROUTE))
                    | flags;
                head.runs = runs;
                Applied::Routed {
                    intermediates: n,
                    deterministic: flags & route_flags::DETERMINISTIC != 0,
                    misrouted: flags & route_flags::MISROUTE != 0,
                }
            }
        }
    }
}

/// The source's half of intermediate nodes, installed by
/// [`HostEndpoint::set_intermediate_routes`]: every head the host builds
/// carries its destination's route.
#[derive(Debug)]
pub struct IntermediateHost {
    routes: Option<IntermediateRoutes>,
    stats: IntermediateStats,
}

impl HostHook for IntermediateHost {
    fn name(&self) -> &'static str {
        super::NAME
    }

    hook_any!();

    fn shape_head(&mut self, head: &mut Head) {
        let Some(routes) = &self.routes else {
            return;
        };
        match routes.apply(head) {
            Applied::Direct => {}
            Applied::Unrouted => self.stats.packets_unrouted += 1,
            Applied::Routed {
                intermediates,
                deterministic,
                misrouted,
            } => {
                self.stats.packets_via_intermediate += (intermediates > 0) as u64;
                self.stats.packets_deterministic += deterministic as u64;
                self.stats.packets_misrouted += misrouted as u64;
            }
        }
    }

    fn begin_run(&mut self) {
        self.stats = IntermediateStats {
            table: self.stats.table.clone(),
            ..IntermediateStats::default()
        };
    }

    fn report(&self, report: &mut HostReport) {
        report.intermediate = self.stats.clone();
    }
}

impl HostEndpoint {
    /// Installs (or, with `None`, removes) the per-destination
    /// intermediate-node routes: every packet whose head is built from now
    /// on carries its destination's route. Packets already partly injected
    /// keep the route their head left with.
    pub fn set_intermediate_routes(&mut self, routes: Option<IntermediateRoutes>) {
        if self.hook::<IntermediateHost>().is_none() {
            self.install_hook(
                crate::mechanism::rank(super::NAME),
                Box::new(IntermediateHost {
                    routes: None,
                    stats: IntermediateStats::default(),
                }),
            );
        }
        let h = self
            .hook_mut::<IntermediateHost>()
            .expect("installed above");
        h.stats.table_updates += 1;
        h.stats.table = routes.as_ref().map(|r| r.summary().clone());
        h.routes = routes;
    }

    /// What the host did with intermediate-node routes (zero until the
    /// controller pushes a fault set).
    pub fn intermediate_stats(&self) -> IntermediateStats {
        self.hook::<IntermediateHost>()
            .map_or_else(IntermediateStats::default, |h| h.stats.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::{direct_port, mesh_or_torus};
    use crate::topology::PortRef;

    #[test]
    fn a_torus_source_routes_only_the_pairs_a_fault_touches() {
        let t = mesh_or_torus(&[3, 3, 3], true).unwrap();
        // Link (0,0,0) -- (1,0,0).
        let l = t.link_at(PortRef::switch(0, direct_port(0, true))).unwrap();
        let f = FaultSet::with_links([l]);
        let r = IntermediateRoutes::plan(&t, &f, 0, &Mechanisms::i(), 2).unwrap();
        let s = r.summary();
        assert_eq!(s.direct + s.routed, 26);
        assert!(s.routed > 0 && s.not_tolerated == 0 && s.disconnected == 0);
        let mut h = Head {
            dst: 1,
            src: 0,
            ..Head::default()
        };
        assert_eq!(
            r.apply(&mut h),
            Applied::Routed {
                intermediates: 1,
                deterministic: false,
                misrouted: false
            }
        );
        // The long way round the X ring: (2,0,0).
        assert_eq!((h.n_intermediates, h.intermediates[0], h.leg), (1, 2, 0));
        // (0,1,0): its one minimal path is Y+, untouched by the fault.
        let mut far = Head {
            dst: 3,
            ..Head::default()
        };
        assert_eq!(r.apply(&mut far), Applied::Direct);
        assert_eq!(far.n_intermediates, 0);
    }

    #[test]
    fn refuses_more_legs_than_the_fabric_has() {
        let t = mesh_or_torus(&[3, 3], false).unwrap();
        let e =
            IntermediateRoutes::plan(&t, &FaultSet::none(), 0, &Mechanisms::i_x(2), 2).unwrap_err();
        assert!(
            matches!(
                e,
                IntermediateError::NotEnoughLegs {
                    needed: 3,
                    legs: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("configure more VCs"));
    }

    #[test]
    fn per_leg_d_bits_reach_the_head() {
        // Mesh, S=(0,0), D=(2,0), link (1,0)-(2,0) dead: I+D finds a route.
        let t = mesh_or_torus(&[3, 3], false).unwrap();
        let l = t.link_at(PortRef::switch(1, direct_port(0, true))).unwrap();
        let f = FaultSet::with_links([l]);
        let r = IntermediateRoutes::plan(&t, &f, 0, &Mechanisms::i_d(), 2).unwrap();
        let mut h = Head {
            dst: 2,
            ..Head::default()
        };
        let applied = r.apply(&mut h);
        assert!(
            matches!(
                applied,
                Applied::Routed {
                    deterministic: true,
                    ..
                }
            ),
            "{applied:?} {:?}",
            r.summary()
        );
        assert_ne!(h.route_flags & route_flags::DETERMINISTIC, 0);
    }
}
