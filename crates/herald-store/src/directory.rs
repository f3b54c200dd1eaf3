//! What every ingest and attempt reads from memory rather than storage: endpoints by id (every
//! ingest fans out over them) and synced plans by account (every attempt asks). Both stores keep
//! one: sled fills it from its trees at open and writes through it; PostgreSQL fills it from its
//! tables and keeps it in step with the other nodes' change notices.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, RwLock};

use herald_core::model::{Endpoint, Ordering};

/// This node's copy of the directory (named apart from [`super::contract::Directory`], the
/// operations that change it).
#[derive(Default)]
pub struct DirectoryCopy {
    endpoints: RwLock<HashMap<String, Arc<Endpoint>>>,
    plans: RwLock<HashMap<String, String>>,
    /// Bumped by every change of one entry, so a reload from storage can tell that an entry
    /// changed while it read ([`DirectoryCopy::replace_endpoints`]).
    changes: AtomicU64,
}

impl DirectoryCopy {
    pub fn new(endpoints: HashMap<String, Arc<Endpoint>>, plans: HashMap<String, String>) -> Self {
        DirectoryCopy {
            endpoints: RwLock::new(endpoints),
            plans: RwLock::new(plans),
            changes: AtomicU64::new(0),
        }
    }

    pub fn endpoint(&self, id: &str) -> Option<Arc<Endpoint>> {
        read(&self.endpoints).get(id).cloned()
    }

    /// Some endpoint's id, picked at random, when there are more than `n` endpoints (`None`
    /// otherwise): where a walk over the endpoints that visits `n` of them may start, so every
    /// endpoint gets its turn.
    pub fn endpoint_beyond(&self, n: usize) -> Option<String> {
        use rand::Rng;
        let endpoints = read(&self.endpoints);
        if endpoints.len() <= n {
            return None;
        }
        let i = rand::thread_rng().gen_range(0..endpoints.len());
        endpoints.keys().nth(i).cloned()
    }

    /// The account's endpoints, oldest first.
    pub fn account_endpoints(&self, account_id: &str) -> Vec<Arc<Endpoint>> {
        let mut eps: Vec<_> = read(&self.endpoints)
            .values()
            .filter(|e| e.account_id == account_id)
            .cloned()
            .collect();
        eps.sort_by(|a, b| a.id.cmp(&b.id));
        eps
    }

    /// The ordering (docs/delivery-contract.md) of the endpoint `id`, if it is an ordered endpoint.
    pub fn ordering(&self, id: Option<&str>) -> Option<Ordering> {
        read(&self.endpoints).get(id?)?.ordering.clone()
    }

    /// Every account with a synced plan or an endpoint, sorted.
    pub fn account_ids(&self) -> Vec<String> {
        let mut ids: BTreeSet<String> = read(&self.plans).keys().cloned().collect();
        ids.extend(read(&self.endpoints).values().map(|e| e.account_id.clone()));
        ids.into_iter().collect()
    }

    /// The account's synced plan; `None` when none was synced (or it was removed).
    pub fn plan(&self, account_id: &str) -> Option<String> {
        read(&self.plans).get(account_id).cloned()
    }

    /// Keeps an endpoint as written; returns it as shared from now on.
    pub fn put_endpoint(&self, ep: Endpoint) -> Arc<Endpoint> {
        let ep = Arc::new(ep);
        let mut endpoints = write(&self.endpoints);
        self.changes.fetch_add(1, AtomicOrdering::AcqRel);
        endpoints.insert(ep.id.clone(), ep.clone());
        ep
    }

    pub fn remove_endpoint(&self, id: &str) {
        let mut endpoints = write(&self.endpoints);
        self.changes.fetch_add(1, AtomicOrdering::AcqRel);
        endpoints.remove(id);
    }

    pub fn set_plan(&self, account_id: &str, plan: Option<String>) {
        let mut plans = write(&self.plans);
        self.changes.fetch_add(1, AtomicOrdering::AcqRel);
        match plan {
            Some(p) => plans.insert(account_id.to_string(), p),
            None => plans.remove(account_id),
        };
    }

    /// The count of changes so far: read before a reload starts reading storage.
    pub fn changes(&self) -> u64 {
        self.changes.load(AtomicOrdering::Acquire)
    }

    /// Replaces every endpoint with `all`, read from storage after [`changes`](Self::changes)
    /// said `seen`, unless an entry changed since (that change may be newer than what `all`
    /// holds): then nothing is replaced and `false` says to read again.
    pub fn replace_endpoints(&self, all: HashMap<String, Arc<Endpoint>>, seen: u64) -> bool {
        let mut endpoints = write(&self.endpoints);
        if self.changes() != seen {
            return false;
        }
        *endpoints = all;
        true
    }

    /// Like [`replace_endpoints`](Self::replace_endpoints), for the plans.
    pub fn replace_plans(&self, all: HashMap<String, String>, seen: u64) -> bool {
        let mut plans = write(&self.plans);
        if self.changes() != seen {
            return false;
        }
        *plans = all;
        true
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(id: &str) -> Endpoint {
        use herald_core::model::{EndpointState, SignatureKind};
        Endpoint {
            id: id.into(),
            account_id: "a".into(),
            url: "https://example.com/hook".into(),
            description: String::new(),
            event_types: Vec::new(),
            headers: Default::default(),
            retry_policy: "standard".into(),
            signature: SignatureKind::Hmac,
            state: EndpointState::Active,
            verified: true,
            created_at: 0,
            updated_at: 0,
            secrets: Vec::new(),
            ordering: None,
            rate_limit: None,
            client_certificate: None,
            filter: None,
            uid: None,
            metadata: Default::default(),
            channels: Vec::new(),
            signature_headers: Default::default(),
            propagate_trace: false,
        }
    }

    /// A reload that read storage before an endpoint was written must not drop it: it is
    /// refused, and the reader reads again.
    #[test]
    fn a_reload_older_than_a_change_is_refused() {
        let d = DirectoryCopy::default();
        let seen = d.changes();
        // Meanwhile: an endpoint is created (by this node, or another node's notice).
        d.put_endpoint(endpoint("ep_1"));
        assert!(
            !d.replace_endpoints(HashMap::new(), seen),
            "a stale read replaced"
        );
        assert!(d.endpoint("ep_1").is_some());
        let seen = d.changes();
        let mut fresh = HashMap::new();
        fresh.insert("ep_1".to_string(), Arc::new(endpoint("ep_1")));
        assert!(d.replace_endpoints(fresh, seen));
        assert!(!d.replace_plans(HashMap::new(), seen - 1));
    }
}
