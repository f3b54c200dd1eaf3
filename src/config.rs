//! The one TOML file: structs with compiled-in defaults, then the file, then [`Config::validate`].
//!
//! Every key of SPEC §11 lives here with its default; `config.example.toml` documents each once.
//! Unknown keys are errors (a typo must not silently fall back to a default). Validation collects
//! every problem with its key path, so `check-config` and `serve` report them all at once before
//! anything binds.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use crate::model::Plan;
use crate::policy::ssrf::Cidr;

/// A duration written as `"300ms"`, `"5s"`, `"10h"`, `"5d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

/// The longest duration any key takes. Durations become milliseconds added to the clock; a
/// bound keeps that arithmetic (and the ±10 % jitter on retry delays) far from overflowing.
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 366 * 86_400);

/// The shortest token accepted (SPEC §9).
pub const MIN_TOKEN_LEN: usize = 16;
/// The largest `delivery.response_body_limit`: an attempt's record keeps the excerpt, and every
/// record must stay below the size at which the store could no longer fsync it.
pub const MAX_RESPONSE_BODY_LIMIT: usize = 4096;

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let d = humantime::parse_duration(s.trim()).map_err(|e| {
            serde::de::Error::custom(format!(
                "invalid duration {s:?} ({e}); write it like \"300ms\", \"5s\", \"10h\" or \"5d\""
            ))
        })?;
        if d > MAX_DURATION {
            return Err(serde::de::Error::custom(format!(
                "duration {s:?} is longer than the longest allowed, \"3660d\""
            )));
        }
        Ok(Dur(d))
    }
}

fn secs(n: u64) -> Dur {
    Dur(Duration::from_secs(n))
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: Server,
    pub storage: Storage,
    pub delivery: Delivery,
    pub retry_policies: BTreeMap<String, Vec<Dur>>,
    pub signing: Signing,
    pub endpoints: Endpoints,
    pub plans: BTreeMap<String, Plan>,
    pub catalog: Catalog,
    pub operator: Operator,
    pub log: Log,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    pub listen: String,
    pub admin_tokens: Vec<String>,
    pub ingest_tokens: Vec<String>,
    pub admin_token_file: Option<PathBuf>,
    pub ingest_token_file: Option<PathBuf>,
    pub max_body_bytes: usize,
    pub max_connections: usize,
    pub max_header_bytes: usize,
    pub request_timeout: Dur,
}

impl Default for Server {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            admin_tokens: Vec::new(),
            ingest_tokens: Vec::new(),
            admin_token_file: None,
            ingest_token_file: None,
            max_body_bytes: 262_144,
            max_connections: 1024,
            max_header_bytes: 16 * 1024,
            request_timeout: secs(30),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    pub path: PathBuf,
    pub retention: Dur,
    pub cache_capacity: u64,
}

