//! Failure alerts by mail (docs/operations.md, "Failure alerts"), against a real SMTP server
//! (aiosmtpd, tests/tools/smtp_sink.py) that requires STARTTLS with a certificate of the test's
//! CA: which mails go to whom and when, what they never contain, `alerts.min_interval`, and a
//! mail server that is down or refuses costing nothing but a log line and a count.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::smtp::{Mail, Mode, SmtpSink};
use common::{behaviour, first_delivery, HeraldApi, InProc, Receiver, Reply, TestCa, World};
use serde_json::{json, Value};

/// 2026-12-02T12:00:00Z.
const T0: i64 = 1_796_212_800_000;
const SETTLE: Duration = Duration::from_secs(15);
const HOUR: i64 = 3_600_000;

/// Markers that must never reach a mail.
const HEADER_MARKER: &str = "HDRVALUE7f3a";
const ACCOUNT_SECRET_MARKER: &str = "ACCTSECRET9c1d";
const PAYLOAD_MARKER: &str = "PAYLOAD5e8b";
const QUERY_MARKER: &str = "QUERYTOKEN2a6f";

fn alerts_table(smtp: &SmtpSink, extra: &str) -> String {
    format!(
        "[alerts]\nsmtp_url = {}\nfrom = \"herald@alerts.test\"\n{extra}",
        common::toml_string(&smtp.url())
    )
}

/// A receiver that fails (500) while `failing` is set.
fn switchable(failing: Arc<AtomicBool>) -> common::Behaviour {
    behaviour(move |_, _| {
        if failing.load(Ordering::SeqCst) {
            Reply::status(500)
        } else {
            Reply::status(200)
        }
    })
}

