//! What pushgate sends the site about a client, and how it reads the
//! site's answer: pure, no I/O (see the parent module for the exchange).

use std::net::SocketAddr;

use hyper::header::{self, HeaderMap, HeaderName};
use serde_json::{Map, Value};

use crate::auth::token::check_channels;
use crate::protocol::{Channel, Transport, UserId};

/// The request headers forwarded to the site, in the order sent.
pub(crate) const FORWARDED_HEADERS: [HeaderName; 4] = [
    header::COOKIE,
    header::AUTHORIZATION,
    header::ORIGIN,
    header::USER_AGENT,
];

/// Who the site says a client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user (the answer's `user`, checked as a token's `sub`).
    pub user: UserId,
    /// Channels the user is in (the answer's `channels`, checked as a
    /// token's `channels` claim; empty when absent).
    pub channels: Vec<Channel>,
    /// When the connection ends (seconds since the epoch, closed `4004`
    /// as an expired token's); `None`: it does not.
    pub expires_at: Option<u64>,
}

/// The request of a client without a token, as the site is told of it.
#[derive(Debug, Clone, Copy)]
pub struct ClientRequest<'a> {
    /// Which transport it opens.
    pub transport: Transport,
    /// The request path (`/ws`, `/poll`, `/sse`).
    pub path: &'a str,
    /// The raw query string, as sent (`""` for none).
    pub query: &'a str,
    /// Its headers (only `cookie`, `authorization`, `origin` and
    /// `user-agent` are sent on).
    pub headers: &'a HeaderMap,
    /// The TCP peer's address, when known.
    pub remote_addr: Option<SocketAddr>,
}

impl ClientRequest<'_> {
    /// The JSON body posted to the site. A header sent several times is
    /// joined (`; ` for cookies, `, ` otherwise); values that are not
    /// visible ASCII are left out.
    pub fn to_json(&self) -> Value {
        let mut headers = Map::new();
        for name in &FORWARDED_HEADERS {
            let values: Vec<&str> = self
                .headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            if values.is_empty() {
                continue;
            }
            let separator = if *name == header::COOKIE { "; " } else { ", " };
            headers.insert(name.as_str().to_owned(), values.join(separator).into());
        }
        let mut body = Map::new();
        body.insert("transport".into(), self.transport.as_str().into());
        body.insert("path".into(), self.path.into());
        body.insert("query".into(), self.query.into());
        body.insert("headers".into(), headers.into());
        if let Some(addr) = self.remote_addr {
            body.insert("remote_addr".into(), addr.to_string().into());
        }
        Value::Object(body)
    }
}

/// Reads the site's `200` answer. `Err` says what is wrong with it.
pub fn parse_answer(body: &[u8], now_secs: u64) -> Result<Identity, String> {
    let Ok(Value::Object(mut answer)) = serde_json::from_slice::<Value>(body) else {
        return Err("the answer is not a JSON object".into());
    };
    let user = match answer.remove("user") {
        Some(Value::String(raw)) => UserId::parse(&raw).map_err(|err| format!("user: {err}"))?,
        Some(_) => return Err("user: not a string".into()),
        None => return Err("user: missing".into()),
    };
    let channels = check_channels(answer.remove("channels").filter(|v| !v.is_null()))
        .map_err(|_| "channels: not a list of channel names".to_owned())?;
    let expires_at = match answer.remove("expires_at").filter(|v| !v.is_null()) {
        None => None,
        Some(value) => match value.as_u64() {
            Some(at) if at > now_secs => Some(at),
            Some(at) => return Err(format!("expires_at: {at} is not in the future")),
            None => return Err("expires_at: not a whole number of seconds".into()),
        },
    };
    Ok(Identity {
        user,
        channels,
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;
    use serde_json::json;

    const NOW: u64 = 1_700_000_000;

    #[test]
    fn the_body_names_the_transport_and_forwards_four_headers_lower_case() {
        let mut headers = HeaderMap::new();
        headers.insert("Cookie", HeaderValue::from_static("sid=abc"));
        headers.append("cookie", HeaderValue::from_static("theme=dark"));
        headers.insert("User-Agent", HeaderValue::from_static("test/1"));
        headers.insert("X-Secret", HeaderValue::from_static("not sent"));
        headers.insert("Origin", HeaderValue::from_bytes(b"\xff").expect("opaque"));
        let req = ClientRequest {
            transport: Transport::Sse,
            path: "/sse",
            query: "channels=a%2Cb",
            headers: &headers,
            remote_addr: Some("192.0.2.1:4000".parse().expect("addr")),
        };
        assert_eq!(
            req.to_json(),
            json!({
                "transport": "sse",
                "path": "/sse",
                "query": "channels=a%2Cb",
                "headers": {"cookie": "sid=abc; theme=dark", "user-agent": "test/1"},
                "remote_addr": "192.0.2.1:4000",
            })
        );
        let bare = ClientRequest {
            remote_addr: None,
            headers: &HeaderMap::new(),
            ..req
        };
        assert_eq!(
            bare.to_json(),
            json!({"transport": "sse", "path": "/sse", "query": "channels=a%2Cb", "headers": {}})
        );
    }

    #[test]
    fn an_answer_is_checked_as_a_token_would_be() {
        let ok = parse_answer(
            br#"{"user":"alice","channels":["vip","vip"],"expires_at":1700000600,"x":1}"#,
            NOW,
        )
        .expect("usable");
        assert_eq!(ok.user.as_str(), "alice");
        assert_eq!(ok.channels.len(), 1);
        assert_eq!(ok.expires_at, Some(1_700_000_600));
        let bare = parse_answer(br#"{"user":"bob","channels":null}"#, NOW).expect("usable");
        assert_eq!((bare.channels.len(), bare.expires_at), (0, None));
        for (body, why) in [
            (&b"not json"[..], "the answer is not a JSON object"),
            (b"[]", "the answer is not a JSON object"),
            (b"{}", "user: missing"),
            (br#"{"user":7}"#, "user: not a string"),
            (br#"{"user":"al ice"}"#, "user: "),
            (br#"{"user":"a","channels":"vip"}"#, "channels: not a list"),
            (
                br#"{"user":"a","channels":["v p"]}"#,
                "channels: not a list",
            ),
            (
                br#"{"user":"a","expires_at":1700000000}"#,
                "expires_at: 1700000000 is not in the future",
            ),
            (
                br#"{"user":"a","expires_at":"soon"}"#,
                "expires_at: not a whole",
            ),
        ] {
            let err = parse_answer(body, NOW).expect_err("refused");
            assert!(
                err.starts_with(why),
                "{err:?} for {:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
