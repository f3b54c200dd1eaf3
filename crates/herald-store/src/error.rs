//! The one error every store operation answers with. Each store turns its own engine's
//! errors into it (in `sled/` and `postgres/`), keeping them as the [`source`] of
//! [`StoreError::Engine`] and [`StoreError::Database`].
//!
//! [`source`]: std::error::Error::source

use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The embedded store's engine failed (its error is the source).
    #[error("storage error: {0}")]
    Engine(#[source] Arc<dyn std::error::Error + Send + Sync>),
    #[error("storage I/O error: {0}")]
    Io(#[source] Arc<std::io::Error>),
    #[error("stored record is unreadable: {0}")]
    Corrupt(String),
    /// A record could not be encoded (a bug, never input: inputs are checked before).
    #[error("cannot encode a record: {0}")]
    Encode(String),
    /// A record would pass the store's size bound (the API checks sizes first; this is the
    /// backstop).
    #[error("{what} would take {size} bytes stored; at most {max}")]
    TooLarge {
        what: &'static str,
        size: usize,
        max: usize,
    },
    #[error("storage is closed")]
    Closed,
    /// Cluster mode: the events were fanned out over a copy of the endpoints that missed a
    /// change committed meanwhile; nothing was stored, and the caller fans out again.
    #[error("the endpoints changed while the events were fanned out")]
    Stale,
    /// A sync failed, or the data directory was deleted or replaced under herald: nothing is
    /// acknowledged again by this process (docs/operations.md, "When storage fails").
    #[error("storage is unusable: {0}")]
    Unusable(String),
    /// Cluster mode's database refused or could not be reached (the error names the database
    /// and PostgreSQL's reason, never the password).
    #[error("{0}")]
    Database(#[source] Arc<dyn std::error::Error + Send + Sync>),
    /// Cluster mode: the delivery's lease lapsed and another node may hold it now, so the
    /// attempt's result was not recorded (that node attempts it again: at least once).
    #[error("the delivery's lease passed to another node")]
    LeaseLost,
    #[error("{0}")]
    Format(String),
    /// Another process holds sled's lock on the data directory.
    #[error(
        "the data directory {} is in use by another process (another herald?); each herald \
         needs its own",
        .0.display()
    )]
    InUse(PathBuf),
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(Arc::new(e))
    }
}

impl StoreError {
    /// A [`StoreError::Database`] that says `message` (its own words, no error below it).
    pub fn database(message: impl Into<String>) -> StoreError {
        let e: Box<dyn std::error::Error + Send + Sync> = message.into().into();
        StoreError::Database(Arc::from(e))
    }
}

/// The embedded store's engine error: [`StoreError::Engine`], with it as the source.
#[cfg(feature = "sled")]
impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        StoreError::Engine(Arc::new(e))
    }
}

/// PostgreSQL's error: [`StoreError::Database`] saying `database: ` and PostgreSQL's reason
/// ([`describe_postgres`]).
#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        StoreError::database(format!("database: {}", describe_postgres(&e)))
    }
}

/// PostgreSQL's reason in a sentence: the server's message and its code, or the client's
/// error with its causes (never the password, which no error carries).
#[cfg(feature = "postgres")]
pub fn describe_postgres(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
