//! The herald command and what ships beside the server: `check-config`, the OpenAPI document
//! as clients check it, the receiver snippets with the official libraries, the systemd unit,
//! the generated files the packages ship (man pages, completions, config), and the fuzzers'
//! regressions.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod fuzz_regressions;
mod openapi;
mod packaging;
mod snippets;
mod systemd;
