//! Per-account state: the synced plan, quota counters, account secrets for header macros, and
//! each endpoint's circuit breaker.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::{codec, SledStore, StoreError};
use herald_core::clock::Millis;
use herald_core::model::RateLimit;
use herald_core::policy::breaker::{Breaker, Phase};
use herald_core::policy::quota::{self, Limits, Windows};
use herald_core::policy::tokens::Bucket;
use herald_store::contract::Accounts;
use herald_store::contract::Breakers;
use herald_store::contract::Quotas;
use herald_store::contract::RateLimits;
use std::future::ready;
use std::future::Future;

/// An account's row: its synced plan and its alert addresses ([`super::alerts`]). An account
/// with neither has no row.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(super) struct AccountRecord {
    pub(super) plan: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) alert_emails: Vec<String>,
}

impl AccountRecord {
    pub(super) fn decode(v: &[u8]) -> Result<AccountRecord, StoreError> {
        serde_json::from_slice(v).map_err(|e| StoreError::Corrupt(format!("account: {e}")))
    }
}

/// Every synced plan, by account, for the in-memory copy.
pub(super) fn load_plans(tree: &sled::Tree) -> Result<HashMap<String, String>, StoreError> {
    let mut plans = HashMap::new();
    for item in tree.iter() {
        let (k, v) = item?;
        let rec = AccountRecord::decode(&v)?;
        if let Some(plan) = rec.plan {
            plans.insert(String::from_utf8_lossy(&k).into_owned(), plan);
        }
    }
    Ok(plans)
}

/// An account's counters, in one row so one compare-and-swap counts both windows: the minute
/// and the day each with its window number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    minute: i64,
    minute_count: u64,
    day: i64,
    day_count: u64,
}

