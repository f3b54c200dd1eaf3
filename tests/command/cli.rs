//! The `herald` command (docs/operations.md): `check-config` reports every problem with its key
//! path and exits 2 (0 for a good file); `serve` with no admin token configured makes one in the
//! data directory (mode 0600), logs the file's path but never the token, and that token opens the
//! admin routes.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use common::herald::{herald_bin, parse_listen_addr, strip_ansi};

/// How long herald gets to log `herald listening`.
const START_DEADLINE: Duration = Duration::from_secs(20);

fn check_config(path: &Path) -> Output {
    Command::new(herald_bin())
        .arg("check-config")
        .arg(path)
        .env("NO_COLOR", "1")
        .output()
        .expect("run herald check-config")
}

fn write_config(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("herald.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// The `config error: ...` lines of stderr.
fn error_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(strip_ansi)
        .filter(|l| l.starts_with("config error: "))
        .collect()
}

fn storage_toml(dir: &Path) -> String {
    format!(
        "[storage]\npath = {}\n",
        common::toml_string(&dir.join("data").display().to_string())
    )
}

/// Runs `check-config` on `tables` (the storage table is added) and asserts it exits 2 with a
/// `config error: KEY: ...` line for each `(key, says)` whose message contains `says`, and
/// nothing on stdout. Returns the error lines.
fn assert_refused(tables: &str, expected: &[(&str, &str)]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &format!("{tables}{}", storage_toml(dir.path())));
    let out = check_config(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code; stderr:\n{stderr}");
    let lines = error_lines(&out);
    for (key, says) in expected {
        let prefix = format!("config error: {key}: ");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&prefix) && l.len() > prefix.len() && l.contains(says)),
            "no {prefix:?} line saying {says:?}; stderr:\n{stderr}"
        );
    }
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("ok"),
        "a bad file is not reported ok"
    );
    lines
}

#[test]
fn check_config_reports_every_error_with_its_key_path_and_exits_2() {
    let lines = assert_refused(
        "[server]\nlisten = \"nowhere\"\n[delivery]\nmax_in_flight = 0\n[log]\nformat = \"xml\"\n",
        &[
            ("server.listen", ""),
            ("delivery.max_in_flight", ""),
            ("log.format", ""),
        ],
    );
    assert_eq!(lines.len(), 3, "one line per problem: {lines:?}");
}

/// docs/operations.md: a token shorter than 16 characters, a token with surrounding whitespace (it
/// could never match) and one token in both lists are refused, each named by its key; a token
/// file's lines count like the lists.
#[test]
fn check_config_refuses_weak_and_shared_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin.tokens");
    std::fs::write(&file, "shared-token-0123456789\nshort-in-file\n").unwrap();
    let lines = assert_refused(
        &format!(
            "[server]\nadmin_tokens = [\"short\", \"fine-admin-token-0123\"]\n\
             admin_token_file = {}\n\
             ingest_tokens = [\" padded-ingest-token \", \"shared-token-0123456789\"]\n",
            common::toml_string(&file.display().to_string()),
        ),
        &[
            ("server.admin_tokens[0]", "shorter than 16 characters"),
            (
                "server.admin_token_file (token 2)",
                "shorter than 16 characters",
            ),
            ("server.ingest_tokens[0]", "whitespace"),
            (
                "server.ingest_tokens",
                "both an admin token and an ingest token",
            ),
        ],
    );
    assert_eq!(lines.len(), 4, "one line per problem: {lines:?}");
    assert!(
        !lines.iter().any(|l| l.contains("0123456789")),
        "a token was printed: {lines:?}"
    );
}

