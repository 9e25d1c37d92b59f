//! Smodk (seed 001 §4.4, Rodriguez et al. 2009): Dmodk's arithmetic applied
//! to the *source* NID, which coalesces routes from the same source.
//!
//! Up: `q = ⌊s/W_ℓ⌋ mod (w_{ℓ+1}·p_{ℓ+1})`; down: the unique switch path,
//! parallel link `j = ⌊s/W_ℓ⌋ mod p_ℓ` (source-NID form, §9 #7 — the form
//! that reproduces the thesis's μ = 4 and Gsmodk μ = 3 on G_3).
//!
//! Smodk's routes depend on the source, so they **cannot be expressed as
//! destination LFTs** (§4.4). It is therefore not a [`super::RoutingEngine`]:
//! [`SmodkRouter`] computes paths directly, for the static metrics
//! ([`super::metrics::Router`]).

use super::checker::Hop;
use super::dmodk::PgftView;
use super::metrics::Router;
use super::RoutingError;
use crate::topology::{HostId, NodeRef, PortRef, SwitchId, Topology};

/// Source-routed Smodk (or Gsmodk with grouped keys).
pub struct SmodkRouter<'a> {
    topo: &'a Topology,
    view: PgftView,
    key: Vec<u64>,
}

impl<'a> SmodkRouter<'a> {
    /// Smodk with NIDs as source keys.
    pub fn new(topo: &'a Topology) -> Result<Self, RoutingError> {
        let key = (0..topo.num_hosts() as u64).collect();
        Self::with_keys(topo, key)
    }

    /// Smodk with `key[h]` as host h's arithmetic source key (Gsmodk, §4.5).
    pub fn with_keys(topo: &'a Topology, key: Vec<u64>) -> Result<Self, RoutingError> {
        let view = PgftView::new(topo, "smodk")?;
        if key.len() != topo.num_hosts() {
            return Err(RoutingError::Failed {
                engine: "smodk",
                reason: format!("{} source keys for {} hosts", key.len(), topo.num_hosts()),
            });
        }
        Ok(SmodkRouter { topo, view, key })
    }
}

impl Router for SmodkRouter<'_> {
    fn num_hosts(&self) -> usize {
        self.topo.num_hosts()
    }

    fn path(&self, src: HostId, dst: HostId) -> Option<Vec<Hop>> {
        let dl = &self.topo.hosts.get(dst as usize)?.label;
        let skey = *self.key.get(src as usize)?;
        let mut cur: SwitchId = match self.topo.peer(PortRef::host(src, 0))?.node {
            NodeRef::Switch(s) => s,
            NodeRef::Host(_) => return None,
        };
        let mut path = Vec::new();
        for _ in 0..=2 * self.view.params.height() {
            let (level, sl) = &self.view.switches[cur as usize];
            let port = if self.view.below(*level, sl, dl) {
                self.view.down_port(*level, dl, skey)
            } else {
                self.view.up_port(*level, skey)?
            };
            path.push(Hop { switch: cur, port });
            match self.topo.peer(PortRef::switch(cur, port))?.node {
                NodeRef::Host(h) => return (h == dst).then_some(path),
                NodeRef::Switch(n) => cur = n,
            }
        }
        None
    }
}
