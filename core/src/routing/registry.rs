//! Engine lookup by name. One table ([`ENGINES`]) maps each name to a
//! constructor; adding an engine is adding one line there.

use super::adaptive::AdaptiveEscape;
use super::destro::Destro;
use super::dmodc::Dmodc;
use super::dmodk::Dmodk;
use super::dor::Dor;
use super::ecube::Ecube;
use super::ft2ei::Ft2eiEngine;
use super::ftree::Ftree;
use super::ftree2::Ftree2;
use super::ftree_random::FtreeRandom;
use super::gxmodk::Gdmodk;
use super::local_reroute::LocalReroute;
use super::minhop::MinHop;
use super::random::RandomShortestPath;
use super::updown::{UpDown, Variant};
use super::{RoutingEngine, RoutingError, RoutingTables};
use crate::topology::{Family, FaultSet, Topology};

type Constructor = fn() -> Box<dyn RoutingEngine>;

/// Every engine, by command-line name.
pub const ENGINES: &[(&str, Constructor)] = &[
    ("dmodk", || Box::new(Dmodk)),
    ("gdmodk", || Box::new(Gdmodk)),
    ("dmodc", || Box::new(Dmodc)),
    ("ftree", || Box::new(Ftree)),
    ("ftree2", || Box::new(Ftree2::default())),
    ("ftree-random", || Box::new(FtreeRandom::default())),
    ("random", || Box::new(RandomShortestPath::default())),
    ("minhop", || Box::new(MinHop)),
    ("updown", || Box::new(UpDown::new(Variant::Balanced))),
    ("bfs-random", || Box::new(UpDown::new(Variant::Random))),
    ("bfs-dmodc", || Box::new(UpDown::new(Variant::Dmodc))),
    ("bfs-ftree", || Box::new(UpDown::new(Variant::Ftree))),
    ("bfs-ftree2", || Box::new(UpDown::new(Variant::Ftree2))),
    ("bfs-ftree-random", || {
        Box::new(UpDown::new(Variant::FtreeRandom))
    }),
    ("destro", || Box::new(Destro)),
    ("ft2ei", || Box::new(Ft2eiEngine::default())),
    ("dor", || Box::new(Dor::new())),
    ("dor-1vc", || Box::new(Dor::single_vc())),
    ("ecube", || Box::new(Ecube)),
    ("adaptive-escape", || Box::new(AdaptiveEscape)),
    ("local-reroute", || Box::new(LocalReroute)),
];

/// Names of every engine, in [`ENGINES`] order.
pub fn engine_names() -> &'static [&'static str] {
    const NAMES: &[&str] = &{
        let mut names = [""; ENGINES.len()];
        let mut i = 0;
        while i < ENGINES.len() {
            names[i] = ENGINES[i].0;
            i += 1;
        }
        names
    };
    NAMES
}

/// The engine called `name`.
pub fn engine(name: &str) -> Result<Box<dyn RoutingEngine>, RoutingError> {
    ENGINES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, make)| make())
        .ok_or_else(|| RoutingError::NotApplicable {
            engine: "registry",
            reason: format!(
                "unknown routing engine `{name}` (known: {})",
                engine_names().join(", ")
            ),
        })
}

/// The engine `auto` stands for on `topo`: Dmodk on fat-trees, DOR on
/// meshes and tori, e-cube on hypercubes, FT²EI on RUFTs, up*/down*
/// otherwise. Around faults (`faults_present`) fat-trees take Dmodc, which
/// routes degraded trees, and the rest up*/down*, which routes any
/// connected graph.
pub fn auto_engine(topo: &Topology, faults_present: bool) -> &'static str {
    match (&topo.family, faults_present) {
        (Family::KaryNTree { .. } | Family::Pgft(_), false) => "dmodk",
        (Family::Mesh { .. } | Family::Torus { .. }, false) => "dor",
        (Family::Hypercube { .. }, false) => "ecube",
        (Family::Ruft { .. }, false) => "ft2ei",
        (f, true) if f.is_fat_tree() => "dmodc",
        _ => "updown",
    }
}

/// The engine a run names, `auto` resolved by [`auto_engine`].
pub fn resolve<'a>(name: &'a str, topo: &Topology, faults: &FaultSet) -> &'a str {
    if name == "auto" {
        auto_engine(topo, !faults.is_empty())
    } else {
        name
    }
}

