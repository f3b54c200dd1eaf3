//! Cluster mode on PostgreSQL (SPEC §16), on a real PostgreSQL server each test starts
//! ([`common::postgres`]): the compiled-in schema and `herald migrate`, TLS to the database.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::herald::herald_bin;
use common::postgres::{PgOptions, Postgres};
use common::{toml_string, TestCa};

/// A config file in `dir` for a node of the cluster on `url`, plus `extra` keys of
/// `[storage.postgres]`.
fn node_config(dir: &Path, url: &str, extra: &str) -> PathBuf {
    let path = dir.join("herald.toml");
    std::fs::write(
        &path,
        format!(
            "[storage]\npath = {}\nbackend = \"postgres\"\n\n[storage.postgres]\nurl = {}\n{extra}",
            toml_string(&dir.join("data").display().to_string()),
            toml_string(url)
        ),
    )
    .expect("write the config");
    path
}

fn herald_migrate(config: &Path) -> Output {
    Command::new(herald_bin())
        .args(["migrate", "--config"])
        .arg(config)
        .output()
        .expect("run herald migrate")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn migrate_applies_the_schema_once() {
    let pg = Postgres::start();
    let url = pg.database("herald");
    let dir = tempfile::tempdir().unwrap();
    let config = node_config(dir.path(), &url, "");

    let first = herald_migrate(&config);
    assert!(first.status.success(), "first migrate: {}", text(&first));
    assert!(
        text(&first).contains("from version 0 to 1"),
        "first migrate: {}",
        text(&first)
    );
    let again = herald_migrate(&config);
    assert!(again.status.success(), "second migrate: {}", text(&again));
    assert!(
        text(&again).contains("at version 1; nothing to do"),
        "second migrate: {}",
        text(&again)
    );
    assert_eq!(pg.sql("SELECT count(*) FROM herald_schema", "herald"), "1");
    let tables = pg.sql(
        "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables \
         WHERE schemaname = 'public'",
        "herald",
    );
    for table in [
        "events",
        "deliveries",
        "attempts",
        "idempotency_keys",
        "endpoints",
        "quota_counters",
        "portal_sessions",
    ] {
        assert!(
            tables.split(',').any(|t| t == table),
            "table {table} missing from {tables}"
        );
    }
}

#[test]
fn nodes_migrating_together_apply_each_migration_once() {
    let pg = Postgres::start();
    let url = pg.database("herald");
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let children: Vec<_> = dirs
        .iter()
        .map(|d| {
            Command::new(herald_bin())
                .args(["migrate", "--config"])
                .arg(node_config(d.path(), &url, ""))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn herald migrate")
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for herald migrate"))
        .collect();
    for out in &outs {
        assert!(
            out.status.success(),
            "a node's migrate failed: {}",
            text(out)
        );
    }
    let applied = outs
        .iter()
        .filter(|o| text(o).contains("from version 0 to 1"))
        .count();
    assert_eq!(applied, 1, "exactly one node applies the schema");
    assert_eq!(pg.sql("SELECT count(*) FROM herald_schema", "herald"), "1");
}

#[test]
fn a_schema_this_herald_does_not_know_is_refused() {
    let pg = Postgres::start();
    let url = pg.database("herald");
    let dir = tempfile::tempdir().unwrap();
    let config = node_config(dir.path(), &url, "");
    assert!(herald_migrate(&config).status.success());

    // A newer herald's migration.
    pg.sql(
        "INSERT INTO herald_schema (version, name, digest, herald) VALUES (99, 'future', 'x', '9.0.0')",
        "herald",
    );
    let out = herald_migrate(&config);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("at version 99 (applied by herald 9.0.0)")
            && text(&out).contains("knows versions up to 1"),
        "{}",
        text(&out)
    );

    // Version 1 applied from another definition.
    pg.sql("DELETE FROM herald_schema WHERE version = 99", "herald");
    pg.sql(
        "UPDATE herald_schema SET digest = 'other' WHERE version = 1",
        "herald",
    );
    let out = herald_migrate(&config);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("schema version 1 was applied by herald")
            && text(&out).contains("different definition"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_unreachable_database_is_a_clear_failure_that_never_shows_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("postgres://herald:hunter2-secret@127.0.0.1:{port}/herald");
    let out = herald_migrate(&node_config(dir.path(), &url, ""));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("herald migrate: database:") && said.contains("refused"),
        "{said}"
    );
    assert!(!said.contains("hunter2"), "the password leaked: {said}");
}

#[test]
fn migrate_needs_the_postgres_backend() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("herald.toml");
    std::fs::write(
        &path,
        format!(
            "[storage]\npath = {}\n",
            toml_string(&dir.path().join("data").display().to_string())
        ),
    )
    .unwrap();
    let out = herald_migrate(&path);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("storage.backend is \"sled\""),
        "{}",
        text(&out)
    );
}

#[test]
fn the_database_is_reached_over_tls_verified_with_the_configured_ca() {
    let ca = TestCa::new();
    let pg = Postgres::start_with(PgOptions {
        tls: Some(ca.server_identity_pem()),
        ..PgOptions::default()
    });
    let url = pg.database("herald");
    assert!(url.ends_with("sslmode=require"));
    let dir = tempfile::tempdir().unwrap();

    // The test CA is not among the web roots: the certificate is refused.
    let out = herald_migrate(&node_config(dir.path(), &url, ""));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("certificate"),
        "the refusal names the certificate: {}",
        text(&out)
    );
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'events'",
            "herald"
        ),
        "0"
    );

    // With the CA file the connection is made, over TLS (libpq's verify-full is understood).
    let ca_file = ca.write_ca_file(dir.path());
    let config = node_config(
        dir.path(),
        &url.replace("sslmode=require", "sslmode=verify-full"),
        &format!(
            "ca_file = {}\n",
            toml_string(&ca_file.display().to_string())
        ),
    );
    let out = herald_migrate(&config);
    assert!(out.status.success(), "{}", text(&out));
    // Plain connections over TCP are refused by this server (pg_hba: hostssl only), so the
    // schema can only have come over TLS.
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'events'",
            "herald"
        ),
        "1"
    );
}
