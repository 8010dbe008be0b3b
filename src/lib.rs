//! pushgate: a long-connection push gateway.
//!
//! Browsers hold WebSockets, long-polls or EventSource streams keyed by a
//! user id; backends push to everyone or to chosen users. Every timeout
//! lives in one hashed timing wheel whose entries are reused ([`wheel`]).

pub mod metrics;
pub mod session;
pub mod wheel;
