//! The operators' endpoints: `GET /users/<uid>` and `/channels/<name>`
//! (presence), `/healthz`, `/readyz`, `/metrics`.

use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use super::request::{authorize, json_response};
use crate::gateway::Gateway;
use crate::http::{ApiError, Body, full};
use crate::metrics::{TRANSPORTS, names};
use crate::protocol::{Channel, Transport, UserId};

/// The most user ids `GET /channels/<name>/users` lists.
pub(crate) const MAX_LISTED_USERS: usize = 1000;

/// `GET /channels/<name>` (`{"subscribers":N,"users":M}`) or, with
/// `list`, `GET /channels/<name>/users` (`{"users":[…],"truncated":b}`,
/// at most [`MAX_LISTED_USERS`] ids, sorted): over every node.
pub(crate) async fn channel<B>(
    gw: &Gateway,
    req: &Request<B>,
    name: &str,
    list: bool,
) -> Response<Body> {
    let answer = authorize(gw, req).and_then(|()| {
        let decoded = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
        Channel::parse(&decoded).map_err(ApiError::from)
    });
    let channel = match answer {
        Ok(channel) => channel,
        Err(err) => return err.into_body_response(),
    };
    match gw.bus.channel_presence(&channel, MAX_LISTED_USERS).await {
        Ok(presence) if list => {
            let users: Vec<&str> = presence.listed.iter().map(UserId::as_str).collect();
            let body = json!({ "users": users, "truncated": presence.truncated });
            json_response(StatusCode::OK, &body)
        }
        Ok(presence) => {
            let body = json!({ "subscribers": presence.subscribers, "users": presence.users });
            json_response(StatusCode::OK, &body)
        }
        Err(err) => ApiError::from(err).into_body_response(),
    }
}

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
        Err(err) => ApiError::from(err).into_body_response(),
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
    metrics::gauge!(names::CHANNELS).set(gw.registry.channels() as f64);
    metrics::gauge!(names::SUBSCRIPTIONS).set(gw.registry.subscriptions() as f64);
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
