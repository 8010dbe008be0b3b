//! The transports' names: how a client is connected.

/// How a client is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A WebSocket.
    Ws,
    /// A parked long-poll.
    Poll,
    /// A server-sent events stream.
    Sse,
}

impl Transport {
    /// The metric label and log field value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ws => "ws",
            Self::Poll => "poll",
            Self::Sse => "sse",
        }
    }

    /// Index into per-transport arrays, in the order of [`crate::metrics::TRANSPORTS`].
    pub fn index(self) -> usize {
        self as usize
    }
}
