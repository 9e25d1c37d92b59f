//! VC allocation: which output VC a packet takes (the
//! [`crate::routing::VcPolicy`], see [`crate::routing::vc`]) and
//! whether it may claim it now (free, and for virtual cut-through, with
//! credits for the whole packet).

use crate::flit::Head;

pub use crate::routing::vc::{leg_escape_vc, output_vc};

/// Credits a virtual cut-through head needs downstream: the whole packet,
/// which is at most `max_packet_flits` and at most what is left of the
/// message (`msg_flits - seq`, when the head says how long the message is).
pub fn vct_need(max_packet_flits: u16, head: &Head, seq: u32) -> u16 {
    let left = head.msg_flits.saturating_sub(seq);
    if left == 0 {
        max_packet_flits
    } else {
        (left.min(max_packet_flits as u32) as u16).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vct_needs_the_rest_of_the_packet() {
        let h = Head {
            msg_flits: 3,
            ..Head::default()
        };
        assert_eq!(vct_need(8, &h, 0), 3);
        assert_eq!(vct_need(2, &h, 0), 2);
        assert_eq!(vct_need(8, &Head::default(), 0), 8);
    }
}
