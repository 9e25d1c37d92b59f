//! `switchd`: one switch of an emulated fabric. The sans-IO [`Switch`]
//! (input-buffered, VCs, credits, allocators, installed tables) inside the
//! shared runtime shell.

use anyhow::Result;
use bytes::Bytes;
use clap::Parser;
use flitnet_core::control::{
    EventKind, LinkState, NodeKind, Reply, Request, Response, Role, SwitchReport,
};
use flitnet_core::switch::{Switch, SwitchEvent};
use flitnet_core::topology::{PortNo, SwitchId};
use flitnet_runtime::events::EventSender;
use flitnet_runtime::{daemon, run, Daemon, Node};
use metrics::{counter, describe_counter, describe_gauge, gauge};
use std::path::PathBuf;

/// One switch of a flitnet fabric. Normally started by `flitctl up` or
/// docker compose with a configuration file the controller wrote.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The JSON configuration file written by the controller.
    #[arg(long)]
    config: PathBuf,
    /// Head-of-queue lifetime (e.g. 400ms, or `off`): a head that waits
    /// this long for an output VC is discarded with its worm (deadlock
    /// recovery, docs/sbrp.md "Deadlock"). Overrides the configuration's
    /// `head_of_queue_lifetime_ns`.
    #[arg(long, value_parser = parse_lifetime)]
    head_of_queue_lifetime: Option<Lifetime>,
}

/// `--head-of-queue-lifetime`: off, or a duration.
#[derive(Clone, Copy, Debug)]
struct Lifetime(Option<u64>);

fn parse_lifetime(s: &str) -> Result<Lifetime, String> {
    if s == "off" || s == "0" {
        return Ok(Lifetime(None));
    }
    let bad = || format!("{s:?} is not a duration (400ms, 50us, 1s, 1000000ns) nor off");
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| bad())?;
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "" | "s" => 1e9,
        _ => return Err(bad()),
    };
    let ns = (value * scale).round() as u64;
    Ok(Lifetime((ns > 0).then_some(ns)))
}

struct SwitchNode {
    name: String,
    id: SwitchId,
    switch: Switch,
    events: EventSender,
    /// Latest lateness of a timer, for the emulation-lag gauge.
    lag_ns: u64,
    /// Ports cabled according to the configuration.
    cabled: Vec<PortNo>,
    /// Datagrams still to corrupt, per port (a transient fault the
    /// controller injects with `Request::Corrupt`).
    corrupt_left: Vec<u32>,
    /// Datagrams corrupted so far, per port.
    corrupted: Vec<u64>,
    /// Packets dropped, by reason name (the core counts flits; the
    /// controller's loss accounting compares messages with packets).
    dropped_packets: std::collections::BTreeMap<&'static str, u64>,
    /// A Prometheus exporter is installed (`metrics_addr`). Without one
    /// the metrics macros are no-ops, but their label strings would still
    /// be built: skipped, because hundreds of idle daemons share 2 cores.
    metrics: bool,
}

/// Damages a datagram so that the receiver's CRC check fails: one byte
/// outside the CRC field (bytes 11..15) and the version byte is flipped.
fn corrupt_datagram(buf: &mut [u8]) {
    let at = if buf.len() > flitnet_core::wire::HEADER_LEN {
        buf.len() - 1
    } else {
        5.min(buf.len().saturating_sub(1))
    };
    if let Some(b) = buf.get_mut(at) {
        *b ^= 0xa5;
    }
}

impl Node for SwitchNode {
    fn handle_datagram(&mut self, now: u64, port: PortNo, data: Bytes) {
        // Errors (bad datagram, unknown port) are counted by the switch.
        let _ = self.switch.handle_datagram(now, port, data);
    }

    fn handle_timeout(&mut self, now: u64) {
        if let Some(due) = self.switch.poll_timeout() {
            self.lag_ns = now.saturating_sub(due);
        }
        self.switch.handle_timeout(now);
    }

    fn poll_transmit(&mut self, now: u64, buf: &mut Vec<u8>) -> Option<PortNo> {
        let port = self.switch.poll_transmit(now, buf)?;
        if let Some(left) = self.corrupt_left.get_mut(port as usize) {
            if *left > 0 {
                *left -= 1;
                self.corrupted[port as usize] += 1;
                corrupt_datagram(buf);
            }
        }
        Some(port)
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.switch.poll_timeout()
    }
}

impl Daemon for SwitchNode {
    fn metric_label(&self) -> (&'static str, String) {
        ("switch", self.name.clone())
    }

