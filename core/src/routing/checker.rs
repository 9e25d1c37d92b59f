//! The shared route checker: follows any [`RoutingTables`] hop by hop and
//! verifies delivery, loop freedom, fault avoidance and table sanity, then
//! (for engines that claim it) deadlock freedom through the channel
//! dependency graph (seed 001 §2.4: Dally's acyclic-CDG condition; the
//! "A1 path tracer" and "A5 CDG builder" of §8.6).
//!
//! How it works:
//! - a host injects through its first alive port (a cabled link that is not
//!   failed, to a switch that is not failed);
//! - a pair (src, dst) is *connected* if dst has an alive attachment to a
//!   switch reachable from src's attachment over alive links;
//! - deterministic tables (LFT, intervals) are followed per destination with
//!   memoisation over switches, so the cost is O(#switches · #hosts);
//! - adaptive tables are explored as sets: every candidate and the escape port
//!   of every reached switch must be usable, no candidate cycle may exist, and
//!   the escape path alone must deliver;
//! - the CDG's vertices are channels (a switch's output port, a VC); an edge
//!   c1 → c2 exists when some packet actually routed by the tables holds c1
//!   and requests c2. Only reachable states are used, so an up*/down* table
//!   does not show the down→up turns no packet ever takes. For adaptive
//!   tables the CDG is built over the escape function (Duato's condition).

use super::{RoutingTables, SwitchTable, VcPolicy};
use crate::topology::{FaultSet, HostId, NodeRef, PortNo, PortRef, SwitchId, Topology};
use std::collections::VecDeque;
use std::fmt;

/// One step of a traced path: the switch and the port it forwarded through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hop {
    pub switch: SwitchId,
    pub port: PortNo,
}

impl fmt::Display for Hop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}:{}", self.switch, self.port)
    }
}

/// A channel of the dependency graph: an output port of a switch (the
/// directed link leaving it) and a VC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Channel {
    pub switch: SwitchId,
    pub port: PortNo,
    pub vc: u8,
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}:{}/vc{}", self.switch, self.port, self.vc)
    }
}

/// What went wrong on one route (or in the tables as a whole).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckFailure {
    #[error("tables cover {tables} switches but the topology has {switches}")]
    TableCount { tables: usize, switches: usize },
    #[error("switch {switch}: entry for host {dest} names port {port}, which {reason}")]
    BadEntry {
        switch: SwitchId,
        dest: HostId,
        port: PortNo,
        reason: &'static str,
    },
    #[error("{src}->{dst}: switch {at} has no route (path {})", fmt_path(path))]
    NoRoute {
        src: HostId,
        dst: HostId,
        at: SwitchId,
        path: Vec<Hop>,
    },
    #[error("{src}->{dst}: forwarding loop (path {})", fmt_path(path))]
    Loop {
        src: HostId,
        dst: HostId,
        path: Vec<Hop>,
    },
    #[error(
        "{src}->{dst}: delivered to host {reached} instead (path {})",
        fmt_path(path)
    )]
    Misdelivered {
        src: HostId,
        dst: HostId,
        reached: HostId,
        path: Vec<Hop>,
    },
    #[error(
        "{src}->{dst}: uses a failed link or switch at the last hop (path {})",
        fmt_path(path)
    )]
    ThroughFault {
        src: HostId,
        dst: HostId,
        path: Vec<Hop>,
    },
    #[error("{src}->{dst}: port {} of switch {} is not cabled or cannot send (path {})",
            path.last().map(|h| h.port).unwrap_or(0),
            path.last().map(|h| h.switch).unwrap_or(0), fmt_path(path))]
    BadPort {
        src: HostId,
        dst: HostId,
        path: Vec<Hop>,
    },
    #[error(
        "{src}->{dst}: adaptive candidates can cycle (through {})",
        fmt_path(path)
    )]
    CandidateCycle {
        src: HostId,
        dst: HostId,
        path: Vec<Hop>,
    },
    #[error("channel dependency cycle: {}", cycle.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" -> "))]
    DependencyCycle { cycle: Vec<Channel> },
}

fn fmt_path(path: &[Hop]) -> String {
    path.iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What to verify.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Build the CDG and look for a cycle.
    pub deadlock: bool,
    /// How many failures to list in full (the rest are only counted).
    pub max_listed: usize,
    /// Accept cycles among adaptive candidates (non-minimal adaptive routing
    /// bounded by a misroute counter in the header).
    pub allow_candidate_cycles: bool,
    /// Build the CDG over every adaptive candidate instead of the escape
    /// function only (used by [`check_transition`]).
    pub cdg_all_candidates: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            deadlock: true,
            max_listed: 64,
            allow_candidate_cycles: false,
            cdg_all_candidates: false,
        }
    }
}

/// The checker's verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Ordered pairs src ≠ dst that are connected in the topology minus faults.
    pub pairs_checked: u64,
    pub delivered: u64,
    /// Ordered pairs src ≠ dst with no alive path at all (not a routing fault).
    pub unreachable_by_topology: u64,
    /// Number of connected pairs that were not delivered.
    pub failed_pairs: u64,
    /// The first `max_listed` failures, plus table-wide problems.
    pub failures: Vec<CheckFailure>,
    /// Whether the CDG was built (deadlock check requested).
    pub cdg_checked: bool,
    /// Number of distinct channel dependencies found.
    pub dependencies: u64,
}

