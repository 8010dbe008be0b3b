//! `POST /push` request parsing: pure, no I/O.
//!
//! ```text
//! {"to": "*",              "data": <any JSON>}   broadcast
//! {"to": ["alice", "bob"], "data": <any JSON>}   personal, up to max_users ids
//! {"to": {"channels": ["vip", "news"]}, "data": <any JSON>}   channels, up to max_channels
//! optional "id": "<idempotency key, 1 to 128 characters>"
//! ```
//!
//! Rules beyond PROTOCOL.md, each chosen so a backend bug fails loudly:
//!
//! - Unknown top-level fields are ignored, so backends may send fields a
//!   later version understands. A field given twice is `bad_json`.
//! - `data` may be any JSON value, `null` included, but must be present. It
//!   is kept verbatim (never re-serialized) and may nest at most
//!   [`MAX_DATA_DEPTH`] arrays or objects deep. It must also be JSON that
//!   every client can parse back: a string escape that is a lone UTF-16
//!   surrogate (`"\ud800"`) or a number beyond the range of a double
//!   (`1e999`) is `bad_json`, since strict parsers (serde_json, for one)
//!   refuse the whole frame that carries it.
//! - `"id": null` is the same as no `id`.
//! - `to` as a string other than `"*"` is `bad_json`; an empty list is
//!   `missing_field` ("to: names no user").
//! - `to` lists are counted as sent, before repeated ids are dropped: more
//!   than `max_users` entries is `too_many_users` even if some repeat.
//!   Repeats are then removed, keeping first-seen order.
//! - `to` as an object must have `channels`, a list of channel names
//!   (other keys are ignored; without it the object is `bad_json`, as any
//!   other wrong `to`); an empty list is `missing_field`, more than
//!   `max_channels` entries `too_many_channels`, a name that is not one
//!   `bad_channel`. Repeats are removed as for users.
//!
//! Body size (413) and content type (415) are the HTTP layer's checks.

use std::collections::HashSet;

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

pub use crate::bus::PushTarget;
use crate::http::ApiError;

use crate::protocol::{BadChannel, BadUserId, Channel, UserId};

/// The longest idempotency key accepted, in characters (not bytes).
pub const MAX_PUSH_ID_CHARS: usize = 128;

/// How many arrays or objects `data` may nest. Deep enough for any real
/// payload, shallow enough that clients with recursive JSON parsers (and
/// their default limits, 128 for serde_json) can read the frame that wraps
/// it.
pub const MAX_DATA_DEPTH: usize = 64;

/// A validated `POST /push` body.
#[derive(Debug)]
pub struct PushRequest {
    /// Who receives the message.
    pub target: PushTarget,
    /// The backend's idempotency key, if it sent one (1 to 128 characters).
    pub id: Option<String>,
    /// The message payload, exactly as the backend sent it.
    pub data: Box<RawValue>,
}

