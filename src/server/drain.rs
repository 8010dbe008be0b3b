//! A paced drain: connections are told to reconnect over
//! `[server] drain_spread_secs` instead of all at once.
//!
//! A node drained for a deploy would otherwise send every one of its
//! clients to the other nodes in the same second. [`schedule`] (pure) says
//! when each connection is told and which `retry_ms` it is given: told at
//! evenly spaced times over the window, in random order, with a retry hint
//! drawn uniformly around [`DRAIN_RETRY_MS`]; [`tell`] walks that schedule.
//! A connection not told yet is served as before (its messages keep
//! coming); new connections are refused by the draining flag meanwhile.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rand::seq::SliceRandom;
use tokio::time::Instant;

use crate::gateway::Gateway;
use crate::protocol::frame::{Frame, ReconnectReason};
use crate::registry::Conn;

/// How long a client told to reconnect by a drain should wait, in ms: the
/// hint of a drain without spread, and the middle of the spread hints.
pub const DRAIN_RETRY_MS: u64 = 1000;

/// When one connection is told, and what it is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Time from the start of the drain.
    pub at: Duration,
    /// The `retry_ms` of its `reconnect` frame.
    pub retry_ms: u64,
}

/// The schedule of a drain of `n` connections over `spread`: slot `k` is
/// told at `spread * k / n` (evenly spaced from 0, the last one
/// `spread / n` before the window's end) with a `retry_ms` drawn uniformly
/// from `DRAIN_RETRY_MS / 2 ..= DRAIN_RETRY_MS * 3 / 2`, so arrivals at the
/// other nodes are smoothed further. A `spread` of zero is the drain
/// without spread: every slot at 0 with `retry_ms` [`DRAIN_RETRY_MS`].
/// Slots come in time order.
pub fn schedule(n: usize, spread: Duration, rng: &mut impl Rng) -> Vec<Slot> {
    if spread.is_zero() {
        return vec![
            Slot {
                at: Duration::ZERO,
                retry_ms: DRAIN_RETRY_MS,
            };
            n
        ];
    }
    let step = spread.as_secs_f64() / n.max(1) as f64;
    (0..n)
        .map(|k| Slot {
            at: Duration::from_secs_f64(step * k as f64),
            retry_ms: rng.random_range(DRAIN_RETRY_MS / 2..=DRAIN_RETRY_MS * 3 / 2),
        })
        .collect()
}

/// Tells every connection of `gw` to reconnect elsewhere over `spread`,
/// following [`schedule`] in random order; returns how many were told.
/// Connections that joined after the drain began (a handshake admitted
/// just before) are told at the end of the window.
pub async fn tell(gw: &Gateway, spread: Duration) -> usize {
    let (conns, slots) = {
        let mut rng = rand::rng();
        let mut conns = gw.registry.all_connections();
        conns.shuffle(&mut rng);
        let slots = schedule(conns.len(), spread, &mut rng);
        (conns, slots)
    };
    let start = Instant::now();
    let mut told = 0;
    let mut next = 0;
    while next < conns.len() {
        tokio::time::sleep_until(start + slots[next].at).await;
        let now = start.elapsed();
        while next < conns.len() && slots[next].at <= now {
            told += usize::from(tell_one(gw, &conns[next], slots[next].retry_ms));
            next += 1;
        }
    }
    // Already told (or closing) connections refuse a second end.
    for conn in gw.registry.all_connections() {
        told += usize::from(tell_one(gw, &conn, DRAIN_RETRY_MS));
    }
    told
}

/// Queues `conn`'s `reconnect` frame, with the cursor where it stands
/// (see `Outbound::push_reconnect`); false if it was already closing.
fn tell_one(gw: &Gateway, conn: &Arc<Conn>, retry_ms: u64) -> bool {
    // Read before the queue's lock: every message up to here is queued on
    // the connection already, and one past it either is too (and counted
    // by `seen`) or never will be.
    let position = gw.bus.position();
    let suffix = conn.cursor_suffix();
    conn.outbound.push_reconnect(|seen| {
        let cursor = format!("{}{suffix}", position.at_least(seen));
        Frame::reconnect(ReconnectReason::Draining, retry_ms, &cursor)
    })
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(16)
    }

    #[test]
    fn no_spread_tells_everyone_at_once_with_the_plain_hint() {
        let slots = schedule(3, Duration::ZERO, &mut rng());
        let plain = Slot {
            at: Duration::ZERO,
            retry_ms: DRAIN_RETRY_MS,
        };
        assert_eq!(slots, [plain; 3]);
        assert!(schedule(0, Duration::ZERO, &mut rng()).is_empty());
        assert!(schedule(0, Duration::from_secs(5), &mut rng()).is_empty());
    }

    #[test]
    fn slots_are_evenly_spaced_from_zero_inside_the_window() {
        let slots = schedule(4, Duration::from_secs(2), &mut rng());
        let at: Vec<u128> = slots.iter().map(|s| s.at.as_millis()).collect();
        assert_eq!(at, [0, 500, 1000, 1500]);
        let one = schedule(1, Duration::from_secs(5), &mut rng());
        assert_eq!(one[0].at, Duration::ZERO, "a lone connection goes at once");
    }

    #[test]
    fn every_second_of_the_window_tells_the_same_share() {
        let (n, secs) = (19_000, 5);
        let slots = schedule(n, Duration::from_secs(secs), &mut rng());
        assert_eq!(slots.len(), n);
        let mut per_second = vec![0usize; secs as usize];
        for slot in &slots {
            per_second[slot.at.as_secs() as usize] += 1;
        }
        for count in per_second {
            assert!(count.abs_diff(n / secs as usize) <= 1, "{count}");
        }
        assert!(
            slots.windows(2).all(|w| w[0].at <= w[1].at),
            "in time order"
        );
    }

    #[test]
    fn retry_hints_are_spread_uniformly_around_the_plain_hint() {
        let slots = schedule(10_000, Duration::from_secs(5), &mut rng());
        let (low, high) = (DRAIN_RETRY_MS / 2, DRAIN_RETRY_MS * 3 / 2);
        assert!(slots.iter().all(|s| (low..=high).contains(&s.retry_ms)));
        // Ten buckets of 100 ms: each holds about a tenth (± 20 %).
        let mut buckets = [0usize; 10];
        for slot in &slots {
            buckets[((slot.retry_ms - low) / 100).min(9) as usize] += 1;
        }
        for count in buckets {
            assert!((800..=1200).contains(&count), "{buckets:?}");
        }
    }
}
