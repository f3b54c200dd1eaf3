//! Logging via `tracing`: human-readable text by default, one JSON object per line with
//! `log.format = "json"`. Secrets are never passed to a log macro anywhere in herald.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::Log;

/// Installs the global subscriber. `RUST_LOG`, when set, overrides `log.level`.
pub fn init(cfg: &Log) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if cfg.format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.with_ansi(ansi).try_init()
    };
    // A second init (tests starting several servers in one process) keeps the first subscriber.
    drop(result);
}