impl Counters {
    fn decode(v: Option<&[u8]>) -> Counters {
        let Some(v) = v.filter(|v| v.len() == 32) else {
            return Counters::default();
        };
        let n = |i: usize| u64::from_be_bytes(v[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        Counters {
            minute: n(0) as i64,
            minute_count: n(1),
            day: n(2) as i64,
            day_count: n(3),
        }
    }

    fn encode(&self) -> [u8; 32] {
        let mut v = [0u8; 32];
        v[..8].copy_from_slice(&self.minute.to_be_bytes());
        v[8..16].copy_from_slice(&self.minute_count.to_be_bytes());
        v[16..24].copy_from_slice(&self.day.to_be_bytes());
        v[24..].copy_from_slice(&self.day_count.to_be_bytes());
        v
    }

    /// This minute's and today's counts (a stored count of a past window is zero now).
    fn at(&self, w: Windows) -> (u64, u64) {
        (
            if self.minute == w.minute {
                self.minute_count
            } else {
                0
            },
            if self.day == w.day { self.day_count } else { 0 },
        )
    }
}

impl SledStore {
    // --- accounts and quotas ------------------------------------------------------------------

    /// Changes the account's row with `f` (a compare-and-swap, so a plan and addresses set at
    /// once both stay); a row left with neither is removed. Not synced.
    pub(super) fn change_account(
        &self,
        account_id: &str,
        f: impl Fn(&mut AccountRecord),
    ) -> Result<(), StoreError> {
        let tree = &self.inner.trees.accounts;
        let key = account_id.as_bytes();
        let mut current = tree.get(key)?;
        loop {
            let mut rec = match &current {
                Some(v) => AccountRecord::decode(v)?,
                None => AccountRecord::default(),
            };
            f(&mut rec);
            let next = if rec.plan.is_none() && rec.alert_emails.is_empty() {
                None
            } else {
                Some(serde_json::to_vec(&rec).map_err(|e| StoreError::Encode(e.to_string()))?)
            };
            match tree.compare_and_swap(key, current.as_deref(), next)? {
                Ok(()) => return Ok(()),
                Err(e) => current = e.current,
            }
        }
    }

    /// An account secret for header macros (write-only through the API).
    pub fn account_secret(
        &self,
        account_id: &str,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self
            .inner
            .trees
            .account_secrets
            .get(codec::account_key(account_id, name))?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Every account secret: (account, name, value), for `herald copy`.
    pub fn account_secrets(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        let mut out = Vec::new();
        for item in self.inner.trees.account_secrets.iter() {
            let (k, v) = item?;
            let k = String::from_utf8_lossy(&k);
            let Some((account, name)) = k.split_once('\0') else {
                return Err(StoreError::Corrupt(format!("account secret key {k:?}")));
            };
            let value = String::from_utf8_lossy(&v).into_owned();
            out.push((account.to_string(), name.to_string(), value));
        }
        Ok(out)
    }

    /// Counts one delivery in both windows if it fits `limits`; false (and nothing counted) if
    /// it does not. Counters reach disk with sled's periodic flush.
    pub fn quota_take(
        &self,
        account_id: &str,
        w: Windows,
        limits: Limits,
    ) -> Result<bool, StoreError> {
        if self.quota_fault.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("injected quota fault").into());
        }
        let tree = &self.inner.trees.quota;
        let key = account_id.as_bytes();
        let mut current = tree.get(key)?;
        loop {
            let (minute, day) = Counters::decode(current.as_deref()).at(w);
            if !quota::allows(limits, minute, day) {
                return Ok(false);
            }
            let next = Counters {
                minute: w.minute,
                minute_count: minute + 1,
                day: w.day,
                day_count: day + 1,
            };
            match tree.compare_and_swap(key, current.as_deref(), Some(&next.encode()[..]))? {
                Ok(()) => return Ok(true),
                // Another attempt of this account counted first: count again from its value.
                Err(e) => current = e.current,
            }
        }
    }

    /// Sets the counts of the windows `w` ([`herald_store::contract::Accounts::set_quota_usage`]).
    pub fn set_quota_usage(
        &self,
        account_id: &str,
        w: Windows,
        (minute, day): (u64, u64),
    ) -> Result<(), StoreError> {
        let counters = Counters {
            minute: w.minute,
            minute_count: minute,
            day: w.day,
            day_count: day,
        };
        self.inner
            .trees
            .quota
            .insert(account_id.as_bytes(), &counters.encode()[..])?;
        Ok(())
    }

    /// This minute's and today's counts.
    pub fn quota_usage(&self, account_id: &str, w: Windows) -> Result<(u64, u64), StoreError> {
        let v = self.inner.trees.quota.get(account_id.as_bytes())?;
        Ok(Counters::decode(v.as_deref()).at(w))
    }

    pub fn set_quota_fault(&self, on: bool) {
        self.quota_fault.store(on, Ordering::Relaxed);
    }

    // --- circuit breakers ---------------------------------------------------------------------

    /// An endpoint's breaker (closed, never failed, when none is stored), read from the
    /// in-memory copy.
    pub fn breaker(&self, endpoint_id: &str) -> Result<Breaker, StoreError> {
        let mut kept = self.lock_breakers();
        Ok(*self.kept_breaker(&mut kept, endpoint_id)?)
    }

    /// Changes an endpoint's breaker with `f` (one change at a time) and keeps the result if it
    /// differs (it reaches disk with sled's periodic flush, like attempt records). When the
    /// breaker closes, the endpoint's lane stops holding its deliveries.
    pub fn change_breaker<T>(
        &self,
        endpoint_id: &str,
        f: impl FnOnce(&mut Breaker) -> T,
    ) -> Result<T, StoreError> {
        let mut kept = self.lock_breakers();
        let b = self.kept_breaker(&mut kept, endpoint_id)?;
        let mut changed = *b;
        let out = f(&mut changed);
        if changed != *b {
            if changed == Breaker::default() {
                self.inner.trees.breakers.remove(endpoint_id.as_bytes())?;
            } else {
                let v =
                    serde_json::to_vec(&changed).map_err(|e| StoreError::Encode(e.to_string()))?;
                self.inner
                    .trees
                    .breakers
                    .insert(endpoint_id.as_bytes(), v)?;
            }
            let closed = b.phase != Phase::Closed && changed.phase == Phase::Closed;
            *b = changed;
            drop(kept);
            if closed {
                self.due().release(super::lane_of(Some(endpoint_id)));
            }
        }
        Ok(out)
    }

    /// Removes a deleted endpoint's breaker.
    pub(super) fn forget_breaker(&self, endpoint_id: &str) -> Result<(), StoreError> {
        let mut kept = self.lock_breakers();
        kept.remove(endpoint_id);
        self.inner.trees.breakers.remove(endpoint_id.as_bytes())?;
        Ok(())
    }

    /// Every stored breaker that is not closed, by endpoint id.
    pub fn open_breakers(&self) -> Result<Vec<(String, Breaker)>, StoreError> {
        let mut out = Vec::new();
        for item in self.inner.trees.breakers.iter() {
            let (k, v) = item?;
            let id = String::from_utf8_lossy(&k).into_owned();
            let b = decode_breaker(&id, &v)?;
            if b.phase != Phase::Closed {
                out.push((id, b));
            }
        }
        Ok(out)
    }

    /// Drops the endpoint's rate-limit bucket (it was deleted or has no limit now).
    pub(super) fn forget_bucket(&self, endpoint_id: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(endpoint_id);
    }

    /// Takes a token of the endpoint's rate-limit bucket at `now`, or says when the next one
    /// comes.
    pub fn take_token(
        &self,
        endpoint_id: &str,
        limit: RateLimit,
        now: Millis,
    ) -> Result<(), Millis> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bucket) = buckets.get_mut(endpoint_id) {
            return bucket.take(limit, now);
        }
        buckets
            .entry(endpoint_id.to_string())
            .or_insert_with(|| Bucket::full(limit, now))
            .take(limit, now)
    }

    fn lock_breakers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Breaker>> {
        self.inner
            .breakers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The in-memory copy of an endpoint's breaker, read from the tree the first time.
    fn kept_breaker<'a>(
        &self,
        kept: &'a mut HashMap<String, Breaker>,
        endpoint_id: &str,
    ) -> Result<&'a mut Breaker, StoreError> {
        if !kept.contains_key(endpoint_id) {
            let b = match self.inner.trees.breakers.get(endpoint_id.as_bytes())? {
                Some(v) => decode_breaker(endpoint_id, &v)?,
                None => Breaker::default(),
            };
            kept.insert(endpoint_id.to_string(), b);
        }
        Ok(kept.get_mut(endpoint_id).expect("inserted above"))
    }
}

