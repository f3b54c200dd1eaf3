//! Everything that leaves herald: the HTTP client and the signed request.
//!
//! This module never touches storage: it is handed bytes and headers and answers with an
//! [`client::Outcome`]. Deciding what an outcome means (retry, fail, disable) is the engine's job;
//! which addresses may be reached is [`crate::policy::ssrf`]'s.

pub mod client;
pub mod connect;
pub mod identity;
pub mod request;
