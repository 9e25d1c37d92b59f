//! Dynamic FT²EI (seed 000 §4.5–§4.6) inside the switch core. With a
//! [`Ft2eiDynSwitch`] configured, the switch
//! - routes every head by it (interval routing with this switch's own
//!   exclusion registers, adaptive among the allowed up ports), instead of
//!   the installed table;
//! - reacts to a port it declares dead (peer silent past the liveness
//!   timeout, or set down) with `on_local_fault`, with no controller;
//! - carries the protocol's `CTRL{FaultySwitch, ELIB, EUIB}` as one-flit
//!   packets flagged [`flags::FT2EI_CTRL`]: a received one is consumed
//!   whole before anything is decided (store-and-forward), the copies to
//!   send enter through the local input (the one the SBRP recover requests
//!   use) ahead of queued recover requests, each bound to its port;
//! - deflects a packet whose only output is a dead down port down another
//!   live down port (emergency path) and tags it
//!   [`route_flags::DEFLECTED`] so that the child does not send it back up
//!   the port it came in on.
//!
//! Faults are permanent (§4.1): a port that comes back stays excluded until
//! the tables are reinstalled with a new state.

use super::{Decision, Switch};
use crate::flit::{flags, route_flags, Flit, FlitKind, Head};
use crate::recovery::ft2ei_dyn::{Ctrl, DynRoute, Ft2eiDynSwitch, Send};
use crate::topology::{HostId, PortNo};
use bytes::{BufMut, Bytes, BytesMut};

/// Why a switch refuses a dynamic FT²EI configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "switch {switch}: FT²EI for a {k}-ary tree needs radix {need}, this switch has {radix} ports"
)]
pub struct Ft2eiConfigError {
    pub switch: u32,
    pub k: u32,
    pub need: usize,
    pub radix: usize,
}

/// The payload of a CTRL flit.
pub fn encode_ctrl(c: Ctrl) -> Bytes {
    let mut b = BytesMut::with_capacity(12);
    b.put_u32_le(c.faulty);
    b.put_u32_le(c.elib);
    b.put_u32_le(c.euib);
    b.freeze()
}

/// Reads a CTRL payload; `None` if it is not 12 bytes.
pub fn decode_ctrl(p: &[u8]) -> Option<Ctrl> {
    if p.len() != 12 {
        return None;
    }
    let w = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().expect("4 bytes"));
    Some(Ctrl {
        faulty: w(0),
        elib: w(4),
        euib: w(8),
    })
}

/// A one-flit CTRL packet (it has a head like every packet; `dst`/`src`
/// carry the interval for readability in traces, the payload is what
/// counts).
pub fn ctrl_flit(c: Ctrl, now: u64) -> Flit {
    Flit {
        kind: FlitKind::HeadTail,
        vc: 0,
        flags: flags::FT2EI_CTRL,
        msg: 0,
        packet: 0,
        seq: 0,
        head: Some(Head {
            dst: c.euib as HostId,
            src: c.elib as HostId,
            msg_flits: 1,
            born_ns: now,
            route_flags: route_flags::DETERMINISTIC,
            ..Head::default()
        }),
        payload: encode_ctrl(c),
    }
}

impl Switch {
    /// Runs dynamic FT²EI from now on (`Some`), or stops (`None`). Ports
    /// already dead are reported to the protocol at once.
    pub fn set_ft2ei_dyn(&mut self, state: Option<Ft2eiDynSwitch>) -> Result<(), Ft2eiConfigError> {
        if let Some(s) = &state {
            let need = 2 * s.tree().k as usize;
            if self.cfg.radix != need {
                return Err(Ft2eiConfigError {
                    switch: s.id(),
                    k: s.tree().k,
                    need,
                    radix: self.cfg.radix,
                });
            }
        }
        self.ft2ei = state;
        let dead: Vec<usize> = (0..self.ports.len())
            .filter(|&p| self.ports[p].failed || !self.ports[p].link.is_admin_up())
            .collect();
        for p in dead {
            self.ft2ei_local_fault(p);
        }
        self.pump();
        Ok(())
    }

    pub fn ft2ei_dyn(&self) -> Option<&Ft2eiDynSwitch> {
        self.ft2ei.as_ref()
    }

    /// The last protocol error (counted in `counters().ft2ei.errors`),
    /// taken so that the owner logs each once.
    pub fn take_ft2ei_error(&mut self) -> Option<String> {
        self.ft2ei_error.take()
    }

