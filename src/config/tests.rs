//! Unit tests of the config tree, the overlay and the rules.

use super::mask::MASK;
use super::*;

const SHIPPED: &str = include_str!("../../config.toml");

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Defaults plus credentials: the smallest configuration that validates.
fn valid() -> Config {
    let mut config = Config::default();
    config.auth.secret = "s".repeat(32);
    config.auth.api_key = "k".repeat(32);
    config
}

#[test]
fn shipped_config_parses_and_validates() {
    let config = Config::from_toml_str(SHIPPED).expect("shipped config parses");
    config.validate().expect("shipped config validates");
    assert_eq!(config.server.listen, "127.0.0.1:8080");
    assert_eq!(config.auth.secret, SHIPPED_DEV_SECRET);
    assert_eq!(config.auth.api_key, SHIPPED_DEV_API_KEY);
    assert!(config.auth.uses_shipped_dev_values());
    assert!(config.demo.enabled);
    assert_eq!(config.metrics.listen, None);
}

#[test]
fn shipped_config_differs_from_defaults_only_where_documented() {
    let mut config = Config::from_toml_str(SHIPPED).expect("shipped config parses");
    config.server.listen = ServerConfig::default().listen;
    config.auth.secret = String::new();
    config.auth.api_key = String::new();
    config.demo.enabled = false;
    assert_eq!(config, Config::default());
}

#[test]
fn shipped_config_lists_every_key() {
    let shipped: Table = toml::from_str(SHIPPED).expect("shipped config parses");
    let defaults = to_table(&Config::default()).expect("defaults serialize");
    for (section, fields) in &defaults {
        let Value::Table(fields) = fields else {
            panic!("[{section}] is not a table");
        };
        let listed = shipped[section].as_table().expect("section present");
        for key in fields.keys() {
            assert!(listed.contains_key(key), "{section}.{key} missing");
        }
    }
    assert!(SHIPPED.contains("# listen = \"127.0.0.1:9100\""));
    assert!(SHIPPED_DEV_SECRET.len() >= 32 && SHIPPED_DEV_API_KEY.len() >= 32);
}

#[test]
fn defaults_round_trip_through_toml() {
    let text = toml::to_string(&Config::default()).expect("defaults serialize");
    assert_eq!(
        Config::from_toml_str(&text).expect("parses"),
        Config::default()
    );
    assert_eq!(
        Config::from_toml_str("").expect("parses"),
        Config::default()
    );
}

#[test]
fn omitted_keys_keep_defaults() {
    let config = Config::from_toml_str("[session]\nidle_timeout_secs = 90\n").expect("parses");
    assert_eq!(config.session.idle_timeout_secs, 90);
    assert_eq!(config.session.ping_interval_secs, 25);
    assert_eq!(config.timer, TimerConfig::default());
}

#[test]
fn unknown_or_mistyped_key_in_file_is_named() {
    let cases = [
        ("[session]\nidle_timout_secs = 5\n", "idle_timout_secs"),
        ("[sesion]\nidle_timeout_secs = 5\n", "sesion"),
        ("[timer]\ntick_ms = \"fast\"\n", "tick_ms"),
        ("[broker]\nkind = \"kafka\"\n", "kafka"),
    ];
    for (text, named) in cases {
        let err = Config::from_toml_str(text).expect_err(text).to_string();
        assert!(err.contains(named), "{err:?} should name {named}");
        assert!(err.contains("line"), "{err:?} should name the line");
    }
}

#[test]
fn env_overlay_sets_typed_values() {
    let config = Config::default()
        .apply_env(env(&[
            ("PUSHGATE_SERVER_LISTEN", "127.0.0.1:9000"),
            ("PUSHGATE_SESSION_IDLE_TIMEOUT_SECS", "30"),
            ("PUSHGATE_AUTH_ANONYMOUS", "true"),
            (
                "PUSHGATE_AUTH_ALLOWED_ORIGINS",
                "https://a.example, https://b.example",
            ),
            ("PUSHGATE_BROKER_KIND", "redis"),
            ("PUSHGATE_METRICS_LISTEN", "127.0.0.1:9100"),
            ("PUSHGATE_LIMITS_PUSH_RATE_PER_SEC", "0"),
            ("PUSHGATE_CONFIG", "/etc/pushgate.toml"),
            ("PUSHGATE_LOG", "debug"),
            ("HOME", "/root"),
        ]))
        .expect("overlay applies");
    assert_eq!(config.server.listen, "127.0.0.1:9000");
    assert_eq!(config.session.idle_timeout(), Duration::from_secs(30));
    assert!(config.auth.anonymous);
    assert_eq!(
        config.auth.allowed_origins,
        ["https://a.example", "https://b.example"]
    );
    assert_eq!(config.broker.kind, BrokerKind::Redis);
    assert_eq!(config.metrics.listen.as_deref(), Some("127.0.0.1:9100"));
    assert_eq!(config.limits.push_rate_per_sec, 0);
    assert_eq!(config.session.ping_interval_secs, 25);
}

#[test]
fn env_overlay_overrides_the_file() {
    let file = Config::from_toml_str("[history]\nsize = 5\n").expect("parses");
    let config = file
        .apply_env(env(&[("PUSHGATE_HISTORY_SIZE", "7")]))
        .expect("overlay applies");
    assert_eq!(config.history.size, 7);
}

