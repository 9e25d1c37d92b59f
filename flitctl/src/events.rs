//! The controller's event log: faults it injects, repairs, route
//! installations, and the detections daemons push to it over UDP. Every
//! record is timestamped with CLOCK_MONOTONIC (shared with the daemons) and
//! optionally written as a JSON line, so detection and recovery times can be
//! computed afterwards.

use anyhow::{Context, Result};
use flitnet_core::control::DaemonEvent;
use flitnet_runtime::clock::now_ns;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One timestamped event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// When the event happened (CLOCK_MONOTONIC ns): for daemon events, the
    /// daemon's own timestamp.
    pub time_ns: u64,
    /// `controller` or the daemon's node name.
    pub source: String,
    pub event: serde_json::Value,
}

#[derive(Default)]
struct Shared {
    records: Mutex<Vec<Record>>,
    changed: Condvar,
    sink: Mutex<Option<std::fs::File>>,
}

#[derive(Clone)]
pub struct EventLog {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl EventLog {
    /// Listens for daemon events on `bind` (port 0 picks one) and, if given,
    /// appends every record to `jsonl` as a JSON line.
    pub fn start(bind: SocketAddr, jsonl: Option<&Path>) -> Result<EventLog> {
        let socket =
            UdpSocket::bind(bind).with_context(|| format!("binding event socket {bind}"))?;
        let addr = socket.local_addr()?;
        let sink = match jsonl {
            Some(p) => Some(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            ),
            None => None,
        };
        let shared = Arc::new(Shared {
            sink: Mutex::new(sink),
            ..Default::default()
        });
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("events".into())
            .spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while let Ok((n, from)) = socket.recv_from(&mut buf) {
                    match serde_json::from_slice::<DaemonEvent>(&buf[..n]) {
                        Ok(ev) => {
                            let record = Record {
                                time_ns: ev.time_ns,
                                source: ev.node.clone(),
                                event: serde_json::to_value(&ev.kind).unwrap_or_default(),
                            };
                            push(&thread_shared, record);
                        }
                        Err(e) => tracing::warn!(%from, error = %e, "malformed daemon event"),
                    }
                }
            })?;
        Ok(EventLog { shared, addr })
    }

    /// The address daemons send events to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Records a controller event now.
    pub fn record(&self, event: serde_json::Value) -> Record {
        self.record_at(now_ns(), event)
    }

    /// Records a controller event that happened at `time_ns` (e.g. a fault
    /// stamped when its injection started).
    pub fn record_at(&self, time_ns: u64, event: serde_json::Value) -> Record {
        let record = Record {
            time_ns,
            source: "controller".into(),
            event,
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
    use flitnet_core::control::EventKind;

    #[test]
    fn daemon_events_are_collected_and_written() {
        let dir = std::env::temp_dir().join(format!("flitnet-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.jsonl");
        let log = EventLog::start("127.0.0.1:0".parse().unwrap(), Some(&path)).unwrap();
        log.record(serde_json::json!({"fault": "link-down", "link": 3}));
        let ev = DaemonEvent {
            node: "s0-0".into(),
            time_ns: 42,
            kind: EventKind::PortDown {
                port: 4,
                reason: "keepalive timeout".into(),
            },
        };
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(&serde_json::to_vec(&ev).unwrap(), log.addr())
            .unwrap();
        s.send_to(b"garbage", log.addr()).unwrap();
        let got = log
            .wait_for(Duration::from_secs(2), |r| r.source == "s0-0")
            .expect("event arrives");
        assert_eq!(got.time_ns, 42);
        assert_eq!(got.event["event"], "port-down");
        assert_eq!(got.event["port"], 4);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
