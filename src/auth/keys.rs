//! Public keys for asymmetric client tokens, from PEM files
//! (`[auth] public_keys`) and JWK sets (`[auth] jwks_url`). Pure: bytes in,
//! keys out; reading files and fetching sets happen elsewhere.
//!
//! Each key verifies exactly one algorithm, fixed by its family:
//!
//! | key                 | algorithm |
//! |---------------------|-----------|
//! | RSA (any size)      | `RS256`   |
//! | EC on P-256         | `ES256`   |
//! | Ed25519             | `EdDSA`   |
//!
//! A token is only ever checked with a key of its header's algorithm, so a
//! public key can never be used as an HMAC secret (the classic key
//! confusion), and a JWK set never supplies HMAC keys at all.

use std::fmt;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::Value;

/// Bytes of an uncompressed P-256 point (`0x04 || x || y`).
const P256_POINT_BYTES: usize = 65;
/// Bytes of an Ed25519 public key.
const ED25519_KEY_BYTES: usize = 32;

/// A public key and the one algorithm it verifies.
#[derive(Clone)]
pub struct PublicKey {
    /// `RS256`, `ES256` or `EdDSA`.
    pub(crate) alg: Algorithm,
    /// The JWK `kid`; `None` for PEM keys (and JWKs without one).
    pub(crate) kid: Option<String>,
    pub(crate) key: DecodingKey,
}

impl PublicKey {
    /// The algorithm this key verifies.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// The key id, for keys from a JWK set that name one.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey")
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// Why a PEM file or a JWK set gave no usable key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The PEM holds a private key.
    #[error("is a private key; give its public key instead (openssl pkey -in key.pem -pubout)")]
    PrivateKey,
    /// The PEM holds a certificate rather than a bare public key.
    #[error(
        "is a certificate; give its public key instead (openssl x509 -in cert.pem -pubkey -noout)"
    )]
    Certificate,
    /// No `-----BEGIN PUBLIC KEY-----` (or `RSA PUBLIC KEY`) block.
    #[error("is not a PEM public key (expected a -----BEGIN PUBLIC KEY----- block)")]
    NotPem,
    /// More than one PEM block in one file.
    #[error("holds {0} PEM blocks; give one public key per file")]
    SeveralBlocks(usize),
    /// A public key of no accepted family (or a corrupt one).
    #[error("is not a valid RSA, EC P-256 or Ed25519 public key")]
    Unsupported,
    /// An EC key on another curve than P-256.
    #[error("is an EC key on a curve other than P-256 (only ES256 is accepted)")]
    EcCurve,
    /// A JWK set document that is not `{"keys": [...]}`.
    #[error("jwk set is not a json object with a \"keys\" list")]
    BadJwkSet,
}

/// Reads one PEM public key: RSA (`PUBLIC KEY` or `RSA PUBLIC KEY`), EC
/// P-256 or Ed25519 (`PUBLIC KEY`).
pub fn from_pem(pem: &[u8]) -> Result<PublicKey, KeyError> {
    let text = String::from_utf8_lossy(pem);
    let labels: Vec<&str> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("-----BEGIN "))
        .filter_map(|rest| rest.strip_suffix("-----"))
        .collect();
    match labels.as_slice() {
        [] => return Err(KeyError::NotPem),
        [label] if label.contains("PRIVATE") => return Err(KeyError::PrivateKey),
        [label] if label.contains("CERTIFICATE") => return Err(KeyError::Certificate),
        ["PUBLIC KEY" | "RSA PUBLIC KEY"] => {}
        [_] => return Err(KeyError::NotPem),
        several => return Err(KeyError::SeveralBlocks(several.len())),
    }
    let key = |alg, key| PublicKey {
        alg,
        kid: None,
        key,
    };
    if let Ok(rsa) = DecodingKey::from_rsa_pem(pem) {
        return Ok(key(Algorithm::RS256, rsa));
    }
    if let Ok(ec) = DecodingKey::from_ec_pem(pem) {
        let point = ec.try_get_as_bytes().map_err(|_| KeyError::Unsupported)?;
        if point.len() != P256_POINT_BYTES || point[0] != 0x04 {
            return Err(KeyError::EcCurve);
        }
        return Ok(key(Algorithm::ES256, ec));
    }
    if let Ok(ed) = DecodingKey::from_ed_pem(pem) {
        let bytes = ed.try_get_as_bytes().map_err(|_| KeyError::Unsupported)?;
        if bytes.len() != ED25519_KEY_BYTES {
            return Err(KeyError::Unsupported);
        }
        return Ok(key(Algorithm::EdDSA, ed));
    }
    Err(KeyError::Unsupported)
}

