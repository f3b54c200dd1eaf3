//! Ingest on PostgreSQL (docs/api.md, docs/cluster.md): events, their deliveries and idempotency
//! keys in one transaction, answered after it commits (synchronous commit, so after the database's
//! WAL flush). Like the sled store's committer, requests that arrive together share a transaction
//! (group commit): the committer task takes every request waiting, so one WAL flush acknowledges
//! them all; measured here with 64 clients posting single events to a durable PostgreSQL on the
//! same 2 cores, a transaction per request made 1,700 events/s and shared transactions 12,000 (the
//! store alone, without the HTTP layer). One statement writes the batch's events, deliveries and
//! attempts (arrays unnested, data-modifying `WITH`), whatever their number; a batch without
//! idempotency keys, debounce rules or ordering lanes is that statement alone, committed on its
//! own: one round trip instead of four or five (`BEGIN`, a statement per table, a `NOTIFY`,
//! `COMMIT`). If the batch fails, every request in it gets the error and nothing of it is stored.
//!
//! Idempotency keys are claimed first, with a conditional upsert: the key is ours if no row
//! has it or its row is older than the window; otherwise the event is a duplicate of the row's
//! event. Two nodes claiming one key at once are serialized by the key's row: the second
//! waits for the first's commit and then sees its claim (or, if it rolled back, takes the key).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::debounce::Debouncer;
use super::lost::{self, Backends};
use super::queue::{leased, Leases, PgLease};
use super::rows::{ulid_from, DeliveryRows, NewAttempts, DUE_CHANNEL};
use super::{Database, PgStore};
use deadpool_postgres::GenericClient;
use herald_core::clock::{Clock, Millis};
use herald_core::ids::{self, EVENT};
use herald_core::model::{DeliveryState, EventMeta};
use herald_core::policy::debounce::{Candidate, Decision, Window};
use herald_core::policy::ordering;
use herald_store::contract::Ingest;
use herald_store::contract::Intake;
use herald_store::prelude::*;
use herald_store::{
    DebounceRule, DueDelivery, IngestOutcome, NewEvent, StoreError, IDEMPOTENCY_WINDOW_MS, NO_LANE,
};

/// Committer tasks per node: one. The requests that arrive while a transaction commits wait
/// for the next one, which takes them all: fewer, larger transactions, kinder to the database
/// the nodes share. Measured with 64 clients posting single events (2 cores, PostgreSQL on the
/// same machine): one node made 4,885/s with four committers, 5,509/s with two and 4,959/s with
/// one; three nodes on the database about 2,000/s, 2,565/s and 3,110/s.
const COMMITTERS: usize = 1;
/// Events in one transaction at most: bounds its latency and memory.
const MAX_EVENTS_PER_COMMIT: usize = 4096;

/// One request's events and where its answer goes.
pub(super) struct Job {
    events: Vec<NewEvent>,
    /// Each event's deliveries' ordering lanes ([`lane`]), in target order.
    lanes: Vec<Vec<Option<Vec<u8>>>>,
    /// For events fanned out over the account's endpoints: the directory's version the fan-out
    /// was made with, which the database's must still be ([`super::version`]).
    mark: Option<i64>,
    reply: oneshot::Sender<Result<Vec<IngestOutcome>, StoreError>>,
}

/// What ingest needs to lease fresh deliveries to this node's engine ([`Intake`]).
pub(super) struct Lessor {
    pub node: String,
    pub lease_ms: Millis,
    pub leases: Arc<Leases>,
}

/// What the committer tasks share.
pub(super) struct Committer {
    pub(super) db: Database,
    pub(super) clock: Arc<dyn Clock>,
    metrics: Arc<herald_store::StoreMetrics>,
    lessor: Lessor,
    /// The last event id this node minted: ids grow on each node (ULIDs, unique across nodes
    /// by their random part).
    last_event: Mutex<u128>,
    /// The server process behind each connection, to settle a commit whose answer was lost
    /// ([`super::lost`]).
    backends: Backends,
}

impl Committer {
    /// Starts the committer tasks; they end once the returned sender is dropped.
    pub(super) fn start(
        db: Database,
        clock: Arc<dyn Clock>,
        metrics: Arc<herald_store::StoreMetrics>,
        lessor: Lessor,
    ) -> mpsc::Sender<Job> {
        let committer = Arc::new(Committer {
            db,
            clock,
            metrics,
            lessor,
            last_event: Mutex::new(0),
            backends: Backends::default(),
        });
        let (tx, rx) = mpsc::channel::<Job>(4096);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..COMMITTERS {
            let (committer, rx) = (committer.clone(), rx.clone());
            tokio::spawn(async move {
                while let Some(jobs) = gather(&rx).await {
                    committer.commit_jobs(jobs).await;
                }
            });
        }
        tx
    }

