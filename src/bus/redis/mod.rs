//! The Redis bus: several gateway processes share one set of users.
//!
//! Every push runs one Lua script (`publish.lua`) that takes the next
//! number of a shared sequence, appends the frame to the history streams
//! (one for broadcasts, one per user) and PUBLISHes it once on one channel.
//! Every node subscribes to that channel once and delivers what arrives to
//! its own connections, so any node answers any poll: no sticky sessions.
//!
//! Resume on any node: attach the connection first (live frames start to
//! queue), then read history after the cursor (`resume.lua`), then queue
//! the `recover` frame and the history ahead of the live frames, skipping
//! live copies of what history carried (the connection's floor).
//!
//! Keys, under `[broker] key_prefix` `P` (so clusters can share a Redis):
//!
//! | key | what |
//! |-----|------|
//! | `P:seq` | the sequence (INCR) |
//! | `P:epoch` | the history's epoch (changes if Redis loses the keys) |
//! | `P:aged`, `P:times` | the age watermark and recent publish times |
//! | `P:h:b`, `P:h:u:<user>` | history streams, entry id `<seq>-0` |
//! | `P:id:<push id>` | idempotency keys (`SET NX`, ttl) |
//! | `P:bus` | the pub/sub channel |
//! | `P:presence:<node>`, `P:nodes` | connection counts per node, node heartbeats |

pub(crate) mod presence;
pub(crate) mod reply;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script, Value};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{info, warn};

use self::reply::ResumeReply;
use super::deadline::{self, BrokerClock};
use super::fanout::Fanout;
use super::resume::Resume;
use super::{
    Bus, BusError, ChannelMembers, Open, OpenError, Opened, Publish, Published, PushTarget,
    Unopened,
};
use crate::config::BrokerConfig;
use crate::history::{Cursor, Position};
use crate::metrics::Counters;
use crate::protocol::frame::{Frame, Stream, message_parts};
use crate::protocol::{Channel, Transport, UserId};
use crate::registry::conn::suffix_of;
use crate::registry::{Conn, Outgoing, Registry};

/// The longest wait between attempts to resubscribe.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Key names under the prefix.
#[derive(Debug, Clone)]
struct Keys {
    prefix: String,
    seq: String,
    epoch: String,
    aged: String,
    /// What a Redis Cluster shard records of failovers (`resume.lua`'s
    /// KEYS[4]); one Redis never writes it.
    writer: String,
    times: String,
    broadcast: String,
    channel: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        let key = |name: &str| format!("{prefix}:{name}");
        Self {
            prefix: prefix.to_owned(),
            seq: key("seq"),
            epoch: key("epoch"),
            aged: key("aged"),
            writer: key("writer"),
            times: key("times"),
            broadcast: key("h:b"),
            channel: key("bus"),
        }
    }

    fn user(&self, user: &str) -> String {
        format!("{}:h:u:{user}", self.prefix)
    }

    fn channel(&self, channel: &str) -> String {
        format!("{}:h:c:{channel}", self.prefix)
    }

    fn push_id(&self, id: &str) -> String {
        format!("{}:id:{id}", self.prefix)
    }
}

/// What the node and its tasks share.
#[derive(Debug)]
struct Shared {
    conn: ConnectionManager,
    client: redis::Client,
    keys: Keys,
    registry: Arc<Registry>,
    counters: Counters,
    history_size: usize,
    ttl_ms: u64,
    /// The epoch and the last sequence number delivered on this node
    /// (advanced by the fan-out thread as it delivers).
    position: Arc<Mutex<Cursor>>,
    /// Delivers what the subscriber receives, in order, off the runtime.
    fanout: Fanout,
    ready: AtomicBool,
    /// Cluster-wide presence, on the same Redis.
    presence_keys: Arc<presence::Presence<ConnectionManager>>,
    publish: Script,
    /// Redis's clock, for each publish's deadline.
    clock: BrokerClock,
    resume: Script,
    presence: mpsc::UnboundedSender<(UserId, i64)>,
}

/// A [`Bus`] over Redis pub/sub and streams.
#[derive(Debug)]
pub(crate) struct RedisBus {
    shared: Arc<Shared>,
    /// The node's tasks, held for the drop: it aborts them.
    _tasks: JoinSet<()>,
}

