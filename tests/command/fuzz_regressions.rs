//! Inputs saved by fuzzing (fuzz/regressions/<target>/), replayed through the same calls and
//! assertions as the fuzz targets: `fuzz/checks.rs` is shared with fuzz/fuzz_targets/*.rs.
//! A test marked `#[ignore = "BUG: ..."]` fails until herald is fixed; remove the mark then.
//!
//! To add one: copy the crashing input from fuzz/artifacts/<target>/ to
//! fuzz/regressions/<target>/<what-it-is>, and add a test below.

#[path = "../../fuzz/checks.rs"]
#[allow(dead_code)]
mod checks;

use std::path::Path;

/// Every file in `dir` (relative to the repository), sorted, as `(name, bytes)`.
fn files(dir: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// The hand-written seed corpora pass every check (so the fuzz targets start from valid ground,
/// and a change to herald that breaks a rule on an ordinary input shows up in `cargo test`).
#[test]
fn seeds_pass_the_fuzz_checks() {
    type Check = fn(&[u8]);
    let targets: [(&str, Check); 3] = [
        ("ingest_body", checks::ingest_body),
        ("config_toml", checks::config_toml),
        ("endpoint_url", checks::endpoint_url),
    ];
    for (target, check) in targets {
        let seeds = files(&format!("fuzz/seeds/{target}"));
        assert!(!seeds.is_empty(), "no seeds for {target}");
        for (name, data) in seeds {
            eprintln!("{target}/{name}");
            check(&data);
        }
    }
}

/// `payload: {"location_id": 5, "note": "\ud800"}`: a lone surrogate escape is valid JSON
/// grammar, but serde_json cannot read it into a Value: `debounce::key_of` used to parse the
/// whole payload and then returned None, so the event was silently not debounced although its
/// `location_id` is there. Ingest now refuses it (not I-JSON, docs/api.md), and the checks hold
/// that an accepted payload parses; `debounce::key_of` still reads the top-level field alone,
/// for events older versions stored.
#[test]
fn ingest_lone_surrogate_payload_is_refused_or_debounced() {
    checks::ingest_body(include_bytes!(
        "../../fuzz/regressions/ingest_body/lone-surrogate-payload.json"
    ));
}

/// `retry_policies.x = ["580000000000y"]` passes validate, and the first retry after a failed
/// attempt panics in `retry::next_delay`: `Duration::mul_f64` with +10 % jitter overflows
/// ("cannot convert float seconds to Duration: value is either too big or NaN"), in release
/// builds too.
#[test]
fn config_huge_retry_delay_does_not_panic() {
    checks::config_toml(include_bytes!(
        "../../fuzz/regressions/config_toml/retry-delay-jitter-panic.toml"
    ));
}

/// Durations above i64::MAX milliseconds (about 292 million years) pass validate; herald then
/// casts them `as Millis` and adds them to now, which wraps in release builds (and panics with
/// overflow checks on): a retry "in 300 million years" is due at once, retention prunes
/// everything, disable_after disables an endpoint at its first failure, a rotated secret expires
/// at once, a debounce window closes before it opens.
#[test]
fn config_durations_beyond_i64_millis_are_refused() {
    for text in [
        &include_bytes!("../../fuzz/regressions/config_toml/retention-wraps.toml")[..],
        include_bytes!("../../fuzz/regressions/config_toml/disable-after-wraps.toml"),
        include_bytes!("../../fuzz/regressions/config_toml/rotation-grace-wraps.toml"),
        include_bytes!("../../fuzz/regressions/config_toml/retry-delay-wraps.toml"),
        include_bytes!("../../fuzz/regressions/config_toml/debounce-window-overflows.toml"),
    ] {
        checks::config_toml(text);
    }
}

/// `64:ff9b:1:0:7f7f:7f7f:7f7f:7f7f`, a local-use NAT64 address carrying 127.127.127.127, with
/// `127.0.0.0/8` on the allow-list: the guard lets the IPv4 address through and then refuses the
/// address as local-use NAT64 (its gateway sits inside the network), where the default guard
/// refuses it as loopback. The check had asked for the default's name and failed on it.
#[test]
fn endpoint_url_local_nat64_behind_an_allowed_ipv4_is_refused_as_nat64() {
    checks::endpoint_url(include_bytes!(
        "../../fuzz/regressions/endpoint_url/local-nat64-loopback-allowed"
    ));
}
