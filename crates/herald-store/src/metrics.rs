//! What a store counts itself, for herald's metrics (`GET /metrics`): events ingested, and its
//! commits (events per commit) and their syncs (an fsync on one box, a commit's statement in a
//! cluster). The store takes a handle of these, not herald's whole set of metrics.

use std::sync::atomic::AtomicU64;

use herald_core::histogram::{Histogram, BATCH_BUCKETS, LATENCY_BUCKETS};

pub struct StoreMetrics {
    /// Events stored (duplicates and repeats not counted).
    pub events_ingested: AtomicU64,
    /// Events acknowledged by one commit.
    pub commit_batch_size: Histogram,
    /// Seconds a commit's flush and sync took.
    pub fsync_duration: Histogram,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            events_ingested: AtomicU64::new(0),
            commit_batch_size: Histogram::new(&BATCH_BUCKETS),
            fsync_duration: Histogram::new(&LATENCY_BUCKETS),
        }
    }
}
