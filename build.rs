//! Build facts for `herald --version`: the git commit, the build date, the target and the store
//! features (`sled` always, `postgres` with the cluster store).
//!
//! - The commit is `HERALD_GIT_COMMIT` when set (a build outside a git checkout), else the
//!   checkout's `HEAD`, else `unknown`.
//! - The date is `SOURCE_DATE_EPOCH`'s when set (reproducible builds), else today's, in UTC.
//!   The script runs again when `HEAD` moves, so a build of a new commit has a new date (and
//!   only then: a build of an unchanged tree builds nothing).

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=HERALD_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // Only paths that exist: cargo takes a missing one as changed, and would run the script
    // (and build herald again) on every build.
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }

    let commit = std::env::var("HERALD_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(git_head)
        .unwrap_or_else(|| "unknown".into());
    let when = match std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(secs) => UNIX_EPOCH + Duration::from_secs(secs),
        None => SystemTime::now(),
    };
    let date = humantime::format_rfc3339_seconds(when).to_string();
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=HERALD_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=HERALD_BUILD_DATE={}", &date[..10]);
    println!("cargo:rustc-env=HERALD_TARGET={target}");
    let features = if std::env::var_os("CARGO_FEATURE_POSTGRES").is_some() {
        "sled, postgres"
    } else {
        "sled"
    };
    println!("cargo:rustc-env=HERALD_FEATURES={features}");
}

/// The checkout's `HEAD` commit, abbreviated to 12 characters.
fn git_head() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    let commit = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !commit.is_empty()).then_some(commit)
}
