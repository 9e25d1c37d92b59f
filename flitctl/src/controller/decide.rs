//! The controller's decisions, sans-IO: which links the daemons say are
//! down, when a recomputation falls due, what to compute, and when a lost
//! switch died. Time is emulated nanoseconds passed in by the caller, so the
//! live loop ([`super::Controller`], on the process clock) and the simulator
//! (`flitctl sim`, on virtual time) make the same decisions from the same
//! records.

use crate::events::Record;
use crate::route::compute_routes;
use flitnet_core::routing::RoutingTables;
use flitnet_core::topology::{FaultSet, LinkId, PortRef, SwitchId, Topology};
use std::collections::BTreeSet;

use super::{watched_ends, Element};

/// When port events are acted on, in emulated ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    /// Quiet time after the last port event before recomputing: a dead
    /// switch's neighbours time out within one keepalive interval of each
    /// other, and one recomputation for all of them is enough.
    pub quiet_ns: u64,
    /// Longest wait for events to settle.
    pub max_ns: u64,
}

impl Default for Settle {
    fn default() -> Self {
        Settle {
            quiet_ns: super::SETTLE.as_nanos() as u64,
            max_ns: super::SETTLE_MAX.as_nanos() as u64,
        }
    }
}

/// A recomputation that fell due: the links to route around.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reroute {
    pub faulty: BTreeSet<LinkId>,
}

impl Reroute {
    pub fn faults(&self) -> FaultSet {
        FaultSet::with_links(self.faulty.iter().copied())
    }

    pub fn failed_links(&self) -> Vec<LinkId> {
        self.faulty.iter().copied().collect()
    }
}

/// What the controller believes of the fabric, from the daemons' reports.
#[derive(Clone, Debug)]
pub struct Decider {
    /// Off for mechanisms that handle faults without the controller.
    reroute: bool,
    settle: Settle,
    /// Ends (node, port) whose daemon last reported the port down.
    down_ends: BTreeSet<PortRef>,
    /// Links the installed routes avoid.
    routed_around: BTreeSet<LinkId>,
    /// First and latest unhandled change of `down_ends`.
    dirty: Option<(u64, u64)>,
}

impl Decider {
    pub fn new(reroute: bool, settle: Settle) -> Self {
        Decider {
            reroute,
            settle,
            down_ends: BTreeSet::new(),
            routed_around: BTreeSet::new(),
            dirty: None,
        }
    }

    /// Takes in one record seen at `now_ns`: a daemon's port events change
    /// the down ends. A link error is transient (the link retrains on its
    /// own within `link_retrain_ns`, docs/wire.md, as an InfiniBand port
    /// does without its subnet manager re-routing): routing around it would
    /// swap tables twice within tens of ms, and packets routed by old and
    /// new tables at once can deadlock. If the link stays dead, the peer's
    /// silence after the retrain is a port-down like any other.
    pub fn absorb(&mut self, topo: &Topology, r: &Record, now_ns: u64) {
        if r.is_controller() {
            return;
        }
        let Some(node) = topo.find_node(&r.source) else {
            return;
        };
        let changed = if let Some(port) = r.port_down() {
            self.down_ends.insert(PortRef { node, port })
        } else if let Some(port) = r.port_up() {
            self.down_ends.remove(&PortRef { node, port })
        } else {
            false
        };
        if changed && self.reroute {
            let first = self.dirty.map_or(now_ns, |d| d.0);
            self.dirty = Some((first, now_ns));
        }
    }

    /// Whether port events are waiting to be acted on.
    pub fn is_busy(&self) -> bool {
        self.dirty.is_some()
    }

    /// When a recomputation is due, if one is pending.
    pub fn due(&self) -> Option<u64> {
        if !self.reroute {
            return None;
        }
        self.dirty
            .map(|(first, last)| (last + self.settle.quiet_ns).min(first + self.settle.max_ns))
    }

    /// The recomputation due at `now_ns`, if one is and the detected faults
    /// differ from those the routes avoid; the pending changes are taken
    /// either way.
    pub fn take_due(&mut self, topo: &Topology, now_ns: u64) -> Option<Reroute> {
        if self.due()? > now_ns {
            return None;
        }
        self.dirty = None;
        let faulty = self.detected_faults(topo);
        (faulty != self.routed_around).then_some(Reroute { faulty })
    }