    /// Commits the jobs' events in one transaction and answers each job. If a fan-out was made
    /// with a directory that missed a change, the jobs that fanned out are answered
    /// [`StoreError::Stale`] (their caller fans out again) and the others are committed alone.
    async fn commit_jobs(&self, mut jobs: Vec<Job>) {
        let counts: Vec<usize> = jobs.iter().map(|j| j.events.len()).collect();
        let events: Vec<NewEvent> = jobs
            .iter_mut()
            .flat_map(|j| std::mem::take(&mut j.events))
            .collect();
        let lanes: Vec<Vec<Option<Vec<u8>>>> = jobs
            .iter_mut()
            .flat_map(|j| std::mem::take(&mut j.lanes))
            .collect();
        let mark = jobs.iter().filter_map(|j| j.mark).min();
        let committed = self.commit(&events, &lanes, mark).await;
        if let Err(StoreError::Stale) = committed {
            let (mut events, mut lanes) = (events.into_iter(), lanes.into_iter());
            let mut rest = Vec::new();
            for (mut job, n) in jobs.into_iter().zip(counts) {
                job.events = events.by_ref().take(n).collect();
                job.lanes = lanes.by_ref().take(n).collect();
                match job.mark {
                    Some(_) => drop(job.reply.send(Err(StoreError::Stale))),
                    None => rest.push(job),
                }
            }
            if !rest.is_empty() {
                Box::pin(self.commit_jobs(rest)).await;
            }
            return;
        }
        match committed {
            Ok(outcomes) => {
                let created = outcomes
                    .iter()
                    .filter(|o| matches!(o, IngestOutcome::Created { .. }))
                    .count() as u64;
                self.metrics.commit_batch_size.observe(created as f64);
                self.metrics
                    .events_ingested
                    .fetch_add(created, std::sync::atomic::Ordering::Relaxed);
                let mut outcomes = outcomes.into_iter();
                for (job, n) in jobs.into_iter().zip(counts) {
                    let _ = job.reply.send(Ok(outcomes.by_ref().take(n).collect()));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "ingest commit failed; answering 503 to its requests");
                for job in jobs {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// A fresh event id after the last this node minted.
    fn next_event_id(&self, now: Millis) -> u128 {
        let mut last = self.last_event.lock().unwrap_or_else(|e| e.into_inner());
        *last = herald_core::ids::event_after(*last, now);
        *last
    }

    /// Stores the events (or finds them duplicates). A batch without idempotency keys,
    /// debounce rules or ordering lanes (the common one) is a single statement committed on
    /// its own: one round trip to the database. Any other is a transaction that takes its
    /// locks and claims its keys first, then writes with the same statement and commits.
    async fn commit(
        &self,
        events: &[NewEvent],
        lanes: &[Vec<Option<Vec<u8>>>],
        mark: Option<i64>,
    ) -> Result<Vec<IngestOutcome>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        // Locks are taken class by class, each class in sorted order (lanes, then request keys,
        // then idempotency keys, then debounce windows), so ingest transactions never deadlock
        // one another.
        // A lane's lock is held to the commit: its deliveries' places (`lane_seq`) follow the
        // order of commits.
        let mut lane_locks: Vec<i64> = lanes
            .iter()
            .flatten()
            .flatten()
            .map(|l| lane_lock(l))
            .collect();
        lane_locks.sort_unstable();
        lane_locks.dedup();
        let plain = lane_locks.is_empty()
            && events.iter().all(|e| {
                e.idempotency_key.is_none() && e.request_key.is_none() && e.debounce.is_none()
            });
        let mut client = self.db.client().await?;
        let backend = self.backends.of(&client).await;
        if plain {
            let mut staged = self.stage(&client, events, lanes).await?;
            let lent = self.lend(&mut staged.d_rows, staged.now);
            let committing = std::time::Instant::now();
            // The statement commits on its own: its outcome is the batch's.
            let written = match write_rows(&client, &staged, mark).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(StoreError::Stale),
                Err(e) => self.after_lost_answer(e, backend, &staged).await,
            };
            if written.is_ok() {
                self.observe_commit(committing);
            }
            return self.settle(events, staged, lent, written);
        }
        let tx = client.transaction().await?;
        if !lane_locks.is_empty() {
            tx.execute(
                "SELECT pg_advisory_xact_lock(k) FROM (SELECT unnest($1::bigint[]) AS k ORDER BY 1) l",
                &[&lane_locks],
            )
            .await?;
        }
        let mut staged = self.stage(&tx, events, lanes).await?;
        let lent = self.lend(&mut staged.d_rows, staged.now);
        let written = match write_rows(&tx, &staged, mark).await {
            // Nothing written; the transaction rolls back when dropped.
            Ok(false) => Err(StoreError::Stale),
            Ok(true) => {
                let committing = std::time::Instant::now();
                let committed = match tx.commit().await {
                    Ok(()) => Ok(()),
                    Err(e) => self.after_lost_answer(e, backend, &staged).await,
                };
                if committed.is_ok() {
                    self.observe_commit(committing);
                }
                committed
            }
            // Before the COMMIT: the transaction cannot have committed.
            Err(e) => Err(e.into()),
        };
        self.settle(events, staged, lent, written)
    }

    /// The outcome of the step that commits a batch, which failed with `e`. An error the server
    /// reported means it did not commit; a lost connection leaves that unknown, so the node
    /// finds out before it answers ([`super::lost`]): a batch that committed is answered as
    /// committed.
    async fn after_lost_answer(
        &self,
        e: tokio_postgres::Error,
        backend: Option<lost::Backend>,
        staged: &Staged<'_>,
    ) -> Result<(), StoreError> {
        let first = match staged.e_rows.id.first() {
            Some(first) if lost::outcome_unknown(&e) => first,
            _ => return Err(e.into()),
        };
        tracing::warn!(error = %super::describe(&e), "the connection was lost at an ingest's commit; finding out whether it committed");
        match lost::committed(&self.db, backend, first).await {
            Ok(true) => {
                tracing::info!("the ingest whose answer was lost had committed: answered 202");
                Ok(())
            }
            Ok(false) => Err(e.into()),
            Err(why) => {
                tracing::error!(error = %why, "cannot tell whether an ingest whose answer was lost committed: answered 503, its events may exist");
                Err(e.into())
            }
        }
    }

    /// The commit is where the WAL reaches the disk: the cluster's counterpart of sled's fsync
    /// in `herald_fsync_duration_seconds` (for a batch committed on its own, its statement).
    fn observe_commit(&self, started: std::time::Instant) {
        self.metrics
            .fsync_duration
            .observe_duration(started.elapsed());
    }

    /// Mints the events' ids, claims their idempotency keys, decides their debounce windows
    /// and lays out the rows to write; `c` is the transaction (or, for a plain batch, the
    /// connection, which it then never uses).
    async fn stage<'a>(
        &self,
        c: &impl GenericClient,
        events: &'a [NewEvent],
        lanes: &[Vec<Option<Vec<u8>>>],
    ) -> Result<Staged<'a>, StoreError> {
        // Ids are minted once the lanes are held: on a node, the events of a lane get ids in
        // the order of their commits (the order their deliveries are sent in).
        let now = self.clock.now_ms();
        let ulids: Vec<u128> = events
            .iter()
            .map(|e| self.next_event_id(e.received_at.max(now)))
            .collect();
        let mut repeated = claim_requests(c, events, &ulids, now).await?;
        let mut duplicate_of = claim_keys(c, events, &ulids, &repeated, now).await?;
        unclaim_requests(c, events, &ulids, &duplicate_of).await?;

        let mut staged = Staged {
            now,
            outcomes: Vec::with_capacity(events.len()),
            e_rows: EventRows::default(),
            d_rows: DeliveryRows::default(),
            attempts: NewAttempts::default(),
            row_event: Vec::new(),
            ulids,
        };
        let mut debouncer = Debouncer::default();
        debouncer
            .lock_all(
                c,
                events
                    .iter()
                    .filter_map(|e| e.debounce.as_ref().map(|r| r.key.as_str()))
                    .collect(),
            )
            .await?;
        for (i, ev) in events.iter().enumerate() {
            if let Some(event_id) = repeated[i].take() {
                staged.outcomes.push(IngestOutcome::Repeated { event_id });
                continue;
            }
            if let Some(first) = duplicate_of[i].take() {
                staged
                    .outcomes
                    .push(IngestOutcome::Duplicate { event_id: first });
                continue;
            }
            let ulid = staged.ulids[i];
            let rows = staged.lay_out(i, ev, ulid, lanes.get(i));
            if let Some(rule) = &ev.debounce {
                staged
                    .debounce(&mut debouncer, c, rule, ulid, rows.clone())
                    .await?;
            }
            let event_id = ids::format(EVENT, ulid);
            let deliveries = rows.map(|r| staged.d_rows.delivery(r, &event_id)).collect();
            staged.outcomes.push(IngestOutcome::Created {
                event_id,
                deliveries,
            });
        }
        debouncer.write(c).await?;
        Ok(staged)
    }

