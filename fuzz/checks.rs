//! What the fuzz targets check, shared with `tests/command/fuzz_regressions.rs` so a saved input is
//! replayed through exactly the calls and assertions that flagged it. Each function takes one
//! arbitrary input and panics if herald breaks a rule; the comments say why each rule holds.
//!
//! Included with `#[path]` by fuzz/fuzz_targets/*.rs and by tests/command/fuzz_regressions.rs; it uses
//! only herald's public API plus serde_json and url (dependencies of both crates).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use herald::api::{body, ingest, validate};
use herald::clock::Millis;
use herald::config::Config;
use herald::engine::EngineConfig;
use herald::policy::schema::Catalog;
use herald::policy::ssrf::{refused_range, Guard};
use herald::policy::url::{check_endpoint_url, literal_ip};
use herald::policy::{debounce, retry};
use serde_json::value::RawValue;
use serde_json::Value;
use url::{Host, Url};

// ---------------------------------------------------------------------------------------------
// ingest_body: `POST /v1/events` bodies.

/// The defaults (`catalog.strict = false`, no event types).
static OPEN: LazyLock<Config> = LazyLock::new(|| Config::from_toml("").unwrap());

/// A strict catalog with one declared type that has a debounce rule.
static STRICT: LazyLock<Config> = LazyLock::new(|| {
    let c = Config::from_toml(
        r#"
        [catalog]
        strict = true
        validate = true
        [catalog.events."review.created"]
        description = "fuzz"
        debounce = { window = "60s", key = "location_id", mode = "leading_trailing" }
        schema = { type = "object", properties = { stars = { type = "integer", minimum = 1, maximum = 5 } } }
        "#,
    )
    .unwrap();
    c.validate().unwrap();
    c
});

/// Any bytes may arrive from the network: parsing ends in `Ok` or an `ApiError` (never a panic,
/// hang or huge allocation), and what it accepts meets the rules the rest of herald relies on
/// without checking again.
/// The catalogs' compiled schemas.
static OPEN_SCHEMAS: LazyLock<Catalog> = LazyLock::new(|| OPEN.compile_schemas().unwrap());
static STRICT_SCHEMAS: LazyLock<Catalog> = LazyLock::new(|| STRICT.compile_schemas().unwrap());

