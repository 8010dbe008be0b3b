//! What every connection task shares, below the dispatcher and the
//! transports: the client trait, frame handling, churn timing and
//! reconnect back-off.

use std::time::Duration;

use tokio::time::Instant;

use super::Ctx;
use crate::frames::{self, Inbound};
use crate::rng::Rng;

/// Longest a handshake (TCP connect to upgrade answer) may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Consecutive failed reconnects after which a connection gives up,
/// unless paced (see [`gives_up`]).
pub(super) const MAX_RECONNECT_FAILURES: u32 = 20;
/// How long a clean close waits for the server's answer.
pub(super) const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// What a connection does after a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// Keep reading.
    Continue,
    /// Open a new connection with the cursor (churn).
    Reconnect,
    /// The gateway sent a `reconnect` frame: open a new connection with
    /// its cursor.
    Told {
        /// The frame's `retry_ms`.
        retry_ms: u64,
        /// Its reason was `draining`: the node is going away.
        draining: bool,
    },
    /// The server ended the connection without a close frame.
    Dropped,
    /// Stop: the server closed it, or the worker is done.
    Closed,
}

/// A client that holds one connection at a time and may reconnect with
/// its cursor (WebSocket, SSE).
pub(super) trait Client: Sized {
    /// Opens a connection for `user` to gateway node `node`, resuming
    /// from `cursor` if given.
    async fn open(
        ctx: &Ctx,
        i: usize,
        node: usize,
        user: &str,
        cursor: Option<&str>,
    ) -> anyhow::Result<Self>;

    /// Reads until the connection ends, keeping `cursor`; says what next.
    async fn read(self, ctx: &Ctx, i: usize, cursor: &mut Option<String>, rng: &mut Rng) -> Flow;
}

/// Counts one inbound frame of connection `i` and keeps its cursor.
pub(super) fn on_frame(
    ctx: &Ctx,
    i: usize,
    frame: Inbound<'_>,
    cursor: &mut Option<String>,
) -> Flow {
    let now = frames::now_us();
    let mut tally = ctx.tally.borrow_mut();
    match frame {
        Inbound::Message {
            seq,
            ts_us,
            cursor: c,
            channel,
        } => {
            keep(cursor, c.as_deref());
            tally.message(i, seq, channel.as_deref(), ts_us, now);
            Flow::Continue
        }
        Inbound::Recover {
            complete,
            cursor: c,
        } => {
            keep(cursor, c.as_deref());
            tally.recovered(i, complete);
            Flow::Continue
        }
        Inbound::Reconnect {
            cursor: c,
            reason,
            retry_ms,
        } => {
            keep(cursor, c.as_deref());
            tally.closed(&format!("reconnect:{reason}"));
            Flow::Told {
                retry_ms,
                draining: reason == "draining",
            }
        }
        Inbound::Close { reason } => {
            tally.closed(&reason);
            Flow::Closed
        }
        Inbound::Other => Flow::Continue,
    }
}

/// Keeps `seen` as the connection's cursor in the string it already
/// holds: a cursor comes with every message, and only the first is
/// allocated.
fn keep(cursor: &mut Option<String>, seen: Option<&str>) {
    let Some(seen) = seen else { return };
    match cursor {
        Some(kept) => {
            kept.clear();
            kept.push_str(seen);
        }
        None => *cursor = Some(seen.to_owned()),
    }
}

/// The first attempt of connection `i` finished; `Ok(handshake time)` or
/// the error.
pub(super) fn first_attempt(ctx: &Ctx, i: usize, result: Result<Duration, String>) {
    let mut tally = ctx.tally.borrow_mut();
    match result {
        Ok(took) => tally.opened(i, took.as_micros() as u64),
        Err(err) => tally.failed(&err),
    }
    ctx.attempts_done.set(ctx.attempts_done.get() + 1);
}

/// A reconnect failed: counts it and waits a back-off; `false` when the
/// connection should give up.
pub(super) async fn reconnect_failed(ctx: &Ctx, failures: u32, err: &str) -> bool {
    {
        let mut tally = ctx.tally.borrow_mut();
        tally.reconnected(false);
        if err.contains("503") {
            tally.refused_503();
        }
        tally.error(err);
    }
    backoff(ctx, failures).await
}

/// Waits after the `failures`-th failure in a row; `false` when the
/// connection should give up instead.
pub(super) async fn backoff(ctx: &Ctx, failures: u32) -> bool {
    if gives_up(ctx.spec.paced, failures, ctx.is_past_deadline()) {
        return false;
    }
    let wait = if ctx.spec.paced {
        jitter_backoff(failures, &mut ctx.rng.borrow_mut())
    } else {
        Duration::from_millis(50 * u64::from(failures))
    };
    tokio::time::sleep(wait).await;
    true
}

