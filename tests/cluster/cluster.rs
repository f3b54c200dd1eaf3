//! Cluster mode on PostgreSQL (docs/cluster.md), on a real PostgreSQL server each test starts
//! ([`common::postgres`]): the compiled-in schema and `herald migrate`, TLS to the database,
//! `herald copy` of a real herald's stopped store.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use common::herald::herald_bin;
use common::postgres::{PgOptions, Postgres};
use common::{behaviour, toml_string, HeraldApi, Receiver, Reply, TestCa, World};
use herald::store::prelude::*;
use herald_store_postgres::SCHEMA_VERSION;
use serde_json::json;

/// A config file in `dir` for a node of the cluster on `url`, plus `extra` keys of
/// `[storage.postgres]`.
pub(crate) fn node_config(dir: &Path, url: &str, extra: &str) -> PathBuf {
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

pub(crate) fn herald_migrate(config: &Path) -> Output {
    Command::new(herald_bin())
        .args(["migrate", "--config"])
        .arg(config)
        .output()
        .expect("run herald migrate")
}

pub(crate) fn text(out: &Output) -> String {
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
        text(&first).contains(&format!("from version 0 to {SCHEMA_VERSION}")),
        "first migrate: {}",
        text(&first)
    );
    let again = herald_migrate(&config);
    assert!(again.status.success(), "second migrate: {}", text(&again));
    assert!(
        text(&again).contains(&format!("at version {SCHEMA_VERSION}; nothing to do")),
        "second migrate: {}",
        text(&again)
    );
    assert_eq!(
        pg.sql("SELECT count(*) FROM herald_schema", "herald"),
        SCHEMA_VERSION.to_string()
    );
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
        "rate_buckets",
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
        .filter(|o| text(o).contains(&format!("from version 0 to {SCHEMA_VERSION}")))
        .count();
    assert_eq!(applied, 1, "exactly one node applies the schema");
    assert_eq!(
        pg.sql("SELECT count(*) FROM herald_schema", "herald"),
        SCHEMA_VERSION.to_string()
    );
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
            && text(&out).contains(&format!("knows versions up to {SCHEMA_VERSION}")),
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

fn herald_copy(store: &Path, url: &str) -> Output {
    Command::new(herald_bin())
        .args(["copy", "--from"])
        .arg(format!("sled:{}", store.display()))
        .arg("--to")
        .arg(format!("postgres:{url}"))
        .output()
        .expect("run herald copy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_moves_a_stopped_store_and_never_doubles_a_row() {
    // A real herald on sled with delivered, failed and pending deliveries.
    let mut world = World::start(
        "",
        &format!(
            "[endpoints]\nrequire_verification = false\n[retry_policies]\nslow = [\"1h\"]\n\
             [svix]\nenabled = true\n{}",
            common::ON_SLED
        ),
    )
    .await;
    let ok = Receiver::https(&world.ca, behaviour(|_, _| Reply::status(200)));
    let bad = Receiver::https(&world.ca, behaviour(|_, _| Reply::status(500)));
    world.endpoint("acct_ok", &ok.url("/"), json!({})).await;
    world
        .endpoint("acct_fail", &bad.url("/"), json!({"retry_policy": "none"}))
        .await;
    let (_, wait_secret) = world
        .endpoint("acct_wait", &bad.url("/"), json!({"retry_policy": "slow"}))
        .await;
    let mut ids = Vec::new();
    for (account, n) in [("acct_ok", 3), ("acct_fail", 2), ("acct_wait", 2)] {
        for i in 0..n {
            let (status, answer) = world
                .herald
                .ingest(json!({"account_id": account, "type": "order.created",
                               "payload": {"n": i}, "idempotency_key": format!("{account}-{i}")}))
                .await;
            assert_eq!(status, 202, "{answer}");
            ids.push((account, common::first_delivery(&answer)));
        }
    }
    // What the Svix-compatible API keeps: an application record, a message with channels, tags
    // and its request key (docs/svix.md).
    let (status, app) = world
        .herald
        .admin(
            "PUT",
            "/api/v1/app/acct_ok",
            Some(json!({"name": "OK", "metadata": {"k": "v"}})),
        )
        .await;
    assert_eq!(status, 200, "{app}");
    let (status, _, msg) = world
        .herald
        .call_raw(
            "POST",
            "/api/v1/app/acct_ok/msg",
            Some(common::herald::ADMIN_TOKEN),
            &[
                ("content-type", "application/json"),
                ("idempotency-key", "copy-key"),
            ],
            br#"{"eventType": "order.created", "payload": {"n": 9}, "channels": ["eu"], "tags": ["t"]}"#
                .to_vec(),
        )
        .await;
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&msg));
    let msg: serde_json::Value = serde_json::from_slice(&msg).unwrap();
    let (_, event) = world
        .herald
        .admin(
            "GET",
            &format!("/v1/events/{}", msg["id"].as_str().unwrap()),
            None,
        )
        .await;
    ids.push((
        "acct_ok",
        event["deliveries"][0]["id"].as_str().unwrap().to_string(),
    ));
    for (account, id) in &ids {
        match *account {
            "acct_ok" => drop(
                world
                    .wait_state(id, "delivered", Duration::from_secs(20))
                    .await,
            ),
            "acct_fail" => drop(
                world
                    .wait_state(id, "failed", Duration::from_secs(20))
                    .await,
            ),
            _ => {
                common::wait_until(
                    Duration::from_secs(20),
                    "the first attempt fails",
                    || async { world.delivery(id).await["attempt_count"] == 1 },
                )
                .await
            }
        }
    }
    let waiting = world.delivery(&ids[5].1).await;
    assert_eq!(waiting["state"], "pending");
    world.herald.sigterm().await;
    let store = world.herald.storage_path();

    let pg = Postgres::start();
    let url = pg.database("herald");
    let out = herald_copy(&store, &url);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("copied 8 deliveries"), "{}", text(&out));
    let counts = |pg: &Postgres| {
        pg.sql(
            "SELECT (SELECT count(*) FROM events) || ',' || (SELECT count(*) FROM deliveries) || ','
                 || (SELECT count(*) FROM attempts) || ',' || (SELECT count(*) FROM endpoints) || ','
                 || (SELECT count(*) FROM idempotency_keys)",
            "herald",
        )
    };
    assert_eq!(counts(&pg), "8,8,8,3,7");
    assert_eq!(states(&pg), "delivered:4,failed:2,pending:2");
    assert_eq!(
        pg.sql(
            "SELECT (SELECT record ->> 'name' FROM applications WHERE account_id = 'acct_ok')
                 || ',' || (SELECT count(*) FROM api_answers
                            WHERE key = 'copy-key' AND event_id IS NOT NULL)
                 || ',' || (SELECT labels -> 'channels' ->> 0 FROM events WHERE labels IS NOT NULL)
                 || ',' || (SELECT count(*) FROM attempts WHERE url IS NOT NULL)",
            "herald",
        ),
        "OK,1,eu,8",
        "the application, the message's request key, its channels and every attempt's URL"
    );
    // The pending ones are due when they were due on sled (their retry, an hour on).
    let due = waiting["next_attempt_at"].as_str().expect("a retry time");
    let due_ms = herald::clock::parse_rfc3339(due).expect("an RFC 3339 time");
    assert_eq!(
        pg.sql(
            &format!("SELECT count(*) FROM deliveries WHERE due_at = {due_ms}"),
            "herald"
        ),
        "1"
    );
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM deliveries WHERE state = 'pending' AND due_at = next_attempt_at
                 AND attempt_count = 1 AND leased_by IS NULL",
            "herald"
        ),
        "2"
    );
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM deliveries WHERE due_at IS NOT NULL AND state <> 'pending'",
            "herald"
        ),
        "0"
    );

    // A node on the copied database takes the pending ones when they fall due, and only them.
    {
        let node_dir = tempfile::tempdir().unwrap();
        let config = herald::config::Config::from_toml(&format!(
            "[storage]\nbackend = \"postgres\"\npath = {}\n[storage.postgres]\nurl = {}\n",
            toml_string(&node_dir.path().display().to_string()),
            toml_string(&url)
        ))
        .unwrap();
        let clock = Arc::new(herald::clock::ManualClock::new(due_ms - 1));
        let node = herald_store_postgres::PgStore::open(
            &herald::store::postgres_settings(&config).unwrap(),
            clock.clone(),
            Default::default(),
        )
        .await
        .unwrap();
        // (The other pending one may fall due first: its retry's jitter.)
        let early = node.claim_due(10).await.unwrap();
        assert!(early.iter().all(|l| l.due.delivery.id != ids[5].1));
        clock.set(due_ms + 3_600_000);
        let later = node.claim_due(10).await.unwrap();
        let mut taken: Vec<&str> = early
            .iter()
            .chain(&later)
            .map(|l| l.due.delivery.id.as_str())
            .collect();
        taken.sort();
        let mut waiting: Vec<&str> = vec![&ids[5].1, &ids[6].1];
        waiting.sort();
        assert_eq!(taken, waiting);
        assert_eq!(
            node.account_ids(),
            vec!["acct_fail", "acct_ok", "acct_wait"]
        );
        assert_eq!(node.account_endpoints("acct_wait")[0].retry_policy, "slow");
        // Its signing secret came along (in the endpoint's own column of secrets).
        let secrets: Vec<String> = node.account_endpoints("acct_wait")[0]
            .secrets
            .iter()
            .map(|s| s.value.clone())
            .collect();
        assert_eq!(secrets, vec![wait_secret.clone()]);
        node.release_all().await.unwrap();
    }

    // Again: nothing to do, nothing doubled.
    let again = herald_copy(&store, &url);
    assert!(again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("nothing to do"), "{}", text(&again));
    // Cut short (as if interrupted after its first page): it goes on, doubling nothing.
    pg.sql(
        "UPDATE herald_copy SET finished = false, cursor = NULL, copied = 0",
        "herald",
    );
    let resumed = herald_copy(&store, &url);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        text(&resumed).contains("finished the copy: 8 deliveries"),
        "{}",
        text(&resumed)
    );
    assert_eq!(counts(&pg), "8,8,8,3,7");

    // A real node serving the copied database delivers the pending ones (their endpoint moved
    // to a receiver that answers, and each retried now), and sends nothing that had ended.
    {
        let ca_dir = tempfile::tempdir().unwrap();
        let ca_file = world.ca.write_ca_file(ca_dir.path());
        let mut node = common::Herald::start(&format!(
            "{}[endpoints]\nrequire_verification = false\n[retry_policies]\nslow = [\"1h\"]\n\
             [storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {}\n",
            common::delivery_toml(&ca_file),
            toml_string(&url)
        ))
        .await;
        let (ok_before, bad_before) = (ok.count(), bad.count());
        let waiting: Vec<String> = ids[5..7].iter().map(|(_, id)| id.clone()).collect();
        deliver_elsewhere(&node, "acct_wait", &ok.url("/moved"), &waiting).await;
        assert_eq!(ok.count(), ok_before + 2, "the two pending ones, once each");
        assert_eq!(
            bad.count(),
            bad_before,
            "nothing that had ended is sent again"
        );
        assert_eq!(states(&pg), "delivered:6,failed:2");
        node.sigterm().await;
    }

    // A database with other data is refused, and left as it was.
    let other = pg.database("other");
    assert!(herald_migrate(&node_config(
        tempfile::tempdir().unwrap().path(),
        &other,
        ""
    ))
    .status
    .success());
    pg.sql(
        "INSERT INTO accounts (account_id, plan) VALUES ('someone', 'pro')",
        "other",
    );
    let refused = herald_copy(&store, &other);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("is not empty"),
        "{}",
        text(&refused)
    );
    assert_eq!(pg.sql("SELECT count(*) FROM events", "other"), "0");
}

