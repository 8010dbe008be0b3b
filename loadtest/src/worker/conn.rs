//! The dispatcher of connection tasks and the life of a reconnecting
//! client; the pieces the transports share are in [`super::flow`].

use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use super::Ctx;
use super::flow::{
    CONNECT_TIMEOUT, Client, Flow, backoff, first_attempt, reconnect_failed, rng_for, told_delay,
};
use super::protocol::Kind;

/// A connection lived at least this long counts as healthy: its
/// reconnect back-off starts over.
const HEALTHY_LIFE: Duration = Duration::from_secs(1);

/// Runs local connection `i` until it ends.
pub(super) async fn run(ctx: Rc<Ctx>, i: usize) {
    ctx.pace().await;
    match ctx.spec.kind {
        Kind::Ws => reconnecting::<super::ws::WsClient>(&ctx, i).await,
        Kind::Sse => reconnecting::<super::sse::SseClient>(&ctx, i).await,
        Kind::Poll => super::poll::run(&ctx, i).await,
        Kind::Silent => super::silent::run(&ctx, i).await,
    }
}

/// The life of reconnecting client `i`: open, read, and reconnect with the
/// cursor when the flow says so (churn, a `reconnect` frame, or a drop
/// while churning or failing over), with a bounded back-off after
/// failures. With failover, a drop or a failed reconnect moves the client
/// to the next node (paced: a drop or a drain only).
async fn reconnecting<C: Client>(ctx: &Ctx, i: usize) {
    let user = ctx.user(i);
    let mut rng = rng_for(ctx, i);
    let mut node = ctx.home(i);
    let mut cursor: Option<String> = None;
    let mut first = true;
    let mut failures = 0;
    loop {
        let (opened, took) = {
            let _permit = ctx.gate.acquire().await;
            let started = Instant::now();
            let opened = tokio::time::timeout(
                CONNECT_TIMEOUT,
                C::open(ctx, i, node, &user, cursor.as_deref()),
            )
            .await;
            (opened, started.elapsed())
        };
        let opened = opened
            .map_err(|_| anyhow::anyhow!("handshake timed out"))
            .and_then(|r| r);
        let client = match opened {
            Ok(client) => client,
            Err(err) if first => return first_attempt(ctx, i, Err(format!("{err:#}"))),
            Err(err) => {
                failures += 1;
                // A paced client (pushgate.js behind a load balancer)
                // retries where it is: a drop or a drain moves it off a
                // node, a refusal does not send it back to one that went
                // away.
                if !ctx.spec.paced {
                    node = ctx.next_node(node);
                }
                if reconnect_failed(ctx, failures, &format!("{err:#}")).await {
                    continue;
                }
                return;
            }
        };
        if first {
            first_attempt(ctx, i, Ok(took));
            first = false;
        } else {
            ctx.tally.borrow_mut().reconnected(true);
        }
        let opened_at = Instant::now();
        let flow = client.read(ctx, i, &mut cursor, &mut rng).await;
        if opened_at.elapsed() >= HEALTHY_LIFE {
            failures = 0;
        }
        match flow {
            Flow::Reconnect => {}
            Flow::Told { .. } if !ctx.spec.paced => {}
            Flow::Told { retry_ms, draining } => {
                if draining {
                    node = ctx.next_node(node);
                }
                tokio::time::sleep(told_delay(retry_ms, &mut rng)).await;
            }
            Flow::Dropped if ctx.spec.churn.is_some() || ctx.spec.failover => {
                failures += 1;
                node = ctx.next_node(node);
                if !backoff(ctx, failures).await {
                    return;
                }
            }
            Flow::Continue | Flow::Dropped | Flow::Closed => return,
        }
    }
}
