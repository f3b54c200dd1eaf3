//! Debounce at ingest, inside the commit cycle (docs/delivery-contract.md): the window of an
//! event's (account, type, key) decides whether its deliveries go now, are `debounced`, or trail at
//! the window's end; a trailing candidate that a newer event replaces ends `debounced`. The
//! decision is [`herald_core::policy::debounce`]'s; this writes it into the cycle.

use std::sync::Arc;

use super::codec::{self, Pending};
use super::cycle::{Cycle, Superseded};
use super::key;
use super::{DebounceRule, Inner, Lane, StoreError};
use herald_core::clock::Millis;
use herald_core::ids::{self, ATTEMPT};
use herald_core::model::{Attempt, Delivery, DeliveryState, Status};
use herald_core::policy::debounce::{self, Candidate, Decision, Window};

/// Applies the debounce decision, at the cycle's commit time, to the event's deliveries (its
/// rows are written before the event's own row). Returns true if the deliveries stay fresh
/// (due now, as without debounce).
pub(super) fn apply_debounce(
    inner: &Arc<Inner>,
    cycle: &mut Cycle,
    rule: &DebounceRule,
    event: u128,
    targets: &[Lane],
    dels: &mut [Delivery],
) -> Result<bool, StoreError> {
    let now = cycle.now;
    let key = key::window(&rule.key);
    // The rule's key begins with the event's account and a NUL ([`DebounceRule::key`]).
    let account_id = rule.key.split('\0').next().unwrap_or_default();
    let account = key::account_digest(account_id);
    let window = match cycle.get(inner, &key)? {
        Some(v) => Some(codec::decode_window(&v)?),
        None => None,
    };
    match debounce::decide(window.as_ref(), now, rule.window_ms, rule.trailing) {
        Decision::Open(w) => {
            put_window(inner, cycle, &key, &account, window.as_ref(), &w)?;
            Ok(true)
        }
        Decision::Debounce => {
            for (i, d) in dels.iter_mut().enumerate() {
                debounced(cycle, ids::delivery_of(event, i), d, now);
            }
            Ok(false)
        }
        Decision::Trail { due, supersedes } => {
            if let Some(c) = supersedes {
                supersede(inner, cycle, c, account_id, now)?;
            }
            for (i, (d, lane)) in dels.iter_mut().zip(targets).enumerate() {
                let p = Pending { due, manual: false };
                let k = key::pending(ids::delivery_of(event, i));
                cycle.put_new(&k, codec::encode_pending(p, *lane).to_vec());
                d.next_attempt_at = Some(due);
                d.queued = true;
            }
            let w = Window {
                end: due,
                candidate: Some(Candidate {
                    event,
                    deliveries: dels.len(),
                }),
            };
            put_window(inner, cycle, &key, &account, window.as_ref(), &w)?;
            Ok(false)
        }
    }
}

/// Writes a window and keeps its entry in the end index (the previous window's entry goes
/// when the end changes) and its row in its account's index (written with every window, so
/// a window the retention sweep removed meanwhile, its row with it, gets it back).
fn put_window(
    inner: &Inner,
    cycle: &mut Cycle,
    key: &[u8; 17],
    account: &[u8; 16],
    was: Option<&Window>,
    w: &Window,
) -> Result<(), StoreError> {
    match was {
        Some(old) if old.end == w.end => {}
        Some(old) => {
            cycle.put(inner, &key::window_end(old.end, key), None)?;
            cycle.put(inner, &key::window_end(w.end, key), Some(Vec::new()))?;
        }
        None => cycle.put(inner, &key::window_end(w.end, key), Some(Vec::new()))?,
    }
    cycle.put(inner, &key::account_window(account, key), Some(Vec::new()))?;
    cycle.put(
        inner,
        key,
        Some(codec::encode_window_of(w, account).to_vec()),
    )
}

/// The deliveries of a trailing candidate debounced by a newer event of its window: each ends
/// `skipped` with a `debounced` attempt and leaves the due index. (The candidate may be of this
/// same cycle.) A delivery the engine is attempting now (a manual retry sent it early) is left
/// to that attempt: the log never says `debounced` for a request the receiver got.
fn supersede(
    inner: &Arc<Inner>,
    cycle: &mut Cycle,
    candidate: Candidate,
    account: &str,
    now: Millis,
) -> Result<(), StoreError> {
    for i in 0..candidate.deliveries {
        let ulid = ids::delivery_of(candidate.event, i);
        let claim = match cycle.claims.iter().any(|c| c.delivery() == ulid) {
            true => None,
            false => match inner.claim(ulid) {
                Some(c) => Some(c),
                None => continue, // being attempted now
            },
        };
        let k = key::pending(ulid);
        let Some(v) = cycle.get(inner, &k)? else {
            continue; // already attempted or ended
        };
        let (pending, lane) = codec::decode_pending(&v)?;
        // A candidate's attempts (if a manual retry gave it any) are all in the tree.
        let number = inner
            .last_attempt(ulid, &super::Place::Hot)?
            .map_or(0, |a| a.attempt.number)
            + 1;
        cycle.put_new(
            &key::attempt(ulid, number),
            debounced_attempt(ulid, now, number),
        );
        cycle.put(inner, &k, None)?;
        cycle.superseded.push(Superseded {
            account: account.to_string(),
            lane,
            due: pending.due,
            delivery: ulid,
        });
        cycle.claims.extend(claim);
    }
    Ok(())
}

/// A `debounced` attempt record, numbered `number`, that ends its delivery `skipped`.
fn debounced_attempt(delivery: u128, now: Millis, number: u32) -> Vec<u8> {
    let attempt = Attempt {
        id: ids::new_id(ATTEMPT, now),
        number,
        at: now,
        duration_ms: 0,
        status: Status::Debounced,
        http_status: None,
        error: None,
        request_headers: Vec::new(),
        response_body: String::new(),
        response_headers: Vec::new(),
        url: None,
        manual: false,
    };
    codec::encode_attempt(delivery, &attempt, DeliveryState::Skipped)
}

/// Ends a new delivery as `skipped` with a `debounced` attempt record.
fn debounced(cycle: &mut Cycle, ulid: u128, d: &mut Delivery, now: Millis) {
    d.state = DeliveryState::Skipped;
    d.last_status = Some(Status::Debounced);
    d.attempt_count = 1;
    d.next_attempt_at = None;
    d.queued = false;
    cycle.put_new(&key::attempt(ulid, 1), debounced_attempt(ulid, now, 1));
}
