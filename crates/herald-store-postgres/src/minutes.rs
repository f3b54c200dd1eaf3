//! Endpoints' attempts per minute on PostgreSQL, for the charts (docs/cluster.md): one row per
//! endpoint and minute, added to by every node's flusher (one upsert per flush that sums the
//! counts by status name), trimmed to the last day by a range of the `minute` index.

use std::collections::BTreeMap;

use serde_json::Value;

use super::PgStore;
use herald_core::clock::Millis;
use herald_store::contract::Minutes;
use herald_store::{Minute, StoreError};

/// Adds a flush's rows in one statement, whatever their number: the rows come as arrays, one
/// per column, each (endpoint, minute) at most once (an upsert cannot change a row twice).
/// Adds to the minutes of endpoints that exist: an endpoint deleted (its account purged)
/// since a node counted its attempts gets no row back. Each endpoint's row is key-share locked,
/// so a delete of it waits for the flush (whose rows the purge's delete of the minutes, later,
/// then sees) or the flush waits for the delete and finds it gone.
const ADD: &str = "
INSERT INTO endpoint_minutes AS m (endpoint_id, minute, counts, latency_sum_ms, latency_max_ms)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::jsonb[], $4::bigint[], $5::bigint[])
              AS t(endpoint_id, minute, counts, latency_sum_ms, latency_max_ms)
WHERE EXISTS (SELECT 1 FROM endpoints e WHERE e.id = t.endpoint_id FOR KEY SHARE)
ON CONFLICT (endpoint_id, minute) DO UPDATE SET
    counts = (SELECT coalesce(jsonb_object_agg(k, n), '{}'::jsonb) FROM (
        SELECT k, sum(v::bigint) AS n FROM (
            SELECT * FROM jsonb_each_text(m.counts)
            UNION ALL SELECT * FROM jsonb_each_text(EXCLUDED.counts)) AS e(k, v)
        GROUP BY k) AS s),
    latency_sum_ms = m.latency_sum_ms + EXCLUDED.latency_sum_ms,
    latency_max_ms = greatest(m.latency_max_ms, EXCLUDED.latency_max_ms)";

/// A row of `endpoint_minutes` as a minute: its start, its counts by status name, its latency
/// sum and max.
fn minute_of(at: Millis, counts: Value, sum: i64, max: i64) -> Minute {
    let mut m = Minute {
        at,
        latency_sum_ms: u64::try_from(sum).unwrap_or(0),
        latency_max_ms: u64::try_from(max).unwrap_or(0),
        ..Minute::default()
    };
    if let Value::Object(counts) = counts {
        for (name, n) in counts {
            m.set_named(&name, n.as_u64().unwrap_or(0));
        }
    }
    m
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Minutes for PgStore {
    /// One statement per flush ([`ADD`]), its rows in one order on every node (endpoint, then
    /// minute), so two nodes' flushes never wait for each other's rows in a cycle.
    async fn add_minutes(&self, minutes: Vec<(String, Minute)>) -> Result<(), StoreError> {
        if minutes.is_empty() {
            return Ok(());
        }
        let mut merged: BTreeMap<(String, Millis), Minute> = BTreeMap::new();
        for (endpoint_id, m) in minutes {
            merged
                .entry((endpoint_id, m.at))
                .or_insert_with(|| Minute {
                    at: m.at,
                    ..Minute::default()
                })
                .add(&m);
        }
        let n = merged.len();
        let (mut ids, mut ats, mut counts, mut sums, mut maxes) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for ((endpoint_id, at), m) in merged {
            let named: BTreeMap<&str, u32> = m.named_counts();
            counts
                .push(serde_json::to_value(named).map_err(|e| StoreError::Encode(e.to_string()))?);
            ids.push(endpoint_id);
            ats.push(at);
            sums.push(as_i64(m.latency_sum_ms));
            maxes.push(as_i64(m.latency_max_ms));
        }
        self.db
            .client()
            .await?
            .execute(ADD, &[&ids, &ats, &counts, &sums, &maxes])
            .await?;
        Ok(())
    }

    async fn endpoint_minutes(
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
        Ok(rows
            .iter()
            .map(|r| minute_of(r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect())
    }

    async fn minutes_since(&self, from: Millis) -> Result<Vec<(String, Minute)>, StoreError> {
        let rows = self
            .db
            .client()
            .await?
            .query(
                "SELECT endpoint_id, minute, counts, latency_sum_ms, latency_max_ms
                 FROM endpoint_minutes WHERE minute >= $1",
                &[&from],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    minute_of(r.get(1), r.get(2), r.get(3), r.get(4)),
                )
            })
            .collect())
    }

    async fn trim_minutes(&self, before: Millis) -> Result<u64, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .execute("DELETE FROM endpoint_minutes WHERE minute < $1", &[&before])
            .await?)
    }

    /// One statement per flush, the newest time per endpoint, rows in endpoint order (as
    /// [`ADD`], and for the same reasons).
    async fn keep_last_successes(
        &self,
        successes: Vec<(String, Millis)>,
    ) -> Result<(), StoreError> {
        let mut newest: BTreeMap<String, Millis> = BTreeMap::new();
        for (endpoint_id, at) in successes {
            let kept = newest.entry(endpoint_id).or_insert(at);
            *kept = (*kept).max(at);
        }
        if newest.is_empty() {
            return Ok(());
        }
        let (ids, ats): (Vec<String>, Vec<Millis>) = newest.into_iter().unzip();
        self.db
            .client()
            .await?
            .execute(KEEP_SUCCESSES, &[&ids, &ats])
            .await?;
        Ok(())
    }

    async fn last_success(&self, endpoint_id: &str) -> Result<Option<Millis>, StoreError> {
        let row = self
            .db
            .client()
            .await?
            .query_opt(
                "SELECT at FROM endpoint_successes WHERE endpoint_id = $1",
                &[&endpoint_id],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }
}

/// Keeps each endpoint's last success, the later of the kept one and the given one, for
/// endpoints that exist (key-share locked, as [`ADD`]).
const KEEP_SUCCESSES: &str = "
INSERT INTO endpoint_successes AS s (endpoint_id, at)
SELECT * FROM unnest($1::text[], $2::bigint[]) AS t(endpoint_id, at)
WHERE EXISTS (SELECT 1 FROM endpoints e WHERE e.id = t.endpoint_id FOR KEY SHARE)
ON CONFLICT (endpoint_id) DO UPDATE SET at = greatest(s.at, EXCLUDED.at)";
