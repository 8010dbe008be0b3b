//! The four timeout structures behind one interface, so every workload runs
//! the same sequence of operations on each.
//!
//! Time is integer ticks of [`TICK_MS`] everywhere; only the `DelayQueue`
//! adapter turns ticks into `Instant`s, on a paused tokio clock that it
//! advances tick by tick. Each adapter keeps the caller's side too: the
//! table from entry id to the structure's key, which the memory figures
//! leave out (see [`Contender::caller_bytes`]).

use std::sync::LazyLock;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use pushgate::wheel::{DEFAULT_BUDGET, EntryKey, Expired, Wheel};
use tokio::runtime::{EnterGuard, Runtime};
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

use crate::lazy_heap::LazyHeap;
use crate::seed_fifo::SeedFifo;

/// One tick, as in the shipped config (`tick_ms = 100`).
pub(crate) const TICK_MS: u64 = 100;
/// Buckets of our wheel, as in the shipped config.
pub(crate) const SLOTS: usize = 4096;

/// A timeout structure as the workloads drive it.
///
/// Entries are named by dense ids `0, 1, 2, ...` in insertion order;
/// deadlines are absolute ticks.
pub(crate) trait Contender {
    /// The column heading.
    const NAME: &'static str;

    /// An empty structure, with room for `capacity` entries where the
    /// structure lets us say so.
    fn with_capacity(capacity: usize) -> Self;

    /// Adds entry `id` (the next id) due at `deadline`.
    fn insert(&mut self, id: u32, deadline: u64);

    /// Moves armed entry `id` to `deadline`.
    fn reset(&mut self, id: u32, deadline: u64);

    /// Brings the structure to tick `now` and re-arms every entry that came
    /// due at `rearm`; returns how many came due.
    fn expire_and_rearm(&mut self, now: u64, rearm: u64) -> usize;

    /// Brings the structure to tick `now`, takes out every entry due and
    /// returns how many. Pushes the wall time of each poll call onto
    /// `calls` where the structure polls in batches (`DelayQueue` hands out
    /// one entry per call and records nothing).
    fn drain(&mut self, now: u64, calls: &mut Vec<Duration>) -> usize;

    /// Bytes the adapter holds on its caller's behalf (the id-to-key table
    /// and the expiry buffer); not part of the structure, so memory figures
    /// subtract them.
    fn caller_bytes(&self) -> usize;
}

/// Our wheel: 4096 slots, polled in batches of [`DEFAULT_BUDGET`].
pub(crate) struct WheelTimers {
    wheel: Wheel<u64>,
    keys: Vec<EntryKey>,
    /// Caller-owned expiry buffer, sized for one batch.
    out: Vec<Expired<u64>>,
}

impl Contender for WheelTimers {
    const NAME: &'static str = "pushgate Wheel";

    fn with_capacity(capacity: usize) -> Self {
        Self {
            wheel: Wheel::with_capacity(SLOTS, capacity),
            keys: Vec::with_capacity(capacity),
            out: Vec::with_capacity(DEFAULT_BUDGET),
        }
    }

    fn insert(&mut self, id: u32, deadline: u64) {
        self.keys.push(self.wheel.insert(deadline, u64::from(id)));
    }

    fn reset(&mut self, id: u32, deadline: u64) {
        let key = self.keys[id as usize];
        self.wheel
            .reset(key, deadline)
            .expect("bench keys stay live");
    }

    fn expire_and_rearm(&mut self, now: u64, rearm: u64) -> usize {
        let mut expired = 0;
        loop {
            let poll = self.wheel.poll_expired(now, DEFAULT_BUDGET, &mut self.out);
            expired += self.out.len();
            for entry in self.out.drain(..) {
                self.wheel.reset(entry.key, rearm).expect("just fired");
            }
            if poll.is_ready() {
                return expired;
            }
        }
    }

    fn drain(&mut self, now: u64, calls: &mut Vec<Duration>) -> usize {
        let mut expired = 0;
        loop {
            let started = Instant::now();
            let poll = self.wheel.poll_expired(now, DEFAULT_BUDGET, &mut self.out);
            calls.push(started.elapsed());
            expired += self.out.len();
            self.out.clear();
            if poll.is_ready() {
                return expired;
            }
        }
    }

    fn caller_bytes(&self) -> usize {
        self.keys.capacity() * size_of::<EntryKey>()
            + self.out.capacity() * size_of::<Expired<u64>>()
    }
}

/// The runtime whose paused clock every `DelayQueue` runs on: current
/// thread, time only, started paused so `advance` moves it exactly.
static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds")
});

/// Enters the bench runtime for as long as the guard lives: `DelayQueue`
/// creates its `Sleep` on insert and poll, which needs a runtime context.
/// Entering once, here, keeps that cost out of every measured call.
pub(crate) fn enter_runtime() -> EnterGuard<'static> {
    RUNTIME.enter()
}

/// tokio-util's `DelayQueue` on a paused clock. Expired entries leave the
/// queue, so re-arming one is an insert that yields a new key.
pub(crate) struct DelayQueueTimers {
    queue: DelayQueue<u64>,
    keys: Vec<Key>,
    /// The instant of tick 0.
    origin: tokio::time::Instant,
    /// The tick the paused clock stands at.
    now: u64,
}

impl DelayQueueTimers {
    fn instant(&self, tick: u64) -> tokio::time::Instant {
        self.origin + Duration::from_millis(tick * TICK_MS)
    }

