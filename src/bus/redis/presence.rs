//! Cluster-wide presence: each node keeps a hash of its connection counts
//! per user, and one per channel it has connections in (user -> count),
//! refreshed from its registry on every heartbeat and expiring with the
//! node, so a crashed node's counts vanish after the presence ttl.
//!
//! The keys live in *places*: one on a single Redis (the key prefix), one
//! per shard on a Redis Cluster (the shard's hash tag), a user's and a
//! channel's counts in their own stream's shard. Each place has its own
//! set of live nodes, so a count is one script on one slot, and presence
//! traffic spreads over the masters as the streams do.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use redis::aio::ConnectionLike;
use tokio::sync::mpsc;
use tracing::warn;

use crate::bus::{BusError, ChannelMembers};
use crate::protocol::{Channel, UserId};
use crate::registry::{MembershipChange, Registry};

/// Whose counts: a user's, or a channel's (each kept in one place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner<'a> {
    /// A user's connections.
    User(&'a str),
    /// A channel's members.
    Channel(&'a str),
}

/// Which place an owner's counts are kept in (an index into `places`).
pub(crate) type PlaceOf = Box<dyn Fn(Owner<'_>) -> usize + Send + Sync>;

/// What the presence task and queries need: a connection to Redis (one
/// Redis, or a cluster), where the keys live, the registry to snapshot,
/// and how long a node's counts outlive it.
pub(crate) struct Presence<C> {
    /// Where the counts are kept.
    pub conn: C,
    /// The prefix of each place's keys (at least one). On a cluster each
    /// is a hash tag, so a place's scripts stay on one slot.
    pub places: Vec<String>,
    /// Which place an owner's counts are in; always below `places.len()`.
    pub place_of: PlaceOf,
    /// This node's connections.
    pub registry: Arc<Registry>,
    /// How long a node's counts outlive its last heartbeat, in ms.
    pub ttl_ms: u64,
}

impl<C> fmt::Debug for Presence<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Presence")
            .field("places", &self.places)
            .field("ttl_ms", &self.ttl_ms)
            .finish_non_exhaustive()
    }
}

impl<C> Presence<C> {
    /// The index of `owner`'s place, kept below `places.len()` whatever
    /// `place_of` answers (`places` is never empty).
    fn index(&self, owner: Owner<'_>) -> usize {
        (self.place_of)(owner).min(self.places.len().saturating_sub(1))
    }

    /// The prefix of `owner`'s place.
    fn place(&self, owner: Owner<'_>) -> &str {
        &self.places[self.index(owner)]
    }
}

/// The names of one node's keys in one place (`P` the place's prefix).
struct NodeKeys {
    /// `P:presence:<node>`: the node's user -> count hash.
    users: String,
    /// `P:nodes`: live nodes by last heartbeat.
    nodes: String,
    /// `P:cp:<node>:`, followed by a channel's name: that channel's hash.
    channel_prefix: String,
    /// `P:cpn:<node>`: the channels the node has hashes for.
    channels: String,
}

impl NodeKeys {
    fn new(place: &str, node: &str) -> Self {
        Self {
            users: format!("{place}:presence:{node}"),
            nodes: nodes_key(place),
            channel_prefix: format!("{place}:cp:{node}:"),
            channels: format!("{place}:cpn:{node}"),
        }
    }
}

/// Replaces the node's hash with a snapshot and records its heartbeat.
/// KEYS[1] the node's hash, KEYS[2] the nodes zset; ARGV[1] node, ARGV[2]
/// ttl ms, then user/count pairs.
const HEARTBEAT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DEL', KEYS[1])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]))
return 1
";

/// Adds a delta to one user's count on this node.
/// KEYS[1] the node's hash; ARGV[1] user, ARGV[2] delta, ARGV[3] ttl ms.
const CHANGE: &str = r"
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
if n <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return n
";

