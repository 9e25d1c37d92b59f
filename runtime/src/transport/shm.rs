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
//! | 8 | 4 | version (2) |
//! | 12 | 4 | capacity `C` of each ring's data area, bytes (a power of two) |
//! | 16 | 4 | `replaced`: non-zero once a fresh file took this one's path |
//! | 20 | 4 | `attached` of end `a`: non-zero once a daemon mapped that end |
//! | 24 | 4 | `attached` of end `b` |
//! | 64 | 192 + C | ring 0: written by the link's end `a`, read by `b` |
//! | 256 + C | 192 + C | ring 1: written by `b`, read by `a` |
//!
//! A ring: `head` (u64 at +0, bytes ever written, written by the producer
//! only), `tail` (u64 at +64, bytes ever consumed, consumer only),
//! `need-wakeup` (u32 at +72, consumer sets it before it sleeps),
//! `wake-at` (u64 at +80, the wall instant the sleeping consumer wakes by
//! itself),
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
//!
//! A restarted daemon does not reuse its previous run's rings: finding its
//! end of a link file already attached, it puts a fresh file (empty rings,
//! the carrier as it was) at the link's path and marks the old one
//! `replaced`; the neighbour, which looks at that word on every receive
//! round, maps the fresh file and drops what the old one still held. Both
//! ends then start from empty rings, and the restarted daemon's new link
//! epoch makes the link layers resynchronise, as after any restart.

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
pub const VERSION: u32 = 2;
const LINE: usize = 64;
/// Bytes before ring 0.
const FILE_HEADER: usize = LINE;
/// File header words: the file was replaced; end `e` was attached (at
/// `ATTACHED + 4 e`).
const REPLACED: usize = 16;
const ATTACHED: usize = 20;
/// Bytes of a ring's index words before its data area.
const RING_HEADER: usize = 3 * LINE;
const HEAD: usize = 0;
const TAIL: usize = LINE;
const NEED_WAKEUP: usize = LINE + 8;
const WAKE_AT: usize = LINE + 16;
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

/// A link file's image in memory, its header checked: a shared mapping of
/// the file, or (for [`read_image`]) memory the caller lends.
struct LinkFile {
    base: *mut u8,
    len: usize,
    capacity: usize,
    /// Keeps `base..base + len` mapped (None: borrowed memory).
    _map: Option<MmapRaw>,
}

// SAFETY: the pointer is into a mapping the struct owns (MmapRaw is Send);
// all access through it is by atomics or bounds-checked copies.
unsafe impl Send for LinkFile {}

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
        // SAFETY: the mapping is `map.len()` bytes, page-aligned, and is
        // kept alive by the struct.
        unsafe { LinkFile::checked(map.as_mut_ptr(), map.len(), Some(map)) }
            .with_context(|| path.display().to_string())
    }

    /// Checks the header of the image at `base` (`len` bytes, 8-aligned).
    ///
    /// # Safety
    /// `base..base + len` must stay valid for reads and writes, by atomics
    /// and copies, while the result lives.
    unsafe fn checked(base: *mut u8, len: usize, map: Option<MmapRaw>) -> Result<LinkFile> {
        if len < FILE_HEADER {
            bail!("{len} bytes, too short for a ring file");
        }
        if base as usize % 8 != 0 {
            bail!("a ring file image must be 8-aligned");
        }
        let f = LinkFile {
            base,
            len,
            capacity: 0,
            _map: map,
        };
        let magic = f.u64_at(0).load(Ordering::Relaxed);
        let version = f.u32_at(8).load(Ordering::Relaxed);
        let capacity = f.u32_at(12).load(Ordering::Relaxed) as usize;
        if magic != MAGIC || version != VERSION {
            bail!("not a flitnet ring file (version {VERSION})");
        }
        if !capacity.is_power_of_two()
            || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity)
            || file_len(capacity) != len
        {
            bail!("ring capacity {capacity} does not match the file's {len} bytes");
        }
        Ok(LinkFile { capacity, ..f })
    }

    /// The u64 word at `offset` (8-aligned, inside the image).
    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.len);
        // SAFETY: in bounds and aligned (the image is 8-aligned); the word
        // lives as long as the image, borrowed through `self`.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0 && offset + 4 <= self.len);
        // SAFETY: as `u64_at`.
        unsafe { &*(self.base.add(offset) as *const AtomicU32) }
    }

    fn ring(&self, end: u8) -> Ring<'_> {
        Ring {
            file: self,
            base: ring_offset(end, self.capacity),
        }
    }

    /// Whether a fresh file has taken this one's path.
    fn replaced(&self) -> bool {
        self.u32_at(REPLACED).load(Ordering::Acquire) != 0
    }

    /// Marks end `end` attached; true when it was already (a restart).
    fn attach(&self, end: u8) -> bool {
        self.u32_at(ATTACHED + 4 * end as usize)
            .swap(1, Ordering::AcqRel)
            != 0
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
    fn wake_at(&self) -> &AtomicU64 {
        self.file.u64_at(self.base + WAKE_AT)
    }
    fn carrier_down(&self) -> &AtomicU32 {
        self.file.u32_at(self.base + CARRIER_DOWN)
    }
    /// Pointer to data-area offset `off`, `len` bytes of which are in bounds.
    fn data(&self, off: usize, len: usize) -> *mut u8 {
        assert!(off + len <= self.file.capacity);
        // SAFETY: the data area is inside the image (checked at open).
        unsafe { self.file.base.add(self.base + RING_HEADER + off) }
    }
    /// The record length word at data-area offset `off` (8-aligned).
    fn len_word(&self, off: usize) -> &AtomicU32 {
        self.file.u32_at(self.base + RING_HEADER + off)
    }
}

