//! A Docker Compose bundle for a fabric: one container per switch and per
//! host, all on one user-defined network, plus a controller container and an
//! optional Prometheus + Grafana pair (`monitoring` profile).
//!
//! Everything here is pure: [`generate`] turns a topology into text and
//! configuration values, [`write_bundle`] only writes files. Nothing talks to
//! Docker.
//!
//! Addressing mirrors `flitctl up` (see [`crate::fabric`]): every node has its
//! own IPv4 address and the same fixed ports (data 7000/udp, control 7001/tcp,
//! metrics 9100/tcp). Under Compose the address is a static `ipv4_address` on
//! the bridge network, so that each daemon's configuration can name its
//! neighbours by IP before any container exists. `docker stack deploy`
//! ignores `ipv4_address` (swarm allocates overlay addresses itself); the
//! `deploy:` hints are there so that the same file is accepted by a swarm,
//! but peers there must be named by service DNS name, which the daemon
//! configuration cannot express yet (see docs/compose.md, "Swarm").

pub mod placement;

use crate::fabric::{daemon_configs, node_ip, CONTROL_PORT, DATA_PORT, METRICS_PORT};
use anyhow::Context;
use flitnet_core::control::{ConfigError, DaemonConfig, FabricParams, Role};
use flitnet_core::topology::{NodeRef, Topology, TopologyError};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::str::FromStr;

/// The network every container joins, unless told otherwise.
pub const DEFAULT_SUBNET: &str = "10.213.0.0/16";
/// A Linux bridge has at most 1024 ports (`BR_MAX_PORTS`); we keep a margin
/// for containers attached by hand (debug shells, tcpdump).
pub const MAX_BRIDGE_CONTAINERS: usize = 1000;
/// Where the configuration directory is mounted inside every container.
pub const CONFIG_MOUNT: &str = "/etc/flitnet";
/// Name of the fabric description inside the configuration directory.
pub const FABRIC_FILE: &str = "fabric.json";
/// Name of the Compose network.
pub const NETWORK: &str = "fabric";
/// Names of the services that are not fabric nodes.
pub const CONTROLLER_SERVICE: &str = "controller";
pub const PROMETHEUS_SERVICE: &str = "prometheus";
pub const GRAFANA_SERVICE: &str = "grafana";
/// The Compose profile holding Prometheus and Grafana.
pub const MONITORING_PROFILE: &str = "monitoring";

/// Offsets inside the subnet: `.1` is Docker's gateway, the next three are
/// the controller, Prometheus and Grafana; fabric nodes start at
/// [`FIRST_NODE_OFFSET`] so that adding a service later does not shift them.
const CONTROLLER_OFFSET: u32 = 2;
const PROMETHEUS_OFFSET: u32 = 3;
const GRAFANA_OFFSET: u32 = 4;
pub const FIRST_NODE_OFFSET: u32 = 16;
/// UDP port the controller receives daemon events on (see
/// [`crate::events`]); `flitctl attach` listens there on every address.
pub const EVENTS_PORT: u16 = 7002;
/// Loopback subnet handed to [`daemon_configs`]; its addresses are only
/// placeholders, rewritten to container addresses right after.
const PLACEHOLDER_SUBNET: u8 = 1;

/// What can make a bundle impossible to generate.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error("invalid subnet {text:?}: {reason}")]
    BadSubnet { text: String, reason: String },
    #[error(
        "topology {topology:?} has {nodes} nodes: with the controller, Prometheus and Grafana \
         that is {containers} containers on one bridge network (of the busiest machine), more than the {max} a Linux \
         bridge holds (1024 ports at most); use a smaller topology, `--nodes N` (several machines), or `flitctl up` \
         (one process per node on loopback) for fabrics this large"
    )]
    TooManyContainers {
        topology: String,
        nodes: usize,
        containers: usize,
        max: usize,
    },
    #[error(
        "subnet {subnet} has room for {available} fabric nodes (addresses from offset \
         {FIRST_NODE_OFFSET} up to the broadcast address), topology {topology:?} needs {needed}"
    )]
    SubnetTooSmall {
        subnet: Ipv4Subnet,
        topology: String,
        available: u64,
        needed: usize,
    },
    #[error("node {node:?} has no characters usable in a Compose service name")]
    UnusableNodeName { node: String },
    #[error("nodes {first:?} and {second:?} would both be Compose service {service:?}")]
    ServiceNameClash {
        first: String,
        second: String,
        service: String,
    },
    #[error("the controller command is empty")]
    EmptyControllerCommand,
    #[error("scrape interval {0}s is outside 1..=60 s")]
    BadScrapeInterval(u32),
    #[error("invalid topology: {0}")]
    Topology(#[from] TopologyError),
    #[error("configuration of {node}: {source}")]
    Config { node: String, source: ConfigError },
    #[error("serialising the bundle: {0}")]
    Serialise(String),
}

/// An IPv4 network in CIDR form, e.g. `10.213.0.0/16`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Ipv4Subnet {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Subnet {
    /// Number of addresses in the subnet, network and broadcast included.
    pub fn size(&self) -> u64 {
        1u64 << (32 - self.prefix)
    }

    /// The address `offset` above the network address, if it is neither the
    /// network nor the broadcast address.
    pub fn host(&self, offset: u32) -> Option<Ipv4Addr> {
        if offset == 0 || u64::from(offset) >= self.size() - 1 {
            return None;
        }
        Some(Ipv4Addr::from(u32::from(self.network) + offset))
    }

    /// How many fabric nodes fit from [`FIRST_NODE_OFFSET`] up to (not
    /// including) the broadcast address.
    pub fn node_capacity(&self) -> u64 {
        (self.size() - 1).saturating_sub(u64::from(FIRST_NODE_OFFSET))
    }
}

impl fmt::Display for Ipv4Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Ipv4Subnet {
    type Err = ComposeError;

