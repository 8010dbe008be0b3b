//! Message history and cursors (pure).

pub mod cursor;

pub use cursor::{BadCursor, Cursor};
