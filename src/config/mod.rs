//! The configuration tree, its environment overlay and validation.
//!
//! A configuration is built in three steps, each a plain function:
//!
//! 1. the TOML file is parsed into [`Config`]; keys it omits keep their
//!    built-in defaults, unknown keys are errors ([`Config::from_toml_str`]);
//! 2. `PUSHGATE_<SECTION>_<KEY>` environment variables override single keys
//!    ([`Config::overlay_env`], a pure function over the pairs it is given,
//!    which also returns the `PUSHGATE_*` variables it ignored: Kubernetes
//!    service links and scripts' own, see `env`);
//! 3. [`Config::validate`] checks every rule and reports every problem at
//!    once, one line each, starting with the dotted path of the key.
//!
//! [`Config::load`] runs all three and refuses a configuration that fails
//! any of them, so the process never starts half-configured.

use std::fmt;
use std::net::{AddrParseError, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

mod env;
mod mask;
mod validate;

pub use mask::masked_url;

/// The `auth.secret` shipped in the repository's `config.toml`, a
/// development value published in README. The binary warns when it is in
/// use, and refuses it on a `server.listen` address other than loopback.
pub const SHIPPED_DEV_SECRET: &str = "dev-only-secret-replace-in-production-7f3a9c2e";

/// The `auth.api_key` shipped in the repository's `config.toml`, a
/// development value published in README. The binary warns when it is in
/// use, and refuses it on a `server.listen` address other than loopback.
pub const SHIPPED_DEV_API_KEY: &str = "dev-only-api-key-replace-in-production-4b8d1e6a";

/// Shortest accepted `auth.secret` and `auth.api_key`, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// Prefix of every environment variable that overrides a key.
const ENV_PREFIX: &str = "PUSHGATE_";

/// `PUSHGATE_` variables the binary reads itself; the overlay skips them.
const RESERVED_ENV: &[&str] = &["PUSHGATE_CONFIG", "PUSHGATE_LOG"];

/// Keys whose default is absent (`None`), so the serialized defaults do not
/// show them; all of them are strings.
const OPTIONAL_STRING_KEYS: &[(&str, &str)] = &[
    ("metrics", "listen"),
    ("server", "tls_cert"),
    ("server", "tls_key"),
    ("auth", "jwks_url"),
    ("auth", "issuer"),
    ("auth", "audience"),
    ("auth", "connect_proxy_url"),
];

/// Largest accepted `limits.max_push_bytes`: 16 MiB.
const MAX_PUSH_BYTES_LIMIT: usize = 16 * 1024 * 1024;

/// The whole configuration: one field per `[section]` of `config.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`: the listener and shutdown.
    pub server: ServerConfig,
    /// `[session]`: transport timeouts and connection limits.
    pub session: SessionConfig,
    /// `[timer]`: geometry of the timing wheel.
    pub timer: TimerConfig,
    /// `[history]`: per-stream message history for cursors.
    pub history: HistoryConfig,
    /// `[auth]`: client tokens, backend key, origins.
    pub auth: AuthConfig,
    /// `[limits]`: sizes and rates.
    pub limits: LimitsConfig,
    /// `[broker]`: the bus between gateway instances.
    pub broker: BrokerConfig,
    /// `[metrics]`: the Prometheus endpoint.
    pub metrics: MetricsConfig,
    /// `[log]`: the log filter and line format.
    pub log: LogConfig,
    /// `[demo]`: development helpers.
    pub demo: DemoConfig,
    /// `[channels]`: which channels pages may join by asking.
    pub channels: ChannelsConfig,
}

/// `[channels]`: who may join which channel (PROTOCOL.md, "v1.1:
/// channels"). A connection is in every channel of its token's `channels`
/// claim; it may also ask for channels the claim names or that match
/// `public`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    /// Channels anyone may join, anonymous clients included: exact names
    /// and prefixes ending in `*` (`["news", "product.*"]`). Default `[]`.
    pub public: Vec<String>,
}

