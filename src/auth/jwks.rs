//! The JWK set of `[auth] jwks_url`: fetched at start, refreshed in the
//! background every `jwks_refresh_secs`, and at once when a token names a
//! `kid` the set does not hold.
//!
//! Invariants:
//!
//! - Verification never waits on the network, except a connect whose
//!   token names an unknown `kid`: it may wait for one refresh, bounded by
//!   [`FETCH_TIMEOUT`].
//! - Unknown kids cannot make us hammer the provider: at most one such
//!   refresh per [`UNKNOWN_KID_INTERVAL`], and callers that arrive while
//!   one is under way wait for it rather than start their own.
//! - The last good set is kept: a failed fetch (provider down, an error
//!   status, a document with no usable key) changes nothing, and is
//!   retried with a backoff from 1 s up to the refresh interval.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{StatusCode, Uri};
use metrics::Counter;
use parking_lot::RwLock;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::client::{HttpsClient, https_client};
use super::keys::{self, KeyError, PublicKey};
use crate::config::masked_url;
use crate::metrics::names;

/// Longest wait for one fetch of the set (connect, headers and body).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(3);
/// Fewest seconds between two refreshes caused by unknown kids.
pub const UNKNOWN_KID_INTERVAL: Duration = Duration::from_secs(10);
/// Largest JWK set document accepted, in bytes.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;
/// First wait before retrying a failed fetch; doubled up to the refresh
/// interval.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Why a fetch of the set failed. The set in use stays as it was.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// `jwks_url` is not a URL the client can fetch.
    #[error("auth.jwks_url: not an http:// or https:// url: {0}")]
    Url(String),
    /// The system's root certificates could not be loaded (HTTPS).
    #[error("auth.jwks_url: cannot load the system's root certificates: {0}")]
    Roots(std::io::Error),
    /// No answer within [`FETCH_TIMEOUT`].
    #[error("no answer within {} ms", FETCH_TIMEOUT.as_millis())]
    Timeout,
    /// The connection or the request failed.
    #[error("request failed: {0}")]
    Request(String),
    /// An answer other than `200`.
    #[error("answered {0}")]
    Status(StatusCode),
    /// The body failed or was larger than [`MAX_JWKS_BYTES`].
    #[error("body unreadable or larger than {MAX_JWKS_BYTES} bytes: {0}")]
    Body(String),
    /// The body is not a JWK set.
    #[error("{0}")]
    Document(#[from] KeyError),
    /// A JWK set without a single key pushgate can use.
    #[error("jwk set holds no RS256, ES256 or EdDSA signing key ({0} skipped)")]
    NoUsableKey(usize),
}

/// The cached JWK set of one provider. See the module docs.
pub struct Jwks {
    url: Uri,
    client: HttpsClient<Empty<Bytes>>,
    keys: RwLock<Arc<Vec<PublicKey>>>,
    /// Bumped by every successful fetch.
    generation: AtomicU64,
    /// When the last unknown-kid refresh started; held while one runs.
    unknown_kid: tokio::sync::Mutex<Option<Instant>>,
    refresh_every: Duration,
    /// `pushgate_auth_jwks_fetches_total{result="ok"}`.
    fetched: Counter,
    /// `pushgate_auth_jwks_fetches_total{result="error"}`.
    failed: Counter,
}

impl fmt::Debug for Jwks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jwks")
            .field("url", &masked_url(&self.url.to_string()))
            .field("keys", &self.keys.read().len())
            .field("refresh_every", &self.refresh_every)
            .finish_non_exhaustive()
    }
}