    fn from_str(text: &str) -> Result<Self, ComposeError> {
        let bad = |reason: &str| ComposeError::BadSubnet {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let (addr, prefix) = text
            .split_once('/')
            .ok_or_else(|| bad("expected ADDRESS/PREFIX, e.g. 10.213.0.0/16"))?;
        let network: Ipv4Addr = addr.parse().map_err(|_| bad("not an IPv4 address"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| bad("the prefix length is not a number"))?;
        // /30 leaves two usable addresses, the least a gateway and one node need.
        if !(1..=30).contains(&prefix) {
            return Err(bad("the prefix length must be 1..=30"));
        }
        let host_bits = u32::from(network) & (u32::MAX >> prefix);
        if host_bits != 0 {
            return Err(bad("host bits are set (give the network address)"));
        }
        Ok(Ipv4Subnet { network, prefix })
    }
}

impl TryFrom<String> for Ipv4Subnet {
    type Error = ComposeError;
    fn try_from(s: String) -> Result<Self, ComposeError> {
        s.parse()
    }
}

impl From<Ipv4Subnet> for String {
    fn from(s: Ipv4Subnet) -> String {
        s.to_string()
    }
}

/// How to lay out the bundle.
#[derive(Clone, Debug)]
pub struct ComposeOptions {
    pub params: FabricParams,
    pub subnet: Ipv4Subnet,
    /// The fabric's shared secret (see [`crate::fabric::new_token`]).
    pub token: String,
    pub seed: u64,
    /// Image holding `/switchd`, `/hostd` and `/flitctl` (compose/Dockerfile).
    pub image: String,
    /// Command of the controller container.
    pub controller_command: Vec<String>,
    pub prometheus_image: String,
    pub grafana_image: String,
    /// The repository's `grafana/` directory, as seen from the bundle
    /// directory (relative paths are resolved by Compose from there).
    pub grafana_dir: String,
    /// Prometheus scrape interval, seconds.
    pub scrape_interval_s: u32,
    /// Where daemons push fault-detection events. None: the controller
    /// container (`.2`), port [`EVENTS_PORT`]. A controller running on the
    /// Docker host gives the network's gateway (`.1`) instead.
    pub events_addr: Option<SocketAddr>,
    /// Name peers by service DNS name (`s1-0:7000`) in the written
    /// configurations, listen on `0.0.0.0`, and let `flitctl attach` resolve
    /// daemons by service name: what a swarm needs, where task addresses
    /// are not known in advance (docs/compose.md, "Swarm").
    pub dns_peers: bool,
    /// Several machines: the machine of every node, written as swarm
    /// placement constraints in the stack file and into `fabric.json`
    /// (placement, docs/compose.md "Several machines").
    pub placement: Option<placement::Placement>,
}

impl Default for ComposeOptions {
    fn default() -> Self {
        ComposeOptions {
            params: FabricParams::default(),
            subnet: DEFAULT_SUBNET.parse().expect("the default subnet is valid"),
            token: crate::fabric::new_token(),
            seed: 1,
            image: "flitnet:latest".into(),
            controller_command: default_controller_command(),
            prometheus_image: "prom/prometheus:latest".into(),
            grafana_image: "grafana/grafana:latest".into(),
            grafana_dir: "../grafana".into(),
            scrape_interval_s: 2,
            events_addr: None,
            dns_peers: false,
            placement: None,
        }
    }
}

/// `flitctl attach` to the fabric described by the mounted fabric.json.
pub fn default_controller_command() -> Vec<String> {
    [
        "/flitctl",
        "attach",
        "--fabric",
        &format!("{CONFIG_MOUNT}/{FABRIC_FILE}"),
        "--duration",
        "30s",
        "--controller-metrics",
        &format!("0.0.0.0:{METRICS_PORT}"),
    ]
    .map(String::from)
    .to_vec()
}

/// One daemon as the controller sees it in `fabric.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComposeDaemon {
    /// Node name from the topology (metric label, logs).
    pub name: String,
    /// Compose service name (= DNS name on the network).
    pub service: String,
    #[serde(flatten)]
    pub role: Role,
    pub data_addr: SocketAddr,
    pub control_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// The machine (swarm node label value) the daemon is placed on, when
    /// the bundle spreads the fabric over several (`--nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

/// `fabric.json`: what a controller needs to attach to a fabric that Compose
/// started. Daemons are listed in node order (hosts, then switches), the
/// same order as [`Topology::nodes`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComposeFabric {
    pub token: String,
    pub topology_name: String,
    /// The whole topology, so that the controller can compute routes.
    pub topology: Topology,
    pub daemons: Vec<ComposeDaemon>,
    /// Link and buffer parameters every daemon was configured with.
    #[serde(default)]
    pub params: FabricParams,
    /// Where the daemons push events: the controller listens on its port.
    #[serde(default)]
    pub events_addr: Option<SocketAddr>,
    /// Daemons are reached by service name (`service:7001`), resolved by
    /// the controller, not by the addresses listed (see
    /// [`ComposeOptions::dns_peers`]).
    #[serde(default)]
    pub dns_names: bool,
    /// The machine the stack pins the controller to, when the daemons are
    /// placed on several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_machine: Option<String>,
}

impl ComposeFabric {
    pub fn load(path: &Path) -> anyhow::Result<ComposeFabric> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
    }
}

/// The configuration of one node's container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    pub node: NodeRef,
    pub service: String,
    pub config: DaemonConfig,
}

/// Everything [`write_bundle`] writes.
#[derive(Clone, Debug)]
pub struct ComposeBundle {
    /// `docker-compose.yml`.
    pub compose_yaml: String,
    /// `docker-stack.yml`: the same services for `docker stack deploy`,
    /// which rejects `profiles`; Prometheus and Grafana are there with
    /// `replicas: 0` instead (scale them to 1 to monitor). Its daemons can
    /// only reach each other once configurations name peers by DNS name
    /// (see the module documentation).
    pub stack_yaml: String,
    /// `configs/<service>.json`, in node order.
    pub configs: Vec<NodeConfig>,
    /// `configs/fabric.json`.
    pub fabric: ComposeFabric,
    /// `prometheus.yml`.
    pub prometheus_yml: String,
    /// `prometheus-host.yml`: the same scrapes for a Prometheus on the
    /// Docker host, which cannot resolve service names: daemons by IP, the
    /// controller where its events go (the controller container, or a
    /// controller on the host listening on the gateway). None for a swarm
    /// bundle, whose task addresses are not known in advance.
    pub prometheus_host_yml: Option<String>,
    /// `.env`: settings Compose reads from the bundle's directory (see
    /// [`compose_env`]).
    pub env_file: String,
    /// Write configurations naming peers by service name.
    pub dns_peers: bool,
    pub subnet: Ipv4Subnet,
}

/// The bundle's `.env`, which Compose (v1 and v2) reads from the compose
/// file's directory.
///
/// `COMPOSE_PARALLEL_LIMIT`: docker-compose 1.x (Debian's 1.29.2 on this
/// project's machines) runs `up` as nested parallel loops, one task per
/// service that itself waits for one task per container, and both draw from
/// one global semaphore of `COMPOSE_PARALLEL_LIMIT` slots (default 64). With
/// more services than slots, the service tasks hold every slot while their
/// container tasks wait for one: `up` deadlocks. Measured here with 112
/// trivial containers: 23 created after 10 minutes at the default limit (7
/// at a limit of 8), all 112 in 14.4 s at a limit above twice the service
/// count. Compose v2 has no such nesting; the setting only caps its
/// concurrency there.
pub fn compose_env(containers: usize) -> String {
    format!(
        "# Written by `flitctl compose`. A limit under twice the number of services\n\
         # deadlocks docker-compose 1.x's `up` (flitctl/src/compose.rs, compose_env).\n\
         COMPOSE_PARALLEL_LIMIT={}\n",
        2 * containers + 8
    )
}