/// `[server]`: where the gateway listens and how it shuts down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Socket address (`ip:port`) of the main listener. Default
    /// `"0.0.0.0:8080"`; port 0 picks a free port (tests do this).
    pub listen: String,
    /// Seconds to wait on shutdown for connections to leave after they were
    /// told to reconnect. Default 10; 0 exits without waiting.
    pub drain_timeout_secs: u64,
    /// Seconds over which a drain tells its connections to reconnect, each
    /// at its own time and with its own `retry_ms`, so the other nodes see
    /// a steady stream of reconnects instead of all of them in the same
    /// second. Default 5; 0 tells every connection at once. Must be less
    /// than `drain_timeout_secs` (or 0), so the last told have time to go.
    pub drain_spread_secs: u64,
    /// Seconds a client has to send complete request headers before its
    /// connection is closed (slow-client protection). Default 10; must be > 0.
    pub header_timeout_secs: u64,
    /// Seconds a client has, once its request headers are in, to send the
    /// whole body of a `POST /push` (or `/demo/*`) and be answered; slower
    /// gets `408 request_timeout` and the connection is closed (slow-body
    /// protection). Default 10; must be > 0.
    pub body_timeout_secs: u64,
    /// Directory served at `/` (the demo page and `pushgate.js`), relative to
    /// the working directory. Default `"static"`.
    pub static_dir: String,
    /// Path of a PEM file with the TLS certificate chain (leaf first) for
    /// the main listener, so it serves `https://` and `wss://`. Default
    /// unset: plain HTTP. Set together with `tls_key`, or neither.
    pub tls_cert: Option<String>,
    /// Path of a PEM file with the private key of `tls_cert` (PKCS#8, PKCS#1
    /// or SEC1). Default unset. Set together with `tls_cert`, or neither.
    pub tls_key: Option<String>,
    /// Niceness the fan-out threads add to the process's (0 to 19): how
    /// readily a broadcast's bulk of sends yields the CPU to the rest of
    /// the gateway (accepting, reading, answering pushes) and to other
    /// processes. Default 9 (measured against 5 in README, "Fan-out
    /// threads at niceness 9"); 0 runs them like every other thread.
    pub fanout_nice: u8,
    /// Cores this node sizes its busy threads for: one runtime worker and
    /// one fan-out lane per core. Default 0: every core the process may
    /// use. Set it to the node's share of the machine when several nodes,
    /// or Redis, share one: more threads than cores only adds wake-ups
    /// and context switches. At most 1024.
    pub cores: u16,
    /// Seconds the kernel may hold a new connection whose client has not
    /// yet sent anything before handing it to the gateway
    /// (`TCP_DEFER_ACCEPT`, Linux). Clients speak first (a request, a TLS
    /// hello), so a connection is handed over with its request readable
    /// and served without waiting for it: fewer system calls and wake-ups
    /// per connection. A silent one is handed over after this, then has
    /// `header_timeout_secs`. Default 1; 0 hands every connection over at
    /// once. At most 60.
    pub defer_accept_secs: u16,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "0.0.0.0:8080".to_owned(),
            drain_timeout_secs: 10,
            drain_spread_secs: 5,
            header_timeout_secs: 10,
            body_timeout_secs: 10,
            static_dir: "static".to_owned(),
            tls_cert: None,
            tls_key: None,
            fanout_nice: 9,
            cores: 0,
            defer_accept_secs: 1,
        }
    }
}

impl ServerConfig {
    /// How many runtime workers, and how many fan-out lanes, `cores` asks
    /// for: `None` for one per core the process may use.
    pub fn threads_per_kind(&self) -> Option<usize> {
        (self.cores > 0).then_some(usize::from(self.cores))
    }

    /// `listen` as a socket address.
    pub fn listen_addr(&self) -> Result<SocketAddr, AddrParseError> {
        self.listen.parse()
    }

    /// `drain_timeout_secs` as a duration.
    pub fn drain_timeout(&self) -> Duration {
        Duration::from_secs(self.drain_timeout_secs)
    }

