//! The `storm` scenario's own figures: node B's `/metrics`, read every
//! [`SAMPLE_EVERY`] while node A is drained or killed, turned into
//! reconnects per second, the time until every client is back, and B's
//! timer lateness p99 over the storm, each held to the target.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use super::scrape;
use crate::hist;
use crate::report::Report;
use crate::worker::protocol::{Kind, Outcome};

/// How often node B's `/metrics` is read.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// B's open WebSockets.
const CONNECTIONS: &str = "pushgate_connections{transport=\"ws\"}";
/// B's timer lateness histogram.
const LATENESS: &str = "pushgate_timer_lateness_seconds";
/// Most a drained storm's busiest second may exceed the average rate over
/// the spread window (issue 16).
const PEAK_OVER_AVERAGE_MAX: f64 = 1.5;
/// Lateness allowed above one tick (issue 16).
const LATENESS_SLACK_MS: u64 = 50;
/// Longest a killed node's clients may take to be back (issue 16).
const KILLED_BACK_WITHIN_SECS: f64 = 30.0;

/// One reading of node B's `/metrics`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    /// Seconds since the first push.
    pub t: f64,
    /// Open WebSockets.
    pub connections: Option<f64>,
    /// Timer lateness, cumulative buckets.
    pub lateness: Vec<(f64, f64)>,
}

impl Sample {
    /// Reads `text` (a `/metrics` page) taken at `t`.
    pub(super) fn parse(text: &str, t: f64) -> Self {
        Self {
            t,
            connections: scrape::series(text, CONNECTIONS),
            lateness: scrape::buckets(text, LATENESS),
        }
    }
}

/// How the storm was made and what it is held to.
#[derive(Debug, Clone)]
pub(super) struct Storm {
    /// SIGKILL (true) or SIGTERM.
    pub kill: bool,
    /// Node A's `[server] drain_spread_secs`.
    pub spread_secs: f64,
    /// Node B's `[timer] tick_ms`.
    pub tick_ms: u64,
    /// Where to draw reconnects per second (SVG).
    pub chart: Option<PathBuf>,
}

/// The last sample taken at or before `t`.
fn at(samples: &[Sample], t: f64) -> Option<&Sample> {
    samples
        .iter()
        .rev()
        .find(|s| s.t <= t && s.connections.is_some())
}

/// Connections B gained in each whole second from `from` (the signal),
/// until the second after the last gain (a loss counts as 0).
pub(super) fn per_second(samples: &[Sample], from: f64) -> Vec<u64> {
    let Some(last) = samples.iter().rev().find(|s| s.connections.is_some()) else {
        return Vec::new();
    };
    let value = |t: f64| {
        at(samples, t)
            .or_else(|| samples.iter().find(|s| s.connections.is_some()))
            .and_then(|s| s.connections)
            .unwrap_or(0.0)
    };
    let mut out = Vec::new();
    let mut before = value(from);
    let mut second = 1.0;
    while from + second - 1.0 < last.t {
        let now = value(from + second);
        out.push((now - before).max(0.0).round() as u64);
        before = now;
        second += 1.0;
    }
    // The quiet seconds after the last reconnect, but one.
    let keep = out.iter().rposition(|c| *c > 0).map_or(0, |last| last + 2);
    out.truncate(keep);
    out
}

/// Seconds from `from` until B held `clients` WebSockets, if it did.
pub(super) fn back_after(samples: &[Sample], from: f64, clients: u64) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.t >= from && s.connections.is_some_and(|c| c >= clients as f64))
        .map(|s| s.t - from)
}

/// Seconds from the signal to the end of the last second in which B
/// gained connections (`counts` from [`per_second`]), if it gained any: an
/// upper bound of the time until all are back that holds even when B's
/// gauge never showed every client at once (the last ones came back as
/// the run ended and closed its connections between two readings).
pub(super) fn last_gain_secs(counts: &[u64]) -> Option<u64> {
    counts
        .iter()
        .rposition(|c| *c > 0)
        .map(|last| last as u64 + 1)
}

/// The upper bound of the bucket holding the 99th percentile of what was
/// recorded between two readings of a cumulative histogram (`None`: no
/// observations).
pub(super) fn p99(before: &[(f64, f64)], after: &[(f64, f64)]) -> Option<f64> {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, count)| {
            let was = before
                .iter()
                .find(|(b, _)| b == le)
                .map_or(0.0, |(_, c)| *c);
            (*le, count - was)
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    delta
        .iter()
        .find(|(_, count)| *count >= 0.99 * total)
        .map(|(le, _)| *le)
}

