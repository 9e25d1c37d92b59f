//! Intermediate nodes' controller half: the switches run the leg tables
//! (installed as the run's tables); on detected faults the controller
//! pushes the fault set to every host, which plans its own routes (§3.2:
//! the route table lives at the source).

use super::{IntermediateRoutes, Mechanisms, RouteTableSummary, NAME};
use crate::host::endpoint::HostEndpoint;
use crate::mechanism::plan::{
    encode, ConfigureError, FaultsAnswered, MechanismPlan, MechanismReport, NodeConfig, PlanError,
    Reported,
};
use crate::mechanism::{RunSpec, Variant};
use crate::routing::adaptive::{escape_vcs_per_leg, leg_tables_ordered, EscapeOrder};
use crate::routing::RoutingTables;
use crate::topology::{FaultSet, NodeRef, Topology};
use serde::{Deserialize, Serialize};

/// What each host is told about the faults: the fabric, the faults, the
/// variant it plans routes with and the legs the switches carry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultRoutesConfig {
    pub topology: Box<Topology>,
    pub faults: FaultSet,
    /// The variant's name (`i`, `ix2-d`, …).
    pub variant: String,
    pub legs: u8,
}

/// Intermediate nodes in a run.
#[derive(Debug)]
pub struct IntermediatePlan {
    variant: &'static Variant,
    pub mechanisms: Mechanisms,
    pub legs: u8,
    pub tables: RoutingTables,
    topo: Topology,
}

impl IntermediatePlan {
    /// Leg tables for `run.topo` (a mesh or torus), refusing a fabric with
    /// fewer VCs than the variant's escape networks need.
    pub fn new(variant: &'static Variant, run: &RunSpec<'_>) -> Result<Self, PlanError> {
        let mechanisms = Mechanisms::of_variant(variant)
            .ok_or_else(|| PlanError::new(variant, "not an intermediate-node variant"))?;
        if run.tables_given {
            return Err(PlanError::new(
                variant,
                "installs its own tables; drop the tables file",
            ));
        }
        let legs = mechanisms.max_intermediates + 1;
        // M's forced runs need the direction-order escape (§3.6).
        let order = if mechanisms.misroute {
            EscapeOrder::DirectionOrder
        } else {
            EscapeOrder::Dor
        };
        let tables = leg_tables_ordered(run.topo, legs, order).map_err(|e| {
            PlanError::new(
                variant,
                format!("intermediate nodes need a mesh or torus: {e}"),
            )
        })?;
        if tables.vcs > run.vcs {
            let per_leg = escape_vcs_per_leg(run.topo).unwrap_or(1);
            return Err(PlanError::new(
                variant,
                format!(
                    "needs {} virtual channels on `{}` ({legs} legs × {per_leg} escape VCs + 1 \
                     adaptive); run with --vcs {}",
                    tables.vcs, run.topo.name, tables.vcs
                ),
            ));
        }
        Ok(IntermediatePlan {
            variant,
            mechanisms,
            legs,
            tables,
            topo: run.topo.clone(),
        })
    }
}

