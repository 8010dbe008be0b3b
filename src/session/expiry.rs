//! What happens when a connection's timer entry fires.
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

use crate::gateway::Gateway;
use crate::metrics::Eviction;
use crate::session::{Conn, Outgoing};
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
        if conn.outbound.is_closing() {
            // Its end was queued at least one deadline ago: stop waiting.
            conn.kill();
            return;
        }
        let now_ms = gw.timer.clock().millis_at(now);
        let idle_for = Duration::from_millis(now_ms.saturating_sub(conn.last_seen_ms()));
        let expired = conn
            .token_expires_at
            .is_some_and(|exp| exp <= Gateway::unix_now());
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
                conn.outbound.push_ping();
                gw.next_deadline(conn, now)
            }
        };
        if let Some(Ok(seq)) = conn.timer().map(|key| gw.timer.reset(key, deadline)) {
            conn.set_timer_seq(seq);
        }
    }
}

impl ExpirySink<u64> for ConnExpiry {
    fn expired(&mut self, batch: &[Fired<u64>]) {
        let now = Instant::now();
        for fired in batch {
            let Some(conn) = self.gateway.registry.conn(fired.value) else {
                continue;
            };
            if conn.timer() == Some(fired.key) && conn.is_current_timer(fired.seq) {
                self.fired(&conn, now);
            }
        }
    }
}
