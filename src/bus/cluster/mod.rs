//! The Redis Cluster bus: streams sharded over the cluster's masters, and
//! each node hearing only the streams its connections are in.
//!
//! The sequence is split into shards (`shards`): each stream belongs to
//! one, and a shard's keys and sharded pub/sub channels share one hash
//! tag, so a publish is one script (`publish.lua`) on the master of that
//! slot, and no key is touched by every push. Each stream has its own
//! sharded channel; a node SSUBSCRIBEs to a stream before its first local
//! connection is attached (`interest`), so a personal or channel message
//! reaches only nodes with someone for it.
//!
//! Cursors carry one position per shard. A node's *position* is, per
//! shard, the last message it delivered (its pushes from one shard come in
//! order, on one connection to that shard's master); every frame it
//! delivers carries the position at that moment, so one encoding per
//! message serves every local recipient.
//!
//! Resume: subscribe, attach, then read each shard's history after the
//! cursor (`resume.lua`); the same script SPUBLISHes a *barrier* to the
//! node's own channel in that shard, which arrives after every message
//! the read could have covered. Once every barrier went through the
//! fan-out, the `recover` frame and history are queued ahead of the live
//! frames that came meanwhile, copies of what history carried are dropped
//! and the others' cursors raised past it. A barrier sent while the node's
//! subscription in the shard was gone (a failover) is sent again once the
//! shard is caught up (`barrier`).
//!
//! Faults: a lost connection to a master, a slot moved away under a
//! subscription, or a probe that did not come back (`probe`) pauses the
//! shards concerned; once their masters answer, every stream is subscribed
//! again and each paused shard is caught up from history, in order, each
//! message once.

mod barrier;
mod batch;
mod catch_up;
mod commit;
mod interest;
mod probe;
pub(crate) mod shards;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, join_all};
use parking_lot::Mutex;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Script, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use self::batch::{Recipient, ShardMessage, ShardPush};
use self::catch_up::{History, Pending, Step};
use self::commit::Committer;
use self::interest::{Interest, LINGER};
use self::probe::{Due, Probes};
use self::shards::{Shards, StreamName};
use super::deadline::{self, BrokerClock};
use super::fanout::{Batch, Fanout};
use super::redis::BusMessage;
use super::redis::presence::{self, Owner, Presence};
use super::redis::reply::{self, ResumeReply};
use super::resume::Resume;
use super::{
    Bus, BusError, ChannelMembers, Open, OpenError, Opened, Publish, Published, PushTarget,
    Unopened,
};
use crate::config::BrokerConfig;
use crate::history::{ConnCursor, Cursor, NodePosition, Position};
use crate::metrics::Counters;
use crate::protocol::frame::{Frame, Stream, message_parts};
use crate::protocol::{Channel, Transport, UserId};
use crate::registry::conn::suffix_of;
use crate::registry::{Conn, Outgoing, Registry};

/// How long a recovery waits for every shard's master to answer again
/// (a failover takes a few node timeouts).
const RECOVERY_LIMIT: Duration = Duration::from_secs(60);

/// How long a catch-up after a lost subscription waits for its barrier
/// (sent right after the history read, it comes back in milliseconds unless
/// the machine or Redis is overloaded). Past it the history read is
/// delivered, what arrived after it is held, and the shard is subscribed
/// again and caught up once more from where the history ended.
const CATCH_UP_BARRIER_LIMIT: Duration = Duration::from_secs(3);

/// How a shard's catch-up went.
#[derive(Debug, Clone, Copy)]
struct CaughtUp {
    /// Every message missed was delivered (else the shard's connections
    /// are told they may have missed some).
    whole: bool,
    /// The catch-up's barrier came back: the shard's subscriptions
    /// deliver.
    confirmed: bool,
}

/// What the node and its tasks share.
struct Shared {
    conn: ClusterConnection,
    shards: Shards,
    /// This node's name in barrier channels.
    node: String,
    registry: Arc<Registry>,
    counters: Counters,
    history_size: usize,
    /// Per shard, the last message delivered here (or passed by a
    /// barrier). Locked while a message is handed to the fan-out, so the
    /// fan-out's order is the order positions moved in. Its text is kept
    /// beside it: every message handed over carries it.
    position: Mutex<NodePosition>,
    fanout: Fanout,
    interest: Interest,
    /// Barriers sent and not yet arrived: token -> who waits.
    barriers: Mutex<HashMap<u64, oneshot::Sender<()>>>,
    next_barrier: AtomicU64,
    /// Per shard being caught up after a lost subscription: what arrived
    /// meanwhile, delivered after the missed messages. Locked after
    /// `position`.
    paused: Mutex<Vec<Option<Vec<Pending>>>>,
    /// Per shard, how many catch-ups proved its subscriptions deliver: a
    /// resume waiting for its barrier sends it again when this moves
    /// (`barrier`).
    caught_up: Vec<watch::Sender<u64>>,
    /// Each shard's probe of its own subscriptions.
    probes: Mutex<Probes>,
    /// A recovery after a lost connection is under way.
    recovering: AtomicBool,
    /// Another loss came during it: run it again.
    lost_again: AtomicBool,
    ready: AtomicBool,
    /// Each shard's publisher (group commit).
    committer: Committer,
    resume: Script,
    presence: mpsc::UnboundedSender<(UserId, i64)>,
    presence_keys: Arc<Presence<ClusterConnection>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterShared")
            .field("node", &self.node)
            .field("shards", &self.shards.count())
            .field("position", &*self.position.lock())
            .field("interest", &self.interest)
            .finish_non_exhaustive()
    }
}

/// A [`Bus`] over a Redis Cluster.
#[derive(Debug)]
pub(crate) struct ClusterBus {
    shared: Arc<Shared>,
    /// The node's tasks, held for the drop: it aborts them.
    _tasks: JoinSet<()>,
}

