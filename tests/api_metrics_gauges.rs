//! The `/metrics` gauges follow a client connecting and leaving.
//!
//! Gauges are set from the gateway's state at scrape time and the recorder
//! is process-wide, so this file holds one test: one gateway per process,
//! as in production.

mod support;

use std::time::Duration;

use support::Gateway;

const WAIT: Duration = Duration::from_secs(10);

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().expect("a number"))
        })
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

const WS: &str = r#"pushgate_connections{transport="ws"}"#;
const POLL: &str = r#"pushgate_connections{transport="poll"}"#;
const SSE: &str = r#"pushgate_connections{transport="sse"}"#;

#[tokio::test]
async fn connection_session_and_timer_gauges_follow_a_websocket_client() {
    let gw = Gateway::default().await;
    let idle = gw.metrics().await;
    assert_eq!(sample(&idle, WS), 0.0, "{idle}");
    assert_eq!(sample(&idle, "pushgate_sessions"), 0.0, "{idle}");
    let idle_entries = sample(&idle, "pushgate_timer_entries");
    // What the alert rules in deploy/prometheus/ divide and compare by.
    assert_eq!(
        sample(&idle, "pushgate_max_connections"),
        19_000.0,
        "{idle}"
    );
    assert_eq!(sample(&idle, "pushgate_timer_tick_seconds"), 0.1, "{idle}");
    assert_eq!(sample(&idle, "pushgate_broker_up"), 1.0, "{idle}");
    assert_eq!(sample(&idle, "pushgate_bus_errors_total"), 0.0, "{idle}");
    assert_eq!(
        sample(&idle, "pushgate_bus_reconnects_total"),
        0.0,
        "{idle}"
    );
    if cfg!(target_os = "linux") {
        assert!(
            sample(&idle, "process_resident_memory_bytes") > 1e6,
            "{idle}"
        );
    }

    let alice = gw.connect("alice").await;
    let busy = gw.metrics().await;
    assert_eq!(sample(&busy, WS), 1.0, "{busy}");
    assert_eq!(sample(&busy, POLL), 0.0, "{busy}");
    assert_eq!(sample(&busy, SSE), 0.0, "{busy}");
    assert_eq!(sample(&busy, "pushgate_sessions"), 1.0, "{busy}");
    assert!(
        sample(&busy, "pushgate_timer_entries") > idle_entries,
        "a connection holds a timer entry:\n{busy}"
    );

    drop(alice);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = gw.metrics().await;
        if sample(&text, WS) == 0.0 && sample(&text, "pushgate_timer_entries") == idle_entries {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gauges never went back after the client left:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
