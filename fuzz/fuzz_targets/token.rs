//! Client tokens: `TokenVerifier::verify` never panics, neither on raw
//! strings nor on tokens whose header and claims are fuzzed but whose MAC
//! is made with the secret (so the claim checks are reached), and what it
//! accepts is an HS256 token for a valid user that has not expired.

#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey};
use libfuzzer_sys::fuzz_target;
use pushgate::auth::TokenVerifier;
use pushgate::protocol::UserId;

const SECRET: &[u8] = b"fuzz-secret-0123456789abcdef";
const NOW: u64 = 1_700_000_000;

fuzz_target!(|data: &[u8]| {
    let verifier = TokenVerifier::new(SECRET);
    let raw = String::from_utf8_lossy(data);
    check(&verifier, &raw);
    // header \n claims, each base64url-encoded and MAC'd with the secret.
    let (header, claims) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&br#"{"alg":"HS256","typ":"JWT"}"#[..], data),
    };
    let message = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let key = EncodingKey::from_secret(SECRET);
    let mac = jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256)
        .expect("hmac signing");
    check(&verifier, &format!("{message}.{mac}"));
});

fn check(verifier: &TokenVerifier, token: &str) {
    if let Ok(verified) = verifier.verify(token, NOW) {
        assert!(verified.expires_at > NOW);
        assert_eq!(
            UserId::parse(verified.user.as_str()).as_ref(),
            Ok(&verified.user)
        );
        let header = token.split('.').next().expect("three parts");
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).expect("base64 header"))
                .expect("json header");
        assert_eq!(header["alg"], "HS256", "{token}");
    }
}
