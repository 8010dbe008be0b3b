//! A request head read from the raw socket, and whether it is one that
//! can be answered without hyper.
//!
//! Pure: bytes in, a parsed head (or why not) out. Only simple requests
//! are taken, over HTTP/1.1 with no `Expect`, for a method and path the
//! caller says it serves (the server's route table decides which): a
//! `GET` with no body, a `POST` whose body has one `Content-Length` (no
//! `Transfer-Encoding`); whether it asks for an `Upgrade` is the caller's
//! to weigh. Anything else, malformed heads included, is left to hyper,
//! which then answers it (or refuses it) the way it always does.

use std::net::SocketAddr;

use bytes::Bytes;
use hyper::Method;
use hyper::header::{self, HeaderName};
use hyper::http::uri::PathAndQuery;

use super::MAX_HEADERS;
use super::view::{Fields, RequestView};

/// A complete request head.
#[derive(Debug)]
pub(crate) struct Head {
    /// The target's path and query, checked as hyper checks a target.
    target: PathAndQuery,
    /// The header fields, read where they lie in the head.
    fields: RawFields,
    /// The TCP peer, when the server records it.
    pub remote_addr: Option<SocketAddr>,
    /// Bytes the head took, blank line included.
    pub len: usize,
    /// Bytes of the body that follows the head (its `Content-Length`; 0
    /// for a `GET`).
    pub body_len: usize,
    /// Whether the connection stays open after the answer (HTTP/1.1
    /// without `Connection: close`).
    pub keep_alive: bool,
    /// Whether the request carries an `Upgrade` header.
    pub upgrade: bool,
}

impl RequestView for Head {
    type Fields = RawFields;

    fn fields(&self) -> &RawFields {
        &self.fields
    }

    fn path(&self) -> &str {
        self.target.path()
    }

    fn query(&self) -> Option<&str> {
        self.target.query()
    }

    fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote_addr
    }
}

/// A head's header fields as sent: one copy of the head, and where each
/// field's name and value lie in it. A lookup compares names in place;
/// with the dozen or so fields a request carries that is cheaper than
/// building a `HeaderMap` (an allocation, a hash and a name check per
/// field).
#[derive(Debug)]
pub(crate) struct RawFields {
    head: Bytes,
    spans: Vec<Span>,
}

/// Where one field's name and value lie in the head.
#[derive(Debug, Clone, Copy)]
struct Span {
    name: (u32, u32),
    value: (u32, u32),
}

impl RawFields {
    fn slice(&self, (start, end): (u32, u32)) -> &[u8] {
        self.head
            .get(start as usize..end as usize)
            .unwrap_or_default()
    }
}

impl Fields for RawFields {
    fn all<'a>(&'a self, name: &HeaderName) -> impl Iterator<Item = &'a [u8]> {
        // A `HeaderName` is in lower case: only the sent name is folded,
        // and only one of the same length is compared.
        let name = name.as_str().as_bytes();
        self.spans.iter().filter_map(move |span| {
            let (start, end) = span.name;
            if end.checked_sub(start)? as usize != name.len() {
                return None;
            }
            let sent = self.slice(span.name);
            sent.iter()
                .zip(name)
                .all(|(s, n)| s.to_ascii_lowercase() == *n)
                .then(|| self.slice(span.value))
        })
    }
}

/// What the bytes read so far hold.
#[derive(Debug)]
pub(crate) enum Parsed<R> {
    /// Not a whole head yet.
    Partial,
    /// A simple head for a path the caller serves, with what the caller
    /// made of the path (boxed: the head only passes through, and the
    /// futures that hold it while it is read stay small).
    Native(Box<Head>, R),
    /// A head (or bytes) for hyper: another endpoint, another method or
    /// version, a body, or something malformed.
    Other,
}

