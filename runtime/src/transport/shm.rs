//! Shared-memory transport: every link is a file of two single-producer
//! single-consumer byte rings (one per direction) that the two daemons of
//! the link map, and every daemon has a doorbell, a named pipe its
//! neighbours write one byte to when it sleeps (docs/wire.md,
//! "Shared-memory transport").
//!
//! A ring carries exactly the datagrams the UDP transport sends (same
//! header, CRC, link sequence numbers and credits): moving them costs a
//! copy in and a copy out, no system call. A doorbell is rung only when the
//! consumer said it is about to sleep (its `need-wakeup` word, as virtio's
//! event suppression and io_uring's `SQ_NEED_WAKEUP`), so a busy fabric
//! moves flits without entering the kernel at all.
//!
//! File layout (all integers little-endian, offsets from the file start):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `FLITRING` |
//! | 8 | 4 | version (1) |
//! | 12 | 4 | capacity `C` of each ring's data area, bytes (a power of two) |
//! | 64 | 192 + C | ring 0: written by the link's end `a`, read by `b` |
//! | 256 + C | 192 + C | ring 1: written by `b`, read by `a` |
//!
//! A ring: `head` (u64 at +0, bytes ever written, written by the producer
//! only), `tail` (u64 at +64, bytes ever consumed, consumer only),
//! `need-wakeup` (u32 at +72, consumer sets it before it sleeps),
//! `carrier-down` (u32 at +128, set by the controller to pull the cable),
//! then the data area at +192. The three words sit on their own cache
//! lines so that producer and consumer do not write the same line. A record
//! is a u32 length, 4 reserved bytes and the datagram, padded to 8 bytes; a
//! length of `u32::MAX` says "continue at the start of the data area".
//!
//! The reader treats the ring as untrusted input, as a datagram is: indices
//! are checked against the capacity and each other, lengths against the
//! fabric's MTU and the bytes published, and anything out of bounds is
//! refused and counted (`ring_corrupt`), after which the reader drops what
//! is queued and goes on from the producer's current index. Datagrams are
//! copied out of shared memory before anything looks at them, so a peer
//! scribbling concurrently can only turn them into garbage, which the
//! datagram's CRC catches like a corrupted frame.

use super::TransportCounters;
use anyhow::{bail, Context, Result};
use flitnet_core::control::{FabricParams, PortPeer};
use flitnet_core::topology::PortNo;
use memmap2::MmapRaw;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// `FLITRING`, the first 8 bytes of a link file.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FLITRING");
pub const VERSION: u32 = 1;
const LINE: usize = 64;
/// Bytes before ring 0.
const FILE_HEADER: usize = LINE;
/// Bytes of a ring's index words before its data area.
const RING_HEADER: usize = 3 * LINE;
const HEAD: usize = 0;
const TAIL: usize = LINE;
const NEED_WAKEUP: usize = LINE + 8;
const CARRIER_DOWN: usize = 2 * LINE;
/// Bytes before a record's datagram: length (u32) and 4 reserved.
const RECORD_HEADER: usize = 8;
/// A record length saying "the rest of the data area is skipped".
const WRAP: u32 = u32::MAX;
/// Smallest and largest ring data area accepted.
pub const MIN_CAPACITY: usize = 4096;
pub const MAX_CAPACITY: usize = 1 << 26;

/// Bytes a record of a `len`-byte datagram takes in the data area.
fn record_len(len: usize) -> usize {
    (RECORD_HEADER + len + 7) & !7
}

/// The bytes of a link file whose rings hold `capacity` bytes each.
pub fn file_len(capacity: usize) -> usize {
    FILE_HEADER + 2 * (RING_HEADER + capacity)
}

/// Offset of the ring written by end `end` (0: the link's `a`, 1: `b`).
fn ring_offset(end: u8, capacity: usize) -> usize {
    FILE_HEADER + end as usize * (RING_HEADER + capacity)
}

