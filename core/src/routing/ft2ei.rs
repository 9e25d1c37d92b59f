//! FT²EI: fault tolerance on k-ary n-trees with exclusion intervals, static
//! computation (seed 000 §4.2–§4.4, §4.8).
//!
//! Routing is minimal adaptive up/down interval routing (IR, §3.2); every up
//! port also holds up to `n_ei` exclusion intervals. A port is allowed for d
//! iff d is in its inclusion interval and in none of its exclusions.
//!
//! Faults are **directed** switch-to-switch links, named by the switch whose
//! output port feeds the link (§4.1; the thesis's statistics count directed
//! links, §8 #1). A bidirectional link failure is two directed faults.
//! Faults are applied one at a time, as the thesis's oracle does:
//! - up port q of X fails: q excludes `[0..N−1]`;
//! - down port l of X = ⟨e, v⟩ fails: every stage-(e−1) switch whose low
//!   digits equal v's (except the lower end of the link) excludes l's IR
//!   interval on up port `k + v_{e−1}`;
//! - after each update, a switch that excludes some destinations on **all**
//!   its up ports announces them to its children, which exclude them on the
//!   port towards it (the cascade, `check_unreachable`); a leaf that ends up
//!   there cuts its hosts off and the combination is **not tolerated**.
//!
//! Resolutions of the digest's ambiguities used here: the lower end of a
//! failed down link is never updated (§8 #17); the merge follows the
//! pseudo-code with `<=` (§8 #29); a cascaded set that is not one arc is sent
//! as one exclusion per maximal arc (§8 #14). The cascade reaches the
//! children over live down links only, as the thesis's pseudo-code sends it
//! ([`Cascade::LiveDownLinks`]); with directed faults a child behind a
//! failed down link still sends up to the announcing switch, so
//! [`Cascade::AllChildren`] (a static controller can reach every switch)
//! tolerates more combinations. With bidirectional faults both agree.

use super::interval::{CyclicInterval, KaryTree, MemoryModel};
use super::tables::{IntervalTable, PortIntervals, RoutingTables, SwitchTable};
use super::{RoutingEngine, RoutingError};
use crate::topology::{FaultSet, HostId, NodeRef, PortNo, SwitchId, Topology};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::BTreeSet;

const NAME: &str = "ft2ei";

/// A failed directed link: the one leaving `switch` through `port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DirectedFault {
    pub switch: SwitchId,
    pub port: PortNo,
}

/// Why a fault combination is not tolerated (§4.8: some pair has no allowed
/// path, or an allowed path runs into a failed link).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotTolerated {
    #[error(
        "leaf switch {switch} excludes {count} destination(s) from host {first} on every up port: \
         its hosts cannot reach them"
    )]
    LeafCutOff {
        switch: SwitchId,
        first: HostId,
        count: u32,
    },
    #[error(
        "switch {switch}: no safe route to host {dest} (empty port set or a failed link ahead)"
    )]
    NoSafeRoute { switch: SwitchId, dest: HostId },
    #[error(
        "switch {switch} port {port}: the link to host {host} failed, host links are not protected"
    )]
    HostLinkFailed {
        switch: SwitchId,
        port: PortNo,
        host: HostId,
    },
}

/// Faults that do not name a switch-to-switch link of the tree.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    #[error("switch {switch} does not exist ({switches} switches)")]
    UnknownSwitch { switch: SwitchId, switches: u32 },
    #[error(
        "switch {switch} has no cabled port {port} (radix {radix}, top-stage up ports are unused)"
    )]
    NoSuchLink {
        switch: SwitchId,
        port: PortNo,
        radix: u32,
    },
    #[error("n_ei = {0}: at least one exclusion interval per up port is needed")]
    NoExclusionSlots(usize),
}

/// Outcome of applying one fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Fault(#[from] FaultError),
    #[error("fault combination not tolerated: {0}")]
    NotTolerated(#[from] NotTolerated),
}

/// Which children a switch that cannot reach some destinations tells so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cascade {
    /// Children over live down links (§4.4's pseudo-code).
    #[default]
    LiveDownLinks,
    /// Every child, also one whose down link from the switch failed.
    AllChildren,
}

/// The oracle's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ft2eiConfig {
    /// Exclusion intervals per up port (the thesis evaluates 1..6, Fig 3.14).
    pub n_ei: usize,
    pub cascade: Cascade,
}

impl Ft2eiConfig {
    /// `n_ei` slots, cascade as in the thesis.
    pub fn thesis(n_ei: usize) -> Self {
        Ft2eiConfig {
            n_ei,
            cascade: Cascade::LiveDownLinks,
        }
    }
}

/// The static FT²EI oracle: IR tables plus exclusion registers of a k-ary
/// n-tree, updated fault by fault.
#[derive(Clone, Debug)]
pub struct Ft2ei {
    tree: KaryTree,
    n_ei: usize,
    cascade: Cascade,
    /// `excl[sw][j]`: exclusion intervals on up port `k + j` (≤ n_ei).
    excl: Vec<Vec<Vec<CyclicInterval>>>,
    /// `announced[sw·N + d]`: sw already told its children d is unreachable.
    announced: Vec<bool>,
    dead: BTreeSet<DirectedFault>,
}

impl Ft2ei {
    /// Fault-free tables with `n_ei` exclusion slots per up port (the thesis
    /// evaluates 1..6, Fig 3.14) and the thesis's cascade.
    pub fn new(tree: KaryTree, n_ei: usize) -> Result<Self, FaultError> {
        Self::with_config(tree, Ft2eiConfig::thesis(n_ei))
    }

