//! Resuming a WebSocket with `?cursor=`: the `recover` frame first, then
//! every missed message of the user's streams once, in publish order, then
//! live ones; `complete: false` when history no longer covers the gap.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::browser::Live;
use support::{Gateway, Ws, config, next_json, token};

const WAIT: Duration = Duration::from_secs(10);

async fn resume(gw: &Gateway, user: &str, cursor: &str) -> Ws {
    gw.try_connect(&format!("token={}&cursor={cursor}", token(user, 60)), &[])
        .await
        .expect("resume accepted")
}

async fn push(gw: &Gateway, body: Value) -> Value {
    let resp = gw.push(&body).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    resp.json()
}

/// Nothing more reaches `ws` before a marker pushed `to` it (the memory
/// broker delivers every stream in publish order).
async fn assert_quiet(gw: &Gateway, ws: Ws, to: Value) {
    Live::Ws(Box::new(ws)).assert_quiet(gw, to, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_gets_recover_complete_then_missed_messages_in_order_then_live() {
    let gw = Gateway::default().await;
    let mut first = gw.connect("alice").await;
    push(&gw, json!({"to": "*", "data": "b1"})).await;
    push(&gw, json!({"to": ["alice"], "data": "p1"})).await;
    push(&gw, json!({"to": ["bob"], "data": "not alice's"})).await;
    push(&gw, json!({"to": "*", "data": "b2"})).await;
    let seen = next_json(&mut first, WAIT).await;
    assert_eq!(seen["data"], "b1");
    drop(first);

    let cursor = seen["cursor"].as_str().expect("cursor");
    let mut again = resume(&gw, "alice", cursor).await;
    let recover = next_json(&mut again, WAIT).await;
    assert_eq!(recover["type"], "recover", "{recover}");
    assert_eq!(recover["complete"], true, "{recover}");
    assert!(recover["cursor"].is_string(), "{recover}");
    let missed = [
        next_json(&mut again, WAIT).await,
        next_json(&mut again, WAIT).await,
    ];
    assert_eq!(missed[0]["data"], "p1");
    assert_eq!(missed[0]["stream"], "user");
    assert_eq!(missed[1]["data"], "b2");
    assert_eq!(missed[1]["stream"], "broadcast");
    push(&gw, json!({"to": "*", "data": "live"})).await;
    assert_eq!(next_json(&mut again, WAIT).await["data"], "live");
    assert_quiet(&gw, again, json!(["alice"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_from_the_latest_cursor_is_complete_with_nothing_to_replay() {
    let gw = Gateway::default().await;
    push(&gw, json!({"to": "*", "data": "old"})).await;
    let last = push(&gw, json!({"to": "*", "data": "last"})).await;
    let cursor = last["cursor"].as_str().expect("cursor");
    let mut ws = resume(&gw, "alice", cursor).await;
    let recover = next_json(&mut ws, WAIT).await;
    support::assert_recover(&recover, true, "");
    push(&gw, json!({"to": "*", "data": "new"})).await;
    assert_eq!(next_json(&mut ws, WAIT).await["data"], "new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_from_another_history_gets_recover_incomplete_then_live() {
    let gw = Gateway::default().await;
    push(&gw, json!({"to": "*", "data": "before"})).await;
    // Well-formed, but not this gateway's history: not an error.
    let mut ws = resume(&gw, "alice", "00000000000000aa-5").await;
    let recover = next_json(&mut ws, WAIT).await;
    assert_eq!(recover["type"], "recover", "{recover}");
    assert_eq!(recover["complete"], false, "{recover}");
    push(&gw, json!({"to": "*", "data": "live"})).await;
    assert_eq!(next_json(&mut ws, WAIT).await["data"], "live");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_older_than_history_gets_recover_incomplete_then_live() {
    let mut c = config();
    c.history.size = 2;
    let gw = Gateway::start(c).await;
    let oldest = push(&gw, json!({"to": "*", "data": 0})).await;
    for n in 1..6 {
        push(&gw, json!({"to": "*", "data": n})).await;
    }
    let cursor = oldest["cursor"].as_str().expect("cursor");
    let mut ws = resume(&gw, "alice", cursor).await;
    let recover = next_json(&mut ws, WAIT).await;
    assert_eq!(recover["type"], "recover", "{recover}");
    assert_eq!(recover["complete"], false, "{recover}");
    push(&gw, json!({"to": "*", "data": "live"})).await;
    // Whatever history still held may come first, in order, never twice.
    let mut last = 0;
    loop {
        let frame = next_json(&mut ws, WAIT).await;
        assert_eq!(frame["type"], "message", "{frame}");
        if frame["data"] == "live" {
            break;
        }
        let n = frame["data"].as_i64().expect("a number");
        assert!(n > last, "in order, once: {n} after {last}");
        last = n;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_cursor_gets_only_messages_published_after_it_connected() {
    let gw = Gateway::default().await;
    push(&gw, json!({"to": "*", "data": "old"})).await;
    push(&gw, json!({"to": ["alice"], "data": "old personal"})).await;
    let mut ws = gw.connect("alice").await;
    push(&gw, json!({"to": "*", "data": "new"})).await;
    let frame = next_json(&mut ws, WAIT).await;
    assert_eq!(frame["type"], "message");
    assert_eq!(frame["data"], "new");
    assert_quiet(&gw, ws, json!(["alice"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_while_messages_keep_flowing_loses_and_repeats_nothing() {
    let gw = Gateway::default().await;
    let first = push(&gw, json!({"to": "*", "data": 0})).await;
    let cursor = first["cursor"].as_str().expect("cursor").to_owned();
    const TOTAL: i64 = 60;
    let (ws, ()) = tokio::join!(resume(&gw, "alice", &cursor), async {
        for n in 1..TOTAL {
            push(&gw, json!({"to": "*", "data": n})).await;
        }
    });
    let mut ws = ws;
    let recover = next_json(&mut ws, WAIT).await;
    support::assert_recover(&recover, true, "");
    for want in 1..TOTAL {
        let frame = next_json(&mut ws, WAIT).await;
        assert_eq!(frame["data"], want, "{frame}");
    }
    assert_quiet(&gw, ws, json!("*")).await;
}
