//! Failure alerts on PostgreSQL (docs/operations.md, "Failure alerts"): an account's alert
//! addresses in its `accounts` row beside its plan, each endpoint's alert mark in
//! `alert_marks` (schema version 6), each account's count of mails this hour in `alert_hours`
//! (schema version 8), changed together only by updates conditional on what the node read, so
//! one mail is claimed by one node of the cluster and the hourly cap holds across them.

use deadpool_postgres::GenericClient;
use tokio_postgres::error::SqlState;

use super::PgStore;
use herald_core::clock::Millis;
use herald_core::policy::alerts::{self, AlertClaim, AlertHour, AlertMark, Claimed};
use herald_store::contract::Alerts;
use herald_store::StoreError;

impl Alerts for PgStore {
    /// The account's alert addresses.
    async fn alert_emails(&self, account_id: &str) -> Result<Vec<String>, StoreError> {
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
    async fn set_alert_emails(
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
    async fn all_alert_emails(&self) -> Result<Vec<(String, Vec<String>)>, StoreError> {
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

    /// [`herald_store::contract::Accounts::claim_alert`]: read the mark and the account's hour,
    /// decide, and write both in one transaction by updates conditional on what was read (else
    /// decide again on what another node left). A mark for an endpoint that is gone is refused
    /// by its foreign key (schema version 8), whatever the timing.
    async fn claim_alert(&self, c: AlertClaim<'_>) -> Result<Claimed, StoreError> {
        let mut client = self.db.client().await?;
        loop {
            let tx = client.transaction().await?;
            let row = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM endpoints WHERE id = $1), m.failing_at, m.told,
                            h.hour, h.mails
                     FROM (SELECT 1) one
                     LEFT JOIN alert_marks m ON m.endpoint_id = $1
                     LEFT JOIN alert_hours h ON h.account_id = $2",
                    &[&c.endpoint_id, &c.account_id],
                )
                .await?;
            if !row.get::<_, bool>(0) {
                return Ok(Claimed::Gone);
            }
            let mark = row.get::<_, Option<bool>>(2).map(|told| AlertMark {
                failing_at: row.get(1),
                told,
            });
            let hour = row.get::<_, Option<i64>>(3).map(|hour| AlertHour {
                hour,
                mails: u32::try_from(row.get::<_, i32>(4)).unwrap_or(0),
            });
            let before = mark.unwrap_or_default();
            let (after, counted) = match alerts::decide(&c, before, hour.unwrap_or_default()) {
                Ok(next) => next,
                Err(no) => return Ok(no),
            };
            let marked = match write_mark(&tx, &c, mark, after).await {
                Ok(n) => n,
                Err(gone_or_error) => return gone_or_error,
            };
            let hour_written = write_hour(&tx, c.account_id, hour, counted).await?;
            if marked == 1 && hour_written == 1 {
                tx.commit().await?;
                return Ok(Claimed::Send { before, after });
            }
            // Another node claimed first: its transaction is done, decide again on what it left.
            tx.rollback().await?;
        }
    }

    /// [`herald_store::contract::Alerts::count_alert_mail`]: read the account's hour, count,
    /// and write it conditional on what was read (else count again on what another node left).
    async fn count_alert_mail(
        &self,
        account_id: &str,
        now: Millis,
        max_per_hour: u32,
    ) -> Result<bool, StoreError> {
        let client = self.db.client().await?;
        loop {
            let hour = client
                .query_opt(
                    "SELECT hour, mails FROM alert_hours WHERE account_id = $1",
                    &[&account_id],
                )
                .await?
                .map(|row| AlertHour {
                    hour: row.get(0),
                    mails: u32::try_from(row.get::<_, i32>(1)).unwrap_or(0),
                });
            let Some(counted) = alerts::count(hour.unwrap_or_default(), now, max_per_hour) else {
                return Ok(false);
            };
            if write_hour(&client, account_id, hour, counted).await? == 1 {
                return Ok(true);
            }
        }
    }

    /// [`herald_store::contract::Accounts::give_back_alert`]: an update conditional on the
    /// mark being the one the claim wrote; a mark that is gone stays gone.
    async fn give_back_alert(
        &self,
        endpoint_id: &str,
        after: AlertMark,
        before: AlertMark,
    ) -> Result<bool, StoreError> {
        let n = self
            .db
            .client()
            .await?
            .execute(
                "UPDATE alert_marks SET failing_at = $4, told = $5
                 WHERE endpoint_id = $1 AND failing_at IS NOT DISTINCT FROM $2 AND told = $3",
                &[
                    &endpoint_id,
                    &after.failing_at,
                    &after.told,
                    &before.failing_at,
                    &before.told,
                ],
            )
            .await?;
        Ok(n == 1)
    }
}

/// Writes the endpoint's alert mark as `after`, only if it is still as read (`mark`): how many
/// rows it wrote (0: another node changed it first), or the claim's answer when the endpoint
/// went meanwhile.
async fn write_mark(
    tx: &tokio_postgres::Transaction<'_>,
    c: &AlertClaim<'_>,
    mark: Option<AlertMark>,
    after: AlertMark,
) -> Result<u64, Result<Claimed, StoreError>> {
    match mark {
        None => tx
            .execute(
                "INSERT INTO alert_marks (endpoint_id, failing_at, told)
                 VALUES ($1, $2, $3) ON CONFLICT (endpoint_id) DO NOTHING",
                &[&c.endpoint_id, &after.failing_at, &after.told],
            )
            .await
            .map_err(|e| {
                // The endpoint went after the read: its mark is refused.
                if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) {
                    Ok(Claimed::Gone)
                } else {
                    Err(StoreError::from(e))
                }
            }),
        Some(was) => tx
            .execute(
                "UPDATE alert_marks SET failing_at = $2, told = $3
                 WHERE endpoint_id = $1
                   AND failing_at IS NOT DISTINCT FROM $4 AND told = $5",
                &[
                    &c.endpoint_id,
                    &after.failing_at,
                    &after.told,
                    &was.failing_at,
                    &was.told,
                ],
            )
            .await
            .map_err(|e| Err(StoreError::from(e))),
    }
}

/// Writes the account's count of mails this hour as `counted`, only if it is still as read
/// (`hour`): how many rows it wrote (0: another node counted first).
async fn write_hour(
    tx: &impl GenericClient,
    account_id: &str,
    hour: Option<AlertHour>,
    counted: AlertHour,
) -> Result<u64, StoreError> {
    let mails = i32::try_from(counted.mails).unwrap_or(i32::MAX);
    Ok(match hour {
        None => {
            tx.execute(
                "INSERT INTO alert_hours (account_id, hour, mails) VALUES ($1, $2, $3)
                 ON CONFLICT (account_id) DO NOTHING",
                &[&account_id, &counted.hour, &mails],
            )
            .await?
        }
        Some(was) => {
            tx.execute(
                "UPDATE alert_hours SET hour = $2, mails = $3
                 WHERE account_id = $1 AND hour = $4 AND mails = $5",
                &[
                    &account_id,
                    &counted.hour,
                    &mails,
                    &was.hour,
                    &i32::try_from(was.mails).unwrap_or(i32::MAX),
                ],
            )
            .await?
        }
    })
}
