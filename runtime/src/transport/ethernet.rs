//! Raw Ethernet transport: flitnet datagrams in Ethernet frames of EtherType
//! [`ETHERTYPE_FLITNET`], one network interface per port (the end of a veth
//! pair in a network namespace, or a container's interface).
//!
//! Frame: destination MAC, source MAC, EtherType 0x88B5, the datagram's
//! length (u16, big-endian), the datagram exactly as on UDP, then whatever
//! padding the link added (real NICs pad frames to 60 bytes; the length
//! says where the datagram ends). docs/wire.md, "Transports".
//!
//! Sockets: one `AF_PACKET`/`SOCK_RAW` socket per port, bound to its
//! interface and to the flitnet EtherType, receives (so the kernel hands
//! each socket only its own port's frames, and the port a frame came in on
//! is the socket it was read from), and one unbound packet socket sends
//! every port's frames, addressed by interface index, so that one
//! `sendmmsg` carries a batch for many ports. The receive sockets sit in an
//! epoll set whose descriptor is the one the event loop polls, so the loop
//! is the same single `ppoll` as on UDP. pnet (`pnet_datalink`) finds the
//! interfaces (index, MAC) and `pnet_packet` builds and parses the Ethernet
//! headers; pnet's own channels are not used because they are blocking,
//! one thread per receiver, which a single-threaded ppoll loop with
//! hundreds of daemons on two cores cannot afford.

use super::{sendmmsg_outcome, SendOutcome, TransportCounters, RECV_SLOTS, SEND_BATCH};
use anyhow::{bail, Context, Result};
use flitnet_core::control::{parse_mac, PortPeer, ETHERTYPE_FLITNET};
use flitnet_core::topology::PortNo;
use pnet_datalink::MacAddr;
use pnet_packet::ethernet::{EtherType, EthernetPacket, MutableEthernetPacket};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Ethernet header: destination, source, EtherType.
pub const ETH_HEADER: usize = 14;
/// Ethernet header plus flitnet's length field.
pub const FRAME_HEADER: usize = ETH_HEADER + 2;
/// Shortest frame a real NIC puts on the wire (without FCS): shorter ones
/// arrive padded to this length.
const MIN_FRAME: usize = 60;
/// Kernel buffer per receive socket (see `transport::SOCKET_BUFFER_BYTES`).
const SOCKET_BUFFER_BYTES: usize = 1 << 20;
const SIOCGIFMTU: libc::c_ulong = 0x8921;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// epoll tag of the sending socket (receive sockets are tagged by index).
const TX_TAG: u64 = u64::MAX;

/// One port's receive socket and what its frames look like.
struct PortSocket {
    port: PortNo,
    fd: OwnedFd,
    ifindex: i32,
    interface: String,
    /// Largest datagram the interface carries (its MTU minus the length).
    max_datagram: usize,
    /// Destination, source and EtherType of every frame sent on the port.
    header: [u8; ETH_HEADER],
    /// Frames from any other source are dropped (None: accept any).
    peer_mac: Option<MacAddr>,
}

pub struct EthernetTransport {
    epoll: OwnedFd,
    tx: OwnedFd,
    /// Whether the sending socket's writability is being waited for.
    tx_armed: bool,
    socks: Vec<PortSocket>,
    /// Index into `socks` of every port.
    sock_of_port: Vec<Option<usize>>,
    recv_buf: Vec<u8>,
    slot_len: usize,
    recv_names: Vec<libc::sockaddr_ll>,
    recv_iov: Vec<libc::iovec>,
    recv_hdr: Vec<libc::mmsghdr>,
    events: Vec<libc::epoll_event>,
    send_heads: Vec<[u8; FRAME_HEADER]>,
    send_names: Vec<libc::sockaddr_ll>,
    send_iov: Vec<libc::iovec>,
    send_hdr: Vec<libc::mmsghdr>,
    pub counters: TransportCounters,
}

