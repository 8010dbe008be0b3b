//! The front door (`server::front`): long-polls and SSE streams on plain
//! TCP are served on the raw socket, as hyper would serve them: keep-alive,
//! pipelined requests, `Connection: close`, a hand-over to hyper for any
//! other request on the same connection, and a parked poll released when
//! its client leaves.

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Gateway, token};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

/// One HTTP answer read off a raw connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// A client on one raw TCP connection, reading answers with a
/// `content-length` in order.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(gw: &Gateway) -> Self {
        let stream = TcpStream::connect(gw.addr).await.expect("connect");
        Self::on(stream)
    }

    /// A client whose socket takes little at a time (a small receive
    /// buffer), so big answers reach the server's socket in parts.
    async fn connect_narrow(gw: &Gateway) -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("rcvbuf");
        Self::on(socket.connect(gw.addr).await.expect("connect"))
    }

    fn on(stream: TcpStream) -> Self {
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, text: &str) {
        self.stream
            .write_all(text.as_bytes())
            .await
            .expect("request written");
    }

    /// Reads more into the buffer; false at the end of the stream.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        let n = timeout(Duration::from_secs(10), self.stream.read(&mut chunk))
            .await
            .expect("the server answered in time")
            .unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    /// The next whole answer (with a `content-length` body).
    async fn answer(&mut self) -> Answer {
        loop {
            let mut slots = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut slots);
            if let httparse::Status::Complete(len) = resp.parse(&self.buf).expect("HTTP") {
                let headers: Vec<(String, String)> = resp
                    .headers
                    .iter()
                    .map(|h| {
                        let value = String::from_utf8_lossy(h.value).into_owned();
                        (h.name.to_ascii_lowercase(), value)
                    })
                    .collect();
                let status = resp.code.expect("a status");
                let length: usize = headers
                    .iter()
                    .find(|(n, _)| n == "content-length")
                    .map(|(_, v)| v.parse().expect("a length"))
                    .expect("a content-length");
                while self.buf.len() < len + length {
                    assert!(self.fill().await, "closed amid a body");
                }
                let body = self.buf[len..len + length].to_vec();
                self.buf.drain(..len + length);
                return Answer {
                    status,
                    headers,
                    body,
                };
            }
            assert!(self.fill().await, "closed before an answer");
        }
    }

    /// Waits until the server closes the connection, with nothing more
    /// sent.
    async fn closed(&mut self) {
        assert!(!self.fill().await, "closed, nothing more: {:?}", self.buf);
        assert!(self.buf.is_empty(), "unread: {:?}", self.buf);
    }
}

fn poll_request(user: &str, extra: &str) -> String {
    format!(
        "GET /poll?token={} HTTP/1.1\r\nHost: x\r\n{extra}\r\n",
        token(user, 3600)
    )
}

