//! The in-process bus: one gateway, no broker.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;

use super::{Bus, BusError, Publish, Published};
use crate::api::push::PushTarget;
use crate::history::Cursor;
use crate::metrics::Counters;
use crate::session::Registry;
use crate::transport::frame::{Frame, StreamKind};

/// Delivers pushes to this process's connections.
///
/// Numbering and fan-out happen under one lock, so every connection
/// receives messages in sequence order and a cursor taken from any frame
/// covers everything before it.
#[derive(Debug)]
pub struct MemoryBus {
    epoch: u64,
    last_seq: Mutex<u64>,
    registry: Arc<Registry>,
    counters: Counters,
}

impl MemoryBus {
    /// A bus over `registry`, with a fresh random epoch (in-memory history
    /// does not survive a restart, so older cursors must not match).
    pub fn new(registry: Arc<Registry>, counters: Counters) -> Self {
        Self {
            epoch: rand::random(),
            last_seq: Mutex::new(0),
            registry,
            counters,
        }
    }

    fn publish_now(&self, message: Publish) -> Published {
        let mut last_seq = self.last_seq.lock();
        *last_seq += 1;
        let cursor = Cursor::new(self.epoch, *last_seq);
        let stream = match message.target {
            PushTarget::Broadcast => StreamKind::Broadcast,
            PushTarget::Users(_) => StreamKind::User,
        };
        let frame = Frame::message(&message.id, &cursor.to_string(), stream, &message.data);
        let users = match &message.target {
            PushTarget::Broadcast => {
                self.registry.broadcast(&frame);
                self.counters.published_broadcast.increment(1);
                0
            }
            PushTarget::Users(users) => {
                self.registry.send_to(users, &frame);
                self.counters.published_user.increment(1);
                users.len()
            }
        };
        drop(last_seq);
        Published {
            id: message.id,
            cursor,
            users,
            duplicate: false,
        }
    }
}

impl Bus for MemoryBus {
    fn publish(&self, message: Publish) -> BoxFuture<'_, Result<Published, BusError>> {
        let published = self.publish_now(message);
        Box::pin(async move { Ok(published) })
    }

    fn is_ready(&self) -> bool {
        true
    }

    fn position(&self) -> Cursor {
        Cursor::new(self.epoch, *self.last_seq.lock())
    }
}
