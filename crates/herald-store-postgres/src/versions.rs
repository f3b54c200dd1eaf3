//! The schema versions nodes know (docs/cluster.md, "Upgrading"): each node writes in its
//! `nodes` row the highest schema version it knows (its heartbeat, [`super::nodes`]); a row
//! without one is a node of a herald from before nodes recorded it. A migration never runs while
//! a live node of an older version serves: it waits for them to stop, up to the lease, then
//! refuses, naming them. So no node ever reads or rewrites rows whose fields it does not know.

use std::time::Duration;

use tokio_postgres::GenericClient;

use super::migrate::SCHEMA_VERSION;
use super::nodes::HEARTBEAT;
use herald_core::clock::Millis;

/// The first schema version whose `nodes` rows hold the version their node knows.
const RECORDED_FROM: i32 = 7;

/// How often a waiting migration looks at the nodes again.
const POLL: Duration = Duration::from_millis(250);

/// A live node of a herald older than this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OlderNode {
    pub id: String,
    /// The machine's name.
    pub name: String,
    /// The highest schema version it knows; `None`: a herald from before nodes recorded it.
    pub schema_version: Option<i32>,
}

impl std::fmt::Display for OlderNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.schema_version {
            Some(v) => write!(f, "{} on {} (schema version {v})", self.id, self.name),
            None => write!(
                f,
                "{} on {} (a herald from before schema version {RECORDED_FROM})",
                self.id, self.name
            ),
        }
    }
}

/// How long after its last beat a node still counts as live: the lease, and at least two beats
/// (a live node's row is never more than one beat and a statement's latency old).
pub fn live_span(lease: Duration) -> Duration {
    lease.max(2 * HEARTBEAT)
}

/// The nodes seen within [`live_span`] before `now` that know a schema version older than this
/// herald's, on a database at schema version `schema` (whose `nodes` rows hold no versions
/// before [`RECORDED_FROM`]: every row counts as older then).
pub async fn older_live_nodes(
    client: &impl GenericClient,
    schema: i32,
    now: Millis,
    lease: Duration,
) -> Result<Vec<OlderNode>, tokio_postgres::Error> {
    let since = now - live_span(lease).as_millis() as Millis;
    let rows = if schema >= RECORDED_FROM {
        client
            .query(
                "SELECT id, name, schema_version FROM nodes
                 WHERE seen_at >= $1 AND (schema_version IS NULL OR schema_version < $2)
                 ORDER BY started_at, id",
                &[&since, &SCHEMA_VERSION],
            )
            .await?
    } else {
        client
            .query(
                "SELECT id, name, NULL::integer FROM nodes WHERE seen_at >= $1
                 ORDER BY started_at, id",
                &[&since],
            )
            .await?
    };
    Ok(rows
        .iter()
        .map(|r| OlderNode {
            id: r.get(0),
            name: r.get(1),
            schema_version: r.get(2),
        })
        .collect())
}

/// Before migrating a database at schema version `from`: waits up to [`live_span`] for the live
/// nodes of older versions to stop (a stopping node removes its row; a dead one's row ages past
/// the span), looking every [`POLL`]. `Err` names those still serving then. The row of `me`
/// (id, machine name), the node that migrates, is not waited for: it is a previous run of this
/// node on this machine, whose id file it now holds, so that run is over (killed before it
/// could remove its row). A data directory copied to another machine keeps the id but not the
/// name, and is waited for.
pub(super) async fn wait_for_older_nodes(
    client: &impl GenericClient,
    from: i32,
    lease: Duration,
    me: Option<(&str, &str)>,
) -> Result<(), String> {
    use herald_core::clock::Clock;
    let span = live_span(lease);
    let deadline = tokio::time::Instant::now() + span;
    let mut told = false;
    loop {
        let mut older = older_live_nodes(
            client,
            from,
            herald_core::clock::SystemClock.now_ms(),
            lease,
        )
        .await
        .map_err(|e| super::describe(&e))?;
        older.retain(|n| Some((n.id.as_str(), n.name.as_str())) != me);
        if older.is_empty() {
            return Ok(());
        }
        let named = older
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "cannot migrate the schema from version {from} to {SCHEMA_VERSION} while nodes \
                 of an older herald serve this database: {named} (waited {}); stop them, then \
                 start the new ones (docs/cluster.md, \"Upgrading\")",
                humantime::format_duration(span)
            ));
        }
        if !told {
            told = true;
            tracing::info!(
                nodes = %named,
                "waiting up to {} for the nodes of an older herald to stop before migrating \
                 the schema",
                humantime::format_duration(span)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
