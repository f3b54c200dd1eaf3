//! What every ingest and attempt reads from memory rather than storage: endpoints by id (every
//! ingest fans out over them) and synced plans by account (every attempt asks). Both stores keep
//! one: sled fills it from its trees at open and writes through it; PostgreSQL fills it from its
//! tables and keeps it in step with the other nodes' change notices.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use crate::model::{Endpoint, Ordering};

#[derive(Default)]
pub struct Directory {
    endpoints: RwLock<HashMap<String, Arc<Endpoint>>>,
    plans: RwLock<HashMap<String, String>>,
}

impl Directory {
    pub fn new(endpoints: HashMap<String, Arc<Endpoint>>, plans: HashMap<String, String>) -> Self {
        Directory {
            endpoints: RwLock::new(endpoints),
            plans: RwLock::new(plans),
        }
    }

    pub fn endpoint(&self, id: &str) -> Option<Arc<Endpoint>> {
        read(&self.endpoints).get(id).cloned()
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

    /// The ordering (SPEC §15) of the endpoint `id`, if it is an ordered endpoint.
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
        write(&self.endpoints).insert(ep.id.clone(), ep.clone());
        ep
    }

    pub fn remove_endpoint(&self, id: &str) {
        write(&self.endpoints).remove(id);
    }

    pub fn set_plan(&self, account_id: &str, plan: Option<String>) {
        let mut plans = write(&self.plans);
        match plan {
            Some(p) => plans.insert(account_id.to_string(), p),
            None => plans.remove(account_id),
        };
    }

    pub fn replace_endpoints(&self, all: HashMap<String, Arc<Endpoint>>) {
        *write(&self.endpoints) = all;
    }

    pub fn replace_plans(&self, all: HashMap<String, String>) {
        *write(&self.plans) = all;
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}
