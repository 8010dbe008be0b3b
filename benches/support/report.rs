//! Collected samples and the Markdown tables printed at the end.

use std::time::Duration;

use pushgate::wheel::DEFAULT_BUDGET;

use crate::contenders::TICK_MS;
use crate::workloads::Sample;

/// Index of `DelayQueue` among the columns: the baseline of every ratio.
pub(crate) const BASELINE: usize = 1;
/// Index of our wheel among the columns.
pub(crate) const WHEEL: usize = 0;

/// Every sample of one structure at one size.
#[derive(Debug, Default)]
pub(crate) struct Column {
    /// The structure's name.
    pub name: &'static str,
    /// Insert runs.
    pub insert: Vec<Sample>,
    /// Random-reset runs.
    pub random_reset: Vec<Sample>,
    /// Heartbeat-reset runs.
    pub heartbeat: Vec<Sample>,
    /// Steady-state spans.
    pub steady: Vec<Sample>,
    /// Storm drains, entries armed in order.
    pub storm: Storm,
    /// Storm drains, entries armed in random order.
    pub storm_shuffled: Storm,
    /// Bytes per entry after `n` inserts, one per insert run.
    pub bytes_per_entry: Vec<f64>,
    /// Bytes per entry at the end of the steady-state warm-up.
    pub steady_bytes_per_entry: f64,
    /// Bytes of an empty structure: overhead that does not grow with `n`.
    pub fixed_bytes: usize,
}

/// The drains of one storm workload.
#[derive(Debug, Default)]
pub(crate) struct Storm {
    /// One per run.
    pub samples: Vec<Sample>,
    /// The wall time of each poll call, one list per run.
    pub calls: Vec<Vec<Duration>>,
}

impl Storm {
    /// Records one run.
    pub(crate) fn push(&mut self, sample: Sample, calls: Vec<Duration>) {
        self.samples.push(sample);
        self.calls.push(calls);
    }
}

/// The four columns measured at one size.
#[derive(Debug)]
pub(crate) struct SizeResults {
    /// Entries.
    pub n: usize,
    /// Wheel, DelayQueue, heap, FIFO.
    pub columns: [Column; 4],
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() {
        0 => f64::NAN,
        len if len % 2 == 1 => values[mid],
        _ => (values[mid - 1] + values[mid]) / 2.0,
    }
}

/// Median throughput of `samples`, in operations per second.
pub(crate) fn median_rate(samples: &[Sample]) -> f64 {
    median(samples.iter().map(Sample::ops_per_sec).collect())
}

/// The poll calls of the storm drains, summarised.
struct CallStats {
    /// The longest call the structure makes in every run: for each call
    /// position the fastest of the runs, then the slowest position. Every
    /// run makes the same calls, so this filters out the moments another
    /// process or the hypervisor took the CPU, and keeps anything the
    /// structure itself does slowly each time (such as a first call).
    repeatable: Duration,
    /// The longest call seen in any run, descheduled time included.
    raw: Duration,
}

