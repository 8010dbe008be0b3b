//! A paced drain (`[server] drain_spread_secs`): the `reconnect` frames of
//! 200 WebSocket clients arrive spread over the window, each client gets
//! exactly one with a cursor that covers what it received (no more: a
//! resume from it repeats nothing, even while a message is half way through
//! the fan-out), a client not told yet still receives what is published
//! meanwhile, and `run` returns within the drain timeout; parked long-polls
//! are answered over the same window.

mod support;

use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::future::join_all;
use pushgate::history::cursor::Cursor;
use pushgate::protocol::Transport;
use serde_json::json;
use support::Gateway;
use support::browser::{poll_frames, poll_path, spawn_get};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

const CLIENTS: usize = 200;
const SPREAD: Duration = Duration::from_secs(2);
const DRAIN_TIMEOUT_SECS: u64 = 6;
const WAIT: Duration = Duration::from_secs(20);

/// What one client saw from the start of the drain to its close.
#[derive(Debug)]
struct Seen {
    /// `reconnect` frames: (when, since the drain began; the frame).
    reconnects: Vec<(Duration, serde_json::Value)>,
    /// Sequence numbers of the messages received.
    messages: Vec<u64>,
    /// Frames received after the `reconnect` frame.
    after: usize,
}

fn seq_of(cursor: &serde_json::Value) -> u64 {
    cursor
        .as_str()
        .and_then(|c| c.parse::<Cursor>().ok())
        .unwrap_or_else(|| panic!("not a cursor: {cursor}"))
        .seq
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_spreads_reconnects_over_the_window_and_loses_nothing() {
    let mut c = support::config();
    c.server.drain_timeout_secs = DRAIN_TIMEOUT_SECS;
    c.server.drain_spread_secs = SPREAD.as_secs();
    let mut gw = Gateway::start(c).await;
    let clients = join_all((0..CLIENTS).map(|i| gw.connect_owned(format!("u{i}")))).await;
    support::ws::eventually(WAIT, "every client registered", || async {
        gw.state.inspect().connections == CLIENTS
    })
    .await;
    let before = gw.push(&json!({"to": "*", "data": "before"})).await;
    let before = seq_of(&before.json()["cursor"]);
    support::ws::eventually(WAIT, "`before` delivered to every client", || async {
        gw.state.inspect().position.seq >= before
    })
    .await;

    let began = Instant::now();
    let readers: Vec<_> = clients
        .into_iter()
        .map(|mut ws| {
            tokio::spawn(async move {
                let mut seen = Seen {
                    reconnects: Vec::new(),
                    messages: Vec::new(),
                    after: 0,
                };
                let deadline = began + WAIT;
                // Read to the end; tungstenite answers the close itself.
                while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline, ws.next()).await {
                    let Message::Text(text) = msg else { continue };
                    let frame: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                    if !seen.reconnects.is_empty() {
                        seen.after += 1;
                    }
                    match frame["type"].as_str() {
                        Some("message") => seen.messages.push(seq_of(&frame["cursor"])),
                        Some("reconnect") => seen.reconnects.push((began.elapsed(), frame)),
                        _ => {}
                    }
                }
                seen
            })
        })
        .collect();
    let run = gw.begin_stop();

    // A push every 100 ms through the window: a client not told yet still
    // gets them, and some are half way through the fan-out when a client
    // is told.
    let pusher = Gateway::attach(gw.addr);
    let pushed = tokio::spawn(async move {
        let mut seqs = Vec::new();
        let mut at = began;
        // Until shortly before the last client is told and the drain ends.
        while at < began + SPREAD * 3 / 4 {
            at += Duration::from_millis(100);
            tokio::time::sleep_until(at).await;
            let answer = pusher.push(&json!({"to": "*", "data": "during"})).await;
            assert_eq!(answer.status, 202, "a push is served while draining");
            seqs.push(seq_of(&answer.json()["cursor"]));
        }
        seqs
    });

    let mut at = Vec::with_capacity(CLIENTS);
    let mut seen_all = Vec::with_capacity(CLIENTS);
    for reader in join_all(readers).await {
        let seen = reader.expect("reader task");
        assert_eq!(seen.reconnects.len(), 1, "exactly one reconnect: {seen:?}");
        assert_eq!(seen.after, 0, "nothing after the reconnect: {seen:?}");
        let (when, frame) = &seen.reconnects[0];
        assert_eq!(frame["reason"], "draining", "{frame}");
        let retry = frame["retry_ms"].as_u64().expect("retry_ms");
        assert!((500..=1500).contains(&retry), "{frame}");
        // Resuming from the cursor neither repeats nor skips: it is the
        // last message received (every message is a broadcast).
        let cursor = seq_of(&frame["cursor"]);
        let last = seen.messages.iter().copied().max().expect("got `before`");
        assert_eq!(cursor, last, "{seen:?}");
        at.push(*when);
        seen_all.push(seen);
    }
    tokio::time::timeout(
        Duration::from_secs(DRAIN_TIMEOUT_SECS) + Duration::from_secs(2),
        run,
    )
    .await
    .expect("run returns within the drain timeout")
    .expect("no panic");

    // Spread, not all at once: the told times cover the window, and each
    // quarter of it holds about a quarter of the clients (generous bounds:
    // 25 % of 200 is 50).
    at.sort();
    let span = at[CLIENTS - 1] - at[0];
    assert!(span >= SPREAD * 3 / 4, "all within {span:?}: {at:?}");
    let quarter = SPREAD / 4;
    for q in 0..4u32 {
        let (from, to) = (quarter * q, quarter * (q + 1));
        let first = at.first().copied().unwrap_or_default();
        let n = at
            .iter()
            .filter(|t| **t - first >= from && (**t - first < to || q == 3))
            .count();
        assert!(
            (20..=80).contains(&n),
            "quarter {q}: {n} of {CLIENTS}: {at:?}"
        );
    }
    // Served until told: each client got every message up to its cursor,
    // in order, none missing; those told late got most of the pushes.
    let pushed = pushed.await.expect("the pushes during the drain");
    for seen in &seen_all {
        let cursor = seen.messages.last().copied().unwrap_or_default();
        let want: Vec<u64> = std::iter::once(before)
            .chain(pushed.iter().copied())
            .filter(|seq| *seq <= cursor)
            .collect();
        assert_eq!(seen.messages, want, "{seen:?}");
    }
    let late = seen_all
        .iter()
        .filter(|seen| seen.messages.len() > pushed.len() / 2)
        .count();
    assert!(
        (20..=180).contains(&late),
        "{late} clients got more than half of the pushes made during the drain"
    );
}