/// Ring capacity for a fabric: a live consumer never lets its ring fill,
/// because credits bound the flits a producer has in flight and each flit
/// costs at most its payload plus [`flitnet_core::wire::MAX_FLIT_OVERHEAD`]
/// (and, sent alone, a datagram header and a record header); four times
/// that window plus two full datagrams leaves room for credit updates,
/// keepalives and link resets. At least 32 KiB.
pub fn ring_capacity(params: &FabricParams) -> usize {
    let per_flit = params.flit_payload as usize
        + flitnet_core::wire::MAX_FLIT_OVERHEAD
        + flitnet_core::wire::HEADER_LEN
        + RECORD_HEADER;
    let window = params.vcs as usize * params.buffer_depth as usize * per_flit;
    let bytes = 4 * (window + 2 * record_len(params.mtu));
    bytes.next_power_of_two().clamp(32 << 10, MAX_CAPACITY)
}

/// Creates a link file (mode 0600, it must not exist) with both rings
/// empty and the carrier up.
pub fn create_link_file(path: &Path, capacity: usize) -> Result<()> {
    if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
        bail!("ring capacity {capacity}: not a power of two in {MIN_CAPACITY}..={MAX_CAPACITY}");
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating ring file {}", path.display()))?;
    file.set_len(file_len(capacity) as u64)
        .with_context(|| format!("sizing ring file {}", path.display()))?;
    let mut header = [0u8; 16];
    header[..8].copy_from_slice(&MAGIC.to_le_bytes());
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&(capacity as u32).to_le_bytes());
    std::os::unix::fs::FileExt::write_all_at(&file, &header, 0)
        .with_context(|| format!("writing ring file {}", path.display()))?;
    Ok(())
}

/// Creates a daemon's doorbell, a named pipe (mode 0600).
pub fn create_doorbell(path: &Path) -> Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .context("doorbell path holds a NUL byte")?;
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("creating doorbell {}", path.display()));
    }
    Ok(())
}

/// A mapped link file, checked.
struct LinkFile {
    map: MmapRaw,
    capacity: usize,
}

impl LinkFile {
    fn open(path: &Path) -> Result<LinkFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("opening ring file {}", path.display()))?;
        let len = file.metadata()?.len() as usize;
        if len < FILE_HEADER {
            bail!("{}: {len} bytes, too short for a ring file", path.display());
        }
        let map = MmapRaw::map_raw(&file)
            .with_context(|| format!("mapping ring file {}", path.display()))?;
        let f = LinkFile { map, capacity: 0 };
        let magic = f.u64_at(0).load(Ordering::Relaxed);
        let version = f.u32_at(8).load(Ordering::Relaxed);
        let capacity = f.u32_at(12).load(Ordering::Relaxed) as usize;
        if magic != MAGIC || version != VERSION {
            bail!(
                "{}: not a flitnet ring file (version {VERSION})",
                path.display()
            );
        }
        if !capacity.is_power_of_two()
            || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity)
            || file_len(capacity) != len
        {
            bail!(
                "{}: ring capacity {capacity} does not match the file's {len} bytes",
                path.display()
            );
        }
        Ok(LinkFile { capacity, ..f })
    }

    /// The u64 word at `offset` (8-aligned, inside the mapping).
    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.map.len());
        // SAFETY: in bounds and aligned (the mapping is page-aligned); the
        // word lives as long as the mapping, borrowed through `self`.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU64) }
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0 && offset + 4 <= self.map.len());
        // SAFETY: as `u64_at`.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU32) }
    }

    fn ring(&self, end: u8) -> Ring<'_> {
        Ring {
            file: self,
            base: ring_offset(end, self.capacity),
        }
    }
}

/// One ring of a link file.
struct Ring<'a> {
    file: &'a LinkFile,
    base: usize,
}

