//! `storage.backend` and `[storage.postgres]` (docs/cluster.md): which keys cluster mode needs, the
//! database URL from the config or its file, and their checks. The URL carries a password:
//! no message here ever quotes it.

use std::time::Duration;

use super::{Config, ConfigError, StoreKind};

/// Connections a node may keep; PostgreSQL's own default `max_connections` is 100.
pub const MAX_POOL_SIZE: usize = 1000;
/// The shortest and longest `storage.postgres.lease`. A lease is renewed every third of it, so
/// below a few seconds a busy database's latency would let leases lapse under working nodes;
/// past ten minutes a dead node's deliveries would wait that long for another node.
pub const MIN_LEASE: Duration = Duration::from_secs(5);
pub const MAX_LEASE: Duration = Duration::from_secs(600);

impl Config {
    /// The database URL: `storage.postgres.url`, or the first non-empty line of `url_file`.
    pub fn postgres_url(&self) -> Result<String, ConfigError> {
        let pg = &self.storage.postgres;
        let problem = |key: &str, message: String| ConfigError {
            key: format!("storage.postgres.{key}"),
            message,
        };
        match (&pg.url, &pg.url_file) {
            (Some(url), None) => Ok(url.trim().to_string()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    problem("url_file", format!("cannot read {}: {e}", path.display()))
                })?;
                text.lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| problem("url_file", format!("{} is empty", path.display())))
            }
            (Some(_), Some(_)) => Err(problem(
                "url",
                "and storage.postgres.url_file are both set; keep one".into(),
            )),
            (None, None) => Err(problem(
                "url",
                "is required with storage.backend = \"postgres\" (or url_file), such as \
                 \"postgres://herald:PASSWORD@db.internal/herald?sslmode=require\""
                    .into(),
            )),
        }
    }

    /// The problems of the storage backend's keys (nothing to check for sled).
    pub(super) fn postgres_problems(&self) -> Vec<ConfigError> {
        if self.storage.backend != StoreKind::Postgres {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut err = |key: &str, message: String| {
            out.push(ConfigError {
                key: format!("storage.{key}"),
                message,
            })
        };
        if !cfg!(feature = "postgres") {
            err(
                "backend",
                "is \"postgres\", but this herald was built without the `postgres` feature".into(),
            );
        }
        let pg = &self.storage.postgres;
        match self.postgres_url() {
            Ok(url) => {
                if let Err(why) = check_url(&url) {
                    let key = if pg.url.is_some() { "url" } else { "url_file" };
                    err(&format!("postgres.{key}"), why);
                }
            }
            Err(e) => err(e.key.trim_start_matches("storage."), e.message),
        }
        if pg.pool_size == 0 || pg.pool_size > MAX_POOL_SIZE {
            err(
                "postgres.pool_size",
                format!("must be between 1 and {MAX_POOL_SIZE}"),
            );
        }
        if pg.lease.0 < MIN_LEASE || pg.lease.0 > MAX_LEASE {
            err(
                "postgres.lease",
                "must be between \"5s\" and \"10m\"".into(),
            );
        }
        if let Some(p) = &pg.ca_file {
            if let Err(e) = std::fs::metadata(p) {
                err(
                    "postgres.ca_file",
                    format!("cannot read {}: {e}", p.display()),
                );
            }
        }
        out
    }
}

/// The URL as PostgreSQL's client config, parsed by PostgreSQL's own client. libpq's
/// `sslmode=verify-ca` and `verify-full` are taken as `require`: herald verifies the server's
/// certificate and name whenever it uses TLS. The error never quotes the URL.
#[cfg(feature = "postgres")]
pub fn parse_url(url: &str) -> Result<tokio_postgres::Config, String> {
    let url = url
        .replace("sslmode=verify-full", "sslmode=require")
        .replace("sslmode=verify-ca", "sslmode=require");
    url.parse::<tokio_postgres::Config>().map_err(|e| {
        format!(
            "is not a PostgreSQL connection URL ({e}); write \
                 postgres://USER:PASSWORD@HOST:PORT/DATABASE"
        )
    })
}

/// Whether the URL is one herald can use; the reason never quotes the URL.
#[cfg(feature = "postgres")]
fn check_url(url: &str) -> Result<(), String> {
    let parsed = parse_url(url)?;
    if parsed.get_hosts().is_empty() {
        return Err("names no host; write postgres://USER:PASSWORD@HOST:PORT/DATABASE".into());
    }
    Ok(())
}

#[cfg(not(feature = "postgres"))]
fn check_url(_url: &str) -> Result<(), String> {
    Ok(())
}
