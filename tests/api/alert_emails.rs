//! An account's failure alert addresses through the API (docs/api.md): `PUT
//! /v1/accounts/{id}` changes only the fields it names, every bad input is refused naming its
//! field and changes nothing, and a portal session may set its own account's addresses but not
//! its plan.

use crate::common;

use common::herald::ADMIN_TOKEN;
use common::{HeraldApi, World};
use serde_json::{json, Value};

const T0: i64 = 1_796_212_800_000;

const PLANS: &str = "[plans.pro]\nper_minute = 10\n[plans.free]\nwebhooks = false\n";

async fn put(w: &World<common::InProc>, token: &str, body: Value) -> (u16, Value) {
    w.herald
        .call("PUT", "/v1/accounts/acme", Some(token), Some(body))
        .await
}

async fn account(w: &World<common::InProc>) -> Value {
    let (status, v) = w.herald.admin("GET", "/v1/accounts/acme", None).await;
    assert_eq!(status, 200, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_changes_only_the_fields_it_names_and_refuses_bad_input_changing_nothing() {
    let w = World::start_manual("", PLANS, T0).await;
    let (status, v) = put(&w, ADMIN_TOKEN, json!({"plan": "pro"})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["alert_emails"], json!([]), "{v}");
    let (status, v) = put(
        &w,
        ADMIN_TOKEN,
        json!({"alert_emails": ["ops@acme.test", "Oncall+herald@sub.acme.test"]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["plan"], "pro", "the plan stays: {v}");
    assert_eq!(
        v["alert_emails"],
        json!(["ops@acme.test", "Oncall+herald@sub.acme.test"])
    );
    let (status, v) = put(&w, ADMIN_TOKEN, json!({"plan": "free"})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["alert_emails"].as_array().map(Vec::len), Some(2), "{v}");
    // Both at once.
    let (status, v) = put(
        &w,
        ADMIN_TOKEN,
        json!({"plan": null, "alert_emails": ["ops@acme.test"]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["plan"].clone(), v["alert_emails"].clone()),
        (Value::Null, json!(["ops@acme.test"]))
    );
    let before = account(&w).await;

    let six: Vec<String> = (0..6).map(|i| format!("a{i}@acme.test")).collect();
    for (body, field, code) in [
        (json!({}), "plan", "invalid_field"),
        (json!({"alerts": []}), "", "invalid_body"),
        (
            json!({"alert_emails": "ops@acme.test"}),
            "alert_emails",
            "invalid_field",
        ),
        (
            json!({"alert_emails": null}),
            "alert_emails",
            "invalid_field",
        ),
        (
            json!({"alert_emails": six}),
            "alert_emails",
            "invalid_field",
        ),
        (
            json!({"alert_emails": ["ops@acme.test", "not an address"]}),
            "alert_emails[1]",
            "invalid_field",
        ),
        (
            json!({"alert_emails": ["ops@acme.test", 7]}),
            "alert_emails[1]",
            "invalid_field",
        ),
        (
            json!({"alert_emails": ["a@acme.test", "A@ACME.test"]}),
            "alert_emails[1]",
            "invalid_field",
        ),
        (
            json!({"alert_emails": ["x@acme.test"], "plan": "nope"}),
            "plan",
            "invalid_field",
        ),
    ] {
        let (status, v) = put(&w, ADMIN_TOKEN, body.clone()).await;
        assert_eq!(status, 422, "{body}: {v}");
        if !field.is_empty() {
            assert_eq!(v["error"]["field"], field, "{body}: {v}");
            assert_eq!(v["error"]["code"], code, "{body}: {v}");
        }
        assert_eq!(account(&w).await, before, "{body} changed nothing");
    }
    let (_, v) = put(&w, ADMIN_TOKEN, json!({})).await;
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("plan") && message.contains("alert_emails"),
        "{message}"
    );
    // [] clears them; the list of accounts shows them.
    put(&w, ADMIN_TOKEN, json!({"alert_emails": []})).await;
    assert_eq!(account(&w).await["alert_emails"], json!([]));
    put(&w, ADMIN_TOKEN, json!({"alert_emails": ["ops@acme.test"]})).await;
    w.herald
        .admin(
            "PUT",
            "/v1/accounts/lonely",
            Some(json!({"alert_emails": ["me@lonely.test"]})),
        )
        .await;
    let (_, list) = w.herald.admin("GET", "/v1/accounts", None).await;
    let items = list["items"].as_array().unwrap();
    let of = |id: &str| {
        items
            .iter()
            .find(|a| a["account_id"] == id)
            .unwrap_or_else(|| panic!("{id} listed: {list}"))["alert_emails"]
            .clone()
    };
    assert_eq!(of("acme"), json!(["ops@acme.test"]));
    assert_eq!(of("lonely"), json!(["me@lonely.test"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_session_sets_its_own_accounts_addresses_but_never_the_plan() {
    let w = World::start_manual("", PLANS, T0).await;
    let h = &w.herald;
    let session = |body: Value| async move {
        let (status, s) = h
            .admin("POST", "/v1/accounts/acme/portal-sessions", Some(body))
            .await;
        assert_eq!(status, 201, "{s}");
        s["token"].as_str().unwrap().to_string()
    };
    let portal = session(json!({})).await;
    let read_only = session(json!({"read_only": true})).await;
    put(&w, ADMIN_TOKEN, json!({"plan": "pro"})).await;

    let (status, v) = put(&w, &portal, json!({"alert_emails": ["ops@acme.test"]})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["alert_emails"], json!(["ops@acme.test"]));
    let (status, v) = h
        .call("GET", "/v1/accounts/acme", Some(&portal), None)
        .await;
    assert_eq!((status, v["plan"].clone()), (200, json!("pro")), "{v}");

    for body in [
        json!({"plan": "free"}),
        json!({"plan": null}),
        json!({"plan": "pro", "alert_emails": []}),
    ] {
        let (status, v) = put(&w, &portal, body.clone()).await;
        assert_eq!(status, 403, "{body}: {v}");
        assert_eq!(v["error"]["code"], "admin_only", "{v}");
    }
    let (status, v) = put(&w, &read_only, json!({"alert_emails": []})).await;
    assert_eq!(
        (status, v["error"]["code"].clone()),
        (403, json!("read_only")),
        "{v}"
    );
    let (status, v) = h
        .call("GET", "/v1/accounts/acme", Some(&read_only), None)
        .await;
    assert_eq!(status, 200, "a read-only session reads the account: {v}");
    // Another account does not exist for the session.
    let (status, _) = h
        .call(
            "PUT",
            "/v1/accounts/other",
            Some(&portal),
            Some(json!({"alert_emails": []})),
        )
        .await;
    assert_eq!(status, 404);
    let v = account(&w).await;
    assert_eq!(
        (v["plan"].clone(), v["alert_emails"].clone()),
        (json!("pro"), json!(["ops@acme.test"])),
        "refused requests changed nothing"
    );
}

/// An address the rule refuses, and an endpoint URL the checks refuse, name their rule in
/// `reason` (docs/api.md, "Errors"), beside `code` and `field`, so the portal shows its own
/// words without reading the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_addresses_and_urls_name_the_rule_they_broke() {
    let w = World::start_manual("", PLANS, T0).await;
    for (addr, reason) in [
        ("no-at.example.com", "no_at"),
        ("a@b@example.com", "several_at"),
        ("\"quoted\"@example.com", "quoted_local_part"),
        ("ops%relay@example.com", "routing"),
        ("ops@[127.0.0.1]", "ip_literal"),
        ("ops@localhost", "domain"),
        ("opś@example.com", "not_ascii"),
        (".ops@example.com", "local_part"),
    ] {
        let (status, e) = put(
            &w,
            ADMIN_TOKEN,
            json!({"alert_emails": ["ok@example.com", addr]}),
        )
        .await;
        assert_eq!(status, 422, "{addr}: {e}");
        assert_eq!(
            (
                &e["error"]["code"],
                &e["error"]["field"],
                &e["error"]["reason"]
            ),
            (
                &json!("invalid_field"),
                &json!("alert_emails[1]"),
                &json!(reason)
            ),
            "{addr}: {e}"
        );
    }
    let (_, e) = put(
        &w,
        ADMIN_TOKEN,
        json!({"alert_emails": ["a@example.com", "A@example.com"]}),
    )
    .await;
    assert_eq!(e["error"]["reason"], "repeated", "{e}");
    let long = format!("https://example.com/{}", "x".repeat(2048));
    for (url, reason) in [
        ("not a url", "invalid_url"),
        ("http://example.com/hook", "not_https"),
        ("https://user:pw@example.com/hook", "user_info"),
        ("https://10.0.0.7/hook", "private_address"),
        (long.as_str(), "too_long"),
    ] {
        let (status, e) = w
            .herald
            .admin(
                "POST",
                "/v1/accounts/acme/endpoints",
                Some(json!({ "url": url })),
            )
            .await;
        assert_eq!(status, 422, "{url}: {e}");
        assert_eq!(
            (&e["error"]["field"], &e["error"]["reason"]),
            (&json!("url"), &json!(reason)),
            "{url}: {e}"
        );
    }
    // Other errors carry no reason.
    let (_, e) = put(&w, ADMIN_TOKEN, json!({"alert_emails": "ops@example.com"})).await;
    assert_eq!(e["error"].get("reason"), None, "{e}");
}
