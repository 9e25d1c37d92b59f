//! The host endpoint: a [`Source`], a [`Sink`] and the link layer of the
//! host's one port, as one sans-IO state machine with the same driving API
//! as the switch core (`handle_datagram`, `handle_timeout`, `poll_transmit`,
//! `poll_timeout`, `poll_event`).
//!
//! **Injection.** Each VC of the injection link is a lane that carries one
//! packet at a time (wormhole: a packet's flits stay on one VC, seed 003
//! §3.6 item 3); with [`InjectionVc::RoundRobin`] the host has one injection
//! buffer per VC (seed 003 §3.6 item 7), new packets go to the next free lane
//! in round-robin order, and lanes with credits send flit by flit in turn.
//! Packets of one flow may then overtake each other, which the sink counts
//! as out of order. [`InjectionVc::Fixed`] (VC 0 by default) keeps every
//! packet on one VC: a single lane, so packets leave in generation order.
//! Routing VC policies (datelines, escape VCs) expect injection on VC 0.
//!
//! **Ejection.** Every flit taken off the link goes to the sink at once and
//! its buffer slot is released immediately (seed 003 §3.6 item 8: ejection
//! is never a bottleneck), so credits flow back to the switch.

use super::counters::{IntermediateStats, SbrpStats};
use super::histogram::{Moments, Percentiles};
use super::hook::Installed;
use super::message::OutPacket;
use super::sink::{Delivery, Sink, SinkConfig, SinkEvent, SinkStats, Violation};
use super::source::{Source, SourceConfig, SourceError, SourceStats};
use crate::link::{self, Link, LinkConfig, LinkError, LinkEvent};
use crate::topology::{HostId, PortNo};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Which VC injected packets use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "mode")]
pub enum InjectionVc {
    Fixed { vc: u8 },
    RoundRobin,
}

impl Default for InjectionVc {
    fn default() -> Self {
        InjectionVc::Fixed { vc: 0 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostConfig {
    pub host: HostId,
    pub hosts: u32,
    /// Pattern, load, message length, packetisation, queue, limits.
    pub source: SourceConfig,
    #[serde(default)]
    pub injection: InjectionVc,
    /// The port's link layer (its `vcs` is the number of VCs).
    pub link: LinkConfig,
    /// Link epoch (see [`Link::with_epoch`]); daemons pass one that changes
    /// across restarts.
    #[serde(default = "default_epoch")]
    pub epoch: u16,
    pub seed: u64,
    /// Keep every delivery for [`HostEndpoint::delivery_trace`].
    #[serde(default)]
    pub record_trace: bool,
}

fn default_epoch() -> u16 {
    1
}

/// A host configuration that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("host {host}: {source}")]
    Source {
        host: HostId,
        #[source]
        source: SourceError,
    },
    #[error("host {host}: link: {source}")]
    Link {
        host: HostId,
        #[source]
        source: link::ConfigError,
    },
    #[error("host {host}: injection VC {vc} is out of range (the link has {vcs} VCs)")]
    InjectionVc { host: HostId, vc: u8, vcs: u8 },
    #[error(
        "host {host}: recovery protocol {protocol} needs the sender to retain messages \
         (release policy hold-for or until-released, not when-sent)"
    )]
    RecoveryNeedsRetention {
        host: HostId,
        protocol: &'static str,
    },
    #[error("host {host}: a flit with {payload} payload bytes does not fit the link MTU {mtu}")]
    FlitTooLarge {
        host: HostId,
        payload: usize,
        mtu: usize,
    },
}

/// What the application side should know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostEvent {
    Delivered {
        src: HostId,
        msg: u64,
        flits: u32,
        latency_ns: u64,
    },
    Violation {
        kind: Violation,
        src: Option<HostId>,
        msg: u64,
    },
    Link(LinkEvent),
    /// A delivered message carried application data (an IP packet,
    /// docs/ip.md): its flits' payloads in order, the last one padded.
    /// Comes just before the message's `Delivered`.
    Data {
        src: HostId,
        data: Bytes,
    },
    /// The link refused a flit the host built (should not happen with a
    /// validated configuration); the packet is abandoned.
    SendFailed(LinkError),
}

/// Throughput over the measurement window (from `start` to the latest time
/// the endpoint was given).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub window_ns: u64,
    pub offered_flits_per_s: f64,
    pub sent_flits_per_s: f64,
    pub accepted_flits_per_s: f64,
    pub accepted_messages_per_s: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    pub host: HostId,
    pub pattern: String,
    pub source: SourceStats,
    pub sink: SinkStats,
    /// Message latency from generation to delivery of the last flit, ns.
    pub latency_ns: Percentiles,
    /// The same, for messages that needed a recovery resend only (spec 003
    /// §6.2, "latency of corrupted messages").
    #[serde(default)]
    pub recovered_latency_ns: Percentiles,
    /// The recovered messages' latency count, sum and sum of squares, ns
    /// (exact mean and variance: `flitctl reproduce` pools them over hosts
    /// and runs for confidence intervals of mean differences).
    #[serde(default)]
    pub recovered_latency_moments_ns: Moments,
    pub throughput: Throughput,
    /// Messages waiting in the source queue, and retained for resending.
    pub source_queue: usize,
    pub retained: usize,
    /// Packets abandoned because the link refused a flit.
    pub abandoned_packets: u64,
    /// Messages partly received.
    pub partial_messages: usize,
    /// Complete messages held back until an earlier one of their flow is
    /// delivered (in-order delivery under a recovery protocol).
    #[serde(default)]
    pub held_messages: usize,
    /// SBRP work not finished: cut packets the receiver waits on, resends
    /// not yet started, RRQs not yet sent.
    #[serde(default)]
    pub recovery_in_progress: usize,
    /// Per flow: messages fully sent to each destination and delivered
    /// from each source (empty above [`MAX_FLOW_REPORT_HOSTS`] hosts), so
    /// a controller can tell losses on flows to or from an unreachable
    /// host from the rest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sent_to: BTreeMap<HostId, u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub delivered_from: BTreeMap<HostId, u64>,
    /// Hash of the delivery sequence (equal traces ⇒ equal hashes).
    pub trace_hash: u64,
    /// SBRP counters (all zero without a recovery protocol).
    #[serde(default)]
    pub sbrp: SbrpStats,
    /// Intermediate-node routing (seed 004; all zero until the controller
    /// pushes a fault set).
    #[serde(default)]
    pub intermediate: IntermediateStats,
}

/// Fails if a head flit with `payload` bytes would not fit `link`'s MTU.
fn check_flit_fits(host: HostId, payload: usize, link: &LinkConfig) -> Result<(), ConfigError> {
    // The largest flit the host builds: a head with a full payload.
    let mut probe = OutPacket {
        src: host,
        msg: super::message::Message {
            id: u64::MAX,
            dst: host,
            flits: u32::MAX,
            born_ns: u64::MAX,
        },
        packet: u32::MAX,
        first_seq: 0,
        len: 2,
        emitted: 0,
        // The largest head SBRP can make.
        submsg: u16::MAX,
        flags: 0,
        abort: false,
    };
    let Some(head) = probe.next_flit(0, payload) else {
        return Ok(());
    };
    let need = crate::wire::HEADER_LEN + link.control_reserve() + crate::wire::flit_wire_len(&head);
    if need > link.mtu {
        return Err(ConfigError::FlitTooLarge {
            host,
            payload,
            mtu: link.mtu,
        });
    }
    Ok(())
}

