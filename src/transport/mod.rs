//! The three transports (WebSocket, long-poll, SSE), the client admission
//! they share, and the frames they carry.

pub mod client;
pub mod cors;
pub mod frame;
pub mod longpoll;
pub mod pipelined;
pub mod sse;
pub mod websocket;
pub mod wire;
pub mod ws_codec;