    /// Hands the deliveries leased at ingest to this node's engine once the batch is written
    /// (or gives their places back if it is not), and answers.
    fn settle(
        &self,
        events: &[NewEvent],
        staged: Staged<'_>,
        lent: Option<Lent>,
        written: Result<(), StoreError>,
    ) -> Result<Vec<IngestOutcome>, StoreError> {
        let Staged {
            outcomes,
            d_rows,
            row_event,
            ulids,
            ..
        } = staged;
        if let Some(lent) = lent {
            match written {
                Ok(()) => {
                    let leased = lent
                        .rows
                        .iter()
                        .map(|&r| {
                            let ev = &events[row_event[r]];
                            let event_id = ids::format(EVENT, ulids[row_event[r]]);
                            let delivery = d_rows.delivery(r, &event_id);
                            leased(
                                lent.claim,
                                DueDelivery {
                                    event: EventMeta {
                                        id: event_id,
                                        account_id: ev.account_id.clone(),
                                        event_type: ev.event_type.clone(),
                                        received_at: delivery.created_at,
                                        idempotency_key: ev.idempotency_key.clone(),
                                        debounce_key: ev.debounce_key.clone(),
                                        ordering_key: ev.ordering_key.clone(),
                                        channels: Vec::new(),
                                        tags: Vec::new(),
                                        request_key: None,
                                        trace: ev.trace.clone(),
                                        deliveries: Vec::new(),
                                    },
                                    delivery,
                                    payload: ev.payload.clone(),
                                },
                            )
                        })
                        .collect::<Vec<_>>();
                    {
                        let mut held = self.lessor.leases.lock_held();
                        for l in &leased {
                            held.insert(l.due.delivery.id.clone(), lent.claim);
                        }
                    }
                    lent.intake.take(leased);
                }
                Err(_) => {
                    for &r in &lent.rows {
                        if let Some(ep) = &d_rows.endpoint[r] {
                            lent.intake.cancel(ep);
                        }
                    }
                }
            }
        }
        written?;
        Ok(outcomes)
    }

