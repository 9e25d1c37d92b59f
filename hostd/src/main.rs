//! `hostd`: one end node of an emulated fabric. The sans-IO
//! [`HostEndpoint`] (traffic source, sink, one link) inside the shared
//! runtime shell.

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::Parser;
use flitnet_core::control::{
    DaemonConfig, HostDaemonReport, NodeKind, Reply, Request, Response, Role, TrafficSpec,
};
use flitnet_core::host::endpoint::{HostConfig, HostEndpoint, HostEvent};
use flitnet_core::host::ip::{self, IpPlan};
use flitnet_core::host::retained::ReleasePolicy;
use flitnet_core::host::source::{MessageLength, OfferedLoad, SourceConfig};
use flitnet_core::host::traffic::TrafficPattern;
use flitnet_core::mechanism::sbrp::host::SbrpConfig;
use flitnet_core::topology::PortNo;
use flitnet_runtime::{daemon, run, Daemon, Node};
use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};
use std::path::PathBuf;

/// One host of a flitnet fabric. Normally started by `flitctl up` or docker
/// compose with a configuration file the controller wrote.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The JSON configuration file written by the controller.
    #[arg(long)]
    config: PathBuf,
}

struct HostNode {
    name: String,
    cfg: DaemonConfig,
    endpoint: HostEndpoint,
    events: flitnet_runtime::events::EventSender,
    /// Latest lateness of a timer, for the emulation-lag gauge.
    lag_ns: u64,
    /// A Prometheus exporter is installed (`metrics_addr`). Without one
    /// the metrics macros are no-ops but would still build their label
    /// strings (one allocation per delivered message): skipped.
    metrics: bool,
    /// The host's IP interface (`--tun`, docs/ip.md).
    ip: Option<IpInterface>,
}

/// Linux's default minimum TCP retransmission timeout.
const TCP_RTO_MIN_MS: u64 = 200;

/// A TUN device whose packets cross the fabric as messages.
struct IpInterface {
    tun: flitnet_runtime::tun::Tun,
    plan: IpPlan,
    buf: Vec<u8>,
    stats: IpStats,
}

/// What the IP interface did with packets (metrics, docs/ip.md).
#[derive(Clone, Copy, Default)]
struct IpStats {
    /// Read from the device and handed to the fabric.
    sent: u64,
    /// Read, but for no other host of the fabric (or not IPv4).
    unroutable: u64,
    /// Read, but the source queue was full.
    refused: u64,
    /// Delivered by the fabric and written to the device.
    received: u64,
    /// Delivered, but the device would not take them, or not an IP packet.
    write_dropped: u64,
}

impl IpInterface {
    /// Reads what the device holds while the endpoint takes it.
    fn pump(&mut self, now: u64, endpoint: &mut HostEndpoint) {
        let hosts = endpoint.config().hosts;
        // Bounded, so timers and the link get their turn.
        for _ in 0..64 {
            if !endpoint.can_send_data() {
                return;
            }
            let n = match self.tun.read(&mut self.buf) {
                Ok(Some(n)) => n,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, device = self.tun.device(), "reading the tun device");
                    return;
                }
            };
            let packet = &self.buf[..n];
            match ip::destination(&self.plan, packet, hosts) {
                Some(dst) if dst != endpoint.config().host => {
                    if endpoint.send_data(now, dst, Bytes::copy_from_slice(packet)) {
                        self.stats.sent += 1;
                    } else {
                        self.stats.refused += 1;
                    }
                }
                _ => self.stats.unroutable += 1,
            }
        }
    }

    fn deliver(&mut self, data: Bytes) {
        let Some(packet) = ip::trim(data) else {
            self.stats.write_dropped += 1;
            return;
        };
        match self.tun.write(&packet) {
            Ok(true) => self.stats.received += 1,
            Ok(false) => self.stats.write_dropped += 1,
            Err(e) => {
                self.stats.write_dropped += 1;
                tracing::warn!(error = %e, device = self.tun.device(), "writing the tun device");
            }
        }
    }
}