/// A database herald's schema version 1 wrote (tests/fixtures/cluster1, see its README) is
/// migrated by a node that starts on it: its log reads as before, its keys still dedupe, and its
/// pending deliveries are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_is_migrated_by_a_node_that_then_serves_it() {
    let (pg, url) = fixture_database(1);
    // As version 1 left it: 3 delivered, 2 failed, 2 pending, an attempt each (7).
    assert_eq!(states(&pg), "delivered:3,failed:2,pending:2");
    assert_eq!(pg.sql("SELECT count(*) FROM attempts", "herald"), "7");
    // The pending ones' retries fell due an hour after the fixture was written (2026-12-04,
    // 17:48Z): a node that starts on it attempts them at once. Their endpoint's receiver is
    // gone with the machine that wrote the fixture; it answers here now.
    let ok = Receiver::ok_http();
    move_endpoint(&pg, "acct_wait", &ok.url("/moved"));
    let mut node = node_migrating(&pg, &url).await;
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f'
                 AND conrelid IN ('deliveries'::regclass, 'attempts'::regclass)",
            "herald"
        ),
        "0"
    );

    // The pending ones are delivered, once each, on their second attempt; nothing that had
    // ended is attempted again.
    fixture_waiting_ones_are_delivered(&pg, "delivered:5,failed:2").await;
    assert_eq!(ok.count(), 2, "the two pending ones, once each");
    assert_eq!(pg.sql("SELECT count(*) FROM attempts", "herald"), "9");
    // A key version 1 stored still makes a duplicate.
    assert_fixture_key_is_a_duplicate(&node).await;
    let (status, st) = node.admin("GET", "/v1/status", None).await;
    assert_eq!(status, 200, "{st}");
    assert_eq!(st["queue"]["delivered"], 5, "{st}");
    assert_eq!(st["queue"]["failed"], 2, "{st}");
    node.sigterm().await;
}