/// Reads a request head from the start of `buf`, with at most
/// `max_headers` headers (at most [`MAX_HEADERS`]: the slots live on the
/// stack). `serves` maps a `GET` or `POST` request's method and path
/// (without its query) to what the caller serves there, or `None` to
/// leave it to hyper.
pub(crate) fn parse<R>(
    buf: &[u8],
    max_headers: usize,
    serves: impl FnOnce(&Method, &str) -> Option<R>,
) -> Parsed<R> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots[..max_headers.min(MAX_HEADERS)]);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let method = match req.method {
        Some("GET") => Method::GET,
        Some("POST") => Method::POST,
        _ => return Parsed::Other,
    };
    let native = match req.path {
        Some(target) => match serves(&method, target.split_once('?').map_or(target, |(p, _)| p)) {
            Some(native) => native,
            None => return Parsed::Other,
        },
        None => return Parsed::Other,
    };
    if req.version != Some(1) {
        return Parsed::Other;
    }
    let Some((target, fields)) = read(&req, &buf[..len]) else {
        return Parsed::Other;
    };
    let Some(body_len) = body_len(&method, &fields) else {
        return Parsed::Other;
    };
    let keep_alive = !fields.has_token(&header::CONNECTION, "close");
    let upgrade = fields.first(&header::UPGRADE).is_some();
    Parsed::Native(
        Box::new(Head {
            target,
            fields,
            remote_addr: None,
            len,
            body_len,
            keep_alive,
            upgrade,
        }),
        native,
    )
}

/// The parsed head's target and fields (`req`, parsed from `head`), or
/// `None` if the target is not one hyper takes (hyper then answers it).
/// The head is copied once; the target is a view of that copy, and each
/// field is where it lies in it. httparse has checked every name (a
/// token) and value (no control character but tab) as `HeaderName` and
/// `HeaderValue` would.
fn read(req: &httparse::Request<'_, '_>, head: &[u8]) -> Option<(PathAndQuery, RawFields)> {
    let shared = Bytes::copy_from_slice(head);
    // Where `part` (a slice httparse took from `head`) lies in the copy.
    let span = |part: &[u8]| {
        let start = (part.as_ptr() as usize).checked_sub(head.as_ptr() as usize)?;
        let end = start
            .checked_add(part.len())
            .filter(|end| *end <= head.len())?;
        Some((u32::try_from(start).ok()?, u32::try_from(end).ok()?))
    };
    let mut spans = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        spans.push(Span {
            name: span(h.name.as_bytes())?,
            value: span(h.value)?,
        });
    }
    let (start, end) = span(req.path?.as_bytes())?;
    let target =
        PathAndQuery::from_maybe_shared(shared.slice(start as usize..end as usize)).ok()?;
    Some((
        target,
        RawFields {
            head: shared,
            spans,
        },
    ))
}