/// The keys of a JWK set document, and why each other key was skipped.
#[derive(Debug, Default)]
pub struct JwkSetKeys {
    /// The signing keys pushgate can use.
    pub keys: Vec<PublicKey>,
    /// Keys left out: their `kid` (if any) and why.
    pub skipped: Vec<(Option<String>, &'static str)>,
}

/// Reads a JWK set (`{"keys": [...]}`, RFC 7517 §5). Keys pushgate cannot
/// or must not use are skipped, not fatal: encryption keys, symmetric
/// (`oct`) keys, other algorithms and curves, keys that do not parse.
pub fn from_jwk_set(json: &[u8]) -> Result<JwkSetKeys, KeyError> {
    #[derive(Deserialize)]
    struct Document {
        keys: Vec<Value>,
    }
    let document: Document = serde_json::from_slice(json).map_err(|_| KeyError::BadJwkSet)?;
    let mut out = JwkSetKeys::default();
    for value in document.keys {
        let kid = value.get("kid").and_then(Value::as_str).map(str::to_owned);
        let result = serde_json::from_value::<Jwk>(value)
            .map_err(|_| "not a valid jwk")
            .and_then(|jwk| from_jwk(&jwk));
        match result {
            Ok(key) => out.keys.push(key),
            Err(why) => out.skipped.push((kid, why)),
        }
    }
    Ok(out)
}

/// One JWK as a key, or why it is not used.
fn from_jwk(jwk: &Jwk) -> Result<PublicKey, &'static str> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return Err("an encryption key (use: enc)");
    }
    let declared = jwk.common.key_algorithm;
    let (alg, expected) = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => (Algorithm::RS256, KeyAlgorithm::RS256),
        AlgorithmParameters::EllipticCurve(params) if params.curve == EllipticCurve::P256 => {
            (Algorithm::ES256, KeyAlgorithm::ES256)
        }
        AlgorithmParameters::OctetKeyPair(params) if params.curve == EllipticCurve::Ed25519 => {
            (Algorithm::EdDSA, KeyAlgorithm::EdDSA)
        }
        AlgorithmParameters::EllipticCurve(_) | AlgorithmParameters::OctetKeyPair(_) => {
            return Err("a curve other than P-256 and Ed25519");
        }
        AlgorithmParameters::OctetKey(_) => return Err("a symmetric key (kty: oct)"),
        _ => return Err("an unknown key type"),
    };
    if declared.is_some_and(|declared| declared != expected) {
        return Err("an algorithm other than RS256, ES256 and EdDSA");
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|_| "key parameters do not decode")?;
    let bytes_ok = match alg {
        Algorithm::ES256 => key
            .try_get_as_bytes()
            .is_ok_and(|b| b.len() == P256_POINT_BYTES),
        Algorithm::EdDSA => key
            .try_get_as_bytes()
            .is_ok_and(|b| b.len() == ED25519_KEY_BYTES),
        _ => true,
    };
    if !bytes_ok {
        return Err("key parameters have the wrong length");
    }
    Ok(PublicKey {
        alg,
        kid: jwk.common.key_id.clone(),
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/fixtures/auth/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
    }

    #[test]
    fn each_public_key_family_gets_its_one_algorithm() {
        let cases = [
            ("rsa-a.public.pem", Algorithm::RS256),
            ("ec-p256.public.pem", Algorithm::ES256),
            ("ed25519.public.pem", Algorithm::EdDSA),
        ];
        for (name, alg) in cases {
            let key = from_pem(&fixture(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_eq!(key.algorithm(), alg, "{name}");
            assert_eq!(key.kid(), None, "{name}");
        }
    }

    #[test]
    fn unusable_pem_files_are_refused_with_their_reason() {
        let rsa = String::from_utf8(fixture("rsa-a.public.pem")).expect("ascii");
        let cases: Vec<(String, Vec<u8>, KeyError)> = vec![
            ("empty".into(), Vec::new(), KeyError::NotPem),
            ("text".into(), b"hello".to_vec(), KeyError::NotPem),
            (
                "private".into(),
                fixture("rsa-a.private.test.pem"),
                KeyError::PrivateKey,
            ),
            (
                "certificate".into(),
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec(),
                KeyError::Certificate,
            ),
            (
                "two keys".into(),
                format!("{rsa}{rsa}").into_bytes(),
                KeyError::SeveralBlocks(2),
            ),
            (
                "corrupt body".into(),
                b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n".to_vec(),
                KeyError::Unsupported,
            ),
            (
                "p-384".into(),
                fixture("ec-p384.public.pem"),
                KeyError::EcCurve,
            ),
        ];
        for (name, pem, want) in cases {
            assert_eq!(from_pem(&pem).map(|k| k.alg), Err(want), "{name}");
        }
    }

    #[test]
    fn a_jwk_set_keeps_signing_keys_and_skips_the_rest() {
        let mut keys: Vec<Value> = ["rsa-a", "ec-p256", "ed25519"]
            .iter()
            .map(|name| {
                serde_json::from_slice(&fixture(&format!("{name}.jwk.json"))).expect("json")
            })
            .collect();
        let rsa = keys[0].clone();
        let with = |mut key: Value, field: &str, value: Value| {
            key[field] = value;
            key
        };
        keys.extend([
            with(rsa.clone(), "use", "enc".into()),
            with(rsa.clone(), "alg", "RS512".into()),
            with(rsa.clone(), "alg", "HS256".into()),
            serde_json::json!({"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}),
            serde_json::json!({"kty": "EC", "kid": "p384", "crv": "P-384", "x": "AA", "y": "AA"}),
            serde_json::json!({"kty": "EC", "kid": "short", "crv": "P-256", "x": "AA", "y": "AA"}),
            serde_json::json!({"kty": "XYZ", "kid": "alien"}),
        ]);
        let doc = serde_json::json!({ "keys": keys }).to_string();
        let set = from_jwk_set(doc.as_bytes()).expect("a set");
        let kept: Vec<(Algorithm, Option<&str>)> =
            set.keys.iter().map(|k| (k.alg, k.kid())).collect();
        assert_eq!(
            kept,
            [
                (Algorithm::RS256, Some("rsa-a")),
                (Algorithm::ES256, Some("ec-p256")),
                (Algorithm::EdDSA, Some("ed25519")),
            ]
        );
        assert_eq!(set.skipped.len(), 7, "{:?}", set.skipped);
        for bad in [&b"[]"[..], b"{}", b"{\"keys\": 1}", b"<html>"] {
            assert_eq!(from_jwk_set(bad).map(|_| ()), Err(KeyError::BadJwkSet));
        }
    }
}
