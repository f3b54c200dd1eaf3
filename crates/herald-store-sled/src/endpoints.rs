//! Endpoints: kept in memory (every ingest fans out over them) and in the `endpoints` tree: a
//! record row per endpoint (every field but its secrets) and its secrets in rows of their own.
//!
//! Every change, the API's and the engine's, goes through one path under one lock: read the
//! current endpoint, change it, write sled and the map. The fsync that makes the change
//! durable happens after the lock is released, so changes never queue behind one another's
//! fsync, and none is lost to another made at the same time.

use std::collections::HashMap;
use std::sync::Arc;

use super::{codec, SledStore, StoreError};
use herald_core::model::{ClientCertificate, Endpoint, Ordering, StoredSecret};
use herald_store::contract::Directory;
use herald_store::directory::DirectoryCopy;
use std::future::ready;
use std::future::Future;

impl SledStore {
    /// The endpoint's client certificate chain and key (PEM), if it has them.
    pub fn client_certificate_pem(&self, id: &str) -> Result<Option<(String, String)>, StoreError> {
        let mut value = Vec::new();
        for item in self.inner.trees.client_certs.scan_prefix(cert_prefix(id)) {
            value.extend_from_slice(&item?.1);
        }
        if value.is_empty() {
            return Ok(None);
        }
        let pair: StoredPair = serde_json::from_slice(&value)
            .map_err(|e| StoreError::Corrupt(format!("client certificate of {id}: {e}")))?;
        Ok(Some((pair.certificate, pair.private_key)))
    }

    /// Replaces the endpoint's stored pair in one batch; the caller holds `endpoint_writes`.
    fn write_client_certificate(
        &self,
        id: &str,
        pair: Option<(&str, &str)>,
    ) -> Result<(), StoreError> {
        let tree = &self.inner.trees.client_certs;
        let mut batch = sled::Batch::default();
        for item in tree.scan_prefix(cert_prefix(id)) {
            batch.remove(item?.0);
        }
        if let Some((certificate, private_key)) = pair {
            let value = serde_json::to_vec(&StoredPair {
                certificate: certificate.to_string(),
                private_key: private_key.to_string(),
            })
            .map_err(|e| StoreError::Encode(e.to_string()))?;
            for (i, chunk) in value.chunks(codec::CHUNK).enumerate() {
                let mut k = cert_prefix(id);
                k.extend_from_slice(&(i as u16).to_be_bytes());
                batch.insert(k, chunk);
            }
        }
        tree.apply_batch(batch)?;
        Ok(())
    }

    /// Writes sled and the map; the caller holds `endpoint_writes`. The endpoint's record and
    /// its secrets' rows go in one batch, which sled recovers all or nothing.
    fn write_endpoint(&self, mut ep: Endpoint) -> Result<Arc<Endpoint>, StoreError> {
        let secrets = std::mem::take(&mut ep.secrets);
        let value = serde_json::to_vec(&ep).map_err(|e| StoreError::Encode(e.to_string()));
        ep.secrets = secrets;
        let value = value?;
        herald_store::check_endpoint_json(&ep.id, &value)?;
        let tree = &self.inner.trees.endpoints;
        let mut batch = sled::Batch::default();
        put_secrets(tree, &mut batch, &ep.id, &ep.secrets)?;
        batch.insert(ep.id.as_bytes(), value);
        tree.apply_batch(batch)?;
        self.set_ordering(&ep.id, ep.ordering.clone());
        if ep.rate_limit.is_none() {
            self.forget_bucket(&ep.id);
        }
        Ok(self.directory.put_endpoint(ep))
    }

    /// Keeps the committer's view of which endpoints are ordered in step.
    fn set_ordering(&self, id: &str, ordering: Option<Ordering>) {
        let lane = super::lane_of(Some(id));
        let mut orderings = self
            .inner
            .orderings
            .write()
            .unwrap_or_else(|e| e.into_inner());
        match ordering {
            Some(o) => orderings.insert(lane, o),
            None => orderings.remove(&lane),
        };
    }

    pub(super) fn lock_endpoint_writes(&self) -> std::sync::MutexGuard<'_, ()> {
        self.endpoint_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// The rows of an endpoint's secrets in the `endpoints` tree: its id and a NUL (never in an id),
/// then the row's number. The endpoint's record is the row keyed by its id alone.
fn secrets_prefix(id: &str) -> Vec<u8> {
    [id.as_bytes(), b"\0"].concat()
}

/// Adds to `batch` the rows that replace the endpoint's stored secrets with `secrets`: their JSON
/// in rows of at most [`codec::CHUNK`] bytes, apart from the record, so they never count toward
/// its size (docs/api.md, `too_large`). Also used by the format 8 → 9 migration.
pub(super) fn put_secrets(
    tree: &sled::Tree,
    batch: &mut sled::Batch,
    id: &str,
    secrets: &[StoredSecret],
) -> Result<(), StoreError> {
    for item in tree.scan_prefix(secrets_prefix(id)) {
        batch.remove(item?.0);
    }
    if secrets.is_empty() {
        return Ok(());
    }
    let value = serde_json::to_vec(secrets).map_err(|e| StoreError::Encode(e.to_string()))?;
    for (i, chunk) in value.chunks(codec::CHUNK).enumerate() {
        let mut k = secrets_prefix(id);
        k.extend_from_slice(&(i as u16).to_be_bytes());
        batch.insert(k, chunk);
    }
    Ok(())
}

/// Every endpoint, by id, as the `endpoints` tree holds them: each record with the secrets of its
/// rows (in key order, right after the record).
pub(super) fn load(tree: &sled::Tree) -> Result<HashMap<String, Arc<Endpoint>>, StoreError> {
    let mut records = Vec::new();
    let mut secrets: HashMap<String, Vec<u8>> = HashMap::new();
    for item in tree.iter() {
        let (k, v) = item?;
        match k.iter().position(|b| *b == 0) {
            None => {
                let ep: Endpoint = serde_json::from_slice(&v)
                    .map_err(|e| StoreError::Corrupt(format!("endpoint: {e}")))?;
                records.push(ep);
            }
            Some(nul) => {
                let id = String::from_utf8_lossy(&k[..nul]).into_owned();
                secrets.entry(id).or_default().extend_from_slice(&v);
            }
        }
    }
    let mut endpoints = HashMap::with_capacity(records.len());
    for mut ep in records {
        if let Some(json) = secrets.remove(&ep.id) {
            ep.secrets = serde_json::from_slice(&json)
                .map_err(|e| StoreError::Corrupt(format!("secrets of endpoint {}: {e}", ep.id)))?;
        }
        endpoints.insert(ep.id.clone(), Arc::new(ep));
    }
    Ok(endpoints)
}

/// A client certificate chain and key as stored.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredPair {
    certificate: String,
    private_key: String,
}