async fn set_emails(w: &World<InProc>, account: &str, emails: Value) {
    let (status, v) = w
        .herald
        .admin(
            "PUT",
            &format!("/v1/accounts/{account}"),
            Some(json!({ "alert_emails": emails })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
}

/// Ingests one event for `account` and waits until its only delivery has ended.
async fn fail_once(w: &World<InProc>, account: &str) {
    let payload = json!({"note": PAYLOAD_MARKER});
    let d = first_delivery(&w.ingest(account, "t.x", payload).await);
    w.wait_state(&d, "failed", SETTLE).await;
}

/// Ten failed attempts in a row: the breaker opens.
async fn open_breaker(w: &World<InProc>, account: &str) {
    for _ in 0..10 {
        fail_once(w, account).await;
    }
}

/// One event that waits for the probe, then the probe at `at` (the receiver answers 200).
async fn recover_at(w: &World<InProc>, account: &str, at: i64) {
    let held = first_delivery(&w.ingest(account, "t.x", json!({})).await);
    w.herald.clock.set(at);
    w.wait_state(&held, "delivered", SETTLE).await;
}

async fn metric(h: &impl HeraldApi, result: &str) -> u64 {
    let (status, _, body) = h.call_raw("GET", "/metrics", None, &[], vec![]).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body).expect("metrics are text");
    let line = format!("herald_alerts_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .unwrap_or_else(|| panic!("no {line:?} in /metrics"))
        .parse()
        .expect("a count")
}

/// Waits until `herald_alerts_total{result}` reads `n`: the SMTP server holds a mail a moment
/// before herald hears its answer and counts it.
async fn wait_metric(h: &impl HeraldApi, result: &str, n: u64) {
    common::wait_until(
        SETTLE,
        &format!("{n} alert mails counted {result}"),
        || async { metric(h, result).await == n },
    )
    .await;
}

fn assert_clean(mails: &[Mail], secrets: &[&str]) {
    for m in mails {
        for needle in secrets {
            assert!(
                !m.data.contains(needle) && !m.body().contains(needle),
                "a mail holds {needle:?}:\n{}",
                m.data
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_recovered_and_disabled_mails_reach_the_accounts_addresses_and_nothing_secret() {
    let ca = TestCa::new();
    let smtp = SmtpSink::start(&ca, Mode::StartTls);
    let w = World::start_manual_with_ca(ca, "", &alerts_table(&smtp, ""), T0).await;
    set_emails(&w, "acme", json!(["ops@acme.test", "oncall@acme.test"])).await;
    set_emails(&w, "other", json!(["ops@other.test"])).await;
    let h = &w.herald;
    let (status, _) = h
        .admin(
            "PUT",
            "/v1/accounts/acme/secrets/token",
            Some(json!({ "value": ACCOUNT_SECRET_MARKER })),
        )
        .await;
    assert_eq!(status, 204);
    let (_, session) = h
        .admin("POST", "/v1/accounts/acme/portal-sessions", Some(json!({})))
        .await;
    let portal_token = session["token"].as_str().unwrap().to_string();

    let failing = Arc::new(AtomicBool::new(true));
    let recv = Receiver::https(&w.ca, switchable(failing.clone()));
    let url = format!("{}?sig={QUERY_MARKER}", recv.url("/hook"));
    let (ep, secret) = w
        .endpoint(
            "acme",
            &url,
            json!({"retry_policy": "none", "headers": {
                "x-plain": HEADER_MARKER, "x-macro": "Bearer {{ secret.token }}"}}),
        )
        .await;
    // Another account's endpoint, healthy: its people hear nothing.
    let healthy = Receiver::ok_https(&w.ca);
    w.endpoint("other", &healthy.url("/in"), json!({})).await;
    w.ingest("other", "t.x", json!({})).await;

    open_breaker(&w, "acme").await;
    let mails = smtp.wait_for(1, SETTLE).await;
    let m = &mails[0];
    assert_eq!(m.mail_from, "herald@alerts.test");
    let mut to = m.rcpt_tos.clone();
    to.sort();
    assert_eq!(to, ["oncall@acme.test", "ops@acme.test"]);
    let subject = m.header("Subject").unwrap();
    assert!(subject.contains("is failing"), "{subject}");
    let body = m.body();
    for needle in [
        &format!("Endpoint id:        {ep}\n"),
        "Account:            acme\n",
        "Failing since:      2026-12-02T12:00:00.000Z\n",
        "Last attempt:       http_error (HTTP 500)\n",
        "Waiting deliveries: 0\n",
        &format!("Endpoint:           https://localhost:{}\n", recv.port()),
        "docs/operations.md",
    ] {
        assert!(body.contains(needle), "{needle:?} in\n{body}");
    }
    // The endpoint by its host alone in the subject; never its path or query.
    assert_eq!(subject, "[herald] Webhook endpoint is failing: localhost");
    assert_eq!(
        m.header("From").as_deref(),
        Some("herald <herald@alerts.test>"),
        "the sender's name is the brand"
    );
    assert!(
        !body.contains("/hook") && !subject.contains("/hook"),
        "{body}"
    );
    assert!(m
        .header("Content-Type")
        .is_some_and(|c| c.starts_with("text/plain")));

    // The probe succeeds: the recovery is mailed.
    failing.store(false, Ordering::SeqCst);
    recover_at(&w, "acme", T0 + 30_000).await;
    let mails = smtp.wait_for(2, SETTLE).await;
    assert!(
        mails[1]
            .header("Subject")
            .unwrap()
            .contains("has recovered"),
        "{:?}",
        mails[1]
    );

    // A second endpoint answers 410 Gone: it is disabled, and that is mailed.
    let is_gone = Arc::new(AtomicBool::new(true));
    let gone = Receiver::https(&w.ca, {
        let is_gone = is_gone.clone();
        behaviour(move |_, _| {
            Reply::status(if is_gone.load(Ordering::SeqCst) {
                410
            } else {
                200
            })
        })
    });
    let (gone_ep, _) = w
        .endpoint("acme", &gone.url("/gone"), json!({"retry_policy": "none"}))
        .await;
    h.admin(
        "PATCH",
        &format!("/v1/endpoints/{ep}"),
        Some(json!({"event_types": ["never.*"]})),
    )
    .await;
    fail_once(&w, "acme").await;
    let mails = smtp.wait_for(3, SETTLE).await;
    let disabled = &mails[2];
    assert!(
        disabled.header("Subject").unwrap().contains("was disabled"),
        "{disabled:?}"
    );
    assert!(disabled
        .body()
        .contains(&format!("Endpoint id:        {gone_ep}\n")));
    assert!(disabled
        .body()
        .contains("Last attempt:       http_error (HTTP 410)\n"));
    // Resumed, it delivers again: that first success is mailed as its recovery.
    is_gone.store(false, Ordering::SeqCst);
    let (status, _) = h
        .admin("POST", &format!("/v1/endpoints/{gone_ep}/resume"), None)
        .await;
    assert_eq!(status, 200);
    let d = first_delivery(&w.ingest("acme", "t.x", json!({})).await);
    w.wait_state(&d, "delivered", SETTLE).await;
    let mails = smtp.wait_for(4, SETTLE).await;
    assert!(
        mails[3]
            .header("Subject")
            .unwrap()
            .contains("has recovered"),
        "{:?}",
        mails[3]
    );
    assert!(mails[3]
        .body()
        .contains(&format!("Endpoint id:        {gone_ep}\n")));

    // Never a secret, a header value, a portal token, a payload byte or the URL's query.
    assert_eq!(smtp.mails().len(), 4, "no mail to the other account");
    assert_clean(
        &smtp.mails(),
        &[
            HEADER_MARKER,
            ACCOUNT_SECRET_MARKER,
            PAYLOAD_MARKER,
            QUERY_MARKER,
            &portal_token,
            &secret,
            secret.trim_start_matches("whsec_"),
        ],
    );
    wait_metric(h, "sent", 4).await;
    assert_eq!(metric(h, "failed").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_one_failing_mail_per_endpoint_per_min_interval() {
    let ca = TestCa::new();
    let smtp = SmtpSink::start(&ca, Mode::StartTls);
    let w =
        World::start_manual_with_ca(ca, "", &alerts_table(&smtp, "min_interval = \"1h\"\n"), T0)
            .await;
    set_emails(&w, "acme", json!(["ops@acme.test"])).await;
    let failing = Arc::new(AtomicBool::new(true));
    let recv = Receiver::https(&w.ca, switchable(failing.clone()));
    w.endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    let subjects = || {
        smtp.mails()
            .iter()
            .map(|m| {
                let s = m.header("Subject").unwrap_or_default();
                if s.contains("is failing") {
                    "failing"
                } else if s.contains("has recovered") {
                    "recovered"
                } else {
                    "other"
                }
            })
            .collect::<Vec<_>>()
    };

    // Fails, recovers: both mailed.
    open_breaker(&w, "acme").await;
    failing.store(false, Ordering::SeqCst);
    recover_at(&w, "acme", T0 + 30_000).await;
    smtp.wait_for(2, SETTLE).await;
    // Fails again ten minutes later: within the hour, so no mail, and no recovery mail either.
    failing.store(true, Ordering::SeqCst);
    w.herald.clock.set(T0 + 600_000);
    open_breaker(&w, "acme").await;
    failing.store(false, Ordering::SeqCst);
    recover_at(&w, "acme", T0 + 630_000).await;
    common::wait_until(SETTLE, "the failing mail is withheld", || async {
        metric(&w.herald, "suppressed").await == 1
    })
    .await;
    assert_eq!(subjects(), ["failing", "recovered"]);
    // An hour after the first mail, a new failure is mailed again.
    failing.store(true, Ordering::SeqCst);
    w.herald.clock.set(T0 + HOUR);
    open_breaker(&w, "acme").await;
    smtp.wait_for(3, SETTLE).await;
    assert_eq!(subjects(), ["failing", "recovered", "failing"]);
    wait_metric(&w.herald, "sent", 3).await;
}

/// A mail server that is down, or refuses every message: deliveries go on, each try is counted,
/// the mail is given up after 3 tries over 10 minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_server_down_or_refusing_costs_only_a_count_and_deliveries_go_on() {
    for refuse in [true, false] {
        let name = if refuse { "refusing" } else { "down" };
        let ca = TestCa::new();
        let sink = refuse.then(|| SmtpSink::refusing(&ca));
        let url = match &sink {
            Some(s) => s.url(),
            None => format!("smtp://localhost:{}", closed_port()),
        };
        let tables = format!(
            "[alerts]\nsmtp_url = {}\nfrom = \"herald@alerts.test\"\n",
            common::toml_string(&url)
        );
        let w = World::start_manual_with_ca(ca, "", &tables, T0).await;
        set_emails(&w, "acme", json!(["ops@acme.test"])).await;
        let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
        w.endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "none"}))
            .await;
        let ok = Receiver::ok_https(&w.ca);
        w.endpoint("fine", &ok.url("/in"), json!({})).await;
        open_breaker(&w, "acme").await;
        common::wait_until(SETTLE, &format!("{name}: the first try fails"), || async {
            metric(&w.herald, "retried").await == 1
        })
        .await;
        // Deliveries go on meanwhile.
        let d = first_delivery(&w.ingest("fine", "t.x", json!({})).await);
        w.wait_state(&d, "delivered", SETTLE).await;
        // The second try after 2 minutes, the third 8 minutes later; then it is given up.
        w.herald.clock.set(T0 + 120_000);
        common::wait_until(SETTLE, &format!("{name}: the second try fails"), || async {
            metric(&w.herald, "retried").await == 2
        })
        .await;
        w.herald.clock.set(T0 + 600_000);
        common::wait_until(SETTLE, &format!("{name}: the mail is given up"), || async {
            metric(&w.herald, "failed").await == 1
        })
        .await;
        assert_eq!(metric(&w.herald, "sent").await, 0, "{name}");
        let d = first_delivery(&w.ingest("fine", "t.x", json!({})).await);
        w.wait_state(&d, "delivered", SETTLE).await;
        if let Some(s) = sink {
            assert!(s.mails().is_empty(), "the refusing server kept nothing");
        }
    }
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The real process: a failed try is one log line, and the SMTP password is in no log line,
/// no metric and no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_try_is_logged_and_the_smtp_password_is_never_shown() {
    const PASSWORD: &str = "SMTPPASSWORD4d2c";
    let url = format!("smtp://alerts:{PASSWORD}@localhost:{}", closed_port());
    let tables = format!(
        "[alerts]\nsmtp_url = {}\nfrom = \"herald@alerts.test\"\n",
        common::toml_string(&url)
    );
    let w = World::start_with_ca(TestCa::new(), "", &tables).await;
    let (status, _) = w
        .herald
        .admin(
            "PUT",
            "/v1/accounts/acme",
            Some(json!({"alert_emails": ["ops@acme.test"]})),
        )
        .await;
    assert_eq!(status, 200);
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    w.endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    for _ in 0..10 {
        let d = first_delivery(&w.ingest("acme", "t.x", json!({})).await);
        w.wait_state(&d, "failed", SETTLE).await;
    }
    let line = w
        .herald
        .wait_for_log("alert mail not sent (try 1 of 3)", SETTLE)
        .await;
    assert!(line.contains("trying again in 2m"), "{line}");
    assert_eq!(metric(&w.herald, "retried").await, 1);
    let (_, _, metrics) = w
        .herald
        .call_raw("GET", "/metrics", None, &[], vec![])
        .await;
    assert!(!String::from_utf8_lossy(&metrics).contains(PASSWORD));
    assert!(
        !w.herald.log_text().contains(PASSWORD),
        "the password is logged"
    );
}

/// STARTTLS with a login, and TLS from the first byte (`smtps://`), both against a server
/// whose certificate the test's CA signed (trusted through `delivery.extra_ca_file`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_with_a_login_and_smtps_deliver_the_mail() {
    for smtps in [false, true] {
        let ca = TestCa::new();
        let smtp = if smtps {
            SmtpSink::start(&ca, Mode::Smtps)
        } else {
            SmtpSink::with_login(&ca, "alerts", "p@ss:word")
        };
        let w = World::start_manual_with_ca(ca, "", &alerts_table(&smtp, ""), T0).await;
        set_emails(&w, "acme", json!(["ops@acme.test"])).await;
        let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
        w.endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "none"}))
            .await;
        open_breaker(&w, "acme").await;
        let mails = smtp.wait_for(1, SETTLE).await;
        assert_eq!(mails[0].rcpt_tos, ["ops@acme.test"], "smtps: {smtps}");
    }
}

