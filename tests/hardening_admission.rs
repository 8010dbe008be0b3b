//! The bad-input catalogue for client admission on every transport
//! (WebSocket, long-poll, SSE): tokens that are forged, unsigned, expired
//! or carry bad claims, bad anonymous user ids, bad cursors, refused
//! origins and broken WebSocket handshakes, each with the status and JSON
//! error code it must get. After every case the gateway still serves a
//! normal client (`Probe::still_serves`).

mod hardening_support;
mod support;

use hardening_support::{
    ALLOWED_ORIGIN, Mismatches, Probe, hardened_config, nested, signed, token_for_raw_sub,
};
use serde_json::json;
use support::token;
use support::ws::{alg_none_token, raw_handshake, token_with, upgrade_request};

/// How a client endpoint is reached in an admission case.
#[derive(Debug, Clone, Copy)]
enum Endpoint {
    Ws,
    Poll,
    Sse,
}

/// Sends `query` (and `headers`) to `endpoint` and returns status and error code.
async fn admission(
    addr: std::net::SocketAddr,
    endpoint: Endpoint,
    query: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    match endpoint {
        Endpoint::Ws => {
            let answer = raw_handshake(
                addr,
                &upgrade_request("GET", &format!("/ws?{query}"), headers, &[]),
            )
            .await;
            let code = if answer.status == 101 {
                String::new()
            } else {
                answer.error_code()
            };
            (answer.status, code)
        }
        Endpoint::Poll | Endpoint::Sse => {
            let path = if matches!(endpoint, Endpoint::Poll) {
                "/poll"
            } else {
                "/sse"
            };
            let resp = support::browser::get(addr, &format!("{path}?{query}"), headers).await;
            let code = if resp.status.is_success() {
                String::new()
            } else {
                resp.error_code()
            };
            (resp.status.as_u16(), code)
        }
    }
}

/// `Ok` when a status and error code are the ones wanted.
fn same(got: (u16, String), want: (u16, &str)) -> Result<(), String> {
    if (got.0, got.1.as_str()) == want {
        Ok(())
    } else {
        Err(format!("want {want:?}, got {got:?}"))
    }
}

