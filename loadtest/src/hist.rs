//! Latency histograms: recorded in microseconds, shipped between processes
//! as `(value, count)` pairs, summarised in milliseconds.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A histogram of microseconds, 3 significant digits, up to one day.
pub(crate) type Hist = Histogram<u64>;

/// Highest value tracked: one day in microseconds.
const HIGHEST_US: u64 = 24 * 3600 * 1_000_000;

/// An empty histogram.
pub(crate) fn new_hist() -> Hist {
    Histogram::new_with_bounds(1, HIGHEST_US, 3).expect("1..=1 day at 3 digits is a valid range")
}

/// Records `us`, clamping to the tracked range.
pub(crate) fn record(hist: &mut Hist, us: u64) {
    hist.saturating_record(us.clamp(1, HIGHEST_US));
}

/// The non-empty buckets, for shipping to the coordinator.
pub(crate) fn to_pairs(hist: &Hist) -> Vec<(u64, u64)> {
    hist.iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

/// Adds shipped buckets into `hist`.
pub(crate) fn add_pairs(hist: &mut Hist, pairs: &[(u64, u64)]) {
    for &(value, count) in pairs {
        let _ = hist.record_n(value.clamp(1, HIGHEST_US), count);
    }
}

/// A histogram summarised for people and JSON, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Summary {
    /// Values recorded.
    pub count: u64,
    /// Smallest, ms.
    pub min_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.9th percentile, ms.
    pub p999_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
    /// Mean, ms.
    pub mean_ms: f64,
}

/// Summarises `hist` (values in µs) in ms, rounded to 0.01 ms.
pub(crate) fn summary(hist: &Hist) -> Summary {
    if hist.is_empty() {
        return Summary::default();
    }
    let ms = |us: u64| round2(us as f64 / 1000.0);
    Summary {
        count: hist.len(),
        min_ms: ms(hist.min()),
        p50_ms: ms(hist.value_at_quantile(0.5)),
        p90_ms: ms(hist.value_at_quantile(0.9)),
        p99_ms: ms(hist.value_at_quantile(0.99)),
        p999_ms: ms(hist.value_at_quantile(0.999)),
        max_ms: ms(hist.max()),
        mean_ms: round2(hist.mean() / 1000.0),
    }
}

/// `x` rounded to two decimals.
pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_round_trip_keeps_counts_and_percentiles() {
        let mut a = new_hist();
        for us in [1, 10, 100, 1000, 10_000, 10_000, 0] {
            record(&mut a, us);
        }
        let mut b = new_hist();
        add_pairs(&mut b, &to_pairs(&a));
        assert_eq!(a.len(), b.len());
        assert_eq!(a.value_at_quantile(0.5), b.value_at_quantile(0.5));
        assert_eq!(summary(&b).count, 7);
        assert!((summary(&b).max_ms - 10.0).abs() < 0.02);
    }
}