// SAFETY: the raw pointers in the scratch arrays are rewritten before every
// system call and never dereferenced outside one.
unsafe impl Send for EthernetTransport {}

/// The calling thread inside another network namespace until [`leave`].
pub(crate) struct Netns {
    home: OwnedFd,
    name: String,
}

impl Netns {
    /// `name` is a name under /var/run/netns (as `ip netns add` makes) or a
    /// path (`/proc/PID/ns/net`).
    pub(crate) fn enter(name: &str) -> Result<Netns> {
        let home: OwnedFd = std::fs::File::open("/proc/thread-self/ns/net")
            .context("opening this thread's network namespace")?
            .into();
        let path = if name.contains('/') {
            name.to_string()
        } else {
            format!("/var/run/netns/{name}")
        };
        let target = std::fs::File::open(&path)
            .with_context(|| format!("network namespace `{name}` ({path})"))?;
        // SAFETY: setns with an open namespace descriptor; affects this thread only.
        if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error()).with_context(|| {
                format!("entering network namespace `{name}` (needs CAP_SYS_ADMIN)")
            });
        }
        Ok(Netns {
            home,
            name: name.to_string(),
        })
    }

    pub(crate) fn leave(self) -> Result<()> {
        // SAFETY: as above, back to the namespace the thread started in.
        if unsafe { libc::setns(self.home.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("leaving network namespace `{}`", self.name));
        }
        Ok(())
    }
}

fn cvt(rc: libc::c_int, what: &str) -> Result<libc::c_int> {
    if rc < 0 {
        return Err(io::Error::last_os_error()).context(what.to_string());
    }
    Ok(rc)
}

