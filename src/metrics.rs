//! Metric names, in one place so they are frozen together.

/// The metric names pushgate publishes (Prometheus conventions).
pub mod names {
    /// Histogram: how late each timer expiry fired after its deadline tick.
    pub const TIMER_LATENESS_SECONDS: &str = "pushgate_timer_lateness_seconds";
}