    /// Leases to this node's engine the fresh deliveries it has room for ([`Intake`]):
    /// due now, to an endpoint, in no ordering lane (a lane's delivery waits for the one ahead,
    /// which only a claim checks).
    fn lend(&self, d_rows: &mut DeliveryRows, now: Millis) -> Option<Lent> {
        let intake = self.lessor.leases.intake()?;
        let claim: i64 = rand::random();
        let until = now + self.lessor.lease_ms;
        let mut rows = Vec::new();
        for r in 0..d_rows.id.len() {
            let fresh = d_rows.state[r] == DeliveryState::Pending.as_str()
                && !d_rows.queued[r]
                && d_rows.lane[r].is_none()
                && d_rows.due[r].is_some_and(|d| d <= now);
            if let (true, Some(ep)) = (fresh, &d_rows.endpoint[r]) {
                if intake.reserve(ep) {
                    d_rows.lease_end[r] = Some(until);
                    rows.push(r);
                }
            }
        }
        if rows.is_empty() {
            return None;
        }
        d_rows.claim = Some(claim);
        d_rows.node = Some(self.lessor.node.clone());
        Some(Lent {
            intake,
            claim,
            rows,
        })
    }
}

/// A batch laid out for writing ([`Committer::stage`]).
struct Staged<'a> {
    now: Millis,
    /// Each event's id (a duplicate's goes unused).
    ulids: Vec<u128>,
    /// Each event's answer, in order.
    outcomes: Vec<IngestOutcome>,
    e_rows: EventRows<'a>,
    d_rows: DeliveryRows,
    attempts: NewAttempts,
    /// Each delivery row's event.
    row_event: Vec<usize>,
}

impl<'a> Staged<'a> {
    /// Lays out the rows of event `i` (id `ulid`) and of its deliveries, each with its lane
    /// (`lanes`, by target); returns the deliveries' rows.
    fn lay_out(
        &mut self,
        i: usize,
        ev: &'a NewEvent,
        ulid: u128,
        lanes: Option<&Vec<Option<Vec<u8>>>>,
    ) -> std::ops::Range<usize> {
        let at = ev.received_at.max(self.now);
        self.e_rows.push(ulid, ev, at);
        let first_row = self.d_rows.id.len();
        self.row_event
            .extend(std::iter::repeat_n(i, ev.targets.len()));
        for (n, lane) in ev.targets.iter().enumerate() {
            let endpoint_id = (*lane != NO_LANE).then(|| ids::format(ids::ENDPOINT, *lane));
            let lane = lanes.and_then(|l| l.get(n)).cloned().flatten();
            self.d_rows
                .push(ids::delivery_of(ulid, n), ulid, endpoint_id, lane, ev, at);
        }
        first_row..self.d_rows.id.len()
    }

