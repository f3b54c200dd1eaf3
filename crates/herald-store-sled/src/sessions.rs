//! Portal sessions (docs/api.md), in the `portal_sessions` tree: the token's SHA-256 → the
//! session, and its id → the token's hash (to revoke it). Tokens themselves are never stored.
//! Expired sessions answer nothing and are pruned by retention.

use super::{SledStore, StoreError};
use herald_core::clock::Millis;
use herald_core::model::PortalSession;
use herald_store::contract::Sessions;
use herald_store::token_hash;
use std::future::ready;
use std::future::Future;

fn by_hash(hash: &[u8; 32]) -> Vec<u8> {
    [b"h".as_slice(), hash].concat()
}

fn by_id(id: &str) -> Vec<u8> {
    [b"i".as_slice(), id.as_bytes()].concat()
}

impl SledStore {
    /// The live session of a token, if it has one (`None` once it expired or was revoked).
    pub fn portal_session(
        &self,
        token: &str,
        now: Millis,
    ) -> Result<Option<PortalSession>, StoreError> {
        let Some(v) = self
            .inner
            .trees
            .portal_sessions
            .get(by_hash(&token_hash(token)))?
        else {
            return Ok(None);
        };
        let s: PortalSession = serde_json::from_slice(&v)
            .map_err(|e| StoreError::Corrupt(format!("portal session: {e}")))?;
        Ok((s.expires_at > now).then_some(s))
    }

    /// Removes sessions that expired before `now`. Returns how many.
    pub fn prune_portal_sessions(&self, now: Millis) -> Result<usize, StoreError> {
        let t = &self.inner.trees.portal_sessions;
        let mut n = 0;
        for item in t.scan_prefix(b"h") {
            let (k, v) = item?;
            let Ok(s) = serde_json::from_slice::<PortalSession>(&v) else {
                continue;
            };
            if s.expires_at <= now {
                t.remove(by_id(&s.id))?;
                t.remove(k)?;
                n += 1;
            }
        }
        Ok(n)
    }
}

impl Sessions for SledStore {
    fn portal_session(
        &self,
        token: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<PortalSession>, StoreError>> + Send {
        ready(SledStore::portal_session(self, token, now))
    }

    /// Stores a new session for the token whose hash is `hash`, durably.
    async fn create_portal_session(
        &self,
        session: &PortalSession,
        hash: [u8; 32],
    ) -> Result<(), StoreError> {
        let value = serde_json::to_vec(session).map_err(|e| StoreError::Encode(e.to_string()))?;
        let mut batch = sled::Batch::default();
        batch.insert(by_hash(&hash), value);
        batch.insert(by_id(&session.id), &hash[..]);
        self.inner.trees.portal_sessions.apply_batch(batch)?;
        self.sync().await
    }

    /// Revokes a session at once; false if there was none.
    async fn revoke_portal_session(&self, id: &str) -> Result<bool, StoreError> {
        let t = &self.inner.trees.portal_sessions;
        let Some(hash) = t.remove(by_id(id))? else {
            return Ok(false);
        };
        t.remove([b"h".as_slice(), &hash].concat())?;
        self.sync().await?;
        Ok(true)
    }
}