    /// The spread a drain uses: `drain_spread_secs`, but at most half of
    /// `drain_timeout_secs`, so the last connections told still have time
    /// to go (a short drain timeout shortens the spread instead of
    /// refusing the configuration).
    pub fn drain_spread(&self) -> Duration {
        Duration::from_secs(self.drain_spread_secs).min(self.drain_timeout() / 2)
    }

    /// `header_timeout_secs` as a duration.
    pub fn header_timeout(&self) -> Duration {
        Duration::from_secs(self.header_timeout_secs)
    }

    /// `body_timeout_secs` as a duration.
    pub fn body_timeout(&self) -> Duration {
        Duration::from_secs(self.body_timeout_secs)
    }

    /// Whether the main listener speaks TLS (`tls_cert` and `tls_key` set).
    pub fn is_tls(&self) -> bool {
        self.tls_cert.is_some() && self.tls_key.is_some()
    }
}

/// `[session]`: how long connections and sessions live, and how many.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// Seconds a long-poll request is held open when there is nothing to
    /// send; it then answers empty. Default 25; must be > 0 and less than
    /// `session_ttl_secs`.
    pub poll_timeout_secs: u64,
    /// Seconds a long-poll user's session (and its queued messages) lives
    /// between two polls. Default 60; must be > 0.
    pub session_ttl_secs: u64,
    /// Seconds a WebSocket or SSE connection may stay silent (no frame, no
    /// pong) before it is closed. Default 60; must be > 0.
    pub idle_timeout_secs: u64,
    /// Seconds between server pings on WebSocket and SSE. Default 25; must
    /// be > 0 and less than `idle_timeout_secs`.
    pub ping_interval_secs: u64,
    /// Most connections the process holds over all transports; more are
    /// refused. Default 19000; must be >= 1.
    pub max_connections: usize,
    /// Most simultaneous connections of one user id; a new one replaces the
    /// oldest. Default 8; must be >= 1.
    pub max_connections_per_user: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            poll_timeout_secs: 25,
            session_ttl_secs: 60,
            idle_timeout_secs: 60,
            ping_interval_secs: 25,
            max_connections: 19_000,
            max_connections_per_user: 8,
        }
    }
}

impl SessionConfig {
    /// `poll_timeout_secs` as a duration.
    pub fn poll_timeout(&self) -> Duration {
        Duration::from_secs(self.poll_timeout_secs)
    }

    /// `session_ttl_secs` as a duration.
    pub fn session_ttl(&self) -> Duration {
        Duration::from_secs(self.session_ttl_secs)
    }

    /// `idle_timeout_secs` as a duration.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }

    /// `ping_interval_secs` as a duration.
    pub fn ping_interval(&self) -> Duration {
        Duration::from_secs(self.ping_interval_secs)
    }
}

/// `[timer]`: the hashed timing wheel that holds every timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimerConfig {
    /// Milliseconds per wheel tick: the resolution of every timeout.
    /// Default 100; must be in 1..=1000.
    pub tick_ms: u64,
    /// Number of wheel slots; one turn of the wheel is `slots * tick_ms`.
    /// Default 4096; must be a power of two in 16..=1048576.
    pub slots: usize,
}

impl Default for TimerConfig {
    fn default() -> Self {
        Self {
            tick_ms: 100,
            slots: 4096,
        }
    }
}

impl TimerConfig {
    /// `tick_ms` as a duration.
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }
}

/// `[history]`: recent messages kept per stream so cursors can resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// Messages kept per stream (the broadcast stream and each user's).
    /// Default 100; 0 keeps none (every resume reports a gap); at most 100000.
    pub size: usize,
    /// Seconds a message stays in history, and how long a push `id` is
    /// remembered for de-duplication. Default 300; must be > 0.
    pub ttl_secs: u64,
    /// Most streams (users' and channels') holding history at once on the
    /// memory broker; a push that would start one more is refused with
    /// `503 history_full` until some age out. Default 1000000; >= 1.
    pub max_streams: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            size: 100,
            ttl_secs: 300,
            max_streams: 1_000_000,
        }
    }
}

