//! Storage as herald runs it: the contract and its values (the `herald-store` crate, re-exported
//! here) and [`Backend`] (the `herald-backend` crate), the one store herald runs on, which opens,
//! dispatches to and closes whichever the config names. herald depends on those two only, not
//! on the stores' own crates, so the engine and the API cannot name a store's own type (see
//! `herald-store`'s documentation for the layout and for adding an operation).

#[cfg(feature = "postgres")]
pub use herald_backend::postgres;
pub use herald_backend::{Backend, Hold, Settings};
pub use herald_store::*;

use crate::config::{Config, StoreKind};

/// The store the config names, and its settings, ready to open: the embedded store's data
/// directory and cache, or the cluster's database (its URL or URL file parsed, TLS with the
/// bundled roots and `storage.postgres.ca_file`, the pool, the lease and the data directory).
pub fn settings(config: &Config) -> Result<Settings, StoreError> {
    match config.storage.backend {
        StoreKind::Sled => Ok(Settings::Sled {
            path: config.storage.path.clone(),
            cache_capacity: config.storage.cache_capacity,
        }),
        #[cfg(feature = "postgres")]
        StoreKind::Postgres => Ok(Settings::Postgres(Box::new(postgres_settings(config)?))),
        #[cfg(not(feature = "postgres"))]
        StoreKind::Postgres => Err(StoreError::Format(
            "this herald was built without the `postgres` feature".into(),
        )),
    }
}

/// The cluster's database's settings from herald's config (see [`settings`]).
#[cfg(feature = "postgres")]
pub fn postgres_settings(config: &Config) -> Result<postgres::Settings, postgres::DbError> {
    use postgres::DbError;
    use std::sync::Arc;
    let url = config
        .postgres_url()
        .map_err(|e| DbError::Config(e.to_string()))?;
    let database = crate::config::postgres::parse_url(&url)
        .map_err(|e| DbError::Config(format!("storage.postgres.url {e}")))?;
    let pg = &config.storage.postgres;
    let roots = crate::tls::roots(pg.ca_file.as_deref())
        .map_err(|e| DbError::Tls(format!("storage.postgres.ca_file: {e}")))?;
    let tls = crate::tls::client_builder(&Arc::new(roots))
        .map_err(|e| DbError::Tls(e.to_string()))?
        .with_no_client_auth();
    Ok(postgres::Settings {
        database,
        tls,
        pool_size: pg.pool_size,
        lease: pg.lease.0,
        data_dir: config.storage.path.clone(),
    })
}
