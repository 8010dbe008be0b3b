//! A publish's deadline, on the broker's clock: pure, so the clock's
//! arithmetic is tested with plain values.
//!
//! A push the broker does not answer within `[broker] timeout_ms` is
//! refused `503`, and the contract says a `503` published nothing. But a
//! script sent to a Redis that stalls (a slow command, a fork, writes
//! paused for a failover) is still queued there and runs once it
//! resumes: the message would reach its users after the caller was told
//! it did not. So every publish script carries a deadline on Redis's own
//! clock, two thirds of the timeout after it was sent, and publishes
//! nothing when it starts later (`LATE`): by the time the gateway gives
//! up on the answer, a script still queued can only refuse. The last
//! third covers the answer's way back and what the clock estimate may be
//! off by.
//!
//! Redis's clock is read in every publish's reply. The offset kept is
//! what the broker's clock read minus ours when the reply came, a lower
//! bound of the true offset (off by at most the round trip, which is
//! bounded for a sample to count): the deadline errs early, never late.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Our clock, in ms since the Unix epoch (Redis's `TIME` counts the same).
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What is known of one broker's clock, shared by its publishes.
#[derive(Debug)]
pub(crate) struct BrokerClock {
    /// The broker's clock minus ours, in ms (a lower bound).
    offset_ms: AtomicI64,
    /// How long a script may wait in the broker before it must refuse.
    budget: Duration,
}

impl BrokerClock {
    /// A clock taken to agree with ours until a reply says otherwise, for
    /// publishes the gateway waits `timeout` for: they get two thirds of
    /// it to start.
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            offset_ms: AtomicI64::new(0),
            budget: timeout - timeout / 3,
        }
    }

    /// How long a script may wait in the broker.
    pub(crate) fn budget(&self) -> Duration {
        self.budget
    }

    /// The deadline, on the broker's clock, of a script sent at `sent_ms`
    /// (ours).
    pub(crate) fn deadline(&self, sent_ms: i64) -> i64 {
        let budget = i64::try_from(self.budget.as_millis()).unwrap_or(i64::MAX);
        sent_ms
            .saturating_add(self.offset_ms.load(Ordering::Relaxed))
            .saturating_add(budget)
    }

    /// Learns from a reply sent at `sent_ms` and received at
    /// `received_ms` (ours) in which the broker's clock read `broker_ms`.
    /// A reply that took over a quarter of the budget says too little (the
    /// script may have waited anywhere in between) and is not used.
    pub(crate) fn learn(&self, broker_ms: i64, sent_ms: i64, received_ms: i64) {
        let round_trip = received_ms.saturating_sub(sent_ms);
        let usable = i64::try_from(self.budget.as_millis() / 4).unwrap_or(i64::MAX);
        if (0..=usable).contains(&round_trip) {
            self.offset_ms
                .store(broker_ms.saturating_sub(received_ms), Ordering::Relaxed);
        }
    }

    /// A clock for publishes the gateway waits `timeout` for (see
    /// [`BrokerClock::new`]), learned from Redis's `TIME` (`secs` and
    /// `micros`) asked at `sent_ms` and answered now: what a bus reads at
    /// connect.
    pub(crate) fn from_time(timeout: Duration, secs: i64, micros: i64, sent_ms: i64) -> Self {
        let clock = Self::new(timeout);
        let broker_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
        clock.learn(broker_ms, sent_ms, now_ms());
        clock
    }

    /// Settles a publish sent at `sent_ms`: its answer and the clock its
    /// reply read, or an error's text. The clock is learned, from a `LATE`
    /// refusal's too, which is told plainly (it published nothing).
    pub(crate) fn settle<T>(
        &self,
        reply: Result<(T, i64), String>,
        sent_ms: i64,
    ) -> Result<T, String> {
        let received_ms = now_ms();
        match reply {
            Ok((answer, broker_ms)) => {
                self.learn(broker_ms, sent_ms, received_ms);
                Ok(answer)
            }
            Err(err) => match late_clock(&err) {
                Some(broker_ms) => {
                    self.learn(broker_ms, sent_ms, received_ms);
                    Err(format!(
                        "redis started the publish after {} ms, past its deadline, and published nothing",
                        received_ms.saturating_sub(sent_ms)
                    ))
                }
                None => Err(err),
            },
        }
    }
}

