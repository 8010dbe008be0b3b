//! A token is not valid before its `nbf` (RFC 7519 §4.1.5): on every
//! transport a client presenting one early is refused `401`, like any
//! other unusable token, and so is one whose `nbf` is not an integer.

mod support;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::browser::get;
use support::ws::{raw_handshake, upgrade_request};
use support::{Gateway, SECRET};

fn token_with_nbf(user: &str, nbf: Value) -> String {
    let now = pushgate::gateway::Gateway::unix_now();
    let claims = json!({"sub": user, "exp": now + 3600, "nbf": nbf});
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("signed")
}

/// The status each transport answers a client presenting `token`.
async fn statuses(gw: &Gateway, token: &str) -> [u16; 3] {
    let ws = raw_handshake(
        gw.addr,
        &upgrade_request("GET", &format!("/ws?token={token}"), &[], &[]),
    )
    .await;
    let poll = get(gw.addr, &format!("/poll?token={token}&cursor=x"), &[]).await;
    let sse = get(gw.addr, &format!("/sse?token={token}&cursor=x"), &[]).await;
    [ws.status, poll.status.as_u16(), sse.status.as_u16()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_used_before_its_nbf_or_with_a_malformed_nbf_is_refused_401() {
    let gw = Gateway::default().await;
    let now = pushgate::gateway::Gateway::unix_now();
    for nbf in [
        json!(now + 3600),
        json!(u64::MAX),
        json!("soon"),
        json!(1.5),
    ] {
        let token = token_with_nbf("nina", nbf.clone());
        assert_eq!(statuses(&gw, &token).await, [401; 3], "nbf {nbf}");
    }
    // Valid from its nbf on: the handshake goes through (the bad cursor
    // makes poll and SSE answer 400 at once, after the token check).
    let token = token_with_nbf("nina", json!(now.saturating_sub(5)));
    assert_eq!(statuses(&gw, &token).await, [101, 400, 400]);
}