impl RedisBus {
    /// Connects (retrying for up to `start_wait_secs`), subscribes, and
    /// starts the node's subscriber and presence tasks; messages reach
    /// `registry`'s connections through `fanout`.
    pub(crate) async fn connect(
        config: &BrokerConfig,
        registry: Arc<Registry>,
        counters: Counters,
        fanout: Fanout,
        history_size: usize,
        ttl_ms: u64,
    ) -> Result<Self, BusError> {
        let unavailable = |err: redis::RedisError| BusError::Unavailable(err.to_string());
        let client = redis::Client::open(config.url.as_str()).map_err(unavailable)?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.timeout()))
            .set_response_timeout(Some(config.timeout()))
            .set_number_of_retries(1)
            .set_max_delay(MAX_BACKOFF);
        let deadline = crate::clamp::from_now(Duration::from_secs(config.start_wait_secs));
        let mut conn = loop {
            match client
                .get_connection_manager_with_config(manager.clone())
                .await
            {
                Ok(conn) => break conn,
                Err(err) if tokio::time::Instant::now() < deadline => {
                    warn!(error = %err, "redis unreachable; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(err) => return Err(unavailable(err)),
            }
        };
        let keys = Keys::new(&config.key_prefix);
        let epoch = ensure_epoch(&mut conn, &keys).await.map_err(unavailable)?;
        let sent_ms = deadline::now_ms();
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let clock = BrokerClock::from_time(config.timeout(), secs, micros, sent_ms);
        let seq: Option<u64> = conn.get(&keys.seq).await.map_err(unavailable)?;
        let (presence_tx, presence_rx) = mpsc::unbounded_channel();
        let presence_keys = Arc::new(presence::Presence {
            conn: conn.clone(),
            places: vec![config.key_prefix.clone()],
            place_of: Box::new(|_| 0),
            registry: Arc::clone(&registry),
            ttl_ms: crate::clamp::millis(config.presence_ttl()),
        });
        let shared = Arc::new(Shared {
            conn,
            client,
            keys,
            registry,
            counters,
            history_size,
            ttl_ms,
            position: Arc::new(Mutex::new(Cursor::new(epoch, seq.unwrap_or(0)))),
            fanout,
            ready: AtomicBool::new(false),
            presence_keys,
            publish: Script::new(concat!(
                include_str!("history.lua"),
                include_str!("publish.lua")
            )),
            clock,
            resume: Script::new(include_str!("resume.lua")),
            presence: presence_tx,
        });
        let (subscribed_tx, subscribed_rx) = tokio::sync::oneshot::channel();
        let mut tasks = JoinSet::new();
        tasks.spawn(subscribe(Arc::clone(&shared), subscribed_tx));
        let (memberships_tx, memberships_rx) = mpsc::unbounded_channel();
        shared.registry.watch_channels(memberships_tx);
        tasks.spawn(presence::run(
            Arc::clone(&shared.presence_keys),
            presence_rx,
            memberships_rx,
            config.presence_ttl(),
        ));
        let bus = Self {
            shared,
            _tasks: tasks,
        };
        match tokio::time::timeout(config.timeout() * 2, subscribed_rx).await {
            Ok(Ok(())) => Ok(bus),
            _ => Err(BusError::Unavailable("could not subscribe".into())),
        }
    }
}

/// The epoch in Redis, created if absent (16 hex digits, like cursors).
async fn ensure_epoch(conn: &mut ConnectionManager, keys: &Keys) -> redis::RedisResult<u64> {
    let fresh = format!("{:016x}", rand::random::<u64>());
    let _: bool = conn.set_nx(&keys.epoch, &fresh).await?;
    let epoch: String = conn.get(&keys.epoch).await?;
    Ok(u64::from_str_radix(&epoch, 16).unwrap_or(0))
}

