//! The three transports (WebSocket, long-poll, SSE), the client admission
//! they share, and the frames they carry.

pub mod client;
pub mod frame;
pub mod websocket;