/// Sums a user's counts over live nodes.
/// KEYS[1] the nodes zset; ARGV[1] prefix, ARGV[2] user, ARGV[3] ttl ms.
const COUNT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local total = 0
for _, node in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[3]), '+inf')) do
  total = total + tonumber(redis.call('HGET', ARGV[1] .. ':presence:' .. node, ARGV[2]) or '0')
end
return total
";

/// Adds a delta to one user's count in one channel on this node, and
/// records the channel in the node's set (so a heartbeat can clear it).
/// KEYS[1] the channel's hash on this node, KEYS[2] the node's channel set;
/// ARGV[1] user, ARGV[2] delta, ARGV[3] ttl ms, ARGV[4] channel.
const CHANNEL_CHANGE: &str = r"
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
if n <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return n
";

/// Replaces the node's channel hashes with a snapshot.
/// KEYS[1] the node's channel set; ARGV[1] the hash prefix (`P:cp:<node>:`),
/// ARGV[2] ttl ms, then per channel: name, number of users N, N user/count
/// pairs.
const CHANNELS_BEAT: &str = r"
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  redis.call('DEL', ARGV[1] .. name)
end
redis.call('DEL', KEYS[1])
local i = 3
while i <= #ARGV do
  local name, n = ARGV[i], tonumber(ARGV[i + 1])
  local hash = ARGV[1] .. name
  for j = 0, n - 1 do
    redis.call('HSET', hash, ARGV[i + 2 + 2 * j], ARGV[i + 3 + 2 * j])
  end
  redis.call('PEXPIRE', hash, ARGV[2])
  redis.call('SADD', KEYS[1], name)
  i = i + 2 + 2 * n
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// A channel's user/count pairs over live nodes, flattened.
/// KEYS[1] the nodes zset; ARGV[1] prefix, ARGV[2] channel, ARGV[3] ttl ms.
const CHANNEL_MEMBERS: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, node in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[3]), '+inf')) do
  local pairs = redis.call('HGETALL', ARGV[1] .. ':cp:' .. node .. ':' .. ARGV[2])
  for j = 1, #pairs do out[#out + 1] = pairs[j] end
end
return out
";

fn nodes_key(place: &str) -> String {
    format!("{place}:nodes")
}

/// The node's presence task: applies changes as they come, and re-sends
/// the whole snapshot every third of the ttl (which also heals counts a
/// Redis outage made stale), one snapshot per place; every place lists
/// the node as live, so a count there finds the node's first user at once.
pub(crate) async fn run<C: ConnectionLike + Clone + Send + Sync>(
    shared: Arc<Presence<C>>,
    mut changes: mpsc::UnboundedReceiver<(UserId, i64)>,
    mut memberships: mpsc::UnboundedReceiver<MembershipChange>,
    ttl: Duration,
) {
    let node = format!("{:016x}", rand::random::<u64>());
    let keys: Vec<NodeKeys> = shared
        .places
        .iter()
        .map(|place| NodeKeys::new(place, &node))
        .collect();
    let keys_of = |owner: Owner<'_>| &keys[shared.index(owner)];
    let ttl_ms = crate::clamp::millis(ttl);
    let heartbeat = Script::new(HEARTBEAT);
    let change = Script::new(CHANGE);
    let channel_change = Script::new(CHANNEL_CHANGE);
    let channels_beat = Script::new(CHANNELS_BEAT);
    let mut beat = tokio::time::interval(ttl / 3);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut conn = shared.conn.clone();
        let result = tokio::select! {
            next = changes.recv() => {
                let Some((user, delta)) = next else { return };
                change
                    .key(&keys_of(Owner::User(user.as_str())).users)
                    .arg(user.as_str())
                    .arg(delta)
                    .arg(ttl_ms)
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .map(drop)
            }
            next = memberships.recv() => {
                let Some((channel, user, delta)) = next else { return };
                let keys = keys_of(Owner::Channel(channel.as_str()));
                channel_change
                    .key(format!("{}{channel}", keys.channel_prefix))
                    .key(&keys.channels)
                    .arg(user.as_str())
                    .arg(delta)
                    .arg(ttl_ms)
                    .arg(channel.as_str())
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .map(drop)
            }
            _ = beat.tick() => {
                // Changes queued so far are in the snapshot.
                while changes.try_recv().is_ok() {}
                while memberships.try_recv().is_ok() {}
                beat_everywhere(&shared, &mut conn, &node, &keys, ttl_ms, &heartbeat, &channels_beat).await
            }
        };
        if let Err(err) = result {
            warn!(error = %err, "redis: presence update failed");
        }
    }
}