#[test]
fn env_overlay_rejects_unknown_names_and_bad_values() {
    let cases = [
        (
            "PUSHGATE_SESSION_IDLE_TIMOUT_SECS",
            "30",
            "names no configuration key",
        ),
        ("PUSHGATE_SERVER_LISTN", "x", "names no configuration key"),
        (
            "PUSHGATE_METRICS_LISTENER",
            "x",
            "names no configuration key",
        ),
        ("PUSHGATE_SESSION_IDLE_TIMEOUT_SECS", "soon", "\"soon\""),
        ("PUSHGATE_SESSION_IDLE_TIMEOUT_SECS", "-1", "\"-1\""),
        ("PUSHGATE_AUTH_ANONYMOUS", "yes", "\"yes\""),
        ("PUSHGATE_BROKER_KIND", "kafka", "\"kafka\""),
    ];
    for (var, value, expected) in cases {
        let err = Config::default()
            .apply_env(env(&[(var, value)]))
            .expect_err(var);
        let ConfigError::Env { var: named, .. } = &err else {
            panic!("{var}={value}: expected an env error, got {err}");
        };
        assert_eq!(named, var);
        let text = err.to_string();
        assert!(text.contains(var) && text.contains(expected), "{text:?}");
    }
}

#[test]
fn validate_reports_every_problem_with_its_path() {
    let mut config = Config::default();
    config.server.listen = "localhost".to_owned();
    config.session.ping_interval_secs = 60;
    config.timer.slots = 1000;
    config.limits.outbound_queue = 0;
    config.auth.api_key = "short".to_owned();
    config.auth.allowed_origins = vec!["*".to_owned(), "https://a.example/app".to_owned()];
    let errors = config.validate().expect_err("invalid").problems().to_vec();
    let expected = [
        "server.listen: must be a socket address like 127.0.0.1:8080, got \"localhost\"",
        "session.ping_interval_secs: must be less than session.idle_timeout_secs (60), got 60",
        "timer.slots: must be a power of two in 16..=1048576, got 1000",
        "auth.secret: must be set (at least 16 bytes), or set auth.public_keys or \
         auth.jwks_url: client tokens need a key",
        "auth.api_key: must be at least 16 bytes, got 5 bytes",
        "auth.allowed_origins[1]: must be an origin without a path, query or fragment, \
         got \"https://a.example/app\"",
        "limits.outbound_queue: must be > 0, got 0",
    ];
    assert_eq!(errors, expected);
}

#[test]
fn validate_checks_each_rule() {
    type Edit = fn(&mut Config);
    let cases: &[(Edit, &str)] = &[
        (
            |c| c.server.header_timeout_secs = 0,
            "server.header_timeout_secs",
        ),
        (
            |c| c.server.body_timeout_secs = 0,
            "server.body_timeout_secs",
        ),
        (
            |c| c.server.tls_cert = Some("cert.pem".to_owned()),
            "server.tls_key",
        ),
        (
            |c| c.server.tls_key = Some("key.pem".to_owned()),
            "server.tls_cert",
        ),
        (
            |c| {
                c.server.tls_cert = Some(" ".to_owned());
                c.server.tls_key = Some("key.pem".to_owned());
            },
            "server.tls_cert",
        ),
        (
            |c| c.session.poll_timeout_secs = 0,
            "session.poll_timeout_secs",
        ),
        (
            |c| c.session.poll_timeout_secs = 60,
            "session.poll_timeout_secs",
        ),
        (
            |c| c.session.session_ttl_secs = 0,
            "session.session_ttl_secs",
        ),
        (
            |c| c.session.idle_timeout_secs = 0,
            "session.idle_timeout_secs",
        ),
        (
            |c| c.session.ping_interval_secs = 0,
            "session.ping_interval_secs",
        ),
        (|c| c.session.max_connections = 0, "session.max_connections"),
        (
            |c| c.session.max_connections_per_user = 0,
            "session.max_connections_per_user",
        ),
        (|c| c.timer.tick_ms = 0, "timer.tick_ms"),
        (|c| c.timer.tick_ms = 1001, "timer.tick_ms"),
        (|c| c.timer.slots = 8, "timer.slots"),
        (|c| c.timer.slots = 1 << 21, "timer.slots"),
        (|c| c.history.size = 100_001, "history.size"),
        (|c| c.history.ttl_secs = 0, "history.ttl_secs"),
        (|c| c.history.ttl_secs = u64::MAX, "history.ttl_secs"),
        (
            |c| c.server.drain_timeout_secs = u64::MAX,
            "server.drain_timeout_secs",
        ),
        (
            |c| c.server.header_timeout_secs = 315_360_001,
            "server.header_timeout_secs",
        ),
        (
            |c| c.session.idle_timeout_secs = u64::MAX,
            "session.idle_timeout_secs",
        ),
        (
            |c| c.session.session_ttl_secs = u64::MAX,
            "session.session_ttl_secs",
        ),
        (|c| c.broker.timeout_ms = u64::MAX, "broker.timeout_ms"),
        (
            |c| c.broker.start_wait_secs = u64::MAX,
            "broker.start_wait_secs",
        ),
        (
            |c| c.broker.presence_ttl_secs = u64::MAX,
            "broker.presence_ttl_secs",
        ),
        (|c| c.auth.allowed_origins.clear(), "auth.allowed_origins"),
        (|c| c.limits.max_push_bytes = 63, "limits.max_push_bytes"),
        (
            |c| c.limits.max_push_bytes = (16 << 20) + 1,
            "limits.max_push_bytes",
        ),
        (|c| c.limits.max_push_users = 0, "limits.max_push_users"),
        (|c| c.limits.connection_burst = 0, "limits.connection_burst"),
        (
            |c| c.limits.connection_retry_spread_secs = 0,
            "limits.connection_retry_spread_secs",
        ),
        (
            |c| c.limits.connection_retry_spread_secs = 3601,
            "limits.connection_retry_spread_secs",
        ),
        (
            |c| c.limits.max_client_frame_bytes = 63,
            "limits.max_client_frame_bytes",
        ),
        (|c| c.broker.key_prefix.clear(), "broker.key_prefix"),
        (
            |c| {
                c.broker.kind = BrokerKind::Redis;
                c.broker.url = "http://x".to_owned();
            },
            "broker.url",
        ),
        (
            |c| c.metrics.listen = Some("nope".to_owned()),
            "metrics.listen",
        ),
        (
            |c| c.metrics.listen = Some(c.server.listen.clone()),
            "metrics.listen",
        ),
    ];
    valid().validate().expect("baseline validates");
    for (edit, path) in cases {
        let mut config = valid();
        edit(&mut config);
        let errors = config.validate().expect_err(path);
        assert_eq!(errors.problems().len(), 1, "{errors}");
        assert!(
            errors.problems()[0].starts_with(&format!("{path}: ")),
            "{errors}"
        );
    }
}

