//! The delivery log, retry and the endpoints API (docs/api.md, docs/operations.md): listing
//! deliveries newest first with every filter and a cursor, one delivery with every attempt, one
//! event with its payload, the manual retry, endpoint CRUD, pause and resume, limits, `/v1/status`
//! and `/healthz`.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use common::herald::INGEST_TOKEN;
use common::{behaviour, first_delivery, wait_until, HeraldApi, Receiver, Reply, World};

/// Long enough for a local delivery on a loaded 2-core machine.
const SETTLE: Duration = Duration::from_secs(15);

// --- helpers ---------------------------------------------------------------------------------

/// Asserts a time is RFC 3339 UTC with milliseconds (`2026-12-02T10:00:09.528Z`); returns it as
/// Unix milliseconds.
fn time_ms(v: &Value, what: &str) -> i64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {v}"));
    let b = s.as_bytes();
    assert!(
        b.len() == 24 && b[10] == b'T' && b[19] == b'.' && b[23] == b'Z',
        "{what}: {s:?} is not RFC 3339 UTC with milliseconds"
    );
    let t = humantime::parse_rfc3339(s).unwrap_or_else(|e| panic!("{what}: {s:?}: {e}"));
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Unix milliseconds as the API writes them.
fn rfc3339(ms: i64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms as u64)).to_string()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Waits until the wall clock is past `ms + 2`, so whatever is created next is stamped at least
/// 3 ms later and a time strictly between the two exists.
async fn clock_past(ms: i64) {
    wait_until(
        Duration::from_secs(2),
        "the wall clock moves on",
        || async { now_ms() > ms + 2 },
    )
    .await;
}

fn ids(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {list}"))
        .iter()
        .map(|d| d["id"].as_str().expect("item id").to_string())
        .collect()
}

fn assert_error(got: &(u16, Value), status: u16, code: &str, field: Option<&str>, what: &str) {
    let (s, body) = got;
    assert_eq!(*s, status, "{what}: status; answer {body}");
    assert_eq!(body["error"]["code"], code, "{what}: code; answer {body}");
    if let Some(field) = field {
        assert_eq!(
            body["error"]["field"], field,
            "{what}: field; answer {body}"
        );
    }
}

/// First value of a header in an attempt's `request_headers` object (case-insensitive).
fn request_header<'a>(attempt: &'a Value, name: &str) -> Option<&'a str> {
    attempt["request_headers"]
        .as_object()
        .unwrap_or_else(|| panic!("request_headers is not an object: {attempt}"))
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.as_str())
}

/// Three settled deliveries of three accounts, created at least 3 ms apart, oldest first:
/// `delivered` (acme, interaction.review, to `ok_endpoint`), `failed` (globex, profile.updated,
/// `http_error` 404 with policy `none`, to `gone_endpoint`) and `skipped` (initech,
/// interaction.review, `no_endpoint`).
struct Seeded {
    world: World,
    _ok: Receiver,
    _not_found: Receiver,
    ok_endpoint: String,
    gone_endpoint: String,
    delivered: Value,
    failed: Value,
    skipped: Value,
}

impl Seeded {
    async fn new() -> Seeded {
        let world = World::start("", "").await;
        let ok = Receiver::ok_https(&world.ca);
        let not_found = Receiver::https(&world.ca, behaviour(|_, _| Reply::status(404)));
        let (ok_endpoint, _) = world.endpoint("acme", &ok.url("/hook"), json!({})).await;
        let (gone_endpoint, _) = world
            .endpoint(
                "globex",
                &not_found.url("/hook"),
                json!({"retry_policy": "none"}),
            )
            .await;

        let a = world.ingest("acme", "interaction.review", json!({})).await;
        let delivered = world
            .wait_state(&first_delivery(&a), "delivered", SETTLE)
            .await;
        clock_past(time_ms(&delivered["created_at"], "created_at")).await;

        let b = world.ingest("globex", "profile.updated", json!({})).await;
        let failed = world
            .wait_state(&first_delivery(&b), "failed", SETTLE)
            .await;
        clock_past(time_ms(&failed["created_at"], "created_at")).await;

        let c = world
            .ingest("initech", "interaction.review", json!({}))
            .await;
        let skipped = world
            .wait_state(&first_delivery(&c), "skipped", SETTLE)
            .await;
        Seeded {
            world,
            _ok: ok,
            _not_found: not_found,
            ok_endpoint,
            gone_endpoint,
            delivered,
            failed,
            skipped,
        }
    }

    fn id(d: &Value) -> String {
        d["id"].as_str().expect("delivery id").to_string()
    }

    fn created(d: &Value) -> i64 {
        time_ms(&d["created_at"], "created_at")
    }

    /// The ids `GET /v1/deliveries?{query}` lists.
    async fn list(&self, query: &str) -> Vec<String> {
        let (status, list) = self
            .world
            .herald
            .admin("GET", &format!("/v1/deliveries?{query}"), None)
            .await;
        assert_eq!(status, 200, "?{query}: {list}");
        assert_eq!(list["next_cursor"], Value::Null, "?{query}: {list}");
        ids(&list)
    }
}