impl MechanismPlan for IntermediatePlan {
    fn variant(&self) -> &'static Variant {
        self.variant
    }

    fn tables(&self) -> Option<&RoutingTables> {
        Some(&self.tables)
    }

    fn answers_faults(&self) -> bool {
        true
    }

    fn on_faults(&self, faults: &FaultSet, node: NodeRef) -> Option<NodeConfig> {
        matches!(node, NodeRef::Host(_)).then(|| {
            encode(&FaultRoutesConfig {
                topology: Box::new(self.topo.clone()),
                faults: faults.clone(),
                variant: self.variant.name.to_string(),
                legs: self.legs,
            })
        })
    }

    fn faults_answered(&self, answers: &[NodeConfig]) -> Result<FaultsAnswered, ConfigureError> {
        let mut a = FaultsAnswered {
            engine: "intermediate-nodes",
            ..FaultsAnswered::default()
        };
        for answer in answers {
            let s: RouteTableSummary = ConfigureError::decode(NAME, answer)?;
            a.routed_pairs += s.routed as u64;
            a.not_tolerated_pairs += s.not_tolerated as u64;
            a.disconnected_pairs += s.disconnected as u64;
        }
        Ok(a)
    }

    fn report(&self, reported: &Reported<'_>) -> Option<MechanismReport> {
        let host_sum = |f: fn(&super::IntermediateStats) -> u64| -> u64 {
            reported.hosts.iter().map(|r| f(&r.intermediate)).sum()
        };
        let switch_sum = |f: fn(&crate::switch::SwitchCounters) -> u64| -> u64 {
            reported.switches.iter().map(|c| f(c)).sum()
        };
        let drops = reported.switch_drops;
        let report = IntermediateReport {
            mechanism: self.variant.name.to_string(),
            legs: self.legs,
            vcs: self.tables.vcs,
            intermediate_pops: switch_sum(|c| c.intermediate_pops),
            packets_via_intermediate: host_sum(|s| s.packets_via_intermediate),
            packets_deterministic: host_sum(|s| s.packets_deterministic),
            packets_misrouted: host_sum(|s| s.packets_misrouted),
            misroute_hops: switch_sum(|c| c.misroute_hops),
            packets_unrouted: host_sum(|s| s.packets_unrouted),
            switch_drops: drops,
            lost_at_disabled_ports: reported.lost_at_disabled_ports,
            drops_at_switchover: reported.drops_at_switchover,
            drops_after_switchover: reported
                .drops_at_switchover
                .map(|d| drops.saturating_sub(d)),
        };
        let line = format!(
            "intermediate nodes ({}): {} packets routed via intermediates, {} leg advances \
             in switches, {} drops after the switchover",
            report.mechanism,
            report.packets_via_intermediate,
            report.intermediate_pops,
            report
                .drops_after_switchover
                .map_or("n/a".to_string(), |d| d.to_string())
        );
        Some(MechanismReport {
            key: "intermediate",
            body: encode(&report),
            line,
        })
    }
}

/// A host daemon's side: plan the routes around the pushed faults (`None`:
/// direct routes again); the answer is the routes' summary.
pub fn configure_host(
    host: &mut HostEndpoint,
    config: Option<&NodeConfig>,
) -> Result<Option<NodeConfig>, ConfigureError> {
    let Some(config) = config else {
        host.set_intermediate_routes(None);
        return Ok(None);
    };
    let c: FaultRoutesConfig = ConfigureError::decode(NAME, config)?;
    let mechanisms = crate::mechanism::parse(&c.variant)
        .and_then(Mechanisms::of_variant)
        .ok_or_else(|| {
            ConfigureError::refused(
                NAME,
                format!("unknown intermediate-node variant `{}`", c.variant),
            )
        })?;
    let hosts = host.config().hosts as usize;
    if c.topology.num_hosts() != hosts {
        return Err(ConfigureError::refused(
            NAME,
            format!(
                "the topology has {} hosts, this fabric {hosts}",
                c.topology.num_hosts()
            ),
        ));
    }
    let me = host.config().host;
    let routes = IntermediateRoutes::plan(&c.topology, &c.faults, me, &mechanisms, c.legs)
        .map_err(|e| ConfigureError::refused(NAME, e))?;
    let summary = routes.summary().clone();
    host.set_intermediate_routes(Some(routes));
    Ok(Some(encode(&summary)))
}

/// What the intermediate nodes did in a run (the `intermediate` section of
/// the run report).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntermediateReport {
    pub mechanism: String,
    pub legs: u8,
    pub vcs: u8,
    /// Heads that started their next leg in a switch without ejection.
    pub intermediate_pops: u64,
    pub packets_via_intermediate: u64,
    pub packets_deterministic: u64,
    pub packets_misrouted: u64,
    pub misroute_hops: u64,
    pub packets_unrouted: u64,
    pub switch_drops: u64,
    /// Items (flits, credits) that reached a port the controller had
    /// disabled, or were still propagating on it: lost with the link.
    pub lost_at_disabled_ports: u64,
    pub drops_at_switchover: Option<u64>,
    pub drops_after_switchover: Option<u64>,
}
