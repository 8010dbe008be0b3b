//! One client session per transport: a WebSocket (tokio-tungstenite over
//! a socket set up for RST or FIN), a long-poll loop over one keep-alive
//! HTTP/1.1 connection, and a raw SSE reader.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::value::RawValue;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, sleep, timeout_at};
use tokio_tungstenite::tungstenite::Message;

use super::{Client, Ended, Exit, STALL_DRAIN, Session, Shared, bump};

/// A TCP connection set up for `session`: zero linger when it will end
/// with RST. (A stalling client keeps the default receive buffer: one
/// smaller than the loopback MSS of 64 KiB never reopens its window
/// without the sender's slow zero-window probes, so it could not drain.)
pub(crate) async fn dial(addr: SocketAddr, session: Session) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    let stream = socket.connect(addr).await.ok()?;
    if session.exit == Exit::Rst {
        stream.set_zero_linger().ok()?;
    }
    Some(stream)
}

pub(crate) async fn ws_session(c: &mut Client, sh: &Shared, session: Session) -> Ended {
    let Some(stream) = dial(sh.addr, session).await else {
        return Ended::Failed;
    };
    let url = format!("ws://{}/ws?{}", sh.addr, c.query());
    let Ok((mut ws, _)) = tokio_tungstenite::client_async(url, stream).await else {
        return Ended::Failed;
    };
    bump(&sh.faults.connects);
    let mut deadline = Instant::now() + session.length;
    let mut stall = session.stall;
    let ended = loop {
        if let Some(pause) = stall.take() {
            bump(&sh.faults.stalls);
            sleep(pause).await;
            deadline = Instant::now() + STALL_DRAIN;
        }
        match timeout_at(deadline, ws.next()).await {
            Err(_) => break Ended::Ours,
            Ok(Some(Ok(Message::Text(text)))) => {
                if c.on_frame(&text, &sh.faults) {
                    continue; // the Close message follows
                }
                if c.saw_end && sh.stopping.load(Ordering::Relaxed) {
                    break Ended::Ours;
                }
            }
            Ok(Some(Ok(Message::Close(_)) | Err(_)) | None) => break Ended::Server,
            Ok(Some(Ok(_))) => {}
        }
    };
    if ended == Ended::Server {
        return ended;
    }
    match session.exit {
        Exit::Rst => drop(ws),
        Exit::Fin => {
            let _ = ws.get_mut().shutdown().await;
            drop(ws);
        }
        Exit::Clean => {
            let _ = ws.close(None).await;
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while let Some(Ok(_)) = ws.next().await {}
            })
            .await;
        }
    }
    ended
}

/// An HTTP/1.1 connection for one poll or SSE session.
pub(crate) async fn http_conn(
    stream: TcpStream,
) -> Option<(
    hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<()>,
)> {
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    Some((sender, task))
}

pub(crate) fn get(path: String) -> Request<Empty<Bytes>> {
    Request::get(path)
        .header("host", "127.0.0.1")
        .body(Empty::new())
        .expect("request")
}

/// Ends an HTTP session: FIN, or RST (the zero linger was set at dial).
pub(crate) async fn hang_up(task: tokio::task::JoinHandle<()>) {
    task.abort();
    let _ = task.await;
}

pub(crate) async fn poll_session(c: &mut Client, sh: &Shared, session: Session) -> Ended {
    let Some(stream) = dial(sh.addr, session).await else {
        return Ended::Failed;
    };
    let Some((mut sender, task)) = http_conn(stream).await else {
        return Ended::Failed;
    };
    bump(&sh.faults.connects);
    let deadline = Instant::now() + session.length;
    let ended = loop {
        if c.saw_end && sh.stopping.load(Ordering::Relaxed) {
            break Ended::Ours;
        }
        let req = get(format!("/poll?{}", c.query()));
        let answer = async {
            let resp = sender.send_request(req).await.ok()?;
            let status = resp.status();
            let body = resp.into_body().collect().await.ok()?.to_bytes();
            assert_eq!(status, 200, "poll: {}", String::from_utf8_lossy(&body));
            Some(body)
        };
        match timeout_at(deadline, answer).await {
            Err(_) => break Ended::Ours,
            Ok(None) => break Ended::Server,
            Ok(Some(body)) => {
                let frames: Vec<&RawValue> = serde_json::from_slice(&body).expect("JSON array");
                for frame in frames {
                    c.on_frame(frame.get(), &sh.faults);
                }
            }
        }
    };
    hang_up(task).await;
    ended
}

