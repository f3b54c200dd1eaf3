//! Runs the real herald binary as a child process, black-box style.
//!
//! Each `Herald` owns a temp dir holding `herald.toml` and the storage dir, so
//! tests never share state and can crash/restart herald on the same data
//! (durability tests). Output of both streams is captured line by line (ANSI
//! codes stripped) for assertions and for panic messages; each line is also
//! echoed with `eprintln!`, which the test runner shows only for failing tests.
//!
//! `start`, `restart` and `sigterm` are async: they wait with Tokio timers so
//! that receivers running on the same runtime keep answering meanwhile (e.g.
//! in-flight deliveries during a graceful shutdown).

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Notify;
use tokio::time::Instant;

pub const ADMIN_TOKEN: &str = "test-admin-token";
pub const INGEST_TOKEN: &str = "test-ingest-token";

/// How long herald gets to log `herald listening`, and to exit after SIGTERM.
const PROCESS_DEADLINE: Duration = Duration::from_secs(20);
/// Upper bound for one API call, so a wedged server fails the test clearly.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Path of the herald binary that cargo built for this test crate.
pub fn herald_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_herald"))
}

pub type ApiClient = Client<HttpConnector, Full<Bytes>>;

/// Wraps herald's command line (`[herald, "serve", "--config", PATH]`) in another command: a
/// resource limit, a mount namespace.
pub type Wrap = Arc<dyn Fn(&[String]) -> Command + Send + Sync>;

/// How a test wants herald launched, beyond the defaults.
#[derive(Default, Clone)]
pub struct Launch {
    /// Where the data lives (default: `data/` in the herald's temp dir).
    pub storage: Option<PathBuf>,
    /// How the process is started (default: the binary itself).
    pub wrap: Option<Wrap>,
}

/// A running (or stopped) herald process. Killed when dropped.
pub struct Herald {
    dir: tempfile::TempDir,
    config_path: PathBuf,
    storage: PathBuf,
    wrap: Option<Wrap>,
    child: Option<Child>,
    readers: Vec<JoinHandle<()>>,
    addr: SocketAddr,
    logs: Arc<Mutex<Vec<String>>>,
    log_added: Arc<Notify>,
    client: ApiClient,
    runs: usize,
}

impl Drop for Herald {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Herald {
    /// Writes a fresh config (the standard tables, then `extra_toml` appended
    /// verbatim) into a new temp dir and starts herald on it. Async; must run
    /// inside a Tokio runtime. Panics (printing the log) if herald exits or
    /// does not log `herald listening` within 20 s.
    pub async fn start(extra_toml: &str) -> Herald {
        Herald::start_with(extra_toml, Launch::default()).await
    }