/// Builds the bundle for `topo`.
pub fn generate(topo: &Topology, opts: &ComposeOptions) -> Result<ComposeBundle, ComposeError> {
    topo.validate()?;
    if opts.controller_command.is_empty() {
        return Err(ComposeError::EmptyControllerCommand);
    }
    if !(1..=60).contains(&opts.scrape_interval_s) {
        return Err(ComposeError::BadScrapeInterval(opts.scrape_interval_s));
    }
    let nodes: Vec<NodeRef> = topo.nodes().collect();
    let containers = nodes.len() + 3;
    // One bridge per machine: with a placement, the largest part counts.
    let per_machine = opts
        .placement
        .as_ref()
        .map_or(nodes.len(), |p| p.max_processes())
        + 3;
    if per_machine > MAX_BRIDGE_CONTAINERS {
        return Err(ComposeError::TooManyContainers {
            topology: topo.name.clone(),
            nodes: nodes.len(),
            containers: per_machine,
            max: MAX_BRIDGE_CONTAINERS,
        });
    }
    if opts.subnet.node_capacity() < nodes.len() as u64 {
        return Err(ComposeError::SubnetTooSmall {
            subnet: opts.subnet,
            topology: topo.name.clone(),
            available: opts.subnet.node_capacity(),
            needed: nodes.len(),
        });
    }
    let services = service_names(topo, &nodes)?;
    let ips: Vec<Ipv4Addr> = (0..nodes.len() as u32)
        .map(|i| {
            opts.subnet
                .host(FIRST_NODE_OFFSET + i)
                .expect("node_capacity was checked above")
        })
        .collect();

    // Reuse the loopback layout of `flitctl up`, then move every address
    // from its placeholder loopback IP to the node's container IP: same
    // ports, roles, peers and seeds as a local fabric.
    let rehome: HashMap<Ipv4Addr, Ipv4Addr> = ips
        .iter()
        .enumerate()
        .map(|(i, &ip)| (node_ip(PLACEHOLDER_SUBNET, i), ip))
        .collect();
    let move_addr = |a: SocketAddr| -> SocketAddr {
        let IpAddr::V4(v4) = a.ip() else {
            unreachable!("daemon_configs only makes IPv4 addresses")
        };
        let ip = rehome
            .get(&v4)
            .expect("daemon_configs only uses node_ip of the topology's nodes");
        SocketAddr::new(IpAddr::V4(*ip), a.port())
    };
    let events_addr = opts.events_addr.unwrap_or_else(|| {
        let controller = opts
            .subnet
            .host(CONTROLLER_OFFSET)
            .expect("a subnet with room for nodes has room for the controller");
        SocketAddr::new(IpAddr::V4(controller), EVENTS_PORT)
    });
    let configs: Vec<NodeConfig> = daemon_configs(
        topo,
        &opts.params,
        PLACEHOLDER_SUBNET,
        &opts.token,
        true,
        opts.seed,
        Some(events_addr),
        None,
        None,
    )
    .into_iter()
    .zip(&services)
    .map(|((node, mut config), service)| {
        config.data_addr = move_addr(config.data_addr);
        config.control_addr = move_addr(config.control_addr);
        config.metrics_addr = config.metrics_addr.map(move_addr);
        for p in &mut config.ports {
            p.peer = p.peer.map(move_addr);
        }
        NodeConfig {
            node,
            service: service.clone(),
            config,
        }
    })
    .collect();
    for c in &configs {
        c.config.validate().map_err(|source| ComposeError::Config {
            node: c.config.name.clone(),
            source,
        })?;
    }

    let fabric = ComposeFabric {
        token: opts.token.clone(),
        topology_name: topo.name.clone(),
        topology: topo.clone(),
        daemons: configs
            .iter()
            .map(|c| ComposeDaemon {
                name: c.config.name.clone(),
                service: c.service.clone(),
                role: c.config.role.clone(),
                data_addr: c.config.data_addr,
                control_addr: c.config.control_addr,
                metrics_addr: c
                    .config
                    .metrics_addr
                    .unwrap_or(SocketAddr::new(c.config.control_addr.ip(), METRICS_PORT)),
                machine: opts
                    .placement
                    .as_ref()
                    .map(|p| p.machine_of(c.node).to_string()),
            })
            .collect(),
        params: opts.params.clone(),
        events_addr: Some(events_addr),
        dns_names: opts.dns_peers,
        controller_machine: opts.placement.as_ref().map(|p| p.machines[0].clone()),
    };
    debug_assert!(fabric
        .daemons
        .iter()
        .all(|d| d.data_addr.port() == DATA_PORT && d.control_addr.port() == CONTROL_PORT));
    let compose_yaml = render_compose(&configs, opts, Target::Compose)?;
    let stack_yaml = render_compose(&configs, opts, Target::Stack)?;
    let prometheus_yml = prometheus_yml(&configs, opts, None)?;
    let prometheus_host_yml = match opts.dns_peers {
        true => None,
        false => Some(prometheus_yml_for_host(&configs, opts, events_addr)?),
    };
    let env_file = compose_env(containers);
    Ok(ComposeBundle {
        compose_yaml,
        stack_yaml,
        configs,
        fabric,
        prometheus_yml,
        prometheus_host_yml,
        env_file,
        dns_peers: opts.dns_peers,
        subnet: opts.subnet,
    })
}

/// `config` as written for a swarm: peers and the event sink named by
/// service name, listen addresses on every interface (the task's address
/// is not known in advance). The daemon resolves the names when it starts
/// (flitnet_runtime::resolve).
fn named_config(
    config: &DaemonConfig,
    service_of: &HashMap<IpAddr, &str>,
    events_default: SocketAddr,
) -> anyhow::Result<serde_json::Value> {
    let mut json = serde_json::to_value(config)?;
    let anywhere = |a: SocketAddr| SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), a.port());
    json["data_addr"] = anywhere(config.data_addr).to_string().into();
    json["control_addr"] = anywhere(config.control_addr).to_string().into();
    if let Some(m) = config.metrics_addr {
        json["metrics_addr"] = anywhere(m).to_string().into();
    }
    for (i, p) in config.ports.iter().enumerate() {
        let no_peer = || format!("{}: port {} has no peer service", config.name, p.port);
        let peer = p.peer.with_context(no_peer)?;
        let service = service_of.get(&peer.ip()).with_context(no_peer)?;
        json["ports"][i]["peer"] = format!("{service}:{}", peer.port()).into();
    }
    if config.events_addr == Some(events_default) {
        json["events_addr"] = format!("{CONTROLLER_SERVICE}:{}", events_default.port()).into();
    }
    Ok(json)
}

/// A Compose service name for every node: the node name, lower-cased, with
/// anything outside `[a-z0-9_.-]` turned into `-`. Two nodes mapping to the
/// same name, or a node taking a reserved service's name, is an error.
fn service_names(topo: &Topology, nodes: &[NodeRef]) -> Result<Vec<String>, ComposeError> {
    let mut taken: BTreeMap<String, String> =
        [CONTROLLER_SERVICE, PROMETHEUS_SERVICE, GRAFANA_SERVICE]
            .iter()
            .map(|s| (s.to_string(), format!("the {s} service")))
            .collect();
    let mut out = Vec::with_capacity(nodes.len());
    for &node in nodes {
        let name = topo.node_name(node);
        let service: String = name
            .chars()
            .map(|c| c.to_ascii_lowercase())
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .trim_start_matches(['_', '.', '-'])
            .to_string();
        if service.is_empty() {
            return Err(ComposeError::UnusableNodeName {
                node: name.to_string(),
            });
        }
        if let Some(first) = taken.insert(service.clone(), name.to_string()) {
            return Err(ComposeError::ServiceNameClash {
                first,
                second: name.to_string(),
                service,
            });
        }
        out.push(service);
    }
    Ok(out)
}

/// One service of the Compose file; `None` fields are left out.
#[derive(Serialize)]
struct Service {
    image: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    profiles: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hostname: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    command: Vec<String>,
    /// docker-init as PID 1: a daemon as PID 1 would ignore SIGTERM.
    #[serde(skip_serializing_if = "Option::is_none")]
    init: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    restart: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_grace_period: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    environment: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    volumes: Vec<String>,
    /// Writable scratch space (the image has no writable directory).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tmpfs: Vec<String>,
    /// Swarm configs (stack file with a placement): the daemon's own
    /// configuration travels with the task to whichever machine runs it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    configs: Vec<ServiceConfig>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ports: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    depends_on: Vec<String>,
    networks: BTreeMap<String, ServiceNetwork>,
    deploy: Deploy,
}

#[derive(Serialize)]
struct ServiceNetwork {
    ipv4_address: Ipv4Addr,
}

