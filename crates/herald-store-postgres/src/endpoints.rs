//! Endpoints on PostgreSQL: every node keeps them all in memory, as on sled (every ingest fans
//! out over them), loaded at start and kept fresh by the change notifications every write sends
//! (`herald_changed`, payload `e:` + the endpoint's id; the listener reloads that endpoint, and
//! everything after it reconnects). A change is read, applied and written in one transaction
//! holding the endpoint's row, so changes made on two nodes at once never lose one another;
//! creations of one account are serialized by an advisory lock on the account, so
//! `endpoints.max_per_account` holds across nodes.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Notice, PgStore};
use herald_core::model::{ClientCertificate, Endpoint};
use herald_store::contract::Directory;
use herald_store::directory::DirectoryCopy;
use herald_store::StoreError;

impl Directory for PgStore {
    fn directory(&self) -> &DirectoryCopy {
        &self.directory
    }

    /// Reloads this node's copy if the database's version is past it (one small query
    /// otherwise).
    async fn fresh_directory(&self) -> Result<(), StoreError> {
        let now = self.directory_version_now().await?;
        if now > self.directory_mark() {
            self.reload_directory(now).await?;
        }
        Ok(())
    }

    async fn create_endpoint(
        &self,
        ep: Endpoint,
        max_per_account: usize,
    ) -> Result<Option<Arc<Endpoint>>, StoreError> {
        let _writes = self.endpoint_writes.lock().await;
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&format!("herald endpoints of {}", ep.account_id)],
        )
        .await?;
        let count: i64 = tx
            .query_one(
                "SELECT count(*) FROM endpoints WHERE account_id = $1",
                &[&ep.account_id],
            )
            .await?
            .get(0);
        if count as usize >= max_per_account {
            return Ok(None);
        }
        let version = write_endpoint(&tx, &ep).await?;
        tx.commit().await?;
        Ok(Some(self.cache_own(ep, version)))
    }

    /// `f` sees the endpoint as committed, under its row's lock.
    async fn change_endpoint<E: From<StoreError> + Send>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Endpoint) -> Result<bool, E> + Send,
    ) -> Result<Option<(Arc<Endpoint>, bool)>, E> {
        let _writes = self.endpoint_writes.lock().await;
        let mut client = self.db.client().await.map_err(StoreError::from)?;
        let tx = client.transaction().await.map_err(StoreError::from)?;
        let Some(mut ep) = read_endpoint(&tx, id, true).await? else {
            return Ok(None);
        };
        if !f(&mut ep)? {
            let current = self.cache_endpoint(ep);
            return Ok(Some((current, false)));
        }
        let version = write_endpoint(&tx, &ep).await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(Some((self.cache_own(ep, version), true)))
    }

    async fn put_endpoint(&self, ep: Endpoint) -> Result<Arc<Endpoint>, StoreError> {
        let _writes = self.endpoint_writes.lock().await;
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        let version = write_endpoint(&tx, &ep).await?;
        tx.commit().await?;
        Ok(self.cache_own(ep, version))
    }

    async fn delete_endpoint(&self, id: &str) -> Result<bool, StoreError> {
        let _writes = self.endpoint_writes.lock().await;
        let client = self.db.client().await?;
        let gone = client
            .query_opt(
                "WITH gone AS (DELETE FROM endpoints WHERE id = $1 RETURNING id),
                      breaker AS (DELETE FROM breakers WHERE endpoint_id = $1),
                      mark AS (DELETE FROM alert_marks WHERE endpoint_id = $1),
                      bucket AS (DELETE FROM rate_buckets WHERE endpoint_id = $1),
                      success AS (DELETE FROM endpoint_successes WHERE endpoint_id = $1),
                      bumped AS (UPDATE directory_version SET version = version + 1
                                 WHERE EXISTS (SELECT 1 FROM gone) RETURNING version)
                 SELECT (SELECT version FROM bumped), pg_notify($2, 'e:' || id) FROM gone",
                &[&id, &super::CHANGED_CHANNEL],
            )
            .await?;
        self.directory.remove_endpoint(id);
        self.breakers.forget(Some(id));
        let version = gone.as_ref().and_then(|r| r.get::<_, Option<i64>>(0));
        if let Some(v) = version {
            self.saw_own_change(v);
        }
        Ok(gone.is_some())
    }

    async fn set_client_certificate(
        &self,
        id: &str,
        pair: Option<(&str, &str, ClientCertificate)>,
        now: herald_core::clock::Millis,
    ) -> Result<Option<Arc<Endpoint>>, StoreError> {
        let _writes = self.endpoint_writes.lock().await;
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        let Some(mut ep) = read_endpoint(&tx, id, true).await? else {
            return Ok(None);
        };
        ep.client_certificate = pair.as_ref().map(|p| p.2.clone());
        ep.updated_at = now;
        let version = write_endpoint(&tx, &ep).await?;
        match pair {
            Some((certificate, private_key, _)) => {
                tx.execute(
                    "INSERT INTO client_certificates (endpoint_id, certificate, private_key)
                     VALUES ($1, $2, $3)
                     ON CONFLICT (endpoint_id) DO UPDATE
                         SET certificate = excluded.certificate, private_key = excluded.private_key",
                    &[&id, &certificate, &private_key],
                )
                .await?;
            }
            None => {
                tx.execute(
                    "DELETE FROM client_certificates WHERE endpoint_id = $1",
                    &[&id],
                )
                .await?;
            }
        }
        tx.commit().await?;
        Ok(Some(self.cache_own(ep, version)))
    }

    async fn client_certificate_pem(
        &self,
        id: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .query_opt(
                "SELECT certificate, private_key FROM client_certificates WHERE endpoint_id = $1",
                &[&id],
            )
            .await?
            .map(|r| (r.get(0), r.get(1))))
    }
}

