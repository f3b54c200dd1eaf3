//! The config file: defaults, parsing, and every problem reported with its key.

use super::*;

#[test]
fn empty_file_gives_the_documented_defaults() {
    let c = Config::from_toml("").unwrap();
    c.validate().unwrap();
    assert_eq!(c.server.listen, "127.0.0.1:8080");
    assert_eq!(c.storage.path, PathBuf::from("./herald-data"));
    assert_eq!(c.delivery.timeout, secs(5));
    assert_eq!(c.delivery.max_in_flight_per_endpoint, 8);
    assert_eq!(c.retry_policies["standard"].len(), 7);
    assert_eq!(c.retry_policies["short"], vec![secs(4), secs(16)]);
    assert!(c.retry_policies["none"].is_empty());
    assert!(c.endpoints.require_verification);
}

#[test]
fn example_file_documents_the_defaults() {
    let example = Config::from_toml(include_str!("../../config.example.toml")).unwrap();
    example.validate().unwrap();
    let defaults = Config::from_toml("").unwrap();
    assert_eq!(format!("{example:?}"), format!("{defaults:?}"));
}

#[test]
fn named_policies_take_millisecond_durations() {
    let c = Config::from_toml("[retry_policies]\nfast = [\"300ms\", \"600ms\"]\n").unwrap();
    assert_eq!(
        c.retry_policies["fast"],
        vec![
            Dur(Duration::from_millis(300)),
            Dur(Duration::from_millis(600))
        ]
    );
    assert!(c.retry_policies.contains_key("standard"));
}

#[test]
fn unknown_keys_and_bad_durations_are_errors_naming_the_key() {
    let e = Config::from_toml("[delivery]\ntimeout = \"soon\"\n").unwrap_err();
    assert!(e[0].message.contains("invalid duration"), "{e:?}");
    assert_eq!(e[0].key, "delivery.timeout", "{e:?}");
    let e = Config::from_toml("[server]\nlisten_on = \"x\"\n").unwrap_err();
    assert_eq!(e[0].key, "server.listen_on", "{e:?}");
    let e = Config::from_toml("[catalog.events.\"a.b\"]\ndescriptin = \"x\"\n").unwrap_err();
    assert_eq!(e[0].key, "catalog.events.a.b.descriptin", "{e:?}");
    let e = Config::from_toml("[servr]\n").unwrap_err();
    assert_eq!(e[0].key, "servr", "{e:?}");
}

#[test]
fn one_tables_parse_error_does_not_hide_the_others() {
    let (c, errors) = Config::parse(
        "[server]\nlisten = \"nowhere\"\nlisten_adress = \"x\"\n\
         [delivery]\nmax_in_flight = \"many\"\ntimeout = \"soon\"\n\
         [log]\nformat = \"xml\"\n",
    );
    let mut keys: Vec<String> = errors.into_iter().map(|e| e.key).collect();
    keys.extend(c.validate().unwrap_err().into_iter().map(|e| e.key));
    assert_eq!(
        keys,
        [
            "server.listen_adress",
            "delivery.max_in_flight",
            "delivery.timeout",
            "server.listen",
            "log.format"
        ]
    );
}

#[test]
fn validate_reports_every_problem_with_its_key() {
    let c = Config::from_toml(
        "[server]\nlisten = \"nowhere\"\n[delivery]\nmax_in_flight = 0\n\
         default_retry_policy = \"nope\"\nallow_private_networks = [\"10.0.0.0/99\"]\n\
         [log]\nformat = \"xml\"\n",
    )
    .unwrap();
    let keys: Vec<String> = c
        .validate()
        .unwrap_err()
        .into_iter()
        .map(|e| e.key)
        .collect();
    for k in [
        "server.listen",
        "delivery.max_in_flight",
        "delivery.default_retry_policy",
        "delivery.allow_private_networks[0]",
        "log.format",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
    }
}

