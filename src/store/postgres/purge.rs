//! An account's purge on the cluster's database
//! ([`crate::store::contract::Accounts::purge_account`]): its log in one transaction (a
//! delivery a node is attempting loses its row, so the attempt's fenced record finds nothing
//! and is discarded), its secrets, counters and sessions; its endpoints and plan go first, as
//! their own deletes do it (every node's copy follows by notice).

use super::PgStore;
use crate::store::{Purged, StoreError};

impl PgStore {
    /// [`crate::store::contract::Accounts::purge_account`].
    pub async fn purge_account(&self, account: &str) -> Result<Purged, StoreError> {
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
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "DELETE FROM endpoint_minutes WHERE endpoint_id = ANY($1)",
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
        ] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE account_id = $1"),
                &[&account],
            )
            .await?;
        }
        tx.commit().await?;
        drop(client);
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
