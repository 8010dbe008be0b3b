//! User ids: the key of every per-user object and personal stream.

use std::fmt;
use std::sync::Arc;

/// The longest user id accepted, in bytes.
pub(crate) const MAX_USER_ID_BYTES: usize = 128;

/// A validated user id: 1 to 128 bytes of `[A-Za-z0-9_.:@-]`.
///
/// Cheap to clone (a shared string), so the registry, the bus and frames
/// can all hold one without copying the bytes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserId(Arc<str>);

/// Why a string is not a user id (maps to `400 bad_user_id`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadUserId {
    /// Zero bytes.
    #[error("user id is empty")]
    Empty,
    /// Over [`MAX_USER_ID_BYTES`].
    #[error("user id is {0} bytes long (max {MAX_USER_ID_BYTES})")]
    TooLong(usize),
    /// A byte outside `[A-Za-z0-9_.:@-]`.
    #[error("user id may only contain A-Z a-z 0-9 _ . : @ -")]
    BadCharacter,
}

impl UserId {
    /// Validates `raw` as a user id.
    pub fn parse(raw: &str) -> Result<Self, BadUserId> {
        if raw.is_empty() {
            return Err(BadUserId::Empty);
        }
        if raw.len() > MAX_USER_ID_BYTES {
            return Err(BadUserId::TooLong(raw.len()));
        }
        if !raw.bytes().all(is_user_id_byte) {
            return Err(BadUserId::BadCharacter);
        }
        Ok(Self(Arc::from(raw)))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

pub(crate) fn is_user_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'@' | b'-')
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserId({:?})", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_are_checked_by_length_and_alphabet() {
        let cases: &[(&str, Result<(), BadUserId>)] = &[
            ("alice", Ok(())),
            ("a", Ok(())),
            ("user:42@shop.example-1_x", Ok(())),
            ("", Err(BadUserId::Empty)),
            ("al ice", Err(BadUserId::BadCharacter)),
            ("al/ice", Err(BadUserId::BadCharacter)),
            ("alïce", Err(BadUserId::BadCharacter)),
            ("a\0", Err(BadUserId::BadCharacter)),
        ];
        for (raw, want) in cases {
            assert_eq!(&UserId::parse(raw).map(|_| ()), want, "{raw:?}");
        }
        assert!(UserId::parse(&"x".repeat(128)).is_ok());
        assert_eq!(
            UserId::parse(&"x".repeat(129)).map(|_| ()),
            Err(BadUserId::TooLong(129))
        );
    }

    #[test]
    fn a_user_id_reads_and_prints_as_the_text_it_was_parsed_from() {
        let id = UserId::parse("user:42@shop").expect("valid");
        assert_eq!(id.as_str(), "user:42@shop");
        assert_eq!(id.to_string(), "user:42@shop");
        assert_eq!(format!("{id:?}"), r#"UserId("user:42@shop")"#);
    }
}
