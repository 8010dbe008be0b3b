//! The three transports (WebSocket, long-poll, SSE) and the client
//! admission they share.

pub mod cors;
pub mod longpoll;
pub mod open;
pub mod pipelined;
pub mod sse;
pub mod websocket;

#[cfg(test)]
mod fault_tests;
