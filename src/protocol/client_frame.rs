//! What a client may send on a WebSocket: `{"type":"ping"}`,
//! `{"type":"subscribe","channel":…}`, `{"type":"unsubscribe",…}` and
//! `{"type":"refresh","token":…}`.
//! Parsed here, pure; the WebSocket task acts on it.

use serde::Deserialize;

/// One text frame from a client, as understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClientFrame {
    /// `{"type":"ping"}`: answered with `{"type":"pong"}`.
    Ping,
    /// `{"type":"subscribe","channel":"…"}`; the name is not checked yet.
    Subscribe(String),
    /// `{"type":"unsubscribe","channel":"…"}`; the name is not checked yet.
    Unsubscribe(String),
    /// A `subscribe` or `unsubscribe` without a string `channel`.
    MissingChannel,
    /// `{"type":"refresh","token":"…"}`: a fresh token for the same user,
    /// moving the connection's expiry; the token is not checked yet.
    Refresh(String),
    /// A `refresh` without a string `token`.
    MissingToken,
    /// Anything else: not JSON, no `type`, an unknown type.
    Unknown,
}

impl ClientFrame {
    /// Reads a client's text frame; never fails, unknown is [`ClientFrame::Unknown`].
    pub(crate) fn parse(text: &str) -> Self {
        #[derive(Deserialize)]
        struct Typed {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            channel: Option<serde_json::Value>,
            #[serde(default)]
            token: Option<serde_json::Value>,
        }
        let Ok(frame) = serde_json::from_str::<Typed>(text) else {
            return Self::Unknown;
        };
        let channel = match frame.channel {
            Some(serde_json::Value::String(name)) => Some(name),
            _ => None,
        };
        if frame.kind == "refresh" {
            return match frame.token {
                Some(serde_json::Value::String(token)) => Self::Refresh(token),
                _ => Self::MissingToken,
            };
        }
        match (frame.kind.as_str(), channel) {
            ("ping", _) => Self::Ping,
            ("subscribe", Some(name)) => Self::Subscribe(name),
            ("unsubscribe", Some(name)) => Self::Unsubscribe(name),
            ("subscribe" | "unsubscribe", None) => Self::MissingChannel,
            _ => Self::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_frames_are_read_by_type() {
        let cases = [
            (r#"{"type":"ping"}"#, ClientFrame::Ping),
            (r#"{"type":"ping","x":1}"#, ClientFrame::Ping),
            (
                r#"{"type":"subscribe","channel":"product.42"}"#,
                ClientFrame::Subscribe("product.42".into()),
            ),
            (
                r#"{"channel":"a b","type":"unsubscribe"}"#,
                ClientFrame::Unsubscribe("a b".into()),
            ),
            (r#"{"type":"subscribe"}"#, ClientFrame::MissingChannel),
            (
                r#"{"type":"subscribe","channel":7}"#,
                ClientFrame::MissingChannel,
            ),
            (r#"{"type":"publish","channel":"x"}"#, ClientFrame::Unknown),
            (
                r#"{"type":"refresh","token":"a.b.c"}"#,
                ClientFrame::Refresh("a.b.c".into()),
            ),
            (r#"{"type":"refresh"}"#, ClientFrame::MissingToken),
            (r#"{"type":"refresh","token":1}"#, ClientFrame::MissingToken),
            (r#"{"type":1}"#, ClientFrame::Unknown),
            ("ping", ClientFrame::Unknown),
            (r#"{"type":"pong"}"#, ClientFrame::Unknown),
            ("{}", ClientFrame::Unknown),
            (r#" {"type" : "ping", "x": 1} "#, ClientFrame::Ping),
            ("[]", ClientFrame::Unknown),
            ("", ClientFrame::Unknown),
        ];
        for (text, want) in cases {
            assert_eq!(ClientFrame::parse(text), want, "{text}");
        }
    }
}
