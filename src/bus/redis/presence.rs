//! Cluster-wide presence: each node keeps a hash of its connection counts
//! per user, refreshed from its registry on every heartbeat and expiring
//! with the node, so a crashed node's counts vanish after the presence ttl.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use tokio::sync::mpsc;
use tracing::warn;

use super::Shared;
use crate::bus::BusError;
use crate::protocol::UserId;

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

fn nodes_key(shared: &Shared) -> String {
    format!("{}:nodes", shared.keys.prefix)
}

/// The node's presence task: applies changes as they come, and re-sends
/// the whole snapshot every third of the ttl (which also heals counts a
/// Redis outage made stale).
pub(super) async fn run(
    shared: Arc<Shared>,
    mut changes: mpsc::UnboundedReceiver<(UserId, i64)>,
    ttl: Duration,
) {
    let node = format!("{:016x}", rand::random::<u64>());
    let hash = format!("{}:presence:{node}", shared.keys.prefix);
    let ttl_ms = crate::clamp::millis(ttl);
    let heartbeat = Script::new(HEARTBEAT);
    let change = Script::new(CHANGE);
    let mut beat = tokio::time::interval(ttl / 3);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut conn = shared.conn.clone();
        let result = tokio::select! {
            next = changes.recv() => {
                let Some((user, delta)) = next else { return };
                change
                    .key(&hash)
                    .arg(user.as_str())
                    .arg(delta)
                    .arg(ttl_ms)
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .map(drop)
            }
            _ = beat.tick() => {
                // Changes queued so far are in the snapshot.
                while changes.try_recv().is_ok() {}
                let mut invocation = heartbeat.prepare_invoke();
                invocation.key(&hash).key(nodes_key(&shared)).arg(&node).arg(ttl_ms);
                for (user, count) in shared.registry.connection_counts() {
                    invocation.arg(user.as_str()).arg(count);
                }
                invocation.invoke_async::<i64>(&mut conn).await.map(drop)
            }
        };
        if let Err(err) = result {
            warn!(error = %err, "redis: presence update failed");
        }
    }
}

/// A user's connections over every live node.
pub(super) async fn count(shared: &Shared, user: &UserId) -> Result<usize, BusError> {
    let mut conn = shared.conn.clone();
    Script::new(COUNT)
        .key(nodes_key(shared))
        .arg(&shared.keys.prefix)
        .arg(user.as_str())
        .arg(shared.presence_ttl_ms)
        .invoke_async::<u64>(&mut conn)
        .await
        .map(|n| n as usize)
        .map_err(|err| BusError::Unavailable(err.to_string()))
}
