//! Intermediate nodes (*A Routing Methodology for Achieving Fault
//! Tolerance in Direct Networks*): the controller installs the leg tables
//! and pushes the fault set to the hosts, which choose the routes.

use super::Mechanism;
use crate::events::{ControllerEvent, EventLog, Record, RoutesInstalled};
use crate::fabric::{Fabric, HostReports, SwitchReports};
use anyhow::{bail, Context, Result};
use flitnet_core::control::{Request, SwitchReport};
use flitnet_core::mechanism::intermediate::{IntermediateStats, Mechanisms, RouteTableSummary};
use flitnet_core::routing::adaptive::{escape_vcs_per_leg, leg_tables_ordered, EscapeOrder};
use flitnet_core::routing::RoutingTables;
use flitnet_core::topology::{FaultSet, NodeRef, Topology};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Time after pushing intermediate-node routes before drops are counted
/// as "after the switchover": packets whose heads left before the push
/// either meet the fault or land well within it.
pub const SWITCHOVER_SETTLE: Duration = Duration::from_millis(500);

/// A run with intermediate nodes: the leg tables it installs and
/// what it measured at the switchover.
pub struct IntermediateSetup {
    /// The variant, as reports and events spell it.
    pub mechanism: Mechanism,
    pub mechanisms: Mechanisms,
    pub legs: u8,
    pub tables: RoutingTables,
    /// Switch drops (all reasons) when hosts had switched and old packets
    /// had settled.
    pub drops_at_switchover: Option<u64>,
}

impl IntermediateSetup {
    /// Leg tables for `topo` (a mesh or torus), refusing a fabric with
    /// fewer VCs than the mechanism's escape networks need.
    /// `Ok(None)` for a mechanism that is not an intermediate-node one.
    pub fn of(topo: &Topology, mechanism: Mechanism, vcs: u8) -> Result<Option<Self>> {
        let Some(mechanisms) = mechanism.intermediate() else {
            return Ok(None);
        };
        let legs = mechanisms.max_intermediates + 1;
        // M's forced runs need the direction-order escape (§3.6).
        let order = if mechanisms.misroute {
            EscapeOrder::DirectionOrder
        } else {
            EscapeOrder::Dor
        };
        let tables = leg_tables_ordered(topo, legs, order).with_context(|| {
            format!("mechanism `{mechanism}`: intermediate nodes need a mesh or torus")
        })?;
        if tables.vcs > vcs {
            bail!(
                "mechanism `{mechanism}` needs {} virtual channels on `{}` ({legs} legs × {} \
                 escape VCs + 1 adaptive); run with --vcs {}",
                tables.vcs,
                topo.name,
                escape_vcs_per_leg(topo)?,
                tables.vcs
            );
        }
        Ok(Some(IntermediateSetup {
            mechanism,
            mechanisms,
            legs,
            tables,
            drops_at_switchover: None,
        }))
    }

    /// Pushes the fault set to every host (§3.2: the route table
    /// lives at the source); returns the event-log record.
    pub fn push_faults(
        &self,
        fabric: &Fabric,
        topo: &Topology,
        faults: &FaultSet,
        events: &EventLog,
    ) -> Result<Record> {
        let answers = fabric
            .broadcast(
                |n| matches!(n, NodeRef::Host(_)),
                |_| Request::SetIntermediateRoutes {
                    topology: Box::new(topo.clone()),
                    faults: faults.clone(),
                    mechanism: self.mechanism.to_string(),
                    legs: self.legs,
                },
            )
            .context("pushing the fault set to the hosts")?;
        let summaries = answers
            .into_iter()
            .map(|(_, reply)| reply.into_intermediate_routes())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(events.record(ControllerEvent::RoutesInstalled(installed(
            &self.mechanism.to_string(),
            faults,
            &summaries,
        ))))
    }

    /// The `intermediate` section of the JSON report.
    pub fn report(&self, switches: &SwitchReports, hosts: &HostReports) -> IntermediateReport {
        let host_sum = |f: fn(&IntermediateStats) -> u64| -> u64 {
            hosts.iter().map(|(_, r)| f(&r.endpoint.intermediate)).sum()
        };
        let switch_sum =
            |f: fn(&SwitchReport) -> u64| -> u64 { switches.iter().map(|(_, r)| f(r)).sum() };
        let drops = switch_sum(SwitchReport::dropped_flits);
        IntermediateReport {
            mechanism: self.mechanism.to_string(),
            legs: self.legs,
            vcs: self.tables.vcs,
            intermediate_pops: switch_sum(|r| r.counters.intermediate_pops),
            packets_via_intermediate: host_sum(|s| s.packets_via_intermediate),
            packets_deterministic: host_sum(|s| s.packets_deterministic),
            packets_misrouted: host_sum(|s| s.packets_misrouted),
            misroute_hops: switch_sum(|r| r.counters.misroute_hops),
            packets_unrouted: host_sum(|s| s.packets_unrouted),
            switch_drops: drops,
            lost_at_disabled_ports: switch_sum(|r| r.rx_dropped_down),
            drops_at_switchover: self.drops_at_switchover,
            drops_after_switchover: self.drops_at_switchover.map(|d| drops.saturating_sub(d)),
        }
    }
}

/// What the intermediate nodes did in a run (the `intermediate`
/// section of `up --json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
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

/// Every live switch's drops, summed.
pub fn total_switch_drops(fabric: &Fabric) -> Result<u64> {
    Ok(fabric
        .switch_reports()?
        .iter()
        .map(|(_, r)| r.dropped_flits())
        .sum())
}

/// The record of fault routes pushed to the hosts: the same event as a
/// switch re-route (the chaos report times recovery by it), saying what the
/// hosts planned (`summaries`, one per host).
pub fn installed(
    mechanism: &str,
    faults: &FaultSet,
    summaries: &[RouteTableSummary],
) -> RoutesInstalled {
    let sum =
        |f: fn(&RouteTableSummary) -> u32| -> u64 { summaries.iter().map(|s| f(s) as u64).sum() };
    RoutesInstalled {
        engine: "intermediate-nodes".into(),
        failed_links: Some(faults.links.iter().copied().collect()),
        mechanism: Some(mechanism.to_string()),
        faulty_links: Some(faults.links.len()),
        routed_pairs: Some(sum(|s| s.routed)),
        not_tolerated_pairs: Some(sum(|s| s.not_tolerated)),
        disconnected_pairs: Some(sum(|s| s.disconnected)),
        ..RoutesInstalled::default()
    }
}
