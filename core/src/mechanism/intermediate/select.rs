//! Route selection for one (source, destination) pair (seed 004 §3.3–§3.8):
//! which intermediate node(s), which legs deterministic, which misrouted.
//!
//! The search is the "hop-bounded shortest path in the safe-leg graph" of
//! §3.4, generalised to the leg-type menu of §3.7: iterative deepening on the
//! total length (so the first length with any safe route is the shortest,
//! Theorems 1 and 2), and among routes of that length the §3.8 order —
//! mechanism rank (`{I} < {I×2} < … < {D} < {I,D} < {M} < …`), then lowest
//! intermediate ids.

use super::cube::{Cube, DetOrder, Run, MAX_RUNS, MAX_RUN_HOPS};
use super::legs::{
    best_leg, shortest_leg, GeometricSafety, Leg, LegKind, LegSafety, Mechanisms, Route,
    RouteChoice,
};
use super::IntermediateError;
use crate::flit::{pack_run, route_flags, Head, MAX_INTERMEDIATES, MAX_LEGS};
use crate::topology::{FaultSet, HostId, NodeRef, Topology};
use std::collections::HashMap;

/// A leg found during the search, in node numbers.
#[derive(Clone, Debug)]
pub struct PlannedLeg {
    pub target: u32,
    pub kind: LegKind,
    pub prefix: Vec<Run>,
    pub hops: u32,
}

/// The best route so far: its §3.8 rank, intermediate nodes and legs.
struct Candidate {
    rank: (u8, u8),
    ins: Vec<u32>,
    legs: Vec<PlannedLeg>,
}

/// Shortest safe leg length per (leg kind, u, v) under one fault set,
/// filled on demand. One cache serves every pair and mechanism set routed
/// under the same faults, so misroute prefixes are searched once per leg.
pub struct LegCache {
    n: usize,
    /// `KINDS × n × n` entries for small networks, else empty.
    dense: Vec<u32>,
    sparse: HashMap<(u8, u32, u32), u32>,
}

const UNKNOWN: u32 = u32::MAX;
const UNSAFE: u32 = u32::MAX - 1;
const KINDS: usize = 6;

fn kind_slot(k: LegKind) -> u8 {
    match k {
        LegKind::Adaptive => 0,
        LegKind::Deterministic(DetOrder::Dor) => 1,
        LegKind::Deterministic(DetOrder::DirectionOrder) => 2,
        LegKind::MisrouteAdaptive => 3,
        LegKind::MisrouteDeterministic(DetOrder::Dor) => 4,
        LegKind::MisrouteDeterministic(DetOrder::DirectionOrder) => 5,
    }
}

impl LegCache {
    pub fn new(nodes: usize) -> Self {
        let dense = if nodes <= 64 {
            vec![UNKNOWN; KINDS * nodes * nodes]
        } else {
            Vec::new()
        };
        LegCache {
            n: nodes,
            dense,
            sparse: HashMap::new(),
        }
    }

    /// Forgets everything (the fault set changed).
    pub fn reset(&mut self) {
        self.dense.fill(UNKNOWN);
        self.sparse.clear();
    }

    fn len<S: LegSafety>(&mut self, s: &S, kind: LegKind, u: u32, v: u32) -> Option<u32> {
        let slot = kind_slot(kind);
        let cached = if self.dense.is_empty() {
            *self.sparse.get(&(slot, u, v)).unwrap_or(&UNKNOWN)
        } else {
            self.dense[(slot as usize * self.n + u as usize) * self.n + v as usize]
        };
        let value = if cached == UNKNOWN {
            let v_len = shortest_leg(s, kind, u, v).unwrap_or(UNSAFE);
            if self.dense.is_empty() {
                self.sparse.insert((slot, u, v), v_len);
            } else {
                self.dense[(slot as usize * self.n + u as usize) * self.n + v as usize] = v_len;
            }
            v_len
        } else {
            cached
        };
        (value != UNSAFE).then_some(value)
    }
}

struct Search<'a, S: LegSafety> {
    safety: &'a S,
    cache: &'a mut LegCache,
    kinds: Vec<LegKind>,
    src: u32,
    dst: u32,
    max_ins: usize,
    best: Option<Candidate>,
}