/// A database herald's schema version 2 wrote (tests/fixtures/cluster2, see its README), with
/// an endpoint whose breaker that version opened, is migrated by a node that starts on it: the
/// breaker it stored holds and a probe closes it, its keys still dedupe, and its pending
/// deliveries are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_database_with_an_open_breaker_is_migrated_and_served() {
    let (pg, url) = fixture_database(2);
    assert_eq!(states(&pg), "delivered:3,failed:10,pending:2");
    assert_eq!(
        pg.sql(
            "SELECT string_agg(record->>'phase', ',' ORDER BY record->>'phase') FROM breakers",
            "herald"
        ),
        "closed,open",
        "acct_wait's two failures, acct_fail's ten"
    );
    // The receiver that failed is gone with the machine that wrote the fixture; this one
    // answers here now. The pending ones' retries fell due an hour after the fixture was
    // written (2026-12-04, 22:25Z): a node that starts on it attempts them at once.
    let ok = Receiver::ok_http();
    move_endpoint(&pg, "acct_fail", &ok.url("/acct_fail"));
    move_endpoint(&pg, "acct_wait", &ok.url("/acct_wait"));
    let mut node = node_migrating(&pg, &url).await;

    // The breaker version 2 opened is open here, as it stored it.
    let (_, eps) = node
        .admin("GET", "/v1/accounts/acct_fail/endpoints", None)
        .await;
    let failing = eps["items"][0]["id"]
        .as_str()
        .expect("an endpoint")
        .to_string();
    let (_, ep) = node
        .admin("GET", &format!("/v1/endpoints/{failing}"), None)
        .await;
    assert_eq!(ep["breaker"]["state"], "open", "{ep}");
    assert_eq!(ep["breaker"]["consecutive_failures"], 10, "{ep}");
    let (_, st) = node.admin("GET", "/v1/status", None).await;
    assert_eq!(
        st["open_breakers"][0]["endpoint_id"],
        failing.as_str(),
        "{st}"
    );
    // Its probe time passed long ago: the next event is the probe, which closes it.
    let (status, answer) = node
        .ingest(json!({"account_id": "acct_fail", "type": "order.created", "payload": {"n": 10}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    let probe = common::first_delivery(&answer);
    common::wait_until(
        Duration::from_secs(20),
        "the probe is delivered",
        || async {
            node.admin("GET", &format!("/v1/deliveries/{probe}"), None)
                .await
                .1["state"]
                == "delivered"
        },
    )
    .await;
    common::wait_until(Duration::from_secs(10), "the breaker closes", || async {
        node.admin("GET", &format!("/v1/endpoints/{failing}"), None)
            .await
            .1["breaker"]["state"]
            == "closed"
    })
    .await;
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM breakers WHERE record->>'phase' <> 'closed'",
            "herald"
        ),
        "0"
    );

    // The pending ones are delivered, once each, on their second attempt.
    fixture_waiting_ones_are_delivered(&pg, "delivered:6,failed:10").await;
    // Their successes ended acct_wait's run of failures too: no breaker is kept.
    assert_eq!(pg.sql("SELECT count(*) FROM breakers", "herald"), "0");
    assert_fixture_key_is_a_duplicate(&node).await;
    node.sigterm().await;
}

