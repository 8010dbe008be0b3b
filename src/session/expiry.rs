//! What happens when a timer entry fires: a connection's, a long-poll
//! session's, or the history sweep's.
//!
//! A long-poll user's session entry is moved between the deadline of its
//! parked poll (then the poll is answered with `reconnect`) and the
//! session's expiry (then the user object is evicted and its entry freed).
//!
//! One entry per connection does everything: it pings the client every
//! `ping_interval`, evicts it after `idle_timeout` without a frame from the
//! client (a `close` frame `idle`, then 4001), closes it when its token
//! expires (`token_expired`, 4004), and kills a connection whose close did
//! not complete within a grace period. Client activity never touches the
//! wheel: the entry reads the last-seen time when it fires and re-arms.
//! Every action here queues and returns; nothing blocks the driver.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clamp;
use crate::gateway::{Gateway, HISTORY_SWEEP};
use crate::metrics::Eviction;
use crate::session::registry::SESSION_TAG;
use crate::session::{Conn, Outgoing, Pushed, Transport, User};
use crate::transport::frame::CloseReason;
use crate::wheel::{ExpirySink, Fired};

/// How long a connection may take to finish closing once its end was
/// queued before its task is killed outright.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The expiry sink for connection entries.
#[derive(Debug)]
pub struct ConnExpiry {
    gateway: Arc<Gateway>,
}

impl ConnExpiry {
    /// Actions on `gateway`'s connections.
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self { gateway }
    }

    fn fired(&self, conn: &Conn, now: Instant) {
        let gw = &self.gateway;
        if let Some(since) = conn.outbound.closing_since() {
            // Its end was queued (here, by a fan-out, a replacement or the
            // drain): give the close its grace, then stop waiting.
            let grace_end = since + CLOSE_GRACE;
            if now >= grace_end {
                conn.kill();
            } else if let Some(Ok(seq)) = conn.timer().map(|key| gw.timer.reset(key, grace_end)) {
                conn.set_timer_seq(seq);
            }
            return;
        }
        let now_ms = gw.timer.clock().millis_at(now);
        let idle_for = Duration::from_millis(now_ms.saturating_sub(conn.last_seen_ms()));
        let expired = conn
            .token_expires_at
            .is_some_and(|exp| exp <= Gateway::unix_now());
        // Activity is a frame from the client, or (SSE, whose clients
        // cannot send) a chunk the client accepted.
        let end = if expired {
            Some((CloseReason::TokenExpired, Eviction::TokenExpired))
        } else if idle_for >= gw.config.session.idle_timeout() {
            Some((CloseReason::Idle, Eviction::Idle))
        } else {
            None
        };
        let deadline = match end {
            Some((reason, eviction)) => {
                if conn.outbound.push_end(Outgoing::Close(reason)) {
                    gw.counters.evicted(eviction, 1);
                }
                now + CLOSE_GRACE
            }
            None => {
                let pinged = conn.outbound.push_ping();
                // An event stream's client never sends: the socket taking
                // the ping at once (room in its buffer, so the client reads)
                // is its sign of life. Queued, its task touches the
                // connection once the client takes it.
                if pinged == Pushed::Written && conn.transport == Transport::Sse {
                    conn.touch(now_ms);
                }
                gw.next_deadline(conn, now)
            }
        };
        if let Some(Ok(seq)) = conn.timer().map(|key| gw.timer.reset(key, deadline)) {
            conn.set_timer_seq(seq);
        }
    }

    /// A session entry fired: time out parked polls past their deadline,
    /// or evict the session if no poll came within `session_ttl`.
    fn session_fired(&self, user: &Arc<User>, seq: u32, now: Instant) {
        let gw = &self.gateway;
        let now_ms = gw.timer.clock().millis_at(now);
        let polls: Vec<Arc<Conn>> = user
            .connections()
            .into_iter()
            .filter(|c| c.transport == Transport::Poll)
            .collect();
        let mut next_ms = u64::MAX;
        for poll in &polls {
            if poll.deadline_ms() <= now_ms {
                // The poll's task answers `reconnect` and calls `poll_done`.
                poll.kill();
            } else {
                next_ms = next_ms.min(poll.deadline_ms());
            }
        }
        let mut session = user.session.lock();
        let Some(key) = session.timer.filter(|_| session.seq == seq) else {
            return;
        };
        if polls.is_empty() {
            next_ms = clamp::millis_after(session.idle_since_ms, gw.config.session.session_ttl());
            if now_ms >= next_ms {
                drop(session);
                if gw.registry.end_session(user, key, seq) {
                    gw.timer.remove(key);
                    gw.counters.evicted(Eviction::SessionTtl, 1);
                }
                return;
            }
        }
        if next_ms != u64::MAX
            && let Ok(seq) = gw
                .timer
                .reset(key, gw.timer.clock().instant_at_millis(next_ms))
        {
            session.seq = seq;
        }
    }

    fn sweep(&self, now: Instant) {
        let gw = &self.gateway;
        gw.bus.sweep(gw.timer.clock().millis_at(now));
        gw.arm_history_sweep();
    }
}

impl ExpirySink<u64> for ConnExpiry {
    fn expired(&mut self, batch: &[Fired<u64>]) {
        let now = Instant::now();
        let registry = &self.gateway.registry;
        for fired in batch {
            if fired.value == HISTORY_SWEEP {
                self.sweep(now);
            } else if fired.value & SESSION_TAG != 0 {
                if let Some(user) = registry.session(fired.value) {
                    self.session_fired(&user, fired.seq, now);
                }
            } else if let Some(conn) = registry.conn(fired.value)
                && conn.timer() == Some(fired.key)
                && conn.is_current_timer(fired.seq)
            {
                self.fired(&conn, now);
            }
        }
    }
}