/// Why a push body was refused. Every variant is a `400`; [`code`] gives
/// the stable error code.
///
/// [`code`]: PushError::code
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The body is not UTF-8; the offset of the first bad byte.
    #[error("body: not valid UTF-8 (at byte {0})")]
    NotUtf8(usize),
    /// Not JSON: a syntax error, truncation, trailing bytes or a repeated
    /// field. Holds serde_json's description.
    #[error("body: invalid JSON: {0}")]
    Syntax(String),
    /// Valid JSON whose top level is not an object.
    #[error("body: must be a JSON object")]
    NotObject,
    /// A field has the wrong type or value; `expected` says what it must be.
    #[error("{field}: must be {expected}")]
    WrongType {
        /// The field's path, such as `to` or `to[2]`.
        field: String,
        /// What the field must be, such as `a string`.
        expected: &'static str,
    },
    /// A required field (`to` or `data`) is absent.
    #[error("{0}: missing")]
    MissingField(&'static str),
    /// `to` is an empty list.
    #[error("to: names no user")]
    NoUsers,
    /// An entry of `to` is not a valid user id.
    #[error("to[{index}]: {reason}")]
    BadUserId {
        /// The entry's position in `to`, from 0.
        index: usize,
        /// What is wrong with it.
        reason: BadUserId,
    },
    /// `to` lists more users than `[limits] max_push_users`.
    #[error("to: names {count} users (max {max})")]
    TooManyUsers {
        /// How many entries `to` had.
        count: usize,
        /// The configured limit.
        max: usize,
    },
    /// `id` is empty or longer than [`MAX_PUSH_ID_CHARS`]; its length in
    /// characters.
    #[error("id: must be 1 to {MAX_PUSH_ID_CHARS} characters, got {0}")]
    BadId(usize),
    /// `to.channels` is an empty list.
    #[error("to.channels: names no channel")]
    NoChannels,
    /// An entry of `to.channels` is not a channel name.
    #[error("to.channels[{index}]: {reason}")]
    BadChannel {
        /// The entry's position, from 0.
        index: usize,
        /// What is wrong with it.
        reason: BadChannel,
    },
    /// `to.channels` lists more than `[limits] max_push_channels`.
    #[error("to.channels: names {count} channels (max {max})")]
    TooManyChannels {
        /// How many entries the list had.
        count: usize,
        /// The configured limit.
        max: usize,
    },
    /// `data` nests deeper than [`MAX_DATA_DEPTH`].
    #[error("data: nested deeper than {MAX_DATA_DEPTH} levels")]
    TooDeep,
}

impl PushError {
    /// The stable error code: the JSON `code` and a metric label.
    pub const fn code(&self) -> &'static str {
        match self {
            Self::NotUtf8(_)
            | Self::Syntax(_)
            | Self::NotObject
            | Self::WrongType { .. }
            | Self::BadId(_)
            | Self::TooDeep => "bad_json",
            Self::MissingField(_) | Self::NoUsers | Self::NoChannels => "missing_field",
            Self::BadUserId { .. } => "bad_user_id",
            Self::TooManyUsers { .. } => "too_many_users",
            Self::BadChannel { .. } => "bad_channel",
            Self::TooManyChannels { .. } => "too_many_channels",
        }
    }
}

/// The top level, with each field kept as unparsed JSON so that a wrong
/// type is reported by field name rather than by serde's wording.
#[derive(Deserialize)]
struct RawPush<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    to: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    data: Option<&'a RawValue>,
}

/// `Some` for any value a present field holds, `null` included (a plain
/// `Option` would turn `null` into `None`).
fn present<'de, D: Deserializer<'de>>(de: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(de).map(Some)
}

impl PushRequest {
    /// Parses and validates a `POST /push` body; `max_users` is
    /// `[limits] max_push_users` (`0` refuses every personal push),
    /// `max_channels` `[limits] max_push_channels`.
    pub fn parse(body: &[u8], max_users: usize, max_channels: usize) -> Result<Self, PushError> {
        let text = std::str::from_utf8(body).map_err(|e| PushError::NotUtf8(e.valid_up_to()))?;
        if !text.trim_start().starts_with('{') {
            return Err(match serde_json::from_str::<&RawValue>(text) {
                Ok(_) => PushError::NotObject,
                Err(e) => PushError::Syntax(e.to_string()),
            });
        }
        let raw: RawPush<'_> =
            serde_json::from_str(text).map_err(|e| PushError::Syntax(e.to_string()))?;
        let to = raw.to.ok_or(PushError::MissingField("to"))?;
        let data = raw.data.ok_or(PushError::MissingField("data"))?;
        let target = parse_target(to, max_users, max_channels)?;
        let id = raw.id.map(parse_id).transpose()?.flatten();
        if nesting_depth(data.get()) > MAX_DATA_DEPTH {
            return Err(PushError::TooDeep);
        }
        check_portable(data)?;
        Ok(Self {
            target,
            id,
            data: data.to_owned(),
        })
    }
}

