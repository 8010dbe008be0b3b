//! Three gateway nodes on one Redis: pushes reach every node's clients
//! exactly once, a client resumes on another node with its cursor, ids stay
//! idempotent across nodes, presence counts the whole cluster.

mod support;

use std::time::Duration;

use hyper::Method;
use pushgate::protocol::Transport;
use serde_json::json;
use support::browser::{Sse, poll_frames, poll_path, spawn_get, sse_path, wait_for_connections};
use support::{Gateway, next_json, redis};

const WAIT: Duration = Duration::from_secs(10);

async fn cluster(test: &str) -> Option<[Gateway; 3]> {
    if !redis::available() {
        return None;
    }
    let prefix = redis::prefix(test);
    let config = || redis::config(redis::REDIS_URL, &prefix);
    Some([
        Gateway::start(config()).await,
        Gateway::start(config()).await,
        Gateway::start(config()).await,
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_on_one_node_reaches_ws_poll_and_sse_clients_on_the_others_once() {
    let Some([a, b, c]) = cluster("broadcast").await else {
        return;
    };
    let mut ws_b = b.connect("wsb").await;
    let mut ws_c = c.connect("wsc").await;
    let poll_c = spawn_get(c.addr, poll_path("pollc", None), Vec::new());
    let mut sse_b = Sse::open(b.addr, &sse_path("sseb", None), &[]).await;
    wait_for_connections(&c, Transport::Poll, 1, WAIT).await;
    wait_for_connections(&b, Transport::Sse, 1, WAIT).await;
    let resp = a.push(&json!({"to": "*", "data": "everyone"})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    let cursor = resp.json()["cursor"].clone();
    for ws in [&mut ws_b, &mut ws_c] {
        let frame = next_json(ws, WAIT).await;
        assert_eq!(
            (&frame["data"], &frame["cursor"]),
            (&json!("everyone"), &cursor)
        );
    }
    let polled = poll_frames(&poll_c.await.expect("poll"));
    assert_eq!(polled.len(), 1, "{polled:?}");
    assert_eq!(polled[0]["data"], "everyone");
    assert_eq!(sse_b.next_json(WAIT).await["data"], "everyone");
    // Exactly once: the next frame anyone sees is the next message.
    a.push(&json!({"to": "*", "data": "second"})).await;
    for ws in [&mut ws_b, &mut ws_c] {
        assert_eq!(next_json(ws, WAIT).await["data"], "second");
    }
    assert_eq!(sse_b.next_json(WAIT).await["data"], "second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn personal_push_reaches_its_user_wherever_connected_and_no_other() {
    let Some([a, b, c]) = cluster("personal").await else {
        return;
    };
    let mut alice_b = b.connect("alice").await;
    let mut alice_c = c.connect("alice").await;
    let mut bob_c = c.connect("bob").await;
    let resp = a.push(&json!({"to": ["alice"], "data": "for alice"})).await;
    assert_eq!(resp.status, 202);
    for ws in [&mut alice_b, &mut alice_c] {
        let frame = next_json(ws, WAIT).await;
        assert_eq!(
            (frame["stream"].as_str(), frame["data"].as_str()),
            (Some("user"), Some("for alice"))
        );
    }
    a.push(&json!({"to": "*", "data": "all"})).await;
    assert_eq!(
        next_json(&mut bob_c, WAIT).await["data"],
        "all",
        "bob saw nothing personal first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_on_another_node_with_exactly_the_missed_messages() {
    let Some([a, b, _c]) = cluster("resume").await else {
        return;
    };
    let mut ws = a.connect("carol").await;
    a.push(&json!({"to": "*", "data": 0})).await;
    let seen = next_json(&mut ws, WAIT).await;
    let cursor = seen["cursor"].as_str().expect("cursor").to_owned();
    drop(ws);
    for n in 1..=3 {
        let to = if n == 2 { json!(["carol"]) } else { json!("*") };
        assert_eq!(b.push(&json!({"to": to, "data": n})).await.status, 202);
    }
    a.push(&json!({"to": ["dave"], "data": "not carol's"}))
        .await;
    let url = b.ws_url(&format!(
        "token={}&cursor={cursor}",
        support::token("carol", 60)
    ));
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("connects");
    let recover = next_json(&mut ws, WAIT).await;
    support::assert_recover(&recover, true, "");
    for n in 1..=3 {
        assert_eq!(next_json(&mut ws, WAIT).await["data"], n);
    }
    c_push_live(&a, &mut ws).await;
    // The same over long-poll on the third node's neighbour.
    let resp = b
        .request(Method::GET, &poll_path("carol", Some(&cursor)), &[], "")
        .await;
    let frames = poll_frames(&resp);
    assert_eq!(frames[0]["type"], "recover");
    let data: Vec<_> = frames[1..].iter().map(|f| f["data"].clone()).collect();
    assert_eq!(data, [json!(1), json!(2), json!(3), json!("live")]);
}

async fn c_push_live(node: &Gateway, ws: &mut support::Ws) {
    node.push(&json!({"to": "*", "data": "live"})).await;
    assert_eq!(
        next_json(ws, WAIT).await["data"],
        "live",
        "then live, no duplicate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_ids_are_idempotent_across_nodes() {
    let Some([a, b, c]) = cluster("idempotent").await else {
        return;
    };
    let mut ws = c.connect("erin").await;
    let body = json!({"to": "*", "id": "order-7", "data": "once"});
    let first = a.push(&body).await;
    assert_eq!(first.status, 202);
    let again = b.push(&body).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["duplicate"], true);
    assert_eq!(again.json()["cursor"], first.json()["cursor"]);
    assert_eq!(next_json(&mut ws, WAIT).await["data"], "once");
    a.push(&json!({"to": "*", "data": "next"})).await;
    assert_eq!(
        next_json(&mut ws, WAIT).await["data"],
        "next",
        "the duplicate was not delivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_counts_a_users_connections_on_every_node() {
    let Some([a, b, c]) = cluster("presence").await else {
        return;
    };
    let auth = format!("Bearer {}", support::API_KEY);
    let count = |gw: &Gateway| {
        let auth = auth.clone();
        let addr = gw.addr;
        async move {
            let gw = Gateway::attach(addr);
            gw.request(Method::GET, "/users/frank", &[("authorization", &auth)], "")
                .await
                .json()
        }
    };
    assert_eq!(count(&a).await, json!({"online": false, "connections": 0}));
    let ws_b = b.connect("frank").await;
    let ws_c = c.connect("frank").await;
    assert_eq!(count(&a).await, json!({"online": true, "connections": 2}));
    drop(ws_b);
    let mut answer = json!(null);
    for _ in 0..100 {
        answer = count(&a).await;
        if answer["connections"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answer, json!({"online": true, "connections": 1}));
    drop(ws_c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_at_start_is_a_clear_error() {
    let mut config = redis::config("redis://127.0.0.1:1", "pgtest:unreachable");
    config.broker.start_wait_secs = 0;
    let err = pushgate::Server::bind(config)
        .await
        .expect_err("must not start");
    assert!(err.to_string().contains("broker"), "{err}");
}