impl ClusterBus {
    /// Connects to the cluster (retrying for up to `start_wait_secs`),
    /// subscribes to the broadcast stream and the node's barrier channels,
    /// and starts the node's tasks; messages reach `registry`'s
    /// connections through `fanout`.
    pub(crate) async fn connect(
        config: &BrokerConfig,
        registry: Arc<Registry>,
        counters: Counters,
        fanout: Fanout,
        history_size: usize,
        ttl_ms: u64,
    ) -> Result<Self, BusError> {
        let unavailable = |err: redis::RedisError| BusError::Unavailable(err.to_string());
        let seeds = if config.urls.is_empty() {
            vec![config.url.clone()]
        } else {
            config.urls.clone()
        };
        // Two connections per master: one for subscriptions and one for
        // commands. A master sends an SUNSUBSCRIBE of its own when a slot
        // leaves it (a failover, a reshard); the client takes such a push
        // for the reply to the oldest request in flight on its connection,
        // so on a shared connection every later reply would go to the
        // wrong command. Only (un)subscribes are in flight on the first.
        let (push_tx, push_rx) = mpsc::unbounded_channel::<PushInfo>();
        let subscriber = ClusterClientBuilder::new(seeds.clone())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(push_tx)
            .connection_timeout(config.timeout())
            .response_timeout(config.timeout())
            .build()
            .map_err(unavailable)?;
        let commands = ClusterClientBuilder::new(seeds)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(config.timeout())
            .response_timeout(config.timeout())
            .build()
            .map_err(unavailable)?;
        let deadline = crate::clamp::from_now(Duration::from_secs(config.start_wait_secs));
        let subscriptions = first_connection(&subscriber, deadline)
            .await
            .map_err(unavailable)?;
        let conn = first_connection(&commands, deadline)
            .await
            .map_err(unavailable)?;
        let shards = Shards::new(&config.key_prefix, config.shards);
        let mut positions = Vec::with_capacity(shards.count());
        let mut clocks = Vec::with_capacity(shards.count());
        for shard in 0..shards.count() {
            let (position, clock) =
                shard_position(&mut conn.clone(), &shards, shard, config.timeout())
                    .await
                    .map_err(unavailable)?;
            positions.push(position);
            clocks.push(clock);
        }
        let (presence_tx, presence_rx) = mpsc::unbounded_channel();
        let presence_keys = Arc::new(Presence {
            conn: conn.clone(),
            places: (0..shards.count())
                .map(|shard| shards.tag(shard).to_owned())
                .collect(),
            place_of: {
                let shards = shards.clone();
                Box::new(move |owner| {
                    shards.of(match owner {
                        Owner::User(user) => StreamName::User(user),
                        Owner::Channel(channel) => StreamName::Channel(channel),
                    })
                })
            },
            registry: Arc::clone(&registry),
            ttl_ms: crate::clamp::millis(config.presence_ttl()),
        });
        let mut tasks = JoinSet::new();
        let committer = Committer::start(
            &conn,
            &Script::new(concat!(
                include_str!("../redis/history.lua"),
                include_str!("publish.lua")
            )),
            &shards,
            clocks,
            history_size,
            ttl_ms,
            &mut tasks,
        );
        let shared = Arc::new(Shared {
            interest: Interest::new(subscriptions),
            conn,
            shards,
            node: format!("{:016x}", rand::random::<u64>()),
            registry,
            counters,
            history_size,
            position: Mutex::new(NodePosition::new(Position::new(positions))),
            fanout,
            barriers: Mutex::new(HashMap::new()),
            next_barrier: AtomicU64::new(1),
            paused: Mutex::new(vec![None; config.shards.max(1)]),
            caught_up: (0..config.shards.max(1))
                .map(|_| watch::Sender::new(0))
                .collect(),
            probes: Mutex::new(Probes::new(
                config.shards.max(1),
                tokio::time::Instant::now(),
            )),
            recovering: AtomicBool::new(false),
            lost_again: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            committer,
            resume: Script::new(include_str!("../redis/resume.lua")),
            presence: presence_tx,
            presence_keys,
        });
        // The broadcast stream is everyone's: subscribed for good.
        let broadcast = shared.shards.bus(StreamName::Broadcast);
        shared.interest.add(&broadcast, 1);
        let mut subscribed = shared.interest.ensure(&broadcast).await;
        for shard in 0..shared.shards.count() {
            let sync = shared.shards.sync(shard, &shared.node);
            shared.interest.add(&sync, 1);
            subscribed &= shared.interest.ensure(&sync).await;
        }
        if !subscribed {
            return Err(BusError::Unavailable(
                "could not subscribe to the cluster".into(),
            ));
        }
        shared.ready.store(true, Ordering::Relaxed);
        let (memberships_tx, memberships_rx) = mpsc::unbounded_channel();
        shared.registry.watch_channels(memberships_tx);
        let (interest_tx, mut interest_rx) = mpsc::unbounded_channel();
        shared.registry.watch_channels(interest_tx);
        let follower = Arc::clone(&shared);
        tasks.spawn(async move {
            while let Some((channel, _, delta)) = interest_rx.recv().await {
                let name = follower.shards.bus(StreamName::Channel(channel.as_str()));
                follower.interest.add(&name, delta);
                // A connection opened in the channel, or joined by a
                // `subscribe` frame, waited for the subscription (`open`,
                // `listen`). If that failed or timed out, it is told, once
                // subscribed, that it may have missed what came meanwhile.
                if delta > 0 && !follower.interest.is_subscribed(&name) {
                    let follower = Arc::clone(&follower);
                    tokio::spawn(async move {
                        if follower.interest.ensure(&name).await {
                            follower.tell_maybe_missed(Some(&name));
                        }
                    });
                }
            }
        });
        tasks.spawn(presence::run(
            Arc::clone(&shared.presence_keys),
            presence_rx,
            memberships_rx,
            config.presence_ttl(),
        ));
        tasks.spawn(receive(Arc::clone(&shared), push_rx));
        tasks.spawn(sweep(Arc::clone(&shared)));
        info!(
            shards = shared.shards.count(),
            node = %shared.node,
            "redis cluster: connected and subscribed"
        );
        Ok(Self {
            shared,
            _tasks: tasks,
        })
    }
}

