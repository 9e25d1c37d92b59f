//! What every daemon does before its state machine starts: read and check
//! the configuration, start logging and metrics, bind the sockets.

use crate::control::{self, ControlInbox};
use crate::telemetry;
use crate::transport::ethernet::EthernetTransport;
use crate::transport::shm::ShmTransport;
use crate::transport::{Transport, UdpTransport};
use anyhow::{Context, Result};
use flitnet_core::control::{DaemonConfig, DataTransport};
use std::path::Path;

/// A daemon's configuration and its bound sockets.
pub struct Daemon {
    pub config: DaemonConfig,
    pub transport: Transport,
    pub inbox: ControlInbox,
}

/// How long a daemon waits for its peers' names to exist in DNS.
const PEER_RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Reads and validates `path` (the JSON file the controller writes).
pub fn load_config(path: &Path) -> Result<DaemonConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: bad configuration", path.display()))?;
    // Peers may be named `service:port` (swarm): resolved here, once.
    crate::resolve::resolve_config_names(&mut json, PEER_RESOLVE_TIMEOUT)
        .with_context(|| path.display().to_string())?;
    let config: DaemonConfig = serde_json::from_value(json)
        .with_context(|| format!("{}: bad configuration", path.display()))?;
    config
        .validate()
        .with_context(|| path.display().to_string())?;
    Ok(config)
}

/// Logging, metrics exporter, data and control sockets.
pub fn start(path: &Path) -> Result<Daemon> {
    telemetry::init_logging("info");
    let config = load_config(path)?;
    // Before any time is read: the state machines see emulated time.
    crate::clock::set_dilation(config.fabric.time_dilation);
    if let Some(addr) = config.metrics_addr {
        telemetry::init_metrics(addr)?;
    }
    // Data sockets first: the Ethernet transport may step into another
    // network namespace to open them, and every other socket (control,
    // metrics, events) must stay where the controller reaches it.
    let transport = match config.fabric.transport {
        DataTransport::Udp => {
            let mut t = UdpTransport::bind(config.data_addr, &config.ports)?;
            t.set_max_datagram(config.fabric.mtu);
            Transport::Udp(t)
        }
        DataTransport::Ethernet => Transport::Ethernet(
            EthernetTransport::open(&config.ports, config.netns.as_deref(), config.fabric.mtu)
                .with_context(|| {
                    format!(
                        "{}: {}: opening the ethernet ports",
                        path.display(),
                        config.name
                    )
                })?,
        ),
        DataTransport::Shm => {
            let bell = config
                .doorbell
                .as_deref()
                .context("the shm transport needs a doorbell")?;
            let mut t =
                ShmTransport::open(&config.ports, bell, config.fabric.mtu).with_context(|| {
                    format!(
                        "{}: {}: attaching the shared-memory rings",
                        path.display(),
                        config.name
                    )
                })?;
            t.set_input_slack(crate::clock::input_slack_ns(
                config.fabric.bandwidth_flits_per_s,
            ));
            Transport::Shm(t)
        }
    };
    let inbox = control::spawn(config.control_addr, config.token.clone())?;
    match &transport {
        Transport::Udp(_) => {
            tracing::info!(name = %config.name, data = %config.data_addr, control = %inbox.local_addr, "daemon started")
        }
        Transport::Ethernet(t) => {
            tracing::info!(name = %config.name, netns = ?config.netns, interfaces = ?t.interfaces(), control = %inbox.local_addr, "daemon started")
        }
        Transport::Shm(t) => {
            let ring_bytes: usize = t.ring_files().map(|(_, _, b)| b).sum();
            tracing::info!(name = %config.name, doorbell = ?config.doorbell, ring_bytes, control = %inbox.local_addr, "daemon started")
        }
    }
    Ok(Daemon {
        config,
        transport,
        inbox,
    })
}
