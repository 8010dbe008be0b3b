//! `{"type":"refresh","token":…}` on a WebSocket: a fresh token for the
//! same user moves the connection's expiry, so it outlives its first
//! token's `exp`; another user's token, or no valid token, changes nothing.

mod support;

use std::time::Duration;

use futures_util::SinkExt;
use serde_json::json;
use support::ws::token_with;
use support::{Gateway, SECRET, Ws, next_json, read_until_close};
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(10);

async fn connect(gw: &Gateway, user: &str, exp: u64) -> Ws {
    let token = token_with(SECRET.as_bytes(), user, exp);
    gw.try_connect(&format!("token={token}"), &[])
        .await
        .expect("ws connects")
}

async fn send(ws: &mut Ws, frame: serde_json::Value) {
    ws.send(Message::text(frame.to_string()))
        .await
        .expect("sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refreshed_connection_outlives_its_first_token_and_an_unrefreshed_one_does_not() {
    let gw = Gateway::default().await;
    let now = pushgate::gateway::Gateway::unix_now();
    let mut refreshed = connect(&gw, "alice", now + 2).await;
    let mut control = connect(&gw, "bob", now + 2).await;

    let later = now + 3600;
    send(
        &mut refreshed,
        json!({"type": "refresh", "token": token_with(SECRET.as_bytes(), "alice", later)}),
    )
    .await;
    assert_eq!(
        next_json(&mut refreshed, WAIT).await,
        json!({"type": "refreshed", "expires_at": later})
    );
    // Another user's token, a bad one, none: refused, nothing changes.
    let mallory = token_with(SECRET.as_bytes(), "mallory", later);
    for (frame, code) in [
        (json!({"type": "refresh", "token": mallory}), "wrong_user"),
        (
            json!({"type": "refresh", "token": "not.a.token"}),
            "bad_token",
        ),
        (json!({"type": "refresh"}), "bad_token"),
    ] {
        send(&mut refreshed, frame).await;
        let answer = next_json(&mut refreshed, WAIT).await;
        assert_eq!(
            (answer["type"].as_str(), answer["code"].as_str()),
            (Some("error"), Some(code)),
            "{answer}"
        );
    }

    // Past the first token's expiry: the control connection is closed 4004,
    // the refreshed one still receives.
    let (code, frames) = read_until_close(&mut control, WAIT).await;
    assert_eq!(code, Some(4004), "{frames:?}");
    assert_eq!(
        frames.last(),
        Some(&json!({"type": "close", "reason": "token_expired"}))
    );
    assert!(
        pushgate::gateway::Gateway::unix_now() >= now + 2,
        "at or past the first token's exp"
    );
    let resp = gw
        .push(&json!({"to": ["alice"], "data": "still here"}))
        .await;
    assert_eq!(resp.status, 202);
    assert_eq!(next_json(&mut refreshed, WAIT).await["data"], "still here");
}
