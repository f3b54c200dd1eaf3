//! Cluster mode's database for the benchmark (`--postgres URL`): emptied before each phase, and
//! its statement count (pg_stat_statements) read around the end-to-end phase.

use anyhow::{Context, Result};

async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("connecting to the benchmark's database")?;
    tokio::spawn(connection);
    Ok(client)
}

/// Drops everything herald made (it migrates again when it starts) and resets the statement
/// counts.
pub async fn empty(url: &str) -> Result<()> {
    let c = connect(url).await?;
    c.batch_execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
        .await
        .context("emptying the database")?;
    if statements_ready(&c).await {
        c.batch_execute("SELECT bench.pg_stat_statements_reset()")
            .await?;
    }
    Ok(())
}

/// Whether pg_stat_statements is loaded; it is kept in its own schema, `bench`.
async fn statements_ready(c: &tokio_postgres::Client) -> bool {
    c.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS bench;
         CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA bench;
         SELECT count(*) FROM bench.pg_stat_statements",
    )
    .await
    .is_ok()
}

/// Statements this database ran since the last [`empty`] (`None` without pg_stat_statements).
pub async fn statements(url: &str) -> Option<u64> {
    let c = connect(url).await.ok()?;
    if !statements_ready(&c).await {
        return None;
    }
    let row = c
        .query_one(
            "SELECT coalesce(sum(calls), 0)::bigint FROM bench.pg_stat_statements
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND query NOT LIKE '%pg_stat_statements%'",
            &[],
        )
        .await
        .ok()?;
    Some(row.get::<_, i64>(0).max(0) as u64)
}
