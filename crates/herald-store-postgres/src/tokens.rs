//! Endpoints' rate limits across nodes (docs/delivery-contract.md, docs/cluster.md): the endpoint's
//! token bucket is a row, refilled and taken from in one conditional upsert (the row's lock
//! serializes the nodes), so the whole cluster sends at most `per_second` attempts a second to it,
//! as one node does. Written on the queue's connections (asynchronous commit): a bucket lost in a
//! database crash starts full again, as on a node's restart.

use super::PgStore;
use herald_core::clock::Millis;
use herald_core::model::RateLimit;
use herald_core::policy::tokens::next_token;
use herald_store::contract::RateLimits;
use herald_store::StoreError;

/// $1 endpoint, $2 per second, $3 burst, $4 now. A new bucket starts full (less the token
/// taken); an existing one is refilled for the time since `at`, then gives a token if it has a
/// whole one.
const TAKE: &str = "INSERT INTO rate_buckets AS b (endpoint_id, tokens, at, taken)
     VALUES ($1, $3::float8 - 1, $4::bigint, true)
     ON CONFLICT (endpoint_id) DO UPDATE SET
         tokens = least(b.tokens + greatest($4 - b.at, 0)::float8 / 1000 * $2::float8, $3)
             - CASE WHEN least(b.tokens + greatest($4 - b.at, 0)::float8 / 1000 * $2, $3) >= 1
                    THEN 1 ELSE 0 END,
         at = greatest(b.at, $4),
         taken = least(b.tokens + greatest($4 - b.at, 0)::float8 / 1000 * $2, $3) >= 1
     RETURNING taken, tokens, at";

impl RateLimits for PgStore {
    /// Takes a token of the endpoint's bucket at `now` (`Ok`), or says when the next one comes
    /// (`Err`).
    async fn take_token(
        &self,
        endpoint_id: &str,
        limit: RateLimit,
        now: Millis,
    ) -> Result<Result<(), Millis>, StoreError> {
        let client = self.db.queue_client().await?;
        let take = client.prepare_cached(TAKE).await?;
        let row = client
            .query_one(
                &take,
                &[&endpoint_id, &limit.per_second, &limit.burst(), &now],
            )
            .await?;
        let (taken, tokens, at): (bool, f64, Millis) = (row.get(0), row.get(1), row.get(2));
        Ok(if taken {
            Ok(())
        } else {
            Err(next_token(limit, tokens, at))
        })
    }
}
