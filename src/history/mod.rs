//! Message history, cursors and idempotency keys (pure: no clock, no I/O).

pub mod cursor;
pub(crate) mod dedupe;
pub(crate) mod ring;
pub(crate) mod store;

pub(crate) use cursor::NodePosition;
pub use cursor::{BadCursor, ConnCursor, Coverage, Cursor, Position};
pub use dedupe::Dedupe;
pub use ring::Ring;
pub use store::{History, Recovery, StreamKey, TooManyStreams};
