//! herald's storage contract: what the engine and the API may ask of storage ([`contract`]),
//! the values it is written in, and the one error it answers with. Two crates implement it:
//! `herald-store-sled`, the embedded store of one box, and `herald-store-postgres`, the store a
//! cluster of nodes shares (docs/cluster.md). `herald-backend` opens the one the config names
//! and serves this contract from it; herald depends on that crate and this one, not on the
//! stores': this crate is all the engine and the API can name.
//!
//! # Layout
//!
//! - [`contract`]: the operations, by concern, each with its guarantee (what is durable when it
//!   returns, what it may see concurrently, what a crash does to it).
//! - `types.rs` and [`StoreError`]: the values the contract is written in, re-exported here.
//! - [`directory`]: the endpoints and plans every store keeps in memory.
//! - [`StoreMetrics`]: what a store counts itself, for herald's metrics.
//! - [`files`]: the data directory's privacy (files only their owner reads).
//! - `conformance` (with the `conformance` feature): the contract's conformance suite, as a
//!   kit each store's tests run.
//!
//! Where each trait is implemented:
//!
//! | trait | `herald-store-sled` | `herald-store-postgres` |
//! |---|---|---|
//! | `Ingest` | `lib.rs` | `ingest.rs` |
//! | `Directory` | `endpoints.rs` | `endpoints.rs` |
//! | `Accounts`, `Quotas`, `Breakers`, `RateLimits` | `accounts.rs` | `accounts.rs`, `quota.rs`, `breakers.rs`, `tokens.rs` |
//! | `Alerts` | `alerts.rs` | `alerts.rs` |
//! | `Sessions` | `sessions.rs` | `sessions.rs` |
//! | `Purge` | `purge.rs` | `purge.rs` |
//! | `DeliveryLog`, `DeliveryChanges` | `deliveries.rs` | `reads.rs`, `changes.rs` |
//! | `Queue` | `queue.rs` | `queue.rs` |
//! | `Retention` | `sweep.rs` | `retention.rs` |
//! | `Vitals` | `health.rs` | `nodes.rs` |
//! | `Archive` | `archive.rs` | `archive.rs` |
//! | `Minutes` | `minutes.rs` | `minutes.rs` |
//! | `Applications` | `applications.rs` | `applications.rs` |
//! | `Store` (all of the above) | `lib.rs` | `handle.rs` |
//!
//! The embedded store's point reads are synchronous functions of its own (its tests and its
//! blocking readers call them); its `impl` answers them as ready futures beside them.
//!
//! # Adding a store operation
//!
//! 1. Declare it in the trait of its concern in [`contract`], with a doc comment saying what is
//!    durable when it returns, what it may see concurrently and what a crash leaves.
//! 2. Implement it in each store's `impl` of that trait, which lives in the file of its concern
//!    (the table above), with its body there: no file forwards to another. Errors of either
//!    engine become a [`StoreError`] there and nowhere else (the conversions `?` needs from
//!    each engine's own error are in `error.rs`, behind the `sled` and `postgres` features:
//!    the orphan rule puts them beside [`StoreError`]).
//! 3. Let `herald-backend`'s `Backend` call it (one line: the compiler names the missing arm).
//! 4. Add its cases to the conformance kit (`conformance/`, the file of its concern, and the
//!    list in `conformance_tests!`), which each store's crate runs in its tests: a behaviour one
//!    store has and the other lacks fails in that store's tests.

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod contract;
pub mod directory;
mod error;
pub mod files;
mod metrics;
mod types;

/// The contract's traits, for calling its operations: `use herald_store::prelude::*;`.
pub mod prelude {
    pub use super::contract::{
        Accounts as _, Alerts as _, Applications as _, Archive as _, Breakers as _,
        DeliveryChanges as _, DeliveryLog as _, Directory as _, Ingest as _, Minutes as _,
        Purge as _, Queue as _, Quotas as _, RateLimits as _, Retention as _, Sessions as _,
        Vitals as _,
    };
}
#[cfg(feature = "postgres")]
pub use error::describe_postgres;
pub use error::StoreError;
pub use metrics::StoreMetrics;
pub use types::endpoint_fields;
pub use types::{
    check_endpoint_json, check_endpoint_size, lane_of, token_hash, ApiAnswer, Changed, CopyStart,
    DebounceRule, DeliveryFilter, DirectoryRecord, DueDelivery, EndpointWaiting, EventHistory,
    Fence, FixedLimits, IngestOutcome, Lane, Minute, NewEvent, Node, Purged, Retained, Stats,
    Swept, TakeLimits, Taken, Taking, FAN_OUT_TRIES, IDEMPOTENCY_WINDOW_MS, LATENCY_BOUNDS_MS,
    MAX_ENDPOINT_SIZE, NOT_SENT, NO_LANE, SEARCH_EVENTS,
};
pub use types::{ARCHIVE_PAGE_BYTES, ARCHIVE_PAGE_EVENTS};
