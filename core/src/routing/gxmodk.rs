//! Grouped Xmodk: Gdmodk and Gsmodk (seed 001 §4.5, Alg. 4). NIDs are
//! renumbered per node type — compute first, then storage, each in NID order
//! — and Dmodk / Smodk run unchanged on the grouped NIDs. This spreads each
//! type's traffic over all top switches (G_3 compute→storage: μ 4 → 1), at the
//! price of type-agnostic traffic (§9 #21): an opt-in engine.

use super::dmodk::{dmodk_with_keys, PgftView};
use super::smodk::SmodkRouter;
use super::{RoutingEngine, RoutingError, RoutingTables};
use crate::topology::{FaultSet, HostKind, Topology};

/// The order node types are numbered in.
pub const KIND_ORDER: [HostKind; 2] = [HostKind::Compute, HostKind::Storage];

/// Alg. 4: grouped NID of every host.
pub fn grouped_nids(topo: &Topology) -> Vec<u64> {
    let mut g = vec![0u64; topo.num_hosts()];
    let mut x = 0u64;
    for kind in KIND_ORDER {
        for h in topo.hosts.iter().filter(|h| h.kind == kind) {
            g[h.id as usize] = x;
            x += 1;
        }
    }
    g
}

/// Gdmodk tables.
pub fn gdmodk(topo: &Topology) -> Result<RoutingTables, RoutingError> {
    let view = PgftView::new(topo, "gdmodk")?;
    Ok(dmodk_with_keys(topo, &view, &grouped_nids(topo), "gdmodk"))
}

/// Gsmodk: source-routed, so a path router rather than tables (see smodk).
pub fn gsmodk(topo: &Topology) -> Result<SmodkRouter<'_>, RoutingError> {
    SmodkRouter::with_keys(topo, grouped_nids(topo))
}

/// The Gdmodk engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Gdmodk;

impl RoutingEngine for Gdmodk {
    fn name(&self) -> &'static str {
        "gdmodk"
    }
    fn claims_deadlock_free(&self) -> bool {
        true
    }
    fn route(&self, topo: &Topology, _faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        gdmodk(topo)
    }
}
