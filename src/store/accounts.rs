//! Per-account state: the synced plan, quota counters, account secrets for header macros, and
//! each endpoint's circuit breaker.

use std::sync::atomic::Ordering;

use super::{codec, tx_error, AccountRecord, Store, StoreError};
use crate::engine::breaker::Breaker;
use crate::engine::quota::{self, Limits, Windows};

impl Store {
    // --- accounts and quotas ------------------------------------------------------------------

    /// The account's synced plan; `None` when no plan was ever synced (or it was removed).
    pub fn account_plan(&self, account_id: &str) -> Result<Option<String>, StoreError> {
        match self.inner.trees.accounts.get(account_id.as_bytes())? {
            Some(v) => Ok(codec::decode::<AccountRecord>(&v)?.plan),
            None => Ok(None),
        }
    }

    /// Syncs the account's plan (`None` removes it), durably.
    pub async fn set_account_plan(
        &self,
        account_id: &str,
        plan: Option<String>,
    ) -> Result<(), StoreError> {
        let rec = codec::encode(&AccountRecord { plan })?;
        self.inner
            .trees
            .accounts
            .insert(account_id.as_bytes(), rec)?;
        self.sync().await
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

    pub async fn set_account_secret(
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

    /// Counts one delivery in both windows if it fits `limits`; false (and nothing counted) if
    /// it does not.
    pub fn quota_take(
        &self,
        account_id: &str,
        w: Windows,
        limits: Limits,
    ) -> Result<bool, StoreError> {
        if self.quota_fault.load(Ordering::Relaxed) {
            return Err(StoreError::Io("injected quota fault".into()));
        }
        let minute_key = codec::quota_key(account_id, b'm', w.minute);
        let day_key = codec::quota_key(account_id, b'd', w.day);
        let count = |v: Option<sled::IVec>| {
            v.and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
                .map_or(0, u64::from_be_bytes)
        };
        self.inner
            .trees
            .quota
            .transaction(|t| {
                let minute = count(t.get(&minute_key)?);
                let day = count(t.get(&day_key)?);
                if !quota::allows(limits, minute, day) {
                    return Ok(false);
                }
                t.insert(minute_key.as_slice(), &(minute + 1).to_be_bytes())?;
                t.insert(day_key.as_slice(), &(day + 1).to_be_bytes())?;
                Ok(true)
            })
            .map_err(tx_error)
    }

    /// This minute's and today's counts.
    pub fn quota_usage(&self, account_id: &str, w: Windows) -> Result<(u64, u64), StoreError> {
        let get = |k: Vec<u8>| -> Result<u64, StoreError> {
            Ok(self
                .inner
                .trees
                .quota
                .get(k)?
                .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
                .map_or(0, u64::from_be_bytes))
        };
        Ok((
            get(codec::quota_key(account_id, b'm', w.minute))?,
            get(codec::quota_key(account_id, b'd', w.day))?,
        ))
    }

    pub fn set_quota_fault(&self, on: bool) {
        self.quota_fault.store(on, Ordering::Relaxed);
    }

    // --- circuit breakers ---------------------------------------------------------------------

    /// An endpoint's stored breaker state (none: closed, never failed).
    pub fn breaker(&self, endpoint_id: &str) -> Result<Option<Breaker>, StoreError> {
        match self.inner.trees.breakers.get(endpoint_id.as_bytes())? {
            Some(v) => Ok(Some(codec::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// Keeps a breaker state (reaches disk with sled's periodic flush, like attempt records).
    pub fn put_breaker(&self, endpoint_id: &str, b: &Breaker) -> Result<(), StoreError> {
        if *b == Breaker::default() {
            self.inner.trees.breakers.remove(endpoint_id.as_bytes())?;
        } else {
            self.inner
                .trees
                .breakers
                .insert(endpoint_id.as_bytes(), codec::encode(b)?)?;
        }
        Ok(())
    }
}
