//! Upgrading a cluster (docs/cluster.md, "Upgrading"): each node records the schema version it
//! knows in its `nodes` row, and a migration never runs while a live node of an older herald
//! serves the database. No older binary is needed: a `nodes` row without a version is what a
//! node of a herald from before schema version 7 writes.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::cluster::{herald_migrate, node_config, text};
use crate::common::herald::herald_bin;
use crate::common::postgres::Postgres;
use crate::common::toml_string;
use herald::clock::{Clock, SystemClock};
use herald::config::Config;
use herald_store_postgres::versions::{live_span, older_live_nodes, OlderNode};
use herald_store_postgres::{migrate_and_join, Database, Joining, PgStore, SCHEMA_VERSION};

/// The shortest lease the config takes: a migration waits up to two heartbeats (10 s) then.
const LEASE: &str = "lease = \"5s\"\n";
const WAITED: Duration = Duration::from_secs(10);

/// The row an older herald's node keeps (no schema version: its `nodes` table has none), seen
/// `ago` ms before now.
fn older_node_row(pg: &Postgres, id: &str, name: &str, ago: i64) {
    pg.sql(
        &format!(
            "INSERT INTO nodes (id, name, started_at, seen_at) VALUES ('{id}', '{name}',
                 (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 60000,
                 (extract(epoch FROM clock_timestamp()) * 1000)::bigint - {ago})"
        ),
        "herald",
    );
}

/// Beats for the node `id` as its herald would (every half second here) until `stop` is sent.
fn beat_until(pg: &Postgres, id: &str, stop: mpsc::Receiver<()>) {
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(Duration::from_millis(500)) {
        pg.sql(
            &format!(
                "UPDATE nodes SET seen_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                 WHERE id = '{id}'"
            ),
            "herald",
        );
    }
}

/// `herald serve` on `url` (lease 5 s) until it exits.
fn herald_serve(dir: &Path, url: &str) -> Output {
    let path = dir.join("serve.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_tokens = [\"t-admin-0123456789abcdef\"]\n\
             ingest_tokens = [\"t-ingest-0123456789abcdef\"]\n[storage]\npath = {}\nbackend = \"postgres\"\n\
             [storage.postgres]\nurl = {}\n{LEASE}",
            toml_string(&dir.join("serve-data").display().to_string()),
            toml_string(url)
        ),
    )
    .expect("write the config");
    Command::new(herald_bin())
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .expect("run herald serve")
}

/// A server holding the database `tests/fixtures/cluster4` keeps: schema version 6, as this
/// release's previous one wrote it (see its README), and its URL.
fn fixture_v6() -> (Postgres, String) {
    let pg = Postgres::start();
    let url = pg.database("herald");
    pg.sql_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cluster4/dump.sql"),
        "herald",
    );
    assert_eq!(schema_version(&pg), "6");
    (pg, url)
}

fn schema_version(pg: &Postgres) -> String {
    pg.sql("SELECT max(version) FROM herald_schema", "herald")
}

#[test]
fn migrate_and_start_refuse_while_a_node_of_an_older_herald_serves_naming_it() {
    // A database schema version 6 wrote (this release's), and a node of that herald serving it.
    let (pg, url) = fixture_v6();
    older_node_row(&pg, "0ld0000000000001", "old-box", 0);
    let dir = tempfile::tempdir().unwrap();
    let config = node_config(dir.path(), &url, LEASE);
    let (stop, stopped) = mpsc::channel();
    std::thread::scope(|s| {
        // Dropped when this ends, even by a failed assertion: the beats stop then.
        let stop = stop;
        s.spawn(|| beat_until(&pg, "0ld0000000000001", stopped));

        let began = Instant::now();
        let out = herald_migrate(&config);
        let took = began.elapsed();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let said = text(&out);
        assert!(
            said.contains(&format!(
                "herald migrate: cannot migrate the schema from version 6 to {SCHEMA_VERSION} \
                 while nodes of an older herald serve this database: 0ld0000000000001 on \
                 old-box (a herald from before schema version 7) (waited 10s)"
            )),
            "{said}"
        );
        assert!(said.contains("docs/cluster.md, \"Upgrading\""), "{said}");
        assert!(
            took >= WAITED,
            "it refused after {took:?}, before the lease"
        );
        // Nothing changed: the schema is version 6's, its nodes hold no versions.
        assert_eq!(schema_version(&pg), "6");
        assert_eq!(
            pg.sql(
                "SELECT count(*) FROM information_schema.columns
                 WHERE table_name = 'nodes' AND column_name = 'schema_version'",
                "herald"
            ),
            "0"
        );

        // A node of this herald started on it refuses to serve, for the same reason.
        let out = herald_serve(dir.path(), &url);
        assert!(!out.status.success(), "{}", text(&out));
        let said = text(&out);
        assert!(
            said.contains(
                "while nodes of an older herald serve this database: 0ld0000000000001 on old-box"
            ),
            "{said}"
        );
        assert_eq!(schema_version(&pg), "6");
        stop.send(()).expect("stop the older node's beats");
    });
}

