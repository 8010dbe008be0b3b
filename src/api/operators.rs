//! The operators' endpoints: `GET /users/<uid>` (presence), `/healthz`,
//! `/readyz`, `/metrics`.

use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::json;
use tracing::warn;

use super::request::{authorize, json_response};
use crate::bus::BusError;
use crate::gateway::Gateway;
use crate::http::{ApiError, Body, full};
use crate::metrics::{TRANSPORTS, names};
use crate::protocol::{Transport, UserId};

/// `GET /users/<uid>`: whether the user is connected, and how often,
/// over every node of the cluster.
pub(crate) async fn user<B>(gw: &Gateway, req: &Request<B>, uid: &str) -> Response<Body> {
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
pub(crate) fn health() -> Response<Body> {
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 while accepting connections with a reachable broker.
pub(crate) fn ready(gw: &Gateway) -> Response<Body> {
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
pub(crate) fn metrics(gw: &Gateway) -> Response<Body> {
    let transports = [Transport::Ws, Transport::Poll, Transport::Sse];
    for (label, transport) in TRANSPORTS.iter().zip(transports) {
        metrics::gauge!(names::CONNECTIONS, "transport" => *label)
            .set(gw.registry.connections_of(transport) as f64);
    }
    metrics::gauge!(names::SESSIONS).set(gw.registry.users() as f64);
    metrics::gauge!(names::TIMER_ENTRIES).set(gw.timer.len() as f64);
    metrics::gauge!(names::MAX_CONNECTIONS).set(gw.config.session.max_connections as f64);
    metrics::gauge!(names::TIMER_TICK_SECONDS).set(gw.config.timer.tick().as_secs_f64());
    metrics::gauge!(names::BROKER_UP).set(if gw.bus.is_ready() { 1.0 } else { 0.0 });
    if let Some(bytes) = crate::metrics::resident_memory_bytes() {
        metrics::gauge!(names::RESIDENT_MEMORY_BYTES).set(bytes as f64);
    }
    let mut resp = Response::new(full(crate::metrics::recorder().render()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
