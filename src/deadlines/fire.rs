//! The effectful side of a fired entry: read the connection's or the
//! session's state, ask [`decide`](super::decide), act. Client activity
//! never touches the wheel: a connection's entry reads the last-seen time
//! when it fires and re-arms.

use std::sync::Arc;

use super::decide::{self, ConnAction, ConnState, SessionAction};
use super::payload::Payload;
use super::{Deadlines, unix_now};
use crate::metrics::Eviction;
use crate::protocol::Transport;
use crate::registry::{Conn, Outgoing, Pushed, User};
use crate::wheel::{ExpirySink, Fired};

/// The wheel driver's sink: every fired entry of the gateway lands here.
#[derive(Debug)]
pub(crate) struct Expiry {
    deadlines: Arc<Deadlines>,
}

impl Expiry {
    /// Acts on the entries `deadlines` armed.
    pub(crate) fn new(deadlines: Arc<Deadlines>) -> Self {
        Self { deadlines }
    }

    fn conn_fired(&self, conn: &Conn, now_ms: u64) {
        let d = &self.deadlines;
        let clock = d.timer.clock();
        let state = ConnState {
            closing_since_ms: conn.outbound.closing_since().map(|at| clock.millis_at(at)),
            last_seen_ms: conn.last_seen_ms(),
            token_expires_at: conn.token_expires_at(),
        };
        let next_ms = match decide::conn(&state, now_ms, unix_now(), &d.timing) {
            ConnAction::Kill => {
                conn.kill();
                return;
            }
            ConnAction::Wait(at) => at,
            ConnAction::End {
                reason,
                eviction,
                check_at_ms,
            } => {
                if conn.outbound.push_end(Outgoing::Close(reason)) {
                    d.counters.evicted(eviction, 1);
                }
                check_at_ms
            }
            ConnAction::Ping => {
                let pinged = conn.outbound.push_ping();
                // An event stream's client never sends: the socket taking
                // the ping at once (room in its buffer, so the client reads)
                // is its sign of life. Queued, its task touches the
                // connection once the client takes it.
                if pinged == Pushed::Written && conn.transport == Transport::Sse {
                    conn.touch(now_ms);
                }
                d.next_conn_deadline(conn, now_ms)
            }
        };
        if let Some(Ok(seq)) = conn
            .timer()
            .map(|key| d.timer.reset(key, d.instant_at(next_ms)))
        {
            conn.set_timer_seq(seq);
        }
    }

    /// A session entry fired: parked polls past their deadline end (each
    /// poll's task answers `reconnect` and calls `poll_done`), then the
    /// entry moves on, or the session is evicted.
    fn session_fired(&self, user: &Arc<User>, seq: u32, now_ms: u64) {
        let d = &self.deadlines;
        let polls: Vec<Arc<Conn>> = user
            .connections()
            .into_iter()
            .filter(|c| c.transport == Transport::Poll)
            .collect();
        for poll in &polls {
            if decide::poll_is_due(poll.deadline_ms(), now_ms) {
                poll.kill();
            }
        }
        let deadlines: Vec<u64> = polls.iter().map(|p| p.deadline_ms()).collect();
        let mut session = user.poll_session.lock();
        let Some(key) = session.timer.filter(|_| session.seq == seq) else {
            return;
        };
        match decide::session(&deadlines, session.idle_since_ms, now_ms, &d.timing) {
            SessionAction::Rearm(at) => {
                if let Ok(seq) = d.timer.reset(key, d.instant_at(at)) {
                    session.seq = seq;
                }
            }
            SessionAction::End => {
                drop(session);
                if d.registry.end_poll_session(user, key, seq) {
                    d.timer.remove(key);
                    d.counters.evicted(Eviction::SessionTtl, 1);
                }
            }
            SessionAction::Leave => {}
        }
    }

    fn sweep(&self, now_ms: u64) {
        self.deadlines.bus.sweep(now_ms);
        self.deadlines.arm_history_sweep();
    }
}

impl ExpirySink<u64> for Expiry {
    fn expired(&mut self, batch: &[Fired<u64>]) {
        let now_ms = self.deadlines.now_ms();
        let registry = &self.deadlines.registry;
        for fired in batch {
            match Payload::decode(fired.value) {
                Payload::HistorySweep => self.sweep(now_ms),
                Payload::Session(handle) => {
                    if let Some(user) = registry.poll_session(handle) {
                        self.session_fired(&user, fired.seq, now_ms);
                    }
                }
                Payload::Conn(id) => {
                    if let Some(conn) = registry.conn(id)
                        && conn.timer() == Some(fired.key)
                        && conn.is_current_timer(fired.seq)
                    {
                        self.conn_fired(&conn, now_ms);
                    }
                }
            }
        }
    }
}