/// The loop: an endpoint at a receiver that answers 410, a test event (410 disables
/// it: a "disabled" mail), resume, again; then delete it and start again with a new endpoint.
/// `alerts.max_per_account_per_hour` caps the mails of every kind for the account, one mail to
/// all five addresses counting once; the next UTC clock hour starts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churning_endpoints_and_a_410_loop_send_at_most_max_per_account_per_hour() {
    let ca = TestCa::new();
    let smtp = SmtpSink::start(&ca, Mode::StartTls);
    let tables = alerts_table(&smtp, "max_per_account_per_hour = 3\n");
    let w = World::start_manual_with_ca(ca, "", &tables, T0 + 60_000).await;
    let five: Vec<String> = (0..5).map(|i| format!("victim{i}@third.test")).collect();
    set_emails(&w, "acme", json!(five)).await;
    let gone = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(410)));
    let h = &w.herald;
    let mut disabled = 0;
    for round in 0..3 {
        let (ep, _) = w
            .endpoint(
                "acme",
                &gone.url(&format!("/attacker/path/{round}")),
                json!({"retry_policy": "none"}),
            )
            .await;
        for _ in 0..3 {
            let (status, t) = h
                .admin("POST", &format!("/v1/endpoints/{ep}/test"), Some(json!({})))
                .await;
            assert_eq!(status, 200, "{t}");
            disabled += 1;
            common::wait_until(SETTLE, "the disabled alert is decided", || async {
                metric(h, "sent").await + metric(h, "suppressed").await == disabled
            })
            .await;
            let (status, v) = h
                .admin("POST", &format!("/v1/endpoints/{ep}/resume"), None)
                .await;
            assert_eq!(status, 200, "{v}");
        }
        let (status, _) = h
            .admin("DELETE", &format!("/v1/endpoints/{ep}"), None)
            .await;
        assert_eq!(status, 204);
    }
    assert_eq!(disabled, 9);
    assert_eq!(metric(h, "sent").await, 3);
    assert_eq!(metric(h, "suppressed").await, 6);
    let mails = smtp.wait_for(3, SETTLE).await;
    assert_eq!(mails.len(), 3, "{mails:?}");
    for m in &mails {
        assert_eq!(m.rcpt_tos.len(), 5, "one mail to all five: {m:?}");
        assert!(
            !m.data.contains("/attacker/path"),
            "the path is never shown: {m:?}"
        );
    }

    // The next UTC clock hour (not an hour after the first mail) has room again.
    h.clock.set(T0 + HOUR);
    let (ep, _) = w
        .endpoint("acme", &gone.url("/again"), json!({"retry_policy": "none"}))
        .await;
    let (status, _) = h
        .admin("POST", &format!("/v1/endpoints/{ep}/test"), Some(json!({})))
        .await;
    assert_eq!(status, 200);
    smtp.wait_for(4, SETTLE).await;
    // The sink has the mail before herald hears the server's last answer and counts it.
    common::wait_until(SETTLE, "the fourth mail is counted sent", || async {
        metric(h, "sent").await == 4
    })
    .await;
    assert_eq!(metric(h, "suppressed").await, 6);
}

