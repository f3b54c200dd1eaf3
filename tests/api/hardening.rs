//! The API server's limits and the data directory's privacy (docs/operations.md): nobody without
//! a token can exhaust herald, a client cannot hold up its shutdown, and the files that hold
//! secrets are private whatever the umask; and the binary's allocator runs with the options
//! that keep its memory where the README's figures say.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::herald::{ADMIN_TOKEN, INGEST_TOKEN};
use common::{behaviour, Herald, HeraldApi, Receiver, Reply, TestCa};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// `VmRSS` of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// How late, at most, these tests let the real herald's timers fire (a request timeout, the
/// shutdown grace) or a new client be served: a margin, not a guess. Measured on this 2-core
/// machine, quiet and with both cores kept busy by other processes: the request timeout closed
/// connections 2 to 16 ms late, the grace ended the process 12 to 20 ms late, and a client was
/// served 3 to 4 ms after a flood of 1,100 connections ended. 3 s leaves room for a CI machine
/// running the whole suite.
const LATE: Duration = Duration::from_secs(3);

/// Lets this test process hold thousands of sockets (the soft limit is often 1024).
fn raise_own_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let l = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        },
    )
    .expect("raise the test's open-file limit");
}

/// Reads until the server closes the connection (or `limit` passes); returns what it sent and
/// when it closed.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Instant>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(end, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (got, Some(Instant::now())),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (got, None),
        }
    }
}

/// 1,500 connections sending an endless header line grew herald by 450 MB and
/// kept it; with `server.max_header_bytes` (16 KiB) each gets `431` and herald grows by less
/// than 32 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_header_lines_get_431_and_do_not_grow_memory() {
    raise_own_fd_limit();
    let h = Herald::start("").await;
    let pid = h.pid().unwrap();
    let before = rss_kib(pid);
    let addr = h.addr();
    let mut tasks = Vec::new();
    for _ in 0..1500 {
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.ok()?;
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
                .await
                .ok()?;
            let chunk = vec![b'a'; 16 * 1024];
            // Up to 400,000 bytes of the same header line, never ending it; herald hangs up
            // long before.
            for _ in 0..25 {
                if s.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            let (answer, closed) = read_until_closed(&mut s, Duration::from_secs(20)).await;
            Some((answer, closed.is_some()))
        }));
    }
    let mut closed = 0;
    for t in tasks {
        if let Some((_, was_closed)) = t.await.unwrap() {
            closed += usize::from(was_closed);
        }
    }
    let after = rss_kib(pid);
    assert_eq!(closed, 1500, "every connection was closed by herald");
    assert!(
        after < before + 32 * 1024,
        "herald grew from {before} KiB to {after} KiB"
    );
    let (status, _) = h.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 200);
    // A complete head past the limit is answered 431 (the flood's answers may be lost to the
    // resets its own writes cause).
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(17 * 1024)
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let (answer, _) = read_until_closed(&mut s, Duration::from_secs(5)).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
}

/// ~5,000 idle connections used up herald's file descriptors (no deliveries,
/// no `/healthz`). Past `server.max_connections` herald stops accepting: deliveries go on
/// while the flood is held, and once it ends new clients are served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_past_the_limit_stop_neither_deliveries_nor_later_clients() {
    raise_own_fd_limit();
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca_file(dir.path());
    // The first attempt of every other event fails (never ten in a row: the breaker stays
    // closed); their retries come during the flood.
    let recv = Receiver::https(
        &ca,
        behaviour(|r, _| {
            let odd = r.json()["i"].as_u64().is_some_and(|i| i % 2 == 1);
            if odd && r.header("herald-attempt") == Some("1") {
                Reply::status(503)
            } else {
                Reply::status(200)
            }
        }),
    );
    let h = Herald::start(&format!(
        "{}[retry_policies]\nquick = [\"1s\"]\n",
        common::delivery_toml(&ca_file)
    ))
    .await;
    let (status, _) = h
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({"url": recv.url("/hook"), "retry_policy": "quick"})),
        )
        .await;
    assert_eq!(status, 201);
    for i in 0..16 {
        let (status, _) = h
            .ingest(json!({"account_id": "acme", "type": "t.x", "payload": {"i": i}}))
            .await;
        assert_eq!(status, 202);
    }

    // The flood: 5,000 connections opened and held, sending nothing.
    let addr = h.addr();
    let mut opening = Vec::new();
    for _ in 0..5000 {
        opening.push(tokio::spawn(async move {
            tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr))
                .await
                .ok()
                .and_then(Result::ok)
        }));
    }
    let mut held = Vec::new();
    for o in opening {
        held.extend(o.await.unwrap());
    }
    // Past the 1,024 herald serves, connections wait in the kernel's backlog until it is full.
    assert!(held.len() > 1100, "only {} connections opened", held.len());

    // Every retry arrives while they are held.
    recv.wait_for(24, Duration::from_secs(30)).await;
    let retries = recv
        .requests()
        .iter()
        .filter(|r| r.header("herald-attempt") == Some("2"))
        .count();
    assert_eq!(retries, 8, "every retry arrived during the flood");

    drop(held);
    let started = Instant::now();
    let fresh = common::herald::new_client();
    let (status, _, _) = common::herald::http_call(
        &fresh,
        &h.base_url(),
        "GET",
        "/healthz",
        None,
        &[],
        Vec::new(),
    )
    .await
    .expect("a new client is served once the flood ends");
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < LATE,
        "served after {:?}",
        started.elapsed()
    );
}

