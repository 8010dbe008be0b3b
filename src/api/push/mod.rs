//! `POST /push`: the backend's one write. The handler checks the key, the
//! type, the size and the rate, has the body parsed ([`parse`], pure) and
//! publishes it whole or not at all.

pub mod parse;

use std::fmt;

use hyper::body::Incoming;
use hyper::header;
use hyper::{Request, Response, StatusCode};
use serde::Serialize;
use tracing::{debug, error};

use self::parse::PushRequest;
use super::request::{authorize, is_json, json_bytes_response, read_body};
use crate::bus::{Publish, Published, PushTarget};
use crate::gateway::Gateway;
use crate::history::Position;
use crate::http::view::{Fields, RequestView};
use crate::http::{ApiError, Body};
use crate::metrics::names;

/// `POST /push`: checks the key, the type, the size and the rate, parses,
/// and publishes whole or not at all.
pub(crate) async fn push(gw: &Gateway, req: Request<Incoming>) -> Response<Body> {
    if let Err(err) = admit(gw, &req) {
        return refuse(err);
    }
    let max = gw.config.limits.max_push_bytes;
    match read_body(gw, req.into_body(), max).await {
        Ok(body) => match publish(gw, &body).await {
            Ok(accepted) => accepted.into_response(),
            Err(err) => refuse(err),
        },
        Err(err) => refuse(err),
    }
}

/// What a push's head alone decides, before its body is read: the key,
/// the type, the declared size and the rate (a token is taken). The front
/// door, which reads a push's body itself, asks this first too.
pub(crate) fn admit(gw: &Gateway, req: &impl RequestView) -> Result<(), ApiError> {
    authorize(gw, req)?;
    if !is_json(req.fields().first(&header::CONTENT_TYPE)) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let max = gw.config.limits.max_push_bytes;
    let declared = req
        .fields()
        .first_text(&header::CONTENT_LENGTH)
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max as u64) {
        return Err(ApiError::PayloadTooLarge { max });
    }
    gw.admit_push().map_err(|wait| ApiError::TooManyRequests {
        retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
    })
}

/// An admitted push whose whole body is `body`, parsed and published,
/// whole or not at all: the answer's status and body, or why it was
/// refused (answer that with [`refuse`]).
pub(crate) async fn publish(gw: &Gateway, body: &[u8]) -> Result<Accepted, ApiError> {
    let limits = &gw.config.limits;
    let request = PushRequest::parse(body, limits.max_push_users, limits.max_push_channels)?;
    let idempotent = request.id.is_some();
    let id = request.id.unwrap_or_else(generate_id);
    let kind = match request.target {
        PushTarget::Broadcast => TargetKind::Broadcast,
        PushTarget::Users(_) => TargetKind::Users,
        PushTarget::Channels(_) => TargetKind::Channels,
    };
    let published = gw
        .bus
        .publish(Publish {
            id,
            idempotent,
            target: request.target,
            data: request.data,
        })
        .await?;
    Accepted::new(&published, kind)
}

/// The answer to a push refused with `err`, logged and counted.
pub(crate) fn refuse(err: ApiError) -> Response<Body> {
    debug!(code = err.code(), "push refused");
    metrics::counter!(names::REQUESTS_REFUSED_TOTAL, "code" => err.code()).increment(1);
    err.into_body_response()
}

/// The answer to an accepted push: `202` with its id and what it
/// reached, or `200` for a duplicate. Kept as bytes, so the front door
/// writes it as it is, with no `Response` or JSON tree built per push.
#[derive(Debug)]
pub(crate) struct Accepted {
    /// `202 Accepted`, or `200 OK` for a duplicate.
    pub status: StatusCode,
    /// The JSON body.
    pub body: Vec<u8>,
}

impl Accepted {
    fn new(published: &Published, kind: TargetKind) -> Result<Self, ApiError> {
        let mut body = AcceptedBody {
            channels: None,
            cursor: None,
            duplicate: published.duplicate,
            id: &published.id,
            users: None,
        };
        match kind {
            TargetKind::Broadcast => body.cursor = Some(Shown(&published.cursor)),
            TargetKind::Users => body.users = Some(published.users),
            TargetKind::Channels => body.channels = Some(published.channels),
        }
        let status = if published.duplicate {
            StatusCode::OK
        } else {
            StatusCode::ACCEPTED
        };
        let mut bytes = Vec::with_capacity(96);
        // Strings, numbers and a bool into memory: not expected to fail.
        serde_json::to_writer(&mut bytes, &body).map_err(|err| {
            error!(%err, "could not encode an accepted push's answer");
            ApiError::Internal
        })?;
        Ok(Self {
            status,
            body: bytes,
        })
    }

    /// As a response, for hyper's path.
    pub(crate) fn into_response(self) -> Response<Body> {
        json_bytes_response(self.status, self.body)
    }
}

/// The accepted answer's fields, in the order (by name) the answers have
/// always had; only the one its target decides is present.
#[derive(Serialize)]
struct AcceptedBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    channels: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<Shown<'a, Position>>,
    #[serde(skip_serializing_if = "is_false")]
    duplicate: bool,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    users: Option<usize>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A value serialized as the string it displays as (a cursor), without
/// an intermediate `String`.
struct Shown<'a, T>(&'a T);

impl<T: fmt::Display> Serialize for Shown<'_, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self.0)
    }
}

/// What a push addressed, which decides the answer's field.
#[derive(Debug, Clone, Copy)]
enum TargetKind {
    Broadcast,
    Users,
    Channels,
}

/// A push id for a request that gave none: 128 random bits in hex.
fn generate_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Cursor;
    use serde_json::json;

    #[test]
    fn an_accepted_answer_is_what_its_json_tree_would_write() {
        let cursor = Position::new(vec![Cursor::new(3, 41), Cursor::new(5, 9)]);
        let published = |duplicate| Published {
            id: "a \"quoted\" id".into(),
            cursor: cursor.clone(),
            users: 2,
            channels: 3,
            duplicate,
        };
        let cases = [
            (
                TargetKind::Broadcast,
                json!({ "cursor": cursor.to_string() }),
            ),
            (TargetKind::Users, json!({ "users": 2 })),
            (TargetKind::Channels, json!({ "channels": 3 })),
        ];
        for (kind, field) in cases {
            for duplicate in [false, true] {
                let mut tree = field.clone();
                tree["id"] = "a \"quoted\" id".into();
                if duplicate {
                    tree["duplicate"] = true.into();
                }
                let accepted = Accepted::new(&published(duplicate), kind).expect("encodes");
                assert_eq!(
                    String::from_utf8(accepted.body).expect("utf-8"),
                    tree.to_string()
                );
                let status = if duplicate { 200 } else { 202 };
                assert_eq!(accepted.status.as_u16(), status);
            }
        }
    }

    #[test]
    fn generated_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (generate_id(), generate_id());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