    fn for_each_link(&self, f: &mut dyn FnMut(PortNo, &flitnet_core::link::Link)) {
        for &p in &self.cabled {
            if let Ok(l) = self.switch.link(p) {
                f(p, l);
            }
        }
    }

    fn control(&mut self, now: u64, request: Request) -> Response {
        match request {
            Request::Ping => Response::reply(Reply::Pong {
                name: self.name.clone(),
                role: NodeKind::Switch,
            }),
            Request::InstallTable { table, vc_policy } => {
                let vcs = self.switch.config().vcs;
                if vc_policy.min_vcs() > vcs {
                    return Response::error(format!(
                        "{}: the VC policy needs {} virtual channels, this switch has {vcs}",
                        self.name,
                        vc_policy.min_vcs()
                    ));
                }
                self.switch.install_table(table, vc_policy);
                tracing::info!("forwarding table installed");
                Response::ok()
            }
            Request::ConfigureMechanism { mechanism, config } => {
                let on = config.is_some();
                match flitnet_core::mechanism::configure_switch(
                    &mut self.switch,
                    self.id,
                    &mechanism,
                    config.as_ref(),
                ) {
                    Ok(()) => {
                        tracing::info!(%mechanism, on, "mechanism configured");
                        Response::ok()
                    }
                    Err(e) => Response::error(format!("{}: {e}", self.name)),
                }
            }
            Request::InFlight => Response::reply(Reply::InFlight {
                in_flight_flits: self.switch.in_flight_flits(),
            }),
            Request::SetPort { port, up } => match self.switch.set_port_admin(port, up) {
                Ok(()) => {
                    tracing::info!(port, up, "port set by the controller");
                    Response::ok()
                }
                Err(e) => Response::error(format!("{}: {e}", self.name)),
            },
            Request::Report => {
                let c = self.switch.counters_at(now);
                let links =
                    || (0..c.ports.len() as PortNo).filter_map(|p| self.switch.link(p).ok());
                Response::reply(Reply::SwitchReport(Box::new(SwitchReport {
                    name: self.name.clone(),
                    counters: c.clone(),
                    credit_violations: links().map(|l| l.stats().rx_overflow).sum(),
                    // Only live (cabled) links owe credits back.
                    credits_missing: self
                        .cabled
                        .iter()
                        .filter_map(|&p| self.switch.link(p).ok())
                        .map(|l| l.credits_missing())
                        .sum(),
                    rx_dropped_down: links().map(|l| l.stats().rx_dropped_down).sum(),
                    dropped_packets: self
                        .dropped_packets
                        .iter()
                        .map(|(k, v)| (k.to_string(), *v))
                        .collect(),
                    corrupted_datagrams_sent: self.corrupted.clone(),
                    sbrp: self.switch.sbrp_counters().clone(),
                    // Per cabled port, what a stall diagnosis needs.
                    links: self
                        .cabled
                        .iter()
                        .filter_map(|&p| self.switch.link(p).ok().map(|l| LinkState::of(p, l)))
                        .collect(),
                    event_loop: Default::default(),
                })))
            }
            Request::SetAllPorts { up } => {
                for &port in &self.cabled {
                    if let Err(e) = self.switch.set_port_admin(port, up) {
                        return Response::error(format!("{}: {e}", self.name));
                    }
                }
                tracing::info!(up, "every port set by the controller");
                Response::ok()
            }
            Request::WithholdCredits { port, on } if self.cabled.contains(&port) => {
                match self.switch.set_credits_withheld(port, on) {
                    Ok(()) => {
                        tracing::warn!(port, on, "fault injection: credits withheld");
                        Response::ok()
                    }
                    Err(e) => Response::error(format!("{}: {e}", self.name)),
                }
            }
            Request::WithholdCredits { port, .. } => {
                Response::error(format!("{}: port {port} is not cabled", self.name))
            }
            Request::Corrupt { port, count } => match self.corrupt_left.get_mut(port as usize) {
                Some(left) if self.cabled.contains(&port) => {
                    *left = left.saturating_add(count);
                    tracing::info!(port, count, "corrupting the next datagrams");
                    Response::ok()
                }
                _ => Response::error(format!("{}: port {port} is not cabled", self.name)),
            },
            Request::StartTraffic { .. } | Request::StopTraffic | Request::SetInjection { .. } => {
                Response::error(format!("{}: a switch generates no traffic", self.name))
            }
            Request::Shutdown => Response::ok(),
        }
    }

