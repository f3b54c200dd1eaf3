//! Endpoints' attempts per minute for the charts: each attempt is counted in memory, and the
//! counts are added to the store every few seconds ([`FLUSH_EVERY`]), where every node's
//! counts meet and a restart finds them (docs/api.md, "Endpoints"). The store keeps each minute
//! for a day ([`KEEP_MS`]) and the hour it is in for a week ([`KEEP_HOURS_MS`]). Reads add this node's counts not yet added, so a node's own
//! attempts show at once; another node's show within [`FLUSH_EVERY`]. A kill -9 loses at most
//! that much of the chart (never anything of the delivery log).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::{lock, Engine};
use crate::clock::Millis;
use crate::model::Status;
use crate::shutdown::Shutdown;
use crate::store::prelude::*;
use crate::store::{Minute, StoreError};

/// How often a node adds its counts to the store.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// How long the store keeps an endpoint's minutes.
pub const KEEP_MS: Millis = 24 * 3600 * 1000;
/// How long the store keeps an endpoint's hours.
pub const KEEP_HOURS_MS: Millis = 7 * KEEP_MS;
/// How often the store's minutes are trimmed to [`KEEP_MS`].
const TRIM_EVERY_MS: Millis = 3600 * 1000;
/// Counts kept for the next flush at most (endpoints × minutes), should the store fail for a
/// long time: past it, the oldest are dropped (they are only the chart's).
const MAX_UNFLUSHED: usize = 100_000;

/// Counts not yet added to the store, by endpoint and minute, and each endpoint's last
/// success on this node until the store has kept it: what the endpoint's `last_success_at`
/// shows at once, and every node and a restart read from the store after the flush.
#[derive(Default)]
pub struct Unflushed {
    minutes: HashMap<(String, Millis), Minute>,
    successes: HashMap<String, Millis>,
}

/// What one flush writes.
type Flush = (Vec<(String, Minute)>, Vec<(String, Millis)>);

impl Unflushed {
    pub fn record(&mut self, endpoint_id: &str, now: Millis, status: Status, duration_ms: u64) {
        if status == Status::Delivered {
            self.success(endpoint_id, now);
        }
        let at = now.div_euclid(Minute::MS) * Minute::MS;
        self.minutes
            .entry((endpoint_id.to_string(), at))
            .or_insert_with(|| Minute {
                at,
                ..Minute::default()
            })
            .record(status, duration_ms);
    }

    /// Notes a success; the endpoint's id is copied only when the store has kept its last one.
    fn success(&mut self, endpoint_id: &str, at: Millis) {
        match self.successes.get_mut(endpoint_id) {
            Some(kept) => *kept = (*kept).max(at),
            None => {
                self.successes.insert(endpoint_id.to_string(), at);
            }
        }
    }

    /// Drops the counts of these endpoints (their account was purged).
    pub fn forget(&mut self, endpoints: &[String]) {
        self.minutes.retain(|(id, _), _| !endpoints.contains(id));
        self.successes.retain(|id, _| !endpoints.contains(id));
    }

    /// What a flush writes: the counts (taken) and the last successes (copied: they stay until
    /// the store has kept them, [`Self::kept`], so a reader never finds them in neither place).
    fn take(&mut self) -> Flush {
        (
            self.minutes.drain().map(|((id, _), m)| (id, m)).collect(),
            self.successes
                .iter()
                .map(|(id, at)| (id.clone(), *at))
                .collect(),
        )
    }

    /// Forgets the last successes the store has kept, unless a later one came meanwhile.
    fn kept(&mut self, successes: &[(String, Millis)]) {
        for (id, at) in successes {
            if self.successes.get(id).is_some_and(|now| now <= at) {
                self.successes.remove(id);
            }
        }
    }

    /// This node's last success of the endpoint that the store may not have kept yet.
    pub(super) fn last_success(&self, endpoint_id: &str) -> Option<Millis> {
        self.successes.get(endpoint_id).copied()
    }

    /// Puts back counts a flush could not add.
    fn put_back(&mut self, minutes: Vec<(String, Minute)>) {
        for (id, m) in minutes {
            self.minutes.entry((id, m.at)).or_default().add(&m);
        }
        if self.minutes.len() > MAX_UNFLUSHED {
            let mut ats: Vec<Millis> = self.minutes.keys().map(|(_, at)| *at).collect();
            ats.sort_unstable();
            let cut = ats[self.minutes.len() - MAX_UNFLUSHED];
            self.minutes.retain(|(_, at), _| *at >= cut);
        }
    }

    /// Every endpoint's counts from the minute starting at `from` on.
    pub(super) fn since(&self, from: Millis) -> Vec<(String, Minute)> {
        self.minutes
            .iter()
            .filter(|((_, at), _)| *at >= from)
            .map(|((id, _), m)| (id.clone(), *m))
            .collect()
    }

