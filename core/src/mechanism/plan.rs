//! A mechanism's controller half: what the controller installs for it at
//! bring-up, how it answers detected faults when it answers them itself,
//! and its section of the run report. Pure computation over the topology
//! and the daemons' reports, so that `up`, `chaos`, `attach` and the
//! simulator share it; the front ends move the configurations (over the
//! control protocol, or straight into the simulated nodes) and never name
//! a mechanism.

use super::sbrp::RecoveryProtocol;
use super::Variant;
use crate::host::endpoint::HostReport;
use crate::routing::RoutingTables;
use crate::switch::SwitchCounters;
use crate::topology::{FaultSet, NodeRef, Topology};

/// A mechanism's configuration of one node, as its controller half makes
/// it and its switch or host half reads it. It is the mechanism's own
/// typed configuration serialised: the control protocol carries it without
/// knowing its type, so adding a mechanism adds no request.
pub type NodeConfig = serde_json::Value;

/// What a mechanism's controller half needs to know about the run.
#[derive(Clone, Copy, Debug)]
pub struct RunSpec<'a> {
    pub topo: &'a Topology,
    /// Virtual channels of the fabric.
    pub vcs: u8,
    /// The routing engine of the run.
    pub engine: &'a str,
    /// The run installs tables from a file instead of computing them.
    pub tables_given: bool,
    /// The controller re-routes on detected faults.
    pub controller_reroutes: bool,
    /// The recovery protocol hosts and switches run.
    pub recovery: RecoveryProtocol,
    /// The run kills switches (not only links).
    pub kills_switches: bool,
}

/// Why a mechanism cannot run as asked (said before anything starts).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("mechanism `{variant}`: {reason}")]
pub struct PlanError {
    pub variant: &'static str,
    pub reason: String,
}

impl PlanError {
    pub fn new(variant: &Variant, reason: impl Into<String>) -> Self {
        PlanError {
            variant: variant.name,
            reason: reason.into(),
        }
    }
}

/// Why a node refused a mechanism's configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigureError {
    #[error("unknown mechanism `{0}`")]
    Unknown(String),
    #[error("mechanism `{0}` configures no switch")]
    NotOnSwitches(&'static str),
    #[error("mechanism `{0}` configures no host")]
    NotOnHosts(&'static str),
    #[error("mechanism `{mechanism}`: malformed configuration: {reason}")]
    Malformed {
        mechanism: &'static str,
        reason: String,
    },
    #[error("mechanism `{mechanism}`: {reason}")]
    Refused {
        mechanism: &'static str,
        reason: String,
    },
}

impl ConfigureError {
    /// The typed configuration in `config`, or why it is not one.
    pub fn decode<T: serde::de::DeserializeOwned>(
        mechanism: &'static str,
        config: &NodeConfig,
    ) -> Result<T, ConfigureError> {
        T::deserialize(config).map_err(|e| ConfigureError::Malformed {
            mechanism,
            reason: e.to_string(),
        })
    }

    pub fn refused(mechanism: &'static str, reason: impl std::fmt::Display) -> Self {
        ConfigureError::Refused {
            mechanism,
            reason: reason.to_string(),
        }
    }
}

/// The typed configuration `value` as a [`NodeConfig`].
pub fn encode<T: serde::Serialize>(value: &T) -> NodeConfig {
    serde_json::to_value(value).expect("mechanism configurations serialise to JSON")
}

/// What the hosts made of a fault set a mechanism pushed to them: the
/// controller's record of the answer, like a re-route's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultsAnswered {
    /// The name the event log gives the answer, in place of an engine's.
    pub engine: &'static str,
    pub routed_pairs: u64,
    pub not_tolerated_pairs: u64,
    pub disconnected_pairs: u64,
}

/// What the daemons reported at the end of a run, as a mechanism's report
/// reads it.
#[derive(Clone, Debug, Default)]
pub struct Reported<'a> {
    pub switches: Vec<&'a SwitchCounters>,
    pub hosts: Vec<&'a HostReport>,
    /// Flits the switches dropped, all reasons.
    pub switch_drops: u64,
    /// Items (flits, credits) that reached a port the controller had
    /// disabled, or were still propagating on it.
    pub lost_at_disabled_ports: u64,
    /// Switch drops when the hosts had taken in the mechanism's answer to
    /// the faults and old packets had settled, if measured.
    pub drops_at_switchover: Option<u64>,
}

/// A mechanism's section of a run report.
#[derive(Clone, Debug, PartialEq)]
pub struct MechanismReport {
    /// Its key in the JSON report.
    pub key: &'static str,
    /// The mechanism's own typed report, serialised.
    pub body: serde_json::Value,
    /// One line for the text report.
    pub line: String,
}

/// A mechanism's controller half for one run, made by
/// [`super::Mechanism::plan`] once the run is checked.
pub trait MechanismPlan: std::fmt::Debug + Send + Sync {
    /// The variant the run selected.
    fn variant(&self) -> &'static Variant;

    /// Tables the run installs instead of its engine's.
    fn tables(&self) -> Option<&RoutingTables> {
        None
    }

    /// The configuration `node` gets at bring-up, after the tables.
    fn bring_up(&self, _node: NodeRef) -> Option<NodeConfig> {
        None
    }

    /// What the event log records of the bring-up configuration.
    fn describe(&self) -> Option<NodeConfig> {
        None
    }

    /// Whether the mechanism answers detected faults itself, by
    /// [`Self::on_faults`], where the controller would re-route.
    fn answers_faults(&self) -> bool {
        false
    }

    /// The configuration `node` gets for the fault set `faults` (only if
    /// [`Self::answers_faults`]).
    fn on_faults(&self, _faults: &FaultSet, _node: NodeRef) -> Option<NodeConfig> {
        None
    }

    /// The record of the nodes' answers to [`Self::on_faults`].
    fn faults_answered(&self, _answers: &[NodeConfig]) -> Result<FaultsAnswered, ConfigureError> {
        Ok(FaultsAnswered::default())
    }

    /// Its section of the run report.
    fn report(&self, _reported: &Reported<'_>) -> Option<MechanismReport> {
        None
    }
}
