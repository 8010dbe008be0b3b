//! The rules, one function per section.

use super::{
    AuthConfig, BrokerConfig, BrokerKind, ChannelsConfig, Config, ConfigErrors, HistoryConfig,
    LimitsConfig, LogConfig, MAX_PUSH_BYTES_LIMIT, MIN_SECRET_BYTES, MetricsConfig,
    SHIPPED_DEV_API_KEY, SHIPPED_DEV_SECRET, ServerConfig, SessionConfig, TimerConfig,
};
use std::net::{Ipv6Addr, SocketAddr};

/// The longest wait any key may set: ten years, in seconds. Longer means
/// "never" in practice, and the cap keeps every deadline and millisecond
/// count computed from the configuration far from overflowing.
const MAX_DURATION_SECS: u64 = 10 * 365 * 86_400;

pub(super) fn server(server: &ServerConfig, errors: &mut ConfigErrors) {
    socket_addr("server.listen", &server.listen, errors);
    for (path, value) in [
        ("server.drain_timeout_secs", server.drain_timeout_secs),
        ("server.drain_spread_secs", server.drain_spread_secs),
        ("server.header_timeout_secs", server.header_timeout_secs),
        ("server.body_timeout_secs", server.body_timeout_secs),
    ] {
        duration_secs(path, value, errors);
    }
    positive(
        "server.header_timeout_secs",
        server.header_timeout_secs,
        errors,
    );
    positive("server.body_timeout_secs", server.body_timeout_secs, errors);
    in_range(
        "server.fanout_nice",
        u64::from(server.fanout_nice),
        0,
        19,
        errors,
    );
    in_range("server.cores", u64::from(server.cores), 0, 1024, errors);
    in_range(
        "server.defer_accept_secs",
        u64::from(server.defer_accept_secs),
        0,
        60,
        errors,
    );
    tls_pair(server, errors);
}

/// `tls_cert` and `tls_key` come together, as non-empty paths. Whether the
/// files hold a usable certificate and key is checked when the server
/// starts (`server::tls`), which names the key too.
fn tls_pair(server: &ServerConfig, errors: &mut ConfigErrors) {
    let pair = [
        ("server.tls_cert", &server.tls_cert, "server.tls_key"),
        ("server.tls_key", &server.tls_key, "server.tls_cert"),
    ];
    for (path, value, other) in pair {
        match value {
            Some(file) => errors.check(
                !file.trim().is_empty(),
                path,
                format_args!("must be the path of a PEM file, got {file:?}"),
            ),
            None => errors.check(
                pair.iter().all(|(_, v, _)| v.is_none()),
                path,
                format_args!("must be set when {other} is (both or neither), got nothing"),
            ),
        }
    }
}

pub(super) fn session(session: &SessionConfig, errors: &mut ConfigErrors) {
    for (path, value) in [
        ("session.poll_timeout_secs", session.poll_timeout_secs),
        ("session.session_ttl_secs", session.session_ttl_secs),
        ("session.idle_timeout_secs", session.idle_timeout_secs),
        ("session.ping_interval_secs", session.ping_interval_secs),
    ] {
        duration_secs(path, value, errors);
    }
    positive(
        "session.poll_timeout_secs",
        session.poll_timeout_secs,
        errors,
    );
    positive("session.session_ttl_secs", session.session_ttl_secs, errors);
    positive(
        "session.idle_timeout_secs",
        session.idle_timeout_secs,
        errors,
    );
    positive(
        "session.ping_interval_secs",
        session.ping_interval_secs,
        errors,
    );
    less_than(
        ("session.ping_interval_secs", session.ping_interval_secs),
        ("session.idle_timeout_secs", session.idle_timeout_secs),
        errors,
    );
    less_than(
        ("session.poll_timeout_secs", session.poll_timeout_secs),
        ("session.session_ttl_secs", session.session_ttl_secs),
        errors,
    );
    positive(
        "session.max_connections",
        session.max_connections as u64,
        errors,
    );
    positive(
        "session.max_connections_per_user",
        session.max_connections_per_user as u64,
        errors,
    );
}