    pub fn with_config(tree: KaryTree, config: Ft2eiConfig) -> Result<Self, FaultError> {
        let n_ei = config.n_ei;
        if n_ei == 0 {
            return Err(FaultError::NoExclusionSlots(n_ei));
        }
        let switches = tree.switches() as usize;
        Ok(Ft2ei {
            tree,
            n_ei,
            cascade: config.cascade,
            excl: vec![vec![Vec::new(); tree.k as usize]; switches],
            announced: vec![false; switches * tree.hosts() as usize],
            dead: BTreeSet::new(),
        })
    }

    pub fn tree(&self) -> KaryTree {
        self.tree
    }

    /// Exclusion intervals on up port `port` (k..2k−1) of `sw`.
    pub fn exclusions(&self, sw: SwitchId, port: PortNo) -> &[CyclicInterval] {
        let j = port as usize - self.tree.k as usize;
        &self.excl[sw as usize][j]
    }

    pub fn faults(&self) -> &BTreeSet<DirectedFault> {
        &self.dead
    }

    /// Applies one fault (§4.3, §4.4). On `NotTolerated` the state is left
    /// as far as the computation got; the combination is lost either way.
    pub fn apply(&mut self, fault: DirectedFault) -> Result<(), ApplyError> {
        let t = self.tree;
        if fault.switch >= t.switches() {
            return Err(FaultError::UnknownSwitch {
                switch: fault.switch,
                switches: t.switches(),
            }
            .into());
        }
        let port = fault.port as u32;
        let is_up = port >= t.k;
        if port >= 2 * t.k || (is_up && t.is_top(fault.switch)) {
            return Err(FaultError::NoSuchLink {
                switch: fault.switch,
                port: fault.port,
                radix: 2 * t.k,
            }
            .into());
        }
        let stage = t.stage(fault.switch);
        if !is_up && stage == 0 {
            return Err(NotTolerated::HostLinkFailed {
                switch: fault.switch,
                port: fault.port,
                host: fault.switch * t.k + port,
            }
            .into());
        }
        if !self.dead.insert(fault) {
            return Ok(());
        }
        if is_up {
            let j = (port - t.k) as usize;
            self.add_exclusion(fault.switch, j, CyclicInterval::full(t.hosts()));
            return Ok(self.check_unreachable(fault.switch)?);
        }
        // Down-link fault at stage e ≥ 1 (§4.3).
        let e = stage;
        let x = t.index(fault.switch);
        let lost = t.down_interval(fault.switch, port);
        let low = t.pow(e - 1);
        let j = t.digit(x, e - 1) as usize;
        let lower_end = t.child(fault.switch, port);
        let targets: Vec<SwitchId> = (0..t.per_stage())
            .filter(|w| w % low == x % low)
            .map(|w| t.switch_id(e - 1, w))
            .filter(|&w| w != lower_end)
            .collect();
        for &w in &targets {
            self.add_exclusion(w, j, lost);
        }
        for &w in &targets {
            self.check_unreachable(w)?;
        }
        Ok(())
    }

    /// `add_exclusion` (§4.4): union with intersecting intervals, else a free
    /// slot, else merge with the stored interval giving the smallest result.
    fn add_exclusion(&mut self, sw: SwitchId, j: usize, new: CyclicInterval) {
        let n = self.tree.hosts();
        add_exclusion_to(&mut self.excl[sw as usize][j], new, self.n_ei, n);
    }

    fn excluded(&self, sw: SwitchId, j: usize, d: HostId) -> bool {
        self.excl[sw as usize][j].iter().any(|e| e.contains(d))
    }

    /// The cascade (`check_unreachable`, §4.4).
    fn check_unreachable(&mut self, sw: SwitchId) -> Result<(), NotTolerated> {
        let t = self.tree;
        let Some(up) = t.up_interval(sw) else {
            return Ok(());
        };
        let n = t.hosts();
        let base = sw as usize * n as usize;
        let unreachable: Vec<HostId> = (0..n)
            .filter(|&d| {
                up.contains(d)
                    && !self.announced[base + d as usize]
                    && (0..t.k as usize).all(|j| self.excluded(sw, j, d))
            })
            .collect();
        if unreachable.is_empty() {
            return Ok(());
        }
        for &d in &unreachable {
            self.announced[base + d as usize] = true;
        }
        let arcs = arcs_of(&unreachable, n);
        if t.stage(sw) == 0 {
            return Err(NotTolerated::LeafCutOff {
                switch: sw,
                first: arcs[0].lo,
                count: unreachable.len() as u32,
            });
        }
        let towards = (t.up_port_towards(sw) as u32 - t.k) as usize;
        let children: Vec<SwitchId> = (0..t.k)
            .filter(|&c| {
                self.cascade == Cascade::AllChildren
                    || !self.dead.contains(&DirectedFault {
                        switch: sw,
                        port: c as PortNo,
                    })
            })
            .map(|c| t.child(sw, c))
            .collect();
        for &y in &children {
            for &arc in &arcs {
                self.add_exclusion(y, towards, arc);
            }
        }
        for &y in &children {
            self.check_unreachable(y)?;
        }
        Ok(())
    }

