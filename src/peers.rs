//! Limits on new TCP connections to the main listener: per client address,
//! how many may be open at once (`[limits] max_connections_per_ip`) and how
//! fast new ones may come (`[limits] connection_rate_per_ip`), both off by
//! default; and for the whole node, how fast new ones may come from all
//! addresses together (`[limits] connection_rate` and `connection_burst`),
//! which protects the process whatever the addresses.
//!
//! A connection refused by the node's rate is told to come back after a
//! number of seconds drawn at random from `1..=connection_retry_spread_secs`
//! (`Retry-After`): clients refused in the same second then come back
//! spread over that many seconds instead of together.
//!
//! A connection counts from accept until its socket closes. The count
//! travels with the socket in a [`PeerStream`]: a WebSocket that hyper
//! hands to its own task after the upgrade still holds it, and so do an SSE
//! stream or a parked poll through their HTTP connection. Nothing else has
//! to remember to release it.
//!
//! Addresses are grouped the way providers hand them out: an IPv4 address
//! is one client; an IPv6 address counts by its /64 (one host usually has a
//! whole /64 to pick source addresses from); an IPv4-mapped IPv6 address (a
//! dual-stack listener) is its IPv4 address.

use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::LimitsConfig;
use crate::http::error::ApiError;
use crate::linger::Linger;
use crate::metrics::ConnRefusal;

/// Seconds a client refused for holding too many connections is asked to
/// wait (its own connections have to close first).
pub const IP_LIMIT_RETRY_AFTER_SECS: u64 = 5;
/// How often the rate limiter forgets addresses that have been quiet long
/// enough to be back at a full burst.
pub const RATE_SWEEP_INTERVAL: Duration = Duration::from_secs(10);

/// The address a limit counts `ip` under: IPv4 as is, IPv6 by its /64.
pub fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PeerRefusal {
    /// The address already holds `max_connections_per_ip` connections.
    #[error("too many connections from this address")]
    TooMany,
    /// The address opened more than `connection_rate_per_ip` a second.
    #[error("connecting too fast from this address")]
    TooFast {
        /// When its next connection would be admitted, rounded up.
        retry_after_secs: u64,
    },
    /// The node took more than `connection_rate` a second (past its burst).
    #[error("too many new connections to this node")]
    Overloaded {
        /// Drawn at random from `1..=connection_retry_spread_secs`.
        retry_after_secs: u64,
    },
}

impl PeerRefusal {
    /// The metric label of this refusal.
    pub fn reason(self) -> ConnRefusal {
        match self {
            Self::TooMany => ConnRefusal::IpLimit,
            Self::TooFast { .. } => ConnRefusal::IpRate,
            Self::Overloaded { .. } => ConnRefusal::NodeRate,
        }
    }

    /// The answer a refused plain-HTTP client gets: `503 ip_limit` for an
    /// address's limits, `503 overloaded` for the node's rate.
    pub fn into_api_error(self) -> ApiError {
        match self {
            Self::TooMany => ApiError::IpLimit {
                retry_after_secs: IP_LIMIT_RETRY_AFTER_SECS,
                reason: "too many connections from this address",
            },
            Self::TooFast { retry_after_secs } => ApiError::IpLimit {
                retry_after_secs,
                reason: "connecting too fast from this address",
            },
            Self::Overloaded { retry_after_secs } => ApiError::Overloaded { retry_after_secs },
        }
    }
}

/// Open connections and connection rate, per client address, and the
/// node's connection rate.
#[derive(Debug)]
pub struct PeerLimits {
    /// `max_connections_per_ip`; 0 counts nothing.
    max_open: usize,
    /// Open connections per address; an address leaves at 0.
    open: DashMap<IpAddr, usize>,
    /// `connection_rate_per_ip`; `None` when unlimited.
    rate: Option<DefaultKeyedRateLimiter<IpAddr>>,
    next_sweep: Mutex<Instant>,
    /// `connection_rate` with `connection_burst`; `None` when unlimited.
    node_rate: Option<DefaultDirectRateLimiter>,
    /// `connection_retry_spread_secs`, at least 1.
    retry_spread_secs: u64,
}