    fn after_io(&mut self, now: u64) {
        while let Some((mechanism, e)) = self.switch.take_mechanism_warning() {
            tracing::warn!(%mechanism, "{e}");
        }
        while let Some(ev) = self.switch.poll_event() {
            match ev {
                SwitchEvent::PortDown { port, admin } => {
                    if self.metrics {
                        counter!("flitnet_port_down_events_total", "switch" => self.name.clone(), "port" => port.to_string())
                        .increment(1);
                    }
                    let persist = self
                        .switch
                        .link(port)
                        .is_ok_and(|l| l.link_errors_persist());
                    let reason = if admin {
                        "disabled by the controller".into()
                    } else if persist {
                        // Not a transient: the controller routes around it.
                        let _ = self.events.down_reason(port);
                        "persistent link errors (down longer than dead_after)".into()
                    } else {
                        self.events.down_reason(port)
                    };
                    let last_heard_ns = self.switch.link(port).map_or(0, |l| l.last_heard_ns());
                    self.events.send(EventKind::PortDown {
                        port,
                        reason,
                        last_heard_ns,
                    })
                }
                SwitchEvent::LinkError {
                    port,
                    cause,
                    by_peer,
                } => {
                    self.events.link_error(port, cause.name(), by_peer);
                    self.events.send(EventKind::LinkError {
                        port,
                        cause: cause.name().into(),
                        by_peer,
                        retrain_ns: self.switch.config().link.retrain_ns,
                    })
                }
                SwitchEvent::PortUp { port } | SwitchEvent::PeerRestarted { port } => {
                    self.events.send(EventKind::PortUp { port })
                }
                SwitchEvent::Dropped {
                    port,
                    vc,
                    reason,
                    msg,
                } => {
                    *self.dropped_packets.entry(reason.name()).or_default() += 1;
                    tracing::debug!(port, vc, reason = reason.name(), msg, "packet dropped");
                }
            }
        }
        let _ = now;
    }

    fn publish_metrics(&mut self, now: u64) {
        if !self.metrics {
            return;
        }
        let sw = self.name.clone();
        let c = self.switch.counters_at(now);
        for (p, pc) in c.ports.iter().enumerate() {
            if !self.cabled.contains(&(p as PortNo)) {
                continue;
            }
            let port = p.to_string();
            for (v, vc) in pc.vcs.iter().enumerate() {
                let labels = [
                    ("switch", sw.clone()),
                    ("port", port.clone()),
                    ("vc", v.to_string()),
                ];
                counter!("flitnet_port_tx_flits_total", &labels).absolute(vc.tx_flits);
                counter!("flitnet_port_rx_flits_total", &labels).absolute(vc.rx_flits);
                flitnet_runtime::telemetry::set_float_counter(
                    "flitnet_port_credit_stall_seconds_total",
                    "Time with flits waiting and no credit (cumulative).",
                    &[("switch", &sw), ("port", &port), ("vc", &v.to_string())],
                    vc.credit_stall_ns as f64 / 1e9,
                );
                gauge!("flitnet_port_buffer_occupancy_flits", &labels).set(vc.occupancy as f64);
            }
            let labels = [("switch", sw.clone()), ("port", port.clone())];
            counter!("flitnet_port_tx_bytes_total", &labels).absolute(pc.tx_bytes);
            counter!("flitnet_port_rx_bytes_total", &labels).absolute(pc.rx_bytes);
            counter!("flitnet_port_tx_datagrams_total", &labels).absolute(pc.tx_datagrams);
            counter!("flitnet_port_rx_datagrams_total", &labels).absolute(pc.rx_datagrams);
            let up = self
                .switch
                .link(p as PortNo)
                .map(|l| l.is_up())
                .unwrap_or(false);
            gauge!("flitnet_port_up", &labels).set(if up { 1.0 } else { 0.0 });
            for (kind, v) in [
                ("crc", pc.crc_errors),
                ("seq-gap", pc.seq_gaps),
                ("malformed", pc.bad_datagrams),
            ] {
                counter!("flitnet_link_errors_total", "switch" => sw.clone(), "port" => port.clone(), "kind" => kind).absolute(v);
            }
            for (origin, v) in [("local", pc.link_errors), ("peer", pc.peer_link_resets)] {
                counter!("flitnet_port_link_retrains_total", "switch" => sw.clone(), "port" => port.clone(), "origin" => origin).absolute(v);
            }
        }
        for r in flitnet_core::switch::DropReason::ALL {
            // Bad datagrams are counted as datagrams, not flits: a family
            // of their own, so that one family has one unit.
            let family = match r {
                flitnet_core::switch::DropReason::BadDatagram => "flitnet_dropped_datagrams_total",
                _ => "flitnet_drops_total",
            };
            counter!(family, "switch" => sw.clone(), "reason" => r.name()).absolute(c.drops.get(r));
        }
        for m in flitnet_core::mechanism::switch_metrics() {
            counter!(m.name, "switch" => sw.clone()).absolute((m.value)(&c));
        }
        gauge!("flitnet_emulation_lag_seconds", "switch" => sw).set(self.lag_ns as f64 / 1e9);
    }
}