/// Waits until `user` has a parked poll.
async fn parked(gw: &Gateway, user: &str, count: usize) {
    let began = Instant::now();
    loop {
        let polls = gw
            .state
            .user(&pushgate::protocol::UserId::parse(user).expect("a user id"))
            .map_or(0, |u| u.connections);
        if polls == count {
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{user}: {polls} parked polls, want {count}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls as `user` on `client`, and once the poll is parked pushes `text`
/// to `user`: the answer.
async fn polled(gw: &Gateway, client: &mut Client, user: &str, text: &str) -> Answer {
    client.send(&poll_request(user, "")).await;
    parked(gw, user, 1).await;
    push_to(gw, user, text).await;
    client.answer().await
}

async fn push_to(gw: &Gateway, user: &str, text: &str) {
    let resp = gw
        .push(&json!({"to": [user], "data": {"text": text}}))
        .await;
    assert_eq!(resp.status, 202, "{:?}", resp.json());
}

fn texts(answer: &Answer) -> Vec<String> {
    answer
        .json()
        .as_array()
        .expect("an array of frames")
        .iter()
        .filter(|f| f["type"] == "message")
        .map(|f| f["data"]["text"].as_str().expect("text").to_owned())
        .collect()
}

#[tokio::test]
async fn polls_on_one_connection_then_another_request_handed_to_hyper() {
    let gw = Gateway::default().await;
    let mut client = Client::connect(&gw).await;
    for round in 0..3 {
        let answer = polled(&gw, &mut client, "ann", &format!("m{round}")).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("content-type"), Some("application/json"));
        assert_eq!(answer.header("cache-control"), Some("no-store"));
        assert!(answer.header("date").is_some(), "{:?}", answer.headers);
        assert_eq!(answer.header("connection"), None, "kept alive");
        assert_eq!(texts(&answer), [format!("m{round}")]);
    }
    // Another endpoint on the same connection: hyper answers it, and the
    // connection serves polls on after that.
    client
        .send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    assert_eq!(client.answer().await.status, 200);
    parked(&gw, "ann", 0).await;
    let after = polled(&gw, &mut client, "ann", "after").await;
    assert_eq!(texts(&after), ["after"]);
}

#[tokio::test]
async fn an_answer_bigger_than_the_socket_buffer_arrives_whole() {
    let mut config = support::config();
    config.limits.max_push_bytes = 16 << 20;
    let gw = Gateway::start(config).await;
    let mut client = Client::connect_narrow(&gw).await;
    // The socket takes the answer in parts, as the client reads.
    let big = "z".repeat(8 << 20);
    let answer = polled(&gw, &mut client, "fay", &big).await;
    assert_eq!(answer.status, 200);
    assert_eq!(texts(&answer), [big]);
    parked(&gw, "fay", 0).await;
    // The connection goes on with the next poll.
    let next = polled(&gw, &mut client, "fay", "small").await;
    assert_eq!(texts(&next), ["small"]);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let gw = Gateway::default().await;
    let mut client = Client::connect(&gw).await;
    let bad = "GET /poll?token=nope HTTP/1.1\r\nHost: x\r\n\r\n";
    let health = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    client
        .send(&format!("{bad}{}{health}", poll_request("bo", "")))
        .await;
    let refused = client.answer().await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.json()["error"]["code"], "unauthorized");
    parked(&gw, "bo", 1).await;
    push_to(&gw, "bo", "hello").await;
    assert_eq!(texts(&client.answer().await), ["hello"]);
    assert_eq!(client.answer().await.status, 200, "the health check after");
}

#[tokio::test]
async fn connection_close_is_honoured() {
    let gw = Gateway::default().await;
    let mut client = Client::connect(&gw).await;
    client
        .send(&poll_request("cy", "Connection: close\r\n"))
        .await;
    parked(&gw, "cy", 1).await;
    push_to(&gw, "cy", "bye").await;
    let answer = client.answer().await;
    assert_eq!(answer.header("connection"), Some("close"));
    assert_eq!(texts(&answer), ["bye"]);
    client.closed().await;
}

/// A poll the fan-out answered (on a connection kept alive) is released
/// when its task next wakes: when the client leaves, or when the user
/// polls again on another connection (the poll timeout is far away here).
#[tokio::test]
async fn an_answered_poll_is_released_when_its_client_leaves_or_polls_elsewhere() {
    let gw = quiet_gateway().await;
    let mut client = Client::connect(&gw).await;
    assert_eq!(texts(&polled(&gw, &mut client, "al", "a").await), ["a"]);
    drop(client);
    parked(&gw, "al", 0).await;
    // `polled` waits for exactly one parked poll of the user: the one
    // answered on the first connection is gone when the second parks.
    let mut first = Client::connect(&gw).await;
    assert_eq!(texts(&polled(&gw, &mut first, "bo", "b").await), ["b"]);
    let mut second = Client::connect(&gw).await;
    assert_eq!(texts(&polled(&gw, &mut second, "bo", "c").await), ["c"]);
    // The first connection still serves polls.
    assert_eq!(texts(&polled(&gw, &mut first, "bo", "d").await), ["d"]);
}

/// A client that keeps the connection after its answer and says nothing:
/// its poll is released at the poll's deadline, and the connection still
/// serves the next poll.
#[tokio::test]
async fn an_answered_poll_whose_client_stays_silent_is_released_at_its_deadline() {
    let mut config = support::config();
    config.session.poll_timeout_secs = 1;
    let gw = Gateway::start(config).await;
    let mut client = Client::connect(&gw).await;
    assert_eq!(texts(&polled(&gw, &mut client, "cy", "e").await), ["e"]);
    let what = "no poll held within 4 s of the answer (deadline 1 s)";
    let gw = &gw;
    support::ws::until_eq(Duration::from_secs(4), what, &0, || async move {
        gw.state.inspect().by_transport[1]
    })
    .await;
    assert_eq!(texts(&polled(gw, &mut client, "cy", "f").await), ["f"]);
}

#[tokio::test]
async fn a_client_that_leaves_a_parked_poll_releases_it() {
    let gw = Gateway::default().await;
    let mut client = Client::connect(&gw).await;
    client.send(&poll_request("di", "")).await;
    parked(&gw, "di", 1).await;
    drop(client);
    parked(&gw, "di", 0).await;
}

#[tokio::test]
async fn an_event_stream_is_chunked_and_carries_events() {
    let gw = Gateway::default().await;
    let mut client = Client::connect(&gw).await;
    client
        .send(&format!(
            "GET /sse?token={} HTTP/1.1\r\nHost: x\r\n\r\n",
            token("eve", 3600)
        ))
        .await;
    parked(&gw, "eve", 1).await;
    push_to(&gw, "eve", "streamed").await;
    let want = "\"text\":\"streamed\"";
    while !String::from_utf8_lossy(&client.buf).contains(want) {
        assert!(client.fill().await, "closed: {:?}", client.buf);
    }
    let text = String::from_utf8_lossy(&client.buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("content-type: text/event-stream"), "{head}");
    assert!(lower.contains("transfer-encoding: chunked"), "{head}");
    // Chunks: size line, data, CRLF; the first is the retry field.
    assert!(body.starts_with("d\r\nretry: 1000\n\n\r\n"), "{body:?}");
    assert!(body.contains("event: message\n"), "{body:?}");
    drop(client);
    parked(&gw, "eve", 0).await;
}

/// How a client leaves a parked poll or an open stream.
#[derive(Debug, Clone, Copy)]
enum Leaving {
    /// `SO_LINGER` 0, then close: the kernel sends a reset.
    Reset,
    /// Close: the kernel sends a FIN.
    Close,
}

/// A gateway whose pings and poll timeout are far away, so a connection
/// released in time was released because its client left.
async fn quiet_gateway() -> Gateway {
    let mut config = support::config();
    config.session.ping_interval_secs = 100;
    config.session.idle_timeout_secs = 200;
    config.session.poll_timeout_secs = 100;
    config.session.session_ttl_secs = 200;
    Gateway::start(config).await
}

/// Waits until the gateway holds no connection, well within a ping
/// interval or a poll timeout.
async fn released(gw: &Gateway, what: &str) {
    let began = Instant::now();
    while gw.state.inspect().connections > 0 {
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "{what}: still held {:?} after the client left",
            began.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the gateway has read everything `client` sent: nothing
/// unacknowledged on the client's socket, nothing unread on the gateway's
/// (Linux: `tx_queue` and `rx_queue` in `/proc/net/tcp`).
async fn read_by_gateway(gw: &Gateway, client: &Client) {
    let (server, client) = (
        gw.addr.port(),
        client.stream.local_addr().expect("local addr").port(),
    );
    let began = Instant::now();
    loop {
        let (unsent, _) = tcp_queues(client, server);
        let (_, unread) = tcp_queues(server, client);
        if unsent == 0 && unread == 0 {
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "after {:?}: {unsent} bytes not yet at the gateway, {unread} unread by it",
            began.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `(tx_queue, rx_queue)` of the IPv4 socket from local port `local` to
/// remote port `remote`, from `/proc/net/tcp`.
fn tcp_queues(local: u16, remote: u16) -> (u64, u64) {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp (Linux)");
    let port = |addr: &str| {
        let (_, hex) = addr.rsplit_once(':')?;
        u16::from_str_radix(hex, 16).ok()
    };
    let hex = |n: &str| u64::from_str_radix(n, 16).expect("a hex queue size");
    table
        .lines()
        .skip(1)
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let mine = port(fields[1]) == Some(local) && port(fields[2]) == Some(remote);
            let (tx, rx) = fields[4].split_once(':')?;
            mine.then(|| (hex(tx), hex(rx)))
        })
        .unwrap_or_else(|| panic!("no socket :{local} -> :{remote} in /proc/net/tcp"))
}

/// Opens `request` (a poll or a stream) for `user`, waits until it is
/// parked, sends `junk` behind it, and leaves as `leaving` says.
async fn park_then_leave(gw: &Gateway, request: &str, user: &str, junk: usize, leaving: Leaving) {
    let mut client = Client::connect(gw).await;
    client.send(request).await;
    parked(gw, user, 1).await;
    if junk > 0 {
        client.send(&"j".repeat(junk)).await;
        // Leave only once the gateway has read all of it (a reset would
        // otherwise drop unread junk in the kernel, and the gateway would
        // never meet it).
        read_by_gateway(gw, &client).await;
    }
    if let Leaving::Reset = leaving {
        client.stream.set_zero_linger().expect("so_linger 0");
    }
    drop(client);
}

#[tokio::test]
async fn a_parked_poll_is_released_as_soon_as_its_client_leaves_even_behind_junk() {
    let gw = quiet_gateway().await;
    for (junk, leaving) in [
        (0, Leaving::Reset),
        (40 << 10, Leaving::Reset),
        (40 << 10, Leaving::Close),
    ] {
        let what = format!("poll, {junk} bytes behind it, {leaving:?}");
        park_then_leave(&gw, &poll_request("gus", ""), "gus", junk, leaving).await;
        released(&gw, &what).await;
    }
}

#[tokio::test]
async fn an_event_stream_is_released_as_soon_as_its_client_leaves_even_behind_junk() {
    let gw = quiet_gateway().await;
    let request = format!(
        "GET /sse?token={} HTTP/1.1\r\nHost: x\r\n\r\n",
        token("hal", 3600)
    );
    for (junk, leaving) in [
        (0, Leaving::Reset),
        (40 << 10, Leaving::Reset),
        (40 << 10, Leaving::Close),
    ] {
        let what = format!("stream, {junk} bytes behind it, {leaving:?}");
        park_then_leave(&gw, &request, "hal", junk, leaving).await;
        released(&gw, &what).await;
    }
}
