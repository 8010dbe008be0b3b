//! What a fired entry decides, from plain values: no clock, no locks, no
//! I/O. Times are milliseconds on the timer's clock, token expiry is wall
//! time in seconds since the epoch. Every sum saturates, so no input (a
//! token's `exp` of `u64::MAX`, say) can overflow a deadline.

use crate::metrics::Eviction;
use crate::protocol::frame::CloseReason;

/// How long a connection may take to finish closing once its end was
/// queued before its task is killed outright.
pub(crate) const CLOSE_GRACE_MS: u64 = 5_000;

/// The times every connection and long-poll session lives by (`[session]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    /// Between pings of a live connection.
    pub(crate) ping_interval_ms: u64,
    /// Without a sign of life from the client before it is evicted.
    pub(crate) idle_timeout_ms: u64,
    /// How long a poll is parked before it is answered `reconnect`.
    pub(crate) poll_timeout_ms: u64,
    /// How long a long-poll session outlives its last poll.
    pub(crate) session_ttl_ms: u64,
}

/// What a connection's entry sees when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnState {
    /// When its end was queued, if it was.
    pub(crate) closing_since_ms: Option<u64>,
    /// When the client was last heard from.
    pub(crate) last_seen_ms: u64,
    /// When its token expires (seconds since the epoch), if it has one.
    pub(crate) token_expires_at: Option<u64>,
}

/// What to do with a connection whose entry fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnAction {
    /// Its close did not complete within the grace: end its task now.
    Kill,
    /// Its close is under way: look again at this time.
    Wait(u64),
    /// End it with a `close` frame, count the eviction, and kill it if it
    /// has not closed by `check_at_ms`.
    End {
        /// The `close` frame's reason.
        reason: CloseReason,
        /// The eviction counted.
        eviction: Eviction,
        /// When the close's grace runs out.
        check_at_ms: u64,
    },
    /// It lives: ping it and re-arm at [`next_conn_deadline`].
    Ping,
}

/// Decides for a connection whose entry fired at `now_ms`.
pub(crate) fn conn(state: &ConnState, now_ms: u64, unix_now: u64, timing: &Timing) -> ConnAction {
    if let Some(since) = state.closing_since_ms {
        let grace_end = since.saturating_add(CLOSE_GRACE_MS);
        return if now_ms >= grace_end {
            ConnAction::Kill
        } else {
            ConnAction::Wait(grace_end)
        };
    }
    let check_at_ms = now_ms.saturating_add(CLOSE_GRACE_MS);
    if state.token_expires_at.is_some_and(|exp| exp <= unix_now) {
        return ConnAction::End {
            reason: CloseReason::TokenExpired,
            eviction: Eviction::TokenExpired,
            check_at_ms,
        };
    }
    if now_ms.saturating_sub(state.last_seen_ms) >= timing.idle_timeout_ms {
        return ConnAction::End {
            reason: CloseReason::Idle,
            eviction: Eviction::Idle,
            check_at_ms,
        };
    }
    ConnAction::Ping
}

/// A live connection's next deadline: the soonest of its next ping, its
/// idle eviction and its token's expiry, never before `now_ms`.
pub(crate) fn next_conn_deadline(
    last_seen_ms: u64,
    token_expires_at: Option<u64>,
    now_ms: u64,
    unix_now: u64,
    timing: &Timing,
) -> u64 {
    let ping_at = now_ms.saturating_add(timing.ping_interval_ms);
    let idle_at = last_seen_ms.saturating_add(timing.idle_timeout_ms);
    let mut next = ping_at.min(idle_at);
    if let Some(exp) = token_expires_at {
        let left_ms = exp.saturating_sub(unix_now).saturating_mul(1000);
        next = next.min(now_ms.saturating_add(left_ms));
    }
    next.max(now_ms)
}

/// Whether a parked poll's deadline has come: its task then answers
/// `reconnect`.
pub(crate) fn poll_is_due(deadline_ms: u64, now_ms: u64) -> bool {
    deadline_ms <= now_ms
}

/// What to do with a long-poll session whose entry fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionAction {
    /// Move the entry to this time (the next parked poll's deadline, or
    /// the session's expiry).
    Rearm(u64),
    /// The session expired with no poll parked: evict it.
    End,
    /// Every parked poll is due: each poll's end moves the entry to the
    /// session's expiry.
    Leave,
}