impl CheckReport {
    /// True if every connected pair is delivered and nothing else was flagged.
    pub fn is_ok(&self) -> bool {
        self.failures.is_empty() && self.failed_pairs == 0
    }

    /// `Ok(self)` if [`CheckReport::is_ok`], else the first failure.
    pub fn into_result(self) -> Result<CheckReport, CheckFailure> {
        match self.failures.first() {
            Some(f) => Err(f.clone()),
            None => Ok(self),
        }
    }

    /// The dependency cycle, if one was found.
    pub fn cycle(&self) -> Option<&[Channel]> {
        self.failures.iter().find_map(|f| match f {
            CheckFailure::DependencyCycle { cycle } => Some(cycle.as_slice()),
            _ => None,
        })
    }

    fn push(&mut self, f: CheckFailure, max: usize) {
        if self.failures.len() < max {
            self.failures.push(f);
        }
    }
}

/// The output VC for a packet that arrived at switch `policy`'s owner on
/// `in_port` (a host port gives `None` dimension) on `in_vc`, leaving through
/// `out_port`. Shared semantics of [`VcPolicy`] for checker and data plane.
pub fn next_vc(policy: &VcPolicy, in_port: PortNo, in_vc: u8, out_port: PortNo) -> u8 {
    match policy {
        VcPolicy::Keep => in_vc,
        // The escape network is VC 0 (adaptive VCs are above it).
        VcPolicy::LocalReroute => 0,
        VcPolicy::Dateline { port_dim, dateline } => {
            let dim = |p: PortNo| port_dim.get(p as usize).copied().flatten();
            let out_dim = dim(out_port);
            let mut vc = if out_dim.is_some() && dim(in_port) == out_dim {
                in_vc
            } else {
                0
            };
            if dateline.get(out_port as usize).copied().unwrap_or(false) {
                vc = 1;
            }
            vc
        }
        // Leg 0's escape network (every leg's is a copy on its own VCs, and
        // a packet only moves from leg i to leg i+1: seed 004 §3.9).
        VcPolicy::Legs {
            escape_per_leg,
            port_dim,
            dateline,
            ..
        } => super::vc::leg_escape_vc(
            *escape_per_leg,
            port_dim,
            dateline,
            0,
            in_port as usize,
            in_vc,
            out_port as usize,
        ),
    }
}

/// The alive switch port a host injects through (its first alive port).
pub fn host_attachment(topo: &Topology, faults: &FaultSet, h: HostId) -> Option<PortRef> {
    topo.out_neighbours(NodeRef::Host(h), faults)
        .into_iter()
        .map(|(_, peer)| peer)
        .find(|peer| matches!(peer.node, NodeRef::Switch(_)) && !faults.node_failed(peer.node))
}

/// Follows deterministic routes (the escape port for adaptive tables) from
/// host to host; built once, then [`Tracer::trace`] per pair.
pub struct Tracer<'a> {
    ctx: Ctx<'a>,
}

impl<'a> Tracer<'a> {
    pub fn new(topo: &'a Topology, faults: &'a FaultSet, tables: &'a RoutingTables) -> Self {
        Tracer {
            ctx: Ctx::new(topo, faults, tables),
        }
    }

    /// The hops (switch, output port) from `src` to `dst`, the last one
    /// being the port facing `dst`; or why the route fails.
    pub fn trace(&self, src: HostId, dst: HostId) -> Result<Vec<Hop>, CheckFailure> {
        if self.ctx.tables.switches.len() != self.ctx.topo.num_switches() {
            return Err(CheckFailure::TableCount {
                tables: self.ctx.tables.switches.len(),
                switches: self.ctx.topo.num_switches(),
            });
        }
        self.ctx.trace(src, dst)
    }

    /// The switch `h` injects into, if it has an alive port.
    pub fn injection_switch(&self, h: HostId) -> Option<SwitchId> {
        self.ctx.attach.get(h as usize).copied().flatten()
    }
}

/// Transition safety (seed 001 §2.4 super-function argument, checklist X4):
/// while `new` replaces `old` switch by switch, a packet may meet either
/// table at every switch. The union is expressed as adaptive tables with
/// both entries as candidates, and its CDG (over every candidate, on the
/// fabric minus `faults`) must be acyclic. Returns the cycle, if any.
pub fn check_transition(
    topo: &Topology,
    faults: &FaultSet,
    old: &RoutingTables,
    new: &RoutingTables,
) -> Option<Vec<Channel>> {
    use super::{AdaptiveEntry, AdaptiveTable};
    let nh = topo.num_hosts() as HostId;
    let switches = old
        .switches
        .iter()
        .zip(&new.switches)
        .map(|(a, b)| {
            SwitchTable::Adaptive(AdaptiveTable {
                entries: (0..nh)
                    .map(|d| {
                        let mut candidates = a.candidates(d);
                        for p in b.candidates(d) {
                            if !candidates.contains(&p) {
                                candidates.push(p);
                            }
                        }
                        AdaptiveEntry {
                            escape: b.lookup(d),
                            candidates,
                            misroute: Vec::new(),
                        }
                    })
                    .collect(),
            })
        })
        .collect();
    let union = RoutingTables {
        engine: format!("{} -> {}", old.engine, new.engine),
        switches,
        vcs: old.vcs.max(new.vcs),
        vc_policy: new.vc_policy.clone(),
    };
    let ctx = Ctx::new(topo, faults, &union);
    ctx.build_cdg(true).find_cycle()
}

