//! Accounts on PostgreSQL: synced plans (kept in every node's memory like endpoints, and
//! refreshed by `p:` + account notices) and account secrets for header macros.

use std::collections::HashMap;

use super::PgStore;
use herald_store::contract::Accounts;
use herald_store::StoreError;

impl PgStore {
    /// Reloads every plan.
    pub(super) async fn load_plans(&self) -> Result<(), StoreError> {
        // Read again if a plan changed meanwhile, as endpoints are.
        loop {
            let seen = self.directory.changes();
            let rows = self
                .db
                .client()
                .await?
                .query(
                    "SELECT account_id, plan FROM accounts WHERE plan IS NOT NULL",
                    &[],
                )
                .await?;
            let all: HashMap<String, String> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            if self.directory.replace_plans(all, seen) {
                return Ok(());
            }
        }
    }

    /// Reloads one account's plan.
    pub(super) async fn load_plan(&self, account_id: &str) -> Result<(), StoreError> {
        let plan: Option<String> = self
            .db
            .client()
            .await?
            .query_opt(
                "SELECT plan FROM accounts WHERE account_id = $1",
                &[&account_id],
            )
            .await?
            .and_then(|r| r.get(0));
        self.directory.set_plan(account_id, plan);
        Ok(())
    }
}

impl Accounts for PgStore {
    /// Syncs the account's plan (`None` removes it).
    async fn set_account_plan(
        &self,
        account_id: &str,
        plan: Option<String>,
    ) -> Result<(), StoreError> {
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "INSERT INTO accounts (account_id, plan) VALUES ($1, $2)
             ON CONFLICT (account_id) DO UPDATE SET plan = excluded.plan",
            &[&account_id, &plan],
        )
        .await?;
        tx.execute(
            "SELECT pg_notify($1, $2)",
            &[&super::CHANGED_CHANNEL, &format!("p:{account_id}")],
        )
        .await?;
        let version = super::version::bump(&tx).await?;
        tx.commit().await?;
        self.directory.set_plan(account_id, plan);
        self.saw_own_change(version);
        Ok(())
    }

    /// An account secret for header macros.
    async fn account_secret(
        &self,
        account_id: &str,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .query_opt(
                "SELECT value FROM account_secrets WHERE account_id = $1 AND name = $2",
                &[&account_id, &name],
            )
            .await?
            .map(|r| r.get(0)))
    }

    async fn set_account_secret(
        &self,
        account_id: &str,
        name: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        self.db
            .client()
            .await?
            .execute(
                "INSERT INTO account_secrets (account_id, name, value) VALUES ($1, $2, $3)
                 ON CONFLICT (account_id, name) DO UPDATE SET value = excluded.value",
                &[&account_id, &name, &value],
            )
            .await?;
        Ok(())
    }
}
