//! The portal and the console in a real browser (README.md): herald runs with a receiver that
//! fails some requests with an HTML body, events with HTML in their payloads are delivered, and
//! `tests/browser/test_pages.py` drives Debian's Chromium through Playwright over the pages:
//! sign-in, overview, minting a portal link, one account's view, creating an endpoint (secret
//! shown once), a test event, the log and its filters, a failed delivery and Retry, Recover's
//! count before confirming, read-only sessions, HTML shown as text, the safety headers, 360 px
//! and keyboard-only use. Screenshots of every view go to `target/screenshots/`.
//!
//! Needs python3, Playwright for Python (`tests/browser/requirements.txt`) and
//! `/usr/bin/chromium`; without them the test fails and says how to install them.

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::herald::ADMIN_TOKEN;
use common::smtp::{Mode, SmtpSink};
use common::{behaviour, first_delivery, HeraldApi, Receiver, Reply, World};

const XSS_IMG: &str = "<img src=x onerror=alert(1)>";
const XSS_SCRIPT: &str = "</script><script>alert(2)</script>";
/// A right-to-left override: applied, "invoice\u{202E}fdp.exe" reads "invoiceexe.pdf".
const BIDI: &str = "invoice\u{202E}fdp.exe";
const CHROMIUM: &str = "/usr/bin/chromium";
/// The browser run takes about 15 s; this bounds a wedged one.
const BROWSER_DEADLINE: Duration = Duration::from_secs(180);

const TABLES: &str = r#"
[plans.growth]
per_minute = 600
per_day = 100000

[catalog.events."order.created"]
description = "A customer placed an order"
sample = { order_id = "ord_1001", total = 4200, currency = "EUR", note = "<b>gift wrap</b>" }
schema = { type = "object", required = ["order_id"], properties = { order_id = { type = "string" }, total = { type = "integer" } } }

[catalog.events."invoice.paid"]
description = "An invoice was paid in full"
sample = { invoice_id = "inv_77", amount = 1999 }

[catalog.events."profile.updated"]
description = "A location's profile changed"
deprecated = true
replaced_by = "profile.changed"
sample = { location_id = "loc_9" }
debounce = { window = "60s", key = "location_id", mode = "leading" }

[catalog.events."profile.changed"]
description = "A location's profile changed (with what changed)"
sample = { location_id = "loc_9", changed = ["name"] }
"#;

