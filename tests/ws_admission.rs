//! Who may open a WebSocket: the handshake itself, origin, token or
//! anonymous uid, cursor and capacity, each refused with its status and a
//! JSON error before anything is upgraded.

mod support;

use std::time::Duration;

use pushgate::gateway::Gateway as State;
use serde_json::json;
use support::ws::{
    ACCEPT, RawAnswer, alg_none_token, eventually, raw_handshake, shop_only, token_with,
    upgrade_request,
};
use support::{Gateway, SECRET, config, next_json, token};

const WAIT: Duration = Duration::from_secs(10);

async fn handshake(gw: &Gateway, target: &str, extra: &[(&str, &str)]) -> RawAnswer {
    raw_handshake(gw.addr, &upgrade_request("GET", target, extra, &[])).await
}

/// A refusal: the status, a JSON error body with `code`, nothing upgraded.
fn assert_refused(answer: &RawAnswer, status: u16, code: &str) {
    assert_eq!(answer.status, status, "{answer:?}");
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{answer:?}"
    );
    assert_eq!(answer.error_code(), code, "{answer:?}");
    assert!(answer.json()["error"]["message"].is_string(), "{answer:?}");
    assert!(
        answer.header("sec-websocket-accept").is_none(),
        "{answer:?}"
    );
}

