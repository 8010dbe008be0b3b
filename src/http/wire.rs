//! HTTP/1.1 answers written on the raw socket (by the front door, for
//! long-polls and SSE streams), and the socket reads and writes they share
//! with the WebSocket task.
//!
//! The bytes are what hyper writes for the same response: status line,
//! the response's headers in lower case, `content-length` (or chunked
//! transfer for a stream, or neither for a `101`), `connection: close`
//! when the connection ends after it, and `date`.

use std::cell::RefCell;
use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::http::response::Parts;
use hyper::{Response, StatusCode, header};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::http::Body;

/// How the body of an answer is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Length {
    /// `content-length: N`.
    Fixed(usize),
    /// `transfer-encoding: chunked`: a stream, each write a chunk.
    Chunked,
    /// No body and no length: a `101`, after which the connection speaks
    /// another protocol.
    None,
}

/// The end of a chunked body.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The status line and headers of `parts`, with the framing headers
/// added: the length (or chunked transfer), `connection: close` if the
/// connection ends after it, and `date`.
pub(crate) fn response_head(parts: &Parts, length: Length, keep_alive: bool) -> BytesMut {
    let mut buf = BytesMut::with_capacity(256);
    put_status_line(&mut buf, parts.status);
    for (name, value) in &parts.headers {
        // The framing's own: `keep_alive` decides it (see [`asks_close`]).
        if name != header::CONNECTION {
            put_header(&mut buf, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    end_head(&mut buf, length, keep_alive);
    buf
}

/// Appends the status line for `status`.
fn put_status_line(buf: &mut BytesMut, status: StatusCode) {
    buf.put_slice(b"HTTP/1.1 ");
    buf.put_slice(status.as_str().as_bytes());
    buf.put_u8(b' ');
    buf.put_slice(status.canonical_reason().unwrap_or("").as_bytes());
    buf.put_slice(b"\r\n");
}

/// Whether an answer asks for its connection to end after it (`connection:
/// close`, as a `408` does): its writer must then pass `keep_alive` false,
/// and close.
pub(crate) fn asks_close(parts: &Parts) -> bool {
    parts.headers.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
    })
}

/// Ends a response head begun in `buf` (status line and the response's
/// own headers): the length (or chunked transfer), `connection: close` if
/// the connection ends after it, `date`, and the blank line.
pub(crate) fn end_head(buf: &mut BytesMut, length: Length, keep_alive: bool) {
    match length {
        Length::Fixed(n) => put_header(
            buf,
            b"content-length",
            itoa::Buffer::new().format(n).as_bytes(),
        ),
        Length::Chunked => put_header(buf, b"transfer-encoding", b"chunked"),
        Length::None => {}
    }
    if !keep_alive {
        put_header(buf, b"connection", b"close");
    }
    with_date(|date| put_header(buf, b"date", date));
    buf.put_slice(b"\r\n");
}

/// A whole answer with a fixed-length `body`.
pub(crate) fn response(parts: &Parts, body: &[u8], keep_alive: bool) -> Bytes {
    let mut buf = response_head(parts, Length::Fixed(body.len()), keep_alive);
    buf.put_slice(body);
    buf.freeze()
}

/// Appends `data` to `buf` as one chunk of a chunked body (nothing for no
/// data: an empty chunk would end the body).
pub(crate) fn put_chunk(buf: &mut BytesMut, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let mut size = [0u8; 16];
    let digits = hex_digits(data.len(), &mut size);
    buf.put_slice(digits);
    buf.put_slice(b"\r\n");
    buf.put_slice(data);
    buf.put_slice(b"\r\n");
}

/// `n` in lower-case hex, written at the end of `out`.
fn hex_digits(mut n: usize, out: &mut [u8; 16]) -> &[u8] {
    let mut at = out.len();
    loop {
        at -= 1;
        out[at] = b"0123456789abcdef"[n % 16];
        n /= 16;
        if n == 0 {
            return &out[at..];
        }
    }
}

/// `data` as one chunk of a chunked body.
pub(crate) fn chunk(data: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(data.len() + 12);
    put_chunk(&mut buf, data);
    buf.freeze()
}

/// Appends one `name: value` header line.
pub(crate) fn put_header(buf: &mut BytesMut, name: &[u8], value: &[u8]) {
    buf.put_slice(name);
    buf.put_slice(b": ");
    buf.put_slice(value);
    buf.put_slice(b"\r\n");
}

thread_local! {
    /// The `date` value and the second it was formatted for.
    static DATE: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
}

/// Calls `f` with the current `date` value, formatted once a second per
/// thread.
fn with_date<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != second || text.is_empty() {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        f(text.as_bytes())
    })
}

/// A whole answer from a handler's response (whose body is in memory:
/// every answer the front door writes this way is).
pub(crate) async fn encode(resp: Response<Body>, keep_alive: bool) -> Bytes {
    let (parts, body) = resp.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    response(&parts, &body, keep_alive)
}

