//! Helpers for the `ws_*` tests: hand-made handshakes and frames over a raw
//! TCP socket, clients with extra headers, metric lookups, and waiting for
//! a condition with a generous upper bound.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use super::{Gateway, Ws};

/// A test configuration that allows browsers from `https://shop.example`
/// only: what the origin checks are tested against.
pub(crate) fn shop_only() -> pushgate::config::Config {
    let mut c = super::config();
    c.auth.allowed_origins = vec!["https://shop.example".into()];
    c
}

/// The RFC 6455 example key, and the accept value it must produce.
pub(crate) const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
/// `Sec-WebSocket-Accept` for [`KEY`].
pub(crate) const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// WebSocket opcodes, for raw frames.
pub(crate) mod opcode {
    /// Continuation frame.
    pub(crate) const CONTINUATION: u8 = 0x0;
    /// Text frame.
    pub(crate) const TEXT: u8 = 0x1;
    /// Binary frame.
    pub(crate) const BINARY: u8 = 0x2;
    /// Close frame.
    pub(crate) const CLOSE: u8 = 0x8;
    /// Ping frame.
    pub(crate) const PING: u8 = 0x9;
    /// Pong frame.
    pub(crate) const PONG: u8 = 0xA;
}

/// A hand-made upgrade request: the usual handshake headers, minus the
/// ones named in `omit`, plus `extra` (which replace same-named defaults).
pub(crate) fn upgrade_request(
    method: &str,
    target: &str,
    extra: &[(&str, &str)],
    omit: &[&str],
) -> String {
    let defaults = [
        ("Host", "127.0.0.1"),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", KEY),
    ];
    let mut request = format!("{method} {target} HTTP/1.1\r\n");
    for (name, value) in defaults {
        let replaced = extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let omitted = omit.iter().any(|n| n.eq_ignore_ascii_case(name));
        if !replaced && !omitted {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    for (name, value) in extra {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request
}

/// The server's answer to a hand-made request, and the socket it came on
/// (after a `101`, a raw WebSocket).
pub(crate) struct RawAnswer {
    /// Status code.
    pub status: u16,
    /// Headers, names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (`Content-Length` bytes; empty after a `101`).
    pub body: Vec<u8>,
    /// The connection, with whatever was read past the answer.
    pub ws: RawWs,
}

impl std::fmt::Debug for RawAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawAnswer")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish()
    }
}

impl RawAnswer {
    /// The first value of header `name` (case-insensitive).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// The `error.code` of a JSON error body.
    pub(crate) fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error.code: {self:?}"))
            .to_owned()
    }
}

