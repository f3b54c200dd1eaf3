//! The receiver snippets in `docs/receivers/` (Python and Node), run for real: each verifies
//! requests with the official Standard Webhooks library, refuses forged ones, answers the
//! verification challenge, and verifies what the real herald delivers with a secret herald
//! generated itself (the contract's promise that official libraries verify every request:
//! docs/delivery-contract.md).
//!
//! The interpreters and libraries are prerequisites, not optional: a missing one fails the test
//! with the command that installs it (CI installs them in `.ci/run`).

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::herald::INGEST_TOKEN;
use common::{first_delivery, sig, World};
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use sha2::Sha256;

/// A fixed secret for the tests that sign requests themselves.
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
/// Another secret: its signatures must not pass.
const OTHER_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// How long a snippet gets to start, and to print a line after a request.
const DEADLINE: Duration = Duration::from_secs(20);

/// One snippet: how to run it and how to install what it needs.
#[derive(Clone, Copy)]
struct Lang {
    name: &'static str,
    program: &'static str,
    script: &'static str,
    install: &'static str,
}

const PYTHON: Lang = Lang {
    name: "python",
    program: "python3",
    script: "docs/receivers/receiver.py",
    install: "install Python 3.9+ and the library: python3 -m pip install -r docs/receivers/requirements.txt",
};

const NODE: Lang = Lang {
    name: "node",
    program: "node",
    script: "docs/receivers/receiver.mjs",
    install: "install Node.js 18+ and the library: cd docs/receivers && npm ci",
};

/// A running snippet: its port and the lines it prints. Killed when dropped.
struct Snippet {
    lang: Lang,
    child: Child,
    port: u16,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<JoinHandle<()>>,
}

impl Snippet {
    /// Starts the snippet with `secret` on `port` (0: a free one) and waits for its
    /// `listening on http://127.0.0.1:<port>/` line.
    fn start(lang: Lang, secret: &str, port: u16) -> Snippet {
        let mut child = Command::new(lang.program)
            .arg(lang.script)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("HERALD_SECRET", secret)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run `{} {}` ({e}): {}",
                    lang.program, lang.script, lang.install
                )
            });
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                eprintln!("[{} snippet] {line}", lang.name);
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_stream = child.stderr.take().expect("piped stderr");
        let sink = stderr.clone();
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err_stream.read(&mut buf) {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut snippet = Snippet {
            lang,
            child,
            port: 0,
            lines,
            stderr,
            stderr_reader: Some(stderr_reader),
        };
        let first = match snippet.lines.recv_timeout(DEADLINE) {
            Ok(line) => line,
            Err(RecvTimeoutError::Disconnected) => snippet.fail("exited before listening"),
            Err(RecvTimeoutError::Timeout) => {
                snippet.fail(&format!("printed nothing within {DEADLINE:?}"))
            }
        };
        snippet.port = first
            .strip_prefix("listening on http://127.0.0.1:")
            .and_then(|rest| rest.strip_suffix('/'))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                snippet.fail(&format!(
                    "first line {first:?} is not `listening on http://127.0.0.1:<port>/`"
                ))
            });
        if port != 0 {
            assert_eq!(snippet.port, port, "the snippet must listen on PORT");
        }
        snippet
    }

    /// Panics with what the snippet wrote to stderr (after it exited, all of it) and the
    /// install hint: a missing interpreter or library fails here, loudly.
    #[track_caller]
    fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        panic!(
            "the {} snippet (`{} {}`) {why} ({status}).\nIf its library is missing, {}.\nstderr:\n{}",
            self.lang.name,
            self.lang.program,
            self.lang.script,
            self.lang.install,
            self.stderr.lock().unwrap()
        );
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// The next line the snippet prints, or `None` after `deadline`.
    fn next_line(&self, deadline: Duration) -> Option<String> {
        self.lines.recv_timeout(deadline).ok()
    }

    /// The next printed line, which must be `expected` (exactly), within the deadline.
    #[track_caller]
    fn expect_next_line(&mut self, expected: &str) {
        match self.next_line(DEADLINE) {
            Some(line) => assert_eq!(line, expected, "{} snippet output", self.lang.name),
            None => self.fail(&format!("did not print {expected:?} within {DEADLINE:?}")),
        }
    }

    /// POSTs `body` with `headers`; returns the status and the answer.
    async fn post(&self, headers: &[(&str, String)], body: &str) -> (u16, String) {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut req = hyper::Request::post(self.url()).header("content-type", "application/json");
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
        let exchange = async {
            let resp = client.request(req).await.expect("request to the snippet");
            let status = resp.status().as_u16();
            let answer = resp.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&answer).into_owned())
        };
        tokio::time::timeout(DEADLINE, exchange)
            .await
            .unwrap_or_else(|_| panic!("the {} snippet did not answer", self.lang.name))
    }
}

