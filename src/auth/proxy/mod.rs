//! The connect proxy of `[auth] connect_proxy_url`: the site decides who a
//! client without a token is, from what its browser sent (a session
//! cookie, usually).
//!
//! A client that connects with no token (and no anonymous `uid`) is put to
//! the site: the gateway `POST`s a JSON description of its request,
//!
//! ```json
//! {"transport":"ws","path":"/ws","query":"channels=vip",
//!  "headers":{"cookie":"sid=…","origin":"https://app.example"},
//!  "remote_addr":"203.0.113.7:51234"}
//! ```
//!
//! (`headers` holds only `cookie`, `authorization`, `origin` and
//! `user-agent`, lower-case, and only those the request had), and the site
//! answers `200 {"user":"alice","channels":["vip"],"expires_at":N}`
//! (`channels` and `expires_at` optional, checked as a token's `sub`,
//! `channels` and `exp`), `401` or `403`.
//!
//! Invariants:
//!
//! - At most `connect_proxy_concurrency` requests are in flight. One more
//!   waits for a free slot up to `connect_proxy_queue_ms` (a reconnect
//!   storm is served as fast as the site answers, at most that many at a
//!   time), and past it is refused and told to come back after a number
//!   of seconds drawn from `1..=[limits] connection_retry_spread_secs`, so
//!   what the site cannot absorb comes back spread out.
//! - Every request ends within `connect_proxy_timeout_ms` (connect, answer
//!   and body); the permit is released when it ends, however it ends.
//! - Anything but `200` with a usable body, `401` or `403` is the site's
//!   failure, never the client's: `503`, not `401`.
//! - Nothing the site answers reaches the client; it is logged.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{StatusCode, Uri};
use metrics::{Counter, Gauge, Histogram};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use super::client::{HttpsClient, https_client};
use crate::config::{AuthConfig, masked_url};
use crate::metrics::names;

mod wire;

pub(crate) use wire::FORWARDED_HEADERS;
pub use wire::{ClientRequest, Identity, parse_answer};

/// Largest answer body read from the site, in bytes.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Fewest seconds between two warnings about the site failing.
const WARN_EVERY_SECS: u64 = 10;

/// Why the connect proxy cannot be built from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// `connect_proxy_url` is not a URL the client can reach.
    #[error("auth.connect_proxy_url: not an http:// or https:// url: {0}")]
    Url(String),
    /// The system's root certificates could not be loaded (HTTPS).
    #[error("auth.connect_proxy_url: cannot load the system's root certificates: {0}")]
    Roots(std::io::Error),
}

/// Why the connect proxy did not admit a client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The site answered `401`: the client is not signed in.
    #[error("the connect proxy answered 401")]
    Unauthorized,
    /// The site answered `403`: the client may not connect.
    #[error("the connect proxy answered 403")]
    Forbidden,
    /// The site failed: unreachable, another status, a body that is not
    /// a usable answer. The detail is for the log.
    #[error("the connect proxy failed: {0}")]
    Failed(String),
    /// No answer within `connect_proxy_timeout_ms`.
    #[error("the connect proxy did not answer within {0} ms")]
    Timeout(u128),
    /// `connect_proxy_concurrency` requests stayed in flight for the whole
    /// `connect_proxy_queue_ms`.
    #[error("{0} requests to the connect proxy stayed in flight for the whole wait")]
    Saturated(usize),
}

/// What became of a client put to the proxy: the `result` label of
/// `pushgate_auth_proxy_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `200` with a usable answer.
    Allowed,
    /// `401`.
    Unauthorized,
    /// `403`.
    Forbidden,
    /// The site failed.
    Error,
    /// No answer in time.
    Timeout,
    /// Not sent: too many in flight.
    Saturated,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 6] = [
        Self::Allowed,
        Self::Unauthorized,
        Self::Forbidden,
        Self::Error,
        Self::Timeout,
        Self::Saturated,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::Saturated => "saturated",
        }
    }

    /// The outcome of an answer.
    pub fn of(result: &Result<Identity, Refusal>) -> Self {
        match result {
            Ok(_) => Self::Allowed,
            Err(Refusal::Unauthorized) => Self::Unauthorized,
            Err(Refusal::Forbidden) => Self::Forbidden,
            Err(Refusal::Failed(_)) => Self::Error,
            Err(Refusal::Timeout(_)) => Self::Timeout,
            Err(Refusal::Saturated(_)) => Self::Saturated,
        }
    }
}

