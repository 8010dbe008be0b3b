//! A batch of pushes for one shard's publish script, as plain values:
//! what each push carries, how many go together, the script's keys and
//! arguments for them (`publish.lua` has the layout), and one answer per
//! push from its reply. `commit` runs the batches.

use bytes::Bytes;

/// The most pushes in one script, and the most streams they may write
/// together (a push to many users writes many): bounds on how long one
/// script holds its master. A push over the stream bound on its own
/// still goes, alone.
pub(super) const MAX_BATCH: usize = 64;
pub(super) const MAX_BATCH_STREAMS: usize = 1024;

/// One push's part in one shard: what the publish script takes for it.
#[derive(Debug, Clone)]
pub(super) struct ShardPush {
    /// The frame head shared by the push's messages (up to the cursor).
    pub head: Bytes,
    /// The key that remembers the push id (used when `idempotent`).
    pub id_key: String,
    /// The push id is the caller's idempotency key.
    pub idempotent: bool,
    /// Its streams expire with the history ttl (all but the broadcast
    /// stream).
    pub expires: bool,
    /// Its messages in this shard, in order (at least one).
    pub messages: Vec<ShardMessage>,
}

impl ShardPush {
    /// The streams the push writes in the shard.
    pub(super) fn streams(&self) -> usize {
        self.messages.iter().map(|m| m.streams.len()).sum()
    }
}

/// One message of a push: its frame tail (after the cursor), and the
/// streams it is recorded in and published to.
#[derive(Debug, Clone)]
pub(super) struct ShardMessage {
    pub tail: Bytes,
    pub streams: Vec<Recipient>,
}

/// One stream a message goes to.
#[derive(Debug, Clone)]
pub(super) struct Recipient {
    /// The stream's history key.
    pub history: String,
    /// Its sharded pub/sub channel.
    pub channel: String,
    /// Who the message is for, as the payload names it (`*`, a user id,
    /// `#channel`).
    pub target: String,
}

/// What the script answered for one push: `(new, cursor)`, the cursor of
/// its last message, or for a duplicate what the first push with its id
/// returned. An error is the broker's, for every push of the batch.
pub(super) type Committed = Result<(bool, String), String>;

/// The keys and settings every batch of one shard shares.
#[derive(Debug, Clone)]
pub(super) struct ShardKeys {
    pub seq: String,
    pub epoch: String,
    pub aged: String,
    pub times: String,
    pub writer: String,
    /// Where a run's own key starts.
    pub batches: String,
}

/// The history settings every publish carries, and how long a batch's
/// key keeps its answers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    pub history_size: usize,
    pub ttl_ms: u64,
    pub batch_key_ms: u64,
}

/// What one run of the script carries beside its pushes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run<'a> {
    /// The epoch the shard takes if it has none.
    pub epoch: &'a str,
    /// The batch's own key (its answers, for a resent script).
    pub key: &'a str,
    /// On the server's clock (ms): past it, the script publishes nothing.
    pub deadline: u64,
}

/// Whether `next` joins a batch of `pushes` pushes writing `streams`
/// streams: a batch takes at least one push, and more within the bounds.
pub(super) fn fits(pushes: usize, streams: usize, next: &ShardPush) -> bool {
    pushes == 0 || (pushes < MAX_BATCH && streams + next.streams() <= MAX_BATCH_STREAMS)
}

/// A publish script argument: bytes of a push, or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arg<'a> {
    Bytes(&'a [u8]),
    Number(u64),
}

/// The publish script's keys and arguments for `pushes` (see
/// `publish.lua` for the layout).
pub(super) fn layout<'a>(
    keys: &'a ShardKeys,
    settings: Settings,
    run: Run<'a>,
    pushes: &'a [ShardPush],
) -> (Vec<&'a str>, Vec<Arg<'a>>) {
    let mut names = vec![
        keys.seq.as_str(),
        &keys.epoch,
        &keys.aged,
        &keys.times,
        &keys.writer,
        run.key,
    ];
    let mut args = vec![
        Arg::Bytes(run.epoch.as_bytes()),
        Arg::Number(settings.history_size as u64),
        Arg::Number(settings.ttl_ms),
        Arg::Number(pushes.len() as u64),
        Arg::Number(run.deadline),
        Arg::Number(settings.batch_key_ms),
    ];
    for push in pushes {
        names.push(&push.id_key);
        args.extend([
            Arg::Bytes(&push.head),
            Arg::Bytes(flag(push.idempotent)),
            Arg::Bytes(flag(push.expires)),
            Arg::Number(push.messages.len() as u64),
        ]);
        for message in &push.messages {
            args.extend([
                Arg::Bytes(&message.tail),
                Arg::Number(message.streams.len() as u64),
            ]);
            for stream in &message.streams {
                names.push(&stream.history);
                args.extend([
                    Arg::Bytes(stream.channel.as_bytes()),
                    Arg::Bytes(stream.target.as_bytes()),
                ]);
            }
        }
    }
    (names, args)
}