pub(super) fn timer(timer: &TimerConfig, errors: &mut ConfigErrors) {
    in_range("timer.tick_ms", timer.tick_ms, 1, 1000, errors);
    errors.check(
        timer.slots.is_power_of_two() && (16..=1_048_576).contains(&timer.slots),
        "timer.slots",
        format_args!(
            "must be a power of two in 16..=1048576, got {}",
            timer.slots
        ),
    );
}

pub(super) fn history(history: &HistoryConfig, errors: &mut ConfigErrors) {
    in_range("history.size", history.size as u64, 0, 100_000, errors);
    positive("history.ttl_secs", history.ttl_secs, errors);
    positive("history.max_streams", history.max_streams as u64, errors);
    duration_secs("history.ttl_secs", history.ttl_secs, errors);
}

pub(super) fn auth(auth: &AuthConfig, errors: &mut ConfigErrors) {
    token_keys(auth, errors);
    connect_proxy(auth, errors);
    secret("auth.api_key", &auth.api_key, errors);
    errors.check(
        !auth.allowed_origins.is_empty(),
        "auth.allowed_origins",
        "must not be empty (use [\"*\"] to allow every origin), got []",
    );
    for (index, origin) in auth.allowed_origins.iter().enumerate() {
        if let Err(why) = check_origin(origin) {
            errors.push(
                &format!("auth.allowed_origins[{index}]"),
                format_args!("{why}, got {origin:?}"),
            );
        }
    }
}

/// Client tokens need a key: `secret`, `public_keys` or `jwks_url`, unless
/// `connect_proxy_url` admits clients without one. Whether the PEM files
/// hold usable keys is checked when the gateway starts, which names the
/// key too.
fn token_keys(auth: &AuthConfig, errors: &mut ConfigErrors) {
    let has_public_keys = !auth.public_keys.is_empty() || auth.jwks_url.is_some();
    if auth.secret.is_empty() && !has_public_keys && auth.connect_proxy_url.is_none() {
        errors.push(
            "auth.secret",
            format_args!(
                "must be set (at least {MIN_SECRET_BYTES} bytes), or set auth.public_keys or \
                 auth.jwks_url: client tokens need a key"
            ),
        );
    } else if !auth.secret.is_empty() {
        secret("auth.secret", &auth.secret, errors);
    }
    for (index, path) in auth.public_keys.iter().enumerate() {
        errors.check(
            !path.trim().is_empty(),
            &format!("auth.public_keys[{index}]"),
            format_args!("must be the path of a PEM public key file, got {path:?}"),
        );
    }
    if let Some(url) = &auth.jwks_url {
        http_url("auth.jwks_url", url, errors);
    }
    in_range(
        "auth.jwks_refresh_secs",
        auth.jwks_refresh_secs,
        10,
        86_400,
        errors,
    );
    for (path, value) in [
        ("auth.issuer", &auth.issuer),
        ("auth.audience", &auth.audience),
    ] {
        if let Some(value) = value {
            errors.check(
                !value.is_empty(),
                path,
                "must not be empty (leave it unset to not check the claim), got \"\"",
            );
        }
    }
}

/// `connect_proxy_url` is an `http://` or `https://` URL; its timeout,
/// concurrency and queue wait are in range (checked whether or not it is set, as every
/// key is).
fn connect_proxy(auth: &AuthConfig, errors: &mut ConfigErrors) {
    if let Some(url) = &auth.connect_proxy_url {
        http_url("auth.connect_proxy_url", url, errors);
    }
    in_range(
        "auth.connect_proxy_timeout_ms",
        auth.connect_proxy_timeout_ms,
        1,
        60_000,
        errors,
    );
    in_range(
        "auth.connect_proxy_concurrency",
        auth.connect_proxy_concurrency as u64,
        1,
        100_000,
        errors,
    );
    in_range(
        "auth.connect_proxy_queue_ms",
        auth.connect_proxy_queue_ms,
        0,
        60_000,
        errors,
    );
}