/// Seconds a client refused for the gateway's sake (not its own) is
/// asked to wait: drawn uniformly from `1..=spread` (`[limits]
/// connection_retry_spread_secs`, at least 1), so refused clients do not
/// come back together.
pub(crate) fn spread_retry_secs(spread: u64) -> u64 {
    rand::random_range(1..=spread.max(1))
}

impl PeerLimits {
    /// Limits from `[limits]`.
    pub fn new(limits: &LimitsConfig) -> Arc<Self> {
        let rate = NonZeroU32::new(limits.connection_rate_per_ip)
            .map(|rate| RateLimiter::keyed(Quota::per_second(rate)));
        let node_rate = NonZeroU32::new(limits.connection_rate).map(|rate| {
            let burst = NonZeroU32::new(limits.connection_burst).unwrap_or(rate);
            RateLimiter::direct(Quota::per_second(rate).allow_burst(burst))
        });
        Arc::new(Self {
            max_open: limits.max_connections_per_ip,
            open: DashMap::new(),
            rate,
            next_sweep: Mutex::new(Instant::now() + RATE_SWEEP_INTERVAL),
            node_rate,
            retry_spread_secs: limits.connection_retry_spread_secs.max(1),
        })
    }

    /// Admits a new connection from `ip`, or says why not. The address's
    /// count is checked first, then its rate, then the node's rate, so a
    /// connection refused for its own address spends none of the node's.
    ///
    /// Only the accept loop admits; releases come from any task and only
    /// lower a count, so checking and then adding cannot overshoot.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<PeerPermit, PeerRefusal> {
        let key = peer_key(ip);
        if self.max_open > 0 && self.open_from(key) >= self.max_open {
            return Err(PeerRefusal::TooMany);
        }
        if let Some(rate) = &self.rate {
            self.sweep(rate);
            rate.check_key(&key).map_err(|not_until| {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                PeerRefusal::TooFast {
                    retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
                }
            })?;
        }
        if let Some(node_rate) = &self.node_rate
            && node_rate.check().is_err()
        {
            return Err(PeerRefusal::Overloaded {
                retry_after_secs: spread_retry_secs(self.retry_spread_secs),
            });
        }
        if self.max_open == 0 {
            return Ok(PeerPermit { slot: None });
        }
        *self.open.entry(key).or_insert(0) += 1;
        Ok(PeerPermit {
            slot: Some((Arc::clone(self), key)),
        })
    }

    /// Open connections counted for `ip`'s address group (0 when the count
    /// is unlimited, since nothing is counted then).
    pub fn open_from(&self, ip: IpAddr) -> usize {
        self.open.get(&peer_key(ip)).map_or(0, |n| *n)
    }

    /// Addresses with at least one counted connection.
    pub fn addresses(&self) -> usize {
        self.open.len()
    }

    fn release(&self, key: IpAddr) {
        if let Entry::Occupied(mut entry) = self.open.entry(key) {
            *entry.get_mut() -= 1;
            if *entry.get() == 0 {
                entry.remove();
            }
        }
    }

    /// Forgets addresses the rate limiter no longer needs, at most once per
    /// [`RATE_SWEEP_INTERVAL`], so a scan of many addresses cannot grow
    /// memory without bound.
    fn sweep(&self, rate: &DefaultKeyedRateLimiter<IpAddr>) {
        let now = Instant::now();
        let mut next = self.next_sweep.lock();
        if now < *next {
            return;
        }
        *next = now + RATE_SWEEP_INTERVAL;
        drop(next);
        rate.retain_recent();
        rate.shrink_to_fit();
    }
}

/// One counted connection; dropping it releases the count.
#[derive(Debug)]
pub struct PeerPermit {
    slot: Option<(Arc<PeerLimits>, IpAddr)>,
}

impl Drop for PeerPermit {
    fn drop(&mut self) {
        if let Some((limits, key)) = self.slot.take() {
            limits.release(key);
        }
    }
}

/// A client's socket together with its permit: the count is released
/// exactly when the socket is dropped, wherever it went (hyper's upgraded
/// WebSocket, a TLS stream wrapping it).
///
/// It may also carry bytes already read from the socket (by the front door
/// that reads request heads itself): reads return those first.
///
/// Shutting it down (which is how hyper closes a connection, after its
/// last answer) is a lingering close (see `crate::linger`): the client's
/// unread bytes are drained so the answer is not lost to a reset.
#[derive(Debug)]
pub struct PeerStream<S> {
    inner: S,
    permit: PeerPermit,
    unread: Bytes,
    /// Set once shutting down has begun.
    linger: Option<Linger>,
}

