//! hyper's side of the server: HTTP/1.1 with upgrades for every request
//! the front door does not serve itself, and for every TLS connection.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tracing::debug;

use super::router;
use crate::gateway::Gateway;
use crate::http::{MAX_HEADERS, MAX_REQUEST_HEAD_BYTES, RemoteAddr};

/// Where the gateway is in its life, for a new connection.
#[derive(Debug, Clone)]
pub enum Phase {
    /// Serving: keep-alive, with upgrades, until the receiver turns true
    /// (then a graceful shutdown: idle connections close, requests finish).
    Serving(watch::Receiver<bool>),
    /// Draining: one request, then close. (A graceful shutdown would not do:
    /// hyper closes a connection it has read nothing from yet.)
    Draining,
}

/// Serves HTTP/1.1 on `io` with hyper until it closes, or for one request
/// while draining.
pub(super) async fn serve<I>(gw: Arc<Gateway>, io: I, peer: SocketAddr, phase: Phase)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let handler = Arc::clone(&gw);
    let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let gw = Arc::clone(&handler);
        if gw.connect_proxy.is_some() {
            req.extensions_mut().insert(RemoteAddr(peer));
        }
        async move { Ok::<_, Infallible>(router::handle(gw, req).await) }
    });
    let result = match phase {
        Phase::Serving(stop) => {
            let conn = http1(&gw)
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => result,
                () = stopped(stop) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            }
        }
        Phase::Draining => {
            let mut builder = http1(&gw);
            builder.keep_alive(false);
            builder.serve_connection(TokioIo::new(io), service).await
        }
    };
    if let Err(err) = result {
        debug!(%peer, error = %err, "http connection ended with an error");
    }
}

/// hyper's connection settings: the header timeout and the head limits.
pub(super) fn http1(gw: &Gateway) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(gw.config.server.header_timeout())
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        // The buffer's limit alone is checked only when a read leaves no
        // complete head: a longer head that arrives whole would pass.
        .max_header_size(MAX_REQUEST_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    builder
}

/// Completes once the server stops.
pub(super) async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}