#[test]
fn tls_is_both_files_or_neither() {
    let mut config = valid();
    assert!(!config.server.is_tls());
    config.server.tls_cert = Some("/etc/pushgate/cert.pem".to_owned());
    let errors = config.validate().expect_err("key missing");
    assert_eq!(
        errors.problems(),
        ["server.tls_key: must be set when server.tls_cert is (both or neither), got nothing"]
    );
    config.server.tls_key = Some("/etc/pushgate/key.pem".to_owned());
    config.validate().expect("both set");
    assert!(config.server.is_tls());
}

#[test]
fn env_overlay_sets_the_hardening_keys() {
    let config = valid()
        .apply_env(env(&[
            ("PUSHGATE_SERVER_BODY_TIMEOUT_SECS", "3"),
            ("PUSHGATE_SERVER_TLS_CERT", "/tls/cert.pem"),
            ("PUSHGATE_SERVER_TLS_KEY", "/tls/key.pem"),
            ("PUSHGATE_LIMITS_MAX_CONNECTIONS_PER_IP", "0"),
            ("PUSHGATE_LIMITS_CONNECTION_RATE_PER_IP", "7"),
        ]))
        .expect("overlay applies");
    assert_eq!(config.server.body_timeout(), Duration::from_secs(3));
    assert_eq!(config.server.tls_cert.as_deref(), Some("/tls/cert.pem"));
    assert_eq!(config.server.tls_key.as_deref(), Some("/tls/key.pem"));
    assert_eq!(config.limits.max_connections_per_ip, 0);
    assert_eq!(config.limits.connection_rate_per_ip, 7);
    config.validate().expect("valid");
    let err = valid()
        .apply_env(env(&[("PUSHGATE_LIMITS_CONNECTION_RATE_PER_IP", "-1")]))
        .expect_err("negative rate");
    assert!(err.to_string().contains("\"-1\""), "{err}");
}

#[test]
fn hardening_defaults_protect_the_process_and_lock_out_no_shared_address() {
    let config = Config::default();
    assert_eq!(config.server.body_timeout_secs, 10);
    assert_eq!(config.server.tls_cert, None);
    // Per address: off, so an office or a carrier's NAT is never refused.
    assert_eq!(config.limits.max_connections_per_ip, 0);
    assert_eq!(config.limits.connection_rate_per_ip, 0);
    // For the node, whatever the addresses.
    assert_eq!(config.limits.connection_rate, 5000);
    assert_eq!(config.limits.connection_burst, 10_000);
    assert_eq!(config.limits.connection_retry_spread_secs, 10);
    assert!(!config.demo.enabled && !config.demo.allow_public);
}

#[test]
fn origins_are_star_or_scheme_host_port() {
    let cases = [
        ("*", true),
        ("https://app.example.com", true),
        ("http://localhost:8080", true),
        ("http://127.0.0.1:3000", true),
        ("http://[::1]:8080", true),
        ("http://[::1]", true),
        ("chrome-extension+v1.x://abc", true),
        ("1http://app.example.com", false),
        ("ht_tp://app.example.com", false),
        ("http://[::1]8080", false),
        ("app.example.com", false),
        ("https://app.example.com/", false),
        ("https://app.example.com?x=1", false),
        ("https://", false),
        ("https://a.example:99999", false),
        ("https://a.example:", false),
        ("https://user@a.example", false),
        ("https://[zz]", false),
        ("*.example.com", false),
    ];
    for (origin, ok) in cases {
        assert_eq!(validate::check_origin(origin).is_ok(), ok, "{origin}");
    }
}

