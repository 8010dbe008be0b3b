//! What the load client reads from a gateway: pushgate's JSON frames, or
//! (for gateways that send bare payloads, such as Nchan) the payload alone.
//!
//! Every payload this client pushes is `{"seq":N,"ts":µs,...}`: `seq`
//! numbers the message within a run, `ts` is the wall-clock time (µs since
//! the Unix epoch) at which the push was written, so any process on the
//! machine can compute a delivery latency.

use std::borrow::Cow;

use serde::Deserialize;

/// One inbound frame, reduced to what the load client counts. Its text
/// is borrowed from the frame read (a JSON string with escapes is
/// unescaped into its own), so counting a message allocates nothing: the
/// client spends on a pushgate frame what its size costs, as on a bare
/// payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inbound<'a> {
    /// A pushed message.
    Message {
        /// Its number in the run, if the payload carries one.
        seq: Option<u64>,
        /// When it was pushed (µs since the epoch), if carried.
        ts_us: Option<u64>,
        /// The gateway's cursor for it.
        cursor: Option<Cow<'a, str>>,
        /// The channel it came through (`None`: broadcast or personal).
        channel: Option<Cow<'a, str>>,
    },
    /// A resume answer: whether every missed message follows.
    Recover {
        /// `complete` as sent.
        complete: bool,
        /// The cursor it carries.
        cursor: Option<Cow<'a, str>>,
    },
    /// Come back with this cursor (poll timeout, drain, lifetime).
    Reconnect {
        /// The cursor to resume from.
        cursor: Option<Cow<'a, str>>,
        /// Why.
        reason: Cow<'a, str>,
        /// How long the gateway asks the client to wait, ms (0 if absent).
        retry_ms: u64,
    },
    /// The gateway is ending the connection.
    Close {
        /// Why (`idle`, `slow`, …).
        reason: Cow<'a, str>,
    },
    /// Anything else (pong, error, unknown).
    Other,
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(rename = "type", borrow, default, deserialize_with = "borrowed")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "borrowed")]
    cursor: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "borrowed")]
    channel: Option<Cow<'a, str>>,
    data: Option<Payload>,
    complete: Option<bool>,
    #[serde(borrow, default, deserialize_with = "borrowed")]
    reason: Option<Cow<'a, str>>,
    seq: Option<u64>,
    ts: Option<u64>,
    retry_ms: Option<u64>,
}

/// An optional string borrowed from the input where it has no escapes
/// (serde's own `Option<Cow<str>>` always copies).
fn borrowed<'de: 'a, 'a, D>(deserializer: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Text<'a>>::deserialize(deserializer)?.map(|text| text.0))
}

#[derive(Deserialize)]
struct Payload {
    seq: Option<u64>,
    ts: Option<u64>,
}

/// Parses one frame's text.
pub(crate) fn parse(text: &[u8]) -> Inbound<'_> {
    let Ok(wire) = serde_json::from_slice::<Wire<'_>>(text) else {
        return Inbound::Other;
    };
    match wire.kind.as_deref() {
        Some("message") => {
            let (seq, ts_us) = wire.data.map_or((None, None), |d| (d.seq, d.ts));
            Inbound::Message {
                seq,
                ts_us,
                cursor: wire.cursor,
                channel: wire.channel,
            }
        }
        Some("recover") => Inbound::Recover {
            complete: wire.complete.unwrap_or(false),
            cursor: wire.cursor,
        },
        Some("reconnect") => Inbound::Reconnect {
            cursor: wire.cursor,
            reason: wire.reason.unwrap_or_default(),
            retry_ms: wire.retry_ms.unwrap_or(0),
        },
        Some("close") => Inbound::Close {
            reason: wire.reason.unwrap_or_default(),
        },
        None if wire.seq.is_some() => Inbound::Message {
            seq: wire.seq,
            ts_us: wire.ts,
            cursor: None,
            channel: None,
        },
        _ => Inbound::Other,
    }
}

/// Parses a long-poll answer: a JSON array of frames (or one bare frame).
pub(crate) fn parse_array(body: &[u8]) -> Vec<Inbound<'_>> {
    match serde_json::from_slice::<Vec<&serde_json::value::RawValue>>(body) {
        Ok(items) => items
            .into_iter()
            .map(|raw| parse(raw.get().as_bytes()))
            .collect(),
        Err(_) => vec![parse(body)],
    }
}

/// Wall-clock now, µs since the Unix epoch (comparable across processes).
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushgate_frames_and_bare_payloads_parse() {
        let m = br#"{"type":"message","id":"a","cursor":"00ff-3","stream":"broadcast","data":{"seq":3,"ts":99,"pad":"x"}}"#;
        assert_eq!(
            parse(m),
            Inbound::Message {
                seq: Some(3),
                ts_us: Some(99),
                cursor: Some("00ff-3".into()),
                channel: None,
            }
        );
        assert_eq!(
            parse(br#"{"type":"recover","complete":false,"cursor":"c"}"#),
            Inbound::Recover {
                complete: false,
                cursor: Some("c".into())
            }
        );
        assert_eq!(
            parse(br#"{"type":"close","reason":"idle"}"#),
            Inbound::Close {
                reason: "idle".into()
            }
        );
        assert_eq!(
            parse(br#"{"seq":4,"ts":5}"#),
            Inbound::Message {
                seq: Some(4),
                ts_us: Some(5),
                cursor: None,
                channel: None,
            }
        );
        let c = br#"{"type":"message","id":"a","cursor":"00ff-3~0a0b0c0d","stream":"channel","channel":"c.7","data":{"seq":8,"ts":1}}"#;
        assert!(
            matches!(parse(c), Inbound::Message { seq: Some(8), channel: Some(ch), .. } if ch == "c.7")
        );
        assert_eq!(parse(br#"{"type":"pong"}"#), Inbound::Other);
        assert_eq!(parse(b"not json"), Inbound::Other);
    }

    #[test]
    fn text_is_borrowed_from_the_frame_unless_it_has_escapes() {
        let m = br#"{"type":"message","cursor":"00ff-3","data":{"seq":1}}"#;
        assert!(
            matches!(
                parse(m),
                Inbound::Message {
                    cursor: Some(Cow::Borrowed("00ff-3")),
                    ..
                }
            ),
            "{:?}",
            parse(m)
        );
        let escaped = br#"{"type":"close","reason":"id\u006ce"}"#;
        assert_eq!(
            parse(escaped),
            Inbound::Close {
                reason: "idle".into()
            }
        );
    }

    #[test]
    fn poll_answers_are_arrays_of_frames() {
        let body = br#"[{"type":"message","cursor":"c1","data":{"seq":1,"ts":2}},{"type":"reconnect","reason":"poll_timeout","retry_ms":0,"cursor":"c2"}]"#;
        let frames = parse_array(body);
        assert_eq!(frames.len(), 2);
        assert!(matches!(&frames[1], Inbound::Reconnect { cursor: Some(c), .. } if c == "c2"));
    }
}
