//! The registry: one object per user, each with its live connections.
//!
//! Invariant: never hold a map guard across `.await`; clone the `Arc` out.
//! A user's connection list is only changed under that user's map entry
//! guard, so attach and detach cannot race into an orphaned user object.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use parking_lot::Mutex;

use super::channels::{ChannelIndex, ChannelPresence, MembershipChange};
use super::conn::{Conn, ConnId};
use super::outbound::{Outgoing, Pushed};
use super::table::{ConnTable, Piece, SHARDS, shard_of};
use crate::metrics::{Counters, Eviction};
use crate::protocol::frame::{CloseReason, Frame};
use crate::protocol::{Channel, Transport, UserId};
use crate::wheel::TimerKey;

/// A user's object: created at first contact, reused by every later
/// connection and poll of that user while it lives.
#[derive(Debug)]
pub(crate) struct User {
    /// Whose object this is.
    pub id: UserId,
    /// A process-unique number, counted apart from connection ids: names
    /// the user's long-poll session (and its timer entry).
    pub handle: u64,
    conns: Mutex<Vec<Arc<Conn>>>,
    /// The long-poll session: its one timer entry, reused across polls.
    pub poll_session: Mutex<PollSession>,
}

/// A user's long-poll session between polls.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PollSession {
    /// The session's timer entry, while the session lives.
    pub timer: Option<TimerKey>,
    /// The entry's latest sequence number.
    pub seq: u32,
    /// When the last poll ended (ms on the timer's clock).
    pub idle_since_ms: u64,
}

impl User {
    fn new(id: UserId, handle: u64) -> Self {
        Self {
            id,
            handle,
            conns: Mutex::new(Vec::new()),
            poll_session: Mutex::new(PollSession::default()),
        }
    }

    /// The user's live connections, oldest first.
    pub(crate) fn connections(&self) -> Vec<Arc<Conn>> {
        self.conns.lock().clone()
    }

    /// Whether a long-poll session keeps the object alive between polls.
    pub(crate) fn has_poll_session(&self) -> bool {
        self.poll_session.lock().timer.is_some()
    }
}

/// The registry's limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections overall.
    pub max_connections: usize,
    /// Connections per user; a new one past it replaces the oldest.
    pub max_connections_per_user: usize,
    /// Frames queued per connection before it is closed as slow.
    pub outbound_queue: usize,
    /// Channels per connection (`[limits] max_channels_per_connection`).
    pub max_channels_per_connection: usize,
}

/// A `subscribe` past `max_channels_per_connection`; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a connection may be in at most {0} channels")]
pub(crate) struct TooManyChannels(pub usize);

/// The gateway is full (`max_connections`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("connection limit reached ({0} connections)")]
pub(crate) struct AtCapacity(pub usize);

/// A connection just attached, with its user's object. (The user's
/// oldest connection, if it made room, is already queued its `replaced`
/// close.)
#[derive(Debug)]
pub(crate) struct Attached {
    /// The new connection.
    pub conn: Arc<Conn>,
    /// Its user's object.
    pub user: Arc<User>,
}

/// A share of the connections, for fan-out threads that split every
/// message between them: each shard of the connection table is one lane's
/// (shard `s` is lane `s % count`'s), and a connection stays in its shard,
/// so in one lane, for its life: messages to users and channels reach it
/// from one thread, in order. (A lone broadcast's shards go to whichever
/// lane claims them; the fan-out keeps order around it, see
/// `bus::fanout`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lane {
    /// Which share.
    pub index: u64,
    /// How many shares (at least 1).
    pub count: u64,
}

impl Lane {
    /// Every connection: one lane of one (a job delivered at once by whoever
    /// hands it over, see `bus::fanout`).
    pub(crate) const ALL: Lane = Lane { index: 0, count: 1 };

    /// Whether connection `id` is in this lane.
    pub(crate) fn owns(self, id: ConnId) -> bool {
        self.owns_shard(shard_of(id))
    }

    /// Whether shard `shard` of the connection table is this lane's.
    pub(crate) fn owns_shard(self, shard: usize) -> bool {
        shard as u64 % self.count == self.index
    }

    /// The shards of the connection table that are this lane's.
    pub(crate) fn shards(self) -> impl Iterator<Item = Piece> {
        (0..SHARDS)
            .filter(move |shard| self.owns_shard(*shard))
            .map(Piece::shard)
    }
}

/// Deliveries made by one fan-out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delivered {
    /// Frames queued, by transport index.
    pub queued: [u64; 3],
    /// Connections closed as slow consumers.
    pub slow: u64,
}