/// A body sent a byte now and then kept its connection open forever
/// (`header_read_timeout` covers the head only). The whole request must arrive within
/// `server.request_timeout`; past it herald answers `408` and closes the connection. A head
/// trickled in is cut off the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_does_not_arrive_within_request_timeout_is_closed() {
    const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
    let h = Herald::start("[server]\nrequest_timeout = \"2s\"\n").await;
    let addr = h.addr();
    let started = Instant::now();
    let mut slow = Vec::new();
    for i in 0..100 {
        slow.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let head = format!(
                "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {INGEST_TOKEN}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
            );
            s.write_all(head.as_bytes()).await.unwrap();
            // A byte every 300 ms for a second (activity must not extend the deadline), then
            // nothing: so herald has read all that was sent when it answers and closes.
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                s.write_all(b" ").await.unwrap();
            }
            let (answer, closed) = read_until_closed(&mut s, Duration::from_secs(10)).await;
            (i, answer, closed.expect("herald closed the connection"))
        }));
    }
    // A head that never ends, a line at a time.
    let mut trickle = TcpStream::connect(addr).await.unwrap();
    trickle
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut scratch = [0u8; 64];
    let head_closed = loop {
        tokio::select! {
            r = trickle.read(&mut scratch) => match r {
                Ok(0) | Err(_) => break Instant::now(),
                Ok(_) => {}
            },
            _ = tokio::time::sleep(Duration::from_millis(300)) => {
                if trickle.write_all(b"X-More: y\r\n").await.is_err() {
                    break Instant::now();
                }
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "head never cut off"
        );
    };
    let head_after = head_closed.duration_since(started);
    assert!(
        head_after < REQUEST_TIMEOUT + LATE,
        "head closed after {head_after:?}"
    );
    for t in slow {
        let (i, answer, closed) = t.await.unwrap();
        let after = closed.duration_since(started);
        assert!(
            after >= REQUEST_TIMEOUT - Duration::from_millis(100) && after < REQUEST_TIMEOUT + LATE,
            "slow body #{i} closed after {after:?}"
        );
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 408"), "slow body #{i}: {text}");
        assert!(text.contains("request_timeout"), "{text}");
    }
    let (status, _) = h.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 200);
}

/// A client with a half-sent body kept herald running after SIGTERM until the
/// client went away. herald exits within the grace period (10 s) + 5 s whatever clients do,
/// and what it acknowledged is there after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_within_the_grace_period_whatever_clients_do() {
    let mut h = Herald::start("").await;
    let (status, answer) = h
        .ingest(json!({"account_id": "acme", "type": "t.x", "payload": {"n": 1}}))
        .await;
    assert_eq!(status, 202);
    let event_id = answer["event_id"].as_str().unwrap().to_string();
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(h.addr()).await.unwrap();
        let head = format!(
            "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {INGEST_TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"account_id\""
        );
        s.write_all(head.as_bytes()).await.unwrap();
        held.push(s);
    }
    // An idle keep-alive connection too.
    held.push(TcpStream::connect(h.addr()).await.unwrap());
    let started = Instant::now();
    let status = h.sigterm().await;
    let took = started.elapsed();
    assert!(status.success(), "exit status {status}");
    // The grace period (docs/operations.md) bounds the wait for the half-sent requests.
    assert!(
        took < herald::shutdown::GRACE + LATE,
        "exited after {took:?}"
    );
    drop(held);
    h.restart().await;
    let (status, _) = h
        .admin("GET", &format!("/v1/events/{event_id}"), None)
        .await;
    assert_eq!(status, 200, "the acknowledged event survived the stop");
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Every entry under `dir`, recursively.
fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(entries(&p));
        }
        out.push(p);
    }
    out
}