impl HostNode {
    fn source_config(&self, spec: &TrafficSpec) -> Result<SourceConfig, String> {
        let pattern: TrafficPattern = spec.pattern.parse().map_err(|e| format!("{e}"))?;
        // `permutation:FILE`: the daemon reads the file (flitctl passes an
        // absolute path when it starts local processes).
        let pattern = pattern
            .resolve(|p| std::fs::read_to_string(p))
            .map_err(|e| format!("{e}"))?;
        spec.validate(&self.cfg.fabric).map_err(|e| e.0)?;
        let link = self.cfg.fabric.bandwidth_flits_per_s.unwrap_or(1_000_000) as f64;
        Ok(SourceConfig {
            pattern,
            load: OfferedLoad::Fraction {
                fraction: spec.load,
                link_flits_per_s: link,
            },
            length: MessageLength::Fixed {
                flits: spec.message_flits,
            },
            max_packet_flits: self.cfg.fabric.max_packet_flits,
            payload_bytes: self.cfg.fabric.flit_payload as usize,
            duration_ns: Some(spec.duration_ns),
            release: release_policy(&self.cfg.fabric),
            ..SourceConfig::default()
        })
    }
}

/// SBRP resends from the sender's retained copy: keep each message for
/// the hold window (docs/sbrp.md).
fn release_policy(fabric: &flitnet_core::control::FabricParams) -> ReleasePolicy {
    if fabric.recovery.is_on() {
        ReleasePolicy::HoldFor {
            hold_ns: fabric.recovery_hold_ns(),
        }
    } else {
        ReleasePolicy::WhenSent
    }
}

impl Node for HostNode {
    fn handle_datagram(&mut self, now: u64, port: PortNo, data: Bytes) {
        self.endpoint.handle_datagram_bytes_on(now, port, data);
    }

    fn handle_timeout(&mut self, now: u64) {
        if let Some(due) = self.endpoint.poll_timeout() {
            self.lag_ns = now.saturating_sub(due);
        }
        self.endpoint.handle_timeout(now);
    }

    fn poll_transmit(&mut self, now: u64, buf: &mut Vec<u8>) -> Option<PortNo> {
        self.endpoint.poll_transmit_port(now, buf)
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.endpoint.poll_timeout()
    }
}

impl Daemon for HostNode {
    fn metric_label(&self) -> (&'static str, String) {
        ("host", self.name.clone())
    }

    fn extra_fd(&self) -> Option<std::os::fd::RawFd> {
        let ip = self.ip.as_ref()?;
        // Left in the device (whose queue then pushes back on the
        // senders) while the source queue is full.
        self.endpoint.can_send_data().then(|| ip.tun.raw_fd())
    }

    fn handle_extra(&mut self, now: u64) {
        if let Some(ip) = &mut self.ip {
            ip.pump(now, &mut self.endpoint);
        }
    }

    fn for_each_link(&self, f: &mut dyn FnMut(PortNo, &flitnet_core::link::Link)) {
        let link = self.endpoint.link();
        f(link.port(), link);
    }

    fn control(&mut self, now: u64, request: Request) -> Response {
        match request {
            Request::Ping => Response::reply(Reply::Pong {
                name: self.name.clone(),
                role: NodeKind::Host,
            }),
            Request::StartTraffic { spec } => match self.source_config(&spec) {
                Ok(source) => match self.endpoint.set_source(source, spec.seed).and_then(|()| {
                    self.endpoint.set_recovery(SbrpConfig {
                        protocol: self.cfg.fabric.recovery,
                        gap_wait_ns: self.cfg.fabric.sbrp_gap_wait_ns(),
                        ..SbrpConfig::default()
                    })
                }) {
                    Ok(()) => {
                        self.endpoint.begin_run();
                        self.endpoint.start(now);
                        tracing::info!(pattern = %spec.pattern, load = spec.load, "traffic started");
                        Response::ok()
                    }
                    Err(e) => Response::error(e.to_string()),
                },
                Err(e) => Response::error(format!("{}: {e}", self.name)),
            },
            Request::StopTraffic => {
                self.endpoint.stop(now);
                Response::ok()
            }
            Request::SetInjection { paused } => {
                self.endpoint.set_injection_paused(now, paused);
                tracing::debug!(paused, "injection");
                Response::ok()
            }
            Request::InFlight => Response::reply(Reply::InFlight {
                in_flight_flits: self.endpoint.in_flight_flits(),
            }),
            Request::Report => Response::reply(Reply::HostReport(Box::new(HostDaemonReport::of(
                self.name.clone(),
                &self.endpoint,
            )))),
            Request::SetPort { port: 0, up } => {
                self.endpoint.link_mut().set_admin_up(up);
                Response::ok()
            }
            Request::SetPort { port, up }
                if self.endpoint.receive_link().is_some_and(|(p, _)| p == port) =>
            {
                self.endpoint.link_of_mut(port).set_admin_up(up);
                Response::ok()
            }
            Request::SetPort { port, .. } => {
                Response::error(format!("{}: this host has no port {port}", self.name))
            }
            Request::SetAllPorts { up } => {
                self.endpoint.link_mut().set_admin_up(up);
                if let Some((port, _)) = self.endpoint.receive_link() {
                    self.endpoint.link_of_mut(port).set_admin_up(up);
                }
                Response::ok()
            }
            Request::WithholdCredits { .. } => Response::error(format!(
                "{}: credits are withheld on switch ports only",
                self.name
            )),
            Request::Corrupt { .. } => Response::error(format!(
                "{}: corruption is injected on switch ports only",
                self.name
            )),
            Request::InstallTable { .. } => {
                Response::error(format!("{}: a host has no forwarding table", self.name))
            }
            Request::ConfigureMechanism { mechanism, config } => {
                match flitnet_core::mechanism::configure_host(
                    &mut self.endpoint,
                    &mechanism,
                    config.as_ref(),
                ) {
                    Ok(answer) => {
                        tracing::info!(%mechanism, on = config.is_some(), "mechanism configured");
                        Response::reply(Reply::MechanismConfigured { answer })
                    }
                    Err(e) => Response::error(format!("{}: {e}", self.name)),
                }
            }
            Request::Shutdown => Response::ok(),
        }
    }

