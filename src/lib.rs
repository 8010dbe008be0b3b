//! pushgate: a long-connection push gateway.
//!
//! Browsers hold WebSockets, long-polls or EventSource streams keyed by a
//! user id; backends push to everyone or to chosen users. Every timeout
//! lives in one hashed timing wheel whose entries are reused ([`wheel`]).
//!
//! The data flow: `POST /push` ([`api`]) → [`bus`] (numbering, fan-out) →
//! [`registry`] (users, connections, per-connection queues) → [`transport`]
//! → browser; [`deadlines`] arms and fires every timer entry beside them.
//! [`server::run`] builds and serves the whole gateway.

pub mod api;
pub mod auth;
pub(crate) mod bus;
pub(crate) mod clamp;
pub mod config;
pub(crate) mod deadlines;
pub mod gateway;
pub mod history;
pub mod http;
pub(crate) mod linger;
pub(crate) mod metrics;
pub mod peers;
pub mod protocol;
pub(crate) mod registry;
pub mod server;
pub mod telemetry;
pub(crate) mod transport;
pub mod wheel;

pub use server::{Server, run};