/// Writes a whole answer (see [`encode`]): whether the connection goes on
/// to another request (it was written, `keep_alive`, and the answer did
/// not ask for the close).
pub(crate) async fn answer(tcp: &TcpStream, resp: Response<Body>, keep_alive: bool) -> bool {
    let (parts, body) = resp.into_parts();
    let keep_alive = keep_alive && !asks_close(&parts);
    let bytes = encode(Response::from_parts(parts, body), keep_alive).await;
    write_all(tcp, &bytes).await.is_ok() && keep_alive
}

/// Writes a whole `application/json` answer its handler made as bytes
/// (an accepted push's): what [`answer`] writes for the same response,
/// with no `Response` built for it. Whether the connection goes on to
/// another request, as [`answer`].
pub(crate) async fn answer_json(
    tcp: &TcpStream,
    status: StatusCode,
    body: &[u8],
    keep_alive: bool,
) -> bool {
    let bytes = json_answer(status, body, keep_alive);
    write_all(tcp, &bytes).await.is_ok() && keep_alive
}

/// The bytes [`answer_json`] writes.
fn json_answer(status: StatusCode, body: &[u8], keep_alive: bool) -> BytesMut {
    let mut buf = BytesMut::with_capacity(192 + body.len());
    put_status_line(&mut buf, status);
    put_header(&mut buf, b"content-type", b"application/json");
    end_head(&mut buf, Length::Fixed(body.len()), keep_alive);
    buf.put_slice(body);
    buf
}

/// Writes what fits of `bytes` to `tcp` now (a producer's direct write):
/// `None` when all of it went out, or what is left. `WouldBlock` when
/// nothing fits.
pub(crate) fn try_send(tcp: &TcpStream, bytes: &Bytes) -> io::Result<Option<Bytes>> {
    let n = tcp.try_write(bytes)?;
    Ok((n < bytes.len()).then(|| bytes.slice(n..)))
}

/// Reads what has arrived into `buf`, as `TcpStream::try_read` does, and
/// when the read comes back short of `buf` also marks the socket not
/// readable: a stream socket hands over all it holds up to the length
/// asked, so a short read emptied it. The next wait for input then parks
/// at once instead of costing a read that finds nothing (`EAGAIN`), one
/// system call fewer per request head, per client frame and per opened
/// WebSocket. (tokio's own `AsyncRead` does the same; its `try_read` does
/// not.) The mark goes only if no readiness event came in since the read
/// began, so input that arrives meanwhile still wakes the reader.
pub(crate) fn try_read(tcp: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let asked = buf.len();
    drained(tcp, asked, || tcp.try_read(buf))
}

/// [`try_read`] into the spare capacity of `buf` (at least `reserve`
/// bytes of it), which grows by the count read.
pub(crate) fn try_read_buf(
    tcp: &TcpStream,
    buf: &mut BytesMut,
    reserve: usize,
) -> io::Result<usize> {
    buf.reserve(reserve);
    let asked = buf.capacity() - buf.len();
    drained(tcp, asked, || tcp.try_read_buf(buf))
}

/// Runs `read` (one read of at most `asked` bytes) under the socket's
/// readiness, and clears that readiness when the read was short.
fn drained(
    tcp: &TcpStream,
    asked: usize,
    read: impl FnOnce() -> io::Result<usize>,
) -> io::Result<usize> {
    let mut short = None;
    let outcome = tcp.try_io(Interest::READABLE, || match read() {
        // `WouldBlock` makes `try_io` clear the readiness it saw before
        // the read (and only that: a newer event keeps it set).
        Ok(n) if 0 < n && n < asked => {
            short = Some(n);
            Err(io::ErrorKind::WouldBlock.into())
        }
        other => other,
    });
    short.map_or(outcome, Ok)
}

