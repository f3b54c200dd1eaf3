//! `POST /v1/events` bodies: arbitrary bytes through `herald::api::ingest::parse_event` (with the
//! default config and with a strict catalog whose one type is debounced) and through
//! `herald::api::body::parse`. The rules checked, and why, are in `fuzz/checks.rs`.
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::ingest_body(data));
