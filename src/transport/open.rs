//! Opening a browser client, the same for every transport: [`admit`] runs
//! the checks, [`join`] attaches the client to live delivery and arms its
//! deadline.
//!
//! The checks, in order: draining (503), `Origin` against
//! `allowed_origins` (403), the token from `?token=` or `Authorization:
//! Bearer` (401), or `?uid=` when anonymous access is on, or, with
//! neither, the site's connect proxy (401, 403, or 503 when it fails), the
//! channels (400 `bad_channel`, 403 `forbidden_channel`, 400
//! `too_many_channels`), the cursor (400 `bad_cursor`), capacity (503).
//! [`join`] may still refuse: capacity (503 `connection_limit`), or a
//! resume whose history read failed (503 `unavailable`, `Retry-After`
//! spread over `[limits] connection_retry_spread_secs`: the client comes
//! back with the same cursor).

use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};

use tracing::{debug, error};

use crate::auth::proxy::{ClientRequest, ConnectProxy, FORWARDED_HEADERS, Refusal};
use crate::auth::token::bearer;
use crate::bus::{Open, OpenError, Opened};
use crate::gateway::Gateway;
use crate::history::{ConnCursor, Coverage, Position};
use crate::http::Body;
use crate::http::error::ApiError;
use crate::http::view::{self, Fields, RequestView};
use crate::protocol::frame::Frame;
use crate::protocol::{Channel, Transport, UserId};
use std::borrow::Cow;
use std::sync::Arc;

use crate::registry::{Attached, Conn};

/// Where an event stream's browser sends the last cursor it saw.
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Seconds a refused client is asked to wait before trying again.
pub(crate) const RETRY_AFTER_SECS: u64 = 1;

/// A client that passed every check.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    /// Who it is.
    pub user: UserId,
    /// When its token expires (seconds since the epoch); `None` for anonymous.
    pub expires_at: Option<u64>,
    /// Where it resumes from, if it gave a cursor.
    pub cursor: Option<Position>,
    /// The channels its cursor covers.
    pub coverage: Coverage,
    /// The channels it is in: its token's claim, then what it asked for.
    pub channels: Vec<Channel>,
    /// Its token's `channels` claim (what it may join beyond public ones).
    pub claim: Vec<Channel>,
}

/// Why a client is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ClientError {
    /// The gateway is draining.
    #[error("gateway is draining")]
    Draining,
    /// The `Origin` is not in `allowed_origins`.
    #[error("origin not allowed")]
    Origin,
    /// No usable token (and no anonymous `uid`), or the connect proxy
    /// answered `401`.
    #[error("missing, malformed, badly signed or expired token")]
    Token,
    /// The connect proxy answered `403`.
    #[error("the connect proxy refused the client")]
    Refused,
    /// The connect proxy failed, did not answer in time, or had too many
    /// requests in flight.
    #[error("the connect proxy is unavailable")]
    ProxyUnavailable {
        /// Sent as `Retry-After`, in seconds.
        retry_after_secs: u64,
    },
    /// An anonymous `uid` that is not a user id.
    #[error("{0}")]
    UserId(String),
    /// A cursor pushgate could not have issued.
    #[error("cursor is not one pushgate issued")]
    Cursor,
    /// `channels=` holds something that is not a channel name.
    #[error("{0}")]
    BadChannel(String),
    /// A channel asked for that is neither in the token's claim nor public.
    #[error("{0}")]
    ForbiddenChannel(String),
    /// More channels than `[limits] max_channels_per_connection`.
    #[error("{0}")]
    TooManyChannels(String),
    /// `max_connections` reached.
    #[error("connection limit reached")]
    AtCapacity,
    /// The history after the client's cursor could not be read (Redis
    /// failed or did not answer in time). It may still cover the gap, so
    /// the client is asked to come back with the same cursor.
    #[error("message history unavailable")]
    HistoryUnavailable {
        /// Sent as `Retry-After`, in seconds: drawn from `1..=[limits]
        /// connection_retry_spread_secs` so refused clients do not come
        /// back together.
        retry_after_secs: u64,
    },
    /// The bus answered in a way this transport cannot take (a bug).
    #[error("internal error")]
    Internal,
}