/// Largest fabric whose host reports carry per-flow counts (they grow
/// with the number of hosts, and every host reports).
pub const MAX_FLOW_REPORT_HOSTS: usize = 1024;

/// One host, sans-IO.
#[derive(Debug)]
pub struct HostEndpoint {
    pub(crate) cfg: HostConfig,
    pub(crate) source: Source,
    pub(crate) sink: Sink,
    /// The port the host sends on (port 0), and receives on too unless it
    /// has a receive link.
    link: Link,
    /// A host on one-way links (RUFT) receives on a second port: flits
    /// arrive here and its credits go back from here; `link` then only
    /// carries this host's flits out (and the switch's credits in).
    rx_link: Option<(PortNo, Link)>,
    /// Per VC, the packet being injected on it.
    pub(crate) lanes: Vec<Option<OutPacket>>,
    /// Round-robin cursor over lanes.
    next_lane: usize,
    events: VecDeque<HostEvent>,
    started_at: Option<u64>,
    last_now: u64,
    abandoned_packets: u64,
    /// The mechanisms' host hooks ([`super::hook`]), in registry order.
    pub(crate) hooks: Vec<Installed>,
    /// The controller holds injection while it swaps routing tables
    /// ([`HostEndpoint::set_injection_paused`]): packets already on their
    /// way out finish, nothing new starts.
    injection_paused: bool,
    /// Application data of messages handed in by [`HostEndpoint::send_data`]
    /// still to be sent or retained for resending, by message id.
    data_out: BTreeMap<u64, Bytes>,
}

impl HostEndpoint {
    pub fn new(cfg: HostConfig) -> Result<Self, ConfigError> {
        let host = cfg.host;
        let source = Source::new(cfg.source.clone(), host, cfg.hosts, cfg.seed)
            .map_err(|source| ConfigError::Source { host, source })?;
        let link = Link::with_epoch(cfg.link.clone(), cfg.epoch)
            .map_err(|source| ConfigError::Link { host, source })?;
        let vcs = cfg.link.vcs;
        if let InjectionVc::Fixed { vc } = cfg.injection {
            if vc >= vcs {
                return Err(ConfigError::InjectionVc { host, vc, vcs });
            }
        }
        check_flit_fits(host, cfg.source.payload_bytes, &cfg.link)?;
        let sink = Sink::new(SinkConfig {
            host,
            vcs,
            payload_bytes: cfg.source.payload_bytes,
            record_trace: cfg.record_trace,
        });
        let lanes = match cfg.injection {
            InjectionVc::Fixed { .. } => 1,
            InjectionVc::RoundRobin => vcs as usize,
        };
        Ok(HostEndpoint {
            source,
            sink,
            link,
            rx_link: None,
            lanes: vec![None; lanes],
            next_lane: 0,
            events: VecDeque::new(),
            started_at: None,
            last_now: 0,
            abandoned_packets: 0,
            hooks: Vec::new(),
            injection_paused: false,
            data_out: BTreeMap::new(),
            cfg,
        })
    }

    /// Replaces the traffic source (pattern, load, lengths) before
    /// [`HostEndpoint::start`]: a daemon is configured with its link at
    /// start-up and told what traffic to make later. The link and the sink
    /// keep their state (the sink now expects the new payload size); messages
    /// still queued in the old source are dropped, and packets already on
    /// their way out finish (so no worm is left open in the switch) and are
    /// counted by the new source's `packets_sent`. Message numbers go on
    /// from the old source's, so none is reused.
    pub fn set_source(&mut self, cfg: SourceConfig, seed: u64) -> Result<(), ConfigError> {
        let host = self.cfg.host;
        check_flit_fits(host, cfg.payload_bytes, &self.cfg.link)?;
        let mut source = Source::new(cfg.clone(), host, self.cfg.hosts, seed)
            .map_err(|source| ConfigError::Source { host, source })?;
        source.continue_numbering(&self.source);
        self.source = source;
        self.sink.set_payload_bytes(cfg.payload_bytes);
        self.cfg.source = cfg;
        self.cfg.seed = seed;
        Ok(())
    }

    /// Sends `data` (an IP packet, docs/ip.md) to host `dst` as one
    /// message of [`super::ip::message_flits`] flits whose payloads are the
    /// data's bytes, queued behind what the source already holds. Under a
    /// recovery protocol it is retained and resent like any message. False
    /// when it was refused: the source queue is full or `dst` is not
    /// another host.
    pub fn send_data(&mut self, now: u64, dst: HostId, data: Bytes) -> bool {
        self.tick(now);
        let flits = super::ip::message_flits(data.len(), self.cfg.source.payload_bytes);
        let Some(msg) = self.source.push(dst, flits, now) else {
            return false;
        };
        self.data_out.insert(msg.id, data);
        self.prune_data();
        self.inject(now);
        true
    }

    /// Whether [`HostEndpoint::send_data`] has room now.
    pub fn can_send_data(&self) -> bool {
        self.source.has_room()
    }

    /// Drops the data of messages neither queued, nor being sent, nor
    /// retained for a resend (each of those is in the retained store or a
    /// lane). Runs when the map holds more than those could need.
    fn prune_data(&mut self) {
        let live = self.source.retained().len() + self.lanes.len();
        if self.data_out.len() <= live {
            return;
        }
        let (source, lanes) = (&self.source, &self.lanes);
        self.data_out.retain(|id, _| {
            source.retained().get(*id).is_some() || lanes.iter().flatten().any(|p| p.msg.id == *id)
        });
    }

    /// Work the mechanisms still hold: for SBRP, cut packets the receiver
    /// half waits on, resends not yet started, and RRQs not yet sent.
    pub fn recovery_in_progress(&self) -> usize {
        self.hooks.iter().map(|h| h.hook.in_progress()).sum()
    }

    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The link layer, for an owner that brings the port down or up.
    pub fn link_mut(&mut self) -> &mut Link {
        &mut self.link
    }

    /// Makes `port` this host's receive port (one-way links, RUFT): flits
    /// arrive on it and its credits return from it, over the back channel
    /// of the same cable (docs/topology.md, "One-way links"); the host
    /// keeps sending on its first link (port 0).
    pub fn add_receive_port(&mut self, port: PortNo) -> Result<(), ConfigError> {
        let host = self.cfg.host;
        let mut link = Link::with_epoch(self.cfg.link.clone(), self.cfg.epoch)
            .map_err(|source| ConfigError::Link { host, source })?;
        link.set_port(port);
        self.rx_link = Some((port, link));
        Ok(())
    }

    /// The receive port and its link, on a host with one.
    pub fn receive_link(&self) -> Option<(PortNo, &Link)> {
        self.rx_link.as_ref().map(|(p, l)| (*p, l))
    }