/// The metric handles of the proxy, resolved once.
struct ProxyMetrics {
    requests: [Counter; 6],
    duration: Histogram,
    in_flight: Gauge,
    waiting: Gauge,
}

/// One request counted in a gauge (`pushgate_auth_proxy_in_flight`,
/// `pushgate_auth_proxy_waiting`) while it lives.
struct InFlight<'a>(&'a Gauge);

impl<'a> InFlight<'a> {
    fn new(gauge: &'a Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// The connect proxy client. See the module docs.
pub struct ConnectProxy {
    url: Uri,
    /// `Authorization: Basic …` from the URL's userinfo, if it had one.
    basic: Option<HeaderValue>,
    client: HttpsClient<Full<Bytes>>,
    timeout: Duration,
    permits: Semaphore,
    concurrency: usize,
    /// Longest wait for a permit.
    queue: Duration,
    retry_spread_secs: u64,
    metrics: ProxyMetrics,
    /// When the last warning was logged (seconds since start + 1; 0: never).
    last_warn: AtomicU64,
    started: Instant,
}

impl fmt::Debug for ConnectProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectProxy")
            .field("url", &masked_url(&self.url.to_string()))
            .field("timeout", &self.timeout)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl ConnectProxy {
    /// The proxy `[auth]` describes (its `connect_proxy_url` is `url`);
    /// refused clients retry within `1..=retry_spread_secs`. Registers
    /// its metrics, so they exist before the first client.
    pub fn new(url: &str, auth: &AuthConfig, retry_spread_secs: u64) -> Result<Self, ProxyError> {
        let (url, basic) = split_userinfo(url)?;
        // The recorder first: a handle taken before it is installed
        // counts nowhere.
        crate::metrics::recorder();
        let requests = Outcome::ALL.map(|outcome| {
            metrics::counter!(names::AUTH_PROXY_REQUESTS_TOTAL, "result" => outcome.as_str())
        });
        let metrics = ProxyMetrics {
            requests,
            duration: metrics::histogram!(names::AUTH_PROXY_DURATION_SECONDS),
            in_flight: metrics::gauge!(names::AUTH_PROXY_IN_FLIGHT),
            waiting: metrics::gauge!(names::AUTH_PROXY_WAITING),
        };
        // Published before the first client (`increase()` in an alert
        // counts the first one too). The gauge is only moved by deltas:
        // several gateways in one process share it.
        for counter in &metrics.requests {
            counter.increment(0);
        }
        metrics.in_flight.increment(0.0);
        metrics.waiting.increment(0.0);
        let concurrency = auth.connect_proxy_concurrency.max(1);
        Ok(Self {
            url,
            basic,
            client: https_client().map_err(ProxyError::Roots)?,
            timeout: auth.connect_proxy_timeout(),
            queue: auth.connect_proxy_queue(),
            permits: Semaphore::new(concurrency),
            concurrency,
            retry_spread_secs: retry_spread_secs.max(1),
            metrics,
            last_warn: AtomicU64::new(0),
            started: Instant::now(),
        })
    }

    /// Seconds a client refused for the site's sake should wait: drawn
    /// from `1..=connection_retry_spread_secs`.
    pub fn retry_after_secs(&self) -> u64 {
        crate::peers::spread_retry_secs(self.retry_spread_secs)
    }

    /// Asks the site who the client of `req` is (`now_secs`: the time,
    /// seconds since the epoch, an answer's `expires_at` must be after).
    pub async fn identify(
        &self,
        req: &ClientRequest<'_>,
        now_secs: u64,
    ) -> Result<Identity, Refusal> {
        let permit = match self.queue {
            wait if wait.is_zero() => self.permits.try_acquire().ok(),
            wait => {
                let _waiting = InFlight::new(&self.metrics.waiting);
                tokio::time::timeout(wait, self.permits.acquire())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
        };
        let result = match permit {
            Some(_permit) => {
                // Dropped however this ends, the caller's future dropped
                // midway (a client that left) included.
                let _in_flight = InFlight::new(&self.metrics.in_flight);
                let started = Instant::now();
                let result = tokio::time::timeout(self.timeout, self.ask(req, now_secs))
                    .await
                    .unwrap_or(Err(Refusal::Timeout(self.timeout.as_millis())));
                self.metrics
                    .duration
                    .record(started.elapsed().as_secs_f64());
                result
            }
            None => Err(Refusal::Saturated(self.concurrency)),
        };
        let outcome = Outcome::of(&result);
        self.metrics.requests[outcome as usize].increment(1);
        if let Err(refusal) = &result {
            self.log(req, refusal, outcome);
        }
        result
    }

    async fn ask(&self, req: &ClientRequest<'_>, now_secs: u64) -> Result<Identity, Refusal> {
        let body = serde_json::to_vec(&req.to_json()).unwrap_or_default();
        let mut request = hyper::Request::post(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json");
        if let Some(basic) = &self.basic {
            request = request.header(header::AUTHORIZATION, basic.clone());
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|err| Refusal::Failed(format!("request: {err}")))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|err| Refusal::Failed(format!("request failed: {err}")))?;
        let status = response.status();
        // Read whole (bounded) so the connection goes back to the pool.
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map(|body| body.to_bytes())
            .map_err(|err| {
                Refusal::Failed(format!(
                    "body unreadable or larger than {MAX_ANSWER_BYTES} bytes: {err}"
                ))
            });
        match status {
            StatusCode::OK => parse_answer(&body?, now_secs).map_err(Refusal::Failed),
            StatusCode::UNAUTHORIZED => Err(Refusal::Unauthorized),
            StatusCode::FORBIDDEN => Err(Refusal::Forbidden),
            other => Err(Refusal::Failed(format!("answered {other}"))),
        }
    }

    /// Logs a refusal: at `debug` each, and the site's failures at `warn`
    /// at most every [`WARN_EVERY_SECS`] (a site that is down would
    /// otherwise log once per client).
    fn log(&self, req: &ClientRequest<'_>, refusal: &Refusal, outcome: Outcome) {
        let transport = req.transport.as_str();
        let result = outcome.as_str();
        if matches!(outcome, Outcome::Unauthorized | Outcome::Forbidden) {
            debug!(transport, result, "connect proxy refused a client");
            return;
        }
        let now = self.started.elapsed().as_secs() + 1;
        let last = self.last_warn.load(Ordering::Relaxed);
        let due = last == 0 || now >= last + WARN_EVERY_SECS;
        if due
            && self
                .last_warn
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            warn!(url = %masked_url(&self.url.to_string()), transport, result, error = %refusal, "connect proxy unavailable; clients without a token get 503 (logged at most every 10 s, see pushgate_auth_proxy_requests_total)");
        } else {
            debug!(transport, result, error = %refusal, "connect proxy unavailable");
        }
    }
}

/// `url` without its userinfo, and the userinfo as `Authorization: Basic`
/// (percent-decoded), if it had one.
fn split_userinfo(url: &str) -> Result<(Uri, Option<HeaderValue>), ProxyError> {
    let bad = || ProxyError::Url(masked_url(url));
    let uri: Uri = url.parse().map_err(|_| bad())?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(bad());
    }
    let Some((userinfo, host)) = uri
        .authority()
        .and_then(|a| a.as_str().rsplit_once('@'))
        .map(|(userinfo, host)| (userinfo.to_owned(), host.to_owned()))
    else {
        return Ok((uri, None));
    };
    let decoded: Vec<u8> = percent_encoding::percent_decode_str(&userinfo).collect();
    let encoded = base64::engine::general_purpose::STANDARD.encode(decoded);
    let mut basic = HeaderValue::try_from(format!("Basic {encoded}")).map_err(|_| bad())?;
    basic.set_sensitive(true);
    let mut parts = uri.into_parts();
    parts.authority = Some(host.parse().map_err(|_| bad())?);
    let uri = Uri::from_parts(parts).map_err(|_| bad())?;
    Ok((uri, Some(basic)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_becomes_basic_auth_and_leaves_the_url() {
        let (uri, basic) =
            split_userinfo("https://app:p%40ss@site.example:8443/auth?x=1").expect("valid");
        assert_eq!(uri.to_string(), "https://site.example:8443/auth?x=1");
        // base64("app:p@ss")
        assert_eq!(
            basic.expect("basic").to_str().ok(),
            Some("Basic YXBwOnBAc3M=")
        );
        let (uri, basic) = split_userinfo("http://127.0.0.1:9/a").expect("valid");
        assert_eq!(
            (uri.to_string().as_str(), basic),
            ("http://127.0.0.1:9/a", None)
        );
        for bad in ["ftp://x/a", "/auth", "http://", "not a url"] {
            assert!(
                matches!(split_userinfo(bad), Err(ProxyError::Url(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_outcome_has_its_label() {
        let labels: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(
            labels,
            [
                "allowed",
                "unauthorized",
                "forbidden",
                "error",
                "timeout",
                "saturated"
            ]
        );
        for (i, outcome) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*outcome as usize, i);
        }
    }
}