/// The clock a `LATE` refusal read, if `message` is one: the script
/// answers `-LATE <ms> past <deadline>`, which the client shows as
/// `"LATE": <ms> past <deadline>`.
pub(crate) fn late_clock(message: &str) -> Option<i64> {
    let (_, rest) = message.split_once("LATE")?;
    let rest = rest.trim_start_matches(['"', ':', ' ']);
    rest.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scripts get two thirds of it: 1,000 ms.
    const TIMEOUT: Duration = Duration::from_millis(1500);

    #[test]
    fn a_clock_in_agreement_gives_the_budget_from_the_send() {
        let clock = BrokerClock::new(TIMEOUT);
        assert_eq!(clock.deadline(50_000), 51_000);
    }

    #[test]
    fn a_quick_reply_teaches_the_offset_as_a_lower_bound() {
        let clock = BrokerClock::new(TIMEOUT);
        // The broker is 5 s ahead; its clock read 105_002 during a reply
        // sent at 100_000 and received at 100_004 (ours).
        clock.learn(105_002, 100_000, 100_004);
        assert_eq!(clock.deadline(200_000), 200_000 + 4_998 + 1_000);
        // Behind works too.
        clock.learn(97_001, 100_000, 100_002);
        assert_eq!(clock.deadline(200_000), 200_000 - 3_001 + 1_000);
    }

    #[test]
    fn a_slow_reply_teaches_nothing() {
        let clock = BrokerClock::new(TIMEOUT);
        clock.learn(109_000, 100_000, 100_251);
        assert_eq!(clock.deadline(0), 1_000, "a round trip over a quarter");
        clock.learn(109_000, 100_000, 100_250);
        assert_eq!(clock.deadline(0), 8_750 + 1_000, "a quarter is enough");
        clock.learn(1, 100_000, 99_000);
        assert_eq!(clock.deadline(0), 9_750, "our clock went back: ignored");
    }

    #[test]
    fn scripts_get_two_thirds_of_the_timeout() {
        assert_eq!(
            BrokerClock::new(TIMEOUT).budget(),
            Duration::from_millis(1000)
        );
        let odd = BrokerClock::new(Duration::from_millis(1000));
        assert_eq!(odd.deadline(0), 666);
    }

    #[test]
    fn our_clock_counts_ms_since_the_unix_epoch() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970");
        let now = now_ms();
        let after = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970");
        assert!(
            (before.as_millis()..=after.as_millis()).contains(&(now as u128)),
            "{now}"
        );
    }

    #[test]
    fn a_clock_from_redis_time_learns_its_milliseconds() {
        let sent = now_ms();
        // Redis reads 5,000.25 ms ahead of us.
        let ahead = sent + 5_000;
        let clock = BrokerClock::from_time(
            Duration::from_millis(3000),
            ahead / 1000,
            (ahead % 1000) * 1000 + 250,
            sent,
        );
        // The offset is a lower bound: the reply came back a little later.
        let offset = clock.deadline(sent) - sent - 2000;
        assert!((4_900..=5_000).contains(&offset), "{offset}");
    }

    #[test]
    fn settling_an_answer_learns_the_clock_it_read() {
        let clock = BrokerClock::new(TIMEOUT);
        let sent = now_ms();
        let broker = sent + 60_000;
        assert_eq!(clock.settle(Ok(("answer", broker)), sent), Ok("answer"));
        // Learned as the broker's clock minus ours at the answer: within
        // the few ms this test took.
        let offset = clock.deadline(0) - 1_000;
        assert!((59_900..=60_000).contains(&offset), "{offset}");
    }

    #[test]
    fn settling_a_late_refusal_learns_its_clock_and_says_nothing_was_published() {
        let clock = BrokerClock::new(TIMEOUT);
        let sent = now_ms();
        let broker = sent - 30_000;
        let refusal = format!("LATE {broker} past {}", broker - 1);
        let err = clock.settle::<()>(Err(refusal), sent).expect_err("refused");
        assert!(err.contains("published nothing"), "{err}");
        let offset = clock.deadline(0) - 1_000;
        assert!((-30_100..=-30_000).contains(&offset), "{offset}");
    }

    #[test]
    fn settling_another_error_passes_it_on_and_learns_nothing() {
        let clock = BrokerClock::new(TIMEOUT);
        let err = clock.settle::<()>(Err("timed out".to_owned()), now_ms());
        assert_eq!(err, Err("timed out".to_owned()));
        assert_eq!(clock.deadline(0), 1_000);
    }

    #[test]
    fn a_late_refusal_names_the_brokers_clock() {
        // As the script answers it, and as the client then shows it.
        let reply = redis::parse_redis_value(b"-LATE 1764410000123 past 1764410000000\r\n");
        let Ok(redis::Value::ServerError(refusal)) = reply else {
            panic!("an error reply: {reply:?}");
        };
        let shown = redis::RedisError::from(refusal).to_string();
        assert_eq!(late_clock(&shown), Some(1_764_410_000_123), "{shown}");
        assert_eq!(late_clock("LATE 17 past 5"), Some(17));
        assert_eq!(late_clock("ERR something else"), None);
        assert_eq!(late_clock("LATE soon"), None);
    }
}