/// One heartbeat: each place's snapshot of the node's channels and users,
/// one script each.
async fn beat_everywhere<C: ConnectionLike + Clone + Send + Sync>(
    shared: &Presence<C>,
    conn: &mut C,
    node: &str,
    keys: &[NodeKeys],
    ttl_ms: u64,
    heartbeat: &Script,
    channels_beat: &Script,
) -> redis::RedisResult<()> {
    let mut channels: Vec<Vec<_>> = keys.iter().map(|_| Vec::new()).collect();
    for (channel, users) in shared.registry.channel_snapshot() {
        channels[shared.index(Owner::Channel(channel.as_str()))].push((channel, users));
    }
    let mut users: Vec<Vec<_>> = keys.iter().map(|_| Vec::new()).collect();
    for (user, count) in shared.registry.connection_counts() {
        users[shared.index(Owner::User(user.as_str()))].push((user, count));
    }
    let mut result = Ok(());
    for ((keys, channels), users) in keys.iter().zip(channels).zip(users) {
        let mut invocation = channels_beat.prepare_invoke();
        invocation
            .key(&keys.channels)
            .arg(&keys.channel_prefix)
            .arg(ttl_ms);
        for (channel, users) in channels {
            invocation.arg(channel.as_str()).arg(users.len());
            for (user, count) in users {
                invocation.arg(user.as_str()).arg(count);
            }
        }
        if let Err(err) = invocation.invoke_async::<i64>(conn).await {
            warn!(error = %err, "redis: channel presence update failed");
        }
        let mut invocation = heartbeat.prepare_invoke();
        invocation
            .key(&keys.users)
            .key(&keys.nodes)
            .arg(node)
            .arg(ttl_ms);
        for (user, count) in users {
            invocation.arg(user.as_str()).arg(count);
        }
        if let Err(err) = invocation.invoke_async::<i64>(conn).await {
            result = Err(err);
        }
    }
    result
}

/// Who is in `channel` over every live node.
pub(crate) async fn channel_members<C: ConnectionLike + Clone + Send + Sync>(
    shared: &Presence<C>,
    channel: &Channel,
    max_listed: usize,
) -> Result<ChannelMembers, BusError> {
    let mut conn = shared.conn.clone();
    let place = shared.place(Owner::Channel(channel.as_str()));
    let pairs: Vec<(String, u64)> = Script::new(CHANNEL_MEMBERS)
        .key(nodes_key(place))
        .arg(place)
        .arg(channel.as_str())
        .arg(shared.ttl_ms)
        .invoke_async(&mut conn)
        .await
        .map_err(|err| BusError::Unavailable(err.to_string()))?;
    let subscribers = pairs.iter().map(|(_, n)| *n as usize).sum();
    let mut users: Vec<UserId> = pairs
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .filter_map(|(user, _)| UserId::parse(&user).ok())
        .collect();
    users.sort_unstable();
    users.dedup();
    Ok(ChannelMembers::new(subscribers, users, max_listed))
}

/// A user's connections over every live node.
pub(crate) async fn count<C: ConnectionLike + Clone + Send + Sync>(
    shared: &Presence<C>,
    user: &UserId,
) -> Result<usize, BusError> {
    let mut conn = shared.conn.clone();
    let place = shared.place(Owner::User(user.as_str()));
    Script::new(COUNT)
        .key(nodes_key(place))
        .arg(place)
        .arg(user.as_str())
        .arg(shared.ttl_ms)
        .invoke_async::<u64>(&mut conn)
        .await
        .map(|n| n as usize)
        .map_err(|err| BusError::Unavailable(err.to_string()))
}