/// The rows of one endpoint's stored pair: its id and a NUL (never in an id).
fn cert_prefix(id: &str) -> Vec<u8> {
    [id.as_bytes(), b"\0"].concat()
}

impl Directory for SledStore {
    fn directory(&self) -> &DirectoryCopy {
        &self.directory
    }

    fn fresh_directory(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        ready(Ok(()))
    }

    fn client_certificate_pem(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(String, String)>, StoreError>> + Send {
        ready(SledStore::client_certificate_pem(self, id))
    }

    /// Creates an endpoint unless its account has `max_per_account` already (`Ok(None)`).
    /// Durable when this returns.
    async fn create_endpoint(
        &self,
        ep: Endpoint,
        max_per_account: usize,
    ) -> Result<Option<Arc<Endpoint>>, StoreError> {
        let written = {
            let _w = self.lock_endpoint_writes();
            if self.account_endpoints(&ep.account_id).len() >= max_per_account {
                return Ok(None);
            }
            self.write_endpoint(ep)?
        };
        self.sync().await?;
        Ok(Some(written))
    }

    /// Changes the endpoint `id` with `f`, which sees the current endpoint and says whether it
    /// changed it (`Ok(false)`: nothing is written) or why not (its error is returned). Returns
    /// the endpoint as it is now and whether `f` changed it; `Ok(None)` if there is no such
    /// endpoint. Durable when this returns. Every endpoint change (the API's
    /// and the engine's) goes through here or [`SledStore::put_endpoint`], so none is lost to
    /// another made at the same time, and memory and disk always agree.
    async fn change_endpoint<E: From<StoreError>>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Endpoint) -> Result<bool, E>,
    ) -> Result<Option<(Arc<Endpoint>, bool)>, E> {
        let written = {
            let _w = self.lock_endpoint_writes();
            let Some(current) = self.endpoint(id) else {
                return Ok(None);
            };
            let mut ep = (*current).clone();
            if !f(&mut ep)? {
                return Ok(Some((current, false)));
            }
            self.write_endpoint(ep)?
        };
        self.sync().await?;
        Ok(Some((written, true)))
    }

    /// Stores an endpoint as given (created or replaced), durably.
    async fn put_endpoint(&self, ep: Endpoint) -> Result<Arc<Endpoint>, StoreError> {
        let written = {
            let _w = self.lock_endpoint_writes();
            self.write_endpoint(ep)?
        };
        self.sync().await?;
        Ok(written)
    }

    async fn delete_endpoint(&self, id: &str) -> Result<bool, StoreError> {
        let existed = {
            let _w = self.lock_endpoint_writes();
            let tree = &self.inner.trees.endpoints;
            let existed = tree.contains_key(id.as_bytes())?;
            let mut batch = sled::Batch::default();
            batch.remove(id.as_bytes());
            for item in tree.scan_prefix(secrets_prefix(id)) {
                batch.remove(item?.0);
            }
            tree.apply_batch(batch)?;
            self.write_client_certificate(id, None)?;
            self.forget_breaker(id)?;
            self.forget_last_success(id)?;
            self.forget_alert_mark(id)?;
            self.forget_bucket(id);
            self.directory.remove_endpoint(id);
            self.set_ordering(id, None);
            existed
        };
        self.sync().await?;
        Ok(existed)
    }

    /// Sets (or with `None` removes) the endpoint's client certificate: the PEM chain and key
    /// go to their own tree, what the endpoint shows of them to the endpoint. `Ok(None)` if
    /// there is no such endpoint. Durable when this returns.
    async fn set_client_certificate(
        &self,
        id: &str,
        pair: Option<(&str, &str, ClientCertificate)>,
        now: herald_core::clock::Millis,
    ) -> Result<Option<Arc<Endpoint>>, StoreError> {
        let written = {
            let _w = self.lock_endpoint_writes();
            let Some(current) = self.endpoint(id) else {
                return Ok(None);
            };
            let mut ep = (*current).clone();
            ep.client_certificate = pair.as_ref().map(|p| p.2.clone());
            ep.updated_at = now;
            // The endpoint first: a row that would be too large is refused before anything
            // is written.
            let written = self.write_endpoint(ep)?;
            self.write_client_certificate(id, pair.map(|(c, k, _)| (c, k)))?;
            written
        };
        self.sync().await?;
        Ok(Some(written))
    }
}
