//! What a timer entry's payload means, encoded and decoded in one place.
//!
//! The wheel stores a plain `u64` per entry (its entries stay 32 bytes);
//! this is the only code that gives that number a meaning.

use crate::registry::ConnId;

/// Set in a session's payload so it never equals a connection id.
const SESSION_TAG: u64 = 1 << 63;
/// The history sweep's payload (no connection id or handle reaches it).
const HISTORY_SWEEP: u64 = u64::MAX;

/// Whose deadline a timer entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Payload {
    /// A connection's one entry: its pings, idle eviction, token expiry
    /// and close grace.
    Conn(ConnId),
    /// A user's long-poll session entry, by the user's handle: its parked
    /// polls' deadlines, then the session's expiry.
    Session(u64),
    /// The periodic sweep of expired history and idempotency keys.
    HistorySweep,
}

impl Payload {
    /// The number stored in the wheel. Connection ids and handles are
    /// counters far below 2^63.
    pub(crate) fn encode(self) -> u64 {
        match self {
            Self::Conn(id) => {
                debug_assert!(id & SESSION_TAG == 0, "connection id {id} out of range");
                id
            }
            Self::Session(handle) => {
                debug_assert!(handle & SESSION_TAG == 0, "handle {handle} out of range");
                handle | SESSION_TAG
            }
            Self::HistorySweep => HISTORY_SWEEP,
        }
    }

    /// The payload a stored number means.
    pub(crate) fn decode(value: u64) -> Self {
        if value == HISTORY_SWEEP {
            Self::HistorySweep
        } else if value & SESSION_TAG != 0 {
            Self::Session(value & !SESSION_TAG)
        } else {
            Self::Conn(value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_payload_survives_the_round_trip() {
        for payload in [
            Payload::Conn(1),
            Payload::Conn(SESSION_TAG - 1),
            Payload::Session(1),
            Payload::Session(SESSION_TAG - 2),
            Payload::HistorySweep,
        ] {
            assert_eq!(Payload::decode(payload.encode()), payload, "{payload:?}");
        }
    }

    #[test]
    fn a_session_and_a_connection_with_one_number_differ() {
        assert_ne!(Payload::Conn(7).encode(), Payload::Session(7).encode());
        assert_ne!(Payload::Session(7).encode(), Payload::HistorySweep.encode());
    }
}
