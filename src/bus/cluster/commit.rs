//! Group commit of publishes, shard by shard: the pushes that reach a
//! shard while its publish script is in flight go together in its next
//! script.
//!
//! A shard's messages are numbered by one counter on one master, so its
//! publishes run one after another there whatever the gateway does. What
//! the gateway can spare that master is the work around each publish: a
//! request read and answered, a script started, the failover guard, the
//! clock and the age watermark read, a replication record. One script per
//! batch pays those once (`publish.lua`). A push that finds its shard idle
//! goes at once: a batch is only ever what queued behind a script in
//! flight, so nothing waits for company.

use redis::cluster_async::ClusterConnection;
use redis::{Script, ScriptInvocation};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::batch::{Arg, Committed, Run, Settings, ShardKeys, ShardPush, answers, fits, layout};
use super::shards::Shards;
use crate::bus::deadline::{self, BrokerClock};

/// Where a publish queues for its shard.
type Queue = mpsc::UnboundedSender<Queued>;

/// The per-shard queues, each drained by its own task.
#[derive(Debug)]
pub(super) struct Committer {
    queues: Vec<Queue>,
}

impl Committer {
    /// Starts one task per shard of `shards` (held by `tasks`), each
    /// running `script` on `conn` with its shard's clock from `clocks`
    /// (each publish's deadline).
    pub(super) fn start(
        conn: &ClusterConnection,
        script: &Script,
        shards: &Shards,
        clocks: Vec<BrokerClock>,
        history_size: usize,
        ttl_ms: u64,
        tasks: &mut JoinSet<()>,
    ) -> Self {
        let queues = clocks
            .into_iter()
            .enumerate()
            .map(|(shard, clock)| {
                let (tx, rx) = mpsc::unbounded_channel();
                let keys = ShardKeys {
                    seq: shards.seq(shard),
                    epoch: shards.epoch(shard),
                    aged: shards.aged(shard),
                    times: shards.times(shard),
                    writer: shards.writer(shard),
                    batches: shards.batches(shard),
                };
                let settings = Settings {
                    history_size,
                    ttl_ms,
                    // Past the longest the gateway waits for the answer
                    // (the budget and half again), twice over.
                    batch_key_ms: crate::clamp::millis(clock.budget() * 3),
                };
                tasks.spawn(drain(
                    conn.clone(),
                    script.clone(),
                    keys,
                    settings,
                    clock,
                    rx,
                ));
                tx
            })
            .collect();
        Self { queues }
    }

    /// Publishes `push` in `shard`: queued behind the shard's script in
    /// flight, if any, and sent with the others that queued meanwhile.
    pub(super) async fn commit(&self, shard: usize, push: ShardPush) -> Committed {
        let (tx, rx) = oneshot::channel();
        let queue = self
            .queues
            .get(shard)
            .ok_or_else(|| format!("no shard {shard}"))?;
        queue
            .send((push, tx))
            .map_err(|_| "the shard's publisher stopped".to_owned())?;
        rx.await
            .map_err(|_| "the shard's publisher stopped".to_owned())?
    }
}

/// A push waiting for its shard's script, and who waits for its answer.
type Queued = (ShardPush, oneshot::Sender<Committed>);

/// One shard's publisher: takes what has queued (as much as [`fits`]),
/// runs it as one script, answers each push, and goes on.
async fn drain(
    mut conn: ClusterConnection,
    script: Script,
    keys: ShardKeys,
    settings: Settings,
    clock: BrokerClock,
    mut queue: mpsc::UnboundedReceiver<Queued>,
) {
    // A push that did not fit the last batch: the first of the next.
    let mut carried: Option<Queued> = None;
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match queue.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let mut streams = first.0.streams();
        let mut batch = vec![first];
        while let Ok(next) = queue.try_recv() {
            if !fits(batch.len(), streams, &next.0) {
                carried = Some(next);
                break;
            }
            streams += next.0.streams();
            batch.push(next);
        }
        let (pushes, waiters): (Vec<ShardPush>, Vec<_>) = batch.into_iter().unzip();
        metrics::histogram!(crate::metrics::names::BUS_PUBLISH_BATCH_PUSHES)
            .record(pushes.len() as f64);
        let epoch = format!("{:016x}", rand::random::<u64>());
        let key = format!("{}{:016x}", keys.batches, rand::random::<u64>());
        let sent_ms = deadline::now_ms();
        let run = Run {
            epoch: &epoch,
            key: &key,
            deadline: u64::try_from(clock.deadline(sent_ms)).unwrap_or(0),
        };
        let invocation = invocation(&script, &keys, settings, run, &pushes);
        let reply: redis::RedisResult<(i64, Vec<(i64, String)>)> =
            invocation.invoke_async(&mut conn).await;
        let reply = reply
            .map(|(clock, answers)| (answers, clock))
            .map_err(|err| err.to_string());
        let reply = clock.settle(reply, sent_ms);
        for (waiter, answer) in waiters.into_iter().zip(answers(reply, pushes.len())) {
            // A push whose caller went away needs no answer.
            let _ = waiter.send(answer);
        }
    }
}

/// The invocation of `script` for `pushes`.
fn invocation<'a>(
    script: &'a Script,
    keys: &ShardKeys,
    settings: Settings,
    run: Run<'_>,
    pushes: &[ShardPush],
) -> ScriptInvocation<'a> {
    let (names, args) = layout(keys, settings, run, pushes);
    let mut invocation = script.prepare_invoke();
    for name in names {
        invocation.key(name);
    }
    for arg in args {
        match arg {
            Arg::Bytes(bytes) => invocation.arg(bytes),
            Arg::Number(n) => invocation.arg(n),
        };
    }
    invocation
}
