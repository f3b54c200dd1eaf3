//! `herald receive`, the README walkthrough's receiver: it verifies signatures, refuses bad
//! ones, answers verification challenges, and herald (`allow_http`) delivers to it.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::{first_delivery, sig, World};
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use sha2::Sha256;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A running `herald receive` and the lines it prints.
struct Receive {
    child: Child,
    addr: String,
    lines: mpsc::Receiver<String>,
}

impl Receive {
    fn start() -> Receive {
        let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(["receive", "--listen", "127.0.0.1:0", "--secret", SECRET])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let first = lines.recv_timeout(Duration::from_secs(20)).unwrap();
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_string();
        Receive { child, addr, lines }
    }

    /// The next printed line containing `needle`, within a deadline.
    fn expect_line(&self, needle: &str) -> String {
        let end = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => continue,
                Err(_) => panic!("herald receive printed no line with {needle:?}"),
            }
        }
    }

    async fn post(&self, headers: &[(&str, String)], body: &str) -> (u16, String) {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut req = hyper::Request::post(format!("http://{}/hook", self.addr));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = client
            .request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

impl Drop for Receive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signed(id: &str, body: &str) -> Vec<(&'static str, String)> {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let signature = sig::sign(SECRET, id, &ts, body.as_bytes());
    vec![
        ("webhook-id", id.to_string()),
        ("webhook-timestamp", ts),
        ("webhook-signature", signature),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_verifies_signatures_and_refuses_bad_ones() {
    let r = Receive::start();
    let body = r#"{"hello": "world"}"#;
    let (status, _) = r.post(&signed("msg_1", body), body).await;
    assert_eq!(status, 200);
    r.expect_line("msg_1");

    let mut forged = signed("msg_2", body);
    forged[2].1 = sig::sign(SECRET, "msg_2", &forged[1].1, b"{}");
    let (status, _) = r.post(&forged, body).await;
    assert_eq!(status, 401, "a signature over other bytes must be refused");

    let mut stale = signed("msg_3", body);
    stale[1].1 = "1614265330".into();
    stale[2].1 = sig::sign(SECRET, "msg_3", "1614265330", body.as_bytes());
    let (status, _) = r.post(&stale, body).await;
    assert_eq!(status, 401, "a timestamp from 2021 must be refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_answers_a_verification_challenge_with_the_hex_hmac_of_the_nonce() {
    let r = Receive::start();
    let body = r#"{"type": "endpoint.verification", "nonce": "9f86d081884c7d65"}"#;
    let (status, answer) = r.post(&signed("msg_v", body), body).await;
    assert_eq!(status, 200);
    let mut mac = Hmac::<Sha256>::new_from_slice(&sig::key_bytes(SECRET).unwrap()).unwrap();
    mac.update(b"9f86d081884c7d65");
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(answer, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walkthrough_herald_delivers_to_herald_receive_over_http() {
    let w = World::start("allow_http = true", "").await;
    let r = Receive::start();
    w.endpoint(
        "11073",
        &format!("http://{}/hook", r.addr),
        json!({ "secret": SECRET }),
    )
    .await;
    let answer = w
        .ingest("11073", "interaction.review", json!({"review_id": "r_1"}))
        .await;
    let event_id = answer["event_id"].as_str().unwrap();
    let line = r.expect_line(event_id);
    assert!(line.contains("verified"), "{line}");
    w.wait_state(
        &first_delivery(&answer),
        "delivered",
        Duration::from_secs(10),
    )
    .await;
}
