//! Endpoints' circuit breakers on PostgreSQL, shared by every node (docs/cluster.md): one row per
//! endpoint that has failed since its last success, changed only under the row's lock, so the
//! cluster counts failures together, opens a breaker once (one node sees the transition and
//! reports it) and sends one probe (the row records until when it is out).
//!
//! Each node keeps a copy of the rows it has read, so an attempt to a healthy endpoint costs no
//! query; a change is announced with a `b:` + endpoint id notice, and the nodes that hear it drop
//! their copy and read the row again when they next need it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::{PgStore, CHANGED_CHANNEL, DUE_CHANNEL};
use herald_core::clock::Millis;
use herald_core::policy::breaker::{Breaker, Phase};
use herald_store::contract::Breakers;
use herald_store::StoreError;

/// This node's copies of breakers and a count of the notices heard: a row read while a notice
/// came may be older than the notice, so it is not kept.
#[derive(Default)]
pub struct BreakerCopies {
    kept: std::sync::Mutex<HashMap<String, Breaker>>,
    notices: std::sync::atomic::AtomicU64,
}

impl BreakerCopies {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Breaker>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `b` unless a notice came since `seen`.
    fn keep(&self, endpoint_id: &str, b: Breaker, seen: u64) {
        let mut kept = self.lock();
        if self.notices.load(Ordering::Acquire) == seen {
            kept.insert(endpoint_id.to_string(), b);
        } else {
            kept.remove(endpoint_id);
        }
    }

    /// Another node changed the endpoint's breaker (`None`: any may have changed).
    pub(super) fn forget(&self, endpoint_id: Option<&str>) {
        let mut kept = self.lock();
        self.notices.fetch_add(1, Ordering::AcqRel);
        match endpoint_id {
            Some(id) => {
                kept.remove(id);
            }
            None => kept.clear(),
        }
    }
}

fn decode(endpoint_id: &str, record: serde_json::Value) -> Result<Breaker, StoreError> {
    serde_json::from_value(record)
        .map_err(|e| StoreError::Corrupt(format!("breaker of {endpoint_id}: {e}")))
}

impl Breakers for PgStore {
    /// An endpoint's breaker (closed, never failed, when it has no row): this node's copy, or
    /// the row.
    async fn breaker(&self, endpoint_id: &str) -> Result<Breaker, StoreError> {
        if let Some(b) = self.breakers.lock().get(endpoint_id) {
            return Ok(*b);
        }
        let seen = self.breakers.notices.load(Ordering::Acquire);
        let row = self
            .db
            .client()
            .await?
            .query_opt(
                "SELECT record FROM breakers WHERE endpoint_id = $1",
                &[&endpoint_id],
            )
            .await?;
        let b = match row {
            Some(r) => decode(endpoint_id, r.get(0))?,
            None => Breaker::default(),
        };
        self.breakers.keep(endpoint_id, b, seen);
        Ok(b)
    }

    /// Changes an endpoint's breaker with `f` under its row's lock. A change is written and
    /// announced to the other nodes; when the breaker closes, the endpoint's deliveries it held
    /// are due at once (`now`), for every node.
    async fn change_breaker<T>(
        &self,
        endpoint_id: &str,
        now: Millis,
        f: impl FnOnce(&mut Breaker) -> T,
    ) -> Result<T, StoreError> {
        let seen = self.breakers.notices.load(Ordering::Acquire);
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        // Inserts the closed state if there is no row, so the lock holds either way; a change
        // that leaves the breaker as it was rolls that back.
        let closed = serde_json::to_value(Breaker::default())
            .map_err(|e| StoreError::Encode(e.to_string()))?;
        let row = tx
            .query_one(
                "INSERT INTO breakers (endpoint_id, record) VALUES ($1, $2)
                 ON CONFLICT (endpoint_id) DO UPDATE SET record = breakers.record
                 RETURNING record",
                &[&endpoint_id, &closed],
            )
            .await?;
        let was = decode(endpoint_id, row.get(0))?;
        let mut b = was;
        let out = f(&mut b);
        if b == was {
            tx.rollback().await?;
            self.breakers.keep(endpoint_id, b, seen);
            return Ok(out);
        }
        let notice = format!("b:{endpoint_id}");
        if b == Breaker::default() {
            tx.execute(
                "WITH gone AS (DELETE FROM breakers WHERE endpoint_id = $1)
                 SELECT pg_notify($2, $3)",
                &[&endpoint_id, &CHANGED_CHANNEL, &notice],
            )
            .await?;
        } else {
            let record = serde_json::to_value(b).map_err(|e| StoreError::Encode(e.to_string()))?;
            tx.execute(
                "WITH changed AS (UPDATE breakers SET record = $2 WHERE endpoint_id = $1)
                 SELECT pg_notify($3, $4)",
                &[&endpoint_id, &record, &CHANGED_CHANNEL, &notice],
            )
            .await?;
        }
        if was.phase != Phase::Closed && b.phase == Phase::Closed {
            // Held deliveries wait (`due_at`) past their own time (`next_attempt_at`) until
            // the probe the breaker expected; it closed, so they go now.
            tx.execute(
                "WITH due AS (
                     UPDATE deliveries SET due_at = $2
                     WHERE endpoint_id = $1 AND state = 'pending' AND leased_by IS NULL
                       AND due_at > $2 AND next_attempt_at <= $2 RETURNING 1)
                 SELECT pg_notify($3, '') WHERE EXISTS (SELECT 1 FROM due)",
                &[&endpoint_id, &now, &DUE_CHANNEL],
            )
            .await?;
        }
        tx.commit().await?;
        self.breakers.keep(endpoint_id, b, seen);
        Ok(out)
    }

    /// Every breaker that is not closed, by endpoint id.
    async fn open_breakers(&self) -> Result<Vec<(String, Breaker)>, StoreError> {
        let rows = self
            .db
            .client()
            .await?
            .query(
                "SELECT endpoint_id, record FROM breakers WHERE record->>'phase' <> 'closed'",
                &[],
            )
            .await?;
        rows.into_iter()
            .map(|r| {
                let id: String = r.get(0);
                let b = decode(&id, r.get(1))?;
                Ok((id, b))
            })
            .collect()
    }
}
