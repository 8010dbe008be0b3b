//! Idempotent pushes: a repeated `"id"` within `[history] ttl_secs` is
//! answered `200` with `"duplicate": true` and not delivered again, for
//! broadcasts and personal pushes alike; different ids are both delivered.

mod support;

use std::time::Duration;

use pushgate::protocol::Transport;
use serde_json::{Value, json};
use support::browser::{Live, data_of, poll_frames, poll_path, spawn_get, wait_for_connections};
use support::{Gateway, next_json};

const WAIT: Duration = Duration::from_secs(10);

async fn push(gw: &Gateway, body: Value, status: u16) -> Value {
    let resp = gw.push(&body).await;
    assert_eq!(resp.status, status, "{body}: {resp:?}");
    resp.json()
}

/// The next frames' data until `sentinel` (excluded), then nothing more
/// before a marker pushed `to` the client (on the stream of the
/// duplicate).
async fn data_until(gw: &Gateway, client: &mut Live, sentinel: &str, to: Value) -> Vec<Value> {
    let mut got = Vec::new();
    loop {
        let frame = client.next_json(WAIT).await;
        if frame["data"] == sentinel {
            client.assert_quiet(gw, to, WAIT).await;
            return got;
        }
        got.push(frame["data"].clone());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_broadcast_id_is_a_duplicate_and_delivered_once() {
    let gw = Gateway::default().await;
    let mut alice = Live::Ws(Box::new(gw.connect("alice").await));
    let first = push(&gw, json!({"to": "*", "id": "promo-7", "data": 1}), 202).await;
    assert!(first.get("duplicate").is_none_or(|d| d == false), "{first}");
    let again = push(&gw, json!({"to": "*", "id": "promo-7", "data": 1}), 200).await;
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["id"], "promo-7");
    assert_eq!(again["cursor"], first["cursor"], "the first push's cursor");
    // Even with other data: the key alone decides.
    let third = push(&gw, json!({"to": "*", "id": "promo-7", "data": 2}), 200).await;
    assert_eq!(third["duplicate"], true);

    push(&gw, json!({"to": "*", "data": "end"}), 202).await;
    assert_eq!(
        data_until(&gw, &mut alice, "end", json!("*")).await,
        [json!(1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_personal_id_is_a_duplicate_and_delivered_once() {
    let gw = Gateway::default().await;
    let mut bob = Live::Ws(Box::new(gw.connect("bob").await));
    let body = json!({"to": ["bob", "carol"], "id": "order-42", "data": "shipped"});
    let first = push(&gw, body.clone(), 202).await;
    assert_eq!(first["users"], 2);
    let again = push(&gw, body, 200).await;
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["id"], "order-42");
    assert_eq!(again["users"], 2);

    push(&gw, json!({"to": ["bob"], "data": "end"}), 202).await;
    assert_eq!(
        data_until(&gw, &mut bob, "end", json!(["bob"])).await,
        [json!("shipped")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_is_not_delivered_to_a_parked_poll_nor_recovered_twice() {
    let mut c = support::config();
    c.session.poll_timeout_secs = 1;
    c.session.session_ttl_secs = 2;
    let gw = Gateway::start(c).await;
    let start = push(&gw, json!({"to": "*", "data": "start"}), 202).await["cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = json!({"to": ["dave"], "id": "once", "data": "x"});
    push(&gw, body.clone(), 202).await;
    push(&gw, body.clone(), 200).await;
    let frames =
        poll_frames(&support::browser::get(gw.addr, &poll_path("dave", Some(&start)), &[]).await);
    assert_eq!(frames[0]["type"], "recover");
    assert_eq!(data_of(&frames[1..]), [json!("x")], "{frames:?}");

    // Parked: a duplicate wakes nobody, so the poll times out empty.
    let cursor = frames[1]["cursor"].as_str().unwrap().to_owned();
    let poll = spawn_get(gw.addr, poll_path("dave", Some(&cursor)), vec![]);
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    push(&gw, body, 200).await;
    let frames = poll_frames(&poll.await.unwrap());
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["reason"], "poll_timeout", "{frames:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_ids_are_both_delivered() {
    let gw = Gateway::default().await;
    let mut erin = gw.connect("erin").await;
    let a = push(&gw, json!({"to": "*", "id": "k-1", "data": "a"}), 202).await;
    let b = push(&gw, json!({"to": "*", "id": "k-2", "data": "b"}), 202).await;
    assert_ne!(a["cursor"], b["cursor"]);
    push(&gw, json!({"to": ["erin"], "id": "k-3", "data": "c"}), 202).await;
    push(&gw, json!({"to": ["erin"], "id": "k-4", "data": "d"}), 202).await;
    // Pushes without an id are never duplicates of each other.
    push(&gw, json!({"to": "*", "data": "e"}), 202).await;
    push(&gw, json!({"to": "*", "data": "e"}), 202).await;
    let mut got = Vec::new();
    for _ in 0..6 {
        let frame = next_json(&mut erin, WAIT).await;
        got.push((frame["id"].clone(), frame["data"].clone()));
    }
    assert_eq!(
        &got[..4],
        [
            (json!("k-1"), json!("a")),
            (json!("k-2"), json!("b")),
            (json!("k-3"), json!("c")),
            (json!("k-4"), json!("d")),
        ]
    );
    assert_eq!(got[4].1, "e");
    assert_eq!(got[5].1, "e");
    assert_ne!(got[4].0, got[5].0, "generated ids differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_is_accepted_again_once_its_window_has_passed() {
    let mut c = support::config();
    c.history.ttl_secs = 1;
    let gw = Gateway::start(c).await;
    let mut frank = Live::Ws(Box::new(gw.connect("frank").await));
    let body = json!({"to": "*", "id": "daily", "data": "d"});
    push(&gw, body.clone(), 202).await;
    push(&gw, body.clone(), 200).await;
    // Within the window the id is a duplicate (200, nothing delivered);
    // once it has passed, the same push is accepted anew.
    let began = tokio::time::Instant::now();
    let later = loop {
        let resp = gw.push(&body).await;
        if resp.status == 202 {
            break resp.json();
        }
        assert_eq!(resp.status, 200, "{resp:?}");
        assert_eq!(resp.json()["duplicate"], true, "{resp:?}");
        assert!(began.elapsed() < WAIT, "still a duplicate after {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(later.get("duplicate").is_none_or(|d| d == false), "{later}");
    push(&gw, json!({"to": "*", "data": "end"}), 202).await;
    assert_eq!(
        data_until(&gw, &mut frank, "end", json!("*")).await,
        [json!("d"), json!("d")]
    );
}
