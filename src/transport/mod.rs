//! The three transports (WebSocket, long-poll, SSE) and the client
//! admission they share.

pub(crate) mod cors;
pub(crate) mod longpoll;
pub(crate) mod open;
pub(crate) mod pipelined;
pub(crate) mod sse;
pub(crate) mod websocket;

#[cfg(test)]
mod fault_tests;