/// Checks `tables` on `topo` minus `faults` (see the module doc).
pub fn check(
    topo: &Topology,
    faults: &FaultSet,
    tables: &RoutingTables,
    opts: &CheckOptions,
) -> CheckReport {
    let mut report = CheckReport::default();
    let ns = topo.num_switches();
    if tables.switches.len() != ns {
        report.failures.push(CheckFailure::TableCount {
            tables: tables.switches.len(),
            switches: ns,
        });
        return report;
    }
    check_entries(topo, faults, tables, &mut report, opts.max_listed);
    let ctx = Ctx::new(topo, faults, tables);
    let reach = ctx.switch_reachability();
    let nh = topo.num_hosts();
    let adaptive = tables
        .switches
        .iter()
        .any(|t| matches!(t, SwitchTable::Adaptive(_)));
    for dst in 0..nh as HostId {
        let mut memo = vec![State::Unknown; ns];
        for src in 0..nh as HostId {
            if src == dst {
                continue;
            }
            let connected = match (ctx.attach[src as usize], &ctx.dst_switches[dst as usize]) {
                (Some(a), ds) => ds.iter().any(|&d| reach.get(a, d)),
                (None, _) => false,
            };
            if !connected {
                report.unreachable_by_topology += 1;
                continue;
            }
            report.pairs_checked += 1;
            let Some(start) = ctx.attach[src as usize] else {
                continue;
            };
            let ok = if adaptive {
                match ctx.explore_adaptive(src, dst, start, opts.allow_candidate_cycles) {
                    Ok(()) => true,
                    Err(f) => {
                        report.push(f, opts.max_listed);
                        false
                    }
                }
            } else {
                ctx.resolve(dst, start, &mut memo) == State::Delivered
            };
            if ok {
                report.delivered += 1;
            } else {
                report.failed_pairs += 1;
                if !adaptive {
                    let f = ctx.trace(src, dst).expect_err("memo said it fails");
                    report.push(f, opts.max_listed);
                }
            }
        }
    }
    if opts.deadlock {
        report.cdg_checked = true;
        let cdg = ctx.build_cdg(opts.cdg_all_candidates);
        report.dependencies = cdg.edge_count() as u64;
        if let Some(cycle) = cdg.find_cycle() {
            report
                .failures
                .push(CheckFailure::DependencyCycle { cycle });
        }
    }
    report
}

