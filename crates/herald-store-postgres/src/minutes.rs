//! Endpoints' attempts per minute and per hour on PostgreSQL, for the charts (docs/cluster.md):
//! one row per endpoint and minute (`endpoint_minutes`) and per endpoint and hour
//! (`endpoint_hours`), added to by every node's flusher (one transaction per flush, an upsert
//! per table that sums the counts by status name and the latency buckets), trimmed to the last
//! day and the last week by a range of the time index.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::Value;

use super::PgStore;
use herald_core::clock::Millis;
use herald_store::contract::Minutes;
use herald_store::{Minute, StoreError};

/// Adds a flush's rows to `table` (its time column `time`) in one statement, whatever their
/// number: the rows come as arrays, one per column, each (endpoint, time) at most once (an
/// upsert cannot change a row twice). Adds to the rows of endpoints that exist (and of `''`,
/// [`herald_store::NOT_SENT`], the decisions that sent no request): an endpoint
/// deleted (its account purged) since a node counted its attempts gets no row back. Each
/// endpoint's row is key-share locked, so a delete of it waits for the flush (whose rows the
/// purge's delete of the minutes, later, then sees) or the flush waits for the delete and finds
/// it gone. Latency buckets (JSON arrays of counts by bucket index) add index by index.
fn add_statement(table: &str, time: &str) -> String {
    format!(
        "
INSERT INTO {table} AS m (endpoint_id, {time}, counts, latency_sum_ms, latency_max_ms,
                          latency_buckets)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::jsonb[], $4::bigint[], $5::bigint[],
                     $6::jsonb[])
              AS t(endpoint_id, {time}, counts, latency_sum_ms, latency_max_ms, latency_buckets)
WHERE t.endpoint_id = '' OR EXISTS (SELECT 1 FROM endpoints e WHERE e.id = t.endpoint_id
                                   FOR KEY SHARE)
ON CONFLICT (endpoint_id, {time}) DO UPDATE SET
    counts = (SELECT coalesce(jsonb_object_agg(k, n), '{{}}'::jsonb) FROM (
        SELECT k, sum(v::bigint) AS n FROM (
            SELECT * FROM jsonb_each_text(m.counts)
            UNION ALL SELECT * FROM jsonb_each_text(EXCLUDED.counts)) AS e(k, v)
        GROUP BY k) AS s),
    latency_sum_ms = m.latency_sum_ms + EXCLUDED.latency_sum_ms,
    latency_max_ms = greatest(m.latency_max_ms, EXCLUDED.latency_max_ms),
    latency_buckets = (SELECT coalesce(jsonb_agg(coalesce(a::bigint, 0) + coalesce(b::bigint, 0)
                                                 ORDER BY i), '[]'::jsonb)
        FROM ROWS FROM (jsonb_array_elements_text(m.latency_buckets),
                        jsonb_array_elements_text(EXCLUDED.latency_buckets))
             WITH ORDINALITY AS u(a, b, i))"
    )
}

static ADD_MINUTES: LazyLock<String> =
    LazyLock::new(|| add_statement("endpoint_minutes", "minute"));
static ADD_HOURS: LazyLock<String> = LazyLock::new(|| add_statement("endpoint_hours", "hour"));

/// A row of `endpoint_minutes` (`endpoint_hours`) as a minute (an hour): its start, its counts
/// by status name, its latency sum and max, and its latency buckets.
fn minute_of(at: Millis, counts: Value, sum: i64, max: i64, buckets: Value) -> Minute {
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
    if let Value::Array(buckets) = buckets {
        m.set_buckets(buckets.iter().map(|n| n.as_u64().unwrap_or(0)));
    }
    m
}

/// Rows keyed by (endpoint, time), as [`add_statement`]'s arrays: one per column.
type Columns = (
    Vec<String>,
    Vec<Millis>,
    Vec<Value>,
    Vec<i64>,
    Vec<i64>,
    Vec<Value>,
);

