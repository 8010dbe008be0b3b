//! A connection's outbound queue: the only buffer per connection.
//!
//! Producers (the bus fan-out, the timer's expiry actions, drain) push
//! without blocking; the connection's own task takes everything queued in
//! one swap and writes it. An idle connection's queue holds no allocation.
//! A queue that passes its limit means a consumer that cannot keep up: it
//! is cleared and closed with reason `slow`, so it never holds back the
//! others nor grows without bound.
//!
//! A connection on plain TCP also hands its socket to the queue
//! ([`Outbound::set_direct`]): while nothing is queued and the task is not
//! writing, a producer writes the frame to the socket itself (a WebSocket
//! frame, an SSE chunk), and the task is not woken at all. That is the
//! common case of a broadcast, and it costs one `send` per recipient.
//! A parked long-poll's socket takes one frame, as the poll's whole answer
//! ([`DirectWrite::answers_once`]): the producer writes it and the
//! connection is done (closing, nothing more is given to it), again
//! without waking the task. The task notices when it next wakes for
//! another reason: the client's next request, its leaving, or the poll's
//! deadline. Whatever does not fit in the socket's
//! buffer is queued, and from then on everything goes through the task
//! until it has written the queue out, so the order on the wire is the
//! order of the pushes.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::protocol::frame::{CloseReason, Frame};

/// One thing for a connection's task to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outgoing {
    /// A JSON frame, encoded once and shared by every recipient.
    Frame(Frame),
    /// A keep-alive ping (WebSocket ping, SSE comment).
    Ping,
    /// End the connection: a `close` frame with this reason, then the
    /// transport's close.
    Close(CloseReason),
    /// Come back later: this `reconnect` frame, then close (1001 on a
    /// WebSocket). Built once for every connection it is sent to.
    Reconnect(Frame),
    /// Bytes already framed for the socket: the rest of a frame a producer
    /// wrote in part, or the protocol's own answer (a WebSocket pong).
    Raw(Bytes),
}

/// What became of a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Queued for the connection's task.
    Queued,
    /// Written to the socket by the producer (see [`Outbound::set_direct`]).
    Written,
    /// The message is at or below the connection's floor: it reached the
    /// connection from history already, and this live copy was dropped.
    Covered,
    /// The queue passed its limit: it was cleared and a `slow` close queued.
    Overflowed,
    /// The connection is already closing; the frame was dropped.
    Closing,
}

/// A socket producers may write to without waking the connection's task,
/// and how its transport puts frames on it (each transport implements it
/// for its plain-TCP socket: WebSocket frames, SSE chunks, a parked
/// poll's whole answer).
pub(crate) trait DirectWrite: Send + Sync + std::fmt::Debug {
    /// Writes what fits of `frame`, encoded for the transport, without
    /// waiting: `None` when all of it went out, or the bytes left for the
    /// task to write. An error means nothing was written (`WouldBlock`
    /// when nothing fits).
    fn try_frame(&self, frame: &Frame) -> io::Result<Option<Bytes>>;

    /// The same for a keep-alive ping.
    fn try_ping(&self) -> io::Result<Option<Bytes>>;

    /// The same for bytes already framed for this socket (a WebSocket
    /// pong). By default they are not written directly (`WouldBlock`):
    /// they wait in the queue for the task.
    fn try_raw(&self, bytes: &Bytes) -> io::Result<Option<Bytes>> {
        let _ = bytes;
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Whether one frame written here ends what the socket takes (a parked
    /// poll's answer): the connection is then closing, and nothing more is
    /// written or queued for it (see [`Outbound::is_answered`]).
    fn answers_once(&self) -> bool {
        false
    }
}

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Outgoing>,
    frames: usize,
    /// When the end was queued (overflow or `push_end`).
    closing_since: Option<Instant>,
    /// The connection's socket, while its task runs (plain TCP only).
    direct: Option<Arc<dyn DirectWrite>>,
    /// The task took items it may not have written yet: producers must
    /// queue behind them.
    writing: bool,
    /// Messages numbered up to here reached the connection from history
    /// (or came before its time): live copies of them are dropped.
    floor: u64,
    /// The highest message number given to the connection live (queued
    /// or written); 0: none.
    last: u64,
    /// A producer wrote (all or part of) the answer of a socket that
    /// answers once.
    answered: bool,
}

/// How a direct write went.
enum Direct {
    /// All of it is on the socket.
    Written,
    /// This much of it is left for the task.
    Rest(Bytes),
}

impl State {
    /// Raises the floor to `covered` and drops queued live copies below it.
    fn discard_through(&mut self, covered: u64) {
        self.floor = self.floor.max(covered);
        let before = self.items.len();
        self.items.retain(|item| match item {
            Outgoing::Frame(frame) => frame.seq() == 0 || frame.seq() > covered,
            _ => true,
        });
        let dropped = before - self.items.len();
        self.frames = self.frames.saturating_sub(dropped);
    }