impl<S: LegSafety> Search<'_, S> {
    fn consider(&mut self, legs: &[PlannedLeg]) {
        let ins: Vec<u32> = legs[..legs.len() - 1].iter().map(|l| l.target).collect();
        let rank = super::legs::MechanismUse {
            intermediates: ins.len() as u8,
            deterministic: legs.iter().any(|l| l.kind.deterministic()),
            misroute: legs.iter().any(|l| l.kind.misrouted()),
        }
        .rank();
        let better = match &self.best {
            None => true,
            Some(b) => (rank, &ins) < (b.rank, &b.ins),
        };
        if better {
            self.best = Some(Candidate {
                rank,
                ins,
                legs: legs.to_vec(),
            });
        }
    }

    /// Every route from `cur` whose total length is exactly `budget`
    /// (shorter ones were ruled out by the previous budgets).
    fn extend(&mut self, cur: u32, legs: &mut Vec<PlannedLeg>, used: u32, budget: u32) {
        let cube = self.safety.cube();
        for ki in 0..self.kinds.len() {
            let k = self.kinds[ki];
            if let Some(hops) = self.cache.len(self.safety, k, cur, self.dst) {
                if used + hops == budget {
                    legs.push(PlannedLeg {
                        target: self.dst,
                        kind: k,
                        prefix: Vec::new(),
                        hops,
                    });
                    self.consider(legs);
                    legs.pop();
                }
            }
        }
        if legs.len() >= self.max_ins {
            return;
        }
        for i in 0..cube.num_nodes() as u32 {
            if i == self.src || i == self.dst || legs.iter().any(|l| l.target == i) {
                continue;
            }
            let rest = cube.dist(i, self.dst);
            if used + cube.dist(cur, i) + rest > budget {
                continue;
            }
            for ki in 0..self.kinds.len() {
                let k = self.kinds[ki];
                if let Some(hops) = self.cache.len(self.safety, k, cur, i) {
                    if used + hops + rest <= budget {
                        legs.push(PlannedLeg {
                            target: i,
                            kind: k,
                            prefix: Vec::new(),
                            hops,
                        });
                        self.extend(i, legs, used + hops, budget);
                        legs.pop();
                    }
                }
            }
        }
    }
}

/// Longest possible leg: a full misroute prefix plus a diameter.
fn max_leg_hops(cube: &Cube, misroute: bool) -> u32 {
    let diameter: u32 = cube
        .dims()
        .iter()
        .map(|&k| if cube.is_torus() { k / 2 } else { k - 1 })
        .sum();
    let prefix = if misroute {
        let mut runs: Vec<u32> = cube
            .dims()
            .iter()
            .map(|&k| MAX_RUN_HOPS.min(k - 1))
            .collect();
        runs.sort_unstable_by(|a, b| b.cmp(a));
        runs.iter().take(MAX_RUNS).sum()
    } else {
        0
    };
    diameter + prefix
}

/// The §3.8-best safe route from `src` to `dst` with `mech`, or `None` when
/// no allowed route avoids the faults. Does not test connectivity.
pub fn best_route<S: LegSafety>(
    safety: &S,
    cache: &mut LegCache,
    src: u32,
    dst: u32,
    mech: &Mechanisms,
) -> Option<Vec<PlannedLeg>> {
    let cube = safety.cube();
    let base = cube.dist(src, dst);
    let max_ins = mech.max_intermediates as usize;
    let limit = (max_ins as u32 + 1) * max_leg_hops(cube, mech.misroute);
    let mut search = Search {
        safety,
        cache,
        kinds: mech.leg_kinds(),
        src,
        dst,
        max_ins,
        best: None,
    };
    for budget in base..=limit.max(base) {
        search.extend(src, &mut Vec::new(), 0, budget);
        if let Some(best) = search.best.take() {
            return Some(best.legs);
        }
    }
    None
}

/// Fills in the forced prefixes of a route found by [`best_route`].
fn with_prefixes<S: LegSafety>(safety: &S, src: u32, legs: Vec<PlannedLeg>) -> Vec<PlannedLeg> {
    let mut from = src;
    legs.into_iter()
        .map(|mut l| {
            if l.kind.misrouted() {
                let (hops, prefix) = best_leg(safety, l.kind, from, l.target, l.hops)
                    .expect("the leg was found safe at this length");
                debug_assert_eq!(hops, l.hops);
                l.prefix = prefix;
            }
            from = l.target;
            l
        })
        .collect()
}

/// Route planning for one fault set: build once, then ask for any pair.
pub struct RoutePlanner {
    cube: Cube,
    faulty_links: Vec<u32>,
    /// Connected component of each router over alive links.
    component: Vec<u32>,
    /// Hosts cut off by a failed host link or a failed router.
    dead_hosts: Vec<bool>,
}