/// Under umask 022 the data directory was 0755 and `db` (endpoint and account
/// secrets in plain text) 0644. The directory is 0700 and every file 0600 whatever the umask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_is_private_whatever_the_umask() {
    // herald inherits this process's umask.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let mut h = Herald::start(common::ON_SLED).await;
    // A secret worth protecting.
    let (status, _) = h
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({"url": "https://example.com/hook"})),
        )
        .await;
    assert_eq!(status, 201);
    let status = h.sigterm().await;
    assert!(status.success());
    let data = h.storage_path();
    assert_eq!(mode(&data), 0o700, "data directory");
    let all = entries(&data);
    assert!(all.iter().any(|p| p.ends_with("db")), "{all:?}");
    assert!(all.iter().any(|p| p.ends_with("conf")), "{all:?}");
    for p in &all {
        let want = if p.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(p), want, "{}", p.display());
    }
    // Files an older herald left readable are made private at the next start.
    std::fs::set_permissions(data.join("db"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    h.restart().await;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("db")), 0o600);
}

/// Failed authentications are logged with the address and the route, never the
/// token, at most once a second per address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_authentications_are_logged_once_a_second_without_the_token() {
    let h = Herald::start("").await;
    let wrong = "wrong-token-0123456789-abcdef";
    let started = Instant::now();
    for _ in 0..5 {
        let (status, _) = h.call("GET", "/v1/status", Some(wrong), None).await;
        assert_eq!(status, 401);
    }
    // At most one line a second: a slow machine that took longer over the five may see one more
    // line for each second that began meanwhile (usually none: the five take milliseconds).
    let allowed = 1 + started.elapsed().as_secs() as usize;
    // Everything logged before this line is read once it is.
    let (status, _) = h
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({"url": "https://example.com/hook"})),
        )
        .await;
    assert_eq!(status, 201);
    h.wait_for_log("endpoint created", Duration::from_secs(5))
        .await;
    let lines: Vec<String> = h
        .logs()
        .into_iter()
        .filter(|l| l.contains("authentication failed"))
        .collect();
    assert!(
        (1..=allowed).contains(&lines.len()),
        "{} lines for 5 failures in {allowed} second(s): {lines:?}",
        lines.len()
    );
    assert!(lines[0].contains("127.0.0.1"), "{}", lines[0]);
    assert!(lines[0].contains("/v1/status"), "{}", lines[0]);
    assert!(!h.log_text().contains(wrong), "the token was logged");
    assert!(
        !h.log_text().contains(ADMIN_TOKEN),
        "the admin token was logged"
    );
}

/// herald's binary runs its allocator with the options in `src/main.rs`, not jemalloc's
/// defaults (which hold freed memory longer: the README's memory figures depend on them). One
/// of those options starts jemalloc's background thread, which returns freed pages; a binary
/// whose options did not reach jemalloc runs without it.
#[cfg(feature = "jemalloc")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allocator_runs_with_herald_s_options() {
    let h = Herald::start("").await;
    let pid = h.pid().expect("herald runs");
    let threads = format!("/proc/{pid}/task");
    common::wait_until(
        Duration::from_secs(10),
        "jemalloc's background thread runs in herald",
        || {
            let names: Vec<String> = std::fs::read_dir(&threads)
                .map(|tasks| {
                    tasks
                        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                        .map(|n| n.trim().to_string())
                        .collect()
                })
                .unwrap_or_default();
            async move { names.iter().any(|n| n == "jemalloc_bg_thd") }
        },
    )
    .await;
}

/// docs/operations.md: deleting the data directory under a running herald does not make sled's
/// writes fail (it writes on into its open, unlinked files), so herald checks that `storage.path`
/// still names the directory it opened: from then on ingest and `/healthz` answer 503, nothing more
/// is acknowledged, and herald stops with exit code 1 after its grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_deleted_under_herald_stops_acknowledging() {
    let mut h = Herald::start(common::ON_SLED).await;
    let event = json!({"account_id": "acc", "type": "t.x", "payload": {}});
    let (status, answer) = h.ingest(event.clone()).await;
    assert_eq!(status, 202, "{answer}");

    std::fs::remove_dir_all(h.storage_path()).unwrap();
    // The very next ingest is refused: the check runs in every commit, not on a timer.
    let (status, answer) = h.ingest(event.clone()).await;
    assert_eq!(
        status, 503,
        "an event was acknowledged into deleted files: {answer}"
    );
    assert_eq!(answer["error"]["code"], "unavailable");
    let (status, body) = h.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 503, "{body}");
    let (status, _) = h.ingest_batch(json!([event])).await;
    assert_eq!(status, 503);

    let status = h
        .exit_within(Duration::from_secs(30))
        .await
        .expect("herald kept running on a deleted data directory");
    assert_eq!(status.code(), Some(1), "{status}");
    let log = h.log_text();
    assert!(log.contains("is gone"), "the log says why: {log}");
}