/// Swarm hints (`docker stack deploy`); plain Compose honours `replicas`
/// and `restart_policy`.
#[derive(Serialize)]
struct Deploy {
    mode: &'static str,
    replicas: u32,
    /// Swarm's default virtual IP would hide the task's own address, and a
    /// daemon matches incoming datagrams to ports by source address: DNS
    /// must answer with the task address itself. Stack file only:
    /// docker-compose v1 warns about it once per service.
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint_mode: Option<&'static str>,
    restart_policy: RestartPolicy,
    /// Stack file with a placement: the machine the task must run on.
    #[serde(skip_serializing_if = "Option::is_none")]
    placement: Option<DeployPlacement>,
}

#[derive(Serialize)]
struct ServiceConfig {
    source: String,
    target: String,
    mode: u32,
}

#[derive(Serialize)]
struct DeployPlacement {
    constraints: Vec<String>,
}

#[derive(Serialize)]
struct RestartPolicy {
    condition: &'static str,
}

impl Deploy {
    /// Fabric containers must stay dead when a fault kills them.
    fn never_restart(target: Target) -> Deploy {
        Deploy {
            mode: "replicated",
            replicas: 1,
            endpoint_mode: (target == Target::Stack).then_some("dnsrr"),
            restart_policy: RestartPolicy { condition: "none" },
            placement: None,
        }
    }
    fn monitoring(target: Target) -> Deploy {
        Deploy {
            mode: "replicated",
            replicas: match target {
                Target::Compose => 1,
                Target::Stack => 0,
            },
            endpoint_mode: (target == Target::Stack).then_some("vip"),
            restart_policy: RestartPolicy {
                condition: "on-failure",
            },
            placement: None,
        }
    }
}

fn fabric_service(
    image: &str,
    command: Vec<String>,
    hostname: &str,
    ip: Ipv4Addr,
    depends_on: Vec<String>,
    target: Target,
) -> Service {
    Service {
        image: image.to_string(),
        profiles: Vec::new(),
        hostname: Some(hostname.to_string()),
        command,
        init: Some(true),
        // Compose's default restart policy is already "no"; spelling it out
        // would need quoting for YAML 1.1 readers (docker-compose v1), where
        // a bare `no` is a boolean.
        restart: None,
        stop_grace_period: Some("3s".into()),
        environment: Vec::new(),
        volumes: vec![format!("./configs:{CONFIG_MOUNT}:ro")],
        tmpfs: Vec::new(),
        configs: Vec::new(),
        ports: Vec::new(),
        depends_on,
        networks: BTreeMap::from([(NETWORK.to_string(), ServiceNetwork { ipv4_address: ip })]),
        deploy: Deploy::never_restart(target),
    }
}

fn to_yaml_value(v: &impl Serialize) -> Result<Value, ComposeError> {
    serde_yaml_ng::to_value(v).map_err(|e| ComposeError::Serialise(e.to_string()))
}

/// Which tool reads the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// `docker-compose` / `docker compose`: monitoring behind a profile.
    Compose,
    /// `docker stack deploy`: no profiles in its schema.
    Stack,
}

fn render_compose(
    configs: &[NodeConfig],
    opts: &ComposeOptions,
    target: Target,
) -> Result<String, ComposeError> {
    let infra_ip = |offset| {
        opts.subnet
            .host(offset)
            .expect("a subnet with room for nodes has room for the infrastructure")
    };
    let mut services = Mapping::new();
    let mut swarm_configs = Mapping::new();
    for c in configs {
        let binary = match c.node {
            NodeRef::Switch(_) => "/switchd",
            NodeRef::Host(_) => "/hostd",
        };
        let command = vec![
            binary.to_string(),
            "--config".to_string(),
            format!("{CONFIG_MOUNT}/{}.json", c.service),
        ];
        let IpAddr::V4(ip) = c.config.data_addr.ip() else {
            unreachable!("compose addresses are IPv4")
        };
        let mut service = fabric_service(&opts.image, command, &c.service, ip, Vec::new(), target);
        if let (Some(p), Target::Stack) = (&opts.placement, target) {
            service.deploy.placement = Some(DeployPlacement {
                constraints: vec![p.constraint(p.machine_of(c.node))],
            });
            // The bundle directory exists on the deploying machine only;
            // a swarm config reaches every machine (fabric.json, which
            // can pass the 500 KB config limit, stays a bind mount of the
            // controller, on the first machine).
            service.volumes.clear();
            service.configs.push(ServiceConfig {
                source: c.service.clone(),
                target: format!("{CONFIG_MOUNT}/{}.json", c.service),
                mode: 0o444,
            });
            swarm_configs.insert(
                Value::from(c.service.clone()),
                to_yaml_value(
                    &serde_json::json!({ "file": format!("./configs/{}.json", c.service) }),
                )?,
            );
        }
        services.insert(Value::from(c.service.clone()), to_yaml_value(&service)?);
    }
    let mut controller = fabric_service(
        &opts.image,
        opts.controller_command.clone(),
        CONTROLLER_SERVICE,
        infra_ip(CONTROLLER_OFFSET),
        configs.iter().map(|c| c.service.clone()).collect(),
        target,
    );
    // The controller's run directory (its event log) goes to the temp dir:
    // a tmpfs, mode 1777, since the FROM-scratch image has no /tmp.
    controller.tmpfs = vec!["/tmp".into()];
    // The controller runs on the first machine (fabric.json's
    // `controller_machine`).
    if let (Some(p), Target::Stack) = (&opts.placement, target) {
        controller.deploy.placement = Some(DeployPlacement {
            constraints: vec![p.constraint(&p.machines[0])],
        });
    }
    services.insert(CONTROLLER_SERVICE.into(), to_yaml_value(&controller)?);

    let monitoring = |image: &str, ip, volumes, ports, command, environment, depends_on| Service {
        image: image.to_string(),
        profiles: match target {
            Target::Compose => vec![MONITORING_PROFILE.to_string()],
            Target::Stack => Vec::new(),
        },
        hostname: None,
        command,
        init: None,
        restart: Some("unless-stopped".into()),
        stop_grace_period: None,
        environment,
        volumes,
        tmpfs: Vec::new(),
        configs: Vec::new(),
        ports,
        depends_on,
        networks: BTreeMap::from([(NETWORK.to_string(), ServiceNetwork { ipv4_address: ip })]),
        deploy: Deploy::monitoring(target),
    };
    let prometheus = monitoring(
        &opts.prometheus_image,
        infra_ip(PROMETHEUS_OFFSET),
        vec!["./prometheus.yml:/etc/prometheus/prometheus.yml:ro".to_string()],
        vec!["9090:9090".to_string()],
        vec![
            "--config.file=/etc/prometheus/prometheus.yml".to_string(),
            "--storage.tsdb.retention.time=2d".to_string(),
        ],
        Vec::new(),
        Vec::new(),
    );
    services.insert(PROMETHEUS_SERVICE.into(), to_yaml_value(&prometheus)?);
    let grafana_dir = opts.grafana_dir.trim_end_matches('/');
    let grafana = monitoring(
        &opts.grafana_image,
        infra_ip(GRAFANA_OFFSET),
        vec![
            format!("{grafana_dir}/provisioning:/etc/grafana/provisioning:ro"),
            format!("{grafana_dir}/dashboards:/var/lib/grafana/dashboards:ro"),
        ],
        vec!["3000:3000".to_string()],
        Vec::new(),
        vec![
            "GF_AUTH_ANONYMOUS_ENABLED=true".to_string(),
            "GF_AUTH_ANONYMOUS_ORG_ROLE=Viewer".to_string(),
            "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH=/var/lib/grafana/dashboards/fabric-overview.json".to_string(),
        ],
        vec![PROMETHEUS_SERVICE.to_string()],
    );
    services.insert(GRAFANA_SERVICE.into(), to_yaml_value(&grafana)?);

    // No `driver:`: Compose defaults to bridge, `docker stack deploy` to
    // overlay; both honour the IPAM subnet.
    let network = serde_json::json!({
        "attachable": true,
        "ipam": { "config": [ { "subnet": opts.subnet.to_string() } ] },
    });
    let mut networks = Mapping::new();
    networks.insert(NETWORK.into(), to_yaml_value(&network)?);
    let mut file = Mapping::new();
    file.insert("services".into(), Value::Mapping(services));
    file.insert("networks".into(), Value::Mapping(networks));
    if !swarm_configs.is_empty() {
        file.insert("configs".into(), Value::Mapping(swarm_configs));
    }
    let body =
        serde_yaml_ng::to_string(&file).map_err(|e| ComposeError::Serialise(e.to_string()))?;
    let usage = match target {
        Target::Compose => {
            "# Fabric: docker-compose -p flitnet up -d   Monitoring: docker-compose -p flitnet --profile monitoring up -d"
        }
        Target::Stack => {
            "# Swarm: docker stack deploy -c docker-stack.yml flitnet (needs DNS-name peers, see docs)"
        }
    };
    Ok(format!(
        "# Generated by `flitctl compose` for a {}-node fabric; see docs/compose.md.\n{usage}\n{body}",
        configs.len()
    ))
}