/// docs/operations.md: a token holding anything but visible ASCII can never match (clients cannot
/// send it in an Authorization header, and herald reads only visible ASCII there), so it is refused
/// rather than locking the operator out.
#[test]
fn check_config_refuses_tokens_outside_visible_ascii() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ingest.tokens");
    std::fs::write(&file, "ingest-token-with\ttab-0123\n").unwrap();
    let lines = assert_refused(
        &format!(
            "[server]\nadmin_tokens = [\"{}\", \"admin token with spaces 0123\", \
             \"admin-token-\\u0007-bell-0123\"]\n\
             ingest_token_file = {}\n",
            "é".repeat(20),
            common::toml_string(&file.display().to_string()),
        ),
        &[
            ("server.admin_tokens[0]", "visible ASCII"),
            ("server.admin_tokens[1]", "visible ASCII"),
            ("server.admin_tokens[2]", "visible ASCII"),
            ("server.ingest_token_file (token 1)", "visible ASCII"),
        ],
    );
    assert_eq!(lines.len(), 4, "one line per problem: {lines:?}");
    assert!(
        !lines.iter().any(|l| l.contains("0123") || l.contains('é')),
        "a token was printed: {lines:?}"
    );
}

#[test]
fn check_config_accepts_a_good_file_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_tokens = [\"check-config-admin-token\"]\n{}[delivery]\nmax_in_flight = 16\n[log]\nformat = \"json\"\n",
            storage_toml(dir.path())
        ),
    );
    let out = check_config(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "exit code; stderr:\n{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}: ok", path.display())
    );
    assert!(error_lines(&out).is_empty(), "stderr:\n{stderr}");
}

#[test]
fn check_config_rejects_an_unknown_key_naming_its_path() {
    assert_refused(
        "[server]\nlisten = \"127.0.0.1:0\"\nlisten_adress = \"127.0.0.1:9\"\n",
        &[("server.listen_adress", "unknown")],
    );
}

#[test]
fn check_config_names_the_key_of_a_value_of_the_wrong_type() {
    assert_refused(
        "[delivery]\nmax_in_flight = \"many\"\n",
        &[("delivery.max_in_flight", "")],
    );
}

#[test]
fn check_config_reports_an_unknown_key_together_with_the_other_errors() {
    assert_refused(
        "[server]\nlisten = \"nowhere\"\nlisten_adress = \"127.0.0.1:9\"\n[log]\nformat = \"xml\"\n",
        &[
            ("server.listen_adress", ""),
            ("server.listen", ""),
            ("log.format", ""),
        ],
    );
}

/// docs/api.md: a catalog schema that is not a valid JSON Schema, and a sample that does not
/// satisfy its type's schema, are errors with their key paths.
#[test]
fn check_config_refuses_a_bad_schema_and_a_sample_that_fails_its_schema() {
    assert_refused(
        "[catalog.events.\"order.created\"]\n\
         schema = { type = \"objekt\" }\n\
         [catalog.events.\"order.paid\"]\n\
         schema = { type = \"object\", required = [\"order_id\"], properties = { order_id = { type = \"string\" } } }\n\
         sample = { order_id = 42 }\n",
        &[
            ("catalog.events.\"order.created\".schema", "not a valid JSON Schema"),
            ("catalog.events.\"order.paid\".sample", "/order_id"),
        ],
    );
}

/// The server's limits are checked like every key (hyper's smallest head buffer is 8 KiB).
#[test]
fn check_config_refuses_server_limits_out_of_range() {
    assert_refused(
        "[server]\nmax_connections = 0\nmax_header_bytes = 100\nrequest_timeout = \"0s\"\n\
         [delivery]\nresponse_body_limit = 100000\n",
        &[
            ("server.max_connections", "between 1 and"),
            ("server.max_header_bytes", "between 8192 and"),
            ("server.request_timeout", "between"),
            ("delivery.response_body_limit", "at most 4096"),
        ],
    );
}

/// A herald child process that is killed (and reaped) when dropped.
struct Serve {
    child: Child,
    lines: mpsc::Receiver<String>,
    reader: Option<JoinHandle<()>>,
    seen: Vec<String>,
}

