//! The controller's event log: faults it injects, repairs, route
//! installations, and the detections daemons push to it over UDP. Every
//! record is timestamped with CLOCK_MONOTONIC (shared with the daemons) and
//! optionally written as a JSON line, so detection and recovery times can be
//! computed afterwards.

use anyhow::{Context, Result};
use flitnet_core::control::{open_event, EventKind};
use flitnet_core::topology::{LinkId, PortNo};
use flitnet_runtime::clock::now_ns;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The `source` of the controller's own records.
pub const CONTROLLER: &str = "controller";

/// One timestamped event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// When the event happened (CLOCK_MONOTONIC ns): for daemon events, the
    /// daemon's own timestamp.
    pub time_ns: u64,
    /// `controller` or the daemon's node name.
    pub source: String,
    pub event: Event,
}

impl Record {
    /// The port a daemon reported down (not after a link error: the link
    /// retrains on its own), if this is such a record.
    pub fn port_down(&self) -> Option<PortNo> {
        match &self.event {
            Event::Daemon(EventKind::PortDown { port, reason, .. })
                if !reason.starts_with(LINK_ERROR_REASON) =>
            {
                Some(*port)
            }
            _ => None,
        }
    }

    /// The port a daemon reported down for any reason, link errors included.
    pub fn port_down_any(&self) -> Option<PortNo> {
        match &self.event {
            Event::Daemon(EventKind::PortDown { port, .. }) => Some(*port),
            _ => None,
        }
    }

    /// When the daemon last heard the peer on a port it reports down.
    pub fn last_heard_ns(&self) -> Option<u64> {
        match &self.event {
            Event::Daemon(EventKind::PortDown { last_heard_ns, .. }) if *last_heard_ns > 0 => {
                Some(*last_heard_ns)
            }
            _ => None,
        }
    }

    /// The port a daemon reported up again.
    pub fn port_up(&self) -> Option<PortNo> {
        match &self.event {
            Event::Daemon(EventKind::PortUp { port }) => Some(*port),
            _ => None,
        }
    }

    pub fn is_controller(&self) -> bool {
        self.source == CONTROLLER
    }
}

/// What a `port-down` reason starts with when a link error took the port
/// down (runtime/src/events.rs `down_reason`).
pub const LINK_ERROR_REASON: &str = "link error";

/// A record's event: pushed by a daemon, or the controller's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Event {
    Daemon(EventKind),
    Controller(ControllerEvent),
}

impl From<ControllerEvent> for Event {
    fn from(e: ControllerEvent) -> Self {
        Event::Controller(e)
    }
}

/// What the controller did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum ControllerEvent {
    /// A fault injected (or, for `switch-lost`, found).
    Fault {
        kind: String,
        element: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
    },
    /// A repair.
    Repair {
        kind: String,
        element: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
    },
    TrafficStarted {
        pattern: String,
    },
    /// New routes are in place: tables on every live switch, or (seed 004)
    /// intermediate-node routes on every host.
    RoutesInstalled(RoutesInstalled),
    RerouteFailed {
        failed_links: Vec<LinkId>,
        error: String,
    },
    ActionFailed {
        error: String,
    },
    /// A mechanism's bring-up configuration installed in the nodes
    /// (`config`: what its controller half says of it).
    MechanismConfigured {
        mechanism: String,
        config: serde_json::Value,
    },
    /// SIGINT or SIGTERM: traffic stopped early, reports collected.
    Interrupted {
        signal: String,
    },
}

impl ControllerEvent {
    pub fn fault(kind: &str, element: impl Into<String>) -> Self {
        ControllerEvent::Fault {
            kind: kind.into(),
            element: element.into(),
            origin: None,
        }
    }

    pub fn repair(kind: &str, element: impl Into<String>) -> Self {
        ControllerEvent::Repair {
            kind: kind.into(),
            element: element.into(),
            origin: None,
        }
    }

    pub fn traffic_started(pattern: &str) -> Self {
        ControllerEvent::TrafficStarted {
            pattern: pattern.into(),
        }
    }

    /// The run's first tables, from `engine`.
    pub fn first_routes(engine: &str) -> Self {
        ControllerEvent::RoutesInstalled(RoutesInstalled {
            engine: engine.into(),
            ..RoutesInstalled::default()
        })
    }

    /// Tables from `engine` installed, avoiding `failed_links`.
    pub fn routes_installed(engine: &str, failed_links: Vec<LinkId>) -> Self {
        ControllerEvent::RoutesInstalled(RoutesInstalled {
            engine: engine.into(),
            failed_links: Some(failed_links),
            ..RoutesInstalled::default()
        })
    }
}

/// A `routes-installed` record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoutesInstalled {
    pub engine: String,
    /// The links the new routes avoid; absent for a run's first tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_links: Option<Vec<LinkId>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<f64>,
    /// `live` or `quiesced` (docs/chaos.md, "Quiesced reconfiguration").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconfiguration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiesce: Option<Quiesced>,
    /// Seed 004: what the hosts planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faulty_links: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed_pairs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_tolerated_pairs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disconnected_pairs: Option<u64>,
}

#[derive(Default)]
struct Shared {
    records: Mutex<Vec<Record>>,
    /// Datagrams refused: not an event, or not tagged with the token.
    refused: AtomicU64,
    changed: Condvar,
    sink: Mutex<Option<std::fs::File>>,
}