/// Decides for a session whose entry fired at `now_ms`, given the
/// deadlines of the user's parked polls and when its last poll ended.
pub(crate) fn session(
    poll_deadlines: &[u64],
    idle_since_ms: u64,
    now_ms: u64,
    timing: &Timing,
) -> SessionAction {
    if poll_deadlines.is_empty() {
        let expires_at = idle_since_ms.saturating_add(timing.session_ttl_ms);
        return if now_ms >= expires_at {
            SessionAction::End
        } else {
            SessionAction::Rearm(expires_at)
        };
    }
    poll_deadlines
        .iter()
        .copied()
        .filter(|&deadline| !poll_is_due(deadline, now_ms))
        .min()
        .map_or(SessionAction::Leave, SessionAction::Rearm)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: Timing = Timing {
        ping_interval_ms: 25_000,
        idle_timeout_ms: 60_000,
        poll_timeout_ms: 30_000,
        session_ttl_ms: 120_000,
    };
    const UNIX_NOW: u64 = 1_800_000_000;

    fn live(last_seen_ms: u64, token_expires_at: Option<u64>) -> ConnState {
        ConnState {
            closing_since_ms: None,
            last_seen_ms,
            token_expires_at,
        }
    }

    #[test]
    fn a_live_connection_is_pinged() {
        let state = live(100_000, Some(UNIX_NOW + 1));
        assert_eq!(conn(&state, 100_000, UNIX_NOW, &TIMING), ConnAction::Ping);
        let quiet = live(100_000, None);
        assert_eq!(conn(&quiet, 159_999, UNIX_NOW, &TIMING), ConnAction::Ping);
    }

    #[test]
    fn a_quiet_connection_is_ended_idle_at_exactly_its_timeout() {
        let state = live(100_000, None);
        assert_eq!(
            conn(&state, 160_000, UNIX_NOW, &TIMING),
            ConnAction::End {
                reason: CloseReason::Idle,
                eviction: Eviction::Idle,
                check_at_ms: 165_000,
            }
        );
    }

    #[test]
    fn an_expired_token_ends_the_connection_before_idleness_is_asked() {
        for exp in [UNIX_NOW, UNIX_NOW - 1, 0] {
            let state = live(0, Some(exp));
            assert_eq!(
                conn(&state, 500_000, UNIX_NOW, &TIMING),
                ConnAction::End {
                    reason: CloseReason::TokenExpired,
                    eviction: Eviction::TokenExpired,
                    check_at_ms: 505_000,
                },
                "exp {exp}"
            );
        }
    }

    #[test]
    fn a_closing_connection_waits_out_its_grace_then_is_killed() {
        let state = ConnState {
            closing_since_ms: Some(10_000),
            last_seen_ms: 0,
            token_expires_at: Some(0),
        };
        assert_eq!(
            conn(&state, 12_000, UNIX_NOW, &TIMING),
            ConnAction::Wait(15_000)
        );
        assert_eq!(
            conn(&state, 14_999, UNIX_NOW, &TIMING),
            ConnAction::Wait(15_000)
        );
        assert_eq!(conn(&state, 15_000, UNIX_NOW, &TIMING), ConnAction::Kill);
    }

    #[test]
    fn the_next_deadline_is_the_soonest_of_ping_idle_and_expiry() {
        // Ping first.
        assert_eq!(
            next_conn_deadline(90_000, None, 100_000, UNIX_NOW, &TIMING),
            125_000
        );
        // Idle eviction first: last seen long ago.
        assert_eq!(
            next_conn_deadline(50_000, None, 100_000, UNIX_NOW, &TIMING),
            110_000
        );
        // Token expiry first: 3 s left.
        assert_eq!(
            next_conn_deadline(100_000, Some(UNIX_NOW + 3), 100_000, UNIX_NOW, &TIMING),
            103_000
        );
        // Never in the past.
        assert_eq!(
            next_conn_deadline(0, None, 100_000, UNIX_NOW, &TIMING),
            100_000
        );
        assert_eq!(
            next_conn_deadline(100_000, Some(UNIX_NOW - 5), 100_000, UNIX_NOW, &TIMING),
            100_000
        );
    }

    #[test]
    fn no_input_overflows_a_deadline() {
        let far = next_conn_deadline(u64::MAX, Some(u64::MAX), u64::MAX - 1, 0, &TIMING);
        assert_eq!(far, u64::MAX);
        assert_eq!(
            next_conn_deadline(0, Some(u64::MAX), 1_000, UNIX_NOW, &TIMING),
            26_000,
            "a far-future token leaves the ping deadline"
        );
        let closing = ConnState {
            closing_since_ms: Some(u64::MAX),
            last_seen_ms: 0,
            token_expires_at: None,
        };
        assert_eq!(
            conn(&closing, u64::MAX - 1, 0, &TIMING),
            ConnAction::Wait(u64::MAX)
        );
        assert_eq!(
            session(&[], u64::MAX, u64::MAX - 1, &TIMING),
            SessionAction::Rearm(u64::MAX)
        );
    }

    #[test]
    fn a_session_rearms_at_its_soonest_parked_poll_that_is_not_due() {
        assert_eq!(
            session(&[40_000, 31_000, 35_000], 0, 30_000, &TIMING),
            SessionAction::Rearm(31_000)
        );
        assert_eq!(
            session(&[30_000, 35_000], 0, 30_000, &TIMING),
            SessionAction::Rearm(35_000),
            "a poll due at now is not waited for"
        );
        assert_eq!(
            session(&[10_000, 30_000], 0, 30_000, &TIMING),
            SessionAction::Leave
        );
    }

    #[test]
    fn a_session_without_polls_ends_at_exactly_its_ttl() {
        assert_eq!(
            session(&[], 10_000, 129_999, &TIMING),
            SessionAction::Rearm(130_000)
        );
        assert_eq!(session(&[], 10_000, 130_000, &TIMING), SessionAction::End);
    }

    #[test]
    fn a_poll_is_due_at_its_deadline() {
        assert!(!poll_is_due(30_000, 29_999));
        assert!(poll_is_due(30_000, 30_000));
        assert!(poll_is_due(30_000, 30_001));
    }
}
