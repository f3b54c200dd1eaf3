//! The receiver-facing contract (docs/delivery-contract.md): the verification handshake, custom
//! headers with account-secret macros, secret rotation, and the `sha256-hex` scheme.

use crate::common;

use std::time::Duration;

use common::herald::INGEST_TOKEN;
use common::{behaviour, first_delivery, sig, HeraldApi, Receiver, Reply, World};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const VERIFY: &str = "[endpoints]\nrequire_verification = true\n";
const SETTLE: Duration = Duration::from_secs(10);

fn hex_hmac(key: &[u8], data: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The answer an honest receiver gives to a challenge signed with [`SECRET`].
fn challenge_answer(r: &common::Recorded) -> String {
    let nonce = r.json()["nonce"].as_str().unwrap_or_default().to_string();
    hex_hmac(&sig::key_bytes(SECRET).unwrap(), nonce.as_bytes())
}

async fn verify<S: HeraldApi>(w: &World<S>, ep: &str) -> Value {
    let (status, v) = w
        .herald
        .admin("POST", &format!("/v1/endpoints/{ep}/verify"), None)
        .await;
    assert_eq!(status, 200, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unverified_endpoint_gets_nothing_until_the_handshake_succeeds() {
    let w = World::start("", VERIFY).await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|r, _| {
            if r.json()["type"] == "endpoint.verification" {
                Reply::status(200).with_body(challenge_answer(r))
            } else {
                Reply::status(200)
            }
        }),
    );
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({ "secret": SECRET }))
        .await;
    let d = w
        .wait_state(
            &first_delivery(&w.ingest("acc", "t.x", json!({})).await),
            "skipped",
            SETTLE,
        )
        .await;
    assert_eq!(d["last_status"], "unverified");
    assert_eq!(recv.count(), 0);

    let v = verify(&w, &ep).await;
    assert_eq!(v["verified"], true, "{v}");
    assert_eq!(v["reason"], Value::Null);
    assert_eq!(v["endpoint"]["verified"], true);
    // The challenge was signed like any delivery.
    let challenge = &recv.requests()[0];
    assert_eq!(
        challenge.header("herald-event-type"),
        Some("endpoint.verification")
    );
    assert!(sig::verify(
        SECRET,
        challenge.header("webhook-id").unwrap(),
        challenge.header("webhook-timestamp").unwrap(),
        &challenge.body,
        challenge.header("webhook-signature").unwrap()
    ));
    w.wait_state(
        &first_delivery(&w.ingest("acc", "t.x", json!({})).await),
        "delivered",
        SETTLE,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_accepts_a_json_hmac_answer() {
    let w = World::start("", VERIFY).await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|r, _| {
            Reply::status(200)
                .with_header("content-type", "application/json")
                .with_body(json!({ "hmac": challenge_answer(r) }).to_string())
        }),
    );
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({ "secret": SECRET }))
        .await;
    assert_eq!(verify(&w, &ep).await["verified"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_failures_say_why() {
    let w = World::start("timeout = \"400ms\"", VERIFY).await;
    let cases: [(common::Behaviour, &str); 3] = [
        (
            behaviour(|_, _| Reply::status(200).with_body("deadbeef")),
            "not the HMAC",
        ),
        (
            behaviour(|r, _| Reply::status(500).with_body(challenge_answer(r))),
            "HTTP 500",
        ),
        (
            behaviour(|_, _| Reply::status(200).with_delay(Duration::from_secs(5))),
            "timeout",
        ),
    ];
    for (b, why) in cases {
        let recv = Receiver::https(&w.ca, b);
        let (ep, _) = w
            .endpoint("acc", &recv.url("/hook"), json!({ "secret": SECRET }))
            .await;
        let v = verify(&w, &ep).await;
        assert_eq!(v["verified"], false, "{v}");
        assert!(v["reason"].as_str().unwrap().contains(why), "{why}: {v}");
        let (_, e) = w
            .herald
            .admin("GET", &format!("/v1/endpoints/{ep}"), None)
            .await;
        assert_eq!(e["verified"], false);
        w.herald
            .admin("DELETE", &format!("/v1/endpoints/{ep}"), None)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_change_clears_verified() {
    let w = World::start("", VERIFY).await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|r, _| Reply::status(200).with_body(challenge_answer(r))),
    );
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({ "secret": SECRET }))
        .await;
    assert_eq!(verify(&w, &ep).await["verified"], true);
    let (_, e) = w
        .herald
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ep}"),
            Some(json!({"description": "x"})),
        )
        .await;
    assert_eq!(
        e["verified"], true,
        "a change that keeps the URL keeps verified"
    );
    let (_, e) = w
        .herald
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ep}"),
            Some(json!({"url": recv.url("/other")})),
        )
        .await;
    assert_eq!(e["verified"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_headers_expand_account_secrets_at_send_time_and_never_show_them() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    let (status, _) = w
        .herald
        .admin(
            "PUT",
            "/v1/accounts/acc/secrets/API_KEY",
            Some(json!({"value": "k-9f8e7d6c5b4a"})),
        )
        .await;
    assert_eq!(status, 204);
    let (ep, _) = w
        .endpoint(
            "acc",
            &recv.url("/hook"),
            json!({"headers": {"X-Api-Key": "Bearer {{ secret.API_KEY }}", "x-static": "plain"}}),
        )
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "delivered", SETTLE).await;
    let r = &recv.requests()[0];
    assert_eq!(r.header("x-api-key"), Some("Bearer k-9f8e7d6c5b4a"));
    assert_eq!(r.header("x-static"), Some("plain"));

    // The log and the endpoint show the macro, never the secret.
    let (_, e) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert_eq!(e["headers"]["x-api-key"], "Bearer {{ secret.API_KEY }}");
    assert_eq!(
        d["attempts"][0]["request_headers"]["x-api-key"],
        "Bearer {{ secret.API_KEY }}"
    );
    assert!(!d.to_string().contains("k-9f8e7d6c5b4a"));
    assert!(!w.herald.log_text().contains("k-9f8e7d6c5b4a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_secret_names_are_checked_and_underscore_names_reserved() {
    let w = World::start("", "").await;
    for (name, body, field) in [
        ("_internal", json!({"value": "x"}), "name"),
        ("bad-name", json!({"value": "x"}), "name"),
        ("OK", json!({"value": ""}), "value"),
        ("OK", json!({"value": "a\nb"}), "value"),
        ("OK", json!({}), "value"),
    ] {
        let (status, e) = w
            .herald
            .admin(
                "PUT",
                &format!("/v1/accounts/acc/secrets/{name}"),
                Some(body),
            )
            .await;
        assert_eq!(status, 422, "{name}: {e}");
        assert_eq!(e["error"]["field"], field, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_secrets_sign_during_rotation_and_only_the_new_one_after_the_grace() {
    // 2026-12-02T12:00:00Z on a manual clock, grace 1 h.
    let start = 1_796_212_800_000;
    let w = World::start_manual("", "[signing]\nrotation_grace = \"1h\"\n", start).await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, old) = w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    let (status, rotated) = w
        .herald
        .admin("POST", &format!("/v1/endpoints/{ep}/secret/rotate"), None)
        .await;
    assert_eq!(status, 200, "{rotated}");
    let new = rotated["secret"].as_str().unwrap().to_string();
    assert!(new.starts_with("whsec_") && new != old);

    let check = |r: &common::Recorded, secret: &str| {
        sig::verify(
            secret,
            r.header("webhook-id").unwrap(),
            r.header("webhook-timestamp").unwrap(),
            &r.body,
            r.header("webhook-signature").unwrap(),
        )
    };
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    w.wait_state(&id, "delivered", SETTLE).await;
    let r = &recv.requests()[0];
    assert_eq!(r.header("webhook-signature").unwrap().split(' ').count(), 2);
    assert!(check(r, &old), "old secret must verify during the grace");
    assert!(check(r, &new), "new secret must verify");

    w.herald.clock.set(start + 3_600_000 + 1_000);
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    w.wait_state(&id, "delivered", SETTLE).await;
    let r = &recv.requests()[1];
    assert_eq!(r.header("webhook-signature").unwrap().split(' ').count(), 1);
    assert!(check(r, &new));
    assert!(
        !check(r, &old),
        "old secret must stop signing after the grace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sha256_hex_scheme_adds_a_hex_body_signature() {
    let w = World::start("", "[signing]\nschemes = [\"standard\", \"sha256-hex\"]\n").await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({ "secret": SECRET }))
        .await;
    let body = br#"{"account_id":"acc","type":"t.x","payload":{ "a" : 1 }}"#.to_vec();
    let (status, _, _) = w
        .herald
        .call_raw(
            "POST",
            "/v1/events",
            Some(INGEST_TOKEN),
            &[("content-type", "application/json")],
            body,
        )
        .await;
    assert_eq!(status, 202);
    let r = &recv.wait_for(1, SETTLE).await[0];
    let want = format!(
        "sha256={}",
        hex_hmac(&sig::key_bytes(SECRET).unwrap(), br#"{ "a" : 1 }"#)
    );
    assert_eq!(r.header("herald-signature"), Some(want.as_str()));
    // The Standard Webhooks signature is still there.
    assert!(r.header("webhook-signature").unwrap().starts_with("v1,"));
}

/// Verifies `v1a` signatures with the `whpk_` key, independently of herald's code.
fn verify_v1a(public_key: &str, r: &common::Recorded) -> bool {
    use base64::Engine;
    use ring::signature::{UnparsedPublicKey, ED25519};
    let b64 = base64::engine::general_purpose::STANDARD;
    let pk = b64
        .decode(public_key.strip_prefix("whpk_").unwrap())
        .unwrap();
    let content = [
        r.header("webhook-id").unwrap().as_bytes(),
        b".",
        r.header("webhook-timestamp").unwrap().as_bytes(),
        b".",
        &r.body,
    ]
    .concat();
    r.header("webhook-signature").unwrap().split(' ').any(|s| {
        s.strip_prefix("v1a,")
            .and_then(|sig| b64.decode(sig).ok())
            .is_some_and(|sig| {
                UnparsedPublicKey::new(&ED25519, &pk)
                    .verify(&content, &sig)
                    .is_ok()
            })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed25519_endpoint_signs_v1a_and_shows_only_the_public_key() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    let (status, created) = w
        .herald
        .admin(
            "POST",
            "/v1/accounts/acc/endpoints",
            Some(json!({"url": recv.url("/hook"), "signature": "ed25519"})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert!(
        created.get("secret").is_none(),
        "the private key is never shown"
    );
    let pk = created["public_key"].as_str().unwrap().to_string();
    assert!(pk.starts_with("whpk_"));
    let ep = created["endpoint"]["id"].as_str().unwrap().to_string();
    assert_eq!(created["endpoint"]["signature"], "ed25519");
    let (_, got) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert_eq!(got["public_key"], pk.as_str());
    assert!(!got.to_string().contains("whsk_"));

    w.ingest("acc", "t.x", json!({"a": 1})).await;
    let r = &recv.wait_for(1, SETTLE).await[0];
    assert!(r.header("webhook-signature").unwrap().starts_with("v1a,"));
    assert!(
        verify_v1a(&pk, r),
        "v1a signature does not verify with the public key"
    );

    // Rotation: a new public key; both keys sign during the grace.
    let (status, rotated) = w
        .herald
        .admin("POST", &format!("/v1/endpoints/{ep}/secret/rotate"), None)
        .await;
    assert_eq!(status, 200);
    let new_pk = rotated["public_key"].as_str().unwrap().to_string();
    assert!(rotated.get("secret").is_none() && new_pk != pk);
    w.ingest("acc", "t.x", json!({"a": 2})).await;
    let r = &recv.wait_for(2, SETTLE).await[1];
    assert!(verify_v1a(&pk, r) && verify_v1a(&new_pk, r));
    assert!(!w.herald.log_text().contains("whsk_"));
}