/// Computes the tables of engine `name` (`auto` resolved) for `topo`
/// minus `faults`.
pub fn route(
    name: &str,
    topo: &Topology,
    faults: &FaultSet,
) -> Result<RoutingTables, RoutingError> {
    engine(resolve(name, topo, faults))?.route(topo, faults)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::checker::{check, CheckFailure, CheckOptions};
    use crate::routing::dmodc::Preprocessed;
    use crate::routing::ranking::Orientation;
    use crate::topology::generators::{hypercube, kary_ntree, mesh_or_torus, pgft};
    use crate::topology::{FaultSet, LinkId, NodeRef, PgftParams, Topology};
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn trees() -> Vec<Topology> {
        let pg = |m: &[u32], w: &[u32], p: &[u32]| {
            pgft(&PgftParams {
                m: m.to_vec(),
                w: w.to_vec(),
                p: p.to_vec(),
            })
            .unwrap()
        };
        vec![
            kary_ntree(2, 3).unwrap(),
            kary_ntree(4, 2).unwrap(),
            kary_ntree(4, 3).unwrap(),
            pg(&[4, 4, 6], &[1, 2, 2], &[1, 1, 1]),
            pg(&[4, 4], &[1, 2], &[1, 2]),
        ]
    }

    /// `k` distinct switch↔switch links, drawn from `seed`.
    fn random_link_faults(t: &Topology, k: usize, seed: u64) -> FaultSet {
        let mut links: Vec<LinkId> = (0..t.links.len() as LinkId)
            .filter(|&l| {
                let l = &t.links[l as usize];
                matches!(
                    (l.a.node, l.b.node),
                    (NodeRef::Switch(_), NodeRef::Switch(_))
                )
            })
            .collect();
        links.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        FaultSet::with_links(links.into_iter().take(k))
    }

    fn opts(deadlock: bool) -> CheckOptions {
        CheckOptions {
            deadlock,
            ..CheckOptions::default()
        }
    }

    #[test]
    fn names_resolve_and_unknown_names_are_errors() {
        for &n in engine_names() {
            assert_eq!(engine(n).unwrap().name(), n);
        }
        assert_eq!(engine_names().len(), ENGINES.len());
        let err = engine("nope").err().unwrap().to_string();
        assert!(err.contains("nope") && err.contains("dmodc"), "{err}");
    }

    #[test]
    fn every_engine_delivers_every_pair_on_undegraded_trees() {
        for t in trees() {
            for &n in engine_names() {
                let e = engine(n).unwrap();
                // Direct-network engines, and the k-ary n-tree-only ones on
                // PGFTs, refuse with a reason.
                let narrow = [
                    "destro",
                    "ft2ei",
                    "dor",
                    "dor-1vc",
                    "ecube",
                    "adaptive-escape",
                    "local-reroute",
                ];
                let tables = match e.route(&t, &FaultSet::none()) {
                    Err(RoutingError::NotApplicable { .. }) if narrow.contains(&n) => continue,
                    other => other.unwrap(),
                };
                let r = check(&t, &FaultSet::none(), &tables, &opts(true));
                let pairs = (t.num_hosts() * (t.num_hosts() - 1)) as u64;
                assert_eq!(r.delivered, pairs, "{n} on {}: {:?}", t.name, r.failures);
                // Every route on a fat-tree here is up*/down*, even for the
                // engines that do not claim deadlock freedom in general.
                assert!(r.is_ok(), "{n} on {}: {:?}", t.name, r.failures);
            }
        }
    }

    #[test]
    fn fault_tolerant_engines_deliver_every_connected_pair_under_link_faults() {
        let tolerant = [
            "dmodc",
            "ftree",
            "ftree2",
            "ftree-random",
            "random",
            "minhop",
            "updown",
            "bfs-random",
            "bfs-dmodc",
            "bfs-ftree",
            "bfs-ftree2",
            "bfs-ftree-random",
        ];
        let rank_based = ["dmodc", "ftree", "ftree2", "ftree-random"];
        let mut up_down_cuts = 0;
        for t in trees() {
            for (k, seed) in [(1, 11), (3, 12), (3, 13)] {
                let f = random_link_faults(&t, k, seed);
                // With levels fixed (§5), a fault can leave topology-connected
                // leaves without any up*/down* path: rank-based engines must
                // route everything else and leave exactly those pairs out.
                let o = Orientation::ranked(&t, &f).unwrap();
                let cut = Preprocessed::compute(&o).unroutable_leaf_pairs(&o);
                up_down_cuts += cut.len();
                let leaf = |h: usize| o.host_leaf[h].map(|x| x.0);
                let mut cut_pairs = 0u64;
                for s in 0..t.num_hosts() {
                    // Pairs the faults cut off altogether are not routing failures.
                    let dist = t.distances_from(NodeRef::Host(s as u32), &f);
                    for (d, reached) in dist.iter().take(t.num_hosts()).enumerate() {
                        if let (Some(a), Some(b)) = (leaf(s), leaf(d)) {
                            cut_pairs += u64::from(cut.contains(&(a, b)) && reached.is_some());
                        }
                    }
                }
                for n in tolerant {
                    let e = engine(n).unwrap();
                    let tables = e.route(&t, &f).unwrap();
                    let r = check(&t, &f, &tables, &opts(e.claims_deadlock_free()));
                    let expected = if rank_based.contains(&n) {
                        cut_pairs
                    } else {
                        0
                    };
                    assert!(
                        r.failed_pairs == expected
                            && r.pairs_checked > 0
                            && r.failures
                                .iter()
                                .all(|x| matches!(x, CheckFailure::NoRoute { .. })),
                        "{n} on {} with {k} faults (seed {seed}): {:?}",
                        t.name,
                        r.failures
                    );
                }
                // Dmodk and Gdmodk ignore faults; on a full PGFT they use every
                // link, so the checker must report broken routes.
                for n in ["dmodk", "gdmodk"] {
                    let tables = engine(n).unwrap().route(&t, &f).unwrap();
                    let r = check(&t, &f, &tables, &opts(false));
                    assert!(!r.is_ok() && r.failed_pairs > 0, "{n} on {}", t.name);
                }
            }
        }
        // The seeds do exercise up*/down* cuts (e.g. seed 13 separates the
        // 2-ary 3-tree's leaves 2 and 3, each left on a different plane).
        assert!(up_down_cuts > 0);
    }

    #[test]
    fn generic_engines_on_direct_networks() {
        let directs = [
            mesh_or_torus(&[3, 3], false).unwrap(),
            hypercube(4).unwrap(),
            mesh_or_torus(&[3, 4], true).unwrap(),
        ];
        for t in &directs {
            for (k, seed) in [(0, 0), (1, 21), (3, 22)] {
                let f = random_link_faults(t, k, seed);
                for n in [
                    "updown",
                    "bfs-random",
                    "bfs-dmodc",
                    "bfs-ftree",
                    "bfs-ftree2",
                ] {
                    let tables = engine(n).unwrap().route(t, &f).unwrap();
                    let r = check(t, &f, &tables, &opts(true));
                    assert!(r.is_ok(), "{n} on {} faults {k}: {:?}", t.name, r.failures);
                }
                for n in ["minhop", "random"] {
                    let tables = engine(n).unwrap().route(t, &f).unwrap();
                    let r = check(t, &f, &tables, &opts(false));
                    assert!(r.is_ok(), "{n} on {}: {:?}", t.name, r.failures);
                }
            }
            // Fat-tree engines refuse direct networks with a reason.
            for n in [
                "dmodk",
                "gdmodk",
                "dmodc",
                "ftree",
                "ftree2",
                "ftree-random",
            ] {
                match engine(n).unwrap().route(t, &FaultSet::none()) {
                    Err(RoutingError::NotApplicable { reason, .. }) => assert!(!reason.is_empty()),
                    other => panic!("{n} on {}: {:?}", t.name, other.map(|x| x.engine)),
                }
            }
        }
        // Min-hop on a 4x4 torus has cyclic dependencies with one VC: it does
        // not claim deadlock freedom, and the checker shows why.
        let torus = mesh_or_torus(&[4, 4], true).unwrap();
        let tables = engine("minhop")
            .unwrap()
            .route(&torus, &FaultSet::none())
            .unwrap();
        let r = check(&torus, &FaultSet::none(), &tables, &opts(true));
        assert_eq!(r.failed_pairs, 0);
        assert!(r.cycle().is_some());
    }
}
