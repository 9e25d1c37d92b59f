//! The sans-IO driving API every node of a fabric offers, switches and
//! hosts alike: datagrams and time in, datagrams and deadlines out. The
//! daemons' event loop (`flitnet-runtime`) and the simulator ([`crate::sim`])
//! both drive nodes through it.

use crate::host::endpoint::HostEndpoint;
use crate::link::Decoded;
use crate::switch::Switch;
use crate::topology::PortNo;
use bytes::Bytes;

pub trait Node {
    /// A datagram arrived on `port`. Undecodable datagrams are counted by
    /// the node itself.
    fn handle_datagram(&mut self, now: u64, port: PortNo, data: Bytes);
    /// Timer processing at `now`.
    fn handle_timeout(&mut self, now: u64);
    /// Writes the next datagram into `out` (cleared by the caller) and
    /// returns the port it leaves by, or `None` when nothing is ready.
    fn poll_transmit(&mut self, now: u64, out: &mut Vec<u8>) -> Option<PortNo>;
    /// The next instant `handle_timeout` must be called at.
    fn poll_timeout(&self) -> Option<u64>;
}

impl Node for Switch {
    fn handle_datagram(&mut self, now: u64, port: PortNo, data: Bytes) {
        // Undecodable datagrams are counted by the switch itself.
        let _ = Switch::handle_datagram(self, now, port, data);
    }
    fn handle_timeout(&mut self, now: u64) {
        Switch::handle_timeout(self, now);
    }
    fn poll_transmit(&mut self, now: u64, out: &mut Vec<u8>) -> Option<PortNo> {
        Switch::poll_transmit(self, now, out)
    }
    fn poll_timeout(&self) -> Option<u64> {
        Switch::poll_timeout(self)
    }
}

/// A host sends on port 0; a host on one-way links (RUFT) receives on its
/// receive port.
impl Node for HostEndpoint {
    fn handle_datagram(&mut self, now: u64, port: PortNo, data: Bytes) {
        self.handle_datagram_bytes_on(now, port, data);
    }
    fn handle_timeout(&mut self, now: u64) {
        HostEndpoint::handle_timeout(self, now);
    }
    fn poll_transmit(&mut self, now: u64, out: &mut Vec<u8>) -> Option<PortNo> {
        HostEndpoint::poll_transmit_port(self, now, out)
    }
    fn poll_timeout(&self) -> Option<u64> {
        HostEndpoint::poll_timeout(self)
    }
}

/// A node whose peers run in the same process (the simulator): datagrams
/// pass between link ends as the items they carry ([`Decoded`]) rather
/// than encoded, with the same effects.
pub trait InProcess: Node {
    /// [`Node::handle_datagram`] of a datagram written by
    /// [`InProcess::poll_transmit_decoded`]; leaves `d` empty.
    fn handle_decoded(&mut self, now: u64, port: PortNo, d: &mut Decoded);
    /// [`Node::poll_transmit`], writing the datagram into `out` decoded.
    fn poll_transmit_decoded(&mut self, now: u64, out: &mut Decoded) -> Option<PortNo>;
}

impl InProcess for Switch {
    fn handle_decoded(&mut self, now: u64, port: PortNo, d: &mut Decoded) {
        // Undecodable datagrams are counted by the switch itself.
        let _ = Switch::handle_decoded(self, now, port, d);
    }
    fn poll_transmit_decoded(&mut self, now: u64, out: &mut Decoded) -> Option<PortNo> {
        Switch::poll_transmit_decoded(self, now, out)
    }
}

impl InProcess for HostEndpoint {
    fn handle_decoded(&mut self, now: u64, port: PortNo, d: &mut Decoded) {
        self.handle_decoded_on(now, port, d);
    }
    fn poll_transmit_decoded(&mut self, now: u64, out: &mut Decoded) -> Option<PortNo> {
        HostEndpoint::poll_transmit_decoded(self, now, out)
    }
}
