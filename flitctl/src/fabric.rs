//! Bringing a fabric up as real processes on this machine, and driving it.
//!
//! Every node gets its own loopback address `127.B.x.y` (the whole 127/8 is
//! routed to `lo` on Linux) with the same fixed ports everywhere — data
//! 7000/udp, control 7001/tcp, metrics 9100/tcp — exactly like one container
//! per node under `docker compose`. `B` is chosen per fabric so that several
//! fabrics (parallel tests) can run side by side.

use crate::netns::{interface_mac, interface_name, EthernetNet};
use anyhow::{bail, Context, Result};
use flitnet_core::control::{
    DaemonConfig, DataTransport, FabricParams, HostDaemonReport, PortPeer, Reply, Request, Role,
    SwitchReport, TrafficSpec,
};
use flitnet_core::routing::RoutingTables;
use flitnet_core::topology::{LinkId, NodeRef, PortRef, SwitchId, Topology};
use flitnet_runtime::control::ControlClient;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const DATA_PORT: u16 = 7000;
pub const CONTROL_PORT: u16 = 7001;
pub const METRICS_PORT: u16 = 9100;

/// Every live host's report, in node order.
pub type HostReports = Vec<(NodeRef, HostDaemonReport)>;
/// Every live switch's report, in node order.
pub type SwitchReports = Vec<(NodeRef, SwitchReport)>;

/// How to launch a fabric.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    pub params: FabricParams,
    /// Second octet of the fabric's loopback addresses (`127.B.x.y`); chosen
    /// automatically when None.
    pub subnet: Option<u8>,
    /// Directory for configs, logs and the state file.
    pub run_dir: PathBuf,
    /// Directory holding the `switchd` and `hostd` binaries.
    pub bin_dir: PathBuf,
    pub metrics: bool,
    pub seed: u64,
    /// Time allowed for every daemon to answer its first ping.
    pub ready_timeout: Duration,
    /// Where daemons push fault-detection events (see [`crate::events`]).
    pub events_addr: Option<SocketAddr>,
    /// The fabric's shared secret: control requests carry it and events
    /// are tagged with it ([`new_token`]).
    pub token: String,
    /// Ethernet transport: name of the network namespace to create for the
    /// fabric's veth pairs (default `flitnet-<random>`). It must not exist.
    pub netns: Option<String>,
}

/// One running daemon.
#[derive(Debug)]
pub struct Daemon {
    pub node: NodeRef,
    pub name: String,
    pub control_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub child: Option<Child>,
    pub pid: u32,
    /// Killed on purpose: requests skip it.
    pub dead: bool,
    /// How to start it again ([`Fabric::restart`]): binary and config file.
    pub bin: PathBuf,
    pub config_path: PathBuf,
}

/// What `flitctl down` needs to find a detached fabric again.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FabricState {
    pub token: String,
    pub subnet: u8,
    pub daemons: Vec<(String, SocketAddr, u32)>,
    /// Ethernet transport: the fabric's network namespace.
    #[serde(default)]
    pub netns: Option<String>,
}

/// A running fabric. Dropping it kills every daemon that is still running,
/// so that no process outlives the controller by accident.
pub struct Fabric {
    pub topo: Topology,
    pub token: String,
    pub subnet: u8,
    pub daemons: Vec<Daemon>,
    pub run_dir: PathBuf,
    detached: bool,
    /// Ethernet transport: the namespace holding the veth pairs, deleted
    /// after the daemons when the fabric is dropped (also on a failed
    /// launch).
    net: Option<EthernetNet>,
}

/// How the controller swaps routing tables in a running fabric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reconfiguration {
    /// Install while traffic flows (the InfiniBand subnet manager's way).
    Live,
    /// Hold injection, wait until nothing is in flight (at most
    /// `drain_timeout`), install, resume ([`Fabric::swap_routes`]).
    Quiesced { drain_timeout: Duration },
}

/// The drain budget of a quiesced swap: in-flight worms need a few ms; a
/// fabric that does not drain in this time gets its tables anyway, and the
/// `routes-installed` event says so.
pub const QUIESCE_TIMEOUT: Duration = Duration::from_millis(500);

/// A quiesced swap stops waiting when the flits in flight have not fallen
/// for this long (they are held, not moving).
pub const QUIESCE_STALL: Duration = Duration::from_millis(50);

