//! herald's core: the vocabulary every other part speaks and the decisions that need no I/O.
//! Nothing here imports storage, the engine or the API; the storage crates and herald itself
//! build on it.
//!
//! - [`clock`]: wall time that gets stored (`SystemClock`, `ManualClock` for tests).
//! - [`filter`]: endpoints' payload filters: the language, compiled once, matched at fan-out.
//! - [`histogram`]: the fixed-bucket histogram metrics are kept in.
//! - [`ids`]: prefixed, time-sortable ids (`evt_`, `ep_`, `dlv_`, `att_` + ULID).
//! - [`model`]: the shared vocabulary: `Plan`, `Endpoint`, `Event`, `Delivery`, `Attempt`,
//!   `Status`.
//! - [`policy`]: pure decisions: breaker, conditions, debounce windows, quota windows, retry
//!   schedule, the SSRF guard and its CIDRs, endpoint URL checks, alerts.
//! - [`shutdown`]: one shutdown signal passed explicitly, and the grace period helper.
//! - [`signing`]: Standard Webhooks signatures and secret formats.
//! - [`trace`]: the W3C trace context of an ingest request (`traceparent`, `tracestate`).
#![forbid(unsafe_code)]

pub mod clock;
pub mod filter;
pub mod histogram;
pub mod ids;
pub mod model;
pub mod policy;
pub mod shutdown;
pub mod signing;
pub mod trace;
