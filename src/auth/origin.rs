//! Origin checks for browser endpoints.
//!
//! Browsers send `Origin` on WebSocket upgrades and cross-origin requests;
//! a disallowed origin gets `403` before any upgrade. A request without
//! `Origin` is not from a browser page and is not refused for that.

/// The `allowed_origins` entry that allows every origin.
const ANY_ORIGIN: &str = "*";

/// A configured `allowed_origins` entry that is neither `"*"` nor an origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is not an origin like https://example.com:8443 (scheme://host[:port], no path)")]
pub struct BadOrigin {
    /// The entry as configured.
    pub entry: String,
}

/// Which browser origins may use the browser endpoints
/// (`[auth] allowed_origins`).
///
/// Origins compare as RFC 6454 tuples: scheme and host ASCII
/// case-insensitive, port significant, the default port of `http` (80) and
/// `https` (443) the same as none. Anything with a path, even a trailing
/// `/`, is not an origin. `"null"` (sandboxed frames, `file:` pages) is
/// refused unless `"*"` is configured. An empty list allows no browser
/// origin at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginPolicy {
    allow_any: bool,
    /// Normalized (see [`normalize`]) allowed origins.
    allowed: Vec<String>,
}

impl OriginPolicy {
    /// A policy from the configured list; `"*"` anywhere in it allows every
    /// origin. Fails on the first entry that is not an origin, so a typo
    /// such as a trailing `/` cannot silently lock browsers out.
    pub fn new(allowed_origins: &[String]) -> Result<Self, BadOrigin> {
        let allow_any = allowed_origins.iter().any(|entry| entry == ANY_ORIGIN);
        let allowed = allowed_origins
            .iter()
            .filter(|entry| *entry != ANY_ORIGIN)
            .map(|entry| {
                normalize(entry).ok_or_else(|| BadOrigin {
                    entry: entry.clone(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { allow_any, allowed })
    }

    /// Whether a request with this `Origin` header value (absent: `None`)
    /// may proceed.
    pub fn allows(&self, origin: Option<&str>) -> bool {
        match origin {
            None => true,
            Some(_) if self.allow_any => true,
            Some(origin) => normalize(origin).is_some_and(|o| self.allowed.contains(&o)),
        }
    }

    /// The `Access-Control-Allow-Origin` value for a response: the request's
    /// own `Origin`, echoed so credentialed requests work (a literal `*`
    /// does not allow credentials). `None` when the origin is absent or
    /// refused. Responses that echo it must also carry `Vary: Origin`.
    pub fn cors_allow_origin<'a>(&self, origin: Option<&'a str>) -> Option<&'a str> {
        origin.filter(|o| self.allows(Some(o)))
    }
}

/// `scheme://host[:port]` in lowercase with a default port dropped, or
/// `None` if `raw` is not a serialized origin (including `"null"`).
fn normalize(raw: &str) -> Option<String> {
    let (scheme, authority) = raw.split_once("://")?;
    if !is_scheme(scheme) {
        return None;
    }
    let scheme = scheme.to_ascii_lowercase();
    let (host, port) = split_host_port(authority)?;
    if !is_host(host) {
        return None;
    }
    let host = host.to_ascii_lowercase();
    match port {
        Some(port) if Some(port) != default_port(&scheme) => {
            Some(format!("{scheme}://{host}:{port}"))
        }
        _ => Some(format!("{scheme}://{host}")),
    }
}

/// `host` and the optional port of an authority; `None` if the port is
/// not a number in 1..=65535. An IPv6 host keeps its brackets.
fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']')? + 1;
        let (host, rest) = authority.split_at(end);
        match rest {
            "" => (host, None),
            _ => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    match port {
        None => Some((host, None)),
        Some(port) => Some((host, Some(parse_port(port)?))),
    }
}

fn parse_port(raw: &str) -> Option<u16> {
    if raw.is_empty() || raw.len() > 5 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok().filter(|port| *port != 0)
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// RFC 3986 scheme: a letter, then letters, digits, `+`, `-`, `.`.
fn is_scheme(scheme: &str) -> bool {
    let mut bytes = scheme.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// A DNS name or IPv4 address (ASCII; browsers send IDNs as punycode), or
/// a bracketed IPv6 address.
fn is_host(host: &str) -> bool {
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(ipv6) => {
            !ipv6.is_empty()
                && ipv6
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        }
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str]) -> OriginPolicy {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        OriginPolicy::new(&entries).expect("valid origins")
    }

    #[test]
    fn origins_must_match_an_entry_exactly() {
        let listed = policy(&["https://app.example.com", "http://localhost:8080"]);
        let cases: &[(Option<&str>, bool)] = &[
            (None, true),
            (Some("https://app.example.com"), true),
            (Some("HTTPS://App.Example.COM"), true),
            (Some("https://app.example.com:443"), true),
            (Some("http://localhost:8080"), true),
            (Some("http://app.example.com"), false),
            (Some("https://app.example.com:8443"), false),
            (Some("https://app.example.com/"), false),
            (Some("https://app.example.com.evil.net"), false),
            (Some("https://evil.net/https://app.example.com"), false),
            (Some("https://user@app.example.com"), false),
            (Some("http://localhost"), false),
            (Some("http://localhost:8081"), false),
            (Some("http://localhost:"), false),
            (Some("null"), false),
            (Some(""), false),
            (Some("app.example.com"), false),
        ];
        for (origin, want) in cases {
            assert_eq!(listed.allows(*origin), *want, "{origin:?}");
        }
    }

    #[test]
    fn star_allows_every_origin_even_null() {
        let any = policy(&["*"]);
        for origin in [
            None,
            Some("https://x.example"),
            Some("null"),
            Some("garbage"),
        ] {
            assert!(any.allows(origin), "{origin:?}");
        }
        assert!(policy(&["https://a.example", "*"]).allows(Some("https://b.example")));
    }

    #[test]
    fn empty_list_allows_only_requests_without_origin() {
        let none = policy(&[]);
        assert!(none.allows(None));
        assert!(!none.allows(Some("https://app.example.com")));
    }

    #[test]
    fn ports_and_ipv6_hosts_are_compared_as_tuples() {
        let listed = policy(&["https://app.example.com:443", "http://[::1]:3000"]);
        assert!(listed.allows(Some("https://app.example.com")));
        assert!(listed.allows(Some("http://[::1]:3000")));
        assert!(!listed.allows(Some("http://[::1]")));
        assert!(!listed.allows(Some("http://[::2]:3000")));
    }

    #[test]
    fn cors_echoes_allowed_origins_only() {
        let listed = policy(&["https://app.example.com"]);
        let cases: &[(Option<&str>, Option<&str>)] = &[
            (
                Some("https://app.example.com"),
                Some("https://app.example.com"),
            ),
            (
                Some("https://APP.example.com"),
                Some("https://APP.example.com"),
            ),
            (Some("https://other.example.com"), None),
            (Some("null"), None),
            (None, None),
        ];
        for (origin, want) in cases {
            assert_eq!(listed.cors_allow_origin(*origin), *want, "{origin:?}");
        }
        assert_eq!(policy(&["*"]).cors_allow_origin(Some("null")), Some("null"));
    }

    #[test]
    fn entries_that_are_not_origins_are_refused() {
        let bad = [
            "https://app.example.com/",
            "https://app.example.com/path",
            "app.example.com",
            "null",
            "",
            "https://",
            "https://app.example.com:0",
            "https://app.example.com:65536",
            "https://app.example.com:http",
            "https://bücher.example",
            "https://*.example.com",
        ];
        for entry in bad {
            let entries = vec![entry.to_string()];
            assert_eq!(
                OriginPolicy::new(&entries),
                Err(BadOrigin {
                    entry: entry.to_string()
                }),
                "{entry:?}"
            );
        }
    }
}
