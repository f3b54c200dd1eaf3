//! One herald process per phase: a temp config and data dir, the `addr=` of its listening line,
//! the admin calls the phases make, and what /proc says about it (peak RSS, CPU time).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde_json::{json, Value};

use crate::drive::{new_client, ApiClient};

pub const ADMIN_TOKEN: &str = "bench-admin-token-0001";
pub const INGEST_TOKEN: &str = "bench-ingest-token-001";

/// Log lines kept to explain a failed start.
const TAIL_LINES: usize = 40;

/// The herald binary: the one cargo built for this bench target, else `target/release/herald`.
pub fn binary() -> Result<PathBuf> {
    if let Some(path) = option_env!("CARGO_BIN_EXE_herald") {
        return Ok(PathBuf::from(path));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/herald");
    if path.exists() {
        Ok(path)
    } else {
        bail!(
            "{} does not exist: run `cargo build --release` first",
            path.display()
        )
    }
}

/// A running herald, killed when dropped; its temp dir (config and data) goes with it.
pub struct Herald {
    child: Option<Child>,
    pub pid: u32,
    pub addr: SocketAddr,
    bin: PathBuf,
    config: PathBuf,
    data: PathBuf,
    tail: Arc<Mutex<VecDeque<String>>>,
    client: ApiClient,
    _dir: Dir,
}

/// Where a herald's config and data live: a temp dir (removed with it), or a kept one.
pub enum Dir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl Dir {
    pub fn path(&self) -> &Path {
        match self {
            Dir::Temp(t) => t.path(),
            Dir::Kept(p) => p,
        }
    }

    /// The data dir inside it.
    pub fn data(&self) -> PathBuf {
        self.path().join("data")
    }
}

impl Drop for Herald {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A fresh temp dir for one herald: `data/` in it is the data dir.
pub fn new_dir() -> Result<Dir> {
    let t = tempfile::Builder::new()
        .prefix("herald-bench-")
        .tempdir()
        .context("creating a temp dir")?;
    Ok(Dir::Temp(t))
}

impl Herald {
    /// Writes the bench config into a fresh temp dir and starts `herald serve` on it.
    pub async fn start(bin: &Path, storage: &str) -> Result<Herald> {
        Herald::start_in(bin, new_dir()?, storage).await
    }

    /// Starts herald on `dir` (whose `data/` may hold a store already); `storage` adds lines to
    /// the config's `[storage]` table.
    pub async fn start_in(bin: &Path, dir: Dir, storage: &str) -> Result<Herald> {
        let data = dir.data();
        let config = dir.path().join("herald.toml");
        // `warn` for everything but the one info line that carries the address.
        let toml = format!(
            "[server]\n\
             listen = \"127.0.0.1:0\"\n\
             admin_tokens = [\"{ADMIN_TOKEN}\"]\n\
             ingest_tokens = [\"{INGEST_TOKEN}\"]\n\
             max_body_bytes = 8388608\n\
             [storage]\n\
             path = {data:?}\n\
             {storage}\n\
             [delivery]\n\
             allow_http = true\n\
             allow_private_networks = [\"127.0.0.0/8\"]\n\
             [endpoints]\n\
             require_verification = false\n\
             [svix]\n\
             enabled = true\n\
             [log]\n\
             level = \"warn,herald::app=info\"\n",
            data = data.display().to_string(),
        );
        std::fs::write(&config, toml).context("writing herald.toml")?;
        let mut herald = Herald {
            child: None,
            pid: 0,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            bin: bin.to_path_buf(),
            config,
            data,
            tail: Arc::new(Mutex::new(VecDeque::new())),
            client: new_client(4),
            _dir: dir,
        };
        herald.spawn().await?;
        Ok(herald)
    }

    /// Its config file.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// Starts the process and waits for its `herald listening` line.
    async fn spawn(&mut self) -> Result<()> {
        let mut child = Command::new(&self.bin)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        let lines = self.tail.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains("herald listening") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(line.clone());
                    }
                }
                let mut lines = lines.lock().unwrap();
                if lines.len() == TAIL_LINES {
                    lines.pop_front();
                }
                lines.push_back(line);
            }
        });
        self.pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(line) = rx.try_recv() {
                self.addr =
                    parse_addr(&line).ok_or_else(|| anyhow!("no addr=IP:PORT in {line:?}"))?;
                return Ok(());
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait()? {
                bail!(
                    "herald exited ({status}) before listening:\n{}",
                    self.tail()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "herald did not log `herald listening` in 60 s:\n{}",
                    self.tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops herald (`graceful`: SIGTERM, else SIGKILL) and starts it again on the same data;
    /// returns how long after the new process started `/healthz` first answered `200`.
    pub async fn restart(&mut self, graceful: bool) -> Result<Duration> {
        self.stop(graceful).await?;
        let started = Instant::now();
        self.spawn().await?;
        loop {
            let req = Request::builder()
                .uri(format!("{}/healthz", self.base_url()))
                .body(Full::new(Bytes::new()))?;
            if let Ok(resp) = self.client.request(req).await {
                if resp.status() == 200 {
                    return Ok(started.elapsed());
                }
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!("/healthz did not answer 200 within 60 s of the restart");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// `GET /v1/status`.
    pub async fn status(&self) -> Result<Value> {
        let (code, v) = self.admin("GET", "/v1/status", Value::Null).await?;
        if code != 200 {
            bail!("/v1/status answered {code}: {v}");
        }
        Ok(v)
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The last lines herald logged.
    pub fn tail(&self) -> String {
        let lines = self.tail.lock().unwrap();
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// An admin API call with a JSON body; the answer's status and JSON.
    pub async fn admin(&self, method: &str, path: &str, body: Value) -> Result<(u16, Value)> {
        let req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base_url()))
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(&body)?)))?;
        let resp = self.client.request(req).await?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await?.to_bytes();
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    /// Creates an endpoint of `account` that gets one attempt per delivery; its id.
    pub async fn create_endpoint(&self, account: &str, url: &str) -> Result<String> {
        self.create_endpoint_with(account, url, json!({})).await
    }

    /// Like [`Self::create_endpoint`], with more fields (`extra`, an object).
    pub async fn create_endpoint_with(
        &self,
        account: &str,
        url: &str,
        extra: serde_json::Value,
    ) -> Result<String> {
        let path = format!("/v1/accounts/{account}/endpoints");
        let mut body = json!({"url": url, "retry_policy": "none"});
        if let (Some(b), serde_json::Value::Object(e)) = (body.as_object_mut(), extra) {
            b.extend(e);
        }
        let (status, answer) = self.admin("POST", &path, body).await?;
        if status != 201 {
            bail!("creating an endpoint: {status} {answer}");
        }
        Ok(answer["endpoint"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Group commits so far from `/metrics`: (commits, events, seconds in flush + fsync), if this
    /// herald exposes them.
    pub async fn commits(&self) -> Option<(f64, f64, f64)> {
        let req = Request::builder()
            .uri(format!("{}/metrics", self.base_url()))
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .body(Full::new(Bytes::new()))
            .ok()?;
        let resp = self.client.request(req).await.ok()?;
        let text = resp.into_body().collect().await.ok()?.to_bytes();
        let text = String::from_utf8_lossy(&text);
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        };
        Some((
            value("herald_commit_batch_size_count")?,
            value("herald_commit_batch_size_sum")?,
            value("herald_fsync_duration_seconds_sum")?,
        ))
    }

    /// Resident set size now (VmRSS), in bytes.
    pub fn rss(&self) -> Option<u64> {
        proc_status_kib(self.pid, "VmRSS:").map(|k| k * 1024)
    }

    /// Peak resident set size so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        proc_status_kib(self.pid, "VmHWM:").map(|k| k * 1024)
    }

    /// CPU time used so far (user + system), in seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        proc_cpu_seconds(&format!("/proc/{}/stat", self.pid))
    }

    /// Stops herald: SIGTERM and up to 15 s for it to flush and exit (then SIGKILL), or SIGKILL
    /// at once when `graceful` is false.
    pub async fn stop(&mut self, graceful: bool) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let started = Instant::now();
        let result = self.stop_child(&mut child, graceful).await;
        eprintln!(
            "    herald stopped ({}) in {:.1} s",
            if graceful { "SIGTERM" } else { "SIGKILL" },
            started.elapsed().as_secs_f64()
        );
        result
    }

    async fn stop_child(&self, child: &mut Child, graceful: bool) -> Result<()> {
        if graceful {
            let sent = Command::new("kill")
                .args(["-TERM", &self.pid.to_string()])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            let deadline = Instant::now() + Duration::from_secs(15);
            while sent && Instant::now() < deadline {
                if child.try_wait()?.is_some() {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            eprintln!("  herald did not exit within 15 s of SIGTERM; killing it");
        }
        let _ = child.kill();
        child.wait()?;
        Ok(())
    }

    /// Bytes the data dir takes: (apparent size, allocated blocks).
    pub fn data_bytes(&self) -> (u64, u64) {
        dir_size(&self.data)
    }

    /// The idempotency keys' tables (`idempotency/` in the data directory): (apparent, allocated).
    pub fn keys_bytes(&self) -> (u64, u64) {
        dir_size(&self.data.join("idempotency"))
    }
}

/// A `kB` field of `/proc/PID/status`.
fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `addr=127.0.0.1:PORT` in a log line.
fn parse_addr(line: &str) -> Option<SocketAddr> {
    line.split_whitespace().find_map(|token| {
        let value = token.strip_prefix("addr=")?.trim_matches(['"', '\'']);
        value.parse().ok()
    })
}

/// utime + stime of a `/proc/.../stat` file, in seconds (clock ticks are 1/100 s on Linux).
pub fn proc_cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesized command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn dir_size(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut total = (0, 0);
    let Ok(entries) = std::fs::read_dir(path) else {
        return total;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            let (a, b) = dir_size(&entry.path());
            total.0 += a;
            total.1 += b;
        } else {
            total.0 += meta.len();
            total.1 += meta.blocks() * 512;
        }
    }
    total
}