/// The length of the request's body, if it is one the front door reads:
/// none expected before the answer (no `Expect`), none chunked (no
/// `Transfer-Encoding`); a `GET` with no `Content-Length` but 0, a `POST`
/// with exactly one, in plain digits.
fn body_len(method: &Method, fields: &RawFields) -> Option<usize> {
    if fields.first(&header::TRANSFER_ENCODING).is_some() || fields.first(&header::EXPECT).is_some()
    {
        return None;
    }
    let mut lengths = fields.all(&header::CONTENT_LENGTH);
    if method == Method::GET {
        return lengths.all(|v| v == b"0").then_some(0);
    }
    match (lengths.next(), lengths.next()) {
        (Some(value), None) => {
            // `parse` alone takes a leading `+`, which hyper refuses.
            if !value.iter().all(u8::is_ascii_digit) {
                return None;
            }
            std::str::from_utf8(value).ok()?.parse().ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Native {
        Poll,
        Sse,
        Push,
    }

    fn serves(method: &Method, path: &str) -> Option<Native> {
        match (method, path) {
            (&Method::GET, "/poll") => Some(Native::Poll),
            (&Method::GET, "/sse") => Some(Native::Sse),
            (&Method::POST, "/push") => Some(Native::Push),
            _ => None,
        }
    }

    fn native(text: &str) -> (Head, Native) {
        match parse(text.as_bytes(), 64, serves) {
            Parsed::Native(head, native) => (*head, native),
            other => panic!("not native: {other:?} for {text:?}"),
        }
    }

    fn is_other(text: &str) -> bool {
        matches!(parse(text.as_bytes(), 64, serves), Parsed::Other)
    }

    #[test]
    fn a_poll_head_is_served_natively_with_its_query_and_headers() {
        let text = "GET /poll?token=abc&cursor=1-2 HTTP/1.1\r\nHost: x\r\nOrigin: https://a.example\r\n\r\nGET";
        let (head, kind) = native(text);
        assert_eq!(kind, Native::Poll);
        assert_eq!(
            head.len,
            text.len() - 3,
            "the pipelined bytes are not the head's"
        );
        assert!(head.keep_alive);
        assert!(!head.upgrade);
        assert_eq!(head.path(), "/poll");
        assert_eq!(head.query(), Some("token=abc&cursor=1-2"));
        assert_eq!(
            head.fields().first_text(&header::ORIGIN),
            Some("https://a.example")
        );
        assert_eq!(head.fields().first(&header::HOST), Some(&b"x"[..]));
        assert_eq!(head.fields().first(&header::COOKIE), None);
        assert_eq!(head.remote_addr(), None, "until the server records it");
        let peer: SocketAddr = "192.0.2.1:4000".parse().expect("addr");
        let head = Head {
            remote_addr: Some(peer),
            ..head
        };
        assert_eq!(head.remote_addr(), Some(peer));
        assert_eq!(native("GET /sse HTTP/1.1\r\n\r\n").1, Native::Sse);
    }

    #[test]
    fn a_push_head_says_how_long_its_body_is() {
        let text = "POST /push HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"data\":null}";
        let (head, kind) = native(text);
        assert_eq!(kind, Native::Push);
        assert_eq!(head.len, text.len() - 13, "the body is not the head's");
        assert_eq!(head.body_len, 13);
        assert!(head.keep_alive);
        let (empty, _) = native("POST /push HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(empty.body_len, 0);
        assert_eq!(native("GET /poll HTTP/1.1\r\n\r\n").0.body_len, 0);
    }

    #[test]
    fn connection_close_ends_keep_alive() {
        let (head, _) = native("GET /poll HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n");
        assert!(!head.keep_alive);
    }

    #[test]
    fn a_head_cut_short_is_partial() {
        let full = "GET /poll?token=abc HTTP/1.1\r\nHost: x\r\n\r\n";
        for end in 0..full.len() {
            assert!(
                matches!(parse(&full.as_bytes()[..end], 64, serves), Parsed::Partial),
                "{end}"
            );
        }
    }

    #[test]
    fn everything_else_is_left_to_hyper() {
        for text in [
            "POST /poll HTTP/1.1\r\n\r\n",
            "OPTIONS /poll HTTP/1.1\r\n\r\n",
            "HEAD /sse HTTP/1.1\r\n\r\n",
            "GET /poll HTTP/1.0\r\n\r\n",
            "GET /ws HTTP/1.1\r\n\r\n",
            "GET /polls HTTP/1.1\r\n\r\n",
            "GET /push HTTP/1.1\r\n\r\n",
            "POST /push HTTP/1.1\r\n\r\n",
            "POST /push HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
            "POST /push HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}",
            "POST /push HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n{}",
            "POST /push HTTP/1.1\r\nContent-Length: \r\n\r\n",
            "POST /push HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "POST /push HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            "POST /push HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
            "POST /push HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
            "PUT /push HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
            "GET /poll HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
            "GET /poll HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n",
            "GET /poll HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /sse HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET /poll HTTP/1.1\r\nBad Header: x\r\n\r\n",
            "\u{1}\u{2}garbage\r\n\r\n",
        ] {
            assert!(is_other(text), "{text:?}");
        }
        assert!(
            native("GET /poll HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
                .0
                .keep_alive
        );
    }

    #[test]
    fn an_upgrade_is_parsed_and_said() {
        let (head, _) =
            native("GET /poll HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
        assert!(head.upgrade);
        assert!(head.keep_alive);
    }

    #[test]
    fn fields_are_read_by_name_in_any_case_every_value_in_order() {
        let text = b"GET /sse?a=1#frag HTTP/1.1\r\nCOOKIE: a=1\r\nx-other: y\r\ncookie:  b=2 \r\nOrigin: \xff\r\n\r\n";
        let Parsed::Native(head, _) = parse(text, 64, serves) else {
            panic!("not native");
        };
        let fields = head.fields();
        assert_eq!(
            fields.all(&header::COOKIE).collect::<Vec<_>>(),
            [&b"a=1"[..], b"b=2"],
            "values in the order sent, trimmed as httparse trims them"
        );
        assert_eq!(fields.first(&header::ORIGIN), Some(&b"\xff"[..]));
        assert_eq!(
            fields.first_text(&header::ORIGIN),
            None,
            "not visible ASCII"
        );
        assert_eq!(head.query(), Some("a=1"), "the fragment is not the query's");
    }

    #[test]
    fn a_nameless_field_or_a_target_hyper_refuses_is_left_to_hyper() {
        for text in [
            &b"GET /poll HTTP/1.1\r\n: x\r\n\r\n"[..],
            b"GET /poll?a=\x7f HTTP/1.1\r\n\r\n",
            b"GET /poll?\xff HTTP/1.1\r\n\r\n",
        ] {
            assert!(matches!(parse(text, 64, serves), Parsed::Other), "{text:?}");
        }
    }

    proptest::proptest! {
        /// The fields read in place are what a `HeaderMap` built from the
        /// same head holds (as the front door built one before), for
        /// every name the gateway reads.
        #[test]
        fn fields_read_in_place_match_a_header_map(
            fields in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "Origin", "origin", "COOKIE", "Connection", "Upgrade",
                        "Content-Length", "content-type", "Authorization",
                        "Last-Event-ID", "Sec-WebSocket-Key", "X-Other",
                    ]),
                    "[ -~\t]{0,12}",
                ),
                0..12,
            )
        ) {
            let mut text = String::from("POST /push HTTP/1.1\r\n");
            for (name, value) in &fields {
                text.push_str(&format!("{name}: {value}\r\n"));
            }
            text.push_str("\r\n");
            let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut slots);
            proptest::prop_assume!(req.parse(text.as_bytes()).is_ok());
            let mut map = hyper::HeaderMap::new();
            for h in req.headers.iter() {
                map.append(
                    HeaderName::from_bytes(h.name.as_bytes()).expect("a token"),
                    hyper::header::HeaderValue::from_bytes(h.value).expect("a value"),
                );
            }
            let (_, raw) = read(&req, text.as_bytes()).expect("read");
            for name in [
                header::ORIGIN, header::COOKIE, header::CONNECTION, header::UPGRADE,
                header::CONTENT_LENGTH, header::CONTENT_TYPE, header::AUTHORIZATION,
                HeaderName::from_static("last-event-id"), header::SEC_WEBSOCKET_KEY,
                header::HOST,
            ] {
                proptest::prop_assert_eq!(
                    raw.all(&name).collect::<Vec<_>>(),
                    map.all(&name).collect::<Vec<_>>(),
                    "{}", name
                );
                proptest::prop_assert_eq!(
                    raw.has_token(&name, "close"),
                    map.has_token(&name, "close")
                );
            }
        }
    }

    #[test]
    fn too_many_headers_are_left_to_hyper() {
        let mut text = String::from("GET /poll HTTP/1.1\r\n");
        for i in 0..5 {
            text.push_str(&format!("X-{i}: v\r\n"));
        }
        text.push_str("\r\n");
        assert!(matches!(
            parse(text.as_bytes(), 5, serves),
            Parsed::Native(..)
        ));
        assert!(matches!(parse(text.as_bytes(), 4, serves), Parsed::Other));
    }
}
