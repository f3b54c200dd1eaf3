//! Storage: the contract the engine and the API are written against ([`contract`]), and its two
//! implementations, the embedded store of one box ([`sled`]) and the store a cluster of nodes
//! shares on PostgreSQL ([`postgres`], docs/cluster.md). [`Backend`] is the one herald runs on.
//!
//! # Layout
//!
//! - [`contract`]: the operations, by concern, each with its guarantee (what is durable when it
//!   returns, what it may see concurrently, what a crash does to it).
//! - `types.rs` and [`StoreError`]: the values the contract is written in, re-exported here.
//! - [`directory`]: the endpoints and plans every store keeps in memory.
//! - `sled/` and `postgres/`: one implementation each. Neither crate is named outside its folder.
//!
//! Where each trait is implemented:
//!
//! | trait | `sled/` | `postgres/` |
//! |---|---|---|
//! | `Ingest` | `mod.rs` | `ingest.rs` |
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
//!
//! The embedded store's point reads are synchronous functions of its own (its tests and its
//! blocking readers call them); its `impl` answers them as ready futures beside them.
//!
//! # Adding a store operation
//!
//! 1. Declare it in the trait of its concern in [`contract`], with a doc comment saying what is
//!    durable when it returns, what it may see concurrently and what a crash leaves.
//! 2. Implement it in each store's `impl` of that trait, which lives in the file of its concern
//!    (the table below), with its body there: no file forwards to another. Errors of either
//!    engine become a [`StoreError`] there and nowhere else.
//! 3. Let [`Backend`] call it (one line: the compiler names the missing arm).
//! 4. Add its cases to the conformance suite (`tests/store/conformance.rs`), which runs every
//!    case against both stores: a behaviour one store has and the other lacks fails there.

mod backend;
pub mod contract;
pub mod directory;
mod error;
pub mod files;
mod metrics;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sled;
mod types;

#[cfg(feature = "postgres")]
pub use backend::postgres_settings;
pub use backend::{Backend, Hold};
/// The contract's traits, for calling its operations: `use crate::store::prelude::*;`.
pub mod prelude {
    pub use super::contract::{
        Accounts as _, Alerts as _, Applications as _, Archive as _, Breakers as _,
        DeliveryChanges as _, DeliveryLog as _, Directory as _, Ingest as _, Minutes as _,
        Purge as _, Queue as _, Quotas as _, RateLimits as _, Retention as _, Sessions as _,
        Vitals as _,
    };
}
pub use error::StoreError;
pub use metrics::StoreMetrics;
pub use types::endpoint_fields;
pub use types::{
    check_endpoint_json, check_endpoint_size, lane_of, token_hash, ApiAnswer, Changed, CopyStart,
    DebounceRule, DeliveryFilter, DirectoryRecord, DueDelivery, EventHistory, Fence, IngestOutcome,
    Lane, Minute, NewEvent, Node, Purged, Retained, Stats, Swept, TakeLimits, Taken, FAN_OUT_TRIES,
    IDEMPOTENCY_WINDOW_MS, MAX_ENDPOINT_SIZE, NO_LANE,
};
pub use types::{ARCHIVE_PAGE_BYTES, ARCHIVE_PAGE_EVENTS};
