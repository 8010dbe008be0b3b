//! The body type of every HTTP response, fixed or streamed.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};

/// The body type of every response (fixed bodies and streams alike).
pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// An empty body.
pub(crate) fn empty() -> Body {
    Empty::new().boxed_unsync()
}

/// A body of these bytes.
pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}
