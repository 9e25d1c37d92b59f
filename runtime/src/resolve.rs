//! Peers named by DNS name (`"s1-0:7000"`) instead of an address, for
//! fabrics whose addresses are not known in advance: a swarm assigns task
//! addresses itself, and each service's name resolves to its task's address
//! (`endpoint_mode: dnsrr`). Names are resolved once, when the daemon
//! starts, retrying until the name exists (tasks register in DNS as they
//! start, in any order).
//!
//! The daemons are static glibc binaries in a FROM-scratch image, where the
//! system resolver has no NSS modules to load; after the system resolver,
//! a minimal DNS client asks the nameservers of /etc/resolv.conf (Docker's
//! embedded 127.0.0.11) for an A record.

use anyhow::{Context, Result};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

/// `host:port` to an address: a literal address, else the system
/// resolver, else a DNS query of our own.
pub fn resolve(text: &str) -> io::Result<SocketAddr> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = text.rsplit_once(':').ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{text:?} is not HOST:PORT"),
        )
    })?;
    let port: u16 = port.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{text:?}: {port:?} is not a port number"),
        )
    })?;
    if let Ok(mut addrs) = (host, port).to_socket_addrs() {
        if let Some(a) = addrs.find(SocketAddr::is_ipv4) {
            return Ok(a);
        }
    }
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{host}: no nameserver in /etc/resolv.conf"),
    );
    for ns in nameservers(&resolv) {
        match query_a(ns, host) {
            Ok(ip) => return Ok(SocketAddr::new(IpAddr::V4(ip), port)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Resolves `text`, retrying every 200 ms until `timeout`.
pub fn resolve_with_retry(text: &str, timeout: Duration) -> Result<SocketAddr> {
    let deadline = Instant::now() + timeout;
    loop {
        match resolve(text) {
            Ok(a) => return Ok(a),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                return Err(e).with_context(|| format!("peer address {text:?}"))
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(e).with_context(|| format!("resolving {text:?} for {timeout:?}"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Replaces every address given as a name in a daemon configuration (the
/// JSON of `DaemonConfig`, before it is parsed) by the address it resolves
/// to: the peers of `ports` and `events_addr`. Listen addresses must be
/// literal (`0.0.0.0:7000` when the task's address is not known).
pub fn resolve_config_names(config: &mut serde_json::Value, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    if let Some(ports) = config.get_mut("ports").and_then(|p| p.as_array_mut()) {
        for p in ports {
            if let Some(peer) = p.get_mut("peer") {
                resolve_field(peer, deadline)?;
            }
        }
    }
    if let Some(events) = config.get_mut("events_addr") {
        resolve_field(events, deadline)?;
    }
    Ok(())
}

/// Replaces a JSON string holding `name:port` by the address it resolves to.
fn resolve_field(field: &mut serde_json::Value, deadline: Instant) -> Result<()> {
    let Some(text) = field.as_str() else {
        return Ok(());
    };
    if text.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    let addr = resolve_with_retry(text, deadline.saturating_duration_since(Instant::now()))?;
    tracing::info!(name = text, %addr, "peer name resolved");
    *field = serde_json::Value::String(addr.to_string());
    Ok(())
}

/// The `nameserver` lines of resolv.conf (IPv4 only).
fn nameservers(resolv_conf: &str) -> Vec<Ipv4Addr> {
    resolv_conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().parse().ok())
        .collect()
}

/// A recursive query for the A record of `host`.
fn dns_query(id: u16, host: &str) -> io::Result<Vec<u8>> {
    let mut q = Vec::with_capacity(32 + host.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD; 1 question
    for label in host.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host:?} is not a valid DNS name"),
            ));
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]); // root, type A, class IN
    Ok(q)
}

/// Skips a (possibly compressed) name at `at`; returns the offset after it.
fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *msg.get(at)? as usize;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l => at += 1 + l,
        }
    }
}

/// The first A record of an answer to query `id`.
fn parse_a(msg: &[u8], id: u16) -> Option<Ipv4Addr> {
    if msg.len() < 12 || msg[0..2] != id.to_be_bytes() || msg[3] & 0x0f != 0 {
        return None;
    }
    let questions = u16::from_be_bytes([msg[4], msg[5]]);
    let answers = u16::from_be_bytes([msg[6], msg[7]]);
    let mut at = 12;
    for _ in 0..questions {
        at = skip_name(msg, at)? + 4;
    }
    for _ in 0..answers {
        at = skip_name(msg, at)?;
        let head = msg.get(at..at + 10)?;
        let kind = u16::from_be_bytes([head[0], head[1]]);
        let len = u16::from_be_bytes([head[8], head[9]]) as usize;
        let data = msg.get(at + 10..at + 10 + len)?;
        if kind == 1 && len == 4 {
            return Some(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
        }
        at += 10 + len;
    }
    None
}

fn query_a(ns: Ipv4Addr, host: &str) -> io::Result<Ipv4Addr> {
    let id = (std::process::id() as u16) ^ (Instant::now().elapsed().subsec_nanos() as u16);
    let query = dns_query(id, host)?;
    let socket = UdpSocket::bind("0.0.0.0:0")?;
    socket.set_read_timeout(Some(Duration::from_secs(1)))?;
    socket.send_to(&query, (ns, 53))?;
    let mut buf = [0u8; 1500];
    let (n, _) = socket.recv_from(&mut buf)?;
    parse_a(&buf[..n], id).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{host}: no A record from {ns}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_localhost_resolve_and_nonsense_is_refused() {
        assert_eq!(
            resolve("10.1.2.3:7000").unwrap(),
            "10.1.2.3:7000".parse().unwrap()
        );
        assert_eq!(resolve("localhost:7001").unwrap().port(), 7001);
        assert_eq!(
            resolve("s1-0").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let err = resolve_with_retry("host:notaport", Duration::from_secs(5)).unwrap_err();
        assert!(format!("{err:#}").contains("not a port number"), "{err:#}");
    }

    #[test]
    fn dns_answers_are_parsed_with_compressed_names() {
        let q = dns_query(0x1234, "s1-0").unwrap();
        assert_eq!(&q[12..18], b"\x04s1-0\x00");
        // The answer: the question echoed, one A record named by a pointer.
        let mut a = q.clone();
        a[2] = 0x81;
        a[3] = 0x80;
        a[7] = 1;
        a.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 1, 7]);
        assert_eq!(parse_a(&a, 0x1234), Some(Ipv4Addr::new(10, 0, 1, 7)));
        assert_eq!(parse_a(&a, 0x9999), None, "another query's answer");
        let mut nx = a.clone();
        nx[3] = 0x83; // NXDOMAIN
        assert_eq!(parse_a(&nx, 0x1234), None);
        assert_eq!(parse_a(&a[..a.len() - 2], 0x1234), None, "truncated");
        assert!(dns_query(1, "a..b").is_err());
    }

    #[test]
    fn configuration_names_are_replaced_by_addresses() {
        let mut cfg = serde_json::json!({
            "ports": [{"port": 0, "peer": "localhost:7000"}, {"port": 1, "peer": "10.0.0.9:7000"}],
            "events_addr": "127.0.0.1:7002",
        });
        resolve_config_names(&mut cfg, Duration::from_secs(5)).unwrap();
        let peer: SocketAddr = cfg["ports"][0]["peer"].as_str().unwrap().parse().unwrap();
        assert!(peer.ip().is_loopback());
        assert_eq!(cfg["ports"][1]["peer"], "10.0.0.9:7000");
        assert_eq!(
            nameservers("# x\nnameserver 127.0.0.11\nnameserver ::1\noptions ndots:0\n"),
            [Ipv4Addr::new(127, 0, 0, 11)]
        );
    }
}
