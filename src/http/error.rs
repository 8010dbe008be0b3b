//! API errors and their JSON form: the one place that maps errors to HTTP.
//!
//! Every error answer is `{"error":{"code":"…","message":"…"}}` with
//! `content-type: application/json`. The `code` is stable (clients and
//! metric labels use it); the `message` is for humans and may change.
//!
//! | variant | status | code |
//! | --- | --- | --- |
//! | `BadRequest` | 400 | `bad_request` |
//! | `BadJson` | 400 | `bad_json` |
//! | `MissingField` | 400 | `missing_field` |
//! | `BadUserId` | 400 | `bad_user_id` |
//! | `TooManyUsers` | 400 | `too_many_users` |
//! | `BadCursor` | 400 | `bad_cursor` |
//! | `Unauthorized` | 401 (+ `WWW-Authenticate: Bearer`) | `unauthorized` |
//! | `Forbidden` | 403 | `forbidden` |
//! | `Refused` | 403 | `forbidden` |
//! | `NotFound` | 404 | `not_found` |
//! | `MethodNotAllowed` | 405 (+ `Allow`) | `method_not_allowed` |
//! | `RequestTimeout` | 408 (+ `Connection: close`) | `request_timeout` |
//! | `PayloadTooLarge` | 413 | `payload_too_large` |
//! | `UnsupportedMediaType` | 415 | `unsupported_media_type` |
//! | `TooManyRequests` | 429 (+ `Retry-After`) | `rate_limited` |
//! | `Unavailable` | 503 (+ `Retry-After`) | `unavailable` |
//! | `ConnectionLimit` | 503 (+ `Retry-After`) | `connection_limit` |
//! | `IpLimit` | 503 (+ `Retry-After`) | `ip_limit` |
//! | `Overloaded` | 503 (+ `Retry-After`) | `overloaded` |
//! | `Internal` | 500 | `internal` |

use std::borrow::Cow;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use super::Body;

/// An error answered to an HTTP client. The `Display` text is the JSON
/// `message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// A malformed request no other variant describes, such as a broken
    /// WebSocket handshake (400 `bad_request`).
    #[error("{0}")]
    BadRequest(String),
    /// The body is not the JSON the endpoint expects (400 `bad_json`).
    #[error("{0}")]
    BadJson(String),
    /// A required field is absent or empty (400 `missing_field`).
    #[error("{0}")]
    MissingField(String),
    /// A user id is malformed (400 `bad_user_id`).
    #[error("{0}")]
    BadUserId(String),
    /// A push names more users than `[limits] max_push_users`
    /// (400 `too_many_users`).
    #[error("{0}")]
    TooManyUsers(String),
    /// A cursor pushgate could not have issued (400 `bad_cursor`).
    #[error("{0}")]
    BadCursor(String),
    /// A channel name is malformed, or a list has an empty item
    /// (400 `bad_channel`).
    #[error("{0}")]
    BadChannel(String),
    /// More channels than a connection or a push may name
    /// (400 `too_many_channels`).
    #[error("{0}")]
    TooManyChannels(String),
    /// A channel the client may not join: not in its token's claim and not
    /// public (403 `forbidden_channel`).
    #[error("{0}")]
    ForbiddenChannel(String),
    /// Missing, malformed, badly signed or expired token, or a wrong API
    /// key (401 `unauthorized`). Which of these is not said, on purpose.
    #[error("missing or invalid credentials")]
    Unauthorized,
    /// The browser's `Origin` is not in `[auth] allowed_origins`
    /// (403 `forbidden`).
    #[error("origin not allowed")]
    Forbidden,
    /// The site's connect proxy refused the client (403 `forbidden`).
    #[error("the site refused this connection")]
    Refused,
    /// No such path (404 `not_found`).
    #[error("not found")]
    NotFound,
    /// The path exists but not for this method (405 `method_not_allowed`).
    #[error("method not allowed (allowed: {allow})")]
    MethodNotAllowed {
        /// The `Allow` header value, such as `"GET, HEAD"`; must be a valid
        /// header value.
        allow: &'static str,
    },
    /// The request body did not arrive within `[server] body_timeout_secs`
    /// (408 `request_timeout`); the connection is closed.
    #[error("request body not received within {secs} s")]
    RequestTimeout {
        /// The limit, in seconds.
        secs: u64,
    },
    /// The body is over the endpoint's limit (413 `payload_too_large`).
    #[error("body too large (max {max} bytes)")]
    PayloadTooLarge {
        /// The limit, in bytes (`[limits] max_push_bytes` for `/push`).
        max: usize,
    },
    /// The body is not `application/json` (415 `unsupported_media_type`).
    #[error("content-type must be application/json")]
    UnsupportedMediaType,
    /// Over `[limits] push_rate_per_sec` (429 `rate_limited`).
    #[error("rate limit exceeded (retry after {retry_after_secs} s)")]
    TooManyRequests {
        /// Sent as `Retry-After`, in seconds.
        retry_after_secs: u64,
    },
    /// The gateway cannot serve now: broker down, draining, not ready
    /// (503 `unavailable`). Nothing was accepted.
    #[error("{reason} (retry after {retry_after_secs} s)")]
    Unavailable {
        /// Sent as `Retry-After`, in seconds.
        retry_after_secs: u64,
        /// A short phrase for clients, such as `"broker unavailable"` or
        /// `"draining"`; never raw error text (log that instead).
        reason: Cow<'static, str>,
    },
    /// The node is at `[session] max_connections` (503 `connection_limit`).
    #[error("too many connections (retry after {retry_after_secs} s)")]
    ConnectionLimit {
        /// Sent as `Retry-After`, in seconds.
        retry_after_secs: u64,
    },
    /// The client's address is over `[limits] max_connections_per_ip` or
    /// `[limits] connection_rate_per_ip` (503 `ip_limit`).
    #[error("{reason} (retry after {retry_after_secs} s)")]
    IpLimit {
        /// Sent as `Retry-After`, in seconds.
        retry_after_secs: u64,
        /// Which limit: a short phrase such as "too many connections from
        /// this address".
        reason: &'static str,
    },
    /// The node takes new connections faster than `[limits]
    /// connection_rate` allows, whoever sends them (503 `overloaded`).
    #[error("too many new connections to this node (retry after {retry_after_secs} s)")]
    Overloaded {
        /// Sent as `Retry-After`, in seconds: drawn at random so refused
        /// clients do not come back together.
        retry_after_secs: u64,
    },
    /// History holds `[history] max_streams` streams and the push would
    /// start another (503 `history_full`). Nothing was accepted.
    #[error("history holds the most streams it may ({max}); retry once some age out")]
    HistoryFull {
        /// `[history] max_streams`.
        max: usize,
    },
    /// A bug or an unexpected failure (500 `internal`). The detail is for
    /// the log (the caller logs it once); clients only see a generic text.
    #[error("internal error")]
    Internal,
}

