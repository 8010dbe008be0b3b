//! The sharded timer and the task that drives it: the only code that reads
//! a clock.
//!
//! Deadlines become ticks here (rounded up, so nothing fires early) and
//! "now" becomes a tick (rounded down). Each shard is a short mutex around a
//! [`Wheel`], held only for O(1) work or one bounded batch, never across an
//! `.await`. Expiries are handed to an [`ExpirySink`] outside the lock.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::{Instant, MissedTickBehavior};

use super::hashed::{EntryKey, Expired, StaleKey, Wheel};
use crate::metrics::names;

/// Entries examined per lock hold while draining a shard. Entries whose
/// list runs through memory in order cost about 5 ns each; entries armed
/// in random order (connections opened at different times, all due at
/// once) cost a cache miss each, about 130 ns on the machines we measured.
/// 512 keeps a hold under about 70 µs even then (`cargo bench --bench wheel`).
pub const DEFAULT_BUDGET: usize = 512;

/// Names one timer entry: its shard and its entry in that shard's wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerKey {
    shard: u32,
    entry: EntryKey,
}

/// One expiry as the driver hands it to an [`ExpirySink`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fired<T> {
    /// The entry that fired; idle now, for its owner to reset or remove.
    pub key: TimerKey,
    /// The entry's sequence number when it fired (see [`Wheel::reset`]).
    pub seq: u32,
    /// The owner's payload.
    pub value: T,
    /// How long after its deadline tick it fired.
    pub lateness: Duration,
}

/// Receives expired entries. Called from the driver task with no lock
/// held; it must not block (queue a frame, complete a waiter, move on).
pub trait ExpirySink<T>: Send + 'static {
    /// Acts on one batch of expiries.
    fn expired(&mut self, batch: &[Fired<T>]);
}

impl<T, F: FnMut(&[Fired<T>]) + Send + 'static> ExpirySink<T> for F {
    fn expired(&mut self, batch: &[Fired<T>]) {
        self(batch)
    }
}

/// Converts between `tokio::time::Instant` and wheel ticks.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    tick: Duration,
}

impl Clock {
    /// A clock whose tick 0 is `origin`.
    ///
    /// # Panics
    /// If `tick` is zero (configuration validation rejects it).
    pub fn new(origin: Instant, tick: Duration) -> Self {
        assert!(!tick.is_zero(), "timer tick must be positive");
        Self { origin, tick }
    }

    /// The length of one tick.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// The last tick that has begun by `now` (rounded down).
    pub fn tick_at(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.origin).as_nanos() / self.tick.as_nanos()) as u64
    }

    /// The first tick at or after `deadline` (rounded up), so an entry
    /// filed there never fires before `deadline`.
    pub fn deadline_tick(&self, deadline: Instant) -> u64 {
        let nanos = deadline.saturating_duration_since(self.origin).as_nanos();
        nanos.div_ceil(self.tick.as_nanos()) as u64
    }

    /// Milliseconds from the clock's origin to `now`: a cheap timestamp
    /// for activity records.
    pub fn millis_at(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_millis() as u64
    }

    /// The instant `ms` milliseconds after the origin, at most
    /// [`FAR_FUTURE`](crate::clamp::FAR_FUTURE) after it (deadlines computed
    /// from outside input saturate instead of overflowing).
    pub fn instant_at_millis(&self, ms: u64) -> Instant {
        crate::clamp::after(self.origin, Duration::from_millis(ms))
    }

    /// The instant a tick begins.
    pub fn instant_of(&self, tick: u64) -> Instant {
        let nanos = self.tick.as_nanos().saturating_mul(u128::from(tick));
        crate::clamp::after(
            self.origin,
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)),
        )
    }
}

/// Every per-connection and per-session deadline of the process: a set of
/// wheel shards behind short mutexes.
#[derive(Debug)]
pub struct Timer<T> {
    shards: Box<[Mutex<Wheel<T>>]>,
    clock: Clock,
    live: AtomicUsize,
}

impl<T: Copy> Timer<T> {
    /// A timer of `shards` wheels (at least one) of `slots` buckets each,
    /// ticking every `tick` from now.
    pub fn new(tick: Duration, slots: usize, shards: usize) -> Self {
        let shards = (0..shards.max(1)).map(|_| Mutex::new(Wheel::new(slots)));
        Self {
            shards: shards.collect(),
            clock: Clock::new(Instant::now(), tick),
            live: AtomicUsize::new(0),
        }
    }

    /// The clock that converts instants to this timer's ticks.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The shard for an owner, from a hash of its id.
    pub fn shard_of(&self, hash: u64) -> u32 {
        (hash % self.shards.len() as u64) as u32
    }

