//! Mechanism sets, leg types and routes (seed 004 §3.7 "leg-type menu"), and
//! the per-leg safety predicates under a set of link faults.

use super::cube::{Cube, DetOrder, Run};
use crate::topology::HostId;
use serde::Serialize;
use std::fmt;

/// Which fault-tolerance mechanisms a route may use (seed 004 Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Mechanisms {
    /// Up to this many intermediate nodes (I = 1, I×2 = 2, I×3 = 3).
    pub max_intermediates: u8,
    /// D: a leg may be routed by the deterministic function only.
    pub disable_adaptivity: bool,
    /// M: a leg may start with a forced misroute prefix.
    pub misroute: bool,
    /// The deterministic function D uses: DOR for D, I+D, I×2+D; direction
    /// order for D+M, I+D+M (§3.5 [verified]).
    pub det_order: DetOrder,
}

impl Mechanisms {
    /// A mechanism set with the deterministic function the paper used for it
    /// (§3.5): direction order whenever misrouting is on, DOR otherwise.
    pub fn new(max_intermediates: u8, disable_adaptivity: bool, misroute: bool) -> Self {
        Mechanisms {
            max_intermediates,
            disable_adaptivity,
            misroute,
            det_order: if misroute {
                DetOrder::DirectionOrder
            } else {
                DetOrder::Dor
            },
        }
    }
    pub const fn d() -> Self {
        Self::fixed(0, true, false, DetOrder::Dor)
    }
    pub const fn i() -> Self {
        Self::fixed(1, false, false, DetOrder::Dor)
    }
    pub const fn m() -> Self {
        Self::fixed(0, false, true, DetOrder::DirectionOrder)
    }
    pub const fn d_m() -> Self {
        Self::fixed(0, true, true, DetOrder::DirectionOrder)
    }
    pub const fn i_d() -> Self {
        Self::fixed(1, true, false, DetOrder::Dor)
    }
    pub const fn i_m() -> Self {
        Self::fixed(1, false, true, DetOrder::DirectionOrder)
    }
    pub const fn i_d_m() -> Self {
        Self::fixed(1, true, true, DetOrder::DirectionOrder)
    }
    pub const fn i_x(n: u8) -> Self {
        Self::fixed(n, false, false, DetOrder::Dor)
    }
    pub const fn i_x2_d() -> Self {
        Self::fixed(2, true, false, DetOrder::Dor)
    }
    const fn fixed(max_intermediates: u8, d: bool, m: bool, det_order: DetOrder) -> Self {
        Mechanisms {
            max_intermediates,
            disable_adaptivity: d,
            misroute: m,
            det_order,
        }
    }

    /// The ten columns of Table 2, in the paper's order.
    pub fn table2_columns() -> Vec<Mechanisms> {
        vec![
            Self::d(),
            Self::i(),
            Self::m(),
            Self::d_m(),
            Self::i_d(),
            Self::i_m(),
            Self::i_d_m(),
            Self::i_x(2),
            Self::i_x(3),
            Self::i_x2_d(),
        ]
    }

    /// Parses a registry variant name (`i`, `i-d`, `ix2`, `d-m`, …, the
    /// spelling of the command line, YAML and reports) or a Table 2 column
    /// label as the paper prints it ("I", "I+D", "I×2", "Ix2+D", "D+M", …).
    pub fn parse(label: &str) -> Option<Mechanisms> {
        if let Some(m) = crate::mechanism::parse(label).and_then(Mechanisms::of_variant) {
            return Some(m);
        }
        let norm = label.replace(['×', 'x', 'X'], "*").to_ascii_uppercase();
        let (mut ins, mut d, mut m) = (0u8, false, false);
        for part in norm.split('+').map(str::trim) {
            match part {
                "I" => ins = ins.max(1),
                "D" => d = true,
                "M" => m = true,
                p if p.starts_with("I*") => {
                    ins = p[2..].parse().ok().filter(|n| (1..=3).contains(n))?
                }
                _ => return None,
            }
        }
        Some(Mechanisms::new(ins, d, m))
    }

