//! Daemon events on the wire: each datagram is one [`DaemonEvent`] with an
//! HMAC-SHA256 tag keyed by the fabric's token, so the controller believes
//! only events from daemons that hold the token (anyone on the machine can
//! send it a datagram).

use super::DaemonEvent;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// An event as sent: the event's JSON text and its tag, hex.
#[derive(Serialize, Deserialize)]
struct Signed {
    /// The event, as the JSON text the tag covers (re-serialising a parsed
    /// event is not guaranteed to give the same bytes).
    event: String,
    mac: String,
}

/// Why an event datagram was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventAuthError {
    #[error("malformed event datagram: {0}")]
    Malformed(String),
    #[error("event tag does not match the fabric token")]
    BadTag,
}

fn tag(token: &str, text: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(token.as_bytes()).expect("HMAC takes any key length");
    mac.update(text);
    mac
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The datagram carrying `event`, tagged with `token`.
pub fn seal_event(event: &DaemonEvent, token: &str) -> Vec<u8> {
    let text = serde_json::to_string(event).expect("events serialise");
    let mac = hex(&tag(token, text.as_bytes()).finalize().into_bytes());
    serde_json::to_vec(&Signed { event: text, mac }).expect("events serialise")
}

/// The event in `datagram`, if its tag matches `token`.
pub fn open_event(datagram: &[u8], token: &str) -> Result<DaemonEvent, EventAuthError> {
    let signed: Signed =
        serde_json::from_slice(datagram).map_err(|e| EventAuthError::Malformed(e.to_string()))?;
    let mac = unhex(&signed.mac).ok_or(EventAuthError::BadTag)?;
    tag(token, signed.event.as_bytes())
        .verify_slice(&mac)
        .map_err(|_| EventAuthError::BadTag)?;
    serde_json::from_str(&signed.event).map_err(|e| EventAuthError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::EventKind;

    fn event() -> DaemonEvent {
        DaemonEvent {
            node: "s1-0".into(),
            time_ns: 42,
            kind: EventKind::PortDown {
                port: 3,
                reason: "keepalive timeout".into(),
                last_heard_ns: 7,
            },
        }
    }

    #[test]
    fn a_sealed_event_opens_with_the_same_token_only() {
        let d = seal_event(&event(), "secret");
        assert_eq!(open_event(&d, "secret"), Ok(event()));
        assert_eq!(open_event(&d, "guess"), Err(EventAuthError::BadTag));
    }

    #[test]
    fn forged_and_altered_events_are_refused() {
        // An unsigned event, as any local user could send.
        let plain = serde_json::to_vec(&event()).unwrap();
        assert!(matches!(
            open_event(&plain, "secret"),
            Err(EventAuthError::Malformed(_))
        ));
        // A signed event whose time was moved earlier.
        let d = String::from_utf8(seal_event(&event(), "secret")).unwrap();
        let altered = d.replace("42", "41");
        assert_eq!(
            open_event(altered.as_bytes(), "secret"),
            Err(EventAuthError::BadTag)
        );
        assert!(open_event(b"\xff\x00garbage", "secret").is_err());
    }
}
