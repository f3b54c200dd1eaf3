//! Portal sessions on PostgreSQL (docs/api.md, docs/cluster.md): shared, so a session made through
//! one node opens the portal through any; tokens are never stored, only their SHA-256.

use super::PgStore;
use herald_core::clock::Millis;
use herald_core::model::PortalSession;
use herald_store::contract::Sessions;
use herald_store::token_hash;
use herald_store::StoreError;

impl PgStore {
    /// Removes sessions that expired before `now`, at most `max`. Returns how many.
    pub async fn prune_portal_sessions(&self, now: Millis, max: i64) -> Result<u64, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .execute(
                "DELETE FROM portal_sessions WHERE id IN (
                     SELECT id FROM portal_sessions WHERE expires_at <= $1 LIMIT $2)",
                &[&now, &max],
            )
            .await?)
    }
}

impl Sessions for PgStore {
    async fn create_portal_session(
        &self,
        session: &PortalSession,
        hash: [u8; 32],
    ) -> Result<(), StoreError> {
        self.db
            .client()
            .await?
            .execute(
                "INSERT INTO portal_sessions (id, token_hash, account_id, read_only, created_at,
                                              expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &session.id,
                    &&hash[..],
                    &session.account_id,
                    &session.read_only,
                    &session.created_at,
                    &session.expires_at,
                ],
            )
            .await?;
        Ok(())
    }

    /// The live session of a token (`None` once it expired or was revoked).
    async fn portal_session(
        &self,
        token: &str,
        now: Millis,
    ) -> Result<Option<PortalSession>, StoreError> {
        let hash = token_hash(token);
        Ok(self
            .db
            .client()
            .await?
            .query_opt(
                "SELECT id, account_id, read_only, created_at, expires_at FROM portal_sessions
                 WHERE token_hash = $1 AND expires_at > $2",
                &[&&hash[..], &now],
            )
            .await?
            .map(|r| PortalSession {
                id: r.get(0),
                account_id: r.get(1),
                read_only: r.get(2),
                created_at: r.get(3),
                expires_at: r.get(4),
            }))
    }

    /// Revokes a session at once; false if there was none.
    async fn revoke_portal_session(&self, id: &str) -> Result<bool, StoreError> {
        let n = self
            .db
            .client()
            .await?
            .execute("DELETE FROM portal_sessions WHERE id = $1", &[&id])
            .await?;
        Ok(n > 0)
    }
}