/// Every user object and connection of this process.
#[derive(Debug)]
pub(crate) struct Registry {
    users: DashMap<UserId, Arc<User>>,
    conns: ConnTable,
    poll_sessions: DashMap<u64, Arc<User>>,
    channels: ChannelIndex,
    /// Connection ids, dense: fan-out lanes split connections by id.
    next_id: AtomicU64,
    /// User handles (naming long-poll sessions), counted apart
    /// so a new user does not take a connection id: with one connection
    /// per user, shared numbering made every id odd, and one lane of two
    /// got every connection.
    next_handle: AtomicU64,
    open: [AtomicUsize; 3],
    total: AtomicUsize,
    limits: Limits,
    counters: Counters,
}

impl Registry {
    /// An empty registry.
    pub(crate) fn new(limits: Limits, counters: Counters) -> Self {
        Self {
            users: DashMap::new(),
            conns: ConnTable::default(),
            poll_sessions: DashMap::new(),
            channels: ChannelIndex::default(),
            next_id: AtomicU64::new(1),
            next_handle: AtomicU64::new(1),
            open: Default::default(),
            total: AtomicUsize::new(0),
            limits,
            counters,
        }
    }

    /// Whether one more connection fits under `max_connections`.
    pub(crate) fn has_room(&self) -> bool {
        self.total.load(Ordering::Relaxed) < self.limits.max_connections
    }

    /// Adds a connection for `user` in `channels`, creating the user's
    /// object on first contact. Past `max_connections_per_user` the user's
    /// oldest connection is queued a `replaced` close. A poll ends the
    /// user's polls the fan-out answered ([`end_answered_polls`]).
    pub(crate) fn attach(
        &self,
        user: UserId,
        transport: Transport,
        token_expires_at: Option<u64>,
        now_ms: u64,
        channels: Vec<Channel>,
    ) -> Result<Attached, AtCapacity> {
        let max = self.limits.max_connections;
        if self.total.fetch_add(1, Ordering::AcqRel) >= max {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(AtCapacity(max));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::new(
            id,
            user.clone(),
            transport,
            self.limits.outbound_queue,
            token_expires_at,
            now_ms,
        ));
        let (owner, replaced) = {
            let entry = self.users.entry(user.clone()).or_insert_with(|| {
                let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
                Arc::new(User::new(user, handle))
            });
            let mut conns = entry.conns.lock();
            if transport == Transport::Poll {
                end_answered_polls(&conns);
            }
            conns.push(Arc::clone(&conn));
            let over = conns.len() > self.limits.max_connections_per_user;
            (Arc::clone(entry.value()), over.then(|| conns.remove(0)))
        };
        self.conns.insert(Arc::clone(&conn));
        if !channels.is_empty() {
            let mut list = conn.channels.lock();
            for channel in &channels {
                self.channels.join(channel, &conn);
            }
            conn.set_channels(&mut list, channels);
        }
        self.open[transport.index()].fetch_add(1, Ordering::Relaxed);
        let ended = replaced.as_ref().is_some_and(|old| {
            old.outbound
                .push_end(Outgoing::Close(CloseReason::Replaced))
        });
        if ended {
            self.counters.evicted(Eviction::Replaced, 1);
        }
        Ok(Attached { conn, user: owner })
    }

    /// Removes a connection; the user's object goes with its last one
    /// unless a long-poll session keeps it. Idempotent.
    pub(crate) fn detach(&self, conn: &Conn) {
        if self.conns.remove(conn.id).is_none() {
            return;
        }
        self.total.fetch_sub(1, Ordering::AcqRel);
        self.open[conn.transport.index()].fetch_sub(1, Ordering::Relaxed);
        // After the removal above: a `subscribe` that takes the list's lock
        // from now on finds the connection gone and joins nothing.
        for channel in conn.channels.lock().iter() {
            self.channels.leave(channel, conn.id);
        }
        if let Entry::Occupied(entry) = self.users.entry(conn.user.clone()) {
            let empty = {
                let mut conns = entry.get().conns.lock();
                conns.retain(|c| c.id != conn.id);
                conns.is_empty()
            };
            if empty && !entry.get().has_poll_session() {
                entry.remove();
            }
        }
    }

