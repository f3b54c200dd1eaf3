//! The one TOML file: structs with compiled-in defaults, then the file, then [`Config::validate`].
//!
//! Every config key lives here with its default; `config.example.toml` documents
//! each once. Unknown keys are errors (a typo must not silently fall back to a default). Validation
//! collects every problem with its key path, so `check-config` and `serve` report them all at once
//! before anything binds ([`validate`]).
//!
//! # Adding a config key
//!
//! 1. Add the field to its table's struct here (or in the table's own file: `alerts.rs`,
//!    `postgres.rs`) and its default to the struct's `Default`; a duration is a [`Dur`].
//! 2. Check its value in [`Config::validate`] with the key's full path in the error, and any
//!    rule that ties it to other keys.
//! 3. Document it in `config.example.toml` with its default, set or commented out (the test
//!    `the_example_names_every_config_key_and_no_other` fails until it is there), then
//!    regenerate `packaging/herald.toml` (`HERALD_BLESS=1 cargo test --test command
//!    packaging`), and describe it in the README or the docs page of its feature.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use crate::model::Plan;
use crate::policy::ssrf::Cidr;
pub use alerts::{Alerts, AlertsSetup, SmtpServer, SmtpTls};

/// A duration written as `"300ms"`, `"5s"`, `"10h"`, `"5d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

/// The longest duration any key takes. Durations become milliseconds added to the clock; a
/// bound keeps that arithmetic (and the ±10 % jitter on retry delays) far from overflowing.
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 366 * 86_400);

/// The shortest token accepted (docs/operations.md).
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
    pub portal: Portal,
    pub alerts: Alerts,
    pub operator: Operator,
    pub log: Log,
    pub svix: Svix,
    pub telemetry: Telemetry,
}

/// `[telemetry]`: traces over OTLP (docs/operations.md, "Traces").
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Telemetry {
    /// The collector's base URL (`http://collector:4318`): spans are posted to `/v1/traces`
    /// under it. Wins over `OTEL_EXPORTER_OTLP_ENDPOINT`; traces are off without either.
    pub otlp_endpoint: Option<String>,
}

/// `[svix]`: the Svix-compatible API under `/api/v1/` (docs/svix.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Svix {
    pub enabled: bool,
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
    /// The address people reach herald at, for portal links (default `http://` + `listen`).
    pub public_url: Option<String>,
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
            public_url: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    pub path: PathBuf,
    pub retention: Dur,
    pub cache_capacity: u64,
    /// Ended events older than this are folded many to a row (the embedded store's `fold.rs`).
    pub fold_after: Dur,
    pub backend: StoreKind,
    pub postgres: Postgres,
}

impl Default for Storage {
    fn default() -> Self {
        Self {
            path: PathBuf::from("./herald-data"),
            retention: secs(30 * 86_400),
            cache_capacity: 32 * 1024 * 1024,
            fold_after: secs(600),
            backend: StoreKind::Sled,
            postgres: Postgres::default(),
        }
    }
}

/// Where herald keeps its state (docs/cluster.md): sled in `storage.path` (one node, the default)
/// or a PostgreSQL database shared by any number of nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    Sled,
    Postgres,
}

/// `[storage.postgres]`: the cluster's database. The URL holds a password, so this type's
/// `Debug` never shows it.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Postgres {
    /// A libpq connection string: `postgres://user:password@host:port/db?sslmode=require` or
    /// `host=... user=... dbname=...`.
    pub url: Option<String>,
    /// A file holding the URL (systemd credentials), read at start.
    pub url_file: Option<PathBuf>,
    /// Connections this node keeps to the database.
    pub pool_size: usize,
    /// How long a node's claim on a delivery lasts unless renewed.
    pub lease: Dur,
    /// PEM certificates of the CA that signed the database's certificate, trusted besides the
    /// bundled web roots (a managed service's or a private CA).
    pub ca_file: Option<PathBuf>,
}

impl Default for Postgres {
    fn default() -> Self {
        Self {
            url: None,
            url_file: None,
            pool_size: 16,
            lease: secs(30),
            ca_file: None,
        }
    }
}

