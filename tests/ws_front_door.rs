//! The WebSocket handshake on plain TCP: the front door (`server::front`)
//! answers `GET /ws` itself and serves the WebSocket on its own socket.
//! hyper still answers the handshake over TLS and on a connection it
//! already serves (one whose first request was for another endpoint), so
//! both must answer alike: each handshake below is sent both ways, and
//! the answers (status line, headers in order, body; all but `date`) and
//! what the connection does next must be the same.

mod support;

use std::time::Duration;

use support::ws::{client_frame, opcode, shop_only, upgrade_request};
use support::{Gateway, config, token};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

/// A request hyper serves, which keeps the connection open.
const HEALTHZ: &str = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// The origin the test gateway allows.
const ORIGIN: (&str, &str) = ("Origin", "https://shop.example");

/// An answer as a client reads it.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    /// The status line, then each header line as sent, but `date` (it
    /// moves by the second).
    head: Vec<String>,
    /// The body (`content-length` bytes; none after a `101`).
    body: String,
}

impl Answer {
    fn status(&self) -> &str {
        self.head[0].split(' ').nth(1).unwrap_or("")
    }
}

/// A client connection, with what it read past the last answer.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    /// A new connection: its first request is the front door's.
    async fn front(gw: &Gateway) -> Self {
        let stream = TcpStream::connect(gw.addr).await.expect("tcp connect");
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    /// A connection hyper serves: the front door handed it over at its
    /// first request (`/healthz`).
    async fn hyper(gw: &Gateway) -> Self {
        let mut client = Self::front(gw).await;
        client.send(HEALTHZ.as_bytes()).await;
        let answer = client.answer().await.expect("healthz answered");
        assert_eq!(answer.status(), "200", "{answer:?}");
        client
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Reads until `buf` holds `want` bytes; false if the connection ended.
    async fn fill(&mut self, want: usize) -> bool {
        while self.buf.len() < want {
            let mut chunk = [0u8; 4096];
            let read = tokio::time::timeout(WAIT, self.stream.read(&mut chunk))
                .await
                .expect("read in time");
            match read {
                Ok(0) | Err(_) => return false,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
        true
    }

    /// The next answer, or `None` if the connection closed first.
    async fn answer(&mut self) -> Option<Answer> {
        let end = loop {
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at;
            }
            let want = self.buf.len() + 1;
            if !self.fill(want).await {
                return None;
            }
        };
        let text = String::from_utf8(self.buf[..end].to_vec()).expect("ASCII head");
        self.buf.drain(..end + 4);
        let head: Vec<String> = text
            .split("\r\n")
            .filter(|line| !line.to_ascii_lowercase().starts_with("date:"))
            .map(str::to_owned)
            .collect();
        let length = head
            .iter()
            .find_map(|line| {
                line.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().expect("a length"))
            })
            .unwrap_or(0);
        let mut answer = Answer {
            head,
            body: String::new(),
        };
        if answer.status() != "101" {
            assert!(self.fill(length).await, "closed inside the body");
            answer.body = String::from_utf8_lossy(&self.buf[..length]).into_owned();
            self.buf.drain(..length);
        }
        Some(answer)
    }

    /// The next WebSocket text frame's payload (frames of other kinds are
    /// skipped), or `None` if the connection closed.
    async fn text_frame(&mut self) -> Option<String> {
        loop {
            if !self.fill(2).await {
                return None;
            }
            let (op, len) = (self.buf[0] & 0x0f, usize::from(self.buf[1] & 0x7f));
            assert!(len < 126, "a short frame");
            if !self.fill(2 + len).await {
                return None;
            }
            let payload: Vec<u8> = self.buf.drain(..2 + len).skip(2).collect();
            if op == opcode::TEXT {
                return Some(String::from_utf8(payload).expect("UTF-8 text"));
            }
        }
    }
}

/// Sends `request` on a connection of each kind and checks both answer
/// alike, then go on alike: a refused handshake's connection serves the
/// next request (or closes) as hyper's does; an upgraded one answers a
/// ping. Returns the front door's answer.
async fn same_on_both(gw: &Gateway, name: &str, request: &str) -> Answer {
    let mut front = Client::front(gw).await;
    let mut hyper = Client::hyper(gw).await;
    front.send(request.as_bytes()).await;
    hyper.send(request.as_bytes()).await;
    let answered = front.answer().await.expect("the front door answered");
    let by_hyper = hyper.answer().await.expect("hyper answered");
    assert_eq!(answered, by_hyper, "{name}: the front door against hyper");
    let ping = client_frame(opcode::TEXT, br#"{"type":"ping"}"#);
    if answered.status() == "101" {
        front.send(&ping).await;
        hyper.send(&ping).await;
        let pong = front.text_frame().await.expect("a pong on the front door");
        assert_eq!(pong, r#"{"type":"pong"}"#, "{name}");
        assert_eq!(Some(pong), hyper.text_frame().await, "{name}");
    } else {
        front.send(HEALTHZ.as_bytes()).await;
        hyper.send(HEALTHZ.as_bytes()).await;
        let next = front.answer().await;
        assert_eq!(next, hyper.answer().await, "{name}: the next request");
        assert_eq!(
            next.as_ref().map(Answer::status),
            Some("200"),
            "{name}: a refused handshake keeps the connection, as hyper does"
        );
    }
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_handshake_is_answered_on_the_front_door_as_hyper_answers_it() {
    let gw = Gateway::start(shop_only()).await;
    let good = format!("/ws?token={}", token("alice", 60));
    let cases: Vec<(&str, String, u16)> = vec![
        (
            "upgraded",
            upgrade_request("GET", &good, &[ORIGIN], &[]),
            101,
        ),
        (
            "version 8",
            upgrade_request("GET", &good, &[ORIGIN, ("Sec-WebSocket-Version", "8")], &[]),
            426,
        ),
        (
            "no key",
            upgrade_request("GET", &good, &[ORIGIN], &["Sec-WebSocket-Key"]),
            400,
        ),
        (
            "not an upgrade",
            upgrade_request("GET", &good, &[ORIGIN], &["Upgrade"]),
            400,
        ),
        (
            "bad token",
            upgrade_request("GET", "/ws?token=nope", &[ORIGIN], &[]),
            401,
        ),
        (
            "no token",
            upgrade_request("GET", "/ws", &[ORIGIN], &[]),
            401,
        ),
        (
            "foreign origin",
            upgrade_request("GET", &good, &[("Origin", "https://evil.example")], &[]),
            403,
        ),
        (
            "bad channel list",
            upgrade_request("GET", &format!("{good}&channels=a,,b"), &[ORIGIN], &[]),
            400,
        ),
        (
            "channel not public",
            upgrade_request("GET", &format!("{good}&channels=room"), &[ORIGIN], &[]),
            403,
        ),
        (
            "bad cursor",
            upgrade_request("GET", &format!("{good}&cursor=nope"), &[ORIGIN], &[]),
            400,
        ),
    ];
    for (name, request, status) in cases {
        let answer = same_on_both(&gw, name, &request).await;
        assert_eq!(answer.status(), status.to_string(), "{name}: {answer:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_over_capacity_gets_the_same_503_on_both_paths() {
    let mut c = shop_only();
    c.session.max_connections = 1;
    let gw = Gateway::start(c).await;
    let good = format!("/ws?token={}", token("alice", 60));
    let request = upgrade_request("GET", &good, &[ORIGIN], &[]);
    // The one connection there is room for.
    let mut held = Client::front(&gw).await;
    held.send(request.as_bytes()).await;
    let answer = held.answer().await.expect("upgraded");
    assert_eq!(answer.status(), "101", "{answer:?}");
    let refused = same_on_both(&gw, "over capacity", &request).await;
    assert_eq!(refused.status(), "503", "{refused:?}");
    assert!(
        refused
            .head
            .iter()
            .any(|line| line.eq_ignore_ascii_case("retry-after: 1")),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_sent_in_the_same_write_as_the_handshake_reaches_the_websocket() {
    let gw = Gateway::start(config()).await;
    let target = format!("/ws?token={}", token("alice", 60));
    let mut bytes = upgrade_request("GET", &target, &[], &[]).into_bytes();
    bytes.extend_from_slice(&client_frame(opcode::TEXT, br#"{"type":"ping"}"#));
    let mut client = Client::front(&gw).await;
    client.send(&bytes).await;
    let answer = client.answer().await.expect("an answer");
    assert_eq!(answer.status(), "101", "{answer:?}");
    assert_eq!(
        client.text_frame().await.as_deref(),
        Some(r#"{"type":"pong"}"#),
        "the ping behind the handshake was answered"
    );
}