impl Ring<'_> {
    fn head(&self) -> &AtomicU64 {
        self.file.u64_at(self.base + HEAD)
    }
    fn tail(&self) -> &AtomicU64 {
        self.file.u64_at(self.base + TAIL)
    }
    fn need_wakeup(&self) -> &AtomicU32 {
        self.file.u32_at(self.base + NEED_WAKEUP)
    }
    fn carrier_down(&self) -> &AtomicU32 {
        self.file.u32_at(self.base + CARRIER_DOWN)
    }
    /// Pointer to data-area offset `off`, `len` bytes of which are in bounds.
    fn data(&self, off: usize, len: usize) -> *mut u8 {
        assert!(off + len <= self.file.capacity);
        // SAFETY: the data area is inside the mapping (checked at open).
        unsafe {
            self.file
                .map
                .as_mut_ptr()
                .add(self.base + RING_HEADER + off)
        }
    }
    /// The record length word at data-area offset `off` (8-aligned).
    fn len_word(&self, off: usize) -> &AtomicU32 {
        self.file.u32_at(self.base + RING_HEADER + off)
    }
}

/// Sets the carrier of both rings of the link file at `path` down (or
/// up): a pulled cable. Producers drop what they would write; the ends
/// notice by keepalive timeout, as on a veth pair whose carrier is down.
pub fn set_carrier(path: &Path, up: bool) -> Result<()> {
    let f = LinkFile::open(path)?;
    for end in [0, 1] {
        f.ring(end)
            .carrier_down()
            .store(u32::from(!up), Ordering::Release);
    }
    Ok(())
}

/// What a push into a ring did.
#[derive(Debug, PartialEq, Eq)]
enum Push {
    Sent,
    /// No room: the consumer is dead or far behind; the datagram is lost.
    Full,
    CarrierDown,
    /// The consumer's index is out of bounds: nothing is written.
    Corrupt,
}

/// One cabled port: the link file, which ring is ours to write, and our
/// private copies of the indices we own.
struct ShmPort {
    port: PortNo,
    file: LinkFile,
    end: u8,
    /// Next byte we write (ring `end`).
    head: u64,
    /// Next byte we read (ring `1 - end`).
    tail: u64,
    /// Index into `ShmTransport::bells` of the peer's doorbell.
    bell: usize,
    /// Written to in the current `send_batch`.
    touched: bool,
    path: PathBuf,
}

impl ShmPort {
    fn push(&mut self, data: &[u8]) -> Push {
        let ring = self.file.ring(self.end);
        if ring.carrier_down().load(Ordering::Relaxed) != 0 {
            return Push::CarrierDown;
        }
        let cap = self.file.capacity as u64;
        let used = self.head.wrapping_sub(ring.tail().load(Ordering::Acquire));
        if used > cap {
            return Push::Corrupt;
        }
        let rec = record_len(data.len()) as u64;
        let mut off = self.head % cap;
        let contiguous = cap - off;
        let need = if rec > contiguous {
            contiguous + rec
        } else {
            rec
        };
        if need > cap - used {
            return Push::Full;
        }
        if rec > contiguous {
            ring.len_word(off as usize).store(WRAP, Ordering::Relaxed);
            self.head += contiguous;
            off = 0;
        }
        let dst = ring.data(off as usize + RECORD_HEADER, data.len());
        // SAFETY: `dst` has `data.len()` bytes in bounds (checked by
        // `data`); shared memory never overlaps the caller's buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        ring.len_word(off as usize)
            .store(data.len() as u32, Ordering::Relaxed);
        self.head += rec;
        ring.head().store(self.head, Ordering::Release);
        Push::Sent
    }

    /// Whether the ring we read holds something.
    fn readable(&self) -> bool {
        self.file.ring(1 - self.end).head().load(Ordering::Acquire) != self.tail
    }
}

/// Result of draining one port's ring.
struct Drained {
    delivered: usize,
    corrupt: bool,
}

