//! `pushgate check-config`: validate and print the effective configuration,
//! secrets masked; refuse bad files and bad environment variables, naming
//! the key.

use std::path::PathBuf;
use std::process::{Command, Output};

use pushgate::config::{Config, SHIPPED_DEV_API_KEY, SHIPPED_DEV_SECRET};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs `pushgate check-config --config <config>` in the repository root
/// with exactly these `PUSHGATE_*` variables.
fn check_config(config: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pushgate"));
    cmd.args(["check-config", "--config", config])
        .current_dir(ROOT);
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("PUSHGATE_") {
            cmd.env_remove(var);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("pushgate runs")
}

/// The shipped config.toml with `edit` applied, written to a file of its own.
fn edited_config(name: &str, edit: impl FnOnce(String) -> String) -> PathBuf {
    let shipped = std::fs::read_to_string(format!("{ROOT}/config.toml")).expect("config.toml");
    let path = std::env::temp_dir().join(format!(
        "pushgate-cli-check-config-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(&path, edit(shipped)).expect("temp config written");
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn printed_config(out: &Output) -> Config {
    assert!(out.status.success(), "{out:?}");
    Config::from_toml_str(&text(&out.stdout)).expect("check-config prints TOML")
}

#[test]
fn shipped_config_is_valid_and_printed_with_secrets_masked() {
    let out = check_config("config.toml", &[]);
    let printed = printed_config(&out);
    assert_eq!(printed.auth.secret, "***");
    assert_eq!(printed.auth.api_key, "***");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    for secret in [SHIPPED_DEV_SECRET, SHIPPED_DEV_API_KEY] {
        assert!(!stdout.contains(secret), "secret on stdout:\n{stdout}");
        assert!(!stderr.contains(secret), "secret on stderr:\n{stderr}");
    }
    // Every other value is the file's.
    let shipped = std::fs::read_to_string(format!("{ROOT}/config.toml")).expect("config.toml");
    let mut shipped = Config::from_toml_str(&shipped).expect("parses");
    shipped.auth.secret = "***".into();
    shipped.auth.api_key = "***".into();
    assert_eq!(printed, shipped);
}

#[test]
fn unknown_key_in_the_file_is_refused_naming_it() {
    let path = edited_config("unknown-key", |toml| {
        toml.replacen("[timer]\n", "[timer]\nslotz = 4096\n", 1)
    });
    let out = check_config(path.to_str().expect("UTF-8 path"), &[]);
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "nothing printed for a bad config");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("slotz"), "{stderr}");
}

#[test]
fn bad_value_in_the_file_is_refused_naming_the_key() {
    let path = edited_config("bad-slots", |toml| {
        toml.replacen("slots = 4096", "slots = 1000", 1)
    });
    let out = check_config(path.to_str().expect("UTF-8 path"), &[]);
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("timer.slots"), "{stderr}");
    assert!(stderr.contains("1000"), "shows the value: {stderr}");
}

#[test]
fn every_problem_in_a_file_is_reported_at_once() {
    let path = edited_config("two-problems", |toml| {
        toml.replacen("slots = 4096", "slots = 1000", 1).replacen(
            "outbound_queue = 256",
            "outbound_queue = 0",
            1,
        )
    });
    let out = check_config(path.to_str().expect("UTF-8 path"), &[]);
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("timer.slots"), "{stderr}");
    assert!(stderr.contains("limits.outbound_queue"), "{stderr}");
}