impl Serve {
    fn spawn(config: &Path) -> Serve {
        let mut child = Command::new(herald_bin())
            .arg("serve")
            .arg("--config")
            .arg(config)
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn herald serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("[herald serve] {line}");
                if tx.send(strip_ansi(&line)).is_err() {
                    break;
                }
            }
        });
        Serve {
            child,
            lines,
            reader: Some(reader),
            seen: Vec::new(),
        }
    }

    /// Reads stderr until the `herald listening` line; returns the address it names.
    fn wait_listening(&mut self) -> SocketAddr {
        let end = Instant::now() + START_DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let listening = line.contains("herald listening");
                    self.seen.push(line.clone());
                    if listening {
                        return parse_listen_addr(&line)
                            .unwrap_or_else(|| panic!("no addr=IP:PORT in {line:?}"));
                    }
                }
                Err(e) => panic!(
                    "no 'herald listening' line within {START_DEADLINE:?} ({e}); stderr:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Kills herald and returns every stderr line it wrote.
    fn stop(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let mut all = std::mem::take(&mut self.seen);
        all.extend(self.lines.try_iter());
        all
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on herald with an optional bearer token; returns the status.
async fn get_status(addr: SocketAddr, path: &str, token: Option<&str>) -> u16 {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = hyper::Request::builder()
        .method("GET")
        .uri(format!("http://{addr}{path}"));
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let resp = tokio::time::timeout(
        Duration::from_secs(30),
        client.request(req.body(Empty::new()).unwrap()),
    )
    .await
    .expect("herald answers within 30 s")
    .expect("request to herald");
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await;
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_admin_token_creates_a_0600_token_file_and_logs_only_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("data");
    let config = write_config(
        dir.path(),
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[storage]\npath = {}\n",
            common::toml_string(&storage.display().to_string())
        ),
    );
    let mut serve = Serve::spawn(&config);
    let addr = serve.wait_listening();

    let token_file = storage.join("admin.token");
    let meta = std::fs::metadata(&token_file)
        .unwrap_or_else(|e| panic!("{} was not created: {e}", token_file.display()));
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "the token file is private to herald's user"
    );
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    assert!(
        token.len() >= 16,
        "a token worth the name: {} chars",
        token.len()
    );

    // The token opens the admin routes; nothing else does.
    assert_eq!(get_status(addr, "/v1/status", Some(&token)).await, 200);
    assert_eq!(get_status(addr, "/v1/status", None).await, 401);
    assert_eq!(get_status(addr, "/v1/status", Some("guess")).await, 401);
    assert_eq!(get_status(addr, "/v1/deliveries", Some(&token)).await, 200);

    let lines = serve.stop();
    let path_text = token_file.display().to_string();
    assert!(
        lines.iter().any(|l| l.contains(&path_text)),
        "the log names the token file {path_text}; stderr:\n{}",
        lines.join("\n")
    );
    for line in &lines {
        assert!(!line.contains(&token), "a log line shows the token: {line}");
    }
}

/// `herald --version` names the version, the git commit, the build date, the target and the
/// store features; `-V` is the version alone.
#[test]
fn version_names_the_commit_the_build_date_the_target_and_the_features() {
    let run = |flag: &str| {
        let out = Command::new(herald_bin())
            .arg(flag)
            .output()
            .expect("run herald");
        assert!(out.status.success(), "{flag}: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    };
    assert_eq!(run("-V"), format!("herald {}\n", env!("CARGO_PKG_VERSION")));

    let long = run("--version");
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), 5, "{long}");
    assert_eq!(lines[0], format!("herald {}", env!("CARGO_PKG_VERSION")));
    let field = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} line in {long}"))
            .trim()
            .to_string()
    };
    // The commit of this checkout (the test runs from it).
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git rev-parse");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let commit = field("commit");
    assert!(
        commit.len() == 12 && head.starts_with(&commit),
        "commit {commit:?}, HEAD {head:?}"
    );
    let built = field("built");
    let date = built.as_bytes();
    assert!(
        date.len() == 10
            && date[4] == b'-'
            && date[7] == b'-'
            && built.replace('-', "").bytes().all(|b| b.is_ascii_digit())
            && built.as_str() >= "2026-01-01",
        "built {built:?}"
    );
    let target = field("target");
    assert!(
        target.starts_with(std::env::consts::ARCH) && target.contains(std::env::consts::OS),
        "target {target:?}"
    );
    assert_eq!(field("features"), "sled, postgres");
}