    /// Leg types this set allows (§3.7).
    pub fn leg_kinds(&self) -> Vec<LegKind> {
        let mut kinds = vec![LegKind::Adaptive];
        if self.disable_adaptivity {
            kinds.push(LegKind::Deterministic(self.det_order));
        }
        if self.misroute {
            kinds.push(LegKind::MisrouteAdaptive);
            if self.disable_adaptivity {
                kinds.push(LegKind::MisrouteDeterministic(self.det_order));
            }
        }
        kinds
    }

    /// True when every route this set allows is also allowed by `other`.
    pub fn is_subset_of(&self, other: &Mechanisms) -> bool {
        let theirs = other.leg_kinds();
        self.max_intermediates <= other.max_intermediates
            && self.leg_kinds().iter().all(|k| theirs.contains(k))
    }
}

impl fmt::Display for Mechanisms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match self.max_intermediates {
            0 => {}
            1 => parts.push("I".to_string()),
            n => parts.push(format!("I×{n}")),
        }
        if self.disable_adaptivity {
            parts.push("D".into());
        }
        if self.misroute {
            parts.push("M".into());
        }
        if parts.is_empty() {
            parts.push("none".into());
        }
        write!(f, "{}", parts.join("+"))?;
        let default = Mechanisms::new(
            self.max_intermediates,
            self.disable_adaptivity,
            self.misroute,
        );
        if self.disable_adaptivity && self.det_order != default.det_order {
            write!(f, "({:?})", self.det_order)?;
        }
        Ok(())
    }
}

/// How one leg is routed (§3.7 table: A, Dd/Do, MA, MDo).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum LegKind {
    /// Fully adaptive minimal routing (Duato).
    Adaptive,
    /// Only the deterministic function's port (the D bit).
    Deterministic(DetOrder),
    /// A forced prefix, then adaptive.
    MisrouteAdaptive,
    /// A forced prefix, then deterministic.
    MisrouteDeterministic(DetOrder),
}

impl LegKind {
    pub fn deterministic(self) -> bool {
        matches!(
            self,
            LegKind::Deterministic(_) | LegKind::MisrouteDeterministic(_)
        )
    }
    pub fn misrouted(self) -> bool {
        matches!(
            self,
            LegKind::MisrouteAdaptive | LegKind::MisrouteDeterministic(_)
        )
    }
}

/// One leg of a route: from the previous target to `target`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Leg {
    /// Host whose router ends this leg (an intermediate node or the destination).
    pub target: HostId,
    pub kind: LegKind,
    /// Forced runs at the start of the leg (empty unless `kind.misrouted()`).
    pub prefix: Vec<Run>,
    /// Hops of this leg (prefix plus minimal remainder).
    pub hops: u32,
}

/// Which mechanisms a route actually uses — Table 3's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct MechanismUse {
    pub intermediates: u8,
    pub deterministic: bool,
    pub misroute: bool,
}

impl MechanismUse {
    /// §3.8's preference at equal length:
    /// `{} < {I} < {I×2} < {I×3} < {D} < {I,D} < {M} < {I,M} < {D,M} < {I,D,M}`.
    pub fn rank(&self) -> (u8, u8) {
        let flags = match (self.deterministic, self.misroute) {
            (false, false) => 0,
            (true, false) => 1,
            (false, true) => 2,
            (true, true) => 3,
        };
        (flags, self.intermediates)
    }
}

impl PartialOrd for MechanismUse {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for MechanismUse {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl fmt::Display for MechanismUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match self.intermediates {
            0 => {}
            1 => parts.push("I".to_string()),
            n => parts.push(format!("I×{n}")),
        }
        if self.deterministic {
            parts.push("D".into());
        }
        if self.misroute {
            parts.push("M".into());
        }
        if parts.is_empty() {
            parts.push("direct".into());
        }
        write!(f, "{}", parts.join("+"))
    }
}

/// A complete route: one leg per intermediate node plus the last leg.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Route {
    pub legs: Vec<Leg>,
}

impl Route {
    pub fn hops(&self) -> u32 {
        self.legs.iter().map(|l| l.hops).sum()
    }
    /// Intermediate hosts, in order (every leg target but the last).
    pub fn intermediates(&self) -> Vec<HostId> {
        self.legs[..self.legs.len() - 1]
            .iter()
            .map(|l| l.target)
            .collect()
    }
    pub fn mechanism(&self) -> MechanismUse {
        MechanismUse {
            intermediates: (self.legs.len() - 1) as u8,
            deterministic: self.legs.iter().any(|l| l.kind.deterministic()),
            misroute: self.legs.iter().any(|l| l.kind.misrouted()),
        }
    }
}