/// `'1'` or `'0'`, as the script reads a flag.
fn flag(on: bool) -> &'static [u8] {
    if on { b"1" } else { b"0" }
}

/// One answer per push from the script's answers: an error, or answers
/// of the wrong length, is every push's.
pub(super) fn answers(reply: Result<Vec<(i64, String)>, String>, pushes: usize) -> Vec<Committed> {
    match reply {
        Ok(replies) if replies.len() == pushes => replies
            .into_iter()
            .map(|(new, cursor)| Ok((new == 1, cursor)))
            .collect(),
        Ok(replies) => vec![
            Err(format!(
                "redis answered {} of {pushes} pushes",
                replies.len()
            ));
            pushes
        ],
        Err(err) => vec![Err(err); pushes],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> ShardKeys {
        ShardKeys {
            seq: "{t}:seq".into(),
            epoch: "{t}:epoch".into(),
            aged: "{t}:aged".into(),
            times: "{t}:times".into(),
            writer: "{t}:writer".into(),
            batches: "{t}:batch:".into(),
        }
    }

    fn push(id: &str, idempotent: bool, users: &[&str]) -> ShardPush {
        ShardPush {
            head: Bytes::from(format!("H{id}")),
            id_key: format!("{{t}}:id:{id}"),
            idempotent,
            expires: true,
            messages: vec![ShardMessage {
                tail: Bytes::from_static(b"T"),
                streams: users
                    .iter()
                    .map(|u| Recipient {
                        history: format!("{{t}}:h:u:{u}"),
                        channel: format!("{{t}}:bus:u:{u}"),
                        target: (*u).to_owned(),
                    })
                    .collect(),
            }],
        }
    }

    #[test]
    fn a_batch_lists_the_shared_keys_then_each_push_its_id_key_and_streams() {
        let keys = keys();
        let settings = Settings {
            history_size: 100,
            ttl_ms: 5000,
            batch_key_ms: 3000,
        };
        let pushes = [push("a", true, &["u1", "u2"]), push("b", false, &["u3"])];
        let run = Run {
            epoch: "e",
            key: "{t}:batch:1",
            deadline: 1_764_410_000_000,
        };
        let (names, args) = layout(&keys, settings, run, &pushes);
        assert_eq!(
            names,
            [
                "{t}:seq",
                "{t}:epoch",
                "{t}:aged",
                "{t}:times",
                "{t}:writer",
                "{t}:batch:1",
                "{t}:id:a",
                "{t}:h:u:u1",
                "{t}:h:u:u2",
                "{t}:id:b",
                "{t}:h:u:u3",
            ]
        );
        let args: Vec<String> = args
            .iter()
            .map(|arg| match arg {
                Arg::Bytes(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                Arg::Number(n) => n.to_string(),
            })
            .collect();
        assert_eq!(
            args,
            [
                "e",
                "100",
                "5000",
                "2",
                "1764410000000",
                "3000", // epoch, history, ttl, pushes, deadline, batch key
                "Ha",
                "1",
                "1",
                "1", // head, idempotent, expires, messages
                "T",
                "2",
                "{t}:bus:u:u1",
                "u1",
                "{t}:bus:u:u2",
                "u2", //
                "Hb",
                "0",
                "1",
                "1", //
                "T",
                "1",
                "{t}:bus:u:u3",
                "u3",
            ]
        );
    }

    #[test]
    fn a_batch_is_bounded_by_pushes_and_by_streams_but_takes_one_push_whatever_its_size() {
        let one = push("a", false, &["u1"]);
        assert!(fits(0, 0, &one));
        assert!(fits(MAX_BATCH - 1, 0, &one));
        assert!(!fits(MAX_BATCH, 0, &one));
        assert!(fits(1, MAX_BATCH_STREAMS - 1, &one));
        assert!(!fits(1, MAX_BATCH_STREAMS, &one));
        let users: Vec<String> = (0..=MAX_BATCH_STREAMS).map(|i| format!("u{i}")).collect();
        let users: Vec<&str> = users.iter().map(String::as_str).collect();
        let huge = push("b", false, &users);
        assert_eq!(huge.streams(), MAX_BATCH_STREAMS + 1);
        assert!(fits(0, 0, &huge), "alone, it still goes");
        assert!(!fits(1, 1, &huge));
    }

    #[test]
    fn each_push_gets_its_own_answer_in_order() {
        let got = answers(Ok(vec![(1, "e-5".into()), (0, "e-2".into())]), 2);
        assert_eq!(
            got,
            vec![Ok((true, "e-5".into())), Ok((false, "e-2".into()))]
        );
    }

    #[test]
    fn a_short_or_failed_reply_fails_every_push_of_the_batch() {
        let short = answers(Ok(vec![(1, "e-5".into())]), 3);
        assert_eq!(short.len(), 3);
        assert!(short.iter().all(Result::is_err));
        let failed = answers(Err("connection lost".to_owned()), 2);
        assert_eq!(failed.len(), 2);
        assert!(
            failed
                .iter()
                .all(|a| a.as_ref().is_err_and(|e| e.contains("connection lost")))
        );
    }
}