    /// Moves the paused clock to tick `now` and lets the time driver fire
    /// the queue's `Sleep` (`advance` parks the runtime once).
    fn advance_to(&mut self, now: u64) {
        if now > self.now {
            let step = Duration::from_millis((now - self.now) * TICK_MS);
            RUNTIME.block_on(tokio::time::advance(step));
            self.now = now;
            debug_assert_eq!(tokio::time::Instant::now(), self.instant(now));
        }
    }
}

impl Contender for DelayQueueTimers {
    const NAME: &'static str = "tokio-util DelayQueue";

    fn with_capacity(capacity: usize) -> Self {
        Self {
            queue: DelayQueue::with_capacity(capacity),
            keys: Vec::with_capacity(capacity),
            origin: tokio::time::Instant::now(),
            now: 0,
        }
    }

    fn insert(&mut self, id: u32, deadline: u64) {
        let key = self.queue.insert_at(u64::from(id), self.instant(deadline));
        self.keys.push(key);
    }

    fn reset(&mut self, id: u32, deadline: u64) {
        let when = self.instant(deadline);
        self.queue.reset_at(&self.keys[id as usize], when);
    }

    fn expire_and_rearm(&mut self, now: u64, rearm: u64) -> usize {
        self.advance_to(now);
        let when = self.instant(rearm);
        let mut cx = Context::from_waker(Waker::noop());
        let mut expired = 0;
        while let Poll::Ready(Some(entry)) = self.queue.poll_expired(&mut cx) {
            let id = entry.into_inner();
            self.keys[id as usize] = self.queue.insert_at(id, when);
            expired += 1;
        }
        expired
    }

    fn drain(&mut self, now: u64, _calls: &mut Vec<Duration>) -> usize {
        self.advance_to(now);
        let mut cx = Context::from_waker(Waker::noop());
        let mut expired = 0;
        while let Poll::Ready(Some(_)) = self.queue.poll_expired(&mut cx) {
            expired += 1;
        }
        expired
    }

    fn caller_bytes(&self) -> usize {
        self.keys.capacity() * size_of::<Key>()
    }
}

/// The lazy-deletion heap, polled in batches of [`DEFAULT_BUDGET`] like the
/// wheel. Ids are its keys, so it needs no key table.
pub(crate) struct HeapTimers {
    heap: LazyHeap,
    out: Vec<u32>,
}

impl Contender for HeapTimers {
    const NAME: &'static str = "lazy BinaryHeap";

    fn with_capacity(capacity: usize) -> Self {
        Self {
            heap: LazyHeap::with_capacity(capacity),
            out: Vec::with_capacity(DEFAULT_BUDGET),
        }
    }

    fn insert(&mut self, id: u32, deadline: u64) {
        let given = self.heap.insert(deadline);
        debug_assert_eq!(given, id);
    }

    fn reset(&mut self, id: u32, deadline: u64) {
        self.heap.reset(id, deadline);
    }

    fn expire_and_rearm(&mut self, now: u64, rearm: u64) -> usize {
        let mut expired = 0;
        loop {
            let poll = self.heap.poll_expired(now, DEFAULT_BUDGET, &mut self.out);
            expired += self.out.len();
            for id in self.out.drain(..) {
                self.heap.reset(id, rearm);
            }
            if poll.is_ready() {
                return expired;
            }
        }
    }

    fn drain(&mut self, now: u64, calls: &mut Vec<Duration>) -> usize {
        let mut expired = 0;
        loop {
            let started = Instant::now();
            let poll = self.heap.poll_expired(now, DEFAULT_BUDGET, &mut self.out);
            calls.push(started.elapsed());
            expired += self.out.len();
            self.out.clear();
            if poll.is_ready() {
                return expired;
            }
        }
    }

    fn caller_bytes(&self) -> usize {
        self.out.capacity() * size_of::<u32>()
    }
}

/// The seed article's FIFO, as written (no batch budget: one call takes
/// out everything due at the head). Ids are its keys.
pub(crate) struct FifoTimers {
    fifo: SeedFifo,
    out: Vec<u32>,
}

impl Contender for FifoTimers {
    const NAME: &'static str = "seed FIFO";

    fn with_capacity(capacity: usize) -> Self {
        Self {
            fifo: SeedFifo::with_capacity(capacity),
            out: Vec::with_capacity(DEFAULT_BUDGET),
        }
    }

    fn insert(&mut self, id: u32, deadline: u64) {
        let given = self.fifo.insert(deadline);
        debug_assert_eq!(given, id);
    }

    fn reset(&mut self, id: u32, deadline: u64) {
        self.fifo.reset(id, deadline);
    }

    fn expire_and_rearm(&mut self, now: u64, rearm: u64) -> usize {
        self.fifo.poll_expired(now, &mut self.out);
        let expired = self.out.len();
        for id in self.out.drain(..) {
            self.fifo.reset(id, rearm);
        }
        expired
    }

    fn drain(&mut self, now: u64, calls: &mut Vec<Duration>) -> usize {
        let started = Instant::now();
        self.fifo.poll_expired(now, &mut self.out);
        calls.push(started.elapsed());
        let expired = self.out.len();
        self.out.clear();
        expired
    }

    fn caller_bytes(&self) -> usize {
        self.out.capacity() * size_of::<u32>()
    }
}
