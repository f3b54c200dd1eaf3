//! [`Config::validate`]: every rule a config must meet beyond its types, reported with key
//! paths; and [`Config::tokens`], shared with start-up.

use std::path::PathBuf;
use std::time::Duration;

use super::{Config, ConfigError, MAX_RESPONSE_BODY_LIMIT, MIN_TOKEN_LEN};

impl Config {
    /// The admin and ingest tokens: the lists and the lines of the token files. Refused: a
    /// token shorter than [`MIN_TOKEN_LEN`] characters, one with surrounding whitespace or a
    /// character outside visible ASCII (it could never match), and one token in both lists.
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
                if let Some(message) = self.token_problem(t) {
                    errors.push(ConfigError {
                        key: k.clone(),
                        message,
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

    /// What makes a token unusable, if anything: surrounding whitespace, characters a header
    /// cannot carry, a '.' with the Svix-compatible API on, or too few characters.
    fn token_problem(&self, t: &str) -> Option<String> {
        if t.trim() != t {
            Some(
                "has leading or trailing whitespace, so no request could ever \
                          match it"
                    .into(),
            )
        } else if !t.bytes().all(|b| b.is_ascii_graphic()) {
            Some(
                "may hold only visible ASCII characters (no spaces, control \
                          characters or non-ASCII letters): an Authorization header \
                          carrying any other could never match it"
                    .into(),
            )
        } else if self.svix.enabled && t.contains('.') {
            Some(
                "holds a '.', which svix.enabled does not allow: the Svix client \
                          libraries read what follows a dot in a token as a region and \
                          may send the token elsewhere; use a token without dots"
                    .into(),
            )
        } else if t.chars().count() < MIN_TOKEN_LEN {
            Some(format!(
                "is shorter than {MIN_TOKEN_LEN} characters; use a long random \
                     token (e.g. openssl rand -hex 32)"
            ))
        } else {
            None
        }
    }

    /// The catalog's schemas compiled (each type with a schema).
    pub fn compile_schemas(&self) -> Result<crate::policy::schema::Catalog, Vec<(String, String)>> {
        crate::policy::schema::Catalog::compile(
            self.catalog
                .events
                .iter()
                .filter_map(|(ty, ev)| Some((ty.as_str(), ev.schema_json()?))),
        )
    }

    /// Schemas that are not valid schemas, and samples that do not satisfy their schema, each
    /// with its key.
    fn schema_problems(&self) -> Vec<(String, String)> {
        let key = |ty: &str, ev: &super::CatalogEvent, what: &str| {
            let which = match what {
                "schema" if ev.schema.is_some() => "schema",
                "schema" => "schema_file",
                _ if ev.sample.is_some() => "sample",
                _ => "sample_file",
            };
            format!("catalog.events.\"{ty}\".{which}")
        };
        let (catalog, errors) = crate::policy::schema::Catalog::compile_what_can(
            self.catalog
                .events
                .iter()
                .filter_map(|(ty, ev)| Some((ty.as_str(), ev.schema_json()?))),
        );
        let mut out: Vec<(String, String)> = errors
            .into_iter()
            .map(|(ty, why)| {
                let k = self
                    .catalog
                    .events
                    .get(&ty)
                    .map_or_else(|| ty.clone(), |ev| key(&ty, ev, "schema"));
                (
                    k,
                    format!("is not a valid JSON Schema (draft 2020-12): {why}"),
                )
            })
            .collect();
        for (ty, ev) in &self.catalog.events {
            let Some(sample) = ev.sample_json() else {
                continue;
            };
            if let Err(v) = catalog.validate(ty, &sample) {
                out.push((
                    key(ty, ev, "sample"),
                    format!(
                        "does not satisfy its schema at {:?}: {}",
                        if v.pointer.is_empty() {
                            "/"
                        } else {
                            &v.pointer
                        },
                        v.message
                    ),
                ));
            }
        }
        out
    }

    /// Every problem with its key path, table by table; empty means the config can run.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut err = |key: &str, message: String| {
            errors.push(ConfigError {
                key: key.to_string(),
                message,
            })
        };
        self.check_server(&mut err);
        self.check_storage(&mut err);
        self.check_portal(&mut err);
        self.check_delivery(&mut err);
        self.check_retry_policies(&mut err);
        self.check_signing(&mut err);
        self.check_endpoints(&mut err);
        self.check_catalog(&mut err);
        self.check_operator(&mut err);
        self.check_log(&mut err);
        if let Some(url) = &self.telemetry.otlp_endpoint {
            if let Err(why) = crate::traces::collector_url(url) {
                err("telemetry.otlp_endpoint", why);
            }
        }
        if self.svix.enabled && self.endpoints.require_verification {
            err(
                "svix.enabled",
                "the Svix-compatible API needs endpoints.require_verification = false (its \
                 default is true): receivers written for Svix do not answer herald's \
                 verification challenge, so every endpoint made through it would stay \
                 unverified and get nothing; set [endpoints] require_verification = false"
                    .into(),
            );
        }
        errors.extend(self.postgres_problems());
        errors.extend(self.alerts_problems());
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// `[server]`: the listener, the tokens and the API server's limits.
    fn check_server(&self, err: &mut impl FnMut(&str, String)) {
        if let Err(e) = self.listen_addr() {
            err(&e.key, e.message);
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
        if let Some(u) = &self.server.public_url {
            let ok = url::Url::parse(u)
                .is_ok_and(|p| matches!(p.scheme(), "http" | "https") && p.host().is_some());
            if !ok {
                err(
                    "server.public_url",
                    format!("{u:?} is not an http(s) URL such as \"https://hooks.example.com\""),
                );
            }
        }
    }

    /// `[storage]`: retention, folding and the page cache.
    fn check_storage(&self, err: &mut impl FnMut(&str, String)) {
        if self.storage.retention.0 < Duration::from_secs(60) {
            err("storage.retention", "must be at least \"1m\"".into());
        }
        if self.storage.fold_after.0 < Duration::from_secs(1) {
            err("storage.fold_after", "must be at least \"1s\"".into());
        }
        if self.storage.cache_capacity < 1024 * 1024 {
            err(
                "storage.cache_capacity",
                "must be at least 1048576 bytes (1 MiB)".into(),
            );
        }
    }

    /// `[portal]`: sessions' lifetimes, who may frame the portal, and its look.
    fn check_portal(&self, err: &mut impl FnMut(&str, String)) {
        if self.portal.session_ttl.0 < Duration::from_secs(1)
            || self.portal.session_ttl > self.portal.max_session_ttl
        {
            err(
                "portal.session_ttl",
                "must be at least \"1s\" and at most portal.max_session_ttl".into(),
            );
        }
        for (i, origin) in self.portal.frame_ancestors.iter().enumerate() {
            // One CSP source expression: no spaces, separators or quotes an origin never has.
            let bad = origin.is_empty()
                || origin
                    .chars()
                    .any(|c| c.is_whitespace() || matches!(c, ';' | ',' | '\'' | '"'));
            if bad {
                err(
                    &format!("portal.frame_ancestors[{i}]"),
                    format!("{origin:?} is not an origin such as \"https://app.example.com\""),
                );
            }
        }
        self.check_look(err);
    }

    /// `[delivery]`: the proxy, the CA file, timeouts, the private ranges allowed, limits and the default retry policy.
    fn check_delivery(&self, err: &mut impl FnMut(&str, String)) {
        if let Err(e) = self.proxy() {
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
    }

    /// `[retry_policies]`: how many retries a policy may list.
    fn check_retry_policies(&self, err: &mut impl FnMut(&str, String)) {
        for (name, delays) in &self.retry_policies {
            if delays.len() > 50 {
                err(
                    &format!("retry_policies.{name}"),
                    "at most 50 retries".into(),
                );
            }
        }
    }

    /// `[signing]`: the schemes and the hex header's name.
    fn check_signing(&self, err: &mut impl FnMut(&str, String)) {
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
    }

    /// `[endpoints]`: how many endpoints an account may have.
    fn check_endpoints(&self, err: &mut impl FnMut(&str, String)) {
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
    }

    /// `[catalog]`: debounce rules, sample and schema files, the schemas themselves, and
    /// replacements of deprecated types.
    fn check_catalog(&self, err: &mut impl FnMut(&str, String)) {
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
            for (key, path, want) in [
                ("sample_file", &ev.sample_file, "a readable JSON object"),
                (
                    "schema_file",
                    &ev.schema_file,
                    "a readable JSON object (a JSON Schema)",
                ),
            ] {
                let Some(path) = path else { continue };
                let parsed = std::fs::read_to_string(path)
                    .map_err(|e| e.to_string())
                    .and_then(|t| {
                        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&t)
                            .map_err(|e| e.to_string())
                    });
                if let Err(e) = parsed {
                    err(
                        &format!("catalog.events.\"{ty}\".{key}"),
                        format!("{} is not {want}: {e}", path.display()),
                    );
                }
            }
            for (a, b) in [("sample", "sample_file"), ("schema", "schema_file")] {
                let both = match a {
                    "sample" => ev.sample.is_some() && ev.sample_file.is_some(),
                    _ => ev.schema.is_some() && ev.schema_file.is_some(),
                };
                if both {
                    err(
                        &format!("catalog.events.\"{ty}\""),
                        format!("give {a} or {b}, not both"),
                    );
                }
            }
        }
        for (key, why) in self.schema_problems() {
            err(&key, why);
        }
        self.check_replacements(err);
        if self.catalog.validate
            && !self
                .catalog
                .events
                .values()
                .any(|e| e.schema_json().is_some())
        {
            err(
                "catalog.validate",
                "is on, but no catalog type has a schema to validate against".into(),
            );
        }
    }

    /// `[operator]`: the operator's webhook URL and its secret, given together.
    fn check_operator(&self, err: &mut impl FnMut(&str, String)) {
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
    }

    /// `[log]`: the format and the level.
    fn check_log(&self, err: &mut impl FnMut(&str, String)) {
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
    }
}

fn http_header_name_invalid(name: &str) -> bool {
    hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err()
}