fn assert_upgraded(answer: &RawAnswer) {
    assert_eq!(answer.status, 101, "{answer:?}");
    assert_eq!(answer.header("sec-websocket-accept"), Some(ACCEPT));
    assert!(
        answer
            .header("upgrade")
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket")),
        "{answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_not_allowed_is_refused_with_403_before_any_upgrade() {
    let gw = Gateway::start(shop_only()).await;
    let target = format!("/ws?token={}", token("alice", 60));
    for origin in [
        "https://evil.example",
        "http://shop.example",
        "https://shop.example.evil.example",
        "null",
    ] {
        let answer = handshake(&gw, &target, &[("Origin", origin)]).await;
        assert_refused(&answer, 403, "forbidden");
    }
    assert_eq!(gw.state.inspect().connections, 0);
    assert_eq!(gw.state.inspect().users, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_origin_and_a_request_without_origin_are_upgraded() {
    let gw = Gateway::start(shop_only()).await;
    let target = format!("/ws?token={}", token("alice", 60));
    let same = handshake(&gw, &target, &[("Origin", "https://shop.example")]).await;
    assert_upgraded(&same);
    let none = handshake(&gw, &target, &[]).await;
    assert_upgraded(&none);
    // The tungstenite client sends no Origin either.
    let mut ws = gw
        .try_connect(&target[4..], &[])
        .await
        .expect("no origin ok");
    let mut browser = gw
        .try_connect(&target[4..], &[("origin", "https://shop.example")])
        .await
        .expect("allowed origin ok");
    assert_eq!(gw.state.inspect().connections, 4);
    gw.push(&json!({"to": ["alice"], "data": "hi"})).await;
    assert_eq!(next_json(&mut ws, WAIT).await["data"], "hi");
    assert_eq!(next_json(&mut browser, WAIT).await["data"], "hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_malformed_badly_signed_expired_or_unsigned_token_gets_401() {
    let gw = Gateway::default().await;
    let now = State::unix_now();
    let cases = [
        ("no token", "/ws".to_owned()),
        ("empty token", "/ws?token=".to_owned()),
        ("malformed", "/ws?token=not.a.jwt".to_owned()),
        ("garbage", "/ws?token=%00%ff".to_owned()),
        (
            "wrong secret",
            format!(
                "/ws?token={}",
                token_with(b"another-secret-0123456789", "alice", now + 3600)
            ),
        ),
        (
            "expired",
            format!(
                "/ws?token={}",
                token_with(SECRET.as_bytes(), "alice", now - 5)
            ),
        ),
        ("alg none", format!("/ws?token={}", alg_none_token("alice"))),
        (
            "token for a different parameter name",
            format!("/ws?jwt={}", token("alice", 60)),
        ),
    ];
    for (name, target) in cases {
        let answer = handshake(&gw, &target, &[]).await;
        assert_eq!(answer.status, 401, "{name}: {answer:?}");
        assert_refused(&answer, 401, "unauthorized");
    }
    assert_eq!(gw.state.inspect().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_mode_accepts_a_uid_and_delivers_to_that_user() {
    let mut c = config();
    c.auth.anonymous = true;
    let gw = Gateway::start(c).await;
    let mut bob = gw.try_connect("uid=bob", &[]).await.expect("anonymous bob");
    let mut odd = gw
        .try_connect("uid=a.B_9%3A%40-z", &[])
        .await
        .expect("every allowed character");
    // A token still works, and wins over nothing.
    let mut carol = gw
        .try_connect(&format!("token={}", token("carol", 60)), &[])
        .await
        .expect("token");
    gw.push(&json!({"to": ["bob"], "data": "for bob"})).await;
    gw.push(&json!({"to": ["a.B_9:@-z"], "data": "for odd"}))
        .await;
    gw.push(&json!({"to": ["carol"], "data": "for carol"}))
        .await;
    assert_eq!(next_json(&mut bob, WAIT).await["data"], "for bob");
    assert_eq!(next_json(&mut odd, WAIT).await["data"], "for odd");
    assert_eq!(next_json(&mut carol, WAIT).await["data"], "for carol");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_uid_that_is_not_a_user_id_gets_400_bad_user_id() {
    let mut c = config();
    c.auth.anonymous = true;
    let gw = Gateway::start(c).await;
    let too_long = "u".repeat(129);
    for uid in ["bad%20id", "", "a%2Fb", "%C3%A9t%C3%A9", too_long.as_str()] {
        let answer = handshake(&gw, &format!("/ws?uid={uid}"), &[]).await;
        assert_refused(&answer, 400, "bad_user_id");
    }
    let longest = "u".repeat(128);
    assert_upgraded(&handshake(&gw, &format!("/ws?uid={longest}"), &[]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uid_without_anonymous_mode_gets_401() {
    let gw = Gateway::default().await;
    assert!(!gw.state.config.auth.anonymous, "off by default");
    let answer = handshake(&gw, "/ws?uid=bob", &[]).await;
    assert_refused(&answer, 401, "unauthorized");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_pushgate_could_not_have_issued_gets_400_bad_cursor() {
    let gw = Gateway::default().await;
    let t = token("alice", 60);
    for cursor in [
        "garbage",
        "42",
        "zzzzzzzzzzzzzzzz-1",
        "0123456789abcdef-",
        "0123456789abcdef-1-2",
        "0123456789abcdef-99999999999999999999999",
    ] {
        let answer = handshake(&gw, &format!("/ws?token={t}&cursor={cursor}"), &[]).await;
        assert_refused(&answer, 400, "bad_cursor");
    }
    assert_eq!(gw.state.inspect().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_reached_gets_503_with_retry_after_and_frees_up_on_close() {
    let mut c = config();
    c.session.max_connections = 2;
    let gw = Gateway::start(c).await;
    let mut first = gw.connect("alice").await;
    let _second = gw.connect("bob").await;
    let target = format!("/ws?token={}", token("carol", 60));
    let answer = handshake(&gw, &target, &[]).await;
    assert_refused(&answer, 503, "connection_limit");
    let retry_after = answer.header("retry-after").expect("Retry-After");
    assert!(retry_after.parse::<u64>().is_ok(), "{retry_after:?}");

    first.close(None).await.expect("close sent");
    eventually(WAIT, "room again after a close", || async {
        gw.state.inspect().connections == 1
    })
    .await;
    assert_upgraded(&handshake(&gw, &target, &[]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_websocket_version_gets_426_naming_version_13() {
    let gw = Gateway::default().await;
    let target = format!("/ws?token={}", token("alice", 60));
    let answer = handshake(&gw, &target, &[("Sec-WebSocket-Version", "8")]).await;
    assert_eq!(answer.status, 426, "{answer:?}");
    assert_eq!(answer.header("sec-websocket-version"), Some("13"));
    assert_eq!(gw.state.inspect().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_malformed_websocket_key_gets_400() {
    let gw = Gateway::default().await;
    let target = format!("/ws?token={}", token("alice", 60));
    let missing = upgrade_request("GET", &target, &[], &["Sec-WebSocket-Key"]);
    let answer = raw_handshake(gw.addr, &missing).await;
    assert_eq!(answer.status, 400, "{answer:?}");
    let short = handshake(&gw, &target, &[("Sec-WebSocket-Key", "c2hvcnQ=")]).await;
    assert_eq!(short.status, 400, "{short:?}");
    assert_eq!(gw.state.inspect().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_without_upgrade_headers_is_not_upgraded() {
    let gw = Gateway::default().await;
    let target = format!("/ws?token={}", token("alice", 60));
    let plain = upgrade_request("GET", &target, &[], &["Upgrade", "Connection"]);
    let answer = raw_handshake(gw.addr, &plain).await;
    assert!(
        (400..500).contains(&answer.status),
        "a client error, not an upgrade: {answer:?}"
    );
    assert_eq!(gw.state.inspect().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_to_ws_gets_405_allowing_get() {
    let gw = Gateway::default().await;
    let target = format!("/ws?token={}", token("alice", 60));
    let post = upgrade_request("POST", &target, &[("Content-Length", "0")], &[]);
    let answer = raw_handshake(gw.addr, &post).await;
    assert_eq!(answer.status, 405, "{answer:?}");
    assert!(
        answer.header("allow").is_some_and(|a| a.contains("GET")),
        "{answer:?}"
    );
    assert_eq!(gw.state.inspect().connections, 0);
}
