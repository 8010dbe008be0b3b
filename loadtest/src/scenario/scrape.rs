//! Reading a Prometheus text page from a gateway: one series' value, or
//! the buckets of a histogram.

use crate::http::{self, HttpConn};
use crate::target::{self, Target};

/// The page at `url` (`GET`), or `None` if it cannot be read.
pub(super) async fn page(url: &str) -> Option<String> {
    let target = Target::parse(url).ok()?;
    let stream = target::connect(target.resolve().await.ok()?, None)
        .await
        .ok()?;
    let mut conn = HttpConn::new(stream);
    let req = http::request("GET", &target.path, &target.host_header(), &[], b"");
    conn.send(&req).await.ok()?;
    let head = conn.read_head().await.ok()?;
    let body = conn.read_body(&head).await.ok()?;
    String::from_utf8(body).ok()
}

/// The value of series `name` (with its labels, as printed) on `text`.
pub(super) fn series(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.trim().parse().ok())
    })
}

/// The cumulative buckets of histogram `name` (unlabelled but for `le`):
/// `(upper bound, count)` in page order, `+Inf` as infinity.
pub(super) fn buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (le, count) = rest.split_once("\"}")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "\
# TYPE pushgate_connections gauge
pushgate_connections{transport=\"ws\"} 1900
pushgate_connections{transport=\"sse\"} 0
pushgate_timer_lateness_seconds_bucket{le=\"0.05\"} 10
pushgate_timer_lateness_seconds_bucket{le=\"0.1\"} 90
pushgate_timer_lateness_seconds_bucket{le=\"+Inf\"} 100
pushgate_timer_lateness_seconds_sum 4.5
";

    #[test]
    fn reads_a_series_and_a_histogram() {
        assert_eq!(
            series(PAGE, "pushgate_connections{transport=\"ws\"}"),
            Some(1900.0)
        );
        assert_eq!(series(PAGE, "pushgate_missing"), None);
        assert_eq!(
            buckets(PAGE, "pushgate_timer_lateness_seconds"),
            [(0.05, 10.0), (0.1, 90.0), (f64::INFINITY, 100.0)]
        );
    }
}
