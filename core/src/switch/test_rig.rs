//! Test support shared by the unit tests of the switch's fault reactions
//! (`reroute`, `ft2ei_dyn`): one switch with a peer [`Link`] on each port.

use super::Switch;
use crate::flit::Flit;
use crate::link::Link;
use crate::topology::PortNo;

/// Runs `sw` and its `peers` (peer `p` on port `p`) for 20 steps of 1 µs
/// from `now`, and returns every flit the switch delivered to a peer, with
/// its port, in arrival order; the peers return the credits at once.
pub(crate) fn exchange(sw: &mut Switch, peers: &mut [Link], now: &mut u64) -> Vec<(PortNo, Flit)> {
    let mut got = Vec::new();
    let mut buf = Vec::new();
    for _ in 0..20 {
        *now += 1_000;
        for (p, peer) in peers.iter_mut().enumerate() {
            peer.handle_timeout(*now);
            buf.clear();
            while peer.poll_transmit(*now, &mut buf) {
                let _ = sw.handle_datagram_slice(*now, p as PortNo, &buf);
                buf.clear();
            }
        }
        sw.handle_timeout(*now);
        buf.clear();
        while let Some(p) = sw.poll_transmit(*now, &mut buf) {
            let _ = peers[p as usize].handle_datagram_slice(*now, &buf);
            buf.clear();
        }
        for (p, peer) in peers.iter_mut().enumerate() {
            while let Some(f) = peer.poll_received() {
                peer.release(f.vc, 1).unwrap();
                got.push((p as PortNo, f));
            }
        }
    }
    got
}