/// The node's one subscription, renewed with backoff whenever it drops.
/// After a renewal, clients that may have missed messages are told so.
async fn subscribe(shared: Arc<Shared>, subscribed: tokio::sync::oneshot::Sender<()>) {
    let mut subscribed = Some(subscribed);
    let mut backoff = Duration::from_millis(100);
    loop {
        match shared.client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&shared.keys.channel).await {
                Ok(()) => {
                    backoff = Duration::from_millis(100);
                    let first = subscribed.is_some();
                    // The command connection may still be reconnecting after
                    // an outage: retry until it answers.
                    for attempt in 1.. {
                        match shared.catch_up(!first).await {
                            Ok(()) => break,
                            Err(err) if attempt < 50 => {
                                warn!(error = %err, "redis: reading the sequence after subscribing failed; retrying");
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                            Err(err) => {
                                warn!(error = %err, "redis: giving up on catching up");
                                break;
                            }
                        }
                    }
                    if let Some(tx) = subscribed.take() {
                        let _ = tx.send(());
                    }
                    shared.ready.store(true, Ordering::Relaxed);
                    info!(channel = %shared.keys.channel, "redis: subscribed");
                    let mut messages = pubsub.on_message();
                    while let Some(msg) = messages.next().await {
                        shared.deliver(msg.get_payload_bytes());
                    }
                    warn!("redis: subscription lost");
                }
                Err(err) => warn!(error = %err, "redis: subscribe failed"),
            },
            Err(err) => warn!(error = %err, "redis: cannot connect for pub/sub"),
        }
        shared.ready.store(false, Ordering::Relaxed);
        metrics::counter!(crate::metrics::names::BUS_RECONNECTS_TOTAL).increment(1);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

impl Shared {
    /// After (re)subscribing: if messages were published while this node
    /// was not listening, its clients may have missed some; each is sent
    /// `recover` with `complete: false` and the current position.
    async fn catch_up(&self, resubscribed: bool) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let epoch = ensure_epoch(&mut conn, &self.keys).await?;
        let seq: Option<u64> = conn.get(&self.keys.seq).await?;
        let now = Cursor::new(epoch, seq.unwrap_or(0));
        // Let the fan-out deliver what the old subscription received first,
        // so its position updates land before this one.
        let (done, delivered) = tokio::sync::oneshot::channel();
        self.fanout.after(Box::new(move || {
            let _ = done.send(());
        }));
        let _ = delivered.await;
        let before = std::mem::replace(&mut *self.position.lock(), now);
        if resubscribed && before != now {
            let frame = Frame::recover(false, &now.to_string());
            for conn in self.registry.all_connections() {
                let suffix = conn.cursor_suffix();
                let frame = if suffix.is_empty() {
                    frame.clone()
                } else {
                    Frame::recover(false, &format!("{now}{suffix}"))
                };
                conn.outbound.push_resume(vec![frame], 0);
            }
            warn!(from = %before, to = %now, "redis: clients told they may have missed messages");
        }
        Ok(())
    }

    /// Delivers one published message to this node's connections.
    fn deliver(&self, payload: &[u8]) {
        metrics::counter!(crate::metrics::names::BUS_MESSAGES_RECEIVED_TOTAL).increment(1);
        let Some(message) = BusMessage::parse(payload) else {
            warn!("redis: malformed bus message");
            return;
        };
        let Some(frame) = Frame::message_from_json(
            message.cursor.seq,
            message.cursor_text,
            Bytes::copy_from_slice(message.json),
        ) else {
            warn!("redis: bus message is not UTF-8");
            return;
        };
        let cursor = message.cursor;
        let position = Arc::clone(&self.position);
        let then = Box::new(move || {
            let mut position = position.lock();
            if position.epoch != cursor.epoch || position.seq < cursor.seq {
                *position = cursor;
            }
        });
        self.fanout.deliver(frame, message.target, Some(then));
    }

    async fn publish(&self, message: Publish) -> Result<Published, BusError> {
        // The head (up to the cursor) is the same for every message of the
        // push; the tail names the stream.
        let (head, tail) = message_parts(&message.id, Stream::Broadcast, &message.data);
        let mut invocation = self.publish.prepare_invoke();
        invocation
            .key(&self.keys.seq)
            .key(&self.keys.epoch)
            .key(&self.keys.aged)
            .key(&self.keys.times)
            .key(self.keys.push_id(&message.id));
        let (target, tail, first_expiring, users, channels) = match &message.target {
            PushTarget::Broadcast => {
                invocation.key(&self.keys.broadcast);
                ("*".to_owned(), tail, 7, 0, 0)
            }
            PushTarget::Users(users) => {
                for user in users {
                    invocation.key(self.keys.user(user.as_str()));
                }
                let (_, tail) = message_parts(&message.id, Stream::User, &message.data);
                let target = users
                    .iter()
                    .map(UserId::as_str)
                    .collect::<Vec<_>>()
                    .join(",");
                (target, tail, 6, users.len(), 0)
            }
            PushTarget::Channels(channels) => {
                for channel in channels {
                    invocation.key(self.keys.channel(channel.as_str()));
                }
                (String::new(), tail, 6, 0, channels.len())
            }
        };
        invocation
            .arg(format!("{:016x}", rand::random::<u64>()))
            .arg(&head[..])
            .arg(&tail[..])
            .arg(&target)
            .arg(self.history_size)
            .arg(self.ttl_ms)
            .arg(if message.idempotent { "1" } else { "0" })
            .arg(&self.keys.channel)
            .arg(first_expiring)
            .arg(channels);
        let sent_ms = deadline::now_ms();
        invocation.arg(self.clock.deadline(sent_ms));
        if let PushTarget::Channels(names) = &message.target {
            for channel in names {
                let (_, tail) = message_parts(
                    &message.id,
                    Stream::Channel(channel.as_str()),
                    &message.data,
                );
                invocation.arg(format!("#{channel}")).arg(tail.to_vec());
            }
        }
        let mut conn = self.conn.clone();
        let reply: redis::RedisResult<(i64, String, i64)> =
            invocation.invoke_async(&mut conn).await;
        let reply = reply
            .map(|(fresh, cursor, clock)| ((fresh, cursor), clock))
            .map_err(|err| err.to_string());
        let (fresh, cursor) = self.clock.settle(reply, sent_ms).map_err(|err| {
            metrics::counter!(crate::metrics::names::BUS_ERRORS_TOTAL).increment(1);
            BusError::Unavailable(err)
        })?;
        let cursor = cursor
            .parse::<Cursor>()
            .map_err(|_| BusError::Unavailable("redis returned a malformed cursor".into()))?;
        if fresh == 1 {
            super::count_published(&self.counters, &message.target);
        }
        Ok(Published {
            id: message.id,
            cursor: Position::single(cursor),
            users,
            channels,
            duplicate: fresh == 0,
        })
    }

    /// History after `cursor` for `user` in `channels`: `(complete,
    /// position, frames)`.
    async fn read(
        &self,
        user: &UserId,
        channels: &[Channel],
        cursor: Cursor,
    ) -> redis::RedisResult<(bool, Cursor, Vec<Frame>)> {
        let mut conn = self.conn.clone();
        let mut invocation = self.resume.prepare_invoke();
        invocation
            .key(&self.keys.epoch)
            .key(&self.keys.seq)
            .key(&self.keys.aged)
            .key(&self.keys.writer)
            .key(&self.keys.broadcast)
            .key(self.keys.user(user.as_str()));
        for channel in channels {
            invocation.key(self.keys.channel(channel.as_str()));
        }
        let reply: Vec<Value> = invocation
            .arg(format!("{:016x}", cursor.epoch))
            .arg(cursor.seq)
            .invoke_async(&mut conn)
            .await?;
        let reply = ResumeReply::parse(reply)?;
        let (complete, position) = (
            reply.complete(cursor.seq, self.history_size),
            reply.position,
        );
        let mut frames: Vec<Frame> = reply
            .streams
            .flat_map(|stream| reply::frames(stream, position.epoch, 0))
            .collect();
        frames.sort_by_key(Frame::seq);
        Ok((complete, position, frames))
    }

    /// Attaches, then reads history, then queues the resume. A history
    /// read that fails releases the connection again: history may still
    /// cover the gap, so the client is refused (to retry with the same
    /// cursor), not told `complete: false`.
    async fn open(&self, open: Open) -> Result<Opened, OpenError> {
        let user = open.user.clone();
        let suffix = suffix_of(&open.channels);
        let covered = open.covered();
        let (cursor, transport) = (open.cursor.clone(), open.transport);
        let attached = open.attach(&self.registry)?;
        let _ = self.presence.send((user.clone(), 1));
        let Some(cursor) = cursor else {
            return Ok(Opened::Attached(attached));
        };
        // The history read awaits Redis: a client that leaves meanwhile
        // drops this future, and the connection must not stay attached.
        let unopened = Unopened::new(&attached.conn, |conn| {
            self.release(conn);
        });
        let read = self.read(&user, &covered, cursor.first()).await;
        let (complete, position, history) = match read {
            Ok(read) => {
                unopened.finish();
                read
            }
            Err(err) => {
                warn!(error = %err, user_id = %user, "redis: history read failed; resume refused");
                // Released as if the client had left.
                drop(unopened);
                return Err(OpenError::Unavailable);
            }
        };
        let resume = Resume::new(complete, position, history).covering(suffix_of(&covered));
        let conn = &attached.conn;
        if transport == Transport::Poll && resume.is_news() {
            let mut frames = resume.into_frames(&suffix);
            self.release(conn);
            let mut live = std::collections::VecDeque::new();
            conn.outbound.take(&mut live);
            frames.extend(live.into_iter().filter_map(|item| match item {
                Outgoing::Frame(frame) if frame.seq() > position.seq => Some(frame),
                _ => None,
            }));
            return Ok(Opened::Ready(frames));
        }
        // A poll parked with nothing to answer yet gets the floor alone: a
        // live copy of a message the cursor covers may have been queued
        // during the history read; it must not be the answer.
        Resume::seat(Some(resume), conn, transport, position.seq);
        Ok(Opened::Attached(attached))
    }

    fn release(&self, conn: &Conn) -> Cursor {
        if self.registry.conn(conn.id).is_some() {
            self.registry.detach(conn);
            let _ = self.presence.send((conn.user.clone(), -1));
        }
        *self.position.lock()
    }
}