#[test]
fn masked_toml_and_debug_hide_credentials() {
    let config = valid();
    let masked = config.to_masked_toml();
    let debug = format!("{config:?}");
    for shown in [&masked, &debug] {
        assert!(!shown.contains(&config.auth.secret), "{shown}");
        assert!(!shown.contains(&config.auth.api_key), "{shown}");
        assert!(shown.contains(MASK), "{shown}");
    }
    assert!(masked.contains("# listen unset"), "{masked}");
    assert!(masked.contains("# tls_cert and tls_key unset"), "{masked}");
    let reparsed = Config::from_toml_str(&masked).expect("masked output parses");
    assert_eq!(reparsed.auth.secret, MASK);
    assert_eq!(reparsed.session, config.session);
}

#[test]
fn the_broker_password_is_masked_everywhere_it_is_shown() {
    let cases = [
        (
            "redis://:hunter2-pw@10.0.0.1:6379/0",
            "redis://:***@10.0.0.1:6379/0",
        ),
        (
            "rediss://app:hunter2-pw@redis.example:6380",
            "rediss://app:***@redis.example:6380",
        ),
        ("redis://app@host:6379", "redis://app@host:6379"),
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        (
            "redis+unix:///run/redis.sock?db=1&pass=hunter2-pw",
            "redis+unix:///run/redis.sock?db=1&pass=***",
        ),
        (
            "unix:///run/redis.sock?password=hunter2-pw#x",
            "unix:///run/redis.sock?password=***#x",
        ),
        ("redis:/:hunter2-pw@host", "redis:***@host"),
        ("app:hunter2-pw@host:6379", "app:***@host:6379"),
        ("127.0.0.1:6379", "127.0.0.1:6379"),
    ];
    for (url, shown) in cases {
        assert_eq!(masked_url(url), shown, "{url}");
    }
    let mut config = valid();
    config.broker.kind = BrokerKind::Redis;
    config.broker.url = "redis://app:hunter2-pw@10.0.0.1:6379".into();
    let masked = config.to_masked_toml();
    let debug = format!("{config:?}");
    for shown in [&masked, &debug] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redis://app:***@10.0.0.1:6379"), "{shown}");
    }
    // A mistyped scheme is reported without the password.
    config.broker.url = "redis:/:hunter2-pw@10.0.0.1:6379".into();
    let err = config.validate().expect_err("bad scheme");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert!(err.to_string().contains("broker.url"), "{err}");
}

