//! The broker series the alert rules in `deploy/prometheus/alerts.yml`
//! page on follow a Redis outage: `pushgate_broker_up` drops to 0 while
//! Redis is gone and returns to 1, a push refused meanwhile counts in
//! `pushgate_bus_errors_total`, and the lost subscription in
//! `pushgate_bus_reconnects_total`. One gateway per process (the gauges
//! are process-wide).

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Gateway, redis};

const WAIT: Duration = Duration::from_secs(15);

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().expect("a number"))
        })
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

/// Waits until `series` reads `want`; the metrics text it was read in.
async fn eventually(gw: &Gateway, series: &str, want: f64) -> String {
    let what = format!("{series} reads {want}");
    support::ws::until_ok(WAIT, &what, move || async move {
        let text = gw.metrics().await;
        if sample(&text, series) == want {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_series_follow_a_redis_outage() {
    if !redis::available() {
        return;
    }
    let mut server = redis::PrivateRedis::start();
    let gw = Gateway::start(redis::config(&server.url(), &redis::prefix("broker-up"))).await;
    let before = eventually(&gw, "pushgate_broker_up", 1.0).await;
    let errors = sample(&before, "pushgate_bus_errors_total");
    let reconnects = sample(&before, "pushgate_bus_reconnects_total");

    server.stop();
    let down = eventually(&gw, "pushgate_broker_up", 0.0).await;
    assert_eq!(sample(&down, "pushgate_max_connections"), 19_000.0);
    let refused = gw.push(&json!({"to": "*", "data": "lost"})).await;
    assert_eq!(refused.status, 503, "{:?}", refused.body);
    assert_eq!(refused.error_code(), "unavailable");
    // One failed command, the push's publish: nothing else in this
    // process talks to Redis through the bus while it is down.
    let after_push = gw.metrics().await;
    assert_eq!(
        sample(&after_push, "pushgate_bus_errors_total") - errors,
        1.0,
        "{after_push}"
    );

    server.restart();
    let up = eventually(&gw, "pushgate_broker_up", 1.0).await;
    // One count per attempt to subscribe again, at a doubling back-off
    // while Redis is down: at least the first, how many more depends on
    // how long the restart took, so this delta has no exact value.
    assert!(
        sample(&up, "pushgate_bus_reconnects_total") > reconnects,
        "{up}"
    );
}