impl Jwks {
    /// A cache for the set at `url`, empty until the first fetch.
    /// Registers its metrics, so both series exist before the first fetch.
    pub fn new(url: &str, refresh_every: Duration) -> Result<Self, JwksError> {
        let uri: Uri = url.parse().map_err(|_| JwksError::Url(masked_url(url)))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(JwksError::Url(masked_url(url)));
        }
        // The recorder first: the set is fetched before the rest of the
        // gateway registers its metrics, and a handle taken before the
        // recorder is installed counts nowhere.
        crate::metrics::recorder();
        let fetched = metrics::counter!(names::AUTH_JWKS_FETCHES_TOTAL, "result" => "ok");
        let failed = metrics::counter!(names::AUTH_JWKS_FETCHES_TOTAL, "result" => "error");
        // Published at 0, so that `increase()` in an alert counts the
        // first failure too.
        fetched.increment(0);
        failed.increment(0);
        Ok(Self {
            url: uri,
            client: https_client().map_err(JwksError::Roots)?,
            keys: RwLock::new(Arc::new(Vec::new())),
            generation: AtomicU64::new(0),
            unknown_kid: tokio::sync::Mutex::new(None),
            refresh_every,
            fetched,
            failed,
        })
    }

    /// Builds the cache, waits up to `start_wait` for the first fetch and
    /// starts the background refresh, which ends when the cache is
    /// dropped. A provider that is down at start is logged and retried in
    /// the background; until it answers, tokens that need its keys are
    /// refused.
    pub async fn start(
        url: &str,
        refresh_every: Duration,
        start_wait: Duration,
    ) -> Result<Arc<Self>, JwksError> {
        let jwks = Arc::new(Self::new(url, refresh_every)?);
        let loaded = match tokio::time::timeout(start_wait, jwks.fetch()).await {
            Ok(Ok(count)) => {
                info!(url = %jwks.masked_url(), keys = count, "jwk set loaded");
                true
            }
            Ok(Err(err)) => {
                warn!(url = %jwks.masked_url(), error = %err, "jwk set not loaded at start; retrying in the background, tokens that need it are refused until then");
                false
            }
            Err(_) => {
                warn!(url = %jwks.masked_url(), "jwk set not loaded at start (timeout); retrying in the background, tokens that need it are refused until then");
                false
            }
        };
        tokio::spawn(refresh_loop(Arc::downgrade(&jwks), loaded, refresh_every));
        Ok(jwks)
    }

    /// The keys held now (empty before the first successful fetch).
    pub fn keys(&self) -> Arc<Vec<PublicKey>> {
        Arc::clone(&self.keys.read())
    }

    /// Refreshes the set because a token named a `kid` it does not hold.
    /// True when the set may have changed since the caller looked (a
    /// refresh succeeded, this one or one that finished while this caller
    /// waited); false when rate-limited or failed.
    pub async fn refresh_for_unknown_kid(&self) -> bool {
        let seen = self.generation.load(Ordering::Acquire);
        let mut last = self.unknown_kid.lock().await;
        if self.generation.load(Ordering::Acquire) != seen {
            return true;
        }
        if last.is_some_and(|at| at.elapsed() < UNKNOWN_KID_INTERVAL) {
            debug!("unknown kid: jwk set refresh rate-limited");
            return false;
        }
        *last = Some(Instant::now());
        match self.fetch().await {
            Ok(count) => {
                info!(url = %self.masked_url(), keys = count, "jwk set refreshed for an unknown kid");
                true
            }
            Err(err) => {
                warn!(url = %self.masked_url(), error = %err, "jwk set refresh for an unknown kid failed; keeping the last good set");
                false
            }
        }
    }

    /// Fetches the set once and, if it holds a usable key, replaces the
    /// cached one; returns how many keys it holds. Counted in
    /// `pushgate_auth_jwks_fetches_total` either way.
    pub async fn fetch(&self) -> Result<usize, JwksError> {
        let result = self.fetch_and_replace().await;
        match &result {
            Ok(_) => self.fetched.increment(1),
            Err(_) => self.failed.increment(1),
        }
        result
    }

    async fn fetch_and_replace(&self) -> Result<usize, JwksError> {
        let body = tokio::time::timeout(FETCH_TIMEOUT, self.get())
            .await
            .map_err(|_| JwksError::Timeout)??;
        let set = keys::from_jwk_set(&body)?;
        for (kid, why) in &set.skipped {
            debug!(kid = kid.as_deref().unwrap_or(""), why, "jwk skipped");
        }
        if set.keys.is_empty() {
            return Err(JwksError::NoUsableKey(set.skipped.len()));
        }
        let count = set.keys.len();
        *self.keys.write() = Arc::new(set.keys);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(count)
    }

    async fn get(&self) -> Result<Bytes, JwksError> {
        let request = hyper::Request::get(self.url.clone())
            .header(hyper::header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|err| JwksError::Request(err.to_string()))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|err| JwksError::Request(err.to_string()))?;
        if response.status() != StatusCode::OK {
            return Err(JwksError::Status(response.status()));
        }
        Limited::new(response.into_body(), MAX_JWKS_BYTES)
            .collect()
            .await
            .map(|body| body.to_bytes())
            .map_err(|err| JwksError::Body(err.to_string()))
    }

    fn masked_url(&self) -> String {
        masked_url(&self.url.to_string())
    }
}

/// Refreshes the set every `every`; after a failure retries sooner (1 s,
/// doubling up to `every`). Ends when the cache is dropped.
async fn refresh_loop(jwks: Weak<Jwks>, loaded: bool, every: Duration) {
    // `None` while the last fetch succeeded.
    let mut backoff = (!loaded).then_some(FIRST_RETRY.min(every));
    loop {
        let wait = backoff.unwrap_or(every);
        tokio::time::sleep(wait).await;
        let Some(jwks) = jwks.upgrade() else {
            return;
        };
        backoff = match jwks.fetch().await {
            Ok(count) => {
                debug!(url = %jwks.masked_url(), keys = count, "jwk set refreshed");
                None
            }
            Err(err) => {
                warn!(url = %jwks.masked_url(), error = %err, "jwk set refresh failed; keeping the last good set");
                Some(next_retry(backoff, every))
            }
        };
    }
}

/// The wait after a failed fetch: [`FIRST_RETRY`] after a success, then
/// doubling, at most `every`.
fn next_retry(backoff: Option<Duration>, every: Duration) -> Duration {
    backoff.map_or(FIRST_RETRY, |last| last * 2).min(every)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_a_second_to_the_refresh_interval() {
        let every = Duration::from_secs(300);
        let mut backoff = None;
        let mut seen = Vec::new();
        for _ in 0..11 {
            let wait = next_retry(backoff, every);
            backoff = Some(wait);
            seen.push(wait.as_secs());
        }
        assert_eq!(seen, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(
            next_retry(None, Duration::from_millis(500)).as_millis(),
            500
        );
    }

    #[tokio::test]
    async fn only_http_and_https_urls_are_taken() {
        for bad in ["ftp://x/keys", "not a url", "/keys", "http://"] {
            assert!(
                matches!(
                    Jwks::new(bad, Duration::from_secs(60)),
                    Err(JwksError::Url(_))
                ),
                "{bad}"
            );
        }
        assert!(Jwks::new("http://127.0.0.1:1/jwks", Duration::from_secs(60)).is_ok());
    }
}
