//! Users and their connections: the per-user object, the registry,
//! and each connection's outbound queue.

pub mod conn;
pub mod outbound;
pub mod registry;

pub use conn::{Conn, ConnId};
pub use outbound::{DirectWrite, Outbound, Outgoing, Pushed};
pub use registry::{AtCapacity, Attached, Lane, PollSession, Registry, User};
