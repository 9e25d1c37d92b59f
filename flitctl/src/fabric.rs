//! Bringing a fabric up as real processes on this machine, and driving it.
//!
//! Every node gets its own loopback address `127.B.x.y` (the whole 127/8 is
//! routed to `lo` on Linux) with the same fixed ports everywhere — data
//! 7000/udp, control 7001/tcp, metrics 9100/tcp — exactly like one container
//! per node under `docker compose`. `B` is chosen per fabric so that several
//! fabrics (parallel tests) can run side by side.

use crate::events::Quiesced;
use crate::netns::{interface_mac, interface_name, EthernetNet};
use crate::process::ProcessId;
use crate::shmnet::{bell_path, ring_path, ShmNet};
use crate::state::{DaemonRecord, FabricState};
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
    /// `--tun`: an IP interface per host, each in a namespace of its own
    /// (docs/ip.md).
    pub tun: Option<crate::tun::TunOptions>,
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
    /// Its start time and executable, for `state.json` (None for an
    /// attached daemon).
    pub process: Option<ProcessId>,
    /// The control connection kept open between requests
    /// ([`Fabric::broadcast`]).
    pub conn: KeptConnection,
}

/// A control connection kept open: a fault's table installs cost one round
/// trip per switch, not a TCP handshake and a server thread each.
#[derive(Default)]
pub struct KeptConnection(std::sync::Mutex<Option<ControlClient>>);

impl std::fmt::Debug for KeptConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.slot().is_some();
        write!(
            f,
            "KeptConnection({})",
            if open { "open" } else { "closed" }
        )
    }
}

impl KeptConnection {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<ControlClient>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the connection (its daemon was killed or restarted).
    pub fn close(&self) {
        *self.slot() = None;
    }

    /// Sends `request` on the kept connection, opening one first if none
    /// is open. A kept connection the daemon closed meanwhile (idle
    /// timeout) fails before the request is read: the request is sent
    /// again once on a new connection. A timeout is not retried (the
    /// daemon may be working on it). Any failure closes the connection.
    fn call(
        &self,
        addr: SocketAddr,
        token: &str,
        request: Request,
        timeout: Option<Duration>,
    ) -> Result<Reply> {
        let mut slot = self.slot();
        let reused = slot.is_some();
        let mut client = match slot.take() {
            Some(c) => c,
            None => ControlClient::connect(addr, token)?,
        };
        client.set_timeout(timeout.unwrap_or(Duration::from_secs(30)))?;
        match client.call(request.clone()) {
            Ok(response) => {
                *slot = Some(client);
                reply_of(response)
            }
            Err(e) if reused && !is_timeout(&e) => {
                let mut client = ControlClient::connect(addr, token)?;
                client.set_timeout(timeout.unwrap_or(Duration::from_secs(30)))?;
                let response = client.call(request)?;
                *slot = Some(client);
                reply_of(response)
            }
            Err(e) => Err(e),
        }
    }
}

fn reply_of(response: flitnet_core::control::Response) -> Result<Reply> {
    match response {
        flitnet_core::control::Response::Ok { body } => Ok(body),
        flitnet_core::control::Response::Error { message } => bail!("{message}"),
    }
}

/// Whether a control call failed for want of an answer in time.
fn is_timeout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        })
    })
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
    /// Shm transport: the ring files and doorbells, removed after the
    /// daemons when the fabric is dropped.
    shm: Option<ShmNet>,
    /// `--tun`: the hosts' namespaces, deleted after the daemons.
    tun: Option<crate::tun::TunNet>,
}

