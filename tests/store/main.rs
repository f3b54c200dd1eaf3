//! The storage contract's conformance suite, run against both stores, and the embedded store's
//! own files under faults: a full disk or a file-size limit, a power cut under herald, and the
//! stores older versions wrote (migrated in place).
// These tests open the stores themselves (clippy.toml keeps the engine and the API from it).
#![allow(clippy::disallowed_types)]

#[path = "../common/mod.rs"]
mod common;

mod conformance;
mod faults;
mod powerloss;
mod upgrade;
