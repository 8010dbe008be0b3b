//! CORS for the browser endpoints a page fetches (`/poll`, `/sse`).
//!
//! Only origins in `allowed_origins` are echoed back; a preflight from any
//! other origin is refused with 403.

use bytes::BytesMut;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};

use crate::auth::origin::OriginPolicy;
use crate::http::error::ApiError;
use crate::http::view::Fields;
use crate::http::{Body, empty, wire};

/// How long a browser may cache a preflight answer, in seconds.
pub(crate) const PREFLIGHT_MAX_AGE_SECS: u32 = 600;

/// Adds `Access-Control-Allow-Origin` (and `Vary: Origin`) for an
/// allowed origin.
pub(crate) fn decorate(policy: &OriginPolicy, origin: Option<&str>, headers: &mut HeaderMap) {
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    if let Some(allowed) = allow_origin(policy, origin)
        && let Ok(value) = HeaderValue::from_str(allowed)
    {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("Retry-After"),
        );
    }
}

/// The `Access-Control-Allow-Origin` value for `origin`: the origin
/// itself when it is allowed and a valid header value (visible ASCII,
/// spaces and tabs, as `HeaderValue::from_str` takes), else `None`.
pub(crate) fn allow_origin<'a>(policy: &OriginPolicy, origin: Option<&'a str>) -> Option<&'a str> {
    policy
        .cors_allow_origin(origin)
        .filter(|o| o.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))
}

/// Appends to a response head in `buf` the headers [`decorate`] adds,
/// in the same order, for an answer written on the raw socket: `allowed`
/// is what [`allow_origin`] gave for the request's origin.
pub(crate) fn put_headers(allowed: Option<&str>, buf: &mut BytesMut) {
    wire::put_header(buf, b"vary", b"Origin");
    if let Some(allowed) = allowed {
        wire::put_header(buf, b"access-control-allow-origin", allowed.as_bytes());
        wire::put_header(buf, b"access-control-expose-headers", b"Retry-After");
    }
}

/// Answers an `OPTIONS` preflight: 204 with the allowed method and
/// headers, or 403 for an origin that is not allowed.
pub(crate) fn preflight(policy: &OriginPolicy, origin: Option<&str>) -> Response<Body> {
    if origin.is_some() && !policy.allows(origin) {
        return ApiError::Forbidden.into_body_response();
    }
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    let headers = resp.headers_mut();
    decorate(policy, origin, headers);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, OPTIONS"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Authorization, Content-Type, Last-Event-ID"),
    );
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from(PREFLIGHT_MAX_AGE_SECS),
    );
    resp
}

/// The request's `Origin`, if it is valid text.
pub(crate) fn origin_of(fields: &impl Fields) -> Option<&str> {
    fields.first_text(&header::ORIGIN)
}
