//! The next-due index: which pending deliveries are due when, kept in memory.
//!
//! sled holds the durable `queue` tree; polling it would cost a range scan per tick. The index is
//! rebuilt from that tree at start-up and then fed by whoever makes a delivery due (the committer
//! after an fsync, the engine after an attempt), so the engine only sleeps until the earliest entry
//! or until [`DueIndex::insert`] wakes it.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::clock::Millis;

#[derive(Debug, Default)]
pub struct DueIndex {
    set: Mutex<BTreeSet<(Millis, String)>>,
    changed: Notify,
}

impl DueIndex {
    pub fn insert(&self, due: Millis, delivery_id: String) {
        self.lock().insert((due, delivery_id));
        // A stored permit when nobody waits: the engine cannot miss a wake-up.
        self.changed.notify_one();
    }

    pub fn insert_many(&self, entries: impl IntoIterator<Item = (Millis, String)>) {
        let mut set = self.lock();
        let before = set.len();
        set.extend(entries);
        let grew = set.len() != before;
        drop(set);
        if grew {
            self.changed.notify_one();
        }
    }

    pub fn remove(&self, due: Millis, delivery_id: &str) {
        self.lock().remove(&(due, delivery_id.to_string()));
    }

    /// Takes up to `max` entries due at or before `now`, earliest first.
    pub fn pop_due(&self, now: Millis, max: usize) -> Vec<(Millis, String)> {
        let mut set = self.lock();
        let mut out = Vec::new();
        while out.len() < max {
            match set.first() {
                Some((due, _)) if *due <= now => out.extend(set.pop_first()),
                _ => break,
            }
        }
        out
    }

    pub fn next_due(&self) -> Option<Millis> {
        self.lock().first().map(|(due, _)| *due)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves when an entry was added since the last call.
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<(Millis, String)>> {
        self.set.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_only_what_is_due_in_order() {
        let d = DueIndex::default();
        d.insert(30, "c".into());
        d.insert(10, "a".into());
        d.insert(20, "b".into());
        assert_eq!(d.next_due(), Some(10));
        assert_eq!(
            d.pop_due(20, 10),
            vec![(10, "a".to_string()), (20, "b".to_string())]
        );
        assert_eq!(d.pop_due(20, 10), vec![]);
        assert_eq!(d.len(), 1);
        d.remove(30, "c");
        assert!(d.is_empty());
    }
}
