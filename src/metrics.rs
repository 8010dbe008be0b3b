//! Metrics: the names in one place, registration at start, and `/metrics`.
//!
//! Names follow Prometheus conventions and are frozen once published.
//! Labels are bounded enums (transport, stream, reason), never user ids.
//! Hot paths hold [`Counters`] handles and add once per batch.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::protocol::Transport;

/// The metric names pushgate publishes.
pub(crate) mod names {
    /// Gauge, by `transport` (ws, poll, sse): open client connections.
    pub(crate) const CONNECTIONS: &str = "pushgate_connections";
    /// Gauge: user objects alive in the registry.
    pub(crate) const SESSIONS: &str = "pushgate_sessions";
    /// Gauge: live entries in the timing wheel.
    pub(crate) const TIMER_ENTRIES: &str = "pushgate_timer_entries";
    /// Gauge: channels with at least one connection in this process.
    pub(crate) const CHANNELS: &str = "pushgate_channels";
    /// Gauge: connection-channel pairs in this process.
    pub(crate) const SUBSCRIPTIONS: &str = "pushgate_subscriptions";
    /// Counter, by `stream` (broadcast, user, channel): messages accepted by
    /// `POST /push` (a push to N channels is N messages).
    pub(crate) const MESSAGES_PUBLISHED_TOTAL: &str = "pushgate_messages_published_total";
    /// Counter, by `transport`: frames carrying a message handed to a connection.
    pub(crate) const MESSAGES_DELIVERED_TOTAL: &str = "pushgate_messages_delivered_total";
    /// Counter, by `reason` (idle, session_ttl, slow, replaced, token_expired):
    /// connections or sessions the gateway ended.
    pub(crate) const EVICTIONS_TOTAL: &str = "pushgate_evictions_total";
    /// What the fan-out histograms' names start with (they share buckets).
    pub(crate) const FANOUT_PREFIX: &str = "pushgate_fanout_";
    /// Histogram: from a message handed to the fan-out threads (numbered
    /// here, or taken from the broker) until one starts delivering it.
    pub(crate) const FANOUT_WAIT_SECONDS: &str = "pushgate_fanout_wait_seconds";
    /// Histogram: from a message handed to the fan-out threads until
    /// every one has handed it to its share of the connections.
    pub(crate) const FANOUT_DURATION_SECONDS: &str = "pushgate_fanout_duration_seconds";
    /// Histogram: how late each timer expiry fired after its deadline tick.
    pub(crate) const TIMER_LATENESS_SECONDS: &str = "pushgate_timer_lateness_seconds";
    /// Counter: Redis commands that failed (a push answered 503).
    pub(crate) const BUS_ERRORS_TOTAL: &str = "pushgate_bus_errors_total";
    /// Counter: times the node lost and renewed its Redis subscription.
    pub(crate) const BUS_RECONNECTS_TOTAL: &str = "pushgate_bus_reconnects_total";
    /// Counter: messages this node took from the broker (on a Redis
    /// Cluster, only those of streams someone here is in).
    pub(crate) const BUS_MESSAGES_RECEIVED_TOTAL: &str = "pushgate_bus_messages_received_total";
    /// Histogram: pushes per publish script on a Redis Cluster (the
    /// pushes that queued for a shard while its previous script ran).
    pub(crate) const BUS_PUBLISH_BATCH_PUSHES: &str = "pushgate_bus_publish_batch_pushes";
    /// Gauge: streams this node is subscribed to on a Redis Cluster.
    pub(crate) const BUS_SUBSCRIPTIONS: &str = "pushgate_bus_subscriptions";
    /// Counter, by `code`: API requests refused, by their stable error code.
    pub(crate) const REQUESTS_REFUSED_TOTAL: &str = "pushgate_requests_refused_total";
    /// Counter, by `reason` (ip_limit, ip_rate, node_rate, tls): TCP
    /// connections to the main listener refused or dropped before any
    /// request was served.
    pub(crate) const CONNECTIONS_REFUSED_TOTAL: &str = "pushgate_connections_refused_total";
    /// Counter, by `transport` (ws, poll, sse): clients resuming with a
    /// cursor refused `503 unavailable` because the history read after
    /// the cursor failed (a Redis error or timeout); they retry with the
    /// same cursor. Nothing stayed attached.
    pub(crate) const RESUMES_REFUSED_TOTAL: &str = "pushgate_resumes_refused_total";
    /// Gauge: `[session] max_connections`, so alerts can compare
    /// `pushgate_connections` with it.
    pub(crate) const MAX_CONNECTIONS: &str = "pushgate_max_connections";
    /// Gauge: `[timer] tick_ms` in seconds, so alerts can measure timer
    /// lateness in ticks.
    pub(crate) const TIMER_TICK_SECONDS: &str = "pushgate_timer_tick_seconds";
    /// Gauge: 1 while the broker is reachable, else 0 (the broker half of
    /// `/readyz`; the memory broker is always 1).
    pub(crate) const BROKER_UP: &str = "pushgate_broker_up";
    /// Counter, by `result` (allowed, unauthorized, forbidden, error,
    /// timeout, saturated): clients without a token put to the connect
    /// proxy (`[auth] connect_proxy_url`), by what became of them.
    pub(crate) const AUTH_PROXY_REQUESTS_TOTAL: &str = "pushgate_auth_proxy_requests_total";
    /// Histogram: how long the connect proxy took to answer (or to fail,
    /// or to time out), in seconds. Saturated requests are not sent and
    /// not counted here.
    pub(crate) const AUTH_PROXY_DURATION_SECONDS: &str = "pushgate_auth_proxy_duration_seconds";
    /// Gauge: requests to the connect proxy in flight now (at most
    /// `[auth] connect_proxy_concurrency`).
    pub(crate) const AUTH_PROXY_IN_FLIGHT: &str = "pushgate_auth_proxy_in_flight";
    /// Gauge: clients waiting for a free connect proxy slot now (each at
    /// most `[auth] connect_proxy_queue_ms`).
    pub(crate) const AUTH_PROXY_WAITING: &str = "pushgate_auth_proxy_waiting";
    /// Counter, by `result` (ok, error): fetches of the JWK set of
    /// `[auth] jwks_url` (at start, in the background, for an unknown
    /// kid). An error leaves the last good set in use.
    pub(crate) const AUTH_JWKS_FETCHES_TOTAL: &str = "pushgate_auth_jwks_fetches_total";
    /// Gauge: the process's resident memory (`VmRSS`), Linux only; the
    /// name Prometheus client libraries use for it.
    pub(crate) const RESIDENT_MEMORY_BYTES: &str = "process_resident_memory_bytes";
}

