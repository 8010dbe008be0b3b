//! The protocol's vocabulary: frames and their encodings (JSON, SSE,
//! WebSocket), close and reconnect reasons, user ids, the transports'
//! names. Pure; every room above may use it.

pub(crate) mod channel;
pub(crate) mod client_frame;
pub(crate) mod frame;
pub(crate) mod transport;
pub(crate) mod user_id;
pub(crate) mod ws_codec;

pub use channel::{BadChannel, Channel, PublicChannels};
pub use transport::Transport;
pub use user_id::{BadUserId, UserId};