    fn after_io(&mut self, now: u64) {
        while let Some(ev) = self.endpoint.poll_event() {
            match ev {
                HostEvent::Delivered { latency_ns, .. } => {
                    if self.metrics {
                        histogram!("flitnet_host_message_latency_seconds", "host" => self.name.clone())
                            .record(latency_ns as f64 / 1e9)
                    }
                }
                HostEvent::Data { data, .. } => {
                    if let Some(ip) = &mut self.ip {
                        ip.deliver(data);
                    }
                }
                HostEvent::Link(e) => {
                    let retrain_ns = self.cfg.fabric.link_retrain_ns;
                    let last_heard_ns = self.endpoint.link().last_heard_ns();
                    self.events
                        .link_event(now, 0, &e, retrain_ns, last_heard_ns)
                }
                other => tracing::warn!(event = ?other, "host event"),
            }
        }
    }

    fn publish_metrics(&mut self, _now: u64) {
        if !self.metrics {
            return;
        }
        let r = self.endpoint.report();
        let host = self.name.clone();
        counter!("flitnet_host_messages_sent_total", "host" => host.clone())
            .absolute(r.source.messages_sent);
        counter!("flitnet_host_messages_delivered_total", "host" => host.clone())
            .absolute(r.sink.delivered_messages);
        counter!("flitnet_host_flits_sent_total", "host" => host.clone())
            .absolute(r.source.flits_sent);
        counter!("flitnet_host_flits_delivered_total", "host" => host.clone())
            .absolute(r.sink.delivered_flits);
        counter!("flitnet_host_duplicates_total", "host" => host.clone())
            .absolute(r.sink.duplicate_messages);
        counter!("flitnet_host_out_of_order_total", "host" => host.clone())
            .absolute(r.sink.out_of_order_messages);
        // Flits the receiver discarded (duplicates are counted above).
        for (reason, flits) in [
            ("corrupted", r.sink.corrupted_flits),
            ("orphan", r.sink.orphan_flits),
        ] {
            counter!("flitnet_drops_total", "host" => host.clone(), "reason" => reason)
                .absolute(flits);
        }
        for m in flitnet_core::mechanism::host_metrics() {
            counter!(m.name, "host" => host.clone()).absolute((m.value)(&r));
        }
        // Zero without an IP interface, like the other mechanism counters:
        // a dashboard shows 0, not "no data".
        let ip = self.ip.as_ref().map(|ip| ip.stats).unwrap_or_default();
        {
            for (event, n) in [
                ("sent", ip.sent),
                ("unroutable", ip.unroutable),
                ("refused", ip.refused),
                ("received", ip.received),
                ("write-dropped", ip.write_dropped),
            ] {
                counter!("flitnet_host_ip_packets_total", "host" => host.clone(), "event" => event)
                    .absolute(n);
            }
        }
        gauge!("flitnet_emulation_lag_seconds", "host" => host.clone())
            .set(self.lag_ns as f64 / 1e9);
        gauge!("flitnet_port_up", "host" => host).set(if self.endpoint.link().is_peer_alive() {
            1.0
        } else {
            0.0
        });
    }
}