impl Reconfiguration {
    /// The default for re-routing `topo` (the `auto` choice, docs/chaos.md
    /// "Quiesced reconfiguration"): live
    /// on fat-trees, whose engines all rank the intact topology (a fabric
    /// holding old and new tables at once routes up*/down* with one
    /// ordering), quiesced elsewhere (e-cube or DOR and up*/down* mixed can
    /// close a cycle of channel dependencies).
    pub fn auto(topo: &Topology) -> Self {
        if topo.family.is_fat_tree() {
            Reconfiguration::Live
        } else {
            Self::QUIESCED
        }
    }

    /// Quiesced, with the default drain budget.
    pub const QUIESCED: Self = Reconfiguration::Quiesced {
        drain_timeout: QUIESCE_TIMEOUT,
    };

    /// From a user's choice.
    pub fn choose(choice: ReconfigurationChoice, topo: &Topology) -> Self {
        match choice {
            ReconfigurationChoice::Auto => Self::auto(topo),
            ReconfigurationChoice::Live => Reconfiguration::Live,
            ReconfigurationChoice::Quiesced => Self::QUIESCED,
        }
    }
}

/// `--reconfiguration` / a scenario's `fabric.reconfiguration`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ReconfigurationChoice {
    /// Live on fat-trees, quiesced elsewhere.
    #[default]
    Auto,
    Live,
    Quiesced,
}

/// What a table swap did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Swap {
    /// Set for a quiesced swap.
    pub quiesced: Option<Quiesced>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quiesced {
    /// Nothing was in flight when the tables went in.
    pub drained: bool,
    /// Flits the last reading counted when the drain timed out (0 if
    /// drained).
    pub left_in_flight: u64,
    /// From pausing the hosts until drained (or timed out).
    pub drain_ms: f64,
    /// How long the hosts held injection.
    pub paused_ms: f64,
}

impl Swap {
    /// Says in a `routes-installed` record how the tables went in.
    pub fn describe(&self, event: &mut crate::events::RoutesInstalled) {
        event.reconfiguration = Some(
            match self.quiesced {
                None => "live",
                Some(_) => "quiesced",
            }
            .into(),
        );
        event.quiesce = self.quiesced.clone();
    }
}

/// The request that installs switch `s`'s table from `tables`.
fn install_request(tables: &RoutingTables, s: SwitchId) -> Request {
    Request::InstallTable {
        table: tables.switches[s as usize].clone(),
        vc_policy: tables.vc_policy(s as usize).clone(),
    }
}

/// The loopback address of node number `index` (hosts first, then switches).
pub fn node_ip(subnet: u8, index: usize) -> Ipv4Addr {
    let i = index as u32 + 1;
    Ipv4Addr::new(127, subnet, (i >> 8) as u8, (i & 0xff) as u8)
}

pub fn node_index(topo: &Topology, node: NodeRef) -> usize {
    match node {
        NodeRef::Host(h) => h as usize,
        NodeRef::Switch(s) => topo.num_hosts() + s as usize,
    }
}

/// A fresh random token (the fabric's shared secret).
pub fn new_token() -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..16)
        .map(|_| format!("{:02x}", rng.gen::<u8>()))
        .collect()
}

/// Picks a `127.B.0.0/16` whose first data address is free.
fn pick_subnet() -> Result<u8> {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..64 {
        let b: u8 = rng.gen_range(32..=250);
        let probe = SocketAddrV4::new(node_ip(b, 0), DATA_PORT);
        if std::net::UdpSocket::bind(probe).is_ok() {
            return Ok(b);
        }
    }
    bail!("no free 127.B.0.0/16 loopback subnet found for the fabric")
}