impl Default for Storage {
    fn default() -> Self {
        Self {
            path: PathBuf::from("./herald-data"),
            retention: secs(30 * 86_400),
            cache_capacity: 64 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Delivery {
    pub connect_timeout: Dur,
    pub timeout: Dur,
    pub max_in_flight: usize,
    pub max_in_flight_per_endpoint: usize,
    pub default_retry_policy: String,
    pub allow_http: bool,
    pub allow_private_networks: Vec<String>,
    pub extra_ca_file: Option<PathBuf>,
    pub response_body_limit: usize,
}

impl Default for Delivery {
    fn default() -> Self {
        Self {
            connect_timeout: secs(5),
            timeout: secs(5),
            max_in_flight: 512,
            max_in_flight_per_endpoint: 8,
            default_retry_policy: "standard".into(),
            allow_http: false,
            allow_private_networks: Vec::new(),
            extra_ca_file: None,
            response_body_limit: 4096,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Signing {
    pub schemes: Vec<String>,
    pub hex_header: String,
    pub rotation_grace: Dur,
}

impl Default for Signing {
    fn default() -> Self {
        Self {
            schemes: vec!["standard".into()],
            hex_header: "herald-signature".into(),
            rotation_grace: secs(86_400),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Endpoints {
    pub require_verification: bool,
    pub max_per_account: usize,
    pub disable_after: Dur,
}

impl Default for Endpoints {
    fn default() -> Self {
        Self {
            require_verification: true,
            max_per_account: 10,
            disable_after: secs(5 * 86_400),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Catalog {
    pub strict: bool,
    pub events: BTreeMap<String, CatalogEvent>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogEvent {
    pub description: String,
    pub sample: Option<toml::Table>,
    pub sample_file: Option<PathBuf>,
    pub debounce: Option<Debounce>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Debounce {
    pub window: Dur,
    pub key: String,
    #[serde(default = "default_debounce_mode")]
    pub mode: String,
}

fn default_debounce_mode() -> String {
    "leading".into()
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Operator {
    pub webhook_url: Option<String>,
    pub secret: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    pub format: String,
    pub level: String,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            format: "text".into(),
            level: "info".into(),
        }
    }
}

/// One problem in a config, with the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// The retry policies every install has; `[retry_policies]` may override them.
pub fn builtin_retry_policies() -> BTreeMap<String, Vec<Dur>> {
    let d = |s: &str| Dur(humantime::parse_duration(s).expect("built-in durations parse"));
    BTreeMap::from([
        ("none".to_string(), vec![]),
        ("short".to_string(), vec![d("4s"), d("16s")]),
        (
            "standard".to_string(),
            ["5s", "5m", "30m", "2h", "5h", "10h", "10h"]
                .into_iter()
                .map(d)
                .collect(),
        ),
    ])
}

impl Config {
    /// Parses TOML over the compiled-in defaults; use [`Config::validate`] for the rest.
    pub fn from_toml(text: &str) -> Result<Config, Vec<ConfigError>> {
        let (config, errors) = Config::parse(text);
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }

    /// Parses what it can: each top-level table on its own, so one table's unknown key or wrong
    /// type does not hide the problems of the others (a table that fails keeps its defaults, so
    /// [`Config::validate`] can still check the rest). Errors carry the full key path.
    pub fn parse(text: &str) -> (Config, Vec<ConfigError>) {
        let mut config = Config::default();
        let mut errors = Vec::new();
        let mut table: toml::Table = match text.parse() {
            Ok(t) => t,
            Err(e) => {
                let e: toml::de::Error = e;
                errors.push(ConfigError {
                    key: "(syntax)".into(),
                    message: one_line(&e.to_string()),
                });
                return (config, errors);
            }
        };
        fn section<T: serde::de::DeserializeOwned>(
            table: &mut toml::Table,
            name: &str,
            slot: &mut T,
            errors: &mut Vec<ConfigError>,
        ) {
            let Some(mut value) = table.remove(name) else {
                return;
            };
            // serde stops at the first problem; drop the offending key and go again, so every
            // problem of the table is reported (bounded, in case a key cannot be removed).
            for _ in 0..32 {
                match serde_path_to_error::deserialize::<_, T>(value.clone()) {
                    Ok(v) => {
                        *slot = v;
                        return;
                    }
                    Err(e) => {
                        let path = e.path().clone();
                        let shown = path.to_string();
                        errors.push(ConfigError {
                            key: if shown == "." || shown.is_empty() {
                                name.to_string()
                            } else {
                                format!("{name}.{shown}")
                            },
                            message: one_line(&e.into_inner().to_string()),
                        });
                        if !remove_at(&mut value, &path.iter().collect::<Vec<_>>()) {
                            return;
                        }
                    }
                }
            }
        }
        section(&mut table, "server", &mut config.server, &mut errors);
        section(&mut table, "storage", &mut config.storage, &mut errors);
        section(&mut table, "delivery", &mut config.delivery, &mut errors);
        section(
            &mut table,
            "retry_policies",
            &mut config.retry_policies,
            &mut errors,
        );
        section(&mut table, "signing", &mut config.signing, &mut errors);
        section(&mut table, "endpoints", &mut config.endpoints, &mut errors);
        section(&mut table, "plans", &mut config.plans, &mut errors);
        section(&mut table, "catalog", &mut config.catalog, &mut errors);
        section(&mut table, "operator", &mut config.operator, &mut errors);
        section(&mut table, "log", &mut config.log, &mut errors);
        for key in table.keys() {
            errors.push(ConfigError {
                key: key.clone(),
                message: "unknown key; the tables are server, storage, delivery, retry_policies, \
                          signing, endpoints, plans, catalog, operator, log"
                    .into(),
            });
        }
        let mut policies = builtin_retry_policies();
        policies.append(&mut config.retry_policies);
        config.retry_policies = policies;
        (config, errors)
    }

    /// Reads, parses and validates the file at `path`, reporting every problem found.
    pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![ConfigError {
                key: "(file)".into(),
                message: format!("cannot read {}: {e}", path.display()),
            }]
        })?;
        let (config, mut errors) = Config::parse(&text);
        if let Err(more) = config.validate() {
            errors.extend(more);
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }

    /// `herald serve --dev`: plain http, loopback targets, no verification.
    pub fn apply_dev(&mut self) {
        self.delivery.allow_http = true;
        for net in ["127.0.0.0/8", "::1/128"] {
            if !self
                .delivery
                .allow_private_networks
                .iter()
                .any(|n| n == net)
            {
                self.delivery.allow_private_networks.push(net.to_string());
            }
        }
        self.endpoints.require_verification = false;
    }

    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.server.listen.parse().map_err(|_| ConfigError {
            key: "server.listen".into(),
            message: format!(
                "{:?} is not an address with a port, such as \"127.0.0.1:8080\"",
                self.server.listen
            ),
        })
    }

    pub fn private_allowlist(&self) -> Result<Vec<Cidr>, Vec<ConfigError>> {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for (i, net) in self.delivery.allow_private_networks.iter().enumerate() {
            match net.parse::<Cidr>() {
                Ok(c) => out.push(c),
                Err(e) => errors.push(ConfigError {
                    key: format!("delivery.allow_private_networks[{i}]"),
                    message: format!("{net:?} is not a CIDR range ({e})"),
                }),
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }

    /// The admin and ingest tokens: the lists and the lines of the token files. Refused: a
    /// token shorter than [`MIN_TOKEN_LEN`] characters, one with surrounding whitespace (it
    /// could never match), and one token in both lists.
    pub fn tokens(&self) -> Result<(Vec<String>, Vec<String>), Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut read = |key: &str, list: &[String], file: &Option<PathBuf>| -> Vec<String> {
            let mut out: Vec<(String, String)> = list
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("{key}s[{i}]"), t.clone()))
                .collect();
            if let Some(path) = file {
                let file_key = format!("{key}_file");
                match std::fs::read_to_string(path) {
                    // One token a line; surrounding whitespace of a line is the file's layout.
                    Ok(text) => out.extend(
                        text.lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .enumerate()
                            .map(|(i, t)| (format!("{file_key} (token {})", i + 1), t.to_string())),
                    ),
                    Err(e) => errors.push(ConfigError {
                        key: file_key,
                        message: format!("cannot read {}: {e}", path.display()),
                    }),
                }
            }
            for (k, t) in &out {
                if t.trim() != t {
                    errors.push(ConfigError {
                        key: k.clone(),
                        message: "has leading or trailing whitespace, so no request could ever \
                                  match it"
                            .into(),
                    });
                } else if t.chars().count() < MIN_TOKEN_LEN {
                    errors.push(ConfigError {
                        key: k.clone(),
                        message: format!(
                            "is shorter than {MIN_TOKEN_LEN} characters; use a long random \
                             token (e.g. openssl rand -hex 32)"
                        ),
                    });
                }
            }
            out.into_iter().map(|(_, t)| t).collect()
        };
        let admin = read(
            "server.admin_token",
            &self.server.admin_tokens,
            &self.server.admin_token_file,
        );
        let ingest = read(
            "server.ingest_token",
            &self.server.ingest_tokens,
            &self.server.ingest_token_file,
        );
        if admin.iter().any(|t| ingest.contains(t)) {
            errors.push(ConfigError {
                key: "server.ingest_tokens".into(),
                message: "a token is both an admin token and an ingest token; give each role \
                          its own"
                    .into(),
            });
        }
        if errors.is_empty() {
            Ok((admin, ingest))
        } else {
            Err(errors)
        }
    }

    /// Every problem with its key path; empty means the config can run.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut err = |key: &str, message: String| {
            errors.push(ConfigError {
                key: key.to_string(),
                message,
            })
        };
        if let Err(e) = self.listen_addr() {
            err(&e.key, e.message);
        }
        if let Some(p) = &self.delivery.extra_ca_file {
            if let Err(e) = std::fs::metadata(p) {
                err(
                    "delivery.extra_ca_file",
                    format!("cannot read {}: {e}", p.display()),
                );
            }
        }
        if let Err(es) = self.tokens() {
            for e in es {
                err(&e.key, e.message);
            }
        }
        if self.server.max_body_bytes < 1024 {
            err(
                "server.max_body_bytes",
                "must be at least 1024 bytes".into(),
            );
        }
        if self.server.max_connections == 0 || self.server.max_connections > 1_000_000 {
            err(
                "server.max_connections",
                "must be between 1 and 1000000".into(),
            );
        }
        // hyper's smallest read buffer is 8 KiB; a head larger than a megabyte is an attack.
        if !(8192..=1024 * 1024).contains(&self.server.max_header_bytes) {
            err(
                "server.max_header_bytes",
                "must be between 8192 and 1048576 bytes".into(),
            );
        }
        if self.server.request_timeout.0 < Duration::from_secs(1)
            || self.server.request_timeout.0 > Duration::from_secs(3600)
        {
            err(
                "server.request_timeout",
                "must be between \"1s\" and \"1h\"".into(),
            );
        }
        if self.storage.retention.0 < Duration::from_secs(60) {
            err("storage.retention", "must be at least \"1m\"".into());
        }
        if self.storage.cache_capacity < 1024 * 1024 {
            err(
                "storage.cache_capacity",
                "must be at least 1048576 bytes (1 MiB)".into(),
            );
        }
        for (key, d) in [
            ("delivery.connect_timeout", self.delivery.connect_timeout),
            ("delivery.timeout", self.delivery.timeout),
        ] {
            if d.0.is_zero() || d.0 > Duration::from_secs(300) {
                err(key, "must be between \"1ms\" and \"300s\"".into());
            }
        }
        if self.delivery.response_body_limit > MAX_RESPONSE_BODY_LIMIT {
            err(
                "delivery.response_body_limit",
                format!(
                    "must be at most {MAX_RESPONSE_BODY_LIMIT} bytes (each attempt's record \
                     keeps the excerpt and must stay small enough to be fsynced)"
                ),
            );
        }
        if self.delivery.max_in_flight == 0 {
            err("delivery.max_in_flight", "must be at least 1".into());
        }
        if self.delivery.max_in_flight_per_endpoint == 0 {
            err(
                "delivery.max_in_flight_per_endpoint",
                "must be at least 1".into(),
            );
        }
        if !self
            .retry_policies
            .contains_key(&self.delivery.default_retry_policy)
        {
            err(
                "delivery.default_retry_policy",
                format!(
                    "no retry policy named {:?}; known: {}",
                    self.delivery.default_retry_policy,
                    self.retry_policies
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        if let Err(es) = self.private_allowlist() {
            for e in es {
                err(&e.key, e.message);
            }
        }
        for (name, delays) in &self.retry_policies {
            if delays.len() > 50 {
                err(
                    &format!("retry_policies.{name}"),
                    "at most 50 retries".into(),
                );
            }
        }
        for (i, scheme) in self.signing.schemes.iter().enumerate() {
            if scheme != "standard" && scheme != "sha256-hex" {
                err(
                    &format!("signing.schemes[{i}]"),
                    format!("unknown scheme {scheme:?}; use \"standard\" or \"sha256-hex\""),
                );
            }
        }
        if self.signing.hex_header.is_empty() || http_header_name_invalid(&self.signing.hex_header)
        {
            err(
                "signing.hex_header",
                "must be a valid HTTP header name".into(),
            );
        }
        if self.endpoints.max_per_account == 0 {
            err("endpoints.max_per_account", "must be at least 1".into());
        }
        if self.endpoints.max_per_account > crate::ids::MAX_FAN_OUT {
            // An event's deliveries are numbered inside its id (see `ids`).
            err(
                "endpoints.max_per_account",
                format!("must be at most {}", crate::ids::MAX_FAN_OUT),
            );
        }
        for (ty, ev) in &self.catalog.events {
            if let Some(d) = &ev.debounce {
                if d.mode != "leading" && d.mode != "leading_trailing" {
                    err(
                        &format!("catalog.events.\"{ty}\".debounce.mode"),
                        format!(
                            "unknown mode {:?}; use \"leading\" or \"leading_trailing\"",
                            d.mode
                        ),
                    );
                }
                if d.window.0.is_zero() {
                    err(
                        &format!("catalog.events.\"{ty}\".debounce.window"),
                        "must be longer than zero".into(),
                    );
                }
            }
            if let Some(path) = &ev.sample_file {
                let parsed = std::fs::read_to_string(path)
                    .map_err(|e| e.to_string())
                    .and_then(|t| {
                        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&t)
                            .map_err(|e| e.to_string())
                    });
                if let Err(e) = parsed {
                    err(
                        &format!("catalog.events.\"{ty}\".sample_file"),
                        format!("{} is not a readable JSON object: {e}", path.display()),
                    );
                }
            }
            if ev.sample.is_some() && ev.sample_file.is_some() {
                err(
                    &format!("catalog.events.\"{ty}\""),
                    "give sample or sample_file, not both".into(),
                );
            }
        }
        match (&self.operator.webhook_url, &self.operator.secret) {
            (Some(url), Some(secret)) => {
                let guard =
                    crate::policy::ssrf::Guard::new(self.private_allowlist().unwrap_or_default());
                if let Err(p) =
                    crate::policy::url::check_endpoint_url(url, self.delivery.allow_http, &guard)
                {
                    err("operator.webhook_url", p.0);
                }
                if !crate::signing::secret_is_valid(secret) {
                    err(
                        "operator.secret",
                        "must be whsec_<base64> or a non-empty string".into(),
                    );
                }
            }
            (Some(_), None) => err(
                "operator.secret",
                "is required with operator.webhook_url (operator events are signed with it)".into(),
            ),
            (None, Some(_)) => err(
                "operator.webhook_url",
                "is required with operator.secret".into(),
            ),
            (None, None) => {}
        }
        if self.log.format != "text" && self.log.format != "json" {
            err(
                "log.format",
                format!(
                    "unknown format {:?}; use \"text\" or \"json\"",
                    self.log.format
                ),
            );
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            err(
                "log.level",
                format!(
                    "{:?} is not a level such as \"info\" or \"debug\"",
                    self.log.level
                ),
            );
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// Removes the value at `path` inside `value`; false if there was nothing to remove.
fn remove_at(value: &mut toml::Value, path: &[&serde_path_to_error::Segment]) -> bool {
    use serde_path_to_error::Segment;
    let Some((seg, rest)) = path.split_first() else {
        return false;
    };
    match (value, seg) {
        (toml::Value::Table(t), Segment::Map { key }) if rest.is_empty() => t.remove(key).is_some(),
        (toml::Value::Table(t), Segment::Map { key }) => {
            t.get_mut(key).is_some_and(|v| remove_at(v, rest))
        }
        (toml::Value::Array(a), Segment::Seq { index }) if rest.is_empty() && *index < a.len() => {
            a.remove(*index);
            true
        }
        (toml::Value::Array(a), Segment::Seq { index }) => {
            a.get_mut(*index).is_some_and(|v| remove_at(v, rest))
        }
        _ => false,
    }
}

fn one_line(msg: &str) -> String {
    msg.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn http_header_name_invalid(name: &str) -> bool {
    hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err()
}

#[cfg(test)]
mod tests {
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
        let example = Config::from_toml(include_str!("../config.example.toml")).unwrap();
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
}
