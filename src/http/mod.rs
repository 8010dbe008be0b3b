//! HTTP vocabulary every layer shares: the response body type, the one
//! map from errors to status codes, request heads (their limits, the
//! parser for the raw socket, and one view of a head whichever parser
//! read it), and the raw HTTP/1.1 encoding used where pushgate writes to
//! the socket itself.
//!
//! Imports nothing of ours: frames, transports and the API build on it.

pub(crate) mod body;
pub(crate) mod error;
pub(crate) mod head;
pub(crate) mod view;
pub(crate) mod wire;

pub(crate) use body::{Body, empty, full};
pub(crate) use error::ApiError;

/// The longest request head accepted (request line and headers), in bytes;
/// a longer one gets `431`.
pub const MAX_REQUEST_HEAD_BYTES: usize = 32 * 1024;

/// The most headers a request may carry.
pub(crate) const MAX_HEADERS: usize = 64;

/// The address of the TCP peer a request came from, as a request
/// extension (behind a reverse proxy, the proxy's address). The connect
/// proxy is its only reader, so the server sets it only when one is
/// configured: a request's first extension costs two allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteAddr(pub std::net::SocketAddr);