/// Checks that every host has a shape `hostd` runs: one full-duplex port,
/// or a send port 0 and a receive port 1 on one-way links (RUFT).
pub fn check_host_ports(topo: &Topology) -> Result<()> {
    use flitnet_core::control::{HOST_RECEIVE_PORT, HOST_SEND_PORT};
    for h in &topo.hosts {
        let node = NodeRef::Host(h.id);
        let link = |port| {
            topo.link_at(PortRef { node, port })
                .map(|l| &topo.links[l as usize])
        };
        match h.ports.len() {
            1 => {}
            2 => {
                let sends = link(HOST_SEND_PORT).is_some_and(|l| {
                    !l.duplex
                        && l.a
                            == PortRef {
                                node,
                                port: HOST_SEND_PORT,
                            }
                });
                let receives = link(HOST_RECEIVE_PORT).is_some_and(|l| {
                    !l.duplex
                        && l.b
                            == PortRef {
                                node,
                                port: HOST_RECEIVE_PORT,
                            }
                });
                if !sends || !receives {
                    bail!(
                        "host {}: a host with two ports sends on port {HOST_SEND_PORT} and receives on port {HOST_RECEIVE_PORT}, each over a one-way link",
                        h.name
                    );
                }
            }
            n => bail!(
                "host {}: {n} ports; a host has 1, or 2 on one-way links",
                h.name
            ),
        }
    }
    Ok(())
}

/// Builds the configuration of every daemon of `topo`. With the Ethernet
/// transport, port `p` of node `i` is interface `n<i>p<p>` of network
/// namespace `netns` ([`crate::netns`]).
#[allow(clippy::too_many_arguments)]
pub fn daemon_configs(
    topo: &Topology,
    params: &FabricParams,
    subnet: u8,
    token: &str,
    metrics: bool,
    seed: u64,
    events_addr: Option<SocketAddr>,
    netns: Option<&str>,
) -> Vec<(NodeRef, DaemonConfig)> {
    let addr = |node: NodeRef, port: u16| {
        SocketAddr::V4(SocketAddrV4::new(
            node_ip(subnet, node_index(topo, node)),
            port,
        ))
    };
    topo.nodes()
        .map(|node| {
            let radix = topo.radix(node);
            let ports = (0..radix as u16)
                .filter_map(|p| {
                    let here = PortRef { node, port: p };
                    topo.peer(here).map(|peer| match params.transport {
                        DataTransport::Udp => {
                            PortPeer::udp(p, addr(peer.node, DATA_PORT)).with_peer_port(peer.port)
                        }
                        DataTransport::Ethernet => PortPeer::ethernet(
                            p,
                            &interface_name(node_index(topo, node), p),
                            Some(interface_mac(node_index(topo, peer.node), peer.port)),
                        ),
                    })
                })
                .collect();
            let role = match node {
                NodeRef::Switch(id) => Role::Switch { id, radix },
                NodeRef::Host(id) => Role::Host {
                    id,
                    hosts: topo.num_hosts() as u32,
                    ports: radix,
                },
            };
            let cfg = DaemonConfig {
                name: topo.node_name(node).to_string(),
                role,
                token: token.to_string(),
                data_addr: addr(node, DATA_PORT),
                control_addr: addr(node, CONTROL_PORT),
                metrics_addr: metrics.then(|| addr(node, METRICS_PORT)),
                ports,
                fabric: params.clone(),
                seed: seed
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .wrapping_add(node_index(topo, node) as u64),
                events_addr,
                netns: match params.transport {
                    DataTransport::Udp => None,
                    DataTransport::Ethernet => netns.map(str::to_string),
                },
            };
            (node, cfg)
        })
        .collect()
}

