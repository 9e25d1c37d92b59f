//! A host's IP interface: a TUN device (docs/ip.md), created in the host's
//! network namespace and read and written without blocking from the
//! daemon's `ppoll` loop.
//!
//! The device is opened with two `ioctl`s through `libc` rather than a TUN
//! crate: the loop needs one non-blocking descriptor it polls itself, and
//! the crates add async runtimes or address handling that iproute2 does
//! here.

use crate::transport::ethernet::Netns;
use anyhow::{bail, Context, Result};
use flitnet_core::control::TunConfig;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;

/// `TUNSETIFF` (linux/if_tun.h: `_IOW('T', 202, int)`).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// An open TUN device.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    device: String,
}

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Tun {
    /// Creates the device `cfg.device` in `cfg.netns` (the calling thread
    /// steps in to create it and back out; the descriptor stays usable),
    /// gives it `addr` in `cfg.plan`'s subnet and the MTU, and sets it and
    /// the namespace's loopback up. With `rto_min_ms`, the route to the
    /// fabric's subnet gets that TCP minimum retransmission timeout (a
    /// time-dilated fabric, docs/ip.md "Time dilation").
    pub fn open(cfg: &TunConfig, addr: Ipv4Addr, rto_min_ms: Option<u64>) -> Result<Tun> {
        let ns = cfg.netns.as_deref().map(Netns::enter).transpose()?;
        let opened = open_device(&cfg.device);
        if let Some(ns) = ns {
            ns.leave()?;
        }
        let fd = opened?;
        let prefix = format!("{addr}/{}", cfg.plan.prefix_len());
        let mtu = cfg.mtu.to_string();
        let d = cfg.device.as_str();
        for args in [
            vec!["addr", "add", prefix.as_str(), "dev", d],
            vec!["link", "set", "dev", d, "mtu", mtu.as_str(), "up"],
            vec!["link", "set", "dev", "lo", "up"],
        ] {
            ip(cfg.netns.as_deref(), &args)?;
        }
        if let Some(ms) = rto_min_ms {
            let plan = cfg.plan.to_string();
            let rto = format!("{ms}ms");
            ip(
                cfg.netns.as_deref(),
                &["route", "replace", &plan, "dev", d, "rto_min", &rto],
            )?;
        }
        Ok(Tun {
            fd,
            device: cfg.device.clone(),
        })
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reads one IP packet into `buf`; `Ok(None)` when none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe { libc::read(self.raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(n as usize))
    }

    /// Writes one IP packet; false if the device would block (the packet
    /// is dropped, as a full receive ring would).
    pub fn write(&self, packet: &[u8]) -> io::Result<bool> {
        // SAFETY: packet is valid for reads of its length.
        let n = unsafe { libc::write(self.raw_fd(), packet.as_ptr().cast(), packet.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(false),
                _ => Err(e),
            };
        }
        Ok(true)
    }
}

fn open_device(name: &str) -> Result<OwnedFd> {
    if name.len() >= libc::IFNAMSIZ {
        bail!(
            "tun device name `{name}` is longer than {} characters",
            libc::IFNAMSIZ - 1
        );
    }
    // SAFETY: open(2) with a constant NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error())
            .context("opening /dev/net/tun (needs root or CAP_NET_ADMIN)");
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes a struct ifreq, which IfReq lays out.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut req) } < 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("creating tun device `{name}` (TUNSETIFF)"));
    }
    Ok(fd)
}

fn ip(netns: Option<&str>, args: &[&str]) -> Result<()> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    let out = cmd
        .args(args)
        .output()
        .context("running `ip` (iproute2 configures the tun device)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
