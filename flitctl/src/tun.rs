//! IP interfaces for a local fabric (`--tun`, docs/ip.md): one network
//! namespace per host, named after the run and the host so that parallel
//! runs never collide, in which the host's `hostd` creates its TUN device;
//! an `/etc/netns/<ns>/hosts` file per namespace so that host names resolve
//! inside it (`ip netns exec` bind-mounts it over /etc/hosts); all deleted
//! again when the run ends ([`TunNet`]'s `Drop`, or `flitctl down`).

use crate::netns::{check_name, EthernetNet};
use anyhow::{bail, Context, Result};
use flitnet_core::control::TunConfig;
use flitnet_core::host::ip::{self, IpPlan};
use flitnet_core::topology::{NodeRef, Topology};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// The device name inside every host's namespace.
pub const DEVICE: &str = "flit0";

/// What `--tun` asks for.
#[derive(Clone, Debug, Default)]
pub struct TunOptions {
    /// The hosts' subnet (default `10.<fabric octet>.0.0/16`).
    pub plan: Option<IpPlan>,
    /// The devices' MTU (default [`ip::interface_mtu`]).
    pub mtu: Option<u32>,
}

/// One host's IP interface, as `state.json` records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunHost {
    pub name: String,
    pub netns: String,
    pub address: Ipv4Addr,
}

/// The IP side of a fabric, as `state.json` records it (`flitctl exec`,
/// `flitctl down`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunState {
    pub plan: IpPlan,
    pub mtu: u32,
    pub hosts: Vec<TunHost>,
}

impl TunState {
    /// Host `name`'s interface.
    pub fn host(&self, name: &str) -> Option<&TunHost> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// The hosts file every namespace gets.
    fn hosts_file(&self) -> String {
        let mut s = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost\n");
        for h in &self.hosts {
            s.push_str(&format!("{}\t{}\n", h.address, h.name));
        }
        s
    }
}

/// The namespace of host `host` of the run whose token starts with `run`.
pub fn netns_name(run: &str, host: &str) -> String {
    format!("flt-{run}-{host}")
}

fn etc_dir(netns: &str) -> PathBuf {
    PathBuf::from("/etc/netns").join(netns)
}

/// The per-host namespaces of a fabric; deleted on drop unless kept.
#[derive(Debug)]
pub struct TunNet {
    state: TunState,
    keep: bool,
}

impl TunNet {
    /// Plans the interfaces of `topo`'s hosts (refusing a subnet too small
    /// or an MTU out of range, before anything is made), then creates one
    /// namespace per host with its hosts file.
    pub fn create(
        run: &str,
        topo: &Topology,
        opts: &TunOptions,
        default_plan: IpPlan,
        default_mtu: u32,
    ) -> Result<TunNet> {
        let plan = opts.plan.unwrap_or(default_plan);
        plan.check_hosts(topo.num_hosts() as u64)
            .map_err(|e| anyhow::anyhow!("--tun-subnet: {e}"))?;
        let mtu = opts.mtu.unwrap_or(default_mtu);
        if !(flitnet_core::control::MIN_TUN_MTU..=65_535).contains(&mtu) {
            bail!(
                "--tun-mtu {mtu} must be {}..=65535",
                flitnet_core::control::MIN_TUN_MTU
            );
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("--tun creates a network namespace and a TUN device per host: run as root (or with CAP_NET_ADMIN and CAP_SYS_ADMIN)");
        }
        let hosts: Vec<TunHost> = (0..topo.num_hosts() as u32)
            .map(|h| {
                let name = topo.node_name(NodeRef::Host(h)).to_string();
                TunHost {
                    netns: netns_name(run, &name),
                    address: plan.address(h),
                    name,
                }
            })
            .collect();
        for h in &hosts {
            check_name(&h.netns).with_context(|| format!("host {}", h.name))?;
            if EthernetNet::exists(&h.netns) {
                bail!("network namespace {} exists already", h.netns);
            }
        }
        let mut net = TunNet {
            state: TunState {
                plan,
                mtu,
                hosts: hosts.clone(),
            },
            keep: false,
        };
        let file = TunState {
            plan,
            mtu,
            hosts: hosts.clone(),
        }
        .hosts_file();
        // Deleted again by drop if any step fails: only what was made.
        let planned = std::mem::take(&mut net.state.hosts);
        for h in planned {
            let status = std::process::Command::new("ip")
                .args(["netns", "add", &h.netns])
                .status()
                .context("running `ip` (iproute2 is needed for --tun)")?;
            if !status.success() {
                bail!("creating network namespace {}", h.netns);
            }
            net.state.hosts.push(h.clone());
            let dir = etc_dir(&h.netns);
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(dir.join("hosts"), &file))
                .with_context(|| format!("writing {}/hosts", dir.display()))?;
        }
        Ok(net)
    }

    pub fn state(&self) -> &TunState {
        &self.state
    }

    /// The daemon configuration of host `h`'s interface.
    pub fn config(&self, h: usize) -> TunConfig {
        TunConfig {
            netns: Some(self.state.hosts[h].netns.clone()),
            device: DEVICE.to_string(),
            plan: self.state.plan,
            mtu: self.state.mtu,
        }
    }

    /// Leaves everything behind on drop (a detached fabric).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Deletes the namespaces and hosts files `state` names (those still
    /// there).
    pub fn delete(state: &TunState) -> Result<()> {
        let mut failed = Vec::new();
        for h in &state.hosts {
            let _ = std::fs::remove_dir_all(etc_dir(&h.netns));
            if EthernetNet::exists(&h.netns) {
                if let Err(e) = EthernetNet::delete(&h.netns) {
                    failed.push(format!("{}: {e:#}", h.netns));
                }
            }
        }
        if !failed.is_empty() {
            bail!("deleting network namespaces: {}", failed.join("; "));
        }
        Ok(())
    }
}

impl Drop for TunNet {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Err(e) = TunNet::delete(&self.state) {
            eprintln!("warning: {e:#}");
        }
    }
}

/// The default MTU of a fabric's interfaces.
pub fn default_mtu(params: &flitnet_core::control::FabricParams) -> u32 {
    ip::interface_mtu(params.max_packet_flits, params.flit_payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_named_by_run_and_host_and_hosts_files_list_every_host() {
        assert_eq!(netns_name("ab12cd", "h03"), "flt-ab12cd-h03");
        let plan = IpPlan::default_for(9);
        let state = TunState {
            plan,
            mtu: 2048,
            hosts: vec![
                TunHost {
                    name: "h00".into(),
                    netns: netns_name("x", "h00"),
                    address: plan.address(0),
                },
                TunHost {
                    name: "h01".into(),
                    netns: netns_name("x", "h01"),
                    address: plan.address(1),
                },
            ],
        };
        let f = state.hosts_file();
        assert!(f.contains("10.9.0.1\th00\n"), "{f}");
        assert!(f.contains("10.9.0.2\th01\n"), "{f}");
        assert_eq!(state.host("h01").unwrap().address, plan.address(1));
        assert!(state.host("h02").is_none());
    }
}
