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

/// Where streams live on a Redis Cluster (`[broker] cluster = true`): the
/// names of a stream's sharded pub/sub channel and history key, for
/// operators' tools and tests that look inside the cluster.
#[derive(Debug, Clone)]
pub struct ClusterLayout(bus::cluster::shards::Shards);

impl ClusterLayout {
    /// The layout of `[broker] key_prefix` `prefix` with `shards` shards.
    pub fn new(prefix: &str, shards: usize) -> Self {
        Self(bus::cluster::shards::Shards::new(prefix, shards))
    }

    /// How many shards the sequence has: the positions in a cursor.
    pub fn shards(&self) -> usize {
        self.0.count()
    }

    /// The sharded channel of the broadcast stream.
    pub fn broadcast_channel(&self) -> String {
        self.0.bus(bus::cluster::shards::StreamName::Broadcast)
    }

    /// The sharded channel of `user`'s stream.
    pub fn user_channel(&self, user: &str) -> String {
        self.0.bus(bus::cluster::shards::StreamName::User(user))
    }

    /// The sharded channel of channel `name`'s stream.
    pub fn channel_channel(&self, name: &str) -> String {
        self.0.bus(bus::cluster::shards::StreamName::Channel(name))
    }

    /// The history key of `user`'s stream.
    pub fn user_history(&self, user: &str) -> String {
        self.0.history(bus::cluster::shards::StreamName::User(user))
    }

    /// The history key of channel `name`'s stream.
    pub fn channel_history(&self, name: &str) -> String {
        self.0
            .history(bus::cluster::shards::StreamName::Channel(name))
    }
}
