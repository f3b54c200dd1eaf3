//! Pure policy: decisions as plain functions over values, shared by the layers above (the
//! config checks URLs and CIDRs with them, the store decides debounce windows and quotas inside
//! its writes, the engine asks the breaker and the retry schedule). Nothing here does I/O or
//! keeps state of its own.
//!
//! - [`alerts`]: which failure alert mails go out (an endpoint's alert mark).
//! - [`breaker`]: the circuit breaker's state machine.
//! - [`cidr`]: CIDR ranges for the SSRF guard's allow-list.
//! - [`conditions`]: the ordered delivery conditions (docs/delivery-contract.md).
//! - [`debounce`]: debounce windows at ingest.
//! - [`ordering`]: which sequence of an ordered endpoint a delivery joins.
//! - [`quota`]: the fixed per-minute and per-day windows.
//! - [`retry`]: which outcomes are retried and the delay before the next attempt.
//! - [`routing`]: which endpoints take an event (types, channels, payload filter), and why not.
//! - [`schema`]: catalog payload schemas (JSON Schema 2020-12).
//! - [`ssrf`]: which addresses herald may connect to.
//! - [`tokens`]: the token bucket of an endpoint's rate limit.
//! - [`url`]: endpoint URL checks.

pub mod alerts;
pub mod breaker;
pub mod cidr;
pub mod conditions;
pub mod debounce;
pub mod ordering;
pub mod quota;
pub mod retry;
pub mod routing;
pub mod schema;
pub mod ssrf;
pub mod tokens;
pub mod url;
