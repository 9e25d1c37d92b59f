//! The forwarding tables a `switchd` can install.
//!
//! Destinations are host NIDs ([`HostId`]). A switch looks the head flit's
//! destination up in its [`SwitchTable`] and gets one output port (LFT,
//! intervals) or a set of candidates plus an escape port (adaptive).

use crate::topology::{HostId, PortNo};
use serde::{Deserialize, Serialize};

/// InfiniBand-style linear forwarding table: `ports[dest]` is the output port
/// for destination host `dest`, `None` if unreachable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lft {
    pub ports: Vec<Option<PortNo>>,
}

impl Lft {
    pub fn lookup(&self, dest: HostId) -> Option<PortNo> {
        self.ports.get(dest as usize).copied().flatten()
    }
}

/// An inclusive range of destination NIDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Interval {
    pub lo: HostId,
    pub hi: HostId,
}

impl Interval {
    pub fn contains(&self, d: HostId) -> bool {
        self.lo <= d && d <= self.hi
    }
}

/// Interval routing (seed 000 §3.2), in the flexible (FIR) form: each output
/// port owns a list of destination intervals, and may have exclusion
/// intervals (FT²EI, seed 000 §4.2) that remove destinations from it.
/// Ports are tried in `ports` order; the first port whose intervals contain
/// the destination and whose exclusions do not, wins.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntervalTable {
    pub ports: Vec<PortIntervals>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortIntervals {
    pub port: PortNo,
    pub include: Vec<Interval>,
    pub exclude: Vec<Interval>,
}

impl IntervalTable {
    pub fn lookup(&self, dest: HostId) -> Option<PortNo> {
        self.ports
            .iter()
            .find(|p| {
                p.include.iter().any(|i| i.contains(dest))
                    && !p.exclude.iter().any(|i| i.contains(dest))
            })
            .map(|p| p.port)
    }
}

/// Adaptive routing with an escape channel (Duato; seeds 003 and 004): per
/// destination, the candidate output ports (any of them, on the adaptive VCs)
/// and the escape port (on the escape VC).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptiveTable {
    pub entries: Vec<AdaptiveEntry>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptiveEntry {
    pub candidates: Vec<PortNo>,
    pub escape: Option<PortNo>,
    /// Non-minimal ports a switch may take once, when every minimal port is
    /// dead (seed 003's local fault handling, at most one misroute: only
    /// under [`VcPolicy::LocalReroute`]; empty for every other engine).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub misroute: Vec<PortNo>,
}

/// How output VCs are chosen (the switch-side counterpart of InfiniBand's
/// SL-to-VL tables).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "policy")]
pub enum VcPolicy {
    /// A packet keeps the VC it was injected on.
    #[default]
    Keep,
    /// Dally–Seitz datelines for tori: `port_dim[p]` is the dimension of port
    /// p (`None` for host ports); a packet goes to VC `base` when it enters a
    /// new dimension, and moves to VC `base + 1` when it leaves through a port
    /// with `dateline[p]` set (the wrap-around link of its ring).
    Dateline {
        port_dim: Vec<Option<u8>>,
        dateline: Vec<bool>,
    },
    /// Seed 004's virtual networks for intermediate nodes, with adaptive
    /// tables (Duato): leg `l` of a packet has its own escape VC set
    /// `l·escape_per_leg .. (l+1)·escape_per_leg` (one VC on meshes, a
    /// Dally–Seitz dateline pair on tori), and every VC from
    /// `legs·escape_per_leg` up is an adaptive VC shared by all legs. The
    /// switch advances a head's leg when its current intermediate is one of
    /// `local_hosts` (docs/recovery.md, "Intermediate nodes").
    Legs {
        /// Escape virtual networks configured (= most legs a packet may have).
        legs: u8,
        /// 1 on meshes, 2 on tori (dateline pair).
        escape_per_leg: u8,
        /// Dimension of each port (`None` for host ports), as in `Dateline`.
        port_dim: Vec<Option<u8>>,
        /// Wrap-around ports (tori); all false on meshes.
        dateline: Vec<bool>,
        /// Hosts attached to this switch: a head whose current intermediate
        /// is one of them starts its next leg here.
        local_hosts: Vec<HostId>,
        /// The port of each travel direction (index `d` = +d, `ndims + d` =
        /// −d), for forced misroute hops (seed 004 M); empty without M.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dir_ports: Vec<PortNo>,
    },
    /// Seed 003's faithful mode (the `local-reroute` engine): Duato with VC
    /// 0 the escape VC (the table's escape port: e-cube / XY) and every
    /// other VC adaptive (any minimal candidate), plus the local fault
    /// fallback: a head whose minimal ports are all dead takes one of the
    /// entry's `misroute` ports on an adaptive VC, once (the head is marked
    /// [`crate::flit::route_flags::LOCAL_MISROUTED`]), and a head never
    /// leaves by the port it came in on. docs/sbrp.md, "Faithful mode".
    LocalReroute,
}

