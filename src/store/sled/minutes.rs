//! Endpoints' attempts per minute on the embedded store, for the charts: one row per endpoint
//! and minute with attempts, keyed by endpoint id, a NUL and the minute's start (big-endian, so
//! an endpoint's minutes sort by time), holding its counts as JSON by status name. Rows are
//! added to by the engine's flusher every few seconds and trimmed to the last day.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::SledStore;
use crate::clock::Millis;
use crate::store::{Minute, StoreError};

#[derive(Serialize, Deserialize, Default)]
struct Row {
    counts: BTreeMap<String, u64>,
    latency_sum_ms: u64,
    latency_max_ms: u64,
}

fn key(endpoint_id: &str, at: Millis) -> Vec<u8> {
    let mut k = Vec::with_capacity(endpoint_id.len() + 9);
    k.extend_from_slice(endpoint_id.as_bytes());
    k.push(0);
    k.extend_from_slice(&at.to_be_bytes());
    k
}

/// The minute's start from a key (`None` for a key that is not one of this tree's).
fn at_of(key: &[u8]) -> Option<Millis> {
    let tail: [u8; 8] = key.get(key.len().checked_sub(8)?..)?.try_into().ok()?;
    Some(Millis::from_be_bytes(tail))
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
    };
    serde_json::to_vec(&row).map_err(|e| StoreError::Encode(e.to_string()))
}

impl SledStore {
    pub fn add_minutes(&self, minutes: Vec<(String, Minute)>) -> Result<(), StoreError> {
        let tree = &self.inner.trees.minutes;
        for (endpoint_id, m) in minutes {
            let k = key(&endpoint_id, m.at);
            // Read, add, write back only if nobody wrote meanwhile (one flusher per process
            // writes; the loop only guards against a purge or a trim in between).
            loop {
                let old = tree.get(&k)?;
                let mut sum = match &old {
                    Some(v) => decode(m.at, v)?,
                    None => Minute {
                        at: m.at,
                        ..Minute::default()
                    },
                };
                sum.add(&m);
                let new = encode(&sum)?;
                if tree.compare_and_swap(&k, old, Some(new))?.is_ok() {
                    break;
                }
            }
        }
        Ok(())
    }

    pub fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        let tree = &self.inner.trees.minutes;
        let mut end = endpoint_id.as_bytes().to_vec();
        end.push(1);
        let mut out = Vec::new();
        for item in tree.range(key(endpoint_id, from)..end) {
            let (k, v) = item?;
            if let Some(at) = at_of(&k) {
                out.push(decode(at, &v)?);
            }
        }
        Ok(out)
    }

    pub fn trim_minutes(&self, before: Millis) -> Result<u64, StoreError> {
        let tree = &self.inner.trees.minutes;
        let mut gone = 0;
        for item in tree.iter() {
            let (k, _) = item?;
            if at_of(&k).is_some_and(|at| at < before) {
                tree.remove(&k)?;
                gone += 1;
            }
        }
        Ok(gone)
    }

    /// Drops an endpoint's minutes (its account was purged).
    pub(super) fn drop_minutes(&self, endpoint_id: &str) -> Result<(), StoreError> {
        let tree = &self.inner.trees.minutes;
        let mut prefix = endpoint_id.as_bytes().to_vec();
        prefix.push(0);
        for item in tree.scan_prefix(&prefix) {
            let (k, _) = item?;
            tree.remove(&k)?;
        }
        Ok(())
    }
}