pub fn ingest_body(data: &[u8]) {
    for (config, schemas) in [(&*OPEN, &*OPEN_SCHEMAS), (&*STRICT, &*STRICT_SCHEMAS)] {
        match ingest::parse_event(config, schemas, data) {
            Ok(ev) => {
                // Accepted ids are what the store keys and the routes match on.
                validate::account_id_str("account_id", &ev.account_id).unwrap();
                validate::event_type("type", &ev.event_type).unwrap();
                if config.catalog.strict {
                    assert!(config.catalog.events.contains_key(&ev.event_type));
                }
                // With validation on, an accepted payload satisfies its type's schema.
                if config.catalog.validate {
                    let payload: Value = serde_json::from_slice(&ev.payload).unwrap();
                    assert_eq!(schemas.validate(&ev.event_type, &payload), Ok(()));
                }
                // The payload is stored and sent as is, and shown again by GET /v1/events/{id}
                // as a RawValue: it must be exactly one JSON object.
                let payload: &RawValue = serde_json::from_slice(&ev.payload).unwrap();
                assert!(payload.get().starts_with('{'), "payload {payload}");
                // It is I-JSON, so the payload filters read it as it is (never a stand-in).
                if let Err(e) = serde_json::from_slice::<Value>(&ev.payload) {
                    panic!("accepted payload {payload} does not parse: {e}");
                }
                if let Some(k) = &ev.idempotency_key {
                    assert!((1..=255).contains(&k.len()));
                }
                if let Some(k) = &ev.debounce_key {
                    assert!(k.len() <= 255);
                }
                // What the handler does next for a debounced type: find the key. A payload
                // herald accepted must be one herald itself can read that key from.
                if let Some(rule) = config
                    .catalog
                    .events
                    .get(&ev.event_type)
                    .and_then(|e| e.debounce.as_ref())
                {
                    let key = debounce::key_of(ev.debounce_key.as_deref(), &ev.payload, &rule.key);
                    // The key is found whenever the payload has the field as a string or an
                    // integer at its top level, whatever else the payload holds.
                    let top: Option<std::collections::HashMap<String, &RawValue>> =
                        serde_json::from_slice(&ev.payload).ok();
                    let field = top.as_ref().and_then(|m| m.get(&rule.key)).map(|r| r.get());
                    let keyable = field.is_some_and(|f| {
                        f.starts_with('"')
                            || serde_json::from_str::<Value>(f)
                                .is_ok_and(|v| v.is_i64() || v.is_u64())
                    });
                    if ev.debounce_key.is_none() && keyable {
                        assert!(
                            key.is_some(),
                            "debounce key {:?} not found in {payload}",
                            rule.key
                        );
                    }
                }
            }
            // Only the client's mistakes come out of parsing: 400 malformed JSON, 422 a field.
            Err(e) => {
                assert!(matches!(e.status.as_u16(), 400 | 422), "{e:?}");
                let _ = e.body();
            }
        }
    }

    // The generic body parser: `Ok` exactly for a JSON object (with nothing after it).
    let parsed = body::parse::<Value>(data);
    match (&parsed, &serde_json::from_slice::<Value>(data)) {
        (Ok(v), Ok(w)) => assert!(v.is_object() && v == w),
        (Ok(v), Err(e)) => panic!("body::parse accepted {v} that serde_json refuses: {e}"),
        (Err(_), Ok(w)) => assert!(!w.is_object(), "body::parse refused the object {w}"),
        (Err(_), Err(_)) => {}
    }
    if let Err(e) = parsed {
        assert!(matches!(e.status.as_u16(), 400 | 422), "{e:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// config_toml: the config file.

/// A realistic "now" (2027-01-15) in Unix milliseconds, for the arithmetic done at run time.
const NOW: Millis = 1_800_000_000_000;

/// `herald check-config` and `herald serve` run `parse` and `validate` on the operator's file:
/// any text ends in a config plus a list of problems, never a panic. And `validate` promises
/// "empty means the config can run", so what herald derives from a config that passes must not
/// panic or overflow either.
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (mut config, parse_errors) = Config::parse(text);
    // validate() reads every catalog `sample_file` whole. The operator picks those paths; an
    // input naming /dev/zero or /dev/stdin would "find" a hang that is not a bug, so anything
    // but a small regular file is swapped for a missing one (the error path still runs).
    for ev in config.catalog.events.values_mut() {
        if let Some(p) = &ev.sample_file {
            let small = std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() <= 65_536);
            if !small {
                ev.sample_file = Some(PathBuf::from("/nonexistent/herald-fuzz/sample.json"));
            }
        }
    }
    if !parse_errors.is_empty() || config.validate().is_err() {
        return;
    }

    // From here on the config passed: herald would start with it.
    config
        .listen_addr()
        .expect("validate checked server.listen");
    config
        .private_allowlist()
        .expect("validate checked the allow-list");
    let engine = EngineConfig::from_config(&config);
    // Herald keeps time as i64 Unix milliseconds and adds configured durations to "now" (retry
    // due times, debounce window ends, secret rotation, breaker and retention cut-offs) after
    // `as Millis` casts, which wrap silently in release builds. So every duration that passes
    // must fit: NOW + d in i64 milliseconds.
    let fits = |what: &dyn Fn() -> String, d: Duration| {
        let ms = i64::try_from(d.as_millis()).unwrap_or(-1);
        assert!(
            ms >= 0 && NOW.checked_add(ms).is_some(),
            "{} = {d:?} passes validate but overflows",
            what()
        );
    };
    fits(&|| "storage.retention".into(), config.storage.retention.0);
    fits(
        &|| "endpoints.disable_after".into(),
        config.endpoints.disable_after.0,
    );
    fits(
        &|| "signing.rotation_grace".into(),
        config.signing.rotation_grace.0,
    );
    assert!(engine.retention_ms >= 0 && engine.disable_after_ms >= 0 && engine.probe_time_ms > 0);
    // Every step of every retry policy, with the extreme jitter either way (the longest first),
    // as computed after a failed attempt (engine/attempt.rs).
    for (name, policy) in &engine.policies {
        for attempt in 1..=policy.len() as u32 {
            for jitter in [1.0, 0.0, -1.0] {
                let wait = retry::next_delay(policy, attempt, jitter, None).expect("a step");
                fits(&|| format!("retry_policies.{name}[{}]", attempt - 1), wait);
            }
        }
    }
    // A debounced type's window, converted as ingest does and opened as the store does.
    for (ty, ev) in &config.catalog.events {
        if let Some(rule) = &ev.debounce {
            fits(
                &|| format!("catalog.events.{ty:?}.debounce.window"),
                rule.window.0,
            );
            let window_ms = rule.window.0.as_millis() as Millis;
            debounce::decide(None, NOW, window_ms, rule.mode == "leading_trailing");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// endpoint_url: endpoint URLs and the SSRF guard.

/// An operator's allow-list: IPv4 ranges, an IPv6 range, and IPv4 spelled as a mapped range.
static ALLOWING: LazyLock<Guard> = LazyLock::new(|| {
    let nets = [
        "127.0.0.0/8",
        "10.1.0.0/16",
        "::1/128",
        "fd00::/8",
        "::ffff:192.168.0.0/112",
    ];
    Guard::new(nets.iter().map(|n| n.parse().unwrap()).collect())
});
static DEFAULT: LazyLock<Guard> = LazyLock::new(Guard::default);

/// Input layout: byte 0 = flags (bit 0: `delivery.allow_http`, bit 1: use the allow-list
/// guard), bytes 1..17 = an address (the first 4 as IPv4, all 16 as IPv6; zero-padded when
/// short), bytes 17.. = the URL text (lossy UTF-8, as the JSON layer would hand it over).
///
/// `check_endpoint_url` is what stands between an API caller and an internal address, so
/// besides "never panic" it must agree with the guard it calls and with what is sent later.
pub fn endpoint_url(data: &[u8]) {
    let flags = data.first().copied().unwrap_or(0);
    let allow_http = flags & 1 != 0;
    let guard: &Guard = if flags & 2 != 0 { &ALLOWING } else { &DEFAULT };
    let mut raw = [0u8; 16];
    let addr = data.get(1..data.len().min(17)).unwrap_or_default();
    raw[..addr.len()].copy_from_slice(addr);
    let v4 = Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]);
    let v6 = Ipv6Addr::from(raw);

    for ip in [IpAddr::V4(v4), IpAddr::V6(v6)] {
        check_ip(ip);
    }
    check_embeddings(v4, v6);
    let text = String::from_utf8_lossy(data.get(17..).unwrap_or_default());
    check_url(&text, allow_http, guard);
}

/// `Guard::check` and `refused_range` share one classifier: the default guard refuses exactly
/// the table's addresses under the table's name, and an allow-list only ever removes refusals.
/// A refusal it keeps has the default's name, but one: a local-use NAT64 address is judged by
/// its IPv4 address first and then as a range of its own, so when the allow-list lets the IPv4
/// address through, the address is still refused, as local-use NAT64.
fn check_ip(ip: IpAddr) {
    let range = refused_range(ip);
    let default = DEFAULT.check(ip);
    assert_eq!(default.as_ref().err().map(|r| r.range), range, "{ip}");
    if let Err(r) = &default {
        assert_eq!(r.addr, ip);
    }
    if let Err(r) = ALLOWING.check(ip) {
        assert!(range.is_some(), "{ip}: the allow-list added a refusal");
        let named = match ip {
            IpAddr::V6(v6) if u128::from(v6) >> 80 == 0x0064_ff9b_0001 => {
                let v4 = Ipv4Addr::from(u128::from(v6) as u32);
                match ALLOWING.check(IpAddr::V4(v4)) {
                    Ok(()) => Some(LOCAL_NAT64),
                    Err(_) => range,
                }
            }
            _ => range,
        };
        assert_eq!(Some(r.range), named, "{ip}: refused under another name");
    }
}

/// The local-use NAT64 prefix's range name (the guard's table).
const LOCAL_NAT64: &str = "64:ff9b:1::/48 (local-use NAT64)";

/// An IPv6 address that carries an IPv4 address (mapped, NAT64, 6to4) reaches that IPv4 host,
/// so it must be refused, named and allowed exactly like the IPv4 address itself.
fn check_embeddings(v4: Ipv4Addr, v6: Ipv6Addr) {
    let [a, b, c, d] = v4.octets();
    let (hi, lo) = (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
    let s = v6.segments();
    let forms = [
        v4.to_ipv6_mapped(),
        Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo),
        // 6to4 keeps the site's own subnet and interface bits: take them from the input.
        Ipv6Addr::new(0x2002, hi, lo, s[3], s[4], s[5], s[6], s[7]),
    ];
    let plain = IpAddr::V4(v4);
    for form in forms.map(IpAddr::V6) {
        assert_eq!(
            refused_range(form),
            refused_range(plain),
            "{form} carries {v4}"
        );
        assert_eq!(
            ALLOWING.check(form).is_ok(),
            ALLOWING.check(plain).is_ok(),
            "{form}"
        );
    }
    // IPv4-compatible `::a.b.c.d`: `::` and `::1` have their own names, so only refusal counts.
    let compatible = IpAddr::V6(Ipv6Addr::from(u128::from(u32::from(v4))));
    assert_eq!(
        refused_range(compatible).is_some(),
        refused_range(plain).is_some(),
        "{compatible}"
    );
}

fn check_url(text: &str, allow_http: bool, guard: &Guard) {
    let checked = check_endpoint_url(text, allow_http, guard);
    if let Ok(url) = &checked {
        assert!(
            url.scheme() == "https" || (allow_http && url.scheme() == "http"),
            "{url}"
        );
        assert!(
            url.username().is_empty() && url.password().is_none(),
            "{url}"
        );
        match url.host() {
            // Literal addresses are decided now: an accepted one passes the guard.
            Some(Host::Ipv4(_) | Host::Ipv6(_)) => {
                let ip = literal_ip(url).unwrap();
                assert!(guard.check(ip).is_ok(), "{url} accepted with refused {ip}");
            }
            // Names are resolved and checked at send time; a "name" that is really an address
            // would have skipped the check at creation.
            Some(Host::Domain(d)) => {
                assert!(!d.is_empty(), "{url}");
                assert!(
                    d.parse::<IpAddr>().is_err(),
                    "{url}: domain {d:?} is an address"
                );
            }
            None => panic!("{url} accepted without a host"),
        }
        // The API stores `url.to_string()` and the sender parses that again: it must still be
        // the same URL, and still pass.
        let again = check_endpoint_url(url.as_str(), allow_http, guard);
        assert_eq!(
            again.as_ref().ok(),
            Some(url),
            "stored form {url} re-checks as {again:?}"
        );
    }
    // The other way round: whatever `url` parses to a refused literal address is refused.
    for candidate in [text, text.trim()] {
        if let Ok(parsed) = Url::parse(candidate) {
            if let Some(ip) = literal_ip(&parsed) {
                if guard.check(ip).is_err() {
                    assert!(
                        checked.is_err(),
                        "{candidate:?} parses to refused {ip}, yet passes"
                    );
                }
            }
        }
    }
}