/// A database herald's schema version 3 wrote (tests/fixtures/cluster3, see its README), with
/// a rate-limited endpoint's bucket, a synced plan and an open breaker, is migrated by a node
/// that starts on it: the directory's version starts at 0, the plan and the breaker hold, the
/// rate-limited endpoint delivers, its keys still dedupe and its pending deliveries go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_database_with_a_rate_limit_and_a_plan_is_migrated_and_served() {
    let (pg, url) = fixture_database(3);
    assert_eq!(states(&pg), "delivered:3,failed:10,pending:2");
    assert_eq!(pg.sql("SELECT count(*) FROM rate_buckets", "herald"), "1");
    let ok = Receiver::ok_http();
    for account in ["acct_ok", "acct_fail", "acct_wait"] {
        move_endpoint(&pg, account, &ok.url(&format!("/{account}")));
    }
    // The waiting ones' retries fall due an hour after the fixture was written: due now, as
    // for an install that upgrades an hour or more later.
    pg.sql(
        "UPDATE deliveries SET due_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
             next_attempt_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
         WHERE state = 'pending'",
        "herald",
    );
    let mut node = node_migrating(&pg, &url).await;
    assert_eq!(
        pg.sql("SELECT version FROM directory_version", "herald"),
        "0"
    );
    let (_, account) = node.admin("GET", "/v1/accounts/acct_ok", None).await;
    assert_eq!(account["plan"], "basic", "{account}");
    // The two retries due at once are delivered first: then the node holds no lease.
    common::wait_until(
        Duration::from_secs(20),
        "the waiting retries were delivered",
        || async {
            let (_, st) = node.admin("GET", "/v1/status", None).await;
            st["queue"]["pending"] == 0 && st["in_flight"] == 0
        },
    )
    .await;
    let (_, st) = node.admin("GET", "/v1/status", None).await;
    assert_eq!(
        st["open_breakers"].as_array().map(Vec::len),
        Some(1),
        "{st}"
    );
    // The node and the cluster's nodes, as /v1/status shows them.
    let me = st["cluster"]["node"].as_str().expect("this node's id");
    let listed = &st["cluster"]["nodes"][0];
    assert_eq!(listed["id"], me, "{st}");
    assert_eq!(listed["leases"], 0, "{st}");
    for time in ["started_at", "seen_at"] {
        assert!(
            listed[time].as_str().is_some_and(|t| t.ends_with('Z')),
            "{st}"
        );
    }
    assert!(listed["name"].is_string(), "{st}");

    // The rate-limited endpoint takes from the bucket version 3 left, and delivers.
    let (status, answer) = node
        .ingest(json!({"account_id": "acct_ok", "type": "order.created", "payload": {"n": 3}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    let id = common::first_delivery(&answer);
    common::wait_until(
        Duration::from_secs(20),
        "the event is delivered",
        || async {
            node.admin("GET", &format!("/v1/deliveries/{id}"), None)
                .await
                .1["state"]
                == "delivered"
        },
    )
    .await;
    fixture_waiting_ones_are_delivered(&pg, "delivered:6,failed:10").await;
    assert_fixture_key_is_a_duplicate(&node).await;
    // A change bumps the directory's version.
    let (status, _) = node
        .admin("PUT", "/v1/accounts/acct_ok", Some(json!({"plan": null})))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        pg.sql("SELECT version FROM directory_version", "herald"),
        "1"
    );
    node.sigterm().await;
}

/// A server holding the database `tests/fixtures/cluster{version}` keeps (schema `version`),
/// and its URL.
fn fixture_database(version: i32) -> (Postgres, String) {
    fixture_database_in(&format!("cluster{version}"), version)
}

/// [`fixture_database`] from the fixture directory `dir`, whose schema version is `version`.
pub(crate) fn fixture_database_in(dir: &str, version: i32) -> (Postgres, String) {
    let pg = Postgres::start();
    let url = pg.database("herald");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{dir}/dump.sql"));
    pg.sql_file(&fixture, "herald");
    assert_eq!(
        pg.sql("SELECT max(version) FROM herald_schema", "herald"),
        version.to_string()
    );
    // Its idempotency keys were stored the day it was written, and their 24 hours pass for a
    // test run a day later: they are moved into their window, as an install that upgrades
    // within a day of storing them has them.
    pg.sql(
        "UPDATE idempotency_keys SET created_at =
             (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 3600000",
        "herald",
    );
    (pg, url)
}

/// A node on a fixture's database with the config its data needs (plain http and loopback
/// endpoints, its plan, retry policy and catalog; `extra` added), once it migrated the schema
/// to this herald's.
pub(crate) async fn node_on_fixture(pg: &Postgres, url: &str, extra: &str) -> common::Herald {
    let node = common::Herald::start(&format!(
        "[delivery]\nallow_http = true\nallow_private_networks = [\"127.0.0.0/8\"]\n\
         [endpoints]\nrequire_verification = false\n[retry_policies]\nslow = [\"1h\"]\n\
         [plans.basic]\nper_minute = 1000\n{extra}\
         [catalog.events.\"order.created\"]\ndescription = \"An order was created\"\n\
         [catalog.events.\"location.updated\"]\ndescription = \"A location changed\"\n\
         debounce = {{ window = \"1d\", key = \"loc\" }}\n\
         [storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {}\n",
        toml_string(url)
    ))
    .await;
    assert_eq!(
        pg.sql("SELECT max(version) FROM herald_schema", "herald"),
        SCHEMA_VERSION.to_string()
    );
    node
}

/// Points `account`'s endpoint at `url` in the database, before a node reads it.
fn move_endpoint(pg: &Postgres, account: &str, url: &str) {
    pg.sql(
        &format!(
            "UPDATE endpoints SET record = jsonb_set(record, '{{url}}', to_jsonb('{url}'::text))
             WHERE account_id = '{account}'"
        ),
        "herald",
    );
}

/// A node on a fixture's database (its config's retry policy `slow`): it migrates the schema to
/// this herald's as it starts.
async fn node_migrating(pg: &Postgres, url: &str) -> common::Herald {
    let node = common::Herald::start(&format!(
        "[delivery]\nallow_http = true\nallow_private_networks = [\"127.0.0.0/8\"]\n\
         [endpoints]\nrequire_verification = false\n[retry_policies]\nslow = [\"1h\"]\n\
         [storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {}\n",
        toml_string(url)
    ))
    .await;
    assert!(
        node.log_contains("migrated the cluster schema"),
        "{}",
        node.log_text()
    );
    assert_eq!(
        pg.sql("SELECT max(version) FROM herald_schema", "herald"),
        herald_store_postgres::SCHEMA_VERSION.to_string()
    );
    node
}

/// Waits until the fixture's deliveries are `states` (`state:n`, as [`states`] gives them);
/// `acct_wait`'s two were each delivered on their second attempt, after the fixture's 500.
async fn fixture_waiting_ones_are_delivered(pg: &Postgres, want: &str) {
    common::wait_until(
        Duration::from_secs(20),
        "the pending deliveries the fixture left are delivered",
        || async { states(pg) == want },
    )
    .await;
    assert_eq!(
        pg.sql(
            "SELECT string_agg(d.attempt_count || ':' || a.http_status, ',' ORDER BY a.number)
             FROM deliveries d JOIN attempts a ON a.delivery_id = d.id
             WHERE d.account_id = 'acct_wait'",
            "herald"
        ),
        "2:500,2:500,2:200,2:200"
    );
}

/// The fixtures' first event posted again with its idempotency key is a duplicate.
async fn assert_fixture_key_is_a_duplicate(node: &common::Herald) {
    let (status, again) = node
        .ingest(
            json!({"account_id": "acct_ok", "type": "order.created", "payload": {"n": 0},
                       "idempotency_key": "acct_ok-0"}),
        )
        .await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
}

/// The deliveries by state, `state:n` in the order of states.
fn states(pg: &Postgres) -> String {
    pg.sql(
        "SELECT string_agg(state || ':' || n, ',' ORDER BY state) FROM
             (SELECT state, count(*) AS n FROM deliveries GROUP BY state) s",
        "herald",
    )
}

/// Moves `account`'s endpoint to `url` and retries each of `deliveries` (pending ones) now;
/// returns once each is `delivered`.
async fn deliver_elsewhere(node: &common::Herald, account: &str, url: &str, deliveries: &[String]) {
    let (status, list) = node
        .admin("GET", &format!("/v1/accounts/{account}/endpoints"), None)
        .await;
    assert_eq!(status, 200, "{list}");
    let endpoint = list["items"][0]["id"].as_str().expect("an endpoint");
    let (status, changed) = node
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{endpoint}"),
            Some(json!({ "url": url })),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    for id in deliveries {
        let (status, answer) = node
            .admin("POST", &format!("/v1/deliveries/{id}/retry"), None)
            .await;
        assert_eq!(status, 202, "{answer}");
    }
    for id in deliveries {
        common::wait_until(
            Duration::from_secs(20),
            &format!("the pending delivery {id} is delivered"),
            || async {
                let (_, d) = node
                    .admin("GET", &format!("/v1/deliveries/{id}"), None)
                    .await;
                d["state"] == "delivered"
            },
        )
        .await;
    }
}

/// A database herald's schema version 6 wrote (tests/fixtures/cluster4, see its README: the
/// last before nodes recorded their schema version, alert mails were counted per hour, operator
/// events named their account and secrets left the endpoint's record) is migrated by a node
/// that starts on it: the endpoint keeps its filter and description, its secrets move to their
/// column and still sign and rotate, the account keeps its alert addresses, and a purge takes
/// the operator events about the account that version 6 wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_database_keeps_filters_alerts_and_secrets_and_purges_whole() {
    let (pg, url) = fixture_database_in("cluster4", 6);
    let recv = Receiver::ok_http();
    move_endpoint(&pg, "acct_ok", &recv.url("/ok"));
    let node = node_on_fixture(&pg, &url, "").await;
    let ok = "ep_01M94BEPJ9BZ57613YB1BPTNK7";
    assert_eq!(
        pg.sql(
            &format!(
                "SELECT jsonb_array_length(secrets), record ? 'secrets' FROM endpoints
                 WHERE id = '{ok}'"
            ),
            "herald"
        ),
        "2|f",
        "the rotated pair moved to its column"
    );
    let (status, ep) = node
        .admin("GET", &format!("/v1/endpoints/{ok}"), None)
        .await;
    assert_eq!(status, 200, "{ep}");
    assert_eq!(ep["filter"], json!({"payload": {"n": {"$gte": 0}}}), "{ep}");
    assert_eq!(ep["description"], json!("the good one"), "{ep}");
    let (_, account) = node.admin("GET", "/v1/accounts/acct_ok", None).await;
    assert_eq!(
        account["alert_emails"],
        json!(["ops@example.com", "dev@example.com"]),
        "{account}"
    );

    common::rotated_secret_signs(&node, ok, &recv).await;

    let about_fail = "SELECT count(*) FROM events WHERE account_id = '_operator'
         AND convert_from(payload, 'UTF8')::jsonb -> 'data' ->> 'account_id' = 'acct_fail'";
    assert_eq!(pg.sql(about_fail, "herald"), "11");
    let (status, purged) = node.admin("DELETE", "/v1/accounts/acct_fail", None).await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(pg.sql(about_fail, "herald"), "0");
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id
             WHERE e.account_id = '_operator'",
            "herald"
        ),
        "0"
    );
}