    fn of(&self, endpoint_id: &str, from: Millis) -> Vec<Minute> {
        self.minutes
            .iter()
            .filter(|((id, at), _)| id == endpoint_id && *at >= from)
            .map(|(_, m)| *m)
            .collect()
    }
}

impl Engine {
    /// Adds this node's counts to the store, and keeps its endpoints' last successes there;
    /// on failure they wait for the next flush.
    pub async fn flush_minutes(&self) {
        // A deleted endpoint's counts (its account purged since they were counted) are not
        // added: the store adds only to endpoints that exist.
        let (minutes, successes) = lock(&self.unflushed).take();
        if !minutes.is_empty() {
            if let Err(e) = self.store.add_minutes(minutes.clone()).await {
                tracing::warn!(error = %e, "cannot store the charts' minute counts; trying again");
                lock(&self.unflushed).put_back(minutes);
            }
        }
        if !successes.is_empty() {
            match self.store.keep_last_successes(successes.clone()).await {
                Ok(()) => lock(&self.unflushed).kept(&successes),
                // They stay for the next flush (one per endpoint: bounded).
                Err(e) => {
                    tracing::warn!(error = %e, "cannot store endpoints' last successes; trying again")
                }
            }
        }
    }

    /// Flushes every [`FLUSH_EVERY`] and trims the store's minutes every hour, until shutdown
    /// (the scheduler flushes once more after its drain).
    pub(super) async fn keep_minutes(self: Arc<Self>, mut shutdown: Shutdown) {
        let mut next_trim = 0;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(FLUSH_EVERY) => {}
                _ = shutdown.wait() => return,
            }
            self.flush_minutes().await;
            let now = self.clock.now_ms();
            if now >= next_trim {
                let trimmed = async {
                    self.store.trim_minutes(now - KEEP_MS - Minute::MS).await?;
                    self.store
                        .trim_hours(now - KEEP_HOURS_MS - Minute::HOUR_MS)
                        .await
                };
                match trimmed.await {
                    Ok(_) => next_trim = now + TRIM_EVERY_MS,
                    Err(e) => tracing::warn!(error = %e, "cannot trim the charts' counts"),
                }
            }
        }
    }

    /// The endpoint's minutes with attempts from `from` on, oldest first: the store's, with
    /// this node's counts not yet added.
    pub async fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        let minutes = self.store.endpoint_minutes(endpoint_id, from).await?;
        Ok(self.with_unflushed(minutes, endpoint_id, from, Minute::MS))
    }

    /// The endpoint's hours with attempts from `from` on, oldest first: the store's, with this
    /// node's counts not yet added summed into their hours.
    pub async fn endpoint_hours(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        let hours = self.store.endpoint_hours(endpoint_id, from).await?;
        Ok(self.with_unflushed(hours, endpoint_id, from, Minute::HOUR_MS))
    }

    /// `rows` (periods of `period` ms) with this node's counts not yet added summed into
    /// their periods, oldest first.
    fn with_unflushed(
        &self,
        mut rows: Vec<Minute>,
        endpoint_id: &str,
        from: Millis,
        period: Millis,
    ) -> Vec<Minute> {
        for m in lock(&self.unflushed).of(endpoint_id, from) {
            let at = m.at - m.at.rem_euclid(period);
            match rows.iter_mut().find(|x| x.at == at) {
                Some(x) => x.add(&m),
                None => rows.push(Minute { at, ..m }),
            }
        }
        rows.sort_by_key(|m| m.at);
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A last success stays in memory until the store has kept it, and one newer than what a
    /// flush wrote stays for the next: it is always in memory or in the store.
    #[test]
    fn a_last_success_stays_until_the_store_keeps_it() {
        let mut u = Unflushed::default();
        u.record("e", 2_000, Status::Delivered, 1);
        u.record("e", 1_000, Status::Delivered, 1);
        u.record("e", 3_000, Status::HttpError, 1);
        assert_eq!(u.last_success("e"), Some(2_000));
        let (_, successes) = u.take();
        assert_eq!(successes, [("e".to_string(), 2_000)]);
        assert_eq!(
            u.last_success("e"),
            Some(2_000),
            "a flush under way keeps it"
        );
        u.record("e", 4_000, Status::Delivered, 1);
        u.kept(&successes);
        assert_eq!(u.last_success("e"), Some(4_000), "newer than what was kept");
        let (_, successes) = u.take();
        u.kept(&successes);
        assert_eq!(u.last_success("e"), None);
        u.record("p", 5_000, Status::Delivered, 1);
        u.forget(&["p".to_string()]);
        assert_eq!(u.last_success("p"), None, "gone with a purge");
    }
}