    /// Decides the debounce window of event `ulid` at commit, and what it means for the
    /// event's delivery `rows`: none (a window opens), skipped (debounced), or due at the
    /// window's end as its trailing candidate (replacing the one before).
    async fn debounce(
        &mut self,
        debouncer: &mut Debouncer,
        c: &impl GenericClient,
        rule: &DebounceRule,
        ulid: u128,
        rows: std::ops::Range<usize>,
    ) -> Result<(), StoreError> {
        let now = self.now;
        match debouncer.decide(c, rule, now).await? {
            Decision::Open(w) => debouncer.set(&rule.key, w),
            Decision::Debounce => {
                for r in rows {
                    self.d_rows.debounce(r, 1);
                    self.attempts.debounced(self.d_rows.id[r].clone(), 1, now);
                }
            }
            Decision::Trail { due, supersedes } => {
                if let Some(cand) = supersedes {
                    debouncer
                        .supersede(c, cand, &mut self.d_rows, &mut self.attempts, now)
                        .await?;
                }
                let deliveries = rows.len();
                debouncer.candidate_rows(ulid, rows.start);
                for r in rows {
                    self.d_rows.trail(r, due);
                }
                debouncer.set(
                    &rule.key,
                    Window {
                        end: due,
                        candidate: Some(Candidate {
                            event: ulid,
                            deliveries,
                        }),
                    },
                );
            }
        }
        Ok(())
    }
}

/// A batch's keys of one kind, each once, as the columns of a claim: the first event of a key in
/// the batch claims it for the batch, and the key's later events are answered by it.
struct BatchKeys<'a> {
    /// Each key's first event in the batch.
    first: HashMap<(&'a str, &'a str), usize>,
    accounts: Vec<&'a str>,
    keys: Vec<&'a str>,
    /// The first events' ids.
    events: Vec<Vec<u8>>,
    /// For each event, its key's first event in the batch, when that is another.
    later_of: Vec<Option<usize>>,
}

impl<'a> BatchKeys<'a> {
    fn of(
        events: &'a [NewEvent],
        ulids: &[u128],
        key: impl Fn(usize, &'a NewEvent) -> Option<&'a str>,
    ) -> BatchKeys<'a> {
        let mut b = BatchKeys {
            first: HashMap::new(),
            accounts: Vec::new(),
            keys: Vec::new(),
            events: Vec::new(),
            later_of: vec![None; events.len()],
        };
        for (i, ev) in events.iter().enumerate() {
            let Some(k) = key(i, ev) else {
                continue;
            };
            match b.first.get(&(ev.account_id.as_str(), k)) {
                Some(&f) => b.later_of[i] = Some(f),
                None => {
                    b.first.insert((ev.account_id.as_str(), k), i);
                    b.accounts.push(ev.account_id.as_str());
                    b.keys.push(k);
                    b.events.push(ulids[i].to_be_bytes().to_vec());
                }
            }
        }
        b
    }