impl ClientError {
    /// The JSON error response for this refusal.
    pub(crate) fn into_response(self) -> hyper::Response<Body> {
        let err = match self {
            Self::Draining => ApiError::Unavailable {
                retry_after_secs: RETRY_AFTER_SECS,
                reason: "gateway is draining".into(),
            },
            Self::Origin => ApiError::Forbidden,
            Self::Token => ApiError::Unauthorized,
            Self::Refused => ApiError::Refused,
            Self::ProxyUnavailable { retry_after_secs } => ApiError::Unavailable {
                retry_after_secs,
                reason: "authentication service unavailable".into(),
            },
            Self::UserId(message) => ApiError::BadUserId(message),
            Self::Cursor => ApiError::BadCursor("cursor is not one pushgate issued".into()),
            Self::BadChannel(message) => ApiError::BadChannel(message),
            Self::ForbiddenChannel(message) => ApiError::ForbiddenChannel(message),
            Self::TooManyChannels(message) => ApiError::TooManyChannels(message),
            Self::AtCapacity => ApiError::ConnectionLimit {
                retry_after_secs: RETRY_AFTER_SECS,
            },
            Self::HistoryUnavailable { retry_after_secs } => ApiError::Unavailable {
                retry_after_secs,
                reason: "message history unavailable; retry with the same cursor".into(),
            },
            Self::Internal => ApiError::Internal,
        };
        err.into_body_response()
    }
}

/// Runs every admission check on a client request. Waits on the network
/// only for a token whose `kid` the JWK set does not know (one refresh,
/// rate-limited and bounded, see `auth::jwks`), and for the connect proxy
/// when the client has no token (bounded, see `auth::proxy`).
pub(crate) async fn admit(
    gw: &Gateway,
    req: &impl RequestView,
    transport: Transport,
) -> Result<Client, ClientError> {
    if gw.is_draining() {
        return Err(ClientError::Draining);
    }
    let origin = req
        .fields()
        .first(&header::ORIGIN)
        .map(|v| view::text(v).unwrap_or("\u{0}"));
    if !gw.origins.allows(origin) {
        return Err(ClientError::Origin);
    }
    let query = Query::parse(req.query());
    let (user, expires_at, claim) = authenticate(gw, req, &query, transport).await?;
    let channels = channels(gw, claim.clone(), query.channels.as_deref())?;
    let last_event_id = (transport == Transport::Sse)
        .then(|| req.fields().first_text(&LAST_EVENT_ID))
        .flatten();
    let (cursor, coverage) = match query.cursor.as_deref().or(last_event_id) {
        Some(raw) => {
            let cursor = raw.parse::<ConnCursor>().map_err(|_| ClientError::Cursor)?;
            (
                Some(cursor.resume_position(gw.bus.shards())),
                cursor.coverage,
            )
        }
        None => (None, Coverage::default()),
    };
    if !gw.registry.has_room() {
        return Err(ClientError::AtCapacity);
    }
    Ok(Client {
        user,
        expires_at,
        cursor,
        coverage,
        channels,
        claim,
    })
}

/// A WebSocket's `subscribe` frame for `name`, checked as `channels=` is
/// (its claim or public): the channel to join ([`join_channel`]), once the bus
/// hears it. `Err` is the `error` frame to answer with.
pub(crate) fn subscribe_check(gw: &Gateway, conn: &Conn, name: &str) -> Result<Channel, Frame> {
    let channel = Channel::parse(name)
        .map_err(|err| Frame::channel_error("bad_channel", name, &err.to_string()))?;
    if !conn.claims(&channel) && !gw.public_channels.allows(&channel) {
        return Err(Frame::channel_error(
            "forbidden_channel",
            name,
            "the channel is not in the token's channels claim and not public",
        ));
    }
    Ok(channel)
}

/// Joins `conn` to `channel` (checked by [`subscribe_check`]);
/// `subscribed` is queued by the registry, in order with the channel's
/// messages. `Err` is the `error` frame to answer with.
pub(crate) fn join_channel(gw: &Gateway, conn: &Arc<Conn>, channel: &Channel) -> Result<(), Frame> {
    gw.registry.subscribe(conn, channel).map_err(|err| {
        Frame::channel_error("too_many_channels", channel.as_str(), &err.to_string())
    })
}

/// A WebSocket's `refresh` frame: a fresh token for the connection's own
/// user moves its expiry (the 4004 close) to the new token's. Answers
/// `refreshed`, or an `error` frame (`bad_token`: not a valid token now;
/// `wrong_user`: another user's) leaving the connection as it was. Keys
/// are not fetched for it: a token whose `kid` is not known yet is
/// refused, and the client can reconnect with it.
pub(crate) fn refresh(gw: &Gateway, conn: &Conn, token: &str) -> Frame {
    match gw.tokens.verify(token, Gateway::unix_now()) {
        Err(err) => Frame::error("bad_token", &format!("refresh refused: {err}")),
        Ok(verified) if verified.user != conn.user => Frame::error(
            "wrong_user",
            "refresh refused: the token is for another user",
        ),
        Ok(verified) => {
            conn.refresh_token(verified.expires_at);
            Frame::refreshed(verified.expires_at)
        }
    }
}