    /// Takes `links` as down and already routed around (down when the run
    /// started, with no event to say so).
    pub fn assume_down(&mut self, topo: &Topology, links: &[LinkId]) {
        for &l in links {
            let link = &topo.links[l as usize];
            self.down_ends.insert(link.a);
            self.down_ends.insert(link.b);
            self.routed_around.insert(l);
        }
    }

    /// The routes in place now avoid `reroute`'s links.
    pub fn routed(&mut self, reroute: Reroute) {
        self.routed_around = reroute.faulty;
    }

    /// Links the daemons say are down (either end reported it).
    pub fn detected_faults(&self, topo: &Topology) -> BTreeSet<LinkId> {
        self.down_ends
            .iter()
            .filter_map(|&end| topo.link_at(end))
            .collect()
    }
}

/// Routes around `faults` by `engine`, refused if they need more virtual
/// channels than the fabric has.
pub fn tables_around(
    topo: &Topology,
    engine: &str,
    vcs: u8,
    faults: &FaultSet,
) -> anyhow::Result<RoutingTables> {
    let t = compute_routes(topo, engine, faults)?;
    anyhow::ensure!(
        t.vcs <= vcs,
        "engine {} needs {} virtual channels, the fabric has {vcs}",
        t.engine,
        t.vcs
    );
    Ok(t)
}

/// When switch `s`, found not answering, died: the earliest moment its
/// neighbours last heard it (from their port-down reports), else `fallback`.
pub fn lost_switch_died_ns(topo: &Topology, s: SwitchId, records: &[Record], fallback: u64) -> u64 {
    let watched = watched_ends(topo, Element::Switch(s));
    records
        .iter()
        .filter(|r| {
            r.port_down_any().is_some_and(|port| {
                watched
                    .iter()
                    .any(|e| e.port == port && topo.node_name(e.node) == r.source)
            })
        })
        .filter_map(|r| r.last_heard_ns().or(Some(r.time_ns)))
        .min()
        .unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, Record};
    use flitnet_core::control::EventKind;
    use flitnet_core::topology::generators::kary_ntree;
    use flitnet_core::topology::NodeRef;

    fn port_event(topo: &Topology, node: NodeRef, port: u16, down: bool) -> Record {
        let kind = if down {
            EventKind::PortDown {
                port,
                reason: "keepalive".into(),
                last_heard_ns: 0,
            }
        } else {
            EventKind::PortUp { port }
        };
        Record {
            time_ns: 0,
            source: topo.node_name(node).to_string(),
            event: Event::Daemon(kind),
        }
    }

    #[test]
    fn a_recomputation_falls_due_after_quiet_time_or_at_the_latest_after_max() {
        let topo = kary_ntree(2, 2).unwrap();
        let settle = Settle {
            quiet_ns: 20,
            max_ns: 50,
        };
        let mut d = Decider::new(true, settle);
        let s = NodeRef::Switch(0);
        assert_eq!(d.due(), None);
        d.absorb(&topo, &port_event(&topo, s, 0, true), 100);
        assert_eq!(d.due(), Some(120));
        assert_eq!(d.take_due(&topo, 119), None);
        // Events keep coming: quiet time restarts, bounded by max.
        d.absorb(&topo, &port_event(&topo, s, 1, true), 140);
        assert_eq!(d.due(), Some(150));
        let r = d.take_due(&topo, 150).expect("due");
        assert_eq!(r.faulty.len(), 2);
        assert!(!d.is_busy());
        d.routed(r);
        // Up and down again on the same port: nothing new to route around.
        d.absorb(&topo, &port_event(&topo, s, 0, false), 200);
        d.absorb(&topo, &port_event(&topo, s, 0, true), 201);
        assert_eq!(d.take_due(&topo, 300), None);
        assert!(!d.is_busy());
    }

    #[test]
    fn without_rerouting_nothing_falls_due() {
        let topo = kary_ntree(2, 2).unwrap();
        let mut d = Decider::new(false, Settle::default());
        d.absorb(&topo, &port_event(&topo, NodeRef::Switch(0), 0, true), 1);
        assert_eq!(d.due(), None);
        assert_eq!(d.detected_faults(&topo).len(), 1);
    }
}
