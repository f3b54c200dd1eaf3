//! herald running inside the test process on a [`ManualClock`], for behaviour that depends on
//! wall time (windows, schedules): the test moves the clock instead of sleeping. Same config,
//! tokens and API as the process harness; the store and engine are reachable for fault
//! injection.

use std::path::PathBuf;
use std::sync::Arc;

use herald::app::Running;
use herald::clock::ManualClock;
use herald::config::Config;
use herald::shutdown::{self, Trigger};
use tempfile::TempDir;

use super::api::HeraldApi;
use super::herald::{http_call, new_client, ApiClient, ADMIN_TOKEN, INGEST_TOKEN};

pub struct InProc {
    pub clock: Arc<ManualClock>,
    config: String,
    dir: TempDir,
    running: Option<(Running, Trigger)>,
    base: String,
    client: ApiClient,
}

impl InProc {
    /// Starts herald on a fresh temp data dir with the clock at `now_ms`; `extra_toml` is
    /// appended to the harness's standard config.
    pub async fn start(extra_toml: &str, now_ms: i64) -> InProc {
        InProc::start_with_storage("", extra_toml, now_ms).await
    }

    /// Like [`InProc::start`]; `storage_keys` are extra lines of the `[storage]` table.
    pub async fn start_with_storage(storage_keys: &str, extra_toml: &str, now_ms: i64) -> InProc {
        let dir = tempfile::Builder::new()
            .prefix("herald-inproc-")
            .tempdir()
            .expect("temp dir");
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_tokens = [\"{ADMIN_TOKEN}\"]\n\
             ingest_tokens = [\"{INGEST_TOKEN}\"]\n{}\n{}{extra_toml}\n",
            super::storage_table(&dir.path().join("data"), storage_keys),
            super::endpoints_default(extra_toml),
        );
        let mut p = InProc {
            clock: Arc::new(ManualClock::new(now_ms)),
            config,
            dir,
            running: None,
            base: String::new(),
            client: new_client(),
        };
        p.launch().await;
        p
    }

    async fn launch(&mut self) {
        let config = Config::from_toml(&self.config).expect("test config parses");
        config.validate().expect("test config is valid");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (trigger, signal) = shutdown::channel();
        let running = herald::app::start(config, listener, self.clock.clone(), signal)
            .await
            .expect("herald starts");
        self.base = format!("http://{}", running.addr);
        self.client = new_client();
        self.running = Some((running, trigger));
    }

    pub fn running(&self) -> &Running {
        &self.running.as_ref().expect("herald is running").0
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Graceful stop (as on SIGTERM): waits until herald has flushed and stopped.
    pub async fn stop(&mut self) {
        if let Some((running, trigger)) = self.running.take() {
            trigger.fire();
            let _ = running.wait().await;
        }
    }

    /// Stops and starts again on the same data dir and clock.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.launch().await;
    }
}

impl HeraldApi for InProc {
    async fn call_raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        http_call(&self.client, &self.base, method, path, token, headers, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path} failed: {e:#}"))
    }
}