impl HistoryConfig {
    /// `ttl_secs` as a duration.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs)
    }
}

/// `[auth]`: who may connect and who may push.
///
/// Client tokens are checked with `secret` (HS256), `public_keys` (RS256,
/// ES256, EdDSA) and the keys at `jwks_url`: at least one of the three
/// must be set.
///
/// Its `Debug` masks `secret`, `api_key` and a password in `jwks_url`, so
/// logging a config never leaks them.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HS256 key that signs client tokens (JWT), at least 16 bytes.
    /// Default empty: no HS256 tokens, which validation accepts only when
    /// `public_keys` or `jwks_url` is set.
    pub secret: String,
    /// Paths of PEM files, one public key each (`-----BEGIN PUBLIC
    /// KEY-----`): RSA keys verify RS256 tokens, EC P-256 keys ES256,
    /// Ed25519 keys EdDSA. Read at start; a file that does not hold such a
    /// key stops the start. Default `[]`.
    pub public_keys: Vec<String>,
    /// URL (`http://` or `https://`) of a JWK set (RFC 7517) whose RSA,
    /// EC P-256 and Ed25519 signing keys verify RS256, ES256 and EdDSA
    /// tokens, a token's `kid` choosing the key. Fetched at start (waiting
    /// at most 3 s), then every `jwks_refresh_secs`, and at once (at most
    /// every 10 s) when a token names an unknown `kid`. Default unset.
    pub jwks_url: Option<String>,
    /// Seconds between background refreshes of `jwks_url`. Default 300;
    /// 10..=86400.
    pub jwks_refresh_secs: u64,
    /// When set, a token's `iss` claim must equal it. Default unset: `iss`
    /// is not checked.
    pub issuer: Option<String>,
    /// When set, a token's `aud` claim (a string or a list) must name it.
    /// Default unset: a token with any `aud` is refused, as it was meant
    /// for another service.
    pub audience: Option<String>,
    /// Bearer key backends present on `POST /push` and other backend
    /// endpoints. Default empty, which fails validation: at least 16 bytes.
    pub api_key: String,
    /// Also accept `?uid=<user id>` without a token (load tests, local
    /// demos). Default false.
    pub anonymous: bool,
    /// Origins browsers may connect from: `"*"` (any) or exact origins
    /// `scheme://host[:port]` without a path. Default `["*"]`; must not be
    /// empty. Requests without an `Origin` header are not refused for it.
    pub allowed_origins: Vec<String>,
    /// URL (`http://` or `https://`) of the site's connect proxy: a client
    /// that connects with no token (and no anonymous `uid`) is admitted or
    /// refused by a `POST` of its request (cookie, authorization, origin,
    /// user agent, query, address) to it, answered `200
    /// {"user":…,"channels":[…],"expires_at":N}`, `401` or `403` (see
    /// `auth::proxy`). A password in it (`https://user:pass@host/`) is sent
    /// as HTTP Basic auth and masked in logs. Default unset: no proxy, a
    /// client without a token gets `401`.
    pub connect_proxy_url: Option<String>,
    /// Longest wait for the connect proxy's answer, in milliseconds; no
    /// answer in time is `503 unavailable` for the client. Default 1000;
    /// 1..=60000.
    pub connect_proxy_timeout_ms: u64,
    /// Most requests to the connect proxy in flight at once, so a
    /// reconnect storm cannot take the site down; a client past it waits
    /// for a free slot (`connect_proxy_queue_ms`). Default 64; 1..=100000.
    pub connect_proxy_concurrency: usize,
    /// Longest wait for a free connect proxy slot, in milliseconds; past
    /// it the client gets `503 unavailable` with a `Retry-After` drawn from
    /// `1..=[limits] connection_retry_spread_secs`. 0: refused at once.
    /// Default 1000; 0..=60000.
    pub connect_proxy_queue_ms: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            secret: String::new(),
            public_keys: Vec::new(),
            jwks_url: None,
            jwks_refresh_secs: 300,
            issuer: None,
            audience: None,
            api_key: String::new(),
            anonymous: false,
            allowed_origins: vec!["*".to_owned()],
            connect_proxy_url: None,
            connect_proxy_timeout_ms: 1000,
            connect_proxy_concurrency: 64,
            connect_proxy_queue_ms: 1000,
        }
    }
}

