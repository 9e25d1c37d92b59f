//! Pushing what a daemon notices (ports going down or up) to the controller,
//! one JSON datagram per event, so the controller can measure detection
//! times and react without polling.

use crate::clock::now_ns;
use flitnet_core::control::{DaemonEvent, EventKind};
use flitnet_core::link::LinkEvent;
use flitnet_core::topology::PortNo;
use std::net::{SocketAddr, UdpSocket};

pub struct EventSender {
    node: String,
    target: Option<(UdpSocket, SocketAddr)>,
}

impl EventSender {
    /// Events go to `target`; with None they are only logged.
    pub fn new(node: String, target: Option<SocketAddr>) -> Self {
        let target = target.and_then(|addr| {
            let bind: SocketAddr = if addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            }
            .parse()
            .ok()?;
            UdpSocket::bind(bind).ok().map(|s| (s, addr))
        });
        EventSender { node, target }
    }

    /// Logs and pushes an event.
    pub fn send(&self, kind: EventKind) {
        tracing::info!(event = ?kind, "{}", self.node);
        if let Some((socket, addr)) = &self.target {
            let ev = DaemonEvent {
                node: self.node.clone(),
                time_ns: now_ns(),
                kind,
            };
            if let Ok(bytes) = serde_json::to_vec(&ev) {
                // Best effort: the controller may be gone.
                let _ = socket.send_to(&bytes, addr);
            }
        }
    }

    /// Translates a link-layer event of `port`.
    pub fn link_event(&self, _now: u64, port: PortNo, event: &LinkEvent) {
        let kind = match event {
            LinkEvent::PeerDown => EventKind::PortDown {
                port,
                reason: "keepalive timeout".into(),
            },
            LinkEvent::PeerUp => EventKind::PortUp { port },
            LinkEvent::PeerRestarted { .. } => EventKind::PortUp { port },
        };
        self.send(kind);
    }
}

/// A link epoch for this process: differs across restarts of a daemon so
/// its peers notice the restart and resynchronise credits.
pub fn epoch() -> u16 {
    let t = now_ns();
    ((t >> 20) as u16) ^ (std::process::id() as u16).rotate_left(7) | 1
}