/// The same when the directory is replaced (moved away and another put in its place): the
/// files herald writes are no longer the ones `storage.path` names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_replaced_under_herald_stops_acknowledging() {
    let h = Herald::start(common::ON_SLED).await;
    let path = h.storage_path();
    std::fs::rename(&path, path.with_extension("moved")).unwrap();
    std::fs::create_dir(&path).unwrap();
    let (status, body) = h.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 503, "{body}");
    let (status, answer) = h
        .ingest(json!({"account_id": "acc", "type": "t.x", "payload": {}}))
        .await;
    assert_eq!(status, 503, "{answer}");
    // The log line may land a moment after the answer. The check may also run between the
    // rename and the new directory's creation and find the directory gone: either says why.
    common::wait_until(Duration::from_secs(10), "the log says why", || async {
        let log = h.log_text();
        log.contains("names another directory") || log.contains("is gone")
    })
    .await;
}

/// docs/api.md: every API answer carries `X-Content-Type-Options: nosniff` (JSON, errors,
/// `/metrics`, `/openapi.json`), as the pages do; an error echoes the request path only as
/// JSON text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_nosniff() {
    let h = Herald::start("").await;
    let client = common::herald::new_client();
    let base = h.base_url();
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("GET", "/healthz", None),
        ("GET", "/metrics", None),
        ("GET", "/openapi.json", None),
        ("GET", "/v1/status", Some(ADMIN_TOKEN)),
        ("GET", "/v1/status", None),
        ("GET", "/v1/accounts/acc", Some(ADMIN_TOKEN)),
        ("POST", "/v1/events", Some(INGEST_TOKEN)),
        ("GET", "/v1/nothing/%3Cscript%3E", None),
        ("DELETE", "/healthz", None),
        ("GET", "/portal", None),
    ];
    for &(method, path, token) in cases {
        let (status, headers, body) = common::herald::http_call(
            &client,
            &base,
            method,
            path,
            token,
            &[("content-type", "application/json")],
            b"{".to_vec(),
        )
        .await
        .unwrap();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(
            header("x-content-type-options"),
            Some("nosniff"),
            "{method} {path} answered {status} without nosniff"
        );
        if status == 404 {
            // The path comes back as JSON text, never as markup.
            assert_eq!(header("content-type"), Some("application/json"));
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains("/v1/nothing/%3Cscript%3E"), "{message}");
        }
    }
}

/// docs/api.md: a payload nests at most 64 levels (the payload object is level 1); deeper is 422
/// naming `payload`, alone in a batch, and stores nothing. 64 levels pass byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_nested_deeper_than_64_levels_is_refused() {
    let h = Herald::start("").await;
    let nested = |levels: usize| {
        format!(
            "{{\"a\":{}1{}}}",
            "[".repeat(levels - 1),
            "]".repeat(levels - 1)
        )
    };
    let body = |payload: &str| {
        format!("{{\"account_id\":\"acc\",\"type\":\"t.deep\",\"payload\":{payload}}}")
    };
    let client = common::herald::new_client();
    let post = |path: &'static str, bytes: String| {
        let client = client.clone();
        let base = h.base_url();
        async move {
            let (status, _, answer) = common::herald::http_call(
                &client,
                &base,
                "POST",
                path,
                Some(INGEST_TOKEN),
                &[("content-type", "application/json")],
                bytes.into_bytes(),
            )
            .await
            .unwrap();
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&answer).unwrap(),
            )
        }
    };
    for levels in [65, 100_000] {
        let (status, answer) = post("/v1/events", body(&nested(levels))).await;
        assert_eq!(status, 422, "{levels} levels: {answer}");
        assert_eq!(answer["error"]["field"], "payload", "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_field", "{answer}");
    }
    let ok = nested(64);
    let (status, answer) = post("/v1/events", body(&ok)).await;
    assert_eq!(status, 202, "64 levels are allowed: {answer}");
    let id = answer["event_id"].as_str().unwrap().to_string();
    let (_, event) = h.admin("GET", &format!("/v1/events/{id}"), None).await;
    assert_eq!(
        event["payload"].to_string(),
        ok,
        "the payload is kept as sent"
    );

    let batch = format!(
        "{{\"events\":[{},{}]}}",
        body(&nested(65)),
        body(&nested(2))
    );
    let (status, answer) = post("/v1/events/batch", batch).await;
    assert_eq!(status, 202, "{answer}");
    let results = answer["results"].as_array().unwrap();
    assert_eq!(
        results[0]["error"]["field"], "events[0].payload",
        "{answer}"
    );
    assert!(results[1]["event_id"].is_string(), "{answer}");
    let (_, list) = h
        .admin("GET", "/v1/deliveries?account_id=acc&limit=100", None)
        .await;
    assert_eq!(
        list["items"].as_array().unwrap().len(),
        2,
        "only the two good events were stored: {list}"
    );
}
