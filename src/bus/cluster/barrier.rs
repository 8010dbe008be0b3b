//! A resume's wait for its barrier.
//!
//! The history read SPUBLISHes the barrier through the node's own channel
//! in the shard. If that channel's subscription was gone at that moment
//! (the shard's master failed over and the node had not subscribed again
//! yet), the barrier reaches nobody, and pub/sub keeps nothing. So each
//! time the shard is caught up after a loss (its subscriptions proven to
//! deliver again) while a resume waits, the barrier is sent again: sent
//! after the read, it still comes after every message the read covered.
//! A copy that comes after the first finds nobody waiting, and passes.
//!
//! Only the waiting lives here, over plain channels, so it is tested with
//! tokio's paused clock; the bus sends the barriers.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{oneshot, watch};

/// How long a resume waits for a shard's barrier to pass the fan-out. It
/// comes after every message the node received before it, so a node far
/// behind on delivering (a reconnect storm on a busy machine) takes
/// seconds; past this the shard resumes incomplete.
pub(crate) const LIMIT: Duration = Duration::from_secs(20);

/// Waits up to [`LIMIT`] for `arrival`, calling `send_again` whenever
/// `caught_up` (a count of the shard's catch-ups) moved since it was
/// taken, which is before the read was sent: a catch-up during the read
/// counts too. Whether the barrier arrived.
pub(crate) async fn wait<F, Fut>(
    mut arrival: oneshot::Receiver<()>,
    mut caught_up: watch::Receiver<u64>,
    mut send_again: F,
) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let waiting = async {
        let mut watching = true;
        loop {
            tokio::select! {
                arrived = &mut arrival => return arrived.is_ok(),
                changed = caught_up.changed(), if watching => match changed {
                    Ok(()) => send_again().await,
                    // The bus is going away: only the barrier is left.
                    Err(_) => watching = false,
                },
            }
        }
    };
    tokio::time::timeout(LIMIT, waiting).await.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A resume waiting for its barrier, its shard's catch-ups counted by
    /// `caught_up`: the wait, how often it sent the barrier again, and
    /// the barrier's own sender when the test delivers it (`answer_from:
    /// None`; else the `answer_from`th send again delivers it).
    fn waiter(
        caught_up: watch::Receiver<u64>,
        answer_from: Option<usize>,
    ) -> (
        impl Future<Output = bool>,
        Arc<AtomicUsize>,
        Option<oneshot::Sender<()>>,
    ) {
        let (tx, rx) = oneshot::channel();
        let (mut by_send, by_test) = match answer_from {
            Some(_) => (Some(tx), None),
            None => (None, Some(tx)),
        };
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&sent);
        let waiting = wait(rx, caught_up, move || {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            if answer_from.is_some_and(|from| n >= from)
                && let Some(tx) = by_send.take()
            {
                let _ = tx.send(());
            }
            async {}
        });
        (waiting, sent, by_test)
    }

    #[tokio::test(start_paused = true)]
    async fn a_barrier_that_arrives_is_not_sent_again() {
        let (_recovered, caught_up) = watch::channel(0);
        let (waiting, sent, barrier) = waiter(caught_up, None);
        barrier.expect("the test's").send(()).expect("waiting");
        assert!(waiting.await);
        assert_eq!(sent.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_barrier_is_sent_again_once_its_shard_is_caught_up() {
        let (recovered, caught_up) = watch::channel(0);
        let (waiting, sent, _) = waiter(caught_up, Some(1));
        let waiting = tokio::spawn(waiting);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(sent.load(Ordering::SeqCst), 0, "nothing caught up yet");
        recovered.send_modify(|n| *n += 1);
        let arrived = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("answered before the limit")
            .expect("joined");
        assert!(arrived);
        assert_eq!(sent.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_catch_up_before_the_wait_began_counts() {
        // The count was taken before the read; the catch-up came during it.
        let (recovered, caught_up) = watch::channel(0);
        recovered.send_modify(|n| *n += 1);
        let (waiting, sent, _) = waiter(caught_up, Some(1));
        assert!(waiting.await);
        assert_eq!(sent.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn each_catch_up_sends_it_again_until_it_arrives() {
        let (recovered, caught_up) = watch::channel(0);
        let (waiting, sent, _) = waiter(caught_up, Some(2));
        let waiting = tokio::spawn(waiting);
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            recovered.send_modify(|n| *n += 1);
        }
        assert!(waiting.await.expect("joined"));
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_barrier_or_a_catch_up_the_wait_ends_at_the_limit() {
        let (_recovered, caught_up) = watch::channel(0);
        let started = tokio::time::Instant::now();
        // The barrier's sender held, never used.
        let (waiting, sent, _barrier) = waiter(caught_up, None);
        assert!(!waiting.await);
        assert_eq!(started.elapsed(), LIMIT);
        assert_eq!(sent.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_bus_gone_leaves_the_wait_to_the_barrier() {
        let (recovered, caught_up) = watch::channel(0);
        drop(recovered);
        let (waiting, sent, barrier) = waiter(caught_up, None);
        let waiting = tokio::spawn(waiting);
        tokio::time::sleep(Duration::from_secs(1)).await;
        barrier.expect("the test's").send(()).expect("waiting");
        assert!(waiting.await.expect("joined"));
        assert_eq!(sent.load(Ordering::SeqCst), 0);
    }
}
