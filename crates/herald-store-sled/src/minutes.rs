//! Endpoints' attempts per minute and per hour on the embedded store, for the charts: one row
//! per endpoint and minute (the `minutes` tree) and per endpoint and hour (the `hours` tree)
//! with attempts, holding its counts as JSON by status name, its latency sum and max, and its
//! sent attempts by latency bucket. Rows are added to by the engine's flusher every few seconds
//! (a flush adds each minute to its row and to its hour's) and trimmed: minutes to the last
//! day, hours to the last week.
//!
//! A row's key is its group (a minute's hour, an hour's day), the endpoint id, a NUL and the
//! row's time (all as order-preserving big-endian numbers, [`time_bytes`]): time first, so
//! trimming the past removes a key range (whole groups, and the rows of the one group the cut
//! falls in) instead of scanning every endpoint's rows, and an endpoint's rows of one group are
//! one key range, so reading an endpoint's last day of minutes is a range per hour (25 of
//! them), and its last week of hours a range per day (8), whatever the number of endpoints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::blocking;
use super::SledStore;
use herald_core::clock::Millis;
use herald_store::contract::Minutes;
use herald_store::{Minute, StoreError, NOT_SENT};

/// The rows of an hour sit together ([`key`]).
const HOUR_MS: Millis = 3_600_000;
const DAY_MS: Millis = 24 * HOUR_MS;

/// Which rows: a minute's (grouped by hour) or an hour's (grouped by day).
#[derive(Clone, Copy)]
struct Span {
    /// The length of a row's period.
    period: Millis,
    /// The length of the group its key starts with.
    group: Millis,
}

const MINUTES: Span = Span {
    period: Minute::MS,
    group: HOUR_MS,
};
const HOURS: Span = Span {
    period: HOUR_MS,
    group: DAY_MS,
};

#[derive(Serialize, Deserialize, Default)]
struct Row {
    counts: BTreeMap<String, u64>,
    latency_sum_ms: u64,
    latency_max_ms: u64,
    /// Sent attempts by latency bucket ([`Minute::stored_buckets`]); absent in rows of format
    /// 13 and before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    latency_buckets: Vec<u64>,
}

/// A time as 8 bytes that sort as the times do (the sign bit flipped, big-endian).
fn time_bytes(at: Millis) -> [u8; 8] {
    ((at as u64) ^ (1 << 63)).to_be_bytes()
}

fn time_of(bytes: &[u8]) -> Option<Millis> {
    let b: [u8; 8] = bytes.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as Millis)
}

/// The start of the period of length `len` that `at` is in (saturating: [`Millis::MIN`] reads
/// from the first row).
fn start_of(at: Millis, len: Millis) -> Millis {
    at.saturating_sub(at.rem_euclid(len))
}

/// The start of the hour `at` is in.
fn hour_of(at: Millis) -> Millis {
    start_of(at, HOUR_MS)
}

/// The row of the endpoint's minute starting at `at`: its hour, the endpoint id, a NUL, `at`.
pub(super) fn key(endpoint_id: &str, at: Millis) -> Vec<u8> {
    span_key(MINUTES, endpoint_id, at)
}

/// The row of the endpoint's period of `span` starting at `at`: its group, the endpoint id, a
/// NUL, `at`.
fn span_key(span: Span, endpoint_id: &str, at: Millis) -> Vec<u8> {
    let mut k = endpoint_prefix(start_of(at, span.group), endpoint_id);
    k.extend_from_slice(&time_bytes(at));
    k
}

/// The start of the endpoint's rows in the group starting at `group`.
fn endpoint_prefix(group: Millis, endpoint_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(endpoint_id.len() + 17);
    k.extend_from_slice(&time_bytes(group));
    k.extend_from_slice(endpoint_id.as_bytes());
    k.push(0);
    k
}

/// The minute's start from a key (`None` for a key that is not one of this tree's).
pub(super) fn at_of(key: &[u8]) -> Option<Millis> {
    time_of(key.get(key.len().checked_sub(8)?..)?)
}

/// The endpoint id from a key: between the hour and the NUL before the minute.
fn endpoint_of(key: &[u8]) -> Option<String> {
    let id = key.get(8..key.len().checked_sub(9)?)?;
    String::from_utf8(id.to_vec()).ok()
}

/// The group (the hour, the day) from a key.
fn group_of_key(key: &[u8]) -> Option<Millis> {
    time_of(key.get(..8)?)
}