/// `"*"`, a non-empty list of at most `max_users` user ids, or
/// `{"channels": [...]}` with at most `max_channels` names.
fn parse_target(
    to: &RawValue,
    max_users: usize,
    max_channels: usize,
) -> Result<PushTarget, PushError> {
    const EXPECTED: &str = "\"*\", a list of user ids or {\"channels\": [...]}";
    let wrong = || PushError::WrongType {
        field: "to".to_owned(),
        expected: EXPECTED,
    };
    match to.get().as_bytes().first() {
        Some(b'"') => match serde_json::from_str::<String>(to.get()) {
            Ok(star) if star == "*" => Ok(PushTarget::Broadcast),
            _ => Err(wrong()),
        },
        Some(b'[') => {
            let entries: Vec<&RawValue> = serde_json::from_str(to.get()).map_err(|_| wrong())?;
            parse_users(&entries, max_users).map(PushTarget::Users)
        }
        Some(b'{') => {
            #[derive(Deserialize)]
            struct To<'a> {
                #[serde(borrow, default, deserialize_with = "present")]
                channels: Option<&'a RawValue>,
            }
            let to: To<'_> = serde_json::from_str(to.get()).map_err(|_| wrong())?;
            // An object without `channels` is no target at all (as before
            // channels existed): the wrong type, not a missing field.
            let list = to.channels.ok_or_else(wrong)?;
            let entries: Vec<&RawValue> =
                serde_json::from_str(list.get()).map_err(|_| PushError::WrongType {
                    field: "to.channels".to_owned(),
                    expected: "a list of channel names",
                })?;
            parse_channels(&entries, max_channels).map(PushTarget::Channels)
        }
        _ => Err(wrong()),
    }
}

/// The entries of a `to.channels` list as channel names, repeats dropped.
fn parse_channels(entries: &[&RawValue], max: usize) -> Result<Vec<Channel>, PushError> {
    if entries.is_empty() {
        return Err(PushError::NoChannels);
    }
    if entries.len() > max {
        return Err(PushError::TooManyChannels {
            count: entries.len(),
            max,
        });
    }
    let mut channels: Vec<Channel> = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let raw: String = serde_json::from_str(entry.get()).map_err(|_| PushError::WrongType {
            field: format!("to.channels[{index}]"),
            expected: "a string",
        })?;
        let channel =
            Channel::parse(&raw).map_err(|reason| PushError::BadChannel { index, reason })?;
        if !channels.contains(&channel) {
            channels.push(channel);
        }
    }
    Ok(channels)
}

/// The entries of a `to` list as user ids, repeats dropped.
fn parse_users(entries: &[&RawValue], max_users: usize) -> Result<Vec<UserId>, PushError> {
    if entries.is_empty() {
        return Err(PushError::NoUsers);
    }
    if entries.len() > max_users {
        return Err(PushError::TooManyUsers {
            count: entries.len(),
            max: max_users,
        });
    }
    let mut users: Vec<UserId> = Vec::with_capacity(entries.len());
    let mut seen: HashSet<UserId> = HashSet::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let raw: String = serde_json::from_str(entry.get()).map_err(|_| PushError::WrongType {
            field: format!("to[{index}]"),
            expected: "a string",
        })?;
        let user = UserId::parse(&raw).map_err(|reason| PushError::BadUserId { index, reason })?;
        if seen.insert(user.clone()) {
            users.push(user);
        }
    }
    Ok(users)
}

/// A string of 1 to [`MAX_PUSH_ID_CHARS`] characters, or `null` (no id).
fn parse_id(id: &RawValue) -> Result<Option<String>, PushError> {
    if id.get() == "null" {
        return Ok(None);
    }
    let id: String = serde_json::from_str(id.get()).map_err(|_| PushError::WrongType {
        field: "id".to_owned(),
        expected: "a string",
    })?;
    let chars = id.chars().count();
    if chars == 0 || chars > MAX_PUSH_ID_CHARS {
        return Err(PushError::BadId(chars));
    }
    Ok(Some(id))
}

