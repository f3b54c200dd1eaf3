//! Retention on PostgreSQL (docs/api.md, docs/cluster.md): the log is pruned in bounded batches,
//! each its own short transaction, so a sweep never holds locks on much at once and any node may
//! run one (two nodes pruning together each skip the other's rows). An event goes once it is older
//! than the retention and none of its deliveries is pending; its deliveries and their attempts go
//! with it, in the same statement. Idempotency keys outlive their window by nothing; ended debounce
//! windows and quota counters of past windows are dropped.

use std::sync::atomic::{AtomicBool, Ordering};

use super::PgStore;
use herald_core::clock::Millis;
use herald_core::ids;
use herald_store::contract::Retention;
use herald_store::{Retained, StoreError, Swept, IDEMPOTENCY_WINDOW_MS};

impl PgStore {
    /// Removes up to `max` ended events received before `cutoff` (with their deliveries,
    /// attempts and idempotency keys: a key whose event is gone claims nothing). Returns how
    /// many went.
    pub async fn prune_events(&self, cutoff: Millis, max: i64) -> Result<u64, StoreError> {
        let below = ids::ulid_floor(cutoff).to_be_bytes().to_vec();
        Ok(self
            .db
            .client()
            .await?
            .query_one(
                "WITH gone AS (
                     DELETE FROM events WHERE id IN (
                         SELECT e.id FROM events e
                         WHERE e.id < $1 AND NOT EXISTS (
                             SELECT 1 FROM deliveries d
                             WHERE d.event_id = e.id AND d.state = 'pending')
                         ORDER BY e.id LIMIT $2
                         FOR UPDATE SKIP LOCKED)
                     RETURNING id
                 ), deliveries_gone AS (
                     DELETE FROM deliveries d USING gone WHERE d.event_id = gone.id
                     RETURNING d.id
                 ), attempts_gone AS (
                     DELETE FROM attempts a USING deliveries_gone g WHERE a.delivery_id = g.id
                 ), keys AS (
                     DELETE FROM idempotency_keys k USING gone WHERE k.event_id = gone.id
                 )
                 SELECT count(*) FROM gone",
                &[&below, &max],
            )
            .await?
            .get::<_, i64>(0) as u64)
    }

    /// Removes up to `max` idempotency keys past their window, debounce windows that ended, and
    /// quota counters of windows before the current ones. Returns how many keys went.
    pub async fn prune_keys(&self, now: Millis, max: i64) -> Result<u64, StoreError> {
        let client = self.db.client().await?;
        let keys = client
            .execute(
                "DELETE FROM idempotency_keys WHERE (account_id, key) IN (
                     SELECT account_id, key FROM idempotency_keys WHERE created_at <= $1
                     LIMIT $2 FOR UPDATE SKIP LOCKED)",
                &[&(now - IDEMPOTENCY_WINDOW_MS), &max],
            )
            .await?;
        client
            .execute(
                "DELETE FROM debounce_windows WHERE key IN (
                     SELECT key FROM debounce_windows WHERE ends_at < $1
                     LIMIT $2 FOR UPDATE SKIP LOCKED)",
                &[&now, &max],
            )
            .await?;
        let w = herald_core::policy::quota::windows(now);
        client
            .execute(
                "DELETE FROM quota_counters WHERE (account_id, kind, window_no) IN (
                     SELECT account_id, kind, window_no FROM quota_counters
                     WHERE (kind = 'minute' AND window_no < $1) OR (kind = 'day' AND window_no < $2)
                     LIMIT $3 FOR UPDATE SKIP LOCKED)",
                &[&w.minute, &w.day, &max],
            )
            .await?;
        Ok(keys)
    }
}

/// Rows a retention slice removes.
const PRUNE_SLICE: i64 = 1_000;

/// Runs `slice` until it removes fewer than a slice's worth, fails (logged), or `stop` is set;
/// returns how many rows it removed.
async fn in_slices<F>(stop: &AtomicBool, mut slice: impl FnMut() -> F) -> u64
where
    F: std::future::Future<Output = Result<u64, StoreError>>,
{
    let mut removed = 0;
    while !stop.load(Ordering::Acquire) {
        match slice().await {
            Ok(n) => {
                removed += n;
                if n < PRUNE_SLICE as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "retention sweep failed");
                break;
            }
        }
    }
    removed
}

impl Retention for PgStore {
    /// The sweep as of `now` ([`herald_store::contract::Retention::sweep`]): events, then keys
    /// and windows, then portal sessions, each in slices that skip rows other nodes hold, so
    /// several nodes sweeping at once share the work.
    async fn sweep(&self, now: Millis, retained: Retained, stop: &AtomicBool) -> Swept {
        let cutoff = now - retained.retention_ms;
        let mut swept = Swept {
            events: in_slices(stop, || self.prune_events(cutoff, PRUNE_SLICE)).await,
            ..Swept::default()
        };
        swept.other = in_slices(stop, || self.prune_keys(now, PRUNE_SLICE)).await;
        match self.prune_portal_sessions(now, PRUNE_SLICE).await {
            Ok(n) => swept.other += n,
            Err(e) => tracing::error!(error = %e, "retention sweep failed"),
        }
        swept.other += in_slices(stop, || self.prune_api_answers(now, PRUNE_SLICE)).await;
        swept
    }
}
