//! Signing secrets (SPEC §3, §7, §9, §10): shown only in the create answer, never in any later
//! answer nor in any log line; imported secrets sign as the Standard Webhooks spec says
//! (`whsec_` → its base64-decoded key; anything else → its UTF-8 bytes).

mod common;

use std::time::Duration;

use serde_json::{json, Value};

use common::herald::ADMIN_TOKEN;
use common::{first_delivery, sig, Receiver, Recorded, World};

/// Long enough for a local delivery on a loaded 2-core machine.
const SETTLE: Duration = Duration::from_secs(15);

const IMPORTED_WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const IMPORTED_PLAIN: &str = "my-plain-secret-123";

/// Asserts the request carries a Standard Webhooks signature that verifies under `secret`.
fn assert_signed_with(r: &Recorded, secret: &str) {
    let id = r.header("webhook-id").expect("webhook-id header");
    let ts = r
        .header("webhook-timestamp")
        .expect("webhook-timestamp header");
    let signature = r
        .header("webhook-signature")
        .expect("webhook-signature header");
    assert!(
        sig::verify(secret, id, ts, &r.body, signature),
        "signature {signature:?} does not verify with {secret:?} (id {id}, timestamp {ts})"
    );
}

/// The pieces of `secret` that must never be shown: the whole and, for `whsec_`, its key part.
fn needles(secret: &str) -> Vec<String> {
    let mut out = vec![secret.to_string()];
    if let Some(b64) = secret.strip_prefix("whsec_") {
        out.push(b64.to_string());
    }
    out
}

/// Asserts `text` (an answer or a log line) shows no part of any secret.
fn assert_no_secret(text: &str, secrets: &[String], what: &str) {
    for s in secrets {
        assert!(
            !text.contains(s.as_str()),
            "{what} shows a secret ({s}): {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_appear_in_no_answer_and_no_log_line() {
    let mut world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let h = &world.herald;

    // One generated secret and two imported ones.
    let (status, created) = h
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({"url": recv.url("/generated")})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let generated = created["secret"].as_str().expect("secret").to_string();
    assert!(generated.starts_with("whsec_"), "{generated}");
    let ep_generated = created["endpoint"]["id"].as_str().unwrap().to_string();
    let (ep_whsec, shown) = world
        .endpoint(
            "acme",
            &recv.url("/whsec"),
            json!({"secret": IMPORTED_WHSEC}),
        )
        .await;
    assert_eq!(
        shown, IMPORTED_WHSEC,
        "the create answer shows the imported secret"
    );
    let (ep_plain, shown) = world
        .endpoint(
            "acme",
            &recv.url("/plain"),
            json!({"secret": IMPORTED_PLAIN}),
        )
        .await;
    assert_eq!(shown, IMPORTED_PLAIN);
    let mut secrets = needles(&generated);
    secrets.extend(needles(IMPORTED_WHSEC));
    secrets.extend(needles(IMPORTED_PLAIN));
    assert_no_secret(
        &created["endpoint"].to_string(),
        &secrets,
        "the endpoint object of the create answer",
    );

    // An event goes out, signed, to all three.
    let answer = world
        .ingest("acme", "interaction.review", json!({"stars": 5}))
        .await;
    let event_id = answer["event_id"].as_str().unwrap().to_string();
    let deliveries: Vec<String> = answer["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["delivery_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(deliveries.len(), 3, "{answer}");
    for id in &deliveries {
        world.wait_state(id, "delivered", SETTLE).await;
    }
    for r in recv.wait_for(3, SETTLE).await {
        let secret = match r.path.as_str() {
            "/generated" => generated.as_str(),
            "/whsec" => IMPORTED_WHSEC,
            _ => IMPORTED_PLAIN,
        };
        assert_signed_with(&r, secret);
    }

    // Every read of the API, raw text.
    let mut reads: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", "/v1/accounts/acme/endpoints".into(), None),
        ("GET", "/v1/deliveries".into(), None),
        ("GET", format!("/v1/events/{event_id}"), None),
        ("GET", "/v1/status".into(), None),
    ];
    for ep in [&ep_generated, &ep_whsec, &ep_plain] {
        reads.push(("GET", format!("/v1/endpoints/{ep}"), None));
        reads.push((
            "PATCH",
            format!("/v1/endpoints/{ep}"),
            Some(json!({"description": "patched"})),
        ));
        reads.push(("POST", format!("/v1/endpoints/{ep}/pause"), None));
        reads.push(("POST", format!("/v1/endpoints/{ep}/resume"), None));
    }
    for id in &deliveries {
        reads.push(("GET", format!("/v1/deliveries/{id}"), None));
    }
    for (method, path, body) in reads {
        let (headers, bytes): (&[(&str, &str)], Vec<u8>) = match &body {
            Some(b) => (
                &[("content-type", "application/json")],
                serde_json::to_vec(b).unwrap(),
            ),
            None => (&[], Vec::new()),
        };
        let (status, _, answer) = h
            .call_raw(method, &path, Some(ADMIN_TOKEN), headers, bytes)
            .await;
        let text = String::from_utf8_lossy(&answer);
        assert!(status < 500, "{method} {path}: {status} {text}");
        assert_no_secret(&text, &secrets, &format!("{method} {path}"));
    }

    // Stop herald so its whole log has been read, then search every line.
    let exit = world.herald.sigterm().await;
    assert!(exit.success(), "herald exits 0 on SIGTERM: {exit}");
    let logs = world.herald.logs();
    assert!(
        logs.iter().any(|l| l.contains("herald listening")),
        "the log was captured"
    );
    for line in &logs {
        assert_no_secret(line, &secrets, "a herald log line");
    }
}

/// Imports `secret` on a new endpoint, delivers one event with it and returns the request as
/// received (its signature already checked with `secret`): the parts a test of an imported
/// secret shares.
async fn delivered_with_imported(secret: &str) -> (Recorded, Value) {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let (_, shown) = world
        .endpoint("acme", &recv.url("/hook"), json!({ "secret": secret }))
        .await;
    assert_eq!(shown, secret);
    let answer = world
        .ingest("acme", "interaction.review", json!({"stars": 5}))
        .await;
    world
        .wait_state(&first_delivery(&answer), "delivered", SETTLE)
        .await;
    let r = recv.wait_for(1, SETTLE).await.remove(0);
    assert_eq!(r.header("webhook-id"), answer["event_id"].as_str());
    assert_signed_with(&r, secret);
    (r, answer)
}

/// Whether `key` verifies the request's signature.
fn verifies(r: &Recorded, key: &str) -> bool {
    let header = |n: &str| r.header(n).unwrap_or_default();
    sig::verify(
        key,
        header("webhook-id"),
        header("webhook-timestamp"),
        &r.body,
        header("webhook-signature"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_whsec_secret_signs_with_its_decoded_key() {
    let (r, _) = delivered_with_imported(IMPORTED_WHSEC).await;
    // The key is the decoded base64, not the text of the secret.
    assert!(
        !verifies(&r, "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
        "another key must not verify"
    );
    assert!(!verifies(&r, &IMPORTED_WHSEC.replace("whsec_", "plain-")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_plain_secret_signs_with_its_utf8_bytes() {
    let (r, _) = delivered_with_imported(IMPORTED_PLAIN).await;
    assert!(
        !verifies(&r, "my-plain-secret-124"),
        "another key must not verify"
    );
}