/// A raw HTTP/1.1 SSE reader in the client's own task (a hyper client
/// would hand every chunk to another task, which a runtime busy with
/// thousands of clients makes too slow to drain a stalled stream).
pub(crate) struct SseReader {
    pub stream: TcpStream,
    pub buf: Vec<u8>,
    /// Bytes left in the current chunk, and whether its CRLF is pending.
    pub chunk_left: usize,
    pub line: Vec<u8>,
}

impl SseReader {
    /// Sends the request and reads the head; `None` unless `200`.
    pub(crate) async fn open(mut stream: TcpStream, target: &str) -> Option<Self> {
        use tokio::io::AsyncReadExt;
        let request = format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") || !head.contains("transfer-encoding: chunked") {
            return None;
        }
        buf.drain(..head_end);
        Some(Self {
            stream,
            buf,
            chunk_left: 0,
            line: Vec::new(),
        })
    }

    /// The next complete line of the event stream; `None` at the end of
    /// the stream or of the connection.
    pub(crate) async fn next_line(&mut self) -> Option<String> {
        use tokio::io::AsyncReadExt;
        loop {
            // Move chunk data into `line` until a newline completes it.
            while !self.buf.is_empty() {
                if self.chunk_left == 0 {
                    let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") else {
                        break; // the size line is not complete yet
                    };
                    if end == 0 {
                        self.buf.drain(..2); // the CRLF after a chunk's data
                        continue;
                    }
                    let size = std::str::from_utf8(&self.buf[..end]).ok()?;
                    let size = usize::from_str_radix(size.trim(), 16).ok()?;
                    if size == 0 {
                        return None;
                    }
                    self.buf.drain(..end + 2);
                    self.chunk_left = size;
                    continue;
                }
                let take = self.chunk_left.min(self.buf.len());
                let newline = self.buf[..take].iter().position(|b| *b == b'\n');
                let upto = newline.map_or(take, |at| at + 1);
                self.line.extend(self.buf.drain(..upto));
                self.chunk_left -= upto;
                if newline.is_some() {
                    let line = String::from_utf8(std::mem::take(&mut self.line)).ok()?;
                    return Some(line);
                }
            }
            let mut chunk = vec![0u8; 64 * 1024];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

pub(crate) async fn sse_session(c: &mut Client, sh: &Shared, session: Session) -> Ended {
    let Some(stream) = dial(sh.addr, session).await else {
        return Ended::Failed;
    };
    let Some(mut sse) = SseReader::open(stream, &format!("/sse?{}", c.query())).await else {
        return Ended::Failed;
    };
    bump(&sh.faults.connects);
    let mut deadline = Instant::now() + session.length;
    let mut stall = session.stall;
    let ended = loop {
        if let Some(pause) = stall.take() {
            bump(&sh.faults.stalls);
            sleep(pause).await;
            deadline = Instant::now() + STALL_DRAIN;
        }
        match timeout_at(deadline, sse.next_line()).await {
            Err(_) => break Ended::Ours,
            Ok(None) => break Ended::Server,
            Ok(Some(line)) => {
                if let Some(json) = line.strip_prefix("data:") {
                    c.on_frame(json.trim(), &sh.faults);
                    if c.saw_end && sh.stopping.load(Ordering::Relaxed) {
                        break Ended::Ours;
                    }
                }
            }
        }
    };
    if ended == Ended::Ours && session.exit != Exit::Rst {
        let _ = sse.stream.shutdown().await;
    }
    ended
}
