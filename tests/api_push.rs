//! `POST /push` from the outside: what a backend sees for accepted and
//! refused pushes, and that a refused push delivers nothing.

mod support;

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use hyper::Method;
use serde_json::{Value, json};
use support::{API_KEY, Gateway, Response, config, next_json, raw_http, raw_status};

const WAIT: Duration = Duration::from_secs(10);

fn bearer() -> String {
    format!("Bearer {API_KEY}")
}

/// `POST /push` with these headers and raw body bytes.
async fn post(gw: &Gateway, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Response {
    gw.request(Method::POST, "/push", headers, body).await
}

/// `POST /push` with the key, JSON content type and raw body bytes.
async fn post_json(gw: &Gateway, body: impl Into<Bytes>) -> Response {
    let auth = bearer();
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    post(gw, &headers, body).await
}

/// Asserts `resp` is the JSON error `{"error":{"code","message"}}` with
/// this status and code.
fn assert_error(resp: &Response, status: u16, code: &str, case: &str) {
    assert_eq!(resp.status, status, "{case}: {:?}", resp.body);
    assert_eq!(
        resp.headers["content-type"], "application/json",
        "{case}: content type"
    );
    let body = resp.json();
    let object = body.as_object().expect("an object");
    assert_eq!(object.len(), 1, "{case}: only `error`: {body}");
    assert_eq!(body["error"]["code"], code, "{case}: {body}");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(!message.is_empty(), "{case}: empty message");
}

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

#[tokio::test]
async fn broadcast_push_is_accepted_with_a_generated_id_and_a_cursor() {
    let gw = Gateway::default().await;
    let resp = post_json(&gw, r#"{"to":"*","data":{"n":1}}"#).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    assert_eq!(resp.headers["content-type"], "application/json");
    let body = resp.json();
    assert_eq!(keys(&body), ["cursor", "id"], "{body}");
    assert!(body["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(body["cursor"].as_str().is_some_and(|c| !c.is_empty()));
    let again = post_json(&gw, r#"{"to":"*","data":{"n":2}}"#).await.json();
    assert_ne!(again["id"], body["id"], "generated ids differ");
    assert_ne!(
        again["cursor"], body["cursor"],
        "each message has its cursor"
    );
}

#[tokio::test]
async fn personal_push_is_accepted_with_the_number_of_distinct_users() {
    let gw = Gateway::default().await;
    let resp = post_json(&gw, r#"{"to":["alice","bob","alice"],"data":"hi"}"#).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    let body = resp.json();
    assert_eq!(keys(&body), ["id", "users"], "{body}");
    assert_eq!(body["users"], 2);
    assert!(body["id"].as_str().is_some_and(|id| !id.is_empty()));
}

#[tokio::test]
async fn given_push_id_is_echoed_for_broadcast_and_personal_pushes() {
    let gw = Gateway::default().await;
    let broadcast = post_json(&gw, r#"{"to":"*","data":1,"id":"order-42"}"#).await;
    assert_eq!(broadcast.status, 202);
    assert_eq!(broadcast.json()["id"], "order-42");
    let personal = post_json(&gw, r#"{"to":["alice"],"data":1,"id":"invoice-7"}"#).await;
    assert_eq!(personal.status, 202);
    assert_eq!(personal.json(), json!({"id": "invoice-7", "users": 1}));
}

#[tokio::test]
async fn repeated_push_id_is_answered_200_duplicate_and_delivered_once() {
    let gw = Gateway::default().await;
    let mut alice = gw.connect("alice").await;
    let first = gw.push(&json!({"to": "*", "id": "once", "data": 1})).await;
    assert_eq!(first.status, 202);
    let second = gw.push(&json!({"to": "*", "id": "once", "data": 2})).await;
    assert_eq!(second.status, 200, "{:?}", second.body);
    assert_eq!(second.json()["duplicate"], true);
    assert_eq!(second.json()["id"], "once");
    gw.push(&json!({"to": "*", "id": "marker", "data": "end"}))
        .await;
    assert_eq!(next_json(&mut alice, WAIT).await["id"], "once");
    assert_eq!(next_json(&mut alice, WAIT).await["id"], "marker");
}

#[tokio::test]
async fn push_without_a_valid_api_key_is_401_unauthorized() {
    let gw = Gateway::default().await;
    let wrong_key = "Bearer not-the-key-0123456789abcdef".to_owned();
    let basic = format!("Basic {API_KEY}");
    let bare = API_KEY.to_owned();
    let cases: [(&str, Option<&str>); 5] = [
        ("no key", None),
        ("wrong key", Some(&wrong_key)),
        ("wrong scheme", Some(&basic)),
        ("no scheme", Some(&bare)),
        ("empty bearer", Some("Bearer ")),
    ];
    for (case, auth) in cases {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(auth) = auth {
            headers.push(("authorization", auth));
        }
        let resp = post(&gw, &headers, r#"{"to":"*","data":1}"#).await;
        assert_error(&resp, 401, "unauthorized", case);
    }
}

#[tokio::test]
async fn push_that_is_not_declared_json_is_415() {
    let gw = Gateway::default().await;
    let auth = bearer();
    let body = r#"{"to":"*","data":1}"#;
    let no_type = post(&gw, &[("authorization", &auth)], body).await;
    assert_error(&no_type, 415, "unsupported_media_type", "no content type");
    let text = [
        ("authorization", auth.as_str()),
        ("content-type", "text/plain"),
    ];
    let text = post(&gw, &text, body).await;
    assert_error(&text, 415, "unsupported_media_type", "text/plain");
}

/// A body of exactly `len` bytes: a broadcast padded with spaces.
fn body_of(len: usize) -> String {
    let json = r#"{"to":"*","data":"x"}"#;
    format!("{json}{}", " ".repeat(len - json.len()))
}

#[tokio::test]
async fn push_body_over_max_push_bytes_is_413_and_at_the_limit_is_accepted() {
    let mut c = config();
    c.limits.max_push_bytes = 256;
    let gw = Gateway::start(c).await;
    let at_limit = post_json(&gw, body_of(256)).await;
    assert_eq!(at_limit.status, 202, "{:?}", at_limit.body);
    let over = post_json(&gw, body_of(257)).await;
    assert_error(&over, 413, "payload_too_large", "257 bytes");
    let far_over = post_json(&gw, body_of(4000)).await;
    assert_error(&far_over, 413, "payload_too_large", "4000 bytes");
}

#[tokio::test]
async fn chunked_push_body_over_max_push_bytes_is_413() {
    let mut c = config();
    c.limits.max_push_bytes = 256;
    let gw = Gateway::start(c).await;
    let chunk = |body: &str| format!("{:x}\r\n{body}\r\n", body.len());
    // Two chunks, together one byte over the limit, no Content-Length.
    let body = body_of(257);
    let (a, b) = body.split_at(200);
    let request = format!(
        "POST /push HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n{}{}0\r\n\r\n",
        chunk(a),
        chunk(b)
    );
    let answer = raw_http(gw.addr, request.as_bytes()).await;
    assert_eq!(raw_status(&answer), 413, "{answer}");
    assert!(answer.contains(r#""code":"payload_too_large""#), "{answer}");
    // The same bytes chunked but within the limit are accepted.
    let body = body_of(256);
    let (a, b) = body.split_at(200);
    let request = format!(
        "POST /push HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n{}{}0\r\n\r\n",
        chunk(a),
        chunk(b)
    );
    let answer = raw_http(gw.addr, request.as_bytes()).await;
    assert_eq!(raw_status(&answer), 202, "{answer}");
}

#[tokio::test]
async fn malformed_push_bodies_are_400_bad_json() {
    let gw = Gateway::default().await;
    let long_id = format!(r#"{{"to":"*","data":1,"id":"{}"}}"#, "x".repeat(129));
    let deep =
        |open: &str, close: &str| format!("{}1{}", open.repeat(10_000), close.repeat(10_000));
    let deep_top = deep("[", "]");
    let deep_data = format!(r#"{{"to":"*","data":{}}}"#, deep("[", "]"));
    let deep_objects = format!(r#"{{"to":"*","data":{}}}"#, deep(r#"{"a":"#, "}"));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "invalid UTF-8",
            b"{\"to\":\"*\",\"data\":\"\xff\xfe\"}".to_vec(),
        ),
        ("syntax error", br#"{"to":"*","data":}"#.to_vec()),
        ("truncated", br#"{"to":"*","data":1"#.to_vec()),
        ("empty body", Vec::new()),
        ("array at top level", br#"[{"to":"*","data":1}]"#.to_vec()),
        ("string at top level", br#""*""#.to_vec()),
        ("to is a number", br#"{"to":5,"data":1}"#.to_vec()),
        (
            "to is a user id string",
            br#"{"to":"alice","data":1}"#.to_vec(),
        ),
        ("id is a number", br#"{"to":"*","data":1,"id":7}"#.to_vec()),
        ("id of 129 characters", long_id.into_bytes()),
        ("10,000 arrays deep", deep_top.into_bytes()),
        ("data 10,000 arrays deep", deep_data.into_bytes()),
        ("data 10,000 objects deep", deep_objects.into_bytes()),
    ];
    for (case, body) in cases {
        let resp = post_json(&gw, body).await;
        assert_error(&resp, 400, "bad_json", case);
    }
    // Deep nesting neither crashed nor wedged the gateway.
    let health = gw.request(Method::GET, "/healthz", &[], Bytes::new()).await;
    assert_eq!(health.status, 200);
}

#[tokio::test]
async fn push_without_to_or_data_is_400_missing_field() {
    let gw = Gateway::default().await;
    let cases = [
        ("no to", r#"{"data":1}"#),
        ("no data", r#"{"to":"*"}"#),
        ("empty object", "{}"),
        ("empty to list", r#"{"to":[],"data":1}"#),
    ];
    for (case, body) in cases {
        let resp = post_json(&gw, body).await;
        assert_error(&resp, 400, "missing_field", case);
    }
}

#[tokio::test]
async fn push_to_a_malformed_user_id_is_400_bad_user_id() {
    let gw = Gateway::default().await;
    let too_long = format!(r#"{{"to":["{}"],"data":1}}"#, "u".repeat(129));
    let cases = [
        ("space", r#"{"to":["ok","bad id"],"data":1}"#.to_owned()),
        ("empty", r#"{"to":[""],"data":1}"#.to_owned()),
        ("slash", r#"{"to":["a/b"],"data":1}"#.to_owned()),
        ("non-ASCII", r#"{"to":["jürgen"],"data":1}"#.to_owned()),
        ("129 bytes", too_long),
    ];
    for (case, body) in cases {
        let resp = post_json(&gw, body).await;
        assert_error(&resp, 400, "bad_user_id", case);
    }
    let longest = format!(r#"{{"to":["{}"],"data":1}}"#, "u".repeat(128));
    assert_eq!(
        post_json(&gw, longest).await.status,
        202,
        "128 bytes is valid"
    );
}

#[tokio::test]
async fn push_naming_more_than_max_push_users_is_400_too_many_users() {
    let mut c = config();
    c.limits.max_push_users = 2;
    let gw = Gateway::start(c).await;
    let over = post_json(&gw, r#"{"to":["a","b","c"],"data":1}"#).await;
    assert_error(&over, 400, "too_many_users", "three users, max two");
    let at = post_json(&gw, r#"{"to":["a","b"],"data":1}"#).await;
    assert_eq!(at.status, 202, "{:?}", at.body);
    assert_eq!(at.json()["users"], 2);
}

#[tokio::test]
async fn pushes_over_push_rate_per_sec_are_429_with_retry_after() {
    let mut c = config();
    c.limits.push_rate_per_sec = 2;
    let gw = Gateway::start(c).await;
    let mut alice = gw.connect("alice").await;
    let bodies: Vec<Value> = (0..20).map(|n| json!({"to": "*", "data": n})).collect();
    let burst = join_all(bodies.iter().map(|body| gw.push(body))).await;
    let accepted = burst.iter().filter(|r| r.status == 202).count();
    let limited: Vec<&Response> = burst.iter().filter(|r| r.status == 429).collect();
    assert_eq!(accepted + limited.len(), 20, "only 202 or 429");
    assert!(accepted >= 1, "the burst allowance admits some");
    assert!(!limited.is_empty(), "20 pushes at once pass a rate of 2/s");
    for resp in &limited {
        assert_error(resp, 429, "rate_limited", "over the rate");
        let retry: u64 = resp.headers["retry-after"]
            .to_str()
            .expect("ASCII")
            .parse()
            .expect("Retry-After in whole seconds");
        assert!((1..=60).contains(&retry), "Retry-After {retry}");
    }
    // Once the rate allows a marker through, exactly the accepted pushes
    // came before it: the refused ones delivered nothing.
    // At 2/s a token comes back within a second; WAIT is ten of them.
    let deadline = tokio::time::Instant::now() + WAIT;
    let marker = loop {
        let resp = gw.push(&json!({"to": "*", "data": "marker"})).await;
        if resp.status == 202 {
            break resp.json()["id"].clone();
        }
        assert_error(&resp, 429, "rate_limited", "the marker while limited");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rate let no push through within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for _ in 0..accepted {
        let frame = next_json(&mut alice, WAIT).await;
        assert_ne!(frame["id"], marker, "fewer messages than accepted pushes");
    }
    assert_eq!(next_json(&mut alice, WAIT).await["id"], marker);
}

#[tokio::test]
async fn push_route_answers_other_methods_with_405_allow_post() {
    let gw = Gateway::default().await;
    for method in [Method::GET, Method::PUT, Method::DELETE, Method::HEAD] {
        let resp = gw.request(method.clone(), "/push", &[], Bytes::new()).await;
        assert_eq!(resp.status, 405, "{method}");
        assert_eq!(resp.headers["allow"], "POST", "{method}");
        if method != Method::HEAD {
            assert_error(&resp, 405, "method_not_allowed", method.as_str());
        }
    }
}

/// Request headers as name and value pairs.
type Headers<'a> = &'a [(&'a str, &'a str)];

#[tokio::test]
async fn refused_pushes_deliver_nothing() {
    let mut c = config();
    c.limits.max_push_bytes = 256;
    c.limits.max_push_users = 2;
    let gw = Gateway::start(c).await;
    let mut alice = gw.connect("alice").await;
    let auth = bearer();
    let json_headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let wrong_key = [
        ("authorization", "Bearer wrong-key-0123456789abcdef"),
        ("content-type", "application/json"),
    ];
    let text = [
        ("authorization", auth.as_str()),
        ("content-type", "text/plain"),
    ];
    let valid = r#"{"to":"*","data":"refused"}"#;
    let padded = format!(r#"{{"to":"*","data":"{}"}}"#, "x".repeat(300));
    let cases: [(Headers, String, u16); 8] = [
        (&wrong_key, valid.to_owned(), 401),
        (
            &[("content-type", "application/json")],
            valid.to_owned(),
            401,
        ),
        (&text, valid.to_owned(), 415),
        (&json_headers, padded, 413),
        (
            &json_headers,
            r#"{"to":"*","data":"refused""#.to_owned(),
            400,
        ),
        (&json_headers, r#"{"to":"*"}"#.to_owned(), 400),
        (
            &json_headers,
            r#"{"to":["alice","bad id"],"data":"refused"}"#.to_owned(),
            400,
        ),
        (
            &json_headers,
            r#"{"to":["alice","b","c"],"data":"refused"}"#.to_owned(),
            400,
        ),
    ];
    for (headers, body, status) in cases {
        let resp = post(&gw, headers, body.clone()).await;
        assert_eq!(resp.status, status, "{body}");
    }
    gw.push(&json!({"to": "*", "data": "accepted"})).await;
    let frame = next_json(&mut alice, WAIT).await;
    assert_eq!(frame["data"], "accepted", "a refused push was delivered");
}
