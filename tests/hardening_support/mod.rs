//! Shared by the `hardening_*` tests: the hardened test configuration, a
//! probe that proves the gateway still serves a normal client after each
//! bad-input case, raw TCP exchanges that tolerate resets, and the
//! expected outcome of a case.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use pushgate::config::Config;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{self, Gateway, Ws, next_json};

/// Upper bound on anything one case waits for.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// The only origin browsers may connect from in the hardening config.
pub(crate) const ALLOWED_ORIGIN: &str = "https://app.example";

/// The test configuration with every limit a case probes set low enough
/// to reach: headers within 2 s, bodies within 2 s, 10 users per push,
/// 4096-byte client frames, one allowed origin, no per-address limits (the
/// tests open many connections from 127.0.0.1).
pub(crate) fn hardened_config() -> Config {
    let mut c = support::config();
    c.server.header_timeout_secs = 2;
    c.server.body_timeout_secs = 2;
    c.limits.max_push_users = 10;
    c.limits.max_client_frame_bytes = 4096;
    c.limits.max_connections_per_ip = 0;
    c.limits.connection_rate_per_ip = 0;
    c.auth.allowed_origins = vec![ALLOWED_ORIGIN.to_owned()];
    c
}

/// A gateway and a well-behaved WebSocket client on it. After every case,
/// [`Probe::still_serves`] shows the gateway still answers `/healthz` on a
/// new connection and still delivers a broadcast to that client.
pub(crate) struct Probe {
    /// The gateway under test.
    pub gw: Gateway,
    bystander: Ws,
    checks: usize,
}

impl Probe {
    /// Starts a gateway with `config` and connects the bystander.
    pub(crate) async fn start(config: Config) -> Self {
        let gw = Gateway::start(config).await;
        let bystander = gw.connect("bystander").await;
        Self {
            gw,
            bystander,
            checks: 0,
        }
    }

    /// Where the gateway listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.gw.addr
    }

    /// How many cases were followed by a successful health check.
    pub(crate) fn checks(&self) -> usize {
        self.checks
    }

    /// Panics (naming `case`) unless `/healthz` answers 200 on a new
    /// connection and a broadcast pushed now reaches the bystander.
    pub(crate) async fn still_serves(&mut self, case: &str) {
        let health = support::browser::get(self.gw.addr, "/healthz", &[]).await;
        assert_eq!(health.status, 200, "{case}: /healthz after the case");
        let data = format!("alive after {case}");
        let pushed = self.gw.push(&json!({"to": "*", "data": data})).await;
        assert_eq!(pushed.status, 202, "{case}: push after the case");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{case}: bystander got no broadcast"
            );
            let frame = next_json(&mut self.bystander, WAIT).await;
            if frame["type"] == "message" && frame["data"] == data.as_str() {
                break;
            }
        }
        self.checks += 1;
    }
}

/// What a raw TCP exchange saw.
#[derive(Debug)]
pub(crate) struct Exchange {
    /// Everything the server sent (lossy UTF-8).
    pub text: String,
    /// Whether the server closed (or reset) the connection within the wait.
    pub closed: bool,
}

impl Exchange {
    /// The status of the first answer, if any.
    pub(crate) fn status(&self) -> Option<u16> {
        self.text
            .strip_prefix("HTTP/1.")?
            .split(' ')
            .nth(1)?
            .parse()
            .ok()
    }

    /// The statuses of every answer in the stream (pipelined requests).
    pub(crate) fn statuses(&self) -> Vec<u16> {
        self.text
            .match_indices("HTTP/1.")
            .filter_map(|(at, _)| self.text.get(at + 9..at + 12)?.parse().ok())
            .collect()
    }

    /// The `error.code` of the first answer's JSON body, if it has one.
    pub(crate) fn error_code(&self) -> Option<String> {
        let (head, rest) = self.text.split_once("\r\n\r\n")?;
        let len = content_length(head).unwrap_or(rest.len());
        let body: serde_json::Value = serde_json::from_str(rest.get(..len)?).ok()?;
        body["error"]["code"].as_str().map(str::to_owned)
    }
}

/// The `content-length` a response head (status line and headers) gives.
pub(crate) fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

/// Writes `chunks` on a new connection, pausing `gap` between them (a
/// refused write ends the writing; `half_close` then shuts the write
/// half), while reading until the server closes or `wait` passes.
pub(crate) async fn exchange(
    addr: SocketAddr,
    chunks: &[&[u8]],
    gap: Duration,
    half_close: bool,
    wait: Duration,
) -> Exchange {
    let stream = TcpStream::connect(addr).await.expect("tcp connect");
    let deadline = tokio::time::Instant::now() + wait;
    let (mut rd, mut wr) = stream.into_split();
    let write = async move {
        for (i, chunk) in chunks.iter().enumerate() {
            if i > 0 && !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            if wr.write_all(chunk).await.is_err() {
                break;
            }
        }
        if half_close {
            let _ = wr.shutdown().await;
        }
        // Keep the write half open (no FIN) until the reading is done.
        std::future::pending::<()>().await;
        drop(wr);
    };
    tokio::select! {
        got = read_until_closed(&mut rd, deadline) => got,
        () = write => unreachable!("the writer never finishes"),
    }
}