    /// The allowed-port register AR of `sw` for d (§3.2, §4.2).
    pub fn allowed(&self, sw: SwitchId, d: HostId) -> Vec<PortNo> {
        let t = self.tree;
        if t.is_below(sw, d) {
            return vec![t.digit(d, t.stage(sw)) as PortNo];
        }
        if t.is_top(sw) {
            return Vec::new();
        }
        (0..t.k as usize)
            .filter(|&j| !self.excluded(sw, j, d))
            .map(|j| (t.k as usize + j) as PortNo)
            .collect()
    }

    fn next_switch(&self, sw: SwitchId, port: PortNo) -> Option<SwitchId> {
        let t = self.tree;
        let p = port as u32;
        if p >= t.k {
            Some(t.parent(sw, p - t.k))
        } else if t.stage(sw) == 0 {
            None // a host
        } else {
            Some(t.child(sw, p))
        }
    }

    /// The tolerance test of §4.8: every leaf reaches every destination, and
    /// every allowed port on the way is alive and leads on safely.
    pub fn check(&self) -> Result<(), NotTolerated> {
        let t = self.tree;
        let n = t.hosts() as usize;
        // 0 = unknown, 1 = safe, 2 = unsafe.
        let mut memo = vec![0u8; t.switches() as usize * n];
        for leaf in 0..t.per_stage() {
            for d in 0..t.hosts() {
                if !self.safe(leaf, d, &mut memo) {
                    let culprit = self.first_unsafe(leaf, d, &memo);
                    return Err(NotTolerated::NoSafeRoute {
                        switch: culprit,
                        dest: d,
                    });
                }
            }
        }
        Ok(())
    }

    fn safe(&self, sw: SwitchId, d: HostId, memo: &mut [u8]) -> bool {
        let idx = sw as usize * self.tree.hosts() as usize + d as usize;
        match memo[idx] {
            1 => return true,
            2 => return false,
            _ => {}
        }
        let t = self.tree;
        let ok = if t.is_below(sw, d) {
            let p = t.digit(d, t.stage(sw)) as PortNo;
            self.port_safe(sw, p, d, memo)
        } else if t.is_top(sw) {
            false
        } else {
            let mut any = false;
            let mut all = true;
            for j in 0..t.k as usize {
                if !self.excluded(sw, j, d) {
                    any = true;
                    all = all && self.port_safe(sw, (t.k as usize + j) as PortNo, d, memo);
                }
            }
            any && all
        };
        memo[idx] = if ok { 1 } else { 2 };
        ok
    }

    fn port_safe(&self, sw: SwitchId, p: PortNo, d: HostId, memo: &mut [u8]) -> bool {
        !self.dead.contains(&DirectedFault {
            switch: sw,
            port: p,
        }) && self
            .next_switch(sw, p)
            .is_none_or(|next| self.safe(next, d, memo))
    }

    /// The switch where an unsafe route first goes wrong (for the message).
    fn first_unsafe(&self, mut sw: SwitchId, d: HostId, memo: &[u8]) -> SwitchId {
        let n = self.tree.hosts() as usize;
        loop {
            let bad_next = self.allowed(sw, d).into_iter().find_map(|p| {
                let dead = self.dead.contains(&DirectedFault {
                    switch: sw,
                    port: p,
                });
                match self.next_switch(sw, p) {
                    Some(next) if !dead && memo[next as usize * n + d as usize] == 2 => Some(next),
                    _ => None,
                }
            });
            match bad_next {
                Some(next) => sw = next,
                None => return sw,
            }
        }
    }

    /// Number of distinct allowed, fault-free paths from host `src` to `dst`.
    pub fn paths(&self, src: HostId, dst: HostId) -> u64 {
        let mut memo = vec![None; self.tree.switches() as usize];
        self.paths_from(self.tree.leaf_of(src), dst, &mut memo)
    }

    fn paths_from(&self, sw: SwitchId, d: HostId, memo: &mut [Option<u64>]) -> u64 {
        if let Some(p) = memo[sw as usize] {
            return p;
        }
        let count = self
            .allowed(sw, d)
            .into_iter()
            .filter(|&p| {
                !self.dead.contains(&DirectedFault {
                    switch: sw,
                    port: p,
                })
            })
            .map(|p| match self.next_switch(sw, p) {
                Some(next) => self.paths_from(next, d, memo),
                None => 1,
            })
            .sum();
        memo[sw as usize] = Some(count);
        count
    }

    /// Allowed fault-free paths summed over all ordered pairs of distinct hosts.
    pub fn total_paths(&self) -> u64 {
        let n = self.tree.hosts();
        (0..n)
            .flat_map(|s| (0..n).filter(move |&d| d != s).map(move |d| (s, d)))
            .map(|(s, d)| self.paths(s, d))
            .sum()
    }

    /// Victim destinations (§6.1, definition of digest §8 #3): summed over
    /// the live up ports of every switch, the excluded destinations that
    /// could still be reached minimally through that port.
    pub fn victims(&self) -> u64 {
        let t = self.tree;
        let mut total = 0;
        for d in 0..t.hosts() {
            let mut memo = vec![None; t.switches() as usize];
            for sw in 0..t.switches() {
                if t.is_top(sw) || t.is_below(sw, d) {
                    continue;
                }
                for j in 0..t.k {
                    let port = (t.k + j) as PortNo;
                    let live = !self.dead.contains(&DirectedFault { switch: sw, port });
                    if live
                        && self.excluded(sw, j as usize, d)
                        && physical_reach(&t, &self.dead, t.parent(sw, j), d, &mut memo)
                    {
                        total += 1;
                    }
                }
            }
        }
        total
    }

