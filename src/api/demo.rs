//! Demo mode (`[demo] enabled`): what the demo page needs without a
//! backend. Off by default; with it off these paths do not exist (404).
//!
//! - `POST /demo/token` with `{"user":"alice"}` → `200 {"token":"…","user":"alice","expires_at":N}`
//!   (a client token for any user id, valid for [`DEMO_TOKEN_TTL_SECS`]);
//!   an optional `"channels": ["vip"]` becomes the token's `channels` claim.
//! - `POST /demo/push`: exactly `POST /push`, without the API key.
//!
//! Both take only `Content-Type: application/json`, and a request with an
//! `Origin` only from an origin in `[auth] allowed_origins` (`403
//! forbidden`), before the body is read. Together these refuse what a page
//! on another site can make a browser send: an HTML form posts
//! `application/x-www-form-urlencoded`, `multipart/form-data` or
//! `text/plain` (`415 unsupported_media_type`), and a cross-site `fetch`
//! with a JSON body needs a CORS preflight, which these paths do not
//! answer.
//!
//! Anyone who can reach a gateway in demo mode can act as any user and
//! push to everyone: configuration refuses demo mode on an address other
//! than loopback unless `[demo] allow_public` says a public demo is meant.

use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use super::request;
use crate::auth::token::mint_with_channels;
use crate::gateway::Gateway;
use crate::http::view::Fields;
use crate::http::{ApiError, Body};
use crate::metrics::names;
use crate::protocol::{Channel, UserId};

/// How long a demo token is valid, in seconds.
pub(crate) const DEMO_TOKEN_TTL_SECS: u64 = 3600;
/// The largest `/demo/token` body accepted, in bytes.
const MAX_TOKEN_REQUEST_BYTES: usize = 16 * 1024;

/// `POST /demo/token`.
pub(crate) async fn token<B>(gw: &Gateway, req: Request<B>) -> Response<Body>
where
    B: hyper::body::Body + Send,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    match mint_for(gw, req).await {
        Ok(resp) => resp,
        Err(err) => refused(err),
    }
}

/// What every `/demo/*` request must show before its body is read: an
/// allowed `Origin` if it has one (an unreadable one is refused), then a
/// JSON content type.
fn check_request<B>(gw: &Gateway, req: &Request<B>) -> Result<(), ApiError> {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    if !gw.origins.allows(origin) {
        return Err(ApiError::Forbidden);
    }
    if !request::is_json(req.headers().first(&header::CONTENT_TYPE)) {
        return Err(ApiError::UnsupportedMediaType);
    }
    Ok(())
}

/// Counts a refused demo request by its code, and answers it.
fn refused(err: ApiError) -> Response<Body> {
    metrics::counter!(names::REQUESTS_REFUSED_TOTAL, "code" => err.code()).increment(1);
    err.into_body_response()
}

async fn mint_for<B>(gw: &Gateway, req: Request<B>) -> Result<Response<Body>, ApiError>
where
    B: hyper::body::Body + Send,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    #[derive(serde::Deserialize)]
    struct TokenRequest {
        user: String,
        #[serde(default)]
        channels: Vec<String>,
    }
    check_request(gw, &req)?;
    let body = request::read_body(gw, req.into_body(), MAX_TOKEN_REQUEST_BYTES).await?;
    let request: TokenRequest = serde_json::from_slice(&body)
        .map_err(|err| ApiError::BadJson(format!("expected {{\"user\": \"<user id>\"}}: {err}")))?;
    let user = UserId::parse(&request.user).map_err(|err| ApiError::BadUserId(err.to_string()))?;
    let max = gw.config.limits.max_channels_per_connection;
    if request.channels.len() > max {
        return Err(ApiError::TooManyChannels(format!(
            "channels: {} names (max {max})",
            request.channels.len()
        )));
    }
    let channels = request
        .channels
        .iter()
        .map(|name| Channel::parse(name))
        .collect::<Result<Vec<_>, _>>()?;
    let expires_at = Gateway::unix_now() + DEMO_TOKEN_TTL_SECS;
    let token = mint_with_channels(
        gw.config.auth.secret.as_bytes(),
        &user,
        expires_at,
        &channels,
    );
    let body = json!({ "token": token, "user": user.as_str(), "expires_at": expires_at });
    Ok(request::json_response(StatusCode::OK, &body))
}

/// `POST /demo/push`: `POST /push` with the gateway vouching for the key.
pub(crate) async fn push(gw: &Gateway, mut req: Request<hyper::body::Incoming>) -> Response<Body> {
    if let Err(err) = check_request(gw, &req) {
        return refused(err);
    }
    let bearer = format!("Bearer {}", gw.config.auth.api_key);
    match HeaderValue::from_str(&bearer) {
        Ok(value) => {
            req.headers_mut().insert(header::AUTHORIZATION, value);
            super::push::push(gw, req).await
        }
        Err(_) => ApiError::Internal.into_body_response(),
    }
}
