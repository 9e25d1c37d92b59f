//! IP packets as fabric messages (docs/ip.md), sans-IO: the address plan
//! that maps a host to an IPv4 address and back, how an IP packet is cut
//! into the flit payloads of one message, and how the receiver gets the
//! packet back out of the reassembled, padded payload.
//!
//! One IP packet is one message of `ceil(len / flit payload)` flits (at
//! least one); the message is packetised like any other (at most
//! `max_packet_flits` flits per packet) and reassembled in flit order by
//! the sink, so an IP packet larger than a fabric packet crosses the fabric
//! as several packets. Every flit of such a message carries
//! [`crate::flit::flags::DATA`] and a slice of the IP packet instead of the
//! generator's deterministic payload; the last flit is zero-padded, and the
//! receiver trims to the length the IP header gives ([`ip_packet_len`]).

use crate::topology::HostId;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// The fabric's IPv4 subnet: host `i` gets the address `network + 1 + i`
/// (so `10.16.0.0/16` gives h0 `10.16.0.1`, h255 `10.16.1.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IpPlan {
    network: Ipv4Addr,
    prefix_len: u8,
}

/// An address plan that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpPlanError {
    #[error("`{0}` is not an IPv4 subnet (write it as A.B.C.D/N, e.g. 10.16.0.0/16)")]
    Syntax(String),
    #[error("prefix length /{0} must be 8..=30")]
    PrefixLength(u8),
    #[error("{network}/{prefix_len} has host bits set (the network is {aligned}/{prefix_len})")]
    NotAligned {
        network: Ipv4Addr,
        prefix_len: u8,
        aligned: Ipv4Addr,
    },
    #[error("subnet {plan} has room for {room} hosts, the fabric has {hosts}")]
    TooSmall { plan: IpPlan, room: u64, hosts: u64 },
}

impl IpPlan {
    pub fn new(network: Ipv4Addr, prefix_len: u8) -> Result<Self, IpPlanError> {
        if !(8..=30).contains(&prefix_len) {
            return Err(IpPlanError::PrefixLength(prefix_len));
        }
        let mask = u32::MAX << (32 - prefix_len);
        let aligned = Ipv4Addr::from(u32::from(network) & mask);
        if aligned != network {
            return Err(IpPlanError::NotAligned {
                network,
                prefix_len,
                aligned,
            });
        }
        Ok(IpPlan {
            network,
            prefix_len,
        })
    }

    /// The default plan of a fabric: `10.<second>.0.0/16`.
    pub fn default_for(second_octet: u8) -> Self {
        IpPlan {
            network: Ipv4Addr::new(10, second_octet, 0, 0),
            prefix_len: 16,
        }
    }

    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// Hosts the subnet can address (network and broadcast excluded).
    pub fn room(&self) -> u64 {
        (1u64 << (32 - self.prefix_len)) - 2
    }

    /// Fails if `hosts` hosts do not fit.
    pub fn check_hosts(&self, hosts: u64) -> Result<(), IpPlanError> {
        if hosts > self.room() {
            return Err(IpPlanError::TooSmall {
                plan: *self,
                room: self.room(),
                hosts,
            });
        }
        Ok(())
    }

    /// Host `host`'s address.
    pub fn address(&self, host: HostId) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1 + host)
    }

    /// The host owning `addr`, if it is one of the plan's host addresses
    /// for a fabric of `hosts` hosts.
    pub fn host_of(&self, addr: Ipv4Addr, hosts: u32) -> Option<HostId> {
        let offset = u32::from(addr).checked_sub(u32::from(self.network))?;
        let host = offset.checked_sub(1)?;
        (host < hosts && (host as u64) < self.room()).then_some(host)
    }
}

impl fmt::Display for IpPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

impl FromStr for IpPlan {
    type Err = IpPlanError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || IpPlanError::Syntax(s.to_string());
        let (addr, len) = s.split_once('/').ok_or_else(syntax)?;
        let network: Ipv4Addr = addr.parse().map_err(|_| syntax())?;
        let prefix_len: u8 = len.parse().map_err(|_| syntax())?;
        IpPlan::new(network, prefix_len)
    }
}