impl AuthConfig {
    /// True when `secret` or `api_key` is the development value shipped in
    /// `config.toml`, which must never reach production.
    pub fn uses_shipped_dev_values(&self) -> bool {
        self.secret == SHIPPED_DEV_SECRET || self.api_key == SHIPPED_DEV_API_KEY
    }

    /// `jwks_refresh_secs` as a duration.
    pub fn jwks_refresh(&self) -> Duration {
        Duration::from_secs(self.jwks_refresh_secs)
    }

    /// `connect_proxy_timeout_ms` as a duration.
    pub fn connect_proxy_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_proxy_timeout_ms)
    }

    /// `connect_proxy_queue_ms` as a duration.
    pub fn connect_proxy_queue(&self) -> Duration {
        Duration::from_millis(self.connect_proxy_queue_ms)
    }
}

/// `[limits]`: sizes and rates that protect the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest `POST /push` body, in bytes; larger gets `413`. Default
    /// 65536; must be in 64..=16777216 (16 MiB).
    pub max_push_bytes: usize,
    /// Most user ids in one push's `to` list; more gets `400
    /// too_many_users`. Default 1000; must be >= 1.
    pub max_push_users: usize,
    /// Largest frame a client may send on a WebSocket, in bytes; larger
    /// closes the connection. Default 4096; must be >= 64.
    pub max_client_frame_bytes: usize,
    /// Frames queued per connection before it counts as a slow consumer and
    /// is closed. Default 256; must be >= 1.
    pub outbound_queue: usize,
    /// Most channels one connection may be in, its token's claim and what
    /// it asked for together; more gets `400 too_many_channels`. Default
    /// 64; 1..=10000.
    pub max_channels_per_connection: usize,
    /// Most channels one push may name; more gets `400
    /// too_many_channels`. Default 100; 1..=10000.
    pub max_push_channels: usize,
    /// Accepted `POST /push` requests per second for the whole process;
    /// more get `429`. Default 1000; 0 means unlimited.
    pub push_rate_per_sec: u32,
    /// Most open TCP connections to the main listener from one client
    /// address (an IPv4 address, or an IPv6 /64), counted from accept until
    /// the connection closes (WebSockets and SSE streams included); more are
    /// refused (`503 ip_limit`). Default 0: unlimited, because an office or
    /// a carrier's NAT puts thousands of users behind one address (see
    /// README, "Limits", for a setting when the gateway faces the internet
    /// without a proxy). Behind a proxy every connection comes from the
    /// proxy's address: leave it 0.
    pub max_connections_per_ip: usize,
    /// New TCP connections per second from one client address (bursts up
    /// to this many); more are refused (`503 ip_limit`). Default 0:
    /// unlimited (see `max_connections_per_ip`).
    pub connection_rate_per_ip: u32,
    /// New TCP connections per second to the main listener from all
    /// addresses together: what protects the process in a reconnect storm
    /// or a flood, whoever sends it. More are refused (`503 overloaded`,
    /// with a `Retry-After` spread over `connection_retry_spread_secs`).
    /// Default 5000; 0 means unlimited.
    pub connection_rate: u32,
    /// New connections admitted at once above `connection_rate` before it
    /// applies (the bucket's size). Default 10000; must be >= 1.
    pub connection_burst: u32,
    /// A connection refused by `connection_rate`, because the connect
    /// proxy (`[auth] connect_proxy_url`) is saturated or failing, or
    /// because its resume's history read on Redis failed, is told to
    /// retry after a whole number of seconds drawn uniformly from `1..=`
    /// this, so refused clients do not come back together. Default 10;
    /// 1..=3600.
    pub connection_retry_spread_secs: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_push_bytes: 65_536,
            max_push_users: 1000,
            max_client_frame_bytes: 4096,
            outbound_queue: 256,
            max_channels_per_connection: 64,
            max_push_channels: 100,
            push_rate_per_sec: 1000,
            max_connections_per_ip: 0,
            connection_rate_per_ip: 0,
            connection_rate: 5000,
            connection_burst: 10_000,
            connection_retry_spread_secs: 10,
        }
    }
}

