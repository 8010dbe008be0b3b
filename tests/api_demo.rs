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

/// What a cross-site HTML form (or a "simple" cross-site fetch) can send:
/// no content type, or one of the three a browser sends without asking.
const FORM_TYPES: [Option<&str>; 4] = [
    None,
    Some("application/x-www-form-urlencoded"),
    Some("text/plain"),
    Some("multipart/form-data; boundary=x"),
];

async fn demo_gateway(allowed_origins: &[&str]) -> Gateway {
    let mut config = support::config();
    config.demo.enabled = true;
    config.auth.allowed_origins = allowed_origins.iter().map(|o| (*o).to_owned()).collect();
    Gateway::start(config).await
}

fn assert_error(resp: &support::Response, status: u16, code: &str, what: &str) {
    assert_eq!(resp.status.as_u16(), status, "{what}: {:?}", resp.body);
    assert_eq!(
        resp.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..]),
        "{what}"
    );
    let body = resp.json();
    assert_eq!(body["error"]["code"], code, "{what}: {body}");
    assert!(body["error"]["message"].is_string(), "{what}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_endpoints_take_only_json_so_a_cross_site_form_cannot_post() {
    // As shipped: every origin allowed, so only the content type stands
    // between a page on another site and these endpoints.
    let gw = demo_gateway(&["*"]).await;
    let bodies = [
        ("/demo/token", r#"{"user":"mallory"}"#),
        ("/demo/push", r#"{"to":"*","data":"spam"}"#),
    ];
    for (path, body) in bodies {
        for content_type in FORM_TYPES {
            let mut headers = vec![("origin", "https://evil.example")];
            headers.extend(content_type.map(|t| ("content-type", t)));
            let resp = gw.request(Method::POST, path, &headers, body).await;
            let what = format!("{path} as {content_type:?}");
            assert_error(&resp, 415, "unsupported_media_type", &what);
        }
    }
    // The demo page's own requests (JSON, charset or not) still work.
    for content_type in ["application/json", "application/json; charset=utf-8"] {
        let resp = gw
            .request(
                Method::POST,
                "/demo/token",
                &[("content-type", content_type)],
                r#"{"user":"dora"}"#,
            )
            .await;
        assert_eq!(resp.status, 200, "{content_type}: {:?}", resp.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_endpoints_refuse_an_origin_not_allowed() {
    let gw = demo_gateway(&["https://app.example"]).await;
    let json = ("content-type", "application/json");
    for path in ["/demo/token", "/demo/push"] {
        let body = if path == "/demo/token" {
            r#"{"user":"mallory"}"#
        } else {
            r#"{"to":"*","data":"spam"}"#
        };
        // A cross-site form post: refused for its origin first.
        let resp = gw
            .request(
                Method::POST,
                path,
                &[
                    ("origin", "https://evil.example"),
                    ("content-type", "application/x-www-form-urlencoded"),
                ],
                body,
            )
            .await;
        assert_error(&resp, 403, "forbidden", &format!("{path}: form"));
        let resp = gw
            .request(
                Method::POST,
                path,
                &[("origin", "https://evil.example"), json],
                body,
            )
            .await;
        assert_error(&resp, 403, "forbidden", &format!("{path}: JSON"));
        let resp = gw
            .request(Method::POST, path, &[("origin", "null"), json], body)
            .await;
        assert_error(&resp, 403, "forbidden", &format!("{path}: null origin"));
        // The allowed origin, and a client that is not a browser page.
        for headers in [vec![("origin", "https://app.example"), json], vec![json]] {
            let resp = gw.request(Method::POST, path, &headers, body).await;
            assert!(
                resp.status.is_success(),
                "{path} {headers:?}: {:?}",
                resp.body
            );
        }
    }
}