impl TryFrom<String> for IpPlan {
    type Error = IpPlanError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<IpPlan> for String {
    fn from(p: IpPlan) -> String {
        p.to_string()
    }
}

/// The MTU of a host's IP interface: the fabric's largest packet
/// (`max_packet_flits` × `flit_payload` bytes) when that is at least 1280
/// bytes (IPv6's minimum, and enough for TCP to work well), else the
/// smallest multiple of it that is, so an IP packet of the MTU is a whole
/// number of full fabric packets. At most 65 535 (IPv4's limit).
pub fn interface_mtu(max_packet_flits: u32, flit_payload: u16) -> u32 {
    let packet = (max_packet_flits as u64 * flit_payload as u64).max(1);
    let mtu = packet * 1280u64.div_ceil(packet);
    mtu.min(65_535) as u32
}

/// Flits of the message carrying an IP packet of `len` bytes.
pub fn message_flits(len: usize, payload_bytes: usize) -> u32 {
    len.div_ceil(payload_bytes.max(1)).max(1) as u32
}

/// The payload of flit `seq` of the message carrying `data`: its
/// `payload_bytes` slice, zero-padded past the end.
pub fn segment(data: &Bytes, seq: u32, payload_bytes: usize) -> Bytes {
    let start = (seq as usize).saturating_mul(payload_bytes).min(data.len());
    let end = start.saturating_add(payload_bytes).min(data.len());
    if end - start == payload_bytes {
        return data.slice(start..end);
    }
    let mut v = Vec::with_capacity(payload_bytes);
    v.extend_from_slice(&data[start..end]);
    v.resize(payload_bytes, 0);
    Bytes::from(v)
}

/// The length of the IP packet at the start of `buf` from its header
/// (IPv4 total length, IPv6 40 + payload length), if `buf` holds one.
pub fn ip_packet_len(buf: &[u8]) -> Option<usize> {
    let version = buf.first()? >> 4;
    let len = match version {
        4 if buf.len() >= 20 => u16::from_be_bytes([buf[2], buf[3]]) as usize,
        6 if buf.len() >= 40 => 40 + u16::from_be_bytes([buf[4], buf[5]]) as usize,
        _ => return None,
    };
    (len <= buf.len() && len >= 20).then_some(len)
}

/// The IP packet in a reassembled message's padded payload, or `None` if
/// the payload does not start with a whole IP packet.
pub fn trim(mut data: Bytes) -> Option<Bytes> {
    let len = ip_packet_len(&data)?;
    data.truncate(len);
    Some(data)
}

/// The destination host of the IPv4 packet `packet` under `plan`
/// (`None`: not IPv4, or not to a host of the fabric).
pub fn destination(plan: &IpPlan, packet: &[u8], hosts: u32) -> Option<HostId> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
    plan.host_of(dst, hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(len: usize, dst: Ipv4Addr) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[16..20].copy_from_slice(&dst.octets());
        for (i, b) in p.iter_mut().enumerate().skip(20) {
            *b = i as u8;
        }
        p
    }

    #[test]
    fn plan_maps_hosts_to_addresses_and_back() {
        let plan: IpPlan = "10.16.0.0/16".parse().unwrap();
        assert_eq!(plan.address(0), Ipv4Addr::new(10, 16, 0, 1));
        assert_eq!(plan.address(255), Ipv4Addr::new(10, 16, 1, 0));
        for h in [0, 1, 255, 4000] {
            assert_eq!(plan.host_of(plan.address(h), 5000), Some(h));
        }
        assert_eq!(plan.host_of(Ipv4Addr::new(10, 16, 0, 0), 16), None);
        assert_eq!(plan.host_of(Ipv4Addr::new(10, 16, 0, 17), 16), None);
        assert_eq!(plan.host_of(Ipv4Addr::new(10, 17, 0, 1), 16), None);
        assert_eq!(plan.host_of(Ipv4Addr::new(9, 0, 0, 1), 16), None);
        assert_eq!(plan.to_string(), "10.16.0.0/16");
        assert_eq!(IpPlan::default_for(16), plan);
        let json = serde_json::to_string(&plan).unwrap();
        assert_eq!(json, "\"10.16.0.0/16\"");
        assert_eq!(serde_json::from_str::<IpPlan>(&json).unwrap(), plan);
    }

    #[test]
    fn bad_plans_are_refused_with_the_reason() {
        assert!(matches!(
            "10.16.0.1/16".parse::<IpPlan>(),
            Err(IpPlanError::NotAligned { .. })
        ));
        assert!(matches!(
            "10.0.0.0/31".parse::<IpPlan>(),
            Err(IpPlanError::PrefixLength(31))
        ));
        assert!(matches!(
            "10.0.0.0".parse::<IpPlan>(),
            Err(IpPlanError::Syntax(_))
        ));
        let small: IpPlan = "10.0.0.0/28".parse().unwrap();
        assert!(small.check_hosts(14).is_ok());
        let e = small.check_hosts(16).unwrap_err();
        assert!(e.to_string().contains("room for 14 hosts"), "{e}");
    }

    #[test]
    fn mtu_is_a_whole_number_of_fabric_packets() {
        // 16 flits of 64 B: 1024 B packets, two per MTU.
        assert_eq!(interface_mtu(16, 64), 2048);
        assert_eq!(interface_mtu(64, 64), 4096);
        assert_eq!(interface_mtu(20, 64), 1280);
        assert_eq!(interface_mtu(4096, 256), 65_535);
        assert!(interface_mtu(1, 1) >= 1280);
    }

    #[test]
    fn segments_reassemble_to_the_packet() {
        for len in [20, 63, 64, 65, 1500] {
            let p = Bytes::from(ipv4(len, Ipv4Addr::new(10, 0, 0, 3)));
            let flits = message_flits(len, 64);
            assert_eq!(flits as usize, len.div_ceil(64));
            let mut joined = Vec::new();
            for seq in 0..flits {
                let s = segment(&p, seq, 64);
                assert_eq!(s.len(), 64);
                joined.extend_from_slice(&s);
            }
            assert_eq!(joined.len(), flits as usize * 64);
            assert_eq!(trim(Bytes::from(joined)).unwrap(), p);
        }
        assert_eq!(message_flits(0, 64), 1);
    }

    #[test]
    fn destinations_come_from_the_ipv4_header() {
        let plan = IpPlan::default_for(3);
        let p = ipv4(60, plan.address(7));
        assert_eq!(destination(&plan, &p, 16), Some(7));
        assert_eq!(destination(&plan, &p, 7), None);
        let outside = ipv4(60, Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(destination(&plan, &outside, 16), None);
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[4..6].copy_from_slice(&8u16.to_be_bytes());
        assert_eq!(destination(&plan, &v6, 16), None);
        assert_eq!(ip_packet_len(&v6), Some(48));
        assert_eq!(ip_packet_len(&[0x45, 0, 0]), None);
        // A header claiming more than there is.
        let mut short = ipv4(40, plan.address(1));
        short[2..4].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(trim(Bytes::from(short)), None);
    }
}