impl Drop for Snippet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_secs() -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string()
}

/// Standard Webhooks headers for `body` signed with `secret` now, as herald sends them.
fn signed(secret: &str, id: &str, body: &str) -> Vec<(&'static str, String)> {
    let ts = now_secs();
    let signature = sig::sign(secret, id, &ts, body.as_bytes());
    vec![
        ("webhook-id", id.to_string()),
        ("webhook-timestamp", ts),
        ("webhook-signature", signature),
        ("herald-event-type", "interaction.review".to_string()),
    ]
}

/// The lowercase hex HMAC-SHA256 of `data` under `secret`'s key.
fn hex_hmac(secret: &str, data: &[u8]) -> String {
    let key = sig::key_bytes(secret).expect("valid whsec_ secret");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(data);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn verifies_a_signed_request_and_refuses_a_forged_one(lang: Lang) {
    let mut s = Snippet::start(lang, SECRET, 0);
    let body = r#"{"review_id": "r_1", "text": "Très bien 👍"}"#;

    let (status, answer) = s.post(&signed(SECRET, "msg_1", body), body).await;
    assert_eq!(status, 200, "a correctly signed request: {answer}");
    s.expect_next_line("verified msg_1 interaction.review");

    // The same webhook-id again (an at-least-once redelivery): accepted, not processed twice.
    let (status, _) = s.post(&signed(SECRET, "msg_1", body), body).await;
    assert_eq!(status, 200, "a redelivery must still be answered 2xx");
    s.expect_next_line("duplicate msg_1");

    let mut forged = signed(SECRET, "msg_2", body);
    forged[2].1 = sig::sign(SECRET, "msg_2", &forged[1].1, br#"{"review_id": "r_2"}"#);
    let (status, _) = s.post(&forged, body).await;
    assert_eq!(status, 401, "a signature over other bytes must be refused");

    let other = signed(OTHER_SECRET, "msg_3", body);
    let (status, _) = s.post(&other, body).await;
    assert_eq!(
        status, 401,
        "a signature made with another secret must be refused"
    );

    let mut stale = signed(SECRET, "msg_4", body);
    stale[1].1 = "1614265330".into();
    stale[2].1 = sig::sign(SECRET, "msg_4", "1614265330", body.as_bytes());
    let (status, _) = s.post(&stale, body).await;
    assert_eq!(status, 401, "a timestamp from 2021 must be refused");

    let (status, _) = s.post(&[], body).await;
    assert_eq!(
        status, 401,
        "a request without signature headers must be refused"
    );

    // During a secret rotation herald sends one signature per valid secret, space-separated.
    let mut rotated = signed(SECRET, "msg_5", body);
    let old = sig::sign(OTHER_SECRET, "msg_5", &rotated[1].1, body.as_bytes());
    rotated[2].1 = format!("{old} {}", rotated[2].1);
    let (status, answer) = s.post(&rotated, body).await;
    assert_eq!(
        status, 200,
        "one matching signature of several passes: {answer}"
    );
    // The next line proves the refused requests printed nothing.
    s.expect_next_line("verified msg_5 interaction.review");
}

async fn answers_the_verification_challenge(lang: Lang) {
    let s = Snippet::start(lang, SECRET, 0);
    let nonce = "5f2b0c1e9a7d44c3b8e16a0f2d9c7e41";
    let body = format!(r#"{{"type": "endpoint.verification", "nonce": "{nonce}"}}"#);
    let (status, answer) = s.post(&signed(SECRET, "msg_v", &body), &body).await;
    assert_eq!(status, 200, "challenge: {answer}");
    let answer: Value = serde_json::from_str(&answer)
        .unwrap_or_else(|e| panic!("challenge answer {answer:?} is not JSON: {e}"));
    assert_eq!(
        answer,
        json!({ "hmac": hex_hmac(SECRET, nonce.as_bytes()) }),
        "the answer must be the hex HMAC-SHA256 of the nonce under the secret's key"
    );

    // An unsigned challenge is refused like any other request.
    let (status, _) = s.post(&[], &body).await;
    assert_eq!(status, 401, "an unsigned challenge must be refused");
}

async fn herald_verifies_and_delivers_to_the_snippet(lang: Lang) {
    // As in production: the endpoint gets nothing until it passes the verification handshake.
    let w = World::start(
        "allow_http = true",
        "[endpoints]\nrequire_verification = true\n",
    )
    .await;

    // The endpoint comes first, as an operator would do it: pick the port, create the endpoint
    // without a secret so herald generates one, then run the receiver with that secret.
    let port = {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        probe.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/hook");
    let (endpoint, secret) = w.endpoint("11073", &url, json!({})).await;
    assert!(secret.starts_with("whsec_"), "herald's secret: {secret}");
    let mut s = Snippet::start(lang, &secret, port);
    let (status, v) = w
        .herald
        .admin("POST", &format!("/v1/endpoints/{endpoint}/verify"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        v["verified"], true,
        "the {} snippet failed the handshake: {v}",
        lang.name
    );

    // Payload bytes as a producer might send them (spacing, escapes, non-ASCII): herald
    // delivers them as they are, and the signature covers exactly those bytes.
    let ingest = r#"{"account_id": "11073", "type": "interaction.review",
        "payload": {"review_id": "r_1",  "text": "Tr\u00e8s bien 👍", "stars": 5.0}}"#;
    let (status, _, answer) = w
        .herald
        .call_raw(
            "POST",
            "/v1/events",
            Some(INGEST_TOKEN),
            &[("content-type", "application/json")],
            ingest.as_bytes().to_vec(),
        )
        .await;
    let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
    assert_eq!(status, 202, "ingest: {answer}");
    let event_id = answer["event_id"].as_str().expect("event id");
    let delivery = first_delivery(&answer);

    let want = format!("verified {event_id} interaction.review");
    let end = Instant::now() + DEADLINE;
    loop {
        match s.next_line(end.saturating_duration_since(Instant::now())) {
            Some(line) if line == want => break,
            Some(line) => eprintln!("[{} snippet] (skipped) {line}", lang.name),
            None => {
                let d = w.delivery(&delivery).await;
                s.fail(&format!(
                    "did not print {want:?} for herald's delivery within {DEADLINE:?}; \
                     herald's secret was {secret}; the delivery:\n{d:#}"
                ));
            }
        }
    }
    let d = w
        .wait_state(&delivery, "delivered", Duration::from_secs(10))
        .await;
    assert_eq!(d["attempts"][0]["http_status"], 200, "{d:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snippet_python_verifies_a_signed_request_and_refuses_a_forged_one() {
    verifies_a_signed_request_and_refuses_a_forged_one(PYTHON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snippet_python_answers_the_verification_challenge() {
    answers_the_verification_challenge(PYTHON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_verifies_and_delivers_to_the_python_snippet() {
    herald_verifies_and_delivers_to_the_snippet(PYTHON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snippet_node_verifies_a_signed_request_and_refuses_a_forged_one() {
    verifies_a_signed_request_and_refuses_a_forged_one(NODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snippet_node_answers_the_verification_challenge() {
    answers_the_verification_challenge(NODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_verifies_and_delivers_to_the_node_snippet() {
    herald_verifies_and_delivers_to_the_snippet(NODE).await;
}
