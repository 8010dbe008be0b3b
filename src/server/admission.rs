//! One accepted TCP connection on the main listener: the per-address
//! limits and the node's connection rate, then TLS if configured, then
//! HTTP (on plain TCP through the front door, which serves polls and event
//! streams on the raw socket).
//!
//! A refused connection costs as little as possible. On a plain listener
//! it gets a `503 ip_limit` (or, past the node's rate, `503 overloaded`)
//! answer to its first request (within [`REFUSAL_HEADER_TIMEOUT`]) while
//! fewer than [`REFUSALS_IN_FLIGHT`] such answers are pending, and is
//! closed at once otherwise, so a flood cannot make the gateway hold
//! sockets to tell it no. On a TLS listener it is closed at once:
//! answering would cost a handshake.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Duration, timeout_at};
use tokio_rustls::TlsAcceptor;
use tracing::debug;

use super::front;
use super::http1::{self, Phase, http1};
use crate::gateway::Gateway;
use crate::http::error::ApiError;
use crate::metrics::ConnRefusal;
use crate::peers::{PeerLimits, PeerStream};

/// The longest a refused client is given to send the request its refusal
/// answers (less if `server.header_timeout_secs` is shorter).
pub const REFUSAL_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// Refusals being answered at once; past this, refused connections are
/// closed without an answer.
pub const REFUSALS_IN_FLIGHT: usize = 256;
/// The first byte of a TLS handshake record; anything else on the TLS
/// listener is a client speaking plain HTTP (or noise).
const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// Admits accepted TCP connections and serves them.
pub struct Admission {
    gw: Arc<Gateway>,
    peers: Arc<PeerLimits>,
    tls: Option<TlsAcceptor>,
    refusals: Arc<Semaphore>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("peers", &self.peers)
            .field("tls", &self.tls.is_some())
            .field("refusals", &self.refusals)
            .finish_non_exhaustive()
    }
}

impl Admission {
    /// Admission for the main listener of `gw`, speaking TLS if `tls`.
    pub fn new(gw: Arc<Gateway>, tls: Option<TlsAcceptor>) -> Self {
        Self {
            peers: PeerLimits::new(&gw.config.limits),
            gw,
            tls,
            refusals: Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT)),
        }
    }

    /// The per-address counts (for tests and introspection).
    pub fn peers(&self) -> &Arc<PeerLimits> {
        &self.peers
    }

    /// Whether the listener speaks TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Takes one accepted connection: refuses it, or spawns its task.
    pub fn accept(&self, stream: TcpStream, peer: SocketAddr, phase: Phase) {
        // Frames go out as written. Linux gave the socket the listener's
        // `TCP_NODELAY` (set in `server::bind`); elsewhere it is set here.
        if !cfg!(target_os = "linux") {
            let _ = stream.set_nodelay(true);
        }
        let permit = match self.peers.admit(peer.ip()) {
            Ok(permit) => permit,
            Err(refusal) => {
                let reason = refusal.reason();
                self.gw.counters.refused(reason);
                debug!(%peer, reason = reason.as_str(), "connection refused");
                // On TLS, or with every answering slot taken: closed at once.
                if self.tls.is_none()
                    && let Ok(slot) = Arc::clone(&self.refusals).try_acquire_owned()
                {
                    let answer = refusal.into_api_error();
                    tokio::spawn(refuse(Arc::clone(&self.gw), slot, stream, peer, answer));
                }
                return;
            }
        };
        let stream = PeerStream::new(stream, permit);
        let gw = Arc::clone(&self.gw);
        match &self.tls {
            None => match phase {
                Phase::Serving(stop) => tokio::spawn(front::serve(gw, stream, peer, stop)),
                Phase::Draining => tokio::spawn(http1::serve(gw, stream, peer, phase)),
            },
            Some(tls) => {
                let refusals = Arc::clone(&self.refusals);
                tokio::spawn(serve_tls(gw, tls.clone(), refusals, stream, peer, phase))
            }
        };
    }
}

/// The TLS handshake (within `server.header_timeout_secs` of accept), then
/// HTTP. A client that speaks plain HTTP is answered `400 bad_request`
/// (as a refusal) and closed.
async fn serve_tls(
    gw: Arc<Gateway>,
    tls: TlsAcceptor,
    refusals: Arc<Semaphore>,
    stream: PeerStream<TcpStream>,
    peer: SocketAddr,
    phase: Phase,
) {
    let deadline = crate::clamp::from_now(gw.config.server.header_timeout());
    let mut first = [0u8; 1];
    match timeout_at(deadline, stream.get_ref().peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE_BYTE => {}
        Ok(Ok(1)) => {
            gw.counters.refused(ConnRefusal::Tls);
            debug!(%peer, "plain http on the tls listener");
            if let Ok(slot) = refusals.try_acquire_owned() {
                let answer =
                    ApiError::BadRequest("this port speaks TLS: use https:// or wss://".into());
                refuse(gw, slot, stream, peer, answer).await;
            }
            return;
        }
        // Closed, failed, or silent for the whole header timeout: like a
        // plain connection that never sends its headers.
        _ => return,
    }
    match timeout_at(deadline, tls.accept(stream)).await {
        Ok(Ok(stream)) => http1::serve(gw, stream, peer, phase).await,
        Ok(Err(err)) => {
            gw.counters.refused(ConnRefusal::Tls);
            debug!(%peer, error = %err, "tls handshake failed");
        }
        Err(_) => {
            gw.counters.refused(ConnRefusal::Tls);
            debug!(%peer, "tls handshake timed out");
        }
    }
}

/// Answers a refused connection, holding `_slot` (one of
/// [`REFUSALS_IN_FLIGHT`]) meanwhile: reads one request within
/// [`REFUSAL_HEADER_TIMEOUT`], answers `err`, closes.
async fn refuse<I>(
    gw: Arc<Gateway>,
    _slot: OwnedSemaphorePermit,
    io: I,
    peer: SocketAddr,
    err: ApiError,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = http1(&gw);
    builder.keep_alive(false).header_read_timeout(
        gw.config
            .server
            .header_timeout()
            .min(REFUSAL_HEADER_TIMEOUT),
    );
    let service = service_fn(move |_req| {
        let answer = err.clone().into_body_response();
        async move { Ok::<_, Infallible>(answer) }
    });
    if let Err(err) = builder.serve_connection(TokioIo::new(io), service).await {
        debug!(%peer, error = %err, "refused connection ended with an error");
    }
}
