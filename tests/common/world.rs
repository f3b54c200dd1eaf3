//! A herald that trusts a test CA and may deliver to loopback, plus the API steps most tests
//! share (create an endpoint, ingest, wait for a delivery to settle).

use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;

use super::api::HeraldApi;
use super::inproc::InProc;
use super::{delivery_toml, wait_until, Herald, TestCa};

/// A herald (the real process by default, or [`InProc`] on a manual clock) with a test CA.
pub struct World<S = Herald> {
    pub ca: TestCa,
    pub herald: S,
    _ca_dir: TempDir,
}

fn ca_and_config(delivery_keys: &str, tables: &str) -> (TestCa, TempDir, String) {
    config_for(TestCa::new(), delivery_keys, tables)
}

/// The config of a herald that trusts `ca` (a CA the test also gave another server, such as
/// its SMTP server).
fn config_for(ca: TestCa, delivery_keys: &str, tables: &str) -> (TestCa, TempDir, String) {
    let ca_dir = tempfile::tempdir().expect("temp dir");
    let ca_file = ca.write_ca_file(ca_dir.path());
    let extra = format!("{}{delivery_keys}\n{tables}", delivery_toml(&ca_file));
    (ca, ca_dir, extra)
}

impl World<Herald> {
    /// `delivery_keys` go into the `[delivery]` table; `tables` are appended after it.
    pub async fn start(delivery_keys: &str, tables: &str) -> World {
        let (ca, ca_dir, extra) = ca_and_config(delivery_keys, tables);
        World {
            ca,
            herald: Herald::start(&extra).await,
            _ca_dir: ca_dir,
        }
    }
}

impl World<Herald> {
    /// Like [`World::start`], launched as `launch` says (its environment, its data).
    pub async fn start_launched(
        delivery_keys: &str,
        tables: &str,
        launch: super::herald::Launch,
    ) -> World {
        let (ca, ca_dir, extra) = ca_and_config(delivery_keys, tables);
        World {
            ca,
            herald: Herald::start_with(&extra, launch).await,
            _ca_dir: ca_dir,
        }
    }

    /// Like [`World::start`], trusting `ca` (made by the test for its other servers too).
    pub async fn start_with_ca(ca: TestCa, delivery_keys: &str, tables: &str) -> World {
        let (ca, ca_dir, extra) = config_for(ca, delivery_keys, tables);
        World {
            ca,
            herald: Herald::start(&extra).await,
            _ca_dir: ca_dir,
        }
    }
}

impl World<InProc> {
    /// Like [`World::start_manual`], trusting `ca` (made by the test for its other servers
    /// too).
    pub async fn start_manual_with_ca(
        ca: TestCa,
        delivery_keys: &str,
        tables: &str,
        now_ms: i64,
    ) -> World<InProc> {
        let (ca, ca_dir, extra) = config_for(ca, delivery_keys, tables);
        World {
            ca,
            herald: InProc::start_with_storage("", &extra, now_ms).await,
            _ca_dir: ca_dir,
        }
    }

    /// Like [`World::start`], in this process, with a manual clock set to `now_ms`.
    pub async fn start_manual(delivery_keys: &str, tables: &str, now_ms: i64) -> World<InProc> {
        World::start_manual_with_storage("", delivery_keys, tables, now_ms).await
    }

    /// Like [`World::start_manual`]; `storage_keys` are extra lines of the `[storage]` table.
    pub async fn start_manual_with_storage(
        storage_keys: &str,
        delivery_keys: &str,
        tables: &str,
        now_ms: i64,
    ) -> World<InProc> {
        let (ca, ca_dir, extra) = ca_and_config(delivery_keys, tables);
        World {
            ca,
            herald: InProc::start_with_storage(storage_keys, &extra, now_ms).await,
            _ca_dir: ca_dir,
        }
    }
}

impl<S: HeraldApi> World<S> {
    /// Creates an endpoint; returns its id and secret. `extra` adds fields to the request.
    pub async fn endpoint(&self, account: &str, url: &str, extra: Value) -> (String, String) {
        let mut body = json!({ "url": url });
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
            b.extend(e);
        }
        let (status, answer) = self
            .herald
            .admin(
                "POST",
                &format!("/v1/accounts/{account}/endpoints"),
                Some(body),
            )
            .await;
        assert_eq!(status, 201, "create endpoint: {answer}");
        (
            answer["endpoint"]["id"]
                .as_str()
                .expect("endpoint id")
                .to_string(),
            answer["secret"].as_str().expect("secret").to_string(),
        )
    }

    /// Ingests one event; returns the whole answer (asserting 202).
    pub async fn ingest(&self, account: &str, event_type: &str, payload: Value) -> Value {
        let (status, answer) = self
            .herald
            .ingest(json!({"account_id": account, "type": event_type, "payload": payload}))
            .await;
        assert_eq!(status, 202, "ingest: {answer}");
        answer
    }

    pub async fn delivery(&self, id: &str) -> Value {
        let (status, d) = self
            .herald
            .admin("GET", &format!("/v1/deliveries/{id}"), None)
            .await;
        assert_eq!(status, 200, "get delivery {id}: {d}");
        d
    }

    /// Polls the delivery until its state is `state`; returns it with its attempts.
    pub async fn wait_state(&self, id: &str, state: &str, deadline: Duration) -> Value {
        let what = format!("delivery {id} is {state}");
        wait_until(deadline, &what, || async {
            self.delivery(id).await["state"] == state
        })
        .await;
        self.delivery(id).await
    }
}

/// The first delivery id of an ingest answer.
pub fn first_delivery(answer: &Value) -> String {
    answer["deliveries"][0]["delivery_id"]
        .as_str()
        .expect("delivery id")
        .to_string()
}
