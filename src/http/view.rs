//! What the gateway reads of a request's head (its path, query, header
//! fields and peer), whichever parser read it: hyper's `Request`, or the
//! front door's raw head (`http::head`), which is read in place rather
//! than built into a `HeaderMap` (a quarter of a WebSocket handshake's
//! instructions went to building one: README, Performance).

use std::net::SocketAddr;

use hyper::Request;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};

use super::RemoteAddr;

/// A request's header fields, read by name.
pub(crate) trait Fields {
    /// Every value of `name`, in the order sent.
    fn all<'a>(&'a self, name: &HeaderName) -> impl Iterator<Item = &'a [u8]>;

    /// The first value of `name`.
    fn first(&self, name: &HeaderName) -> Option<&[u8]> {
        self.all(name).next()
    }

    /// The first value of `name` as text, if it is visible ASCII
    /// ([`text`]).
    fn first_text(&self, name: &HeaderName) -> Option<&str> {
        self.first(name).and_then(text)
    }

    /// Whether any value of `name`, as a comma-separated list, holds
    /// `token` (ASCII case ignored): `Connection: keep-alive, Upgrade`
    /// holds `upgrade`.
    fn has_token(&self, name: &HeaderName, token: &str) -> bool {
        let token = token.as_bytes();
        self.all(name).filter(|v| is_text(v)).any(|v| {
            v.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
        })
    }
}

impl Fields for HeaderMap {
    fn all<'a>(&'a self, name: &HeaderName) -> impl Iterator<Item = &'a [u8]> {
        self.get_all(name).iter().map(HeaderValue::as_bytes)
    }
}

/// A request's head: the path and query of its target, its fields, and
/// the TCP peer it came from.
pub(crate) trait RequestView {
    /// The header fields' type.
    type Fields: Fields;

    /// The header fields.
    fn fields(&self) -> &Self::Fields;

    /// The target's path (without its query).
    fn path(&self) -> &str;

    /// The target's query (after `?`), if it has one.
    fn query(&self) -> Option<&str>;

    /// The TCP peer's address (behind a reverse proxy, the proxy's), when
    /// the server recorded it.
    fn remote_addr(&self) -> Option<SocketAddr>;
}

impl<B> RequestView for Request<B> {
    type Fields = HeaderMap;

    fn fields(&self) -> &HeaderMap {
        self.headers()
    }

    fn path(&self) -> &str {
        self.uri().path()
    }

    fn query(&self) -> Option<&str> {
        self.uri().query()
    }

    fn remote_addr(&self) -> Option<SocketAddr> {
        self.extensions().get::<RemoteAddr>().map(|addr| addr.0)
    }
}

/// A field value as text, if it is visible ASCII (tabs and spaces
/// included), as `HeaderValue::to_str` takes it.
pub(crate) fn text(value: &[u8]) -> Option<&str> {
    if is_text(value) {
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

/// Whether `value` is visible ASCII, tabs and spaces included (the only
/// whitespace such a value holds, so trimming it as bytes trims it as
/// `str::trim` would).
fn is_text(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header;

    #[test]
    fn text_takes_what_header_values_take_as_text() {
        for bytes in [
            &b"abc"[..],
            b"a b\tc",
            b"",
            b"~!",
            b"\x7f",
            b"\x1f",
            b"caf\xc3\xa9",
            b"\xff",
            b"\0",
        ] {
            let value = HeaderValue::from_bytes(bytes).ok();
            let want = value.as_ref().and_then(|v| v.to_str().ok());
            // A value `HeaderValue` refuses is never one httparse hands over.
            if value.is_some() {
                assert_eq!(text(bytes), want, "{bytes:?}");
            }
        }
        assert_eq!(text(b"\x7f"), None);
        assert_eq!(text(b"caf\xc3\xa9"), None);
    }

    #[test]
    fn a_hyper_request_is_read_through_its_parts() {
        let mut req = Request::get("/sse?a=1")
            .header("origin", "https://a.example")
            .body(())
            .expect("request");
        assert_eq!(req.path(), "/sse");
        assert_eq!(req.query(), Some("a=1"));
        assert_eq!(
            req.fields().first_text(&header::ORIGIN),
            Some("https://a.example")
        );
        assert_eq!(
            req.remote_addr(),
            None,
            "recorded only for the connect proxy"
        );
        let peer: SocketAddr = "192.0.2.1:4000".parse().expect("addr");
        req.extensions_mut().insert(RemoteAddr(peer));
        assert_eq!(req.remote_addr(), Some(peer));
        let bare = Request::get("/ws").body(()).expect("request");
        assert_eq!(bare.query(), None);
    }

    #[test]
    fn a_header_maps_fields_read_every_value_in_order() {
        let mut map = HeaderMap::new();
        map.append(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        map.append(header::CONNECTION, HeaderValue::from_static("x, Upgrade"));
        map.append(
            header::ORIGIN,
            HeaderValue::from_bytes(b"\xff").expect("opaque"),
        );
        assert_eq!(
            map.all(&header::CONNECTION).collect::<Vec<_>>(),
            [&b"keep-alive"[..], b"x, Upgrade"]
        );
        assert!(map.has_token(&header::CONNECTION, "upgrade"));
        assert!(!map.has_token(&header::CONNECTION, "close"));
        assert_eq!(map.first(&header::ORIGIN), Some(&b"\xff"[..]));
        assert_eq!(map.first_text(&header::ORIGIN), None);
        assert_eq!(map.first(&header::COOKIE), None);
    }
}