/// A mail given up after its three tries gives its `min_interval` claim back (the next failure
/// is mailed, not withheld for a mail nobody got) but still counts toward the account's hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_given_up_gives_min_interval_back_but_counts_toward_the_hour() {
    let ca = TestCa::new();
    let sink = SmtpSink::refusing(&ca);
    let tables = format!(
        "[alerts]\nsmtp_url = {}\nfrom = \"herald@alerts.test\"\nmin_interval = \"1h\"\n\
         max_per_account_per_hour = 2\n",
        common::toml_string(&sink.url())
    );
    let w = World::start_manual_with_ca(ca, "", &tables, T0).await;
    set_emails(&w, "acme", json!(["ops@acme.test"])).await;
    let failing = Arc::new(AtomicBool::new(true));
    let recv = Receiver::https(&w.ca, switchable(failing.clone()));
    w.endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    let h = &w.herald;
    let give_up = |at: i64, n: u64| async move {
        common::wait_until(SETTLE, "the first try fails", || async {
            metric(h, "retried").await == 2 * n - 1
        })
        .await;
        h.clock.set(at + 120_000);
        common::wait_until(SETTLE, "the second try fails", || async {
            metric(h, "retried").await == 2 * n
        })
        .await;
        h.clock.set(at + 600_000);
        common::wait_until(SETTLE, "the mail is given up", || async {
            metric(h, "failed").await == n
        })
        .await;
    };

    // The first failing mail: tried three times, given up.
    open_breaker(&w, "acme").await;
    give_up(T0, 1).await;
    // Recovered, and failing again within the hour: mailed (tried) again, not withheld.
    failing.store(false, Ordering::SeqCst);
    recover_at(&w, "acme", T0 + 660_000).await;
    failing.store(true, Ordering::SeqCst);
    open_breaker(&w, "acme").await;
    give_up(T0 + 660_000, 2).await;
    assert_eq!(metric(h, "suppressed").await, 0);
    // Both given-up mails count: a third failure this hour is over the cap of 2.
    failing.store(false, Ordering::SeqCst);
    recover_at(&w, "acme", T0 + 1_320_000).await;
    failing.store(true, Ordering::SeqCst);
    open_breaker(&w, "acme").await;
    common::wait_until(SETTLE, "the third failing mail is over the cap", || async {
        metric(h, "suppressed").await == 1
    })
    .await;
    assert_eq!(metric(h, "retried").await, 4);
    assert_eq!(metric(h, "sent").await, 0);
}

