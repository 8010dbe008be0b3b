//! Users and their connections: ids, the per-user object, the registry,
//! and each connection's outbound queue.

pub mod conn;
pub mod expiry;
pub mod outbound;
pub mod registry;
pub mod user_id;

pub use conn::{Conn, ConnId, Transport};
pub use outbound::{DirectWrite, Outbound, Outgoing, Pushed};
pub use registry::{AtCapacity, Attached, Lane, Registry, Session, User};
pub use user_id::{BadUserId, UserId};