/// Adds the storm's figures to `report`, and to `problems` what misses its
/// target. `signal_at`: seconds after the first push when node A was
/// signalled (`None`: it never was).
pub(super) fn report(
    report: &mut Report,
    storm: &Storm,
    samples: &[Sample],
    signal_at: Option<f64>,
    outcomes: &[(Kind, Outcome)],
    clients: u64,
    problems: &mut Vec<String>,
) {
    let Some(from) = signal_at else {
        problems.push("node A was never signalled".into());
        return;
    };
    let refused: u64 = outcomes.iter().map(|(_, o)| o.reconnects_refused_503).sum();
    let failed: u64 = outcomes.iter().map(|(_, o)| o.reconnect_failures).sum();
    let reconnects: u64 = outcomes.iter().map(|(_, o)| o.reconnects).sum();
    report.metric("storm_reconnects", "reconnects made", reconnects, "");
    report.metric(
        "storm_refused_503",
        "reconnects refused with 503",
        refused,
        "",
    );
    report.metric(
        "storm_reconnect_failures",
        "reconnect attempts that failed (503 included)",
        failed,
        "",
    );
    let counts = per_second(samples, from);
    let peak = counts.iter().copied().max().unwrap_or(0);
    report.metric("storm_peak_per_sec", "busiest second at B", peak, "1/s");
    report.detail("storm_reconnects_per_second", json!(counts));
    if let Some(secs) = last_gain_secs(&counts) {
        report.metric(
            "storm_last_gain_secs",
            "end of the last second in which B gained clients",
            secs,
            "s",
        );
    }
    match back_after(samples, from, clients) {
        Some(secs) => report.metric(
            "storm_all_back_secs",
            "time until every client is on B",
            hist::round2(secs),
            "s",
        ),
        None => problems.push(format!(
            "B never held all {clients} clients (last read: {:?})",
            samples.iter().rev().find_map(|s| s.connections)
        )),
    }
    let back = back_after(samples, from, clients);
    if storm.kill {
        if back.is_none_or(|secs| secs > KILLED_BACK_WITHIN_SECS) {
            problems.push(format!(
                "killed: not every client back within {KILLED_BACK_WITHIN_SECS} s ({back:?})"
            ));
        }
    } else if storm.spread_secs > 0.0 {
        let average = clients as f64 / storm.spread_secs;
        report.metric(
            "storm_average_per_sec",
            "average over the spread window",
            average.round(),
            "1/s",
        );
        let ratio = peak as f64 / average.max(1.0);
        report.metric(
            "storm_peak_over_average",
            "busiest second over that average",
            hist::round2(ratio),
            "x",
        );
        if ratio > PEAK_OVER_AVERAGE_MAX {
            problems.push(format!(
                "drained: busiest second {peak}/s is {ratio:.2}x the average {average:.0}/s (target <= {PEAK_OVER_AVERAGE_MAX}x)"
            ));
        }
    }
    let end = from + back.unwrap_or(f64::INFINITY);
    let first = at(samples, from);
    let last = samples
        .iter()
        .rev()
        .find(|s| s.t <= end && !s.lateness.is_empty());
    if let (Some(first), Some(last)) = (first, last) {
        let limit = (storm.tick_ms + LATENESS_SLACK_MS) as f64 / 1000.0;
        match p99(&first.lateness, &last.lateness) {
            Some(p99) => {
                report.metric(
                    "storm_b_lateness_p99_ms",
                    "B's timer lateness p99 during the storm (bucket bound)",
                    if p99.is_finite() {
                        json!(hist::round2(p99 * 1000.0))
                    } else {
                        json!("+Inf")
                    },
                    "ms",
                );
                if p99 > limit + 1e-9 {
                    problems.push(format!(
                        "B's timer lateness p99 {p99} s is over one tick + {LATENESS_SLACK_MS} ms ({limit} s)"
                    ));
                }
            }
            None => report.metric(
                "storm_b_lateness_p99_ms",
                "B's timer lateness p99 during the storm",
                "no timer fired",
                "",
            ),
        }
    }
    for (second, count) in counts.iter().enumerate() {
        let bar = "#".repeat((*count * 40 / peak.max(1)) as usize);
        report.metric(
            &format!("storm_second_{second:02}"),
            &format!("reconnects at B in second {second}"),
            *count,
            &bar,
        );
    }
    if let Some(path) = &storm.chart {
        let mut marks = Vec::new();
        if !storm.kill && storm.spread_secs > 0.0 {
            let average = clients as f64 / storm.spread_secs;
            marks.push((
                average,
                format!("average over the {}s spread", storm.spread_secs),
            ));
            marks.push((
                average * PEAK_OVER_AVERAGE_MAX,
                format!("{PEAK_OVER_AVERAGE_MAX}x the average (target)"),
            ));
        }
        let title = format!(
            "{clients} clients, node A {}: reconnects per second at node B",
            if storm.kill { "killed" } else { "drained" }
        );
        if let Err(err) = crate::chart::per_second(path, &title, "reconnects", &counts, &marks) {
            eprintln!("loadtest: warning: {err:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, connections: f64) -> Sample {
        Sample {
            t,
            connections: Some(connections),
            lateness: Vec::new(),
        }
    }

    #[test]
    fn gains_are_counted_per_second_from_the_signal() {
        let samples = [
            s(0.5, 0.0),
            s(1.0, 0.0),
            s(1.5, 50.0),
            s(2.0, 100.0),
            s(2.5, 180.0),
            s(3.0, 200.0),
            s(3.5, 200.0),
            s(4.5, 200.0),
            s(5.5, 200.0),
        ];
        assert_eq!(per_second(&samples, 1.0), [100, 100, 0]);
        assert_eq!(back_after(&samples, 1.0, 200), Some(2.0));
        assert_eq!(back_after(&samples, 1.0, 201), None);
        assert!(per_second(&[], 1.0).is_empty());
        assert_eq!(last_gain_secs(&per_second(&samples, 1.0)), Some(2));
        assert_eq!(last_gain_secs(&[0, 5, 0, 3, 0]), Some(4));
        assert_eq!(last_gain_secs(&[0, 0]), None);
    }

    #[test]
    fn p99_is_the_bucket_bound_of_what_was_added() {
        let before = [(0.1, 100.0), (0.15, 100.0), (f64::INFINITY, 100.0)];
        let after = [(0.1, 1080.0), (0.15, 1100.0), (f64::INFINITY, 1100.0)];
        assert_eq!(p99(&before, &after), Some(0.15));
        let late = [(0.1, 100.0), (0.15, 100.0), (f64::INFINITY, 200.0)];
        assert_eq!(p99(&before, &late), Some(f64::INFINITY));
        assert_eq!(p99(&before, &before), None);
    }
}