impl Fabric {
    /// Starts one process per switch and host and waits until each answers.
    pub fn launch(topo: Topology, opts: &LaunchOptions) -> Result<Fabric> {
        topo.validate().context("invalid topology")?;
        check_host_ports(&topo)?;
        std::fs::create_dir_all(&opts.run_dir)
            .with_context(|| format!("creating {}", opts.run_dir.display()))?;
        let subnet = match opts.subnet {
            Some(s) => s,
            None => pick_subnet()?,
        };
        let token = opts.token.clone();
        let netns = match opts.params.transport {
            DataTransport::Udp => None,
            DataTransport::Ethernet => Some(match &opts.netns {
                Some(n) => n.clone(),
                None => format!("flitnet-{}", &token[..12]),
            }),
        };
        let configs = daemon_configs(
            &topo,
            &opts.params,
            subnet,
            &token,
            opts.metrics,
            opts.seed,
            opts.events_addr,
            netns.as_deref(),
        );
        // Refuse a bad configuration before anything is created.
        for (_, cfg) in &configs {
            cfg.validate()?;
        }
        let net = match &netns {
            None => None,
            Some(name) => Some(EthernetNet::create(name, &topo, opts.params.mtu + 2)?),
        };
        let mut fabric = Fabric {
            topo,
            token,
            subnet,
            daemons: Vec::with_capacity(configs.len()),
            run_dir: opts.run_dir.clone(),
            detached: false,
            net,
        };
        for (node, cfg) in configs {
            let bin = match node {
                NodeRef::Switch(_) => opts.bin_dir.join("switchd"),
                NodeRef::Host(_) => opts.bin_dir.join("hostd"),
            };
            let cfg_path = opts.run_dir.join(format!("{}.json", cfg.name));
            std::fs::write(&cfg_path, serde_json::to_vec_pretty(&cfg)?)?;
            let log = std::fs::File::create(opts.run_dir.join(format!("{}.log", cfg.name)))?;
            let child = spawn_daemon(&bin, &cfg_path, log, &cfg.name)?;
            fabric.daemons.push(Daemon {
                node,
                name: cfg.name.clone(),
                control_addr: cfg.control_addr,
                metrics_addr: cfg.metrics_addr,
                pid: child.id(),
                child: Some(child),
                dead: false,
                bin,
                config_path: cfg_path,
            });
        }
        fabric.wait_ready(opts.ready_timeout)?;
        fabric.save_state()?;
        Ok(fabric)
    }

    /// A handle on daemons that something else started (containers of a
    /// `flitctl compose` bundle): `daemons` lists each node's name and
    /// control address in node order (hosts, then switches, as
    /// [`Topology::nodes`]). Waits, retrying, until every daemon answers a
    /// ping (containers start in any order), up to `ready_timeout`. Dropping
    /// or shutting down the handle never kills anything it did not start.
    pub fn attach(
        topo: Topology,
        token: String,
        daemons: Vec<(String, SocketAddr, Option<SocketAddr>)>,
        run_dir: PathBuf,
        ready_timeout: Duration,
    ) -> Result<Fabric> {
        topo.validate().context("invalid topology")?;
        let nodes: Vec<NodeRef> = topo.nodes().collect();
        anyhow::ensure!(
            nodes.len() == daemons.len(),
            "the fabric lists {} daemons, topology {:?} has {} nodes",
            daemons.len(),
            topo.name,
            nodes.len()
        );
        for (node, (name, _, _)) in nodes.iter().zip(&daemons) {
            anyhow::ensure!(
                topo.node_name(*node) == name,
                "daemon {name:?} is listed where the topology has node {:?}",
                topo.node_name(*node)
            );
        }
        let mut fabric = Fabric {
            topo,
            token,
            subnet: 0,
            daemons: nodes
                .into_iter()
                .zip(daemons)
                .map(|(node, (name, control_addr, metrics_addr))| Daemon {
                    node,
                    name,
                    control_addr,
                    metrics_addr,
                    child: None,
                    pid: 0,
                    dead: false,
                    // Attached daemons belong to someone else (compose):
                    // they cannot be restarted from here.
                    bin: PathBuf::new(),
                    config_path: PathBuf::new(),
                })
                .collect(),
            run_dir,
            detached: true,
            net: None,
        };
        fabric.wait_ready(ready_timeout)?;
        Ok(fabric)
    }

    /// Whether daemon `i` answers a ping within the control client's
    /// connect timeout.
    pub fn answers(&self, i: usize) -> bool {
        self.client(i)
            .and_then(|mut c| c.call_ok(Request::Ping))
            .is_ok()
    }

    /// Stops sending requests to daemon `i` (it died on its own, e.g. its
    /// container was killed).
    pub fn mark_dead(&mut self, i: usize) {
        self.daemons[i].dead = true;
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        for i in 0..self.daemons.len() {
            self.wait_one_ready(i, deadline)?;
        }
        Ok(())
    }

