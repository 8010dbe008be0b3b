//! Timeout structures side by side: our hashed timing wheel, tokio-util's
//! `DelayQueue`, a lazy-deletion binary heap and the seed article's FIFO.
//!
//! Run with `cargo bench --bench wheel` (100k and 1M entries, 9 runs each:
//! under a minute on two cores), or with `WHEEL_BENCH_QUICK=1` for a smoke run
//! at 100k with 3 runs (under a second). Without `--bench` (as
//! `cargo test --benches` runs it) it does one tiny pass at 10k, to check
//! that it works. It prints Markdown tables at the end; progress goes to
//! stderr.
//!
//! Workloads, each on the same pre-generated sequence for every structure,
//! with 100 ms ticks and our wheel at 4096 slots as shipped:
//!
//! | workload        | what is timed                                            |
//! |-----------------|----------------------------------------------------------|
//! | insert          | `n` inserts into a fresh structure, deadlines 1..=600 s  |
//! | random reset    | `n` resets of random entries to random 1..=600 s         |
//! | heartbeat reset | each entry once to now + 60 s as now advances (later)    |
//! | steady state    | per tick: re-arm what came due, reset random entries     |
//! |                 | to now + 60 s; 90% of operations are resets              |
//! | storm           | draining `n` entries all due at one tick, armed in order |
//! | storm, shuffled | the same, armed in random order                          |
//!
//! A hand-written harness rather than criterion: the storm's longest poll,
//! allocation counts and bytes per entry need custom measurement, and the
//! 1M-entry workloads only need a handful of samples to be stable. Every
//! figure is the median over runs. Each run builds its structure afresh,
//! and runs interleave the structures so that noise from other processes
//! lands on all of them alike; the steady state, one long-lived structure
//! measured span after span, runs the structures one after another.

#[path = "support/contenders.rs"]
mod contenders;
#[path = "support/counting_alloc.rs"]
mod counting_alloc;
#[path = "support/lazy_heap.rs"]
mod lazy_heap;
#[path = "support/report.rs"]
mod report;
#[path = "support/seed_fifo.rs"]
mod seed_fifo;
#[path = "support/workloads.rs"]
mod workloads;

use std::time::Instant;

use contenders::{Contender, DelayQueueTimers, FifoTimers, HeapTimers, WheelTimers};
use report::{Column, SizeResults, median_rate, size_label};
use workloads::{Inputs, Sample};

#[global_allocator]
static ALLOCATOR: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// How much to measure.
#[derive(Debug)]
struct Plan {
    /// Entry counts, each a full set of workloads.
    sizes: &'static [usize],
    /// Runs of each workload per structure.
    runs: usize,
    /// Steady-state rounds: each builds every structure afresh, warms it
    /// up and measures `spans` spans.
    rounds: usize,
    /// Steady-state ticks before measuring, in each round.
    warmup_ticks: u64,
    /// Steady-state spans measured in each round.
    spans: usize,
    /// Ticks per steady-state span.
    span_ticks: u64,
}

impl Plan {
    /// The full plan, the quick one under `WHEEL_BENCH_QUICK=1`, or a tiny
    /// one when not run by `cargo bench`.
    fn from_env() -> Self {
        let benching = std::env::args().any(|arg| arg == "--bench");
        let quick = std::env::var("WHEEL_BENCH_QUICK").is_ok_and(|v| v == "1");
        match (benching, quick) {
            (false, _) => Self {
                sizes: &[10_000],
                runs: 1,
                rounds: 1,
                warmup_ticks: 600,
                spans: 1,
                span_ticks: 10,
            },
            (true, true) => Self {
                sizes: &[100_000],
                runs: 3,
                rounds: 1,
                warmup_ticks: 600,
                spans: 3,
                span_ticks: 50,
            },
            (true, false) => Self {
                sizes: &[100_000, 1_000_000],
                runs: 9,
                rounds: 3,
                warmup_ticks: 600,
                spans: 3,
                span_ticks: 100,
            },
        }
    }
}

/// Runs one workload function on every structure, in column order.
macro_rules! each_contender {
    ($workload:ident($($arg:expr),*)) => {
        [
            workloads::$workload::<WheelTimers>($($arg),*),
            workloads::$workload::<DelayQueueTimers>($($arg),*),
            workloads::$workload::<HeapTimers>($($arg),*),
            workloads::$workload::<FifoTimers>($($arg),*),
        ]
    };
}

fn main() {
    // Every DelayQueue lives in this runtime's context for the whole run.
    let _runtime = contenders::enter_runtime();
    let plan = Plan::from_env();
    let started = Instant::now();
    let results: Vec<SizeResults> = plan.sizes.iter().map(|&n| measure(n, &plan)).collect();
    let spans = plan.rounds * plan.spans;
    report::print(&results, plan.runs, spans, plan.span_ticks);
    println!("\nTotal time: {:.1} s", started.elapsed().as_secs_f64());
}

