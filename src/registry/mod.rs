//! The registry: who is connected. One object per user (with its
//! long-poll session), its live connections, and each connection's
//! outbound queue, which the fan-out writes into (or straight to the
//! socket, when the connection is idle).

pub mod conn;
pub mod outbound;
pub mod users;

pub use conn::{Conn, ConnId};
pub use outbound::{DirectWrite, Outbound, Outgoing, Pushed};
pub use users::{AtCapacity, Attached, Lane, PollSession, Registry, User};
