//! Routing: one `match` from method and path to handler.
//!
//! Unknown paths are 404, known paths with the wrong method 405 (with
//! `Allow`), and every error body is the JSON of `ApiError`. The routes that
//! read a request body answer within `[server] body_timeout_secs` or get
//! `408 request_timeout`.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response};

use crate::api::{demo, operators, push, static_files};
use crate::gateway::Gateway;
use crate::http::ApiError;
use crate::http::Body;
use crate::transport::{cors, longpoll, sse, websocket};

/// Which endpoint a path names, and the methods it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    /// `GET /ws`
    WebSocket,
    /// `GET /poll` (and its CORS preflight)
    Poll,
    /// `GET /sse` (and its CORS preflight)
    Sse,
    /// `POST /push`
    Push,
    /// `GET /users/<uid>`
    User(&'a str),
    /// `GET /channels/<name>`
    Channel(&'a str),
    /// `GET /channels/<name>/users`
    ChannelUsers(&'a str),
    /// `POST /demo/token` (demo mode only)
    DemoToken,
    /// `POST /demo/push` (demo mode only)
    DemoPush,
    /// `GET /healthz`
    Health,
    /// `GET /readyz`
    Ready,
    /// `GET /metrics`
    Metrics,
    /// `GET /…` anything else: a static file.
    Static(&'a str),
}

impl<'a> Route<'a> {
    /// The route for a path (`metrics_here`: whether `/metrics` is served
    /// on this listener; `demo`: whether demo mode is on).
    pub(crate) fn of(path: &'a str, metrics_here: bool, demo: bool) -> Self {
        match path {
            "/demo/token" if demo => Self::DemoToken,
            "/demo/push" if demo => Self::DemoPush,
            "/ws" => Self::WebSocket,
            "/poll" => Self::Poll,
            "/sse" => Self::Sse,
            "/push" => Self::Push,
            "/healthz" => Self::Health,
            "/readyz" => Self::Ready,
            "/metrics" if metrics_here => Self::Metrics,
            _ => {
                if let Some(uid) = path.strip_prefix("/users/") {
                    Self::User(uid)
                } else if let Some(rest) = path.strip_prefix("/channels/") {
                    match rest.strip_suffix("/users") {
                        Some(name) => Self::ChannelUsers(name),
                        None => Self::Channel(rest),
                    }
                } else {
                    Self::Static(path)
                }
            }
        }
    }

    /// The methods the route answers, as an `Allow` value.
    pub(crate) fn allow(self) -> &'static str {
        match self {
            Self::Push | Self::DemoToken | Self::DemoPush => "POST",
            Self::WebSocket => "GET",
            Self::Poll | Self::Sse => "GET, OPTIONS",
            _ => "GET, HEAD",
        }
    }

    fn accepts(self, method: &Method) -> bool {
        match self {
            Self::Push | Self::DemoToken | Self::DemoPush => method == Method::POST,
            Self::WebSocket => method == Method::GET,
            Self::Poll | Self::Sse => method == Method::GET || method == Method::OPTIONS,
            // A static path is only known if its file exists: the file
            // server answers 404 or 405.
            Self::Static(_) => true,
            _ => method == Method::GET || method == Method::HEAD,
        }
    }
}

/// Answers one request on the main listener.
pub(crate) async fn handle(gw: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let metrics_here = gw.config.metrics.listen.is_none();
    let path = req.uri().path().to_owned();
    let route = Route::of(&path, metrics_here, gw.config.demo.enabled);
    if !route.accepts(req.method()) {
        return ApiError::MethodNotAllowed {
            allow: route.allow(),
        }
        .into_body_response();
    }
    // Each route's future is boxed: this function's own future is held by
    // hyper for as long as the request lives (a parked poll: up to the poll
    // timeout), and unboxed it would be as big as the biggest route's
    // (2.3 KiB against a parked poll's 0.9).
    match route {
        _ if req.method() == Method::OPTIONS => {
            cors::preflight(&gw.origins, cors::origin_of(req.headers()))
        }
        Route::WebSocket => Box::pin(websocket::upgrade(&gw, req)).await,
        Route::Poll => Box::pin(longpoll::poll(&gw, req)).await,
        Route::Sse => Box::pin(sse::stream(&gw, req)).await,
        Route::Push => Box::pin(push::push(&gw, req)).await,
        Route::DemoToken => Box::pin(demo::token(&gw, req)).await,
        Route::DemoPush => Box::pin(demo::push(&gw, req)).await,
        Route::User(uid) => Box::pin(operators::user(&gw, &req, uid)).await,
        Route::Channel(name) => Box::pin(operators::channel(&gw, &req, name, false)).await,
        Route::ChannelUsers(name) => Box::pin(operators::channel(&gw, &req, name, true)).await,
        Route::Health => operators::health(),
        Route::Ready => operators::ready(&gw),
        Route::Metrics => operators::metrics(&gw),
        Route::Static(path) => {
            Box::pin(static_files::serve(
                &gw.config.server.static_dir,
                path,
                req.method(),
            ))
            .await
        }
    }
}

/// Answers one request on the separate metrics listener.
pub(crate) async fn handle_metrics(gw: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => operators::metrics(&gw),
        (_, "/metrics") => ApiError::MethodNotAllowed { allow: "GET, HEAD" }.into_body_response(),
        _ => ApiError::NotFound.into_body_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_routes() {
        let cases = [
            ("/ws", Route::WebSocket),
            ("/poll", Route::Poll),
            ("/sse", Route::Sse),
            ("/push", Route::Push),
            ("/users/alice", Route::User("alice")),
            ("/users/", Route::User("")),
            ("/healthz", Route::Health),
            ("/readyz", Route::Ready),
            ("/metrics", Route::Metrics),
            ("/", Route::Static("/")),
            ("/pushgate.js", Route::Static("/pushgate.js")),
            ("/ws/x", Route::Static("/ws/x")),
        ];
        for (path, want) in cases {
            assert_eq!(Route::of(path, true, false), want, "{path}");
        }
        assert_eq!(
            Route::of("/metrics", false, false),
            Route::Static("/metrics")
        );
        assert_eq!(Route::of("/demo/push", true, true), Route::DemoPush);
        assert_eq!(Route::of("/demo/token", true, true), Route::DemoToken);
        assert_eq!(
            Route::of("/demo/push", true, false),
            Route::Static("/demo/push")
        );
    }

    #[test]
    fn routes_accept_only_their_methods() {
        assert!(Route::Push.accepts(&Method::POST));
        assert!(!Route::Push.accepts(&Method::GET));
        assert!(Route::WebSocket.accepts(&Method::GET));
        assert!(!Route::WebSocket.accepts(&Method::HEAD));
        assert!(Route::Health.accepts(&Method::HEAD));
        assert!(Route::Static("/").accepts(&Method::DELETE));
    }
}
