//! What a client sends behind a request the front door is still answering
//! (a parked poll, an open event stream): usually nothing, sometimes the
//! next request (HTTP/1.1 pipelining), sometimes junk.
//!
//! The socket is read the whole time, so a client that leaves (the end of
//! the stream, or a reset) ends its poll or stream at once and releases its
//! slot, instead of at the next ping or the poll timeout. What is read is
//! kept for the next request up to [`PIPELINED_MAX_BYTES`] (a parked poll
//! costs a few KiB in all: the bound keeps junk from multiplying that),
//! and past it thrown away: the connection then closes after its answer,
//! as it cannot serve a request it did not keep (a client that pipelines
//! retries unanswered requests on a new connection, RFC 9112 §9.3.2).

use std::io;

use bytes::BytesMut;
use tokio::net::TcpStream;

use crate::http::wire;

/// The most bytes kept behind a request being answered. A pipelined poll
/// request (its token in the query) fits; browsers do not pipeline.
pub(crate) const PIPELINED_MAX_BYTES: usize = 1024;

/// The most kept of what arrived with a request head (pipelined requests
/// read together with it).
pub(crate) const AFTER_HEAD_MAX_BYTES: usize = 4 * 1024;
/// Bytes asked of the socket per read (on the stack, never kept).
const READ_CHUNK_BYTES: usize = 2048;

/// The bytes behind a request being answered, at most
/// [`PIPELINED_MAX_BYTES`] of them.
#[derive(Debug, Default)]
pub(crate) struct Pipelined {
    /// Allocated at the first byte kept, with room for the bound and no
    /// more; never grows.
    kept: BytesMut,
    /// More than the bound arrived: what was kept is gone, and so is the
    /// rest.
    overflowed: bool,
}

impl Pipelined {
    /// What followed a request head in the buffer the head was read into
    /// (that buffer can then go). Kept whole up to [`AFTER_HEAD_MAX_BYTES`]:
    /// the front door reads heads in small chunks and stops once one is
    /// complete, so this is usually under a chunk, and it holds the next
    /// pipelined requests (a client may send many in one write, and hyper
    /// serves them all). [`PIPELINED_MAX_BYTES`] bounds what arrives while
    /// the answer waits.
    pub(crate) fn after_head(rest: &[u8]) -> Self {
        if rest.len() > AFTER_HEAD_MAX_BYTES {
            return Self {
                kept: BytesMut::new(),
                overflowed: true,
            };
        }
        Self {
            kept: BytesMut::from(rest),
            overflowed: false,
        }
    }

    /// Keeps `bytes` if they fit under the bound; otherwise drops
    /// everything and remembers that it overflowed.
    pub(crate) fn keep(&mut self, bytes: &[u8]) {
        if self.overflowed || bytes.is_empty() {
            return;
        }
        if self.kept.len() + bytes.len() > PIPELINED_MAX_BYTES {
            self.overflowed = true;
            self.kept = BytesMut::new();
            return;
        }
        if self.kept.capacity() == 0 {
            self.kept = BytesMut::with_capacity(PIPELINED_MAX_BYTES);
        }
        self.kept.extend_from_slice(bytes);
    }

    /// Whether nothing arrived behind the request.
    pub(crate) fn is_empty(&self) -> bool {
        self.kept.is_empty() && !self.overflowed
    }

    /// Whether more arrived than could be kept: the connection cannot go
    /// on after the answer.
    pub(crate) fn is_overflowed(&self) -> bool {
        self.overflowed
    }

    /// Bytes of memory held.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.kept.capacity()
    }

    /// The start of the next request, or `None` if it was not kept.
    pub(crate) fn into_next(self) -> Option<BytesMut> {
        (!self.overflowed).then_some(self.kept)
    }

    /// Completes when the client closes its side of the connection, resets
    /// it, or the socket fails: what a waiting answer watches for. What the
    /// client sends meanwhile is kept (or counted as overflow).
    pub(crate) async fn closed(&mut self, tcp: &TcpStream) {
        while self.next_input(tcp).await == Input::Arrived {}
    }

    /// Completes at the client's next bytes (kept, or counted as overflow)
    /// or at the end of the connection, whichever comes first: for an
    /// answer that must know when the client sent something.
    pub(crate) async fn next_input(&mut self, tcp: &TcpStream) -> Input {
        loop {
            if tcp.readable().await.is_err() {
                return Input::Ended;
            }
            let mut chunk = [0u8; READ_CHUNK_BYTES];
            match wire::try_read(tcp, &mut chunk) {
                Ok(0) => return Input::Ended,
                Ok(n) => {
                    self.keep(&chunk[..n]);
                    return Input::Arrived;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return Input::Ended,
            }
        }
    }
}

/// What [`Pipelined::next_input`] met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    /// Bytes from the client.
    Arrived,
    /// The client closed its side, reset the connection, or the socket
    /// failed.
    Ended,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_behind_a_request_costs_nothing() {
        let pipelined = Pipelined::after_head(b"");
        assert_eq!(pipelined.capacity(), 0);
        assert_eq!(pipelined.into_next().map(|b| b.len()), Some(0));
    }

    #[test]
    fn a_pipelined_request_is_kept_whole_for_the_next_turn() {
        let mut pipelined = Pipelined::after_head(b"GET /poll?token=abc HTTP/1.1\r\n");
        pipelined.keep(b"Host: x\r\n\r\n");
        assert!(!pipelined.is_overflowed());
        assert!(pipelined.capacity() <= PIPELINED_MAX_BYTES);
        let next = pipelined.into_next().expect("kept");
        assert_eq!(
            &next[..],
            b"GET /poll?token=abc HTTP/1.1\r\nHost: x\r\n\r\n"
        );
    }

    #[test]
    fn junk_past_the_bound_is_dropped_and_holds_no_memory() {
        let mut pipelined = Pipelined::default();
        let mut most = 0;
        for _ in 0..(64 << 10) / 512 {
            pipelined.keep(&[b'j'; 512]);
            most = most.max(pipelined.capacity());
        }
        assert!(most <= PIPELINED_MAX_BYTES, "held {most} bytes");
        assert!(pipelined.is_overflowed());
        assert_eq!(pipelined.capacity(), 0, "nothing held once over");
        assert!(pipelined.into_next().is_none());
        // In one piece, as after a head read together with what followed.
        let big = Pipelined::after_head(&[b'j'; 40 << 10]);
        assert!(big.is_overflowed() && big.capacity() == 0);
    }

    #[test]
    fn exactly_the_bound_is_kept() {
        let mut pipelined = Pipelined::default();
        pipelined.keep(&[b'x'; PIPELINED_MAX_BYTES]);
        assert!(!pipelined.is_overflowed());
        assert_eq!(pipelined.capacity(), PIPELINED_MAX_BYTES);
        pipelined.keep(b"y");
        assert!(pipelined.is_overflowed());
    }
}
