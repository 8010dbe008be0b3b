//! `POST /push` read by the front door against the same push read by
//! hyper. On plain TCP the front door reads a push with one
//! `Content-Length` itself (`server::front`); anything else about a push
//! (chunked, `Expect`, a body over `max_push_bytes`, HTTP/1.0, a
//! connection hyper already serves) is hyper's. Two readers of one
//! endpoint: a push that one of them frames differently from the other
//! is a push lost, doubled or smuggled.
//!
//! Each row is a request written byte for byte, sent twice on new
//! connections: as it is (the front door reads it), and behind a `GET
//! /healthz` (hyper serves that, and then the connection for good). Both
//! must end as the row says (every answer's status and error code in
//! order, and whether the connection was closed or kept open), the same
//! way, and deliver the same messages.

mod hardening_support;
mod support;

use std::time::Duration;

use hardening_support::{Exchange, content_length, exchange, hardened_config};
use serde_json::json;
use support::{API_KEY, Gateway};

/// How long a row's connection is watched: past the body timeout of the
/// hardened config (2 s), with a margin.
const CLOSE_WAIT: Duration = Duration::from_secs(4);
/// The pause between the two parts of a row written in two.
const GAP: Duration = Duration::from_millis(200);
/// What puts a connection in hyper's hands before the row's bytes.
const TO_HYPER: &str = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
/// The hardened config's `max_push_bytes` (the default).
const MAX_PUSH_BYTES: usize = 65_536;

/// One push (or a few), and how both readers must answer.
struct Row {
    name: &'static str,
    /// The bytes.
    bytes: Vec<u8>,
    /// Written in two parts, this many bytes first, [`GAP`] apart.
    split: Option<usize>,
    /// The write half shut after the request (a client that is done).
    half_close: bool,
    /// Every answer's status and `error.code` (`""`: none), in order.
    answers: &'static [(u16, &'static str)],
    /// Whether the connection closes after the answers; one that stays
    /// open must answer the [`MARKER`] on it, and then close.
    closes: bool,
    /// Messages the row delivers (what a WebSocket client gets).
    delivers: usize,
    /// Why hyper may end it otherwise (it is then only checked to close).
    hyper_may_differ: Option<&'static str>,
}

fn row(
    name: &'static str,
    bytes: impl Into<Vec<u8>>,
    answers: &'static [(u16, &'static str)],
    closes: bool,
    delivers: usize,
) -> Row {
    Row {
        name,
        bytes: bytes.into(),
        split: None,
        half_close: false,
        answers,
        closes,
        delivers,
        hyper_may_differ: None,
    }
}

impl Row {
    fn split_at(mut self, first: usize) -> Self {
        self.split = Some(first);
        self
    }

    fn fin(mut self) -> Self {
        self.half_close = true;
        self
    }

    fn hyper_may_differ(mut self, why: &'static str) -> Self {
        self.hyper_may_differ = Some(why);
        self
    }
}

/// A push head with the API key, `extra` header lines and this body,
/// its `Content-Length` given by `length` (`None`: the body's).
fn push_with(extra: &str, length: Option<&str>, body: &str) -> String {
    let length = length.map_or_else(|| body.len().to_string(), str::to_owned);
    format!(
        "POST /push HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n{body}"
    )
}

