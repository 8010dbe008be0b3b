//! The in-process bus: one gateway, no broker, history in memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::fanout::Fanout;
use super::resume::Resume;
use super::{
    Bus, BusError, ChannelMembers, Open, OpenError, Opened, Publish, Published, PushTarget,
};
use crate::history::{Cursor, Dedupe, History, Position, StreamKey};
use crate::metrics::Counters;
use crate::protocol::frame::{Frame, Stream};
use crate::protocol::{Channel, Transport, UserId};
use crate::registry::conn::suffix_of;
use crate::registry::{AtCapacity, Conn, Registry};
use crate::wheel::Clock;

/// Numbering, history, idempotency keys: everything the publish lock guards.
#[derive(Debug)]
struct State {
    last_seq: u64,
    history: History<Frame>,
    dedupe: Dedupe<Published>,
}

/// Delivers pushes to this process's connections.
///
/// Numbering, recording and resumes happen under one lock; delivery
/// happens on the fan-out thread, in sequence order, after the lock is let
/// go (a connection opened meanwhile skips what its resume already holds,
/// by its floor). Every connection receives messages in sequence order,
/// and a client's cursor covers everything before it.
#[derive(Debug)]
pub(crate) struct MemoryBus {
    epoch: u64,
    state: Mutex<State>,
    registry: Arc<Registry>,
    fanout: Fanout,
    /// The last sequence number delivered to every connection it was for.
    delivered: Arc<AtomicU64>,
    counters: Counters,
    clock: Clock,
}

/// Completes once a published message reached every connection it was for.
pub(crate) type Delivery = oneshot::Receiver<()>;

