//! Stall diagnosis: when a run's traffic stops moving (messages pending,
//! nothing delivered for [`STALL_QUIET`]), the daemons' last reports say
//! where the flits are and what they wait for. `flitctl up` prints it and
//! exits non-zero instead of reporting a small delivered count as a run.

use flitnet_core::control::{HostDaemonReport, LinkState, SwitchReport};
use flitnet_core::topology::{NodeRef, PortRef, Topology};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Nothing delivered for this long while messages are pending is a stall:
/// thousands of round trips on any fabric here (loopback round trips are
/// 0.1–1 ms, paced links' a few ms at most).
pub const STALL_QUIET: Duration = Duration::from_secs(1);

/// Where a stalled fabric's flits are and why they do not move.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StallDiagnosis {
    /// How long nothing was delivered, seconds.
    pub quiet_s: f64,
    /// Generated and not delivered (over every host).
    pub messages_pending: u64,
    /// Hosts that still have messages to send or flits queued.
    pub hosts_not_drained: Vec<String>,
    /// Ports whose input buffer or link send queue holds flits.
    pub holding_flits: Vec<PortFlits>,
    /// Ports with no credits left on some VC: flits for them wait.
    pub waiting_for_credits: Vec<CreditWait>,
    /// The ports the stall starts from, each with the reason.
    pub stalled: Vec<StalledPort>,
}

/// Flits held at one port.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PortFlits {
    /// `NODE:PORT`.
    pub port: String,
    /// In the input buffers (switches; hosts take flits at once).
    pub buffered: u64,
    /// Accepted by the link and not yet transmitted.
    pub queued: u64,
}

/// A port out of credits on some VCs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CreditWait {
    pub port: String,
    /// The VCs with no credits left.
    pub vcs: Vec<u8>,
    /// The port on the other end, which owes the credits.
    pub peer: String,
}

/// A port the stall starts from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StalledPort {
    pub port: String,
    pub reason: String,
}

fn port_name(topo: &Topology, p: PortRef) -> String {
    format!("{}:{}", topo.node_name(p.node), p.port)
}

/// Every link the daemons reported, with the port it is on.
fn link_states<'a>(
    hosts: &'a [(NodeRef, HostDaemonReport)],
    switches: &'a [(NodeRef, SwitchReport)],
) -> Vec<(PortRef, &'a LinkState)> {
    let at = |node: NodeRef, l: &'a LinkState| (PortRef { node, port: l.port }, l);
    hosts
        .iter()
        .flat_map(|(n, r)| r.links.iter().map(move |l| at(*n, l)))
        .chain(
            switches
                .iter()
                .flat_map(|(n, r)| r.links.iter().map(move |l| at(*n, l))),
        )
        .collect()
}

/// Input-buffer occupancy of a switch port, over its VCs.
fn buffered(report: &SwitchReport, port: u16) -> u64 {
    report
        .counters
        .ports
        .get(port as usize)
        .map_or(0, |p| p.vcs.iter().map(|vc| vc.occupancy as u64).sum())
}

/// Reads the last reports of a fabric whose traffic stopped.
pub fn diagnose(
    topo: &Topology,
    hosts: &[(NodeRef, HostDaemonReport)],
    switches: &[(NodeRef, SwitchReport)],
    quiet: Duration,
) -> StallDiagnosis {
    let generated: u64 = hosts
        .iter()
        .map(|(_, r)| r.endpoint.source.generated_messages)
        .sum();
    let delivered: u64 = hosts
        .iter()
        .map(|(_, r)| r.endpoint.sink.delivered_messages)
        .sum();
    let hosts_not_drained = hosts
        .iter()
        .filter(|(_, r)| !r.drained)
        .map(|(n, _)| topo.node_name(*n).to_string())
        .collect();
    let switch_report = |n: NodeRef| switches.iter().find(|(s, _)| *s == n).map(|(_, r)| r);
    let held = |p: PortRef| switch_report(p.node).map_or(0, |r| buffered(r, p.port));
    let links = link_states(hosts, switches);
    let state_of = |p: PortRef| links.iter().find(|(at, _)| *at == p).map(|(_, l)| *l);
    let mut d = StallDiagnosis {
        quiet_s: quiet.as_secs_f64(),
        messages_pending: generated.saturating_sub(delivered),
        hosts_not_drained,
        ..StallDiagnosis::default()
    };
    for &(at, l) in &links {
        let buffered = held(at);
        if buffered + l.queued_flits > 0 {
            d.holding_flits.push(PortFlits {
                port: port_name(topo, at),
                buffered,
                queued: l.queued_flits,
            });
        }
        let Some(peer) = topo.peer(at) else {
            continue;
        };
        if l.credits_withheld {
            d.stalled.push(StalledPort {
                port: port_name(topo, at),
                reason: format!(
                    "withholds its credits from {} (fault injection)",
                    port_name(topo, peer)
                ),
            });
        }
        if !l.up && (buffered + l.queued_flits > 0) {
            d.stalled.push(StalledPort {
                port: port_name(topo, at),
                reason: "link down with flits waiting for it".into(),
            });
        }
        // Only a port that can send waits for credits (a one-way link's
        // receiving end has none to wait for).
        let empty: Vec<u8> = (0..l.credits.len() as u8)
            .filter(|&vc| l.credits[vc as usize] == 0)
            .collect();
        if empty.is_empty() || !topo.can_send(at) {
            continue;
        }
        d.waiting_for_credits.push(CreditWait {
            port: port_name(topo, at),
            vcs: empty.clone(),
            peer: port_name(topo, peer),
        });
        // Out of credits while the peer's buffer is empty: the credits
        // are not coming back (withheld, lost, or sent to another port).
        let peer_withholds = state_of(peer).is_some_and(|s| s.credits_withheld);
        if held(peer) == 0 && !peer_withholds {
            d.stalled.push(StalledPort {
                port: port_name(topo, at),
                reason: format!(
                    "no credits on vc {empty:?} although {} buffers no flits: its credits are not coming back",
                    port_name(topo, peer)
                ),
            });
        }
    }
    d
}

