//! What the Debian package and the release tarball ship beside the binary (packaging/): the man
//! pages and shell completions, generated from the clap definitions (`herald::cli::Cli`), and
//! the packaged config, generated from `config.example.toml`. The generated files are committed
//! so that packaging needs no extra tool; these tests regenerate them and fail, naming the stale
//! file, when the committed copy differs. `HERALD_BLESS=1 cargo test --test command packaging`
//! rewrites them instead (after a change to the command line, the config keys or the version).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::common::herald::herald_bin;

/// `storage.path` in the packaged config: the systemd unit's `StateDirectory=herald`.
const PACKAGED_STORAGE_PATH: &str = "/var/lib/herald";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn blessing() -> bool {
    std::env::var_os("HERALD_BLESS").is_some_and(|v| v == "1")
}

/// The command as the man pages describe it. The long version names the commit and the build
/// date, which would make every commit's pages differ; the pages name the version alone.
fn cli() -> clap::Command {
    herald::cli::Cli::command().long_version(None)
}

/// herald(1) and a page per subcommand (file name -> contents), as generated now.
fn generated_man_pages() -> BTreeMap<String, Vec<u8>> {
    let out = tempfile::tempdir().expect("temp dir");
    clap_mangen::generate_to(cli(), out.path()).expect("generate the man pages");
    let mut pages = read_dir(out.path());
    if let Some(page) = pages.get_mut("herald.1") {
        page.extend_from_slice(HERALD_1_FILES.as_bytes());
    }
    pages
}

/// What herald(1) says beyond the command line: where the packaged herald keeps things.
const HERALD_1_FILES: &str = r".SH FILES
.TP
\fI/etc/herald/herald.toml\fR
The config file the systemd unit (herald.service) starts herald with; \fBherald check\-config\fR checks it.
.TP
\fI/var/lib/herald\fR
The data directory (the unit's StateDirectory; the files are in /var/lib/private/herald): the store, the delivery log and every endpoint's signing secret.
.SH SEE ALSO
\fI/usr/share/doc/herald/README.md\fR, \fI/usr/share/doc/herald/docs/operations.md\fR
";

fn generated_completions() -> BTreeMap<String, Vec<u8>> {
    [
        (Shell::Bash, "herald.bash"),
        (Shell::Zsh, "_herald"),
        (Shell::Fish, "herald.fish"),
    ]
    .into_iter()
    .map(|(shell, name)| {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut cli(), "herald", &mut text);
        (name.to_string(), text)
    })
    .collect()
}

/// The files of `dir` (file name -> contents); none when it does not exist.
fn read_dir(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| e.expect("read dir entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read generated file"))
        })
        .collect()
}

/// Compares `want` with the files committed in `dir`; with `HERALD_BLESS=1` makes `dir` hold
/// exactly `want` instead. The failure names every stale, missing or extra file.
fn check_or_bless(dir: &Path, want: &BTreeMap<String, Vec<u8>>) {
    let have = read_dir(dir);
    if blessing() {
        std::fs::create_dir_all(dir).expect("create dir");
        for name in have.keys().filter(|n| !want.contains_key(*n)) {
            std::fs::remove_file(dir.join(name)).expect("remove extra file");
        }
        for (name, text) in want {
            if have.get(name) != Some(text) {
                std::fs::write(dir.join(name), text).expect("write generated file");
            }
        }
        return;
    }
    let rel = dir
        .strip_prefix(repo())
        .unwrap_or(dir)
        .display()
        .to_string();
    let mut problems = Vec::new();
    for (name, text) in want {
        match have.get(name) {
            None => problems.push(format!("{rel}/{name} is missing")),
            Some(old) if old != text => problems.push(format!("{rel}/{name} is stale")),
            Some(_) => {}
        }
    }
    for name in have.keys().filter(|n| !want.contains_key(*n)) {
        problems.push(format!("{rel}/{name} is not generated any more"));
    }
    assert!(
        problems.is_empty(),
        "{}\nregenerate with: HERALD_BLESS=1 cargo test --test command packaging",
        problems.join("\n")
    );
}

#[test]
fn man_pages_match_the_command_line() {
    let pages = generated_man_pages();
    // herald(1) and one page per subcommand.
    assert!(pages.contains_key("herald.1"));
    for sub in cli().get_subcommands().filter(|s| !s.is_hide_set()) {
        let page = format!("herald-{}.1", sub.get_name());
        assert!(pages.contains_key(&page), "no {page}");
    }
    check_or_bless(&repo().join("packaging/man"), &pages);
}

#[test]
fn shell_completions_match_the_command_line() {
    check_or_bless(
        &repo().join("packaging/completions"),
        &generated_completions(),
    );
}

