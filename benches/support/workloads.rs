//! The workloads: their pre-generated inputs and one measured run of each,
//! generic over the structure so every contender gets the same sequence.
//!
//! All randomness is drawn up front from one seeded RNG, so the four
//! structures see the same ids and deadlines in the same order, and the
//! timed loops only read slices.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use pushgate::wheel::DEFAULT_BUDGET;

use crate::contenders::Contender;
use crate::counting_alloc::{allocations, live_bytes};

/// The session timeout of the heartbeat and steady-state workloads: 60 s.
pub(crate) const TIMEOUT_TICKS: u64 = 600;
/// Random deadlines are drawn from 1 s ..= 600 s.
const RANDOM_TICKS: std::ops::RangeInclusive<u64> = 10..=6000;
/// The tick every entry of the storm is due at (one timeout after insert).
const STORM_TICK: u64 = TIMEOUT_TICKS;
/// Seed of the input generator; fixed so runs are comparable.
const SEED: u64 = 0x5eed_0f71_3300;

/// One measured stretch of one workload on one structure.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sample {
    /// Operations done: inserts, resets, or expiries (each with its re-arm).
    pub ops: u64,
    /// Of `ops`, how many were expiries.
    pub expired: u64,
    /// Wall time of the timed part.
    pub elapsed: Duration,
    /// Allocation calls during the timed part.
    pub allocations: u64,
}