impl VcPolicy {
    /// The fewest VCs a switch needs to apply this policy: its escape VCs
    /// (the adaptive VCs of [`VcPolicy::Legs`] are whatever is left, and
    /// may be none).
    pub fn min_vcs(&self) -> u8 {
        match self {
            VcPolicy::Keep => 1,
            VcPolicy::Dateline { .. } | VcPolicy::LocalReroute => 2,
            VcPolicy::Legs {
                legs,
                escape_per_leg,
                ..
            } => legs.saturating_mul(*escape_per_leg),
        }
    }
}

/// What one switch forwards by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum SwitchTable {
    Lft(Lft),
    Intervals(IntervalTable),
    Adaptive(AdaptiveTable),
}

impl SwitchTable {
    /// The deterministic output port for `dest`: the LFT entry, the matching
    /// interval, or the adaptive entry's escape port (first candidate if none).
    pub fn lookup(&self, dest: HostId) -> Option<PortNo> {
        match self {
            SwitchTable::Lft(l) => l.lookup(dest),
            SwitchTable::Intervals(t) => t.lookup(dest),
            SwitchTable::Adaptive(a) => {
                let e = a.entries.get(dest as usize)?;
                e.escape.or_else(|| e.candidates.first().copied())
            }
        }
    }

    /// Every port a packet for `dest` may take here (one for deterministic tables).
    pub fn candidates(&self, dest: HostId) -> Vec<PortNo> {
        match self {
            SwitchTable::Adaptive(a) => match a.entries.get(dest as usize) {
                Some(e) => {
                    let mut c = e.candidates.clone();
                    if let Some(x) = e.escape {
                        if !c.contains(&x) {
                            c.push(x);
                        }
                    }
                    c
                }
                None => Vec::new(),
            },
            _ => self.lookup(dest).into_iter().collect(),
        }
    }
}

/// The output of a routing engine: one table per switch (indexed by
/// [`crate::topology::SwitchId`]), plus how many VCs it needs and how they
/// are assigned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingTables {
    pub engine: String,
    pub switches: Vec<SwitchTable>,
    /// Number of VCs the routing relies on (1 for up*/down*, 2 for torus DOR…).
    pub vcs: u8,
    /// Per switch (same index as `switches`); empty means `Keep` everywhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vc_policy: Vec<VcPolicy>,
}

impl RoutingTables {
    pub fn vc_policy(&self, switch: usize) -> &VcPolicy {
        static KEEP: VcPolicy = VcPolicy::Keep;
        self.vc_policy.get(switch).unwrap_or(&KEEP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_lookup_honours_exclusions_and_order() {
        let t = IntervalTable {
            ports: vec![
                PortIntervals {
                    port: 2,
                    include: vec![Interval { lo: 0, hi: 7 }],
                    exclude: vec![Interval { lo: 4, hi: 5 }],
                },
                PortIntervals {
                    port: 3,
                    include: vec![Interval { lo: 0, hi: 7 }],
                    exclude: vec![],
                },
            ],
        };
        assert_eq!(t.lookup(0), Some(2));
        assert_eq!(t.lookup(4), Some(3));
        assert_eq!(t.lookup(8), None);
    }

    #[test]
    fn adaptive_lookup_prefers_escape() {
        let t = SwitchTable::Adaptive(AdaptiveTable {
            entries: vec![AdaptiveEntry {
                candidates: vec![1, 3],
                escape: Some(3),
                misroute: Vec::new(),
            }],
        });
        assert_eq!(t.lookup(0), Some(3));
        assert_eq!(t.candidates(0), vec![1, 3]);
        assert_eq!(t.lookup(1), None);
    }
}
