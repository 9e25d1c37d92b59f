//! Route computation on a head flit: which output port(s) the installed
//! table allows for the packet's current target.

use crate::flit::Head;
use crate::routing::SwitchTable;
use crate::topology::{HostId, PortNo};

/// The host a head is currently routed toward: its current intermediate
/// while `leg < n_intermediates` (seed 004 §3.2), its destination otherwise.
/// Advancing `leg` at the intermediate is not done here (see docs/wire.md).
pub fn target(h: &Head) -> HostId {
    let leg = h.leg as usize;
    if leg < (h.n_intermediates as usize).min(h.intermediates.len()) {
        h.intermediates[leg]
    } else {
        h.dst
    }
}

/// The ports a table offers for one destination, borrowed from the table
/// (no allocation per head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route<'t> {
    /// One deterministic port (LFT, intervals).
    Fixed(PortNo),
    /// Adaptive candidates plus the escape port (Duato).
    Adaptive {
        candidates: &'t [PortNo],
        escape: Option<PortNo>,
    },
}

/// Looks `dest` up; `None` when the table has no route.
pub fn lookup(table: &SwitchTable, dest: HostId) -> Option<Route<'_>> {
    match table {
        SwitchTable::Adaptive(a) => {
            let e = a.entries.get(dest as usize)?;
            if e.candidates.is_empty() && e.escape.is_none() {
                return None;
            }
            Some(Route::Adaptive {
                candidates: &e.candidates,
                escape: e.escape,
            })
        }
        _ => table.lookup(dest).map(Route::Fixed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::{AdaptiveEntry, AdaptiveTable, Lft};

    #[test]
    fn target_follows_the_current_leg() {
        let mut h = Head {
            dst: 9,
            intermediates: [4, 5, 0],
            n_intermediates: 2,
            ..Head::default()
        };
        assert_eq!(target(&h), 4);
        h.leg = 1;
        assert_eq!(target(&h), 5);
        h.leg = 2;
        assert_eq!(target(&h), 9);
    }

    #[test]
    fn lookup_borrows_adaptive_entries() {
        let t = SwitchTable::Adaptive(AdaptiveTable {
            entries: vec![
                AdaptiveEntry {
                    candidates: vec![1, 2],
                    escape: Some(0),
                    misroute: Vec::new(),
                },
                AdaptiveEntry::default(),
            ],
        });
        assert_eq!(
            lookup(&t, 0),
            Some(Route::Adaptive {
                candidates: &[1, 2],
                escape: Some(0)
            })
        );
        assert_eq!(lookup(&t, 1), None);
        let l = SwitchTable::Lft(Lft {
            ports: vec![Some(3), None],
        });
        assert_eq!(lookup(&l, 0), Some(Route::Fixed(3)));
        assert_eq!(lookup(&l, 1), None);
        assert_eq!(lookup(&l, 7), None);
    }
}