    /// Takes the rest of a frame a producer wrote in part, if one is
    /// queued. It can only be first (a producer writes only to an idle
    /// socket with nothing queued), and it must go out before anything
    /// else: dropped, the bytes on the wire would be a frame cut in two
    /// followed by the next one (found by the soak: an SSE client read a
    /// message cut short and the `close` event's chunk inside it).
    fn take_cut_frame(&mut self) -> Option<Bytes> {
        match self.items.front() {
            Some(Outgoing::Raw(_)) => match self.items.pop_front() {
                Some(Outgoing::Raw(rest)) => Some(rest),
                _ => None,
            },
            _ => None,
        }
    }

    /// Writes to the socket with `write` if the socket is free: nothing
    /// queued, nothing being written. `None` when it must be queued
    /// instead (no direct socket, busy, or the socket's buffer is full).
    /// A socket that answers once is forgotten after its write, and the
    /// connection is closing from then on.
    fn try_direct(
        &mut self,
        write: impl FnOnce(&dyn DirectWrite) -> io::Result<Option<Bytes>>,
    ) -> Option<Direct> {
        let socket = self.direct.as_ref()?;
        if self.writing || !self.items.is_empty() {
            return None;
        }
        let direct = match write(socket.as_ref()) {
            Ok(None) => Direct::Written,
            Ok(Some(rest)) => Direct::Rest(rest),
            // WouldBlock: the task waits for room. Another error: the
            // task meets it on its own write or read and ends.
            Err(_) => return None,
        };
        if socket.answers_once() {
            self.direct = None;
            self.answered = true;
            self.closing_since = Some(Instant::now());
        }
        Some(direct)
    }
}

/// A bounded queue of frames plus the wake-up for the task that drains it.
#[derive(Debug)]
pub(crate) struct Outbound {
    state: Mutex<State>,
    ready: Notify,
    limit: usize,
}

impl Outbound {
    /// An empty queue that holds at most `limit` frames (at least 1).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            limit: limit.max(1),
        }
    }

    /// Queues a message frame; never blocks.
    pub(crate) fn push_frame(&self, frame: &Frame) -> Pushed {
        let mut state = self.state.lock();
        if state.closing_since.is_some() {
            return Pushed::Closing;
        }
        if frame.seq() != 0 && frame.seq() <= state.floor {
            return Pushed::Covered;
        }
        if state.frames >= self.limit {
            let cut = state.take_cut_frame();
            state.items.clear();
            state.items.extend(cut.map(Outgoing::Raw));
            state.frames = 0;
            state.closing_since = Some(Instant::now());
            state.items.push_back(Outgoing::Close(CloseReason::Slow));
            drop(state);
            self.ready.notify_one();
            return Pushed::Overflowed;
        }
        state.last = state.last.max(frame.seq());
        let item = match state.try_direct(|socket| socket.try_frame(frame)) {
            Some(Direct::Written) => return Pushed::Written,
            Some(Direct::Rest(rest)) => Outgoing::Raw(rest),
            None => Outgoing::Frame(frame.clone()),
        };
        state.items.push_back(item);
        state.frames += 1;
        drop(state);
        self.ready.notify_one();
        Pushed::Queued
    }

    /// Lets producers write frames straight to `socket` while the queue is
    /// empty and the task idle. Set it only once anything the connection
    /// must receive first (its resume, its response head) is queued or
    /// written.
    pub(crate) fn set_direct(&self, socket: Arc<dyn DirectWrite>) {
        self.state.lock().direct = Some(socket);
    }

    /// Forgets the direct socket (the task is ending: the socket must close
    /// with it, not when the last producer lets go of the connection).
    /// Returns whether a socket that answers once took the answer before:
    /// from here on no producer writes to it, so the task alone decides
    /// what else the client gets.
    pub(crate) fn clear_direct(&self) -> bool {
        let mut state = self.state.lock();
        state.direct = None;
        state.answered
    }

    /// Queues bytes already framed for the socket (a protocol reply), after
    /// what is queued, or writes them directly as [`Outbound::push_frame`]
    /// does a frame. Dropped when the connection is closing.
    pub(crate) fn push_raw(&self, bytes: Bytes) {
        let mut state = self.state.lock();
        if state.closing_since.is_some() {
            return;
        }
        let bytes = match state.try_direct(|socket| socket.try_raw(&bytes)) {
            Some(Direct::Written) => return,
            Some(Direct::Rest(rest)) => rest,
            None => bytes,
        };
        state.items.push_back(Outgoing::Raw(bytes));
        drop(state);
        self.ready.notify_one();
    }

    /// Queues a resume (a `recover` frame and missed messages) ahead of
    /// anything else, and sets the floor to `covered` (the history read
    /// covered those messages: live copies, queued or to come, are dropped). Not held to the limit, and
    /// not counted against it either: history bounds it, and a live push
    /// arriving before the connection's first `take` must not find the
    /// replay "too slow".
    pub(crate) fn push_resume(&self, frames: Vec<Frame>, covered: u64) {
        let mut state = self.state.lock();
        state.discard_through(covered);
        for frame in frames.into_iter().rev() {
            state.items.push_front(Outgoing::Frame(frame));
        }
        drop(state);
        self.ready.notify_one();
    }

    /// Queues a resume ahead of anything else, as [`Outbound::push_resume`]
    /// does, for a broker of several shards, where numbers of different
    /// shards do not compare: each live message frame queued meanwhile is
    /// passed to `live`, which returns `None` for a copy the resume covers
    /// (dropped) or the frame to keep in its place (with its cursor raised
    /// to the resume's position). Live frames that come after this are
    /// past the resume already (the bus seats it after every message its
    /// history read could have covered).
    pub(crate) fn push_resume_with(
        &self,
        frames: Vec<Frame>,
        mut live: impl FnMut(&Frame) -> Option<Frame>,
    ) {
        let mut state = self.state.lock();
        let items = std::mem::take(&mut state.items);
        let mut kept = VecDeque::with_capacity(items.len() + frames.len());
        kept.extend(frames.into_iter().map(Outgoing::Frame));
        let mut dropped = 0;
        for item in items {
            match item {
                Outgoing::Frame(frame) if frame.seq() != 0 => match live(&frame) {
                    Some(frame) => kept.push_back(Outgoing::Frame(frame)),
                    None => dropped += 1,
                },
                other => kept.push_back(other),
            }
        }
        state.items = kept;
        state.frames = state.frames.saturating_sub(dropped);
        drop(state);
        self.ready.notify_one();
    }

    /// Sets the floor: messages numbered up to `covered` are not delivered
    /// live any more, and copies already queued are dropped. A connection
    /// that joined with a cursor (or at a position) covering them must not
    /// get them again. [`Outbound::push_resume`] does the same when it has
    /// frames to queue. Atomic with pushes, so no copy slips in between.
    pub(crate) fn discard_through(&self, covered: u64) {
        self.state.lock().discard_through(covered);
    }

    /// Queues a ping unless the connection is closing or one is pending,
    /// or writes it to the direct socket: `Written` then (for an event
    /// stream, the client's sign of life), `Queued`, or `Closing` when
    /// nothing was done.
    pub(crate) fn push_ping(&self) -> Pushed {
        let mut state = self.state.lock();
        // One pending ping is enough; more would only grow the queue of a
        // client that is not reading.
        let pending = matches!(state.items.back(), Some(Outgoing::Ping));
        if state.closing_since.is_some() || pending {
            return Pushed::Closing;
        }
        let item = match state.try_direct(|socket| socket.try_ping()) {
            Some(Direct::Written) => return Pushed::Written,
            Some(Direct::Rest(rest)) => Outgoing::Raw(rest),
            None => Outgoing::Ping,
        };
        state.items.push_back(item);
        drop(state);
        self.ready.notify_one();
        Pushed::Queued
    }

    /// Queues the end of the connection (`Close` or `Reconnect`) after
    /// what is already queued. Returns false if it was already closing.
    pub(crate) fn push_end(&self, end: Outgoing) -> bool {
        debug_assert!(matches!(end, Outgoing::Close(_) | Outgoing::Reconnect(_)));
        let mut state = self.state.lock();
        if state.closing_since.is_some() {
            return false;
        }
        state.closing_since = Some(Instant::now());
        state.items.push_back(end);
        drop(state);
        self.ready.notify_one();
        true
    }

    /// Queues a `reconnect` end like [`Outbound::push_end`], with the frame
    /// `make` builds from where the connection stands: the highest message
    /// number it was given, live or by its resume (0: none). Atomic with
    /// pushes: every message given before is queued ahead of the frame and
    /// covered by the number, and none is given after it (the connection is
    /// closing), so a client resuming from the frame's cursor misses
    /// nothing and gets nothing twice, even while a message is half way
    /// through the fan-out. Returns false (and does not call `make`) if it
    /// was already closing.
    pub(crate) fn push_reconnect(&self, make: impl FnOnce(u64) -> Frame) -> bool {
        let mut state = self.state.lock();
        if state.closing_since.is_some() {
            return false;
        }
        let frame = make(state.last.max(state.floor));
        state.closing_since = Some(Instant::now());
        state.items.push_back(Outgoing::Reconnect(frame));
        drop(state);
        self.ready.notify_one();
        true
    }

    /// Whether a producer answered on a socket that answers once (see
    /// [`DirectWrite::answers_once`]): the rest of the answer, if the
    /// socket did not take all of it, is the one item queued.
    pub(crate) fn is_answered(&self) -> bool {
        self.state.lock().answered
    }

    /// Completes when [`Outbound::is_answered`], checked each time the
    /// task is polled: it registers no wake-up of its own, as an answer
    /// written whole does not wake the task (that is its point). Wait on
    /// it beside something that does wake the task (the client's next
    /// request or its leaving, the poll's deadline); the rest of an answer
    /// written in part is queued and wakes [`Outbound::ready`].
    pub(crate) fn answered(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|_| {
            if self.is_answered() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    /// Whether an end has been queued.
    pub(crate) fn is_closing(&self) -> bool {
        self.state.lock().closing_since.is_some()
    }

    /// When the end was queued, by whichever producer queued it (the
    /// fan-out on overflow, the registry on `replaced`, drain, the timer):
    /// the close grace counts from here, not from the timer's last firing.
    pub(crate) fn closing_since(&self) -> Option<Instant> {
        self.state.lock().closing_since
    }

    /// Live frames (not counting a resume) queued and not yet taken: what
    /// the limit is held against.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state.lock().frames
    }

    /// Whether nothing is queued.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.state.lock().items.is_empty()
    }

    /// Moves everything queued to the end of `into` (an empty `into`
    /// trades allocations with the queue instead of copying). Until
    /// [`Outbound::done_writing`], producers queue rather than write to the
    /// direct socket.
    pub(crate) fn take(&self, into: &mut VecDeque<Outgoing>) {
        let mut state = self.state.lock();
        if into.is_empty() {
            std::mem::swap(&mut state.items, into);
        } else {
            into.extend(state.items.drain(..));
        }
        state.frames = 0;
        state.writing |= !into.is_empty();
    }

    /// The task wrote everything it took: producers may write directly
    /// again, unless more was queued meanwhile (then the task is already
    /// notified and takes it next).
    pub(crate) fn done_writing(&self) {
        let mut state = self.state.lock();
        if state.items.is_empty() {
            state.writing = false;
        }
    }

    /// Drops whatever is queued and keeps the socket for the task's own
    /// last words (a close for a protocol error, the reply to a client's
    /// close): nothing is queued or written directly afterwards. Returns
    /// the rest of a frame a producer wrote in part, which the task writes
    /// before its last words.
    pub(crate) fn abandon(&self) -> Option<Bytes> {
        let mut state = self.state.lock();
        let cut = state.take_cut_frame();
        state.items.clear();
        state.frames = 0;
        state.closing_since.get_or_insert_with(Instant::now);
        state.writing = true;
        cut
    }

    /// Completes once something was queued since the last `take`.
    pub(crate) async fn ready(&self) {
        self.ready.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::ReconnectReason;
    use crate::protocol::ws_codec;

    fn frame(s: &str) -> Frame {
        Frame::error("test", s)
    }

    /// A WebSocket-like socket that takes at most `room` more bytes,
    /// recording them.
    #[derive(Debug, Default)]
    struct FakeSocket {
        wire: Mutex<Vec<u8>>,
        room: Mutex<usize>,
    }

    impl FakeSocket {
        fn with_room(room: usize) -> Arc<Self> {
            let socket = Self::default();
            *socket.room.lock() = room;
            Arc::new(socket)
        }

        fn write(&self, bytes: &Bytes) -> io::Result<Option<Bytes>> {
            let mut room = self.room.lock();
            if *room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = bytes.len().min(*room);
            *room -= n;
            self.wire.lock().extend_from_slice(&bytes[..n]);
            Ok((n < bytes.len()).then(|| bytes.slice(n..)))
        }
    }

    impl DirectWrite for FakeSocket {
        fn try_frame(&self, frame: &Frame) -> io::Result<Option<Bytes>> {
            self.write(frame.ws())
        }

        fn try_ping(&self) -> io::Result<Option<Bytes>> {
            self.write(&Bytes::from_static(ws_codec::PING))
        }

        fn try_raw(&self, bytes: &Bytes) -> io::Result<Option<Bytes>> {
            self.write(bytes)
        }
    }

    /// What the task would write for `items`, as a WebSocket.
    fn wire_of(items: VecDeque<Outgoing>) -> Vec<u8> {
        let mut out = Vec::new();
        for item in items {
            match item {
                Outgoing::Frame(frame) => out.extend_from_slice(frame.ws()),
                Outgoing::Raw(bytes) => out.extend_from_slice(&bytes),
                Outgoing::Ping => out.extend_from_slice(ws_codec::PING),
                other => panic!("unexpected {other:?}"),
            }
        }
        out
    }

    #[test]
    fn an_idle_socket_is_written_directly_and_the_task_is_not_woken() {
        let q = Outbound::new(4);
        let socket = FakeSocket::with_room(1 << 20);
        q.set_direct(socket.clone());
        assert_eq!(q.push_frame(&frame("a")), Pushed::Written);
        q.push_ping();
        assert!(q.is_empty(), "nothing queued");
        let want: Vec<u8> = [&frame("a").ws()[..], ws_codec::PING].concat();
        assert_eq!(*socket.wire.lock(), want);
    }

    #[test]
    fn what_does_not_fit_is_queued_and_everything_after_it_waits_for_the_task() {
        let q = Outbound::new(8);
        let (a, b, c) = (frame("first"), frame("second"), frame("third"));
        // Room for part of the first frame only.
        let socket = FakeSocket::with_room(5);
        q.set_direct(socket.clone());
        assert_eq!(q.push_frame(&a), Pushed::Queued, "the rest is queued");
        *socket.room.lock() = 1 << 20;
        // The socket has room again, but the queue is not empty: in order.
        assert_eq!(q.push_frame(&b), Pushed::Queued);
        let mut batch = VecDeque::new();
        q.take(&mut batch);
        // The task holds the batch: producers still queue behind it.
        assert_eq!(q.push_frame(&c), Pushed::Queued);
        let written = wire_of(std::mem::take(&mut batch));
        q.done_writing();
        q.take(&mut batch);
        let written = [written, wire_of(std::mem::take(&mut batch))].concat();
        q.done_writing();
        // Idle again: direct once more.
        assert_eq!(q.push_frame(&a), Pushed::Written);
        let mut wire = socket.wire.lock().clone();
        let direct_tail = wire.split_off(5);
        let whole: Vec<u8> = [&wire[..], &written[..], &direct_tail[..]].concat();
        let want: Vec<u8> = [a.ws(), b.ws(), c.ws(), a.ws()]
            .iter()
            .flat_map(|bytes| bytes.iter().copied())
            .collect();
        assert_eq!(whole, want, "the byte stream is the pushes in order");
    }

    #[test]
    fn a_protocol_reply_goes_out_in_order_with_the_frames() {
        // A pong owed before an answer: written directly while the socket
        // is idle, so the answer written next comes after it, not before.
        let q = Outbound::new(4);
        let socket = FakeSocket::with_room(1 << 20);
        q.set_direct(socket.clone());
        let pong = Bytes::from_static(&[0x8a, 0x00]);
        q.push_raw(pong.clone());
        assert_eq!(q.push_frame(&frame("answer")), Pushed::Written);
        assert!(q.is_empty(), "nothing queued");
        assert_eq!(
            *socket.wire.lock(),
            [&pong[..], frame("answer").ws()].concat()
        );
        // Behind a queued frame, the reply waits its turn.
        *socket.room.lock() = 0;
        assert_eq!(q.push_frame(&frame("queued")), Pushed::Queued);
        *socket.room.lock() = 1 << 20;
        q.push_raw(pong.clone());
        let mut batch = VecDeque::new();
        q.take(&mut batch);
        assert_eq!(wire_of(batch), [frame("queued").ws(), &pong[..]].concat());
    }

    /// A parked poll's socket: takes one frame (the whole answer).
    #[derive(Debug)]
    struct OnceSocket(Arc<FakeSocket>);

    impl DirectWrite for OnceSocket {
        fn try_frame(&self, frame: &Frame) -> io::Result<Option<Bytes>> {
            self.0.write(frame.ws())
        }

        fn try_ping(&self) -> io::Result<Option<Bytes>> {
            Err(io::ErrorKind::WouldBlock.into())
        }

        fn answers_once(&self) -> bool {
            true
        }
    }

    /// Whether the task was woken (a wake-up is pending for it).
    fn woken(q: &Outbound) -> bool {
        let mut ready = std::pin::pin!(q.ready());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        ready.as_mut().poll(&mut cx).is_ready()
    }

    /// Whether [`Outbound::answered`] completes when polled now.
    fn answered_now(q: &Outbound) -> bool {
        let mut answered = std::pin::pin!(q.answered());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        answered.as_mut().poll(&mut cx).is_ready()
    }

    #[test]
    fn a_socket_that_answers_once_takes_one_frame_and_the_task_is_not_woken() {
        let q = Outbound::new(4);
        let socket = FakeSocket::with_room(1 << 20);
        q.set_direct(Arc::new(OnceSocket(socket.clone())));
        assert!(!answered_now(&q));
        assert_eq!(q.push_ping(), Pushed::Queued, "a poll is not pinged");
        let mut batch = VecDeque::new();
        q.take(&mut batch);
        q.done_writing();
        assert!(woken(&q));
        assert_eq!(q.push_frame(&frame("answer")), Pushed::Written);
        assert!(!woken(&q), "the task is not woken");
        assert!(q.is_answered() && answered_now(&q));
        // Answered: nothing more goes to the connection.
        assert_eq!(q.push_frame(&frame("later")), Pushed::Closing);
        assert!(!q.push_end(Outgoing::Close(CloseReason::Idle)));
        assert!(!q.push_reconnect(|_| frame("reconnect")));
        assert!(q.is_empty() && q.closing_since().is_some());
        assert_eq!(*socket.wire.lock(), frame("answer").ws().to_vec());
        assert!(q.clear_direct(), "the task learns it was answered");
    }

    #[test]
    fn an_answer_written_in_part_leaves_its_rest_for_the_woken_task() {
        let q = Outbound::new(4);
        let socket = FakeSocket::with_room(5);
        q.set_direct(Arc::new(OnceSocket(socket.clone())));
        let answer = frame("answered in two writes");
        assert_eq!(q.push_frame(&answer), Pushed::Queued);
        assert!(woken(&q) && q.is_answered());
        assert_eq!(q.push_frame(&frame("later")), Pushed::Closing);
        let mut batch = VecDeque::new();
        q.take(&mut batch);
        assert_eq!(batch.len(), 1, "{batch:?}");
        let wire = [&socket.wire.lock()[..], &wire_of(batch)[..]].concat();
        assert_eq!(wire, answer.ws().to_vec());
    }

    #[test]
    fn a_socket_that_answers_once_but_is_full_leaves_the_answer_to_the_task() {
        let q = Outbound::new(4);
        q.set_direct(Arc::new(OnceSocket(FakeSocket::with_room(0))));
        assert_eq!(q.push_frame(&frame("a")), Pushed::Queued);
        assert!(woken(&q));
        assert!(!q.is_answered() && !answered_now(&q));
        assert!(!q.clear_direct());
        let mut batch = VecDeque::new();
        q.take(&mut batch);
        assert_eq!(batch, [Outgoing::Frame(frame("a"))]);
    }

    #[test]
    fn a_full_socket_queues_and_counts_against_the_limit() {
        let q = Outbound::new(2);
        q.set_direct(FakeSocket::with_room(0));
        assert_eq!(q.push_frame(&frame("a")), Pushed::Queued);
        assert_eq!(q.push_frame(&frame("b")), Pushed::Queued);
        assert_eq!(q.push_frame(&frame("c")), Pushed::Overflowed);
        q.clear_direct();
    }

    #[test]
    fn overflow_clears_the_queue_and_queues_a_slow_close() {
        let q = Outbound::new(2);
        assert_eq!(q.push_frame(&frame("a")), Pushed::Queued);
        assert_eq!(q.push_frame(&frame("b")), Pushed::Queued);
        assert_eq!(q.closing_since(), None);
        assert_eq!(q.push_frame(&frame("c")), Pushed::Overflowed);
        assert!(
            q.closing_since().is_some(),
            "the grace counts from the overflow"
        );
        assert_eq!(q.push_frame(&frame("d")), Pushed::Closing);
        let mut out = VecDeque::new();
        q.take(&mut out);
        assert_eq!(out, [Outgoing::Close(CloseReason::Slow)]);
    }

    #[test]
    fn overflow_keeps_the_rest_of_a_frame_written_in_part_before_the_close() {
        let q = Outbound::new(2);
        let a = frame("cut in two on the wire");
        let socket = FakeSocket::with_room(5);
        q.set_direct(socket.clone());
        assert_eq!(q.push_frame(&a), Pushed::Queued, "the rest is queued");
        assert_eq!(q.push_frame(&frame("b")), Pushed::Queued);
        assert_eq!(q.push_frame(&frame("c")), Pushed::Overflowed);
        let mut out = VecDeque::new();
        q.take(&mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[1], Outgoing::Close(CloseReason::Slow));
        let Some(Outgoing::Raw(rest)) = out.front() else {
            panic!("the rest goes first: {out:?}");
        };
        let wire = [&socket.wire.lock()[..], &rest[..]].concat();
        assert_eq!(wire, &a.ws()[..], "the frame is whole before the close");
    }

    #[test]
    fn abandoning_hands_back_the_rest_of_a_frame_written_in_part() {
        let q = Outbound::new(4);
        let a = frame("cut in two on the wire");
        let socket = FakeSocket::with_room(5);
        q.set_direct(socket.clone());
        assert_eq!(q.push_frame(&a), Pushed::Queued);
        assert_eq!(q.push_frame(&frame("b")), Pushed::Queued);
        let rest = q.abandon().expect("the rest of the cut frame");
        let wire = [&socket.wire.lock()[..], &rest[..]].concat();
        assert_eq!(wire, &a.ws()[..]);
        assert!(q.is_empty());
        assert_eq!(q.abandon(), None, "nothing cut any more");
    }

    #[test]
    fn taking_resets_the_count_so_a_reader_that_keeps_up_never_overflows() {
        let q = Outbound::new(2);
        let mut out = VecDeque::new();
        for _ in 0..10 {
            assert_eq!(q.push_frame(&frame("a")), Pushed::Queued);
            assert_eq!(q.push_frame(&frame("b")), Pushed::Queued);
            q.take(&mut out);
            out.clear();
        }
        q.push_ping();
        q.take(&mut out);
        assert_eq!(out, [Outgoing::Ping]);
    }

    #[test]
    fn a_resume_longer_than_the_limit_does_not_count_against_it() {
        let q = Outbound::new(2);
        let replay: Vec<Frame> = (0..5).map(|i| frame(&i.to_string())).collect();
        q.push_resume(replay.clone(), 0);
        assert_eq!(q.push_frame(&frame("live 1")), Pushed::Queued);
        assert_eq!(q.push_frame(&frame("live 2")), Pushed::Queued);
        assert_eq!(q.push_frame(&frame("live 3")), Pushed::Overflowed);
        let q = Outbound::new(2);
        q.push_frame(&frame("live"));
        q.push_resume(replay.clone(), 0);
        let mut out = VecDeque::new();
        q.take(&mut out);
        let want: Vec<Outgoing> = replay
            .into_iter()
            .chain([frame("live")])
            .map(Outgoing::Frame)
            .collect();
        assert_eq!(Vec::from(out), want, "the replay goes first");
    }

    #[test]
    fn discarding_drops_only_covered_messages_and_frees_their_room() {
        let q = Outbound::new(3);
        let message = |seq: u64| {
            Frame::message(
                seq,
                "m",
                "c",
                crate::protocol::frame::Stream::Broadcast,
                &serde_json::value::RawValue::from_string("1".into()).expect("json"),
            )
        };
        for seq in [3, 4, 5] {
            assert_eq!(q.push_frame(&message(seq)), Pushed::Queued);
        }
        q.push_ping();
        q.discard_through(4);
        assert_eq!(q.len(), 1, "two of three frames dropped");
        assert_eq!(q.push_frame(&message(6)), Pushed::Queued, "room again");
        let mut out = VecDeque::new();
        q.take(&mut out);
        assert_eq!(
            Vec::from(out),
            [
                Outgoing::Frame(message(5)),
                Outgoing::Ping,
                Outgoing::Frame(message(6))
            ]
        );
    }

    #[test]
    fn only_the_first_end_is_queued() {
        let q = Outbound::new(4);
        let drain = Frame::reconnect(ReconnectReason::Draining, 100, "c");
        assert!(q.push_end(Outgoing::Reconnect(drain.clone())));
        let since = q.closing_since().expect("closing");
        assert!(!q.push_end(Outgoing::Close(CloseReason::Idle)));
        assert_eq!(q.closing_since(), Some(since), "the first end's time stays");
        q.push_ping();
        assert_eq!(q.push_frame(&frame("late")), Pushed::Closing);
        let mut out = VecDeque::new();
        q.take(&mut out);
        assert_eq!(out, [Outgoing::Reconnect(drain)]);
    }

    #[test]
    fn a_reconnect_carries_the_highest_message_given_and_nothing_follows_it() {
        let message = |seq: u64| {
            Frame::message(
                seq,
                "m",
                "c",
                crate::protocol::frame::Stream::Broadcast,
                &serde_json::value::RawValue::from_string("1".into()).expect("json"),
            )
        };
        let reconnect =
            |seen: u64| Frame::reconnect(ReconnectReason::Draining, 1, &seen.to_string());
        // Nothing given: 0.
        let q = Outbound::new(8);
        assert!(q.push_reconnect(reconnect));
        let mut out = VecDeque::new();
        q.take(&mut out);
        assert_eq!(Vec::from(out), [Outgoing::Reconnect(reconnect(0))]);
        // Live messages, one written directly: the highest of them.
        let q = Outbound::new(8);
        q.set_direct(FakeSocket::with_room(1 << 20));
        assert_eq!(q.push_frame(&message(7)), Pushed::Written);
        q.clear_direct();
        assert_eq!(q.push_frame(&message(8)), Pushed::Queued);
        q.push_ping();
        assert!(q.push_reconnect(reconnect));
        assert_eq!(q.push_frame(&message(9)), Pushed::Closing, "none after it");
        assert!(!q.push_reconnect(|_| panic!("already closing")));
        let mut out = VecDeque::new();
        q.take(&mut out);
        assert_eq!(
            Vec::from(out),
            [
                Outgoing::Frame(message(8)),
                Outgoing::Ping,
                Outgoing::Reconnect(reconnect(8))
            ]
        );
        // A resume that covered more than any live message: its floor.
        let q = Outbound::new(8);
        q.push_frame(&message(3));
        q.push_resume(vec![message(4), message(5)], 5);
        assert!(q.push_reconnect(reconnect));
        let mut out = VecDeque::new();
        q.take(&mut out);
        assert_eq!(out.back(), Some(&Outgoing::Reconnect(reconnect(5))));
    }

    #[tokio::test]
    async fn a_push_before_waiting_is_not_lost() {
        let q = Outbound::new(4);
        q.push_frame(&frame("x"));
        tokio::time::timeout(std::time::Duration::from_secs(5), q.ready())
            .await
            .expect("notified");
    }
}
