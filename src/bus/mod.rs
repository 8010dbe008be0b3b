//! The bus: where an accepted push is numbered, recorded in history and
//! fanned out, and where a connection joins live delivery.
//!
//! The memory bus (the default) serves one process; a Redis bus lets many
//! share users. The rest of the gateway sees only [`Bus`].

pub(crate) mod cluster;
mod deadline;
pub(crate) mod fanout;
pub(crate) mod memory;
pub(crate) mod redis;
mod resume;

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;

use crate::history::{Coverage, Position};
use crate::metrics::Counters;
use crate::protocol::frame::Frame;
use crate::protocol::{Channel, Transport, UserId};
use crate::registry::{AtCapacity, Attached, Conn, Registry};

pub(crate) use cluster::ClusterBus;
pub(crate) use memory::MemoryBus;
pub(crate) use redis::RedisBus;

/// Who a push goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushTarget {
    /// `"to": "*"`: every connection, on the broadcast stream.
    Broadcast,
    /// `"to": [...]`: these users' personal streams; at least one, no
    /// repeats, in the order first given.
    Users(Vec<UserId>),
    /// `"to": {"channels": [...]}`: one message to each of these channels;
    /// at least one, no repeats, in the order first given.
    Channels(Vec<Channel>),
}

/// A push accepted by the API, to be numbered and delivered.
#[derive(Debug)]
pub(crate) struct Publish {
    /// The push id: the caller's idempotency key or a generated one.
    pub id: String,
    /// Whether `id` came from the caller (and so is an idempotency key).
    pub idempotent: bool,
    /// Everyone, or the users named.
    pub target: PushTarget,
    /// The payload, verbatim.
    pub data: Box<RawValue>,
}

/// What became of a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    /// The push id.
    pub id: String,
    /// The message's position: the cursor a recipient's frame carries
    /// (on a broker of several shards, the publishing node's position with
    /// the message's shard at the message).
    pub cursor: Position,
    /// Distinct users addressed (0 for a broadcast or channels).
    pub users: usize,
    /// Channels published to, one message each (0 unless channels).
    pub channels: usize,
    /// True when the id was seen within the idempotency window: nothing
    /// was delivered again, and the rest is what the first push returned.
    pub duplicate: bool,
}

/// Who is in a channel, over every node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ChannelMembers {
    /// Connections in it.
    pub subscribers: usize,
    /// Distinct users among them.
    pub users: usize,
    /// Some of those users, sorted (at most the number asked for).
    pub listed: Vec<UserId>,
    /// Whether users were left out of `listed`.
    pub truncated: bool,
}

impl ChannelMembers {
    /// From connection count and a sorted, de-duplicated user list.
    pub(crate) fn new(subscribers: usize, mut users: Vec<UserId>, max_listed: usize) -> Self {
        let count = users.len();
        users.truncate(max_listed);
        Self {
            subscribers,
            users: count,
            truncated: count > users.len(),
            listed: users,
        }
    }
}

/// Adds a fresh push to `pushgate_messages_published_total` by stream:
/// one message for a broadcast or a personal push, one per channel named.
fn count_published(counters: &Counters, target: &PushTarget) {
    match target {
        PushTarget::Broadcast => counters.published_broadcast.increment(1),
        PushTarget::Users(_) => counters.published_user.increment(1),
        PushTarget::Channels(names) => counters.published_channel.increment(names.len() as u64),
    }
}

/// The broker could not take the message; nothing was accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    /// The broker is unreachable.
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    /// History holds `[history] max_streams` streams; the push would start
    /// another.
    #[error("history holds the most streams it may ({0}); retry once some age out")]
    HistoryFull(usize),
}

/// Why a client could not join live delivery. Nothing stays attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OpenError {
    /// The gateway is full (`[session] max_connections`).
    #[error(transparent)]
    AtCapacity(#[from] AtCapacity),
    /// The history after the client's cursor could not be read (a Redis
    /// error, or no answer within `[broker] timeout_ms`). History may
    /// still cover the gap: the client is refused, to come back with the
    /// same cursor, rather than told `complete: false`.
    #[error("message history unavailable")]
    Unavailable,
}

/// A client joining live delivery, maybe resuming from a cursor.
#[derive(Debug, Clone)]
pub(crate) struct Open {
    /// Who.
    pub user: UserId,
    /// How.
    pub transport: Transport,
    /// When its token expires (seconds since the epoch).
    pub expires_at: Option<u64>,
    /// Where it resumes from: one position per shard of the broker.
    pub cursor: Option<Position>,
    /// The channels it is in (its token's claim and what it asked for),
    /// already checked.
    pub channels: Vec<Channel>,
    /// Which of them its cursor covers: those resume from the cursor, the
    /// others (joined since) start live.
    pub coverage: Coverage,
    /// Now, in ms on the timer's clock.
    pub now_ms: u64,
}

