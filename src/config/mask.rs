//! Hiding `auth.secret`, `auth.api_key` and the passwords in
//! `auth.jwks_url`, `auth.connect_proxy_url` and `broker.url` from `Debug`,
//! error messages and masked output.

use std::fmt;

use super::{AuthConfig, BrokerConfig};

/// What masked secrets print as.
pub(super) const MASK: &str = "***";

impl AuthConfig {
    /// A copy with `secret` and `api_key` replaced by `***` when set, and
    /// the passwords in `jwks_url` and `connect_proxy_url` by `***`.
    pub(super) fn masked(&self) -> Self {
        Self {
            secret: mask(&self.secret),
            api_key: mask(&self.api_key),
            jwks_url: self.jwks_url.as_deref().map(masked_url),
            connect_proxy_url: self.connect_proxy_url.as_deref().map(masked_url),
            ..self.clone()
        }
    }
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masked = self.masked();
        f.debug_struct("AuthConfig")
            .field("secret", &masked.secret)
            .field("public_keys", &self.public_keys)
            .field("jwks_url", &masked.jwks_url)
            .field("jwks_refresh_secs", &self.jwks_refresh_secs)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("api_key", &masked.api_key)
            .field("anonymous", &self.anonymous)
            .field("allowed_origins", &self.allowed_origins)
            .field("connect_proxy_url", &masked.connect_proxy_url)
            .field("connect_proxy_timeout_ms", &self.connect_proxy_timeout_ms)
            .field("connect_proxy_concurrency", &self.connect_proxy_concurrency)
            .field("connect_proxy_queue_ms", &self.connect_proxy_queue_ms)
            .finish()
    }
}

/// `***` for a set value, the empty string for an unset one.
fn mask(value: &str) -> String {
    if value.is_empty() {
        String::new()
    } else {
        MASK.to_owned()
    }
}

impl BrokerConfig {
    /// A copy with the password in `url` replaced by `***`.
    pub(super) fn masked(&self) -> Self {
        Self {
            url: masked_url(&self.url),
            urls: self.urls.iter().map(|url| masked_url(url)).collect(),
            ..self.clone()
        }
    }
}

impl fmt::Debug for BrokerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerConfig")
            .field("kind", &self.kind)
            .field("url", &masked_url(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("timeout_ms", &self.timeout_ms)
            .field("start_wait_secs", &self.start_wait_secs)
            .field("presence_ttl_secs", &self.presence_ttl_secs)
            .field("cluster", &self.cluster)
            .field(
                "urls",
                &self
                    .urls
                    .iter()
                    .map(|url| masked_url(url))
                    .collect::<Vec<_>>(),
            )
            .field("shards", &self.shards)
            .finish()
    }
}

/// Query parameters that carry a password (`redis+unix://…?pass=…`).
const PASSWORD_PARAMS: [&str; 2] = ["pass", "password"];

/// `url` with its password shown as `***`: the password of the userinfo
/// (`scheme://user:password@host`, whether or not the URL is otherwise
/// valid: everything between the first `:` and the last `@`, so even a
/// password with a stray `/` or `?` is hidden whole) and the value of a
/// `pass` or `password` query parameter. The rest, user name included,
/// is kept.
pub fn masked_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(at) => url.split_at(at + 3),
        None => ("", url),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    // A socket URL has no authority: its credentials are in the query.
    let rest = match rest.rfind('@') {
        Some(at) if !scheme.contains("unix") => {
            let (userinfo, after) = rest.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(MASK);
                }
                None => out.push_str(userinfo),
            }
            after
        }
        _ => rest,
    };
    let (before_fragment, fragment) = rest.split_at(rest.find('#').unwrap_or(rest.len()));
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((name, _)) if PASSWORD_PARAMS.contains(&name) => {
                        format!("{name}={MASK}")
                    }
                    _ => param.to_owned(),
                })
                .collect();
            out.push_str(&params.join("&"));
        }
        None => out.push_str(before_fragment),
    }
    out.push_str(fragment);
    out
}