/// Transport label values.
pub(crate) const TRANSPORTS: [&str; 3] = ["ws", "poll", "sse"];

/// Why the gateway ended a connection or session (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// No frame from the client within `idle_timeout_secs`.
    Idle,
    /// A long-poll session not polled again within `session_ttl_secs`.
    SessionTtl,
    /// The outbound queue passed `[limits] outbound_queue`.
    Slow,
    /// The user passed `max_connections_per_user`; the oldest went.
    Replaced,
    /// The client's token expired while connected.
    TokenExpired,
}

impl Eviction {
    /// Every reason, in label order.
    pub const ALL: [Eviction; 5] = [
        Self::Idle,
        Self::SessionTtl,
        Self::Slow,
        Self::Replaced,
        Self::TokenExpired,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::SessionTtl => "session_ttl",
            Self::Slow => "slow",
            Self::Replaced => "replaced",
            Self::TokenExpired => "token_expired",
        }
    }
}

/// Why a TCP connection was refused before serving (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnRefusal {
    /// Its address already had `[limits] max_connections_per_ip` open.
    IpLimit,
    /// Its address opened more than `[limits] connection_rate_per_ip` a second.
    IpRate,
    /// The node took more than `[limits] connection_rate` a second.
    NodeRate,
    /// The TLS handshake failed or timed out, or the client spoke plain HTTP
    /// to the TLS listener.
    Tls,
}

impl ConnRefusal {
    /// Every reason, in label order.
    pub const ALL: [ConnRefusal; 4] = [Self::IpLimit, Self::IpRate, Self::NodeRate, Self::Tls];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IpLimit => "ip_limit",
            Self::IpRate => "ip_rate",
            Self::NodeRate => "node_rate",
            Self::Tls => "tls",
        }
    }
}

/// Lateness histogram buckets, seconds: around one 100 ms tick.
const LATENESS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.5, 1.0, 5.0,
];

/// Fan-out buckets, seconds: a thread's wake-up (tens of microseconds)
/// up to a broadcast to the most connections a process holds behind
/// another (some 0.2 s each).
const FANOUT_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5,
];

/// Pushes per publish script: one (nothing queued) up to the most a
/// script takes (`bus::cluster::commit`).
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