fn decode(at: Millis, bytes: &[u8]) -> Result<Minute, StoreError> {
    let row: Row = serde_json::from_slice(bytes)
        .map_err(|e| StoreError::Corrupt(format!("minute row: {e}")))?;
    let mut m = Minute {
        at,
        latency_sum_ms: row.latency_sum_ms,
        latency_max_ms: row.latency_max_ms,
        ..Minute::default()
    };
    for (name, n) in &row.counts {
        m.set_named(name, *n);
    }
    m.set_buckets(row.latency_buckets);
    Ok(m)
}

fn encode(m: &Minute) -> Result<Vec<u8>, StoreError> {
    let row = Row {
        counts: m
            .named_counts()
            .into_iter()
            .map(|(k, v)| (k.to_string(), u64::from(v)))
            .collect(),
        latency_sum_ms: m.latency_sum_ms,
        latency_max_ms: m.latency_max_ms,
        latency_buckets: m.stored_buckets().into_iter().map(u64::from).collect(),
    };
    serde_json::to_vec(&row).map_err(|e| StoreError::Encode(e.to_string()))
}

/// A kept last success: the time as 8 big-endian bytes.
fn success_of(v: &[u8]) -> Result<Millis, StoreError> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| StoreError::Corrupt("an endpoint's last success".into()))?;
    Ok(i64::from_be_bytes(b))
}

/// Rows removed per sled batch when trimming.
const TRIM_BATCH: usize = 1000;

impl SledStore {
    pub fn add_minutes(&self, minutes: Vec<(String, Minute)>) -> Result<(), StoreError> {
        let trees = &self.inner.trees;
        // Only endpoints that exist, looked at under the lock their deletes take: a delete (a
        // purge) comes after, and its account's minutes are dropped after it, or before, and
        // none is added.
        let _endpoints = self.lock_endpoint_writes();
        for (endpoint_id, m) in minutes {
            if endpoint_id != NOT_SENT && self.directory.endpoint(&endpoint_id).is_none() {
                continue;
            }
            add_row(&trees.minutes, MINUTES, &endpoint_id, &m)?;
            add_row(&trees.hours, HOURS, &endpoint_id, &m)?;
        }
        Ok(())
    }

    /// Keeps each endpoint's last success, the later of the kept one and the given one, for
    /// endpoints that exist (under the lock their deletes take, as [`Self::add_minutes`]).
    pub fn keep_last_successes(&self, successes: Vec<(String, Millis)>) -> Result<(), StoreError> {
        let tree = &self.inner.trees.successes;
        {
            let _endpoints = self.lock_endpoint_writes();
            for (endpoint_id, at) in successes {
                if self.directory.endpoint(&endpoint_id).is_none() {
                    continue;
                }
                tree.fetch_and_update(endpoint_id.as_bytes(), |old| {
                    let kept = old.and_then(|v| success_of(v).ok());
                    Some(kept.map_or(at, |k| k.max(at)).to_be_bytes().to_vec())
                })?;
            }
        }
        Ok(())
    }

    pub fn last_success(&self, endpoint_id: &str) -> Result<Option<Millis>, StoreError> {
        match self.inner.trees.successes.get(endpoint_id.as_bytes())? {
            Some(v) => success_of(&v).map(Some),
            None => Ok(None),
        }
    }

    /// Removes a deleted endpoint's last success.
    pub(super) fn forget_last_success(&self, endpoint_id: &str) -> Result<(), StoreError> {
        self.inner.trees.successes.remove(endpoint_id.as_bytes())?;
        Ok(())
    }

