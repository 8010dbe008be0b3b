//! The bus: where an accepted push is numbered and fanned out.
//!
//! The memory bus (the default) serves one process; a Redis bus lets many
//! share users. The rest of the gateway sees only [`Bus`].

pub mod memory;

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;

use crate::api::push::PushTarget;
use crate::history::Cursor;

pub use memory::MemoryBus;

/// A push accepted by the API, to be numbered and delivered.
#[derive(Debug)]
pub struct Publish {
    /// The push id: the caller's idempotency key or a generated one.
    pub id: String,
    /// Everyone, or the users named.
    pub target: PushTarget,
    /// The payload, verbatim.
    pub data: Box<RawValue>,
}

/// What became of a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The push id.
    pub id: String,
    /// The message's position: the cursor every recipient's frame carries.
    pub cursor: Cursor,
    /// Distinct users addressed (0 for a broadcast).
    pub users: usize,
    /// True when the id was seen within the idempotency window: nothing
    /// was delivered again.
    pub duplicate: bool,
}

/// The broker could not take the message; nothing was accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    /// The broker is unreachable.
    #[error("broker unavailable: {0}")]
    Unavailable(String),
}

/// Numbers messages, keeps them in history and delivers them to every
/// connection that should see them.
pub trait Bus: Send + Sync + std::fmt::Debug + 'static {
    /// Accepts a message whole or not at all.
    fn publish(&self, message: Publish) -> BoxFuture<'_, Result<Published, BusError>>;

    /// Whether the broker is reachable (`/readyz`).
    fn is_ready(&self) -> bool;

    /// The current history epoch and the last sequence number issued.
    fn position(&self) -> Cursor;
}