/// Which bus carries messages between gateway instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrokerKind {
    /// In-process bus: a single instance, history lost on restart.
    #[default]
    Memory,
    /// Redis pub/sub and shared history: several instances behind a
    /// load balancer.
    Redis,
}

/// `[broker]`: the bus between gateway instances.
///
/// Its `Debug` masks the password in `url`, so logging a config never
/// leaks it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    /// `"memory"` (embedded, the default) or `"redis"`.
    pub kind: BrokerKind,
    /// Redis URL, used when `kind = "redis"`. Default
    /// `"redis://127.0.0.1:6379"`. A password in it
    /// (`redis://user:password@host`, or `?pass=` on a socket URL) is shown
    /// as `***` wherever the URL is printed or logged.
    pub url: String,
    /// Prefix of every Redis key and channel, so instances of different
    /// deployments can share one Redis. Default `"pushgate"`; must not be
    /// empty.
    pub key_prefix: String,
    /// Milliseconds to wait for Redis to answer one command (and to connect)
    /// before the command fails (a push then answers 503). Default 2000; > 0.
    pub timeout_ms: u64,
    /// Seconds to keep trying to reach Redis at start before giving up and
    /// exiting non-zero. Default 0: exit at once if Redis is unreachable.
    pub start_wait_secs: u64,
    /// Seconds a node's presence (its connection counts per user) outlives
    /// its last heartbeat, so a crashed node's counts vanish. Default 15; the
    /// heartbeat runs every third of it; >= 3.
    pub presence_ttl_secs: u64,
    /// Whether `url` (or `urls`) names a Redis Cluster: streams are then
    /// spread over `shards` hash slots, published with sharded pub/sub
    /// (Redis 7), and each node subscribes only to the streams its
    /// connections are in. Default false (one Redis).
    pub cluster: bool,
    /// Seed nodes of the Redis Cluster (any reachable subset of its
    /// nodes); when empty, `url` is the one seed. Only with `cluster`.
    pub urls: Vec<String>,
    /// Shards of the message sequence on a Redis Cluster: each stream
    /// (broadcast, each user, each channel) belongs to one, each shard has
    /// its own sequence on its own hash slot, and a cursor holds one
    /// position per shard (17 to 37 bytes each). Default 6, a multiple of
    /// 1, 2, 3 and 6 masters (the slots are spread evenly, so 3 masters
    /// get 2 each; 8 would fall 3, 3 and 2 and put 3/8 of the publish work
    /// on one master); 1 to 64. Changing it makes every cursor a gap
    /// (`recover` with `complete: false`).
    pub shards: usize,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            kind: BrokerKind::Memory,
            url: "redis://127.0.0.1:6379".to_owned(),
            key_prefix: "pushgate".to_owned(),
            timeout_ms: 2000,
            start_wait_secs: 0,
            presence_ttl_secs: 15,
            cluster: false,
            urls: Vec::new(),
            shards: 6,
        }
    }
}

impl BrokerConfig {
    /// The per-command timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// How long presence outlives a node's last heartbeat.
    pub fn presence_ttl(&self) -> Duration {
        Duration::from_secs(self.presence_ttl_secs)
    }
}

/// `[metrics]`: the Prometheus endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Socket address of a separate metrics listener. Default none: metrics
    /// are served on the main listener at `/metrics`.
    pub listen: Option<String>,
}

impl MetricsConfig {
    /// `listen` as a socket address, `None` when unset.
    pub fn listen_addr(&self) -> Result<Option<SocketAddr>, AddrParseError> {
        self.listen.as_deref().map(str::parse).transpose()
    }
}