    /// Puts a live connection in `channel` and queues `subscribed`: the
    /// channel's messages fanned out from now on follow it. Already in it:
    /// answers `subscribed` again and changes nothing.
    pub(crate) fn subscribe(
        &self,
        conn: &Arc<Conn>,
        channel: &Channel,
    ) -> Result<(), TooManyChannels> {
        let mut list = conn.channels.lock();
        if !list.contains(channel) {
            let max = self.limits.max_channels_per_connection;
            if list.len() >= max {
                return Err(TooManyChannels(max));
            }
            list.push(channel.clone());
            conn.channels_changed(&list);
            // Under the list's lock: a detach that removed the connection
            // first leaves what the list holds once it gets the lock.
            if self.conns.contains(conn.id) {
                self.channels.join(channel, conn);
            }
        }
        conn.outbound
            .push_frame(&Frame::subscribed(channel.as_str()));
        Ok(())
    }

    /// Takes a connection out of `channel` and queues `unsubscribed`; no
    /// message of the channel is queued after it.
    pub(crate) fn unsubscribe(&self, conn: &Conn, channel: &Channel) {
        let mut list = conn.channels.lock();
        if let Some(at) = list.iter().position(|c| c == channel) {
            list.remove(at);
            conn.channels_changed(&list);
            self.channels.leave(channel, conn.id);
        }
        conn.outbound
            .push_frame(&Frame::unsubscribed(channel.as_str()));
    }

    /// The connections in `channel` on this node.
    pub(crate) fn channel_members(&self, channel: &Channel) -> Vec<Arc<Conn>> {
        self.channels.members(channel, |_| true)
    }

    /// How many connections are in `channel` on this node.
    pub(crate) fn channel_size(&self, channel: &Channel) -> usize {
        self.channels.size(channel)
    }

    /// Connections and users in `channel` on this node.
    pub(crate) fn channel_presence(&self, channel: &Channel) -> ChannelPresence {
        self.channels.presence(channel)
    }

    /// Sends every later channel join and leave to `watcher`.
    pub(crate) fn watch_channels(
        &self,
        watcher: tokio::sync::mpsc::UnboundedSender<MembershipChange>,
    ) {
        self.channels.watch(watcher);
    }

    /// Every channel here with its users' connection counts.
    pub(crate) fn channel_snapshot(&self) -> Vec<(Channel, Vec<(UserId, usize)>)> {
        self.channels.snapshot()
    }

    /// Channels with at least one connection here.
    pub(crate) fn channels(&self) -> usize {
        self.channels.len()
    }

    /// Connection-channel pairs here.
    pub(crate) fn subscriptions(&self) -> usize {
        self.channels.subscriptions()
    }

    /// Records that `user` has a long-poll session (named by its handle).
    pub(crate) fn add_poll_session(&self, user: &Arc<User>) {
        self.poll_sessions.insert(user.handle, Arc::clone(user));
    }

    /// The user whose long-poll session `handle` names.
    pub(crate) fn poll_session(&self, handle: u64) -> Option<Arc<User>> {
        self.poll_sessions.get(&handle).map(|u| Arc::clone(&u))
    }

    /// Ends a user's long-poll session if its entry is still `key` armed
    /// as `seq` (a poll that re-armed it since keeps it alive). The object
    /// goes unless connections still use it. Returns whether it ended; the
    /// caller then frees the entry.
    pub(crate) fn end_poll_session(&self, user: &Arc<User>, key: TimerKey, seq: u32) -> bool {
        {
            let mut session = user.poll_session.lock();
            if session.timer != Some(key) || session.seq != seq {
                return false;
            }
            session.timer = None;
            // Under the session lock: a poll re-arming after this point
            // finds no entry, makes a new one and registers it again.
            self.poll_sessions.remove(&user.handle);
        }
        if let Entry::Occupied(entry) = self.users.entry(user.id.clone())
            && Arc::ptr_eq(entry.get(), user)
            && entry.get().conns.lock().is_empty()
            && !entry.get().has_poll_session()
        {
            entry.remove();
        }
        true
    }

    /// A live connection by number.
    pub(crate) fn conn(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.conns.get(id)
    }

    /// A user's object, if it is alive.
    pub(crate) fn user(&self, id: &UserId) -> Option<Arc<User>> {
        self.users.get(id).map(|u| Arc::clone(&u))
    }

