//! The nodes of a cluster (docs/cluster.md: `/v1/status` shows the shared queue and this node;
//! `/healthz` fails when the database is unreachable): each node has a row it refreshes
//! (`seen_at`) while it runs and removes when it stops; a node that died stops refreshing and
//! drops out of the list once it has not been seen for [`GONE_AFTER_BEATS`] beats.

use std::time::Duration;

use super::PgStore;
use herald_core::clock::Millis;
use herald_core::model::DeliveryState;
use herald_store::contract::Vitals;
use herald_store::Stats;
use herald_store::{EndpointWaiting, Node, StoreError};

/// How often a node refreshes its row.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// Beats missed before a node is no longer listed (and its row is removed).
const GONE_AFTER_BEATS: i64 = 6;
/// Writes a node's row: (id, name, now, the schema version it knows); refreshes one that exists.
pub(super) const REGISTER: &str =
    "INSERT INTO nodes (id, name, started_at, seen_at, schema_version)
     VALUES ($1, $2, $3, $3, $4)
     ON CONFLICT (id) DO UPDATE
     SET seen_at = excluded.seen_at, schema_version = excluded.schema_version";
/// How long `/healthz` waits for the database.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

impl PgStore {
    /// Refreshes this node's row (making it again if it was removed, as after a long pause),
    /// with the schema version this herald knows ([`super::versions`]), and removes the rows of
    /// nodes gone for good.
    pub async fn heartbeat(&self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let gone = now - GONE_AFTER_BEATS * HEARTBEAT.as_millis() as Millis;
        let client = self.db.client().await?;
        client
            .execute(
                REGISTER,
                &[&self.node, &self.name, &now, &super::SCHEMA_VERSION],
            )
            .await?;
        client
            .execute("DELETE FROM nodes WHERE seen_at < $1", &[&gone])
            .await?;
        Ok(())
    }
}

/// Refreshes this node's row every [`HEARTBEAT`] until shutdown.
pub async fn beat(store: std::sync::Arc<PgStore>, mut shutdown: herald_core::shutdown::Shutdown) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Err(e) = store.heartbeat().await {
                    tracing::warn!(error = %e, "cannot refresh this node's row");
                }
            }
            () = shutdown.wait() => return,
        }
    }
}

impl Vitals for PgStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    /// Whether the database answers now (within a short timeout).
    async fn healthy(&self) -> bool {
        let check = async {
            let client = self.db.client().await?;
            client.query_one("SELECT 1", &[]).await?;
            Ok::<(), StoreError>(())
        };
        matches!(
            tokio::time::timeout(HEALTH_TIMEOUT, check).await,
            Ok(Ok(()))
        )
    }

    /// This node, and the nodes seen lately, oldest first, with the leases each holds.
    async fn nodes(&self) -> Result<Option<(String, Vec<Node>)>, StoreError> {
        let since = self.clock.now_ms() - GONE_AFTER_BEATS * HEARTBEAT.as_millis() as Millis;
        let rows = self
            .db
            .client()
            .await?
            .query(
                "SELECT n.id, n.name, n.started_at, n.seen_at,
                        (SELECT count(*) FROM deliveries d WHERE d.leased_by = n.id)
                 FROM nodes n WHERE n.seen_at >= $1 ORDER BY n.started_at, n.id",
                &[&since],
            )
            .await?;
        let nodes = rows
            .iter()
            .map(|r| Node {
                id: r.get(0),
                name: r.get(1),
                started_at: r.get(2),
                seen_at: r.get(3),
                leases: r.get(4),
            })
            .collect();
        Ok(Some((self.node.clone(), nodes)))
    }

    /// How many deliveries are due now (not leased), and when the oldest pending one fell due.
    async fn due_summary(&self, now: Millis) -> Result<(usize, Option<Millis>), StoreError> {
        let row = self
            .db
            .client()
            .await?
            .query_one(
                "SELECT count(*) FILTER (WHERE due_at <= $1 AND leased_by IS NULL),
                        min(next_attempt_at)
                 FROM deliveries WHERE due_at IS NOT NULL",
                &[&now],
            )
            .await?;
        Ok((row.get::<_, i64>(0) as usize, row.get(1)))
    }

    /// What waits for each endpoint: a delivery is behind when an earlier one of its lane (its
    /// endpoint and ordering key) is still unfinished, as a claim sees it.
    async fn waiting_by_endpoint(&self, now: Millis) -> Result<Vec<EndpointWaiting>, StoreError> {
        let rows = self
            .db
            .client()
            .await?
            .query(
                "SELECT endpoint_id,
                        count(*) FILTER (WHERE leased_by IS NULL),
                        count(*) FILTER (WHERE leased_by IS NULL AND due_at <= $1 AND NOT behind),
                        count(*) FILTER (WHERE leased_by IS NULL AND due_at <= $1 AND behind)
                 FROM (SELECT endpoint_id, leased_by, due_at,
                              lane IS NOT NULL
                              AND lane_seq > min(lane_seq) OVER (PARTITION BY lane) AS behind
                       FROM deliveries WHERE due_at IS NOT NULL) d
                 GROUP BY endpoint_id",
                &[&now],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| EndpointWaiting {
                endpoint_id: r.get(0),
                waiting: r.get::<_, i64>(1).max(0) as u64,
                due: r.get::<_, i64>(2).max(0) as u64,
                behind: r.get::<_, i64>(3).max(0) as u64,
            })
            .filter(|w| w.waiting > 0)
            .collect())
    }

    /// The database's size on disk (the cluster's, not this node's).
    async fn size_on_disk(&self) -> u64 {
        let size = async {
            let row = self
                .db
                .client()
                .await?
                .query_one("SELECT pg_database_size(current_database())", &[])
                .await?;
            Ok::<i64, StoreError>(row.get(0))
        };
        size.await.map(|n| n.max(0) as u64).unwrap_or(0)
    }

    /// The deliveries of the shared queue by state.
    async fn stats(&self) -> Result<Stats, StoreError> {
        let rows = self
            .db
            .client()
            .await?
            .query("SELECT state, count(*) FROM deliveries GROUP BY state", &[])
            .await?;
        let mut stats = Stats::default();
        for r in rows {
            let (state, n): (&str, i64) = (r.get(0), r.get(1));
            if let Some(s) = DeliveryState::parse(state) {
                stats.set(s, n);
            }
        }
        Ok(stats)
    }
}