/// The packaged `/etc/herald/herald.toml`: `config.example.toml` with every key commented out as
/// `#key = default`, but `storage.path`, set for the unit's state directory. The example's own
/// commented lines (`# key = ...`, keys not set by default) stay as they are.
fn packaged_config(example: &str) -> String {
    let mut out = String::from(
        "# /etc/herald/herald.toml, installed by the herald Debian package. It is a conffile: an\n\
         # upgrade keeps your changes (and asks when both you and the package changed it).\n\
         # Every key is shown with its built-in default as `#key = default`: uncomment a line to\n\
         # change it. storage.path is set for the systemd unit (StateDirectory=herald; the data is\n\
         # in /var/lib/private/herald, reached through /var/lib/herald). With no admin token\n\
         # configured herald writes one to /var/lib/herald/admin.token and logs that path; to give\n\
         # tokens yourself, use systemd credentials and admin_token_file (docs/operations.md),\n\
         # never this file, which every user can read. Durations are strings: \"300ms\", \"5s\",\n\
         # \"10h\", \"5d\". Check the file with: herald check-config /etc/herald/herald.toml\n",
    );
    let mut section = String::new();
    // The example's opening comment says what the header above says for this file.
    let body = example.lines().skip_while(|l| l.starts_with('#'));
    for line in body {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
        }
        let key = line.split_once(" = ").map(|(k, _)| k);
        let is_key = key.is_some_and(|k| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if section == "storage" && key == Some("path") {
            out.push_str(&format!("path = {PACKAGED_STORAGE_PATH:?}\n"));
        } else if is_key {
            out.push('#');
            out.push_str(line);
            out.push('\n');
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every `#key = value` line made live again: the example's keys and values.
fn uncommented(packaged: &str) -> String {
    packaged
        .lines()
        .map(|line| match line.strip_prefix('#') {
            Some(rest) if rest.starts_with(|c: char| c.is_ascii_alphanumeric()) => rest,
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn packaged_config_is_the_example_with_only_storage_path_set() {
    let example = std::fs::read_to_string(repo().join("config.example.toml")).expect("example");
    let packaged = packaged_config(&example);
    let path = repo().join("packaging/herald.toml");
    let committed = std::fs::read_to_string(&path).ok();
    if blessing() {
        if committed.as_deref() != Some(packaged.as_str()) {
            std::fs::write(&path, &packaged).expect("write packaging/herald.toml");
        }
    } else {
        assert!(
            committed.as_deref() == Some(packaged.as_str()),
            "packaging/herald.toml is stale (config.example.toml changed)\n\
             regenerate with: HERALD_BLESS=1 cargo test --test command packaging"
        );
    }

    // As installed, the file sets storage.path and nothing else (so no token, no secret)...
    let live: toml::Table = toml::from_str(&packaged).expect("packaged config is TOML");
    let set: Vec<String> = leaves(&live, "");
    assert_eq!(set, ["storage.path"], "keys set in packaging/herald.toml");
    assert_eq!(
        live["storage"]["path"].as_str(),
        Some(PACKAGED_STORAGE_PATH)
    );
    // ...and its commented defaults are exactly the example's keys and values.
    let all: toml::Table = toml::from_str(&uncommented(&packaged)).expect("uncommented");
    let mut want: toml::Table = toml::from_str(&example).expect("config.example.toml");
    let storage = want["storage"].as_table().cloned();
    if let Some(mut storage) = storage {
        storage.insert("path".into(), PACKAGED_STORAGE_PATH.into());
        want.insert("storage".into(), storage.into());
    }
    assert_eq!(leaves(&all, ""), leaves(&want, ""));
    assert_eq!(all, want);

    // herald itself accepts it.
    let out = Command::new(herald_bin())
        .arg("check-config")
        .arg(&path)
        .env("NO_COLOR", "1")
        .output()
        .expect("run herald check-config");
    assert!(
        out.status.success(),
        "herald check-config packaging/herald.toml: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The dotted paths of every value that is not a table, sorted.
fn leaves(table: &toml::Table, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (key, value) in table {
        let path = format!("{prefix}{key}");
        match value {
            toml::Value::Table(t) => out.extend(leaves(t, &format!("{path}."))),
            _ => out.push(path),
        }
    }
    out.sort();
    out
}

/// The package's changelog (packaging/debian/changelog) opens with this version's entry, as
/// Debian tools expect: a release adds its entry there with the version bump.
#[test]
fn debian_changelog_names_this_version() {
    let changelog = std::fs::read_to_string(repo().join("packaging/debian/changelog"))
        .expect("packaging/debian/changelog");
    let first = changelog.lines().next().unwrap_or_default();
    let want = format!("herald ({}-1) ", env!("CARGO_PKG_VERSION"));
    assert!(
        first.starts_with(&want),
        "packaging/debian/changelog opens with {first:?}: add an entry for {want}"
    );
}