/// `Retry-After` on `503 history_full`: streams age out within the
/// history's ttl, some sooner.
const HISTORY_FULL_RETRY_AFTER_SECS: u64 = 5;

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_)
            | Self::BadJson(_)
            | Self::MissingField(_)
            | Self::BadUserId(_)
            | Self::TooManyUsers(_)
            | Self::BadCursor(_)
            | Self::BadChannel(_)
            | Self::TooManyChannels(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden | Self::Refused | Self::ForbiddenChannel(_) => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable { .. }
            | Self::ConnectionLimit { .. }
            | Self::IpLimit { .. }
            | Self::Overloaded { .. }
            | Self::HistoryFull { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable error code: the JSON `code` and a metric label.
    pub const fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad_request",
            Self::BadJson(_) => "bad_json",
            Self::MissingField(_) => "missing_field",
            Self::BadUserId(_) => "bad_user_id",
            Self::TooManyUsers(_) => "too_many_users",
            Self::BadCursor(_) => "bad_cursor",
            Self::BadChannel(_) => "bad_channel",
            Self::TooManyChannels(_) => "too_many_channels",
            Self::ForbiddenChannel(_) => "forbidden_channel",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden | Self::Refused => "forbidden",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::RequestTimeout { .. } => "request_timeout",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::TooManyRequests { .. } => "rate_limited",
            Self::Unavailable { .. } => "unavailable",
            Self::ConnectionLimit { .. } => "connection_limit",
            Self::IpLimit { .. } => "ip_limit",
            Self::Overloaded { .. } => "overloaded",
            Self::HistoryFull { .. } => "history_full",
            Self::Internal => "internal",
        }
    }

    /// The human-readable JSON `message` (the `Display` text).
    pub fn message(&self) -> String {
        self.to_string()
    }

    /// The `Retry-After` value in seconds, for 429 and 503 answers.
    pub const fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::TooManyRequests { retry_after_secs }
            | Self::Unavailable {
                retry_after_secs, ..
            }
            | Self::ConnectionLimit { retry_after_secs }
            | Self::Overloaded { retry_after_secs }
            | Self::IpLimit {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            Self::HistoryFull { .. } => Some(HISTORY_FULL_RETRY_AFTER_SECS),
            _ => None,
        }
    }

    /// The complete HTTP answer: status, headers and JSON body.
    pub fn into_response(self) -> Response<Full<Bytes>> {
        let body = serde_json::json!({
            "error": { "code": self.code(), "message": self.message() }
        });
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after_secs() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        match self {
            Self::MethodNotAllowed { allow } => {
                headers.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            Self::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::RequestTimeout { .. } => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }

    /// [`into_response`](Self::into_response) with the body boxed as the
    /// router's [`Body`].
    pub fn into_body_response(self) -> Response<Body> {
        self.into_response().map(BodyExt::boxed_unsync)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;
    use serde_json::{Value, json};

    use super::*;

    /// Status, code, message, and the headers besides `content-type`.
    type Want = (
        u16,
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    );

    fn cases() -> Vec<(ApiError, Want)> {
        vec![
            (
                ApiError::BadRequest("missing Sec-WebSocket-Key".into()),
                (400, "bad_request", "missing Sec-WebSocket-Key", &[]),
            ),
            (
                ApiError::BadJson("body: must be a JSON object".into()),
                (400, "bad_json", "body: must be a JSON object", &[]),
            ),
            (
                ApiError::MissingField("to: missing".into()),
                (400, "missing_field", "to: missing", &[]),
            ),
            (
                ApiError::BadUserId("to[0]: user id is empty".into()),
                (400, "bad_user_id", "to[0]: user id is empty", &[]),
            ),
            (
                ApiError::TooManyUsers("to: names 5 users (max 4)".into()),
                (400, "too_many_users", "to: names 5 users (max 4)", &[]),
            ),
            (
                ApiError::BadCursor("cursor: not base64".into()),
                (400, "bad_cursor", "cursor: not base64", &[]),
            ),
            (
                ApiError::Unauthorized,
                (
                    401,
                    "unauthorized",
                    "missing or invalid credentials",
                    &[("www-authenticate", "Bearer")],
                ),
            ),
            (
                ApiError::Forbidden,
                (403, "forbidden", "origin not allowed", &[]),
            ),
            (
                ApiError::Refused,
                (403, "forbidden", "the site refused this connection", &[]),
            ),
            (ApiError::NotFound, (404, "not_found", "not found", &[])),
            (
                ApiError::MethodNotAllowed { allow: "GET, HEAD" },
                (
                    405,
                    "method_not_allowed",
                    "method not allowed (allowed: GET, HEAD)",
                    &[("allow", "GET, HEAD")],
                ),
            ),
            (
                ApiError::RequestTimeout { secs: 10 },
                (
                    408,
                    "request_timeout",
                    "request body not received within 10 s",
                    &[("connection", "close")],
                ),
            ),
            (
                ApiError::PayloadTooLarge { max: 65536 },
                (
                    413,
                    "payload_too_large",
                    "body too large (max 65536 bytes)",
                    &[],
                ),
            ),
            (
                ApiError::UnsupportedMediaType,
                (
                    415,
                    "unsupported_media_type",
                    "content-type must be application/json",
                    &[],
                ),
            ),
            (
                ApiError::TooManyRequests {
                    retry_after_secs: 1,
                },
                (
                    429,
                    "rate_limited",
                    "rate limit exceeded (retry after 1 s)",
                    &[("retry-after", "1")],
                ),
            ),
            (
                ApiError::Unavailable {
                    retry_after_secs: 5,
                    reason: "broker unavailable".into(),
                },
                (
                    503,
                    "unavailable",
                    "broker unavailable (retry after 5 s)",
                    &[("retry-after", "5")],
                ),
            ),
            (
                ApiError::ConnectionLimit {
                    retry_after_secs: 10,
                },
                (
                    503,
                    "connection_limit",
                    "too many connections (retry after 10 s)",
                    &[("retry-after", "10")],
                ),
            ),
            (
                ApiError::IpLimit {
                    retry_after_secs: 1,
                    reason: "too many connections from this address",
                },
                (
                    503,
                    "ip_limit",
                    "too many connections from this address (retry after 1 s)",
                    &[("retry-after", "1")],
                ),
            ),
            (
                ApiError::Overloaded {
                    retry_after_secs: 7,
                },
                (
                    503,
                    "overloaded",
                    "too many new connections to this node (retry after 7 s)",
                    &[("retry-after", "7")],
                ),
            ),
            (ApiError::Internal, (500, "internal", "internal error", &[])),
        ]
    }

    #[tokio::test]
    async fn every_variant_maps_to_its_status_code_headers_and_body() {
        for (err, (status, code, message, extra)) in cases() {
            assert_eq!(err.status().as_u16(), status, "{err:?}");
            assert_eq!(err.code(), code, "{err:?}");
            assert_eq!(err.message(), message, "{err:?}");
            let response = err.clone().into_response();
            assert_eq!(response.status().as_u16(), status, "{code}");
            let headers = response.headers();
            assert_eq!(headers[header::CONTENT_TYPE], "application/json", "{code}");
            assert_eq!(headers.len(), 1 + extra.len(), "{code}: {headers:?}");
            for (name, value) in extra {
                assert_eq!(headers[*name], *value, "{code}: {name}");
            }
            let bytes = response.into_body().collect().await.expect("full body");
            let bytes = bytes.to_bytes();
            let body: Value = serde_json::from_slice(&bytes).expect("JSON body");
            assert_eq!(body, json!({"error": {"code": code, "message": message}}));

            let boxed = err.into_body_response();
            assert_eq!(boxed.status().as_u16(), status, "{code}");
            let boxed = boxed.into_body().collect().await.expect("full body");
            assert_eq!(boxed.to_bytes(), bytes, "{code}");
        }
    }
}
