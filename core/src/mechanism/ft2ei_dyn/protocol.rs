//! Dynamic FT²EI (seed 000 §4.5–§4.6): the switch-side control-packet
//! protocol that installs exclusion intervals while traffic runs, with no
//! controller involvement.
//!
//! Each switch of a k-ary n-tree holds its own exclusion registers (one set
//! of up to `n_ei` cyclic intervals per up port) and reacts to
//! - a **local fault** detected on one of its ports (`on_local_fault`): an up
//!   port excludes `[0..N−1]`; a down port starts a `CTRL{X, LIB, UIB}` that
//!   climbs (one port, `up_ports_for_ctrl`) to the top stage and is flooded
//!   down to stage e−1, whose switches exclude `[LIB..UIB]` on the arrival
//!   port;
//! - a **control packet** (`on_ctrl`), the direction being implicit in the
//!   arrival port (down port = climbing, up port = descending).
//!
//! After every exclusion update the cascade (`check_unreachable`, §4.4)
//! runs: destinations excluded on every up port are announced with
//! `CTRL{W, U}` directly on W's live down ports. A set that is not one arc
//! is sent as one packet per maximal arc (§8 #14), as the static oracle
//! [`crate::routing::ft2ei`] does, so that after one fault every switch holds
//! exactly the oracle's exclusions.
//!
//! Emergency paths (§4.6): while the protocol runs, a packet whose only
//! output is a dead down port is deflected down another live down port; the
//! child routes it up (d is not below it), and it must not leave through the
//! port it arrived on, which would send it straight back to the faulty
//! switch (the ping-pong of §8) — [`Ft2eiDynSwitch::route`] takes that port
//! out for packets tagged as deflected.
//!
//! The logic is sans-IO: calls return the control packets to send as
//! `(port, CTRL)` pairs; the switch core carries them as control flits.

use crate::routing::ft2ei::{add_exclusion_to, arcs_of};
use crate::routing::interval::{CyclicInterval, KaryTree};
use crate::topology::{HostId, PortNo, SwitchId};

/// What the controller tells every switch to turn the protocol on: the
/// tree and the exclusion slots per up port (the switch's id is its place).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ft2eiDynConfig {
    pub k: u32,
    pub n: u32,
    pub n_ei: usize,
    /// Deflect packets caught by the fault down an emergency path (§4.6
    /// option 2, the thesis's recommendation); `false` drops them (option
    /// 1, recovery left to a higher level).
    #[serde(default = "yes")]
    pub emergency: bool,
    /// The fabric is a k-ary n-RUFT (seed 000 §2.2), not a k-ary n-tree:
    /// one path per pair and one-way links, so a dead output only has its
    /// destinations excluded where it starts (no control packets, no
    /// emergency paths; docs/topology.md, "One-way links").
    #[serde(default)]
    pub ruft: bool,
}

fn yes() -> bool {
    true
}

impl Ft2eiDynConfig {
    pub fn tree(&self) -> KaryTree {
        KaryTree {
            k: self.k,
            n: self.n,
        }
    }
    /// The state of switch `id`, or why this configuration cannot run.
    pub fn switch(&self, id: SwitchId) -> Result<Ft2eiDynSwitch, DynError> {
        let t = self.tree();
        if t.k < 2 || t.n < 1 || id >= t.switches() {
            return Err(DynError::NotInTree {
                switch: id,
                k: t.k,
                n: t.n,
            });
        }
        let mut s = Ft2eiDynSwitch::new(t, id, self.n_ei)?;
        s.emergency = self.emergency && !self.ruft;
        s.ruft = self.ruft;
        Ok(s)
    }
}

/// The control packet `CTRL{FaultySwitch, ELIB, EUIB}` (§4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ctrl {
    /// The switch that started the update (the faulty switch of a down-link
    /// fault, or the announcing switch of a cascade step).
    pub faulty: SwitchId,
    /// The interval to exclude, `[elib..euib]` modulo N.
    pub elib: HostId,
    pub euib: HostId,
}