/// Whether a connection stops trying after its `failures`-th failure in
/// a row: past the run's deadline, or after [`MAX_RECONNECT_FAILURES`]
/// unless `paced`. A paced client retries until the deadline, as
/// `pushgate.js` retries until closed: a storm's clients refused `503`
/// many times in a row by a saturated connect proxy must come back, not
/// be counted lost.
pub(super) fn gives_up(paced: bool, failures: u32, past_deadline: bool) -> bool {
    past_deadline || (!paced && failures >= MAX_RECONNECT_FAILURES)
}

/// First ceiling of the paced back-off, ms (`pushgate.js`'s
/// `backoffBaseMs`).
const PACED_BACKOFF_BASE_MS: u64 = 500;
/// Its cap, ms (`backoffMaxMs`).
const PACED_BACKOFF_MAX_MS: u64 = 30_000;
/// Most a `reconnect` frame's wait grows by its jitter, ms.
const PACED_RETRY_JITTER_MAX_MS: u64 = 5_000;

/// The paced wait after the `failures`-th failure in a row (from 1): full
/// jitter, 0 to 500 ms * 2^(failures - 1), at most 30 s, as `pushgate.js`'s
/// `backoffDelay`.
pub(super) fn jitter_backoff(failures: u32, rng: &mut Rng) -> Duration {
    let exponent = failures.saturating_sub(1).min(30);
    let ceiling = (PACED_BACKOFF_BASE_MS << exponent).min(PACED_BACKOFF_MAX_MS);
    Duration::from_millis(rng.between(0, ceiling.saturating_sub(1)))
}

/// The paced wait after a `reconnect` frame: its `retry_ms` plus up to
/// half again (at most 5 s more), as `pushgate.js`'s `reconnectDelay`.
pub(super) fn told_delay(retry_ms: u64, rng: &mut Rng) -> Duration {
    let jitter = (retry_ms / 2).min(PACED_RETRY_JITTER_MAX_MS);
    let extra = if jitter == 0 {
        0
    } else {
        rng.between(0, jitter - 1)
    };
    Duration::from_millis(retry_ms.saturating_add(extra))
}

/// When a new connection of `ctx` should churn (reconnect), if it churns.
pub(super) fn churn_at(ctx: &Ctx, rng: &mut Rng) -> Instant {
    match ctx.spec.churn {
        Some(churn) => {
            Instant::now() + Duration::from_millis(rng.between(churn.min_ms, churn.max_ms))
        }
        None => ctx.deadline,
    }
}

/// Whether connection `i`, holding `cursor`, should reconnect now: churn
/// is on, collecting has not begun, it has a cursor to resume from and it
/// still misses messages.
pub(super) fn should_churn(ctx: &Ctx, i: usize, cursor: &Option<String>) -> bool {
    ctx.spec.churn.is_some()
        && !ctx.stopping.get()
        && cursor.is_some()
        && !ctx.tally.borrow().is_complete(i)
}

/// A per-connection generator.
pub(super) fn rng_for(ctx: &Ctx, i: usize) -> Rng {
    Rng::new(ctx.spec.seed ^ ((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_waits_are_those_of_pushgate_js() {
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            let told = told_delay(1000, &mut rng).as_millis();
            assert!((1000..1500).contains(&told), "{told}");
            let big = told_delay(60_000, &mut rng).as_millis();
            assert!((60_000..65_000).contains(&big), "{big}");
            assert!(jitter_backoff(1, &mut rng) < Duration::from_millis(500));
            assert!(jitter_backoff(3, &mut rng) < Duration::from_millis(2000));
            assert!(jitter_backoff(40, &mut rng) < Duration::from_secs(30));
        }
        assert_eq!(told_delay(0, &mut rng), Duration::ZERO);
        assert_eq!(told_delay(1, &mut rng), Duration::from_millis(1));
    }

    #[test]
    fn only_the_deadline_stops_a_paced_client() {
        let max = MAX_RECONNECT_FAILURES;
        // (paced, failures, past the deadline) -> gives up
        let cases = [
            (false, 1, false, false),
            (false, max - 1, false, false),
            (false, max, false, true),
            (false, 1, true, true),
            (true, max, false, false),
            (true, 10 * max, false, false),
            (true, 1, true, true),
        ];
        for (paced, failures, past, want) in cases {
            assert_eq!(
                gives_up(paced, failures, past),
                want,
                "{paced} {failures} {past}"
            );
        }
    }
}