impl MemoryBus {
    /// A bus over `registry` keeping `history_size` messages per stream for
    /// `ttl_ms` (also the idempotency window), in at most `max_streams`
    /// users' and channels' streams, delivering through `fanout` (over
    /// the same registry). Its epoch is random: memory history does not
    /// survive a restart, so older cursors must not match.
    pub(crate) fn new(
        registry: Arc<Registry>,
        counters: Counters,
        clock: Clock,
        history_size: usize,
        ttl_ms: u64,
        max_streams: usize,
        fanout: Fanout,
    ) -> Self {
        Self {
            epoch: rand::random(),
            state: Mutex::new(State {
                last_seq: 0,
                history: History::new(history_size, ttl_ms, max_streams),
                dedupe: Dedupe::new(ttl_ms),
            }),
            fanout,
            registry,
            delivered: Arc::new(AtomicU64::new(0)),
            counters,
            clock,
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock.millis_at(tokio::time::Instant::now())
    }

    /// Numbers and records `message` (one message per channel for a push
    /// to channels) and hands it to the fan-out threads; the delivery
    /// completes later (`None` for a duplicate).
    fn publish_now(&self, message: Publish) -> Result<(Published, Option<Delivery>), BusError> {
        let now_ms = self.now_ms();
        let mut state = self.state.lock();
        if message.idempotent
            && let Some(first) = state.dedupe.get(&message.id, now_ms)
        {
            let duplicate = Published {
                duplicate: true,
                ..first
            };
            return Ok((duplicate, None));
        }
        let keys: Vec<StreamKey> = match &message.target {
            PushTarget::Broadcast => Vec::new(),
            PushTarget::Users(users) => users.iter().cloned().map(StreamKey::User).collect(),
            PushTarget::Channels(channels) => {
                channels.iter().cloned().map(StreamKey::Channel).collect()
            }
        };
        state
            .history
            .check_room(&keys)
            .map_err(|full| BusError::HistoryFull(full.0))?;
        // One message per stream frame: a broadcast or a personal message
        // is one, a push to channels one per channel.
        let mut deliveries: Vec<(Frame, PushTarget)> = Vec::new();
        match message.target {
            PushTarget::Broadcast => {
                let frame = self.number(&mut state, &message.id, &message.data, Stream::Broadcast);
                state
                    .history
                    .append_broadcast(frame.seq(), now_ms, frame.clone());
                self.counters.published_broadcast.increment(1);
                deliveries.push((frame, PushTarget::Broadcast));
            }
            PushTarget::Users(users) => {
                let frame = self.number(&mut state, &message.id, &message.data, Stream::User);
                for key in keys {
                    state
                        .history
                        .append(key, frame.seq(), now_ms, frame.clone());
                }
                self.counters.published_user.increment(1);
                deliveries.push((frame, PushTarget::Users(users)));
            }
            PushTarget::Channels(channels) => {
                for (channel, key) in channels.into_iter().zip(keys) {
                    let stream = Stream::Channel(channel.as_str());
                    let frame = self.number(&mut state, &message.id, &message.data, stream);
                    state
                        .history
                        .append(key, frame.seq(), now_ms, frame.clone());
                    self.counters.published_channel.increment(1);
                    deliveries.push((frame, PushTarget::Channels(vec![channel])));
                }
            }
        }
        let (users, channels) = match &deliveries[..] {
            [(_, PushTarget::Users(users))] => (users.len(), 0),
            [(_, PushTarget::Channels(_)), ..] => (0, deliveries.len()),
            _ => (0, 0),
        };
        let published = Published {
            id: message.id,
            cursor: Position::single(Cursor::new(self.epoch, state.last_seq)),
            users,
            channels,
            duplicate: false,
        };
        if message.idempotent {
            state
                .dedupe
                .insert(published.id.clone(), now_ms, published.clone());
        }
        // Handed over under the lock, so the fan-out threads get messages
        // in sequence order; the last one's delivery answers the push.
        let (done, delivery) = oneshot::channel();
        let mut done = Some(done);
        let count = deliveries.len();
        for (index, (frame, target)) in deliveries.into_iter().enumerate() {
            let delivered = Arc::clone(&self.delivered);
            let seq = frame.seq();
            let done = if index + 1 == count {
                done.take()
            } else {
                None
            };
            let then = Box::new(move || {
                delivered.fetch_max(seq, Ordering::AcqRel);
                if let Some(done) = done {
                    let _ = done.send(());
                }
            });
            self.fanout.deliver(frame, target, Some(then));
        }
        Ok((published, Some(delivery)))
    }

    /// Takes the next sequence number for one message of `stream`.
    fn number(&self, state: &mut State, id: &str, data: &RawValue, stream: Stream<'_>) -> Frame {
        state.last_seq += 1;
        let cursor = Cursor::new(self.epoch, state.last_seq);
        Frame::message(cursor.seq, id, &cursor.to_string(), stream, data)
    }

    /// What `user`, in `channels` (those `coverage` covers resume, the
    /// rest start live), is owed after `cursor`.
    fn resume(&self, state: &State, open: &Open, cursor: Cursor) -> Resume {
        let position = Cursor::new(self.epoch, state.last_seq);
        if cursor.epoch != self.epoch {
            return Resume::new(false, position, Vec::new());
        }
        let covered = open.covered();
        let mut keys = Vec::with_capacity(covered.len() + 1);
        keys.push(StreamKey::User(open.user.clone()));
        keys.extend(covered.iter().cloned().map(StreamKey::Channel));
        let recovery = state.history.read(&keys, cursor.seq);
        let missed = recovery.items.into_iter().map(|(_, frame)| frame).collect();
        Resume::new(recovery.complete, position, missed).covering(suffix_of(&covered))
    }

    fn open_now(&self, open: Open) -> Result<Opened, AtCapacity> {
        let state = self.state.lock();
        let resume = open
            .cursor
            .as_ref()
            .map(|c| self.resume(&state, &open, c.first()));
        if open.transport == Transport::Poll && resume.as_ref().is_some_and(Resume::is_news) {
            let suffix = suffix_of(&open.channels);
            let frames = resume.map(|r| r.into_frames(&suffix)).unwrap_or_default();
            return Ok(Opened::Ready(frames));
        }
        let transport = open.transport;
        let attached = open.attach(&self.registry)?;
        // Everything numbered so far is in the resume (or, without a
        // cursor, before this connection's time): the fan-out thread may
        // still be delivering some of it, and this connection's floor
        // drops it (also a copy queued since the attach).
        Resume::seat(resume, &attached.conn, transport, state.last_seq);
        drop(state);
        Ok(Opened::Attached(attached))
    }
}

impl Bus for MemoryBus {
    fn publish(&self, message: Publish) -> BoxFuture<'_, Result<Published, BusError>> {
        let published = self.publish_now(message);
        Box::pin(async move {
            let (published, delivery) = published?;
            // Answer the push once its message is out, as a push that
            // delivered inline would: concurrent pushers wait their turn.
            if let Some(delivery) = delivery {
                let _ = delivery.await;
            }
            Ok(published)
        })
    }

