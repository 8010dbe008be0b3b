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

use bytes::Bytes;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri, Version};

use super::MAX_HEADERS;

/// A complete request head.
#[derive(Debug)]
pub(crate) struct Head {
    /// The request line and headers (no body).
    pub request: Request<()>,
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

/// What the bytes read so far hold.
#[derive(Debug)]
pub(crate) enum Parsed<R> {
    /// Not a whole head yet.
    Partial,
    /// A simple head for a path the caller serves, with what the caller
    /// made of the path (boxed: the request is large, and only passes
    /// through).
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
    let Some(request) = request(&req, &buf[..len], method) else {
        return Parsed::Other;
    };
    let Some(body_len) = body_len(&request) else {
        return Parsed::Other;
    };
    let keep_alive = !has_token(request.headers(), header::CONNECTION, "close");
    let upgrade = request.headers().contains_key(header::UPGRADE);
    Parsed::Native(
        Box::new(Head {
            request,
            len,
            body_len,
            keep_alive,
            upgrade,
        }),
        native,
    )
}

/// The parsed head (`req`, parsed from `head`) as an `http` request, or
/// `None` if a part does not convert (hyper then answers it). The head
/// is copied once, and the target and every header value are views of
/// that copy: one allocation for them all, not one each.
fn request(req: &httparse::Request<'_, '_>, head: &[u8], method: Method) -> Option<Request<()>> {
    let shared = Bytes::copy_from_slice(head);
    // Where `part` (a slice httparse took from `head`) lies in the copy.
    let view = |part: &[u8]| {
        let start = (part.as_ptr() as usize).checked_sub(head.as_ptr() as usize)?;
        let end = start
            .checked_add(part.len())
            .filter(|end| *end <= shared.len())?;
        Some(shared.slice(start..end))
    };
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_maybe_shared(view(h.value)?).ok()?;
        headers.append(name, value);
    }
    let target = Uri::from_maybe_shared(view(req.path?.as_bytes())?).ok()?;
    let mut request = Request::builder()
        .method(method)
        .version(Version::HTTP_11)
        .uri(target)
        .body(())
        .ok()?;
    *request.headers_mut() = headers;
    Some(request)
}

/// The length of the request's body, if it is one the front door reads:
/// none expected before the answer (no `Expect`), none chunked (no
/// `Transfer-Encoding`); a `GET` with no `Content-Length` but 0, a `POST`
/// with exactly one, in plain digits.
fn body_len(request: &Request<()>) -> Option<usize> {
    let headers = request.headers();
    if headers.contains_key(header::TRANSFER_ENCODING) || headers.contains_key(header::EXPECT) {
        return None;
    }
    let mut lengths = headers.get_all(header::CONTENT_LENGTH).iter();
    if request.method() == Method::GET {
        return lengths.all(|v| v.as_bytes() == b"0").then_some(0);
    }
    match (lengths.next(), lengths.next()) {
        (Some(value), None) => {
            let digits = value.to_str().ok()?;
            // `parse` alone takes a leading `+`, which hyper refuses.
            if !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        }
        _ => None,
    }
}

fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
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
        assert_eq!(head.request.uri().query(), Some("token=abc&cursor=1-2"));
        assert_eq!(head.request.headers()["origin"], "https://a.example");
        assert_eq!(native("GET /sse HTTP/1.1\r\n\r\n").1, Native::Sse);
    }

    #[test]
    fn a_push_head_says_how_long_its_body_is() {
        let text = "POST /push HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"data\":null}";
        let (head, kind) = native(text);
        assert_eq!(kind, Native::Push);
        assert_eq!(head.request.method(), Method::POST);
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
