//! The config file: arbitrary UTF-8 through `Config::parse` and `Config::validate`, then what
//! herald derives at start from a config that passed. The rules checked, and why, are in
//! `fuzz/checks.rs`.
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::config_toml(data));