    /// The link of `port`: the receive link, or the main link for any
    /// other port number.
    pub fn link_of_mut(&mut self, port: PortNo) -> &mut Link {
        match &mut self.rx_link {
            Some((p, l)) if *p == port => l,
            _ => &mut self.link,
        }
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The source, for a recovery protocol that resends retained messages.
    /// Host `peer` is known dead (its router failed; spec 003 §3.6 #12):
    /// generate nothing more for it and stop waiting for the resends of its
    /// cut packets, which will never come (the receiver would otherwise
    /// keep asking, for `max_receiver_rrqs` doubling waits).
    pub fn peer_down(&mut self, peer: HostId) {
        self.source.set_destination_down(peer, true);
        for h in &mut self.hooks {
            h.hook.on_peer_down(peer);
        }
    }

    pub fn source_mut(&mut self) -> &mut Source {
        &mut self.source
    }

    pub fn sink(&self) -> &Sink {
        &self.sink
    }

    fn tick(&mut self, now: u64) {
        self.last_now = self.last_now.max(now);
    }

    /// Starts generating traffic.
    pub fn start(&mut self, now: u64) {
        self.tick(now);
        self.started_at.get_or_insert(now);
        self.source.start(now);
    }

    /// Begins a new run on a host that may have run traffic before (a
    /// controller attached again to a long-lived fabric): the report's
    /// figures (sink counters and latencies, SBRP and intermediate-node
    /// counters, abandoned packets, the throughput window) start from
    /// zero, so it describes this run alone. Message numbers go on (see
    /// [`HostEndpoint::set_source`]) and the sink keeps what tells a
    /// duplicate from a new message.
    pub fn begin_run(&mut self) {
        self.sink.begin_run();
        self.started_at = None;
        self.abandoned_packets = 0;
        for h in &mut self.hooks {
            h.hook.begin_run();
        }
    }

    /// Stops generating; what is queued is still sent.
    pub fn stop(&mut self, now: u64) {
        self.tick(now);
        self.source.stop();
    }

    /// True when nothing more will be generated and every generated flit has
    /// left the host.
    pub fn is_drained(&self) -> bool {
        self.source.is_drained()
            && self.lanes.iter().all(Option::is_none)
            && self.link.queued() == 0
            && self.hooks.iter().all(|h| h.hook.is_drained())
    }

    /// Holds (or lets go of) injection. While paused, a packet already
    /// partly sent finishes (a worm left open would hold its VCs in the
    /// switches) but no new one starts: no new message, no resend, no
    /// recover request. The controller pauses every host, waits until
    /// nothing is in flight, swaps the switches' tables and resumes, so no
    /// packet ever meets the old tables at one switch and the new ones at
    /// the next (docs/chaos.md, "Quiesced reconfiguration"). Generation
    /// goes on meanwhile: messages wait in the source queue.
    pub fn set_injection_paused(&mut self, now: u64, paused: bool) {
        self.tick(now);
        self.injection_paused = paused;
        if !paused {
            self.inject(now);
        }
    }

    pub fn is_injection_paused(&self) -> bool {
        self.injection_paused
    }

    /// Flits of this host still in the network or on their way into it:
    /// flits of packets being injected not yet handed to the link, and
    /// those whose credits are not back (queued on the link, on the wire
    /// or in the switch's buffer; a queued flit has taken its credit, so
    /// [`Link::credits_missing`] counts it). Each flit counts once. 0 once
    /// everything sent has left the switch it entered, and nothing is
    /// half-sent. A packet whose link is down cannot finish and is not
    /// counted (its flits are gone with the link).
    pub fn in_flight_flits(&self) -> u64 {
        if !self.link.is_up() {
            return 0;
        }
        let lanes: u64 = self
            .lanes
            .iter()
            .flatten()
            // A stopped packet has at most its non-final tail left.
            .map(|p| if p.abort { 1 } else { p.len.saturating_sub(p.emitted).max(1) } as u64)
            .sum();
        lanes + self.link.credits_missing()
    }

    /// A datagram from the switch (copied once).
    pub fn handle_datagram(&mut self, now: u64, data: &[u8]) {
        self.handle_datagram_bytes(now, Bytes::copy_from_slice(data));
    }

    /// A datagram from the switch, without copying. Malformed datagrams are
    /// counted by the link ([`Link::stats`]) and otherwise ignored.
    pub fn handle_datagram_bytes(&mut self, now: u64, data: Bytes) {
        self.tick(now);
        let _ = self.link.handle_datagram(now, data);
        self.pump(now);
    }

    /// A datagram that arrived on `port` (copied once): the receive port's
    /// link if it is that port, the main link otherwise.
    pub fn handle_datagram_on(&mut self, now: u64, port: PortNo, data: &[u8]) {
        self.handle_datagram_bytes_on(now, port, Bytes::copy_from_slice(data));
    }

    /// [`HostEndpoint::handle_datagram_on`] without copying.
    pub fn handle_datagram_bytes_on(&mut self, now: u64, port: PortNo, data: Bytes) {
        self.tick(now);
        let _ = self.link_of_mut(port).handle_datagram(now, data);
        self.pump(now);
    }

    /// [`HostEndpoint::handle_datagram_bytes_on`] of a datagram a peer in
    /// the same process wrote without encoding it ([`Link::handle_decoded`]).
    pub fn handle_decoded_on(&mut self, now: u64, port: PortNo, d: &mut link::Decoded) {
        self.tick(now);
        let _ = self.link_of_mut(port).handle_decoded(now, d);
        self.pump(now);
    }

    pub fn handle_timeout(&mut self, now: u64) {
        self.tick(now);
        self.link.handle_timeout(now);
        if let Some((_, l)) = &mut self.rx_link {
            l.handle_timeout(now);
        }
        self.source.handle_timeout(now);
        self.pump(now);
    }

    /// Writes the next datagram for the switch into `out`; false when none
    /// is due. Call until it returns false. (A host with a receive port
    /// uses [`HostEndpoint::poll_transmit_port`].)
    pub fn poll_transmit(&mut self, now: u64, out: &mut Vec<u8>) -> bool {
        self.tick(now);
        self.pump(now);
        self.link.poll_transmit(now, out)
    }

    /// Writes the next datagram into `out` and returns the port it leaves
    /// by; `None` when none is due. Call until it returns `None`.
    pub fn poll_transmit_port(&mut self, now: u64, out: &mut Vec<u8>) -> Option<PortNo> {
        self.transmit(now, |l| l.poll_transmit(now, out))
    }

    /// [`HostEndpoint::poll_transmit_port`] for a peer in the same process
    /// ([`Link::poll_transmit_decoded`]).
    pub fn poll_transmit_decoded(&mut self, now: u64, out: &mut link::Decoded) -> Option<PortNo> {
        self.transmit(now, |l| l.poll_transmit_decoded(now, out))
    }

    /// [`HostEndpoint::poll_transmit_port`] with `poll` asking a link for a
    /// datagram.
    fn transmit(&mut self, now: u64, mut poll: impl FnMut(&mut Link) -> bool) -> Option<PortNo> {
        self.tick(now);
        self.pump(now);
        if poll(&mut self.link) {
            return Some(self.link.port());
        }
        let (port, l) = self.rx_link.as_mut()?;
        poll(l).then_some(*port)
    }

    /// When `handle_timeout` should next be called.
    pub fn poll_timeout(&self) -> Option<u64> {
        [
            self.rx_link.as_ref().and_then(|(_, l)| l.poll_timeout()),
            self.link.poll_timeout(),
            self.source.poll_timeout(),
        ]
        .into_iter()
        .chain(
            self.hooks
                .iter()
                .map(|h| h.hook.poll_timeout(self.last_now)),
        )
        .flatten()
        .min()
    }

    pub fn poll_event(&mut self) -> Option<HostEvent> {
        self.events.pop_front()
    }

    /// Every delivery, in order (empty unless `record_trace`).
    pub fn delivery_trace(&self) -> &[Delivery] {
        self.sink.trace()
    }

    /// A flit through the receive path, as if the link had delivered it.
    #[cfg(test)]
    pub(crate) fn receive_for_test(&mut self, now: u64, flit: &crate::flit::Flit) {
        self.tick(now);
        self.receive(now, flit);
    }

    /// One flit off the link: to the hooks that want it, else the sink.
    fn receive(&mut self, now: u64, flit: &crate::flit::Flit) {
        let mut consumed = false;
        self.each_hook(|h, host| consumed = consumed || h.intercept(host, now, flit));
        if !consumed {
            self.sink.receive(now, flit);
            self.each_hook(|h, host| h.on_received(host, now, flit));
        }
    }

    /// Moves received flits to the sink and queued packets onto the link.
    fn pump(&mut self, now: u64) {
        loop {
            // Flits arrive on the receive link when there is one; the
            // main link is polled too (it carries nothing but credits then).
            let (flit, from_rx) = match self.rx_link.as_mut().and_then(|(_, l)| l.poll_received()) {
                Some(f) => (f, true),
                None => match self.link.poll_received() {
                    Some(f) => (f, false),
                    None => break,
                },
            };
            self.receive(now, &flit);
            // The flit was consumed: its slot is free again.
            let link = match (&mut self.rx_link, from_rx) {
                (Some((_, l)), true) => l,
                _ => &mut self.link,
            };
            let _ = link.release(flit.vc, 1);
        }
        self.each_hook(|h, host| h.after_receive(host, now));
        while let Some(e) = self.sink.poll_event() {
            self.events.push_back(match e {
                SinkEvent::Delivered {
                    src,
                    msg,
                    flits,
                    latency_ns,
                } => HostEvent::Delivered {
                    src,
                    msg,
                    flits,
                    latency_ns,
                },
                SinkEvent::Violation { kind, src, msg } => HostEvent::Violation { kind, src, msg },
                SinkEvent::Data { src, data, .. } => HostEvent::Data { src, data },
            });
        }
        while let Some(e) = self.link.poll_event() {
            self.events.push_back(HostEvent::Link(e));
        }
        if let Some((_, l)) = &mut self.rx_link {
            while let Some(e) = l.poll_event() {
                self.events.push_back(HostEvent::Link(e));
            }
        }
        self.inject(now);
        // Bound the event queue like the sink does.
        while self.events.len() > super::sink::MAX_PENDING_EVENTS {
            self.events.pop_front();
        }
    }

    pub(crate) fn lane_vc(&self, lane: usize) -> u8 {
        match self.cfg.injection {
            InjectionVc::Fixed { vc } => vc,
            InjectionVc::RoundRobin => lane as u8,
        }
    }

    /// Sends flits while the link has credits: lanes take it in turns, one
    /// flit each, and an idle lane takes the source's next packet.
    fn inject(&mut self, now: u64) {
        let n = self.lanes.len();
        loop {
            let mut progressed = false;
            for i in 0..n {
                let lane = (self.next_lane + i) % n;
                let vc = self.lane_vc(lane);
                if !self.link.can_send(vc) {
                    continue;
                }
                if self.lanes[lane].is_none() {
                    if self.injection_paused {
                        continue;
                    }
                    // Control packets first, then the mechanisms' packets
                    // (resends), then new packets.
                    let control = self.hooks.iter_mut().find_map(|h| h.hook.take_control(vc));
                    if let Some(control) = control {
                        if let Err(e) = self.link.send(control) {
                            self.events.push_back(HostEvent::SendFailed(e));
                        }
                        progressed = true;
                        continue;
                    }
                    self.lanes[lane] = self.hooks.iter_mut().find_map(|h| h.hook.take_packet(now));
                    if self.lanes[lane].is_none() {
                        self.lanes[lane] = self.source.take_packet();
                    }
                }
                let Some(packet) = self.lanes[lane].as_mut() else {
                    continue;
                };
                let Some(mut flit) = packet.next_flit(vc, self.cfg.source.payload_bytes) else {
                    // Stopped before its first flit: nothing to close.
                    self.lanes[lane] = None;
                    progressed = true;
                    continue;
                };
                let done = packet.is_done();
                if let Some(data) = self.data_out.get(&flit.msg) {
                    flit.flags |= crate::flit::flags::DATA;
                    if !flit.payload.is_empty() {
                        flit.payload =
                            super::ip::segment(data, flit.seq, self.cfg.source.payload_bytes);
                    }
                }
                if let Some(head) = flit.head.as_mut() {
                    for h in &mut self.hooks {
                        h.hook.shape_head(head);
                    }
                }
                if let Err(e) = self.link.send(flit) {
                    self.abandoned_packets += 1;
                    self.lanes[lane] = None;
                    self.events.push_back(HostEvent::SendFailed(e));
                    continue;
                }
                progressed = true;
                if done {
                    if let Some(p) = self.lanes[lane].take() {
                        self.source.packet_done(&p, now);
                        for h in &mut self.hooks {
                            h.hook.on_packet_sent(&p, now);
                        }
                        if !self.data_out.is_empty() {
                            self.prune_data();
                        }
                    }
                }
            }
            self.next_lane = (self.next_lane + 1) % n;
            if !progressed {
                break;
            }
        }
    }

    pub fn report(&self) -> HostReport {
        let source = self.source.stats().clone();
        let sink = self.sink.stats().clone();
        let window_ns = self
            .started_at
            .map_or(0, |s| self.last_now.saturating_sub(s));
        let per_s = |x: u64| {
            if window_ns == 0 {
                0.0
            } else {
                x as f64 * 1e9 / window_ns as f64
            }
        };
        let throughput = Throughput {
            window_ns,
            offered_flits_per_s: self.cfg.source.load.flits_per_second(),
            sent_flits_per_s: per_s(source.flits_sent),
            accepted_flits_per_s: per_s(sink.delivered_flits),
            accepted_messages_per_s: per_s(sink.delivered_messages),
        };
        let mut report = HostReport {
            host: self.cfg.host,
            pattern: self.cfg.source.pattern.to_string(),
            latency_ns: self.sink.latency().percentiles(),
            recovered_latency_ns: self.sink.recovered_latency().percentiles(),
            recovered_latency_moments_ns: *self.sink.recovered_latency_moments(),
            throughput,
            source_queue: self.source.queued(),
            retained: self.source.retained().len(),
            abandoned_packets: self.abandoned_packets,
            partial_messages: self.sink.partial_messages(),
            held_messages: self.sink.held_messages(),
            recovery_in_progress: self.recovery_in_progress(),
            sent_to: if self.cfg.hosts as usize <= MAX_FLOW_REPORT_HOSTS {
                self.source.sent_to().clone()
            } else {
                BTreeMap::new()
            },
            delivered_from: if self.cfg.hosts as usize <= MAX_FLOW_REPORT_HOSTS {
                self.sink.delivered_from()
            } else {
                BTreeMap::new()
            },
            trace_hash: self.sink.trace_hash(),
            sbrp: SbrpStats::default(),
            intermediate: IntermediateStats::default(),
            source,
            sink,
        };
        for h in &self.hooks {
            h.hook.report(&mut report);
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::super::message::split_message_id;
    use super::super::retained::ReleasePolicy;
    use super::super::source::{ArrivalProcess, MessageLength, OfferedLoad};
    use super::super::traffic::TrafficPattern;
    use super::*;

    fn cfg(host: HostId, pattern: TrafficPattern, vcs: u8, injection: InjectionVc) -> HostConfig {
        HostConfig {
            host,
            hosts: 2,
            source: SourceConfig {
                pattern,
                load: OfferedLoad::FlitsPerSecond { rate: 4e6 },
                arrivals: ArrivalProcess::Poisson,
                length: MessageLength::Uniform { min: 1, max: 12 },
                max_packet_flits: 4,
                payload_bytes: 16,
                queue_capacity: 32,
                max_messages: Some(200),
                duration_ns: None,
                ..SourceConfig::default()
            },
            injection,
            link: LinkConfig {
                vcs,
                buffer_depth: 4,
                bandwidth_flits_per_s: Some(20_000_000),
                propagation_ns: 500,
                keepalive_interval_ns: 1_000_000,
                dead_after_ns: 10_000_000,
                ..LinkConfig::default()
            },
            epoch: 1,
            seed: 42,
            record_trace: true,
        }
    }

    /// Two hosts cabled back to back; datagrams take `wire_ns` to cross.
    /// Runs until both are drained and quiet, or `limit_ns`.
    fn run_pair(a: HostConfig, b: HostConfig, wire_ns: u64, limit_ns: u64) -> [HostEndpoint; 2] {
        let eps = [HostEndpoint::new(a).unwrap(), HostEndpoint::new(b).unwrap()];
        run_endpoints(eps, wire_ns, limit_ns)
    }

    fn run_endpoints(mut eps: [HostEndpoint; 2], wire_ns: u64, limit_ns: u64) -> [HostEndpoint; 2] {
        let mut in_flight: VecDeque<(u64, usize, Vec<u8>)> = VecDeque::new();
        let mut now = 0;
        for ep in &mut eps {
            ep.start(now);
        }
        let mut buf = Vec::new();
        for _ in 0..1_000_000 {
            for (i, ep) in eps.iter_mut().enumerate() {
                while ep.poll_transmit(now, &mut buf) {
                    in_flight.push_back((now + wire_ns, 1 - i, buf.clone()));
                }
            }
            let done = eps.iter().all(|e| e.is_drained())
                && in_flight.is_empty()
                && eps.iter().all(|e| e.sink().partial_messages() == 0);
            if done && eps.iter().all(|e| e.report().sink.delivered_messages > 0) {
                return eps;
            }
            let next = eps
                .iter()
                .filter_map(|e| e.poll_timeout())
                .chain(in_flight.front().map(|x| x.0))
                .min()
                .expect("something is always pending");
            now = now.max(next);
            if now > limit_ns {
                return eps;
            }
            while in_flight.front().is_some_and(|x| x.0 <= now) {
                let (_, to, data) = in_flight.pop_front().unwrap();
                eps[to].handle_datagram(now, &data);
            }
            for ep in &mut eps {
                if ep.poll_timeout().is_some_and(|t| t <= now) {
                    ep.handle_timeout(now);
                }
            }
        }
        panic!("simulation did not settle");
    }

    #[test]
    fn data_messages_share_the_link_with_generated_traffic_and_arrive_whole() {
        let ipv4 = |len: usize, tag: u8| {
            let mut p = vec![tag; len];
            p[0] = 0x45;
            p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            Bytes::from(p)
        };
        let mut a =
            HostEndpoint::new(cfg(0, TrafficPattern::Uniform, 1, InjectionVc::default())).unwrap();
        let b =
            HostEndpoint::new(cfg(1, TrafficPattern::Uniform, 1, InjectionVc::default())).unwrap();
        // 20 B: one flit; 100 B: 7 flits in 2 packets; 1500 B: 94 flits.
        let sent: Vec<Bytes> = [20, 100, 1500, 64, 65]
            .iter()
            .enumerate()
            .map(|(i, &len)| ipv4(len, i as u8 + 1))
            .collect();
        for p in &sent {
            assert!(a.send_data(0, 1, p.clone()));
        }
        assert!(!a.send_data(0, 0, sent[0].clone()), "not to itself");
        assert_eq!(a.source().stats().data_messages, 5);
        let [a, mut b] = run_endpoints([a, b], 1_000, 50_000_000);
        check_clean(&a, true);
        check_clean(&b, true);
        let mut got = Vec::new();
        while let Some(e) = b.poll_event() {
            if let HostEvent::Data { src, data } = e {
                assert_eq!(src, 0);
                got.push(super::super::ip::trim(data).expect("an IP packet"));
            }
        }
        assert_eq!(got, sent);
        // Generated messages were delivered beside them.
        assert!(b.report().sink.delivered_messages > 5);
        // Nothing is kept once sent (no recovery protocol: nothing retained).
        assert!(a.data_out.is_empty(), "{} left", a.data_out.len());
    }

    fn check_clean(ep: &HostEndpoint, in_order: bool) {
        let r = ep.report();
        assert_eq!(r.sink.duplicate_messages, 0);
        assert_eq!(r.sink.corrupted_flits, 0);
        assert_eq!(r.sink.incomplete_packets, 0);
        assert_eq!(r.sink.orphan_flits, 0);
        assert_eq!(r.sink.misdelivered_packets, 0);
        if in_order {
            assert_eq!(r.sink.out_of_order_messages, 0);
        }
        assert_eq!(r.abandoned_packets, 0);
        assert_eq!(r.retained, 0);
    }

    #[test]
    fn back_to_back_hosts_deliver_everything_in_order() {
        let p = TrafficPattern::Uniform;
        let [a, b] = run_pair(
            cfg(0, p.clone(), 1, InjectionVc::default()),
            cfg(1, p, 1, InjectionVc::default()),
            1_000,
            1_000_000_000,
        );
        for (me, other) in [(&a, &b), (&b, &a)] {
            check_clean(me, true);
            let (mr, or) = (me.report(), other.report());
            assert_eq!(mr.source.generated_messages, 200);
            assert_eq!(mr.sink.delivered_messages, or.source.generated_messages);
            assert_eq!(mr.sink.delivered_flits, or.source.generated_flits);
            assert_eq!(mr.latency_ns.count, 200);
            // At least two propagation delays of 500 ns + the wire: > 1.5 µs.
            assert!(mr.latency_ns.min >= 1_500, "{:?}", mr.latency_ns);
            assert!(mr.throughput.accepted_flits_per_s > 0.0);
        }
        assert_eq!(a.delivery_trace().len(), 200);
        assert!(a.delivery_trace().windows(2).all(|w| w[0].msg < w[1].msg));
    }

    #[test]
    fn round_robin_injection_uses_every_vc() {
        let p = TrafficPattern::Uniform;
        let rr = InjectionVc::RoundRobin;
        let [a, b] = run_pair(
            cfg(0, p.clone(), 3, rr),
            cfg(1, p, 3, rr),
            1_000,
            1_000_000_000,
        );
        for ep in [&a, &b] {
            check_clean(ep, false);
            assert_eq!(ep.report().sink.delivered_messages, 200);
            let tx = ep.link().stats().tx_flits;
            assert!(tx[..3].iter().all(|&n| n > 0), "{tx:?}");
        }
    }

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        let p = TrafficPattern::Uniform;
        let run = |seed| {
            let (mut x, mut y) = (
                cfg(0, p.clone(), 2, InjectionVc::RoundRobin),
                cfg(1, p.clone(), 2, InjectionVc::RoundRobin),
            );
            x.seed = seed;
            y.seed = seed;
            let [a, b] = run_pair(x, y, 700, 1_000_000_000);
            (a.delivery_trace().to_vec(), b.report().trace_hash)
        };
        let first = run(1);
        assert_eq!(first, run(1));
        assert_ne!(first, run(2));
    }

    #[test]
    fn saturated_source_refuses_rather_than_buffers() {
        let p = TrafficPattern::Uniform;
        let mut x = cfg(0, p.clone(), 1, InjectionVc::default());
        x.source.load = OfferedLoad::FlitsPerSecond { rate: 1e9 };
        x.source.max_messages = None;
        x.source.duration_ns = Some(200_000);
        let mut y = cfg(1, p, 1, InjectionVc::default());
        y.source.max_messages = Some(1);
        let [a, b] = run_pair(x, y, 1_000, 1_000_000_000);
        let r = a.report();
        assert!(r.source.not_generated_queue_full > 0);
        assert!(r.source_queue <= 32);
        assert_eq!(
            b.report().sink.delivered_messages,
            r.source.generated_messages
        );
        check_clean(&b, true);
        // Credits, not bandwidth, limit this link: 4 slots per round trip of
        // 2 × (1 µs wire + 0.5 µs propagation) ≈ 1.33 Mflit/s, far below the
        // 20 Mflit/s token bucket.
        let rate = r.throughput.sent_flits_per_s;
        assert!((1.1e6..1.45e6).contains(&rate), "{rate}");
    }

    #[test]
    fn set_source_replaces_the_traffic_before_start() {
        let p = TrafficPattern::Uniform;
        let mut eps = [0, 1].map(|h| {
            let mut c = cfg(h, p.clone(), 1, InjectionVc::default());
            c.source.max_messages = Some(0);
            HostEndpoint::new(c).unwrap()
        });
        let mut bigger = eps[0].config().source.clone();
        bigger.payload_bytes = 4000;
        assert!(matches!(
            eps[0].set_source(bigger, 1),
            Err(ConfigError::FlitTooLarge { .. })
        ));
        for ep in &mut eps {
            let mut other = ep.config().source.clone();
            other.max_messages = Some(7);
            other.payload_bytes = 32;
            ep.set_source(other, 5).unwrap();
        }
        let [a, b] = run_endpoints(eps, 1_000, 1_000_000_000);
        for ep in [&a, &b] {
            // The sinks check the new payload size: nothing looks corrupt.
            check_clean(ep, true);
            assert_eq!(ep.report().sink.delivered_messages, 7);
        }
    }

    /// Two hosts cabled back to back, stepped by hand (datagrams take
    /// `wire_ns` to cross), so that a test can act between steps.
    struct Pair {
        eps: [HostEndpoint; 2],
        wire: VecDeque<(u64, usize, Vec<u8>)>,
        wire_ns: u64,
        now: u64,
        buf: Vec<u8>,
    }

    impl Pair {
        fn new(a: HostConfig, b: HostConfig, wire_ns: u64) -> Self {
            let mut eps = [HostEndpoint::new(a).unwrap(), HostEndpoint::new(b).unwrap()];
            for ep in &mut eps {
                ep.start(0);
            }
            Pair {
                eps,
                wire: VecDeque::new(),
                wire_ns,
                now: 0,
                buf: Vec::new(),
            }
        }

        /// Sends what is due, then moves to the next event if it is no
        /// later than `limit` and handles it; false if it is later.
        fn step(&mut self, limit: u64) -> bool {
            for (i, ep) in self.eps.iter_mut().enumerate() {
                while ep.poll_transmit(self.now, &mut self.buf) {
                    self.wire
                        .push_back((self.now + self.wire_ns, 1 - i, self.buf.clone()));
                }
            }
            let next = self
                .eps
                .iter()
                .filter_map(|e| e.poll_timeout())
                .chain(self.wire.front().map(|x| x.0))
                .min();
            let Some(next) = next.filter(|&t| t <= limit) else {
                return false;
            };
            self.now = self.now.max(next);
            while self.wire.front().is_some_and(|x| x.0 <= self.now) {
                let (_, to, data) = self.wire.pop_front().unwrap();
                self.eps[to].handle_datagram(self.now, &data);
            }
            for ep in &mut self.eps {
                if ep.poll_timeout().is_some_and(|t| t <= self.now) {
                    ep.handle_timeout(self.now);
                }
            }
            true
        }

        fn run_until(&mut self, t: u64) {
            while self.step(t) {}
            self.now = self.now.max(t);
        }

        /// Steps until `cond` holds; panics if it does not by `limit`.
        fn run_until_cond(&mut self, limit: u64, cond: impl Fn(&Pair) -> bool) {
            while !cond(self) {
                assert!(self.step(limit), "condition not met by {limit} ns");
            }
        }

        fn in_flight(&self) -> u64 {
            self.eps.iter().map(HostEndpoint::in_flight_flits).sum()
        }
    }

    /// Host 0 sends `msgs` messages of one 16-flit packet each to host 1
    /// (4-flit buffers: a packet takes several credit round trips), host 1
    /// sends nothing.
    fn one_way(msgs: u64, injection: InjectionVc, vcs: u8) -> (HostConfig, HostConfig) {
        let p = TrafficPattern::Uniform;
        let mut a = cfg(0, p.clone(), vcs, injection);
        a.source.length = MessageLength::Fixed { flits: 16 };
        a.source.max_packet_flits = 16;
        a.source.max_messages = Some(msgs);
        let mut b = cfg(1, p, vcs, injection);
        b.source.max_messages = Some(0);
        (a, b)
    }

    /// A packet partly sent when injection is paused: it finishes, and
    /// nothing else leaves while generation goes on into the source queue;
    /// after the resume the queued messages go out, in order.
    #[test]
    fn paused_injection_finishes_the_started_packet_and_starts_no_new_one() {
        let (a, b) = one_way(20, InjectionVc::default(), 1);
        let mut pair = Pair::new(a, b, 1_000);
        // The first packet is on its way: some flits out, not all.
        pair.run_until_cond(10_000_000, |p| {
            p.eps[0].source().stats().packets_started == 1
                && p.eps[0].link().stats().tx_flits[0] >= 2
        });
        let stats = pair.eps[0].source().stats().clone();
        assert_eq!(stats.packets_sent, 0, "{stats:?}");
        assert!(pair.eps[0].in_flight_flits() > 0);
        let now = pair.now;
        pair.eps[0].set_injection_paused(now, true);
        assert!(pair.eps[0].is_injection_paused());
        // Long enough for every message to be generated (4 Mflit/s: one
        // 16-flit message per 4 µs on average) and many packets to go out.
        pair.run_until(now + 2_000_000);
        let r = pair.eps[0].report();
        assert_eq!(r.source.packets_started, 1, "{:?}", r.source);
        assert_eq!(r.source.packets_sent, 1, "the started packet finished");
        assert_eq!(r.source.generated_messages, 20, "generation went on");
        assert_eq!(r.source.not_generated_queue_full, 0);
        assert_eq!(r.source_queue, 19, "the rest waits in the source queue");
        assert_eq!(pair.eps[0].link().stats().tx_flits[0], 16);
        assert!(!pair.eps[0].is_drained());
        assert_eq!(pair.eps[1].report().sink.delivered_messages, 1);
        assert_eq!(pair.in_flight(), 0, "paused and drained: nothing in flight");
        // Pausing again changes nothing; resuming sends the rest.
        pair.eps[0].set_injection_paused(pair.now, true);
        let now = pair.now;
        pair.eps[0].set_injection_paused(now, false);
        assert!(!pair.eps[0].is_injection_paused());
        // The resume starts the next packet at once: its first flits are
        // queued on the link (credits taken), the rest in the lane; each
        // flit counts once.
        assert!(pair.eps[0].link().queued() > 0);
        assert_eq!(pair.eps[0].in_flight_flits(), 16);
        pair.run_until_cond(now + 10_000_000, |p| {
            p.eps[0].is_drained() && p.in_flight() == 0
        });
        let [a, b] = &pair.eps;
        check_clean(b, true);
        assert_eq!(a.report().source.packets_sent, 20);
        assert_eq!(b.report().sink.delivered_messages, 20);
        let seqs: Vec<u64> = b
            .delivery_trace()
            .iter()
            .map(|d| split_message_id(d.msg).1 as u64)
            .collect();
        assert_eq!(seqs, (0..20).collect::<Vec<_>>(), "in order, once each");
    }

    /// A second run on the same hosts (a controller attached again to a
    /// long-lived fabric): its report counts its own messages only, and
    /// its message numbers are new, so the receiver sees no duplicate.
    #[test]
    fn a_second_run_reports_itself_alone_and_reuses_no_message_number() {
        let (a, b) = one_way(20, InjectionVc::default(), 1);
        let source = a.source.clone();
        let mut pair = Pair::new(a, b, 1_000);
        pair.run_until_cond(50_000_000, |p| p.eps[0].is_drained() && p.in_flight() == 0);
        assert_eq!(pair.eps[1].report().sink.delivered_messages, 20);
        let mut second = source;
        second.max_messages = Some(12);
        pair.eps[0].set_source(second, 7).unwrap();
        for ep in &mut pair.eps {
            ep.begin_run();
        }
        let now = pair.now;
        pair.eps[0].start(now);
        pair.eps[1].start(now);
        pair.run_until_cond(now + 50_000_000, |p| {
            p.eps[0].is_drained() && p.in_flight() == 0
        });
        let [a, b] = &pair.eps;
        check_clean(b, true);
        assert_eq!(a.report().source.messages_sent, 12);
        let sink = b.report();
        assert_eq!(sink.sink.delivered_messages, 12, "{:?}", sink.sink);
        assert_eq!(sink.delivered_from.get(&0), Some(&12));
        assert_eq!(sink.latency_ns.count, 12);
        let seqs: Vec<u32> = b
            .delivery_trace()
            .iter()
            .map(|d| split_message_id(d.msg).1)
            .collect();
        assert_eq!(seqs, (20..32).collect::<Vec<_>>(), "numbers go on");
    }

    /// With one lane per VC, every packet partly sent at the pause
    /// finishes (each on its own VC), and none starts on an idle lane.
    #[test]
    fn paused_round_robin_injection_finishes_every_open_lane() {
        let (a, b) = one_way(12, InjectionVc::RoundRobin, 2);
        let mut pair = Pair::new(a, b, 1_000);
        // Both lanes carry a packet partly sent.
        pair.run_until_cond(10_000_000, |p| {
            p.eps[0]
                .lanes
                .iter()
                .all(|l| l.as_ref().is_some_and(|p| p.emitted > 0 && !p.is_done()))
        });
        let now = pair.now;
        let started = pair.eps[0].source().stats().packets_started;
        pair.eps[0].set_injection_paused(now, true);
        pair.run_until(now + 2_000_000);
        let r = pair.eps[0].report();
        assert_eq!(r.source.packets_started, started, "{:?}", r.source);
        assert_eq!(r.source.packets_sent, started);
        assert!(pair.eps[0].lanes.iter().all(Option::is_none));
        assert_eq!(pair.eps[1].report().sink.delivered_messages, started);
        assert_eq!(pair.in_flight(), 0);
        pair.eps[0].set_injection_paused(pair.now, false);
        let now = pair.now;
        pair.run_until_cond(now + 10_000_000, |p| {
            p.eps[0].is_drained() && p.in_flight() == 0
        });
        check_clean(&pair.eps[1], false);
        assert_eq!(pair.eps[1].report().sink.delivered_messages, 12);
    }

    /// `in_flight_flits`: 0 when idle, the flits not yet sent plus those
    /// whose credits are not back while a packet goes out, 0 again once
    /// everything is delivered; a dead link's flits are not counted.
    #[test]
    fn in_flight_flits_counts_what_has_not_left_the_network() {
        let (a, b) = one_way(3, InjectionVc::default(), 1);
        let mut pair = Pair::new(a, b, 1_000);
        assert_eq!(pair.in_flight(), 0, "nothing generated yet");
        pair.run_until_cond(10_000_000, |p| {
            p.eps[0].link().is_up() && p.eps[1].link().is_up()
        });
        assert_eq!(pair.in_flight(), 0, "links up, idle");
        pair.run_until_cond(10_000_000, |p| {
            p.eps[0].source().stats().packets_started == 1
                && p.eps[0].link().stats().tx_flits[0] >= 2
        });
        // Every flit of the packet is either unsent (in the lane or queued
        // on the link, credit taken) or sent and not yet freed by host 1:
        // at most the packet, at least the flits not yet taken from the lane.
        let ep = &pair.eps[0];
        let sent = ep.link().stats().tx_flits[0];
        let freed = pair.eps[1].report().sink.received_flits;
        let n = ep.in_flight_flits();
        assert!((16 - sent..=16).contains(&n), "{n} ({sent} sent)");
        assert!(n >= 16 - freed, "{n} ({freed} received by host 1)");
        assert_eq!(pair.eps[1].in_flight_flits(), 0, "the receiver owes none");
        pair.run_until_cond(10_000_000, |p| p.eps[0].is_drained() && p.in_flight() == 0);
        assert_eq!(pair.eps[1].report().sink.delivered_messages, 3);
        // Idle for a while: still 0 (keepalives carry no flits).
        let t = pair.now + 3_000_000;
        pair.run_until(t);
        assert_eq!(pair.in_flight(), 0);

        // A packet cut by its link going down: what it still has to send
        // and what the link holds will never move, and are not counted.
        let (a, b) = one_way(1, InjectionVc::default(), 1);
        let mut pair = Pair::new(a, b, 1_000);
        pair.run_until_cond(10_000_000, |p| p.eps[0].link().stats().tx_flits[0] >= 2);
        assert!(pair.eps[0].in_flight_flits() > 0);
        pair.eps[0].link_mut().set_admin_up(false);
        assert!(!pair.eps[0].is_drained(), "the packet is cut, not finished");
        assert_eq!(pair.eps[0].in_flight_flits(), 0);
    }

    #[test]
    fn bad_configurations_name_the_host() {
        let p = TrafficPattern::Uniform;
        let mut c = cfg(1, p.clone(), 2, InjectionVc::Fixed { vc: 2 });
        let e = HostEndpoint::new(c.clone()).unwrap_err();
        assert!(matches!(
            e,
            ConfigError::InjectionVc {
                host: 1,
                vc: 2,
                vcs: 2
            }
        ));
        c.injection = InjectionVc::default();
        c.source.payload_bytes = 4000;
        assert!(matches!(
            HostEndpoint::new(c.clone()),
            Err(ConfigError::FlitTooLarge { .. })
        ));
        c.source.payload_bytes = 16;
        c.link.vcs = 0;
        assert!(matches!(
            HostEndpoint::new(c.clone()),
            Err(ConfigError::Link { .. })
        ));
        c.link.vcs = 2;
        c.hosts = 1;
        let e = HostEndpoint::new(c).unwrap_err();
        assert!(e.to_string().starts_with("host 1:"), "{e}");
    }

    /// Host `host` of a pair, under `sbrp`, sending one message of `flits`
    /// flits in 8-flit packets and holding it for a second.
    fn sends_one_held_message(
        host: u32,
        flits: u32,
        sbrp: crate::mechanism::sbrp::host::SbrpConfig,
    ) -> HostEndpoint {
        let mut c = cfg(host, TrafficPattern::Uniform, 2, InjectionVc::RoundRobin);
        c.source.length = MessageLength::Fixed { flits };
        c.source.max_packet_flits = 8;
        c.source.max_messages = Some(1);
        c.source.release = ReleasePolicy::HoldFor {
            hold_ns: 1_000_000_000,
        };
        let mut e = HostEndpoint::new(c).unwrap();
        e.set_recovery(sbrp).unwrap();
        e
    }

    /// The software overhead (spec 003 §5.9) delays the resend: an RRQ a
    /// switch made (node C) costs C's handler and the sender's, one the
    /// receiver made only the sender's (the receiver paid its own before
    /// sending it); the resend does not start a nanosecond earlier.
    #[test]
    fn a_resend_waits_for_the_software_overhead() {
        use super::super::message::message_id;
        use crate::mechanism::sbrp::host::{SbrpConfig, SbrpHost};
        use crate::mechanism::sbrp::{receiver_rrq_flit, rrq_flit, RecoveryProtocol};
        let one = |host| {
            sends_one_held_message(
                host,
                8,
                SbrpConfig {
                    protocol: RecoveryProtocol::Sbrp1,
                    resend_delay_ns: 380,
                    report_delay_ns: 260,
                    switch_report_delay_ns: 260,
                    ..SbrpConfig::default()
                },
            )
        };
        let [mut a, _b] = run_endpoints([one(0), one(1)], 500, 50_000_000);
        assert_eq!(a.source().retained().len(), 1, "host 0 keeps its message");
        let msg = message_id(1, 0);
        let resent = |a: &HostEndpoint| a.sbrp_stats().resent_packets;
        let started = |a: &HostEndpoint| {
            a.lanes
                .iter()
                .flatten()
                .any(|p| p.msg.id == msg && p.submsg > 0)
        };

        // Node C's RRQ: C's handler (260) + the sender's (380).
        let sbrp = |a: &HostEndpoint| a.hook::<SbrpHost>().unwrap().resends();
        let t = 60_000_000;
        a.receive_for_test(t, &rrq_flit(1, 0, msg, 0, 0, 3, 0, t));
        assert_eq!(resent(&a), 1);
        assert_eq!(sbrp(&a), (1, Some(t + 640)));
        a.handle_timeout(t + 639);
        assert!(!started(&a) && sbrp(&a).0 == 1, "resent too early");
        a.handle_timeout(t + 640);
        assert_eq!(sbrp(&a).0, 0, "not resent when due");
        assert!(started(&a) || a.link().queued() > 0);
        let mut buf = Vec::new();
        while a.poll_transmit(t + 640, &mut buf) {}

        // The receiver's RRQ about the resend: the sender's 380 only.
        let t = 70_000_000;
        a.receive_for_test(t, &receiver_rrq_flit(1, 0, msg, 0, 1, 5, 0, t));
        assert_eq!(resent(&a), 2);
        assert_eq!(sbrp(&a), (1, Some(t + 380)));
        a.handle_timeout(t + 379);
        assert_eq!(sbrp(&a).0, 1, "resent too early");
        a.handle_timeout(t + 380);
        assert_eq!(sbrp(&a).0, 0, "not resent when due");
    }

    /// A receiver's gap request names its message's first missing flit,
    /// once per gap; the packets after it may be missing too (two dead
    /// switches in a row lost one packet with no report and a report of
    /// the next died with the second switch; or nothing of the message
    /// arrived, and its receiver does not know how many packets it has).
    /// The sender resends the message from that flit on: the named packet
    /// from the flit, every later one whole. Any other request stays one
    /// packet's.
    #[test]
    fn a_gap_request_resends_the_message_from_its_first_missing_flit_on() {
        use super::super::message::message_id;
        use crate::mechanism::sbrp::host::{SbrpConfig, SbrpHost};
        use crate::mechanism::sbrp::{receiver_rrq_flit, RecoveryProtocol, GAP_RRQ_SSNF};
        let one = |host| {
            sends_one_held_message(
                host,
                32,
                SbrpConfig {
                    protocol: RecoveryProtocol::Sbrp2,
                    resend_delay_ns: 380,
                    ..SbrpConfig::default()
                },
            )
        };
        let [mut a, _b] = run_endpoints([one(0), one(1)], 500, 50_000_000);
        assert_eq!(a.source().retained().len(), 1, "host 0 keeps its message");
        let msg = message_id(1, 0);
        let sbrp = |a: &HostEndpoint| a.hook::<SbrpHost>().unwrap().resends();

        // The receiver's R-4 request for packet 1 from flit 9: that packet.
        let t = 60_000_000;
        a.receive_for_test(t, &receiver_rrq_flit(1, 0, msg, 1, 0, 9, 0, t));
        assert_eq!(a.sbrp_stats().resent_packets, 1);
        assert_eq!(a.sbrp_stats().resent_flits, 7);
        assert_eq!(sbrp(&a), (1, Some(t + 380)));

        // Its gap request from flit 9: packet 1 from there (the pending
        // resend replaced), packets 2 and 3 whole.
        let t = t + 100;
        let gap = receiver_rrq_flit(1, 0, msg, 1, GAP_RRQ_SSNF, 9, 0, t);
        a.receive_for_test(t, &gap);
        assert_eq!(a.sbrp_stats().resent_packets, 1 + 3);
        assert_eq!(a.sbrp_stats().resent_flits, 7 + 7 + 8 + 8);
        assert_eq!(sbrp(&a), (3, Some(t + 380)));
        assert_eq!(
            a.hook::<SbrpHost>().unwrap().pending_resends(),
            [(1, 9, 2), (2, 16, 1), (3, 24, 1)],
            "(packet, first flit, SSNF)"
        );
    }

    /// With no overhead configured for C (the default), a switch's RRQ is
    /// served after the sender's own delay only, as before the field.
    #[test]
    fn a_switch_rrq_costs_nothing_extra_by_default() {
        use crate::mechanism::sbrp::host::SbrpConfig;
        assert_eq!(SbrpConfig::default().switch_report_delay_ns, 0);
    }
}