#[test]
fn missing_config_file_is_refused_naming_it() {
    let out = check_config("no-such-config.toml", &[]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no-such-config.toml"), "{out:?}");
}

#[test]
fn environment_variable_overrides_its_key() {
    let out = check_config(
        "config.toml",
        &[
            ("PUSHGATE_SESSION_IDLE_TIMEOUT_SECS", "30"),
            ("PUSHGATE_SERVER_LISTEN", "127.0.0.1:9000"),
        ],
    );
    let printed = printed_config(&out);
    assert_eq!(printed.session.idle_timeout_secs, 30);
    assert_eq!(printed.server.listen, "127.0.0.1:9000");
    assert!(text(&out.stdout).contains("idle_timeout_secs = 30"));
}

#[test]
fn environment_variable_naming_a_section_but_no_key_of_it_is_refused() {
    for typo in ["PUSHGATE_SERVER_LISTN", "PUSHGATE_SESSION_NO_SUCH_KEY"] {
        let out = check_config("config.toml", &[(typo, "1")]);
        assert!(!out.status.success(), "{out:?}");
        assert!(out.stdout.is_empty());
        assert!(text(&out.stderr).contains(typo), "{out:?}");
    }
}

/// What a Service named `pushgate` and one named `pushgate-server`
/// (port 8080, named `http`) inject into every pod of their namespace,
/// and a script's own variable.
const NOT_CONFIG: &[(&str, &str)] = &[
    ("PUSHGATE_SERVICE_HOST", "10.0.0.11"),
    ("PUSHGATE_SERVICE_PORT", "8080"),
    ("PUSHGATE_SERVICE_PORT_HTTP", "8080"),
    ("PUSHGATE_PORT", "tcp://10.0.0.11:8080"),
    ("PUSHGATE_PORT_8080_TCP", "tcp://10.0.0.11:8080"),
    ("PUSHGATE_PORT_8080_TCP_PROTO", "tcp"),
    ("PUSHGATE_PORT_8080_TCP_PORT", "8080"),
    ("PUSHGATE_PORT_8080_TCP_ADDR", "10.0.0.11"),
    ("PUSHGATE_SERVER_SERVICE_HOST", "10.0.0.12"),
    ("PUSHGATE_SERVER_SERVICE_PORT", "8080"),
    ("PUSHGATE_SERVER_SERVICE_PORT_HTTP", "8080"),
    ("PUSHGATE_SERVER_PORT", "tcp://10.0.0.12:8080"),
    ("PUSHGATE_SERVER_PORT_8080_TCP", "tcp://10.0.0.12:8080"),
    ("PUSHGATE_SERVER_PORT_8080_TCP_PROTO", "tcp"),
    ("PUSHGATE_SERVER_PORT_8080_TCP_PORT", "8080"),
    ("PUSHGATE_SERVER_PORT_8080_TCP_ADDR", "10.0.0.12"),
    ("PUSHGATE_BIN", "/usr/local/bin/pushgate"),
];

#[test]
fn kubernetes_service_links_and_foreign_variables_are_ignored_with_one_warning() {
    let mut env = NOT_CONFIG.to_vec();
    env.push(("PUSHGATE_SESSION_IDLE_TIMEOUT_SECS", "30"));
    let out = check_config("config.toml", &env);
    let printed = printed_config(&out);
    assert_eq!(
        printed.session.idle_timeout_secs, 30,
        "real keys still apply"
    );
    let stderr = text(&out.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "one warning line:\n{stderr}");
    for (var, value) in NOT_CONFIG {
        assert!(warnings[0].contains(var), "{var} listed:\n{stderr}");
        // (Ports and "tcp" are in the names too; addresses are not.)
        if value.contains('.') {
            assert!(!warnings[0].contains(value), "values shown:\n{stderr}");
        }
    }
    assert!(!warnings[0].contains("IDLE_TIMEOUT"), "{stderr}");
}

/// A config on the Redis broker at `url`.
fn redis_config(name: &str, url: &str) -> PathBuf {
    edited_config(name, |toml| {
        toml.replacen("kind = \"memory\"", "kind = \"redis\"", 1)
            .replacen(
                "url = \"redis://127.0.0.1:6379\"",
                &format!("url = \"{url}\""),
                1,
            )
    })
}

const REDIS_PASSWORD: &str = "hunter2-redis-password";

#[test]
fn the_redis_password_in_the_broker_url_is_never_printed() {
    let url = format!("redis://pushgate:{REDIS_PASSWORD}@redis.internal:6379/0");
    let path = redis_config("redis-password", &url);
    let out = check_config(path.to_str().expect("UTF-8 path"), &[]);
    let _ = std::fs::remove_file(&path);
    let printed = printed_config(&out);
    assert_eq!(
        printed.broker.url,
        "redis://pushgate:***@redis.internal:6379/0"
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!stdout.contains(REDIS_PASSWORD), "{stdout}");
    assert!(!stderr.contains(REDIS_PASSWORD), "{stderr}");
    // On a socket URL the password is a query parameter.
    let url = format!("redis+unix:///run/redis.sock?db=1&pass={REDIS_PASSWORD}");
    let out = check_config("config.toml", &[("PUSHGATE_BROKER_URL", &url)]);
    let printed = printed_config(&out);
    assert_eq!(
        printed.broker.url,
        "redis+unix:///run/redis.sock?db=1&pass=***"
    );
    assert!(!text(&out.stdout).contains(REDIS_PASSWORD));
}

#[test]
fn a_bad_broker_url_is_refused_without_echoing_its_password() {
    for url in [
        format!("http://pushgate:{REDIS_PASSWORD}@redis.internal:6379"),
        format!("redis:/pushgate:{REDIS_PASSWORD}@redis.internal"),
    ] {
        let path = redis_config("bad-redis-url", &url);
        let out = check_config(path.to_str().expect("UTF-8 path"), &[]);
        let _ = std::fs::remove_file(&path);
        assert!(!out.status.success(), "{out:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("broker.url"), "{stderr}");
        assert!(!stderr.contains(REDIS_PASSWORD), "{stderr}");
        assert!(stderr.contains("***"), "{stderr}");
    }
}

#[test]
fn environment_variable_with_a_bad_value_is_refused_naming_the_key() {
    let out = check_config("config.toml", &[("PUSHGATE_TIMER_SLOTS", "1000")]);
    assert!(!out.status.success(), "{out:?}");
    assert!(text(&out.stderr).contains("timer.slots"), "{out:?}");
    let out = check_config("config.toml", &[("PUSHGATE_TIMER_SLOTS", "many")]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        text(&out.stderr).contains("PUSHGATE_TIMER_SLOTS"),
        "{out:?}"
    );
}

#[test]
fn shipped_config_on_a_public_address_is_refused_naming_what_to_change() {
    let out = check_config("config.toml", &[("PUSHGATE_SERVER_LISTEN", "0.0.0.0:8080")]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        out.stdout.is_empty(),
        "nothing printed for a refused config"
    );
    let stderr = text(&out.stderr);
    for named in [
        "auth.secret",
        "auth.api_key",
        "demo.enabled",
        "0.0.0.0:8080",
        "127.0.0.1",
        "demo.allow_public",
    ] {
        assert!(stderr.contains(named), "{named} not named:\n{stderr}");
    }
    for secret in [SHIPPED_DEV_SECRET, SHIPPED_DEV_API_KEY] {
        assert!(!stderr.contains(secret), "secret on stderr:\n{stderr}");
    }
    // Own keys, demo mode off: the same address is fine.
    let out = check_config(
        "config.toml",
        &[
            ("PUSHGATE_SERVER_LISTEN", "0.0.0.0:8080"),
            ("PUSHGATE_AUTH_SECRET", "a-secret-of-our-own-0123456789"),
            ("PUSHGATE_AUTH_API_KEY", "an-api-key-of-our-own-0123456789"),
            ("PUSHGATE_DEMO_ENABLED", "false"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}
