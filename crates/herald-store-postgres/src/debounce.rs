//! Debounce on PostgreSQL (docs/delivery-contract.md, docs/cluster.md): a window per (account,
//! type, key) in `debounce_windows`, decided inside the ingest transaction under the window row's
//! lock, so events of one key on several nodes are decided one after another, as on one node. A
//! window's row is made (expired) before it is locked, so even the first two events of a key find a
//! row to wait on. The decision is [`herald_core::policy::debounce`]'s.
//!
//! Events of one key in the same transaction see each other's decisions through this
//! transaction's copy of their windows. A trailing candidate superseded by a newer event ends
//! `skipped` with a `debounced` attempt; one a node holds a lease on (being attempted now) is
//! left to its attempt, so the log never says `debounced` for a request a receiver got.

use std::collections::HashMap;

use super::rows::{ulid_from, DeliveryRows, NewAttempts};
use herald_core::clock::Millis;
use herald_core::policy::debounce::{self, Candidate, Decision, Window};
use herald_store::{DebounceRule, StoreError};

/// One transaction's windows and what they decided.
#[derive(Default)]
pub(super) struct Debouncer {
    /// The windows this transaction read or changed, by key, and whether it changed them.
    windows: HashMap<String, (Window, bool)>,
    /// Candidates made in this transaction: event → the index of its first delivery row.
    candidates: HashMap<u128, usize>,
}

impl Debouncer {
    /// Locks (and reads) the windows of `keys`, in sorted order: every ingest transaction takes
    /// its windows' locks in the same order, so none deadlocks another.
    pub(super) async fn lock_all(
        &mut self,
        tx: &impl deadpool_postgres::GenericClient,
        mut keys: Vec<&str>,
    ) -> Result<(), StoreError> {
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            self.read(tx, key).await?;
        }
        Ok(())
    }

    /// The decision for an event of `rule` at `now` (its window read by [`Debouncer::lock_all`]).
    pub(super) async fn decide(
        &mut self,
        tx: &impl deadpool_postgres::GenericClient,
        rule: &DebounceRule,
        now: Millis,
    ) -> Result<Decision, StoreError> {
        self.read(tx, &rule.key).await?;
        let (window, _) = &self.windows[&rule.key];
        Ok(debounce::decide(
            Some(window),
            now,
            rule.window_ms,
            rule.trailing,
        ))
    }

    /// Reads and locks the window of `rule_key` unless this transaction has it already.
    async fn read(
        &mut self,
        tx: &impl deadpool_postgres::GenericClient,
        rule_key: &str,
    ) -> Result<(), StoreError> {
        if self.windows.contains_key(rule_key) {
            return Ok(());
        }
        let key = rule_key.as_bytes();
        tx.execute(
            "INSERT INTO debounce_windows (key, ends_at) VALUES ($1, 0) ON CONFLICT DO NOTHING",
            &[&key],
        )
        .await?;
        let row = tx
            .query_one(
                "SELECT ends_at, candidate_event, candidate_count FROM debounce_windows
                 WHERE key = $1 FOR UPDATE",
                &[&key],
            )
            .await?;
        let candidate = match (
            row.get::<_, Option<Vec<u8>>>(1),
            row.get::<_, Option<i32>>(2),
        ) {
            (Some(e), Some(n)) => Some(Candidate {
                event: ulid_from(&e)?,
                deliveries: n.max(0) as usize,
            }),
            _ => None,
        };
        let window = Window {
            end: row.get(0),
            candidate,
        };
        self.windows.insert(rule_key.to_string(), (window, false));
        Ok(())
    }

    /// Keeps the window's new state (written by [`Debouncer::write`]).
    pub(super) fn set(&mut self, key: &str, window: Window) {
        self.windows.insert(key.to_string(), (window, true));
    }

    /// Notes that `event`'s deliveries, from row `first` on, are a trailing candidate.
    pub(super) fn candidate_rows(&mut self, event: u128, first: usize) {
        self.candidates.insert(event, first);
    }

    /// Ends the candidate's deliveries `debounced`: in this transaction's rows if it was made
    /// here, else in the table (those still pending and not under a live lease).
    pub(super) async fn supersede(
        &mut self,
        tx: &impl deadpool_postgres::GenericClient,
        candidate: Candidate,
        rows: &mut DeliveryRows,
        attempts: &mut NewAttempts,
        now: Millis,
    ) -> Result<(), StoreError> {
        if let Some(&first) = self.candidates.get(&candidate.event) {
            for i in first..first + candidate.deliveries {
                rows.debounce(i, 1);
                attempts.debounced(rows.id[i].clone(), 1, now);
            }
            return Ok(());
        }
        let event = candidate.event.to_be_bytes().to_vec();
        // A delivery whose lease lapsed (its node died) is no longer being attempted: it is
        // superseded like any other, and its claim cleared, so the dead node's late result is
        // refused. A lease's end is the delivery's `due_at`.
        let ended = tx
            .query(
                "UPDATE deliveries SET state = 'skipped', last_status = 'debounced',
                     attempt_count = attempt_count + 1, due_at = NULL, next_attempt_at = NULL,
                     queued = false, leased_by = NULL, claim = NULL
                 WHERE event_id = $1 AND state = 'pending'
                   AND (leased_by IS NULL OR due_at <= $2)
                 RETURNING id, attempt_count",
                &[&event, &now],
            )
            .await?;
        for r in ended {
            attempts.debounced(r.get(0), r.get::<_, i32>(1) as u32, now);
        }
        Ok(())
    }

    /// Writes the windows this transaction changed.
    pub(super) async fn write(
        self,
        tx: &impl deadpool_postgres::GenericClient,
    ) -> Result<(), StoreError> {
        for (key, (w, changed)) in self.windows {
            if !changed {
                continue;
            }
            let (event, count) = match w.candidate {
                Some(c) => (
                    Some(c.event.to_be_bytes().to_vec()),
                    Some(c.deliveries as i32),
                ),
                None => (None, None),
            };
            tx.execute(
                "UPDATE debounce_windows SET ends_at = $2, candidate_event = $3,
                     candidate_count = $4
                 WHERE key = $1",
                &[&key.as_bytes(), &w.end, &event, &count],
            )
            .await?;
        }
        Ok(())
    }
}