    pub fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        endpoint_rows(&self.inner.trees.minutes, MINUTES, endpoint_id, from)
    }

    pub fn endpoint_hours(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        endpoint_rows(&self.inner.trees.hours, HOURS, endpoint_id, from)
    }

    /// Every endpoint's rows from the minute starting at `from` on: one range, from the start of
    /// `from`'s hour (rows are keyed hour first).
    pub fn minutes_since(&self, from: Millis) -> Result<Vec<(String, Minute)>, StoreError> {
        rows_since(&self.inner.trees.minutes, MINUTES, from)
    }

    /// Every endpoint's hours from the one starting at `from` on: one range, from the start of
    /// `from`'s day.
    pub fn hours_since(&self, from: Millis) -> Result<Vec<(String, Minute)>, StoreError> {
        rows_since(&self.inner.trees.hours, HOURS, from)
    }

    pub fn trim_minutes(&self, before: Millis) -> Result<u64, StoreError> {
        trim(&self.inner.trees.minutes, MINUTES, before)
    }

    pub fn trim_hours(&self, before: Millis) -> Result<u64, StoreError> {
        trim(&self.inner.trees.hours, HOURS, before)
    }

    /// Drops an endpoint's minutes and hours (its account was purged).
    pub(super) fn drop_minutes(&self, endpoint_id: &str) -> Result<(), StoreError> {
        for (tree, span) in [
            (&self.inner.trees.minutes, MINUTES),
            (&self.inner.trees.hours, HOURS),
        ] {
            let mut batch = sled::Batch::default();
            each_endpoint_row(tree, span, endpoint_id, Millis::MIN, |k, _| {
                batch.remove(k);
                Ok(())
            })?;
            tree.apply_batch(batch)?;
        }
        Ok(())
    }
}

/// Adds `m` to the endpoint's row of `span` it falls in: read, add, write back only if nobody
/// wrote meanwhile (one flusher per process writes; the loop only guards against a purge or a
/// trim in between).
fn add_row(tree: &sled::Tree, span: Span, endpoint_id: &str, m: &Minute) -> Result<(), StoreError> {
    let at = start_of(m.at, span.period);
    let k = span_key(span, endpoint_id, at);
    loop {
        let old = tree.get(&k)?;
        let mut sum = match &old {
            Some(v) => decode(at, v)?,
            None => Minute {
                at,
                ..Minute::default()
            },
        };
        sum.add(m);
        let new = encode(&sum)?;
        if tree.compare_and_swap(&k, old, Some(new))?.is_ok() {
            return Ok(());
        }
    }
}

/// Every endpoint's rows of `span` from the one starting at `from` on: one range, from the
/// start of `from`'s group.
fn rows_since(
    tree: &sled::Tree,
    span: Span,
    from: Millis,
) -> Result<Vec<(String, Minute)>, StoreError> {
    let mut out = Vec::new();
    for item in tree.range(time_bytes(start_of(from, span.group)).to_vec()..) {
        let (k, v) = item?;
        let (Some(at), Some(id)) = (at_of(&k), endpoint_of(&k)) else {
            continue;
        };
        if at >= from {
            out.push((id, decode(at, &v)?));
        }
    }
    Ok(out)
}

/// The endpoint's rows of `span` from the one starting at `from` on, oldest first.
fn endpoint_rows(
    tree: &sled::Tree,
    span: Span,
    endpoint_id: &str,
    from: Millis,
) -> Result<Vec<Minute>, StoreError> {
    let mut out = Vec::new();
    each_endpoint_row(tree, span, endpoint_id, from, |k, v| {
        if let Some(at) = at_of(k) {
            out.push(decode(at, v)?);
        }
        Ok(())
    })?;
    Ok(out)
}

/// Calls `f` with each of the endpoint's rows of `span` from the one starting at `from` on,
/// oldest first: for each group that has rows (found by one seek), the endpoint's range in it.
fn each_endpoint_row(
    tree: &sled::Tree,
    span: Span,
    endpoint_id: &str,
    from: Millis,
    mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut group = start_of(from, span.group);
    loop {
        let Some(item) = tree.range(time_bytes(group)..).next() else {
            return Ok(());
        };
        let (first, _) = item?;
        group = group_of_key(&first).ok_or_else(|| StoreError::Corrupt("chart row key".into()))?;
        let prefix = endpoint_prefix(group, endpoint_id);
        let mut start = prefix.clone();
        start.extend_from_slice(&time_bytes(from.max(group)));
        let mut end = prefix;
        if let Some(nul) = end.last_mut() {
            *nul = 1;
        }
        for item in tree.range(start..end) {
            let (k, v) = item?;
            f(&k, &v)?;
        }
        match group.checked_add(span.group) {
            Some(next) => group = next,
            None => return Ok(()),
        }
    }
}

