//! What `resume.lua` answers, read into plain values. Both Redis brokers
//! (one Redis, and each shard of a cluster) run the same script, so they
//! read its answer here; no I/O, so it is tested with `Value`s.

use bytes::Bytes;
use redis::{ErrorKind, RedisError, RedisResult, Value};

use crate::history::Cursor;
use crate::protocol::frame::Frame;

/// `resume.lua`'s answer: `{complete, epoch, current, entries…}`.
#[derive(Debug)]
pub(crate) struct ResumeReply {
    /// The script's own verdict: same epoch, no stream trimmed past the
    /// cursor, nothing lost in a failover.
    pub covered: bool,
    /// The sequence's epoch and current number when the script ran.
    pub position: Cursor,
    /// One XRANGE reply per stream asked for, in the order of its keys.
    pub streams: std::vec::IntoIter<Value>,
}

impl ResumeReply {
    /// Reads the reply; an error if its head is not in that shape.
    pub(crate) fn parse(reply: Vec<Value>) -> RedisResult<Self> {
        let mut reply = reply.into_iter();
        let (Some(covered), Some(epoch), Some(current)) =
            (reply.next(), reply.next(), reply.next())
        else {
            return Err(RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "resume.lua answered in an unexpected shape",
            )));
        };
        let covered: i64 = redis::from_redis_value(covered)?;
        let epoch: String = redis::from_redis_value(epoch)?;
        let current: u64 = redis::from_redis_value(current)?;
        // No epoch yet (no keys): the script said not covered; it reads as 0.
        let epoch = u64::from_str_radix(&epoch, 16).unwrap_or(0);
        Ok(Self {
            covered: covered == 1,
            position: Cursor::new(epoch, current),
            streams: reply,
        })
    }

    /// Whether a client at `after` misses nothing: the script found the
    /// history whole, and with no history kept (`history_size` 0) only a
    /// client already at the position is.
    pub(crate) fn complete(&self, after: u64, history_size: usize) -> bool {
        self.covered && (history_size > 0 || after >= self.position.seq)
    }
}

/// The entries of one XRANGE reply, `[[id, ['f', frame]], …]`, as each
/// one's sequence number (the id's first part) and frame JSON. Entries in
/// another shape are skipped.
fn entries(reply: Value) -> impl Iterator<Item = (u64, Bytes)> {
    let items = match reply {
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    items.into_iter().filter_map(|entry| {
        let Value::Array(mut pair) = entry else {
            return None;
        };
        let fields = pair.pop()?;
        let id = pair.pop()?;
        let id: String = redis::from_redis_value(id).ok()?;
        let seq: u64 = id.split('-').next()?.parse().ok()?;
        let Value::Array(mut fields) = fields else {
            return None;
        };
        if fields.len() < 2 {
            return None;
        }
        match fields.swap_remove(1) {
            Value::BulkString(json) => Some((seq, Bytes::from(json))),
            _ => None,
        }
    })
}

/// The message frames of one XRANGE reply from shard `shard` (0 on one
/// Redis) in epoch `epoch`, each carrying its own cursor. Entries in
/// another shape, or whose JSON is not UTF-8, are skipped.
pub(crate) fn frames(reply: Value, epoch: u64, shard: u16) -> impl Iterator<Item = Frame> {
    entries(reply).filter_map(move |(seq, json)| {
        let at = Cursor::new(epoch, seq).to_string();
        Frame::shard_message(shard, seq, &at, json)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn entry(id: &str, json: &str) -> Value {
        Value::Array(vec![bulk(id), Value::Array(vec![bulk("f"), bulk(json)])])
    }

    #[test]
    fn a_reply_gives_its_verdict_position_and_streams_in_order() {
        let reply = vec![
            Value::Int(1),
            bulk("00000000000000ff"),
            Value::Int(42),
            Value::Array(vec![entry("41-0", "{\"a\":1}")]),
            Value::Array(vec![]),
        ];
        let mut read = ResumeReply::parse(reply).expect("well formed");
        assert!(read.covered);
        assert_eq!(read.position, Cursor::new(0xff, 42));
        let first: Vec<_> = entries(read.streams.next().expect("first stream")).collect();
        assert_eq!(first, vec![(41, Bytes::from_static(b"{\"a\":1}"))]);
        assert_eq!(entries(read.streams.next().expect("second")).count(), 0);
        assert!(read.streams.next().is_none());
    }

    #[test]
    fn a_short_or_mistyped_head_is_an_error() {
        assert!(ResumeReply::parse(vec![Value::Int(1), bulk("ab")]).is_err());
        assert!(ResumeReply::parse(vec![bulk("yes"), bulk("ab"), Value::Int(1)]).is_err());
        assert!(ResumeReply::parse(vec![Value::Int(1), bulk("ab"), bulk("many")]).is_err());
    }

    #[test]
    fn an_empty_epoch_reads_as_zero() {
        let read = ResumeReply::parse(vec![Value::Int(0), bulk(""), Value::Int(0)]).expect("ok");
        assert!(!read.covered);
        assert_eq!(read.position, Cursor::new(0, 0));
    }

    #[test]
    fn without_history_only_a_client_at_the_position_is_complete() {
        let read = ResumeReply::parse(vec![Value::Int(1), bulk("1"), Value::Int(10)]).expect("ok");
        assert!(read.complete(3, 100));
        assert!(!read.complete(9, 0));
        assert!(read.complete(10, 0));
        let uncovered =
            ResumeReply::parse(vec![Value::Int(0), bulk("1"), Value::Int(10)]).expect("ok");
        assert!(!uncovered.complete(10, 100));
    }

    #[test]
    fn frames_carry_their_shard_and_their_own_cursor() {
        let reply = Value::Array(vec![
            entry("41-0", "{\"type\":\"message\"}"),
            Value::Array(vec![
                bulk("42-0"),
                Value::Array(vec![bulk("f"), Value::BulkString(vec![0xff])]),
            ]),
            entry("43-0", "{}"),
        ]);
        let frames: Vec<Frame> = frames(reply, 0xff, 3).collect();
        let seen: Vec<(u64, u16, String)> = frames
            .iter()
            .map(|f| (f.seq(), f.shard(), f.cursor().unwrap_or("").to_owned()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (41, 3, Cursor::new(0xff, 41).to_string()),
                (43, 3, Cursor::new(0xff, 43).to_string()),
            ]
        );
    }

    #[test]
    fn entries_in_another_shape_are_skipped() {
        let reply = Value::Array(vec![
            entry("7-0", "{}"),
            bulk("not an entry"),
            entry("x-0", "{}"),
            Value::Array(vec![bulk("8-0"), Value::Array(vec![bulk("f")])]),
            Value::Array(vec![
                bulk("9-0"),
                Value::Array(vec![bulk("f"), Value::Int(3)]),
            ]),
            entry("10-0", "[1]"),
        ]);
        let seqs: Vec<u64> = entries(reply).map(|(seq, _)| seq).collect();
        assert_eq!(seqs, vec![7, 10]);
        assert_eq!(entries(Value::Nil).count(), 0);
    }
}
