//! Asymmetric client tokens against a real gateway: PEM keys
//! (`[auth] public_keys`) and a JWK set served by a small HTTP server in
//! this process (`[auth] jwks_url`). Keys are the test-only fixtures in
//! `tests/fixtures/auth/`.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use parking_lot::Mutex;
use serde_json::{Value, json};
use support::browser::get;
use support::ws::{eventually, metric, raw_handshake, upgrade_request};
use support::{Gateway, SECRET, config};
use tokio::net::TcpListener;

const ISSUER: &str = "https://auth.example/";
const AUDIENCE: &str = "pushgate";

fn fixture_path(name: &str) -> String {
    format!("{}/tests/fixtures/auth/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_path(name)).expect("fixture")
}

fn jwk(name: &str) -> Value {
    serde_json::from_slice(&fixture(&format!("{name}.jwk.json"))).expect("jwk json")
}

fn now() -> u64 {
    pushgate::gateway::Gateway::unix_now()
}

fn claims(extra: Value) -> Value {
    let mut claims = json!({"sub": "kim", "exp": now() + 600, "iss": ISSUER, "aud": AUDIENCE});
    for (k, v) in extra.as_object().expect("object") {
        claims[k] = v.clone();
    }
    claims
}

/// A token signed with the private test key `name` for `alg`.
fn signed(name: &str, alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
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

/// The status each transport answers a client presenting `token`: a
/// WebSocket handshake (101 when accepted), and a poll and an event stream
/// with a bad cursor (400 once the token passed, 401 before).
async fn statuses(gw: &Gateway, token: &str) -> [u16; 3] {
    let ws = raw_handshake(
        gw.addr,
        &upgrade_request("GET", &format!("/ws?token={token}"), &[], &[]),
    )
    .await;
    let bearer = format!("Bearer {token}");
    let poll = get(gw.addr, "/poll?cursor=x", &[("authorization", &bearer)]).await;
    let sse = get(gw.addr, &format!("/sse?token={token}&cursor=x"), &[]).await;
    [ws.status, poll.status.as_u16(), sse.status.as_u16()]
}

const ACCEPTED: [u16; 3] = [101, 400, 400];
const REFUSED: [u16; 3] = [401; 3];

/// A JWK set provider: serves `keys`, counts requests, answers 503 while
/// `down`.
struct Provider {
    addr: SocketAddr,
    keys: Arc<Mutex<Vec<Value>>>,
    hits: Arc<AtomicUsize>,
    down: Arc<AtomicBool>,
}

impl Provider {
    async fn start(keys: Vec<Value>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let keys = Arc::new(Mutex::new(keys));
        let hits = Arc::new(AtomicUsize::new(0));
        let down = Arc::new(AtomicBool::new(false));
        let (k, h, d) = (Arc::clone(&keys), Arc::clone(&hits), Arc::clone(&down));
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (k, h, d) = (Arc::clone(&k), Arc::clone(&h), Arc::clone(&d));
                let service = service_fn(move |_req| {
                    h.fetch_add(1, Ordering::SeqCst);
                    let (status, body) = if d.load(Ordering::SeqCst) {
                        (StatusCode::SERVICE_UNAVAILABLE, "down".to_owned())
                    } else {
                        (StatusCode::OK, json!({"keys": *k.lock()}).to_string())
                    };
                    let mut resp = Response::new(Full::new(Bytes::from(body)));
                    *resp.status_mut() = status;
                    async move { Ok::<_, std::convert::Infallible>(resp) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(tcp), service),
                );
            }
        });
        Self {
            addr,
            keys,
            hits,
            down,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/.well-known/jwks.json", self.addr)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

async fn jwks_gateway(provider: &Provider) -> Gateway {
    let mut c = config();
    c.auth.secret = String::new();
    c.auth.jwks_url = Some(provider.url());
    c.auth.issuer = Some(ISSUER.into());
    c.auth.audience = Some(AUDIENCE.into());
    Gateway::start(c).await
}

async fn pem_gateway() -> Gateway {
    let mut c = config();
    c.auth.public_keys = ["rsa-a", "ec-p256", "ed25519"]
        .iter()
        .map(|name| fixture_path(&format!("{name}.public.pem")))
        .collect();
    c.auth.issuer = Some(ISSUER.into());
    c.auth.audience = Some(AUDIENCE.into());
    Gateway::start(c).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pem_keys_accept_rs256_es256_and_eddsa_on_every_transport_and_hs256_stays() {
    let gw = pem_gateway().await;
    let good = claims(json!({}));
    for (name, alg) in [
        ("rsa-a", Algorithm::RS256),
        ("ec-p256", Algorithm::ES256),
        ("ed25519", Algorithm::EdDSA),
    ] {
        let token = signed(name, alg, None, &good);
        assert_eq!(statuses(&gw, &token).await, ACCEPTED, "{alg:?}");
    }
    let hs256 = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &good,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("signed");
    assert_eq!(statuses(&gw, &hs256).await, ACCEPTED, "HS256");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_asymmetric_tokens_are_refused_401() {
    let gw = pem_gateway().await;
    let rsa = |extra: Value| signed("rsa-a", Algorithm::RS256, None, &claims(extra));
    let hs256_with = |secret: &[u8]| {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims(json!({})),
            &EncodingKey::from_secret(secret),
        )
        .expect("signed")
    };
    let payload = base64_json(&claims(json!({})));
    let cases = [
        (
            "wrong key",
            signed("rsa-b", Algorithm::RS256, None, &claims(json!({}))),
        ),
        ("expired", rsa(json!({"exp": now() - 1}))),
        ("nbf ahead", rsa(json!({"nbf": now() + 600}))),
        ("wrong iss", rsa(json!({"iss": "https://evil.example/"}))),
        ("no iss", rsa(json!({"iss": null}))),
        ("wrong aud", rsa(json!({"aud": "billing"}))),
        ("no aud", rsa(json!({"aud": null}))),
        (
            "HS256 with the RSA public key as secret",
            hs256_with(&fixture("rsa-a.public.pem")),
        ),
        (
            "alg none",
            format!("{}.{payload}.", base64_json(&json!({"alg": "none"}))),
        ),
    ];
    for (name, token) in cases {
        assert_eq!(statuses(&gw, &token).await, REFUSED, "{name}");
    }
}

fn base64_json(value: &Value) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwks_keys_are_picked_by_kid_and_a_rotation_is_picked_up_on_an_unknown_kid() {
    let provider = Provider::start(vec![jwk("rsa-a"), jwk("ec-p256"), jwk("ed25519")]).await;
    let gw = jwks_gateway(&provider).await;
    assert_eq!(provider.hits(), 1, "fetched once at start");
    let good = claims(json!({}));
    for (name, alg) in [
        ("rsa-a", Algorithm::RS256),
        ("ec-p256", Algorithm::ES256),
        ("ed25519", Algorithm::EdDSA),
    ] {
        let token = signed(name, alg, Some(name), &good);
        assert_eq!(statuses(&gw, &token).await, ACCEPTED, "{name}");
    }
    // A kid whose key is RSA, in an ES256 token: refused.
    let swapped = signed("ec-p256", Algorithm::ES256, Some("rsa-a"), &good);
    assert_eq!(statuses(&gw, &swapped).await, REFUSED, "alg swapped");
    // No HS256 without a secret, whatever the MAC key.
    let hs256 = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &good,
        &EncodingKey::from_secret(&fixture("rsa-a.public.pem")),
    )
    .expect("signed");
    assert_eq!(statuses(&gw, &hs256).await, REFUSED, "hs256");
    assert_eq!(provider.hits(), 1, "known kids never fetch");

    // The provider rotates in rsa-b: its first token triggers one refresh.
    provider.keys.lock().push(jwk("rsa-b"));
    let rotated = signed("rsa-b", Algorithm::RS256, Some("rsa-b"), &good);
    assert_eq!(statuses(&gw, &rotated).await, ACCEPTED, "rotated key");
    assert_eq!(provider.hits(), 2, "one refresh for the new kid");

    // Unknown kids now: refused, and rate-limited to no fetch at all.
    for n in 0..5 {
        let token = signed("rsa-a", Algorithm::RS256, Some(&format!("nope-{n}")), &good);
        assert_eq!(statuses(&gw, &token).await, REFUSED, "unknown kid {n}");
    }
    assert_eq!(
        provider.hits(),
        2,
        "unknown kids do not hammer the provider"
    );
}

/// `pushgate_auth_jwks_fetches_total{result}` now. The recorder is the
/// process's, shared by every gateway of this test binary: compare
/// increases, never absolute values.
async fn fetches(gw: &Gateway, result: &str) -> f64 {
    let text = gw.metrics().await;
    let series = format!("pushgate_auth_jwks_fetches_total{{result=\"{result}\"}}");
    metric(&text, &series).unwrap_or_else(|| panic!("no {series} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_keys_keep_working_while_the_provider_is_down() {
    let provider = Provider::start(vec![jwk("rsa-a")]).await;
    let gw = jwks_gateway(&provider).await;
    let failed_before = fetches(&gw, "error").await;
    assert!(
        fetches(&gw, "ok").await >= 1.0,
        "the fetch at start counted"
    );
    provider.down.store(true, Ordering::SeqCst);
    let good = claims(json!({}));
    let unknown = signed("rsa-b", Algorithm::RS256, Some("rsa-b"), &good);
    assert_eq!(statuses(&gw, &unknown).await, REFUSED, "unknown kid");
    assert_eq!(provider.hits(), 2, "the unknown kid asked once and failed");
    assert!(
        fetches(&gw, "error").await > failed_before,
        "the failed fetch is counted"
    );
    let known = signed("rsa-a", Algorithm::RS256, Some("rsa-a"), &good);
    for _ in 0..3 {
        assert_eq!(statuses(&gw, &known).await, ACCEPTED, "last good set kept");
    }
    assert_eq!(provider.hits(), 2, "known kids never fetch, down or not");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_down_at_start_is_retried_and_its_keys_used_once_they_arrive() {
    let provider = Provider::start(vec![jwk("ed25519")]).await;
    provider.down.store(true, Ordering::SeqCst);
    let gw = jwks_gateway(&provider).await;
    let token = signed(
        "ed25519",
        Algorithm::EdDSA,
        Some("ed25519"),
        &claims(json!({})),
    );
    assert_eq!(statuses(&gw, &token).await, REFUSED, "no keys yet");
    provider.down.store(false, Ordering::SeqCst);
    eventually(Duration::from_secs(20), "keys arrive", || async {
        statuses(&gw, &token).await == ACCEPTED
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_public_key_file_stops_the_start_naming_the_key() {
    let cases = [
        ("rsa-a.private.test.pem", "is a private key"),
        ("rsa-a.jwk.json", "is not a PEM public key"),
        ("ec-p384.public.pem", "P-256"),
        ("missing.pem", "cannot read"),
    ];
    for (name, why) in cases {
        let mut c = config();
        c.auth.public_keys = vec![fixture_path("ed25519.public.pem"), fixture_path(name)];
        let err = pushgate::Server::bind(c).await.expect_err(name).to_string();
        assert!(err.starts_with("auth.public_keys[1]: "), "{name}: {err}");
        assert!(err.contains(name) && err.contains(why), "{name}: {err}");
    }
}