/// One admission case: a query string, extra headers, the status and code.
type AdmissionCase = (
    &'static str,
    String,
    Vec<(&'static str, String)>,
    u16,
    &'static str,
);

/// Credentials, cursors and origins every client endpoint must refuse.
fn admission_cases() -> Vec<AdmissionCase> {
    let now = pushgate::gateway::Gateway::unix_now();
    let claims = |c: serde_json::Value| signed(json!({"alg": "HS256", "typ": "JWT"}), c);
    let q = |t: &str| format!("token={t}");
    let deep_claims = {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let message = format!("{}.{}", b64(r#"{"alg":"HS256"}"#), b64(&nested(10_000)));
        let key = jsonwebtoken::EncodingKey::from_secret(support::SECRET.as_bytes());
        let mac =
            jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::HS256)
                .expect("hmac");
        format!("{message}.{mac}")
    };
    let tampered = {
        let good = token("alice", 3600);
        let mallory = token("mallory", 3600);
        let (h, rest) = good.split_once('.').expect("jwt");
        let (_, mac) = rest.split_once('.').expect("jwt");
        let claims = mallory.split('.').nth(1).expect("jwt");
        format!("{h}.{claims}.{mac}")
    };
    let valid = token("carol", 3600);
    let none: Vec<(&str, String)> = Vec::new();
    let unauthorized = |name, query: String| (name, query, Vec::new(), 401, "unauthorized");
    vec![
        unauthorized("no credentials at all", String::new()),
        unauthorized("token that is not a JWT", q("abc")),
        unauthorized("empty token", q("")),
        unauthorized("token of %00", q("%00")),
        unauthorized("token with alg none", q(&alg_none_token("alice"))),
        unauthorized(
            "token with an RS256 header",
            q(&signed(
                json!({"alg": "RS256"}),
                json!({"sub": "alice", "exp": now + 60}),
            )),
        ),
        unauthorized(
            "token with an HS512 header",
            q(&signed(
                json!({"alg": "HS512"}),
                json!({"sub": "alice", "exp": now + 60}),
            )),
        ),
        unauthorized("token without exp", q(&claims(json!({"sub": "alice"})))),
        unauthorized(
            "token with exp as a string",
            q(&claims(
                json!({"sub": "alice", "exp": (now + 60).to_string()}),
            )),
        ),
        unauthorized(
            "token with a fractional exp",
            q(&claims(json!({"sub": "alice", "exp": now as f64 + 60.5}))),
        ),
        unauthorized(
            "expired token",
            q(&token_with(support::SECRET.as_bytes(), "alice", now - 1)),
        ),
        unauthorized(
            "token signed with another secret",
            q(&token_with(b"another-secret-0123456789", "alice", now + 60)),
        ),
        unauthorized("token with its claims swapped", q(&tampered)),
        unauthorized("token with sub a number", q(&token_for_raw_sub(json!(42)))),
        unauthorized("token with an empty sub", q(&token_for_raw_sub(json!("")))),
        unauthorized(
            "token with sub not a user id",
            q(&token_for_raw_sub(json!("al ice"))),
        ),
        unauthorized(
            "token with a 129-byte sub",
            q(&token_for_raw_sub(json!("u".repeat(129)))),
        ),
        unauthorized(
            "token with a unicode sub",
            q(&token_for_raw_sub(json!("élodie"))),
        ),
        unauthorized("token with claims nested 10,000 deep", q(&deep_claims)),
        unauthorized("token of 20 KB", q(&"a".repeat(20_000))),
        unauthorized("uid without a token, anonymous off", "uid=alice".into()),
        (
            "unparseable cursor",
            format!("token={valid}&cursor=zzz"),
            none.clone(),
            400,
            "bad_cursor",
        ),
        (
            "cursor of 10 KB",
            format!("token={valid}&cursor={}", "1".repeat(10_000)),
            none.clone(),
            400,
            "bad_cursor",
        ),
        (
            "cursor with %00",
            format!("token={valid}&cursor=0000000000000000-1%00"),
            none.clone(),
            400,
            "bad_cursor",
        ),
        (
            "cursor with a seq past 2^64",
            format!("token={valid}&cursor=0000000000000000-18446744073709551616"),
            none.clone(),
            400,
            "bad_cursor",
        ),
        (
            "origin not allowed",
            q(&valid),
            vec![("Origin", "https://evil.example".into())],
            403,
            "forbidden",
        ),
        (
            "origin null",
            q(&valid),
            vec![("Origin", "null".into())],
            403,
            "forbidden",
        ),
        (
            "allowed origin with a path suffix",
            q(&valid),
            vec![("Origin", format!("{ALLOWED_ORIGIN}.evil.net"))],
            403,
            "forbidden",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_cursors_and_origins_are_refused_on_every_transport() {
    let mut probe = Probe::start(hardened_config()).await;
    let cases = admission_cases();
    let mut mismatches = Mismatches::default();
    let mut tried = 0;
    for (name, query, headers, status, code) in &cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        for endpoint in [Endpoint::Ws, Endpoint::Poll, Endpoint::Sse] {
            let case = format!("{endpoint:?}: {name}");
            let got = admission(probe.addr(), endpoint, query, &headers).await;
            mismatches.record(&case, same(got, (*status, code)));
            probe.still_serves(&case).await;
            tried += 1;
        }
    }
    // A bearer header on /poll goes through the same checks.
    for (name, value) in [
        ("poll: Bearer garbage", "Bearer garbage".to_owned()),
        (
            "poll: Bearer alg none",
            format!("Bearer {}", alg_none_token("alice")),
        ),
        (
            "poll: Basic scheme",
            format!("Basic {}", token("alice", 60)),
        ),
    ] {
        let got = admission(
            probe.addr(),
            Endpoint::Poll,
            "",
            &[("Authorization", &value)],
        )
        .await;
        mismatches.record(name, same(got, (401, "unauthorized")));
        probe.still_serves(name).await;
        tried += 1;
    }
    mismatches.assert_none("client admission");
    assert_eq!(probe.checks(), tried);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_anonymous_user_ids_are_400_on_every_transport() {
    let mut config = hardened_config();
    config.auth.anonymous = true;
    let mut probe = Probe::start(config).await;
    let cases = [
        ("empty uid", "uid=".to_owned()),
        ("129-byte uid", format!("uid={}", "u".repeat(129))),
        ("unicode uid", "uid=%C3%A9lodie".to_owned()),
        ("uid of %00", "uid=%00".to_owned()),
        ("uid with a space", "uid=al%20ice".to_owned()),
        ("uid with a path", "uid=..%2Fetc%2Fpasswd".to_owned()),
        ("uid with invalid UTF-8", "uid=%ff".to_owned()),
    ];
    let mut mismatches = Mismatches::default();
    let mut tried = 0;
    for (name, query) in &cases {
        for endpoint in [Endpoint::Ws, Endpoint::Poll, Endpoint::Sse] {
            let case = format!("{endpoint:?}: {name}");
            let got = admission(probe.addr(), endpoint, query, &[]).await;
            mismatches.record(&case, same(got, (400, "bad_user_id")));
            probe.still_serves(&case).await;
            tried += 1;
        }
    }
    mismatches.assert_none("anonymous user ids");
    assert_eq!(probe.checks(), tried);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_websocket_handshakes_are_refused_before_any_upgrade() {
    let mut probe = Probe::start(hardened_config()).await;
    let target = format!("/ws?token={}", token("dave", 3600));
    let cases: [(&str, String, u16, &str); 6] = [
        (
            "no Sec-WebSocket-Key",
            upgrade_request("GET", &target, &[], &["Sec-WebSocket-Key"]),
            400,
            "bad_request",
        ),
        (
            "a 15-byte key",
            upgrade_request(
                "GET",
                &target,
                &[("Sec-WebSocket-Key", "c2hvcnQga2V5IDE1Ynl0")],
                &[],
            ),
            400,
            "bad_request",
        ),
        (
            "version 8",
            upgrade_request("GET", &target, &[("Sec-WebSocket-Version", "8")], &[]),
            426,
            "bad_request",
        ),
        (
            "no Connection: upgrade",
            upgrade_request("GET", &target, &[("Connection", "keep-alive")], &[]),
            400,
            "bad_request",
        ),
        (
            "upgrade to h2c",
            upgrade_request("GET", &target, &[("Upgrade", "h2c")], &[]),
            400,
            "bad_request",
        ),
        (
            "POST upgrade",
            upgrade_request("POST", &target, &[], &[]),
            405,
            "method_not_allowed",
        ),
    ];
    let mut mismatches = Mismatches::default();
    for (name, request, status, code) in &cases {
        let answer = raw_handshake(probe.addr(), request).await;
        mismatches.record(
            name,
            same((answer.status, answer.error_code()), (*status, code)),
        );
        probe.still_serves(name).await;
    }
    mismatches.assert_none("WebSocket handshakes");
    assert_eq!(probe.checks(), cases.len());
}
