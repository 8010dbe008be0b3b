//! Client tokens (JWT): HS256 with a shared secret, RS256, ES256 and EdDSA
//! with public keys.
//!
//! A client proves its user id with a JWT, claims `sub` = user id and
//! `exp` = expiry in seconds since the epoch, and optionally `nbf` = the
//! second it becomes valid (RFC 7519 §4.1.5), `iss` and `aud`.
//! Verification is pure: the caller passes the current time (and the
//! current JWK set), so tests never read a clock.
//!
//! Which key checks a token is decided by its header alone, and only among
//! keys configured for the header's `alg`:
//!
//! - `HS256`: `[auth] secret`, nothing else;
//! - `RS256`, `ES256`, `EdDSA`: with a `kid` that a JWK set knows, that key
//!   only; otherwise every PEM key of the algorithm (and, without a `kid`,
//!   every JWK of it), the first whose signature matches wins.

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::jwks::Jwks;
use super::keys::PublicKey;
use crate::protocol::{BadUserId, Channel, UserId};

/// Why a token was refused. Every variant maps to `401`; the detail is for
/// the log, never for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not three dot-separated parts with a non-empty header and payload.
    #[error("token is not three dot-separated parts")]
    Malformed,
    /// A part is not unpadded base64url.
    #[error("token part is not valid base64url")]
    BadBase64,
    /// The header or the claims are not a JSON object of the expected shape.
    #[error("token header or claims are not a valid json object")]
    BadJson,
    /// The header's `alg` is missing, or no configured key is for it
    /// (`none`, `HS512`, `RS256` without an RSA key, `HS256` without a
    /// secret, a `kid` whose key is of another algorithm, ...).
    #[error("token algorithm is not one a configured key is for")]
    UnsupportedAlgorithm,
    /// The header's `kid` names no key of the JWK set (nor does a PEM key
    /// of its algorithm match): the set may be stale, so the caller may
    /// refresh it once and try again.
    #[error("token kid {kid:?} names no known key")]
    UnknownKey {
        /// The header's `kid`; `None` when no JWK set has been loaded yet.
        kid: Option<String>,
    },
    /// The signature matches no key of the token's algorithm.
    #[error("token signature does not match")]
    BadSignature,
    /// The token carries an `aud` claim and pushgate names no audience
    /// (`[auth] audience` unset), so the token was meant for another
    /// service (RFC 7519 section 4.1.3).
    #[error("token carries an aud claim, which pushgate does not accept")]
    UnexpectedAudience,
    /// `[auth] audience` is set and the token has no `aud` claim.
    #[error("token has no aud claim")]
    MissingAudience,
    /// `[auth] audience` is set and the token's `aud` (a string or a list
    /// of strings) does not name it.
    #[error("token aud claim does not name this gateway's audience")]
    WrongAudience,
    /// `[auth] issuer` is set and the token has no `iss` claim.
    #[error("token has no iss claim")]
    MissingIssuer,
    /// `[auth] issuer` is set and the token's `iss` is another.
    #[error("token iss claim is not the configured issuer")]
    WrongIssuer,
    /// No `exp` claim (or `exp: null`).
    #[error("token has no exp claim")]
    MissingExpiry,
    /// `exp` is not a non-negative integer (a string, a fraction, ...).
    #[error("token exp claim is not an integer number of seconds")]
    BadExpiry,
    /// `exp` is at or before the current time.
    #[error("token expired at {expires_at} (now {now_secs}, seconds since epoch)")]
    Expired {
        /// The token's `exp`, seconds since the epoch.
        expires_at: u64,
        /// The time of the check, seconds since the epoch.
        now_secs: u64,
    },
    /// `nbf` is not a non-negative integer (a string, a fraction, ...).
    #[error("token nbf claim is not an integer number of seconds")]
    BadNotBefore,
    /// `nbf` is after the current time: the token is not valid yet.
    #[error("token not valid before {not_before} (now {now_secs}, seconds since epoch)")]
    NotYetValid {
        /// The token's `nbf`, seconds since the epoch.
        not_before: u64,
        /// The time of the check, seconds since the epoch.
        now_secs: u64,
    },
    /// No `sub` claim (or `sub: null`).
    #[error("token has no sub claim")]
    MissingSubject,
    /// `sub` is not a JSON string.
    #[error("token sub claim is not a string")]
    SubjectNotString,
    /// `sub` is a string but not a valid user id.
    #[error("token sub claim is not a valid user id: {0}")]
    BadSubject(#[source] BadUserId),
    /// `channels` is not a list of channel names.
    #[error("channels: must be a list of channel names")]
    BadChannels,
    /// The JWT library refused the token for a reason not listed above.
    #[error("token rejected: {0}")]
    Rejected(String),
}