    fn open(&self, open: Open) -> BoxFuture<'_, Result<Opened, OpenError>> {
        // History is in memory: reading it cannot fail.
        let opened = self.open_now(open).map_err(OpenError::from);
        Box::pin(async move { opened })
    }

    fn release(&self, conn: &Conn) -> Position {
        self.registry.detach(conn);
        // Everything up to here was queued on the connection before it
        // was detached; a message being delivered right now may or may not
        // have been, and is in history after this position either way.
        self.position()
    }

    fn detach(&self, conn: &Conn) {
        self.registry.detach(conn);
    }

    fn sweep(&self, now_ms: u64) {
        let mut state = self.state.lock();
        state.history.expire(now_ms);
        state.dedupe.expire(now_ms);
    }

    fn is_ready(&self) -> bool {
        true
    }

    fn position(&self) -> Position {
        Position::single(Cursor::new(
            self.epoch,
            self.delivered.load(Ordering::Acquire),
        ))
    }

    fn channel_presence<'a>(
        &'a self,
        channel: &'a Channel,
        max_listed: usize,
    ) -> BoxFuture<'a, Result<ChannelMembers, BusError>> {
        let here = self.registry.channel_presence(channel);
        let members = ChannelMembers::new(here.subscribers, here.users, max_listed);
        Box::pin(async move { Ok(members) })
    }

    fn presence(&self, user: &UserId) -> BoxFuture<'_, Result<usize, BusError>> {
        let count = self
            .registry
            .user(user)
            .map_or(0, |u| u.connections().len());
        Box::pin(async move { Ok(count) })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Barrier;

    use super::*;
    use crate::registry::Outgoing;
    use crate::registry::users::Limits;

    fn bus(history_size: usize) -> MemoryBus {
        let limits = Limits {
            max_connections: 100_000,
            max_connections_per_user: 100_000,
            outbound_queue: 100_000,
            max_channels_per_connection: 64,
        };
        let counters = Counters::register();
        let registry = Arc::new(Registry::new(limits, counters.clone()));
        let clock = Clock::new(
            tokio::time::Instant::now(),
            std::time::Duration::from_millis(100),
        );
        let fanout = Fanout::start(Arc::clone(&registry), None, 0).expect("fan-out threads");
        MemoryBus::new(
            registry,
            counters,
            clock,
            history_size,
            60_000,
            1_000,
            fanout,
        )
    }

    /// Publishes broadcast `n` and waits until it is delivered.
    fn broadcast(bus: &MemoryBus, n: u64) -> Published {
        let (published, delivery) = bus
            .publish_now(Publish {
                id: format!("m{n}"),
                idempotent: false,
                target: PushTarget::Broadcast,
                data: RawValue::from_string(n.to_string()).expect("json"),
            })
            .expect("room in history");
        delivery
            .expect("not a duplicate")
            .blocking_recv()
            .expect("delivered");
        published
    }

    fn open(bus: &MemoryBus, user: &str, cursor: Option<Cursor>) -> Arc<Conn> {
        let open = Open {
            user: UserId::parse(user).expect("valid"),
            transport: Transport::Ws,
            expires_at: None,
            cursor: cursor.map(Position::single),
            channels: Vec::new(),
            coverage: Default::default(),
            now_ms: 0,
        };
        match bus.open_now(open).expect("room") {
            Opened::Attached(attached) => attached.conn,
            Opened::Ready(_) => unreachable!("websockets attach"),
        }
    }

    /// The sequence numbers of the messages queued on `conn`, and whether
    /// it was told it resumed completely.
    fn received(conn: &Conn) -> (Option<bool>, Vec<u64>) {
        let mut items = VecDeque::new();
        conn.outbound.take(&mut items);
        let mut complete = None;
        let mut seqs = Vec::new();
        for item in items {
            let Outgoing::Frame(frame) = item else {
                continue;
            };
            let json: serde_json::Value = serde_json::from_slice(frame.json()).expect("json");
            match json["type"].as_str() {
                Some("recover") => complete = json["complete"].as_bool(),
                Some("message") => {
                    let cursor: Cursor = json["cursor"]
                        .as_str()
                        .expect("cursor")
                        .parse()
                        .expect("ours");
                    seqs.push(cursor.seq);
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
        (complete, seqs)
    }

    #[test]
    fn resume_delivers_missed_then_live_messages_exactly_once() {
        let bus = bus(100);
        let first = broadcast(&bus, 1);
        broadcast(&bus, 2);
        broadcast(&bus, 3);
        let conn = open(&bus, "alice", Some(first.cursor.first()));
        broadcast(&bus, 4);
        assert_eq!(received(&conn), (Some(true), vec![2, 3, 4]));
    }

    #[test]
    fn resume_past_history_says_incomplete_and_sends_what_is_left() {
        let bus = bus(2);
        let first = broadcast(&bus, 1);
        for n in 2..=5 {
            broadcast(&bus, n);
        }
        let conn = open(&bus, "alice", Some(first.cursor.first()));
        assert_eq!(received(&conn), (Some(false), vec![4, 5]));
        let stranger = open(
            &bus,
            "bob",
            Some(Cursor::new(first.cursor.first().epoch ^ 1, 3)),
        );
        assert_eq!(received(&stranger), (Some(false), vec![]));
    }

    /// The seam: a publisher races resumes. Each round, a barrier releases
    /// a publish and a resume at the same instant; whichever wins the
    /// publish lock, the resumed connection must hold every message after
    /// its cursor exactly once, in order, with no gap.
    #[test]
    fn a_message_published_during_the_resume_seam_is_delivered_exactly_once() {
        let bus = bus(10_000);
        let rounds = 300u64;
        let barrier = Barrier::new(2);
        let conns = std::thread::scope(|scope| {
            scope.spawn(|| {
                for n in 0..rounds {
                    barrier.wait();
                    broadcast(&bus, n);
                }
            });
            let mut conns = Vec::new();
            for round in 0..rounds {
                let cursor = bus.position().first();
                barrier.wait();
                conns.push((cursor, open(&bus, &format!("u{round}"), Some(cursor))));
            }
            conns
        });
        let last = bus.position().first().seq;
        assert_eq!(last, rounds);
        for (cursor, conn) in conns {
            let (complete, seqs) = received(&conn);
            assert_eq!(complete, Some(true));
            let want: Vec<u64> = (cursor.seq + 1..=last).collect();
            assert_eq!(seqs, want, "resumed at {}", cursor.seq);
        }
    }
}