impl RoutePlanner {
    /// Reads the mesh/torus and the faults. A failed switch counts as all of
    /// its links failed (§2 "Links and faults"); a failed host link or switch
    /// disconnects the hosts behind it.
    pub fn new(topo: &Topology, faults: &FaultSet) -> Result<RoutePlanner, IntermediateError> {
        let cube = Cube::from_topology(topo)?;
        if let Some(&bad) = faults
            .links
            .iter()
            .find(|&&l| l as usize >= topo.links.len())
        {
            return Err(IntermediateError::UnknownLink { link: bad });
        }
        if let Some(&bad) = faults
            .switches
            .iter()
            .find(|&&s| s as usize >= topo.switches.len())
        {
            return Err(IntermediateError::UnknownSwitch { switch: bad });
        }
        let mut dead_hosts = vec![false; topo.hosts.len()];
        let mut faulty_links = Vec::new();
        for (i, _) in topo.links.iter().enumerate() {
            let alive = faults.link_alive(topo, i as u32);
            match cube.compact_link(i as u32) {
                Some(c) if !alive => faulty_links.push(c),
                Some(_) => {}
                None if !alive => {
                    let l = &topo.links[i];
                    for end in [l.a.node, l.b.node] {
                        if let NodeRef::Host(h) = end {
                            dead_hosts[h as usize] = true;
                        }
                    }
                }
                None => {}
            }
        }
        for h in 0..topo.hosts.len() as HostId {
            let node = cube.node_of_host(h).expect("host attached");
            if faults.switches.contains(&node) {
                dead_hosts[h as usize] = true;
            }
        }
        let component = components(&cube, &faulty_links);
        Ok(RoutePlanner {
            cube,
            faulty_links,
            component,
            dead_hosts,
        })
    }

    pub fn cube(&self) -> &Cube {
        &self.cube
    }

    /// Chooses the route a source host puts in the head for `dst` (§3.8).
    pub fn choose(
        &self,
        src: HostId,
        dst: HostId,
        mech: &Mechanisms,
    ) -> Result<RouteChoice, IntermediateError> {
        if mech.max_intermediates as usize > MAX_INTERMEDIATES {
            return Err(IntermediateError::TooManyIntermediates {
                requested: mech.max_intermediates,
                max: MAX_INTERMEDIATES,
            });
        }
        let node = |h: HostId| {
            self.cube
                .node_of_host(h)
                .ok_or(IntermediateError::UnknownHost { host: h })
        };
        let (s, d) = (node(src)?, node(dst)?);
        if self.dead_hosts[src as usize] || self.dead_hosts[dst as usize] {
            return Ok(RouteChoice::Disconnected);
        }
        let safety = GeometricSafety::new(&self.cube, self.faulty_links.iter().copied());
        if safety.adaptive_ok(s, d) {
            return Ok(RouteChoice::Direct);
        }
        if self.component[s as usize] != self.component[d as usize] {
            return Ok(RouteChoice::Disconnected);
        }
        let mut cache = LegCache::new(self.cube.num_nodes());
        Ok(match best_route(&safety, &mut cache, s, d, mech) {
            None => RouteChoice::NotTolerated,
            Some(legs) => {
                let legs = with_prefixes(&safety, s, legs);
                let last = legs.len() - 1;
                RouteChoice::Routed(Route {
                    legs: legs
                        .into_iter()
                        .enumerate()
                        .map(|(i, l)| Leg {
                            // The last leg ends at the destination host itself.
                            target: if i == last {
                                dst
                            } else {
                                self.cube.host_of_node(l.target)
                            },
                            kind: l.kind,
                            prefix: l.prefix,
                            hops: l.hops,
                        })
                        .collect(),
                })
            }
        })
    }
}

/// Connected components of the routers over alive links (union-find).
pub fn components(cube: &Cube, faulty: &[u32]) -> Vec<u32> {
    let mut parent: Vec<u32> = (0..cube.num_nodes() as u32).collect();
    fn find(p: &mut [u32], mut x: u32) -> u32 {
        while p[x as usize] != x {
            p[x as usize] = p[p[x as usize] as usize];
            x = p[x as usize];
        }
        x
    }
    let mut dead = vec![false; cube.num_links()];
    for &l in faulty {
        dead[l as usize] = true;
    }
    for c in 0..cube.num_links() as u32 {
        if !dead[c as usize] {
            let l = cube.link(c);
            let (a, b) = (find(&mut parent, l.a), find(&mut parent, l.b));
            parent[a as usize] = b;
        }
    }
    (0..cube.num_nodes() as u32)
        .map(|x| find(&mut parent, x))
        .collect()
}