impl fmt::Display for StallDiagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  STALL       nothing delivered for {:.1}s with {} messages pending; hosts not drained: {}",
            self.quiet_s,
            self.messages_pending,
            self.hosts_not_drained.join(" ")
        )?;
        let holding: Vec<String> = self
            .holding_flits
            .iter()
            .map(|p| format!("{} ({} buffered, {} queued)", p.port, p.buffered, p.queued))
            .collect();
        writeln!(f, "    holding flits        {}", or_none(&holding))?;
        let waiting: Vec<String> = self
            .waiting_for_credits
            .iter()
            .map(|w| format!("{} vc {:?} (owed by {})", w.port, w.vcs, w.peer))
            .collect();
        writeln!(f, "    waiting for credits  {}", or_none(&waiting))?;
        let stalled: Vec<String> = self
            .stalled
            .iter()
            .map(|s| format!("{}: {}", s.port, s.reason))
            .collect();
        writeln!(f, "    stalled              {}", or_none(&stalled))
    }
}

fn or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::switch::{PortCounters, VcCounters};
    use flitnet_core::topology::generators::kary_ntree;

    /// A 2-ary 1-tree (hosts h0, h1 on switch s0's ports 0 and 1): s0:0
    /// withholds credits from h0, and s0:1 waits for credits h1 does not
    /// return although it holds nothing.
    #[test]
    fn withheld_and_lost_credits_are_named() {
        let topo = kary_ntree(2, 1).unwrap();
        let s0 = NodeRef::Switch(0);
        let link = |port: u16, credits: u16, queued: u64, withheld: bool| LinkState {
            port,
            credits: vec![credits],
            queued_flits: queued,
            up: true,
            credits_withheld: withheld,
        };
        let host = |drained: bool, credits: u16, queued: u64| {
            let mut r = HostDaemonReport {
                drained,
                links: vec![link(0, credits, queued, false)],
                ..HostDaemonReport::default()
            };
            r.endpoint.source.generated_messages = 5;
            r.endpoint.sink.delivered_messages = 1;
            r
        };
        let hosts = vec![
            (NodeRef::Host(0), host(false, 0, 3)),
            (NodeRef::Host(1), host(true, 4, 0)),
        ];
        let mut switch = SwitchReport {
            links: vec![link(0, 4, 0, true), link(1, 0, 2, false)],
            ..SwitchReport::default()
        };
        for occupancy in [4, 0] {
            let mut port = PortCounters::default();
            port.vcs.push(VcCounters {
                occupancy,
                ..VcCounters::default()
            });
            switch.counters.ports.push(port);
        }
        let d = diagnose(&topo, &hosts, &[(s0, switch)], Duration::from_millis(1500));
        let h0 = topo.node_name(NodeRef::Host(0)).to_string();
        let h1 = topo.node_name(NodeRef::Host(1)).to_string();
        let sw = topo.node_name(s0).to_string();
        assert_eq!(d.messages_pending, 8);
        assert_eq!(d.hosts_not_drained, vec![h0.clone()]);
        assert_eq!(
            d.holding_flits
                .iter()
                .map(|p| p.port.as_str())
                .collect::<Vec<_>>(),
            vec![format!("{h0}:0"), format!("{sw}:0"), format!("{sw}:1")]
        );
        assert_eq!(
            d.waiting_for_credits,
            vec![
                CreditWait {
                    port: format!("{h0}:0"),
                    vcs: vec![0],
                    peer: format!("{sw}:0")
                },
                CreditWait {
                    port: format!("{sw}:1"),
                    vcs: vec![0],
                    peer: format!("{h1}:0")
                }
            ]
        );
        // s0:0 withholds (named as such; h0's empty credits are not
        // blamed on a loss), s0:1's credits are not coming back from h1.
        assert_eq!(d.stalled.len(), 2, "{d:?}");
        assert_eq!(d.stalled[0].port, format!("{sw}:0"));
        assert!(d.stalled[0].reason.contains("fault injection"));
        assert_eq!(d.stalled[1].port, format!("{sw}:1"));
        assert!(d.stalled[1].reason.contains("not coming back"), "{d:?}");
        let text = d.to_string();
        assert!(text.contains("STALL"), "{text}");
        assert!(text.contains("withholds its credits"), "{text}");
    }
}