    /// Live entries across all shards (the `pushgate_timer_entries` gauge).
    pub fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Allocates an entry in `shard`, armed for `deadline`; sequence 0.
    pub fn insert(&self, shard: u32, deadline: Instant, value: T) -> TimerKey {
        let tick = self.clock.deadline_tick(deadline);
        let entry = self.shard(shard).lock().insert(tick, value);
        self.live.fetch_add(1, Ordering::Relaxed);
        TimerKey { shard, entry }
    }

    /// Moves (or re-arms) an entry; returns its new sequence number.
    pub fn reset(&self, key: TimerKey, deadline: Instant) -> Result<u32, StaleKey> {
        let tick = self.clock.deadline_tick(deadline);
        self.shard(key.shard).lock().reset(key.entry, tick)
    }

    /// Disarms an entry, keeping it for reuse; returns its new sequence number.
    pub fn cancel(&self, key: TimerKey) -> Result<u32, StaleKey> {
        self.shard(key.shard).lock().cancel(key.entry)
    }

    /// Frees an entry; returns its payload, or `None` for a stale key.
    pub fn remove(&self, key: TimerKey) -> Option<T> {
        let value = self.shard(key.shard).lock().remove(key.entry);
        if value.is_some() {
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
        value
    }

    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Fires up to `budget` entries of `shard` due by `now`, handing them
    /// to `sink` after the lock is released. `Poll::Pending` means more are
    /// due: call again (the wheel resumes where it stopped).
    pub fn fire_batch(
        &self,
        shard: usize,
        now: Instant,
        budget: usize,
        sink: &mut impl ExpirySink<T>,
        scratch: &mut Scratch<T>,
    ) -> Poll<()> {
        let target = self.clock.tick_at(now);
        let poll = self.shards[shard]
            .lock()
            .poll_expired(target, budget, &mut scratch.expired);
        scratch.hand_over(shard as u32, &self.clock, now, sink);
        poll
    }

    fn shard(&self, shard: u32) -> &Mutex<Wheel<T>> {
        &self.shards[shard as usize]
    }
}

/// Buffers the driver reuses every tick, so draining allocates nothing.
#[derive(Debug)]
pub struct Scratch<T> {
    expired: Vec<Expired<T>>,
    fired: Vec<Fired<T>>,
    lateness: metrics::Histogram,
}

impl<T: Copy> Scratch<T> {
    /// Buffers for batches of up to `budget` entries.
    pub fn new(budget: usize) -> Self {
        Self {
            expired: Vec::with_capacity(budget),
            fired: Vec::with_capacity(budget),
            lateness: metrics::histogram!(names::TIMER_LATENESS_SECONDS),
        }
    }

    fn hand_over(
        &mut self,
        shard: u32,
        clock: &Clock,
        now: Instant,
        sink: &mut impl ExpirySink<T>,
    ) {
        if self.expired.is_empty() {
            return;
        }
        self.fired.extend(self.expired.drain(..).map(|e| Fired {
            key: TimerKey {
                shard,
                entry: e.key,
            },
            seq: e.seq,
            value: e.value,
            lateness: now.saturating_duration_since(clock.instant_of(e.deadline)),
        }));
        for fired in &self.fired {
            self.lateness.record(fired.lateness.as_secs_f64());
        }
        sink.expired(&self.fired);
        self.fired.clear();
    }
}

/// Drives `timer` until `shutdown` completes: once a tick, on a
/// `tokio::time::interval` aligned to the timer's clock that skips missed
/// ticks, it fires everything due. Expiry is never early and, while the
/// runtime keeps up, at most one tick late.
pub async fn drive<T, S>(
    timer: Arc<Timer<T>>,
    mut sink: S,
    budget: usize,
    shutdown: impl Future<Output = ()>,
) where
    T: Copy + Send + Sync + 'static,
    S: ExpirySink<T>,
{
    let clock = *timer.clock();
    let first = clock.instant_of(clock.tick_at(Instant::now()) + 1);
    let mut interval = tokio::time::interval_at(first, clock.tick());
    interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut scratch = Scratch::new(budget);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = interval.tick() => {}
        }
        let now = Instant::now();
        for shard in 0..timer.shard_count() {
            while timer
                .fire_batch(shard, now, budget, &mut sink, &mut scratch)
                .is_pending()
            {
                tokio::task::yield_now().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_in_milliseconds_round_trips_and_saturates() {
        let origin = Instant::now();
        let clock = Clock::new(origin, Duration::from_millis(10));
        assert_eq!(
            clock.instant_at_millis(1_500),
            origin + Duration::from_millis(1_500)
        );
        assert_eq!(clock.millis_at(clock.instant_at_millis(1_500)), 1_500);
        // Far beyond what an Instant holds: capped, no panic.
        assert_eq!(
            clock.instant_at_millis(u64::MAX),
            origin + crate::clamp::FAR_FUTURE
        );
    }
}