    /// Claims the keys with `claim` (an `INSERT … RETURNING account_id, key` of the keys it
    /// won, over `$1` accounts, `$2` keys, `$3` events, `$4` now and `$5` the window's start)
    /// and answers, for each key another event holds, the first event of it in this batch and
    /// the holder's `event_id`, read by `holders` (a `SELECT account_id, key, event_id` joined
    /// with `unnest($1, $2)`) in a statement of its own: it sees the holders that won against
    /// the claim, committed since the claim began.
    async fn claim(
        &self,
        c: &impl GenericClient,
        claim: &str,
        holders: &str,
        now: Millis,
    ) -> Result<Vec<(usize, Option<u128>)>, StoreError> {
        if self.keys.is_empty() {
            return Ok(Vec::new());
        }
        let claim = c.prepare_cached(claim).await?;
        let window_start = now - IDEMPOTENCY_WINDOW_MS;
        let won: std::collections::HashSet<(String, String)> = c
            .query(
                &claim,
                &[
                    &self.accounts,
                    &self.keys,
                    &self.events,
                    &now,
                    &window_start,
                ],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let (accounts, keys): (Vec<&str>, Vec<&str>) = self
            .accounts
            .iter()
            .zip(&self.keys)
            .filter(|(a, k)| !won.contains(&(a.to_string(), k.to_string())))
            .map(|(a, k)| (*a, *k))
            .unzip();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut held = Vec::new();
        for r in c.query(holders, &[&accounts, &keys]).await? {
            let (account, key, event): (String, String, Option<Vec<u8>>) =
                (r.get(0), r.get(1), r.get(2));
            if let Some(&i) = self.first.get(&(account.as_str(), key.as_str())) {
                held.push((i, event.map(|e| ulid_from(&e)).transpose()?));
            }
        }
        Ok(held)
    }
}

/// Claims the events' request keys (docs/svix.md) in `api_answers`, each for its event (the
/// row a message's creation keeps: `202` and the event): a key answered within the window
/// stays. Returns, for each event whose key was answered, `Some(the message it created)`, or
/// `Some(None)` when that answer is not a message. (On one node a request key is answered one
/// request at a time, so a batch holds a key once; a second is taken as answered by the first.)
async fn claim_requests(
    c: &impl GenericClient,
    events: &[NewEvent],
    ulids: &[u128],
    now: Millis,
) -> Result<Vec<Option<Option<String>>>, StoreError> {
    let batch = BatchKeys::of(events, ulids, |_, e| e.request_key.as_deref());
    let mut repeated: Vec<Option<Option<String>>> = vec![None; events.len()];
    let held = batch
        .claim(
            c,
            "INSERT INTO api_answers AS x (account_id, key, status, body, created_at, event_id)
             SELECT a, k, 202, ''::bytea, $4, e
             FROM unnest($1::text[], $2::text[], $3::bytea[]) AS t(a, k, e)
             ORDER BY a, k
             ON CONFLICT (account_id, key) DO UPDATE
                 SET status = 202, body = ''::bytea, created_at = excluded.created_at,
                     event_id = excluded.event_id
                 WHERE x.created_at <= $5
             RETURNING account_id, key",
            "SELECT x.account_id, x.key, x.event_id FROM api_answers x
             JOIN unnest($1::text[], $2::text[]) AS t(a, k) ON x.account_id = t.a AND x.key = t.k",
            now,
        )
        .await?;
    for (i, event) in held {
        repeated[i] = Some(event.map(|e| ids::format(EVENT, e)));
    }
    // A key's later events in this batch are answered as its first: by what held the key, or
    // by the message the first creates.
    for (i, first) in batch.later_of.iter().enumerate() {
        if let Some(f) = first {
            repeated[i] = Some(
                repeated[*f]
                    .clone()
                    .unwrap_or_else(|| Some(ids::format(EVENT, ulids[*f]))),
            );
        }
    }
    Ok(repeated)
}

/// Gives back the request keys [`claim_requests`] claimed for events that turned out to be
/// duplicates by their idempotency key (nothing stored): their requests are answered `409`,
/// and that answer is kept instead.
async fn unclaim_requests(
    c: &impl GenericClient,
    events: &[NewEvent],
    ulids: &[u128],
    duplicate_of: &[Option<String>],
) -> Result<(), StoreError> {
    let (mut accounts, mut keys, mut ids_) = (Vec::new(), Vec::new(), Vec::new());
    for (i, ev) in events.iter().enumerate() {
        if let (Some(key), Some(_)) = (ev.request_key.as_deref(), &duplicate_of[i]) {
            accounts.push(ev.account_id.as_str());
            keys.push(key);
            ids_.push(ulids[i].to_be_bytes().to_vec());
        }
    }
    if !keys.is_empty() {
        c.execute(
            "DELETE FROM api_answers x USING unnest($1::text[], $2::text[], $3::bytea[]) AS t(a, k, e)
             WHERE x.account_id = t.a AND x.key = t.k AND x.event_id = t.e",
            &[&accounts, &keys, &ids_],
        )
        .await?;
    }
    Ok(())
}

/// Claims the events' idempotency keys (`ulids` are the events' ids), but not those of
/// `repeated` requests: the first event of a key in the batch claims it for the batch. Returns,
/// for each event, the id of the event it duplicates (one stored before, or the key's first in
/// this batch), if any.
async fn claim_keys(
    c: &impl GenericClient,
    events: &[NewEvent],
    ulids: &[u128],
    repeated: &[Option<Option<String>>],
    now: Millis,
) -> Result<Vec<Option<String>>, StoreError> {
    let batch = BatchKeys::of(events, ulids, |i, e| match repeated[i] {
        Some(_) => None,
        None => e.idempotency_key.as_deref(),
    });
    let mut duplicate_of: Vec<Option<String>> = vec![None; events.len()];
    let held = batch
        .claim(
            c,
            "INSERT INTO idempotency_keys AS k (account_id, key, event_id, created_at)
             SELECT a, k, e, $4 FROM unnest($1::text[], $2::text[], $3::bytea[]) AS t(a, k, e)
             ORDER BY a, k
             ON CONFLICT (account_id, key) DO UPDATE
                 SET event_id = excluded.event_id, created_at = excluded.created_at
                 WHERE k.created_at <= $5
             RETURNING account_id, key",
            "SELECT k.account_id, k.key, k.event_id FROM idempotency_keys k
             JOIN unnest($1::text[], $2::text[]) AS t(a, k) ON k.account_id = t.a AND k.key = t.k",
            now,
        )
        .await?;
    for (i, event) in held {
        duplicate_of[i] = event.map(|e| ids::format(EVENT, e));
    }
    // A key's later events in this batch are duplicates of what its first turned out to be:
    // the event it created, or the one that held the key already.
    for (i, first) in batch.later_of.iter().enumerate() {
        if let Some(f) = first {
            duplicate_of[i] = Some(
                duplicate_of[*f]
                    .clone()
                    .unwrap_or_else(|| ids::format(EVENT, ulids[*f])),
            );
        }
    }
    Ok(duplicate_of)
}

/// Writes a batch's events, deliveries and `debounced` attempts in one statement, and wakes
/// idle nodes with its commit when some delivery waits for any node (a trailing delivery
/// falling due later included); not when this node leased every one. Nothing when the batch
/// holds only duplicates. With a `mark`, it writes only while the directory's version is the
/// mark, and answers `false` (nothing written) otherwise ([`super::version`]).
///
/// Longer than most functions on purpose: it is one SQL statement (a data-modifying CTE per
/// table) and its parameters, column by column; split, the statement and its `$n` would part.
async fn write_rows(
    c: &impl GenericClient,
    staged: &Staged<'_>,
    mark: Option<i64>,
) -> Result<bool, tokio_postgres::Error> {
    let (e, d, a) = (&staged.e_rows, &staged.d_rows, &staged.attempts);
    if e.id.is_empty() {
        return Ok(true);
    }
    let insert = c
        .prepare_cached(
            "WITH v AS (
                 SELECT 1 FROM directory_version WHERE $30::bigint IS NULL OR version = $30
             ), e AS (
                 INSERT INTO events (id, account_id, type, received_at, idempotency_key,
                                     debounce_key, ordering_key, payload, labels,
                                     traceparent, tracestate)
                 SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::bigint[],
                                      $5::text[], $6::text[], $7::text[], $8::bytea[],
                                      $31::jsonb[], $32::text[], $33::text[])
                 WHERE EXISTS (SELECT 1 FROM v)
             ), d AS (
                 INSERT INTO deliveries (id, event_id, endpoint_id, account_id, event_type,
                                         state, last_status, attempt_count, due_at,
                                         next_attempt_at, queued, created_at, lane, lane_seq,
                                         leased_by, claim)
                 SELECT id, ev, ep, a, t, st, ls, n, coalesce(le, due), due, q, at, l,
                        CASE WHEN l IS NULL THEN NULL ELSE nextval('herald_lane_seq') END,
                        CASE WHEN le IS NULL THEN NULL ELSE $22::text END,
                        CASE WHEN le IS NULL THEN NULL ELSE $23::bigint END
                 FROM unnest($9::bytea[], $10::bytea[], $11::text[], $12::text[], $13::text[],
                             $14::text[], $15::text[], $16::integer[], $17::bigint[],
                             $18::boolean[], $19::bigint[], $20::bytea[], $21::bigint[])
                      WITH ORDINALITY AS d(id, ev, ep, a, t, st, ls, n, due, q, at, l, le, i)
                 WHERE EXISTS (SELECT 1 FROM v)
                 ORDER BY i
             ), a AS (
                 INSERT INTO attempts (delivery_id, number, id, at, duration_ms, status,
                                       http_status, error, request_headers, response_body)
                 SELECT d, n, i, at, 0, 'debounced', NULL, NULL, '[]'::jsonb, ''
                 FROM unnest($24::bytea[], $25::integer[], $26::text[], $27::bigint[])
                      AS t(d, n, i, at)
                 WHERE EXISTS (SELECT 1 FROM v)
             ), notified AS (
                 SELECT pg_notify($28, '') FROM v WHERE $29::boolean
             )
             SELECT EXISTS (SELECT 1 FROM v), (SELECT count(*) FROM notified)",
        )
        .await?;
    let row = c
        .query_one(
            &insert,
            &[
                &e.id,
                &e.account,
                &e.event_type,
                &e.received_at,
                &e.idempotency_key,
                &e.debounce_key,
                &e.ordering_key,
                &e.payload,
                &d.id,
                &d.event,
                &d.endpoint,
                &d.account,
                &d.event_type,
                &d.state,
                &d.last_status,
                &d.attempt_count,
                &d.due,
                &d.queued,
                &d.created,
                &d.lane,
                &d.lease_end,
                &d.node,
                &d.claim,
                &a.delivery,
                &a.number,
                &a.id,
                &a.at,
                &DUE_CHANNEL,
                &d.any_for_others(),
                &mark,
                &e.labels,
                &e.traceparent,
                &e.tracestate,
            ],
        )
        .await?;
    Ok(row.get(0))
}