/// HELP lines of the exposition (docs/metrics.md, "switchd"); Prometheus
/// lints an exposition without them.
fn describe_metrics() {
    for (name, help) in [
        ("flitnet_port_tx_flits_total", "Flits sent on the port."),
        ("flitnet_port_rx_flits_total", "Flits received on the port."),
        (
            "flitnet_port_tx_bytes_total",
            "Datagram bytes sent on the port.",
        ),
        (
            "flitnet_port_rx_bytes_total",
            "Datagram bytes received on the port.",
        ),
        (
            "flitnet_port_tx_datagrams_total",
            "Datagrams sent on the port.",
        ),
        (
            "flitnet_port_rx_datagrams_total",
            "Datagrams received on the port.",
        ),
        (
            "flitnet_port_down_events_total",
            "Times the link went down.",
        ),
        (
            "flitnet_link_errors_total",
            "Link errors by kind (crc, seq-gap, malformed).",
        ),
        (
            "flitnet_port_link_retrains_total",
            "Link error recoveries the port went through (origin local: it detected the error; peer: the peer sent a link reset).",
        ),
        ("flitnet_drops_total", "Flits dropped, by reason."),
        (
            "flitnet_dropped_datagrams_total",
            "Datagrams dropped whole, by reason (bad-datagram: undecodable).",
        ),
    ] {
        describe_counter!(name, help);
    }
    for m in flitnet_core::mechanism::switch_metrics() {
        describe_counter!(m.name, m.help);
    }
    for (name, help) in [
        (
            "flitnet_port_buffer_occupancy_flits",
            "Flits in the input buffer.",
        ),
        (
            "flitnet_port_up",
            "1 if the link is up (admin up and peer alive).",
        ),
        (
            "flitnet_emulation_lag_seconds",
            "How late the event loop ran its last timer.",
        ),
    ] {
        describe_gauge!(name, help);
    }
    flitnet_runtime::event_loop::describe_fidelity_metrics();
}

fn main() -> Result<()> {
    let args = Args::parse();
    let d = daemon::start(&args.config)?;
    describe_metrics();
    let Role::Switch { radix, id } = d.config.role else {
        anyhow::bail!(
            "{}: this configuration is for a host; start hostd with it",
            args.config.display()
        );
    };
    let mut switch = Switch::with_epoch(
        d.config
            .fabric
            .switch_config(radix, &flitnet_runtime::event_loop::LINK_DRIVER),
        flitnet_runtime::epoch(),
    )?;
    // SBRP's switch half: orphan absorption, NFTs, RRQs (docs/sbrp.md).
    switch.set_recovery(d.config.fabric.recovery);
    // Deadlock recovery by a head-of-queue lifetime (docs/sbrp.md).
    let lifetime = match args.head_of_queue_lifetime {
        Some(Lifetime(l)) => l,
        None => d.config.fabric.head_of_queue_lifetime_ns,
    };
    switch.set_head_of_queue_lifetime(lifetime);
    if let Some(l) = lifetime {
        tracing::info!(lifetime_ns = l, "head-of-queue lifetime on");
    }
    let mut node = SwitchNode {
        name: d.config.name.clone(),
        id,
        switch,
        events: EventSender::new(
            d.config.name.clone(),
            d.config.token.clone(),
            d.config.events_addr,
        ),
        lag_ns: 0,
        cabled: d.config.ports.iter().map(|p| p.port).collect(),
        corrupt_left: vec![0; radix],
        corrupted: vec![0; radix],
        dropped_packets: Default::default(),
        metrics: d.config.metrics_addr.is_some(),
    };
    let mut transport = d.transport;
    run(&mut node, &mut transport, d.inbox)
}