/// A WebSocket's `unsubscribe` frame for `name`; `unsubscribed` is queued
/// by the registry, after the channel's last message to this connection.
pub(crate) fn unsubscribe(gw: &Gateway, conn: &Conn, name: &str) -> Result<(), Frame> {
    let channel = Channel::parse(name)
        .map_err(|err| Frame::channel_error("bad_channel", name, &err.to_string()))?;
    gw.registry.unsubscribe(conn, &channel);
    Ok(())
}

/// The channels a client is in: every channel of its token's `claim`,
/// then each one `requested` (`channels=a,b`) that the claim names or
/// `[channels] public` allows. One refused channel refuses the request.
fn channels(
    gw: &Gateway,
    claim: Vec<Channel>,
    requested: Option<&str>,
) -> Result<Vec<Channel>, ClientError> {
    let requested = match requested {
        Some(raw) => Channel::parse_list(raw)
            .map_err(|err| ClientError::BadChannel(format!("channels: {err}")))?,
        None => Vec::new(),
    };
    let mut channels = claim;
    let claimed = channels.len();
    for channel in requested {
        if channels[..claimed].contains(&channel) {
            continue;
        }
        if !gw.public_channels.allows(&channel) {
            return Err(ClientError::ForbiddenChannel(format!(
                "channel {channel:?} is not in the token's channels claim and not public"
            )));
        }
        channels.push(channel);
    }
    let max = gw.config.limits.max_channels_per_connection;
    if channels.len() > max {
        return Err(ClientError::TooManyChannels(format!(
            "{} channels, claim and request together (max {max})",
            channels.len()
        )));
    }
    Ok(channels)
}

/// How an admitted client joined.
#[derive(Debug)]
pub(crate) enum Joined {
    /// Attached for live delivery with its deadline armed (a poll: parked
    /// until its timeout). Missed messages, after a `recover` frame, are
    /// already queued on the connection.
    Live(Attached),
    /// A long-poll with messages to return at once: a `recover` frame and
    /// the missed messages. Nothing was attached.
    Ready(Vec<Frame>),
}

/// Joins an admitted client to live delivery, resuming from its cursor,
/// and arms its deadline: a connection's first ping, or a poll's timeout
/// on its user's session entry.
pub(crate) async fn join(
    gw: &Gateway,
    client: Client,
    transport: Transport,
) -> Result<Joined, ClientError> {
    let user = client.user.clone();
    let opened = gw
        .bus
        .open(Open {
            user: client.user,
            transport,
            expires_at: client.expires_at,
            cursor: client.cursor,
            channels: client.channels,
            coverage: client.coverage,
            now_ms: gw.now_ms(),
        })
        .await
        .map_err(|err| match err {
            OpenError::AtCapacity(_) => ClientError::AtCapacity,
            OpenError::Unavailable => {
                gw.counters.resume_refused(transport);
                ClientError::HistoryUnavailable {
                    retry_after_secs: crate::peers::spread_retry_secs(
                        gw.config.limits.connection_retry_spread_secs,
                    ),
                }
            }
        })?;
    match (opened, transport) {
        (Opened::Attached(attached), Transport::Poll) => {
            let deadline_ms = gw.deadlines.poll_deadline_ms();
            gw.deadlines
                .park_poll(&attached.user, &attached.conn, deadline_ms);
            Ok(Joined::Live(attached))
        }
        (Opened::Attached(attached), _) => {
            gw.deadlines.arm_connection(&attached.conn);
            let conn = &attached.conn;
            debug!(user_id = %conn.user, conn_id = conn.id, transport = transport.as_str(), "connection opened");
            Ok(Joined::Live(attached))
        }
        (Opened::Ready(frames), Transport::Poll) => {
            if let Some(user) = gw.registry.user(&user) {
                gw.deadlines.poll_done(&user);
            }
            Ok(Joined::Ready(frames))
        }
        (Opened::Ready(_), _) => {
            error!(
                transport = transport.as_str(),
                "the bus answered a live transport at once"
            );
            Err(ClientError::Internal)
        }
    }
}