/// An `http://` or `https://` URL with a host, shown masked when it is not.
fn http_url(path: &str, url: &str, errors: &mut ConfigErrors) {
    let ok = url.parse::<hyper::Uri>().is_ok_and(|uri| {
        matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
    });
    errors.check(
        ok,
        path,
        format_args!(
            "must be an http:// or https:// URL, got {:?}",
            super::masked_url(url)
        ),
    );
}

pub(super) fn channels(channels: &ChannelsConfig, errors: &mut ConfigErrors) {
    for (index, pattern) in channels.public.iter().enumerate() {
        let name = pattern.strip_suffix('*').unwrap_or(pattern);
        // `"*"` alone (every channel) is a pattern with an empty prefix.
        let is_name = (1..=128).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:@-".contains(&b));
        let ok = is_name || pattern == "*";
        errors.check(
            ok,
            &format!("channels.public[{index}]"),
            format_args!(
                "must be a channel name (A-Z a-z 0-9 _ . : @ -, 1 to 128 bytes), \
                 optionally ending in *, got {pattern:?}"
            ),
        );
    }
}

pub(super) fn limits(limits: &LimitsConfig, errors: &mut ConfigErrors) {
    in_range(
        "limits.max_channels_per_connection",
        limits.max_channels_per_connection as u64,
        1,
        10_000,
        errors,
    );
    in_range(
        "limits.max_push_channels",
        limits.max_push_channels as u64,
        1,
        10_000,
        errors,
    );
    let max_push = MAX_PUSH_BYTES_LIMIT as u64;
    in_range(
        "limits.max_push_bytes",
        limits.max_push_bytes as u64,
        64,
        max_push,
        errors,
    );
    positive(
        "limits.max_push_users",
        limits.max_push_users as u64,
        errors,
    );
    errors.check(
        limits.max_client_frame_bytes >= 64,
        "limits.max_client_frame_bytes",
        format_args!("must be >= 64, got {}", limits.max_client_frame_bytes),
    );
    positive(
        "limits.outbound_queue",
        limits.outbound_queue as u64,
        errors,
    );
    positive(
        "limits.connection_burst",
        u64::from(limits.connection_burst),
        errors,
    );
    in_range(
        "limits.connection_retry_spread_secs",
        limits.connection_retry_spread_secs,
        1,
        3600,
        errors,
    );
}

/// What must never be reachable from other hosts: the development keys
/// published in `config.toml` and README (anyone could mint tokens and
/// push), and demo mode (anyone may act as any user) unless a public demo
/// is meant (`demo.allow_public`). Loopback only; an unparsable
/// `server.listen` is already reported.
pub(super) fn exposure(config: &Config, errors: &mut ConfigErrors) {
    let listen = &config.server.listen;
    let Ok(addr) = listen.parse::<SocketAddr>() else {
        return;
    };
    if addr.ip().to_canonical().is_loopback() {
        return;
    }
    let keys = [
        (
            "auth.secret",
            &config.auth.secret,
            SHIPPED_DEV_SECRET,
            "PUSHGATE_AUTH_SECRET",
        ),
        (
            "auth.api_key",
            &config.auth.api_key,
            SHIPPED_DEV_API_KEY,
            "PUSHGATE_AUTH_API_KEY",
        ),
    ];
    for (path, value, shipped, var) in keys {
        errors.check(
            value != shipped,
            path,
            format_args!(
                "is the development value published in config.toml and README, and \
                 server.listen ({listen:?}) is not a loopback address: set one of your own \
                 (at least {MIN_SECRET_BYTES} bytes, for example with {var}), or listen on \
                 127.0.0.1"
            ),
        );
    }
    errors.check(
        !config.demo.enabled || config.demo.allow_public,
        "demo.enabled",
        format_args!(
            "demo mode lets anyone act as any user and push to everyone, and server.listen \
             ({listen:?}) is not a loopback address: set demo.enabled = false, or listen on \
             127.0.0.1, or for a deliberate public demo set demo.allow_public = true"
        ),
    );
}

