//! Long-poll and SSE basics: a parked poll answered by a push, a poll
//! timing out with `reconnect`, the session reused across polls, an SSE
//! stream carrying frames as events.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;
use serde_json::json;
use support::{Gateway, token};

fn poll_path(user: &str, cursor: Option<&str>) -> String {
    let mut path = format!("/poll?token={}", token(user, 3600));
    if let Some(c) = cursor {
        path.push_str(&format!("&cursor={c}"));
    }
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_poll_is_answered_by_a_push() {
    let gw = Gateway::default().await;
    let polling = {
        let path = poll_path("alice", None);
        let addr = gw.addr;
        tokio::spawn(async move {
            let gw2 = support::Gateway::attach(addr);
            gw2.request(Method::GET, &path, &[], Bytes::new()).await
        })
    };
    while gw.state.inspect().connections == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        gw.push(&json!({"to": ["alice"], "data": {"x": 1}}))
            .await
            .status,
        202
    );
    let resp = polling.await.unwrap();
    assert_eq!(resp.status, 200);
    let frames = resp.json();
    assert_eq!(frames.as_array().unwrap().len(), 1, "{frames}");
    assert_eq!(frames[0]["type"], "message");
    assert_eq!(frames[0]["data"], json!({"x": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_times_out_with_reconnect_and_the_session_is_reused() {
    let mut config = support::config();
    config.session.poll_timeout_secs = 1;
    config.session.session_ttl_secs = 3;
    let gw = Gateway::start(config).await;
    let mut cursor: Option<String> = None;
    let mut key = None;
    for _ in 0..3 {
        let resp = gw
            .request(
                Method::GET,
                &poll_path("bob", cursor.as_deref()),
                &[],
                Bytes::new(),
            )
            .await;
        let frames = resp.json();
        assert_eq!(frames[0]["type"], "reconnect", "{frames}");
        assert_eq!(frames[0]["reason"], "poll_timeout");
        cursor = Some(frames[0]["cursor"].as_str().unwrap().to_owned());
        let user = gw
            .state
            .user(&pushgate::protocol::UserId::parse("bob").unwrap())
            .unwrap();
        let now = user.poll_session_entry;
        assert!(now.is_some());
        if key.is_some() {
            assert_eq!(key, now, "the same timer entry is reused");
        }
        key = now;
        assert_eq!(gw.state.inspect().users, 1);
    }
    // No poll for longer than session_ttl: the session goes.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(gw.state.inspect().users, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_stream_carries_frames_as_events() {
    let gw = Gateway::default().await;
    let url = format!("http://{}/sse?token={}", gw.addr, token("carol", 3600));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<Bytes>>();
    let resp = client.get(url.parse().unwrap()).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    while gw.state.inspect().connections == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gw.push(&json!({"to": "*", "data": "hello"})).await;
    let mut text = String::new();
    while !text.contains("event: message") {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            text.push_str(std::str::from_utf8(&data).unwrap());
        }
    }
    assert!(text.contains("data: {\"type\":\"message\""), "{text}");
    assert!(text.contains("\nid: "), "{text}");
}
