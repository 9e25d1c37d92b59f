//! The cabling of an Ethernet-transport fabric: one network namespace per
//! run holding one veth pair per link, made with iproute2 (`ip`) and
//! deleted again when the run ends or fails ([`EthernetNet`]'s `Drop`).
//!
//! Interface names are deterministic and short (Linux allows 15
//! characters): `n<node index>p<port>`, node index as in the daemons'
//! loopback addresses (hosts first, then switches), so `n17p3` is port 3 of
//! node 17. MAC addresses are locally administered and just as
//! deterministic: `02:f1:<index, 2 bytes>:<port, 2 bytes>`.

use anyhow::{bail, Context, Result};
use flitnet_core::control::MAX_INTERFACE_NAME;
use flitnet_core::topology::{NodeRef, PortRef, Topology};
use std::io::Write;
use std::process::{Command, Stdio};

/// Name of the interface of `end` (node number `index`).
pub fn interface_name(index: usize, port: u16) -> String {
    format!("n{index}p{port}")
}

/// MAC address of the interface of port `port` of node number `index`.
pub fn interface_mac(index: usize, port: u16) -> [u8; 6] {
    let [_, _, i1, i0] = (index as u32).to_be_bytes();
    let [p1, p0] = port.to_be_bytes();
    [0x02, 0xf1, i1, i0, p1, p0]
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A namespace name of our own: letters, digits, `-`, `_`, `.`.
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 64
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        bail!("`{name}` is not a usable network namespace name (1..=64 of A-Z a-z 0-9 - _ .)");
    }
    Ok(())
}

/// Runs `ip ARGS` (with `stdin` as its input, for `-batch -`); fails with
/// the command and what it printed.
pub fn ip(args: &[&str], stdin: Option<&str>) -> Result<()> {
    let mut child = Command::new("ip")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running `ip` (iproute2 is needed for network namespaces and veth pairs)")?;
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(text.as_bytes())
            .context("writing to `ip -batch`")?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Sets interfaces `names` of namespace `ns` up or down.
pub fn set_up(ns: &str, names: &[String], up: bool) -> Result<()> {
    let state = if up { "up" } else { "down" };
    let batch: String = names
        .iter()
        .map(|n| format!("link set dev {n} {state}\n"))
        .collect();
    ip(&["-n", ns, "-batch", "-"], Some(&batch))
        .with_context(|| format!("setting {} {state} in `{ns}`", names.join(", ")))
}

/// A network namespace with the fabric's veth pairs; deleted on drop
/// (which deletes every interface in it) unless [`EthernetNet::keep`].
#[derive(Debug)]
pub struct EthernetNet {
    name: String,
    keep: bool,
}

impl EthernetNet {
    /// Creates namespace `name` and one veth pair per link of `topo`, both
    /// ends up, each end with the MTU `mtu` (at least 1500).
    pub fn create(name: &str, topo: &Topology, mtu: usize) -> Result<EthernetNet> {
        check_name(name)?;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("the ethernet transport creates a network namespace and veth pairs: run as root (or with CAP_NET_ADMIN and CAP_SYS_ADMIN)");
        }
        ip(&["netns", "add", name], None)
            .with_context(|| format!("creating network namespace `{name}`"))?;
        // From here on, a failure deletes the namespace again.
        let net = EthernetNet {
            name: name.to_string(),
            keep: false,
        };
        let mtu = mtu.max(1500);
        let index = |n: NodeRef| match n {
            NodeRef::Host(h) => h as usize,
            NodeRef::Switch(s) => topo.num_hosts() + s as usize,
        };
        let mut batch = String::new();
        let mut up = String::new();
        for l in &topo.links {
            let end = |p: PortRef| {
                let i = index(p.node);
                (
                    interface_name(i, p.port),
                    mac_text(interface_mac(i, p.port)),
                )
            };
            let (a, a_mac) = end(l.a);
            let (b, b_mac) = end(l.b);
            for n in [&a, &b] {
                if n.len() > MAX_INTERFACE_NAME {
                    bail!("interface name `{n}` is longer than {MAX_INTERFACE_NAME} characters");
                }
            }
            // `name` and `dev` spelled out: `ip` reads a bare `a` as `address`.
            batch.push_str(&format!(
                "link add name {a} mtu {mtu} address {a_mac} type veth peer name {b} mtu {mtu} address {b_mac}\n"
            ));
            up.push_str(&format!("link set dev {a} up\nlink set dev {b} up\n"));
        }
        batch.push_str(&up);
        ip(&["-n", name, "-batch", "-"], Some(&batch))
            .with_context(|| format!("creating the veth pairs in `{name}`"))?;
        Ok(net)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Leaves the namespace behind on drop (a detached fabric; `flitctl
    /// down` deletes it).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Deletes a namespace by name (`flitctl down`).
    pub fn delete(name: &str) -> Result<()> {
        ip(&["netns", "del", name], None)
    }

    /// Whether namespace `name` exists.
    pub fn exists(name: &str) -> bool {
        std::path::Path::new("/var/run/netns").join(name).exists()
    }
}

impl Drop for EthernetNet {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        // The veths go with the namespace once the daemons' sockets in it
        // are closed; the name is gone at once.
        if let Err(e) = EthernetNet::delete(&self.name) {
            eprintln!("warning: deleting network namespace {}: {e:#}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_macs_are_deterministic_and_short() {
        assert_eq!(interface_name(17, 3), "n17p3");
        assert_eq!(interface_mac(0x1234, 0x0203), [2, 0xf1, 0x12, 0x34, 2, 3]);
        assert_eq!(mac_text(interface_mac(1, 2)), "02:f1:00:01:00:02");
        assert!(check_name("flitnet-1a2b").is_ok());
        assert!(check_name("../etc").is_err());
        assert!(check_name("a b").is_err());
    }

    #[test]
    fn a_namespace_is_deleted_on_drop_and_when_wiring_it_fails() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skipped: network namespaces need root");
            return;
        }
        let topo = flitnet_core::topology::generators::kary_ntree(2, 1).unwrap();
        let name = format!("flitnet-u{}", std::process::id());
        let net = EthernetNet::create(&name, &topo, 1402).unwrap();
        assert!(EthernetNet::exists(&name));
        // Taken: refused, and the existing one is left alone.
        let err = EthernetNet::create(&name, &topo, 1402).unwrap_err();
        assert!(format!("{err:#}").contains(&name), "{err:#}");
        assert!(EthernetNet::exists(&name));
        drop(net);
        assert!(!EthernetNet::exists(&name));
        // veths cannot have a 70 000-byte MTU: the namespace made just
        // before is deleted again.
        let err = EthernetNet::create(&name, &topo, 70_000).unwrap_err();
        assert!(
            format!("{err:#}").contains("creating the veth pairs"),
            "{err:#}"
        );
        assert!(!EthernetNet::exists(&name), "left behind after a failure");
    }
}
