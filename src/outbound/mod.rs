//! Everything that leaves herald: the HTTP client, the SSRF guard, and request signing.
//!
//! This module never touches storage: it is handed bytes and headers and answers with an
//! [`client::Outcome`]. Deciding what an outcome means (retry, fail, disable) is the engine's job.

pub mod client;
pub mod request;
pub mod sign;
pub mod ssrf;
pub mod url;