/// A token that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    /// The user the token speaks for (its `sub`).
    pub user: UserId,
    /// The token's `exp`, seconds since the epoch. The connection is closed
    /// with `4004` once the clock reaches it.
    pub expires_at: u64,
    /// The token's `channels` claim: the backend's segments for this user,
    /// joined on connect (empty when absent). Repeats kept once.
    pub channels: Vec<Channel>,
}

/// Checks client tokens against the configured keys.
///
/// Built once at start from `[auth]`; cheap to share behind an `Arc`.
/// There is no leeway on `exp` or `nbf`: a token is valid while
/// `nbf <= now < exp` (`nbf` optional). Tokens
/// are minted by backends with lifetimes of minutes or hours, so a few
/// seconds of clock skew do not matter, and a leeway would only stretch
/// every token past the expiry its issuer asked for.
///
/// An empty secret would make tokens forgeable: [`TokenVerifier::new`]
/// with an empty secret accepts no HS256 token at all.
pub struct TokenVerifier {
    /// `[auth] secret`; `None` when unset (no HS256).
    secret: Option<DecodingKey>,
    /// `[auth] public_keys`, in the configured order.
    pem: Vec<PublicKey>,
    /// `[auth] jwks_url`'s cache, when set.
    jwks: Option<Arc<Jwks>>,
    /// `[auth] issuer`: when set, `iss` must equal it.
    issuer: Option<String>,
    /// `[auth] audience`: when set, `aud` must name it; when unset, a
    /// token with an `aud` is refused.
    audience: Option<String>,
}

impl TokenVerifier {
    /// A verifier for HS256 tokens signed with `secret` (the raw bytes of
    /// `[auth] secret`); an empty secret accepts no HS256 token.
    pub fn new(secret: &[u8]) -> Self {
        Self {
            secret: (!secret.is_empty()).then(|| DecodingKey::from_secret(secret)),
            pem: Vec::new(),
            jwks: None,
            issuer: None,
            audience: None,
        }
    }

    /// Also accepts tokens signed with these public keys (`[auth]
    /// public_keys`), each for its own algorithm.
    pub fn with_public_keys(mut self, keys: Vec<PublicKey>) -> Self {
        self.pem = keys;
        self
    }

    /// Also accepts tokens signed with the keys of this JWK set
    /// (`[auth] jwks_url`), as the set is at each check.
    pub fn with_jwks(mut self, jwks: Arc<Jwks>) -> Self {
        self.jwks = Some(jwks);
        self
    }

    /// Requires `iss` to equal `issuer` (`[auth] issuer`), when given.
    pub fn with_issuer(mut self, issuer: Option<String>) -> Self {
        self.issuer = issuer;
        self
    }

    /// Requires `aud` to name `audience` (`[auth] audience`), when given.
    pub fn with_audience(mut self, audience: Option<String>) -> Self {
        self.audience = audience;
        self
    }

    /// Verifies `token` at time `now_secs` (seconds since the epoch) with
    /// the keys held now; never touches the network.
    ///
    /// Order: shape, header `alg` and `kid`, signature, then claims.
    /// Claims are only read once the signature matches.
    pub fn verify(&self, token: &str, now_secs: u64) -> Result<VerifiedToken, TokenError> {
        let jwks = self.jwks.as_ref().map(|jwks| jwks.keys());
        self.verify_with(token, now_secs, jwks.as_deref().map(Vec::as_slice))
    }

    /// [`TokenVerifier::verify`] with `jwks` as the JWK set's keys (`None`
    /// when no `jwks_url` is configured).
    fn verify_with(
        &self,
        token: &str,
        now_secs: u64,
        jwks: Option<&[PublicKey]>,
    ) -> Result<VerifiedToken, TokenError> {
        let header = read_header(encoded_header(token)?)?;
        // Claims stay an untyped JSON object so each problem gets its own
        // error rather than one serde message (and an array is refused).
        let mut claims = self.check_signature(token, &header, jwks)?;
        let expires_at = check_expiry(take_claim(&mut claims, "exp"), now_secs)?;
        check_not_before(take_claim(&mut claims, "nbf"), now_secs)?;
        check_issuer(take_claim(&mut claims, "iss"), self.issuer.as_deref())?;
        check_audience(take_claim(&mut claims, "aud"), self.audience.as_deref())?;
        let user = check_subject(take_claim(&mut claims, "sub"))?;
        let channels = check_channels(take_claim(&mut claims, "channels"))?;
        Ok(VerifiedToken {
            user,
            expires_at,
            channels,
        })
    }

    /// [`TokenVerifier::verify`], and when the token names a key the JWK
    /// set does not hold, one refresh of the set (rate-limited and bounded
    /// by a timeout, see [`Jwks::refresh_for_unknown_kid`]) and a second
    /// try. The only check that may wait on the network.
    pub async fn verify_fresh(
        &self,
        token: &str,
        now_secs: u64,
    ) -> Result<VerifiedToken, TokenError> {
        match (self.verify(token, now_secs), &self.jwks) {
            (Err(unknown @ TokenError::UnknownKey { .. }), Some(jwks)) => {
                // Boxed: rare, and unboxed its fetch would size every
                // connection's front-door task (about 0.5 KiB: probed,
                // this future 672 -> 168 bytes).
                if Box::pin(jwks.refresh_for_unknown_kid()).await {
                    self.verify(token, now_secs)
                } else {
                    Err(unknown)
                }
            }
            (verified, _) => verified,
        }
    }