/// `None` when the structure does not poll in batches.
fn call_stats(runs: &[Vec<Duration>]) -> Option<CallStats> {
    let calls = runs.iter().map(Vec::len).min().filter(|&len| len > 0)?;
    let repeatable = (0..calls)
        .filter_map(|i| runs.iter().map(|run| run[i]).min())
        .max()?;
    let raw = runs.iter().flatten().copied().max()?;
    Some(CallStats { repeatable, raw })
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// A short size label: `100k`, `1M`.
pub(crate) fn size_label(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// Where a column keeps one workload's samples.
type Samples = fn(&Column) -> &[Sample];

/// Where a column keeps one storm's drains.
type StormOf = fn(&Column) -> &Storm;

/// The two storms: label and where a column keeps them.
const STORMS: [(&str, StormOf); 2] = [
    ("armed in order", |c| &c.storm),
    ("armed in random order", |c| &c.storm_shuffled),
];

/// The workloads of the throughput table: label and where its samples are.
const WORKLOADS: [(&str, Samples); 6] = [
    ("insert", |c| &c.insert),
    ("random reset (1..=600 s)", |c| &c.random_reset),
    ("heartbeat reset (now + 60 s)", |c| &c.heartbeat),
    ("steady state 90% reset / 10% expiry", |c| &c.steady),
    ("storm drain, armed in order (expirations)", |c| {
        &c.storm.samples
    }),
    ("storm drain, armed in random order (expirations)", |c| {
        &c.storm_shuffled.samples
    }),
];

fn header(first: &str, results: &[SizeResults]) -> String {
    let mut out = format!("| {first} | N |");
    for column in &results[0].columns {
        out.push_str(&format!(" {} |", column.name));
    }
    out.push_str("\n|---|---:|");
    out.push_str(&"---:|".repeat(results[0].columns.len()));
    out
}

/// Prints every table, the target checklist and notes on reading them.
///
/// `spans` steady-state spans of `span_ticks` ticks each were measured.
pub(crate) fn print(results: &[SizeResults], runs: usize, spans: usize, span_ticks: u64) {
    println!("\n## Timing wheel benchmark\n");
    print_throughput(results, runs, spans, span_ticks);
    print_storm_calls(results);
    print_memory(results);
    print_targets(results);
    print_notes();
}

fn print_throughput(results: &[SizeResults], runs: usize, spans: usize, span_ticks: u64) {
    let span_secs = (span_ticks * TICK_MS) as f64 / 1000.0;
    println!(
        "Throughput in M operations/s, median of {runs} runs (of {spans} spans of {span_secs} s \
         simulated for the steady state); in brackets the speedup over tokio-util \
         DelayQueue (higher is better).\n"
    );
    println!("{}", header("workload", results));
    for (label, samples) in WORKLOADS {
        for size in results {
            let baseline = median_rate(samples(&size.columns[BASELINE]));
            let mut row = format!("| {label} | {} |", size_label(size.n));
            for column in &size.columns {
                let rate = median_rate(samples(column));
                row.push_str(&format!(" {:.1} ({:.2}x) |", rate / 1e6, rate / baseline));
            }
            println!("{row}");
        }
    }
}

fn print_storm_calls(results: &[SizeResults]) {
    println!(
        "\nStorm: the longest single poll call in µs, at DEFAULT_BUDGET = {DEFAULT_BUDGET} \
         entries per call. First the longest call made in every run (for each call position \
         the fastest of the runs, then the slowest position); in brackets the longest call \
         seen at all, including any time this VM was descheduled.\n"
    );
    println!("{}", header("storm", results));
    for (label, storm) in STORMS {
        for size in results {
            let mut row = format!("| {label} | {} |", size_label(size.n));
            for column in &size.columns {
                match call_stats(&storm(column).calls) {
                    Some(stats) => row.push_str(&format!(
                        " {:.1} ({:.1}) |",
                        micros(stats.repeatable),
                        micros(stats.raw)
                    )),
                    None => row.push_str(" n/a (one entry per call) |"),
                }
            }
            println!("{row}");
        }
    }
}

fn print_memory(results: &[SizeResults]) {
    println!(
        "\nMemory (the structure only: the caller's id-to-key table and expiry buffer \
         excluded) and allocation calls.\n"
    );
    println!("{}", header("metric", results));
    print_rows(results, "bytes/entry after N inserts", |c| {
        format!("{:.1}", median(c.bytes_per_entry.clone()))
    });
    print_rows(results, "of which fixed (empty structure), bytes", |c| {
        c.fixed_bytes.to_string()
    });
    print_rows(results, "bytes/entry in steady state", |c| {
        format!("{:.1}", c.steady_bytes_per_entry)
    });
    print_rows(results, "allocations in steady state", |c| {
        let total: u64 = c.steady.iter().map(|s| s.allocations).sum();
        let ops: u64 = c.steady.iter().map(|s| s.ops).sum();
        format!("{total} in {ops} ops")
    });
    print_rows(results, "steady state: expiries/ops", |c| {
        let expired: u64 = c.steady.iter().map(|s| s.expired).sum();
        let ops: u64 = c.steady.iter().map(|s| s.ops).sum();
        format!("{:.1}%", 100.0 * expired as f64 / ops as f64)
    });
    print_rows(results, "allocations in storm drain (in order)", |c| {
        let most = c.storm.samples.iter().map(|s| s.allocations).max();
        most.unwrap_or(0).to_string()
    });
}

fn print_rows(results: &[SizeResults], label: &str, cell: impl Fn(&Column) -> String) {
    for size in results {
        let mut row = format!("| {label} | {} |", size_label(size.n));
        for column in &size.columns {
            row.push_str(&format!(" {} |", cell(column)));
        }
        println!("{row}");
    }
}

/// The targets for our wheel, each with what was measured.
fn print_targets(results: &[SizeResults]) {
    println!("\nTargets for pushgate Wheel.\n");
    println!("| target | measured | verdict |\n|---|---:|---|");
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    for size in results {
        let wheel = &size.columns[WHEEL];
        let label = size_label(size.n);
        let speedup = median_rate(&wheel.steady) / median_rate(&size.columns[BASELINE].steady);
        let wanted = match size.n {
            1_000_000 => Some(5.0),
            100_000 => Some(6.0),
            _ => None,
        };
        if let Some(wanted) = wanted {
            println!(
                "| steady state at {label} >= {wanted}x DelayQueue | {speedup:.2}x | {} |",
                verdict(speedup >= wanted)
            );
        }
        let bytes = median(wheel.bytes_per_entry.clone());
        let growing = bytes - wheel.fixed_bytes as f64 / size.n as f64;
        let bytes_verdict = match (bytes <= 32.0, growing <= 32.0) {
            (true, _) => "met".to_string(),
            (false, true) => format!(
                "MISSED only by the fixed {} bytes of bucket heads: {growing:.2} bytes/entry without them",
                wheel.fixed_bytes
            ),
            (false, false) => "MISSED".to_string(),
        };
        println!("| <= 32 bytes/entry at {label} | {bytes:.2} | {bytes_verdict} |");
        let allocs: u64 = wheel.steady.iter().map(|s| s.allocations).sum();
        println!(
            "| 0 allocations in steady state at {label} | {allocs} | {} |",
            verdict(allocs == 0)
        );
        for (order, storm) in STORMS {
            print_storm_targets(&label, order, storm(wheel), size.n == 1_000_000);
        }
    }
}

/// The storm targets for one storm: the rate (at 1M only) and the
/// longest poll call.
fn print_storm_targets(label: &str, order: &str, storm: &Storm, check_rate: bool) {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    if check_rate {
        let rate = median_rate(&storm.samples);
        println!(
            "| storm of {label}, {order}: >= 50 M expirations/s | {:.1} M/s | {} |",
            rate / 1e6,
            verdict(rate >= 50e6)
        );
    }
    let Some(stats) = call_stats(&storm.calls) else {
        return;
    };
    let limit = Duration::from_micros(100);
    let note = if stats.raw > limit && stats.repeatable <= limit {
        format!(
            "; the slowest call of any single run took {:.1} µs of wall time, \
             not repeated in the other runs",
            micros(stats.raw)
        )
    } else {
        String::new()
    };
    println!(
        "| storm of {label}, {order}: no poll call over 100 µs | {:.1} µs | {}{note} |",
        micros(stats.repeatable),
        verdict(stats.repeatable <= limit)
    );
}

fn print_notes() {
    println!(
        "
Notes:
- Same inputs for every structure: pre-generated from one seeded RNG; deadlines are
  100 ms ticks (the DelayQueue gets the same ticks as Instants on tokio's paused clock,
  advanced once per tick, which its column includes).
- Steady state: in each round every structure is built, warmed up for one timeout, then
  measured span after span, one structure after another.
  Wheel, DelayQueue and heap fire exactly the same entries (checked); the seed FIFO
  does not: a reset moves a deadline in place, the head blocks, and it expires almost
  nothing, so its figure is mostly resets and is not like for like.
- DelayQueue allocates a new `Sleep` each time its inner wheel hands out an entry, hence
  its allocations in the steady state and storm. The heap's reset leaves a stale
  element behind, hence its steady-state bytes/entry.
- Storm: all entries due at one tick, one timeout after they were armed; the structure is
  brought tick by tick to the tick before, then the drain of that one tick is timed.
  \"In order\": inserted in id order, so lists run through memory in order; \"random
  order\": armed at random, then all reset to the storm tick in random order, so each
  entry of a list is a cache miss. The seed FIFO has no budget: one call drains all."
    );
}