impl Sample {
    /// Operations per second.
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// The pre-generated inputs for one size.
pub(crate) struct Inputs {
    /// Entries.
    pub n: usize,
    /// Deadlines spread over 1 ..= 600 s, one per entry: the insert and
    /// random-reset workloads start from these.
    spread_deadlines: Vec<u64>,
    /// `n` random resets: uniform ids, deadlines uniform in 1 ..= 600 s.
    random_resets: Vec<(u32, u64)>,
    /// Deadlines within one timeout (1 ..= 600 ticks), one per entry, as
    /// live sessions in the steady state have them: the heartbeat and
    /// steady-state workloads start from these.
    recent_deadlines: Vec<u64>,
    /// One heartbeat per entry in random order while "now" walks through
    /// one timeout; each moves its entry to now + 60 s, always later. The
    /// random-order storm reuses the order.
    heartbeats: Vec<(u32, u64)>,
    /// Steady state: ids to reset, `resets_per_tick` for every tick.
    steady_ids: Vec<u32>,
    /// Resets per tick that make 90% of steady-state operations resets.
    resets_per_tick: usize,
}

impl Inputs {
    /// Draws every input for `n` entries and `steady_ticks` steady-state
    /// ticks (warm-up included).
    pub(crate) fn generate(n: usize, steady_ticks: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(SEED ^ n as u64);
        let id_count = u32::try_from(n).expect("entries fit in u32");
        let spread_deadlines = (0..n).map(|_| rng.random_range(RANDOM_TICKS)).collect();
        let random_resets = (0..n)
            .map(|_| {
                (
                    rng.random_range(0..id_count),
                    rng.random_range(RANDOM_TICKS),
                )
            })
            .collect();
        // An entry reset at random, on average `rate` times per tick,
        // escapes every reset for a whole timeout with probability
        // e^(-rate T). Expiries are a tenth of operations when that is 0.1:
        // rate T = ln 10.
        let rate = std::f64::consts::LN_10 / TIMEOUT_TICKS as f64;
        let resets_per_tick = (n as f64 * rate).round() as usize;
        let recent_deadlines = (0..n)
            .map(|_| stationary_deadline(&mut rng, rate))
            .collect();
        let mut order: Vec<u32> = (0..id_count).collect();
        order.shuffle(&mut rng);
        let heartbeats = order
            .into_iter()
            .enumerate()
            .map(|(i, id)| (id, i as u64 * TIMEOUT_TICKS / n as u64 + TIMEOUT_TICKS))
            .collect();
        let steady_ids = (0..resets_per_tick as u64 * steady_ticks)
            .map(|_| rng.random_range(0..id_count))
            .collect();
        Self {
            n,
            spread_deadlines,
            random_resets,
            recent_deadlines,
            heartbeats,
            steady_ids,
            resets_per_tick,
        }
    }
}

/// A deadline drawn as the steady state has them: the time since an
/// entry's last reset or re-arm is exponential with rate `rate`, cut off at
/// one timeout (inverse-CDF sampling), and the deadline is one timeout
/// after that. Starting there keeps the warm-up short.
fn stationary_deadline(rng: &mut StdRng, rate: f64) -> u64 {
    let cut = 1.0 - (-rate * TIMEOUT_TICKS as f64).exp();
    let age = -(1.0 - rng.random::<f64>() * cut).ln() / rate;
    TIMEOUT_TICKS - (age as u64).min(TIMEOUT_TICKS - 1)
}

/// Builds a structure holding every entry of `deadlines`.
fn filled<C: Contender>(deadlines: &[u64]) -> C {
    let mut timers = C::with_capacity(deadlines.len());
    for (id, &deadline) in deadlines.iter().enumerate() {
        timers.insert(id as u32, deadline);
    }
    timers
}

/// Times `work`, counting its allocations.
fn timed(ops: usize, work: impl FnOnce()) -> Sample {
    let allocations_before = allocations();
    let started = Instant::now();
    work();
    Sample {
        ops: ops as u64,
        elapsed: started.elapsed(),
        allocations: allocations() - allocations_before,
        ..Sample::default()
    }
}

/// Bytes an empty structure holds (its fixed overhead, such as bucket
/// heads), caller-side key table and buffer excluded.
pub(crate) fn fixed_bytes<C: Contender>() -> usize {
    let bytes_before = live_bytes();
    let timers = C::with_capacity(0);
    live_bytes() - bytes_before - timers.caller_bytes()
}

/// Insert: `n` inserts into a fresh structure. Also returns the bytes per
/// entry the structure holds afterwards (caller-side key table and buffer excluded).
pub(crate) fn insert<C: Contender>(inputs: &Inputs) -> (Sample, f64) {
    let bytes_before = live_bytes();
    let mut timers = C::with_capacity(inputs.n);
    let sample = timed(inputs.n, || {
        for (id, &deadline) in inputs.spread_deadlines.iter().enumerate() {
            timers.insert(id as u32, deadline);
        }
    });
    let bytes = live_bytes() - bytes_before - timers.caller_bytes();
    black_box(&timers);
    (sample, bytes as f64 / inputs.n as f64)
}

/// Random reset: `n` resets of random entries to random deadlines, with
/// the clock standing still.
pub(crate) fn random_reset<C: Contender>(inputs: &Inputs) -> Sample {
    let mut timers: C = filled(&inputs.spread_deadlines);
    let sample = timed(inputs.random_resets.len(), || {
        for &(id, deadline) in &inputs.random_resets {
            timers.reset(id, deadline);
        }
    });
    black_box(&timers);
    sample
}

/// Heartbeat reset: every entry moved once to now + 60 s, always later,
/// as "now" advances through one timeout. Nothing comes due, so nothing
/// is polled; the steady state covers expiry.
pub(crate) fn heartbeat<C: Contender>(inputs: &Inputs) -> Sample {
    let mut timers: C = filled(&inputs.recent_deadlines);
    let sample = timed(inputs.heartbeats.len(), || {
        for &(id, deadline) in &inputs.heartbeats {
            timers.reset(id, deadline);
        }
    });
    black_box(&timers);
    sample
}

/// Storm: every entry due at the same tick, inserted in id order (a mass
/// of sessions opened one after another). The structure is brought tick
/// by tick to the tick before (untimed, as the driver would), then the
/// timed drain takes all `n` out. Also returns the wall time of each poll
/// call of the drain, where the structure polls in batches.
pub(crate) fn storm<C: Contender>(inputs: &Inputs) -> (Sample, Vec<Duration>) {
    let mut timers = C::with_capacity(inputs.n);
    for id in 0..inputs.n {
        timers.insert(id as u32, STORM_TICK);
    }
    drain_storm(timers, inputs.n)
}

/// Storm in random order: entries armed at random times over 1 ..= 600 s
/// are all reset to the same tick in random order, as a herd of sessions
/// that did not start together would be. Structures that keep a list per
/// tick then walk it in no particular memory order. Timed like [`storm`].
pub(crate) fn storm_shuffled<C: Contender>(inputs: &Inputs) -> (Sample, Vec<Duration>) {
    let mut timers: C = filled(&inputs.spread_deadlines);
    for &(id, _) in &inputs.heartbeats {
        timers.reset(id, STORM_TICK);
    }
    drain_storm(timers, inputs.n)
}

/// Brings `timers` to the tick before the storm, then times its drain.
fn drain_storm<C: Contender>(mut timers: C, n: usize) -> (Sample, Vec<Duration>) {
    for tick in 1..STORM_TICK {
        let fired = timers.expire_and_rearm(tick, tick + TIMEOUT_TICKS);
        assert_eq!(fired, 0, "{} fired before the storm", C::NAME);
    }
    // Room for one duration per batch, so recording them never allocates.
    let mut calls = Vec::with_capacity(n / DEFAULT_BUDGET + 2);
    let mut expired = 0;
    let mut sample = timed(n, || expired = timers.drain(STORM_TICK, &mut calls));
    assert_eq!(expired, n, "{} missed storm entries", C::NAME);
    sample.expired = sample.ops;
    (sample, calls)
}

/// Steady state: fills a structure with live sessions, runs `warmup`
/// ticks untimed, then times `spans` spans of `span_ticks` ticks each, one
/// after another. Also returns the bytes per entry the structure held at
/// the end of warm-up (key table and buffer excluded), stale weight
/// included.
///
/// Every tick: take out what came due and re-arm it at now + 60 s, then
/// reset `resets_per_tick` random entries to now + 60 s.
pub(crate) fn steady_state<C: Contender>(
    inputs: &Inputs,
    warmup: u64,
    spans: usize,
    span_ticks: u64,
) -> (Vec<Sample>, f64) {
    let bytes_before = live_bytes();
    let mut run = SteadyRun {
        timers: filled::<C>(&inputs.recent_deadlines),
        inputs,
        tick: 0,
        cursor: 0,
    };
    run.advance(warmup);
    let bytes = live_bytes() - bytes_before - run.timers.caller_bytes();
    let samples = (0..spans)
        .map(|_| {
            let mut counts = (0, 0);
            let mut sample = timed(0, || counts = run.advance(span_ticks));
            (sample.ops, sample.expired) = counts;
            sample
        })
        .collect();
    (samples, bytes as f64 / inputs.n as f64)
}

/// One structure in steady state, and where it is in the inputs.
struct SteadyRun<'a, C> {
    timers: C,
    inputs: &'a Inputs,
    tick: u64,
    /// Next unused position in `inputs.steady_ids`.
    cursor: usize,
}

impl<C: Contender> SteadyRun<'_, C> {
    /// Runs `ticks` ticks; returns (operations, expiries).
    fn advance(&mut self, ticks: u64) -> (u64, u64) {
        let per_tick = self.inputs.resets_per_tick;
        let (mut ops, mut expired) = (0, 0);
        for _ in 0..ticks {
            self.tick += 1;
            let deadline = self.tick + TIMEOUT_TICKS;
            let fired = self.timers.expire_and_rearm(self.tick, deadline) as u64;
            let end = self.cursor + per_tick;
            for &id in &self.inputs.steady_ids[self.cursor..end] {
                self.timers.reset(id, deadline);
            }
            self.cursor = end;
            ops += fired + per_tick as u64;
            expired += fired;
        }
        (ops, expired)
    }
}
