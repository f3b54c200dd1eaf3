//! What the Svix-compatible API keeps on the embedded store (docs/svix.md): accounts'
//! application records in the `applications` tree (account id → JSON), and answers to requests
//! made with an `idempotency-key` header in the `api_answers` tree (account id, a NUL, the key
//! → JSON), pruned by the sweep after [`IDEMPOTENCY_WINDOW_MS`]. Both are small rows: an
//! account id is at most 128 bytes, a request key 255, a kept answer's body is cut by the API.

use std::future::Future;

use super::codec::account_key;
use super::keys;
use super::{key, Inner, SledStore, StoreError, IDEMPOTENCY_WINDOW_MS};
use herald_core::clock::Millis;
use herald_core::ids::{self, EVENT};
use herald_core::model::Application;
use herald_store::contract::Applications;
use herald_store::ApiAnswer;

fn encode<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| StoreError::Encode(e.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(v: &[u8], what: &str) -> Result<T, StoreError> {
    serde_json::from_slice(v).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

impl SledStore {
    /// The account's application record and its kept answers go (an account's purge).
    pub(super) fn forget_application(&self, account_id: &str) -> Result<(), StoreError> {
        let t = &self.inner.trees;
        t.applications.remove(account_id.as_bytes())?;
        for k in t
            .api_answers
            .scan_prefix(account_key(account_id, ""))
            .keys()
        {
            t.api_answers.remove(k?)?;
        }
        Ok(())
    }

    /// Removes the answers older than the window at `now`. Returns how many.
    pub(super) fn prune_api_answers(&self, now: Millis) -> Result<usize, StoreError> {
        let t = &self.inner.trees.api_answers;
        let mut n = 0;
        for item in t.iter() {
            let (k, v) = item?;
            let old = decode::<ApiAnswer>(&v, "kept answer")
                .map_or(true, |a| now - a.at >= IDEMPOTENCY_WINDOW_MS);
            if old {
                t.remove(k)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// The answer kept for the key: a row of `api_answers`, or a message's creation, found by
    /// its request key in the idempotency keys' tables ([`keys::request_row`]): `202` and the
    /// event, if the event exists and its key is within the window.
    fn answer_now(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> Result<Option<ApiAnswer>, StoreError> {
        let inner = &self.inner;
        if let Some(a) = inner.kept_answer(account_id, key, now)? {
            return Ok(Some(a));
        }
        Ok(inner
            .key_claim(now, |day| keys::request_row(day, account_id, key), None)?
            .map(|event| ApiAnswer {
                status: 202,
                body: String::new(),
                at: ids::ulid_ms(event),
                event_id: Some(ids::format(EVENT, event)),
            }))
    }
}

impl Inner {
    /// The row of `api_answers` kept for the key, if it is within the window at `now`.
    pub(super) fn kept_answer(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> Result<Option<ApiAnswer>, StoreError> {
        let Some(v) = self.trees.api_answers.get(account_key(account_id, key))? else {
            return Ok(None);
        };
        let a: ApiAnswer = decode(&v, "kept answer")?;
        Ok((now - a.at < IDEMPOTENCY_WINDOW_MS).then_some(a))
    }
}

impl Applications for SledStore {
    fn application(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<Option<Application>, StoreError>> + Send {
        let found = self
            .inner
            .trees
            .applications
            .get(account_id.as_bytes())
            .map_err(StoreError::from)
            .and_then(|v| v.map(|v| decode(&v, "application")).transpose());
        std::future::ready(found)
    }

    async fn put_application(&self, app: &Application) -> Result<(), StoreError> {
        self.inner
            .trees
            .applications
            .insert(app.id.as_bytes(), encode(app)?)?;
        self.sync().await
    }

    fn applications(&self) -> impl Future<Output = Result<Vec<Application>, StoreError>> + Send {
        let all = self
            .inner
            .trees
            .applications
            .iter()
            .values()
            .map(|v| decode(&v?, "application"))
            .collect();
        std::future::ready(all)
    }

    fn first_event_at(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<Option<Millis>, StoreError>> + Send {
        // The account index's first row starts with the account's oldest event kept.
        let first = self
            .inner
            .trees
            .log
            .scan_prefix(key::account_events(account_id))
            .keys()
            .next()
            .transpose()
            .map_err(StoreError::from)
            .map(|k| {
                k.and_then(|k| {
                    k.get(17..33)
                        .map(|b| u128::from_be_bytes(b.try_into().unwrap_or([0; 16])))
                })
                .map(ids::ulid_ms)
            });
        std::future::ready(first)
    }

    fn keyed_event(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        let found = self
            .inner
            .key_claim(now, |day| keys::key_row(day, account_id, key), None)
            .map(|event| event.map(|e| ids::format(EVENT, e)));
        std::future::ready(found)
    }

    fn api_answer(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<ApiAnswer>, StoreError>> + Send {
        std::future::ready(self.answer_now(account_id, key, now))
    }

    async fn keep_api_answer(
        &self,
        account_id: &str,
        key: &str,
        answer: ApiAnswer,
    ) -> Result<ApiAnswer, StoreError> {
        let row = account_key(account_id, key);
        let t = &self.inner.trees.api_answers;
        let value = encode(&answer)?;
        // The first answer within the window stays: a compare-and-swap against what was read.
        loop {
            let current = t.get(&row)?;
            if let Some(v) = &current {
                let kept: ApiAnswer = decode(v, "kept answer")?;
                if answer.at - kept.at < IDEMPOTENCY_WINDOW_MS {
                    return Ok(kept);
                }
            }
            if t.compare_and_swap(&row, current, Some(value.clone()))?
                .is_ok()
            {
                break;
            }
        }
        self.sync().await?;
        Ok(answer)
    }

    fn api_answers(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, String, ApiAnswer)>, StoreError>> + Send {
        let all = self
            .inner
            .trees
            .api_answers
            .iter()
            .map(|item| {
                let (k, v) = item?;
                let text = String::from_utf8_lossy(&k);
                let (account, key) = text.split_once('\0').unwrap_or((&text, ""));
                Ok((
                    account.to_string(),
                    key.to_string(),
                    decode(&v, "kept answer")?,
                ))
            })
            .collect();
        std::future::ready(all)
    }
}
