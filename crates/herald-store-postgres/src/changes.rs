//! Changes to a delivery outside its attempt (docs/api.md, docs/delivery-contract.md) on
//! PostgreSQL: a manual retry, an endpoint's waiting deliveries made due at once when it is
//! deleted, and what an ordered delivery waits for. A delivery a node holds the lease of is being
//! attempted: a change then answers [`Changed::Busy`], as a claimed delivery does on one node.

use super::reads::{delivery_from, DELIVERY_COLUMNS};
use super::{PgStore, DUE_CHANNEL};
use herald_core::clock::Millis;
use herald_core::ids::{self, DELIVERY, EVENT};
use herald_core::model::Attempt;
use herald_core::model::{Delivery, DeliveryState};
use herald_core::policy::ordering;
use herald_store::contract::DeliveryChanges;
use herald_store::Fence;
use herald_store::{Changed, StoreError};

impl DeliveryChanges for PgStore {
    async fn record_attempt(
        &self,
        _was: &Delivery,
        now: &Delivery,
        attempt: &Attempt,
        fence: Fence,
    ) -> Result<(), StoreError> {
        match fence {
            Fence::Lease(claim) => PgStore::finish(self, claim, now, Some(attempt)).await,
            Fence::Claimed => Err(StoreError::LeaseLost),
        }
    }

    fn is_held(&self, delivery_id: &str) -> bool {
        PgStore::holds(self, delivery_id)
    }

    /// For a delivery to an ordered endpoint (docs/delivery-contract.md): its ordering key and,
    /// while it waits behind another delivery of its key, the id of the one just ahead. `None` for
    /// an unordered endpoint.
    async fn ordering_of(
        &self,
        d: &Delivery,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        let Some(ordering) = self.directory.ordering(d.endpoint_id.as_deref()) else {
            return Ok(None);
        };
        let (Some(event), Some(delivery)) =
            (ids::parse(EVENT, &d.event_id), ids::parse(DELIVERY, &d.id))
        else {
            return Ok(None);
        };
        let client = self.db.client().await?;
        let Some(e) = client
            .query_opt(
                "SELECT ordering_key, payload FROM events WHERE id = $1",
                &[&event.to_be_bytes().to_vec()],
            )
            .await?
        else {
            return Ok(None);
        };
        let (request_key, payload): (Option<String>, Vec<u8>) = (e.get(0), e.get(1));
        let key = ordering::key_of(&ordering, request_key.as_deref(), &payload);
        if d.state != DeliveryState::Pending {
            return Ok(Some((key, None)));
        }
        let ahead = client
            .query_opt(
                "SELECT ahead.id FROM deliveries me
                 JOIN deliveries ahead ON ahead.lane = me.lane AND ahead.lane_seq < me.lane_seq
                 WHERE me.id = $1 AND ahead.due_at IS NOT NULL
                 ORDER BY ahead.lane_seq DESC LIMIT 1",
                &[&delivery.to_be_bytes().to_vec()],
            )
            .await?
            .map(|r| super::rows::ulid_from(r.get(0)))
            .transpose()?
            .map(|u| ids::format(DELIVERY, u));
        Ok(Some((key, ahead)))
    }

    /// Reads, changes and writes one delivery under its row's lock; [`Changed::Busy`] while a node
    /// holds its lease. A delivery that had ended and is made pending again (a manual retry) leaves
    /// its ordering lane: it is sent at once, out of order (docs/delivery-contract.md).
    async fn change_delivery<T>(
        &self,
        id: &str,
        f: impl FnOnce(&Delivery) -> Option<(Delivery, T)>,
    ) -> Result<Changed<T>, StoreError> {
        let Some(ulid) = ids::parse(DELIVERY, id) else {
            return Ok(Changed::NotFound);
        };
        let key = ulid.to_be_bytes().to_vec();
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        // Busy only under a live lease: a lease that lapsed (its node died) holds nothing, and
        // the change clears its claim so the dead node's late result is refused. A lease's end
        // is the delivery's `due_at`.
        let Some(row) = tx
            .query_opt(
                &format!(
                    "SELECT {DELIVERY_COLUMNS}, d.leased_by IS NOT NULL AND d.due_at > $2
                     FROM deliveries d WHERE d.id = $1 FOR UPDATE"
                ),
                &[&key, &self.clock.now_ms()],
            )
            .await?
        else {
            return Ok(Changed::NotFound);
        };
        if row.get::<_, Option<bool>>(13) == Some(true) {
            return Ok(Changed::Busy);
        }
        let was = delivery_from(&row)?;
        let Some((now, out)) = f(&was) else {
            return Ok(Changed::No);
        };
        let due = match now.state {
            DeliveryState::Pending => now.next_attempt_at,
            _ => None,
        };
        let leaves_lane =
            was.state != DeliveryState::Pending && now.state == DeliveryState::Pending;
        tx.execute(
            "UPDATE deliveries SET state = $2, last_status = $3, last_http_status = $4,
                 attempt_count = $5, next_attempt_at = $6, due_at = $6, manual = $7, queued = $8,
                 lane = CASE WHEN $9 THEN NULL ELSE lane END,
                 lane_seq = CASE WHEN $9 THEN NULL ELSE lane_seq END,
                 leased_by = NULL, claim = NULL
             WHERE id = $1",
            &[
                &key,
                &now.state.as_str(),
                &now.last_status.map(|s| s.as_str()),
                &now.last_http_status.map(i32::from),
                &(now.attempt_count as i32),
                &due,
                &now.manual,
                &now.queued,
                &leaves_lane,
            ],
        )
        .await?;
        if due.is_some() {
            tx.execute("SELECT pg_notify($1, '')", &[&DUE_CHANNEL])
                .await?;
        }
        tx.commit().await?;
        Ok(Changed::Yes(out))
    }

    /// Makes every delivery to `endpoint_id` that waits for a later time due at `now` (when the
    /// endpoint is deleted, so they end at once). Returns how many.
    async fn expedite_endpoint(&self, endpoint_id: &str, now: Millis) -> Result<u64, StoreError> {
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        let n = tx
            .execute(
                "UPDATE deliveries SET due_at = $2, next_attempt_at = $2
                 WHERE endpoint_id = $1 AND state = 'pending' AND leased_by IS NULL
                   AND due_at > $2",
                &[&endpoint_id, &now],
            )
            .await?;
        if n > 0 {
            tx.execute("SELECT pg_notify($1, '')", &[&DUE_CHANNEL])
                .await?;
        }
        tx.commit().await?;
        Ok(n)
    }
}