#[test]
fn the_proxy_is_an_http_host_and_port() {
    let proxy = |v: &str| Config::from_toml(&format!("[delivery]\nproxy = {v:?}\n")).unwrap();
    assert_eq!(
        proxy("http://10.0.0.5:3128").proxy().unwrap(),
        Some(("10.0.0.5".into(), 3128))
    );
    assert_eq!(
        proxy("http://[fd00::5]:3128/").proxy().unwrap(),
        Some(("fd00::5".into(), 3128))
    );
    assert_eq!(
        proxy("http://egress.internal").proxy().unwrap(),
        Some(("egress.internal".into(), 80))
    );
    for bad in [
        "https://egress:3128",
        "socks5://egress:1080",
        "http://user:secret@egress:3128",
        "http://egress:3128/path",
        "egress:3128",
    ] {
        let c = proxy(bad);
        let e = c.validate().unwrap_err();
        assert_eq!(e[0].key, "delivery.proxy", "{bad}: {e:?}");
        assert!(!e[0].message.contains("secret"), "{bad}: {e:?}");
    }
}

#[test]
fn the_postgres_backend_needs_one_url_and_sane_limits() {
    let problems = |toml: &str| -> Vec<(String, String)> {
        let c = Config::from_toml(toml).unwrap();
        c.validate()
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.key, e.message))
            .collect()
    };
    // The default backend reads nothing of [storage.postgres].
    assert!(problems("[storage.postgres]\npool_size = 0\n").is_empty());
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.storage.backend, StoreKind::Sled);
    assert_eq!(c.storage.postgres.pool_size, 16);
    assert_eq!(c.storage.postgres.lease, secs(30));

    let p = problems("[storage]\nbackend = \"postgres\"\n");
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, "storage.postgres.url");
    assert!(p[0].1.contains("is required"), "{p:?}");

    let p = problems(
        "[storage]\nbackend = \"postgres\"\n[storage.postgres]\n\
         url = \"postgres://u:sekrit@h/db\"\nurl_file = \"/nonexistent\"\n",
    );
    assert_eq!(p[0].0, "storage.postgres.url", "{p:?}");
    assert!(p[0].1.contains("both set"), "{p:?}");

    let p = problems(
        "[storage]\nbackend = \"postgres\"\n[storage.postgres]\n\
         url = \"postgres://u:sekrit@h:notaport/db\"\npool_size = 0\nlease = \"1s\"\n\
         ca_file = \"/nonexistent/ca.pem\"\n",
    );
    let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "storage.postgres.url",
            "storage.postgres.pool_size",
            "storage.postgres.lease",
            "storage.postgres.ca_file"
        ],
        "{p:?}"
    );
    assert!(
        p.iter().all(|(_, m)| !m.contains("sekrit")),
        "a message quoted the password: {p:?}"
    );
    let e = Config::from_toml("[storage]\nbackend = \"mysql\"\n").unwrap_err();
    assert_eq!(e[0].key, "storage.backend", "{e:?}");
}

#[test]
fn the_database_url_can_come_from_a_file_and_never_shows_in_debug() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("url");
    std::fs::write(&file, "\n  postgres://u:sekrit@db/herald  \n").unwrap();
    let c = Config::from_toml(&format!(
        "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl_file = {:?}\n",
        file.display().to_string()
    ))
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.postgres_url().unwrap(), "postgres://u:sekrit@db/herald");
    let c = Config::from_toml(
        "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = \"postgres://u:sekrit@db/h\"\n",
    )
    .unwrap();
    assert!(!format!("{c:?}").contains("sekrit"));
}

#[path = "example_tests.rs"]
mod example_tests;

#[test]
fn a_telemetry_endpoint_must_be_a_collectors_base_url() {
    let ok = Config::from_toml("[telemetry]\notlp_endpoint = \"https://otel.example.com:4318\"\n")
        .unwrap();
    assert!(ok.validate().is_ok());
    let c =
        Config::from_toml("[telemetry]\notlp_endpoint = \"otel:4318/v1/traces?x=1\"\n").unwrap();
    let e = c.validate().unwrap_err();
    assert_eq!(e[0].key, "telemetry.otlp_endpoint", "{e:?}");
    let (_, errors) = Config::parse("[telemetry]\nendpoint = \"http://x\"\n");
    assert_eq!(errors[0].key, "telemetry.endpoint", "{errors:?}");
}