/// A mail still being tried when herald stops gives its `min_interval` claim back: after a
/// restart, the endpoint's next failure within the interval is mailed (tried), not withheld
/// for a mail nobody got. Before, the claim stayed and that failure was `suppressed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_still_being_tried_when_herald_stops_gives_its_claim_back() {
    let ca = TestCa::new();
    let sink = SmtpSink::refusing(&ca);
    let tables = format!(
        "[alerts]\nsmtp_url = {}\nfrom = \"herald@alerts.test\"\nmin_interval = \"1h\"\n",
        common::toml_string(&sink.url())
    );
    let mut w = World::start_manual_with_ca(ca, "", &tables, T0).await;
    set_emails(&w, "acme", json!(["ops@acme.test"])).await;
    let failing = Arc::new(AtomicBool::new(true));
    let recv = Receiver::https(&w.ca, switchable(failing.clone()));
    w.endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    open_breaker(&w, "acme").await;
    common::wait_until(SETTLE, "the first try fails", || async {
        metric(&w.herald, "retried").await == 1
    })
    .await;
    // Herald stops while the mail waits for its second try.
    w.herald.restart().await;
    failing.store(false, Ordering::SeqCst);
    recover_at(&w, "acme", T0 + 60_000).await;
    failing.store(true, Ordering::SeqCst);
    open_breaker(&w, "acme").await;
    common::wait_until(SETTLE, "the next failing mail is tried", || async {
        metric(&w.herald, "retried").await == 1
    })
    .await;
    assert_eq!(metric(&w.herald, "suppressed").await, 0);
}