impl Ctrl {
    pub fn interval(&self) -> CyclicInterval {
        CyclicInterval::new(self.elib, self.euib)
    }
}

/// One control packet to transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Send {
    pub port: PortNo,
    pub ctrl: Ctrl,
}

/// Why the protocol cannot proceed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DynError {
    #[error("switch {switch}: port {port} does not exist (radix {radix})")]
    NoSuchPort {
        switch: SwitchId,
        port: PortNo,
        radix: u32,
    },
    #[error(
        "switch {switch}: the link on port {port} to host {host} failed; host links are not protected"
    )]
    HostLink {
        switch: SwitchId,
        port: PortNo,
        host: HostId,
    },
    #[error(
        "switch {switch}: malformed control packet (faulty switch {faulty}, [{elib}..{euib}]) \
         for {switches} switches and {hosts} hosts"
    )]
    BadCtrl {
        switch: SwitchId,
        faulty: SwitchId,
        elib: HostId,
        euib: HostId,
        switches: u32,
        hosts: u32,
    },
    #[error(
        "switch {switch}: leaf excludes {count} destination(s) from host {first} on every up port: \
         fault combination not tolerated"
    )]
    LeafCutOff {
        switch: SwitchId,
        first: HostId,
        count: u32,
    },
    #[error(
        "switch {switch}: no set of up ports covers every destination; the control packet \
         cannot climb, fault combination not tolerated"
    )]
    NoCtrlPath { switch: SwitchId },
    #[error("switch {switch} is not a switch of a {k}-ary {n}-tree")]
    NotInTree { switch: SwitchId, k: u32, n: u32 },
    #[error("switch {switch}: n_ei = 0, at least one exclusion interval per up port is needed")]
    NoExclusionSlots { switch: SwitchId },
}

/// Where the routing function sends a data packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DynRoute {
    /// The allowed ports (AR), any one of them (one down port or a set of
    /// up ports).
    Ports(Vec<PortNo>),
    /// Emergency path: the only output is a dead down port; deflect the
    /// packet down this other live down port (§4.6) and tag it.
    Deflect(PortNo),
    /// No port at all (not tolerated, or no live down port to deflect to).
    None,
}

/// The dynamic FT²EI state of one switch.
#[derive(Clone, Debug)]
pub struct Ft2eiDynSwitch {
    tree: KaryTree,
    id: SwitchId,
    n_ei: usize,
    /// `excl[j]`: exclusion intervals of up port `k + j`.
    excl: Vec<Vec<CyclicInterval>>,
    /// `announced[d]`: this switch already told its children d is
    /// unreachable from it.
    announced: Vec<bool>,
    /// Ports whose link this switch detected as failed.
    dead: Vec<bool>,
    /// Exclusion updates applied (local faults and received CTRLs).
    updates: u64,
    /// Emergency paths on (see [`Ft2eiDynConfig::emergency`]).
    emergency: bool,
    /// A RUFT switch (see [`Ft2eiDynConfig::ruft`]).
    ruft: bool,
}

impl Ft2eiDynSwitch {
    /// Fault-free registers of switch `id` with `n_ei` slots per up port.
    pub fn new(tree: KaryTree, id: SwitchId, n_ei: usize) -> Result<Self, DynError> {
        if n_ei == 0 {
            return Err(DynError::NoExclusionSlots { switch: id });
        }
        Ok(Ft2eiDynSwitch {
            tree,
            id,
            n_ei,
            excl: vec![Vec::new(); tree.k as usize],
            announced: vec![false; tree.hosts() as usize],
            dead: vec![false; 2 * tree.k as usize],
            updates: 0,
            emergency: true,
            ruft: false,
        })
    }