/// A message as published on the bus: `<seq>\n<cursor>\n<target>\n<frame
/// JSON>`, the target `*`, user ids joined by `,`, or `#<channel>`.
#[derive(Debug)]
pub(crate) struct BusMessage<'a> {
    /// Its position.
    pub cursor: Cursor,
    /// The position as written in the frame.
    pub cursor_text: &'a str,
    /// Who it is for.
    pub target: PushTarget,
    /// The frame, as encoded by the publisher.
    pub json: &'a [u8],
}

impl<'a> BusMessage<'a> {
    /// Reads one; `None` if it is not in that shape.
    pub(crate) fn parse(payload: &'a [u8]) -> Option<Self> {
        let mut parts = payload.splitn(4, |b| *b == b'\n');
        let (seq, cursor_text, target, json) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let seq: u64 = std::str::from_utf8(seq).ok()?.parse().ok()?;
        let cursor_text = std::str::from_utf8(cursor_text).ok()?;
        let cursor = cursor_text.parse::<Cursor>().ok()?;
        if cursor.seq != seq {
            return None;
        }
        let target = if target == b"*" {
            PushTarget::Broadcast
        } else if let Some(name) = target.strip_prefix(b"#") {
            PushTarget::Channels(vec![Channel::parse(std::str::from_utf8(name).ok()?).ok()?])
        } else {
            let users: Vec<UserId> = std::str::from_utf8(target)
                .ok()?
                .split(',')
                .filter_map(|u| UserId::parse(u).ok())
                .collect();
            PushTarget::Users(users)
        };
        Some(Self {
            cursor,
            cursor_text,
            target,
            json,
        })
    }
}

