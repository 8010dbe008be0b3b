//! Group commit of publishes, shard by shard: the pushes that reach a
//! shard while its publish script is in flight go together in its next
//! script.
//!
//! A shard's messages are numbered by one counter on one master, so its
//! publishes run one after another there whatever the gateway does. What
//! the gateway can spare that master is the work around each publish: a
//! request read and answered, a script started, the failover guard, the
//! clock and the age watermark read, a replication record. One script per
//! batch pays those once (`publish.lua`). A push that finds its shard idle
//! goes at once: a batch is only ever what queued behind a script in
//! flight, so nothing waits for company.

use bytes::Bytes;
use redis::cluster_async::ClusterConnection;
use redis::{Script, ScriptInvocation};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::shards::Shards;

/// The most pushes in one script, and the most streams they may write
/// together (a push to many users writes many): bounds on how long one
/// script holds its master. A push over the stream bound on its own
/// still goes, alone.
const MAX_BATCH: usize = 64;
const MAX_BATCH_STREAMS: usize = 1024;

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
    fn streams(&self) -> usize {
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
struct ShardKeys {
    seq: String,
    epoch: String,
    aged: String,
    times: String,
    writer: String,
}

/// Where a publish queues for its shard.
type Queue = mpsc::UnboundedSender<Queued>;

/// The per-shard queues, each drained by its own task.
#[derive(Debug)]
pub(super) struct Committer {
    queues: Vec<Queue>,
}

impl Committer {
    /// Starts one task per shard of `shards` (held by `tasks`), each
    /// running `script` on `conn`.
    pub(super) fn start(
        conn: &ClusterConnection,
        script: &Script,
        shards: &Shards,
        history_size: usize,
        ttl_ms: u64,
        tasks: &mut JoinSet<()>,
    ) -> Self {
        let queues = (0..shards.count())
            .map(|shard| {
                let (tx, rx) = mpsc::unbounded_channel();
                let keys = ShardKeys {
                    seq: shards.seq(shard),
                    epoch: shards.epoch(shard),
                    aged: shards.aged(shard),
                    times: shards.times(shard),
                    writer: shards.writer(shard),
                };
                let settings = Settings {
                    history_size,
                    ttl_ms,
                };
                tasks.spawn(drain(conn.clone(), script.clone(), keys, settings, rx));
                tx
            })
            .collect();
        Self { queues }
    }

    /// Publishes `push` in `shard`: queued behind the shard's script in
    /// flight, if any, and sent with the others that queued meanwhile.
    pub(super) async fn commit(&self, shard: usize, push: ShardPush) -> Committed {
        let (tx, rx) = oneshot::channel();
        let queue = self
            .queues
            .get(shard)
            .ok_or_else(|| format!("no shard {shard}"))?;
        queue
            .send((push, tx))
            .map_err(|_| "the shard's publisher stopped".to_owned())?;
        rx.await
            .map_err(|_| "the shard's publisher stopped".to_owned())?
    }
}

/// The history settings every publish carries.
#[derive(Debug, Clone, Copy)]
struct Settings {
    history_size: usize,
    ttl_ms: u64,
}

/// A push waiting for its shard's script, and who waits for its answer.
type Queued = (ShardPush, oneshot::Sender<Committed>);

/// One shard's publisher: takes what has queued (within [`MAX_BATCH`]
/// and [`MAX_BATCH_STREAMS`]), runs it as one script, answers each push,
/// and goes on.
async fn drain(
    mut conn: ClusterConnection,
    script: Script,
    keys: ShardKeys,
    settings: Settings,
    mut queue: mpsc::UnboundedReceiver<Queued>,
) {
    // A push that did not fit the last batch: the first of the next.
    let mut carried: Option<Queued> = None;
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match queue.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let mut streams = first.0.streams();
        let mut batch = vec![first];
        while let Ok(next) = queue.try_recv() {
            if !fits(batch.len(), streams, &next.0) {
                carried = Some(next);
                break;
            }
            streams += next.0.streams();
            batch.push(next);
        }
        let (pushes, waiters): (Vec<ShardPush>, Vec<_>) = batch.into_iter().unzip();
        metrics::histogram!(crate::metrics::names::BUS_PUBLISH_BATCH_PUSHES)
            .record(pushes.len() as f64);
        let epoch = format!("{:016x}", rand::random::<u64>());
        let invocation = invocation(&script, &keys, settings, &epoch, &pushes);
        let reply: redis::RedisResult<Vec<(i64, String)>> =
            invocation.invoke_async(&mut conn).await;
        for (waiter, answer) in waiters.into_iter().zip(answers(reply, pushes.len())) {
            // A push whose caller went away needs no answer.
            let _ = waiter.send(answer);
        }
    }
}

/// Whether `next` joins a batch of `pushes` pushes writing `streams`
/// streams: a batch takes at least one push, and more within the bounds.
fn fits(pushes: usize, streams: usize, next: &ShardPush) -> bool {
    pushes == 0 || (pushes < MAX_BATCH && streams + next.streams() <= MAX_BATCH_STREAMS)
}

/// A publish script argument: bytes of a push, or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg<'a> {
    Bytes(&'a [u8]),
    Number(u64),
}

/// The publish script's keys and arguments for `pushes` (see
/// `publish.lua` for the layout).
fn layout<'a>(
    keys: &'a ShardKeys,
    settings: Settings,
    epoch: &'a str,
    pushes: &'a [ShardPush],
) -> (Vec<&'a str>, Vec<Arg<'a>>) {
    let mut names = vec![
        keys.seq.as_str(),
        &keys.epoch,
        &keys.aged,
        &keys.times,
        &keys.writer,
    ];
    let mut args = vec![
        Arg::Bytes(epoch.as_bytes()),
        Arg::Number(settings.history_size as u64),
        Arg::Number(settings.ttl_ms),
        Arg::Number(pushes.len() as u64),
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

/// The invocation of `script` for `pushes`.
fn invocation<'a>(
    script: &'a Script,
    keys: &ShardKeys,
    settings: Settings,
    epoch: &str,
    pushes: &[ShardPush],
) -> ScriptInvocation<'a> {
    let (names, args) = layout(keys, settings, epoch, pushes);
    let mut invocation = script.prepare_invoke();
    for name in names {
        invocation.key(name);
    }
    for arg in args {
        match arg {
            Arg::Bytes(bytes) => invocation.arg(bytes),
            Arg::Number(n) => invocation.arg(n),
        };
    }
    invocation
}

/// `'1'` or `'0'`, as the script reads a flag.
fn flag(on: bool) -> &'static [u8] {
    if on { b"1" } else { b"0" }
}

/// One answer per push from the script's reply: an error, or a reply of
/// the wrong length, is every push's.
fn answers(reply: redis::RedisResult<Vec<(i64, String)>>, pushes: usize) -> Vec<Committed> {
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
        Err(err) => vec![Err(err.to_string()); pushes],
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
        };
        let pushes = [push("a", true, &["u1", "u2"]), push("b", false, &["u3"])];
        let (names, args) = layout(&keys, settings, "e", &pushes);
        assert_eq!(
            names,
            [
                "{t}:seq",
                "{t}:epoch",
                "{t}:aged",
                "{t}:times",
                "{t}:writer",
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
                "2", // epoch, history, ttl, pushes
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
        let failed = answers(
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "connection lost",
            ))),
            2,
        );
        assert_eq!(failed.len(), 2);
        assert!(
            failed
                .iter()
                .all(|a| a.as_ref().is_err_and(|e| e.contains("connection lost")))
        );
    }
}