    pub fn id(&self) -> SwitchId {
        self.id
    }
    pub fn tree(&self) -> KaryTree {
        self.tree
    }
    /// Exclusion updates applied so far.
    pub fn updates(&self) -> u64 {
        self.updates
    }
    /// Exclusion intervals of up port `port` (k..2k−1).
    pub fn exclusions(&self, port: PortNo) -> &[CyclicInterval] {
        &self.excl[port as usize - self.tree.k as usize]
    }
    /// A RUFT switch: outputs `k + d_s`, no control packets.
    pub fn is_ruft(&self) -> bool {
        self.ruft
    }
    pub fn is_dead(&self, port: PortNo) -> bool {
        self.dead.get(port as usize).copied().unwrap_or(true)
    }

    fn k(&self) -> u32 {
        self.tree.k
    }
    fn stage(&self) -> u32 {
        self.tree.stage(self.id)
    }
    fn is_top(&self) -> bool {
        self.tree.is_top(self.id)
    }
    fn live_down(&self) -> impl Iterator<Item = PortNo> + '_ {
        (0..self.k())
            .map(|p| p as PortNo)
            .filter(|&p| !self.dead[p as usize])
    }
    fn excluded(&self, j: usize, d: HostId) -> bool {
        self.excl[j].iter().any(|e| e.contains(d))
    }

    /// `on_local_fault(X, q)` (§4.5), called once the link on `port` is
    /// detected dead. Returns the control packets to send.
    pub fn on_local_fault(&mut self, port: PortNo) -> Result<Vec<Send>, DynError> {
        let k = self.k();
        let p = port as u32;
        if self.ruft {
            return self.on_local_fault_ruft(port);
        }
        if p >= 2 * k || (p >= k && self.is_top()) {
            return Err(DynError::NoSuchPort {
                switch: self.id,
                port,
                radix: 2 * k,
            });
        }
        if self.dead[p as usize] {
            return Ok(Vec::new());
        }
        self.dead[p as usize] = true;
        if p >= k {
            self.add_exclusion((p - k) as usize, CyclicInterval::full(self.tree.hosts()));
            return self.check_unreachable();
        }
        if self.stage() == 0 {
            return Err(DynError::HostLink {
                switch: self.id,
                port,
                host: self.id * k + p,
            });
        }
        let lost = self.tree.down_interval(self.id, p);
        let c = Ctrl {
            faulty: self.id,
            elib: lost.lo,
            euib: lost.hi,
        };
        let ports: Vec<PortNo> = if self.is_top() {
            self.live_down().collect()
        } else {
            self.up_ports_for_ctrl()?
        };
        Ok(ports
            .into_iter()
            .map(|port| Send { port, ctrl: c })
            .collect())
    }

    /// A RUFT switch's dead port: an input needs nothing (no packet can
    /// arrive there); a dead output excludes all its destinations (those
    /// whose digit at this stage is the output's), which have no other
    /// path. Nothing can be told upstream: every link points away from
    /// the sources.
    fn on_local_fault_ruft(&mut self, port: PortNo) -> Result<Vec<Send>, DynError> {
        let k = self.k();
        if port as u32 >= 2 * k {
            return Err(DynError::NoSuchPort {
                switch: self.id,
                port,
                radix: 2 * k,
            });
        }
        if !self.dead[port as usize] {
            self.dead[port as usize] = true;
            if port as u32 >= k {
                self.updates += 1;
            }
        }
        Ok(Vec::new())
    }

    /// `on_ctrl(Y, c, in_port)` (§4.5).
    pub fn on_ctrl(&mut self, c: Ctrl, in_port: PortNo) -> Result<Vec<Send>, DynError> {
        let t = self.tree;
        if c.faulty >= t.switches() || c.elib >= t.hosts() || c.euib >= t.hosts() {
            return Err(DynError::BadCtrl {
                switch: self.id,
                faulty: c.faulty,
                elib: c.elib,
                euib: c.euib,
                switches: t.switches(),
                hosts: t.hosts(),
            });
        }
        let k = self.k();
        if in_port as u32 >= 2 * k {
            return Err(DynError::NoSuchPort {
                switch: self.id,
                port: in_port,
                radix: 2 * k,
            });
        }
        let e = t.stage(c.faulty);
        let fwd = |ports: Vec<PortNo>| -> Vec<Send> {
            ports
                .into_iter()
                .map(|port| Send { port, ctrl: c })
                .collect()
        };
        if (in_port as u32) < k {
            // Upward phase.
            if !self.is_top() {
                return Ok(fwd(self.up_ports_for_ctrl()?));
            }
            return Ok(fwd(self.live_down().collect()));
        }
        // Downward phase.
        if e == 0 || self.stage() + 1 != e {
            if self.stage() == 0 {
                // Below the target stage: nothing to do (cannot happen with
                // well-formed packets; a leaf has no switch below).
                return Ok(Vec::new());
            }
            return Ok(fwd(self.live_down().collect()));
        }
        self.add_exclusion((in_port as u32 - k) as usize, c.interval());
        self.check_unreachable()
    }

    /// `up_ports_for_ctrl(Y)` (§4.5, Fig 3.9): one live up port without
    /// exclusions if there is one, else a set of live up ports whose allowed
    /// destinations together cover the up interval.
    fn up_ports_for_ctrl(&self) -> Result<Vec<PortNo>, DynError> {
        let k = self.k();
        let live = (0..k as usize).filter(|&j| !self.dead[k as usize + j]);
        if let Some(j) = live.clone().find(|&j| self.excl[j].is_empty()) {
            return Ok(vec![(k as usize + j) as PortNo]);
        }
        let up = self
            .tree
            .up_interval(self.id)
            .expect("only non-top switches climb");
        let n = self.tree.hosts();
        let mut chosen = Vec::new();
        let mut uncovered: Vec<HostId> = (0..n).filter(|&d| up.contains(d)).collect();
        // Greedy cover: each step takes the port allowing most uncovered
        // destinations (k ≤ 64, N small: fine on a slow path).
        let mut ports: Vec<usize> = live.collect();
        while !uncovered.is_empty() {
            let best = ports
                .iter()
                .enumerate()
                .map(|(i, &j)| {
                    let c = uncovered.iter().filter(|&&d| !self.excluded(j, d)).count();
                    (c, i)
                })
                .max_by_key(|&(c, i)| (c, std::cmp::Reverse(i)));
            match best {
                Some((c, i)) if c > 0 => {
                    let j = ports.remove(i);
                    uncovered.retain(|&d| self.excluded(j, d));
                    chosen.push((k as usize + j) as PortNo);
                }
                _ => return Err(DynError::NoCtrlPath { switch: self.id }),
            }
        }
        chosen.sort_unstable();
        Ok(chosen)
    }

    fn add_exclusion(&mut self, j: usize, iv: CyclicInterval) {
        add_exclusion_to(&mut self.excl[j], iv, self.n_ei, self.tree.hosts());
        self.updates += 1;
    }

    /// The cascade (`check_unreachable`, §4.4) in its dynamic form: the
    /// newly unreachable destinations go out as `CTRL{self, arc}` on every
    /// live down port.
    fn check_unreachable(&mut self) -> Result<Vec<Send>, DynError> {
        let t = self.tree;
        let Some(up) = t.up_interval(self.id) else {
            return Ok(Vec::new());
        };
        let n = t.hosts();
        let unreachable: Vec<HostId> = (0..n)
            .filter(|&d| {
                up.contains(d)
                    && !self.announced[d as usize]
                    && (0..t.k as usize).all(|j| self.excluded(j, d))
            })
            .collect();
        if unreachable.is_empty() {
            return Ok(Vec::new());
        }
        for &d in &unreachable {
            self.announced[d as usize] = true;
        }
        let arcs = arcs_of(&unreachable, n);
        if self.stage() == 0 {
            return Err(DynError::LeafCutOff {
                switch: self.id,
                first: arcs[0].lo,
                count: unreachable.len() as u32,
            });
        }
        let mut out = Vec::new();
        for port in self.live_down().collect::<Vec<_>>() {
            for a in &arcs {
                out.push(Send {
                    port,
                    ctrl: Ctrl {
                        faulty: self.id,
                        elib: a.lo,
                        euib: a.hi,
                    },
                });
            }
        }
        Ok(out)
    }

    /// The routing function with exclusions and emergency paths, for a
    /// packet to `d` that arrived on `in_port`; `deflected` when the packet
    /// carries the emergency tag (it was deflected by the previous switch).
    pub fn route(&self, d: HostId, in_port: PortNo, deflected: bool) -> DynRoute {
        let t = self.tree;
        let k = t.k;
        if self.ruft {
            let p = (k + t.digit(d, self.stage())) as PortNo;
            return if self.dead[p as usize] {
                DynRoute::None
            } else {
                DynRoute::Ports(vec![p])
            };
        }
        if t.is_below(self.id, d) {
            let p = t.digit(d, self.stage()) as PortNo;
            if !self.dead[p as usize] {
                return DynRoute::Ports(vec![p]);
            }
            if self.stage() == 0 || !self.emergency {
                return DynRoute::None;
            }
            // Emergency path: the next live down port after p (cyclic), never
            // the arrival port.
            return (1..k)
                .map(|i| ((p as u32 + i) % k) as PortNo)
                .find(|&q| !self.dead[q as usize] && q != in_port)
                .map_or(DynRoute::None, DynRoute::Deflect);
        }
        if self.is_top() {
            return DynRoute::None;
        }
        let ports: Vec<PortNo> = (0..k as usize)
            .filter(|&j| !self.dead[k as usize + j] && !self.excluded(j, d))
            .map(|j| (k as usize + j) as PortNo)
            .filter(|&p| !(deflected && p == in_port))
            .collect();
        if ports.is_empty() {
            DynRoute::None
        } else {
            DynRoute::Ports(ports)
        }
    }
}

