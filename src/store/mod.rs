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
//! # Adding a store operation
//!
//! 1. Declare it in the trait of its concern in [`contract`], with a doc comment saying what is
//!    durable when it returns, what it may see concurrently and what a crash leaves.
//! 2. Implement it in `sled/` and `postgres/`, in the files of the same name where both have
//!    one (`sled/accounts.rs` and `postgres/accounts.rs`, ...). Errors of either engine become a
//!    [`StoreError`] there and nowhere else.
//! 3. Let [`Backend`] call it (one line: the compiler names the missing arm).
//! 4. Add its cases to the conformance suite (`tests/store/conformance.rs`), which runs every
//!    case against both stores: a behaviour one store has and the other lacks fails there.

mod backend;
pub mod contract;
pub mod directory;
mod error;
pub mod files;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sled;
mod types;

pub use backend::{Backend, Hold};
/// The contract's traits, for calling its operations: `use crate::store::prelude::*;`.
pub mod prelude {
    pub use super::contract::{
        Accounts as _, Applications as _, Archive as _, DeliveryLog as _, Directory as _,
        Ingest as _, Minutes as _, Queue as _, Retention as _, Vitals as _,
    };
}
pub use error::StoreError;
pub use types::endpoint_fields;
pub use types::{
    check_endpoint_json, check_endpoint_size, lane_of, token_hash, ApiAnswer, Changed,
    DebounceRule, DeliveryFilter, DirectoryRecord, DueDelivery, EventHistory, Fence, IngestOutcome,
    Lane, Minute, NewEvent, Node, Purged, Retained, Stats, Swept, TakeLimits, Taken, FAN_OUT_TRIES,
    IDEMPOTENCY_WINDOW_MS, MAX_ENDPOINT_SIZE, NO_LANE,
};
pub use types::{ARCHIVE_PAGE_BYTES, ARCHIVE_PAGE_EVENTS};
