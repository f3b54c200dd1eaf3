//! Failure alerts on the embedded store (docs/operations.md, "Failure alerts"): an account's
//! alert addresses live in its `accounts` row beside its plan; each endpoint's alert mark
//! ([`herald_core::policy::alerts::AlertMark`]) is a JSON row of the `alert_marks` tree, and so is
//! each account's count of mails in the current hour ([`herald_core::policy::alerts::AlertHour`],
//! under a key that starts with a NUL); a claim changes both in one transaction.

use serde::de::DeserializeOwned;
use serde::Serialize;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::accounts::AccountRecord;
use super::{SledStore, StoreError};
use herald_core::clock::Millis;
use herald_core::policy::alerts::{self, AlertClaim, AlertHour, AlertMark, Claimed};
use herald_store::contract::Alerts;
use std::future::ready;
use std::future::Future;

/// The key of an account's hourly count in `alert_marks`: a NUL, which no endpoint id starts
/// with, then the account id.
fn hour_key(account_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(account_id.len() + 1);
    key.push(0);
    key.extend_from_slice(account_id.as_bytes());
    key
}

/// A stored JSON row, or its default when there is none.
fn read<T: DeserializeOwned + Default>(v: Option<sled::IVec>) -> Result<T, StoreError> {
    match v {
        Some(v) => serde_json::from_slice(&v)
            .map_err(|e| StoreError::Corrupt(format!("alert mark or hour: {e}"))),
        None => Ok(T::default()),
    }
}

fn write<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| StoreError::Encode(e.to_string()))
}

fn abort(e: StoreError) -> ConflictableTransactionError<StoreError> {
    ConflictableTransactionError::Abort(e)
}

impl SledStore {
    /// The account's alert addresses.
    pub fn alert_emails(&self, account_id: &str) -> Result<Vec<String>, StoreError> {
        match self.inner.trees.accounts.get(account_id.as_bytes())? {
            Some(v) => Ok(AccountRecord::decode(&v)?.alert_emails),
            None => Ok(Vec::new()),
        }
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

    /// [`herald_store::contract::Accounts::claim_alert`]: one sled transaction over the
    /// `endpoints` tree (the endpoint must still be there: a deletion or a purge removes its
    /// row before its mark, so a claim after it writes nothing) and `alert_marks` (the mark
    /// and the account's hour). Flushed with sled's periodic flush (a crash may forget the last
    /// claim: at most one mail more).
    pub fn claim_alert(&self, c: &AlertClaim<'_>) -> Result<Claimed, StoreError> {
        let trees = &self.inner.trees;
        let mark_key = c.endpoint_id.as_bytes();
        let hour_key = hour_key(c.account_id);
        let decided = (&trees.endpoints, &trees.alert_marks).transaction(|(endpoints, marks)| {
            if endpoints.get(mark_key)?.is_none() {
                return Ok(Claimed::Gone);
            }
            let mark: AlertMark = read(marks.get(mark_key)?).map_err(abort)?;
            let hour: AlertHour = read(marks.get(&hour_key)?).map_err(abort)?;
            let (after, counted) = match alerts::decide(c, mark, hour) {
                Ok(next) => next,
                Err(no) => return Ok(no),
            };
            marks.insert(mark_key, write(&after).map_err(abort)?)?;
            marks.insert(hour_key.as_slice(), write(&counted).map_err(abort)?)?;
            Ok(Claimed::Send {
                before: mark,
                after,
            })
        });
        match decided {
            Ok(claimed) => Ok(claimed),
            Err(TransactionError::Abort(e)) => Err(e),
            Err(TransactionError::Storage(e)) => Err(e.into()),
        }
    }

    /// [`herald_store::contract::Alerts::count_alert_mail`]: a compare-and-swap of the
    /// account's hour, tried again on what another caller left.
    pub fn count_alert_mail(
        &self,
        account_id: &str,
        now: Millis,
        max_per_hour: u32,
    ) -> Result<bool, StoreError> {
        let marks = &self.inner.trees.alert_marks;
        let key = hour_key(account_id);
        loop {
            let kept = marks.get(&key)?;
            let hour: AlertHour = read(kept.clone())?;
            let Some(counted) = alerts::count(hour, now, max_per_hour) else {
                return Ok(false);
            };
            if marks
                .compare_and_swap(&key, kept, Some(write(&counted)?))?
                .is_ok()
            {
                return Ok(true);
            }
        }
    }

    /// [`herald_store::contract::Accounts::give_back_alert`]: a compare-and-swap, which never
    /// brings back a mark a deletion removed.
    pub fn give_back_alert(
        &self,
        endpoint_id: &str,
        after: AlertMark,
        before: AlertMark,
    ) -> Result<bool, StoreError> {
        let (after, before) = (write(&after)?, write(&before)?);
        Ok(self
            .inner
            .trees
            .alert_marks
            .compare_and_swap(endpoint_id.as_bytes(), Some(after), Some(before))?
            .is_ok())
    }

    /// Removes a deleted endpoint's alert mark.
    pub(super) fn forget_alert_mark(&self, endpoint_id: &str) -> Result<(), StoreError> {
        self.inner
            .trees
            .alert_marks
            .remove(endpoint_id.as_bytes())?;
        Ok(())
    }

    /// Removes the account's row (its plan and alert addresses) and its hourly count of
    /// alert mails from the store and the in-memory copy, durably with the caller's next sync.
    pub(super) fn forget_account(&self, account_id: &str) -> Result<(), StoreError> {
        self.inner.trees.accounts.remove(account_id.as_bytes())?;
        self.inner.trees.alert_marks.remove(hour_key(account_id))?;
        self.directory.set_plan(account_id, None);
        Ok(())
    }
}

impl Alerts for SledStore {
    fn alert_emails(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        ready(SledStore::alert_emails(self, account_id))
    }

    fn all_alert_emails(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, Vec<String>)>, StoreError>> + Send {
        ready(SledStore::all_alert_emails(self))
    }

    fn claim_alert(
        &self,
        claim: AlertClaim<'_>,
    ) -> impl Future<Output = Result<Claimed, StoreError>> + Send {
        ready(SledStore::claim_alert(self, &claim))
    }

    fn count_alert_mail(
        &self,
        account_id: &str,
        now: Millis,
        max_per_hour: u32,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        ready(SledStore::count_alert_mail(
            self,
            account_id,
            now,
            max_per_hour,
        ))
    }

    fn give_back_alert(
        &self,
        endpoint_id: &str,
        after: AlertMark,
        before: AlertMark,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        ready(SledStore::give_back_alert(self, endpoint_id, after, before))
    }

    /// Sets the account's alert addresses (empty clears them), durably; its plan stays.
    async fn set_alert_emails(
        &self,
        account_id: &str,
        emails: Vec<String>,
    ) -> Result<(), StoreError> {
        self.change_account(account_id, |rec| rec.alert_emails = emails.clone())?;
        self.sync().await
    }
}
