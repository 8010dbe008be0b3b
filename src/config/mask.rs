//! Hiding `auth.secret` and `auth.api_key` from `Debug` and masked output.

use std::fmt;

use super::AuthConfig;

/// What masked secrets print as.
pub(super) const MASK: &str = "***";

impl AuthConfig {
    /// A copy with `secret` and `api_key` replaced by `***` when set.
    pub(super) fn masked(&self) -> Self {
        Self {
            secret: mask(&self.secret),
            api_key: mask(&self.api_key),
            ..self.clone()
        }
    }
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masked = self.masked();
        f.debug_struct("AuthConfig")
            .field("secret", &masked.secret)
            .field("api_key", &masked.api_key)
            .field("anonymous", &self.anonymous)
            .field("allowed_origins", &self.allowed_origins)
            .finish()
    }
}

/// `***` for a set value, the empty string for an unset one.
fn mask(value: &str) -> String {
    if value.is_empty() {
        String::new()
    } else {
        MASK.to_owned()
    }
}
