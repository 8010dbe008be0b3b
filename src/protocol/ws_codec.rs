//! WebSocket framing without a socket: what the server writes, encoded
//! once, and what clients send, parsed from bytes the connection's task
//! has already read.
//!
//! Server frames are simple (never masked, never fragmented): a message is
//! framed once per push, and the same bytes go to every recipient's socket.
//! Client frames are parsed by tungstenite's protocol state machine, fed
//! from memory, so the socket itself stays free for the fan-out to write
//! to (see `registry::outbound`). Whatever tungstenite answers by itself
//! (pongs, the reply to a client's close) is captured as bytes for the
//! connection's queue instead of being written behind the queue's back.

use std::io::{self, Read, Write};

use bytes::{BufMut, Bytes, BytesMut};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{
    CloseFrame, Role, WebSocketConfig, WebSocketContext,
};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

/// An unsolicited server ping with no payload (RFC 6455 §5.5.2).
pub(crate) const PING: &[u8] = &[0x89, 0x00];

/// `payload` as one unmasked, final text frame (RFC 6455 §5.2).
pub(crate) fn text_frame(payload: &[u8]) -> Bytes {
    let len = payload.len();
    let mut frame = BytesMut::with_capacity(len + 10);
    frame.put_u8(0x81); // FIN, opcode 1 (text)
    match len {
        0..=125 => frame.put_u8(len as u8),
        126..=0xFFFF => {
            frame.put_u8(126);
            frame.put_u16(len as u16);
        }
        _ => {
            frame.put_u8(127);
            frame.put_u64(len as u64);
        }
    }
    frame.put_slice(payload);
    frame.freeze()
}

/// The client side of one connection, parsed from memory.
#[derive(Debug)]
pub(crate) struct Inbound {
    ctx: WebSocketContext,
    replies: Vec<u8>,
}

impl Inbound {
    /// A server-side parser held to `config`'s frame and message limits.
    pub(crate) fn new(config: WebSocketConfig) -> Self {
        Self {
            ctx: WebSocketContext::new(Role::Server, Some(config)),
            replies: Vec::new(),
        }
    }

    /// The next complete message in `input` (consuming what it reads), or
    /// `None` once `input` holds no complete frame any more (the rest is
    /// kept for the next call). Errors are the client's (a broken frame, a
    /// frame too big) or the end of the close handshake.
    pub(crate) fn next_message(&mut self, input: &mut &[u8]) -> Result<Option<Message>, WsError> {
        let mut feed = Feed {
            input,
            replies: &mut self.replies,
        };
        match self.ctx.read(&mut feed) {
            Ok(message) => Ok(Some(message)),
            Err(WsError::Io(err)) if err.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Starts the close handshake from our side with `code` and `reason`;
    /// returns the close frame to write. `None` if a close was already sent
    /// or received (there is nothing more to say).
    pub(crate) fn close_frame(&mut self, code: CloseCode, reason: &'static str) -> Option<Bytes> {
        let frame = CloseFrame {
            code,
            reason: Utf8Bytes::from_static(reason),
        };
        let mut none: &[u8] = &[];
        let mut feed = Feed {
            input: &mut none,
            replies: &mut self.replies,
        };
        self.ctx.close(&mut feed, Some(frame)).ok()?;
        self.take_replies()
    }

    /// What the protocol answered by itself since the last call (pongs to
    /// the client's pings, the reply to its close), to be written in order.
    pub(crate) fn take_replies(&mut self) -> Option<Bytes> {
        if self.replies.is_empty() {
            return None;
        }
        Some(Bytes::from(std::mem::take(&mut self.replies)))
    }

    /// Writes out replies tungstenite queued but has not flushed yet (the
    /// answer to a client's close), so [`Inbound::take_replies`] sees them.
    pub(crate) fn flush(&mut self) {
        let mut none: &[u8] = &[];
        let mut feed = Feed {
            input: &mut none,
            replies: &mut self.replies,
        };
        let _ = self.ctx.flush(&mut feed);
    }
}

/// The stream tungstenite reads from and writes to: bytes already read
/// from the socket in, captured replies out. An empty input is
/// `WouldBlock`, never end of file, so a partial frame waits for more.
struct Feed<'a, 'b> {
    input: &'a mut &'b [u8],
    replies: &'a mut Vec<u8>,
}

impl Read for Feed<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.input.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.input.read(buf)
    }
}