/// A database at schema version 10 (tests/fixtures/cluster5: the last version before what the
/// Svix-compatible API keeps) migrates to this herald's, and its accounts are applications of
/// that API: named by their ids, created when their first endpoint was; old attempts read with
/// no URL; a message sent through the door reaches the endpoint, its channels kept and its
/// attempt naming the URL; a repeated request key answers the first answer; an application's
/// delete is the account's purge, its application row and kept answers with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_10_database_serves_its_accounts_as_applications() {
    let (pg, url) = fixture_database_in("cluster5", 10);
    let recv = Receiver::ok_http();
    move_endpoint(&pg, "acct_ok", &recv.url("/ok"));
    let node = node_on_fixture(&pg, &url, "[svix]\nenabled = true\n").await;
    let ok = "ep_01M94M3JCKCDVZXX0ANET3NG57";
    let (_, ep) = node
        .admin("GET", &format!("/v1/endpoints/{ok}"), None)
        .await;
    let (status, app) = node.admin("GET", "/api/v1/app/acct_ok", None).await;
    assert_eq!(status, 200, "{app}");
    assert_eq!(
        (app["id"].as_str(), app["name"].as_str()),
        (Some("acct_ok"), Some("acct_ok"))
    );
    assert_eq!(
        app["createdAt"], ep["created_at"],
        "its first endpoint's time: {app}"
    );
    let (_, list) = node.admin("GET", "/api/v1/app", None).await;
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["acct_fail", "acct_ok", "acct_wait"], "{list}");
    let (_, attempts) = node
        .admin(
            "GET",
            &format!("/api/v1/app/acct_ok/attempt/endpoint/{ok}"),
            None,
        )
        .await;
    let attempts = attempts["data"].as_array().unwrap().clone();
    assert_eq!(attempts.len(), 5, "{attempts:?}");
    assert!(
        attempts.iter().all(|a| a["url"] == "" && a["status"] == 0),
        "{attempts:?}"
    );

    let send = |key: &'static str| {
        let node = &node;
        async move {
            node.call_raw(
                "POST",
                "/api/v1/app/acct_ok/msg",
                Some(common::herald::ADMIN_TOKEN),
                &[
                    ("content-type", "application/json"),
                    ("idempotency-key", key),
                ],
                br#"{"eventType": "order.created", "payload": {"n": 9}, "channels": ["eu"]}"#
                    .to_vec(),
            )
            .await
        }
    };
    let (status, _, first) = send("key-1").await;
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&first));
    let (status, _, again) = send("key-1").await;
    assert_eq!((status, &again), (202, &first), "the first answer, again");
    let msg: serde_json::Value = serde_json::from_slice(&first).unwrap();
    let got = recv.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(got[0].header("webhook-id"), msg["id"].as_str());
    assert_eq!(got.len(), 1, "one message for two requests with one key");
    let id = msg["id"].as_str().unwrap();
    assert_eq!(
        pg.sql(
            &format!(
                "SELECT labels -> 'channels' ->> 0 FROM events WHERE id = decode('{}', 'hex')",
                hex_of_event(id)
            ),
            "herald"
        ),
        "eu"
    );
    let path = format!("/api/v1/app/acct_ok/attempt/msg/{id}");
    common::wait_until(
        Duration::from_secs(20),
        "the message's attempt is listed",
        || async { node.admin("GET", &path, None).await.1["data"][0].is_object() },
    )
    .await;
    let attempt = node.admin("GET", &path, None).await.1["data"][0].clone();
    assert_eq!(attempt["url"], json!(recv.url("/ok")), "{attempt}");

    let (status, _) = node.admin("DELETE", "/api/v1/app/acct_ok", None).await;
    assert_eq!(status, 204);
    for table in ["applications", "api_answers", "events"] {
        assert_eq!(
            pg.sql(
                &format!("SELECT count(*) FROM {table} WHERE account_id = 'acct_ok'"),
                "herald"
            ),
            "0",
            "{table}"
        );
    }
}

