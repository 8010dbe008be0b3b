//! Which streams this node hears: a sharded pub/sub subscription per stream
//! some local connection is in, taken before the first connection joins and
//! given up a while after the last one leaves.
//!
//! The while (`LINGER`) keeps a user who long-polls, or a page that
//! reloads, from costing a SUBSCRIBE and an UNSUBSCRIBE per request. A
//! subscription that fails (the cluster unreachable, a slot moving) is
//! retried by the sweep for as long as someone needs the stream; the bus
//! then tells that stream's connections they may have missed messages.
//!
//! Ordering: a subscribe and the unsubscribe of the same stream must reach
//! Redis in the order they were decided. Subscribes run under a shared
//! gate and the sweep's unsubscribes under the exclusive one, and an
//! entry leaves the map only under the exclusive gate, so a stream given
//! up is resubscribed only after its unsubscribe was answered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use parking_lot::Mutex;
use redis::cluster_async::ClusterConnection;
use tokio::sync::{OnceCell, RwLock};
use tokio::time::Instant;
use tracing::warn;

/// How long a stream nobody here is in stays subscribed.
pub(crate) const LINGER: Duration = Duration::from_secs(30);

/// Between rounds of a resubscription that failed for some streams.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(250);

/// One stream's subscription.
#[derive(Debug, Default)]
struct Entry {
    /// Local connections in the stream.
    refs: i64,
    /// Since when nobody has been in it (or since it was last asked for).
    idle_since: Option<Instant>,
    /// Set once the subscription was confirmed.
    subscribed: Arc<OnceCell<()>>,
}

/// The node's stream subscriptions.
pub(crate) struct Interest {
    conn: ClusterConnection,
    entries: Mutex<HashMap<String, Entry>>,
    gate: RwLock<()>,
}

impl std::fmt::Debug for Interest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interest")
            .field("streams", &self.len())
            .finish_non_exhaustive()
    }
}

impl Interest {
    /// No subscriptions yet, made over `conn` (a cluster connection with a
    /// push sender, so messages arrive there).
    pub(crate) fn new(conn: ClusterConnection) -> Self {
        Self {
            conn,
            entries: Mutex::new(HashMap::new()),
            gate: RwLock::new(()),
        }
    }

    /// Subscribes to `channel` unless it is already, and waits for the
    /// confirmation: messages published after this returns `true` reach
    /// the node. `false`: the subscription failed (logged); the sweep
    /// retries it while someone is in the stream.
    pub(crate) async fn ensure(&self, channel: &str) -> bool {
        let _shared = self.gate.read().await;
        let cell = {
            let mut entries = self.entries.lock();
            let entry = entries.entry(channel.to_owned()).or_default();
            if entry.refs <= 0 {
                entry.idle_since = Some(Instant::now());
            }
            Arc::clone(&entry.subscribed)
        };
        self.subscribe(&cell, channel).await
    }

    async fn subscribe(&self, cell: &OnceCell<()>, channel: &str) -> bool {
        let mut conn = self.conn.clone();
        match cell
            .get_or_try_init(|| async move { conn.ssubscribe(channel).await })
            .await
        {
            Ok(()) => true,
            Err(err) => {
                warn!(error = %err, channel, "redis cluster: subscribe failed; retrying while needed");
                false
            }
        }
    }

    /// `delta` local connections joined (`+`) or left (`-`) `channel`.
    pub(crate) fn add(&self, channel: &str, delta: i64) {
        let mut entries = self.entries.lock();
        let entry = entries.entry(channel.to_owned()).or_default();
        entry.refs += delta;
        entry.idle_since = (entry.refs <= 0).then(Instant::now);
    }