/// Parked long-polls are answered within the same spread: each with one
/// `reconnect` (reason `draining`), at times that cover the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_polls_are_answered_over_the_window() {
    const POLLS: usize = 40;
    let mut c = support::config();
    // Far longer than the test: only the drain can answer these polls.
    c.session.poll_timeout_secs = 30;
    c.session.session_ttl_secs = 60;
    c.server.drain_timeout_secs = DRAIN_TIMEOUT_SECS;
    c.server.drain_spread_secs = SPREAD.as_secs();
    let mut gw = Gateway::start(c).await;
    let began = std::sync::Arc::new(std::sync::OnceLock::<Instant>::new());
    let polls: Vec<_> = (0..POLLS)
        .map(|i| {
            let poll = spawn_get(gw.addr, poll_path(&format!("p{i}"), None), vec![]);
            let began = std::sync::Arc::clone(&began);
            tokio::spawn(async move {
                let answer = poll.await.expect("poll task");
                let at = began
                    .get()
                    .map(|b| b.elapsed())
                    .expect("answered after the drain began");
                (at, answer)
            })
        })
        .collect();
    support::ws::eventually(WAIT, "polls parked", || async {
        gw.state.inspect().of(Transport::Poll) == POLLS
    })
    .await;
    began.set(Instant::now()).expect("set once");
    let run = gw.begin_stop();
    let mut at = Vec::new();
    for poll in join_all(polls).await {
        let (when, answer) = poll.expect("poll");
        let frames = poll_frames(&answer);
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(frames[0]["type"], "reconnect");
        assert_eq!(frames[0]["reason"], "draining");
        assert!(frames[0]["cursor"].is_string(), "{frames:?}");
        at.push(when);
    }
    tokio::time::timeout(Duration::from_secs(DRAIN_TIMEOUT_SECS + 2), run)
        .await
        .expect("run returns within the drain timeout")
        .expect("no panic");
    at.sort();
    assert!(at[POLLS - 1] - at[0] >= SPREAD / 2, "{at:?}");
    assert!(at[POLLS - 1] < SPREAD + Duration::from_secs(1), "{at:?}");
    let first_half = at.iter().filter(|t| **t < SPREAD / 2).count();
    assert!(
        (8..=32).contains(&first_half),
        "{first_half} of {POLLS}: {at:?}"
    );
}