/// An event id's 16 stored bytes, in hex.
fn hex_of_event(id: &str) -> String {
    let ulid = herald::ids::parse(herald::ids::EVENT, id).expect("an event id");
    format!("{ulid:032x}")
}

/// A database at schema version 11 (tests/fixtures/cluster6: the last version before endpoints'
/// last successes were kept) migrates to this herald's: its endpoints read no last success yet,
/// the next delivery's is kept in the database (the newest of every node's, with the minutes'
/// flush), and it goes with the endpoint's account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_11_database_keeps_last_successes_from_now_on() {
    let (pg, url) = fixture_database_in("cluster6", 11);
    let recv = Receiver::ok_http();
    move_endpoint(&pg, "acct_ok", &recv.url("/ok"));
    let node = node_on_fixture(&pg, &url, "").await;
    let ok = "ep_01M96CMBCT6CPX0MRD129Y4MJ6";
    let path = format!("/v1/endpoints/{ok}");
    let (status, ep) = node.admin("GET", &path, None).await;
    assert_eq!(status, 200, "{ep}");
    assert_eq!(
        ep["last_success_at"],
        json!(null),
        "version 11 kept none: {ep}"
    );
    let (status, answer) = node
        .ingest(json!({"account_id": "acct_ok", "type": "order.created", "payload": {"n": 9}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    recv.wait_for(1, Duration::from_secs(20)).await;
    let kept = format!("SELECT count(*) FROM endpoint_successes WHERE endpoint_id = '{ok}'");
    common::wait_until(
        Duration::from_secs(20),
        "the success is kept in the database",
        || async { pg.sql(&kept, "herald") == "1" },
    )
    .await;
    let (_, ep) = node.admin("GET", &path, None).await;
    assert!(ep["last_success_at"].is_string(), "{ep}");
    let (status, purged) = node.admin("DELETE", "/v1/accounts/acct_ok", None).await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(pg.sql(&kept, "herald"), "0", "gone with its account");
}

/// A database at schema version 12 (tests/fixtures/cluster7: the last version before attempts
/// kept their response's headers, and before hourly chart rows) migrates to this herald's: the
/// hours of its minutes are summed into `endpoint_hours`, its attempts read with no response
/// headers, and the next attempt's are kept in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_12_database_keeps_response_headers_from_now_on() {
    let (pg, url) = fixture_database_in("cluster7", 12);
    let dir = tempfile::tempdir().expect("temp dir");
    let out = herald_migrate(&node_config(dir.path(), &url, ""));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        pg.sql(
            "SELECT string_agg(endpoint_id || ' ' || hour || ' ' || counts::text || ' '
                               || latency_sum_ms || ' ' || latency_max_ms, '; '
                               ORDER BY endpoint_id) FROM endpoint_hours",
            "herald"
        ),
        "ep_01M96N3DXY68FDDGK5YHCM3NME 1796590800000 {\"delivered\": 11} 21 4; \
         ep_01M96N3DZ6B0VBKEQFE2WP7EDV 1796590800000 {\"delivered\": 5} 11 4; \
         ep_01M96N3E5C98F4ND2Z9WP59MPP 1796590800000 {\"http_error\": 10} 10 1; \
         ep_01M96N3EAF5TFQ9RQDW2172EF5 1796590800000 {\"http_error\": 2} 2 1",
        "the minutes' hours"
    );
    let recv = Receiver::http(common::behaviour(|_, _| {
        common::Reply::status(200).with_header("x-receiver-id", "rcv-7")
    }));
    move_endpoint(&pg, "acct_ok", &recv.url("/ok"));
    let node = node_on_fixture(&pg, &url, "").await;
    let (status, list) = node
        .admin("GET", "/v1/deliveries?account_id=acct_ok&limit=1", None)
        .await;
    assert_eq!(status, 200, "{list}");
    let old = list["items"][0]["id"]
        .as_str()
        .expect("a delivery")
        .to_string();
    let (_, d) = node
        .admin("GET", &format!("/v1/deliveries/{old}"), None)
        .await;
    assert_eq!(d["attempts"][0]["http_status"], json!(200), "{d}");
    assert_eq!(
        d["attempts"][0]["response_headers"],
        json!({}),
        "version 12 kept none: {d}"
    );
    let (status, answer) = node
        .ingest(json!({"account_id": "acct_ok", "type": "order.created", "payload": {"n": 9}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    let new = common::first_delivery(&answer);
    let path = format!("/v1/deliveries/{new}");
    common::wait_until(
        Duration::from_secs(20),
        "the attempt is recorded",
        || async { node.admin("GET", &path, None).await.1["state"] == "delivered" },
    )
    .await;
    let (_, d) = node.admin("GET", &path, None).await;
    assert_eq!(
        d["attempts"][0]["response_headers"]["x-receiver-id"], "rcv-7",
        "{d}"
    );
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM attempts WHERE response_headers::text LIKE '%rcv-7%'",
            "herald"
        ),
        "1",
        "kept in the database"
    );
}

