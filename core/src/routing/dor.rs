//! Dimension-order routing (DOR) on meshes and tori (seed 003 §2.4/§4.2 R1,
//! seed 004 §3.1): correct dimension 0 completely, then dimension 1, and so
//! on (XY on a 2-D mesh). On a torus each dimension goes the shorter way
//! round its ring, a tie (distance exactly k/2) going the + way.
//!
//! A torus ring is a cycle of channels, so DOR alone can deadlock there; the
//! default engine uses Dally–Seitz datelines: 2 VCs, a packet enters every
//! dimension on VC 0 and moves to VC 1 when it takes the wrap-around link of
//! the ring (`VcPolicy::Dateline`). [`Dor::single_vc`] drops the datelines
//! (and the deadlock-freedom claim), to show the cycle.
//!
//! DOR is oblivious: it computes the same tables with or without faults
//! (recovery is another layer's job, e.g. SBRP in seed 003); routes through a
//! failed link are left for the checker to report.

use super::tables::{Lft, RoutingTables, SwitchTable, VcPolicy};
use super::{RoutingEngine, RoutingError};
use crate::topology::generators::{direct_port, DIRECT_HOST_PORT};
use crate::topology::{Family, FaultSet, HostId, PortNo, SwitchId, Topology};

/// The coordinates of a mesh or torus built by
/// [`crate::topology::generators::mesh_or_torus`]: router i and host i have
/// coordinates `c_d = (i / Π_{e<d} k_e) mod k_d`, and host i hangs off
/// router i's port 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grid {
    pub dims: Vec<u32>,
    pub wrap: bool,
}

/// One minimal move: dimension and sign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub dim: usize,
    pub positive: bool,
}

impl Move {
    pub fn port(&self) -> PortNo {
        direct_port(self.dim, self.positive)
    }
}

impl Grid {
    /// The grid of `topo`, which must be a generated mesh or torus.
    pub fn of(topo: &Topology, engine: &'static str) -> Result<Self, RoutingError> {
        let grid = match &topo.family {
            Family::Mesh { dims } => Grid {
                dims: dims.clone(),
                wrap: false,
            },
            Family::Torus { dims } => Grid {
                dims: dims.clone(),
                wrap: true,
            },
            other => {
                return Err(RoutingError::NotApplicable {
                    engine,
                    reason: format!("{} is a {other:?} topology, not a mesh or torus", topo.name),
                })
            }
        };
        let size: u64 = grid.dims.iter().map(|&k| k as u64).product();
        if size != topo.num_switches() as u64 || size != topo.num_hosts() as u64 {
            return Err(RoutingError::NotApplicable {
                engine,
                reason: format!(
                    "{}: {} switches and {} hosts, but dims {:?} give {size} of each",
                    topo.name,
                    topo.num_switches(),
                    topo.num_hosts(),
                    grid.dims
                ),
            });
        }
        Ok(grid)
    }

    pub fn size(&self) -> u32 {
        self.dims.iter().product()
    }

    /// Coordinate `d` of router (or host) i.
    pub fn coord(&self, i: u32, d: usize) -> u32 {
        let stride: u32 = self.dims[..d].iter().product();
        (i / stride) % self.dims[d]
    }

    /// The minimal moves in dimension `d` from router `at` towards `to`:
    /// none if aligned, one, or both on a torus tie.
    pub fn minimal_moves(&self, at: u32, to: u32, d: usize) -> Vec<Move> {
        let (c, t, k) = (self.coord(at, d), self.coord(to, d), self.dims[d]);
        if c == t {
            return Vec::new();
        }
        if !self.wrap {
            return vec![Move {
                dim: d,
                positive: t > c,
            }];
        }
        let forward = (t + k - c) % k;
        let backward = k - forward;
        let mut moves = Vec::new();
        if forward <= backward {
            moves.push(Move {
                dim: d,
                positive: true,
            });
        }
        if backward <= forward {
            moves.push(Move {
                dim: d,
                positive: false,
            });
        }
        moves
    }