/// A connection of `client`, retried every half second until `deadline`.
async fn first_connection(
    client: &redis::cluster::ClusterClient,
    deadline: tokio::time::Instant,
) -> redis::RedisResult<ClusterConnection> {
    loop {
        match client.get_async_connection().await {
            Ok(conn) => return Ok(conn),
            Err(err) if tokio::time::Instant::now() < deadline => {
                warn!(error = %err, "redis cluster unreachable; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// A shard's epoch (created if absent) and last sequence number, and its
/// master's clock, learned for publishes the gateway waits `timeout` for.
async fn shard_position(
    conn: &mut ClusterConnection,
    shards: &Shards,
    shard: usize,
    timeout: Duration,
) -> redis::RedisResult<(Cursor, BrokerClock)> {
    let fresh = format!("{:016x}", rand::random::<u64>());
    let sent_ms = deadline::now_ms();
    let (epoch, seq, secs, micros) = Script::new(
        "redis.call('SET', KEYS[1], ARGV[1], 'NX') local t = redis.call('TIME') \
         return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]) or '0', t[1], t[2]}",
    )
    .key(shards.epoch(shard))
    .key(shards.seq(shard))
    .arg(&fresh)
    .invoke_async::<(String, String, i64, i64)>(conn)
    .await?;
    let clock = BrokerClock::from_time(timeout, secs, micros, sent_ms);
    let position = format!("{epoch}-{seq}")
        .parse()
        .unwrap_or(Cursor::new(0, 0));
    Ok((position, clock))
}

/// Takes what the cluster pushes: messages of the streams subscribed,
/// barriers, and news of lost connections. What has arrived is taken in
/// one go (up to [`RECEIVE_BATCH`]), and each run of messages in it is
/// handed to the fan-out as one job (`on_messages`).
async fn receive(shared: Arc<Shared>, mut pushes: mpsc::UnboundedReceiver<PushInfo>) {
    let mut arrived = Vec::with_capacity(RECEIVE_BATCH);
    let mut messages = Vec::with_capacity(RECEIVE_BATCH);
    while pushes.recv_many(&mut arrived, RECEIVE_BATCH).await > 0 {
        for push in arrived.drain(..) {
            if push.kind == PushKind::SMessage {
                let mut data = push.data.into_iter();
                let (Some(channel), Some(payload)) = (data.next(), data.next()) else {
                    continue;
                };
                if let (Ok(channel), Ok(payload)) = (
                    redis::from_redis_value::<String>(channel),
                    redis::from_redis_value::<Vec<u8>>(payload),
                ) {
                    messages.push((channel, payload));
                }
                continue;
            }
            // What came before this news goes first.
            shared.on_messages(&mut messages);
            match push.kind {
                PushKind::Disconnection => {
                    // Messages published meanwhile did not reach this node:
                    // hold back delivery until they are read from history.
                    warn!(
                        "redis cluster: a connection to a master was lost; catching up once it answers"
                    );
                    metrics::counter!(crate::metrics::names::BUS_RECONNECTS_TOTAL).increment(1);
                    shared.ready.store(false, Ordering::Relaxed);
                    shared.pause(None);
                    tokio::spawn(Arc::clone(&shared).after_disconnection());
                }
                PushKind::SUnsubscribe => {
                    // The server ends sharded subscriptions of a slot that
                    // moved to another master (a reshard, a failover); ours
                    // still want the stream.
                    let wanted = push
                        .data
                        .first()
                        .and_then(|c| redis::from_redis_value::<String>(c.clone()).ok())
                        .filter(|channel| shared.interest.is_subscribed(channel))
                        .and_then(|channel| shared.shards.shard_of_channel(&channel));
                    if let Some(shard) = wanted {
                        metrics::counter!(crate::metrics::names::BUS_RECONNECTS_TOTAL).increment(1);
                        shared.pause(Some(shard));
                        tokio::spawn(Arc::clone(&shared).after_disconnection());
                    }
                }
                _ => {}
            }
        }
        shared.on_messages(&mut messages);
    }
}

/// Pushes from the cluster taken in one go by `receive`: a push to 100
/// users brings up to 100 messages at once, and the fan-out's lanes then
/// wake once for them rather than once each.
const RECEIVE_BATCH: usize = 256;

/// Who the messages of `stream` go to.
fn target_of(stream: StreamName<'_>) -> PushTarget {
    match stream {
        StreamName::Broadcast => PushTarget::Broadcast,
        StreamName::User(user) => {
            PushTarget::Users(UserId::parse(user).map(|u| vec![u]).unwrap_or_default())
        }
        StreamName::Channel(name) => {
            PushTarget::Channels(Channel::parse(name).map(|c| vec![c]).unwrap_or_default())
        }
    }
}

/// Every second: gives up streams nobody here is in any more, retries
/// failed subscriptions (telling their connections they may have missed
/// messages), probes the shards' subscriptions, and updates the
/// subscriptions gauge.
async fn sweep(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for channel in shared.interest.sweep(LINGER).await {
            shared.tell_maybe_missed(Some(&channel));
        }
        Arc::clone(&shared).probe().await;
        metrics::gauge!(crate::metrics::names::BUS_SUBSCRIPTIONS).set(shared.interest.len() as f64);
    }
}

impl Shared {
    /// Messages and barriers from subscribed channels, in arrival order
    /// (`messages` is left empty): under the position's lock, as one
    /// fan-out batch, cut only where a barrier's waiter must run after
    /// what came before it.
    fn on_messages(&self, messages: &mut Vec<(String, Vec<u8>)>) {
        if messages.is_empty() {
            return;
        }
        let mut position = self.position.lock();
        let mut batch = self.fanout.batch();
        let mut received = 0;
        for (channel, payload) in messages.drain(..) {
            received += u64::from(self.on_message(&mut position, &mut batch, &channel, &payload));
        }
        // The batch goes to the fan-out before the lock is let go, so the
        // fan-out's order stays the order positions moved in.
        drop(batch);
        drop(position);
        if received > 0 {
            metrics::counter!(crate::metrics::names::BUS_MESSAGES_RECEIVED_TOTAL)
                .increment(received);
        }
    }

    /// One message or barrier from a subscribed channel; says whether it
    /// was a stream's message (which the received counter counts).
    fn on_message(
        &self,
        position: &mut NodePosition,
        batch: &mut Batch<'_>,
        channel: &str,
        payload: &[u8],
    ) -> bool {
        let Some(shard) = self.shards.shard_of_channel(channel) else {
            return false;
        };
        if self.shards.stream_of_channel(channel).is_none() {
            self.on_barrier(position, batch, shard, payload);
            return false;
        }
        let Some(message) = BusMessage::parse(payload) else {
            warn!("redis cluster: malformed bus message");
            return true;
        };
        if let Some(pending) = self.paused.lock()[shard].as_mut() {
            pending.push(Pending::Message(
                message.cursor,
                message.cursor_text.to_owned(),
                message.target,
                Bytes::copy_from_slice(message.json),
            ));
            return true;
        }
        self.hand_over(
            position,
            batch,
            shard,
            message.cursor,
            message.cursor_text,
            message.target,
            message.json,
        );
        true
    }

    /// Moves the node's position in `shard` to the message at `at` and
    /// adds the message to `batch` with the position as its cursor (the
    /// position's lock held, so the fan-out's order is the order
    /// positions moved in).
    #[allow(clippy::too_many_arguments)]
    fn hand_over(
        &self,
        position: &mut NodePosition,
        batch: &mut Batch<'_>,
        shard: usize,
        at: Cursor,
        at_text: &str,
        target: PushTarget,
        json: &[u8],
    ) {
        position.advance(shard, at);
        let frame =
            Frame::shard_message_with_cursor(shard as u16, at.seq, at_text, json, position.text());
        let Some(frame) = frame else {
            warn!("redis cluster: bus message is not a message frame");
            return;
        };
        batch.deliver(frame, target);
    }

    /// A barrier (`<token>\n<epoch>-<seq>`, or `<token>\n` sent again by
    /// a resume): every message of `shard` up to that position has been
    /// handed to the fan-out. Or the node's probe of the shard, back.
    fn on_barrier(
        &self,
        position: &mut NodePosition,
        batch: &mut Batch<'_>,
        shard: usize,
        payload: &[u8],
    ) {
        if payload == probe::PAYLOAD {
            self.probes
                .lock()
                .returned(shard, tokio::time::Instant::now());
            return;
        }
        let text = String::from_utf8_lossy(payload);
        let Some((token, at)) = text.split_once('\n') else {
            return;
        };
        let at = at.parse::<Cursor>().ok();
        let token = token.parse::<u64>().ok();
        if let Some(pending) = self.paused.lock()[shard].as_mut() {
            pending.push(Pending::Barrier(at, token));
            return;
        }
        self.pass_barrier(position, batch, shard, at, token);
    }

    /// Moves the node's position in `shard` to a barrier's, and lets its
    /// waiter go once the fan-out delivered what came before.
    fn pass_barrier(
        &self,
        position: &mut NodePosition,
        batch: &mut Batch<'_>,
        shard: usize,
        at: Option<Cursor>,
        token: Option<u64>,
    ) {
        if let Some(at) = at {
            position.advance(shard, at);
        }
        let waiter = token.and_then(|token| self.barriers.lock().remove(&token));
        if let Some(waiter) = waiter {
            batch.after(Box::new(move || {
                let _ = waiter.send(());
            }));
        }
    }

    /// Holds back delivery from `shards` (all for `None`): what arrives
    /// is kept until the shard is caught up. Called as soon as a loss is
    /// seen, so nothing received after it overtakes what was missed.
    fn pause(&self, shards: Option<usize>) {
        let _position = self.position.lock();
        let mut paused = self.paused.lock();
        for (shard, pending) in paused.iter_mut().enumerate() {
            if shards.is_none_or(|only| only == shard) && pending.is_none() {
                *pending = Some(Vec::new());
            }
        }
    }

    /// Sends the probes due, and recovers the shards whose probe did not
    /// come back. Nothing while a recovery is under way.
    async fn probe(self: Arc<Self>) {
        let now = tokio::time::Instant::now();
        if self.recovering.load(Ordering::Acquire) {
            self.probes.lock().restart(now);
            return;
        }
        let due = self.probes.lock().due(now);
        let mut lost = false;
        for (shard, due) in due {
            match due {
                Due::Send => {
                    let mut conn = self.conn.clone();
                    // A failed send is a probe that does not come back.
                    let _ = redis::cmd("SPUBLISH")
                        .arg(self.shards.sync(shard, &self.node))
                        .arg(probe::PAYLOAD)
                        .query_async::<i64>(&mut conn)
                        .await;
                }
                Due::Lost => {
                    warn!(
                        shard,
                        "redis cluster: a probe of the shard's subscriptions did not come back; renewing them"
                    );
                    metrics::counter!(crate::metrics::names::BUS_RECONNECTS_TOTAL).increment(1);
                    self.pause(Some(shard));
                    lost = true;
                }
            }
        }
        if lost {
            tokio::spawn(self.after_disconnection());
        }
    }

    /// After a connection to a master was lost, or a slot moved away
    /// under a subscription (delivery from the shards held back by
    /// [`Shared::pause`]): once every shard's master answers again, every
    /// stream is subscribed again (on whichever master holds it now) and
    /// each paused shard is caught up from history. One recovery at a time;
    /// a loss during one runs it again.
    async fn after_disconnection(self: Arc<Self>) {
        if self.recovering.swap(true, Ordering::AcqRel) {
            self.lost_again.store(true, Ordering::Release);
            return;
        }
        loop {
            self.lost_again.store(false, Ordering::Release);
            let deadline = tokio::time::Instant::now() + RECOVERY_LIMIT;
            while !self.every_shard_answers().await {
                if tokio::time::Instant::now() >= deadline {
                    warn!("redis cluster: some shard still unreachable; catching up what answers");
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let keys: Vec<String> = (0..self.shards.count())
                .map(|shard| self.shards.seq(shard))
                .collect();
            self.interest.learn_routes(&keys).await;
            let lost = self.interest.resubscribe_all(deadline).await;
            if !lost.is_empty() {
                warn!(
                    streams = lost.len(),
                    "redis cluster: streams not subscribed again; retried by the sweep"
                );
            }
            let paused: Vec<usize> = self
                .paused
                .lock()
                .iter()
                .enumerate()
                .filter(|(_, p)| p.is_some())
                .map(|(shard, _)| shard)
                .collect();
            let caught = join_all(paused.iter().map(|shard| self.catch_up(*shard))).await;
            if caught.iter().any(|c| !c.whole) {
                self.tell_maybe_missed(None);
            }
            // A barrier that did not come back: that shard's subscriptions
            // may have gone to a node that no longer delivers them (the
            // topology was still settling). Again, from where it stands.
            for (shard, caught) in paused.iter().zip(&caught) {
                if !caught.confirmed {
                    warn!(
                        shard,
                        "redis cluster: shard's subscriptions unconfirmed; subscribing again"
                    );
                    self.pause(Some(*shard));
                    self.lost_again.store(true, Ordering::Release);
                }
            }
            self.ready.store(true, Ordering::Relaxed);
            if !self.lost_again.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.recovering.store(false, Ordering::Release);
    }

    /// Delivers what `shard` missed while paused: the history of every
    /// stream subscribed in it after the node's position, then what
    /// arrived meanwhile past that history, and resumes live delivery.
    /// Says whether the gap was read whole (not: the shard lost writes in a
    /// failover, history no longer covers it, or Redis did not answer) and
    /// whether the barrier proved the subscriptions deliver.
    async fn catch_up(&self, shard: usize) -> CaughtUp {
        let from = self.position.lock().position().shards()[shard];
        let channels = self.interest.subscribed();
        let streams: Vec<StreamName<'_>> = channels
            .iter()
            .filter_map(|c| self.shards.stream_of_channel(c))
            .filter(|stream| self.shards.of(*stream) == shard)
            .collect();
        let mut token = self.next_barrier.fetch_add(1, Ordering::Relaxed);
        let mut read = self.read_streams(shard, &streams, from, token).await;
        // A shard in another epoch (its master lost every write, or its
        // keys, in a failover): the read gave no history, so read the new
        // epoch's whole history, under a barrier of its own (messages that
        // came between the two reads are in the second).
        if let Ok((_, upto, _)) = &read
            && upto.epoch != from.epoch
            && upto.seq > 0
        {
            let epoch = upto.epoch;
            token = self.next_barrier.fetch_add(1, Ordering::Relaxed);
            read = self
                .read_streams(shard, &streams, Cursor::new(epoch, 0), token)
                .await
                .map(|(_, upto, frames)| (false, upto, frames));
        }
        // The barrier follows every message the read covered; it waits in
        // the shard's pending list.
        let deadline = tokio::time::Instant::now() + CATCH_UP_BARRIER_LIMIT;
        while read.is_ok() && tokio::time::Instant::now() < deadline {
            let seen = self.paused.lock()[shard].as_ref().is_none_or(|pending| {
                pending
                    .iter()
                    .any(|p| matches!(p, Pending::Barrier(_, Some(t)) if *t == token))
            });
            if seen {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut position = self.position.lock();
        let mut paused = self.paused.lock();
        let Some(pending) = paused[shard].take() else {
            return CaughtUp {
                whole: false,
                confirmed: true,
            };
        };
        let read_whole = read.is_ok();
        let (whole, history) = match read {
            Ok((complete, upto, per_stream)) => {
                let messages = streams
                    .iter()
                    .zip(per_stream)
                    .flat_map(|(stream, frames)| {
                        frames
                            .into_iter()
                            .map(|frame| (frame.seq(), target_of(*stream), frame.json().clone()))
                    })
                    .collect();
                (complete, Some(History { upto, messages }))
            }
            Err(err) => {
                warn!(error = %err, shard, "redis cluster: catch-up read failed");
                (false, None)
            }
        };
        let plan = catch_up::plan(from, history, pending, token);
        // Held back: what came after the read waits for the next catch-up
        // (the position's lock is held, so nothing arrives in between).
        let confirmed = read_whole && plan.held.is_none();
        if plan.held.is_some() {
            warn!(
                shard,
                "redis cluster: catch-up barrier late; history delivered, what came after held for the next catch-up"
            );
        }
        paused[shard] = plan.held;
        drop(paused);
        if let Some(upto) = plan.reset {
            position.reset(shard, upto);
        }
        let mut batch = self.fanout.batch();
        for step in plan.steps {
            match step {
                Step::HandOver(at, text, target, json) => {
                    self.hand_over(&mut position, &mut batch, shard, at, &text, target, &json);
                }
                Step::Barrier(at, token) => {
                    self.pass_barrier(&mut position, &mut batch, shard, at, token);
                }
            }
        }
        // Handed to the fan-out before the position's lock is let go.
        drop(batch);
        drop(position);
        if confirmed {
            self.caught_up[shard].send_modify(|n| *n += 1);
        }
        CaughtUp { whole, confirmed }
    }

    /// Whether the master of every shard answers (a read of its sequence,
    /// routed by slot: it also makes the client learn a new topology).
    async fn every_shard_answers(&self) -> bool {
        let probes = (0..self.shards.count()).map(|shard| {
            let mut conn = self.conn.clone();
            let key = self.shards.seq(shard);
            async move {
                redis::cmd("EXISTS")
                    .arg(key)
                    .query_async::<i64>(&mut conn)
                    .await
                    .is_ok()
            }
        });
        join_all(probes).await.into_iter().all(|ok| ok)
    }

    /// Queues `recover` with `complete: false` for the connections of the
    /// stream on `channel` (every connection for `None`), after what the
    /// fan-out holds.
    fn tell_maybe_missed(&self, channel: Option<&str>) {
        let conns = match channel.and_then(|c| self.shards.stream_of_channel(c)) {
            None if channel.is_some() => return,
            None | Some(StreamName::Broadcast) => self.registry.all_connections(),
            Some(StreamName::User(user)) => UserId::parse(user)
                .ok()
                .and_then(|user| self.registry.user(&user))
                .map(|user| user.connections())
                .unwrap_or_default(),
            Some(StreamName::Channel(name)) => Channel::parse(name)
                .map(|channel| self.registry.channel_members(&channel))
                .unwrap_or_default(),
        };
        let position = self.position.lock().text().to_owned();
        self.fanout.after(Box::new(move || {
            for conn in conns {
                let cursor = format!("{position}{}", conn.cursor_suffix());
                conn.outbound
                    .push_resume(vec![Frame::recover(false, &cursor)], 0);
            }
        }));
        warn!(
            channel = channel.unwrap_or("*"),
            "redis cluster: clients told they may have missed messages"
        );
    }

    async fn publish(&self, message: Publish) -> Result<Published, BusError> {
        let (head, broadcast_tail) = message_parts(&message.id, Stream::Broadcast, &message.data);
        let recipient = |stream: StreamName<'_>, target: String| Recipient {
            history: self.shards.history(stream),
            channel: self.shards.bus(stream),
            target,
        };
        // Per shard: its messages, each a tail and the streams it goes to.
        let mut per_shard: HashMap<usize, Vec<ShardMessage>> = HashMap::new();
        let (users, channels) = match &message.target {
            PushTarget::Broadcast => {
                per_shard.entry(0).or_default().push(ShardMessage {
                    tail: broadcast_tail,
                    streams: vec![recipient(StreamName::Broadcast, "*".to_owned())],
                });
                (0, 0)
            }
            PushTarget::Users(users) => {
                let (_, tail) = message_parts(&message.id, Stream::User, &message.data);
                for user in users {
                    let stream = StreamName::User(user.as_str());
                    let messages = per_shard.entry(self.shards.of(stream)).or_default();
                    if messages.is_empty() {
                        messages.push(ShardMessage {
                            tail: tail.clone(),
                            streams: Vec::new(),
                        });
                    }
                    messages[0]
                        .streams
                        .push(recipient(stream, user.as_str().to_owned()));
                }
                (users.len(), 0)
            }
            PushTarget::Channels(names) => {
                for channel in names {
                    let stream = StreamName::Channel(channel.as_str());
                    let (_, tail) = message_parts(
                        &message.id,
                        Stream::Channel(channel.as_str()),
                        &message.data,
                    );
                    per_shard
                        .entry(self.shards.of(stream))
                        .or_default()
                        .push(ShardMessage {
                            tail,
                            streams: vec![recipient(stream, format!("#{channel}"))],
                        });
                }
                (0, names.len())
            }
        };
        let expires = !matches!(message.target, PushTarget::Broadcast);
        let scripts = per_shard.into_iter().map(|(shard, messages)| {
            let push = ShardPush {
                head: head.clone(),
                id_key: self.shards.push_id(shard, &message.id),
                idempotent: message.idempotent,
                expires,
                messages,
            };
            async move { (shard, self.committer.commit(shard, push).await) }
        });
        let replies = join_all(scripts).await;
        let mut cursor = self.position.lock().position().clone();
        let mut fresh = false;
        for (shard, reply) in replies {
            let (new, at) = reply.map_err(|err| {
                metrics::counter!(crate::metrics::names::BUS_ERRORS_TOTAL).increment(1);
                BusError::Unavailable(err)
            })?;
            let at = at
                .parse::<Cursor>()
                .map_err(|_| BusError::Unavailable("redis returned a malformed cursor".into()))?;
            cursor.advance(shard, at);
            fresh |= new;
        }
        if fresh {
            super::count_published(&self.counters, &message.target);
        }
        Ok(Published {
            id: message.id,
            cursor,
            users,
            channels,
            duplicate: !fresh,
        })
    }

    /// Reads shard `shard`'s history of `streams` after `after`, and sends
    /// the barrier `token` through the shard: `(complete, position,
    /// frames)`, the frames in order, each message once.
    async fn read_shard(
        &self,
        shard: usize,
        streams: &[StreamName<'_>],
        after: Cursor,
        token: u64,
    ) -> redis::RedisResult<(bool, Cursor, Vec<Frame>)> {
        let (complete, position, per_stream) =
            self.read_streams(shard, streams, after, token).await?;
        let mut frames: Vec<Frame> = per_stream.into_iter().flatten().collect();
        frames.sort_by_key(Frame::seq);
        frames.dedup_by_key(|f| f.seq());
        Ok((complete, position, frames))
    }

    /// As [`Shared::read_shard`], each stream's messages apart, in the
    /// order of `streams`.
    async fn read_streams(
        &self,
        shard: usize,
        streams: &[StreamName<'_>],
        after: Cursor,
        token: u64,
    ) -> redis::RedisResult<(bool, Cursor, Vec<Vec<Frame>>)> {
        let mut conn = self.conn.clone();
        let mut invocation = self.resume.prepare_invoke();
        invocation
            .key(self.shards.epoch(shard))
            .key(self.shards.seq(shard))
            .key(self.shards.aged(shard))
            .key(self.shards.writer(shard));
        for stream in streams {
            invocation.key(self.shards.history(*stream));
        }
        let reply: Vec<Value> = invocation
            .arg(format!("{:016x}", after.epoch))
            .arg(after.seq)
            .arg(self.shards.sync(shard, &self.node))
            .arg(token)
            .invoke_async(&mut conn)
            .await?;
        let reply = ResumeReply::parse(reply)?;
        let (complete, position) = (reply.complete(after.seq, self.history_size), reply.position);
        let frames = reply
            .streams
            .map(|stream| reply::frames(stream, position.epoch, shard as u16).collect())
            .collect();
        Ok((complete, position, frames))
    }

    /// Subscribes, attaches, then reads history shard by shard and queues
    /// the resume once every shard's barrier went through. A shard's
    /// history read that fails releases the connection again: history may
    /// still cover the gap, so the client is refused (to retry with the
    /// same cursor), not told `complete: false`. A barrier that does not
    /// arrive is another matter: the read stands, the client resumes
    /// incomplete.
    async fn open(&self, open: Open) -> Result<Opened, OpenError> {
        let user = open.user.clone();
        let mut names: Vec<String> = vec![self.shards.bus(StreamName::User(user.as_str()))];
        names.extend(
            open.channels
                .iter()
                .map(|c| self.shards.bus(StreamName::Channel(c.as_str()))),
        );
        join_all(names.iter().map(|name| self.interest.ensure(name))).await;
        let suffix = suffix_of(&open.channels);
        let covered = open.covered();
        let (cursor, transport) = (open.cursor.clone(), open.transport);
        let at_attach = self.position.lock().position().clone();
        let attached = open.attach(&self.registry)?;
        self.interest
            .add(&self.shards.bus(StreamName::User(user.as_str())), 1);
        let _ = self.presence.send((user.clone(), 1));
        let Some(cursor) = cursor else {
            return Ok(Opened::Attached(attached));
        };
        let unopened = Unopened::new(&attached.conn, |conn| {
            self.release(conn);
        });
        let read = match self.read(&user, &covered, &cursor).await {
            Ok(read) => {
                unopened.finish();
                read
            }
            Err(_) => {
                // Logged by `read`; released as if the client had left.
                drop(unopened);
                return Err(OpenError::Unavailable);
            }
        };
        let conn = &attached.conn;
        let seat = Seat::new(read, &cursor, &at_attach);
        let resume = Resume::new(seat.complete, &seat.end, seat.history.clone())
            .covering(suffix_of(&covered));
        let conn_suffix = conn.cursor_suffix();
        if transport == Transport::Poll && resume.is_news() {
            let mut frames = resume.into_frames(&suffix);
            self.release(conn);
            let mut live = std::collections::VecDeque::new();
            conn.outbound.take(&mut live);
            frames.extend(live.into_iter().filter_map(|item| match item {
                Outgoing::Frame(frame) => seat.judge(&frame, &conn_suffix),
                _ => None,
            }));
            return Ok(Opened::Ready(frames));
        }
        let frames = if transport == Transport::Poll {
            Vec::new()
        } else {
            resume.into_frames(&conn_suffix)
        };
        conn.outbound
            .push_resume_with(frames, |frame| seat.judge(frame, &conn_suffix));
        Ok(Opened::Attached(attached))
    }

    /// History after `cursor` of the user's, the broadcast and the covered
    /// channels' streams, one script per shard, each followed by its
    /// barrier through the fan-out. `Err`: a shard's read failed (the
    /// first such error).
    async fn read(
        &self,
        user: &UserId,
        covered: &[Channel],
        cursor: &Position,
    ) -> redis::RedisResult<Read> {
        let mut by_shard: HashMap<usize, Vec<StreamName<'_>>> = HashMap::new();
        let streams = std::iter::once(StreamName::Broadcast)
            .chain(std::iter::once(StreamName::User(user.as_str())))
            .chain(covered.iter().map(|c| StreamName::Channel(c.as_str())));
        for stream in streams {
            by_shard
                .entry(self.shards.of(stream))
                .or_default()
                .push(stream);
        }
        let reads = by_shard.into_iter().map(|(shard, streams)| {
            let token = self.next_barrier.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            self.barriers.lock().insert(token, tx);
            let after = cursor.shards()[shard];
            // Taken before the read: a catch-up during it counts.
            let caught_up = self.caught_up[shard].subscribe();
            async move {
                let read = self.read_shard(shard, &streams, after, token).await;
                // A failed read refuses the client: no barrier to wait for.
                let arrived = read.is_ok()
                    && barrier::wait(rx, caught_up, || self.send_barrier_again(shard, token)).await;
                if !arrived {
                    self.barriers.lock().remove(&token);
                }
                (shard, read, arrived)
            }
        });
        let mut out = Read {
            shards: HashMap::new(),
            unread: Vec::new(),
            complete: true,
        };
        let mut failed = None;
        for (shard, read, arrived) in join_all(reads).await {
            match read {
                Ok((complete, position, frames)) if arrived => {
                    out.complete &= complete;
                    out.shards.insert(shard, (position, frames));
                }
                Ok(_) => {
                    warn!(
                        shard,
                        "redis cluster: a resume barrier did not arrive; resuming incomplete"
                    );
                    out.complete = false;
                    out.unread.push(shard);
                }
                Err(err) => {
                    warn!(error = %err, shard, user_id = %user, "redis cluster: history read failed; resume refused");
                    failed.get_or_insert(err);
                }
            }
        }
        match failed {
            Some(err) => Err(err),
            None => Ok(out),
        }
    }

    /// Sends a resume's barrier `token` through `shard` again, without a
    /// position (the read's came with the first; this one only lets the
    /// resume go). A failed send waits for the next catch-up.
    async fn send_barrier_again(&self, shard: usize, token: u64) {
        let mut conn = self.conn.clone();
        let sent = redis::cmd("SPUBLISH")
            .arg(self.shards.sync(shard, &self.node))
            .arg(format!("{token}\n"))
            .query_async::<i64>(&mut conn)
            .await;
        match sent {
            Ok(_) => debug!(shard, token, "redis cluster: a resume barrier sent again"),
            Err(err) => {
                warn!(error = %err, shard, "redis cluster: a resume barrier could not be sent again");
            }
        }
    }

    fn release(&self, conn: &Conn) -> Position {
        if self.registry.conn(conn.id).is_some() {
            self.registry.detach(conn);
            self.interest
                .add(&self.shards.bus(StreamName::User(conn.user.as_str())), -1);
            let _ = self.presence.send((conn.user.clone(), -1));
        }
        self.position.lock().position().clone()
    }
}

/// What the history reads found: per shard read, its position and
/// messages.
#[derive(Debug)]
struct Read {
    shards: HashMap<usize, (Cursor, Vec<Frame>)>,
    /// Shards whose history could not be read whole in time (its barrier
    /// came too late; a read that failed refuses the client instead).
    unread: Vec<usize>,
    complete: bool,
}

/// How a resume is queued: the history in order with each message's
/// cursor, where the client stands after it, and how live frames queued
/// meanwhile are judged.
#[derive(Debug)]
struct Seat {
    complete: bool,
    /// History, shard by shard, each with the cursor of where the client
    /// stands after it.
    history: Vec<Frame>,
    /// Where the client stands after the history.
    end: Position,
    /// Per shard read: (floor, history's position, message numbers in
    /// history). A live copy at or below the floor, or in history, is
    /// dropped.
    read: HashMap<usize, (u64, Cursor, HashSet<u64>)>,
}

impl Seat {
    fn new(read: Read, cursor: &Position, at_attach: &Position) -> Self {
        // Shards the client has covered streams in start from its cursor;
        // the others from where the node stood when it attached (their
        // messages up to there came before the connection).
        let mut running = at_attach.clone();
        let mut shards: Vec<usize> = read.shards.keys().copied().collect();
        shards.sort_unstable();
        for &shard in &shards {
            let mut only = running.shards().to_vec();
            only[shard] = cursor.shards()[shard];
            running = Position::new(only);
        }
        let mut history = Vec::new();
        let mut judged = HashMap::new();
        for shard in shards {
            let (position, frames) = &read.shards[&shard];
            let seqs: HashSet<u64> = frames.iter().map(Frame::seq).collect();
            let from = cursor.shards()[shard];
            let floor = if from.epoch == position.epoch {
                from.seq.min(position.seq)
            } else {
                0
            };
            for frame in frames {
                running.advance(shard, Cursor::new(position.epoch, frame.seq()));
                if let Some(frame) = frame.with_cursor(&running.to_string()) {
                    history.push(frame);
                }
            }
            let mut moved = running.shards().to_vec();
            moved[shard] = *position;
            running = Position::new(moved);
            judged.insert(shard, (floor, *position, seqs));
        }
        // A shard not read: the client stands at the later of its cursor
        // and the node's position, and live copies at or below its cursor
        // (it has them) are dropped; what lies between, if the node was
        // ahead, is the gap `complete: false` tells of.
        for &shard in &read.unread {
            let from = cursor.shards()[shard];
            let here = running.shards()[shard];
            let (floor, stands) = if from.epoch == here.epoch {
                (from.seq, Cursor::new(here.epoch, from.seq.max(here.seq)))
            } else {
                (0, here)
            };
            let mut moved = running.shards().to_vec();
            moved[shard] = stands;
            running = Position::new(moved);
            judged.insert(shard, (floor, stands, HashSet::new()));
        }
        Self {
            complete: read.complete,
            history,
            end: running,
            read: judged,
        }
    }

    /// A live frame queued before the resume: `None` if the client has it
    /// (by its cursor or the history), else the frame with its cursor
    /// raised past the history in the shards read.
    fn judge(&self, frame: &Frame, suffix: &str) -> Option<Frame> {
        let shard = usize::from(frame.shard());
        if let Some((floor, _, seqs)) = self.read.get(&shard)
            && (frame.seq() <= *floor || seqs.contains(&frame.seq()))
        {
            return None;
        }
        let Some(mut at) = frame
            .cursor()
            .and_then(|c| c.parse::<ConnCursor>().ok())
            .and_then(|c| c.position(self.end.shards().len()))
        else {
            return Some(frame.clone());
        };
        let mut raised = false;
        for (&shard, (_, position, _)) in &self.read {
            raised |= at.advance(shard, *position);
        }
        if !raised {
            return Some(frame.clone());
        }
        frame
            .with_cursor(&format!("{at}{suffix}"))
            .or_else(|| Some(frame.clone()))
    }
}

impl Bus for ClusterBus {
    fn publish(&self, message: Publish) -> BoxFuture<'_, Result<Published, BusError>> {
        Box::pin(self.shared.publish(message))
    }

    fn open(&self, open: Open) -> BoxFuture<'_, Result<Opened, OpenError>> {
        Box::pin(self.shared.open(open))
    }

    fn release(&self, conn: &Conn) -> Position {
        self.shared.release(conn)
    }

    fn detach(&self, conn: &Conn) {
        self.shared.release(conn);
    }

    fn sweep(&self, _now_ms: u64) {
        // History ages out inside Redis (publish.lua trims, streams expire).
    }

    fn is_ready(&self) -> bool {
        self.shared.ready.load(Ordering::Relaxed)
    }

    fn position(&self) -> Position {
        self.shared.position.lock().position().clone()
    }

    fn shards(&self) -> usize {
        self.shared.shards.count()
    }

    fn hears(&self, channel: &Channel) -> bool {
        let name = self
            .shared
            .shards
            .bus(StreamName::Channel(channel.as_str()));
        self.shared.interest.is_subscribed(&name)
    }

    fn listen<'a>(&'a self, channel: &'a Channel) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let name = self
                .shared
                .shards
                .bus(StreamName::Channel(channel.as_str()));
            // Lingers if nobody joins after all (the connection went).
            self.shared.interest.ensure(&name).await
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    const E: u64 = 0xe;

    fn at(seqs: [u64; 2]) -> Position {
        Position::new(seqs.iter().map(|s| Cursor::new(E, *s)).collect())
    }

    fn live(shard: u16, seq: u64, position: &Position) -> Frame {
        let cursor = position.to_string();
        let json = format!(
            r#"{{"type":"message","id":"m{seq}","cursor":"{cursor}","stream":"broadcast","data":{seq}}}"#
        );
        Frame::shard_message(shard, seq, &cursor, Bytes::from(json)).expect("a message frame")
    }

    /// Shard 0 read whole (nothing missed), shard 1 not read in time.
    fn read_without_shard_1() -> Read {
        Read {
            shards: HashMap::from([(0, (Cursor::new(E, 5), Vec::new()))]),
            unread: vec![1],
            complete: false,
        }
    }

    #[test]
    fn an_unread_shard_keeps_the_clients_cursor_when_the_node_is_behind() {
        let cursor = at([5, 10]);
        let seat = Seat::new(read_without_shard_1(), &cursor, &at([5, 7]));
        assert!(!seat.complete);
        assert_eq!(seat.end, at([5, 10]), "never behind the client's cursor");
        // Copies of what the client has (from the node it left) are dropped.
        assert!(seat.judge(&live(1, 9, &at([5, 9])), "").is_none());
        assert!(seat.judge(&live(1, 10, &at([5, 10])), "").is_none());
        let next = seat.judge(&live(1, 11, &at([5, 11])), "").expect("news");
        assert_eq!(next.seq(), 11);
    }

    #[test]
    fn an_unread_shard_starts_where_the_node_stands_when_it_is_ahead() {
        let seat = Seat::new(read_without_shard_1(), &at([5, 10]), &at([5, 12]));
        assert_eq!(seat.end, at([5, 12]));
        assert!(seat.judge(&live(1, 13, &at([5, 13])), "").is_some());
    }
}