#[derive(Clone)]
pub struct EventLog {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl EventLog {
    /// Listens for daemon events on `bind` (port 0 picks one), believing
    /// only those tagged with `token`, and, if given, appends every record
    /// to `jsonl` as a JSON line.
    pub fn start(bind: SocketAddr, jsonl: Option<&Path>, token: &str) -> Result<EventLog> {
        let socket =
            UdpSocket::bind(bind).with_context(|| format!("binding event socket {bind}"))?;
        let addr = socket.local_addr()?;
        let sink = match jsonl {
            Some(p) => Some(crate::rundir::create_file(p)?),
            None => None,
        };
        let shared = Arc::new(Shared {
            sink: Mutex::new(sink),
            ..Default::default()
        });
        let thread_shared = shared.clone();
        let token = token.to_string();
        std::thread::Builder::new()
            .name("events".into())
            .spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while let Ok((n, from)) = socket.recv_from(&mut buf) {
                    match open_event(&buf[..n], &token) {
                        Ok(ev) => {
                            let record = Record {
                                time_ns: ev.time_ns,
                                source: ev.node,
                                event: Event::Daemon(ev.kind),
                            };
                            push(&thread_shared, record);
                        }
                        Err(e) => {
                            // Counted, and logged at powers of two: a flood
                            // of forged datagrams must not flood the log.
                            let n = thread_shared.refused.fetch_add(1, Ordering::Relaxed) + 1;
                            if n.is_power_of_two() {
                                tracing::warn!(%from, error = %e, refused = n, "daemon event refused");
                            }
                        }
                    }
                }
            })?;
        Ok(EventLog { shared, addr })
    }

    /// The address daemons send events to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Datagrams refused so far (not events, or not tagged with the token).
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// Records a controller event now.
    pub fn record(&self, event: ControllerEvent) -> Record {
        self.record_at(now_ns(), event)
    }

    /// Records a controller event that happened at `time_ns` (e.g. a fault
    /// stamped when its injection started).
    pub fn record_at(&self, time_ns: u64, event: ControllerEvent) -> Record {
        let record = Record {
            time_ns,
            source: CONTROLLER.into(),
            event: event.into(),
        };
        push(&self.shared, record.clone());
        record
    }

    pub fn snapshot(&self) -> Vec<Record> {
        self.shared
            .records
            .lock()
            .expect("event log poisoned")
            .clone()
    }

    /// Records from index `from` on (in arrival order), waiting up to
    /// `timeout` for at least one; empty if none came. The caller keeps
    /// `from + returned.len()` as its cursor.
    pub fn wait_since(&self, from: usize, timeout: Duration) -> Vec<Record> {
        let deadline = Instant::now() + timeout;
        let mut records = self.shared.records.lock().expect("event log poisoned");
        loop {
            if records.len() > from {
                return records[from..].to_vec();
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Vec::new();
            };
            records = self
                .shared
                .changed
                .wait_timeout(records, left)
                .expect("event log poisoned")
                .0;
        }
    }

    /// Waits until a record satisfies `pred`, up to `timeout`.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&Record) -> bool) -> Option<Record> {
        let deadline = Instant::now() + timeout;
        let mut records = self.shared.records.lock().expect("event log poisoned");
        loop {
            if let Some(r) = records.iter().find(|r| pred(r)) {
                return Some(r.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            records = self
                .shared
                .changed
                .wait_timeout(records, left)
                .expect("event log poisoned")
                .0;
        }
    }
}

fn push(shared: &Shared, record: Record) {
    if let Some(f) = shared.sink.lock().expect("event sink poisoned").as_mut() {
        if let Ok(line) = serde_json::to_string(&record) {
            let _ = writeln!(f, "{line}");
        }
    }
    shared
        .records
        .lock()
        .expect("event log poisoned")
        .push(record);
    shared.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::control::{seal_event, DaemonEvent};

    #[test]
    fn daemon_events_are_collected_and_written() {
        let dir = std::env::temp_dir().join(format!("flitnet-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.jsonl");
        let log = EventLog::start("127.0.0.1:0".parse().unwrap(), Some(&path), "tok").unwrap();
        log.record(ControllerEvent::Fault {
            kind: "link-down".into(),
            element: "s0-0:4".into(),
            origin: None,
        });
        let ev = DaemonEvent {
            node: "s0-0".into(),
            time_ns: 42,
            kind: EventKind::PortDown {
                port: 4,
                reason: "keepalive timeout".into(),
                last_heard_ns: 40,
            },
        };
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        // A forged event: right shape, no tag. Then one tagged with another
        // token, then garbage, then the real one.
        let forged = DaemonEvent {
            time_ns: 1,
            ..ev.clone()
        };
        s.send_to(&serde_json::to_vec(&forged).unwrap(), log.addr())
            .unwrap();
        s.send_to(&seal_event(&forged, "guess"), log.addr())
            .unwrap();
        s.send_to(b"garbage", log.addr()).unwrap();
        s.send_to(&seal_event(&ev, "tok"), log.addr()).unwrap();
        let got = log
            .wait_for(Duration::from_secs(2), |r| r.source == "s0-0")
            .expect("event arrives");
        assert_eq!(got.time_ns, 42);
        assert_eq!(got.port_down(), Some(4));
        assert_eq!(log.refused(), 3);
        assert_eq!(log.snapshot().len(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        let back: Vec<Record> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, log.snapshot());
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// What a quiesced table swap found (docs/chaos.md, "Quiesced reconfiguration").
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
