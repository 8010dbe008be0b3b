//! Who may connect and who may push: client tokens, the site's connect
//! proxy for clients without one, the API key, origins.

pub(crate) mod api_key;
pub(crate) mod client;
pub mod jwks;
pub mod keys;
pub(crate) mod origin;
pub mod proxy;
pub mod token;

pub use api_key::ApiKey;
pub use origin::{BadOrigin, OriginPolicy};
pub use token::{TokenError, TokenVerifier, VerifiedToken, bearer, mint};