/// Sends `request` on a new TCP connection and reads the answer's head
/// (and body, unless it is a `101`), within 10 s.
pub(crate) async fn raw_handshake(addr: SocketAddr, request: &str) -> RawAnswer {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("tcp connect");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("request written");
        let mut buf = Vec::new();
        let head_end = loop {
            if let Some(at) = find(&buf, b"\r\n\r\n") {
                break at;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.expect("read answer");
            assert!(
                n > 0,
                "connection closed before an answer: {:?}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(buf[..head_end].to_vec()).expect("ASCII head");
        let mut rest = buf[head_end + 4..].to_vec();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP answer: {head:?}"));
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let mut body = Vec::new();
        if status != 101 {
            let len: usize = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            while rest.len() < len {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.expect("read body");
                assert!(n > 0, "connection closed inside the body");
                rest.extend_from_slice(&chunk[..n]);
            }
            body = rest.drain(..len).collect();
        }
        RawAnswer {
            status,
            headers,
            body,
            ws: RawWs { stream, buf: rest },
        }
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("handshake answered in time")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A WebSocket client written by hand over TCP: exact bytes out, every
/// frame in (nothing answered automatically).
pub(crate) struct RawWs {
    /// The socket.
    pub stream: TcpStream,
    buf: Vec<u8>,
}

/// One frame from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawFrame {
    /// FIN bit.
    pub fin: bool,
    /// The opcode.
    pub opcode: u8,
    /// The payload (servers do not mask).
    pub payload: Vec<u8>,
}

impl RawFrame {
    /// A text frame's payload as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// A close frame's status code.
    pub(crate) fn close_code(&self) -> Option<u16> {
        (self.payload.len() >= 2).then(|| u16::from_be_bytes([self.payload[0], self.payload[1]]))
    }
}

/// A masked client frame (`fin` set).
pub(crate) fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    frame(true, 0, opcode, true, payload)
}

/// A masked close frame whose payload is `code` and `reason`.
pub(crate) fn client_close(code: u16, reason: &[u8]) -> Vec<u8> {
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(reason);
    client_frame(opcode::CLOSE, &payload)
}

/// A client frame with every header bit chosen: `fin`, `rsv` (the three
/// reserved bits, as `0b0xxx_0000`), the opcode, masked or not; the
/// shortest length encoding.
pub(crate) fn frame(fin: bool, rsv: u8, opcode: u8, masked: bool, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![u8::from(fin) << 7 | rsv | opcode];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n <= 0xffff => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

impl RawWs {
    /// Writes bytes as they are.
    pub(crate) async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("raw write");
    }

    /// Writes one masked frame.
    pub(crate) async fn send(&mut self, opcode: u8, payload: &[u8]) {
        self.send_raw(&client_frame(opcode, payload)).await;
    }

    /// The next frame within `limit` (`Err` if none came in time): `None`
    /// once the server closed the TCP connection (or reset it).
    pub(crate) async fn try_next_frame(
        &mut self,
        limit: Duration,
    ) -> Result<Option<RawFrame>, tokio::time::error::Elapsed> {
        tokio::time::timeout(limit, self.read_frame()).await
    }

    /// The next frame within `limit`; `None` once the server closed the
    /// TCP connection (or reset it).
    pub(crate) async fn next_frame(&mut self, limit: Duration) -> Option<RawFrame> {
        tokio::time::timeout(limit, self.read_frame())
            .await
            .expect("a frame or EOF in time")
    }

    async fn fill(&mut self, want: usize) -> bool {
        while self.buf.len() < want {
            let mut chunk = vec![0u8; 64 * 1024];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
        true
    }

    async fn read_frame(&mut self) -> Option<RawFrame> {
        if !self.fill(2).await {
            return None;
        }
        let (b0, b1) = (self.buf[0], self.buf[1]);
        assert_eq!(b1 & 0x80, 0, "server frames are not masked");
        let (header, len) = match b1 & 0x7f {
            126 => {
                if !self.fill(4).await {
                    return None;
                }
                (4, u16::from_be_bytes([self.buf[2], self.buf[3]]) as usize)
            }
            127 => {
                if !self.fill(10).await {
                    return None;
                }
                let mut be = [0u8; 8];
                be.copy_from_slice(&self.buf[2..10]);
                (10, u64::from_be_bytes(be) as usize)
            }
            n => (2, n as usize),
        };
        if !self.fill(header + len).await {
            return None;
        }
        let frame: Vec<u8> = self.buf.drain(..header + len).collect();
        Some(RawFrame {
            fin: b0 & 0x80 != 0,
            opcode: b0 & 0x0f,
            payload: frame[header..].to_vec(),
        })
    }

    /// Reads frames until a close frame (returned last) or EOF, within
    /// `limit` overall.
    pub(crate) async fn frames_until_close(&mut self, limit: Duration) -> Vec<RawFrame> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut frames = Vec::new();
        loop {
            let frame = tokio::time::timeout_at(deadline, self.read_frame())
                .await
                .expect("closed in time");
            match frame {
                Some(frame) if frame.opcode == opcode::CLOSE => {
                    frames.push(frame);
                    return frames;
                }
                Some(frame) => frames.push(frame),
                None => return frames,
            }
        }
    }
}

impl Gateway {
    /// Completes a hand-made handshake for `user` and returns the raw
    /// WebSocket.
    pub(crate) async fn connect_raw(&self, user: &str) -> RawWs {
        let target = format!("/ws?token={}", super::token(user, 3600));
        let answer = raw_handshake(self.addr, &upgrade_request("GET", &target, &[], &[])).await;
        assert_eq!(answer.status, 101, "{answer:?}");
        answer.ws
    }

    /// Connects a tokio-tungstenite client to `/ws?<query>` with extra
    /// request headers; the handshake's error as is.
    pub(crate) async fn try_connect(
        &self,
        query: &str,
        headers: &[(&str, &str)],
    ) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
        let mut request = self
            .ws_url(query)
            .into_client_request()
            .expect("valid ws URL");
        for (name, value) in headers {
            let name: tokio_tungstenite::tungstenite::http::HeaderName =
                name.parse().expect("header name");
            request
                .headers_mut()
                .insert(name, HeaderValue::from_str(value).expect("header value"));
        }
        tokio_tungstenite::connect_async(request)
            .await
            .map(|(ws, _)| ws)
    }
}

/// The value of one series (`name{labels}` exactly as rendered) in
/// Prometheus text, if present.
pub(crate) fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
}

/// Polls `check` every 20 ms until it is true; panics naming `what` after
/// `limit`.
pub(crate) async fn eventually<F, Fut>(limit: Duration, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_eq(limit, what, &true, check).await;
}

/// Asks `probe` every 20 ms until it answers `Ok`, and returns that; after
/// `limit`, panics naming `what` and the last `Err` (what was seen
/// instead).
pub(crate) async fn until_ok<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let seen = match probe().await {
            Ok(done) => return done,
            Err(seen) => seen,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {limit:?}: {what} (last seen: {seen})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`until_ok`] for a probe whose answer must equal `want`: after `limit`,
/// panics naming `what` and the last answer.
pub(crate) async fn until_eq<T, F, Fut>(limit: Duration, what: &str, want: &T, mut probe: F)
where
    T: PartialEq + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    until_ok(limit, what, || {
        let answer = probe();
        async move {
            match answer.await {
                got if got == *want => Ok(()),
                got => Err(got.to_string()),
            }
        }
    })
    .await;
}

/// An unsigned token (`alg: none`) for `user`, valid for an hour.
pub(crate) fn alg_none_token(user: &str) -> String {
    use base64::Engine as _;
    let b64 = |v: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let exp = pushgate::gateway::Gateway::unix_now() + 3600;
    format!(
        "{}.{}.",
        b64(serde_json::json!({"alg": "none", "typ": "JWT"})),
        b64(serde_json::json!({"sub": user, "exp": exp}))
    )
}

/// A token for `user` signed with `secret` (not the gateway's), expiring
/// at `exp` (seconds since the epoch).
pub(crate) fn token_with(secret: &[u8], user: &str, exp: u64) -> String {
    let user = pushgate::protocol::UserId::parse(user).expect("valid user id");
    pushgate::auth::token::mint(secret, &user, exp)
}
