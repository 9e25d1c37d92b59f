//! UDP transport: one socket per daemon, the port a datagram came in on is
//! found from the sender's address and, when several cables join the same
//! two daemons, from the sending port in the datagram's header
//! (docs/wire.md, "Port identity").
//!
//! Datagrams move in batches: `recvmmsg(2)` fills up to [`RECV_SLOTS`]
//! preallocated slots per system call and `sendmmsg(2)` sends every
//! datagram the event loop collected in one call, so a busy daemon pays one
//! syscall per batch instead of one per datagram, and nothing is allocated
//! per datagram (docs/performance.md has the numbers).

pub mod ethernet;
pub mod shm;

use anyhow::{Context, Result};
use flitnet_core::control::PortPeer;
use flitnet_core::topology::PortNo;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// Socket buffer size asked for. Bundled datagrams are small and credit
/// flow control bounds what a peer may have in flight, so 1 MiB absorbs a
/// burst from every neighbour at once; it is kernel memory charged only
/// while datagrams are queued, not the daemon's resident set.
const SOCKET_BUFFER_BYTES: usize = 1 << 20;

/// Largest datagram accepted until [`UdpTransport::set_max_datagram`] says
/// otherwise (the fabric's MTU is at most 65 000 bytes).
pub const MAX_DATAGRAM: usize = 65_536;

/// Datagrams read by one `recvmmsg` call.
pub const RECV_SLOTS: usize = 32;

/// Datagrams sent by one `sendmmsg` call at most.
pub const SEND_BATCH: usize = 32;

/// What the transport did and refused (reported with every daemon report).
pub use flitnet_core::control::TransportCounters;

/// The data transport a daemon runs (`FabricParams::transport`).
pub enum Transport {
    Udp(UdpTransport),
    Ethernet(ethernet::EthernetTransport),
    Shm(shm::ShmTransport),
}

impl Transport {
    /// The descriptor the event loop polls for input.
    pub fn raw_fd(&self) -> RawFd {
        match self {
            Transport::Udp(t) => t.raw_fd(),
            Transport::Ethernet(t) => t.raw_fd(),
            Transport::Shm(t) => t.raw_fd(),
        }
    }

    /// Whether the loop must look for input on every round, not only when
    /// its descriptor is readable (shared-memory rings fill without a
    /// wake-up while the loop is awake).
    pub fn polls_always(&self) -> bool {
        matches!(self, Transport::Shm(_))
    }

    /// Before the loop sleeps until the wall instant `until`: true when
    /// input arrived meanwhile (shm: the neighbours are asked to ring the
    /// doorbell from now on, unless the loop wakes soon anyway).
    pub fn prepare_sleep(&mut self, until: u64) -> bool {
        match self {
            Transport::Shm(t) => t.prepare_sleep(until),
            _ => false,
        }
    }

    /// After the loop's sleep; `readable` says the descriptor was.
    pub fn woke(&mut self, readable: bool) {
        if let Transport::Shm(t) = self {
            t.woke(readable)
        }
    }

    pub fn recv_batch(&mut self, max: usize, deliver: impl FnMut(PortNo, &[u8])) -> usize {
        match self {
            Transport::Udp(t) => t.recv_batch(max, deliver),
            Transport::Ethernet(t) => t.recv_batch(max, deliver),
            Transport::Shm(t) => t.recv_batch(max, deliver),
        }
    }

    pub fn send_batch<D: AsRef<[u8]>>(&mut self, ports: &[PortNo], data: &[D]) -> usize {
        match self {
            Transport::Udp(t) => t.send_batch(ports, data),
            Transport::Ethernet(t) => t.send_batch(ports, data),
            Transport::Shm(t) => t.send_batch(ports, data),
        }
    }

    pub fn counters(&self) -> &TransportCounters {
        match self {
            Transport::Udp(t) => &t.counters,
            Transport::Ethernet(t) => &t.counters,
            Transport::Shm(t) => &t.counters,
        }
    }
}