/// Addresses: only ASCII `local@domain` with a dot-atom local part and a domain name; others
/// `422` naming the index. One stored before this rule is skipped when a mail goes out (logged,
/// counted `failed`) and the account's other addresses still get the mail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_the_rule_refuses_is_422_and_one_stored_earlier_is_skipped_alone() {
    let ca = TestCa::new();
    let smtp = SmtpSink::start(&ca, Mode::StartTls);
    let w = World::start_manual_with_ca(ca, "", &alerts_table(&smtp, ""), T0).await;
    let h = &w.herald;
    for bad in [
        "\"a b\"@quoted.example",
        "a@[127.0.0.1]",
        "a%b@relay.example",
        "a!b@relay.example",
        "ops@bücher.example",
    ] {
        let (status, e) = h
            .admin(
                "PUT",
                "/v1/accounts/acme",
                Some(json!({"alert_emails": ["ops@acme.test", bad]})),
            )
            .await;
        assert_eq!(status, 422, "{bad}: {e}");
        assert_eq!(e["error"]["code"], "invalid_field", "{e}");
        assert_eq!(e["error"]["field"], "alert_emails[1]", "{e}");
    }
    let (_, account) = h.admin("GET", "/v1/accounts/acme", None).await;
    assert_eq!(
        account["alert_emails"],
        json!([]),
        "nothing changed: {account}"
    );

    // Stored by an older version, which took them (written here through the store).
    use herald::store::prelude::*;
    h.running()
        .store
        .set_alert_emails(
            "acme",
            vec![
                "\"a b\"@quoted.example".into(),
                "ops@acme.test".into(),
                "a@[127.0.0.1]".into(),
            ],
        )
        .await
        .expect("stored");
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    w.endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    open_breaker(&w, "acme").await;
    let mails = smtp.wait_for(1, SETTLE).await;
    assert_eq!(mails[0].rcpt_tos, ["ops@acme.test"]);
    common::wait_until(SETTLE, "the two skipped addresses are counted", || async {
        metric(h, "failed").await == 2
    })
    .await;
    wait_metric(h, "sent", 1).await;
}

