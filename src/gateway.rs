//! The gateway's shared state: what every handler and task sees.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::auth::api_key::ApiKey;
use crate::auth::origin::{BadOrigin, OriginPolicy};
use crate::auth::token::TokenVerifier;
use crate::bus::{Bus, BusError, MemoryBus, RedisBus};
use crate::clamp;
use crate::config::{BrokerKind, Config};
use crate::history::Cursor;
use crate::metrics::Counters;
use crate::session::registry::Limits;
use crate::session::{Conn, Registry, Transport, User};
use crate::wheel::{Timer, TimerKey};

/// The timer payload of the periodic history sweep (never a connection id
/// or a session handle).
pub const HISTORY_SWEEP: u64 = u64::MAX;
/// How often expired history and idempotency keys are dropped.
pub const HISTORY_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

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

    fn memory_bus(&self, config: &Config) -> Result<Arc<dyn Bus>, StartError> {
        let bus = MemoryBus::new(
            Arc::clone(&self.registry),
            self.counters.clone(),
            *self.timer.clock(),
            config.history.size,
            clamp::millis(config.history.ttl()),
        )
        .map_err(StartError::Thread)?;
        Ok(Arc::new(bus))
    }
}

/// Everything the handlers, connection tasks and the timer share.
#[derive(Debug)]
pub struct Gateway {
    /// The effective configuration.
    pub config: Config,
    /// Users and connections.
    pub registry: Arc<Registry>,
    /// Every per-connection deadline (payload: the connection id).
    pub timer: Arc<Timer<u64>>,
    /// Where pushes are numbered and fanned out.
    pub bus: Arc<dyn Bus>,
    /// Client token checks.
    pub tokens: TokenVerifier,
    /// The backend API key.
    pub api_key: ApiKey,
    /// Which browser origins may connect.
    pub origins: OriginPolicy,
    /// Hot-path counter handles.
    pub counters: Counters,
    push_limiter: Option<DefaultDirectRateLimiter>,
    draining: AtomicBool,
    sweep_timer: OnceLock<TimerKey>,
}

impl Gateway {
    /// Builds the gateway from a validated configuration with the memory
    /// broker (`[broker] kind = "redis"` needs [`Gateway::connect`]).
    pub fn new(config: Config) -> Result<Arc<Self>, StartError> {
        if config.broker.kind != BrokerKind::Memory {
            return Err(StartError::Broker(config.broker.kind));
        }
        let parts = Parts::new(&config);
        let bus = parts.memory_bus(&config)?;
        Self::assemble(config, parts, bus)
    }

    /// Builds the gateway, connecting to Redis when `[broker] kind =
    /// "redis"` (waiting up to `start_wait_secs` for it).
    pub async fn connect(config: Config) -> Result<Arc<Self>, StartError> {
        let parts = Parts::new(&config);
        let bus: Arc<dyn Bus> = match config.broker.kind {
            BrokerKind::Memory => parts.memory_bus(&config)?,
            BrokerKind::Redis => Arc::new(
                RedisBus::connect(
                    &config.broker,
                    Arc::clone(&parts.registry),
                    parts.counters.clone(),
                    config.history.size,
                    clamp::millis(config.history.ttl()),
                )
                .await?,
            ),
        };
        Self::assemble(config, parts, bus)
    }

    fn assemble(config: Config, parts: Parts, bus: Arc<dyn Bus>) -> Result<Arc<Self>, StartError> {
        let push_limiter = std::num::NonZeroU32::new(config.limits.push_rate_per_sec)
            .map(|rate| RateLimiter::direct(Quota::per_second(rate)));
        Ok(Arc::new(Self {
            tokens: TokenVerifier::new(config.auth.secret.as_bytes()),
            api_key: ApiKey::new(&config.auth.api_key),
            origins: OriginPolicy::new(&config.auth.allowed_origins)?,
            registry: parts.registry,
            timer: parts.timer,
            bus,
            counters: parts.counters,
            push_limiter,
            draining: AtomicBool::new(false),
            sweep_timer: OnceLock::new(),
            config,
        }))
    }

    /// Now, in milliseconds on the timer's clock.
    pub fn now_ms(&self) -> u64 {
        self.timer.clock().millis_at(Instant::now())
    }

    /// Wall-clock seconds since the Unix epoch (token expiry is wall time).
    pub fn unix_now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    /// Whether the gateway is draining (refusing new connections).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Starts draining; true the first time.
    pub fn start_draining(&self) -> bool {
        !self.draining.swap(true, Ordering::Relaxed)
    }

    /// Whether the gateway accepts connections and pushes (`/readyz`).
    pub fn is_ready(&self) -> bool {
        !self.is_draining() && self.bus.is_ready()
    }