    /// The claims of `token` once a key of its algorithm verifies its
    /// signature.
    fn check_signature(
        &self,
        token: &str,
        header: &RawHeader,
        jwks: Option<&[PublicKey]>,
    ) -> Result<Map<String, Value>, TokenError> {
        let alg = header.alg;
        if alg == Algorithm::HS256 {
            let secret = self
                .secret
                .as_ref()
                .ok_or(TokenError::UnsupportedAlgorithm)?;
            return decode(token, secret, alg);
        }
        let kid = header.kid.as_deref();
        let named: Vec<&PublicKey> = match (kid, jwks) {
            (Some(kid), Some(keys)) => keys
                .iter()
                .filter(|k| k.kid.as_deref() == Some(kid))
                .collect(),
            _ => Vec::new(),
        };
        let candidates: Vec<&PublicKey> = if named.is_empty() {
            let unnamed = jwks.filter(|_| kid.is_none()).unwrap_or_default();
            self.pem
                .iter()
                .chain(unnamed)
                .filter(|k| k.alg == alg)
                .collect()
        } else {
            // The key the token names decides: another algorithm's key
            // is never tried with this one.
            named.into_iter().filter(|k| k.alg == alg).collect()
        };
        let unknown = || TokenError::UnknownKey {
            kid: header.kid.clone(),
        };
        let stale = jwks.is_some()
            && match kid {
                Some(kid) => !jwks
                    .unwrap_or_default()
                    .iter()
                    .any(|k| k.kid.as_deref() == Some(kid)),
                None => jwks.is_none_or(<[PublicKey]>::is_empty),
            };
        if candidates.is_empty() {
            return Err(if stale {
                unknown()
            } else {
                TokenError::UnsupportedAlgorithm
            });
        }
        for key in candidates {
            match decode(token, &key.key, alg) {
                Err(TokenError::BadSignature) => continue,
                decoded => return decoded,
            }
        }
        Err(if stale && kid.is_some() {
            unknown()
        } else {
            TokenError::BadSignature
        })
    }
}

impl fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenVerifier")
            .field("secret", &self.secret.as_ref().map(|_| "[redacted]"))
            .field("public_keys", &self.pem)
            .field("jwks", &self.jwks)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

/// Verifies `token`'s signature with `key` for `alg` and returns its claims.
fn decode(
    token: &str,
    key: &DecodingKey,
    alg: Algorithm,
) -> Result<Map<String, Value>, TokenError> {
    jsonwebtoken::decode::<Map<String, Value>>(token, key, &library_validation(alg))
        .map(|data| data.claims)
        .map_err(|err| from_library_error(err.into_kind()))
}

/// Mints a token for `user` that expires at `expires_at` (seconds since the
/// epoch), signed HS256 with `secret`. Used by `pushgate token <uid>`.
///
/// Infallible: HMAC takes a key of any length and the claims are a fixed
/// struct of a string and an integer, so neither signing nor serializing
/// can fail.
///
/// # Panics
///
/// Only if `jsonwebtoken` has no crypto provider (a build misconfiguration:
/// the `rust_crypto` feature is off), which it reports by panicking itself.
pub fn mint(secret: &[u8], user: &UserId, expires_at: u64) -> String {
    mint_with_channels(secret, user, expires_at, &[])
}

/// [`mint`] with a `channels` claim (left out when empty): the segments
/// the user's connections join (`pushgate token <uid> --channel vip`).
pub fn mint_with_channels(
    secret: &[u8],
    user: &UserId,
    expires_at: u64,
    channels: &[Channel],
) -> String {
    let channels: Vec<&str> = channels.iter().map(Channel::as_str).collect();
    let claims = MintClaims {
        sub: user.as_str(),
        exp: expires_at,
        channels,
    };
    let key = EncodingKey::from_secret(secret);
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key)
        .expect("HS256 signing of {sub, exp} cannot fail")
}

/// Extracts the token from an `Authorization` header value of the form
/// `Bearer <token>`: the scheme is ASCII case-insensitive, spaces around the
/// token are ignored. `None` for another scheme or an empty token.
pub fn bearer(header_value: &str) -> Option<&str> {
    let (scheme, rest) = header_value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim();
    (!token.is_empty()).then_some(token)
}

/// The claims pushgate writes.
#[derive(Serialize)]
struct MintClaims<'a> {
    sub: &'a str,
    exp: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    channels: Vec<&'a str>,
}

