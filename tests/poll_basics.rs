//! Long-poll and SSE basics: a parked poll answered by a push, a poll
//! timing out with `reconnect`, the session reused across polls, an SSE
//! stream carrying frames as events.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;
use serde_json::json;
use support::ws::eventually;
use support::{Gateway, token};

/// How long any wait in these tests may take before it fails.
const WAIT: Duration = Duration::from_secs(10);

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
    eventually(WAIT, "the poll is parked", || async {
        gw.state.inspect().connections == 1
    })
    .await;
    assert_eq!(
        gw.push(&json!({"to": ["alice"], "data": {"x": 1}}))
            .await
            .status,
        202
    );
    let resp = tokio::time::timeout(WAIT, polling)
        .await
        .expect("the parked poll is answered in time")
        .expect("no panic");
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
    // No poll for longer than session_ttl: the session goes (exactly when
    // is decided by `deadlines::decide::session`, tested there).
    eventually(WAIT, "the idle session is evicted", || async {
        gw.state.inspect().users == 0
    })
    .await;
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
    eventually(WAIT, "the stream is open", || async {
        gw.state.inspect().connections == 1
    })
    .await;
    assert_eq!(
        gw.push(&json!({"to": "*", "data": "hello"})).await.status,
        202
    );
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !text.contains("event: message") {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .unwrap_or_else(|_| panic!("no message event within {WAIT:?}: {text:?}"))
            .expect("stream open")
            .expect("no body error");
        if let Ok(data) = frame.into_data() {
            text.push_str(std::str::from_utf8(&data).unwrap());
        }
    }
    assert!(text.contains("data: {\"type\":\"message\""), "{text}");
    assert!(text.contains("\nid: "), "{text}");
}
