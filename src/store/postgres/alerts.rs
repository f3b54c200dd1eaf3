//! Failure alerts on PostgreSQL (docs/operations.md, "Failure alerts"): an account's alert
//! addresses in its `accounts` row beside its plan, each endpoint's alert mark in
//! `alert_marks` (schema version 6), changed only by an update conditional on the mark the node
//! read, so one mail is claimed by one node of the cluster.

use super::PgStore;
use crate::clock::Millis;
use crate::policy::alerts::{self, AlertKind, AlertMark};
use crate::store::StoreError;

impl PgStore {
    /// The account's alert addresses.
    pub async fn alert_emails(&self, account_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .query_opt(
                "SELECT alert_emails FROM accounts WHERE account_id = $1",
                &[&account_id],
            )
            .await?
            .map(|r| r.get(0))
            .unwrap_or_default())
    }

    /// Sets the account's alert addresses (empty clears them); its plan stays.
    pub async fn set_alert_emails(
        &self,
        account_id: &str,
        emails: Vec<String>,
    ) -> Result<(), StoreError> {
        self.db
            .client()
            .await?
            .execute(
                "INSERT INTO accounts (account_id, alert_emails) VALUES ($1, $2)
                 ON CONFLICT (account_id) DO UPDATE SET alert_emails = excluded.alert_emails",
                &[&account_id, &emails],
            )
            .await?;
        Ok(())
    }

    /// Every account with alert addresses, sorted by account.
    pub async fn all_alert_emails(&self) -> Result<Vec<(String, Vec<String>)>, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .query(
                "SELECT account_id, alert_emails FROM accounts
                 WHERE cardinality(alert_emails) > 0 ORDER BY account_id",
                &[],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    /// [`crate::store::contract::Accounts::claim_alert`]: read the mark, decide, and write the
    /// decision only if the mark is still the one read (else decide again on the new one).
    pub async fn claim_alert(
        &self,
        endpoint_id: &str,
        kind: AlertKind,
        now: Millis,
        min_interval_ms: Millis,
    ) -> Result<bool, StoreError> {
        let client = self.db.client().await?;
        loop {
            let row = client
                .query_opt(
                    "SELECT failing_at, told FROM alert_marks WHERE endpoint_id = $1",
                    &[&endpoint_id],
                )
                .await?;
            let read = row.map(|r| AlertMark {
                failing_at: r.get(0),
                told: r.get(1),
            });
            let Some(next) = alerts::claim(read.unwrap_or_default(), kind, now, min_interval_ms)
            else {
                return Ok(false);
            };
            let written = match read {
                None => {
                    client
                        .execute(
                            "INSERT INTO alert_marks (endpoint_id, failing_at, told)
                             VALUES ($1, $2, $3) ON CONFLICT (endpoint_id) DO NOTHING",
                            &[&endpoint_id, &next.failing_at, &next.told],
                        )
                        .await?
                }
                Some(was) => {
                    client
                        .execute(
                            "UPDATE alert_marks SET failing_at = $2, told = $3
                             WHERE endpoint_id = $1
                               AND failing_at IS NOT DISTINCT FROM $4 AND told = $5",
                            &[
                                &endpoint_id,
                                &next.failing_at,
                                &next.told,
                                &was.failing_at,
                                &was.told,
                            ],
                        )
                        .await?
                }
            };
            if written == 1 {
                return Ok(true);
            }
        }
    }
}
