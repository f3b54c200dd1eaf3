//! What the stores hold read back through herald's backup archive (both stores), and the
//! embedded store's own files under faults: a full disk or a file-size limit, a power cut under
//! herald, and the stores older versions wrote (migrated in place). The contract's conformance
//! suite is `herald-store`'s kit, run by each store's crate.

#[path = "../common/mod.rs"]
mod common;

mod archive;
mod faults;
mod powerloss;
mod upgrade;