impl<S> PeerStream<S> {
    /// Ties `permit` to `inner`.
    pub fn new(inner: S, permit: PeerPermit) -> Self {
        Self {
            inner,
            permit,
            unread: Bytes::new(),
            linger: None,
        }
    }

    /// Gives back bytes read from the socket but not consumed: the next
    /// reads return them before anything from the socket.
    pub fn with_unread(mut self, unread: Bytes) -> Self {
        self.unread = unread;
        self
    }

    /// The socket, its permit and what was read from it but not consumed,
    /// apart: for a holder that keeps the permit for as long as the socket
    /// lives (a WebSocket sharing its socket with the fan-out, a poll or SSE
    /// stream served on the raw socket).
    pub fn into_parts(self) -> (S, PeerPermit, Bytes) {
        (self.inner, self.permit, self.unread)
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PeerStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            let n = self.unread.len().min(buf.remaining());
            buf.put_slice(&self.unread[..n]);
            if n == self.unread.len() {
                // Not an empty view of the buffer: that would keep it alive.
                self.unread = Bytes::new();
            } else {
                self.unread.advance(n);
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PeerStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    /// A lingering close: the write half is shut, then what the client
    /// still sends is discarded until it closes (bounded in bytes and time).
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // Bytes the front door read ahead are as unread as the rest.
        this.unread = Bytes::new();
        this.linger
            .get_or_insert_with(Linger::new)
            .poll_close(cx, &mut this.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_open: usize, rate: u32) -> Arc<PeerLimits> {
        PeerLimits::new(&LimitsConfig {
            max_connections_per_ip: max_open,
            connection_rate_per_ip: rate,
            connection_rate: 0,
            ..LimitsConfig::default()
        })
    }

    fn node(rate: u32, burst: u32, spread: u64) -> Arc<PeerLimits> {
        PeerLimits::new(&LimitsConfig {
            max_connections_per_ip: 0,
            connection_rate_per_ip: 0,
            connection_rate: rate,
            connection_burst: burst,
            connection_retry_spread_secs: spread,
            ..LimitsConfig::default()
        })
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an ip address")
    }

    #[test]
    fn addresses_group_as_ipv4_or_ipv6_slash_64() {
        let cases = [
            ("192.0.2.7", "192.0.2.7"),
            ("::ffff:192.0.2.7", "192.0.2.7"),
            ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"),
            ("2001:db8:1:2:ffff::1", "2001:db8:1:2::"),
            ("::1", "::"),
        ];
        for (given, key) in cases {
            assert_eq!(peer_key(ip(given)), ip(key), "{given}");
        }
        assert_ne!(
            peer_key(ip("2001:db8:1:2::1")),
            peer_key(ip("2001:db8:1:3::1"))
        );
    }

    #[test]
    fn open_connections_are_counted_until_their_permit_drops() {
        let peers = limits(2, 0);
        let a = ip("192.0.2.1");
        let first = peers.admit(a).expect("first");
        let second = peers.admit(a).expect("second");
        assert_eq!(peers.admit(a).expect_err("third"), PeerRefusal::TooMany);
        assert!(peers.admit(ip("192.0.2.2")).is_ok(), "another address");
        assert_eq!(peers.open_from(a), 2);
        drop(first);
        let third = peers.admit(a).expect("room again");
        drop((second, third));
        assert_eq!(peers.open_from(a), 0);
        assert_eq!(peers.addresses(), 0, "an address leaves at zero");
    }

    #[test]
    fn one_ipv6_slash_64_shares_one_count() {
        let peers = limits(1, 0);
        let _held = peers.admit(ip("2001:db8::1")).expect("first");
        assert_eq!(
            peers.admit(ip("2001:db8::2")).expect_err("same /64"),
            PeerRefusal::TooMany
        );
        assert!(peers.admit(ip("2001:db8:0:1::1")).is_ok(), "next /64");
    }

    #[test]
    fn the_rate_allows_a_burst_then_refuses_with_a_wait() {
        let peers = limits(0, 3);
        let a = ip("198.51.100.9");
        let permits: Vec<_> = (0..3).map(|_| peers.admit(a).expect("burst")).collect();
        let refusal = peers.admit(a).expect_err("over the rate");
        assert_eq!(
            refusal,
            PeerRefusal::TooFast {
                retry_after_secs: 1
            }
        );
        assert_eq!(refusal.reason(), ConnRefusal::IpRate);
        assert!(peers.admit(ip("198.51.100.10")).is_ok(), "another address");
        drop(permits);
        assert_eq!(peers.addresses(), 0, "nothing counted when unlimited");
    }

    #[test]
    fn a_connection_refused_for_the_count_spends_no_rate() {
        let peers = limits(1, 2);
        let a = ip("203.0.113.5");
        let held = peers.admit(a).expect("first");
        for _ in 0..5 {
            assert_eq!(peers.admit(a).expect_err("full"), PeerRefusal::TooMany);
        }
        drop(held);
        assert!(peers.admit(a).is_ok(), "one token of the burst left");
    }

    #[test]
    fn zero_means_unlimited() {
        let peers = limits(0, 0);
        let a = ip("192.0.2.1");
        let permits: Vec<_> = (0..10_000).map(|_| peers.admit(a).expect("ok")).collect();
        assert_eq!(permits.len(), 10_000);
    }

    #[test]
    fn the_defaults_never_refuse_a_crowd_behind_one_address() {
        let peers = PeerLimits::new(&LimitsConfig::default());
        let a = ip("198.51.100.1");
        let permits: Vec<_> = (0..5000)
            .map(|n| peers.admit(a).unwrap_or_else(|e| panic!("{n}: {e}")))
            .collect();
        assert_eq!(permits.len(), 5000);
        assert_eq!(peers.addresses(), 0, "nothing counted per address");
    }

    #[test]
    fn the_node_rate_takes_its_burst_from_any_addresses_then_refuses_with_spread_waits() {
        let peers = node(1, 5, 10);
        let _held: Vec<_> = (0..5u8)
            .map(|n| peers.admit(IpAddr::from([192, 0, 2, n])).expect("burst"))
            .collect();
        let waits: Vec<u64> = (0..200u8)
            .map(|n| match peers.admit(IpAddr::from([203, 0, 113, n])) {
                Err(PeerRefusal::Overloaded { retry_after_secs }) => retry_after_secs,
                other => panic!("{n}: {other:?}"),
            })
            .collect();
        assert!(waits.iter().all(|w| (1..=10).contains(w)), "{waits:?}");
        for secs in 1..=10 {
            assert!(waits.contains(&secs), "{secs} s never drawn in {waits:?}");
        }
        let refusal = PeerRefusal::Overloaded {
            retry_after_secs: 3,
        };
        assert_eq!(refusal.reason(), ConnRefusal::NodeRate);
        let answer = refusal.into_api_error();
        assert_eq!(
            (answer.status().as_u16(), answer.code()),
            (503, "overloaded")
        );
        assert_eq!(answer.retry_after_secs(), Some(3));
    }

    #[test]
    fn a_connection_refused_for_its_address_spends_none_of_the_node_rate() {
        let peers = PeerLimits::new(&LimitsConfig {
            max_connections_per_ip: 1,
            connection_rate_per_ip: 0,
            connection_rate: 1,
            connection_burst: 2,
            ..LimitsConfig::default()
        });
        let a = ip("192.0.2.1");
        let _held = peers.admit(a).expect("first");
        for _ in 0..10 {
            assert_eq!(peers.admit(a).expect_err("full"), PeerRefusal::TooMany);
        }
        assert!(peers.admit(ip("192.0.2.2")).is_ok(), "the burst's second");
    }

    #[test]
    fn refusals_answer_503_ip_limit_with_retry_after() {
        let too_many = PeerRefusal::TooMany.into_api_error();
        assert_eq!(
            (too_many.status().as_u16(), too_many.code()),
            (503, "ip_limit")
        );
        assert_eq!(too_many.retry_after_secs(), Some(IP_LIMIT_RETRY_AFTER_SECS));
        let too_fast = PeerRefusal::TooFast {
            retry_after_secs: 2,
        }
        .into_api_error();
        assert_eq!(too_fast.code(), "ip_limit");
        assert_eq!(too_fast.retry_after_secs(), Some(2));
        assert!(too_fast.message().contains("too fast"), "{too_fast}");
    }
}
