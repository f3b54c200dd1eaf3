//! What the Svix-compatible API keeps on PostgreSQL (docs/svix.md): the `applications` table
//! (an account's record as JSON) and `api_answers` (the answer to a request key, by account and
//! key), pruned by the sweep after [`IDEMPOTENCY_WINDOW_MS`]. Shared by every node, so a
//! repeated request key answers the same on any of them.

use super::PgStore;
use herald_core::clock::Millis;
use herald_core::ids::{self, EVENT};
use herald_core::model::Application;
use herald_store::contract::Applications;
use herald_store::{ApiAnswer, StoreError, IDEMPOTENCY_WINDOW_MS};

fn to_json(app: &Application) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(app).map_err(|e| StoreError::Encode(e.to_string()))
}

fn from_json(v: serde_json::Value) -> Result<Application, StoreError> {
    serde_json::from_value(v).map_err(|e| StoreError::Corrupt(format!("application: {e}")))
}

/// A kept answer from its columns `status, body, created_at, event_id`.
fn answer_of(r: &tokio_postgres::Row) -> Result<ApiAnswer, StoreError> {
    let body: Vec<u8> = r.get(1);
    let event: Option<Vec<u8>> = r.get(3);
    Ok(ApiAnswer {
        status: r.get::<_, i32>(0) as u16,
        body: String::from_utf8(body)
            .map_err(|_| StoreError::Corrupt("a kept answer is not UTF-8".into()))?,
        at: r.get(2),
        event_id: event
            .map(|e| super::rows::ulid_from(&e).map(|u| ids::format(EVENT, u)))
            .transpose()?,
    })
}

/// An event id as stored (16 bytes), for a kept answer's `event_id`.
fn event_key(answer: &ApiAnswer) -> Option<Vec<u8>> {
    answer
        .event_id
        .as_deref()
        .and_then(|e| ids::parse(EVENT, e))
        .map(|u| u.to_be_bytes().to_vec())
}

impl PgStore {
    /// Removes the answers older than the window at `now`, at most `max`. Returns how many.
    pub(super) async fn prune_api_answers(&self, now: Millis, max: i64) -> Result<u64, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .execute(
                "DELETE FROM api_answers WHERE (account_id, key) IN (
                     SELECT account_id, key FROM api_answers WHERE created_at <= $1 LIMIT $2
                     FOR UPDATE SKIP LOCKED)",
                &[&(now - IDEMPOTENCY_WINDOW_MS), &max],
            )
            .await?)
    }
}

impl Applications for PgStore {
    async fn application(&self, account_id: &str) -> Result<Option<Application>, StoreError> {
        self.db
            .client()
            .await?
            .query_opt(
                "SELECT record FROM applications WHERE account_id = $1",
                &[&account_id],
            )
            .await?
            .map(|r| from_json(r.get(0)))
            .transpose()
    }

    async fn put_application(&self, app: &Application) -> Result<(), StoreError> {
        self.db
            .client()
            .await?
            .execute(
                "INSERT INTO applications (account_id, record) VALUES ($1, $2)
                 ON CONFLICT (account_id) DO UPDATE SET record = excluded.record",
                &[&app.id, &to_json(app)?],
            )
            .await?;
        Ok(())
    }

    async fn applications(&self) -> Result<Vec<Application>, StoreError> {
        self.db
            .client()
            .await?
            .query("SELECT record FROM applications ORDER BY account_id", &[])
            .await?
            .into_iter()
            .map(|r| from_json(r.get(0)))
            .collect()
    }

    async fn first_event_at(&self, account_id: &str) -> Result<Option<Millis>, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .query_opt(
                "SELECT received_at FROM events WHERE account_id = $1 ORDER BY id LIMIT 1",
                &[&account_id],
            )
            .await?
            .map(|r| r.get(0)))
    }

    async fn keyed_event(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> Result<Option<String>, StoreError> {
        let row = self
            .db
            .client()
            .await?
            .query_opt(
                "SELECT k.event_id FROM idempotency_keys k JOIN events e ON e.id = k.event_id
                 WHERE k.account_id = $1 AND k.key = $2 AND k.created_at > $3",
                &[&account_id, &key, &(now - IDEMPOTENCY_WINDOW_MS)],
            )
            .await?;
        row.map(|r| {
            let id: Vec<u8> = r.get(0);
            super::rows::ulid_from(&id).map(|u| ids::format(EVENT, u))
        })
        .transpose()
    }

    async fn api_answer(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> Result<Option<ApiAnswer>, StoreError> {
        self.db
            .client()
            .await?
            .query_opt(
                "SELECT status, body, created_at, event_id FROM api_answers
                 WHERE account_id = $1 AND key = $2 AND created_at > $3",
                &[&account_id, &key, &(now - IDEMPOTENCY_WINDOW_MS)],
            )
            .await?
            .map(|r| answer_of(&r))
            .transpose()
    }

    async fn keep_api_answer(
        &self,
        account_id: &str,
        key: &str,
        answer: ApiAnswer,
    ) -> Result<ApiAnswer, StoreError> {
        // The first answer within the window stays; an expired one is replaced.
        let row = self
            .db
            .client()
            .await?
            .query_one(
                "WITH put AS (
                     INSERT INTO api_answers AS a (account_id, key, status, body, created_at,
                                                   event_id)
                     VALUES ($1, $2, $3, $4, $5, $7)
                     ON CONFLICT (account_id, key) DO UPDATE
                         SET status = excluded.status, body = excluded.body,
                             created_at = excluded.created_at, event_id = excluded.event_id
                         WHERE a.created_at <= $6
                     RETURNING status, body, created_at, event_id
                 )
                 SELECT status, body, created_at, event_id FROM put
                 UNION ALL
                 SELECT status, body, created_at, event_id FROM api_answers
                 WHERE account_id = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM put)",
                &[
                    &account_id,
                    &key,
                    &i32::from(answer.status),
                    &answer.body.as_bytes(),
                    &answer.at,
                    &(answer.at - IDEMPOTENCY_WINDOW_MS),
                    &event_key(&answer),
                ],
            )
            .await?;
        answer_of(&row)
    }

    /// A message's answer is not among them: its request key travels with its event.
    async fn api_answers(&self) -> Result<Vec<(String, String, ApiAnswer)>, StoreError> {
        self.db
            .client()
            .await?
            .query(
                "SELECT status, body, created_at, event_id, account_id, key FROM api_answers
                 WHERE event_id IS NULL ORDER BY account_id, key",
                &[],
            )
            .await?
            .iter()
            .map(|r| Ok((r.get(4), r.get(5), answer_of(r)?)))
            .collect()
    }
}