impl PgStore {
    /// Reloads every endpoint (at start, and when notifications may have been missed).
    /// Reads every endpoint into memory, again if one changed meanwhile (a change this node
    /// made, or another node's notice, must not be undone by an older read).
    pub(super) async fn load_endpoints(&self) -> Result<(), StoreError> {
        loop {
            let seen = self.directory.changes();
            let rows = self
                .db
                .client()
                .await?
                .query("SELECT id, record, secrets FROM endpoints", &[])
                .await?;
            let mut all = HashMap::with_capacity(rows.len());
            for r in rows {
                let id: String = r.get(0);
                let ep = decode(&id, r.get(1), r.get(2))?;
                all.insert(id, Arc::new(ep));
            }
            if self.directory.replace_endpoints(all, seen) {
                return Ok(());
            }
        }
    }

    /// Applies another node's change notice to this node's copies.
    pub(super) async fn refresh(&self, notice: Notice<'_>) -> Result<(), StoreError> {
        match notice {
            Notice::Endpoint(id) => {
                let _writes = self.endpoint_writes.lock().await;
                let client = self.db.client().await?;
                match read_endpoint(&client, id, false).await? {
                    Some(ep) => {
                        self.cache_endpoint(ep);
                    }
                    None => {
                        // Deleted: its breaker row went with it.
                        self.directory.remove_endpoint(id);
                        self.breakers.forget(Some(id));
                    }
                }
            }
            Notice::Plan(account) => self.load_plan(account).await?,
            Notice::Breaker(id) => self.breakers.forget(Some(id)),
        }
        Ok(())
    }

    fn cache_endpoint(&self, ep: Endpoint) -> Arc<Endpoint> {
        self.directory.put_endpoint(ep)
    }

    /// Keeps a change of this node's own, committed as the directory's `version`.
    fn cache_own(&self, ep: Endpoint, version: i64) -> Arc<Endpoint> {
        let ep = self.cache_endpoint(ep);
        self.saw_own_change(version);
        ep
    }
}

/// An endpoint from its row: its record and its secrets, which the row keeps in a column of
/// their own (schema version 10), so they never count toward the record's size.
fn decode(
    id: &str,
    record: serde_json::Value,
    secrets: serde_json::Value,
) -> Result<Endpoint, StoreError> {
    let corrupt = |e: serde_json::Error| StoreError::Corrupt(format!("endpoint {id}: {e}"));
    let mut ep: Endpoint = serde_json::from_value(record).map_err(corrupt)?;
    ep.secrets = serde_json::from_value(secrets).map_err(corrupt)?;
    Ok(ep)
}

/// An endpoint's `record` and `secrets` columns.
pub(super) fn columns(ep: &Endpoint) -> Result<(serde_json::Value, serde_json::Value), StoreError> {
    let encode = |e: serde_json::Error| StoreError::Encode(e.to_string());
    let record = serde_json::to_value(herald_store::endpoint_fields(ep)).map_err(encode)?;
    let secrets = serde_json::to_value(&ep.secrets).map_err(encode)?;
    Ok((record, secrets))
}

/// The endpoint as committed (locking its row when `lock`).
async fn read_endpoint(
    c: &impl deadpool_postgres::GenericClient,
    id: &str,
    lock: bool,
) -> Result<Option<Endpoint>, StoreError> {
    let sql = if lock {
        "SELECT record, secrets FROM endpoints WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT record, secrets FROM endpoints WHERE id = $1"
    };
    match c.query_opt(sql, &[&id]).await? {
        Some(r) => Ok(Some(decode(id, r.get(0), r.get(1))?)),
        None => Ok(None),
    }
}

/// Writes the endpoint and tells the other nodes (the notice goes out with the commit);
/// returns the directory's version the change makes ([`super::version`]).
async fn write_endpoint(
    tx: &tokio_postgres::Transaction<'_>,
    ep: &Endpoint,
) -> Result<i64, StoreError> {
    herald_store::check_endpoint_size(ep)?;
    let (record, secrets) = columns(ep)?;
    tx.execute(
        "INSERT INTO endpoints (id, account_id, record, secrets, updated_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (id) DO UPDATE SET record = excluded.record, secrets = excluded.secrets,
             updated_at = excluded.updated_at",
        &[&ep.id, &ep.account_id, &record, &secrets, &ep.updated_at],
    )
    .await?;
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&super::CHANGED_CHANNEL, &format!("e:{}", ep.id)],
    )
    .await?;
    super::version::bump(tx).await
}
