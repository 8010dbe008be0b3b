//! Slow clients cannot hold a connection: request headers trickled in are
//! cut at `[server] header_timeout_secs`, a `POST /push` body trickled in
//! is answered `408 request_timeout` at `[server] body_timeout_secs` and
//! the connection closed.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{API_KEY, Gateway, config, raw_status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads what the server sends until it closes the connection.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server closed the connection in time");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Writes `bytes` one at a time, `every` apart, until the server closes the
/// connection (a write fails) or they run out; returns how many went out.
async fn trickle(stream: &mut TcpStream, bytes: &[u8], every: Duration) -> usize {
    for (sent, byte) in bytes.iter().enumerate() {
        if stream.write_all(&[*byte]).await.is_err() {
            return sent;
        }
        let mut probe = [0u8; 1];
        match tokio::time::timeout(every, stream.peek(&mut probe)).await {
            Err(_) => {}
            Ok(_) => return sent + 1,
        }
    }
    bytes.len()
}

fn push_head(addr: SocketAddr, length: usize) -> String {
    format!(
        "POST /push HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
}

#[tokio::test]
async fn headers_trickled_one_byte_a_second_are_cut_at_the_header_timeout() {
    let mut config = config();
    config.server.header_timeout_secs = 2;
    let gw = Gateway::start(config).await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let began = Instant::now();
    let head = format!(
        "GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Slow: {}\r\n\r\n",
        gw.addr,
        "a".repeat(64)
    );
    let sent = trickle(&mut stream, head.as_bytes(), Duration::from_secs(1)).await;
    let answer = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    let took = began.elapsed();
    assert!(sent < head.len(), "cut before the headers were complete");
    assert!(!answer.contains(" 200 "), "never served: {answer:?}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "cut at the 2 s header timeout, took {took:?}"
    );
    // The gateway still serves everyone else.
    let ok = gw
        .request(hyper::Method::GET, "/healthz", &[], bytes::Bytes::new())
        .await;
    assert_eq!(ok.status, 200);
}

#[tokio::test]
async fn a_silent_connection_is_closed_at_the_header_timeout() {
    let mut config = config();
    config.server.header_timeout_secs = 1;
    let gw = Gateway::start(config).await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let began = Instant::now();
    let answer = read_until_closed(&mut stream, Duration::from_secs(4)).await;
    assert_eq!(answer, "", "closed without an answer");
    assert!(began.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn a_push_body_trickled_in_is_answered_408_and_closed() {
    let mut config = config();
    config.server.body_timeout_secs = 1;
    let gw = Gateway::start(config).await;
    let body = json!({"to": "*", "data": {"text": "x".repeat(200)}}).to_string();
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream
        .write_all(push_head(gw.addr, body.len()).as_bytes())
        .await
        .expect("head");
    let began = Instant::now();
    let sent = trickle(&mut stream, body.as_bytes(), Duration::from_millis(100)).await;
    let answer = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    let took = began.elapsed();

    assert!(sent < body.len(), "cut before the body was complete");
    assert_eq!(raw_status(&answer), 408, "{answer}");
    let (head, json) = answer.split_once("\r\n\r\n").expect("head and body");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    let json: serde_json::Value = serde_json::from_str(json).expect("JSON");
    assert_eq!(json["error"]["code"], "request_timeout");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "answered at the 1 s body timeout, took {took:?}"
    );
    let metrics = gw.metrics().await;
    let series = r#"pushgate_requests_refused_total{code="request_timeout"}"#;
    assert!(
        support::ws::metric(&metrics, series).is_some_and(|n| n >= 1.0),
        "{series} counted"
    );
}

#[tokio::test]
async fn a_push_body_sent_in_pieces_within_the_timeout_is_accepted() {
    let mut config = config();
    config.server.body_timeout_secs = 3;
    let gw = Gateway::start(config).await;
    let body = json!({"to": "*", "data": {"n": 1}}).to_string();
    let (first, rest) = body.split_at(body.len() / 2);
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let head = push_head(gw.addr, body.len()).replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("head");
    stream
        .write_all(first.as_bytes())
        .await
        .expect("first half");
    // The client's own pacing (a body in two pieces 500 ms apart, within
    // the 3 s body timeout), not a wait for the gateway.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stream
        .write_all(rest.as_bytes())
        .await
        .expect("second half");
    let answer = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert_eq!(raw_status(&answer), 202, "{answer}");
}