/// Every entry of every alive switch must name an existing, cabled port.
fn check_entries(
    topo: &Topology,
    faults: &FaultSet,
    tables: &RoutingTables,
    report: &mut CheckReport,
    max: usize,
) {
    let nh = topo.num_hosts() as HostId;
    for (s, table) in tables.switches.iter().enumerate() {
        let sid = s as SwitchId;
        if faults.node_failed(NodeRef::Switch(sid)) {
            continue;
        }
        let radix = topo.switches[s].ports.len();
        for dest in 0..nh {
            for port in table.candidates(dest) {
                let reason = if port as usize >= radix {
                    Some("does not exist")
                } else if topo.link_at(PortRef::switch(sid, port)).is_none() {
                    Some("is not cabled")
                } else {
                    None
                };
                if let Some(reason) = reason {
                    report.push(
                        CheckFailure::BadEntry {
                            switch: sid,
                            dest,
                            port,
                            reason,
                        },
                        max,
                    );
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Unknown,
    InProgress,
    Delivered,
    Failed,
}

/// Where one forwarding step leads.
enum Step {
    Switch(SwitchId, PortNo),
    Host(HostId),
    NoRoute,
    BadPort,
    Fault,
}

/// Dense reachability between switches (bitset rows, one BFS per
/// injection switch).
struct Reach {
    rows: Vec<Option<Vec<u64>>>,
}

impl Reach {
    fn get(&self, from: SwitchId, to: SwitchId) -> bool {
        self.rows[from as usize]
            .as_ref()
            .map(|r| r[to as usize / 64] >> (to % 64) & 1 == 1)
            .unwrap_or(false)
    }
}

struct Ctx<'a> {
    topo: &'a Topology,
    faults: &'a FaultSet,
    tables: &'a RoutingTables,
    /// Injection switch of each host (first alive port).
    attach: Vec<Option<SwitchId>>,
    /// The switch port each host injects into.
    attach_port: Vec<Option<PortNo>>,
    /// Every alive switch a host can be delivered from.
    dst_switches: Vec<Vec<SwitchId>>,
}

impl<'a> Ctx<'a> {
    fn new(topo: &'a Topology, faults: &'a FaultSet, tables: &'a RoutingTables) -> Self {
        let mut attach = Vec::with_capacity(topo.num_hosts());
        let mut attach_port = Vec::with_capacity(topo.num_hosts());
        let mut dst_switches = vec![Vec::new(); topo.num_hosts()];
        for h in 0..topo.num_hosts() as HostId {
            let a = host_attachment(topo, faults, h);
            attach.push(a.and_then(|p| match p.node {
                NodeRef::Switch(s) => Some(s),
                NodeRef::Host(_) => None,
            }));
            attach_port.push(a.map(|p| p.port));
        }
        for s in 0..topo.num_switches() as SwitchId {
            if faults.node_failed(NodeRef::Switch(s)) {
                continue;
            }
            for (_, peer) in topo.out_neighbours(NodeRef::Switch(s), faults) {
                if let NodeRef::Host(h) = peer.node {
                    dst_switches[h as usize].push(s);
                }
            }
        }
        Ctx {
            topo,
            faults,
            tables,
            attach,
            attach_port,
            dst_switches,
        }
    }

    fn switch_reachability(&self) -> Reach {
        let ns = self.topo.num_switches();
        let words = ns.div_ceil(64);
        let mut rows: Vec<Option<Vec<u64>>> = vec![None; ns];
        for a in self.attach.iter().flatten() {
            if rows[*a as usize].is_some() {
                continue;
            }
            let mut row = vec![0u64; words];
            row[*a as usize / 64] |= 1 << (a % 64);
            let mut queue = VecDeque::from([*a]);
            while let Some(u) = queue.pop_front() {
                for (_, peer) in self.topo.out_neighbours(NodeRef::Switch(u), self.faults) {
                    if let NodeRef::Switch(v) = peer.node {
                        if self.faults.node_failed(peer.node) {
                            continue;
                        }
                        if row[v as usize / 64] >> (v % 64) & 1 == 0 {
                            row[v as usize / 64] |= 1 << (v % 64);
                            queue.push_back(v);
                        }
                    }
                }
            }
            rows[*a as usize] = Some(row);
        }
        Reach { rows }
    }

    /// Where switch `s` sends a packet for `dst` through `port`.
    fn step_port(&self, s: SwitchId, port: PortNo) -> Step {
        let here = PortRef::switch(s, port);
        if port as usize >= self.topo.switches[s as usize].ports.len() || !self.topo.can_send(here)
        {
            return Step::BadPort;
        }
        let Some(link) = self.topo.link_at(here) else {
            return Step::BadPort;
        };
        let Some(peer) = self.topo.peer(here) else {
            return Step::BadPort;
        };
        if !self.faults.link_alive(self.topo, link) || self.faults.node_failed(peer.node) {
            return Step::Fault;
        }
        match peer.node {
            NodeRef::Host(h) => Step::Host(h),
            NodeRef::Switch(n) => Step::Switch(n, peer.port),
        }
    }

    fn step(&self, s: SwitchId, dst: HostId) -> (Option<PortNo>, Step) {
        match self.tables.switches[s as usize].lookup(dst) {
            None => (None, Step::NoRoute),
            Some(p) => (Some(p), self.step_port(s, p)),
        }
    }

    /// Memoised outcome of forwarding `dst` from switch `start`.
    fn resolve(&self, dst: HostId, start: SwitchId, memo: &mut [State]) -> State {
        let mut stack = Vec::new();
        let mut cur = start;
        let outcome = loop {
            match memo[cur as usize] {
                State::Delivered => break State::Delivered,
                State::Failed | State::InProgress => break State::Failed,
                State::Unknown => {}
            }
            memo[cur as usize] = State::InProgress;
            stack.push(cur);
            match self.step(cur, dst).1 {
                Step::Switch(n, _) => cur = n,
                Step::Host(h) if h == dst => break State::Delivered,
                _ => break State::Failed,
            }
        };
        for s in stack {
            memo[s as usize] = outcome;
        }
        outcome
    }

    /// Follows one route and returns its hops, or the failure.
    fn trace(&self, src: HostId, dst: HostId) -> Result<Vec<Hop>, CheckFailure> {
        let mut path = Vec::new();
        let Some(mut cur) = self.attach[src as usize] else {
            return Err(CheckFailure::NoRoute {
                src,
                dst,
                at: 0,
                path,
            });
        };
        // A deterministic route longer than #switches hops revisits a switch.
        let bound = self.topo.num_switches();
        loop {
            if path.len() > bound {
                return Err(CheckFailure::Loop { src, dst, path });
            }
            let (port, step) = self.step(cur, dst);
            if let Some(port) = port {
                path.push(Hop { switch: cur, port });
            }
            match step {
                Step::Switch(n, _) => cur = n,
                Step::Host(h) if h == dst => return Ok(path),
                Step::Host(reached) => {
                    return Err(CheckFailure::Misdelivered {
                        src,
                        dst,
                        reached,
                        path,
                    })
                }
                Step::NoRoute => {
                    return Err(CheckFailure::NoRoute {
                        src,
                        dst,
                        at: cur,
                        path,
                    })
                }
                Step::BadPort => return Err(CheckFailure::BadPort { src, dst, path }),
                Step::Fault => return Err(CheckFailure::ThroughFault { src, dst, path }),
            }
        }
    }

    /// Set-based exploration of adaptive tables from `start`: every candidate
    /// of every reached switch must be usable, candidates must not cycle
    /// (unless allowed), and the escape path alone must deliver.
    fn explore_adaptive(
        &self,
        src: HostId,
        dst: HostId,
        start: SwitchId,
        allow_cycles: bool,
    ) -> Result<(), CheckFailure> {
        self.trace(src, dst)?; // the escape (deterministic) path
        let ns = self.topo.num_switches();
        // Iterative DFS with colours: 0 white, 1 grey (on stack), 2 black.
        let mut colour = vec![0u8; ns];
        let mut stack: Vec<(SwitchId, Vec<PortNo>, usize)> = Vec::new();
        let cands = |s: SwitchId| self.tables.switches[s as usize].candidates(dst);
        colour[start as usize] = 1;
        stack.push((start, cands(start), 0));
        let path_of = |stack: &[(SwitchId, Vec<PortNo>, usize)]| -> Vec<Hop> {
            stack
                .iter()
                .filter(|(_, c, i)| *i > 0 && *i <= c.len())
                .map(|(s, c, i)| Hop {
                    switch: *s,
                    port: c[*i - 1],
                })
                .collect()
        };
        while let Some(top) = stack.last_mut() {
            let (s, ref c, i) = *top;
            if c.is_empty() {
                let path = path_of(&stack);
                return Err(CheckFailure::NoRoute {
                    src,
                    dst,
                    at: s,
                    path,
                });
            }
            if i == c.len() {
                colour[s as usize] = 2;
                stack.pop();
                continue;
            }
            let port = c[i];
            top.2 += 1;
            match self.step_port(s, port) {
                Step::Switch(n, _) => match colour[n as usize] {
                    0 => {
                        colour[n as usize] = 1;
                        let cn = cands(n);
                        stack.push((n, cn, 0));
                    }
                    1 if !allow_cycles => {
                        return Err(CheckFailure::CandidateCycle {
                            src,
                            dst,
                            path: path_of(&stack),
                        })
                    }
                    _ => {}
                },
                Step::Host(h) if h == dst => {}
                Step::Host(reached) => {
                    return Err(CheckFailure::Misdelivered {
                        src,
                        dst,
                        reached,
                        path: path_of(&stack),
                    })
                }
                Step::NoRoute => unreachable!("step_port never yields NoRoute"),
                Step::BadPort => {
                    return Err(CheckFailure::BadPort {
                        src,
                        dst,
                        path: path_of(&stack),
                    })
                }
                Step::Fault => {
                    return Err(CheckFailure::ThroughFault {
                        src,
                        dst,
                        path: path_of(&stack),
                    })
                }
            }
        }
        Ok(())
    }

    /// The CDG over the channels actually used by the (escape) routes of
    /// every connected pair.
    /// The ports a packet for `dst` may leave `s` by: the deterministic
    /// (escape) port, or every candidate.
    fn next_ports(&self, s: SwitchId, dst: HostId, all: bool, out: &mut Vec<PortNo>) {
        out.clear();
        let t = &self.tables.switches[s as usize];
        if all {
            out.extend(t.candidates(dst));
        } else if let Some(p) = t.lookup(dst) {
            out.push(p);
        }
    }

    fn build_cdg(&self, all_candidates: bool) -> Cdg {
        let mut outs = Vec::new();
        let topo = self.topo;
        let ns = topo.num_switches();
        // Channel index: port_base[s] + port, times #VCs.
        let mut port_base = Vec::with_capacity(ns + 1);
        let mut acc = 0usize;
        for s in &topo.switches {
            port_base.push(acc);
            acc += s.ports.len();
        }
        port_base.push(acc);
        let vcs = self.tables.vcs.max(1) as usize;
        let n_chan = acc * vcs;
        let chan = |s: SwitchId, p: PortNo, vc: u8| -> usize {
            (port_base[s as usize] + p as usize) * vcs + (vc as usize).min(vcs - 1)
        };
        // Out-edges per held channel; a channel has at most radix·VCs
        // successors, so a linear scan dedups faster than hashing.
        let mut succ: Vec<Vec<u32>> = vec![Vec::new(); n_chan];
        // Per destination, states (switch, in port, in vc), stamped.
        let mut visited = vec![u32::MAX; n_chan];
        // Injection dedup: hosts whose first hop takes the same channel
        // lead to the same state.
        let mut injected = vec![u32::MAX; n_chan];
        let mut queue: Vec<(SwitchId, PortNo, u8, Option<usize>)> = Vec::new();
        for dst in 0..topo.num_hosts() as HostId {
            queue.clear();
            for src in 0..topo.num_hosts() as HostId {
                if src == dst {
                    continue;
                }
                let (Some(s), Some(hp)) =
                    (self.attach[src as usize], self.attach_port[src as usize])
                else {
                    continue;
                };
                self.next_ports(s, dst, all_candidates, &mut outs);
                for &p in &outs {
                    let vc = next_vc(self.tables.vc_policy(s as usize), hp, 0, p);
                    let c = chan(s, p, vc);
                    if injected[c] == dst {
                        continue;
                    }
                    injected[c] = dst;
                    if let Step::Switch(n, np) = self.step_port(s, p) {
                        queue.push((n, np, vc, Some(c)));
                    }
                }
            }
            while let Some((s, in_port, in_vc, held)) = queue.pop() {
                // The state (switch, in port, in VC) determines the held
                // channel (the peer's output port), so a visited state has
                // already contributed its dependency.
                let key = chan(s, in_port, in_vc);
                if visited[key] == dst {
                    continue;
                }
                visited[key] = dst;
                self.next_ports(s, dst, all_candidates, &mut outs);
                for &p in &outs {
                    let vc = next_vc(self.tables.vc_policy(s as usize), in_port, in_vc, p);
                    let c = chan(s, p, vc);
                    if let Some(h) = held {
                        if !succ[h].contains(&(c as u32)) {
                            succ[h].push(c as u32);
                        }
                    }
                    if let Step::Switch(n, np) = self.step_port(s, p) {
                        queue.push((n, np, vc, Some(c)));
                    }
                }
            }
        }
        let edges = succ
            .iter()
            .enumerate()
            .flat_map(|(a, out)| out.iter().map(move |&b| (a as u32, b)))
            .collect();
        Cdg {
            n: n_chan,
            edges,
            decode: Box::new(move |i: usize| {
                let vc = (i % vcs) as u8;
                let flat = i / vcs;
                let s = port_base.partition_point(|&b| b <= flat) - 1;
                Channel {
                    switch: s as SwitchId,
                    port: (flat - port_base[s]) as PortNo,
                    vc,
                }
            }),
        }
    }
}

/// A channel dependency graph (CSR form built on demand).
struct Cdg {
    n: usize,
    edges: Vec<(u32, u32)>,
    decode: Box<dyn Fn(usize) -> Channel>,
}

impl Cdg {
    fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// One cycle as a list of channels, if the graph has any (iterative DFS
    /// with colours; O(V + E), no recursion so it scales to big fabrics).
    fn find_cycle(&self) -> Option<Vec<Channel>> {
        let mut off = vec![0usize; self.n + 1];
        for &(a, _) in &self.edges {
            off[a as usize + 1] += 1;
        }
        for i in 0..self.n {
            off[i + 1] += off[i];
        }
        let mut adj = vec![0u32; self.edges.len()];
        let mut fill = off.clone();
        for &(a, b) in &self.edges {
            adj[fill[a as usize]] = b;
            fill[a as usize] += 1;
        }
        let mut colour = vec![0u8; self.n];
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for root in 0..self.n {
            if colour[root] != 0 || off[root] == off[root + 1] {
                continue;
            }
            colour[root] = 1;
            stack.push((root, off[root]));
            while let Some(top) = stack.last_mut() {
                let (v, i) = *top;
                if i == off[v + 1] {
                    colour[v] = 2;
                    stack.pop();
                    continue;
                }
                top.1 += 1;
                let w = adj[i] as usize;
                match colour[w] {
                    0 => {
                        colour[w] = 1;
                        stack.push((w, off[w]));
                    }
                    1 => {
                        let from = stack.iter().position(|&(x, _)| x == w).unwrap_or(0);
                        return Some(
                            stack[from..]
                                .iter()
                                .map(|&(x, _)| (self.decode)(x))
                                .collect(),
                        );
                    }
                    _ => {}
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::Lft;
    use crate::topology::generators::kary_ntree;
    use crate::topology::Family;

    /// A plain shortest-path LFT (lowest port among shortest ones), enough to
    /// have a correct table to break.
    fn shortest_lft(topo: &Topology, faults: &FaultSet) -> RoutingTables {
        let nh = topo.num_hosts();
        let mut switches = vec![vec![None; nh]; topo.num_switches()];
        for d in 0..nh as HostId {
            let dist = topo.distances_from(NodeRef::Host(d), faults);
            for (s, lft) in switches.iter_mut().enumerate() {
                let Some(ds) = dist[nh + s] else { continue };
                for (p, peer) in topo.out_neighbours(NodeRef::Switch(s as SwitchId), faults) {
                    let i = match peer.node {
                        NodeRef::Host(h) => h as usize,
                        NodeRef::Switch(x) => nh + x as usize,
                    };
                    if dist[i] == Some(ds - 1)
                        && (matches!(peer.node, NodeRef::Switch(_))
                            || peer.node == NodeRef::Host(d))
                    {
                        lft[d as usize] = Some(p);
                        break;
                    }
                }
            }
        }
        RoutingTables {
            engine: "test-sp".into(),
            switches: switches
                .into_iter()
                .map(|ports| SwitchTable::Lft(Lft { ports }))
                .collect(),
            vcs: 1,
            vc_policy: Vec::new(),
        }
    }

    fn set(t: &mut RoutingTables, s: SwitchId, d: HostId, p: Option<PortNo>) {
        match &mut t.switches[s as usize] {
            SwitchTable::Lft(l) => l.ports[d as usize] = p,
            _ => unreachable!(),
        }
    }

    #[test]
    fn correct_tables_pass_on_a_tree() {
        let topo = kary_ntree(2, 3).unwrap();
        let t = shortest_lft(&topo, &FaultSet::none());
        let r = check(&topo, &FaultSet::none(), &t, &CheckOptions::default());
        assert!(r.is_ok(), "{:?}", r.failures);
        assert_eq!(r.pairs_checked, 56);
        assert_eq!(r.delivered, 56);
        assert!(r.cdg_checked && r.dependencies > 0);
    }

    #[test]
    fn a_loop_is_caught() {
        // 2-ary 2-tree: leaves 0, 1 (hosts 0,1 and 2,3), tops 2, 3.
        let topo = kary_ntree(2, 2).unwrap();
        let mut t = shortest_lft(&topo, &FaultSet::none());
        // Leaf 0 sends host 2 up port 2 (to top 2); top 2 sends it back down.
        set(&mut t, 0, 2, Some(2));
        set(&mut t, 2, 2, Some(0));
        let r = check(&topo, &FaultSet::none(), &t, &CheckOptions::default());
        assert_eq!(r.failed_pairs, 2, "{:?}", r.failures);
        assert!(r
            .failures
            .iter()
            .any(|f| matches!(f, CheckFailure::Loop { src: 0, dst: 2, .. })));
    }

    #[test]
    fn wrong_and_uncabled_ports_are_caught() {
        let topo = kary_ntree(2, 2).unwrap();
        let mut t = shortest_lft(&topo, &FaultSet::none());
        set(&mut t, 0, 3, Some(9));
        set(&mut t, 2, 0, Some(3)); // a top switch's up port: not cabled
        let r = check(&topo, &FaultSet::none(), &t, &CheckOptions::default());
        assert!(r.failures.iter().any(|f| matches!(
            f,
            CheckFailure::BadEntry {
                switch: 0,
                dest: 3,
                port: 9,
                reason: "does not exist"
            }
        )));
        assert!(r.failures.iter().any(|f| matches!(
            f,
            CheckFailure::BadEntry {
                switch: 2,
                dest: 0,
                port: 3,
                reason: "is not cabled"
            }
        )));
        assert!(r
            .failures
            .iter()
            .any(|f| matches!(f, CheckFailure::BadPort { .. })));
        assert!(!r.is_ok());
    }

    #[test]
    fn a_misdelivery_is_caught() {
        let topo = kary_ntree(2, 2).unwrap();
        let mut t = shortest_lft(&topo, &FaultSet::none());
        set(&mut t, 1, 2, Some(1)); // leaf 1 hands host 2's packets to host 3
        let r = check(&topo, &FaultSet::none(), &t, &CheckOptions::default());
        assert!(r.failures.iter().any(|f| matches!(
            f,
            CheckFailure::Misdelivered {
                dst: 2,
                reached: 3,
                ..
            }
        )));
    }

    #[test]
    fn a_path_through_a_failed_link_is_caught_and_unreachable_pairs_are_counted() {
        let topo = kary_ntree(2, 2).unwrap();
        let t = shortest_lft(&topo, &FaultSet::none());
        // Fail the link leaf 0 port 2 → top 2, which routes to hosts 2, 3 use.
        let l = topo.link_at(PortRef::switch(0, 2)).unwrap();
        let faults = FaultSet::with_links([l]);
        let r = check(&topo, &faults, &t, &CheckOptions::default());
        assert!(r
            .failures
            .iter()
            .any(|f| matches!(f, CheckFailure::ThroughFault { src: 0, .. })));
        // Recomputing on the degraded fabric fixes it.
        let t2 = shortest_lft(&topo, &faults);
        assert!(check(&topo, &faults, &t2, &CheckOptions::default()).is_ok());
        // Cutting host 0's only link makes its pairs unreachable, not failed.
        let hl = topo.link_at(PortRef::host(0, 0)).unwrap();
        let f3 = FaultSet::with_links([hl]);
        let r3 = check(
            &topo,
            &f3,
            &shortest_lft(&topo, &f3),
            &CheckOptions::default(),
        );
        assert!(r3.is_ok(), "{:?}", r3.failures);
        assert_eq!(r3.unreachable_by_topology, 6);
        assert_eq!(r3.pairs_checked, 6);
    }

    /// A unidirectional-routed ring of 4 switches, one host each: every
    /// packet goes clockwise (port 1), so the CDG is a 4-cycle on 1 VC.
    fn clockwise_ring() -> (Topology, RoutingTables) {
        let n = 4u32;
        let mut topo = Topology::new("ring4", Family::Custom);
        for i in 0..n {
            topo.add_switch(format!("r{i}"), 3);
            topo.add_host(format!("h{i}"), 1);
            topo.connect(PortRef::host(i, 0), PortRef::switch(i, 0), true)
                .unwrap();
        }
        for i in 0..n {
            topo.connect(PortRef::switch(i, 1), PortRef::switch((i + 1) % n, 2), true)
                .unwrap();
        }
        let switches = (0..n)
            .map(|s| {
                SwitchTable::Lft(Lft {
                    ports: (0..n).map(|d| Some(if d == s { 0 } else { 1 })).collect(),
                })
            })
            .collect();
        let t = RoutingTables {
            engine: "ring".into(),
            switches,
            vcs: 1,
            vc_policy: Vec::new(),
        };
        (topo, t)
    }

    #[test]
    fn a_cyclic_dependency_on_a_ring_with_one_vc_is_caught() {
        let (topo, t) = clockwise_ring();
        let r = check(&topo, &FaultSet::none(), &t, &CheckOptions::default());
        assert_eq!(r.delivered, 12);
        let cycle = r.cycle().expect("a 1-VC ring must have a cycle");
        assert_eq!(cycle.len(), 4);
        assert!(cycle.iter().all(|c| c.port == 1 && c.vc == 0));
        assert!(!r.is_ok());
        // Without the deadlock check the same tables pass.
        let quiet = CheckOptions {
            deadlock: false,
            ..CheckOptions::default()
        };
        assert!(check(&topo, &FaultSet::none(), &t, &quiet).is_ok());
    }

    /// Ring of 4 with clockwise routes that never cross the link leaving
    /// switch `skip` clockwise (those packets go counter-clockwise).
    fn ring_avoiding(skip: u32) -> RoutingTables {
        let n = 4u32;
        let switches = (0..n)
            .map(|s| {
                SwitchTable::Lft(Lft {
                    ports: (0..n)
                        .map(|d| {
                            let crosses = (skip + n - s) % n < (d + n - s) % n;
                            Some(if d == s {
                                0
                            } else if crosses {
                                2
                            } else {
                                1
                            })
                        })
                        .collect(),
                })
            })
            .collect();
        RoutingTables {
            engine: format!("ring-skip-{skip}"),
            switches,
            vcs: 1,
            vc_policy: Vec::new(),
        }
    }

    #[test]
    fn a_transition_between_two_acyclic_tables_can_deadlock() {
        let (topo, _) = clockwise_ring();
        let f = FaultSet::none();
        let a = ring_avoiding(3);
        let b = ring_avoiding(1);
        for t in [&a, &b] {
            let r = check(&topo, &f, t, &CheckOptions::default());
            assert!(r.is_ok(), "{}: {:?}", t.engine, r.failures);
        }
        assert!(check_transition(&topo, &f, &a, &a).is_none());
        let cycle = check_transition(&topo, &f, &a, &b).expect("the union is cyclic");
        assert!(cycle.len() >= 4);
    }

    #[test]
    fn a_dateline_breaks_the_ring_cycle() {
        let (topo, mut t) = clockwise_ring();
        t.vcs = 2;
        t.vc_policy = (0..4)
            .map(|s| VcPolicy::Dateline {
                port_dim: vec![None, Some(0), Some(0)],
                // The wrap link leaves switch 3 through port 1.
                dateline: vec![false, s == 3, false],
            })
            .collect();
        let r = check(&topo, &FaultSet::none(), &t, &CheckOptions::default());
        assert!(r.is_ok(), "{:?}", r.failures);
    }

    #[test]
    fn adaptive_candidates_are_all_followed() {
        use crate::routing::{AdaptiveEntry, AdaptiveTable};
        let topo = kary_ntree(2, 2).unwrap();
        let base = shortest_lft(&topo, &FaultSet::none());
        let to_adaptive = |t: &RoutingTables, extra: Option<(SwitchId, HostId, PortNo)>| {
            let switches = t
                .switches
                .iter()
                .enumerate()
                .map(|(s, st)| {
                    let SwitchTable::Lft(l) = st else {
                        unreachable!()
                    };
                    SwitchTable::Adaptive(AdaptiveTable {
                        entries: l
                            .ports
                            .iter()
                            .enumerate()
                            .map(|(d, p)| {
                                let mut candidates: Vec<PortNo> = p.iter().copied().collect();
                                if let Some((xs, xd, xp)) = extra {
                                    if xs as usize == s && xd as usize == d {
                                        candidates.push(xp);
                                    }
                                }
                                AdaptiveEntry {
                                    candidates,
                                    escape: *p,
                                    misroute: Vec::new(),
                                }
                            })
                            .collect(),
                    })
                })
                .collect();
            RoutingTables {
                engine: "adaptive".into(),
                switches,
                vcs: 1,
                vc_policy: Vec::new(),
            }
        };
        let ok = to_adaptive(&base, None);
        assert!(check(&topo, &FaultSet::none(), &ok, &CheckOptions::default()).is_ok());
        // Leaf 0 may also send host 1's packets up: top 2 brings them back to
        // leaf 0 (a candidate cycle), and the escape is still fine.
        let cyc = to_adaptive(&base, Some((0, 1, 2)));
        let r = check(&topo, &FaultSet::none(), &cyc, &CheckOptions::default());
        assert!(
            r.failures
                .iter()
                .any(|f| matches!(f, CheckFailure::CandidateCycle { src: 0, dst: 1, .. })),
            "{:?}",
            r.failures
        );
        // A candidate to host 0 for host 1 is a misdelivery.
        let bad = to_adaptive(&base, Some((0, 1, 0)));
        let r = check(&topo, &FaultSet::none(), &bad, &CheckOptions::default());
        assert!(r.failures.iter().any(|f| matches!(
            f,
            CheckFailure::Misdelivered {
                dst: 1,
                reached: 0,
                ..
            }
        )));
    }
}
