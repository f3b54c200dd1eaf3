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
    // `HEAD`, the branch file it names and `packed-refs`, in the git directory git itself names
    // (a worktree's is not `.git/`), and only those that exist: cargo takes a missing one as
    // changed, and would run the script (and build herald again) on every build. Outside a git
    // checkout, the script itself: some `rerun-if-changed` must be said, or the env lines alone
    // would keep this script's first answer for good.
    let watched = git_files();
    if watched.is_empty() {
        println!("cargo:rerun-if-changed=build.rs");
    }
    for path in watched {
        println!("cargo:rerun-if-changed={}", path.display());
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

/// The files whose change moves `HEAD`'s commit: `HEAD`, the branch it names, `packed-refs`.
fn git_files() -> Vec<std::path::PathBuf> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    let Some(dir) = git(&["rev-parse", "--git-dir"]).map(std::path::PathBuf::from) else {
        return Vec::new();
    };
    let common = git(&["rev-parse", "--git-common-dir"])
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.clone());
    let mut files = vec![dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        files.push(common.join(branch));
    }
    files.retain(|p| p.exists());
    files
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
