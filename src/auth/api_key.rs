//! The backend API key.
//!
//! Backends authenticate `POST /push` and every other backend endpoint with
//! `Authorization: Bearer <[auth] api_key>`.

use std::fmt;

use subtle::{Choice, ConstantTimeEq};

use super::token::bearer;

/// The configured `[auth] api_key`, compared in constant time.
///
/// The comparison always walks the whole configured key, whatever is
/// presented, so timing reveals neither where a guess first differs nor
/// the key's length (the one branch is on the presented length, which the
/// caller already knows). An empty key authorizes
/// nothing (an empty bearer token is no token); refusing an empty key at
/// start is the job of config validation.
#[derive(Clone)]
pub struct ApiKey {
    key: Box<[u8]>,
}

impl ApiKey {
    /// The key backends must present (the value of `[auth] api_key`).
    pub fn new(key: &str) -> Self {
        Self {
            key: key.as_bytes().into(),
        }
    }

    /// Whether `presented` is exactly the key, checked in constant time.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let same_length = (presented.len() as u64).ct_eq(&(self.key.len() as u64));
        (same_length & self.same_prefix(presented)).into()
    }

    /// Whether an `Authorization` header value (absent: `None`) is
    /// `Bearer <key>`.
    pub fn authorizes(&self, authorization_header: Option<&str>) -> bool {
        authorization_header
            .and_then(bearer)
            .is_some_and(|presented| self.matches(presented.as_bytes()))
    }

    /// Whether `presented`, padded with zeros or cut to the key's length,
    /// equals the key. Always walks the whole key, so the time depends on
    /// the key's length alone; the length check in `matches` rejects the
    /// padded and cut cases.
    fn same_prefix(&self, presented: &[u8]) -> Choice {
        self.key
            .iter()
            .enumerate()
            .fold(Choice::from(1), |same, (i, expected)| {
                let byte = presented.get(i).copied().unwrap_or(0);
                same & expected.ct_eq(&byte)
            })
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("key", &"[redacted]")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "pk_live_0123456789abcdef";

    #[test]
    fn only_the_exact_key_matches() {
        let cases: &[(&[u8], bool)] = &[
            (KEY.as_bytes(), true),
            (b"pk_live_0123456789abcde", false),
            (b"pk_live_0123456789abcdef0", false),
            (b"pk_live_0123456789abcdef\0", false),
            (b"pk_live_", false),
            (b"", false),
            (b"pk_live_0123456789abcdeF", false),
            (b"Pk_live_0123456789abcdef", false),
        ];
        let key = ApiKey::new(KEY);
        for (presented, want) in cases {
            assert_eq!(
                key.matches(presented),
                *want,
                "{:?}",
                String::from_utf8_lossy(presented)
            );
        }
    }

    #[test]
    fn authorization_must_be_bearer_with_the_exact_key() {
        let bearer_key = format!("Bearer {KEY}");
        let lower = format!("bearer {KEY}");
        let longer = format!("Bearer {KEY}x");
        let shorter = format!("Bearer {}", &KEY[..KEY.len() - 1]);
        let basic = format!("Basic {KEY}");
        let cases: &[(Option<&str>, bool)] = &[
            (Some(&bearer_key), true),
            (Some(&lower), true),
            (Some(&longer), false),
            (Some(&shorter), false),
            (Some(&basic), false),
            (Some(KEY), false),
            (Some("Bearer "), false),
            (Some(""), false),
            (None, false),
        ];
        let key = ApiKey::new(KEY);
        for (header, want) in cases {
            assert_eq!(key.authorizes(*header), *want, "{header:?}");
        }
    }

    #[test]
    fn empty_key_authorizes_nothing() {
        let key = ApiKey::new("");
        assert!(!key.authorizes(Some("Bearer ")));
        assert!(!key.authorizes(Some("Bearer")));
        assert!(!key.authorizes(None));
    }

    #[test]
    fn key_is_absent_from_debug_output() {
        let debug = format!("{:?}", ApiKey::new(KEY));
        assert!(debug.contains("[redacted]"), "{debug}");
        assert!(!debug.contains(KEY), "{debug}");
        assert!(!debug.contains("112, 107"), "{debug}");
    }
}