/// Reads until EOF, a reset or `deadline`.
pub(crate) async fn read_until_closed(
    stream: &mut (impl AsyncReadExt + Unpin),
    deadline: tokio::time::Instant,
) -> Exchange {
    let mut got = Vec::new();
    let closed = loop {
        let mut chunk = [0u8; 16 * 1024];
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => break false,
            Ok(Ok(0) | Err(_)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
        }
    };
    Exchange {
        text: String::from_utf8_lossy(&got).into_owned(),
        closed,
    }
}

/// What a case must end in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// An answer with this status and, when given, this JSON `error.code`.
    Status(u16, Option<&'static str>),
    /// An answer with one of these statuses, or the connection closed with
    /// no answer at all (malformed HTTP, where hyper's choice is its own).
    RefusedOrClosed(&'static [u16]),
    /// This many answers, each with this status (pipelined requests).
    Answers(usize, u16),
    /// The connection is closed, with at most an answer with one of these
    /// statuses, within the wait.
    ClosedWithin(&'static [u16]),
    /// Exactly these answers, in order, then the connection closed within
    /// the wait.
    Closes(&'static [u16]),
    /// Exactly these answers, in order, and the connection kept alive for
    /// the next request: the test sends one more, with `Connection:
    /// close`, which must be answered `200` on the same connection before
    /// the close it asked for.
    KeptOpen(&'static [u16]),
}

impl Expect {
    /// Whether `got` matches; the mismatch described otherwise.
    pub(crate) fn verdict(self, got: &Exchange) -> Result<(), String> {
        let fail = |why: &str| Err(format!("{why}, want {self:?}: {got:?}"));
        match self {
            Self::Status(status, code) => {
                if got.status() != Some(status) {
                    return fail("wrong status");
                }
                if code.is_some() && got.error_code().as_deref() != code {
                    return fail("wrong error code");
                }
            }
            Self::RefusedOrClosed(statuses) => match got.status() {
                Some(status) if !statuses.contains(&status) => return fail("wrong status"),
                None if !got.closed => return fail("neither answered nor closed"),
                _ => {}
            },
            Self::Answers(n, status) => {
                if got.statuses() != vec![status; n] {
                    return fail("wrong answers");
                }
            }
            Self::ClosedWithin(statuses) => {
                if !got.closed {
                    return fail("still open");
                }
                if got.status().is_some_and(|s| !statuses.contains(&s)) {
                    return fail("wrong status");
                }
            }
            Self::Closes(statuses) => {
                if got.statuses() != statuses {
                    return fail("wrong answers");
                }
                if !got.closed {
                    return fail("still open");
                }
            }
            Self::KeptOpen(statuses) => {
                if got.statuses() != [statuses, &[200]].concat() {
                    return fail("wrong answers (the last for the next request)");
                }
                if !got.closed {
                    return fail("still open after a request that asked for the close");
                }
            }
        }
        Ok(())
    }
}

/// Collects the cases whose outcome differs from the table, so one run
/// reports every mismatch.
#[derive(Debug, Default)]
pub(crate) struct Mismatches {
    cases: usize,
    differ: Vec<String>,
}

impl Mismatches {
    /// Records `case` if `verdict` is a mismatch.
    pub(crate) fn record(&mut self, case: &str, verdict: Result<(), String>) {
        self.cases += 1;
        if let Err(why) = verdict {
            self.differ.push(format!("{case}: {why}"));
        }
    }

    /// Prints a summary line for `table` and panics listing every
    /// mismatch, if any.
    pub(crate) fn assert_none(&self, table: &str) {
        println!(
            "catalogue {table}: {} cases, {} differ",
            self.cases,
            self.differ.len()
        );
        assert!(
            self.differ.is_empty(),
            "{} case(s) differ:\n{}",
            self.differ.len(),
            self.differ.join("\n")
        );
    }
}

/// JSON arrays nested `depth` deep around a `0`.
pub(crate) fn nested(depth: usize) -> String {
    format!("{}0{}", "[".repeat(depth), "]".repeat(depth))
}

/// `Authorization: Bearer <api key>` as a header line.
pub(crate) fn auth_line() -> String {
    format!("Authorization: Bearer {}\r\n", support::API_KEY)
}

/// A token for `user` with a fresh hour of validity (the user id is not
/// checked, so invalid ids can be signed too).
pub(crate) fn token_for_raw_sub(sub: serde_json::Value) -> String {
    let exp = pushgate::gateway::Gateway::unix_now() + 3600;
    signed(
        json!({"alg": "HS256", "typ": "JWT"}),
        json!({"sub": sub, "exp": exp}),
    )
}

/// A JWT with this header and these claims, MAC'd HS256 with the test
/// secret whatever the header says.
pub(crate) fn signed(header: serde_json::Value, claims: serde_json::Value) -> String {
    use base64::Engine as _;
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let message = format!("{}.{}", b64(&header), b64(&claims));
    let key = jsonwebtoken::EncodingKey::from_secret(support::SECRET.as_bytes());
    let mac = jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::HS256)
        .expect("hmac signing");
    format!("{message}.{mac}")
}
