//! WebSocket clients that read everything, answer pings (tungstenite does
//! on read), keep the last cursor and, in the churn scenario, reconnect
//! with it every so often: half the time with a clean close, half the time
//! by dropping the socket.

use anyhow::Context as _;
use futures_util::StreamExt as _;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::Ctx;
use super::flow::{self, CLOSE_WAIT, Flow};
use crate::frames;
use crate::rng::Rng;
use crate::target;

/// Read buffer per client connection: frames here are small, and 19,000
/// connections at the library's 128 KiB default would take 2.4 GiB.
const READ_BUFFER_BYTES: usize = 4096;

type Ws = WebSocketStream<TcpStream>;

/// A WebSocket client.
pub(super) struct WsClient(Ws);

impl flow::Client for WsClient {
    async fn open(
        ctx: &Ctx,
        i: usize,
        node: usize,
        user: &str,
        cursor: Option<&str>,
    ) -> anyhow::Result<Self> {
        let node = &ctx.nodes[node];
        let stream = target::connect(node.addr, ctx.source(i))
            .await
            .context("connect")?;
        let url = ctx.with_channels(i, node.target.url_for(user, ctx.cursor_arg(cursor)));
        let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER_BYTES);
        let (ws, _) = tokio_tungstenite::client_async_with_config(url, stream, Some(config))
            .await
            .context("websocket handshake")?;
        Ok(Self(ws))
    }

    async fn read(self, ctx: &Ctx, i: usize, cursor: &mut Option<String>, rng: &mut Rng) -> Flow {
        read(ctx, i, self.0, cursor, rng).await
    }
}

/// Reads until the connection ends; says what next.
async fn read(ctx: &Ctx, i: usize, mut ws: Ws, cursor: &mut Option<String>, rng: &mut Rng) -> Flow {
    let churn = tokio::time::sleep_until(flow::churn_at(ctx, rng));
    tokio::pin!(churn);
    let mut churning = ctx.spec.churn.is_some();
    loop {
        tokio::select! {
            biased;
            read = ws.next() => match read {
                Some(Ok(Message::Text(text))) => {
                    match flow::on_frame(ctx, i, frames::parse(text.as_bytes()), cursor) {
                        Flow::Continue => {}
                        Flow::Closed => {
                            drain(ctx, i, &mut ws, cursor).await;
                            return Flow::Closed;
                        }
                        other => return other,
                    }
                }
                Some(Ok(Message::Close(_))) => return Flow::Closed,
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    ctx.tally.borrow_mut().dropped();
                    return Flow::Dropped;
                }
            },
            () = &mut churn, if churning => {
                if flow::should_churn(ctx, i, cursor) {
                    if rng.next_u64() & 1 == 0 {
                        let _ = tokio::time::timeout(CLOSE_WAIT, ws.close(None)).await;
                        drain(ctx, i, &mut ws, cursor).await;
                    }
                    return Flow::Reconnect;
                }
                churning = false;
            }
            () = tokio::time::sleep_until(ctx.deadline) => return Flow::Closed,
        }
    }
}

/// After a close was sent or received: count what still arrives until the
/// socket ends or [`CLOSE_WAIT`] passes.
async fn drain(ctx: &Ctx, i: usize, ws: &mut Ws, cursor: &mut Option<String>) {
    let until = Instant::now() + CLOSE_WAIT;
    while let Ok(Some(Ok(message))) = tokio::time::timeout_at(until, ws.next()).await {
        if let Message::Text(text) = message {
            let _ = flow::on_frame(ctx, i, frames::parse(text.as_bytes()), cursor);
        }
    }
}
