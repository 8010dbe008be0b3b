//! The gateway's shared state: what every handler and task sees.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::auth::api_key::ApiKey;
use crate::auth::jwks::{Jwks, JwksError};
use crate::auth::keys::{self, KeyError, PublicKey};
use crate::auth::origin::{BadOrigin, OriginPolicy};
use crate::auth::proxy::{ConnectProxy, ProxyError};
use crate::auth::token::TokenVerifier;
use crate::bus::fanout::Fanout;
use crate::bus::{Bus, BusError, ClusterBus, MemoryBus, RedisBus};
use crate::clamp;
use crate::config::{BrokerKind, Config};
pub use crate::deadlines::CLOSE_GRACE;
use crate::deadlines::{self, Deadlines};
use crate::history::{Cursor, Position};
use crate::metrics::Counters;
use crate::protocol::{PublicChannels, Transport, UserId};
use crate::registry::users::Limits;
use crate::registry::{Conn, Registry};
use crate::wheel::{Timer, TimerKey};

/// Shards of the timing wheel: enough that connection tasks on different
/// cores rarely meet on one mutex.
pub const TIMER_SHARDS: usize = 32;

/// Why the gateway could not be built from a (validated) configuration.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// An allowed origin is malformed.
    #[error("auth.allowed_origins: {0}")]
    Origin(#[from] BadOrigin),
    /// The broker needs an async start ([`Gateway::connect`]).
    #[error("broker.kind = {0:?} needs Gateway::connect")]
    Broker(BrokerKind),
    /// The broker could not be reached at start.
    #[error("broker: {0}")]
    Bus(#[from] BusError),
    /// A thread of the gateway's own (the fan-out) could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    /// A file of `[auth] public_keys` cannot be read.
    #[error("auth.public_keys[{index}]: cannot read {path:?}: {source}")]
    PublicKeyFile {
        /// Its place in the list.
        index: usize,
        /// The path configured.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A file of `[auth] public_keys` holds no usable public key.
    #[error("auth.public_keys[{index}]: {path:?} {source}")]
    PublicKey {
        /// Its place in the list.
        index: usize,
        /// The path configured.
        path: String,
        /// What is wrong with it.
        source: KeyError,
    },
    /// `[auth] jwks_url` cannot be used (a bad URL, no root certificates).
    #[error(transparent)]
    Jwks(#[from] JwksError),
    /// `[auth] jwks_url` needs an async start ([`Gateway::connect`]).
    #[error("auth.jwks_url needs Gateway::connect")]
    JwksNeedsConnect,
    /// `[auth] connect_proxy_url` cannot be used (a bad URL, no root
    /// certificates).
    #[error(transparent)]
    ConnectProxy(#[from] ProxyError),
}

/// How long start-up waits for the first fetch of `[auth] jwks_url`
/// before going on without it (retrying in the background).
pub const JWKS_START_WAIT: Duration = crate::auth::jwks::FETCH_TIMEOUT;

/// Reads every file of `[auth] public_keys`, in order.
fn load_public_keys(paths: &[String]) -> Result<Vec<PublicKey>, StartError> {
    paths
        .iter()
        .enumerate()
        .map(|(index, path)| {
            let pem = std::fs::read(path).map_err(|source| StartError::PublicKeyFile {
                index,
                path: path.clone(),
                source,
            })?;
            keys::from_pem(&pem).map_err(|source| StartError::PublicKey {
                index,
                path: path.clone(),
                source,
            })
        })
        .collect()
}

/// The token verifier `[auth]` describes, with its PEM keys read and
/// `jwks` the started JWK set cache, if any.
fn token_verifier_with(
    config: &Config,
    public_keys: Vec<PublicKey>,
    jwks: Option<Arc<Jwks>>,
) -> TokenVerifier {
    let auth = &config.auth;
    let verifier = TokenVerifier::new(auth.secret.as_bytes())
        .with_public_keys(public_keys)
        .with_issuer(auth.issuer.clone())
        .with_audience(auth.audience.clone());
    match jwks {
        Some(jwks) => verifier.with_jwks(jwks),
        None => verifier,
    }
}

/// What every gateway is built from, whichever its broker.
struct Parts {
    counters: Counters,
    registry: Arc<Registry>,
    timer: Arc<Timer<u64>>,
}

impl Parts {
    fn new(config: &Config) -> Self {
        let counters = Counters::register();
        let limits = Limits {
            max_connections: config.session.max_connections,
            max_connections_per_user: config.session.max_connections_per_user,
            outbound_queue: config.limits.outbound_queue,
            max_channels_per_connection: config.limits.max_channels_per_connection,
        };
        Self {
            registry: Arc::new(Registry::new(limits, counters.clone())),
            timer: Arc::new(Timer::new(
                config.timer.tick(),
                config.timer.slots,
                TIMER_SHARDS,
            )),
            counters,
        }
    }

    /// The fan-out threads every bus hands its messages to (`[server]
    /// cores` of them, at `fanout_nice`).
    fn fanout(&self, config: &Config) -> Result<Fanout, StartError> {
        Fanout::start(
            Arc::clone(&self.registry),
            config.server.threads_per_kind(),
            config.server.fanout_nice,
        )
        .map_err(StartError::Thread)
    }

    fn memory_bus(&self, config: &Config, fanout: Fanout) -> Arc<dyn Bus> {
        Arc::new(MemoryBus::new(
            Arc::clone(&self.registry),
            self.counters.clone(),
            *self.timer.clock(),
            config.history.size,
            clamp::millis(config.history.ttl()),
            config.history.max_streams,
            fanout,
        ))
    }
}

/// Everything the handlers, connection tasks and the timer share.
#[derive(Debug)]
pub struct Gateway {
    /// The effective configuration.
    pub config: Config,
    /// Users and connections.
    pub(crate) registry: Arc<Registry>,
    /// The timing wheel every deadline lives on (payloads: see
    /// [`deadlines`]).
    pub(crate) timer: Arc<Timer<u64>>,
    /// Arms, moves and frees the timer entries.
    pub(crate) deadlines: Arc<Deadlines>,
    /// Where pushes are numbered and fanned out.
    pub(crate) bus: Arc<dyn Bus>,
    /// Client token checks.
    pub tokens: TokenVerifier,
    /// The site's connect proxy (`[auth] connect_proxy_url`), for clients
    /// without a token; `None` when unset.
    pub(crate) connect_proxy: Option<ConnectProxy>,
    /// The backend API key.
    pub api_key: ApiKey,
    /// Which browser origins may connect.
    pub origins: OriginPolicy,
    /// Which channels anyone may join (`[channels] public`).
    pub(crate) public_channels: PublicChannels,
    /// Hot-path counter handles.
    pub counters: Counters,
    push_limiter: Option<DefaultDirectRateLimiter>,
    draining: AtomicBool,
}

impl Gateway {
    /// Builds the gateway from a validated configuration with the memory
    /// broker (`[broker] kind = "redis"` needs [`Gateway::connect`]).
    pub fn new(config: Config) -> Result<Arc<Self>, StartError> {
        if config.broker.kind != BrokerKind::Memory {
            return Err(StartError::Broker(config.broker.kind));
        }
        if config.auth.jwks_url.is_some() {
            return Err(StartError::JwksNeedsConnect);
        }
        let tokens =
            token_verifier_with(&config, load_public_keys(&config.auth.public_keys)?, None);
        let parts = Parts::new(&config);
        let bus = parts.memory_bus(&config, parts.fanout(&config)?);
        Self::assemble(config, parts, bus, tokens)
    }

    /// Builds the gateway, connecting to Redis when `[broker] kind =
    /// "redis"` (waiting up to `start_wait_secs` for it), and fetching
    /// `[auth] jwks_url` when set (waiting up to [`JWKS_START_WAIT`] for
    /// it, then going on and retrying in the background).
    pub async fn connect(config: Config) -> Result<Arc<Self>, StartError> {
        let public_keys = load_public_keys(&config.auth.public_keys)?;
        let jwks = match &config.auth.jwks_url {
            Some(url) => Some(Jwks::start(url, config.auth.jwks_refresh(), JWKS_START_WAIT).await?),
            None => None,
        };
        let tokens = token_verifier_with(&config, public_keys, jwks);
        let parts = Parts::new(&config);
        let fanout = parts.fanout(&config)?;
        // What either Redis bus is built from.
        let (broker, registry, counters) = (
            &config.broker,
            Arc::clone(&parts.registry),
            parts.counters.clone(),
        );
        let (size, ttl_ms) = (config.history.size, clamp::millis(config.history.ttl()));
        let bus: Arc<dyn Bus> = match config.broker.kind {
            BrokerKind::Memory => parts.memory_bus(&config, fanout),
            BrokerKind::Redis if config.broker.cluster => Arc::new(
                ClusterBus::connect(broker, registry, counters, fanout, size, ttl_ms).await?,
            ),
            BrokerKind::Redis => {
                Arc::new(RedisBus::connect(broker, registry, counters, fanout, size, ttl_ms).await?)
            }
        };
        Self::assemble(config, parts, bus, tokens)
    }

    fn assemble(
        config: Config,
        parts: Parts,
        bus: Arc<dyn Bus>,
        tokens: TokenVerifier,
    ) -> Result<Arc<Self>, StartError> {
        let push_limiter = std::num::NonZeroU32::new(config.limits.push_rate_per_sec)
            .map(|rate| RateLimiter::direct(Quota::per_second(rate)));
        let deadlines = Arc::new(Deadlines::new(
            Arc::clone(&parts.timer),
            Arc::clone(&parts.registry),
            Arc::clone(&bus),
            parts.counters.clone(),
            &config.session,
        ));
        let connect_proxy = match &config.auth.connect_proxy_url {
            Some(url) => Some(ConnectProxy::new(
                url,
                &config.auth,
                config.limits.connection_retry_spread_secs,
            )?),
            None => None,
        };
        Ok(Arc::new(Self {
            deadlines,
            tokens,
            connect_proxy,
            api_key: ApiKey::new(&config.auth.api_key),
            origins: OriginPolicy::new(&config.auth.allowed_origins)?,
            public_channels: PublicChannels::new(&config.channels.public),
            registry: parts.registry,
            timer: parts.timer,
            bus,
            counters: parts.counters,
            push_limiter,
            draining: AtomicBool::new(false),
            config,
        }))
    }

    /// Now, in milliseconds on the timer's clock.
    pub(crate) fn now_ms(&self) -> u64 {
        self.deadlines.now_ms()
    }

    /// Wall-clock seconds since the Unix epoch (token expiry is wall time).
    pub fn unix_now() -> u64 {
        deadlines::unix_now()
    }

    /// Whether the gateway is draining (refusing new connections).
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Starts draining; true the first time.
    pub(crate) fn start_draining(&self) -> bool {
        !self.draining.swap(true, Ordering::Relaxed)
    }

    /// Whether the gateway accepts connections and pushes (`/readyz`).
    pub(crate) fn is_ready(&self) -> bool {
        !self.is_draining() && self.bus.is_ready()
    }

    /// Takes one push from the rate limit, or says how long to wait.
    pub(crate) fn admit_push(&self) -> Result<(), Duration> {
        let Some(limiter) = &self.push_limiter else {
            return Ok(());
        };
        limiter.check().map_err(|not_until| {
            let clock = governor::clock::DefaultClock::default();
            not_until.wait_time_from(governor::clock::Clock::now(&clock))
        })
    }

    /// The WebSocket settings for one connection: small buffers (the
    /// library default eagerly allocates 128 KiB per connection) and the
    /// client frame limit.
    pub(crate) fn websocket_config(&self) -> WebSocketConfig {
        let max = self.config.limits.max_client_frame_bytes;
        WebSocketConfig::default()
            .read_buffer_size(WS_READ_BUFFER_BYTES)
            .write_buffer_size(WS_WRITE_BUFFER_BYTES)
            .max_write_buffer_size(WS_WRITE_BUFFER_BYTES + self.config.limits.max_push_bytes * 2)
            .max_message_size(Some(max))
            .max_frame_size(Some(max))
    }

    /// What the gateway holds right now, for tests and operators: counts
    /// and one user's object, read without exposing the registry, the
    /// timer or the bus themselves.
    pub fn inspect(&self) -> Inspection {
        let registry = &self.registry;
        Inspection {
            connections: registry.connections(),
            by_transport: [Transport::Ws, Transport::Poll, Transport::Sse]
                .map(|t| registry.connections_of(t)),
            users: registry.users(),
            channels: registry.channels(),
            subscriptions: registry.subscriptions(),
            timer_entries: self.timer.len(),
            position: self.bus.position().first(),
        }
    }

    /// One user's object, if it is alive.
    pub fn user(&self, user: &UserId) -> Option<UserView> {
        self.registry.user(user).map(|u| {
            let conns = u.connections();
            UserView {
                handle: u.handle,
                connections: conns.len(),
                closing: conns.iter().filter(|c| c.outbound.is_closing()).count(),
                poll_session_entry: u.poll_session.lock().timer,
            }
        })
    }

    /// Forgets a connection: out of the registry (through the bus, so the
    /// position returned covers everything it was sent), its timer entry
    /// freed.
    pub(crate) fn release(&self, conn: &Conn) -> Position {
        let position = self.bus.release(conn);
        self.deadlines.forget(conn);
        position
    }

    /// Forgets a connection that has its position already (a poll answered
    /// with messages): no lock on publishing.
    pub(crate) fn detach(&self, conn: &Conn) {
        self.bus.detach(conn);
        self.deadlines.forget(conn);
    }
}

/// Counts of what a gateway holds ([`Gateway::inspect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspection {
    /// Open connections.
    pub connections: usize,
    /// Open connections by transport: WebSocket, long-poll, SSE.
    pub by_transport: [usize; 3],
    /// User objects alive.
    pub users: usize,
    /// Channels with a connection here.
    pub channels: usize,
    /// Connection-channel pairs here.
    pub subscriptions: usize,
    /// Live timer entries.
    pub timer_entries: usize,
    /// The bus's position (see `Bus::position`).
    pub position: Cursor,
}

impl Inspection {
    /// Open connections of one transport.
    pub fn of(&self, transport: Transport) -> usize {
        self.by_transport[transport.index()]
    }
}

/// One user's object as [`Gateway::user`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserView {
    /// The object's process-unique number: the same number, the same
    /// object (reused across connections and polls).
    pub handle: u64,
    /// Its live connections.
    pub connections: usize,
    /// How many of them are closing (an end is queued).
    pub closing: usize,
    /// Its long-poll session's timer entry, while the session lives.
    pub poll_session_entry: Option<TimerKey>,
}

/// A connection's hold on the gateway: its registry slot (which the
/// connections gauge counts) and its timer entry. Dropping it releases
/// both, however the connection's task ends: a return, a cancelled future,
/// or a panic unwinding through it. A task that panicked used to leave its
/// connection counted for good, until `max_connections` refused everyone.
#[derive(Debug)]
pub(crate) struct Held {
    gw: Arc<Gateway>,
    conn: Arc<Conn>,
}

impl Held {
    /// Holds `conn`, just attached (armed or not).
    pub(crate) fn new(gw: Arc<Gateway>, conn: Arc<Conn>) -> Self {
        Self { gw, conn }
    }

    /// The connection held.
    pub(crate) fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// The gateway it is held in.
    pub(crate) fn gateway(&self) -> &Arc<Gateway> {
        &self.gw
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // The socket closes with the task, not when the last fan-out that
        // cloned the connection lets go of it.
        self.conn.outbound.clear_direct();
        // Idempotent: a task that released its connection already (to
        // learn its position) releases nothing more here.
        self.gw.release(&self.conn);
    }
}

/// Test builds only: the connection task of this user panics once it
/// serves, so tests can show that [`Held`] releases what it held.
#[cfg(test)]
pub(crate) const PANIC_USER: &str = "test.panics-in-its-task";

/// A point in every connection task where a test build makes the task of
/// [`PANIC_USER`] panic; nothing at all in other builds.
#[inline]
pub(crate) fn fault_point(conn: &Conn) {
    #[cfg(test)]
    assert!(
        conn.user.as_str() != PANIC_USER,
        "test fault: the connection task of {PANIC_USER} panics"
    );
    #[cfg(not(test))]
    let _ = conn;
}

/// Read buffer per WebSocket. Clients send little (pongs, pings), so a small
/// buffer keeps idle connections cheap; larger frames still arrive whole.
const WS_READ_BUFFER_BYTES: usize = 512;
/// Bytes gathered before a socket write; a batch is flushed at its end.
const WS_WRITE_BUFFER_BYTES: usize = 4096;
