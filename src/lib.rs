//! herald: a single-binary, self-hosted webhook delivery appliance.
//!
//! # Layout
//!
//! Data flows one way: `api` -> `store` (durable) -> `engine` (decide) -> `outbound` (send) ->
//! `store` (record). `api` never sends HTTP, `outbound` never touches the store, `engine` decides and
//! `store` remembers. Below them all sit the shared vocabulary (`model`, `ids`, `clock`,
//! `filter`), the pure decisions (`policy`) and `signing`, in the `herald-core` crate, which
//! imports nothing above it. Storage is in crates of its own (`crates/`): the contract
//! (`herald-store`), its two implementations, which see neither each other nor herald, and
//! `herald-backend`, which opens the one the config names. herald depends on the contract and
//! `herald-backend` only, so nothing here can name a store's own type.
//!
//! - [`alerts`]: failure alert mails: decided off the delivery path, sent over SMTP with
//!   rustls, retried, counted.
//! - [`app`]: `run(config, listener, clock, shutdown)`: opens the store, starts the API and the
//!   engine, tears them down in order.
//! - [`backup`]: online backup and restore on the store contract, and the archive's format.
//! - [`cli`]: the `herald` command's subcommands and flags (clap), shared by the binary and
//!   the generated man pages and completions.
//! - [`config`]: the TOML file: structs, compiled-in defaults, validation with key paths.
//! - [`clock`]: wall time that gets stored (`SystemClock`, `ManualClock` for tests).
//! - [`filter`]: endpoints' payload filters: the language, compiled once, matched at fan-out.
//! - [`ids`]: prefixed, time-sortable ids (`evt_`, `ep_`, `dlv_`, `att_` + ULID).
//! - [`model`]: the shared vocabulary: `Plan`, `Endpoint`, `Event`, `Delivery`, `Attempt`,
//!   `Status`.
//! - [`policy`]: pure decisions: breaker, conditions, debounce windows, quota windows, retry
//!   schedule, the SSRF guard and its CIDRs, endpoint URL checks, alerts.
//! - [`signing`]: Standard Webhooks signatures and secret formats.
//! - [`store`]: the storage contract (`herald-store`) and `Backend` (`herald-backend`), the
//!   store herald runs on (sled on one box, PostgreSQL for a cluster), and the store's
//!   settings from the config: the event and delivery log, the queue, the directory, the
//!   charts' per-minute counts, the data directory's privacy.
//! - [`api`]: the hyper 1.x HTTP API: connection limits, routing, auth, JSON errors, one file
//!   per resource.
//! - [`engine`]: the delivery loop, attempts, endpoint health, the charts' counts, verification,
//!   retention sweeps.
//! - [`outbound`]: the HTTP client (rustls, timeouts, no redirects, body cap), checked
//!   connections and the signed request.
//! - [`receive`]: the `herald receive` tool for trying herald out.
//! - [`shutdown`]: one shutdown signal passed explicitly, and the grace period helper.
//! - [`metrics`]: Prometheus counters and histograms, rendered at `GET /metrics`.
//! - [`telemetry`]: tracing setup.
//! - [`traces`]: OpenTelemetry spans of requests and attempts, exported over OTLP.
//! - [`tls`]: the TLS client setup deliveries and the cluster's database share (roots, CA file).
#![forbid(unsafe_code)]

// The core's modules (the `herald-core` crate), under the names the rest of herald uses.
pub use herald_core::{clock, filter, histogram, ids, model, policy, shutdown, signing, trace};

pub mod alerts;
pub mod api;
pub mod app;
pub mod backup;
pub mod cli;
pub mod config;
pub mod engine;
pub mod metrics;
pub mod outbound;
pub mod receive;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod traces;

/// The version in `user-agent` and `/v1/status`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What `herald --version` prints after the name: the version, then the git commit, the build
/// date (UTC), the target and the store features this binary was built with (`build.rs`).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit:   ",
    env!("HERALD_GIT_COMMIT"),
    "\nbuilt:    ",
    env!("HERALD_BUILD_DATE"),
    "\ntarget:   ",
    env!("HERALD_TARGET"),
    "\nfeatures: ",
    env!("HERALD_FEATURES"),
);