/// What `choose_route` decides for one (source, destination) pair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum RouteChoice {
    /// No fault on any minimal path: plain adaptive routing, no extra header.
    Direct,
    /// The best safe route (§3.8 order); its legs say what goes in the head.
    Routed(Route),
    /// The faults disconnect the pair; the paper excludes such pairs (§4).
    Disconnected,
    /// Connected, but no route the mechanisms allow avoids every fault.
    NotTolerated,
}

/// Leg safety under one fault set: the predicates §3.7's table is built on.
/// Implemented geometrically (any size, [`GeometricSafety`]) and with
/// precomputed masks (the fast analysis).
pub trait LegSafety {
    fn cube(&self) -> &Cube;
    fn link_ok(&self, link: u32) -> bool;
    /// `reachA`: no fault on any minimal path from a to b.
    fn adaptive_ok(&self, a: u32, b: u32) -> bool;
    /// The deterministic path from a to b avoids every fault.
    fn det_ok(&self, order: DetOrder, a: u32, b: u32) -> bool;
    /// Shortest safe misroute leg (remainder deterministic with `det`, else
    /// adaptive) when the implementation knows a faster way than walking
    /// the prefixes; `None` means "use the generic search".
    fn shortest_misroute(&self, _det: Option<DetOrder>, _u: u32, _v: u32) -> Option<Option<u32>> {
        None
    }
}

/// [`LegSafety`] computed from the coordinates: O(|F|) per adaptive check.
pub struct GeometricSafety<'a> {
    pub cube: &'a Cube,
    pub faulty: Vec<bool>,
    pub fault_list: Vec<u32>,
}

impl<'a> GeometricSafety<'a> {
    pub fn new(cube: &'a Cube, faulty_links: impl IntoIterator<Item = u32>) -> Self {
        let mut faulty = vec![false; cube.num_links()];
        let mut fault_list = Vec::new();
        for l in faulty_links {
            if !faulty[l as usize] {
                faulty[l as usize] = true;
                fault_list.push(l);
            }
        }
        GeometricSafety {
            cube,
            faulty,
            fault_list,
        }
    }
}

impl LegSafety for GeometricSafety<'_> {
    fn cube(&self) -> &Cube {
        self.cube
    }
    fn link_ok(&self, link: u32) -> bool {
        !self.faulty[link as usize]
    }
    fn adaptive_ok(&self, a: u32, b: u32) -> bool {
        self.fault_list
            .iter()
            .all(|&l| !self.cube.link_on_minimal_path(l, a, b))
    }
    fn det_ok(&self, order: DetOrder, a: u32, b: u32) -> bool {
        self.cube
            .walk_det(order, a, b, |l| !self.faulty[l as usize])
    }
}

/// Length of the shortest safe leg of `kind` from `u` to `v`, if any.
pub fn shortest_leg<S: LegSafety>(s: &S, kind: LegKind, u: u32, v: u32) -> Option<u32> {
    let cube = s.cube();
    match kind {
        LegKind::Adaptive => s.adaptive_ok(u, v).then(|| cube.dist(u, v)),
        LegKind::Deterministic(o) => s.det_ok(o, u, v).then(|| cube.dist(u, v)),
        LegKind::MisrouteAdaptive | LegKind::MisrouteDeterministic(_) => {
            let det = match kind {
                LegKind::MisrouteDeterministic(o) => Some(o),
                _ => None,
            };
            if let Some(known) = s.shortest_misroute(det, u, v) {
                return known;
            }
            let best = std::cell::Cell::new(u32::MAX);
            // Only strictly shorter legs are of interest once one is known.
            let keep = |node: u32, len: u32| len + cube.dist(node, v) < best.get();
            cube.for_each_prefix(u, &|l| s.link_ok(l), &keep, &mut |runs, end, plen, _| {
                let len = plen + cube.dist(end, v);
                if len >= best.get() {
                    return;
                }
                let last = runs.last().expect("prefixes have a run").dir;
                if !cube.remainder_in_order(end, v, last) {
                    return;
                }
                let ok = match kind {
                    LegKind::MisrouteDeterministic(o) => s.det_ok(o, end, v),
                    _ => s.adaptive_ok(end, v),
                };
                if ok {
                    best.set(len);
                }
            });
            (best.get() != u32::MAX).then(|| best.get())
        }
    }
}

