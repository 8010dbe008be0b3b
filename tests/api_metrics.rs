//! `/metrics` as Prometheus scrapes it: every series PROTOCOL.md names,
//! values that follow traffic, and the optional separate listener.
//!
//! The recorder is process-wide: the tests in this file take turns (the
//! `COUNTERS` lock), so a counter grows by exactly what the test did. The
//! gauges, set from one gateway's state at scrape time, are checked in
//! `api_metrics_gauges.rs`, a process with a single gateway.

mod support;

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde_json::json;
use support::{Gateway, config, next_json, raw_http, raw_status};

const WAIT: Duration = Duration::from_secs(10);

/// Held by every test here: one at a time touches the process's counters.
static COUNTERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The value of the sample `series` (name and labels exactly as rendered,
/// such as `pushgate_connections{transport="ws"}`), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().expect("a number"))
        })
}

fn required(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

#[tokio::test]
async fn metrics_lists_every_series_the_protocol_requires() {
    let _turn = COUNTERS.lock().await;
    let gw = Gateway::default().await;
    let resp = gw.request(Method::GET, "/metrics", &[], Bytes::new()).await;
    assert_eq!(resp.status, 200);
    let content_type = resp.headers["content-type"].to_str().expect("ASCII");
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = String::from_utf8(resp.body.to_vec()).expect("UTF-8");
    for transport in ["ws", "poll", "sse"] {
        required(
            &text,
            &format!(r#"pushgate_connections{{transport="{transport}"}}"#),
        );
        required(
            &text,
            &format!(r#"pushgate_messages_delivered_total{{transport="{transport}"}}"#),
        );
    }
    required(&text, "pushgate_sessions");
    required(&text, "pushgate_timer_entries");
    for stream in ["broadcast", "user"] {
        required(
            &text,
            &format!(r#"pushgate_messages_published_total{{stream="{stream}"}}"#),
        );
    }
    for reason in ["idle", "session_ttl", "slow", "replaced"] {
        required(
            &text,
            &format!(r#"pushgate_evictions_total{{reason="{reason}"}}"#),
        );
    }
    let types = [
        ("pushgate_connections", "gauge"),
        ("pushgate_sessions", "gauge"),
        ("pushgate_timer_entries", "gauge"),
        ("pushgate_messages_published_total", "counter"),
        ("pushgate_messages_delivered_total", "counter"),
        ("pushgate_evictions_total", "counter"),
        ("pushgate_timer_lateness_seconds", "histogram"),
    ];
    for (name, kind) in types {
        let line = format!("# TYPE {name} {kind}");
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    required(&text, "pushgate_timer_lateness_seconds_count");
    required(&text, "pushgate_timer_lateness_seconds_sum");
    required(
        &text,
        r#"pushgate_timer_lateness_seconds_bucket{le="+Inf"}"#,
    );
}

#[tokio::test]
async fn published_and_delivered_counters_grow_with_a_broadcast() {
    let _turn = COUNTERS.lock().await;
    let gw = Gateway::default().await;
    let mut alice = gw.connect("alice").await;
    let before = gw.metrics().await;
    let published = r#"pushgate_messages_published_total{stream="broadcast"}"#;
    let delivered = r#"pushgate_messages_delivered_total{transport="ws"}"#;
    let resp = gw.push(&json!({"to": "*", "data": "counted"})).await;
    assert_eq!(resp.status, 202);
    assert_eq!(next_json(&mut alice, WAIT).await["data"], "counted");
    let after = gw.metrics().await;
    assert_eq!(
        required(&after, published),
        required(&before, published) + 1.0,
        "published grew by one:\n{after}"
    );
    assert_eq!(
        required(&after, delivered),
        required(&before, delivered) + 1.0,
        "delivered grew by one:\n{after}"
    );
}

#[tokio::test]
async fn each_message_is_timed_once_through_the_fan_out() {
    let _turn = COUNTERS.lock().await;
    let gw = Gateway::default().await;
    let mut alice = gw.connect("alice").await;
    let before = gw.metrics().await;
    let resp = gw.push(&json!({"to": "*", "data": "timed"})).await;
    assert_eq!(resp.status, 202);
    assert_eq!(next_json(&mut alice, WAIT).await["data"], "timed");
    // Both are recorded before the push is answered (the memory broker
    // answers once its message is delivered).
    let after = gw.metrics().await;
    for histogram in [
        "pushgate_fanout_wait_seconds",
        "pushgate_fanout_duration_seconds",
    ] {
        let count = format!("{histogram}_count");
        assert_eq!(
            sample(&after, &count).unwrap_or_default(),
            sample(&before, &count).unwrap_or_default() + 1.0,
            "{histogram} timed the broadcast once:\n{after}"
        );
        let sum = format!("{histogram}_sum");
        assert!(
            required(&after, &sum) > sample(&before, &sum).unwrap_or_default(),
            "{histogram} took some time:\n{after}"
        );
        let inf = format!(r#"{histogram}_bucket{{le="+Inf"}}"#);
        assert_eq!(required(&after, &inf), required(&after, &count));
        assert!(
            after.contains(&format!(r#"{histogram}_bucket{{le="0.00005"}}"#)),
            "{histogram} has the fan-out buckets:\n{after}"
        );
    }
    assert!(
        after.contains("# TYPE pushgate_fanout_wait_seconds histogram"),
        "{after}"
    );
}

#[tokio::test]
async fn personal_pushes_count_on_the_user_stream() {
    let _turn = COUNTERS.lock().await;
    let gw = Gateway::default().await;
    let mut bob = gw.connect("bob").await;
    let series = r#"pushgate_messages_published_total{stream="user"}"#;
    let before = required(&gw.metrics().await, series);
    let resp = gw.push(&json!({"to": ["bob"], "data": "mine"})).await;
    assert_eq!(resp.status, 202);
    assert_eq!(next_json(&mut bob, WAIT).await["data"], "mine");
    let after = required(&gw.metrics().await, series);
    assert_eq!(after, before + 1.0, "{before} -> {after}");
}

#[tokio::test]
async fn separate_metrics_listener_serves_metrics_and_the_main_listener_does_not() {
    let _turn = COUNTERS.lock().await;
    let mut c = config();
    c.metrics.listen = Some("127.0.0.1:0".into());
    let (gw, metrics_addr) = Gateway::start_with_metrics_addr(c).await;
    let metrics_addr = metrics_addr.expect("a separate metrics listener");
    assert_ne!(metrics_addr, gw.addr);
    let answer = raw_http(
        metrics_addr,
        b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    assert!(answer.contains("pushgate_connections{"), "{answer}");
    let other = raw_http(
        metrics_addr,
        b"GET /healthz HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&other), 404, "only /metrics there: {other}");
    let main = gw.request(Method::GET, "/metrics", &[], Bytes::new()).await;
    assert_eq!(main.status, 404, "{:?}", main.body);
    assert_eq!(main.error_code(), "not_found");
}
