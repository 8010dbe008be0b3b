//! The registry: who is connected. One object per user (with its
//! long-poll session), its live connections, and each connection's
//! outbound queue, which the fan-out writes into (or straight to the
//! socket, when the connection is idle).

pub(crate) mod channels;
pub(crate) mod conn;
pub(crate) mod outbound;
pub(crate) mod table;
pub(crate) mod users;

pub(crate) use channels::MembershipChange;
pub(crate) use conn::{Conn, ConnId};
pub(crate) use outbound::{DirectWrite, Outgoing, Pushed};
pub(crate) use users::{AtCapacity, Attached, Lane, Registry, User};
