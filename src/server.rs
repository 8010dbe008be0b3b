//! The server: accept loop, graceful drain, and what every connection
//! goes through: [`admission`] (per-address limits, TLS when configured),
//! then on plain TCP the [`front`] door (polls and event streams served on
//! the raw socket), or hyper (`http1`) for everything else; both route
//! through the one table in `router`.

pub mod admission;
pub mod drain;
pub(crate) mod front;
mod http1;
pub(crate) mod router;
pub(crate) mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use self::admission::Admission;
use self::http1::{Phase, http1, stopped};
use self::tls::TlsError;
use crate::config::Config;
use crate::deadlines::Expiry;
use crate::gateway::{Gateway, StartError};
use crate::wheel::{DEFAULT_BUDGET, drive};

/// Handshakes the kernel may queue before the accept loop takes them
/// (capped by the kernel's `net.core.somaxconn`).
pub const LISTEN_BACKLOG: u32 = 1024;
pub use self::drain::DRAIN_RETRY_MS;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listen address does not parse.
    #[error("{key}: not a socket address: {value:?}")]
    Address {
        /// The config key.
        key: &'static str,
        /// Its value.
        value: String,
    },
    /// Binding a listener failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The gateway could not be built.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The TLS certificate or key cannot be used (the message names the key).
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Server {
    gateway: Arc<Gateway>,
    admission: Admission,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
}

impl Server {
    /// Builds the gateway and binds its listeners (port 0 picks a free port).
    pub async fn bind(config: Config) -> Result<Self, ServeError> {
        let listen = parse_addr("server.listen", &config.server.listen)?;
        let metrics_listen = match &config.metrics.listen {
            Some(addr) => Some(parse_addr("metrics.listen", addr)?),
            None => None,
        };
        let tls = tls::acceptor(&config.server)?;
        let defer = config.server.defer_accept_secs;
        let gateway = Gateway::connect(config).await?;
        let admission = Admission::new(Arc::clone(&gateway), tls);
        let listener = bind(listen, defer).await?;
        let metrics_listener = match metrics_listen {
            Some(addr) => Some(bind(addr, defer).await?),
            None => None,
        };
        Ok(Self {
            gateway,
            admission,
            listener,
            metrics_listener,
        })
    }

    /// The address the main listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The address of the separate metrics listener, if configured.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .map(|l| l.local_addr().expect("a bound listener has an address"))
    }

    /// The gateway's shared state.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// The main listener's admission: per-address counts, TLS.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Serves until `shutdown` completes, then drains: stops accepting
    /// clients, tells every connection to reconnect elsewhere (spread over
    /// `drain_spread_secs`, see [`drain`]), waits up to
    /// `drain_timeout_secs` from the start for them to go, and returns.
    ///
    /// While draining the listener stays open: `/readyz` must be seen to
    /// answer `503` (a refused connection would tell a load balancer
    /// nothing), and a client told to reconnect that comes straight back
    /// gets a `503` rather than a reset. New WebSocket, poll and SSE
    /// clients are refused by the draining flag; new HTTP connections
    /// answer one request and close.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Self {
            gateway: gw,
            admission,
            listener,
            metrics_listener,
        } = self;
        gw.deadlines.arm_history_sweep();
        let (stop_tx, stop_rx) = watch::channel(false);
        let (draining_tx, draining_rx) = watch::channel(false);
        let driver = tokio::spawn(drive(
            Arc::clone(&gw.timer),
            Expiry::new(Arc::clone(&gw.deadlines)),
            DEFAULT_BUDGET,
            stopped(stop_rx.clone()),
        ));
        tokio::spawn(crate::metrics::upkeep(
            crate::metrics::UPKEEP_EVERY,
            stopped(stop_rx.clone()),
        ));
        if let Some(listener) = metrics_listener {
            tokio::spawn(serve_metrics(
                Arc::clone(&gw),
                listener,
                stopped(stop_rx.clone()),
            ));
        }
        info!(
            addr = %listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
            tls = admission.is_tls(),
            "pushgate serving"
        );
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        admission.accept(stream, peer, Phase::Serving(draining_rx.clone()));
                    }
                    Err(err) => accept_failed(err).await,
                },
            }
        }
        gw.start_draining();
        let _ = draining_tx.send(true);
        {
            let drained = drain(&gw);
            tokio::pin!(drained);
            loop {
                tokio::select! {
                    () = &mut drained => break,
                    accepted = listener.accept() => match accepted {
                        Ok((stream, peer)) => admission.accept(stream, peer, Phase::Draining),
                        Err(err) => accept_failed(err).await,
                    },
                }
            }
        }
        drop(listener);
        let _ = stop_tx.send(true);
        let _ = driver.await;
        info!("pushgate stopped");
    }
}

/// Binds and serves until `shutdown` completes (what tests and `main` call).
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
    Server::bind(config).await?.run(shutdown).await;
    Ok(())
}