/// A functional (untimed) model of a whole k-ary n-tree running the
/// protocol: control packets are delivered one hop at a time, breadth
/// first, so the depth of the last exclusion update is the reconfiguration
/// critical path in hops (§4.5: 2n−2e−1 for a fault at stage e).
#[derive(Clone, Debug)]
pub struct DynFabric {
    pub switches: Vec<Ft2eiDynSwitch>,
}

/// What one link fault cost the protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultReport {
    /// Control packets transmitted (each hop of each copy counts once).
    pub ctrl_packets: u64,
    /// Exclusion updates applied over all switches.
    pub updates: u64,
    /// Hops from the detection to the last exclusion update.
    pub critical_hops: u32,
}

impl DynFabric {
    pub fn new(tree: KaryTree, n_ei: usize) -> Result<Self, DynError> {
        let switches = (0..tree.switches())
            .map(|sw| Ft2eiDynSwitch::new(tree, sw, n_ei))
            .collect::<Result<_, _>>()?;
        Ok(DynFabric { switches })
    }

    /// The switch and arrival port behind port `port` of `sw` (None: a host).
    pub fn peer(&self, sw: SwitchId, port: PortNo) -> Option<(SwitchId, PortNo)> {
        let t = self.switches[0].tree;
        let p = port as u32;
        if p >= t.k {
            let up = t.parent(sw, p - t.k);
            Some((up, t.digit(t.index(sw), t.stage(sw)) as PortNo))
        } else if t.stage(sw) == 0 {
            None
        } else {
            Some((t.child(sw, p), t.up_port_towards(sw)))
        }
    }