/// How log lines are written (`[log] format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event, coloured only when stdout is a
    /// terminal.
    #[default]
    Text,
    /// One JSON object per line with the fields `ts`, `level`, `target`,
    /// `msg` and the event's (and its spans') own fields, for log shippers.
    Json,
}

/// `[log]`: what the process logs to stdout and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `"text"` (the default) or `"json"`.
    pub format: LogFormat,
    /// The filter: a level (`error`, `warn`, `info`, `debug`, `trace`,
    /// `off`) or `tracing` directives such as `"info,pushgate=debug"`.
    /// Default `"info"`. `PUSHGATE_LOG`, else `RUST_LOG`, when set in the
    /// environment, replaces it.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".to_owned(),
        }
    }
}

/// `[demo]`: development helpers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemoConfig {
    /// Adds `/demo/token` and `/demo/push` (unauthenticated token minting
    /// and pushing) for the demo page. Default false; must be off in
    /// production. Refused on a `server.listen` address other than
    /// loopback unless `allow_public` is set.
    pub enabled: bool,
    /// Lets demo mode run on an address other than loopback: for a
    /// deliberate public demo, where anyone may act as any user. Default
    /// false. The development keys shipped in `config.toml` stay refused
    /// off loopback whatever this says.
    pub allow_public: bool,
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Io {
        /// The file that was asked for.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not fit the config tree (unknown
    /// key, wrong type); the message names the key and line.
    #[error("invalid config file: {0}")]
    Parse(String),
    /// A `PUSHGATE_*` environment variable names no key or has a bad value.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable's name.
        var: String,
        /// What is wrong with it.
        message: String,
    },
    /// The values parse but break rules; every problem is listed.
    #[error("invalid configuration:\n{0}")]
    Invalid(ConfigErrors),
}

/// A configuration, and the `PUSHGATE_*` variables the environment
/// overlay ignored as not meant for it (Kubernetes service links, a
/// script's own), sorted, for one warning line at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// The variables ignored (names only: their values may be secrets).
    pub ignored_env: Vec<String>,
}

impl Loaded {
    /// The warning to log at start if variables were ignored: one line
    /// that lists them.
    pub fn ignored_env_warning(&self) -> Option<String> {
        (!self.ignored_env.is_empty()).then(|| {
            format!(
                "ignoring {} environment variable(s) that name no configuration section \
                 or are Kubernetes service links: {}",
                self.ignored_env.len(),
                self.ignored_env.join(", ")
            )
        })
    }
}

/// Every rule a configuration breaks, one line each, starting with the
/// dotted path of the key: `session.outbound_queue: must be > 0, got 0`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigErrors {
    problems: Vec<String>,
}

impl ConfigErrors {
    /// The problems, in the order of the config file.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// Records one problem with the key at `path`.
    fn push(&mut self, path: &str, message: impl fmt::Display) {
        self.problems.push(format!("{path}: {message}"));
    }

    /// Records a problem with `path` unless `ok`.
    fn check(&mut self, ok: bool, path: &str, message: impl fmt::Display) {
        if !ok {
            self.push(path, message);
        }
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problems.join("\n"))
    }
}

impl std::error::Error for ConfigErrors {}

