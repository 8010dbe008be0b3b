//! The backend and operator endpoints: `POST /push`, `GET /users/<uid>`,
//! `/healthz`, `/readyz`, `/metrics`.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::json;
use tracing::{debug, warn};

use super::error::ApiError;
use super::push::{PushRequest, PushTarget};
use super::{Body, full};
use crate::bus::{BusError, Publish};
use crate::gateway::Gateway;
use crate::metrics::{TRANSPORTS, names};
use crate::session::{Transport, UserId};

/// A JSON response with this status.
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut resp = Response::new(full(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// `POST /push`: checks the key, the type, the size and the rate, parses,
/// and publishes whole or not at all.
pub async fn push(gw: &Gateway, req: Request<Incoming>) -> Response<Body> {
    match accept_push(gw, req).await {
        Ok(resp) => resp,
        Err(err) => {
            debug!(code = err.code(), "push refused");
            metrics::counter!(names::REQUESTS_REFUSED_TOTAL, "code" => err.code()).increment(1);
            err.into_body_response()
        }
    }
}

async fn accept_push(gw: &Gateway, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    authorize(gw, &req)?;
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
    })?;
    let body = read_body(gw, req.into_body(), max).await?;
    let request = PushRequest::parse(&body, gw.config.limits.max_push_users)?;
    let idempotent = request.id.is_some();
    let id = request.id.unwrap_or_else(generate_id);
    let broadcast = matches!(request.target, PushTarget::Broadcast);
    let published = gw
        .bus
        .publish(Publish {
            id,
            idempotent,
            target: request.target,
            data: request.data,
        })
        .await
        .map_err(|BusError::Unavailable(why)| {
            warn!(error = %why, "push refused: broker unavailable");
            ApiError::Unavailable {
                retry_after_secs: 1,
                reason: "broker unavailable".into(),
            }
        })?;
    let (status, mut body) = if published.duplicate {
        (
            StatusCode::OK,
            json!({ "id": published.id, "duplicate": true }),
        )
    } else {
        (StatusCode::ACCEPTED, json!({ "id": published.id }))
    };
    if broadcast {
        body["cursor"] = published.cursor.to_string().into();
    } else {
        body["users"] = published.users.into();
    }
    Ok(json_response(status, &body))
}

/// Reads a request body of at most `max` bytes within `[server]
/// body_timeout_secs`: a body trickled in slowly is cut off with `408
/// request_timeout` instead of holding a connection and a task.
pub async fn read_body<B>(gw: &Gateway, body: B, max: usize) -> Result<Bytes, ApiError>
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

/// Whether a `Content-Type` value is `application/json` (parameters such
/// as `charset` aside).
pub(crate) fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// A push id for a request that gave none: 128 random bits in hex.
fn generate_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn authorize<B>(gw: &Gateway, req: &Request<B>) -> Result<(), ApiError> {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if gw.api_key.authorizes(presented) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// `GET /users/<uid>`: whether the user is connected, and how often,
/// over every node of the cluster.
pub async fn user<B>(gw: &Gateway, req: &Request<B>, uid: &str) -> Response<Body> {
    let answer = authorize(gw, req).and_then(|()| {
        let decoded = percent_encoding::percent_decode_str(uid).decode_utf8_lossy();
        UserId::parse(&decoded).map_err(|err| ApiError::BadUserId(err.to_string()))
    });
    let user = match answer {
        Ok(user) => user,
        Err(err) => return err.into_body_response(),
    };
    match gw.bus.presence(&user).await {
        Ok(connections) => {
            let body = json!({ "online": connections > 0, "connections": connections });
            json_response(StatusCode::OK, &body)
        }
        Err(BusError::Unavailable(why)) => {
            warn!(error = %why, "presence unavailable");
            ApiError::Unavailable {
                retry_after_secs: 1,
                reason: "broker unavailable".into(),
            }
            .into_body_response()
        }
    }
}

/// `GET /healthz`: 200 while the process serves.
pub fn health() -> Response<Body> {
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 while accepting connections with a reachable broker.
pub fn ready(gw: &Gateway) -> Response<Body> {
    if gw.is_ready() {
        json_response(StatusCode::OK, &json!({ "status": "ready" }))
    } else {
        let reason = if gw.is_draining() {
            "draining"
        } else {
            "broker unavailable"
        };
        ApiError::Unavailable {
            retry_after_secs: 1,
            reason: reason.into(),
        }
        .into_body_response()
    }
}

/// `GET /metrics`: Prometheus text format. Gauges are read from the
/// gateway's state at scrape time.
pub fn metrics(gw: &Gateway) -> Response<Body> {
    let transports = [Transport::Ws, Transport::Poll, Transport::Sse];
    for (label, transport) in TRANSPORTS.iter().zip(transports) {
        metrics::gauge!(names::CONNECTIONS, "transport" => *label)
            .set(gw.registry.connections_of(transport) as f64);
    }
    metrics::gauge!(names::SESSIONS).set(gw.registry.sessions() as f64);
    metrics::gauge!(names::TIMER_ENTRIES).set(gw.timer.len() as f64);
    let mut resp = Response::new(full(crate::metrics::recorder().render()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
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
            assert!(is_json(Some(&HeaderValue::from_static(yes))), "{yes}");
        }
        for no in [
            "text/plain",
            "application/jsonx",
            "application/x-www-form-urlencoded",
            "",
        ] {
            assert!(!is_json(Some(&HeaderValue::from_static(no))), "{no}");
        }
        assert!(!is_json(None));
    }

    #[test]
    fn generated_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (generate_id(), generate_id());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