/// Deliveries a transaction stores leased to this node.
struct Lent {
    intake: Arc<dyn Intake<PgLease>>,
    claim: i64,
    /// Their rows in the transaction's [`DeliveryRows`].
    rows: Vec<usize>,
}

/// The ordering lane of a delivery to an ordered endpoint (docs/delivery-contract.md): the
/// endpoint's ULID and the first 16 bytes of the SHA-256 of its ordering key. Stored, so it
/// must not change between builds (unlike a std hasher).
pub(super) fn lane(endpoint: u128, key: &str) -> Vec<u8> {
    use sha2::Digest;
    let mut out = endpoint.to_be_bytes().to_vec();
    out.extend_from_slice(&sha2::Sha256::digest(key.as_bytes())[..16]);
    out
}

/// The advisory lock of a lane (its key's bytes after the endpoint's).
fn lane_lock(lane: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&lane[16..24]);
    i64::from_be_bytes(b)
}

/// Every job waiting (at least one), up to [`MAX_EVENTS_PER_COMMIT`] events; `None` once the
/// store is gone.
async fn gather(rx: &tokio::sync::Mutex<mpsc::Receiver<Job>>) -> Option<Vec<Job>> {
    let mut rx = rx.lock().await;
    let first = rx.recv().await?;
    let mut count = first.events.len();
    let mut jobs = vec![first];
    while count < MAX_EVENTS_PER_COMMIT {
        match rx.try_recv() {
            Ok(job) => {
                count += job.events.len();
                jobs.push(job);
            }
            Err(_) => break,
        }
    }
    Some(jobs)
}