/// Fails (never skips) when the browser stack is missing, saying how to install it.
pub fn require_browser_stack(root: &Path) {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import importlib.metadata as m, playwright.sync_api; print(m.version('playwright'))",
        ])
        .current_dir(root)
        .output();
    match probe {
        Err(e) => panic!(
            "tests/api/pages.rs needs python3 ({e}); install it: apt-get install -y python3 python3-pip"
        ),
        Ok(o) if !o.status.success() => panic!(
            "tests/api/pages.rs needs Playwright for Python; install it: \
             python3 -m pip install -r tests/browser/requirements.txt\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => {}
    }
    assert!(
        Path::new(CHROMIUM).exists(),
        "tests/api/pages.rs needs Debian's Chromium at {CHROMIUM}; install it: apt-get install -y chromium \
         (Playwright drives the system browser; `playwright install` is not used)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portal_and_console_work_in_a_real_browser() {
    let started = Instant::now();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    require_browser_stack(&root);

    // Failure alerts mail a real SMTP server: the Alerts view's test mail must reach it.
    let ca = common::TestCa::new();
    let smtp = SmtpSink::start(&ca, Mode::StartTls);
    let alerts = format!(
        "{TABLES}\n[alerts]\nsmtp_url = {}\nfrom = \"alerts@platform.test\"\nmax_per_account_per_hour = 1000\n",
        common::toml_string(&smtp.url())
    );
    let w = World::start_with_ca(ca, "", &alerts).await;
    // "/fail..." answers 500 with an HTML body (it must show as text), "/gone..." 410 Gone;
    // anything else 200.
    let rx = Receiver::https(
        &w.ca,
        behaviour(|r, _| {
            if r.path.starts_with("/gone") {
                Reply::status(410)
            } else if r.path.starts_with("/fail") {
                Reply::status(500)
                    .with_header("content-type", "text/html")
                    .with_body(format!("{XSS_IMG} {XSS_SCRIPT} {BIDI}"))
            } else {
                Reply::status(200).with_body("ok")
            }
        }),
    );

    let (status, answer) = w
        .herald
        .admin("PUT", "/v1/accounts/acme", Some(json!({"plan": "growth"})))
        .await;
    assert_eq!(status, 200, "sync the plan: {answer}");
    // Neither takes the held or the gone endpoint's events (a payload filter on the type).
    let not_held = json!({"type": {"$nin": ["held.test", "gone.test"]}});
    let (ok_endpoint, _) = w
        .endpoint(
            "acme",
            &rx.url("/ok/acme"),
            json!({"description": "Order service", "filter": not_held}),
        )
        .await;
    let (failing_endpoint, _) = w
        .endpoint(
            "acme",
            &rx.url("/fail/acme"),
            json!({"description": "Billing sync (answers 500)", "retry_policy": "none",
                   "headers": {"x-team": "billing"}, "filter": not_held}),
        )
        .await;
    // An endpoint whose breaker is open: ten failures in a row, then a delivery it holds.
    let (held_endpoint, _) = w
        .endpoint(
            "acme",
            &rx.url("/fail/held"),
            json!({"description": format!("Held by its breaker {BIDI}"), "event_types": ["held.test"]}),
        )
        .await;
    // An endpoint its receiver disabled: it answered 410 Gone.
    let (gone_endpoint, _) = w
        .endpoint(
            "acme",
            &rx.url("/gone/acme"),
            json!({"description": "Old CRM hook", "event_types": ["gone.test"]}),
        )
        .await;
    w.ingest("acme", "gone.test", json!({})).await;
    let path = format!("/v1/endpoints/{gone_endpoint}");
    common::wait_until(
        Duration::from_secs(20),
        "the 410 disables the endpoint",
        || async { w.herald.admin("GET", &path, None).await.1["state"] == "disabled" },
    )
    .await;
    let (other_endpoint, _) = w.endpoint("globex", &rx.url("/ok/globex"), json!({})).await;
    // An account the console purges.
    w.endpoint("initech", &rx.url("/ok/initech"), json!({}))
        .await;
    let purged_delivery = first_delivery(
        &w.ingest(
            "initech",
            "order.created",
            json!({"order_id": "ord_initech"}),
        )
        .await,
    );

    let mut failing = Vec::new();
    let mut delivered = Vec::new();
    for i in 0..6 {
        let kind = ["order.created", "invoice.paid"][i % 2];
        let answer = w
            .ingest(
                "acme",
                kind,
                json!({"order_id": format!("ord_{i}"), "note": XSS_IMG, "html": XSS_SCRIPT,
                       "file": BIDI, "total": 4200 + i}),
            )
            .await;
        for d in answer["deliveries"].as_array().expect("deliveries") {
            let id = d["delivery_id"].as_str().expect("delivery id").to_string();
            if d["endpoint_id"] == failing_endpoint.as_str() {
                failing.push(id);
            } else {
                assert_eq!(d["endpoint_id"], Value::from(ok_endpoint.as_str()));
                delivered.push(id);
            }
        }
    }
    let other_delivery = first_delivery(
        &w.ingest("globex", "order.created", json!({"order_id": "ord_globex"}))
            .await,
    );
    // Every fixture delivery settles before the browser looks.
    for id in &failing {
        w.wait_state(id, "failed", Duration::from_secs(20)).await;
    }
    for id in delivered.iter().chain([&other_delivery, &purged_delivery]) {
        w.wait_state(id, "delivered", Duration::from_secs(20)).await;
    }
    let failed_delivery = failing[0].clone();
    for i in 0..10 {
        w.ingest("acme", "held.test", json!({ "n": i })).await;
    }
    let path = format!("/v1/endpoints/{held_endpoint}");
    common::wait_until(
        Duration::from_secs(20),
        "the held endpoint's breaker opens",
        || async { w.herald.admin("GET", &path, None).await.1["breaker"]["state"] == "open" },
    )
    .await;
    let held_delivery = first_delivery(&w.ingest("acme", "held.test", json!({"n": 10})).await);
    // More deliveries than one incidents request looks at (an account without endpoints: one
    // no_endpoint record each), so the console's incidents over every account are partial.
    for batch in 0..6 {
        let events: Vec<Value> = (0..850)
            .map(|i| json!({"account_id": "bulk", "type": "bulk.test", "payload": {"n": batch * 850 + i}}))
            .collect();
        let (status, answer) = w.herald.ingest_batch(json!(events)).await;
        assert_eq!(status, 202, "{answer}");
    }
    let setup = started.elapsed();

    let shots = root.join("target").join("screenshots");
    let envs = [
        ("ACCOUNT", "acme".to_string()),
        ("OTHER_ACCOUNT", "globex".to_string()),
        ("OTHER_DELIVERY", other_delivery),
        ("OTHER_ENDPOINT", other_endpoint),
        ("PURGE_ACCOUNT", "initech".to_string()),
        ("FAILED_DELIVERY", failed_delivery),
        ("FAILING_ENDPOINT", failing_endpoint),
        ("HELD_ENDPOINT", held_endpoint),
        ("HELD_DELIVERY", held_delivery),
        ("GONE_ENDPOINT", gone_endpoint),
        ("RECEIVER_URL", rx.url("/ok/new")),
    ];
    run_browser_script(&root, "tests/browser/test_pages.py", &envs, &w.herald).await;
    let tests: Vec<_> = smtp
        .mails()
        .into_iter()
        .filter(|m| {
            m.header("Subject").as_deref() == Some("[herald] Test of your webhook failure alerts")
        })
        .collect();
    assert_eq!(
        tests.len(),
        1,
        "the Alerts view's test mail: {:?}",
        smtp.mails()
    );
    let mut to = tests[0].rcpt_tos.clone();
    to.sort();
    assert_eq!(to, ["oncall@customer.test", "ops@customer.test"]);
    println!(
        "setup {:.1}s, browser {:.1}s; screenshots in {}",
        setup.as_secs_f64(),
        (started.elapsed() - setup).as_secs_f64(),
        shots.display()
    );
}

/// Runs a browser script of `tests/browser/` against `herald` with `envs` (besides herald's URL,
/// the admin token, the screenshot directory and the browser), failing with its output and
/// herald's log unless it exits 0 within [`BROWSER_DEADLINE`].
pub async fn run_browser_script(
    root: &Path,
    script: &str,
    envs: &[(&str, String)],
    herald: &common::Herald,
) {
    let shots = root.join("target").join("screenshots");
    std::fs::create_dir_all(&shots).expect("create target/screenshots");
    let mut child = Command::new("python3")
        .arg(script)
        .current_dir(root)
        .env("PYTHONUNBUFFERED", "1")
        .env("HERALD_URL", herald.base_url())
        .env("HERALD_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("SCREENSHOT_DIR", &shots)
        .env("CHROMIUM", CHROMIUM)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start python3 {script}: {e}"));
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("stdout")));
    let stderr = read(Box::new(child.stderr.take().expect("stderr")));
    // Waited with Tokio timers: herald's receiver runs on this runtime and must keep answering.
    let end = Instant::now() + BROWSER_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the browser test") {
            break Some(status);
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let out = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    match status {
        Some(s) if s.success() => {
            println!("{out}");
        }
        Some(s) => panic!(
            "the browser test failed ({s}):\n{out}\n{err}\nscreenshots in {}\nherald's log:\n{}",
            shots.display(),
            herald.log_text()
        ),
        None => {
            panic!("the browser test did not finish within {BROWSER_DEADLINE:?}:\n{out}\n{err}")
        }
    }
}