/// Every workload at `n` entries.
fn measure(n: usize, plan: &Plan) -> SizeResults {
    let steady_ticks = plan.warmup_ticks + plan.spans as u64 * plan.span_ticks;
    let inputs = Inputs::generate(n, steady_ticks);
    let mut columns = [
        WheelTimers::NAME,
        DelayQueueTimers::NAME,
        HeapTimers::NAME,
        FifoTimers::NAME,
    ]
    .map(|name| Column {
        name,
        ..Column::default()
    });
    for (column, bytes) in columns.iter_mut().zip(each_contender!(fixed_bytes())) {
        column.fixed_bytes = bytes;
    }

    measure_operations(&inputs, plan, &mut columns);
    measure_steady_state(&inputs, plan, &mut columns);
    measure_storms(&inputs, plan, &mut columns);
    SizeResults { n, columns }
}

/// Insert, random reset and heartbeat reset: `plan.runs` runs each.
fn measure_operations(inputs: &Inputs, plan: &Plan, columns: &mut [Column; 4]) {
    let size = size_label(inputs.n);
    repeat(
        plan,
        || each_contender!(insert(inputs)),
        |results| {
            for (column, (sample, bytes)) in columns.iter_mut().zip(results) {
                column.insert.push(sample);
                column.bytes_per_entry.push(bytes);
            }
        },
    );
    progress(&size, "insert", columns, |c| &c.insert);

    repeat(
        plan,
        || each_contender!(random_reset(inputs)),
        |samples| push_each(columns, samples, |c| &mut c.random_reset),
    );
    progress(&size, "random reset", columns, |c| &c.random_reset);

    repeat(
        plan,
        || each_contender!(heartbeat(inputs)),
        |samples| push_each(columns, samples, |c| &mut c.heartbeat),
    );
    progress(&size, "heartbeat reset", columns, |c| &c.heartbeat);
}

/// Both storms: `plan.runs` runs each.
fn measure_storms(inputs: &Inputs, plan: &Plan, columns: &mut [Column; 4]) {
    let size = size_label(inputs.n);
    repeat(
        plan,
        || each_contender!(storm(inputs)),
        |drains| {
            for (column, (sample, calls)) in columns.iter_mut().zip(drains) {
                column.storm.push(sample, calls);
            }
        },
    );
    progress(&size, "storm", columns, |c| &c.storm.samples);

    repeat(
        plan,
        || each_contender!(storm_shuffled(inputs)),
        |drains| {
            for (column, (sample, calls)) in columns.iter_mut().zip(drains) {
                column.storm_shuffled.push(sample, calls);
            }
        },
    );
    progress(&size, "storm, shuffled", columns, |c| {
        &c.storm_shuffled.samples
    });
}

/// Runs `workload` once to warm up (the first run pays for fresh pages
/// and a cold allocator; its results are dropped), then `plan.runs` times,
/// handing each result to `record`.
fn repeat<R>(plan: &Plan, mut workload: impl FnMut() -> R, mut record: impl FnMut(R)) {
    drop(workload());
    for _ in 0..plan.runs {
        record(workload());
    }
}

/// Steady state in rounds. Within a round the structures run one after
/// another, each warmed up and then measured span after span: interleaving
/// short spans would have each structure start every span with caches full
/// of another one's data, measuring the refill rather than the structure.
/// Rounds replay the same inputs, so a burst of noise from other processes
/// lands in one round of one structure, not in all of its spans.
fn measure_steady_state(inputs: &Inputs, plan: &Plan, columns: &mut [Column; 4]) {
    for _ in 0..plan.rounds {
        let results = each_contender!(steady_state(
            inputs,
            plan.warmup_ticks,
            plan.spans,
            plan.span_ticks
        ));
        // Wheel, DelayQueue and heap are exact to the tick, so they must see
        // the very same expiries in every span; the FIFO is not (head
        // blocking).
        let expired =
            |column: usize| -> Vec<u64> { results[column].0.iter().map(|s| s.expired).collect() };
        assert!(
            expired(0) == expired(1) && expired(1) == expired(2),
            "structures disagree on steady-state expiries: {:?}",
            [expired(0), expired(1), expired(2)]
        );
        for (column, (samples, bytes)) in columns.iter_mut().zip(results) {
            column.steady.extend(samples);
            column.steady_bytes_per_entry = bytes;
        }
    }
    progress(&size_label(inputs.n), "steady state", columns, |c| {
        &c.steady
    });
}

fn push_each(
    columns: &mut [Column; 4],
    samples: [Sample; 4],
    field: impl Fn(&mut Column) -> &mut Vec<Sample>,
) {
    for (column, sample) in columns.iter_mut().zip(samples) {
        field(column).push(sample);
    }
}

/// One line per workload on stderr while the bench runs.
fn progress(size: &str, workload: &str, columns: &[Column; 4], field: fn(&Column) -> &Vec<Sample>) {
    let rates: Vec<String> = columns
        .iter()
        .map(|c| format!("{} {:.1}", c.name, median_rate(field(c)) / 1e6))
        .collect();
    eprintln!("{size:>5} {workload:<16} Mops/s: {}", rates.join(", "));
}
