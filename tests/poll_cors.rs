//! CORS on the endpoints a page fetches: an allowed origin is echoed, the
//! `OPTIONS` preflight is answered, a disallowed origin is refused with
//! 403 on both the request and its preflight.

mod support;

use std::time::Duration;

use hyper::Method;
use pushgate::protocol::Transport;
use serde_json::json;
use support::Gateway;
use support::browser::{Sse, poll_frames, poll_path, request, spawn_get, sse_path};

const WAIT: Duration = Duration::from_secs(10);
const ALLOWED: &str = "https://app.example.com";
const OTHER: &str = "https://evil.example.net";

async fn gateway() -> Gateway {
    let mut c = support::config();
    c.session.poll_timeout_secs = 1;
    c.session.session_ttl_secs = 2;
    c.auth.allowed_origins = vec![ALLOWED.into()];
    Gateway::start(c).await
}

fn header<'a>(resp: &'a support::Response, name: &str) -> Option<&'a str> {
    resp.headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_from_an_allowed_origin_gets_it_echoed() {
    let gw = gateway().await;
    let poll = spawn_get(
        gw.addr,
        poll_path("alice", None),
        vec![("origin".into(), ALLOWED.into())],
    );
    support::browser::wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    gw.push(&json!({"to": ["alice"], "data": 1})).await;
    let resp = poll.await.unwrap();
    assert_eq!(poll_frames(&resp)[0]["data"], 1);
    assert_eq!(
        header(&resp, "access-control-allow-origin"),
        Some(ALLOWED),
        "{resp:?}"
    );
    // A poll that times out is decorated the same way.
    let resp = request(
        gw.addr,
        Method::GET,
        &poll_path("alice", None),
        &[("origin", ALLOWED)],
    )
    .await;
    assert_eq!(poll_frames(&resp)[0]["reason"], "poll_timeout");
    assert_eq!(header(&resp, "access-control-allow-origin"), Some(ALLOWED));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preflight_from_an_allowed_origin_is_answered_204_with_methods_and_headers() {
    let gw = gateway().await;
    for path in ["/poll", "/sse"] {
        let resp = request(
            gw.addr,
            Method::OPTIONS,
            path,
            &[
                ("origin", ALLOWED),
                ("access-control-request-method", "GET"),
                ("access-control-request-headers", "authorization"),
            ],
        )
        .await;
        assert_eq!(resp.status, 204, "{path}: {resp:?}");
        assert_eq!(header(&resp, "access-control-allow-origin"), Some(ALLOWED));
        let methods = header(&resp, "access-control-allow-methods").unwrap_or("");
        assert!(methods.contains("GET"), "{path}: methods {methods:?}");
        let headers = header(&resp, "access-control-allow-headers")
            .unwrap_or("")
            .to_ascii_lowercase();
        assert!(headers.contains("authorization"), "{path}: {headers:?}");
        if path == "/sse" {
            assert!(headers.contains("last-event-id"), "{headers:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disallowed_origin_is_refused_with_403_on_poll_sse_and_preflight() {
    let gw = gateway().await;
    let poll = request(
        gw.addr,
        Method::GET,
        &poll_path("alice", None),
        &[("origin", OTHER)],
    )
    .await;
    assert_eq!(poll.status, 403, "{poll:?}");
    assert_eq!(header(&poll, "access-control-allow-origin"), None);

    let sse = Sse::open(gw.addr, &sse_path("alice", None), &[("origin", OTHER)]).await;
    assert_eq!(sse.status, 403);
    assert_eq!(sse.header("access-control-allow-origin"), None);

    for path in ["/poll", "/sse"] {
        let preflight = request(
            gw.addr,
            Method::OPTIONS,
            path,
            &[("origin", OTHER), ("access-control-request-method", "GET")],
        )
        .await;
        assert_eq!(preflight.status, 403, "{path}: {preflight:?}");
        assert_eq!(header(&preflight, "access-control-allow-origin"), None);
    }
    assert_eq!(gw.state.inspect().connections, 0, "nothing was attached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_from_an_allowed_origin_gets_it_echoed() {
    let gw = gateway().await;
    let sse = Sse::open(gw.addr, &sse_path("alice", None), &[("origin", ALLOWED)]).await;
    assert_eq!(sse.status, 200);
    assert_eq!(sse.header("access-control-allow-origin"), Some(ALLOWED));
}