/// `/v1/status`'s `endpoints_last_hour`, `attempts` and `attempts_by_minute` are every node's:
/// each node attempts one delivery to the endpoint and decides one event without an endpoint,
/// and either node's status counts both of each (from the minutes and hours the store keeps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_last_hour_counts_every_nodes_attempts() {
    let ca = TestCa::new();
    let ca_dir = tempfile::tempdir().expect("temp dir");
    let ca_file = ca.write_ca_file(ca_dir.path());
    let url = common::postgres::shared_database();
    let storage = format!(
        "backend = \"postgres\"\n[storage.postgres]\nurl = {}\n",
        toml_string(&url)
    );
    let toml = common::delivery_toml(&ca_file);
    let t0 = 1_796_212_800_000;
    let a = common::InProc::start_with_storage(&storage, &toml, t0).await;
    let b = common::InProc::start_with_storage(&storage, &toml, t0).await;
    let recv = Receiver::ok_https(&ca);
    let (status, ep) = a
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({"url": recv.url("/hook")})),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    let ep = ep["endpoint"]["id"].as_str().unwrap().to_string();
    for node in [&a, &b] {
        for account in ["acme", "lonely"] {
            let (status, answer) = node
                .ingest(json!({"account_id": account, "type": "t.x", "payload": {}}))
                .await;
            assert_eq!(status, 202, "{answer}");
        }
    }
    recv.wait_for(2, Duration::from_secs(20)).await;
    let both = json!({"delivered": 2, "no_endpoint": 2});
    for node in [&a, &b] {
        common::wait_until(
            Duration::from_secs(20),
            "every node's attempts are counted",
            || async {
                let (_, st) = node.admin("GET", "/v1/status", None).await;
                let by_minute = &st["attempts_by_minute"];
                st["endpoints_last_hour"]
                    == json!([{"endpoint_id": ep, "attempts": 2, "success_rate": 1.0}])
                    && st["attempts"]["last_hour"] == both
                    && st["attempts"]["last_day"] == both
                    && by_minute.as_array().map(Vec::len) == Some(1)
                    && by_minute[0]["attempts"] == both
            },
        )
        .await;
    }
}
