//! Failure alerts on the embedded store (docs/operations.md, "Failure alerts"): an account's
//! alert addresses live in its `accounts` row beside its plan; each endpoint's alert mark
//! ([`crate::policy::alerts::AlertMark`]) is a JSON row of the `alert_marks` tree, changed by
//! compare-and-swap.

use super::accounts::AccountRecord;
use super::{SledStore, StoreError};
use crate::clock::Millis;
use crate::policy::alerts::{self, AlertKind, AlertMark};

impl SledStore {
    /// The account's alert addresses.
    pub fn alert_emails(&self, account_id: &str) -> Result<Vec<String>, StoreError> {
        match self.inner.trees.accounts.get(account_id.as_bytes())? {
            Some(v) => Ok(AccountRecord::decode(&v)?.alert_emails),
            None => Ok(Vec::new()),
        }
    }

    /// Sets the account's alert addresses (empty clears them), durably; its plan stays.
    pub async fn set_alert_emails(
        &self,
        account_id: &str,
        emails: Vec<String>,
    ) -> Result<(), StoreError> {
        self.change_account(account_id, |rec| rec.alert_emails = emails.clone())?;
        self.sync().await
    }

    /// Every account with alert addresses, sorted by account (the tree's order).
    pub fn all_alert_emails(&self) -> Result<Vec<(String, Vec<String>)>, StoreError> {
        let mut out = Vec::new();
        for item in self.inner.trees.accounts.iter() {
            let (k, v) = item?;
            let rec = AccountRecord::decode(&v)?;
            if !rec.alert_emails.is_empty() {
                out.push((String::from_utf8_lossy(&k).into_owned(), rec.alert_emails));
            }
        }
        Ok(out)
    }

    /// [`crate::store::contract::Accounts::claim_alert`]: flushed with sled's periodic flush
    /// (a crash may forget the last claim: at most one mail more).
    pub fn claim_alert(
        &self,
        endpoint_id: &str,
        kind: AlertKind,
        now: Millis,
        min_interval_ms: Millis,
    ) -> Result<bool, StoreError> {
        let tree = &self.inner.trees.alert_marks;
        let key = endpoint_id.as_bytes();
        let mut current = tree.get(key)?;
        loop {
            let mark = match &current {
                Some(v) => serde_json::from_slice(v).map_err(|e| {
                    StoreError::Corrupt(format!("alert mark of {endpoint_id}: {e}"))
                })?,
                None => AlertMark::default(),
            };
            let Some(next) = alerts::claim(mark, kind, now, min_interval_ms) else {
                return Ok(false);
            };
            let v = serde_json::to_vec(&next).map_err(|e| StoreError::Encode(e.to_string()))?;
            match tree.compare_and_swap(key, current.as_deref(), Some(v))? {
                Ok(()) => return Ok(true),
                // Another claim changed it first: decide again on what it left.
                Err(e) => current = e.current,
            }
        }
    }

    /// Removes a deleted endpoint's alert mark.
    pub(super) fn forget_alert_mark(&self, endpoint_id: &str) -> Result<(), StoreError> {
        self.inner
            .trees
            .alert_marks
            .remove(endpoint_id.as_bytes())?;
        Ok(())
    }

    /// Removes the account's row (its plan and alert addresses) from the store and the
    /// in-memory copy, durably with the caller's next sync.
    pub(super) fn forget_account(&self, account_id: &str) -> Result<(), StoreError> {
        self.inner.trees.accounts.remove(account_id.as_bytes())?;
        self.directory.set_plan(account_id, None);
        Ok(())
    }
}