/// HELP lines of the exposition (docs/metrics.md, "hostd"); Prometheus
/// lints an exposition without them.
fn describe_metrics() {
    for (name, help) in [
        (
            "flitnet_host_messages_sent_total",
            "Messages fully injected.",
        ),
        (
            "flitnet_host_messages_delivered_total",
            "Messages received complete, exactly once.",
        ),
        ("flitnet_host_flits_sent_total", "Flits injected."),
        (
            "flitnet_host_flits_delivered_total",
            "Flits of delivered messages.",
        ),
        (
            "flitnet_host_duplicates_total",
            "Duplicate messages dropped by the receiver.",
        ),
        (
            "flitnet_host_out_of_order_total",
            "Messages delivered out of order in their flow.",
        ),
        (
            "flitnet_drops_total",
            "Flits the receiver discarded, by reason.",
        ),
        (
            "flitnet_host_ip_packets_total",
            "IP packets of the host's tun interface, by event (sent, unroutable, refused, received, write-dropped).",
        ),
    ] {
        describe_counter!(name, help);
    }
    for m in flitnet_core::mechanism::host_metrics() {
        describe_counter!(m.name, m.help);
    }
    describe_gauge!(
        "flitnet_emulation_lag_seconds",
        "How late the event loop ran its last timer."
    );
    describe_gauge!("flitnet_port_up", "1 while the host's link peer is alive.");
    describe_histogram!(
        "flitnet_host_message_latency_seconds",
        Unit::Seconds,
        "Message generation to delivery."
    );
    flitnet_runtime::event_loop::describe_fidelity_metrics();
}

fn main() -> Result<()> {
    let args = Args::parse();
    let d = daemon::start(&args.config)?;
    describe_metrics();
    let Role::Host { id, hosts, ports } = d.config.role else {
        anyhow::bail!(
            "{}: this configuration is for a switch; start switchd with it",
            args.config.display()
        );
    };
    let host_cfg = HostConfig {
        host: id,
        hosts,
        source: SourceConfig::default(),
        injection: Default::default(),
        link: d
            .config
            .fabric
            .link_config(&flitnet_runtime::event_loop::LINK_DRIVER),
        epoch: flitnet_runtime::epoch(),
        seed: d.config.seed,
        record_trace: false,
    };
    let mut endpoint = HostEndpoint::new(host_cfg)?;
    if ports == 2 {
        // One-way links (RUFT): send on port 0, receive on port 1.
        endpoint.add_receive_port(flitnet_core::control::HOST_RECEIVE_PORT)?;
    }
    let ip = match &d.config.tun {
        None => None,
        Some(t) => {
            // IP packets may come before (or without) generated traffic:
            // the source is given the fabric's packetisation now, with no
            // load of its own, and the recovery protocol is on from here.
            let fabric = &d.config.fabric;
            endpoint.set_source(
                SourceConfig {
                    load: OfferedLoad::FlitsPerSecond { rate: 0.0 },
                    max_packet_flits: fabric.max_packet_flits,
                    payload_bytes: fabric.flit_payload as usize,
                    release: release_policy(fabric),
                    ..SourceConfig::default()
                },
                d.config.seed,
            )?;
            endpoint.set_recovery(SbrpConfig {
                protocol: fabric.recovery,
                gap_wait_ns: fabric.sbrp_gap_wait_ns(),
                ..SbrpConfig::default()
            })?;
            endpoint.start(flitnet_runtime::clock::now_ns());
            let addr = t.plan.address(id);
            // TCP's timers run in wall time: under dilation N its minimum
            // RTO is raised N times (Linux's 200 ms), so that in emulated
            // time it stays what it is on an undilated network (docs/ip.md).
            let dilation = fabric.time_dilation.max(1) as u64;
            let rto_min_ms = (dilation > 1).then_some(TCP_RTO_MIN_MS * dilation);
            let tun = flitnet_runtime::tun::Tun::open(t, addr, rto_min_ms)
                .with_context(|| format!("{}: opening its IP interface", d.config.name))?;
            tracing::info!(device = tun.device(), %addr, plan = %t.plan, mtu = t.mtu, netns = ?t.netns, "IP interface up");
            Some(IpInterface {
                tun,
                plan: t.plan,
                buf: vec![0; 65_536],
                stats: IpStats::default(),
            })
        }
    };
    let mut node = HostNode {
        ip,
        name: d.config.name.clone(),
        events: flitnet_runtime::events::EventSender::new(
            d.config.name.clone(),
            d.config.token.clone(),
            d.config.events_addr,
        ),
        metrics: d.config.metrics_addr.is_some(),
        cfg: d.config,
        endpoint,
        lag_ns: 0,
    };
    let mut transport = d.transport;
    run(&mut node, &mut transport, d.inbox)
}
