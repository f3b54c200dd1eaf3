//! Endpoints' attempts per minute on PostgreSQL, for the charts (docs/cluster.md): one row per
//! endpoint and minute, added to by every node's flusher (an upsert that sums the counts by
//! status name), trimmed to the last day.

use std::collections::BTreeMap;

use serde_json::Value;

use super::PgStore;
use crate::clock::Millis;
use crate::store::{Minute, StoreError};

const ADD: &str = "
INSERT INTO endpoint_minutes AS m (endpoint_id, minute, counts, latency_sum_ms, latency_max_ms)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (endpoint_id, minute) DO UPDATE SET
    counts = (SELECT coalesce(jsonb_object_agg(k, n), '{}'::jsonb) FROM (
        SELECT k, sum(v::bigint) AS n FROM (
            SELECT * FROM jsonb_each_text(m.counts)
            UNION ALL SELECT * FROM jsonb_each_text(EXCLUDED.counts)) AS e(k, v)
        GROUP BY k) AS s),
    latency_sum_ms = m.latency_sum_ms + EXCLUDED.latency_sum_ms,
    latency_max_ms = greatest(m.latency_max_ms, EXCLUDED.latency_max_ms)";

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl PgStore {
    pub async fn add_minutes(&self, mut minutes: Vec<(String, Minute)>) -> Result<(), StoreError> {
        if minutes.is_empty() {
            return Ok(());
        }
        // One order on every node: two flushes never wait for each other's rows in a cycle.
        minutes.sort_by(|a, b| (&a.0, a.1.at).cmp(&(&b.0, b.1.at)));
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        let add = tx.prepare(ADD).await?;
        for (endpoint_id, m) in &minutes {
            let counts: BTreeMap<&str, u32> = m.named_counts();
            let counts =
                serde_json::to_value(counts).map_err(|e| StoreError::Encode(e.to_string()))?;
            tx.execute(
                &add,
                &[
                    endpoint_id,
                    &m.at,
                    &counts,
                    &as_i64(m.latency_sum_ms),
                    &as_i64(m.latency_max_ms),
                ],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub async fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        let rows = self
            .db
            .client()
            .await?
            .query(
                "SELECT minute, counts, latency_sum_ms, latency_max_ms FROM endpoint_minutes
                 WHERE endpoint_id = $1 AND minute >= $2 ORDER BY minute",
                &[&endpoint_id, &from],
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let mut m = Minute {
                at: r.get(0),
                latency_sum_ms: u64::try_from(r.get::<_, i64>(2)).unwrap_or(0),
                latency_max_ms: u64::try_from(r.get::<_, i64>(3)).unwrap_or(0),
                ..Minute::default()
            };
            if let Value::Object(counts) = r.get::<_, Value>(1) {
                for (name, n) in counts {
                    m.set_named(&name, n.as_u64().unwrap_or(0));
                }
            }
            out.push(m);
        }
        Ok(out)
    }

    pub async fn trim_minutes(&self, before: Millis) -> Result<u64, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .execute("DELETE FROM endpoint_minutes WHERE minute < $1", &[&before])
            .await?)
    }
}
