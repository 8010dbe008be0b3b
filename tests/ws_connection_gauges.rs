//! `/metrics` follows WebSocket connections as they come and go:
//! `pushgate_connections{transport="ws"}`, `pushgate_sessions` and
//! `pushgate_timer_entries`.
//!
//! One test per file: the gauges are set from the gateway being scraped
//! into a process-wide recorder, so two gateways scraped at once in one
//! process would overwrite each other's values.

mod support;

use std::time::Duration;

use support::Gateway;
use support::ws::{eventually, metric};

const WAIT: Duration = Duration::from_secs(10);
const WS: &str = r#"pushgate_connections{transport="ws"}"#;

/// (ws connections, sessions, timer entries beyond `own`: the entries
/// the gateway keeps for itself, such as a periodic history sweep).
async fn gauges(gw: &Gateway, own: usize) -> (f64, f64, f64) {
    let text = gw.metrics().await;
    let get = |series: &str| metric(&text, series).unwrap_or_else(|| panic!("{series} in {text}"));
    (
        get(WS),
        get("pushgate_sessions"),
        get("pushgate_timer_entries") - own as f64,
    )
}

async fn until(gw: &Gateway, own: usize, want: (f64, f64, f64)) {
    eventually(
        WAIT,
        &format!("(ws, sessions, timers) = {want:?}"),
        || async { gauges(gw, own).await == want },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_connection_gauge_goes_up_and_down_with_sessions_and_timer_entries() {
    let gw = Gateway::default().await;
    let probe = gw.connect("alice").await;
    // Entries the gateway keeps for itself (armed before it accepts).
    let own = gw.state.inspect().timer_entries - 1;
    drop(probe);
    until(&gw, own, (0.0, 0.0, 0.0)).await;
    let mut alice1 = gw.connect("alice").await;
    let alice2 = gw.connect("alice").await;
    let bob = gw.connect_raw("bob").await;
    // Two users, three connections, one timer entry per connection.
    assert_eq!(gauges(&gw, own).await, (3.0, 2.0, 3.0));
    // Only WebSocket connections count under transport="ws".
    let text = gw.metrics().await;
    assert_eq!(
        metric(&text, r#"pushgate_connections{transport="poll"}"#),
        Some(0.0)
    );
    assert_eq!(
        metric(&text, r#"pushgate_connections{transport="sse"}"#),
        Some(0.0)
    );

    alice1.close(None).await.expect("close sent");
    until(&gw, own, (2.0, 2.0, 2.0)).await;
    drop(bob); // the TCP connection just goes
    until(&gw, own, (1.0, 1.0, 1.0)).await;
    drop(alice2);
    until(&gw, own, (0.0, 0.0, 0.0)).await;
}