/// Drops every row of `span` that starts before `before`; how many went.
fn trim(tree: &sled::Tree, span: Span, before: Millis) -> Result<u64, StoreError> {
    let cut = start_of(before, span.group);
    let mut gone = 0;
    // Whole groups before the cut's, then the rows of the cut's group that start before it.
    let whole = tree.range(..time_bytes(cut));
    let part = tree
        .range(time_bytes(cut)..time_bytes(cut.saturating_add(span.group)))
        .filter(|item| {
            item.as_ref()
                .map_or(true, |(k, _)| at_of(k).is_some_and(|at| at < before))
        });
    let mut batch = sled::Batch::default();
    let mut in_batch = 0;
    for item in whole.chain(part) {
        let (k, _) = item?;
        batch.remove(k);
        in_batch += 1;
        gone += 1;
        if in_batch == TRIM_BATCH {
            tree.apply_batch(std::mem::take(&mut batch))?;
            in_batch = 0;
        }
    }
    tree.apply_batch(batch)?;
    Ok(gone)
}

/// Format 13 to 14 ([`super::migrate`]): the hours of the minutes kept (the last day), each the
/// sum of its minutes, so the week's chart starts with the day the store has. Whatever hour rows
/// are there already (a step cut short) are replaced, so running it twice writes the same.
pub(super) fn hours_from_minutes(
    minutes: &sled::Tree,
    hours: &sled::Tree,
) -> Result<u64, StoreError> {
    let mut sums: BTreeMap<Vec<u8>, Minute> = BTreeMap::new();
    for item in minutes.iter() {
        let (k, v) = item?;
        let (Some(at), Some(id)) = (at_of(&k), endpoint_of(&k)) else {
            continue;
        };
        let hour = hour_of(at);
        sums.entry(span_key(HOURS, &id, hour))
            .or_insert_with(|| Minute {
                at: hour,
                ..Minute::default()
            })
            .add(&decode(at, &v)?);
    }
    let mut batch = sled::Batch::default();
    let n = sums.len() as u64;
    for (k, m) in sums {
        batch.insert(k, encode(&m)?);
    }
    hours.apply_batch(batch)?;
    Ok(n)
}

/// Format 9 to 10 ([`super::migrate`]): a row keyed the old way (the endpoint id, a NUL and the
/// minute's start as a big-endian number) as today's key, `None` for a key of neither kind. An
/// old key starts with an id (ASCII), a new one with an hour whose first byte is 0x80 or more
/// (any time after 1970), so [`OLD_KEYS_END`] parts them.
pub(super) fn rekey(old: &[u8]) -> Option<Vec<u8>> {
    let nul = old.len().checked_sub(9)?;
    if old.get(nul) != Some(&0) {
        return None;
    }
    let id = std::str::from_utf8(&old[..nul]).ok()?;
    let at = Millis::from_be_bytes(old[nul + 1..].try_into().ok()?);
    Some(key(id, at))
}

/// Every old key sorts below this one ([`rekey`]).
pub(super) const OLD_KEYS_END: [u8; 1] = [0x80];

impl Minutes for SledStore {
    async fn add_minutes(&self, minutes: Vec<(String, Minute)>) -> Result<(), StoreError> {
        blocking(self, move |s| s.add_minutes(minutes)).await
    }

    async fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        let id = endpoint_id.to_string();
        blocking(self, move |s| s.endpoint_minutes(&id, from)).await
    }

    async fn trim_minutes(&self, before: Millis) -> Result<u64, StoreError> {
        blocking(self, move |s| s.trim_minutes(before)).await
    }

    async fn endpoint_hours(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        let id = endpoint_id.to_string();
        blocking(self, move |s| s.endpoint_hours(&id, from)).await
    }

    async fn trim_hours(&self, before: Millis) -> Result<u64, StoreError> {
        blocking(self, move |s| s.trim_hours(before)).await
    }

    async fn hours_since(&self, from: Millis) -> Result<Vec<(String, Minute)>, StoreError> {
        blocking(self, move |s| s.hours_since(from)).await
    }

    async fn minutes_since(&self, from: Millis) -> Result<Vec<(String, Minute)>, StoreError> {
        blocking(self, move |s| s.minutes_since(from)).await
    }

    async fn keep_last_successes(
        &self,
        successes: Vec<(String, Millis)>,
    ) -> Result<(), StoreError> {
        blocking(self, move |s| s.keep_last_successes(successes)).await
    }

    async fn last_success(&self, endpoint_id: &str) -> Result<Option<Millis>, StoreError> {
        let id = endpoint_id.to_string();
        blocking(self, move |s| s.last_success(&id)).await
    }
}
