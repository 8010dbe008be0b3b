//! `[limits] connection_rate`: new connections to the whole node past the
//! rate (and its burst) get `503 overloaded` with a `Retry-After` drawn at
//! random from `1..=connection_retry_spread_secs`, so refused clients do
//! not all come back in the same second; refusals are counted in
//! `pushgate_connections_refused_total{reason="node_rate"}`.

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use support::ws::metric;
use support::{config, raw_http, raw_status};
use tokio::sync::oneshot;

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: pushgate\r\nConnection: close\r\n\r\n";
/// Refusals sampled.
const SAMPLES: usize = 40;
/// `connection_retry_spread_secs` in this test.
const SPREAD_SECS: u64 = 10;

/// `pushgate_connections_refused_total{reason="node_rate"}` is one series
/// for the whole process: every test of this binary takes this lock while
/// it reads the series, so each reads an exact delta.
static NODE_RATE_SERIES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn header<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

async fn refused_total(metrics_addr: SocketAddr) -> f64 {
    let request = b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n";
    let text = raw_http(metrics_addr, request).await;
    let series = "pushgate_connections_refused_total{reason=\"node_rate\"}";
    metric(&text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

#[tokio::test]
async fn past_the_node_rate_connections_get_503_with_spread_retry_after() {
    let _series = NODE_RATE_SERIES.lock().await;
    let mut config = config();
    config.limits.connection_rate = 1;
    config.limits.connection_burst = 2;
    config.limits.connection_retry_spread_secs = SPREAD_SECS;
    // Metrics on their own listener, which the node rate does not cover.
    config.metrics.listen = Some("127.0.0.1:0".into());
    config.validate().expect("valid");
    let server = pushgate::Server::bind(config).await.expect("bind");
    let (addr, metrics_addr) = (server.local_addr(), server.metrics_addr().expect("metrics"));
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let before = refused_total(metrics_addr).await;

    for n in 0..2 {
        assert_eq!(raw_status(&raw_http(addr, HEALTHZ).await), 200, "burst {n}");
    }
    let mut retry_after = Vec::new();
    let mut admitted = 0;
    while retry_after.len() < SAMPLES {
        let answer = raw_http(addr, HEALTHZ).await;
        if raw_status(&answer) == 200 {
            // The rate refills one connection a second.
            admitted += 1;
            assert!(admitted <= 5, "admitted past the rate: {answer}");
            continue;
        }
        assert_eq!(raw_status(&answer), 503, "{answer}");
        let (_, body) = answer.split_once("\r\n\r\n").expect("a body");
        let body: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(body["error"]["code"], "overloaded", "{answer}");
        assert!(body["error"]["message"].is_string(), "{answer}");
        assert_eq!(header(&answer, "content-type"), Some("application/json"));
        let secs: u64 = header(&answer, "retry-after")
            .unwrap_or_else(|| panic!("no retry-after: {answer}"))
            .parse()
            .expect("whole seconds");
        assert!((1..=SPREAD_SECS).contains(&secs), "retry-after {secs}");
        retry_after.push(secs);
    }
    let distinct: BTreeSet<u64> = retry_after.iter().copied().collect();
    assert!(
        distinct.len() >= 3,
        "retry-after not spread over 1..={SPREAD_SECS}: {retry_after:?}"
    );
    // Every refusal seen, and nothing else, is counted.
    let counted = refused_total(metrics_addr).await - before;
    assert_eq!(counted, SAMPLES as f64, "refusals counted, {SAMPLES} seen");
}

#[tokio::test]
async fn a_node_rate_of_zero_refuses_nothing() {
    let _series = NODE_RATE_SERIES.lock().await;
    let mut config = config();
    config.limits.connection_rate = 0;
    let gw = support::Gateway::start(config).await;
    let before = refused_total(gw.addr).await;
    for n in 0..200 {
        assert_eq!(raw_status(&raw_http(gw.addr, HEALTHZ).await), 200, "{n}");
    }
    assert_eq!(refused_total(gw.addr).await - before, 0.0, "none counted");
}
