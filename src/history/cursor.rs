//! Cursors: where a client stands in the message sequence.
//!
//! Every message, broadcast or personal, takes the next number of one
//! gateway-wide sequence when it is published, and every recipient gets the
//! same frame carrying the same cursor. A client's cursor therefore covers
//! both of its streams at once: on resume it receives every message of the
//! broadcast stream and of its own stream numbered after the cursor.
//!
//! The epoch names the history the numbers belong to; it changes when that
//! history is lost (an in-memory gateway restarting), so an old cursor is
//! recognised as not covered rather than misread.
//!
//! Wire form (opaque to clients): `<epoch, 16 hex digits>-<seq, decimal>`.

use std::fmt;
use std::str::FromStr;

/// A position in the message sequence of one history epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cursor {
    /// The history this position belongs to.
    pub epoch: u64,
    /// The number of the last message seen (0: none).
    pub seq: u64,
}

/// A string pushgate could not have issued as a cursor (`400 bad_cursor`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cursor is not one pushgate issued")]
pub struct BadCursor;

/// The longest cursor string accepted.
const MAX_CURSOR_LEN: usize = 16 + 1 + 20;

impl Cursor {
    /// A cursor at `seq` in `epoch`.
    pub fn new(epoch: u64, seq: u64) -> Self {
        Self { epoch, seq }
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{}", self.epoch, self.seq)
    }
}

impl FromStr for Cursor {
    type Err = BadCursor;

    fn from_str(raw: &str) -> Result<Self, BadCursor> {
        if raw.len() > MAX_CURSOR_LEN {
            return Err(BadCursor);
        }
        let (epoch, seq) = raw.split_once('-').ok_or(BadCursor)?;
        let digits = |s: &str, hex: bool| {
            !s.is_empty()
                && s.bytes().all(|b| {
                    if hex {
                        b.is_ascii_hexdigit()
                    } else {
                        b.is_ascii_digit()
                    }
                })
        };
        if epoch.len() != 16 || !digits(epoch, true) || !digits(seq, false) {
            return Err(BadCursor);
        }
        Ok(Self {
            epoch: u64::from_str_radix(epoch, 16).map_err(|_| BadCursor)?,
            seq: seq.parse().map_err(|_| BadCursor)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cursors_parse_only_in_the_form_pushgate_issues() {
        let good = Cursor::new(0xdead_beef_0123_4567, 42);
        assert_eq!(good.to_string(), "deadbeef01234567-42");
        assert_eq!("deadbeef01234567-42".parse(), Ok(good));
        for bad in [
            "",
            "-",
            "42",
            "deadbeef01234567",
            "deadbeef01234567-",
            "deadbeef0123456-42",
            "deadbeef012345678-42",
            "deadbeef0123456g-42",
            "deadbeef01234567-4x",
            "deadbeef01234567--42",
            "deadbeef01234567-+42",
            "deadbeef01234567-18446744073709551616",
            "deadbeef01234567-42-1",
            " deadbeef01234567-42",
        ] {
            assert_eq!(bad.parse::<Cursor>(), Err(BadCursor), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn every_cursor_round_trips(epoch in any::<u64>(), seq in any::<u64>()) {
            let cursor = Cursor::new(epoch, seq);
            prop_assert_eq!(cursor.to_string().parse::<Cursor>(), Ok(cursor));
        }

        #[test]
        fn arbitrary_strings_never_panic(raw in ".{0,64}") {
            let _ = raw.parse::<Cursor>();
        }
    }
}