    /// Waits until daemon `i` answers a ping; fails early with its log if
    /// it exits.
    fn wait_one_ready(&mut self, i: usize, deadline: Instant) -> Result<()> {
        {
            loop {
                if let Some(child) = self.daemons[i].child.as_mut() {
                    if let Some(status) = child.try_wait()? {
                        let log = std::fs::read_to_string(
                            self.run_dir.join(format!("{}.log", self.daemons[i].name)),
                        )
                        .unwrap_or_default();
                        bail!(
                            "{} exited during start-up ({status}):\n{}",
                            self.daemons[i].name,
                            log.trim_end()
                        );
                    }
                }
                match self.client(i).and_then(|mut c| c.call_ok(Request::Ping)) {
                    Ok(_) => break,
                    Err(e) if Instant::now() > deadline => {
                        return Err(
                            e.context(format!("{} did not become ready", self.daemons[i].name))
                        )
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        Ok(())
    }

    fn save_state(&self) -> Result<()> {
        let state = FabricState {
            token: self.token.clone(),
            subnet: self.subnet,
            daemons: self
                .daemons
                .iter()
                .map(|d| (d.name.clone(), d.control_addr, d.pid))
                .collect(),
            netns: self.netns().map(str::to_string),
        };
        std::fs::write(
            self.run_dir.join("state.json"),
            serde_json::to_vec_pretty(&state)?,
        )?;
        Ok(())
    }

    /// A control connection to daemon `i`.
    pub fn client(&self, i: usize) -> Result<ControlClient> {
        ControlClient::connect(self.daemons[i].control_addr, &self.token)
    }

    /// Index of the daemon for `node`.
    pub fn daemon_of(&self, node: NodeRef) -> usize {
        node_index(&self.topo, node)
    }

    /// Sends `request` to every daemon matching `filter`, in parallel
    /// (up to 64 threads, each with a batch of daemons), and returns the
    /// answers in order.
    pub fn broadcast(
        &self,
        filter: impl Fn(NodeRef) -> bool,
        request: impl Fn(NodeRef) -> Request + Sync,
    ) -> Result<Vec<(NodeRef, Reply)>> {
        let targets: Vec<usize> = (0..self.daemons.len())
            .filter(|&i| !self.daemons[i].dead && filter(self.daemons[i].node))
            .collect();
        // Up to 64 threads: a daemon busy forwarding answers after a
        // scheduling delay, and route installation after a fault should
        // cost one such delay, not one per daemon in a batch.
        let chunk = targets.len().div_ceil(64).max(1);
        let results: Vec<Result<Vec<(NodeRef, Reply)>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = targets
                .chunks(chunk)
                .map(|part| {
                    let request = &request;
                    scope.spawn(move || {
                        part.iter()
                            .map(|&i| {
                                let node = self.daemons[i].node;
                                let body = self
                                    .client(i)
                                    .and_then(|mut c| c.call_ok(request(node)))
                                    .with_context(|| self.daemons[i].name.clone())?;
                                Ok((node, body))
                            })
                            .collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("control thread panicked"))
                .collect()
        });
        let mut out = Vec::with_capacity(targets.len());
        for r in results {
            out.extend(r?);
        }
        Ok(out)
    }

    /// Installs one table per switch.
    pub fn install_routes(&self, tables: &RoutingTables) -> Result<()> {
        anyhow::ensure!(
            tables.switches.len() == self.topo.num_switches(),
            "routing has {} tables for {} switches",
            tables.switches.len(),
            self.topo.num_switches()
        );
        self.broadcast(
            |n| matches!(n, NodeRef::Switch(_)),
            |n| {
                let NodeRef::Switch(s) = n else {
                    unreachable!()
                };
                install_request(tables, s)
            },
        )?;
        Ok(())
    }

    /// Swaps every switch's table as `how` says, and tells how it went.
    /// Live: the tables go in while traffic flows. Quiesced: every host
    /// holds injection, the controller waits until no daemon has a flit in
    /// flight (two readings in a row, at most `drain_timeout`), installs,
    /// and lets the hosts go again — so no packet is routed by the old
    /// tables at one switch and the new ones at the next, the mix that can
    /// deadlock when the two routing functions' channel dependencies
    /// together form a cycle (e-cube and up*/down* on a hypercube: seen
    /// wedging VC 0). Hosts are resumed even when the install fails.
    pub fn swap_routes(&self, tables: &RoutingTables, how: Reconfiguration) -> Result<Swap> {
        let Reconfiguration::Quiesced { drain_timeout } = how else {
            self.install_routes(tables)?;
            return Ok(Swap::default());
        };
        let started = Instant::now();
        let is_host = |n: NodeRef| matches!(n, NodeRef::Host(_));
        let paused = self.broadcast(is_host, |_| Request::SetInjection { paused: true });
        let drained = paused.and_then(|_| self.wait_in_flight_zero(started + drain_timeout));
        let drain = started.elapsed();
        let installed = match &drained {
            Ok(_) => self.install_routes(tables),
            Err(_) => Ok(()),
        };
        let resumed = self.broadcast(is_host, |_| Request::SetInjection { paused: false });
        let drained = drained.context("quiescing the fabric for a table swap")?;
        installed?;
        resumed.context("resuming injection after a table swap")?;
        Ok(Swap {
            quiesced: Some(Quiesced {
                drained: drained.is_none(),
                left_in_flight: drained.unwrap_or(0),
                drain_ms: drain.as_secs_f64() * 1e3,
                paused_ms: started.elapsed().as_secs_f64() * 1e3,
            }),
        })
    }

    /// Polls every live daemon's in-flight flits until two readings in a
    /// row are all 0 (a flit moving ahead of one reading wave is seen by
    /// the next), `deadline` passes, or the count has not fallen for
    /// [`QUIESCE_STALL`] (a worm cut by a dead link, with no recovery
    /// protocol to close it, holds its path for good: waiting longer only
    /// stalls the hosts); returns `None` when drained, else what the last
    /// reading still counted.
    fn wait_in_flight_zero(&self, deadline: Instant) -> Result<Option<u64>> {
        let mut zero_readings = 0;
        let mut lowest = u64::MAX;
        let mut fell_at = Instant::now();
        loop {
            let left: u64 = self
                .broadcast(|_| true, |_| Request::InFlight)?
                .into_iter()
                .map(|(_, reply)| reply.into_in_flight())
                .sum::<Result<u64, _>>()?;
            zero_readings = if left == 0 { zero_readings + 1 } else { 0 };
            if zero_readings >= 2 {
                return Ok(None);
            }
            let now = Instant::now();
            if left < lowest {
                lowest = left;
                fell_at = now;
            }
            if now >= deadline || (left > 0 && now.duration_since(fell_at) >= QUIESCE_STALL) {
                return Ok(Some(left));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Starts traffic on every host.
    pub fn start_traffic(&self, spec: &TrafficSpec) -> Result<()> {
        self.broadcast(
            |n| matches!(n, NodeRef::Host(_)),
            |_| Request::StartTraffic { spec: spec.clone() },
        )?;
        Ok(())
    }

    /// Reports of every live host.
    pub fn host_reports(&self) -> Result<HostReports> {
        self.broadcast(|n| matches!(n, NodeRef::Host(_)), |_| Request::Report)?
            .into_iter()
            .map(|(n, reply)| Ok((n, reply.into_host_report()?)))
            .collect()
    }

    /// Reports of every live switch.
    pub fn switch_reports(&self) -> Result<SwitchReports> {
        self.broadcast(|n| matches!(n, NodeRef::Switch(_)), |_| Request::Report)?
            .into_iter()
            .map(|(n, reply)| Ok((n, reply.into_switch_report()?)))
            .collect()
    }

    /// Kills (`up = false`) or restores a link: both ends' ports go down, as
    /// when a cable is pulled.
    pub fn set_link(&self, link: LinkId, up: bool) -> Result<()> {
        let l = self
            .topo
            .links
            .get(link as usize)
            .with_context(|| format!("no link {link}"))?
            .clone();
        for end in [l.a, l.b] {
            let i = self.daemon_of(end.node);
            self.client(i)?
                .call_ok(Request::SetPort { port: end.port, up })?;
        }
        Ok(())
    }

    /// Tells the daemon owning `end` to take that port down (or up), as
    /// [`Fabric::set_link`] does for both ends of a link.
    pub fn set_port(&self, end: PortRef, up: bool) -> Result<()> {
        let i = self.daemon_of(end.node);
        self.client(i)?
            .call_ok(Request::SetPort { port: end.port, up })?;
        Ok(())
    }

    /// Ethernet transport: sets both veth ends of `link` down (or up), a
    /// pulled cable the daemons are not told about: frames on it vanish
    /// and the ends notice by keepalive timeout.
    pub fn set_carrier(&self, link: LinkId, up: bool) -> Result<()> {
        let ns = self
            .netns()
            .context("only an ethernet-transport fabric has cables to pull")?;
        let l = self
            .topo
            .links
            .get(link as usize)
            .with_context(|| format!("no link {link}"))?
            .clone();
        let names: Vec<String> = [l.a, l.b]
            .iter()
            .map(|e| interface_name(node_index(&self.topo, e.node), e.port))
            .collect();
        crate::netns::set_up(ns, &names, up)
    }

    /// SIGKILLs a daemon (a real crash: neighbours must notice by themselves).
    pub fn kill(&mut self, node: NodeRef) -> Result<()> {
        let i = self.daemon_of(node);
        self.daemons[i].dead = true;
        if let Some(mut child) = self.daemons[i].child.take() {
            child
                .kill()
                .with_context(|| format!("killing {}", self.daemons[i].name))?;
            let _ = child.wait();
        }
        Ok(())
    }

    /// Starts a daemon killed by [`Fabric::kill`] again, with the same
    /// configuration (a rebooted switch: same addresses, empty buffers, no
    /// forwarding table, and a new link epoch, so its neighbours notice the
    /// restart and resynchronise credits). Its log is appended to.
    pub fn restart(&mut self, node: NodeRef, timeout: Duration) -> Result<()> {
        let i = self.daemon_of(node);
        let d = &self.daemons[i];
        if !d.dead || d.child.is_some() {
            bail!(
                "{} is running; only a killed daemon can be restarted",
                d.name
            );
        }
        if d.bin.as_os_str().is_empty() {
            bail!(
                "{} was started by someone else (attached fabric); restart its container instead",
                d.name
            );
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.run_dir.join(format!("{}.log", d.name)))?;
        let child = spawn_daemon(&d.bin, &d.config_path, log, &d.name)?;
        let d = &mut self.daemons[i];
        d.pid = child.id();
        d.child = Some(child);
        d.dead = false;
        self.wait_one_ready(i, Instant::now() + timeout)?;
        self.save_state()
    }

    /// Starts a killed switch again ([`Fabric::restart`]) and installs its
    /// table from `tables`: a rebooted switch has none.
    pub fn restart_switch(
        &mut self,
        s: SwitchId,
        tables: &RoutingTables,
        timeout: Duration,
    ) -> Result<()> {
        let node = NodeRef::Switch(s);
        self.restart(node, timeout)?;
        self.client(self.daemon_of(node))?
            .call_ok(install_request(tables, s))
            .with_context(|| format!("installing {}'s table", self.topo.node_name(node)))?;
        Ok(())
    }

    /// Brings every port of a switch down or up at once (an administrative
    /// switch fault: what it buffers is dropped and counted).
    pub fn set_all_ports(&self, node: NodeRef, up: bool) -> Result<()> {
        let i = self.daemon_of(node);
        self.client(i)?
            .call_ok(Request::SetAllPorts { up })
            .with_context(|| format!("setting every port of {}", self.daemons[i].name))?;
        Ok(())
    }

    /// Corrupts the next `count` datagrams a switch sends out of `port`.
    pub fn corrupt(&self, end: PortRef, count: u32) -> Result<()> {
        let i = self.daemon_of(end.node);
        self.client(i)?
            .call_ok(Request::Corrupt {
                port: end.port,
                count,
            })
            .with_context(|| format!("corrupting {}:{}", self.daemons[i].name, end.port))?;
        Ok(())
    }

    /// Fault injection: switch port `end` stops (`on`) or resumes
    /// returning credits to its peer.
    pub fn withhold_credits(&self, end: PortRef, on: bool) -> Result<()> {
        let i = self.daemon_of(end.node);
        self.client(i)?
            .call_ok(Request::WithholdCredits { port: end.port, on })
            .with_context(|| {
                format!(
                    "withholding credits on {}:{}",
                    self.daemons[i].name, end.port
                )
            })?;
        Ok(())
    }

    /// The report of one daemon.
    pub fn report_of(&self, node: NodeRef) -> Result<Reply> {
        let i = self.daemon_of(node);
        self.client(i)?
            .call_ok(Request::Report)
            .with_context(|| format!("report of {}", self.daemons[i].name))
    }

    /// Leaves the daemons running when this handle is dropped (for `up
    /// --detach`), and their network namespace with them.
    pub fn detach(mut self) {
        self.detached = true;
        if let Some(net) = self.net.as_mut() {
            net.keep();
        }
    }

    /// Ethernet transport: the network namespace holding the veth pairs.
    pub fn netns(&self) -> Option<&str> {
        self.net.as_ref().map(|n| n.name())
    }

    /// Asks every daemon to exit, then kills whatever did not.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop()
    }

    /// [`Fabric::shutdown`] through a reference: every daemon is asked to
    /// exit, then killed if it does not; the handle stays (all dead).
    pub fn stop(&mut self) -> Result<()> {
        let _ = self.broadcast(|_| true, |_| Request::Shutdown);
        self.reap(Duration::from_secs(3));
        for d in &mut self.daemons {
            d.dead = true;
        }
        Ok(())
    }

    fn reap(&mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        for d in &mut self.daemons {
            if let Some(child) = d.child.as_mut() {
                loop {
                    match child.try_wait() {
                        Ok(Some(_)) => break,
                        Ok(None) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        _ => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break;
                        }
                    }
                }
                d.child = None;
            }
        }
    }
}

/// Starts one daemon process with its output going to `log`.
fn spawn_daemon(bin: &Path, cfg_path: &Path, log: std::fs::File, name: &str) -> Result<Child> {
    Command::new(bin)
        .arg("--config")
        .arg(cfg_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {} for {name}", bin.display()))
}

impl Drop for Fabric {
    fn drop(&mut self) {
        if !self.detached {
            self.reap(Duration::ZERO);
        }
    }
}

/// Stops a detached fabric from its state file: a polite shutdown request,
/// then SIGKILL for whatever is still alive.
pub fn down(run_dir: &Path) -> Result<usize> {
    let path = run_dir.join("state.json");
    let state: FabricState = serde_json::from_slice(
        &std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    for (_, addr, _) in &state.daemons {
        if let Ok(mut c) = ControlClient::connect(*addr, &state.token) {
            let _ = c.call(Request::Shutdown);
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut killed = 0;
    for (_, _, pid) in &state.daemons {
        // SAFETY: kill(2) with signal 0 only probes; SIGKILL ends a daemon we started.
        if unsafe { libc::kill(*pid as libc::pid_t, 0) } == 0 {
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
            killed += 1;
        }
    }
    if let Some(ns) = &state.netns {
        if EthernetNet::exists(ns) {
            EthernetNet::delete(ns)?;
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(killed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::topology::generators;

    #[test]
    fn auto_reconfiguration_is_live_on_fat_trees_and_quiesced_elsewhere() {
        let tree = generators::kary_ntree(4, 2).unwrap();
        let cube = generators::hypercube(4).unwrap();
        assert_eq!(Reconfiguration::auto(&tree), Reconfiguration::Live);
        assert_eq!(Reconfiguration::auto(&cube), Reconfiguration::QUIESCED);
        use ReconfigurationChoice::*;
        assert_eq!(
            Reconfiguration::choose(Quiesced, &tree),
            Reconfiguration::QUIESCED
        );
        assert_eq!(Reconfiguration::choose(Live, &cube), Reconfiguration::Live);
        assert_eq!(
            Reconfiguration::choose(Auto, &cube),
            Reconfiguration::auto(&cube)
        );
    }

    #[test]
    fn a_swap_describes_itself_in_the_install_event() {
        let mut live = crate::events::RoutesInstalled::default();
        Swap::default().describe(&mut live);
        assert_eq!(live.reconfiguration.as_deref(), Some("live"));
        assert!(live.quiesce.is_none());
        let mut quiesced = crate::events::RoutesInstalled::default();
        Swap {
            quiesced: Some(Quiesced {
                drained: false,
                left_in_flight: 7,
                drain_ms: 50.5,
                paused_ms: 52.0,
            }),
        }
        .describe(&mut quiesced);
        assert_eq!(quiesced.reconfiguration.as_deref(), Some("quiesced"));
        let q = quiesced.quiesce.unwrap();
        assert!(!q.drained);
        assert_eq!(q.left_in_flight, 7);
    }
}