    /// Takes one push from the rate limit, or says how long to wait.
    pub fn admit_push(&self) -> Result<(), Duration> {
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
    pub fn websocket_config(&self) -> WebSocketConfig {
        let max = self.config.limits.max_client_frame_bytes;
        WebSocketConfig::default()
            .read_buffer_size(WS_READ_BUFFER_BYTES)
            .write_buffer_size(WS_WRITE_BUFFER_BYTES)
            .max_write_buffer_size(WS_WRITE_BUFFER_BYTES + self.config.limits.max_push_bytes * 2)
            .max_message_size(Some(max))
            .max_frame_size(Some(max))
    }

    /// Arms a new connection's timer entry: its first ping (or its token's
    /// expiry, if sooner).
    pub fn arm_connection(&self, conn: &Conn) {
        let now = Instant::now();
        let deadline = self.next_deadline(conn, now);
        let shard = self.timer.shard_of(conn.id);
        conn.set_timer(self.timer.insert(shard, deadline, conn.id));
    }

    /// A connection's next deadline: the sooner of its next ping, its idle
    /// eviction and its token's expiry.
    pub fn next_deadline(&self, conn: &Conn, now: Instant) -> Instant {
        let session = &self.config.session;
        let last_seen = self.timer.clock().instant_at_millis(conn.last_seen_ms());
        let idle_at = clamp::after(last_seen, session.idle_timeout());
        let mut next = clamp::after(now, session.ping_interval()).min(idle_at);
        if let Some(exp) = conn.token_expires_at {
            // `exp` is the client's: up to u64::MAX seconds away.
            let left = exp.saturating_sub(Self::unix_now());
            next = next.min(clamp::after(now, Duration::from_secs(left)));
        }
        next.max(now)
    }

    /// Forgets a connection: out of the registry (through the bus, so the
    /// position returned covers everything it was sent), its timer entry
    /// freed.
    pub fn release(&self, conn: &Conn) -> Cursor {
        let position = self.bus.release(conn);
        if let Some(key) = conn.timer() {
            self.timer.remove(key);
        }
        position
    }

    /// Forgets a connection that has its position already (a poll answered
    /// with messages): no lock on publishing.
    pub fn detach(&self, conn: &Conn) {
        self.bus.detach(conn);
        if let Some(key) = conn.timer() {
            self.timer.remove(key);
        }
    }

    /// Parks a poll of `user` until `deadline_ms`: the user's one session
    /// entry is created on the first poll and only moved afterwards, to the
    /// earliest deadline among the user's parked polls.
    ///
    /// Lock order: never hold a user's session lock while taking its
    /// connection list, or the reverse.
    pub fn park_poll(&self, user: &Arc<User>, conn: &Conn, deadline_ms: u64) {
        conn.set_deadline_ms(deadline_ms);
        let earliest = user
            .connections()
            .iter()
            .map(|c| c.deadline_ms())
            .fold(deadline_ms, u64::min);
        let at = self.timer.clock().instant_at_millis(earliest);
        let mut session = user.session.lock();
        if let Some(Ok(seq)) = session.timer.map(|key| self.timer.reset(key, at)) {
            session.seq = seq;
            return;
        }
        let shard = self.timer.shard_of(user.handle);
        session.timer = Some(self.timer.insert(shard, at, user.handle));
        session.seq = 0;
        drop(session);
        self.registry.add_session(user);
    }

    /// A poll of `user` ended: unless another is parked, the session entry
    /// moves to the session's expiry.
    pub fn poll_done(&self, user: &User) {
        let now_ms = self.now_ms();
        let parked = user
            .connections()
            .iter()
            .any(|c| c.transport == Transport::Poll);
        let mut session = user.session.lock();
        session.idle_since_ms = now_ms;
        if let (Some(key), false) = (session.timer, parked) {
            let at = clamp::after(
                self.timer.clock().instant_at_millis(now_ms),
                self.config.session.session_ttl(),
            );
            if let Ok(seq) = self.timer.reset(key, at) {
                session.seq = seq;
            }
        }
    }

    /// Arms (or re-arms: one entry for the process's life) the periodic
    /// history sweep.
    pub fn arm_history_sweep(&self) {
        let at = Instant::now() + HISTORY_SWEEP_INTERVAL;
        match self.sweep_timer.get() {
            Some(key) => {
                let _ = self.timer.reset(*key, at);
            }
            None => {
                let _ = self
                    .sweep_timer
                    .set(self.timer.insert(0, at, HISTORY_SWEEP));
            }
        }
    }
}

/// A connection's hold on the gateway: its registry slot (which the
/// connections gauge counts) and its timer entry. Dropping it releases
/// both, however the connection's task ends: a return, a cancelled future,
/// or a panic unwinding through it. A task that panicked used to leave its
/// connection counted for good, until `max_connections` refused everyone.
#[derive(Debug)]
pub struct Held {
    gw: Arc<Gateway>,
    conn: Arc<Conn>,
}

impl Held {
    /// Holds `conn`, just attached (armed or not).
    pub fn new(gw: Arc<Gateway>, conn: Arc<Conn>) -> Self {
        Self { gw, conn }
    }

    /// The connection held.
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// The gateway it is held in.
    pub fn gateway(&self) -> &Arc<Gateway> {
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