    /// [`Herald::start`], launched as `launch` says.
    pub async fn start_with(extra_toml: &str, launch: Launch) -> Herald {
        let dir = tempfile::Builder::new()
            .prefix("herald-test-")
            .tempdir()
            .expect("create temp dir");
        let config_path = dir.path().join("herald.toml");
        let storage = launch.storage.unwrap_or_else(|| dir.path().join("data"));
        // A `[server]` table in `extra_toml` adds its keys to the harness's own.
        let (server_keys, extra_toml) = super::split_table(extra_toml, "server");
        let (storage_keys, extra_toml) = super::split_table(&extra_toml, "storage");
        let config = format!(
            "[server]\n\
             listen = \"127.0.0.1:0\"\n\
             admin_tokens = [\"{ADMIN_TOKEN}\"]\n\
             ingest_tokens = [\"{INGEST_TOKEN}\"]\n\
             {server_keys}\
             {}\
             [log]\n\
             format = \"text\"\n\
             level = \"info\"\n\
             {}{extra_toml}\n",
            super::storage_table(&storage, &storage_keys),
            super::endpoints_default(&extra_toml),
        );
        std::fs::write(&config_path, config).expect("write herald.toml");
        let mut herald = Herald {
            dir,
            config_path,
            storage,
            wrap: launch.wrap,
            child: None,
            readers: Vec::new(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            logs: Arc::new(Mutex::new(Vec::new())),
            log_added: Arc::new(Notify::new()),
            client: new_client(),
            runs: 0,
        };
        herald.launch().await;
        herald
    }

    /// `http://IP:PORT` of the API, as herald logged it on its latest start.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// All output lines so far (ANSI codes stripped), across restarts; each
    /// start is preceded by a `=== harness: herald start #N ===` marker line.
    /// stdout and stderr are read by separate threads, so lines are ordered
    /// per stream only, and a line may land a moment after the event that
    /// caused it: use [`Herald::wait_for_log`] rather than checking at once.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// Whether any log line so far contains `needle`.
    pub fn log_contains(&self, needle: &str) -> bool {
        self.logs.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    /// Waits for a log line containing `needle` (any run) and returns it;
    /// panics with the log after `deadline`.
    pub async fn wait_for_log(&self, needle: &str, deadline: Duration) -> String {
        let end = Instant::now() + deadline;
        loop {
            let added = self.log_added.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            if let Some(line) = self.logs().into_iter().find(|l| l.contains(needle)) {
                return line;
            }
            if tokio::time::timeout_at(end, added).await.is_err() {
                panic!(
                    "no herald log line containing {needle:?} within {deadline:?}; log:\n{}",
                    self.log_text()
                );
            }
        }
    }

    /// The temp dir holding `herald.toml` and the storage dir `data/`.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// The storage dir (`storage.path` in the config): `data_dir()/data` unless the test chose
    /// another.
    pub fn storage_path(&self) -> PathBuf {
        self.storage.clone()
    }

    /// Launches the next start ([`Herald::restart`]) this way (`None`: the binary itself).
    pub fn set_wrap(&mut self, wrap: Option<Wrap>) {
        self.wrap = wrap;
    }

    /// Its exit status if it has exited (readers joined, so the log is complete).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().expect("try_wait herald")?;
        self.child = None;
        self.join_readers();
        Some(status)
    }

    /// Its exit status once it exits within `limit`; `None` if it is still running then.
    pub async fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= end {
                return None;
            }
            // Polling interval while waiting for the process to end.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn config_path(&self) -> PathBuf {
        self.config_path.clone()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL (no chance to clean up), then reap. Output readers are joined,
    /// so `logs()` is complete afterwards. No-op if herald is not running.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            child.wait().expect("wait for killed herald");
            self.join_readers();
        }
    }

    /// Sends SIGTERM (`kill -TERM <pid>`; no libc crate here) and waits up to
    /// 20 s for a graceful exit, then returns its status; panics with the log
    /// (after a SIGKILL) if herald does not exit in time.
    pub async fn sigterm(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("sigterm: herald is not running");
        let pid = child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        let sent = match sent {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Command::new("sh")
                .args(["-c", "kill -TERM \"$1\"", "sh", &pid])
                .status(),
            other => other,
        };
        assert!(
            sent.as_ref().is_ok_and(|s| s.success()),
            "sending SIGTERM to herald (pid {pid}) failed: {sent:?}"
        );
        let end = Instant::now() + PROCESS_DEADLINE;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait herald") {
                self.join_readers();
                return status;
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let _ = child.wait();
                self.join_readers();
                panic!(
                    "herald did not exit within {PROCESS_DEADLINE:?} of SIGTERM; log:\n{}",
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts herald again on the same config and data dir (SIGKILLing it
    /// first if it is still running). The port may change; `base_url()`
    /// follows it, and the API client's connection pool is renewed.
    pub async fn restart(&mut self) {
        self.kill9();
        self.client = new_client();
        self.launch().await;
    }

    /// Spawns herald and waits for its `herald listening addr=...` line.
    async fn launch(&mut self) {
        self.runs += 1;
        let first_line = {
            let mut logs = self.logs.lock().unwrap();
            logs.push(format!("=== harness: herald start #{} ===", self.runs));
            logs.len()
        };
        let argv = [
            herald_bin().display().to_string(),
            "serve".into(),
            "--config".into(),
            self.config_path.display().to_string(),
        ];
        let mut cmd = match &self.wrap {
            Some(wrap) => wrap(&argv),
            None => {
                let mut cmd = Command::new(&argv[0]);
                cmd.args(&argv[1..]);
                cmd
            }
        };
        let mut child = cmd
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        self.readers = vec![
            self.spawn_reader(stdout, "stdout"),
            self.spawn_reader(stderr, "stderr"),
        ];
        self.child = Some(child);

        let end = Instant::now() + PROCESS_DEADLINE;
        let log_added = self.log_added.clone();
        loop {
            let added = log_added.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            let line = self.logs.lock().unwrap()[first_line..]
                .iter()
                .find(|l| l.contains("herald listening"))
                .cloned();
            if let Some(line) = line {
                match parse_listen_addr(&line) {
                    Some(addr) => {
                        self.addr = addr;
                        return;
                    }
                    None => self.fail_start(&format!("no addr=IP:PORT in {line:?}")),
                }
            }
            let exited = self.child.as_mut().unwrap().try_wait().expect("try_wait");
            if let Some(status) = exited {
                self.child = None;
                self.join_readers();
                self.fail_start(&format!("herald exited ({status}) before listening"));
            }
            if Instant::now() >= end {
                self.fail_start(&format!(
                    "herald did not log 'herald listening' within {PROCESS_DEADLINE:?}"
                ));
            }
            // Wake on new output, or every 100 ms to notice an exit.
            let _ = tokio::time::timeout(Duration::from_millis(100), added).await;
        }
    }

    fn fail_start(&mut self, why: &str) -> ! {
        self.kill9();
        panic!(
            "{why}\nconfig {}:\n{}\nlog:\n{}",
            self.config_path.display(),
            std::fs::read_to_string(&self.config_path).unwrap_or_default(),
            self.log_text()
        );
    }

    fn spawn_reader(&self, stream: impl Read + Send + 'static, name: &str) -> JoinHandle<()> {
        let logs = self.logs.clone();
        let added = self.log_added.clone();
        let tag = format!("[herald#{} {name}]", self.runs);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let raw = String::from_utf8_lossy(&buf);
                let line = strip_ansi(raw.trim_end_matches(['\r', '\n']));
                eprintln!("{tag} {line}");
                logs.lock().unwrap().push(line);
                added.notify_waiters();
            }
        })
    }

