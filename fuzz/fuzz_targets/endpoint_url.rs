//! Endpoint URLs and the SSRF guard: `check_endpoint_url` with and without an allow-list,
//! `refused_range` and `Guard::check` on arbitrary IPv4/IPv6 addresses, and the agreement between
//! them. Input layout and the rules checked, and why, are in `fuzz/checks.rs`.
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::endpoint_url(data));