fn columns(rows: BTreeMap<(String, Millis), Minute>) -> Result<Columns, StoreError> {
    let n = rows.len();
    let mut c: Columns = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let json =
        |v: Result<Value, serde_json::Error>| v.map_err(|e| StoreError::Encode(e.to_string()));
    for ((endpoint_id, at), m) in rows {
        c.0.push(endpoint_id);
        c.1.push(at);
        c.2.push(json(serde_json::to_value(m.named_counts()))?);
        c.3.push(as_i64(m.latency_sum_ms));
        c.4.push(as_i64(m.latency_max_ms));
        c.5.push(json(serde_json::to_value(m.stored_buckets()))?);
    }
    Ok(c)
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Minutes for PgStore {
    /// One transaction per flush: a statement for the minutes, then one for the hours
    /// ([`add_statement`]), their rows in one order on every node (endpoint, then time), so two
    /// nodes' flushes never wait for each other's rows in a cycle.
    async fn add_minutes(&self, minutes: Vec<(String, Minute)>) -> Result<(), StoreError> {
        if minutes.is_empty() {
            return Ok(());
        }
        let mut by_minute: BTreeMap<(String, Millis), Minute> = BTreeMap::new();
        let mut by_hour: BTreeMap<(String, Millis), Minute> = BTreeMap::new();
        for (endpoint_id, m) in minutes {
            let hour = m.at - m.at.rem_euclid(Minute::HOUR_MS);
            for (rows, at) in [(&mut by_hour, hour), (&mut by_minute, m.at)] {
                rows.entry((endpoint_id.clone(), at))
                    .or_insert_with(|| Minute {
                        at,
                        ..Minute::default()
                    })
                    .add(&m);
            }
        }
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        for (statement, rows) in [(&*ADD_MINUTES, by_minute), (&*ADD_HOURS, by_hour)] {
            let (ids, ats, counts, sums, maxes, buckets) = columns(rows)?;
            tx.execute(statement, &[&ids, &ats, &counts, &sums, &maxes, &buckets])
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        self.endpoint_rows(
            "SELECT minute, counts, latency_sum_ms, latency_max_ms, latency_buckets
             FROM endpoint_minutes WHERE endpoint_id = $1 AND minute >= $2 ORDER BY minute",
            endpoint_id,
            from,
        )
        .await
    }

    async fn endpoint_hours(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        self.endpoint_rows(
            "SELECT hour, counts, latency_sum_ms, latency_max_ms, latency_buckets
             FROM endpoint_hours WHERE endpoint_id = $1 AND hour >= $2 ORDER BY hour",
            endpoint_id,
            from,
        )
        .await
    }

    async fn hours_since(&self, from: Millis) -> Result<Vec<(String, Minute)>, StoreError> {
        self.rows_since(
            "SELECT endpoint_id, hour, counts, latency_sum_ms, latency_max_ms, latency_buckets
             FROM endpoint_hours WHERE hour >= $1",
            from,
        )
        .await
    }

    async fn trim_hours(&self, before: Millis) -> Result<u64, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .execute("DELETE FROM endpoint_hours WHERE hour < $1", &[&before])
            .await?)
    }

    async fn minutes_since(&self, from: Millis) -> Result<Vec<(String, Minute)>, StoreError> {
        self.rows_since(
            "SELECT endpoint_id, minute, counts, latency_sum_ms, latency_max_ms, latency_buckets
             FROM endpoint_minutes WHERE minute >= $1",
            from,
        )
        .await
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
    /// [`add_statement`]'s, and for the same reasons).
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

impl PgStore {
    /// Every endpoint's chart rows from `from` on, by `query` (the endpoint, the row's time,
    /// counts, latency sum, max and buckets, from `$1`).
    async fn rows_since(
        &self,
        query: &str,
        from: Millis,
    ) -> Result<Vec<(String, Minute)>, StoreError> {
        let rows = self.db.client().await?.query(query, &[&from]).await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    minute_of(r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)),
                )
            })
            .collect())
    }

    /// An endpoint's chart rows from `from` on, by `query` (its time, counts, latency sum, max
    /// and buckets, for the endpoint `$1` from `$2`).
    async fn endpoint_rows(
        &self,
        query: &str,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        let rows = self
            .db
            .client()
            .await?
            .query(query, &[&endpoint_id, &from])
            .await?;
        Ok(rows
            .iter()
            .map(|r| minute_of(r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect())
    }
}

/// Keeps each endpoint's last success, the later of the kept one and the given one, for
/// endpoints that exist (key-share locked, as [`add_statement`]'s).
const KEEP_SUCCESSES: &str = "
INSERT INTO endpoint_successes AS s (endpoint_id, at)
SELECT * FROM unnest($1::text[], $2::bigint[]) AS t(endpoint_id, at)
WHERE EXISTS (SELECT 1 FROM endpoints e WHERE e.id = t.endpoint_id FOR KEY SHARE)
ON CONFLICT (endpoint_id) DO UPDATE SET at = greatest(s.at, EXCLUDED.at)";