/// The part of the header read before the library sees the token.
#[derive(Deserialize)]
struct HeaderJson {
    #[serde(default)]
    alg: Option<String>,
    #[serde(default)]
    kid: Option<Value>,
}

/// The header fields that choose the key.
struct RawHeader {
    alg: Algorithm,
    kid: Option<String>,
}

/// The algorithms pushgate accepts, by their exact `alg` spelling.
const ACCEPTED_ALGS: [(&str, Algorithm); 4] = [
    ("HS256", Algorithm::HS256),
    ("RS256", Algorithm::RS256),
    ("ES256", Algorithm::ES256),
    ("EdDSA", Algorithm::EdDSA),
];

/// jsonwebtoken checks `alg` and the signature; every claim is checked
/// here, with the time passed in (the library's own `exp` check reads the
/// system clock).
fn library_validation(alg: Algorithm) -> Validation {
    let mut validation = Validation::new(alg);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.leeway = 0;
    validation
}

/// The first part of a `header.payload.signature` token.
fn encoded_header(token: &str) -> Result<&str, TokenError> {
    let mut parts = token.split('.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(header), Some(payload), Some(_), None)
            if !header.is_empty() && !payload.is_empty() =>
        {
            Ok(header)
        }
        _ => Err(TokenError::Malformed),
    }
}

/// Reads `alg` and `kid`, refusing any `alg` but the four accepted before
/// the library sees the token, so `none` and foreign algorithms get their
/// own error rather than a JSON one (jsonwebtoken has no `none` variant).
/// A `kid` that is not a string names no key.
fn read_header(encoded_header: &str) -> Result<RawHeader, TokenError> {
    let json = URL_SAFE_NO_PAD
        .decode(encoded_header)
        .map_err(|_| TokenError::BadBase64)?;
    let header: HeaderJson = serde_json::from_slice(&json).map_err(|_| TokenError::BadJson)?;
    let alg = ACCEPTED_ALGS
        .iter()
        .find(|(name, _)| header.alg.as_deref() == Some(*name))
        .map(|(_, alg)| *alg)
        .ok_or(TokenError::UnsupportedAlgorithm)?;
    let kid = match header.kid {
        None | Some(Value::Null) => None,
        Some(Value::String(kid)) => Some(kid),
        Some(_) => return Err(TokenError::BadJson),
    };
    Ok(RawHeader { alg, kid })
}

fn from_library_error(kind: ErrorKind) -> TokenError {
    match kind {
        ErrorKind::InvalidToken => TokenError::Malformed,
        ErrorKind::Base64(_) => TokenError::BadBase64,
        ErrorKind::Json(_) | ErrorKind::Utf8(_) => TokenError::BadJson,
        ErrorKind::InvalidSignature => TokenError::BadSignature,
        ErrorKind::InvalidAlgorithm
        | ErrorKind::MissingAlgorithm
        | ErrorKind::UnsupportedAlgorithm => TokenError::UnsupportedAlgorithm,
        ErrorKind::InvalidAudience => TokenError::UnexpectedAudience,
        other => TokenError::Rejected(format!("{other:?}")),
    }
}

/// Removes a claim, treating `null` as absent.
fn take_claim(claims: &mut Map<String, Value>, name: &str) -> Option<Value> {
    claims.remove(name).filter(|value| !value.is_null())
}

fn check_expiry(exp: Option<Value>, now_secs: u64) -> Result<u64, TokenError> {
    let expires_at = exp
        .ok_or(TokenError::MissingExpiry)?
        .as_u64()
        .ok_or(TokenError::BadExpiry)?;
    if expires_at <= now_secs {
        return Err(TokenError::Expired {
            expires_at,
            now_secs,
        });
    }
    Ok(expires_at)
}

/// RFC 7519 §4.1.5: the token must not be accepted before its `nbf`.
fn check_not_before(nbf: Option<Value>, now_secs: u64) -> Result<(), TokenError> {
    let Some(nbf) = nbf else {
        return Ok(());
    };
    let not_before = nbf.as_u64().ok_or(TokenError::BadNotBefore)?;
    if not_before > now_secs {
        return Err(TokenError::NotYetValid {
            not_before,
            now_secs,
        });
    }
    Ok(())
}

/// `iss` must equal the configured issuer, when one is; otherwise it is
/// not read.
fn check_issuer(iss: Option<Value>, issuer: Option<&str>) -> Result<(), TokenError> {
    let Some(issuer) = issuer else {
        return Ok(());
    };
    match iss.ok_or(TokenError::MissingIssuer)? {
        Value::String(iss) if iss == issuer => Ok(()),
        _ => Err(TokenError::WrongIssuer),
    }
}

