//! What every API endpoint shares: the API key check, the JSON content
//! type, a bounded body read and a JSON answer.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use crate::gateway::Gateway;
use crate::http::view::{self, Fields, RequestView};
use crate::http::{ApiError, Body, full};

/// A JSON response with this status.
pub(crate) fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    json_bytes_response(status, value.to_string())
}

/// A response with this status whose body is JSON already encoded.
pub(crate) fn json_bytes_response(status: StatusCode, json: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(full(json));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Reads a request body of at most `max` bytes within `[server]
/// body_timeout_secs`: a body trickled in slowly is cut off with `408
/// request_timeout` instead of holding a connection and a task.
pub(crate) async fn read_body<B>(gw: &Gateway, body: B, max: usize) -> Result<Bytes, ApiError>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let limit = gw.config.server.body_timeout();
    match tokio::time::timeout(limit, Limited::new(body, max).collect()).await {
        Err(_) => Err(ApiError::RequestTimeout {
            secs: limit.as_secs(),
        }),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
            Err(ApiError::PayloadTooLarge { max })
        }
        Ok(Err(err)) => Err(ApiError::BadJson(format!("could not read the body: {err}"))),
    }
}

/// Whether a `Content-Type` names JSON (parameters such as `charset` allowed).
pub(crate) fn is_json(content_type: Option<&[u8]>) -> bool {
    content_type
        .and_then(view::text)
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether the request carries the backend API key.
pub(crate) fn authorize(gw: &Gateway, req: &impl RequestView) -> Result<(), ApiError> {
    let presented = req.fields().first_text(&header::AUTHORIZATION);
    if gw.api_key.authorizes(presented) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_are_recognised_with_parameters() {
        for yes in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
        ] {
            assert!(is_json(Some(yes.as_bytes())), "{yes}");
        }
        for no in [
            "text/plain",
            "application/jsonx",
            "application/x-www-form-urlencoded",
            "",
        ] {
            assert!(!is_json(Some(no.as_bytes())), "{no}");
        }
        assert!(!is_json(None));
    }
}