/// Demo mode mints HS256 tokens, so it needs `auth.secret`.
pub(super) fn demo(config: &Config, errors: &mut ConfigErrors) {
    errors.check(
        !config.demo.enabled || !config.auth.secret.is_empty(),
        "demo.enabled",
        "demo mode mints HS256 tokens with auth.secret, which is not set",
    );
}

/// The most shards a cursor may hold positions for (`history::cursor`
/// refuses longer ones).
const MAX_SHARDS: usize = crate::history::cursor::MAX_POSITIONS;

pub(super) fn broker(broker: &BrokerConfig, errors: &mut ConfigErrors) {
    const SCHEMES: [&str; 4] = ["redis://", "rediss://", "redis+unix://", "unix://"];
    if broker.kind == BrokerKind::Redis {
        errors.check(
            SCHEMES.iter().any(|scheme| broker.url.starts_with(scheme)),
            "broker.url",
            format_args!(
                "must start with redis://, rediss://, redis+unix:// or unix://, got {:?}",
                super::masked_url(&broker.url)
            ),
        );
        for url in &broker.urls {
            errors.check(
                url.starts_with("redis://") || url.starts_with("rediss://"),
                "broker.urls",
                format_args!(
                    "cluster seeds must start with redis:// or rediss://, got {:?}",
                    super::masked_url(url)
                ),
            );
        }
    }
    errors.check(
        broker.urls.is_empty() || broker.cluster,
        "broker.urls",
        "lists Redis Cluster seed nodes: set broker.cluster = true (one Redis takes broker.url)",
    );
    errors.check(
        (1..=MAX_SHARDS).contains(&broker.shards),
        "broker.shards",
        format_args!("must be 1 to {MAX_SHARDS}, got {}", broker.shards),
    );
    errors.check(
        !broker.key_prefix.is_empty(),
        "broker.key_prefix",
        "must not be empty, got \"\"",
    );
    errors.check(
        broker.timeout_ms > 0,
        "broker.timeout_ms",
        format_args!("must be > 0, got {}", broker.timeout_ms),
    );
    errors.check(
        broker.timeout_ms <= MAX_DURATION_SECS * 1000,
        "broker.timeout_ms",
        format_args!(
            "must be at most {} ms (ten years), got {}",
            MAX_DURATION_SECS * 1000,
            broker.timeout_ms
        ),
    );
    duration_secs("broker.start_wait_secs", broker.start_wait_secs, errors);
    duration_secs("broker.presence_ttl_secs", broker.presence_ttl_secs, errors);
    errors.check(
        broker.presence_ttl_secs >= 3,
        "broker.presence_ttl_secs",
        format_args!("must be >= 3, got {}", broker.presence_ttl_secs),
    );
}

pub(super) fn metrics(metrics: &MetricsConfig, server: &ServerConfig, errors: &mut ConfigErrors) {
    let Some(listen) = &metrics.listen else {
        return;
    };
    let Some(addr) = socket_addr("metrics.listen", listen, errors) else {
        return;
    };
    let same_as_main = server.listen.parse::<SocketAddr>().ok() == Some(addr);
    errors.check(
        addr.port() == 0 || !same_as_main,
        "metrics.listen",
        format_args!("must differ from server.listen (or be left unset), got {listen:?}"),
    );
}