#[test]
fn load_applies_env_and_refuses_invalid_configs() {
    let dir = std::env::temp_dir().join(format!("pushgate-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("config.toml");
    std::fs::write(&path, SHIPPED).expect("write config");

    let loaded = Config::load(&path, env(&[("PUSHGATE_TIMER_TICK_MS", "50")])).expect("loads");
    assert_eq!(loaded.config.timer.tick(), Duration::from_millis(50));
    assert_eq!(loaded.ignored_env_warning(), None);

    let err = Config::load(&path, env(&[("PUSHGATE_TIMER_TICK_MS", "0")])).expect_err("invalid");
    assert!(matches!(err, ConfigError::Invalid(_)), "{err}");
    assert!(
        err.to_string()
            .contains("timer.tick_ms: must be in 1..=1000, got 0")
    );

    let missing = dir.join("missing.toml");
    let err = Config::load(&missing, env(&[])).expect_err("missing file");
    assert!(err.to_string().contains("missing.toml"), "{err}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn load_without_file_needs_credentials_from_env() {
    let err = Config::load_without_file(env(&[])).expect_err("no secret");
    assert!(
        err.to_string().contains("auth.secret: must be set"),
        "{err}"
    );
    let config = Config::load_without_file(env(&[
        ("PUSHGATE_AUTH_SECRET", &"s".repeat(16)),
        ("PUSHGATE_AUTH_API_KEY", &"k".repeat(16)),
    ]))
    .expect("loads")
    .config;
    assert_eq!(config.server.listen_addr().expect("addr").port(), 8080);
    assert_eq!(config.metrics.listen_addr().expect("unset"), None);
}

/// What a Service named `pushgate` and one named `pushgate-server` (port
/// 8080, named `http`) inject into every pod of their namespace.
const SERVICE_LINKS: &[(&str, &str)] = &[
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
];

#[test]
fn env_overlay_ignores_kubernetes_service_links_and_lists_them() {
    let mut vars = env(SERVICE_LINKS);
    vars.extend(env(&[
        ("PUSHGATE_SERVER_LISTEN", "127.0.0.1:9000"),
        ("PUSHGATE_METRICS_SERVICE_PORT_METRICS", "9100"),
        ("PUSHGATE_REDIS_PORT_6379_TCP_ADDR", "10.0.0.13"),
    ]));
    let loaded = Config::default()
        .overlay_env(vars)
        .expect("overlay applies");
    assert_eq!(loaded.config.server.listen, "127.0.0.1:9000");
    let mut want: Vec<String> = SERVICE_LINKS.iter().map(|(v, _)| (*v).to_owned()).collect();
    want.push("PUSHGATE_METRICS_SERVICE_PORT_METRICS".to_owned());
    want.push("PUSHGATE_REDIS_PORT_6379_TCP_ADDR".to_owned());
    want.sort();
    assert_eq!(loaded.ignored_env, want);
    let warning = loaded.ignored_env_warning().expect("a warning");
    assert_eq!(warning.lines().count(), 1, "{warning}");
    for var in &want {
        assert!(warning.contains(var.as_str()), "{warning}");
    }
    assert!(
        !warning.contains("10.0.0.11"),
        "values are not shown: {warning}"
    );
}

#[test]
fn env_overlay_decides_each_pushgate_variable_by_one_rule() {
    // (variable, ignored?): Err(()) for a refusal.
    let cases: &[(&str, Result<bool, ()>)] = &[
        // A real key always wins.
        ("PUSHGATE_SERVER_LISTEN", Ok(false)),
        ("PUSHGATE_METRICS_LISTEN", Ok(false)),
        // Kubernetes shapes, for any Service named pushgate...
        ("PUSHGATE_SERVER_PORT", Ok(true)),
        ("PUSHGATE_SESSION_SERVICE_HOST", Ok(true)),
        ("PUSHGATE_PORT_SERVICE_PORT", Ok(true)),
        ("PUSHGATE_AUTH_PORT_443_TCP_PROTO", Ok(true)),
        ("PUSHGATE_PORT_53_UDP", Ok(true)),
        ("PUSHGATE_PORT_9_SCTP_ADDR", Ok(true)),
        // ... and no section: a script's own variable.
        ("PUSHGATE_BIN", Ok(true)),
        ("PUSHGATE_URL", Ok(true)),
        ("PUSHGATE_NOPE_LISTEN", Ok(true)),
        // A section with a key it does not have: a typo.
        ("PUSHGATE_SERVER_LISTN", Err(())),
        ("PUSHGATE_SERVER_PORT_HTTP", Err(())),
        ("PUSHGATE_SERVER_PORT_8080", Err(())),
        ("PUSHGATE_SERVER_PORT_8080_HTTP", Err(())),
        ("PUSHGATE_SERVER_PORT_X_TCP", Err(())),
        ("PUSHGATE_SERVER_SERVICE", Err(())),
        ("PUSHGATE_SERVER_SERVICE_HOST_X", Err(())),
        ("PUSHGATE_SESSION_IDLE_TIMOUT_SECS", Err(())),
    ];
    for (var, want) in cases {
        let value = if var.ends_with("LISTEN") {
            "127.0.0.1:1"
        } else {
            "x"
        };
        let got = Config::default()
            .overlay_env(env(&[(var, value)]))
            .map(|loaded| loaded.ignored_env == [*var])
            .map_err(|err| assert!(err.to_string().contains(var), "{err}"));
        assert_eq!(got, *want, "{var}");
    }
}

#[test]
fn the_password_in_the_broker_url_is_masked_wherever_it_is_shown() {
    let cases = [
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ("redis://user@host", "redis://user@host"),
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:pw@host/1", "rediss://user:***@host/1"),
        ("redis://user:p@ss:w/rd?@host", "redis://user:***@host"),
        (
            "redis://u:pw@host/?protocol=resp3",
            "redis://u:***@host/?protocol=resp3",
        ),
        (
            "redis+unix:///tmp/r.sock?db=1&pass=pw&user=u",
            "redis+unix:///tmp/r.sock?db=1&pass=***&user=u",
        ),
        (
            "unix:///tmp/r.sock?password=pw",
            "unix:///tmp/r.sock?password=***",
        ),
        ("http://u:pw@host", "http://u:***@host"),
        ("u:pw@host", "u:***@host"),
        ("", ""),
    ];
    for (url, want) in cases {
        assert_eq!(masked_url(url), want, "{url}");
    }
    let mut config = valid();
    config.broker.url = "redis://user:hunter2@host:6379".to_owned();
    let masked = config.to_masked_toml();
    let debug = format!("{config:?}");
    for shown in [&masked, &debug] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redis://user:***@host:6379"), "{shown}");
    }
    config.broker.kind = BrokerKind::Redis;
    config.broker.url = "http://user:hunter2@host".to_owned();
    let errors = config.validate().expect_err("not a redis URL").to_string();
    assert!(!errors.contains("hunter2"), "{errors}");
    assert!(errors.contains("http://user:***@host"), "{errors}");
}

#[test]
fn log_section_comes_from_the_file_and_the_environment() {
    assert_eq!(Config::default().log.format, LogFormat::Text);
    assert_eq!(Config::default().log.level, "info");
    let file =
        Config::from_toml_str("[log]\nformat = \"json\"\nlevel = \"debug\"\n").expect("parses");
    assert_eq!(file.log.format, LogFormat::Json);
    assert_eq!(file.log.level, "debug");
    let config = valid()
        .apply_env(env(&[
            ("PUSHGATE_LOG_FORMAT", "json"),
            ("PUSHGATE_LOG_LEVEL", "warn,pushgate=debug"),
            // The binary's own filter variable is not a key.
            ("PUSHGATE_LOG", "trace"),
        ]))
        .expect("overlay applies");
    assert_eq!(config.log.format, LogFormat::Json);
    assert_eq!(config.log.level, "warn,pushgate=debug");
    config.validate().expect("valid");
    let err = valid()
        .apply_env(env(&[("PUSHGATE_LOG_FORMAT", "xml")]))
        .expect_err("unknown format");
    assert!(err.to_string().contains("PUSHGATE_LOG_FORMAT"), "{err}");
}

#[test]
fn log_level_is_a_level_or_directives() {
    for level in [
        "info",
        "DEBUG",
        "off",
        "warn,pushgate=trace",
        "pushgate::bus=debug",
    ] {
        let mut config = valid();
        config.log.level = level.into();
        config.validate().unwrap_or_else(|e| panic!("{level}: {e}"));
    }
    for level in ["", "debgu", "info,", "pushgate=loud"] {
        let mut config = valid();
        config.log.level = level.into();
        let err = config.validate().expect_err(level);
        assert!(err.problems()[0].starts_with("log.level: "), "{err}");
    }
}

#[test]
fn shipped_config_on_a_public_address_is_refused_naming_what_to_change() {
    for listen in ["0.0.0.0:8080", "192.0.2.10:8080", "[::]:8080"] {
        let mut config = Config::from_toml_str(SHIPPED).expect("shipped config parses");
        config.server.listen = listen.to_owned();
        let problems = config.validate().expect_err("refused").problems().to_vec();
        let text = problems.join("\n");
        assert_eq!(problems.len(), 3, "{text}");
        assert!(problems[0].starts_with("auth.secret: "), "{text}");
        assert!(problems[1].starts_with("auth.api_key: "), "{text}");
        assert!(problems[2].starts_with("demo.enabled: "), "{text}");
        for problem in &problems {
            assert!(problem.contains(listen), "names the address: {problem}");
            assert!(
                problem.contains("127.0.0.1"),
                "names the way out: {problem}"
            );
        }
        assert!(text.contains("PUSHGATE_AUTH_SECRET"), "{text}");
        assert!(text.contains("demo.allow_public = true"), "{text}");
        assert!(!text.contains(SHIPPED_DEV_SECRET) && !text.contains(SHIPPED_DEV_API_KEY));
    }
}

#[test]
fn development_keys_and_demo_mode_are_fine_on_loopback() {
    for listen in [
        "127.0.0.1:8080",
        "127.0.0.2:0",
        "[::1]:8080",
        "[::ffff:127.0.0.1]:80",
    ] {
        let mut config = Config::from_toml_str(SHIPPED).expect("shipped config parses");
        config.server.listen = listen.to_owned();
        config
            .validate()
            .unwrap_or_else(|e| panic!("{listen}: {e}"));
    }
}

#[test]
fn a_deliberate_public_demo_needs_its_own_keys_and_allow_public() {
    let mut config = valid();
    config.demo.enabled = true;
    let problems = config
        .validate()
        .expect_err("demo on 0.0.0.0")
        .problems()
        .to_vec();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("demo.enabled: "), "{problems:?}");
    config.demo.allow_public = true;
    config
        .validate()
        .expect("a deliberate public demo with its own keys");
    // The override covers demo mode, never the published keys.
    config.auth.secret = SHIPPED_DEV_SECRET.to_owned();
    let problems = config
        .validate()
        .expect_err("published key")
        .problems()
        .to_vec();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("auth.secret: "), "{problems:?}");
    // Own keys on a public address without demo mode: production.
    let mut config = valid();
    config.demo.allow_public = true;
    config.validate().expect("production");
}