/// With `portal.brand` set, a mail is the brand's: its subject and sender name carry it, and
/// nothing in its subject or body names herald. A disabled mail says why; a recovered one how
/// long the endpoint was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branded_install_mails_in_its_brand_and_never_names_herald() {
    let ca = TestCa::new();
    let smtp = SmtpSink::start(&ca, Mode::StartTls);
    let tables = format!(
        "[portal]\nbrand = \"Acme Cloud\"\n[alerts]\nsmtp_url = {}\nfrom = \"alerts@acme.test\"\n",
        common::toml_string(&smtp.url())
    );
    let w = World::start_manual_with_ca(ca, "", &tables, T0).await;
    set_emails(&w, "acme", json!(["ops@acme.test"])).await;
    let failing = Arc::new(AtomicBool::new(true));
    let recv = Receiver::https(&w.ca, switchable(failing.clone()));
    let (ep, _) = w
        .endpoint(
            "acme",
            &recv.url("/hook"),
            json!({"retry_policy": "none", "description": "Billing sync"}),
        )
        .await;
    open_breaker(&w, "acme").await;
    smtp.wait_for(1, SETTLE).await;
    failing.store(false, Ordering::SeqCst);
    recover_at(&w, "acme", T0 + 150_000).await;
    smtp.wait_for(2, SETTLE).await;
    // Then it answers 410 Gone: disabled.
    let gone = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(410)));
    let (status, _) = w
        .herald
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ep}"),
            Some(json!({"url": gone.url("/gone")})),
        )
        .await;
    assert_eq!(status, 200);
    fail_once(&w, "acme").await;
    let mails = smtp.wait_for(3, SETTLE).await;
    for m in &mails {
        let subject = m.header("Subject").unwrap_or_default();
        assert!(subject.starts_with("[Acme Cloud] "), "{subject}");
        assert_eq!(
            m.header("From").as_deref(),
            Some("\"Acme Cloud\" <alerts@acme.test>"),
            "{m:?}"
        );
        let text = format!("{subject}\n{}", m.body()).to_lowercase();
        assert!(
            !text.contains("herald"),
            "a branded mail names herald:\n{text}"
        );
        assert!(
            m.body().contains("Description:        Billing sync\n"),
            "{}",
            m.body()
        );
    }
    assert!(
        mails[1].body().contains("Down for:           2m 30s\n"),
        "{}",
        mails[1].body()
    );
    assert!(
        mails[2].body().contains("because it answered 410 Gone"),
        "{}",
        mails[2].body()
    );
}

