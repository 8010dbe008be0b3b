//! A lingering close: after its last answer, a connection's write half is
//! shut (the client reads the answer and then the end of the stream), and
//! whatever the client still sends is read and thrown away until it closes
//! too, for at most [`LINGER_MAX_BYTES`] and [`LINGER_TIME`]. nginx does the
//! same (`lingering_close`).
//!
//! Why: an answer given before the request was read whole (`413` from a
//! `Content-Length`, `401` to a poll with bytes behind it) leaves the
//! client's bytes unread in the socket. Closed then, the kernel answers
//! with a reset, and a client that writes its whole request before it
//! reads (Python's `http.client`, Node's `http`) gets "broken pipe" or
//! "connection reset" instead of the answer, which the reset discarded.
//! Reading on until the client is done lets the answer arrive.
//!
//! A client that closes at once costs one read that sees the end. One that
//! keeps sending is bounded: bytes are read into a buffer on the stack, and
//! the connection is dropped at the first bound reached.

use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// The most bytes read and discarded after the last answer.
pub(crate) const LINGER_MAX_BYTES: usize = 8 << 20;
/// The longest a connection lingers after its last answer.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(2);
/// Bytes read per call while lingering (on the stack, never kept).
const DISCARD_CHUNK_BYTES: usize = 8 * 1024;

/// The state of one lingering close, driven by [`Linger::poll_close`]
/// (from a stream's `poll_shutdown`, which is how hyper closes a
/// connection) or by [`close`].
#[derive(Debug, Default)]
pub(crate) struct Linger {
    /// Set at the first poll: the timer needs the runtime.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Bytes discarded so far.
    discarded: usize,
    /// Whether the write half is shut.
    write_shut: bool,
}

impl Linger {
    /// A lingering close not started yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Shuts the write half of `io`, then reads and discards until the
    /// client closes, the socket fails, or a bound is reached. Never fails:
    /// a socket that cannot be shut or read has nothing left to save.
    pub(crate) fn poll_close<S>(&mut self, cx: &mut Context<'_>, io: &mut S) -> Poll<io::Result<()>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(LINGER_TIME)));
        if !self.write_shut {
            if let Poll::Ready(result) = Pin::new(&mut *io).poll_shutdown(cx) {
                self.write_shut = true;
                if result.is_err() {
                    return Poll::Ready(Ok(()));
                }
            } else if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            } else {
                return Poll::Pending;
            }
        }
        loop {
            if self.discarded >= LINGER_MAX_BYTES || deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; DISCARD_CHUNK_BYTES];
            let want = (LINGER_MAX_BYTES - self.discarded).min(DISCARD_CHUNK_BYTES);
            let mut buf = ReadBuf::new(&mut chunk[..want]);
            match ready!(Pin::new(&mut *io).poll_read(cx, &mut buf)) {
                Ok(()) if !buf.filled().is_empty() => self.discarded += buf.filled().len(),
                // The end of the stream, or a reset: the client is done.
                Ok(()) | Err(_) => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// Closes `io` with a lingering close (see the module), then drops it.
pub(crate) async fn close<S>(mut io: S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut linger = Linger::new();
    let _ = poll_fn(|cx| linger.poll_close(cx, &mut io)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_peer_reads_the_end_then_its_unread_bytes_are_drained() {
        let (mut client, server) = tokio::io::duplex(64);
        let closing = tokio::spawn(close(server));
        // The server's write half is shut: the client reads the end.
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.expect("read");
        assert!(rest.is_empty());
        // Its writes are taken (a 64-byte pipe would block without it).
        client.write_all(&[7u8; 100_000]).await.expect("drained");
        drop(client);
        closing.await.expect("closed once the client left");
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_never_closes_is_let_go_after_the_linger_time() {
        let (_client, server) = tokio::io::duplex(64);
        let began = tokio::time::Instant::now();
        close(server).await;
        let took = began.elapsed();
        assert!(took >= LINGER_TIME && took < LINGER_TIME * 2, "{took:?}");
    }

    #[tokio::test]
    async fn a_peer_that_sends_forever_is_let_go_after_the_byte_bound() {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let closing = tokio::spawn(close(server));
        let chunk = vec![1u8; 64 * 1024];
        let mut sent = 0;
        while client.write_all(&chunk).await.is_ok() {
            sent += chunk.len();
            assert!(sent <= LINGER_MAX_BYTES + 2 * chunk.len(), "still draining");
        }
        assert!(sent >= LINGER_MAX_BYTES - chunk.len(), "{sent}");
        closing.await.expect("closed at the bound");
    }
}