impl Config {
    /// Parses a TOML document; omitted keys keep their defaults, unknown
    /// keys are errors. Does not validate: see [`Config::load`].
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|err| ConfigError::Parse(err.to_string()))
    }

    /// Reads `path`, applies the environment overlay from `env` and
    /// validates: the only way the binary builds a configuration from a
    /// file. A missing file is an error naming it.
    pub fn load(
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Loaded, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        let config = Config::from_toml_str(&text).map_err(|err| match err {
            ConfigError::Parse(message) => {
                ConfigError::Parse(format!("{}: {message}", path.display()))
            }
            other => other,
        })?;
        config.overlay_env(env)?.validated()
    }

    /// Built-in defaults plus the environment overlay, validated: for
    /// running without a config file.
    pub fn load_without_file(
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Loaded, ConfigError> {
        Config::default().overlay_env(env)?.validated()
    }

    /// Overrides keys from `PUSHGATE_<SECTION>_<KEY>` pairs, for example
    /// `PUSHGATE_SESSION_IDLE_TIMEOUT_SECS=30`. Values are typed by the key:
    /// integers, `true`/`false`, strings, and comma-separated lists for
    /// arrays. Names without the prefix are ignored, as are the binary's own
    /// `PUSHGATE_CONFIG` and `PUSHGATE_LOG`. Of the other `PUSHGATE_`
    /// names, those in the shapes Kubernetes injects for a Service named
    /// `pushgate…` and those whose first word is no section are ignored and
    /// returned; one that names a section but no key of it
    /// (`PUSHGATE_SERVER_LISTN`) is an error, like a typo in the file.
    pub fn overlay_env(
        self,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Loaded, ConfigError> {
        let mut vars: Vec<(String, String)> = env
            .into_iter()
            .filter(|(var, _)| var.starts_with(ENV_PREFIX) && !RESERVED_ENV.contains(&var.as_str()))
            .collect();
        if vars.is_empty() {
            return Ok(Loaded {
                config: self,
                ignored_env: Vec::new(),
            });
        }
        vars.sort();
        let schema = to_table(&Config::default())?;
        let mut table = to_table(&self)?;
        let mut ignored_env = Vec::new();
        for (var, raw) in vars {
            if env::apply(&schema, &mut table, &var, &raw)? == env::Applied::Ignored {
                ignored_env.push(var);
            }
        }
        let config = table
            .try_into()
            .map_err(|err: toml::de::Error| ConfigError::Parse(err.to_string()))?;
        Ok(Loaded {
            config,
            ignored_env,
        })
    }

    /// [`Config::overlay_env`] without the list of ignored variables.
    pub fn apply_env(
        self,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        self.overlay_env(env).map(|loaded| loaded.config)
    }

    /// Checks every rule and returns every problem at once.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errors = ConfigErrors::default();
        validate::server(&self.server, &mut errors);
        validate::session(&self.session, &mut errors);
        validate::timer(&self.timer, &mut errors);
        validate::history(&self.history, &mut errors);
        validate::auth(&self.auth, &mut errors);
        validate::limits(&self.limits, &mut errors);
        validate::channels(&self.channels, &mut errors);
        validate::broker(&self.broker, &mut errors);
        validate::metrics(&self.metrics, &self.server, &mut errors);
        validate::log(&self.log, &mut errors);
        validate::demo(self, &mut errors);
        validate::exposure(self, &mut errors);
        if errors.problems.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The effective configuration as TOML with `auth.secret`,
    /// `auth.api_key` and the password in `broker.url` shown as `***` (for
    /// `pushgate check-config`). An unset
    /// `metrics.listen`, and unset `server.tls_cert` and `server.tls_key`,
    /// show as comments.
    pub fn to_masked_toml(&self) -> String {
        let masked = Config {
            auth: self.auth.masked(),
            broker: self.broker.masked(),
            ..self.clone()
        };
        let mut text =
            toml::to_string(&masked).expect("the config tree has only TOML-representable values");
        if self.server.tls_cert.is_none() && self.server.tls_key.is_none() {
            text = text.replacen(
                "[server]\n",
                "[server]\n# tls_cert and tls_key unset: plain HTTP, no TLS\n",
                1,
            );
        }
        if self.metrics.listen.is_none() {
            return text.replacen(
                "[metrics]\n",
                "[metrics]\n# listen unset: /metrics is served on server.listen\n",
                1,
            );
        }
        text
    }
}

impl Loaded {
    /// `self` if its configuration validates.
    fn validated(self) -> Result<Loaded, ConfigError> {
        self.config.validate().map_err(ConfigError::Invalid)?;
        Ok(self)
    }
}

/// The config as a TOML table, the form the overlay edits.
fn to_table(config: &Config) -> Result<Table, ConfigError> {
    Table::try_from(config).map_err(|err| ConfigError::Parse(err.to_string()))
}

#[cfg(test)]
mod tests;
