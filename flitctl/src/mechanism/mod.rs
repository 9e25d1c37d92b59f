//! Mechanisms as the controller selects and drives them. A mechanism is
//! selected by its one spelling in core's registry
//! ([`flitnet_core::mechanism::REGISTRY`]); its controller half
//! ([`MechanismPlan`], in its own folder in core) says what to install at
//! bring-up, how it answers faults and what it reports. This module moves
//! those configurations to a live fabric and folds the answers into the
//! event log and the report, the same way for every mechanism; the
//! simulator applies the same configurations to its nodes.

use crate::events::{ControllerEvent, EventLog, Record, RoutesInstalled};
use crate::fabric::{Fabric, HostReports, SwitchReports};
use anyhow::{Context, Result};
use flitnet_core::control::{Reply, Request, SwitchReport};
use flitnet_core::mechanism::intermediate::Mechanisms;
use flitnet_core::mechanism::sbrp::RecoveryProtocol;
use flitnet_core::mechanism::{
    self as registry, FaultsAnswered, MechanismPlan, MechanismReport, NodeConfig, Reported,
    RunSpec, Variant,
};
use flitnet_core::topology::{FaultSet, NodeRef, Topology};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Time after a mechanism's answer to faults reached the hosts before
/// drops are counted as "after the switchover": packets whose heads left
/// before it either meet the fault or land well within it.
pub const SWITCHOVER_SETTLE: Duration = Duration::from_millis(500);

/// A mechanism's controller half, shared by the controller loop and the
/// front end of a run.
pub type Plan = Arc<dyn MechanismPlan>;

/// A fabric mechanism as `--mechanism` and scenario files select it: a
/// registered variant (`dlr-link`, `ft2ei-dyn`, `i-d`, `sbrp1`, …) or
/// `none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Mechanism(Option<&'static Variant>);

impl Mechanism {
    /// No mechanism: packets routed to a dead port are dropped.
    pub const NONE: Mechanism = Mechanism(None);

