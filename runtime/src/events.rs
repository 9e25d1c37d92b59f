//! Pushing what a daemon notices (ports going down or up) to the controller,
//! one JSON datagram per event, so the controller can measure detection
//! times and react without polling.

use crate::clock::now_ns;
use flitnet_core::control::{seal_event, DaemonEvent, EventKind};
use flitnet_core::link::LinkEvent;
use flitnet_core::topology::PortNo;
use std::net::{SocketAddr, UdpSocket};

pub struct EventSender {
    node: String,
    /// The fabric token: every event is tagged with it.
    token: String,
    target: Option<(UdpSocket, SocketAddr)>,
    /// The last link error reported and not yet followed by a port-down.
    last_link_error: Option<(PortNo, String)>,
}

impl EventSender {
    /// Events go to `target`, tagged with `token`; with None they are only
    /// logged.
    pub fn new(node: String, token: String, target: Option<SocketAddr>) -> Self {
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
        EventSender {
            node,
            token,
            target,
            last_link_error: None,
        }
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
            // Best effort: the controller may be gone.
            let _ = socket.send_to(&seal_event(&ev, &self.token), addr);
        }
    }

    /// Translates a link-layer event of `port`; `retrain_ns` is the link's
    /// retrain delay (for link errors). A `PeerDown` right after a link
    /// error says so in its reason.
    pub fn link_event(
        &mut self,
        _now: u64,
        port: PortNo,
        event: &LinkEvent,
        retrain_ns: u64,
        last_heard_ns: u64,
    ) {
        let kind = match event {
            LinkEvent::PeerDown => EventKind::PortDown {
                port,
                reason: self.down_reason(port),
                last_heard_ns,
            },
            LinkEvent::PeerUp => EventKind::PortUp { port },
            LinkEvent::PeerRestarted { .. } => EventKind::PortUp { port },
            LinkEvent::LinkError { cause, by_peer } => {
                self.link_error(port, cause.name(), *by_peer);
                EventKind::LinkError {
                    port,
                    cause: cause.name().into(),
                    by_peer: *by_peer,
                    retrain_ns,
                }
            }
        };
        self.send(kind);
    }

    /// Notes a link error on `port`: the next `down_reason` names it.
    pub fn link_error(&mut self, port: PortNo, cause: &str, by_peer: bool) {
        let who = if by_peer { "reset by peer" } else { "detected" };
        self.last_link_error = Some((port, format!("link error ({cause}, {who})")));
    }

    /// Why a port went down (not administratively): the link error just
    /// reported on it, else the peer's silence.
    pub fn down_reason(&mut self, port: PortNo) -> String {
        match self.last_link_error.take() {
            Some((p, reason)) if p == port => reason,
            _ => "keepalive timeout".into(),
        }
    }
}

/// A link epoch for this process: differs across restarts of a daemon so
/// its peers notice the restart and resynchronise credits.
pub fn epoch() -> u16 {
    let t = now_ns();
    ((t >> 20) as u16) ^ (std::process::id() as u16).rotate_left(7) | 1
}
