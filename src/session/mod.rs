//! Users and their connections: ids, the per-user object, the registry.

pub mod user_id;

pub use user_id::{BadUserId, UserId};