impl PgStore {
    /// Stores the events (or finds them duplicates), answering once they are committed.
    pub async fn ingest(&self, events: Vec<NewEvent>) -> Result<Vec<IngestOutcome>, StoreError> {
        self.ingest_marked(events, None).await
    }

    /// [`PgStore::ingest`] of events fanned out over their accounts' endpoints with the copy at
    /// `mark` ([`PgStore::directory_mark`]): [`StoreError::Stale`], with nothing stored, if a
    /// change of the directory was committed that the copy missed.
    pub async fn ingest_marked(
        &self,
        events: Vec<NewEvent>,
        mark: Option<i64>,
    ) -> Result<Vec<IngestOutcome>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let lanes = events
            .iter()
            .map(|ev| {
                ev.targets
                    .iter()
                    .map(|t| {
                        let id = ids::format(ids::ENDPOINT, *t);
                        let ordering = self.directory.ordering(Some(&id))?;
                        let key =
                            ordering::key_of(&ordering, ev.ordering_key.as_deref(), &ev.payload);
                        Some(lane(*t, &key))
                    })
                    .collect()
            })
            .collect();
        let (reply, answer) = oneshot::channel();
        self.ingest
            .send(Job {
                events,
                lanes,
                mark,
                reply,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }
}

/// The request's events as columns (one array per column, unnested by one statement).
#[derive(Default)]
struct EventRows<'a> {
    id: Vec<Vec<u8>>,
    account: Vec<&'a str>,
    event_type: Vec<&'a str>,
    received_at: Vec<i64>,
    idempotency_key: Vec<Option<&'a str>>,
    debounce_key: Vec<Option<&'a str>>,
    ordering_key: Vec<Option<&'a str>>,
    payload: Vec<&'a [u8]>,
    labels: Vec<Option<serde_json::Value>>,
    traceparent: Vec<Option<String>>,
    tracestate: Vec<Option<&'a str>>,
}

impl<'a> EventRows<'a> {
    fn push(&mut self, ulid: u128, ev: &'a NewEvent, at: i64) {
        self.id.push(ulid.to_be_bytes().to_vec());
        self.account.push(&ev.account_id);
        self.event_type.push(&ev.event_type);
        self.received_at.push(at);
        self.idempotency_key.push(ev.idempotency_key.as_deref());
        self.debounce_key.push(ev.debounce_key.as_deref());
        self.ordering_key.push(ev.ordering_key.as_deref());
        self.payload.push(&ev.payload);
        self.labels
            .push(super::rows::labels(&ev.channels, &ev.tags));
        let (traceparent, tracestate) = super::rows::trace_columns(ev.trace.as_ref());
        self.traceparent.push(traceparent);
        self.tracestate.push(tracestate);
    }
}

impl Ingest for PgStore {
    /// [`herald_store::contract::Ingest::ingest`]: `fan_out` over the copy of the endpoints in
    /// memory, again after bringing the copy up to date while another node's change makes the
    /// commit refuse it as stale.
    async fn ingest<F, E>(&self, mut fan_out: F) -> Result<Vec<IngestOutcome>, E>
    where
        F: FnMut() -> Result<Vec<NewEvent>, E> + Send,
        E: From<StoreError> + Send,
    {
        for _ in 0..herald_store::FAN_OUT_TRIES {
            let mark = self.directory_mark();
            let events = fan_out()?;
            match self.ingest_marked(events, Some(mark)).await {
                Err(StoreError::Stale) => self.fresh_directory().await?,
                stored => return Ok(stored?),
            }
        }
        tracing::warn!(
            tries = herald_store::FAN_OUT_TRIES,
            "the endpoints kept changing while ingest fanned out; nothing stored"
        );
        Err(StoreError::Stale.into())
    }
}