/// Sets the carrier of both rings of the link file at `path` down (or
/// up): a pulled cable. Producers drop what they would write; the ends
/// notice by keepalive timeout, as on a veth pair whose carrier is down.
/// Under the ring directory's lock, so that a restarting daemon replacing
/// the file copies the carrier as it is.
pub fn set_carrier(path: &Path, up: bool) -> Result<()> {
    let _lock = DirLock::take(path)?;
    let f = LinkFile::open(path)?;
    for end in [0, 1] {
        f.ring(end)
            .carrier_down()
            .store(u32::from(!up), Ordering::Release);
    }
    Ok(())
}

/// An exclusive `flock` on the directory of a link file: replacing a file
/// and pulling a cable are done one at a time per fabric. Held until
/// dropped (closing the descriptor releases it).
struct DirLock {
    _dir: File,
}

impl DirLock {
    fn take(link_file: &Path) -> Result<DirLock> {
        let dir = link_file.parent().unwrap_or(Path::new("."));
        let f = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
        // SAFETY: flock(2) on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("locking {}", dir.display()));
        }
        Ok(DirLock { _dir: f })
    }
}

/// Puts a fresh link file (empty rings, the carrier as it is now) at
/// `path` in place of the one there, and marks that one replaced, so that
/// the other end follows. What a restarted daemon does instead of reusing
/// the rings its previous run left.
fn replace_link_file(path: &Path) -> Result<()> {
    let _lock = DirLock::take(path)?;
    let old = LinkFile::open(path)?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.fresh", std::process::id()));
    let fresh_path = path.with_file_name(name);
    let _ = std::fs::remove_file(&fresh_path);
    create_link_file(&fresh_path, old.capacity)?;
    let fresh = LinkFile::open(&fresh_path)?;
    for end in [0, 1] {
        let down = old.ring(end).carrier_down().load(Ordering::Acquire);
        fresh
            .ring(end)
            .carrier_down()
            .store(down, Ordering::Release);
    }
    std::fs::rename(&fresh_path, path)
        .with_context(|| format!("renaming {} to {}", fresh_path.display(), path.display()))?;
    old.u32_at(REPLACED).store(1, Ordering::Release);
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
            self.head = self.head.wrapping_add(contiguous);
            off = 0;
        }
        let dst = ring.data(off as usize + RECORD_HEADER, data.len());
        // SAFETY: `dst` has `data.len()` bytes in bounds (checked by
        // `data`); shared memory never overlaps the caller's buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        ring.len_word(off as usize)
            .store(data.len() as u32, Ordering::Relaxed);
        self.head = self.head.wrapping_add(rec);
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
    if head.wrapping_sub(*tail) > cap || head % 8 != 0 || *tail % 8 != 0 {
        out.corrupt = true;
    }
    while !out.corrupt && *tail != head && out.delivered < max {
        let off = (*tail % cap) as usize;
        // Indices count bytes modulo 2^64 (an untrusted one may be near
        // the end): wrapping arithmetic throughout.
        let left = head.wrapping_sub(*tail);
        let len = ring.len_word(off).load(Ordering::Relaxed);
        if len == WRAP {
            let skip = cap - off as u64;
            if skip > left {
                out.corrupt = true;
                break;
            }
            *tail = tail.wrapping_add(skip);
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
        *tail = tail.wrapping_add(rec);
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

/// What [`read_image`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRead {
    /// The reader's index afterwards (stored in the image's `tail` too).
    pub tail: u64,
    /// Datagrams handed to `deliver`.
    pub delivered: usize,
    /// The ring was refused as out of bounds (and the reader resynchronised).
    pub corrupt: bool,
}

/// Reads the ring end `end` reads in the link-file image `image`, as a
/// daemon does, treating every byte of it as untrusted: checks the header,
/// starts from `tail` (None: where a daemon attaching to the image would),
/// and hands up to `max` datagrams of at most `max_datagram` bytes to
/// `deliver`. The daemons read shared memory through the same code; this
/// entry point lets the reader be driven with arbitrary bytes (fuzzing).
/// An image that is not 8-aligned, or whose header is not a ring file's, is
/// an error.
pub fn read_image(
    image: &mut [u8],
    end: u8,
    tail: Option<u64>,
    max_datagram: usize,
    max: usize,
    deliver: impl FnMut(&[u8]),
) -> Result<ImageRead> {
    if end > 1 {
        bail!("ring end {end} (0 or 1)");
    }
    // SAFETY: `image` is borrowed mutably for the whole life of `file`.
    let file = unsafe { LinkFile::checked(image.as_mut_ptr(), image.len(), None)? };
    let mut tail = tail.unwrap_or_else(|| indices_at_attach(&file, end).1);
    let mut scratch = vec![0; max_datagram];
    let d = drain(&file, end, &mut tail, &mut scratch, max, deliver);
    Ok(ImageRead {
        tail,
        delivered: d.delivered,
        corrupt: d.corrupt,
    })
}

/// Maps the link file at `path` as end `end`. If that end was attached
/// before, the previous daemon at this end has died and this is its
/// restart: a fresh file takes the path (the old one is marked replaced,
/// for the peer to follow) and is mapped instead. True when it did so.
fn attach_link_file(path: &Path, end: u8) -> Result<(LinkFile, bool)> {
    let file = LinkFile::open(path)?;
    if !file.attach(end) {
        return Ok((file, false));
    }
    drop(file);
    replace_link_file(path)?;
    let file = LinkFile::open(path)?;
    file.attach(end);
    Ok((file, true))
}

/// The indices a daemon starts from at end `end` of `file`: it writes on
/// from its ring's `head` and reads from the other ring's `tail` (both 0
/// in a fresh file, so nothing the peer wrote first is lost), each rounded
/// down to a record boundary since the words are untrusted.
fn indices_at_attach(file: &LinkFile, end: u8) -> (u64, u64) {
    let head = file.ring(end).head().load(Ordering::Acquire) & !7;
    let tail = file.ring(1 - end).tail().load(Ordering::Acquire) & !7;
    (head, tail)
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
    /// A neighbour that wakes by itself within this many wall ns is not
    /// rung ([`crate::clock::input_slack_ns`]).
    input_slack_ns: u64,
    pub counters: TransportCounters,
}

impl ShmTransport {
    /// Maps every port's link file and opens the doorbells. A restarted
    /// daemon (its end of a link file was attached before) puts fresh files
    /// in place of its previous run's and rings its neighbours, which
    /// follow; its link epoch tells them it restarted.
    pub fn open(peers: &[PortPeer], doorbell: &Path, max_datagram: usize) -> Result<Self> {
        let mut rings_replaced = 0;
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
            let (file, replaced) = attach_link_file(path, end)?;
            if replaced {
                rings_replaced += 1;
            }
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
            let (head, tail) = indices_at_attach(&file, end);
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
        let mut t = ShmTransport {
            bell,
            bell_rung: vec![false; bells.len()],
            bells,
            ports,
            index,
            scratch: vec![0; max_datagram.max(1)],
            next_rx: 0,
            armed: false,
            input_slack_ns: 0,
            counters: TransportCounters {
                ring_replaced: rings_replaced,
                ..TransportCounters::default()
            },
        };
        if rings_replaced > 0 {
            // Neighbours asleep in ppoll follow the fresh files now.
            for i in 0..t.bells.len() {
                t.ring_bell(i);
            }
        }
        Ok(t)
    }

    /// Sets the input slack, wall ns (0, the default: ring every sleeping
    /// neighbour).
    pub fn set_input_slack(&mut self, ns: u64) {
        self.input_slack_ns = ns;
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
            if self.ports[i].file.replaced() {
                self.follow_replacement(i);
            }
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
            let Some(&Some(k)) = self.index.get(ports[i] as usize) else {
                self.counters.send_errors += 1;
                continue;
            };
            if self.ports[k].file.replaced() {
                self.follow_replacement(k);
            }
            let p = &mut self.ports[k];
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
        // A consumer that wakes by itself within the input slack finds the
        // datagrams then.
        let soon = match self.input_slack_ns {
            0 => 0,
            slack => crate::clock::wall_ns().saturating_add(slack),
        };
        for p in self.ports.iter_mut().filter(|p| p.touched) {
            p.touched = false;
            let ring = p.file.ring(p.end);
            if ring.need_wakeup().load(Ordering::Acquire) != 0
                && ring.wake_at().load(Ordering::Relaxed) > soon
                && ring.need_wakeup().swap(0, Ordering::Relaxed) != 0
                && !self.bell_rung[p.bell]
            {
                self.bell_rung[p.bell] = true;
            }
        }
        for b in 0..self.bells.len() {
            if std::mem::take(&mut self.bell_rung[b]) {
                self.ring_bell(b);
            }
        }
        total
    }

    /// Writes one byte to neighbour `b`'s doorbell.
    fn ring_bell(&mut self, b: usize) {
        let fd = self.bells[b].as_raw_fd();
        // SAFETY: write(2) of one byte from a live buffer.
        let rc = unsafe { libc::write(fd, [1u8].as_ptr() as *const libc::c_void, 1) };
        self.counters.tx_syscalls += 1;
        // A full pipe has been rung already; anything else is a neighbour
        // gone, which its keepalive reports.
        if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
            self.counters.send_errors += 1;
        }
    }

    /// The peer of `ports[i]` restarted and put a fresh link file in place
    /// of the one mapped: map that one instead, from empty rings (what the
    /// old one held is dropped, as datagrams in flight to a restarting
    /// peer are).
    fn follow_replacement(&mut self, i: usize) {
        let p = &mut self.ports[i];
        match LinkFile::open(&p.path) {
            Ok(file) => {
                file.attach(p.end);
                let (head, tail) = indices_at_attach(&file, p.end);
                if self.armed {
                    // No wake-up time known here: ring for anything.
                    let ring = file.ring(1 - p.end);
                    ring.wake_at().store(u64::MAX, Ordering::Relaxed);
                    ring.need_wakeup().store(1, Ordering::Release);
                }
                p.file = file;
                p.head = head;
                p.tail = tail;
                self.counters.ring_reattached += 1;
                tracing::info!(
                    port = p.port,
                    "the peer restarted with fresh rings: attached to them"
                );
            }
            Err(e) => {
                // The old file stays mapped; the next round tries again.
                self.counters.send_errors += 1;
                tracing::warn!(port = p.port, "following a replaced ring file: {e:#}");
            }
        }
    }

    /// Before the event loop sleeps until the wall instant `until`: asks
    /// every neighbour to ring the doorbell when it writes (unless `until`
    /// is close), then looks once more. True when something arrived
    /// meanwhile (do not sleep).
    pub fn prepare_sleep(&mut self, until: u64) -> bool {
        for p in &self.ports {
            let ring = p.file.ring(1 - p.end);
            ring.wake_at().store(until, Ordering::Relaxed);
            // Release: a producer that sees the request sees its time.
            ring.need_wakeup().store(1, Ordering::Release);
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
        assert!(b.prepare_sleep(u64::MAX));
        b.woke(false);
        recv(&mut b);
        assert!(!b.prepare_sleep(u64::MAX));
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
    fn a_neighbour_waking_within_the_input_slack_is_not_rung() {
        let d = dir("slack");
        let (mut a, mut b) = pair(&d.0, 4096);
        a.set_input_slack(1_000_000_000);
        // b sleeps until 0.5 s from now: within a's slack of 1 s.
        let now = crate::clock::wall_ns();
        assert!(!b.prepare_sleep(now + 500_000_000));
        a.send_batch(&[3], &[b"later"]);
        assert_eq!(a.counters.tx_syscalls, 0, "rung though b wakes soon");
        // b finds the datagram when it wakes by itself.
        b.woke(false);
        assert_eq!(recv(&mut b), vec![(5, b"later".to_vec())]);
        // Sleeping for 10 s, b is rung.
        assert!(!b.prepare_sleep(now + 10_000_000_000));
        a.send_batch(&[3], &[b"now"]);
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
    fn a_restarted_daemon_gets_fresh_rings_and_its_peer_follows() {
        let d = dir("restart");
        let (mut a, b) = pair(&d.0, 4096);
        let ring = d.0.join("link-0");
        a.send_batch(&[3], &[b"lost"]);
        drop(b);
        let old = LinkFile::open(&ring).unwrap();
        set_carrier(&ring, false).unwrap();
        let reopen = || {
            ShmTransport::open(
                &[PortPeer::shm(5, &ring, 1, &d.0.join("a.bell"))],
                &d.0.join("b.bell"),
                1400,
            )
            .unwrap()
        };
        let mut b = reopen();
        assert_eq!(b.counters.ring_replaced, 1);
        assert!(old.replaced(), "the previous run's file is marked replaced");
        assert_eq!(old.ring(0).head().load(Ordering::Acquire), 16);
        // The fresh file: empty rings, the carrier as it was (down), and
        // the peer's doorbell rung so that a sleeping peer follows.
        let fresh = LinkFile::open(&ring).unwrap();
        assert!(!fresh.replaced());
        assert_eq!(fresh.ring(0).head().load(Ordering::Acquire), 0);
        assert_ne!(fresh.ring(0).carrier_down().load(Ordering::Acquire), 0);
        assert_eq!(b.counters.tx_syscalls, 1);
        set_carrier(&ring, true).unwrap();
        assert!(recv(&mut b).is_empty());
        // The peer follows as soon as it sends (or receives).
        a.send_batch(&[3], &[b"new"]);
        assert_eq!(a.counters.ring_reattached, 1);
        assert_eq!(recv(&mut b), vec![(5, b"new".to_vec())]);
        b.send_batch(&[5], &[b"back"]);
        assert_eq!(recv(&mut a), vec![(3, b"back".to_vec())]);
        // A second restart replaces the file again.
        drop(b);
        let mut b = reopen();
        assert_eq!(b.counters.ring_replaced, 1);
        b.send_batch(&[5], &[b"again"]);
        assert_eq!(recv(&mut a), vec![(3, b"again".to_vec())]);
        assert_eq!(a.counters.ring_reattached, 2);
        assert_eq!(a.counters.ring_corrupt + b.counters.ring_corrupt, 0);
        // Nothing left over in the directory but the link and the bells.
        let mut names: Vec<_> = std::fs::read_dir(&d.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["a.bell", "b.bell", "link-0"]);
    }

    #[test]
    fn an_image_of_random_bytes_is_refused_or_read_within_bounds() {
        let mut image = vec![0u64; file_len(4096) / 8];
        let bytes = |v: &mut Vec<u64>| -> &mut [u8] {
            // SAFETY: a u64 buffer viewed as bytes (alignment 8).
            unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, v.len() * 8) }
        };
        assert!(read_image(bytes(&mut image), 1, None, 1400, 64, |_| {}).is_err());
        let d = dir("image");
        create_link_file(&d.0.join("l"), 4096).unwrap();
        let file = std::fs::read(d.0.join("l")).unwrap();
        bytes(&mut image).copy_from_slice(&file);
        let r = read_image(bytes(&mut image), 1, None, 1400, 64, |_| unreachable!()).unwrap();
        assert_eq!((r.tail, r.delivered, r.corrupt), (0, 0, false));
        // A misaligned reader index is refused, never used.
        let r = read_image(bytes(&mut image), 1, Some(3), 1400, 64, |_| {}).unwrap();
        assert!(r.corrupt);
    }

    #[test]
    fn files_that_are_not_ring_files_are_refused() {
        let d = dir("refuse");
        let p = d.0.join("x");
        std::fs::write(&p, vec![0u8; 9000]).unwrap();
        let e = format!("{:#}", LinkFile::open(&p).err().unwrap());
        assert!(e.contains("not a flitnet ring file"), "{e}");
        assert!(create_link_file(&d.0.join("y"), 5000).is_err());
    }
}