// --- the delivery list -----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_list_newest_first_with_every_field() {
    let s = Seeded::new().await;
    let (status, list) = s.world.herald.admin("GET", "/v1/deliveries", None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["next_cursor"], Value::Null, "{list}");
    assert_eq!(
        ids(&list),
        [
            Seeded::id(&s.skipped),
            Seeded::id(&s.failed),
            Seeded::id(&s.delivered)
        ]
    );
    let items = list["items"].as_array().unwrap();
    let expect = [
        ("initech", Value::Null, "skipped", "no_endpoint"),
        ("globex", json!(s.gone_endpoint), "failed", "http_error"),
        ("acme", json!(s.ok_endpoint), "delivered", "delivered"),
    ];
    for (item, (account, endpoint, state, last_status)) in items.iter().zip(expect) {
        assert!(item["id"].as_str().unwrap().starts_with("dlv_"), "{item}");
        assert!(
            item["event_id"]
                .as_str()
                .is_some_and(|e| e.starts_with("evt_")),
            "{item}"
        );
        assert_eq!(item["account_id"], account, "{item}");
        assert_eq!(item["endpoint_id"], endpoint, "{item}");
        assert_eq!(item["state"], state, "{item}");
        assert_eq!(item["last_status"], last_status, "{item}");
        assert_eq!(item["attempt_count"], 1, "{item}");
        assert_eq!(
            item["next_attempt_at"],
            Value::Null,
            "a settled delivery has no next attempt: {item}"
        );
        time_ms(&item["created_at"], "created_at");
        assert!(item["event_type"].is_string(), "{item}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_filter_by_account_id() {
    let s = Seeded::new().await;
    assert_eq!(s.list("account_id=acme").await, [Seeded::id(&s.delivered)]);
    assert_eq!(s.list("account_id=globex").await, [Seeded::id(&s.failed)]);
    assert_eq!(s.list("account_id=nobody").await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_filter_by_endpoint_id() {
    let s = Seeded::new().await;
    assert_eq!(
        s.list(&format!("endpoint_id={}", s.ok_endpoint)).await,
        [Seeded::id(&s.delivered)]
    );
    assert_eq!(
        s.list(&format!("endpoint_id={}", s.gone_endpoint)).await,
        [Seeded::id(&s.failed)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_filter_by_event_type() {
    let s = Seeded::new().await;
    assert_eq!(
        s.list("event_type=interaction.review").await,
        [Seeded::id(&s.skipped), Seeded::id(&s.delivered)]
    );
    assert_eq!(
        s.list("event_type=profile.updated").await,
        [Seeded::id(&s.failed)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_filter_by_state() {
    let s = Seeded::new().await;
    assert_eq!(s.list("state=delivered").await, [Seeded::id(&s.delivered)]);
    assert_eq!(s.list("state=failed").await, [Seeded::id(&s.failed)]);
    assert_eq!(s.list("state=skipped").await, [Seeded::id(&s.skipped)]);
    assert_eq!(s.list("state=pending").await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_filter_by_status() {
    let s = Seeded::new().await;
    assert_eq!(s.list("status=delivered").await, [Seeded::id(&s.delivered)]);
    assert_eq!(s.list("status=http_error").await, [Seeded::id(&s.failed)]);
    assert_eq!(s.list("status=no_endpoint").await, [Seeded::id(&s.skipped)]);
    assert_eq!(s.list("status=timeout").await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_filter_by_since_and_until() {
    let s = Seeded::new().await;
    // Times strictly between the deliveries, so inclusive or exclusive bounds do not matter.
    let after_first = rfc3339(Seeded::created(&s.delivered) + 1);
    let after_second = rfc3339(Seeded::created(&s.failed) + 1);
    assert_eq!(
        s.list(&format!("since={after_first}")).await,
        [Seeded::id(&s.skipped), Seeded::id(&s.failed)]
    );
    assert_eq!(
        s.list(&format!("until={after_second}")).await,
        [Seeded::id(&s.failed), Seeded::id(&s.delivered)]
    );
    assert_eq!(
        s.list(&format!("since={after_first}&until={after_second}"))
            .await,
        [Seeded::id(&s.failed)]
    );
    // Filters combine.
    assert_eq!(
        s.list(&format!(
            "since={after_first}&event_type=interaction.review"
        ))
        .await,
        [Seeded::id(&s.skipped)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_since_and_until_take_rfc3339_times_with_an_offset() {
    let s = Seeded::new().await;
    // The same instants as in the UTC test, written with a +02:00 offset (valid RFC 3339).
    let with_offset = |ms: i64| {
        let utc = rfc3339(ms + 2 * 3600 * 1000);
        format!("{}%2B02:00", utc.trim_end_matches('Z'))
    };
    let after_first = with_offset(Seeded::created(&s.delivered) + 1);
    let after_second = with_offset(Seeded::created(&s.failed) + 1);
    assert_eq!(
        s.list(&format!("since={after_first}&until={after_second}"))
            .await,
        [Seeded::id(&s.failed)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_paging_with_limit_and_cursor_walks_every_item_once() {
    let world = World::start("", "").await;
    for n in 0..7 {
        world.ingest("acme", "t.paged", json!({ "n": n })).await;
    }
    let (_, all) = world
        .herald
        .admin("GET", "/v1/deliveries?limit=500", None)
        .await;
    let all = ids(&all);
    assert_eq!(all.len(), 7);

    let mut walked = Vec::new();
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/deliveries?limit=3&cursor={c}"),
            None => "/v1/deliveries?limit=3".to_string(),
        };
        let (status, page) = world.herald.admin("GET", &path, None).await;
        assert_eq!(status, 200, "{path}: {page}");
        let page_ids = ids(&page);
        pages.push(page_ids.len());
        walked.extend(page_ids);
        match &page["next_cursor"] {
            Value::Null => break,
            Value::String(c) => cursor = Some(c.clone()),
            other => panic!("next_cursor must be a string or null: {other}"),
        }
        assert!(pages.len() <= 7, "paging does not end: {pages:?}");
    }
    assert_eq!(pages, [3, 3, 1]);
    assert_eq!(walked, all, "every item exactly once, newest first");
    let unique: BTreeSet<&String> = walked.iter().collect();
    assert_eq!(unique.len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_delivery_query_values_are_422_naming_the_field() {
    let world = World::start("", "").await;
    for (query, field) in [
        ("state=bogus", "state"),
        ("state=Delivered", "state"),
        ("status=bogus", "status"),
        ("status=ok", "status"),
        ("limit=0", "limit"),
        ("limit=abc", "limit"),
        ("limit=-1", "limit"),
        ("since=yesterday", "since"),
        ("since=2026-13-45T00:00:00Z", "since"),
        ("until=soon", "until"),
        ("cursor=not-a-cursor", "cursor"),
    ] {
        let got = world
            .herald
            .admin("GET", &format!("/v1/deliveries?{query}"), None)
            .await;
        assert_error(&got, 422, "invalid_field", Some(field), query);
    }
}

// --- one delivery, one event, retry ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_delivery_shows_every_attempt_with_all_fields() {
    let world = World::start("", "[retry_policies]\nfast = [\"50ms\", \"50ms\"]\n").await;
    let recv = Receiver::https(
        &world.ca,
        behaviour(|_, i| match i {
            0 => Reply::status(500).with_body("boom"),
            1 => Reply::status(503).with_body("later"),
            _ => Reply::status(200).with_body("thanks"),
        }),
    );
    let (endpoint_id, _) = world
        .endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "fast"}))
        .await;
    let answer = world
        .ingest("acme", "interaction.review", json!({"stars": 4}))
        .await;
    let event_id = answer["event_id"].as_str().unwrap();
    let delivery_id = first_delivery(&answer);
    let d = world.wait_state(&delivery_id, "delivered", SETTLE).await;

    assert_eq!(d["id"], delivery_id.as_str(), "{d}");
    assert_eq!(d["event_id"], event_id, "{d}");
    assert_eq!(d["endpoint_id"], endpoint_id.as_str(), "{d}");
    assert_eq!(d["account_id"], "acme", "{d}");
    assert_eq!(d["event_type"], "interaction.review", "{d}");
    assert_eq!(d["last_status"], "delivered", "{d}");
    assert_eq!(d["attempt_count"], 3, "{d}");
    time_ms(&d["created_at"], "created_at");

    let attempts = d["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 3, "{d}");
    let expect = [
        ("http_error", 500, "boom"),
        ("http_error", 503, "later"),
        ("delivered", 200, "thanks"),
    ];
    let mut previous_at = 0;
    let mut attempt_ids = BTreeSet::new();
    for (i, (a, (status, http_status, body))) in attempts.iter().zip(expect).enumerate() {
        let number = i + 1;
        assert!(
            a["id"].as_str().is_some_and(|id| id.starts_with("att_")),
            "{a}"
        );
        attempt_ids.insert(a["id"].as_str().unwrap().to_string());
        assert_eq!(a["number"], number, "{a}");
        let at = time_ms(&a["at"], "attempt.at");
        assert!(at >= previous_at, "attempts in order: {d}");
        previous_at = at;
        assert!(a["duration_ms"].is_u64(), "duration_ms: {a}");
        assert_eq!(a["status"], status, "{a}");
        assert_eq!(a["http_status"], http_status, "{a}");
        assert_eq!(a["response_body"], body, "{a}");
        if status == "delivered" {
            assert_eq!(a["error"], Value::Null, "{a}");
        } else {
            assert!(a["error"].is_string() || a["error"].is_null(), "{a}");
        }
        assert_eq!(request_header(a, "webhook-id"), Some(event_id), "{a}");
        assert_eq!(
            request_header(a, "herald-attempt"),
            Some(number.to_string().as_str()),
            "{a}"
        );
        assert_eq!(
            request_header(a, "herald-delivery-id"),
            Some(delivery_id.as_str()),
            "{a}"
        );
        assert_eq!(
            request_header(a, "herald-endpoint-id"),
            Some(endpoint_id.as_str()),
            "{a}"
        );
        assert_eq!(
            request_header(a, "herald-event-type"),
            Some("interaction.review"),
            "{a}"
        );
        assert_eq!(
            request_header(a, "content-type"),
            Some("application/json"),
            "{a}"
        );
        assert!(
            request_header(a, "webhook-timestamp").is_some_and(|t| t.parse::<u64>().is_ok()),
            "{a}"
        );
        assert!(
            request_header(a, "webhook-signature").is_some_and(|s| s.starts_with("v1,")),
            "{a}"
        );
    }
    assert_eq!(attempt_ids.len(), 3, "attempt ids are distinct");
    // The receiver saw the same three requests.
    let seen = recv.wait_for(3, SETTLE).await;
    let numbers: Vec<&str> = seen
        .iter()
        .map(|r| r.header("herald-attempt").unwrap_or(""))
        .collect();
    assert_eq!(numbers, ["1", "2", "3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_event_shows_its_payload_and_deliveries() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let (ep_a, _) = world.endpoint("acme", &recv.url("/a"), json!({})).await;
    let (ep_b, _) = world.endpoint("acme", &recv.url("/b"), json!({})).await;
    let payload =
        json!({"review": {"stars": 5, "text": "très bien"}, "tags": ["a", "b"], "n": 2.5});
    let answer = world
        .ingest("acme", "interaction.review", payload.clone())
        .await;
    let event_id = answer["event_id"].as_str().unwrap();
    for d in answer["deliveries"].as_array().unwrap() {
        world
            .wait_state(d["delivery_id"].as_str().unwrap(), "delivered", SETTLE)
            .await;
    }

    let (status, ev) = world
        .herald
        .admin("GET", &format!("/v1/events/{event_id}"), None)
        .await;
    assert_eq!(status, 200, "{ev}");
    assert_eq!(ev["id"], event_id, "{ev}");
    assert_eq!(ev["account_id"], "acme", "{ev}");
    assert_eq!(ev["type"], "interaction.review", "{ev}");
    time_ms(&ev["received_at"], "received_at");
    assert_eq!(ev["payload"], payload, "{ev}");
    let deliveries = ev["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 2, "{ev}");
    let endpoints: BTreeSet<&str> = deliveries
        .iter()
        .map(|d| {
            assert_eq!(d["event_id"], event_id, "{d}");
            assert_eq!(d["state"], "delivered", "{d}");
            assert_eq!(d["last_status"], "delivered", "{d}");
            d["endpoint_id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(endpoints, BTreeSet::from([ep_a.as_str(), ep_b.as_str()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_are_404_not_found() {
    let world = World::start("", "").await;
    let h = &world.herald;
    for (method, path) in [
        ("GET", "/v1/deliveries/dlv_01JZZZZZZZZZZZZZZZZZZZZZZZ"),
        ("GET", "/v1/deliveries/nonsense"),
        (
            "POST",
            "/v1/deliveries/dlv_01JZZZZZZZZZZZZZZZZZZZZZZZ/retry",
        ),
        ("GET", "/v1/events/evt_01JZZZZZZZZZZZZZZZZZZZZZZZ"),
        ("GET", "/v1/endpoints/ep_01JZZZZZZZZZZZZZZZZZZZZZZZ"),
        ("DELETE", "/v1/endpoints/ep_01JZZZZZZZZZZZZZZZZZZZZZZZ"),
        ("POST", "/v1/endpoints/ep_01JZZZZZZZZZZZZZZZZZZZZZZZ/pause"),
    ] {
        let got = h.admin(method, path, None).await;
        assert_error(&got, 404, "not_found", None, &format!("{method} {path}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_retry_of_a_failed_delivery_sends_the_same_webhook_id_and_delivers() {
    let world = World::start("", "").await;
    let recv = Receiver::https(
        &world.ca,
        behaviour(|_, i| {
            if i == 0 {
                Reply::status(404)
            } else {
                Reply::status(200)
            }
        }),
    );
    let (endpoint_id, _) = world
        .endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    let answer = world
        .ingest("acme", "interaction.review", json!({"n": 1}))
        .await;
    let event_id = answer["event_id"].as_str().unwrap();
    let delivery_id = first_delivery(&answer);
    let failed = world.wait_state(&delivery_id, "failed", SETTLE).await;
    assert_eq!(failed["last_status"], "http_error", "{failed}");
    assert_eq!(failed["attempt_count"], 1, "{failed}");
    assert_eq!(failed["attempts"][0]["http_status"], 404, "{failed}");

    let (status, retried) = world
        .herald
        .admin("POST", &format!("/v1/deliveries/{delivery_id}/retry"), None)
        .await;
    assert_eq!(status, 202, "{retried}");
    assert_eq!(retried["id"], delivery_id.as_str(), "{retried}");
    assert_eq!(retried["state"], "pending", "{retried}");
    assert_eq!(retried["event_id"], event_id, "{retried}");
    assert_eq!(retried["endpoint_id"], endpoint_id.as_str(), "{retried}");

    let d = world.wait_state(&delivery_id, "delivered", SETTLE).await;
    assert_eq!(d["last_status"], "delivered", "{d}");
    assert_eq!(d["attempt_count"], 2, "{d}");
    let statuses: Vec<&Value> = d["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["status"])
        .collect();
    assert_eq!(statuses, [&json!("http_error"), &json!("delivered")], "{d}");

    let seen = recv.wait_for(2, SETTLE).await;
    assert_eq!(seen.len(), 2);
    for r in &seen {
        assert_eq!(r.header("webhook-id"), Some(event_id), "same webhook-id");
        assert_eq!(r.header("herald-delivery-id"), Some(delivery_id.as_str()));
    }
    assert_eq!(seen[0].body, seen[1].body, "a retry sends identical bytes");
    assert_eq!(seen[1].header("herald-attempt"), Some("2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_of_a_delivery_in_flight_is_409_delivery_in_flight() {
    let world = World::start("timeout = \"30s\"", "").await;
    let recv = Receiver::https(&world.ca, behaviour(|_, _| Reply::hang()));
    world.endpoint("acme", &recv.url("/hook"), json!({})).await;
    let answer = world.ingest("acme", "interaction.review", json!({})).await;
    let delivery_id = first_delivery(&answer);
    // The receiver holds the request open, so the attempt is running now.
    recv.wait_for(1, SETTLE).await;
    let got = world
        .herald
        .admin("POST", &format!("/v1/deliveries/{delivery_id}/retry"), None)
        .await;
    assert_error(
        &got,
        409,
        "delivery_in_flight",
        None,
        "retry while in flight",
    );
    let d = world.delivery(&delivery_id).await;
    assert_eq!(d["state"], "pending", "{d}");
}

// --- endpoints -------------------------------------------------------------------------------

/// Asserts the endpoint object (docs/api.md) (no secret in it).
fn assert_endpoint_object(ep: &Value) {
    for key in [
        "id",
        "account_id",
        "url",
        "description",
        "event_types",
        "headers",
        "retry_policy",
        "signature",
        "state",
        "verified",
        "created_at",
        "updated_at",
    ] {
        assert!(ep.get(key).is_some(), "endpoint object lacks {key:?}: {ep}");
    }
    assert!(
        ep.get("secret").is_none(),
        "no secret in the endpoint: {ep}"
    );
    assert!(
        ep["id"].as_str().is_some_and(|id| id.starts_with("ep_")),
        "{ep}"
    );
    time_ms(&ep["created_at"], "created_at");
    time_ms(&ep["updated_at"], "updated_at");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_endpoint_answers_201_with_the_endpoint_and_its_secret() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let url = recv.url("/hook");
    let (status, answer) = world
        .herald
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({
                "url": url,
                "description": "reviews to the CRM",
                "event_types": ["interaction.*"],
                "headers": {"x-api-key": "{{ secret.crm_key }}"},
            })),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let ep = &answer["endpoint"];
    assert_endpoint_object(ep);
    assert_eq!(ep["account_id"], "acme", "{ep}");
    assert_eq!(ep["url"], url.as_str(), "{ep}");
    assert_eq!(ep["description"], "reviews to the CRM", "{ep}");
    assert_eq!(ep["event_types"], json!(["interaction.*"]), "{ep}");
    assert_eq!(
        ep["headers"],
        json!({"x-api-key": "{{ secret.crm_key }}"}),
        "header values shown as configured: {ep}"
    );
    assert_eq!(ep["retry_policy"], "standard", "the default policy: {ep}");
    assert_eq!(ep["signature"], "hmac", "{ep}");
    assert_eq!(ep["state"], "active", "{ep}");
    assert_eq!(ep["verified"], false, "{ep}");
    let secret = answer["secret"].as_str().expect("secret");
    let key = common::sig::key_bytes(secret).expect("whsec_ part is base64");
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(key.len(), 32, "whsec_ holds 32 random bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_endpoint_answers_the_endpoint_object() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let (_, created) = world
        .herald
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({"url": recv.url("/hook"), "description": "d"})),
        )
        .await;
    let id = created["endpoint"]["id"].as_str().unwrap();
    let (status, ep) = world
        .herald
        .admin("GET", &format!("/v1/endpoints/{id}"), None)
        .await;
    assert_eq!(status, 200, "{ep}");
    assert_endpoint_object(&ep);
    assert_eq!(
        ep["breaker"]["state"], "closed",
        "GET adds the endpoint's health"
    );
    assert_eq!(
        without_health(ep),
        created["endpoint"],
        "GET shows what POST created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_endpoint_changes_description_and_event_types() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let url = recv.url("/hook");
    let (id, _) = world
        .endpoint(
            "acme",
            &url,
            json!({"description": "old", "event_types": ["interaction.*"]}),
        )
        .await;
    let (_, before) = world
        .herald
        .admin("GET", &format!("/v1/endpoints/{id}"), None)
        .await;
    clock_past(time_ms(&before["updated_at"], "updated_at")).await;

    let (status, patched) = world
        .herald
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{id}"),
            Some(json!({"description": "new", "event_types": ["profile.*"]})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_endpoint_object(&patched);
    assert_eq!(patched["id"], id.as_str());
    assert_eq!(patched["description"], "new", "{patched}");
    assert_eq!(patched["event_types"], json!(["profile.*"]), "{patched}");
    assert_eq!(
        patched["url"],
        url.as_str(),
        "untouched fields stay: {patched}"
    );
    assert_eq!(patched["created_at"], before["created_at"], "{patched}");
    assert!(
        time_ms(&patched["updated_at"], "updated_at")
            > time_ms(&before["updated_at"], "updated_at"),
        "updated_at moves: {before} -> {patched}"
    );
    let (_, after) = world
        .herald
        .admin("GET", &format!("/v1/endpoints/{id}"), None)
        .await;
    assert_eq!(without_health(after), patched, "GET shows the patch");

    // The new filter is the one fan-out uses.
    let review = world.ingest("acme", "interaction.review", json!({})).await;
    assert_eq!(
        review["deliveries"][0]["endpoint_id"],
        Value::Null,
        "{review}"
    );
    let profile = world.ingest("acme", "profile.updated", json!({})).await;
    assert_eq!(
        profile["deliveries"][0]["endpoint_id"],
        id.as_str(),
        "{profile}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_list_is_newest_first() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let mut created = Vec::new();
    for n in 0..3 {
        let (id, _) = world
            .endpoint("acme", &recv.url(&format!("/{n}")), json!({}))
            .await;
        created.push(id);
    }
    world
        .endpoint("globex", &recv.url("/other"), json!({}))
        .await;

    let (status, list) = world
        .herald
        .admin("GET", "/v1/accounts/acme/endpoints", None)
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["next_cursor"], Value::Null, "{list}");
    created.reverse();
    assert_eq!(ids(&list), created, "newest first, this account only");
    for ep in list["items"].as_array().unwrap() {
        assert_endpoint_object(ep);
        assert_eq!(ep["account_id"], "acme");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_endpoint_skips_deliveries_as_paused() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let (id, _) = world.endpoint("acme", &recv.url("/hook"), json!({})).await;
    let (status, ep) = world
        .herald
        .admin("POST", &format!("/v1/endpoints/{id}/pause"), None)
        .await;
    assert_eq!(status, 200, "{ep}");
    assert_endpoint_object(&ep);
    assert_eq!(ep["state"], "paused", "{ep}");

    let answer = world.ingest("acme", "interaction.review", json!({})).await;
    assert_eq!(
        answer["deliveries"][0]["endpoint_id"],
        id.as_str(),
        "{answer}"
    );
    let d = world
        .wait_state(&first_delivery(&answer), "skipped", SETTLE)
        .await;
    assert_eq!(d["last_status"], "paused", "{d}");
    assert_eq!(d["attempts"][0]["status"], "paused", "{d}");
    assert_eq!(recv.count(), 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_endpoint_delivers_again() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let (id, _) = world.endpoint("acme", &recv.url("/hook"), json!({})).await;
    let (status, _) = world
        .herald
        .admin("POST", &format!("/v1/endpoints/{id}/pause"), None)
        .await;
    assert_eq!(status, 200);
    let (status, ep) = world
        .herald
        .admin("POST", &format!("/v1/endpoints/{id}/resume"), None)
        .await;
    assert_eq!(status, 200, "{ep}");
    assert_endpoint_object(&ep);
    assert_eq!(ep["state"], "active", "{ep}");

    let answer = world.ingest("acme", "interaction.review", json!({})).await;
    let d = world
        .wait_state(&first_delivery(&answer), "delivered", SETTLE)
        .await;
    assert_eq!(d["last_status"], "delivered", "{d}");
    assert_eq!(recv.wait_for(1, SETTLE).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_endpoint_is_204_then_404() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let (id, _) = world.endpoint("acme", &recv.url("/hook"), json!({})).await;
    let (status, _, body) = world
        .herald
        .call_raw(
            "DELETE",
            &format!("/v1/endpoints/{id}"),
            Some(common::herald::ADMIN_TOKEN),
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(status, 204);
    assert!(body.is_empty(), "204 has no body");
    let got = world
        .herald
        .admin("GET", &format!("/v1/endpoints/{id}"), None)
        .await;
    assert_error(&got, 404, "not_found", None, "GET after DELETE");
    let got = world
        .herald
        .admin("DELETE", &format!("/v1/endpoints/{id}"), None)
        .await;
    assert_error(&got, 404, "not_found", None, "second DELETE");
    let (_, list) = world
        .herald
        .admin("GET", "/v1/accounts/acme/endpoints", None)
        .await;
    assert_eq!(list["items"], json!([]), "{list}");
    // Its account has no endpoint any more.
    let answer = world.ingest("acme", "interaction.review", json!({})).await;
    assert_eq!(
        answer["deliveries"][0]["endpoint_id"],
        Value::Null,
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_endpoint_ends_its_pending_deliveries() {
    let world = World::start("", "[retry_policies]\nslow = [\"1h\"]\n").await;
    let recv = Receiver::https(&world.ca, behaviour(|_, _| Reply::status(500)));
    let (id, _) = world
        .endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "slow"}))
        .await;
    let answer = world.ingest("acme", "interaction.review", json!({})).await;
    let delivery_id = first_delivery(&answer);
    // The first attempt failed; the next one is an hour away.
    wait_until(SETTLE, "the first attempt is recorded", || async {
        world.delivery(&delivery_id).await["attempt_count"] == 1
    })
    .await;
    let d = world.delivery(&delivery_id).await;
    assert_eq!(d["state"], "pending", "{d}");
    assert_eq!(d["last_status"], "http_error", "{d}");

    let (status, _) = world
        .herald
        .admin("DELETE", &format!("/v1/endpoints/{id}"), None)
        .await;
    assert_eq!(status, 204);
    wait_until(
        Duration::from_secs(5),
        "the deleted endpoint's delivery is no longer pending",
        || async { world.delivery(&delivery_id).await["state"] != "pending" },
    )
    .await;
    let (_, st) = world.herald.admin("GET", "/v1/status", None).await;
    assert_eq!(st["queue"]["pending"], 0, "{st}");
    assert_eq!(recv.count(), 1, "nothing more was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_custom_header_is_422_naming_it() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    for name in [
        "content-type",
        "content-length",
        "host",
        "transfer-encoding",
        "connection",
        "user-agent",
        "webhook-id",
        "webhook-signature",
        "herald-attempt",
        "herald-anything",
        "upgrade",
        "expect",
        "te",
        "trailer",
        "keep-alive",
        "proxy-connection",
        "Proxy-Authorization",
        "proxy-authenticate",
        "traceparent",
        "Tracestate",
    ] {
        let got = world
            .herald
            .admin(
                "POST",
                "/v1/accounts/acme/endpoints",
                Some(json!({"url": recv.url("/hook"), "headers": {name: "x"}})),
            )
            .await;
        let field = format!("headers.{name}");
        assert_error(&got, 422, "invalid_field", Some(&field), name);
    }
    let (_, list) = world
        .herald
        .admin("GET", "/v1/accounts/acme/endpoints", None)
        .await;
    assert_eq!(list["items"], json!([]), "nothing was created: {list}");
    // An ordinary custom header is fine.
    world
        .endpoint(
            "acme",
            &recv.url("/hook"),
            json!({"headers": {"x-api-key": "k"}}),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eleventh_endpoint_of_an_account_is_409_too_many_endpoints() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    for n in 0..10 {
        world
            .endpoint("acme", &recv.url(&format!("/{n}")), json!({}))
            .await;
    }
    let got = world
        .herald
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({"url": recv.url("/11")})),
        )
        .await;
    assert_error(&got, 409, "too_many_endpoints", None, "11th endpoint");
    let (_, list) = world
        .herald
        .admin("GET", "/v1/accounts/acme/endpoints", None)
        .await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(10), "{list}");
    // The cap is per account.
    world.endpoint("globex", &recv.url("/g"), json!({})).await;
}

// --- status and health -----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_version_uptime_queue_and_attempt_counts() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    world.endpoint("acme", &recv.url("/hook"), json!({})).await;
    let a = world.ingest("acme", "interaction.review", json!({})).await;
    world
        .wait_state(&first_delivery(&a), "delivered", SETTLE)
        .await;
    let b = world
        .ingest("lonely", "interaction.review", json!({}))
        .await;
    world
        .wait_state(&first_delivery(&b), "skipped", SETTLE)
        .await;

    let (status, st) = world.herald.admin("GET", "/v1/status", None).await;
    assert_eq!(status, 200, "{st}");
    assert_eq!(st["version"], env!("CARGO_PKG_VERSION"), "{st}");
    assert!(st["uptime_seconds"].is_u64(), "{st}");
    assert_eq!(st["queue"]["pending"], 0, "{st}");
    assert_eq!(st["queue"]["delivered"], 1, "{st}");
    assert_eq!(st["queue"]["failed"], 0, "{st}");
    assert_eq!(st["queue"]["skipped"], 1, "{st}");
    assert_eq!(st["due"], 0, "{st}");
    assert_eq!(st["in_flight"], 0, "{st}");
    for window in ["last_hour", "last_day"] {
        assert_eq!(st["attempts"][window]["delivered"], 1, "{window}: {st}");
        assert_eq!(st["attempts"][window]["no_endpoint"], 1, "{window}: {st}");
    }
    assert!(st["storage_bytes"].as_u64().is_some_and(|n| n > 0), "{st}");
    // Admin only.
    let got = world
        .herald
        .call("GET", "/v1/status", Some(INGEST_TOKEN), None)
        .await;
    assert_error(
        &got,
        401,
        "unauthorized",
        None,
        "status with the ingest token",
    );
    let got = world.herald.call("GET", "/v1/status", None, None).await;
    assert_error(&got, 401, "unauthorized", None, "status without a token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_200_without_a_token() {
    let world = World::start("", "").await;
    let (status, _) = world.herald.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 200);
}

/// GET /v1/endpoints/{id} adds the endpoint's health to the endpoint object; the rest is the
/// object every other answer shows.
fn without_health(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        for k in [
            "breaker",
            "success_rate_1h",
            "attempts_1h",
            "last_success_at",
            "pending",
        ] {
            m.remove(k);
        }
    }
    v
}

// --- search ----------------------------------------------------------------------------------

/// `GET /v1/deliveries?q=`: one box finds an event by id, a delivery by id, or the deliveries
/// of the events whose payload holds a text (its bytes exactly), with the other filters and
/// within a portal session's own account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_search_box_finds_an_event_id_a_delivery_id_or_a_text_in_the_payload() {
    let w = World::start("", "").await;
    let h = &w.herald;
    let a = w
        .ingest(
            "acme",
            "order.created",
            json!({"order_id": "ord_5005", "customer": "alice@example.test"}),
        )
        .await;
    let (e1, d1) = (
        a["event_id"].as_str().unwrap().to_string(),
        first_delivery(&a),
    );
    let d2 = first_delivery(
        &w.ingest("acme", "order.created", json!({"order_id": "ord_6006"}))
            .await,
    );
    let d3 = first_delivery(
        &w.ingest("globex", "order.created", json!({"order_id": "ord_5005"}))
            .await,
    );

    let search = |query: String, token: Option<String>| async move {
        let (status, list) = h
            .call(
                "GET",
                &format!("/v1/deliveries?{query}"),
                token.as_deref().or(Some(common::herald::ADMIN_TOKEN)),
                None,
            )
            .await;
        assert_eq!(status, 200, "?{query}: {list}");
        assert_eq!(list["search_limited"], false, "?{query}: {list}");
        assert_eq!(list["next_cursor"], Value::Null, "?{query}: {list}");
        ids(&list)
    };
    assert_eq!(
        search("account_id=acme&q=ord_5005".into(), None).await,
        [d1.as_str()]
    );
    assert_eq!(
        search("q=alice%40example.test".into(), None).await,
        [d1.as_str()]
    );
    assert_eq!(
        search("q=ord_5005".into(), None).await,
        [d3.as_str(), d1.as_str()],
        "every account's, newest first"
    );
    assert_eq!(
        search(format!("q={e1}"), None).await,
        [d1.as_str()],
        "an event id"
    );
    assert_eq!(
        search(format!("q=%20{d2}%20"), None).await,
        [d2.as_str()],
        "a delivery id, trimmed"
    );
    assert!(
        search("q=ORD_5005".into(), None).await.is_empty(),
        "case matters"
    );
    assert!(
        search("q=ord_5005&event_type=order.paid".into(), None)
            .await
            .is_empty(),
        "with the other filters"
    );
    assert!(
        search(format!("q={e1}&state=delivered"), None)
            .await
            .is_empty(),
        "an id with the other filters"
    );

    // A portal session searches its own account only, by text and by id.
    let (_, session) = h
        .admin("POST", "/v1/accounts/acme/portal-sessions", Some(json!({})))
        .await;
    let token = session["token"].as_str().map(str::to_string);
    assert_eq!(
        search("q=ord_5005".into(), token.clone()).await,
        [d1.as_str()]
    );
    assert!(
        search(format!("q={d3}"), token.clone()).await.is_empty(),
        "another account's delivery"
    );

    // Without q the answer says nothing was searched.
    let (_, list) = h.admin("GET", "/v1/deliveries?account_id=acme", None).await;
    assert_eq!(list["search_limited"], false, "{list}");
    let long = "x".repeat(201);
    assert_error(
        &h.admin("GET", &format!("/v1/deliveries?q={long}"), None)
            .await,
        422,
        "invalid_field",
        Some("q"),
        "a search over 200 bytes",
    );
}

/// A search looks at no more than the account's newest 10,000 events per page and says so:
/// `search_limited`, and a cursor from which the next page searches the older ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_looks_at_the_newest_10000_events_and_says_so() {
    let w = World::start("", "").await;
    let h = &w.herald;
    let old = first_delivery(
        &w.ingest("acme", "order.created", json!({"note": "needle-42"}))
            .await,
    );
    for batch in 0..10 {
        let events: Vec<Value> = (0..1000)
            .map(|i| json!({"account_id": "acme", "type": "order.created", "payload": {"n": batch * 1000 + i}}))
            .collect();
        let (status, answer) = h.ingest_batch(json!(events)).await;
        assert_eq!(status, 202, "{answer}");
    }
    // Another account's events do not count toward acme's 10,000.
    w.ingest("globex", "order.created", json!({"n": 1})).await;
    let (status, first) = h
        .admin("GET", "/v1/deliveries?account_id=acme&q=needle-42", None)
        .await;
    assert_eq!(status, 200, "{first}");
    assert!(ids(&first).is_empty(), "{first}");
    assert_eq!(first["search_limited"], true, "{first}");
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a cursor to search on");
    let (status, second) = h
        .admin(
            "GET",
            &format!("/v1/deliveries?account_id=acme&q=needle-42&cursor={cursor}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(ids(&second), [old]);
    assert_eq!(second["search_limited"], false, "{second}");
    assert_eq!(second["next_cursor"], Value::Null, "{second}");
}