fn packet_socket() -> Result<OwnedFd> {
    // Protocol 0: the socket receives nothing until bound, so no frame of
    // another interface slips in between socket() and bind().
    // SAFETY: plain socket(2) call; the descriptor is owned right away.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    cvt(fd, "creating an AF_PACKET socket (needs CAP_NET_RAW)")?;
    // SAFETY: fd was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn set_int_opt(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: an int option, passed by pointer with its size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &value as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

fn link_addr(ifindex: i32, dst: [u8; 6]) -> libc::sockaddr_ll {
    // SAFETY: plain C struct, all-zero is valid.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETHERTYPE_FLITNET.to_be();
    sll.sll_ifindex = ifindex;
    sll.sll_halen = 6;
    sll.sll_addr[..6].copy_from_slice(&dst);
    sll
}

/// The MTU of interface `name`, asked through socket `fd` (its namespace).
fn interface_mtu(fd: &OwnedFd, name: &str) -> Result<usize> {
    // SAFETY: plain C struct, all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads ifr_name and writes ifr_mtu of `req`.
    cvt(
        unsafe { libc::ioctl(fd.as_raw_fd(), SIOCGIFMTU as _, &mut req) },
        "reading the interface MTU",
    )?;
    // SAFETY: SIOCGIFMTU filled the union's mtu member.
    Ok(unsafe { req.ifr_ifru.ifru_mtu } as usize)
}

impl EthernetTransport {
    /// Opens one receive socket per port on its interface (inside network
    /// namespace `netns` when given; the calling thread returns to its own
    /// namespace before this returns) and one sending socket. Every port
    /// must name an existing interface whose MTU carries `max_datagram`.
    pub fn open(peers: &[PortPeer], netns: Option<&str>, max_datagram: usize) -> Result<Self> {
        let ns = netns.map(Netns::enter).transpose()?;
        let opened = Self::open_here(peers, netns, max_datagram);
        if let Some(ns) = ns {
            ns.leave()?;
        }
        opened
    }

    fn open_here(peers: &[PortPeer], netns: Option<&str>, max_datagram: usize) -> Result<Self> {
        let where_ = match netns {
            Some(n) => format!("network namespace `{n}`"),
            None => "this network namespace".to_string(),
        };
        let interfaces = pnet_datalink::interfaces();
        // Every interface must exist before anything is opened, so that a
        // miscabled configuration is named whatever the privileges.
        for p in peers {
            let Some(name) = p.interface.as_deref() else {
                bail!("port {}: no interface given", p.port);
            };
            if !interfaces.iter().any(|i| i.name == name) {
                let mut known: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
                known.sort_unstable();
                known.dedup();
                bail!(
                    "port {}: no interface `{name}` in {where_} (there: {})",
                    p.port,
                    known.join(", ")
                );
            }
        }
        // SAFETY: epoll_create1 returns a new descriptor or -1.
        let epoll = cvt(
            unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) },
            "epoll_create1",
        )?;
        // SAFETY: just created, owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        let tx = packet_socket()?;
        let _ = set_int_opt(
            &tx,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            SOCKET_BUFFER_BYTES as _,
        );
        // veths have no queue; skipping the qdisc layer saves a lock per frame.
        let _ = set_int_opt(&tx, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1);
        let mut socks: Vec<PortSocket> = Vec::new();
        let mut sock_of_port = Vec::new();
        for p in peers {
            let name = p.interface.as_deref().expect("checked above");
            let iface = interfaces
                .iter()
                .find(|i| i.name == name)
                .expect("checked above");
            let fd = packet_socket()?;
            let _ = set_int_opt(
                &fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                SOCKET_BUFFER_BYTES as _,
            );
            let _ = set_int_opt(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
            let mtu = interface_mtu(&fd, name).with_context(|| format!("interface `{name}`"))?;
            if mtu < max_datagram + 2 {
                bail!(
                    "port {}: interface `{name}` has MTU {mtu}, too small for the fabric's datagrams of {max_datagram} bytes (+2 for the frame's length field): raise its MTU or lower the fabric's",
                    p.port
                );
            }
            let sll = link_addr(iface.index as i32, [0; 6]);
            // SAFETY: binds to a valid sockaddr_ll of the right size.
            cvt(
                unsafe {
                    libc::bind(
                        fd.as_raw_fd(),
                        &sll as *const _ as *const libc::sockaddr,
                        std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
                    )
                },
                &format!("binding to interface `{name}`"),
            )?;
            let peer_mac = match &p.peer_mac {
                Some(text) => Some(
                    parse_mac(text)
                        .map(|m| MacAddr::new(m[0], m[1], m[2], m[3], m[4], m[5]))
                        .with_context(|| format!("port {}: bad peer MAC `{text}`", p.port))?,
                ),
                None => None,
            };
            let mut header = [0u8; ETH_HEADER];
            {
                let mut eth = MutableEthernetPacket::new(&mut header)
                    .expect("14 bytes hold an Ethernet header");
                eth.set_destination(peer_mac.unwrap_or(MacAddr::broadcast()));
                eth.set_source(iface.mac.unwrap_or(MacAddr::zero()));
                eth.set_ethertype(EtherType(ETHERTYPE_FLITNET));
            }
            let index = socks.len();
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: index as u64,
            };
            // SAFETY: registers a live descriptor with a valid event.
            cvt(
                unsafe {
                    libc::epoll_ctl(
                        epoll.as_raw_fd(),
                        libc::EPOLL_CTL_ADD,
                        fd.as_raw_fd(),
                        &mut ev,
                    )
                },
                "epoll_ctl",
            )?;
            let i = p.port as usize;
            if sock_of_port.len() <= i {
                sock_of_port.resize(i + 1, None);
            }
            sock_of_port[i] = Some(index);
            socks.push(PortSocket {
                port: p.port,
                fd,
                ifindex: iface.index as i32,
                interface: name.to_string(),
                max_datagram: mtu - 2,
                header,
                peer_mac,
            });
            tracing::debug!(port = p.port, interface = name, mtu, "ethernet port open");
        }
        // The sending socket is watched only while a send would block.
        let mut ev = libc::epoll_event {
            events: 0,
            u64: TX_TAG,
        };
        // SAFETY: as above.
        cvt(
            unsafe {
                libc::epoll_ctl(
                    epoll.as_raw_fd(),
                    libc::EPOLL_CTL_ADD,
                    tx.as_raw_fd(),
                    &mut ev,
                )
            },
            "epoll_ctl",
        )?;
        // SAFETY (all): plain C structs for which all-zero is valid.
        let zero_ll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let zero_hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let n_events = socks.len() + 1;
        let mut t = EthernetTransport {
            epoll,
            tx,
            tx_armed: false,
            socks,
            sock_of_port,
            recv_buf: Vec::new(),
            slot_len: 0,
            recv_names: vec![zero_ll; RECV_SLOTS],
            recv_iov: vec![zero_iov; RECV_SLOTS],
            recv_hdr: vec![zero_hdr; RECV_SLOTS],
            events: vec![libc::epoll_event { events: 0, u64: 0 }; n_events],
            send_heads: vec![[0; FRAME_HEADER]; SEND_BATCH],
            send_names: vec![zero_ll; SEND_BATCH],
            send_iov: vec![zero_iov; 2 * SEND_BATCH],
            send_hdr: vec![zero_hdr; SEND_BATCH],
            counters: TransportCounters::default(),
        };
        t.set_max_datagram(max_datagram);
        Ok(t)
    }

    /// Sizes the receive slots for datagrams of at most `bytes` (longer
    /// frames are counted as truncated and dropped).
    pub fn set_max_datagram(&mut self, bytes: usize) {
        // One spare byte tells a frame of exactly the size from a longer one.
        self.slot_len = (FRAME_HEADER + bytes.clamp(1, u16::MAX as usize)).max(MIN_FRAME) + 1;
        self.recv_buf = vec![0; self.slot_len * RECV_SLOTS];
    }

    /// The descriptor the event loop polls: readable when a port has frames
    /// (or the sending socket became writable after a full buffer).
    pub fn raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Names of the ports' interfaces, by port.
    pub fn interfaces(&self) -> Vec<(PortNo, String)> {
        self.socks
            .iter()
            .map(|s| (s.port, s.interface.clone()))
            .collect()
    }

    fn set_tx_watch(&mut self, on: bool) {
        if self.tx_armed == on {
            return;
        }
        let mut ev = libc::epoll_event {
            events: if on { libc::EPOLLOUT as u32 } else { 0 },
            u64: TX_TAG,
        };
        // SAFETY: modifies a registered descriptor with a valid event.
        unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_MOD,
                self.tx.as_raw_fd(),
                &mut ev,
            )
        };
        self.tx_armed = on;
    }

    /// Receives up to `max` queued frames from the ports that have some,
    /// handing each datagram to `deliver` with its port. Returns how many
    /// were delivered.
    pub fn recv_batch(&mut self, max: usize, mut deliver: impl FnMut(PortNo, &[u8])) -> usize {
        // SAFETY: `events` has room for every registered descriptor.
        let ready = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                0,
            )
        };
        if ready <= 0 {
            return 0;
        }
        let mut delivered = 0;
        let mut remaining = max;
        for e in 0..ready as usize {
            let tag = self.events[e].u64;
            if tag == TX_TAG {
                // Writable again: the event loop's next round sends.
                self.set_tx_watch(false);
                continue;
            }
            let s = tag as usize;
            while remaining > 0 {
                let got =
                    self.recv_some(s, remaining.min(RECV_SLOTS), &mut deliver, &mut delivered);
                remaining -= got.min(remaining);
                if got < RECV_SLOTS {
                    break;
                }
            }
        }
        delivered
    }

    /// One `recvmmsg` on port socket `s`; returns how many frames it read.
    fn recv_some(
        &mut self,
        s: usize,
        want: usize,
        deliver: &mut impl FnMut(PortNo, &[u8]),
        delivered: &mut usize,
    ) -> usize {
        for i in 0..want {
            self.recv_iov[i] = libc::iovec {
                iov_base: self.recv_buf[i * self.slot_len..].as_mut_ptr() as *mut libc::c_void,
                iov_len: self.slot_len,
            };
            let h = &mut self.recv_hdr[i];
            h.msg_hdr.msg_name = &mut self.recv_names[i] as *mut _ as *mut libc::c_void;
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            h.msg_hdr.msg_iov = &mut self.recv_iov[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        let (fd, port, peer_mac) = {
            let sock = &self.socks[s];
            (sock.fd.as_raw_fd(), sock.port, sock.peer_mac)
        };
        // SAFETY: `want` headers point at live slots, names and iovecs.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                self.recv_hdr.as_mut_ptr(),
                want as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                tracing::warn!(interface = %self.socks[s].interface, error = %e, "recvmmsg failed");
            }
            return 0;
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
            if self.recv_names[i].sll_pkttype == libc::PACKET_OUTGOING {
                // Our own frame seen by a tap (kernels without
                // PACKET_IGNORE_OUTGOING): not from the peer.
                continue;
            }
            let start = i * self.slot_len;
            let frame = &self.recv_buf[start..start + len];
            let Some(eth) = EthernetPacket::new(frame) else {
                self.counters.bad_frames += 1;
                continue;
            };
            if eth.get_ethertype() != EtherType(ETHERTYPE_FLITNET) {
                self.counters.bad_frames += 1;
                continue;
            }
            if peer_mac.is_some_and(|m| m != eth.get_source()) {
                self.counters.unknown_peer += 1;
                if self.counters.unknown_peer.is_power_of_two() {
                    tracing::warn!(
                        interface = %self.socks[s].interface,
                        from = %eth.get_source(),
                        count = self.counters.unknown_peer,
                        "dropped a frame from an unknown peer"
                    );
                }
                continue;
            }
            let body = &frame[ETH_HEADER..];
            let datagram_len = body
                .get(..2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize);
            match datagram_len.and_then(|n| body.get(2..2 + n)) {
                Some(datagram) => {
                    deliver(port, datagram);
                    *delivered += 1;
                }
                None => self.counters.bad_frames += 1,
            }
        }
        got
    }

    /// Sends one datagram out of `port`; false if the socket buffer is full.
    pub fn send(&mut self, port: PortNo, data: &[u8]) -> bool {
        self.send_batch(&[port], &[data]) == 1
    }

    /// Sends `data[i]` out of `ports[i]`, in order, in as few `sendmmsg`
    /// calls as possible. Returns how many were taken (sent, or lost: an
    /// uncabled port, an interface that is down, a datagram its MTU cannot
    /// carry — counted); fewer than `data.len()` means the socket buffer is
    /// full and the caller keeps the rest until the transport is readable.
    pub fn send_batch<D: AsRef<[u8]>>(&mut self, ports: &[PortNo], data: &[D]) -> usize {
        let total = ports.len().min(data.len());
        let mut taken = 0;
        while taken < total {
            let mut n = 0;
            let first = taken;
            while first + n < total && n < SEND_BATCH {
                let i = first + n;
                let buf = data[i].as_ref();
                let sock = self
                    .sock_of_port
                    .get(ports[i] as usize)
                    .copied()
                    .flatten()
                    .map(|s| &self.socks[s]);
                let refused = match sock {
                    None => Some(false),
                    Some(s) if buf.len() > s.max_datagram => Some(true),
                    Some(_) => None,
                };
                if let Some(oversized) = refused {
                    // Never sent: an uncabled port (the core should not send
                    // there) or a frame the interface would cut. Counted
                    // when it heads the next call.
                    if n == 0 {
                        if oversized {
                            self.counters.oversized += 1;
                        } else {
                            self.counters.send_errors += 1;
                        }
                        taken += 1;
                        break;
                    }
                    break;
                }
                let sock = sock.expect("checked above");
                let head = &mut self.send_heads[n];
                head[..ETH_HEADER].copy_from_slice(&sock.header);
                head[ETH_HEADER..].copy_from_slice(&(buf.len() as u16).to_be_bytes());
                self.send_names[n] = link_addr(sock.ifindex, [0; 6]);
                self.send_iov[2 * n] = libc::iovec {
                    iov_base: head.as_mut_ptr() as *mut libc::c_void,
                    iov_len: FRAME_HEADER,
                };
                self.send_iov[2 * n + 1] = libc::iovec {
                    iov_base: buf.as_ptr() as *mut libc::c_void,
                    iov_len: buf.len(),
                };
                n += 1;
            }
            if n == 0 {
                continue;
            }
            for k in 0..n {
                let h = &mut self.send_hdr[k];
                h.msg_hdr.msg_name = &mut self.send_names[k] as *mut _ as *mut libc::c_void;
                h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                h.msg_hdr.msg_iov = &mut self.send_iov[2 * k];
                h.msg_hdr.msg_iovlen = 2;
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
                h.msg_hdr.msg_flags = 0;
            }
            // SAFETY: `n` headers point at the caller's buffers and this
            // transport's frame heads and addresses, alive during the call.
            let rc = unsafe {
                libc::sendmmsg(
                    self.tx.as_raw_fd(),
                    self.send_hdr.as_mut_ptr(),
                    n as libc::c_uint,
                    0,
                )
            };
            // Another error is ENETDOWN (the interface is down: a pulled
            // cable) or ENOBUFS (the peer's backlog is full): that frame is
            // lost on the wire, which the link layer detects and counts.
            match sendmmsg_outcome(rc, &mut self.counters, ports[taken]) {
                SendOutcome::Sent(k) => taken += k,
                SendOutcome::Full => {
                    self.set_tx_watch(true);
                    return taken;
                }
                SendOutcome::Retry => continue,
                SendOutcome::LostOne => taken += 1,
            }
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A network namespace holding one veth pair `a`—`b`, deleted on drop.
    struct Veth {
        ns: String,
    }

    fn ip(args: &[&str]) -> Result<()> {
        let out = Command::new("ip")
            .args(args)
            .output()
            .context("running ip")?;
        if !out.status.success() {
            bail!(
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    impl Veth {
        /// None when this is not root (the tests then say they were skipped;
        /// CI runs as root and runs them).
        fn new(tag: &str) -> Option<Veth> {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                assert!(std::env::var_os("CI").is_none(), "CI must run as root");
                eprintln!("skipped: creating network namespaces needs root");
                return None;
            }
            let v = Veth {
                ns: format!("flitnet-rt-{}-{tag}", std::process::id()),
            };
            ip(&["netns", "add", &v.ns]).unwrap();
            for cmd in [
                "link add name a address 02:f1:00:00:00:0a type veth peer name b address 02:f1:00:00:00:0b",
                "link set dev a up",
                "link set dev b up",
            ] {
                let mut args = vec!["-n", v.ns.as_str()];
                args.extend(cmd.split(' '));
                ip(&args).unwrap();
            }
            Some(v)
        }
    }

    impl Drop for Veth {
        fn drop(&mut self) {
            let _ = ip(&["netns", "del", &self.ns]);
        }
    }

    fn eth(port: PortNo, iface: &str, mac: Option<u8>) -> PortPeer {
        PortPeer::ethernet(port, iface, mac.map(|m| [2, 0xf1, 0, 0, 0, m]))
    }

    fn wait_readable(t: &EthernetTransport) {
        let mut p = libc::pollfd {
            fd: t.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 1000) };
    }

    #[test]
    fn frames_cross_a_veth_in_batches_and_strangers_are_dropped() {
        let Some(v) = Veth::new("batch") else { return };
        let mut a = EthernetTransport::open(&[eth(3, "a", Some(0x0b))], Some(&v.ns), 1400).unwrap();
        let mut b = EthernetTransport::open(&[eth(5, "b", Some(0x0a))], Some(&v.ns), 1400).unwrap();
        // This thread is back in its own namespace: no veth `a` here.
        assert!(!pnet_datalink::interfaces()
            .iter()
            .any(|i| i.name == "a" && i.mac == Some(MacAddr::new(2, 0xf1, 0, 0, 0, 0x0a))));
        let n = SEND_BATCH * 2 + 5;
        // Short datagrams too: a real NIC would pad them, the length field
        // says where they end.
        let data: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; 1 + i % 7]).collect();
        let mut ports = vec![3; n];
        ports[10] = 9; // uncabled: skipped and counted
        assert_eq!(a.send_batch(&ports, &data), n);
        assert_eq!(a.counters.send_errors, 1);
        assert_eq!(a.counters.tx_datagrams, n as u64 - 1);
        assert!(a.counters.tx_syscalls <= 5, "{:?}", a.counters);
        let mut got = Vec::new();
        while got.len() < n - 1 {
            wait_readable(&b);
            if b.recv_batch(1000, |port, d| got.push((port, d.to_vec()))) == 0 {
                break;
            }
        }
        let expected: Vec<(PortNo, Vec<u8>)> = (0..n)
            .filter(|&i| i != 10)
            .map(|i| (5, data[i].clone()))
            .collect();
        assert_eq!(got, expected);
        // b answers; a receives on port 3.
        assert!(b.send(5, b"pong"));
        wait_readable(&a);
        let mut back = Vec::new();
        a.recv_batch(16, |port, d| back.push((port, d.to_vec())));
        assert_eq!(back, vec![(3, b"pong".to_vec())]);
        // A transport expecting another peer MAC drops b's frames.
        drop(a);
        let mut picky =
            EthernetTransport::open(&[eth(3, "a", Some(0x77))], Some(&v.ns), 1400).unwrap();
        assert!(b.send(5, b"who?"));
        wait_readable(&picky);
        assert_eq!(picky.recv_batch(16, |_, _| panic!("delivered")), 0);
        assert_eq!(picky.counters.unknown_peer, 1);
    }

    #[test]
    fn oversized_datagrams_and_missing_interfaces_are_refused() {
        let Some(v) = Veth::new("refuse") else { return };
        // veth MTU 1500: a 1499-byte datagram cannot get its length field in.
        let err = EthernetTransport::open(&[eth(0, "a", None)], Some(&v.ns), 1499)
            .err()
            .unwrap();
        assert!(
            format!("{err:#}").contains("interface `a` has MTU 1500"),
            "{err:#}"
        );
        let err = EthernetTransport::open(&[eth(2, "nope0", None)], Some(&v.ns), 1400)
            .err()
            .unwrap();
        let text = format!("{err:#}");
        assert!(
            text.contains("no interface `nope0`") && text.contains(&v.ns) && text.contains("a, b"),
            "{text}"
        );
        let err = EthernetTransport::open(&[eth(0, "a", None)], Some("flitnet-no-such-ns"), 1400)
            .err()
            .unwrap();
        assert!(
            format!("{err:#}").contains("network namespace `flitnet-no-such-ns`"),
            "{err:#}"
        );
        let mut a = EthernetTransport::open(&[eth(0, "a", None)], Some(&v.ns), 1400).unwrap();
        let mut b = EthernetTransport::open(&[eth(0, "b", None)], Some(&v.ns), 1400).unwrap();
        assert!(a.send(0, &[1u8; 1498]));
        assert!(a.send(0, &[2u8; 1499]), "taken (refused), not left queued");
        assert_eq!(a.counters.oversized, 1);
        // The receiver's slots hold 1400 bytes: the 1498-byte one is cut.
        wait_readable(&b);
        assert_eq!(b.recv_batch(16, |_, _| panic!("delivered")), 0);
        assert_eq!(b.counters.truncated, 1);
        // With the interface down, sends fail and are counted as lost.
        ip(&["-n", &v.ns, "link", "set", "dev", "a", "down"]).unwrap();
        assert!(a.send(0, b"x"));
        assert_eq!(a.counters.send_errors, 1);
    }
}