impl Write for Feed<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.replies.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Control, Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::{Frame as WireFrame, FrameHeader};

    /// A masked client frame, as a browser sends it.
    fn client_frame(message: Message) -> Vec<u8> {
        let mut ctx = WebSocketContext::new(Role::Client, None);
        let mut none: &[u8] = &[];
        let mut out = Vec::new();
        let mut feed = Feed {
            input: &mut none,
            replies: &mut out,
        };
        ctx.write(&mut feed, message).expect("encode");
        ctx.flush(&mut feed).expect("flush");
        out
    }

    fn parse_server_frame(bytes: &[u8]) -> (FrameHeader, Vec<u8>) {
        let mut cursor = io::Cursor::new(bytes);
        let (header, len) = FrameHeader::parse(&mut cursor)
            .expect("valid header")
            .expect("complete header");
        let start = cursor.position() as usize;
        let payload = bytes[start..].to_vec();
        assert_eq!(payload.len() as u64, len, "length field matches");
        (header, payload)
    }

    #[test]
    fn text_frames_use_the_shortest_length_encoding_and_parse_back() {
        for len in [0usize, 1, 125, 126, 127, 65_535, 65_536, 200_000] {
            let payload = vec![b'x'; len];
            let frame = text_frame(&payload);
            let header_len = match len {
                0..=125 => 2,
                126..=65_535 => 4,
                _ => 10,
            };
            assert_eq!(frame.len(), header_len + len, "len {len}");
            let (header, parsed) = parse_server_frame(&frame);
            assert!(header.is_final);
            assert!(header.mask.is_none(), "server frames are never masked");
            assert_eq!(parsed, payload);
            let wire = WireFrame::message(payload.clone(), OpCode::Data(Data::Text), true);
            let mut reference = Vec::new();
            wire.format(&mut reference).expect("format");
            assert_eq!(
                &frame[..],
                &reference[..],
                "same bytes as tungstenite's own"
            );
        }
    }

    #[test]
    fn the_ping_is_an_empty_final_ping() {
        let (header, payload) = parse_server_frame(PING);
        assert!(header.is_final);
        assert_eq!(header.opcode, OpCode::Control(Control::Ping));
        assert!(payload.is_empty());
    }

    #[test]
    fn messages_split_anywhere_come_out_whole_and_in_order() {
        let mut wire = client_frame(Message::text("first"));
        wire.extend(client_frame(Message::text("second")));
        for cut in 0..wire.len() {
            let mut inbound = Inbound::new(WebSocketConfig::default());
            let mut got = Vec::new();
            for chunk in [&wire[..cut], &wire[cut..]] {
                let mut input = chunk;
                while let Some(message) = inbound.next_message(&mut input).expect("valid") {
                    got.push(message);
                }
                assert!(input.is_empty(), "every byte is taken");
            }
            assert_eq!(
                got,
                [Message::text("first"), Message::text("second")],
                "cut {cut}"
            );
        }
    }

    #[test]
    fn a_client_ping_is_answered_with_a_captured_pong() {
        let mut inbound = Inbound::new(WebSocketConfig::default());
        let wire = client_frame(Message::Ping(Bytes::from_static(b"hi")));
        let mut input = &wire[..];
        let message = inbound.next_message(&mut input).expect("valid");
        assert_eq!(message, Some(Message::Ping(Bytes::from_static(b"hi"))));
        // The pong is written when tungstenite next reads or flushes.
        assert_eq!(inbound.next_message(&mut input).expect("valid"), None);
        let pong = inbound.take_replies().expect("a pong");
        let (header, payload) = parse_server_frame(&pong);
        assert_eq!(header.opcode, OpCode::Control(Control::Pong));
        assert_eq!(payload, b"hi");
        assert_eq!(inbound.take_replies(), None, "taken once");
    }

    #[test]
    fn a_client_close_is_answered_once_and_ours_is_not_repeated() {
        let mut inbound = Inbound::new(WebSocketConfig::default());
        let wire = client_frame(Message::Close(None));
        let mut input = &wire[..];
        assert!(matches!(
            inbound.next_message(&mut input),
            Ok(Some(Message::Close(None)))
        ));
        inbound.flush();
        assert!(inbound.take_replies().is_some(), "the close is answered");
        assert_eq!(
            inbound.close_frame(CloseCode::Away, "x"),
            None,
            "no second close after the client's"
        );
    }

    #[test]
    fn after_our_close_the_clients_reply_ends_the_handshake() {
        let mut inbound = Inbound::new(WebSocketConfig::default());
        let ours = inbound
            .close_frame(CloseCode::Away, "reconnect")
            .expect("a close frame");
        let (_, payload) = parse_server_frame(&ours);
        assert_eq!(&payload[..2], &1001u16.to_be_bytes());
        assert_eq!(&payload[2..], b"reconnect");
        let wire = client_frame(Message::Close(None));
        let mut input = &wire[..];
        assert!(matches!(
            inbound.next_message(&mut input),
            Ok(Some(Message::Close(_)))
        ));
        inbound.flush();
        assert_eq!(inbound.take_replies(), None, "a reply is not answered");
    }

    #[test]
    fn an_oversized_frame_is_a_capacity_error() {
        let config = WebSocketConfig::default()
            .max_frame_size(Some(16))
            .max_message_size(Some(16));
        let mut inbound = Inbound::new(config);
        let wire = client_frame(Message::text("x".repeat(100)));
        let mut input = &wire[..];
        assert!(matches!(
            inbound.next_message(&mut input),
            Err(WsError::Capacity(_))
        ));
    }

    #[test]
    fn an_unmasked_client_frame_is_a_protocol_error() {
        let mut inbound = Inbound::new(WebSocketConfig::default());
        let wire = text_frame(b"not masked");
        let mut input = &wire[..];
        assert!(matches!(
            inbound.next_message(&mut input),
            Err(WsError::Protocol(_))
        ));
    }
}