/// A socket address in the form the kernel wants it.
struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawAddr {
    fn new(addr: SocketAddr) -> Self {
        let sa = SockAddr::from(addr);
        // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = sa.len();
        // SAFETY: `sa` holds `len <= size_of::<sockaddr_storage>()` valid bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                sa.as_ptr() as *const u8,
                &mut storage as *mut _ as *mut u8,
                len as usize,
            );
        }
        RawAddr { storage, len }
    }
}

/// Turns a sender address filled in by the kernel back into a `SocketAddr`.
fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The cables to one peer address: (the peer's port, our port). With one
/// cable the datagram is delivered without reading its header; with
/// parallel cables the sending port in the header picks the cable.
type CablesTo = Vec<(Option<PortNo>, PortNo)>;

pub struct UdpTransport {
    socket: UdpSocket,
    port_of: HashMap<SocketAddr, CablesTo>,
    /// Peer address of every port, indexed by port number.
    addr_of: Vec<Option<RawAddr>>,
    /// `RECV_SLOTS` receive slots of `slot_len` bytes, back to back.
    recv_buf: Vec<u8>,
    slot_len: usize,
    recv_names: Vec<libc::sockaddr_storage>,
    recv_iov: Vec<libc::iovec>,
    recv_hdr: Vec<libc::mmsghdr>,
    send_iov: Vec<libc::iovec>,
    send_hdr: Vec<libc::mmsghdr>,
    pub counters: TransportCounters,
}

// SAFETY: the raw pointers in the iovec/mmsghdr scratch arrays are rewritten
// before every system call and never dereferenced outside one.
unsafe impl Send for UdpTransport {}

impl UdpTransport {
    /// Binds `addr` and learns the peer of every cabled port.
    pub fn bind(addr: SocketAddr, peers: &[PortPeer]) -> Result<Self> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .context("creating UDP socket")?;
        // Best effort: the kernel caps these at net.core.[rw]mem_max.
        let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
        socket.set_nonblocking(true)?;
        socket
            .bind(&addr.into())
            .with_context(|| format!("binding data socket {addr}"))?;
        let socket: UdpSocket = socket.into();
        // SAFETY (all three): plain C structs for which all-zero is valid.
        let zero_name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let zero_hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut t = UdpTransport {
            socket,
            port_of: HashMap::new(),
            addr_of: Vec::new(),
            recv_buf: Vec::new(),
            slot_len: 0,
            recv_names: vec![zero_name; RECV_SLOTS],
            recv_iov: vec![zero_iov; RECV_SLOTS],
            recv_hdr: vec![zero_hdr; RECV_SLOTS],
            send_iov: vec![zero_iov; SEND_BATCH],
            send_hdr: vec![zero_hdr; SEND_BATCH],
            counters: TransportCounters::default(),
        };
        t.set_max_datagram(MAX_DATAGRAM);
        for p in peers {
            t.add_peer(p);
        }
        Ok(t)
    }

    /// Cables `peer.port` to `peer.peer` (replacing what it was cabled to);
    /// a port without a peer address is left uncabled.
    pub fn add_peer(&mut self, peer: &PortPeer) {
        let Some(addr) = peer.peer else {
            tracing::warn!(port = peer.port, "port has no peer address: left uncabled");
            return;
        };
        let i = peer.port as usize;
        if let Some(Some(old)) = self.addr_of.get(i) {
            if let Some(old) = socket_addr(&old.storage) {
                if let Some(cables) = self.port_of.get_mut(&old) {
                    cables.retain(|&(_, local)| local != peer.port);
                    if cables.is_empty() {
                        self.port_of.remove(&old);
                    }
                }
            }
        }
        self.port_of
            .entry(addr)
            .or_default()
            .push((peer.peer_port, peer.port));
        if self.addr_of.len() <= i {
            self.addr_of.resize_with(i + 1, || None);
        }
        self.addr_of[i] = Some(RawAddr::new(addr));
    }

    /// Sizes the receive slots for datagrams of at most `bytes` (the
    /// fabric's MTU). Longer datagrams are counted as truncated and dropped.
    /// The slots are zeroed lazily by the allocator, so only the pages that
    /// datagrams actually touch become resident.
    pub fn set_max_datagram(&mut self, bytes: usize) {
        // One spare byte so that a datagram of exactly `bytes` is not
        // mistaken for a truncated longer one.
        self.slot_len = bytes.clamp(1, MAX_DATAGRAM) + 1;
        self.recv_buf = vec![0; self.slot_len * RECV_SLOTS];
    }

    pub fn raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Receives up to `max` queued datagrams, handing each to `deliver` with
    /// the port it arrived on. Datagrams from addresses that are not a
    /// cabled peer are counted and dropped. Returns how many were delivered.
    pub fn recv_batch(&mut self, max: usize, mut deliver: impl FnMut(PortNo, &[u8])) -> usize {
        let mut delivered = 0;
        let mut remaining = max;
        while remaining > 0 {
            let want = remaining.min(RECV_SLOTS);
            for i in 0..want {
                self.recv_iov[i] = libc::iovec {
                    iov_base: self.recv_buf[i * self.slot_len..].as_mut_ptr() as *mut libc::c_void,
                    iov_len: self.slot_len,
                };
                let h = &mut self.recv_hdr[i];
                h.msg_hdr.msg_name = &mut self.recv_names[i] as *mut _ as *mut libc::c_void;
                h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
                h.msg_hdr.msg_iov = &mut self.recv_iov[i];
                h.msg_hdr.msg_iovlen = 1;
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
                h.msg_hdr.msg_flags = 0;
                h.msg_len = 0;
            }
            // SAFETY: `want` headers point at live slots, names and iovecs
            // of this transport, which outlive the call.
            let rc = unsafe {
                libc::recvmmsg(
                    self.socket.as_raw_fd(),
                    self.recv_hdr.as_mut_ptr(),
                    want as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    // ICMP port unreachable from a dead peer surfaces here on Linux.
                    io::ErrorKind::ConnectionRefused => continue,
                    _ => {
                        tracing::warn!(error = %e, "recvmmsg failed");
                        break;
                    }
                }
            }
            let got = rc as usize;
            self.counters.rx_syscalls += 1;
            self.counters.rx_datagrams += got as u64;
            for i in 0..got {
                let h = &self.recv_hdr[i];
                let len = h.msg_len as usize;
                if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len >= self.slot_len {
                    self.counters.truncated += 1;
                    continue;
                }
                let from = socket_addr(&self.recv_names[i]);
                let start = i * self.slot_len;
                let data = &self.recv_buf[start..start + len];
                match from.and_then(|a| cable_of(self.port_of.get(&a)?, data)) {
                    Some(port) => {
                        deliver(port, data);
                        delivered += 1;
                    }
                    None => {
                        self.counters.unknown_peer += 1;
                        if self.counters.unknown_peer.is_power_of_two() {
                            tracing::warn!(
                                ?from,
                                count = self.counters.unknown_peer,
                                "dropped datagram from an unknown peer"
                            );
                        }
                    }
                }
            }
            remaining -= got;
            if got < want {
                break;
            }
        }
        delivered
    }

    /// Sends one datagram out of `port`. Returns false if the socket buffer
    /// is full (the caller keeps the datagram and waits for writability).
    pub fn send(&mut self, port: PortNo, data: &[u8]) -> bool {
        self.send_batch(&[port], &[data]) == 1
    }

    /// Sends `data[i]` out of `ports[i]` for every i, in order, with as few
    /// `sendmmsg` calls as possible. Returns how many datagrams were taken
    /// (sent, or lost to a dead peer's ICMP error, which the link layer
    /// notices); fewer than `data.len()` means the socket buffer is full and
    /// the caller keeps the rest until the socket is writable.
    pub fn send_batch<D: AsRef<[u8]>>(&mut self, ports: &[PortNo], data: &[D]) -> usize {
        let total = ports.len().min(data.len());
        let mut taken = 0;
        while taken < total {
            // Build one call's worth of headers, skipping uncabled ports.
            let mut n = 0;
            let mut first = taken;
            while first + n < total && n < SEND_BATCH {
                let i = first + n;
                let Some(Some(addr)) = self.addr_of.get(ports[i] as usize) else {
                    // An uncabled port: the core should never send there.
                    // Counted once, when it heads the next call.
                    if n == 0 {
                        self.counters.send_errors += 1;
                        first += 1;
                        taken += 1;
                        continue;
                    }
                    break;
                };
                let buf = data[i].as_ref();
                self.send_iov[n] = libc::iovec {
                    iov_base: buf.as_ptr() as *mut libc::c_void,
                    iov_len: buf.len(),
                };
                let h = &mut self.send_hdr[n];
                h.msg_hdr.msg_name = &addr.storage as *const _ as *mut libc::c_void;
                h.msg_hdr.msg_namelen = addr.len;
                h.msg_hdr.msg_iov = &mut self.send_iov[n];
                h.msg_hdr.msg_iovlen = 1;
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
                h.msg_hdr.msg_flags = 0;
                n += 1;
            }
            if n == 0 {
                continue;
            }
            // SAFETY: `n` headers point at the caller's buffers and this
            // transport's addresses, all alive for the duration of the call.
            let rc = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    self.send_hdr.as_mut_ptr(),
                    n as libc::c_uint,
                    0,
                )
            };
            // An error other than a full buffer is a dead peer's ICMP
            // error: that datagram is lost on the wire, which the link
            // layer detects and counts.
            match sendmmsg_outcome(rc, &mut self.counters, ports[taken]) {
                SendOutcome::Sent(k) => taken += k,
                SendOutcome::Full => return taken,
                SendOutcome::Retry => continue,
                SendOutcome::LostOne => taken += 1,
            }
        }
        taken
    }
}