/// One-shot convenience: [`RoutePlanner::new`] then [`RoutePlanner::choose`].
/// Hosts computing a whole table should keep a planner instead.
pub fn choose_route(
    topo: &Topology,
    faults: &FaultSet,
    src: HostId,
    dst: HostId,
    mechanisms: &Mechanisms,
) -> Result<RouteChoice, IntermediateError> {
    RoutePlanner::new(topo, faults)?.choose(src, dst, mechanisms)
}

impl Route {
    /// Fills the intermediate-node fields of `head` (§3.2, §3.10): the
    /// intermediates, leg 0, the per-leg D bits
    /// ([`route_flags::deterministic_leg`]) and, for M, each leg's forced
    /// runs ([`Head::runs`], with [`route_flags::MISROUTE`]).
    pub fn apply_to_head(&self, head: &mut Head) -> Result<(), IntermediateError> {
        let ins = self.intermediates();
        if ins.len() > MAX_INTERMEDIATES {
            return Err(IntermediateError::TooManyIntermediates {
                requested: ins.len() as u8,
                max: MAX_INTERMEDIATES,
            });
        }
        if self.legs.iter().any(|l| {
            l.prefix.len() > MAX_RUNS
                || l.prefix
                    .iter()
                    .any(|r| r.hops == 0 || r.hops as u32 > MAX_RUN_HOPS || r.dir.0 > 5)
        }) {
            return Err(IntermediateError::HeadCannotCarry {
                what: "more than 3 runs, or runs longer than 8 hops, on a leg",
            });
        }
        head.intermediates = [0; MAX_INTERMEDIATES];
        head.intermediates[..ins.len()].copy_from_slice(&ins);
        head.n_intermediates = ins.len() as u8;
        head.leg = 0;
        head.route_flags &= !(route_flags::DETERMINISTIC | route_flags::MISROUTE);
        head.runs = [[0; MAX_RUNS]; MAX_LEGS];
        for (i, l) in self.legs.iter().enumerate() {
            if l.kind.deterministic() {
                head.route_flags |= route_flags::deterministic_leg(i as u8);
            }
            for (slot, r) in l.prefix.iter().enumerate() {
                head.runs[i][slot] = pack_run(r.dir.0, r.hops);
                head.route_flags |= route_flags::MISROUTE;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::mesh_or_torus;
    use crate::topology::LinkId;

    fn torus() -> Topology {
        mesh_or_torus(&[3, 3, 3], true).unwrap()
    }

    /// Topology link id of the switch link from router `a` in direction `dir`.
    fn link_from(topo: &Topology, a: u32, d: usize, positive: bool) -> LinkId {
        let p = crate::topology::PortRef::switch(
            a,
            crate::topology::generators::direct_port(d, positive),
        );
        topo.link_at(p).unwrap()
    }

    #[test]
    fn fault_free_pairs_route_directly() {
        let t = torus();
        let r = choose_route(&t, &FaultSet::none(), 0, 26, &Mechanisms::i()).unwrap();
        assert_eq!(r, RouteChoice::Direct);
    }

    #[test]
    fn the_endpoints_of_a_dead_link_go_round_the_ring_through_an_in() {
        // §6.2 "Single fault": (u,v) itself needs j = 1, the long way round.
        let t = torus();
        let f = FaultSet::with_links([link_from(&t, 0, 0, true)]);
        let RouteChoice::Routed(r) = choose_route(&t, &f, 0, 1, &Mechanisms::i()).unwrap() else {
            panic!("I tolerates one fault")
        };
        assert_eq!(r.hops(), 2);
        assert_eq!(r.intermediates(), vec![2]);
        assert_eq!(r.legs.len(), 2);
        assert!(r.legs.iter().all(|l| l.kind == LegKind::Adaptive));
        assert_eq!(r.legs[1].target, 1);
    }

    #[test]
    fn d_is_preferred_over_m_at_equal_length() {
        // §3.8 as observed in Table 3: with D+M a pair whose direction-order
        // path avoids the fault uses D, although a 2-hop misroute exists too.
        let t = torus();
        let f = FaultSet::with_links([link_from(&t, 0, 0, true)]);
        // (0,1,0) → (1,0,0): Y− then X+ crosses the dead link; direction
        // order goes X+ first and avoids it, and so does the prefix X+1.
        let choice = |m: Mechanisms| match choose_route(&t, &f, 3, 1, &m).unwrap() {
            RouteChoice::Routed(r) => (r.hops(), r.mechanism().to_string()),
            other => panic!("{other:?}"),
        };
        assert_eq!(choice(Mechanisms::d_m()), (2, "D".to_string()));
        assert_eq!(choice(Mechanisms::m()), (2, "M".to_string()));
        // An all-adaptive IN at equal length, (1,1,0), beats direct D (§3.8).
        assert_eq!(choice(Mechanisms::i_d_m()), (2, "I".to_string()));
    }

    #[test]
    fn d_alone_fails_on_the_dor_path() {
        let t = torus();
        let f = FaultSet::with_links([link_from(&t, 0, 0, true)]);
        assert_eq!(
            choose_route(&t, &f, 0, 1, &Mechanisms::d()).unwrap(),
            RouteChoice::NotTolerated
        );
    }

    #[test]
    fn a_cut_off_router_is_disconnected_not_intolerable() {
        let t = torus();
        let f = FaultSet::with_links(
            (0..3).flat_map(|d| [true, false].map(|p| link_from(&t, 0, d, p))),
        );
        assert_eq!(
            choose_route(&t, &f, 5, 0, &Mechanisms::i()).unwrap(),
            RouteChoice::Disconnected
        );
        let f = FaultSet {
            switches: [13].into(),
            ..FaultSet::none()
        };
        assert_eq!(
            choose_route(&t, &f, 13, 0, &Mechanisms::i()).unwrap(),
            RouteChoice::Disconnected
        );
    }

    #[test]
    fn mesh_needs_two_ins_around_a_blocked_straight_line() {
        // §3.3 "Mesh limit": S=(0,0), D=(2,0), link (1,0)-(2,0) dead: no
        // single adaptive IN, but I1=(0,1), I2=(2,1) works.
        let t = mesh_or_torus(&[3, 3], false).unwrap();
        let f = FaultSet::with_links([link_from(&t, 1, 0, true)]);
        assert_eq!(
            choose_route(&t, &f, 0, 2, &Mechanisms::i()).unwrap(),
            RouteChoice::NotTolerated
        );
        let RouteChoice::Routed(r) = choose_route(&t, &f, 0, 2, &Mechanisms::i_x(2)).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.hops(), 4);
        assert_eq!(r.intermediates(), vec![3, 5]);
    }

    #[test]
    fn routes_fill_the_head_or_say_why_not() {
        let t = torus();
        let f = FaultSet::with_links([link_from(&t, 0, 0, true)]);
        let RouteChoice::Routed(r) = choose_route(&t, &f, 0, 1, &Mechanisms::i()).unwrap() else {
            panic!()
        };
        let mut head = Head::default();
        r.apply_to_head(&mut head).unwrap();
        assert_eq!((head.n_intermediates, head.intermediates[0]), (1, 2));
        // D on one leg only: that leg's bit.
        let d_leg = Route {
            legs: vec![
                Leg {
                    target: 2,
                    kind: LegKind::Adaptive,
                    prefix: vec![],
                    hops: 1,
                },
                Leg {
                    target: 1,
                    kind: LegKind::Deterministic(crate::mechanism::intermediate::DetOrder::Dor),
                    prefix: vec![],
                    hops: 1,
                },
            ],
        };
        d_leg.apply_to_head(&mut head).unwrap();
        assert_eq!(head.route_flags, route_flags::deterministic_leg(1));
        assert!(route_flags::is_deterministic(head.route_flags, 1));
        assert!(!route_flags::is_deterministic(head.route_flags, 0));
        let RouteChoice::Routed(r) = choose_route(&t, &f, 0, 1, &Mechanisms::m()).unwrap() else {
            panic!()
        };
        // M: the forced runs go into the head, packed, with the M flag.
        r.apply_to_head(&mut head).unwrap();
        assert_ne!(head.route_flags & route_flags::MISROUTE, 0);
        let run = r.legs[0].prefix[0];
        assert_eq!(head.runs[0][0], pack_run(run.dir.0, run.hops));
        assert_eq!(head.pending_run(), Some((0, run.dir.0)));
    }

    #[test]
    fn bad_input_is_an_error() {
        let t = torus();
        assert!(matches!(
            choose_route(&t, &FaultSet::none(), 0, 99, &Mechanisms::i()),
            Err(IntermediateError::UnknownHost { host: 99 })
        ));
        assert!(matches!(
            choose_route(&t, &FaultSet::with_links([999]), 0, 1, &Mechanisms::i()),
            Err(IntermediateError::UnknownLink { link: 999 })
        ));
        assert!(matches!(
            choose_route(&t, &FaultSet::none(), 0, 1, &Mechanisms::i_x(4)),
            Err(IntermediateError::TooManyIntermediates { .. })
        ));
    }
}
