//! A resume whose history read fails is refused, not told it missed
//! messages. Two ways to fail: a Redis error (the user's history key of
//! the wrong type), and Redis holding the history but not answering in
//! time (a private Redis paused with `CLIENT PAUSE … ALL`, which keeps
//! every key). Either way WebSocket, long-poll and SSE each get `503
//! unavailable` with a `Retry-After` in `1..=[limits]
//! connection_retry_spread_secs`, nothing stays attached, and the
//! attach's presence is undone. Once Redis answers, the same cursor on
//! each transport gets `recover` `complete: true` and every missed
//! message exactly once, in order.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use pushgate::protocol::Transport;
use serde_json::{Value, json};
use support::browser::{Sse, cursor_of, data_of, get, poll_path, resume, sse_path};
use support::ws::{metric, raw_handshake, upgrade_request};
use support::{API_KEY, Gateway, redis, token};

const WAIT: Duration = Duration::from_secs(15);

/// `[limits] connection_retry_spread_secs` in this test.
const SPREAD_SECS: u64 = 3;

/// How long Redis is paused: long enough for the three refused resumes
/// (each waits `[broker] timeout_ms`) on a loaded machine.
const PAUSE: Duration = Duration::from_secs(8);

/// Sends one RESP command (given inline) to the Redis on `port` and
/// returns its first reply line, within `limit`.
fn redis_command(port: u16, command: &str, limit: Duration) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("redis connect");
    stream.set_read_timeout(Some(limit)).expect("read timeout");
    stream
        .write_all(format!("{command}\r\n").as_bytes())
        .expect("command written");
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        let n = stream
            .read(&mut byte)
            .unwrap_or_else(|err| panic!("no reply to {command:?} within {limit:?}: {err}"));
        assert_eq!(n, 1, "redis closed the connection on {command:?}");
        reply.push(byte[0]);
    }
    String::from_utf8_lossy(&reply).trim_end().to_owned()
}

async fn push(gw: &Gateway, body: Value) -> Value {
    let resp = gw.push(&body).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    resp.json()
}

/// A refusal's status, `Retry-After` (seconds) and error code.
#[derive(Debug)]
struct Refusal {
    status: u16,
    retry_after: Option<u64>,
    code: String,
}

impl Refusal {
    fn new(status: u16, retry_after: Option<&str>, body: &[u8]) -> Self {
        let json: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
            panic!(
                "{status}: not JSON ({e}): {:?}",
                String::from_utf8_lossy(body)
            )
        });
        Self {
            status,
            retry_after: retry_after.and_then(|v| v.parse().ok()),
            code: json["error"]["code"].as_str().unwrap_or("").to_owned(),
        }
    }

    fn of(status: StatusCode, headers: &hyper::HeaderMap, body: &[u8]) -> Self {
        let retry_after = headers.get("retry-after").and_then(|v| v.to_str().ok());
        Self::new(status.as_u16(), retry_after, body)
    }

    fn assert_unavailable(&self, transport: Transport) {
        assert_eq!(
            (self.status, self.code.as_str()),
            (503, "unavailable"),
            "{transport:?}: {self:?}"
        );
        let secs = self.retry_after.expect("a Retry-After");
        assert!(
            (1..=SPREAD_SECS).contains(&secs),
            "{transport:?}: Retry-After {secs} not in 1..={SPREAD_SECS}"
        );
    }
}

/// Resumes `user` from `cursor` over `transport`, expecting a refusal.
async fn refused(gw: &Gateway, transport: Transport, user: &str, cursor: &str) -> Refusal {
    match transport {
        Transport::Ws => {
            let target = format!("/ws?token={}&cursor={cursor}", token(user, 3600));
            let mut answer =
                raw_handshake(gw.addr, &upgrade_request("GET", &target, &[], &[])).await;
            if answer.status == 101 {
                let first = answer.ws.next_frame(WAIT).await;
                let first = first.map(|f| String::from_utf8_lossy(&f.payload).into_owned());
                panic!(
                    "ws: the resume was accepted though its history read failed; first frame {first:?}"
                );
            }
            Refusal::new(answer.status, answer.header("retry-after"), &answer.body)
        }
        Transport::Poll => {
            let resp =
                tokio::time::timeout(WAIT, get(gw.addr, &poll_path(user, Some(cursor)), &[]))
                    .await
                    .expect("poll answered in time");
            Refusal::of(resp.status, &resp.headers, &resp.body)
        }
        Transport::Sse => {
            let sse = Sse::open(gw.addr, &sse_path(user, Some(cursor)), &[]).await;
            let (status, headers) = (sse.status, sse.headers.clone());
            Refusal::of(status, &headers, &sse.rest().await)
        }
    }
}

/// Asserts that the node holds no connection and no user.
fn assert_nothing_held(gw: &Gateway, transport: Transport) {
    let held = gw.state.inspect();
    assert_eq!(
        (held.connections, held.users),
        (0, 0),
        "{transport:?}: nothing stays attached: {held:?}"
    );
}

