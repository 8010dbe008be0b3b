//! Demo mode (`[demo] enabled`): what the demo page needs without a
//! backend. Off by default; with it off these paths do not exist (404).
//!
//! - `POST /demo/token` with `{"user":"alice"}` → `200 {"token":"…","user":"alice","expires_at":N}`
//!   (a client token for any user id, valid for [`DEMO_TOKEN_TTL_SECS`]).
//! - `POST /demo/push`: exactly `POST /push`, without the API key.
//!
//! Anyone who can reach a gateway in demo mode can act as any user and
//! push to everyone: the shipped config enables it only on 127.0.0.1.

use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use super::request;
use crate::auth::token::mint;
use crate::gateway::Gateway;
use crate::http::ApiError;
use crate::http::Body;
use crate::protocol::UserId;

/// How long a demo token is valid, in seconds.
pub const DEMO_TOKEN_TTL_SECS: u64 = 3600;
/// The largest `/demo/token` body accepted, in bytes.
const MAX_TOKEN_REQUEST_BYTES: usize = 1024;

/// `POST /demo/token`.
pub async fn token<B>(gw: &Gateway, req: Request<B>) -> Response<Body>
where
    B: hyper::body::Body + Send,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    match mint_for(gw, req).await {
        Ok(resp) => resp,
        Err(err) => err.into_body_response(),
    }
}

async fn mint_for<B>(gw: &Gateway, req: Request<B>) -> Result<Response<Body>, ApiError>
where
    B: hyper::body::Body + Send,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    #[derive(serde::Deserialize)]
    struct TokenRequest {
        user: String,
    }
    let body = request::read_body(gw, req.into_body(), MAX_TOKEN_REQUEST_BYTES).await?;
    let request: TokenRequest = serde_json::from_slice(&body)
        .map_err(|err| ApiError::BadJson(format!("expected {{\"user\": \"<user id>\"}}: {err}")))?;
    let user = UserId::parse(&request.user).map_err(|err| ApiError::BadUserId(err.to_string()))?;
    let expires_at = Gateway::unix_now() + DEMO_TOKEN_TTL_SECS;
    let token = mint(gw.config.auth.secret.as_bytes(), &user, expires_at);
    let body = json!({ "token": token, "user": user.as_str(), "expires_at": expires_at });
    Ok(request::json_response(StatusCode::OK, &body))
}

/// `POST /demo/push`: `POST /push` with the gateway vouching for the key.
pub async fn push(gw: &Gateway, mut req: Request<hyper::body::Incoming>) -> Response<Body> {
    let bearer = format!("Bearer {}", gw.config.auth.api_key);
    match HeaderValue::from_str(&bearer) {
        Ok(value) => {
            req.headers_mut().insert(header::AUTHORIZATION, value);
            super::push::push(gw, req).await
        }
        Err(_) => ApiError::Internal.into_body_response(),
    }
}