    /// Open connections overall.
    pub(crate) fn connections(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Open connections of one transport.
    pub(crate) fn connections_of(&self, transport: Transport) -> usize {
        self.open[transport.index()].load(Ordering::Relaxed)
    }

    /// User objects alive.
    pub(crate) fn users(&self) -> usize {
        self.users.len()
    }

    /// Each user with connections, and how many (presence snapshots).
    pub(crate) fn connection_counts(&self) -> Vec<(UserId, usize)> {
        self.users
            .iter()
            .map(|u| (u.key().clone(), u.conns.lock().len()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Every live connection, for drain and shutdown.
    pub(crate) fn all_connections(&self) -> Vec<Arc<Conn>> {
        self.conns.all()
    }

    /// Delivers `frame` to every live connection in `pieces` of the
    /// connection table (a lane's shards: [`Lane::shards`]; or those it
    /// claims of a broadcast the lanes share: `table::Claims`). Each of these
    /// delivering methods calls `after_delivery` after a delivery that
    /// went out or was queued (it may have woken a reader or the
    /// connection's task), with no lock held: the fan-out lets what its
    /// first write woke run there.
    pub(crate) fn broadcast(
        &self,
        frame: &Frame,
        pieces: impl IntoIterator<Item = Piece>,
        after_delivery: &mut impl FnMut(),
    ) -> Delivered {
        // Shard by shard: the first write goes out as soon as one shard
        // is copied, and no socket is written under a shard's lock
        // (connects and disconnects would wait for it).
        let mut delivered = Delivered::default();
        self.conns.walk(pieces, |conn| {
            if queue(conn, frame, &mut delivered) {
                after_delivery();
            }
        });
        self.count(delivered)
    }

    /// Delivers `frame` to every connection of `lane` of each of `users`.
    pub(crate) fn send_to(
        &self,
        users: &[UserId],
        frame: &Frame,
        lane: Lane,
        after_delivery: &mut impl FnMut(),
    ) -> Delivered {
        let mut delivered = Delivered::default();
        for user in users {
            // The user object is cloned out of the map so no shard lock is
            // held while writing; its connection list stays locked (a user
            // has a handful, and only its own attach and detach wait).
            let Some(user) = self.user(user) else {
                continue;
            };
            let mut any = false;
            for conn in user.conns.lock().iter() {
                if lane.owns(conn.id) {
                    any |= queue(conn, frame, &mut delivered);
                }
            }
            if any {
                after_delivery();
            }
        }
        self.count(delivered)
    }

    /// Delivers `frame` (a message of `channel`) to every connection of
    /// `lane` in the channel.
    pub(crate) fn send_to_channel(
        &self,
        channel: &Channel,
        frame: &Frame,
        lane: Lane,
        after_delivery: &mut impl FnMut(),
    ) -> Delivered {
        let members = self.channels.members(channel, |id| lane.owns(id));
        self.send_to_members(channel, &members, frame, after_delivery)
    }

    /// Delivers `frame` (a message of `channel`) to those of `members`
    /// still in the channel.
    pub(crate) fn send_to_members(
        &self,
        channel: &Channel,
        members: &[Arc<Conn>],
        frame: &Frame,
        after_delivery: &mut impl FnMut(),
    ) -> Delivered {
        let mut delivered = Delivered::default();
        for conn in members {
            // The list is the authority: an `unsubscribe` since the
            // snapshot has queued its answer, and nothing may follow it.
            let list = conn.channels.lock();
            let went = list.contains(channel) && queue(conn, frame, &mut delivered);
            drop(list);
            if went {
                after_delivery();
            }
        }
        self.count(delivered)
    }

    fn count(&self, delivered: Delivered) -> Delivered {
        for (counter, n) in self.counters.delivered.iter().zip(delivered.queued) {
            if n > 0 {
                counter.increment(n);
            }
        }
        if delivered.slow > 0 {
            self.counters.evicted(Eviction::Slow, delivered.slow);
        }
        delivered
    }
}

/// Ends a user's polls (`conns`, its list) that the fan-out answered
/// ([`super::outbound::Outbound::is_answered`]) and whose tasks have not
/// woken since: the user polls again, maybe on another connection, so
/// those polls are over. Their tasks release them and wait for their
/// connection's next request.
fn end_answered_polls(conns: &[Arc<Conn>]) {
    for conn in conns {
        if conn.transport == Transport::Poll && conn.outbound.is_answered() {
            conn.kill();
        }
    }
}

/// Gives `frame` to `conn`, counted in `delivered`: whether it went out or
/// was queued.
fn queue(conn: &Conn, frame: &Frame, delivered: &mut Delivered) -> bool {
    // The connection's cursor, not the message's: with channels it covers
    // them too.
    let own = conn.frame_for(frame);
    match conn.outbound.push_frame(own.as_ref().unwrap_or(frame)) {
        Pushed::Queued | Pushed::Written => {
            delivered.queued[conn.transport.index()] += 1;
            true
        }
        Pushed::Overflowed => {
            delivered.slow += 1;
            false
        }
        Pushed::Closing | Pushed::Covered => false,
    }
}
