//! A token whose `exp` is as far in the future as a JSON number allows
//! (`u64::MAX`, which `pushgate token --ttl 18446744073709551615` mints)
//! is a valid token: the connection works on every transport, and once it
//! closes nothing of it is left (registry, timer entry, connections
//! gauge). It used to overflow `Instant + Duration` when the connection
//! was armed, panicking its task and leaking its place for good.
//!
//! One test per file: the gauges are set from the gateway being scraped
//! into a process-wide recorder.

mod support;

use std::time::Duration;

use pushgate::protocol::{Transport, UserId};
use serde_json::json;
use support::browser::{Sse, poll_frames, spawn_get, wait_for_connections};
use support::ws::{eventually, metric};
use support::{Gateway, SECRET, next_json};

const WAIT: Duration = Duration::from_secs(10);

fn far_future_token(user: &str) -> String {
    let user = UserId::parse(user).expect("valid user id");
    pushgate::auth::token::mint(SECRET.as_bytes(), &user, u64::MAX)
}

/// Waits until the gateway holds no connection, no user object and no
/// timer entry beyond its own, and `/metrics` says so too.
async fn all_released(gw: &Gateway, own_timers: usize) {
    eventually(WAIT, "every connection released", || async {
        gw.state.inspect().connections == 0
            && gw.state.inspect().users == 0
            && gw.state.inspect().timer_entries == own_timers
    })
    .await;
    let text = gw.metrics().await;
    for transport in ["ws", "poll", "sse"] {
        let series = format!(r#"pushgate_connections{{transport="{transport}"}}"#);
        assert_eq!(metric(&text, &series), Some(0.0), "{series} in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_expires_at_u64_max_works_everywhere_and_leaks_nothing() {
    let mut config = support::config();
    // A poll session ends soon after its poll, so its entry is gone
    // within the test.
    config.session.poll_timeout_secs = 1;
    config.session.session_ttl_secs = 2;
    let gw = Gateway::start(config).await;

    // WebSocket.
    let url = gw.ws_url(&format!("token={}", far_future_token("wes")));
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("a WebSocket with a u64::MAX exp is accepted");
    wait_for_connections(&gw, Transport::Ws, 1, WAIT).await;
    // Entries the gateway keeps for itself (armed once it runs), besides
    // the connection's own.
    let own_timers = gw.state.inspect().timer_entries - 1;
    assert_eq!(
        gw.push(&json!({"to": ["wes"], "data": 1})).await.status,
        202
    );
    assert_eq!(next_json(&mut ws, WAIT).await["data"], 1);
    ws.close(None).await.expect("close sent");
    drop(ws);
    all_released(&gw, own_timers).await;

    // Server-sent events.
    let mut sse = Sse::open(
        gw.addr,
        &format!("/sse?token={}", far_future_token("sid")),
        &[],
    )
    .await;
    assert_eq!(sse.status, 200);
    wait_for_connections(&gw, Transport::Sse, 1, WAIT).await;
    assert_eq!(
        gw.push(&json!({"to": ["sid"], "data": 2})).await.status,
        202
    );
    assert_eq!(sse.next_json(WAIT).await["data"], 2);
    drop(sse);
    all_released(&gw, own_timers).await;

    // Long-poll: parked, then answered with the push.
    let parked = spawn_get(
        gw.addr,
        format!("/poll?token={}", far_future_token("pol")),
        Vec::new(),
    );
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    assert_eq!(
        gw.push(&json!({"to": ["pol"], "data": 3})).await.status,
        202
    );
    let answer = tokio::time::timeout(WAIT, parked)
        .await
        .expect("poll answered in time")
        .expect("poll task");
    assert_eq!(poll_frames(&answer)[0]["data"], 3);
    // The session entry goes with the session (session_ttl_secs).
    all_released(&gw, own_timers).await;
}