/// Asserts `pushgate_resumes_refused_total` is `n` for every transport.
async fn assert_refusals_counted(gw: &Gateway, n: f64) {
    let metrics = gw.metrics().await;
    for transport in ["ws", "poll", "sse"] {
        let series = format!("pushgate_resumes_refused_total{{transport=\"{transport}\"}}");
        assert_eq!(metric(&metrics, &series), Some(n), "{series}");
    }
}

/// `GET /users/<user>`'s `connections` (presence over every node).
async fn connections_of(gw: &Gateway, user: &str) -> u64 {
    let auth = format!("Bearer {API_KEY}");
    let resp = gw
        .request(
            Method::GET,
            &format!("/users/{user}"),
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(resp.status, 200, "{resp:?}");
    resp.json()["connections"].as_u64().expect("connections")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_whose_history_read_fails_is_refused_and_gets_everything_after() {
    if !redis::available() {
        return;
    }
    let server = redis::PrivateRedis::start();
    let prefix = redis::prefix("resume-refused");
    let mut config = redis::config(&server.url(), &prefix);
    config.broker.timeout_ms = 500;
    config.limits.connection_retry_spread_secs = SPREAD_SECS;
    // No presence heartbeat (it rewrites the counts from the registry)
    // within the test: the counts move only by each attach's +1 and each
    // release's -1.
    config.broker.presence_ttl_secs = 600;
    let gw = Gateway::start(config).await;

    let first = push(&gw, json!({"to": "*", "data": "before"})).await;
    let cursor = cursor_of(&first);
    push(&gw, json!({"to": ["alice"], "data": "a1"})).await;
    push(&gw, json!({"to": "*", "data": "b1"})).await;
    push(&gw, json!({"to": ["bob"], "data": "not alice's"})).await;
    push(&gw, json!({"to": ["alice"], "data": "a2"})).await;
    push(&gw, json!({"to": "*", "data": "b2"})).await;
    let missed = vec![json!("a1"), json!("b1"), json!("a2"), json!("b2")];

    // A Redis error: carol's history stream is a string, which resume.lua
    // cannot read (WRONGTYPE).
    let carols = format!("SET {prefix}:h:u:carol not-a-stream");
    assert_eq!(redis_command(server.port, &carols, WAIT), "+OK");
    for transport in [Transport::Ws, Transport::Poll, Transport::Sse] {
        refused(&gw, transport, "carol", &cursor)
            .await
            .assert_unavailable(transport);
        assert_nothing_held(&gw, transport);
    }
    assert_refusals_counted(&gw, 1.0).await;
    // Presence changes are written in order, one at a time: once dave's
    // connection is counted, carol's three attaches and releases are.
    let dave = gw.connect("dave").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while connections_of(&gw, "dave").await != 1 {
        assert!(tokio::time::Instant::now() < deadline, "dave never counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        connections_of(&gw, "carol").await,
        0,
        "the attach's presence is undone"
    );
    drop(dave);
    let deadline = tokio::time::Instant::now() + WAIT;
    while gw.state.inspect().connections != 0 {
        assert!(tokio::time::Instant::now() < deadline, "dave never left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Every command waits until the pause ends, the history read too;
    // nothing is lost.
    let paused_at = Instant::now();
    let pause = format!("CLIENT PAUSE {} ALL", PAUSE.as_millis());
    assert_eq!(redis_command(server.port, &pause, WAIT), "+OK");
    for transport in [Transport::Ws, Transport::Poll, Transport::Sse] {
        let refusal = refused(&gw, transport, "alice", &cursor).await;
        assert!(
            paused_at.elapsed() < PAUSE,
            "{transport:?} answered after the pause ended: the test proves nothing"
        );
        refusal.assert_unavailable(transport);
        assert_nothing_held(&gw, transport);
    }
    assert_refusals_counted(&gw, 2.0).await;

    // A PING answers once the pause is over.
    assert_eq!(redis_command(server.port, "PING", PAUSE + WAIT), "+PONG");

    // The same cursor now gets every missed message, once, in order.
    let mut live = Vec::new();
    for transport in [Transport::Ws, Transport::Poll, Transport::Sse] {
        let (frames, client) =
            resume(&gw, transport, "alice", &cursor, missed.len() + 1, WAIT).await;
        assert_eq!(
            (frames[0]["type"].as_str(), frames[0]["complete"].as_bool()),
            (Some("recover"), Some(true)),
            "{transport:?}: {frames:?}"
        );
        assert_eq!(data_of(&frames[1..]), missed, "{transport:?}: {frames:?}");
        live.extend(client);
    }
    // Nothing more: the next message to alice is the first the WebSocket
    // and the SSE stream see after those.
    let marker = support::browser::push_marker(&gw, json!(["alice"])).await;
    for client in &mut live {
        client.assert_quiet_until(&marker, WAIT).await;
    }
}
