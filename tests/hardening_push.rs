//! The bad-input catalogue for `POST /push`: bodies and headers a broken
//! or hostile backend sends, each with the status and JSON error code it
//! must get; a refused push is refused whole. After every case the gateway
//! still serves a normal client (`Probe::still_serves`).

mod hardening_support;
mod support;

use bytes::Bytes;
use hardening_support::{Mismatches, Probe, hardened_config, nested};
use hyper::Method;
use serde_json::json;
use support::{API_KEY, token};

/// One `POST /push` case sent by a normal HTTP client.
struct PushCase {
    name: &'static str,
    /// Header pairs; `None` means the API key and the JSON content type.
    headers: Option<Vec<(&'static str, String)>>,
    body: Vec<u8>,
    status: u16,
    /// The JSON `error.code`, for a refusal.
    code: Option<&'static str>,
}

fn push_case(
    name: &'static str,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: Option<&'static str>,
) -> PushCase {
    PushCase {
        name,
        headers: None,
        body: body.into(),
        status,
        code,
    }
}

fn bad(name: &'static str, body: impl Into<Vec<u8>>, code: &'static str) -> PushCase {
    push_case(name, body, 400, Some(code))
}

fn with_headers(
    name: &'static str,
    headers: Vec<(&'static str, String)>,
    status: u16,
    code: &'static str,
) -> PushCase {
    PushCase {
        headers: Some(headers),
        ..push_case(name, r#"{"to":"*","data":1}"#, status, Some(code))
    }
}

fn to_user(user: &str) -> String {
    json!({"to": [user], "data": 1}).to_string()
}

/// Bodies and headers of `POST /push` that must be refused whole (or, for
/// the few marked 202, accepted as documented).
fn push_cases() -> Vec<PushCase> {
    let json_type = || ("content-type", "application/json".to_owned());
    let key = |k: &str| ("authorization", k.to_owned());
    let eleven: Vec<String> = (0..11).map(|i| format!("u{i}")).collect();
    vec![
        bad(
            "invalid UTF-8",
            b"{\"to\":\"*\",\"data\":\"\xff\xfe\"}".to_vec(),
            "bad_json",
        ),
        bad(
            "UTF-8 BOM before the object",
            "\u{feff}{\"to\":\"*\",\"data\":1}",
            "bad_json",
        ),
        bad("empty body", "", "bad_json"),
        bad("truncated JSON", r#"{"to":"*","da"#, "bad_json"),
        bad("top-level array", r#"[{"to":"*","data":1}]"#, "bad_json"),
        bad("top-level string", r#""*""#, "bad_json"),
        bad("top-level number", "42", "bad_json"),
        bad("top-level null", "null", "bad_json"),
        bad("trailing garbage", r#"{"to":"*","data":1}}"#, "bad_json"),
        bad("body nested 10,000 deep", nested(10_000), "bad_json"),
        bad(
            "data nested 10,000 deep",
            format!(r#"{{"to":"*","data":{}}}"#, nested(10_000)),
            "bad_json",
        ),
        bad(
            "to nested 10,000 deep",
            format!(r#"{{"to":{},"data":1}}"#, nested(10_000)),
            "bad_json",
        ),
        bad(
            "data nested 65 deep (limit 64)",
            format!(r#"{{"to":"*","data":{}}}"#, nested(65)),
            "bad_json",
        ),
        push_case(
            "data nested 64 deep (the limit)",
            format!(r#"{{"to":"*","data":{}}}"#, nested(64)),
            202,
            None,
        ),
        push_case(
            "unknown field nested 10,000 deep (skipped without recursion)",
            format!(r#"{{"to":"*","data":1,"x":{}}}"#, nested(10_000)),
            202,
            None,
        ),
        bad(
            "number where to's string belongs",
            r#"{"to":5,"data":1}"#,
            "bad_json",
        ),
        bad(
            "number where a user id belongs",
            r#"{"to":[5],"data":1}"#,
            "bad_json",
        ),
        bad(
            "number where id's string belongs",
            r#"{"to":"*","data":1,"id":5}"#,
            "bad_json",
        ),
        bad(
            "to a single user as a string",
            r#"{"to":"alice","data":1}"#,
            "bad_json",
        ),
        bad(
            "to an object",
            r#"{"to":{"user":"alice"},"data":1}"#,
            "bad_json",
        ),
        bad(
            "to repeated",
            r#"{"to":"*","to":["a"],"data":1}"#,
            "bad_json",
        ),
        bad("no data", r#"{"to":"*"}"#, "missing_field"),
        bad("no to", r#"{"data":1}"#, "missing_field"),
        bad("to an empty list", r#"{"to":[],"data":1}"#, "missing_field"),
        bad("unicode user id", to_user("élodie"), "bad_user_id"),
        bad("empty user id", to_user(""), "bad_user_id"),
        bad("129-byte user id", to_user(&"u".repeat(129)), "bad_user_id"),
        push_case(
            "128-byte user id (the limit)",
            to_user(&"u".repeat(128)),
            202,
            None,
        ),
        bad(
            "user id of 43 three-byte characters",
            to_user(&"€".repeat(43)),
            "bad_user_id",
        ),
        bad("user id with a space", to_user("al ice"), "bad_user_id"),
        bad("user id with NUL", to_user("al\u{0}ice"), "bad_user_id"),
        bad(
            "user id with a path",
            to_user("../etc/passwd"),
            "bad_user_id",
        ),
        bad(
            "11 users (limit 10)",
            json!({"to": eleven, "data": 1}).to_string(),
            "too_many_users",
        ),
        bad("empty id", r#"{"to":"*","data":1,"id":""}"#, "bad_json"),
        bad(
            "129-character id",
            json!({"to": "*", "data": 1, "id": "i".repeat(129)}).to_string(),
            "bad_json",
        ),
        // Both were accepted and relayed verbatim, and then every strict
        // JSON client (serde_json among them) failed to parse the frame:
        // fixed in src/api/push.rs.
        bad(
            "lone surrogate escape in data",
            r#"{"to":"*","data":"\ud800"}"#,
            "bad_json",
        ),
        bad(
            "number beyond a double in data",
            r#"{"to":"*","data":1e999999}"#,
            "bad_json",
        ),
        bad(
            "raw control character in a data string",
            "{\"to\":\"*\",\"data\":\"a\tb\"}",
            "bad_json",
        ),
        push_case(
            "surrogate pair escape in data",
            r#"{"to":"*","data":"\ud83d\ude00"}"#,
            202,
            None,
        ),
        PushCase {
            body: vec![b' '; 70_000],
            ..push_case(
                "body over max_push_bytes",
                "",
                413,
                Some("payload_too_large"),
            )
        },
        with_headers("no Authorization", vec![json_type()], 401, "unauthorized"),
        with_headers(
            "wrong API key",
            vec![json_type(), key("Bearer not-the-key-0123456789")],
            401,
            "unauthorized",
        ),
        with_headers(
            "API key with a byte appended",
            vec![json_type(), key(&format!("Bearer {API_KEY}x"))],
            401,
            "unauthorized",
        ),
        with_headers(
            "API key under the Basic scheme",
            vec![json_type(), key(&format!("Basic {API_KEY}"))],
            401,
            "unauthorized",
        ),
        with_headers(
            "a client token instead of the API key",
            vec![json_type(), key(&format!("Bearer {}", token("alice", 60)))],
            401,
            "unauthorized",
        ),
        with_headers(
            "text/plain body",
            vec![
                ("content-type", "text/plain".into()),
                key(&format!("Bearer {API_KEY}")),
            ],
            415,
            "unsupported_media_type",
        ),
        with_headers(
            "no Content-Type",
            vec![key(&format!("Bearer {API_KEY}"))],
            415,
            "unsupported_media_type",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_push_bodies_are_refused_whole_and_the_gateway_keeps_serving() {
    let mut probe = Probe::start(hardened_config()).await;
    let cases = push_cases();
    let auth = format!("Bearer {API_KEY}");
    let mut mismatches = Mismatches::default();
    for case in &cases {
        let headers: Vec<(&str, String)> = case.headers.clone().unwrap_or_else(|| {
            vec![
                ("authorization", auth.clone()),
                ("content-type", "application/json".into()),
            ]
        });
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let resp = probe
            .gw
            .request(
                Method::POST,
                "/push",
                &headers,
                Bytes::from(case.body.clone()),
            )
            .await;
        let code = (!resp.status.is_success()).then(|| resp.error_code());
        let verdict = if (resp.status.as_u16(), code.as_deref()) == (case.status, case.code) {
            Ok(())
        } else {
            Err(format!(
                "want {} {:?}, got {resp:?}",
                case.status, case.code
            ))
        };
        mismatches.record(case.name, verdict);
        probe.still_serves(case.name).await;
    }
    mismatches.assert_none("POST /push");
    assert_eq!(probe.checks(), cases.len());
}