impl Open {
    /// The channels its cursor covers (they resume from it; the others
    /// start live).
    pub(crate) fn covered(&self) -> Vec<Channel> {
        self.channels
            .iter()
            .filter(|c| self.coverage.covers(c.as_str()))
            .cloned()
            .collect()
    }

    /// Attaches the client to `registry` in its channels.
    pub(crate) fn attach(self, registry: &Registry) -> Result<Attached, AtCapacity> {
        registry.attach(
            self.user,
            self.transport,
            self.expires_at,
            self.now_ms,
            self.channels,
        )
    }
}

/// Releases a connection that an `open` attached but did not finish: its
/// client left while history was read (the open's future dropped), or the
/// read failed. [`Unopened::finish`] once the open goes on.
pub(crate) struct Unopened<'a, F: Fn(&Conn)> {
    conn: &'a Conn,
    release: F,
}

impl<'a, F: Fn(&Conn)> Unopened<'a, F> {
    /// Guards `conn`, released by `release` unless finished.
    pub(crate) fn new(conn: &'a Conn, release: F) -> Self {
        Self { conn, release }
    }

    /// The open went on: the connection stays attached.
    pub(crate) fn finish(self) {
        std::mem::forget(self);
    }
}

impl<F: Fn(&Conn)> Drop for Unopened<'_, F> {
    fn drop(&mut self) {
        (self.release)(self.conn);
    }
}

/// How a client joined.
#[derive(Debug)]
pub(crate) enum Opened {
    /// Attached for live delivery; missed messages (after a `recover`
    /// frame) are already queued on the connection, ahead of live ones.
    Attached(Attached),
    /// A long-poll with messages to return at once: a `recover` frame and
    /// the missed messages. Nothing was attached.
    Ready(Vec<Frame>),
}

/// Numbers messages, keeps them in history and delivers them to every
/// connection that should see them.
pub(crate) trait Bus: Send + Sync + std::fmt::Debug + 'static {
    /// Accepts a message whole or not at all.
    fn publish(&self, message: Publish) -> BoxFuture<'_, Result<Published, BusError>>;

    /// Joins a client to live delivery with no gap and no duplicate at the
    /// seam: what history holds after its cursor is read and the client
    /// attached atomically with respect to publishing. On an error
    /// nothing stays attached (as if the client had left).
    fn open(&self, open: Open) -> BoxFuture<'_, Result<Opened, OpenError>>;

    /// Detaches a connection and returns the position it has been sent
    /// everything up to, atomically with respect to publishing.
    fn release(&self, conn: &Conn) -> Position;

    /// Detaches a connection without a position (no lock on publishing): for
    /// a poll answered with messages, whose last cursor is the position.
    fn detach(&self, conn: &Conn);

    /// Drops history and idempotency keys past their age.
    fn sweep(&self, now_ms: u64);

    /// Whether the broker is reachable (`/readyz`).
    fn is_ready(&self) -> bool;

    /// The current history epoch and the last sequence number issued (or,
    /// on a node of several, delivered here), per shard.
    fn position(&self) -> Position;

    /// Shards of the message sequence: positions in a cursor.
    fn shards(&self) -> usize {
        1
    }

    /// Whether this node already receives `channel`'s messages. A broker
    /// that hears every stream (memory, one Redis) always does; a Redis
    /// Cluster node only hears the streams it subscribed to.
    fn hears(&self, _channel: &Channel) -> bool {
        true
    }

    /// Makes this node receive `channel`'s messages, ready once messages
    /// published from then on reach it, so that a connection already open
    /// (a WebSocket `subscribe`) can join with no gap. `false`: it could
    /// not (the connections that join are told they may miss messages).
    fn listen<'a>(&'a self, _channel: &'a Channel) -> BoxFuture<'a, bool> {
        Box::pin(std::future::ready(true))
    }

    /// How many connections `user` has, over every node (`GET /users/<uid>`).
    fn presence(&self, user: &UserId) -> BoxFuture<'_, Result<usize, BusError>>;

    /// Who is in `channel`, over every node (`GET /channels/<name>`),
    /// listing at most `max_listed` users.
    fn channel_presence<'a>(
        &'a self,
        channel: &'a Channel,
        max_listed: usize,
    ) -> BoxFuture<'a, Result<ChannelMembers, BusError>>;
}
