//! Pushes reach WebSocket clients: broadcast to everyone exactly once,
//! personal messages only to their users, frames exactly as PROTOCOL.md shows.

mod support;

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;
use support::browser::{Live, push_marker};
use support::{Gateway, next_json};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_frame_carries_id_cursor_stream_and_data_verbatim() {
    let gw = Gateway::default().await;
    let mut alice = gw.connect("alice").await;
    let resp = gw
        .push(&json!({"to": "*", "id": "promo-1", "data": {"sale": "50%", "n": [1, 2]}}))
        .await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    let accepted = resp.json();
    assert_eq!(accepted["id"], "promo-1");
    let frame = next_json(&mut alice, WAIT).await;
    assert_eq!(frame["type"], "message");
    assert_eq!(frame["id"], "promo-1");
    assert_eq!(frame["stream"], "broadcast");
    assert_eq!(frame["data"], json!({"sale": "50%", "n": [1, 2]}));
    assert_eq!(frame["cursor"], accepted["cursor"]);
    assert!(frame["cursor"].as_str().is_some_and(|c| !c.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn personal_message_reaches_only_its_users() {
    let gw = Gateway::default().await;
    let mut alice = gw.connect("alice").await;
    let mut bob = gw.connect("bob").await;
    let mut carol = gw.connect("carol").await;
    let resp = gw
        .push(&json!({"to": ["alice", "carol"], "data": "hi"}))
        .await;
    assert_eq!(resp.status, 202);
    assert_eq!(resp.json()["users"], 2);
    for ws in [&mut alice, &mut carol] {
        let frame = next_json(ws, WAIT).await;
        assert_eq!(
            (frame["stream"].as_str(), frame["data"].as_str()),
            (Some("user"), Some("hi"))
        );
    }
    // Bob gets the next broadcast first: nothing personal was queued for him.
    gw.push(&json!({"to": "*", "data": "all"})).await;
    let frame = next_json(&mut bob, WAIT).await;
    assert_eq!(frame["data"], "all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_a_thousand_connections_exactly_once_each() {
    let gw = Gateway::default().await;
    let clients = join_all((0..1000).map(|i| {
        let gw = &gw;
        async move { gw.connect(&format!("user{i}")).await }
    }))
    .await;
    assert_eq!(gw.state.inspect().connections, 1000);
    for n in 0..3 {
        assert_eq!(gw.push(&json!({"to": "*", "data": n})).await.status, 202);
    }
    // Nothing more: a fourth frame would be a duplicate, queued before a
    // marker broadcast after the three (the memory broker delivers in
    // publish order).
    let marker = push_marker(&gw, json!("*")).await;
    let received = join_all(clients.into_iter().map(|mut ws| {
        let marker = &marker;
        async move {
            let mut got = Vec::new();
            for _ in 0..3 {
                got.push(
                    next_json(&mut ws, WAIT).await["data"]
                        .as_i64()
                        .expect("number"),
                );
            }
            Live::Ws(Box::new(ws))
                .assert_quiet_until(marker, WAIT)
                .await;
            got
        }
    }))
    .await;
    for got in received {
        assert_eq!(got, [0, 1, 2]);
    }
}