/// Refuses `data` that strict JSON parsers cannot read back: every string
/// (keys included) is decoded, which refuses lone surrogate escapes, and
/// every number is converted, which refuses one beyond `f64`. Nothing is
/// kept; call only once the depth is known to be bounded.
fn check_portable(data: &RawValue) -> Result<(), PushError> {
    serde_json::from_str::<Portable>(data.get())
        .map(|Portable| ())
        .map_err(|_| PushError::WrongType {
            field: "data".to_owned(),
            expected: "JSON every client can parse (no lone surrogate escape, \
                       no number beyond a double)",
        })
}

/// Any JSON value, read through and thrown away.
struct Portable;

impl<'de> Deserialize<'de> for Portable {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_any(PortableVisitor)
    }
}

struct PortableVisitor;

impl<'de> Visitor<'de> for PortableVisitor {
    type Value = Portable;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Portable, E> {
        Ok(Portable)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Portable, E> {
        Ok(Portable)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Portable, E> {
        Ok(Portable)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Portable, E> {
        Ok(Portable)
    }

    fn visit_str<E>(self, _: &str) -> Result<Portable, E> {
        Ok(Portable)
    }

    fn visit_unit<E>(self) -> Result<Portable, E> {
        Ok(Portable)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Portable, A::Error> {
        while seq.next_element::<Portable>()?.is_some() {}
        Ok(Portable)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Portable, A::Error> {
        while map.next_entry::<Portable, Portable>()?.is_some() {}
        Ok(Portable)
    }
}

/// How many arrays and objects deep valid JSON `json` nests (0 for a
/// scalar). A linear scan, so any depth is measured without recursion.
fn nesting_depth(json: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in json.bytes() {
        match (in_string, b) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (_, b'"') => in_string = !in_string,
            (false, b'[' | b'{') => {
                depth += 1;
                max = max.max(depth);
            }
            (false, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

impl From<PushError> for ApiError {
    fn from(err: PushError) -> Self {
        let message = err.to_string();
        match err {
            PushError::NotUtf8(_)
            | PushError::Syntax(_)
            | PushError::NotObject
            | PushError::WrongType { .. }
            | PushError::BadId(_)
            | PushError::TooDeep => Self::BadJson(message),
            PushError::MissingField(_) | PushError::NoUsers | PushError::NoChannels => {
                Self::MissingField(message)
            }
            PushError::BadUserId { .. } => Self::BadUserId(message),
            PushError::TooManyUsers { .. } => Self::TooManyUsers(message),
            PushError::BadChannel { .. } => Self::BadChannel(message),
            PushError::TooManyChannels { .. } => Self::TooManyChannels(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_USERS: usize = 3;
    const MAX_CHANNELS: usize = 2;

    fn channels(names: &[&str]) -> PushTarget {
        let names = names.iter().map(|n| Channel::parse(n).expect("valid name"));
        PushTarget::Channels(names.collect())
    }

    fn users(ids: &[&str]) -> PushTarget {
        let ids = ids.iter().map(|id| UserId::parse(id).expect("valid id"));
        PushTarget::Users(ids.collect())
    }

    /// What a case expects: the parsed parts, or an error code and message.
    enum Want {
        Ok(PushTarget, Option<&'static str>, &'static str),
        Err(&'static str, &'static str),
    }

    #[test]
    fn push_bodies_parse_or_fail_with_a_stable_code() {
        let too_long_id = format!(r#"{{"to":"*","data":1,"id":"{}"}}"#, "x".repeat(129));
        let long_user = format!(r#"{{"to":["{}"],"data":1}}"#, "u".repeat(129));
        let cases: Vec<(&[u8], Want)> = vec![
            // Accepted.
            (
                br#"{"to":"*","data":{"a":1}}"#,
                Want::Ok(PushTarget::Broadcast, None, r#"{"a":1}"#),
            ),
            (
                br#"{"to":["alice","bob"],"data":[1]}"#,
                Want::Ok(users(&["alice", "bob"]), None, "[1]"),
            ),
            (
                br#"{"to":["bob","alice","bob"],"data":0}"#,
                Want::Ok(users(&["bob", "alice"]), None, "0"),
            ),
            (
                br#"{"to":"*","data":null}"#,
                Want::Ok(PushTarget::Broadcast, None, "null"),
            ),
            (
                br#"{"data":"hi","to":"*","id":"order-42"}"#,
                Want::Ok(PushTarget::Broadcast, Some("order-42"), r#""hi""#),
            ),
            (
                br#"{"to":"*","data":1,"id":null}"#,
                Want::Ok(PushTarget::Broadcast, None, "1"),
            ),
            (
                br#"{"to":"*","data":1,"future":{"x":[1]}}"#,
                Want::Ok(PushTarget::Broadcast, None, "1"),
            ),
            (
                b"{\"to\":\"\\u002a\",\"data\":1}",
                Want::Ok(PushTarget::Broadcast, None, "1"),
            ),
            (
                b" \n{ \"to\" : [ \"a\" ] , \"data\" : { \"k\" : [ 1 , 2 ] } }\n",
                Want::Ok(users(&["a"]), None, r#"{ "k" : [ 1 , 2 ] }"#),
            ),
            (
                br#"{"to":["a","b","c"],"data":true}"#,
                Want::Ok(users(&["a", "b", "c"]), None, "true"),
            ),
            // Not JSON, or not an object.
            (
                b"\xff\xfe{}",
                Want::Err("bad_json", "body: not valid UTF-8 (at byte 0)"),
            ),
            (
                b"",
                Want::Err("bad_json", "body: invalid JSON: EOF while parsing"),
            ),
            (
                b"{\"to\":\"*\",",
                Want::Err("bad_json", "body: invalid JSON: EOF while parsing"),
            ),
            (
                br#"{"to":"*","data":}"#,
                Want::Err("bad_json", "body: invalid JSON: expected value"),
            ),
            (
                br#"{"to":"*","data":1} x"#,
                Want::Err("bad_json", "body: invalid JSON: trailing characters"),
            ),
            (
                br#"{"to":"*","to":"*","data":1}"#,
                Want::Err("bad_json", "body: invalid JSON: duplicate field `to`"),
            ),
            (
                br#"[{"to":"*","data":1}]"#,
                Want::Err("bad_json", "body: must be a JSON object"),
            ),
            (
                b"\"*\"",
                Want::Err("bad_json", "body: must be a JSON object"),
            ),
            (
                b"null",
                Want::Err("bad_json", "body: must be a JSON object"),
            ),
            // Fields of the wrong type or value.
            (
                br#"{"to":5,"data":1}"#,
                Want::Err("bad_json", r#"to: must be "*", a list of user ids"#),
            ),
            (
                br#"{"to":null,"data":1}"#,
                Want::Err("bad_json", r#"to: must be "*", a list of user ids"#),
            ),
            (
                br#"{"to":"alice","data":1}"#,
                Want::Err("bad_json", r#"to: must be "*", a list of user ids"#),
            ),
            (
                br#"{"to":{"alice":1},"data":1}"#,
                Want::Err("bad_json", r#"to: must be "*", a list of user ids"#),
            ),
            (
                br#"{"to":{"channels":["vip","vip"]},"data":1}"#,
                Want::Ok(channels(&["vip"]), None, "1"),
            ),
            (
                br#"{"to":{"channels":[]},"data":1}"#,
                Want::Err("missing_field", "to.channels: names no channel"),
            ),
            (
                br#"{"to":{"channels":["a","b","c"]},"data":1}"#,
                Want::Err("too_many_channels", "to.channels: names 3 channels (max 2)"),
            ),
            (
                br#"{"to":{"channels":["a",""]},"data":1}"#,
                Want::Err("bad_channel", "to.channels[1]: channel name is empty"),
            ),
            (
                br#"{"to":{"channels":["a b"]},"data":1}"#,
                Want::Err("bad_channel", "to.channels[0]: channel name"),
            ),
            (
                br#"{"to":{"channels":"vip"},"data":1}"#,
                Want::Err("bad_json", "to.channels: must be a list of channel names"),
            ),
            (
                br#"{"to":{"channels":[1]},"data":1}"#,
                Want::Err("bad_json", "to.channels[0]: must be a string"),
            ),
            (
                br#"{"to":["a",1],"data":1}"#,
                Want::Err("bad_json", "to[1]: must be a string"),
            ),
            (
                br#"{"to":[["a"]],"data":1}"#,
                Want::Err("bad_json", "to[0]: must be a string"),
            ),
            (
                br#"{"to":"*","data":1,"id":7}"#,
                Want::Err("bad_json", "id: must be a string"),
            ),
            (
                br#"{"to":"*","data":1,"id":""}"#,
                Want::Err("bad_json", "id: must be 1 to 128 characters, got 0"),
            ),
            (
                too_long_id.as_bytes(),
                Want::Err("bad_json", "id: must be 1 to 128 characters, got 129"),
            ),
            // Missing fields.
            (br#"{"data":1}"#, Want::Err("missing_field", "to: missing")),
            (
                br#"{"to":"*"}"#,
                Want::Err("missing_field", "data: missing"),
            ),
            (br#"{}"#, Want::Err("missing_field", "to: missing")),
            (
                br#"{"to":[],"data":1}"#,
                Want::Err("missing_field", "to: names no user"),
            ),
            // Bad user ids and too many users.
            (
                br#"{"to":["ok","bad id"],"data":1}"#,
                Want::Err("bad_user_id", "to[1]: user id may only contain"),
            ),
            (
                br#"{"to":[""],"data":1}"#,
                Want::Err("bad_user_id", "to[0]: user id is empty"),
            ),
            (
                long_user.as_bytes(),
                Want::Err("bad_user_id", "to[0]: user id is 129 bytes long (max 128)"),
            ),
            (
                br#"{"to":["a","b","c","d"],"data":1}"#,
                Want::Err("too_many_users", "to: names 4 users (max 3)"),
            ),
            (
                br#"{"to":["a","a","a","a"],"data":1}"#,
                Want::Err("too_many_users", "to: names 4 users (max 3)"),
            ),
        ];
        assert!(cases.len() >= 25);
        for (body, want) in cases {
            let got = PushRequest::parse(body, MAX_USERS, MAX_CHANNELS);
            let shown = String::from_utf8_lossy(body);
            match (got, want) {
                (Ok(req), Want::Ok(target, id, data)) => {
                    assert_eq!(req.target, target, "{shown}");
                    assert_eq!(req.id.as_deref(), id, "{shown}");
                    assert_eq!(req.data.get(), data, "{shown}");
                }
                (Err(err), Want::Err(code, message)) => {
                    assert_eq!(err.code(), code, "{shown}: {err}");
                    assert!(err.to_string().starts_with(message), "{shown}: {err}");
                }
                (got, _) => panic!("{shown}: unexpected {got:?}"),
            }
        }
    }

    #[test]
    fn an_id_of_128_multibyte_characters_is_accepted() {
        let id = "é".repeat(MAX_PUSH_ID_CHARS);
        let body = format!(r#"{{"to":"*","data":1,"id":"{id}"}}"#);
        let req = PushRequest::parse(body.as_bytes(), MAX_USERS, MAX_CHANNELS).expect("valid");
        assert_eq!(req.id, Some(id));
    }

    #[test]
    fn zero_max_users_refuses_personal_pushes_only() {
        let err = PushRequest::parse(br#"{"to":["a"],"data":1}"#, 0, MAX_CHANNELS)
            .expect_err("over limit");
        assert_eq!(err, PushError::TooManyUsers { count: 1, max: 0 });
        assert!(PushRequest::parse(br#"{"to":"*","data":1}"#, 0, MAX_CHANNELS).is_ok());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep =
            |open: &str, close: &str| format!("{}0{}", open.repeat(10_000), close.repeat(10_000));
        let in_data = format!(r#"{{"to":"*","data":{}}}"#, deep("[", "]"));
        let in_unknown = format!(r#"{{"to":"*","data":1,"x":{}}}"#, deep(r#"{"a":"#, "}"));
        let in_to = format!(r#"{{"to":{},"data":1}}"#, deep("[", "]"));
        let cases = [
            (deep("[", "]"), "bad_json"),
            (deep(r#"{"a":"#, "}"), "missing_field"),
            (in_data, "bad_json"),
            (in_to, "bad_json"),
        ];
        for (body, code) in cases {
            let err =
                PushRequest::parse(body.as_bytes(), MAX_USERS, MAX_CHANNELS).expect_err("too deep");
            assert_eq!(err.code(), code, "{err}");
        }
        // Unknown fields are skipped without recursion, so they may nest.
        assert!(PushRequest::parse(in_unknown.as_bytes(), MAX_USERS, MAX_CHANNELS).is_ok());
    }

    #[test]
    fn data_nesting_is_limited_by_max_data_depth() {
        let nested = |depth: usize| {
            let data = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            format!(r#"{{"to":"*","data":{data}}}"#)
        };
        assert!(
            PushRequest::parse(nested(MAX_DATA_DEPTH).as_bytes(), MAX_USERS, MAX_CHANNELS).is_ok()
        );
        let err = PushRequest::parse(
            nested(MAX_DATA_DEPTH + 1).as_bytes(),
            MAX_USERS,
            MAX_CHANNELS,
        );
        assert_eq!(err.map(|_| ()), Err(PushError::TooDeep));
    }

    #[test]
    fn data_every_client_cannot_parse_is_refused() {
        let refused = [
            r#""\ud800""#,
            r#""\udc00""#,
            r#""a\ud83dz""#,
            r#"{"\ud800":1}"#,
            r#"[1,"\ud800"]"#,
            "1e999999",
            "-1e400",
            r#"{"a":[1e309]}"#,
        ];
        for data in refused {
            let body = format!(r#"{{"to":"*","data":{data}}}"#);
            let err = PushRequest::parse(body.as_bytes(), MAX_USERS, MAX_CHANNELS).expect_err(data);
            assert_eq!(err.code(), "bad_json", "{data}: {err}");
            assert!(
                err.to_string()
                    .starts_with("data: must be JSON every client"),
                "{err}"
            );
        }
        let accepted = [
            r#""\ud83d\ude00""#,
            r#""\u00e9\n\t\"""#,
            "1.7976931348623157e308",
            "123456789012345678901234567890",
            "-0",
            r#"{"a":{"b":[null,true,false,"x",1.5]}}"#,
            r#"{"a":1,"a":2}"#,
        ];
        for data in accepted {
            let body = format!(r#"{{"to":"*","data":{data}}}"#);
            let req = PushRequest::parse(body.as_bytes(), MAX_USERS, MAX_CHANNELS).expect(data);
            assert_eq!(req.data.get(), data);
        }
    }

    #[test]
    fn nesting_depth_ignores_brackets_inside_strings() {
        let cases = [
            ("1", 0),
            ("[]", 1),
            (r#"{"a":[{}]}"#, 3),
            (r#"["[[[", "\"[{"]"#, 1),
            (r#"[[1],[2],[[3]]]"#, 3),
        ];
        for (json, want) in cases {
            assert_eq!(nesting_depth(json), want, "{json}");
        }
    }

    #[test]
    fn push_errors_keep_their_code_and_message() {
        let bodies: [&[u8]; 5] = [
            b"[]",
            br#"{"data":1}"#,
            br#"{"to":["a b"],"data":1}"#,
            br#"{"to":["a","b"],"data":1}"#,
            br#"{"to":"*","data":1,"id":""}"#,
        ];
        for body in bodies {
            let err = PushRequest::parse(body, 1, MAX_CHANNELS).expect_err("invalid body");
            let (code, message) = (err.code(), err.to_string());
            let api = ApiError::from(err);
            assert_eq!((api.code(), api.message()), (code, message));
            assert_eq!(api.status(), hyper::StatusCode::BAD_REQUEST);
        }
    }
}
