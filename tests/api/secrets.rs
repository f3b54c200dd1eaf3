//! Signing secrets (docs/delivery-contract.md, docs/api.md and docs/operations.md): shown only in
//! the create answer, never in any later answer nor in any log line; imported secrets sign as the
//! Standard Webhooks spec says (`whsec_` → its base64-decoded key; anything else → its UTF-8
//! bytes).

use crate::common;

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

/// docs/api.md: a portal session cannot send an account secret to a URL of its choosing. It gets
/// `403 secret_macro` when it adds or changes a header value that uses `{{ secret.…}}` (any
/// spelling the expansion takes), or gives a new URL to an endpoint whose stored headers use
/// one; values sent unchanged are accepted (the portal's Save sends every field). The admin
/// token may do both. Nothing the portal tried reaches its receiver with the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_session_cannot_send_an_account_secret_to_its_own_url() {
    const SECRET: &str = "operator-api-key-0123456789";
    let world = World::start("", "").await;
    let h = &world.herald;
    let theirs = Receiver::ok_https(&world.ca);
    let (status, _) = h
        .admin(
            "PUT",
            "/v1/accounts/acct/secrets/API_KEY",
            Some(json!({"value": SECRET})),
        )
        .await;
    assert_eq!(status, 204);
    let (status, s) = h
        .admin("POST", "/v1/accounts/acct/portal-sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{s}");
    let portal = s["token"].as_str().unwrap().to_string();
    let as_portal = |method: &'static str, path: String, body: Value| {
        let portal = portal.clone();
        async move { h.call(method, &path, Some(&portal), Some(body)).await }
    };
    let refused = |(status, answer): (u16, Value), field: &str| {
        assert_eq!(status, 403, "{answer}");
        assert_eq!(answer["error"]["code"], "secret_macro", "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    };

    // Creating one with a macro, in every spelling the expansion takes.
    for value in [
        "{{ secret.API_KEY }}",
        "{{secret.API_KEY}}",
        "Bearer {{\tsecret.API_KEY }}",
    ] {
        let answer = as_portal(
            "POST",
            "/v1/accounts/acct/endpoints".into(),
            json!({"url": theirs.url("/grab"), "headers": {"x-grab": value}}),
        )
        .await;
        refused(answer, "headers.x-grab");
    }
    // Their own endpoint, without a macro: fine; adding one later is refused.
    let (status, created) = as_portal(
        "POST",
        "/v1/accounts/acct/endpoints".into(),
        json!({"url": theirs.url("/own"), "headers": {"x-plain": "1"}}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let own = created["endpoint"]["id"].as_str().unwrap().to_string();
    let answer = as_portal(
        "PATCH",
        format!("/v1/endpoints/{own}"),
        json!({"headers": {"x-plain": "1", "x-grab": "{{ secret.API_KEY }}"}}),
    )
    .await;
    refused(answer, "headers.x-grab");

    // The operator's endpoint that carries the secret, at the operator's chosen receiver.
    let operators = Receiver::ok_https(&world.ca);
    let (ep, _) = world
        .endpoint(
            "acct",
            &operators.url("/hook"),
            json!({"headers": {"authorization": "Bearer {{ secret.API_KEY }}"}}),
        )
        .await;
    // Moving it to the portal's URL, alone or with its headers sent unchanged, is refused.
    let answer = as_portal(
        "PATCH",
        format!("/v1/endpoints/{ep}"),
        json!({"url": theirs.url("/moved")}),
    )
    .await;
    refused(answer, "url");
    let answer = as_portal(
        "PATCH",
        format!("/v1/endpoints/{ep}"),
        json!({"url": theirs.url("/moved"),
               "headers": {"authorization": "Bearer {{ secret.API_KEY }}"}}),
    )
    .await;
    refused(answer, "url");
    // Copying the macro into another header is a change.
    let answer = as_portal(
        "PATCH",
        format!("/v1/endpoints/{ep}"),
        json!({"headers": {"authorization": "Bearer {{ secret.API_KEY }}",
                           "x-copy": "{{ secret.API_KEY }}"}}),
    )
    .await;
    refused(answer, "headers.x-copy");
    // The portal's Save: every field sent, the URL and headers unchanged.
    let (_, stored) = h.admin("GET", &format!("/v1/endpoints/{ep}"), None).await;
    let (status, saved) = as_portal(
        "PATCH",
        format!("/v1/endpoints/{ep}"),
        json!({"url": stored["url"], "headers": stored["headers"],
               "description": "edited in the portal", "event_types": []}),
    )
    .await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved["description"], "edited in the portal");
    assert_eq!(saved["url"], stored["url"]);

    // The refusals changed nothing.
    let (_, list) = h.admin("GET", "/v1/accounts/acct/endpoints", None).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "{list}");
    let (_, own_now) = h.admin("GET", &format!("/v1/endpoints/{own}"), None).await;
    assert_eq!(own_now["headers"], json!({"x-plain": "1"}));

    // The test event of both endpoints: the secret goes only to the operator's receiver.
    for id in [&own, &ep] {
        let (status, answer) =
            as_portal("POST", format!("/v1/endpoints/{id}/test"), json!({})).await;
        assert_eq!(status, 200, "{answer}");
    }
    assert!(
        !theirs.requests().is_empty(),
        "the portal's test event arrived"
    );
    for r in theirs.requests() {
        for (name, value) in &r.headers {
            assert!(
                !value.contains(SECRET),
                "the portal's receiver got it in {name}"
            );
        }
    }
    assert_eq!(
        operators.requests()[0].header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );

    // The admin token may do both.
    let (status, answer) = h
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ep}"),
            Some(json!({"url": operators.url("/other"),
                        "headers": {"x-copy": "{{ secret.API_KEY }}"}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
}

/// docs/api.md: secrets never count toward an endpoint's 7 KiB. An endpoint whose other fields
/// (a 3.9 KiB filter, headers, a description) fill the bound to the byte rotates its secret as
/// often as asked, by the admin token and by a portal session alike, never `422 too_large`; the
/// newest secret signs, also after a restart (the stored secrets are read back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_at_the_size_bound_rotates_its_secret_as_often_as_asked() {
    let mut world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let h = &world.herald;
    let filter = json!({"payload": {"note": {"$neq": "n".repeat(3_870)}}});
    assert!(filter.to_string().len() > 3_800, "a 3.9 KiB filter");
    let (status, created) = h
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({
                "url": recv.url("/hook"),
                "filter": filter,
                "headers": {"x-a": "a".repeat(1_000), "x-b": "b".repeat(1_000)},
            })),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["endpoint"]["id"].as_str().unwrap().to_string();
    // The longest description the endpoint takes: one more byte is `too_large`.
    let (mut fits, mut refused) = (0usize, 1_025usize);
    while refused - fits > 1 {
        let len = (fits + refused) / 2;
        let (status, answer) = h
            .admin(
                "PATCH",
                &format!("/v1/endpoints/{id}"),
                Some(json!({"description": "d".repeat(len)})),
            )
            .await;
        match status {
            200 => fits = len,
            422 => {
                assert_eq!(answer["error"]["code"], "too_large", "{answer}");
                refused = len;
            }
            other => panic!("PATCH answered {other}: {answer}"),
        }
    }
    assert!(
        (1..1_024).contains(&fits),
        "the description fills the endpoint to its bound ({fits} bytes)"
    );
    let (status, answer) = h
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{id}"),
            Some(json!({"description": "d".repeat(fits)})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");

    let (status, s) = h
        .admin("POST", "/v1/accounts/acme/portal-sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{s}");
    let portal = s["token"].as_str().unwrap().to_string();
    let rotate = format!("/v1/endpoints/{id}/secret/rotate");
    let mut newest = String::new();
    for (who, token) in [("admin", ADMIN_TOKEN), ("portal", portal.as_str())] {
        for n in 1..=6 {
            let (status, answer) = h.call("POST", &rotate, Some(token), None).await;
            assert_eq!(status, 200, "rotation {n} by the {who}: {answer}");
            newest = answer["secret"].as_str().expect("secret").to_string();
        }
    }
    let (status, ep) = h.admin("GET", &format!("/v1/endpoints/{id}"), None).await;
    assert_eq!(status, 200, "{ep}");
    assert_eq!(ep["description"].as_str().unwrap().len(), fits);
    assert_no_secret(&ep.to_string(), &needles(&newest), "the endpoint");

    let (status, answer) = h
        .admin("POST", &format!("/v1/endpoints/{id}/test"), Some(json!({})))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_signed_with(&recv.wait_for(1, SETTLE).await[0], &newest);
    world.herald.restart().await;
    let h = &world.herald;
    let (status, answer) = h
        .admin("POST", &format!("/v1/endpoints/{id}/test"), Some(json!({})))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_signed_with(&recv.wait_for(2, SETTLE).await[1], &newest);
}