    /// Joins the output readers; they end at EOF once the process is gone.
    fn join_readers(&mut self) {
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }

    /// The whole log as one string, for panic messages.
    pub fn log_text(&self) -> String {
        self.logs().join("\n")
    }
}

/// API client: one keep-alive connection pool per `Herald` (per run).
impl Herald {
    /// Calls the API with an optional JSON body (sent with content-type
    /// application/json) and `Authorization: Bearer <token>` if given.
    /// Returns the status and the answer parsed as JSON (`Value::Null` if
    /// empty or not JSON; use [`Herald::call_raw`] for the raw bytes).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let (headers, bytes): (&[(&str, &str)], Vec<u8>) = match body {
            Some(v) => (
                &[("content-type", "application/json")],
                serde_json::to_vec(&v).expect("serialize JSON body"),
            ),
            None => (&[], Vec::new()),
        };
        let (status, _, answer) = self.call_raw(method, path, token, headers, bytes).await;
        let json = serde_json::from_slice(&answer).unwrap_or(serde_json::Value::Null);
        (status, json)
    }

    /// Raw API call: extra request headers, raw body; returns status,
    /// response headers (lower-case names) and body. Panics (with the herald
    /// log) on a transport error or after 30 s; see [`Herald::try_call_raw`].
    pub async fn call_raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        match self.try_call_raw(method, path, token, headers, body).await {
            Ok(answer) => answer,
            Err(e) => panic!(
                "{method} {path} failed: {e:#}\nherald log:\n{}",
                self.log_text()
            ),
        }
    }

    /// Like [`Herald::call_raw`] but returns transport errors (connection
    /// refused, timeout) instead of panicking.
    pub async fn try_call_raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> anyhow::Result<(u16, Vec<(String, String)>, Vec<u8>)> {
        http_call(
            &self.client,
            &self.base_url(),
            method,
            path,
            token,
            headers,
            body,
        )
        .await
    }

    /// [`Herald::call`] with the admin token.
    pub async fn admin(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        self.call(method, path, Some(ADMIN_TOKEN), body).await
    }

    /// `POST /v1/events` with the ingest token.
    pub async fn ingest(&self, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.call("POST", "/v1/events", Some(INGEST_TOKEN), Some(body))
            .await
    }
}

