//! An account's purge on the cluster's database
//! ([`herald_store::contract::Accounts::purge_account`]): its log in one transaction (a
//! delivery a node is attempting loses its row, so the attempt's fenced record finds nothing
//! and is discarded), its secrets, counters and sessions; its endpoints and plan go first, as
//! their own deletes do it (every node's copy follows by notice).

use super::PgStore;
use herald_store::contract::Purge;
use herald_store::prelude::*;
use herald_store::{Purged, StoreError};

/// How often a purge's transaction is tried.
const PURGE_TRIES: u32 = 5;

/// Whether PostgreSQL aborted the transaction for a conflict, so it may simply run again.
fn retryable(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    matches!(
        e.code(),
        Some(&SqlState::T_R_DEADLOCK_DETECTED) | Some(&SqlState::T_R_SERIALIZATION_FAILURE)
    )
}

/// The account's log, in one transaction: (events, deliveries) removed. Its events (and the
/// operator events about it) are locked first, in id order, as the retention sweep locks the
/// events it prunes before their deliveries and attempts: the two never wait on each other in
/// opposite orders (the sweep skips rows locked here).
async fn purge_log(
    client: &mut deadpool_postgres::Object,
    account: &str,
    ids: &[String],
) -> Result<(u64, u64), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT id FROM events WHERE account_id = $1 OR about_account = $1
          ORDER BY id FOR UPDATE",
        &[&account],
    )
    .await?;
    tx.execute(
        "DELETE FROM endpoint_minutes WHERE endpoint_id = ANY($1)",
        &[&ids],
    )
    .await?;
    tx.execute(
        "DELETE FROM endpoint_hours WHERE endpoint_id = ANY($1)",
        &[&ids],
    )
    .await?;
    tx.execute(
        "DELETE FROM attempts WHERE delivery_id IN
             (SELECT id FROM deliveries WHERE account_id = $1)",
        &[&account],
    )
    .await?;
    let deliveries = tx
        .execute("DELETE FROM deliveries WHERE account_id = $1", &[&account])
        .await?;
    let events = tx
        .execute("DELETE FROM events WHERE account_id = $1", &[&account])
        .await?;
    // The operator events about the account, with their deliveries (pending ones
    // included) and attempts: not counted, they are the operator's.
    tx.execute(
        "DELETE FROM attempts WHERE delivery_id IN
             (SELECT d.id FROM deliveries d JOIN events e ON e.id = d.event_id
               WHERE e.about_account = $1)",
        &[&account],
    )
    .await?;
    tx.execute(
        "DELETE FROM deliveries WHERE event_id IN
             (SELECT id FROM events WHERE about_account = $1)",
        &[&account],
    )
    .await?;
    tx.execute("DELETE FROM events WHERE about_account = $1", &[&account])
        .await?;
    // A debounce window's key begins with its account and a NUL.
    let prefix = [account.as_bytes(), b"\0"].concat();
    tx.execute(
        "DELETE FROM debounce_windows WHERE substr(key, 1, $2) = $1",
        &[&prefix, &(prefix.len() as i32)],
    )
    .await?;
    for table in [
        "idempotency_keys",
        "account_secrets",
        "quota_counters",
        "portal_sessions",
        "alert_hours",
        "applications",
        "api_answers",
    ] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE account_id = $1"),
            &[&account],
        )
        .await?;
    }
    tx.commit().await?;
    Ok((events, deliveries))
}

impl Purge for PgStore {
    /// [`herald_store::contract::Accounts::purge_account`].
    async fn purge_account(&self, account: &str) -> Result<Purged, StoreError> {
        // Its endpoints first: an event that arrives meanwhile has nowhere to go.
        let ids: Vec<String> = self
            .db
            .client()
            .await?
            .query(
                "SELECT id FROM endpoints WHERE account_id = $1",
                &[&account],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut endpoints = 0;
        for id in &ids {
            if self.delete_endpoint(id).await? {
                endpoints += 1;
            }
        }
        // Its log in one transaction, tried again if PostgreSQL aborts it as a deadlock or a
        // serialization failure: the endpoints are gone already, so the purge must finish.
        let mut tries = 0;
        let (events, deliveries) = loop {
            tries += 1;
            let mut client = self.db.client().await?;
            match purge_log(&mut client, account, &ids).await {
                Ok(counts) => break counts,
                Err(e) if tries < PURGE_TRIES && retryable(&e) => {
                    tracing::warn!(error = %e, "an account's purge was aborted; trying again");
                }
                Err(e) => return Err(e.into()),
            }
        };
        self.set_account_plan(account, None).await?;
        self.db
            .client()
            .await?
            .execute("DELETE FROM accounts WHERE account_id = $1", &[&account])
            .await?;
        Ok(Purged {
            events,
            deliveries,
            endpoints,
        })
    }
}
