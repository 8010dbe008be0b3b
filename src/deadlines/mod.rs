//! Every deadline in the gateway, armed and fired in one room.
//!
//! Each connection has one timer entry for its whole life (pings, idle
//! eviction, token expiry, the grace of its close); each long-poll user
//! has one session entry, moved between its parked polls' deadlines and
//! the session's expiry; one more entry sweeps expired history. What an
//! entry's payload means is [`payload`]; what a fired entry decides is
//! [`decide`] (pure, tested on plain values); [`fire`] reads the state,
//! asks `decide` and acts. Every action queues and returns: nothing blocks
//! the driver.

pub(crate) mod decide;
mod fire;
mod payload;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use self::decide::Timing;
pub(crate) use self::fire::Expiry;
use self::payload::Payload;
use crate::bus::Bus;
use crate::clamp;
use crate::config::SessionConfig;
use crate::metrics::Counters;
use crate::protocol::Transport;
use crate::registry::{Conn, Registry, User};
use crate::wheel::{Timer, TimerKey};

/// How long a connection may take to finish closing once its end was
/// queued before its task is killed outright.
pub const CLOSE_GRACE: Duration = Duration::from_millis(decide::CLOSE_GRACE_MS);

/// How often expired history and idempotency keys are dropped.
pub(crate) const HISTORY_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Wall-clock seconds since the Unix epoch (token expiry is wall time).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Arms, moves and frees the gateway's timer entries.
#[derive(Debug)]
pub(crate) struct Deadlines {
    timer: Arc<Timer<u64>>,
    registry: Arc<Registry>,
    bus: Arc<dyn Bus>,
    counters: Counters,
    timing: Timing,
    sweep: OnceLock<TimerKey>,
}

impl Deadlines {
    /// Deadlines on `timer` for the connections of `registry`, timed by
    /// `[session]`; the history sweep runs on `bus`.
    pub(crate) fn new(
        timer: Arc<Timer<u64>>,
        registry: Arc<Registry>,
        bus: Arc<dyn Bus>,
        counters: Counters,
        session: &SessionConfig,
    ) -> Self {
        let ms = clamp::millis;
        Self {
            timer,
            registry,
            bus,
            counters,
            timing: Timing {
                ping_interval_ms: ms(session.ping_interval()),
                idle_timeout_ms: ms(session.idle_timeout()),
                poll_timeout_ms: ms(session.poll_timeout()),
                session_ttl_ms: ms(session.session_ttl()),
            },
            sweep: OnceLock::new(),
        }
    }

    /// Now, in milliseconds on the timer's clock.
    pub(crate) fn now_ms(&self) -> u64 {
        self.timer.clock().millis_at(Instant::now())
    }

    /// When a poll parked now times out (ms on the timer's clock).
    pub(crate) fn poll_deadline_ms(&self) -> u64 {
        self.now_ms().saturating_add(self.timing.poll_timeout_ms)
    }

    fn instant_at(&self, ms: u64) -> Instant {
        self.timer.clock().instant_at_millis(ms)
    }

    /// Arms a new connection's entry: its first ping (or its token's
    /// expiry, or its idle eviction, if sooner).
    pub(crate) fn arm_connection(&self, conn: &Conn) {
        let now_ms = self.now_ms();
        let at = self.next_conn_deadline(conn, now_ms);
        let shard = self.timer.shard_of(conn.id);
        let key = self
            .timer
            .insert(shard, self.instant_at(at), Payload::Conn(conn.id).encode());
        conn.set_timer(key);
    }

    fn next_conn_deadline(&self, conn: &Conn, now_ms: u64) -> u64 {
        decide::next_conn_deadline(
            conn.last_seen_ms(),
            conn.token_expires_at(),
            now_ms,
            unix_now(),
            &self.timing,
        )
    }

    /// Frees a connection's entry (it ended).
    pub(crate) fn forget(&self, conn: &Conn) {
        if let Some(key) = conn.timer() {
            self.timer.remove(key);
        }
    }

    /// Parks a poll of `user` until `deadline_ms`: the user's one session
    /// entry is created on the first poll and only moved afterwards, to the
    /// earliest deadline among the user's parked polls.
    ///
    /// Lock order: never hold a user's session lock while taking its
    /// connection list, or the reverse.
    pub(crate) fn park_poll(&self, user: &Arc<User>, conn: &Conn, deadline_ms: u64) {
        conn.set_deadline_ms(deadline_ms);
        let earliest = user
            .connections()
            .iter()
            .map(|c| c.deadline_ms())
            .fold(deadline_ms, u64::min);
        let at = self.instant_at(earliest);
        let mut session = user.poll_session.lock();
        if let Some(Ok(seq)) = session.timer.map(|key| self.timer.reset(key, at)) {
            session.seq = seq;
            return;
        }
        let shard = self.timer.shard_of(user.handle);
        let payload = Payload::Session(user.handle).encode();
        session.timer = Some(self.timer.insert(shard, at, payload));
        session.seq = 0;
        drop(session);
        self.registry.add_poll_session(user);
    }

    /// A poll of `user` ended: unless another is parked, the session entry
    /// moves to the session's expiry.
    pub(crate) fn poll_done(&self, user: &User) {
        let now_ms = self.now_ms();
        let parked = user
            .connections()
            .iter()
            .any(|c| c.transport == Transport::Poll);
        let mut session = user.poll_session.lock();
        session.idle_since_ms = now_ms;
        if let (Some(key), false) = (session.timer, parked) {
            let at = self.instant_at(now_ms.saturating_add(self.timing.session_ttl_ms));
            if let Ok(seq) = self.timer.reset(key, at) {
                session.seq = seq;
            }
        }
    }

    /// Arms (or re-arms: one entry for the process's life) the periodic
    /// history sweep.
    pub(crate) fn arm_history_sweep(&self) {
        let at = Instant::now() + HISTORY_SWEEP_INTERVAL;
        match self.sweep.get() {
            Some(key) => {
                let _ = self.timer.reset(*key, at);
            }
            None => {
                let payload = Payload::HistorySweep.encode();
                let _ = self.sweep.set(self.timer.insert(0, at, payload));
            }
        }
    }
}
