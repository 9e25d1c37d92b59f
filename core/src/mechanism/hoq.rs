//! The head-of-queue lifetime: deadlock recovery by discarding a head
//! that waited too long for an output VC, as InfiniBand switches do (HOQ
//! lifetime) and as Disha's `t_deadlock` (the SBRP paper, §5.10).

use super::{hook_any, Applies, Mechanism, Variant};
use crate::switch::hook::SwitchHook;
use crate::switch::{DropReason, Switch};

/// The mechanism's registry name.
pub const NAME: &str = "hoq";

/// The head-of-queue lifetime in the registry: configured by its own
/// option (a duration), not selected by name.
pub struct Hoq;

impl Mechanism for Hoq {
    fn name(&self) -> &'static str {
        NAME
    }
    fn applies(&self) -> Applies {
        Applies::Anywhere
    }
    fn variants(&self) -> &'static [Variant] {
        &[]
    }
}

/// Buffer drains in the default head-of-queue lifetime
/// ([`default_head_of_queue_lifetime_ns`]).
pub const HOQ_LIFETIME_BUFFER_DRAINS: u64 = 128;

/// The head-of-queue lifetime (see [`Switch::set_head_of_queue_lifetime`])
/// for links of `bandwidth_flits_per_s` (None: unpaced, taken as 1 µs per
/// flit) and input buffers of `buffer_depth` flits:
/// [`HOQ_LIFETIME_BUFFER_DRAINS`] times the time one full input buffer
/// takes to drain at link rate (`buffer_depth` flit times; see
/// [`default_head_of_queue_lifetime_for_packets_ns`] for long packets).
///
/// Why that long: a head that is not deadlocked waits for the worm that
/// holds its output VC, which moves as soon as the worm ahead of it does.
/// Behind a hot spot a head waits for the packets ahead of it for that
/// output (the other `(radix − 1) × vcs` input VCs, each up to a full
/// buffer), so ordinary waits are a few buffer drains; 128 leaves an order
/// of magnitude above that (in the simulator's fault-free 7×7 mesh at
/// twice the seed 003 load no head waited more than 1/30 of it, 680 ns of
/// 20 µs: `sim_hoq_tests`). Why not longer: a deadlocked head never moves,
/// the lifetime is the recovery's latency, and around two dead routers the
/// deadlock re-forms again and again (on real processes, 7×7 mesh, r10 and
/// r38 dead: 410 ms (1024 drains) still held 370 messages when the drain
/// gave up, 51 ms none; docs/sbrp.md "Deadlock"). `flitctl` adds a floor
/// for the daemons' scheduling delays.
pub fn default_head_of_queue_lifetime_ns(
    bandwidth_flits_per_s: Option<u64>,
    buffer_depth: u16,
) -> u64 {
    default_head_of_queue_lifetime_for_packets_ns(bandwidth_flits_per_s, buffer_depth, 0)
}

/// [`default_head_of_queue_lifetime_ns`] for packets of up to
/// `max_packet_flits`: a worm holds its output VC until its tail passes,
/// so with packets longer than a buffer each one ahead of a waiting head
/// costs its length, not a buffer; the drain unit is
/// `max(buffer_depth, max_packet_flits)` flit times.
pub fn default_head_of_queue_lifetime_for_packets_ns(
    bandwidth_flits_per_s: Option<u64>,
    buffer_depth: u16,
    max_packet_flits: u32,
) -> u64 {
    let flit_ns = bandwidth_flits_per_s
        .filter(|&b| b > 0)
        .map_or(1_000, |b| (1_000_000_000 / b).max(1));
    let drain = (buffer_depth as u64).max(max_packet_flits as u64).max(1);
    HOQ_LIFETIME_BUFFER_DRAINS
        .saturating_mul(drain)
        .saturating_mul(flit_ns)
}

/// A switch's lifetime clock: the lifetime, and the earliest instant a
/// waiting head's lifetime runs out as of the last allocation pass (a head
/// granted since leaves it early: one spurious wake-up, after which the
/// next pass recomputes it).
struct HoqHook {
    lifetime_ns: u64,
    next: Option<u64>,
}

impl SwitchHook for HoqHook {
    fn name(&self) -> &'static str {
        NAME
    }
    hook_any!();

    fn begin_pass(&mut self, _now: u64) {
        self.next = None;
    }

    /// A head that has waited `lifetime_ns` is dropped
    /// ([`DropReason::HoqLifetime`]); the earliest end of a running clock
    /// is kept for [`Switch::poll_timeout`]: no scan of the input VCs beyond
    /// the allocation pass that decides them anyway.
    fn on_wait(&mut self, now: u64, since: u64) -> Option<DropReason> {
        let end = since.saturating_add(self.lifetime_ns);
        if now >= end {
            return Some(DropReason::HoqLifetime);
        }
        self.next = Some(self.next.map_or(end, |t| t.min(end)));
        None
    }

    fn on_drop(
        &mut self,
        sw: &mut Switch,
        _i: usize,
        f: crate::flit::Flit,
        reason: DropReason,
        _track: Option<crate::switch::input::Tracked>,
        _afresh: bool,
    ) -> Option<crate::flit::Flit> {
        if reason == DropReason::HoqLifetime {
            // Reported by the switch's `Dropped` event (switchd logs it).
            sw.counters.hoq_discards += 1;
        }
        Some(f)
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.next
    }
}

impl Switch {
    /// Deadlock recovery by a head-of-queue lifetime: a head that has
    /// waited at the front of its input VC for an output VC for
    /// `lifetime_ns` (`Some`) without being granted one is presumed
    /// deadlocked and discarded with the rest of its worm (the flits here
    /// and those still arriving, each credited back upstream), counted as
    /// [`DropReason::HoqLifetime`]. With SBRP on, its source is asked for a
    /// resend at once, as for a head local rerouting cannot route; a
    /// recover request that waits that long is started afresh from the
    /// local input instead. `None` (the default) turns it off.
    ///
    /// A setter (as [`Switch::set_recovery`]) rather than a
    /// [`crate::switch::SwitchConfig`] field: it is a policy of the
    /// recovery layer, and the simulator and its tests build
    /// `SwitchConfig` field by field. The time comes from the switch's
    /// inputs (`now` of the last datagram or timeout); the deadline is part
    /// of [`Switch::poll_timeout`].
    pub fn set_head_of_queue_lifetime(&mut self, lifetime_ns: Option<u64>) {
        let hook = lifetime_ns.filter(|&l| l > 0).map(|lifetime_ns| {
            Box::new(HoqHook {
                lifetime_ns,
                next: None,
            }) as Box<dyn SwitchHook>
        });
        self.set_hook(super::rank(NAME), NAME, hook);
        self.pump();
    }

    pub fn head_of_queue_lifetime(&self) -> Option<u64> {
        self.hook::<HoqHook>().map(|h| h.lifetime_ns)
    }
}

#[cfg(test)]
#[path = "hoq_tests.rs"]
mod tests;