    /// Queues the protocol's output and accounts for its updates.
    fn ft2ei_after(&mut self, before: u64, r: Result<Vec<Send>, impl std::fmt::Display>) {
        let Some(s) = self.ft2ei.as_ref() else {
            return;
        };
        let applied = s.updates() - before;
        if applied > 0 {
            self.counters.ft2ei.exclusion_updates += applied;
            self.counters.ft2ei.last_update_ns = self.now;
        }
        match r {
            Ok(sends) => {
                let now = self.now;
                self.ctrl_pending
                    .extend(sends.into_iter().map(|s| (s.port, ctrl_flit(s.ctrl, now))));
            }
            Err(e) => {
                self.counters.ft2ei.errors += 1;
                self.ft2ei_error = Some(e.to_string());
            }
        }
    }

    /// `on_local_fault` for port `p`, which was just declared dead.
    pub(super) fn ft2ei_local_fault(&mut self, p: usize) {
        let Some(s) = self.ft2ei.as_mut() else {
            return;
        };
        let before = s.updates();
        let r = s.on_local_fault(p as PortNo);
        if self.counters.ft2ei.fault_ns == 0 {
            self.counters.ft2ei.fault_ns = self.now.max(1);
        }
        self.ft2ei_after(before, r);
    }

    /// A CTRL flit arrived on `port`: it is consumed here.
    pub(super) fn ft2ei_receive(&mut self, port: usize, f: &Flit) {
        self.counters.ft2ei.ctrl_received += 1;
        let Some(s) = self.ft2ei.as_mut() else {
            return;
        };
        let Some(c) = decode_ctrl(&f.payload) else {
            self.counters.ft2ei.errors += 1;
            self.ft2ei_error = Some(format!(
                "switch {}: CTRL on port {port} with a {}-byte payload (12 expected)",
                s.id(),
                f.payload.len()
            ));
            return;
        };
        let before = s.updates();
        let r = s.on_ctrl(c, port as PortNo);
        self.ft2ei_after(before, r);
    }

    /// The allocation decision for a CTRL in the local input, bound to
    /// `port`: `None` when the port died and the copy must be discarded.
    pub(super) fn decide_ctrl(&self, port: PortNo) -> Option<Decision> {
        let out = port as usize;
        if out >= self.ports.len() || self.ports[out].failed || !self.ports[out].link.is_admin_up()
        {
            return None;
        }
        let out_vc = 0;
        let free = self.outputs.is_free(out, out_vc);
        let admitted = free && self.ports[out].link.credits(out_vc) >= 1;
        Some(if admitted {
            Decision::Grant { out, out_vc }
        } else {
            Decision::Wait {
                on_credits: free.then_some((out, out_vc)),
            }
        })
    }

    /// The dynamic routing function's ports for the head at input `i`.
    pub(super) fn ft2ei_route(&self, in_port: usize, head: &Head) -> Option<DynRoute> {
        let s = self.ft2ei.as_ref()?;
        let deflected = head.route_flags & route_flags::DEFLECTED != 0;
        Some(s.route(super::routing::target(head), in_port as PortNo, deflected))
    }

    /// A head routed by the protocol was granted `out`: tag it if that is
    /// an emergency deflection, untag it otherwise.
    pub(super) fn ft2ei_granted(&mut self, i: usize, out: usize) {
        let Some(s) = self.ft2ei.as_ref() else {
            return;
        };
        let t = s.tree();
        let id = s.id();
        let Some(h) = self.inputs[i].buf.front_mut().and_then(|f| f.head.as_mut()) else {
            return;
        };
        let d = super::routing::target(h);
        let deflected = t.is_below(id, d) && out as u32 != t.digit(d, t.stage(id));
        if deflected {
            h.route_flags |= route_flags::DEFLECTED;
            self.counters.ft2ei.deflections += 1;
        } else {
            h.route_flags &= !route_flags::DEFLECTED;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_payload_round_trips_and_rejects_bad_lengths() {
        let c = Ctrl {
            faulty: 6,
            elib: 6,
            euib: 7,
        };
        assert_eq!(decode_ctrl(&encode_ctrl(c)), Some(c));
        assert_eq!(decode_ctrl(&[0; 11]), None);
        let f = ctrl_flit(c, 5);
        assert!(f.flags & flags::FT2EI_CTRL != 0);
        assert!(f.kind.is_head() && f.kind.is_tail());
    }
}