/// [`join`] for a transport that stays connected (WebSocket, SSE).
pub(crate) async fn join_live(
    gw: &Gateway,
    client: Client,
    transport: Transport,
) -> Result<Attached, ClientError> {
    match join(gw, client, transport).await? {
        Joined::Live(attached) => Ok(attached),
        Joined::Ready(_) => Err(ClientError::Internal),
    }
}

/// The client's user, its token's expiry and `channels` claim (none for
/// an anonymous client).
async fn authenticate(
    gw: &Gateway,
    req: &impl RequestView,
    query: &Query<'_>,
    transport: Transport,
) -> Result<(UserId, Option<u64>, Vec<Channel>), ClientError> {
    let header_token = (transport == Transport::Poll)
        .then(|| req.fields().first_text(&header::AUTHORIZATION))
        .flatten()
        .and_then(bearer);
    if let Some(token) = query.token.as_deref().or(header_token) {
        let verified = gw
            .tokens
            .verify_fresh(token, Gateway::unix_now())
            .await
            .map_err(|err| {
                debug!(error = %err, transport = transport.as_str(), "token refused");
                ClientError::Token
            })?;
        return Ok((verified.user, Some(verified.expires_at), verified.channels));
    }
    match (&query.uid, &gw.connect_proxy) {
        (Some(uid), _) if gw.config.auth.anonymous => UserId::parse(uid)
            .map(|user| (user, None, Vec::new()))
            .map_err(|err| ClientError::UserId(err.to_string())),
        (_, Some(proxy)) => ask_proxy(proxy, req, transport).await,
        _ => Err(ClientError::Token),
    }
}

/// The client's user, expiry and channels as the site's connect proxy
/// says.
async fn ask_proxy(
    proxy: &ConnectProxy,
    req: &impl RequestView,
    transport: Transport,
) -> Result<(UserId, Option<u64>, Vec<Channel>), ClientError> {
    // Only the fields the site is told of.
    let mut headers = HeaderMap::new();
    for name in &FORWARDED_HEADERS {
        for value in req.fields().all(name) {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                headers.append(name.clone(), value);
            }
        }
    }
    let client = ClientRequest {
        transport,
        path: req.path(),
        query: req.query().unwrap_or(""),
        headers: &headers,
        remote_addr: req.remote_addr(),
    };
    // Boxed: a network round trip, and unboxed its request would size
    // every connection's front-door task.
    match Box::pin(proxy.identify(&client, Gateway::unix_now())).await {
        Ok(identity) => Ok((identity.user, identity.expires_at, identity.channels)),
        Err(Refusal::Unauthorized) => Err(ClientError::Token),
        Err(Refusal::Forbidden) => Err(ClientError::Refused),
        Err(Refusal::Failed(_) | Refusal::Timeout(_) | Refusal::Saturated(_)) => {
            Err(ClientError::ProxyUnavailable {
                retry_after_secs: proxy.retry_after_secs(),
            })
        }
    }
}

/// The query parameters a client endpoint reads; the last of a repeated
/// parameter wins, unknown ones are ignored. A value with nothing to
/// percent-decode is read where it lies in the query, not copied.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Query<'a> {
    /// `token`
    pub token: Option<Cow<'a, str>>,
    /// `uid` (anonymous mode)
    pub uid: Option<Cow<'a, str>>,
    /// `cursor`
    pub cursor: Option<Cow<'a, str>>,
    /// `channels` (comma-separated names)
    pub channels: Option<Cow<'a, str>>,
}

impl<'a> Query<'a> {
    /// Parses a URL query string (percent-decoded).
    pub(crate) fn parse(query: Option<&'a str>) -> Self {
        let mut out = Self::default();
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let slot = match &*key {
                "token" => &mut out.token,
                "uid" => &mut out.uid,
                "cursor" => &mut out.cursor,
                "channels" => &mut out.channels,
                _ => continue,
            };
            *slot = Some(value);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_reads_known_parameters_percent_decoded() {
        let q = Query::parse(Some("token=a%2Eb&cursor=00-1&x=y&uid=bob%40x"));
        assert_eq!(q.token.as_deref(), Some("a.b"));
        assert_eq!(q.cursor.as_deref(), Some("00-1"));
        assert_eq!(q.uid.as_deref(), Some("bob@x"));
        assert_eq!(Query::parse(None), Query::default());
        assert_eq!(Query::parse(Some("uid=a&uid=b")).uid.as_deref(), Some("b"));
    }
}