/// herald did not answer a request (it was killed, or is gone).
#[derive(Debug)]
pub struct Gone;

/// Posts one event (`body`, an ingest request) with the ingest token, as a producer does: the
/// event id if herald acknowledged it (`202`), `Ok(None)` for any other answer (not an
/// acknowledgement, e.g. `503` while stopping), [`Gone`] if herald did not answer.
pub async fn post_event(
    client: &ApiClient,
    base: &str,
    body: &serde_json::Value,
) -> Result<Option<String>, Gone> {
    let req = hyper::Request::post(format!("{base}/v1/events"))
        .header("authorization", format!("Bearer {INGEST_TOKEN}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let resp = client.request(req).await.map_err(|_| Gone)?;
    let status = resp.status().as_u16();
    let answer = resp.into_body().collect().await.map_err(|_| Gone)?;
    if status != 202 {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_slice(&answer.to_bytes()).expect("202 is JSON");
    Ok(Some(v["event_id"].as_str().expect("event_id").to_string()))
}

/// Starts `count` [`produce`] tasks (producers `0..count`) against `base`.
pub fn spawn_producers(
    base: &str,
    what: (&'static str, &'static str),
    count: usize,
    stop: &Arc<std::sync::atomic::AtomicBool>,
    acked: &Arc<Mutex<Vec<String>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..count)
        .map(|p| {
            tokio::spawn(produce(
                base.to_string(),
                what,
                p,
                stop.clone(),
                acked.clone(),
            ))
        })
        .collect()
}

/// A producer of the crash tests: posts events of `account` and `event_type` (payload
/// `{"p": producer, "n": n}`, each with an idempotency key of its own) until `stop` is set or
/// herald goes away, and pushes every event id acknowledged with `202` to `acked`. A `503` or a
/// connection error is not an acknowledgement.
pub async fn produce(
    base: String,
    (account, event_type): (&'static str, &'static str),
    producer: usize,
    stop: Arc<std::sync::atomic::AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
) {
    let client = new_client();
    let run: u64 = rand::random();
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        n += 1;
        let body = serde_json::json!({"account_id": account, "type": event_type,
                                      "payload": {"p": producer, "n": n},
                                      "idempotency_key": format!("{run:016x}-{producer}-{n}")});
        match post_event(&client, &base, &body).await {
            Ok(Some(id)) => acked.lock().unwrap().push(id),
            Ok(None) => continue, // not an acknowledgement (e.g. 503 while stopping)
            Err(Gone) => return,  // herald was killed: this request was never acknowledged
        }
    }
}

/// One API request over `client` to `base` (`http://IP:PORT`), with a deadline.
pub async fn http_call(
    client: &ApiClient,
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> anyhow::Result<(u16, Vec<(String, String)>, Vec<u8>)> {
    let mut req = hyper::Request::builder()
        .method(hyper::Method::from_bytes(method.as_bytes())?)
        .uri(format!("{base}{path}"));
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req.body(Full::new(Bytes::from(body)))?;
    let exchange = async {
        let resp = client.request(req).await?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (k.as_str().to_ascii_lowercase(), v)
            })
            .collect();
        let body = resp.into_body().collect().await?.to_bytes().to_vec();
        anyhow::Ok((status, headers, body))
    };
    tokio::time::timeout(CALL_TIMEOUT, exchange)
        .await
        .with_context(|| format!("no answer within {CALL_TIMEOUT:?}"))?
}

pub fn new_client() -> ApiClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Removes ANSI escape sequences (CSI `ESC [ ... final`, and two-byte `ESC x`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        if chars.next() == Some('[') {
            // Parameters/intermediates until a final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// Finds an `addr=IP:PORT` token (quotes, `http://` and trailing punctuation
/// tolerated) in a log line.
pub fn parse_listen_addr(line: &str) -> Option<SocketAddr> {
    let line = strip_ansi(line);
    line.split_whitespace().find_map(|token| {
        let value = token.strip_prefix("addr=")?;
        let value = value.trim_start_matches(['"', '\'']);
        let value = value.strip_prefix("http://").unwrap_or(value);
        let value = value.trim_end_matches(|c: char| !c.is_ascii_digit());
        value.parse().ok()
    })
}
