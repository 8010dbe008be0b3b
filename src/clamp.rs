//! Deadlines from outside input, computed so they never overflow.
//!
//! `Instant + Duration` panics when the sum does not fit, and a duration
//! can come from a client (a token's `exp` of `u64::MAX` is a valid JSON
//! number) or from the configuration. Every deadline built from such a
//! value goes through [`after`], which caps the wait at [`FAR_FUTURE`]
//! (about 30 years, what tokio itself uses for "never"); millisecond
//! timestamps saturate ([`millis`], and the deadlines module).

use std::time::Duration;

use tokio::time::Instant;

/// The longest wait any deadline is set for: about 30 years.
pub(crate) const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `at + by`, with `by` capped at [`FAR_FUTURE`]; never panics.
pub(crate) fn after(at: Instant, by: Duration) -> Instant {
    // 30 years past a monotonic clock reading always fits; `at` itself is
    // the answer only for an instant already near the end of time.
    at.checked_add(by.min(FAR_FUTURE)).unwrap_or(at)
}

/// `Instant::now() + by`, capped as [`after`] caps it.
pub(crate) fn from_now(by: Duration) -> Instant {
    after(Instant::now(), by)
}

/// A duration in whole milliseconds, saturating at `u64::MAX`.
pub(crate) fn millis(by: Duration) -> u64 {
    u64::try_from(by.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_of_any_length_gives_a_deadline_at_most_far_future_away() {
        let now = Instant::now();
        for secs in [0, 1, 9_200_000_000_000_000_000, u64::MAX] {
            let by = Duration::from_secs(secs);
            let at = after(now, by);
            assert_eq!(at - now, by.min(FAR_FUTURE), "{secs} s");
        }
        assert_eq!(after(now, Duration::MAX) - now, FAR_FUTURE);
        assert!(from_now(Duration::MAX) > now);
    }

    #[test]
    fn millisecond_arithmetic_saturates() {
        assert_eq!(millis(Duration::from_secs(3)), 3000);
        assert_eq!(millis(Duration::from_secs(u64::MAX)), u64::MAX);
    }
}