    /// `none` or a registered variant's name.
    pub fn parse(name: &str) -> Result<Self, String> {
        if name == "none" {
            return Ok(Mechanism::NONE);
        }
        registry::parse(name)
            .map(|v| Mechanism(Some(v)))
            .ok_or_else(|| {
                format!(
                    "unknown mechanism `{name}` (known: none, {})",
                    registry::variants()
                        .map(|v| v.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }

    /// A switch or host mechanism for `--mechanism` (`up`, `attach`): the
    /// recovery protocols have their own option.
    pub fn parse_fabric(name: &str) -> Result<Self, String> {
        let m = Mechanism::parse(name)?;
        if m.recovery_protocol().is_on() {
            return Err(format!(
                "`{name}` is a recovery protocol: select it with --recovery-protocol {name}"
            ));
        }
        Ok(m)
    }

    /// Its one spelling.
    pub fn name(self) -> &'static str {
        self.0.map_or("none", |v| v.name)
    }

    /// The registered variant, unless `none`.
    pub fn variant(self) -> Option<&'static Variant> {
        self.0
    }

    /// Whether it is a variant of the registered mechanism `mechanism`.
    pub fn is_of(self, mechanism: &str) -> bool {
        self.0.is_some_and(|v| v.mechanism == mechanism)
    }

    /// The intermediate-node mechanism set (*A Routing Methodology for
    /// Achieving Fault Tolerance in Direct Networks*), for its variants.
    pub fn intermediate(self) -> Option<Mechanisms> {
        self.0.and_then(Mechanisms::of_variant)
    }

    /// The recovery protocol it selects (the SBRP levels only).
    pub fn recovery_protocol(self) -> RecoveryProtocol {
        self.0
            .filter(|v| v.mechanism == flitnet_core::mechanism::sbrp::NAME)
            .and_then(|v| RecoveryProtocol::parse(v.name))
            .unwrap_or(RecoveryProtocol::None)
    }

    /// One of the dynamic local rerouting variants.
    pub fn is_dlr(self) -> bool {
        self.is_of(flitnet_core::mechanism::dlr::NAME)
    }

    /// Whether its routing can deadlock around faults beyond its
    /// guarantee (adaptive DLR; docs/sbrp.md, "Deadlock").
    pub fn deadlocks_beyond_guarantee(self) -> bool {
        self.0
            .is_some_and(flitnet_core::mechanism::dlr::deadlocks_beyond_guarantee)
    }

    /// Its controller half for the run `run`, checked before anything
    /// starts (`None`: nothing for the controller to install).
    pub fn plan(self, run: &RunSpec<'_>) -> Result<Option<Plan>> {
        let Some(v) = self.0 else { return Ok(None) };
        Ok(registry::plan(v, run)?.map(Arc::from))
    }

    /// Whether `topo` with `vcs` virtual channels can run it.
    pub fn check(self, topo: &Topology, vcs: u8) -> Result<()> {
        if let Some(v) = self.0 {
            v.check(topo, vcs)?;
        }
        Ok(())
    }
}

/// Installs a mechanism's bring-up configuration in every live node that
/// has one, and records it.
pub fn install(fabric: &Fabric, plan: &dyn MechanismPlan, events: &EventLog) -> Result<()> {
    let variant = plan.variant();
    let answers = configure_each(fabric, plan, |n| plan.bring_up(n))
        .with_context(|| format!("configuring mechanism `{}`", variant.name))?;
    if let (false, Some(config)) = (answers.is_empty(), plan.describe()) {
        events.record(ControllerEvent::MechanismConfigured {
            mechanism: variant.name.to_string(),
            config,
        });
    }
    Ok(())
}

/// Sends each live node the configuration `config_of` gives it (nodes it
/// gives none are left alone), computing each once; the nodes' replies.
fn configure_each(
    fabric: &Fabric,
    plan: &dyn MechanismPlan,
    config_of: impl Fn(NodeRef) -> Option<NodeConfig>,
) -> Result<Vec<(NodeRef, Reply)>> {
    let configs: BTreeMap<NodeRef, NodeConfig> = fabric
        .daemons
        .iter()
        .filter(|d| !d.dead)
        .filter_map(|d| config_of(d.node).map(|c| (d.node, c)))
        .collect();
    let mechanism = plan.variant().mechanism;
    fabric.broadcast(
        |n| configs.contains_key(&n),
        |n| Request::ConfigureMechanism {
            mechanism: mechanism.to_string(),
            config: configs.get(&n).cloned(),
        },
    )
}

/// Pushes a mechanism's answer to the fault set `faults` to the live
/// nodes; returns the event-log record of what they made of it.
pub fn answer_faults(
    fabric: &Fabric,
    plan: &dyn MechanismPlan,
    faults: &FaultSet,
    events: &EventLog,
) -> Result<Record> {
    let answers =
        configure_each(fabric, plan, |n| plan.on_faults(faults, n)).with_context(|| {
            format!(
                "pushing the fault set to mechanism `{}`",
                plan.variant().name
            )
        })?;
    let mut bodies = Vec::with_capacity(answers.len());
    for (_, reply) in answers {
        if let Some(answer) = reply.into_mechanism_answer()? {
            bodies.push(answer);
        }
    }
    let answered = plan.faults_answered(&bodies)?;
    Ok(events.record(ControllerEvent::RoutesInstalled(installed(
        plan, faults, &answered,
    ))))
}

/// The record of a mechanism's answer to faults: the same event as a
/// switch re-route (reports time recovery by it), saying what the nodes
/// made of it.
pub fn installed(
    plan: &dyn MechanismPlan,
    faults: &FaultSet,
    answered: &FaultsAnswered,
) -> RoutesInstalled {
    RoutesInstalled {
        engine: answered.engine.into(),
        failed_links: Some(faults.links.iter().copied().collect()),
        mechanism: Some(plan.variant().name.to_string()),
        faulty_links: Some(faults.links.len()),
        routed_pairs: Some(answered.routed_pairs),
        not_tolerated_pairs: Some(answered.not_tolerated_pairs),
        disconnected_pairs: Some(answered.disconnected_pairs),
        ..RoutesInstalled::default()
    }
}

/// A mechanism's section of the run report, from the daemons' last
/// reports (`drops_at_switchover`: switch drops once its answer to faults
/// had settled, if measured).
pub fn report(
    plan: &dyn MechanismPlan,
    switches: &SwitchReports,
    hosts: &HostReports,
    drops_at_switchover: Option<u64>,
) -> Option<MechanismReport> {
    let sum = |f: fn(&SwitchReport) -> u64| -> u64 { switches.iter().map(|(_, r)| f(r)).sum() };
    plan.report(&Reported {
        switches: switches.iter().map(|(_, r)| &r.counters).collect(),
        hosts: hosts.iter().map(|(_, r)| &r.endpoint).collect(),
        switch_drops: sum(SwitchReport::dropped_flits),
        lost_at_disabled_ports: sum(|r| r.rx_dropped_down),
        drops_at_switchover,
    })
}

/// Every live switch's drops, summed.
pub fn total_switch_drops(fabric: &Fabric) -> Result<u64> {
    Ok(fabric
        .switch_reports()?
        .iter()
        .map(|(_, r)| r.dropped_flits())
        .sum())
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Mechanism {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Mechanism::parse(&name).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for Mechanism {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_variant_parses_by_its_name_and_prints_it_back() {
        for v in registry::variants() {
            let m = Mechanism::parse(v.name).unwrap();
            assert_eq!(m.name(), v.name);
            assert_eq!(m.to_string(), v.name);
        }
        assert_eq!(Mechanism::parse("none").unwrap(), Mechanism::NONE);
        let err = Mechanism::parse("I+D").unwrap_err();
        assert!(
            err.contains("unknown mechanism `I+D`") && err.contains("i-d"),
            "{err}"
        );
    }

    #[test]
    fn recovery_protocols_are_refused_where_they_have_their_own_option() {
        assert_eq!(
            Mechanism::parse("sbrp2").unwrap().recovery_protocol(),
            RecoveryProtocol::Sbrp2
        );
        let err = Mechanism::parse_fabric("sbrp1").unwrap_err();
        assert!(err.contains("--recovery-protocol sbrp1"), "{err}");
        assert!(Mechanism::parse_fabric("dlr-link").unwrap().is_dlr());
    }

    #[test]
    fn intermediate_variants_give_their_mechanism_set() {
        let m = Mechanism::parse("ix2-d").unwrap();
        assert_eq!(m.intermediate(), Some(Mechanisms::i_x2_d()));
        assert!(Mechanism::parse("dlr").unwrap().intermediate().is_none());
    }
}
