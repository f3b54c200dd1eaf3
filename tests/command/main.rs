//! The herald command and what ships beside the server: `check-config`, the OpenAPI document
//! as clients check it, the receiver snippets with the official libraries, the systemd unit,
//! and the fuzzers' regressions.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod fuzz_regressions;
mod openapi;
mod snippets;
mod systemd;
