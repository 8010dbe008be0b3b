//! Long-poll clients: poll, count what the answer holds, poll again at once
//! with the cursor (over the same keep-alive connection), until every
//! expected message is in; then hold the connection, unpolled, until the
//! worker exits.
//!
//! Gateways that answer one message per poll and name it by HTTP cache
//! headers (Nchan: `Last-Modified` and `Etag`) get them back on the next
//! poll as `If-Modified-Since` and `If-None-Match`, as a browser's
//! long-poll client does, so no message between two polls is skipped.

use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::time::Instant;

use super::Ctx;
use super::flow::{self, CONNECT_TIMEOUT, Flow};
use crate::frames;
use crate::http::{self, HttpConn};
use crate::target;

/// Runs long-poll client `i`. With failover, a failed poll (its node went
/// away) polls the next node with the cursor.
pub(super) async fn run(ctx: &Ctx, i: usize) {
    let user = ctx.user(i);
    let mut node = ctx.home(i);
    let mut cursor: Option<String> = None;
    let mut validators = Validators::default();
    let mut conn: Option<HttpConn> = None;
    let mut first = true;
    let mut failures = 0;
    let is_done = || ctx.spec.expect > 0 && ctx.tally.borrow().is_complete(i);
    while !ctx.is_past_deadline() && !is_done() {
        let mut started = Instant::now();
        let mut current = match conn.take() {
            Some(c) => c,
            None => {
                let connected = {
                    let _permit = ctx.gate.acquire().await;
                    started = Instant::now();
                    let addr = ctx.nodes[node].addr;
                    tokio::time::timeout(CONNECT_TIMEOUT, target::connect(addr, ctx.source(i)))
                        .await
                };
                match connected {
                    Ok(Ok(stream)) => HttpConn::new(stream),
                    failed => {
                        let err = match failed {
                            Ok(Err(err)) => format!("connect: {err}"),
                            _ => "connect timed out".to_owned(),
                        };
                        if first {
                            return flow::first_attempt(ctx, i, Err(err));
                        }
                        failures += 1;
                        node = ctx.next_node(node);
                        if flow::reconnect_failed(ctx, failures, &err).await {
                            continue;
                        }
                        return;
                    }
                }
            }
        };
        let target = &ctx.nodes[node].target;
        let path = ctx.with_channels(i, target.path_for(&user, ctx.cursor_arg(cursor.as_deref())));
        let mut headers = vec![("Accept", "application/json")];
        if let Some(v) = &validators.last_modified {
            headers.push(("If-Modified-Since", v));
        }
        if let Some(v) = &validators.etag {
            headers.push(("If-None-Match", v));
        }
        let request = http::request("GET", &path, &target.host_header(), &headers, b"");
        if let Err(err) = current.send(&request).await {
            if first {
                return flow::first_attempt(ctx, i, Err(format!("send: {err}")));
            }
            continue;
        }
        if first {
            // A poll counts as open once its request is out: from here it
            // is parked at the server.
            flow::first_attempt(ctx, i, Ok(started.elapsed()));
            first = false;
        }
        let answer = tokio::time::timeout_at(ctx.deadline, exchange(&mut current)).await;
        let Ok(answer) = answer else { return };
        match answer {
            Ok((body, keep_alive, next)) => {
                failures = 0;
                if next.last_modified.is_some() || next.etag.is_some() {
                    validators = next;
                }
                for frame in frames::parse_array(&body) {
                    if flow::on_frame(ctx, i, frame, &mut cursor) == Flow::Closed {
                        return;
                    }
                }
                if keep_alive {
                    conn = Some(current);
                }
                if is_done() {
                    // A real client would poll again; this one has what it
                    // came for. Its connection stays open until the worker
                    // exits rather than closing amid the fan-out.
                    ctx.finished.borrow_mut().extend(conn.take());
                    return;
                }
            }
            Err(err) => {
                failures += 1;
                node = ctx.next_node(node);
                if !flow::reconnect_failed(ctx, failures, &format!("{err:#}")).await {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// What names the last message a poll got, for the next poll.
#[derive(Debug, Default)]
struct Validators {
    /// The answer's `Last-Modified`, sent back as `If-Modified-Since`.
    last_modified: Option<String>,
    /// The answer's `Etag`, sent back as `If-None-Match`.
    etag: Option<String>,
}

/// Reads one poll answer: its body, whether the connection stays open,
/// and its cache validators.
async fn exchange(conn: &mut HttpConn) -> anyhow::Result<(Vec<u8>, bool, Validators)> {
    let head = conn.read_head().await.context("poll answer")?;
    let body = conn.read_body(&head).await?;
    if head.status != 200 {
        bail!("poll answered {}", head.status);
    }
    let validators = Validators {
        last_modified: head.header("last-modified").map(str::to_owned),
        etag: head.header("etag").map(str::to_owned),
    };
    Ok((body, !head.is_closing(), validators))
}