/// Our port for a datagram from a peer address with these cables: the only
/// one, or the one whose peer port the header names.
fn cable_of(cables: &CablesTo, datagram: &[u8]) -> Option<PortNo> {
    match cables.as_slice() {
        [(_, local)] => Some(*local),
        many => {
            let from = flitnet_core::wire::peek_port(datagram)?;
            many.iter()
                .find(|(peer_port, _)| *peer_port == Some(from))
                .map(|&(_, local)| local)
        }
    }
}

/// What one `sendmmsg(2)` call did to the head of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendOutcome {
    /// This many messages left.
    Sent(usize),
    /// The socket buffer is full: keep the rest until it is writable.
    Full,
    /// Interrupted by a signal: call again.
    Retry,
    /// The first message failed for good (counted as a send error).
    LostOne,
}

/// Classifies `sendmmsg`'s return value `rc` (reading `errno` when it is
/// negative) and counts it, for both transports; `port` names the first
/// message's port in the log line of a failure.
pub(crate) fn sendmmsg_outcome(
    rc: libc::c_int,
    counters: &mut TransportCounters,
    port: PortNo,
) -> SendOutcome {
    counters.tx_syscalls += 1;
    if rc >= 0 {
        counters.tx_datagrams += rc as u64;
        return SendOutcome::Sent(rc as usize);
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock => {
            counters.would_block += 1;
            SendOutcome::Full
        }
        io::ErrorKind::Interrupted => SendOutcome::Retry,
        _ => {
            counters.send_errors += 1;
            tracing::debug!(port, error = %e, "sendmmsg failed");
            SendOutcome::LostOne
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpTransport, UdpTransport) {
        let mut b = UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &[]).unwrap();
        let b_addr = b.local_addr().unwrap();
        let a = UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &[PortPeer::udp(3, b_addr)])
            .unwrap();
        // b learns a as port 5.
        b.add_peer(&PortPeer::udp(5, a.local_addr().unwrap()));
        (a, b)
    }

    #[test]
    fn datagrams_map_to_ports_and_strangers_are_dropped() {
        let (mut a, mut b) = pair();
        let b_addr = b.local_addr().unwrap();
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(b"nope", b_addr).unwrap();
        assert!(a.send(3, b"hello"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut got = Vec::new();
        b.recv_batch(16, |port, data| got.push((port, data.to_vec())));
        assert_eq!(got, vec![(5, b"hello".to_vec())]);
        assert_eq!(b.counters.unknown_peer, 1);
        // Sending on an uncabled port is refused and counted, not a panic.
        assert!(a.send(9, b"x"));
        assert_eq!(a.counters.send_errors, 1);
    }

    /// A datagram as a link end on `port` writes it (no items).
    fn datagram_from_port(port: PortNo) -> Vec<u8> {
        let mut buf = Vec::new();
        let header = flitnet_core::wire::Header {
            port,
            ..Default::default()
        };
        flitnet_core::wire::FrameWriter::new(&mut buf, header).finish();
        buf
    }

    #[test]
    fn parallel_cables_to_one_peer_are_told_apart_by_the_sending_port() {
        // a's ports 1 and 2 are both cabled to b, on b's ports 6 and 7.
        let mut b = UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &[]).unwrap();
        let b_addr = b.local_addr().unwrap();
        let mut a = UdpTransport::bind(
            "127.0.0.1:0".parse().unwrap(),
            &[
                PortPeer::udp(1, b_addr).with_peer_port(6),
                PortPeer::udp(2, b_addr).with_peer_port(7),
            ],
        )
        .unwrap();
        let a_addr = a.local_addr().unwrap();
        b.add_peer(&PortPeer::udp(6, a_addr).with_peer_port(1));
        b.add_peer(&PortPeer::udp(7, a_addr).with_peer_port(2));
        let (on1, on2) = (datagram_from_port(1), datagram_from_port(2));
        assert_eq!(a.send_batch(&[2, 1, 2], &[&on2, &on1, &on2]), 3);
        // A header naming a port that has no cable to b is dropped.
        assert!(a.send(1, &datagram_from_port(5)));
        assert!(a.send(1, b"not a flitnet datagram"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut got = Vec::new();
        b.recv_batch(16, |port, d| got.push((port, d.to_vec())));
        assert_eq!(got, vec![(7, on2.clone()), (6, on1), (7, on2)]);
        assert_eq!(b.counters.unknown_peer, 2);
        // Re-cabling b's port 7 elsewhere leaves port 6 as a's only cable.
        b.add_peer(&PortPeer::udp(7, "127.0.0.1:9".parse().unwrap()));
        assert!(a.send(2, &datagram_from_port(2)));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut ports = Vec::new();
        b.recv_batch(16, |port, _| ports.push(port));
        assert_eq!(ports, vec![6]);
    }

    #[test]
    fn batches_keep_order_span_several_syscalls_and_skip_uncabled_ports() {
        let (mut a, mut b) = pair();
        let n = SEND_BATCH * 2 + 5;
        let data: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; 1 + i % 7]).collect();
        let mut ports = vec![3; n];
        ports[10] = 9; // uncabled: skipped and counted
        assert_eq!(a.send_batch(&ports, &data), n);
        assert_eq!(a.counters.send_errors, 1);
        assert_eq!(a.counters.tx_datagrams, n as u64 - 1);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut got = Vec::new();
        let delivered = b.recv_batch(1000, |port, d| got.push((port, d.to_vec())));
        assert_eq!(delivered, n - 1);
        let expected: Vec<(PortNo, Vec<u8>)> = (0..n)
            .filter(|&i| i != 10)
            .map(|i| (5, data[i].clone()))
            .collect();
        assert_eq!(got, expected);
        assert!(b.counters.rx_syscalls >= 3, "{:?}", b.counters);
    }

    #[test]
    fn oversized_datagrams_are_counted_not_delivered_cut() {
        let (mut a, mut b) = pair();
        b.set_max_datagram(100);
        assert!(a.send(3, &[7u8; 100]));
        assert!(a.send(3, &[8u8; 101]));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut got = Vec::new();
        b.recv_batch(16, |_, d| got.push(d.len()));
        assert_eq!(got, vec![100]);
        assert_eq!(b.counters.truncated, 1);
    }
}