#[test]
fn a_migration_goes_ahead_once_the_older_nodes_row_lapses() {
    // A node of version 6's herald last seen 7 s ago (it died): its row lapses 3 s into the
    // 10 s a migration waits, and the migration goes ahead then.
    let (pg, url) = fixture_v6();
    older_node_row(&pg, "0ld0000000000002", "gone-box", 7_000);
    let dir = tempfile::tempdir().unwrap();
    let began = Instant::now();
    let out = herald_migrate(&node_config(dir.path(), &url, LEASE));
    let took = began.elapsed();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("from version 6 to {SCHEMA_VERSION}")),
        "{}",
        text(&out)
    );
    assert!(
        took >= Duration::from_secs(2) && took < WAITED,
        "it went ahead after {took:?}: not when the row lapsed"
    );
    assert_eq!(schema_version(&pg), SCHEMA_VERSION.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_records_its_schema_version_and_older_ones_are_told_apart() {
    let pg = Postgres::start();
    let url = pg.database("herald");
    let dir = tempfile::tempdir().unwrap();
    assert!(herald_migrate(&node_config(dir.path(), &url, ""))
        .status
        .success());
    let config = Config::from_toml(&format!(
        "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {}\npool_size = 2\n",
        toml_string(&url)
    ))
    .expect("config");
    let db = Database::new(&herald::store::postgres_settings(&config).expect("settings"))
        .expect("database");
    let lease = Duration::from_secs(5);
    let node = PgStore::with_database(db.clone(), std::sync::Arc::new(SystemClock), lease)
        .await
        .expect("node");
    // Its first beat wrote the version it knows.
    assert_eq!(
        pg.sql(
            &format!(
                "SELECT schema_version FROM nodes WHERE id = '{}'",
                node.node()
            ),
            "herald"
        ),
        SCHEMA_VERSION.to_string()
    );
    // A node without a version and one of an older version, both live, are older; a dead one
    // (seen an hour ago) is not live.
    older_node_row(&pg, "a000000000000001", "box-a", 0);
    older_node_row(&pg, "b000000000000002", "box-b", 1_000);
    pg.sql(
        &format!(
            "UPDATE nodes SET schema_version = {} WHERE id = 'b000000000000002'",
            SCHEMA_VERSION - 1
        ),
        "herald",
    );
    older_node_row(&pg, "d000000000000004", "box-d", 3_600_000);
    let client = db.dedicated().await.expect("connect");
    let older = older_live_nodes(&client, SCHEMA_VERSION, SystemClock.now_ms(), lease)
        .await
        .expect("older nodes");
    assert_eq!(
        older,
        vec![
            OlderNode {
                id: "a000000000000001".into(),
                name: "box-a".into(),
                schema_version: None,
            },
            OlderNode {
                id: "b000000000000002".into(),
                name: "box-b".into(),
                schema_version: Some(SCHEMA_VERSION - 1),
            },
        ]
    );
    assert_eq!(live_span(lease), Duration::from_secs(10));
    assert_eq!(live_span(Duration::from_secs(30)), Duration::from_secs(30));
    assert_eq!(
        older[1].to_string(),
        format!(
            "b000000000000002 on box-b (schema version {})",
            SCHEMA_VERSION - 1
        )
    );
}

/// A starting node's row is written by the transaction that checked (and here applied) the
/// schema, under the migrations' lock: a newer herald migrating after it finds it live, and
/// one that migrated before it makes it refuse; there is no moment between the check and the
/// row in which a newer herald could migrate under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_node_is_registered_by_the_transaction_that_checked_the_schema() {
    let pg = Postgres::start();
    let url = pg.database("herald");
    let config = Config::from_toml(&format!(
        "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {}\npool_size = 2\n",
        toml_string(&url)
    ))
    .expect("config");
    let db = Database::new(&herald::store::postgres_settings(&config).expect("settings"))
        .expect("database");
    let mut client = db.dedicated().await.expect("connect");
    let joining = Joining {
        id: "c000000000000003",
        name: "box-c",
        clock: &SystemClock,
    };
    let migrated = migrate_and_join(&mut client, Duration::from_secs(5), Some(joining))
        .await
        .expect("migrate");
    assert_eq!((migrated.from, migrated.to), (0, SCHEMA_VERSION));
    let row = pg.sql(
        "SELECT name || ' ' || schema_version || ' ' || (xmin::text = (SELECT xmin::text
             FROM herald_schema WHERE version = 1))
         FROM nodes WHERE id = 'c000000000000003'",
        "herald",
    );
    assert_eq!(
        row,
        format!("box-c {SCHEMA_VERSION} true"),
        "the row, with the version it knows, committed with the migrations"
    );
    // Nothing to apply: still registered under the lock, by the transaction that checked.
    let again = Joining {
        id: "e000000000000005",
        name: "box-e",
        clock: &SystemClock,
    };
    migrate_and_join(&mut client, Duration::from_secs(5), Some(again))
        .await
        .expect("check");
    assert_eq!(
        pg.sql(
            "SELECT schema_version FROM nodes WHERE id = 'e000000000000005'",
            "herald"
        ),
        SCHEMA_VERSION.to_string()
    );
}
