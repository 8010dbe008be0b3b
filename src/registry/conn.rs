//! One live client connection (a WebSocket, an SSE stream, a parked poll).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::outbound::Outbound;
use crate::history::Coverage;
use crate::protocol::frame::Frame;
use crate::protocol::{Channel, Transport, UserId};

/// The cursor suffix of a connection in `channels`.
pub(crate) fn suffix_of(channels: &[Channel]) -> Arc<str> {
    Arc::from(Coverage::of(channels.iter().map(Channel::as_str)).suffix())
}
use crate::wheel::TimerKey;

/// A process-unique connection number; also the payload of its timer entry.
pub(crate) type ConnId = u64;

/// A connection: its queue, its activity clock and its timer entry.
///
/// Activity is one atomic store per client frame; the timer entry is
/// re-armed lazily from it when it fires, never on each frame.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Its number.
    pub id: ConnId,
    /// Whose it is.
    pub user: UserId,
    /// How it is connected.
    pub transport: Transport,
    /// Frames waiting for the connection's task.
    pub outbound: Outbound,
    /// When the client's token expires (seconds since the epoch; 0: no
    /// token). Moved later by a `refresh` frame.
    token_expires_at: AtomicU64,
    /// The channels it is in. The fan-out checks this list under its lock
    /// while queueing a channel's message (see `registry::channels`).
    pub(crate) channels: Mutex<Vec<Channel>>,
    /// What its channels add to every cursor it is sent (`~` and their
    /// coverage; empty in no channel). Changed under `channels`' lock.
    cursor_suffix: Mutex<Arc<str>>,
    /// Its token's `channels` claim, for a WebSocket's `subscribe` frames.
    claim: OnceLock<Box<[Channel]>>,
    last_seen_ms: AtomicU64,
    deadline_ms: AtomicU64,
    timer: OnceLock<TimerKey>,
    timer_seq: AtomicU32,
    killed: AtomicBool,
    kill: Notify,
}

impl Conn {
    /// A new connection, last seen at `now_ms` (on the timer's clock).
    pub(crate) fn new(
        id: ConnId,
        user: UserId,
        transport: Transport,
        outbound_limit: usize,
        token_expires_at: Option<u64>,
        now_ms: u64,
    ) -> Self {
        Self {
            id,
            user,
            transport,
            outbound: Outbound::new(outbound_limit),
            token_expires_at: AtomicU64::new(token_expires_at.unwrap_or(0)),
            channels: Mutex::new(Vec::new()),
            cursor_suffix: Mutex::new(Arc::from("")),
            claim: OnceLock::new(),
            last_seen_ms: AtomicU64::new(now_ms),
            deadline_ms: AtomicU64::new(u64::MAX),
            timer: OnceLock::new(),
            timer_seq: AtomicU32::new(0),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
        }
    }

    /// Sets the channels it is in (call with `channels`' lock held, the
    /// list in hand) and the cursor suffix that covers them.
    pub(crate) fn set_channels(&self, list: &mut Vec<Channel>, channels: Vec<Channel>) {
        *self.cursor_suffix.lock() = suffix_of(&channels);
        *list = channels;
    }

    /// Recomputes the cursor suffix after `list` changed (call with
    /// `channels`' lock held).
    pub(crate) fn channels_changed(&self, list: &[Channel]) {
        *self.cursor_suffix.lock() = suffix_of(list);
    }

    /// What its channels add to a cursor (`""` in no channel).
    pub(crate) fn cursor_suffix(&self) -> Arc<str> {
        Arc::clone(&self.cursor_suffix.lock())
    }

    /// `frame` as this connection receives it: with its cursor suffix
    /// when it is in channels (see `Frame::with_cursor_suffix`).
    pub(crate) fn frame_for(&self, frame: &Frame) -> Option<Frame> {
        let suffix = self.cursor_suffix.lock();
        (!suffix.is_empty()).then(|| frame.with_cursor_suffix(&suffix))
    }

    /// Records its token's `channels` claim (once).
    pub(crate) fn set_claim(&self, claim: Vec<Channel>) {
        if !claim.is_empty() {
            let _ = self.claim.set(claim.into_boxed_slice());
        }
    }

    /// Whether its token's claim names `channel`.
    pub(crate) fn claims(&self, channel: &Channel) -> bool {
        self.claim
            .get()
            .is_some_and(|claim| claim.contains(channel))
    }

    /// When the client's token expires (seconds since the epoch), if it
    /// has one.
    pub(crate) fn token_expires_at(&self) -> Option<u64> {
        Some(self.token_expires_at.load(Ordering::Relaxed)).filter(|exp| *exp > 0)
    }

    /// Moves the token's expiry to `expires_at` (a refreshed token); the
    /// connection's timer entry reads it when it next fires.
    pub(crate) fn refresh_token(&self, expires_at: u64) {
        self.token_expires_at.store(expires_at, Ordering::Relaxed);
    }

    /// Records client activity (any frame) at `now_ms`.
    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_seen_ms.store(now_ms, Ordering::Relaxed);
    }

    /// When the client was last heard from, in ms on the timer's clock.
    pub(crate) fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms.load(Ordering::Relaxed)
    }

    /// Sets when a parked poll times out (ms on the timer's clock).
    pub(crate) fn set_deadline_ms(&self, ms: u64) {
        self.deadline_ms.store(ms, Ordering::Relaxed);
    }

    /// When a parked poll times out (`u64::MAX`: not a parked poll).
    pub(crate) fn deadline_ms(&self) -> u64 {
        self.deadline_ms.load(Ordering::Relaxed)
    }

    /// Records the connection's timer entry (once).
    pub(crate) fn set_timer(&self, key: TimerKey) {
        let _ = self.timer.set(key);
    }

    /// The connection's timer entry, once armed.
    pub(crate) fn timer(&self) -> Option<TimerKey> {
        self.timer.get().copied()
    }

    /// Records the sequence number of the entry's latest arming.
    pub(crate) fn set_timer_seq(&self, seq: u32) {
        self.timer_seq.store(seq, Ordering::Relaxed);
    }

    /// Whether an expiry with `seq` is the entry's latest arming.
    pub(crate) fn is_current_timer(&self, seq: u32) -> bool {
        self.timer_seq.load(Ordering::Relaxed) == seq
    }

    /// Ends the connection's task at once, even mid-write (a peer that
    /// stopped reading cannot block its own close forever).
    pub(crate) fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.kill.notify_one();
    }

    /// Completes once [`Conn::kill`] was called.
    pub(crate) async fn killed(&self) {
        if !self.killed.load(Ordering::Relaxed) {
            self.kill.notified().await;
        }
    }
}