#[test]
fn a_drain_spreads_over_at_most_half_its_timeout() {
    let mut config = valid();
    config.server.drain_timeout_secs = 10;
    config.server.drain_spread_secs = 5;
    assert_eq!(config.server.drain_spread(), Duration::from_secs(5));
    config.server.drain_spread_secs = 30;
    assert_eq!(config.server.drain_spread(), Duration::from_secs(5));
    config.server.drain_timeout_secs = 1;
    assert_eq!(config.server.drain_spread(), Duration::from_millis(500));
    config
        .validate()
        .expect("a short drain shortens the spread, never refuses");
    config.server.drain_timeout_secs = 0;
    assert_eq!(config.server.drain_spread(), Duration::ZERO);
}

#[test]
fn public_keys_or_a_jwks_url_make_the_secret_optional() {
    let mut config = valid();
    config.auth.secret = String::new();
    assert!(config.validate().is_err(), "no key at all");
    config.auth.public_keys = vec!["/etc/pushgate/rsa.pem".into()];
    config.validate().expect("pem keys only");
    config.auth.public_keys.clear();
    config.auth.jwks_url = Some("https://auth.example/jwks.json".into());
    config.validate().expect("jwks only");
    config.demo.enabled = true;
    config.server.listen = "127.0.0.1:8080".into();
    let problems = config
        .validate()
        .expect_err("demo needs a secret")
        .problems()
        .to_vec();
    assert_eq!(
        problems,
        ["demo.enabled: demo mode mints HS256 tokens with auth.secret, which is not set"]
    );
}

