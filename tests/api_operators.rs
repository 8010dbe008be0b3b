//! `/healthz` and `/readyz` as a load balancer sees them, before and during
//! a drain.

mod support;

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use hyper::Method;
use support::{Gateway, config, next_json, raw_http, raw_status, read_until_close, token};

const WAIT: Duration = Duration::from_secs(10);

/// `GET /readyz` on a new TCP connection, as a health checker sends it.
async fn readyz(gw: &Gateway) -> String {
    raw_http(
        gw.addr,
        b"GET /readyz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
    )
    .await
}

#[tokio::test]
async fn healthz_is_200_while_serving() {
    let gw = Gateway::default().await;
    let resp = gw.request(Method::GET, "/healthz", &[], Bytes::new()).await;
    assert_eq!(resp.status, 200);
    let head = gw
        .request(Method::HEAD, "/healthz", &[], Bytes::new())
        .await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
}

#[tokio::test]
async fn readyz_is_200_when_ready() {
    let gw = Gateway::default().await;
    let resp = gw.request(Method::GET, "/readyz", &[], Bytes::new()).await;
    assert_eq!(resp.status, 200, "{:?}", resp.body);
    assert_eq!(raw_status(&readyz(&gw).await), 200);
}

/// A drain waits for connected clients, so with one WebSocket still open the
/// gateway stays draining; a health checker connecting anew must then be
/// told 503, and a new client must be turned away.
#[tokio::test]
async fn readyz_is_503_on_a_new_connection_while_the_gateway_drains() {
    let mut c = config();
    c.server.drain_timeout_secs = 30;
    let mut gw = Gateway::start(c).await;
    let mut alice = gw.connect("alice").await;
    let drained = gw.begin_stop();
    let frame = next_json(&mut alice, WAIT).await;
    assert_eq!(frame["type"], "reconnect", "{frame}");
    assert_eq!(frame["reason"], "draining", "{frame}");
    // The reconnect frame is sent once draining has begun.
    let answer = readyz(&gw).await;
    assert_eq!(raw_status(&answer), 503, "{answer}");
    assert!(answer.contains(r#""code":"unavailable""#), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after:"),
        "{answer}"
    );
    let url = gw.ws_url(&format!("token={}", token("bob", 3600)));
    let refused = tokio_tungstenite::connect_async(url).await;
    assert!(refused.is_err(), "a new client is accepted while draining");
    // The gateway is still serving operators; the client leaving ends the drain.
    let health = raw_http(
        gw.addr,
        b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&health), 200, "{health}");
    drop(alice);
    tokio::time::timeout(WAIT, drained)
        .await
        .expect("the drain ends once the last client left")
        .expect("no panic");
}

#[tokio::test]
async fn drain_tells_clients_to_reconnect_then_closes_with_1001() {
    let mut c = config();
    // Longer than WAIT: the drain must end because the client left.
    c.server.drain_timeout_secs = 60;
    let mut gw = Gateway::start(c).await;
    let mut alice = gw.connect("alice").await;
    let drained = gw.begin_stop();
    let (code, frames) = read_until_close(&mut alice, WAIT).await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["type"], "reconnect");
    assert_eq!(frames[0]["reason"], "draining");
    assert!(frames[0]["retry_ms"].as_u64().is_some(), "{frames:?}");
    assert!(frames[0]["cursor"].is_string(), "{frames:?}");
    assert_eq!(code, Some(1001), "going away");
    // Reading on sends the client's answer to the close; then the server
    // ends the connection.
    let rest = tokio::time::timeout(WAIT, async {
        while let Some(Ok(msg)) = alice.next().await {
            assert!(msg.is_close(), "after the close: {msg:?}");
        }
    });
    rest.await.expect("the server ends the connection");
    tokio::time::timeout(WAIT, drained)
        .await
        .expect("the drain ends once the client answered the close")
        .expect("no panic");
}

#[tokio::test]
async fn drain_gives_up_on_a_client_that_stays_after_drain_timeout_secs() {
    let mut c = config();
    c.server.drain_timeout_secs = 1;
    let mut gw = Gateway::start(c).await;
    // Never read: this client neither sees the reconnect nor answers the close.
    let _stays = gw.connect("alice").await;
    let drained = gw.begin_stop();
    tokio::time::timeout(WAIT, drained)
        .await
        .expect("run returns after the drain timeout")
        .expect("no panic");
    assert_eq!(gw.state.inspect().connections, 0);
}