/// How long a read-only request (report, ping, in-flight) waits for its
/// answer before the daemon is taken as stalled (SIGSTOPped, or starved of
/// CPU).
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Daemons of this process's fabric that did not answer a report request,
/// by daemon index, with why: not asked again (each would cost a full
/// timeout), and named in the run's report ([`stalled_daemons`]). One
/// fabric runs at a time; a launch or attach clears it.
static STALLED: std::sync::Mutex<std::collections::BTreeMap<usize, (String, String)>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn stalled() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<usize, (String, String)>>
{
    STALLED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The daemons that did not answer, as `name (why)`.
pub fn stalled_daemons() -> Vec<String> {
    stalled()
        .values()
        .map(|(name, why)| format!("{name} ({why})"))
        .collect()
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

/// Picks a `127.B.0.0/16` whose first node's data and control ports are
/// both free. The control port tells a subnet in use by a fabric whose data
/// goes over shared memory or Ethernet, which binds no data socket.
fn pick_subnet() -> Result<u8> {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..64 {
        let b: u8 = rng.gen_range(32..=250);
        let data = SocketAddrV4::new(node_ip(b, 0), DATA_PORT);
        let control = SocketAddrV4::new(node_ip(b, 0), CONTROL_PORT);
        if std::net::UdpSocket::bind(data).is_ok() && std::net::TcpListener::bind(control).is_ok() {
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
    shm_dir: Option<&Path>,
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
                        DataTransport::Shm => {
                            let dir = shm_dir.expect("a shm fabric has a ring directory");
                            let link = topo.link_at(here).expect("a cabled port has a link");
                            let end = u8::from(topo.links[link as usize].a != here);
                            PortPeer::shm(
                                p,
                                &ring_path(dir, link),
                                end,
                                &bell_path(dir, node_index(topo, peer.node)),
                            )
                        }
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
                    DataTransport::Ethernet => netns.map(str::to_string),
                    _ => None,
                },
                doorbell: match params.transport {
                    DataTransport::Shm => shm_dir.map(|d| bell_path(d, node_index(topo, node))),
                    _ => None,
                },
                tun: None,
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
        opts.params
            .validate()
            .map_err(|e| anyhow::anyhow!("fabric: {}", e.0))?;
        // Private (0700, not another user's, no symlink): it gets the token.
        crate::rundir::create(Some(&opts.run_dir), "fabric", true)?;
        let subnet = match opts.subnet {
            Some(s) => s,
            None => pick_subnet()?,
        };
        let token = opts.token.clone();
        let netns = match opts.params.transport {
            DataTransport::Ethernet => Some(match &opts.netns {
                Some(n) => n.clone(),
                None => format!("flitnet-{}", &token[..12]),
            }),
            _ => None,
        };
        let shm = match opts.params.transport {
            DataTransport::Shm => Some(ShmNet::create(&opts.run_dir, &topo, &opts.params)?),
            _ => None,
        };
        let mut configs = daemon_configs(
            &topo,
            &opts.params,
            subnet,
            &token,
            opts.metrics,
            opts.seed,
            opts.events_addr,
            netns.as_deref(),
            shm.as_ref().map(|s| s.dir()),
        );
        let tun = match &opts.tun {
            None => None,
            Some(t) => Some(crate::tun::TunNet::create(
                &token[..8],
                &topo,
                t,
                flitnet_core::host::ip::IpPlan::default_for(subnet),
                crate::tun::default_mtu(&opts.params),
            )?),
        };
        if let Some(t) = &tun {
            for (node, cfg) in &mut configs {
                if let NodeRef::Host(h) = node {
                    cfg.tun = Some(t.config(*h as usize));
                }
            }
        }
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
            shm,
            tun,
        };
        stalled().clear();
        // Before the first daemon: a controller killed from here on leaves
        // a state file that names every daemon it started.
        fabric.save_state()?;
        for (node, cfg) in configs {
            if crate::interrupt::requested() {
                bail!("interrupted during bring-up");
            }
            let bin = match node {
                NodeRef::Switch(_) => opts.bin_dir.join("switchd"),
                NodeRef::Host(_) => opts.bin_dir.join("hostd"),
            };
            let cfg_path = opts.run_dir.join(format!("{}.json", cfg.name));
            // 0600: the configuration holds the token.
            crate::rundir::write(&cfg_path, serde_json::to_vec_pretty(&cfg)?)?;
            let log = crate::rundir::create_file(&opts.run_dir.join(format!("{}.log", cfg.name)))?;
            let child = spawn_daemon(&bin, &cfg_path, log, &cfg.name)?;
            let process = ProcessId::of(child.id(), &bin).ok();
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
                process,
                conn: KeptConnection::default(),
            });
            fabric.save_state()?;
        }
        fabric.wait_ready(opts.ready_timeout)?;
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
        stalled().clear();
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
                    process: None,
                    conn: KeptConnection::default(),
                })
                .collect(),
            run_dir,
            detached: true,
            net: None,
            shm: None,
            tun: None,
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
    /// Its counts are missing from the report: it is named there
    /// ([`stalled_daemons`]).
    pub fn mark_dead(&mut self, i: usize) {
        self.daemons[i].dead = true;
        self.daemons[i].conn.close();
        let name = self.daemons[i].name.clone();
        stalled().entry(i).or_insert_with(|| {
            (
                name,
                "no answer on its control port: stopped, stalled or dead".into(),
            )
        });
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
                if crate::interrupt::requested() {
                    bail!("interrupted during bring-up");
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
                .filter_map(|d| {
                    Some(DaemonRecord {
                        name: d.name.clone(),
                        control_addr: d.control_addr,
                        process: d.process.clone()?,
                    })
                })
                .collect(),
            netns: self.netns().map(str::to_string),
            shm_dir: self.shm.as_ref().map(|s| s.dir().to_path_buf()),
            controller: ProcessId::current().ok(),
            tun: self.tun.as_ref().map(|t| t.state().clone()),
        };
        crate::rundir::replace(
            &self.run_dir.join(FabricState::FILE),
            serde_json::to_vec(&state)?,
        )
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
        self.ask_each(filter, request, None)
            .into_iter()
            .map(|(node, answer)| Ok((node, answer?)))
            .collect()
    }

    /// [`Fabric::broadcast`] with each daemon's own answer or error, in
    /// daemon order; `timeout` bounds each answer (None: the client's).
    fn ask_each(
        &self,
        filter: impl Fn(NodeRef) -> bool,
        request: impl Fn(NodeRef) -> Request + Sync,
        timeout: Option<Duration>,
    ) -> Vec<(NodeRef, Result<Reply>)> {
        let targets: Vec<usize> = (0..self.daemons.len())
            .filter(|&i| !self.daemons[i].dead && filter(self.daemons[i].node))
            .collect();
        // Up to 64 threads: a daemon busy forwarding answers after a
        // scheduling delay, and route installation after a fault should
        // cost one such delay, not one per daemon in a batch.
        let chunk = targets.len().div_ceil(64).max(1);
        let results: Vec<Vec<(NodeRef, Result<Reply>)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = targets
                .chunks(chunk)
                .map(|part| {
                    let request = &request;
                    scope.spawn(move || {
                        part.iter()
                            .map(|&i| {
                                let node = self.daemons[i].node;
                                let d = &self.daemons[i];
                                let body = d
                                    .conn
                                    .call(d.control_addr, &self.token, request(node), timeout)
                                    .with_context(|| d.name.clone());
                                (node, body)
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
        results.into_iter().flatten().collect()
    }

    /// Report requests to the live daemons `filter` picks. A daemon that
    /// does not answer within [`REPORT_TIMEOUT`] (stopped, stalled) is
    /// left out, named by [`stalled_daemons`] and not asked again, so one
    /// stuck daemon costs one timeout, not the report.
    fn reports(&self, filter: impl Fn(NodeRef) -> bool) -> Vec<(NodeRef, Reply)> {
        let skipped: Vec<usize> = stalled().keys().copied().collect();
        let answers = self.ask_each(
            |n| filter(n) && !skipped.contains(&self.daemon_of(n)),
            |_| Request::Report,
            Some(REPORT_TIMEOUT),
        );
        let mut out = Vec::with_capacity(answers.len());
        for (node, answer) in answers {
            match answer {
                Ok(reply) => out.push((node, reply)),
                Err(e) => {
                    let why = stall_reason(&e);
                    let name = self.topo.node_name(node).to_string();
                    tracing::warn!(daemon = %name, "stalled: {why}");
                    stalled().insert(self.daemon_of(node), (name, why));
                }
            }
        }
        out
    }

    /// Installs one table per switch.
    pub fn install_routes(&self, tables: &RoutingTables) -> Result<()> {
        self.install_routes_except(tables, &[])
    }

    /// Installs one table per switch but those in `skip` (switches the
    /// faults cut off: no flit reaches them, and one that is dead would
    /// hold the install up for a whole connect timeout). The tables go out
    /// in parallel over the kept control connections; this returns with
    /// the last switch's acknowledgement.
    pub fn install_routes_except(&self, tables: &RoutingTables, skip: &[SwitchId]) -> Result<()> {
        anyhow::ensure!(
            tables.switches.len() == self.topo.num_switches(),
            "routing has {} tables for {} switches",
            tables.switches.len(),
            self.topo.num_switches()
        );
        self.broadcast(
            |n| matches!(n, NodeRef::Switch(s) if !skip.contains(&s)),
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
        self.swap_routes_except(tables, how, &[])
    }

    /// [`Fabric::swap_routes`], leaving out the switches in `skip` (see
    /// [`Fabric::install_routes_except`]).
    pub fn swap_routes_except(
        &self,
        tables: &RoutingTables,
        how: Reconfiguration,
        skip: &[SwitchId],
    ) -> Result<Swap> {
        let Reconfiguration::Quiesced { drain_timeout } = how else {
            self.install_routes_except(tables, skip)?;
            return Ok(Swap::default());
        };
        let started = Instant::now();
        let is_host = |n: NodeRef| matches!(n, NodeRef::Host(_));
        let paused = self.broadcast(is_host, |_| Request::SetInjection { paused: true });
        let wall = flitnet_runtime::clock::wall;
        let emulated = flitnet_runtime::clock::emulated;
        let drained = paused.and_then(|_| self.wait_in_flight_zero(started + wall(drain_timeout)));
        let drain = emulated(started.elapsed());
        let installed = match &drained {
            Ok(_) => self.install_routes_except(tables, skip),
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
                paused_ms: emulated(started.elapsed()).as_secs_f64() * 1e3,
            }),
        })
    }

    /// Waits (at most `timeout`) until no daemon has a flit in flight —
    /// what a previous run left in a long-lived fabric has landed — and
    /// returns `None`, or what the last reading still counted.
    pub fn wait_idle(&self, timeout: Duration) -> Result<Option<u64>> {
        self.wait_in_flight_zero(Instant::now() + timeout)
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
            let stalled =
                now.duration_since(fell_at) >= flitnet_runtime::clock::wall(QUIESCE_STALL);
            if now >= deadline || (left > 0 && stalled) {
                return Ok(Some(left));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Starts traffic on every host. A host starts its run's figures
    /// afresh when told to start ([`HostEndpoint::begin_run`]); were the
    /// hosts let go one by one, a message from a host already sending
    /// could reach one not yet told, be counted there and then wiped by
    /// its fresh start (sent, never delivered). So injection is held on
    /// every host first, traffic started on all, and only then let go.
    ///
    /// [`HostEndpoint::begin_run`]: flitnet_core::host::endpoint::HostEndpoint::begin_run
    pub fn start_traffic(&self, spec: &TrafficSpec) -> Result<()> {
        let is_host = |n: NodeRef| matches!(n, NodeRef::Host(_));
        self.broadcast(is_host, |_| Request::SetInjection { paused: true })?;
        let started = self.broadcast(is_host, |_| Request::StartTraffic { spec: spec.clone() });
        self.broadcast(is_host, |_| Request::SetInjection { paused: false })?;
        started?;
        Ok(())
    }

    /// Reports of every live host (but a stalled one: [`Fabric::reports`]).
    pub fn host_reports(&self) -> Result<HostReports> {
        self.reports(|n| matches!(n, NodeRef::Host(_)))
            .into_iter()
            .map(|(n, reply)| Ok((n, reply.into_host_report()?)))
            .collect()
    }

    /// Reports of every live switch (but a stalled one).
    pub fn switch_reports(&self) -> Result<SwitchReports> {
        self.reports(|n| matches!(n, NodeRef::Switch(_)))
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
        if let Some(shm) = &self.shm {
            return shm.set_carrier(link, up);
        }
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
        self.daemons[i].conn.close();
        if let Some(mut child) = self.daemons[i].child.take() {
            child
                .kill()
                .with_context(|| format!("killing {}", self.daemons[i].name))?;
            let _ = child.wait();
        }
        Ok(())
    }

    /// Stops a daemon's process for `lasts` of emulated time with its state
    /// kept (SIGSTOP), then lets it run again (SIGCONT): [`Stopper::stop`]
    /// now.
    pub fn stop_for(&self, node: NodeRef, lasts: Duration) -> Result<()> {
        self.stopper(node, lasts)?.stop()
    }

    /// What stops a daemon's process for `lasts` of emulated time, checked
    /// now: the daemon runs, is this controller's child, and the stop ends
    /// before the controller would take the daemon's silence for good.
    pub fn stopper(&self, node: NodeRef, lasts: Duration) -> Result<Stopper> {
        let d = &self.daemons[self.daemon_of(node)];
        if d.dead {
            bail!("{} is not running", d.name);
        }
        let Some(child) = d.child.as_ref() else {
            bail!(
                "{}: stop-switch signals a daemon this controller started; an attached \
                 fabric's daemons are not its processes",
                d.name
            );
        };
        let wall = flitnet_runtime::clock::wall(lasts);
        if wall >= REPORT_TIMEOUT {
            bail!(
                "{}: a stop of {lasts:?} lasts {wall:?} of wall time at this dilation; the controller \
                 takes a daemon silent for {} s as stalled for good: stop it for less",
                d.name,
                REPORT_TIMEOUT.as_secs()
            );
        }
        Ok(Stopper {
            name: d.name.clone(),
            pid: child.id() as libc::pid_t,
            process: d.process.clone(),
            wall,
        })
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
        let log = crate::rundir::append_file(&self.run_dir.join(format!("{}.log", d.name)))?;
        let child = spawn_daemon(&d.bin, &d.config_path, log, &d.name)?;
        let d = &mut self.daemons[i];
        d.process = ProcessId::of(child.id(), &d.bin).ok();
        d.pid = child.id();
        d.child = Some(child);
        d.dead = false;
        d.conn.close();
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
        let mut client = self.client(i)?;
        client.set_timeout(REPORT_TIMEOUT)?;
        client
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
        if let Some(tun) = self.tun.as_mut() {
            tun.keep();
        }
        if let Some(shm) = self.shm.as_mut() {
            shm.keep();
        }
    }

    /// Shm transport: the ring files and doorbells.
    pub fn shm(&self) -> Option<&ShmNet> {
        self.shm.as_ref()
    }

    /// `--tun`: the hosts' interfaces.
    pub fn tun_state(&self) -> Option<&crate::tun::TunState> {
        self.tun.as_ref().map(|t| t.state())
    }

    /// `--tun`: the hosts' interfaces, for the bring-up line.
    pub fn tun_summary(&self) -> String {
        match &self.tun {
            Some(t) => format!(
                "; IP interfaces {} in {}, MTU {} (flitctl exec HOST -- CMD)",
                crate::tun::DEVICE,
                t.state().plan,
                t.state().mtu
            ),
            None => String::new(),
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
        // A daemon still stopped by a stop-switch runs again to exit.
        for d in &self.daemons {
            if let Some(child) = d.child.as_ref() {
                // SAFETY: kill(2) on our own child, which has not been reaped.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
            }
        }
        // A stalled daemon is not waited for: reap kills it.
        let skipped: Vec<usize> = stalled().keys().copied().collect();
        let _ = self.ask_each(
            |n| !skipped.contains(&self.daemon_of(n)),
            |_| Request::Shutdown,
            Some(Duration::from_secs(2)),
        );
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

/// Starts one daemon process with its output going to `log`, in its own
/// process group (a Ctrl-C at the terminal reaches flitctl alone, which
/// then stops the daemons in order) and with `PR_SET_PDEATHSIG` = SIGKILL,
/// so that a flitctl killed outright takes its daemons with it. (The
/// death signal follows the thread that forked: daemons are started from
/// the controller's main thread, which lives as long as the process.)
fn spawn_daemon(bin: &Path, cfg_path: &Path, log: std::fs::File, name: &str) -> Result<Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(cfg_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes async-signal-safe calls (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the prctl: nobody would stop us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("starting {} for {name}", bin.display()))
}

/// What to say about a daemon whose request failed: a timeout reads as
/// "stalled" (a stopped or starved process answers nothing; the socket
/// error alone says "Resource temporarily unavailable").
pub fn stall_reason(err: &anyhow::Error) -> String {
    let timed_out = err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        })
    });
    if timed_out {
        format!(
            "no answer within {} s: stopped, or starved of CPU",
            REPORT_TIMEOUT.as_secs()
        )
    } else {
        format!("no answer: {}", err.root_cause())
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        if !self.detached {
            self.reap(Duration::ZERO);
        }
    }
}

/// Stops one daemon's process with its state kept ([`Fabric::stopper`]).
#[derive(Clone, Debug)]
pub struct Stopper {
    pub name: String,
    pid: libc::pid_t,
    process: Option<ProcessId>,
    /// How long, in wall time.
    wall: Duration,
}

impl Stopper {
    /// SIGSTOP now; the SIGCONT comes from a timer thread of its own: the
    /// controller's loop may be waiting for this very daemon (a table
    /// install), and the stop must last what was asked either way.
    pub fn stop(self) -> Result<()> {
        // SAFETY: kill(2) on our own child, which has not been reaped.
        if unsafe { libc::kill(self.pid, libc::SIGSTOP) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("SIGSTOP to {}", self.name));
        }
        let name = self.name.clone();
        std::thread::Builder::new()
            .name(format!("sigcont-{name}"))
            .spawn(move || {
                std::thread::sleep(self.wall);
                // Only to the process stopped: a daemon killed and started
                // again meanwhile is another process (and runs).
                if self.process.as_ref().is_none_or(|p| p.check().is_ok()) {
                    // SAFETY: kill(2) on the PID checked to be the daemon stopped.
                    unsafe { libc::kill(self.pid, libc::SIGCONT) };
                }
            })
            .with_context(|| format!("starting the timer that lets {name} run again"))?;
        Ok(())
    }
}

/// What `flitctl down` did.
#[derive(Debug, Default)]
pub struct Down {
    /// Daemons that had to be killed (they did not exit when asked).
    pub killed: usize,
    /// Daemons left alone, with why: their PID is gone or now belongs to
    /// another process (a different start time or executable).
    pub refused: Vec<String>,
}

/// Stops a fabric from its state file: a polite shutdown request, then
/// SIGKILL for whatever is still alive — only to PIDs whose start time and
/// executable are still those recorded (a PID reused by an unrelated
/// process is left alone).
pub fn down(run_dir: &Path) -> Result<Down> {
    let state = FabricState::read(run_dir)?;
    let mut result = Down::default();
    let live: Vec<&DaemonRecord> = state
        .daemons
        .iter()
        .filter(|d| match d.process.check() {
            Ok(()) => true,
            // Exited (or was killed on purpose by a chaos run).
            Err(_) if crate::process::exited(d.process.pid) => false,
            Err(e) => {
                result.refused.push(format!("{}: {e:#}", d.name));
                false
            }
        })
        .collect();
    for d in &live {
        if let Ok(mut c) = ControlClient::connect(d.control_addr, &state.token) {
            let _ = c.set_timeout(Duration::from_secs(2));
            let _ = c.call(Request::Shutdown);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && live.iter().any(|d| d.process.is_running()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for d in &live {
        // Checked again right before the signal.
        if d.process.is_running() {
            // SAFETY: kill(2) on a PID just checked to be the daemon we started.
            unsafe { libc::kill(d.process.pid as libc::pid_t, libc::SIGKILL) };
            result.killed += 1;
        }
    }
    if let Some(ns) = &state.netns {
        if EthernetNet::exists(ns) {
            EthernetNet::delete(ns)?;
        }
    }
    if let Some(dir) = &state.shm_dir {
        ShmNet::remove(dir)?;
    }
    if let Some(tun) = &state.tun {
        crate::tun::TunNet::delete(tun)?;
    }
    let _ = std::fs::remove_file(run_dir.join(FabricState::FILE));
    Ok(result)
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
