//! Values the store tests build: an endpoint as the API would store it (the contract's
//! conformance kit's, made at `at`).

// Not every test binary that includes the common modules builds endpoints.
#[allow(unused_imports)]
pub use herald_store::conformance::endpoint_at as endpoint;