/// Reads up to `max` datagrams from the ring `file` end `1 - end` starting
/// at `*tail`, each copied into `scratch` (of the fabric's MTU) and handed
/// to `deliver`. Anything out of bounds stops the drain: the reader then
/// resynchronises to the producer's index.
fn drain(
    file: &LinkFile,
    end: u8,
    tail: &mut u64,
    scratch: &mut [u8],
    max: usize,
    mut deliver: impl FnMut(&[u8]),
) -> Drained {
    let ring = file.ring(1 - end);
    let cap = file.capacity as u64;
    let head = ring.head().load(Ordering::Acquire);
    let mut out = Drained {
        delivered: 0,
        corrupt: false,
    };
    if head == *tail {
        return out;
    }
    if head.wrapping_sub(*tail) > cap || head % 8 != 0 {
        out.corrupt = true;
    }
    while !out.corrupt && *tail != head && out.delivered < max {
        let off = (*tail % cap) as usize;
        let left = head - *tail;
        let len = ring.len_word(off).load(Ordering::Relaxed);
        if len == WRAP {
            let skip = cap - off as u64;
            if skip > left {
                out.corrupt = true;
                break;
            }
            *tail += skip;
            continue;
        }
        let len = len as usize;
        let rec = record_len(len) as u64;
        if len > scratch.len() || rec > cap - off as u64 || rec > left {
            out.corrupt = true;
            break;
        }
        let src = ring.data(off + RECORD_HEADER, len);
        // SAFETY: `src` has `len` bytes in bounds; `scratch` is ours.
        unsafe { std::ptr::copy_nonoverlapping(src, scratch.as_mut_ptr(), len) };
        *tail += rec;
        out.delivered += 1;
        deliver(&scratch[..len]);
    }
    if out.corrupt {
        // Refused: what is queued is dropped; go on from the producer's
        // index as it is now.
        *tail = ring.head().load(Ordering::Acquire);
    }
    ring.tail().store(*tail, Ordering::Release);
    out
}

pub struct ShmTransport {
    /// Our doorbell (read end, opened read-write so it never reports EOF).
    bell: File,
    /// Neighbours' doorbells (write ends), one per neighbour.
    bells: Vec<File>,
    bell_rung: Vec<bool>,
    ports: Vec<ShmPort>,
    /// Index into `ports` of every port number.
    index: Vec<Option<usize>>,
    scratch: Vec<u8>,
    /// Port the next receive round starts at (round robin).
    next_rx: usize,
    /// Whether the need-wakeup words are set (we are about to sleep).
    armed: bool,
    pub counters: TransportCounters,
}

impl ShmTransport {
    /// Maps every port's link file and opens the doorbells. A daemon that
    /// (re)starts drops what was queued to it and goes on writing where its
    /// previous run stopped, so a restarted daemon re-attaches to the rings
    /// and its link epoch tells the neighbours it restarted.
    pub fn open(peers: &[PortPeer], doorbell: &Path, max_datagram: usize) -> Result<Self> {
        let bell = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(doorbell)
            .with_context(|| format!("opening doorbell {}", doorbell.display()))?;
        let mut bells = Vec::new();
        let mut bell_of: HashMap<PathBuf, usize> = HashMap::new();
        let mut ports = Vec::new();
        let mut index = Vec::new();
        for p in peers {
            let (Some(path), Some(end), Some(peer_bell)) = (&p.ring, p.ring_end, &p.peer_doorbell)
            else {
                bail!(
                    "port {}: the shm transport needs a ring, a ring end and the peer's doorbell",
                    p.port
                );
            };
            if end > 1 {
                bail!("port {}: ring end {end} (0 or 1)", p.port);
            }
            let file = LinkFile::open(path)?;
            let bell = match bell_of.get(peer_bell) {
                Some(&i) => i,
                None => {
                    // Read-write: a named pipe opened write-only fails
                    // until its owner has opened it, and neighbours start
                    // in any order (and restart).
                    let f = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(peer_bell)
                        .with_context(|| format!("opening doorbell {}", peer_bell.display()))?;
                    bells.push(f);
                    bell_of.insert(peer_bell.clone(), bells.len() - 1);
                    bells.len() - 1
                }
            };
            let head = file.ring(end).head().load(Ordering::Acquire);
            let tail = file.ring(1 - end).head().load(Ordering::Acquire);
            file.ring(1 - end).tail().store(tail, Ordering::Release);
            file.ring(1 - end).need_wakeup().store(0, Ordering::Relaxed);
            let i = p.port as usize;
            if index.len() <= i {
                index.resize(i + 1, None);
            }
            if index[i].is_some() {
                bail!("port {} is cabled twice", p.port);
            }
            index[i] = Some(ports.len());
            ports.push(ShmPort {
                port: p.port,
                file,
                end,
                head,
                tail,
                bell,
                touched: false,
                path: path.clone(),
            });
        }
        Ok(ShmTransport {
            bell,
            bell_rung: vec![false; bells.len()],
            bells,
            ports,
            index,
            scratch: vec![0; max_datagram.max(1)],
            next_rx: 0,
            armed: false,
            counters: TransportCounters::default(),
        })
    }

