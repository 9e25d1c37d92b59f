//! Dmodk (seed 001 §4.3, Zahavi 2010): the closed-form destination-mod-k
//! routing of a *perfect* PGFT, with the thesis's divider `W_ℓ = Π_{k=1..ℓ} w_k`
//! (not SimGrid's `Π w_k·p_k`, see the §4.3 "divisor pitfall").
//!
//! At a level-ℓ switch s and destination key d (the NID, or a grouped NID for
//! Gdmodk, §4.5):
//! - d below s (labels equal above digit ℓ): leaf → endport `d.a_0`; else
//!   down port `c + j·m_ℓ` with `c = d.a_ℓ`, `j = ⌊d/W_ℓ⌋ mod p_ℓ`;
//! - otherwise up port `#down + q` with `q = ⌊d/W_ℓ⌋ mod (w_{ℓ+1}·p_{ℓ+1})`.
//!
//! Dmodk ignores faults (it has no notion of them): under faults its tables
//! are the undegraded ones and the checker reports the broken routes.

use super::{Lft, RoutingEngine, RoutingError, RoutingTables, SwitchTable};
use crate::topology::{Family, FaultSet, HostId, PgftParams, PortNo, Topology};

/// PGFT parameters and full switch labels (`a_0..a_{h-1}`) of a generated
/// fat-tree, or why Dmodk-style closed forms do not apply.
pub struct PgftView {
    pub params: PgftParams,
    /// Per switch: (level, full label).
    pub switches: Vec<(usize, Vec<u32>)>,
    /// `W_ℓ` for ℓ = 0..h.
    pub w_prod: Vec<u64>,
    /// Host NIDs are the mixed-radix value of their labels (digit 0 fastest).
    pub nid_is_label: bool,
}

impl PgftView {
    pub fn new(topo: &Topology, engine: &'static str) -> Result<Self, RoutingError> {
        let na = |reason: String| RoutingError::NotApplicable { engine, reason };
        let (params, strip) = match &topo.family {
            Family::Pgft(p) => (p.clone(), false),
            Family::KaryNTree { k, n } => {
                let mut w = vec![*k; *n as usize];
                w[0] = 1;
                (
                    PgftParams {
                        m: vec![*k; *n as usize],
                        w,
                        p: vec![1; *n as usize],
                    },
                    true,
                )
            }
            other => {
                return Err(na(format!(
                    "needs a generated PGFT or k-ary n-tree, got {other:?}"
                )))
            }
        };
        let h = params.height();
        if params.w[0] != 1 || params.p[0] != 1 {
            return Err(na(format!(
                "hosts must be single-homed (w_0 = p_0 = 1), got w_0 = {}, p_0 = {}",
                params.w[0], params.p[0]
            )));
        }
        let mut switches = Vec::with_capacity(topo.num_switches());
        for sw in &topo.switches {
            let level = sw
                .level
                .ok_or_else(|| na(format!("switch {} has no level", sw.name)))?
                as usize;
            let mut label = sw.label.clone();
            if strip {
                label.insert(0, 0);
            }
            if label.len() != h || level >= h {
                return Err(na(format!(
                    "switch {} has label {:?} / level {level}, not a height-{h} PGFT label",
                    sw.name, sw.label
                )));
            }
            switches.push((level, label));
        }
        for host in &topo.hosts {
            if host.label.len() != h {
                return Err(na(format!("host {} has no PGFT label", host.name)));
            }
        }
        let mut w_prod = vec![1u64; h + 1];
        for l in 1..=h {
            w_prod[l] = w_prod[l - 1] * if l < h { params.w[l] as u64 } else { 1 };
        }
        let nid_is_label = topo.hosts.iter().all(|host| {
            let mut nid = 0u64;
            for i in (0..h).rev() {
                nid = nid * params.m[i] as u64 + host.label[i] as u64;
            }
            nid == host.id as u64
        });
        Ok(PgftView {
            params,
            switches,
            w_prod,
            nid_is_label,
        })
    }

    /// True if host label `dl` is in the subtree of a level-`level` switch
    /// with label `sl`.
    pub fn below(&self, level: usize, sl: &[u32], dl: &[u32]) -> bool {
        (level + 1..sl.len()).all(|i| sl[i] == dl[i])
    }

    /// Number of down ports of a level-ℓ switch.
    pub fn down_ports(&self, level: usize) -> u64 {
        (self.params.m[level] * self.params.p[level]) as u64
    }

    /// Down port towards `dl` from a level-`level` switch, parallel link
    /// chosen by `key` (destination key for Dmodk, source key for Smodk).
    pub fn down_port(&self, level: usize, dl: &[u32], key: u64) -> PortNo {
        if level == 0 {
            return dl[0] as PortNo;
        }
        let m = self.params.m[level] as u64;
        let p = self.params.p[level] as u64;
        let j = (key / self.w_prod[level]) % p;
        (dl[level] as u64 + j * m) as PortNo
    }

    /// Up port of a level-`level` switch for `key`; `None` at the top.
    pub fn up_port(&self, level: usize, key: u64) -> Option<PortNo> {
        let h = self.params.height();
        if level + 1 >= h {
            return None;
        }
        let span = (self.params.w[level + 1] * self.params.p[level + 1]) as u64;
        let q = (key / self.w_prod[level]) % span;
        Some((self.down_ports(level) + q) as PortNo)
    }
}

