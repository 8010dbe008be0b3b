//! The backend's and operators' endpoints: `POST /push` (its handler and
//! pure parser), presence, health, readiness and metrics, demo mode, and
//! the static files. The server's router dispatches here; errors map to
//! HTTP in `http::error`.

pub(crate) mod demo;
pub(crate) mod operators;
pub mod push;
pub(crate) mod request;
pub(crate) mod static_files;

use crate::http::ApiError;
use crate::protocol::BadUserId;

/// For a user id taken from a path or query; the message is the reason.
impl From<BadUserId> for ApiError {
    fn from(err: BadUserId) -> Self {
        Self::BadUserId(err.to_string())
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