/// Connect proxy latency buckets, seconds: a site answering from a
/// session cache in a millisecond up to the largest timeout allowed.
const AUTH_PROXY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The process-wide Prometheus recorder, installed on first use. One per
/// process because the `metrics` facade has one global recorder; several
/// gateways in one test process share it.
pub(crate) fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(names::TIMER_LATENESS_SECONDS.into()),
                LATENESS_BUCKETS,
            )
            .expect("lateness buckets are non-empty")
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(
                    names::AUTH_PROXY_DURATION_SECONDS.into(),
                ),
                AUTH_PROXY_BUCKETS,
            )
            .expect("proxy buckets are non-empty")
            // Both fan-out histograms (`names::FANOUT_*_SECONDS`).
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Prefix(names::FANOUT_PREFIX.into()),
                FANOUT_BUCKETS,
            )
            .expect("fan-out buckets are non-empty")
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(names::BUS_PUBLISH_BATCH_PUSHES.into()),
                BATCH_BUCKETS,
            )
            .expect("batch buckets are non-empty");
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Another recorder may be installed already (an embedding
        // application's); then ours only renders what it was given.
        let _ = metrics::set_global_recorder(recorder);
        describe();
        handle
    })
}

/// How often [`upkeep`] folds the histograms' samples into their buckets.
pub(crate) const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Folds the histograms' recorded samples into their buckets every
/// `every` until `stop` completes. The recorder keeps each sample until
/// this runs or `/metrics` is scraped, so without it a gateway nobody
/// scrapes would hold every timer expiry's and every message's sample
/// for good.
pub(crate) async fn upkeep(every: Duration, stop: impl Future<Output = ()>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = tick.tick() => recorder().run_upkeep(),
        }
    }
}

fn describe() {
    use names::*;
    describe_gauge!(CONNECTIONS, "Open client connections by transport.");
    describe_gauge!(SESSIONS, "User objects alive in the registry.");
    describe_gauge!(TIMER_ENTRIES, "Live entries in the timing wheel.");
    describe_gauge!(
        CHANNELS,
        "Channels with at least one connection in this process."
    );
    describe_gauge!(SUBSCRIPTIONS, "Connection-channel pairs in this process.");
    describe_counter!(
        MESSAGES_PUBLISHED_TOTAL,
        "Messages accepted by POST /push, by stream."
    );
    describe_counter!(
        MESSAGES_DELIVERED_TOTAL,
        "Messages handed to connections, by transport."
    );
    describe_counter!(
        EVICTIONS_TOTAL,
        "Connections or sessions ended by the gateway, by reason."
    );
    describe_histogram!(
        FANOUT_WAIT_SECONDS,
        Unit::Seconds,
        "From a message handed to the fan-out threads until one starts delivering it."
    );
    describe_histogram!(
        FANOUT_DURATION_SECONDS,
        Unit::Seconds,
        "From a message handed to the fan-out threads until every one has delivered it."
    );
    describe_histogram!(
        TIMER_LATENESS_SECONDS,
        Unit::Seconds,
        "How late each timer expiry fired after its deadline."
    );
    describe_counter!(
        REQUESTS_REFUSED_TOTAL,
        "API requests refused, by error code."
    );
    describe_counter!(BUS_ERRORS_TOTAL, "Redis commands that failed.");
    describe_counter!(
        BUS_RECONNECTS_TOTAL,
        "Times the Redis subscription was lost and renewed."
    );
    describe_counter!(
        BUS_MESSAGES_RECEIVED_TOTAL,
        "Messages this node took from the broker."
    );
    describe_histogram!(
        BUS_PUBLISH_BATCH_PUSHES,
        "Pushes per publish script on a Redis Cluster."
    );
    describe_gauge!(
        BUS_SUBSCRIPTIONS,
        "Streams this node is subscribed to on a Redis Cluster."
    );
    describe_counter!(
        CONNECTIONS_REFUSED_TOTAL,
        "TCP connections refused before serving, by reason."
    );
    describe_counter!(
        RESUMES_REFUSED_TOTAL,
        "Resumes refused because the history read after the cursor failed, by transport."
    );
    describe_gauge!(
        MAX_CONNECTIONS,
        "Most connections the process holds ([session] max_connections)."
    );
    describe_gauge!(
        TIMER_TICK_SECONDS,
        Unit::Seconds,
        "The timing wheel's tick ([timer] tick_ms)."
    );
    describe_gauge!(BROKER_UP, "1 while the broker is reachable, else 0.");
    describe_counter!(
        AUTH_PROXY_REQUESTS_TOTAL,
        "Clients without a token put to the connect proxy, by result."
    );
    describe_histogram!(
        AUTH_PROXY_DURATION_SECONDS,
        Unit::Seconds,
        "How long the connect proxy took to answer."
    );
    describe_gauge!(
        AUTH_PROXY_IN_FLIGHT,
        "Requests to the connect proxy in flight."
    );
    describe_gauge!(
        AUTH_PROXY_WAITING,
        "Clients waiting for a free connect proxy slot."
    );
    describe_counter!(
        AUTH_JWKS_FETCHES_TOTAL,
        "Fetches of the JWK set of [auth] jwks_url, by result."
    );
    describe_gauge!(
        RESIDENT_MEMORY_BYTES,
        Unit::Bytes,
        "Resident memory size in bytes."
    );
}