/// `[log]`: `level` parses as `tracing` filter directives, and a bare word is a
/// level: `tracing` would read a misspelt level (`"debgu"`) as a target
/// name and quietly log nothing of ours.
pub(super) fn log(log: &LogConfig, errors: &mut ConfigErrors) {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let level = log.level.trim();
    let bad = level.is_empty()
        || level.split(',').map(str::trim).any(|directive| {
            let bare = !directive.contains(['=', '[', ':']);
            directive
                .parse::<tracing_subscriber::filter::Directive>()
                .is_err()
                || (bare && !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(directive)))
        });
    errors.check(
        !bad,
        "log.level",
        format_args!(
            "must be a level (off, error, warn, info, debug, trace) or directives such as \"info,pushgate=debug\", got {:?}",
            log.level
        ),
    );
}

/// Parses `value` as `ip:port`, recording a problem if it is not one.
fn socket_addr(path: &str, value: &str, errors: &mut ConfigErrors) -> Option<SocketAddr> {
    let addr = value.parse().ok();
    errors.check(
        addr.is_some(),
        path,
        format_args!("must be a socket address like 127.0.0.1:8080, got {value:?}"),
    );
    addr
}

/// Requires `value < bound`; skipped when either is 0, which `positive`
/// already reports.
fn less_than(
    (path, value): (&str, u64),
    (bound_path, bound): (&str, u64),
    errors: &mut ConfigErrors,
) {
    errors.check(
        value < bound || value == 0 || bound == 0,
        path,
        format_args!("must be less than {bound_path} ({bound}), got {value}"),
    );
}

/// A duration key in seconds is at most [`MAX_DURATION_SECS`].
fn duration_secs(path: &str, value: u64, errors: &mut ConfigErrors) {
    errors.check(
        value <= MAX_DURATION_SECS,
        path,
        format_args!("must be at most {MAX_DURATION_SECS} seconds (ten years), got {value}"),
    );
}

fn positive(path: &str, value: u64, errors: &mut ConfigErrors) {
    errors.check(value > 0, path, format_args!("must be > 0, got {value}"));
}

fn in_range(path: &str, value: u64, min: u64, max: u64, errors: &mut ConfigErrors) {
    errors.check(
        (min..=max).contains(&value),
        path,
        format_args!("must be in {min}..={max}, got {value}"),
    );
}

/// A secret is reported by its length only, never its value.
fn secret(path: &str, value: &str, errors: &mut ConfigErrors) {
    if value.is_empty() {
        errors.push(
            path,
            format_args!("must be set (at least {MIN_SECRET_BYTES} bytes)"),
        );
    } else if value.len() < MIN_SECRET_BYTES {
        errors.push(
            path,
            format_args!(
                "must be at least {MIN_SECRET_BYTES} bytes, got {} bytes",
                value.len()
            ),
        );
    }
}

/// `"*"` or an exact origin `scheme://host[:port]`; otherwise why not.
pub(super) fn check_origin(origin: &str) -> Result<(), &'static str> {
    const SHAPE: &str = "must be \"*\" or an origin like https://app.example.com";
    if origin == "*" {
        return Ok(());
    }
    let (scheme, authority) = origin.split_once("://").ok_or(SHAPE)?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return Err(SHAPE);
    }
    if authority.contains(['/', '?', '#']) {
        return Err("must be an origin without a path, query or fragment");
    }
    let (host, port) = split_host_port(authority).ok_or(SHAPE)?;
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(ipv6) => ipv6.parse::<Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-.".contains(c))
        }
    };
    if !host_ok {
        return Err(SHAPE);
    }
    match port {
        Some(port) if port.parse::<u16>().is_err() => Err("must have a port in 0..=65535"),
        _ => Ok(()),
    }
}

/// Splits `host[:port]`, where host may be a bracketed IPv6 address.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        return match rest {
            "" => Some((host, None)),
            _ => Some((host, Some(rest.strip_prefix(':')?))),
        };
    }
    match authority.split_once(':') {
        Some((host, port)) => Some((host, Some(port))),
        None => Some((authority, None)),
    }
}