    /// Memory per switch in bits (§3.7).
    pub fn memory_bits(&self) -> u64 {
        MemoryModel {
            k: self.tree.k as u64,
            n_hosts: self.tree.hosts() as u64,
        }
        .ft2ei(self.n_ei as u64)
    }

    /// The interval tables to install: down ports first (one interval each),
    /// then the up ports with their exclusions. [`IntervalTable`] takes the
    /// first allowed port, i.e. the first-free selection among up ports.
    pub fn tables(&self) -> RoutingTables {
        let t = self.tree;
        let n = t.hosts();
        let switches = (0..t.switches())
            .map(|sw| {
                let mut ports: Vec<PortIntervals> = (0..t.k)
                    .map(|j| PortIntervals {
                        port: j as PortNo,
                        include: t.down_interval(sw, j).to_linear(n),
                        exclude: Vec::new(),
                    })
                    .collect();
                if let Some(up) = t.up_interval(sw) {
                    for j in 0..t.k as usize {
                        ports.push(PortIntervals {
                            port: (t.k as usize + j) as PortNo,
                            include: up.to_linear(n),
                            exclude: self.excl[sw as usize][j]
                                .iter()
                                .flat_map(|e| e.to_linear(n))
                                .collect(),
                        });
                    }
                }
                SwitchTable::Intervals(IntervalTable { ports })
            })
            .collect();
        RoutingTables {
            engine: NAME.to_string(),
            switches,
            vcs: 1,
            vc_policy: Vec::new(),
        }
    }
}

/// `add_exclusion` on one port's exclusion slots (§4.4): union with
/// intersecting intervals, else a free slot (< `n_ei` used), else merge with
/// the stored interval giving the smallest result. Shared by the static
/// oracle and the switch-side dynamic protocol ([`crate::mechanism::ft2ei_dyn`]).
pub fn add_exclusion_to(slots: &mut Vec<CyclicInterval>, new: CyclicInterval, n_ei: usize, n: u32) {
    let mut acc = new;
    let mut merged = absorb_intersecting(slots, &mut acc, n);
    if !merged && slots.len() >= n_ei {
        let (best, hull) = slots
            .iter()
            .enumerate()
            .map(|(i, s)| (i, merge2(*s, acc, n)))
            .min_by_key(|(i, h)| (h.len(n), *i))
            .expect("n_ei >= 1 so a full port has a slot");
        slots.remove(best);
        acc = hull;
        merged = true;
    }
    if merged {
        // A merged interval may now reach further stored ones.
        absorb_intersecting(slots, &mut acc, n);
    }
    slots.push(acc);
}

/// Replaces every stored interval that intersects `acc` by its union with
/// `acc`; true if any did.
fn absorb_intersecting(slots: &mut Vec<CyclicInterval>, acc: &mut CyclicInterval, n: u32) -> bool {
    let mut any = false;
    while let Some(i) = slots.iter().position(|s| s.intersects(acc, n)) {
        *acc = slots[i]
            .union(acc, n)
            .expect("intersecting arcs have a union");
        slots.remove(i);
        any = true;
    }
    any
}

/// The thesis's `merge2` of two disjoint intervals (§4.4): the smaller of
/// the two hulls, ties to `t1`.
pub fn merge2(a: CyclicInterval, b: CyclicInterval, n: u32) -> CyclicInterval {
    let (t1, t2) = if !a.is_cyclic() && !b.is_cyclic() {
        (
            CyclicInterval::new(a.lo.min(b.lo), a.hi.max(b.hi)),
            CyclicInterval::new(a.lo.max(b.lo), a.hi.min(b.hi)),
        )
    } else {
        (
            CyclicInterval::new(a.lo.min(b.lo), a.hi.min(b.hi)),
            CyclicInterval::new(a.lo.max(b.lo), a.hi.max(b.hi)),
        )
    };
    if t1.len(n) <= t2.len(n) {
        t1
    } else {
        t2
    }
}

/// Maximal cyclic arcs of a sorted set of destinations.
pub(crate) fn arcs_of(sorted: &[HostId], n: u32) -> Vec<CyclicInterval> {
    let mut arcs: Vec<CyclicInterval> = Vec::new();
    for &d in sorted {
        match arcs.last_mut() {
            Some(a) if a.hi + 1 == d => a.hi = d,
            _ => arcs.push(CyclicInterval::new(d, d)),
        }
    }
    if arcs.len() > 1 && arcs[0].lo == 0 && arcs[arcs.len() - 1].hi == n - 1 {
        let last = arcs.pop().expect("len > 1");
        arcs[0].lo = last.lo;
    }
    arcs
}

/// Every directed switch-to-switch link of the tree (2(n−1)kⁿ of them).
pub fn directed_links(tree: &KaryTree) -> Vec<DirectedFault> {
    (0..tree.switches())
        .flat_map(|sw| {
            let down = if tree.stage(sw) == 0 { 0 } else { tree.k };
            let up = if tree.is_top(sw) { 0 } else { tree.k };
            (0..down)
                .chain(tree.k..tree.k + up)
                .map(move |p| DirectedFault {
                    switch: sw,
                    port: p as PortNo,
                })
        })
        .collect()
}

/// Applies `faults` in order from fault-free tables and runs the §4.8 test.
pub fn evaluate(
    tree: KaryTree,
    config: Ft2eiConfig,
    faults: &[DirectedFault],
) -> Result<Ft2ei, ApplyError> {
    let mut state = Ft2ei::with_config(tree, config)?;
    for &f in faults {
        state.apply(f)?;
    }
    state.check()?;
    Ok(state)
}