/// Writes all of `bytes` to `tcp`, waiting for room as needed.
pub(crate) async fn write_all(tcp: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        tcp.writable().await?;
        match tcp.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::{self, HeaderValue};

    fn parts(status: StatusCode) -> Parts {
        let mut resp = Response::new(());
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp.into_parts().0
    }

    /// Parses `bytes` as a response the way a client would.
    fn parsed(bytes: &[u8]) -> (u16, Vec<(String, String)>, usize) {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut resp = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(len) = resp.parse(bytes).expect("a response") else {
            panic!("incomplete head");
        };
        let headers = resp
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        (resp.code.expect("a status"), headers, len)
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_fixed_answer_carries_its_length_and_date() {
        let bytes = response(&parts(StatusCode::OK), b"[1,2]", true);
        let (status, headers, len) = parsed(&bytes);
        assert_eq!(status, 200);
        assert!(bytes.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        assert_eq!(header(&headers, "content-length"), Some("5"));
        assert_eq!(header(&headers, "connection"), None);
        let date = header(&headers, "date").expect("a date");
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
        assert_eq!(&bytes[len..], b"[1,2]");
    }

    #[test]
    fn a_json_answer_made_as_bytes_is_the_answer_of_its_response() {
        // `date` aside (it may tick over between the two), line for line.
        let without_date = |bytes: &[u8]| -> Vec<String> {
            String::from_utf8_lossy(bytes)
                .split("\r\n")
                .filter(|line| !line.starts_with("date: "))
                .map(str::to_owned)
                .collect()
        };
        for status in [StatusCode::ACCEPTED, StatusCode::OK] {
            for keep_alive in [true, false] {
                let body = br#"{"cursor":"7","id":"abc"}"#;
                assert_eq!(
                    without_date(&json_answer(status, body, keep_alive)),
                    without_date(&response(&parts(status), body, keep_alive)),
                    "{status} keep-alive {keep_alive}"
                );
            }
        }
    }

    #[test]
    fn an_answer_that_ends_the_connection_says_so() {
        let bytes = response(&parts(StatusCode::UNAUTHORIZED), b"{}", false);
        let (status, headers, _) = parsed(&bytes);
        assert_eq!(status, 401);
        assert!(bytes.starts_with(b"HTTP/1.1 401 Unauthorized\r\n"));
        assert_eq!(header(&headers, "connection"), Some("close"));
    }

    #[test]
    fn a_stream_is_chunked() {
        let head = response_head(&parts(StatusCode::OK), Length::Chunked, true);
        let (_, headers, len) = parsed(&head);
        assert_eq!(len, head.len());
        assert_eq!(header(&headers, "transfer-encoding"), Some("chunked"));
        assert_eq!(header(&headers, "content-length"), None);
        assert_eq!(
            &chunk(&[b'x'; 26])[..],
            &b"1a\r\nxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n"[..]
        );
        assert!(chunk(b"").is_empty(), "an empty chunk would end the body");
        for n in [1, 9, 10, 15, 16, 255, 4096, 1 << 20] {
            let mut size = [0u8; 16];
            assert_eq!(hex_digits(n, &mut size), format!("{n:x}").as_bytes());
        }
    }

    /// A connected pair on loopback: (the gateway's side, the client's).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (accepted.unwrap().0, client.unwrap())
    }

    /// Whether a wait for input would complete now, without reading.
    fn ready_now(tcp: &TcpStream) -> bool {
        use futures_util::FutureExt;
        tcp.readable().now_or_never().is_some()
    }

    /// Waits for input, within a deadline.
    async fn wait_readable(tcp: &TcpStream) {
        let wait = std::time::Duration::from_secs(10);
        tokio::time::timeout(wait, tcp.readable())
            .await
            .expect("input within the deadline")
            .expect("a readable socket");
    }

    #[tokio::test]
    async fn a_short_read_leaves_the_socket_waiting_without_another_read() {
        use tokio::io::AsyncWriteExt;
        let (tcp, mut client) = pair().await;
        client.write_all(b"ping").await.unwrap();
        wait_readable(&tcp).await;
        let mut buf = [0u8; 64];
        assert_eq!(try_read(&tcp, &mut buf).unwrap(), 4);
        assert!(!ready_now(&tcp), "a read that found nothing would be next");
        // What comes afterwards still wakes the reader.
        client.write_all(b"pong").await.unwrap();
        wait_readable(&tcp).await;
        assert_eq!(try_read(&tcp, &mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"pong");
    }

    #[tokio::test]
    async fn a_full_read_keeps_the_socket_readable_for_the_rest() {
        use tokio::io::AsyncWriteExt;
        let (tcp, mut client) = pair().await;
        client.write_all(&[7u8; 100]).await.unwrap();
        let mut buf = BytesMut::new();
        while buf.len() < 100 {
            wait_readable(&tcp).await;
            let before = buf.len();
            // 64 asked at most: the first read fills what it was given.
            let mut chunk = [0u8; 64];
            match try_read(&tcp, &mut chunk) {
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(err) => assert_eq!(err.kind(), io::ErrorKind::WouldBlock),
            }
            if buf.len() - before == 64 {
                assert!(ready_now(&tcp), "the rest is unread: still readable");
            }
        }
        assert_eq!(buf.len(), 100);
    }

    #[tokio::test]
    async fn a_short_read_into_a_buffer_grows_it_and_waits() {
        use tokio::io::AsyncWriteExt;
        let (tcp, mut client) = pair().await;
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        wait_readable(&tcp).await;
        let mut buf = BytesMut::from(&b"x"[..]);
        assert_eq!(try_read_buf(&tcp, &mut buf, 1024).unwrap(), 16);
        assert_eq!(&buf[..], b"xGET / HTTP/1.1\r\n");
        assert!(!ready_now(&tcp));
        // The end of the stream is read as 0, not taken for a short read.
        drop(client);
        wait_readable(&tcp).await;
        assert_eq!(try_read_buf(&tcp, &mut buf, 1024).unwrap(), 0);
    }
}