    /// The doorbell: readable when a neighbour rang it.
    pub fn raw_fd(&self) -> RawFd {
        self.bell.as_raw_fd()
    }

    /// The link files, by port (for the report of ring memory).
    pub fn ring_files(&self) -> impl Iterator<Item = (PortNo, &Path, usize)> + '_ {
        self.ports
            .iter()
            .map(|p| (p.port, p.path.as_path(), file_len(p.file.capacity)))
    }

    /// Reads up to `max` datagrams from the rings, round robin over the
    /// ports, handing each to `deliver` with its port.
    pub fn recv_batch(&mut self, max: usize, mut deliver: impl FnMut(PortNo, &[u8])) -> usize {
        let n = self.ports.len();
        let mut delivered = 0;
        for k in 0..n {
            if delivered >= max {
                break;
            }
            let i = (self.next_rx + k) % n;
            let p = &mut self.ports[i];
            let port = p.port;
            let d = drain(
                &p.file,
                p.end,
                &mut p.tail,
                &mut self.scratch,
                max - delivered,
                |data| deliver(port, data),
            );
            delivered += d.delivered;
            if d.corrupt {
                self.counters.ring_corrupt += 1;
                if self.counters.ring_corrupt.is_power_of_two() {
                    tracing::warn!(
                        port,
                        count = self.counters.ring_corrupt,
                        "refused a corrupt shared-memory ring (out-of-bounds index or record)"
                    );
                }
            }
        }
        if n > 0 {
            self.next_rx = (self.next_rx + 1) % n;
        }
        self.counters.rx_datagrams += delivered as u64;
        delivered
    }

    /// Writes `data[i]` into the ring of `ports[i]` for every i, then rings
    /// the doorbell of each neighbour that said it sleeps. Every datagram is
    /// taken: one that finds its ring full (a dead or stalled consumer), the
    /// carrier down, or no cable, is lost and counted, as on a wire.
    pub fn send_batch<D: AsRef<[u8]>>(&mut self, ports: &[PortNo], data: &[D]) -> usize {
        let total = ports.len().min(data.len());
        for i in 0..total {
            let buf = data[i].as_ref();
            let Some(Some(k)) = self.index.get(ports[i] as usize) else {
                self.counters.send_errors += 1;
                continue;
            };
            let p = &mut self.ports[*k];
            if buf.len() > self.scratch.len() || record_len(buf.len()) > p.file.capacity / 2 {
                self.counters.oversized += 1;
                continue;
            }
            match p.push(buf) {
                Push::Sent => {
                    p.touched = true;
                    self.counters.tx_datagrams += 1;
                }
                Push::Full => self.counters.ring_full += 1,
                Push::CarrierDown => self.counters.send_errors += 1,
                Push::Corrupt => self.counters.ring_corrupt += 1,
            }
        }
        // Pairs with the fence in `prepare_sleep`: either the consumer sees
        // our new head before it sleeps, or we see its need-wakeup word.
        fence(Ordering::SeqCst);
        for p in self.ports.iter_mut().filter(|p| p.touched) {
            p.touched = false;
            let ring = p.file.ring(p.end);
            if ring.need_wakeup().load(Ordering::Relaxed) != 0
                && ring.need_wakeup().swap(0, Ordering::Relaxed) != 0
                && !self.bell_rung[p.bell]
            {
                self.bell_rung[p.bell] = true;
                let fd = self.bells[p.bell].as_raw_fd();
                // SAFETY: write(2) of one byte from a live buffer.
                let rc = unsafe { libc::write(fd, [1u8].as_ptr() as *const libc::c_void, 1) };
                self.counters.tx_syscalls += 1;
                // A full pipe has been rung already; anything else is a
                // neighbour gone, which its keepalive reports.
                if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                    self.counters.send_errors += 1;
                }
            }
        }
        self.bell_rung.iter_mut().for_each(|r| *r = false);
        total
    }

    /// Before the event loop sleeps: asks every neighbour to ring the
    /// doorbell when it writes, then looks once more. True when something
    /// arrived meanwhile (do not sleep).
    pub fn prepare_sleep(&mut self) -> bool {
        for p in &self.ports {
            p.file
                .ring(1 - p.end)
                .need_wakeup()
                .store(1, Ordering::Relaxed);
        }
        self.armed = true;
        fence(Ordering::SeqCst);
        self.ports.iter().any(ShmPort::readable)
    }

    /// After the event loop woke: empties the doorbell (if `rung`) and tells
    /// the neighbours not to ring it while we are awake.
    pub fn woke(&mut self, rung: bool) {
        if rung {
            let mut buf = [0u8; 64];
            while matches!((&self.bell).read(&mut buf), Ok(n) if n == buf.len()) {}
            self.counters.rx_syscalls += 1;
        }
        if self.armed {
            self.armed = false;
            for p in &self.ports {
                p.file
                    .ring(1 - p.end)
                    .need_wakeup()
                    .store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("flitnet-shm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        Dir(d)
    }

    /// Two transports joined by one link (a's port 3, b's port 5).
    fn pair(d: &Path, cap: usize) -> (ShmTransport, ShmTransport) {
        let ring = d.join("link-0");
        create_link_file(&ring, cap).unwrap();
        for n in ["a", "b"] {
            create_doorbell(&d.join(format!("{n}.bell"))).unwrap();
        }
        let peer = |port, end, bell: &str| PortPeer::shm(port, &ring, end, &d.join(bell));
        let a = ShmTransport::open(&[peer(3, 0, "b.bell")], &d.join("a.bell"), 1400).unwrap();
        let b = ShmTransport::open(&[peer(5, 1, "a.bell")], &d.join("b.bell"), 1400).unwrap();
        (a, b)
    }

    fn recv(t: &mut ShmTransport) -> Vec<(PortNo, Vec<u8>)> {
        let mut got = Vec::new();
        t.recv_batch(10_000, |p, d| got.push((p, d.to_vec())));
        got
    }

    #[test]
    fn datagrams_cross_in_order_and_wrap_around() {
        let d = dir("order");
        let (mut a, mut b) = pair(&d.0, 4096);
        // Many more bytes than the ring holds, sent in rounds: every
        // length, so records wrap at every offset.
        let mut expect = Vec::new();
        for round in 0..40 {
            let data: Vec<Vec<u8>> = (0..7)
                .map(|i| vec![(round * 7 + i) as u8; 1 + (round * 13 + i * 31) % 300])
                .collect();
            assert_eq!(a.send_batch(&[3; 7], &data), 7);
            expect.extend(data.into_iter().map(|v| (5, v)));
            assert_eq!(recv(&mut b), std::mem::take(&mut expect));
        }
        // And back.
        assert_eq!(b.send_batch(&[5], &[b"pong"]), 1);
        assert_eq!(recv(&mut a), vec![(3, b"pong".to_vec())]);
        assert_eq!(a.counters.ring_full + a.counters.ring_corrupt, 0);
        assert_eq!(b.counters.ring_corrupt, 0);
    }

    #[test]
    fn a_full_ring_loses_datagrams_and_the_carrier_pulls_the_cable() {
        let d = dir("full");
        let (mut a, mut b) = pair(&d.0, 4096);
        let big = vec![9u8; 1000];
        let sent = (0..10).filter(|_| {
            let before = a.counters.tx_datagrams;
            a.send_batch(&[3], &[&big]);
            a.counters.tx_datagrams > before
        });
        assert_eq!(sent.count(), 4);
        assert_eq!(a.counters.ring_full, 6);
        assert_eq!(recv(&mut b).len(), 4);
        set_carrier(&d.0.join("link-0"), false).unwrap();
        a.send_batch(&[3], &[b"x"]);
        assert!(recv(&mut b).is_empty());
        assert_eq!(a.counters.send_errors, 1);
        set_carrier(&d.0.join("link-0"), true).unwrap();
        a.send_batch(&[3], &[b"y"]);
        assert_eq!(recv(&mut b), vec![(5, b"y".to_vec())]);
    }

    #[test]
    fn the_doorbell_rings_only_for_a_sleeping_consumer() {
        let d = dir("bell");
        let (mut a, mut b) = pair(&d.0, 4096);
        a.send_batch(&[3], &[b"awake"]);
        assert_eq!(a.counters.tx_syscalls, 0);
        // b has data: it must not sleep.
        assert!(b.prepare_sleep());
        b.woke(false);
        recv(&mut b);
        assert!(!b.prepare_sleep());
        a.send_batch(&[3, 3], &[b"one", b"two"]);
        assert_eq!(a.counters.tx_syscalls, 1, "one bell for the batch");
        let mut fds = [libc::pollfd {
            fd: b.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(fds.as_mut_ptr(), 1, 1000) }, 1);
        b.woke(true);
        assert_eq!(recv(&mut b).len(), 2);
        // Awake again: no bell.
        a.send_batch(&[3], &[b"three"]);
        assert_eq!(a.counters.tx_syscalls, 1);
    }

    #[test]
    fn garbage_in_the_ring_is_refused_and_counted() {
        let d = dir("garbage");
        let (mut a, mut b) = pair(&d.0, 4096);
        let path = d.0.join("link-0");
        let f = LinkFile::open(&path).unwrap();
        let r = f.ring(0);
        // A head beyond the capacity.
        r.head().store(1 << 40, Ordering::Release);
        assert!(recv(&mut b).is_empty());
        assert_eq!(b.counters.ring_corrupt, 1);
        // A record longer than the MTU, then one running past the head.
        for len in [60_000u32, 200] {
            let base = b.ports[0].tail;
            r.len_word((base % 4096) as usize)
                .store(len, Ordering::Relaxed);
            r.head().store(base + 64, Ordering::Release);
            assert!(recv(&mut b).is_empty());
        }
        assert_eq!(b.counters.ring_corrupt, 3);
        // Random bytes over the whole data area and head: never a panic.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            for off in (0..4096).step_by(4) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                r.len_word(off).store(x as u32 % 5000, Ordering::Relaxed);
            }
            r.head()
                .store(b.ports[0].tail + (x % 5000) * 8, Ordering::Release);
            recv(&mut b);
        }
        assert!(b.counters.ring_corrupt > 3);
        // The producer goes on from its own index and b resynchronises.
        a.ports[0].head = r.head().load(Ordering::Acquire);
        a.send_batch(&[3], &[b"after"]);
        assert_eq!(recv(&mut b), vec![(5, b"after".to_vec())]);
    }

    #[test]
    fn a_restarted_consumer_drops_what_was_queued_to_it() {
        let d = dir("restart");
        let (mut a, b) = pair(&d.0, 4096);
        a.send_batch(&[3], &[b"lost"]);
        drop(b);
        let ring = d.0.join("link-0");
        let mut b = ShmTransport::open(
            &[PortPeer::shm(5, &ring, 1, &d.0.join("a.bell"))],
            &d.0.join("b.bell"),
            1400,
        )
        .unwrap();
        assert!(recv(&mut b).is_empty());
        a.send_batch(&[3], &[b"new"]);
        assert_eq!(recv(&mut b), vec![(5, b"new".to_vec())]);
    }

    #[test]
    fn files_that_are_not_ring_files_are_refused() {
        let d = dir("refuse");
        let p = d.0.join("x");
        std::fs::write(&p, vec![0u8; 9000]).unwrap();
        let e = LinkFile::open(&p).err().unwrap().to_string();
        assert!(e.contains("not a flitnet ring file"), "{e}");
        assert!(create_link_file(&d.0.join("y"), 5000).is_err());
    }
}