/// How many of the fault combinations tried were tolerated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToleranceCount {
    pub tolerated: u64,
    pub tried: u64,
    /// Combinations where some pair has no fault-free minimal path at all:
    /// no scheme without extra resources tolerates them (a lower bound on
    /// `tried − tolerated`).
    pub disconnected: u64,
}

/// True if a packet at `sw` for d has some minimal up/down continuation
/// that avoids the failed directed links (`memo` per destination d).
fn physical_reach(
    t: &KaryTree,
    dead: &BTreeSet<DirectedFault>,
    sw: SwitchId,
    d: HostId,
    memo: &mut [Option<bool>],
) -> bool {
    if let Some(r) = memo[sw as usize] {
        return r;
    }
    let live = |p: u32| {
        !dead.contains(&DirectedFault {
            switch: sw,
            port: p as PortNo,
        })
    };
    let r = if t.is_below(sw, d) {
        let p = t.digit(d, t.stage(sw));
        live(p) && (t.stage(sw) == 0 || physical_reach(t, dead, t.child(sw, p), d, memo))
    } else {
        !t.is_top(sw)
            && (0..t.k).any(|j| live(t.k + j) && physical_reach(t, dead, t.parent(sw, j), d, memo))
    };
    memo[sw as usize] = Some(r);
    r
}

/// True if every pair of hosts still has a minimal up/down path that avoids
/// the failed directed links.
pub fn minimally_connected(tree: KaryTree, dead: &BTreeSet<DirectedFault>) -> bool {
    (0..tree.hosts()).all(|d| {
        let mut memo = vec![None; tree.switches() as usize];
        (0..tree.per_stage()).all(|leaf| physical_reach(&tree, dead, leaf, d, &mut memo))
    })
}

/// How fault combinations are drawn for [`tolerance`] (§4.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// Every combination, faults applied in increasing link order.
    Exhaustive,
    /// `samples` random combinations, each applied in random order.
    Random { samples: u64, seed: u64 },
}

/// Counts tolerated combinations of `faults` directed link faults.
pub fn tolerance(
    tree: KaryTree,
    config: Ft2eiConfig,
    faults: usize,
    sampling: Sampling,
) -> ToleranceCount {
    let links = directed_links(&tree);
    let mut count = ToleranceCount {
        tolerated: 0,
        tried: 0,
        disconnected: 0,
    };
    let mut tally = |combo: &[DirectedFault]| {
        count.tried += 1;
        if evaluate(tree, config, combo).is_ok() {
            count.tolerated += 1;
        } else if !minimally_connected(tree, &combo.iter().copied().collect()) {
            count.disconnected += 1;
        }
    };
    match sampling {
        Sampling::Exhaustive => {
            let mut idx: Vec<usize> = (0..faults).collect();
            if faults > links.len() {
                return count;
            }
            loop {
                let combo: Vec<DirectedFault> = idx.iter().map(|&i| links[i]).collect();
                tally(&combo);
                // Next combination in lexicographic order.
                let Some(pos) = (0..faults)
                    .rev()
                    .find(|&p| idx[p] < links.len() - faults + p)
                else {
                    break;
                };
                idx[pos] += 1;
                for q in pos + 1..faults {
                    idx[q] = idx[q - 1] + 1;
                }
            }
        }
        Sampling::Random { samples, seed } => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            for _ in 0..samples {
                let combo: Vec<DirectedFault> =
                    links.choose_multiple(&mut rng, faults).copied().collect();
                let mut combo = combo;
                combo.shuffle(&mut rng);
                tally(&combo);
            }
        }
    }
    count
}

/// FT²EI as a routing engine: each failed link (both directions) or switch
/// (all its links) is applied in increasing link order.
#[derive(Clone, Copy, Debug)]
pub struct Ft2eiEngine {
    pub config: Ft2eiConfig,
}

impl Default for Ft2eiEngine {
    fn default() -> Self {
        // "Two exclusion intervals are enough" (§6.3, Fig 3.14).
        Ft2eiEngine::new(2)
    }
}

impl Ft2eiEngine {
    /// `n_ei` exclusion intervals per up port (1..6 in the thesis).
    pub fn new(n_ei: usize) -> Self {
        Ft2eiEngine {
            config: Ft2eiConfig::thesis(n_ei),
        }
    }

    /// The directed faults a [`FaultSet`] stands for.
    pub fn directed_faults(topo: &Topology, faults: &FaultSet) -> Vec<DirectedFault> {
        let mut links: BTreeSet<u32> = faults.links.clone();
        for &s in &faults.switches {
            if let Some(sw) = topo.switches.get(s as usize) {
                links.extend(sw.ports.iter().flatten());
            }
        }
        let mut out = Vec::new();
        for l in links {
            let Some(link) = topo.links.get(l as usize) else {
                continue;
            };
            for end in [link.a, link.b] {
                if let NodeRef::Switch(s) = end.node {
                    out.push(DirectedFault {
                        switch: s,
                        port: end.port,
                    });
                }
            }
        }
        out
    }

    /// Static FT²EI for `faults`: the tables, or why they are not tolerated.
    pub fn compute(&self, topo: &Topology, faults: &FaultSet) -> Result<Ft2ei, RoutingError> {
        let tree = KaryTree::of(topo, NAME)?;
        let directed = Self::directed_faults(topo, faults);
        evaluate(tree, self.config, &directed).map_err(|e| RoutingError::Failed {
            engine: NAME,
            reason: e.to_string(),
        })
    }
}