/// `prometheus-host.yml` ([`ComposeBundle::prometheus_host_yml`]).
fn prometheus_yml_for_host(
    configs: &[NodeConfig],
    opts: &ComposeOptions,
    events_addr: SocketAddr,
) -> Result<String, ComposeError> {
    let controller = SocketAddr::new(events_addr.ip(), METRICS_PORT);
    prometheus_yml(configs, opts, Some(controller))
}

/// `prometheus.yml`: targets by service name (it resolves both under
/// Compose and on a swarm); with `by_ip`, the host variant: daemons by
/// address and the controller at `by_ip`.
fn prometheus_yml(
    configs: &[NodeConfig],
    opts: &ComposeOptions,
    by_ip: Option<SocketAddr>,
) -> Result<String, ComposeError> {
    let targets = |switches: bool| -> Vec<String> {
        configs
            .iter()
            .filter(|c| matches!(c.node, NodeRef::Switch(_)) == switches)
            .map(|c| match by_ip {
                None => format!("{}:{METRICS_PORT}", c.service),
                Some(_) => SocketAddr::new(c.config.data_addr.ip(), METRICS_PORT).to_string(),
            })
            .collect()
    };
    let controller = match by_ip {
        None => format!("{CONTROLLER_SERVICE}:{METRICS_PORT}"),
        Some(addr) => addr.to_string(),
    };
    let interval = format!("{}s", opts.scrape_interval_s);
    let doc = serde_json::json!({
        "global": { "scrape_interval": interval, "evaluation_interval": interval },
        "scrape_configs": [
            { "job_name": "switchd",
              "static_configs": [ { "targets": targets(true), "labels": { "role": "switch" } } ] },
            { "job_name": "hostd",
              "static_configs": [ { "targets": targets(false), "labels": { "role": "host" } } ] },
            { "job_name": "flitctl",
              "static_configs": [ { "targets": [ controller ],
                                   "labels": { "role": "controller" } } ] },
        ],
    });
    let body =
        serde_yaml_ng::to_string(&doc).map_err(|e| ComposeError::Serialise(e.to_string()))?;
    let what = match by_ip {
        None => "for the bundle's prometheus service (targets by service name)",
        Some(_) => {
            "for a Prometheus on the Docker host (targets by address; a controller on the \
             host serves its metrics on the gateway: --controller-metrics GATEWAY:9100)"
        }
    };
    Ok(format!("# Generated by `flitctl compose` {what}.\n{body}"))
}