/// The process's resident memory in bytes, from `/proc/self/status`
/// (`VmRSS`); `None` where there is no such file.
pub(crate) fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_rss(&status)
}

/// `VmRSS:    1234 kB` as bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

/// Counter handles resolved once, for the hot paths.
#[derive(Debug, Clone)]
pub struct Counters {
    /// Delivered messages, indexed like [`TRANSPORTS`].
    pub delivered: [Counter; 3],
    /// Published broadcast messages.
    pub published_broadcast: Counter,
    /// Published personal messages.
    pub published_user: Counter,
    /// Published channel messages (one per channel named).
    pub published_channel: Counter,
    evictions: [Counter; 5],
    refusals: [Counter; 4],
    resumes_refused: [Counter; 3],
}

impl Counters {
    /// Resolves every handle, so each series exists before any traffic.
    pub fn register() -> Self {
        recorder();
        let delivered = TRANSPORTS
            .map(|t| metrics::counter!(names::MESSAGES_DELIVERED_TOTAL, "transport" => t));
        let evictions = Eviction::ALL
            .map(|r| metrics::counter!(names::EVICTIONS_TOTAL, "reason" => r.as_str()));
        let refusals = ConnRefusal::ALL
            .map(|r| metrics::counter!(names::CONNECTIONS_REFUSED_TOTAL, "reason" => r.as_str()));
        let resumes_refused =
            TRANSPORTS.map(|t| metrics::counter!(names::RESUMES_REFUSED_TOTAL, "transport" => t));
        // Published at 0 before the first failure, so that `increase()` in
        // an alert counts the first one too.
        metrics::counter!(names::BUS_ERRORS_TOTAL).increment(0);
        metrics::counter!(names::BUS_RECONNECTS_TOTAL).increment(0);
        metrics::counter!(names::BUS_MESSAGES_RECEIVED_TOTAL).increment(0);
        Self {
            delivered,
            published_broadcast: metrics::counter!(names::MESSAGES_PUBLISHED_TOTAL, "stream" => "broadcast"),
            published_user: metrics::counter!(names::MESSAGES_PUBLISHED_TOTAL, "stream" => "user"),
            published_channel: metrics::counter!(names::MESSAGES_PUBLISHED_TOTAL, "stream" => "channel"),
            evictions,
            refusals,
            resumes_refused,
        }
    }

    /// Counts one resume refused because its history read failed.
    pub fn resume_refused(&self, transport: Transport) {
        self.resumes_refused[transport.index()].increment(1);
    }

    /// Counts one refused TCP connection.
    pub fn refused(&self, reason: ConnRefusal) {
        self.refusals[reason as usize].increment(1);
    }

    /// Counts `n` evictions for `reason`.
    pub fn evicted(&self, reason: Eviction, n: u64) {
        self.evictions[reason as usize].increment(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tpushgate\nVmPeak:\t  99 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(12345 * 1024));
        assert_eq!(parse_vm_rss("VmRSS: lots\n"), None);
        assert_eq!(parse_vm_rss("Name: x\n"), None);
        if cfg!(target_os = "linux") {
            assert!(resident_memory_bytes().is_some_and(|b| b > 0));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn upkeep_keeps_the_samples_and_ends_with_its_stop() {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(upkeep(UPKEEP_EVERY, async {
            let _ = stop_rx.await;
        }));
        let name = "pushgate_test_upkeep_seconds";
        recorder();
        for _ in 0..3 {
            metrics::histogram!(name).record(0.25);
            // Paused: the clock jumps to the next tick once all is idle.
            tokio::time::sleep(UPKEEP_EVERY).await;
        }
        assert!(!task.is_finished(), "runs until stopped");
        // Folded into the buckets, not lost.
        let text = recorder().render();
        assert!(text.contains(&format!("{name}_count 3")), "{text}");
        stop_tx.send(()).expect("task alive");
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("ended with its stop")
            .expect("no panic");
    }
}