/// The best leg of `kind` from `u` to `v`: its length and forced prefix.
/// Misrouted legs take the shortest safe prefix + remainder (first found on
/// ties); `bound` prunes candidates longer than an already-known answer.
pub fn best_leg<S: LegSafety>(
    s: &S,
    kind: LegKind,
    u: u32,
    v: u32,
    bound: u32,
) -> Option<(u32, Vec<Run>)> {
    let cube = s.cube();
    match kind {
        LegKind::Adaptive => s.adaptive_ok(u, v).then(|| (cube.dist(u, v), Vec::new())),
        LegKind::Deterministic(o) => s.det_ok(o, u, v).then(|| (cube.dist(u, v), Vec::new())),
        LegKind::MisrouteAdaptive | LegKind::MisrouteDeterministic(_) => {
            let mut best: Option<(u32, Vec<Run>)> = None;
            let keep = |node: u32, len: u32| len + cube.dist(node, v) <= bound;
            cube.for_each_prefix(u, &|l| s.link_ok(l), &keep, &mut |runs, end, plen, _| {
                let len = plen + cube.dist(end, v);
                if len > bound || best.as_ref().is_some_and(|(b, _)| *b <= len) {
                    return;
                }
                let last = runs.last().expect("prefixes have a run").dir;
                if !cube.remainder_in_order(end, v, last) {
                    return;
                }
                let ok = match kind {
                    LegKind::MisrouteDeterministic(o) => s.det_ok(o, end, v),
                    _ => s.adaptive_ok(end, v),
                };
                if ok {
                    best = Some((len, runs.to_vec()));
                }
            });
            best
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip() {
        for m in Mechanisms::table2_columns() {
            assert_eq!(Mechanisms::parse(&m.to_string()), Some(m), "{m}");
        }
        assert_eq!(Mechanisms::parse("Ix2+D"), Some(Mechanisms::i_x2_d()));
        assert_eq!(Mechanisms::parse("I+Q"), None);
        assert_eq!(Mechanisms::parse("I×9"), None);
    }

    #[test]
    fn every_table2_column_is_a_registry_variant_under_its_one_spelling() {
        for m in Mechanisms::table2_columns() {
            let v = m
                .variant()
                .unwrap_or_else(|| panic!("{m} has no registry variant"));
            assert_eq!(Mechanisms::parse(v.name), Some(m), "{}", v.name);
        }
        assert_eq!(Mechanisms::parse("i-d"), Some(Mechanisms::i_d()));
        assert_eq!(Mechanisms::parse("ix2-d"), Some(Mechanisms::i_x2_d()));
        assert_eq!(Mechanisms::parse("i-d-m"), Some(Mechanisms::i_d_m()));
    }

    #[test]
    fn leg_menus_follow_section_3_7() {
        use LegKind::*;
        assert_eq!(
            Mechanisms::d_m().leg_kinds(),
            vec![
                Adaptive,
                Deterministic(DetOrder::DirectionOrder),
                MisrouteAdaptive,
                MisrouteDeterministic(DetOrder::DirectionOrder)
            ]
        );
        assert_eq!(
            Mechanisms::i_d().leg_kinds(),
            vec![Adaptive, Deterministic(DetOrder::Dor)]
        );
        assert!(Mechanisms::i().is_subset_of(&Mechanisms::i_d()));
        assert!(Mechanisms::i_x(2).is_subset_of(&Mechanisms::i_x2_d()));
        assert!(
            !Mechanisms::i_d().is_subset_of(&Mechanisms::i_d_m()),
            "DOR vs direction order"
        );
    }

    #[test]
    fn mechanism_rank_matches_section_3_8() {
        let u = |i, d, m| MechanismUse {
            intermediates: i,
            deterministic: d,
            misroute: m,
        };
        let order = [
            u(0, false, false),
            u(1, false, false),
            u(2, false, false),
            u(3, false, false),
            u(0, true, false),
            u(1, true, false),
            u(0, false, true),
            u(1, false, true),
            u(0, true, true),
            u(1, true, true),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]));
    }
}
