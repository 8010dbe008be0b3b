//! Demo mode: `/demo/token` and `/demo/push` exist only when enabled.

mod support;

use std::time::Duration;

use hyper::Method;
use serde_json::json;
use support::{Gateway, next_json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_endpoints_do_not_exist_when_demo_mode_is_off() {
    let gw = Gateway::default().await;
    for path in ["/demo/token", "/demo/push"] {
        let resp = gw
            .request(
                Method::POST,
                path,
                &[("content-type", "application/json")],
                r#"{"user":"a"}"#,
            )
            .await;
        assert_eq!(resp.status, 404, "{path}");
        assert_eq!(resp.error_code(), "not_found");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_token_connects_and_demo_push_needs_no_api_key() {
    let mut config = support::config();
    config.demo.enabled = true;
    let gw = Gateway::start(config).await;
    let minted = gw
        .request(
            Method::POST,
            "/demo/token",
            &[("content-type", "application/json")],
            r#"{"user":"dora"}"#,
        )
        .await;
    assert_eq!(minted.status, 200);
    let token = minted.json()["token"].as_str().expect("token").to_owned();
    let url = gw.ws_url(&format!("token={token}"));
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("connects");
    let body = json!({"to": ["dora"], "data": "from the demo"}).to_string();
    let pushed = gw
        .request(
            Method::POST,
            "/demo/push",
            &[("content-type", "application/json")],
            body,
        )
        .await;
    assert_eq!(pushed.status, 202, "{:?}", pushed.body);
    let frame = next_json(&mut ws, Duration::from_secs(10)).await;
    assert_eq!(frame["data"], "from the demo");
    let bad = gw
        .request(
            Method::POST,
            "/demo/token",
            &[("content-type", "application/json")],
            r#"{"user":"no spaces"}"#,
        )
        .await;
    assert_eq!(
        (bad.status.as_u16(), bad.error_code()),
        (400, "bad_user_id".to_owned())
    );
    assert_eq!(
        gw.request(Method::GET, "/demo/push", &[], "").await.status,
        405
    );
}
