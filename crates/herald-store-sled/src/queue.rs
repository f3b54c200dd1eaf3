//! The queue of one box (the contract's `Queue`): due deliveries are taken from the in-memory
//! due index ([`DueIndex`](super::DueIndex)), each under its delivery's claim, which the
//! attempt holds until it is released (so a manual retry, retention or the committer cannot
//! change the delivery meanwhile).

use super::{Claim, Due, SledStore};
use herald_core::clock::Millis;
use herald_core::ids;
use herald_core::model::DeliveryState;
use herald_store::contract::Intake;
use herald_store::contract::Queue;
use herald_store::StoreError;
use herald_store::{DueDelivery, Fence, TakeLimits, Taken, Taking};
use std::future::ready;
use std::future::Future;
use std::sync::Arc;

/// How long a due delivery whose claim someone else holds (a manual retry, retention, an
/// attempt of a stale entry) waits before it is taken again.
const CLAIM_RETRY_MS: Millis = 20;
/// How long a due delivery waits while the store has failed for good: nothing is attempted whose
/// result could not be recorded (herald stops shortly; the next start attempts it).
const STORE_DOWN_RETRY_MS: Millis = 1_000;

/// What holds a taken delivery on one box: its index entry and its claim.
pub struct SledClaim {
    due: Due,
    _claim: Claim,
}

impl SledStore {
    /// Takes up to `room` entries due at `now` from the index, within `limits`, claims each
    /// and reads its delivery; an entry found stale (its delivery was rescheduled or has ended
    /// since) is dropped.
    pub(super) fn take_due_now(
        &self,
        now: Millis,
        room: usize,
        limits: &dyn TakeLimits,
    ) -> Vec<Taken<SledClaim>> {
        let entries = self.due().take(now, room, |lane| limits.allowed(lane));
        if entries.is_empty() {
            return Vec::new();
        }
        // Refills are asked for by the entries a take hands out.
        self.refill_due();
        let usable = self.usable();
        let mut taken = Vec::with_capacity(entries.len());
        for due in entries {
            if !usable {
                self.due().put_back(due, Some(now + STORE_DOWN_RETRY_MS));
                continue;
            }
            let Some(claim) = self.claim(due.delivery) else {
                self.due().put_back(due, Some(now + CLAIM_RETRY_MS));
                continue;
            };
            match self.current(due) {
                Some(found) => taken.push(Taken {
                    due: found,
                    fence: Fence::Claimed,
                    hold: SledClaim { due, _claim: claim },
                }),
                None => {
                    drop(claim);
                    self.due().done(due.lane, due.delivery);
                }
            }
        }
        taken
    }

    /// The entry's delivery, unless the entry is stale.
    fn current(&self, due: Due) -> Option<DueDelivery> {
        let found = match self.due_delivery(due.delivery) {
            Ok(Some(found)) => found,
            Ok(None) => {
                // Its event is gone (a commit that never finished): nothing to attempt.
                if let Err(e) = self.drop_orphan(due.lane, due.delivery) {
                    tracing::error!(error = %e, "cannot drop a pending entry without its event");
                }
                self.due().ended(due.lane, due.delivery);
                return None;
            }
            Err(e) => {
                tracing::error!(delivery = %ids::format(ids::DELIVERY, due.delivery), error = %e, "cannot read a due delivery");
                return None;
            }
        };
        let delivery = &found.delivery;
        let current = if due.fresh {
            delivery.is_fresh()
        } else {
            delivery.queued && delivery.next_attempt_at == Some(due.at)
        };
        if current {
            return Some(found);
        }
        if delivery.state != DeliveryState::Pending {
            // Ended by someone else: its sequence (if it heads one) moves on.
            self.due().ended(due.lane, due.delivery);
        }
        None
    }

    /// Gives a taken entry back: its claim ends, then its lane goes on (`None`), or the entry
    /// waits in it until `until`, with the whole lane.
    pub(super) fn release_taken(&self, hold: SledClaim, until: Option<Millis>) {
        let SledClaim { due, _claim } = hold;
        // Back in the index before the claim ends: while the claim holds, a purge's tombstone
        // of its event stays ([`super::purge::Tombstones`]), so the entry is dropped there.
        match until {
            None => self.due().done(due.lane, due.delivery),
            Some(at) => self.due().put_back(due, Some(at)),
        }
        drop(_claim);
    }
}

/// Taking is a look at memory, and every change to the index wakes the scheduler.
const TAKING: Taking = Taking {
    batch: 1024,
    hold_per_slot: 1,
    idle_poll: None,
    gather: false,
};

impl Queue for SledStore {
    type Hold = SledClaim;

    fn taking(&self) -> Taking {
        TAKING
    }

    fn take_due(
        &self,
        now: Millis,
        room: usize,
        limits: &dyn TakeLimits,
    ) -> impl Future<Output = Result<Vec<Taken<SledClaim>>, StoreError>> + Send {
        ready(Ok(self.take_due_now(now, room, limits)))
    }

    fn release(
        &self,
        hold: SledClaim,
        until: Option<Millis>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.release_taken(hold, until);
        ready(Ok(()))
    }

    fn next_due(
        &self,
        limits: &dyn TakeLimits,
    ) -> impl Future<Output = Result<Option<Millis>, StoreError>> + Send {
        ready(Ok(self.due().next_due(|lane| limits.allowed(lane))))
    }

    fn queue_changed(&self) -> impl Future<Output = ()> + Send + '_ {
        self.due().changed()
    }

    fn set_intake(&self, _intake: Option<Arc<dyn Intake<SledClaim>>>) {}

    fn leave(&self) -> impl Future<Output = Result<u64, StoreError>> + Send {
        ready(Ok(0))
    }
}
