//! The backend's and operators' endpoints: `POST /push` (its handler and
//! pure parser), presence, health, readiness and metrics, demo mode, and
//! the static files. The server's router dispatches here; errors map to
//! HTTP in `http::error`.

pub(crate) mod demo;
pub(crate) mod operators;
pub mod push;
pub(crate) mod request;
pub(crate) mod static_files;

use tracing::warn;

use crate::bus::BusError;
use crate::http::ApiError;
use crate::protocol::{BadChannel, BadUserId};

/// For a user id taken from a path or query; the message is the reason.
impl From<BadUserId> for ApiError {
    fn from(err: BadUserId) -> Self {
        Self::BadUserId(err.to_string())
    }
}

/// For a channel name taken from a path, query or body.
impl From<BadChannel> for ApiError {
    fn from(err: BadChannel) -> Self {
        Self::BadChannel(err.to_string())
    }
}

/// A push or presence request the bus could not take; logged here once.
impl From<BusError> for ApiError {
    fn from(err: BusError) -> Self {
        match err {
            BusError::Unavailable(why) => {
                warn!(error = %why, "broker unavailable");
                Self::Unavailable {
                    retry_after_secs: 1,
                    reason: "broker unavailable".into(),
                }
            }
            BusError::HistoryFull(max) => {
                warn!(
                    max,
                    "push refused: history holds [history] max_streams streams"
                );
                Self::HistoryFull { max }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_user_ids_become_bad_user_id() {
        let err = ApiError::from(BadUserId::Empty);
        assert_eq!(err, ApiError::BadUserId("user id is empty".into()));
    }
}