/// Writes the bundle under `dir`: `docker-compose.yml`, `prometheus.yml`,
/// `configs/<service>.json` and `configs/fabric.json`. JSON files left in
/// `configs/` by an earlier, different fabric are removed so that no stale
/// configuration is mounted into the containers.
pub fn write_bundle(bundle: &ComposeBundle, dir: &Path) -> anyhow::Result<()> {
    let configs_dir = dir.join("configs");
    std::fs::create_dir_all(&configs_dir)
        .with_context(|| format!("creating {}", configs_dir.display()))?;
    for entry in std::fs::read_dir(&configs_dir)
        .with_context(|| format!("listing {}", configs_dir.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            std::fs::remove_file(&path)
                .with_context(|| format!("removing stale {}", path.display()))?;
        }
    }
    let write = |path: &Path, bytes: &[u8]| {
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    write(
        &dir.join("docker-compose.yml"),
        bundle.compose_yaml.as_bytes(),
    )?;
    write(&dir.join("docker-stack.yml"), bundle.stack_yaml.as_bytes())?;
    write(&dir.join(".env"), bundle.env_file.as_bytes())?;
    write(
        &dir.join("prometheus.yml"),
        bundle.prometheus_yml.as_bytes(),
    )?;
    if let Some(yml) = &bundle.prometheus_host_yml {
        write(&dir.join("prometheus-host.yml"), yml.as_bytes())?;
    }
    let service_of: HashMap<IpAddr, &str> = bundle
        .configs
        .iter()
        .map(|c| (c.config.data_addr.ip(), c.service.as_str()))
        .collect();
    for c in &bundle.configs {
        let path = configs_dir.join(format!("{}.json", c.service));
        let json = if bundle.dns_peers {
            let controller_events = SocketAddr::new(
                IpAddr::V4(
                    bundle
                        .subnet
                        .host(CONTROLLER_OFFSET)
                        .expect("the bundle's subnet has a controller address"),
                ),
                EVENTS_PORT,
            );
            named_config(&c.config, &service_of, controller_events)?
        } else {
            serde_json::to_value(&c.config)?
        };
        write(&path, &serde_json::to_vec_pretty(&json)?)?;
    }
    write(
        &configs_dir.join(FABRIC_FILE),
        &serde_json::to_vec_pretty(&bundle.fabric)?,
    )?;
    Ok(())
}

/// `flitctl compose TOPOLOGY -o DIR`.
#[derive(clap::Args, Debug)]
pub struct ComposeArgs {
    /// Topology file (YAML or ibnetdiscover .net).
    pub topology: std::path::PathBuf,
    /// Directory to write the bundle into (created if missing).
    #[arg(short, long)]
    pub output: std::path::PathBuf,
    /// The fabric network, CIDR.
    #[arg(long, default_value = DEFAULT_SUBNET)]
    pub subnet: Ipv4Subnet,
    /// Image holding /switchd, /hostd and /flitctl (compose/build-image.sh).
    /// On a swarm without a registry, give it by ID (`sha256:…`): a swarm
    /// node tries to pull a tag before it starts each task.
    #[arg(long, default_value = "flitnet:latest")]
    pub image: String,
    #[command(flatten)]
    pub fabric: crate::up::FabricArgs,
    /// Seed of the daemons' random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where daemons push events (default: the controller container, .2:7002;
    /// for `flitctl attach` on the Docker host give the gateway, e.g. 10.213.0.1:7002).
    #[arg(long)]
    pub events: Option<SocketAddr>,
    /// The repository's grafana/ directory as seen from the bundle directory.
    #[arg(long, default_value = "../grafana")]
    pub grafana_dir: String,
    /// Prometheus scrape interval, seconds.
    #[arg(long, default_value_t = 2)]
    pub scrape_interval: u32,
    /// Name peers by service DNS name instead of IP (for `docker stack
    /// deploy`, where addresses are not known in advance).
    #[arg(long)]
    pub dns_peers: bool,
    /// Time dilation the daemons run at: every emulated duration lasts N
    /// times longer in wall time (docs/fidelity.md); `flitctl run` follows
    /// it. A whole factor: the load `auto` would calibrate for is only
    /// known to `run`; `flitctl up --time-dilation auto` prints a factor
    /// for this machine.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=flitnet_core::control::limits::MAX_TIME_DILATION as i64))]
    pub time_dilation: u32,
    /// Spread the fabric over N machines of a swarm: the stack file pins
    /// each service to one with `node.labels.flitnet-part == 0..N-1`
    /// (docs/compose.md, "Several machines"). Implies --dns-peers.
    #[arg(long, value_name = "N", conflicts_with = "placement",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub nodes: Option<u32>,
    /// Like --nodes, with the machines named by a YAML file:
    /// `machines: [rack-a, rack-b]` (values of the node label; optional
    /// `label:`, default flitnet-part).
    #[arg(long, value_name = "FILE")]
    pub placement: Option<std::path::PathBuf>,
}

/// The Compose command of this machine: `docker-compose` (v1) or the
/// `docker compose` plugin (v2), whichever works; None if neither does.
pub fn compose_command() -> Option<Vec<&'static str>> {
    let works = |prog: &str, args: &[&str]| {
        std::process::Command::new(prog)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works("docker-compose", &["version"]) {
        Some(vec!["docker-compose"])
    } else if works("docker", &["compose", "version"]) {
        Some(vec!["docker", "compose"])
    } else {
        None
    }
}

/// The node services of a written bundle (one per daemon config, that is
/// every config but fabric.json), sorted.
pub fn node_services(bundle: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut out: Vec<String> = std::fs::read_dir(bundle.join("configs"))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".json")
                .filter(|s| *s != "fabric")
                .map(str::to_string)
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Generates and writes the bundle; prints what was written.
pub fn run(args: ComposeArgs) -> anyhow::Result<()> {
    if let Some(t @ (crate::up::Transport::Ethernet | crate::up::Transport::Shm)) =
        args.fabric.transport
    {
        anyhow::bail!(
            "--transport {:?}: compose bundles carry flits over UDP between containers (use --transport udp); the ethernet and shm transports run with `flitctl up --transport ethernet|shm`",
            t
        );
    }
    if args.fabric.tun {
        anyhow::bail!(
            "--tun: compose bundles do not give containers an IP interface over the fabric \
             (a host container would need /dev/net/tun and CAP_NET_ADMIN); IP traffic runs \
             with `flitctl up --tun` (docs/ip.md)"
        );
    }
    let topo = crate::topo::load(&args.topology)?;
    let placement_file = match (&args.placement, args.nodes) {
        (Some(path), _) => Some(placement::PlacementFile::load(path)?),
        (None, Some(n)) => Some(placement::PlacementFile::numbered(n as usize)),
        (None, None) => None,
    };
    let placement = placement_file
        .map(|f| placement::Placement::plan(&topo, f))
        .transpose()?;
    let mut params = args.fabric.with_topology(&topo).params();
    // Containers reach each other over the bundle's network: UDP is the
    // compose transport (the local default, shm, needs one machine's
    // shared memory; any other was refused above).
    params.transport = flitnet_core::control::DataTransport::Udp;
    params.time_dilation = args.time_dilation;
    let opts = ComposeOptions {
        params,
        subnet: args.subnet,
        image: args.image,
        seed: args.seed,
        events_addr: args.events,
        grafana_dir: args.grafana_dir,
        scrape_interval_s: args.scrape_interval,
        // Task addresses on a multi-machine swarm are never known ahead.
        dns_peers: args.dns_peers || placement.is_some(),
        placement,
        ..ComposeOptions::default()
    };
    let bundle = generate(&topo, &opts)?;
    write_bundle(&bundle, &args.output)?;
    if let Some(p) = &opts.placement {
        println!("{}", p.describe());
        println!("label the swarm's nodes, one per machine, then deploy the stack file:");
        for c in p.label_commands() {
            println!("  {c}");
        }
        if !opts.image.starts_with("sha256:") {
            // A swarm node tries to pull a tag before it starts each task;
            // without registry access every attempt waits out a DNS or
            // connect timeout, and the attempts queue. An image ID is
            // never pulled.
            println!(
                "without a registry: load the image on every machine (compose/push-image.sh), \
                 name it by ID (--image sha256:…) and deploy with --resolve-image never"
            );
        }
    }
    let dir = args.output.display();
    eprintln!(
        "wrote {dir} ({} node services, network {})",
        bundle.configs.len(),
        opts.subnet
    );
    if opts.dns_peers {
        eprintln!(
            "swarm bundle (--dns-peers): cd {dir} && docker stack deploy -c docker-stack.yml flitnet"
        );
    } else {
        eprintln!(
            "start it: cd {dir} && docker-compose -p flitnet up -d   (Compose v2: docker compose -p flitnet up -d)"
        );
    }
    // Compose resolves relative paths from the bundle's directory.
    let grafana = std::path::Path::new(&opts.grafana_dir);
    let grafana = if grafana.is_absolute() {
        grafana.to_path_buf()
    } else {
        args.output.join(grafana)
    };
    if !grafana.join("dashboards").is_dir() {
        tracing::warn!(
            "--grafana-dir {}: no dashboards at {}; the monitoring profile's Grafana would \
             start empty (give the repository's grafana/ directory, absolute or relative to {dir})",
            opts.grafana_dir,
            grafana.join("dashboards").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::topology::generators::{kary_ntree, mesh_or_torus};
    use flitnet_core::topology::PortRef;
    use std::collections::BTreeSet;

    fn opts() -> ComposeOptions {
        ComposeOptions {
            token: "0123456789abcdef".into(),
            ..ComposeOptions::default()
        }
    }

    fn parse(yaml: &str) -> Value {
        serde_yaml_ng::from_str(yaml).expect("generated YAML parses")
    }

    fn services(doc: &Value) -> &Mapping {
        doc["services"].as_mapping().expect("services is a mapping")
    }

    #[test]
    fn one_service_per_node_plus_controller_and_monitoring() {
        let topo = kary_ntree(2, 3).unwrap();
        let bundle = generate(&topo, &opts()).unwrap();
        let doc = parse(&bundle.compose_yaml);
        let services = services(&doc);
        let n = topo.num_hosts() + topo.num_switches();
        assert_eq!(services.len(), n + 3);
        for c in &bundle.configs {
            let s = &services[c.service.as_str()];
            let cmd: Vec<&str> = s["command"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            let binary = match c.node {
                NodeRef::Switch(_) => "/switchd",
                NodeRef::Host(_) => "/hostd",
            };
            let config_path = format!("/etc/flitnet/{}.json", c.service);
            assert_eq!(cmd, [binary, "--config", config_path.as_str()]);
            assert_eq!(s["image"].as_str(), Some("flitnet:latest"));
            assert_eq!(s["volumes"][0].as_str(), Some("./configs:/etc/flitnet:ro"));
            assert!(
                s.get("profiles").is_none(),
                "{} must start by default",
                c.service
            );
        }
        let controller = &services["controller"];
        assert_eq!(controller["command"][1].as_str(), Some("attach"));
        assert_eq!(
            controller["command"][3].as_str(),
            Some("/etc/flitnet/fabric.json")
        );
        assert_eq!(
            controller["depends_on"].as_sequence().unwrap().len(),
            n,
            "the controller starts after every daemon"
        );
    }

    #[test]
    fn addresses_are_unique_and_inside_the_subnet() {
        let topo = mesh_or_torus(&[4, 4], true).unwrap();
        let mut o = opts();
        o.subnet = "172.30.8.0/22".parse().unwrap();
        let bundle = generate(&topo, &o).unwrap();
        let doc = parse(&bundle.compose_yaml);
        let mut seen = BTreeSet::new();
        for (name, s) in services(&doc) {
            let ip: Ipv4Addr = s["networks"]["fabric"]["ipv4_address"]
                .as_str()
                .unwrap_or_else(|| panic!("{name:?} has no static address"))
                .parse()
                .unwrap();
            assert!(seen.insert(ip), "{ip} given twice");
            let bits = u32::from(ip);
            assert_eq!(bits & !0x3ff, u32::from(o.subnet.network), "{ip} outside");
            assert_ne!(ip, Ipv4Addr::new(172, 30, 8, 1), "the gateway is Docker's");
        }
        assert_eq!(
            doc["networks"]["fabric"]["ipam"]["config"][0]["subnet"].as_str(),
            Some("172.30.8.0/22")
        );
        // Each service's compose address is the one its config binds.
        for c in &bundle.configs {
            let compose_ip = services(&doc)[c.service.as_str()]["networks"]["fabric"]
                ["ipv4_address"]
                .as_str()
                .unwrap();
            assert_eq!(c.config.data_addr.ip().to_string(), compose_ip);
            assert_eq!(c.config.data_addr.port(), DATA_PORT);
            assert_eq!(c.config.control_addr.port(), CONTROL_PORT);
            assert_eq!(c.config.metrics_addr.unwrap().port(), METRICS_PORT);
        }
    }

    #[test]
    fn every_peer_is_the_neighbour_across_the_cable() {
        // Parallel cables (PGFT p = 2) must each name the peer's port, and
        // RUFT hosts get their two ports.
        let parallel =
            flitnet_core::topology::generators::pgft(&flitnet_core::topology::PgftParams {
                m: vec![4, 4],
                w: vec![1, 2],
                p: vec![1, 2],
            })
            .unwrap();
        let ruft = flitnet_core::topology::generators::ruft(2, 2).unwrap();
        for topo in [
            kary_ntree(3, 2).unwrap(),
            mesh_or_torus(&[3, 3], false).unwrap(),
            parallel,
            ruft,
        ] {
            let bundle = generate(&topo, &opts()).unwrap();
            let by_node: HashMap<NodeRef, &NodeConfig> =
                bundle.configs.iter().map(|c| (c.node, c)).collect();
            for c in &bundle.configs {
                let cabled = (0..topo.radix(c.node) as u16)
                    .filter(|&p| {
                        topo.peer(PortRef {
                            node: c.node,
                            port: p,
                        })
                        .is_some()
                    })
                    .count();
                assert_eq!(c.config.ports.len(), cabled, "{}", c.service);
                for p in &c.config.ports {
                    let peer = topo
                        .peer(PortRef {
                            node: c.node,
                            port: p.port,
                        })
                        .unwrap();
                    assert_eq!(
                        p.peer,
                        Some(by_node[&peer.node].config.data_addr),
                        "{} port {} must point at {}",
                        c.service,
                        p.port,
                        by_node[&peer.node].service
                    );
                    assert_eq!(
                        p.peer_port,
                        Some(peer.port),
                        "{} port {}",
                        c.service,
                        p.port
                    );
                }
                if let flitnet_core::control::Role::Host { ports, .. } = c.config.role {
                    assert_eq!(ports, topo.radix(c.node), "{}", c.service);
                }
                assert_eq!(c.config.token, "0123456789abcdef");
                c.config.validate().unwrap();
            }
        }
    }

    #[test]
    fn fabric_json_lists_every_daemon_and_round_trips() {
        let topo = kary_ntree(2, 2).unwrap();
        let bundle = generate(&topo, &opts()).unwrap();
        let f = &bundle.fabric;
        assert_eq!(f.topology_name, topo.name);
        assert_eq!(f.daemons.len(), bundle.configs.len());
        for (d, c) in f.daemons.iter().zip(&bundle.configs) {
            assert_eq!(d.name, topo.node_name(c.node));
            assert_eq!(d.control_addr, c.config.control_addr);
            assert_eq!(d.role, c.config.role);
        }
        let text = serde_json::to_string(f).unwrap();
        assert!(
            text.contains(r#""role":"switch""#),
            "role is flattened: {text}"
        );
        assert_eq!(&serde_json::from_str::<ComposeFabric>(&text).unwrap(), f);
    }

    #[test]
    fn monitoring_services_are_behind_the_profile() {
        let bundle = generate(&kary_ntree(2, 2).unwrap(), &opts()).unwrap();
        let doc = parse(&bundle.compose_yaml);
        for name in ["prometheus", "grafana"] {
            let s = &services(&doc)[name];
            assert_eq!(s["profiles"][0].as_str(), Some("monitoring"), "{name}");
        }
        let grafana_volumes = services(&doc)["grafana"]["volumes"].as_sequence().unwrap();
        assert!(grafana_volumes
            .iter()
            .any(|v| v.as_str() == Some("../grafana/dashboards:/var/lib/grafana/dashboards:ro")));
        // The swarm file has the same services, none behind a profile (its
        // schema has none): monitoring is scaled to zero instead.
        let stack = parse(&bundle.stack_yaml);
        assert_eq!(services(&stack).len(), services(&doc).len());
        for (name, s) in services(&stack) {
            assert!(s.get("profiles").is_none(), "{name:?}");
            let replicas = s["deploy"]["replicas"].as_u64();
            let monitoring = ["prometheus", "grafana"].contains(&name.as_str().unwrap());
            assert_eq!(replicas, Some(if monitoring { 0 } else { 1 }), "{name:?}");
            let endpoint = s["deploy"]["endpoint_mode"].as_str();
            assert_eq!(
                endpoint,
                Some(if monitoring { "vip" } else { "dnsrr" }),
                "{name:?}"
            );
            assert!(services(&doc)[name]["deploy"]
                .get("endpoint_mode")
                .is_none());
        }
        let prom = parse(&bundle.prometheus_yml);
        assert_eq!(prom["global"]["scrape_interval"].as_str(), Some("2s"));
        let mut targets = BTreeSet::new();
        for job in prom["scrape_configs"].as_sequence().unwrap() {
            for t in job["static_configs"][0]["targets"].as_sequence().unwrap() {
                targets.insert(t.as_str().unwrap().to_string());
            }
        }
        for c in &bundle.configs {
            assert!(
                targets.contains(&format!("{}:9100", c.service)),
                "{}",
                c.service
            );
        }
        assert_eq!(
            targets.len(),
            bundle.configs.len() + 1,
            "daemons + controller"
        );
    }

    #[test]
    fn controller_command_is_configurable() {
        let mut o = opts();
        o.controller_command = vec!["/flitctl".into(), "chaos".into()];
        let bundle = generate(&kary_ntree(2, 1).unwrap(), &o).unwrap();
        let doc = parse(&bundle.compose_yaml);
        assert_eq!(
            services(&doc)["controller"]["command"][1].as_str(),
            Some("chaos")
        );
        o.controller_command.clear();
        assert!(matches!(
            generate(&kary_ntree(2, 1).unwrap(), &o),
            Err(ComposeError::EmptyControllerCommand)
        ));
    }

    #[test]
    fn fabrics_too_large_for_one_bridge_are_refused_with_the_reason() {
        // 4-ary 4-tree: 256 hosts + 256 switches fits; 4-ary 5-tree (1024 + 1280) does not.
        generate(&kary_ntree(4, 4).unwrap(), &opts()).unwrap();
        let err = generate(&kary_ntree(4, 5).unwrap(), &opts()).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, ComposeError::TooManyContainers { .. }),
            "{msg}"
        );
        assert!(msg.contains("bridge") && msg.contains("1000"), "{msg}");
    }

    #[test]
    fn subnets_are_checked() {
        for (text, why) in [
            ("10.213.0.0", "ADDRESS/PREFIX"),
            ("10.213.0.1/16", "host bits"),
            ("10.213.0.0/31", "1..=30"),
            ("10.213.0.0/x", "not a number"),
            ("10.213.0/16", "IPv4"),
        ] {
            let err = text.parse::<Ipv4Subnet>().unwrap_err().to_string();
            assert!(err.contains(why) && err.contains(text), "{text}: {err}");
        }
        let s: Ipv4Subnet = "192.168.7.0/24".parse().unwrap();
        assert_eq!(s.to_string(), "192.168.7.0/24");
        assert_eq!(s.host(1), Some(Ipv4Addr::new(192, 168, 7, 1)));
        assert_eq!(s.host(255), None, "broadcast");
        assert_eq!(s.node_capacity(), 255 - 16);
        let mut o = opts();
        o.subnet = "192.168.7.0/28".parse().unwrap();
        let err = generate(&kary_ntree(2, 2).unwrap(), &o).unwrap_err();
        assert!(
            matches!(err, ComposeError::SubnetTooSmall { needed: 8, .. }),
            "{err}"
        );
    }

    #[test]
    fn node_names_become_distinct_service_names() {
        let mut topo = kary_ntree(2, 1).unwrap();
        topo.hosts[0].name = "Rack 1/H0".into();
        let bundle = generate(&topo, &opts()).unwrap();
        assert_eq!(bundle.configs[0].service, "rack-1-h0");
        assert_eq!(
            bundle.configs[0].config.name, "Rack 1/H0",
            "metric label keeps the name"
        );
        topo.hosts[1].name = "rack 1 h0".into();
        let err = generate(&topo, &opts()).unwrap_err().to_string();
        assert!(
            err.contains("Rack 1/H0") && err.contains("rack 1 h0"),
            "{err}"
        );
        topo.hosts[1].name = "controller".into();
        let err = generate(&topo, &opts()).unwrap_err().to_string();
        assert!(err.contains("controller service"), "{err}");
        topo.hosts[1].name = "///".into();
        assert!(matches!(
            generate(&topo, &opts()),
            Err(ComposeError::UnusableNodeName { .. })
        ));
    }

    /// Runs `tool args` in `dir`; None when the tool is not installed.
    fn run_tool(dir: &Path, tool: &str, args: &[&str]) -> Option<(bool, String)> {
        let out = std::process::Command::new(tool)
            .args(args)
            .current_dir(dir)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        Some((out.status.success(), text))
    }

    #[test]
    fn docker_tools_accept_the_files_when_installed() {
        let dir =
            std::env::temp_dir().join(format!("flitnet-compose-tools-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bundle = generate(&kary_ntree(2, 2).unwrap(), &opts()).unwrap();
        write_bundle(&bundle, &dir).unwrap();
        let mut checked = 0;
        // `docker-compose` v1 reads YAML 1.1 (a bare `no` is a boolean
        // there), `docker compose` v2 YAML 1.2: whichever is installed.
        for (tool, args) in [
            ("docker-compose", vec!["config", "-q"]),
            ("docker", vec!["compose", "config", "-q"]),
            (
                "docker-compose",
                vec!["--profile", "monitoring", "config", "--services"],
            ),
        ] {
            if tool == "docker"
                && !run_tool(&dir, "docker", &["compose", "version"]).is_some_and(|(ok, _)| ok)
            {
                continue; // no Compose v2 plugin
            }
            match run_tool(&dir, tool, &args) {
                Some((true, out)) => {
                    checked += 1;
                    assert!(
                        !out.contains("not supported"),
                        "{tool} {args:?} warns:\n{out}"
                    );
                    if args.contains(&"--services") {
                        assert!(
                            out.contains("grafana") && out.contains("controller"),
                            "{out}"
                        );
                    }
                }
                Some((false, out)) => panic!("{tool} {args:?} rejected the bundle:\n{out}"),
                None => {}
            }
        }
        // `docker stack config` validates against the swarm schema without
        // needing a swarm (client side only).
        match run_tool(
            &dir,
            "docker",
            &["stack", "config", "-c", "docker-stack.yml"],
        ) {
            Some((true, _)) => checked += 1,
            Some((false, out)) if out.contains("unknown command") => {}
            Some((false, out)) => panic!("docker stack config rejected docker-stack.yml:\n{out}"),
            None => {}
        }
        std::fs::remove_dir_all(&dir).unwrap();
        if checked == 0 {
            println!("skipped: neither docker-compose nor docker with compose/stack is installed");
        }
    }

    #[test]
    fn dns_peer_configs_name_the_neighbour_services() {
        let topo = kary_ntree(2, 2).unwrap();
        let mut o = opts();
        o.dns_peers = true;
        let bundle = generate(&topo, &o).unwrap();
        assert!(bundle.fabric.dns_names);
        let dir = std::env::temp_dir().join(format!("flitnet-compose-dns-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_bundle(&bundle, &dir).unwrap();
        let by_node: HashMap<NodeRef, &NodeConfig> =
            bundle.configs.iter().map(|c| (c.node, c)).collect();
        for c in &bundle.configs {
            let text = std::fs::read(dir.join(format!("configs/{}.json", c.service))).unwrap();
            let json: serde_json::Value = serde_json::from_slice(&text).unwrap();
            assert_eq!(json["data_addr"], "0.0.0.0:7000");
            assert_eq!(json["control_addr"], "0.0.0.0:7001");
            assert_eq!(json["metrics_addr"], "0.0.0.0:9100");
            assert_eq!(json["events_addr"], "controller:7002");
            for (i, p) in c.config.ports.iter().enumerate() {
                let peer = topo
                    .peer(PortRef {
                        node: c.node,
                        port: p.port,
                    })
                    .unwrap();
                assert_eq!(
                    json["ports"][i]["peer"],
                    format!("{}:7000", by_node[&peer.node].service)
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_bundle_writes_every_file_and_drops_stale_configs() {
        let dir = std::env::temp_dir().join(format!("flitnet-compose-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("configs")).unwrap();
        std::fs::write(dir.join("configs/old-switch.json"), "{}").unwrap();
        let bundle = generate(&kary_ntree(2, 2).unwrap(), &opts()).unwrap();
        write_bundle(&bundle, &dir).unwrap();
        assert!(!dir.join("configs/old-switch.json").exists());
        for c in &bundle.configs {
            let text = std::fs::read(dir.join(format!("configs/{}.json", c.service))).unwrap();
            let back: DaemonConfig = serde_json::from_slice(&text).unwrap();
            assert_eq!(back, c.config);
        }
        let fabric = ComposeFabric::load(&dir.join("configs/fabric.json")).unwrap();
        assert_eq!(fabric, bundle.fabric);
        parse(&std::fs::read_to_string(dir.join("docker-compose.yml")).unwrap());
        parse(&std::fs::read_to_string(dir.join("docker-stack.yml")).unwrap());
        parse(&std::fs::read_to_string(dir.join("prometheus.yml")).unwrap());
        let env = std::fs::read_to_string(dir.join(".env")).unwrap();
        // 4 switches + 4 hosts + controller, Prometheus, Grafana.
        assert!(env.contains("\nCOMPOSE_PARALLEL_LIMIT=30\n"), "{env}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