/// RFC 7519 §4.1.3: `aud` is a string or a list of strings, and a token
/// is refused unless it names the configured audience. Without one, a
/// token that names any audience was meant for another service.
fn check_audience(aud: Option<Value>, audience: Option<&str>) -> Result<(), TokenError> {
    let (aud, audience) = match (aud, audience) {
        (None, None) => return Ok(()),
        (Some(_), None) => return Err(TokenError::UnexpectedAudience),
        (None, Some(_)) => return Err(TokenError::MissingAudience),
        (Some(aud), Some(audience)) => (aud, audience),
    };
    let names_it = match aud {
        Value::String(one) => one == audience,
        Value::Array(many) => many.iter().any(|a| a.as_str() == Some(audience)),
        _ => false,
    };
    if names_it {
        Ok(())
    } else {
        Err(TokenError::WrongAudience)
    }
}

fn check_subject(sub: Option<Value>) -> Result<UserId, TokenError> {
    match sub.ok_or(TokenError::MissingSubject)? {
        Value::String(raw) => UserId::parse(&raw).map_err(TokenError::BadSubject),
        _ => Err(TokenError::SubjectNotString),
    }
}

/// The `channels` claim: absent, or a list of channel names (repeats kept
/// once). The connect proxy's `channels` answer is read the same way.
pub(crate) fn check_channels(claim: Option<Value>) -> Result<Vec<Channel>, TokenError> {
    let Some(claim) = claim else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = claim else {
        return Err(TokenError::BadChannels);
    };
    let mut channels: Vec<Channel> = Vec::with_capacity(items.len());
    for item in items {
        let channel = item
            .as_str()
            .and_then(|name| Channel::parse(name).ok())
            .ok_or(TokenError::BadChannels)?;
        if !channels.contains(&channel) {
            channels.push(channel);
        }
    }
    Ok(channels)
}

#[cfg(test)]
mod tests {
    use super::TokenError as E;
    use super::*;
    use serde_json::json;

    const SECRET: &[u8] = b"test-secret-that-is-long-enough!";
    const NOW: u64 = 1_700_000_000;

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn b64_json(value: Value) -> String {
        b64(value.to_string().as_bytes())
    }

