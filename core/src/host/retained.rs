//! The sender's retained-message store: every generated message stays here
//! until it may be forgotten, so that a recovery protocol can resend it.
//!
//! Seed 003 (SBRP) requires the sender to keep a message "until delivery is
//! granted" but defines no grant (spec 003 §8, "Sender buffer release"). The
//! store therefore takes its release rule as a [`ReleasePolicy`]:
//! - [`ReleasePolicy::WhenSent`]: forget a message once its last flit has been
//!   handed to the link (what this issue needs; no recovery possible);
//! - [`ReleasePolicy::HoldFor`]: keep it `hold_ns` after it was fully sent
//!   (spec 003's G1, "faithful");
//! - [`ReleasePolicy::UntilReleased`]: keep it until [`RetainedStore::release`]
//!   or [`RetainedStore::release_through`] (a cumulative per-destination
//!   grant, spec 003's G2) says so.
//!
//! Messages are stored by id; a message is only a descriptor (destination,
//! length, birth time), since its flits can be regenerated exactly
//! ([`crate::host::message`]), so keeping one costs a few dozen bytes.

use super::message::{split_message_id, Message};
use crate::topology::HostId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "policy")]
pub enum ReleasePolicy {
    #[default]
    WhenSent,
    HoldFor {
        hold_ns: u64,
    },
    UntilReleased,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetainedMessage {
    pub msg: Message,
    pub packets: u32,
    pub packets_sent: u32,
    /// When its last packet was fully sent.
    pub sent_at: Option<u64>,
    /// It was fully sent once already (a recovery resend completes it
    /// again, which must not count as another message sent).
    pub sent_before: bool,
}

#[derive(Clone, Debug, Default)]
pub struct RetainedStore {
    policy: ReleasePolicy,
    msgs: BTreeMap<u64, RetainedMessage>,
    /// (release time, id) for `HoldFor`.
    expiries: BTreeSet<(u64, u64)>,
    released: u64,
}

impl RetainedStore {
    pub fn new(policy: ReleasePolicy) -> Self {
        RetainedStore {
            policy,
            ..Default::default()
        }
    }

    pub fn insert(&mut self, msg: Message, packets: u32) {
        self.msgs.insert(
            msg.id,
            RetainedMessage {
                msg,
                packets,
                packets_sent: 0,
                sent_at: None,
                sent_before: false,
            },
        );
    }

    pub fn get(&self, id: u64) -> Option<&RetainedMessage> {
        self.msgs.get(&id)
    }

    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Messages released so far.
    pub fn released(&self) -> u64 {
        self.released
    }

    /// Records that one more packet of `id` left completely. Returns true
    /// when that was the message's last packet, the first time it was
    /// (a message completed again by a recovery resend is not sent twice).
    pub fn packet_sent(&mut self, id: u64, now: u64) -> bool {
        let Some(m) = self.msgs.get_mut(&id) else {
            return false;
        };
        m.packets_sent += 1;
        if m.packets_sent < m.packets || m.sent_at.is_some() {
            return false;
        }
        m.sent_at = Some(now);
        let first = !std::mem::replace(&mut m.sent_before, true);
        match self.policy {
            ReleasePolicy::WhenSent => {
                self.release(id);
            }
            ReleasePolicy::HoldFor { hold_ns } => {
                self.expiries.insert((now.saturating_add(hold_ns), id));
            }
            ReleasePolicy::UntilReleased => {}
        }
        first
    }

    /// SBRP: a packet of `id` is being resent, so the message is not fully
    /// sent any more; `was_counted` says whether that packet had been
    /// counted by [`RetainedStore::packet_sent`] (false when it was stopped
    /// mid-injection). Its hold, if armed, is cancelled and re-armed when the
    /// resend leaves. Returns whether the message is held.
    pub fn reopen(&mut self, id: u64, was_counted: bool) -> bool {
        let Some(m) = self.msgs.get_mut(&id) else {
            return false;
        };
        if let Some(t) = m.sent_at.take() {
            if let ReleasePolicy::HoldFor { hold_ns } = self.policy {
                self.expiries.remove(&(t.saturating_add(hold_ns), id));
            }
        }
        if was_counted {
            m.packets_sent = m.packets_sent.saturating_sub(1);
        }
        true
    }