/// A well-formed broadcast push (kept alive).
fn push(data: &str) -> String {
    push_with("", None, &format!(r#"{{"to":"*","data":"{data}"}}"#))
}

/// A well-formed broadcast push with `Connection: close`.
fn push_close(data: &str) -> String {
    push_with(
        "Connection: close\r\n",
        None,
        &format!(r#"{{"to":"*","data":"{data}"}}"#),
    )
}

const ACCEPTED: (u16, &str) = (202, "");

fn rows() -> Vec<Row> {
    let big = format!(
        r#"{{"to":"*","data":"{}"}}"#,
        "a".repeat(MAX_PUSH_BYTES - 20)
    );
    let over = format!(r#"{{"to":"*","data":"{}"}}"#, "a".repeat(MAX_PUSH_BYTES));
    vec![
        row("a push, kept alive", push("a"), &[ACCEPTED], false, 1),
        row(
            "a push, Connection: close",
            push_close("a"),
            &[ACCEPTED],
            true,
            1,
        ),
        row(
            "two pushes in one write",
            push("a") + &push_close("b"),
            &[ACCEPTED, ACCEPTED],
            true,
            2,
        ),
        row(
            "a push, then a GET the front door does not serve",
            push("a") + "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            &[ACCEPTED, (200, "")],
            true,
            1,
        ),
        row(
            "a push written in two parts inside its body",
            push_close("split"),
            &[ACCEPTED],
            true,
            1,
        )
        .split_at(push_close("split").len() - 5),
        row(
            "a push written in two parts inside its head",
            push_close("split"),
            &[ACCEPTED],
            true,
            1,
        )
        .split_at(20),
        row(
            "a body of exactly max_push_bytes",
            push_with("Connection: close\r\n", None, &big),
            &[ACCEPTED],
            true,
            1,
        ),
        row(
            "a body over max_push_bytes",
            push_with("Connection: close\r\n", None, &over),
            &[(413, "payload_too_large")],
            true,
            0,
        ),
        row(
            "Content-Length with leading zeros",
            push_with(
                "Connection: close\r\n",
                Some("0019"),
                r#"{"to":"*","data":1}"#,
            ),
            &[ACCEPTED],
            true,
            1,
        ),
        row(
            "a body shorter than its Content-Length, then silence",
            push_with("", Some("30"), r#"{"to":"*","data":"a"}"#),
            &[(408, "request_timeout")],
            true,
            0,
        ),
        row(
            "a body shorter than its Content-Length, then FIN",
            push_with("", Some("30"), r#"{"to":"*","data":"a"}"#),
            &[(400, "bad_json")],
            true,
            0,
        )
        .fin(),
        row(
            "a Content-Length shorter than the body: the rest is the next request",
            push_with("", Some("22"), r#"{"to":"*","data":"a"} BAD LINE"#) + "\r\n\r\n",
            &[ACCEPTED, (400, "")],
            true,
            1,
        ),
        row(
            "Content-Length: 0",
            push_with("Connection: close\r\n", Some("0"), ""),
            &[(400, "bad_json")],
            true,
            0,
        ),
        row(
            "two equal Content-Length headers",
            push_with(
                "Content-Length: 21\r\nConnection: close\r\n",
                None,
                r#"{"to":"*","data":"a"}"#,
            ),
            &[ACCEPTED],
            true,
            1,
        ),
        row(
            "two different Content-Length headers",
            push_with(
                "Content-Length: 5\r\nConnection: close\r\n",
                None,
                r#"{"to":"*","data":"a"}"#,
            ),
            &[(400, "")],
            true,
            0,
        ),
        row(
            "Content-Length as a list",
            push_with(
                "Connection: close\r\n",
                Some("21, 21"),
                r#"{"to":"*","data":"a"}"#,
            ),
            &[(400, "")],
            true,
            0,
        ),
        row(
            "chunked",
            format!(
                "POST /push HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n\
                 Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
                 Connection: close\r\n\r\n15\r\n{{\"to\":\"*\",\"data\":\"a\"}}\r\n0\r\n\r\n"
            ),
            &[ACCEPTED],
            true,
            1,
        ),
        row(
            "Expect: 100-continue",
            push_with(
                "Expect: 100-continue\r\nConnection: close\r\n",
                None,
                r#"{"to":"*","data":"a"}"#,
            ),
            &[(100, ""), ACCEPTED],
            true,
            1,
        ),
        row(
            "no API key",
            push("a").replace(&format!("Authorization: Bearer {API_KEY}\r\n"), ""),
            &[(401, "unauthorized")],
            false,
            0,
        ),
        row(
            "no API key, and a body that never comes",
            push_with("", Some("30"), "")
                .replace(&format!("Authorization: Bearer {API_KEY}\r\n"), ""),
            &[(401, "unauthorized")],
            true,
            0,
        ),
        row(
            "no API key, Connection: close",
            push_close("a").replace(&format!("Authorization: Bearer {API_KEY}\r\n"), ""),
            &[(401, "unauthorized")],
            true,
            0,
        ),
        row(
            "not JSON by its type",
            push("a").replace("application/json", "text/plain"),
            &[(415, "unsupported_media_type")],
            false,
            0,
        ),
        row(
            "malformed JSON, then a good push",
            push_with("", None, r#"{"to":"*","data":"#) + &push_close("after"),
            &[(400, "bad_json"), ACCEPTED],
            true,
            1,
        ),
        row("a whole push, then FIN", push("fin"), &[ACCEPTED], true, 1)
            .fin()
            .hyper_may_differ(
                "hyper drops a request whose client half-closed before the answer was written \
             (tests/http_parity.rs)",
            ),
    ]
}

/// What shows a connection left open is still served: one more request,
/// answered `200` on it, which asks for the close.
const MARKER: &str = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// Writes `row`'s bytes on a new connection, behind `prefix` (and, for a
/// row that keeps the connection open, the [`MARKER`] [`GAP`] later).
async fn send(gw: &Gateway, row: &Row, prefix: &str) -> Exchange {
    let mut bytes = prefix.as_bytes().to_vec();
    bytes.extend_from_slice(&row.bytes);
    let at = row.split.map(|at| at + prefix.len());
    let mut pieces: Vec<&[u8]> = match at {
        Some(at) => vec![&bytes[..at], &bytes[at..]],
        None => vec![&bytes[..]],
    };
    if !row.closes {
        pieces.push(MARKER.as_bytes());
    }
    exchange(gw.addr, &pieces, GAP, row.half_close, CLOSE_WAIT).await
}

/// Every answer's status and `error.code` (`""` for none), in order.
fn answers(got: &Exchange) -> Vec<(u16, String)> {
    let mut out = Vec::new();
    let mut rest = got.text.as_str();
    while let Some(at) = rest.find("HTTP/1.1 ") {
        rest = &rest[at..];
        let Some(status) = rest.get(9..12).and_then(|s| s.parse().ok()) else {
            break;
        };
        let Some((head, after)) = rest.split_once("\r\n\r\n") else {
            out.push((status, String::new()));
            break;
        };
        let len = content_length(head).unwrap_or(0);
        let body = after.get(..len).unwrap_or(after);
        let code = serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
            .unwrap_or_default();
        out.push((status, code));
        rest = after.get(len..).unwrap_or_default();
    }
    out
}

/// Whether `got` (without what `skip` answers) ends as `row` says.
fn verdict(row: &Row, got: &Exchange, skip: usize) -> Result<(), String> {
    let all = answers(got);
    let seen = all.get(skip..).unwrap_or_default();
    let mut want: Vec<(u16, String)> = row
        .answers
        .iter()
        .map(|(s, c)| (*s, (*c).to_owned()))
        .collect();
    if !row.closes {
        want.push((200, String::new()));
    }
    // A 400 for bytes that are not a request may come with a JSON body or
    // none: hyper writes none. The row's code is checked where it gives one.
    let matches = seen.len() == want.len()
        && seen
            .iter()
            .zip(&want)
            .all(|((s, c), (ws, wc))| s == ws && (wc.is_empty() || c == wc));
    if !matches {
        return Err(format!("answers {seen:?}, want {want:?}: {:?}", got.text));
    }
    if !got.closed {
        return Err(format!("still open: {:?}", got.text));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_door_reads_every_push_as_hyper_does() {
    let gw = Gateway::start(hardened_config()).await;
    let mut watcher = gw.connect("watcher").await;
    let mut failures = Vec::new();
    for row in rows() {
        for (path, prefix, skip) in [("front door", "", 0), ("hyper", TO_HYPER, 1)] {
            let got = send(&gw, &row, prefix).await;
            let loose = skip == 1 && row.hyper_may_differ.is_some();
            let checked = if loose {
                got.closed.then_some(()).ok_or("still open".to_owned())
            } else {
                verdict(&row, &got, skip)
            };
            if let Err(why) = checked {
                failures.push(format!("{} [{path}]: {why}", row.name));
            }
            if skip == 1 && answers(&got).first().map(|a| a.0) != Some(200) {
                failures.push(format!("{} [hyper]: /healthz not answered first", row.name));
            }
            // Every message the row delivers reaches the watcher, and no
            // other: a marker pushed after it comes next.
            let marker = format!("{} {path}", row.name);
            assert_eq!(
                gw.push(&json!({"to": "*", "data": marker})).await.status,
                202
            );
            let mut got = 0;
            loop {
                let frame = support::next_json(&mut watcher, CLOSE_WAIT).await;
                if frame["type"] != "message" {
                    continue;
                }
                if frame["data"] == json!(marker) {
                    break;
                }
                got += 1;
            }
            if got != row.delivers && !loose {
                failures.push(format!(
                    "{} [{path}]: delivered {got}, want {}",
                    row.name, row.delivers
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