/// `POST /v1/accounts/{id}/alerts/test`: the account's people get a test mail at once, the
/// caller hears whether the mail server took it, and test mails count toward the account's
/// hourly cap, so the button cannot flood the addresses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_alert_is_mailed_at_once_and_counts_toward_the_accounts_hour() {
    let ca = TestCa::new();
    let smtp = SmtpSink::start(&ca, Mode::StartTls);
    let w = World::start_manual_with_ca(
        ca,
        "",
        &alerts_table(&smtp, "max_per_account_per_hour = 2\n"),
        T0,
    )
    .await;
    let h = &w.herald;
    let test = "/v1/accounts/acme/alerts/test";
    let (status, v) = h.admin("POST", test, None).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("no_alert_emails")),
        "{v}"
    );
    set_emails(&w, "acme", json!(["ops@acme.test", "oncall@acme.test"])).await;
    let session = |read_only: bool| async move {
        let (_, s) = h
            .admin(
                "POST",
                "/v1/accounts/acme/portal-sessions",
                Some(json!({ "read_only": read_only })),
            )
            .await;
        s["token"].as_str().unwrap().to_string()
    };
    let (token, read_only) = (session(false).await, session(true).await);

    // The account's own session sends it: both addresses, one mail, at once.
    let (status, v) = h.call("POST", test, Some(&token), None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["account_id"], "acme");
    assert_eq!(v["sent_to"], json!(["ops@acme.test", "oncall@acme.test"]));
    assert_eq!(v["at"], "2026-12-02T12:00:00.000Z");
    let mails = smtp.wait_for(1, SETTLE).await;
    let m = &mails[0];
    let mut to = m.rcpt_tos.clone();
    to.sort();
    assert_eq!(to, ["oncall@acme.test", "ops@acme.test"]);
    assert_eq!(
        m.header("Subject").as_deref(),
        Some("[herald] Test of your webhook failure alerts")
    );
    let body = m.body();
    assert!(body.contains("This is a test mail"), "{body}");
    assert!(body.contains("account acme"), "{body}");
    assert!(body.contains("Nothing is failing."), "{body}");
    assert!(
        body.contains("for account acme at 2026-12-02T12:00:00.000Z."),
        "{body}"
    );
    assert!(!body.contains("  "), "no run of spaces: {body}");
    wait_metric(h, "sent", 1).await;

    // A read-only session may not; another account's session does not see the account.
    let (status, v) = h.call("POST", test, Some(&read_only), None).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("read_only"))
    );
    let (_, other) = h
        .admin(
            "POST",
            "/v1/accounts/other/portal-sessions",
            Some(json!({})),
        )
        .await;
    let (status, _) = h.call("POST", test, other["token"].as_str(), None).await;
    assert_eq!(status, 404);

    // The second fills the hour's cap of 2; the third is refused and not mailed.
    let (status, v) = h.admin("POST", test, None).await;
    assert_eq!(status, 200, "{v}");
    smtp.wait_for(2, SETTLE).await;
    let (status, v) = h.admin("POST", test, None).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (429, Some("alert_cap_reached")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_per_account_per_hour")),
        "{v}"
    );
    wait_metric(h, "suppressed", 1).await;
    assert_eq!(smtp.mails().len(), 2, "a refused test mail was sent");

    // A failing endpoint's mail in the same hour is over the cap too: the test mails counted.
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    w.endpoint("acme", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    open_breaker(&w, "acme").await;
    wait_metric(h, "suppressed", 2).await;
    assert_eq!(smtp.mails().len(), 2, "a mail over the cap was sent");

    // The next clock hour has room again.
    h.clock.set(T0 + HOUR);
    let (status, v) = h.admin("POST", test, None).await;
    assert_eq!(status, 200, "{v}");
    smtp.wait_for(3, SETTLE).await;
}

/// Without `[alerts] smtp_url` a test mail is `409 alerts_off`; a mail server that refuses it
/// is `502 mail_not_sent`, saying what the server answered, counted `failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_alert_says_when_alerts_are_off_or_the_mail_server_refuses() {
    let off = World::start("", "").await;
    set_emails_on(&off.herald, "acme").await;
    let (status, v) = off
        .herald
        .admin("POST", "/v1/accounts/acme/alerts/test", None)
        .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("alerts_off")),
        "{v}"
    );

    let ca = TestCa::new();
    let refusing = SmtpSink::refusing(&ca);
    let w = World::start_manual_with_ca(ca, "", &alerts_table(&refusing, ""), T0).await;
    set_emails_on(&w.herald, "acme").await;
    let (status, v) = w
        .herald
        .admin("POST", "/v1/accounts/acme/alerts/test", None)
        .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (502, Some("mail_not_sent")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("554")),
        "the server's answer: {v}"
    );
    wait_metric(&w.herald, "failed", 1).await;
}

async fn set_emails_on(h: &impl HeraldApi, account: &str) {
    let (status, v) = h
        .admin(
            "PUT",
            &format!("/v1/accounts/{account}"),
            Some(json!({ "alert_emails": ["ops@acme.test"] })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
}