impl fmt::Debug for Postgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Postgres")
            .field("url", &self.url.as_ref().map(|_| "(hidden)"))
            .field("url_file", &self.url_file)
            .field("pool_size", &self.pool_size)
            .field("lease", &self.lease)
            .field("ca_file", &self.ca_file)
            .finish()
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
    /// `http://host:port` of an HTTP CONNECT proxy every delivery goes through
    /// (docs/delivery-contract.md).
    pub proxy: Option<String>,
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
            proxy: None,
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
    /// Check payloads against their type's schema at ingest.
    pub validate: bool,
    pub events: BTreeMap<String, CatalogEvent>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogEvent {
    pub description: String,
    pub sample: Option<toml::Table>,
    pub sample_file: Option<PathBuf>,
    /// JSON Schema 2020-12 of the payload, inline or in a JSON file.
    pub schema: Option<toml::Table>,
    pub schema_file: Option<PathBuf>,
    pub deprecated: bool,
    /// The type that replaces a deprecated one (docs/api.md, "Versioning").
    pub replaced_by: Option<String>,
    pub debounce: Option<Debounce>,
}

impl CatalogEvent {
    /// The sample payload as JSON: the inline `sample`, else `sample_file`'s; `None` without.
    pub fn sample_json(&self) -> Option<serde_json::Value> {
        json_of(self.sample.as_ref(), self.sample_file.as_deref())
    }

    /// The payload schema as JSON: the inline `schema`, else `schema_file`'s.
    pub fn schema_json(&self) -> Option<serde_json::Value> {
        json_of(self.schema.as_ref(), self.schema_file.as_deref())
    }
}

/// An inline table as JSON, else a JSON file's contents (`None` if unreadable: `validate`
/// reports it).
fn json_of(inline: Option<&toml::Table>, file: Option<&Path>) -> Option<serde_json::Value> {
    if let Some(t) = inline {
        return serde_json::to_value(t).ok();
    }
    let text = std::fs::read_to_string(file?).ok()?;
    serde_json::from_str(&text).ok()
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

/// The portal's brand when `portal.brand` is not set: herald's own name.
pub const DEFAULT_BRAND: &str = "herald";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Portal {
    pub session_ttl: Dur,
    pub max_session_ttl: Dur,
    /// Origins allowed to frame the portal (CSP `frame-ancestors`); none: no framing.
    pub frame_ancestors: Vec<String>,
    /// The name in the portal's header and title (src/config/look.rs).
    pub brand: String,
    /// `#RRGGBB`: the pages' accent colour; herald's own without.
    pub accent: Option<String>,
    /// A PNG or SVG shown in the portal's header, read once at start.
    pub logo_file: Option<PathBuf>,
}

impl Default for Portal {
    fn default() -> Self {
        Self {
            session_ttl: secs(3600),
            max_session_ttl: secs(7 * 86_400),
            frame_ancestors: Vec::new(),
            brand: DEFAULT_BRAND.into(),
            accent: None,
            logo_file: None,
        }
    }
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
        section(&mut table, "portal", &mut config.portal, &mut errors);
        section(&mut table, "alerts", &mut config.alerts, &mut errors);
        section(&mut table, "operator", &mut config.operator, &mut errors);
        section(&mut table, "log", &mut config.log, &mut errors);
        section(&mut table, "svix", &mut config.svix, &mut errors);
        section(&mut table, "telemetry", &mut config.telemetry, &mut errors);
        for key in table.keys() {
            errors.push(ConfigError {
                key: key.clone(),
                message: "unknown key; the tables are server, storage, delivery, retry_policies, \
                          signing, endpoints, plans, catalog, portal, alerts, operator, log, svix, \
                          telemetry"
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

    /// Where people reach herald: `server.public_url`, else `http://` + `server.listen`; no
    /// trailing slash.
    pub fn public_url(&self) -> String {
        match &self.server.public_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => format!("http://{}", self.server.listen),
        }
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

    /// `delivery.proxy` as (host, port), if set.
    pub fn proxy(&self) -> Result<Option<(String, u16)>, ConfigError> {
        let Some(raw) = &self.delivery.proxy else {
            return Ok(None);
        };
        let bad = |why: &str| ConfigError {
            key: "delivery.proxy".into(),
            message: format!("must be http://host:port ({why})"),
        };
        let url = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
        if url.scheme() != "http" {
            return Err(bad("only an http:// proxy that takes CONNECT is supported"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("no user name or password"));
        }
        if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
            return Err(bad("no path, query or fragment"));
        }
        let host = match url.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(h) => h.to_string(),
            None => return Err(bad("no host")),
        };
        Ok(Some((host, url.port_or_known_default().unwrap_or(80))))
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

/// Every problem `validate` reports for `toml`, as (key, message); none for a valid file. The
/// config modules' tests share it.
#[cfg(test)]
fn problems(toml: &str) -> Vec<(String, String)> {
    let config = Config::from_toml(toml).expect("parses");
    config
        .validate()
        .err()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.key, e.message))
        .collect()
}

mod alerts;
pub mod look;
pub mod postgres;
#[cfg(feature = "postgres")]
#[cfg(test)]
mod tests;
mod validate;
mod versioning;
