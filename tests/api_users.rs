//! `GET /users/<uid>`: a backend asks whether a user is connected.

mod support;

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde_json::{Value, json};
use support::{API_KEY, Gateway, Response};

const WAIT: Duration = Duration::from_secs(10);

async fn user(gw: &Gateway, path_uid: &str) -> Response {
    let auth = format!("Bearer {API_KEY}");
    let path = format!("/users/{path_uid}");
    gw.request(
        Method::GET,
        &path,
        &[("authorization", &auth)],
        Bytes::new(),
    )
    .await
}

/// Asks until the answer is `want` (connections close asynchronously).
async fn wait_for(gw: &Gateway, uid: &str, want: Value) {
    let what = format!("{uid} reads {want}");
    support::ws::until_eq(WAIT, &what, &want, || async move {
        let resp = user(gw, uid).await;
        assert_eq!(resp.status, 200, "{:?}", resp.body);
        resp.json()
    })
    .await;
}

#[tokio::test]
async fn user_status_needs_the_api_key() {
    let gw = Gateway::default().await;
    let no_key = gw
        .request(Method::GET, "/users/alice", &[], Bytes::new())
        .await;
    assert_eq!(no_key.status, 401);
    assert_eq!(no_key.error_code(), "unauthorized");
    let wrong = gw
        .request(
            Method::GET,
            "/users/alice",
            &[("authorization", "Bearer wrong-key-0123456789abcdef")],
            Bytes::new(),
        )
        .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.error_code(), "unauthorized");
}

#[tokio::test]
async fn user_with_no_connection_is_offline_with_zero_connections() {
    let gw = Gateway::default().await;
    let resp = user(&gw, "alice").await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.headers["content-type"], "application/json");
    assert_eq!(resp.json(), json!({"online": false, "connections": 0}));
}

#[tokio::test]
async fn user_with_two_websockets_is_online_with_two_connections() {
    let gw = Gateway::default().await;
    let mut first = gw.connect("alice").await;
    let second = gw.connect("alice").await;
    let _bob = gw.connect("bob").await;
    let resp = user(&gw, "alice").await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json(), json!({"online": true, "connections": 2}));
    first.close(None).await.expect("close sent");
    wait_for(&gw, "alice", json!({"online": true, "connections": 1})).await;
    drop(second);
    wait_for(&gw, "alice", json!({"online": false, "connections": 0})).await;
    assert_eq!(
        user(&gw, "bob").await.json(),
        json!({"online": true, "connections": 1})
    );
}

#[tokio::test]
async fn percent_encoded_user_id_names_the_same_user() {
    let gw = Gateway::default().await;
    let _ws = gw.connect("a@b.c").await;
    let resp = user(&gw, "a%40b.c").await;
    assert_eq!(resp.json(), json!({"online": true, "connections": 1}));
}

#[tokio::test]
async fn malformed_user_id_is_400_bad_user_id() {
    let gw = Gateway::default().await;
    let too_long = "u".repeat(129);
    for uid in [
        "bad%20id",
        "",
        "a/b",
        "j%C3%BCrgen",
        "a%00",
        too_long.as_str(),
    ] {
        let resp = user(&gw, uid).await;
        assert_eq!(resp.status, 400, "{uid:?}: {:?}", resp.body);
        assert_eq!(resp.error_code(), "bad_user_id", "{uid:?}");
    }
    let longest = "u".repeat(128);
    assert_eq!(user(&gw, &longest).await.status, 200);
}