fn decode_breaker(endpoint_id: &str, v: &[u8]) -> Result<Breaker, StoreError> {
    serde_json::from_slice(v)
        .map_err(|e| StoreError::Corrupt(format!("breaker of {endpoint_id}: {e}")))
}

impl Accounts for SledStore {
    fn account_secret(
        &self,
        account_id: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        ready(SledStore::account_secret(self, account_id, name))
    }

    /// Syncs the account's plan (`None` removes it), durably; its alert addresses stay.
    async fn set_account_plan(
        &self,
        account_id: &str,
        plan: Option<String>,
    ) -> Result<(), StoreError> {
        self.change_account(account_id, |rec| rec.plan = plan.clone())?;
        self.sync().await?;
        self.directory.set_plan(account_id, plan);
        Ok(())
    }

    async fn set_account_secret(
        &self,
        account_id: &str,
        name: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        self.inner
            .trees
            .account_secrets
            .insert(codec::account_key(account_id, name), value.as_bytes())?;
        self.sync().await
    }
}

impl Quotas for SledStore {
    fn quota_take(
        &self,
        account_id: &str,
        w: Windows,
        limits: Limits,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        ready(SledStore::quota_take(self, account_id, w, limits))
    }

    async fn set_quota_usage(
        &self,
        account_id: &str,
        w: Windows,
        used: (u64, u64),
    ) -> Result<(), StoreError> {
        SledStore::set_quota_usage(self, account_id, w, used)
    }

    fn quota_usage(
        &self,
        account_id: &str,
        w: Windows,
    ) -> impl Future<Output = Result<(u64, u64), StoreError>> + Send {
        ready(SledStore::quota_usage(self, account_id, w))
    }
}

impl Breakers for SledStore {
    fn breaker(
        &self,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<Breaker, StoreError>> + Send {
        ready(SledStore::breaker(self, endpoint_id))
    }

    fn change_breaker<T: Send>(
        &self,
        endpoint_id: &str,
        _now: Millis,
        f: impl FnOnce(&mut Breaker) -> T + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send {
        // The due index lets the deliveries a closing breaker held go by itself.
        ready(SledStore::change_breaker(self, endpoint_id, f))
    }

    fn open_breakers(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, Breaker)>, StoreError>> + Send {
        ready(SledStore::open_breakers(self))
    }
}

impl RateLimits for SledStore {
    fn take_token(
        &self,
        endpoint_id: &str,
        limit: RateLimit,
        now: Millis,
    ) -> impl Future<Output = Result<Result<(), Millis>, StoreError>> + Send {
        ready(Ok(SledStore::take_token(self, endpoint_id, limit, now)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_of_past_windows_read_as_zero() {
        let c = Counters {
            minute: 10,
            minute_count: 3,
            day: 1,
            day_count: 7,
        };
        let back = Counters::decode(Some(&c.encode()));
        assert_eq!(back, c);
        assert_eq!(back.at(Windows { minute: 10, day: 1 }), (3, 7));
        assert_eq!(back.at(Windows { minute: 11, day: 1 }), (0, 7));
        assert_eq!(
            back.at(Windows {
                minute: 1441,
                day: 2
            }),
            (0, 0)
        );
        assert_eq!(
            Counters::decode(None).at(Windows { minute: 0, day: 0 }),
            (0, 0)
        );
    }
}
