//! Idempotency keys: a push id seen within the window is not delivered
//! again.
//!
//! Every key lives for the same window, so insertion order is expiry order
//! and a plain FIFO finds the expired ones at its head.

use std::collections::{HashMap, VecDeque};

/// Push ids seen recently, each with what its first push returned.
#[derive(Debug)]
pub struct Dedupe<V> {
    seen: HashMap<String, V>,
    order: VecDeque<(u64, String)>,
    window_ms: u64,
}

impl<V: Clone> Dedupe<V> {
    /// Remembers ids for `window_ms`.
    pub fn new(window_ms: u64) -> Self {
        Self {
            seen: HashMap::new(),
            order: VecDeque::new(),
            window_ms,
        }
    }

    /// What the first push with `id` returned, if it is within the window.
    pub fn get(&mut self, id: &str, now_ms: u64) -> Option<V> {
        self.expire(now_ms);
        self.seen.get(id).cloned()
    }

    /// Records `id` as pushed at `now_ms`.
    pub fn insert(&mut self, id: String, now_ms: u64, value: V) {
        self.order
            .push_back((now_ms.saturating_add(self.window_ms), id.clone()));
        self.seen.insert(id, value);
    }

    /// Forgets ids whose window has passed.
    pub fn expire(&mut self, now_ms: u64) {
        while let Some((until, _)) = self.order.front() {
            if *until > now_ms {
                break;
            }
            if let Some((_, id)) = self.order.pop_front() {
                self.seen.remove(&id);
            }
        }
    }

    /// Ids remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_remembered_for_the_window_and_then_forgotten() {
        let mut d = Dedupe::new(100);
        assert_eq!(d.get("a", 0), None);
        d.insert("a".into(), 0, 1);
        d.insert("b".into(), 50, 2);
        assert_eq!(d.len(), 2);
        assert!(!d.is_empty());
        assert_eq!(d.get("a", 99), Some(1));
        assert_eq!(d.get("a", 100), None);
        assert_eq!(d.get("b", 100), Some(2));
        assert_eq!(d.len(), 1);
        d.expire(150);
        assert!(d.is_empty());
    }
}