#[test]
fn the_new_auth_keys_are_validated_by_name() {
    let mut config = valid();
    config.auth.public_keys = vec![" ".into()];
    config.auth.jwks_url = Some("ftp://user:hunter2@auth.example/keys".into());
    config.auth.jwks_refresh_secs = 5;
    config.auth.issuer = Some(String::new());
    config.auth.audience = Some(String::new());
    let problems = config.validate().expect_err("invalid").problems().to_vec();
    assert_eq!(
        problems,
        [
            "auth.public_keys[0]: must be the path of a PEM public key file, got \" \"",
            "auth.jwks_url: must be an http:// or https:// URL, got \"ftp://user:***@auth.example/keys\"",
            "auth.jwks_refresh_secs: must be in 10..=86400, got 5",
            "auth.issuer: must not be empty (leave it unset to not check the claim), got \"\"",
            "auth.audience: must not be empty (leave it unset to not check the claim), got \"\"",
        ]
    );
}

#[test]
fn the_new_auth_keys_come_from_the_environment_and_hide_passwords() {
    let config = valid()
        .apply_env(env(&[
            ("PUSHGATE_AUTH_PUBLIC_KEYS", "/k/a.pem, /k/b.pem"),
            (
                "PUSHGATE_AUTH_JWKS_URL",
                "https://u:hunter2@auth.example/jwks",
            ),
            ("PUSHGATE_AUTH_JWKS_REFRESH_SECS", "60"),
            ("PUSHGATE_AUTH_ISSUER", "https://auth.example/"),
            ("PUSHGATE_AUTH_AUDIENCE", "pushgate"),
        ]))
        .expect("applies");
    let auth = &config.auth;
    assert_eq!(auth.public_keys, ["/k/a.pem", "/k/b.pem"]);
    assert_eq!(auth.jwks_refresh_secs, 60);
    assert_eq!(auth.issuer.as_deref(), Some("https://auth.example/"));
    assert_eq!(auth.audience.as_deref(), Some("pushgate"));
    config.validate().expect("valid");
    for shown in [format!("{config:?}"), config.to_masked_toml()] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("https://u:***@auth.example/jwks"), "{shown}");
    }
}

#[test]
fn the_connect_proxy_keys_are_validated_by_name() {
    let mut config = valid();
    config.auth.connect_proxy_url = Some("ftp://app:hunter2@site.example/auth".into());
    config.auth.connect_proxy_timeout_ms = 0;
    config.auth.connect_proxy_concurrency = 0;
    let problems = config.validate().expect_err("invalid").problems().to_vec();
    assert_eq!(
        problems,
        [
            "auth.connect_proxy_url: must be an http:// or https:// URL, got \"ftp://app:***@site.example/auth\"",
            "auth.connect_proxy_timeout_ms: must be in 1..=60000, got 0",
            "auth.connect_proxy_concurrency: must be in 1..=100000, got 0",
        ]
    );
    config.auth.connect_proxy_url = Some("http://".into());
    config.auth.connect_proxy_timeout_ms = 60_001;
    config.auth.connect_proxy_concurrency = 100_001;
    config.auth.connect_proxy_queue_ms = 60_001;
    let problems = config.validate().expect_err("invalid").problems().to_vec();
    assert_eq!(
        problems,
        [
            "auth.connect_proxy_url: must be an http:// or https:// URL, got \"http://\"",
            "auth.connect_proxy_timeout_ms: must be in 1..=60000, got 60001",
            "auth.connect_proxy_concurrency: must be in 1..=100000, got 100001",
            "auth.connect_proxy_queue_ms: must be in 0..=60000, got 60001",
        ]
    );
}

#[test]
fn a_connect_proxy_makes_the_token_keys_optional() {
    let mut config = valid();
    config.auth.secret = String::new();
    assert!(config.validate().is_err(), "no way to authenticate");
    config.auth.connect_proxy_url = Some("https://site.example/pushgate/auth".into());
    config.validate().expect("the proxy alone");
}

#[test]
fn the_connect_proxy_keys_come_from_the_environment_and_hide_passwords() {
    let config = valid()
        .apply_env(env(&[
            (
                "PUSHGATE_AUTH_CONNECT_PROXY_URL",
                "https://app:hunter2@site.example/auth",
            ),
            ("PUSHGATE_AUTH_CONNECT_PROXY_TIMEOUT_MS", "250"),
            ("PUSHGATE_AUTH_CONNECT_PROXY_CONCURRENCY", "8"),
        ]))
        .expect("applies");
    let auth = &config.auth;
    assert_eq!(
        auth.connect_proxy_url.as_deref(),
        Some("https://app:hunter2@site.example/auth")
    );
    assert_eq!(auth.connect_proxy_timeout(), Duration::from_millis(250));
    assert_eq!(auth.connect_proxy_concurrency, 8);
    config.validate().expect("valid");
    for shown in [format!("{config:?}"), config.to_masked_toml()] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("https://app:***@site.example/auth"),
            "{shown}"
        );
    }
    let unset = Config::default();
    assert_eq!(unset.auth.connect_proxy_url, None);
    assert_eq!(unset.auth.connect_proxy_timeout_ms, 1000);
    assert_eq!(unset.auth.connect_proxy_concurrency, 64);
    assert_eq!(unset.auth.connect_proxy_queue_ms, 1000);
}