impl RoutingEngine for Ft2eiEngine {
    fn name(&self) -> &'static str {
        NAME
    }
    fn claims_deadlock_free(&self) -> bool {
        // Up*/down* minus some dependencies (§3.8).
        true
    }
    /// k-ary n-trees, and RUFTs (interval routing by the destination's
    /// digits; a failed link's destinations excluded where it starts,
    /// [`super::ruft`]).
    fn route(&self, topo: &Topology, faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        if let crate::topology::Family::Ruft { k, n } = topo.family {
            return Ok(super::ruft::ruft_tables(topo, k, n, faults, NAME));
        }
        Ok(self.compute(topo, faults)?.tables())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckOptions, Tracer};
    use crate::topology::generators::kary_ntree;
    use crate::topology::PortRef;

    fn f(switch: SwitchId, port: PortNo) -> DirectedFault {
        DirectedFault { switch, port }
    }
    fn iv(lo: u32, hi: u32) -> CyclicInterval {
        CyclicInterval::new(lo, hi)
    }

    #[test]
    fn fig_3_7_single_down_fault_2ary_4tree() {
        let tree = KaryTree { k: 2, n: 4 };
        let mut s = Ft2ei::new(tree, 1).unwrap();
        s.apply(f(18, 1)).unwrap();
        for w in [8, 12, 14] {
            assert_eq!(s.exclusions(w, 3), &[iv(4, 7)], "switch {w}");
            assert!(s.exclusions(w, 2).is_empty());
            assert_eq!(s.allowed(w, 5), vec![2]);
        }
        assert!(s.exclusions(10, 3).is_empty(), "lower end is not updated");
        s.check().unwrap();
        // Second fault, switch 22 link 1: [12..15] merges into [4..15].
        s.apply(f(22, 1)).unwrap();
        assert_eq!(s.exclusions(8, 3), &[iv(4, 15)]);
        assert_eq!(s.exclusions(12, 3), &[iv(4, 15)]);
        assert_eq!(s.exclusions(10, 3), &[iv(12, 15)]);
        s.check().unwrap();
        // With two slots there are no victims.
        let mut two = Ft2ei::new(tree, 2).unwrap();
        two.apply(f(18, 1)).unwrap();
        two.apply(f(22, 1)).unwrap();
        assert_eq!(two.exclusions(8, 3), &[iv(4, 7), iv(12, 15)]);
    }

    #[test]
    fn merge_victims_and_slots() {
        // §4.4: merging [4..7] and [12..15] into [4..15] on switches 8 and 12
        // excludes 8..11 there; on switch 8 they are victims (reachable
        // through port 3 but excluded), switch 12 sits above 8..11 and never
        // sends them up. A second slot avoids the victims.
        let tree = KaryTree { k: 2, n: 4 };
        let faults = [f(18, 1), f(22, 1)];
        let one = evaluate(tree, Ft2eiConfig::thesis(1), &faults).unwrap();
        assert_eq!(one.victims(), 4);
        let two = evaluate(tree, Ft2eiConfig::thesis(2), &faults).unwrap();
        assert_eq!(two.victims(), 0);
        // Fig 3.22: with 4 faults and 4 EIs there are no victims.
        let tree = KaryTree { k: 4, n: 3 };
        let links = directed_links(&tree);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for _ in 0..20 {
            let combo: Vec<_> = links.choose_multiple(&mut rng, 4).copied().collect();
            if let Ok(s) = evaluate(tree, Ft2eiConfig::thesis(4), &combo) {
                assert_eq!(s.victims(), 0, "{combo:?}");
            }
        }
    }

    #[test]
    fn cascade_after_second_fault_under_the_same_subtree() {
        // §4.4: after switch 18's fault, link 1 of switch 16 fails.
        let tree = KaryTree { k: 2, n: 4 };
        let mut s = Ft2ei::new(tree, 1).unwrap();
        s.apply(f(18, 1)).unwrap();
        s.apply(f(16, 1)).unwrap();
        for w in [8, 12, 14] {
            assert_eq!(s.exclusions(w, 2), &[iv(4, 7)]);
            assert!(s.allowed(w, 4).is_empty());
        }
        for leaf in [0, 1, 4, 5, 6, 7] {
            assert_eq!(s.exclusions(leaf, 2), &[iv(4, 7)], "leaf {leaf}");
            assert!(s.exclusions(leaf, 3).is_empty());
        }
        for leaf in [2, 3] {
            assert!(
                s.exclusions(leaf, 2).is_empty(),
                "leaf {leaf} is below 4..7"
            );
        }
        s.check().unwrap();
    }

    #[test]
    fn installed_tables_pick_an_allowed_port() {
        // The IntervalTable form (cyclic intervals split, down ports first)
        // returns a port of the AR set, and none when AR is empty.
        let tree = KaryTree { k: 2, n: 4 };
        for faults in [
            vec![],
            vec![f(18, 1), f(22, 1)],
            vec![f(18, 1), f(16, 1)],
            vec![f(3, 2)],
        ] {
            let s = evaluate(tree, Ft2eiConfig::thesis(1), &faults).unwrap();
            let rt = s.tables();
            for sw in 0..tree.switches() {
                for d in 0..tree.hosts() {
                    let allowed = s.allowed(sw, d);
                    match rt.switches[sw as usize].lookup(d) {
                        Some(p) => assert!(allowed.contains(&p), "sw {sw} d {d}"),
                        None => assert!(allowed.is_empty(), "sw {sw} d {d}"),
                    }
                }
            }
        }
    }

    #[test]
    fn merge2_follows_the_pseudo_code() {
        let n = 16;
        assert_eq!(merge2(iv(4, 7), iv(12, 15), n), iv(4, 15), "tie goes to t1");
        assert_eq!(merge2(iv(0, 1), iv(12, 15), n), iv(12, 1));
        assert_eq!(merge2(iv(5, 5), iv(1, 2), n), iv(1, 5));
        assert_eq!(merge2(iv(14, 1), iv(3, 4), n), iv(14, 4));
        assert_eq!(merge2(iv(14, 1), iv(10, 11), n), iv(10, 1));
    }

    #[test]
    fn table_3_5_lost_paths() {
        // Total minimal paths 168 / 52 416; one directed fault between stages
        // 0–1 removes 20 / 816 paths, between stages 1–2 16 / 768, in either
        // direction, and FT²EI removes exactly those.
        for (k, n, total, lost01, lost12) in [(2, 3, 168, 20, 16), (4, 3, 52_416, 816, 768)] {
            let tree = KaryTree { k, n };
            let clean = Ft2ei::new(tree, 1).unwrap();
            assert_eq!(clean.total_paths(), total);
            // Leaf 0's first up link, and its reverse (stage-1 down port).
            let parent = tree.parent(0, 0);
            let stage1 = tree.per_stage();
            let top = tree.parent(stage1, 0);
            for (fault, lost) in [
                (f(0, k as PortNo), lost01),
                (f(parent, tree.digit(0, 0) as PortNo), lost01),
                (f(stage1, k as PortNo), lost12),
                (f(top, tree.digit(tree.index(stage1), 1) as PortNo), lost12),
            ] {
                let s = evaluate(tree, Ft2eiConfig::thesis(1), &[fault]).unwrap();
                assert_eq!(total - s.total_paths(), lost, "{k}-ary {n}: {fault:?}");
            }
        }
    }

    #[test]
    fn tables_3_1_3_2_k_minus_1_faults_always_tolerated() {
        // Exhaustive where small (1 EI: with k − 1 faults no slot is ever
        // shared, so n_ei does not matter); sampled elsewhere, 1..3 EIs.
        for (k, n) in [(2, 2), (2, 3), (4, 2)] {
            let tree = KaryTree { k, n };
            let c = tolerance(
                tree,
                Ft2eiConfig::thesis(1),
                k as usize - 1,
                Sampling::Exhaustive,
            );
            assert_eq!(c.tolerated, c.tried, "{k}-ary {n}-tree");
            let links = directed_links(&tree).len() as u64;
            assert_eq!(links, 2 * (n as u64 - 1) * (k as u64).pow(n));
        }
        for n_ei in [1, 2, 3] {
            for (k, n, samples) in [(3, 3, 150), (4, 3, 100)] {
                let random = Sampling::Random { samples, seed: 7 };
                let c = tolerance(
                    KaryTree { k, n },
                    Ft2eiConfig::thesis(n_ei),
                    k as usize - 1,
                    random,
                );
                assert_eq!(c.tolerated, samples, "{k}-ary {n}-tree, {n_ei} EI");
            }
        }
        // k faults can cut a leaf off: all its up links (Fig 3.12a).
        let tree = KaryTree { k: 4, n: 3 };
        let leaf_cut: Vec<_> = (4..8).map(|p| f(5, p)).collect();
        assert!(matches!(
            evaluate(tree, Ft2eiConfig::thesis(6), &leaf_cut),
            Err(ApplyError::NotTolerated(NotTolerated::LeafCutOff {
                switch: 5,
                ..
            }))
        ));
    }

    #[test]
    fn fig_3_13_2ary_trees_exhaustive() {
        let all = Ft2eiConfig {
            n_ei: 1,
            cascade: Cascade::AllChildren,
        };
        // 2-ary 3-tree, 2 faults, 1 EI: 6.45 % (32 of 496) not tolerated,
        // every one of them a physical disconnection.
        for config in [Ft2eiConfig::thesis(1), all] {
            let c = tolerance(KaryTree { k: 2, n: 3 }, config, 2, Sampling::Exhaustive);
            assert_eq!(
                (c.tried, c.tried - c.tolerated, c.disconnected),
                (496, 32, 32)
            );
        }
        // 3 faults: physical disconnections ≤ all-children cascade < the
        // thesis's cascade (which leaves children behind failed links out).
        let tree = KaryTree { k: 2, n: 3 };
        let thesis = tolerance(tree, Ft2eiConfig::thesis(1), 3, Sampling::Exhaustive);
        let every = tolerance(tree, all, 3, Sampling::Exhaustive);
        assert_eq!(thesis.tried, 4960);
        assert_eq!(thesis.disconnected, every.disconnected);
        assert!(every.disconnected <= every.tried - every.tolerated);
        assert!(every.tolerated > thesis.tolerated);
        // 2-ary 2-tree: 1 fault always, 5 faults never tolerated.
        let tree = KaryTree { k: 2, n: 2 };
        let c = tolerance(tree, Ft2eiConfig::thesis(1), 1, Sampling::Exhaustive);
        assert_eq!((c.tried, c.tolerated), (8, 8));
        let c = tolerance(tree, Ft2eiConfig::thesis(1), 5, Sampling::Exhaustive);
        assert_eq!((c.tried, c.tolerated), (56, 0));
    }

    #[test]
    fn fig_3_13_4ary_3tree_no_worse_than_the_thesis() {
        // Class B (§6.6): the thesis's 0.23 % (4 faults) and 1.95 % (8
        // faults) non-tolerated are upper bounds for an exact oracle.
        let tree = KaryTree { k: 4, n: 3 };
        for (faults, thesis_pct) in [(4usize, 0.23), (8, 1.95)] {
            let random = Sampling::Random {
                samples: 400,
                seed: 3,
            };
            let c = tolerance(tree, Ft2eiConfig::thesis(1), faults, random);
            let pct = 100.0 * (c.tried - c.tolerated) as f64 / c.tried as f64;
            assert!(pct <= thesis_pct, "{faults} faults: {pct:.2} %");
        }
    }

    #[test]
    fn more_slots_never_hurt_at_4ary_3tree() {
        // §6.3 / Fig 3.14: 1..6 EIs, k and more faults; more EIs tolerate at
        // least as many combinations on the same samples.
        let tree = KaryTree { k: 4, n: 3 };
        for faults in [4usize, 12] {
            let mut last = 0;
            for n_ei in 1..=6 {
                let c = tolerance(
                    tree,
                    Ft2eiConfig::thesis(n_ei),
                    faults,
                    Sampling::Random {
                        samples: 40,
                        seed: 11,
                    },
                );
                assert!(c.tolerated >= last, "{faults} faults, {n_ei} EI");
                last = c.tolerated;
            }
        }
    }

    fn switch_links(topo: &Topology) -> Vec<u32> {
        (0..topo.links.len() as u32)
            .filter(|&l| {
                let link = &topo.links[l as usize];
                matches!(
                    (link.a.node, link.b.node),
                    (NodeRef::Switch(_), NodeRef::Switch(_))
                )
            })
            .collect()
    }

    #[test]
    fn engine_tables_pass_the_checker_with_0_to_3_failed_links() {
        // The brief's trees with 0..3 failed (bidirectional) links: every
        // pair delivered on a minimal path avoiding the faults, CDG acyclic.
        for (k, n) in [(2, 3), (4, 2), (4, 3)] {
            let topo = kary_ntree(k, n).unwrap();
            let links = switch_links(&topo);
            for failed in 0..=3usize {
                let chosen = links.iter().step_by(7).take(failed).copied();
                let faults = FaultSet::with_links(chosen);
                let engine = Ft2eiEngine::new(2);
                let rt = match engine.route(&topo, &faults) {
                    Ok(rt) => rt,
                    Err(e) => {
                        // k − 1 link faults are always tolerated (§4.4).
                        assert!(failed >= k as usize, "{k}-ary {n}, {failed} faults: {e}");
                        continue;
                    }
                };
                let report = check(&topo, &faults, &rt, &CheckOptions::default());
                assert!(
                    report.is_ok(),
                    "{k}-ary {n}, {failed}: {:?}",
                    report.failures
                );
                assert_eq!(report.unreachable_by_topology, 0);
                let tracer = Tracer::new(&topo, &faults, &rt);
                for s in 0..topo.num_hosts() as HostId {
                    for d in 0..topo.num_hosts() as HostId {
                        assert!(tracer.trace(s, d).unwrap().len() < 2 * n as usize);
                    }
                }
            }
        }
    }

    #[test]
    fn engine_reports_an_untolerated_combination() {
        // Both up links of leaf 0 in a 2-ary 3-tree: its hosts are cut off.
        let topo = kary_ntree(2, 3).unwrap();
        let up: Vec<u32> = [2, 3]
            .iter()
            .map(|&p| topo.link_at(PortRef::switch(0, p)).unwrap())
            .collect();
        let err = Ft2eiEngine::default()
            .route(&topo, &FaultSet::with_links(up))
            .unwrap_err();
        let RoutingError::Failed { engine, reason } = err else {
            panic!("expected Failed, got {err:?}");
        };
        assert_eq!(engine, "ft2ei");
        assert!(reason.contains("leaf switch 0"), "{reason}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]
        #[test]
        fn any_three_link_faults_in_a_4ary_3tree_are_tolerated(
            picks in proptest::collection::btree_set(0usize..128, 3)
        ) {
            let topo = kary_ntree(4, 3).unwrap();
            let links = switch_links(&topo);
            let faults = FaultSet::with_links(picks.iter().map(|&i| links[i]));
            let rt = Ft2eiEngine::new(1).route(&topo, &faults).unwrap();
            let opts = CheckOptions { deadlock: false, ..CheckOptions::default() };
            let report = check(&topo, &faults, &rt, &opts);
            proptest::prop_assert!(report.is_ok(), "{:?}", report.failures);
        }
    }

    #[test]
    fn bad_faults_are_errors_not_panics() {
        let tree = KaryTree { k: 2, n: 3 };
        let mut s = Ft2ei::new(tree, 1).unwrap();
        assert!(matches!(s.apply(f(99, 0)), Err(ApplyError::Fault(_))));
        assert!(
            matches!(s.apply(f(8, 2)), Err(ApplyError::Fault(_))),
            "top up port"
        );
        assert!(matches!(
            s.apply(f(1, 0)),
            Err(ApplyError::NotTolerated(NotTolerated::HostLinkFailed {
                host: 2,
                ..
            }))
        ));
        assert!(Ft2ei::new(tree, 0).is_err());
        assert_eq!(Ft2ei::new(tree, 2).unwrap().memory_bits(), 4 * 2 * 2 * 3);
    }
}