    /// Gives up streams nobody here has been in for `linger`, and retries
    /// failed subscriptions of streams someone is in. Returns the streams
    /// subscribed again after a failure (their connections may have
    /// missed messages).
    pub(crate) async fn sweep(&self, linger: Duration) -> Vec<String> {
        {
            let _exclusive = self.gate.write().await;
            let idle: Vec<(String, bool)> = {
                let mut entries = self.entries.lock();
                let now = Instant::now();
                let idle: Vec<String> = entries
                    .iter()
                    .filter(|(_, e)| {
                        e.refs <= 0 && e.idle_since.is_some_and(|at| now - at >= linger)
                    })
                    .map(|(name, _)| name.clone())
                    .collect();
                idle.into_iter()
                    .filter_map(|name| {
                        let entry = entries.remove(&name)?;
                        Some((name, entry.subscribed.initialized()))
                    })
                    .collect()
            };
            let unsubscribes = idle
                .iter()
                .filter(|(_, subscribed)| *subscribed)
                .map(|(name, _)| {
                    let mut conn = self.conn.clone();
                    async move {
                        if let Err(err) = conn.sunsubscribe(name.as_str()).await {
                            warn!(error = %err, channel = %name, "redis cluster: unsubscribe failed");
                        }
                    }
                });
            join_all(unsubscribes).await;
        }
        let failed: Vec<(String, Arc<OnceCell<()>>)> = self
            .entries
            .lock()
            .iter()
            .filter(|(_, e)| e.refs > 0 && !e.subscribed.initialized())
            .map(|(name, e)| (name.clone(), Arc::clone(&e.subscribed)))
            .collect();
        let _shared = self.gate.read().await;
        let mut again = Vec::new();
        for (name, cell) in failed {
            if self.subscribe(&cell, &name).await {
                again.push(name);
            }
        }
        again
    }

    /// Subscribes again to every stream subscribed (after a connection to
    /// a master was lost or a slot moved: SSUBSCRIBE goes to whichever
    /// master holds the slot now; on a connection that has it already, it
    /// changes nothing). Failures are tried again until `deadline`; a
    /// stream still failing then counts as not subscribed, so the sweep
    /// keeps trying and its connections are told they may have missed
    /// messages. Returns the streams given up on.
    pub(crate) async fn resubscribe_all(&self, deadline: Instant) -> Vec<String> {
        let _shared = self.gate.read().await;
        let mut left = self.subscribed();
        loop {
            let tries = left.iter().map(|name| {
                let mut conn = self.conn.clone();
                async move {
                    match conn.ssubscribe(name.as_str()).await {
                        Ok(()) => None,
                        Err(err) => {
                            warn!(error = %err, channel = %name, "redis cluster: resubscribe failed");
                            Some(name.clone())
                        }
                    }
                }
            });
            left = join_all(tries).await.into_iter().flatten().collect();
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
        }
        let mut entries = self.entries.lock();
        for name in &left {
            if let Some(entry) = entries.get_mut(name) {
                entry.subscribed = Arc::default();
            }
        }
        left
    }

    /// Makes the subscription connections learn where `keys` live now: a
    /// read of each sent over them, answered MOVED by a master that lost
    /// the slot (or a replica that took its place), makes the client read
    /// the cluster's slots again, so later subscriptions go to the new
    /// master. Without it they would go where the slot was, and a demoted
    /// master takes a subscription but delivers nothing to it. Sent right
    /// after the slot's own unsubscribes arrived, when no other push is
    /// expected on those connections.
    pub(crate) async fn learn_routes(&self, keys: &[String]) {
        let reads = keys.iter().map(|key| {
            let mut conn = self.conn.clone();
            async move {
                let _ = redis::cmd("EXISTS")
                    .arg(key)
                    .query_async::<i64>(&mut conn)
                    .await;
            }
        });
        join_all(reads).await;
    }

    /// The channels subscribed now.
    pub(crate) fn subscribed(&self) -> Vec<String> {
        self.entries
            .lock()
            .iter()
            .filter(|(_, e)| e.subscribed.initialized())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether the subscription to `channel` was confirmed.
    pub(crate) fn is_subscribed(&self, channel: &str) -> bool {
        self.entries
            .lock()
            .get(channel)
            .is_some_and(|e| e.subscribed.initialized())
    }

    /// Streams subscribed (or being subscribed) now.
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().len()
    }
}
