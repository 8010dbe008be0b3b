//! A resume whose history read fails is refused, not told it missed
//! messages: Redis holds the history but does not answer in time (a
//! private Redis paused with `CLIENT PAUSE … ALL`, which keeps every key),
//! so WebSocket, long-poll and SSE each get `503 unavailable` with a
//! `Retry-After` in `1..=[limits] connection_retry_spread_secs`, and
//! nothing stays attached. Once Redis answers, the same cursor on each
//! transport gets `recover` `complete: true` and every missed message
//! exactly once, in order.

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
                panic!("ws: the resume was accepted while Redis was paused; first frame {first:?}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_whose_history_read_times_out_is_refused_and_gets_everything_after() {
    if !redis::available() {
        return;
    }
    let server = redis::PrivateRedis::start();
    let mut config = redis::config(&server.url(), &redis::prefix("resume-refused"));
    config.broker.timeout_ms = 500;
    config.limits.connection_retry_spread_secs = SPREAD_SECS;
    let gw = Gateway::start(config).await;

    let first = push(&gw, json!({"to": "*", "data": "before"})).await;
    let cursor = cursor_of(&first);
    push(&gw, json!({"to": ["alice"], "data": "a1"})).await;
    push(&gw, json!({"to": "*", "data": "b1"})).await;
    push(&gw, json!({"to": ["bob"], "data": "not alice's"})).await;
    push(&gw, json!({"to": ["alice"], "data": "a2"})).await;
    push(&gw, json!({"to": "*", "data": "b2"})).await;
    let missed = vec![json!("a1"), json!("b1"), json!("a2"), json!("b2")];

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
        let held = gw.state.inspect();
        assert_eq!(
            (held.connections, held.users),
            (0, 0),
            "{transport:?}: nothing stays attached: {held:?}"
        );
    }
    let metrics = gw.metrics().await;
    for transport in ["ws", "poll", "sse"] {
        let series = format!("pushgate_resumes_refused_total{{transport=\"{transport}\"}}");
        assert_eq!(metric(&metrics, &series), Some(1.0), "{series}");
    }

    // A PING answers once the pause is over.
    assert_eq!(redis_command(server.port, "PING", PAUSE + WAIT), "+PONG");

    // The attach's presence was undone by the release: alice is nowhere.
    let auth = format!("Bearer {API_KEY}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let resp = gw
            .request(Method::GET, "/users/alice", &[("authorization", &auth)], "")
            .await;
        let body = resp.json();
        if resp.status == 200 && body["connections"] == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "alice still counted present: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

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