    /// The DOR move: lowest unaligned dimension, ties to +.
    pub fn dor_move(&self, at: u32, to: u32) -> Option<Move> {
        (0..self.dims.len()).find_map(|d| self.minimal_moves(at, to, d).first().copied())
    }

    /// Minimal hop count between two routers.
    pub fn distance(&self, a: u32, b: u32) -> u32 {
        (0..self.dims.len())
            .map(|d| {
                let (x, y, k) = (self.coord(a, d), self.coord(b, d), self.dims[d]);
                let diff = x.abs_diff(y);
                if self.wrap {
                    diff.min(k - diff)
                } else {
                    diff
                }
            })
            .sum()
    }

    /// Dally–Seitz dateline policy of router `sw`: ports tagged with their
    /// dimension, and the wrap-around ports (+ at `c_d = k−1`, − at
    /// `c_d = 0`) marked as datelines.
    pub fn dateline_policy(&self, sw: SwitchId) -> VcPolicy {
        let radix = 1 + 2 * self.dims.len();
        let mut port_dim = vec![None; radix];
        let mut dateline = vec![false; radix];
        for (d, &k) in self.dims.iter().enumerate() {
            let c = self.coord(sw, d);
            for positive in [true, false] {
                let p = direct_port(d, positive) as usize;
                port_dim[p] = Some(d as u8);
                dateline[p] = if positive { c + 1 == k } else { c == 0 };
            }
        }
        VcPolicy::Dateline { port_dim, dateline }
    }
}

/// The DOR port at router `sw` for host `dest` (the host port when there).
pub fn dor_port(grid: &Grid, sw: SwitchId, dest: HostId) -> PortNo {
    grid.dor_move(sw, dest)
        .map_or(DIRECT_HOST_PORT, |m| m.port())
}

/// Dimension-order routing on meshes and tori.
#[derive(Clone, Copy, Debug)]
pub struct Dor {
    datelines: bool,
}

impl Default for Dor {
    fn default() -> Self {
        Dor { datelines: true }
    }
}

impl Dor {
    /// DOR with Dally–Seitz datelines on tori (2 VCs); 1 VC on meshes.
    pub fn new() -> Self {
        Self::default()
    }

    /// DOR with one VC everywhere: deadlock-free on meshes, **not** on tori
    /// whose rings are long enough for a route to hold two ring channels.
    pub fn single_vc() -> Self {
        Dor { datelines: false }
    }
}