fn parse_addr(key: &'static str, value: &str) -> Result<SocketAddr, ServeError> {
    value.parse().map_err(|_| ServeError::Address {
        key,
        value: value.to_owned(),
    })
}

/// Binds a listener whose accept queue holds [`LISTEN_BACKLOG`]
/// handshakes, so a reconnect storm waits in the queue instead of being
/// dropped and retried a second later (tokio's default is 128). It has
/// `TCP_NODELAY` set, which Linux hands on to every socket it accepts: no
/// `setsockopt` per connection (see `Admission::accept`); and it hands
/// over a connection once its first bytes are in, or after
/// `defer_accept_secs` (see [`defer_accept`]).
async fn bind(addr: SocketAddr, defer_accept_secs: u16) -> Result<TcpListener, ServeError> {
    let listen = || -> std::io::Result<TcpListener> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.set_nodelay(true)?;
        defer_accept(&socket, defer_accept_secs)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    listen().map_err(|source| ServeError::Bind { addr, source })
}

/// Asks Linux to queue an accepted connection for the accept loop only
/// once the client's first bytes have arrived (`TCP_DEFER_ACCEPT`), or
/// when `secs` have passed without any (0: at once, the kernel's
/// default). Every client of ours speaks first, so a connection is then
/// accepted with its request already readable: read at once, with no
/// read that finds nothing and no wake-up to come back for it, and a
/// connection that says nothing holds no descriptor or task meanwhile.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn defer_accept(socket: &TcpSocket, secs: u16) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::from(secs);
    // SAFETY: the descriptor is the socket's own, open for the whole call;
    // the option's value is an initialized `c_int` whose size is passed
    // with its address, as `setsockopt(2)` reads it.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Elsewhere there is no such option: connections are handed over at once.
#[cfg(not(target_os = "linux"))]
fn defer_accept(_socket: &TcpSocket, _secs: u16) -> std::io::Result<()> {
    Ok(())
}

/// Out of file descriptors or a transient error: back off briefly instead
/// of spinning.
async fn accept_failed(err: std::io::Error) {
    warn!(error = %err, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn serve_metrics(gw: Arc<Gateway>, listener: TcpListener, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        let (stream, _) = tokio::select! {
            () = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => { accept_failed(err).await; continue; }
            },
        };
        let handler = Arc::clone(&gw);
        let service = service_fn(move |req| {
            let gw = Arc::clone(&handler);
            async move { Ok::<_, std::convert::Infallible>(router::handle_metrics(gw, req).await) }
        });
        let conn = http1(&gw).serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}

/// Tells every connection to come back later (over the drain spread),
/// lets in-flight requests finish, and waits up to the drain timeout for
/// connections to go.
async fn drain(gw: &Gateway) {
    gw.start_draining();
    let deadline = crate::clamp::from_now(gw.config.server.drain_timeout());
    // Validation keeps the spread inside the timeout; so does this.
    let spread = gw
        .config
        .server
        .drain_spread()
        .min(gw.config.server.drain_timeout());
    info!(
        connections = gw.registry.connections(),
        spread_secs = spread.as_secs(),
        "draining"
    );
    let told = self::drain::tell(gw, spread).await;
    info!(told, "drain: every connection told to reconnect");
    while gw.registry.connections() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = gw.registry.all_connections();
    if !left.is_empty() {
        warn!(connections = left.len(), "drain timeout: closing the rest");
        for conn in left {
            conn.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What lets `Admission::accept` skip a `setsockopt` per connection.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn sockets_the_listener_accepts_send_without_delay() {
        let listener = bind("127.0.0.1:0".parse().expect("addr"), 0)
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        assert!(accepted.nodelay().expect("getsockopt"));
    }

    /// A deferring listener hands over a connection when its first bytes
    /// come, not before (the kernel holds a silent one for at least the
    /// deferral); one that does not defer hands it over at once.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_deferring_listener_hands_over_a_connection_once_it_speaks() {
        use tokio::io::AsyncWriteExt;
        use tokio::time::timeout;
        let addr = "127.0.0.1:0".parse().expect("addr");
        let deferring = bind(addr, 5).await.expect("bind");
        let mut client = tokio::net::TcpStream::connect(deferring.local_addr().expect("addr"))
            .await
            .expect("connect");
        assert!(
            timeout(Duration::from_millis(300), deferring.accept())
                .await
                .is_err(),
            "a silent connection was handed over"
        );
        client.write_all(b"GET").await.expect("write");
        let (accepted, _) = timeout(Duration::from_secs(5), deferring.accept())
            .await
            .expect("handed over once it spoke")
            .expect("accept");
        let mut first = [0; 3];
        assert_eq!(accepted.try_read(&mut first).expect("readable at once"), 3);

        let at_once = bind(addr, 0).await.expect("bind");
        let _silent = tokio::net::TcpStream::connect(at_once.local_addr().expect("addr"))
            .await
            .expect("connect");
        timeout(Duration::from_secs(5), at_once.accept())
            .await
            .expect("handed over at once")
            .expect("accept");
    }
}