/// Dmodk tables where host h's arithmetic key is `key[h]` (its NID for
/// Dmodk, its grouped NID for Gdmodk).
pub fn dmodk_with_keys(
    topo: &Topology,
    view: &PgftView,
    key: &[u64],
    engine: &str,
) -> RoutingTables {
    let nh = topo.num_hosts();
    let identity = view.nid_is_label && key.iter().enumerate().all(|(i, &k)| k == i as u64);
    let switches = view
        .switches
        .iter()
        .map(|(level, sl)| {
            if identity {
                return SwitchTable::Lft(Lft {
                    ports: nid_keyed_ports(topo, view, *level, sl),
                });
            }
            let ports = (0..nh)
                .map(|d| {
                    let dl = &topo.hosts[d].label;
                    if view.below(*level, sl, dl) {
                        Some(view.down_port(*level, dl, key[d]))
                    } else {
                        view.up_port(*level, key[d])
                    }
                })
                .collect();
            SwitchTable::Lft(Lft { ports })
        })
        .collect();
    RoutingTables {
        engine: engine.to_string(),
        switches,
        vcs: 1,
        vc_policy: Vec::new(),
    }
}

/// One switch's Dmodk LFT when keys are the NIDs and NIDs are the
/// mixed-radix labels (§3.4 item 4): the subtree is one NID range and the up
/// port `⌊d/W_ℓ⌋ mod span` is stepped without a division per entry.
fn nid_keyed_ports(
    topo: &Topology,
    view: &PgftView,
    level: usize,
    sl: &[u32],
) -> Vec<Option<PortNo>> {
    let nh = topo.num_hosts();
    let m = &view.params.m;
    let mut below_size = 1u64;
    for &mi in &m[..=level] {
        below_size *= mi as u64;
    }
    let mut base = 0u64;
    let mut weight = below_size;
    for i in level + 1..m.len() {
        base += sl[i] as u64 * weight;
        weight *= m[i] as u64;
    }
    let (lo, hi) = (base as usize, (base + below_size) as usize);
    let w = view.w_prod[level];
    let span = if level + 1 < m.len() {
        (view.params.w[level + 1] * view.params.p[level + 1]) as u64
    } else {
        0
    };
    let down = view.down_ports(level);
    let mut ports = Vec::with_capacity(nh);
    let (mut r, mut q) = (0u64, 0u64);
    for d in 0..nh {
        if (lo..hi).contains(&d) {
            ports.push(Some(view.down_port(level, &topo.hosts[d].label, d as u64)));
        } else if span == 0 {
            ports.push(None);
        } else {
            ports.push(Some((down + q) as PortNo));
        }
        r += 1;
        if r == w {
            r = 0;
            q += 1;
            if q == span {
                q = 0;
            }
        }
    }
    ports
}

/// Dmodk with the NIDs as keys.
pub fn dmodk(topo: &Topology) -> Result<RoutingTables, RoutingError> {
    let view = PgftView::new(topo, "dmodk")?;
    let key: Vec<u64> = (0..topo.num_hosts() as HostId).map(u64::from).collect();
    Ok(dmodk_with_keys(topo, &view, &key, "dmodk"))
}

/// The Dmodk engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Dmodk;

impl RoutingEngine for Dmodk {
    fn name(&self) -> &'static str {
        "dmodk"
    }
    fn claims_deadlock_free(&self) -> bool {
        true
    }
    fn route(&self, topo: &Topology, _faults: &FaultSet) -> Result<RoutingTables, RoutingError> {
        dmodk(topo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::{kary_ntree, pgft};

    #[test]
    fn nid_fast_path_equals_the_general_formula() {
        for t in [
            pgft(&PgftParams {
                m: vec![4, 2, 4],
                w: vec![1, 2, 2],
                p: vec![1, 2, 1],
            })
            .unwrap(),
            pgft(&PgftParams {
                m: vec![4, 4, 6],
                w: vec![1, 2, 2],
                p: vec![1, 1, 1],
            })
            .unwrap(),
            kary_ntree(3, 3).unwrap(),
        ] {
            let view = PgftView::new(&t, "dmodk").unwrap();
            assert!(view.nid_is_label);
            let fast = dmodk(&t).unwrap();
            // Same keys, but presented so the identity shortcut is not taken.
            let mut slow_view = PgftView::new(&t, "dmodk").unwrap();
            slow_view.nid_is_label = false;
            let keys: Vec<u64> = (0..t.num_hosts() as u64).collect();
            let slow = dmodk_with_keys(&t, &slow_view, &keys, "dmodk");
            assert_eq!(fast.switches, slow.switches, "{}", t.name);
        }
        // Fig. 1.8: on the 2-ary 3-tree, destination 1 at L2 switch 3 of
        // level 1 (not its subtree) takes the first uplink: ⌊1/2⌋ mod 2 = 0.
        let t = kary_ntree(2, 3).unwrap();
        let tables = dmodk(&t).unwrap();
        let l2_far = 7; // L2 switch above leaves 2 and 3
        assert_eq!(tables.switches[l2_far].lookup(1), Some(2));
    }

    #[test]
    fn refuses_what_it_cannot_route() {
        let m = crate::topology::generators::mesh_or_torus(&[3, 3], false).unwrap();
        assert!(matches!(dmodk(&m), Err(RoutingError::NotApplicable { .. })));
        let multi = pgft(&PgftParams {
            m: vec![2, 2],
            w: vec![2, 2],
            p: vec![1, 1],
        })
        .unwrap();
        assert!(matches!(
            dmodk(&multi),
            Err(RoutingError::NotApplicable { .. })
        ));
    }
}