    /// Fails the bidirectional link on port `port` of `sw`: both ends detect
    /// it and the protocol runs to completion.
    pub fn fail_link(&mut self, sw: SwitchId, port: PortNo) -> Result<FaultReport, DynError> {
        let (other, other_port) = self.peer(sw, port).ok_or(DynError::HostLink {
            switch: sw,
            port,
            host: sw * self.switches[0].tree.k + port as u32,
        })?;
        let before: u64 = self.switches.iter().map(|s| s.updates()).sum();
        let mut report = FaultReport::default();
        // The control packets each switch emits at the current depth; the
        // detecting switches are depth 0.
        let mut frontier: Vec<(SwitchId, Vec<Send>)> = Vec::new();
        for (s, p) in [(sw, port), (other, other_port)] {
            let sends = self.switches[s as usize].on_local_fault(p)?;
            frontier.push((s, sends));
        }
        let mut depth = 0;
        while frontier.iter().any(|(_, s)| !s.is_empty()) {
            depth += 1;
            let mut next = Vec::new();
            for (s, sends) in frontier {
                for send in sends {
                    report.ctrl_packets += 1;
                    let Some((to, in_port)) = self.peer(s, send.port) else {
                        continue;
                    };
                    let u0 = self.switches[to as usize].updates();
                    let out = self.switches[to as usize].on_ctrl(send.ctrl, in_port)?;
                    if self.switches[to as usize].updates() > u0 {
                        report.critical_hops = depth;
                    }
                    next.push((to, out));
                }
            }
            frontier = next;
        }
        let after: u64 = self.switches.iter().map(|s| s.updates()).sum();
        report.updates = after - before;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::ft2ei::{directed_links, DirectedFault, Ft2ei};

    /// Every switch-to-switch link once, named from its upper end's down
    /// port.
    fn links(t: KaryTree) -> Vec<(SwitchId, PortNo)> {
        directed_links(&t)
            .into_iter()
            .filter(|f| (f.port as u32) < t.k)
            .map(|f| (f.switch, f.port))
            .collect()
    }

    fn formula(t: KaryTree, e: u32) -> u64 {
        let up = (t.n - 1 - e) as u64;
        up + (1..=t.n - e).map(|j| (t.k as u64).pow(j)).sum::<u64>()
    }

    fn check_against_static(t: KaryTree) {
        for (x, l) in links(t) {
            let mut fab = DynFabric::new(t, 2).unwrap();
            let rep = fab.fail_link(x, l).unwrap();
            let (lower, lower_port) = fab.peer(x, l).unwrap();
            let mut oracle = Ft2ei::new(t, 2).unwrap();
            oracle.apply(DirectedFault { switch: x, port: l }).unwrap();
            oracle
                .apply(DirectedFault {
                    switch: lower,
                    port: lower_port,
                })
                .unwrap();
            for sw in 0..t.switches() {
                if t.is_top(sw) {
                    continue;
                }
                for p in t.k..2 * t.k {
                    assert_eq!(
                        fab.switches[sw as usize].exclusions(p as PortNo),
                        oracle.exclusions(sw, p as PortNo),
                        "{t:?} link ({x},{l}): switch {sw} port {p}"
                    );
                }
            }
            let e = t.stage(x);
            // The digest's count includes the flood copy over the dead link
            // itself (X → its lower end), which is never sent.
            assert_eq!(
                rep.ctrl_packets,
                formula(t, e) - 1,
                "{t:?} link ({x},{l}) at stage {e}"
            );
            assert_eq!(rep.critical_hops, 2 * t.n - 2 * e - 1, "{t:?} ({x},{l})");
            assert!(rep.updates > 0);
        }
    }

    #[test]
    fn one_fault_matches_static_oracle_2ary_3tree() {
        check_against_static(KaryTree { k: 2, n: 3 });
    }

    #[test]
    fn one_fault_matches_static_oracle_4ary_3tree() {
        check_against_static(KaryTree { k: 4, n: 3 });
    }

    #[test]
    fn one_fault_matches_static_oracle_4ary_2tree_and_3ary_3tree() {
        check_against_static(KaryTree { k: 4, n: 2 });
        check_against_static(KaryTree { k: 3, n: 3 });
    }

    #[test]
    fn digest_example_2ary_3tree_stage1_is_seven_minus_dead_copy() {
        // §4.5: e = 1 in a 2-ary 3-tree, 1 + 2 + 4 = 7 = 12/2 + 1.
        let t = KaryTree { k: 2, n: 3 };
        assert_eq!(formula(t, 1), 7);
        let mut fab = DynFabric::new(t, 1).unwrap();
        // Switch 6 = ⟨1,10⟩ loses link 1 (nodes 6, 7).
        let rep = fab.fail_link(6, 1).unwrap();
        assert_eq!(rep.ctrl_packets, 6);
        // Leaves 0, 1, 2 exclude [6..7] on the port towards column "0" of
        // stage 1 ... i.e. port k + v_0 = 2; leaf 3 is the lower end.
        for leaf in [0, 1, 2] {
            assert_eq!(
                fab.switches[leaf].exclusions(2),
                &[CyclicInterval::new(6, 7)]
            );
        }
        assert_eq!(fab.switches[3].exclusions(2), &[CyclicInterval::full(8)]);
    }

    #[test]
    fn k_minus_one_faults_one_at_a_time_stay_tolerated() {
        // §4.7: any k−1 faults, one at a time. In a 3-ary 3-tree (k−1 = 2),
        // a spread sample of link pairs over both stages.
        let t = KaryTree { k: 3, n: 3 };
        let all = links(t);
        for (i, &a) in all.iter().enumerate().step_by(5) {
            for &b in all.iter().skip(i + 1).step_by(7) {
                let mut fab = DynFabric::new(t, 2).unwrap();
                fab.fail_link(a.0, a.1).unwrap();
                fab.fail_link(b.0, b.1).unwrap();
                // Every host reaches every other: walk the routing function
                // (first allowed port) without entering a dead link.
                for s in 0..t.hosts() {
                    for d in 0..t.hosts() {
                        let mut sw = t.leaf_of(s);
                        let mut in_port = (s % t.k) as PortNo;
                        let mut hops = 0;
                        loop {
                            hops += 1;
                            assert!(hops < 4 * t.n, "{a:?} {b:?}: loop {s}->{d}");
                            let ports = match fab.switches[sw as usize].route(d, in_port, false) {
                                DynRoute::Ports(p) => p,
                                other => panic!("{a:?} {b:?}: {s}->{d} at {sw}: {other:?}"),
                            };
                            let p = ports[0];
                            match fab.peer(sw, p) {
                                None => {
                                    assert_eq!(sw * t.k + p as u32, d);
                                    break;
                                }
                                Some((to, ip)) => {
                                    sw = to;
                                    in_port = ip;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn emergency_path_deflects_and_forbids_the_arrival_port() {
        // 2-ary 3-tree, switch 6 = ⟨1,10⟩ loses down link 1 (nodes 6, 7).
        let t = KaryTree { k: 2, n: 3 };
        let mut x = Ft2eiDynSwitch::new(t, 6, 2).unwrap();
        x.on_local_fault(1).unwrap();
        // A packet for 7 arriving from above: deflected to down port 0.
        assert_eq!(x.route(7, 2, false), DynRoute::Deflect(0));
        // The child (switch 2 = ⟨0,10⟩) has no update yet: its up ports are
        // 2 (→ 6, the arrival port) and 3 (→ 7); a deflected packet must
        // not go back through 2.
        let child = Ft2eiDynSwitch::new(t, 2, 2).unwrap();
        assert_eq!(child.route(7, 2, true), DynRoute::Ports(vec![3]));
        assert_eq!(child.route(7, 2, false), DynRoute::Ports(vec![2, 3]));
        // A leaf's dead host link has no emergency path.
        let mut leaf = Ft2eiDynSwitch::new(t, 0, 2).unwrap();
        assert!(matches!(
            leaf.on_local_fault(1),
            Err(DynError::HostLink { host: 1, .. })
        ));
        assert_eq!(leaf.route(1, 0, false), DynRoute::None);
        // Without emergency paths the packet has nowhere to go.
        let cfg = Ft2eiDynConfig {
            k: 2,
            n: 3,
            n_ei: 2,
            emergency: false,
            ruft: false,
        };
        let mut x = cfg.switch(6).unwrap();
        x.on_local_fault(1).unwrap();
        assert_eq!(x.route(7, 2, false), DynRoute::None);
        assert!(matches!(cfg.switch(12), Err(DynError::NotInTree { .. })));
    }

    /// On a 4-ary 2-RUFT a switch routes by the destination's digit at its
    /// stage; a dead output excludes exactly its destinations there, with
    /// no control packet and no deflection, and a dead input changes
    /// nothing.
    #[test]
    fn ruft_switches_exclude_a_dead_output_and_send_nothing() {
        let cfg = Ft2eiDynConfig {
            k: 4,
            n: 2,
            n_ei: 2,
            emergency: true,
            ruft: true,
        };
        // Stage 0 switch 1: output d_0; stage 1 switch 5: output d_1.
        let mut s0 = cfg.switch(1).unwrap();
        let s1 = cfg.switch(5).unwrap();
        for d in 0..16 {
            assert_eq!(
                s0.route(d, 0, false),
                DynRoute::Ports(vec![4 + (d % 4) as PortNo])
            );
            assert_eq!(
                s1.route(d, 0, false),
                DynRoute::Ports(vec![4 + (d / 4) as PortNo])
            );
        }
        assert_eq!(s0.on_local_fault(2), Ok(Vec::new()), "an input");
        assert_eq!(s0.updates(), 0);
        assert_eq!(s0.on_local_fault(6), Ok(Vec::new()), "output 2");
        assert_eq!(s0.updates(), 1);
        for d in 0..16 {
            let want = if d % 4 == 2 {
                DynRoute::None
            } else {
                DynRoute::Ports(vec![4 + (d % 4) as PortNo])
            };
            assert_eq!(s0.route(d, 1, true), want, "destination {d}");
        }
        // A top switch's outputs are the long links to hosts: watched too.
        let mut top = cfg.switch(5).unwrap();
        assert_eq!(top.on_local_fault(7), Ok(Vec::new()));
        assert_eq!(top.route(13, 0, false), DynRoute::None);
        assert!(matches!(
            top.on_local_fault(8),
            Err(DynError::NoSuchPort { .. })
        ));
    }

    #[test]
    fn bad_input_is_named() {
        let t = KaryTree { k: 2, n: 3 };
        let mut s = Ft2eiDynSwitch::new(t, 4, 1).unwrap();
        assert!(matches!(
            s.on_ctrl(
                Ctrl {
                    faulty: 99,
                    elib: 0,
                    euib: 1
                },
                0
            ),
            Err(DynError::BadCtrl { .. })
        ));
        assert!(matches!(
            s.on_local_fault(7),
            Err(DynError::NoSuchPort { .. })
        ));
        assert!(Ft2eiDynSwitch::new(t, 0, 0).is_err());
    }

    #[test]
    fn up_ports_for_ctrl_covers_when_every_port_excludes() {
        // Fig 3.9's rule: arity 2, port 2 excludes [0..3], port 3 excludes
        // [4..7] → a CTRL must climb on both.
        let t = KaryTree { k: 2, n: 3 };
        let mut s = Ft2eiDynSwitch::new(t, 0, 1).unwrap();
        s.add_exclusion(0, CyclicInterval::new(2, 3));
        s.add_exclusion(1, CyclicInterval::new(4, 7));
        assert_eq!(s.up_ports_for_ctrl().unwrap(), vec![2, 3]);
        s.add_exclusion(0, CyclicInterval::new(4, 5));
        assert!(matches!(
            s.up_ports_for_ctrl(),
            Err(DynError::NoCtrlPath { .. })
        ));
    }
}