#[test]
fn public_channel_patterns_are_names_optionally_ending_in_a_star() {
    let (longest, too_long) = ("c".repeat(128), "c".repeat(129));
    for pattern in [
        "news",
        "product.*",
        "*",
        "a:b@c-d_e.f",
        "x*",
        longest.as_str(),
    ] {
        let mut config = valid();
        config.channels.public = vec![pattern.to_owned()];
        assert!(config.validate().is_ok(), "{pattern:?} is a pattern");
    }
    for pattern in ["", "a b", "**", "\u{e9}", "a*b", "a/b*", too_long.as_str()] {
        let mut config = valid();
        config.channels.public = vec!["news".to_owned(), pattern.to_owned()];
        let errors = config.validate().expect_err(pattern);
        assert_eq!(errors.problems().len(), 1, "{errors}");
        assert!(
            errors.problems()[0].starts_with("channels.public[1]: "),
            "{errors}"
        );
    }
}

#[test]
fn a_duration_of_exactly_ten_years_is_the_longest_accepted() {
    let ten_years = 10 * 365 * 86_400;
    let mut config = valid();
    config.server.header_timeout_secs = ten_years;
    config.broker.timeout_ms = ten_years * 1000;
    config.validate().expect("ten years is accepted");
    type Edit = fn(&mut Config);
    let cases: &[(Edit, &str)] = &[
        (
            |c| c.server.header_timeout_secs = 10 * 365 * 86_400 + 1,
            "server.header_timeout_secs",
        ),
        (
            |c| c.broker.timeout_ms = 10 * 365 * 86_400 * 1000 + 1,
            "broker.timeout_ms",
        ),
        (|c| c.broker.timeout_ms = 0, "broker.timeout_ms"),
    ];
    for (edit, path) in cases {
        let mut config = valid();
        edit(&mut config);
        let errors = config.validate().expect_err(path);
        assert_eq!(errors.problems().len(), 1, "{errors}");
        assert!(
            errors.problems()[0].starts_with(&format!("{path}: ")),
            "{errors}"
        );
    }
}

#[test]
fn cluster_seeds_are_redis_or_rediss_urls() {
    let mut config = valid();
    config.broker.kind = BrokerKind::Redis;
    config.broker.cluster = true;
    config.broker.urls = vec![
        "redis://10.0.0.1:7000".to_owned(),
        "rediss://10.0.0.2:7000".to_owned(),
    ];
    config.validate().expect("redis:// and rediss:// seeds");
    config.broker.urls.push("http://10.0.0.3:7000".to_owned());
    let errors = config.validate().expect_err("an http:// seed");
    assert_eq!(errors.problems().len(), 1, "{errors}");
    assert!(
        errors.problems()[0].starts_with("broker.urls: "),
        "{errors}"
    );
}

#[test]
fn metrics_may_listen_anywhere_but_the_main_address() {
    let mut config = valid();
    config.server.listen = "127.0.0.1:8080".to_owned();
    config.metrics.listen = Some("127.0.0.1:9100".to_owned());
    config.validate().expect("another port");
    // Port 0 twice is two different ports once bound (as tests do).
    config.server.listen = "127.0.0.1:0".to_owned();
    config.metrics.listen = Some("127.0.0.1:0".to_owned());
    config.validate().expect("port 0 for both");
}

#[test]
fn cores_is_0_for_all_of_them_or_up_to_1024() {
    let mut config = valid();
    assert_eq!(config.server.cores, 0);
    assert_eq!(config.server.threads_per_kind(), None);
    for cores in [0, 1, 1024] {
        config.server.cores = cores;
        config.validate().expect("in range");
    }
    assert_eq!(config.server.threads_per_kind(), Some(1024));
    config.server.cores = 1025;
    let errors = config.validate().expect_err("out of range").to_string();
    assert!(
        errors.contains("server.cores: must be in 0..=1024, got 1025"),
        "{errors}"
    );
}

/// A `[server]` setting bounded at both ends: its default, its ends, and
/// the refusal one past the top.
struct Ranged {
    path: &'static str,
    default: u16,
    max: u16,
    get: fn(&Config) -> u16,
    set: fn(&mut Config, u16),
}

#[test]
fn ranged_server_settings_take_their_ends_and_refuse_past_them() {
    let ranged = [
        Ranged {
            path: "server.fanout_nice",
            default: 9,
            max: 19,
            get: |c| u16::from(c.server.fanout_nice),
            set: |c, v| c.server.fanout_nice = u8::try_from(v).expect("a niceness fits"),
        },
        Ranged {
            path: "server.defer_accept_secs",
            default: 1,
            max: 60,
            get: |c| c.server.defer_accept_secs,
            set: |c, v| c.server.defer_accept_secs = v,
        },
    ];
    for setting in ranged {
        let mut config = valid();
        assert_eq!((setting.get)(&config), setting.default, "{}", setting.path);
        for value in [0, setting.max] {
            (setting.set)(&mut config, value);
            config.validate().expect("in range");
        }
        (setting.set)(&mut config, setting.max + 1);
        let errors = config.validate().expect_err("out of range").to_string();
        let expected = format!(
            "{}: must be in 0..={}, got {}",
            setting.path,
            setting.max,
            setting.max + 1
        );
        assert!(errors.contains(&expected), "{errors}");
    }
}