impl RoutingEngine for Dor {
    fn name(&self) -> &'static str {
        if self.datelines {
            "dor"
        } else {
            "dor-1vc"
        }
    }
    fn claims_deadlock_free(&self) -> bool {
        self.datelines
    }
    fn route(&self, topo: &Topology, _faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        let grid = Grid::of(topo, self.name())?;
        let n = grid.size();
        let switches = (0..n)
            .map(|sw| {
                SwitchTable::Lft(Lft {
                    ports: (0..n).map(|d| Some(dor_port(&grid, sw, d))).collect(),
                })
            })
            .collect();
        let torus_vcs = grid.wrap && self.datelines;
        Ok(RoutingTables {
            engine: self.name().to_string(),
            switches,
            vcs: if torus_vcs { 2 } else { 1 },
            vc_policy: if torus_vcs {
                (0..n).map(|sw| grid.dateline_policy(sw)).collect()
            } else {
                Vec::new()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckOptions, Tracer};
    use crate::topology::generators::{hypercube, mesh_or_torus};

    /// Every pair delivered on a minimal path in dimension order, and the
    /// checker's verdict (deadlock check on).
    fn assert_dor(dims: &[u32], wrap: bool) {
        let topo = mesh_or_torus(dims, wrap).unwrap();
        let grid = Grid::of(&topo, "t").unwrap();
        let faults = FaultSet::none();
        let rt = Dor::new().route(&topo, &faults).unwrap();
        let report = check(&topo, &faults, &rt, &CheckOptions::default());
        assert!(report.is_ok(), "{}: {:?}", topo.name, report.failures);
        assert!(report.cdg_checked && report.dependencies > 0);
        let n = grid.size();
        assert_eq!(report.delivered, (n * (n - 1)) as u64);
        let tracer = Tracer::new(&topo, &faults, &rt);
        for s in 0..n {
            for d in 0..n {
                let hops = tracer.trace(s, d).unwrap();
                assert_eq!(hops.len() as u32, grid.distance(s, d) + 1, "{s}->{d}");
                let dims: Vec<u16> = hops[..hops.len() - 1]
                    .iter()
                    .map(|h| (h.port - 1) / 2)
                    .collect();
                assert!(dims.windows(2).all(|w| w[0] <= w[1]), "{s}->{d}: {dims:?}");
            }
        }
    }

    #[test]
    fn meshes_are_xy_minimal_and_deadlock_free() {
        assert_dor(&[3, 3], false);
        assert_dor(&[8, 8], false);
        let topo = mesh_or_torus(&[3, 3], false).unwrap();
        assert_eq!(Dor::new().route(&topo, &FaultSet::none()).unwrap().vcs, 1);
    }

    #[test]
    fn tori_with_datelines_are_deadlock_free() {
        assert_dor(&[3, 3, 3], true);
        assert_dor(&[4, 4], true);
        let topo = mesh_or_torus(&[4, 4], true).unwrap();
        let rt = Dor::new().route(&topo, &FaultSet::none()).unwrap();
        assert_eq!(rt.vcs, 2);
        // Router (3,0) = 3: its +x port wraps, its −x port does not.
        let VcPolicy::Dateline { dateline, port_dim } = rt.vc_policy(3) else {
            panic!("dateline policy expected");
        };
        assert!(dateline[direct_port(0, true) as usize]);
        assert!(!dateline[direct_port(0, false) as usize]);
        assert_eq!(port_dim[0], None);
        assert_eq!(port_dim[direct_port(1, false) as usize], Some(1));
    }

    #[test]
    fn torus_ties_go_positive() {
        let topo = mesh_or_torus(&[4, 4], true).unwrap();
        let grid = Grid::of(&topo, "t").unwrap();
        // 0 → 2 along x: distance 2 both ways, take +x.
        assert_eq!(dor_port(&grid, 0, 2), direct_port(0, true));
        // 0 → 3: one hop −x through the wrap.
        assert_eq!(dor_port(&grid, 0, 3), direct_port(0, false));
        assert_eq!(dor_port(&grid, 5, 5), DIRECT_HOST_PORT);
    }

    #[test]
    fn torus_with_one_vc_deadlocks() {
        let topo = mesh_or_torus(&[4, 4], true).unwrap();
        let faults = FaultSet::none();
        let engine = Dor::single_vc();
        assert!(!engine.claims_deadlock_free());
        let rt = engine.route(&topo, &faults).unwrap();
        let report = check(&topo, &faults, &rt, &CheckOptions::default());
        assert_eq!(report.delivered, 16 * 15, "routes still deliver");
        let cycle = report.cycle().expect("a dependency cycle in a 4-ring");
        assert!(cycle.len() >= 4);
        // In a 3-ary torus no minimal route holds two channels of one ring,
        // so even one VC has no cycle there: the 4-ary torus is the real test.
        let topo3 = mesh_or_torus(&[3, 3, 3], true).unwrap();
        let rt3 = engine.route(&topo3, &faults).unwrap();
        assert!(check(&topo3, &faults, &rt3, &CheckOptions::default()).is_ok());
    }

    #[test]
    fn refuses_other_families() {
        let cube = hypercube(3).unwrap();
        assert!(matches!(
            Dor::new().route(&cube, &FaultSet::none()),
            Err(RoutingError::NotApplicable { .. })
        ));
    }
}
