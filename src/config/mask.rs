//! Hiding `auth.secret`, `auth.api_key` and the password in `broker.url`
//! from `Debug`, masked output and error messages.

use std::fmt;

use super::{AuthConfig, BrokerConfig};

/// What masked secrets print as.
pub(super) const MASK: &str = "***";

impl AuthConfig {
    /// A copy with `secret` and `api_key` replaced by `***` when set.
    pub(super) fn masked(&self) -> Self {
        Self {
            secret: mask(&self.secret),
            api_key: mask(&self.api_key),
            ..self.clone()
        }
    }
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masked = self.masked();
        f.debug_struct("AuthConfig")
            .field("secret", &masked.secret)
            .field("api_key", &masked.api_key)
            .field("anonymous", &self.anonymous)
            .field("allowed_origins", &self.allowed_origins)
            .finish()
    }
}

impl BrokerConfig {
    /// `url` with its password shown as `***`: the one after `user:` in
    /// `redis://user:password@host`, and the `pass` or `password` query
    /// parameter of a `redis+unix://` URL. For logs and messages.
    pub fn masked_url(&self) -> String {
        mask_url(&self.url)
    }
}

impl fmt::Debug for BrokerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerConfig")
            .field("kind", &self.kind)
            .field("url", &self.masked_url())
            .field("key_prefix", &self.key_prefix)
            .field("timeout_ms", &self.timeout_ms)
            .field("start_wait_secs", &self.start_wait_secs)
            .field("presence_ttl_secs", &self.presence_ttl_secs)
            .finish()
    }
}

/// `url` with the password of its user information and of its `pass` or
/// `password` query parameters replaced by `***`.
pub(super) fn mask_url(url: &str) -> String {
    // The scheme and the slashes after it, however many (a mistyped
    // `redis:/` is masked as well as `redis://`).
    let scheme_len = url
        .find(':')
        .filter(|&i| {
            i > 0
                && url[..i]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b))
        })
        .map_or(0, |i| i + 1);
    let slashes = url[scheme_len..].len() - url[scheme_len..].trim_start_matches('/').len();
    let (scheme, rest) = url.split_at(scheme_len + slashes);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        // No slashes: `user:password@host` without a scheme, whose `user:`
        // was taken for one.
        Some((_, host)) if slashes == 0 => format!("{MASK}@{host}"),
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, password)) if !password.is_empty() => format!("{user}:{MASK}@{host}"),
            _ => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = match query.split_once('#') {
                Some((query, fragment)) => (query, Some(fragment)),
                None => (query, None),
            };
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, value))
                        if !value.is_empty()
                            && (name.eq_ignore_ascii_case("pass")
                                || name.eq_ignore_ascii_case("password")) =>
                    {
                        format!("{name}={MASK}")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
            format!("{path}?{}{fragment}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

/// `***` for a set value, the empty string for an unset one.
fn mask(value: &str) -> String {
    if value.is_empty() {
        String::new()
    } else {
        MASK.to_owned()
    }
}
