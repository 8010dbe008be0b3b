//! Channel names and the channel lists clients and backends send.
//!
//! A channel is a stream a connection joins because the backend put its
//! user in it (the token's `channels` claim) or because the page asked for
//! a public topic (`channels=` on a client endpoint, a `subscribe` frame).
//! Names follow the user id alphabet (PROTOCOL.md, "v1.1: channels").

use std::fmt;
use std::sync::Arc;

use super::user_id::{MAX_USER_ID_BYTES, is_user_id_byte};

/// The longest channel name accepted, in bytes.
pub(crate) const MAX_CHANNEL_BYTES: usize = MAX_USER_ID_BYTES;

/// A validated channel name: 1 to 128 bytes of `[A-Za-z0-9_.:@-]`.
///
/// Cheap to clone (a shared string): the channel index, each connection's
/// list, history and frames hold the same bytes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Channel(Arc<str>);

/// Why a string is not a channel name (`400 bad_channel`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadChannel {
    /// Zero bytes (also an empty item in a comma list: `a,,b`, `a,`).
    #[error("channel name is empty")]
    Empty,
    /// Over [`MAX_CHANNEL_BYTES`].
    #[error("channel name is {0} bytes long (max {MAX_CHANNEL_BYTES})")]
    TooLong(usize),
    /// A byte outside `[A-Za-z0-9_.:@-]`.
    #[error("channel name {0:?} may only contain A-Z a-z 0-9 _ . : @ -")]
    BadCharacter(String),
}

impl Channel {
    /// Validates `raw` as a channel name.
    pub fn parse(raw: &str) -> Result<Self, BadChannel> {
        if raw.is_empty() {
            return Err(BadChannel::Empty);
        }
        if raw.len() > MAX_CHANNEL_BYTES {
            return Err(BadChannel::TooLong(raw.len()));
        }
        if !raw.bytes().all(is_user_id_byte) {
            let shown: String = raw.chars().take(MAX_CHANNEL_BYTES).collect();
            return Err(BadChannel::BadCharacter(shown));
        }
        Ok(Self(Arc::from(raw)))
    }

    /// Parses a comma-separated list (`channels=a,b`); every item must be
    /// a name, so an empty item (`a,,b`, a trailing comma) is refused.
    /// Repeats are kept once, in the order first given.
    pub fn parse_list(raw: &str) -> Result<Vec<Self>, BadChannel> {
        let mut out: Vec<Self> = Vec::new();
        for item in raw.split(',') {
            let channel = Self::parse(item)?;
            if !out.contains(&channel) {
                out.push(channel);
            }
        }
        Ok(out)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Channel({:?})", &*self.0)
    }
}

/// Which channels a page may join by asking: `[channels] public`, exact
/// names and prefixes ending in `*` (`"product.*"`, or `"*"` for every
/// name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublicChannels {
    exact: Vec<String>,
    prefixes: Vec<String>,
}

impl PublicChannels {
    /// From the configured patterns.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Self {
        let mut out = Self::default();
        for pattern in patterns {
            let pattern = pattern.as_ref();
            match pattern.strip_suffix('*') {
                Some(prefix) => out.prefixes.push(prefix.to_owned()),
                None => out.exact.push(pattern.to_owned()),
            }
        }
        out
    }

    /// Whether anyone may join `channel`.
    pub fn allows(&self, channel: &Channel) -> bool {
        let name = channel.as_str();
        self.exact.iter().any(|e| e == name) || self.prefixes.iter().any(|p| name.starts_with(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_like_user_ids() {
        assert!(Channel::parse("vip").is_ok());
        assert!(Channel::parse("city:berlin").is_ok());
        assert!(Channel::parse("product.42").is_ok());
        assert!(Channel::parse(&"c".repeat(128)).is_ok());
        assert_eq!(Channel::parse(""), Err(BadChannel::Empty));
        assert_eq!(
            Channel::parse(&"c".repeat(129)),
            Err(BadChannel::TooLong(129))
        );
        for bad in ["a b", "a/b", "a,b", "é", "a*", "a\0"] {
            assert!(
                matches!(Channel::parse(bad), Err(BadChannel::BadCharacter(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_channel_reads_and_prints_as_the_name_it_was_parsed_from() {
        let channel = Channel::parse("city:berlin").expect("valid");
        assert_eq!(channel.as_str(), "city:berlin");
        assert_eq!(channel.to_string(), "city:berlin");
        assert_eq!(format!("{channel:?}"), r#"Channel("city:berlin")"#);
    }

    #[test]
    fn a_list_refuses_empty_items_and_keeps_each_name_once() {
        let names = |raw| {
            Channel::parse_list(raw).map(|l| l.iter().map(|c| c.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(names("a,b,a"), Ok(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(names("a"), Ok(vec!["a".to_owned()]));
        for bad in ["", "a,,b", "a,", ",a", ","] {
            assert_eq!(names(bad), Err(BadChannel::Empty), "{bad:?}");
        }
        assert!(names("a,b c").is_err());
    }

    #[test]
    fn public_patterns_match_exact_names_and_prefixes() {
        let public = PublicChannels::new(&["news", "product.*"]);
        let allows = |name| public.allows(&Channel::parse(name).expect("valid"));
        assert!(allows("news"));
        assert!(allows("product.42"));
        assert!(allows("product."));
        assert!(!allows("newsroom"));
        assert!(!allows("product"));
        assert!(!allows("vip"));
        assert!(PublicChannels::new(&["*"]).allows(&Channel::parse("x").expect("valid")));
        assert!(!PublicChannels::new::<&str>(&[]).allows(&Channel::parse("x").expect("valid")));
    }
}