    /// Appends an HS256 MAC of `message` (`header.payload` text), so crafted
    /// tokens carry a MAC that matches the test secret.
    fn with_mac(message: &str) -> String {
        let key = EncodingKey::from_secret(SECRET);
        let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256)
            .expect("hmac signing");
        format!("{message}.{signature}")
    }

    fn signed(header: Value, claims: Value) -> String {
        with_mac(&format!("{}.{}", b64_json(header), b64_json(claims)))
    }

    fn hs256(claims: Value) -> String {
        signed(json!({"alg": "HS256", "typ": "JWT"}), claims)
    }

    fn good_claims() -> Value {
        json!({"sub": "alice", "exp": NOW + 60})
    }

    fn verify(token: &str) -> Result<VerifiedToken, TokenError> {
        TokenVerifier::new(SECRET).verify(token, NOW)
    }

    #[test]
    fn minted_token_is_accepted_with_its_user_and_expiry() {
        let user = UserId::parse("user:42@shop").expect("valid id");
        let token = mint(SECRET, &user, NOW + 3600);
        let verified = verify(&token).expect("accepted");
        assert_eq!(verified.user, user);
        assert_eq!(verified.expires_at, NOW + 3600);
    }

    #[test]
    fn token_is_valid_until_its_exp_second() {
        let token = hs256(json!({"sub": "alice", "exp": NOW + 1}));
        assert_eq!(verify(&token).map(|v| v.expires_at), Ok(NOW + 1));
    }

    #[test]
    fn badly_shaped_or_encoded_tokens_are_refused() {
        let header = b64(br#"{"alg":"HS256"}"#);
        let claims = b64_json(good_claims());
        let valid = hs256(good_claims());
        let (message, _) = valid.rsplit_once('.').expect("three parts");
        let dup_exp = br#"{"sub":"alice","exp":1,"exp":1800000000}"#;
        let cases: &[(&str, String, E)] = &[
            ("empty", String::new(), E::Malformed),
            ("two parts", message.to_owned(), E::Malformed),
            ("four parts", format!("{valid}.x"), E::Malformed),
            ("empty header", format!(".{claims}.sig"), E::Malformed),
            ("empty payload", format!("{header}..sig"), E::Malformed),
            (
                "header not base64",
                format!("%%%.{claims}.sig"),
                E::BadBase64,
            ),
            ("mac not base64", format!("{message}.%%%"), E::BadBase64),
            (
                "claims not base64",
                with_mac(&format!("{header}.%%%")),
                E::BadBase64,
            ),
            (
                "header not json",
                format!("{}.{claims}.sig", b64(b"{")),
                E::BadJson,
            ),
            (
                "claims not json",
                with_mac(&format!("{header}.{}", b64(b"{"))),
                E::BadJson,
            ),
            ("claims an array", hs256(json!([1, 2])), E::BadJson),
            ("claims a string", hs256(json!("alice")), E::BadJson),
            (
                "duplicate exp",
                with_mac(&format!("{header}.{}", b64(dup_exp))),
                E::BadJson,
            ),
        ];
        for (name, token, want) in cases {
            assert_eq!(verify(token), Err(want.clone()), "{name}: {token}");
        }
    }

    #[test]
    fn any_algorithm_but_hs256_is_refused() {
        let claims = b64_json(good_claims());
        let alg_none = format!("{}.{claims}.", b64_json(json!({"alg": "none"})));
        assert_eq!(verify(&alg_none), Err(E::UnsupportedAlgorithm));
        // Each of these carries a valid HMAC made with the secret: an
        // RS256 header must not turn the secret into an "RSA public key".
        let headers = [
            json!({"typ": "JWT"}),
            json!({"alg": null}),
            json!({"alg": "RS256"}),
            json!({"alg": "HS512"}),
            json!({"alg": "hs256"}),
            json!({"alg": "NONE"}),
        ];
        for header in headers {
            let token = signed(header.clone(), good_claims());
            assert_eq!(verify(&token), Err(E::UnsupportedAlgorithm), "{header}");
        }
    }

    #[test]
    fn tokens_not_signed_with_the_secret_are_refused() {
        let valid = hs256(good_claims());
        let (message, mac) = valid.rsplit_once('.').expect("three parts");
        let (header, _) = message.split_once('.').expect("two parts");
        let mallory = b64_json(json!({"sub": "mallory", "exp": NOW + 60}));
        let user = UserId::parse("alice").expect("valid id");
        let cases = [
            ("other secret", mint(b"another-secret", &user, NOW + 60)),
            ("mac stripped", format!("{message}.")),
            ("claims swapped", format!("{header}.{mallory}.{mac}")),
        ];
        for (name, token) in cases {
            assert_eq!(verify(&token), Err(E::BadSignature), "{name}");
        }
    }

    #[test]
    fn each_bad_claim_is_refused_with_its_own_error() {
        let expired = |expires_at| E::Expired {
            expires_at,
            now_secs: NOW,
        };
        let cases = [
            (json!({"sub": "alice"}), E::MissingExpiry),
            (json!({"sub": "alice", "exp": null}), E::MissingExpiry),
            (json!({"sub": "alice", "exp": "1800000000"}), E::BadExpiry),
            (json!({"sub": "alice", "exp": 1.8e9}), E::BadExpiry),
            (json!({"sub": "alice", "exp": -1}), E::BadExpiry),
            (json!({"sub": "alice", "exp": NOW - 1}), expired(NOW - 1)),
            (json!({"sub": "alice", "exp": NOW}), expired(NOW)),
            (json!({"exp": NOW + 60}), E::MissingSubject),
            (json!({"sub": null, "exp": NOW + 60}), E::MissingSubject),
            (json!({"sub": 42, "exp": NOW + 60}), E::SubjectNotString),
            (
                json!({"sub": "", "exp": NOW + 60}),
                E::BadSubject(BadUserId::Empty),
            ),
            (
                json!({"sub": "al ice", "exp": NOW + 60}),
                E::BadSubject(BadUserId::BadCharacter),
            ),
            (
                json!({"sub": "alice", "exp": NOW + 60, "aud": "billing"}),
                E::UnexpectedAudience,
            ),
            (
                json!({"sub": "alice", "exp": NOW + 60, "channels": "vip"}),
                E::BadChannels,
            ),
            (
                json!({"sub": "alice", "exp": NOW + 60, "channels": ["vip", ""]}),
                E::BadChannels,
            ),
            (
                json!({"sub": "alice", "exp": NOW + 60, "channels": ["a b"]}),
                E::BadChannels,
            ),
            (
                json!({"sub": "alice", "exp": NOW + 60, "channels": [7]}),
                E::BadChannels,
            ),
        ];
        for (claims, want) in cases {
            assert_eq!(verify(&hs256(claims.clone())), Err(want), "{claims}");
        }
    }

    #[test]
    fn the_channels_claim_is_read_and_minted() {
        let alice = UserId::parse("alice").expect("valid");
        let vip = Channel::parse("vip").expect("valid");
        let berlin = Channel::parse("city:berlin").expect("valid");
        let token = mint_with_channels(SECRET, &alice, NOW + 60, &[vip.clone(), berlin.clone()]);
        let verified = verify(&token).expect("valid");
        assert_eq!(verified.channels, [vip.clone(), berlin]);
        assert!(
            verify(&mint(SECRET, &alice, NOW + 60))
                .expect("valid")
                .channels
                .is_empty()
        );
        let twice = hs256(json!({"sub": "alice", "exp": NOW + 60, "channels": ["vip", "vip"]}));
        assert_eq!(verify(&twice).expect("valid").channels, [vip]);
        let null = hs256(json!({"sub": "alice", "exp": NOW + 60, "channels": null}));
        assert!(verify(&null).expect("valid").channels.is_empty());
    }

    #[test]
    fn a_token_is_refused_before_its_nbf_and_accepted_from_it() {
        let not_yet = |not_before| E::NotYetValid {
            not_before,
            now_secs: NOW,
        };
        let with_nbf = |nbf: Value| hs256(json!({"sub": "alice", "exp": NOW + 60, "nbf": nbf}));
        let cases = [
            (json!(NOW + 1), Err(not_yet(NOW + 1))),
            (json!(u64::MAX), Err(not_yet(u64::MAX))),
            (json!(NOW), Ok(NOW + 60)),
            (json!(NOW - 30), Ok(NOW + 60)),
            (json!(0), Ok(NOW + 60)),
            (Value::Null, Ok(NOW + 60)),
            (json!("1700000000"), Err(E::BadNotBefore)),
            (json!(1.7e9), Err(E::BadNotBefore)),
            (json!(-1), Err(E::BadNotBefore)),
            // jsonwebtoken refuses this shape itself, as malformed JSON.
            (json!([NOW]), Err(E::BadJson)),
        ];
        for (nbf, want) in cases {
            let got = verify(&with_nbf(nbf.clone())).map(|v| v.expires_at);
            assert_eq!(got, want, "nbf {nbf}");
        }
    }

    /// Test-only keys, committed under `tests/fixtures/auth/`.
    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/fixtures/auth/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
    }

    fn public(name: &str) -> PublicKey {
        crate::auth::keys::from_pem(&fixture(&format!("{name}.public.pem"))).expect("pem")
    }

    /// `public(name)` as a JWK set would give it, with `kid`.
    fn jwk(name: &str, kid: &str) -> PublicKey {
        PublicKey {
            kid: Some(kid.to_owned()),
            ..public(name)
        }
    }

    /// A token signed with the private key `name` (`rsa-a`, `ec-p256`,
    /// `ed25519`, ...) for `alg`, with an optional `kid`.
    fn asym(name: &str, alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
        let pem = fixture(&format!("{name}.private.test.pem"));
        let key = match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem),
            Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
            _ => EncodingKey::from_ed_pem(&pem),
        }
        .expect("private key");
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &key).expect("signed")
    }

    fn pem_verifier() -> TokenVerifier {
        TokenVerifier::new(SECRET).with_public_keys(vec![
            public("rsa-a"),
            public("ec-p256"),
            public("ed25519"),
        ])
    }

    #[test]
    fn each_public_key_accepts_its_own_algorithm_only() {
        let verifier = pem_verifier();
        let claims = good_claims();
        for (name, alg) in [
            ("rsa-a", Algorithm::RS256),
            ("ec-p256", Algorithm::ES256),
            ("ed25519", Algorithm::EdDSA),
        ] {
            let token = asym(name, alg, None, &claims);
            assert_eq!(
                verifier.verify(&token, NOW).map(|v| v.user.to_string()),
                Ok("alice".to_owned()),
                "{name}"
            );
            // A verifier without that family's key has no key for the
            // algorithm at all.
            let others = TokenVerifier::new(SECRET).with_public_keys(
                pem_verifier()
                    .pem
                    .into_iter()
                    .filter(|k| k.alg != alg)
                    .collect(),
            );
            assert_eq!(
                others.verify(&token, NOW),
                Err(E::UnsupportedAlgorithm),
                "{name}"
            );
        }
        assert_eq!(
            verify(&hs256(claims.clone())).map(|v| v.expires_at),
            Ok(NOW + 60)
        );
        let other_rsa = asym("rsa-b", Algorithm::RS256, None, &claims);
        assert_eq!(verifier.verify(&other_rsa, NOW), Err(E::BadSignature));
    }

    #[test]
    fn a_public_key_is_never_an_hmac_secret() {
        // The classic confusion: HS256 with the RSA public key's PEM bytes
        // as the secret. Without a secret there is no HS256 at all; with
        // one, only the secret is tried.
        let pem = fixture("rsa-a.public.pem");
        let forged = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &good_claims(),
            &EncodingKey::from_secret(&pem),
        )
        .expect("signed");
        let no_secret = TokenVerifier::new(b"").with_public_keys(vec![public("rsa-a")]);
        assert_eq!(no_secret.verify(&forged, NOW), Err(E::UnsupportedAlgorithm));
        assert_eq!(pem_verifier().verify(&forged, NOW), Err(E::BadSignature));
        let claims = b64_json(good_claims());
        let alg_none = format!("{}.{claims}.", b64_json(json!({"alg": "none"})));
        assert_eq!(
            no_secret.verify(&alg_none, NOW),
            Err(E::UnsupportedAlgorithm)
        );
    }

    #[test]
    fn a_kid_picks_its_jwk_and_an_unknown_kid_asks_for_a_refresh() {
        let verifier = TokenVerifier::new(b"");
        let set = [jwk("rsa-a", "a"), jwk("ec-p256", "e"), jwk("rsa-b", "b")];
        let claims = good_claims();
        let check = |token: &str| verifier.verify_with(token, NOW, Some(&set)).map(|_| ());
        let unknown = |kid: &str| E::UnknownKey {
            kid: Some(kid.to_owned()),
        };
        let cases = [
            (
                "kid a",
                asym("rsa-a", Algorithm::RS256, Some("a"), &claims),
                Ok(()),
            ),
            (
                "kid b",
                asym("rsa-b", Algorithm::RS256, Some("b"), &claims),
                Ok(()),
            ),
            (
                "kid e",
                asym("ec-p256", Algorithm::ES256, Some("e"), &claims),
                Ok(()),
            ),
            (
                "no kid: every key of the algorithm",
                asym("rsa-b", Algorithm::RS256, None, &claims),
                Ok(()),
            ),
            (
                "signed by b, names a",
                asym("rsa-b", Algorithm::RS256, Some("a"), &claims),
                Err(E::BadSignature),
            ),
            (
                "names an rsa key, says ES256",
                asym("ec-p256", Algorithm::ES256, Some("a"), &claims),
                Err(E::UnsupportedAlgorithm),
            ),
            (
                "unknown kid",
                asym("rsa-a", Algorithm::RS256, Some("z"), &claims),
                Err(unknown("z")),
            ),
            (
                "no key of the algorithm",
                asym("ed25519", Algorithm::EdDSA, None, &claims),
                Err(E::UnsupportedAlgorithm),
            ),
        ];
        for (name, token, want) in cases {
            assert_eq!(check(&token), want, "{name}");
        }
        // Before the first fetch, every asymmetric token waits for keys.
        let token = asym("rsa-a", Algorithm::RS256, None, &claims);
        assert_eq!(
            verifier.verify_with(&token, NOW, Some(&[])),
            Err(E::UnknownKey { kid: None })
        );
        // A PEM key still verifies a token whose kid the set lacks.
        let with_pem = TokenVerifier::new(b"").with_public_keys(vec![public("ed25519")]);
        let token = asym("ed25519", Algorithm::EdDSA, Some("pem"), &claims);
        assert!(with_pem.verify_with(&token, NOW, Some(&set)).is_ok());
    }

    #[test]
    fn issuer_and_audience_are_checked_when_configured() {
        let strict = TokenVerifier::new(SECRET)
            .with_issuer(Some("https://auth.example".into()))
            .with_audience(Some("pushgate".into()));
        let base = |extra: Value| {
            let mut claims = good_claims();
            for (k, v) in extra.as_object().expect("object") {
                claims[k] = v.clone();
            }
            hs256(claims)
        };
        let iss = "https://auth.example";
        let cases = [
            (json!({"iss": iss, "aud": "pushgate"}), Ok(())),
            (json!({"iss": iss, "aud": ["other", "pushgate"]}), Ok(())),
            (json!({"aud": "pushgate"}), Err(E::MissingIssuer)),
            (
                json!({"iss": "https://evil", "aud": "pushgate"}),
                Err(E::WrongIssuer),
            ),
            (json!({"iss": 7, "aud": "pushgate"}), Err(E::WrongIssuer)),
            (json!({"iss": iss}), Err(E::MissingAudience)),
            (json!({"iss": iss, "aud": "billing"}), Err(E::WrongAudience)),
            (
                json!({"iss": iss, "aud": ["billing"]}),
                Err(E::WrongAudience),
            ),
            (json!({"iss": iss, "aud": 7}), Err(E::WrongAudience)),
        ];
        for (extra, want) in cases {
            assert_eq!(
                strict.verify(&base(extra.clone()), NOW).map(|_| ()),
                want,
                "{extra}"
            );
        }
        // Unconfigured: iss is not read, an aud is refused as before.
        assert!(verify(&base(json!({"iss": "anyone"}))).is_ok());
        assert_eq!(
            verify(&base(json!({"aud": "pushgate"}))),
            Err(E::UnexpectedAudience)
        );
    }

    #[test]
    fn secret_is_absent_from_debug_output() {
        let debug = format!("{:?}", TokenVerifier::new(SECRET));
        assert!(debug.contains("[redacted]"), "{debug}");
        let secret = std::str::from_utf8(SECRET).expect("ascii");
        assert!(!debug.contains(secret), "{debug}");
        assert!(!debug.contains(&format!("{SECRET:?}")), "{debug}");
    }

    #[test]
    fn bearer_extracts_the_token_from_an_authorization_value() {
        let cases: &[(&str, Option<&str>)] = &[
            ("Bearer abc.def.ghi", Some("abc.def.ghi")),
            ("bearer abc", Some("abc")),
            ("BEARER abc", Some("abc")),
            ("  Bearer    abc  ", Some("abc")),
            ("Bearer", None),
            ("Bearer ", None),
            ("Bearer    ", None),
            ("Basic abc", None),
            ("Bearerabc", None),
            ("abc", None),
            ("", None),
        ];
        for (value, want) in cases {
            assert_eq!(bearer(value), *want, "{value:?}");
        }
    }
}
