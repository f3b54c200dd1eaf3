//! Quotas across nodes (docs/delivery-contract.md, docs/cluster.md): a counter row per account,
//! window kind and window number, taken with a conditional upsert, so the fixed windows hold
//! exactly however many nodes count at once (the row's lock serializes them). Both windows are
//! taken in one transaction: a delivery that fits the minute but not the day counts in neither.

use super::PgStore;
use herald_core::policy::quota::{Limits, Windows};
use herald_store::contract::Quotas;
use herald_store::StoreError;

/// Takes one from the counter unless it reached `limit`; `None` when it had.
const TAKE: &str = "INSERT INTO quota_counters AS q (account_id, kind, window_no, used)
     VALUES ($1, $2, $3, 1)
     ON CONFLICT (account_id, kind, window_no) DO UPDATE SET used = q.used + 1
         WHERE q.used < $4
     RETURNING used";

impl Quotas for PgStore {
    /// Counts one delivery in both windows if it fits `limits`; false (and nothing counted)
    /// if it does not.
    async fn quota_take(
        &self,
        account_id: &str,
        w: Windows,
        limits: Limits,
    ) -> Result<bool, StoreError> {
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        for (kind, window, limit) in [
            ("minute", w.minute, limits.per_minute),
            ("day", w.day, limits.per_day),
        ] {
            let limit = limit.map_or(i64::MAX, |l| l.min(i64::MAX as u64) as i64);
            if limit == 0 {
                return Ok(false);
            }
            let taken = tx
                .query_opt(TAKE, &[&account_id, &kind, &window, &limit])
                .await?;
            if taken.is_none() {
                // Dropping the transaction rolls back the other window's count.
                return Ok(false);
            }
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Sets the counts of the windows `w` ([`herald_store::contract::Accounts::set_quota_usage`]).
    async fn set_quota_usage(
        &self,
        account_id: &str,
        w: Windows,
        (minute, day): (u64, u64),
    ) -> Result<(), StoreError> {
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        for (kind, window, used) in [("minute", w.minute, minute), ("day", w.day, day)] {
            tx.execute(
                "INSERT INTO quota_counters (account_id, kind, window_no, used)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (account_id, kind, window_no) DO UPDATE SET used = excluded.used",
                &[&account_id, &kind, &window, &(used as i64)],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// This minute's and today's counts.
    async fn quota_usage(&self, account_id: &str, w: Windows) -> Result<(u64, u64), StoreError> {
        let rows = self
            .db
            .client()
            .await?
            .query(
                "SELECT kind, used FROM quota_counters WHERE account_id = $1
                   AND ((kind = 'minute' AND window_no = $2) OR (kind = 'day' AND window_no = $3))",
                &[&account_id, &w.minute, &w.day],
            )
            .await?;
        let (mut minute, mut day) = (0, 0);
        for r in rows {
            let (kind, used): (&str, i64) = (r.get(0), r.get(1));
            match kind {
                "minute" => minute = used as u64,
                _ => day = used as u64,
            }
        }
        Ok((minute, day))
    }
}
