//! `pushgate token`: a backend operator mints a client token from the
//! command line.

use std::process::{Command, Output};

use pushgate::auth::token::TokenVerifier;
use pushgate::config::Config;
use pushgate::gateway::Gateway;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the binary in the repository root with no `PUSHGATE_*` variables
/// inherited from the caller's environment.
fn pushgate(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pushgate"));
    cmd.args(args).current_dir(ROOT);
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("PUSHGATE_") {
            cmd.env_remove(var);
        }
    }
    cmd.output().expect("pushgate runs")
}

fn shipped_secret() -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/config.toml")).expect("config.toml");
    Config::from_toml_str(&text).expect("parses").auth.secret
}

#[test]
fn token_prints_a_jwt_the_verifier_accepts_for_that_user() {
    let out = pushgate(&["token", "alice", "--ttl", "60", "--config", "config.toml"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    let token = stdout.trim();
    assert_eq!(token.split('.').count(), 3, "a JWT: {stdout:?}");
    let now = Gateway::unix_now();
    let verified = TokenVerifier::new(shipped_secret().as_bytes())
        .verify(token, now)
        .expect("the configured secret verifies it");
    assert_eq!(verified.user.as_str(), "alice");
    assert!(
        (now + 55..=now + 65).contains(&verified.expires_at),
        "exp {} for a 60 s ttl at {now}",
        verified.expires_at
    );
    let wrong = TokenVerifier::new(b"another-secret-0123456789abcdef").verify(token, now);
    assert!(wrong.is_err(), "signed with the configured secret only");
}

#[test]
fn token_lives_an_hour_by_default() {
    let out = pushgate(&["token", "bob", "--config", "config.toml"]);
    assert!(out.status.success(), "{out:?}");
    let token = String::from_utf8(out.stdout).expect("UTF-8");
    let now = Gateway::unix_now();
    let verified = TokenVerifier::new(shipped_secret().as_bytes())
        .verify(token.trim(), now)
        .expect("valid");
    assert!((now + 3595..=now + 3605).contains(&verified.expires_at));
}

#[test]
fn token_for_a_malformed_user_id_fails_without_printing_a_token() {
    let out = pushgate(&["token", "bad id", "--config", "config.toml"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("user id"), "{stderr}");
}