    /// Forgets message `id`. Returns whether it was held.
    pub fn release(&mut self, id: u64) -> bool {
        match self.msgs.remove(&id) {
            Some(m) => {
                if let Some(t) = m.sent_at {
                    if let ReleasePolicy::HoldFor { hold_ns } = self.policy {
                        self.expiries.remove(&(t.saturating_add(hold_ns), id));
                    }
                }
                self.released += 1;
                true
            }
            None => false,
        }
    }

    /// Cumulative grant: forgets every fully sent message to `dst` whose
    /// per-destination number is ≤ `seq`. Returns how many were released.
    pub fn release_through(&mut self, dst: HostId, seq: u32) -> usize {
        let ids: Vec<u64> = self
            .msgs
            .range(super::message::message_id(dst, 0)..=super::message::message_id(dst, seq))
            .filter(|(_, m)| m.sent_at.is_some())
            .map(|(&id, _)| id)
            .collect();
        debug_assert!(ids.iter().all(|&id| split_message_id(id).0 == dst));
        ids.iter().filter(|&&id| self.release(id)).count()
    }

    /// The next hold expiry.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.expiries.first().map(|&(t, _)| t)
    }

    /// Releases the messages whose hold has expired.
    pub fn handle_timeout(&mut self, now: u64) {
        while let Some(&(t, id)) = self.expiries.first() {
            if t > now {
                break;
            }
            self.expiries.pop_first();
            self.release(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::message::message_id;
    use super::*;

    fn msg(dst: HostId, seq: u32) -> Message {
        Message {
            id: message_id(dst, seq),
            dst,
            flits: 8,
            born_ns: 0,
        }
    }

    #[test]
    fn when_sent_releases_after_the_last_packet() {
        let mut s = RetainedStore::new(ReleasePolicy::WhenSent);
        s.insert(msg(1, 0), 2);
        assert!(!s.packet_sent(message_id(1, 0), 10));
        assert_eq!(s.len(), 1);
        assert!(s.packet_sent(message_id(1, 0), 20));
        assert!(s.is_empty());
        assert_eq!(s.released(), 1);
    }

    #[test]
    fn hold_for_releases_after_the_window() {
        let mut s = RetainedStore::new(ReleasePolicy::HoldFor { hold_ns: 100 });
        s.insert(msg(1, 0), 1);
        s.packet_sent(message_id(1, 0), 50);
        assert_eq!(s.poll_timeout(), Some(150));
        s.handle_timeout(149);
        assert_eq!(s.len(), 1);
        s.handle_timeout(150);
        assert!(s.is_empty());
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn a_message_completed_again_by_a_resend_is_sent_once() {
        let mut s = RetainedStore::new(ReleasePolicy::HoldFor { hold_ns: 100 });
        s.insert(msg(1, 0), 1);
        assert!(s.packet_sent(message_id(1, 0), 10));
        assert!(s.reopen(message_id(1, 0), true));
        assert_eq!(s.poll_timeout(), None);
        assert!(!s.packet_sent(message_id(1, 0), 40));
        // The hold is re-armed from the resend.
        assert_eq!(s.poll_timeout(), Some(140));
    }

    #[test]
    fn cumulative_grant_releases_only_sent_messages_of_that_destination() {
        let mut s = RetainedStore::new(ReleasePolicy::UntilReleased);
        for seq in 0..4 {
            s.insert(msg(2, seq), 1);
            s.insert(msg(3, seq), 1);
        }
        for seq in 0..3 {
            s.packet_sent(message_id(2, seq), 1);
            s.packet_sent(message_id(3, seq), 1);
        }
        // Message (2, 2) is sent, (2, 3) is not: a grant through 3 frees 0..=2.
        assert_eq!(s.release_through(2, 3), 3);
        assert!(s.get(message_id(2, 3)).is_some());
        assert_eq!(s.len(), 5);
        assert!(s.release(message_id(3, 3)));
        assert!(!s.release(message_id(3, 3)));
    }
}
