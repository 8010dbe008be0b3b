//! Server-sent-event clients: a GET that stays open, events decoded from a
//! chunked (or close-delimited) body, the cursor kept from each message.

use std::ops::ControlFlow;

use anyhow::{Context as _, bail};

use super::flow::{self, Flow};
use super::{Ctx, Node};
use crate::frames;
use crate::http::{self, Chunked, HttpConn};
use crate::rng::Rng;
use crate::sse::Parser;
use crate::target;

/// An open event stream: the connection and its body decoder.
pub(super) struct SseClient {
    conn: HttpConn,
    chunked: Option<Chunked>,
}

impl flow::Client for SseClient {
    async fn open(
        ctx: &Ctx,
        i: usize,
        node: usize,
        user: &str,
        cursor: Option<&str>,
    ) -> anyhow::Result<Self> {
        open(ctx, i, &ctx.nodes[node], user, cursor).await
    }

    async fn read(self, ctx: &Ctx, i: usize, cursor: &mut Option<String>, rng: &mut Rng) -> Flow {
        read(ctx, i, self, cursor, rng).await
    }
}

async fn open(
    ctx: &Ctx,
    i: usize,
    node: &Node,
    user: &str,
    cursor: Option<&str>,
) -> anyhow::Result<SseClient> {
    let stream = target::connect(node.addr, ctx.source(i))
        .await
        .context("connect")?;
    let mut conn = HttpConn::new(stream);
    let path = ctx.with_channels(i, node.target.path_for(user, ctx.cursor_arg(cursor)));
    let request = http::request(
        "GET",
        &path,
        &node.target.host_header(),
        &[("Accept", "text/event-stream")],
        b"",
    );
    conn.send(&request).await.context("send request")?;
    let head = conn.read_head().await?;
    if head.status != 200 {
        bail!("event stream answered {}", head.status);
    }
    let chunked = head.is_chunked().then(Chunked::default);
    Ok(SseClient { conn, chunked })
}

async fn read(
    ctx: &Ctx,
    i: usize,
    mut stream: SseClient,
    cursor: &mut Option<String>,
    rng: &mut Rng,
) -> Flow {
    let mut parser = Parser::default();
    let mut decoded = Vec::new();
    let churn = tokio::time::sleep_until(flow::churn_at(ctx, rng));
    tokio::pin!(churn);
    let mut churning = ctx.spec.churn.is_some();
    loop {
        let buf = stream.conn.buffered();
        match &mut stream.chunked {
            Some(decoder) => {
                if let Err(err) = decoder.feed(buf, &mut decoded) {
                    ctx.tally.borrow_mut().error(&format!("{err:#}"));
                    return Flow::Closed;
                }
            }
            None => decoded.append(buf),
        }
        let fed = parser.feed(&decoded, |event| {
            match flow::on_frame(ctx, i, frames::parse(event.data), cursor) {
                Flow::Continue => ControlFlow::Continue(()),
                other => ControlFlow::Break(other),
            }
        });
        decoded.clear();
        if let ControlFlow::Break(other) = fed {
            return other;
        }
        tokio::select! {
            biased;
            read = stream.conn.fill() => if !matches!(read, Ok(n) if n > 0) {
                ctx.tally.borrow_mut().dropped();
                return Flow::Dropped;
            },
            () = &mut churn, if churning => {
                if flow::should_churn(ctx, i, cursor) {
                    return Flow::Reconnect;
                }
                churning = false;
            }
            () = tokio::time::sleep_until(ctx.deadline) => return Flow::Closed,
        }
    }
}
