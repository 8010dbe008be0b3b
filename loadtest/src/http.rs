//! A minimal HTTP/1.1 client over a `TcpStream`: enough for `POST /push`,
//! long-polls and event streams against a gateway on loopback, with
//! keep-alive, `Content-Length` and chunked bodies. No TLS, no redirects.

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Largest response head accepted, in bytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest response body accepted, in bytes.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Bytes asked of the socket per read.
const READ_CHUNK_BYTES: usize = 4096;

/// A response's status line and headers.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    /// The status code.
    pub status: u16,
    /// Header names (lowercased) and values.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of header `name` (lowercase).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the server closes the connection after this response.
    pub(crate) fn is_closing(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }

    /// Whether the body is chunked.
    pub(crate) fn is_chunked(&self) -> bool {
        self.header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    }

    /// The declared body length, if any.
    pub(crate) fn content_length(&self) -> Option<usize> {
        self.header("content-length")
            .and_then(|v| v.trim().parse().ok())
    }
}

/// One client connection with the bytes read but not yet consumed.
#[derive(Debug)]
pub(crate) struct HttpConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl HttpConn {
    /// Wraps a connected stream.
    pub(crate) fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes raw bytes (a request built by [`request`]).
    pub(crate) async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Reads more bytes into the buffer; `Ok(0)` at end of stream.
    pub(crate) async fn fill(&mut self) -> std::io::Result<usize> {
        self.buf.reserve(READ_CHUNK_BYTES);
        self.stream.read_buf(&mut self.buf).await
    }

    /// Bytes read and not yet consumed.
    pub(crate) fn buffered(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Reads a response head.
    pub(crate) async fn read_head(&mut self) -> anyhow::Result<Head> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head = parse_head(&self.buf[..end])?;
                self.buf.drain(..end + 4);
                return Ok(head);
            }
            if self.buf.len() > MAX_HEAD_BYTES {
                bail!("response head over {MAX_HEAD_BYTES} bytes");
            }
            if self.fill().await? == 0 {
                bail!("connection closed before the response head");
            }
        }
    }

    /// Reads the body that follows `head`.
    pub(crate) async fn read_body(&mut self, head: &Head) -> anyhow::Result<Vec<u8>> {
        if head.is_chunked() {
            let mut decoder = Chunked::default();
            let mut out = Vec::new();
            loop {
                if decoder.feed(&mut self.buf, &mut out)? {
                    return Ok(out);
                }
                if out.len() > MAX_BODY_BYTES {
                    bail!("response body over {MAX_BODY_BYTES} bytes");
                }
                if self.fill().await? == 0 {
                    bail!("connection closed inside a chunked body");
                }
            }
        }
        if let Some(len) = head.content_length() {
            if len > MAX_BODY_BYTES {
                bail!("response body of {len} bytes is over {MAX_BODY_BYTES}");
            }
            while self.buf.len() < len {
                if self.fill().await? == 0 {
                    bail!("connection closed inside a {len}-byte body");
                }
            }
            return Ok(self.buf.drain(..len).collect());
        }
        if head.status == 204 || head.status == 304 {
            return Ok(Vec::new());
        }
        while self.fill().await? != 0 {
            if self.buf.len() > MAX_BODY_BYTES {
                bail!("response body over {MAX_BODY_BYTES} bytes");
            }
        }
        Ok(std::mem::take(&mut self.buf))
    }
}

/// A request: `method path`, `Host`, the extra headers and the body (with
/// its `Content-Length` when not empty or when the method sends one).
pub(crate) fn request(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (name, value) in headers {
        out.push_str(name);
        out.push_str(": ");
        out.push_str(value);
        out.push_str("\r\n");
    }
    if !body.is_empty() || method == "POST" {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

fn parse_head(raw: &[u8]) -> anyhow::Result<Head> {
    let text = std::str::from_utf8(raw).context("response head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        bail!("not an HTTP/1 response: {status_line:?}");
    }
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {status_line:?}"))?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Head { status, headers })
}

/// Where `needle` first occurs in `hay`.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// An incremental decoder of `Transfer-Encoding: chunked`.
#[derive(Debug, Default)]
pub(crate) struct Chunked {
    state: ChunkState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Expecting a size line.
    #[default]
    Size,
    /// Inside a chunk with this many bytes left.
    Data(usize),
    /// Expecting the CRLF after a chunk.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailer,
    /// The body is complete.
    Done,
}

impl Chunked {
    /// Consumes what it can of `input` (leaving a partial line in place),
    /// appends decoded bytes to `out`; `Ok(true)` once the body is complete.
    pub(crate) fn feed(&mut self, input: &mut Vec<u8>, out: &mut Vec<u8>) -> anyhow::Result<bool> {
        let mut at = 0;
        loop {
            match self.state {
                ChunkState::Done => break,
                ChunkState::Size | ChunkState::Trailer => {
                    let Some(eol) = find(&input[at..], b"\r\n") else {
                        break;
                    };
                    let line = &input[at..at + eol];
                    at += eol + 2;
                    if self.state == ChunkState::Trailer {
                        if line.is_empty() {
                            self.state = ChunkState::Done;
                        }
                        continue;
                    }
                    let hex = std::str::from_utf8(line)
                        .ok()
                        .map(|l| l.split(';').next().unwrap_or_default().trim())
                        .context("bad chunk size line")?;
                    let size = usize::from_str_radix(hex, 16)
                        .with_context(|| format!("bad chunk size {hex:?}"))?;
                    self.state = if size == 0 {
                        ChunkState::Trailer
                    } else {
                        ChunkState::Data(size)
                    };
                }
                ChunkState::Data(left) => {
                    let take = left.min(input.len() - at);
                    if take == 0 {
                        break;
                    }
                    out.extend_from_slice(&input[at..at + take]);
                    at += take;
                    self.state = if take == left {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left - take)
                    };
                }
                ChunkState::DataEnd => {
                    if input.len() - at < 2 {
                        break;
                    }
                    if &input[at..at + 2] != b"\r\n" {
                        bail!("chunk not followed by CRLF");
                    }
                    at += 2;
                    self.state = ChunkState::Size;
                }
            }
        }
        input.drain(..at);
        Ok(self.state == ChunkState::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_decodes_across_arbitrary_splits() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for split in 0..wire.len() {
            let mut decoder = Chunked::default();
            let mut out = Vec::new();
            let mut input = wire[..split].to_vec();
            let done = decoder.feed(&mut input, &mut out).unwrap();
            input.extend_from_slice(&wire[split..]);
            let done = done || decoder.feed(&mut input, &mut out).unwrap();
            assert!(done, "split {split}");
            assert_eq!(out, b"hello, world", "split {split}");
            assert_eq!(input, b"NEXT", "split {split}");
        }
    }

    #[test]
    fn heads_parse_status_and_headers() {
        let head = parse_head(b"HTTP/1.1 202 Accepted\r\nContent-Length: 12\r\nX-A: b").unwrap();
        assert_eq!(head.status, 202);
        assert_eq!(head.content_length(), Some(12));
        assert_eq!(head.header("x-a"), Some("b"));
        assert!(parse_head(b"SSH-2.0 x").is_err());
    }

    #[test]
    fn requests_carry_host_headers_and_length() {
        let req = request("POST", "/push", "h:1", &[("A", "b")], b"{}");
        assert_eq!(
            req,
            b"POST /push HTTP/1.1\r\nHost: h:1\r\nA: b\r\nContent-Length: 2\r\n\r\n{}"
        );
    }
}