impl Bus for RedisBus {
    fn publish(&self, message: Publish) -> BoxFuture<'_, Result<Published, BusError>> {
        Box::pin(self.shared.publish(message))
    }

    fn open(&self, open: Open) -> BoxFuture<'_, Result<Opened, OpenError>> {
        Box::pin(self.shared.open(open))
    }

    fn release(&self, conn: &Conn) -> Position {
        Position::single(self.shared.release(conn))
    }

    fn detach(&self, conn: &Conn) {
        self.shared.release(conn);
    }

    fn sweep(&self, _now_ms: u64) {
        // History ages out inside Redis (publish.lua trims, user streams expire).
    }

    fn is_ready(&self) -> bool {
        self.shared.ready.load(Ordering::Relaxed)
    }

    fn position(&self) -> Position {
        Position::single(*self.shared.position.lock())
    }

    fn channel_presence<'a>(
        &'a self,
        channel: &'a Channel,
        max_listed: usize,
    ) -> BoxFuture<'a, Result<ChannelMembers, BusError>> {
        Box::pin(presence::channel_members(
            &self.shared.presence_keys,
            channel,
            max_listed,
        ))
    }

    fn presence(&self, user: &UserId) -> BoxFuture<'_, Result<usize, BusError>> {
        let user = user.clone();
        Box::pin(async move { presence::count(&self.shared.presence_keys, &user).await })
    }
}
