//! `POST /push`: the backend's one write. The handler checks the key, the
//! type, the size and the rate, has the body parsed ([`parse`], pure) and
//! publishes it whole or not at all.

pub mod parse;

use hyper::body::Incoming;
use hyper::header;
use hyper::{Request, Response, StatusCode};
use serde_json::json;
use tracing::debug;

use self::parse::PushRequest;
use super::request::{authorize, is_json, json_response, read_body};
use crate::bus::{Publish, PushTarget};
use crate::gateway::Gateway;
use crate::http::{ApiError, Body};
use crate::metrics::names;

/// `POST /push`: checks the key, the type, the size and the rate, parses,
/// and publishes whole or not at all.
pub(crate) async fn push(gw: &Gateway, req: Request<Incoming>) -> Response<Body> {
    if let Err(err) = admit(gw, &req) {
        return refuse(err);
    }
    let max = gw.config.limits.max_push_bytes;
    match read_body(gw, req.into_body(), max).await {
        Ok(body) => publish(gw, &body).await,
        Err(err) => refuse(err),
    }
}

/// What a push's head alone decides, before its body is read: the key,
/// the type, the declared size and the rate (a token is taken). The front
/// door, which reads a push's body itself, asks this first too.
pub(crate) fn admit<B>(gw: &Gateway, req: &Request<B>) -> Result<(), ApiError> {
    authorize(gw, req)?;
    if !is_json(req.headers().get(header::CONTENT_TYPE)) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let max = gw.config.limits.max_push_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max as u64) {
        return Err(ApiError::PayloadTooLarge { max });
    }
    gw.admit_push().map_err(|wait| ApiError::TooManyRequests {
        retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
    })
}

/// The answer to an admitted push whose whole body is `body`: parsed and
/// published, whole or not at all.
pub(crate) async fn publish(gw: &Gateway, body: &[u8]) -> Response<Body> {
    match accept_body(gw, body).await {
        Ok(resp) => resp,
        Err(err) => refuse(err),
    }
}

/// The answer to a push refused with `err`, logged and counted.
pub(crate) fn refuse(err: ApiError) -> Response<Body> {
    debug!(code = err.code(), "push refused");
    metrics::counter!(names::REQUESTS_REFUSED_TOTAL, "code" => err.code()).increment(1);
    err.into_body_response()
}

async fn accept_body(gw: &Gateway, body: &[u8]) -> Result<Response<Body>, ApiError> {
    let limits = &gw.config.limits;
    let request = PushRequest::parse(body, limits.max_push_users, limits.max_push_channels)?;
    let idempotent = request.id.is_some();
    let id = request.id.unwrap_or_else(generate_id);
    let kind = match request.target {
        PushTarget::Broadcast => TargetKind::Broadcast,
        PushTarget::Users(_) => TargetKind::Users,
        PushTarget::Channels(_) => TargetKind::Channels,
    };
    let published = gw
        .bus
        .publish(Publish {
            id,
            idempotent,
            target: request.target,
            data: request.data,
        })
        .await?;
    let (status, mut body) = if published.duplicate {
        (
            StatusCode::OK,
            json!({ "id": published.id, "duplicate": true }),
        )
    } else {
        (StatusCode::ACCEPTED, json!({ "id": published.id }))
    };
    match kind {
        TargetKind::Broadcast => body["cursor"] = published.cursor.to_string().into(),
        TargetKind::Users => body["users"] = published.users.into(),
        TargetKind::Channels => body["channels"] = published.channels.into(),
    }
    Ok(json_response(status, &body))
}

/// What a push addressed, which decides the answer's field.
enum TargetKind {
    Broadcast,
    Users,
    Channels,
}

/// A push id for a request that gave none: 128 random bits in hex.
fn generate_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (generate_id(), generate_id());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
